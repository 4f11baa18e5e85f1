//! Kubernetes API machinery shared by the API server (`skiff-api`) and the client (`skiff-client`):
//! `Status` errors, label and field selectors, and what a served resource is called.
//!
//! It exists so that the server and the client agree on these by construction instead of each
//! carrying a copy. It knows nothing of the log and nothing of HTTP.
//!
//! # Layout
//! - [`resources`]: a resource's names, scope, verbs, subresources, storage keys, URL paths.
//! - [`intern`]: `'static` copies of the names of kinds defined at run time.
//! - [`status`]: `Status` error bodies, field errors and the typed [`ApiError`].
//! - [`labels`]: label selectors (`labelSelector=`, `metav1.LabelSelector`) and label name checks.
//! - [`fields`]: field selectors (`fieldSelector=`) and selectable fields.
//! - [`images`]: the default pull policy of an image reference.
//! - [`schedule`]: CronJob schedules and time zones, for the API server's validation and the
//!   CronJob controller alike.
//! - [`paging`]: `continue` tokens and the `resourceVersion` parameter of lists and watches.
//! - [`quantity`]: `resource.Quantity`: parsing, arithmetic, canonical form.
//! - [`quota`]: what a ResourceQuota may limit, selects and charges, for admission and the
//!   quota controller alike.
//! - [`stats`]: the kubelet's Summary API (CPU and memory of a node, its pods and containers),
//!   for the kubelet that serves it and the API server's metrics API that reads it.

pub mod fields;
pub mod images;
pub mod intern;
pub mod labels;
pub mod paging;
pub mod quantity;
pub mod quota;
pub mod resources;
pub mod schedule;
pub mod stats;
pub mod status;

pub use resources::{ResourceInfo, Subresource};
pub use status::ApiError;

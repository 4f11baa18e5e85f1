//! The Kubernetes API server: REST semantics (list-watch, resourceVersion, selectors, patch,
//! subresources, discovery, tables) over the revisioned log in `skiff-store`.
//!
//! Only this crate reads or writes the log; every other component goes through its HTTP API.
//!
//! # Layout
//! - [`routes`]: the HTTP front: which path goes where, authentication, body limits, and the one
//!   place errors become `Status` responses ([`error`]).
//! - [`limits`]: request admission limits (body size, requests in flight, watches per user,
//!   slow readers, slow headers), all in one place.
//! - [`handlers`]: every verb on every resource and subresource.
//! - [`registry`]: objects in the log: keys, encoding, resourceVersion, lists, compare-and-swap.
//! - [`origin`]: who made a change (the requesting user and groups), kept with each revision.
//! - [`admission`]: the admission chain.
//! - [`selectors`], [`render`]: label/field selectors; JSON, YAML and Table responses.
//! - [`server`]: the API server's state ([`server::ApiServer`]: the served kinds, the registry,
//!   admission, watches) and settings.
//! - What each kind is and how its objects are decoded, defaulted, validated, patched and shown
//!   is `skiff-kinds`' business; handlers ask the kind ([`skiff_kinds::Kind`]) they were routed to.
//! - [`crd`]: the definition controller, serving what CustomResourceDefinitions define.
//! - [`kubernetes_service`]: the `kubernetes` Service pointing at the API server itself.
//! - [`watch_cache`]: one store watch per resource fanned out to every API watch of it.
//! - [`discovery`], [`openapi`]: discovery documents and OpenAPI (v3, and v2 in JSON or protobuf)
//!   of the kinds served now.
//! - [`replay`]: the cluster's past from the log (objects at a point, history, changes, diffs)
//!   and its `/debug/skiff/` endpoints (Secrets' data shown only to who may `get` them).
//! - [`encryption`]: encryption at rest (`--encryption-provider-config`), a layer over the log.
//! - [`ui`]: the timeline page at `/ui/` over those endpoints, and its login sessions.
//! - [`bench`](mod@bench): `skiff bench api`, skiff's API against etcd 3.4 side by side.
//! - [`audit`]: the audit log (policy, `audit.k8s.io/v1` events, rotation).
//! - [`auth`], [`tls`], [`kubeconfig`], [`version`]: tokens, certificates, the admin kubeconfig,
//!   `/version` and health.
//! - [`eviction`]: `pods/eviction`, a delete that honours the pod's PodDisruptionBudget.
//! - [`proxy`]: the `proxy` subresources of pods, services and nodes.
//! - [`resource_metrics`]: `metrics.k8s.io` (`kubectl top`), read from the kubelets' summaries.
//! - [`aggregation`]: the aggregation layer (APIService): local APIServices, proxying to
//!   aggregated API servers with the front proxy's identity, their availability and discovery.
//! - [`serviceaccount`]: service-account tokens (TokenRequest, their authentication, TokenReview,
//!   OIDC discovery) and their signing key.

pub mod admission;
pub mod aggregation;
pub mod audit;
pub mod auth;
pub mod authz;
pub mod backends;
pub mod bench;
pub mod crd;
pub mod discovery;
pub mod encryption;
pub mod error;
pub mod eviction;
pub mod follow;
pub mod handlers;
pub mod kubeconfig;
pub mod kubernetes_service;
pub mod limits;
pub mod metrics;
pub mod mirror;
pub mod openapi;
pub mod origin;
pub mod proxy;
pub mod registry;
pub mod render;
pub mod replay;
pub mod request;
pub mod resource_metrics;
pub mod routes;
pub mod selectors;
pub mod server;
pub mod serviceaccount;
#[cfg(test)]
mod test_kinds;
pub mod tls;
pub mod ui;
pub mod version;
pub mod watch_cache;

pub use error::{Error, Result};
pub use routes::{insecure_routes, routes};

/// This package's directory, for tests that read its files (`testdata/`): where `cargo test`
/// says it is at run time, else where it was when the test was built. A test binary built in
/// another checkout of the workspace (CI's, sharing the build directory) then still reads this
/// checkout's files, not the other's.
#[cfg(test)]
pub(crate) fn package_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

//! The Kubernetes API server: REST semantics (list-watch, resourceVersion, selectors, patch,
//! subresources, discovery, tables) over the revisioned log in `skiff-store`.
//!
//! Only this crate reads or writes the log; every other component goes through its HTTP API.

pub mod auth;
pub mod discovery;
pub mod kubeconfig;
pub mod openapi;
pub mod table;
pub mod tls;
pub mod version;

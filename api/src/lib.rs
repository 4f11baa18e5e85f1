//! The Kubernetes API server: REST semantics (list-watch, resourceVersion, selectors, patch,
//! subresources, discovery, tables) over the revisioned log in `skiff-store`.
//!
//! Only this crate reads or writes the log; every other component goes through its HTTP API.

pub mod protobuf;

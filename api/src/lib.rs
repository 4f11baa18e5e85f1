//! The Kubernetes API server: REST semantics (list-watch, resourceVersion, selectors, patch,
//! subresources, discovery, tables) over the revisioned log in `skiff-store`.
//!
//! Only this crate reads or writes the log; every other component goes through its HTTP API.
//!
//! # Layout
//! - [`error`]: [`Error`] and its mapping to Kubernetes `Status` bodies (the one place).
//! - [`registry`]: objects in the log: keys, encoding, resourceVersion, lists, compare-and-swap.

pub mod error;
pub mod registry;

pub use error::{Error, Result};

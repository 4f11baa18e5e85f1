//! Kubernetes semantics that need neither HTTP nor the log: what each served kind is and how its
//! objects are decoded, defaulted, validated, prepared for a write (strategy), patched, decoded
//! from protobuf and shown as a Table.
//!
//! It is a crate of its own so that `skiff-api` is the server (routing, the registry over the
//! log, watches, discovery) and these rules can be built, tested and fuzzed without either.
//!
//! # Layout
//! - [`Kind`] (`kind`): what a served kind says about itself; [`builtin`]: one module per
//!   built-in kind; [`custom`]: the kinds CustomResourceDefinitions define; [`registry`]: the
//!   served kinds, changing at run time.
//! - [`typed`]: decoding through the k8s-openapi types (type errors, unknown fields).
//! - [`defaults`], [`validation`]: Kubernetes' defaulting and validation of the served kinds.
//! - [`strategy`]: what a create, update or status update may change; deletion and finalizers.
//! - [`patch`]: JSON, merge and strategic merge patches, server-side apply and managedFields.
//! - [`protobuf`]: decoding the Kubernetes protobuf request bodies kubectl 1.32+ sends.
//! - [`table`]: server-side Tables (`kubectl get` columns and cells).
//! - [`media`]: media ranges of Accept headers.

pub mod builtin;
pub mod custom;
pub mod defaults;
mod kind;
pub mod media;
pub mod patch;
pub mod protobuf;
pub mod registry;
pub mod strategy;
pub mod table;
pub mod typed;
pub mod validation;

pub use kind::{
    Checked, Kind, ScalePaths, SelectorShape, Source, Strategy, converts, to_served, to_stored,
};
pub use registry::{Kinds, Snapshot};

/// This package's directory, for tests that read its files (`testdata/`): where `cargo test`
/// says it is at run time, else where it was when the test was built. A test binary built in
/// another checkout of the workspace (CI's, sharing the build directory) then still reads this
/// checkout's files, not the other's.
#[cfg(test)]
pub(crate) fn package_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

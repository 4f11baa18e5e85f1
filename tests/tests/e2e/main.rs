//! End-to-end tests: the real `skiff` binary driven by kubectl, the Python client and kube-rs.
//!
//! One test binary per crate, its areas as modules: every integration binary links the whole
//! dependency tree again, and on a 2-core CI machine those links cost more than the tests run.

/// This package's directory, for tests that read its files: where `cargo test` says it is at
/// run time, else where it was at build time (a binary built in another checkout sharing the
/// build directory then reads this checkout's files).
fn package_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

mod aggregated;
mod aggregation;
mod api;
mod audit;
mod autoscaling;
mod chaos;
mod containerd;
mod crd;
mod dns;
mod encryption;
mod etcd;
mod ha;
mod identity;
mod ingress;
mod installs;
mod kubectl;
mod leader;
mod limits;
mod linearizable;
mod policies;
mod powercut;
mod rbac;
mod replay;
mod services;
mod split;
mod storage;
mod streaming;
mod top;
mod ui;
mod watching;
mod webhooks;
mod workloads;

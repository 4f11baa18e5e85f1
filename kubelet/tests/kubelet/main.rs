//! Integration tests of the kubelet: pods under the process runtime and under containerd (CRI),
//! a fake sandboxed runtime, node status, its HTTP server, and an agent against a real API
//! server.
//!
//! One test binary per crate, its areas as modules: every integration binary links the whole
//! dependency tree again, and on a 2-core CI machine those links cost more than the tests run.

mod cri;
mod e2e;
mod fake;
mod node_status;
mod pods;
mod server;

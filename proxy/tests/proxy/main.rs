//! Integration tests of the service proxy: the proxier, its metrics, and a proxy against a real cluster.
//!
//! One test binary per crate, its areas as modules: every integration binary links the whole
//! dependency tree again, and on a 2-core CI machine those links cost more than the tests run.

mod cluster;
mod metrics;
mod proxier;

//! Integration tests of the store: reads and writes, the model check (both backends: sled and
//! etcd), the etcd backend, migration between the two, crashes, power cuts, concurrency, archives and a full disk.
//!
//! One test binary per crate, its areas as modules: every integration binary links the whole
//! dependency tree again, and on a 2-core CI machine those links cost more than the tests run.

mod archive;
mod child;
mod concurrency;
mod contract;
mod corruption;
mod crash;
mod etcd;
mod linearizable;
mod migrate;
mod model;
mod nospace;
mod powercut;
mod store;

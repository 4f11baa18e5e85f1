//! The store's benchmark harness (used by `benches/throughput.rs` and `skiff bench store`).

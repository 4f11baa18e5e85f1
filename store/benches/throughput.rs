//! Concurrent throughput benchmarks (placeholder until written).
fn main() {}

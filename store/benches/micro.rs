//! Criterion micro benchmarks of the store's reads and single writes.
//!
//! `cargo bench -p skiff-store --bench micro`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use skiff_store::bench::bench_config;
use skiff_store::{KeyRange, Op, RangeRequest, Revision, SledStore, Store, Txn};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// 10,000 keys of 256 B written at revision `before`, then all overwritten once.
fn ranges(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(SledStore::open(bench_config(dir.path())).expect("open"));
    let before = rt.block_on(async {
        let value = skiff_store::bench::value(256, 1);
        let mut before = Revision::ZERO;
        for round in 0..2u8 {
            for chunk in (0..10_000).collect::<Vec<_>>().chunks(100) {
                let ops = chunk
                    .iter()
                    .map(|i| {
                        let mut v = value.clone();
                        v[0] = round;
                        Op::put(format!("/range/{i:08}"), v)
                    })
                    .collect();
                let txn = Txn {
                    compare: vec![],
                    success: ops,
                    failure: vec![],
                    tag: None,
                };
                store.txn(txn).await.expect("txn");
            }
            if round == 0 {
                before = store.status().revision;
            }
        }
        before
    });
    let mut group = c.benchmark_group("range");
    group.sample_size(10);
    group.bench_function("historical_10k_keys", |b| {
        b.iter(|| {
            let req = RangeRequest::new(KeyRange::prefix("/range/")).at(before);
            let resp = rt.block_on(store.range(req)).expect("range");
            assert_eq!(resp.kvs.len(), 10_000);
            black_box(resp)
        })
    });
    group.bench_function("current_10k_keys", |b| {
        b.iter(|| {
            let req = RangeRequest::new(KeyRange::prefix("/range/"));
            black_box(rt.block_on(store.range(req)).expect("range"))
        })
    });
    group.bench_function("current_limit_500", |b| {
        b.iter(|| {
            let req = RangeRequest::new(KeyRange::prefix("/range/")).limit(500);
            black_box(rt.block_on(store.range(req)).expect("range"))
        })
    });
    group.bench_function("get_one_key", |b| {
        b.iter(|| {
            let req = RangeRequest::new(KeyRange::key("/range/00004242"));
            black_box(rt.block_on(store.range(req)).expect("range"))
        })
    });
    group.finish();
    let mut group = c.benchmark_group("write");
    group.sample_size(20);
    let value = skiff_store::bench::value(1024, 2);
    let mut i = 0u64;
    group.bench_function("durable_put_1KiB_one_writer", |b| {
        b.iter(|| {
            i += 1;
            let key = format!("/put/{:06}", i % 1000).into_bytes();
            black_box(
                rt.block_on(store.put(key, value.clone(), None))
                    .expect("put"),
            )
        })
    });
    group.finish();
    rt.block_on(store.close()).expect("close");
}

criterion_group!(benches, ranges);
criterion_main!(benches);

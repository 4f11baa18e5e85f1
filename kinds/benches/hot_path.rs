//! The CPU of a ConfigMap's create and update in this crate (decode through the type, managed
//! fields, validation), per call, on the object `skiff bench api` writes. A measurement, not a
//! check: `cargo bench -p skiff-kinds --bench hot_path`.

use std::time::Instant;

use serde_json::{Value, json};
use skiff_kinds::patch::{Options, record_update};
use skiff_kinds::validation::{validate_create, validate_update};

const ROUNDS: usize = 20_000;

/// Nanoseconds per call of `f`, the best of three runs of `ROUNDS` calls.
fn per_call(mut f: impl FnMut()) -> f64 {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..ROUNDS {
                f();
            }
            start.elapsed().as_nanos() as f64 / ROUNDS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let kind = skiff_kinds::builtin::by_plural("configmaps");
    let kind = &*kind;
    let value: String = (0..1024).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "o-1", "namespace": "bench"},
                      "data": {"value": value}});
    let decoded = skiff_kinds::typed::decode(kind, &body).unwrap().object;
    let mut prepared = decoded.clone();
    skiff_kinds::strategy::prepare_for_create(kind, &mut prepared);
    let created = record_update(kind, None, prepared.clone(), &Options::new("bench"));
    assert!(validate_create(kind, &created, Some("bench")).is_empty());
    let mut changed = created.clone();
    changed["data"]["value"] = json!(format!("{value}!"));
    let updated = record_update(
        kind,
        Some(&created),
        changed.clone(),
        &Options::new("other"),
    );
    assert!(validate_update(kind, &updated, &created).is_empty());

    let decode = per_call(|| {
        std::hint::black_box(skiff_kinds::typed::decode(kind, &body).unwrap());
    });
    let managed_create = per_call(|| {
        let object: Value = prepared.clone();
        std::hint::black_box(record_update(kind, None, object, &Options::new("bench")));
    });
    let clone = per_call(|| {
        std::hint::black_box(prepared.clone());
    });
    let managed_update = per_call(|| {
        let object: Value = changed.clone();
        std::hint::black_box(record_update(
            kind,
            Some(&created),
            object,
            &Options::new("other"),
        ));
    });
    let changed_clone = per_call(|| {
        std::hint::black_box(changed.clone());
    });
    let valid_create = per_call(|| {
        std::hint::black_box(validate_create(kind, &created, Some("bench")));
    });
    let valid_update = per_call(|| {
        std::hint::black_box(validate_update(kind, &updated, &created));
    });
    println!("ns per call, best of 3 x {ROUNDS}:");
    println!("  typed decode            {decode:8.0}");
    println!("  managed fields, create  {:8.0}", managed_create - clone);
    println!(
        "  managed fields, update  {:8.0}",
        managed_update - changed_clone
    );
    println!("  validate create         {valid_create:8.0}");
    println!("  validate update         {valid_update:8.0}");
}

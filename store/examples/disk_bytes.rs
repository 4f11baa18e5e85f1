//! Disk bytes and CPU per durable put when every put creates a new key (as API creates do):
//! `write_bytes` (pages the process dirtied, what the device will be asked to write) and `wchar`
//! (bytes handed to `write`) from `/proc/self/io`, per put, and the process's CPU per put.
//!
//! ```sh
//! cargo run --release -p skiff-store --example disk_bytes            # 16 writers, 30,000 puts
//! W=256 N=30000 SIZE=1400 COMPRESSION=0 DIR=/some/fs cargo run --release -p skiff-store --example disk_bytes
//! ```
//!
//! Values are `SIZE` bytes, every other byte a random letter and the rest `x` (about as
//! compressible as a ConfigMap's JSON). Used for BENCHMARKS.md, "Disk bytes per write".
use skiff_store::*;
use std::sync::Arc;
use std::time::Instant;

fn io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap();
    let get = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().parse::<u64>().unwrap()))
            .unwrap()
    };
    (get("wchar: "), get("write_bytes: "))
}

fn cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

fn main() {
    let writers: usize = std::env::var("W")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let total: usize = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30000);
    let size: usize = std::env::var("SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1400);
    let dir = tempfile::tempdir_in(std::env::var("DIR").unwrap_or("/root/.cache".into())).unwrap();
    let mut config = Config::new(dir.path().join("db"));
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.compression = std::env::var("COMPRESSION").map_or(true, |v| v != "0");
    let compressed = config.compression;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = Arc::new(SledStore::open(config).unwrap());
        let (w0, b0) = io(); let c0 = cpu();
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut x: u64 = 0x9e3779b97f4a7c15 ^ w as u64;
                for i in (w..total).step_by(writers) {
                    let key = format!("/registry/configmaps/default/cm-{i:08}");
                    // JSON-ish: half random base64-ish, half repeated text
                    let mut v = Vec::with_capacity(size);
                    while v.len() < size {
                        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                        if v.len() % 2 == 0 { v.push(b'a' + (x % 26) as u8) } else { v.extend_from_slice(b"x") }
                    }
                    v.truncate(size);
                    store.put(key.into_bytes(), v, None).await.unwrap();
                }
            }));
        }
        for t in tasks { t.await.unwrap(); }
        let el = t0.elapsed();
        let (w1, b1) = io(); let c1 = cpu();
        let (flushes, commits) = store.commit_stats();
        println!("compression {} writers {writers} puts {total} size {size}: {:.0}/s, wchar/put {}, write_bytes/put {}, commits/flush {:.1}, dir {} MiB, cpu/put {:.0} us",
            compressed, total as f64 / el.as_secs_f64(), (w1 - w0) / total as u64, (b1 - b0) / total as u64,
            commits as f64 / flushes as f64, store.status().size_on_disk >> 20, (c1 - c0) * 1e6 / total as f64);
        store.close().await.unwrap();
    });
}

//! Concurrent store benchmarks that criterion does not fit: durable writes under 1/16/256 writers
//! next to raw sled and the disk's raw fsync rate, watch fan-out latency, reopen time, and data dir
//! size under steady churn. Prints a Markdown table.
//!
//! `cargo bench -p skiff-store --bench throughput` (env `SKIFF_BENCH_DIR` picks the file system,
//! default the system temp dir; `SKIFF_BENCH_REVISIONS` the size of the reopen case, default 1M;
//! `SKIFF_BENCH_ONLY` a comma list of sections: writes,range,watch,reopen,churn, and `layout`,
//! run only when named: raw sled under four key layouts; `SKIFF_BENCH_KINDS` a comma list of the
//! write workloads: put,txn3,nofsync).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use skiff_store::bench::{self, WriteKind, bench_config};
use skiff_store::{SledStore, Store};

/// sled copies tree nodes on every write; glibc malloc/free was ~30% of the 256-writer samples.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let base = std::env::var_os("SKIFF_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let only = std::env::var("SKIFF_BENCH_ONLY").unwrap_or_default();
    let want = |s: &str| only.is_empty() || only.split(',').any(|o| o == s);
    let dir = tempfile::tempdir_in(&base).expect("temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if want("writes") {
            writes(dir.path()).await;
        }
        if want("range") {
            range(dir.path()).await;
        }
        if want("watch") {
            watch(dir.path()).await;
        }
        if want("reopen") {
            reopen(dir.path()).await;
        }
        if want("churn") {
            churn(dir.path()).await;
        }
        if only.split(',').any(|o| o == "layout") {
            layout(dir.path()).await;
        }
    });
}

async fn writes(dir: &Path) {
    let fsyncs = bench::raw_fsyncs_per_sec(dir, Duration::from_secs(2)).expect("fsync probe");
    println!("\nraw fsyncs/s on this file system (512 B write + fdatasync loop): {fsyncs:.0}\n");
    println!(
        "| workload | writers | ops/s | commits per flush | bytes written per op | CPU per op | p50 | p99 | raw sled puts/s | store / raw sled |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let kinds = std::env::var("SKIFF_BENCH_KINDS").unwrap_or_default();
    let want_kind = |k: &str| kinds.is_empty() || kinds.split(',').any(|o| o == k);
    let only_writers: Option<usize> = std::env::var("SKIFF_BENCH_WRITERS")
        .ok()
        .and_then(|s| s.parse().ok());
    let mut by_thread = Vec::new();
    for (writers, total) in [(1usize, 2_000usize), (16, 20_000), (256, 100_000)] {
        if only_writers.is_some_and(|w| w != writers) {
            continue;
        }
        let raw = bench::raw_sled_writes(
            &dir.join(format!("raw-{writers}")),
            writers,
            total,
            1024,
            10_000,
        )
        .await
        .expect("raw sled");
        for kind in [WriteKind::Put, WriteKind::Txn3] {
            if !want_kind(match kind {
                WriteKind::Put => "put",
                WriteKind::Txn3 => "txn3",
            }) {
                continue;
            }
            let path = dir.join(format!("store-{writers}-{kind:?}"));
            let store = Arc::new(SledStore::open(bench_config(&path)).expect("open"));
            let threads0 = bench::thread_cpu_times();
            let r = bench::durable_writes(store.clone(), writers, total, 1024, 10_000, kind)
                .await
                .expect("writes");
            let threads1 = bench::thread_cpu_times();
            store.close().await.expect("close");
            by_thread.push((writers, kind, total, r.cpu_per_op, threads0, threads1));
            let name = match kind {
                WriteKind::Put => "put 1 KiB",
                WriteKind::Txn3 => "txn of 3 puts of 1 KiB",
            };
            let ratio = match kind {
                WriteKind::Put => format!("{:.2}", r.per_sec / raw.per_sec),
                WriteKind::Txn3 => "-".into(),
            };
            println!(
                "| {name} | {writers} | {:.0} | {:.1} | {:.0} | {:.0} µs | {} | {} | {:.0} | {ratio} |",
                r.per_sec,
                r.per_flush,
                r.written_per_op,
                r.cpu_per_op.as_secs_f64() * 1e6,
                ms(r.p50),
                ms(r.p99),
                raw.per_sec
            );
        }
        println!(
            "| raw sled put 1 KiB (same group commit) | {writers} | {:.0} | {:.1} | {:.0} | {:.0} µs | {} | {} | | |",
            raw.per_sec,
            raw.per_flush,
            raw.written_per_op,
            raw.cpu_per_op.as_secs_f64() * 1e6,
            ms(raw.p50),
            ms(raw.p99)
        );
    }
    // The same 256-writer put workload without the fdatasync after each group flush (sled's
    // `sync_file_range` only: survives a process crash, not necessarily power loss).
    if only_writers.is_none_or(|w| w == 256) && want_kind("nofsync") {
        let path = dir.join("store-256-no-fsync");
        let mut config = bench_config(&path);
        config.fsync = false;
        let store = Arc::new(SledStore::open(config).expect("open"));
        let r = bench::durable_writes(store.clone(), 256, 100_000, 1024, 10_000, WriteKind::Put)
            .await
            .expect("writes");
        store.close().await.expect("close");
        println!(
            "| put 1 KiB, `Config::fsync = false` (no fdatasync) | 256 | {:.0} | {:.1} | {:.0} | {:.0} µs | {} | {} | | |",
            r.per_sec,
            r.per_flush,
            r.written_per_op,
            r.cpu_per_op.as_secs_f64() * 1e6,
            ms(r.p50),
            ms(r.p99)
        );
    }
    // Where the CPU of each store workload went (threads that exited meanwhile, as sled's I/O
    // threads may, count as "other").
    println!();
    for (writers, kind, total, cpu_per_op, before, after) in by_thread {
        let mut parts = Vec::new();
        let mut named = Duration::ZERO;
        for (name, t1) in &after {
            let t0 = before.get(name).copied().unwrap_or_default();
            let per_op = t1.saturating_sub(t0) / total as u32;
            named += per_op;
            if !per_op.is_zero() {
                parts.push(format!("{name} {:.1}", per_op.as_secs_f64() * 1e6));
            }
        }
        parts.push(format!(
            "other {:.1}",
            cpu_per_op.saturating_sub(named).as_secs_f64() * 1e6
        ));
        println!(
            "CPU per op (µs) by thread, {kind:?}, {writers} writers: {}",
            parts.join(", ")
        );
    }
}

async fn range(dir: &Path) {
    let store = Arc::new(SledStore::open(bench_config(&dir.join("range"))).expect("open"));
    let (per_read, n) = bench::historical_range(store.clone(), 10_000, 20)
        .await
        .expect("range");
    println!(
        "\nhistorical range of {n} keys (each overwritten once since): {} per read",
        ms(per_read)
    );
    store.close().await.expect("close");
}

async fn watch(dir: &Path) {
    for (watchers, one_prefix) in [(1usize, true), (1000, false), (100, true), (1000, true)] {
        let path = dir.join(format!("watch-{watchers}-{one_prefix}"));
        let store = Arc::new(SledStore::open(bench_config(&path)).expect("open"));
        let r = bench::watch_latency(
            store.clone(),
            watchers,
            one_prefix,
            1000,
            Duration::from_secs(5),
            1024,
        )
        .await
        .expect("watch");
        store.close().await.expect("close");
        let shape = if one_prefix {
            "all watching one prefix (every put to every watcher)"
        } else {
            "each watching its own key"
        };
        println!(
            "\nwatch: {watchers} watchers, {shape}; {:.0} puts/s of 1 KiB: {} events delivered; \
             submit->delivery p50 {} p99 {}; the puts' own submit->ack p50 {} p99 {}",
            r.puts_per_sec,
            r.delivered,
            ms(r.p50),
            ms(r.p99),
            ms(r.put_p50),
            ms(r.put_p99)
        );
    }
}

async fn reopen(dir: &Path) {
    let revisions: usize = std::env::var("SKIFF_BENCH_REVISIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let path = dir.join("reopen");
    let start = std::time::Instant::now();
    bench::fill(&path, revisions, 128, 50_000, 256)
        .await
        .expect("fill");
    println!(
        "\nreopen: filled {revisions} revisions (128 B values over 50k keys) in {:.1} s; data dir {:.0} MiB",
        start.elapsed().as_secs_f64(),
        skiff_store::bench::dir_size(&path) as f64 / (1 << 20) as f64
    );
    // The first open after the writer closed replays sled's log since its previous open; once
    // with the data dir out of the kernel's page cache (as after a reboot), once from memory.
    let cold = dir.join("reopen-cold");
    copy_cold(&path, &cold).expect("copy the data dir");
    let (took, rev) = tokio::task::spawn_blocking(move || bench::reopen(&cold))
        .await
        .expect("join")
        .expect("reopen");
    println!(
        "reopen at revision {rev}, first open, data dir not in the page cache: {}",
        ms(took)
    );
    for _ in 0..3 {
        let (took, rev) = tokio::task::spawn_blocking({
            let path = path.clone();
            move || bench::reopen(&path)
        })
        .await
        .expect("join")
        .expect("reopen");
        println!("reopen at revision {rev}: {}", ms(took));
    }
}

/// Raw sled (no store) under the store's group commit, 256 writers, 1 KiB puts, for each key
/// layout: what sled itself costs for the store's layout and for etcd's. Only with
/// `SKIFF_BENCH_ONLY=layout`.
async fn layout(dir: &Path) {
    use skiff_store::bench::RawLayout;
    println!(
        "\n| raw sled layout, 256 writers, 1 KiB | puts/s | bytes written per put | CPU per put | p99 |"
    );
    println!("|---|---|---|---|---|");
    for round in 0..2 {
        for layout in [
            RawLayout::Overwrite,
            RawLayout::VersionPerKey,
            RawLayout::RevisionKeyed,
            RawLayout::OverwriteGroupLog,
        ] {
            let r = bench::raw_sled_layout_writes(
                &dir.join(format!("layout-{layout:?}-{round}")),
                256,
                100_000,
                1024,
                10_000,
                layout,
            )
            .await
            .expect("raw sled");
            println!(
                "| {layout:?} | {:.0} | {:.0} | {:.0} µs | {} |",
                r.per_sec,
                r.written_per_op,
                r.cpu_per_op.as_secs_f64() * 1e6,
                ms(r.p99)
            );
        }
    }
}

/// Copies the data dir `from` to a new dir `to`, syncs the copy and drops it from the kernel's
/// page cache, so that opening it reads from the disk.
fn copy_cold(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_cold(&entry.path(), &target)?;
            continue;
        }
        std::fs::copy(entry.path(), &target)?;
        let file = std::fs::File::open(&target)?;
        file.sync_all()?;
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)?;
    }
    Ok(())
}

async fn churn(dir: &Path) {
    let rounds: usize = std::env::var("SKIFF_BENCH_CHURN_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let path = dir.join("churn");
    let sizes = bench::churn_sizes(&path, 20_000, 1_000, 1024, 20_000, rounds)
        .await
        .expect("churn");
    println!(
        "\nchurn: 1,000 keys overwritten with 1 KiB values by 64 writers, retention 20,000 revisions"
    );
    println!("| revision | compacted | data dir MiB |");
    println!("|---|---|---|");
    for (rev, compacted, size) in sizes {
        println!(
            "| {rev} | {compacted} | {:.0} |",
            size as f64 / (1 << 20) as f64
        );
    }
}

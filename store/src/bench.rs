//! The store's benchmark harness, shared by `benches/throughput.rs` and `skiff bench store`.
//!
//! Every function measures one thing on a data dir under a directory the caller gives, and returns
//! numbers; printing is the caller's business. Nothing here asserts on time.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::{
    Config, KeyRange, Op, RangeRequest, Result, Revision, SledStore, Store, Txn, WatchRequest,
};

/// What a write benchmark writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// One put per revision.
    Put,
    /// A transaction of three puts per revision.
    Txn3,
}

/// The outcome of a write benchmark.
#[derive(Debug, Clone, Copy)]
pub struct WriteResult {
    /// Acknowledged (durable) operations per second: puts, or transactions for [`WriteKind::Txn3`].
    pub per_sec: f64,
    /// Flushes (fsyncs) done by the group commit during the run.
    pub flushes: u64,
    /// Operations acknowledged, divided by flushes: how many commits each fsync carried.
    pub per_flush: f64,
    /// Bytes this process handed to `write` calls per operation (sled's log writes: the write
    /// amplification).
    pub written_per_op: f64,
    /// CPU time (user + system, all threads of this process) per operation.
    pub cpu_per_op: Duration,
    /// Median and 99th percentile latency of one operation.
    pub p50: Duration,
    /// See `p50`.
    pub p99: Duration,
}

/// A value of `size` bytes that does not compress to nothing.
pub fn value(size: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Bytes handed to `write` calls by this process so far (Linux `/proc/self/io`, `wchar`).
pub fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines().find_map(|l| {
                l.strip_prefix("wchar: ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// CPU time (user + system) this process has used so far (Linux `/proc/self/stat`).
pub fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    // Linux reports in USER_HZ, 100 per second on every mainstream configuration.
    Duration::from_millis(ticks * 10)
}

/// CPU time (user + system) of each live thread of this process so far, summed by thread name
/// with a trailing `-<number>` dropped (`sled-io-4` counts as `sled-io`), from Linux
/// `/proc/self/task`. Threads that exited are not in it: compare the sum with [`cpu_time`].
pub fn thread_cpu_times() -> std::collections::BTreeMap<String, Duration> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("", |(_, n)| n);
        let name = match name.rsplit_once('-') {
            Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base,
            _ => name,
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
            + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
        *out.entry(name.to_string()).or_insert(Duration::ZERO) += Duration::from_millis(ticks * 10);
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// A config for benchmarks: the defaults, automatic retention off unless asked
/// (`SKIFF_BENCH_CACHE_MIB`: sled's cache size; `SKIFF_BENCH_FSYNC=0`: [`Config::fsync`] off;
/// `SKIFF_BENCH_KEEP_VERSIONS=<n>`: keep only the newest `n` versions of each `/bench/` key;
/// `SKIFF_BENCH_COMPRESSION=0`: [`Config::compression`] off).
pub fn bench_config(path: &Path) -> Config {
    let mut config = Config::new(path);
    if let Some(mib) = std::env::var("SKIFF_BENCH_CACHE_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config.cache_capacity = mib << 20;
    }
    if std::env::var("SKIFF_BENCH_FSYNC").is_ok_and(|v| v == "0") {
        config.fsync = false;
    }
    if std::env::var("SKIFF_BENCH_COMPRESSION").is_ok_and(|v| v == "0") {
        config.compression = false;
    }
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    if let Some(n) = std::env::var("SKIFF_BENCH_KEEP_VERSIONS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        // Per-prefix retention over the benchmark's keys: each put also prunes the key's oldest
        // version, so history leaves stop growing (sled splits a leaf past 16 entries).
        config.prefix_retention = vec![crate::PrefixRetention {
            prefix: b"/bench/".to_vec(),
            max_versions: n,
        }];
    }
    config
}

/// `writers` concurrent tasks write `total` operations (of `kind`, values of `value_size` bytes,
/// spread over `keys` keys) to `store`, each waiting for its acknowledgement before the next.
pub async fn durable_writes(
    store: Arc<SledStore>,
    writers: usize,
    total: usize,
    value_size: usize,
    keys: usize,
    kind: WriteKind,
) -> Result<WriteResult> {
    let (flushes0, _) = store.commit_stats();
    let written0 = bytes_written();
    let cpu0 = cpu_time();
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let val = value(value_size, w as u64);
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= total {
                    return Ok::<_, crate::Error>(latencies);
                }
                let t = Instant::now();
                let key = |j: usize| format!("/bench/{:08}", (i * 3 + j) % keys).into_bytes();
                match kind {
                    WriteKind::Put => {
                        store.put(key(0), val.clone(), None).await?;
                    }
                    WriteKind::Txn3 => {
                        let ops = (0..3).map(|j| Op::put(key(j), val.clone())).collect();
                        store
                            .txn(Txn {
                                compare: vec![],
                                success: ops,
                                failure: vec![],
                                tag: None,
                            })
                            .await?;
                    }
                }
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    for t in tasks {
        latencies.extend(t.await.expect("writer task panicked")?);
    }
    let elapsed = start.elapsed();
    let (flushes1, _) = store.commit_stats();
    let written = bytes_written() - written0;
    let cpu = cpu_time().saturating_sub(cpu0);
    latencies.sort();
    let flushes = flushes1 - flushes0;
    Ok(WriteResult {
        per_sec: total as f64 / elapsed.as_secs_f64(),
        flushes,
        per_flush: total as f64 / flushes.max(1) as f64,
        written_per_op: written as f64 / total as f64,
        cpu_per_op: cpu / total.max(1) as u32,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
    })
}

/// What [`raw_sled_layout_writes`] inserts for each put, to compare key layouts on raw sled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawLayout {
    /// Overwrite the key in place (the yardstick, [`raw_sled_writes`]).
    Overwrite,
    /// Insert a new key `<key> <seq>` holding the value: every version of a key next to the
    /// others, as the store's history records are.
    VersionPerKey,
    /// Insert `<seq>` holding the key and value (appended at the right edge) and an empty index
    /// entry `<key> <seq>`: etcd's layout (revision-keyed records plus a key index).
    RevisionKeyed,
    /// Per run of puts the inserter found queued (at most 256), one atomic `apply_batch` that
    /// overwrites each key in place and inserts one record `<seq>` holding all of their keys
    /// and values, appended at the right edge: a layout whose current versions are overwritten
    /// and whose history lives only in one log record per group commit.
    OverwriteGroupLog,
}

/// Raw sled under the same group commit and workload as [`durable_writes`] with
/// [`WriteKind::Put`]: one thread inserts, one thread flushes once per group and acknowledges;
/// no revisions, no history, no index. The yardstick for the store's overhead.
pub async fn raw_sled_writes(
    dir: &Path,
    writers: usize,
    total: usize,
    value_size: usize,
    keys: usize,
) -> Result<WriteResult> {
    raw_sled_layout_writes(dir, writers, total, value_size, keys, RawLayout::Overwrite).await
}

/// [`raw_sled_writes`] with what each put inserts chosen by `layout` (no store logic: a probe
/// of what sled itself costs for each layout).
pub async fn raw_sled_layout_writes(
    dir: &Path,
    writers: usize,
    total: usize,
    value_size: usize,
    keys: usize,
    layout: RawLayout,
) -> Result<WriteResult> {
    type Job = (Vec<u8>, Vec<u8>, tokio::sync::oneshot::Sender<()>);
    let db = sled::Config::new()
        .path(dir)
        .cache_capacity(256 << 20)
        .flush_every_ms(Some(1000))
        .open()?;
    let flushes = Arc::new(AtomicU64::new(0));
    let (job_tx, mut job_rx) = tokio::sync::mpsc::channel::<Job>(4096);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<()>>();
    let inserter = {
        let db = db.clone();
        std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut log: Vec<u8> = Vec::new();
            let mut batch = sled::Batch::default();
            let mut held: Vec<tokio::sync::oneshot::Sender<()>> = Vec::new();
            let write_log = |seq: u64,
                             log: &mut Vec<u8>,
                             batch: &mut sled::Batch,
                             held: &mut Vec<tokio::sync::oneshot::Sender<()>>|
             -> bool {
                if held.is_empty() {
                    return true;
                }
                let mut rec = vec![b'l'];
                rec.extend_from_slice(&seq.to_be_bytes());
                batch.insert(rec, std::mem::take(log));
                db.apply_batch(std::mem::take(batch)).expect("apply_batch");
                held.drain(..).all(|ack| done_tx.send(ack).is_ok())
            };
            loop {
                let job = match job_rx.try_recv() {
                    Ok(job) => Some(job),
                    Err(_) => {
                        if !write_log(seq, &mut log, &mut batch, &mut held) {
                            return;
                        }
                        job_rx.blocking_recv()
                    }
                };
                let Some((k, v, ack)) = job else {
                    return;
                };
                seq += 1;
                match layout {
                    RawLayout::Overwrite => {
                        db.insert(k, v).expect("insert");
                    }
                    RawLayout::VersionPerKey => {
                        let mut key = vec![b'h'];
                        key.extend_from_slice(&k);
                        key.extend_from_slice(&seq.to_be_bytes());
                        db.insert(key, v).expect("insert");
                    }
                    RawLayout::RevisionKeyed => {
                        // Two plain inserts (not atomic: a probe of sled's cost, not a store).
                        let mut rec = vec![b'r'];
                        rec.extend_from_slice(&seq.to_be_bytes());
                        let mut body = k.clone();
                        body.extend_from_slice(&v);
                        db.insert(rec, body).expect("insert");
                        let mut index = vec![b'i'];
                        index.extend_from_slice(&k);
                        index.extend_from_slice(&seq.to_be_bytes());
                        db.insert(index, &[][..]).expect("insert");
                    }
                    RawLayout::OverwriteGroupLog => {
                        log.extend_from_slice(&(k.len() as u32).to_be_bytes());
                        log.extend_from_slice(&k);
                        log.extend_from_slice(&(v.len() as u32).to_be_bytes());
                        log.extend_from_slice(&v);
                        batch.insert(k, v);
                        held.push(ack);
                        if held.len() >= 256 && !write_log(seq, &mut log, &mut batch, &mut held) {
                            return;
                        }
                        continue;
                    }
                }
                if done_tx.send(ack).is_err() {
                    return;
                }
            }
        })
    };
    let flusher = {
        let db = db.clone();
        let flushes = flushes.clone();
        std::thread::spawn(move || {
            while let Ok(first) = done_rx.recv() {
                let mut group = vec![first];
                while let Ok(more) = done_rx.try_recv() {
                    group.push(more);
                }
                db.flush().expect("flush");
                flushes.fetch_add(1, Ordering::Relaxed);
                for ack in group {
                    let _ = ack.send(());
                }
            }
        })
    };
    let next = Arc::new(AtomicU64::new(0));
    let written0 = bytes_written();
    let cpu0 = cpu_time();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let job_tx = job_tx.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let val = value(value_size, w as u64);
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= total {
                    return latencies;
                }
                let t = Instant::now();
                let (tx, rx) = tokio::sync::oneshot::channel();
                let key = format!("/bench/{:08}", (i * 3) % keys).into_bytes();
                job_tx
                    .send((key, val.clone(), tx))
                    .await
                    .expect("inserter gone");
                rx.await.expect("flusher gone");
                latencies.push(t.elapsed());
            }
        }));
    }
    drop(job_tx);
    let mut latencies = Vec::with_capacity(total);
    for t in tasks {
        latencies.extend(t.await.expect("writer task panicked"));
    }
    let elapsed = start.elapsed();
    inserter.join().expect("inserter panicked");
    flusher.join().expect("flusher panicked");
    let written = bytes_written() - written0;
    let cpu = cpu_time().saturating_sub(cpu0);
    latencies.sort();
    let flushes = flushes.load(Ordering::Relaxed);
    Ok(WriteResult {
        per_sec: total as f64 / elapsed.as_secs_f64(),
        flushes,
        per_flush: total as f64 / flushes.max(1) as f64,
        written_per_op: written as f64 / total as f64,
        cpu_per_op: cpu / total.max(1) as u32,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
    })
}

/// fsyncs per second of a small write + `fdatasync` loop on a file in `dir`, for `duration`.
pub fn raw_fsyncs_per_sec(dir: &Path, duration: Duration) -> Result<f64> {
    use std::io::{Seek, SeekFrom, Write};
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path)?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        file.seek(SeekFrom::Start((n % 64) * 512))?;
        file.write_all(&[n as u8; 512])?;
        file.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    std::fs::remove_file(&path)?;
    Ok(rate)
}

/// Writes `keys` keys, overwrites them all, then times a read of all of them at the revision
/// before the overwrite (a historical range). Returns (time per read, keys read).
pub async fn historical_range(
    store: Arc<SledStore>,
    keys: usize,
    reads: usize,
) -> Result<(Duration, usize)> {
    let val = value(256, 7);
    let write_all = |round: u8| {
        let store = store.clone();
        let val = val.clone();
        async move {
            for chunk in (0..keys).collect::<Vec<_>>().chunks(100) {
                let ops = chunk
                    .iter()
                    .map(|i| {
                        let mut v = val.clone();
                        v[0] = round;
                        Op::put(format!("/range/{i:08}"), v)
                    })
                    .collect();
                store
                    .txn(Txn {
                        compare: vec![],
                        success: ops,
                        failure: vec![],
                        tag: None,
                    })
                    .await?;
            }
            Ok::<_, crate::Error>(store.status().revision)
        }
    };
    let before = write_all(1).await?;
    write_all(2).await?;
    let mut n = 0;
    let start = Instant::now();
    for _ in 0..reads {
        let resp = store
            .range(RangeRequest::new(KeyRange::prefix("/range/")).at(before))
            .await?;
        n = resp.kvs.len();
    }
    Ok((start.elapsed() / reads.max(1) as u32, n))
}

/// Fills a data dir at `path` with `revisions` revisions (puts of `value_size` bytes over
/// `keys` keys, `writers` at a time), then closes it.
pub async fn fill(
    path: &Path,
    revisions: usize,
    value_size: usize,
    keys: usize,
    writers: usize,
) -> Result<()> {
    let store = Arc::new(SledStore::open(bench_config(path))?);
    durable_writes(
        store.clone(),
        writers,
        revisions,
        value_size,
        keys,
        WriteKind::Put,
    )
    .await?;
    store.close().await?;
    Ok(())
}

/// Opens the data dir at `path` and reports how long the open took and the revision it found.
pub fn reopen(path: &Path) -> Result<(Duration, Revision)> {
    let start = Instant::now();
    let store = SledStore::open(bench_config(path))?;
    let took = start.elapsed();
    let rev = store.status().revision;
    drop(store);
    Ok((took, rev))
}

/// The outcome of [`watch_latency`].
#[derive(Debug, Clone, Copy)]
pub struct WatchResult {
    /// Events delivered (across all watchers).
    pub delivered: u64,
    /// Submission of a put to its delivery at a watcher: median.
    pub p50: Duration,
    /// ... 99th percentile.
    pub p99: Duration,
    /// The puts' own latency (submission to durable acknowledgement): median.
    pub put_p50: Duration,
    /// ... 99th percentile.
    pub put_p99: Duration,
    /// Puts per second achieved.
    pub puts_per_sec: f64,
}

/// `watchers` watchers while puts of `value_size` bytes to 1,000 keys arrive at `rate` per second
/// for `duration`. With `one_prefix` every watcher watches all 1,000 keys (each put is delivered
/// to every watcher); otherwise watcher `i` watches key `i` only. Each put carries its submission
/// time; each watcher records when it got it.
pub async fn watch_latency(
    store: Arc<SledStore>,
    watchers: usize,
    one_prefix: bool,
    rate: u64,
    duration: Duration,
    value_size: usize,
) -> Result<WatchResult> {
    let origin = Instant::now();
    let start_rev = store.status().revision;
    let total = (rate as f64 * duration.as_secs_f64()) as u64;
    let mut watch_tasks = Vec::new();
    let key = |i: u64| format!("/watch/{:04}", i % 1000);
    for w in 0..watchers as u64 {
        let (range, expected) = if one_prefix {
            (KeyRange::prefix("/watch/"), total)
        } else {
            (
                KeyRange::key(key(w)),
                (0..total).filter(|i| i % 1000 == w).count() as u64,
            )
        };
        let mut stream = store
            .watch(WatchRequest::new(range, Some(start_rev.next())))
            .await?;
        watch_tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(expected as usize);
            while (lat.len() as u64) < expected {
                let Some(Ok(resp)) = stream.next().await else {
                    break;
                };
                let now = origin.elapsed();
                for e in resp.events {
                    let sent = u64::from_le_bytes(e.kv.value[..8].try_into().expect("stamp"));
                    lat.push(now.saturating_sub(Duration::from_nanos(sent)));
                }
            }
            lat
        }));
    }
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let put_start = Instant::now();
    let mut puts = Vec::with_capacity(total as usize);
    let filler = value(value_size.max(8), 3);
    for i in 0..total {
        ticker.tick().await;
        let store = store.clone();
        let mut v = filler.clone();
        let submitted = origin.elapsed();
        v[..8].copy_from_slice(&(submitted.as_nanos() as u64).to_le_bytes());
        puts.push(tokio::spawn(async move {
            let t = Instant::now();
            store.put(key(i).into_bytes(), v, None).await?;
            Ok::<_, crate::Error>(t.elapsed())
        }));
    }
    let mut put_lat = Vec::with_capacity(puts.len());
    for p in puts {
        put_lat.push(p.await.expect("put task panicked")?);
    }
    let puts_per_sec = total as f64 / put_start.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    for t in watch_tasks {
        lat.extend(t.await.expect("watcher task panicked"));
    }
    lat.sort();
    put_lat.sort();
    Ok(WatchResult {
        delivered: lat.len() as u64,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        put_p50: percentile(&put_lat, 0.5),
        put_p99: percentile(&put_lat, 0.99),
        puts_per_sec,
    })
}

/// Steady churn: `writers` overwrite `keys` keys for `rounds` rounds of `per_round` puts under a
/// retention of `keep` revisions; returns after each round the revision, the compacted revision
/// and the data dir size in bytes.
pub async fn churn_sizes(
    path: &Path,
    keep: u64,
    keys: usize,
    value_size: usize,
    per_round: usize,
    rounds: usize,
) -> Result<Vec<(Revision, Revision, u64)>> {
    let mut config = bench_config(path);
    config.retention.max_revisions = Some(keep);
    config.retention.interval = Duration::from_millis(500);
    let store = Arc::new(SledStore::open(config)?);
    let mut sizes = Vec::new();
    for _ in 0..rounds {
        durable_writes(
            store.clone(),
            64,
            per_round,
            value_size,
            keys,
            WriteKind::Put,
        )
        .await?;
        let status = store.status();
        sizes.push((status.revision, status.compacted, dir_size(path)));
    }
    store.close().await?;
    Ok(sizes)
}

/// Bytes used by the files under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    crate::engine::dir_size(dir)
}

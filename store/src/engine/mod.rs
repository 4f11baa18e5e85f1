//! [`SledStore`]: the [`Store`] on sled 0.34 — opening, shared state, and the contract's methods.
//! An [`Engine`] is one opening of a data dir; [`SledStore`] (`recover.rs`) holds the current one
//! and replaces it when sled fails with an I/O error.

mod import;
mod maintenance;
mod mark;
pub(crate) mod read;
mod recover;
mod snapshot;
mod space;
mod watch;
mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};
use crate::keys;
use crate::record::{HistRecord, LogGroup, decode_u64};
use crate::types::*;
use crate::{Store, WatchStream};

pub use import::Importer;
pub use recover::SledStore;
use writer::{Command, LeaseState, LeaseTable};

/// Called once when an [`Engine`] is poisoned.
pub(crate) type FaultHook = Box<dyn Fn() + Send + Sync>;

/// How [`SledStore`] is set up. `Config::new(path)` gives the defaults below.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data dir (created if missing).
    pub path: PathBuf,
    /// Values over this many bytes are refused with [`Error::ValueTooLarge`] before anything is
    /// written. Default 4 MiB (the API server accepts 3 MiB request bodies).
    pub max_value_size: usize,
    /// Automatic compaction of the whole history.
    pub retention: Retention,
    /// Tighter retention for high-churn key prefixes (the most specific matching prefix applies).
    pub prefix_retention: Vec<PrefixRetention>,
    /// Recent entries kept in memory for watchers; a watcher further behind reads the log on disk.
    /// Default 8192.
    pub watch_ring: usize,
    /// Responses buffered per watcher before its task waits for the consumer. Default 256.
    pub watch_buffer: usize,
    /// sled's page cache, in bytes: the tree nodes it keeps decoded in memory, counted at their
    /// size there (not their compressed size on disk). The writer's table of newest versions
    /// takes a quarter as much again, at most 64 MiB. Default 256 MiB.
    pub cache_capacity: u64,
    /// Also `fdatasync` sled's file after each group flush. sled 0.34 flushes with
    /// `sync_file_range` on Linux, which puts the data on the device (it survives a crash of the
    /// process) but neither flushes the device's write cache nor the file's metadata; this adds a
    /// real `fdatasync` per group, for durability across power loss, at the cost of one disk
    /// cache flush per group. Default true: an acknowledged write must survive losing power, as
    /// etcd's do; turn it off only for throwaway data.
    pub fsync: bool,
    /// How often, at most, the flusher records the durable revision in the data dir's durable
    /// mark (see `engine/mark.rs`), against which opening detects a log cut short by damage.
    /// Default 1 s; only with [`Config::fsync`].
    pub mark_interval: Duration,
    /// Open a log that ends below its durable mark (damage cut sled's recovery short) instead of
    /// failing with [`Error::Corrupt`]: the writes past its end are given up and the mark is
    /// reset. For `skiff repair`, after the operator chose that over restoring an archive.
    pub accept_lost_writes: bool,
    /// Bytes kept free on the file system holding the data dir: a transaction that puts values is
    /// refused with [`Error::NoSpace`] (nothing of it written, reads unaffected) when it would
    /// leave less free, and writes succeed again as soon as there is room (see `engine/space.rs`).
    /// Default 64 MiB; 0 turns the guard off (sled then meets the full disk itself, and the store
    /// reopens to recover).
    pub disk_reserve: u64,
    /// Compress the log's messages (zstd, its fastest level) in a data dir this creates. Kubernetes
    /// objects are JSON, and sled rewrites each tree node many times over: compressed, a write
    /// costs the disk about a third of the bytes, for some CPU. A data dir keeps the setting it
    /// was created with. Default true.
    pub compression: bool,
}

impl Config {
    /// The defaults, with the data dir at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Config {
        Config {
            path: path.into(),
            max_value_size: 4 << 20,
            retention: Retention::default(),
            prefix_retention: Vec::new(),
            watch_ring: 8192,
            watch_buffer: 256,
            cache_capacity: 256 << 20,
            fsync: true,
            mark_interval: Duration::from_secs(1),
            accept_lost_writes: false,
            disk_reserve: 64 << 20,
            compression: true,
        }
    }
}

impl Default for Config {
    /// The defaults with the data dir `skiff-data` in the working directory.
    fn default() -> Config {
        Config::new("skiff-data")
    }
}

/// Automatic compaction: history is kept while it is within the last `max_revisions` revisions
/// and within `max_age` of now; whichever limit is tighter decides (`None` disables a limit).
///
/// The defaults keep 100,000 revisions and at most 24 hours — enough to read back what happened
/// while debugging, bounded so that steady churn does not grow the data dir without end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Keep at most this many of the newest revisions.
    pub max_revisions: Option<u64>,
    /// Keep only revisions committed within this long (the state at `now - max_age` stays
    /// readable).
    pub max_age: Option<Duration>,
    /// How often the policy is applied. Default 10 s.
    pub interval: Duration,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            max_revisions: Some(100_000),
            max_age: Some(Duration::from_secs(24 * 3600)),
            interval: Duration::from_secs(10),
        }
    }
}

/// Keeps only the newest `max_versions` versions (puts and deletes) of each key under `prefix`
/// (a few more while the newest are not yet durable). A read or watch that would need a pruned
/// version fails with [`Error::Compacted`] naming the prefix. Meant for keys that change all the
/// time (node Leases renewed every 10 s, Events), so that they do not swamp everything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixRetention {
    /// The key prefix.
    pub prefix: Vec<u8>,
    /// Versions kept per key (at least 1).
    pub max_versions: u64,
}

/// One committed revision as the watchers see it: every event with its previous version.
#[derive(Debug)]
pub(crate) struct Entry {
    pub revision: u64,
    /// The transaction's tag ([`Txn::tag`](crate::Txn::tag)), for the log record.
    pub tag: Option<Vec<u8>>,
    pub events: Vec<Change>,
}

/// An [`Event`] whose key-values are shared with the writer's newest versions and the replies:
/// a value is copied only when a watcher or a caller takes its own [`Event`] or [`KeyValue`].
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub kind: EventKind,
    pub kv: Arc<KeyValue>,
    pub prev_kv: Option<Arc<KeyValue>>,
}

impl Change {
    /// An owned event (`prev_kv` only if asked for).
    pub fn to_event(&self, prev_kv: bool) -> Event {
        Event {
            kind: self.kind,
            kv: KeyValue::clone(&self.kv),
            prev_kv: if prev_kv {
                self.prev_kv.as_deref().cloned()
            } else {
                None
            },
        }
    }
}

/// The hash maps of the write path: keys are hashed several times per write, and SipHash was a
/// fifth of the writer thread's time. foldhash is seeded per process (keys come from clients).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Counters for benchmarks and `skiff bench store`.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Flushes (fsyncs) done by the group commit.
    pub flushes: AtomicU64,
    /// Commands acknowledged by them.
    pub commits: AtomicU64,
}

/// State shared by the handle, the writer and flusher threads, the maintenance thread and the
/// watcher tasks.
pub(crate) struct Shared {
    pub db: sled::Db,
    pub path: PathBuf,
    pub config: Config,
    /// The newest durable revision: readers read here. Written only by the flusher.
    durable: AtomicU64,
    /// Watchers to wake when entries in their range become durable.
    pub registry: Mutex<watch::Registry>,
    /// The oldest readable revision. Raised before compaction removes anything.
    compacted: AtomicU64,
    /// Per-prefix watermarks: the oldest revision still readable for keys under the prefix.
    /// Raised (by the writer) before the versions they protect are removed.
    pub watermarks: RwLock<BTreeMap<Vec<u8>, u64>>,
    /// Recent entries for watchers. Lock order: never held with another lock.
    pub ring: RwLock<watch::Ring>,
    /// Leases. Lock order: never held with another lock except briefly `watermarks` by no one.
    pub leases: Mutex<LeaseTable>,
    /// Serialises compaction and snapshots.
    pub compaction: Mutex<()>,
    /// Snapshots in progress (per-prefix pruning pauses while > 0).
    pub snapshots: AtomicUsize,
    /// Cancelled on close or drop.
    pub shutdown: CancellationToken,
    /// Wakes the maintenance thread early (a new lease, shutdown).
    pub wake: (Mutex<bool>, Condvar),
    pub stats: Stats,
    /// sled's data file, for [`Config::fsync`].
    pub data_file: Option<std::fs::File>,
    /// Set by the applier when a batch failed to apply, or by the flusher when a flush failed:
    /// sled holds on to the error, so writes fail from then on (see [`Shared::poison`]).
    pub poisoned: Mutex<Option<sled::Error>>,
    /// Told once when the store is poisoned, to reopen it.
    on_fault: Option<FaultHook>,
    /// Work handed by the writer to the applier and not yet applied.
    inflight: (Mutex<usize>, Condvar),
}

impl Shared {
    /// The newest durable revision.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::SeqCst)
    }

    /// The error writes fail with once a batch failed to apply.
    pub fn poison_error(&self) -> Option<Error> {
        self.poisoned
            .lock()
            .expect("poison lock")
            .as_ref()
            .map(read::sled_err_copy)
    }

    /// Records that sled failed with `error` (the first error stays) and reports it once.
    pub fn poison(&self, error: sled::Error) {
        let first = {
            let mut poisoned = self.poisoned.lock().expect("poison lock");
            let first = poisoned.is_none();
            if first {
                *poisoned = Some(error);
            }
            first
        };
        if first && let Some(hook) = &self.on_fault {
            hook();
        }
    }

    /// Counts work handed to the applier.
    pub fn inflight_add(&self) {
        *self.inflight.0.lock().expect("inflight lock") += 1;
    }

    /// Counts work the applier is done with.
    pub fn inflight_done(&self) {
        let mut n = self.inflight.0.lock().expect("inflight lock");
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.inflight.1.notify_all();
        }
    }

    /// Work handed to the applier and not yet applied.
    pub fn inflight(&self) -> usize {
        *self.inflight.0.lock().expect("inflight lock")
    }

    /// Waits until the applier has applied everything handed to it.
    pub fn wait_applied(&self) {
        let mut n = self.inflight.0.lock().expect("inflight lock");
        while *n > 0 {
            n = self.inflight.1.wait(n).expect("inflight lock");
        }
    }

    /// The oldest readable revision.
    pub fn compacted(&self) -> u64 {
        self.compacted.load(Ordering::SeqCst)
    }

    /// Makes `entries` visible to watchers and `rev` the durable revision (flusher only).
    pub fn publish(&self, entries: &[Arc<Entry>], rev: u64) {
        if !entries.is_empty() {
            let mut ring = self.ring.write().expect("ring poisoned");
            for e in entries {
                ring.push(e.clone());
            }
        }
        if rev > self.durable() {
            self.durable.store(rev, Ordering::SeqCst);
        }
    }

    /// Wakes the watchers whose range holds a key written in `entries` (flusher only, after
    /// publishing them).
    pub fn dispatch(&self, entries: &[Arc<Entry>]) {
        if entries.is_empty() {
            return;
        }
        self.registry
            .lock()
            .expect("watch registry poisoned")
            .wake(entries);
    }

    pub fn wake_maintenance(&self) {
        let (lock, cvar) = &self.wake;
        *lock.lock().expect("wake poisoned") = true;
        cvar.notify_all();
    }

    /// The per-prefix retention rule for `key`: the most specific configured prefix.
    pub fn retention_for(&self, key: &[u8]) -> Option<&PrefixRetention> {
        self.config
            .prefix_retention
            .iter()
            .filter(|r| key.starts_with(&r.prefix))
            .max_by_key(|r| r.prefix.len())
    }

    /// Fails unless `rev` is at or above the global compaction.
    pub fn check_compacted(&self, rev: Revision) -> Result<()> {
        let compacted = self.compacted();
        if rev.0 < compacted {
            return Err(Error::Compacted {
                requested: rev,
                compacted: Revision(compacted),
                prefix: None,
            });
        }
        Ok(())
    }

    /// Fails unless the state of every key in `range` at `rev` is still complete.
    pub fn check_readable(&self, rev: Revision, range: &KeyRange) -> Result<()> {
        self.check_compacted(rev)?;
        let marks = self.watermarks.read().expect("watermarks poisoned");
        for (prefix, &mark) in marks.iter() {
            if rev.0 < mark && keys::range_overlaps_prefix(range, prefix) {
                return Err(Error::Compacted {
                    requested: rev,
                    compacted: Revision(mark),
                    prefix: Some(prefix.clone()),
                });
            }
        }
        Ok(())
    }

    /// The error for a version that should be in history but is not: the prefix retention that
    /// pruned it if there is one (more specific than the global compaction), else the global
    /// compaction, else (neither explains it) a corrupt store.
    pub fn explain_missing(&self, key: &[u8], rev: u64) -> Error {
        {
            let marks = self.watermarks.read().expect("watermarks poisoned");
            if let Some((prefix, &mark)) = marks
                .iter()
                .filter(|(p, m)| key.starts_with(p) && rev < **m)
                .max_by_key(|(p, _)| p.len())
            {
                return Error::Compacted {
                    requested: Revision(rev),
                    compacted: Revision(mark),
                    prefix: Some(prefix.clone()),
                };
            }
        }
        match self.check_compacted(Revision(rev)) {
            Err(e) => e,
            Ok(()) => self.corrupt(format!(
                "version {rev} of key {:?} is missing from history",
                String::from_utf8_lossy(key)
            )),
        }
    }

    pub fn corrupt(&self, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason,
        }
    }

    /// The commit time of `rev`, if its log entry is still there.
    fn time_of(&self, rev: u64) -> Result<Option<u64>> {
        Ok(read::log_group_of(&self.db, rev)?.and_then(|g| g.get(rev).map(|r| r.time)))
    }

    /// The oldest revision still in the log (a group straddling the compacted revision keeps
    /// entries below it, which are no longer part of the log).
    fn oldest_logged(&self) -> Result<Option<u64>> {
        let first = self
            .db
            .range(keys::log_key(0)..=keys::log_key(u64::MAX))
            .next();
        match first {
            None => Ok(None),
            Some(item) => {
                let (raw, value) = item.map_err(read::sled_err)?;
                let group = read::decode_log(&raw, &value)?;
                Ok(Some(group.first.max(self.compacted())))
            }
        }
    }

    /// The newest revision committed at or before `time` (see [`Store::revision_at`]).
    pub fn revision_at(&self, time: SystemTime) -> Result<Revision> {
        let t = time
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let durable = self.durable();
        let oldest = self.oldest_logged()?.unwrap_or(durable + 1).max(1);
        if oldest > durable {
            // Nothing in the log: the state has not changed since the compacted revision.
            return if self.compacted() == 0 {
                Ok(Revision(durable))
            } else {
                Err(Error::TimeBeforeHistory {
                    oldest: Revision(self.compacted()),
                })
            };
        }
        let time_of = |rev: u64| -> Result<u64> {
            self.time_of(rev)?.ok_or(Error::TimeBeforeHistory {
                oldest: Revision(self.compacted()),
            })
        };
        if time_of(oldest)? > t {
            // Before the first retained entry: only answerable if nothing was ever compacted.
            return if oldest == 1 {
                Ok(Revision::ZERO)
            } else {
                Err(Error::TimeBeforeHistory {
                    oldest: Revision(oldest),
                })
            };
        }
        // Invariant: time(lo) <= t; answer in [lo, hi].
        let (mut lo, mut hi) = (oldest, durable);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if time_of(mid)? <= t {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(Revision(lo))
    }
}

/// The log on sled: see the crate docs for the layout and invariants.
pub(crate) struct Engine {
    shared: Arc<Shared>,
    /// To the writer thread; `None` once closed.
    commands: Mutex<Option<mpsc::Sender<Command>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    watchers: TaskTracker,
    closed: AtomicBool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("path", &self.shared.path)
            .field("revision", &self.shared.durable())
            .finish()
    }
}

/// Whether `dir` holds anything other than sled's own files (then it is not ours to open).
fn foreign_contents(dir: &Path) -> Result<Option<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    if names.is_empty() {
        return Ok(None);
    }
    let is_sled = |n: &str| {
        n == "conf" || n == "db" || n == "blobs" || n.starts_with("snap.") || n == mark::FILE
    };
    if names.iter().any(|n| n == "db") && names.iter().all(|n| is_sled(n)) {
        return Ok(None);
    }
    let mut shown: Vec<&str> = names.iter().map(String::as_str).take(5).collect();
    shown.sort();
    Ok(Some(format!(
        "it holds files that are not a sled database ({})",
        shown.join(", ")
    )))
}

/// zstd's level for the log's messages: its fastest. Level 3 wrote as many bytes for Kubernetes
/// objects and cost more CPU (BENCHMARKS.md, "Disk bytes per write").
const COMPRESSION_LEVEL: i32 = 1;

/// sled's configuration for the data dir at `path`: compressed if it is new and `compress` says
/// so, else as it was created (sled refuses to change the setting of an existing database).
pub(crate) fn sled_config(path: &Path, compress: bool) -> sled::Config {
    let compressed = persisted_compression(path).unwrap_or(compress);
    sled::Config::new()
        .path(path)
        .use_compression(compressed)
        .compression_factor(COMPRESSION_LEVEL)
}

/// Whether the sled database at `path` was created compressed, from its `conf` file (text lines
/// then a 4-byte checksum, which sled checks when it opens); `None` if there is none to read.
pub(crate) fn persisted_compression(path: &Path) -> Option<bool> {
    let conf = std::fs::read(path.join("conf")).ok()?;
    let text = std::str::from_utf8(&conf[..conf.len().checked_sub(4)?]).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("use_compression: "))
        .and_then(|v| v.trim().parse().ok())
}

/// Opens sled, mapping its failures to the store's errors (a lock held by another process, a
/// damaged or foreign file). sled panics on some damaged files; that is a corrupt dir too.
fn open_sled(config: &Config) -> Result<sled::Db> {
    let path = config.path.clone();
    let sled_config = sled_config(&config.path, config.compression)
        .cache_capacity(config.cache_capacity)
        .flush_every_ms(Some(1000));
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || sled_config.open()));
    let corrupt = |reason: String| Error::Corrupt {
        path: path.clone(),
        reason,
    };
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(sled::Error::Io(io))) if io.to_string().contains("could not acquire lock") => {
            Err(Error::Locked { path: path.clone() })
        }
        Ok(Err(sled::Error::Io(io))) => Err(read::io_err(io)),
        Ok(Err(sled::Error::Corruption { at, .. })) => {
            Err(corrupt(format!("sled found corruption at {at:?}")))
        }
        Ok(Err(other)) => Err(corrupt(format!("sled refused it: {other}"))),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown".into());
            Err(corrupt(format!("sled panicked reading it: {msg}")))
        }
    }
}

/// What [`load`] finds in a data dir.
struct Loaded {
    revision: u64,
    compacted: u64,
    watermarks: BTreeMap<Vec<u8>, u64>,
    leases: LeaseTable,
    lease_next: u64,
    last_time: u64,
}

/// Checks the format record (writing it into an empty database) and reads the little start-up
/// needs: the newest log key, meta records, leases and their attachments. Never the history.
fn load(db: &sled::Db, path: &Path) -> Result<Loaded> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let bad = |e: Error| corrupt(e.to_string());
    match db.get(keys::META_FORMAT).map_err(read::sled_err)? {
        Some(format) if format.as_ref() == keys::FORMAT => {}
        Some(format) if format.as_ref() == keys::FORMAT_V1 => {
            return Err(corrupt(format!(
                "it was written in format {:?}, by an older build (one log record per revision); \
                 this build reads only {:?}: export its log with the older build (`Store::log`, \
                 the archive) and import it, or start from an empty data dir",
                String::from_utf8_lossy(keys::FORMAT_V1),
                String::from_utf8_lossy(keys::FORMAT)
            )));
        }
        Some(format) => {
            return Err(corrupt(format!(
                "unknown format {:?} (this build reads {:?})",
                String::from_utf8_lossy(&format),
                String::from_utf8_lossy(keys::FORMAT)
            )));
        }
        None if db.is_empty() && db.tree_names().len() <= 1 => {
            db.insert(keys::META_FORMAT, keys::FORMAT)
                .map_err(read::sled_err)?;
            db.flush().map_err(read::sled_err)?;
        }
        None => {
            return Err(corrupt(
                "a sled database without a skiff format record (another program's data?)".into(),
            ));
        }
    }
    let u64_meta = |key: &[u8], what| -> Result<u64> {
        match db.get(key).map_err(read::sled_err)? {
            Some(v) => decode_u64(&v, what).map_err(bad),
            None => Ok(0),
        }
    };
    let compacted = u64_meta(keys::META_COMPACTED, "compacted revision")?;
    let lease_next = u64_meta(keys::META_LEASE_NEXT, "next lease id")?.max(1);
    let (revision, last_time) = match db
        .range(keys::log_key(0)..=keys::log_key(u64::MAX))
        .next_back()
    {
        Some(item) => {
            let (raw, value) = item.map_err(read::sled_err)?;
            let group = read::decode_log(&raw, &value).map_err(bad)?;
            let newest = group.entries.last().expect("a log group is never empty");
            (group.last(), newest.time)
        }
        None => (compacted.saturating_sub(1), 0),
    };
    let mut watermarks = BTreeMap::new();
    for item in db.scan_prefix(keys::META_WATERMARK) {
        let (k, v) = item.map_err(read::sled_err)?;
        watermarks.insert(
            k[keys::META_WATERMARK.len()..].to_vec(),
            decode_u64(&v, "watermark").map_err(bad)?,
        );
    }
    let mut leases = LeaseTable::default();
    let now = Instant::now();
    for item in db.scan_prefix(keys::META_LEASE) {
        let (k, v) = item.map_err(read::sled_err)?;
        let id = decode_u64(&k[keys::META_LEASE.len()..], "lease id").map_err(bad)?;
        let ttl = Duration::from_millis(decode_u64(&v, "lease ttl").map_err(bad)?);
        // Expiry is measured again from the reopen, as etcd does.
        leases.leases.insert(
            id,
            LeaseState {
                ttl,
                deadline: now + ttl,
                keys: Default::default(),
            },
        );
    }
    for item in db.scan_prefix([keys::ATTACH]) {
        let (k, _) = item.map_err(read::sled_err)?;
        if k.len() < 9 {
            return Err(corrupt("malformed lease attachment".into()));
        }
        let id = decode_u64(&k[1..9], "lease id").map_err(bad)?;
        if let Some(state) = leases.leases.get_mut(&id) {
            state.keys.insert(k[9..].to_vec());
        }
    }
    Ok(Loaded {
        revision,
        compacted,
        watermarks,
        leases,
        lease_next,
        last_time,
    })
}

impl Engine {
    /// Opens (or creates) the data dir in `config.path`.
    ///
    /// Fails with [`Error::Locked`] if another process (or another open handle) holds it, and
    /// [`Error::Corrupt`] if it is not a skiff log. Start-up reads only the newest log key, the
    /// meta records and the leases, not the history, so it is fast however long the log is.
    pub fn open(config: Config, on_fault: Option<FaultHook>) -> Result<Engine> {
        let path = config.path.clone();
        if path.exists() {
            if !path.is_dir() {
                return Err(Error::Corrupt {
                    path,
                    reason: "it is not a directory".into(),
                });
            }
            if let Some(reason) = foreign_contents(&path)? {
                return Err(Error::Corrupt { path, reason });
            }
        }
        // A store this process just dropped releases the lock a few milliseconds late (sled's I/O
        // threads drop their handles after the last flush returns), so wait a little before
        // concluding that someone else holds it.
        let deadline = Instant::now() + Duration::from_secs(1);
        let db = loop {
            match open_sled(&config) {
                Err(Error::Locked { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                other => break other?,
            }
        };
        let loaded = load(&db, &path)?;
        let mark = if config.fsync {
            let mut mark = mark::Mark::open(&path, config.mark_interval).map_err(read::io_err)?;
            match mark::read(&path).map_err(read::io_err)? {
                Some(marked) if marked > loaded.revision && config.accept_lost_writes => {
                    tracing::warn!(
                        end = loaded.revision,
                        marked,
                        "the log ends below its durable mark: revisions {}..={marked} are given up",
                        loaded.revision + 1
                    );
                    mark.reset(loaded.revision).map_err(read::io_err)?;
                }
                Some(marked) if marked > loaded.revision => {
                    return Err(Error::Corrupt {
                        path,
                        reason: format!(
                            "the log ends at revision {} but revision {marked} was acknowledged \
                             before: a damaged record cut its recovery short. Restore the newest \
                             archive (`skiff import`), or give up the writes after revision {} \
                             with `skiff repair --accept-lost-writes`",
                            loaded.revision, loaded.revision
                        ),
                    });
                }
                _ => {}
            }
            Some(mark)
        } else {
            None
        };
        let data_file = if config.fsync {
            // sled creates its files without syncing the directories that name them: until
            // these are synced, a power cut can take the whole data dir with it, however often
            // the log itself was synced.
            sync_dirs(&path).map_err(read::io_err)?;
            Some(std::fs::File::open(path.join("db")).map_err(read::io_err)?)
        } else {
            None
        };
        let shared = Arc::new(Shared {
            db,
            path,
            ring: RwLock::new(watch::Ring::new(config.watch_ring)),
            config,
            durable: AtomicU64::new(loaded.revision),
            registry: Mutex::new(watch::Registry::default()),
            compacted: AtomicU64::new(loaded.compacted),
            watermarks: RwLock::new(loaded.watermarks),
            leases: Mutex::new(loaded.leases),
            compaction: Mutex::new(()),
            snapshots: AtomicUsize::new(0),
            shutdown: CancellationToken::new(),
            wake: (Mutex::new(false), Condvar::new()),
            stats: Stats::default(),
            data_file,
            poisoned: Mutex::new(None),
            on_fault,
            inflight: (Mutex::new(0), Condvar::new()),
        });
        let (command_tx, command_rx) = mpsc::channel(4096);
        let (work_tx, work_rx) = std::sync::mpsc::channel();
        let (applied_tx, applied_rx) = std::sync::mpsc::channel();
        let writer = writer::Writer {
            shared: shared.clone(),
            next_rev: loaded.revision + 1,
            last_time: loaded.last_time,
            lease_next: loaded.lease_next,
            out: work_tx,
            work_batches: Vec::new(),
            work_items: Vec::new(),
            latest: Default::default(),
            latest_bytes: 0,
            latest_capacity: writer::latest_capacity(shared.config.cache_capacity),
        };
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(Error::Io)
        };
        threads.push(spawn(
            "skiff-store-writer",
            Box::new(move || writer.run(command_rx)),
        )?);
        let s = shared.clone();
        threads.push(spawn(
            "skiff-store-apply",
            Box::new(move || writer::run_applier(s, work_rx, applied_tx)),
        )?);
        let s = shared.clone();
        threads.push(spawn(
            "skiff-store-flush",
            Box::new(move || writer::run_flusher(s, applied_rx, mark)),
        )?);
        let s = shared.clone();
        let tx = command_tx.clone();
        threads.push(spawn(
            "skiff-store-maint",
            Box::new(move || maintenance::run(s, tx)),
        )?);
        Ok(Engine {
            shared,
            commands: Mutex::new(Some(command_tx)),
            threads: Mutex::new(threads),
            watchers: TaskTracker::new(),
            closed: AtomicBool::new(false),
        })
    }

    /// The error that poisoned this opening, if one did.
    pub fn poison_error(&self) -> Option<Error> {
        self.shared.poison_error()
    }

    /// Stops the threads and waits for them (the watchers end by themselves, soon after).
    pub fn shut_down(&self) {
        for thread in self.shutdown_threads() {
            let _ = thread.join();
        }
    }

    /// Group-commit counters since open: (flushes, commands acknowledged by them).
    pub fn commit_stats(&self) -> (u64, u64) {
        (
            self.shared.stats.flushes.load(Ordering::Relaxed),
            self.shared.stats.commits.load(Ordering::Relaxed),
        )
    }

    fn sender(&self) -> Result<mpsc::Sender<Command>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.commands
            .lock()
            .expect("commands poisoned")
            .clone()
            .ok_or(Error::Closed)
    }

    async fn call<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Command) -> Result<T> {
        let (tx, rx) = oneshot::channel();
        self.sender()?
            .send(make(tx))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs `f` on the blocking pool (sled calls block).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Shared) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.check_open()?;
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || f(&shared))
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?
    }

    /// Checks sizes and duplicate keys before a transaction reaches the writer.
    fn validate(&self, txn: &Txn) -> Result<()> {
        txn.check_tag()?;
        let limit = self.shared.config.max_value_size;
        // Transactions are mostly a few operations: a short list is searched, a long one hashed.
        const SCAN: usize = 16;
        for branch in [&txn.success, &txn.failure] {
            if let [op] = branch.as_slice() {
                // One operation (a plain put or delete): nothing to collide with.
                if let Op::Put { value, .. } = op
                    && value.len() > limit
                {
                    return Err(Error::ValueTooLarge {
                        size: value.len(),
                        limit,
                    });
                }
                continue;
            }
            let mut put_keys: Vec<&[u8]> = Vec::new();
            let mut many: Option<std::collections::HashSet<&[u8], foldhash::fast::RandomState>> =
                None;
            for op in branch.iter() {
                if let Op::Put { key, value, .. } = op {
                    if value.len() > limit {
                        return Err(Error::ValueTooLarge {
                            size: value.len(),
                            limit,
                        });
                    }
                    let fresh = match &mut many {
                        Some(set) => set.insert(key.as_slice()),
                        None if put_keys.len() < SCAN => !put_keys.contains(&key.as_slice()),
                        None => {
                            let set = many.insert(put_keys.iter().copied().collect());
                            set.insert(key.as_slice())
                        }
                    };
                    if !fresh {
                        return Err(Error::DuplicateKey(key.clone()));
                    }
                    put_keys.push(key);
                }
            }
            for op in branch.iter() {
                if let Op::Delete { range, .. } = op
                    && let Some(key) = put_keys.iter().find(|k| range.contains(k))
                {
                    return Err(Error::DuplicateKey(key.to_vec()));
                }
            }
        }
        Ok(())
    }

    fn shutdown_threads(&self) -> Vec<JoinHandle<()>> {
        self.closed.store(true, Ordering::SeqCst);
        self.shared.shutdown.cancel();
        self.shared.wake_maintenance();
        self.commands.lock().expect("commands poisoned").take();
        std::mem::take(&mut *self.threads.lock().expect("threads poisoned"))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Detached: the threads finish what they hold (acknowledging durable writes) and exit.
        self.shutdown_threads();
    }
}

#[async_trait::async_trait]
impl Store for Engine {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.check_open()?;
        let durable = Revision(self.shared.durable());
        let rev = match request.revision {
            None => durable,
            Some(r) if r > durable => {
                return Err(Error::FutureRevision {
                    requested: r,
                    current: durable,
                });
            }
            Some(r) => r,
        };
        self.shared.check_readable(rev, &request.range)?;
        let count = request.count;
        let single = request.range.end == RangeEnd::Single;
        let read = move |shared: &Shared| {
            let out = read::range_at(&shared.db, &request, rev.0)?;
            // Compaction or pruning may have raced the read: only an unaffected read stands.
            shared.check_readable(rev, &request.range)?;
            Ok(out)
        };
        // One key's versions sit in one or two tree nodes, nearly always cached: such a read
        // takes microseconds, less than the two thread hand-offs of the blocking pool would
        // (the API server reads one key for every get, update and admitted create). A range of
        // many keys may page in a lot, so it goes to the pool.
        let out = if single {
            read(&self.shared)?
        } else {
            self.blocking(read).await?
        };
        Ok(RangeResponse {
            kvs: out.kvs,
            more: out.more,
            count: count.then_some(out.count),
            revision: rev,
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.validate(&txn)?;
        self.call(|reply| Command::Txn { txn, reply }).await
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        self.check_open()?;
        let durable = self.shared.durable();
        let start = match request.start_revision {
            None => durable + 1,
            Some(r) if r.0 > durable + 1 => {
                return Err(Error::FutureRevision {
                    requested: r,
                    current: Revision(durable),
                });
            }
            Some(r) => r.0.max(1),
        };
        // Replaying from `start` needs every version from `start` on. (A previous value that was
        // pruned is reported when the watcher reaches it.)
        if start <= durable {
            self.shared
                .check_readable(Revision(start), &request.range)?;
        }
        let (tx, rx) = mpsc::channel(self.shared.config.watch_buffer.max(1));
        let watcher = watch::Watcher::new(self.shared.clone(), request, start, tx);
        self.watchers.spawn(watcher.run());
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn history(&self, key: &[u8]) -> Result<Vec<(Commit, Event)>> {
        let key = key.to_vec();
        self.blocking(move |shared| {
            let durable = shared.durable();
            let records = read::key_history(&shared.db, &key)?;
            let mut out = Vec::with_capacity(records.len());
            let mut prev: Option<KeyValue> = None;
            // Tags live in the log records; consecutive versions often share one.
            let mut group: Option<LogGroup> = None;
            for (rev, rec) in records {
                if rev > durable {
                    break;
                }
                if group.as_ref().is_none_or(|g| g.get(rev).is_none()) {
                    group = read::log_group_of(&shared.db, rev)?;
                }
                let commit = Commit {
                    time: std::time::UNIX_EPOCH + Duration::from_nanos(rec.time),
                    // A version whose log record compaction removed keeps its value only.
                    tag: group.as_ref().and_then(|g| g.get(rev)?.tag.clone()),
                };
                let event = read::record_event(&key, rev, &rec, prev.take());
                prev = read::record_kv(&key, rev, &rec, false);
                out.push((commit, event));
            }
            Ok(out)
        })
        .await
    }

    async fn log(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<LogEntry>> {
        let durable = self.shared.durable();
        let to = to.map_or(durable, |t| t.0.min(durable));
        let from = from.0.max(1);
        if from > to || limit == 0 {
            self.shared.check_compacted(Revision(from))?;
            return Ok(Vec::new());
        }
        let entries = self
            .blocking(move |shared| watch::read_log(shared, None, true, from, to, limit))
            .await?;
        Ok(entries)
    }

    async fn log_retained(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<(LogEntry, Vec<usize>)>> {
        let durable = self.shared.durable();
        let to = to.map_or(durable, |t| t.0.min(durable));
        let from = from.0.max(1);
        if from > to || limit == 0 {
            self.shared.check_compacted(Revision(from))?;
            return Ok(Vec::new());
        }
        let entries = self
            .blocking(move |shared| watch::read_log_retained(shared, from, to, limit))
            .await?;
        Ok(entries)
    }

    async fn retained_at(&self, revision: Revision) -> Result<Vec<KeyValue>> {
        if revision.0 > self.shared.durable() {
            return Err(Error::FutureRevision {
                requested: revision,
                current: Revision(self.shared.durable()),
            });
        }
        self.blocking(move |shared| {
            let request = RangeRequest::new(KeyRange::from(Vec::new()));
            Ok(read::range_at(&shared.db, &request, revision.0)?.kvs)
        })
        .await
    }

    fn watermarks(&self) -> Vec<(Vec<u8>, Revision)> {
        let marks = self.shared.watermarks.read().expect("watermarks poisoned");
        marks
            .iter()
            .map(|(p, &m)| (p.clone(), Revision(m)))
            .collect()
    }

    fn leases(&self) -> Vec<(LeaseId, Duration)> {
        let table = self.shared.leases.lock().expect("lease table poisoned");
        let mut out: Vec<_> = table
            .leases
            .iter()
            .map(|(&id, state)| (LeaseId(id), state.ttl))
            .collect();
        out.sort();
        out
    }

    async fn revision_at(&self, time: SystemTime) -> Result<Revision> {
        self.blocking(move |shared| shared.revision_at(time)).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.blocking(move |shared| maintenance::compact(shared, revision.0))
            .await
    }

    async fn purge_prefix(&self, prefix: &[u8], below: Revision) -> Result<Option<u64>> {
        let prefix = prefix.to_vec();
        self.blocking(move |shared| maintenance::purge_prefix(shared, &prefix, below.0))
            .await
            .map(Some)
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        self.call(|reply| Command::Grant { ttl, reply }).await
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<Lease> {
        self.check_open()?;
        let mut table = self.shared.leases.lock().expect("lease table poisoned");
        let state = table
            .leases
            .get_mut(&id.0)
            .ok_or(Error::LeaseNotFound(id))?;
        let now = Instant::now();
        if state.deadline <= now {
            // Expired: the maintenance thread is about to revoke it.
            return Err(Error::LeaseNotFound(id));
        }
        state.deadline = now + state.ttl;
        Ok(Lease {
            id,
            ttl: state.ttl,
            remaining: state.ttl,
        })
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<Revision> {
        let (tx, rx) = oneshot::channel();
        self.sender()?
            .send(Command::Revoke {
                id,
                expired_only: false,
                reply: Some(tx),
            })
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    async fn snapshot(&self, path: &Path) -> Result<Revision> {
        let mut attempts = 0;
        loop {
            let capture = self.call(|reply| Command::Snapshot { reply }).await?;
            let target = path.to_path_buf();
            match self
                .blocking(move |shared| snapshot::write(shared, &capture, &target))
                .await
            {
                // A compaction slipped in after the capture: capture again.
                Err(Error::Compacted { .. }) if attempts < 3 => attempts += 1,
                other => return other,
            }
        }
    }

    fn status(&self) -> StoreStatus {
        let oldest_time = self
            .shared
            .oldest_logged()
            .ok()
            .flatten()
            .and_then(|rev| self.shared.time_of(rev).ok().flatten())
            .map(|t| std::time::UNIX_EPOCH + Duration::from_nanos(t));
        StoreStatus {
            revision: Revision(self.shared.durable()),
            compacted: Revision(self.shared.compacted()),
            oldest_time,
            size_on_disk: dir_size(&self.shared.path),
        }
    }

    async fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let threads = self.shutdown_threads();
        tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
        self.watchers.close();
        self.watchers.wait().await;
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.db.flush().map_err(read::sled_err))
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))??;
        Ok(())
    }
}

/// Makes the data dir's names durable: its `blobs` directory (sled's files for large messages),
/// the data dir itself (`db`, `conf`, `blobs`, the snapshot and the durable mark) and its parent
/// (the data dir's own name).
fn sync_dirs(path: &Path) -> std::io::Result<()> {
    let blobs = path.join("blobs");
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    for dir in [Some(blobs.as_path()), Some(path), parent]
        .into_iter()
        .flatten()
    {
        if dir.is_dir() {
            std::fs::File::open(dir)?.sync_all()?;
        }
    }
    Ok(())
}

/// Bytes used by the files under `dir`.
pub(crate) fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        match entry.metadata() {
            Ok(m) if m.is_dir() => total += dir_size(&entry.path()),
            Ok(m) => total += m.len(),
            Err(_) => {}
        }
    }
    total
}

/// Decodes a history record (for the snapshot and maintenance code).
pub(crate) fn decode_hist(bytes: &[u8]) -> Result<HistRecord> {
    HistRecord::decode(bytes)
}

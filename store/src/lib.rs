//! The log: an append-only, revisioned MVCC key-value store on sled, after etcd v3.
//!
//! Every committed write gets the next [`Revision`]; history stays readable at any retained
//! revision; a watch can start at any retained revision and sees every later change exactly once,
//! in order, across the switch from history to live. A write is acknowledged only once it is on
//! disk. The store knows nothing of Kubernetes: keys and values are bytes.
//!
//! # Layout
//! - [`types`]: revisions, key-values, ranges, transactions, events (the contract's vocabulary).
//! - [`error`]: [`Error`] and [`Result`].
//! - [`Store`]: the contract the API server depends on, so that another backend (an external etcd
//!   cluster) can slot in without touching it.
//! - [`SledStore`] (`engine/`): the implementation on sled 0.34 — `writer` (revision assignment,
//!   batching, applying, group commit), `read` (MVCC reads), `watch` (watcher tasks and the ring of recent entries),
//!   `maintenance` (lease expiry, retention, compaction, the purge of one prefix's history), `snapshot`
//!   (backup and restore; a data dir rebuilt from its own live records), `import`
//!   (building a data dir from exported log entries, revisions and times kept).
//! - [`EtcdStore`] (`etcd/`): the same contract over an external etcd v3 cluster — key layout
//!   under a prefix, commit times in a reserved clock key, replays through etcd watches (see
//!   [`etcd`]). Behind the `etcd` feature, on by default; builds that never talk to etcd (the
//!   fuzz targets) leave it and its client's gRPC stack out.
//! - [`archive`]: the portable archive of log entries (export, import) and copying a window of
//!   the log into a new data dir.
//! - `keys`, `record`: the on-disk key spaces and records (`fuzzing`: their decoders, for the
//!   fuzz targets in `fuzz/`).
//! - [`bench`](mod@bench): the throughput and latency harness behind `benches/throughput.rs`.
//!
//! # On disk
//! One sled tree, four key spaces (see `keys`): `h` history records (one per version of a key, the
//! value stored there once), `l` log records (one per group commit, keyed by its last revision:
//! for each of its revisions the commit time and the keys written), `m` meta (format `skiff-log/2`,
//! compacted revision, per-prefix watermarks, leases), `x` lease attachments.
//! The transactions waiting for the writer are applied as one `apply_batch`, which sled recovers
//! all or nothing, so no transaction is ever partly on disk. sled compresses what it writes (zstd)
//! in data dirs created since compression became the default ([`Config::compression`]).
//!
//! # Faults
//! A write that would leave less than [`Config::disk_reserve`] free is refused before sled meets a
//! full disk (`engine/space.rs`); should sled fail anyway, the store reopens its data dir in place
//! (`engine/recover.rs`). Opening syncs the directories naming the data dir's files, and sled's
//! large-value files are synced before the log can point at them (`third_party/README.md`), so a
//! power cut keeps every acknowledged write (`store/tests/store/powercut.rs`).
//!
//! ```text
//!  revision:      1     2     3     4     5     6            compacted = 2, durable = 6
//!  log entry:    (old) [a]   [b]   [a,b] [a]   [c]   applied: 7 (not yet flushed)
//!  log record:   `-- l/2 --' `------ l/5 ----' l/6          (one per group commit)
//!  h/a/<rev>:          put2        put4  del5
//!  h/b/<rev>:                put3  put4
//!  h/c/<rev>:                                  put6
//!
//!  Invariants
//!  - revisions 1..=durable are contiguous; every r with compacted <= r <= durable has its entry
//!    in the log record of its group, and each key it names has h/key/r; a group straddling the
//!    compacted revision stays whole (its entries below it are no longer readable);
//!  - a key's state at R (compacted <= R <= durable) is its newest h/key/r with r <= R (absent if
//!    none or a delete); compaction keeps each key's newest version below `compacted` if it is a
//!    put (the state at compacted - 1, so changes at `compacted` keep their previous values);
//!  - readers read at R <= durable only: writes applied but not yet flushed (7) are invisible;
//!  - the compacted revision and a prefix's watermark are raised before the versions they cover
//!    are removed, and readers check them after reading: a read either is right or says Compacted.
//! ```
//!
//! # Durability
//! A write is acknowledged only after the sled `flush` that covers it (plus an `fdatasync` with
//! [`Config::fsync`]). One writer thread assigns revisions and builds every transaction waiting
//! into one batch, an applier thread applies it while the next is built, and one flusher thread
//! flushes once for everything applied since its last flush, then publishes the new durable
//! revision and acknowledges all of it (group commit). Start-up reads
//! the newest log key, the meta records and the leases, never the history.
//!
//! # Watches
//! A watcher is a task with its own next revision (see `engine/watch.rs`): it reads recent entries
//! from an in-memory ring and older ones from the log, so it cannot skip or repeat a revision, and
//! a slow consumer only holds up itself. A registry groups watchers by range; a durable entry wakes
//! only the watchers whose range it touches.

pub mod archive;
pub mod bench;
mod engine;
pub mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
#[doc(hidden)]
pub mod fuzzing;
mod keys;
mod record;
pub mod types;

use std::path::Path;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use futures::Stream;

pub use engine::{Config, Importer, PrefixRetention, Retention, SledStore};
pub use error::{Error, Result};
#[cfg(feature = "etcd")]
pub use etcd::EtcdStore;
pub use types::*;

/// An ordered stream of watch deliveries. It ends after an `Err` (for example
/// [`Error::Compacted`] when a watcher that fell behind finds its next revision compacted away).
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse>> + Send>>;

/// The revisioned key-value log, as the API server uses it.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// Reads a key or range at the current or a retained past revision.
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse>;

    /// Runs an atomic transaction. Its writes, if any, are one new revision, durable on return.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse>;

    /// Writes one key; returns the new revision and, if asked, the version replaced.
    async fn put(
        &self,
        key: Vec<u8>,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<(Revision, Option<KeyValue>)> {
        let response = self
            .txn(Txn {
                compare: vec![],
                success: vec![Op::Put {
                    key,
                    value,
                    lease,
                    prev_kv: true,
                }],
                failure: vec![],
                tag: None,
            })
            .await?;
        let prev = match response.responses.into_iter().next() {
            Some(OpResponse::Put { prev_kv }) => prev_kv,
            _ => None,
        };
        Ok((response.revision, prev))
    }

    /// Deletes every key in `range`; returns the revision (the current one if nothing was deleted)
    /// and the deleted key-values.
    async fn delete(&self, range: KeyRange) -> Result<(Revision, Vec<KeyValue>)> {
        let response = self
            .txn(Txn {
                compare: vec![],
                success: vec![Op::Delete {
                    range,
                    prev_kv: true,
                }],
                failure: vec![],
                tag: None,
            })
            .await?;
        let prev = match response.responses.into_iter().next() {
            Some(OpResponse::Delete { prev_kvs, .. }) => prev_kvs,
            _ => vec![],
        };
        Ok((response.revision, prev))
    }

    /// Watches `request.range` from `request.start_revision`. Fails at once with
    /// [`Error::Compacted`] when the start is below the retained history, or
    /// [`Error::FutureRevision`] when it is beyond the next revision.
    async fn watch(&self, request: WatchRequest) -> Result<WatchStream>;

    /// Every version of one key still in history, oldest first, deletes included (as
    /// [`EventKind::Delete`] events), each with its commit time and tag.
    async fn history(&self, key: &[u8]) -> Result<Vec<(Commit, Event)>>;

    /// Committed entries with revisions in `[from, to]` (`to` = `None`: up to the current
    /// revision), at most `limit` of them, oldest first.
    async fn log(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<LogEntry>>;

    /// For archives: the entries of `[from, to]` as [`Store::log`] gives them but without
    /// previous values, where an event whose version per-prefix retention pruned is not an error
    /// but carries its key only (the rest of its `kv` is empty) and its index in the entry is
    /// listed in the second member. Any other missing version is an error as in [`Store::log`].
    async fn log_retained(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<(LogEntry, Vec<usize>)>> {
        Ok(self
            .log(from, to, limit)
            .await?
            .into_iter()
            .map(|mut e| {
                for event in &mut e.events {
                    event.prev_kv = None;
                }
                (e, Vec::new())
            })
            .collect())
    }

    /// For archives: every key's newest version at or below `revision` still in history (puts
    /// only), without the compaction and retention checks of [`Store::range`]: a key whose
    /// version there was compacted or pruned away is simply absent.
    async fn retained_at(&self, revision: Revision) -> Result<Vec<KeyValue>> {
        Ok(self
            .range(RangeRequest::new(KeyRange::from(Vec::new())).at(revision))
            .await?
            .kvs)
    }

    /// The per-prefix retention watermarks: for each prefix, the oldest revision whose reads
    /// under it are still complete (reads before it are [`Error::Compacted`] for the prefix).
    fn watermarks(&self) -> Vec<(Vec<u8>, Revision)> {
        Vec::new()
    }

    /// The live leases, each with its TTL as granted.
    fn leases(&self) -> Vec<(LeaseId, Duration)> {
        Vec::new()
    }

    /// The newest revision committed at or before `time`.
    async fn revision_at(&self, time: SystemTime) -> Result<Revision>;

    /// Removes history below `revision` (reads and watches before it get [`Error::Compacted`]).
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// Removes the history of the keys under `prefix` below `below`, as [`Store::compact`] does
    /// for the whole log but for those keys only: each key's newest version below `below` stays
    /// if it is a put, every older one goes, and reads and watches under the prefix before
    /// `below` get [`Error::Compacted`] naming it. For rewriting values that must not stay in
    /// history (Secrets encrypted with a retired key, or before encryption was turned on).
    /// Returns how many versions went, or `None` where the backend keeps no per-key history of
    /// its own to prune (etcd: its own compaction does it).
    async fn purge_prefix(&self, prefix: &[u8], below: Revision) -> Result<Option<u64>> {
        let _ = (prefix, below);
        Ok(None)
    }

    /// Grants a lease of `ttl`.
    async fn lease_grant(&self, ttl: Duration) -> Result<Lease>;

    /// Renews a lease to its full TTL.
    async fn lease_keep_alive(&self, id: LeaseId) -> Result<Lease>;

    /// Ends a lease now, deleting its keys in one revision.
    async fn lease_revoke(&self, id: LeaseId) -> Result<Revision>;

    /// Writes a consistent snapshot of the whole store to `path`; returns its revision.
    async fn snapshot(&self, path: &Path) -> Result<Revision>;

    /// The current and compacted revision and the size on disk.
    fn status(&self) -> StoreStatus;

    /// Whether the store could serve a write when last checked, without waiting: `Err` says why
    /// not (an external datastore unreachable or without quorum, the embedded log being reopened
    /// after a disk error). For readiness checks.
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }

    /// Flushes and stops background work; later calls fail with [`Error::Closed`].
    async fn close(&self) -> Result<()>;
}

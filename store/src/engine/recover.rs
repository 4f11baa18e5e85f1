//! [`SledStore`]: the log as callers hold it, reopened in place when sled fails.
//!
//! sled 0.34 keeps the first I/O error it meets (a full disk, a failing device) and returns it
//! from every later write, and from reads that would rewrite a page, until the database is
//! reopened. So a failed write poisons the open [`Engine`] (see `writer.rs`), and this wrapper
//! replaces it: a supervisor thread shuts the poisoned engine down (its writes in flight fail;
//! nothing acknowledged is lost, since acknowledgements follow flushes), waits for sled to let go
//! of the data dir, and opens it again, every second until that succeeds (while the disk is still
//! full, opening or the first write may fail again). Opening recovers the log as after a crash.
//!
//! Meanwhile calls fail with [`Error::Unavailable`] (the API answers 503) and
//! [`Store::status`] reports the last state seen. Watches outlive the swap: each resumes on the
//! new engine at the revision after the last one it delivered, so it neither skips nor repeats
//! one. The disk-space guard (`space.rs`) keeps this path for surprises: with it, a full disk
//! refuses writes before sled meets it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;

use super::{Config, Engine, Importer};
use crate::error::{Error, Result};
use crate::types::*;
use crate::{Store, WatchStream};

/// The log on sled: see the crate docs for the layout and invariants, and this module's for
/// recovery from I/O errors.
pub struct SledStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    slot: RwLock<Slot>,
    /// The generation of the engine in the slot, bumped on every swap (and on close).
    generation: tokio::sync::watch::Sender<u64>,
    /// To the supervisor thread.
    signals: std::sync::mpsc::Sender<Signal>,
    closed: AtomicBool,
}

enum Slot {
    Open {
        engine: Arc<Engine>,
        generation: u64,
    },
    /// Being reopened after `reason`; `last` is the state when the engine was given up.
    Reopening { reason: String, last: StoreStatus },
    /// Closed; `last` is the state at closing.
    Closed { last: StoreStatus },
}

enum Signal {
    /// The engine of this generation is poisoned.
    Fault(u64),
    Stop,
}

/// How long the supervisor waits between attempts to open the data dir again.
const RETRY: Duration = Duration::from_secs(1);

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.inner.config.path)
            .field("revision", &self.status().revision)
            .finish()
    }
}

impl SledStore {
    /// Opens (or creates) the data dir in `config.path`.
    ///
    /// Fails with [`Error::Locked`] if another process (or another open handle) holds it, and
    /// [`Error::Corrupt`] if it is not a skiff log. Start-up reads only the newest log key, the
    /// meta records and the leases, not the history, so it is fast however long the log is.
    pub fn open(config: Config) -> Result<SledStore> {
        finish_rebuild(&config.path)?;
        let (signals, received) = std::sync::mpsc::channel();
        let engine = Engine::open(config.clone(), Some(fault_hook(&signals, 0)))?;
        let inner = Arc::new(Inner {
            config,
            slot: RwLock::new(Slot::Open {
                engine: Arc::new(engine),
                generation: 0,
            }),
            generation: tokio::sync::watch::channel(0).0,
            signals,
            closed: AtomicBool::new(false),
        });
        let supervised = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("skiff-store-recover".into())
            .spawn(move || supervise(supervised, received))
            .map_err(Error::Io)?;
        Ok(SledStore { inner })
    }

    /// Creates a data dir at `data_dir` (which must not exist or be empty) from a snapshot file
    /// written by [`Store::snapshot`]; returns the snapshot's revision.
    pub fn restore(snapshot: &Path, data_dir: &Path) -> Result<Revision> {
        super::snapshot::restore(snapshot, data_dir)
    }

    /// Rewrites the data dir at `config.path` (open nowhere else) from its own live records, a
    /// snapshot restored in its place: sled's files then keep nothing removed from the log (sled
    /// frees a removed record's bytes only when it cleans the segment holding it). For after a
    /// [`Store::purge_prefix`] of values that must not stay on disk. The dir keeps its
    /// compression setting; an interrupted rebuild is finished or undone when the dir next opens.
    /// Returns the revision rebuilt at.
    pub async fn rebuild(config: Config) -> Result<Revision> {
        let path = config.path.clone();
        let (next, old, snap) = rebuild_paths(&path);
        let compress = super::persisted_compression(&path).unwrap_or(config.compression);
        let store = SledStore::open(config)?;
        let snapshot = store.snapshot(&snap).await;
        store.close().await?;
        let revision = snapshot?;
        let restored = super::snapshot::restore_with(&snap, &next, compress);
        std::fs::remove_file(&snap)?;
        restored?;
        // An interruption between the two renames is undone by `finish_rebuild`.
        std::fs::rename(&path, &old)?;
        std::fs::rename(&next, &path)?;
        std::fs::remove_dir_all(&old)?;
        Ok(revision)
    }

    /// Starts building a new data dir at `data_dir` (which must not exist or be empty) from log
    /// entries exported elsewhere, keeping their revisions and commit times; see [`Importer`].
    pub fn importer(data_dir: &Path) -> Result<Importer> {
        Importer::create(data_dir)
    }

    /// The data dir.
    pub fn path(&self) -> &Path {
        &self.inner.config.path
    }

    /// Group-commit counters of the current opening: (flushes, commands acknowledged by them).
    pub fn commit_stats(&self) -> (u64, u64) {
        self.engine().map_or((0, 0), |(e, _)| e.commit_stats())
    }

    /// How many times the data dir was reopened after an I/O error.
    pub fn reopened(&self) -> u64 {
        *self.inner.generation.borrow()
    }

    fn engine(&self) -> Result<(Arc<Engine>, u64)> {
        self.inner.engine()
    }
}

/// Beside the data dir at `path`: the rebuilt dir, the old one while they swap, the snapshot.
fn rebuild_paths(path: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "db".into());
    (
        path.with_file_name(format!("{name}.rebuilt")),
        path.with_file_name(format!("{name}.old")),
        path.with_file_name(format!("{name}.rebuild-snapshot")),
    )
}

/// Finishes or undoes a [`SledStore::rebuild`] that stopped half-way: the old dir comes back if
/// the new one never took its place, and is removed if it did; leftovers go.
fn finish_rebuild(path: &Path) -> Result<()> {
    let (next, old, snap) = rebuild_paths(path);
    if old.exists() {
        if path.exists() {
            std::fs::remove_dir_all(&old)?;
        } else {
            std::fs::rename(&old, path)?;
        }
    }
    if next.exists() {
        std::fs::remove_dir_all(&next)?;
    }
    if snap.exists() {
        std::fs::remove_file(&snap)?;
    }
    Ok(())
}

impl Inner {
    fn engine(&self) -> Result<(Arc<Engine>, u64)> {
        match &*self.slot.read().expect("store slot poisoned") {
            Slot::Open { engine, generation } => Ok((engine.clone(), *generation)),
            Slot::Reopening { reason, .. } => Err(Error::Unavailable {
                reason: format!("the log is being reopened after a disk error ({reason})"),
                source: None,
            }),
            Slot::Closed { .. } => Err(Error::Closed),
        }
    }
}

fn fault_hook(signals: &std::sync::mpsc::Sender<Signal>, generation: u64) -> super::FaultHook {
    let signals = std::sync::Mutex::new(signals.clone());
    Box::new(move || {
        let _ = signals
            .lock()
            .expect("fault hook poisoned")
            .send(Signal::Fault(generation));
    })
}

/// The supervisor thread: reopens the data dir after each fault, until the store is closed or
/// dropped.
fn supervise(inner: std::sync::Weak<Inner>, signals: std::sync::mpsc::Receiver<Signal>) {
    while let Ok(signal) = signals.recv() {
        let Signal::Fault(failed) = signal else {
            return;
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let old = {
            let mut slot = inner.slot.write().expect("store slot poisoned");
            match &*slot {
                Slot::Open { engine, generation } if *generation == failed => {
                    let engine = engine.clone();
                    let reason = engine
                        .poison_error()
                        .map_or_else(|| "an I/O error".to_string(), |e| e.to_string());
                    *slot = Slot::Reopening {
                        reason,
                        last: engine.status(),
                    };
                    engine
                }
                _ => continue,
            }
        };
        tracing::warn!(path = %inner.config.path.display(), "sled failed; reopening the log");
        old.shut_down();
        drop(old);
        let started = Instant::now();
        let mut attempts = 0u64;
        let generation = failed + 1;
        let engine = loop {
            if inner.closed.load(Ordering::SeqCst) {
                return;
            }
            attempts += 1;
            match Engine::open(
                inner.config.clone(),
                Some(fault_hook(&inner.signals, generation)),
            ) {
                Ok(engine) => break engine,
                Err(e) => {
                    // Locked: a reader of the old opening still holds sled. Anything else (a
                    // full disk): wait for the operator.
                    if attempts == 1 || attempts % 60 == 0 {
                        tracing::warn!(error = %e, attempts, "the log cannot be reopened yet; retrying every second");
                    }
                    if let Slot::Reopening { reason, .. } =
                        &mut *inner.slot.write().expect("store slot poisoned")
                        && !matches!(e, Error::Locked { .. })
                    {
                        *reason = e.to_string();
                    }
                    std::thread::sleep(if matches!(e, Error::Locked { .. }) {
                        RETRY / 20
                    } else {
                        RETRY
                    });
                }
            }
        };
        let revision = engine.status().revision;
        {
            let mut slot = inner.slot.write().expect("store slot poisoned");
            if matches!(*slot, Slot::Closed { .. }) {
                return;
            }
            *slot = Slot::Open {
                engine: Arc::new(engine),
                generation,
            };
        }
        inner.generation.send_replace(generation);
        tracing::warn!(
            revision = revision.0,
            attempts,
            seconds = started.elapsed().as_secs_f64(),
            "the log was reopened"
        );
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        let _ = self.inner.signals.send(Signal::Stop);
    }
}

/// A watch that resumes on each new engine until the store closes.
struct Resuming {
    inner: Arc<Inner>,
    request: WatchRequest,
    /// The next revision the consumer has not seen.
    next: Revision,
    /// The generation of the engine `stream` comes from.
    generation: u64,
    stream: Option<WatchStream>,
    done: bool,
}

impl Resuming {
    /// The next item for the consumer, or `None` when the watch is over.
    async fn next(&mut self) -> Option<Result<WatchResponse>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(stream) = &mut self.stream {
                match stream.next().await {
                    Some(Ok(response)) => {
                        // An event's revision, or a progress notification's: seen up to there.
                        self.next = response.revision.next();
                        return Some(Ok(response));
                    }
                    // The engine was shut down: for good, or to be replaced.
                    Some(Err(Error::Closed)) | None => self.stream = None,
                    Some(Err(e)) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            if self.inner.closed.load(Ordering::SeqCst) {
                self.done = true;
                return Some(Err(Error::Closed));
            }
            // Wait for the next engine, and watch on from where the last one stopped.
            let mut changes = self.inner.generation.subscribe();
            let engine = loop {
                match self.inner.engine() {
                    Ok((engine, generation)) if generation > self.generation => {
                        self.generation = generation;
                        break engine;
                    }
                    Err(Error::Closed) => {
                        self.done = true;
                        return Some(Err(Error::Closed));
                    }
                    _ => {
                        if changes.changed().await.is_err() {
                            self.done = true;
                            return Some(Err(Error::Closed));
                        }
                    }
                }
            };
            let mut request = self.request.clone();
            request.start_revision = Some(self.next);
            match engine.watch(request).await {
                Ok(stream) => self.stream = Some(stream),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Store for SledStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.engine()?.0.range(request).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.engine()?.0.txn(txn).await
    }

    async fn watch(&self, mut request: WatchRequest) -> Result<WatchStream> {
        let (engine, generation) = self.engine()?;
        // A watch "from now" is pinned to a revision, so that resuming it elsewhere means the same.
        let start = request
            .start_revision
            .unwrap_or_else(|| engine.status().revision.next());
        request.start_revision = Some(start);
        let stream = engine.watch(request.clone()).await?;
        let resuming = Resuming {
            inner: self.inner.clone(),
            request,
            next: start,
            generation,
            stream: Some(stream),
            done: false,
        };
        Ok(Box::pin(futures::stream::unfold(
            resuming,
            |mut r| async move { r.next().await.map(|item| (item, r)) },
        )))
    }

    async fn history(&self, key: &[u8]) -> Result<Vec<(Commit, Event)>> {
        self.engine()?.0.history(key).await
    }

    async fn log(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<LogEntry>> {
        self.engine()?.0.log(from, to, limit).await
    }

    async fn log_retained(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<(LogEntry, Vec<usize>)>> {
        self.engine()?.0.log_retained(from, to, limit).await
    }

    async fn retained_at(&self, revision: Revision) -> Result<Vec<KeyValue>> {
        self.engine()?.0.retained_at(revision).await
    }

    fn watermarks(&self) -> Vec<(Vec<u8>, Revision)> {
        self.engine()
            .map(|(e, _)| e.watermarks())
            .unwrap_or_default()
    }

    fn leases(&self) -> Vec<(LeaseId, Duration)> {
        self.engine().map(|(e, _)| e.leases()).unwrap_or_default()
    }

    async fn revision_at(&self, time: SystemTime) -> Result<Revision> {
        self.engine()?.0.revision_at(time).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.engine()?.0.compact(revision).await
    }

    async fn purge_prefix(&self, prefix: &[u8], below: Revision) -> Result<Option<u64>> {
        self.engine()?.0.purge_prefix(prefix, below).await
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        self.engine()?.0.lease_grant(ttl).await
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<Lease> {
        self.engine()?.0.lease_keep_alive(id).await
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<Revision> {
        self.engine()?.0.lease_revoke(id).await
    }

    async fn snapshot(&self, path: &Path) -> Result<Revision> {
        self.engine()?.0.snapshot(path).await
    }

    fn status(&self) -> StoreStatus {
        match &*self.inner.slot.read().expect("store slot poisoned") {
            Slot::Open { engine, .. } => engine.status(),
            Slot::Reopening { last, .. } | Slot::Closed { last } => last.clone(),
        }
    }

    fn ready(&self) -> std::result::Result<(), String> {
        match self.engine() {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn close(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::SeqCst);
        let slot = {
            let mut slot = self.inner.slot.write().expect("store slot poisoned");
            let last = match &*slot {
                Slot::Open { engine, .. } => engine.status(),
                Slot::Reopening { last, .. } | Slot::Closed { last } => last.clone(),
            };
            std::mem::replace(&mut *slot, Slot::Closed { last })
        };
        self.inner.generation.send_modify(|g| *g += 1);
        let _ = self.inner.signals.send(Signal::Stop);
        match slot {
            Slot::Open { engine, .. } => engine.close().await,
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod rebuild_tests {
    use super::*;

    fn config(dir: &Path) -> Config {
        let mut config = Config::new(dir.join("db"));
        config.fsync = false;
        config.compression = false;
        config
    }

    async fn put(config: &Config, key: &str, value: &str) {
        let store = SledStore::open(config.clone()).unwrap();
        store
            .put(key.as_bytes().to_vec(), value.as_bytes().to_vec(), None)
            .await
            .unwrap();
        store.close().await.unwrap();
    }

    async fn read(config: &Config, key: &str) -> Option<Vec<u8>> {
        let store = SledStore::open(config.clone()).unwrap();
        let got = store
            .range(RangeRequest::new(KeyRange::key(key.as_bytes().to_vec())))
            .await
            .unwrap();
        store.close().await.unwrap();
        got.kvs.into_iter().next().map(|kv| kv.value)
    }

    #[tokio::test]
    async fn a_rebuild_keeps_the_log_and_an_interrupted_one_is_finished_or_undone() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        put(&config, "/a", "one").await;
        put(&config, "/a", "two").await;
        let revision = SledStore::rebuild(config.clone()).await.unwrap();
        assert_eq!(revision, Revision(2));
        assert_eq!(read(&config, "/a").await.unwrap(), b"two");
        // Still uncompressed after the rebuild, as created.
        assert_eq!(
            super::super::persisted_compression(&config.path),
            Some(false)
        );
        let (next, old, snap) = rebuild_paths(&config.path);
        assert!(!next.exists() && !old.exists() && !snap.exists());

        // Stopped after the first rename: the old dir comes back.
        std::fs::rename(&config.path, &old).unwrap();
        std::fs::create_dir_all(&next).unwrap();
        assert_eq!(read(&config, "/a").await.unwrap(), b"two");
        assert!(!old.exists() && !next.exists());

        // Stopped after the second rename: the new dir stays, the old one goes.
        let copy = tempfile::tempdir().unwrap();
        let other = self::config(copy.path());
        put(&other, "/a", "stale").await;
        std::fs::rename(&other.path, &old).unwrap();
        std::fs::write(&snap, b"partial").unwrap();
        assert_eq!(read(&config, "/a").await.unwrap(), b"two");
        assert!(!old.exists() && !snap.exists());
    }
}

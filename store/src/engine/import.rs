//! Bulk import: builds a new data dir from log entries written elsewhere, keeping their revisions
//! and commit times (the writer would assign new ones), for `skiff import` and `skiff replay`.
//!
//! ```text
//!  source:  compacted = 3      base (state at 3 - 1)    entries 3 ..= 7
//!  target:  h/key/<mod rev> for each base version  +  h and l records of entries 3..=7
//!           compacted = 3 (the first entry) unless the entries start at revision 1
//! ```
//!
//! The target is written offline (no [`SledStore`](crate::SledStore) open on it) in large sled
//! batches; the format record goes in last, so an import that stops half-way leaves a dir that
//! `open` refuses rather than a log with a hole in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::read;
use crate::error::{Error, Result};
use crate::keys;
use crate::record::{HistRecord, LogGroup, LogRecord};
use crate::types::{EventKind, KeyValue, LeaseId, LogEntry, Revision};

/// Records per sled batch.
const BATCH: usize = 8192;

/// Writes a new data dir from a base state and a contiguous run of log entries; see the module
/// docs. Created by [`SledStore::importer`](crate::SledStore::importer).
pub struct Importer {
    db: sled::Db,
    path: PathBuf,
    batch: sled::Batch,
    in_batch: usize,
    /// The revision of the first entry, once one was written.
    first: Option<u64>,
    /// The revision of the last entry written.
    last: u64,
    last_time: u64,
    /// The newest revision of a base version.
    base_max: u64,
    /// Per-prefix watermarks to write.
    watermarks: Vec<(Vec<u8>, u64)>,
    /// Leases to create: id -> TTL in milliseconds.
    leases: BTreeMap<u64, u64>,
    /// The live keys attached to a lease, as of the last entry written.
    attached: BTreeMap<Vec<u8>, u64>,
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Importer {
    /// Starts an import into `data_dir`, which must not exist or be empty.
    pub(crate) fn create(data_dir: &Path) -> Result<Importer> {
        if data_dir.exists() && std::fs::read_dir(data_dir)?.next().is_some() {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("import target {} is not empty", data_dir.display()),
            )));
        }
        let db = super::sled_config(data_dir, true)
            .open()
            .map_err(read::sled_err)?;
        Ok(Importer {
            db,
            path: data_dir.to_path_buf(),
            batch: sled::Batch::default(),
            in_batch: 0,
            first: None,
            last: 0,
            last_time: 0,
            base_max: 0,
            watermarks: Vec::new(),
            leases: BTreeMap::new(),
            attached: BTreeMap::new(),
        })
    }

    fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.batch.insert(key, value);
        self.in_batch += 1;
        if self.in_batch >= BATCH {
            self.db
                .apply_batch(std::mem::take(&mut self.batch))
                .map_err(read::sled_err)?;
            self.in_batch = 0;
        }
        Ok(())
    }

    fn invalid(&self, reason: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            reason: format!("import refused: {reason}"),
        }
    }

    /// Adds one version of the state before the first entry (a key as it was when the history
    /// being imported starts), committed at `time`. Every base version comes before any entry.
    pub fn base(&mut self, kv: &KeyValue, time: SystemTime) -> Result<()> {
        if self.first.is_some() {
            return Err(self.invalid("a base version after the first entry".into()));
        }
        let rev = kv.mod_revision.0;
        if rev == 0 {
            return Err(self.invalid("a base version at revision 0".into()));
        }
        self.base_max = self.base_max.max(rev);
        if let Some(lease) = kv.lease {
            self.attached.insert(kv.key.clone(), lease.0);
        }
        let rec = HistRecord::encode_parts(
            nanos(time),
            kv.create_revision.0,
            kv.version,
            kv.lease.map(|l| l.0),
            Some(&kv.value),
        );
        self.insert(keys::hist_key(&kv.key, rev), rec)
    }

    /// Records a per-prefix retention watermark: reads before `mark` of keys under `prefix` are
    /// [`Error::Compacted`] for the prefix, as they were in the source.
    pub fn watermark(&mut self, prefix: &[u8], mark: Revision) {
        self.watermarks.push((prefix.to_vec(), mark.0));
    }

    /// Creates lease `id` with `ttl` in the new dir. The live keys attached to it at the last
    /// entry are attached to it there; like every lease at open, it expires `ttl` after the new
    /// dir is opened unless kept alive (a TTL of zero: at the first open).
    pub fn lease(&mut self, id: LeaseId, ttl: Duration) {
        self.leases.insert(id.0, ttl.as_millis() as u64);
    }

    /// Adds the next log entry, with its revision and commit time as they are. Entries must be
    /// contiguous and after every base version.
    pub fn entry(&mut self, entry: &LogEntry) -> Result<()> {
        self.entry_pruned(entry, &[])
    }

    /// As [`Importer::entry`], where the events at the indexes `pruned` are versions that
    /// per-prefix retention pruned in the source: only their keys are kept (in the log, so that
    /// a read of them is [`Error::Compacted`] for the prefix, given its [`Importer::watermark`]).
    pub fn entry_pruned(&mut self, entry: &LogEntry, pruned: &[usize]) -> Result<()> {
        let rev = entry.revision.0;
        match self.first {
            None if rev <= self.base_max => {
                return Err(self.invalid(format!(
                    "the first entry (revision {rev}) is not after the base (revision {})",
                    self.base_max
                )));
            }
            None if rev == 0 => return Err(self.invalid("an entry at revision 0".into())),
            None => self.first = Some(rev),
            Some(_) if rev != self.last + 1 => {
                return Err(self.invalid(format!(
                    "entries are not contiguous: revision {rev} after {}",
                    self.last
                )));
            }
            Some(_) => {}
        }
        let time = nanos(entry.time).max(self.last_time);
        let mut log_keys = Vec::with_capacity(entry.events.len());
        for (i, event) in entry.events.iter().enumerate() {
            let kv = &event.kv;
            match (event.kind, kv.lease) {
                (EventKind::Put, Some(lease)) => self.attached.insert(kv.key.clone(), lease.0),
                _ => self.attached.remove(&kv.key),
            };
            if pruned.contains(&i) {
                log_keys.push(kv.key.clone());
                continue;
            }
            let rec = match event.kind {
                EventKind::Put => HistRecord::encode_parts(
                    time,
                    kv.create_revision.0,
                    kv.version,
                    kv.lease.map(|l| l.0),
                    Some(&kv.value),
                ),
                EventKind::Delete => HistRecord::encode_parts(time, 0, 0, None, None),
            };
            self.insert(keys::hist_key(&kv.key, rev), rec)?;
            log_keys.push(kv.key.clone());
        }
        let log = LogGroup {
            first: rev,
            entries: vec![LogRecord {
                time,
                keys: log_keys,
                tag: entry.tag.clone().filter(|t| !t.is_empty()),
            }],
        };
        self.insert(keys::log_key(rev).to_vec(), log.encode())?;
        self.last = rev;
        self.last_time = time;
        Ok(())
    }

    /// Writes the compaction mark, the watermarks, the leases and their live keys, and the format
    /// record, and flushes; returns the newest revision. A live key attached to a lease that was
    /// not given with [`Importer::lease`] (it ended in the source after the entries) is attached
    /// to it with a TTL of zero, so that it ends at the first open as it did in the source.
    pub fn finish(mut self) -> Result<Revision> {
        let Some(first) = self.first else {
            return Err(self.invalid("no log entries to import".into()));
        };
        self.db
            .apply_batch(std::mem::take(&mut self.batch))
            .map_err(read::sled_err)?;
        let attached = std::mem::take(&mut self.attached);
        for (key, lease) in attached {
            self.leases.entry(lease).or_insert(0);
            self.insert(keys::attach_key(lease, &key), Vec::new())?;
        }
        // New grants in the new dir must not reuse a carried lease's id.
        if let Some(&max) = self.leases.keys().next_back() {
            self.insert(
                keys::META_LEASE_NEXT.to_vec(),
                (max + 1).to_be_bytes().to_vec(),
            )?;
        }
        for (id, ttl) in std::mem::take(&mut self.leases) {
            self.insert(keys::lease_key(id), ttl.to_be_bytes().to_vec())?;
        }
        for (prefix, mark) in std::mem::take(&mut self.watermarks) {
            self.insert(keys::watermark_key(&prefix), mark.to_be_bytes().to_vec())?;
        }
        self.db
            .apply_batch(std::mem::take(&mut self.batch))
            .map_err(read::sled_err)?;
        let compacted = if first > 1 { first } else { 0 };
        self.db
            .insert(keys::META_COMPACTED, &compacted.to_be_bytes()[..])
            .map_err(read::sled_err)?;
        self.db
            .insert(keys::META_FORMAT, keys::FORMAT)
            .map_err(read::sled_err)?;
        self.db.flush().map_err(read::sled_err)?;
        Ok(Revision(self.last))
    }
}

//! Backup: a consistent snapshot of the store at one revision, written to a file, and restoring a
//! data dir from it.
//!
//! File format (all integers little-endian unless said otherwise):
//!
//! ```text
//! "SKIFFSNP" | u32 version=1 | u64 revision | u64 compacted
//! { u8 1 | u32 key len | key | u32 value len | value }*     sled records, copied as they are
//! u8 0 | u64 record count | u32 crc32 of every byte before it
//! ```
//!
//! The records are the history and log at or below the revision, the meta records (watermarks,
//! leases as the writer captured them with the revision). Lease attachments are rebuilt on restore
//! from the keys' versions; the format record is written last, so a restore that stops half-way
//! leaves a dir that [`SledStore::open`](crate::SledStore::open) refuses.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use super::writer::Capture;
use super::{Shared, decode_hist, read};
use crate::error::{Error, Result};
use crate::keys::{self, HIST, LOG};
use crate::types::{KeyRange, Revision};

const MAGIC: &[u8; 8] = b"SKIFFSNP";
/// 2: the records are those of data dir format `skiff-log/2` (grouped log records).
const VERSION: u32 = 2;

/// Releases the writer's pruning pause when the snapshot ends, however it ends.
struct PauseGuard<'a>(&'a Shared);

impl Drop for PauseGuard<'_> {
    fn drop(&mut self) {
        self.0.snapshots.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A writer that keeps a running crc32 and count of what went through it.
struct Checked<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Checked<W> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.crc.update(bytes);
        self.inner.write_all(bytes)
    }

    fn record(&mut self, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        self.put(&[1])?;
        self.put(&(key.len() as u32).to_le_bytes())?;
        self.put(key)?;
        self.put(&(value.len() as u32).to_le_bytes())?;
        self.put(value)
    }
}

/// Writes the snapshot described by `capture` to `path` (through a temporary file, fsynced, then
/// renamed). Compaction waits meanwhile; the writer does not.
pub(crate) fn write(shared: &Shared, capture: &Capture, path: &Path) -> Result<Revision> {
    let _pause = PauseGuard(shared);
    let _no_compaction = shared.compaction.lock().expect("compaction lock poisoned");
    let rev = capture.revision;
    if shared.compacted() > rev {
        // A compaction ran between the capture and now; the caller takes a new capture.
        return Err(Error::Compacted {
            requested: Revision(rev),
            compacted: Revision(shared.compacted()),
            prefix: None,
        });
    }
    let tmp = path.with_extension("partial");
    let file = File::create(&tmp).map_err(read::io_err)?;
    let mut out = Checked {
        inner: BufWriter::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
    };
    let io = |e: std::io::Error| read::io_err(e);
    out.put(MAGIC).map_err(io)?;
    out.put(&VERSION.to_le_bytes()).map_err(io)?;
    out.put(&rev.to_le_bytes()).map_err(io)?;
    out.put(&shared.compacted().to_le_bytes()).map_err(io)?;
    let mut count: u64 = 0;
    for item in shared.db.scan_prefix([HIST]) {
        let (k, v) = item.map_err(read::sled_err)?;
        if keys::hist_key_rev(&k) <= rev {
            out.record(&k, &v).map_err(io)?;
            count += 1;
        }
    }
    // Groups end at a captured revision (the writer captures between groups), so this copies
    // exactly the log up to `rev`.
    for item in shared.db.range(keys::log_key(0)..=keys::log_key(rev)) {
        let (k, v) = item.map_err(read::sled_err)?;
        out.record(&k, &v).map_err(io)?;
        count += 1;
    }
    for item in shared.db.scan_prefix(keys::META_WATERMARK) {
        let (k, v) = item.map_err(read::sled_err)?;
        out.record(&k, &v).map_err(io)?;
        count += 1;
    }
    for (id, ttl_ms) in &capture.leases {
        out.record(&keys::lease_key(*id), &ttl_ms.to_be_bytes())
            .map_err(io)?;
        count += 1;
    }
    out.record(keys::META_LEASE_NEXT, &capture.lease_next.to_be_bytes())
        .map_err(io)?;
    count += 1;
    out.put(&[0]).map_err(io)?;
    out.put(&count.to_le_bytes()).map_err(io)?;
    let crc = out.crc.clone().finalize();
    out.inner.write_all(&crc.to_le_bytes()).map_err(io)?;
    let file = out.inner.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(Revision(rev))
}

/// A reader that keeps a running crc32 of what it read.
struct Verified<R> {
    inner: R,
    crc: crc32fast::Hasher,
}

impl<R: Read> Verified<R> {
    fn take(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; n];
        self.inner.read_exact(&mut buf)?;
        self.crc.update(&buf);
        Ok(buf)
    }

    fn u32(&mut self) -> std::io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> std::io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Creates `data_dir` from the snapshot at `snapshot`. On any failure the new dir is removed.
pub(crate) fn restore(snapshot: &Path, data_dir: &Path) -> Result<Revision> {
    restore_with(snapshot, data_dir, true)
}

/// [`restore`] into a dir compressed as `compress` says.
pub(crate) fn restore_with(snapshot: &Path, data_dir: &Path, compress: bool) -> Result<Revision> {
    if data_dir.exists() && std::fs::read_dir(data_dir)?.next().is_some() {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("restore target {} is not empty", data_dir.display()),
        )));
    }
    let result = restore_into(snapshot, data_dir, compress);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(data_dir);
    }
    result
}

fn restore_into(snapshot: &Path, data_dir: &Path, compress: bool) -> Result<Revision> {
    let bad = |reason: String| Error::Corrupt {
        path: snapshot.to_path_buf(),
        reason,
    };
    let truncated = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            bad("the snapshot is truncated".into())
        } else {
            read::io_err(e)
        }
    };
    let file = File::open(snapshot).map_err(read::io_err)?;
    let mut input = Verified {
        inner: BufReader::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
    };
    if input.take(8).map_err(truncated)? != MAGIC {
        return Err(bad("not a skiff snapshot (bad magic)".into()));
    }
    let version = input.u32().map_err(truncated)?;
    if version != VERSION {
        return Err(bad(format!(
            "snapshot format {version} is not supported (this build reads format {VERSION})"
        )));
    }
    let rev = input.u64().map_err(truncated)?;
    let compacted = input.u64().map_err(truncated)?;
    let db = super::sled_config(data_dir, compress)
        .open()
        .map_err(read::sled_err)?;
    let mut batch = sled::Batch::default();
    let mut in_batch = 0;
    let mut count = 0u64;
    loop {
        let tag = input.take(1).map_err(truncated)?[0];
        match tag {
            0 => break,
            1 => {}
            other => return Err(bad(format!("unknown record tag {other}"))),
        }
        let klen = input.u32().map_err(truncated)? as usize;
        let key = input.take(klen).map_err(truncated)?;
        let vlen = input.u32().map_err(truncated)? as usize;
        let value = input.take(vlen).map_err(truncated)?;
        match key.first() {
            Some(&HIST) | Some(&LOG) | Some(&keys::META) => {}
            _ => return Err(bad("a record outside the store's key spaces".into())),
        }
        batch.insert(key, value);
        count += 1;
        in_batch += 1;
        if in_batch == 4096 {
            db.apply_batch(std::mem::take(&mut batch))
                .map_err(read::sled_err)?;
            in_batch = 0;
        }
    }
    db.apply_batch(batch).map_err(read::sled_err)?;
    let expected_count = input.u64().map_err(truncated)?;
    let crc = input.crc.clone().finalize();
    let mut stored = [0u8; 4];
    input.inner.read_exact(&mut stored).map_err(truncated)?;
    if expected_count != count || u32::from_le_bytes(stored) != crc {
        return Err(bad("checksum mismatch: the snapshot is damaged".into()));
    }
    db.insert(keys::META_COMPACTED, &compacted.to_be_bytes()[..])
        .map_err(read::sled_err)?;
    // Rebuild the lease attachments from the live keys.
    let mut attach = sled::Batch::default();
    read::for_each_at(&db, &KeyRange::from(Vec::new()), u64::MAX, |key, _, rec| {
        if let Some(lease) = rec.lease {
            attach.insert(keys::attach_key(lease, &key), &[][..]);
        }
        Ok(true)
    })?;
    db.apply_batch(attach).map_err(read::sled_err)?;
    // Sanity: the newest log entry is the snapshot's revision.
    let newest = db
        .range(keys::log_key(0)..=keys::log_key(u64::MAX))
        .next_back()
        .transpose()
        .map_err(read::sled_err)?
        .and_then(|(k, _)| keys::parse_log_key(&k));
    if rev > 0 && newest != Some(Revision(rev)) {
        return Err(bad(format!(
            "the snapshot claims revision {rev} but its log ends at {newest:?}"
        )));
    }
    db.insert(keys::META_FORMAT, keys::FORMAT)
        .map_err(read::sled_err)?;
    db.flush().map_err(read::sled_err)?;
    // Check a history record decodes, so that a foreign file with valid framing is caught here.
    if let Some(item) = db.scan_prefix([HIST]).next() {
        let (_, v) = item.map_err(read::sled_err)?;
        decode_hist(&v).map_err(|e| bad(e.to_string()))?;
    }
    Ok(Revision(rev))
}

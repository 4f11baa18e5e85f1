//! A portable archive of log entries (`skiff export` / `skiff import`), and copying a window of
//! one log into a new data dir (`skiff replay`): revisions, commit times and values kept exactly.
//!
//! An archive of the window `first ..= last` holds the source's per-prefix retention watermarks
//! and leases, the base (every key's version as it was at `first - 1`, each with its commit
//! time), then every entry `first ..= last`. Imported into an empty data dir, every read at a
//! revision in the window answers byte for byte as the source did; reads before `first` say the
//! history is compacted.
//!
//! Per-prefix retention ([`Config::prefix_retention`](crate::Config::prefix_retention)) prunes a
//! key's oldest versions inside the window too. Those versions are not in the source, so they
//! cannot be carried; the archive carries what is retained, each pruned version as its key only
//! (in its entry, in place), and the watermarks. The copy answers as the source: a read that
//! needs a pruned version is [`Error::Compacted`] for the same prefix and revision in both, every
//! other read is the same. (A key whose version at `first - 1` was pruned has no base version.)
//!
//! Leases: every lease live in the source is carried with its TTL, and the keys live at `last`
//! stay attached to theirs. As in any reopened data dir (and as etcd does after a restore), a
//! lease's expiry is counted again from the open of the new dir. A key attached to a lease that
//! no longer exists in the source (it ended after `last`) is attached to it with a TTL of zero:
//! it is deleted, in a new revision after `last`, as soon as the new dir is opened, as it was in
//! the source. Revisions `..= last` are kept as they were either way.
//!
//! File format, version 2 (integers little-endian):
//!
//! ```text
//! "SKIFFLOG" | u32 version=2 | u64 first | u64 last
//! { u8 3 | u32 len | prefix | u64 mark }*                    the watermarks
//! { u8 4 | u64 lease | u64 ttl in ms }*                      the leases
//! { u8 1 | u64 time | kv }*                                  the base
//! { [u8 5 | u32 len | tag] u8 2 | u64 revision | u64 time | u32 n | { u8 kind | kv }ⁿ }*
//!                                                            the entries, in order, each
//!                                                            after its tag if it has one
//! u8 0 | u64 item count | u32 crc32 of every byte before it
//! kv = u32 len | key | u64 create | u64 mod | u64 version | u64 lease+1 (0: none) | u32 len | value
//! ```
//! Times are nanoseconds since the Unix epoch; kind is 0 for a put, 1 for a delete, 2 for a
//! version that retention pruned (its kv has the key and the revision only). Version 1 (no
//! watermarks, no leases, no pruned versions) is refused: export again with this build.
//!
//! Tags ([`Txn::tag`](crate::Txn::tag), record 5) came after version 2 without changing it, so
//! an archive without tags still reads in older builds, and one with tags is refused there as
//! holding an unknown record. Base versions carry no tag.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::types::{Event, EventKind, KeyValue, LeaseId, LogEntry, MAX_TAG, Revision};
use crate::{Importer, SledStore, Store};

const MAGIC: &[u8; 8] = b"SKIFFLOG";
/// The archive format this build writes and reads.
pub const VERSION: u32 = 2;
/// Entries read from the log per call.
const PAGE: usize = 1024;

/// What goes into an archive or a new data dir, in order: every base version, then the entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A per-prefix retention watermark of the source: reads under the prefix before the
    /// revision are compacted.
    Watermark(Vec<u8>, Revision),
    /// A lease of the source, with its TTL.
    Lease(LeaseId, Duration),
    /// One key as it was before the window, with its commit time.
    Base(KeyValue, SystemTime),
    /// One entry of the window, and the indexes of its events whose versions retention pruned
    /// (those carry their key only).
    Entry(LogEntry, Vec<usize>),
}

/// How far a long step is, for a progress bar: `done` of `total` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Entries handled so far.
    pub done: u64,
    /// Entries in all.
    pub total: u64,
}

/// What an export, import or copy covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The first revision of the window.
    pub first: Revision,
    /// The last revision of the window.
    pub last: Revision,
    /// Base versions carried.
    pub base: u64,
    /// Entries carried.
    pub entries: u64,
}

/// The window `since ..= until` of `store` that can be carried: `since` defaults to the oldest
/// retained revision, `until` to the current one. A `since` below the retained history is
/// [`Error::Compacted`]; an `until` beyond the log is [`Error::FutureRevision`].
pub fn window(
    store: &dyn Store,
    since: Option<Revision>,
    until: Option<Revision>,
) -> Result<(Revision, Revision)> {
    let status = store.status();
    let until = until.unwrap_or(status.revision);
    if until > status.revision {
        return Err(Error::FutureRevision {
            requested: until,
            current: status.revision,
        });
    }
    let oldest = status.compacted.max(Revision(1));
    let first = match since {
        Some(s) if s < status.compacted => {
            return Err(Error::Compacted {
                requested: s,
                compacted: status.compacted,
                prefix: None,
            });
        }
        Some(s) => s.max(Revision(1)),
        None => oldest,
    };
    if until < status.compacted {
        return Err(Error::Compacted {
            requested: until,
            compacted: status.compacted,
            prefix: None,
        });
    }
    if until < first {
        return Err(Error::FutureRevision {
            requested: first,
            current: until,
        });
    }
    Ok((first, until))
}

/// Reads the window `first ..= last` of `store` (see [`window`]) and hands every [`Item`] to
/// `sink`, in order, reporting progress per page of entries.
pub async fn read_window(
    store: &dyn Store,
    first: Revision,
    last: Revision,
    sink: &mut dyn FnMut(Item) -> Result<()>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary> {
    let total = last.0 - first.0 + 1;
    for (prefix, mark) in store.watermarks() {
        sink(Item::Watermark(prefix, mark))?;
    }
    for (id, ttl) in store.leases() {
        sink(Item::Lease(id, ttl))?;
    }
    // The state at first - 1, as far as it is retained (compaction keeps each key's newest
    // version below the compacted revision; per-prefix retention may have pruned it).
    let base = if first.0 > 1 {
        store.retained_at(Revision(first.0 - 1)).await?
    } else {
        Vec::new()
    };
    let mut summary = Summary {
        first,
        last,
        base: 0,
        entries: 0,
    };
    for kv in base {
        let time = store
            .history(&kv.key)
            .await?
            .into_iter()
            .find(|(_, e)| e.kv.mod_revision == kv.mod_revision)
            .map(|(c, _)| c.time)
            .unwrap_or(UNIX_EPOCH);
        sink(Item::Base(kv, time))?;
        summary.base += 1;
    }
    let mut next = first;
    progress(Progress { done: 0, total });
    while next <= last {
        let entries = store.log_retained(next, Some(last), PAGE).await?;
        let Some(end) = entries.last().map(|(e, _)| e.revision) else {
            break;
        };
        for (entry, pruned) in entries {
            sink(Item::Entry(entry, pruned))?;
            summary.entries += 1;
        }
        next = end.next();
        progress(Progress {
            done: summary.entries,
            total,
        });
    }
    if summary.entries != total {
        return Err(Error::Corrupt {
            path: PathBuf::new(),
            reason: format!(
                "the log has {} entries in {first}..={last}, expected {total}",
                summary.entries
            ),
        });
    }
    Ok(summary)
}

/// Writes the window `since ..= until` of `store` as an archive to `out`.
pub async fn export(
    store: &dyn Store,
    since: Option<Revision>,
    until: Option<Revision>,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary> {
    let (first, last) = window(store, since, until)?;
    let mut writer = ArchiveWriter::start(out, first, last)?;
    let summary = read_window(store, first, last, &mut |item| writer.item(&item), progress).await?;
    writer.finish()?;
    Ok(summary)
}

/// Writes `items` as the archive of the window `first ..= last`, byte for byte as [`export`]
/// would (for the fuzz targets' round trip; it checks nothing about the window).
#[doc(hidden)]
pub fn write(out: &mut dyn Write, first: Revision, last: Revision, items: &[Item]) -> Result<()> {
    let mut writer = ArchiveWriter::start(out, first, last)?;
    for item in items {
        writer.item(item)?;
    }
    writer.finish()
}

/// Copies the window `since ..= until` of `store` into a new data dir at `data_dir` (which must
/// not exist or be empty), as [`import`] of an [`export`] would, without the file in between.
pub async fn copy(
    store: &dyn Store,
    since: Option<Revision>,
    until: Option<Revision>,
    data_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary> {
    let (first, last) = window(store, since, until)?;
    let mut importer = SledStore::importer(data_dir)?;
    let result = read_window(
        store,
        first,
        last,
        &mut |item| feed(&mut importer, &item),
        progress,
    )
    .await;
    let result = result.and_then(|summary| importer.finish().map(|_| summary));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(data_dir);
    }
    result
}

fn feed(importer: &mut Importer, item: &Item) -> Result<()> {
    match item {
        Item::Watermark(prefix, mark) => {
            importer.watermark(prefix, *mark);
            Ok(())
        }
        Item::Lease(id, ttl) => {
            importer.lease(*id, *ttl);
            Ok(())
        }
        Item::Base(kv, time) => importer.base(kv, *time),
        Item::Entry(entry, pruned) => importer.entry_pruned(entry, pruned),
    }
}

/// Reads an archive from `input` into a new data dir at `data_dir` (which must not exist or be
/// empty). A damaged, truncated or foreign archive is [`Error::Corrupt`] and leaves no data dir.
pub fn import(
    input: &mut dyn Read,
    data_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary> {
    let mut importer = SledStore::importer(data_dir)?;
    let result = read(input, &mut |item| feed(&mut importer, &item), progress);
    let result = result.and_then(|summary| importer.finish().map(|_| summary));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(data_dir);
    }
    result
}

/// Reads an archive from `input`, handing every [`Item`] to `sink` in order as it is read (the
/// checksum is checked only at the end: a caller keeps nothing of a read that fails). [`import`]
/// feeds a new data dir; the fuzz targets (`fuzz/`) keep the items.
#[doc(hidden)]
pub fn read(
    input: &mut dyn Read,
    sink: &mut dyn FnMut(Item) -> Result<()>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary> {
    let mut reader = ArchiveReader {
        input,
        crc: crc32fast::Hasher::new(),
    };
    if &reader.take(8)?[..] != MAGIC {
        return Err(corrupt("not a skiff archive (bad magic)"));
    }
    let version = reader.u32()?;
    if version != VERSION {
        return Err(corrupt(&format!(
            "archive format {version} is not supported (this build reads {VERSION}; export the \
             source again with this build)"
        )));
    }
    let first = Revision(reader.u64()?);
    let last = Revision(reader.u64()?);
    if first.0 == 0 || last < first {
        return Err(corrupt("the archive's window is empty"));
    }
    let total = last.0 - first.0 + 1;
    let mut summary = Summary {
        first,
        last,
        base: 0,
        entries: 0,
    };
    let mut items = 0u64;
    // The tag just read, for the entry that must follow it.
    let mut tag: Option<Vec<u8>> = None;
    progress(Progress { done: 0, total });
    loop {
        let record = reader.take(1)?[0];
        if tag.is_some() && record != 2 {
            return Err(corrupt("a tag not followed by its entry"));
        }
        match record {
            0 => break,
            1 => {
                let time = reader.time()?;
                let kv = reader.kv()?;
                sink(Item::Base(kv, time))?;
                summary.base += 1;
            }
            2 => {
                let revision = Revision(reader.u64()?);
                let time = reader.time()?;
                let n = reader.u32()?;
                let mut events = Vec::with_capacity(n.min(1 << 16) as usize);
                let mut pruned = Vec::new();
                for i in 0..n {
                    let kind = match reader.take(1)?[0] {
                        0 => EventKind::Put,
                        1 => EventKind::Delete,
                        2 => {
                            pruned.push(i as usize);
                            EventKind::Put
                        }
                        other => return Err(corrupt(&format!("unknown event kind {other}"))),
                    };
                    events.push(Event {
                        kind,
                        kv: reader.kv()?,
                        prev_kv: None,
                    });
                }
                if revision < first || revision > last {
                    return Err(corrupt(&format!(
                        "entry {revision} outside the archive's window {first}..={last}"
                    )));
                }
                sink(Item::Entry(
                    LogEntry {
                        revision,
                        time,
                        tag: tag.take(),
                        events,
                    },
                    pruned,
                ))?;
                summary.entries += 1;
                if summary.entries.is_multiple_of(PAGE as u64) {
                    progress(Progress {
                        done: summary.entries,
                        total,
                    });
                }
            }
            3 => {
                let prefix = reader.bytes()?;
                let mark = Revision(reader.u64()?);
                sink(Item::Watermark(prefix, mark))?;
            }
            5 => {
                let bytes = reader.bytes()?;
                if bytes.is_empty() || bytes.len() > MAX_TAG {
                    return Err(corrupt(&format!("a tag of {} bytes", bytes.len())));
                }
                tag = Some(bytes);
            }
            4 => {
                let id = LeaseId(reader.u64()?);
                let ttl = Duration::from_millis(reader.u64()?);
                sink(Item::Lease(id, ttl))?;
            }
            other => return Err(corrupt(&format!("unknown record tag {other}"))),
        }
        items += 1;
    }
    let count = reader.u64()?;
    let crc = reader.crc.clone().finalize();
    let mut stored = [0u8; 4];
    reader.input.read_exact(&mut stored).map_err(truncated)?;
    if count != items || u32::from_le_bytes(stored) != crc {
        return Err(corrupt("checksum mismatch: the archive is damaged"));
    }
    if summary.entries != total {
        return Err(corrupt(&format!(
            "the archive holds {} entries, its window {first}..={last} needs {total}",
            summary.entries
        )));
    }
    progress(Progress {
        done: summary.entries,
        total,
    });
    Ok(summary)
}

fn corrupt(reason: &str) -> Error {
    Error::Corrupt {
        path: PathBuf::from("<archive>"),
        reason: reason.to_string(),
    }
}

fn truncated(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        corrupt("the archive is truncated")
    } else {
        Error::Io(e)
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

struct ArchiveWriter<'a> {
    out: &'a mut dyn Write,
    crc: crc32fast::Hasher,
    items: u64,
}

impl<'a> ArchiveWriter<'a> {
    fn start(out: &'a mut dyn Write, first: Revision, last: Revision) -> Result<Self> {
        let mut writer = ArchiveWriter {
            out,
            crc: crc32fast::Hasher::new(),
            items: 0,
        };
        writer.put(MAGIC)?;
        writer.put(&VERSION.to_le_bytes())?;
        writer.put(&first.0.to_le_bytes())?;
        writer.put(&last.0.to_le_bytes())?;
        Ok(writer)
    }

    fn finish(mut self) -> Result<()> {
        self.put(&[0])?;
        let items = self.items;
        self.put(&items.to_le_bytes())?;
        let crc = self.crc.clone().finalize();
        self.out.write_all(&crc.to_le_bytes())?;
        self.out.flush()?;
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        self.out.write_all(bytes).map_err(Error::Io)
    }

    fn kv(&mut self, kv: &KeyValue) -> Result<()> {
        self.put(&(kv.key.len() as u32).to_le_bytes())?;
        self.put(&kv.key)?;
        self.put(&kv.create_revision.0.to_le_bytes())?;
        self.put(&kv.mod_revision.0.to_le_bytes())?;
        self.put(&kv.version.to_le_bytes())?;
        self.put(&kv.lease.map_or(0, |l| l.0 + 1).to_le_bytes())?;
        self.put(&(kv.value.len() as u32).to_le_bytes())?;
        self.put(&kv.value)
    }

    fn item(&mut self, item: &Item) -> Result<()> {
        match item {
            Item::Base(kv, time) => {
                self.put(&[1])?;
                self.put(&nanos(*time).to_le_bytes())?;
                self.kv(kv)?;
            }
            Item::Watermark(prefix, mark) => {
                self.put(&[3])?;
                self.put(&(prefix.len() as u32).to_le_bytes())?;
                self.put(prefix)?;
                self.put(&mark.0.to_le_bytes())?;
            }
            Item::Lease(id, ttl) => {
                self.put(&[4])?;
                self.put(&id.0.to_le_bytes())?;
                self.put(&(ttl.as_millis() as u64).to_le_bytes())?;
            }
            Item::Entry(entry, pruned) => {
                if let Some(tag) = entry.tag.as_ref().filter(|t| !t.is_empty()) {
                    self.put(&[5])?;
                    self.put(&(tag.len() as u32).to_le_bytes())?;
                    self.put(tag)?;
                    self.items += 1;
                }
                self.put(&[2])?;
                self.put(&entry.revision.0.to_le_bytes())?;
                self.put(&nanos(entry.time).to_le_bytes())?;
                self.put(&(entry.events.len() as u32).to_le_bytes())?;
                for (i, event) in entry.events.iter().enumerate() {
                    self.put(&[match event.kind {
                        _ if pruned.contains(&i) => 2,
                        EventKind::Put => 0,
                        EventKind::Delete => 1,
                    }])?;
                    self.kv(&event.kv)?;
                }
            }
        }
        self.items += 1;
        Ok(())
    }
}

struct ArchiveReader<'a> {
    input: &'a mut dyn Read,
    crc: crc32fast::Hasher,
}

impl ArchiveReader<'_> {
    fn take(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0; n];
        self.input.read_exact(&mut buf).map_err(truncated)?;
        self.crc.update(&buf);
        Ok(buf)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn time(&mut self) -> Result<SystemTime> {
        Ok(UNIX_EPOCH + Duration::from_nanos(self.u64()?))
    }

    fn bytes(&mut self) -> Result<Vec<u8>> {
        let len = self.u32()? as usize;
        if len > 64 << 20 {
            return Err(corrupt(&format!("a record of {len} bytes")));
        }
        self.take(len)
    }

    fn kv(&mut self) -> Result<KeyValue> {
        let key = self.bytes()?;
        let create_revision = Revision(self.u64()?);
        let mod_revision = Revision(self.u64()?);
        let version = self.u64()?;
        let lease = self.u64()?.checked_sub(1).map(LeaseId);
        let value = self.bytes()?;
        Ok(KeyValue {
            key,
            value,
            create_revision,
            mod_revision,
            version,
            lease,
        })
    }
}

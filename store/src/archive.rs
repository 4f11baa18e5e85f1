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
//! # Between the embedded log and etcd
//! An archive of an etcd prefix ([`export_etcd`]) keeps etcd's revisions as they are. They have
//! gaps (other prefixes' writes, etcd's own revisions, the prefix marker), so the archive says
//! so ([`Item::Gaps`], record 6, first) and its entries are the revisions that changed the
//! prefix, increasing, not every revision of the window. [`import`] into a data dir, whose log
//! needs contiguous revisions, numbers them densely from the window's first revision:
//!
//! ```text
//!  etcd:      base m=4 m=9    entries 12  13  17  18  25      window 12 ..= 30
//!  data dir:  base m=4 m=9    entries 12  13  14  15  16      k-th entry -> first + k
//! ```
//! Base versions (below `first`) keep their revisions; create and mod revisions inside the
//! window are renumbered with their entries, so the order of every change, versions and create
//! revisions stay exact. Revision `r` of the window on etcd is revision `first + n - 1` in the
//! data dir, `n` being the number of entries in `first ..= r` (the state after etcd's `r` is the
//! state after its last change at or before `r`). So `--at <revision>` on the data dir takes
//! the new numbers (`skiff import` prints the old and new last revision), and resourceVersions
//! that clients hold do not carry over (they relist, as after any restore). `--at <time>`
//! answers as on etcd: every entry keeps its commit time. A version below etcd's compaction
//! has no time in etcd's history: it gets the time of the oldest revision etcd keeps. An
//! archive with gaps is refused by builds from before it (an unknown record).
//!
//! The other way, [`import_etcd`] loads any archive into an empty etcd prefix, where etcd
//! numbers every txn anew: each source revision becomes one etcd revision (a few, when it has
//! more changes than an etcd txn may hold), increasing, with its commit time and tag kept in
//! the prefix's clock key, so `--at <time>` reads there as on the source and `--at <revision>`
//! takes etcd's numbers (the import prints the first and last of both). Versions that
//! per-prefix retention pruned are skipped (etcd's history lacks them), the watermarks are not
//! carried (etcd has none), and a base key's create revision there is its mod revision. The
//! details are in the module docs of `etcd::import`.
//!
//! File format, version 2 (integers little-endian):
//!
//! ```text
//! "SKIFFLOG" | u32 version=2 | u64 first | u64 last
//! [u8 6]                                                     the window has gaps
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
//! Tags ([`Txn::tag`](crate::Txn::tag), record 5) and gaps (record 6) came after version 2
//! without changing it, so an archive without them still reads in older builds, and one with
//! them is refused there as holding an unknown record. Base versions carry no tag.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(feature = "etcd")]
use crate::EtcdStore;
use crate::error::{Error, Result};
#[cfg(feature = "etcd")]
use crate::etcd::Mapping;
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
    /// The window's revisions have gaps (the source is an etcd prefix): the entries are the
    /// revisions that changed the source, in order, not every revision of the window. First in
    /// the archive when present.
    Gaps,
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
    /// Whether the window has gaps ([`Item::Gaps`]): then `entries` may be fewer than the
    /// window's revisions, and [`import`] numbers them densely from `first`.
    pub gaps: bool,
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

/// Where a window is read from: any store, or an etcd prefix, whose revisions have gaps and
/// whose leases and commit times are asked of etcd itself.
#[derive(Clone, Copy)]
enum Source<'a> {
    Log(&'a dyn Store),
    #[cfg(feature = "etcd")]
    Etcd(&'a EtcdStore),
}

impl Source<'_> {
    fn store(&self) -> &dyn Store {
        match *self {
            Source::Log(s) => s,
            #[cfg(feature = "etcd")]
            Source::Etcd(s) => s,
        }
    }

    /// Whether the window's revisions have gaps (other prefixes' writes, etcd's own).
    fn gaps(&self) -> bool {
        !matches!(self, Source::Log(_))
    }

    async fn leases(&self) -> Result<Vec<(LeaseId, Duration)>> {
        match *self {
            Source::Log(s) => Ok(s.leases()),
            #[cfg(feature = "etcd")]
            Source::Etcd(s) => s.live_leases().await,
        }
    }

    /// The commit time of the base version `kv` (`oldest`: the time of the oldest revision etcd
    /// keeps, once asked).
    async fn base_time(
        &self,
        kv: &KeyValue,
        #[cfg_attr(not(feature = "etcd"), allow(unused_variables))] oldest: &mut Option<
            Option<SystemTime>,
        >,
    ) -> Result<Option<SystemTime>> {
        match *self {
            Source::Log(s) => Ok(s
                .history(&kv.key)
                .await?
                .into_iter()
                .find(|(_, e)| e.kv.mod_revision == kv.mod_revision)
                .map(|(c, _)| c.time)),
            // etcd keeps no time for a version below its compaction: those get the time of the
            // oldest revision it still has, the latest they can have been written at.
            #[cfg(feature = "etcd")]
            Source::Etcd(s) => match s.commit_time(kv.mod_revision).await? {
                Some(t) => Ok(Some(t)),
                None => {
                    if oldest.is_none() {
                        let floor = Revision(s.status().compacted.0.saturating_sub(1));
                        *oldest = Some(s.commit_time(floor).await?);
                    }
                    Ok(oldest.flatten())
                }
            },
        }
    }
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
    read_from(Source::Log(store), first, last, sink, progress).await
}

async fn read_from(
    source: Source<'_>,
    first: Revision,
    last: Revision,
    sink: &mut dyn FnMut(Item) -> Result<()>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary> {
    let store = source.store();
    let gaps = source.gaps();
    let total = last.0 - first.0 + 1;
    if gaps {
        sink(Item::Gaps)?;
    }
    for (prefix, mark) in store.watermarks() {
        sink(Item::Watermark(prefix, mark))?;
    }
    for (id, ttl) in source.leases().await? {
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
        gaps,
    };
    let mut oldest_time = None;
    for kv in base {
        let time = source
            .base_time(&kv, &mut oldest_time)
            .await?
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
            done: if gaps {
                next.0 - first.0
            } else {
                summary.entries
            },
            total,
        });
    }
    if gaps && summary.entries == 0 {
        return Err(Error::Corrupt {
            path: PathBuf::new(),
            reason: format!(
                "no revision in {first}..={last} changed the prefix: an archive needs at least \
                 one entry (write something, or export a window that has one)"
            ),
        });
    }
    if !gaps && summary.entries != total {
        return Err(Error::Corrupt {
            path: PathBuf::new(),
            reason: format!(
                "the log has {} entries in {first}..={last}, expected {total}",
                summary.entries
            ),
        });
    }
    progress(Progress { done: total, total });
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

/// Writes the window `since ..= until` of an etcd prefix as an archive to `out`, as [`export`]
/// does for any store, with what only etcd knows: the window has gaps ([`Item::Gaps`]), the
/// leases are etcd's live leases holding keys of the prefix, and the base versions' times come
/// from the clock key. The revisions are etcd's, as they are; [`import`] into a data dir
/// numbers them densely.
#[cfg(feature = "etcd")]
pub async fn export_etcd(
    store: &EtcdStore,
    since: Option<Revision>,
    until: Option<Revision>,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(Progress),
) -> Result<Summary> {
    let (first, last) = window(store, since, until)?;
    let mut writer = ArchiveWriter::start(out, first, last)?;
    let summary = read_from(
        Source::Etcd(store),
        first,
        last,
        &mut |item| writer.item(&item),
        progress,
    )
    .await?;
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
        // The caller renumbers (see `Dense`).
        Item::Gaps => Ok(()),
    }
}

/// The dense numbering of a window with gaps (see the module docs): its `k`-th entry (from 0)
/// becomes revision `first + k`; revisions before `first` (the base's) stay as they are.
#[derive(Debug, Default)]
struct Dense {
    first: u64,
    /// The source revisions of the entries so far, increasing (`read` checks the order).
    seen: Vec<u64>,
}

impl Dense {
    fn map(&self, r: Revision) -> Result<Revision> {
        if r.0 < self.first {
            return Ok(r);
        }
        match self.seen.binary_search(&r.0) {
            Ok(k) => Ok(Revision(self.first + k as u64)),
            Err(_) => Err(corrupt(&format!(
                "revision {r} is named by a version but has no entry of its own"
            ))),
        }
    }

    fn entry(&mut self, entry: &LogEntry) -> Result<LogEntry> {
        self.seen.push(entry.revision.0);
        let mut entry = entry.clone();
        entry.revision = self.map(entry.revision)?;
        for event in &mut entry.events {
            let kv = &mut event.kv;
            if kv.mod_revision.0 != 0 {
                kv.mod_revision = self.map(kv.mod_revision)?;
            }
            if kv.create_revision.0 != 0 {
                kv.create_revision = self.map(kv.create_revision)?;
            }
        }
        Ok(entry)
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
    let first = std::cell::Cell::new(0);
    let mut dense: Option<Dense> = None;
    let result = read_inner(
        input,
        &mut |window_first, _| first.set(window_first.0),
        &mut |item| match (&item, &mut dense) {
            (Item::Gaps, _) => {
                dense = Some(Dense {
                    first: first.get(),
                    seen: Vec::new(),
                });
                Ok(())
            }
            (Item::Entry(entry, pruned), Some(d)) => {
                let entry = d.entry(entry)?;
                importer.entry_pruned(&entry, pruned)
            }
            _ => feed(&mut importer, &item),
        },
        progress,
    );
    let result = result.and_then(|summary| importer.finish().map(|_| summary));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(data_dir);
    }
    result
}

/// Loads the archive at `path` into the prefix of `store`, which must hold nothing (see
/// [`EtcdStore::importer`]; how revisions, times, leases and pruned versions map is in the
/// module docs of `etcd::import`). The file is read twice: first all of it is checked (its
/// checksum, every key and value against the prefix and the request limit) with nothing
/// written, then it is written. A failure while writing removes everything written and is
/// [`Error::ImportFailed`]; any error before is returned as it is, with nothing written.
#[cfg(feature = "etcd")]
pub async fn import_etcd(
    path: &Path,
    store: &EtcdStore,
    progress: &mut dyn FnMut(Progress),
) -> Result<(Summary, Mapping)> {
    let mut importer = store.importer().await?;
    let open = |path: &Path| -> Result<std::io::BufReader<std::fs::File>> {
        Ok(std::io::BufReader::with_capacity(
            1 << 20,
            std::fs::File::open(path)?,
        ))
    };
    let check = store.import_check();
    let file = path.to_path_buf();
    let summary = tokio::task::spawn_blocking(move || {
        read(
            &mut open(&file)?,
            &mut |item| check.item(&item),
            &mut |_| {},
        )
    })
    .await
    .map_err(|e| Error::Io(std::io::Error::other(e)))??;

    let (tx, mut rx) = tokio::sync::mpsc::channel::<Item>(256);
    let file = path.to_path_buf();
    let reader = tokio::task::spawn_blocking(move || {
        read(
            &mut open(&file)?,
            &mut |item| tx.blocking_send(item).map_err(|_| Error::Closed),
            &mut |_| {},
        )
    });
    let total = summary.entries;
    let mut done = 0;
    progress(Progress { done, total });
    let mut written = Ok(());
    while let Some(item) = rx.recv().await {
        let entry = matches!(item, Item::Entry(..));
        if let Err(e) = importer.item(item).await {
            written = Err(e);
            break;
        }
        if entry {
            done += 1;
            if done.is_multiple_of(64) {
                progress(Progress { done, total });
            }
        }
    }
    // Stops the reader if writing stopped first.
    drop(rx);
    let read = reader
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e)))
        .and_then(|r| r);
    let result = match (written, read) {
        (Err(e), _) | (Ok(()), Err(e)) => Err(e),
        (Ok(()), Ok(_)) => importer.finish().await,
    };
    match result {
        Ok(mapping) => {
            progress(Progress { done: total, total });
            Ok((summary, mapping))
        }
        Err(e) => Err(Error::ImportFailed {
            prefix: store.prefix().to_vec(),
            source: Box::new(e),
            cleanup: importer.abort().await.err(),
        }),
    }
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
    read_inner(input, &mut |_, _| {}, sink, progress)
}

/// [`read`], telling `header` the window before any item.
fn read_inner(
    input: &mut dyn Read,
    header: &mut dyn FnMut(Revision, Revision),
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
    header(first, last);
    let total = last.0 - first.0 + 1;
    let mut summary = Summary {
        first,
        last,
        base: 0,
        entries: 0,
        gaps: false,
    };
    let mut items = 0u64;
    // The last entry's revision, for the order of a window with gaps.
    let mut previous = Revision::ZERO;
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
                if summary.gaps && revision <= previous {
                    return Err(corrupt(&format!(
                        "entry {revision} after entry {previous}: entries out of order"
                    )));
                }
                previous = revision;
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
            6 if items == 0 => {
                summary.gaps = true;
                sink(Item::Gaps)?;
            }
            6 => return Err(corrupt("the gaps record is not the first")),
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
    if summary.gaps && summary.entries == 0 {
        return Err(corrupt("the archive holds no entries"));
    }
    if !summary.gaps && summary.entries != total {
        return Err(corrupt(&format!(
            "the archive holds {} entries, its window {first}..={last} needs {total}",
            summary.entries
        )));
    }
    progress(Progress {
        done: if summary.gaps { total } else { summary.entries },
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
            Item::Gaps => self.put(&[6])?,
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

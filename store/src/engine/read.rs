//! Reads over the history space: a key or range at a revision, one revision's events, a key's
//! history. Pure functions of a sled tree; the callers check compaction around them.

use std::ops::Bound;

use crate::error::{Error, Result};
use crate::keys::{self, hist_bounds, hist_key, hist_key_end, hist_key_start, parse_hist_key};
use crate::record::{HistRecord, LogGroup, LogRecord};
use crate::types::{Event, EventKind, KeyRange, KeyValue, LeaseId, RangeRequest, Revision};

/// Maps a sled error to the store's error.
pub(crate) fn sled_err(e: sled::Error) -> Error {
    Error::from(e)
}

/// The store's error for a sled error kept aside (sled's own `Clone` turns an I/O error into a
/// string, losing the OS error code, so copy the code instead).
pub(crate) fn sled_err_copy(e: &sled::Error) -> Error {
    match e {
        sled::Error::Io(io) => io_err(match io.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(io.kind(), io.to_string()),
        }),
        other => Error::Sled(other.clone()),
    }
}

/// Maps an I/O error, picking out a full disk.
pub(crate) fn io_err(io: std::io::Error) -> Error {
    if crate::error::is_no_space(&io) {
        Error::NoSpace(io)
    } else {
        Error::Io(io)
    }
}

/// The newest record of `key` with revision `<= rev` (`u64::MAX`: the newest of all, including
/// applied writes that are not yet durable — only the writer reads that way).
pub(crate) fn version_at(
    tree: &sled::Tree,
    key: &[u8],
    rev: u64,
) -> Result<Option<(u64, HistRecord)>> {
    version_raw_at(tree, key, rev)?
        .map(|(rev, raw)| Ok((rev, HistRecord::decode(&raw)?)))
        .transpose()
}

/// [`version_at`], with the record still encoded.
fn version_raw_at(tree: &sled::Tree, key: &[u8], rev: u64) -> Result<Option<(u64, sled::IVec)>> {
    let hi = hist_key(key, rev);
    match tree.range(hist_key_start(key)..=hi).next_back() {
        None => Ok(None),
        Some(item) => {
            let (raw, value) = item.map_err(sled_err)?;
            Ok(Some((keys::hist_key_rev(&raw), value)))
        }
    }
}

/// The key-value a record describes; `None` for a tombstone.
pub(crate) fn record_kv(
    key: &[u8],
    rev: u64,
    rec: &HistRecord,
    keys_only: bool,
) -> Option<KeyValue> {
    let value = rec.value.as_ref()?;
    Some(KeyValue {
        key: key.to_vec(),
        value: if keys_only { Vec::new() } else { value.clone() },
        create_revision: Revision(rec.create),
        mod_revision: Revision(rev),
        version: rec.version,
        lease: rec.lease.map(LeaseId),
    })
}

/// The event a record describes.
pub(crate) fn record_event(
    key: &[u8],
    rev: u64,
    rec: &HistRecord,
    prev_kv: Option<KeyValue>,
) -> Event {
    match record_kv(key, rev, rec, false) {
        Some(kv) => Event {
            kind: EventKind::Put,
            kv,
            prev_kv,
        },
        None => Event {
            kind: EventKind::Delete,
            kv: tombstone_kv(key, rev),
            prev_kv,
        },
    }
}

/// The `kv` of a delete event.
pub(crate) fn tombstone_kv(key: &[u8], rev: u64) -> KeyValue {
    KeyValue {
        key: key.to_vec(),
        value: Vec::new(),
        create_revision: Revision::ZERO,
        mod_revision: Revision(rev),
        version: 0,
        lease: None,
    }
}

/// The result of [`range_at`].
#[derive(Debug, Default)]
pub(crate) struct RangeOut {
    pub kvs: Vec<KeyValue>,
    pub more: bool,
    pub count: u64,
}

/// Whether a range selects no key at all (an interval whose end is not after its start).
fn range_is_empty(range: &KeyRange) -> bool {
    matches!(&range.end, crate::types::RangeEnd::Before(end) if end.as_slice() <= range.start.as_slice())
}

/// Calls `f` with each key in `range` and its newest record at or below `rev`, in key order,
/// skipping keys that did not exist then; stops when `f` returns false.
///
/// Per key: one seek forward to find the next key, one seek back to find its version at `rev`. The
/// cost is proportional to the number of keys, not of versions.
pub(crate) fn for_each_at(
    tree: &sled::Tree,
    range: &KeyRange,
    rev: u64,
    mut f: impl FnMut(Vec<u8>, u64, HistRecord) -> Result<bool>,
) -> Result<()> {
    for_each_raw_at(tree, range, rev, |key, mod_rev, raw| {
        f(key, mod_rev, HistRecord::decode(raw)?)
    })
}

/// [`for_each_at`], handing `f` the record still encoded: a caller that only counts keys, or
/// wants the value, does not pay for decoding into a [`HistRecord`] (a copy of the value).
fn for_each_raw_at(
    tree: &sled::Tree,
    range: &KeyRange,
    rev: u64,
    mut f: impl FnMut(Vec<u8>, u64, &[u8]) -> Result<bool>,
) -> Result<()> {
    if range_is_empty(range) {
        return Ok(());
    }
    let (mut lower, upper) = hist_bounds(range);
    loop {
        let next = tree
            .range::<Vec<u8>, _>((lower.clone(), upper.clone()))
            .next();
        let Some(item) = next else { break };
        let (raw, _) = item.map_err(sled_err)?;
        let (key, _) = parse_hist_key(&raw).ok_or_else(|| Error::Decode {
            what: "history key",
            source: bincode::error::DecodeError::Other("malformed history key"),
        })?;
        lower = Bound::Included(hist_key_end(&key));
        if let Some((mod_rev, record)) = version_raw_at(tree, &key, rev)?
            && !HistRecord::is_tombstone_encoded(&record)?
            && !f(key, mod_rev, &record)?
        {
            break;
        }
    }
    Ok(())
}

/// Reads `request.range` as it was at `rev` (see [`for_each_at`]). Keys past the limit are only
/// counted, and only when the request asks for the count.
pub(crate) fn range_at(tree: &sled::Tree, request: &RangeRequest, rev: u64) -> Result<RangeOut> {
    let limit = request.limit.filter(|&l| l > 0).unwrap_or(usize::MAX);
    let mut out = RangeOut::default();
    for_each_raw_at(tree, &request.range, rev, |key, mod_rev, raw| {
        out.count += 1;
        if out.kvs.len() < limit {
            out.kvs
                .push(HistRecord::decode_kv(key, mod_rev, raw, request.keys_only)?);
            Ok(true)
        } else {
            out.more = true;
            Ok(request.count)
        }
    })?;
    Ok(out)
}

/// Why a version a reader needed is not there.
#[derive(Debug)]
pub(crate) struct Missing {
    /// The key.
    pub key: Vec<u8>,
    /// The revision the reader needed the key's state at.
    pub rev: u64,
}

/// The events of revision `rev` restricted to `range` (all keys when `None`), or `Ok(None)` when the
/// log has no such entry. Each event gets its previous version when `with_prev`.
pub(crate) fn entry_events(
    tree: &sled::Tree,
    rev: u64,
    log: &LogRecord,
    range: Option<&KeyRange>,
    with_prev: bool,
) -> Result<Result<Vec<Event>, Missing>> {
    let mut events = Vec::new();
    for key in &log.keys {
        if let Some(range) = range
            && !range.contains(key)
        {
            continue;
        }
        let Some(raw) = tree.get(hist_key(key, rev)).map_err(sled_err)? else {
            return Ok(Err(Missing {
                key: key.clone(),
                rev,
            }));
        };
        let rec = HistRecord::decode(&raw)?;
        // Pruning removes a key's oldest versions first, so the newest version below `rev` is
        // either the true previous one or nothing. A delete, and a put of version > 1, had a
        // previous version: if it is gone, say so rather than return none.
        let prev_needed = rec.is_tombstone() || rec.version > 1;
        let prev = if with_prev && prev_needed {
            match version_at(tree, key, rev - 1)?.and_then(|(r, p)| record_kv(key, r, &p, false)) {
                Some(kv) if rec.is_tombstone() || kv.version + 1 == rec.version => Some(kv),
                _ => {
                    return Ok(Err(Missing {
                        key: key.clone(),
                        rev: rev - 1,
                    }));
                }
            }
        } else {
            None
        };
        events.push(record_event(key, rev, &rec, prev));
    }
    Ok(Ok(events))
}

/// The events of revision `rev` without previous values, for archives: a version that is not in
/// history is not an error here but an event carrying its key only, whose index is returned in
/// the second member (the caller checks that retention explains it).
pub(crate) fn entry_events_retained(
    tree: &sled::Tree,
    rev: u64,
    log: &LogRecord,
) -> Result<(Vec<Event>, Vec<usize>)> {
    let mut events = Vec::with_capacity(log.keys.len());
    let mut pruned = Vec::new();
    for key in &log.keys {
        match tree.get(hist_key(key, rev)).map_err(sled_err)? {
            Some(raw) => events.push(record_event(key, rev, &HistRecord::decode(&raw)?, None)),
            None => {
                pruned.push(events.len());
                events.push(Event {
                    kind: EventKind::Put,
                    kv: KeyValue {
                        key: key.clone(),
                        value: Vec::new(),
                        create_revision: Revision::ZERO,
                        mod_revision: Revision(rev),
                        version: 0,
                        lease: None,
                    },
                    prev_kv: None,
                });
            }
        }
    }
    Ok((events, pruned))
}

/// Decodes the log record stored under the sled key `raw_key`, checking that it ends at the
/// key's revision.
pub(crate) fn decode_log(raw_key: &[u8], bytes: &[u8]) -> Result<LogGroup> {
    let malformed = |why: &'static str| Error::Decode {
        what: "log record",
        source: bincode::error::DecodeError::Other(why),
    };
    let last = keys::parse_log_key(raw_key)
        .ok_or_else(|| malformed("malformed log key"))?
        .0;
    let group = LogGroup::decode(bytes)?;
    if group.entries.is_empty()
        || group.first.checked_add(group.entries.len() as u64 - 1) != Some(last)
    {
        return Err(malformed(
            "a log record that does not end at its key's revision",
        ));
    }
    Ok(group)
}

/// The log record holding revision `rev`, if it is still there.
pub(crate) fn log_group_of(tree: &sled::Tree, rev: u64) -> Result<Option<LogGroup>> {
    match tree
        .range(keys::log_key(rev)..=keys::log_key(u64::MAX))
        .next()
    {
        None => Ok(None),
        Some(item) => {
            let (raw, value) = item.map_err(sled_err)?;
            let group = decode_log(&raw, &value)?;
            Ok((group.first <= rev).then_some(group))
        }
    }
}

/// Every record of `key`, oldest first.
pub(crate) fn key_history(tree: &sled::Tree, key: &[u8]) -> Result<Vec<(u64, HistRecord)>> {
    tree.range(hist_key_start(key)..hist_key_end(key))
        .map(|item| {
            let (raw, value) = item.map_err(sled_err)?;
            Ok((keys::hist_key_rev(&raw), HistRecord::decode(&value)?))
        })
        .collect()
}

//! Narrow entry points to the decoders of what a data dir holds, for the fuzz targets in `fuzz/`
//! (and their corpus replay test): not an API, hidden from the docs, free to change with them.
//!
//! Each decoder here is the one the engine runs on the bytes it reads back from sled; the
//! encoders are the ones the writer uses, so a target can check that whatever decodes encodes
//! back to something that decodes the same.

use crate::error::Result;
use crate::keys;
use crate::record::{self, HistRecord, LogGroup};
use crate::types::KeyValue;

/// A history record's fields: commit time, create revision, version, lease, value (`None`: a
/// tombstone).
pub type Hist = (u64, u64, u64, Option<u64>, Option<Vec<u8>>);

/// Decodes a history record (`h <key> <rev>`'s value) as the engine's reads do.
pub fn decode_hist(bytes: &[u8]) -> Result<Hist> {
    let r = HistRecord::decode(bytes)?;
    Ok((r.time, r.create, r.version, r.lease, r.value))
}

/// Whether an encoded history record is a tombstone, reading only its header.
pub fn hist_is_tombstone(bytes: &[u8]) -> Result<bool> {
    HistRecord::is_tombstone_encoded(bytes)
}

/// The live key-value of a history record, as a range read decodes it.
pub fn decode_hist_kv(key: Vec<u8>, mod_revision: u64, bytes: &[u8]) -> Result<KeyValue> {
    HistRecord::decode_kv(key, mod_revision, bytes, false)
}

/// Encodes a history record as the writer does.
pub fn encode_hist(hist: &Hist) -> Vec<u8> {
    let (time, create, version, lease, value) = hist;
    HistRecord::encode_parts(*time, *create, *version, *lease, value.as_deref())
}

/// One revision of a log record: revision, commit time, tag, keys written.
pub type Log = (u64, u64, Option<Vec<u8>>, Vec<Vec<u8>>);

/// Decodes a log record (`l <last>`'s value) stored under `raw_key`, as the engine's reads do:
/// for each revision of the group, the revision, its commit time, its tag and the keys written.
pub fn decode_log(raw_key: &[u8], bytes: &[u8]) -> Result<Vec<Log>> {
    let group: LogGroup = crate::engine::read::decode_log(raw_key, bytes)?;
    Ok(group
        .iter()
        .map(|(rev, r)| (rev, r.time, r.tag.clone(), r.keys.clone()))
        .collect())
}

/// What [`encode_log`] takes of one revision: commit time, tag, keys written.
pub type LogParts = (u64, Option<Vec<u8>>, Vec<Vec<u8>>);

/// Encodes a log record whose first revision is `first`, as the writer does.
pub fn encode_log(first: u64, entries: &[LogParts]) -> Vec<u8> {
    record::encode_log_group(
        first,
        entries
            .iter()
            .map(|(time, tag, keys)| (*time, tag.as_deref(), keys.iter().map(Vec::as_slice))),
    )
}

/// The key of the log record whose last revision is `rev`.
pub fn log_key(rev: u64) -> Vec<u8> {
    keys::log_key(rev).to_vec()
}

/// The revision of a log record key, if it is one.
pub fn parse_log_key(raw: &[u8]) -> Option<u64> {
    keys::parse_log_key(raw).map(|r| r.0)
}

/// The key of the history record of `key` at `rev`.
pub fn hist_key(key: &[u8], rev: u64) -> Vec<u8> {
    keys::hist_key(key, rev)
}

/// Splits a history record key into the user key and the revision, if it is one.
pub fn parse_hist_key(raw: &[u8]) -> Option<(Vec<u8>, u64)> {
    keys::parse_hist_key(raw)
}

/// Decodes a big-endian `u64` meta value (compacted revision, watermark, lease TTL).
pub fn decode_u64(bytes: &[u8]) -> Result<u64> {
    record::decode_u64(bytes, "meta value")
}

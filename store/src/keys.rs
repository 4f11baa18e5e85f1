//! The sled key spaces of [`SledStore`](crate::SledStore) and their order-preserving encodings.
//!
//! Everything lives in one sled tree (one `apply_batch` per transaction is atomic), split by a
//! one-byte space tag:
//!
//! ```text
//! h <esc(key)> 00 00 <rev be:8>   -> HistRecord   one per version (put or tombstone) of a key
//! l <rev be:8>                    -> LogGroup     one per group commit: for each of its revisions
//!                                                 (contiguous, ending at <rev>) commit time + keys
//! m <name>                        -> meta         format, compacted revision, watermarks, leases
//! x <lease be:8> <key>            -> ()           which live keys are attached to which lease
//! ```
//!
//! `esc` doubles every `00` byte into `00 ff` and the terminator is `00 00`, so the encoding is
//! prefix-free and order-preserving: all records of key `a` sort before all records of any key
//! `b > a`, the records of one key sort by revision, and the records of every key that starts with
//! a prefix `p` start with `h <esc(p)>`.

use std::ops::Bound;

use crate::types::{KeyRange, RangeEnd, Revision};

/// Tag of the history space.
pub(crate) const HIST: u8 = b'h';
/// Tag of the log space.
pub(crate) const LOG: u8 = b'l';
/// Tag of the meta space.
pub(crate) const META: u8 = b'm';
/// Tag of the lease attachment space.
pub(crate) const ATTACH: u8 = b'x';

/// The format record: identifies a skiff log and its on-disk version.
pub(crate) const META_FORMAT: &[u8] = b"mformat";
/// The value of [`META_FORMAT`] this code writes and reads. Version 2 keeps one log record per
/// group commit (keyed by the group's last revision) instead of one per revision.
pub(crate) const FORMAT: &[u8] = b"skiff-log/2";
/// The format of data dirs written before the log was grouped (one log record per revision);
/// refused with a clear error.
pub(crate) const FORMAT_V1: &[u8] = b"skiff-log/1";
/// The global compacted revision (oldest readable), u64 big-endian.
pub(crate) const META_COMPACTED: &[u8] = b"mcompacted";
/// The next lease id to grant, u64 big-endian.
pub(crate) const META_LEASE_NEXT: &[u8] = b"mlease-next";
/// Prefix of the lease records: `mlease/<id be>` -> ttl in milliseconds, u64 big-endian.
pub(crate) const META_LEASE: &[u8] = b"mlease/";
/// Prefix of the per-prefix watermarks: `mwm/<prefix>` -> revision, u64 big-endian.
pub(crate) const META_WATERMARK: &[u8] = b"mwm/";

/// Appends `key` escaped (see the module docs) and the terminator.
fn push_escaped(out: &mut Vec<u8>, key: &[u8]) {
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
}

/// `h <esc(prefix)>`: every history record of every key that starts with `prefix` starts with this.
pub(crate) fn hist_prefix(prefix: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 1);
    out.push(HIST);
    push_escaped(&mut out, prefix);
    out
}

/// `h <esc(key)> 00 00`: the start of `key`'s records.
pub(crate) fn hist_key_start(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 11);
    out.push(HIST);
    push_escaped(&mut out, key);
    out.extend_from_slice(&[0, 0]);
    out
}

/// `h <esc(key)> 00 01`: after every record of `key` and before every record of any later key.
pub(crate) fn hist_key_end(key: &[u8]) -> Vec<u8> {
    let mut out = hist_key_start(key);
    *out.last_mut().expect("terminator") = 1;
    out
}

/// The history record key of `key` at `rev`.
pub(crate) fn hist_key(key: &[u8], rev: u64) -> Vec<u8> {
    let mut out = hist_key_start(key);
    out.extend_from_slice(&rev.to_be_bytes());
    out
}

/// Splits a history record key into the user key and the revision. `None` if it is not one.
pub(crate) fn parse_hist_key(raw: &[u8]) -> Option<(Vec<u8>, u64)> {
    if raw.len() < 11 || raw[0] != HIST {
        return None;
    }
    let (body, rev) = raw[1..].split_at(raw.len() - 9);
    let rev = u64::from_be_bytes(rev.try_into().ok()?);
    let mut key = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b == 0 {
            match body.get(i + 1) {
                Some(0xff) => {
                    key.push(0);
                    i += 2;
                }
                Some(0) if i + 2 == body.len() => return Some((key, rev)),
                _ => return None,
            }
        } else {
            key.push(b);
            i += 1;
        }
    }
    None
}

/// The revision of a history record key, without decoding the user key.
pub(crate) fn hist_key_rev(raw: &[u8]) -> u64 {
    let tail: [u8; 8] = raw[raw.len() - 8..]
        .try_into()
        .expect("history key too short");
    u64::from_be_bytes(tail)
}

/// The key of the log record whose last revision is `rev`.
pub(crate) fn log_key(rev: u64) -> [u8; 9] {
    let mut out = [LOG; 9];
    out[1..].copy_from_slice(&rev.to_be_bytes());
    out
}

/// The revision of a log record key.
pub(crate) fn parse_log_key(raw: &[u8]) -> Option<Revision> {
    if raw.len() != 9 || raw[0] != LOG {
        return None;
    }
    Some(Revision(u64::from_be_bytes(raw[1..].try_into().ok()?)))
}

/// The attachment record of `key` to `lease`.
pub(crate) fn attach_key(lease: u64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 9);
    out.push(ATTACH);
    out.extend_from_slice(&lease.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The lease record of `id`.
pub(crate) fn lease_key(id: u64) -> Vec<u8> {
    let mut out = META_LEASE.to_vec();
    out.extend_from_slice(&id.to_be_bytes());
    out
}

/// The watermark record of `prefix`.
pub(crate) fn watermark_key(prefix: &[u8]) -> Vec<u8> {
    let mut out = META_WATERMARK.to_vec();
    out.extend_from_slice(prefix);
    out
}

/// The sled key bounds holding every history record of every key in `range`.
pub(crate) fn hist_bounds(range: &KeyRange) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lower = Bound::Included(hist_prefix(&range.start));
    let upper = match &range.end {
        RangeEnd::Single => Bound::Excluded(hist_key_end(&range.start)),
        RangeEnd::Prefix => match crate::types::prefix_end(&hist_prefix(&range.start)) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        },
        RangeEnd::Before(end) => Bound::Excluded(hist_prefix(end)),
        RangeEnd::Unbounded => Bound::Excluded(vec![HIST + 1]),
    };
    (lower, upper)
}

/// Whether `range` and the set of keys starting with `prefix` have a key in common.
pub(crate) fn range_overlaps_prefix(range: &KeyRange, prefix: &[u8]) -> bool {
    let p_end = crate::types::prefix_end(prefix);
    // The range as [lo, hi) with hi = None for unbounded.
    let (lo, hi): (&[u8], Option<Vec<u8>>) = match &range.end {
        RangeEnd::Single => return range.start.starts_with(prefix),
        RangeEnd::Prefix => (&range.start, crate::types::prefix_end(&range.start)),
        RangeEnd::Before(end) => (&range.start, Some(end.clone())),
        RangeEnd::Unbounded => (&range.start, None),
    };
    if let Some(hi) = &hi
        && hi.as_slice() <= lo
    {
        return false;
    }
    // Intervals [lo, hi) and [prefix, p_end) intersect iff lo < p_end and prefix < hi.
    let lo_before_p_end = match &p_end {
        Some(e) => lo < e.as_slice(),
        None => true,
    };
    let prefix_before_hi = match &hi {
        Some(h) => prefix < h.as_slice(),
        None => true,
    };
    lo_before_p_end && prefix_before_hi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hist_keys_round_trip_and_sort_by_key_then_revision() {
        let keys: Vec<&[u8]> = vec![
            b"",
            b"\x00",
            b"\x00\x00",
            b"\x00\x01",
            b"\x00\xff",
            b"a",
            b"a\x00",
            b"a\x00b",
            b"a\x01",
            b"ab",
            b"b",
            b"\xff",
        ];
        let mut encoded = Vec::new();
        for k in &keys {
            for rev in [1u64, 2, 255, 256, u64::MAX - 1] {
                let raw = hist_key(k, rev);
                assert_eq!(parse_hist_key(&raw), Some((k.to_vec(), rev)));
                assert_eq!(hist_key_rev(&raw), rev);
                assert!(raw >= hist_key_start(k) && raw < hist_key_end(k));
                encoded.push(((k.to_vec(), rev), raw));
            }
        }
        let mut by_raw = encoded.clone();
        by_raw.sort_by(|a, b| a.1.cmp(&b.1));
        let mut by_logical = encoded;
        by_logical.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(by_raw, by_logical);
    }

    #[test]
    fn hist_bounds_select_exactly_the_range() {
        let keys: Vec<&[u8]> = vec![
            b"",
            b"\x00",
            b"a",
            b"a\x00",
            b"a\x00b",
            b"a\xff",
            b"ab",
            b"b",
            b"b\x00",
            b"\xff\xff",
        ];
        let ranges = vec![
            KeyRange::key("a"),
            KeyRange::key(""),
            KeyRange::prefix("a"),
            KeyRange::prefix(""),
            KeyRange::prefix(vec![0xff]),
            KeyRange::interval("a", "b"),
            KeyRange::interval("a\x00", "a\x00c"),
            KeyRange::from("a\x00"),
            KeyRange::interval("b", "a"),
        ];
        for range in &ranges {
            let bounds = hist_bounds(range);
            for k in &keys {
                let raw = hist_key(k, 7);
                let inside = std::ops::RangeBounds::contains(&bounds, &raw);
                assert_eq!(inside, range.contains(k), "{range:?} {k:?}");
            }
        }
    }

    #[test]
    fn overlap_of_ranges_and_prefixes() {
        assert!(range_overlaps_prefix(
            &KeyRange::prefix("/leases/"),
            b"/leases/"
        ));
        assert!(range_overlaps_prefix(&KeyRange::prefix("/"), b"/leases/"));
        assert!(range_overlaps_prefix(
            &KeyRange::prefix("/leases/n1"),
            b"/leases/"
        ));
        assert!(!range_overlaps_prefix(
            &KeyRange::prefix("/pods/"),
            b"/leases/"
        ));
        assert!(range_overlaps_prefix(
            &KeyRange::key("/leases/a"),
            b"/leases/"
        ));
        assert!(!range_overlaps_prefix(
            &KeyRange::key("/leases"),
            b"/leases/"
        ));
        assert!(range_overlaps_prefix(&KeyRange::from("/a"), b"/leases/"));
        assert!(!range_overlaps_prefix(&KeyRange::from("/m"), b"/leases/"));
        assert!(!range_overlaps_prefix(
            &KeyRange::interval("/a", "/leases/"),
            b"/leases/"
        ));
        assert!(range_overlaps_prefix(
            &KeyRange::interval("/a", "/leases/0"),
            b"/leases/"
        ));
        assert!(range_overlaps_prefix(&KeyRange::prefix(""), b""));
    }
}

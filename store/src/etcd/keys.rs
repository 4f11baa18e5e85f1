//! How the store's keys and ranges map into etcd's key space under the configured prefix.
//!
//! ```text
//!  etcd key space                     what it holds
//!  P                                  (the empty store key: refused)
//!  P \x00 marker                      reserved: `skiff-etcd/1`, written by the first connect
//!  P \x00 skiff/clock                 reserved: the commit-time key written by every write txn
//!  P \x01 ..                          store keys k, stored as P + k (today's layout under P)
//!  prefix_end(P)                      first key of the next prefix
//! ```
//!
//! Every range the caller can name is clamped to start at `P \x01`, so the reserved area never
//! shows in reads, counts, deletes or watches. The price: store keys that are empty or begin with
//! a zero byte are refused ([`Error::ReservedKey`]); Kubernetes keys begin with `/`.

use crate::error::{Error, Result};
use crate::types::{KeyRange, RangeEnd, prefix_end};

/// The sub-key of the commit-time key, after `P \x00`.
const CLOCK: &[u8] = b"skiff/clock";

/// The sub-key of the marker that says the prefix is a skiff store's, after `P \x00`. It sorts
/// before the clock key, so the log's replay range (which starts at the clock key) never sees it.
const MARKER: &[u8] = b"marker";

/// The marker's value: what a store on this prefix is, and the layout's version.
pub(crate) const MARKER_VALUE: &[u8] = b"skiff-etcd/1";

/// A key range in etcd's terms: `end` empty means only `start`; `[0]` means every key from
/// `start` on (etcd's convention).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdRange {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

/// The mapping for one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    prefix: Vec<u8>,
}

impl Layout {
    pub fn new(prefix: Vec<u8>) -> Layout {
        Layout { prefix }
    }

    /// The first etcd key a store key can have.
    fn user_start(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.push(1);
        k
    }

    /// The end of everything under the prefix, in etcd's encoding.
    fn end(&self) -> Vec<u8> {
        prefix_end(&self.prefix).unwrap_or_else(|| vec![0])
    }

    /// The reserved commit-time key.
    pub fn clock_key(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.push(0);
        k.extend_from_slice(CLOCK);
        k
    }

    /// The reserved marker key (see [`MARKER_VALUE`]).
    pub fn marker_key(&self) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.push(0);
        k.extend_from_slice(MARKER);
        k
    }

    /// Every etcd key under the prefix, the reserved ones and the prefix itself included: what
    /// must be empty before a first connect claims the prefix.
    pub fn whole(&self) -> EtcdRange {
        EtcdRange {
            start: self.prefix.clone(),
            end: self.end(),
        }
    }

    /// The prefix as written (for messages).
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The whole prefix with the reserved area: what the log replays.
    pub fn everything(&self) -> EtcdRange {
        EtcdRange {
            start: self.clock_key(),
            end: self.end(),
        }
    }

    /// The etcd key of a store key that may be written.
    pub fn key(&self, key: &[u8]) -> Result<Vec<u8>> {
        if key.first().is_none_or(|&b| b == 0) {
            return Err(Error::ReservedKey(key.to_vec()));
        }
        Ok(self.wrap(key))
    }

    /// The etcd key of a store key taken out of a converted key-value (inverse of `strip`).
    pub fn key_of(&self, stripped: &[u8]) -> Vec<u8> {
        self.wrap(stripped)
    }

    fn wrap(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k
    }

    /// The store key of an etcd key under the prefix.
    pub fn strip(&self, key: &[u8]) -> Vec<u8> {
        key.strip_prefix(self.prefix.as_slice())
            .unwrap_or(key)
            .to_vec()
    }

    /// Whether an etcd key is the reserved commit-time key.
    pub fn is_clock(&self, key: &[u8]) -> bool {
        key.len() == self.prefix.len() + 1 + CLOCK.len()
            && key.starts_with(&self.prefix)
            && key[self.prefix.len()] == 0
            && key.ends_with(CLOCK)
    }

    /// The etcd range of a store range, clamped to the store keys; `None` when it holds none.
    pub fn range(&self, range: &KeyRange) -> Option<EtcdRange> {
        let user_start = self.user_start();
        let start = self.wrap(&range.start).max(user_start);
        let end = match &range.end {
            RangeEnd::Single => {
                if range.start.first().is_none_or(|&b| b == 0) {
                    return None;
                }
                return Some(EtcdRange { start, end: vec![] });
            }
            RangeEnd::Prefix => match prefix_end(&range.start) {
                Some(e) => self.wrap(&e),
                None => self.end(),
            },
            RangeEnd::Before(e) => self.wrap(e),
            RangeEnd::Unbounded => self.end(),
        };
        if end != [0] && end <= start {
            return None;
        }
        Some(EtcdRange { start, end })
    }
}

/// Encodes a commit time (nanoseconds since the epoch) and the transaction's tag, if any, as
/// the clock key's value: 8 bytes of time, then the tag's bytes.
/// `host:port` of an endpoint URL `http(s)://host:port[/..]`, for a TCP connect.
pub(crate) fn endpoint_address(endpoint: &str) -> Option<String> {
    let rest = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))?;
    let authority = rest.split('/').next()?;
    let has_port = match authority.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => authority.contains(':'),
    };
    (!authority.is_empty() && has_port).then(|| authority.to_string())
}

pub(crate) fn encode_clock(nanos: u64, tag: Option<&[u8]>) -> Vec<u8> {
    let tag = tag.unwrap_or_default();
    let mut out = Vec::with_capacity(8 + tag.len());
    out.extend_from_slice(&nanos.to_be_bytes());
    out.extend_from_slice(tag);
    out
}

/// Decodes the clock key's value's time; a value shorter than 8 bytes reads as the epoch.
pub(crate) fn decode_time(value: &[u8]) -> u64 {
    value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// Decodes the clock key's value's tag: whatever follows the time (values written before tags
/// existed are the time alone, so no tag).
pub(crate) fn decode_tag(value: &[u8]) -> Option<Vec<u8>> {
    value.get(8..).filter(|t| !t.is_empty()).map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_values_carry_a_tag_after_the_time_and_old_ones_none() {
        let t: u64 = 1_700_000_000_123_456_789;
        let old = t.to_be_bytes().to_vec();
        assert_eq!((decode_time(&old), decode_tag(&old)), (t, None));
        assert_eq!(encode_clock(t, None), old);
        let tagged = encode_clock(t, Some(b"alice"));
        assert_eq!(
            (decode_time(&tagged), decode_tag(&tagged)),
            (t, Some(b"alice".to_vec()))
        );
        assert_eq!(decode_time(b"short"), 0);
    }

    #[test]
    fn ranges_stay_inside_the_prefix_and_outside_the_reserved_area() {
        let l = Layout::new(b"/s".to_vec());
        assert_eq!(l.key(b"/a").unwrap(), b"/s/a");
        assert!(matches!(l.key(b""), Err(Error::ReservedKey(_))));
        assert!(matches!(l.key(b"\0x"), Err(Error::ReservedKey(_))));
        let all = l.range(&KeyRange::prefix("")).unwrap();
        assert_eq!(all.start, b"/s\x01");
        assert_eq!(all.end, b"/t");
        assert!(all.start > l.clock_key());
        let p = l.range(&KeyRange::prefix("/p/")).unwrap();
        assert_eq!(
            (p.start.as_slice(), p.end.as_slice()),
            (&b"/s/p/"[..], &b"/s/p0"[..])
        );
        let from = l.range(&KeyRange::from("b")).unwrap();
        assert_eq!(
            (from.start.as_slice(), from.end.as_slice()),
            (&b"/sb"[..], &b"/t"[..])
        );
        assert_eq!(l.range(&KeyRange::interval("b", "a")), None);
        assert_eq!(l.range(&KeyRange::key("")), None);
        assert_eq!(l.range(&KeyRange::key("k")).unwrap().end, Vec::<u8>::new());
        assert!(l.is_clock(&l.clock_key()));
        // The marker is reserved, and outside what the log replays.
        assert!(l.marker_key() < l.everything().start);
        assert!(l.marker_key() < all.start);
        assert!(l.whole().start <= l.marker_key() && l.marker_key() < l.whole().end);
        assert!(!l.is_clock(b"/s/skiff/clock"));
        assert_eq!(l.strip(b"/s/a"), b"/a");
        // An all-0xff prefix has no end: etcd's "to the end of the key space".
        let l = Layout::new(vec![0xff]);
        assert_eq!(l.range(&KeyRange::prefix("")).unwrap().end, vec![0]);
        assert_eq!(decode_time(&encode_clock(42, None)), 42);
    }
}

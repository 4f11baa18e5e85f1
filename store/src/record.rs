//! The store's own on-disk records, encoded with bincode (values are opaque bytes inside them).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::types::{KeyValue, LeaseId, Revision};

/// One version of one key: the value of `h <esc(key)> 00 00 <rev>`. The value is stored here and
/// only here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HistRecord {
    /// Commit time, nanoseconds since the Unix epoch.
    pub time: u64,
    /// Revision of the put that created the key (0 for a tombstone).
    pub create: u64,
    /// Version (0 for a tombstone).
    pub version: u64,
    /// Attached lease, if any.
    pub lease: Option<u64>,
    /// The value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
}

impl HistRecord {
    /// Whether this version is a delete.
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }

    /// Encodes the record: its header with bincode, then the value's bytes as they are (values are
    /// opaque; passing a kilobyte through serde byte by byte would cost more than the rest of a
    /// write together).
    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        HistRecord::encode_parts(
            self.time,
            self.create,
            self.version,
            self.lease,
            self.value.as_deref(),
        )
    }

    /// [`HistRecord::encode`] from the parts, without building a record (and copying the value).
    pub fn encode_parts(
        time: u64,
        create: u64,
        version: u64,
        lease: Option<u64>,
        value: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + value.map_or(0, <[u8]>::len));
        HistRecord::encode_parts_into(&mut out, time, create, version, lease, value);
        out
    }

    /// [`HistRecord::encode_parts`] into `out` (cleared first), so that a writer can reuse one
    /// buffer rather than allocate a record per write.
    pub fn encode_parts_into(
        out: &mut Vec<u8>,
        time: u64,
        create: u64,
        version: u64,
        lease: Option<u64>,
        value: Option<&[u8]>,
    ) {
        let header = HistHeader {
            time,
            create,
            version,
            lease,
            tombstone: value.is_none(),
        };
        out.clear();
        bincode::serde::encode_into_std_write(&header, &mut *out, config())
            .expect("encoding to a Vec cannot fail");
        out.extend_from_slice(value.unwrap_or_default());
    }

    /// Decodes a record written by [`HistRecord::encode`].
    pub fn decode(bytes: &[u8]) -> Result<HistRecord> {
        let (header, read) = HistRecord::decode_header(bytes)?;
        let rest = &bytes[read..];
        if header.tombstone && !rest.is_empty() {
            return Err(Error::Decode {
                what: "history record",
                source: bincode::error::DecodeError::Other("a tombstone with a value"),
            });
        }
        Ok(HistRecord {
            time: header.time,
            create: header.create,
            version: header.version,
            lease: header.lease,
            value: (!header.tombstone).then(|| rest.to_vec()),
        })
    }

    /// Whether an encoded record is a tombstone, reading only its header.
    pub fn is_tombstone_encoded(bytes: &[u8]) -> Result<bool> {
        Ok(HistRecord::decode_header(bytes)?.0.tombstone)
    }

    /// The live key-value an encoded record describes, copying the value once (straight out of
    /// the encoded bytes); an error for a tombstone, which has none.
    pub fn decode_kv(
        key: Vec<u8>,
        mod_revision: u64,
        bytes: &[u8],
        keys_only: bool,
    ) -> Result<KeyValue> {
        let (header, read) = HistRecord::decode_header(bytes)?;
        if header.tombstone {
            return Err(Error::Decode {
                what: "history record",
                source: bincode::error::DecodeError::Other("a tombstone where a value was due"),
            });
        }
        Ok(KeyValue {
            key,
            value: if keys_only {
                Vec::new()
            } else {
                bytes[read..].to_vec()
            },
            create_revision: Revision(header.create),
            mod_revision: Revision(mod_revision),
            version: header.version,
            lease: header.lease.map(LeaseId),
        })
    }

    fn decode_header(bytes: &[u8]) -> Result<(HistHeader, usize)> {
        bincode::serde::decode_from_slice(bytes, config()).map_err(|source| Error::Decode {
            what: "history record",
            source,
        })
    }
}

/// The bincode part of an encoded [`HistRecord`]; the value's bytes follow it.
#[derive(Serialize, Deserialize)]
struct HistHeader {
    time: u64,
    create: u64,
    version: u64,
    lease: Option<u64>,
    tombstone: bool,
}

/// One revision of a [`LogGroup`]. It lists the keys written, in the order the transaction
/// wrote them; their versions are the history records at this revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LogRecord {
    /// Commit time, nanoseconds since the Unix epoch (non-decreasing along the log).
    pub time: u64,
    /// The keys written at this revision.
    pub keys: Vec<Vec<u8>>,
    /// The transaction's tag, if any. Not part of the bincode layout: tags follow the group in
    /// a section of their own (see [`LogGroup::encode`]), so that groups written before tags
    /// existed decode unchanged.
    #[serde(skip)]
    pub tag: Option<Vec<u8>>,
}

/// The value of `l <last>`: the revisions `first..=last` that one group commit wrote, in order
/// (`entries[i]` is revision `first + i`). One record per group rather than per revision halves
/// the sled inserts of a put. Compaction removes a group once all of it is below the compacted
/// revision; a group straddling it stays whole (its entries below it are no longer readable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LogGroup {
    /// The first revision of the group.
    pub first: u64,
    /// One record per revision, at least one.
    pub entries: Vec<LogRecord>,
}

impl LogGroup {
    /// The last revision of the group (the record's key).
    pub fn last(&self) -> u64 {
        self.first + self.entries.len() as u64 - 1
    }

    /// The record of `rev`, if the group holds it.
    pub fn get(&self, rev: u64) -> Option<&LogRecord> {
        rev.checked_sub(self.first)
            .and_then(|i| self.entries.get(usize::try_from(i).ok()?))
    }

    /// The revisions with their records, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &LogRecord)> {
        (self.first..).zip(self.entries.iter())
    }

    /// Encodes the group as the writer does ([`encode_log_group`]).
    pub fn encode(&self) -> Vec<u8> {
        encode_log_group(
            self.first,
            self.entries
                .iter()
                .map(|r| (r.time, r.tag.as_deref(), r.keys.iter().map(Vec::as_slice))),
        )
    }

    /// Decodes a group written by [`LogGroup::encode`], with or without its tag section.
    pub fn decode(bytes: &[u8]) -> Result<LogGroup> {
        const WHAT: &str = "log record";
        let malformed = |why: &'static str| Error::Decode {
            what: WHAT,
            source: bincode::error::DecodeError::Other(why),
        };
        let (mut group, mut at): (LogGroup, usize) =
            bincode::serde::decode_from_slice(bytes, config())
                .map_err(|source| Error::Decode { what: WHAT, source })?;
        if at == bytes.len() {
            return Ok(group);
        }
        let varint = |at: &mut usize| -> Result<u64> {
            let (n, read) = bincode::decode_from_slice::<u64, _>(&bytes[*at..], config())
                .map_err(|source| Error::Decode { what: WHAT, source })?;
            *at += read;
            Ok(n)
        };
        let count = varint(&mut at)?;
        let mut next = 0u64;
        for _ in 0..count {
            let index = varint(&mut at)?;
            let len = varint(&mut at)?;
            if index < next {
                return Err(malformed("log tags out of order"));
            }
            let entry = usize::try_from(index)
                .ok()
                .and_then(|i| group.entries.get_mut(i))
                .ok_or_else(|| malformed("a log tag for a revision the group does not hold"))?;
            let end = usize::try_from(len)
                .ok()
                .and_then(|l| at.checked_add(l))
                .filter(|&end| end <= bytes.len() && end > at)
                .ok_or_else(|| malformed("a log tag empty or longer than its record"))?;
            entry.tag = Some(bytes[at..end].to_vec());
            at = end;
            next = index + 1;
        }
        if count == 0 || at != bytes.len() {
            return Err(malformed("trailing bytes after the log tags"));
        }
        Ok(group)
    }
}

/// Encodes a [`LogGroup`] from borrowed parts: `entries` gives each revision's commit time, tag
/// and keys. The writer's keys live in its shared key-values; this spares it a copy of every key
/// into a [`LogRecord`].
///
/// The group itself is encoded byte for byte as bincode would (`encode(&LogGroup { .. })`, tags
/// left out). When some revision has a tag, a tag section follows:
///
/// ```text
///  <bincode LogGroup> [ count  (index len bytes) × count ]     varints; indices into the group,
///                       `------- only when tagged ------'      increasing
/// ```
///
/// A group without tags (every group written before tags existed) has no section, so an
/// untagged write costs nothing more than before.
pub(crate) fn encode_log_group<'a, 't, I, K>(first: u64, entries: I) -> Vec<u8>
where
    I: ExactSizeIterator<Item = (u64, Option<&'t [u8]>, K)>,
    K: ExactSizeIterator<Item = &'a [u8]>,
{
    // bincode's standard configuration: integers (lengths too) as varints, a sequence as its
    // length then its elements, a `u8` as one byte.
    fn varint(out: &mut Vec<u8>, n: u64) {
        bincode::encode_into_std_write(n, out, config()).expect("encoding to a Vec cannot fail");
    }
    let mut out = Vec::with_capacity(16 + entries.len() * 32);
    varint(&mut out, first);
    varint(&mut out, entries.len() as u64);
    let mut tags: Vec<(u64, &[u8])> = Vec::new();
    for (i, (time, tag, keys)) in entries.enumerate() {
        varint(&mut out, time);
        varint(&mut out, keys.len() as u64);
        for key in keys {
            varint(&mut out, key.len() as u64);
            out.extend_from_slice(key);
        }
        if let Some(tag) = tag.filter(|t| !t.is_empty()) {
            tags.push((i as u64, tag));
        }
    }
    if !tags.is_empty() {
        varint(&mut out, tags.len() as u64);
        for (i, tag) in tags {
            varint(&mut out, i);
            varint(&mut out, tag.len() as u64);
            out.extend_from_slice(tag);
        }
    }
    out
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a record.
#[cfg(test)]
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, config()).expect("encoding to a Vec cannot fail")
}

/// Decodes a record; `what` names it in the error.
#[cfg(test)]
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &'static str) -> Result<T> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|source| Error::Decode { what, source })?;
    if read != bytes.len() {
        return Err(Error::Decode {
            what,
            source: bincode::error::DecodeError::OtherString(format!(
                "{} trailing bytes",
                bytes.len() - read
            )),
        });
    }
    Ok(value)
}

/// Decodes a big-endian u64 meta value.
pub(crate) fn decode_u64(bytes: &[u8], what: &'static str) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| Error::Decode {
        what,
        source: bincode::error::DecodeError::OtherString(format!(
            "{} bytes, expected 8",
            bytes.len()
        )),
    })?;
    Ok(u64::from_be_bytes(arr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_trailing_bytes() {
        let rec = HistRecord {
            time: 5,
            create: 3,
            version: 2,
            lease: Some(9),
            value: Some(b"v".to_vec()),
        };
        let bytes = rec.encode();
        assert_eq!(HistRecord::decode(&bytes).unwrap(), rec);
        let tomb = HistRecord {
            value: None,
            ..rec.clone()
        };
        let mut bytes = tomb.encode();
        assert_eq!(HistRecord::decode(&bytes).unwrap(), tomb);
        bytes.push(0);
        assert!(matches!(
            HistRecord::decode(&bytes),
            Err(Error::Decode {
                what: "history record",
                ..
            })
        ));
        let empty = HistRecord {
            value: Some(vec![]),
            ..rec
        };
        assert_eq!(HistRecord::decode(&empty.encode()).unwrap(), empty);
        let log = LogRecord {
            time: 1,
            keys: vec![b"a".to_vec(), vec![]],
            tag: None,
        };
        let mut bytes = encode(&log);
        assert_eq!(decode::<LogRecord>(&bytes, "log").unwrap(), log);
        bytes.push(0);
        assert!(decode::<LogRecord>(&bytes, "log").is_err());
        let group = LogGroup {
            first: 7,
            entries: vec![
                log.clone(),
                LogRecord {
                    time: 2,
                    keys: vec![],
                    tag: None,
                },
            ],
        };
        assert_eq!(decode::<LogGroup>(&encode(&group), "log").unwrap(), group);
        assert_eq!(group.last(), 8);
        assert_eq!(group.get(6), None);
        assert_eq!(group.get(7), Some(&log));
        assert_eq!(group.get(9), None);
        assert_eq!(group.iter().map(|(r, _)| r).collect::<Vec<_>>(), vec![7, 8]);
        assert!(decode_u64(b"short", "u64").is_err());
    }

    #[test]
    fn log_groups_encode_the_same_from_borrowed_parts() {
        let long = vec![7u8; 300];
        let huge_time = u64::MAX - 3;
        for group in [
            LogGroup {
                first: 1,
                entries: vec![LogRecord {
                    time: 0,
                    keys: vec![],
                    tag: None,
                }],
            },
            LogGroup {
                first: 250,
                entries: vec![
                    LogRecord {
                        time: 1_700_000_000_000_000_000,
                        keys: vec![b"/registry/pods/a".to_vec(), vec![], long.clone()],
                        tag: None,
                    },
                    LogRecord {
                        time: huge_time,
                        keys: vec![vec![0, 255, 0]],
                        tag: None,
                    },
                ],
            },
            LogGroup {
                first: 70_000,
                entries: (0..300)
                    .map(|i| LogRecord {
                        time: i * 65_537,
                        keys: vec![format!("k{i}").into_bytes(); (i % 3) as usize],
                        tag: None,
                    })
                    .collect(),
            },
        ] {
            let borrowed = group.encode();
            assert_eq!(borrowed, encode(&group));
            assert_eq!(decode::<LogGroup>(&borrowed, "log").unwrap(), group);
            assert_eq!(LogGroup::decode(&borrowed).unwrap(), group);
        }
    }

    #[test]
    fn log_tags_follow_the_group_and_old_groups_decode_without_them() {
        let record = |time, tag: Option<&[u8]>| LogRecord {
            time,
            keys: vec![format!("k{time}").into_bytes()],
            tag: tag.map(<[u8]>::to_vec),
        };
        let tagged = LogGroup {
            first: 40,
            entries: vec![
                record(1, Some(b"alice")),
                record(2, None),
                record(3, Some(&[0u8; 300])),
            ],
        };
        let bytes = tagged.encode();
        assert_eq!(LogGroup::decode(&bytes).unwrap(), tagged);
        // The group's own bytes are the old layout: the tags only follow them.
        let untagged = LogGroup {
            entries: tagged
                .entries
                .iter()
                .map(|r| LogRecord {
                    tag: None,
                    ..r.clone()
                })
                .collect(),
            ..tagged.clone()
        };
        let old = encode(&untagged);
        assert!(bytes.starts_with(&old));
        // A record written before tags existed decodes with none.
        assert_eq!(LogGroup::decode(&old).unwrap(), untagged);
        assert_eq!(untagged.encode(), old, "no tags, no section");
        // An empty tag is no tag.
        let empty = LogGroup {
            first: 1,
            entries: vec![record(1, Some(b""))],
        };
        assert_eq!(
            LogGroup::decode(&empty.encode()).unwrap().entries[0].tag,
            None
        );
        // A damaged section is an error, not a silently dropped tag.
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(LogGroup::decode(&extra).is_err());
        assert!(LogGroup::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut beyond = old.clone();
        beyond.extend_from_slice(&[1, 3, 1, b'x']); // a tag for index 3 of a group of 3
        assert!(LogGroup::decode(&beyond).is_err());
        let mut zero = old.clone();
        zero.push(0); // a section of no tags
        assert!(LogGroup::decode(&zero).is_err());
        let mut empty_tag = old.clone();
        empty_tag.extend_from_slice(&[1, 0, 0]); // the writer never writes an empty tag
        assert!(LogGroup::decode(&empty_tag).is_err());
    }
}

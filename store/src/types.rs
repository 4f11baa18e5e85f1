//! The store's vocabulary: revisions, key-values, ranges, transactions, events.
//!
//! These are the types of the [`Store`](crate::Store) contract. They say nothing about how a backend
//! lays them out on disk.

use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// A point in the log. Every committed write (a put, a delete, or an atomic transaction of several)
/// gets the next revision: revisions start at 1, are contiguous and are never reused. Revision 0
/// means "no revision" (a key that does not exist has create and mod revision 0).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Revision(pub u64);

impl Revision {
    /// "No revision": the empty log, or a key that does not exist.
    pub const ZERO: Revision = Revision(0);

    /// The revision after this one.
    pub fn next(self) -> Revision {
        Revision(self.0 + 1)
    }

    /// Big-endian bytes, so that byte order is revision order (sled scans are history in order).
    pub fn to_be_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    /// Inverse of [`Revision::to_be_bytes`].
    pub fn from_be_bytes(bytes: [u8; 8]) -> Revision {
        Revision(u64::from_be_bytes(bytes))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Identifies a TTL lease. Keys attached to a lease are deleted, as an ordinary revisioned delete,
/// when the lease expires or is revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaseId(pub u64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One version of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value; opaque bytes. Empty in a delete event's `kv`.
    pub value: Vec<u8>,
    /// The revision of the put that created this key (since its last delete).
    pub create_revision: Revision,
    /// The revision of the write that produced this version.
    pub mod_revision: Revision,
    /// 1 for the put that created the key, +1 for each put since; 0 in a delete event's `kv`.
    pub version: u64,
    /// The lease the key is attached to, if any.
    pub lease: Option<LeaseId>,
}

/// A set of keys: one key, a prefix, a half-open interval, or everything from a key on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyRange {
    /// The first key in the range.
    pub start: Vec<u8>,
    /// Where the range stops.
    pub end: RangeEnd,
}

/// The end of a [`KeyRange`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RangeEnd {
    /// Only `start` itself.
    Single,
    /// Every key that begins with `start`.
    Prefix,
    /// Every key in `[start, end)`.
    Before(Vec<u8>),
    /// Every key `>= start`.
    Unbounded,
}

impl KeyRange {
    /// Exactly one key.
    pub fn key(key: impl Into<Vec<u8>>) -> KeyRange {
        KeyRange {
            start: key.into(),
            end: RangeEnd::Single,
        }
    }

    /// Every key that begins with `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> KeyRange {
        KeyRange {
            start: prefix.into(),
            end: RangeEnd::Prefix,
        }
    }

    /// Every key in `[start, end)`.
    pub fn interval(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> KeyRange {
        KeyRange {
            start: start.into(),
            end: RangeEnd::Before(end.into()),
        }
    }

    /// Every key `>= start`.
    pub fn from(start: impl Into<Vec<u8>>) -> KeyRange {
        KeyRange {
            start: start.into(),
            end: RangeEnd::Unbounded,
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match &self.end {
            RangeEnd::Single => key == self.start.as_slice(),
            RangeEnd::Prefix => key.starts_with(&self.start),
            RangeEnd::Before(end) => key >= self.start.as_slice() && key < end.as_slice(),
            RangeEnd::Unbounded => key >= self.start.as_slice(),
        }
    }

    /// The same range with its start moved to `start` (for continuing a limited read after the
    /// last key returned: pass that key with a zero byte appended). The end is kept, so a prefix
    /// range stays bounded by its prefix.
    pub fn resume_at(&self, start: Vec<u8>) -> KeyRange {
        let end = match &self.end {
            RangeEnd::Prefix => match prefix_end(&self.start) {
                Some(end) => RangeEnd::Before(end),
                None => RangeEnd::Unbounded,
            },
            other => other.clone(),
        };
        KeyRange { start, end }
    }
}

/// The first key after every key that starts with `prefix`, or `None` when there is none
/// (the prefix is empty or all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A read of a key or range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRequest {
    /// What to read.
    pub range: KeyRange,
    /// The revision to read at; `None` reads at the current revision.
    pub revision: Option<Revision>,
    /// At most this many key-values; `None` for all.
    pub limit: Option<usize>,
    /// Count every key in the range at that revision (not only the returned ones).
    pub count: bool,
    /// Return keys and metadata with empty values.
    pub keys_only: bool,
}

impl RangeRequest {
    /// A read of `range` at the current revision with no limit.
    pub fn new(range: KeyRange) -> RangeRequest {
        RangeRequest {
            range,
            revision: None,
            limit: None,
            count: false,
            keys_only: false,
        }
    }

    /// Read at `revision` instead of the current one.
    pub fn at(mut self, revision: Revision) -> RangeRequest {
        self.revision = Some(revision);
        self
    }

    /// Return at most `limit` key-values.
    pub fn limit(mut self, limit: usize) -> RangeRequest {
        self.limit = Some(limit);
        self
    }
}

/// The answer to a [`RangeRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeResponse {
    /// The key-values, in key order, as they were at `revision`.
    pub kvs: Vec<KeyValue>,
    /// Whether the limit cut the answer short (more keys follow the last one).
    pub more: bool,
    /// Every key in the range at `revision`, when the request asked for a count.
    pub count: Option<u64>,
    /// The revision the read was served at (the current one when the request named none).
    pub revision: Revision,
}

/// How a [`Compare`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    /// `==`
    Equal,
    /// `!=`
    NotEqual,
    /// `>`
    Greater,
    /// `<`
    Less,
}

/// What a [`Compare`] looks at. A missing key has version, create and mod revision 0, and no value
/// (every value compare on it is false).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    /// The value's bytes.
    Value(Vec<u8>),
    /// The key's version.
    Version(u64),
    /// The key's create revision.
    CreateRevision(Revision),
    /// The key's mod revision.
    ModRevision(Revision),
}

/// One guard of a transaction, evaluated against the current state of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    /// The key compared.
    pub key: Vec<u8>,
    /// How.
    pub op: CompareOp,
    /// Against what.
    pub target: CompareTarget,
}

impl Compare {
    /// True when `key` exists.
    pub fn exists(key: impl Into<Vec<u8>>) -> Compare {
        Compare {
            key: key.into(),
            op: CompareOp::Greater,
            target: CompareTarget::Version(0),
        }
    }

    /// True when `key` does not exist.
    pub fn not_exists(key: impl Into<Vec<u8>>) -> Compare {
        Compare {
            key: key.into(),
            op: CompareOp::Equal,
            target: CompareTarget::Version(0),
        }
    }

    /// True when `key`'s mod revision is `revision` (optimistic concurrency).
    pub fn mod_revision_is(key: impl Into<Vec<u8>>, revision: Revision) -> Compare {
        Compare {
            key: key.into(),
            op: CompareOp::Equal,
            target: CompareTarget::ModRevision(revision),
        }
    }
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Write `value` under `key`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// Attach the key to this lease (it is deleted when the lease ends).
        lease: Option<LeaseId>,
        /// Return the version this put replaced.
        prev_kv: bool,
    },
    /// Delete every key in `range`.
    Delete {
        /// What to delete.
        range: KeyRange,
        /// Return the deleted key-values.
        prev_kv: bool,
    },
    /// Read, at the transaction's revision (after its earlier operations).
    Range(RangeRequest),
}

impl Op {
    /// A put with no lease that does not ask for the previous value.
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease: None,
            prev_kv: false,
        }
    }

    /// A delete of one key that returns the deleted key-value.
    pub fn delete(key: impl Into<Vec<u8>>) -> Op {
        Op::Delete {
            range: KeyRange::key(key),
            prev_kv: true,
        }
    }

    /// A read of one key.
    pub fn get(key: impl Into<Vec<u8>>) -> Op {
        Op::Range(RangeRequest::new(KeyRange::key(key)))
    }
}

/// An atomic transaction: if every compare holds, `success` runs, otherwise `failure`. Either way
/// the writes it performs are one revision, all or nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// Guards, all of which must hold.
    pub compare: Vec<Compare>,
    /// Run when every guard holds.
    pub success: Vec<Op>,
    /// Run otherwise.
    pub failure: Vec<Op>,
    /// An opaque label kept with the revision this transaction writes, and read back with it by
    /// [`Store::history`](crate::Store::history) and [`Store::log`](crate::Store::log): the API
    /// server says there who made the change. At most [`MAX_TAG`] bytes; an empty tag is no tag.
    /// A transaction that writes nothing leaves no revision, so its tag goes nowhere.
    pub tag: Option<Vec<u8>>,
}

/// The longest [`Txn::tag`], in bytes; a longer one is refused with
/// [`Error::ValueTooLarge`](crate::Error::ValueTooLarge).
pub const MAX_TAG: usize = 1024;

impl Txn {
    /// The tag as stored: `None` for no tag or an empty one.
    pub(crate) fn stored_tag(&self) -> Option<&[u8]> {
        self.tag.as_deref().filter(|t| !t.is_empty())
    }

    /// Refuses a tag over [`MAX_TAG`].
    pub(crate) fn check_tag(&self) -> crate::Result<()> {
        match &self.tag {
            Some(tag) if tag.len() > MAX_TAG => Err(crate::Error::ValueTooLarge {
                size: tag.len(),
                limit: MAX_TAG,
            }),
            _ => Ok(()),
        }
    }
}

/// The result of one [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResponse {
    /// A put; the version it replaced when asked.
    Put {
        /// The previous version of the key, if asked for and present.
        prev_kv: Option<KeyValue>,
    },
    /// A delete.
    Delete {
        /// How many keys were deleted.
        deleted: u64,
        /// The deleted key-values, if asked for.
        prev_kvs: Vec<KeyValue>,
    },
    /// A read.
    Range(RangeResponse),
}

/// The result of a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether the compares held (so `success` ran).
    pub succeeded: bool,
    /// The revision of the transaction's writes, or the current revision if it wrote nothing.
    pub revision: Revision,
    /// One response per operation that ran, in order.
    pub responses: Vec<OpResponse>,
}

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// The key was created or changed.
    Put,
    /// The key was deleted (including by lease expiry).
    Delete,
}

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Put or delete.
    pub kind: EventKind,
    /// The new version; for a delete, the key with `mod_revision` set to the delete's revision,
    /// an empty value and version 0.
    pub kv: KeyValue,
    /// The version before this change, when the watch asked for it.
    pub prev_kv: Option<KeyValue>,
}

/// Where a watch starts and what it sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    /// The keys watched.
    pub range: KeyRange,
    /// The first revision to deliver; `None` starts after the current revision (only new changes).
    pub start_revision: Option<Revision>,
    /// Include each event's previous version.
    pub prev_kv: bool,
    /// Send a [`WatchResponse`] with no events and the current revision when the watch has been
    /// idle this long, so that a client can advance its resume point (Kubernetes bookmarks).
    pub progress_notify: Option<std::time::Duration>,
}

impl WatchRequest {
    /// A watch of `range` from `start` (inclusive), without previous values or progress.
    pub fn new(range: KeyRange, start: Option<Revision>) -> WatchRequest {
        WatchRequest {
            range,
            start_revision: start,
            prev_kv: false,
            progress_notify: None,
        }
    }
}

/// One delivery on a watch stream: every event of one revision that falls in the watched range,
/// or, with no events, a progress notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchResponse {
    /// The revision of the events, or for a progress notification the revision up to which the
    /// watcher has seen everything.
    pub revision: Revision,
    /// The events of that revision in the watched range, in the order the transaction wrote them.
    /// Empty for a progress notification.
    pub events: Vec<Event>,
}

impl WatchResponse {
    /// Whether this is a progress notification rather than a change.
    pub fn is_progress(&self) -> bool {
        self.events.is_empty()
    }
}

/// One committed revision of the log, for history and replay tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Its revision.
    pub revision: Revision,
    /// When it was committed.
    pub time: SystemTime,
    /// The [`Txn::tag`] of the transaction that wrote it, if it had one (revisions written
    /// before tags existed, and those the store writes itself such as lease expiry, have none).
    pub tag: Option<Vec<u8>>,
    /// What it changed, with each key's previous version.
    pub events: Vec<Event>,
}

/// When a revision was committed and the tag it carries: what [`Store::history`](crate::Store::history)
/// gives with each version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// When it was committed.
    pub time: SystemTime,
    /// Its [`Txn::tag`], as [`LogEntry::tag`].
    pub tag: Option<Vec<u8>>,
}

/// A lease as granted or kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Its id.
    pub id: LeaseId,
    /// Its time to live as granted.
    pub ttl: std::time::Duration,
    /// How long until it expires unless kept alive.
    pub remaining: std::time::Duration,
}

/// What the store knows about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStatus {
    /// The newest committed (durable) revision.
    pub revision: Revision,
    /// History before this revision is gone for every key.
    pub compacted: Revision,
    /// The oldest commit time still in history, if any.
    pub oldest_time: Option<SystemTime>,
    /// Bytes used on disk.
    pub size_on_disk: u64,
}

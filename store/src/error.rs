//! The store's errors. Expected outcomes a caller acts on (a compacted or future revision, a value
//! over the limit, an unknown lease) are variants of their own; the rest keep their source.

use std::path::PathBuf;

use crate::types::{LeaseId, Revision};

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The read or watch needs history that compaction removed. `prefix` names the key prefix
    /// whose own retention policy pruned it, or is `None` for the global compaction.
    #[error("revision {requested} has been compacted (history kept from revision {compacted}{})",
        .prefix.as_ref().map(|p| format!(" for keys under {:?}", String::from_utf8_lossy(p))).unwrap_or_default())]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The oldest revision still readable (for that prefix).
        compacted: Revision,
        /// The prefix whose retention pruned it, if not the global compaction.
        prefix: Option<Vec<u8>>,
    },
    /// The revision asked for has not been written yet.
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The current revision.
        current: Revision,
    },
    /// A value over the configured size limit; nothing was written.
    #[error("value of {size} bytes is over the limit of {limit} bytes")]
    ValueTooLarge {
        /// The value's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A transaction writes the same key twice.
    #[error("transaction writes key {:?} more than once", String::from_utf8_lossy(.0))]
    DuplicateKey(Vec<u8>),
    /// No lease with this id (never granted, revoked or expired).
    #[error("lease {0} not found")]
    LeaseNotFound(LeaseId),
    /// A time before the oldest retained entry.
    #[error("no history at that time: the oldest retained entry is revision {oldest}")]
    TimeBeforeHistory {
        /// The oldest retained revision.
        oldest: Revision,
    },
    /// Another process holds the data dir.
    #[error("data dir {path} is locked: another skiff process is using it")]
    Locked {
        /// The data dir.
        path: PathBuf,
    },
    /// The directory holds something that is not a skiff log, or one that is damaged.
    #[error("data dir {path} is not a usable skiff log: {reason}")]
    Corrupt {
        /// The data dir.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The disk is full; the write was not acknowledged and nothing acknowledged was lost.
    #[error("no space left on the device holding the log: {0}")]
    NoSpace(#[source] std::io::Error),
    /// The store has been closed.
    #[error("the store is closed")]
    Closed,
    /// An I/O error.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The external datastore (etcd) cannot serve requests now: unreachable, or without quorum
    /// (no leader). The API answers 503. A write that failed this way may have committed.
    #[error("datastore unavailable: {reason}")]
    Unavailable {
        /// What failed, and whether a write may have committed.
        reason: String,
        /// The client's error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The external datastore did not answer in time (the API answers 504). A write that timed
    /// out may have committed.
    #[error("datastore request timed out after {after:?}: {what}")]
    Timeout {
        /// The request.
        what: String,
        /// How long it was given.
        after: std::time::Duration,
    },
    /// Another error from the etcd client or server.
    #[cfg(feature = "etcd")]
    #[error("etcd error: {0}")]
    Etcd(#[source] etcd_client::Error),
    /// A key the store keeps for itself (the etcd backend reserves keys that are empty or begin
    /// with a zero byte); nothing was written.
    #[error("key {:?} is reserved by the store", String::from_utf8_lossy(.0))]
    ReservedKey(Vec<u8>),
    /// The etcd prefix holds keys this store did not write (no skiff marker, or another one):
    /// another application's, or another skiff's that is not this layout. Nothing was written.
    #[error("etcd prefix {:?} is not a skiff store's: {reason}; choose another prefix", String::from_utf8_lossy(.prefix))]
    ForeignPrefix {
        /// The prefix.
        prefix: Vec<u8>,
        /// What was found there.
        reason: String,
    },
    /// An import into an etcd prefix that already holds a cluster (any key besides the
    /// ownership marker); nothing was written.
    #[error("etcd prefix {:?} is not empty: {found}; import needs a prefix that holds nothing (give another --datastore-prefix); nothing was written", String::from_utf8_lossy(.prefix))]
    PrefixNotEmpty {
        /// The prefix.
        prefix: Vec<u8>,
        /// What was found there.
        found: String,
    },
    /// An import into etcd that failed part way. `cleanup` is `None` when everything it had
    /// written was removed again (the prefix is empty), or says why that failed too.
    #[error("import into etcd prefix {:?} failed: {source}; {}", String::from_utf8_lossy(.prefix),
        match .cleanup {
            None => "everything it wrote was removed: the prefix is empty again".to_string(),
            Some(why) => format!("removing what it wrote failed too ({why}): delete the prefix by hand (etcdctl del --prefix) before trying again"),
        })]
    ImportFailed {
        /// The prefix.
        prefix: Vec<u8>,
        /// Why the import stopped.
        #[source]
        source: Box<Error>,
        /// Why removing what was written failed, if it did.
        cleanup: Option<String>,
    },
    /// A configuration that cannot work.
    #[error("invalid store configuration: {0}")]
    InvalidConfig(String),
    /// An error from sled.
    #[error("storage engine error: {0}")]
    Sled(#[source] sled::Error),
    /// A value that a layer over the log (encryption at rest) cannot turn back into what was
    /// written: no configured key reads it.
    #[error("the value stored under {} cannot be read: {reason}", String::from_utf8_lossy(.key))]
    Unreadable {
        /// The key.
        key: Vec<u8>,
        /// Why.
        reason: String,
    },
    /// A record that does not decode.
    #[error("undecodable record ({what}): {source}")]
    Decode {
        /// Which record.
        what: &'static str,
        /// Why.
        #[source]
        source: bincode::error::DecodeError,
    },
}

/// The store's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether an I/O error means the disk is full. sled hands out later copies of an error its
/// background writer hit as a plain message (its `Clone` drops the OS error code), so the message
/// is checked too.
pub(crate) fn is_no_space(io: &std::io::Error) -> bool {
    io.raw_os_error() == Some(libc::ENOSPC)
        || io.kind() == std::io::ErrorKind::StorageFull
        || io.to_string().contains("No space left on device")
}

impl From<sled::Error> for Error {
    /// An I/O error inside sled keeps its cause; a full disk becomes [`Error::NoSpace`].
    fn from(e: sled::Error) -> Error {
        match e {
            sled::Error::Io(io) if is_no_space(&io) => Error::NoSpace(io),
            sled::Error::Io(io) => Error::Io(io),
            other => Error::Sled(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sled_errors_map_to_what_a_caller_acts_on() {
        let full = sled::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(Error::from(full), Error::NoSpace(_)));
        let denied = sled::Error::Io(std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(matches!(Error::from(denied), Error::Io(_)));
        // sled's copies of an error from its background writer keep only the message.
        let copied = sled::Error::Io(std::io::Error::other(format!(
            "{:?}",
            std::io::Error::from_raw_os_error(libc::ENOSPC)
        )));
        assert!(matches!(Error::from(copied), Error::NoSpace(_)));
        let bug = sled::Error::ReportableBug("x".into());
        assert!(matches!(Error::from(bug), Error::Sled(_)));
    }
}

//! The store's own on-disk records, encoded with bincode (values are opaque bytes inside them).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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
}

/// One revision: the value of `l <rev>`. It lists the keys written, in the order the transaction
/// wrote them; their versions are the history records at this revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LogRecord {
    /// Commit time, nanoseconds since the Unix epoch (non-decreasing along the log).
    pub time: u64,
    /// The keys written at this revision.
    pub keys: Vec<Vec<u8>>,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes a record.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, config()).expect("encoding to a Vec cannot fail")
}

/// Decodes a record; `what` names it in the error.
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
        let mut bytes = encode(&rec);
        assert_eq!(decode::<HistRecord>(&bytes, "hist").unwrap(), rec);
        bytes.push(0);
        assert!(matches!(
            decode::<HistRecord>(&bytes, "hist"),
            Err(Error::Decode { what: "hist", .. })
        ));
        let log = LogRecord {
            time: 1,
            keys: vec![b"a".to_vec(), vec![]],
        };
        assert_eq!(decode::<LogRecord>(&encode(&log), "log").unwrap(), log);
        assert!(decode_u64(b"short", "u64").is_err());
    }
}

//! The disk-space guard: writes are refused while the file system holding the log is nearly full,
//! before sled ever meets `ENOSPC`.
//!
//! sled 0.34 treats an I/O error as fatal: the first failed write of its log sets an error that
//! every later write *and read* returns until the database is reopened (reads can rewrite pages
//! too). So the writer keeps sled away from a full disk: before it builds a transaction that puts
//! values, it checks that the file system keeps at least [`Config::disk_reserve`] bytes free after
//! the transaction's estimated writes; if not, that transaction alone fails with
//! [`Error::NoSpace`] and nothing of it is written. Reads go on as before, and writes succeed again
//! as soon as space returns (the check runs for every group), with no reopen and no restart.
//!
//! The reserve is what sled needs for its own upkeep beyond the batches it is given: the I/O
//! buffers in flight when the last check ran, segment rolls, page consolidations and snapshots.
//! Transactions that only delete (how an operator frees space through the API) are held to half
//! the reserve, so they still pass when puts no longer do. Should sled meet a full disk anyway
//! (another process filled it between two checks), the store reopens itself (`recover.rs`).
//!
//! [`Config::disk_reserve`]: super::Config::disk_reserve

use std::path::Path;

use crate::error::Error;
use crate::types::{Op, Txn};

/// sled writes a value into its log once, and the tree node holding it is rewritten as it
/// changes: an estimate of the bytes a put of `key` and `value` costs the disk before segment
/// cleaning reclaims any.
pub(crate) fn put_cost(key: &[u8], value: &[u8]) -> u64 {
    2 * (key.len() + value.len()) as u64 + 1024
}

/// The estimated disk cost of `txn`: its costlier branch (which one runs is not known before
/// its compares are evaluated).
pub(crate) fn txn_cost(txn: &Txn) -> u64 {
    let branch = |ops: &[Op]| -> u64 {
        ops.iter()
            .map(|op| match op {
                Op::Put { key, value, .. } => put_cost(key, value),
                Op::Delete { .. } | Op::Range(_) => 0,
            })
            .sum()
    };
    branch(&txn.success).max(branch(&txn.failure))
}

/// Bytes available to an unprivileged writer on the file system holding `path`.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(path).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// The space a group of transactions may still use: free bytes measured once per group, less what
/// the transactions admitted so far are estimated to write.
#[derive(Debug, Clone)]
pub(crate) struct Room {
    free: u64,
    reserve: u64,
    taken: u64,
}

impl Room {
    /// With `free` bytes free now and `reserve` bytes to be kept free.
    pub fn new(free: u64, reserve: u64) -> Room {
        Room {
            free,
            reserve,
            taken: 0,
        }
    }

    /// Measures the file system holding `path`; `None` when the guard is off (`reserve` 0) or the
    /// file system cannot say (then sled's own error is the only guard).
    pub fn measure(path: &Path, reserve: u64) -> Option<Room> {
        if reserve == 0 {
            return None;
        }
        free_bytes(path).map(|free| Room::new(free, reserve))
    }

    /// Admits a transaction estimated to write `cost` bytes (0: it only deletes or reads), or
    /// says why not.
    pub fn admit(&mut self, cost: u64) -> Result<(), Error> {
        let left = self.free.saturating_sub(self.taken);
        let (kept, beyond) = if cost == 0 {
            (self.reserve / 2, String::new())
        } else {
            (
                self.reserve,
                format!(" beyond the ~{cost} bytes this write needs"),
            )
        };
        if left < kept.saturating_add(cost) {
            return Err(Error::NoSpace(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!(
                    "{left} bytes are free on the file system holding the log, and it keeps \
                     {kept} bytes free for its own upkeep{beyond}"
                ),
            )));
        }
        self.taken += cost;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::KeyRange;

    #[test]
    fn puts_keep_the_reserve_free_and_deletes_may_use_half_of_it() {
        let mut room = Room::new(10_000, 4_000);
        room.admit(3_000).unwrap();
        // 7,000 left: a put of 3,001 would leave 3,999 < 4,000.
        let err = room.admit(3_001).unwrap_err();
        assert!(matches!(err, Error::NoSpace(_)), "{err:?}");
        assert!(err.to_string().contains("no space"), "{err}");
        room.admit(3_000).unwrap();
        // 4,000 left: no put fits, a delete does.
        assert!(room.admit(1).is_err());
        room.admit(0).unwrap();
        let mut nearly_full = Room::new(1_999, 4_000);
        assert!(nearly_full.admit(0).is_err());
        let mut half = Room::new(2_000, 4_000);
        half.admit(0).unwrap();
    }

    #[test]
    fn a_refusal_says_how_much_is_free_and_kept() {
        let mut room = Room::new(1_000, 4_096);
        let Err(Error::NoSpace(io)) = room.admit(10) else {
            panic!("admitted");
        };
        let text = io.to_string();
        assert!(
            text.contains("1000 bytes are free") && text.contains("4096 bytes free"),
            "{text}"
        );
        assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
    }

    #[test]
    fn a_transaction_costs_its_costlier_branch() {
        let txn = Txn {
            compare: vec![],
            success: vec![Op::put("k", vec![0; 100]), Op::put("j", vec![0; 10])],
            failure: vec![Op::put("k", vec![0; 2000])],
            tag: None,
        };
        assert_eq!(txn_cost(&txn), put_cost(b"k", &[0; 2000]));
        assert!(put_cost(b"k", &[0; 2000]) > put_cost(b"k", &[0; 100]) + put_cost(b"j", &[0; 10]));
        let deletes = Txn {
            compare: vec![],
            success: vec![Op::Delete {
                range: KeyRange::key("k"),
                prev_kv: false,
            }],
            failure: vec![],
            tag: None,
        };
        assert_eq!(txn_cost(&deletes), 0);
    }

    #[test]
    fn the_file_system_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(Room::measure(dir.path(), 0).is_none());
        assert!(Room::measure(dir.path(), 1).is_some());
        assert!(free_bytes(&dir.path().join("missing")).is_none());
    }
}

//! The durable mark: how far the log had been acknowledged, kept beside sled's file so that a
//! damaged log cannot pass for a shorter, healthy one.
//!
//! sled's recovery reads its log up to the first record whose checksum fails and takes that as a
//! write torn by a crash: everything after it is silently dropped, acknowledged or not. A bit
//! flipped in the middle of the file would so lose every later write without a word. The mark
//! closes that hole: the flusher records the durable revision here (at most once per
//! [`Config::mark_interval`](super::Config::mark_interval), and at close), and opening a data dir
//! whose log ends below its mark fails with [`Error::Corrupt`] instead of serving the shorter
//! history. Writes acknowledged after the newest mark are not covered (a tear there is
//! indistinguishable from a crash mid-write); with the default interval that is the last second.
//!
//! ```text
//!   durable.mark: [rev u64 LE | crc32 of rev | 0u32] [same, the other slot]
//!                  slot 0 (offset 0)                   slot 1 (offset 16)
//! ```
//! Slots are written alternately, each followed by an `fdatasync`, and the newest valid one
//! counts, so a mark torn by a power cut leaves the previous one standing.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The mark's file name in the data dir.
pub(crate) const FILE: &str = "durable.mark";
const SLOT: u64 = 16;

/// The newest valid mark in `dir`, if any.
pub(crate) fn read(dir: &Path) -> std::io::Result<Option<u64>> {
    let bytes = match std::fs::read(dir.join(FILE)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(newest(&bytes).map(|(_, rev)| rev))
}

/// The newest valid slot of a mark file's bytes: (its index, its revision).
fn newest(bytes: &[u8]) -> Option<(u64, u64)> {
    bytes
        .chunks_exact(SLOT as usize)
        .enumerate()
        .filter_map(|(i, slot)| decode(slot).map(|rev| (i as u64, rev)))
        .max_by_key(|(_, rev)| *rev)
}

fn encode(rev: u64) -> [u8; SLOT as usize] {
    let mut slot = [0u8; SLOT as usize];
    slot[..8].copy_from_slice(&rev.to_le_bytes());
    let crc = crc32fast::hash(&slot[..8]);
    slot[8..12].copy_from_slice(&crc.to_le_bytes());
    slot
}

fn decode(slot: &[u8]) -> Option<u64> {
    let rev: [u8; 8] = slot[..8].try_into().ok()?;
    let crc = u32::from_le_bytes(slot[8..12].try_into().ok()?);
    (crc == crc32fast::hash(&rev) && rev != [0; 8]).then(|| u64::from_le_bytes(rev))
}

/// The flusher's writer of the mark.
pub(crate) struct Mark {
    file: File,
    next_slot: u64,
    written: u64,
    at: Option<Instant>,
    interval: Duration,
}

impl Mark {
    /// Opens (or creates) the mark in `dir`.
    pub(crate) fn open(dir: &Path, interval: Duration) -> std::io::Result<Mark> {
        let bytes = match std::fs::read(dir.join(FILE)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        // The next record goes into the other slot than the newest, which stays standing.
        let (next_slot, written) = match newest(&bytes) {
            Some((slot, rev)) => (slot ^ 1, rev),
            None => (0, 0),
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(FILE))?;
        Ok(Mark {
            file,
            next_slot,
            written,
            at: None,
            interval,
        })
    }

    /// Notes that `rev` is durable; records it if the interval has passed since the last record.
    pub(crate) fn note(&mut self, rev: u64) -> std::io::Result<()> {
        if self.at.is_none_or(|at| at.elapsed() >= self.interval) {
            self.write(rev)?;
        }
        Ok(())
    }

    /// Records `rev` now (if it is newer than the last record).
    pub(crate) fn write(&mut self, rev: u64) -> std::io::Result<()> {
        if rev <= self.written {
            return Ok(());
        }
        self.record(rev)
    }

    /// Records `rev` in both slots, even below the last record: for a log whose loss the
    /// operator accepted.
    pub(crate) fn reset(&mut self, rev: u64) -> std::io::Result<()> {
        self.record(rev)?;
        self.record(rev)
    }

    fn record(&mut self, rev: u64) -> std::io::Result<()> {
        self.file
            .write_all_at(&encode(rev), self.next_slot * SLOT)?;
        self.file.sync_data()?;
        self.next_slot ^= 1;
        self.written = rev;
        self.at = Some(Instant::now());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_valid_slot_counts_and_a_torn_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let mut mark = Mark::open(dir.path(), Duration::ZERO).unwrap();
        mark.write(7).unwrap();
        mark.write(9).unwrap();
        mark.write(8).unwrap(); // older than the last record: ignored
        assert_eq!(read(dir.path()).unwrap(), Some(9));
        // Tear the newest slot (slot 1 holds 9): the previous record stands.
        let path = dir.path().join(FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[SLOT as usize + 2] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(7));
        // Reopened, it goes on from the newest valid record.
        let mut mark = Mark::open(dir.path(), Duration::from_secs(3600)).unwrap();
        mark.note(12).unwrap(); // the first note always records
        mark.note(13).unwrap(); // within the interval: not recorded
        assert_eq!(read(dir.path()).unwrap(), Some(12));
    }
}

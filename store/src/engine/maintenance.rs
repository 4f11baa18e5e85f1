//! Background upkeep: lease expiry, the automatic retention policy, and compaction itself.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc;

use super::writer::Command;
use super::{Shared, decode_hist, read};
use crate::error::{Error, Result};
use crate::keys::{self, hist_key_start, log_key};
use crate::types::{LeaseId, Revision};

/// The maintenance thread: revokes expired leases (an ordinary revisioned delete, through the
/// writer) and applies the retention policy every `retention.interval`.
pub(crate) fn run(shared: Arc<Shared>, commands: mpsc::Sender<Command>) {
    let interval = shared
        .config
        .retention
        .interval
        .max(Duration::from_millis(10));
    let mut next_retention = Instant::now() + interval;
    while !shared.shutdown.is_cancelled() {
        let now = Instant::now();
        let expired: Vec<u64> = {
            let table = shared.leases.lock().expect("lease table poisoned");
            table
                .leases
                .iter()
                .filter(|(_, l)| l.deadline <= now)
                .map(|(id, _)| *id)
                .collect()
        };
        for id in expired {
            let command = Command::Revoke {
                id: LeaseId(id),
                expired_only: true,
                reply: None,
            };
            if commands.blocking_send(command).is_err() {
                return;
            }
        }
        if now >= next_retention {
            if let Err(e) = apply_retention(&shared) {
                tracing::warn!(error = %e, "automatic compaction failed");
            }
            next_retention = Instant::now() + interval;
        }
        // Sleep until the next lease deadline or retention round, or until woken.
        let next_deadline = {
            let table = shared.leases.lock().expect("lease table poisoned");
            table.leases.values().map(|l| l.deadline).min()
        };
        let mut wake_at = next_retention;
        if let Some(d) = next_deadline {
            // An expired lease whose revoke is queued: look again shortly, not in a busy loop.
            wake_at = wake_at.min(d.max(Instant::now() + Duration::from_millis(50)));
        }
        let (lock, cvar) = &shared.wake;
        let mut woken = lock.lock().expect("wake poisoned");
        while !*woken && Instant::now() < wake_at && !shared.shutdown.is_cancelled() {
            let timeout = wake_at.saturating_duration_since(Instant::now());
            woken = cvar.wait_timeout(woken, timeout).expect("wake poisoned").0;
        }
        *woken = false;
    }
}

/// The revision the retention policy compacts to now, if any.
pub(crate) fn retention_target(shared: &Shared) -> Result<Option<u64>> {
    let policy = &shared.config.retention;
    let durable = shared.durable();
    let mut target = 0;
    if let Some(n) = policy.max_revisions
        && durable > n
    {
        target = durable - n + 1;
    }
    if let Some(age) = policy.max_age
        && let Some(cutoff) = SystemTime::now().checked_sub(age)
    {
        match shared.revision_at(cutoff) {
            Ok(rev) => target = target.max(rev.0),
            Err(Error::TimeBeforeHistory { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((target > shared.compacted()).then_some(target))
}

fn apply_retention(shared: &Shared) -> Result<()> {
    if let Some(target) = retention_target(shared)? {
        compact(shared, target)?;
    }
    Ok(())
}

/// How many log entries one compaction batch covers.
const CHUNK: usize = 512;

/// Compacts history below `to`: afterwards revision `to` is the oldest readable one, and the
/// previous values of the changes at `to` are still there (a watch from `to` with previous values
/// works).
///
/// ```text
///   compact to 10          versions (newest below 10 marked *)        kept
///   key k:   v3 v7 v9(del)* v12                                        v12  (k did not exist at 9)
///   key j:   v2 v5* v14                                                v5 v14
///   key m:   v4* v10                                                   v4 v10
/// ```
///
/// Per key: the newest version below `to` stays if it is a put; everything older goes.
/// The new compacted revision is made durable and published before anything is removed, so a
/// reader that raced the removal sees it on its second check and reports `Compacted` rather than
/// a wrong answer. Keys are found through the log entries being dropped, so the work is
/// proportional to the history removed, not to the whole store.
pub(crate) fn compact(shared: &Shared, to: u64) -> Result<()> {
    let _guard = shared.compaction.lock().expect("compaction lock poisoned");
    let durable = shared.durable();
    if to > durable {
        return Err(Error::FutureRevision {
            requested: Revision(to),
            current: Revision(durable),
        });
    }
    if to > shared.compacted() {
        shared
            .db
            .insert(keys::META_COMPACTED, &to.to_be_bytes()[..])
            .map_err(read::sled_err)?;
        shared.db.flush().map_err(read::sled_err)?;
        shared
            .compacted
            .store(to, std::sync::atomic::Ordering::SeqCst);
    }
    // Also finishes a compaction a crash interrupted: whatever log entries below `to` remain.
    let to = shared.compacted();
    loop {
        let mut batch = sled::Batch::default();
        let mut touched = BTreeSet::new();
        let mut n = 0;
        // Whole groups below `to` go (a group's key is its last revision).
        for item in shared.db.range(log_key(0)..log_key(to)).take(CHUNK) {
            let (raw, value) = item.map_err(read::sled_err)?;
            for (_, log) in read::decode_log(&raw, &value)?.iter() {
                touched.extend(log.keys.iter().cloned());
            }
            batch.remove(raw);
            n += 1;
        }
        if n == 0 {
            break;
        }
        for key in &touched {
            prune_key_below(shared, key, to, &mut batch)?;
        }
        shared.db.apply_batch(batch).map_err(read::sled_err)?;
    }
    // The group holding `to` stays, but the keys its revisions below `to` wrote lose their
    // versions below `to` like any other.
    if let Some(group) = read::log_group_of(&shared.db, to)? {
        let mut batch = sled::Batch::default();
        let touched: BTreeSet<&Vec<u8>> = group
            .iter()
            .filter(|(rev, _)| *rev < to)
            .flat_map(|(_, log)| log.keys.iter())
            .collect();
        for key in touched {
            prune_key_below(shared, key, to, &mut batch)?;
        }
        shared.db.apply_batch(batch).map_err(read::sled_err)?;
    }
    Ok(())
}

/// [`Store::purge_prefix`](crate::Store::purge_prefix): compaction to `to` of the keys under
/// `prefix` only. The prefix's watermark is raised (durably) before anything is removed, as
/// [`compact`] raises the compacted revision, so a racing reader reports `Compacted`. The keys are
/// found by scanning their history records (deleted keys included), so the work is proportional
/// to the history under the prefix.
pub(crate) fn purge_prefix(shared: &Shared, prefix: &[u8], to: u64) -> Result<u64> {
    let _guard = shared.compaction.lock().expect("compaction lock poisoned");
    let durable = shared.durable();
    if to > durable {
        return Err(Error::FutureRevision {
            requested: Revision(to),
            current: Revision(durable),
        });
    }
    {
        let mut marks = shared.watermarks.write().expect("watermarks poisoned");
        let mark = marks.entry(prefix.to_vec()).or_insert(0);
        if to > *mark {
            *mark = to;
            shared
                .db
                .insert(keys::watermark_key(prefix), &to.to_be_bytes()[..])
                .map_err(read::sled_err)?;
        }
    }
    shared.db.flush().map_err(read::sled_err)?;
    let start = keys::hist_prefix(prefix);
    let end = crate::types::prefix_end(&start);
    let scan = match &end {
        Some(end) => shared.db.range(start.clone()..end.clone()),
        None => shared.db.range(start.clone()..),
    };
    let mut batch = sled::Batch::default();
    let mut removed = 0u64;
    // The newest version below `to` seen so far of the key being walked: (record key, value).
    let mut newest: Option<(Vec<u8>, sled::IVec, sled::IVec)> = None;
    let finish = |newest: Option<(Vec<u8>, sled::IVec, sled::IVec)>,
                  batch: &mut sled::Batch,
                  removed: &mut u64|
     -> Result<()> {
        if let Some((_, raw, value)) = newest
            && decode_hist(&value)?.is_tombstone()
        {
            batch.remove(raw);
            *removed += 1;
        }
        Ok(())
    };
    for item in scan {
        let (raw, value) = item.map_err(read::sled_err)?;
        let Some((key, rev)) = keys::parse_hist_key(&raw) else {
            continue;
        };
        let same_key = newest.as_ref().is_some_and(|(k, _, _)| *k == key);
        if !same_key {
            finish(newest.take(), &mut batch, &mut removed)?;
        }
        if rev >= to {
            continue;
        }
        // An older version below `to` than this one: it goes.
        if let Some((_, older, _)) = newest.take() {
            batch.remove(older);
            removed += 1;
        }
        newest = Some((key, raw, value));
    }
    finish(newest.take(), &mut batch, &mut removed)?;
    shared.db.apply_batch(batch).map_err(read::sled_err)?;
    shared.db.flush().map_err(read::sled_err)?;
    Ok(removed)
}

/// Removes every version of `key` below `to` except the newest, if that is a put.
fn prune_key_below(shared: &Shared, key: &[u8], to: u64, batch: &mut sled::Batch) -> Result<()> {
    let mut versions = shared
        .db
        .range(hist_key_start(key)..keys::hist_key(key, to))
        .rev();
    let Some(newest) = versions.next() else {
        return Ok(());
    };
    let (raw, value) = newest.map_err(read::sled_err)?;
    if decode_hist(&value)?.is_tombstone() {
        batch.remove(raw);
    }
    for item in versions {
        let (raw, _) = item.map_err(read::sled_err)?;
        batch.remove(raw);
    }
    Ok(())
}

//! Watchers: a pull model. Each watcher is a task that owns its next revision; it is woken when an
//! entry touching its range becomes durable (the registry groups watchers by range, so a write
//! wakes only the watchers it concerns), takes entries from the in-memory ring of recent entries
//! or, if it fell behind the ring, reads them from the log on disk, filters them by range and
//! sends them into its own bounded channel.
//!
//! ```text
//!   log on disk   ... r-3 r-2 r-1 [ r   r+1 ... durable ]   ring (recent entries, Arc'd)
//!                              ▲            ▲
//!        slow watcher's `next` ┘            └ fast watcher's `next`
//! ```
//!
//! A watcher delivers `next`, then `next + 1`, ... and nothing else, so order, no gap and no
//! duplicate hold by construction, across the switch from disk to ring. A slow consumer only stalls
//! its own task (writers never wait for watchers); when it resumes it catches up from the log, or
//! ends with [`Error::Compacted`] if the log no longer has its next revision.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::{Entry, Shared, read};
use crate::error::{Error, Result};
use crate::keys::log_key;
use crate::types::{Event, KeyRange, LogEntry, Revision, WatchRequest, WatchResponse};

/// The most recent entries, in revision order, without gaps.
pub(crate) struct Ring {
    entries: VecDeque<Arc<Entry>>,
    capacity: usize,
}

impl Ring {
    /// An empty ring holding at most `capacity` entries.
    pub fn new(capacity: usize) -> Ring {
        Ring {
            entries: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(1),
        }
    }

    /// Appends the entry after the newest one.
    pub fn push(&mut self, entry: Arc<Entry>) {
        if let Some(last) = self.entries.back() {
            assert_eq!(
                last.revision + 1,
                entry.revision,
                "ring entries must be contiguous"
            );
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
    }

    /// The oldest revision held.
    pub fn first(&self) -> Option<u64> {
        self.entries.front().map(|e| e.revision)
    }

    /// Up to `max` entries from `next` to `upto`; empty if `next` is no longer (or not yet) held.
    pub fn slice(&self, next: u64, upto: u64, max: usize) -> Vec<Arc<Entry>> {
        let Some(first) = self.first() else {
            return Vec::new();
        };
        if next < first {
            return Vec::new();
        }
        self.entries
            .iter()
            .skip((next - first) as usize)
            .take_while(|e| e.revision <= upto)
            .take(max)
            .cloned()
            .collect()
    }
}

/// The events of `entry` a watcher of `range` sees, or `None` if there are none.
fn filter(entry: &Entry, range: &KeyRange, prev_kv: bool) -> Option<WatchResponse> {
    let events: Vec<Event> = entry
        .events
        .iter()
        .filter(|e| range.contains(&e.kv.key))
        .map(|e| e.to_event(prev_kv))
        .collect();
    (!events.is_empty()).then_some(WatchResponse {
        revision: Revision(entry.revision),
        events,
    })
}

/// Reads revisions `from..=to` from the log for a watcher of `range` (all keys when `None`).
/// Fails with [`Error::Compacted`] if any of it is gone.
pub(crate) fn read_log(
    shared: &Shared,
    range: Option<&KeyRange>,
    with_prev: bool,
    from: u64,
    to: u64,
    limit: usize,
) -> Result<Vec<LogEntry>> {
    shared.check_compacted(Revision(from))?;
    let mut out = Vec::new();
    let mut expected = from;
    // Log records are keyed by the last revision of their group: the first one ending at or
    // after `from` holds `from`.
    'groups: for item in shared.db.range(log_key(from)..=log_key(u64::MAX)) {
        let (raw, value) = item.map_err(read::sled_err)?;
        let group = read::decode_log(&raw, &value)?;
        for (rev, log) in group.iter() {
            if rev < expected {
                continue;
            }
            if rev > to || out.len() >= limit {
                break 'groups;
            }
            if rev != expected {
                // A log entry vanished under us: compaction moved past it.
                shared.check_compacted(Revision(expected))?;
                return Err(shared.corrupt(format!("log entry {expected} is missing")));
            }
            expected += 1;
            let events = match read::entry_events(&shared.db, rev, log, range, with_prev)? {
                Ok(events) => events,
                Err(missing) => return Err(shared.explain_missing(&missing.key, missing.rev)),
            };
            out.push(LogEntry {
                revision: Revision(rev),
                time: std::time::UNIX_EPOCH + Duration::from_nanos(log.time),
                tag: log.tag.clone(),
                events,
            });
        }
        if group.last() >= to {
            break;
        }
    }
    if out.len() < limit && expected <= to {
        shared.check_compacted(Revision(expected))?;
        return Err(shared.corrupt(format!("log entry {expected} is missing")));
    }
    // Compaction may have started while we read: what we read is only right if it has not passed it.
    shared.check_compacted(Revision(from))?;
    Ok(out)
}

/// Reads revisions `from..=to` of the whole log for an archive (see
/// [`Store::log_retained`](crate::Store::log_retained)): versions that per-prefix retention
/// pruned are listed, not errors; anything else missing is.
pub(crate) fn read_log_retained(
    shared: &Shared,
    from: u64,
    to: u64,
    limit: usize,
) -> Result<Vec<(LogEntry, Vec<usize>)>> {
    shared.check_compacted(Revision(from))?;
    let mut out = Vec::new();
    let mut expected = from;
    'groups: for item in shared.db.range(log_key(from)..=log_key(u64::MAX)) {
        let (raw, value) = item.map_err(read::sled_err)?;
        let group = read::decode_log(&raw, &value)?;
        for (rev, log) in group.iter() {
            if rev < expected {
                continue;
            }
            if rev > to || out.len() >= limit {
                break 'groups;
            }
            if rev != expected {
                shared.check_compacted(Revision(expected))?;
                return Err(shared.corrupt(format!("log entry {expected} is missing")));
            }
            expected += 1;
            let (events, pruned) = read::entry_events_retained(&shared.db, rev, log)?;
            for &i in &pruned {
                match shared.explain_missing(&events[i].kv.key, rev) {
                    Error::Compacted {
                        prefix: Some(_), ..
                    } => {}
                    other => return Err(other),
                }
            }
            out.push((
                LogEntry {
                    revision: Revision(rev),
                    time: std::time::UNIX_EPOCH + Duration::from_nanos(log.time),
                    tag: log.tag.clone(),
                    events,
                },
                pruned,
            ));
        }
        if group.last() >= to {
            break;
        }
    }
    if out.len() < limit && expected <= to {
        shared.check_compacted(Revision(expected))?;
        return Err(shared.corrupt(format!("log entry {expected} is missing")));
    }
    shared.check_compacted(Revision(from))?;
    Ok(out)
}

/// The live watchers, grouped by range: a durable entry wakes each group whose range it touches
/// once, however many watchers share the range.
#[derive(Default)]
pub(crate) struct Registry {
    next_id: u64,
    by_range: HashMap<KeyRange, Vec<(u64, Arc<Notify>)>>,
    /// How many of `by_range`'s ranges are single keys (when none, a write looks none up).
    singles: usize,
}

impl Registry {
    fn add(&mut self, range: KeyRange, notify: Arc<Notify>) -> u64 {
        self.next_id += 1;
        let single = matches!(range.end, crate::types::RangeEnd::Single);
        let list = self.by_range.entry(range).or_default();
        if list.is_empty() && single {
            self.singles += 1;
        }
        list.push((self.next_id, notify));
        self.next_id
    }

    fn remove(&mut self, range: &KeyRange, id: u64) {
        if let Some(list) = self.by_range.get_mut(range) {
            list.retain(|(i, _)| *i != id);
            if list.is_empty() {
                self.by_range.remove(range);
                if matches!(range.end, crate::types::RangeEnd::Single) {
                    self.singles -= 1;
                }
            }
        }
    }

    /// Wakes every watcher whose range holds a key written in `entries`. A watcher that is not
    /// waiting keeps the wake-up for later (`Notify` stores a permit), so none is lost.
    /// Single-key ranges are looked up by key; the other ranges are tried one by one.
    pub fn wake(&self, entries: &[Arc<Entry>]) {
        if self.by_range.is_empty() {
            return;
        }
        let mut woken: Vec<&KeyRange> = Vec::new();
        for entry in entries.iter().filter(|_| self.singles > 0) {
            for event in &entry.events {
                let single = KeyRange::key(event.kv.key.clone());
                if let Some((range, watchers)) = self.by_range.get_key_value(&single)
                    && !woken.contains(&range)
                {
                    woken.push(range);
                    for (_, notify) in watchers {
                        notify.notify_one();
                    }
                }
            }
        }
        for (range, watchers) in &self.by_range {
            if matches!(range.end, crate::types::RangeEnd::Single) {
                continue;
            }
            let touched = entries
                .iter()
                .any(|e| e.events.iter().any(|ev| range.contains(&ev.kv.key)));
            if touched {
                for (_, notify) in watchers {
                    notify.notify_one();
                }
            }
        }
    }
}

/// What a watcher task needs.
pub(crate) struct Watcher {
    shared: Arc<Shared>,
    request: WatchRequest,
    next: u64,
    out: mpsc::Sender<Result<WatchResponse>>,
    notify: Arc<Notify>,
    id: u64,
}

impl Watcher {
    /// A watcher of `request` from revision `next`, registered for wake-ups.
    pub fn new(
        shared: Arc<Shared>,
        request: WatchRequest,
        next: u64,
        out: mpsc::Sender<Result<WatchResponse>>,
    ) -> Watcher {
        let notify = Arc::new(Notify::new());
        let id = shared
            .registry
            .lock()
            .expect("watch registry poisoned")
            .add(request.range.clone(), notify.clone());
        Watcher {
            shared,
            request,
            next,
            out,
            notify,
            id,
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Ok(mut registry) = self.shared.registry.lock() {
            registry.remove(&self.request.range, self.id);
        }
    }
}

/// How many entries a watcher takes per step.
const STEP: usize = 256;

impl Watcher {
    /// Sends one response; false when the watch is over (receiver gone or store closing).
    async fn send(&self, item: Result<WatchResponse>) -> bool {
        tokio::select! {
            sent = self.out.send(item) => sent.is_ok(),
            _ = self.shared.shutdown.cancelled() => false,
        }
    }

    /// Runs the watcher until its receiver goes away, the store closes or an error is sent.
    pub async fn run(mut self) {
        let progress = self.request.progress_notify;
        let mut last_sent = Instant::now();
        loop {
            let durable = Revision(self.shared.durable());
            while self.next <= durable.0 {
                let batch = {
                    let ring = self.shared.ring.read().expect("ring poisoned");
                    let batch = ring.slice(self.next, durable.0, STEP);
                    let first = ring.first();
                    (batch, first)
                };
                match batch {
                    (batch, _) if !batch.is_empty() => {
                        for entry in batch {
                            if let Some(resp) =
                                filter(&entry, &self.request.range, self.request.prev_kv)
                            {
                                if !self.send(Ok(resp)).await {
                                    return;
                                }
                                last_sent = Instant::now();
                            }
                            self.next = entry.revision + 1;
                        }
                    }
                    (_, ring_first) => {
                        // Behind the ring (or the ring is empty after a reopen): catch up from disk.
                        let mut to = durable.0;
                        if let Some(first) = ring_first
                            && first > self.next
                        {
                            to = to.min(first - 1);
                        }
                        let shared = self.shared.clone();
                        let range = self.request.range.clone();
                        let (prev, from) = (self.request.prev_kv, self.next);
                        let read = tokio::task::spawn_blocking(move || {
                            read_log(&shared, Some(&range), prev, from, to, STEP)
                        })
                        .await
                        .unwrap_or(Err(Error::Closed));
                        match read {
                            Ok(entries) => {
                                for entry in entries {
                                    if !entry.events.is_empty() {
                                        let resp = WatchResponse {
                                            revision: entry.revision,
                                            events: entry.events,
                                        };
                                        if !self.send(Ok(resp)).await {
                                            return;
                                        }
                                        last_sent = Instant::now();
                                    }
                                    self.next = entry.revision.0 + 1;
                                }
                            }
                            Err(e) => {
                                let _ = self.send(Err(e)).await;
                                return;
                            }
                        }
                    }
                }
            }
            let deadline = progress.map(|p| last_sent + p);
            tokio::select! {
                _ = self.notify.notified() => {}
                _ = self.out.closed() => return,
                _ = self.shared.shutdown.cancelled() => {
                    let _ = self.out.try_send(Err(Error::Closed));
                    return;
                }
                _ = sleep_until(deadline), if deadline.is_some() => {
                    let resp = WatchResponse { revision: Revision(self.next - 1), events: Vec::new() };
                    if !self.send(Ok(resp)).await {
                        return;
                    }
                    last_sent = Instant::now();
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rev: u64) -> Arc<Entry> {
        Arc::new(Entry {
            revision: rev,
            tag: None,
            events: Vec::new(),
        })
    }

    #[test]
    fn ring_keeps_the_newest_contiguous_entries() {
        let mut ring = Ring::new(3);
        assert!(ring.slice(1, 10, 10).is_empty());
        for rev in 1..=5 {
            ring.push(entry(rev));
        }
        assert_eq!(ring.first(), Some(3));
        assert!(ring.slice(2, 5, 10).is_empty(), "2 fell out of the ring");
        let revs: Vec<u64> = ring.slice(3, 4, 10).iter().map(|e| e.revision).collect();
        assert_eq!(revs, vec![3, 4]);
        let revs: Vec<u64> = ring.slice(4, 9, 1).iter().map(|e| e.revision).collect();
        assert_eq!(revs, vec![4]);
        assert!(ring.slice(6, 9, 10).is_empty());
    }

    fn put_entry(rev: u64, keys: &[&str]) -> Arc<Entry> {
        let events = keys
            .iter()
            .map(|k| super::super::Change {
                kind: crate::types::EventKind::Put,
                kv: Arc::new(crate::engine::read::tombstone_kv(k.as_bytes(), rev)),
                prev_kv: None,
            })
            .collect();
        Arc::new(Entry {
            revision: rev,
            tag: None,
            events,
        })
    }

    #[test]
    fn registry_wakes_only_the_watchers_an_entry_concerns() {
        use futures::FutureExt;
        let mut registry = Registry::default();
        let single = Arc::new(Notify::new());
        let prefix = Arc::new(Notify::new());
        let other = Arc::new(Notify::new());
        let same_prefix = Arc::new(Notify::new());
        registry.add(KeyRange::key("/pods/a"), single.clone());
        registry.add(KeyRange::prefix("/pods/"), prefix.clone());
        let other_id = registry.add(KeyRange::prefix("/nodes/"), other.clone());
        registry.add(KeyRange::prefix("/pods/"), same_prefix.clone());
        registry.wake(&[put_entry(1, &["/pods/b"]), put_entry(2, &["/pods/c", "/x"])]);
        assert!(single.notified().now_or_never().is_none());
        assert!(prefix.notified().now_or_never().is_some());
        assert!(same_prefix.notified().now_or_never().is_some());
        assert!(other.notified().now_or_never().is_none());
        registry.wake(&[put_entry(3, &["/pods/a"])]);
        assert!(single.notified().now_or_never().is_some());
        assert!(prefix.notified().now_or_never().is_some());
        registry.remove(&KeyRange::prefix("/nodes/"), other_id);
        registry.wake(&[put_entry(4, &["/nodes/n"])]);
        assert!(other.notified().now_or_never().is_none());
        assert!(!registry.by_range.contains_key(&KeyRange::prefix("/nodes/")));
    }

    #[test]
    #[should_panic(expected = "contiguous")]
    fn ring_refuses_a_gap() {
        let mut ring = Ring::new(3);
        ring.push(entry(1));
        ring.push(entry(3));
    }
}

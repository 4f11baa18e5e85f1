//! Watches on etcd: how far a watcher has seen, regrouping by revision, and the task that keeps
//! a store watch alive across lost connections.
//!
//! # What an etcd 3.4 watch response proves
//! Every response's header revision says how far etcd has observed the store *for this
//! watcher*: a live notification carries its own revision, a catch-up batch carries the current
//! revision at the time of the batch, a progress notification the current revision. The one
//! exception is a catch-up batch cut short after [`BATCH_MAX_REVS`] revisions (etcd's
//! `watchBatchMaxRevs`), whose header still says the current revision: for a batch with that
//! many revisions only its last event counts. Requested progress (`RequestProgress`) is never
//! used: on 3.4 it can overtake pending events (etcd issue 15220); the periodic progress
//! notifications go through the watcher's own channel and are ordered with its events.

use std::collections::BTreeSet;

use crate::types::{Event, Revision, WatchResponse};

/// The most revisions etcd puts in one catch-up batch before cutting it.
pub(crate) const BATCH_MAX_REVS: usize = 1000;

/// How far a watcher has seen: every revision below `next` has been delivered or had nothing in
/// range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub next: u64,
}

impl Cursor {
    /// Takes one etcd response (its header revision and its events, each with its revision, in
    /// order) and returns what to deliver: one [`WatchResponse`] per new revision. Revisions
    /// below `next` (a resumed watch repeating itself) are dropped.
    pub fn step(&mut self, header: u64, events: Vec<(u64, Event)>) -> Vec<WatchResponse> {
        let distinct: BTreeSet<u64> = events.iter().map(|(r, _)| *r).collect();
        let mut out: Vec<WatchResponse> = Vec::new();
        for (rev, event) in events {
            if rev < self.next {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.revision.0 == rev => last.events.push(event),
                _ => out.push(WatchResponse {
                    revision: Revision(rev),
                    events: vec![event],
                }),
            }
        }
        if let Some(last) = out.last() {
            self.next = self.next.max(last.revision.0 + 1);
        }
        if distinct.len() < BATCH_MAX_REVS {
            self.next = self.next.max(header + 1);
        }
        out
    }

    /// Takes a progress notification; returns the revision to report, if it moved the cursor
    /// or confirms it.
    pub fn progress(&mut self, header: u64) -> Option<Revision> {
        if header + 1 < self.next {
            return None;
        }
        self.next = header + 1;
        Some(Revision(header))
    }

    /// The newest revision seen through.
    pub fn seen(&self) -> u64 {
        self.next.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EventKind, KeyValue};

    fn ev(rev: u64, key: &str) -> (u64, Event) {
        (
            rev,
            Event {
                kind: EventKind::Put,
                kv: KeyValue {
                    key: key.into(),
                    value: vec![],
                    create_revision: Revision(rev),
                    mod_revision: Revision(rev),
                    version: 1,
                    lease: None,
                },
                prev_kv: None,
            },
        )
    }

    #[test]
    fn batches_regroup_per_revision_and_headers_advance_the_cursor() {
        let mut c = Cursor { next: 5 };
        let out = c.step(9, vec![ev(4, "old"), ev(5, "a"), ev(5, "b"), ev(7, "c")]);
        let revs: Vec<(u64, usize)> = out.iter().map(|r| (r.revision.0, r.events.len())).collect();
        assert_eq!(revs, vec![(5, 2), (7, 1)]);
        // The batch's header says etcd looked up to 9 for this watcher.
        assert_eq!(c.next, 10);
        // A resumed watch repeating 7 delivers nothing twice.
        assert!(c.step(7, vec![ev(7, "c")]).is_empty());
        assert_eq!(c.next, 10);
        assert_eq!(c.progress(8), None);
        assert_eq!(c.progress(12), Some(Revision(12)));
        assert_eq!(c.seen(), 12);
    }

    #[test]
    fn a_full_batch_only_proves_its_last_event() {
        let mut c = Cursor { next: 1 };
        let events: Vec<_> = (1..=BATCH_MAX_REVS as u64).map(|r| ev(r, "k")).collect();
        c.step(5000, events);
        assert_eq!(c.next, BATCH_MAX_REVS as u64 + 1);
    }
}

//! The write path, three threads in a pipeline: the writer assigns revisions and builds each
//! group of waiting transactions into one sled batch, the applier applies the batches in order
//! (while the writer builds the next group), the flusher group-commits (one `flush` for
//! everything applied meanwhile), publishes and acknowledges.
//!
//! ```text
//!  callers ──Command──▶ [writer] ──Work──▶ [applier] ──Applied──▶ [flusher] ──▶ ring, durable, acks
//!          (bounded)    take all waiting    apply_batch             recv 1 + drain all
//!                       evaluate compares   (one per group)         db.flush() (+ fdatasync)
//!                       rev = last + 1                              push entries to the ring
//!                       build one batch                             publish durable revision,
//!                                                                   ack, wake watchers
//! ```
//!
//! The writer evaluates against everything it has built so far (applied, durable or not): a later
//! transaction sees an earlier one's effects even if both wait for the same flush. It keeps the
//! newest version of every key of a group not yet applied in memory, and a scan of sled waits for
//! the applier, so it never reads behind itself. Readers read only at the published durable
//! revision.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;

use super::{Change, Entry, FastMap, Shared, read, space};
use crate::error::{Error, Result};
use crate::keys::{self, attach_key, hist_key, hist_key_end, hist_key_start, lease_key, log_key};
use crate::record::{HistRecord, encode_log_group};
use crate::types::RangeEnd;
use crate::types::*;

/// A request to the writer thread.
pub(crate) enum Command {
    /// Run a transaction.
    Txn {
        txn: Txn,
        reply: oneshot::Sender<Result<TxnResponse>>,
    },
    /// Grant a lease.
    Grant {
        ttl: Duration,
        reply: oneshot::Sender<Result<Lease>>,
    },
    /// Revoke a lease (when `expired_only`, only if it has not been kept alive meanwhile).
    Revoke {
        id: LeaseId,
        expired_only: bool,
        reply: Option<oneshot::Sender<Result<Revision>>>,
    },
    /// Pin a revision for a snapshot (pauses per-prefix pruning until released).
    Snapshot {
        reply: oneshot::Sender<Result<Capture>>,
    },
}

/// What a snapshot needs from the writer: a revision and the lease table consistent with it.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    /// The newest revision applied when captured (durable once the capture is acknowledged).
    pub revision: u64,
    /// Every lease: id and TTL in milliseconds.
    pub leases: Vec<(u64, u64)>,
    /// The next lease id.
    pub lease_next: u64,
}

/// The acknowledgement owed for one applied command, sent once it is durable.
pub(crate) enum Ack {
    Txn(oneshot::Sender<Result<TxnResponse>>, TxnResponse),
    Grant(oneshot::Sender<Result<Lease>>, Lease),
    Revoke(Option<oneshot::Sender<Result<Revision>>>, Revision),
    Snapshot(oneshot::Sender<Result<Capture>>, Capture),
}

impl Ack {
    fn succeed(self) {
        // A caller that went away no longer needs its answer.
        let _ = match self {
            Ack::Txn(tx, r) => tx.send(Ok(r)).map_err(drop),
            Ack::Grant(tx, r) => tx.send(Ok(r)).map_err(drop),
            Ack::Revoke(tx, r) => tx.map(|tx| tx.send(Ok(r)).map_err(drop)).unwrap_or(Ok(())),
            Ack::Snapshot(tx, r) => tx.send(Ok(r)).map_err(drop),
        };
    }

    fn fail(self, err: Error) {
        let _ = match self {
            Ack::Txn(tx, _) => tx.send(Err(err)).map_err(drop),
            Ack::Grant(tx, _) => tx.send(Err(err)).map_err(drop),
            Ack::Revoke(tx, _) => tx
                .map(|tx| tx.send(Err(err)).map_err(drop))
                .unwrap_or(Ok(())),
            Ack::Snapshot(tx, _) => tx.send(Err(err)).map_err(drop),
        };
    }
}

/// One command applied by the writer, waiting for the flush that makes it durable.
pub(crate) struct Applied {
    /// The newest revision applied at this point.
    pub rev: u64,
    /// The log entry it created, if it wrote.
    pub entry: Option<Arc<Entry>>,
    /// Whom to tell.
    pub ack: Ack,
}

/// A lease as the writer and keep-alives see it.
#[derive(Debug, Clone)]
pub(crate) struct LeaseState {
    /// TTL as granted.
    pub ttl: Duration,
    /// When it expires unless kept alive.
    pub deadline: Instant,
    /// The live keys attached to it.
    pub keys: BTreeSet<Vec<u8>>,
}

/// The lease table. Locked briefly by the writer (attach, detach, grant, revoke), keep-alives
/// (deadline) and the maintenance thread (expiry scan); never across an await.
#[derive(Debug, Default)]
pub(crate) struct LeaseTable {
    pub leases: std::collections::HashMap<u64, LeaseState>,
}

/// Nanoseconds since the Unix epoch.
pub(crate) fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// At most this many transactions share one sled batch.
const MAX_GROUP: usize = 512;

/// The writer thread's state. It alone assigns revisions.
pub(crate) struct Writer {
    pub shared: Arc<Shared>,
    /// The next revision to assign.
    pub next_rev: u64,
    /// Commit time of the last revision (commit times never go backwards along the log).
    pub last_time: u64,
    /// The next lease id.
    pub lease_next: u64,
    /// To the applier.
    pub out: std::sync::mpsc::Sender<Work>,
    /// Batches of the command being handled, for the applier.
    pub work_batches: Vec<Batch>,
    /// Acknowledgements owed once they are durable, in revision order.
    pub work_items: Vec<Applied>,
    /// The newest version of recently written keys (`None`: deleted), so that a write finds the
    /// version it replaces without reading sled (a read of a page costs more than the write).
    /// Only the writer changes a key's newest version, so this cannot go stale; compaction only
    /// ever removes a newest version that is a delete, which reads the same. The key-values are
    /// shared with the log entries (watchers) built from them: a put copies no value.
    pub latest: FastMap<Vec<u8>, Option<Arc<KeyValue>>>,
    /// Bytes of keys and values held in `latest`.
    pub latest_bytes: usize,
    /// Bytes of keys and values `latest` holds before it starts again from empty
    /// ([`latest_capacity`]).
    pub latest_capacity: usize,
}

/// What [`Writer::latest`] may hold for a page cache of `cache_capacity` bytes: a quarter of it,
/// at most 64 MiB, so that `--store-cache-mib` bounds both.
pub(crate) fn latest_capacity(cache_capacity: u64) -> usize {
    usize::try_from(cache_capacity / 4)
        .unwrap_or(usize::MAX)
        .min(64 << 20)
}

/// Transactions being gathered into one sled batch (`apply_batch` has a high fixed cost, so
/// the writer applies every transaction waiting at once). The batch is atomic on disk: a crash
/// keeps all of its transactions or none.
#[derive(Default)]
struct Group {
    batch: Batch,
    /// The newest state of every key written in this group (`None`: deleted).
    overlay: FastMap<Vec<u8>, Option<Arc<KeyValue>>>,
    /// Revisions written in this group, oldest first, per key under a per-prefix retention rule
    /// (the only keys whose versions are pruned).
    new_revs: FastMap<Vec<u8>, Vec<u64>>,
    /// (key, lease before, lease after) for every key written whose lease changed, in order,
    /// applied to the lease table once the batch is applied.
    lease_changes: Vec<(Vec<u8>, Option<u64>, Option<u64>)>,
    /// Watermarks raised by per-prefix pruning in this group.
    raised: BTreeMap<Vec<u8>, u64>,
    /// Whether anything was put into the batch.
    dirty: bool,
    /// The entries of this group's revisions (contiguous, oldest first) with their commit
    /// times in nanoseconds, written as one log record (each event names a key written).
    log: Vec<(u64, Arc<Entry>)>,
    /// The revision of `log[0]`.
    log_first: u64,
    /// Reused to encode each history record (sled copies it into a buffer of its own).
    scratch: Vec<u8>,
}

/// What one transaction produced.
struct Built {
    responses: Vec<OpResponse>,
    /// One per key written, in the order written (the log record lists the keys so).
    events: Vec<Change>,
}

impl Writer {
    /// Runs until every command sender is gone.
    pub fn run(mut self, mut commands: tokio::sync::mpsc::Receiver<Command>) {
        let mut txns = Vec::new();
        while let Some(first) = commands.blocking_recv() {
            let mut next = Some(first);
            // Gather every transaction waiting; any other command ends the group.
            while let Some(command) = next.take() {
                match command {
                    Command::Txn { txn, reply } => {
                        txns.push((txn, reply));
                        if txns.len() < MAX_GROUP {
                            next = commands.try_recv().ok();
                        }
                    }
                    other => {
                        self.txn_group(std::mem::take(&mut txns));
                        self.submit();
                        self.handle(other);
                        self.submit();
                    }
                }
            }
            self.txn_group(std::mem::take(&mut txns));
            self.submit();
        }
    }

    fn tree(&self) -> &sled::Tree {
        &self.shared.db
    }

    /// Queues an acknowledgement behind the batches queued so far.
    fn send(&mut self, applied: Applied) {
        self.work_items.push(applied);
    }

    /// Hands the queued batches and acknowledgements to the applier.
    fn submit(&mut self) {
        if self.work_batches.is_empty() && self.work_items.is_empty() {
            return;
        }
        let work = Work {
            batches: std::mem::take(&mut self.work_batches),
            items: std::mem::take(&mut self.work_items),
        };
        self.shared.inflight_add();
        if let Err(unsent) = self.out.send(work) {
            self.shared.inflight_done();
            for a in unsent.0.items {
                a.ack.fail(Error::Closed);
            }
        }
    }

    fn poison_error(&self) -> Option<Error> {
        self.shared.poison_error()
    }

    /// Runs a group of transactions as one batch.
    fn txn_group(&mut self, txns: Vec<(Txn, oneshot::Sender<Result<TxnResponse>>)>) {
        if txns.is_empty() {
            return;
        }
        if self.poison_error().is_some() {
            for (_, reply) in txns {
                drop(reply.send(Err(self.poison_error().expect("poisoned"))));
            }
            return;
        }
        let (start_rev, start_time) = (self.next_rev, self.last_time);
        let mut group = Group::default();
        let mut done = Vec::with_capacity(txns.len());
        // Measured once per group: writes resume as soon as space returns.
        let mut room = space::Room::measure(&self.shared.path, self.shared.config.disk_reserve);
        for (txn, reply) in txns {
            if let Some(room) = &mut room
                && let Err(e) = room.admit(space::txn_cost(&txn))
            {
                drop(reply.send(Err(e)));
                continue;
            }
            match self.txn(txn, &mut group) {
                Ok((response, entry)) => done.push((self.next_rev - 1, entry, reply, response)),
                // An expected refusal (unknown lease) touches nothing: only this one fails.
                Err(e @ Error::LeaseNotFound(_)) => drop(reply.send(Err(e))),
                Err(e) => {
                    // A read failed half-way through building: drop the whole group unapplied.
                    tracing::error!(error = %e, "building a batch failed; its transactions fail");
                    self.next_rev = start_rev;
                    self.last_time = start_time;
                    drop(reply.send(Err(e)));
                    for (_, _, reply, _) in done {
                        drop(reply.send(Err(Error::Io(std::io::Error::other(
                            "another transaction in the same batch failed; nothing was written",
                        )))));
                    }
                    return;
                }
            }
        }
        if let Err(e) = self.finish(group) {
            let message = e.to_string();
            for (_, _, reply, _) in done {
                drop(reply.send(Err(Error::Io(std::io::Error::other(message.clone())))));
            }
            return;
        }
        for (rev, entry, reply, response) in done {
            self.send(Applied {
                rev,
                entry,
                ack: Ack::Txn(reply, response),
            });
        }
    }

    /// Queues a group's batch for the applier and records its effects for the transactions
    /// that follow (newest versions, lease attachments): from here on the writer treats the
    /// group as written.
    fn finish(&mut self, mut group: Group) -> Result<()> {
        if !group.log.is_empty() {
            let last = group.log_first + group.log.len() as u64 - 1;
            let record = encode_log_group(
                group.log_first,
                group.log.iter().map(|(time, entry)| {
                    (
                        *time,
                        entry.tag.as_deref(),
                        entry.events.iter().map(|c| c.kv.key.as_slice()),
                    )
                }),
            );
            group.batch.insert(&log_key(last)[..], record);
            group.dirty = true;
        }
        // Lease attachments, in order (a key re-leased twice in a group ends on the last lease).
        for (key, before, after) in &group.lease_changes {
            if before != after {
                if let Some(l) = before {
                    group.batch.remove(attach_key(*l, key));
                }
                if let Some(l) = after {
                    group.batch.insert(attach_key(*l, key), &[][..]);
                }
            }
        }
        for (prefix, mark) in &group.raised {
            group
                .batch
                .insert(keys::watermark_key(prefix), &mark.to_be_bytes()[..]);
        }
        if group.dirty {
            self.apply(group.batch)?;
        }
        for (key, state) in group.overlay {
            let size = key.len() + state.as_ref().map_or(0, |kv| kv.value.len()) + 64;
            // Keys of groups not yet applied must stay: sled does not have them yet.
            if self.latest_bytes + size > self.latest_capacity && self.shared.inflight() == 0 {
                self.latest.clear();
                self.latest_bytes = 0;
            }
            self.latest_bytes += size;
            if let Some(old) = self.latest.insert(key, state) {
                let old_size = old.as_ref().map_or(0, |kv| kv.key.len() + kv.value.len()) + 64;
                self.latest_bytes = self.latest_bytes.saturating_sub(old_size);
            }
        }
        let mut table = self.shared.leases.lock().expect("lease table poisoned");
        for (key, before, after) in group.lease_changes {
            if before != after {
                if let Some(l) = before
                    && let Some(state) = table.leases.get_mut(&l)
                {
                    state.keys.remove(&key);
                }
                if let Some(l) = after
                    && let Some(state) = table.leases.get_mut(&l)
                {
                    state.keys.insert(key);
                }
            }
        }
        Ok(())
    }

    fn handle(&mut self, command: Command) {
        if let Some(err) = self.poison_error() {
            match command {
                Command::Txn { reply, .. } => drop(reply.send(Err(err))),
                Command::Grant { reply, .. } => drop(reply.send(Err(err))),
                Command::Revoke { reply, .. } => {
                    if let Some(reply) = reply {
                        drop(reply.send(Err(err)));
                    }
                }
                Command::Snapshot { reply } => drop(reply.send(Err(err))),
            }
            return;
        }
        match command {
            Command::Txn { txn, reply } => self.txn_group(vec![(txn, reply)]),
            Command::Grant { ttl, reply } => match self.grant(ttl) {
                Ok(lease) => self.send(Applied {
                    rev: self.next_rev - 1,
                    entry: None,
                    ack: Ack::Grant(reply, lease),
                }),
                Err(e) => drop(reply.send(Err(e))),
            },
            Command::Revoke {
                id,
                expired_only,
                reply,
            } => match self.revoke(id, expired_only) {
                Ok((rev, entry)) => self.send(Applied {
                    rev: self.next_rev - 1,
                    entry,
                    ack: Ack::Revoke(reply, rev),
                }),
                Err(e) => {
                    if let Some(reply) = reply {
                        drop(reply.send(Err(e)));
                    }
                }
            },
            Command::Snapshot { reply } => {
                self.shared.snapshots.fetch_add(1, Ordering::SeqCst);
                let capture = Capture {
                    revision: self.next_rev - 1,
                    leases: {
                        let table = self.shared.leases.lock().expect("lease table poisoned");
                        table
                            .leases
                            .iter()
                            .map(|(id, l)| (*id, l.ttl.as_millis() as u64))
                            .collect()
                    },
                    lease_next: self.lease_next,
                };
                self.send(Applied {
                    rev: self.next_rev - 1,
                    entry: None,
                    ack: Ack::Snapshot(reply, capture),
                });
            }
        }
    }

    /// Queues a batch for the applier (see [`run_applier`]).
    fn apply(&mut self, batch: Batch) -> Result<()> {
        self.work_batches.push(batch);
        Ok(())
    }

    /// The newest state of `key`, including the group's earlier writes.
    fn current(&self, key: &[u8], group: &Group) -> Result<Option<Arc<KeyValue>>> {
        if let Some(state) = group.overlay.get(key) {
            return Ok(state.clone());
        }
        if let Some(state) = self.latest.get(key) {
            return Ok(state.clone());
        }
        Ok(read::version_at(self.tree(), key, u64::MAX)?
            .and_then(|(rev, rec)| read::record_kv(key, rev, &rec, false))
            .map(Arc::new))
    }

    /// The newest state of every key in `range`, including the group's earlier writes.
    fn current_range(
        &self,
        range: &KeyRange,
        group: &Group,
    ) -> Result<BTreeMap<Vec<u8>, Arc<KeyValue>>> {
        let mut out = BTreeMap::new();
        if matches!(range.end, RangeEnd::Single) {
            if let Some(kv) = self.current(&range.start, group)? {
                out.insert(range.start.clone(), kv);
            }
            return Ok(out);
        }
        // A scan of sled must see the groups handed to the applier: wait for them.
        self.shared.wait_applied();
        read::for_each_at(self.tree(), range, u64::MAX, |key, rev, rec| {
            if !group.overlay.contains_key(&key) {
                let kv = read::record_kv(&key, rev, &rec, false).expect("not a tombstone");
                out.insert(key, Arc::new(kv));
            }
            Ok(true)
        })?;
        for (key, state) in &group.overlay {
            if let Some(kv) = state
                && range.contains(key)
            {
                out.insert(key.clone(), kv.clone());
            }
        }
        Ok(out)
    }

    fn compare(&self, compare: &Compare, group: &Group) -> Result<bool> {
        let kv = self.current(&compare.key, group)?;
        let ordering = match &compare.target {
            CompareTarget::Value(v) => match &kv {
                Some(kv) => kv.value.as_slice().cmp(v.as_slice()),
                None => return Ok(false),
            },
            CompareTarget::Version(v) => kv.as_ref().map_or(0, |kv| kv.version).cmp(v),
            CompareTarget::CreateRevision(r) => kv
                .as_ref()
                .map_or(Revision::ZERO, |kv| kv.create_revision)
                .cmp(r),
            CompareTarget::ModRevision(r) => kv
                .as_ref()
                .map_or(Revision::ZERO, |kv| kv.mod_revision)
                .cmp(r),
        };
        Ok(match compare.op {
            CompareOp::Equal => ordering.is_eq(),
            CompareOp::NotEqual => ordering.is_ne(),
            CompareOp::Greater => ordering.is_gt(),
            CompareOp::Less => ordering.is_lt(),
        })
    }

    /// Records a new version of `key` at `rev` in the group: `state` is the key-value it
    /// creates, `None` for a delete.
    fn write_version(
        &self,
        group: &mut Group,
        key: &[u8],
        rev: u64,
        time: u64,
        state: Option<Arc<KeyValue>>,
        lease_before: Option<u64>,
    ) {
        match &state {
            Some(kv) => HistRecord::encode_parts_into(
                &mut group.scratch,
                time,
                kv.create_revision.0,
                kv.version,
                kv.lease.map(|l| l.0),
                Some(&kv.value),
            ),
            None => HistRecord::encode_parts_into(&mut group.scratch, time, 0, 0, None, None),
        }
        group
            .batch
            .insert(hist_key(key, rev), group.scratch.as_slice());
        group.dirty = true;
        let lease_after = state.as_ref().and_then(|kv| kv.lease.map(|l| l.0));
        if lease_before != lease_after {
            group
                .lease_changes
                .push((key.to_vec(), lease_before, lease_after));
        }
        if self.shared.retention_for(key).is_some() {
            group.new_revs.entry(key.to_vec()).or_default().push(rev);
        }
        match group.overlay.get_mut(key) {
            Some(slot) => *slot = state,
            None => {
                group.overlay.insert(key.to_vec(), state);
            }
        }
    }

    /// Builds the writes of `ops` at revision `rev` into the group.
    fn build(&self, ops: Vec<Op>, rev: u64, time: u64, group: &mut Group) -> Result<Built> {
        let mut built = Built {
            responses: Vec::with_capacity(ops.len()),
            events: Vec::with_capacity(ops.len()),
        };
        for op in ops {
            match op {
                Op::Put {
                    key,
                    value,
                    lease,
                    prev_kv,
                } => {
                    let prev = self.current(&key, group)?;
                    let (create, version) = match &prev {
                        Some(p) => (p.create_revision.0, p.version + 1),
                        None => (rev, 1),
                    };
                    let kv = Arc::new(KeyValue {
                        key,
                        value,
                        create_revision: Revision(create),
                        mod_revision: Revision(rev),
                        version,
                        lease,
                    });
                    let lease_before = prev.as_ref().and_then(|p| p.lease.map(|l| l.0));
                    self.write_version(group, &kv.key, rev, time, Some(kv.clone()), lease_before);
                    built.responses.push(OpResponse::Put {
                        prev_kv: if prev_kv {
                            prev.as_deref().cloned()
                        } else {
                            None
                        },
                    });
                    built.events.push(Change {
                        kind: EventKind::Put,
                        kv,
                        prev_kv: prev,
                    });
                }
                Op::Delete { range, prev_kv } => {
                    let live = self.current_range(&range, group)?;
                    for (key, kv) in &live {
                        self.write_version(group, key, rev, time, None, kv.lease.map(|l| l.0));
                        built.events.push(Change {
                            kind: EventKind::Delete,
                            kv: Arc::new(read::tombstone_kv(key, rev)),
                            prev_kv: Some(kv.clone()),
                        });
                    }
                    let deleted = live.len() as u64;
                    built.responses.push(OpResponse::Delete {
                        deleted,
                        prev_kvs: if prev_kv {
                            live.into_values().map(Arc::unwrap_or_clone).collect()
                        } else {
                            Vec::new()
                        },
                    });
                }
                Op::Range(request) => {
                    let all = self.current_range(&request.range, group)?;
                    let limit = request.limit.filter(|&l| l > 0).unwrap_or(usize::MAX);
                    let count = all.len() as u64;
                    let more = all.len() > limit;
                    let kvs = all
                        .into_values()
                        .take(limit)
                        .map(|kv| {
                            if request.keys_only {
                                KeyValue {
                                    key: kv.key.clone(),
                                    value: Vec::new(),
                                    ..*kv
                                }
                            } else {
                                Arc::unwrap_or_clone(kv)
                            }
                        })
                        .collect();
                    built.responses.push(OpResponse::Range(RangeResponse {
                        kvs,
                        more,
                        count: request.count.then_some(count),
                        // Set once the transaction's revision is known.
                        revision: Revision::ZERO,
                    }));
                }
            }
        }
        Ok(built)
    }

    /// Completes a built transaction at `rev` if it wrote anything: prunes, logs, and returns
    /// its entry.
    fn commit(
        &mut self,
        built: Built,
        rev: u64,
        time: u64,
        tag: Option<&[u8]>,
        group: &mut Group,
    ) -> Result<Option<Arc<Entry>>> {
        if built.events.is_empty() {
            return Ok(None);
        }
        if !self.shared.config.prefix_retention.is_empty() {
            for change in &built.events {
                self.prune_versions(&change.kv.key, group)?;
            }
        }
        if group.log.is_empty() {
            group.log_first = rev;
        }
        assert_eq!(
            group.log_first + group.log.len() as u64,
            rev,
            "the revisions of a group must be contiguous"
        );
        let entry = Arc::new(Entry {
            revision: rev,
            tag: tag.map(<[u8]>::to_vec),
            events: built.events,
        });
        group.log.push((time, entry.clone()));
        group.dirty = true;
        self.next_rev = rev + 1;
        self.last_time = time;
        Ok(Some(entry))
    }

    /// Per-prefix retention: drops versions of `key` beyond its prefix's limit, but only those
    /// whose successor is durable, so a reader at the durable revision never needs a pruned one.
    /// Pruned versions are always a key's oldest, so what remains is a contiguous run of its
    /// newest versions.
    fn prune_versions(&self, key: &[u8], group: &mut Group) -> Result<()> {
        let Some(rule) = self.shared.retention_for(key) else {
            return Ok(());
        };
        if self.shared.snapshots.load(Ordering::SeqCst) > 0 {
            return Ok(());
        }
        let durable = self.shared.durable();
        // Newest first: this group's versions, then those already in the tree.
        let mut revs: Vec<u64> = group
            .new_revs
            .get(key)
            .into_iter()
            .flatten()
            .rev()
            .copied()
            .collect();
        let in_group = revs.len();
        for item in self
            .tree()
            .range(hist_key_start(key)..hist_key_end(key))
            .keys()
            .rev()
        {
            revs.push(keys::hist_key_rev(&item.map_err(read::sled_err)?));
        }
        let keep = (rule.max_versions.max(1) as usize).max(in_group);
        let mut mark = 0;
        for i in keep..revs.len() {
            let successor = revs[i - 1];
            if successor <= durable {
                group.batch.remove(hist_key(key, revs[i]));
                mark = mark.max(successor);
            }
        }
        if mark > 0 {
            // Readers must see a raised watermark before the pruned versions disappear.
            let mut marks = self.shared.watermarks.write().expect("watermarks poisoned");
            let current = marks.entry(rule.prefix.clone()).or_insert(0);
            if mark > *current {
                *current = mark;
                group.raised.insert(rule.prefix.clone(), mark);
            }
        }
        Ok(())
    }

    fn txn(&mut self, txn: Txn, group: &mut Group) -> Result<(TxnResponse, Option<Arc<Entry>>)> {
        let mut succeeded = true;
        for compare in &txn.compare {
            if !self.compare(compare, group)? {
                succeeded = false;
                break;
            }
        }
        let tag = txn.stored_tag().map(<[u8]>::to_vec);
        let ops = if succeeded { txn.success } else { txn.failure };
        {
            let table = self.shared.leases.lock().expect("lease table poisoned");
            for op in &ops {
                if let Op::Put {
                    lease: Some(id), ..
                } = op
                    && !table.leases.contains_key(&id.0)
                {
                    return Err(Error::LeaseNotFound(*id));
                }
            }
        }
        let rev = self.next_rev;
        let time = now_nanos().max(self.last_time);
        let mut built = self.build(ops, rev, time, group)?;
        let wrote = !built.events.is_empty();
        let revision = Revision(if wrote { rev } else { rev - 1 });
        let responses = std::mem::take(&mut built.responses)
            .into_iter()
            .map(|mut response| {
                if let OpResponse::Range(r) = &mut response {
                    r.revision = revision;
                }
                response
            })
            .collect();
        let entry = self.commit(built, rev, time, tag.as_deref(), group)?;
        Ok((
            TxnResponse {
                succeeded,
                revision,
                responses,
            },
            entry,
        ))
    }

    fn grant(&mut self, ttl: Duration) -> Result<Lease> {
        let id = self.lease_next;
        let mut batch = Batch::default();
        batch.insert(lease_key(id), &(ttl.as_millis() as u64).to_be_bytes()[..]);
        batch.insert(keys::META_LEASE_NEXT, &(id + 1).to_be_bytes()[..]);
        self.apply(batch)?;
        self.lease_next = id + 1;
        self.shared
            .leases
            .lock()
            .expect("lease table poisoned")
            .leases
            .insert(
                id,
                LeaseState {
                    ttl,
                    deadline: Instant::now() + ttl,
                    keys: BTreeSet::new(),
                },
            );
        self.shared.wake_maintenance();
        Ok(Lease {
            id: LeaseId(id),
            ttl,
            remaining: ttl,
        })
    }

    fn revoke(
        &mut self,
        id: LeaseId,
        expired_only: bool,
    ) -> Result<(Revision, Option<Arc<Entry>>)> {
        let keys = {
            let table = self.shared.leases.lock().expect("lease table poisoned");
            let Some(state) = table.leases.get(&id.0) else {
                return Err(Error::LeaseNotFound(id));
            };
            if expired_only && state.deadline > Instant::now() {
                return Ok((Revision(self.next_rev - 1), None));
            }
            state.keys.clone()
        };
        let mut group = Group::default();
        group.batch.remove(lease_key(id.0));
        group.dirty = true;
        let mut ops = Vec::new();
        for key in keys {
            group.batch.remove(attach_key(id.0, &key));
            // Only keys still attached to this lease (the table says so; check the log too).
            if let Some(kv) = self.current(&key, &group)?
                && kv.lease == Some(id)
            {
                ops.push(Op::Delete {
                    range: KeyRange::key(key),
                    prev_kv: false,
                });
            }
        }
        let rev = self.next_rev;
        let time = now_nanos().max(self.last_time);
        let built = self.build(ops, rev, time, &mut group)?;
        let entry = self.commit(built, rev, time, None, &mut group)?;
        if let Err(e) = self.finish(group) {
            self.next_rev = rev;
            return Err(e);
        }
        self.shared
            .leases
            .lock()
            .expect("lease table poisoned")
            .leases
            .remove(&id.0);
        let revision = if entry.is_some() { rev } else { rev - 1 };
        Ok((Revision(revision), entry))
    }
}

/// What the writer hands the applier: batches to apply in order, then the acknowledgements they
/// carry (forwarded to the flusher once applied).
pub(crate) struct Work {
    batches: Vec<Batch>,
    items: Vec<Applied>,
}

/// Writes for sled, in order. Unlike a `sled::Batch`, these can be merged: the applier applies
/// every batch waiting for it as one `sled::Batch`, since each `apply_batch` costs sled two rolls
/// of its I/O buffer (written out, by its I/O threads, however little they hold). A later write
/// of a key replaces an earlier one, as applying the batches one after the other would.
#[derive(Default)]
pub(crate) struct Batch {
    writes: Vec<(sled::IVec, Option<sled::IVec>)>,
}

impl Batch {
    /// Sets `key` to `value`.
    fn insert(&mut self, key: impl Into<sled::IVec>, value: impl Into<sled::IVec>) {
        self.writes.push((key.into(), Some(value.into())));
    }

    /// Removes `key`.
    fn remove(&mut self, key: impl Into<sled::IVec>) {
        self.writes.push((key.into(), None));
    }

    /// One sled batch doing what `batches` do applied in order, and how many writes they hold.
    fn merge(batches: Vec<Batch>) -> (sled::Batch, usize) {
        let mut merged = sled::Batch::default();
        let mut writes = 0;
        for (key, value) in batches.into_iter().flat_map(|b| b.writes) {
            writes += 1;
            match value {
                Some(value) => merged.insert(key, value),
                None => merged.remove(key),
            }
        }
        (merged, writes)
    }
}

/// The applier thread: applies the writer's batches in order while the writer builds the next
/// group, then passes their acknowledgements to the flusher (all of a group's in one message).
/// A batch that fails to apply poisons the store: sled may hold part of it in memory, so nothing
/// more is written until the store is reopened (recovery drops an unsealed batch; `recover.rs`
/// reopens it).
pub(crate) fn run_applier(
    shared: Arc<Shared>,
    work: std::sync::mpsc::Receiver<Work>,
    out: std::sync::mpsc::Sender<Vec<Applied>>,
) {
    while let Ok(first) = work.recv() {
        // Everything the writer queued meanwhile goes into the same sled batch.
        let mut works = 1;
        let Work {
            mut batches,
            mut items,
        } = first;
        while let Ok(more) = work.try_recv() {
            works += 1;
            batches.extend(more.batches);
            items.extend(more.items);
        }
        let (merged, writes) = Batch::merge(batches);
        metrics::histogram!("skiff_log_commit_batch_size").record(items.len() as f64);
        let mut failed = shared.poison_error().is_some();
        if !failed
            && writes > 0
            && let Err(e) = shared.db.apply_batch(merged)
        {
            tracing::error!(error = %e, "applying a batch failed; refusing further writes until reopened");
            shared.poison(e);
            failed = true;
        }
        if failed {
            for applied in items {
                applied
                    .ack
                    .fail(shared.poison_error().unwrap_or(Error::Closed));
            }
        } else if !items.is_empty()
            && let Err(unsent) = out.send(items)
        {
            for applied in unsent.0 {
                applied.ack.fail(Error::Closed);
            }
        }
        for _ in 0..works {
            shared.inflight_done();
        }
    }
}

/// The flusher thread: group commit. Each round takes everything applied since the last flush,
/// flushes once, then publishes and acknowledges.
pub(crate) fn run_flusher(
    shared: Arc<Shared>,
    applied: std::sync::mpsc::Receiver<Vec<Applied>>,
    mut mark: Option<super::mark::Mark>,
) {
    // Entries applied but not yet known durable (a failed flush leaves them here; a later
    // successful flush covers them, since sled flushes everything written before it).
    let mut unpublished: Vec<Arc<Entry>> = Vec::new();
    while let Ok(mut group) = applied.recv() {
        while let Ok(more) = applied.try_recv() {
            group.extend(more);
        }
        let last_rev = group.last().map(|a| a.rev).unwrap_or(0);
        unpublished.extend(group.iter().filter_map(|a| a.entry.clone()));
        let flushed = shared.db.flush().and_then(|_| match &shared.data_file {
            Some(file) => file.sync_data().map_err(sled::Error::Io),
            None => Ok(()),
        });
        match flushed {
            Ok(_) => {
                let entries = std::mem::take(&mut unpublished);
                shared.publish(&entries, last_rev);
                if let Some(mark) = &mut mark
                    && let Err(e) = mark.note(shared.durable.load(Ordering::SeqCst))
                {
                    tracing::warn!(error = %e, "cannot record the durable mark");
                }
                shared.stats.flushes.fetch_add(1, Ordering::Relaxed);
                shared
                    .stats
                    .commits
                    .fetch_add(group.len() as u64, Ordering::Relaxed);
                for a in group {
                    a.ack.succeed();
                }
                shared.dispatch(&entries);
            }
            Err(e) => {
                // The writes were applied: sled may have put some of them on disk before it
                // failed, and reopening keeps those. So their outcome is unknown, which is not
                // what `Error::NoSpace` ("not applied") says, even when the disk is full.
                tracing::error!(error = %e, "flush failed; the writes waiting for it are not acknowledged");
                let message = format!(
                    "the log could not be flushed to disk ({e}); the write may or may not have \
                     been applied"
                );
                shared.poison(e);
                for a in group {
                    a.ack
                        .fail(Error::Io(std::io::Error::other(message.clone())));
                }
            }
        }
    }
    // Closing: everything durable is marked.
    if let Some(mark) = &mut mark
        && let Err(e) = mark.write(shared.durable.load(Ordering::SeqCst))
    {
        tracing::warn!(error = %e, "cannot record the durable mark at close");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_versions_held_follow_the_page_cache() {
        assert_eq!(latest_capacity(256 << 20), 64 << 20);
        assert_eq!(latest_capacity(32 << 20), 8 << 20);
        assert_eq!(latest_capacity(1 << 40), 64 << 20);
        assert_eq!(latest_capacity(0), 0);
    }

    #[test]
    fn merged_batches_end_as_the_batches_applied_in_order() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        db.insert("gone", "x").unwrap();
        db.insert("kept", "x").unwrap();
        let mut first = Batch::default();
        first.insert("a", "1");
        first.insert("b", "1");
        first.remove("gone");
        let mut second = Batch::default();
        second.remove("a");
        second.insert("b", "2");
        second.insert("gone", "back");
        let mut third = Batch::default();
        third.insert("a", "3");
        third.insert("c", "3");
        let (merged, writes) = Batch::merge(vec![first, second, third]);
        assert_eq!(writes, 8);
        db.apply_batch(merged).unwrap();
        let all: Vec<(Vec<u8>, Vec<u8>)> = db
            .iter()
            .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
            .collect();
        let expected: Vec<(Vec<u8>, Vec<u8>)> = [
            ("a", "3"),
            ("b", "2"),
            ("c", "3"),
            ("gone", "back"),
            ("kept", "x"),
        ]
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        assert_eq!(all, expected);
        let (empty, writes) = Batch::merge(vec![Batch::default()]);
        assert_eq!(writes, 0);
        db.apply_batch(empty).unwrap();
        assert_eq!(db.len(), 5);
    }
}

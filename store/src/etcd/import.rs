//! Migration between the embedded log and an etcd prefix: loading an archive into an empty
//! prefix ([`Importer`], behind `skiff import FILE --datastore-endpoint ..`), and what an etcd
//! prefix adds to an archive (its live leases, its commit times) for `skiff export
//! --datastore-endpoint ..` (see [`crate::archive`] for the file and the way back into a data
//! dir).
//!
//! # Into etcd: revisions renumbered, times and tags kept
//! etcd gives every txn its next revision, so an archive's revisions cannot be kept: each is
//! written as one etcd txn (or a few, see below) and lands on whatever revision etcd is at.
//! What is kept is the order and the time:
//!
//! ```text
//!  archive:  base (state at first-1)        entries first ..= last
//!            m=3 a,b   m=7 c   m=9 d         10    11    12 ..
//!  etcd:     txn        txn     txn          txn   txn   txn          (other prefixes' writes
//!            E+1        E+2     E+3          E+4   E+5   E+7           may come in between: E+6)
//!  clock:    t(3)       t(7)    t(9)         t(10) t(11) t(12)
//! ```
//!
//! - **The base** (every key as it was at `first - 1`) is written in the order of its
//!   versions' revisions, one txn per source revision, with that revision's commit time in the
//!   clock key: a version's time stays its own, and `revision_at` keeps finding it. A key of the
//!   base is created by that one put, so on etcd its create revision is its mod revision and its
//!   version is 1 (its earlier versions are compacted in the source and cannot be replayed).
//! - **Every entry** is one etcd txn with its events (puts with their values and leases,
//!   deletes), its commit time and its tag in the clock key. So a source revision `r` maps to
//!   one etcd revision `e(r)`, strictly increasing with `r`, and for keys created inside the
//!   window create revisions, versions and the order of every change are as in the source.
//! - **Size.** etcd refuses a txn of more than `--max-txn-ops` ops (128 by default) or
//!   `--max-request-bytes`: a base revision or an entry with more than [`MAX_OPS`] changes (the
//!   clock takes one op), or more bytes than the configured request limit, is split over
//!   several txns that carry the same time and tag. Its changes then land on consecutive etcd
//!   revisions instead of one; `e(r)` is the last of them. One value over the limit is an error.
//! - **Times.** `--at 10:42` reads the state that was current at 10:42 in the source:
//!   `revision_at` binary-searches the clock, which holds the source's times in the source's
//!   order. `--at <revision>` takes etcd revisions: the import prints `e(first)` and `e(last)`
//!   (see [`Mapping`]). Before the archive's first time, etcd answers with the prefix as it was
//!   before the import (empty) where the source says the history is compacted.
//! - **Versions pruned by per-prefix retention** in the source (carried as their keys only) have
//!   no value to write: they are skipped, so etcd's history lacks them. Reads at revisions
//!   before such a prefix's watermark, which the source refuses as compacted, answer on etcd
//!   without those versions (a key shows its previous written version, or is absent); from the
//!   watermark on every read is as in the source. etcd has no per-prefix watermarks to carry.
//! - **Leases.** Each lease of the archive becomes a new etcd lease (etcd picks the id; lease
//!   ids are global to an etcd shared by several prefixes) of the same TTL in whole seconds,
//!   and keys are put attached to theirs. The leases are kept alive while the import runs and
//!   once more at its end, so, as after any restore, their expiry counts from the end of the
//!   import. A key attached to a lease the archive does not carry (it ended after the window)
//!   is attached to a lease granted for the import and revoked at its end: it is deleted, in a
//!   revision after the import's last, as it was in the source.
//!
//! The prefix must hold nothing but skiff's ownership marker ([`EtcdStore::importer`] refuses
//! anything else with [`Error::PrefixNotEmpty`], writing nothing). Every import txn compares the
//! clock key's mod revision with the last one it wrote, so a server started on the prefix while
//! the import runs stops it rather than interleaving. A failed import deletes the whole prefix
//! and revokes the leases it granted ([`Importer::abort`]): the prefix ends empty.
//!
//! # Out of etcd
//! An etcd prefix's revisions have gaps (other prefixes' writes, etcd's own); the archive keeps
//! them as they are and says so, and the data dir's importer renumbers them densely (see
//! [`crate::archive`]). Its leases are etcd's live leases that hold a key of the prefix
//! ([`EtcdStore::live_leases`]), and the base versions' times come from the clock key
//! ([`EtcdStore::commit_time`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_client as ec;

use super::keys::{Layout, encode_clock};
use super::{EtcdStore, Inner, Kind, classify, failure, nanos, time};
use crate::archive::Item;
use crate::error::{Error, Result};
use crate::types::{EventKind, KeyRange, KeyValue, LeaseId, Revision};

/// Changes per etcd txn: etcd's default `--max-txn-ops` is 128, and every txn also puts the
/// clock key.
pub const MAX_OPS: usize = 127;

/// Bytes an op takes in etcd's request beyond its key and value (field tags, lengths, lease),
/// counted generously.
const OP_OVERHEAD: usize = 64;

/// Bytes a txn takes beyond its ops: the compare, the clock put and its tag (at most
/// [`MAX_TAG`](crate::MAX_TAG)).
const TXN_OVERHEAD: usize = 2048;

/// The TTL of a lease granted for keys whose lease ended in the source (revoked at the end of
/// the import, so its length only has to outlast the import between keep-alives).
const ENDED_TTL: i64 = 600;

/// Where an imported archive's revisions went on etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mapping {
    /// The archive's first entry's revision, and the etcd revision it was written at.
    pub source_first: Revision,
    /// The etcd revision of the first entry.
    pub etcd_first: Revision,
    /// The archive's last entry's revision.
    pub source_last: Revision,
    /// The etcd revision of the last entry (the last of its txns if it was split).
    pub etcd_last: Revision,
    /// Base versions written.
    pub base: u64,
    /// The etcd txns the base took.
    pub base_txns: u64,
    /// Entries written.
    pub entries: u64,
    /// The etcd txns the entries took (more than `entries` where one was split).
    pub entry_txns: u64,
    /// Versions pruned by per-prefix retention in the source, skipped.
    pub pruned: u64,
    /// Leases of the archive created on etcd.
    pub leases: u64,
}

/// What an archive must satisfy before anything is written to a prefix: every key storable
/// there and every change within the request limit. `Send`, for the thread that reads the file.
#[derive(Debug, Clone)]
pub struct ImportCheck {
    layout: Layout,
    max_request_bytes: usize,
}

impl ImportCheck {
    /// Checks one item of the archive.
    pub fn item(&self, item: &Item) -> Result<()> {
        match item {
            Item::Base(kv, _) => self.kv(kv),
            Item::Entry(entry, pruned) => entry
                .events
                .iter()
                .enumerate()
                .filter(|(i, e)| e.kind == EventKind::Put && !pruned.contains(i))
                .try_for_each(|(_, e)| self.kv(&e.kv)),
            Item::Watermark(..) | Item::Lease(..) | Item::Gaps => Ok(()),
        }
    }

    fn kv(&self, kv: &KeyValue) -> Result<()> {
        let key = self.layout.key(&kv.key)?;
        let size = key.len() + kv.value.len();
        if size > self.max_request_bytes {
            return Err(Error::ValueTooLarge {
                size,
                limit: self.max_request_bytes,
            });
        }
        Ok(())
    }
}

/// Loads an archive's items, in order, into an empty etcd prefix; see the module docs. Made by
/// [`EtcdStore::importer`]; ends with [`Importer::finish`] or, on any error, [`Importer::abort`].
pub struct Importer {
    inner: Arc<Inner>,
    /// The archive's leases: source id → etcd id.
    leases: HashMap<u64, i64>,
    /// Leases granted for keys whose source lease had ended (revoked at the end).
    ended: Vec<i64>,
    /// Every lease granted here, for keep-alives and for abort.
    granted: Vec<i64>,
    /// When the leases were last kept alive, and how often they must be.
    kept_alive: Instant,
    keep_every: Duration,
    /// The base, held until the first entry: it is written in revision order.
    base: Vec<(KeyValue, SystemTime)>,
    /// Whether the base has been written (the first entry came).
    started: bool,
    /// The clock key's mod revision after the last txn written here (0: none yet).
    clock: u64,
    mapping: Mapping,
}

/// One change as sent, with its size for the request limit.
struct Change {
    op: ec::TxnOp,
    size: usize,
}

impl EtcdStore {
    /// Starts an import into this store's prefix, which must hold nothing but skiff's
    /// ownership marker: a prefix that holds a cluster (or anything else) is
    /// [`Error::PrefixNotEmpty`], and nothing is written.
    pub async fn importer(&self) -> Result<Importer> {
        let inner = &self.inner;
        inner.check_open()?;
        let whole = inner.layout.whole();
        let marker = inner.layout.marker_key();
        let found = inner
            .get(
                ec::GetOptions::new()
                    .with_keys_only()
                    .with_range(whole.end.clone())
                    .with_limit(2),
                whole.start.clone(),
            )
            .await?;
        let marked = found.kvs().iter().any(|kv| kv.key() == marker.as_slice());
        let others = found.count().max(0) as u64 - u64::from(marked);
        if let Some(first) = found.kvs().iter().find(|kv| kv.key() != marker.as_slice()) {
            return Err(Error::PrefixNotEmpty {
                prefix: inner.layout.prefix().to_vec(),
                found: format!(
                    "it holds {others} key{} besides skiff's marker (the first: {:?})",
                    if others == 1 { "" } else { "s" },
                    String::from_utf8_lossy(first.key())
                ),
            });
        }
        Ok(Importer {
            inner: inner.clone(),
            leases: HashMap::new(),
            ended: Vec::new(),
            granted: Vec::new(),
            kept_alive: Instant::now(),
            keep_every: Duration::MAX,
            base: Vec::new(),
            started: false,
            clock: 0,
            mapping: Mapping::default(),
        })
    }

    /// The checks an archive must pass before [`EtcdStore::importer`]'s import writes any of it.
    pub fn import_check(&self) -> ImportCheck {
        ImportCheck {
            layout: self.inner.layout.clone(),
            max_request_bytes: self.inner.config.max_request_bytes,
        }
    }

    /// etcd's live leases that hold at least one key of this prefix, each with its TTL as
    /// granted (for an archive: [`Store::leases`](crate::Store::leases) knows only the leases
    /// granted through this handle, and etcd's list spans every prefix sharing it).
    pub async fn live_leases(&self) -> Result<Vec<(LeaseId, Duration)>> {
        let inner = &self.inner;
        inner.check_open()?;
        let list = inner
            .read("lease list", || {
                let mut client = inner.client.lease_client();
                async move { client.leases().await }
            })
            .await?;
        let ours = inner
            .layout
            .range(&KeyRange::from(Vec::new()))
            .expect("the whole store range is not empty");
        let mut out = Vec::new();
        for lease in list.leases() {
            let id = lease.id();
            let status = inner
                .read("lease time-to-live", || {
                    let mut client = inner.client.lease_client();
                    async move {
                        client
                            .time_to_live(id, Some(ec::LeaseTimeToLiveOptions::new().with_keys()))
                            .await
                    }
                })
                .await?;
            let holds_ours = status.keys().iter().any(|k| {
                k.as_slice() >= ours.start.as_slice()
                    && (ours.end == [0] || k.as_slice() < ours.end.as_slice())
            });
            if status.ttl() > 0 && holds_ours {
                out.push((
                    LeaseId(id as u64),
                    Duration::from_secs(status.granted_ttl().max(0) as u64),
                ));
            }
        }
        out.sort();
        Ok(out)
    }

    /// The prefix every key lives under.
    pub fn prefix(&self) -> &[u8] {
        self.inner.layout.prefix()
    }

    /// The commit time of `revision` (the clock key's value there; for a revision etcd wrote
    /// itself, the time of the skiff write before it), or `None` where none is kept.
    pub async fn commit_time(&self, revision: Revision) -> Result<Option<SystemTime>> {
        self.inner.check_open()?;
        Ok(self.inner.clock_at(revision.0).await?.map(time))
    }
}

impl Importer {
    /// Writes one item of the archive (items in the archive's order).
    pub async fn item(&mut self, item: Item) -> Result<()> {
        match item {
            // No per-prefix retention on etcd (see the module docs), and etcd numbers anew.
            Item::Watermark(..) | Item::Gaps => Ok(()),
            Item::Lease(id, ttl) => {
                let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
                let etcd_id = self.grant(secs.max(1) as i64).await?;
                self.leases.insert(id.0, etcd_id);
                self.mapping.leases += 1;
                Ok(())
            }
            Item::Base(kv, time) => {
                if self.started {
                    return Err(Error::Corrupt {
                        path: "<archive>".into(),
                        reason: "a base version after the first entry".into(),
                    });
                }
                self.base.push((kv, time));
                Ok(())
            }
            Item::Entry(entry, pruned) => {
                self.write_base().await?;
                let mut changes = Vec::with_capacity(entry.events.len());
                for (i, event) in entry.events.iter().enumerate() {
                    if pruned.contains(&i) {
                        self.mapping.pruned += 1;
                        continue;
                    }
                    changes.push(match event.kind {
                        EventKind::Put => self.put(&event.kv).await?,
                        EventKind::Delete => {
                            let key = self.inner.layout.key(&event.kv.key)?;
                            Change {
                                size: key.len(),
                                op: ec::TxnOp::delete(key, None),
                            }
                        }
                    });
                }
                let (first, last, txns) = self
                    .write(changes, nanos(entry.time), entry.tag.as_deref())
                    .await?;
                let m = &mut self.mapping;
                if m.entries == 0 {
                    m.source_first = entry.revision;
                    m.etcd_first = Revision(first);
                }
                m.source_last = entry.revision;
                m.etcd_last = Revision(last);
                m.entries += 1;
                m.entry_txns += txns;
                self.keep_alive_if_due().await
            }
        }
    }

    /// Ends the import: the leases are kept alive once more (their expiry counts from now) and
    /// those granted for ended leases are revoked. Returns where the revisions went.
    pub async fn finish(&mut self) -> Result<Mapping> {
        self.write_base().await?;
        let carried: Vec<i64> = self.leases.values().copied().collect();
        for id in carried {
            self.keep_alive(id).await?;
        }
        for id in std::mem::take(&mut self.ended) {
            self.revoke(id).await?;
        }
        Ok(self.mapping)
    }

    /// Removes everything the import wrote: deletes the whole prefix (the marker included) and
    /// revokes the leases it granted. `Err` says why that failed.
    pub async fn abort(&mut self) -> std::result::Result<(), String> {
        let inner = &self.inner;
        let whole = inner.layout.whole();
        let mut kv = inner.kv_client();
        let delete = kv.delete(
            whole.start.clone(),
            Some(ec::DeleteOptions::new().with_range(whole.end.clone())),
        );
        match tokio::time::timeout(inner.config.request_timeout, delete).await {
            Ok(Ok(r)) => {
                inner.saw(r.header());
            }
            Ok(Err(e)) => return Err(format!("deleting the prefix: {e}")),
            Err(_) => return Err("deleting the prefix timed out".into()),
        }
        for id in self.granted.clone() {
            match self.revoke(id).await {
                Ok(()) | Err(Error::LeaseNotFound(_)) => {}
                Err(e) => return Err(format!("revoking lease {id:x}: {e}")),
            }
        }
        Ok(())
    }

    /// A put of `kv`, attached to the etcd lease of its source lease.
    async fn put(&mut self, kv: &KeyValue) -> Result<Change> {
        let key = self.inner.layout.key(&kv.key)?;
        let mut options = None;
        if let Some(lease) = kv.lease {
            let id = match self.leases.get(&lease.0) {
                Some(id) => *id,
                None => {
                    let id = self.grant(ENDED_TTL).await?;
                    self.leases.insert(lease.0, id);
                    self.ended.push(id);
                    id
                }
            };
            options = Some(ec::PutOptions::new().with_lease(id));
        }
        Ok(Change {
            size: key.len() + kv.value.len(),
            op: ec::TxnOp::put(key, kv.value.clone(), options),
        })
    }

    /// Writes the base (once, before the first entry): one txn per source revision, in order.
    async fn write_base(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let mut base = std::mem::take(&mut self.base);
        base.sort_by(|a, b| (a.0.mod_revision, &a.0.key).cmp(&(b.0.mod_revision, &b.0.key)));
        for group in base.chunk_by(|a, b| a.0.mod_revision == b.0.mod_revision) {
            let mut changes = Vec::with_capacity(group.len());
            for (kv, _) in group {
                changes.push(self.put(kv).await?);
            }
            let (_, _, txns) = self.write(changes, nanos(group[0].1), None).await?;
            self.mapping.base += group.len() as u64;
            self.mapping.base_txns += txns;
            self.keep_alive_if_due().await?;
        }
        Ok(())
    }

    /// Writes `changes` with the commit time and tag in as few txns as etcd's limits allow
    /// (one clock-only txn if there are none); returns the first and last etcd revisions and
    /// how many txns it took.
    async fn write(
        &mut self,
        changes: Vec<Change>,
        time: u64,
        tag: Option<&[u8]>,
    ) -> Result<(u64, u64, u64)> {
        let budget = self
            .inner
            .config
            .max_request_bytes
            .saturating_sub(TXN_OVERHEAD);
        let mut chunks: Vec<Vec<ec::TxnOp>> = Vec::new();
        let mut chunk = Vec::new();
        let mut size = 0;
        for change in changes {
            let n = change.size + OP_OVERHEAD;
            if !chunk.is_empty() && (chunk.len() == MAX_OPS || size + n > budget) {
                chunks.push(std::mem::take(&mut chunk));
                size = 0;
            }
            chunk.push(change.op);
            size += n;
        }
        if !chunk.is_empty() || chunks.is_empty() {
            chunks.push(chunk);
        }
        let txns = chunks.len() as u64;
        let mut first = None;
        let mut last = 0;
        for chunk in chunks {
            last = self.txn(chunk, time, tag).await?;
            first.get_or_insert(last);
        }
        Ok((first.unwrap_or(last), last, txns))
    }

    /// One etcd txn: `ops` and the clock put, if nobody else wrote to the prefix since the last
    /// one.
    async fn txn(&mut self, mut ops: Vec<ec::TxnOp>, time: u64, tag: Option<&[u8]>) -> Result<u64> {
        let inner = &self.inner;
        let clock = inner.layout.clock_key();
        ops.push(ec::TxnOp::put(clock.clone(), encode_clock(time, tag), None));
        let guard = if self.clock == 0 {
            ec::Compare::create_revision(clock, ec::CompareOp::Equal, 0)
        } else {
            ec::Compare::mod_revision(clock, ec::CompareOp::Equal, self.clock as i64)
        };
        let txn = ec::Txn::new().when(vec![guard]).and_then(ops);
        let kv = inner.kv_client();
        let sent = inner.send(|| {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        });
        let response = match sent.await {
            Ok(Ok(r)) => r,
            // etcd's own words for a txn over its limits (request size, ops): its limits may be
            // below what this client was told.
            Ok(Err(e)) => return Err(failure(e, "import txn", true)),
            Err(_) => {
                return Err(Error::Timeout {
                    what: "import txn (the write may have committed)".into(),
                    after: inner.config.request_timeout,
                });
            }
        };
        if !response.succeeded() {
            return Err(Error::PrefixNotEmpty {
                prefix: inner.layout.prefix().to_vec(),
                found: "another writer wrote to it while the import ran (is a server running \
                        on it?)"
                    .into(),
            });
        }
        let revision = inner.saw(response.header());
        self.clock = revision;
        Ok(revision)
    }

    async fn grant(&mut self, secs: i64) -> Result<i64> {
        let inner = &self.inner;
        let client = inner.client.lease_client();
        let sent = inner.send(|| {
            let mut client = client.clone();
            async move { client.grant(secs, None).await }
        });
        let r = match sent.await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(failure(e, "lease grant", true)),
            Err(_) => {
                return Err(Error::Timeout {
                    what: "lease grant".into(),
                    after: inner.config.request_timeout,
                });
            }
        };
        self.granted.push(r.id());
        let every = Duration::from_secs(r.ttl().max(3) as u64 / 3);
        self.keep_every = self.keep_every.min(every);
        Ok(r.id())
    }

    async fn keep_alive_if_due(&mut self) -> Result<()> {
        if self.kept_alive.elapsed() < self.keep_every {
            return Ok(());
        }
        for id in self.granted.clone() {
            self.keep_alive(id).await?;
        }
        self.kept_alive = Instant::now();
        Ok(())
    }

    async fn keep_alive(&self, id: i64) -> Result<()> {
        let inner = &self.inner;
        let mut client = inner.client.lease_client();
        let call = async {
            let (mut keeper, mut stream) = client.keep_alive(id).await?;
            keeper.keep_alive().await?;
            stream.message().await
        };
        match tokio::time::timeout(inner.config.request_timeout, call).await {
            Ok(Ok(Some(r))) if r.ttl() > 0 => Ok(()),
            Ok(Ok(_)) => Err(Error::LeaseNotFound(LeaseId(id as u64))),
            Ok(Err(e)) => Err(failure(e, "lease keep-alive", false)),
            Err(_) => Err(Error::Timeout {
                what: "lease keep-alive".into(),
                after: inner.config.request_timeout,
            }),
        }
    }

    async fn revoke(&self, id: i64) -> Result<()> {
        let inner = &self.inner;
        let mut client = inner.client.lease_client();
        match tokio::time::timeout(inner.config.request_timeout, client.revoke(id)).await {
            Ok(Ok(r)) => {
                inner.saw(r.header());
                Ok(())
            }
            Ok(Err(e)) if classify(&e) == Kind::LeaseNotFound => {
                Err(Error::LeaseNotFound(LeaseId(id as u64)))
            }
            Ok(Err(e)) => Err(failure(e, "lease revoke", true)),
            Err(_) => Err(Error::Timeout {
                what: "lease revoke".into(),
                after: inner.config.request_timeout,
            }),
        }
    }
}

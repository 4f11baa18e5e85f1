//! [`EncryptedStore`]: the log with values under the configured prefixes encrypted on the way in
//! and decrypted on the way out.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use skiff_store::{
    Commit, Error, Event, KeyValue, Lease, LeaseId, LogEntry, Op, OpResponse, RangeRequest,
    RangeResponse, Result, Revision, Store, StoreStatus, Txn, TxnResponse, WatchRequest,
    WatchStream,
};

use super::Encryption;

/// A [`Store`] that encrypts and decrypts values as [`Encryption`] says, by key. Everything else
/// (revisions, leases, compaction, snapshots) passes through: a snapshot holds ciphertext.
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    encryption: Arc<Encryption>,
}

impl EncryptedStore {
    /// `inner` with `encryption` applied.
    pub fn new(inner: Arc<dyn Store>, encryption: Arc<Encryption>) -> EncryptedStore {
        EncryptedStore { inner, encryption }
    }

    /// The log underneath, as stored.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    fn open_kv(&self, kv: &mut KeyValue) -> Result<()> {
        if kv.value.is_empty() || !self.encryption.covers(&kv.key) {
            return Ok(());
        }
        let stored = std::mem::take(&mut kv.value);
        kv.value =
            self.encryption
                .decrypt(&kv.key, stored)
                .map_err(|reason| Error::Unreadable {
                    key: kv.key.clone(),
                    reason,
                })?;
        Ok(())
    }

    fn open_event(&self, event: &mut Event) -> Result<()> {
        self.open_kv(&mut event.kv)?;
        if let Some(prev) = &mut event.prev_kv {
            self.open_kv(prev)?;
        }
        Ok(())
    }

    fn open_range(&self, response: &mut RangeResponse) -> Result<()> {
        for kv in &mut response.kvs {
            self.open_kv(kv)?;
        }
        Ok(())
    }

    fn seal_ops(&self, ops: &mut [Op]) -> Result<()> {
        for op in ops {
            if let Op::Put { key, value, .. } = op
                && self.encryption.covers(key)
            {
                let plain = std::mem::take(value);
                *value =
                    self.encryption
                        .encrypt(key, plain)
                        .map_err(|reason| Error::Unreadable {
                            key: key.clone(),
                            reason: format!("cannot encrypt: {reason}"),
                        })?;
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Store for EncryptedStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        let mut response = self.inner.range(request).await?;
        self.open_range(&mut response)?;
        Ok(response)
    }

    async fn txn(&self, mut txn: Txn) -> Result<TxnResponse> {
        self.seal_ops(&mut txn.success)?;
        self.seal_ops(&mut txn.failure)?;
        let mut response = self.inner.txn(txn).await?;
        for r in &mut response.responses {
            match r {
                OpResponse::Put { prev_kv: Some(kv) } => self.open_kv(kv)?,
                OpResponse::Put { prev_kv: None } => {}
                OpResponse::Delete { prev_kvs, .. } => {
                    for kv in prev_kvs {
                        self.open_kv(kv)?;
                    }
                }
                OpResponse::Range(range) => self.open_range(range)?,
            }
        }
        Ok(response)
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let stream = self.inner.watch(request).await?;
        let this = EncryptedStore {
            inner: self.inner.clone(),
            encryption: self.encryption.clone(),
        };
        Ok(Box::pin(
            stream
                .map(move |batch| {
                    let mut batch = batch?;
                    for event in &mut batch.events {
                        this.open_event(event)?;
                    }
                    Ok(batch)
                })
                .scan(false, |ended, item: Result<_>| {
                    // The stream ends after an error, as the contract says.
                    if *ended {
                        return futures::future::ready(None);
                    }
                    *ended = item.is_err();
                    futures::future::ready(Some(item))
                }),
        ))
    }

    async fn history(&self, key: &[u8]) -> Result<Vec<(Commit, Event)>> {
        let mut versions = self.inner.history(key).await?;
        for (_, event) in &mut versions {
            self.open_event(event)?;
        }
        Ok(versions)
    }

    async fn log(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<LogEntry>> {
        let mut entries = self.inner.log(from, to, limit).await?;
        for entry in &mut entries {
            for event in &mut entry.events {
                self.open_event(event)?;
            }
        }
        Ok(entries)
    }

    async fn log_retained(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<(LogEntry, Vec<usize>)>> {
        let mut entries = self.inner.log_retained(from, to, limit).await?;
        for (entry, _) in &mut entries {
            for event in &mut entry.events {
                self.open_event(event)?;
            }
        }
        Ok(entries)
    }

    async fn retained_at(&self, revision: Revision) -> Result<Vec<KeyValue>> {
        let mut kvs = self.inner.retained_at(revision).await?;
        for kv in &mut kvs {
            self.open_kv(kv)?;
        }
        Ok(kvs)
    }

    fn watermarks(&self) -> Vec<(Vec<u8>, Revision)> {
        self.inner.watermarks()
    }

    fn leases(&self) -> Vec<(LeaseId, Duration)> {
        self.inner.leases()
    }

    async fn revision_at(&self, time: SystemTime) -> Result<Revision> {
        self.inner.revision_at(time).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn purge_prefix(&self, prefix: &[u8], below: Revision) -> Result<Option<u64>> {
        self.inner.purge_prefix(prefix, below).await
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        self.inner.lease_grant(ttl).await
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<Lease> {
        self.inner.lease_keep_alive(id).await
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<Revision> {
        self.inner.lease_revoke(id).await
    }

    async fn snapshot(&self, path: &Path) -> Result<Revision> {
        self.inner.snapshot(path).await
    }

    fn status(&self) -> StoreStatus {
        self.inner.status()
    }

    fn ready(&self) -> std::result::Result<(), String> {
        self.inner.ready()
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

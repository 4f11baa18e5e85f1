//! Reading the cluster's past from the log: objects as they were at any retained point, the
//! versions of one object, the changes in a window and what differs between two points. Used by
//! the `skiff get --at`/`history`/`diff`/`log` commands over a stopped server's data dir and, for a
//! running server, by its `/debug/skiff/...` endpoints ([`http`]).
//!
//! # Layout
//! - [`point`]: points in history as users name them (revision, RFC 3339 time, `-15m`).
//! - [`objects`]: kind names, storage keys, operations, field managers, noise-free views.
//! - [`Replay`]: the reads, over any [`Store`].
//! - [`http`]: the debug endpoints and their JSON shapes.
//! - [`timeline`]: the timeline page's reads: changes per time bucket, pages of changes newest
//!   first, the cluster at one revision as rows per kind.
//! - [`index`]: the log summarised per block of revisions, so the timeline counts a long history
//!   without reading it.
//!
//! A point before the retained history is [`Error::Compacted`], which names the oldest revision
//! and time still readable; it never reads as an empty or a wrong answer.

pub mod http;
pub mod index;
pub mod objects;
pub mod point;
pub mod timeline;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use skiff_kinds::{Kinds, Snapshot};
use skiff_meta::ResourceInfo;
use skiff_store::{KeyRange, KeyValue, LogEntry, RangeRequest, Revision, Store};

use crate::origin::Origin;

pub use objects::Operation;
pub use point::Point;

/// What went wrong reading history.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No served resource has this name.
    #[error("the server doesn't have a resource type {0:?}")]
    UnknownKind(String),
    /// The point is before the retained history.
    #[error(
        "{requested} is before the retained history: compacted at revision {compacted}{}",
        .oldest_time.map(|t| format!(", oldest time {}", jiff::Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default())).unwrap_or_default()
    )]
    Compacted {
        /// The point asked for.
        requested: String,
        /// The oldest readable revision.
        compacted: Revision,
        /// The commit time of the oldest retained entry.
        oldest_time: Option<SystemTime>,
    },
    /// The point is inside the retained history, but a tighter retention of the keys under
    /// `prefix` (a high-churn prefix: node Leases, Events) has pruned their state there.
    #[error(
        "revision {requested} of {prefix} is no longer kept: keys under it keep only their newest versions, the oldest readable revision is {compacted}"
    )]
    Pruned {
        /// The revision asked for.
        requested: Revision,
        /// The pruned key prefix.
        prefix: String,
        /// The oldest revision readable under it.
        compacted: Revision,
    },
    /// The revision has not been written yet.
    #[error("revision {requested} is in the future (the newest revision is {current})")]
    Future {
        /// The revision asked for.
        requested: Revision,
        /// The newest revision.
        current: Revision,
    },
    /// The window's start is after its end.
    #[error("the window starts at revision {from}, after its end at revision {to}")]
    EmptyWindow {
        /// Its start.
        from: Revision,
        /// Its end.
        to: Revision,
    },
    /// The log failed.
    #[error("reading the log: {0}")]
    Store(#[source] skiff_store::Error),
}

/// The result type of history reads.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One version of one object in its history.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    /// The revision that wrote it.
    pub revision: u64,
    /// When it was committed (RFC 3339).
    pub time: String,
    /// What the write did.
    pub operation: Operation,
    /// The field manager that made it, where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// Who made it (user and groups), where recorded: absent for the server's own writes and
    /// those from before users were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Origin>,
    /// The object as written (for a delete: as it was before).
    pub object: Value,
}

/// One change to one object, as the log records it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// The revision.
    pub revision: u64,
    /// When it was committed (RFC 3339).
    pub time: String,
    /// What the write did.
    pub operation: Operation,
    /// The object's kind.
    pub kind: String,
    /// Its namespace, for namespaced kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The field manager that made it, where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// Who made it, as [`Version::user`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Origin>,
    /// The top-level fields that changed (`spec`, `status`, `metadata.labels`).
    pub fields: Vec<String>,
    /// The object before (absent for a create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// The object after (absent for a delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// One page of [`Replay::log`].
#[derive(Debug, Clone, PartialEq)]
pub struct LogPage {
    /// The changes, oldest first.
    pub changes: Vec<Change>,
    /// The last revision read (continue after it).
    pub last: Revision,
    /// Whether the window holds entries after `last`.
    pub more: bool,
    /// How many changes were left out because a tighter retention (node Leases, Events) has
    /// pruned the versions they wrote or replaced.
    pub pruned: usize,
}

/// How an object differs between two points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiffKind {
    /// Absent at the first point, present at the second.
    Created,
    /// Present at both, written in between.
    Changed,
    /// Present at the first point, absent at the second.
    Deleted,
}

/// One object that differs between two points.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ObjectDiff {
    /// How.
    pub diff: DiffKind,
    /// The object's kind.
    pub kind: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// At the first point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// At the second point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// What [`Replay::diff`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiffPage {
    /// The objects that differ, in key order.
    pub objects: Vec<ObjectDiff>,
    /// The kinds left out of a diff of every kind because their history at its start is pruned.
    pub pruned: Vec<Pruned>,
}

/// A kind a diff left out: a tighter retention has pruned its history at the diff's start.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pruned {
    /// The kind.
    pub kind: String,
    /// The oldest revision at which its objects can be read.
    pub compacted: u64,
}

/// Which objects a read covers: a resource (all when `None`) and a namespace (all when `None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    /// Only this resource.
    pub resource: Option<&'static ResourceInfo>,
    /// Only this namespace.
    pub namespace: Option<&'a str>,
    /// Only objects of this name (the log's reads; a range read ignores it).
    pub name: Option<&'a str>,
}

impl Filter<'_> {
    fn range(&self) -> KeyRange {
        match self.resource {
            Some(info) => KeyRange::prefix(info.storage_prefix_in(self.namespace).into_bytes()),
            None => KeyRange::prefix(b"/registry/".to_vec()),
        }
    }

    /// Whether the kind `info` in `namespace` is covered, whatever the name.
    pub fn covers(&self, info: &ResourceInfo, namespace: Option<&str>) -> bool {
        self.resource.is_none_or(|r| r == info)
            && self.namespace.is_none_or(|ns| namespace == Some(ns))
    }

    /// Whether the object `name` of `info` in `namespace` is covered.
    pub fn covers_object(&self, info: &ResourceInfo, namespace: Option<&str>, name: &str) -> bool {
        self.covers(info, namespace) && self.name.is_none_or(|n| n == name)
    }
}

/// RFC 3339 text of a commit time.
pub fn format_time(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Reads of history over a log.
#[derive(Clone)]
pub struct Replay {
    store: Arc<dyn Store>,
    kinds: Arc<Kinds>,
    index: Option<Arc<index::Index>>,
}

impl Replay {
    /// Reads over `store` that know the built-in kinds.
    pub fn new(store: Arc<dyn Store>) -> Replay {
        Replay::with_kinds(store, Arc::new(Kinds::builtin()))
    }

    /// Reads over `store` that know `kinds` (a server's served kinds, which change with its
    /// definitions).
    pub fn with_kinds(store: Arc<dyn Store>, kinds: Arc<Kinds>) -> Replay {
        Replay {
            store,
            kinds,
            index: None,
        }
    }

    /// These reads, with the timeline counted from `index` where it can be (a server's index,
    /// kept while the timeline page is used).
    pub fn with_index(self, index: Arc<index::Index>) -> Replay {
        Replay {
            index: Some(index),
            ..self
        }
    }

    /// The log's summary for the timeline, if these reads have one.
    pub fn index(&self) -> Option<&Arc<index::Index>> {
        self.index.as_ref()
    }

    /// Reads over `store` that know the built-in kinds and the custom resources of every
    /// definition stored in it now (for a data dir read offline).
    pub async fn load(store: Arc<dyn Store>) -> Result<Replay> {
        let kinds = Kinds::builtin();
        let prefix = skiff_kinds::builtin::custom_resource_definition::INFO.storage_prefix();
        let stored = store
            .range(RangeRequest::new(KeyRange::prefix(prefix.into_bytes())))
            .await
            .map_err(Error::Store)?;
        for kv in &stored.kvs {
            // A definition that no longer builds (the server refused to serve it) adds nothing.
            if let Some(definition) = objects::decode(kv) {
                kinds.define(&definition);
            }
        }
        Ok(Replay::with_kinds(store, Arc::new(kinds)))
    }

    /// The kinds these reads know.
    pub fn kinds(&self) -> Arc<Snapshot> {
        self.kinds.snapshot()
    }

    /// The resource a user means by `name` (see [`objects::resolve_kind`]).
    pub fn resolve_kind(&self, name: &str) -> Option<&'static ResourceInfo> {
        objects::resolve_kind(&self.kinds(), name)
    }

    /// The log underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn compacted(&self, requested: String) -> Error {
        let status = self.store.status();
        Error::Compacted {
            requested,
            compacted: status.compacted,
            oldest_time: status.oldest_time,
        }
    }

    fn store_error(&self, e: skiff_store::Error) -> Error {
        match e {
            skiff_store::Error::Compacted {
                requested,
                compacted,
                prefix: None,
            } => Error::Compacted {
                requested: format!("revision {requested}"),
                compacted,
                oldest_time: self.store.status().oldest_time,
            },
            skiff_store::Error::Compacted {
                requested,
                compacted,
                prefix: Some(prefix),
            } => Error::Pruned {
                requested,
                prefix: String::from_utf8_lossy(&prefix).into_owned(),
                compacted,
            },
            skiff_store::Error::FutureRevision { requested, current } => {
                Error::Future { requested, current }
            }
            other => Error::Store(other),
        }
    }

    /// The revision `point` names: for a time, the newest revision committed at or before it.
    /// Points before the retained history are [`Error::Compacted`].
    pub async fn resolve(&self, point: &Point) -> Result<Revision> {
        let status = self.store.status();
        match point {
            Point::Now => Ok(status.revision),
            Point::Revision(r) if *r > status.revision => Err(Error::Future {
                requested: *r,
                current: status.revision,
            }),
            Point::Revision(r) if *r < status.compacted => Err(self.compacted(point.to_string())),
            Point::Revision(r) => Ok(*r),
            Point::Time(_) | Point::Ago(_) => {
                let time = point
                    .time(SystemTime::now())
                    .ok_or_else(|| self.compacted(point.to_string()))?;
                match self.store.revision_at(time).await {
                    Ok(r) => Ok(r),
                    Err(skiff_store::Error::TimeBeforeHistory { .. }) => {
                        Err(self.compacted(point.to_string()))
                    }
                    Err(e) => Err(self.store_error(e)),
                }
            }
        }
    }

    /// The commit time of revision `at` (`None` for revision 0 or a compacted one).
    pub async fn time_of(&self, at: Revision) -> Result<Option<SystemTime>> {
        if at == Revision::ZERO {
            return Ok(None);
        }
        match self.store.log(at, Some(at), 1).await {
            Ok(entries) => Ok(entries.first().map(|e| e.time)),
            Err(skiff_store::Error::Compacted { .. }) => Ok(None),
            Err(e) => Err(self.store_error(e)),
        }
    }

    async fn range_at(&self, range: KeyRange, at: Revision) -> Result<Vec<KeyValue>> {
        self.store
            .range(RangeRequest::new(range).at(at))
            .await
            .map(|r| r.kvs)
            .map_err(|e| self.store_error(e))
    }

    /// Every object of `info` (in `namespace`, or all namespaces) as it was at `at`, in key order,
    /// with its resourceVersion as it was then.
    pub async fn list(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        at: Revision,
    ) -> Result<Vec<Value>> {
        let filter = Filter {
            resource: Some(info),
            namespace,
            name: None,
        };
        Ok(self
            .range_at(filter.range(), at)
            .await?
            .iter()
            .filter_map(objects::decode)
            .collect())
    }

    /// One object as it was at `at`; `None` if it did not exist then.
    pub async fn get(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        at: Revision,
    ) -> Result<Option<Value>> {
        let key = info.storage_key(namespace, name).into_bytes();
        Ok(self
            .range_at(KeyRange::key(key), at)
            .await?
            .first()
            .and_then(objects::decode))
    }

    /// Every retained version of one object, oldest first, deletes included.
    pub async fn history(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Vec<Version>> {
        let key = info.storage_key(namespace, name).into_bytes();
        let events = self
            .store
            .history(&key)
            .await
            .map_err(|e| self.store_error(e))?;
        let mut out = Vec::with_capacity(events.len());
        let mut before: Option<Value> = None;
        for (commit, event) in events {
            let after = match event.kind {
                skiff_store::EventKind::Put => objects::decode(&event.kv),
                skiff_store::EventKind::Delete => None,
            };
            let operation = objects::classify(before.as_ref(), after.as_ref());
            let manager = objects::manager(before.as_ref(), after.as_ref());
            let object = match (&after, &before) {
                (Some(a), _) => a.clone(),
                (None, Some(b)) => b.clone(),
                (None, None) => Value::Null,
            };
            out.push(Version {
                revision: event.kv.mod_revision.0,
                time: format_time(commit.time),
                operation,
                manager,
                user: Origin::of_tag(commit.tag.as_deref()),
                object,
            });
            before = after;
        }
        Ok(out)
    }

    /// The changes of one log entry to objects of `kinds` that `filter` covers.
    pub fn changes_of(kinds: &Snapshot, entry: &LogEntry, filter: &Filter<'_>) -> Vec<Change> {
        let mut out = Vec::new();
        for event in &entry.events {
            let Some((info, namespace, name)) = objects::parse_key(kinds, &event.kv.key) else {
                continue;
            };
            // Decided by the key, before anything is decoded.
            if !filter.covers_object(info, namespace.as_deref(), &name) {
                continue;
            }
            let (before, after) = objects::versions(event);
            out.push(Change {
                revision: entry.revision.0,
                time: format_time(entry.time),
                operation: objects::classify(before.as_ref(), after.as_ref()),
                kind: info.kind.to_string(),
                namespace,
                name,
                manager: objects::manager(before.as_ref(), after.as_ref()),
                user: Origin::of_tag(entry.tag.as_deref()),
                fields: objects::changed_fields(before.as_ref(), after.as_ref()),
                before,
                after,
            });
        }
        out
    }

    /// The changes in revisions `from..=to` (`to` = `None`: up to now) to objects `filter`
    /// covers, oldest first, reading at most `limit` log entries.
    pub async fn log(
        &self,
        from: Revision,
        to: Option<Revision>,
        filter: &Filter<'_>,
        limit: usize,
    ) -> Result<LogPage> {
        let status = self.store.status();
        let from = from.max(Revision(1));
        if from < status.compacted {
            return Err(self.compacted(format!("revision {from}")));
        }
        let to = to.unwrap_or(status.revision).min(status.revision);
        let (entries, pruned) = self.entries(from, to, limit).await?;
        let last = entries.last().map_or(to, |e| e.revision);
        let kinds = self.kinds();
        let changes = entries
            .iter()
            .flat_map(|e| Replay::changes_of(&kinds, e, filter))
            .collect();
        Ok(LogPage {
            changes,
            last,
            more: last < to,
            pruned,
        })
    }

    /// The log entries of `from..=to` (at most `limit`), and how many of their changes were left
    /// out because a tighter retention pruned their versions (see [`Replay::log`]).
    pub async fn entries(
        &self,
        from: Revision,
        to: Revision,
        limit: usize,
    ) -> Result<(Vec<LogEntry>, usize)> {
        match self.store.log(from, Some(to), limit).await {
            Ok(entries) => Ok((entries, 0)),
            Err(skiff_store::Error::Compacted {
                prefix: Some(_), ..
            }) => self.log_without_pruned(from, to, limit).await,
            Err(e) => Err(self.store_error(e)),
        }
    }

    /// The log of `from..=to` when some of its versions are pruned (the high-churn prefixes keep
    /// only their newest versions): every event whose version, or whose previous version, is
    /// gone is left out, and counted; the others get their previous values read one by one.
    async fn log_without_pruned(
        &self,
        from: Revision,
        to: Revision,
        limit: usize,
    ) -> Result<(Vec<LogEntry>, usize)> {
        let retained = self
            .store
            .log_retained(from, Some(to), limit)
            .await
            .map_err(|e| self.store_error(e))?;
        let mut left_out = 0;
        let mut entries = Vec::with_capacity(retained.len());
        for (mut entry, pruned) in retained {
            let mut events = Vec::with_capacity(entry.events.len());
            for (i, mut event) in entry.events.into_iter().enumerate() {
                if pruned.contains(&i) {
                    left_out += 1;
                    continue;
                }
                if objects::replaces(&event) {
                    let before = Revision(entry.revision.0 - 1);
                    match self
                        .range_at(KeyRange::key(event.kv.key.clone()), before)
                        .await
                    {
                        Ok(mut kvs) if !kvs.is_empty() => event.prev_kv = Some(kvs.remove(0)),
                        Ok(_) | Err(Error::Pruned { .. }) => {
                            left_out += 1;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
                events.push(event);
            }
            entry.events = events;
            entries.push(entry);
        }
        Ok((entries, left_out))
    }

    /// The objects `filter` covers that differ between `from` and `to`, in key order.
    ///
    /// A diff of one kind reads it at both points or fails. A diff of every kind reads them one by
    /// one (all at the same two revisions), and a kind whose history at `from` a tighter
    /// retention has pruned (node Leases, Events: see the server's high-churn prefixes) is left
    /// out and named in [`DiffPage::pruned`], so the churn of Leases does not make the rest of
    /// the cluster's history unreadable.
    pub async fn diff(
        &self,
        from: Revision,
        to: Revision,
        filter: &Filter<'_>,
    ) -> Result<DiffPage> {
        if from > to {
            return Err(Error::EmptyWindow { from, to });
        }
        let kinds = self.kinds();
        let mut page = DiffPage::default();
        if filter.resource.is_some() {
            page.objects = self
                .diff_range(&kinds, filter.range(), from, to, filter)
                .await?;
            return Ok(page);
        }
        let mut prefixes: Vec<(&'static ResourceInfo, String)> = Vec::new();
        for info in kinds.infos() {
            if !filter.covers(info, filter.namespace.filter(|_| info.namespaced)) {
                continue;
            }
            let prefix = info.storage_prefix_in(filter.namespace);
            // Versions of one custom resource share their storage.
            if !prefixes.iter().any(|(_, p)| *p == prefix) {
                prefixes.push((info, prefix));
            }
        }
        prefixes.sort_by(|a, b| a.1.cmp(&b.1));
        for (info, prefix) in prefixes {
            let range = KeyRange::prefix(prefix.into_bytes());
            match self.diff_range(&kinds, range, from, to, filter).await {
                Ok(objects) => page.objects.extend(objects),
                Err(Error::Pruned { compacted, .. }) => page.pruned.push(Pruned {
                    kind: info.kind.to_string(),
                    compacted: compacted.0,
                }),
                Err(e) => return Err(e),
            }
        }
        Ok(page)
    }

    async fn diff_range(
        &self,
        kinds: &Snapshot,
        range: KeyRange,
        from: Revision,
        to: Revision,
        filter: &Filter<'_>,
    ) -> Result<Vec<ObjectDiff>> {
        let index = |kvs: Vec<KeyValue>| -> BTreeMap<Vec<u8>, KeyValue> {
            kvs.into_iter().map(|kv| (kv.key.clone(), kv)).collect()
        };
        let before = index(self.range_at(range.clone(), from).await?);
        let after = index(self.range_at(range, to).await?);
        let mut keys: Vec<&Vec<u8>> = before.keys().chain(after.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut out = Vec::new();
        for key in keys {
            let Some((info, namespace, name)) = objects::parse_key(kinds, key) else {
                continue;
            };
            if !filter.covers(info, namespace.as_deref()) {
                continue;
            }
            let (b, a) = (before.get(key), after.get(key));
            let diff = match (b, a) {
                (None, Some(_)) => DiffKind::Created,
                (Some(_), None) => DiffKind::Deleted,
                (Some(b), Some(a)) if b.mod_revision != a.mod_revision => DiffKind::Changed,
                _ => continue,
            };
            out.push(ObjectDiff {
                diff,
                kind: info.kind.to_string(),
                namespace,
                name,
                before: b.and_then(objects::decode),
                after: a.and_then(objects::decode),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;

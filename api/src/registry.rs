//! Generic storage of API objects in the log: storage keys, encoding, `resourceVersion`, consistent
//! paginated lists, and the compare-and-swap loop every write goes through.
//!
//! An object is stored as JSON without `metadata.resourceVersion`; on the way out the
//! resourceVersion is the key's mod revision, so a value never has to be rewritten to say where it
//! sits in the log:
//!
//! ```text
//!   /registry/core/pods/default/web  --(mod_revision 42)-->  {"metadata":{"name":"web",...}}
//!                                                        =>  metadata.resourceVersion = "42"
//! ```

use std::sync::Arc;

use futures::StreamExt;
use serde_json::Value;
use skiff_meta::ResourceInfo;
use skiff_store::{
    Compare, KeyRange, KeyValue, Op, OpResponse, RangeRequest, Revision, Store, Txn, WatchRequest,
};

use crate::error::{Error, Result};

/// Decides whether an object belongs in a list or watch (label and field selectors).
pub type ObjectFilter = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// How many times a server-side read-modify-write retries after losing a race.
const MAX_UPDATE_ATTEMPTS: usize = 16;

/// Reads and writes API objects in the log.
#[derive(Clone)]
pub struct Registry {
    store: Arc<dyn Store>,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// The objects, in key order.
    pub items: Vec<Value>,
    /// The revision the whole list (every page of it) is read at.
    pub revision: Revision,
    /// The key after which the next page starts, when there is one.
    pub next_key: Option<Vec<u8>>,
    /// How many objects follow this page, when known (only without a filter, as Kubernetes).
    pub remaining: Option<u64>,
}

/// Where a list continues: after the last key of the page before.
#[derive(Debug, Clone)]
pub struct Resume {
    /// The last key of the page before.
    pub start_after: Vec<u8>,
    /// That page's [`ListPage::remaining`], when the caller kept it. The revision is pinned, so
    /// the count cannot have changed and is not walked again: counting the rest of the range on
    /// every page would make a paged list quadratic.
    pub remaining: Option<u64>,
}

/// A change seen by a watch, as the API speaks of it.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// The object entered the watched set (created, or changed so that it now matches).
    Added(Value),
    /// The object changed and still matches.
    Modified(Value),
    /// The object left the watched set (deleted, or changed so that it no longer matches).
    Deleted(Value),
    /// Nothing changed in the watched set up to this revision.
    Progress(Revision),
}

impl WatchEvent {
    /// The revision the event happened at.
    pub fn revision(&self) -> Option<Revision> {
        match self {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                resource_version(o)
            }
            WatchEvent::Progress(r) => Some(*r),
        }
    }
}

/// The object's `metadata.resourceVersion` as a revision.
pub fn resource_version(object: &Value) -> Option<Revision> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .map(Revision)
}

/// Sets `metadata.resourceVersion`.
pub fn set_resource_version(object: &mut Value, revision: Revision) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "resourceVersion".into(),
            Value::String(revision.0.to_string()),
        );
    }
}

/// The object's namespace and name.
pub fn namespace_and_name(object: &Value) -> (Option<&str>, &str) {
    let meta = object.get("metadata");
    let ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    (ns, name)
}

/// A stored object as the API shows it: resourceVersion set to `revision`.
pub(crate) fn decode(kv: &KeyValue, revision: Revision) -> Result<Value> {
    decode_stored(&kv.key, &kv.value, revision)
}

/// [`decode`] of the bytes stored under `key`.
pub(crate) fn decode_stored(key: &[u8], value: &[u8], revision: Revision) -> Result<Value> {
    let mut object: Value = serde_json::from_slice(value).map_err(|e| {
        Error::Internal(format!(
            "stored object under {} does not decode: {e}",
            String::from_utf8_lossy(key)
        ))
    })?;
    set_resource_version(&mut object, revision);
    Ok(object)
}

fn encode(object: &Value) -> Result<Vec<u8>> {
    if object.pointer("/metadata/resourceVersion").is_some() {
        return encode_owned(&mut object.clone());
    }
    // Most writes (every create) carry no resourceVersion: no copy to strip it from.
    serde_json::to_vec(object).map_err(|e| Error::Internal(format!("encoding object: {e}")))
}

/// [`encode`] for an object the caller owns and is about to stamp with a new resourceVersion:
/// the old one is taken out in place instead of encoding a copy without it.
fn encode_owned(object: &mut Value) -> Result<Vec<u8>> {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    serde_json::to_vec(object).map_err(|e| Error::Internal(format!("encoding object: {e}")))
}

/// Whether two objects are the same apart from their resourceVersion (a no-op write), compared
/// in place: no copies of either.
fn same_content(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a.len() == b.len()
        && a.iter().all(|(key, av)| match b.get(key) {
            None => false,
            Some(bv) if key == "metadata" => same_except_version(av, bv),
            Some(bv) => av == bv,
        })
}

/// Two `metadata` values equal but for `resourceVersion`.
fn same_except_version(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let others = |m: &serde_json::Map<String, Value>| {
        m.len() - usize::from(m.contains_key("resourceVersion"))
    };
    others(a) == others(b)
        && a.iter()
            .filter(|(key, _)| *key != "resourceVersion")
            .all(|(key, av)| b.get(key) == Some(av))
}

/// What an update closure decides.
pub enum Update {
    /// Write this object.
    Write(Value),
    /// Delete the object (the last finalizer went away on a deleted object).
    Delete,
}

impl Registry {
    /// A registry over `store`.
    pub fn new(store: Arc<dyn Store>) -> Registry {
        Registry { store }
    }

    /// The log underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The current revision of the log.
    pub fn current_revision(&self) -> Revision {
        self.store.status().revision
    }

    /// Reads one object, now or at a past revision.
    pub async fn get(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        at: Option<Revision>,
    ) -> Result<Value> {
        let key = info.storage_key(namespace, name);
        let mut request = RangeRequest::new(KeyRange::key(key.into_bytes()));
        request.revision = at;
        let response = self.store.range(request).await?;
        match response.kvs.first() {
            Some(kv) => decode(kv, kv.mod_revision),
            None => Err(Error::not_found(info, name)),
        }
    }

    /// Reads one object straight into `T`, a view of the few fields a caller needs, without
    /// building the whole object (admission's per-create namespace check).
    pub async fn get_view<T: serde::de::DeserializeOwned>(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<T> {
        let key = info.storage_key(namespace, name).into_bytes();
        match self.read_kv(&key).await? {
            Some(kv) => serde_json::from_slice(&kv.value)
                .map_err(|e| Error::Internal(format!("decoding stored {}: {e}", info.kind))),
            None => Err(Error::not_found(info, name)),
        }
    }

    /// Reads one page of a list. `resume` continues after a key of an earlier page; `at` pins the
    /// revision (every page of one list is read at the first page's revision).
    pub async fn list(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        at: Option<Revision>,
        resume: Option<Resume>,
        limit: Option<usize>,
        filter: Option<&ObjectFilter>,
    ) -> Result<ListPage> {
        let prefix = info.storage_prefix_in(namespace).into_bytes();
        let full = KeyRange::prefix(prefix);
        let (start_after, known_remaining) = match resume {
            Some(r) => (
                Some(r.start_after),
                r.remaining.filter(|_| at.is_some() && filter.is_none()),
            ),
            None => (None, None),
        };
        let mut range = match start_after {
            Some(mut key) => {
                key.push(0);
                full.resume_at(key)
            }
            None => full.clone(),
        };
        let mut revision = at;
        let mut items = Vec::new();
        // Keys read so far, in every chunk.
        let mut consumed = 0u64;
        // Read in chunks until the page is full of matching objects or the range is exhausted.
        let chunk = limit.map(|l| l.clamp(64, 4096));
        loop {
            let mut request = RangeRequest::new(range.clone());
            request.revision = revision;
            request.limit = chunk;
            request.count = limit.is_some() && filter.is_none() && known_remaining.is_none();
            let response = self.store.range(request).await?;
            let read_at = response.revision;
            revision = Some(read_at);
            let mut last_key = None;
            let mut taken = 0u64;
            for kv in &response.kvs {
                last_key = Some(kv.key.clone());
                taken += 1;
                let object = decode(kv, kv.mod_revision)?;
                if filter.is_none_or(|f| f(&object)) {
                    items.push(object);
                }
                if limit.is_some_and(|l| items.len() >= l) {
                    break;
                }
            }
            consumed += taken;
            let page_full = limit.is_some_and(|l| items.len() >= l);
            let more_in_store = response.more || taken < response.kvs.len() as u64;
            if page_full {
                let next_key = if more_in_store { last_key } else { None };
                let remaining = match (response.count, known_remaining, &next_key) {
                    (_, _, None) => None,
                    (Some(count), _, Some(_)) => Some(count.saturating_sub(taken)),
                    (None, Some(known), Some(_)) => Some(known.saturating_sub(consumed)),
                    (None, None, Some(_)) => None,
                };
                return Ok(ListPage {
                    items,
                    revision: read_at,
                    next_key,
                    remaining,
                });
            }
            match (response.more, last_key) {
                (true, Some(mut key)) => {
                    key.push(0);
                    range = full.resume_at(key);
                }
                _ => {
                    return Ok(ListPage {
                        items,
                        revision: read_at,
                        next_key: None,
                        remaining: None,
                    });
                }
            }
        }
    }

    /// Creates an object; `AlreadyExists` when the name is taken.
    pub async fn create(
        &self,
        info: &ResourceInfo,
        object: Value,
        lease: Option<skiff_store::LeaseId>,
    ) -> Result<Value> {
        let revision = self.insert(info, &object, lease).await?;
        let mut object = object;
        set_resource_version(&mut object, revision);
        Ok(object)
    }

    /// Writes a new object as [`Registry::create`] does, without taking it: the revision it was
    /// written at, for the caller to set on its own copy.
    pub async fn insert(
        &self,
        info: &ResourceInfo,
        object: &Value,
        lease: Option<skiff_store::LeaseId>,
    ) -> Result<Revision> {
        let (namespace, name) = namespace_and_name(object);
        let key = info.storage_key(namespace, name).into_bytes();
        let value = encode(object)?;
        let response = self
            .store
            .txn(Txn {
                compare: vec![Compare::not_exists(key.clone())],
                success: vec![Op::Put {
                    key,
                    value,
                    lease,
                    prev_kv: false,
                }],
                failure: vec![],
                tag: crate::origin::current(),
            })
            .await?;
        if !response.succeeded {
            return Err(Error::already_exists(info, name));
        }
        Ok(response.revision)
    }

    /// Reads, changes and writes back one object, retrying when another writer got there first.
    ///
    /// `expected` is the client's precondition: when set, a different current revision is a
    /// Conflict instead of a retry. `change` gets the current object and decides; it may run
    /// several times. A change that leaves the object as it was writes nothing and returns the
    /// current object, as Kubernetes does. A dry run decides but writes nothing.
    pub async fn update<F, Fut>(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        expected: Option<Revision>,
        dry_run: bool,
        mut change: F,
    ) -> Result<UpdateOutcome>
    where
        F: FnMut(Value) -> Fut,
        Fut: Future<Output = Result<Update>>,
    {
        let key = info.storage_key(namespace, name).into_bytes();
        let mut current = self.read_kv(&key).await?;
        for _ in 0..MAX_UPDATE_ATTEMPTS {
            let kv = current.ok_or_else(|| Error::not_found(info, name))?;
            if let Some(expected) = expected
                && expected != kv.mod_revision
            {
                return Err(Error::stale(info, name));
            }
            let object = decode(&kv, kv.mod_revision)?;
            let decided = change(object.clone()).await?;
            if dry_run {
                return Ok(match decided {
                    Update::Write(new) => UpdateOutcome::Unchanged(new),
                    Update::Delete => UpdateOutcome::Unchanged(object),
                });
            }
            let (op, result) = match decided {
                Update::Write(mut new) => {
                    if same_content(&new, &object) {
                        return Ok(UpdateOutcome::Unchanged(object));
                    }
                    (
                        Op::Put {
                            key: key.clone(),
                            // `new` gets the write's resourceVersion below.
                            value: encode_owned(&mut new)?,
                            lease: kv.lease,
                            prev_kv: false,
                        },
                        Some(new),
                    )
                }
                Update::Delete => (Op::delete(key.clone()), None),
            };
            let response = self
                .store
                .txn(Txn {
                    compare: vec![Compare::mod_revision_is(key.clone(), kv.mod_revision)],
                    success: vec![op],
                    failure: vec![Op::get(key.clone())],
                    tag: crate::origin::current(),
                })
                .await?;
            if response.succeeded {
                return Ok(match result {
                    Some(mut new) => {
                        set_resource_version(&mut new, response.revision);
                        UpdateOutcome::Written(new)
                    }
                    None => {
                        let mut gone = object;
                        set_resource_version(&mut gone, response.revision);
                        UpdateOutcome::Deleted(gone)
                    }
                });
            }
            current = match response.responses.into_iter().next() {
                Some(OpResponse::Range(r)) => r.kvs.into_iter().next(),
                _ => None,
            };
        }
        Err(Error::Conflict {
            group: info.group.to_string(),
            resource: info.plural.to_string(),
            name: name.to_string(),
            message: "too many concurrent writers; please try again".into(),
        })
    }

    /// Deletes one object if it is still at `expected` (when given); returns it as it was, with
    /// the delete's revision as its resourceVersion.
    pub async fn delete(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        expected: Option<Revision>,
    ) -> Result<Value> {
        let key = info.storage_key(namespace, name).into_bytes();
        let compare = match expected {
            Some(rev) => vec![Compare::mod_revision_is(key.clone(), rev)],
            None => vec![Compare::exists(key.clone())],
        };
        let response = self
            .store
            .txn(Txn {
                compare,
                success: vec![Op::delete(key.clone())],
                failure: vec![Op::get(key.clone())],
                tag: crate::origin::current(),
            })
            .await?;
        if !response.succeeded {
            let exists = matches!(
                response.responses.first(),
                Some(OpResponse::Range(r)) if !r.kvs.is_empty()
            );
            return Err(if exists {
                Error::stale(info, name)
            } else {
                Error::not_found(info, name)
            });
        }
        match response.responses.into_iter().next() {
            Some(OpResponse::Delete { prev_kvs, .. }) if !prev_kvs.is_empty() => {
                decode(&prev_kvs[0], response.revision)
            }
            _ => Err(Error::not_found(info, name)),
        }
    }

    async fn read_kv(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let response = self
            .store
            .range(RangeRequest::new(KeyRange::key(key.to_vec())))
            .await?;
        Ok(response.kvs.into_iter().next())
    }

    /// Watches the objects of `info` (in `namespace`) from `start` (inclusive), translating log
    /// events into API events: an object that starts or stops matching `filter` is Added or
    /// Deleted, as Kubernetes' watch cache does.
    pub async fn watch(
        &self,
        info: &ResourceInfo,
        namespace: Option<&str>,
        start: Revision,
        filter: Option<ObjectFilter>,
        progress: Option<std::time::Duration>,
    ) -> Result<impl futures::Stream<Item = Result<WatchEvent>> + Send + use<>> {
        let prefix = info.storage_prefix_in(namespace).into_bytes();
        let request = WatchRequest {
            range: KeyRange::prefix(prefix),
            start_revision: Some(start),
            prev_kv: true,
            progress_notify: progress,
        };
        let stream = self.store.watch(request).await?;
        Ok(stream.flat_map(move |batch| {
            let events: Vec<Result<WatchEvent>> = match batch {
                Err(e) => vec![Err(e.into())],
                Ok(batch) if batch.is_progress() => {
                    vec![Ok(WatchEvent::Progress(batch.revision))]
                }
                Ok(batch) => batch
                    .events
                    .iter()
                    .filter_map(|event| translate(event, filter.as_ref()).transpose())
                    .collect(),
            };
            futures::stream::iter(events)
        }))
    }
}

/// The result of [`Registry::update`].
#[derive(Debug)]
pub enum UpdateOutcome {
    /// The object was written; here it is with its new resourceVersion.
    Written(Value),
    /// The change was a no-op; the current object.
    Unchanged(Value),
    /// The change deleted the object; as it was, with the delete's revision.
    Deleted(Value),
}

impl UpdateOutcome {
    /// The object, whatever happened.
    pub fn into_object(self) -> Value {
        match self {
            UpdateOutcome::Written(o) | UpdateOutcome::Unchanged(o) | UpdateOutcome::Deleted(o) => {
                o
            }
        }
    }
}

fn translate(
    event: &skiff_store::Event,
    filter: Option<&ObjectFilter>,
) -> Result<Option<WatchEvent>> {
    let revision = event.kv.mod_revision;
    let matches = |o: &Value| filter.is_none_or(|f| f(o));
    let old = match &event.prev_kv {
        Some(prev) => Some(decode(prev, revision)?),
        None => None,
    };
    Ok(match event.kind {
        skiff_store::EventKind::Delete => old.filter(|o| matches(o)).map(WatchEvent::Deleted),
        skiff_store::EventKind::Put => {
            let new = decode(&event.kv, revision)?;
            let was = old.as_ref().is_some_and(|o| matches(o));
            match (was, matches(&new)) {
                (false, true) => Some(WatchEvent::Added(new)),
                (true, true) => Some(WatchEvent::Modified(new)),
                (true, false) => old.map(WatchEvent::Deleted),
                (false, false) => None,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_content_ignores_only_the_resource_version() {
        let a = json!({"metadata": {"name": "p", "resourceVersion": "1"}, "spec": {"x": 1}});
        let moved = json!({"metadata": {"name": "p", "resourceVersion": "2"}, "spec": {"x": 1}});
        let unversioned = json!({"metadata": {"name": "p"}, "spec": {"x": 1}});
        assert!(same_content(&a, &moved));
        assert!(same_content(&a, &unversioned));
        assert!(same_content(&unversioned, &a));
        let renamed = json!({"metadata": {"name": "q", "resourceVersion": "1"}, "spec": {"x": 1}});
        let respec = json!({"metadata": {"name": "p", "resourceVersion": "1"}, "spec": {"x": 2}});
        let labelled = json!({"metadata": {"name": "p", "labels": {}}, "spec": {"x": 1}});
        let extra = json!({"metadata": {"name": "p"}, "spec": {"x": 1}, "status": {}});
        for other in [&renamed, &respec, &labelled, &extra] {
            assert!(!same_content(&a, other), "{other}");
            assert!(!same_content(other, &a), "{other}");
        }
        // A resourceVersion elsewhere than metadata is content.
        let b = json!({"metadata": {"name": "p"}, "spec": {"resourceVersion": "1"}});
        let c = json!({"metadata": {"name": "p"}, "spec": {"resourceVersion": "2"}});
        assert!(!same_content(&b, &c));
        // Objects whose metadata is not a map compare whole.
        assert!(same_content(
            &json!({"metadata": 1}),
            &json!({"metadata": 1})
        ));
        assert!(!same_content(
            &json!({"metadata": 1}),
            &json!({"metadata": 2})
        ));
    }

    #[test]
    fn encoding_leaves_out_the_resource_version() {
        let mut object = json!({"metadata": {"name": "p", "resourceVersion": "7"}, "data": {}});
        let borrowed = encode(&object).unwrap();
        assert_eq!(
            object["metadata"]["resourceVersion"], "7",
            "encode takes a copy"
        );
        let owned = encode_owned(&mut object).unwrap();
        assert_eq!(borrowed, owned);
        let stored: Value = serde_json::from_slice(&owned).unwrap();
        assert_eq!(stored, json!({"metadata": {"name": "p"}, "data": {}}));
    }
}

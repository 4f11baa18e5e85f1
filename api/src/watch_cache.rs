//! The watch cache: one store watch per resource feeds a ring of recent, decoded events that every
//! API watch of that resource reads from, as kube-apiserver's cacher does.
//!
//! Without it each API watch opened its own store watch and decoded (and re-encoded) every event
//! itself; a thousand watchers of one resource meant a thousand decodes per write. Here an event
//! is decoded and encoded to JSON once, and each API watcher only filters it (namespace, label and
//! field selectors, on the few fields they can read) and copies the bytes out.
//!
//! ```text
//!  store watch ──► feeder task ──► ring: [ r7  r9  r12  r13 ]  covered_from = 6, seen = 14
//!  (one per resource,                        ▲          ▲
//!   prefix /registry/g/r/)       slow watcher┘          └ caught-up watcher (next = 15)
//! ```
//!
//! Each API watcher owns its next revision (`next`) and pulls from the ring the events at or after
//! it, so it can neither skip nor repeat one; a write only bumps a `tokio::sync::watch` channel.
//! Invariants: the ring is in revision order and holds every event of the resource with a
//! revision in `covered_from..=seen`; a watcher with `next < covered_from` has been overrun (the
//! ring dropped events it had not read) and is ended, so that its client re-watches — a slow
//! watcher never holds up the feeder or the others. A watch starting before `covered_from` is
//! not served here at all: the caller reads the store's history instead (or gets its 410).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use skiff_meta::{ResourceInfo, fields};
use skiff_store::{EventKind, KeyRange, Revision, Store, WatchRequest, WatchStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::registry::{ObjectFilter, WatchEvent, decode, decode_stored};

/// Events kept per resource when nothing else is configured.
pub const DEFAULT_CAPACITY: usize = 4096;

/// One change to one object of the resource, decoded once for every watcher.
///
/// An event keeps what its watchers need and no more: the object as JSON (encoded once for every
/// JSON and YAML watcher), what selectors read of it ([`fields::selectable_projection`]), and the
/// previous object's stored bytes. Decoded objects are not kept: a pod's `serde_json::Value` takes
/// five to ten times its JSON, and a ring of 4,096 of them (with their previous versions) held
/// ~190 MiB of a 1,000-pod rolling update (`skiff bench deployment` under heaptrack).
#[derive(Debug)]
pub struct CachedEvent {
    /// The revision of the change.
    pub revision: Revision,
    /// The object's storage key.
    pub key: Vec<u8>,
    /// The resource it is of (whose fields selectors read).
    info: &'static ResourceInfo,
    /// After a put: the object as JSON, and what selectors read of it. `None` for a delete.
    object: Option<(Bytes, Value)>,
    /// The stored bytes of the object before the change, if it existed. They are decoded only
    /// when a watcher needs the object itself (a delete, or a selector to evaluate): a watcher
    /// without selectors only needs to know that there was one.
    prev_stored: Option<Vec<u8>>,
    /// What selectors read of `prev_stored`; `None` inside if it does not decode.
    prev_selectable: OnceLock<Option<Value>>,
    /// `prev_stored` as JSON, with the change's revision as its resourceVersion (as a deleted
    /// object's is in Kubernetes).
    prev_json: OnceLock<Bytes>,
}

/// What one watcher sees of a [`CachedEvent`] once its selectors are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The object entered the watched set.
    Added,
    /// The object changed and still matches.
    Modified,
    /// The object left the watched set (the previous object is what is sent).
    Deleted,
}

impl Seen {
    /// The watch event type.
    pub fn as_str(self) -> &'static str {
        match self {
            Seen::Added => "ADDED",
            Seen::Modified => "MODIFIED",
            Seen::Deleted => "DELETED",
        }
    }
}

impl CachedEvent {
    /// What a watcher with `filter` sees of this change, if anything: an object that starts or
    /// stops matching is Added or Deleted, as Kubernetes' watch cache does.
    pub fn seen_by(&self, filter: Option<&ObjectFilter>) -> Option<Seen> {
        let matches = |o: &Value| filter.is_none_or(|f| f(o));
        let was = match filter {
            // Everything matches: whether there was an object before is enough.
            None => self.prev_stored.is_some(),
            Some(_) => self.prev_selectable().is_some_and(&matches),
        };
        match &self.object {
            None => was.then_some(Seen::Deleted),
            Some((_, new)) => match (was, matches(new)) {
                (false, true) => Some(Seen::Added),
                (true, true) => Some(Seen::Modified),
                (true, false) => Some(Seen::Deleted),
                (false, false) => None,
            },
        }
    }

    /// The object before the change, decoded, if it existed and decodes.
    fn decode_prev(&self) -> Option<Value> {
        let stored = self.prev_stored.as_deref()?;
        match decode_stored(&self.key, stored, self.revision) {
            Ok(object) => Some(object),
            Err(e) => {
                tracing::warn!(error = %e, "watch cache cannot decode a previous object");
                None
            }
        }
    }

    /// What selectors read of the object before the change (decoded on first use).
    fn prev_selectable(&self) -> Option<&Value> {
        self.prev_selectable
            .get_or_init(|| {
                self.decode_prev()
                    .map(|o| fields::selectable_projection(self.info, &o))
            })
            .as_ref()
    }

    /// The object a watcher is sent for `seen`, as JSON: the object after the change, or for
    /// Deleted the one before it (encoded on first use, then shared).
    pub fn json_for(&self, seen: Seen) -> &Bytes {
        match (seen, &self.object) {
            (Seen::Added | Seen::Modified, Some((json, _))) => json,
            _ => self.prev_json.get_or_init(|| {
                let prev = self.decode_prev().unwrap_or_default();
                Bytes::from(serde_json::to_vec(&prev).unwrap_or_default())
            }),
        }
    }

    /// As the registry's [`WatchEvent`] (for formats rendered per watcher), decoded from
    /// [`CachedEvent::json_for`].
    pub fn to_watch_event(&self, seen: Seen) -> WatchEvent {
        let object = serde_json::from_slice(self.json_for(seen)).unwrap_or_default();
        match seen {
            Seen::Added => WatchEvent::Added(object),
            Seen::Modified => WatchEvent::Modified(object),
            Seen::Deleted => WatchEvent::Deleted(object),
        }
    }
}

/// The ring of one resource, behind its cacher's mutex.
struct Ring {
    events: VecDeque<Arc<CachedEvent>>,
    capacity: usize,
    /// Every event with a revision in `covered_from..=seen` is in `events`.
    covered_from: Revision,
    /// The newest revision the feeder has seen everything up to.
    seen: Revision,
    /// The feeder ended (store error or shutdown): watchers end, and the next watch builds a
    /// new cacher.
    failed: bool,
}

impl Ring {
    fn push(&mut self, event: Arc<CachedEvent>) {
        if self.events.len() == self.capacity
            && let Some(evicted) = self.events.pop_front()
        {
            self.covered_from = evicted.revision.next();
        }
        self.events.push_back(event);
    }

    /// The events at or after `next` (at most `max`, but never part of a revision), and the
    /// revision to continue from; `None` when the ring no longer holds `next`.
    fn read_from(&self, next: Revision, max: usize) -> Option<(Vec<Arc<CachedEvent>>, Revision)> {
        if next < self.covered_from {
            return None;
        }
        let start = self.events.partition_point(|e| e.revision < next);
        let mut end = start;
        while end < self.events.len()
            && (end - start < max || self.events[end].revision == self.events[end - 1].revision)
        {
            end += 1;
        }
        let taken = self.events.range(start..end).cloned().collect();
        let after = match self.events.get(end) {
            Some(first_left) => first_left.revision,
            None => self.seen.next().max(next),
        };
        Some((taken, after))
    }
}

/// One resource's cacher: the ring and the channel that says it moved.
struct Cacher {
    ring: Mutex<Ring>,
    /// Carries `seen`; every API watcher of the resource waits on it.
    moved: watch::Sender<Revision>,
}

/// The watch caches of every resource watched so far.
pub struct WatchCache {
    store: Arc<dyn Store>,
    capacity: usize,
    progress: Duration,
    shutdown: CancellationToken,
    /// One cacher per storage prefix. Lock order: this map, then a cacher's ring (never held
    /// across an await).
    cachers: Mutex<HashMap<String, Arc<Cacher>>>,
}

/// Why a [`CacheWatch`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The watcher fell so far behind that the ring dropped events it had not read.
    Overrun,
    /// The cacher stopped (store error or shutdown).
    Stopped,
}

/// An API watcher reading a resource's ring.
pub struct CacheWatch {
    cacher: Arc<Cacher>,
    moved: watch::Receiver<Revision>,
    /// Every event before this revision has been handed out.
    next: Revision,
    /// The storage prefix of the watched namespace (or of the whole resource).
    prefix: Vec<u8>,
}

/// Most events handed to a watcher at once.
const BATCH: usize = 256;

impl CacheWatch {
    /// The next events of the watched resource (any namespace; see [`CacheWatch::in_scope`]),
    /// waiting until there are some. Cancel-safe.
    pub async fn next(&mut self) -> Result<Vec<Arc<CachedEvent>>, Ended> {
        loop {
            {
                let ring = self.cacher.ring.lock().expect("watch cache ring poisoned");
                if ring.failed {
                    return Err(Ended::Stopped);
                }
                let (events, after) = ring.read_from(self.next, BATCH).ok_or(Ended::Overrun)?;
                self.next = after;
                if !events.is_empty() {
                    return Ok(events);
                }
            }
            if self.moved.changed().await.is_err() {
                return Err(Ended::Stopped);
            }
        }
    }

    /// Whether `event` is in the watched namespace.
    pub fn in_scope(&self, event: &CachedEvent) -> bool {
        event.key.starts_with(&self.prefix)
    }

    /// The revision up to which this watcher has been handed every event (for bookmarks).
    pub fn progress(&self) -> Revision {
        Revision(self.next.0.saturating_sub(1))
    }
}

impl WatchCache {
    /// Watch caches over `store`, `capacity` events per resource; each resource's store watch asks
    /// for progress notifications every `progress` so that idle watchers' bookmarks advance.
    pub fn new(
        store: Arc<dyn Store>,
        capacity: usize,
        progress: Duration,
        shutdown: CancellationToken,
    ) -> WatchCache {
        WatchCache {
            store,
            capacity: capacity.max(1),
            progress,
            shutdown,
            cachers: Mutex::new(HashMap::new()),
        }
    }

    /// A watch of `info` (in `namespace`) from `start` (inclusive) served from the cache, or
    /// `None` when the cache cannot serve it (a start before the ring's window or the store's
    /// retained history, or beyond the store's next revision): the caller then watches the
    /// store, which keeps its semantics (410 for compacted history, an error for a future
    /// revision).
    pub async fn watch(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        start: Revision,
    ) -> Option<CacheWatch> {
        // History the store has compacted away is not served from the ring either, so that a
        // watch from a compacted revision gets its 410 whether or not the ring still holds it.
        let status = self.store.status();
        if start > status.revision.next() || start < status.compacted {
            return None;
        }
        let cacher = self.cacher(info).await?;
        let moved = cacher.moved.subscribe();
        {
            let ring = cacher.ring.lock().expect("watch cache ring poisoned");
            if ring.failed || start < ring.covered_from {
                return None;
            }
        }
        Some(CacheWatch {
            cacher,
            moved,
            next: start,
            prefix: info.storage_prefix_in(namespace).into_bytes(),
        })
    }

    async fn cacher(&self, info: &'static ResourceInfo) -> Option<Arc<Cacher>> {
        let prefix = info.storage_prefix_in(None);
        {
            let cachers = self.cachers.lock().expect("watch cache map poisoned");
            if let Some(cacher) = cachers.get(&prefix)
                && !cacher
                    .ring
                    .lock()
                    .expect("watch cache ring poisoned")
                    .failed
            {
                return Some(cacher.clone());
            }
        }
        // Start a feeder at the current revision; two racing watches may both start one, and the
        // loser's is dropped (its store watch with it).
        let current = self.store.status().revision;
        let request = WatchRequest {
            range: KeyRange::prefix(prefix.clone().into_bytes()),
            start_revision: Some(current.next()),
            prev_kv: true,
            progress_notify: Some(self.progress),
        };
        let stream = match self.store.watch(request).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(prefix, error = %e, "watch cache cannot watch the store");
                return None;
            }
        };
        let cacher = Arc::new(Cacher {
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                capacity: self.capacity,
                covered_from: current.next(),
                seen: current,
                failed: false,
            }),
            moved: watch::channel(current).0,
        });
        {
            let mut cachers = self.cachers.lock().expect("watch cache map poisoned");
            if let Some(existing) = cachers.get(&prefix)
                && !existing
                    .ring
                    .lock()
                    .expect("watch cache ring poisoned")
                    .failed
            {
                return Some(existing.clone());
            }
            cachers.insert(prefix.clone(), cacher.clone());
        }
        tokio::spawn(feed(
            info,
            cacher.clone(),
            stream,
            self.shutdown.clone(),
            prefix,
        ));
        Some(cacher)
    }
}

/// The feeder: decodes each store event once and appends it to the ring.
async fn feed(
    info: &'static ResourceInfo,
    cacher: Arc<Cacher>,
    mut stream: WatchStream,
    shutdown: CancellationToken,
    prefix: String,
) {
    loop {
        let response = tokio::select! {
            _ = shutdown.cancelled() => break,
            next = stream.next() => match next {
                Some(Ok(response)) => response,
                Some(Err(e)) => {
                    tracing::warn!(prefix, error = %e, "watch cache's store watch failed");
                    break;
                }
                None => break,
            },
        };
        let mut decoded = Vec::with_capacity(response.events.len());
        for event in response.events {
            match decode_event(info, event) {
                Ok(e) => decoded.push(Arc::new(e)),
                Err(e) => {
                    tracing::warn!(prefix, error = %e, "watch cache cannot decode an event");
                }
            }
        }
        {
            let mut ring = cacher.ring.lock().expect("watch cache ring poisoned");
            for event in decoded {
                ring.push(event);
            }
            ring.seen = response.revision;
        }
        cacher.moved.send_replace(response.revision);
    }
    cacher
        .ring
        .lock()
        .expect("watch cache ring poisoned")
        .failed = true;
    // Wake every watcher so that it sees the failure.
    cacher.moved.send_modify(|_| {});
}

/// What an event keeps of a decoded object: its JSON and what selectors read of it.
fn json_and_selectable(info: &ResourceInfo, object: &Value) -> crate::Result<(Bytes, Value)> {
    let json = serde_json::to_vec(object)
        .map_err(|e| crate::Error::Internal(format!("cannot encode a watch event: {e}")))?;
    Ok((
        Bytes::from(json),
        fields::selectable_projection(info, object),
    ))
}

fn decode_event(
    info: &'static ResourceInfo,
    event: skiff_store::Event,
) -> crate::Result<CachedEvent> {
    let revision = event.kv.mod_revision;
    let object = match event.kind {
        EventKind::Delete => None,
        EventKind::Put => Some(json_and_selectable(info, &decode(&event.kv, revision)?)?),
    };
    let prev_stored = event.prev_kv.map(|prev| prev.value);
    let cached = CachedEvent {
        revision,
        key: event.kv.key,
        info,
        object,
        prev_stored,
        prev_selectable: OnceLock::new(),
        prev_json: OnceLock::new(),
    };
    // A delete is sent as its previous object: decode it now, once, so that a delete whose
    // object does not decode is dropped here like any other undecodable event.
    if event.kind == EventKind::Delete && cached.prev_stored.is_some() {
        let Some(prev) = cached.decode_prev() else {
            return Err(crate::Error::Internal(format!(
                "the deleted object under {} does not decode",
                String::from_utf8_lossy(&cached.key)
            )));
        };
        let (json, selectable) = json_and_selectable(info, &prev)?;
        let _ = cached.prev_selectable.set(Some(selectable));
        let _ = cached.prev_json.set(json);
    }
    Ok(cached)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skiff_store::{Config, SledStore};

    fn configmaps() -> &'static ResourceInfo {
        &skiff_kinds::builtin::config_map::INFO
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Arc<dyn Store>,
        cache: WatchCache,
    }

    fn fixture(capacity: usize) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::new(dir.path());
        config.fsync = false;
        let store: Arc<dyn Store> = Arc::new(SledStore::open(config).unwrap());
        let cache = WatchCache::new(
            store.clone(),
            capacity,
            Duration::from_secs(3600),
            CancellationToken::new(),
        );
        Fixture {
            _dir: dir,
            store,
            cache,
        }
    }

    async fn put(store: &Arc<dyn Store>, ns: &str, name: &str, app: &str) -> Revision {
        let key = configmaps().storage_key(Some(ns), name);
        let value = json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": app}}});
        let (rev, _) = store
            .put(key.into_bytes(), serde_json::to_vec(&value).unwrap(), None)
            .await
            .unwrap();
        rev
    }

    async fn delete(store: &Arc<dyn Store>, ns: &str, name: &str) -> Revision {
        let key = configmaps().storage_key(Some(ns), name);
        store
            .delete(KeyRange::key(key.into_bytes()))
            .await
            .unwrap()
            .0
    }

    /// What a watcher with `filter` is sent for the next `n` events in scope.
    async fn take(
        watch: &mut CacheWatch,
        filter: Option<&ObjectFilter>,
        n: usize,
    ) -> Vec<(Seen, String, String)> {
        let mut out = Vec::new();
        while out.len() < n {
            let events = tokio::time::timeout(Duration::from_secs(10), watch.next())
                .await
                .expect("events in time")
                .expect("watch open");
            for event in events.iter().filter(|e| watch.in_scope(e)) {
                if let Some(seen) = event.seen_by(filter) {
                    let object: Value = serde_json::from_slice(event.json_for(seen)).unwrap();
                    out.push((
                        seen,
                        object["metadata"]["name"].as_str().unwrap().to_string(),
                        object["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                    ));
                }
            }
        }
        out
    }

    #[tokio::test]
    async fn watchers_share_one_feed_and_each_sees_its_namespace_in_order() {
        let f = fixture(64);
        let info = configmaps();
        let start = f.store.status().revision.next();
        let mut all = f.cache.watch(info, None, start).await.unwrap();
        let mut only_a = f.cache.watch(info, Some("a"), start).await.unwrap();
        let r1 = put(&f.store, "a", "x", "web").await;
        let r2 = put(&f.store, "b", "y", "web").await;
        let r3 = put(&f.store, "a", "x", "db").await;
        let r4 = delete(&f.store, "a", "x").await;
        let seen = take(&mut all, None, 4).await;
        assert_eq!(
            seen,
            [
                (Seen::Added, "x".into(), r1.to_string()),
                (Seen::Added, "y".into(), r2.to_string()),
                (Seen::Modified, "x".into(), r3.to_string()),
                (Seen::Deleted, "x".into(), r4.to_string()),
            ]
        );
        let seen = take(&mut only_a, None, 3).await;
        let names: Vec<_> = seen.iter().map(|(s, n, _)| (*s, n.as_str())).collect();
        assert_eq!(
            names,
            [
                (Seen::Added, "x"),
                (Seen::Modified, "x"),
                (Seen::Deleted, "x")
            ]
        );
        // One cacher for the resource, whatever the namespaces watched.
        assert_eq!(f.cache.cachers.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_start_inside_the_window_replays_exactly_from_there() {
        let f = fixture(64);
        let info = configmaps();
        let _first = f
            .cache
            .watch(info, None, f.store.status().revision.next())
            .await
            .unwrap();
        let mut revisions = Vec::new();
        for i in 0..5 {
            revisions.push(put(&f.store, "a", &format!("o{i}"), "web").await);
        }
        // Wait until the feeder has seen the last write.
        let mut probe = f.cache.watch(info, None, revisions[4]).await.unwrap();
        take(&mut probe, None, 1).await;
        let mut late = f.cache.watch(info, None, revisions[2]).await.unwrap();
        let seen = take(&mut late, None, 3).await;
        let names: Vec<_> = seen.iter().map(|(_, n, _)| n.as_str()).collect();
        assert_eq!(names, ["o2", "o3", "o4"]);
        // Nothing more, and nothing repeated, until the next write.
        let r = put(&f.store, "a", "o5", "web").await;
        assert_eq!(take(&mut late, None, 1).await[0].2, r.to_string());
    }

    #[tokio::test]
    async fn starts_before_the_window_or_in_the_future_are_left_to_the_store() {
        let f = fixture(2);
        let info = configmaps();
        let before = put(&f.store, "a", "early", "web").await;
        let start = f.store.status().revision.next();
        assert!(f.cache.watch(info, None, start).await.is_some());
        assert!(f.cache.watch(info, None, before).await.is_none());
        assert!(f.cache.watch(info, None, start.next()).await.is_none());
        // Overflow the ring of 2: its window moves past `start`.
        let mut last = start;
        for i in 0..4 {
            last = put(&f.store, "a", &format!("o{i}"), "web").await;
        }
        let mut probe = f.cache.watch(info, None, last).await.unwrap();
        take(&mut probe, None, 1).await;
        assert!(f.cache.watch(info, None, start).await.is_none());
    }

    #[tokio::test]
    async fn history_the_store_compacted_is_not_served_even_inside_the_window() {
        let f = fixture(64);
        let info = configmaps();
        let start = f.store.status().revision.next();
        let _feed = f.cache.watch(info, None, start).await.unwrap();
        let mut revisions = Vec::new();
        for i in 0..4 {
            revisions.push(put(&f.store, "a", &format!("o{i}"), "web").await);
        }
        let mut probe = f.cache.watch(info, None, revisions[3]).await.unwrap();
        take(&mut probe, None, 1).await;
        assert!(f.cache.watch(info, None, revisions[1]).await.is_some());
        f.store.compact(revisions[2]).await.unwrap();
        // The ring still holds revisions[1], but the store says it is gone: so must the cache.
        assert!(f.cache.watch(info, None, revisions[1]).await.is_none());
        let mut kept = f.cache.watch(info, None, revisions[2]).await.unwrap();
        let names: Vec<_> = take(&mut kept, None, 2)
            .await
            .into_iter()
            .map(|(_, n, _)| n)
            .collect();
        assert_eq!(names, ["o2", "o3"]);
    }

    #[tokio::test]
    async fn a_watcher_overrun_by_the_ring_is_ended_and_others_carry_on() {
        let f = fixture(4);
        let info = configmaps();
        let start = f.store.status().revision.next();
        let mut slow = f.cache.watch(info, None, start).await.unwrap();
        let mut fast = f.cache.watch(info, None, start).await.unwrap();
        for i in 0..10 {
            put(&f.store, "a", &format!("o{i}"), "web").await;
            take(&mut fast, None, 1).await;
        }
        assert!(matches!(slow.next().await, Err(Ended::Overrun)));
        put(&f.store, "a", "after", "web").await;
        assert_eq!(take(&mut fast, None, 1).await[0].1, "after");
    }

    #[tokio::test]
    async fn selectors_turn_changes_into_added_and_deleted_and_json_is_encoded_once() {
        let f = fixture(64);
        let info = configmaps();
        let start = f.store.status().revision.next();
        let mut watch = f.cache.watch(info, None, start).await.unwrap();
        let web: ObjectFilter = Arc::new(|o: &Value| o["metadata"]["labels"]["app"] == "web");
        put(&f.store, "a", "x", "db").await;
        put(&f.store, "a", "x", "web").await;
        put(&f.store, "a", "x", "web").await;
        put(&f.store, "a", "x", "db").await;
        put(&f.store, "a", "y", "web").await;
        let seen = take(&mut watch, Some(&web), 4).await;
        let kinds: Vec<_> = seen.iter().map(|(s, n, _)| (*s, n.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (Seen::Added, "x"),
                (Seen::Modified, "x"),
                (Seen::Deleted, "x"),
                (Seen::Added, "y"),
            ]
        );
        let ring = f
            .cache
            .cachers
            .lock()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone();
        let event = ring.ring.lock().unwrap().events.back().unwrap().clone();
        let first = event.json_for(Seen::Added).as_ptr();
        assert_eq!(event.json_for(Seen::Added).as_ptr(), first);
        let decoded: Value = serde_json::from_slice(event.json_for(Seen::Added)).unwrap();
        assert_eq!(decoded["metadata"]["labels"]["app"], "web");
        assert_eq!(
            decoded["metadata"]["resourceVersion"],
            event.revision.to_string()
        );
        // The event keeps what selectors read, not the whole object.
        let (_, selectable) = event.object.as_ref().unwrap();
        assert_eq!(
            selectable,
            &json!({"metadata": {"name": "y", "namespace": "a", "labels": {"app": "web"}}})
        );
    }
}

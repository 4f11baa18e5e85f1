//! Informers: a reflector that mirrors one kind into a [`Cache`], event handlers, periodic
//! resync, and the factory that shares one informer per kind within a process.
//!
//! # The reflector's contract
//! - It lists (in pages), then watches from the list's revision. Every event it applies moves
//!   the cache forward: an event whose object is not newer than the cached copy is dropped, so no
//!   handler ever sees an object's revision go backwards.
//! - A watch that ends (the server's timeout) or breaks (connection lost, server restarted) is
//!   re-opened from the last revision seen, events or bookmarks alike. Only when the server says
//!   that revision is gone (410, compacted) does the reflector list again; the relist is diffed
//!   against the cache and delivered as adds, updates and deletes, in revision order.
//! - A watch that says nothing for [`WATCH_SILENCE`] is taken for a lost connection (a NAT or
//!   firewall that forgot it tells neither side) and re-opened the same way. The reflector asks
//!   for bookmarks, which skiff's API server sends every 15 s, so a live watch is never that
//!   quiet. A watch whose response does not begin within that time is given up too (it went out
//!   on a pooled connection lost the same way).
//! - Errors back off exponentially with jitter (200 ms doubling to 30 s), reset by success.
//!
//! Handlers run on the reflector's task, in event order, one at a time: they must not block
//! (controllers enqueue a key and return).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cache::{Cache, key_of, revision_of};

/// Reacts to changes of one kind. Handlers must return quickly.
pub trait EventHandler<K>: Send + Sync {
    /// A new object appeared (also once per cached object when the handler is added late).
    fn on_add(&self, obj: &Arc<K>) {
        let _ = obj;
    }
    /// An object changed; on a resync `old` and `new` are the same object.
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        let _ = (old, new);
    }
    /// An object was deleted (its last known state).
    fn on_delete(&self, obj: &Arc<K>) {
        let _ = obj;
    }
}

/// A shared handler is a handler (keep an `Arc` to inspect it while the informer calls it).
impl<K, H: EventHandler<K> + ?Sized> EventHandler<K> for Arc<H> {
    fn on_add(&self, obj: &Arc<K>) {
        (**self).on_add(obj)
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        (**self).on_update(old, new)
    }
    fn on_delete(&self, obj: &Arc<K>) {
        (**self).on_delete(obj)
    }
}

/// An [`EventHandler`] from three closures.
pub struct FnHandler<A, U, D> {
    add: A,
    update: U,
    delete: D,
}

/// An [`EventHandler`] made of closures for add, update and delete.
pub fn handler_fn<K, A, U, D>(add: A, update: U, delete: D) -> FnHandler<A, U, D>
where
    A: Fn(&Arc<K>) + Send + Sync,
    U: Fn(&Arc<K>, &Arc<K>) + Send + Sync,
    D: Fn(&Arc<K>) + Send + Sync,
{
    FnHandler {
        add,
        update,
        delete,
    }
}

impl<K, A, U, D> EventHandler<K> for FnHandler<A, U, D>
where
    A: Fn(&Arc<K>) + Send + Sync,
    U: Fn(&Arc<K>, &Arc<K>) + Send + Sync,
    D: Fn(&Arc<K>) + Send + Sync,
{
    fn on_add(&self, obj: &Arc<K>) {
        (self.add)(obj)
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        (self.update)(old, new)
    }
    fn on_delete(&self, obj: &Arc<K>) {
        (self.delete)(obj)
    }
}

/// What an informer lists and watches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ListOptions {
    /// Only this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// A label selector.
    pub label_selector: Option<String>,
    /// A field selector (e.g. `spec.nodeName=node-1`).
    pub field_selector: Option<String>,
    /// Objects per list page (0: the default, 500).
    pub page_size: u32,
    /// Resync period: every cached object is handed to `on_update(obj, obj)` this often.
    pub resync: Option<Duration>,
    /// How long a watch may say nothing, not even a bookmark, before it is given up for a lost
    /// connection and re-opened (None: [`WATCH_SILENCE`]).
    pub watch_silence: Option<Duration>,
}

/// How long a watch may say nothing before the reflector re-opens it: four of the skiff API
/// server's bookmark intervals. kube-rs's watcher waits out the watch's whole server-side
/// timeout (about 5 minutes) instead, and client-go leaves it to HTTP/2 pings.
pub const WATCH_SILENCE: Duration = Duration::from_secs(60);

impl ListOptions {
    /// Restricts to `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }
    /// Restricts by a label selector.
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_string());
        self
    }
    /// Restricts by a field selector.
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_string());
        self
    }
    /// Sets the resync period.
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }
    /// Sets how long a watch may be silent before it is re-opened.
    pub fn watch_silence(mut self, limit: Duration) -> Self {
        self.watch_silence = Some(limit);
        self
    }

    fn fields_with_namespace(&self) -> Option<String> {
        let ns = self
            .namespace
            .as_ref()
            .map(|ns| format!("metadata.namespace={ns}"));
        match (ns, &self.field_selector) {
            (Some(a), Some(b)) => Some(format!("{a},{b}")),
            (a, b) => a.or_else(|| b.clone()),
        }
    }
}

/// Counters describing what a reflector has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InformerStats {
    /// Complete lists (the first one included).
    pub lists: u64,
    /// Lists forced by a 410 Gone (history compacted past the last revision seen).
    pub relists_after_gone: u64,
    /// Watches opened.
    pub watches: u64,
    /// Watches given up after [`ListOptions::watch_silence`] without a word (before their
    /// response began, or after).
    pub silent_watches: u64,
    /// Watch events applied to the cache.
    pub events: u64,
    /// The newest revision seen (list, event or bookmark).
    pub revision: u64,
}

#[derive(Default)]
struct Counters {
    lists: AtomicU64,
    gone: AtomicU64,
    watches: AtomicU64,
    silent: AtomicU64,
    events: AtomicU64,
    revision: AtomicU64,
}

/// The bounds an object type needs to be mirrored into a cache, whatever its dynamic type
/// (a typed kind, or [`DynamicObject`] for a kind known only from discovery).
pub trait Reflectable: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {}
impl<K> Reflectable for K where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// The bounds a kind needs to be informed on by type alone.
pub trait Informable: Reflectable + Resource<DynamicType = ()> {}
impl<K> Informable for K where K: Reflectable + Resource<DynamicType = ()> {}

struct Shared<K> {
    api: Api<K>,
    /// The kind's name, for logs.
    kind: String,
    options: ListOptions,
    cache: Cache<K>,
    /// Handlers, locked while events are applied and dispatched so that a handler added late
    /// sees every object exactly once (replayed adds, then live events).
    handlers: Mutex<Vec<Arc<dyn EventHandler<K>>>>,
    synced: watch::Sender<bool>,
    started: AtomicBool,
    counters: Counters,
}

/// Mirrors one kind (optionally narrowed by namespace and selectors) into a cache.
pub struct Informer<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            shared: self.shared.clone(),
        }
    }
}

impl<K: Informable> Informer<K> {
    /// An informer on `client` that is not running yet (see [`Informer::run`]); most code gets
    /// informers from a [`SharedInformerFactory`] instead.
    pub fn new(client: Client, options: ListOptions) -> Informer<K> {
        Informer::with_api(Api::all(client), K::kind(&()).to_string(), options)
    }
}

impl<K: Reflectable> Informer<K> {
    /// An informer reading `api` (which must address all namespaces: `options` narrows it),
    /// for kinds whose type alone does not say where they are served (`DynamicObject`).
    pub fn with_api(api: Api<K>, kind: String, options: ListOptions) -> Informer<K> {
        let (synced, _) = watch::channel(false);
        Informer {
            shared: Arc::new(Shared {
                api,
                kind,
                options,
                cache: Cache::new(),
                handlers: Mutex::new(Vec::new()),
                synced,
                started: AtomicBool::new(false),
                counters: Counters::default(),
            }),
        }
    }

    /// The cache this informer keeps.
    pub fn cache(&self) -> &Cache<K> {
        &self.shared.cache
    }

    /// The API this informer reads (all namespaces).
    pub fn api(&self) -> &Api<K> {
        &self.shared.api
    }

    /// Adds an index to the cache (a no-op if one of that name exists).
    pub fn add_index(&self, name: &str, f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) {
        if !self.shared.cache.has_index(name) {
            self.shared.cache.add_index(name, f);
        }
    }

    /// Adds an event handler. Added after objects are cached, it first gets an add for each.
    pub fn add_handler(&self, handler: impl EventHandler<K> + 'static) {
        let handler: Arc<dyn EventHandler<K>> = Arc::new(handler);
        let mut handlers = self.shared.handlers.lock().expect("handlers lock");
        for obj in self.shared.cache.list() {
            handler.on_add(&obj);
        }
        handlers.push(handler);
    }

    /// Whether the first list has been applied.
    pub fn has_synced(&self) -> bool {
        *self.shared.synced.borrow()
    }

    /// Waits until the first list has been applied.
    pub async fn wait_for_sync(&self) {
        let mut rx = self.shared.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// What the reflector has done so far.
    pub fn stats(&self) -> InformerStats {
        let c = &self.shared.counters;
        InformerStats {
            lists: c.lists.load(Ordering::Relaxed),
            relists_after_gone: c.gone.load(Ordering::Relaxed),
            watches: c.watches.load(Ordering::Relaxed),
            silent_watches: c.silent.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            revision: c.revision.load(Ordering::Relaxed),
        }
    }

    /// Spawns [`Informer::run`] unless it already runs.
    pub fn start(&self, shutdown: CancellationToken) {
        if !self.shared.started.swap(true, Ordering::SeqCst) {
            let this = self.clone();
            tokio::spawn(async move { this.reflect(shutdown).await });
        }
    }

    /// Runs the reflector until `shutdown` (if it was not started already).
    pub async fn run(&self, shutdown: CancellationToken) {
        if !self.shared.started.swap(true, Ordering::SeqCst) {
            self.reflect(shutdown).await
        }
    }

    async fn reflect(&self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new();
        let mut revision: Option<String> = None;
        let mut resync = self.shared.options.resync.map(|period| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let rv = match revision.clone() {
                Some(rv) => rv,
                None => {
                    let listed = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        listed = self.list_all() => listed,
                    };
                    match listed {
                        Ok((items, rv)) => {
                            self.replace(items, &rv);
                            self.shared.synced.send_replace(true);
                            backoff.reset();
                            revision = Some(rv.clone());
                            rv
                        }
                        Err(e) => {
                            tracing::warn!(kind = %self.shared.kind, error = %e, "list failed; retrying");
                            if backoff.wait(&shutdown).await {
                                return;
                            }
                            continue;
                        }
                    }
                }
            };
            match self
                .watch_from(&rv, &mut revision, &mut resync, &mut backoff, &shutdown)
                .await
            {
                WatchEnd::Shutdown => return,
                WatchEnd::Gone => {
                    self.shared.counters.gone.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(kind = %self.shared.kind, revision = %rv, "watch revision compacted; relisting");
                    revision = None;
                }
                WatchEnd::Closed => {}
                WatchEnd::Failed => {
                    if backoff.wait(&shutdown).await {
                        return;
                    }
                }
            }
        }
    }

    /// One watch from `rv`, applying events until it ends.
    async fn watch_from(
        &self,
        rv: &str,
        revision: &mut Option<String>,
        resync: &mut Option<tokio::time::Interval>,
        backoff: &mut Backoff,
        shutdown: &CancellationToken,
    ) -> WatchEnd {
        let options = &self.shared.options;
        let mut params = WatchParams::default().timeout(290);
        params.bookmarks = true;
        params.label_selector = options.label_selector.clone();
        params.field_selector = options.fields_with_namespace();
        self.shared.counters.watches.fetch_add(1, Ordering::Relaxed);
        let silence = options.watch_silence.unwrap_or(WATCH_SILENCE);
        // A watch's response begins at once. One that does not within the silence limit went out
        // on a connection lost without a word (a pooled one, lost with the watch before it):
        // given up like a silent watch, which drops that connection, and tried again.
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return WatchEnd::Shutdown,
            stream = tokio::time::timeout(silence, self.shared.api.watch(&params, rv)) => match stream {
                Ok(stream) => stream,
                Err(_) => {
                    self.shared.counters.silent.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(kind = %self.shared.kind, silent_for = ?silence, "watch request unanswered; taking its connection for lost and rewatching");
                    return WatchEnd::Closed;
                }
            },
        };
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) if crate::status_code(&e) == Some(410) => return WatchEnd::Gone,
            Err(e) => {
                tracing::warn!(kind = %self.shared.kind, error = %e, "watch failed; retrying");
                return WatchEnd::Failed;
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut heard = tokio::time::Instant::now();
        loop {
            let tick = async {
                match resync.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                _ = shutdown.cancelled() => return WatchEnd::Shutdown,
                _ = tick => { self.resync(); continue; }
                event = tokio::time::timeout_at(heard + silence, stream.next()) => match event {
                    Ok(event) => {
                        heard = tokio::time::Instant::now();
                        event
                    }
                    Err(_) => {
                        self.shared.counters.silent.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(kind = %self.shared.kind, silent_for = ?silence, "watch said nothing, not even a bookmark; taking its connection for lost and rewatching");
                        return WatchEnd::Closed;
                    }
                },
            };
            match event {
                None => return WatchEnd::Closed,
                Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj))) => {
                    backoff.reset();
                    *revision = obj.meta().resource_version.clone().or(revision.take());
                    self.apply_upsert(obj);
                }
                Some(Ok(WatchEvent::Deleted(obj))) => {
                    backoff.reset();
                    *revision = obj.meta().resource_version.clone().or(revision.take());
                    self.apply_delete(obj);
                }
                Some(Ok(WatchEvent::Bookmark(bookmark))) => {
                    let rv = bookmark.metadata.resource_version;
                    self.note_revision(&rv);
                    *revision = Some(rv);
                }
                Some(Ok(WatchEvent::Error(status))) if status.code == 410 => {
                    return WatchEnd::Gone;
                }
                Some(Ok(WatchEvent::Error(status))) => {
                    tracing::warn!(kind = %self.shared.kind, code = status.code, message = %status.message, "watch error event");
                    return WatchEnd::Failed;
                }
                Some(Err(e)) => {
                    tracing::warn!(kind = %self.shared.kind, error = %e, "watch stream broke; rewatching");
                    return WatchEnd::Failed;
                }
            }
        }
    }

    /// Lists every page; returns the objects and the list's revision.
    async fn list_all(&self) -> crate::Result<(Vec<K>, String)> {
        let options = &self.shared.options;
        let page_size = if options.page_size == 0 {
            500
        } else {
            options.page_size
        };
        let mut params = ListParams::default().limit(page_size);
        params.label_selector = options.label_selector.clone();
        params.field_selector = options.fields_with_namespace();
        let mut items = Vec::new();
        let first = self.shared.api.list(&params).await?;
        let rv = first.metadata.resource_version.clone().unwrap_or_default();
        let mut next = first.metadata.continue_.clone();
        items.extend(first.items);
        while let Some(token) = next.filter(|t| !t.is_empty()) {
            let page = self
                .shared
                .api
                .list(&params.clone().continue_token(&token))
                .await?;
            next = page.metadata.continue_.clone();
            items.extend(page.items);
        }
        self.shared.counters.lists.fetch_add(1, Ordering::Relaxed);
        self.note_revision(&rv);
        Ok((items, rv))
    }

    fn note_revision(&self, rv: &str) {
        if let Ok(rv) = rv.parse::<u64>() {
            self.shared
                .counters
                .revision
                .fetch_max(rv, Ordering::Relaxed);
        }
    }

    /// Makes the cache hold exactly `items`, telling handlers what changed.
    fn replace(&self, items: Vec<K>, rv: &str) {
        let handlers = self.shared.handlers.lock().expect("handlers lock");
        let cache = &self.shared.cache;
        let mut fresh: HashMap<String, Arc<K>> = items
            .into_iter()
            .map(|obj| (key_of(&obj), Arc::new(obj)))
            .collect();
        for key in cache.keys() {
            if !fresh.contains_key(&key)
                && let Some(old) = cache.remove(&key)
            {
                for h in handlers.iter() {
                    h.on_delete(&old);
                }
            }
        }
        let mut ordered: Vec<Arc<K>> = fresh.drain().map(|(_, obj)| obj).collect();
        ordered.sort_by_key(|obj| revision_of(obj.as_ref()));
        for obj in ordered {
            match cache.get_by_key(&key_of(obj.as_ref())) {
                Some(old) if revision_of(old.as_ref()) >= revision_of(obj.as_ref()) => {}
                Some(_) => {
                    let old = cache.upsert(obj.clone()).expect("present");
                    for h in handlers.iter() {
                        h.on_update(&old, &obj);
                    }
                }
                None => {
                    cache.upsert(obj.clone());
                    for h in handlers.iter() {
                        h.on_add(&obj);
                    }
                }
            }
        }
        tracing::debug!(kind = %self.shared.kind, revision = rv, objects = cache.len(), "listed");
    }

    fn apply_upsert(&self, obj: K) {
        self.shared.counters.events.fetch_add(1, Ordering::Relaxed);
        let new_rv = revision_of(&obj);
        if let Some(rv) = &obj.meta().resource_version {
            self.note_revision(rv);
        }
        let handlers = self.shared.handlers.lock().expect("handlers lock");
        let cache = &self.shared.cache;
        let obj = Arc::new(obj);
        match cache.get_by_key(&key_of(obj.as_ref())) {
            Some(old) if revision_of(old.as_ref()) >= new_rv => {}
            Some(_) => {
                let old = cache.upsert(obj.clone()).expect("present");
                for h in handlers.iter() {
                    h.on_update(&old, &obj);
                }
            }
            None => {
                cache.upsert(obj.clone());
                for h in handlers.iter() {
                    h.on_add(&obj);
                }
            }
        }
    }

    fn apply_delete(&self, obj: K) {
        self.shared.counters.events.fetch_add(1, Ordering::Relaxed);
        if let Some(rv) = &obj.meta().resource_version {
            self.note_revision(rv);
        }
        let handlers = self.shared.handlers.lock().expect("handlers lock");
        let key = key_of(&obj);
        if let Some(old) = self.shared.cache.remove(&key) {
            // Hand out the final state the server sent (it is the newer one).
            let last = if revision_of(&obj) >= revision_of(old.as_ref()) {
                Arc::new(obj)
            } else {
                old
            };
            for h in handlers.iter() {
                h.on_delete(&last);
            }
        }
    }

    fn resync(&self) {
        let handlers = self.shared.handlers.lock().expect("handlers lock");
        for obj in self.shared.cache.list() {
            for h in handlers.iter() {
                h.on_update(&obj, &obj);
            }
        }
    }
}

enum WatchEnd {
    Shutdown,
    Gone,
    Closed,
    Failed,
}

/// Exponential backoff with jitter: 200 ms doubling to 30 s, each wait drawn from [d/2, d].
struct Backoff {
    next: Duration,
}

impl Backoff {
    const INITIAL: Duration = Duration::from_millis(200);
    const MAX: Duration = Duration::from_secs(30);

    fn new() -> Backoff {
        Backoff {
            next: Self::INITIAL,
        }
    }

    fn reset(&mut self) {
        self.next = Self::INITIAL;
    }

    /// Sleeps one step; true if `shutdown` came first.
    async fn wait(&mut self, shutdown: &CancellationToken) -> bool {
        let d = self.next;
        self.next = (d * 2).min(Self::MAX);
        let jittered = d.mul_f64(rand::random_range(0.5..=1.0));
        tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(jittered) => false,
        }
    }
}

/// What the factory needs of an informer of any kind.
trait Startable: Send + Sync {
    fn start(&self, shutdown: CancellationToken);
    fn synced(&self) -> watch::Receiver<bool>;
}

impl<K: Reflectable> Startable for Informer<K> {
    fn start(&self, shutdown: CancellationToken) {
        Informer::start(self, shutdown)
    }
    fn synced(&self) -> watch::Receiver<bool> {
        self.shared.synced.subscribe()
    }
}

struct Entry {
    informer: Box<dyn Any + Send + Sync>,
    startable: Arc<dyn Startable>,
}

/// Hands out one informer per (kind, options) so that the components of one process share one
/// list and one watch per kind.
#[derive(Clone)]
pub struct SharedInformerFactory {
    client: Client,
    /// Keyed by type, the resource of a dynamic kind (empty for typed ones) and the options.
    entries: Arc<Mutex<HashMap<(TypeId, String, ListOptions), Entry>>>,
    shutdown: Arc<Mutex<Option<CancellationToken>>>,
}

impl SharedInformerFactory {
    /// A factory on `client`.
    pub fn new(client: Client) -> SharedInformerFactory {
        SharedInformerFactory {
            client,
            entries: Arc::new(Mutex::new(HashMap::new())),
            shutdown: Arc::new(Mutex::new(None)),
        }
    }

    /// The client informers use.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The shared informer for every object of kind `K`.
    pub fn informer<K: Informable>(&self) -> Informer<K> {
        self.informer_with(ListOptions::default())
    }

    /// The shared informer for kind `K` narrowed by `options`. If the factory was started
    /// already, the informer starts at once.
    pub fn informer_with<K: Informable>(&self, options: ListOptions) -> Informer<K> {
        self.shared(String::new(), options, |client, options| {
            Informer::<K>::new(client, options)
        })
    }

    /// The shared informer for every object of a kind known from discovery, as
    /// [`DynamicObject`]s.
    pub fn dynamic_informer(&self, resource: &ApiResource) -> Informer<DynamicObject> {
        let id = format!("{}/{}", resource.api_version, resource.plural);
        self.shared(id, ListOptions::default(), |client, options| {
            Informer::with_api(
                Api::all_with(client, resource),
                resource.kind.clone(),
                options,
            )
        })
    }

    fn shared<K: Reflectable>(
        &self,
        id: String,
        options: ListOptions,
        make: impl FnOnce(Client, ListOptions) -> Informer<K>,
    ) -> Informer<K> {
        let mut entries = self.entries.lock().expect("factory lock");
        let key = (TypeId::of::<K>(), id, options.clone());
        if let Some(entry) = entries.get(&key) {
            return entry
                .informer
                .downcast_ref::<Informer<K>>()
                .expect("entry type matches its TypeId")
                .clone();
        }
        let informer = make(self.client.clone(), options);
        if let Some(shutdown) = self.shutdown.lock().expect("factory lock").clone() {
            informer.start(shutdown);
        }
        entries.insert(
            key,
            Entry {
                informer: Box::new(informer.clone()),
                startable: Arc::new(informer.clone()),
            },
        );
        informer
    }

    /// Starts every informer handed out so far (and those handed out later), until `shutdown`.
    pub fn start(&self, shutdown: CancellationToken) {
        *self.shutdown.lock().expect("factory lock") = Some(shutdown.clone());
        for entry in self.entries.lock().expect("factory lock").values() {
            entry.startable.start(shutdown.clone());
        }
    }

    /// Waits until every informer handed out so far has listed once.
    pub async fn wait_for_sync(&self) {
        let receivers: Vec<_> = self
            .entries
            .lock()
            .expect("factory lock")
            .values()
            .map(|e| e.startable.synced())
            .collect();
        futures::future::join_all(receivers.into_iter().map(|mut rx| async move {
            let _ = rx.wait_for(|s| *s).await;
        }))
        .await;
    }
}

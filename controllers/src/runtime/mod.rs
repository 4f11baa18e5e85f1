//! The one shape every controller has, in the spirit of kube-runtime's
//! `Controller::new(..).owns(..).run(..)`: informer events become keys on a rate-limited work
//! queue, workers reconcile one key at a time, and what a reconcile returns decides when the key
//! comes back.
//!
//! A controller's shell describes what it watches and hands the runtime its reconciler:
//! ```text
//! Controller::new("replicaset", workers)
//!     .primary(&sets)                                  // a ReplicaSet event: its own key
//!     .owns(&pods, "ReplicaSet", Some(expectations))   // a pod event: its controller's key
//!     .adopts(&pods, |pod| matching replica sets)      // an orphan pod: who may adopt it
//!     .run(reconciler)                                 // a Started, for the manager to start
//! ```
//! Everything is built on `skiff-client`'s shared informers and work queue, so the controllers of
//! a process share one watch per kind. A key is never reconciled by two workers at once; a
//! reconcile that fails is retried with per-key exponential backoff (and an overall token
//! bucket) up to [`MAX_RETRIES`] times, then waits for the key's next event.
//!
//! # Layout
//! - [`Event`] and [`Enqueue`]: an informer event, and the handler that maps it to keys.
//! - [`owners`]: from a child's controller reference to its owner's key (pure).
//! - [`Expectations`]: in-flight creates and deletes per owner.
//! - [`children`]: adopting, releasing, creating and deleting children through the API.
//! - [`Controller`], [`Reconcile`], [`Action`], [`Started`]: the builder, what a controller
//!   implements, what it returns, and what the manager starts once the caches are synced.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::discovery::{Discovery, Scope};
use skiff_client::informer::{EventHandler, Reflectable};
use skiff_client::{Client, Informer, WorkQueue, key_of};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Result;

pub mod children;
mod expectations;
pub mod owners;

pub use expectations::{EXPECTATIONS_TIMEOUT, Expectations};

/// An Event a controller's decision asks its shell to record on the object it decided about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub type_: skiff_client::events::EventType,
    /// The machine-readable reason (`SuccessfulCreate`).
    pub reason: &'static str,
    /// What happened.
    pub message: String,
}

impl Note {
    /// A routine event.
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Note {
        Note {
            type_: skiff_client::events::EventType::Normal,
            reason,
            message: message.into(),
        }
    }

    /// A problem.
    pub fn warning(reason: &'static str, message: impl Into<String>) -> Note {
        Note {
            type_: skiff_client::events::EventType::Warning,
            reason,
            message: message.into(),
        }
    }
}

/// A key is retried with backoff this many times before it waits for its next event.
pub const MAX_RETRIES: u32 = 15;

/// One change an informer saw.
#[derive(Debug)]
pub enum Event<'a, K> {
    /// A new object (also each cached object when a handler is added late).
    Added(&'a K),
    /// An object changed (on a resync, `old` and `new` are the same object).
    Updated {
        /// The object as it was.
        old: &'a K,
        /// The object as it is now.
        new: &'a K,
    },
    /// An object was deleted (its last known state).
    Deleted(&'a K),
}

impl<'a, K> Event<'a, K> {
    /// The object as the event leaves it (the last known state of a deleted one).
    pub fn object(&self) -> &'a K {
        match *self {
            Event::Added(o) | Event::Deleted(o) => o,
            Event::Updated { new, .. } => new,
        }
    }

    /// Whether this is a deletion.
    pub fn is_delete(&self) -> bool {
        matches!(self, Event::Deleted(_))
    }
}

/// The informer handler of a controller: maps each event to the keys that must be reconciled
/// and queues them (the queue drops a key that already waits). The mapping runs on the
/// informer's task, so it must be quick: look at caches, book expectations, return keys.
pub struct Enqueue<F> {
    queue: WorkQueue<String>,
    map: F,
}

impl<F> Enqueue<F> {
    /// A handler queueing on `queue` what `map` returns.
    pub fn new(queue: WorkQueue<String>, map: F) -> Enqueue<F> {
        Enqueue { queue, map }
    }

    fn queue_all(&self, keys: Vec<String>) {
        for k in keys {
            self.queue.add(k);
        }
    }
}

impl<K, F> EventHandler<K> for Enqueue<F>
where
    F: Fn(Event<'_, K>) -> Vec<String> + Send + Sync,
{
    fn on_add(&self, obj: &Arc<K>) {
        self.queue_all((self.map)(Event::Added(obj)));
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        self.queue_all((self.map)(Event::Updated { old, new }));
    }
    fn on_delete(&self, obj: &Arc<K>) {
        self.queue_all((self.map)(Event::Deleted(obj)));
    }
}

/// What a successful reconcile asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing more until the next event of the key.
    AwaitChange,
    /// Look again after this long (a deadline, a pod becoming available), or at the next event
    /// if that comes first.
    Requeue(Duration),
}

impl From<Option<Duration>> for Action {
    fn from(after: Option<Duration>) -> Action {
        after.map_or(Action::AwaitChange, Action::Requeue)
    }
}

/// A controller's reconciler: brings one key's world in line with its spec. Reads caches, calls
/// its pure logic, writes through the API; an error is retried with backoff.
pub trait Reconcile: Send + Sync + 'static {
    /// Reconciles the object (or other item) named by `key`.
    fn reconcile(&self, key: &str) -> impl Future<Output = Result<Action>> + Send;
}

/// What a worker does with a key after reconciling it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Done: clear its failures, and queue it again after the delay if one was asked for.
    Forget(Option<Duration>),
    /// Failed: queue it again after its backoff.
    Retry,
    /// Failed too often: clear its failures and wait for its next event.
    GiveUp,
}

/// The worker's decision for an outcome, `requeues` being how often the key was retried since
/// it last succeeded.
fn next<E>(outcome: &std::result::Result<Action, E>, requeues: u32) -> Next {
    match outcome {
        Ok(Action::AwaitChange) => Next::Forget(None),
        Ok(Action::Requeue(d)) => Next::Forget(Some(*d)),
        Err(_) if requeues < MAX_RETRIES => Next::Retry,
        Err(_) => Next::GiveUp,
    }
}

/// Drains `queue` with `reconciler` until the queue is shut down.
async fn work<R: Reconcile>(name: &'static str, queue: WorkQueue<String>, reconciler: Arc<R>) {
    while let Some(key) = queue.get().await {
        let outcome = reconciler.reconcile(&key).await;
        match next(&outcome, queue.num_requeues(&key)) {
            Next::Forget(after) => {
                queue.forget(&key);
                if let Some(d) = after {
                    queue.add_after(key.clone(), d);
                }
            }
            Next::Retry => {
                if let Err(e) = &outcome {
                    tracing::debug!(controller = name, %key, error = %e, "sync failed, retrying");
                }
                queue.add_rate_limited(key.clone());
            }
            Next::GiveUp => {
                if let Err(e) = &outcome {
                    tracing::warn!(controller = name, %key, error = %e, "sync failed, giving up until the next event");
                }
                queue.forget(&key);
            }
        }
        queue.done(&key);
    }
}

/// Lists every key a resync queues again.
type Keys = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// A controller being described: its name, its queue, what it watches, how many workers.
pub struct Controller {
    name: &'static str,
    queue: WorkQueue<String>,
    workers: usize,
    primary: Option<Keys>,
    resync: Option<Duration>,
}

impl Controller {
    /// A controller called `name` (as `--controllers` names it) with `workers` workers (at
    /// least one) and client-go's controller rate limiter.
    pub fn new(name: &'static str, workers: usize) -> Controller {
        Controller::with_queue(
            name,
            workers,
            WorkQueue::new(skiff_client::RateLimiter::default_controller()),
        )
    }

    /// A controller draining `queue` (tests use a fast rate limiter).
    pub fn with_queue(name: &'static str, workers: usize, queue: WorkQueue<String>) -> Controller {
        Controller {
            name,
            queue,
            workers: workers.max(1),
            primary: None,
            resync: None,
        }
    }

    /// The controller's queue, for handlers the builder does not cover.
    pub fn queue(&self) -> &WorkQueue<String> {
        &self.queue
    }

    /// Maps every event of `informer` with `map` to keys.
    pub fn watches<K, F>(self, informer: &Informer<K>, map: F) -> Controller
    where
        K: Reflectable,
        F: Fn(Event<'_, K>) -> Vec<String> + Send + Sync + 'static,
    {
        informer.add_handler(Enqueue::new(self.queue.clone(), map));
        self
    }

    /// The controller's own kind: each event queues the object's key (`namespace/name`, or the
    /// name of a cluster-scoped object), and a resync queues every cached one.
    pub fn primary<K: Reflectable>(self, informer: &Informer<K>) -> Controller {
        self.primary_with(informer, |_| {})
    }

    /// [`Controller::primary`], calling `on_delete` with the key of each deleted object before it
    /// is queued (to drop the state kept for it, such as expectations).
    pub fn primary_with<K, D>(mut self, informer: &Informer<K>, on_delete: D) -> Controller
    where
        K: Reflectable,
        D: Fn(&str) + Send + Sync + 'static,
    {
        let cache = informer.clone();
        self.primary = Some(Box::new(move || cache.cache().keys()));
        self.watches(informer, move |e: Event<'_, K>| {
            let key = key_of(e.object());
            if e.is_delete() {
                on_delete(&key);
            }
            vec![key]
        })
    }

    /// [`Controller::primary`] for only the events `wanted` picks (resyncs still queue every
    /// cached object): for a kind whose status others write, so that those writes do not each
    /// cost a reconcile.
    pub fn primary_if<K, P>(mut self, informer: &Informer<K>, wanted: P) -> Controller
    where
        K: Reflectable,
        P: Fn(&Event<'_, K>) -> bool + Send + Sync + 'static,
    {
        let cache = informer.clone();
        self.primary = Some(Box::new(move || cache.cache().keys()));
        self.watches(informer, move |e: Event<'_, K>| {
            if wanted(&e) {
                vec![key_of(e.object())]
            } else {
                Vec::new()
            }
        })
    }

    /// Children of kind `K` controlled by objects of kind `owner_kind`: an event of one queues
    /// its controller's key (and its former controller's, when the reference moved). With
    /// `expectations`, the event is booked against the owner's in-flight creates and deletes
    /// first, so the owner's sync sees it.
    pub fn owns<K: Reflectable>(
        self,
        informer: &Informer<K>,
        owner_kind: &'static str,
        expectations: Option<Arc<Expectations>>,
    ) -> Controller {
        self.watches(informer, move |e: Event<'_, K>| {
            if let Some(x) = &expectations {
                x.observe(&e, owner_kind);
            }
            owners::owner_keys(&e, owner_kind)
        })
    }

    /// Orphans of kind `K` (no controller reference) an owner may adopt: an orphan added or
    /// changed queues the keys `owners_for` gives (the owners whose selector matches it).
    pub fn adopts<K, F>(self, informer: &Informer<K>, owners_for: F) -> Controller
    where
        K: Reflectable,
        F: Fn(&K) -> Vec<String> + Send + Sync + 'static,
    {
        self.watches(informer, move |e: Event<'_, K>| {
            owners::orphan_of(&e).map(&owners_for).unwrap_or_default()
        })
    }

    /// Queues every key of the primary kind's cache again every `period` (a safety net for
    /// state that changes without events, such as time).
    pub fn resync(mut self, period: Duration) -> Controller {
        self.resync = Some(period);
        self
    }

    /// The controller, ready to start its workers with `reconciler` once the caches are synced.
    pub fn run<R: Reconcile>(self, reconciler: Arc<R>) -> Started {
        self.run_after(reconciler, |_, _| async { true })
    }

    /// [`Controller::run`], with the workers started only once `ready` (given the manager's
    /// task tracker and shutdown token) returns `true`; `false` means shutdown came first. The
    /// garbage collector discovers and syncs its monitors this way.
    pub fn run_after<R, F, Fut>(self, reconciler: Arc<R>, ready: F) -> Started
    where
        R: Reconcile,
        F: FnOnce(TaskTracker, CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        let Controller {
            name,
            queue,
            workers,
            primary,
            resync,
        } = self;
        let q = queue.clone();
        Started {
            name,
            queue,
            start: Box::new(move |tracker: &TaskTracker, shutdown: &CancellationToken| {
                let (t, s) = (tracker.clone(), shutdown.clone());
                tracker.spawn(async move {
                    if !ready(t.clone(), s.clone()).await {
                        return;
                    }
                    for _ in 0..workers {
                        t.spawn(work(name, q.clone(), reconciler.clone()));
                    }
                    if let (Some(period), Some(keys)) = (resync, primary) {
                        resync_loop(&q, period, keys, s).await;
                    }
                });
            }),
        }
    }
}

/// Queues every key `keys` lists each `period`, until `shutdown`.
async fn resync_loop(
    queue: &WorkQueue<String>,
    period: Duration,
    keys: Keys,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.cancelled() => return,
        }
        for k in keys() {
            queue.add(k);
        }
    }
}

/// A controller whose handlers are registered, waiting for the caches to sync.
pub struct Started {
    name: &'static str,
    queue: WorkQueue<String>,
    start: StartFn,
}

/// Starts a controller's workers on the manager's tracker.
type StartFn = Box<dyn FnOnce(&TaskTracker, &CancellationToken) + Send>;

impl Started {
    /// The controller's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Starts the workers (and resync) on `tracker`; returns the queue, to be shut down when the
    /// manager stops (the workers end once it drains).
    pub fn start(self, tracker: &TaskTracker, shutdown: &CancellationToken) -> WorkQueue<String> {
        (self.start)(tracker, shutdown);
        self.queue
    }
}

/// One served resource as discovery describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// API group (`""` for the core group).
    pub group: String,
    /// The version to use.
    pub version: String,
    /// Plural resource name (`pods`; subresources contain a `/`).
    pub plural: String,
    /// Kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// The verbs the API serves for it.
    pub verbs: Vec<String>,
}

impl Resource {
    /// Whether the API serves `verb` for it.
    pub fn can(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// Where it is served, for dynamic clients.
    pub fn api_resource(&self) -> kube::api::ApiResource {
        kube::api::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: if self.group.is_empty() {
                self.version.clone()
            } else {
                format!("{}/{}", self.group, self.version)
            },
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }
}

/// Every resource the API server serves, from its discovery documents (preferred versions
/// first, subresources left out).
pub async fn discover(client: &Client) -> Result<Vec<Resource>> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(crate::Error::Discovery)?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            out.push(Resource {
                group: ar.group.clone(),
                version: ar.version.clone(),
                plural: ar.plural.clone(),
                kind: ar.kind.clone(),
                namespaced: caps.scope == Scope::Namespaced,
                verbs: caps.operations.clone(),
            });
        }
    }
    Ok(out)
}

/// Whether a kube error is a 404.
pub fn not_found(e: &kube::Error) -> bool {
    skiff_client::status_code(e) == Some(404)
}

/// Whether a kube error is a 409 (AlreadyExists or Conflict).
pub fn conflict(e: &kube::Error) -> bool {
    skiff_client::status_code(e) == Some(409)
}

#[cfg(test)]
mod tests;

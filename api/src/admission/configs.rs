//! The in-memory copy of two cluster-scoped configuration kinds that an admission plugin reads on
//! every request — the webhook configurations (validating, mutating), the policies and their
//! bindings — kept current by a watch, as kube-apiserver's plugins keep theirs by an informer.
//!
//! Both kinds are listed at one revision, then followed from the next by one watch each; after a
//! watch error (the store's history compacted, the datastore gone), both are listed again a second
//! later. Readers take the current [`Snapshot`] as an `Arc` in a short critical section; every
//! change replaces it whole.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use skiff_meta::ResourceInfo;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::registry::{Registry, WatchEvent};

/// What a plugin makes of the two kinds' objects.
pub trait Snapshot: Default + Clone + Send + Sync + 'static {
    /// Sets (or, with no object, removes) the object `name` of the second kind (`second`) or
    /// the first.
    fn set(&mut self, second: bool, name: &str, object: Option<&Value>);
}

/// The copy, and which two kinds it follows.
pub struct Configs<S> {
    kinds: [&'static ResourceInfo; 2],
    /// What the log calls them.
    what: &'static str,
    snapshot: RwLock<Arc<S>>,
}

impl<S: Snapshot> Configs<S> {
    /// Nothing known yet of `kinds` (first, second).
    pub fn new(kinds: [&'static ResourceInfo; 2], what: &'static str) -> Configs<S> {
        Configs {
            kinds,
            what,
            snapshot: RwLock::default(),
        }
    }

    /// What is known now.
    pub fn snapshot(&self) -> Arc<S> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes what is known (replacing the snapshot whole).
    pub(crate) fn update(&self, change: impl FnOnce(&mut S)) {
        let mut guard = self.snapshot.write().unwrap_or_else(|e| e.into_inner());
        let mut next = (**guard).clone();
        change(&mut next);
        *guard = Arc::new(next);
    }

    /// Puts one object of the second kind (`second`) or the first into memory directly (tests
    /// without a watch).
    pub fn put(&self, second: bool, object: &Value) {
        self.update(|s| s.set(second, name_of(object), Some(object)));
    }

    /// Reads both kinds into memory and follows them until `shutdown`; after a watch error, lists
    /// again.
    pub async fn run(&self, registry: Registry, shutdown: CancellationToken) {
        loop {
            match self.follow(&registry, &shutdown).await {
                Ok(()) => return,
                Err(e) => tracing::warn!(error = %e, "{} watch ended; relisting", self.what),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    async fn follow(&self, registry: &Registry, shutdown: &CancellationToken) -> Result<()> {
        let mut fresh = S::default();
        let mut revision = registry.current_revision();
        for (info, second) in self.kinds.iter().zip([false, true]) {
            let list = registry
                .list(info, None, Some(revision), None, None, None)
                .await?;
            revision = list.revision;
            for object in &list.items {
                fresh.set(second, name_of(object), Some(object));
            }
        }
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        let start = skiff_store::Revision(revision.0 + 1);
        let (first, second) = (
            registry
                .watch(self.kinds[0], None, start, None, None)
                .await?,
            registry
                .watch(self.kinds[1], None, start, None, None)
                .await?,
        );
        let mut events =
            futures::stream::select(first.map(|e| (false, e)), second.map(|e| (true, e)));
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                next = events.next() => next,
            };
            let Some((second, event)) = next else {
                return Err(Error::Unavailable("the watch ended".into()));
            };
            let (object, present) = match event? {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, true),
                WatchEvent::Deleted(o) => (o, false),
                WatchEvent::Progress(_) => continue,
            };
            self.update(|s| s.set(second, name_of(&object), present.then_some(&object)));
        }
    }
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

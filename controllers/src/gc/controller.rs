//! The garbage collector's shell: a graph of every watched object by UID with its owner references (and
//! the reverse edges), fed by informers of every resource discovery says is served with list,
//! watch and delete; work items are UIDs whose owners or dependents changed. An owner missing from the graph is confirmed missing by a live read before
//! anything is deleted, so a lagging cache never costs an object.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use serde_json::json;
use skiff_client::informer::{Informable, Reflectable};
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue};
use tokio_util::sync::CancellationToken;

use super::{self as logic, Decision, OwnerState, OwnerWork, Propagation};
use crate::manager::Context;
use crate::runtime::{
    Action, Controller, Enqueue, Event, Reconcile, Resource, Started, conflict, discover, not_found,
};
use crate::{Error, Result};

/// One object of the graph.
#[derive(Clone, Debug)]
struct Vertex {
    resource: ApiResource,
    namespaced: bool,
    meta: ObjectMeta,
}

impl Vertex {
    fn name(&self) -> String {
        self.meta.name.clone().unwrap_or_default()
    }
    fn describe(&self) -> String {
        match &self.meta.namespace {
            Some(ns) => format!("{} {ns}/{}", self.resource.kind, self.name()),
            None => format!("{} {}", self.resource.kind, self.name()),
        }
    }
}

#[derive(Default)]
struct Graph {
    objects: HashMap<String, Vertex>,
    /// owner UID → dependent UIDs.
    dependents: HashMap<String, HashSet<String>>,
}

/// The resources the collector knows from discovery.
#[derive(Default)]
struct Kinds {
    /// (group, plural) of every resource watched.
    monitored: HashSet<(String, String)>,
    /// (group, kind) → where it is served, for live reads of owners.
    by_kind: HashMap<(String, String), (ApiResource, bool)>,
}

struct Collector {
    // Short critical sections only; never held across an await; never both at once.
    graph: Mutex<Graph>,
    kinds: Mutex<Kinds>,
    /// The controller's queue, for the monitors discovery adds later.
    queue: WorkQueue<String>,
    client: skiff_client::Client,
}

/// The trimmed metadata the graph keeps.
fn trim(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        owner_references: meta.owner_references.clone(),
        finalizers: meta.finalizers.clone(),
        deletion_timestamp: meta.deletion_timestamp.clone(),
        ..ObjectMeta::default()
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}

impl Collector {
    /// Updates the graph with one object's event; returns the UIDs to look at again.
    fn observe(
        &self,
        resource: &ApiResource,
        namespaced: bool,
        meta: &ObjectMeta,
        deleted: bool,
    ) -> Vec<String> {
        let Some(uid) = meta.uid.clone() else {
            return Vec::new();
        };
        let mut enqueue: Vec<String> = Vec::new();
        {
            let mut g = self.graph.lock().expect("graph lock");
            let old_owners: Vec<String> = g
                .objects
                .get(&uid)
                .map(|v| {
                    v.meta
                        .owner_references
                        .iter()
                        .flatten()
                        .map(|r| r.uid.clone())
                        .collect()
                })
                .unwrap_or_default();
            for o in &old_owners {
                if let Some(set) = g.dependents.get_mut(o) {
                    set.remove(&uid);
                    if set.is_empty() {
                        g.dependents.remove(o);
                    }
                }
            }
            let deps: Vec<String> = g
                .dependents
                .get(&uid)
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            if deleted {
                g.objects.remove(&uid);
                // Owners may be waiting for this one; dependents may now be dangling.
                enqueue.extend(old_owners);
                enqueue.extend(deps);
            } else {
                let owners: Vec<String> = meta
                    .owner_references
                    .iter()
                    .flatten()
                    .map(|r| r.uid.clone())
                    .collect();
                for o in &owners {
                    g.dependents
                        .entry(o.clone())
                        .or_default()
                        .insert(uid.clone());
                }
                let was_deleting = g
                    .objects
                    .get(&uid)
                    .is_some_and(|v| v.meta.deletion_timestamp.is_some());
                g.objects.insert(
                    uid.clone(),
                    Vertex {
                        resource: resource.clone(),
                        namespaced,
                        meta: trim(meta),
                    },
                );
                if !owners.is_empty() || logic::owner_work(meta) != OwnerWork::Nothing {
                    enqueue.push(uid.clone());
                }
                if meta.deletion_timestamp.is_some() && !was_deleting {
                    // Waiting owners hold their dependents differently from live ones.
                    enqueue.extend(deps);
                }
                // Owners dropped from the list may be waiting on this object no longer.
                enqueue.extend(old_owners.into_iter().filter(|o| !owners.contains(o)));
            }
        }
        enqueue
    }

    fn dynamic(
        &self,
        resource: &ApiResource,
        namespaced: bool,
        ns: Option<&str>,
    ) -> Api<DynamicObject> {
        match (namespaced, ns) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, resource),
            _ => Api::all_with(self.client.clone(), resource),
        }
    }

    /// The state of an owner of an object in namespace `ns`: from the graph when there, else by a
    /// live read (an owner of a kind the API does not serve is never presumed gone).
    async fn owner_state(&self, r: &OwnerReference, ns: Option<&str>) -> Result<OwnerState> {
        if let Some(v) = self.graph.lock().expect("graph lock").objects.get(&r.uid) {
            return Ok(logic::state_of(&v.meta));
        }
        let served = self
            .kinds
            .lock()
            .expect("kinds lock")
            .by_kind
            .get(&(group_of(&r.api_version).to_string(), r.kind.clone()))
            .cloned();
        let Some((resource, namespaced)) = served else {
            return Ok(OwnerState::Present);
        };
        let api = self.dynamic(&resource, namespaced, ns);
        match api.get_opt(&r.name).await {
            Ok(Some(o)) if o.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
                Ok(logic::state_of(&o.metadata))
            }
            Ok(_) => Ok(OwnerState::Absent),
            Err(e) => Err(Error::api(format!("reading owner {} {}", r.kind, r.name))(
                e,
            )),
        }
    }

    fn dependents_of(&self, uid: &str) -> Vec<Vertex> {
        let g = self.graph.lock().expect("graph lock");
        g.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| g.objects.get(d).cloned())
            .collect()
    }

    /// Drops the references to `uids` from `v`.
    async fn remove_owners(&self, v: &Vertex, uids: &[String]) -> Result<()> {
        let api = self.dynamic(&v.resource, v.namespaced, v.meta.namespace.as_deref());
        let refs = match logic::without_owners(&v.meta, uids) {
            Some(r) => json!(r),
            None => serde_json::Value::Null,
        };
        let patch = json!({"metadata": {"ownerReferences": refs, "uid": v.meta.uid}});
        match api
            .patch(&v.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(Error::api(format!(
                "removing owner references of {}",
                v.describe()
            ))(e)),
        }
    }

    async fn remove_finalizer(&self, v: &Vertex, finalizer: &str) -> Result<()> {
        let api = self.dynamic(&v.resource, v.namespaced, v.meta.namespace.as_deref());
        let kept = logic::without_finalizer(&v.meta, finalizer);
        let kept = if kept.is_empty() {
            serde_json::Value::Null
        } else {
            json!(kept)
        };
        // The resourceVersion makes a concurrent finalizer change a conflict, not a loss.
        let patch =
            json!({"metadata": {"finalizers": kept, "resourceVersion": v.meta.resource_version}});
        match api
            .patch(&v.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(Error::api(format!(
                "removing the {finalizer} finalizer of {}",
                v.describe()
            ))(e)),
        }
    }

    async fn delete(&self, v: &Vertex, propagation: Propagation) -> Result<()> {
        let api = self.dynamic(&v.resource, v.namespaced, v.meta.namespace.as_deref());
        let dp = DeleteParams {
            propagation_policy: Some(match propagation {
                Propagation::Background => PropagationPolicy::Background,
                Propagation::Foreground => PropagationPolicy::Foreground,
                Propagation::Orphan => PropagationPolicy::Orphan,
            }),
            preconditions: Some(Preconditions {
                uid: v.meta.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        tracing::debug!(object = %v.describe(), propagation = propagation.as_str(), "collecting");
        match api.delete(&v.name(), &dp).await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) || conflict(&e) => Ok(()),
            Err(e) => Err(Error::api(format!("deleting {}", v.describe()))(e)),
        }
    }
}

/// How often the served resources are discovered again, so that resources served later join
/// the graph (kube-controller-manager resyncs its monitors every 30 s too).
const REDISCOVER: Duration = Duration::from_secs(30);

/// Waits until one monitor's informer has listed once.
type Synced = BoxFuture<'static, ()>;

fn register<K: Reflectable>(
    c: &Arc<Collector>,
    informer: &Informer<K>,
    resource: ApiResource,
    namespaced: bool,
) -> Synced {
    let observer = c.clone();
    informer.add_handler(Enqueue::new(c.queue.clone(), move |e: Event<'_, K>| {
        observer.observe(&resource, namespaced, e.object().meta(), e.is_delete())
    }));
    let informer = informer.clone();
    Box::pin(async move { informer.wait_for_sync().await })
}

/// A typed shared informer when `K` is what `r` serves (so the collector shares the watch other
/// controllers of this process already hold), else `None`.
fn typed<K: Informable>(
    c: &Arc<Collector>,
    factory: &SharedInformerFactory,
    r: &Resource,
) -> Option<Synced> {
    let ar = ApiResource::erase::<K>(&());
    (ar.group == r.group && ar.version == r.version && ar.plural == r.plural)
        .then(|| register(c, &factory.informer::<K>(), ar, r.namespaced))
}

/// Starts watching one discovered resource.
fn monitor(c: &Arc<Collector>, factory: &SharedInformerFactory, r: &Resource) -> Synced {
    typed::<Pod>(c, factory, r)
        .or_else(|| typed::<ReplicaSet>(c, factory, r))
        .or_else(|| typed::<Deployment>(c, factory, r))
        .or_else(|| typed::<DaemonSet>(c, factory, r))
        .or_else(|| typed::<Service>(c, factory, r))
        .or_else(|| typed::<Endpoints>(c, factory, r))
        .or_else(|| typed::<EndpointSlice>(c, factory, r))
        .or_else(|| typed::<Namespace>(c, factory, r))
        .or_else(|| typed::<Node>(c, factory, r))
        .unwrap_or_else(|| {
            // Everything else (ConfigMaps, Secrets, Leases, kinds served later) as metadata
            // carried by dynamic objects, on an informer of its own.
            let ar = r.api_resource();
            register(c, &factory.dynamic_informer(&ar), ar, r.namespaced)
        })
}

impl Collector {
    /// Discovers the served resources and starts monitors for those not watched yet; returns
    /// how to wait for the new ones to sync.
    async fn sync_monitors(
        self: &Arc<Self>,
        factory: &SharedInformerFactory,
    ) -> Result<Vec<Synced>> {
        let discovered = logic::monitored(&discover(&self.client).await?);
        let mut fresh = Vec::new();
        for r in discovered {
            let known = {
                let mut kinds = self.kinds.lock().expect("kinds lock");
                let id = (r.group.clone(), r.plural.clone());
                let known = kinds.monitored.contains(&id);
                kinds.monitored.insert(id);
                kinds
                    .by_kind
                    .entry((r.group.clone(), r.kind.clone()))
                    .or_insert_with(|| (r.api_resource(), r.namespaced));
                known
            };
            if !known {
                tracing::debug!(group = %r.group, resource = %r.plural, "garbage collector watching");
                fresh.push(monitor(self, factory, &r));
            }
        }
        Ok(fresh)
    }
}

/// Registers the collector. Once the controllers' caches are synced it discovers the served
/// resources, watches every one served with list, watch and delete, waits for those monitors to
/// sync (an owner deleted in the foreground must see all its dependents), starts its workers,
/// and discovers again every [`REDISCOVER`].
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let controller = Controller::new("garbagecollector", ctx.workers.max(4));
    let c = Arc::new(Collector {
        graph: Mutex::new(Graph::default()),
        kinds: Mutex::new(Kinds::default()),
        queue: controller.queue().clone(),
        client: ctx.factory.client().clone(),
    });
    let factory = ctx.factory.clone();
    let monitors = c.clone();
    Ok(
        controller.run_after(c, move |tracker, shutdown| async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                match monitors.sync_monitors(&factory).await {
                    Ok(waits) => {
                        tokio::select! {
                            _ = futures::future::join_all(waits) => break,
                            _ = shutdown.cancelled() => return false,
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "garbage collector: discovery failed; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = shutdown.cancelled() => return false,
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                    }
                }
            }
            tracker.spawn(rediscover(monitors, factory, shutdown));
            true
        }),
    )
}

/// Discovers the served resources again every [`REDISCOVER`], until `shutdown`.
async fn rediscover(
    c: Arc<Collector>,
    factory: SharedInformerFactory,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(REDISCOVER) => {}
            _ = shutdown.cancelled() => return,
        }
        if let Err(e) = c.sync_monitors(&factory).await {
            tracing::debug!(error = %e, "garbage collector: rediscovery failed");
        }
    }
}

impl Reconcile for Collector {
    async fn reconcile(&self, uid: &str) -> Result<Action> {
        let Some(v) = self
            .graph
            .lock()
            .expect("graph lock")
            .objects
            .get(uid)
            .cloned()
        else {
            return Ok(Action::AwaitChange);
        };
        match logic::owner_work(&v.meta) {
            OwnerWork::Nothing => {}
            OwnerWork::Orphan => {
                for d in self.dependents_of(uid) {
                    self.remove_owners(&d, &[uid.to_string()]).await?;
                }
                self.remove_finalizer(&v, logic::ORPHAN).await?;
                return Ok(Action::AwaitChange);
            }
            OwnerWork::Foreground => {
                let blocking: Vec<Vertex> = self
                    .dependents_of(uid)
                    .into_iter()
                    .filter(|d| logic::blocks(&d.meta, uid))
                    .collect();
                if blocking.is_empty() {
                    self.remove_finalizer(&v, logic::FOREGROUND).await?;
                    return Ok(Action::AwaitChange);
                }
                for d in blocking
                    .iter()
                    .filter(|d| d.meta.deletion_timestamp.is_none())
                {
                    self.delete(d, Propagation::Foreground).await?;
                }
                // Their deletions bring this owner back.
                return Ok(Action::AwaitChange);
            }
        }
        let refs = v.meta.owner_references.clone().unwrap_or_default();
        if refs.is_empty() || v.meta.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        let mut states: HashMap<String, OwnerState> = HashMap::new();
        for r in &refs {
            let s = self.owner_state(r, v.meta.namespace.as_deref()).await?;
            states.insert(r.uid.clone(), s);
        }
        match logic::decide(&v.meta, |r| {
            states.get(&r.uid).copied().unwrap_or(OwnerState::Present)
        }) {
            Decision::Keep => {}
            Decision::RemoveOwners(uids) => self.remove_owners(&v, &uids).await?,
            Decision::Delete(p) => self.delete(&v, p).await?,
        }
        Ok(Action::AwaitChange)
    }
}

//! The ReplicaSet controller: keeps `replicas` pods per ReplicaSet, never overshooting while its
//! own creates and deletes are in flight (expectations), adopting and releasing pods by their
//! controller reference, and reporting status.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue, handler_fn, index, key_of};
use tokio_util::task::TaskTracker;

use super::{Started, conflict, not_found, queue, spawn_workers};
use crate::pods::{self, Claim};
use crate::replicaset::{self as logic, Scale};
use crate::runtime::Expectations;
use crate::{Error, Result};

struct Controller {
    sets: Informer<ReplicaSet>,
    pods: Informer<Pod>,
    queue: WorkQueue<String>,
    expectations: Expectations,
    client: skiff_client::Client,
}

/// The ReplicaSet key a pod's controller reference names.
fn owner_key(pod: &Pod) -> Option<String> {
    let r = pods::controller_of(&pod.metadata)?;
    let ns = pod.metadata.namespace.as_deref()?;
    (r.kind == "ReplicaSet").then(|| format!("{ns}/{}", r.name))
}

impl Controller {
    /// Orphans may be adopted: every ReplicaSet in the namespace whose selector matches.
    fn enqueue_matching(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = pods::labels(&pod.metadata);
        for rs in self.sets.cache().by_index(index::NAMESPACE, &ns) {
            if logic::selector(&rs).is_some_and(|s| s.matches(labels)) {
                self.queue.add(key_of(rs.as_ref()));
            }
        }
    }

    fn pod_added(&self, pod: &Pod) {
        match owner_key(pod) {
            Some(k) => {
                if pods::is_deleting(&pod.metadata) {
                    self.expectations.deletion_observed(&k, &key_of(pod));
                } else {
                    self.expectations.creation_observed(&k);
                }
                self.queue.add(k);
            }
            None if pods::controller_of(&pod.metadata).is_none() => self.enqueue_matching(pod),
            None => {}
        }
    }

    fn pod_updated(&self, old: &Pod, new: &Pod) {
        if new.metadata.resource_version == old.metadata.resource_version {
            return;
        }
        let (ok, nk) = (owner_key(old), owner_key(new));
        if let Some(k) = &nk
            && pods::is_deleting(&new.metadata)
            && !pods::is_deleting(&old.metadata)
        {
            self.expectations.deletion_observed(k, &key_of(new));
        }
        if ok != nk
            && let Some(k) = ok
        {
            self.queue.add(k);
        }
        match nk {
            Some(k) => self.queue.add(k),
            None => {
                if pods::controller_of(&new.metadata).is_none() {
                    self.enqueue_matching(new);
                }
            }
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        if let Some(k) = owner_key(pod) {
            self.expectations.deletion_observed(&k, &key_of(pod));
            self.queue.add(k);
        }
    }

    async fn sync(&self, key: &str) -> Result<Option<Duration>> {
        let Some(rs) = self.sets.cache().get_by_key(key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let Some(selector) = logic::selector(&rs) else {
            tracing::warn!(%key, "ReplicaSet without a usable selector; ignored");
            return Ok(None);
        };
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        let deleting = pods::is_deleting(&rs.metadata);
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);

        // Claim the active pods: ours, orphans to adopt, ours to release. Pods of other
        // controllers would be ignored: they are not even looked at.
        let cache = self.pods.cache();
        let candidates = cache
            .by_index(pods::BY_CONTROLLER, &uid)
            .into_iter()
            .chain(cache.by_index(pods::BY_CONTROLLER, &pods::orphans_of(&ns)));
        let mut owned: Vec<Arc<Pod>> = Vec::new();
        for pod in candidates {
            if !pods::is_active(&pod) {
                continue;
            }
            let labels = pods::labels(&pod.metadata);
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            match pods::claim(&uid, deleting, selector.matches(labels), &pod.metadata) {
                Claim::Owned => owned.push(pod),
                Claim::Adopt => {
                    let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
                    refs.push(pods::controller_ref("apps/v1", "ReplicaSet", &rs.metadata));
                    let patch =
                        json!({"metadata": {"ownerReferences": refs, "uid": pod.metadata.uid}});
                    match pod_api
                        .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(p) => owned.push(Arc::new(p)),
                        Err(e) if not_found(&e) => {}
                        Err(e) => {
                            return Err(Error::api(format!("adopting pod {ns}/{pod_name}"))(e));
                        }
                    }
                }
                Claim::Release => {
                    let refs: Vec<_> = pod
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .filter(|r| r.uid != uid)
                        .cloned()
                        .collect();
                    let patch = json!({"metadata": {"ownerReferences": if refs.is_empty() { serde_json::Value::Null } else { json!(refs) }, "uid": pod.metadata.uid}});
                    match pod_api
                        .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if not_found(&e) => {}
                        Err(e) => {
                            return Err(Error::api(format!("releasing pod {ns}/{pod_name}"))(e));
                        }
                    }
                }
                Claim::Ignore => {}
            }
        }

        let refs: Vec<&Pod> = owned.iter().map(Arc::as_ref).collect();
        let mut failure = None;
        if self.expectations.satisfied(key) && !deleting {
            failure = self.manage(&rs, key, &refs, &pod_api).await.err();
        }

        let now = Timestamp::now();
        let status = logic::status(&rs, &refs, now);
        if logic::status_changed(&rs, &status) {
            let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);
            let patch = json!({"status": status});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(Error::api(format!("updating status of ReplicaSet {key}"))(
                        e,
                    ));
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(logic::next_availability(&rs, &refs, now).map(|at| {
            let secs = (at.as_second() - now.as_second()).max(0) as u64;
            Duration::from_secs(secs + 1)
        }))
    }

    /// Creates or deletes pods towards `replicas`, recording expectations first.
    async fn manage(
        &self,
        rs: &ReplicaSet,
        key: &str,
        owned: &[&Pod],
        api: &Api<Pod>,
    ) -> Result<()> {
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        match logic::plan_scale(logic::spec_replicas(rs), owned) {
            Scale::Keep => Ok(()),
            Scale::Create(n) => {
                let Some(template) = rs.spec.as_ref().and_then(|s| s.template.as_ref()) else {
                    return Ok(());
                };
                self.expectations.expect(key, n, []);
                let owner = pods::controller_ref("apps/v1", "ReplicaSet", &rs.metadata);
                let pod = pods::pod_from_template(
                    template,
                    &ns,
                    rs.metadata.name.as_deref().unwrap_or_default(),
                    owner,
                );
                // Slow start: batches of 1, 2, 4, ... stop at the first failure, so a broken
                // template costs one request, not `n`.
                let mut remaining = n;
                let mut batch = 1;
                while remaining > 0 {
                    let size = batch.min(remaining);
                    let pp = PostParams::default();
                    let results = join_all((0..size).map(|_| api.create(&pp, &pod))).await;
                    remaining -= size;
                    let mut error = None;
                    for r in results {
                        if let Err(e) = r {
                            // A failed create will never be observed.
                            self.expectations.creation_observed(key);
                            error.get_or_insert(e);
                        }
                    }
                    if let Some(e) = error {
                        for _ in 0..remaining {
                            self.expectations.creation_observed(key);
                        }
                        return Err(Error::api(format!("creating pods for ReplicaSet {key}"))(e));
                    }
                    batch *= 2;
                }
                Ok(())
            }
            Scale::Delete(names) => {
                let keys: Vec<String> = names.iter().map(|n| format!("{ns}/{n}")).collect();
                self.expectations.expect(key, 0, keys.clone());
                let dp = DeleteParams::default();
                let results = join_all(names.iter().map(|n| api.delete(n, &dp))).await;
                let mut error = None;
                for (r, pod_key) in results.into_iter().zip(&keys) {
                    match r {
                        Ok(_) => {}
                        Err(e) => {
                            self.expectations.deletion_observed(key, pod_key);
                            if !not_found(&e) && !conflict(&e) {
                                error.get_or_insert(e);
                            }
                        }
                    }
                }
                match error {
                    Some(e) => Err(Error::api(format!("deleting pods of ReplicaSet {key}"))(e)),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Registers the controller's handlers on `factory`.
pub(crate) fn start(factory: &SharedInformerFactory, workers: usize) -> Started {
    let c = Arc::new(Controller {
        sets: factory.informer::<ReplicaSet>(),
        pods: factory.informer::<Pod>(),
        queue: queue(),
        expectations: Expectations::new(),
        client: factory.client().clone(),
    });
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.sets.add_handler(handler_fn(
        move |rs: &Arc<ReplicaSet>| a.queue.add(key_of(rs.as_ref())),
        move |_: &Arc<ReplicaSet>, rs: &Arc<ReplicaSet>| u.queue.add(key_of(rs.as_ref())),
        move |rs: &Arc<ReplicaSet>| {
            let k = key_of(rs.as_ref());
            d.expectations.forget(&k);
            d.queue.add(k);
        },
    ));
    c.pods
        .cache()
        .add_index(pods::BY_CONTROLLER, pods::controller_index);
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.pods.add_handler(handler_fn(
        move |p: &Arc<Pod>| a.pod_added(p),
        move |o: &Arc<Pod>, n: &Arc<Pod>| u.pod_updated(o, n),
        move |p: &Arc<Pod>| d.pod_deleted(p),
    ));
    let queue = c.queue.clone();
    Started {
        queue,
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(tracker, "replicaset", &q, workers, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    }
}

//! The DaemonSet controller: one pod per eligible node, following nodes as they join, change and
//! leave, with rolling updates; creates and deletes are tracked with expectations like the
//! ReplicaSet controller's.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue, handler_fn, index, key_of};
use skiff_meta::labels::Selector;
use tokio_util::task::TaskTracker;

use super::{Started, conflict, not_found, queue, spawn_workers};
use crate::daemonset as logic;
use crate::pods::{self, Claim};
use crate::runtime::Expectations;
use crate::{Error, Result};

struct Controller {
    sets: Informer<DaemonSet>,
    nodes: Informer<Node>,
    pods: Informer<Pod>,
    queue: WorkQueue<String>,
    expectations: Expectations,
    client: skiff_client::Client,
}

fn owner_key(pod: &Pod) -> Option<String> {
    let r = pods::controller_of(&pod.metadata)?;
    let ns = pod.metadata.namespace.as_deref()?;
    (r.kind == "DaemonSet").then(|| format!("{ns}/{}", r.name))
}

fn selector(ds: &DaemonSet) -> Option<Selector> {
    let sel = Selector::from_label_selector(&ds.spec.as_ref()?.selector).ok()?;
    (!sel.is_empty()).then_some(sel)
}

impl Controller {
    fn enqueue_all(&self) {
        for ds in self.sets.cache().list() {
            self.queue.add(key_of(ds.as_ref()));
        }
    }

    fn pod_event(&self, pod: &Pod, deleted: bool) {
        if let Some(k) = owner_key(pod) {
            if deleted || pods::is_deleting(&pod.metadata) {
                self.expectations.deletion_observed(&k, &key_of(pod));
            } else {
                self.expectations.creation_observed(&k);
            }
            self.queue.add(k);
        }
    }

    async fn sync(&self, key: &str) -> Result<Option<Duration>> {
        let Some(ds) = self.sets.cache().get_by_key(key) else {
            self.expectations.forget(key);
            return Ok(None);
        };
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let name = ds.metadata.name.clone().unwrap_or_default();
        let Some(sel) = selector(&ds) else {
            return Ok(None);
        };
        let uid = ds.metadata.uid.clone().unwrap_or_default();
        let deleting = pods::is_deleting(&ds.metadata);
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let mut owned: Vec<Arc<Pod>> = Vec::new();
        for pod in self.pods.cache().by_index(index::NAMESPACE, &ns) {
            let labels = pods::labels(&pod.metadata);
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            match pods::claim(&uid, deleting, sel.matches(labels), &pod.metadata) {
                Claim::Owned => owned.push(pod),
                Claim::Adopt if !pods::is_terminal(&pod) => {
                    let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
                    refs.push(pods::controller_ref("apps/v1", "DaemonSet", &ds.metadata));
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
                _ => {}
            }
        }
        let nodes = self.nodes.cache().list();
        let node_refs: Vec<&Node> = nodes.iter().map(Arc::as_ref).collect();
        let pod_refs: Vec<&Pod> = owned.iter().map(Arc::as_ref).collect();
        let plan = logic::plan(&ds, &node_refs, &pod_refs, Timestamp::now());

        if self.expectations.satisfied(key) && !deleting {
            let hash = logic::template_hash(&ds.spec.clone().unwrap_or_default().template);
            let keys: Vec<String> = plan.delete.iter().map(|n| format!("{ns}/{n}")).collect();
            self.expectations
                .expect(key, plan.create_on.len(), keys.clone());
            let mut error = None;
            for node in &plan.create_on {
                let pod = logic::pod_for(&ds, node, &hash);
                if let Err(e) = pod_api.create(&PostParams::default(), &pod).await {
                    self.expectations.creation_observed(key);
                    error.get_or_insert(e);
                }
            }
            for (n, k) in plan.delete.iter().zip(&keys) {
                if let Err(e) = pod_api.delete(n, &DeleteParams::default()).await {
                    self.expectations.deletion_observed(key, k);
                    if !not_found(&e) && !conflict(&e) {
                        error.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = error {
                return Err(Error::api(format!("managing pods of DaemonSet {key}"))(e));
            }
        }
        if ds.status.as_ref() != Some(&plan.status) {
            let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), &ns);
            let patch = json!({"status": plan.status});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(Error::api(format!("updating status of DaemonSet {key}"))(e)),
            }
        }
        Ok(None)
    }
}

/// Registers the controller's handlers on `factory`.
pub(crate) fn start(factory: &SharedInformerFactory, workers: usize) -> Started {
    let c = Arc::new(Controller {
        sets: factory.informer::<DaemonSet>(),
        nodes: factory.informer::<Node>(),
        pods: factory.informer::<Pod>(),
        queue: queue(),
        expectations: Expectations::new(),
        client: factory.client().clone(),
    });
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.sets.add_handler(handler_fn(
        move |x: &Arc<DaemonSet>| a.queue.add(key_of(x.as_ref())),
        move |_: &Arc<DaemonSet>, x: &Arc<DaemonSet>| u.queue.add(key_of(x.as_ref())),
        move |x: &Arc<DaemonSet>| {
            let k = key_of(x.as_ref());
            d.expectations.forget(&k);
            d.queue.add(k)
        },
    ));
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.nodes.add_handler(handler_fn(
        move |_: &Arc<Node>| a.enqueue_all(),
        move |o: &Arc<Node>, n: &Arc<Node>| {
            // Heartbeats change only the status; labels, taints and deletion matter.
            if o.metadata.labels != n.metadata.labels
                || o.spec != n.spec
                || o.metadata.deletion_timestamp != n.metadata.deletion_timestamp
            {
                u.enqueue_all()
            }
        },
        move |_: &Arc<Node>| d.enqueue_all(),
    ));
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.pods.add_handler(handler_fn(
        move |p: &Arc<Pod>| a.pod_event(p, false),
        move |o: &Arc<Pod>, p: &Arc<Pod>| {
            if o.metadata.resource_version != p.metadata.resource_version {
                if pods::is_deleting(&p.metadata) && !pods::is_deleting(&o.metadata) {
                    u.pod_event(p, true);
                } else if let Some(k) = owner_key(p) {
                    u.queue.add(k);
                }
            }
        },
        move |p: &Arc<Pod>| d.pod_event(p, true),
    ));
    Started {
        queue: c.queue.clone(),
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(tracker, "daemonset", &q, workers, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    }
}

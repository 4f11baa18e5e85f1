//! The Job controller's I/O half: Job and pod events become Job keys; a sync reads the Job
//! fresh from the API (its status is the count, and a stale cached status could count a pod
//! twice), plans with [`crate::job::plan`], writes the status with the Job's resourceVersion as
//! precondition, and only then releases finalizers, deletes and creates pods.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue, handler_fn, index, key_of};
use tokio_util::task::TaskTracker;

use super::{Started, conflict, not_found, queue, spawn_workers};
use crate::job as logic;
use crate::pods;
use crate::runtime::Expectations;
use crate::{Error, Result};

struct Controller {
    jobs: Informer<Job>,
    pods: Informer<Pod>,
    queue: WorkQueue<String>,
    expectations: Expectations,
    client: skiff_client::Client,
}

/// The Job key a pod's controller reference names.
fn owner_key(pod: &Pod) -> Option<String> {
    let r = pods::controller_of(&pod.metadata)?;
    let ns = pod.metadata.namespace.as_deref()?;
    (r.kind == "Job").then(|| format!("{ns}/{}", r.name))
}

impl Controller {
    fn pod_added(&self, pod: &Pod) {
        if let Some(k) = owner_key(pod) {
            if pods::is_deleting(&pod.metadata) {
                self.expectations.deletion_observed(&k, &key_of(pod));
            } else {
                self.expectations.creation_observed(&k);
            }
            self.queue.add(k);
        }
    }

    fn pod_updated(&self, old: &Pod, new: &Pod) {
        if new.metadata.resource_version == old.metadata.resource_version {
            return;
        }
        if let Some(k) = owner_key(new) {
            if pods::is_deleting(&new.metadata) && !pods::is_deleting(&old.metadata) {
                self.expectations.deletion_observed(&k, &key_of(new));
            }
            self.queue.add(k);
        }
    }

    fn pod_deleted(&self, pod: &Pod) {
        if let Some(k) = owner_key(pod) {
            self.expectations.deletion_observed(&k, &key_of(pod));
            self.queue.add(k);
        }
    }

    async fn sync(&self, key: &str) -> Result<Option<Duration>> {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let job = match jobs.get_opt(name).await {
            Ok(Some(job)) => job,
            Ok(None) => {
                self.expectations.forget(key);
                return self.release_orphans(ns, name, &pod_api).await;
            }
            Err(e) => return Err(Error::api(format!("reading Job {key}"))(e)),
        };
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let owned: Vec<Arc<Pod>> = self.pods.cache().by_index(pods::BY_CONTROLLER, &uid);
        let refs: Vec<&Pod> = owned.iter().map(Arc::as_ref).collect();
        let now = Timestamp::now();
        let plan = logic::plan(&job, &refs, now, self.expectations.satisfied(key));

        if logic::status_changed(&job, &plan.status) {
            let mut updated = job.clone();
            updated.status = Some(plan.status.clone());
            match jobs
                .replace_status(name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(None),
                // A newer Job: the next sync starts from it.
                Err(e) => return Err(Error::api(format!("updating status of Job {key}"))(e)),
            }
        }
        for pod_name in &plan.finalize {
            let Some(pod) = refs
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(pod_name))
            else {
                continue;
            };
            let patch = json!({"metadata": {
                "finalizers": logic::without_tracking(pod),
                "resourceVersion": pod.metadata.resource_version,
            }});
            match pod_api
                .patch(pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(Error::api(format!(
                        "removing the tracking finalizer of pod {ns}/{pod_name}"
                    ))(e));
                }
            }
        }
        if !plan.delete.is_empty() {
            let keys: Vec<String> = plan.delete.iter().map(|n| format!("{ns}/{n}")).collect();
            self.expectations.expect(key, 0, keys.clone());
            let dp = DeleteParams::default();
            let results = join_all(plan.delete.iter().map(|n| pod_api.delete(n, &dp))).await;
            for (r, pod_key) in results.into_iter().zip(&keys) {
                if let Err(e) = r {
                    self.expectations.deletion_observed(key, pod_key);
                    if !not_found(&e) && !conflict(&e) {
                        return Err(Error::api(format!("deleting pods of Job {key}"))(e));
                    }
                }
            }
        }
        if !plan.create.is_empty() {
            self.expectations.expect(key, plan.create.len(), []);
            let pp = PostParams::default();
            let new: Vec<Pod> = plan
                .create
                .iter()
                .map(|i| logic::new_pod(&job, *i))
                .collect();
            let results = join_all(new.iter().map(|p| pod_api.create(&pp, p))).await;
            let mut error = None;
            for r in results {
                if let Err(e) = r {
                    // A failed create will never be observed.
                    self.expectations.creation_observed(key);
                    error.get_or_insert(e);
                }
            }
            if let Some(e) = error {
                return Err(Error::api(format!("creating pods for Job {key}"))(e));
            }
        }
        Ok(plan.requeue_at.map(|at| {
            let secs = (at.as_second() - now.as_second()).max(0) as u64;
            Duration::from_secs(secs + 1)
        }))
    }

    /// A Job that is gone leaves its pods to the garbage collector, which waits for their
    /// finalizers: the tracking one goes now.
    async fn release_orphans(
        &self,
        ns: &str,
        name: &str,
        pod_api: &Api<Pod>,
    ) -> Result<Option<Duration>> {
        let cache = self.pods.cache();
        for pod in cache.by_index(index::NAMESPACE, ns) {
            let ours = pods::controller_of(&pod.metadata)
                .is_some_and(|r| r.kind == "Job" && r.name == name);
            let remaining = logic::without_tracking(&pod);
            if !ours || remaining.len() == pod.metadata.finalizers.as_ref().map_or(0, Vec::len) {
                continue;
            }
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let patch = json!({"metadata": {"finalizers": remaining}});
            match pod_api
                .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(Error::api(format!(
                        "removing the tracking finalizer of pod {ns}/{pod_name}"
                    ))(e));
                }
            }
        }
        Ok(None)
    }
}

/// Registers the controller's handlers on `factory`.
pub(crate) fn start(factory: &SharedInformerFactory, workers: usize) -> Started {
    let c = Arc::new(Controller {
        jobs: factory.informer::<Job>(),
        pods: factory.informer::<Pod>(),
        queue: queue(),
        expectations: Expectations::new(),
        client: factory.client().clone(),
    });
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.jobs.add_handler(handler_fn(
        move |j: &Arc<Job>| a.queue.add(key_of(j.as_ref())),
        move |_: &Arc<Job>, j: &Arc<Job>| u.queue.add(key_of(j.as_ref())),
        move |j: &Arc<Job>| {
            let k = key_of(j.as_ref());
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
            spawn_workers(tracker, "job", &q, workers, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    }
}

//! The Job controller's shell: Job and pod events become Job keys; a reconcile reads the Job
//! fresh from the API (its status is the count, and a stale cached status could count a pod
//! twice), plans with [`super::plan`], writes the status with the Job's resourceVersion as
//! precondition, and only then releases finalizers, deletes and creates pods.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, index};

use super as logic;
use crate::manager::Context;
use crate::pods;
use crate::runtime::children;
use crate::runtime::{Action, Controller, Expectations, Reconcile, Started, not_found};
use crate::{Error, Result};

/// The kind this controller owns pods for.
const KIND: &str = "Job";

struct Jobs {
    pods: Informer<Pod>,
    expectations: Arc<Expectations>,
    client: skiff_client::Client,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let jobs = ctx.factory.informer::<Job>();
    let pods = ctx.factory.informer::<Pod>();
    pods.add_index(pods::BY_CONTROLLER, pods::controller_index);
    let expectations = Arc::new(Expectations::new());
    let forget = expectations.clone();
    let controller = Controller::new("job", ctx.workers)
        .primary_with(&jobs, move |key| forget.forget(key))
        .owns(&pods, KIND, Some(expectations.clone()));
    Ok(controller.run(Arc::new(Jobs {
        pods,
        expectations,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for Jobs {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let job = match jobs.get_opt(name).await {
            Ok(Some(job)) => job,
            Ok(None) => {
                self.expectations.forget(key);
                self.release_orphans(ns, name, &pod_api).await?;
                return Ok(Action::AwaitChange);
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
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
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
            self.patch_pod(&pod_api, ns, pod_name, &patch).await?;
        }
        if !plan.delete.is_empty() {
            self.expectations
                .expect(key, 0, children::pod_keys(ns, &plan.delete));
            children::delete_pods(&pod_api, &self.expectations, key, ns, &plan.delete)
                .await
                .map_err(Error::api(format!("deleting pods of Job {key}")))?;
        }
        if !plan.create.is_empty() {
            self.expectations.expect(key, plan.create.len(), []);
            let new: Vec<Pod> = plan
                .create
                .iter()
                .map(|i| logic::new_pod(&job, *i))
                .collect();
            // All at once: the plan already keeps to the Job's parallelism.
            children::create_pods(&pod_api, &self.expectations, key, &new, new.len())
                .await
                .map_err(Error::api(format!("creating pods for Job {key}")))?;
        }
        Ok(plan
            .requeue_at
            .map(|at| {
                let secs = (at.as_second() - now.as_second()).max(0) as u64;
                Duration::from_secs(secs + 1)
            })
            .into())
    }
}

impl Jobs {
    /// A Job that is gone leaves its pods to the garbage collector, which waits for their
    /// finalizers: the tracking one goes now.
    async fn release_orphans(&self, ns: &str, name: &str, pod_api: &Api<Pod>) -> Result<()> {
        let cache = self.pods.cache();
        for pod in cache.by_index(index::NAMESPACE, ns) {
            let ours = pods::controller_of(&pod.metadata)
                .is_some_and(|r| r.kind == KIND && r.name == name);
            let remaining = logic::without_tracking(&pod);
            if !ours || remaining.len() == pod.metadata.finalizers.as_ref().map_or(0, Vec::len) {
                continue;
            }
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let patch = json!({"metadata": {"finalizers": remaining}});
            self.patch_pod(pod_api, ns, &pod_name, &patch).await?;
        }
        Ok(())
    }

    /// Removes the tracking finalizer of a pod with `patch` (a pod gone meanwhile is fine).
    async fn patch_pod(
        &self,
        pod_api: &Api<Pod>,
        ns: &str,
        pod_name: &str,
        patch: &serde_json::Value,
    ) -> Result<()> {
        match pod_api
            .patch(pod_name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(Error::api(format!(
                "removing the tracking finalizer of pod {ns}/{pod_name}"
            ))(e)),
        }
    }
}

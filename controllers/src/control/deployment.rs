//! The Deployment controller: claims the ReplicaSets a Deployment selects, applies one rollout step
//! of [`crate::deployment::plan`], and writes the status `kubectl rollout status` reads.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue, handler_fn, index, key_of};
use skiff_meta::labels::Selector;
use tokio_util::task::TaskTracker;

use super::{Started, conflict, not_found, queue, spawn_workers};
use crate::deployment::{self as logic, RsChange};
use crate::pods::{self, Claim};
use crate::{Error, Result};

struct Controller {
    deployments: Informer<Deployment>,
    sets: Informer<ReplicaSet>,
    pods: Informer<Pod>,
    queue: WorkQueue<String>,
    client: skiff_client::Client,
}

fn selector(d: &Deployment) -> Option<Selector> {
    let sel = Selector::from_label_selector(&d.spec.as_ref()?.selector).ok()?;
    (!sel.is_empty()).then_some(sel)
}

impl Controller {
    fn rs_changed(&self, rs: &ReplicaSet) {
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        match pods::controller_of(&rs.metadata) {
            Some(r) if r.kind == "Deployment" => self.queue.add(format!("{ns}/{}", r.name)),
            Some(_) => {}
            None => {
                let labels = pods::labels(&rs.metadata);
                for d in self.deployments.cache().by_index(index::NAMESPACE, &ns) {
                    if selector(&d).is_some_and(|s| s.matches(labels)) {
                        self.queue.add(key_of(d.as_ref()));
                    }
                }
            }
        }
    }

    /// A pod of a Recreate rollout went away: its Deployment may now start the new pods.
    fn pod_deleted(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let Some(r) = pods::controller_of(&pod.metadata).filter(|r| r.kind == "ReplicaSet") else {
            return;
        };
        if let Some(rs) = self.sets.cache().get(Some(&ns), &r.name) {
            self.rs_changed(&rs);
        }
    }

    async fn sync(&self, key: &str) -> Result<Option<Duration>> {
        let Some(d) = self.deployments.cache().get_by_key(key) else {
            return Ok(None);
        };
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let Some(sel) = selector(&d) else {
            tracing::warn!(%key, "Deployment without a usable selector; ignored");
            return Ok(None);
        };
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let deleting = pods::is_deleting(&d.metadata);
        let rs_api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);

        let mut owned: Vec<Arc<ReplicaSet>> = Vec::new();
        for rs in self.sets.cache().by_index(index::NAMESPACE, &ns) {
            let labels = pods::labels(&rs.metadata);
            let rs_name = rs.metadata.name.as_deref().unwrap_or_default();
            match pods::claim(&uid, deleting, sel.matches(labels), &rs.metadata) {
                Claim::Owned => owned.push(rs),
                Claim::Adopt => {
                    let mut refs = rs.metadata.owner_references.clone().unwrap_or_default();
                    refs.push(pods::controller_ref("apps/v1", "Deployment", &d.metadata));
                    let patch =
                        json!({"metadata": {"ownerReferences": refs, "uid": rs.metadata.uid}});
                    match rs_api
                        .patch(&rs_name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(r) => owned.push(Arc::new(r)),
                        Err(e) if not_found(&e) => {}
                        Err(e) => {
                            return Err(Error::api(format!("adopting ReplicaSet {ns}/{rs_name}"))(
                                e,
                            ));
                        }
                    }
                }
                Claim::Release => {
                    let refs: Vec<_> = rs
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .filter(|r| r.uid != uid)
                        .cloned()
                        .collect();
                    let refs = if refs.is_empty() {
                        serde_json::Value::Null
                    } else {
                        json!(refs)
                    };
                    let patch =
                        json!({"metadata": {"ownerReferences": refs, "uid": rs.metadata.uid}});
                    match rs_api
                        .patch(&rs_name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if not_found(&e) => {}
                        Err(e) => {
                            return Err(
                                Error::api(format!("releasing ReplicaSet {ns}/{rs_name}"))(e),
                            );
                        }
                    }
                }
                Claim::Ignore => {}
            }
        }
        let owned_uids: Vec<String> = owned
            .iter()
            .filter_map(|rs| rs.metadata.uid.clone())
            .collect();
        let pods: Vec<Arc<Pod>> = self
            .pods
            .cache()
            .by_index(index::NAMESPACE, &ns)
            .into_iter()
            .filter(|p| {
                pods::controller_of(&p.metadata).is_some_and(|r| owned_uids.contains(&r.uid))
            })
            .collect();
        let sets: Vec<&ReplicaSet> = owned.iter().map(Arc::as_ref).collect();
        let pod_refs: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
        let plan = logic::plan(&d, &sets, &pod_refs, Timestamp::now());

        let d_api: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
        let mut status = plan.status.clone();
        for change in &plan.changes {
            match change {
                RsChange::Create(rs) => match rs_api.create(&PostParams::default(), rs).await {
                    Ok(_) => {}
                    Err(e) if conflict(&e) => {
                        // A set of that name exists: ours with this template is fine, anything
                        // else is a hash collision, resolved with the next collision count.
                        let rs_name = rs.metadata.name.clone().unwrap_or_default();
                        let existing = rs_api
                            .get_opt(&rs_name)
                            .await
                            .map_err(Error::api(format!("reading ReplicaSet {ns}/{rs_name}")))?;
                        let ours = existing.as_ref().is_some_and(|x| {
                            pods::controller_of(&x.metadata).is_some_and(|r| r.uid == uid)
                                && x.spec
                                    .as_ref()
                                    .and_then(|s| s.template.as_ref())
                                    .is_some_and(|t| {
                                        logic::equal_ignoring_hash(
                                            t,
                                            &d.spec
                                                .as_ref()
                                                .unwrap_or(&Default::default())
                                                .template,
                                        )
                                    })
                        });
                        if !ours {
                            let count = d
                                .status
                                .as_ref()
                                .and_then(|s| s.collision_count)
                                .unwrap_or(0)
                                + 1;
                            let patch = json!({"status": {"collisionCount": count}});
                            d_api
                                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                                .await
                                .map_err(Error::api(format!(
                                    "recording a hash collision of {key}"
                                )))?;
                        }
                        return Ok(Some(Duration::from_millis(100)));
                    }
                    Err(e) => return Err(Error::api(format!("creating ReplicaSet for {key}"))(e)),
                },
                RsChange::Update(rs) => {
                    let rs_name = rs.metadata.name.clone().unwrap_or_default();
                    match rs_api.replace(&rs_name, &PostParams::default(), rs).await {
                        Ok(_) => {}
                        Err(e) if not_found(&e) => {}
                        Err(e) => {
                            return Err(Error::api(format!("updating ReplicaSet {ns}/{rs_name}"))(
                                e,
                            ));
                        }
                    }
                }
                RsChange::Delete(rs_name) => match rs_api
                    .delete(rs_name, &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => {
                        return Err(Error::api(format!("deleting ReplicaSet {ns}/{rs_name}"))(e));
                    }
                },
            }
        }
        if let Some(ann) = &plan.annotations
            && let Some(rev) = ann.get(logic::REVISION)
        {
            let patch = json!({"metadata": {"annotations": {logic::REVISION: rev}}});
            match d_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(None),
                Err(e) => return Err(Error::api(format!("annotating Deployment {key}"))(e)),
            }
        }
        // The collision count is only ever raised by the branch above.
        status.collision_count = d.status.as_ref().and_then(|s| s.collision_count);
        if d.status.as_ref() != Some(&status) {
            let patch = json!({"status": status});
            match d_api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(Error::api(format!("updating status of Deployment {key}"))(
                        e,
                    ));
                }
            }
        }
        Ok(plan.requeue_after)
    }
}

/// Registers the controller's handlers on `factory`.
pub(crate) fn start(factory: &SharedInformerFactory, workers: usize) -> Started {
    let c = Arc::new(Controller {
        deployments: factory.informer::<Deployment>(),
        sets: factory.informer::<ReplicaSet>(),
        pods: factory.informer::<Pod>(),
        queue: queue(),
        client: factory.client().clone(),
    });
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.deployments.add_handler(handler_fn(
        move |x: &Arc<Deployment>| a.queue.add(key_of(x.as_ref())),
        move |_: &Arc<Deployment>, x: &Arc<Deployment>| u.queue.add(key_of(x.as_ref())),
        move |x: &Arc<Deployment>| d.queue.add(key_of(x.as_ref())),
    ));
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.sets.add_handler(handler_fn(
        move |rs: &Arc<ReplicaSet>| a.rs_changed(rs),
        move |old: &Arc<ReplicaSet>, rs: &Arc<ReplicaSet>| {
            if pods::controller_of(&old.metadata).map(|r| &r.uid)
                != pods::controller_of(&rs.metadata).map(|r| &r.uid)
            {
                u.rs_changed(old);
            }
            u.rs_changed(rs)
        },
        move |rs: &Arc<ReplicaSet>| d.rs_changed(rs),
    ));
    let p = c.clone();
    c.pods.add_handler(handler_fn(
        |_: &Arc<Pod>| {},
        |_: &Arc<Pod>, _: &Arc<Pod>| {},
        move |pod: &Arc<Pod>| p.pod_deleted(pod),
    ));
    Started {
        queue: c.queue.clone(),
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(tracker, "deployment", &q, workers, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    }
}

//! The Deployment controller's shell: claims the ReplicaSets a Deployment selects, applies one
//! rollout step of [`super::plan`], and writes the status `kubectl rollout status` reads.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, index, key_of};
use skiff_meta::labels::Selector;

use super::{self as logic, RsChange};
use crate::manager::Context;
use crate::pods;
use crate::runtime::children::{self, Claims};
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict, not_found, owners};
use crate::{Error, Result};

/// The kind this controller owns ReplicaSets for.
const KIND: &str = "Deployment";

struct Deployments {
    deployments: Informer<Deployment>,
    sets: Informer<ReplicaSet>,
    pods: Informer<Pod>,
    client: skiff_client::Client,
}

fn selector(d: &Deployment) -> Option<Selector> {
    let sel = Selector::from_label_selector(&d.spec.as_ref()?.selector).ok()?;
    (!sel.is_empty()).then_some(sel)
}

/// The Deployments in a ReplicaSet's namespace whose selector matches it (which may adopt it).
fn matching(deployments: &Informer<Deployment>, rs: &ReplicaSet) -> Vec<String> {
    let ns = rs.metadata.namespace.clone().unwrap_or_default();
    let labels = pods::labels(&rs.metadata);
    deployments
        .cache()
        .by_index(index::NAMESPACE, &ns)
        .iter()
        .filter(|d| selector(d).is_some_and(|s| s.matches(labels)))
        .map(|d| key_of(d.as_ref()))
        .collect()
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let deployments = ctx.factory.informer::<Deployment>();
    let sets = ctx.factory.informer::<ReplicaSet>();
    let pods = ctx.factory.informer::<Pod>();
    let (for_orphans, for_pods, sets_for_pods) =
        (deployments.clone(), deployments.clone(), sets.clone());
    let controller = Controller::new("deployment", ctx.workers)
        .primary(&deployments)
        .owns(&sets, KIND, None)
        .adopts(&sets, move |rs: &ReplicaSet| matching(&for_orphans, rs))
        // A pod of a Recreate rollout went away: its Deployment may now start the new pods.
        .watches(&pods, move |e: Event<'_, Pod>| {
            let Event::Deleted(pod) = e else {
                return Vec::new();
            };
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let Some(r) = pods::controller_of(&pod.metadata).filter(|r| r.kind == "ReplicaSet")
            else {
                return Vec::new();
            };
            let Some(rs) = sets_for_pods.cache().get(Some(&ns), &r.name) else {
                return Vec::new();
            };
            match owners::controller_key(&rs.metadata, KIND) {
                Some(k) => vec![k],
                None if owners::is_orphan(&rs.metadata) => matching(&for_pods, &rs),
                None => Vec::new(),
            }
        });
    Ok(controller.run(Arc::new(Deployments {
        deployments,
        sets,
        pods,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for Deployments {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(d) = self.deployments.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let Some(sel) = selector(&d) else {
            tracing::warn!(%key, "Deployment without a usable selector; ignored");
            return Ok(Action::AwaitChange);
        };
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let deleting = pods::is_deleting(&d.metadata);
        let rs_api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &ns);

        let claims = Claims {
            owner: pods::controller_ref("apps/v1", KIND, &d.metadata),
            deleting,
            selects: |rs: &ReplicaSet| sel.matches(pods::labels(&rs.metadata)),
            may_adopt: |_: &ReplicaSet| true,
            release: true,
        };
        let candidates = self.sets.cache().by_index(index::NAMESPACE, &ns);
        let owned = children::claim(&rs_api, &claims, candidates).await?;
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
                        return Ok(Action::Requeue(Duration::from_millis(100)));
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
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
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
        Ok(plan.requeue_after.into())
    }
}

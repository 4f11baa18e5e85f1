//! The disruption controller's shell: budget events queue their key, pod events queue the
//! budgets of the pod's namespace that select it, workload events queue every budget of their
//! namespace (a scale change moves `expectedPods`); a reconcile reads the caches, decides, and
//! writes the status when it changed. The caches of ReplicaSets, Deployments,
//! ReplicationControllers and StatefulSets answer the scale of a pod's controller.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::PostParams;
use skiff_client::cache::index;
use skiff_client::{Api, Informer};

use super::{Scale, Scales, decide, selected, status_changed};
use crate::manager::Context;
use crate::pods::controller_of;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};

struct Budgets {
    budgets: Informer<PodDisruptionBudget>,
    pods: Informer<Pod>,
    replica_sets: Informer<ReplicaSet>,
    deployments: Informer<Deployment>,
    controllers: Informer<ReplicationController>,
    stateful_sets: Informer<StatefulSet>,
    client: skiff_client::Client,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let budgets = ctx.factory.informer::<PodDisruptionBudget>();
    let pods = ctx.factory.informer::<Pod>();
    let replica_sets = ctx.factory.informer::<ReplicaSet>();
    let deployments = ctx.factory.informer::<Deployment>();
    let controllers = ctx.factory.informer::<ReplicationController>();
    let stateful_sets = ctx.factory.informer::<StatefulSet>();
    let of_pod = {
        let budgets = budgets.clone();
        move |event: Event<'_, Pod>| {
            let pod = event.object();
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let pods = [pod];
            budgets
                .cache()
                .by_index(index::NAMESPACE, namespace)
                .iter()
                .filter(|b| !selected(b, &pods).is_empty())
                .map(|b| skiff_client::cache::key_of(b.as_ref()))
                .collect()
        }
    };
    let controller = Controller::new("disruption", ctx.workers)
        .primary(&budgets)
        .watches(&pods, of_pod)
        .watches(&replica_sets, every_budget_of_its_namespace(&budgets))
        .watches(&deployments, every_budget_of_its_namespace(&budgets))
        .watches(&controllers, every_budget_of_its_namespace(&budgets))
        .watches(&stateful_sets, every_budget_of_its_namespace(&budgets));
    Ok(controller.run(Arc::new(Budgets {
        budgets,
        pods,
        replica_sets,
        deployments,
        controllers,
        stateful_sets,
        client: ctx.factory.client().clone(),
    })))
}

/// Maps an event of a workload to every budget of its namespace (a scale change moves
/// `expectedPods`).
fn every_budget_of_its_namespace<K: skiff_client::informer::Informable>(
    budgets: &Informer<PodDisruptionBudget>,
) -> impl Fn(Event<'_, K>) -> Vec<String> + Send + Sync + 'static {
    let budgets = budgets.clone();
    move |event: Event<'_, K>| {
        let meta = kube::Resource::meta(event.object());
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        budgets.cache().keys_by_index(index::NAMESPACE, namespace)
    }
}

/// The scale of the cached object `owner` names, if it is still that object (same UID).
fn scale<K>(
    informer: &Informer<K>,
    namespace: &str,
    owner: &OwnerReference,
    replicas: impl Fn(&K) -> Option<i32>,
) -> Option<Scale>
where
    K: skiff_client::informer::Informable,
{
    let object = informer.cache().get(Some(namespace), &owner.name)?;
    let meta = kube::Resource::meta(object.as_ref());
    (meta.uid.as_deref() == Some(owner.uid.as_str())).then(|| Scale {
        uid: owner.uid.clone(),
        replicas: replicas(&object).unwrap_or(1),
    })
}

impl Scales for Budgets {
    fn scale_of(&self, namespace: &str, owner: &OwnerReference) -> Option<Scale> {
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("apps/v1", "ReplicaSet") => {
                let rs = self
                    .replica_sets
                    .cache()
                    .get(Some(namespace), &owner.name)?;
                if rs.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
                    return None;
                }
                // A ReplicaSet a Deployment controls counts as the Deployment's replicas.
                if let Some(parent) = controller_of(&rs.metadata)
                    && parent.kind == "Deployment"
                {
                    return scale(&self.deployments, namespace, parent, |d: &Deployment| {
                        d.spec.as_ref().and_then(|s| s.replicas)
                    });
                }
                Some(Scale {
                    uid: owner.uid.clone(),
                    replicas: rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                })
            }
            ("v1", "ReplicationController") => scale(
                &self.controllers,
                namespace,
                owner,
                |rc: &ReplicationController| rc.spec.as_ref().and_then(|s| s.replicas),
            ),
            ("apps/v1", "StatefulSet") => {
                scale(&self.stateful_sets, namespace, owner, |s: &StatefulSet| {
                    s.spec.as_ref().and_then(|s| s.replicas)
                })
            }
            _ => None,
        }
    }
}

impl Reconcile for Budgets {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(budget) = self.budgets.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let pods = self.pods.cache().by_index(index::NAMESPACE, ns);
        let refs: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
        let decision = decide(&budget, &refs, self, Timestamp::now());
        if !decision.unmanaged.is_empty() {
            tracing::debug!(budget = key, pods = ?decision.unmanaged, "pods without a controller are left out of the budget's scale");
        }
        if status_changed(budget.status.as_ref(), &decision.status) {
            let mut updated = (*budget).clone();
            updated.status = Some(decision.status);
            let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
            match api
                .replace_status(name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
                // A newer budget is on its way through the informer.
                Err(e) if conflict(&e) => return Ok(Action::AwaitChange),
                Err(e) => {
                    return Err(Error::api(format!(
                        "updating status of PodDisruptionBudget {key}"
                    ))(e));
                }
            }
        }
        Ok(match decision.recheck {
            Some(after) => Action::Requeue(after),
            None => Action::AwaitChange,
        })
    }
}

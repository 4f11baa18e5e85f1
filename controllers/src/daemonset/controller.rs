//! The DaemonSet controller's shell: one pod per eligible node, following nodes as they join,
//! change and leave, with rolling updates; creates and deletes are tracked with expectations
//! like the ReplicaSet controller's. The template history is kept as ControllerRevisions
//! ([`crate::history`]) for `kubectl rollout history` and `undo`.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skiff_client::{Api, Informer, index, key_of};
use skiff_meta::labels::Selector;

use super as logic;
use crate::history::{self, Applied, COLLISION_RETRY};
use crate::manager::Context;
use crate::pods;
use crate::runtime::children::{self, Claims};
use crate::runtime::{Action, Controller, Event, Expectations, Reconcile, Started, not_found};
use crate::{Error, Result};

/// The kind this controller owns pods for.
const KIND: &str = "DaemonSet";

struct DaemonSets {
    sets: Informer<DaemonSet>,
    nodes: Informer<Node>,
    pods: Informer<Pod>,
    revisions: Informer<ControllerRevision>,
    expectations: Arc<Expectations>,
    client: skiff_client::Client,
}

fn selector(ds: &DaemonSet) -> Option<Selector> {
    let sel = Selector::from_label_selector(&ds.spec.as_ref()?.selector).ok()?;
    (!sel.is_empty()).then_some(sel)
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let sets = ctx.factory.informer::<DaemonSet>();
    let nodes = ctx.factory.informer::<Node>();
    let pods = ctx.factory.informer::<Pod>();
    let revisions = ctx.factory.informer::<ControllerRevision>();
    let expectations = Arc::new(Expectations::new());
    let forget = expectations.clone();
    let all = sets.clone();
    let controller = Controller::new("daemonset", ctx.workers)
        .primary_with(&sets, move |key| forget.forget(key))
        // A node joining, changing or leaving concerns every DaemonSet; heartbeats change only
        // the status, while labels, taints and deletion matter.
        .watches(&nodes, move |e: Event<'_, Node>| {
            let relevant = match e {
                Event::Updated { old, new } => {
                    old.metadata.labels != new.metadata.labels
                        || old.spec != new.spec
                        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
                }
                _ => true,
            };
            if !relevant {
                return Vec::new();
            }
            all.cache()
                .list()
                .iter()
                .map(|ds| key_of(ds.as_ref()))
                .collect()
        })
        .owns(&pods, KIND, Some(expectations.clone()))
        .owns(&revisions, KIND, None);
    Ok(controller.run(Arc::new(DaemonSets {
        sets,
        nodes,
        pods,
        revisions,
        expectations,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for DaemonSets {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(ds) = self.sets.cache().get_by_key(key) else {
            self.expectations.forget(key);
            return Ok(Action::AwaitChange);
        };
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let name = ds.metadata.name.clone().unwrap_or_default();
        let Some(sel) = selector(&ds) else {
            return Ok(Action::AwaitChange);
        };
        let deleting = pods::is_deleting(&ds.metadata);
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let claims = Claims {
            owner: pods::controller_ref("apps/v1", KIND, &ds.metadata),
            deleting,
            selects: |p: &Pod| sel.matches(pods::labels(&p.metadata)),
            // Finished pods are not adopted, and pods that stop matching are not released.
            may_adopt: |p: &Pod| !pods::is_terminal(p),
            release: false,
        };
        let candidates = self.pods.cache().by_index(index::NAMESPACE, &ns);
        let owned = children::claim(&pod_api, &claims, candidates).await?;
        let nodes = self.nodes.cache().list();
        let node_refs: Vec<&Node> = nodes.iter().map(Arc::as_ref).collect();
        let pod_refs: Vec<&Pod> = owned.iter().map(Arc::as_ref).collect();
        let plan = logic::plan(&ds, &node_refs, &pod_refs, Timestamp::now());
        if !deleting && self.record_history(&ds, key, &pod_refs).await? == Applied::Collision {
            let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), &ns);
            let count = ds.status.as_ref().and_then(|s| s.collision_count);
            history::count_collision(&api, &name, count, key).await?;
            return Ok(Action::Requeue(COLLISION_RETRY));
        }

        if self.expectations.satisfied(key) && !deleting {
            let hash = logic::current_hash(&ds);
            self.expectations.expect(
                key,
                plan.create_on.len(),
                children::pod_keys(&ns, &plan.delete),
            );
            let new: Vec<Pod> = plan
                .create_on
                .iter()
                .map(|node| logic::pod_for(&ds, node, &hash))
                .collect();
            // Every node's pod is tried, whatever happens to the others.
            let created =
                children::create_pods(&pod_api, &self.expectations, key, &new, new.len()).await;
            let deleted =
                children::delete_pods(&pod_api, &self.expectations, key, &ns, &plan.delete).await;
            if let Err(e) = created.and(deleted) {
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
        Ok(Action::AwaitChange)
    }
}

impl DaemonSets {
    /// Records the DaemonSet's template as a ControllerRevision and removes old ones beyond
    /// `revisionHistoryLimit`, keeping those its pods still run.
    async fn record_history(&self, ds: &DaemonSet, key: &str, owned: &[&Pod]) -> Result<Applied> {
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let name = ds.metadata.name.clone().unwrap_or_default();
        let spec = ds.spec.clone().unwrap_or_default();
        let cache = self.revisions.cache();
        let in_namespace = cache.by_index(index::NAMESPACE, &ns);
        let existing = history::owned_by(&ds.metadata, in_namespace.iter().map(Arc::as_ref));
        // Daemon pods carry the bare template hash; a revision is named `<set>-<hash>`.
        let in_use = owned
            .iter()
            .filter_map(|p| pods::labels(&p.metadata).get(logic::REVISION_HASH))
            .map(|hash| format!("{name}-{hash}"))
            .collect();
        let owner = history::Owner {
            kind: KIND,
            meta: &ds.metadata,
            template: &spec.template,
            limit: spec.revision_history_limit.unwrap_or(10),
            collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        };
        let plan = history::plan(&owner, &existing, &in_use);
        let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), &ns);
        history::apply(&api, &owner, &plan, key).await
    }
}

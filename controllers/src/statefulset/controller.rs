//! The StatefulSet controller's shell: claims the pods a StatefulSet selects, records its
//! template history ([`crate::history`]), creates and deletes pods as [`super::plan`] says, and
//! writes the status. Pod names are stable, so no expectations are needed: a create that finds
//! its pod already there (a lagging cache) is a 409 and harmless, and the ordering waits for the
//! cache to show each pod up.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, index, key_of};
use skiff_meta::labels::Selector;

use super as logic;
use crate::history::{Applied, COLLISION_RETRY};
use crate::manager::Context;
use crate::runtime::children::{self, Claims};
use crate::runtime::{Action, Controller, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};
use crate::{history, pods};

/// The kind this controller owns pods for.
const KIND: &str = "StatefulSet";

struct StatefulSets {
    sets: Informer<StatefulSet>,
    pods: Informer<Pod>,
    claims: Informer<PersistentVolumeClaim>,
    revisions: Informer<ControllerRevision>,
    client: skiff_client::Client,
}

fn selector(set: &StatefulSet) -> Option<Selector> {
    let sel = Selector::from_label_selector(&set.spec.as_ref()?.selector).ok()?;
    (!sel.is_empty()).then_some(sel)
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let sets = ctx.factory.informer::<StatefulSet>();
    let pods = ctx.factory.informer::<Pod>();
    let claims = ctx.factory.informer::<PersistentVolumeClaim>();
    let revisions = ctx.factory.informer::<ControllerRevision>();
    pods.add_index(pods::BY_CONTROLLER, pods::controller_index);
    let matching = sets.clone();
    let controller = Controller::new("statefulset", ctx.workers)
        .primary(&sets)
        .owns(&pods, KIND, None)
        .owns(&revisions, KIND, None)
        .adopts(&pods, move |pod: &Pod| {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let labels = pods::labels(&pod.metadata);
            matching
                .cache()
                .by_index(index::NAMESPACE, &ns)
                .iter()
                .filter(|s| selector(s).is_some_and(|sel| sel.matches(labels)))
                .map(|s| key_of(s.as_ref()))
                .collect()
        });
    Ok(controller.run(Arc::new(StatefulSets {
        sets,
        pods,
        claims,
        revisions,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for StatefulSets {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(set) = self.sets.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let ns = set.metadata.namespace.clone().unwrap_or_default();
        let name = set.metadata.name.clone().unwrap_or_default();
        let Some(sel) = selector(&set) else {
            tracing::warn!(%key, "StatefulSet without a usable selector; ignored");
            return Ok(Action::AwaitChange);
        };
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let pod_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let cache = self.pods.cache();
        let candidates = cache
            .by_index(pods::BY_CONTROLLER, &uid)
            .into_iter()
            .chain(cache.by_index(pods::BY_CONTROLLER, &pods::orphans_of(&ns)));
        let claims = Claims {
            owner: pods::controller_ref("apps/v1", KIND, &set.metadata),
            deleting: pods::is_deleting(&set.metadata),
            selects: |p: &Pod| sel.matches(pods::labels(&p.metadata)),
            may_adopt: |_: &Pod| true,
            release: true,
        };
        let owned = children::claim(&pod_api, &claims, candidates).await?;
        let refs: Vec<&Pod> = owned.iter().map(Arc::as_ref).collect();
        let (applied, current_template) = self.record_history(&set, key, &refs).await?;
        if applied == Applied::Collision {
            let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &ns);
            let name = set.metadata.name.clone().unwrap_or_default();
            let count = set.status.as_ref().and_then(|s| s.collision_count);
            history::count_collision(&api, &name, count, key).await?;
            return Ok(Action::Requeue(COLLISION_RETRY));
        }
        let plan = logic::plan(&set, &refs, current_template.as_ref(), Timestamp::now());

        let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        for claim in &plan.claims {
            if self
                .claims
                .cache()
                .get(
                    Some(&ns),
                    claim.metadata.name.as_deref().unwrap_or_default(),
                )
                .is_some()
            {
                continue;
            }
            let claim_name = claim.metadata.name.clone().unwrap_or_default();
            match claim_api.create(&PostParams::default(), claim).await {
                Ok(_) => {}
                Err(e) if conflict(&e) => {}
                Err(e) => return Err(Error::api(format!("creating claim {ns}/{claim_name}"))(e)),
            }
        }
        let existing = self.claims.cache().by_index(index::NAMESPACE, &ns);
        let names: Vec<&str> = existing
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        for claim_name in logic::claims_to_delete(&set, &names, &refs) {
            match claim_api
                .delete(&claim_name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) || conflict(&e) => {}
                Err(e) => return Err(Error::api(format!("deleting claim {ns}/{claim_name}"))(e)),
            }
        }
        for pod in &plan.create {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            match pod_api.create(&PostParams::default(), pod).await {
                Ok(_) => {}
                Err(e) if conflict(&e) => {}
                Err(e) => return Err(Error::api(format!("creating pod {ns}/{pod_name}"))(e)),
            }
        }
        for pod_name in &plan.delete {
            match pod_api.delete(pod_name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if not_found(&e) || conflict(&e) => {}
                Err(e) => return Err(Error::api(format!("deleting pod {ns}/{pod_name}"))(e)),
            }
        }
        if set.status.as_ref() != Some(&plan.status) {
            let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &ns);
            let patch = json!({"status": plan.status});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(Error::api(format!("updating status of StatefulSet {key}"))(
                        e,
                    ));
                }
            }
        }
        Ok(Action::AwaitChange)
    }
}

impl StatefulSets {
    /// Brings the set's ControllerRevisions up to date (its template's revision recorded, old
    /// ones beyond `revisionHistoryLimit` removed) and returns how that went with the template
    /// of its current revision, when known.
    async fn record_history(
        &self,
        set: &StatefulSet,
        key: &str,
        owned: &[&Pod],
    ) -> Result<(Applied, Option<k8s_openapi::api::core::v1::PodTemplateSpec>)> {
        let ns = set.metadata.namespace.clone().unwrap_or_default();
        let spec = set.spec.clone().unwrap_or_default();
        let cache = self.revisions.cache();
        let in_namespace = cache.by_index(index::NAMESPACE, &ns);
        let existing = history::owned_by(&set.metadata, in_namespace.iter().map(Arc::as_ref));
        let current = set
            .status
            .as_ref()
            .and_then(|s| s.current_revision.clone())
            .filter(|r| !r.is_empty());
        let mut in_use: std::collections::BTreeSet<String> = owned
            .iter()
            .filter_map(|p| logic::revision_of(p).map(str::to_string))
            .collect();
        in_use.extend(current.clone());
        let owner = history::Owner {
            kind: KIND,
            meta: &set.metadata,
            template: &spec.template,
            limit: spec.revision_history_limit.unwrap_or(10),
            collision_count: set.status.as_ref().and_then(|s| s.collision_count),
        };
        let plan = history::plan(&owner, &existing, &in_use);
        let applied = if pods::is_deleting(&set.metadata) {
            Applied::Done
        } else {
            let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), &ns);
            history::apply(&api, &owner, &plan, key).await?
        };
        let template = current.and_then(|name| {
            existing
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(name.as_str()))
                .and_then(|r| history::template_of(r))
        });
        Ok((applied, template))
    }
}

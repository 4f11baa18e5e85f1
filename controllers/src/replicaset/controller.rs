//! The ReplicaSet controller's shell: keeps `replicas` pods per ReplicaSet, never overshooting
//! while its own creates and deletes are in flight (expectations), adopting and releasing pods
//! by their controller reference, and reporting status.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skiff_client::{Api, Informer, index, key_of};

use super::{self as logic, Scale};
use crate::manager::Context;
use crate::pods;
use crate::runtime::children::{self, Claims};
use crate::runtime::{Action, Controller, Expectations, Reconcile, Started, not_found};
use crate::{Error, Result};

/// The kind this controller owns pods for.
const KIND: &str = "ReplicaSet";

struct ReplicaSets {
    sets: Informer<ReplicaSet>,
    pods: Informer<Pod>,
    expectations: Arc<Expectations>,
    client: skiff_client::Client,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let sets = ctx.factory.informer::<ReplicaSet>();
    let pods = ctx.factory.informer::<Pod>();
    pods.add_index(pods::BY_CONTROLLER, pods::controller_index);
    let expectations = Arc::new(Expectations::new());
    let forget = expectations.clone();
    let matching = sets.clone();
    let controller = Controller::new("replicaset", ctx.workers)
        .primary_with(&sets, move |key| forget.forget(key))
        .owns(&pods, KIND, Some(expectations.clone()))
        // Orphans may be adopted: every ReplicaSet in the namespace whose selector matches.
        .adopts(&pods, move |pod: &Pod| {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let labels = pods::labels(&pod.metadata);
            matching
                .cache()
                .by_index(index::NAMESPACE, &ns)
                .iter()
                .filter(|rs| logic::selector(rs).is_some_and(|s| s.matches(labels)))
                .map(|rs| key_of(rs.as_ref()))
                .collect()
        });
    Ok(controller.run(Arc::new(ReplicaSets {
        sets,
        pods,
        expectations,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for ReplicaSets {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(rs) = self.sets.cache().get_by_key(key) else {
            self.expectations.forget(key);
            return Ok(Action::AwaitChange);
        };
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let Some(selector) = logic::selector(&rs) else {
            tracing::warn!(%key, "ReplicaSet without a usable selector; ignored");
            return Ok(Action::AwaitChange);
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
            .chain(cache.by_index(pods::BY_CONTROLLER, &pods::orphans_of(&ns)))
            .filter(|p| pods::is_active(p));
        let claims = Claims {
            owner: pods::controller_ref("apps/v1", KIND, &rs.metadata),
            deleting,
            selects: |p: &Pod| selector.matches(pods::labels(&p.metadata)),
            may_adopt: |_: &Pod| true,
            release: true,
        };
        let owned = children::claim(&pod_api, &claims, candidates).await?;

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
        Ok(logic::next_availability(&rs, &refs, now)
            .map(|at| {
                let secs = (at.as_second() - now.as_second()).max(0) as u64;
                Duration::from_secs(secs + 1)
            })
            .into())
    }
}

impl ReplicaSets {
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
                let owner = pods::controller_ref("apps/v1", KIND, &rs.metadata);
                let pod = pods::pod_from_template(
                    template,
                    &ns,
                    rs.metadata.name.as_deref().unwrap_or_default(),
                    owner,
                );
                // Slow start from a batch of one.
                children::create_pods(api, &self.expectations, key, &vec![pod; n], 1)
                    .await
                    .map_err(Error::api(format!("creating pods for ReplicaSet {key}")))
            }
            Scale::Delete(names) => {
                self.expectations
                    .expect(key, 0, children::pod_keys(&ns, &names));
                children::delete_pods(api, &self.expectations, key, &ns, &names)
                    .await
                    .map_err(Error::api(format!("deleting pods of ReplicaSet {key}")))
            }
        }
    }
}

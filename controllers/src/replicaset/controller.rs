//! The ReplicaSet controller's shell: keeps `replicas` pods per ReplicaSet, never overshooting
//! while its own creates and deletes are in flight (expectations), adopting and releasing pods
//! by their controller reference, and reporting status.
//!
//! The same shell runs the ReplicationController controller, as kube-controller-manager does: a
//! ReplicationController is read as the ReplicaSet it converts to (its selector map becomes
//! `matchLabels`), its pods are owned as `v1/ReplicationController`, and its status, whose fields
//! are the ReplicaSet's, is written back to it.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skiff_client::informer::Informable;
use skiff_client::{Api, Informer, index, key_of};

use super::{self as logic, Scale};
use crate::manager::Context;
use crate::pods;
use crate::runtime::children::{self, Claims};
use crate::runtime::{Action, Controller, Expectations, Reconcile, Started, not_found};
use crate::{Error, Result};

/// A kind whose objects keep a number of interchangeable pods: ReplicaSet, and the
/// ReplicationController it replaced.
trait Replicated: Informable + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope> {
    /// The owner reference's `apiVersion`.
    const API_VERSION: &'static str;
    /// The owner reference's kind.
    const KIND: &'static str;
    /// The object as the ReplicaSet the controller's logic reads (a ReplicaSet itself is not
    /// copied).
    fn as_replica_set(&self) -> Cow<'_, ReplicaSet>;
}

impl Replicated for ReplicaSet {
    const API_VERSION: &'static str = "apps/v1";
    const KIND: &'static str = "ReplicaSet";
    fn as_replica_set(&self) -> Cow<'_, ReplicaSet> {
        Cow::Borrowed(self)
    }
}

impl Replicated for ReplicationController {
    const API_VERSION: &'static str = "v1";
    const KIND: &'static str = "ReplicationController";
    fn as_replica_set(&self) -> Cow<'_, ReplicaSet> {
        Cow::Owned(logic::from_replication_controller(self))
    }
}

struct ReplicaSets<K> {
    sets: Informer<K>,
    pods: Informer<Pod>,
    expectations: Arc<Expectations>,
    client: skiff_client::Client,
}

/// Registers the ReplicaSet controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    start_for::<ReplicaSet>(ctx, "replicaset")
}

/// Registers the ReplicationController controller on the shared informers.
pub(crate) fn start_replication(ctx: &Context) -> Result<Started> {
    start_for::<ReplicationController>(ctx, "replicationcontroller")
}

fn start_for<K: Replicated>(ctx: &Context, name: &'static str) -> Result<Started> {
    let sets = ctx.factory.informer::<K>();
    let pods = ctx.factory.informer::<Pod>();
    pods.add_index(pods::BY_CONTROLLER, pods::controller_index);
    let expectations = Arc::new(Expectations::new());
    let forget = expectations.clone();
    let matching = sets.clone();
    let controller = Controller::new(name, ctx.workers)
        .primary_with(&sets, move |key| forget.forget(key))
        .owns(&pods, K::KIND, Some(expectations.clone()))
        // Orphans may be adopted: every set in the namespace whose selector matches.
        .adopts(&pods, move |pod: &Pod| {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let labels = pods::labels(&pod.metadata);
            matching
                .cache()
                .by_index(index::NAMESPACE, &ns)
                .iter()
                .filter(|set| {
                    logic::selector(&set.as_replica_set()).is_some_and(|s| s.matches(labels))
                })
                .map(|set| key_of(set.as_ref()))
                .collect()
        });
    Ok(controller.run(Arc::new(ReplicaSets {
        sets,
        pods,
        expectations,
        client: ctx.factory.client().clone(),
    })))
}

impl<K: Replicated> Reconcile for ReplicaSets<K> {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(set) = self.sets.cache().get_by_key(key) else {
            self.expectations.forget(key);
            return Ok(Action::AwaitChange);
        };
        let rs = set.as_replica_set();
        let kind = K::KIND;
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let Some(selector) = logic::selector(&rs) else {
            tracing::warn!(%key, kind, "set without a usable selector; ignored");
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
            owner: pods::controller_ref(K::API_VERSION, K::KIND, &rs.metadata),
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
            let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
            let patch = json!({"status": status});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(Error::api(format!("updating status of {kind} {key}"))(e));
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

impl<K: Replicated> ReplicaSets<K> {
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
                let owner = pods::controller_ref(K::API_VERSION, K::KIND, &rs.metadata);
                let pod = pods::pod_from_template(
                    template,
                    &ns,
                    rs.metadata.name.as_deref().unwrap_or_default(),
                    owner,
                );
                // Slow start from a batch of one.
                children::create_pods(api, &self.expectations, key, &vec![pod; n], 1)
                    .await
                    .map_err(Error::api(format!("creating pods for {} {key}", K::KIND)))
            }
            Scale::Delete(names) => {
                self.expectations
                    .expect(key, 0, children::pod_keys(&ns, &names));
                children::delete_pods(api, &self.expectations, key, &ns, &names)
                    .await
                    .map_err(Error::api(format!("deleting pods of {} {key}", K::KIND)))
            }
        }
    }
}

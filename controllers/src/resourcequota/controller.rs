//! The resource-quota controller's shell: quota events whose limits changed queue the quota;
//! deletions and usage changes of pods, Services and claims (and deletions of the other counted
//! kinds) queue every quota of their namespace; a resync every [`RESYNC`] recounts all. A
//! reconcile gathers the namespace's objects of the resources the quota names from the
//! informers' caches (a kind without an informer here, such as a custom resource named by
//! `count/`, is listed live), recounts, and writes the status when an amount changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kube::api::{DynamicObject, ListParams, PostParams};
use skiff_client::cache::index;
use skiff_client::informer::Informable;
use skiff_client::{Api, Informer};
use skiff_meta::quota::{self, Object};

use super::{Counted, recount, resources_of, status_changed};
use crate::manager::Context;
use crate::runtime::{
    Action, Controller, Event, Reconcile, Resource, Started, conflict, discover, not_found,
};
use crate::{Error, Result};

/// How often every quota is recounted regardless of events (`--resource-quota-sync-period`).
pub const RESYNC: Duration = Duration::from_secs(5 * 60);

/// The informers of the kinds `count/` names most, which only need counting.
struct Counts {
    config_maps: Informer<ConfigMap>,
    secrets: Informer<Secret>,
    controllers: Informer<ReplicationController>,
    deployments: Informer<Deployment>,
    replica_sets: Informer<ReplicaSet>,
    stateful_sets: Informer<StatefulSet>,
    daemon_sets: Informer<DaemonSet>,
    jobs: Informer<Job>,
    cron_jobs: Informer<CronJob>,
}

struct Quotas {
    quotas: Informer<ResourceQuota>,
    pods: Informer<Pod>,
    services: Informer<Service>,
    claims: Informer<PersistentVolumeClaim>,
    counts: Counts,
    /// Served resources by (group, plural), from discovery, for live counts.
    discovered: Mutex<HashMap<(String, String), Resource>>,
    client: skiff_client::Client,
}

/// Whether a quota event needs a recount: a new quota, or limits that changed or that the
/// status does not mirror yet. Status writes (admission charging usage) do not.
fn limits_changed(event: &Event<'_, ResourceQuota>) -> bool {
    match event {
        Event::Added(_) => true,
        Event::Deleted(_) => false,
        Event::Updated { old, new } => {
            let spec_hard = |q: &ResourceQuota| q.spec.as_ref().and_then(|s| s.hard.clone());
            old.spec != new.spec
                || quota::parse_list(new.status.as_ref().and_then(|s| s.hard.as_ref()))
                    != quota::parse_list(spec_hard(new).as_ref())
        }
    }
}

/// Maps an event of a counted kind to every quota of its namespace when it may have given usage
/// back: a deletion, or an update after which the object uses a different amount.
fn gives_back<K: Informable>(
    quotas: &Informer<ResourceQuota>,
    group: &'static str,
    plural: &'static str,
    object: impl Fn(&K) -> Object<'_> + Send + Sync + 'static,
) -> impl Fn(Event<'_, K>) -> Vec<String> + Send + Sync + 'static {
    let quotas = quotas.clone();
    move |event: Event<'_, K>| {
        let changed = match &event {
            Event::Added(_) => false,
            Event::Deleted(_) => true,
            Event::Updated { old, new } => {
                let now = Timestamp::now();
                quota::usage(group, plural, object(old), now)
                    != quota::usage(group, plural, object(new), now)
            }
        };
        if !changed {
            return Vec::new();
        }
        let meta = kube::Resource::meta(event.object());
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        quotas.cache().keys_by_index(index::NAMESPACE, namespace)
    }
}

/// The evaluator's view of a kind that is only counted.
fn counted_only<K>(_: &K) -> Object<'_> {
    Object::Other
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let f = ctx.factory;
    let quotas = f.informer::<ResourceQuota>();
    let pods = f.informer::<Pod>();
    let services = f.informer::<Service>();
    let claims = f.informer::<PersistentVolumeClaim>();
    let counts = Counts {
        config_maps: f.informer(),
        secrets: f.informer(),
        controllers: f.informer(),
        deployments: f.informer(),
        replica_sets: f.informer(),
        stateful_sets: f.informer(),
        daemon_sets: f.informer(),
        jobs: f.informer(),
        cron_jobs: f.informer(),
    };
    let controller = Controller::new("resourcequota", ctx.workers)
        .primary_if(&quotas, limits_changed)
        .watches(
            &pods,
            gives_back(&quotas, "", "pods", |p: &Pod| Object::Pod(p)),
        )
        .watches(
            &services,
            gives_back(&quotas, "", "services", |s: &Service| Object::Service(s)),
        )
        .watches(
            &claims,
            gives_back(
                &quotas,
                "",
                "persistentvolumeclaims",
                |c: &PersistentVolumeClaim| Object::Claim(c),
            ),
        )
        .watches(
            &counts.config_maps,
            gives_back(&quotas, "", "configmaps", counted_only),
        )
        .watches(
            &counts.secrets,
            gives_back(&quotas, "", "secrets", counted_only),
        )
        .watches(
            &counts.controllers,
            gives_back(&quotas, "", "replicationcontrollers", counted_only),
        )
        .watches(
            &counts.deployments,
            gives_back(&quotas, "apps", "deployments", counted_only),
        )
        .watches(
            &counts.replica_sets,
            gives_back(&quotas, "apps", "replicasets", counted_only),
        )
        .watches(
            &counts.stateful_sets,
            gives_back(&quotas, "apps", "statefulsets", counted_only),
        )
        .watches(
            &counts.daemon_sets,
            gives_back(&quotas, "apps", "daemonsets", counted_only),
        )
        .watches(
            &counts.jobs,
            gives_back(&quotas, "batch", "jobs", counted_only),
        )
        .watches(
            &counts.cron_jobs,
            gives_back(&quotas, "batch", "cronjobs", counted_only),
        )
        .resync(RESYNC);
    Ok(controller.run(Arc::new(Quotas {
        quotas,
        pods,
        services,
        claims,
        counts,
        discovered: Mutex::new(HashMap::new()),
        client: f.client().clone(),
    })))
}

/// How many cached objects of `informer` live in `namespace`.
fn cached<K: Informable>(informer: &Informer<K>, namespace: &str) -> usize {
    informer
        .cache()
        .keys_by_index(index::NAMESPACE, namespace)
        .len()
}

impl Quotas {
    /// The number of objects of a resource without an informer here, listed live.
    async fn live_count(&self, group: &str, plural: &str, namespace: &str) -> Result<usize> {
        let key = (group.to_string(), plural.to_string());
        let known = self
            .discovered
            .lock()
            .expect("not poisoned")
            .get(&key)
            .cloned();
        let resource = match known {
            Some(r) => r,
            None => {
                let all = discover(&self.client).await?;
                let mut discovered = self.discovered.lock().expect("not poisoned");
                discovered.clear();
                for r in all {
                    discovered.insert((r.group.clone(), r.plural.clone()), r);
                }
                match discovered.get(&key) {
                    Some(r) => r.clone(),
                    // Not served (a typo, or a CRD not installed yet): nothing uses it.
                    None => return Ok(0),
                }
            }
        };
        let api: Api<DynamicObject> = if resource.namespaced {
            Api::namespaced_with(self.client.clone(), namespace, &resource.api_resource())
        } else {
            return Ok(0);
        };
        let list = api
            .list_metadata(&ListParams::default())
            .await
            .map_err(Error::api(format!(
                "counting {plural}.{group} in {namespace}"
            )))?;
        Ok(list.items.len())
    }

    /// How many objects of a count-only resource `namespace` holds.
    async fn count(&self, group: &str, plural: &str, namespace: &str) -> Result<usize> {
        let c = &self.counts;
        Ok(match (group, plural) {
            ("", "configmaps") => cached(&c.config_maps, namespace),
            ("", "secrets") => cached(&c.secrets, namespace),
            ("", "replicationcontrollers") => cached(&c.controllers, namespace),
            ("", "resourcequotas") => cached(&self.quotas, namespace),
            ("apps", "deployments") => cached(&c.deployments, namespace),
            ("apps", "replicasets") => cached(&c.replica_sets, namespace),
            ("apps", "statefulsets") => cached(&c.stateful_sets, namespace),
            ("apps", "daemonsets") => cached(&c.daemon_sets, namespace),
            ("batch", "jobs") => cached(&c.jobs, namespace),
            ("batch", "cronjobs") => cached(&c.cron_jobs, namespace),
            _ => self.live_count(group, plural, namespace).await?,
        })
    }
}

impl Reconcile for Quotas {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(rq) = self.quotas.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let spec = rq.spec.clone().unwrap_or_default();
        let mut pods = Vec::new();
        let mut services = Vec::new();
        let mut claims = Vec::new();
        let mut others: Vec<(String, String, usize)> = Vec::new();
        for (group, plural) in resources_of(&spec) {
            match (group.as_str(), plural.as_str()) {
                ("", "pods") => pods = self.pods.cache().by_index(index::NAMESPACE, ns),
                ("", "services") => services = self.services.cache().by_index(index::NAMESPACE, ns),
                ("", "persistentvolumeclaims") => {
                    claims = self.claims.cache().by_index(index::NAMESPACE, ns)
                }
                _ => {
                    let n = self.count(&group, &plural, ns).await?;
                    others.push((group, plural, n));
                }
            }
        }
        let mut objects: Vec<Counted<'_>> = Vec::new();
        objects.extend(pods.iter().map(|p| Counted {
            group: "",
            plural: "pods",
            object: Object::Pod(p),
        }));
        objects.extend(services.iter().map(|s| Counted {
            group: "",
            plural: "services",
            object: Object::Service(s),
        }));
        objects.extend(claims.iter().map(|c| Counted {
            group: "",
            plural: "persistentvolumeclaims",
            object: Object::Claim(c),
        }));
        for (group, plural, n) in &others {
            objects.extend((0..*n).map(|_| Counted {
                group,
                plural,
                object: Object::Other,
            }));
        }
        let status = recount(&spec, &objects, Timestamp::now());
        if !status_changed(rq.status.as_ref(), &status) {
            return Ok(Action::AwaitChange);
        }
        let mut updated = (*rq).clone();
        updated.status = Some(status);
        let api: Api<ResourceQuota> = Api::namespaced(self.client.clone(), ns);
        match api
            .replace_status(name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if not_found(&e) => Ok(Action::AwaitChange),
            // Admission charged usage meanwhile: recount against the newer quota shortly.
            Err(e) if conflict(&e) => Ok(Action::Requeue(Duration::from_millis(200))),
            Err(e) => Err(Error::api(format!(
                "updating status of ResourceQuota {key}"
            ))(e)),
        }
    }
}

//! The scheduler as a component: [`Options`] (its flags) and [`run`], which wires informers on
//! pods, nodes, Services and ReplicaSets to a [`Scheduler`] and runs its loop.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use skiff_client::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use skiff_client::events::{self, EventType, Recorder};
use skiff_client::informer::{SharedInformerFactory, handler_fn};
use skiff_client::{Api, Client};
use skiff_meta::labels::Selector;
use tokio_util::sync::CancellationToken;

use crate::algorithm::{Algorithm, DEFAULT_PROVIDER, Policy, Registry};
use crate::binder::{
    ApiError, ClusterApi, binding, preemption_condition_patch, unschedulable_condition_patch,
};
use crate::cache::GroupKind;
use crate::nodeinfo::PodInfo;
use crate::scheduler::Scheduler;
use crate::{DEFAULT_SCHEDULER_NAME, Error, Result};

/// The scheduler's flags.
#[derive(clap::Args, Clone, Debug)]
// Every component's flags are `Options`: clap's default group id (the struct name) would
// collide when `skiff server` flattens them together.
#[group(skip)]
pub struct Options {
    /// The scheduler name this scheduler answers to (pods' `spec.schedulerName`; pods naming
    /// none get `default-scheduler`).
    #[arg(long, default_value = DEFAULT_SCHEDULER_NAME)]
    pub scheduler_name: String,

    /// The algorithm provider: the registered set of predicates and weighted priorities to use.
    #[arg(long, default_value = DEFAULT_PROVIDER)]
    pub algorithm_provider: String,

    /// A policy file (JSON, the original scheduler policy: `predicates` and `priorities` with
    /// weights and arguments such as `labelsPresence` and `labelPreference`), used instead of
    /// the algorithm provider.
    #[arg(long)]
    pub policy_config_file: Option<PathBuf>,

    /// Overrides the weight of one of the provider's priorities, as NAME=WEIGHT (repeatable;
    /// a weight of 0 turns the priority off).
    #[arg(long = "priority-weight", value_parser = parse_weight)]
    pub priority_weights: Vec<(String, i64)>,

    /// Binds per second sent to the API server (token bucket rate; 0 for no limit).
    #[arg(long, default_value_t = 50.0)]
    pub bind_qps: f64,

    /// Binds that may be sent at once above the rate (token bucket size).
    #[arg(long, default_value_t = 100)]
    pub bind_burst: u32,

    /// The percentage of nodes to find feasible before scoring; 0 is kube-scheduler's adaptive
    /// default (50% at 100 nodes down to 5%, never fewer than 100 nodes), 100 scores all.
    #[arg(long, default_value_t = 0)]
    pub percentage_of_nodes_to_score: u32,

    /// How long, in seconds, an assumed pod whose bind succeeded may wait for the watch to show
    /// it before the scheduler stops counting it.
    #[arg(long, default_value_t = 30)]
    pub assume_ttl_seconds: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scheduler_name: DEFAULT_SCHEDULER_NAME.into(),
            algorithm_provider: DEFAULT_PROVIDER.into(),
            policy_config_file: None,
            priority_weights: Vec::new(),
            bind_qps: 50.0,
            bind_burst: 100,
            percentage_of_nodes_to_score: 0,
            assume_ttl_seconds: 30,
        }
    }
}

fn parse_weight(text: &str) -> std::result::Result<(String, i64), String> {
    let (name, weight) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=WEIGHT"))?;
    let weight = weight
        .parse()
        .map_err(|e| format!("weight of {name} in {text:?}: {e}"))?;
    Ok((name.to_string(), weight))
}

impl Options {
    /// The policy these options select: the policy file if given, else the provider with the
    /// weight overrides.
    pub fn policy(&self, registry: &Registry) -> Result<Policy> {
        match &self.policy_config_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| Error::PolicyFile {
                    path: path.clone(),
                    source: source.into(),
                })?;
                serde_json::from_str(&text).map_err(|source| Error::PolicyFile {
                    path: path.clone(),
                    source: source.into(),
                })
            }
            None => registry.provider_policy(&self.algorithm_provider, &self.priority_weights),
        }
    }

    /// The algorithm these options select from the built-in registry.
    pub fn algorithm(&self) -> Result<Algorithm> {
        let registry = Registry::default();
        registry.algorithm(&self.policy(&registry)?, self.percentage_of_nodes_to_score)
    }
}

/// [`ClusterApi`] over the API server.
#[derive(Clone)]
pub struct KubeApi {
    client: Client,
    events: Arc<Recorder>,
    scheduler_name: String,
}

impl KubeApi {
    /// Writes as `scheduler_name` (the Event source).
    pub fn new(client: Client, scheduler_name: &str) -> KubeApi {
        KubeApi {
            events: Arc::new(Recorder::new(client.clone(), scheduler_name)),
            client,
            scheduler_name: scheduler_name.to_string(),
        }
    }
}

impl ClusterApi for KubeApi {
    fn bind(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), ApiError>> {
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let name = pod.metadata.name.clone().unwrap_or_default();
        let body = binding(pod, node);
        Box::pin(async move {
            api.create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &body,
            )
            .await
            .map(|_| ())
            .map_err(|e| ApiError(e.to_string()))
        })
    }

    fn unschedulable(&self, pod: &Pod, message: &str) -> BoxFuture<'static, Result<(), ApiError>> {
        let ns = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let patch = unschedulable_condition_patch(message);
        let (events, regarding, message) = (
            self.events.clone(),
            events::reference(pod),
            message.to_string(),
        );
        Box::pin(async move {
            let status = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await;
            // Best effort, as kube-scheduler's recorder: a repeat bumps the first one's count.
            events
                .record(&regarding, EventType::Warning, "FailedScheduling", &message)
                .await;
            status.map_err(|e| ApiError(format!("setting PodScheduled on {ns}/{name}: {e}")))?;
            Ok(())
        })
    }

    fn select_node(
        &self,
        namespace: &str,
        claim: &str,
        node: &str,
    ) -> BoxFuture<'static, Result<(), ApiError>> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({"metadata": {"annotations": {
            (crate::volumes::SELECTED_NODE): node,
        }}});
        let (claim, namespace) = (claim.to_string(), namespace.to_string());
        Box::pin(async move {
            claims
                .patch(&claim, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| {
                    ApiError(format!(
                        "selecting the node of claim {namespace}/{claim}: {e}"
                    ))
                })
        })
    }

    fn preempt(
        &self,
        victim: &PodInfo,
        preemptor: &Pod,
        node: &str,
    ) -> BoxFuture<'static, Result<(), ApiError>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &victim.namespace);
        let (name, uid) = (victim.name.clone(), victim.uid.clone());
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(victim.namespace.clone()),
            name: Some(name.clone()),
            uid: Some(uid.clone()),
            ..Default::default()
        };
        let message = format!(
            "Preempted by pod {} on node {node}",
            preemptor.metadata.uid.as_deref().unwrap_or_default()
        );
        let patch = preemption_condition_patch(&self.scheduler_name);
        let events = self.events.clone();
        let key = victim.key.clone();
        Box::pin(async move {
            let gone = |e: &_| skiff_client::status_code(e) == Some(404);
            match pods
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
            {
                Ok(_) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(ApiError(format!("marking {key} for preemption: {e}"))),
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match pods.delete(&name, &params).await {
                Ok(_) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(ApiError(format!("preempting {key}: {e}"))),
            }
            events
                .record(&regarding, EventType::Normal, "Preempted", &message)
                .await;
            Ok(())
        })
    }

    fn nominate(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), ApiError>> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let name = pod.metadata.name.clone().unwrap_or_default();
        let patch = serde_json::json!({"status": {"nominatedNodeName": node}});
        Box::pin(async move {
            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| ApiError(format!("nominating a node for {ns}/{name}: {e}")))
        })
    }
}

/// Runs the scheduler until `shutdown`: informers on pods, nodes, Services and ReplicaSets feed
/// the cache and the queue; one loop decides; binds run concurrently, rate-limited.
pub async fn run(client: Client, options: Options, shutdown: CancellationToken) -> Result<()> {
    let scheduler = start(client, &options, shutdown.clone()).await?;
    let algorithm = options.algorithm()?;
    tracing::info!(?algorithm, name = %options.scheduler_name, "scheduler running");
    scheduler.run_loop(algorithm, shutdown).await;
    Ok(())
}

/// Builds the scheduler, registers its informers and waits for them to sync, and starts the
/// housekeeping task. The caller runs [`Scheduler::run_loop`].
pub async fn start(
    client: Client,
    options: &Options,
    shutdown: CancellationToken,
) -> Result<Arc<Scheduler>> {
    // Fail on a bad policy before touching the cluster.
    options.algorithm()?;
    let api = Arc::new(KubeApi::new(client.clone(), &options.scheduler_name));
    let scheduler = Scheduler::new(
        &options.scheduler_name,
        api,
        options.bind_qps,
        options.bind_burst,
        Duration::from_secs(options.assume_ttl_seconds),
    );
    let factory = SharedInformerFactory::new(client);
    let pods = factory.informer::<Pod>();
    let nodes = factory.informer::<Node>();
    let services = factory.informer::<Service>();
    let replica_sets = factory.informer::<ReplicaSet>();
    let claims = factory.informer::<PersistentVolumeClaim>();
    let volumes = factory.informer::<PersistentVolume>();
    let classes = factory.informer::<StorageClass>();
    let budgets = factory.informer::<PodDisruptionBudget>();
    {
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        claims.add_handler(handler_fn(
            move |c: &Arc<PersistentVolumeClaim>| a.on_claim(c, false),
            move |_: &Arc<PersistentVolumeClaim>, c: &Arc<PersistentVolumeClaim>| {
                u.on_claim(c, false)
            },
            move |c: &Arc<PersistentVolumeClaim>| d.on_claim(c, true),
        ));
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        volumes.add_handler(handler_fn(
            move |v: &Arc<PersistentVolume>| a.on_volume(v, false),
            move |_: &Arc<PersistentVolume>, v: &Arc<PersistentVolume>| u.on_volume(v, false),
            move |v: &Arc<PersistentVolume>| d.on_volume(v, true),
        ));
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        budgets.add_handler(handler_fn(
            move |b: &Arc<PodDisruptionBudget>| a.on_budget(b, false),
            move |_: &Arc<PodDisruptionBudget>, b: &Arc<PodDisruptionBudget>| u.on_budget(b, false),
            move |b: &Arc<PodDisruptionBudget>| d.on_budget(b, true),
        ));
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        classes.add_handler(handler_fn(
            move |c: &Arc<StorageClass>| a.on_class(c, false),
            move |_: &Arc<StorageClass>, c: &Arc<StorageClass>| u.on_class(c, false),
            move |c: &Arc<StorageClass>| d.on_class(c, true),
        ));
    }
    {
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        pods.add_handler(handler_fn(
            move |p: &Arc<Pod>| a.on_pod(p),
            move |_: &Arc<Pod>, p: &Arc<Pod>| u.on_pod(p),
            move |p: &Arc<Pod>| d.on_pod_delete(p),
        ));
    }
    {
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        nodes.add_handler(handler_fn(
            move |n: &Arc<Node>| a.on_node(n),
            move |_: &Arc<Node>, n: &Arc<Node>| u.on_node(n),
            move |n: &Arc<Node>| d.on_node_delete(n),
        ));
    }
    {
        fn group(s: &Service) -> (String, String, Option<Selector>) {
            let sel = s
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .map(Selector::from_set);
            (
                s.metadata.namespace.clone().unwrap_or_default(),
                s.metadata.name.clone().unwrap_or_default(),
                sel,
            )
        }
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        services.add_handler(handler_fn(
            move |s: &Arc<Service>| {
                let (ns, n, sel) = group(s);
                a.on_group(GroupKind::Service, &ns, &n, sel)
            },
            move |_: &Arc<Service>, s: &Arc<Service>| {
                let (ns, n, sel) = group(s);
                u.on_group(GroupKind::Service, &ns, &n, sel)
            },
            move |s: &Arc<Service>| {
                let (ns, n, _) = group(s);
                d.on_group(GroupKind::Service, &ns, &n, None)
            },
        ));
    }
    {
        fn group(rs: &ReplicaSet) -> (String, String, Option<Selector>) {
            let sel = rs
                .spec
                .as_ref()
                .and_then(|s| Selector::from_label_selector(&s.selector).ok());
            (
                rs.metadata.namespace.clone().unwrap_or_default(),
                rs.metadata.name.clone().unwrap_or_default(),
                sel,
            )
        }
        let (a, u, d) = (scheduler.clone(), scheduler.clone(), scheduler.clone());
        replica_sets.add_handler(handler_fn(
            move |r: &Arc<ReplicaSet>| {
                let (ns, n, sel) = group(r);
                a.on_group(GroupKind::ReplicaSet, &ns, &n, sel)
            },
            move |_: &Arc<ReplicaSet>, r: &Arc<ReplicaSet>| {
                let (ns, n, sel) = group(r);
                u.on_group(GroupKind::ReplicaSet, &ns, &n, sel)
            },
            move |r: &Arc<ReplicaSet>| {
                let (ns, n, _) = group(r);
                d.on_group(GroupKind::ReplicaSet, &ns, &n, None)
            },
        ));
    }
    factory.start(shutdown.clone());
    factory.wait_for_sync().await;
    tokio::spawn(scheduler.clone().housekeeping(shutdown));
    Ok(scheduler)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: Options,
    }

    #[test]
    fn flags_parse_with_kubernetes_defaults() {
        let o = Cli::parse_from(["x"]).options;
        assert_eq!(o.scheduler_name, "default-scheduler");
        assert_eq!(o.bind_qps, 50.0);
        assert_eq!(o.bind_burst, 100);
        let o = Cli::parse_from([
            "x",
            "--priority-weight",
            "LeastRequestedPriority=5",
            "--bind-qps",
            "1000",
        ])
        .options;
        assert_eq!(
            o.priority_weights,
            vec![("LeastRequestedPriority".to_string(), 5)]
        );
        assert!(o.algorithm().is_ok());
        assert!(Cli::try_parse_from(["x", "--priority-weight", "nope"]).is_err());
        let bad = Options {
            algorithm_provider: "Nope".into(),
            ..Options::default()
        };
        assert!(matches!(bad.algorithm(), Err(Error::UnknownProvider(_))));
    }

    #[test]
    fn policy_file_replaces_the_provider() {
        let dir = std::env::temp_dir().join(format!("skiff-sched-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.json");
        std::fs::write(
            &path,
            r#"{"predicates": [{"name": "PodFitsResources"}], "priorities": [{"name": "LeastRequestedPriority", "weight": 2}]}"#,
        )
        .unwrap();
        let o = Options {
            policy_config_file: Some(path.clone()),
            ..Options::default()
        };
        let p = o.policy(&Registry::default()).unwrap();
        assert_eq!(p.predicates.len(), 1);
        assert_eq!(p.priorities[0].weight, 2);
        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(o.algorithm(), Err(Error::PolicyFile { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

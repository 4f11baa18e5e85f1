//! The scheduler benchmark (`skiff bench scheduler`), in the spirit of kube-scheduler's
//! `scheduler_perf` SchedulingBasic: register hollow nodes (Node objects with capacity and a Ready
//! condition, no kubelet) and a backlog of pods through the API, start the scheduler, and measure
//! pods bound per second end to end, a pod counting when its bind shows up in a watch (that is,
//! once it is durable in the log).
//!
//! [`decide_only`] measures the algorithm and cache alone, in process, with a binder that does
//! nothing, to separate the scheduler's own cost from the API server's.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeStatus, Pod, PodSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use skiff_client::api::{ListParams, ObjectList, PostParams, Request, WatchEvent, WatchParams};
use skiff_client::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::binder::{ApiError, ClusterApi};
use crate::run::Options;
use crate::scheduler::Scheduler;

/// What to measure.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchOptions {
    /// Hollow nodes to register.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Pods to schedule.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,
    /// Create requests in flight while registering nodes and pods.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// The namespace of the pods.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// The scheduler's bind rate limit during the run (0: none).
    #[arg(long, default_value_t = 0.0)]
    pub bind_qps: f64,
    /// The scheduler's percentage of nodes to score (0: kube-scheduler's adaptive default).
    #[arg(long, default_value_t = 0)]
    pub percentage_of_nodes_to_score: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout_seconds: u64,
    /// The API server's process id, when it runs apart, to report its CPU time.
    #[arg(skip)]
    pub server_pid: Option<u32>,
}

/// What was measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Hollow nodes.
    pub nodes: usize,
    /// Pods.
    pub pods: usize,
    /// Seconds to register the nodes.
    pub nodes_seconds: f64,
    /// Seconds to create the pods.
    pub create_seconds: f64,
    /// Seconds from starting the scheduler to its informers being synced.
    pub sync_seconds: f64,
    /// Seconds from starting the scheduler until the watch showed every pod bound.
    pub total_seconds: f64,
    /// Pods bound per second, from the informers being synced to the last bind in the watch.
    pub pods_per_second: f64,
    /// Pods bound per second including the informer sync.
    pub pods_per_second_with_sync: f64,
    /// Binds that failed and were retried.
    pub bind_errors: u64,
    /// Attempts that found no node.
    pub unschedulable: u64,
    /// CPU seconds this process used from starting the scheduler to the end.
    pub cpu_seconds: f64,
    /// CPU seconds the API server used over the same span (if its pid was given).
    pub server_cpu_seconds: Option<f64>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "nodes {}, pods {}", self.nodes, self.pods)?;
        writeln!(
            f,
            "registered nodes in {:.1} s ({:.0}/s); created pods in {:.1} s ({:.0}/s)",
            self.nodes_seconds,
            self.nodes as f64 / self.nodes_seconds,
            self.create_seconds,
            self.pods as f64 / self.create_seconds
        )?;
        writeln!(
            f,
            "scheduler synced in {:.2} s; all bound after {:.2} s",
            self.sync_seconds, self.total_seconds
        )?;
        writeln!(
            f,
            "pods bound per second: {:.0} (after sync), {:.0} (including sync)",
            self.pods_per_second, self.pods_per_second_with_sync
        )?;
        write!(
            f,
            "bind errors {}, unschedulable attempts {}; CPU while scheduling: scheduler process {:.1} s",
            self.bind_errors, self.unschedulable, self.cpu_seconds
        )?;
        if let Some(s) = self.server_cpu_seconds {
            write!(f, ", API server {s:.1} s")?;
        }
        Ok(())
    }
}

/// Benchmark failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The client's error.
        #[source]
        source: skiff_client::Error,
    },
    /// Not every pod was bound in time.
    #[error("only {bound} of {pods} pods were bound after {seconds} s")]
    Timeout {
        /// Pods bound.
        bound: usize,
        /// Pods wanted.
        pods: usize,
        /// The timeout.
        seconds: u64,
    },
    /// The scheduler could not start.
    #[error(transparent)]
    Scheduler(#[from] crate::Error),
}

/// A hollow node: 4 CPUs, 32 GiB, 110 pods, Ready.
pub fn hollow_node(name: &str) -> Node {
    let resources: std::collections::BTreeMap<String, Quantity> =
        [("cpu", "4"), ("memory", "32Gi"), ("pods", "110")]
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("HollowNode".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// A benchmark pod: one pause container requesting 100m CPU and 128 MiB.
pub fn bench_pod(namespace: &str, name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some([("app".to_string(), "bench".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "pause".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        [
                            ("cpu".to_string(), Quantity("100m".into())),
                            ("memory".to_string(), Quantity("128Mi".into())),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn api_err<E: Into<skiff_client::Error>>(what: impl Into<String>) -> impl FnOnce(E) -> Error {
    let what = what.into();
    move |source| Error::Api {
        what,
        source: source.into(),
    }
}

/// CPU seconds (user + system) this process has used, from `/proc/self/stat` (0 if unreadable).
pub fn process_cpu_seconds(pid: Option<u32>) -> f64 {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces) start at ") ".
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command name.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

/// The only fields of a pod the counter reads. The counter runs in the scheduler's process, on
/// the same cores: decoding every watch event into a whole `Pod` would bill the measurement's
/// own overhead to the scheduler.
#[derive(Clone, Debug, Default, serde::Deserialize)]
struct PodPlacement {
    #[serde(default)]
    metadata: PlacementMeta,
    #[serde(default)]
    spec: PlacementSpec,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlacementMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resource_version: Option<String>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlacementSpec {
    #[serde(default)]
    node_name: Option<String>,
}

impl PodPlacement {
    fn is_bound(&self) -> bool {
        self.spec
            .node_name
            .as_deref()
            .is_some_and(|n| !n.is_empty())
    }
}

/// Publishes how many pods the watch has shown bound; relists (and counts again) when the
/// watch breaks.
async fn count_bound(
    client: Client,
    namespace: String,
    bound_tx: tokio::sync::watch::Sender<usize>,
) {
    let request = Request::new(format!("/api/v1/namespaces/{namespace}/pods"));
    let mut seen = HashSet::new();
    loop {
        let list = match request.list(&ListParams::default()) {
            Ok(r) => client
                .request::<ObjectList<PodPlacement>>(r)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let list = match list {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %e, "bench list failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        for p in list.items {
            if p.is_bound() {
                seen.insert(p.metadata.name);
            }
        }
        let _ = bound_tx.send(seen.len());
        let mut rv = list.metadata.resource_version.unwrap_or_default();
        loop {
            let stream = match request.watch(&WatchParams::default().timeout(290), &rv) {
                Ok(r) => client
                    .request_events::<PodPlacement>(r)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "bench watch failed; relisting");
                    break;
                }
            };
            let mut stream = std::pin::pin!(stream);
            let mut broken = false;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                        if let Some(v) = p.metadata.resource_version.clone() {
                            rv = v;
                        }
                        if p.is_bound() && seen.insert(p.metadata.name) {
                            let _ = bound_tx.send(seen.len());
                        }
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Ok(WatchEvent::Deleted(_)) => {}
                    Ok(WatchEvent::Error(e)) => {
                        tracing::warn!(error = ?e, "bench watch error; relisting");
                        broken = true;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "bench watch stream error; relisting");
                        broken = true;
                        break;
                    }
                }
            }
            if broken {
                break;
            }
        }
    }
}

/// Creates a node with its status (set through `nodes/status` if the create dropped it).
pub async fn register_node(api: &Api<Node>, node: Node) -> Result<(), Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let created = api
        .create(&PostParams::default(), &node)
        .await
        .map_err(api_err(format!("creating node {name}")))?;
    let has_status = created
        .status
        .as_ref()
        .is_some_and(|s| s.allocatable.is_some());
    if !has_status {
        let mut with_status = created;
        with_status.status = node.status;
        api.replace_status(&name, &PostParams::default(), &with_status)
            .await
            .map_err(api_err(format!("setting the status of node {name}")))?;
    }
    Ok(())
}

/// Registers the nodes and pods, runs the scheduler, and measures.
pub async fn run(client: Client, opts: BenchOptions) -> Result<Report, Error> {
    let nodes_api: Api<Node> = Api::all(client.clone());
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &opts.namespace);

    let t = Instant::now();
    futures::stream::iter(0..opts.nodes)
        .map(|i| {
            let api = nodes_api.clone();
            async move { register_node(&api, hollow_node(&format!("hollow-{i}"))).await }
        })
        .buffer_unordered(opts.concurrency.max(1))
        .try_collect::<()>()
        .await?;
    let nodes_seconds = t.elapsed().as_secs_f64();

    let t = Instant::now();
    futures::stream::iter(0..opts.pods)
        .map(|i| {
            let api = pods_api.clone();
            let ns = opts.namespace.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &bench_pod(&ns, &format!("bench-{i}")),
                )
                .await
                .map(|_| ())
                .map_err(api_err(format!("creating pod bench-{i}")))
            }
        })
        .buffer_unordered(opts.concurrency.max(1))
        .try_collect::<()>()
        .await?;
    let create_seconds = t.elapsed().as_secs_f64();

    // Count binds as the watch shows them.
    let (bound_tx, mut bound_rx) = tokio::sync::watch::channel(0usize);
    let watcher = tokio::spawn(count_bound(
        client.clone(),
        opts.namespace.clone(),
        bound_tx,
    ));

    let shutdown = CancellationToken::new();
    let options = Options {
        bind_qps: opts.bind_qps,
        bind_burst: 1000,
        percentage_of_nodes_to_score: opts.percentage_of_nodes_to_score,
        ..Options::default()
    };
    let cpu0 = process_cpu_seconds(None);
    let server_cpu0 = opts.server_pid.map(|p| process_cpu_seconds(Some(p)));
    let t = Instant::now();
    let scheduler = crate::run::start(client.clone(), &options, shutdown.clone()).await?;
    let sync_seconds = t.elapsed().as_secs_f64();
    let looping = tokio::spawn(
        scheduler
            .clone()
            .run_loop(options.algorithm()?, shutdown.clone()),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(opts.timeout_seconds);
    let done = loop {
        if *bound_rx.borrow_and_update() >= opts.pods {
            break true;
        }
        if tokio::time::timeout_at(deadline, bound_rx.changed())
            .await
            .is_err()
        {
            break false;
        }
    };
    let total_seconds = t.elapsed().as_secs_f64();
    let cpu_seconds = process_cpu_seconds(None) - cpu0;
    let server_cpu_seconds = opts
        .server_pid
        .zip(server_cpu0)
        .map(|(p, c0)| process_cpu_seconds(Some(p)) - c0);
    shutdown.cancel();
    watcher.abort();
    let _ = looping.await;
    let bound = *bound_rx.borrow();
    if !done {
        return Err(Error::Timeout {
            bound,
            pods: opts.pods,
            seconds: opts.timeout_seconds,
        });
    }
    let stats = &scheduler.stats;
    Ok(Report {
        nodes: opts.nodes,
        pods: opts.pods,
        nodes_seconds,
        create_seconds,
        sync_seconds,
        total_seconds,
        pods_per_second: opts.pods as f64 / (total_seconds - sync_seconds).max(1e-9),
        pods_per_second_with_sync: opts.pods as f64 / total_seconds,
        bind_errors: stats.bind_errors.load(std::sync::atomic::Ordering::Relaxed),
        unschedulable: stats
            .unschedulable
            .load(std::sync::atomic::Ordering::Relaxed),
        cpu_seconds,
        server_cpu_seconds,
    })
}

struct NullApi;

impl ClusterApi for NullApi {
    fn bind(&self, _: &Pod, _: &str) -> BoxFuture<'static, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }
    fn unschedulable(&self, _: &Pod, _: &str) -> BoxFuture<'static, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }
    fn select_node(&self, _: &str, _: &str, _: &str) -> BoxFuture<'static, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }
    fn preempt(
        &self,
        _: &crate::nodeinfo::PodInfo,
        _: &Pod,
        _: &str,
    ) -> BoxFuture<'static, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }
    fn nominate(&self, _: &Pod, _: &str) -> BoxFuture<'static, Result<(), ApiError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Decisions per second of the scheduler alone (queue, filter, score, assume; binds that do
/// nothing), in process, over `nodes` hollow nodes and `pods` pods; and how many pods ended up
/// assumed on a node.
pub async fn decide_only(
    nodes: usize,
    pods: usize,
    percentage_of_nodes_to_score: u32,
) -> (f64, usize) {
    let scheduler = Scheduler::new(
        crate::DEFAULT_SCHEDULER_NAME,
        Arc::new(NullApi),
        0.0,
        1,
        Duration::from_secs(30),
    );
    for i in 0..nodes {
        scheduler.on_node(&Arc::new(hollow_node(&format!("hollow-{i}"))));
    }
    for i in 0..pods {
        scheduler.on_pod(&Arc::new(bench_pod("default", &format!("bench-{i}"))));
    }
    let options = Options {
        percentage_of_nodes_to_score,
        ..Options::default()
    };
    let mut algorithm = options.algorithm().expect("the default options are valid");
    let t = Instant::now();
    for _ in 0..pods {
        scheduler.schedule_one(&mut algorithm).await;
    }
    let rate = pods as f64 / t.elapsed().as_secs_f64();
    (rate, scheduler.with_cache(|c| c.pod_count()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn decide_only_places_every_pod() {
        // Correctness, not speed: every pod is assumed onto some node.
        let (_, placed) = decide_only(20, 200, 0).await;
        assert_eq!(placed, 200);
    }

    #[test]
    fn the_counter_reads_placement_from_a_whole_pod() {
        let mut pod = bench_pod("default", "p");
        pod.metadata.resource_version = Some("12".into());
        let json = serde_json::to_string(&WatchEvent::Added(pod.clone())).unwrap();
        let WatchEvent::Added(seen) =
            serde_json::from_str::<WatchEvent<PodPlacement>>(&json).unwrap()
        else {
            panic!("an ADDED event");
        };
        assert_eq!(seen.metadata.name, "p");
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("12"));
        assert!(!seen.is_bound());
        pod.spec.as_mut().unwrap().node_name = Some("hollow-3".into());
        let seen: PodPlacement =
            serde_json::from_value(serde_json::to_value(&pod).unwrap()).unwrap();
        assert!(seen.is_bound());
        let empty: PodPlacement =
            serde_json::from_value(serde_json::json!({"spec": {"nodeName": ""}})).unwrap();
        assert!(!empty.is_bound());
    }

    #[test]
    fn own_cpu_time_is_readable() {
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(process_cpu_seconds(None) >= 0.0);
    }
}

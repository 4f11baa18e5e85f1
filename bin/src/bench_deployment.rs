//! `skiff bench deployment`: how long a 1,000-replica Deployment on 50 hollow nodes takes to become
//! Available, and how long a rolling update of it takes to finish — the controllers' benchmark.
//!
//! The control plane is this binary, `skiff server` with only the controllers and the scheduler
//! beside the API server, as a child process on an empty data dir and a loopback port. The nodes
//! are hollow, as kubemark's are: Node objects (Ready, room for the pods) whose kubelet is a task
//! of this bench process. That hollow kubelet watches the pods bound to its nodes and reports each
//! Running and Ready through `pods/status` (phase, conditions, podIP from the node's pod range,
//! container statuses, startTime), renews the nodes' Leases so that node lifecycle leaves them
//! alone, and confirms the deletion of terminating pods (delete with grace 0, UID precondition),
//! the way a kubelet does once its containers are stopped. Nothing runs: there are no containers.
//!
//! Measured, each from the request that starts it to what `kubectl` would see:
//! - create: the Deployment is Available (condition `Available=True`, `availableReplicas` equal to
//!   `replicas`, `observedGeneration` current);
//! - rolling update (a template change): `kubectl rollout status` would say "successfully rolled
//!   out" (`updatedReplicas` = `replicas` = `availableReplicas`, nothing old left), and every old
//!   ReplicaSet is scaled to 0.
//!
//! Beside the times: pods per second, pod startup latency (the pod first seen by the hollow
//! kubelet's watch, to its Running status seen by the same watch), and the control plane's CPU
//! time and peak resident memory (`/proc/<pid>`).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use serde_json::json;
use skiff_client::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use skiff_client::{Api, Client, Informer, ListOptions, RateLimiter, WorkQueue, handler_fn};
use tokio_util::sync::CancellationToken;

use crate::bench::SpawnedServer;
use crate::bench_node::status_memory;

/// The namespace of node Leases.
const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The namespace and name of the benchmark Deployment.
pub(crate) const NAMESPACE: &str = "default";
const NAME: &str = "bench";
/// How often the hollow kubelet renews its nodes' Leases (the kubelet's default).
const LEASE_RENEW: Duration = Duration::from_secs(10);

/// Flags of `skiff bench deployment`.
#[derive(Debug, clap::Args)]
pub struct DeploymentArgs {
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// Hollow nodes.
    #[arg(long, default_value_t = 50)]
    nodes: usize,
    /// Status updates and deletion confirmations the hollow kubelet has in flight at once.
    #[arg(long, default_value_t = 50)]
    kubelet_concurrency: usize,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Directory for the temporary data dir (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Extra flags for the `skiff server` under test (e.g. `--server-arg=--bind-qps=0`).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
}

/// The `kubectl rollout status` verdict on a Deployment (its `DeploymentStatusViewer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rollout {
    /// Still rolling out, with kubectl's reason.
    Waiting(String),
    /// The progress deadline passed.
    Failed,
    /// Successfully rolled out.
    Done,
}

/// What `kubectl rollout status deployment/<name>` decides from `d`.
pub(crate) fn rollout_status(d: &Deployment) -> Rollout {
    let generation = d.metadata.generation.unwrap_or(0);
    let Some(status) = d.status.as_ref() else {
        return Rollout::Waiting("no status yet".into());
    };
    if generation > status.observed_generation.unwrap_or(0) {
        return Rollout::Waiting("waiting for the rollout to be observed".into());
    }
    let progressing = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing");
    if progressing.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded")) {
        return Rollout::Failed;
    }
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if updated < want {
        return Rollout::Waiting(format!("{updated} of {want} updated replicas"));
    }
    if replicas > updated {
        return Rollout::Waiting(format!(
            "{} old replicas are pending termination",
            replicas - updated
        ));
    }
    if available < updated {
        return Rollout::Waiting(format!(
            "{available} of {updated} updated replicas available"
        ));
    }
    Rollout::Done
}

/// Whether `d` is Available with every replica: the condition, the count, and a current
/// `observedGeneration`.
pub(crate) fn fully_available(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(status) = d.status.as_ref() else {
        return false;
    };
    status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
        && status.available_replicas.unwrap_or(0) == want
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Available" && c.status == "True")
}

fn deployment(replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {"containers": [{
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
                }]}
            }
        }
    }))
    .expect("a valid Deployment")
}

/// One hollow node: its name and the addresses of its pod range handed out so far.
struct PodRange {
    base: u32,
    size: u32,
    next: u32,
}

impl PodRange {
    fn parse(cidr: &str) -> Option<PodRange> {
        let (ip, len) = cidr.split_once('/')?;
        let ip: Ipv4Addr = ip.parse().ok()?;
        let len: u32 = len.parse().ok()?;
        let size = 1u32.checked_shl(32 - len)?;
        (size >= 4).then_some(PodRange {
            base: u32::from(ip),
            size,
            next: 0,
        })
    }

    /// The next host address, wrapping around (the pods holding old ones are long gone by then).
    fn allocate(&mut self) -> Ipv4Addr {
        let host = 2 + self.next % (self.size - 3);
        self.next += 1;
        Ipv4Addr::from(self.base + host)
    }
}

/// What the hollow kubelet saw and did; short critical sections only.
#[derive(Default)]
struct KubeletState {
    /// Pod name → when the watch first showed it, and when it first showed it Running.
    seen: HashMap<String, (Instant, Option<Instant>)>,
    /// Node name → its pod range.
    ranges: HashMap<String, PodRange>,
    /// Status updates sent.
    reported: u64,
    /// Deletions confirmed.
    confirmed: u64,
    /// API calls that failed (retried with backoff).
    errors: u64,
}

/// A kubemark-style kubelet for every hollow node, in this process.
pub(crate) struct HollowKubelet {
    client: Client,
    prefix: String,
    pods: Informer<Pod>,
    queue: WorkQueue<String>,
    state: Mutex<KubeletState>,
    /// Pods whose containers "exit 0" at once: reported Succeeded rather than Running.
    finishes: fn(&Pod) -> bool,
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Whether the kubelet has reported the pod started (Running) or finished.
fn reported(pod: &Pod) -> bool {
    matches!(phase(pod), "Running" | "Succeeded" | "Failed")
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

impl HollowKubelet {
    fn ours(&self, pod: &Pod) -> bool {
        node_of(pod).is_some_and(|n| n.starts_with(&self.prefix))
    }

    fn observe(&self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        {
            let mut s = self.state.lock().expect("kubelet state");
            let entry = s.seen.entry(name.clone()).or_insert((Instant::now(), None));
            if reported(pod) && entry.1.is_none() {
                entry.1 = Some(Instant::now());
            }
        }
        if self.ours(pod) && (pod.metadata.deletion_timestamp.is_some() || !reported(pod)) {
            self.queue.add(name);
        }
    }

    /// The status a kubelet reports for a pod whose containers have all started.
    fn running_status(&self, pod: &Pod, node: &str) -> serde_json::Value {
        let ip = self
            .state
            .lock()
            .expect("kubelet state")
            .ranges
            .get_mut(node)
            .map(PodRange::allocate)
            .unwrap_or(Ipv4Addr::LOCALHOST);
        let now = Timestamp::now().to_string();
        let containers: Vec<serde_json::Value> = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| {
                json!({
                    "name": c.name,
                    "image": c.image,
                    "imageID": c.image,
                    "containerID": format!("hollow://{}-{}", pod.metadata.uid.as_deref().unwrap_or(""), c.name),
                    "ready": true,
                    "started": true,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}}
                })
            })
            .collect();
        let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
        if (self.finishes)(pod) {
            // Started and exited 0 at once, as a Job's pod that has nothing to do.
            let containers: Vec<serde_json::Value> = containers
                .into_iter()
                .map(|mut c| {
                    c["ready"] = json!(false);
                    c["started"] = json!(false);
                    c["state"] = json!({"terminated": {
                        "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now
                    }});
                    c
                })
                .collect();
            let not = |t: &str| json!({"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now});
            return json!({"status": {
                "phase": "Succeeded",
                "conditions": [
                    cond("Initialized"),
                    not("Ready"),
                    not("ContainersReady"),
                    cond("PodScheduled"),
                ],
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": ip.to_string(),
                "podIPs": [{"ip": ip.to_string()}],
                "startTime": now,
                "containerStatuses": containers,
                "qosClass": "Burstable"
            }});
        }
        json!({"status": {
            "phase": "Running",
            "conditions": [
                cond("PodReadyToStartContainers"),
                cond("Initialized"),
                cond("Ready"),
                cond("ContainersReady"),
                cond("PodScheduled"),
            ],
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": ip.to_string(),
            "podIPs": [{"ip": ip.to_string()}],
            "startTime": now,
            "containerStatuses": containers,
            "qosClass": "Burstable"
        }})
    }

    async fn sync(&self, name: &str) -> Result<(), skiff_client::Error> {
        let Some(pod) = self.pods.cache().get(Some(NAMESPACE), name) else {
            return Ok(());
        };
        let Some(node) = node_of(&pod).filter(|_| self.ours(&pod)) else {
            return Ok(());
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        if pod.metadata.deletion_timestamp.is_some() {
            // The containers are "stopped" at once: confirm the deletion.
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => {}
                Err(e) if matches!(skiff_client::status_code(&e), Some(404 | 409)) => {}
                Err(e) => return Err(e.into()),
            }
            self.state.lock().expect("kubelet state").confirmed += 1;
        } else if !reported(&pod) {
            let patch = self.running_status(&pod, node);
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if skiff_client::status_code(&e) == Some(404) => {}
                Err(e) => return Err(e.into()),
            }
            self.state.lock().expect("kubelet state").reported += 1;
        }
        Ok(())
    }

    fn spawn_workers(self: &Arc<Self>, n: usize) {
        for _ in 0..n.max(1) {
            let k = self.clone();
            tokio::spawn(async move {
                while let Some(name) = k.queue.get().await {
                    match k.sync(&name).await {
                        Ok(()) => k.queue.forget(&name),
                        Err(e) => {
                            tracing::debug!(pod = %name, error = %e, "hollow kubelet call failed");
                            k.state.lock().expect("kubelet state").errors += 1;
                            k.queue.add_rate_limited(name.clone());
                        }
                    }
                    k.queue.done(&name);
                }
            });
        }
    }

    /// Startup latencies of the pods first seen at or after `since`, sorted.
    pub(crate) fn latencies_since(&self, since: Instant) -> Vec<Duration> {
        let s = self.state.lock().expect("kubelet state");
        let mut out: Vec<Duration> = s
            .seen
            .values()
            .filter(|(first, _)| *first >= since)
            .filter_map(|(first, run)| run.map(|r| r - *first))
            .collect();
        out.sort();
        out
    }
}

/// Creates the Leases of the hollow nodes and renews them every [`LEASE_RENEW`] until `stop`.
async fn keep_leases(client: Client, nodes: Vec<Node>, stop: CancellationToken) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(LEASE_NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(e) if skiff_client::status_code(&e) == Some(409) => {}
        Err(e) => return Err(e).context("creating the lease namespace"),
    }
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut held: Vec<Lease> = Vec::new();
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(LEASE_NAMESPACE.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.clone(),
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(name.clone()),
                lease_duration_seconds: Some(40),
                renew_time: Some(MicroTime(Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        held.push(
            leases
                .create(&PostParams::default(), &lease)
                .await
                .with_context(|| format!("creating the lease of {name}"))?,
        );
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(LEASE_RENEW) => {}
            }
            for lease in &mut held {
                let name = lease.metadata.name.clone().unwrap_or_default();
                if let Some(spec) = lease.spec.as_mut() {
                    spec.renew_time = Some(MicroTime(Timestamp::now()));
                }
                let renewed = match leases.replace(&name, &PostParams::default(), lease).await {
                    Ok(l) => Ok(l),
                    Err(_) => match leases.get(&name).await {
                        Ok(mut fresh) => {
                            fresh.spec = lease.spec.clone();
                            leases.replace(&name, &PostParams::default(), &fresh).await
                        }
                        Err(e) => Err(e),
                    },
                };
                match renewed {
                    Ok(l) => *lease = l,
                    Err(e) => tracing::warn!(lease = %name, error = %e, "renewing a hollow lease"),
                }
            }
        }
    });
    Ok(())
}

/// Registers the hollow nodes and waits until node IPAM has given each a pod range.
async fn register_nodes(client: &Client, count: usize, prefix: &str) -> Result<Vec<Node>> {
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..count {
        let node = skiff_scheduler::bench::hollow_node(&format!("{prefix}{i}"));
        skiff_scheduler::bench::register_node(&nodes, node).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed: Vec<Node> = nodes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| n.metadata.name.as_deref().unwrap_or("").starts_with(prefix))
            .collect();
        if listed.len() == count
            && listed
                .iter()
                .all(|n| n.spec.as_ref().and_then(|s| s.pod_cidr.as_ref()).is_some())
        {
            return Ok(listed);
        }
        if Instant::now() > deadline {
            bail!("the hollow nodes got no pod range within 60 s (is nodeipam running?)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Control-plane figures over one phase.
pub(crate) struct Usage {
    cpu_seconds: f64,
    rss: u64,
    peak_rss: u64,
}

/// CPU seconds (user + system) of `pid`.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    skiff_scheduler::bench::process_cpu_seconds(Some(pid))
}

pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Polls the Deployment until `done` holds, printing progress every few seconds.
async fn wait_for(
    api: &Api<Deployment>,
    kubelet: &HollowKubelet,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Deployment) -> bool,
) -> Result<Duration> {
    let began = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let d = api.get(NAME).await?;
        if done(&d) {
            return Ok(began.elapsed());
        }
        if began.elapsed() > timeout {
            bail!(
                "{what}: not done after {} s; status {:?}",
                timeout.as_secs(),
                d.status
            );
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            last_print = Instant::now();
            let s = d.status.clone().unwrap_or_default();
            let k = kubelet.state.lock().expect("kubelet state");
            eprintln!(
                "  {what} {:.0} s: replicas {} updated {} available {}; hollow kubelet reported {} Running, confirmed {} deletions",
                began.elapsed().as_secs_f64(),
                s.replicas.unwrap_or(0),
                s.updated_replicas.unwrap_or(0),
                s.available_replicas.unwrap_or(0),
                k.reported,
                k.confirmed
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Whether every ReplicaSet of the Deployment but the newest is scaled to and at 0.
async fn old_sets_at_zero(client: &Client) -> Result<bool> {
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), NAMESPACE);
    let listed = sets
        .list(&ListParams::default().labels(&format!("app={NAME}")))
        .await?
        .items;
    let revision = |rs: &ReplicaSet| -> i64 {
        rs.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("deployment.kubernetes.io/revision"))
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    };
    let newest = listed.iter().map(revision).max().unwrap_or(0);
    Ok(listed.len() >= 2
        && listed.iter().filter(|rs| revision(rs) < newest).all(|rs| {
            rs.spec.as_ref().and_then(|s| s.replicas) == Some(0)
                && rs.status.as_ref().map_or(0, |s| s.replicas) == 0
        }))
}

pub(crate) fn print_phase(
    what: &str,
    took: Duration,
    pods: i32,
    usage: &Usage,
    latencies: Option<&[Duration]>,
) {
    println!(
        "{what}: {:.2} s ({:.0} pods/s)",
        took.as_secs_f64(),
        f64::from(pods) / took.as_secs_f64()
    );
    if let Some(l) = latencies {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "  pod startup (first seen by the hollow kubelet's watch to Running seen by it), {} pods: p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            l.len(),
            ms(percentile(l, 50.0)),
            ms(percentile(l, 90.0)),
            ms(percentile(l, 99.0)),
            ms(percentile(l, 100.0)),
        );
    }
    println!(
        "  control plane: CPU {:.1} s ({:.0}% of one core), VmRSS {} at the end, VmHWM {}",
        usage.cpu_seconds,
        100.0 * usage.cpu_seconds / took.as_secs_f64(),
        mib(usage.rss),
        mib(usage.peak_rss)
    );
}

/// A control plane under test (`skiff server` with the controllers and the scheduler) and
/// hollow nodes with their kubelet in this process.
pub(crate) struct HollowCluster {
    /// The server, held so that it is stopped when the cluster is dropped.
    _server: SpawnedServer,
    /// A client of the server.
    pub(crate) client: Client,
    /// The server's process id.
    pub(crate) pid: u32,
    /// The hollow kubelet.
    pub(crate) kubelet: Arc<HollowKubelet>,
    _stop: tokio_util::sync::DropGuard,
    _queue_down: QueueGuard,
}

impl HollowCluster {
    /// Starts the server with `server_args` added, registers `nodes` hollow nodes with leases
    /// and pod ranges, and starts their kubelet (`concurrency` calls in flight; `finishes` says
    /// which pods exit at once).
    pub(crate) async fn start(
        nodes: usize,
        concurrency: usize,
        dir: Option<&std::path::Path>,
        extra_server_args: &[String],
        finishes: fn(&Pod) -> bool,
    ) -> Result<HollowCluster> {
        let mut server_args: Vec<String> =
            vec!["--components".into(), "controllers,scheduler".into()];
        server_args.extend(extra_server_args.iter().cloned());
        let mut server = SpawnedServer::start_with("server", &server_args, dir)?;
        let client = server.wait_ready().await?;
        let pid = server.child.id();

        let prefix = "hollow-node-";
        let began = Instant::now();
        let registered = register_nodes(&client, nodes, prefix).await?;
        let stop = CancellationToken::new();
        keep_leases(client.clone(), registered.clone(), stop.clone()).await?;
        println!(
            "{nodes} hollow nodes registered with leases and pod ranges in {:.2} s",
            began.elapsed().as_secs_f64()
        );

        let pods =
            Informer::<Pod>::new(client.clone(), ListOptions::default().namespace(NAMESPACE));
        let kubelet = Arc::new(HollowKubelet {
            client: client.clone(),
            prefix: prefix.to_string(),
            pods: pods.clone(),
            queue: WorkQueue::new(RateLimiter::exponential(
                Duration::from_millis(5),
                Duration::from_secs(5),
            )),
            state: Mutex::new(KubeletState {
                ranges: registered
                    .iter()
                    .filter_map(|n| {
                        let cidr = n.spec.as_ref()?.pod_cidr.as_deref()?;
                        Some((n.metadata.name.clone()?, PodRange::parse(cidr)?))
                    })
                    .collect::<HashMap<_, _>>(),
                ..KubeletState::default()
            }),
            finishes,
        });
        let (a, u) = (kubelet.clone(), kubelet.clone());
        pods.add_handler(handler_fn(
            move |p: &Arc<Pod>| a.observe(p),
            move |_: &Arc<Pod>, p: &Arc<Pod>| u.observe(p),
            |_: &Arc<Pod>| {},
        ));
        pods.start(stop.clone());
        pods.wait_for_sync().await;
        kubelet.spawn_workers(concurrency);
        let queue_down = QueueGuard(kubelet.queue.clone());
        Ok(HollowCluster {
            _server: server,
            client,
            pid,
            kubelet,
            _stop: stop.drop_guard(),
            _queue_down: queue_down,
        })
    }

    /// The control plane's CPU seconds and memory since `cpu0` (its CPU seconds then).
    pub(crate) fn usage_since(&self, cpu0: f64) -> Result<Usage> {
        let (rss, peak_rss) = status_memory(self.pid)?;
        Ok(Usage {
            cpu_seconds: cpu_seconds(self.pid) - cpu0,
            rss,
            peak_rss,
        })
    }

    /// The hollow kubelet's counters, as the last line of a report.
    pub(crate) fn print_kubelet(&self, own_cpu: f64) {
        let k = self.kubelet.state.lock().expect("kubelet state");
        println!(
            "hollow kubelet: {} status reports, {} deletions confirmed, {} failed calls retried; its process used {:.1} s CPU; load average now {}",
            k.reported,
            k.confirmed,
            k.errors,
            skiff_scheduler::bench::process_cpu_seconds(None) - own_cpu,
            load_average()
        );
    }
}

/// Runs `skiff bench deployment` and prints its report.
pub async fn run(args: DeploymentArgs) -> Result<()> {
    println!(
        "skiff bench deployment: {} replicas on {} hollow nodes; started {} UTC, load average {}",
        args.replicas,
        args.nodes,
        Timestamp::now().strftime("%Y-%m-%d %H:%M:%S"),
        load_average()
    );
    let cluster = HollowCluster::start(
        args.nodes,
        args.kubelet_concurrency,
        args.dir.as_deref(),
        &args.server_args,
        |_| false,
    )
    .await?;
    let (client, kubelet) = (cluster.client.clone(), cluster.kubelet.clone());
    let timeout = Duration::from_secs(args.timeout_seconds);

    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let own_cpu = skiff_scheduler::bench::process_cpu_seconds(None);

    // Phase 1: create, to Available with every replica.
    let cpu0 = cpu_seconds(cluster.pid);
    let created = Instant::now();
    api.create(&PostParams::default(), &deployment(args.replicas))
        .await
        .context("creating the Deployment")?;
    let took = wait_for(&api, &kubelet, "create", timeout, fully_available).await?;
    let usage = cluster.usage_since(cpu0)?;
    let latencies = kubelet.latencies_since(created);
    print_phase(
        "create to Available (availableReplicas = replicas, observedGeneration current)",
        took,
        args.replicas,
        &usage,
        Some(&latencies),
    );

    // Phase 2: a template change, to the rollout finished.
    let cpu0 = cpu_seconds(cluster.pid);
    let updated = Instant::now();
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"bench.skiff.dev/revision": "2"}}}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("changing the template")?;
    let took = wait_for(&api, &kubelet, "rolling update", timeout, |d| {
        rollout_status(d) == Rollout::Done
    })
    .await?;
    let rolled = Instant::now();
    let deadline = rolled + timeout;
    while !old_sets_at_zero(&client).await? {
        if Instant::now() > deadline {
            bail!("old ReplicaSets not at 0 within {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let zero_lag = rolled.elapsed();
    let usage = cluster.usage_since(cpu0)?;
    let latencies = kubelet.latencies_since(updated);
    print_phase(
        "rolling update (25% surge, 25% unavailable) to `kubectl rollout status` success",
        took,
        args.replicas,
        &usage,
        Some(&latencies),
    );
    println!(
        "  old ReplicaSets at 0 replicas (spec and status) {:.0} ms after that",
        zero_lag.as_secs_f64() * 1000.0
    );
    cluster.print_kubelet(own_cpu);
    Ok(())
}

/// Shuts the hollow kubelet's queue down (its workers end) when the bench returns.
pub(crate) struct QueueGuard(WorkQueue<String>);

impl Drop for QueueGuard {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};

    fn with_status(generation: i64, replicas: i32, status: DeploymentStatus) -> Deployment {
        let mut d = deployment(replicas);
        d.metadata.generation = Some(generation);
        d.status = Some(status);
        d
    }

    fn cond(type_: &str, status: &str, reason: &str) -> DeploymentCondition {
        DeploymentCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            ..DeploymentCondition::default()
        }
    }

    #[test]
    fn rollout_status_follows_kubectl() {
        let done = DeploymentStatus {
            observed_generation: Some(2),
            replicas: Some(10),
            updated_replicas: Some(10),
            available_replicas: Some(10),
            ..DeploymentStatus::default()
        };
        assert_eq!(
            rollout_status(&with_status(2, 10, done.clone())),
            Rollout::Done
        );
        // Not observed yet.
        assert!(matches!(
            rollout_status(&with_status(3, 10, done.clone())),
            Rollout::Waiting(_)
        ));
        // Old pods still counted.
        let old = DeploymentStatus {
            replicas: Some(12),
            ..done.clone()
        };
        assert!(matches!(
            rollout_status(&with_status(2, 10, old)),
            Rollout::Waiting(m) if m.contains("pending termination")
        ));
        // Updated but not yet available.
        let unavailable = DeploymentStatus {
            available_replicas: Some(9),
            ..done.clone()
        };
        assert!(matches!(
            rollout_status(&with_status(2, 10, unavailable)),
            Rollout::Waiting(_)
        ));
        let stuck = DeploymentStatus {
            conditions: Some(vec![cond(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
            )]),
            ..done
        };
        assert_eq!(rollout_status(&with_status(2, 10, stuck)), Rollout::Failed);
    }

    #[test]
    fn available_needs_condition_count_and_generation() {
        let status = DeploymentStatus {
            observed_generation: Some(1),
            available_replicas: Some(5),
            conditions: Some(vec![cond("Available", "True", "MinimumReplicasAvailable")]),
            ..DeploymentStatus::default()
        };
        assert!(fully_available(&with_status(1, 5, status.clone())));
        assert!(!fully_available(&with_status(2, 5, status.clone())));
        assert!(!fully_available(&with_status(1, 6, status.clone())));
        let no_condition = DeploymentStatus {
            conditions: Some(vec![cond(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
            )]),
            ..status
        };
        assert!(!fully_available(&with_status(1, 5, no_condition)));
    }

    #[test]
    fn pod_range_hands_out_host_addresses_and_wraps() {
        let mut r = PodRange::parse("127.100.3.0/30").unwrap();
        assert_eq!(r.allocate(), Ipv4Addr::new(127, 100, 3, 2));
        assert_eq!(r.allocate(), Ipv4Addr::new(127, 100, 3, 2));
        let mut r = PodRange::parse("127.100.3.0/24").unwrap();
        assert_eq!(r.allocate(), Ipv4Addr::new(127, 100, 3, 2));
        assert_eq!(r.allocate(), Ipv4Addr::new(127, 100, 3, 3));
        assert!(PodRange::parse("127.100.3.0/31").is_none());
        assert!(PodRange::parse("nonsense").is_none());
    }
}

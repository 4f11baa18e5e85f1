//! Pods on this node: one worker task per pod drives its containers towards the spec.
//!
//! The [`Manager`] is told of pods (`update`) and of pods gone from the API (`remove`); it spawns a
//! worker per pod UID. A worker syncs when its pod changes, when one of its containers exits, when a
//! probe result flips, when a back-off expires, and every resync period. A sync:
//!
//! ```text
//!  terminating? ── yes ──> stop probes, stop containers (SIGTERM, grace, SIGKILL),
//!      │                   report final status, Event::Terminated, remove the sandbox,
//!      no                  free IP and pod dir
//!      v
//!  sandbox and pod IP, volumes ──> init containers in order, each to exit 0 ──> containers:
//!                      (restart by policy,                          none       -> start
//!                       Never + failure = Failed)                   running    -> restart if spec hash changed
//!                                                                                 or liveness/startup failed
//!                                                                   exited     -> restart by policy after back-off
//!  ──> probe tasks for running containers ──> status (sent only when changed)
//! ```
//!
//! The sandbox comes from the runtime ([`Runtime::run_sandbox`]); its IP is the pod's, or the node's
//! for `hostNetwork`. A runtime without sandboxes of its own (the process runtime) gets a pod IP
//! from the kubelet's loopback allocator instead. Before a container starts, its image is made
//! present by its pull policy; a failed pull waits in `ErrImagePull`, then `ImagePullBackOff`
//! until the image back-off (the crash-loop back-off's settings) passes.
//!
//! What leaves the manager goes out as [`Event`]s (status, terminated, pod events), which the API
//! side turns into requests; the manager itself knows nothing of the API client.

pub mod backoff;
pub mod hooks;
pub mod probe;
pub mod sandbox;
pub mod status;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use skiff_client::events::EventType;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::ipam::{self, Allocator, Range};
use crate::runtime::{self, ContainerConfig, DnsConfig, PullPolicy, Runtime, State};
use crate::spec::{self, Sources};
use crate::volumes;
use status::Waiting;

/// Settings of the pod manager.
#[derive(Clone, Debug)]
pub struct Config {
    /// The kubelet's root directory (pods, logs, ipam live under it).
    pub root_dir: PathBuf,
    /// The node's IP (`status.hostIP`).
    pub host_ip: IpAddr,
    /// CrashLoopBackOff settings.
    pub backoff: backoff::Config,
    /// How often a worker syncs without a reason.
    pub resync: Duration,
    /// The cluster DNS servers and domain pods' resolver settings name.
    pub cluster_dns: sandbox::ClusterDns,
}

/// What the manager reports, for the API side to send.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The pod's status changed.
    Status {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
        /// The new status.
        status: PodStatus,
    },
    /// The pod is being deleted and none of its processes run any more: confirm the deletion.
    Terminated {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
    },
    /// Something worth a Kubernetes Event on the pod.
    Record {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
        /// Routine or a problem.
        type_: EventType,
        /// `Started`, `Killing`, `BackOff`, `Unhealthy`, `Failed`, `FailedMount`...
        reason: String,
        /// Details.
        message: String,
    },
}

/// Fetches the ConfigMaps and Secrets a pod refers to.
#[async_trait::async_trait]
pub trait SourceProvider: Send + Sync + 'static {
    /// The sources of `pod`'s namespace it refers to; missing ones are left out.
    async fn sources(&self, pod: &Pod) -> Sources;
}

/// A provider with fixed contents (static pods, tests).
#[async_trait::async_trait]
impl SourceProvider for Sources {
    async fn sources(&self, _pod: &Pod) -> Sources {
        self.clone()
    }
}

/// Where a container's log for one attempt lives.
pub fn log_path(
    root_dir: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
    container: &str,
    attempt: u32,
) -> PathBuf {
    log_dir(root_dir, namespace, name, uid)
        .join(container)
        .join(format!("{attempt}.log"))
}

/// The directory of a pod's logs: `<root>/logs/<namespace>_<name>_<uid>`.
pub fn log_dir(root_dir: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    root_dir
        .join("logs")
        .join(format!("{namespace}_{name}_{uid}"))
}

/// The current and previous log files of a container: the two highest attempts on disk.
pub fn container_logs(dir: &Path, container: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let mut attempts: Vec<u32> = std::fs::read_dir(dir.join(container))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    attempts.sort_unstable();
    let path = |a: &u32| dir.join(container).join(format!("{a}.log"));
    let current = attempts.last().map(path);
    let previous = attempts.iter().rev().nth(1).map(path);
    (current, previous)
}

enum Msg {
    Update(Box<Pod>),
    Remove,
}

struct Shared {
    config: Config,
    runtime: Arc<dyn Runtime>,
    ipam: Allocator,
    /// The pod range; replaced when node IPAM assigns a podCIDR.
    range: Mutex<Range>,
    sources: Arc<dyn SourceProvider>,
    /// The host's resolver settings (`/etc/resolv.conf`), the base of pods' own.
    host_dns: DnsConfig,
    events: mpsc::UnboundedSender<Event>,
    shutdown: CancellationToken,
    /// The worker tasks, awaited by [`Manager::shutdown`].
    tasks: tokio_util::task::TaskTracker,
    /// Workers by pod UID with the latest pod (status included). Short sections only.
    workers: Mutex<HashMap<String, (mpsc::UnboundedSender<Msg>, Pod)>>,
    /// Pods terminated and cleaned up whose API object may still send updates: ignored until
    /// `remove`. Lock order: `workers`, then `finished`.
    finished: Mutex<HashSet<String>>,
}

/// Runs the pods of this node. Cheap to clone.
#[derive(Clone)]
pub struct Manager {
    shared: Arc<Shared>,
}

impl Manager {
    /// A manager reporting on `events`. Workers stop when `shutdown` is cancelled, leaving the
    /// containers running (as a kubelet killed outright would) until [`Manager::shutdown`].
    pub fn new(
        config: Config,
        runtime: Arc<dyn Runtime>,
        range: Range,
        sources: Arc<dyn SourceProvider>,
        events: mpsc::UnboundedSender<Event>,
        shutdown: CancellationToken,
    ) -> ipam::Result<Self> {
        let ipam = Allocator::open(&config.root_dir.join("ipam"))?;
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                runtime,
                ipam,
                range: Mutex::new(range),
                sources,
                host_dns: runtime::cri::parse_resolv_conf(
                    &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
                ),
                events,
                shutdown,
                tasks: tokio_util::task::TaskTracker::new(),
                workers: Mutex::new(HashMap::new()),
                finished: Mutex::new(HashSet::new()),
            }),
        })
    }

    /// The kubelet's graceful shutdown: cancels the workers' token and waits for them (they end
    /// at once, a sync in progress is dropped), then hands the runtime its shutdown with each
    /// pod's termination grace period capped by `cap` (`--shutdown-grace-period`): the process
    /// runtime stops every container (processes cannot be adopted by the next kubelet), a CRI
    /// runtime leaves them to the next kubelet.
    pub async fn shutdown(&self, cap: Duration) {
        self.shared.shutdown.cancel();
        self.shared.tasks.close();
        if tokio::time::timeout(Duration::from_secs(5), self.shared.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("pod workers still running after 5 s; stopping containers anyway");
        }
        let graces: HashMap<String, Duration> = self
            .shared
            .workers
            .lock()
            .expect("workers poisoned")
            .iter()
            .map(|(uid, (_, pod))| (uid.clone(), grace_of(pod).min(cap)))
            .collect();
        let grace = |c: &runtime::Container| graces.get(&c.config.pod_uid).copied().unwrap_or(cap);
        self.shared.runtime.shutdown(&grace).await;
    }

    /// Sets the range new pod IPs come from (the Node's podCIDR once assigned).
    pub fn set_range(&self, range: Range) {
        *self.shared.range.lock().expect("range poisoned") = range;
    }

    /// A pod was added or changed (a set deletionTimestamp starts graceful termination).
    pub fn update(&self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            tracing::warn!(name = ?pod.metadata.name, "pod without uid ignored");
            return;
        };
        let mut workers = self.shared.workers.lock().expect("workers poisoned");
        if self
            .shared
            .finished
            .lock()
            .expect("finished poisoned")
            .contains(&uid)
        {
            return;
        }
        if let Some((tx, known)) = workers.get_mut(&uid) {
            // Keep the status the worker reported; take the rest from the API.
            let status = known.status.clone();
            *known = pod.clone();
            known.status = status;
            if tx.send(Msg::Update(Box::new(pod.clone()))).is_ok() {
                return;
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        workers.insert(uid.clone(), (tx, pod.clone()));
        drop(workers);
        let (worker, probe_rx) = Worker::new(self.shared.clone(), pod);
        self.shared.tasks.spawn(worker.run_loop(rx, probe_rx));
    }

    /// The pod is gone from the API without the kubelet confirming (force deletion): stop its
    /// containers at once.
    pub fn remove(&self, uid: &str) {
        let workers = self.shared.workers.lock().expect("workers poisoned");
        self.shared
            .finished
            .lock()
            .expect("finished poisoned")
            .remove(uid);
        if let Some((tx, _)) = workers.get(uid) {
            let _ = tx.send(Msg::Remove);
        }
    }

    /// The pods with workers, with the status last computed for them.
    pub fn pods(&self) -> Vec<Pod> {
        let workers = self.shared.workers.lock().expect("workers poisoned");
        let mut pods: Vec<Pod> = workers.values().map(|(_, p)| p.clone()).collect();
        pods.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        pods
    }

    /// Removes the containers, IPs and directories of pods not in `known_uids` and without a
    /// worker: what a previous kubelet run left of pods deleted while it was down.
    pub async fn cleanup_unknown(&self, known_uids: &HashSet<String>) {
        let active: HashSet<String> = self
            .shared
            .workers
            .lock()
            .expect("workers poisoned")
            .keys()
            .cloned()
            .collect();
        let keep = |uid: &str| known_uids.contains(uid) || active.contains(uid);
        let rt = &self.shared.runtime;
        let mut uids = HashSet::new();
        for c in rt.list(None) {
            if !keep(&c.config.pod_uid) {
                let _ = rt.stop(&c.id, Duration::ZERO).await;
                let _ = rt.remove(&c.id).await;
                uids.insert(c.config.pod_uid.clone());
            }
        }
        if let Ok(dir) = std::fs::read_dir(self.shared.config.root_dir.join("pods")) {
            for e in dir.flatten() {
                if let Some(uid) = e.file_name().to_str() {
                    if !keep(uid) {
                        uids.insert(uid.to_string());
                    }
                }
            }
        }
        match rt.sandbox_pods().await {
            Ok(pods) => uids.extend(pods.into_iter().filter(|uid| !keep(uid))),
            Err(err) => tracing::warn!(%err, "listing pod sandboxes"),
        }
        for uid in uids {
            tracing::info!(%uid, "cleaning up pod unknown to the API");
            if let Err(err) = rt.remove_sandbox(&uid).await {
                tracing::warn!(%err, %uid, "removing the sandbox of a pod unknown to the API");
            }
            self.shared.ipam.release(&uid);
            let pod_dir = self.shared.config.root_dir.join("pods").join(&uid);
            volumes::memory::unmount_all(&pod_dir);
            let _ = std::fs::remove_dir_all(pod_dir);
        }
    }
}

/// Per-container image pull back-off.
#[derive(Clone, Debug)]
struct PullBackoff {
    delay: Duration,
    retry_at: Timestamp,
    /// The failed pull's message.
    message: String,
    /// The image is absent under `imagePullPolicy: Never`: no pull to back off from, the
    /// container keeps waiting in `ErrImageNeverPull`.
    never: bool,
}

/// Per-container back-off bookkeeping.
#[derive(Clone, Debug)]
struct Backoff {
    /// The exited run this entry is about.
    for_id: String,
    delay: Duration,
    restart_at: Timestamp,
}

struct Worker {
    shared: Arc<Shared>,
    pod: Pod,
    uid: String,
    namespace: String,
    name: String,
    pod_dir: PathBuf,
    start_time: Timestamp,
    pod_ip: Option<IpAddr>,
    /// Failed image pulls by container name.
    pull_backoff: HashMap<String, PullBackoff>,
    /// Grace period once termination started.
    terminating: Option<Duration>,
    init_failed: bool,
    waiting: HashMap<String, Waiting>,
    backoff: HashMap<String, Backoff>,
    /// Start failures: retry after this time.
    retry_at: HashMap<String, Timestamp>,
    /// Probe tasks by (container name, kind), with the container id they probe.
    probes: HashMap<(String, probe::Kind), (String, tokio::task::JoinHandle<()>)>,
    /// The soonest a sync is needed, gathered during a sync.
    wake: Duration,
    /// The last volume/IP error reported, so a failing pod does not repeat its event.
    last_error: Option<String>,
    /// Latest probe results by (container id, kind).
    probe_results: HashMap<(String, probe::Kind), bool>,
    /// Container ids whose runtime warnings were reported, and volume warnings given.
    warned: HashSet<String>,
    probe_tx: mpsc::UnboundedSender<probe::Event>,
    last_status: Option<PodStatus>,
    /// When `last_status` was last handed to the reporter.
    last_sent: Option<tokio::time::Instant>,
}

fn grace_of(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0);
    Duration::from_secs(secs as u64)
}

impl Worker {
    fn new(shared: Arc<Shared>, pod: Pod) -> (Self, mpsc::UnboundedReceiver<probe::Event>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (probe_tx, probe_rx) = mpsc::unbounded_channel();
        let pod_dir = shared.config.root_dir.join("pods").join(&uid);
        let terminating = pod
            .metadata
            .deletion_timestamp
            .is_some()
            .then(|| grace_of(&pod));
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let worker = Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            last_status: pod.status.clone(),
            uid,
            pod,
            pod_dir,
            start_time,
            pod_ip: None,
            pull_backoff: HashMap::new(),
            terminating,
            init_failed: false,
            waiting: HashMap::new(),
            backoff: HashMap::new(),
            retry_at: HashMap::new(),
            probes: HashMap::new(),
            wake: Duration::ZERO,
            last_error: None,
            probe_results: HashMap::new(),
            warned: HashSet::new(),
            probe_tx,
            last_sent: None,
            shared,
        };
        (worker, probe_rx)
    }

    fn record(&self, type_: EventType, reason: &str, message: impl Into<String>) {
        let _ = self.shared.events.send(Event::Record {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            type_,
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    /// The runs of each container of this pod, oldest first.
    fn runs(&self) -> BTreeMap<String, Vec<runtime::Container>> {
        let mut out: BTreeMap<String, Vec<runtime::Container>> = BTreeMap::new();
        for c in self.shared.runtime.list(Some(&self.uid)) {
            out.entry(c.config.name.clone()).or_default().push(c);
        }
        for runs in out.values_mut() {
            runs.sort_by_key(|c| c.config.attempt);
        }
        out
    }
}

/// The worker's task: sync, then wait for a reason to sync again.
impl Worker {
    async fn run_loop(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Msg>,
        mut probe_rx: mpsc::UnboundedReceiver<probe::Event>,
    ) {
        let mut runtime_events = self.shared.runtime.subscribe();
        let shutdown = self.shared.shutdown.clone();
        loop {
            // A sync may wait out a grace period: shutdown does not wait for it, it stops the
            // containers itself ([`Manager::shutdown`]).
            let synced = tokio::select! {
                biased;
                _ = shutdown.cancelled() => None,
                wake = self.sync() => Some(wake),
            };
            let wake = match synced {
                Some(Some(wake)) => wake,
                Some(None) => break,
                None => {
                    for (_, (_, task)) in self.probes.drain() {
                        task.abort();
                    }
                    return;
                }
            };
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(Msg::Update(pod)) => {
                        if pod.metadata.deletion_timestamp.is_some() && self.terminating.is_none() {
                            self.terminating = Some(grace_of(&pod));
                        }
                        self.pod = *pod;
                    }
                    Some(Msg::Remove) | None => {
                        self.terminating = Some(self.terminating.unwrap_or(Duration::ZERO).min(grace_of(&self.pod)));
                    }
                },
                _ = own_exit(&mut runtime_events, &self.uid) => {}
                Some(ev) = probe_rx.recv() => {
                    self.on_probe(ev);
                }
                _ = tokio::time::sleep(wake) => {}
                _ = shutdown.cancelled() => {
                    for (_, (_, task)) in self.probes.drain() {
                        task.abort();
                    }
                    return;
                }
            }
        }
        let mut workers = self.shared.workers.lock().expect("workers poisoned");
        workers.remove(&self.uid);
        self.shared
            .finished
            .lock()
            .expect("finished poisoned")
            .insert(self.uid.clone());
    }

    fn on_probe(&mut self, ev: probe::Event) {
        if !ev.success {
            let what = match ev.kind {
                probe::Kind::Liveness => "Liveness",
                probe::Kind::Readiness => "Readiness",
                probe::Kind::Startup => "Startup",
            };
            self.record(
                EventType::Warning,
                "Unhealthy",
                format!("{what} probe failed: {}", ev.message),
            );
        }
        self.probe_results
            .insert((ev.container_id, ev.kind), ev.success);
    }
}

fn to_timestamp_after(t: Timestamp, d: Duration) -> Timestamp {
    let d = k8s_openapi::jiff::SignedDuration::try_from(d)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
    t.checked_add(d).unwrap_or(Timestamp::MAX)
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}

impl Worker {
    fn wake_in(&mut self, d: Duration) {
        self.wake = self.wake.min(d);
    }

    /// One sync; `None` once the pod is terminated and cleaned up.
    async fn sync(&mut self) -> Option<Duration> {
        if let Some(grace) = self.terminating {
            self.terminate(grace).await;
            return None;
        }
        self.wake = self.shared.config.resync;
        let mut error = None;
        if self.pod_ip.is_none() {
            match self.pod_network().await {
                Ok(ip) => self.pod_ip = Some(ip),
                Err(e) => error = Some(("FailedCreatePodSandBox", e)),
            }
        }
        let mut ready = None;
        if let Some(ip) = self.pod_ip {
            let sources = self.shared.sources.sources(&self.pod).await;
            match volumes::prepare(&self.pod, &self.pod_dir, &sources) {
                Ok(prepared) => {
                    for w in prepared.warnings {
                        if self.warned.insert(w.clone()) {
                            self.record(EventType::Warning, "MemoryVolumeOnDisk", w);
                        }
                    }
                    ready = Some((ip, prepared.paths, sources));
                }
                Err(e) => error = Some(("FailedMount", e.to_string())),
            }
        }
        match &error {
            Some((reason, message)) => {
                if self.last_error.as_ref() != Some(message) {
                    self.record(EventType::Warning, reason, message.clone());
                    self.last_error = Some(message.clone());
                }
            }
            None => self.last_error = None,
        }
        if let Some((ip, vols, sources)) = ready {
            self.drive(ip, &vols, &sources).await;
        }
        self.sync_probes();
        self.report(error.map(|(_, m)| m));
        Some(self.wake)
    }

    /// The pod's sandbox and IP: the sandbox's own, else the node's for `hostNetwork`, else one
    /// from the kubelet's allocator (a runtime without sandboxes).
    async fn pod_network(&mut self) -> Result<IpAddr, String> {
        let rt = self.shared.runtime.clone();
        let config = sandbox::config(
            &self.pod,
            &self.shared.config.root_dir,
            &self.shared.host_dns,
            &self.shared.config.cluster_dns,
        );
        let sandbox = rt
            .run_sandbox(&config)
            .await
            .map_err(|e| format!("Failed to create pod sandbox: {e}"))?;
        if let Some(ip) = sandbox.ips.first() {
            return Ok(*ip);
        }
        // A pod on the node's network has the node's address, whatever the runtime.
        if config.host_network {
            return Ok(self.shared.config.host_ip);
        }
        if rt.sandboxed() {
            return Err(format!("pod sandbox {} has no IP", sandbox.id));
        }
        let range = *self.shared.range.lock().expect("range poisoned");
        self.shared
            .ipam
            .allocate(range, &self.uid)
            .map(IpAddr::V4)
            .map_err(|e| e.to_string())
    }

    /// Removes the runs [`dead_to_remove`] names from the runtime, with their log files.
    async fn collect_garbage(&self, runs: &BTreeMap<String, Vec<runtime::Container>>) {
        for run in dead_to_remove(runs, KEEP_RUNS_PER_CONTAINER) {
            match self.shared.runtime.remove(&run.id).await {
                Ok(()) | Err(runtime::Error::NotFound(_)) => {
                    for file in crate::logs::files(&run.config.log_path) {
                        let _ = std::fs::remove_file(file);
                    }
                }
                Err(err) => tracing::warn!(%err, id = %run.id, "removing an exited container"),
            }
        }
    }

    /// Starts, restarts and kills containers towards the spec.
    async fn drive(&mut self, ip: IpAddr, vols: &BTreeMap<String, PathBuf>, sources: &Sources) {
        let spec = self.pod.spec.clone().unwrap_or_default();
        let policy = self.restart_policy();
        let runs = self.runs();
        self.collect_garbage(&runs).await;
        let latest = |name: &str| runs.get(name).and_then(|r| r.last()).cloned();
        // Ephemeral containers start once, even before initialization is done, and are never
        // restarted.
        let finished = self
            .last_status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        for ec in ephemeral_to_start(&spec, |name| runs.contains_key(name), finished) {
            let c = spec::ephemeral_container(ec);
            let target = ec
                .target_container_name
                .as_deref()
                .filter(|t| !t.is_empty())
                .and_then(|t| latest(t))
                .filter(|run| run.is_running())
                .map(|run| run.id);
            self.start_with(&c, 0, ip, vols, sources, target).await;
        }
        for ic in spec.init_containers.iter().flatten() {
            match latest(&ic.name) {
                None => {
                    self.start(ic, 0, ip, vols, sources).await;
                    return;
                }
                Some(run) => match &run.state {
                    State::Running { .. } => return,
                    State::Exited { exit_code: 0, .. } => continue,
                    State::Exited { reason, .. } => {
                        if policy == "Never" && !runtime::KUBELET_ENDED.contains(&reason.as_str()) {
                            self.init_failed = true;
                        } else {
                            self.restart_after_backoff(ic, &run, ip, vols, sources)
                                .await;
                        }
                        return;
                    }
                },
            }
        }
        let grace =
            Duration::from_secs(spec.termination_grace_period_seconds.unwrap_or(30).max(0) as u64);
        for c in &spec.containers {
            let Some(run) = latest(&c.name) else {
                self.start(c, 0, ip, vols, sources).await;
                continue;
            };
            if run.is_running() {
                let hash_changed = run.config.spec_hash != spec::spec_hash(c);
                let result = |kind| self.probe_results.get(&(run.id.clone(), kind)).copied();
                let why = if hash_changed {
                    Some(format!(
                        "Container {} definition changed, will be restarted",
                        c.name
                    ))
                } else if result(probe::Kind::Liveness) == Some(false) {
                    Some(format!(
                        "Container {} failed liveness probe, will be restarted",
                        c.name
                    ))
                } else if result(probe::Kind::Startup) == Some(false) {
                    Some(format!(
                        "Container {} failed startup probe, will be restarted",
                        c.name
                    ))
                } else {
                    None
                };
                if let Some(message) = why {
                    self.record(EventType::Normal, "Killing", message);
                    self.stop_probes(&c.name);
                    if let Err(e) = self.shared.runtime.stop(&run.id, grace).await {
                        tracing::warn!(%e, id = %run.id, "stopping container");
                    }
                    if hash_changed {
                        self.start(c, run.config.attempt + 1, ip, vols, sources)
                            .await;
                    } else {
                        // The exit is handled by restart policy and back-off on the next sync.
                        self.wake_in(Duration::ZERO);
                    }
                }
                continue;
            }
            let State::Exited {
                exit_code,
                ref reason,
                ..
            } = run.state
            else {
                unreachable!("not running means exited")
            };
            // A run the kubelet ended itself (its shutdown or restart) comes back whatever the
            // policy.
            let restart = runtime::KUBELET_ENDED.contains(&reason.as_str())
                || match policy.as_str() {
                    "Never" => false,
                    "OnFailure" => exit_code != 0,
                    _ => true,
                };
            if restart {
                self.restart_after_backoff(c, &run, ip, vols, sources).await;
            } else {
                self.waiting.remove(&c.name);
            }
        }
    }

    /// Restarts an exited container once its back-off has passed; until then it waits in
    /// CrashLoopBackOff.
    async fn restart_after_backoff(
        &mut self,
        c: &Container,
        run: &runtime::Container,
        ip: IpAddr,
        vols: &BTreeMap<String, PathBuf>,
        sources: &Sources,
    ) {
        let State::Exited {
            started_at,
            finished_at,
            reason,
            ..
        } = &run.state
        else {
            return;
        };
        if runtime::KUBELET_ENDED.contains(&reason.as_str()) {
            // Ended by the kubelet's shutdown or restart, not a crash: no back-off.
            self.start(c, run.config.attempt + 1, ip, vols, sources)
                .await;
            return;
        }
        let entry = match self.backoff.get(&c.name) {
            Some(b) if b.for_id == run.id => b.clone(),
            previous => {
                let ran_for = until(*started_at, *finished_at);
                let delay = self
                    .shared
                    .config
                    .backoff
                    .next(previous.map(|b| b.delay), ran_for);
                let b = Backoff {
                    for_id: run.id.clone(),
                    delay,
                    restart_at: to_timestamp_after(*finished_at, delay),
                };
                self.record(
                    EventType::Warning,
                    "BackOff",
                    format!(
                        "Back-off {}s restarting failed container {}",
                        delay.as_secs(),
                        c.name
                    ),
                );
                self.backoff.insert(c.name.clone(), b.clone());
                b
            }
        };
        let now = Timestamp::now();
        if now >= entry.restart_at {
            self.start(c, run.config.attempt + 1, ip, vols, sources)
                .await;
        } else {
            self.waiting.insert(
                c.name.clone(),
                Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message: Some(format!(
                        "back-off {}s restarting failed container={} pod={}_{}({})",
                        entry.delay.as_secs(),
                        c.name,
                        self.name,
                        self.namespace,
                        self.uid
                    )),
                },
            );
            self.wake_in(until(now, entry.restart_at));
        }
    }

    /// Starts attempt `attempt` of `c`; failures leave it waiting with the reason and retry after
    /// the base back-off.
    async fn start(
        &mut self,
        c: &Container,
        attempt: u32,
        ip: IpAddr,
        vols: &BTreeMap<String, PathBuf>,
        sources: &Sources,
    ) {
        self.start_with(c, attempt, ip, vols, sources, None).await;
    }

    /// [`Worker::start`], joining the process namespace of the container `target` (a runtime
    /// id) where the runtime can: an ephemeral container's `targetContainerName`.
    #[allow(clippy::too_many_arguments)]
    async fn start_with(
        &mut self,
        c: &Container,
        attempt: u32,
        ip: IpAddr,
        vols: &BTreeMap<String, PathBuf>,
        sources: &Sources,
        target: Option<String>,
    ) {
        let now = Timestamp::now();
        if let Some(at) = self.retry_at.get(&c.name) {
            if now < *at {
                let at = *at;
                self.wake_in(until(now, at));
                return;
            }
        }
        if !self.image_ready(c, now, sources).await {
            return;
        }
        let sandboxed = self.shared.runtime.sandboxed();
        let retry = self.shared.config.backoff.base;
        let host_ip = self.shared.config.host_ip.to_string();
        let fail = |this: &mut Self, reason: &str, message: String| {
            this.record(EventType::Warning, "Failed", format!("Error: {message}"));
            this.waiting.insert(
                c.name.clone(),
                Waiting {
                    reason: reason.to_string(),
                    message: Some(message),
                },
            );
            this.retry_at
                .insert(c.name.clone(), to_timestamp_after(now, retry));
            this.wake_in(retry);
        };
        let mut env = match spec::resolve_env(&self.pod, c, &ip.to_string(), &host_ip, sources) {
            Ok(env) => env,
            Err(e) => return fail(self, "CreateContainerConfigError", e.to_string()),
        };
        let root = volumes::container_root(&self.pod_dir, &c.name);
        let mounts = match volumes::mount(c, &root, vols) {
            Ok(m) => m,
            Err(e) => return fail(self, "CreateContainerError", e.to_string()),
        };
        // In a sandbox the container has its own root, hostname and working directory; on
        // the host it gets a directory of the pod's instead.
        let working_dir = if sandboxed {
            c.working_dir.clone().filter(|w| !w.is_empty())
        } else {
            match volumes::working_dir(c, &root) {
                Ok(w) => Some(w.display().to_string()),
                Err(e) => return fail(self, "CreateContainerError", e.to_string()),
            }
        };
        if !sandboxed {
            for (k, v) in [
                ("POD_ROOT", root.display().to_string()),
                ("HOSTNAME", self.name.clone()),
            ] {
                if !env.iter().any(|(name, _)| name == k) {
                    env.push((k.to_string(), v));
                }
            }
        }
        let vars: BTreeMap<&str, &str> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let expand = |list: &Option<Vec<String>>| -> Vec<String> {
            list.iter()
                .flatten()
                .map(|s| spec::expand(s, &vars))
                .collect()
        };
        let config = ContainerConfig {
            pod_uid: self.uid.clone(),
            pod_namespace: self.namespace.clone(),
            pod_name: self.name.clone(),
            name: c.name.clone(),
            attempt,
            image: c.image.clone().unwrap_or_default(),
            command: expand(&c.command),
            args: expand(&c.args),
            working_dir,
            pod_ip: ip,
            mounts,
            limits: spec::limits(c),
            security: spec::security(&self.pod, c),
            spec_hash: spec::spec_hash(c),
            log_path: log_path(
                &self.shared.config.root_dir,
                &self.namespace,
                &self.name,
                &self.uid,
                &c.name,
                attempt,
            ),
            env,
            stdin: c.stdin.unwrap_or(false),
            stdin_once: c.stdin_once.unwrap_or(false),
            tty: c.tty.unwrap_or(false),
            target_id: target,
        };
        match self.shared.runtime.start(config).await {
            Ok(container) => {
                self.waiting.remove(&c.name);
                self.retry_at.remove(&c.name);
                self.record(
                    EventType::Normal,
                    "Started",
                    format!("Started container {}", c.name),
                );
                if self.warned.insert(container.id.clone()) {
                    for w in &container.warnings {
                        self.record(EventType::Warning, "ContainerSettingsNotApplied", w.clone());
                    }
                }
                let post_start = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref());
                if let Some(handler) = post_start
                    && container.is_running()
                {
                    let target = probe::Target {
                        runtime: self.shared.runtime.clone(),
                        container_id: container.id.clone(),
                        container: c.clone(),
                        pod_ip: ip,
                    };
                    if let Err(why) = hooks::run(handler, &target, hooks::POST_START_LIMIT).await {
                        self.record(
                            EventType::Warning,
                            "FailedPostStartHook",
                            format!("PostStartHook failed: {why}"),
                        );
                        self.record(
                            EventType::Normal,
                            "Killing",
                            format!("FailedPostStartHook: stopping container {}", c.name),
                        );
                        let grace = grace_of(&self.pod);
                        if let Err(e) = self.shared.runtime.stop(&container.id, grace).await {
                            tracing::warn!(%e, id = %container.id, "stopping container");
                        }
                    }
                }
            }
            Err(e @ runtime::Error::Config(_)) => {
                fail(self, "CreateContainerConfigError", e.to_string())
            }
            Err(e) => fail(self, "RunContainerError", e.to_string()),
        }
    }

    /// Makes `c`'s image present by its pull policy; false (the container waiting in
    /// `ErrImagePull`, `ImagePullBackOff` or `ErrImageNeverPull`) when it is not.
    async fn image_ready(&mut self, c: &Container, now: Timestamp, sources: &Sources) -> bool {
        let image = c.image.clone().unwrap_or_default();
        if let Some(b) = self.pull_backoff.get(&c.name)
            && now < b.retry_at
        {
            let (retry_at, message) = (b.retry_at, b.message.clone());
            let waiting = if b.never {
                Waiting {
                    reason: "ErrImageNeverPull".into(),
                    message: Some(message),
                }
            } else {
                Waiting {
                    reason: "ImagePullBackOff".into(),
                    message: Some(format!("Back-off pulling image {image:?}: {message}")),
                }
            };
            self.waiting.insert(c.name.clone(), waiting);
            self.wake_in(until(now, retry_at));
            return false;
        }
        let policy = PullPolicy::of(c);
        let auth = crate::pull_secrets::credentials(&self.pod, &image, sources);
        match self
            .shared
            .runtime
            .ensure_image(&self.uid, &image, policy, &auth)
            .await
        {
            Ok(_) => {
                self.pull_backoff.remove(&c.name);
                true
            }
            Err(e) => {
                let never = matches!(e, runtime::Error::ImageNeverPull(_));
                let reason = if never {
                    "ErrImageNeverPull"
                } else {
                    "ErrImagePull"
                };
                let message = e.to_string();
                self.record(EventType::Warning, "Failed", format!("Error: {message}"));
                let previous = self.pull_backoff.get(&c.name).map(|b| b.delay);
                let delay = self.shared.config.backoff.next(previous, Duration::ZERO);
                self.pull_backoff.insert(
                    c.name.clone(),
                    PullBackoff {
                        delay,
                        retry_at: to_timestamp_after(now, delay),
                        message: message.clone(),
                        never,
                    },
                );
                self.waiting.insert(
                    c.name.clone(),
                    Waiting {
                        reason: reason.into(),
                        message: Some(message),
                    },
                );
                // The error shows for a moment, then the back-off (as the Kubernetes kubelet's
                // next sync shows it).
                self.wake_in((delay / 2).min(Duration::from_secs(1)));
                false
            }
        }
    }

    fn stop_probes(&mut self, container: &str) {
        self.probes.retain(|(name, _), (_, task)| {
            if name == container {
                task.abort();
                false
            } else {
                true
            }
        });
    }

    /// Probe tasks for the running containers: startup first, then liveness and readiness.
    fn sync_probes(&mut self) {
        let Some(ip) = self.pod_ip else { return };
        let spec = self.pod.spec.clone().unwrap_or_default();
        let runs = self.runs();
        let mut live_ids = HashSet::new();
        for c in &spec.containers {
            let Some(run) = runs.get(&c.name).and_then(|r| r.last()) else {
                continue;
            };
            if !run.is_running() {
                continue;
            }
            live_ids.insert(run.id.clone());
            let started = c.startup_probe.is_none()
                || self
                    .probe_results
                    .get(&(run.id.clone(), probe::Kind::Startup))
                    == Some(&true);
            let wanted = [
                (
                    probe::Kind::Startup,
                    c.startup_probe.clone().filter(|_| !started),
                ),
                (
                    probe::Kind::Liveness,
                    c.liveness_probe.clone().filter(|_| started),
                ),
                (
                    probe::Kind::Readiness,
                    c.readiness_probe.clone().filter(|_| started),
                ),
            ];
            for (kind, p) in wanted {
                let key = (c.name.clone(), kind);
                let current = self.probes.get(&key).map(|(id, _)| id.clone());
                match p {
                    Some(p) if current.as_deref() != Some(run.id.as_str()) => {
                        if let Some((_, old)) = self.probes.remove(&key) {
                            old.abort();
                        }
                        let target = probe::Target {
                            runtime: self.shared.runtime.clone(),
                            container_id: run.id.clone(),
                            container: c.clone(),
                            pod_ip: ip,
                        };
                        let task = tokio::spawn(probe::run(kind, p, target, self.probe_tx.clone()));
                        self.probes.insert(key, (run.id.clone(), task));
                    }
                    Some(_) => {}
                    None => {
                        if kind == probe::Kind::Startup {
                            // A startup probe that succeeded ended its task; keep its result.
                            self.probes.remove(&key);
                        } else if let Some((_, old)) = self.probes.remove(&key) {
                            old.abort();
                        }
                    }
                }
            }
        }
        self.probes.retain(|_, (id, task)| {
            let keep = live_ids.contains(id);
            if !keep {
                task.abort();
            }
            keep
        });
        self.probe_results
            .retain(|(id, _), _| live_ids.contains(id));
    }

    /// Computes the status and sends it when it changed.
    fn report(&mut self, message: Option<String>) {
        let spec = self.pod.spec.clone().unwrap_or_default();
        let runs = self.runs();
        let refs = |name: &str| -> Vec<&runtime::Container> {
            runs.get(name)
                .map(|r| r.iter().collect())
                .unwrap_or_default()
        };
        let init: Vec<_> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| {
                let r = refs(&c.name);
                let done = r
                    .last()
                    .is_some_and(|l| matches!(l.state, State::Exited { exit_code: 0, .. }));
                let running = r.last().is_some_and(|l| l.is_running());
                status::container_status(c, &r, self.waiting.get(&c.name), done, running || done)
            })
            .collect();
        let init_done = init.iter().all(|s| {
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        });
        let initializing = Waiting {
            reason: "PodInitializing".into(),
            message: None,
        };
        let containers: Vec<_> = spec
            .containers
            .iter()
            .map(|c| {
                let r = refs(&c.name);
                let mut waiting = self.waiting.get(&c.name);
                if waiting.is_none() && r.is_empty() && !init_done {
                    waiting = Some(&initializing);
                }
                let id = r.last().map(|l| l.id.clone()).unwrap_or_default();
                let result = |kind| self.probe_results.get(&(id.clone(), kind)).copied();
                let started =
                    c.startup_probe.is_none() || result(probe::Kind::Startup) == Some(true);
                let ready = started
                    && (c.readiness_probe.is_none()
                        || result(probe::Kind::Readiness) == Some(true));
                status::container_status(c, &r, waiting, ready, started)
            })
            .collect();
        let ephemeral: Vec<_> = spec
            .ephemeral_containers
            .iter()
            .flatten()
            .map(|ec| {
                let c = spec::ephemeral_container(ec);
                let r = refs(&c.name);
                let running = r.last().is_some_and(|l| l.is_running());
                status::container_status(&c, &r, self.waiting.get(&c.name), false, running)
            })
            .collect();
        let observed = status::Observed {
            restart_policy: self.restart_policy(),
            init_failed: self.init_failed,
            init,
            containers,
            ephemeral,
            pod_ip: self.pod_ip.map(|ip| ip.to_string()),
            host_ip: self.shared.config.host_ip.to_string(),
            start_time: Some(self.start_time),
            message,
        };
        let status = status::pod_status(&observed, self.last_status.as_ref(), Timestamp::now());
        if self.last_status.as_ref() == Some(&status) {
            self.reconcile(status);
            return;
        }
        self.send_status(status);
    }

    /// Sends `status` (unchanged since it was last sent) again when the API server's copy says
    /// otherwise and has had a resync interval to catch up: a copy that only lags behind the
    /// kubelet's last report (a watch event from before it) is not corrected.
    fn reconcile(&mut self, status: PodStatus) {
        let Some(theirs) = &self.pod.status else {
            return;
        };
        if !status::disagrees(&status, theirs) {
            return;
        }
        let window = self.shared.config.resync;
        let since = self.last_sent.map_or(window, |t| t.elapsed());
        if since < window {
            self.wake_in(window - since);
            return;
        }
        tracing::info!(
            pod = %self.name,
            namespace = %self.namespace,
            "the API server's pod status disagrees with the kubelet's: reporting it again"
        );
        self.send_status(status);
    }

    fn send_status(&mut self, status: PodStatus) {
        self.last_status = Some(status.clone());
        self.last_sent = Some(tokio::time::Instant::now());
        if let Some((_, pod)) = self
            .shared
            .workers
            .lock()
            .expect("workers poisoned")
            .get_mut(&self.uid)
        {
            pod.status = Some(status.clone());
        }
        let _ = self.shared.events.send(Event::Status {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            status,
        });
    }

    /// Stops everything, reports, confirms and cleans up.
    async fn terminate(&mut self, grace: Duration) {
        for (_, (_, task)) in self.probes.drain() {
            task.abort();
        }
        let running: Vec<runtime::Container> = self
            .shared
            .runtime
            .list(Some(&self.uid))
            .into_iter()
            .filter(|c| c.is_running())
            .collect();
        for c in &running {
            self.record(
                EventType::Normal,
                "Killing",
                format!("Stopping container {}", c.config.name),
            );
        }
        let rt = self.shared.runtime.clone();
        // Each container's preStop hook, then its stop with what is left of the grace period.
        let specs: Vec<Container> = self
            .pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
            .cloned()
            .collect();
        let pod_ip = self.pod_ip.unwrap_or(self.shared.config.host_ip);
        let stops = running.iter().map(|c| {
            let spec = specs.iter().find(|s| s.name == c.config.name).cloned();
            let rt = rt.clone();
            async move {
                let started = tokio::time::Instant::now();
                let mut failed = None;
                let mut left = grace;
                if let Some(spec) = spec
                    && let Some(handler) = spec.lifecycle.as_ref().and_then(|l| l.pre_stop.clone())
                {
                    let target = probe::Target {
                        runtime: rt.clone(),
                        container_id: c.id.clone(),
                        container: spec,
                        pod_ip,
                    };
                    if let Err(why) = hooks::run(&handler, &target, grace).await {
                        failed = Some(format!(
                            "PreStopHook failed for container {}: {why}",
                            c.config.name
                        ));
                    }
                    left = grace.saturating_sub(started.elapsed());
                }
                let _ = rt.stop(&c.id, left).await;
                failed
            }
        });
        for why in futures::future::join_all(stops).await.into_iter().flatten() {
            self.record(EventType::Warning, "FailedPreStopHook", why);
        }
        self.report(None);
        // The pod's network goes before the API is told the pod is gone, so a pod of the same
        // name that follows does not meet its IP still in use.
        if let Err(err) = rt.remove_sandbox(&self.uid).await {
            tracing::warn!(%err, pod = %self.name, "removing the pod's sandbox");
        }
        let _ = self.shared.events.send(Event::Terminated {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        });
        for c in rt.list(Some(&self.uid)) {
            let _ = rt.remove(&c.id).await;
        }
        self.shared.ipam.release(&self.uid);
        volumes::memory::unmount_all(&self.pod_dir);
        let _ = std::fs::remove_dir_all(&self.pod_dir);
        let _ = std::fs::remove_dir_all(log_dir(
            &self.shared.config.root_dir,
            &self.namespace,
            &self.name,
            &self.uid,
        ));
    }
}

/// Waits for an exit of one of this pod's containers.
async fn own_exit(rx: &mut broadcast::Receiver<String>, uid: &str) {
    loop {
        match rx.recv().await {
            Ok(u) if u == uid => return,
            Ok(_) => continue,
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// How many runs of each container a pod keeps: the latest and the one before it, which
/// `lastState` and `kubectl logs --previous` show (the Kubernetes kubelet's default of one dead
/// container per container besides the current one).
pub const KEEP_RUNS_PER_CONTAINER: usize = 2;

/// The exited runs to remove so that each container keeps its `keep` latest runs (`runs` by
/// container name, oldest first). A run still running is never removed.
fn dead_to_remove(
    runs: &BTreeMap<String, Vec<runtime::Container>>,
    keep: usize,
) -> Vec<&runtime::Container> {
    runs.values()
        .flat_map(|r| r.iter().take(r.len().saturating_sub(keep)))
        .filter(|c| !c.is_running())
        .collect()
}

/// The ephemeral containers of `spec` to start now: those that never ran (`ran` says which
/// names have a run, whatever its state). Ephemeral containers are never restarted, and a pod
/// that has `finished` starts none.
fn ephemeral_to_start<'a>(
    spec: &'a k8s_openapi::api::core::v1::PodSpec,
    ran: impl Fn(&str) -> bool,
    finished: bool,
) -> Vec<&'a k8s_openapi::api::core::v1::EphemeralContainer> {
    if finished {
        return Vec::new();
    }
    spec.ephemeral_containers
        .iter()
        .flatten()
        .filter(|ec| !ran(&ec.name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EphemeralContainer, PodSpec};

    fn spec(ephemeral: &[&str]) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Default::default()
            }],
            ephemeral_containers: Some(
                ephemeral
                    .iter()
                    .map(|n| EphemeralContainer {
                        name: n.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn names(v: Vec<&EphemeralContainer>) -> Vec<&str> {
        v.into_iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn new_ephemeral_containers_start_once() {
        let spec = spec(&["dbg", "dbg2"]);
        // Nothing ran yet: both start.
        assert_eq!(
            names(ephemeral_to_start(&spec, |_| false, false)),
            ["dbg", "dbg2"]
        );
        // One has a run (running or exited, it does not matter): only the other starts.
        assert_eq!(
            names(ephemeral_to_start(&spec, |n| n == "dbg", false)),
            ["dbg2"]
        );
        // Both ran: none is started again, exited or not.
        assert!(ephemeral_to_start(&spec, |_| true, false).is_empty());
    }

    #[test]
    fn each_container_keeps_its_two_latest_runs() {
        use status::tests::{exited, run};
        let running = |attempt| {
            run(
                attempt,
                State::Running {
                    started_at: Timestamp::from_second(30).unwrap(),
                },
            )
        };
        let ids = |v: Vec<&runtime::Container>| -> Vec<String> {
            v.into_iter().map(|c| c.id.clone()).collect()
        };
        // A crash loop at its fifth run: the running one and the one before stay.
        let mut runs = BTreeMap::new();
        runs.insert(
            "c".to_string(),
            vec![
                exited(0, 1),
                exited(1, 1),
                exited(2, 1),
                exited(3, 1),
                running(4),
            ],
        );
        assert_eq!(
            ids(dead_to_remove(&runs, KEEP_RUNS_PER_CONTAINER)),
            ["u-c-0", "u-c-1", "u-c-2"]
        );
        // Waiting in back-off: the latest exit and the one before it stay.
        runs.insert(
            "c".to_string(),
            vec![exited(0, 1), exited(1, 1), exited(2, 1)],
        );
        assert_eq!(
            ids(dead_to_remove(&runs, KEEP_RUNS_PER_CONTAINER)),
            ["u-c-0"]
        );
        // Two runs or fewer: nothing to remove.
        runs.insert("c".to_string(), vec![exited(0, 1), running(1)]);
        assert!(dead_to_remove(&runs, KEEP_RUNS_PER_CONTAINER).is_empty());
        // An old run still running (being stopped) is left to its stop.
        runs.insert("c".to_string(), vec![running(0), exited(1, 1), running(2)]);
        assert!(dead_to_remove(&runs, KEEP_RUNS_PER_CONTAINER).is_empty());
    }

    #[test]
    fn finished_pods_start_no_ephemeral_containers() {
        assert!(ephemeral_to_start(&spec(&["dbg"]), |_| false, true).is_empty());
        assert!(ephemeral_to_start(&spec(&[]), |_| false, false).is_empty());
        assert!(ephemeral_to_start(&PodSpec::default(), |_| false, false).is_empty());
    }

    #[test]
    fn ephemeral_containers_run_as_containers_and_are_known_by_name() {
        let ec = EphemeralContainer {
            name: "dbg".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sh".into()]),
            stdin: Some(true),
            target_container_name: Some("app".into()),
            ..Default::default()
        };
        let c = spec::ephemeral_container(&ec);
        assert_eq!(c.name, "dbg");
        assert_eq!(c.image.as_deref(), Some("busybox"));
        assert_eq!(c.command, Some(vec!["sh".to_string()]));
        assert_eq!(c.stdin, Some(true));
        let mut s = spec(&[]);
        s.ephemeral_containers = Some(vec![ec]);
        assert!(spec::has_container(&s, "dbg"));
        assert!(spec::has_container(&s, "app"));
        assert!(!spec::has_container(&s, "nope"));
    }
}

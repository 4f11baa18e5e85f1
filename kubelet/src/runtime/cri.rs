//! The CRI runtime: pods as sandboxes and containers of a CRI v1 runtime (containerd) reached over
//! its unix socket with gRPC.
//!
//! # What the kubelet keeps and what the runtime keeps
//! The runtime is the truth: containers, their states and exit codes live in containerd and
//! outlive the kubelet. The kubelet keeps a cache of this kubelet's containers (those labelled
//! `skiff.io/kubelet=<owner>`) so that [`Runtime::list`] is a map read, as the sync loop needs:
//!
//! ```text
//!  start/stop/remove ──> RPC, then the cache entry from ContainerStatus
//!  relist task (every relist_period) ──> ListContainers ──> ContainerStatus for new ids and
//!      changed states ──> cache; a pod whose container exited or vanished is sent on subscribe()
//! ```
//!
//! Containerd 1.6 has no CRI event stream (`GetContainerEvents` came with 1.7), so exits are found
//! by relisting, as the Kubernetes kubelet's generic PLEG does. What the sync loop needs of a
//! container it did not start itself (a previous kubelet's) is in its labels and annotations:
//! pod identity, spec hash and image as given; the rest of its `ContainerConfig` is left empty.
//!
//! # Sandboxes
//! Each pod gets one sandbox (`RunPodSandbox`): its network namespace (CNI, by containerd), its
//! IP, hostname, resolver settings and log directory. A kubelet that restarts finds the pod's ready
//! sandbox by its labels and keeps it, with its running containers. `CreateContainer` wants the
//! sandbox's config again; the cache holds it per pod.
//!
//! # Streams
//! `Exec`, `Attach` and `PortForward` answer with a URL on the runtime's streaming server, which
//! the kubelet dials and translates for its own clients ([`crate::stream::remote`]). The
//! runtime decides what a client that goes away leaves behind: containerd 1.6 lets an exec'd
//! command run to its end (its stdin closes, which ends a shell).
//!
//! # Shutdown
//! Containers run on in containerd when the kubelet stops, and the next kubelet adopts them:
//! [`Runtime::shutdown`] only refuses further starts. Pods are stopped by deleting them.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::broadcast;
use tonic::transport::{Channel, Endpoint, Uri};

use super::{
    Container, ContainerConfig, Error, ExecOutput, Image, Limits, PullPolicy, RegistryAuth, Result,
    Runtime, Sandbox, SandboxConfig, Security, Session, State, StreamOptions, StreamReader,
    StreamWriter, Version,
};
use crate::stream::remote;
use cri::image_service_client::ImageServiceClient;
use cri::runtime_service_client::RuntimeServiceClient;

/// Label on every sandbox and container: which kubelet made it (several may share a runtime).
pub const OWNER_LABEL: &str = "skiff.io/kubelet";
/// Label: the pod's UID (the Kubernetes kubelet's key, which tools such as crictl show).
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// Label: the pod's name.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// Label: the pod's namespace.
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// Label: the container's name.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// Annotation: the container's spec hash (a changed spec restarts the container).
pub const SPEC_HASH_ANNOTATION: &str = "skiff.io/spec-hash";
/// Annotation: the container's image as the pod spec gives it.
pub const IMAGE_ANNOTATION: &str = "skiff.io/image";

/// Settings of the CRI runtime.
#[derive(Clone, Debug)]
pub struct Config {
    /// The runtime's unix socket (`/run/containerd/containerd.sock`).
    pub socket: PathBuf,
    /// Value of [`OWNER_LABEL`] on what this kubelet makes: its node name.
    pub owner: String,
    /// How often containers are listed to find exits.
    pub relist_period: Duration,
    /// The cgroup parent of pods (`<parent>/pod<uid>`, cgroupfs syntax); `None` leaves it to the
    /// runtime.
    pub cgroup_parent: Option<String>,
    /// Time limit of calls that do not wait on containers (everything but pulls, stops, execs).
    pub call_timeout: Duration,
    /// The node's registry configuration: its credentials go with pulls.
    pub registries: crate::registries::Registries,
}

impl Config {
    /// Defaults for the runtime at `socket`, owned by node `owner`.
    pub fn new(socket: impl Into<PathBuf>, owner: impl Into<String>) -> Self {
        Self {
            socket: socket.into(),
            owner: owner.into(),
            relist_period: Duration::from_secs(1),
            cgroup_parent: None,
            call_timeout: Duration::from_secs(10),
            registries: Default::default(),
        }
    }
}

/// The socket path of a CRI endpoint flag: `unix:///path` or a plain absolute path.
pub fn parse_endpoint(endpoint: &str) -> std::result::Result<PathBuf, String> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(PathBuf::from(path))
    } else {
        Err(format!(
            "container runtime endpoint {endpoint:?}: expected unix:///path/to/socket"
        ))
    }
}

/// A pod's sandbox as the cache holds it.
#[derive(Clone, Debug)]
struct SandboxEntry {
    id: String,
    ips: Vec<IpAddr>,
    /// What it was made with; `CreateContainer` sends it again.
    config: cri::PodSandboxConfig,
}

#[derive(Default)]
struct Cache {
    containers: HashMap<String, Container>,
    /// The ready sandbox of each pod, by pod UID.
    sandboxes: HashMap<String, SandboxEntry>,
}

struct Inner {
    config: Config,
    channel: Channel,
    /// This kubelet's containers and sandboxes. Short sections only, never across `.await`.
    cache: Mutex<Cache>,
    events: broadcast::Sender<String>,
    /// Set by [`Runtime::shutdown`]: no more starts.
    closed: AtomicBool,
    /// The answer of `Version`, once there was one.
    version: Mutex<Option<Version>>,
}

/// A CRI v1 runtime over a unix socket. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct CriRuntime {
    inner: Arc<Inner>,
}

fn nanos(t: i64) -> Timestamp {
    Timestamp::from_nanosecond(t as i128).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// One container's reading from `ListContainerStats`: its cgroup's cumulative CPU time and
/// working set, at the CPU reading's time. A container the runtime has no CPU reading for yet is
/// left out.
fn container_usage(stats: cri::ContainerStats) -> Option<(String, Timestamp, crate::stats::Usage)> {
    let id = stats.attributes?.id;
    let cpu = stats.cpu?;
    let memory = stats.memory.unwrap_or_default();
    let value = |v: Option<cri::UInt64Value>| v.map(|v| v.value);
    let usage = crate::stats::Usage {
        cpu_core_nanos: value(cpu.usage_core_nano_seconds)?,
        working_set_bytes: value(memory.working_set_bytes).unwrap_or(0),
        usage_bytes: value(memory.usage_bytes),
        rss_bytes: value(memory.rss_bytes),
    };
    let at = if cpu.timestamp > 0 {
        nanos(cpu.timestamp)
    } else {
        Timestamp::now()
    };
    Some((id, at, usage))
}

/// Seconds for a CRI timeout field: rounded up, so that a grace of 1.5 s is not cut to 1 s.
fn seconds_up(d: Duration) -> i64 {
    d.as_secs() as i64 + i64::from(d.subsec_nanos() > 0)
}

impl CriRuntime {
    /// A runtime at `config.socket`. Connecting is lazy, so a runtime that is down is not an
    /// error here: [`Runtime::health`] reports it and the node stays NotReady until it answers.
    /// Relists in the background until the last clone is dropped; needs a tokio runtime.
    pub fn new(config: Config) -> Self {
        let socket = config.socket.clone();
        let connector = tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        });
        // The URI is required but unused: the connector decides where to connect.
        let channel = Endpoint::from_static("http://cri.invalid")
            .connect_timeout(Duration::from_secs(2))
            .connect_with_connector_lazy(connector);
        let (events, _) = broadcast::channel(256);
        let period = config.relist_period;
        let rt = Self {
            inner: Arc::new(Inner {
                config,
                channel,
                cache: Mutex::new(Cache::default()),
                events,
                closed: AtomicBool::new(false),
                version: Mutex::new(None),
            }),
        };
        tokio::spawn(relist_loop(Arc::downgrade(&rt.inner), period));
        rt
    }

    /// [`CriRuntime::new`], then the version asked and the containers listed once (logged, not
    /// failed, when the runtime does not answer).
    pub async fn connect(config: Config) -> Self {
        let rt = Self::new(config);
        match rt.version().await {
            Ok(v) => tracing::info!(
                socket = %rt.inner.config.socket.display(),
                runtime = %v.name,
                version = %v.version,
                "CRI runtime answers"
            ),
            Err(err) => tracing::warn!(
                socket = %rt.inner.config.socket.display(),
                %err,
                "CRI runtime does not answer yet; the node stays NotReady until it does"
            ),
        }
        if let Err(err) = rt.relist().await {
            tracing::debug!(%err, "first relist");
        }
        rt
    }

    /// The socket it talks to.
    pub fn socket(&self) -> &Path {
        &self.inner.config.socket
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.inner.cache.lock().expect("CRI cache poisoned")
    }

    fn runtime_client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.inner.channel.clone())
    }

    fn image_client(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.inner.channel.clone())
    }

    /// Awaits one RPC, under the call timeout unless `wait` says it may take longer.
    async fn call<T>(
        &self,
        call: &'static str,
        wait: Option<Duration>,
        rpc: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        let timeout = wait.unwrap_or(self.inner.config.call_timeout);
        match tokio::time::timeout(timeout, rpc).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(Error::Cri {
                call,
                source: Box::new(status),
            }),
            Err(_) => Err(Error::CriTimeout { call, timeout }),
        }
    }

    fn owner_selector(&self) -> HashMap<String, String> {
        HashMap::from([(OWNER_LABEL.to_string(), self.inner.config.owner.clone())])
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let request = cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let response = self
            .call(
                "ContainerStatus",
                None,
                self.runtime_client().container_status(request),
            )
            .await?;
        response.status.ok_or_else(|| Error::Cri {
            call: "ContainerStatus",
            source: Box::new(tonic::Status::internal("no status in the answer")),
        })
    }

    /// Lists this kubelet's containers and brings the cache up to date; tells the pods whose
    /// containers exited or vanished.
    async fn relist(&self) -> Result<()> {
        // Ids cached before the list: only those may be dropped as gone, since a container
        // started during the relist is cached by `start` but may be missing from the list.
        let before: HashMap<String, bool> = self
            .cache()
            .containers
            .iter()
            .map(|(id, c)| (id.clone(), c.is_running()))
            .collect();
        let request = cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: self.owner_selector(),
                ..Default::default()
            }),
        };
        let listed = self
            .call(
                "ListContainers",
                None,
                self.runtime_client().list_containers(request),
            )
            .await?
            .containers;
        let running = cri::ContainerState::ContainerRunning as i32;
        let exited = cri::ContainerState::ContainerExited as i32;
        let mut fresh = Vec::new();
        for c in &listed {
            if c.state != running && c.state != exited {
                // Created but not started (a start in progress) or unknown: next time.
                continue;
            }
            if before.get(&c.id) == Some(&(c.state == running)) {
                continue;
            }
            match self.container_status(&c.id).await {
                Ok(status) => fresh.push(status),
                Err(err) => tracing::debug!(%err, id = %c.id, "container status"),
            }
        }
        let listed_ids: HashSet<&str> = listed.iter().map(|c| c.id.as_str()).collect();
        let mut changed_pods = HashSet::new();
        {
            let mut cache = self.cache();
            for status in fresh {
                let known = cache.containers.get(&status.id);
                // Removed by `remove` while we asked: stays removed.
                if known.is_none() && before.contains_key(&status.id) {
                    continue;
                }
                let Some(container) = from_status(&status, known.map(|c| &c.config)) else {
                    continue;
                };
                if known.is_none_or(|k| k.is_running() && !container.is_running()) {
                    changed_pods.insert(container.config.pod_uid.clone());
                }
                cache.containers.insert(status.id.clone(), container);
            }
            for id in before.keys() {
                if !listed_ids.contains(id.as_str())
                    && let Some(gone) = cache.containers.remove(id)
                {
                    changed_pods.insert(gone.config.pod_uid);
                }
            }
        }
        for uid in changed_pods {
            let _ = self.inner.events.send(uid);
        }
        Ok(())
    }

    /// Refreshes one container's cache entry from the runtime.
    async fn refresh(&self, id: &str) -> Result<Container> {
        let status = self.container_status(id).await?;
        let mut cache = self.cache();
        let known = cache.containers.get(id).map(|c| c.config.clone());
        let container = from_status(&status, known.as_ref()).ok_or_else(|| Error::Cri {
            call: "ContainerStatus",
            source: Box::new(tonic::Status::internal(format!(
                "container {id} is neither running nor exited"
            ))),
        })?;
        cache.containers.insert(id.to_string(), container.clone());
        Ok(container)
    }

    async fn sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        let request = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: false,
        };
        self.call(
            "PodSandboxStatus",
            None,
            self.runtime_client().pod_sandbox_status(request),
        )
        .await?
        .status
        .ok_or_else(|| Error::Cri {
            call: "PodSandboxStatus",
            source: Box::new(tonic::Status::internal("no status in the answer")),
        })
    }

    async fn pod_sandboxes(&self, pod_uid: Option<&str>) -> Result<Vec<cri::PodSandbox>> {
        let mut selector = self.owner_selector();
        if let Some(uid) = pod_uid {
            selector.insert(POD_UID_LABEL.into(), uid.into());
        }
        let request = cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: selector,
                ..Default::default()
            }),
        };
        Ok(self
            .call(
                "ListPodSandbox",
                None,
                self.runtime_client().list_pod_sandbox(request),
            )
            .await?
            .items)
    }

    async fn image_present(&self, image: &str) -> Result<Option<String>> {
        Ok(self.image_status(image).await?.map(|i| i.id))
    }

    /// The runtime's record of `image`, if it has the image.
    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        let request = cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: false,
        };
        let response = self
            .call(
                "ImageStatus",
                None,
                self.image_client().image_status(request),
            )
            .await?;
        Ok(response.image)
    }

    /// Stops and removes every sandbox of this kubelet, with their containers: a test's clean-up.
    pub async fn remove_all(&self) -> Result<()> {
        for s in self.pod_sandboxes(None).await? {
            self.remove_one_sandbox(&s.id).await?;
        }
        let mut cache = self.cache();
        cache.containers.clear();
        cache.sandboxes.clear();
        Ok(())
    }

    async fn remove_one_sandbox(&self, id: &str) -> Result<()> {
        let stop = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.call(
            "StopPodSandbox",
            None,
            self.runtime_client().stop_pod_sandbox(stop),
        )
        .await?;
        let remove = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        self.call(
            "RemovePodSandbox",
            None,
            self.runtime_client().remove_pod_sandbox(remove),
        )
        .await?;
        Ok(())
    }

    fn sandbox_config(&self, config: &SandboxConfig, attempt: u32) -> cri::PodSandboxConfig {
        let mut labels: HashMap<String, String> = config.labels.clone().into_iter().collect();
        labels.extend(self.identity_labels(config));
        let network = if config.host_network {
            cri::NamespaceMode::Node
        } else {
            cri::NamespaceMode::Pod
        };
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: config.pod_name.clone(),
                uid: config.pod_uid.clone(),
                namespace: config.pod_namespace.clone(),
                attempt,
            }),
            // A pod on the node's network has the node's hostname.
            hostname: if config.host_network {
                String::new()
            } else {
                config.hostname.clone()
            },
            log_directory: config.log_dir.display().to_string(),
            dns_config: Some(cri::DnsConfig {
                servers: config.dns.servers.clone(),
                searches: config.dns.searches.clone(),
                options: config.dns.options.clone(),
            }),
            labels,
            annotations: config.annotations.clone().into_iter().collect(),
            port_mappings: config
                .port_mappings
                .iter()
                .map(|p| cri::PortMapping {
                    protocol: match p.protocol.as_str() {
                        "UDP" => cri::Protocol::Udp,
                        "SCTP" => cri::Protocol::Sctp,
                        _ => cri::Protocol::Tcp,
                    } as i32,
                    container_port: p.container_port,
                    host_port: p.host_port,
                    host_ip: p.host_ip.clone(),
                })
                .collect(),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: self
                    .inner
                    .config
                    .cgroup_parent
                    .as_ref()
                    .map(|p| format!("{}/pod{}", p.trim_end_matches('/'), config.pod_uid))
                    .unwrap_or_default(),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces(network)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn identity_labels(&self, config: &SandboxConfig) -> [(String, String); 4] {
        [
            (OWNER_LABEL.into(), self.inner.config.owner.clone()),
            (POD_UID_LABEL.into(), config.pod_uid.clone()),
            (POD_NAME_LABEL.into(), config.pod_name.clone()),
            (POD_NAMESPACE_LABEL.into(), config.pod_namespace.clone()),
        ]
    }
}

/// A container's CRI security context: its [`Security`] settings in its `namespaces`.
fn security_context(
    security: &Security,
    namespaces: cri::NamespaceOption,
) -> cri::LinuxContainerSecurityContext {
    cri::LinuxContainerSecurityContext {
        namespace_options: Some(namespaces),
        run_as_user: security.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: security.run_as_group.map(|value| cri::Int64Value { value }),
        supplemental_groups: security.supplemental_groups.clone(),
        readonly_rootfs: security.read_only_root_filesystem,
        privileged: security.privileged,
        no_new_privs: security.no_new_privileges,
        capabilities: (!security.add_capabilities.is_empty()
            || !security.drop_capabilities.is_empty())
        .then(|| cri::Capability {
            add_capabilities: security.add_capabilities.clone(),
            drop_capabilities: security.drop_capabilities.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The namespaces of a pod's sandbox and containers: the pod's network (or the node's), a PID
/// namespace per container (the v1 Pod default), the pod's IPC.
fn namespaces(network: cri::NamespaceMode) -> cri::NamespaceOption {
    cri::NamespaceOption {
        network: network as i32,
        pid: cri::NamespaceMode::Container as i32,
        ipc: cri::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// A container's namespaces: [`namespaces`], or for an ephemeral container that targets another
/// container, that container's PID namespace (`TARGET` mode, as the Kubernetes kubelet asks
/// for it; a runtime that cannot do it fails the create).
fn container_namespaces(network: cri::NamespaceMode, target: Option<&str>) -> cri::NamespaceOption {
    let mut options = namespaces(network);
    if let Some(target) = target.filter(|t| !t.is_empty()) {
        options.pid = cri::NamespaceMode::Target as i32;
        options.target_id = target.to_string();
    }
    options
}

/// The container a CRI status describes; `None` unless it runs or has exited. `known` is the
/// config it was started with, when this kubelet started it; otherwise what the labels and
/// annotations keep.
fn from_status(s: &cri::ContainerStatus, known: Option<&ContainerConfig>) -> Option<Container> {
    let label = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
    let metadata = s.metadata.clone().unwrap_or_default();
    let state = if s.state == cri::ContainerState::ContainerRunning as i32 {
        State::Running {
            started_at: nanos(s.started_at),
        }
    } else if s.state == cri::ContainerState::ContainerExited as i32 {
        let reason = if !s.reason.is_empty() {
            s.reason.clone()
        } else if s.exit_code == 0 {
            "Completed".into()
        } else {
            "Error".into()
        };
        State::Exited {
            started_at: nanos(s.started_at),
            finished_at: nanos(s.finished_at),
            exit_code: s.exit_code,
            reason,
        }
    } else {
        return None;
    };
    let config = known.cloned().unwrap_or_else(|| ContainerConfig {
        pod_uid: label(POD_UID_LABEL),
        pod_namespace: label(POD_NAMESPACE_LABEL),
        pod_name: label(POD_NAME_LABEL),
        name: metadata.name.clone(),
        attempt: metadata.attempt,
        image: s
            .annotations
            .get(IMAGE_ANNOTATION)
            .cloned()
            .or_else(|| s.image.as_ref().map(|i| i.image.clone()))
            .unwrap_or_default(),
        command: Vec::new(),
        args: Vec::new(),
        env: Vec::new(),
        working_dir: None,
        pod_ip: IpAddr::from([0, 0, 0, 0]),
        mounts: Vec::new(),
        limits: Limits::default(),
        security: Default::default(),
        spec_hash: s
            .annotations
            .get(SPEC_HASH_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        log_path: PathBuf::from(&s.log_path),
        stdin: false,
        stdin_once: false,
        tty: false,
        target_id: None,
    });
    Some(Container {
        id: s.id.clone(),
        runtime: "containerd".into(),
        image_id: s.image_ref.clone(),
        config,
        state,
        warnings: Vec::new(),
    })
}

async fn relist_loop(inner: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = inner.upgrade() else { return };
        let rt = CriRuntime { inner };
        if let Err(err) = rt.relist().await {
            tracing::debug!(%err, "relisting CRI containers");
        }
    }
}

/// The resolver settings in `/etc/resolv.conf` text.
pub fn parse_resolv_conf(text: &str) -> super::DnsConfig {
    let mut dns = super::DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(str::to_string)),
            Some("search") | Some("domain") => {
                dns.searches = words.map(str::to_string).collect();
            }
            Some("options") => dns.options.extend(words.map(str::to_string)),
            _ => {}
        }
    }
    dns
}

fn log_relative(log_path: &Path, log_dir: &str, name: &str, attempt: u32) -> String {
    log_path
        .strip_prefix(log_dir)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| format!("{name}/{attempt}.log"))
}

#[async_trait::async_trait]
impl Runtime for CriRuntime {
    async fn start(&self, config: ContainerConfig) -> Result<Container> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown(config.name));
        }
        let sandbox = self
            .cache()
            .sandboxes
            .get(&config.pod_uid)
            .cloned()
            .ok_or_else(|| Error::NoSandbox(config.pod_uid.clone()))?;
        // runAsNonRoot without runAsUser: the image's user decides.
        let (image_uid, image_user) =
            if config.security.run_as_non_root && config.security.run_as_user.is_none() {
                let image = self.image_status(&config.image).await?.unwrap_or_default();
                (image.uid.map(|u| u.value), image.username)
            } else {
                (None, String::new())
            };
        super::verify_non_root(
            &config.security,
            image_uid,
            &image_user,
            &format!("{}/{}", config.pod_namespace, config.pod_name),
            &config.name,
        )
        .map_err(Error::Config)?;
        let host_network = sandbox
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network == cri::NamespaceMode::Node as i32);
        let log_path = log_relative(
            &config.log_path,
            &sandbox.config.log_directory,
            &config.name,
            config.attempt,
        );
        if let Some(dir) = config.log_path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| Error::State {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let labels = HashMap::from([
            (OWNER_LABEL.to_string(), self.inner.config.owner.clone()),
            (POD_UID_LABEL.to_string(), config.pod_uid.clone()),
            (POD_NAME_LABEL.to_string(), config.pod_name.clone()),
            (
                POD_NAMESPACE_LABEL.to_string(),
                config.pod_namespace.clone(),
            ),
            (CONTAINER_NAME_LABEL.to_string(), config.name.clone()),
        ]);
        let annotations = HashMap::from([
            (SPEC_HASH_ANNOTATION.to_string(), config.spec_hash.clone()),
            (IMAGE_ANNOTATION.to_string(), config.image.clone()),
        ]);
        let resources = cri::LinuxContainerResources {
            memory_limit_in_bytes: config.limits.memory.unwrap_or(0) as i64,
            cpu_period: config.limits.cpu_millis.map_or(0, |_| 100_000),
            // cpu.max quota in microseconds per 100 ms period.
            cpu_quota: config.limits.cpu_millis.map_or(0, |m| m as i64 * 100),
            cpu_shares: super::cpu_shares(config.limits.cpu_request_millis) as i64,
            ..Default::default()
        };
        let network = if host_network {
            cri::NamespaceMode::Node
        } else {
            cri::NamespaceMode::Pod
        };
        let request = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox.id.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: config.name.clone(),
                    attempt: config.attempt,
                }),
                image: Some(cri::ImageSpec {
                    image: config.image.clone(),
                    ..Default::default()
                }),
                command: config.command.clone(),
                args: config.args.clone(),
                working_dir: config.working_dir.clone().unwrap_or_default(),
                envs: config
                    .env
                    .iter()
                    .map(|(key, value)| cri::KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                mounts: config
                    .mounts
                    .iter()
                    .map(|m| cri::Mount {
                        container_path: m.container_path.clone(),
                        host_path: m.host_path.display().to_string(),
                        readonly: m.read_only,
                        ..Default::default()
                    })
                    .collect(),
                labels,
                annotations,
                log_path,
                stdin: config.stdin,
                stdin_once: config.stdin_once,
                tty: config.tty,
                linux: Some(cri::LinuxContainerConfig {
                    resources: Some(resources),
                    security_context: Some(security_context(
                        &config.security,
                        container_namespaces(network, config.target_id.as_deref()),
                    )),
                }),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox.config.clone()),
        };
        let id = self
            .call(
                "CreateContainer",
                None,
                self.runtime_client().create_container(request),
            )
            .await?
            .container_id;
        let start = cri::StartContainerRequest {
            container_id: id.clone(),
        };
        if let Err(err) = self
            .call(
                "StartContainer",
                None,
                self.runtime_client().start_container(start),
            )
            .await
        {
            // Not left behind half-made: the next attempt makes a new one.
            let remove = cri::RemoveContainerRequest {
                container_id: id.clone(),
            };
            let _ = self
                .call(
                    "RemoveContainer",
                    None,
                    self.runtime_client().remove_container(remove),
                )
                .await;
            return Err(err);
        }
        let status = self.container_status(&id).await?;
        let container = from_status(&status, Some(&config)).unwrap_or_else(|| Container {
            id: id.clone(),
            runtime: "containerd".into(),
            image_id: status.image_ref.clone(),
            config,
            state: State::Running {
                started_at: Timestamp::now(),
            },
            warnings: Vec::new(),
        });
        self.cache().containers.insert(id, container.clone());
        Ok(container)
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        if !self.cache().containers.contains_key(id) {
            return Err(Error::NotFound(id.to_string()));
        }
        let request = cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout: seconds_up(grace),
        };
        self.call(
            "StopContainer",
            Some(grace + self.inner.config.call_timeout),
            self.runtime_client().stop_container(request),
        )
        .await?;
        let container = self.refresh(id).await?;
        let _ = self.inner.events.send(container.config.pod_uid);
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        if !self.cache().containers.contains_key(id) {
            return Err(Error::NotFound(id.to_string()));
        }
        let request = cri::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        self.call(
            "RemoveContainer",
            None,
            self.runtime_client().remove_container(request),
        )
        .await?;
        self.cache().containers.remove(id);
        Ok(())
    }

    fn list(&self, pod_uid: Option<&str>) -> Vec<Container> {
        let mut out: Vec<Container> = self
            .cache()
            .containers
            .values()
            .filter(|c| pod_uid.is_none_or(|uid| c.config.pod_uid == uid))
            .cloned()
            .collect();
        out.sort_by(|a, b| {
            (&a.config.pod_uid, &a.config.name, a.config.attempt).cmp(&(
                &b.config.pod_uid,
                &b.config.name,
                b.config.attempt,
            ))
        });
        out
    }

    async fn exec(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecOutput> {
        let request = cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.to_vec(),
            timeout: seconds_up(timeout).max(1),
        };
        let started = tokio::time::Instant::now();
        let response = match self
            .call(
                "ExecSync",
                Some(timeout + Duration::from_secs(2)),
                self.runtime_client().exec_sync(request),
            )
            .await
        {
            Ok(r) => r,
            Err(Error::CriTimeout { .. }) => return Err(Error::ExecTimeout(timeout)),
            // The runtime ends an exec past its timeout with an error of its own.
            Err(_) if started.elapsed() >= timeout => return Err(Error::ExecTimeout(timeout)),
            Err(err) => return Err(err),
        };
        let mut output = response.stdout;
        output.extend_from_slice(&response.stderr);
        output.truncate(10 * 1024);
        Ok(ExecOutput {
            exit_code: response.exit_code,
            output,
        })
    }

    /// CRI `Exec` answers with a URL on the runtime's streaming server; the session streams
    /// from there (see [`crate::stream::remote`]).
    async fn exec_stream(
        &self,
        id: &str,
        cmd: &[String],
        options: StreamOptions,
    ) -> Result<Session> {
        let request = cri::ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.to_vec(),
            tty: options.tty,
            stdin: options.stdin,
            stdout: options.stdout,
            // With a TTY the terminal merges stderr into stdout; CRI refuses both.
            stderr: options.stderr && !options.tty,
        };
        let url = self
            .call("Exec", None, self.runtime_client().exec(request))
            .await?
            .url;
        remote::session(&url, options).await.map_err(Error::Stream)
    }

    /// CRI `Attach`, streamed like [`Runtime::exec_stream`].
    async fn attach(&self, id: &str, options: StreamOptions) -> Result<Session> {
        let request = cri::AttachRequest {
            container_id: id.to_string(),
            stdin: options.stdin,
            tty: options.tty,
            stdout: options.stdout,
            stderr: options.stderr && !options.tty,
        };
        let url = self
            .call("Attach", None, self.runtime_client().attach(request))
            .await?
            .url;
        remote::session(&url, options).await.map_err(Error::Stream)
    }

    /// CRI `PortForward`: the runtime dials the port inside the sandbox's network namespace
    /// (so a server on the pod's loopback is reachable too), one streaming URL per connection.
    async fn port_forward(
        &self,
        pod_uid: &str,
        _address: IpAddr,
        port: u16,
    ) -> Result<(StreamReader, StreamWriter)> {
        let sandbox = self
            .cache()
            .sandboxes
            .get(pod_uid)
            .map(|s| s.id.clone())
            .ok_or_else(|| Error::NoSandbox(pod_uid.to_string()))?;
        let request = cri::PortForwardRequest {
            pod_sandbox_id: sandbox,
            port: vec![i32::from(port)],
        };
        let url = self
            .call(
                "PortForward",
                None,
                self.runtime_client().port_forward(request),
            )
            .await?
            .url;
        remote::forward(&url, port)
            .await
            .map_err(|err| Error::Stream(err.to_string()))
    }

    fn subscribe(&self) -> broadcast::Receiver<String> {
        self.inner.events.subscribe()
    }

    /// Healthy when `Status` answers with `RuntimeReady` and `NetworkReady` true.
    async fn health(&self) -> Result<()> {
        let request = cri::StatusRequest { verbose: false };
        let status = self
            .call(
                "Status",
                Some(Duration::from_secs(5)),
                self.runtime_client().status(request),
            )
            .await?;
        let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
        let mut problems = Vec::new();
        for wanted in ["RuntimeReady", "NetworkReady"] {
            match conditions.iter().find(|c| c.r#type == wanted) {
                Some(c) if c.status => {}
                Some(c) => problems.push(format!(
                    "{wanted}=false reason:{} message:{}",
                    c.reason, c.message
                )),
                None => problems.push(format!("{wanted} not reported")),
            }
        }
        if !problems.is_empty() {
            return Err(Error::NotReady(problems.join("; ")));
        }
        if self
            .inner
            .version
            .lock()
            .expect("version poisoned")
            .is_none()
        {
            let _ = self.version().await;
        }
        Ok(())
    }

    async fn shutdown(&self, _grace: &(dyn for<'c> Fn(&'c Container) -> Duration + Send + Sync)) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let running = self
            .cache()
            .containers
            .values()
            .filter(|c| c.is_running())
            .count();
        tracing::info!(
            running,
            "CRI runtime: containers keep running in the runtime for the next kubelet"
        );
    }

    async fn version(&self) -> Result<Version> {
        if let Some(v) = self.inner.version.lock().expect("version poisoned").clone() {
            return Ok(v);
        }
        let request = cri::VersionRequest {
            version: "v1".into(),
        };
        let response = self
            .call(
                "Version",
                Some(Duration::from_secs(5)),
                self.runtime_client().version(request),
            )
            .await?;
        let version = Version {
            name: response.runtime_name,
            version: response.runtime_version,
        };
        *self.inner.version.lock().expect("version poisoned") = Some(version.clone());
        Ok(version)
    }

    fn sandboxed(&self) -> bool {
        true
    }

    async fn run_sandbox(&self, config: &SandboxConfig) -> Result<Sandbox> {
        if let Some(s) = self.cache().sandboxes.get(&config.pod_uid) {
            return Ok(Sandbox {
                id: s.id.clone(),
                ips: s.ips.clone(),
            });
        }
        let existing = self.pod_sandboxes(Some(&config.pod_uid)).await?;
        let ready = cri::PodSandboxState::SandboxReady as i32;
        let adopted = existing.iter().find(|s| s.state == ready).map(|s| {
            let attempt = s.metadata.as_ref().map_or(0, |m| m.attempt);
            (s.id.clone(), attempt)
        });
        let (id, attempt) = match adopted {
            Some((id, attempt)) => {
                tracing::info!(pod = %config.pod_name, sandbox = %id, "adopting the pod's sandbox");
                (id, attempt)
            }
            None => {
                let attempt = existing
                    .iter()
                    .filter_map(|s| s.metadata.as_ref().map(|m| m.attempt + 1))
                    .max()
                    .unwrap_or(0)
                    .max(config.attempt);
                std::fs::create_dir_all(&config.log_dir).map_err(|source| Error::State {
                    path: config.log_dir.clone(),
                    source,
                })?;
                let request = cri::RunPodSandboxRequest {
                    config: Some(self.sandbox_config(config, attempt)),
                    runtime_handler: String::new(),
                };
                // Pulling the pause image and setting up the network may take a while.
                let id = self
                    .call(
                        "RunPodSandbox",
                        Some(Duration::from_secs(120)),
                        self.runtime_client().run_pod_sandbox(request),
                    )
                    .await?
                    .pod_sandbox_id;
                (id, attempt)
            }
        };
        let status = self.sandbox_status(&id).await?;
        let ips: Vec<IpAddr> = status
            .network
            .map(|n| {
                std::iter::once(n.ip)
                    .chain(n.additional_ips.into_iter().map(|p| p.ip))
                    .filter_map(|ip| ip.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let entry = SandboxEntry {
            id: id.clone(),
            ips: ips.clone(),
            config: self.sandbox_config(config, attempt),
        };
        self.cache().sandboxes.insert(config.pod_uid.clone(), entry);
        Ok(Sandbox { id, ips })
    }

    async fn remove_sandbox(&self, pod_uid: &str) -> Result<()> {
        for s in self.pod_sandboxes(Some(pod_uid)).await? {
            self.remove_one_sandbox(&s.id).await?;
        }
        let mut cache = self.cache();
        cache.sandboxes.remove(pod_uid);
        cache.containers.retain(|_, c| c.config.pod_uid != pod_uid);
        Ok(())
    }

    async fn sandbox_pods(&self) -> Result<Vec<String>> {
        let mut uids: Vec<String> = self
            .pod_sandboxes(None)
            .await?
            .into_iter()
            .filter_map(|s| s.labels.get(POD_UID_LABEL).cloned())
            .collect();
        uids.sort();
        uids.dedup();
        Ok(uids)
    }

    async fn usage(&self) -> Result<Vec<(String, Timestamp, crate::stats::Usage)>> {
        let request = cri::ListContainerStatsRequest {
            filter: Some(cri::ContainerStatsFilter {
                label_selector: self.owner_selector(),
                ..Default::default()
            }),
        };
        let stats = self
            .call(
                "ListContainerStats",
                None,
                self.runtime_client().list_container_stats(request),
            )
            .await?
            .stats;
        Ok(stats.into_iter().filter_map(container_usage).collect())
    }

    async fn images(&self) -> Result<Vec<Image>> {
        let request = cri::ListImagesRequest { filter: None };
        let images = self
            .call("ListImages", None, self.image_client().list_images(request))
            .await?
            .images;
        Ok(images
            .into_iter()
            .map(|i| Image {
                names: i.repo_tags.into_iter().chain(i.repo_digests).collect(),
                size: i.size,
            })
            .collect())
    }

    async fn ensure_image(
        &self,
        pod_uid: &str,
        image: &str,
        policy: PullPolicy,
        auth: &[RegistryAuth],
    ) -> Result<Option<String>> {
        if policy != PullPolicy::Always {
            if let Some(id) = self.image_present(image).await? {
                return Ok(Some(id));
            }
            if policy == PullPolicy::Never {
                return Err(Error::ImageNeverPull(image.to_string()));
            }
        }
        let sandbox_config = self
            .cache()
            .sandboxes
            .get(pod_uid)
            .map(|s| s.config.clone());
        // Each credential in turn, then none (the Kubernetes kubelet's order); the last
        // failure is the one reported.
        // No server address: the kubelet matched the credentials to the image already, and
        // containerd drops credentials whose address is not the host it pulls from (a mirror).
        let node_auth = self.inner.config.registries.auth_for(image);
        let attempts = auth
            .iter()
            .chain(&node_auth)
            .map(|a| {
                Some(cri::AuthConfig {
                    username: a.username.clone(),
                    password: a.password.clone(),
                    ..Default::default()
                })
            })
            .chain(std::iter::once(None));
        let mut failure = None;
        for auth in attempts {
            let request = cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: sandbox_config.clone(),
            };
            match self
                .call(
                    "PullImage",
                    Some(Duration::from_secs(600)),
                    self.image_client().pull_image(request),
                )
                .await
            {
                Ok(r) => return Ok(Some(r.image_ref)),
                Err(Error::Cri { source, .. }) => failure = Some(source.message().to_string()),
                Err(err) => failure = Some(err.to_string()),
            }
        }
        Err(Error::ImagePull {
            image: image.to_string(),
            message: failure.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_settings_become_the_containers_security_context() {
        let ns = namespaces(cri::NamespaceMode::Pod);
        let plain = security_context(&Security::default(), ns.clone());
        assert_eq!(plain.run_as_user, None);
        assert_eq!(plain.capabilities, None);
        assert!(!plain.readonly_rootfs && !plain.privileged && !plain.no_new_privs);
        assert_eq!(plain.namespace_options, Some(ns.clone()));
        let hardened = security_context(
            &Security {
                run_as_user: Some(1000),
                run_as_group: Some(3000),
                run_as_non_root: true,
                supplemental_groups: vec![4000, 2000],
                read_only_root_filesystem: true,
                privileged: false,
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                drop_capabilities: vec!["ALL".into()],
                no_new_privileges: true,
            },
            ns,
        );
        assert_eq!(hardened.run_as_user, Some(cri::Int64Value { value: 1000 }));
        assert_eq!(hardened.run_as_group, Some(cri::Int64Value { value: 3000 }));
        assert_eq!(hardened.supplemental_groups, [4000, 2000]);
        assert!(hardened.readonly_rootfs && hardened.no_new_privs && !hardened.privileged);
        let caps = hardened.capabilities.unwrap();
        assert_eq!(caps.add_capabilities, ["NET_BIND_SERVICE"]);
        assert_eq!(caps.drop_capabilities, ["ALL"]);
    }

    #[test]
    fn endpoints_are_unix_sockets() {
        assert_eq!(
            parse_endpoint("unix:///run/containerd/containerd.sock").unwrap(),
            PathBuf::from("/run/containerd/containerd.sock")
        );
        assert_eq!(
            parse_endpoint("/tmp/c.sock").unwrap(),
            PathBuf::from("/tmp/c.sock")
        );
        assert!(parse_endpoint("tcp://127.0.0.1:1234").is_err());
        assert!(parse_endpoint("unix://relative.sock").is_err());
    }

    #[test]
    fn resolv_conf_is_parsed() {
        let dns = parse_resolv_conf(
            "# generated\nnameserver 10.0.0.2\nnameserver 10.0.0.3 # second\nsearch a.example b.example\noptions ndots:2 edns0\n",
        );
        assert_eq!(dns.servers, ["10.0.0.2", "10.0.0.3"]);
        assert_eq!(dns.searches, ["a.example", "b.example"]);
        assert_eq!(dns.options, ["ndots:2", "edns0"]);
    }

    #[test]
    fn grace_rounds_up_to_whole_seconds() {
        assert_eq!(seconds_up(Duration::ZERO), 0);
        assert_eq!(seconds_up(Duration::from_millis(300)), 1);
        assert_eq!(seconds_up(Duration::from_secs(30)), 30);
    }

    fn status(state: cri::ContainerState, exit_code: i32, reason: &str) -> cri::ContainerStatus {
        cri::ContainerStatus {
            id: "abc".into(),
            metadata: Some(cri::ContainerMetadata {
                name: "app".into(),
                attempt: 2,
            }),
            state: state as i32,
            started_at: 1_000_000_000,
            finished_at: 3_000_000_000,
            exit_code,
            reason: reason.into(),
            image_ref: "sha256:feed".into(),
            labels: HashMap::from([
                (POD_UID_LABEL.to_string(), "u1".to_string()),
                (POD_NAME_LABEL.to_string(), "web".to_string()),
                (POD_NAMESPACE_LABEL.to_string(), "default".to_string()),
            ]),
            annotations: HashMap::from([
                (SPEC_HASH_ANNOTATION.to_string(), "h1".to_string()),
                (IMAGE_ANNOTATION.to_string(), "busybox:test".to_string()),
            ]),
            log_path: "/logs/default_web_u1/app/2.log".into(),
            ..Default::default()
        }
    }

    #[test]
    fn container_stats_become_readings_once_they_have_cpu_time() {
        let stats = |cpu: Option<cri::CpuUsage>| cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: "abc".into(),
                ..Default::default()
            }),
            cpu,
            memory: Some(cri::MemoryUsage {
                timestamp: 5,
                working_set_bytes: Some(cri::UInt64Value { value: 4096 }),
                usage_bytes: Some(cri::UInt64Value { value: 8192 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (id, at, usage) = container_usage(stats(Some(cri::CpuUsage {
            timestamp: 1_700_000_000_000_000_000,
            usage_core_nano_seconds: Some(cri::UInt64Value { value: 42 }),
            usage_nano_cores: None,
        })))
        .unwrap();
        assert_eq!(id, "abc");
        assert_eq!(at, Timestamp::from_second(1_700_000_000).unwrap());
        assert_eq!(usage.cpu_core_nanos, 42);
        assert_eq!(usage.working_set_bytes, 4096);
        assert_eq!(usage.usage_bytes, Some(8192));
        assert_eq!(container_usage(stats(None)), None);
    }

    #[test]
    fn statuses_of_containers_a_previous_kubelet_started_keep_their_identity() {
        let c = from_status(&status(cri::ContainerState::ContainerRunning, 0, ""), None).unwrap();
        assert_eq!(c.container_id(), "containerd://abc");
        assert_eq!(c.image_id(), "sha256:feed");
        assert_eq!(
            (
                c.config.pod_uid.as_str(),
                c.config.name.as_str(),
                c.config.attempt
            ),
            ("u1", "app", 2)
        );
        assert_eq!(c.config.spec_hash, "h1");
        assert_eq!(c.config.image, "busybox:test");
        assert_eq!(
            c.state,
            State::Running {
                started_at: nanos(1_000_000_000)
            }
        );
    }

    #[test]
    fn exit_reasons_come_from_the_runtime_or_the_exit_code() {
        let reason = |code, r: &str| match from_status(
            &status(cri::ContainerState::ContainerExited, code, r),
            None,
        )
        .unwrap()
        .state
        {
            State::Exited {
                reason, exit_code, ..
            } => (exit_code, reason),
            other => panic!("{other:?}"),
        };
        assert_eq!(reason(0, ""), (0, "Completed".to_string()));
        assert_eq!(reason(3, ""), (3, "Error".to_string()));
        assert_eq!(reason(137, "OOMKilled"), (137, "OOMKilled".to_string()));
        // Created-but-not-started and unknown containers are not reported.
        assert!(from_status(&status(cri::ContainerState::ContainerCreated, 0, ""), None).is_none());
    }
}

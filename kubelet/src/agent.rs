//! The kubelet against the API server: Node registration, the Lease heartbeat, the status loop,
//! this node's pods (watched and static), and sending what the pod manager reports.
//!
//! ```text
//!  register/adopt Node ──> status loop: setters -> PATCH if changed or report interval passed
//!        │                 (1 s until Ready, then --node-status-update-frequency)
//!        ├──> lease loop: renew kube-node-lease/<node> every --node-lease-renew-interval
//!        ├──> pod informer (spec.nodeName=<node>) ──> pod::Manager <── static pods (manifest dir)
//!        └──> report loop: Manager events -> pods/status PATCH, Events, delete(grace 0)
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, NodeSpec, NodeStatus, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, Pod, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use skiff_client::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use skiff_client::events::{Recorder, Source};
use skiff_client::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::host;
use crate::ipam::{self, Range};
use crate::node_status::{self, Context, Thresholds};
use crate::pod::{self, Event, Manager, backoff};
use crate::runtime::Runtime;
use crate::runtime::cri::{self, CriRuntime};
use crate::runtime::process::{self, ProcessRuntime};
use crate::server;
use crate::spec::Sources;

/// Errors that stop the kubelet.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The root directory cannot be made.
    #[error("root dir {path}: {source}")]
    RootDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The runtime's state could not be opened.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::Error),
    /// `--container-runtime-endpoint` is not a unix socket, or the registry configuration
    /// cannot be used.
    #[error("{0}")]
    Endpoint(String),
    /// The pod IP allocator could not be opened.
    #[error(transparent)]
    Ipam(#[from] ipam::Error),
    /// The kubelet's HTTP port could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result of the kubelet.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses `500ms`, `10s`, `5m`, `1h`, `1h30m` (Go's `time.Duration` text, as kubelet flags use).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {text:?}"))?;
        let value: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("invalid duration {text:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => return Err(format!("unknown unit {unit:?} in duration {text:?}")),
        };
        total += Duration::from_secs_f64(value * seconds);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    crate::spec::parse_quantity(text)
        .map(|v| v as u64)
        .ok_or_else(|| format!("invalid size {text:?}"))
}

/// The kubelet's flags (`skiff kubelet`), with the Kubernetes kubelet's defaults.
#[derive(clap::Args, Clone, Debug)]
// Every component's flags are `Options`: clap's default group id (the struct name) would
// collide when `skiff server` flattens them together.
#[group(skip)]
pub struct Options {
    /// The Node's name; defaults to the host name.
    #[arg(long)]
    pub node_name: Option<String>,
    /// Directory of the kubelet's state: container records, pod volumes, logs, pod IPs
    /// [default: <data-dir>/kubelet under `skiff server`, else /var/lib/skiff/kubelet].
    #[arg(long)]
    pub root_dir: Option<PathBuf>,
    /// The node's InternalIP, also the pods' hostIP.
    #[arg(long, default_value = "127.0.0.1")]
    pub node_ip: IpAddr,
    /// The cluster DNS servers written into the resolv.conf of `ClusterFirst` pods
    /// (comma-separated) [default: none, so pods get the host's resolver settings; under
    /// `skiff server` with its DNS on, the kube-dns Service's ClusterIP]. Pods of the process
    /// runtime share the host's /etc/resolv.conf whatever this says.
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<IpAddr>,
    /// The cluster's DNS domain: `ClusterFirst` pods search `NS.svc.DOMAIN svc.DOMAIN DOMAIN`.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Address the kubelet's HTTP server (logs, /pods, /healthz) listens on.
    #[arg(
        id = "kubelet_address",
        long = "kubelet-address",
        default_value = "127.0.0.1"
    )]
    pub address: IpAddr,
    /// Port of the kubelet's HTTP server (Kubernetes uses 10250); 0, the default, picks a free
    /// one, reported in the Node's daemonEndpoints where the API server finds it, so that several
    /// skiff nodes share a host.
    #[arg(id = "kubelet_port", long = "kubelet-port", default_value_t = 0)]
    pub port: u16,
    /// Bearer token the API server presents to the kubelet's HTTP server (`skiff server` and
    /// `skiff agent` use the join token's secret); unset serves anyone.
    #[arg(
        id = "kubelet_token",
        long = "kubelet-token",
        env = "SKIFF_KUBELET_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// How often the node's Lease is renewed.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub node_lease_renew_interval: Duration,
    /// The Lease's duration: the node controller marks the node unknown after it passes.
    #[arg(long, default_value_t = 40)]
    pub node_lease_duration_seconds: i32,
    /// How often the node status is computed (and PATCHed when it changed).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub node_status_update_frequency: Duration,
    /// How often the node status is PATCHed even when nothing changed.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub node_status_report_frequency: Duration,
    /// How often the node's and its containers' CPU and memory are read (the Summary API that
    /// `kubectl top` shows averages CPU over this interval).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub housekeeping_interval: Duration,
    /// Directory of static pod manifests (YAML or JSON), run and mirrored into the API.
    #[arg(long)]
    pub pod_manifest_path: Option<PathBuf>,
    /// How often the static pod directory is re-read.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub file_check_frequency: Duration,
    /// How often each pod is synced without another reason.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub sync_frequency: Duration,
    /// The most pods this node runs (its `pods` capacity).
    #[arg(long, default_value_t = 110)]
    pub max_pods: u64,
    /// Rotate a container log file past this size.
    #[arg(long, default_value = "10Mi", value_parser = parse_bytes)]
    pub container_log_max_size: u64,
    /// Log files kept per container.
    #[arg(long, default_value_t = 5)]
    pub container_log_max_files: usize,
    /// First CrashLoopBackOff delay; doubles per restart up to the maximum.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub crash_loop_backoff: Duration,
    /// Longest CrashLoopBackOff delay.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub crash_loop_backoff_max: Duration,
    /// On SIGTERM/SIGINT the kubelet stops its pods before it exits (SIGTERM to each
    /// container, then SIGKILL): the longest it waits for a pod, whose own
    /// terminationGracePeriodSeconds applies when shorter. Processes cannot outlive the kubelet
    /// usefully: the next one would kill them as orphans.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace_period: Duration,
    /// The CRI runtime's socket (`unix:///run/containerd/containerd.sock`), or `process` for
    /// the process runtime (containers as host processes). Unset: containerd at its default
    /// socket when it answers there, else the process runtime.
    #[arg(long, env = "SKIFF_CONTAINER_RUNTIME_ENDPOINT")]
    pub container_runtime_endpoint: Option<String>,
    /// The cgroup under which a CRI runtime puts pods (`<root>/pod<uid>`, cgroupfs syntax);
    /// unset leaves it to the runtime. The process runtime ignores it.
    #[arg(long)]
    pub cgroup_root: Option<String>,
    /// Directory of image archives (`*.tar`, OCI or docker) imported into a CRI runtime at start,
    /// for nodes without a registry [default: <data-dir>/images under `skiff server`].
    #[arg(long)]
    pub images_dir: Option<PathBuf>,
    /// Registry mirrors, TLS settings and credentials of a CRI runtime's pulls, in k3s's
    /// registries.yaml format [default: <data-dir>/registries.yaml under `skiff server`].
    #[arg(long)]
    pub registry_config: Option<PathBuf>,
    /// containerd's registry hosts directory (its CRI `registry.config_path`, often
    /// `/etc/containerd/certs.d`): the mirrors and TLS settings of `--registry-config` are
    /// written there as `<host>/hosts.toml` at start.
    #[arg(long)]
    pub registry_hosts_dir: Option<PathBuf>,
}

/// The CRI runtime's settings for `socket` from the flags: cgroup parent and registries (whose
/// hosts files are written now).
fn cri_config(options: &Options, socket: &Path, node_name: &str) -> Result<cri::Config> {
    let mut config = cri::Config::new(socket, node_name);
    config.cgroup_parent = options.cgroup_root.clone();
    let Some(path) = &options.registry_config else {
        return Ok(config);
    };
    let Some(registries) =
        crate::registries::Registries::load(path).map_err(|e| Error::Endpoint(e.to_string()))?
    else {
        return Ok(config);
    };
    let files = registries.hosts_files();
    match &options.registry_hosts_dir {
        Some(dir) => {
            let written = registries
                .write_hosts(dir)
                .map_err(|e| Error::Endpoint(e.to_string()))?;
            tracing::info!(config = %path.display(), dir = %dir.display(), ?written, "registry hosts written");
        }
        None if !files.is_empty() => tracing::warn!(
            config = %path.display(),
            hosts = ?files.keys().collect::<Vec<_>>(),
            "registry mirrors and TLS settings need --registry-hosts-dir (containerd's registry config_path); only credentials apply"
        ),
        None => {}
    }
    config.registries = registries;
    Ok(config)
}

/// Imports the archives of `--images-dir` into the CRI runtime at `socket` before any pod starts.
async fn import_images(options: &Options, socket: &Path) {
    let Some(dir) = options.images_dir.clone() else {
        return;
    };
    let socket = socket.to_path_buf();
    let _ = tokio::task::spawn_blocking(move || crate::images::import_dir(&socket, &dir)).await;
}

/// Where containerd listens unless told otherwise.
pub const DEFAULT_CRI_SOCKET: &str = "/run/containerd/containerd.sock";

/// The runtime `--container-runtime-endpoint` names (see [`Options`]), logged.
pub async fn open_runtime(
    options: &Options,
    root: &Path,
    node_name: &str,
) -> Result<Arc<dyn Runtime>> {
    let process = || -> Result<Arc<dyn Runtime>> {
        let mut config = process::Config::new(root);
        config.log_max_size = options.container_log_max_size;
        config.log_max_files = options.container_log_max_files;
        Ok(Arc::new(ProcessRuntime::open(config)?))
    };
    match options.container_runtime_endpoint.as_deref() {
        Some("process") => {
            tracing::info!("container runtime: process (--container-runtime-endpoint process)");
            process()
        }
        Some(endpoint) => {
            let socket = cri::parse_endpoint(endpoint).map_err(Error::Endpoint)?;
            tracing::info!(socket = %socket.display(), "container runtime: CRI");
            let config = cri_config(options, &socket, node_name)?;
            let rt = CriRuntime::connect(config).await;
            import_images(options, &socket).await;
            Ok(Arc::new(rt))
        }
        None => {
            let socket = Path::new(DEFAULT_CRI_SOCKET);
            if socket.exists() {
                let config = cri_config(options, socket, node_name)?;
                let rt = CriRuntime::new(config);
                match rt.version().await {
                    Ok(v) => {
                        tracing::info!(
                            socket = DEFAULT_CRI_SOCKET,
                            runtime = %v.name,
                            version = %v.version,
                            "container runtime: CRI, found at the default socket"
                        );
                        import_images(options, socket).await;
                        return Ok(Arc::new(rt));
                    }
                    Err(err) => tracing::info!(
                        socket = DEFAULT_CRI_SOCKET,
                        %err,
                        "container runtime: process (nothing answers at the default CRI socket)"
                    ),
                }
            } else {
                tracing::info!(
                    socket = DEFAULT_CRI_SOCKET,
                    "container runtime: process (no CRI socket at the default path)"
                );
            }
            process()
        }
    }
}

impl Options {
    /// The Node's name: `--node-name`, else the host name (lower case), as the kubelet
    /// registers it and as its identity `system:node:<name>` must say.
    pub fn resolved_node_name(&self) -> String {
        self.node_name.clone().unwrap_or_else(hostname)
    }
}

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .to_lowercase()
}

/// Reads the host's resources and pressure inputs (for the root dir's filesystem); the node
/// status is computed from these readings on every sync.
pub type HostReader = Arc<dyn Fn(&Path) -> host::Readings + Send + Sync>;

/// Runs the kubelet until `shutdown`.
pub async fn run(client: Client, options: Options, shutdown: CancellationToken) -> Result<()> {
    run_with_host(client, options, Arc::new(host::read), shutdown).await
}

/// The kubelet's listener. Its connections carry the small frames of exec, attach and
/// port-forward streams, which must not wait on Nagle's algorithm for the peer's delayed ACK
/// (40 ms on Linux) before going out: `TCP_NODELAY` is set on the listening socket, and Linux
/// gives it to every connection accepted from it (kubelets, written in Go, have it on every
/// connection; warp does not set it on the connections it accepts).
fn listen(address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(address)?;
    socket.listen(1024)
}

/// [`run`], with the node's host readings taken from `host` instead of `/proc` and the root
/// dir's filesystem: lets a test drive memory, disk and PID pressure.
pub async fn run_with_host(
    client: Client,
    options: Options,
    host: HostReader,
    shutdown: CancellationToken,
) -> Result<()> {
    let node_name = options.resolved_node_name();
    let root = options
        .root_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/skiff/kubelet"));
    std::fs::create_dir_all(&root).map_err(|source| Error::RootDir {
        path: root.clone(),
        source,
    })?;
    let runtime = open_runtime(&options, &root, &node_name).await?;
    let address = std::net::SocketAddr::new(options.address, options.port);
    let listener = listen(address).map_err(|source| Error::Bind { address, source })?;
    let port = listener
        .local_addr()
        .map_err(|source| Error::Bind { address, source })?
        .port();

    let nodes: Api<Node> = Api::all(client.clone());
    let Some(node) = register(&nodes, &node_name, &shutdown).await else {
        return Ok(());
    };
    let range = pod_range(&node, &node_name);
    tracing::info!(node = %node_name, %range, port, "kubelet registered");

    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let manager = Manager::new(
        pod::Config {
            root_dir: root.clone(),
            host_ip: options.node_ip,
            backoff: backoff::Config {
                base: options.crash_loop_backoff,
                max: options.crash_loop_backoff_max,
                reset_after: options.crash_loop_backoff_max * 2,
            },
            resync: options.sync_frequency,
            cluster_dns: pod::sandbox::ClusterDns {
                servers: options.cluster_dns.clone(),
                domain: options.cluster_domain.clone(),
            },
        },
        runtime.clone(),
        range,
        Arc::new(ApiSources {
            client: client.clone(),
            tokens: crate::identity::Tokens::new(client.clone()),
        }),
        events_tx,
        shutdown.child_token(),
    )?;
    let stats = Arc::new(Mutex::new(crate::stats::Tracker::new(Timestamp::now())));
    let tasks = tokio_util::task::TaskTracker::new();
    tasks.spawn(crate::stats::housekeeping(
        runtime.clone(),
        stats.clone(),
        options.housekeeping_interval,
        shutdown.clone(),
    ));
    tasks.spawn(server::serve(
        listener,
        server::State {
            manager: manager.clone(),
            runtime: runtime.clone(),
            root_dir: root.clone(),
            token: options.token.clone(),
            follow_poll: Duration::from_millis(200),
            node_name: node_name.clone(),
            stats,
        },
        shutdown.clone(),
    ));
    let node_uid = node.metadata.uid.clone().unwrap_or_default();
    tasks.spawn(lease_loop(
        client.clone(),
        node_name.clone(),
        node_uid.clone(),
        options.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(status_loop(
        nodes.clone(),
        StatusSettings {
            node_name: node_name.clone(),
            node_ip: options.node_ip,
            port: port as i32,
            root: root.clone(),
            max_pods: options.max_pods,
            update: options.node_status_update_frequency,
            report: options.node_status_report_frequency,
            heartbeat: heartbeat_limit(&options),
            host,
        },
        manager.clone(),
        runtime.clone(),
        shutdown.clone(),
    ));
    let statics: Arc<Mutex<HashSet<String>>> = Arc::default();
    tasks.spawn(report_loop(
        client.clone(),
        node_name.clone(),
        events_rx,
        statics.clone(),
        shutdown.clone(),
    ));

    let factory = skiff_client::SharedInformerFactory::new(client.clone());
    let pods = factory.informer_with::<Pod>(
        skiff_client::ListOptions::default().fields(&format!("spec.nodeName={node_name}")),
    );
    pods.add_handler(PodHandler {
        manager: manager.clone(),
    });
    factory.start(shutdown.clone());
    tokio::select! {
        _ = factory.wait_for_sync() => {}
        _ = shutdown.cancelled() => {}
    }
    if !shutdown.is_cancelled() {
        let mut known: HashSet<String> = pods
            .cache()
            .list()
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        let mut static_state = StaticPods::default();
        if let Some(dir) = &options.pod_manifest_path {
            static_state
                .sync(dir, &node_name, &node_uid, &client, &manager, &statics)
                .await;
            known.extend(static_state.pods.keys().cloned());
        }
        manager.cleanup_unknown(&known).await;
        if let Some(dir) = options.pod_manifest_path.clone() {
            let (client, manager, node_name, shutdown) = (
                client.clone(),
                manager.clone(),
                node_name.clone(),
                shutdown.clone(),
            );
            let every = options.file_check_frequency;
            tasks.spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = shutdown.cancelled() => return,
                    }
                    static_state
                        .sync(&dir, &node_name, &node_uid, &client, &manager, &statics)
                        .await;
                }
            });
        }
    }
    shutdown.cancelled().await;
    tracing::info!(grace = ?options.shutdown_grace_period, "kubelet shutting down: stopping pods");
    manager.shutdown(options.shutdown_grace_period).await;
    tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await;
    tracing::info!("kubelet stopped");
    Ok(())
}

/// The Node's podCIDR when node IPAM assigned one, else a range derived from the name.
fn pod_range(node: &Node, node_name: &str) -> Range {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidr.as_deref())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| ipam::derive_range(node_name))
}

/// Creates the Node, or adopts the one already there; retries until it works or shutdown.
async fn register(nodes: &Api<Node>, name: &str, shutdown: &CancellationToken) -> Option<Node> {
    let arch = host::go_arch(std::env::consts::ARCH);
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), name.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), arch.to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("beta.kubernetes.io/arch".to_string(), arch.to_string()),
    ]);
    let mut delay = Duration::from_millis(100);
    loop {
        let attempt = async {
            match nodes.get_opt(name).await? {
                Some(existing) => {
                    let patch = json!({"metadata": {"labels": labels}});
                    nodes
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .or(Ok(existing))
                }
                None => {
                    let node = Node {
                        metadata: ObjectMeta {
                            name: Some(name.to_string()),
                            labels: Some(labels.clone()),
                            ..Default::default()
                        },
                        spec: Some(NodeSpec::default()),
                        status: None,
                    };
                    nodes.create(&PostParams::default(), &node).await
                }
            }
        };
        match attempt.await {
            Ok(node) => return Some(node),
            Err(err) => tracing::warn!(%err, node = name, "registering node, will retry"),
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => return None,
        }
        delay = (delay * 2).min(Duration::from_secs(7));
    }
}

/// How long one heartbeat request (a Lease renewal, a read or PATCH of the node status) may take
/// before it is abandoned, and the connection it went out on with it: the status update period,
/// at most the Lease's duration, as Kubernetes' kubelet bounds its heartbeat client (never under
/// a second, so that a loaded box's slow answer is not taken for a lost connection). A renewal
/// that went out on a connection a NAT or a partition lost without a word would otherwise wait
/// out the client's response limit (a minute), and the Lease (40 s) lapse meanwhile: the node
/// turns Unknown and its pods not ready, though nothing is wrong with them.
fn heartbeat_limit(options: &Options) -> Duration {
    let lease = Duration::from_secs(options.node_lease_duration_seconds.max(1) as u64);
    options
        .node_status_update_frequency
        .min(lease)
        .max(Duration::from_secs(1))
}

/// A heartbeat request, given up after `limit` (see [`heartbeat_limit`]): dropped, and the
/// connection it went out on with it.
async fn heartbeat<T, E: std::fmt::Display>(
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, request).await {
        Ok(answer) => answer.map_err(|err| err.to_string()),
        Err(_) => Err(format!(
            "no answer within {limit:?}; its connection is dropped"
        )),
    }
}

/// Renews the node's Lease every interval (creating it, and its namespace, when missing), each
/// renewal within the [`heartbeat_limit`].
async fn lease_loop(
    client: Client,
    node_name: String,
    node_uid: String,
    options: Options,
    shutdown: CancellationToken,
) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut cached: Option<Lease> = None;
    let mut retry = Duration::from_millis(200);
    let limit = heartbeat_limit(&options);
    loop {
        let renewal = renew_lease(
            &client,
            &leases,
            cached.take(),
            &node_name,
            &node_uid,
            &options,
        );
        let wait = match heartbeat(limit, renewal).await {
            Ok(lease) => {
                cached = Some(lease);
                retry = Duration::from_millis(200);
                options.node_lease_renew_interval
            }
            Err(err) => {
                tracing::warn!(%err, "renewing node lease");
                let wait = retry;
                retry = (retry * 2).min(Duration::from_secs(7));
                wait
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

async fn renew_lease(
    client: &Client,
    leases: &Api<Lease>,
    cached: Option<Lease>,
    node_name: &str,
    node_uid: &str,
    options: &Options,
) -> Result<Lease, skiff_client::Error> {
    let spec = |previous: Option<&LeaseSpec>| LeaseSpec {
        holder_identity: Some(node_name.to_string()),
        lease_duration_seconds: Some(options.node_lease_duration_seconds),
        renew_time: Some(MicroTime(Timestamp::now())),
        ..previous.cloned().unwrap_or_default()
    };
    let current = match cached {
        Some(l) => Some(l),
        None => leases.get_opt(node_name).await?,
    };
    let code = skiff_client::status_code;
    let Some(mut lease) = current else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(node_name.to_string()),
                namespace: Some("kube-node-lease".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node_name.to_string(),
                    uid: node_uid.to_string(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(spec(None)),
        };
        return match leases.create(&PostParams::default(), &lease).await {
            Err(err) if code(&err) == Some(404) => {
                // The namespace does not exist yet: make it, then the Lease.
                let ns = Namespace {
                    metadata: ObjectMeta {
                        name: Some("kube-node-lease".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let namespaces: Api<Namespace> = Api::all(client.clone());
                match namespaces.create(&PostParams::default(), &ns).await {
                    Ok(_) => {}
                    Err(err) if code(&err) == Some(409) => {}
                    Err(err) => return Err(err.into()),
                }
                Ok(leases.create(&PostParams::default(), &lease).await?)
            }
            other => Ok(other?),
        };
    };
    lease.spec = Some(spec(lease.spec.as_ref()));
    match leases
        .replace(node_name, &PostParams::default(), &lease)
        .await
    {
        Err(err) if code(&err) == Some(409) => {
            // Someone else wrote it (or our copy is stale): renew the fresh one.
            let mut fresh = leases.get(node_name).await?;
            fresh.spec = Some(spec(fresh.spec.as_ref()));
            Ok(leases
                .replace(node_name, &PostParams::default(), &fresh)
                .await?)
        }
        other => Ok(other?),
    }
}

struct StatusSettings {
    node_name: String,
    node_ip: IpAddr,
    port: i32,
    root: PathBuf,
    max_pods: u64,
    update: Duration,
    report: Duration,
    /// Each read and PATCH of the Node, at most ([`heartbeat_limit`]).
    heartbeat: Duration,
    host: HostReader,
}

/// Computes the node status every update period (every second until Ready), with the
/// runtime's health check deciding Ready, and PATCHes it when it changed or the report interval
/// passed; a failed attempt is retried up to 5 times.
///
/// Each period compares with the Node as the API server has it now, read fresh, not with the
/// kubelet's last report: another writer may have changed it since. The node lifecycle
/// controller sets Ready to Unknown when the Lease lapses (a renewal lost on a dead connection,
/// say), and then marks every pod of the node not ready, again on each of their updates, until
/// Ready is True. The kubelet overrules it at its next period, as Kubernetes' kubelet does, not
/// at the report interval (5 minutes by default). Each read and PATCH is a [`heartbeat`].
async fn status_loop(
    nodes: Api<Node>,
    settings: StatusSettings,
    manager: Manager,
    runtime: Arc<dyn Runtime>,
    shutdown: CancellationToken,
) {
    let setters = node_status::default_setters();
    let mut last_report: Option<Instant> = None;
    let mut range: Option<Range> = None;
    let mut runtime_error: Option<String> = None;
    let mut runtime_version = String::new();
    loop {
        let health = runtime
            .health()
            .await
            .err()
            .map(|err| format!("container runtime is down: {err}"));
        if health != runtime_error {
            match &health {
                Some(message) => tracing::warn!(%message, "node not ready"),
                None => tracing::info!("container runtime healthy"),
            }
            runtime_error = health;
        }
        if let Ok(v) = runtime.version().await {
            runtime_version = format!("{}://{}", v.name, v.version);
        }
        let ctx = Context {
            readings: (settings.host)(&settings.root),
            node_ip: settings.node_ip,
            hostname: settings.node_name.clone(),
            kubelet_port: settings.port,
            max_pods: settings.max_pods,
            thresholds: Thresholds::default(),
            runtime_error: runtime_error.clone(),
            runtime_version: runtime_version.clone(),
            images: runtime.images().await.ok(),
            now: Timestamp::now(),
        };
        let mut ready = false;
        for attempt in 0..5 {
            let node = match heartbeat(settings.heartbeat, nodes.get(&settings.node_name)).await {
                Ok(n) => n,
                Err(err) => {
                    tracing::warn!(%err, attempt, "reading node for status");
                    continue;
                }
            };
            let new_range = pod_range(&node, &settings.node_name);
            if range != Some(new_range) {
                manager.set_range(new_range);
                range = Some(new_range);
            }
            let old = node.status.clone().unwrap_or_default();
            let new = node_status::compute(&old, &ctx, &setters);
            let due = node_status::changed(&old, &new)
                || last_report.is_none_or(|t| t.elapsed() >= settings.report);
            if !due {
                ready = node_status::condition_status(&old, "Ready") == Some("True");
                break;
            }
            let patch = json!({ "status": status_patch(&new) });
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            let patched = nodes.patch_status(&settings.node_name, &params, &patch);
            match heartbeat(settings.heartbeat, patched).await {
                Ok(updated) => {
                    last_report = Some(Instant::now());
                    ready = updated
                        .status
                        .as_ref()
                        .and_then(|s| node_status::condition_status(s, "Ready"))
                        == Some("True");
                    break;
                }
                Err(err) => tracing::warn!(%err, attempt, "patching node status"),
            }
        }
        let wait = if ready {
            settings.update
        } else {
            Duration::from_secs(1).min(settings.update)
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// The merge patch that reports a pod's status. A merge patch keeps what it leaves out, so the
/// pod-level `message` and `reason` the kubelet gave earlier (why volumes failed, an eviction)
/// are cleared explicitly once they no longer hold, as the status manager's patch clears them.
fn pod_status_patch(status: &k8s_openapi::api::core::v1::PodStatus) -> serde_json::Value {
    let mut patch = json!({ "status": status });
    for field in ["message", "reason"] {
        if patch["status"].get(field).is_none() {
            patch["status"][field] = serde_json::Value::Null;
        }
    }
    patch
}

fn status_patch(status: &NodeStatus) -> serde_json::Value {
    serde_json::to_value(status).expect("node status serializes")
}

/// Feeds the pod manager from the informer. Mirror pods are the API's copies of static pods,
/// which the kubelet runs from their manifests instead.
struct PodHandler {
    manager: Manager,
}

fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

impl skiff_client::EventHandler<Pod> for PodHandler {
    fn on_add(&self, pod: &Arc<Pod>) {
        if !is_mirror(pod) {
            self.manager.update((**pod).clone());
        }
    }
    fn on_update(&self, _old: &Arc<Pod>, pod: &Arc<Pod>) {
        if !is_mirror(pod) {
            self.manager.update((**pod).clone());
        }
    }
    fn on_delete(&self, pod: &Arc<Pod>) {
        if let (false, Some(uid)) = (is_mirror(pod), pod.metadata.uid.as_deref()) {
            self.manager.remove(uid);
        }
    }
}

/// ConfigMaps and Secrets read from the API when a pod syncs, and the pod's service-account
/// tokens and `kubernetes` Service variables ([`crate::identity`]).
struct ApiSources {
    client: Client,
    tokens: crate::identity::Tokens,
}

#[async_trait::async_trait]
impl pod::SourceProvider for ApiSources {
    async fn sources(&self, pod: &Pod) -> Sources {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut out = Sources::default();
        for (kind, name) in Sources::referenced(pod) {
            if kind == "ConfigMap" {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
                if let Ok(Some(cm)) = api.get_opt(&name).await {
                    out.config_maps.insert(name, cm);
                }
            } else {
                let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
                if let Ok(Some(s)) = api.get_opt(&name).await {
                    out.secrets.insert(name, s);
                }
            }
        }
        for name in Sources::claims_referenced(pod) {
            if let Some(resolved) = self.claim_dir(ns, &name).await {
                out.claims.insert(name, resolved);
            }
        }
        for (audience, expiration) in crate::projected::token_requests(pod) {
            let token = self.tokens.token(pod, &audience, expiration).await;
            let key = crate::projected::token_key(&audience, expiration);
            out.tokens.insert(key, token);
        }
        out.service_env = crate::identity::kubernetes_service_env(&self.client).await;
        out
    }
}

impl ApiSources {
    /// The host directory of claim `name`'s volume, or why the pod must wait; `None` when the
    /// API could not be asked (the next sync asks again).
    async fn claim_dir(&self, ns: &str, name: &str) -> Option<Result<PathBuf, String>> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let claim = match claims.get_opt(name).await.ok()? {
            Some(c) => c,
            None => return Some(Err(format!("persistentvolumeclaim \"{name}\" not found"))),
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Some(Err(format!(
                "persistentvolumeclaim \"{name}\" is being deleted"
            )));
        }
        let volume = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|v| !v.is_empty());
        let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let Some(volume) = volume.filter(|_| bound) else {
            return Some(Err(format!(
                "persistentvolumeclaim \"{name}\" is not bound"
            )));
        };
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let pv = match volumes.get_opt(&volume).await.ok()? {
            Some(pv) => pv,
            None => return Some(Err(format!("persistentvolume \"{volume}\" not found"))),
        };
        let spec = pv.spec.unwrap_or_default();
        let path = spec
            .host_path
            .map(|h| h.path)
            .or(spec.local.map(|l| l.path));
        Some(path.map(PathBuf::from).ok_or_else(|| {
            format!("persistentvolume \"{volume}\" has no hostPath or local path to mount")
        }))
    }
}

/// Requests the reporting has in flight at most (status PATCHes, deletion confirmations and
/// Events together).
const REPORTS_IN_FLIGHT: usize = 8;

/// Sends what the pod manager reports: status PATCHes, deletion confirmations and Events.
///
/// Each pod's reports go out in order through a task of its own, different pods' side by side
/// (up to [`REPORTS_IN_FLIGHT`]): a burst of pods starting does not queue each pod's status behind
/// every other pod's requests. A status overtaken by a newer one of the same pod before it went
/// out is skipped, since only the latest matters (as in the Kubernetes status manager). Events
/// never hold up a status.
async fn report_loop(
    client: Client,
    node_name: String,
    mut events: mpsc::UnboundedReceiver<Event>,
    statics: Arc<Mutex<HashSet<String>>>,
    shutdown: CancellationToken,
) {
    let reporter = Arc::new(Reporter {
        events: Recorder::with_source(client.clone(), Source::on_host("kubelet", &node_name)),
        client,
        statics,
        slots: tokio::sync::Semaphore::new(REPORTS_IN_FLIGHT),
    });
    let mut pods: HashMap<String, mpsc::UnboundedSender<Event>> = HashMap::new();
    loop {
        let ev = tokio::select! {
            ev = events.recv() => match ev { Some(ev) => ev, None => return },
            _ = shutdown.cancelled() => return,
        };
        let (uid, last) = match &ev {
            Event::Status { uid, .. } => (uid.clone(), false),
            Event::Terminated { uid, .. } => (uid.clone(), true),
            Event::Record { .. } => {
                let (reporter, shutdown) = (reporter.clone(), shutdown.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        _ = reporter.send(ev) => {}
                        _ = shutdown.cancelled() => {}
                    }
                });
                continue;
            }
        };
        let tx = pods.entry(uid.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(pod_reports(reporter.clone(), rx, shutdown.clone()));
            tx
        });
        let _ = tx.send(ev);
        if last {
            // The pod's task sends what it has, then ends with its channel.
            pods.remove(&uid);
        }
    }
}

/// One pod's reports, in order, skipping statuses overtaken by a newer one.
async fn pod_reports(
    reporter: Arc<Reporter>,
    mut rx: mpsc::UnboundedReceiver<Event>,
    shutdown: CancellationToken,
) {
    let work = async {
        while let Some(first) = rx.recv().await {
            let mut pending = Some(first);
            while let Ok(next) = rx.try_recv() {
                match (pending.take(), &next) {
                    // Overtaken by a newer status of the same pod: skipped.
                    (Some(Event::Status { .. }), Event::Status { .. }) | (None, _) => {}
                    (Some(prev), _) => reporter.send(prev).await,
                }
                pending = Some(next);
            }
            if let Some(ev) = pending {
                reporter.send(ev).await;
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = shutdown.cancelled() => {}
    }
}

/// What the report tasks share.
struct Reporter {
    client: Client,
    /// The pods' Events, as this node's kubelet.
    events: Recorder,
    statics: Arc<Mutex<HashSet<String>>>,
    slots: tokio::sync::Semaphore,
}

impl Reporter {
    /// Sends one report (a status with retries).
    async fn send(&self, ev: Event) {
        let _slot = self.slots.acquire().await.expect("never closed");
        let client = &self.client;
        let statics = &self.statics;
        match ev {
            Event::Status {
                namespace,
                name,
                status,
                ..
            } => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                let patch = pod_status_patch(&status);
                for attempt in 0..5u32 {
                    match pods
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                    {
                        Ok(_) => break,
                        Err(err) if skiff_client::status_code(&err) == Some(404) => break,
                        Err(err) => {
                            tracing::warn!(%err, pod = %name, attempt, "patching pod status");
                            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
                        }
                    }
                }
            }
            Event::Terminated {
                namespace,
                name,
                uid,
            } => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                let is_static = statics.lock().expect("statics poisoned").remove(&uid);
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    // A mirror pod has its own uid; a regular pod must still be the one we ran.
                    preconditions: (!is_static).then(|| Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match pods.delete(&name, &params).await {
                    Ok(_) => {}
                    Err(err) if matches!(skiff_client::status_code(&err), Some(404 | 409)) => {}
                    Err(err) => tracing::warn!(%err, pod = %name, "confirming pod deletion"),
                }
            }
            Event::Record {
                namespace,
                name,
                uid,
                type_,
                reason,
                message,
            } => {
                let regarding = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    namespace: Some(namespace),
                    name: Some(name),
                    uid: Some(uid),
                    ..Default::default()
                };
                self.events
                    .record(&regarding, type_, &reason, &message)
                    .await;
            }
        }
    }
}

/// The annotation that marks a mirror pod, holding the static pod's hash.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The annotation holding a static pod's hash (its UID).
pub const HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// The annotation naming where a pod came from (`file`, `api`).
pub const SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// Reads the manifests in `dir` (`*.yaml`, `*.yml`, `*.json`), as static pods of `node_name`:
/// named `<name>-<node>`, in `default` unless they say otherwise, their UID a hash of the node
/// and the manifest.
pub fn read_manifests(dir: &Path, node_name: &str) -> Vec<Pod> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    let mut pods = Vec::new();
    for file in files {
        let ext = file.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(ext, "yaml" | "yml" | "json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let pod: Pod = match serde_saphyr::from_str(&text) {
            Ok(p) => p,
            Err(err) => {
                tracing::warn!(file = %file.display(), %err, "invalid static pod manifest");
                continue;
            }
        };
        pods.push(static_pod(pod, node_name));
    }
    pods
}

/// Gives a manifest's pod its static identity on this node.
pub fn static_pod(mut pod: Pod, node_name: &str) -> Pod {
    use sha2::{Digest, Sha256};
    let base = pod.metadata.name.clone().unwrap_or_else(|| "static".into());
    let mut hasher = Sha256::new();
    hasher.update(node_name.as_bytes());
    hasher.update(serde_json::to_vec(&pod).expect("pod serializes"));
    let hash = hex::encode(&hasher.finalize()[..16]);
    pod.metadata.name = Some(format!("{base}-{node_name}"));
    pod.metadata
        .namespace
        .get_or_insert_with(|| "default".into());
    pod.metadata.uid = Some(hash.clone());
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(HASH_ANNOTATION.into(), hash);
    annotations.insert(SOURCE_ANNOTATION.into(), "file".into());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node_name.to_string());
    pod.status = None;
    pod
}

/// The mirror of a static pod: the same pod, marked, owned by the Node, without a UID.
pub fn mirror_of(pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let mut mirror = pod.clone();
    let hash = pod.metadata.uid.clone().unwrap_or_default();
    mirror.metadata.uid = None;
    mirror.metadata.resource_version = None;
    mirror
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(MIRROR_ANNOTATION.into(), hash);
    mirror.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.to_string(),
        uid: node_uid.to_string(),
        controller: Some(true),
        ..Default::default()
    }]);
    mirror
}

/// The static pods known, by UID.
#[derive(Default)]
struct StaticPods {
    pods: HashMap<String, Pod>,
}

impl StaticPods {
    /// Re-reads the manifests: starts new pods, terminates removed ones, and keeps a mirror
    /// pod in the API for each.
    async fn sync(
        &mut self,
        dir: &Path,
        node_name: &str,
        node_uid: &str,
        client: &Client,
        manager: &Manager,
        statics: &Arc<Mutex<HashSet<String>>>,
    ) {
        let desired: HashMap<String, Pod> = read_manifests(dir, node_name)
            .into_iter()
            .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
            .collect();
        for (uid, pod) in &self.pods {
            if !desired.contains_key(uid) {
                let mut gone = pod.clone();
                gone.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
                manager.update(gone);
            }
        }
        for (uid, pod) in &desired {
            statics
                .lock()
                .expect("statics poisoned")
                .insert(uid.clone());
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            let existing = match api.get_opt(&name).await {
                Ok(e) => e,
                Err(err) => {
                    tracing::warn!(%err, pod = %name, "reading mirror pod");
                    None
                }
            };
            let current_hash = existing.as_ref().and_then(|m| {
                m.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(MIRROR_ANNOTATION))
                    .cloned()
            });
            if current_hash.as_deref() != Some(uid.as_str()) {
                if existing.is_some() {
                    let _ = api
                        .delete(
                            &name,
                            &DeleteParams {
                                grace_period_seconds: Some(0),
                                ..Default::default()
                            },
                        )
                        .await;
                }
                if let Err(err) = api
                    .create(&PostParams::default(), &mirror_of(pod, node_name, node_uid))
                    .await
                {
                    tracing::warn!(%err, pod = %name, "creating mirror pod");
                }
            }
            // Run the pod once its mirror exists, so its first status has somewhere to go.
            if !self.pods.contains_key(uid) {
                // A manifest put back after removal: forget that its pod finished.
                manager.remove(uid);
                manager.update(pod.clone());
            }
        }
        self.pods = desired;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_servers_connections_do_not_wait_on_nagle() {
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(accepted.nodelay().unwrap());
    }

    #[test]
    fn a_pod_status_report_clears_a_message_that_no_longer_holds() {
        let failing = k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Pending".into()),
            message: Some("volume v: configmap \"c\" not found".into()),
            ..Default::default()
        };
        assert_eq!(
            pod_status_patch(&failing)["status"]["message"],
            "volume v: configmap \"c\" not found"
        );
        let running = k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        let patch = pod_status_patch(&running);
        assert_eq!(
            patch,
            json!({"status": {"phase": "Running", "message": null, "reason": null}})
        );
        // Applied as a merge patch to the stored status, the message is gone.
        let mut stored =
            json!({"status": {"phase": "Pending", "message": "old", "hostIP": "10.0.0.1"}});
        json_patch::merge(&mut stored, &patch);
        assert_eq!(
            stored,
            json!({"status": {"phase": "Running", "hostIP": "10.0.0.1"}})
        );
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn static_pods_get_node_scoped_identity_and_mirrors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("web.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n    command: [sh, -c, 'sleep 100']\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        std::fs::write(dir.path().join("bad.yaml"), "{{{").unwrap();
        let pods = read_manifests(dir.path(), "n1");
        assert_eq!(pods.len(), 1);
        let p = &pods[0];
        assert_eq!(p.metadata.name.as_deref(), Some("web-n1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let uid = p.metadata.uid.clone().unwrap();
        assert_eq!(
            p.metadata.annotations.as_ref().unwrap()[HASH_ANNOTATION],
            uid
        );
        let other_node = read_manifests(dir.path(), "n2");
        assert_ne!(other_node[0].metadata.uid.as_ref(), Some(&uid));
        let mirror = mirror_of(p, "n1", "node-uid");
        assert!(mirror.metadata.uid.is_none());
        assert!(is_mirror(&mirror));
        assert!(!is_mirror(p));
        assert_eq!(mirror.metadata.owner_references.unwrap()[0].uid, "node-uid");
    }
}

//! The container runtime interface: what the pod sync loop asks of a runtime.
//!
//! The kubelet resolves everything Kubernetes-shaped (env sources, volumes, the pull policy)
//! before it calls the runtime, so a runtime only runs, stops, lists and execs into containers,
//! and, when it isolates pods ([`Runtime::sandboxed`]), gives each pod a sandbox (its network
//! namespace and IP) and pulls images. Two implementations:
//! - [`process::ProcessRuntime`]: host processes; no sandbox, no images, the kubelet hands out
//!   pod IPs on loopback. The defaults of the sandbox and image methods are its behaviour.
//! - [`cri::CriRuntime`]: a CRI v1 runtime (containerd) over its unix socket.
//!
//! Tests of the sync loop can use a fake.

pub mod cri;
pub mod process;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Errors of a runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The container's program could not be started (not found, not executable...).
    #[error("cannot start container {container}: {source}")]
    StartFailed {
        /// The container's name.
        container: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Neither `command` nor the image names a program to run.
    #[error("container {container} has no command and image {image:?} names no program")]
    NoCommand {
        /// The container's name.
        container: String,
        /// Its image.
        image: String,
    },
    /// No container with this id.
    #[error("no container {0}")]
    NotFound(String),
    /// The container's settings cannot be honoured as given (`CreateContainerConfigError`:
    /// `runAsNonRoot` with an image that runs as root).
    #[error("{0}")]
    Config(String),
    /// The container is not running (an exec or attach into it).
    #[error("container {0} is not running")]
    NotRunning(String),
    /// The runtime does not serve this (streaming into a runtime that cannot).
    #[error("{0}")]
    Unsupported(String),
    /// A stream from the runtime's streaming server failed; the message is the runtime's (or
    /// says how the stream broke).
    #[error("{0}")]
    Stream(String),
    /// An exec did not finish within its timeout.
    #[error("exec timed out after {0:?}")]
    ExecTimeout(Duration),
    /// The runtime is shutting down with the kubelet and starts nothing more.
    #[error("cannot start container {0}: the runtime is shutting down")]
    ShuttingDown(String),
    /// The runtime's health check could not start a process.
    #[error("cannot spawn a process ({program}): {source}")]
    SpawnFailed {
        /// The program tried.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A CRI call failed.
    #[error("CRI {call}: {}", source.message())]
    Cri {
        /// The RPC (`RunPodSandbox`, `CreateContainer`...).
        call: &'static str,
        /// The gRPC status.
        #[source]
        source: Box<tonic::Status>,
    },
    /// The CRI runtime did not answer within the time given.
    #[error("CRI {call}: no answer within {timeout:?}")]
    CriTimeout {
        /// The RPC.
        call: &'static str,
        /// How long it was given.
        timeout: Duration,
    },
    /// The runtime answers but says it cannot run pods (its `RuntimeReady`/`NetworkReady`).
    #[error("runtime not ready: {0}")]
    NotReady(String),
    /// A container was started for a pod that has no sandbox in this runtime.
    #[error("pod {0} has no sandbox")]
    NoSandbox(String),
    /// Pulling the image failed (`ErrImagePull`); `message` is the runtime's.
    #[error("failed to pull image {image:?}: {message}")]
    ImagePull {
        /// The image.
        image: String,
        /// The runtime's message.
        message: String,
    },
    /// The image is not present and the pull policy is `Never` (`ErrImageNeverPull`).
    #[error("container image {0:?} is not present with pull policy of Never")]
    ImageNeverPull(String),
    /// Reading or writing the runtime's state failed.
    #[error("runtime state at {path}: {source}")]
    State {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result of runtime operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A volume made available to a container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// The volume's directory (or file) on the host.
    pub host_path: PathBuf,
    /// The container's `mountPath`.
    pub container_path: String,
    /// `readOnly` (recorded; the process runtime cannot enforce it).
    pub read_only: bool,
}

/// Resource limits from the container's `resources.limits`, and its CPU request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory limit in bytes.
    pub memory: Option<u64>,
    /// CPU limit in millicores.
    pub cpu_millis: Option<u64>,
    /// CPU request in millicores (`resources.requests.cpu`, else the limit, as the API
    /// defaults it): the container's share of CPU under contention ([`cpu_shares`]).
    #[serde(default)]
    pub cpu_request_millis: Option<u64>,
}

/// What the container's `securityContext`, over its pod's, asks of the runtime.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Security {
    /// `runAsUser`: the uid of the container's processes (else the image's user).
    pub run_as_user: Option<i64>,
    /// `runAsGroup`: their primary gid.
    pub run_as_group: Option<i64>,
    /// `runAsNonRoot`: refuse to start when the processes would run as uid 0.
    pub run_as_non_root: bool,
    /// The pod's `supplementalGroups`, then its `fsGroup`.
    pub supplemental_groups: Vec<i64>,
    /// `readOnlyRootFilesystem`.
    pub read_only_root_filesystem: bool,
    /// `privileged`.
    pub privileged: bool,
    /// `capabilities.add`, as written (`NET_ADMIN`; the runtime adds `CAP_`).
    pub add_capabilities: Vec<String>,
    /// `capabilities.drop` (`ALL` for every one).
    pub drop_capabilities: Vec<String>,
    /// `allowPrivilegeEscalation: false`: the processes cannot gain privileges (no_new_privs).
    pub no_new_privileges: bool,
}

/// Whether `security` lets the container start when its image runs as `image_uid` (or, without
/// a numeric uid, as `image_user`), as the Kubernetes kubelet checks `runAsNonRoot`: an image
/// that names neither runs as root. The error is the container's `CreateContainerConfigError`.
pub fn verify_non_root(
    security: &Security,
    image_uid: Option<i64>,
    image_user: &str,
    pod: &str,
    container: &str,
) -> std::result::Result<(), String> {
    if !security.run_as_non_root {
        return Ok(());
    }
    let which = format!("(pod: {pod:?}, container: {container})");
    match (security.run_as_user, image_uid) {
        (Some(0), _) => Err(format!(
            "container's runAsUser breaks non-root policy {which}"
        )),
        (Some(_), _) => Ok(()),
        (None, Some(uid)) if uid != 0 => Ok(()),
        (None, None) if !image_user.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({image_user}), cannot verify user is non-root {which}"
        )),
        // uid 0, or no user at all: root.
        (None, _) => Err(format!(
            "container has runAsNonRoot and image will run as root {which}"
        )),
    }
}

/// The cgroup CPU shares of a CPU request, as the Kubernetes kubelet computes them: 1,024 per
/// core, at least 2 (also what a container without a request gets, so that it yields to every
/// container that asked for CPU), at most 262,144.
pub fn cpu_shares(request_millis: Option<u64>) -> u64 {
    const MIN: u64 = 2;
    const MAX: u64 = 262_144;
    request_millis.map_or(MIN, |millis| {
        (millis.saturating_mul(1024) / 1000).clamp(MIN, MAX)
    })
}

/// Everything a runtime needs to start one container, already resolved by the kubelet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerConfig {
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// The container's name.
    pub name: String,
    /// How many times this container was started before (0 for the first run).
    pub attempt: u32,
    /// The `image` field, recorded and reported.
    pub image: String,
    /// `command` with `$(VAR)` references expanded (may be empty: see the runtime's docs).
    pub command: Vec<String>,
    /// `args` with `$(VAR)` references expanded.
    pub args: Vec<String>,
    /// The environment, in order, sources resolved.
    pub env: Vec<(String, String)>,
    /// `workingDir`, if set.
    pub working_dir: Option<String>,
    /// The pod's IP.
    pub pod_ip: IpAddr,
    /// Volume mounts.
    pub mounts: Vec<Mount>,
    /// Resource limits.
    pub limits: Limits,
    /// What its security context asks.
    #[serde(default)]
    pub security: Security,
    /// Hash of the container spec: the kubelet restarts the container when it changes.
    pub spec_hash: String,
    /// Where stdout/stderr go.
    pub log_path: PathBuf,
    /// `stdin`: the container's stdin stays open for `kubectl attach -i`.
    #[serde(default)]
    pub stdin: bool,
    /// `stdinOnce`: the container's stdin closes when the first attached client closes it.
    #[serde(default)]
    pub stdin_once: bool,
    /// `tty`: the container's main process runs on a terminal (with `stdin`, for `kubectl
    /// attach -it`).
    #[serde(default)]
    pub tty: bool,
    /// For an ephemeral container with `targetContainerName`: the runtime id of the container
    /// whose process namespace it joins, where the runtime can (a CRI runtime's `TARGET` PID
    /// namespace mode; the process runtime's containers all share the host's).
    #[serde(default)]
    pub target_id: Option<String>,
}

/// What a container is doing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// Running since `started_at`.
    Running {
        /// The start time.
        started_at: Timestamp,
    },
    /// Finished.
    Exited {
        /// The start time.
        started_at: Timestamp,
        /// The end time.
        finished_at: Timestamp,
        /// Exit code (128 + signal for a signalled process, as shells report).
        exit_code: i32,
        /// `Completed` for code 0, `Error` otherwise, `OOMKilled`, `Shutdown` for a container
        /// stopped because the kubelet shut down, or `Orphaned` for a process left by a previous
        /// kubelet and killed at start-up.
        reason: String,
    },
}

/// One container as the runtime knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// Unique id within its runtime, without the scheme (`<pod uid>-<name>-<attempt>` for the
    /// process runtime, containerd's id for CRI).
    pub id: String,
    /// The runtime's name, the scheme of `containerID` (`process`, `containerd`).
    #[serde(default = "process_scheme")]
    pub runtime: String,
    /// The image the runtime ran (`imageID`); empty when it has none of its own, which reports
    /// `<runtime>://<image>`.
    #[serde(default)]
    pub image_id: String,
    /// The configuration it was started with.
    pub config: ContainerConfig,
    /// Its state.
    pub state: State,
    /// Things the runtime could not honour (e.g. limits without cgroup v2), for pod events.
    pub warnings: Vec<String>,
}

fn process_scheme() -> String {
    "process".into()
}

impl Container {
    /// Whether it is running.
    pub fn is_running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    /// `containerID` of the container status: `<runtime>://<id>`.
    pub fn container_id(&self) -> String {
        format!("{}://{}", self.runtime, self.id)
    }

    /// `imageID` of the container status.
    pub fn image_id(&self) -> String {
        if self.image_id.is_empty() {
            format!("{}://{}", self.runtime, self.config.image)
        } else {
            self.image_id.clone()
        }
    }
}

/// What the kubelet asks of a pod's sandbox, from the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxConfig {
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// How many sandboxes this pod had before.
    pub attempt: u32,
    /// The pod's labels.
    pub labels: BTreeMap<String, String>,
    /// The pod's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The pod's hostname (its name, or `spec.hostname`).
    pub hostname: String,
    /// Where the pod's container logs go (`<root>/logs/<namespace>_<name>_<uid>`).
    pub log_dir: PathBuf,
    /// Resolver settings of the pod.
    pub dns: DnsConfig,
    /// `hostNetwork: true`: the pod shares the node's network namespace.
    pub host_network: bool,
    /// The containers' `hostPort`s: the runtime's network forwards each to the pod (containerd's
    /// CRI plugin through the CNI `portmap` plugin). The process runtime has none to make: its
    /// pods share the host's network.
    pub port_mappings: Vec<PortMapping>,
}

/// A node port forwarded to a pod's port (a container port with a `hostPort`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMapping {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The pod's port.
    pub container_port: i32,
    /// The node's port.
    pub host_port: i32,
    /// The node address it is forwarded from; empty for all of them.
    pub host_ip: String,
}

/// A pod's resolver settings (`/etc/resolv.conf` in its containers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsConfig {
    /// `nameserver` lines.
    pub servers: Vec<String>,
    /// `search` domains.
    pub searches: Vec<String>,
    /// `options`.
    pub options: Vec<String>,
}

/// A pod's sandbox as the runtime made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// The runtime's id for it.
    pub id: String,
    /// The pod's IPs from the runtime's network, first the primary; empty when the runtime has
    /// no network of its own (the process runtime) or the pod uses the node's.
    pub ips: Vec<IpAddr>,
}

/// Registry credentials for a pull (from the pod's `imagePullSecrets`: see
/// [`crate::pull_secrets`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryAuth {
    /// The docker config key they were found under (the registry).
    pub server: String,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

/// An image the runtime holds (`status.images` of the node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Its tags and digests (`repo:tag`, `repo@sha256:...`).
    pub names: Vec<String>,
    /// Its size in bytes.
    pub size: u64,
}

/// `imagePullPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull on every container start.
    Always,
    /// Pull when the image is not present.
    IfNotPresent,
    /// Never pull; fail when the image is not present.
    Never,
}

impl PullPolicy {
    /// The container's policy; when unset (a static pod, which the API server did not default),
    /// the API server's default for its image.
    pub fn of(container: &k8s_openapi::api::core::v1::Container) -> Self {
        let image = container.image.as_deref().unwrap_or("");
        let policy = container
            .image_pull_policy
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| skiff_meta::images::default_pull_policy(image));
        match policy {
            "Always" => Self::Always,
            "Never" => Self::Never,
            _ => Self::IfNotPresent,
        }
    }
}

/// The runtime's name and version (`nodeInfo.containerRuntimeVersion` is `<name>://<version>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// `process`, `containerd`...
    pub name: String,
    /// Its version.
    pub version: String,
}

/// Output of an exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code.
    pub exit_code: i32,
    /// Captured stdout and stderr (truncated).
    pub output: Vec<u8>,
}

/// What a streaming exec asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    /// Give the command a stdin to write to.
    pub stdin: bool,
    /// Read the command's stdout.
    pub stdout: bool,
    /// Read the command's stderr (ignored with a TTY, which merges both into stdout).
    pub stderr: bool,
    /// Run the command on a pseudo-terminal.
    pub tty: bool,
}

/// A writer to a streamed process's stdin.
pub type StreamWriter = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;
/// A reader of a streamed process's output.
pub type StreamReader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// A command started by [`Runtime::exec_stream`], its stdio handed to the caller.
///
/// Dropping it before the command ended kills the command (its whole process group): a client
/// that goes away leaves nothing behind.
pub struct Session {
    /// The command's stdin (with a TTY, the terminal's input), if asked for.
    pub stdin: Option<StreamWriter>,
    /// Its stdout (with a TTY, the terminal's output), if asked for.
    pub stdout: Option<StreamReader>,
    /// Its stderr, if asked for and without a TTY.
    pub stderr: Option<StreamReader>,
    /// Sets the terminal's size (width, height), with a TTY.
    pub resize: Option<Box<dyn Fn(u16, u16) + Send + Sync>>,
    /// Resolves to the exit code (128 + signal for a signalled process) when the command ends.
    pub exit: futures::future::BoxFuture<'static, Result<i32>>,
    /// Kills the command when dropped before it ended.
    pub guard: Box<dyn Send + Sync>,
}

/// A container runtime.
#[async_trait::async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// Starts a container; it is running (or already exited) when this returns.
    async fn start(&self, config: ContainerConfig) -> Result<Container>;
    /// Stops a container: SIGTERM, up to `grace`, then SIGKILL. Stopping an exited container is
    /// a no-op.
    async fn stop(&self, id: &str, grace: Duration) -> Result<()>;
    /// Forgets an exited container (its logs stay until the pod is removed).
    async fn remove(&self, id: &str) -> Result<()>;
    /// All containers known, running or exited, of one pod or of all pods.
    fn list(&self, pod_uid: Option<&str>) -> Vec<Container>;
    /// Runs `cmd` inside a running container's environment (for exec probes).
    async fn exec(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecOutput>;
    /// A receiver woken with the pod UID whenever one of its containers exits.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String>;
    /// Checks that the runtime can run containers now (its `Status` in CRI terms); the error
    /// says why not, and the node is not Ready while there is one.
    async fn health(&self) -> Result<()>;
    /// Stops every running container because the kubelet shuts down, all at once, each as
    /// [`Runtime::stop`] does with the grace `grace` gives it; from the call on, [`Runtime::start`]
    /// fails with [`Error::ShuttingDown`]. The exits are recorded with reason `Shutdown`, which
    /// the next kubelet restarts without back-off, as it does `Orphaned` runs.
    async fn shutdown(&self, grace: &(dyn for<'c> Fn(&'c Container) -> Duration + Send + Sync));

    /// Starts `cmd` in a running container with its stdio streamed to the caller (`kubectl
    /// exec`). The default serves no streams.
    async fn exec_stream(
        &self,
        id: &str,
        cmd: &[String],
        options: StreamOptions,
    ) -> Result<Session> {
        let _ = (id, cmd, options);
        Err(Error::Unsupported(
            "this container runtime does not serve exec streams".into(),
        ))
    }

    /// Attaches to a running container's main process (`kubectl attach`): its output from now
    /// on and, where the container has `stdin: true` and it is asked for, its stdin. Dropping
    /// the session detaches and leaves the container running. The default serves no streams.
    async fn attach(&self, id: &str, options: StreamOptions) -> Result<Session> {
        let _ = (id, options);
        Err(Error::Unsupported(
            "this container runtime does not serve attach".into(),
        ))
    }

    /// A connection to `port` in the pod's network (`kubectl port-forward`), as halves to read
    /// and write. The default dials `address`, the pod's IP (the host's, for pods on the host
    /// network), over TCP.
    async fn port_forward(
        &self,
        pod_uid: &str,
        address: IpAddr,
        port: u16,
    ) -> Result<(StreamReader, StreamWriter)> {
        let _ = pod_uid;
        let stream = tokio::net::TcpStream::connect((address, port))
            .await
            .map_err(|err| {
                Error::Stream(format!("failed to connect to {address}:{port}: {err}"))
            })?;
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        Ok((Box::new(read), Box::new(write)))
    }

    /// The runtime's name and version. The process runtime's is this crate's version.
    async fn version(&self) -> Result<Version> {
        Ok(Version {
            name: "process".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        })
    }
    /// Whether pods get sandboxes of their own (network, mounts, hostname): then volumes are
    /// mounted at their paths, the working directory is the container's own, the pod IP comes
    /// from [`Runtime::run_sandbox`], and images are pulled. The process runtime runs on the host.
    fn sandboxed(&self) -> bool {
        false
    }
    /// Makes the pod's sandbox, or finds the ready one it has (after a kubelet restart); the
    /// containers of the pod are started in it. The default has nothing to make.
    async fn run_sandbox(&self, config: &SandboxConfig) -> Result<Sandbox> {
        Ok(Sandbox {
            id: config.pod_uid.clone(),
            ips: Vec::new(),
        })
    }
    /// Stops and removes every sandbox of the pod (and with them its containers).
    async fn remove_sandbox(&self, pod_uid: &str) -> Result<()> {
        let _ = pod_uid;
        Ok(())
    }
    /// The UIDs of the pods that have sandboxes (for cleaning up pods deleted while the kubelet
    /// was down).
    async fn sandbox_pods(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// What each running container uses now (cumulative CPU, memory), by container id, with
    /// the time of the reading. The default measures nothing.
    async fn usage(&self) -> Result<Vec<(String, Timestamp, crate::stats::Usage)>> {
        Ok(Vec::new())
    }
    /// The images the runtime holds. The default has none.
    async fn images(&self) -> Result<Vec<Image>> {
        Ok(Vec::new())
    }
    /// Makes `image` present by `policy` for a container of pod `pod_uid`; returns the runtime's
    /// image reference. A pull tries each of `auth` in turn, then none. The default has no
    /// images: nothing to pull.
    async fn ensure_image(
        &self,
        pod_uid: &str,
        image: &str,
        policy: PullPolicy,
        auth: &[RegistryAuth],
    ) -> Result<Option<String>> {
        let _ = (pod_uid, image, policy, auth);
        Ok(None)
    }
}

/// Reasons of runs the kubelet ended itself (its shutdown, its restart): restarted whatever the
/// restart policy, without back-off.
pub const KUBELET_ENDED: [&str; 2] = ["Shutdown", "Orphaned"];

#[cfg(test)]
mod cpu_share_tests {
    use super::cpu_shares;

    #[test]
    fn cpu_requests_become_shares_as_the_kubelet_computes_them() {
        assert_eq!(cpu_shares(None), 2);
        assert_eq!(cpu_shares(Some(0)), 2);
        assert_eq!(cpu_shares(Some(1)), 2);
        assert_eq!(cpu_shares(Some(100)), 102);
        assert_eq!(cpu_shares(Some(250)), 256);
        assert_eq!(cpu_shares(Some(1000)), 1024);
        assert_eq!(cpu_shares(Some(300_000)), 262_144);
        assert_eq!(cpu_shares(Some(u64::MAX)), 262_144);
    }
}

#[cfg(test)]
mod non_root_tests {
    use super::{Security, verify_non_root};

    fn check(security: &Security, uid: Option<i64>, user: &str) -> Result<(), String> {
        verify_non_root(security, uid, user, "ns/p", "c")
    }

    #[test]
    fn run_as_non_root_is_checked_against_the_user_that_would_run() {
        let non_root = Security {
            run_as_non_root: true,
            ..Default::default()
        };
        // Not asked: anything goes.
        assert_eq!(check(&Security::default(), Some(0), ""), Ok(()));
        // The image's user decides when runAsUser is not set.
        assert_eq!(check(&non_root, Some(1000), ""), Ok(()));
        let root = check(&non_root, Some(0), "").unwrap_err();
        assert_eq!(
            root,
            "container has runAsNonRoot and image will run as root (pod: \"ns/p\", container: c)"
        );
        // An image that names no user runs as root.
        assert_eq!(check(&non_root, None, ""), Err(root));
        let named = check(&non_root, None, "app").unwrap_err();
        assert!(named.contains("non-numeric user (app)"), "{named}");
        // runAsUser decides over the image.
        let as_user = |uid| Security {
            run_as_user: Some(uid),
            ..non_root.clone()
        };
        assert_eq!(check(&as_user(1000), Some(0), ""), Ok(()));
        assert!(
            check(&as_user(0), Some(1000), "")
                .unwrap_err()
                .contains("runAsUser breaks non-root policy")
        );
    }
}

//! The container runtime interface: what the pod sync loop asks of a runtime.
//!
//! The kubelet resolves everything Kubernetes-shaped (env sources, volumes, the pod IP) before it
//! calls the runtime, so a runtime only runs, stops, lists and execs into containers. The embedded
//! implementation is [`process::ProcessRuntime`]; tests of the sync loop can use a fake.

pub mod process;

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

/// Resource limits from the container's `resources.limits`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory limit in bytes.
    pub memory: Option<u64>,
    /// CPU limit in millicores.
    pub cpu_millis: Option<u64>,
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
    /// Hash of the container spec: the kubelet restarts the container when it changes.
    pub spec_hash: String,
    /// Where stdout/stderr go.
    pub log_path: PathBuf,
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
    /// Unique id (`process://<pod uid>-<name>-<attempt>` style, without the scheme).
    pub id: String,
    /// The configuration it was started with.
    pub config: ContainerConfig,
    /// Its state.
    pub state: State,
    /// Things the runtime could not honour (e.g. limits without cgroup v2), for pod events.
    pub warnings: Vec<String>,
}

impl Container {
    /// Whether it is running.
    pub fn is_running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }
}

/// Output of an exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code.
    pub exit_code: i32,
    /// Captured stdout and stderr (truncated).
    pub output: Vec<u8>,
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
}

/// Reasons of runs the kubelet ended itself (its shutdown, its restart): restarted whatever the
/// restart policy, without back-off.
pub const KUBELET_ENDED: [&str; 2] = ["Shutdown", "Orphaned"];

//! The kubelet: registers its Node, heartbeats with a Lease, reports status on change or on its
//! report interval, and runs this node's pods in a container runtime (containerd over CRI, or
//! host processes).
//!
//! # Layout
//! - [`agent`]: [`Options`] and [`run`]: the kubelet against the API server (Node, Lease,
//!   status, watched and static pods, reporting).
//! - [`host`]: readings of the host (CPUs, memory, PIDs, disk, kernel/OS identity).
//! - [`node_status`]: the Node status as a list of setter functions, and change detection.
//! - [`logs`]: container log files (CRI line format, rotation, reading for `kubectl logs`).
//! - [`runtime`]: the container runtime trait, the CRI runtime (containerd) and the process
//!   runtime.
//! - [`stats`]: CPU and memory of the node and its containers, read every housekeeping
//!   interval and served as the Summary API (`/stats/summary`) for `kubectl top`.
//! - [`spec`]: env resolution, `$(VAR)` expansion, limits and the spec hash of a container.
//! - [`volumes`]: emptyDir, hostPath, configMap, secret, downwardAPI and projected volumes
//!   ([`projected`] says what they hold) and per-container roots.
//! - [`identity`]: pods' service-account tokens (TokenRequest, refreshed) and the `kubernetes`
//!   Service's environment variables.
//! - [`ipam`]: pod IPs in the loopback block.
//! - [`pod`]: the pod manager and per-pod workers (sync loop, back-off, probes, status).
//! - [`server`]: the kubelet HTTP server (`/healthz`, `/pods`, `/stats/summary`, container logs,
//!   exec).
//! - [`stream`]: exec sessions over WebSocket and their channel protocol.

pub mod agent;
pub mod host;
pub mod identity;
pub mod images;
pub mod ipam;
pub mod logs;
pub mod node_status;
pub mod pod;
pub mod projected;
pub mod pull_secrets;
pub mod registries;
pub mod runtime;
pub mod server;
pub mod spec;
pub mod stats;
pub mod stream;
pub mod volumes;

pub use agent::{Error, HostReader, Options, Result, run, run_with_host};

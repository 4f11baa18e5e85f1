//! The Node's status, computed by a list of setter functions as the Kubernetes kubelet does.
//!
//! Each [`Setter`] owns a part of `NodeStatus` (addresses, capacity, node info, daemon endpoints,
//! one condition...). [`compute`] applies them in order to a copy of the last status, and
//! [`changed`] says whether the result differs from what the API server has, ignoring heartbeat
//! times: the status is only PATCHed when it changed or the report interval passed.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::host::Readings;

/// The kubelet version this crate reports (the Kubernetes API level it follows).
pub const KUBELET_VERSION: &str = concat!("v1.33.0-skiff.", env!("CARGO_PKG_VERSION"));
/// `nodeInfo.containerRuntimeVersion` of the process runtime (a CRI runtime reports
/// `<name>://<version>` from its `Version` answer).
pub const RUNTIME_VERSION: &str = concat!("process://", env!("CARGO_PKG_VERSION"));

/// Hard eviction thresholds: below these the node reports pressure, and allocatable excludes
/// them. Defaults are the kubelet's (`memory.available<100Mi`, `nodefs.available<10%`) plus a
/// PID threshold of 5% of `pid_max`.
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    /// Memory pressure when `MemAvailable` is below this many bytes.
    pub memory_available: u64,
    /// Disk pressure when the available fraction of the root dir's filesystem is below this.
    pub disk_available_fraction: f64,
    /// PID pressure when the free fraction of `pid_max` is below this.
    pub pids_available_fraction: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            memory_available: 100 * 1024 * 1024,
            disk_available_fraction: 0.10,
            pids_available_fraction: 0.05,
        }
    }
}

/// Everything the setters read: host readings and the kubelet's own settings.
#[derive(Clone, Debug)]
pub struct Context {
    /// The latest host readings.
    pub readings: Readings,
    /// The node's InternalIP.
    pub node_ip: IpAddr,
    /// The node's Hostname address.
    pub hostname: String,
    /// The kubelet's HTTP port (`daemonEndpoints.kubeletEndpoint.Port`).
    pub kubelet_port: i32,
    /// `--max-pods`.
    pub max_pods: u64,
    /// Eviction thresholds.
    pub thresholds: Thresholds,
    /// `None` when the runtime works; otherwise why the node is not Ready.
    pub runtime_error: Option<String>,
    /// `nodeInfo.containerRuntimeVersion`: `<name>://<version>`, empty until the runtime said.
    pub runtime_version: String,
    /// The runtime's images (`status.images`); `None` keeps what the status has (a runtime
    /// that did not answer).
    pub images: Option<Vec<crate::runtime::Image>>,
    /// The time of this computation (heartbeat and transition times).
    pub now: Timestamp,
}

/// A setter updates its part of the status from the context.
pub type Setter = fn(&mut NodeStatus, &Context);

/// The setters in the order the kubelet applies them.
pub fn default_setters() -> Vec<Setter> {
    vec![
        set_addresses,
        set_machine_info,
        set_version_info,
        set_images,
        set_daemon_endpoints,
        set_memory_pressure,
        set_disk_pressure,
        set_pid_pressure,
        set_ready,
    ]
}

/// Applies `setters` to a copy of `old`.
pub fn compute(old: &NodeStatus, ctx: &Context, setters: &[Setter]) -> NodeStatus {
    let mut status = old.clone();
    for setter in setters {
        setter(&mut status, ctx);
    }
    status
}

/// Whether `new` differs from `old` in anything but condition heartbeat times.
pub fn changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    fn strip(s: &NodeStatus) -> NodeStatus {
        let mut s = s.clone();
        if let Some(conditions) = s.conditions.as_mut() {
            for c in conditions.iter_mut() {
                c.last_heartbeat_time = None;
            }
            conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        }
        s
    }
    strip(old) != strip(new)
}

/// The status of condition `type_` (`"True"`, `"False"`, ...), if present.
pub fn condition_status<'a>(status: &'a NodeStatus, type_: &str) -> Option<&'a str> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// InternalIP and Hostname.
pub fn set_addresses(status: &mut NodeStatus, ctx: &Context) {
    status.addresses = Some(vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: ctx.node_ip.to_string(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: ctx.hostname.clone(),
        },
    ]);
}

/// Capacity from the host; allocatable is capacity less the hard eviction thresholds.
pub fn set_machine_info(status: &mut NodeStatus, ctx: &Context) {
    let r = &ctx.readings;
    let t = &ctx.thresholds;
    let disk_reserved = (r.disk_total as f64 * t.disk_available_fraction) as u64;
    let capacity = resources(r.cpus, r.memory_total, r.disk_total, ctx.max_pods);
    let allocatable = resources(
        r.cpus,
        r.memory_total.saturating_sub(t.memory_available),
        r.disk_total.saturating_sub(disk_reserved),
        ctx.max_pods,
    );
    status.capacity = Some(capacity);
    status.allocatable = Some(allocatable);
    let info = status.node_info.get_or_insert_with(Default::default);
    info.machine_id = r.machine_id.clone();
    info.system_uuid = r.machine_id.clone();
    info.boot_id = r.boot_id.clone();
}

fn resources(cpus: u64, memory: u64, disk: u64, pods: u64) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpus.to_string())),
        (
            "memory".to_string(),
            Quantity(format!("{}Ki", memory / 1024)),
        ),
        ("ephemeral-storage".to_string(), Quantity(disk.to_string())),
        ("pods".to_string(), Quantity(pods.to_string())),
    ])
}

/// Kernel, OS, architecture, kubelet and runtime versions.
pub fn set_version_info(status: &mut NodeStatus, ctx: &Context) {
    let r = &ctx.readings;
    let info = status.node_info.get_or_insert_with(NodeSystemInfo::default);
    info.kernel_version = r.kernel_version.clone();
    info.os_image = r.os_image.clone();
    info.operating_system = r.operating_system.clone();
    info.architecture = r.architecture.clone();
    info.kubelet_version = KUBELET_VERSION.to_string();
    info.container_runtime_version = ctx.runtime_version.clone();
}

/// Most images `status.images` lists (the Kubernetes kubelet's `--node-status-max-images`).
pub const MAX_IMAGES: usize = 50;

/// `status.images`: the runtime's images, largest first, at most [`MAX_IMAGES`]; none for a
/// runtime without images.
pub fn set_images(status: &mut NodeStatus, ctx: &Context) {
    let Some(images) = &ctx.images else { return };
    let mut images: Vec<&crate::runtime::Image> =
        images.iter().filter(|i| !i.names.is_empty()).collect();
    images.sort_by(|a, b| b.size.cmp(&a.size).then(a.names.cmp(&b.names)));
    let list: Vec<k8s_openapi::api::core::v1::ContainerImage> = images
        .into_iter()
        .take(MAX_IMAGES)
        .map(|i| k8s_openapi::api::core::v1::ContainerImage {
            names: Some(i.names.clone()),
            size_bytes: Some(i.size as i64),
        })
        .collect();
    status.images = (!list.is_empty()).then_some(list);
}

/// The kubelet's HTTP port, where the API server proxies logs.
pub fn set_daemon_endpoints(status: &mut NodeStatus, ctx: &Context) {
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: ctx.kubelet_port,
        }),
    });
}

/// `MemoryPressure` from `MemAvailable` against the threshold.
pub fn set_memory_pressure(status: &mut NodeStatus, ctx: &Context) {
    let pressure = ctx.readings.memory_available < ctx.thresholds.memory_available;
    let (reason, message) = if pressure {
        (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
        )
    } else {
        (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        )
    };
    set_condition(status, "MemoryPressure", pressure, reason, message, ctx.now);
}

/// `DiskPressure` from the root dir's filesystem against the threshold.
pub fn set_disk_pressure(status: &mut NodeStatus, ctx: &Context) {
    let r = &ctx.readings;
    let pressure = r.disk_total > 0
        && (r.disk_available as f64) < r.disk_total as f64 * ctx.thresholds.disk_available_fraction;
    let (reason, message) = if pressure {
        ("KubeletHasDiskPressure", "kubelet has disk pressure")
    } else {
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure")
    };
    set_condition(status, "DiskPressure", pressure, reason, message, ctx.now);
}

/// `PIDPressure` from the processes running against `pid_max`.
pub fn set_pid_pressure(status: &mut NodeStatus, ctx: &Context) {
    let r = &ctx.readings;
    let free = r.pid_max.saturating_sub(r.pids_running);
    let pressure = (free as f64) < r.pid_max as f64 * ctx.thresholds.pids_available_fraction;
    let (reason, message) = if pressure {
        (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
        )
    } else {
        (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        )
    };
    set_condition(status, "PIDPressure", pressure, reason, message, ctx.now);
}

/// `Ready` while the runtime works.
pub fn set_ready(status: &mut NodeStatus, ctx: &Context) {
    match &ctx.runtime_error {
        None => set_condition(
            status,
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
            ctx.now,
        ),
        Some(err) => set_condition(status, "Ready", false, "KubeletNotReady", err, ctx.now),
    }
}

/// Sets condition `type_`, moving `lastTransitionTime` only when its status flips; the
/// heartbeat time is always `now`.
fn set_condition(
    status: &mut NodeStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let value = if value { "True" } else { "False" };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let idx = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(NodeCondition {
                type_: type_.to_string(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[idx];
    if c.status != value || c.last_transition_time.is_none() {
        c.last_transition_time = Some(Time(now));
    }
    c.status = value.to_string();
    c.reason = Some(reason.to_string());
    c.message = Some(message.to_string());
    c.last_heartbeat_time = Some(Time(now));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(now: i64) -> Context {
        Context {
            readings: Readings {
                cpus: 4,
                memory_total: 8 * 1024 * 1024 * 1024,
                memory_available: 4 * 1024 * 1024 * 1024,
                pid_max: 100_000,
                pids_running: 300,
                disk_total: 100 * 1024 * 1024 * 1024,
                disk_available: 50 * 1024 * 1024 * 1024,
                kernel_version: "6.1.0".into(),
                os_image: "Debian".into(),
                operating_system: "linux".into(),
                architecture: "amd64".into(),
                machine_id: "m1".into(),
                boot_id: "b1".into(),
                hostname: "host1".into(),
            },
            node_ip: "127.0.0.1".parse().unwrap(),
            hostname: "n1".into(),
            kubelet_port: 10250,
            max_pods: 110,
            thresholds: Thresholds::default(),
            runtime_error: None,
            runtime_version: RUNTIME_VERSION.into(),
            images: None,
            now: Timestamp::from_second(now).unwrap(),
        }
    }

    #[test]
    fn fresh_status_has_capacity_info_endpoints_and_four_conditions() {
        let s = compute(&NodeStatus::default(), &ctx(1000), &default_setters());
        let cap = s.capacity.as_ref().unwrap();
        assert_eq!(cap["cpu"].0, "4");
        assert_eq!(cap["memory"].0, format!("{}Ki", 8 * 1024 * 1024));
        assert_eq!(cap["pods"].0, "110");
        let alloc = s.allocatable.as_ref().unwrap();
        assert_eq!(
            alloc["memory"].0,
            format!("{}Ki", 8 * 1024 * 1024 - 100 * 1024)
        );
        assert_eq!(
            alloc["ephemeral-storage"].0,
            (90u64 * 1024 * 1024 * 1024).to_string()
        );
        let info = s.node_info.as_ref().unwrap();
        assert_eq!(info.kernel_version, "6.1.0");
        assert_eq!(info.architecture, "amd64");
        assert_eq!(info.boot_id, "b1");
        assert_eq!(info.kubelet_version, KUBELET_VERSION);
        assert_eq!(
            s.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
            10250
        );
        let addrs = s.addresses.unwrap();
        assert_eq!(addrs[0].type_, "InternalIP");
        assert_eq!(addrs[0].address, "127.0.0.1");
        let s = compute(&NodeStatus::default(), &ctx(1000), &default_setters());
        assert_eq!(condition_status(&s, "Ready"), Some("True"));
        assert_eq!(condition_status(&s, "MemoryPressure"), Some("False"));
        assert_eq!(condition_status(&s, "DiskPressure"), Some("False"));
        assert_eq!(condition_status(&s, "PIDPressure"), Some("False"));
    }

    #[test]
    fn recomputing_with_same_readings_is_unchanged_despite_new_heartbeat() {
        let setters = default_setters();
        let first = compute(&NodeStatus::default(), &ctx(1000), &setters);
        let second = compute(&first, &ctx(1010), &setters);
        assert_ne!(first, second, "heartbeat times move");
        assert!(!changed(&first, &second));
        let ready = |s: &NodeStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .clone()
        };
        assert_eq!(
            ready(&first).last_transition_time,
            ready(&second).last_transition_time
        );
    }

    #[test]
    fn low_memory_flips_memory_pressure_and_moves_transition_time() {
        let setters = default_setters();
        let first = compute(&NodeStatus::default(), &ctx(1000), &setters);
        let mut low = ctx(1010);
        low.readings.memory_available = 50 * 1024 * 1024;
        let second = compute(&first, &low, &setters);
        assert!(changed(&first, &second));
        assert_eq!(condition_status(&second, "MemoryPressure"), Some("True"));
        let c = second
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "MemoryPressure")
            .unwrap();
        assert_eq!(c.last_transition_time, Some(Time(low.now)));
        assert_eq!(c.reason.as_deref(), Some("KubeletHasInsufficientMemory"));
    }

    #[test]
    fn full_disk_and_exhausted_pids_report_pressure() {
        let mut c = ctx(1000);
        c.readings.disk_available = c.readings.disk_total / 20;
        c.readings.pids_running = 99_000;
        let s = compute(&NodeStatus::default(), &c, &default_setters());
        assert_eq!(condition_status(&s, "DiskPressure"), Some("True"));
        assert_eq!(condition_status(&s, "PIDPressure"), Some("True"));
        assert_eq!(condition_status(&s, "Ready"), Some("True"));
    }

    #[test]
    fn runtime_error_makes_node_not_ready_with_message() {
        let mut c = ctx(1000);
        c.runtime_error = Some("root dir not writable".into());
        let s = compute(&NodeStatus::default(), &c, &default_setters());
        assert_eq!(condition_status(&s, "Ready"), Some("False"));
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(ready.message.as_deref(), Some("root dir not writable"));
    }

    #[test]
    fn ready_follows_runtime_health_both_ways() {
        let setters = default_setters();
        let healthy = compute(&NodeStatus::default(), &ctx(1000), &setters);
        let mut broken = ctx(1010);
        broken.runtime_error = Some("container runtime is down: cannot spawn".into());
        let down = compute(&healthy, &broken, &setters);
        assert!(changed(&healthy, &down), "a flip is PATCHed at once");
        assert_eq!(condition_status(&down, "Ready"), Some("False"));
        let up = compute(&down, &ctx(1020), &setters);
        assert!(changed(&down, &up));
        let ready = up
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
        assert_eq!(
            ready.last_transition_time,
            Some(Time(Timestamp::from_second(1020).unwrap()))
        );
        // The other conditions did not move.
        assert_eq!(condition_status(&up, "MemoryPressure"), Some("False"));
    }

    #[test]
    fn setters_are_independent_parts() {
        let s = compute(&NodeStatus::default(), &ctx(1000), &[set_daemon_endpoints]);
        assert!(s.daemon_endpoints.is_some());
        assert!(s.capacity.is_none() && s.conditions.is_none());
    }
}

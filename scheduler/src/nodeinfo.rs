//! What the algorithm sees: a [`PodInfo`] digested once from a `Pod`, and a [`NodeInfo`] per node
//! whose aggregates (requests, pod count, host ports, exclusive volumes, spreading groups) are kept
//! up to date incrementally as pods are added and removed, so that a decision never walks the pods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSelector, Pod, Taint, Toleration, Volume};

use crate::resources::{PodRequests, Resource, value};

/// The node label of the zone (and the older beta label) used by selector spreading.
pub const ZONE_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
];
/// The node label of the region (and the older beta label).
pub const REGION_LABELS: [&str; 2] = [
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/region",
];

/// The id of a spreading group (a Service or ReplicaSet selector), interned by the cache.
pub type GroupId = u32;

/// One host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// The host IP; `0.0.0.0` (all addresses) when unset.
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The port number.
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports cannot both be bound on one node: same protocol and port, and the
    /// same IP or either on all addresses.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// A volume that only one pod on a node may mount (the `NoDiskConflict` kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExclusiveVolume {
    /// A GCE persistent disk: two pods may share it only if both mount it read-only.
    GcePd {
        /// `pdName`.
        name: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// An AWS EBS volume: never shared.
    AwsEbs {
        /// `volumeID`.
        id: String,
    },
    /// A Ceph RBD image: never shared when the pool and image match and a monitor is common.
    Rbd {
        /// `monitors`.
        monitors: Vec<String>,
        /// `pool` (default `rbd`).
        pool: String,
        /// `image`.
        image: String,
    },
    /// An iSCSI target: shared only if both mount it read-only.
    Iscsi {
        /// `iqn`.
        iqn: String,
        /// `readOnly`.
        read_only: bool,
    },
}

impl ExclusiveVolume {
    /// The exclusive volume a pod volume is, if it is one.
    pub fn of(v: &Volume) -> Option<ExclusiveVolume> {
        if let Some(pd) = &v.gce_persistent_disk {
            return Some(ExclusiveVolume::GcePd {
                name: pd.pd_name.clone(),
                read_only: pd.read_only.unwrap_or(false),
            });
        }
        if let Some(ebs) = &v.aws_elastic_block_store {
            return Some(ExclusiveVolume::AwsEbs {
                id: ebs.volume_id.clone(),
            });
        }
        if let Some(rbd) = &v.rbd {
            return Some(ExclusiveVolume::Rbd {
                monitors: rbd.monitors.clone(),
                pool: rbd.pool.clone().unwrap_or_else(|| "rbd".into()),
                image: rbd.image.clone(),
            });
        }
        if let Some(iscsi) = &v.iscsi {
            return Some(ExclusiveVolume::Iscsi {
                iqn: iscsi.iqn.clone(),
                read_only: iscsi.read_only.unwrap_or(false),
            });
        }
        None
    }

    /// Whether two pods mounting these volumes cannot share a node (`isVolumeConflict`).
    pub fn conflicts(&self, other: &ExclusiveVolume) -> bool {
        use ExclusiveVolume::*;
        match (self, other) {
            (
                GcePd {
                    name: a,
                    read_only: ra,
                },
                GcePd {
                    name: b,
                    read_only: rb,
                },
            ) => a == b && !(*ra && *rb),
            (AwsEbs { id: a }, AwsEbs { id: b }) => a == b,
            (
                Rbd {
                    monitors: ma,
                    pool: pa,
                    image: ia,
                },
                Rbd {
                    monitors: mb,
                    pool: pb,
                    image: ib,
                },
            ) => pa == pb && ia == ib && ma.iter().any(|m| mb.contains(m)),
            (
                Iscsi {
                    iqn: a,
                    read_only: ra,
                },
                Iscsi {
                    iqn: b,
                    read_only: rb,
                },
            ) => a == b && !(*ra && *rb),
            _ => false,
        }
    }
}

/// A pod as the algorithm needs it, digested once.
#[derive(Debug, Clone, Default)]
pub struct PodInfo {
    /// `namespace/name`.
    pub key: String,
    /// `metadata.uid` (empty if unset).
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Whether the pod is being deleted (ignored by spreading).
    pub terminating: bool,
    /// `spec.nodeName` (empty when unscheduled).
    pub node_name: String,
    /// `spec.schedulerName` (default `default-scheduler`).
    pub scheduler_name: String,
    /// The pod's requests.
    pub requests: PodRequests,
    /// The host ports of its containers.
    pub host_ports: Vec<HostPort>,
    /// Its exclusive volumes.
    pub volumes: Vec<ExclusiveVolume>,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity (`requiredDuringSchedulingIgnoredDuringExecution`).
    pub required_affinity: Option<NodeSelector>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
    /// The spreading groups (Services, ReplicaSets) whose selectors match the pod; filled in by
    /// the cache, which owns the group registry.
    pub groups: Vec<GroupId>,
    /// The node affinity of the volumes bound to the pod's claims (every one must match);
    /// filled in by the scheduler from [`crate::volumes::check`].
    pub volume_affinity: Vec<NodeSelector>,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Whether `spec.preemptionPolicy` is `Never` (the pod waits instead of preempting).
    pub never_preempts: bool,
    /// `status.nominatedNodeName` (empty when none): where an earlier preemption made room.
    pub nominated_node: String,
    /// `status.startTime`, when it started (preemption spares the longest-running first).
    pub start_time: Option<jiff::Timestamp>,
}

impl PodInfo {
    /// Digests a pod.
    pub fn new(pod: &Pod) -> PodInfo {
        let meta = &pod.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let mut host_ports = Vec::new();
        for c in spec.into_iter().flat_map(|s| &s.containers) {
            for p in c.ports.iter().flatten() {
                if let Some(port) = p.host_port.filter(|&p| p > 0) {
                    host_ports.push(HostPort {
                        ip: p
                            .host_ip
                            .clone()
                            .filter(|ip| !ip.is_empty())
                            .unwrap_or_else(|| "0.0.0.0".into()),
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        port,
                    });
                }
            }
        }
        PodInfo {
            key: format!("{namespace}/{name}"),
            uid: meta.uid.clone().unwrap_or_default(),
            namespace,
            name,
            labels: meta.labels.clone().unwrap_or_default(),
            terminating: meta.deletion_timestamp.is_some(),
            node_name: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
            scheduler_name: spec
                .and_then(|s| s.scheduler_name.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| crate::DEFAULT_SCHEDULER_NAME.into()),
            requests: PodRequests::of(pod),
            host_ports,
            volumes: spec
                .and_then(|s| s.volumes.as_ref())
                .into_iter()
                .flatten()
                .filter_map(ExclusiveVolume::of)
                .collect(),
            node_selector: spec
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default(),
            required_affinity: spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .clone()
                }),
            tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
            groups: Vec::new(),
            volume_affinity: Vec::new(),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            never_preempts: spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never"),
            nominated_node: pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.clone())
                .unwrap_or_default(),
            start_time: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0),
        }
    }
}

/// A node and the aggregates of the pods on it (bound, and assumed by this scheduler).
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    /// `metadata.name`.
    pub name: String,
    /// The node object, if the node is known (a node can hold pods before its object arrives).
    pub node: Option<Arc<Node>>,
    /// `status.allocatable` cpu and memory.
    pub allocatable: Resource,
    /// `status.allocatable` pods.
    pub allowed_pods: i64,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The NoSchedule and NoExecute taints (PreferNoSchedule does not filter).
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Whether the `Ready` condition is `True`.
    pub ready: bool,
    /// `region:zone` from the topology labels, if any (selector spreading).
    pub zone: Option<String>,
    /// The sum of the effective requests of the pods here.
    pub requested: Resource,
    /// The sum of the non-zero requests of the pods here (priorities).
    pub non_zero_requested: Resource,
    /// The host ports in use, one entry per use.
    pub used_ports: Vec<HostPort>,
    /// The exclusive volumes mounted, one entry per use.
    pub volumes: Vec<ExclusiveVolume>,
    /// How many pods here are in each spreading group.
    pub group_counts: HashMap<GroupId, u32>,
    /// The pods here by key.
    pub pods: HashMap<String, Arc<PodInfo>>,
}

impl NodeInfo {
    /// An empty node info for `name` (no node object yet).
    pub fn empty(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.to_string(),
            ..Default::default()
        }
    }

    /// A node info for a node with no pods.
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let mut info = NodeInfo::empty(node.metadata.name.as_deref().unwrap_or_default());
        info.set_node(node);
        info
    }

    /// Replaces the node object, keeping the pod aggregates.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let status = node.status.as_ref();
        let allocatable = status.and_then(|s| s.allocatable.as_ref());
        self.allocatable = Resource::from_list(allocatable);
        self.allowed_pods = allocatable
            .and_then(|a| a.get("pods"))
            .and_then(|q| value(&q.0))
            .unwrap_or(0);
        self.labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        self.taints = spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .cloned()
            .collect();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        self.ready = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let first = |keys: [&str; 2]| keys.iter().find_map(|k| self.labels.get(*k)).cloned();
        self.zone = match (first(REGION_LABELS), first(ZONE_LABELS)) {
            (None, None) => None,
            (region, zone) => Some(format!(
                "{}:\x00:{}",
                region.unwrap_or_default(),
                zone.unwrap_or_default()
            )),
        };
        self.node = Some(node);
    }

    /// Adds a pod's requests, ports, volumes and groups. A pod already here is replaced.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        if self.pods.contains_key(&pod.key) {
            self.remove_pod(&pod.key.clone());
        }
        self.requested.add(pod.requests.request);
        self.non_zero_requested.add(pod.requests.non_zero);
        self.used_ports.extend(pod.host_ports.iter().cloned());
        self.volumes.extend(pod.volumes.iter().cloned());
        if !pod.terminating {
            for g in &pod.groups {
                *self.group_counts.entry(*g).or_default() += 1;
            }
        }
        self.pods.insert(pod.key.clone(), pod);
    }

    /// Removes a pod by key and returns it, undoing [`NodeInfo::add_pod`].
    pub fn remove_pod(&mut self, key: &str) -> Option<Arc<PodInfo>> {
        let pod = self.pods.remove(key)?;
        self.requested.sub(pod.requests.request);
        self.non_zero_requested.sub(pod.requests.non_zero);
        for p in &pod.host_ports {
            if let Some(i) = self.used_ports.iter().position(|u| u == p) {
                self.used_ports.swap_remove(i);
            }
        }
        for v in &pod.volumes {
            if let Some(i) = self.volumes.iter().position(|u| u == v) {
                self.volumes.swap_remove(i);
            }
        }
        if !pod.terminating {
            for g in &pod.groups {
                if let Some(c) = self.group_counts.get_mut(g) {
                    *c -= 1;
                    if *c == 0 {
                        self.group_counts.remove(g);
                    }
                }
            }
        }
        Some(pod)
    }

    /// How many pods are here.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}

/// Whether a toleration tolerates a taint (`Toleration.ToleratesTaint`): an empty effect matches
/// every effect, an empty key with `Exists` matches every key, and `Equal` (the default) compares
/// values.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            !key.is_empty()
                && t.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};

    pub(crate) fn pod_with_port(name: &str, ip: Option<&str>, port: i32) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        container_port: 80,
                        host_port: Some(port),
                        host_ip: ip.map(Into::into),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn add_and_remove_keep_aggregates_exact() {
        let mut node = NodeInfo::empty("n1");
        let mut a = PodInfo::new(&pod_with_port("a", None, 8080));
        a.groups = vec![7];
        let b = PodInfo::new(&pod_with_port("b", Some("10.0.0.1"), 9090));
        node.add_pod(Arc::new(a.clone()));
        node.add_pod(Arc::new(b));
        // Re-adding the same pod replaces it rather than counting it twice.
        node.add_pod(Arc::new(a));
        assert_eq!(node.pod_count(), 2);
        assert_eq!(node.used_ports.len(), 2);
        assert_eq!(node.group_counts.get(&7), Some(&1));
        assert_eq!(node.non_zero_requested.milli_cpu, 200);
        node.remove_pod("default/a");
        assert_eq!(node.used_ports.len(), 1);
        assert!(node.group_counts.is_empty());
        assert_eq!(node.non_zero_requested.milli_cpu, 100);
        assert!(node.remove_pod("default/a").is_none());
    }

    #[test]
    fn host_ports_conflict_on_same_port_and_overlapping_ip() {
        let any = |p| HostPort {
            ip: "0.0.0.0".into(),
            protocol: "TCP".into(),
            port: p,
        };
        let ip = |a: &str, p| HostPort {
            ip: a.into(),
            protocol: "TCP".into(),
            port: p,
        };
        assert!(any(80).conflicts(&ip("10.0.0.1", 80)));
        assert!(ip("10.0.0.1", 80).conflicts(&ip("10.0.0.1", 80)));
        assert!(!ip("10.0.0.1", 80).conflicts(&ip("10.0.0.2", 80)));
        assert!(!any(80).conflicts(&any(81)));
        let udp = HostPort {
            protocol: "UDP".into(),
            ..any(80)
        };
        assert!(!udp.conflicts(&any(80)));
    }

    #[test]
    fn tolerations_match_taints_as_kubernetes_does() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tol =
            |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| {
                Toleration {
                    key: key.map(Into::into),
                    operator: op.map(Into::into),
                    value: value.map(Into::into),
                    effect: effect.map(Into::into),
                    ..Default::default()
                }
            };
        assert!(tolerates(
            &tol(Some("dedicated"), None, Some("gpu"), None),
            &taint
        ));
        assert!(!tolerates(
            &tol(Some("dedicated"), None, Some("cpu"), None),
            &taint
        ));
        assert!(tolerates(
            &tol(Some("dedicated"), Some("Exists"), None, Some("NoSchedule")),
            &taint
        ));
        assert!(!tolerates(
            &tol(Some("dedicated"), Some("Exists"), None, Some("NoExecute")),
            &taint
        ));
        assert!(tolerates(&tol(None, Some("Exists"), None, None), &taint));
        assert!(!tolerates(&tol(None, None, None, None), &taint));
    }

    #[test]
    fn node_zone_and_readiness_come_from_labels_and_conditions() {
        use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
        let node = Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("n".into()),
                labels: Some([("topology.kubernetes.io/zone".to_string(), "a".to_string())].into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let info = NodeInfo::new(Arc::new(node));
        assert!(info.ready);
        assert!(info.zone.is_some());
        assert_eq!(info.allowed_pods, 0);
    }
}

//! Filter predicates: whether a pod may run on a node, and if not, why (the reasons that make up
//! kube-scheduler's "0/3 nodes are available: ..." message).
//!
//! Each predicate is a plugin behind the [`Predicate`] trait; the registry in
//! [`crate::algorithm`] builds them by name for an algorithm provider. A predicate only reads the
//! pod's digest and the node's incremental aggregates, so a check costs a few comparisons.

use std::fmt;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, Taint};

use crate::nodeinfo::{NodeInfo, PodInfo, tolerates};

/// Why a node does not fit a pod, worded as kube-scheduler words it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The node is cordoned (`spec.unschedulable`).
    Unschedulable,
    /// The node's Ready condition is not True.
    NotReady,
    /// The pod is pinned to another node (`spec.nodeName`).
    NodeName,
    /// The node's labels fail the pod's nodeSelector or required node affinity.
    NodeSelector,
    /// A requested host port is in use on the node.
    HostPorts,
    /// Not enough allocatable resource left; the name is `cpu` or `memory`.
    Insufficient(&'static str),
    /// The node already holds its allocatable number of pods.
    TooManyPods,
    /// An exclusive volume of the pod is mounted by another pod there.
    DiskConflict,
    /// The node lacks (or has) the labels the policy requires it to have (or lack).
    LabelPresence,
    /// A NoSchedule or NoExecute taint the pod does not tolerate.
    UntoleratedTaint {
        /// The taint's key.
        key: String,
        /// The taint's value (empty if none).
        value: String,
    },
    /// A volume bound to one of the pod's claims is pinned to other nodes.
    VolumeNodeAffinity,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unschedulable => f.write_str("node(s) were unschedulable"),
            Reason::NotReady => f.write_str("node(s) were not ready"),
            Reason::NodeName => f.write_str("node(s) didn't match the requested node name"),
            Reason::NodeSelector => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Reason::HostPorts => {
                f.write_str("node(s) didn't have free ports for the requested pod ports")
            }
            Reason::Insufficient(resource) => write!(f, "Insufficient {resource}"),
            Reason::TooManyPods => f.write_str("Too many pods"),
            Reason::DiskConflict => f.write_str("node(s) had no available disk"),
            Reason::LabelPresence => f.write_str("node(s) didn't have the requested labels"),
            Reason::UntoleratedTaint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Reason::VolumeNodeAffinity => f.write_str("node(s) had volume node affinity conflict"),
        }
    }
}

/// A filter plugin.
pub trait Predicate: Send + Sync {
    /// The name it is registered under (e.g. `PodFitsResources`).
    fn name(&self) -> &str;
    /// Pushes onto `reasons` why `pod` cannot run on `node`; pushes nothing if it can.
    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>);
}

/// `PodFitsResources`: the pod's cpu and memory requests fit in what the node's allocatable
/// leaves after the requests of the pods already there (assumed ones included), and one more
/// pod fits under its pod count. Reports every resource that is short.
#[derive(Debug, Default)]
pub struct PodFitsResources;

impl Predicate for PodFitsResources {
    fn name(&self) -> &str {
        "PodFitsResources"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if node.pod_count() as i64 + 1 > node.allowed_pods {
            reasons.push(Reason::TooManyPods);
        }
        let want = pod.requests.request;
        if want.milli_cpu > 0
            && node.allocatable.milli_cpu < want.milli_cpu + node.requested.milli_cpu
        {
            reasons.push(Reason::Insufficient("cpu"));
        }
        if want.memory > 0 && node.allocatable.memory < want.memory + node.requested.memory {
            reasons.push(Reason::Insufficient("memory"));
        }
    }
}

/// `PodFitsHost`: a pod with `spec.nodeName` fits only that node.
#[derive(Debug, Default)]
pub struct PodFitsHost;

impl Predicate for PodFitsHost {
    fn name(&self) -> &str {
        "PodFitsHost"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if !pod.node_name.is_empty() && pod.node_name != node.name {
            reasons.push(Reason::NodeName);
        }
    }
}

/// `PodSelectorMatches`: the node's labels satisfy the pod's `nodeSelector` and its required
/// node affinity (any one term, every requirement of that term).
#[derive(Debug, Default)]
pub struct PodSelectorMatches;

impl Predicate for PodSelectorMatches {
    fn name(&self) -> &str {
        "PodSelectorMatches"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        let selector_ok = pod
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v));
        let affinity_ok = pod
            .required_affinity
            .as_ref()
            .is_none_or(|s| node_selector_matches(s, node));
        if !(selector_ok && affinity_ok) {
            reasons.push(Reason::NodeSelector);
        }
    }
}

/// Whether a node satisfies a `NodeSelector`: the terms are ORed, a term's requirements ANDed, and
/// a term with no requirements matches nothing.
pub fn node_selector_matches(selector: &NodeSelector, node: &NodeInfo) -> bool {
    selector.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            return false;
        }
        exprs
            .iter()
            .all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
            && fields.iter().all(|r| {
                r.key == "metadata.name" && requirement_matches(r, Some(node.name.as_str()))
            })
    })
}

/// One node selector requirement against the value (if present) of its key.
fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value.and_then(|v| v.parse::<i64>().ok()), values) else {
                return false;
            };
            let Ok(bound) = bound.parse::<i64>() else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// `PodFitsPorts`: none of the pod's host ports is in use on the node.
#[derive(Debug, Default)]
pub struct PodFitsPorts;

impl Predicate for PodFitsPorts {
    fn name(&self) -> &str {
        "PodFitsPorts"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        let conflict = pod
            .host_ports
            .iter()
            .any(|want| node.used_ports.iter().any(|used| used.conflicts(want)));
        // Two containers of the pod itself asking for the same port cannot both bind it either.
        let self_conflict = pod
            .host_ports
            .iter()
            .enumerate()
            .any(|(i, a)| pod.host_ports[i + 1..].iter().any(|b| a.conflicts(b)));
        if conflict || self_conflict {
            reasons.push(Reason::HostPorts);
        }
    }
}

/// `NoDiskConflict`: none of the pod's exclusive volumes (GCE PD, AWS EBS, RBD, iSCSI) is mounted
/// by a pod on the node in a conflicting way.
#[derive(Debug, Default)]
pub struct NoDiskConflict;

impl Predicate for NoDiskConflict {
    fn name(&self) -> &str {
        "NoDiskConflict"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if pod
            .volumes
            .iter()
            .any(|v| node.volumes.iter().any(|u| u.conflicts(v)))
        {
            reasons.push(Reason::DiskConflict);
        }
    }
}

/// `VolumeBinding`: the node matches the node affinity of every volume bound to the pod's claims
/// (see [`crate::volumes`]).
#[derive(Debug, Default)]
pub struct VolumeBinding;

impl Predicate for VolumeBinding {
    fn name(&self) -> &str {
        "VolumeBinding"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if !pod
            .volume_affinity
            .iter()
            .all(|sel| node_selector_matches(sel, node))
        {
            reasons.push(Reason::VolumeNodeAffinity);
        }
    }
}

/// `CheckNodeLabelPresence`: with `presence`, the node must have every one of `labels` (any
/// value); without, none of them. Configured by the policy.
#[derive(Debug, Default)]
pub struct CheckNodeLabelPresence {
    /// The label keys.
    pub labels: Vec<String>,
    /// Whether they must be present (true) or absent (false).
    pub presence: bool,
}

impl Predicate for CheckNodeLabelPresence {
    fn name(&self) -> &str {
        "CheckNodeLabelPresence"
    }

    fn check(&self, _pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if self
            .labels
            .iter()
            .any(|l| node.labels.contains_key(l) != self.presence)
        {
            reasons.push(Reason::LabelPresence);
        }
    }
}

/// `PodToleratesNodeTaints`: every NoSchedule and NoExecute taint of the node is tolerated by the
/// pod. Reports the first untolerated taint.
#[derive(Debug, Default)]
pub struct PodToleratesNodeTaints;

impl Predicate for PodToleratesNodeTaints {
    fn name(&self) -> &str {
        "PodToleratesNodeTaints"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if let Some(t) = node
            .taints
            .iter()
            .find(|t| !pod.tolerations.iter().any(|tol| tolerates(tol, t)))
        {
            reasons.push(Reason::UntoleratedTaint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
            });
        }
    }
}

/// The taint a cordoned node implicitly has; a pod tolerating it may still land there.
fn unschedulable_taint() -> &'static Taint {
    static TAINT: std::sync::OnceLock<Taint> = std::sync::OnceLock::new();
    TAINT.get_or_init(|| Taint {
        key: "node.kubernetes.io/unschedulable".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    })
}

/// `CheckNodeUnschedulable`: a cordoned node takes no new pods, unless they tolerate the
/// `node.kubernetes.io/unschedulable:NoSchedule` taint.
#[derive(Debug, Default)]
pub struct CheckNodeUnschedulable;

impl Predicate for CheckNodeUnschedulable {
    fn name(&self) -> &str {
        "CheckNodeUnschedulable"
    }

    fn check(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if node.unschedulable
            && !pod
                .tolerations
                .iter()
                .any(|t| tolerates(t, unschedulable_taint()))
        {
            reasons.push(Reason::Unschedulable);
        }
    }
}

/// `CheckNodeCondition`: only a node whose Ready condition is True takes pods.
#[derive(Debug, Default)]
pub struct CheckNodeReady;

impl Predicate for CheckNodeReady {
    fn name(&self) -> &str {
        "CheckNodeCondition"
    }

    fn check(&self, _pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) {
        if !node.ready {
            reasons.push(Reason::NotReady);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::nodeinfo::HostPort;
    use crate::resources::{PodRequests, Resource};
    use k8s_openapi::api::core::v1::{NodeSelectorTerm, Toleration};
    use std::sync::Arc;

    /// A ready node with `cpu` millicores, `mem` bytes and room for `pods` pods.
    pub(crate) fn node(name: &str, cpu: i64, mem: i64, pods: i64) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            allocatable: Resource {
                milli_cpu: cpu,
                memory: mem,
            },
            allowed_pods: pods,
            ready: true,
            ..Default::default()
        }
    }

    /// A pod requesting `cpu` millicores and `mem` bytes.
    pub(crate) fn pod(name: &str, cpu: i64, mem: i64) -> PodInfo {
        let r = Resource {
            milli_cpu: cpu,
            memory: mem,
        };
        PodInfo {
            key: format!("default/{name}"),
            namespace: "default".into(),
            name: name.into(),
            requests: PodRequests {
                request: r,
                non_zero: r,
            },
            ..Default::default()
        }
    }

    fn check(p: &dyn Predicate, pod: &PodInfo, node: &NodeInfo) -> Vec<Reason> {
        let mut reasons = Vec::new();
        p.check(pod, node, &mut reasons);
        reasons
    }

    #[test]
    fn fits_resources_counts_pods_already_on_the_node() {
        // 1000m / 1 GiB node with a 600m / 512 MiB pod on it: 400m and 512 MiB left.
        let mut n = node("n", 1000, 1 << 30, 3);
        n.add_pod(Arc::new(pod("a", 600, 512 << 20)));
        assert!(check(&PodFitsResources, &pod("b", 400, 512 << 20), &n).is_empty());
        assert_eq!(
            check(&PodFitsResources, &pod("b", 401, 512 << 20), &n),
            vec![Reason::Insufficient("cpu")]
        );
        assert_eq!(
            check(&PodFitsResources, &pod("b", 500, (512 << 20) + 1), &n),
            vec![Reason::Insufficient("cpu"), Reason::Insufficient("memory")]
        );
        // A pod requesting nothing always fits resources, but not past the pod count.
        n.add_pod(Arc::new(pod("c", 0, 0)));
        assert!(check(&PodFitsResources, &pod("d", 0, 0), &n).is_empty());
        n.add_pod(Arc::new(pod("d", 0, 0)));
        assert_eq!(
            check(&PodFitsResources, &pod("e", 0, 0), &n),
            vec![Reason::TooManyPods]
        );
    }

    #[test]
    fn fits_host_only_the_named_node() {
        let mut p = pod("p", 0, 0);
        assert!(check(&PodFitsHost, &p, &node("n1", 0, 0, 1)).is_empty());
        p.node_name = "n1".into();
        assert!(check(&PodFitsHost, &p, &node("n1", 0, 0, 1)).is_empty());
        assert_eq!(
            check(&PodFitsHost, &p, &node("n2", 0, 0, 1)),
            vec![Reason::NodeName]
        );
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn selector_matches_node_selector_and_required_affinity() {
        let mut n = node("n1", 0, 0, 1);
        n.labels = [("disk", "ssd"), ("gen", "5")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut p = pod("p", 0, 0);
        p.node_selector = [("disk".to_string(), "ssd".to_string())].into();
        assert!(check(&PodSelectorMatches, &p, &n).is_empty());
        p.node_selector = [("disk".to_string(), "hdd".to_string())].into();
        assert_eq!(
            check(&PodSelectorMatches, &p, &n),
            vec![Reason::NodeSelector]
        );
        p.node_selector.clear();

        let term = |exprs: Vec<NodeSelectorRequirement>| NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        };
        let with = |terms: Vec<NodeSelectorTerm>| {
            let mut p = pod("p", 0, 0);
            p.required_affinity = Some(NodeSelector {
                node_selector_terms: terms,
            });
            p
        };
        let fits = |p: &PodInfo| check(&PodSelectorMatches, p, &n).is_empty();
        assert!(fits(&with(vec![term(vec![req(
            "disk",
            "In",
            &["hdd", "ssd"]
        )])])));
        assert!(!fits(&with(vec![term(vec![req(
            "disk",
            "NotIn",
            &["ssd"]
        )])])));
        assert!(fits(&with(vec![term(vec![req("zone", "NotIn", &["a"])])])));
        assert!(fits(&with(vec![term(vec![req("gen", "Gt", &["4"])])])));
        assert!(!fits(&with(vec![term(vec![req("gen", "Lt", &["4"])])])));
        assert!(!fits(&with(vec![term(vec![req("disk", "Gt", &["4"])])])));
        assert!(fits(&with(vec![term(vec![req("disk", "Exists", &[])])])));
        assert!(fits(&with(vec![term(vec![req(
            "zone",
            "DoesNotExist",
            &[]
        )])])));
        // Terms are ORed: one failing term and one matching term fit.
        assert!(fits(&with(vec![
            term(vec![req("disk", "In", &["hdd"])]),
            term(vec![req("disk", "In", &["ssd"])]),
        ])));
        // Requirements within a term are ANDed.
        assert!(!fits(&with(vec![term(vec![
            req("disk", "In", &["ssd"]),
            req("gen", "In", &["4"]),
        ])])));
        // An empty term matches nothing; matchFields selects by node name.
        assert!(!fits(&with(vec![term(vec![])])));
        let by_name = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
        };
        assert!(fits(&with(vec![by_name])));
    }

    #[test]
    fn ports_conflict_with_pods_on_the_node() {
        let port = |p| HostPort {
            ip: "0.0.0.0".into(),
            protocol: "TCP".into(),
            port: p,
        };
        let mut holder = pod("a", 0, 0);
        holder.host_ports = vec![port(8080)];
        let mut n = node("n", 0, 0, 10);
        n.add_pod(Arc::new(holder));
        let mut p = pod("b", 0, 0);
        p.host_ports = vec![port(8081)];
        assert!(check(&PodFitsPorts, &p, &n).is_empty());
        p.host_ports = vec![port(8081), port(8080)];
        assert_eq!(check(&PodFitsPorts, &p, &n), vec![Reason::HostPorts]);
        n.remove_pod("default/a");
        assert!(check(&PodFitsPorts, &p, &n).is_empty());
    }

    #[test]
    fn disk_conflicts_follow_volume_kind_rules() {
        use crate::nodeinfo::ExclusiveVolume as V;
        let pd = |ro| V::GcePd {
            name: "disk-1".into(),
            read_only: ro,
        };
        let mut holder = pod("a", 0, 0);
        holder.volumes = vec![pd(true), V::AwsEbs { id: "vol-1".into() }];
        let mut n = node("n", 0, 0, 10);
        n.add_pod(Arc::new(holder));
        let with = |v: V| {
            let mut p = pod("b", 0, 0);
            p.volumes = vec![v];
            p
        };
        // Read-only GCE PD mounts may share; a read-write one may not.
        assert!(check(&NoDiskConflict, &with(pd(true)), &n).is_empty());
        assert_eq!(
            check(&NoDiskConflict, &with(pd(false)), &n),
            vec![Reason::DiskConflict]
        );
        assert_eq!(
            check(&NoDiskConflict, &with(V::AwsEbs { id: "vol-1".into() }), &n),
            vec![Reason::DiskConflict]
        );
        assert!(check(&NoDiskConflict, &with(V::AwsEbs { id: "vol-2".into() }), &n).is_empty());
        let rbd = |mons: &[&str], image: &str| V::Rbd {
            monitors: mons.iter().map(|m| m.to_string()).collect(),
            pool: "rbd".into(),
            image: image.into(),
        };
        assert!(rbd(&["m1", "m2"], "img").conflicts(&rbd(&["m2"], "img")));
        assert!(!rbd(&["m1"], "img").conflicts(&rbd(&["m2"], "img")));
        assert!(!rbd(&["m1"], "img").conflicts(&rbd(&["m1"], "other")));
    }

    #[test]
    fn label_presence_requires_or_forbids_labels() {
        let mut n = node("n", 0, 0, 1);
        n.labels = [("region".to_string(), "r1".to_string())].into();
        let present = CheckNodeLabelPresence {
            labels: vec!["region".into()],
            presence: true,
        };
        let absent = CheckNodeLabelPresence {
            labels: vec!["region".into()],
            presence: false,
        };
        let p = pod("p", 0, 0);
        assert!(check(&present, &p, &n).is_empty());
        assert_eq!(check(&absent, &p, &n), vec![Reason::LabelPresence]);
        n.labels.clear();
        assert_eq!(check(&present, &p, &n), vec![Reason::LabelPresence]);
        assert!(check(&absent, &p, &n).is_empty());
    }

    #[test]
    fn taints_need_tolerations_for_noschedule_and_noexecute() {
        use k8s_openapi::api::core::v1::Node;
        let node_obj = Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("n".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: Some(vec![
                    Taint {
                        key: "soft".into(),
                        effect: "PreferNoSchedule".into(),
                        ..Default::default()
                    },
                    Taint {
                        key: "dedicated".into(),
                        value: Some("gpu".into()),
                        effect: "NoSchedule".into(),
                        ..Default::default()
                    },
                    Taint {
                        key: "evict".into(),
                        effect: "NoExecute".into(),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let n = NodeInfo::new(Arc::new(node_obj));
        let mut p = pod("p", 0, 0);
        assert_eq!(
            check(&PodToleratesNodeTaints, &p, &n),
            vec![Reason::UntoleratedTaint {
                key: "dedicated".into(),
                value: "gpu".into()
            }]
        );
        assert_eq!(
            check(&PodToleratesNodeTaints, &p, &n)[0].to_string(),
            "node(s) had untolerated taint {dedicated: gpu}"
        );
        p.tolerations = vec![Toleration {
            key: Some("dedicated".into()),
            value: Some("gpu".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }];
        assert_eq!(
            check(&PodToleratesNodeTaints, &p, &n),
            vec![Reason::UntoleratedTaint {
                key: "evict".into(),
                value: String::new()
            }]
        );
        p.tolerations.push(Toleration {
            key: Some("evict".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        });
        // PreferNoSchedule does not filter.
        assert!(check(&PodToleratesNodeTaints, &p, &n).is_empty());
    }

    #[test]
    fn cordoned_and_not_ready_nodes_take_no_pods() {
        let mut n = node("n", 0, 0, 1);
        let mut p = pod("p", 0, 0);
        assert!(check(&CheckNodeUnschedulable, &p, &n).is_empty());
        n.unschedulable = true;
        assert_eq!(
            check(&CheckNodeUnschedulable, &p, &n),
            vec![Reason::Unschedulable]
        );
        p.tolerations = vec![Toleration {
            key: Some("node.kubernetes.io/unschedulable".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        }];
        assert!(check(&CheckNodeUnschedulable, &p, &n).is_empty());

        assert!(check(&CheckNodeReady, &p, &n).is_empty());
        n.ready = false;
        assert_eq!(check(&CheckNodeReady, &p, &n), vec![Reason::NotReady]);
    }
}

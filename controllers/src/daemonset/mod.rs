//! The DaemonSet controller's pure part: which nodes should run a daemon pod (nodeSelector and
//! taints against the pod's tolerations plus the ones every daemon gets), which pods to create
//! and delete, the rolling update by `controller-revision-hash`, and the status.
//!
//! Daemon pods are bound to their node by `spec.nodeName` when created, so they run even on
//! nodes the scheduler would skip (cordoned or not ready), as DaemonSets always have.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};

use crate::deployment::scaled_value;
use crate::pods;

/// The label holding the template hash of a daemon pod.
pub const REVISION_HASH: &str = "controller-revision-hash";

/// Tolerations every daemon pod gets, so daemons survive node trouble.
pub fn default_tolerations() -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Toleration::default()
    };
    vec![
        t("node.kubernetes.io/not-ready", "NoExecute"),
        t("node.kubernetes.io/unreachable", "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
}

fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect_ok = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key_ok = t
        .key
        .as_deref()
        .is_none_or(|k| k.is_empty() || k == taint.key);
    let value_ok = match t.operator.as_deref() {
        Some("Exists") => true,
        _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
    };
    effect_ok && key_ok && value_ok
}

/// The hash naming a revision of `template`. A set whose revision name clashed with another
/// template's (`status.collisionCount` > 0) mixes the count in, as kube-controller-manager does, so
/// the next name is a different one; without a collision the hash is the template's alone.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(template).expect("a pod template serializes"));
    if let Some(count) = collision_count.filter(|c| *c > 0) {
        hasher.update(count.to_be_bytes());
    }
    hex::encode(&hasher.finalize()[..5])
}

/// The hash of the DaemonSet's current template (its pods' `controller-revision-hash`).
pub fn current_hash(ds: &DaemonSet) -> String {
    template_hash(
        &ds.spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default(),
        ds.status.as_ref().and_then(|s| s.collision_count),
    )
}

/// Whether a daemon pod of `ds` belongs on `node`: the node is not being deleted, its labels
/// match the nodeSelector, and every NoSchedule/NoExecute taint is tolerated.
pub fn should_run(ds: &DaemonSet, node: &Node) -> bool {
    if pods::is_deleting(&node.metadata) {
        return false;
    }
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector = spec
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default();
    if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return false;
    }
    let mut tolerations = spec.and_then(|s| s.tolerations.clone()).unwrap_or_default();
    tolerations.extend(default_tolerations());
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

/// A new daemon pod of `ds` for `node`.
pub fn pod_for(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let spec = ds.spec.clone().unwrap_or_default();
    let mut template = spec.template;
    let tm = template.metadata.get_or_insert_with(ObjectMeta::default);
    tm.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(REVISION_HASH.into(), hash.to_string());
    let ps = template.spec.get_or_insert_with(Default::default);
    let mut tolerations = ps.tolerations.clone().unwrap_or_default();
    for t in default_tolerations() {
        if !tolerations.contains(&t) {
            tolerations.push(t);
        }
    }
    ps.tolerations = Some(tolerations);
    ps.node_name = Some(node.to_string());
    let owner = pods::controller_ref("apps/v1", "DaemonSet", &ds.metadata);
    pods::pod_from_template(
        &template,
        ds.metadata.namespace.as_deref().unwrap_or_default(),
        ds.metadata.name.as_deref().unwrap_or_default(),
        owner,
    )
}

/// What one sync does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Nodes that get a new pod.
    pub create_on: Vec<String>,
    /// Names of pods to delete.
    pub delete: Vec<String>,
    /// The status to report.
    pub status: DaemonSetStatus,
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn hash_of(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()?
        .get(REVISION_HASH)
        .map(String::as_str)
}

/// One step for `ds` given every node and the pods it owns, at `now`.
pub fn plan(ds: &DaemonSet, nodes: &[&Node], owned: &[&Pod], now: Timestamp) -> Plan {
    let spec = ds.spec.clone().unwrap_or_default();
    let hash = current_hash(ds);
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let mut by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    let mut plan = Plan::default();
    for p in owned {
        if pods::is_deleting(&p.metadata) {
            continue;
        }
        match node_of(p) {
            Some(n) => by_node.entry(n).or_default().push(p),
            None => plan.delete.extend(p.metadata.name.clone()),
        }
    }
    let mut desired = 0;
    let mut scheduled = 0;
    let mut misscheduled = 0;
    let mut ready = 0;
    let mut available = 0;
    let mut updated = 0;
    // Candidates for the rolling update: (node, old pod), and how many are unavailable now.
    let mut old: Vec<&Pod> = Vec::new();
    let mut unavailable = 0;
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let mut here: Vec<&Pod> = by_node.remove(name).unwrap_or_default();
        if should_run(ds, node) {
            desired += 1;
            // Failed daemons are replaced.
            for p in here.iter().filter(|p| pods::is_terminal(p)) {
                plan.delete.extend(p.metadata.name.clone());
            }
            here.retain(|p| !pods::is_terminal(p));
            if here.is_empty() {
                plan.create_on.push(name.to_string());
                unavailable += 1;
                continue;
            }
            scheduled += 1;
            // Keep the oldest, drop duplicates.
            here.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
            for extra in &here[1..] {
                plan.delete.extend(extra.metadata.name.clone());
            }
            let p = here[0];
            if pods::is_ready(p) {
                ready += 1;
            }
            let is_available = pods::is_available(p, min_ready, now);
            if is_available {
                available += 1;
            } else {
                unavailable += 1;
            }
            if hash_of(p) == Some(hash.as_str()) {
                updated += 1;
            } else {
                old.push(p);
            }
        } else {
            for p in here.iter().filter(|p| !pods::is_terminal(p)) {
                misscheduled += 1;
                plan.delete.extend(p.metadata.name.clone());
            }
        }
    }
    // Pods on nodes that are gone.
    for (_, ps) in by_node {
        plan.delete
            .extend(ps.iter().filter_map(|p| p.metadata.name.clone()));
    }
    // Rolling update: old pods that are unavailable go at once; available ones while the budget
    // of unavailable daemons allows.
    let rolling = spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    if rolling {
        let max_unavailable = spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.clone())
            .unwrap_or(IntOrString::Int(1));
        let budget = scaled_value(&max_unavailable, desired, true)
            .unwrap_or(1)
            .max(1);
        let mut budget_left = budget - unavailable;
        for p in old {
            if !pods::is_available(p, min_ready, now) {
                plan.delete.extend(p.metadata.name.clone());
            } else if budget_left > 0 {
                plan.delete.extend(p.metadata.name.clone());
                budget_left -= 1;
            }
        }
    }
    plan.status = DaemonSetStatus {
        current_number_scheduled: scheduled,
        desired_number_scheduled: desired,
        number_misscheduled: misscheduled,
        number_ready: ready,
        number_available: Some(available),
        number_unavailable: Some((desired - available).max(0)),
        updated_number_scheduled: Some(updated),
        observed_generation: ds.metadata.generation,
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::{at, pod, running};
    use k8s_openapi::api::apps::v1::{
        DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet,
    };
    use k8s_openapi::api::core::v1::{Container, NodeSpec, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    fn ds(image: &str) -> DaemonSet {
        let labels: BTreeMap<String, String> = [("app".to_string(), "agent".to_string())].into();
        DaemonSet {
            metadata: ObjectMeta {
                name: Some("agent".into()),
                namespace: Some("ns".into()),
                uid: Some("ds-uid".into()),
                generation: Some(2),
                ..ObjectMeta::default()
            },
            spec: Some(DaemonSetSpec {
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some(image.into()),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    }),
                },
                ..DaemonSetSpec::default()
            }),
            status: None,
        }
    }

    fn node(name: &str, labels: &[(&str, &str)], taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn daemon(d: &DaemonSet, node: &str, n: i64, ready: bool) -> Pod {
        let mut p = running(
            pod(&format!("agent-{node}-{n}"), &[("app", "agent")], n),
            node,
            "127.0.0.2",
            ready.then_some(0),
        );
        let hash = current_hash(d);
        p.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(REVISION_HASH.into(), hash);
        p.metadata.owner_references = Some(vec![pods::controller_ref(
            "apps/v1",
            "DaemonSet",
            &d.metadata,
        )]);
        p
    }

    #[test]
    fn eligible_nodes_follow_selector_and_taints() {
        let mut d = ds("a");
        let plain = node("n1", &[], vec![]);
        let tainted = node(
            "n2",
            &[],
            vec![Taint {
                key: "dedicated".into(),
                value: Some("db".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }],
        );
        let unreachable = node(
            "n3",
            &[],
            vec![Taint {
                key: "node.kubernetes.io/unreachable".into(),
                effect: "NoExecute".into(),
                ..Taint::default()
            }],
        );
        assert!(should_run(&d, &plain));
        assert!(!should_run(&d, &tainted));
        assert!(
            should_run(&d, &unreachable),
            "daemons tolerate node trouble"
        );
        let ps = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        ps.tolerations = Some(vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }]);
        ps.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
        assert!(!should_run(&d, &tainted), "selector not matched");
        let both = node(
            "n4",
            &[("disk", "ssd")],
            tainted.spec.clone().unwrap().taints.unwrap(),
        );
        assert!(should_run(&d, &both));
    }

    #[test]
    fn one_pod_per_eligible_node() {
        let d = ds("a");
        let (n1, n2) = (node("n1", &[], vec![]), node("n2", &[], vec![]));
        let p = plan(&d, &[&n1, &n2], &[], at(0));
        assert_eq!(p.create_on, ["n1", "n2"]);
        assert_eq!(p.status.desired_number_scheduled, 2);
        let pod = pod_for(&d, "n1", "h");
        assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[REVISION_HASH], "h");

        // A duplicate goes, a pod on a vanished node goes, the rest stays.
        let a = daemon(&d, "n1", 1, true);
        let dup = daemon(&d, "n1", 2, true);
        let b = daemon(&d, "n2", 1, true);
        let gone = daemon(&d, "n9", 1, true);
        let p = plan(&d, &[&n1, &n2], &[&a, &dup, &b, &gone], at(100));
        assert!(p.create_on.is_empty());
        let mut deleted = p.delete.clone();
        deleted.sort();
        assert_eq!(deleted, ["agent-n1-2", "agent-n9-1"]);
        assert_eq!(p.status.number_ready, 2);
        assert_eq!(p.status.updated_number_scheduled, Some(2));
        assert_eq!(p.status.observed_generation, Some(2));
    }

    #[test]
    fn node_leaving_eligibility_loses_its_pod() {
        let d = ds("a");
        let mut n1 = node("n1", &[], vec![]);
        let a = daemon(&d, "n1", 1, true);
        n1.metadata.deletion_timestamp = Some(Time(at(5)));
        let p = plan(&d, &[&n1], &[&a], at(10));
        assert_eq!(p.delete, ["agent-n1-1"]);
        assert_eq!(p.status.number_misscheduled, 1);
    }

    #[test]
    fn rolling_update_respects_max_unavailable() {
        let old = ds("a");
        let nodes: Vec<Node> = (1..=4)
            .map(|i| node(&format!("n{i}"), &[], vec![]))
            .collect();
        let refs: Vec<&Node> = nodes.iter().collect();
        let pods: Vec<Pod> = (1..=4)
            .map(|i| daemon(&old, &format!("n{i}"), 1, true))
            .collect();
        let pod_refs: Vec<&Pod> = pods.iter().collect();
        let mut new = ds("b");
        new.spec.as_mut().unwrap().update_strategy = Some(DaemonSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDaemonSet {
                max_unavailable: Some(IntOrString::Int(2)),
                max_surge: None,
            }),
        });
        let p = plan(&new, &refs, &pod_refs, at(100));
        assert_eq!(p.delete.len(), 2, "{:?}", p.delete);
        assert_eq!(p.status.updated_number_scheduled, Some(0));
        // With one node already without its pod, only one more goes.
        let p = plan(&new, &refs, &pod_refs[1..], at(100));
        assert_eq!(p.create_on, ["n1"]);
        assert_eq!(p.delete.len(), 1);
        // OnDelete never deletes.
        new.spec.as_mut().unwrap().update_strategy = Some(DaemonSetUpdateStrategy {
            type_: Some("OnDelete".into()),
            rolling_update: None,
        });
        assert!(plan(&new, &refs, &pod_refs, at(100)).delete.is_empty());
    }
}

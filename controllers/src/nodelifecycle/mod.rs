//! The node lifecycle controller's pure part: a node whose kubelet stopped renewing its Lease
//! (and posting status) for the grace period gets its conditions set to `Unknown`; the Ready
//! condition decides the `NoExecute` taints (`unreachable` for Unknown, `not-ready` for False,
//! none for True, so recovery removes them); pods on a node that is not ready are marked not
//! ready, and pods on a tainted node are evicted once their toleration of the taint runs out.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodCondition, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The taint of a node whose Ready condition is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a node whose Ready condition is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The conditions the kubelet owns, set to Unknown when it goes silent.
const KUBELET_CONDITIONS: &[&str] = &["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// The node's condition of `type_`.
pub fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The status of the node's Ready condition (`None` when it has none).
pub fn ready_status(node: &Node) -> Option<&str> {
    condition(node, "Ready").map(|c| c.status.as_str())
}

/// The last sign of life: the later of the Lease's renew time and the Ready condition's
/// heartbeat; the node's creation when there is neither.
pub fn last_heartbeat(node: &Node, lease: Option<&Lease>) -> Option<Timestamp> {
    let renew = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0);
    let beat = condition(node, "Ready")
        .and_then(|c| c.last_heartbeat_time.as_ref())
        .map(|t| t.0);
    renew
        .max(beat)
        .or_else(|| node.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// When the node counts as silent: the grace period after its last heartbeat, or after
/// `watching_since` (when this controller started watching) if that is later. A controller that
/// has just started (a restart after downtime, a replayed data dir resumed) has not had a chance
/// to hear from any node: judged by heartbeats stamped before it was watching, every node would
/// be marked Unknown and tainted at once, before its kubelet could be heard. So each node gets a
/// full grace period from the start, as Kubernetes' controller counts from when it first
/// observes a node.
pub fn silent_at(
    node: &Node,
    lease: Option<&Lease>,
    grace: Duration,
    watching_since: Timestamp,
) -> Option<Timestamp> {
    last_heartbeat(node, lease)?
        .max(watching_since)
        .checked_add(SignedDuration::try_from(grace).ok()?)
        .ok()
}

/// The node's new conditions when it has gone silent at `now` (see [`silent_at`]) and they are
/// not all Unknown yet; `None` when nothing changes.
pub fn silent_conditions(
    node: &Node,
    lease: Option<&Lease>,
    grace: Duration,
    watching_since: Timestamp,
    now: Timestamp,
) -> Option<Vec<NodeCondition>> {
    let deadline = silent_at(node, lease, grace, watching_since)?;
    if now < deadline {
        return None;
    }
    let mut conds = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut changed = false;
    for type_ in KUBELET_CONDITIONS {
        match conds.iter_mut().find(|c| c.type_ == *type_) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conds.push(NodeCondition {
                    type_: type_.to_string(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conds)
}

/// The node's taints as its Ready condition asks for them (the `NoExecute` unreachable or
/// not-ready taint, keeping the time an existing one was added); `None` when unchanged.
pub fn desired_taints(node: &Node, now: Timestamp) -> Option<Vec<Taint>> {
    let existing = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let want = match ready_status(node) {
        Some("Unknown") => Some(UNREACHABLE),
        Some("False") => Some(NOT_READY),
        _ => None,
    };
    let mut taints: Vec<Taint> = existing
        .iter()
        .filter(|t| {
            !((t.key == UNREACHABLE || t.key == NOT_READY) && t.effect == "NoExecute")
                || Some(t.key.as_str()) == want
        })
        .cloned()
        .collect();
    if let Some(key) = want
        && !taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoExecute")
    {
        taints.push(Taint {
            key: key.into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: Some(Time(now)),
        });
    }
    (taints != existing).then_some(taints)
}

/// The pod's conditions with Ready set to False (a pod on a node that is not ready); `None` when
/// it is not ready already.
pub fn pod_not_ready(pod: &Pod, now: Timestamp) -> Option<Vec<PodCondition>> {
    let mut conds = pod.status.as_ref()?.conditions.clone()?;
    let ready = conds
        .iter_mut()
        .find(|c| c.type_ == "Ready" && c.status != "False")?;
    ready.status = "False".into();
    ready.last_transition_time = Some(Time(now));
    Some(conds)
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
    // An empty key with Exists tolerates everything.
    effect_ok && key_ok && value_ok
}

/// When to evict `pod` from a node with the `NoExecute` `taints`: `None` never (every such taint
/// tolerated forever), else the instant (the earliest toleration expiry; at once when a taint is
/// not tolerated at all).
pub fn eviction_at(pod: &Pod, taints: &[Taint], now: Timestamp) -> Option<Timestamp> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let mut at: Option<Timestamp> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> =
            tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Some(now);
        }
        if matching.iter().any(|t| t.toleration_seconds.is_none()) {
            continue;
        }
        let secs = matching
            .iter()
            .filter_map(|t| t.toleration_seconds)
            .min()
            .unwrap_or(0)
            .max(0);
        let since = taint.time_added.as_ref().map(|t| t.0).unwrap_or(now);
        let when = since
            .checked_add(SignedDuration::from_secs(secs))
            .unwrap_or(now);
        at = Some(at.map_or(when, |a| a.min(when)));
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::{at, pod, running};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn node(ready: &str, heartbeat: i64) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                creation_timestamp: Some(Time(at(0))),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_heartbeat_time: Some(Time(at(heartbeat))),
                    last_transition_time: Some(Time(at(0))),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    fn lease(renew: i64) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(at(renew))),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    const GRACE: Duration = Duration::from_secs(40);

    #[test]
    fn a_renewed_lease_keeps_the_node_alive() {
        let n = node("True", 0);
        assert_eq!(
            silent_conditions(&n, Some(&lease(30)), GRACE, at(0), at(60)),
            None
        );
        assert_eq!(silent_at(&n, Some(&lease(30)), GRACE, at(0)), Some(at(70)));
        let conds = silent_conditions(&n, Some(&lease(30)), GRACE, at(0), at(70)).unwrap();
        let ready = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "Unknown");
        assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(conds.len(), KUBELET_CONDITIONS.len());
        // Already Unknown everywhere: nothing more to write.
        let mut gone = n.clone();
        gone.status.as_mut().unwrap().conditions = Some(conds);
        assert_eq!(silent_conditions(&gone, None, GRACE, at(0), at(500)), None);
    }

    /// Regression: `skiff server` resumed on a data dir replayed from a minute before marked its
    /// own node Unknown and tainted it unreachable before its kubelet had been heard from.
    #[test]
    fn a_controller_that_starts_gives_every_node_a_full_grace_period() {
        let n = node("True", 0);
        // Watching since 100, long after the last heartbeat (30): silent at 140, not before.
        assert_eq!(
            silent_at(&n, Some(&lease(30)), GRACE, at(100)),
            Some(at(140))
        );
        assert_eq!(
            silent_conditions(&n, Some(&lease(30)), GRACE, at(100), at(101)),
            None
        );
        assert!(silent_conditions(&n, Some(&lease(30)), GRACE, at(100), at(140)).is_some());
        // A heartbeat heard after the start counts from itself.
        assert_eq!(
            silent_at(&n, Some(&lease(120)), GRACE, at(100)),
            Some(at(160))
        );
    }

    #[test]
    fn taints_follow_the_ready_condition() {
        let mut n = node("Unknown", 0);
        let t = desired_taints(&n, at(5)).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].key.as_str(), t[0].effect.as_str()),
            (UNREACHABLE, "NoExecute")
        );
        n.spec.as_mut().unwrap().taints = Some(t.clone());
        assert_eq!(desired_taints(&n, at(9)), None, "time added is kept");
        // Not ready: the other taint.
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        let t2 = desired_taints(&n, at(10)).unwrap();
        assert_eq!(t2.len(), 1);
        assert_eq!(t2[0].key, NOT_READY);
        // Recovery removes ours and keeps the user's.
        let user = Taint {
            key: "example.com/x".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        n.spec.as_mut().unwrap().taints = Some(vec![t2[0].clone(), user.clone()]);
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
        assert_eq!(desired_taints(&n, at(11)), Some(vec![user]));
    }

    #[test]
    fn pods_are_marked_not_ready_once() {
        let p = running(pod("a", &[], 0), "n1", "127.0.0.2", Some(1));
        let conds = pod_not_ready(&p, at(50)).unwrap();
        assert_eq!(conds[0].status, "False");
        let mut q = p.clone();
        q.status.as_mut().unwrap().conditions = Some(conds);
        assert_eq!(pod_not_ready(&q, at(60)), None);
    }

    #[test]
    fn eviction_follows_tolerations() {
        let taint = Taint {
            key: UNREACHABLE.into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: Some(Time(at(100))),
        };
        let mut p = pod("a", &[], 0);
        assert_eq!(
            eviction_at(&p, std::slice::from_ref(&taint), at(101)),
            Some(at(101)),
            "untolerated: at once"
        );
        let tol = |secs: Option<i64>| Toleration {
            key: Some(UNREACHABLE.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: secs,
            value: None,
        };
        p.spec.as_mut().unwrap().tolerations = Some(vec![tol(Some(300))]);
        assert_eq!(
            eviction_at(&p, std::slice::from_ref(&taint), at(101)),
            Some(at(400))
        );
        p.spec.as_mut().unwrap().tolerations = Some(vec![tol(Some(300)), tol(Some(2))]);
        assert_eq!(
            eviction_at(&p, std::slice::from_ref(&taint), at(101)),
            Some(at(102))
        );
        p.spec.as_mut().unwrap().tolerations = Some(vec![tol(None)]);
        assert_eq!(
            eviction_at(&p, std::slice::from_ref(&taint), at(101)),
            None,
            "tolerated forever"
        );
        // A toleration of another key does not help.
        p.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
            key: Some(NOT_READY.into()),
            operator: Some("Exists".into()),
            ..Toleration::default()
        }]);
        assert_eq!(
            eviction_at(&p, std::slice::from_ref(&taint), at(101)),
            Some(at(101))
        );
        // NoSchedule taints never evict.
        let soft = Taint {
            effect: "NoSchedule".into(),
            ..taint
        };
        assert_eq!(eviction_at(&pod("b", &[], 0), &[soft], at(101)), None);
    }
}

//! Pod and object-metadata helpers shared by the controllers (readiness, availability, controller
//! references, the deletion ranking of kube-controller-manager's `ActivePods`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

/// The controller reference of an object: the owner reference with `controller: true`.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// A controller owner reference to `owner` (what a controller puts on what it creates or adopts).
pub fn controller_ref(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: owner.name.clone().unwrap_or_default(),
        uid: owner.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether the object has been asked to go away.
pub fn is_deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// The pod's phase, `Pending` when unset.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Succeeded or Failed: the pod will never run again.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// A pod a workload controller counts: neither terminal nor being deleted.
pub fn is_active(pod: &Pod) -> bool {
    !is_terminal(pod) && !is_deleting(&pod.metadata)
}

/// The pod's condition of `type_`.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// Ready for at least `min_ready_seconds` at `now` (the definition of an available pod).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(ready) = condition(pod, "Ready").filter(|c| c.status == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    match &ready.last_transition_time {
        Some(Time(since)) => since.as_second() + i64::from(min_ready_seconds) <= now.as_second(),
        None => false,
    }
}

/// When a ready-but-not-yet-available pod becomes available, so a controller can requeue then.
pub fn available_at(pod: &Pod, min_ready_seconds: i32) -> Option<Timestamp> {
    let ready = condition(pod, "Ready").filter(|c| c.status == "True")?;
    let since = ready.last_transition_time.as_ref()?.0;
    since
        .checked_add(jiff::SignedDuration::from_secs(i64::from(
            min_ready_seconds,
        )))
        .ok()
}

fn creation(meta: &ObjectMeta) -> Option<Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0)
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    condition(pod, "Ready")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Orders pods so that the ones to delete first come first: unscheduled before scheduled, Pending
/// before Unknown before Running, not ready before ready, ready for a shorter time first, more
/// restarts first, newer first (kube-controller-manager's `ActivePods` ranking).
pub fn deletion_order(a: &Pod, b: &Pod) -> Ordering {
    let scheduled = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    let phase_rank = |p: &Pod| match phase(p) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    scheduled(a)
        .cmp(&scheduled(b))
        .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
        .then_with(|| is_ready(a).cmp(&is_ready(b)))
        // Ready more recently (a later timestamp) goes first.
        .then_with(|| match (ready_since(a), ready_since(b)) {
            (Some(x), Some(y)) => y.cmp(&x),
            _ => Ordering::Equal,
        })
        .then_with(|| restarts(b).cmp(&restarts(a)))
        // Newer (later creation) goes first; an unknown creation time counts as newest.
        .then_with(|| match (creation(&a.metadata), creation(&b.metadata)) {
            (Some(x), Some(y)) => y.cmp(&x),
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// How a controller relates to a pod (or any object) it might own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Ours and matching the selector.
    Owned,
    /// An orphan that matches: take it with a controller reference.
    Adopt,
    /// Ours but no longer matching: drop our controller reference.
    Release,
    /// Someone else's, or neither ours nor matching.
    Ignore,
}

/// Decides the claim of the controller with `owner_uid` (being deleted or not) on an object.
///
/// The controller never adopts while it is itself being deleted, and never adopts objects that are
/// being deleted (client-go's `ControllerRefManager`).
pub fn claim(owner_uid: &str, owner_deleting: bool, matches: bool, meta: &ObjectMeta) -> Claim {
    match controller_of(meta) {
        Some(r) if r.uid == owner_uid => {
            if matches {
                Claim::Owned
            } else if owner_deleting {
                // Releasing would race the garbage collector; leave it be.
                Claim::Ignore
            } else {
                Claim::Release
            }
        }
        Some(_) => Claim::Ignore,
        None if matches && !owner_deleting && !is_deleting(meta) => Claim::Adopt,
        None => Claim::Ignore,
    }
}

/// The pod index by controller: the UID of a pod's controller, or `orphan/<namespace>` for a pod
/// without one (UIDs hold no `/`). A controller's sync looks at its own pods and the orphans it
/// might adopt instead of every pod of the namespace: one event's sync costs O(its pods), not
/// O(the namespace's).
pub const BY_CONTROLLER: &str = "controller-uid";

/// The [`BY_CONTROLLER`] index function.
pub fn controller_index(pod: &Pod) -> Vec<String> {
    vec![match controller_of(&pod.metadata) {
        Some(r) => r.uid.clone(),
        None => orphans_of(pod.metadata.namespace.as_deref().unwrap_or_default()),
    }]
}

/// The [`BY_CONTROLLER`] index value of a namespace's pods without a controller.
pub fn orphans_of(namespace: &str) -> String {
    format!("orphan/{namespace}")
}

/// An object's labels, borrowed (empty when unset): controllers match selectors against many
/// objects on each sync (a DaemonSet against every pod of its namespace), so the labels are not
/// copied for it.
pub fn labels(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    meta.labels.as_ref().unwrap_or(&NONE)
}

/// The labels of a template (empty when unset).
pub fn template_labels(t: &PodTemplateSpec) -> BTreeMap<String, String> {
    t.metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

/// A new pod from a controller's template: its labels, annotations and spec, a generated name
/// after `prefix`, and a controller reference to the owner.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    prefix: &str,
    owner: OwnerReference,
) -> Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            namespace: Some(namespace.to_string()),
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Parses an RFC 3339 timestamp into a `Time` (for tests and fixtures).
pub fn time(s: &str) -> Time {
    Time(s.parse().expect("an RFC 3339 timestamp"))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Pod fixtures.
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    /// A pod in `ns` with `labels`, created at `created` (seconds after an epoch).
    pub fn pod(name: &str, labels: &[(&str, &str)], created: i64) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                creation_timestamp: Some(Time(
                    Timestamp::from_second(1_700_000_000 + created).unwrap(),
                )),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..PodStatus::default()
            }),
        }
    }

    /// The pod running on `node` with IP `ip`, ready since `ready_at` seconds after the epoch (or
    /// not ready when `None`).
    pub fn running(mut p: Pod, node: &str, ip: &str, ready_at: Option<i64>) -> Pod {
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        let st = p.status.as_mut().unwrap();
        st.phase = Some("Running".into());
        st.pod_ip = Some(ip.into());
        st.conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready_at.is_some() { "True" } else { "False" }.into(),
            last_transition_time: Some(Time(
                Timestamp::from_second(1_700_000_000 + ready_at.unwrap_or(0)).unwrap(),
            )),
            ..PodCondition::default()
        }]);
        p
    }

    /// A timestamp `s` seconds after the fixtures' epoch.
    pub fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn available_needs_min_ready_seconds() {
        let p = running(pod("a", &[], 0), "n", "127.0.0.2", Some(10));
        assert!(is_available(&p, 0, at(10)));
        assert!(!is_available(&p, 5, at(14)));
        assert!(is_available(&p, 5, at(15)));
        assert_eq!(available_at(&p, 5), Some(at(15)));
        let not_ready = running(pod("b", &[], 0), "n", "127.0.0.3", None);
        assert!(!is_available(&not_ready, 0, at(100)));
    }

    #[test]
    fn deletion_ranking_prefers_unscheduled_then_not_ready_then_newest() {
        let unscheduled = pod("unscheduled", &[], 0);
        let not_ready = running(pod("not-ready", &[], 1), "n", "127.0.0.2", None);
        let old_ready = running(pod("old-ready", &[], 2), "n", "127.0.0.3", Some(5));
        let new_ready = running(pod("new-ready", &[], 3), "n", "127.0.0.4", Some(5));
        let mut pods = [
            old_ready.clone(),
            new_ready.clone(),
            not_ready.clone(),
            unscheduled.clone(),
        ];
        pods.sort_by(deletion_order);
        let names: Vec<_> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            ["unscheduled", "not-ready", "new-ready", "old-ready"]
        );
    }

    #[test]
    fn claims() {
        let mut p = pod("a", &[], 0);
        assert_eq!(claim("rs", false, true, &p.metadata), Claim::Adopt);
        assert_eq!(claim("rs", true, true, &p.metadata), Claim::Ignore);
        assert_eq!(claim("rs", false, false, &p.metadata), Claim::Ignore);
        let owner = ObjectMeta {
            name: Some("rs".into()),
            uid: Some("rs".into()),
            ..ObjectMeta::default()
        };
        p.metadata.owner_references = Some(vec![controller_ref("apps/v1", "ReplicaSet", &owner)]);
        assert_eq!(claim("rs", false, true, &p.metadata), Claim::Owned);
        assert_eq!(claim("rs", false, false, &p.metadata), Claim::Release);
        assert_eq!(claim("other", false, true, &p.metadata), Claim::Ignore);
        let mut deleting = pod("b", &[], 0);
        deleting.metadata.deletion_timestamp = Some(Time(at(1)));
        assert_eq!(claim("rs", false, true, &deleting.metadata), Claim::Ignore);
    }
}

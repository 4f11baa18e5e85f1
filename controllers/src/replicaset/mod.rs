//! The ReplicaSet controller's pure part: the create/delete diff, which pods to delete, and the
//! status a ReplicaSet reports. Its creates and deletes are held back by the runtime's
//! [`Expectations`](crate::runtime::Expectations) while in flight, so it never overshoots.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{
    ReplicaSet, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus,
};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use skiff_meta::labels::Selector;

use crate::pods;

/// At most this many pods are created or deleted in one sync (kube-controller-manager's
/// `BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// What a sync does to the number of pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scale {
    /// The count is right.
    Keep,
    /// Create this many pods.
    Create(usize),
    /// Delete these pods (names), in order.
    Delete(Vec<String>),
}

/// Compares `replicas` with the active pods the controller owns and picks what to do; pods to
/// delete follow [`pods::deletion_order`]. At most [`BURST_REPLICAS`] at once.
pub fn plan_scale(replicas: i32, active: &[&Pod]) -> Scale {
    let want = replicas.max(0) as usize;
    let have = active.len();
    if have < want {
        Scale::Create((want - have).min(BURST_REPLICAS))
    } else if have > want {
        let mut ranked: Vec<&Pod> = active.to_vec();
        ranked.sort_by(|a, b| pods::deletion_order(a, b));
        Scale::Delete(
            ranked
                .into_iter()
                .take((have - want).min(BURST_REPLICAS))
                .filter_map(|p| p.metadata.name.clone())
                .collect(),
        )
    } else {
        Scale::Keep
    }
}

/// The selector of a ReplicaSet; `None` when it is missing or invalid (the API validates it, so
/// this only guards against a broken object).
pub fn selector(rs: &ReplicaSet) -> Option<Selector> {
    let spec = rs.spec.as_ref()?;
    let sel = Selector::from_label_selector(&spec.selector).ok()?;
    // An empty selector would match every pod in the namespace: never act on one.
    (!sel.is_empty()).then_some(sel)
}

/// The ReplicaSet a ReplicationController converts to: its selector map as `matchLabels`, the
/// rest field for field (the two kinds' specs and statuses share their fields).
pub fn from_replication_controller(rc: &ReplicationController) -> ReplicaSet {
    let spec = rc.spec.clone().unwrap_or_default();
    let status = rc.status.clone();
    ReplicaSet {
        metadata: rc.metadata.clone(),
        spec: Some(ReplicaSetSpec {
            replicas: spec.replicas,
            min_ready_seconds: spec.min_ready_seconds,
            selector: LabelSelector {
                match_labels: spec.selector,
                match_expressions: None,
            },
            template: spec.template,
        }),
        status: status.map(|s| ReplicaSetStatus {
            replicas: s.replicas,
            fully_labeled_replicas: s.fully_labeled_replicas,
            ready_replicas: s.ready_replicas,
            available_replicas: s.available_replicas,
            observed_generation: s.observed_generation,
            conditions: s.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| ReplicaSetCondition {
                        type_: c.type_,
                        status: c.status,
                        last_transition_time: c.last_transition_time,
                        reason: c.reason,
                        message: c.message,
                    })
                    .collect()
            }),
            terminating_replicas: None,
        }),
    }
}

/// The replica count the spec asks for (1 when unset).
pub fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn min_ready_seconds(rs: &ReplicaSet) -> i32 {
    rs.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// The status of `rs` given the active pods it owns, at `now`.
pub fn status(rs: &ReplicaSet, active: &[&Pod], now: Timestamp) -> ReplicaSetStatus {
    let template_labels = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .map(pods::template_labels)
        .unwrap_or_default();
    let min_ready = min_ready_seconds(rs);
    let count = |f: &dyn Fn(&Pod) -> bool| active.iter().filter(|p| f(p)).count() as i32;
    let previous = rs.status.clone().unwrap_or_default();
    ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: Some(count(&|p: &Pod| {
            let labels = pods::labels(&p.metadata);
            template_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })),
        ready_replicas: Some(count(&pods::is_ready)),
        available_replicas: Some(count(&|p: &Pod| pods::is_available(p, min_ready, now))),
        observed_generation: rs.metadata.generation,
        conditions: previous.conditions,
        terminating_replicas: previous.terminating_replicas,
    }
}

/// When the next pod of `rs` becomes available (ready pods waiting out `minReadySeconds`), so the
/// controller can sync again then.
pub fn next_availability(rs: &ReplicaSet, active: &[&Pod], now: Timestamp) -> Option<Timestamp> {
    let min_ready = min_ready_seconds(rs);
    if min_ready <= 0 {
        return None;
    }
    active
        .iter()
        .filter(|p| pods::is_ready(p) && !pods::is_available(p, min_ready, now))
        .filter_map(|p| pods::available_at(p, min_ready))
        .min()
}

/// Whether the stored status differs from `new` (so a status write is needed).
pub fn status_changed(rs: &ReplicaSet, new: &ReplicaSetStatus) -> bool {
    rs.status.as_ref() != Some(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::{at, pod, running};
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn rs(replicas: i32, min_ready: i32) -> ReplicaSet {
        let labels: std::collections::BTreeMap<String, String> =
            [("app".to_string(), "web".to_string())].into();
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("rs-uid".into()),
                generation: Some(4),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: Some(min_ready),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                },
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: None,
                }),
            }),
            status: None,
        }
    }

    #[test]
    fn scale_up_down_and_burst() {
        let a = running(pod("a", &[], 0), "n", "127.0.0.2", Some(1));
        let b = pod("b", &[], 1);
        let c = running(pod("c", &[], 2), "n", "127.0.0.3", Some(1));
        assert_eq!(plan_scale(3, &[&a]), Scale::Create(2));
        assert_eq!(plan_scale(2, &[&a, &c]), Scale::Keep);
        assert_eq!(
            plan_scale(1, &[&a, &b, &c]),
            Scale::Delete(vec!["b".into(), "c".into()])
        );
        assert_eq!(plan_scale(2000, &[]), Scale::Create(BURST_REPLICAS));
        assert_eq!(plan_scale(-1, &[&a]), Scale::Delete(vec!["a".into()]));
    }

    #[test]
    fn status_counts_ready_and_available_pods() {
        let r = rs(3, 10);
        let ready_long = running(pod("a", &[("app", "web")], 0), "n", "127.0.0.2", Some(0));
        let ready_new = running(pod("b", &[("app", "web")], 0), "n", "127.0.0.3", Some(95));
        let not_ready = running(pod("c", &[], 0), "n", "127.0.0.4", None);
        let active = [&ready_long, &ready_new, &not_ready];
        let s = status(&r, &active, at(100));
        assert_eq!(s.replicas, 3);
        assert_eq!(s.fully_labeled_replicas, Some(2));
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.available_replicas, Some(1));
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(next_availability(&r, &active, at(100)), Some(at(105)));
        assert_eq!(next_availability(&rs(3, 0), &active, at(100)), None);
    }

    #[test]
    fn a_replication_controller_reads_as_its_replica_set() {
        let rc: ReplicationController = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "rc-uid", "generation": 2},
            "spec": {"replicas": 3, "minReadySeconds": 5, "selector": {"app": "web"},
                     "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"replicas": 2, "readyReplicas": 1, "observedGeneration": 1,
                       "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}]},
        }))
        .unwrap();
        let rs = from_replication_controller(&rc);
        assert_eq!(rs.metadata, rc.metadata);
        assert_eq!(spec_replicas(&rs), 3);
        assert_eq!(min_ready_seconds(&rs), 5);
        let sel = selector(&rs).expect("a selector");
        let labels = [("app".to_string(), "web".to_string())].into();
        assert!(sel.matches(&labels));
        assert_eq!(sel.to_string(), "app=web");
        let status = rs.status.unwrap();
        assert_eq!((status.replicas, status.ready_replicas), (2, Some(1)));
        assert_eq!(
            status.conditions.unwrap()[0].reason.as_deref(),
            Some("FailedCreate")
        );
        // The status the controller writes back has exactly the ReplicationController's fields.
        let written = serde_json::to_value(status_of_rc(&rc)).unwrap();
        let rc_status: k8s_openapi::api::core::v1::ReplicationControllerStatus =
            serde_json::from_value(written.clone()).unwrap();
        assert_eq!(serde_json::to_value(rc_status).unwrap(), written);
    }

    fn status_of_rc(rc: &ReplicationController) -> ReplicaSetStatus {
        status(&from_replication_controller(rc), &[], at(0))
    }

    #[test]
    fn empty_selector_is_refused() {
        let mut r = rs(1, 0);
        assert!(selector(&r).is_some());
        r.spec.as_mut().unwrap().selector = LabelSelector::default();
        assert!(selector(&r).is_none());
    }
}

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

struct Known(BTreeMap<String, Scale>);

impl Scales for Known {
    fn scale_of(&self, _namespace: &str, owner: &OwnerReference) -> Option<Scale> {
        self.0.get(&owner.uid).cloned()
    }
}

/// Pods of ReplicaSet `rs-a` count as Deployment `web`'s 4 replicas; `rs-b` is a bare
/// ReplicaSet of 2; `sts` a StatefulSet of 3.
fn scales() -> Known {
    Known(BTreeMap::from([
        (
            "rs-a".into(),
            Scale {
                uid: "web".into(),
                replicas: 4,
            },
        ),
        (
            "rs-a2".into(),
            Scale {
                uid: "web".into(),
                replicas: 4,
            },
        ),
        (
            "rs-b".into(),
            Scale {
                uid: "rs-b".into(),
                replicas: 2,
            },
        ),
        (
            "sts".into(),
            Scale {
                uid: "sts".into(),
                replicas: 3,
            },
        ),
    ]))
}

fn pod(name: &str, owner: Option<&str>, ready: bool) -> Pod {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    });
    if let Some(uid) = owner {
        value["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": uid, "uid": uid, "controller": true,
        }]);
    }
    serde_json::from_value(value).unwrap()
}

fn budget(spec: Value, status: Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "generation": 3},
        "spec": spec, "status": status,
    }))
    .unwrap()
}

fn now() -> Timestamp {
    "2026-06-01T12:00:00Z".parse().unwrap()
}

fn decide_for(budget: &PodDisruptionBudget, pods: &[Pod]) -> Decision {
    let refs: Vec<&Pod> = pods.iter().collect();
    decide(budget, &refs, &scales(), now())
}

fn condition(d: &Decision) -> (String, String) {
    let c = &d.status.conditions.as_ref().unwrap()[0];
    (c.status.clone(), c.reason.clone())
}

#[test]
fn an_integer_min_available_counts_the_selected_pods() {
    let b = budget(
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
        json!({}),
    );
    let pods = [
        pod("a", Some("rs-a"), true),
        pod("b", Some("rs-a"), true),
        pod("c", None, true),
    ];
    let d = decide_for(&b, &pods);
    assert_eq!(
        (
            d.status.expected_pods,
            d.status.desired_healthy,
            d.status.current_healthy
        ),
        (3, 2, 3)
    );
    assert_eq!(d.status.disruptions_allowed, 1);
    assert_eq!(d.status.observed_generation, Some(3));
    assert_eq!(condition(&d), ("True".into(), "SufficientPods".into()));
    // Unready pods are not healthy; at the minimum nothing may go.
    let pods = [pod("a", Some("rs-a"), true), pod("b", Some("rs-a"), false)];
    let d = decide_for(&b, &pods);
    assert_eq!(
        (d.status.current_healthy, d.status.disruptions_allowed),
        (1, 0)
    );
    assert_eq!(condition(&d), ("False".into(), "InsufficientPods".into()));
}

#[test]
fn max_unavailable_counts_the_controllers_scale_once_each() {
    // Two ReplicaSets of one Deployment count its 4 replicas once; the bare ReplicaSet adds 2.
    let b = budget(json!({"maxUnavailable": "50%", "selector": {}}), json!({}));
    let pods = [
        pod("a", Some("rs-a"), true),
        pod("b", Some("rs-a2"), true),
        pod("c", Some("rs-b"), true),
        pod("d", Some("rs-b"), true),
        pod("e", None, true),
    ];
    let d = decide_for(&b, &pods);
    assert_eq!(d.status.expected_pods, 6);
    assert_eq!(d.status.desired_healthy, 3, "6 - ceil(50% of 6)");
    assert_eq!(d.status.current_healthy, 5);
    assert_eq!(d.status.disruptions_allowed, 2);
    assert_eq!(d.unmanaged, ["e"]);
    // A percentage minAvailable rounds up too.
    let b = budget(json!({"minAvailable": "50%", "selector": {}}), json!({}));
    let pods = [pod("a", Some("sts"), true), pod("b", Some("sts"), true)];
    let d = decide_for(&b, &pods);
    assert_eq!((d.status.expected_pods, d.status.desired_healthy), (3, 2));
    assert_eq!(d.status.disruptions_allowed, 0);
}

#[test]
fn an_unknown_controller_fails_the_sync_and_allows_nothing() {
    let b = budget(
        json!({"maxUnavailable": 1, "selector": {}}),
        json!({"disruptionsAllowed": 1, "expectedPods": 2, "desiredHealthy": 1}),
    );
    let d = decide_for(&b, &[pod("a", Some("gone"), true)]);
    assert_eq!(d.status.disruptions_allowed, 0);
    assert_eq!((d.status.expected_pods, d.status.desired_healthy), (2, 1));
    assert_eq!(condition(&d), ("False".into(), "SyncFailed".into()));
    let message = &d.status.conditions.as_ref().unwrap()[0].message;
    assert_eq!(message, "found no controllers for pod \"a\"");
}

#[test]
fn selectors_pick_pods_and_nothing_expected_allows_nothing() {
    let none = budget(json!({"minAvailable": 0}), json!({}));
    let d = decide_for(&none, &[pod("a", Some("rs-a"), true)]);
    assert_eq!(
        (d.status.current_healthy, d.status.disruptions_allowed),
        (0, 0)
    );
    let other = budget(
        json!({"minAvailable": 0, "selector": {"matchLabels": {"app": "db"}}}),
        json!({}),
    );
    assert_eq!(
        decide_for(&other, &[pod("a", Some("rs-a"), true)])
            .status
            .expected_pods,
        0
    );
}

#[test]
fn evicted_pods_stay_unhealthy_until_gone_or_two_minutes_pass() {
    let b = budget(
        json!({"minAvailable": 1, "selector": {}}),
        json!({"disruptedPods": {
            "a": "2026-06-01T11:59:30Z",   // 30 s ago: kept, expires in 90 s
            "b": "2026-06-01T11:57:00Z",   // 3 min ago: the pod was not deleted; dropped
            "gone": "2026-06-01T11:59:50Z" // no such pod: dropped
        }}),
    );
    let pods = [
        pod("a", Some("rs-a"), true),
        pod("b", Some("rs-a"), true),
        pod("c", Some("rs-a"), true),
    ];
    let d = decide_for(&b, &pods);
    let kept: Vec<&String> = d.status.disrupted_pods.as_ref().unwrap().keys().collect();
    assert_eq!(kept, ["a"]);
    assert_eq!(d.recheck, Some(Duration::from_secs(90)));
    assert_eq!(d.status.current_healthy, 2, "a is on its way out");
    assert_eq!(d.status.disruptions_allowed, 1);
}

#[test]
fn the_condition_keeps_its_transition_time_while_it_holds() {
    let b = budget(
        json!({"minAvailable": 1, "selector": {}}),
        json!({"conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                               "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    );
    let pods = [pod("a", Some("rs-a"), true), pod("b", Some("rs-a"), true)];
    let d = decide_for(&b, &pods);
    let c = &d.status.conditions.as_ref().unwrap()[0];
    assert_eq!(c.last_transition_time.0.to_string(), "2026-01-01T00:00:00Z");
    let mut with_status = b.clone();
    with_status.status = Some(d.status.clone());
    assert!(!status_changed(
        with_status.status.as_ref(),
        &decide_for(&with_status, &pods).status
    ));
}

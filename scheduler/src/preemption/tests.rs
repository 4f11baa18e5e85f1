use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use serde_json::json;

use super::*;
use crate::algorithm::{DEFAULT_PROVIDER, Registry};
use crate::predicates::tests::{node, pod};

const GI: i64 = 1 << 30;

fn algorithm() -> Algorithm {
    let r = Registry::default();
    let policy = r.provider_policy(DEFAULT_PROVIDER, &[]).unwrap();
    r.algorithm(&policy, 0).unwrap()
}

/// A ready node of `cpu` millicores holding `pods`.
fn full(name: &str, cpu: i64, pods: Vec<PodInfo>) -> NodeInfo {
    let mut n = node(name, cpu, 8 * GI, 110);
    n.node = Some(Arc::new(Node {
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }));
    for mut p in pods {
        p.node_name = name.into();
        n.add_pod(Arc::new(p));
    }
    n
}

fn prio(name: &str, cpu: i64, priority: i32) -> PodInfo {
    PodInfo {
        priority,
        labels: BTreeMap::from([("app".to_string(), name.to_string())]),
        ..pod(name, cpu, 0)
    }
}

fn names(c: &Candidate) -> Vec<&str> {
    c.victims.iter().map(|v| v.name.as_str()).collect()
}

#[test]
fn the_fewest_least_important_victims_that_make_room() {
    let nodes = [full(
        "n1",
        1000,
        vec![
            prio("low", 500, 1),
            prio("lower", 300, 0),
            prio("mid", 200, 5),
        ],
    )];
    let urgent = prio("urgent", 500, 10);
    let a = algorithm();
    assert!(!a.feasible(&urgent, &nodes[0]));
    let c = find(&a, &urgent, &nodes, &[]).expect("preemption helps");
    assert_eq!(c.node, "n1");
    // Put back most important first: `mid` (200m, with the preemptor's 500m: fits), `low`
    // (500m more: 1200m, does not fit: a victim), `lower` (300m: exactly 1000m, fits).
    assert_eq!(names(&c), ["low"]);
    assert_eq!(c.violations, 0);
}

#[test]
fn equal_or_higher_priority_pods_are_never_victims() {
    let nodes = [full(
        "n1",
        1000,
        vec![prio("peer", 800, 10), prio("low", 200, 1)],
    )];
    let urgent = prio("urgent", 500, 10);
    assert!(find(&algorithm(), &urgent, &nodes, &[]).is_none());
}

#[test]
fn nodes_preemption_cannot_help_are_skipped_and_the_cheapest_node_wins() {
    let mut selector_pod = prio("urgent", 600, 10);
    selector_pod.node_selector = BTreeMap::from([("disk".to_string(), "ssd".to_string())]);
    let nodes = [full("n1", 1000, vec![prio("low", 900, 1)])];
    assert!(
        find(&algorithm(), &selector_pod, &nodes, &[]).is_none(),
        "no eviction gives a node the label it lacks"
    );

    let urgent = prio("urgent", 600, 10);
    let nodes = [
        full("n1", 1000, vec![prio("a", 500, 5), prio("b", 500, 5)]),
        full("n2", 1000, vec![prio("c", 900, 3)]),
        full("n3", 1000, vec![prio("d", 400, 1), prio("e", 400, 1)]),
    ];
    let c = find(&algorithm(), &urgent, &nodes, &[]).unwrap();
    // n1's most important victim has priority 5, n2's 3, n3's 1: n3, one victim of two.
    assert_eq!(c.node, "n3");
    assert_eq!(c.victims.len(), 1);
}

#[test]
fn budgets_are_respected_where_possible() {
    let budget = |app: &str, allowed: i32| {
        Budget::of(
            &serde_json::from_value(json!({
                "metadata": {"name": app, "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 1,
                           "desiredHealthy": 1, "expectedPods": 1}}))
            .unwrap(),
        )
        .unwrap()
    };
    let urgent = prio("urgent", 600, 10);
    let nodes = [
        full("n1", 1000, vec![prio("guarded", 900, 1)]),
        full("n2", 1000, vec![prio("free", 900, 5)]),
    ];
    // Without budgets the lower victim priority wins (n1); with n1's pod protected, n2.
    assert_eq!(find(&algorithm(), &urgent, &nodes, &[]).unwrap().node, "n1");
    let c = find(&algorithm(), &urgent, &nodes, &[budget("guarded", 0)]).unwrap();
    assert_eq!((c.node.as_str(), c.violations), ("n2", 0));
    // When every way breaks a budget, preemption still goes ahead, counting the violation.
    let only = [full("n1", 1000, vec![prio("guarded", 900, 1)])];
    let c = find(&algorithm(), &urgent, &only, &[budget("guarded", 0)]).unwrap();
    assert_eq!((names(&c), c.violations), (vec!["guarded"], 1));
    // A budget with room is no obstacle.
    let c = find(&algorithm(), &urgent, &only, &[budget("guarded", 1)]).unwrap();
    assert_eq!(c.violations, 0);
}

#[test]
fn pods_already_leaving_make_room_without_new_victims() {
    let mut leaving = prio("low", 900, 1);
    leaving.terminating = true;
    let mut urgent = prio("urgent", 600, 10);
    let nodes = [full("n1", 1000, vec![leaving])];
    let c = find(&algorithm(), &urgent, &nodes, &[]).unwrap();
    assert!(c.victims.is_empty(), "{:?}", names(&c));
    // Nominated there already, it waits for them instead of preempting again.
    urgent.nominated_node = "n1".into();
    assert!(!eligible(&urgent, &nodes));
    urgent.nominated_node.clear();
    assert!(eligible(&urgent, &nodes));
    urgent.never_preempts = true;
    assert!(!eligible(&urgent, &nodes));
}

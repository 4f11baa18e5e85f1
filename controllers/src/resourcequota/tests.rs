use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuotaStatus, Service};
use serde_json::json;

use super::*;

fn spec(v: serde_json::Value) -> ResourceQuotaSpec {
    serde_json::from_value(v).unwrap()
}

fn pod(name: &str, cpu: &str, phase: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]},
        "status": {"phase": phase}}))
    .unwrap()
}

fn used(status: &ResourceQuotaStatus) -> Vec<(String, String)> {
    status
        .used
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

#[test]
fn used_counts_the_objects_that_still_use_each_limited_resource() {
    let q = spec(
        json!({"hard": {"pods": "5", "requests.cpu": "2", "configmaps": "3", "services.loadbalancers": "1"}}),
    );
    let running = pod("a", "250m", "Running");
    let pending = pod("b", "500m", "Pending");
    let done = pod("c", "1", "Succeeded");
    let config: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
    let objects = [
        Counted {
            group: "",
            plural: "pods",
            object: Object::Pod(&running),
        },
        Counted {
            group: "",
            plural: "pods",
            object: Object::Pod(&pending),
        },
        Counted {
            group: "",
            plural: "pods",
            object: Object::Pod(&done),
        },
        Counted {
            group: "",
            plural: "configmaps",
            object: Object::Other,
        },
    ];
    let _ = config;
    let status = recount(&q, &objects, Timestamp::now());
    assert_eq!(
        used(&status),
        [
            pair("configmaps", "1"),
            pair("pods", "2"),
            pair("requests.cpu", "750m"),
            pair("services.loadbalancers", "0"),
        ]
    );
    assert_eq!(status.hard, q.hard);
}

#[test]
fn scoped_quotas_count_only_their_pods() {
    let q = spec(json!({"hard": {"pods": "5"}, "scopes": ["BestEffort"]}));
    let burstable = pod("a", "250m", "Running");
    let best_effort: Pod = serde_json::from_value(json!({"metadata": {"name": "b"},
        "spec": {"containers": [{"name": "c"}]}}))
    .unwrap();
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    let objects = [
        Counted {
            group: "",
            plural: "pods",
            object: Object::Pod(&burstable),
        },
        Counted {
            group: "",
            plural: "pods",
            object: Object::Pod(&best_effort),
        },
        Counted {
            group: "",
            plural: "services",
            object: Object::Service(&svc),
        },
    ];
    assert_eq!(
        used(&recount(&q, &objects, Timestamp::now())),
        [pair("pods", "1")]
    );
}

#[test]
fn a_status_is_rewritten_only_when_an_amount_differs() {
    let q = spec(json!({"hard": {"requests.cpu": "1"}}));
    let wanted = recount(&q, &[], Timestamp::now());
    assert!(status_changed(None, &wanted));
    let same: ResourceQuotaStatus = serde_json::from_value(json!({
        "hard": {"requests.cpu": "1000m"}, "used": {"requests.cpu": "0"}}))
    .unwrap();
    assert!(!status_changed(Some(&same), &wanted));
    let stale: ResourceQuotaStatus = serde_json::from_value(json!({
        "hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "500m"}}))
    .unwrap();
    assert!(status_changed(Some(&stale), &wanted));
    let old_limits: ResourceQuotaStatus = serde_json::from_value(json!({
        "hard": {"requests.cpu": "2"}, "used": {"requests.cpu": "0"}}))
    .unwrap();
    assert!(status_changed(Some(&old_limits), &wanted));
}

#[test]
fn the_resources_a_recount_needs() {
    let q = spec(
        json!({"hard": {"pods": "1", "limits.memory": "1Gi", "count/deployments.apps": "2",
                                 "requests.storage": "5Gi", "example.com/gpu": "1"}}),
    );
    assert_eq!(
        resources_of(&q),
        [
            (String::new(), "persistentvolumeclaims".to_string()),
            (String::new(), "pods".to_string()),
            ("apps".to_string(), "deployments".to_string()),
        ]
    );
}

use serde_json::json;

use super::*;

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
}

fn now() -> jiff::Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn shown(usage: &Usage) -> BTreeMap<String, String> {
    usage
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}

fn list(pairs: &[(&str, &str)]) -> Usage {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), quantity::parse(v).unwrap()))
        .collect()
}

#[test]
fn a_pod_uses_its_requests_and_limits_under_every_spelling() {
    let p = pod(json!({"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi", "example.com/gpu": "1"},
                                    "limits": {"cpu": "200m", "memory": "128Mi", "example.com/gpu": "1"}}},
        {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}
    ]}));
    let usage = usage("", "pods", Object::Pod(&p), now());
    assert_eq!(
        shown(&usage),
        [
            ("count/pods", "1"),
            ("cpu", "350m"),
            ("limits.cpu", "200m"),
            ("limits.memory", "128Mi"),
            ("memory", "128Mi"),
            ("pods", "1"),
            ("requests.cpu", "350m"),
            ("requests.example.com/gpu", "1"),
            ("requests.memory", "128Mi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    );
}

#[test]
fn init_containers_count_by_their_peak_and_sidecars_add_up() {
    let p = pod(json!({
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "big", "resources": {"requests": {"cpu": "1"}}}
        ],
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "300m"}}}],
        "overhead": {"cpu": "50m"}
    }));
    // Running: app 300m + sidecar 100m = 400m; initialising: big 1 + sidecar 100m = 1100m;
    // the peak is 1100m, plus 50m of overhead.
    assert_eq!(pod_resources(&p, false)["cpu"].to_string(), "1150m");
}

#[test]
fn terminal_pods_and_pods_past_their_grace_use_nothing() {
    let mut p = pod(json!({"containers": [{"name": "a"}]}));
    assert!(pod_counts(&p, now()));
    p.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
    assert!(!pod_counts(&p, now()));
    assert!(usage("", "pods", Object::Pod(&p), now()).is_empty());
    p.status = None;
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2025-12-31T23:59:00Z".parse().unwrap(),
    ));
    p.metadata.deletion_grace_period_seconds = Some(30);
    assert!(!pod_counts(&p, now()), "grace ended 30 s ago");
    p.metadata.deletion_grace_period_seconds = Some(120);
    assert!(pod_counts(&p, now()), "still within its grace");
}

#[test]
fn services_claims_and_other_objects() {
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "s"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443}]}}))
    .unwrap();
    let u = usage("", "services", Object::Service(&svc), now());
    assert_eq!(u["services"].to_string(), "1");
    assert_eq!(u["services.loadbalancers"].to_string(), "1");
    assert_eq!(u["services.nodeports"].to_string(), "2");

    let claim: PersistentVolumeClaim = serde_json::from_value(json!({"metadata": {"name": "c"},
        "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"allocatedResources": {"storage": "2Gi"}}}))
    .unwrap();
    let u = usage("", "persistentvolumeclaims", Object::Claim(&claim), now());
    assert_eq!(
        u["requests.storage"].to_string(),
        "2Gi",
        "the larger of asked and allocated"
    );
    assert_eq!(
        u["fast.storageclass.storage.k8s.io/requests.storage"].to_string(),
        "2Gi"
    );
    assert_eq!(
        u["fast.storageclass.storage.k8s.io/persistentvolumeclaims"].to_string(),
        "1"
    );

    let u = usage("apps", "deployments", Object::Other, now());
    assert_eq!(
        shown(&u).into_iter().collect::<Vec<_>>(),
        [("count/deployments.apps".to_string(), "1".to_string())]
    );
    let u = usage("", "configmaps", Object::Other, now());
    assert!(u.contains_key("configmaps") && u.contains_key("count/configmaps"));
}

#[test]
fn scopes_select_pods_only() {
    let spec = |v: serde_json::Value| -> ResourceQuotaSpec { serde_json::from_value(v).unwrap() };
    let best_effort = pod(json!({"containers": [{"name": "a"}]}));
    let burstable = pod(
        json!({"containers": [{"name": "a", "resources": {"requests": {"memory": "1Mi"}}}],
                               "activeDeadlineSeconds": 10, "priorityClassName": "high"}),
    );
    let q = spec(json!({"scopes": ["BestEffort"]}));
    assert!(quota_selects(&q, Object::Pod(&best_effort)));
    assert!(!quota_selects(&q, Object::Pod(&burstable)));
    assert!(
        !quota_selects(&q, Object::Other),
        "scoped quotas count pods only"
    );
    let q = spec(json!({"scopes": ["Terminating", "NotBestEffort"]}));
    assert!(quota_selects(&q, Object::Pod(&burstable)));
    assert!(!quota_selects(&q, Object::Pod(&best_effort)));
    let q = spec(json!({"scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["high", "medium"]}]}}));
    assert!(quota_selects(&q, Object::Pod(&burstable)));
    assert!(!quota_selects(&q, Object::Pod(&best_effort)));
    let q = spec(json!({"scopeSelector": {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "DoesNotExist"}]}}));
    assert!(quota_selects(&q, Object::Pod(&best_effort)));
    assert!(quota_selects(&spec(json!({})), Object::Other));
}

#[test]
fn compute_quotas_make_every_container_state_its_resources() {
    let p = pod(json!({"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "1"}}},
        {"name": "b"}
    ], "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}]}));
    assert_eq!(
        missing_statements(
            &p,
            &list(&[("limits.cpu", "2"), ("requests.cpu", "2"), ("pods", "3")])
        )
        .unwrap(),
        "must specify limits.cpu for: a,b; requests.cpu for: b"
    );
    assert_eq!(
        missing_statements(&p, &list(&[("pods", "3"), ("requests.storage", "1Gi")])),
        None
    );
}

#[test]
fn quota_names() {
    for ok in [
        "pods",
        "requests.cpu",
        "count/deployments.apps",
        "example.com/gpu",
        "requests.hugepages-2Mi",
        "gold.storageclass.storage.k8s.io/requests.storage",
    ] {
        assert!(is_quota_resource(ok), "{ok}");
    }
    for bad in ["cpus", "nodes", "limits.storage"] {
        assert!(!is_quota_resource(bad), "{bad}");
    }
    assert!(is_integer_resource("pods") && is_integer_resource("count/jobs.batch"));
    assert!(
        !is_integer_resource("requests.memory")
            && !is_integer_resource("gold.storageclass.storage.k8s.io/requests.storage")
    );
    assert!(scope_supports("BestEffort", "pods") && !scope_supports("BestEffort", "requests.cpu"));
    assert!(
        scope_supports("NotTerminating", "limits.memory")
            && !scope_supports("Terminating", "services")
    );
}

#[test]
fn arithmetic_and_messages() {
    let used = list(&[("pods", "3"), ("requests.cpu", "500m")]);
    let more = list(&[("pods", "1"), ("requests.cpu", "250m"), ("count/pods", "1")]);
    let hard = list(&[("pods", "3"), ("requests.cpu", "1")]);
    let requested = masked(&more, &hard);
    assert_eq!(pretty(&add(&used, &requested)), "pods=4,requests.cpu=750m");
    assert_eq!(
        pretty(&increase(
            &list(&[("requests.storage", "2Gi"), ("pods", "1")]),
            &list(&[("requests.storage", "1Gi"), ("pods", "1")])
        )),
        "pods=0,requests.storage=1Gi"
    );
    assert_eq!(
        pretty(&increase(
            &list(&[("requests.storage", "1Gi")]),
            &list(&[("requests.storage", "2Gi")])
        )),
        "requests.storage=0"
    );
}

#[test]
fn each_quota_name_is_used_by_one_resource() {
    let of = |n| counted_resource(n).map(|(g, p)| format!("{g}/{p}"));
    assert_eq!(of("requests.cpu").as_deref(), Some("/pods"));
    assert_eq!(of("memory").as_deref(), Some("/pods"));
    assert_eq!(of("requests.example.com/gpu").as_deref(), Some("/pods"));
    assert_eq!(of("services.nodeports").as_deref(), Some("/services"));
    assert_eq!(
        of("gold.storageclass.storage.k8s.io/requests.storage").as_deref(),
        Some("/persistentvolumeclaims")
    );
    assert_eq!(of("configmaps").as_deref(), Some("/configmaps"));
    assert_eq!(
        of("count/deployments.apps").as_deref(),
        Some("apps/deployments")
    );
    assert_eq!(
        of("count/widgets.example.com").as_deref(),
        Some("example.com/widgets")
    );
    assert_eq!(of("count/secrets").as_deref(), Some("/secrets"));
    assert_eq!(of("example.com/gpu"), None);
}

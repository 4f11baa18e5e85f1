use super::*;

fn rq(name: &str, spec: Value, hard: Value, used: Value) -> Limits {
    let rq: Rq = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
        "status": {"hard": hard, "used": used}}))
    .unwrap();
    Limits::of(&rq)
}

fn pod(resources: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "app", "resources": resources}]}}))
    .unwrap()
}

fn usage_of(p: &Pod) -> Usage {
    quota::usage("", "pods", Object::Pod(p), jiff::Timestamp::now())
}

#[test]
fn a_pod_that_fits_is_charged_and_one_over_is_refused_in_kubernetes_words() {
    let limits = rq(
        "pods",
        json!({"hard": {"pods": "3"}}),
        json!({"pods": "3"}),
        json!({"pods": "2"}),
    );
    let p = pod(json!({}));
    let charged = charge(&limits, Object::Pod(&p), &usage_of(&p))
        .unwrap()
        .unwrap();
    assert_eq!(quota::pretty(&charged), "pods=3");
    let full = rq(
        "pods",
        json!({"hard": {"pods": "3"}}),
        json!({"pods": "3"}),
        json!({"pods": "3"}),
    );
    assert_eq!(
        charge(&full, Object::Pod(&p), &usage_of(&p))
            .unwrap_err()
            .to_string(),
        "exceeded quota: pods, requested: pods=1, used: pods=3, limited: pods=3"
    );
}

#[test]
fn only_the_exceeded_resources_are_named() {
    let limits = rq(
        "compute",
        json!({"hard": {"pods": "10", "requests.cpu": "1", "requests.memory": "1Gi"}}),
        json!({"pods": "10", "requests.cpu": "1", "requests.memory": "1Gi"}),
        json!({"pods": "1", "requests.cpu": "800m", "requests.memory": "512Mi"}),
    );
    let p = pod(json!({"requests": {"cpu": "300m", "memory": "256Mi"}}));
    assert_eq!(
        charge(&limits, Object::Pod(&p), &usage_of(&p))
            .unwrap_err()
            .to_string(),
        "exceeded quota: compute, requested: requests.cpu=300m, used: requests.cpu=800m, limited: requests.cpu=1"
    );
}

#[test]
fn compute_quotas_require_stated_resources() {
    let limits = rq(
        "compute",
        json!({"hard": {"limits.cpu": "2", "requests.memory": "1Gi"}}),
        json!({"limits.cpu": "2", "requests.memory": "1Gi"}),
        json!({"limits.cpu": "0", "requests.memory": "0"}),
    );
    let p = pod(json!({}));
    assert_eq!(
        charge(&limits, Object::Pod(&p), &usage_of(&p))
            .unwrap_err()
            .to_string(),
        "failed quota: compute: must specify limits.cpu for: app; requests.memory for: app"
    );
}

#[test]
fn unsynced_and_unrelated_quotas() {
    let p = pod(json!({}));
    // Not mirrored by the controller yet: nothing enforced.
    let fresh: Rq = serde_json::from_value(json!({"metadata": {"name": "new"},
        "spec": {"hard": {"pods": "0"}}}))
    .unwrap();
    assert_eq!(
        charge(&Limits::of(&fresh), Object::Pod(&p), &usage_of(&p)),
        Ok(None)
    );
    // Mirrored limits but no usage for them yet.
    let unknown = rq(
        "q",
        json!({"hard": {"pods": "1", "services": "1"}}),
        json!({"pods": "1", "services": "1"}),
        json!({"services": "0"}),
    );
    assert_eq!(
        charge(&unknown, Object::Pod(&p), &usage_of(&p))
            .unwrap_err()
            .to_string(),
        "status unknown for quota: q, resources: pods"
    );
    // A quota of Services does not see pods; a scoped quota does not see other kinds.
    let services = rq(
        "s",
        json!({"hard": {"services": "1"}}),
        json!({"services": "1"}),
        json!({"services": "1"}),
    );
    assert_eq!(charge(&services, Object::Pod(&p), &usage_of(&p)), Ok(None));
    let best_effort = rq(
        "be",
        json!({"hard": {"pods": "1"}, "scopes": ["BestEffort"]}),
        json!({"pods": "1"}),
        json!({"pods": "1"}),
    );
    let cm = quota::usage("", "configmaps", Object::Other, jiff::Timestamp::now());
    assert_eq!(charge(&best_effort, Object::Other, &cm), Ok(None));
    assert!(
        charge(&best_effort, Object::Pod(&p), &usage_of(&p)).is_err(),
        "a BestEffort pod counts"
    );
}

#[test]
fn object_counts_of_any_kind() {
    let limits = rq(
        "counts",
        json!({"hard": {"count/deployments.apps": "1", "configmaps": "5"}}),
        json!({"count/deployments.apps": "1", "configmaps": "5"}),
        json!({"count/deployments.apps": "1", "configmaps": "0"}),
    );
    let deployment = quota::usage("apps", "deployments", Object::Other, jiff::Timestamp::now());
    assert_eq!(
        charge(&limits, Object::Other, &deployment)
            .unwrap_err()
            .to_string(),
        "exceeded quota: counts, requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1"
    );
    let cm = quota::usage("", "configmaps", Object::Other, jiff::Timestamp::now());
    assert_eq!(
        quota::pretty(&charge(&limits, Object::Other, &cm).unwrap().unwrap()),
        "configmaps=1,count/deployments.apps=1"
    );
}

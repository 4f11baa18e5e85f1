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

/// A registry on a fresh store holding one quota `q` of `pods: 1` in `default`, mirrored and
/// counted as the controller leaves it.
async fn registry_with_quota() -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    let store = skiff_store::SledStore::open(skiff_store::Config::new(dir.path())).unwrap();
    let registry = Registry::new(std::sync::Arc::new(store));
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "default", "uid": "u"},
        "spec": {"hard": {"pods": "1"}},
        "status": {"hard": {"pods": "1"}, "used": {"pods": "0"}}});
    registry
        .create(&resource_quota::INFO, quota, None)
        .await
        .unwrap();
    (dir, registry)
}

/// Admits a pod `name` in `default` through `plugin`.
async fn create_pod(plugin: &ResourceQuota, registry: &Registry, name: &str) -> Result<()> {
    let user = crate::auth::User::admin();
    let mut object = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let attributes = Attributes {
        operation: Operation::Create,
        info: &pod::INFO,
        subresource: None,
        namespace: Some("default"),
        name,
        object: Some(&mut object),
        old: None,
        user: &user,
        dry_run: false,
        feedback: None,
    };
    plugin.validate(registry, &attributes).await
}

async fn used_pods(registry: &Registry) -> Value {
    let stored = registry
        .get(&resource_quota::INFO, Some("default"), "q", None)
        .await
        .unwrap();
    stored["status"]["used"]["pods"].clone()
}

#[tokio::test]
async fn the_mirror_finds_the_quotas_and_the_log_decides_a_refusal() {
    let (_dir, registry) = registry_with_quota().await;
    let page = registry
        .list(&resource_quota::INFO, None, None, None, None, None)
        .await
        .unwrap();
    let plugin = ResourceQuota::default();
    plugin.0.listed(&page.items);

    // From the mirror: the quota is found and charged in the log.
    create_pod(&plugin, &registry, "a").await.unwrap();
    assert_eq!(used_pods(&registry).await, "1");

    // A mirror behind the log: it still says 0 used, but the charge is made against the log's
    // usage, so the last unit is not taken twice.
    let refused = create_pod(&plugin, &registry, "b").await.unwrap_err();
    assert!(refused.to_string().contains("used: pods=1"), "{refused}");
    assert_eq!(used_pods(&registry).await, "1");

    // The other way round: the mirror says the quota is full, the log has given the unit back
    // (the controller recounted). The refusal is checked against the log, which lets it in.
    let mut full = page.items[0].clone();
    full["status"]["used"]["pods"] = json!("1");
    plugin.0.changed(&full, true);
    let freed = registry
        .update(
            &resource_quota::INFO,
            Some("default"),
            "q",
            None,
            false,
            |mut q: Value| {
                q["status"]["used"]["pods"] = json!("0");
                async move { Ok(crate::registry::Update::Write(q)) }
            },
        )
        .await;
    freed.unwrap();
    create_pod(&plugin, &registry, "c").await.unwrap();
    assert_eq!(used_pods(&registry).await, "1");

    // A mirror without quotas in the namespace is taken at its word, without reading the log: a
    // quota made a moment ago limits from its watch delivery on, as with Kubernetes' informers.
    plugin.0.listed(&[]);
    create_pod(&plugin, &registry, "d").await.unwrap();
    assert_eq!(used_pods(&registry).await, "1", "not charged");
}

#[tokio::test]
async fn two_creates_racing_for_the_last_unit_never_both_win() {
    let (_dir, registry) = registry_with_quota().await;
    let plugin = ResourceQuota::default();
    let attempt = |name: &'static str| create_pod(&plugin, &registry, name);
    let (a, b) = tokio::join!(attempt("a"), attempt("b"));
    let refusals: Vec<String> = [a, b]
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(
        refusals[0].contains("exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"),
        "{refusals:?}"
    );
    assert_eq!(used_pods(&registry).await, "1", "charged once");
}

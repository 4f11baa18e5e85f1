use super::*;

fn ranges(items: Value) -> Vec<LimitRange> {
    let mut object = json!({"apiVersion": "v1", "kind": "LimitRange",
                            "metadata": {"name": "l", "namespace": "default"},
                            "spec": {"limits": items}});
    // As stored: defaulted by the kind.
    skiff_kinds::builtin::by_plural("limitranges").default(&mut object);
    vec![serde_json::from_value(object).unwrap()]
}

fn typed_pod(pod: &Value) -> Pod {
    serde_json::from_value(pod.clone()).unwrap()
}

#[test]
fn containers_get_the_defaults_they_leave_out_and_the_annotation_says_which() {
    let ranges = ranges(json!([{"type": "Container",
        "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "100m"}}]));
    let mut pod = json!({"metadata": {"name": "p"}, "spec": {
    "initContainers": [{"name": "setup"}],
    "containers": [
        {"name": "web", "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}},
        {"name": "side"}
    ]}});
    assert!(apply_defaults(&mut pod, &ranges));
    let web = &pod["spec"]["containers"][0]["resources"];
    assert_eq!(web["limits"], json!({"cpu": "500m", "memory": "1Gi"}));
    assert_eq!(
        web["requests"],
        json!({"cpu": "100m", "memory": "1Gi"}),
        "a stated request stays; the default request fills the gap"
    );
    let side = &pod["spec"]["containers"][1]["resources"];
    assert_eq!(side["requests"], json!({"cpu": "100m", "memory": "256Mi"}));
    assert_eq!(
        pod["metadata"]["annotations"][ANNOTATION],
        "LimitRanger plugin set: cpu request for container web; cpu limit for container web; \
         cpu, memory request for container side; cpu, memory limit for container side; \
         cpu, memory request for init container setup; cpu, memory limit for init container setup"
    );
    // Nothing left to fill: no change, and the annotation stays as it was.
    let before = pod.clone();
    assert!(!apply_defaults(&mut pod, &ranges));
    assert_eq!(pod, before);
    assert!(!apply_defaults(
        &mut json!({"spec": {"containers": [{"name": "a"}]}}),
        &[]
    ));
}

#[test]
fn containers_and_pods_outside_the_ranges_are_refused_in_kubernetes_words() {
    let ranges = ranges(json!([
        {"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1", "memory": "1Gi"},
         "maxLimitRequestRatio": {"cpu": "2"}},
        {"type": "Pod", "max": {"memory": "1500Mi"}}
    ]));
    let ok = typed_pod(&json!({"spec": {"containers": [{"name": "a", "resources": {
        "requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}}]}}));
    assert_eq!(check_pod(&ok, &ranges), Vec::<String>::new());

    let greedy = typed_pod(&json!({"spec": {"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "50m", "memory": "1Gi"},
                                    "limits": {"cpu": "2", "memory": "1Gi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                    "limits": {"cpu": "1", "memory": "1Gi"}}}
    ]}}));
    assert_eq!(
        check_pod(&greedy, &ranges),
        [
            "minimum cpu usage per Container is 100m, but request is 50m",
            "maximum cpu usage per Container is 1, but limit is 2",
            "cpu max limit to request ratio per Container is 2, but provided ratio is 40.000000",
            "maximum memory usage per Pod is 1500Mi, but limit is 2Gi",
        ]
    );
    let unstated = typed_pod(&json!({"spec": {"containers": [{"name": "a"}]}}));
    assert_eq!(
        check_pod(&unstated, &ranges),
        [
            "minimum cpu usage per Container is 100m.  No request is specified",
            "maximum cpu usage per Container is 1.  No limit is specified",
            "maximum memory usage per Container is 1Gi.  No limit is specified",
            "cpu max limit to request ratio per Container is 2, but no request is specified or request is 0",
            "maximum memory usage per Pod is 1500Mi.  No limit is specified",
        ]
    );
    assert_eq!(
        aggregate(&check_pod(&greedy, &ranges)[..1]),
        "minimum cpu usage per Container is 100m, but request is 50m"
    );
    assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
}

#[test]
fn claims_request_storage_within_the_range() {
    let ranges = ranges(json!([{"type": "PersistentVolumeClaim",
                                "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]));
    let claim = |size: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"spec": {"resources": {"requests": {"storage": size}}}}))
            .unwrap()
    };
    assert!(check_claim(&claim("5Gi"), &ranges).is_empty());
    assert_eq!(
        check_claim(&claim("20Gi"), &ranges),
        ["maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"]
    );
    assert_eq!(
        check_claim(&claim("500Mi"), &ranges),
        ["minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"]
    );
}

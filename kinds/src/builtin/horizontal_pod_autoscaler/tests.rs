use super::*;
use crate::validation::test_util::create_msgs;

fn hpa(api_version: &str, spec: Value) -> Value {
    json!({"apiVersion": api_version, "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

fn target() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
}

#[test]
fn v2_defaults_to_one_replica_and_cpu_at_eighty_percent() {
    let mut object = hpa(
        "autoscaling/v2",
        json!({"scaleTargetRef": target(), "maxReplicas": 5}),
    );
    HorizontalPodAutoscaler.default(&mut object);
    assert_eq!(object["spec"]["minReplicas"], 1);
    assert_eq!(
        object["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}])
    );
    // No behavior asked for, none filled in: the controller's own defaults apply.
    assert!(object["spec"].get("behavior").is_none());
    let again = object.clone();
    HorizontalPodAutoscaler.default(&mut object);
    assert_eq!(object, again);
}

#[test]
fn a_behavior_gets_its_missing_rules_filled_in() {
    let mut object = hpa(
        "autoscaling/v2",
        json!({"scaleTargetRef": target(), "maxReplicas": 5,
               "behavior": {"scaleDown": {"stabilizationWindowSeconds": 10}}}),
    );
    HorizontalPodAutoscaler.default(&mut object);
    let behavior = &object["spec"]["behavior"];
    assert_eq!(behavior["scaleDown"]["stabilizationWindowSeconds"], 10);
    assert_eq!(behavior["scaleDown"]["selectPolicy"], "Max");
    assert_eq!(
        behavior["scaleDown"]["policies"],
        json!([{"type": "Percent", "value": 100, "periodSeconds": 15}])
    );
    assert_eq!(behavior["scaleUp"]["stabilizationWindowSeconds"], 0);
    assert_eq!(
        behavior["scaleUp"]["policies"],
        json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
               {"type": "Percent", "value": 100, "periodSeconds": 15}])
    );
}

#[test]
fn bounds_references_metrics_and_policies_are_checked() {
    let msgs = create_msgs(
        "autoscaling",
        "HorizontalPodAutoscaler",
        hpa(
            "autoscaling/v2",
            json!({"scaleTargetRef": {"kind": "", "name": "a/b"}, "minReplicas": 3,
                   "maxReplicas": 2,
                   "metrics": [
                       {"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 0}}},
                       {"type": "Pods", "resource": {"name": "memory",
                        "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
                       {"type": "Widgets"}],
                   "behavior": {"scaleUp": {"stabilizationWindowSeconds": 4000,
                                            "selectPolicy": "Most",
                                            "policies": [{"type": "Pods", "value": 0,
                                                          "periodSeconds": 1801}]}}}),
        ),
    );
    assert_eq!(
        msgs,
        [
            "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`",
            "spec.scaleTargetRef.kind: Required value",
            "spec.scaleTargetRef.name: Invalid value: \"a/b\": may not contain '/'",
            "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0",
            "spec.metrics[1].pods: Required value: must populate information for the given metric source",
            "spec.metrics[2].type: Unsupported value: \"Widgets\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
            "spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 4000: must be less than or equal to 3600",
            "spec.behavior.scaleUp.selectPolicy: Unsupported value: \"Most\": supported values: \"Disabled\", \"Max\", \"Min\"",
            "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
            "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 1801: must be less than or equal to 1800",
        ]
    );
    let ok = hpa(
        "autoscaling/v2",
        json!({"scaleTargetRef": target(), "maxReplicas": 3,
               "metrics": [{"type": "Resource", "resource": {"name": "memory",
                            "target": {"type": "AverageValue", "averageValue": "100Mi"}}}]}),
    );
    assert!(create_msgs("autoscaling", "HorizontalPodAutoscaler", ok).is_empty());
}

#[test]
fn v1_is_checked_by_the_v2_rules() {
    let kind = HorizontalPodAutoscalerV1;
    let mut object = hpa(
        "autoscaling/v1",
        json!({"scaleTargetRef": target(), "maxReplicas": 0, "targetCPUUtilizationPercentage": 0}),
    );
    kind.default(&mut object);
    assert_eq!(object["spec"]["minReplicas"], 1);
    let msgs: Vec<String> = kind
        .validate(&object, None, &ObjectMeta::default())
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        msgs,
        [
            "spec.maxReplicas: Invalid value: 0: must be greater than 0",
            "spec.maxReplicas: Invalid value: 0: must be greater than or equal to `minReplicas`",
            "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0",
        ]
    );
}

#[test]
fn v1_round_trips_what_only_v2_can_say() {
    let mut stored = hpa(
        "autoscaling/v2",
        json!({"scaleTargetRef": target(), "minReplicas": 2, "maxReplicas": 6,
               "metrics": [
                   {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 60}}},
                   {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "AverageValue", "averageValue": "100Mi"}}}],
               "behavior": {"scaleDown": {"stabilizationWindowSeconds": 30, "selectPolicy": "Max",
                            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}}),
    );
    // As it is stored: written through v2, defaults and all.
    HorizontalPodAutoscaler.default(&mut stored);
    stored["metadata"]["resourceVersion"] = json!("7");
    stored["status"] = json!({
        "currentReplicas": 3, "desiredReplicas": 4,
        "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 75, "averageValue": "150m"}}},
            {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "90Mi"}}}],
        "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"}]});
    let kind = HorizontalPodAutoscalerV1;
    let mut served = stored.clone();
    kind.to_served(&mut served);
    assert_eq!(served["apiVersion"], "autoscaling/v1");
    // Converting what is already served (or stored) changes nothing.
    let again = served.clone();
    kind.to_served(&mut served);
    assert_eq!(served, again);
    assert_eq!(served["metadata"]["resourceVersion"], "7");
    assert_eq!(served["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(served["status"]["currentCPUUtilizationPercentage"], 75);
    assert_eq!(served["status"]["currentReplicas"], 3);
    assert!(served["spec"].get("metrics").is_none());
    let annotations = served["metadata"]["annotations"].as_object().unwrap();
    let metrics: Value =
        serde_json::from_str(annotations[annotations::METRICS].as_str().unwrap()).unwrap();
    assert_eq!(metrics[0]["resource"]["name"], "memory");
    for key in [
        annotations::BEHAVIOR,
        annotations::CONDITIONS,
        annotations::CURRENT_METRICS,
    ] {
        assert!(annotations.contains_key(key), "{key} in {annotations:?}");
    }

    // A v1 client changes the bounds and writes the object back: nothing else is lost.
    served["spec"]["maxReplicas"] = json!(8);
    let mut back = served.clone();
    kind.to_stored(&mut back);
    assert_eq!(back["apiVersion"], "autoscaling/v2");
    assert_eq!(back["spec"]["maxReplicas"], 8);
    assert!(back["metadata"].get("annotations").is_none(), "{back}");
    let metrics = back["spec"]["metrics"].as_array().unwrap();
    // As in Kubernetes, the CPU target comes back after the others.
    assert_eq!(metrics[0], stored["spec"]["metrics"][1]);
    assert_eq!(metrics[1], stored["spec"]["metrics"][0]);
    assert_eq!(back["spec"]["behavior"], stored["spec"]["behavior"]);
    assert_eq!(back["status"]["conditions"], stored["status"]["conditions"]);
    assert_eq!(back["status"]["desiredReplicas"], 4);
}

#[test]
fn a_v1_create_without_a_cpu_target_is_stored_with_the_default_one() {
    let kind = HorizontalPodAutoscalerV1;
    let mut object = hpa(
        "autoscaling/v1",
        json!({"scaleTargetRef": target(), "maxReplicas": 4}),
    );
    kind.default(&mut object);
    kind.to_stored(&mut object);
    assert_eq!(
        object["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        DEFAULT_CPU_UTILIZATION
    );
    kind.to_served(&mut object);
    assert_eq!(object["spec"]["targetCPUUtilizationPercentage"], 80);
}

#[test]
fn targets_show_current_over_wanted() {
    let spec: Vec<v2::MetricSpec> = serde_json::from_value(json!([
        {"type": "Resource", "resource": {"name": "cpu",
         "target": {"type": "Utilization", "averageUtilization": 50}}},
        {"type": "Resource", "resource": {"name": "memory",
         "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
        {"type": "Pods", "pods": {"metric": {"name": "qps"},
         "target": {"type": "AverageValue", "averageValue": "10"}}}]))
    .unwrap();
    assert_eq!(
        targets(&spec, &[]),
        "cpu: <unknown>/50%, memory: <unknown>/100Mi + 1 more..."
    );
    let status: Vec<v2::MetricStatus> = serde_json::from_value(json!([
        {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 72}}}]))
    .unwrap();
    assert_eq!(targets(&spec[..1], &status), "cpu: 72%/50%");
    assert_eq!(targets(&[], &[]), "<none>");

    let mut object = hpa(
        "autoscaling/v2",
        json!({"scaleTargetRef": target(), "minReplicas": 1, "maxReplicas": 5,
               "metrics": serde_json::to_value(&spec[..1]).unwrap()}),
    );
    object["status"] = json!({"currentReplicas": 2, "desiredReplicas": 2,
                              "currentMetrics": serde_json::to_value(&status).unwrap()});
    let cells = HorizontalPodAutoscaler
        .cells(&object, Timestamp::now())
        .unwrap();
    assert_eq!(
        cells[..6],
        [
            json!("web"),
            json!("Deployment/web"),
            json!("cpu: 72%/50%"),
            json!("1"),
            json!(5),
            json!(2)
        ]
    );
}

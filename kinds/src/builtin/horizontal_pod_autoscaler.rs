//! `autoscaling/v2` HorizontalPodAutoscaler, stored, and `autoscaling/v1`, served from it by
//! conversion: which workload to scale (through its `scale` subresource), between which bounds,
//! on which metrics, and how fast. The horizontal-pod-autoscaler controller keeps its status.
//!
//! The two versions differ in shape, so `autoscaling/v1` converts for real (not by `apiVersion`
//! alone), as kube-apiserver does: v1 has one metric, `targetCPUUtilizationPercentage`; what
//! else a v2 object holds (other metrics, their current values, conditions, behavior) travels in
//! the v1 object's `autoscaling.alpha.kubernetes.io/*` annotations, so that a v1 client's
//! read-modify-write loses nothing. One difference: kube-apiserver writes those annotations in
//! the retired v2beta1 metric shapes; skiff writes the v2 shapes, which it reads back the same.
//! Validation is the v2 rules for both versions, as Kubernetes validates its internal form (a
//! v1 error names the v2 path).

use k8s_openapi::api::autoscaling::{v1, v2};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `autoscaling/v2` HorizontalPodAutoscaler, the stored version.
pub struct HorizontalPodAutoscaler;

/// `autoscaling/v1` HorizontalPodAutoscaler, served by conversion from the stored v2.
pub struct HorizontalPodAutoscalerV1;

/// The v2 names, scope, verbs and subresources.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "autoscaling",
    version: "v2",
    kind: "HorizontalPodAutoscaler",
    plural: "horizontalpodautoscalers",
    singular: "horizontalpodautoscaler",
    short_names: &["hpa"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("autoscaling", "v2", "HorizontalPodAutoscaler")],
    categories: &["all"],
    selectable_fields: &[],
};

/// The v1 names: the same resource in its first version.
pub const INFO_V1: ResourceInfo = ResourceInfo {
    version: "v1",
    subresources: &[status("autoscaling", "v1", "HorizontalPodAutoscaler")],
    ..INFO
};

/// What a v2 object holds beyond v1's fields, by the annotation it travels in on a v1 object.
pub mod annotations {
    /// The metrics other than the CPU utilization target.
    pub const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
    /// Their current values.
    pub const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
    /// The status conditions.
    pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
    /// The scaling behavior.
    pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
}

/// The CPU utilization an autoscaler without metrics aims at, in percent of the pods' requests.
pub const DEFAULT_CPU_UTILIZATION: i32 = 80;
/// The longest scaling policy period, in seconds.
pub const MAX_PERIOD_SECONDS: i32 = 1800;
/// The longest stabilization window, in seconds.
pub const MAX_STABILIZATION_WINDOW_SECONDS: i32 = 3600;

const METRIC_SOURCE_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];
const POLICY_TYPES: &[&str] = &["Percent", "Pods"];
const SELECT_POLICIES: &[&str] = &["Disabled", "Max", "Min"];

/// The scale-up rules Kubernetes fills in where `behavior.scaleUp` leaves them out: no
/// stabilization, and the faster of 4 pods or 100% every 15 seconds.
pub fn default_scale_up() -> v2::HPAScalingRules {
    v2::HPAScalingRules {
        stabilization_window_seconds: Some(0),
        select_policy: Some("Max".into()),
        policies: Some(vec![policy("Pods", 4, 15), policy("Percent", 100, 15)]),
        tolerance: None,
    }
}

/// The scale-down rules Kubernetes fills in: the highest recommendation of the last 5 minutes,
/// then down to any count at once.
pub fn default_scale_down() -> v2::HPAScalingRules {
    v2::HPAScalingRules {
        stabilization_window_seconds: Some(300),
        select_policy: Some("Max".into()),
        policies: Some(vec![policy("Percent", 100, 15)]),
        tolerance: None,
    }
}

fn policy(type_: &str, value: i32, period_seconds: i32) -> v2::HPAScalingPolicy {
    v2::HPAScalingPolicy {
        type_: type_.into(),
        value,
        period_seconds,
    }
}

/// `rules` with what it leaves out taken from `defaults` (`GenerateHPAScale{Up,Down}Rules`).
fn fill_rules(
    rules: Option<v2::HPAScalingRules>,
    defaults: v2::HPAScalingRules,
) -> v2::HPAScalingRules {
    let Some(mut rules) = rules else {
        return defaults;
    };
    if rules.stabilization_window_seconds.is_none() {
        rules.stabilization_window_seconds = defaults.stabilization_window_seconds;
    }
    if rules.select_policy.is_none() {
        rules.select_policy = defaults.select_policy;
    }
    if rules.policies.as_ref().is_none_or(Vec::is_empty) {
        rules.policies = defaults.policies;
    }
    rules
}

/// The v2 defaults (`SetDefaults_HorizontalPodAutoscaler`): one replica at least, CPU at 80%
/// when no metric is named, and a behavior's missing rules filled in.
fn default_v2(hpa: &mut v2::HorizontalPodAutoscaler) {
    let spec = hpa.spec.get_or_insert_with(Default::default);
    spec.min_replicas.get_or_insert(1);
    if spec.metrics.as_ref().is_none_or(Vec::is_empty) {
        spec.metrics = Some(vec![cpu_utilization(DEFAULT_CPU_UTILIZATION)]);
    }
    if let Some(behavior) = spec.behavior.as_mut() {
        behavior.scale_up = Some(fill_rules(behavior.scale_up.take(), default_scale_up()));
        behavior.scale_down = Some(fill_rules(behavior.scale_down.take(), default_scale_down()));
    }
}

fn cpu_utilization(percent: i32) -> v2::MetricSpec {
    v2::MetricSpec {
        type_: "Resource".into(),
        resource: Some(v2::ResourceMetricSource {
            name: "cpu".into(),
            target: v2::MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(percent),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

/// Whether `metric` is a CPU utilization target, the one metric v1 has a field for.
fn is_cpu_utilization(metric: &v2::MetricSpec) -> bool {
    metric.type_ == "Resource"
        && metric
            .resource
            .as_ref()
            .is_some_and(|r| r.name == "cpu" && r.target.average_utilization.is_some())
}

fn to_value<T: Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn from_value<T: DeserializeOwned + Default>(value: &Value) -> T {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

/// An annotation's JSON, if it holds a `T`.
fn take_annotation<T: DeserializeOwned>(meta: &mut ObjectMeta, key: &str) -> Option<T> {
    let annotations = meta.annotations.as_mut()?;
    let value = annotations.remove(key)?;
    if annotations.is_empty() {
        meta.annotations = None;
    }
    serde_json::from_str(&value).ok()
}

fn put_annotation<T: Serialize>(meta: &mut ObjectMeta, key: &str, value: &T) {
    if let Ok(json) = serde_json::to_string(value) {
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(key.into(), json);
    }
}

/// A stored v2 object as `autoscaling/v1` serves it.
pub fn v2_to_v1(hpa: v2::HorizontalPodAutoscaler) -> v1::HorizontalPodAutoscaler {
    let mut metadata = hpa.metadata;
    let spec = hpa.spec.unwrap_or_default();
    let metrics = spec.metrics.unwrap_or_default();
    let target_cpu = metrics
        .iter()
        .find(|m| is_cpu_utilization(m))
        .and_then(|m| m.resource.as_ref()?.target.average_utilization);
    let others: Vec<&v2::MetricSpec> = metrics.iter().filter(|m| !is_cpu_utilization(m)).collect();
    if !others.is_empty() {
        put_annotation(&mut metadata, annotations::METRICS, &others);
    }
    if let Some(behavior) = &spec.behavior {
        put_annotation(&mut metadata, annotations::BEHAVIOR, behavior);
    }
    let status = hpa.status.map(|status| {
        let current = status.current_metrics.unwrap_or_default();
        let current_cpu = current.iter().find_map(|m| {
            let r = m
                .resource
                .as_ref()
                .filter(|r| m.type_ == "Resource" && r.name == "cpu")?;
            r.current.average_utilization
        });
        let other_current: Vec<&v2::MetricStatus> = current
            .iter()
            .filter(|m| {
                !(m.type_ == "Resource"
                    && m.resource.as_ref().is_some_and(|r| {
                        r.name == "cpu" && r.current.average_utilization.is_some()
                    }))
            })
            .collect();
        if !other_current.is_empty() {
            put_annotation(&mut metadata, annotations::CURRENT_METRICS, &other_current);
        }
        if let Some(conditions) = status.conditions.as_ref().filter(|c| !c.is_empty()) {
            put_annotation(&mut metadata, annotations::CONDITIONS, conditions);
        }
        v1::HorizontalPodAutoscalerStatus {
            current_cpu_utilization_percentage: current_cpu,
            current_replicas: status.current_replicas.unwrap_or(0),
            desired_replicas: status.desired_replicas,
            last_scale_time: status.last_scale_time,
            observed_generation: status.observed_generation,
        }
    });
    v1::HorizontalPodAutoscaler {
        metadata,
        spec: Some(v1::HorizontalPodAutoscalerSpec {
            max_replicas: spec.max_replicas,
            min_replicas: spec.min_replicas,
            scale_target_ref: v1::CrossVersionObjectReference {
                api_version: spec.scale_target_ref.api_version,
                kind: spec.scale_target_ref.kind,
                name: spec.scale_target_ref.name,
            },
            target_cpu_utilization_percentage: target_cpu,
        }),
        status,
    }
}

/// A v1 object as it is stored in v2: its annotations give back what v1 has no field for.
pub fn v1_to_v2(hpa: v1::HorizontalPodAutoscaler) -> v2::HorizontalPodAutoscaler {
    let mut metadata = hpa.metadata;
    let spec = hpa.spec.unwrap_or_default();
    let mut metrics: Vec<v2::MetricSpec> =
        take_annotation(&mut metadata, annotations::METRICS).unwrap_or_default();
    if let Some(percent) = spec.target_cpu_utilization_percentage {
        metrics.push(cpu_utilization(percent));
    }
    let behavior: Option<v2::HorizontalPodAutoscalerBehavior> =
        take_annotation(&mut metadata, annotations::BEHAVIOR);
    let mut current: Vec<v2::MetricStatus> =
        take_annotation(&mut metadata, annotations::CURRENT_METRICS).unwrap_or_default();
    let conditions: Option<Vec<v2::HorizontalPodAutoscalerCondition>> =
        take_annotation(&mut metadata, annotations::CONDITIONS);
    let status = hpa.status.map(|status| {
        if let Some(percent) = status.current_cpu_utilization_percentage {
            current.push(v2::MetricStatus {
                type_: "Resource".into(),
                resource: Some(v2::ResourceMetricStatus {
                    name: "cpu".into(),
                    current: v2::MetricValueStatus {
                        average_utilization: Some(percent),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            });
        }
        v2::HorizontalPodAutoscalerStatus {
            conditions,
            current_metrics: (!current.is_empty()).then_some(current),
            current_replicas: Some(status.current_replicas),
            desired_replicas: status.desired_replicas,
            last_scale_time: status.last_scale_time,
            observed_generation: status.observed_generation,
        }
    });
    v2::HorizontalPodAutoscaler {
        metadata,
        spec: Some(v2::HorizontalPodAutoscalerSpec {
            behavior,
            max_replicas: spec.max_replicas,
            metrics: (!metrics.is_empty()).then_some(metrics),
            min_replicas: spec.min_replicas,
            scale_target_ref: v2::CrossVersionObjectReference {
                api_version: spec.scale_target_ref.api_version,
                kind: spec.scale_target_ref.kind,
                name: spec.scale_target_ref.name,
            },
        }),
        status,
    }
}

/// Converts `object` in place through `convert` into `api_version`, unless it is in that
/// version already.
fn convert_value<A, B>(object: &mut Value, api_version: &str, convert: impl FnOnce(A) -> B)
where
    A: DeserializeOwned + Default,
    B: Serialize,
{
    // Already in that version (a response rendering what was just written): nothing to do.
    if !object.is_object() || object["apiVersion"] == api_version {
        return;
    }
    let converted = to_value(&convert(from_value::<A>(object)));
    if let Value::Object(mut map) = converted {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(INFO.kind));
        *object = Value::Object(map);
    }
}

fn validate_reference(kind: &str, name: &str, path: &Path, errs: &mut Vec<FieldError>) {
    for (field, value) in [("kind", kind), ("name", name)] {
        if value.is_empty() {
            errs.push(FieldError::required(path.child(field), ""));
        } else {
            for m in names::path_segment_name(value, false) {
                errs.push(FieldError::invalid(path.child(field), value, m));
            }
        }
    }
}

fn positive(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> bool {
    skiff_meta::quantity::parse_k8s(q).is_ok_and(|q| !q.is_zero() && !q.is_negative())
}

fn validate_target(target: &v2::MetricTarget, path: &Path, errs: &mut Vec<FieldError>) {
    if target.type_.is_empty() {
        errs.push(FieldError::required(
            path.child("type"),
            "must specify a metric target type",
        ));
    }
    if !["Utilization", "Value", "AverageValue"].contains(&target.type_.as_str()) {
        errs.push(FieldError::invalid(
            path.child("type"),
            target.type_.as_str(),
            "must be either Utilization, Value, or AverageValue",
        ));
    }
    if let Some(v) = target.value.as_ref().filter(|v| !positive(v)) {
        errs.push(FieldError::invalid(
            path.child("value"),
            v.0.as_str(),
            "must be positive",
        ));
    }
    if let Some(v) = target.average_value.as_ref().filter(|v| !positive(v)) {
        errs.push(FieldError::invalid(
            path.child("averageValue"),
            v.0.as_str(),
            "must be positive",
        ));
    }
    if let Some(u) = target.average_utilization.filter(|u| *u < 1) {
        errs.push(FieldError::invalid(
            path.child("averageUtilization"),
            u,
            "must be greater than 0",
        ));
    }
}

fn validate_identifier(id: &v2::MetricIdentifier, path: &Path, errs: &mut Vec<FieldError>) {
    let path = path.child("name");
    if id.name.is_empty() {
        errs.push(FieldError::required(path, "must specify a metric name"));
    } else {
        for m in names::path_segment_name(&id.name, false) {
            errs.push(FieldError::invalid(path.clone(), id.name.as_str(), m));
        }
    }
}

/// A resource source's rules, shared by `resource` and `containerResource`.
fn validate_resource_target(
    name: &str,
    target: &v2::MetricTarget,
    path: &Path,
    errs: &mut Vec<FieldError>,
) {
    if name.is_empty() {
        errs.push(FieldError::required(
            path.child("name"),
            "must specify a resource name",
        ));
    }
    let target_path = path.child("target");
    validate_target(target, &target_path, errs);
    match (&target.average_utilization, &target.average_value) {
        (None, None) => errs.push(FieldError::required(
            target_path.child("averageUtilization"),
            "must set either a target raw value or a target utilization",
        )),
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(
            target_path.child("averageValue"),
            "may not set both a target raw value and a target utilization",
        )),
        _ => {}
    }
}

fn validate_metric(metric: &v2::MetricSpec, path: &Path, errs: &mut Vec<FieldError>) {
    if metric.type_.is_empty() {
        errs.push(FieldError::required(
            path.child("type"),
            "must specify a metric source type",
        ));
    } else if !METRIC_SOURCE_TYPES.contains(&metric.type_.as_str()) {
        errs.push(FieldError::not_supported(
            path.child("type"),
            metric.type_.as_str(),
            METRIC_SOURCE_TYPES,
        ));
    }
    let present: Vec<&str> = [
        ("object", metric.object.is_some()),
        ("external", metric.external.is_some()),
        ("pods", metric.pods.is_some()),
        ("resource", metric.resource.is_some()),
        ("containerResource", metric.container_resource.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect();
    if let Some(object) = &metric.object {
        let p = path.child("object");
        validate_reference(
            &object.described_object.kind,
            &object.described_object.name,
            &p.child("describedObject"),
            errs,
        );
        validate_identifier(&object.metric, &p.child("metric"), errs);
        validate_target(&object.target, &p.child("target"), errs);
        if object.target.value.is_none() && object.target.average_value.is_none() {
            errs.push(FieldError::required(
                p.child("target").child("averageValue"),
                "must set either a target value or averageValue",
            ));
        }
    }
    if let Some(external) = &metric.external {
        let p = path.child("external");
        validate_identifier(&external.metric, &p.child("metric"), errs);
        validate_target(&external.target, &p.child("target"), errs);
        match (&external.target.value, &external.target.average_value) {
            (None, None) => errs.push(FieldError::required(
                p.child("target").child("averageValue"),
                "must set either a target value for metric or a per-pod target",
            )),
            (Some(_), Some(_)) => errs.push(FieldError::forbidden(
                p.child("target").child("value"),
                "may not set both a target value for metric and a per-pod target",
            )),
            _ => {}
        }
    }
    if let Some(pods) = &metric.pods {
        let p = path.child("pods");
        validate_identifier(&pods.metric, &p.child("metric"), errs);
        validate_target(&pods.target, &p.child("target"), errs);
        if pods.target.average_value.is_none() {
            errs.push(FieldError::required(
                p.child("target").child("averageValue"),
                "must specify a positive target averageValue",
            ));
        }
    }
    if let Some(resource) = &metric.resource {
        validate_resource_target(
            &resource.name,
            &resource.target,
            &path.child("resource"),
            errs,
        );
    }
    if let Some(resource) = &metric.container_resource {
        let p = path.child("containerResource");
        if resource.container.is_empty() {
            errs.push(FieldError::required(
                p.child("container"),
                "must specify a container",
            ));
        } else {
            for m in names::dns1123_label(&resource.container) {
                errs.push(FieldError::invalid(
                    p.child("container"),
                    resource.container.as_str(),
                    m,
                ));
            }
        }
        validate_resource_target(&resource.name, &resource.target, &p, errs);
    }
    let expected = match metric.type_.as_str() {
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "External" => "external",
        _ => "",
    };
    if !expected.is_empty() && !present.contains(&expected) {
        errs.push(FieldError::required(
            path.child(expected),
            "must populate information for the given metric source",
        ));
    }
    if present.len() > 1 {
        for field in present.iter().filter(|f| **f != expected) {
            errs.push(FieldError::forbidden(
                path.child(field),
                "must populate the given metric source only",
            ));
        }
    }
}

fn validate_rules(rules: &v2::HPAScalingRules, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(window) = rules.stabilization_window_seconds {
        let p = path.child("stabilizationWindowSeconds");
        if window < 0 {
            errs.push(FieldError::invalid(
                p,
                window,
                "must be greater than or equal to zero",
            ));
        } else if window > MAX_STABILIZATION_WINDOW_SECONDS {
            errs.push(FieldError::invalid(
                p,
                window,
                format!("must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"),
            ));
        }
    }
    if let Some(select) = rules
        .select_policy
        .as_deref()
        .filter(|s| !SELECT_POLICIES.contains(s))
    {
        errs.push(FieldError::not_supported(
            path.child("selectPolicy"),
            select,
            SELECT_POLICIES,
        ));
    }
    let policies_path = path.child("policies");
    let policies = rules.policies.as_deref().unwrap_or_default();
    if policies.is_empty() {
        errs.push(FieldError::required(
            policies_path.clone(),
            "must specify at least one Policy",
        ));
    }
    for (i, policy) in policies.iter().enumerate() {
        let p = policies_path.index(i);
        if !POLICY_TYPES.contains(&policy.type_.as_str()) {
            errs.push(FieldError::not_supported(
                p.child("type"),
                policy.type_.as_str(),
                POLICY_TYPES,
            ));
        }
        if policy.value <= 0 {
            errs.push(FieldError::invalid(
                p.child("value"),
                policy.value,
                "must be greater than zero",
            ));
        }
        if policy.period_seconds <= 0 {
            errs.push(FieldError::invalid(
                p.child("periodSeconds"),
                policy.period_seconds,
                "must be greater than zero",
            ));
        } else if policy.period_seconds > MAX_PERIOD_SECONDS {
            errs.push(FieldError::invalid(
                p.child("periodSeconds"),
                policy.period_seconds,
                format!("must be less than or equal to {MAX_PERIOD_SECONDS}"),
            ));
        }
    }
}

/// The v2 rules (`ValidateHorizontalPodAutoscaler`), which both versions answer to.
fn validate_v2(hpa: &v2::HorizontalPodAutoscaler) -> Vec<FieldError> {
    let spec = hpa.spec.clone().unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = Vec::new();
    if let Some(min) = spec.min_replicas.filter(|m| *m < 1) {
        errs.push(FieldError::invalid(
            path.child("minReplicas"),
            min,
            "must be greater than or equal to 1",
        ));
    }
    if spec.max_replicas < 1 {
        errs.push(FieldError::invalid(
            path.child("maxReplicas"),
            spec.max_replicas,
            "must be greater than 0",
        ));
    }
    if spec.min_replicas.is_some_and(|min| spec.max_replicas < min) {
        errs.push(FieldError::invalid(
            path.child("maxReplicas"),
            spec.max_replicas,
            "must be greater than or equal to `minReplicas`",
        ));
    }
    validate_reference(
        &spec.scale_target_ref.kind,
        &spec.scale_target_ref.name,
        &path.child("scaleTargetRef"),
        &mut errs,
    );
    for (i, metric) in spec
        .metrics
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        validate_metric(metric, &path.child("metrics").index(i), &mut errs);
    }
    if let Some(behavior) = &spec.behavior {
        let p = path.child("behavior");
        if let Some(up) = &behavior.scale_up {
            validate_rules(up, &p.child("scaleUp"), &mut errs);
        }
        if let Some(down) = &behavior.scale_down {
            validate_rules(down, &p.child("scaleDown"), &mut errs);
        }
    }
    errs
}

fn validate_status_v2(hpa: &v2::HorizontalPodAutoscaler) -> Vec<FieldError> {
    let status = hpa.status.clone().unwrap_or_default();
    let mut errs = Vec::new();
    for (field, value) in [
        ("currentReplicas", status.current_replicas.unwrap_or(0)),
        ("desiredReplicas", status.desired_replicas),
    ] {
        if value < 0 {
            errs.push(FieldError::invalid(
                Path::new("status").child(field),
                value,
                "must be greater than or equal to 0",
            ));
        }
    }
    errs
}

/// What `kubectl get hpa` shows in TARGETS: the first two metrics as `current/target`, the
/// rest counted (`+ 1 more...`), `<unknown>` for what is not measured yet.
pub fn targets(spec: &[v2::MetricSpec], status: &[v2::MetricStatus]) -> String {
    const SHOWN: usize = 2;
    if spec.is_empty() {
        return "<none>".into();
    }
    let quantity = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.map_or_else(|| "<unknown>".to_string(), |q| q.0.clone())
    };
    let percent = |p: Option<i32>| p.map_or_else(|| "<unknown>".to_string(), |p| format!("{p}%"));
    let mut shown = Vec::new();
    for (i, metric) in spec.iter().enumerate() {
        let current = status.get(i);
        let text = match metric.type_.as_str() {
            "Resource" | "ContainerResource" => {
                let (name, target, value) = match (&metric.resource, &metric.container_resource) {
                    (Some(r), _) => (
                        r.name.as_str(),
                        &r.target,
                        current
                            .and_then(|c| c.resource.as_ref())
                            .map(|c| &c.current),
                    ),
                    (None, Some(r)) => (
                        r.name.as_str(),
                        &r.target,
                        current
                            .and_then(|c| c.container_resource.as_ref())
                            .map(|c| &c.current),
                    ),
                    (None, None) => {
                        shown.push("<unknown type>".to_string());
                        continue;
                    }
                };
                match &target.average_value {
                    Some(avg) => format!(
                        "{name}: {}/{}",
                        quantity(value.and_then(|v| v.average_value.as_ref())),
                        avg.0
                    ),
                    None => format!(
                        "{name}: {}/{}",
                        percent(value.and_then(|v| v.average_utilization)),
                        target
                            .average_utilization
                            .map_or_else(|| "<auto>".to_string(), |p| format!("{p}%"))
                    ),
                }
            }
            "Pods" => {
                let target = metric
                    .pods
                    .as_ref()
                    .and_then(|p| p.target.average_value.as_ref());
                format!(
                    "{}/{}",
                    quantity(current.and_then(|c| c.pods.as_ref()?.current.average_value.as_ref())),
                    quantity(target)
                )
            }
            "Object" | "External" => {
                let (target, value) = match (&metric.object, &metric.external) {
                    (Some(o), _) => (
                        &o.target,
                        current.and_then(|c| c.object.as_ref()).map(|c| &c.current),
                    ),
                    (None, Some(e)) => (
                        &e.target,
                        current
                            .and_then(|c| c.external.as_ref())
                            .map(|c| &c.current),
                    ),
                    (None, None) => {
                        shown.push("<unknown type>".to_string());
                        continue;
                    }
                };
                match &target.average_value {
                    Some(avg) => format!(
                        "{}/{} (avg)",
                        quantity(value.and_then(|v| v.average_value.as_ref())),
                        avg.0
                    ),
                    None => format!(
                        "{}/{}",
                        quantity(value.and_then(|v| v.value.as_ref())),
                        quantity(target.value.as_ref())
                    ),
                }
            }
            _ => "<unknown type>".to_string(),
        };
        shown.push(text);
    }
    let count = shown.len();
    if count > SHOWN {
        shown.truncate(SHOWN);
        return format!("{} + {} more...", shown.join(", "), count - SHOWN);
    }
    shown.join(", ")
}

fn columns() -> Vec<Column> {
    use table::{AGE, NAME, col};
    vec![
        NAME,
        col(
            "Reference",
            "string",
            "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.",
        ),
        col(
            "Targets",
            "string",
            "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).",
        ),
        col(
            "MinPods",
            "string",
            "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
        ),
        col(
            "MaxPods",
            "integer",
            "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.",
        ),
        col(
            "Replicas",
            "integer",
            "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.",
        ),
        AGE,
    ]
}

fn cells(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    let hpa: v2::HorizontalPodAutoscaler = serde_json::from_value(object.clone()).ok()?;
    let spec = hpa.spec.unwrap_or_default();
    let status = hpa.status.unwrap_or_default();
    Some(vec![
        json!(hpa.metadata.name.unwrap_or_default()),
        json!(format!(
            "{}/{}",
            spec.scale_target_ref.kind, spec.scale_target_ref.name
        )),
        json!(targets(
            spec.metrics.as_deref().unwrap_or_default(),
            status.current_metrics.as_deref().unwrap_or_default()
        )),
        json!(
            spec.min_replicas
                .map_or_else(|| "<unset>".to_string(), |m| m.to_string())
        ),
        json!(spec.max_replicas),
        json!(status.current_replicas.unwrap_or(0)),
        table::age_of(object, now),
    ])
}

/// `object` (either version) as a typed v2 object.
fn as_v2(object: &Value) -> Result<v2::HorizontalPodAutoscaler, FieldError> {
    if object["apiVersion"] == "autoscaling/v1" {
        let v1: v1::HorizontalPodAutoscaler = decode(object, "")?;
        return Ok(v1_to_v2(v1));
    }
    decode(object, "")
}

impl Kind for HorizontalPodAutoscaler {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<v2::HorizontalPodAutoscaler>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<v2::HorizontalPodAutoscaler>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        cells(object, now)
    }

    fn default(&self, object: &mut Value) {
        let Ok(mut hpa) = serde_json::from_value::<v2::HorizontalPodAutoscaler>(object.clone())
        else {
            return;
        };
        default_v2(&mut hpa);
        if let (Value::Object(target), Value::Object(spec)) =
            (object, to_value(&hpa.spec.unwrap_or_default()))
        {
            target.insert("spec".into(), Value::Object(spec));
        }
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        Ok(validate_v2(&as_v2(new)?))
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        Ok(validate_status_v2(&as_v2(new)?))
    }
}

impl Kind for HorizontalPodAutoscalerV1 {
    fn info(&self) -> &'static ResourceInfo {
        &INFO_V1
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<v1::HorizontalPodAutoscaler>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<v1::HorizontalPodAutoscaler>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let mut stored = object.clone();
        self.to_stored(&mut stored);
        cells(&stored, now)
    }

    fn default(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("minReplicas").or_insert(json!(1));
        }
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        let mut hpa = as_v2(new)?;
        // The internal form is validated, defaults and all.
        default_v2(&mut hpa);
        Ok(validate_v2(&hpa))
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        Ok(validate_status_v2(&as_v2(new)?))
    }

    fn storage_version(&self) -> &'static str {
        INFO.version
    }

    fn to_served(&self, object: &mut Value) {
        convert_value(object, "autoscaling/v1", v2_to_v1);
    }

    fn to_stored(&self, object: &mut Value) {
        convert_value(object, "autoscaling/v2", |hpa| {
            let mut hpa = v1_to_v2(hpa);
            // Stored objects carry the v2 defaults, as if written through v2.
            default_v2(&mut hpa);
            hpa
        });
    }
}

#[cfg(test)]
mod tests;

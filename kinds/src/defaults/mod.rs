//! Defaulting of API objects as Kubernetes' v1 defaulters do (`pkg/apis/*/v1/defaults.go`),
//! applied to JSON objects before validation, plus the few create-time fills the registry
//! strategies and admission plugins make (namespace finalizer, pod tolerations).
//!
//! Each kind's part is decoded into its k8s-openapi type, defaulted there and written back; a
//! part that does not decode is left untouched for validation to report.
//!
//! # Layout
//! - `pod`: pod specs, containers, probes, ports, volumes (shared by the workload templates).
//! - this file: the per-kind entry point and the other kinds.

mod pod;

use k8s_openapi::api::apps::v1::{
    DaemonSetSpec, DeploymentSpec, ReplicaSetSpec, RollingUpdateStatefulSetStrategy,
    StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};
use k8s_openapi::api::batch::v1::{CronJobSpec, JobSpec};
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, ReplicationControllerSpec, Toleration};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

pub use pod::{default_container_image_pull_policy, default_pod_spec};

/// How long pods tolerate a not-ready or unreachable node before eviction (the
/// `DefaultTolerationSeconds` admission plugin's default).
pub const DEFAULT_NOT_READY_TOLERATION_SECONDS: i64 = 300;

/// How long the `DefaultTolerationSeconds` admission plugin lets new pods tolerate the
/// `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable` `NoExecute` taints
/// (kube-apiserver's `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TolerationSeconds {
    /// For `node.kubernetes.io/not-ready`.
    pub not_ready: i64,
    /// For `node.kubernetes.io/unreachable`.
    pub unreachable: i64,
}

impl Default for TolerationSeconds {
    fn default() -> Self {
        TolerationSeconds {
            not_ready: DEFAULT_NOT_READY_TOLERATION_SECONDS,
            unreachable: DEFAULT_NOT_READY_TOLERATION_SECONDS,
        }
    }
}

/// The v1 defaults of a Pod, in place.
pub fn pod(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_part(map, "spec", |spec: &mut PodSpec| {
        default_pod_spec(spec);
        pod::default_pod_only(spec);
    });
}

/// The v1 defaults of a Service, in place.
pub fn service(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_object(map, "spec", default_service_spec);
}

/// The v1 defaults of a Deployment, in place.
pub fn deployment(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_spec_keeping_selector(map, |spec: &mut DeploymentSpec| {
        if spec.replicas.is_none() {
            spec.replicas = Some(1);
        }
        let strategy = spec.strategy.get_or_insert_with(Default::default);
        if strategy.type_.as_deref().unwrap_or("").is_empty() {
            strategy.type_ = Some("RollingUpdate".into());
        }
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy.rolling_update.get_or_insert_with(Default::default);
            ru.max_unavailable
                .get_or_insert_with(|| IntOrString::String("25%".into()));
            ru.max_surge
                .get_or_insert_with(|| IntOrString::String("25%".into()));
        }
        spec.revision_history_limit.get_or_insert(10);
        spec.progress_deadline_seconds.get_or_insert(600);
        default_template(&mut spec.template);
    });
}

/// The v1 defaults of a ReplicaSet, in place.
pub fn replica_set(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_spec_keeping_selector(map, |spec: &mut ReplicaSetSpec| {
        spec.replicas.get_or_insert(1);
        if let Some(t) = spec.template.as_mut() {
            default_template(t);
        }
    });
}

/// The v1 defaults of a ReplicationController, in place: an empty selector, and empty object
/// labels, become the template's labels; one replica; the template's pod defaults.
pub fn replication_controller(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let template_labels = map
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
        .cloned();
    with_part(map, "spec", |spec: &mut ReplicationControllerSpec| {
        if let Some(Value::Object(labels)) = &template_labels
            && spec.selector.as_ref().is_none_or(|s| s.is_empty())
        {
            spec.selector = Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect(),
            );
        }
        spec.replicas.get_or_insert(1);
        if let Some(t) = spec.template.as_mut() {
            default_template(t);
        }
    });
    if let Some(labels) = template_labels {
        with_object(map, "metadata", |meta| {
            if meta
                .get("labels")
                .and_then(Value::as_object)
                .is_none_or(|l| l.is_empty())
            {
                meta.insert("labels".into(), labels);
            }
        });
    }
}

/// The v1 defaults of a DaemonSet, in place.
pub fn daemon_set(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_spec_keeping_selector(map, |spec: &mut DaemonSetSpec| {
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        if strategy.type_.as_deref().unwrap_or("").is_empty() {
            strategy.type_ = Some("RollingUpdate".into());
        }
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy.rolling_update.get_or_insert_with(Default::default);
            ru.max_unavailable.get_or_insert(IntOrString::Int(1));
            ru.max_surge.get_or_insert(IntOrString::Int(0));
        }
        spec.revision_history_limit.get_or_insert(10);
        default_template(&mut spec.template);
    });
}

/// The v1 defaults of a StatefulSet, in place (`SetDefaults_StatefulSet`): OrderedReady pod
/// management, a RollingUpdate at partition 0, one replica, a history of 10, claims retained
/// when the set is deleted or scaled down.
pub fn stateful_set(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_spec_keeping_selector(map, |spec: &mut StatefulSetSpec| {
        if spec
            .pod_management_policy
            .as_deref()
            .unwrap_or("")
            .is_empty()
        {
            spec.pod_management_policy = Some("OrderedReady".into());
        }
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        if strategy.type_.as_deref().unwrap_or("").is_empty() {
            strategy.type_ = Some("RollingUpdate".into());
        }
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateStatefulSetStrategy::default);
            ru.partition.get_or_insert(0);
        }
        let retention = spec
            .persistent_volume_claim_retention_policy
            .get_or_insert_with(StatefulSetPersistentVolumeClaimRetentionPolicy::default);
        for policy in [&mut retention.when_deleted, &mut retention.when_scaled] {
            if policy.as_deref().unwrap_or("").is_empty() {
                *policy = Some("Retain".into());
            }
        }
        spec.replicas.get_or_insert(1);
        spec.revision_history_limit.get_or_insert(10);
        default_template(&mut spec.template);
    });
}

/// The v1 defaults of a Job, in place (`SetDefaults_Job`): completions and parallelism 1 when
/// both are unset (a work-queue Job that sets only parallelism keeps no completions), a backoff
/// limit of 6 (unlimited with a per-index limit), NonIndexed, not suspended, pods replaced once
/// terminal when a pod failure policy says how failures count (once terminating otherwise),
/// a generated selector, and the template's labels on a Job that has none.
pub fn job(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_spec_keeping_selector(map, |spec: &mut JobSpec| {
        if spec.completions.is_none() && spec.parallelism.is_none() {
            spec.completions = Some(1);
        }
        spec.parallelism.get_or_insert(1);
        if spec.backoff_limit.is_none() {
            spec.backoff_limit = Some(if spec.backoff_limit_per_index.is_some() {
                i32::MAX
            } else {
                6
            });
        }
        if spec.completion_mode.as_deref().unwrap_or("").is_empty() {
            spec.completion_mode = Some("NonIndexed".into());
        }
        spec.suspend.get_or_insert(false);
        if let Some(policy) = spec.pod_failure_policy.as_mut() {
            for rule in &mut policy.rules {
                for pattern in rule.on_pod_conditions.iter_mut().flatten() {
                    if pattern.status.is_empty() {
                        pattern.status = "True".into();
                    }
                }
            }
        }
        if spec.pod_replacement_policy.is_none() {
            spec.pod_replacement_policy = Some(if spec.pod_failure_policy.is_some() {
                "Failed".into()
            } else {
                "TerminatingOrFailed".into()
            });
        }
        spec.manual_selector.get_or_insert(false);
        default_template(&mut spec.template);
    });
    let template_labels = map
        .get("spec")
        .and_then(|s| s.pointer("/template/metadata/labels"))
        .filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
        .cloned();
    if let Some(labels) = template_labels
        && let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(|l| l.is_empty())
    {
        meta.insert("labels".into(), labels);
    }
}

/// The v1 defaults of a CronJob, in place (`SetDefaults_CronJob`): concurrent runs allowed, not
/// suspended, three successful and one failed Job kept. The Job template's own fields are left
/// as written (a Job's defaults apply when the controller creates it); its pod template gets the
/// pod defaults, as the generated defaulter walks into it.
pub fn cron_job(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_part(map, "spec", |spec: &mut CronJobSpec| {
        if spec.concurrency_policy.as_deref().unwrap_or("").is_empty() {
            spec.concurrency_policy = Some("Allow".into());
        }
        spec.suspend.get_or_insert(false);
        spec.successful_jobs_history_limit.get_or_insert(3);
        spec.failed_jobs_history_limit.get_or_insert(1);
        if let Some(job) = spec.job_template.spec.as_mut() {
            default_template(&mut job.template);
        }
    });
}

/// The labels kube-apiserver's Job strategy puts on a new Job's pod template, and the selector
/// it generates from them, unless the Job says `manualSelector: true`: the Job's name
/// (`batch.kubernetes.io/job-name` and the legacy `job-name`) and uid
/// (`batch.kubernetes.io/controller-uid` and the legacy `controller-uid`); labels the client set
/// are kept, for validation to judge. Runs after the uid is assigned.
pub fn generate_job_selector(obj: &mut Value) {
    if obj.pointer("/spec/manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    let name = obj.pointer("/metadata/name").cloned().unwrap_or(json!(""));
    let uid = obj.pointer("/metadata/uid").cloned().unwrap_or(json!(""));
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let template = spec.entry("template").or_insert_with(|| json!({}));
    if !template.is_object() {
        return;
    }
    let meta = template
        .as_object_mut()
        .expect("checked to be an object")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if labels.is_null() {
        *labels = json!({});
    }
    let Some(labels) = labels.as_object_mut() else {
        return;
    };
    for (key, value) in [
        (JOB_NAME_LEGACY_LABEL, &name),
        (JOB_NAME_LABEL, &name),
        (CONTROLLER_UID_LEGACY_LABEL, &uid),
        (CONTROLLER_UID_LABEL, &uid),
    ] {
        labels.entry(key).or_insert_with(|| value.clone());
    }
    let selector = spec.entry("selector").or_insert_with(|| json!({}));
    if selector.is_null() {
        *selector = json!({});
    }
    let Some(selector) = selector.as_object_mut() else {
        return;
    };
    let match_labels = selector.entry("matchLabels").or_insert_with(|| json!({}));
    if match_labels.is_null() {
        *match_labels = json!({});
    }
    if let Some(match_labels) = match_labels.as_object_mut() {
        match_labels
            .entry(CONTROLLER_UID_LABEL)
            .or_insert_with(|| uid.clone());
    }
}

/// The label naming the Job a pod belongs to.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The label with the uid of the Job a pod belongs to (what the generated selector selects).
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// [`JOB_NAME_LABEL`] before the `batch.kubernetes.io/` prefix.
pub const JOB_NAME_LEGACY_LABEL: &str = "job-name";
/// [`CONTROLLER_UID_LABEL`] before the `batch.kubernetes.io/` prefix.
pub const CONTROLLER_UID_LEGACY_LABEL: &str = "controller-uid";

/// The v1 defaults of a Secret, in place.
pub fn secret(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    default_secret(map);
}

/// The v1 defaults of a Namespace, in place.
pub fn namespace(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    default_namespace(map);
}

/// The v1 defaults of a Node, in place.
pub fn node(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    with_object(map, "status", |status| {
        if status.get("allocatable").is_none_or(Value::is_null)
            && let Some(capacity) = status.get("capacity").filter(|c| c.is_object())
        {
            let capacity = capacity.clone();
            status.insert("allocatable".into(), capacity);
        }
    });
}

/// The v1 defaults of an Endpoints object, in place.
pub fn endpoints(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if let Some(subsets) = map.get_mut("subsets").and_then(Value::as_array_mut) {
        for subset in subsets {
            for port in subset
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                default_string(port, "protocol", "TCP");
            }
        }
    }
}

/// The v1 defaults of an EndpointSlice, in place.
pub fn endpoint_slice(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if let Some(ports) = map.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            default_string(port, "protocol", "TCP");
            if port.get("name").is_none_or(Value::is_null)
                && let Some(p) = port.as_object_mut()
            {
                p.insert("name".into(), json!(""));
            }
        }
    }
}

/// The namespace strategy's create-time fill (`PrepareForCreate`), which unlike defaults does
/// not run on updates: a namespace starts `Active` with the `kubernetes` finalizer.
pub fn prepare_namespace_for_create(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    {
        map.insert("status".into(), json!({"phase": "Active"}));
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        if let Some(spec) = spec.as_object_mut() {
            let finalizers = spec.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = finalizers.as_array_mut()
                && !list.iter().any(|f| f == "kubernetes")
            {
                list.push(json!("kubernetes"));
            }
        }
    }
}

/// The `DefaultTolerationSeconds` admission plugin: on pod creation, tolerate the
/// `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable` NoExecute taints for
/// `seconds` (300 s by default) unless the pod already tolerates them. `obj` is a Pod.
pub fn default_tolerations(obj: &mut Value, seconds: TolerationSeconds) {
    with_part(
        obj.as_object_mut().map_or(&mut Map::new(), |m| m),
        "spec",
        |spec: &mut PodSpec| {
            add_default_tolerations(spec, seconds);
        },
    );
}

/// [`default_tolerations`] on a typed spec.
pub fn add_default_tolerations(spec: &mut PodSpec, seconds: TolerationSeconds) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let tolerates = |key: &str| {
        tolerations.iter().any(|t| {
            let k = t.key.as_deref().unwrap_or("");
            let e = t.effect.as_deref().unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    let mut add = Vec::new();
    for (key, seconds) in [
        ("node.kubernetes.io/not-ready", seconds.not_ready),
        ("node.kubernetes.io/unreachable", seconds.unreachable),
    ] {
        if !tolerates(key) {
            add.push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(seconds),
                value: None,
            });
        }
    }
    tolerations.extend(add);
}

/// Keeps what the cluster allocated when an update omits it (the service strategy's
/// `PrepareForUpdate`): a missing `clusterIP`/`clusterIPs` and node ports are taken from `old`.
pub fn carry_over_service_allocations(new: &mut Value, old: &Value) {
    let (Some(new_spec), Some(old_spec)) = (
        new.get_mut("spec").and_then(Value::as_object_mut),
        old.get("spec").and_then(Value::as_object),
    ) else {
        return;
    };
    let unset = |v: Option<&Value>| v.is_none_or(|v| v.is_null() || v == "" || v == &json!([]));
    let same_type = new_spec.get("type") == old_spec.get("type")
        || (unset(new_spec.get("type")) && old_spec.get("type") == Some(&json!("ClusterIP")));
    if !same_type {
        return;
    }
    for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        if unset(new_spec.get(key))
            && let Some(v) = old_spec.get(key).filter(|v| !v.is_null())
        {
            new_spec.insert(key.into(), v.clone());
        }
    }
    let old_ports = old_spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = new_spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            let Some(p) = port.as_object_mut() else {
                continue;
            };
            if p.get("nodePort").is_some_and(|v| !v.is_null()) {
                continue;
            }
            let matching = old_ports.iter().find(|o| {
                o.get("port") == p.get("port")
                    && o.get("protocol").unwrap_or(&json!("TCP"))
                        == p.get("protocol").unwrap_or(&json!("TCP"))
            });
            if let Some(np) = matching
                .and_then(|o| o.get("nodePort"))
                .filter(|v| !v.is_null())
            {
                p.insert("nodePort".into(), np.clone());
            }
        }
    }
}

fn default_template(t: &mut PodTemplateSpec) {
    default_pod_spec(t.spec.get_or_insert_with(Default::default));
}

fn default_string(v: &mut Value, key: &str, default: &str) {
    if let Some(map) = v.as_object_mut()
        && map
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        map.insert(key.into(), Value::String(default.into()));
    }
}

/// Decodes `map[key]` (an empty object when missing) as `T`, lets `f` change it and writes it
/// back; leaves the map alone when the part does not decode.
fn with_part<T: DeserializeOwned + Serialize>(
    map: &mut Map<String, Value>,
    key: &str,
    f: impl FnOnce(&mut T),
) {
    let current = map.get(key).cloned().unwrap_or_else(|| json!({}));
    let current = if current.is_null() {
        json!({})
    } else {
        current
    };
    let Ok(mut typed) = serde_json::from_value::<T>(current) else {
        return;
    };
    f(&mut typed);
    if let Ok(v) = serde_json::to_value(&typed) {
        map.insert(key.into(), v);
    }
}

/// [`with_part`] on `spec`, but a selector the object did not have stays absent (k8s-openapi
/// makes the required selector non-optional; validation must still see it missing).
fn with_spec_keeping_selector<T: DeserializeOwned + Serialize>(
    map: &mut Map<String, Value>,
    f: impl FnOnce(&mut T),
) {
    let had_selector = map
        .get("spec")
        .and_then(|s| s.get("selector"))
        .is_some_and(|s| !s.is_null());
    with_part(map, "spec", f);
    if !had_selector && let Some(spec) = map.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("selector");
    }
}

fn with_object(map: &mut Map<String, Value>, key: &str, f: impl FnOnce(&mut Map<String, Value>)) {
    let entry = map.entry(key).or_insert_with(|| json!({}));
    if entry.is_null() {
        *entry = json!({});
    }
    if let Some(obj) = entry.as_object_mut() {
        f(obj);
    }
}

fn default_service_spec(spec: &mut Map<String, Value>) {
    let get = |spec: &Map<String, Value>, k: &str| {
        spec.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if get(spec, "sessionAffinity").is_empty() {
        spec.insert("sessionAffinity".into(), json!("None"));
    }
    if get(spec, "sessionAffinity") == "None" {
        spec.remove("sessionAffinityConfig");
    }
    if get(spec, "type").is_empty() {
        spec.insert("type".into(), json!("ClusterIP"));
    }
    let ty = get(spec, "type");
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            default_string(port, "protocol", "TCP");
            let Some(p) = port.as_object_mut() else {
                continue;
            };
            let target_unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if target_unset && let Some(port_num) = p.get("port").filter(|v| v.is_number()).cloned()
            {
                p.insert("targetPort".into(), port_num);
            }
        }
    }
    let externally_accessible = ty == "LoadBalancer"
        || ty == "NodePort"
        || (ty == "ClusterIP"
            && spec
                .get("externalIPs")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()));
    if externally_accessible && get(spec, "externalTrafficPolicy").is_empty() {
        spec.insert("externalTrafficPolicy".into(), json!("Cluster"));
    }
    if spec.get("internalTrafficPolicy").is_none_or(Value::is_null)
        && matches!(ty.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer")
    {
        spec.insert("internalTrafficPolicy".into(), json!("Cluster"));
    }
    if ty == "LoadBalancer"
        && spec
            .get("allocateLoadBalancerNodePorts")
            .is_none_or(Value::is_null)
    {
        spec.insert("allocateLoadBalancerNodePorts".into(), json!(true));
    }
    if get(spec, "sessionAffinity") == "ClientIP" {
        let has_timeout = spec
            .get("sessionAffinityConfig")
            .and_then(|c| c.get("clientIP"))
            .and_then(|c| c.get("timeoutSeconds"))
            .is_some_and(|t| !t.is_null());
        if !has_timeout {
            spec.insert(
                "sessionAffinityConfig".into(),
                json!({"clientIP": {"timeoutSeconds": 10800}}),
            );
        }
    }
    // The service strategy keeps clusterIP and clusterIPs in step.
    let cluster_ip = get(spec, "clusterIP");
    let ips_empty = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if !cluster_ip.is_empty() && ips_empty {
        spec.insert("clusterIPs".into(), json!([cluster_ip]));
    }
    // Single-stack IPv4 cluster: what the allocator records for every service that gets (or
    // declines, headless) a cluster IP.
    if ty != "ExternalName" {
        if spec.get("ipFamilyPolicy").is_none_or(Value::is_null) {
            spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
        }
        if spec
            .get("ipFamilies")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            spec.insert("ipFamilies".into(), json!(["IPv4"]));
        }
    }
}

fn default_secret(map: &mut Map<String, Value>) {
    use base64::Engine;
    if map
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        map.insert("type".into(), json!("Opaque"));
    }
    // Conversion folds stringData into data (stringData wins) and drops it.
    if let Some(Value::Object(string_data)) = map.remove("stringData") {
        let data = map.entry("data").or_insert_with(|| json!({}));
        if data.is_null() {
            *data = json!({});
        }
        if let Some(data) = data.as_object_mut() {
            for (k, v) in string_data {
                let text = v.as_str().unwrap_or("").to_string();
                let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
                data.insert(k, Value::String(encoded));
            }
        }
    }
}

fn default_namespace(map: &mut Map<String, Value>) {
    let name = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !name.is_empty() {
        with_object(map, "metadata", |meta| {
            with_object(meta, "labels", |labels| {
                labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
            });
        });
    }
    with_object(map, "status", |status| {
        if status
            .get("phase")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            status.insert("phase".into(), json!("Active"));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(group: &str, kind: &str, mut obj: Value) -> Value {
        crate::builtin::by_kind(group, kind).default(&mut obj);
        obj
    }

    #[test]
    fn services() {
        let svc = defaulted(
            "",
            "Service",
            json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}}),
        );
        assert_eq!(
            svc["spec"],
            json!({
                "type": "ClusterIP",
                "sessionAffinity": "None",
                "internalTrafficPolicy": "Cluster",
                "ipFamilyPolicy": "SingleStack",
                "ipFamilies": ["IPv4"],
                "ports": [
                    {"port": 80, "protocol": "TCP", "targetPort": 80},
                    {"port": 53, "protocol": "UDP", "targetPort": "dns"}
                ]
            })
        );
        let svc = defaulted(
            "",
            "Service",
            json!({"spec": {"sessionAffinity": "ClientIP", "type": "NodePort", "clusterIP": "10.96.0.9"}}),
        );
        assert_eq!(
            svc["spec"]["sessionAffinityConfig"],
            json!({"clientIP": {"timeoutSeconds": 10800}})
        );
        assert_eq!(svc["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(svc["spec"]["clusterIPs"], json!(["10.96.0.9"]));
        let svc = defaulted(
            "",
            "Service",
            json!({"spec": {"type": "ExternalName", "externalName": "x.example.com"}}),
        );
        assert!(svc["spec"].get("ipFamilies").is_none());
        assert!(svc["spec"].get("internalTrafficPolicy").is_none());
        let svc = defaulted(
            "",
            "Service",
            json!({"spec": {"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}}}),
        );
        assert!(svc["spec"].get("sessionAffinityConfig").is_none());
        let svc = defaulted("", "Service", json!({"spec": {"type": "LoadBalancer"}}));
        assert_eq!(svc["spec"]["allocateLoadBalancerNodePorts"], true);
    }

    #[test]
    fn deployments_replica_sets_daemon_sets() {
        let d = defaulted(
            "apps",
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        );
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert!(d["spec"].get("minReadySeconds").is_none());
        let tpl = &d["spec"]["template"]["spec"];
        assert_eq!(tpl["restartPolicy"], "Always");
        assert_eq!(tpl["containers"][0]["imagePullPolicy"], "Always");
        // Pod-only defaults stay off templates, as in Kubernetes.
        assert!(tpl.get("enableServiceLinks").is_none());
        assert!(tpl.get("priority").is_none());

        let d = defaulted(
            "apps",
            "Deployment",
            json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}}}),
        );
        assert_eq!(d["spec"]["replicas"], 0);
        assert_eq!(d["spec"]["strategy"], json!({"type": "Recreate"}));

        let rs = defaulted("apps", "ReplicaSet", json!({"spec": {}}));
        assert_eq!(rs["spec"]["replicas"], 1);

        let ds = defaulted("apps", "DaemonSet", json!({"spec": {}}));
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
        );
        assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
    }

    #[test]
    fn undecodable_parts_are_left_alone() {
        let d = defaulted("apps", "Deployment", json!({"spec": {"replicas": "abc"}}));
        assert_eq!(d, json!({"spec": {"replicas": "abc"}}));
    }

    #[test]
    fn secrets_namespaces_nodes_endpoints() {
        let s = defaulted(
            "",
            "Secret",
            json!({"data": {"a": "eA=="}, "stringData": {"b": "hi", "a": "y"}}),
        );
        assert_eq!(
            s,
            json!({"type": "Opaque", "data": {"a": "eQ==", "b": "aGk="}})
        );
        let ns = defaulted("", "Namespace", json!({"metadata": {"name": "team"}}));
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "team"
        );
        assert_eq!(ns["status"]["phase"], "Active");
        assert!(
            ns.get("spec").is_none(),
            "the finalizer is a create-time fill"
        );
        let mut ns = ns;
        prepare_namespace_for_create(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        prepare_namespace_for_create(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));

        let n = defaulted(
            "",
            "Node",
            json!({"status": {"capacity": {"cpu": "4", "pods": "110"}}}),
        );
        assert_eq!(
            n["status"]["allocatable"],
            json!({"cpu": "4", "pods": "110"})
        );
        let n = defaulted(
            "",
            "Node",
            json!({"status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "3"}}}),
        );
        assert_eq!(n["status"]["allocatable"], json!({"cpu": "3"}));

        let ep = defaulted(
            "",
            "Endpoints",
            json!({"subsets": [{"ports": [{"port": 80}]}]}),
        );
        assert_eq!(ep["subsets"][0]["ports"][0]["protocol"], "TCP");
        let es = defaulted(
            "discovery.k8s.io",
            "EndpointSlice",
            json!({"ports": [{"port": 80}]}),
        );
        assert_eq!(
            es["ports"][0],
            json!({"port": 80, "protocol": "TCP", "name": ""})
        );
    }

    #[test]
    fn tolerations_for_not_ready_and_unreachable() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "x"}]}});
        default_tolerations(&mut pod, TolerationSeconds::default());
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ])
        );
        let mut pod = json!({"spec": {"containers": [], "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]}});
        default_tolerations(&mut pod, TolerationSeconds::default());
        let tol = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(tol.len(), 2);
        assert_eq!(tol[0]["tolerationSeconds"], 5);
        assert_eq!(tol[1]["key"], "node.kubernetes.io/not-ready");
        // A toleration of everything covers both.
        let mut pod = json!({"spec": {"containers": [], "tolerations": [{"operator": "Exists"}]}});
        default_tolerations(&mut pod, TolerationSeconds::default());
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn toleration_seconds_are_configurable_per_taint() {
        let seconds = TolerationSeconds {
            not_ready: 7,
            unreachable: 3,
        };
        let mut pod = json!({"spec": {"containers": []}});
        default_tolerations(&mut pod, seconds);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 7},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3}
            ])
        );
    }

    #[test]
    fn service_allocations_survive_updates_that_omit_them() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.7", "clusterIPs": ["10.96.0.7"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        carry_over_service_allocations(&mut new, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.7");
        assert_eq!(new["spec"]["clusterIPs"], json!(["10.96.0.7"]));
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
        let mut changed = json!({"spec": {"type": "ExternalName", "externalName": "x.io"}});
        carry_over_service_allocations(&mut changed, &old);
        assert!(changed["spec"].get("clusterIP").is_none());
    }
}

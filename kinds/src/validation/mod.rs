//! Validation of API objects on create and update, with Kubernetes' checks and messages
//! (`k8s.io/kubernetes/pkg/apis/*/validation`, apimachinery's object-meta rules).
//!
//! Objects arrive as JSON (`serde_json::Value`) and are decoded into the k8s-openapi types; a value
//! of the wrong type becomes a field error at its path. Validation expects an object that has
//! been through its kind's defaults ([`crate::Kind::default`]) (and, on create, whose generated name has been filled
//! in), exactly as the Kubernetes API server validates after defaulting.
//!
//! # Layout
//! - [`FieldError`] (Kubernetes' `field.Error`, in `skiff_meta::status` for every crate that
//!   reads or writes `Status` causes) and [`Path`], its field paths.
//! - [`names`]: DNS labels and subdomains, qualified names, label values, config keys, ports.
//! - [`quantity`]: `resource.Quantity` parsing, shared with the scheduler.
//! - `meta`: object metadata (names, namespace, labels, annotations, owners, finalizers).
//! - `pod`: pod specs and templates, pod updates; `service`, `apps`, `batch`, `core` (the other
//!   kinds).

pub mod names;
pub mod quantity;

pub(crate) mod apps;
pub(crate) mod batch;
pub(crate) mod core;
mod meta;
pub(crate) mod pod;
pub mod policies;
pub mod rbac;
pub(crate) mod service;
pub mod webhooks;

use serde::de::DeserializeOwned;
use serde_json::Value;
use skiff_meta::ResourceInfo;

use crate::{Checked, Kind};

pub use meta::{NAMESPACE_MISMATCH, ensure_namespace, generate_name};
pub use skiff_meta::status::{FieldError, FieldErrorType, FieldPath as Path};

/// Validates an object about to be created (after its defaults, [`crate::strategy::prepare_for_create`]
/// and name generation). `url_namespace` is the namespace of the request URL
/// (`None` for cluster-wide requests); an object without a namespace is taken to be in it.
pub fn validate_create(
    kind: &dyn Kind,
    obj: &Value,
    url_namespace: Option<&str>,
) -> Vec<FieldError> {
    let info = kind.info();
    let mut errs = Vec::new();
    if let Some(e) = check_type_meta(info, obj) {
        return vec![e];
    }
    let obj = with_type_meta(info, obj);
    let object_meta = match meta::decode_meta(&obj) {
        Ok(m) => m,
        Err(e) => return vec![e],
    };
    errs.extend(meta::check_url_namespace(info, &object_meta, url_namespace));
    let mut effective = object_meta.clone();
    if effective.namespace.as_deref().unwrap_or("").is_empty() && info.namespaced {
        effective.namespace = url_namespace.map(str::to_string);
    }
    let check_meta = |errs: &mut Vec<FieldError>| {
        errs.extend(meta::validate_object_meta(
            &effective,
            info.namespaced,
            kind.name_rule(),
            &Path::new("metadata"),
        ))
    };
    if !kind.validates_metadata_last() {
        check_meta(&mut errs);
    }
    errs.extend(flatten(kind.validate(&obj, None, &effective)));
    if kind.validates_metadata_last() && errs.is_empty() {
        // Kubernetes checks an event's metadata only after its own rules passed.
        check_meta(&mut errs);
    }
    errs
}

fn flatten(checked: Checked) -> Vec<FieldError> {
    checked.unwrap_or_else(|e| vec![e])
}

/// Validates an update of `old` to `new` (the main resource, not `/status`).
pub fn validate_update(kind: &dyn Kind, new: &Value, old: &Value) -> Vec<FieldError> {
    let info = kind.info();
    if let Some(e) = check_type_meta(info, new) {
        return vec![e];
    }
    let new = with_type_meta(info, new);
    let old = with_type_meta(info, old);
    let (new_meta, old_meta) = match (meta::decode_meta(&new), meta::decode_meta(&old)) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => return vec![e],
    };
    let mut errs = meta::validate_object_meta_update(&new_meta, &old_meta, &Path::new("metadata"));
    errs.extend(flatten(kind.validate(&new, Some(&old), &new_meta)));
    errs
}

/// Validates an update through the `/status` subresource. The caller keeps everything but
/// `status` (and metadata) from `old`, as Kubernetes' status strategies do; this checks the
/// metadata rules and the kind's status rules.
pub fn validate_status_update(kind: &dyn Kind, new: &Value, old: &Value) -> Vec<FieldError> {
    let info = kind.info();
    if let Some(e) = check_type_meta(info, new) {
        return vec![e];
    }
    let new = with_type_meta(info, new);
    let old = with_type_meta(info, old);
    let (new_meta, old_meta) = match (meta::decode_meta(&new), meta::decode_meta(&old)) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => return vec![e],
    };
    let mut errs = meta::validate_object_meta_update(&new_meta, &old_meta, &Path::new("metadata"));
    errs.extend(flatten(kind.validate_status(&new, &old)));
    errs
}

/// Validates an update through a subresource that writes part of the kind's own object
/// ([`Kind::subresource_fields`], e.g. `pods/ephemeralcontainers`): the metadata rules and the
/// kind's rules for that subresource.
pub fn validate_subresource_update(
    kind: &dyn Kind,
    subresource: &str,
    new: &Value,
    old: &Value,
) -> Vec<FieldError> {
    let info = kind.info();
    if let Some(e) = check_type_meta(info, new) {
        return vec![e];
    }
    let new = with_type_meta(info, new);
    let old = with_type_meta(info, old);
    let (new_meta, old_meta) = match (meta::decode_meta(&new), meta::decode_meta(&old)) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => return vec![e],
    };
    let mut errs = meta::validate_object_meta_update(&new_meta, &old_meta, &Path::new("metadata"));
    errs.extend(flatten(kind.validate_subresource(subresource, &new, &old)));
    errs
}

/// Validates the body of a subresource write other than `status`: `pods/binding` (a Binding)
/// and `*/scale` (an autoscaling/v1 Scale). Unknown subresources have no rules.
pub fn validate_subresource(subresource: &str, obj: &Value) -> Vec<FieldError> {
    let result = match subresource {
        "binding" => pod::validate_binding(obj),
        "scale" => decode::<k8s_openapi::api::autoscaling::v1::Scale>(obj, "").map(|scale| {
            let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
            if replicas < 0 {
                vec![FieldError::invalid(
                    "spec.replicas",
                    replicas,
                    "must be greater than or equal to 0",
                )]
            } else {
                Vec::new()
            }
        }),
        _ => Ok(Vec::new()),
    };
    result.unwrap_or_else(|e| vec![e])
}

/// An error when `obj` names another `apiVersion` or `kind` than the resource it is sent to.
fn check_type_meta(info: &ResourceInfo, obj: &Value) -> Option<FieldError> {
    let expected = [
        ("apiVersion", info.api_version()),
        ("kind", info.kind.to_string()),
    ];
    for (key, want) in expected {
        match obj.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(got)) if *got == want => {}
            Some(got) => {
                return Some(FieldError::invalid(
                    key,
                    got.clone(),
                    format!("must be {want}"),
                ));
            }
        }
    }
    None
}

/// `obj` with `apiVersion` and `kind` filled in when missing, so typed decoding (which checks
/// them) accepts objects whose type the URL implied.
fn with_type_meta<'a>(info: &ResourceInfo, obj: &'a Value) -> std::borrow::Cow<'a, Value> {
    let complete = obj
        .as_object()
        .is_none_or(|map| map.contains_key("apiVersion") && map.contains_key("kind"));
    if complete {
        // The usual case: nothing to add, so no copy of the object.
        return std::borrow::Cow::Borrowed(obj);
    }
    let mut obj = obj.clone();
    if let Some(map) = obj.as_object_mut() {
        if !map.contains_key("apiVersion") {
            map.insert("apiVersion".into(), Value::String(info.api_version()));
        }
        if !map.contains_key("kind") {
            map.insert("kind".into(), Value::String(info.kind.to_string()));
        }
    }
    std::borrow::Cow::Owned(obj)
}

/// Decodes `value` into `T`; a failure becomes an `Invalid` error at the offending field's path
/// carrying the offending value, or at `root` when the whole value is wrong.
pub(crate) fn decode<T: DeserializeOwned>(value: &Value, root: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let segments: Vec<String> = e
            .path()
            .iter()
            .map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => format!("[{index}]"),
                serde_path_to_error::Segment::Map { key } => key.clone(),
                serde_path_to_error::Segment::Enum { variant } => variant.clone(),
                serde_path_to_error::Segment::Unknown => "?".into(),
            })
            .collect();
        let mut path = root.to_string();
        let mut cursor = Some(value);
        for seg in &segments {
            if let Some(idx) = seg.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                path.push_str(seg);
                cursor = cursor.and_then(|v| v.get(idx.parse::<usize>().unwrap_or(usize::MAX)));
            } else {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(seg);
                cursor = cursor.and_then(|v| v.get(seg.as_str()));
            }
        }
        let bad = cursor.cloned().unwrap_or(Value::Null);
        FieldError::invalid(path, bad, e.inner().to_string())
    })
}

/// The value of a string field (`Option<String>` in k8s-openapi), empty when unset.
pub(crate) fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;

    /// The built-in kind `kind` of `group` (kept for the test process's life).
    pub fn info(group: &str, kind: &str) -> &'static dyn Kind {
        let kind: &'static std::sync::Arc<dyn Kind> =
            Box::leak(Box::new(crate::builtin::by_kind(group, kind)));
        &**kind
    }

    /// Defaults `obj` and validates its creation in namespace `default` (or none when cluster
    /// scoped), returning the messages.
    pub fn create_msgs(group: &str, kind: &str, mut obj: Value) -> Vec<String> {
        let kind = crate::builtin::by_kind(group, kind);
        kind.default(&mut obj);
        let ns = kind.info().namespaced.then_some("default");
        validate_create(&*kind, &obj, ns)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Defaults both and validates the update, returning the messages.
    pub fn update_msgs(group: &str, kind: &str, mut new: Value, mut old: Value) -> Vec<String> {
        let kind = crate::builtin::by_kind(group, kind);
        kind.default(&mut new);
        kind.default(&mut old);
        validate_update(&*kind, &new, &old)
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_types_are_field_errors_with_paths() {
        let msgs = create_msgs(
            "apps",
            "Deployment",
            json!({"metadata": {"name": "web"}, "spec": {"replicas": "abc"}}),
        );
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(
            msgs[0].starts_with(
                r#"spec.replicas: Invalid value: "abc": invalid type: string "abc", expected i32"#
            ),
            "{}",
            msgs[0]
        );
        let msgs = create_msgs(
            "",
            "Pod",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": "x"}]}]}}),
        );
        assert!(
            msgs[0].starts_with(r#"spec.containers[0].ports[0].containerPort: Invalid value: "x""#),
            "{msgs:?}"
        );
    }

    #[test]
    fn api_version_and_kind_may_be_missing_but_not_wrong() {
        let info = info("", "ConfigMap");
        let obj = json!({"metadata": {"name": "c", "namespace": "default"}});
        assert!(validate_create(info, &obj, Some("default")).is_empty());
        let obj = json!({"apiVersion": "v2", "metadata": {"name": "c"}});
        let errs = validate_create(info, &obj, Some("default"));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            r#"apiVersion: Invalid value: "v2": must be v1"#
        );
    }

    #[test]
    fn every_served_kind_accepts_a_minimal_valid_object() {
        let cases = [
            ("", "Namespace", json!({"metadata": {"name": "team-a"}})),
            ("", "Node", json!({"metadata": {"name": "node-1"}})),
            (
                "",
                "ConfigMap",
                json!({"metadata": {"name": "c"}, "data": {"k": "v"}}),
            ),
            (
                "",
                "Secret",
                json!({"metadata": {"name": "s"}, "data": {"k": "dg=="}}),
            ),
            (
                "",
                "ServiceAccount",
                json!({"metadata": {"name": "default"}}),
            ),
            (
                "",
                "Endpoints",
                json!({"metadata": {"name": "web"}, "subsets": [{"addresses": [{"ip": "10.0.0.5"}], "ports": [{"port": 80}]}]}),
            ),
            (
                "",
                "Event",
                json!({"metadata": {"name": "web.1"}, "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}, "reason": "Started"}),
            ),
            (
                "",
                "Service",
                json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            ),
            (
                "",
                "Pod",
                json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            ),
            (
                "apps",
                "Deployment",
                json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            ),
            (
                "apps",
                "ReplicaSet",
                json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            ),
            (
                "apps",
                "DaemonSet",
                json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            ),
            (
                "apps",
                "StatefulSet",
                json!({"metadata": {"name": "web"}, "spec": {"serviceName": "web", "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            ),
            (
                "batch",
                "Job",
                // Without the server's create-time fills, only a manual selector is complete.
                json!({"metadata": {"name": "pi"}, "spec": {"manualSelector": true, "selector": {"matchLabels": {"app": "pi"}}, "template": {"metadata": {"labels": {"app": "pi"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
            ),
            (
                "batch",
                "CronJob",
                json!({"metadata": {"name": "nightly"}, "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
            ),
            (
                "coordination.k8s.io",
                "Lease",
                json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}}),
            ),
            (
                "discovery.k8s.io",
                "EndpointSlice",
                json!({"metadata": {"name": "web-abc"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.5"]}], "ports": [{"port": 80}]}),
            ),
            (
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
                       "names": {"plural": "widgets", "kind": "Widget"},
                       "versions": [{"name": "v1", "served": true, "storage": true,
                                     "schema": {"openAPIV3Schema": {"type": "object"}}}]}}),
            ),
            (
                "rbac.authorization.k8s.io",
                "Role",
                json!({"metadata": {"name": "r", "namespace": "default"},
                       "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            ),
            (
                "rbac.authorization.k8s.io",
                "ClusterRole",
                json!({"metadata": {"name": "system:r"},
                       "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}),
            ),
            (
                "rbac.authorization.k8s.io",
                "RoleBinding",
                json!({"metadata": {"name": "b", "namespace": "default"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "ServiceAccount", "name": "default"}]}),
            ),
            (
                "rbac.authorization.k8s.io",
                "ClusterRoleBinding",
                json!({"metadata": {"name": "b"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "User", "name": "alice"}]}),
            ),
            (
                "authorization.k8s.io",
                "SelfSubjectAccessReview",
                json!({"metadata": {"name": "x"}, "spec": {}}),
            ),
            (
                "authorization.k8s.io",
                "SelfSubjectRulesReview",
                json!({"metadata": {"name": "x"}, "spec": {}}),
            ),
            (
                "authorization.k8s.io",
                "LocalSubjectAccessReview",
                json!({"metadata": {"name": "x", "namespace": "default"}, "spec": {}}),
            ),
            (
                "authorization.k8s.io",
                "SubjectAccessReview",
                json!({"metadata": {"name": "x"}, "spec": {}}),
            ),
            (
                "apps",
                "ControllerRevision",
                json!({"metadata": {"name": "web-abc", "namespace": "default"},
                       "data": {"spec": {"template": {"$patch": "replace"}}}, "revision": 1}),
            ),
            (
                "",
                "ReplicationController",
                json!({"metadata": {"name": "rc", "namespace": "default"}, "spec": {
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            ),
            (
                "",
                "PersistentVolume",
                json!({"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "1Gi"},
                       "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}}}),
            ),
            (
                "",
                "PersistentVolumeClaim",
                json!({"metadata": {"name": "data", "namespace": "default"}, "spec": {
                       "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            ),
            (
                "",
                "ResourceQuota",
                json!({"metadata": {"name": "q", "namespace": "default"},
                       "spec": {"hard": {"pods": "10", "requests.cpu": "2"}}}),
            ),
            (
                "",
                "LimitRange",
                json!({"metadata": {"name": "l", "namespace": "default"},
                       "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}}]}}),
            ),
            (
                "storage.k8s.io",
                "StorageClass",
                json!({"metadata": {"name": "local-path"}, "provisioner": "skiff.io/local-path"}),
            ),
            (
                "authentication.k8s.io",
                "SelfSubjectReview",
                json!({"metadata": {"name": "x"}}),
            ),
            (
                "authentication.k8s.io",
                "TokenReview",
                json!({"metadata": {"name": "x"}, "spec": {"token": "t"}}),
            ),
            (
                "policy",
                "PodDisruptionBudget",
                json!({"metadata": {"name": "db", "namespace": "default"},
                       "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}),
            ),
            (
                "scheduling.k8s.io",
                "PriorityClass",
                json!({"metadata": {"name": "high"}, "value": 1000}),
            ),
            (
                "node.k8s.io",
                "RuntimeClass",
                json!({"metadata": {"name": "runc"}, "handler": "runc"}),
            ),
            (
                "networking.k8s.io",
                "Ingress",
                json!({"metadata": {"name": "web"}, "spec": {"defaultBackend":
                       {"service": {"name": "web", "port": {"number": 80}}}}}),
            ),
            (
                "networking.k8s.io",
                "IngressClass",
                json!({"metadata": {"name": "skiff"}, "spec": {"controller": "skiff.io/ingress"}}),
            ),
            (
                "networking.k8s.io",
                "NetworkPolicy",
                json!({"metadata": {"name": "deny"}, "spec": {"podSelector": {}}}),
            ),
            (
                "storage.k8s.io",
                "CSIDriver",
                json!({"metadata": {"name": "hostpath.csi.k8s.io"}, "spec": {}}),
            ),
            (
                "storage.k8s.io",
                "CSINode",
                json!({"metadata": {"name": "n1"}, "spec": {"drivers": []}}),
            ),
            (
                "storage.k8s.io",
                "VolumeAttachment",
                json!({"metadata": {"name": "va"}, "spec": {"attacher": "a.csi", "nodeName": "n1",
                       "source": {"persistentVolumeName": "pv1"}}}),
            ),
            (
                "flowcontrol.apiserver.k8s.io",
                "FlowSchema",
                json!({"metadata": {"name": "mine"},
                       "spec": {"priorityLevelConfiguration": {"name": "low"}}}),
            ),
            (
                "flowcontrol.apiserver.k8s.io",
                "PriorityLevelConfiguration",
                json!({"metadata": {"name": "low"}, "spec": {"type": "Exempt", "exempt": {}}}),
            ),
            (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                json!({"metadata": {"name": "v"}, "webhooks": [{"name": "v.example.com",
                       "sideEffects": "None", "admissionReviewVersions": ["v1"],
                       "clientConfig": {"url": "https://127.0.0.1:9443/"}}]}),
            ),
            (
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration",
                json!({"metadata": {"name": "m"}, "webhooks": [{"name": "m.example.com",
                       "sideEffects": "None", "admissionReviewVersions": ["v1"],
                       "clientConfig": {"service": {"namespace": "n", "name": "s"}}}]}),
            ),
            (
                "admissionregistration.k8s.io",
                "ValidatingAdmissionPolicy",
                json!({"metadata": {"name": "p"}, "spec": {"validations": [{"expression": "true"}],
                       "matchConstraints": {"resourceRules": [{"apiGroups": ["*"],
                       "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]}}}),
            ),
            (
                "admissionregistration.k8s.io",
                "ValidatingAdmissionPolicyBinding",
                json!({"metadata": {"name": "b"},
                       "spec": {"policyName": "p", "validationActions": ["Deny"]}}),
            ),
            (
                "events.k8s.io",
                "Event",
                json!({"metadata": {"name": "e"}, "eventTime": "2026-12-06T06:00:00.000000Z",
                       "reportingController": "example.com/c", "reportingInstance": "c-1",
                       "action": "Act", "reason": "Acted", "type": "Normal",
                       "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}}),
            ),
            (
                "autoscaling",
                "HorizontalPodAutoscaler",
                json!({"metadata": {"name": "web"}, "spec": {
                       "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                          "name": "web"},
                       "maxReplicas": 3}}),
            ),
            (
                "apiregistration.k8s.io",
                "APIService",
                json!({"metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": {
                       "group": "metrics.k8s.io", "version": "v1beta1",
                       "groupPriorityMinimum": 100, "versionPriority": 100,
                       "service": {"namespace": "kube-system", "name": "metrics-server"}}}),
            ),
            (
                "certificates.k8s.io",
                "CertificateSigningRequest",
                json!({"metadata": {"name": "c"}, "spec": {
                       "request": base64::Engine::encode(
                           &base64::engine::general_purpose::STANDARD,
                           skiff_pki::new_request(&skiff_pki::Subject::new("alice", &[]))
                               .unwrap()
                               .0),
                       "signerName": "kubernetes.io/kube-apiserver-client",
                       "usages": ["client auth"]}}),
            ),
        ];
        let cases_len = cases.len();
        for (group, kind, obj) in cases {
            assert_eq!(
                create_msgs(group, kind, obj),
                Vec::<String>::new(),
                "{kind}"
            );
        }
        // One case per kind, whatever the versions it is served in.
        let created = crate::builtin::all()
            .iter()
            .filter(|k| k.info().verbs.contains(&"create"))
            .map(|k| (k.info().group, k.info().kind))
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        assert_eq!(cases_len, created, "a case per kind that is created");
    }

    #[test]
    fn name_rule_of_every_served_kind() {
        for kind in crate::builtin::all().iter() {
            let info = kind.info();
            let rule = kind.name_rule();
            // "a.b" separates subdomains (dots allowed) from labels; "1a" separates RFC 1123
            // labels from DNS-1035 ones; "A" passes only the path-segment rule.
            let verdict = |name: &str| rule(name, false).is_empty();
            let expected = match info.kind {
                "Namespace" => (false, true, false),
                "Service" => (false, false, false),
                "Event" | "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => {
                    (true, true, true)
                }
                _ => (true, true, false),
            };
            assert_eq!(
                (verdict("a.b"), verdict("1a"), verdict("A")),
                expected,
                "{}",
                info.kind
            );
        }
    }

    #[test]
    fn defaults_are_idempotent_for_every_kind() {
        let objects = [
            (
                "",
                "Pod",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x", "livenessProbe": {"httpGet": {"port": 80}}, "resources": {"limits": {"cpu": "1"}}}], "volumes": [{"name": "v"}]}}),
            ),
            (
                "",
                "Service",
                json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.0.0.1", "sessionAffinity": "ClientIP", "ports": [{"port": 80}]}}),
            ),
            (
                "apps",
                "Deployment",
                json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            ),
            (
                "apps",
                "DaemonSet",
                json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            ),
            (
                "apps",
                "ReplicaSet",
                json!({"metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            ),
            (
                "",
                "Secret",
                json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}}),
            ),
            ("", "Namespace", json!({"metadata": {"name": "n"}})),
            (
                "",
                "Node",
                json!({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "2"}}}),
            ),
            (
                "discovery.k8s.io",
                "EndpointSlice",
                json!({"metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": [], "ports": [{"port": 1}]}),
            ),
        ];
        for (group, kind, mut obj) in objects {
            let info = info(group, kind);
            info.default(&mut obj);
            let once = obj.clone();
            info.default(&mut obj);
            assert_eq!(obj, once, "{kind}");
        }
    }

    #[test]
    fn scale_subresource() {
        let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web"}, "spec": {"replicas": -1}});
        assert_eq!(
            validate_subresource("scale", &scale)[0].to_string(),
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0"
        );
        let scale = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}});
        assert!(validate_subresource("scale", &scale).is_empty());
    }
}

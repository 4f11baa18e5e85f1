//! Object metadata rules (apimachinery `api/validation/objectmeta.go`): names, generateName,
//! namespace scope, labels, annotations, owner references, finalizers, and what may not change.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};
use skiff_meta::ResourceInfo;

use super::names::{self, NameFn};
use super::{FieldError, Path};

/// Most bytes all annotations (keys plus values) of one object may hold.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// The message of the Bad Request Kubernetes returns when the body's namespace is not the URL's.
pub const NAMESPACE_MISMATCH: &str =
    "the namespace of the provided object does not match the namespace sent on the request";

const FIELD_IMMUTABLE: &str = "field is immutable";

/// Makes `obj`'s namespace agree with the request as the API server does before validating:
/// a missing namespace is taken from the URL, a cluster-scoped object's namespace is cleared,
/// and a conflicting one is an error (a 400 Bad Request, message [`NAMESPACE_MISMATCH`]).
pub fn ensure_namespace(
    info: &ResourceInfo,
    obj: &mut Value,
    url_namespace: Option<&str>,
) -> Result<(), &'static str> {
    let expected = if info.namespaced {
        url_namespace.unwrap_or("")
    } else {
        ""
    };
    let Some(map) = obj.as_object_mut() else {
        return Ok(());
    };
    let metadata = map.entry("metadata").or_insert_with(|| json!({}));
    let Some(metadata) = metadata.as_object_mut() else {
        return Ok(());
    };
    let current = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if current == expected {
        Ok(())
    } else if current.is_empty() {
        metadata.insert("namespace".into(), Value::String(expected.to_string()));
        Ok(())
    } else if expected.is_empty() {
        metadata.remove("namespace");
        Ok(())
    } else {
        Err(NAMESPACE_MISMATCH)
    }
}

/// The characters Kubernetes' name generator draws from (no vowels, no look-alikes).
const GENERATED_NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A name for an object created with `generateName`, as `SimpleNameGenerator` makes it: the
/// prefix (cut to 58 bytes) and five random characters. Call before validation.
pub fn generate_name(prefix: &str) -> String {
    use rand::Rng;
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| {
            GENERATED_NAME_ALPHABET[rng.random_range(0..GENERATED_NAME_ALPHABET.len())] as char
        })
        .collect();
    format!("{}{suffix}", &prefix[..cut])
}

pub(super) fn decode_meta(obj: &Value) -> Result<ObjectMeta, FieldError> {
    // Check apiVersion/kind and catch type errors anywhere in metadata with their paths.
    let empty = json!({});
    let meta = obj.get("metadata").unwrap_or(&empty);
    for key in ["apiVersion", "kind"] {
        if let Some(v) = obj.get(key)
            && !v.is_string()
        {
            return Err(FieldError::invalid(key, v.clone(), "must be a string"));
        }
    }
    if !meta.is_object() {
        // Not an object: the whole type's decoder says so, in its words.
        let decoded: ObjectMeta = super::decode(meta, "metadata")?;
        return Ok(decoded);
    }
    let view: MetaView = super::decode(meta, "metadata")?;
    Ok(view.into())
}

/// `ObjectMeta` but for `managedFields`, which no validation rule reads and which are most of the
/// metadata of a written object: every write path decoded the whole object through its type
/// (`typed::decode`, which checks them) before it is validated, so they are not decoded again.
/// The other fields decode with `ObjectMeta`'s own types, to the same values and errors.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaView {
    annotations: Option<std::collections::BTreeMap<String, String>>,
    creation_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<MetaView> for ObjectMeta {
    fn from(v: MetaView) -> ObjectMeta {
        ObjectMeta {
            annotations: v.annotations,
            creation_timestamp: v.creation_timestamp,
            deletion_grace_period_seconds: v.deletion_grace_period_seconds,
            deletion_timestamp: v.deletion_timestamp,
            finalizers: v.finalizers,
            generate_name: v.generate_name,
            generation: v.generation,
            labels: v.labels,
            managed_fields: None,
            name: v.name,
            namespace: v.namespace,
            owner_references: v.owner_references,
            resource_version: v.resource_version,
            self_link: v.self_link,
            uid: v.uid,
        }
    }
}

pub(super) fn check_url_namespace(
    info: &ResourceInfo,
    meta: &ObjectMeta,
    url_namespace: Option<&str>,
) -> Vec<FieldError> {
    let ns = meta.namespace.as_deref().unwrap_or("");
    match url_namespace {
        Some(url_ns) if info.namespaced && !ns.is_empty() && ns != url_ns => {
            vec![FieldError::invalid(
                "metadata.namespace",
                ns,
                NAMESPACE_MISMATCH,
            )]
        }
        _ => Vec::new(),
    }
}

/// `ValidateObjectMetaAccessor`: metadata of an object being created (name already generated).
pub fn validate_object_meta(
    meta: &ObjectMeta,
    requires_namespace: bool,
    name_fn: NameFn,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let generate_name = meta.generate_name.as_deref().unwrap_or("");
    if !generate_name.is_empty() {
        for msg in name_fn(generate_name, true) {
            errs.push(FieldError::invalid(
                path.child("generateName"),
                generate_name,
                msg,
            ));
        }
    }
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(
            path.child("name"),
            "name or generateName is required",
        ));
    } else {
        for msg in name_fn(name, false) {
            errs.push(FieldError::invalid(path.child("name"), name, msg));
        }
    }
    let namespace = meta.namespace.as_deref().unwrap_or("");
    if requires_namespace {
        if namespace.is_empty() {
            errs.push(FieldError::required(path.child("namespace"), ""));
        } else {
            for msg in names::name_is_dns_label(namespace, false) {
                errs.push(FieldError::invalid(path.child("namespace"), namespace, msg));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            path.child("namespace"),
            "not allowed on this type",
        ));
    }
    if let Some(generation) = meta.generation
        && generation < 0
    {
        errs.push(FieldError::invalid(
            path.child("generation"),
            generation,
            "must be greater than or equal to 0",
        ));
    }
    errs.extend(validate_labels(meta.labels.as_ref(), &path.child("labels")));
    errs.extend(validate_annotations(
        meta.annotations.as_ref(),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(
        meta.owner_references.as_deref().unwrap_or_default(),
        &path.child("ownerReferences"),
    ));
    errs.extend(validate_finalizers(
        meta.finalizers.as_deref().unwrap_or_default(),
        &path.child("finalizers"),
    ));
    errs
}

/// `ValidateObjectMetaAccessorUpdate`. The resourceVersion precondition is the server's (it
/// fills in unconditional updates), so it is not checked here.
pub fn validate_object_meta_update(
    new: &ObjectMeta,
    old: &ObjectMeta,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old.deletion_timestamp.is_some() {
        let old_f = old.finalizers.as_deref().unwrap_or_default();
        let mut extra: Vec<&String> = new
            .finalizers
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|f| !old_f.contains(f))
            .collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            let list: Vec<String> = extra.iter().map(|f| skiff_meta::status::quote(f)).collect();
            errs.push(FieldError::forbidden(
                path.child("finalizers"),
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    list.join(", ")
                ),
            ));
        }
    }
    let new_gen = new.generation.unwrap_or(0);
    if new_gen < old.generation.unwrap_or(0) {
        errs.push(FieldError::invalid(
            path.child("generation"),
            new_gen,
            "must not be decremented",
        ));
    }
    let immutable_str =
        |errs: &mut Vec<FieldError>, field: &str, n: &Option<String>, o: &Option<String>| {
            let (n, o) = (n.as_deref().unwrap_or(""), o.as_deref().unwrap_or(""));
            if n != o {
                errs.push(FieldError::invalid(path.child(field), n, FIELD_IMMUTABLE));
            }
        };
    immutable_str(&mut errs, "name", &new.name, &old.name);
    immutable_str(&mut errs, "namespace", &new.namespace, &old.namespace);
    immutable_str(&mut errs, "uid", &new.uid, &old.uid);
    let ts = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref()
            .map(|t| Value::String(t.0.to_string()))
            .unwrap_or(Value::Null)
    };
    if new.creation_timestamp != old.creation_timestamp {
        errs.push(FieldError::invalid(
            path.child("creationTimestamp"),
            ts(&new.creation_timestamp),
            FIELD_IMMUTABLE,
        ));
    }
    if new.deletion_timestamp != old.deletion_timestamp {
        errs.push(FieldError::invalid(
            path.child("deletionTimestamp"),
            ts(&new.deletion_timestamp),
            FIELD_IMMUTABLE,
        ));
    }
    if new.deletion_grace_period_seconds != old.deletion_grace_period_seconds {
        errs.push(FieldError::invalid(
            path.child("deletionGracePeriodSeconds"),
            new.deletion_grace_period_seconds
                .map_or(Value::Null, Value::from),
            FIELD_IMMUTABLE,
        ));
    }
    errs.extend(validate_labels(new.labels.as_ref(), &path.child("labels")));
    errs.extend(validate_annotations(
        new.annotations.as_ref(),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(
        new.owner_references.as_deref().unwrap_or_default(),
        &path.child("ownerReferences"),
    ));
    errs
}

/// `ValidateLabels`: every key a qualified name, every value a label value; errors at `path`
/// itself, not at the key.
pub fn validate_labels(labels: Option<&BTreeMap<String, String>>, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in labels.into_iter().flatten() {
        errs.extend(validate_label_name(k, path));
        for msg in names::label_value(v) {
            errs.push(FieldError::invalid(path, v.as_str(), msg));
        }
    }
    errs
}

/// `ValidateLabelName`.
pub fn validate_label_name(key: &str, path: &Path) -> Vec<FieldError> {
    names::qualified_name(key)
        .into_iter()
        .map(|msg| FieldError::invalid(path, key, msg))
        .collect()
}

/// `ValidateAnnotations`: keys are qualified names (case-insensitively) and all annotations
/// together fit in 256 KiB.
pub fn validate_annotations(
    annotations: Option<&BTreeMap<String, String>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (k, v) in annotations.into_iter().flatten() {
        for msg in names::qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k.as_str(), msg));
        }
        total += k.len() + v.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

/// `ValidateOwnerReferences`.
pub fn validate_owner_references(refs: &[OwnerReference], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut first_controller: Option<String> = None;
    for r in refs {
        let (group, version) = match r.api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", r.api_version.as_str()),
        };
        if version.is_empty() {
            errs.push(FieldError::invalid(
                path.child("apiVersion"),
                r.api_version.as_str(),
                "version must not be empty",
            ));
        }
        if r.kind.is_empty() {
            errs.push(FieldError::invalid(
                path.child("kind"),
                "",
                "kind must not be empty",
            ));
        }
        if r.name.is_empty() {
            errs.push(FieldError::invalid(
                path.child("name"),
                "",
                "name must not be empty",
            ));
        }
        if r.uid.is_empty() {
            errs.push(FieldError::invalid(
                path.child("uid"),
                "",
                "uid must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && r.kind == "Event" {
            errs.push(FieldError::invalid(
                path,
                serde_json::to_value(r).unwrap_or(Value::Null),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.controller == Some(true) {
            let current = format!("{}/{}", r.kind, r.name);
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    path,
                    serde_json::to_value(refs).unwrap_or(Value::Null),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// `ValidateFinalizers`.
pub fn validate_finalizers(finalizers: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for f in finalizers {
        for msg in names::qualified_name(f) {
            errs.push(FieldError::invalid(path, f.as_str(), msg));
        }
    }
    let has = |name: &str| finalizers.iter().any(|f| f == name);
    if has("orphan") && has("foregroundDeletion") {
        errs.push(FieldError::invalid(
            path,
            Value::from(finalizers.to_vec()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::validate_create;
    use super::*;

    const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    fn cm(meta: Value) -> Vec<String> {
        create_msgs("", "ConfigMap", json!({ "metadata": meta }))
    }

    #[test]
    fn metadata_decodes_as_object_meta_without_its_managed_fields() {
        let full = |meta: &Value| -> Result<ObjectMeta, String> {
            crate::validation::decode::<ObjectMeta>(meta, "metadata")
                .map(|mut m| {
                    m.managed_fields = None;
                    m
                })
                .map_err(|e| format!("{e:?}"))
        };
        let view = |meta: &Value| -> Result<ObjectMeta, String> {
            decode_meta(&json!({ "metadata": meta })).map_err(|e| format!("{e:?}"))
        };
        let managed = json!([{"manager": "m", "operation": "Update", "apiVersion": "v1",
                              "time": "2026-12-05T01:00:00Z", "fieldsType": "FieldsV1",
                              "fieldsV1": {"f:data": {"f:a": {}}}}]);
        let cases = [
            json!({}),
            json!(null),
            json!({"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7",
                   "generation": 3, "generateName": "a-", "selfLink": "/x",
                   "creationTimestamp": "2026-12-05T01:00:00Z",
                   "deletionTimestamp": "2026-12-05T02:00:00Z", "deletionGracePeriodSeconds": 30,
                   "labels": {"a": "b"}, "annotations": {"c": "d"}, "finalizers": ["f"],
                   "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "x"}],
                   "managedFields": managed, "unknownField": 1}),
            json!({"name": "a", "labels": null, "finalizers": null}),
            // Type errors: the same error, at the same path.
            json!({"name": 5}),
            json!({"generation": "three"}),
            json!({"labels": {"a": 1}}),
            json!({"creationTimestamp": "yesterday"}),
            json!({"ownerReferences": [{"apiVersion": "v1"}]}),
            json!("not an object"),
            json!([1]),
        ];
        for meta in cases {
            assert_eq!(view(&meta), full(&meta), "{meta}");
        }
        // The view's point: managed fields are left alone.
        let decoded = view(&json!({"name": "a", "managedFields": managed})).unwrap();
        assert_eq!(decoded.managed_fields, None);
        assert_eq!(decoded.name.as_deref(), Some("a"));
    }

    #[test]
    fn names_per_kind() {
        assert_eq!(
            cm(json!({"name": "Bad_Name"})),
            vec![format!(
                r#"metadata.name: Invalid value: "Bad_Name": {SUBDOMAIN}"#
            )]
        );
        assert_eq!(
            create_msgs("", "Namespace", json!({"metadata": {"name": "a.b"}})),
            vec![r#"metadata.name: Invalid value: "a.b": must not contain dots"#.to_string()]
        );
        assert_eq!(
            create_msgs("", "Service", json!({"metadata": {"name": "1web"}, "spec": {"ports": [{"port": 80}]}})),
            vec![r#"metadata.name: Invalid value: "1web": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#.to_string()]
        );
        // Pods and nodes take subdomains: dots are fine.
        assert!(
            create_msgs(
                "",
                "Node",
                json!({"metadata": {"name": "node-1.example.com"}})
            )
            .is_empty()
        );
        assert!(cm(json!({"name": "a.b"})).is_empty());
        assert_eq!(
            cm(json!({"name": "a".repeat(254)})),
            vec![format!(
                r#"metadata.name: Invalid value: "{}": must be no more than 253 characters"#,
                "a".repeat(254)
            )]
        );
        // The defaulted `kubernetes.io/metadata.name` label repeats the problem, as in Kubernetes.
        let long = "a".repeat(64);
        assert_eq!(
            create_msgs("", "Namespace", json!({"metadata": {"name": long}})),
            vec![
                format!(
                    r#"metadata.name: Invalid value: "{long}": must be no more than 63 characters"#
                ),
                format!(
                    r#"metadata.labels: Invalid value: "{long}": must be no more than 63 characters"#
                ),
            ]
        );
    }

    #[test]
    fn name_required_and_generate_name() {
        assert_eq!(
            cm(json!({})),
            vec!["metadata.name: Required value: name or generateName is required".to_string()]
        );
        assert!(cm(json!({"generateName": "web-", "name": "web-x7k2p"})).is_empty());
        assert_eq!(
            cm(json!({"generateName": "Web-", "name": "web-x7k2p"})),
            vec![format!(
                r#"metadata.generateName: Invalid value: "Web-": {SUBDOMAIN}"#
            )]
        );
    }

    #[test]
    fn generated_names() {
        let name = generate_name("web-");
        assert_eq!(name.len(), 9);
        assert!(name.starts_with("web-"));
        assert!(
            name[4..]
                .bytes()
                .all(|b| GENERATED_NAME_ALPHABET.contains(&b))
        );
        assert!(names::name_is_dns_subdomain(&name, false).is_empty());
        let long = generate_name(&"a".repeat(80));
        assert_eq!(long.len(), 63);
        assert!(names::name_is_dns1035_label(&long, false).is_empty());
    }

    #[test]
    fn namespace_scope() {
        let info = info("", "ConfigMap");
        let obj = json!({"metadata": {"name": "c"}});
        assert_eq!(
            validate_create(info, &obj, None)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec!["metadata.namespace: Required value".to_string()]
        );
        assert!(validate_create(info, &obj, Some("default")).is_empty());
        let obj = json!({"metadata": {"name": "c", "namespace": "other"}});
        assert_eq!(
            validate_create(info, &obj, Some("default"))[0].to_string(),
            format!(r#"metadata.namespace: Invalid value: "other": {NAMESPACE_MISMATCH}"#)
        );
        let obj = json!({"metadata": {"name": "c", "namespace": "Bad"}});
        assert_eq!(
            validate_create(info, &obj, None)[0].to_string(),
            format!(r#"metadata.namespace: Invalid value: "Bad": {LABEL}"#)
        );
        let nodes = super::super::test_util::info("", "Node");
        let obj = json!({"metadata": {"name": "n", "namespace": "default"}});
        assert_eq!(
            validate_create(nodes, &obj, None)[0].to_string(),
            "metadata.namespace: Forbidden: not allowed on this type"
        );
    }

    #[test]
    fn ensure_namespace_fills_clears_and_rejects() {
        let pods = info("", "Pod");
        let mut obj = json!({"metadata": {"name": "p"}});
        ensure_namespace(pods.info(), &mut obj, Some("team")).unwrap();
        assert_eq!(obj["metadata"]["namespace"], "team");
        let mut obj = json!({"metadata": {"name": "p", "namespace": "other"}});
        assert_eq!(
            ensure_namespace(pods.info(), &mut obj, Some("team")),
            Err(NAMESPACE_MISMATCH)
        );
        let nodes = info("", "Node");
        let mut obj = json!({"metadata": {"name": "n", "namespace": "x"}});
        ensure_namespace(nodes.info(), &mut obj, None).unwrap();
        assert!(obj["metadata"].get("namespace").is_none());
    }

    #[test]
    fn labels_and_annotations() {
        let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        assert_eq!(
            cm(json!({"name": "c", "labels": {"-bad": "ok", "example.com/good": "-bad"}})),
            vec![
                format!(r#"metadata.labels: Invalid value: "-bad": {name_part}"#),
                r#"metadata.labels: Invalid value: "-bad": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"#.to_string(),
            ]
        );
        assert_eq!(
            cm(json!({"name": "c", "labels": {"k": "v".repeat(64)}})),
            vec![format!(
                r#"metadata.labels: Invalid value: "{}": must be no more than 63 characters"#,
                "v".repeat(64)
            )]
        );
        assert_eq!(
            cm(json!({"name": "c", "labels": {"Example.com/k": "v"}})),
            vec![format!(
                r#"metadata.labels: Invalid value: "Example.com/k": prefix part {SUBDOMAIN}"#
            )]
        );
        // Annotation keys are checked case-insensitively.
        assert!(cm(json!({"name": "c", "annotations": {"Example.com/Key": "x"}})).is_empty());
        assert_eq!(
            cm(json!({"name": "c", "annotations": {"a/b/c": "x"}})).len(),
            1
        );
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        assert_eq!(
            cm(json!({"name": "c", "annotations": {"k": big}})),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes".to_string()]
        );
        let fits = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT - 1);
        assert!(cm(json!({"name": "c", "annotations": {"k": fits}})).is_empty());
    }

    #[test]
    fn owner_references() {
        let msgs = cm(json!({"name": "c", "ownerReferences": [
            {"apiVersion": "apps/", "kind": "", "name": "", "uid": ""},
        ]}));
        assert_eq!(
            msgs,
            vec![
                r#"metadata.ownerReferences.apiVersion: Invalid value: "apps/": version must not be empty"#,
                r#"metadata.ownerReferences.kind: Invalid value: "": kind must not be empty"#,
                r#"metadata.ownerReferences.name: Invalid value: "": name must not be empty"#,
                r#"metadata.ownerReferences.uid: Invalid value: "": uid must not be empty"#,
            ]
        );
        let msgs = cm(json!({"name": "c", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": true},
        ]}));
        assert_eq!(msgs.len(), 1);
        assert!(msgs[0].ends_with(r#"Only one reference can have Controller set to true. Found "true" in references for ReplicaSet/a and ReplicaSet/b"#), "{}", msgs[0]);
        let msgs = cm(json!({"name": "c", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"},
        ]}));
        assert!(msgs[0].ends_with("/v1, Kind=Event is disallowed from being an owner"));
    }

    #[test]
    fn finalizers() {
        assert!(
            cm(json!({"name": "c", "finalizers": ["example.com/cleanup", "foregroundDeletion"]}))
                .is_empty()
        );
        assert_eq!(
            cm(json!({"name": "c", "finalizers": ["orphan", "foregroundDeletion"]})),
            vec![r#"metadata.finalizers: Invalid value: []string{"orphan", "foregroundDeletion"}: finalizer orphan and foregroundDeletion cannot be both set"#.to_string()]
        );
        assert_eq!(cm(json!({"name": "c", "finalizers": ["a/b/c"]})).len(), 1);
    }

    #[test]
    fn metadata_update_rules() {
        let old = json!({"metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "5", "generation": 3}});
        assert!(update_msgs("", "ConfigMap", old.clone(), old.clone()).is_empty());
        let new = json!({"metadata": {"name": "d", "namespace": "default", "uid": "u2", "generation": 2}});
        assert_eq!(
            update_msgs("", "ConfigMap", new, old.clone()),
            vec![
                "metadata.generation: Invalid value: 2: must not be decremented",
                r#"metadata.name: Invalid value: "d": field is immutable"#,
                r#"metadata.uid: Invalid value: "u2": field is immutable"#,
            ]
        );
        let deleting = json!({"metadata": {"name": "c", "namespace": "default", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["a.io/x"]}});
        let mut new = deleting.clone();
        new["metadata"]["finalizers"] = json!(["a.io/x", "b.io/y"]);
        assert_eq!(
            update_msgs("", "ConfigMap", new, deleting),
            vec![
                r#"metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"b.io/y"}"#
            ]
        );
    }
}

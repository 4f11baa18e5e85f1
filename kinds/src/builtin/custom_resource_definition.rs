//! `apiextensions.k8s.io/v1` CustomResourceDefinition: the kind that defines kinds. Its objects
//! are checked here as Kubernetes' definition validation checks them (names, scope, versions,
//! one storage version, structural schemas, CEL rules that compile, paths that parse); the API
//! server's definition controller serves what they define.

use super::prelude::*;
use crate::custom;
use crate::validation::FieldError;

/// `apiextensions.k8s.io/v1` CustomResourceDefinition.
pub struct CustomResourceDefinition;

/// The finalizer that holds a definition until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "apiextensions.k8s.io",
    version: "v1",
    kind: "CustomResourceDefinition",
    plural: "customresourcedefinitions",
    singular: "customresourcedefinition",
    short_names: &["crd", "crds"],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
    )],
    categories: &["api-extensions"],
    selectable_fields: &[],
};

type Crd = api_ext::CustomResourceDefinition;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as api_ext;

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Kubernetes' definition validation, beyond metadata.
fn validate_definition(new: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let group = text(new, "/spec/group");
    let plural = text(new, "/spec/names/plural");
    let singular = text(new, "/spec/names/singular");
    let kind = text(new, "/spec/names/kind");
    let list_kind = text(new, "/spec/names/listKind");
    let name = text(new, "/metadata/name");
    if name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        for e in names::dns1123_subdomain(group) {
            errs.push(FieldError::invalid("spec.group", group, e));
        }
        if !group.contains('.') {
            errs.push(FieldError::invalid(
                "spec.group",
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    match text(new, "/spec/scope") {
        "Cluster" | "Namespaced" => {}
        "" => errs.push(FieldError::required("spec.scope", "")),
        other => errs.push(FieldError::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    for (field, value, required) in [("plural", plural, true), ("singular", singular, false)] {
        let path = format!("spec.names.{field}");
        if value.is_empty() {
            if required {
                errs.push(FieldError::required(path, ""));
            }
            continue;
        }
        for e in names::dns1035_label(value) {
            errs.push(FieldError::invalid(path.clone(), value, e));
        }
    }
    for (field, value, required) in [("kind", kind, true), ("listKind", list_kind, false)] {
        let path = format!("spec.names.{field}");
        if value.is_empty() {
            if required {
                errs.push(FieldError::required(path, ""));
            }
            continue;
        }
        let lower = value.to_ascii_lowercase();
        if !names::dns1035_label(&lower).is_empty() {
            errs.push(FieldError::invalid(
                path,
                value,
                "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
            ));
        }
    }
    if !kind.is_empty() && list_kind == kind {
        errs.push(FieldError::invalid(
            "spec.names.listKind",
            list_kind,
            "kind and listKind may not be the same",
        ));
    }
    match text(new, "/spec/conversion/strategy") {
        "" | "None" => {}
        "Webhook" => errs.push(FieldError::forbidden(
            "spec.conversion.strategy",
            "webhook conversion is not supported by this server (skiff serves conversion: None)",
        )),
        other => errs.push(FieldError::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
    let versions = new
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::invalid(
            "spec.versions",
            Value::Array(Vec::new()),
            "must have exactly one version marked as storage version",
        ));
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        errs.push(FieldError::invalid(
            "spec.versions",
            Value::Array(versions.clone()),
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions.is_empty()
        && !versions
            .iter()
            .any(|v| v.get("served").and_then(Value::as_bool) == Some(true))
    {
        errs.push(FieldError::invalid(
            "spec.versions",
            Value::Array(versions.clone()),
            "must have at least one version marked as served",
        ));
    }
    let mut seen = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = text(version, "/name");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        } else {
            for e in names::dns1035_label(name) {
                errs.push(FieldError::invalid(format!("{path}.name"), name, e));
            }
            if seen.contains(&name) {
                errs.push(FieldError::duplicate(format!("{path}.name"), name));
            }
            seen.push(name);
        }
        if version.pointer("/schema/openAPIV3Schema").is_none() {
            errs.push(FieldError::required(
                format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            ));
        }
    }
    // The schemas, rules and paths of every served version.
    if errs.is_empty()
        && let Err(e) = custom::kinds_of(new)
    {
        errs.extend(e);
    }
    if let Some(old) = old {
        // A stored version stays listed until the definition says it is gone.
        let old_group = text(old, "/spec/group");
        if !old_group.is_empty() && old_group != group {
            errs.push(FieldError::invalid(
                "spec.group",
                group,
                "field is immutable",
            ));
        }
        let old_scope = text(old, "/spec/scope");
        if !old_scope.is_empty() && old_scope != text(new, "/spec/scope") {
            errs.push(FieldError::invalid(
                "spec.scope",
                text(new, "/spec/scope"),
                "field is immutable",
            ));
        }
    }
    errs
}

impl Kind for CustomResourceDefinition {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        // The schemas are kept as written: JSONSchemaProps through its type would turn integer
        // bounds into floats and drop nothing a structural schema may say.
        roundtrip::<Crd>(object)?;
        Ok(object.clone())
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Crd>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::generic_columns()
    }

    fn cells(&self, object: &Value, _now: Timestamp) -> Option<Vec<Value>> {
        Some(vec![
            object.pointer("/metadata/name")?.clone(),
            object
                .pointer("/metadata/creationTimestamp")
                .cloned()
                .unwrap_or(json!("<unknown>")),
        ])
    }

    fn merge_schema(&self) -> Option<&'static Type> {
        Some(&schema::METADATA_ONLY)
    }

    fn default(&self, object: &mut Value) {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        let conversion = spec.entry("conversion").or_insert_with(|| json!({}));
        if conversion.get("strategy").is_none() {
            conversion["strategy"] = json!("None");
        }
        let kind = spec
            .get("names")
            .and_then(|n| n.get("kind"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if let (Some(kind), Some(names)) =
            (kind, spec.get_mut("names").and_then(Value::as_object_mut))
            && names.get("listKind").is_none()
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }

    fn prepare_for_create(&self, object: &mut Value) {
        let meta = &mut object["metadata"];
        let finalizers = meta
            .as_object_mut()
            .map(|m| m.entry("finalizers").or_insert_with(|| json!([])));
        if let Some(list) = finalizers.and_then(Value::as_array_mut)
            && !list.iter().any(|f| f == CLEANUP_FINALIZER)
        {
            list.push(json!(CLEANUP_FINALIZER));
        }
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        Ok(validate_definition(new, old))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        })
    }

    fn msgs(v: &Value) -> Vec<String> {
        validate_definition(v, None)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_good_definition_passes_and_is_defaulted() {
        let mut v = crd();
        CustomResourceDefinition.default(&mut v);
        assert!(msgs(&v).is_empty(), "{:?}", msgs(&v));
        assert_eq!(v["spec"]["conversion"]["strategy"], "None");
        assert_eq!(v["spec"]["names"]["listKind"], "WidgetList");
    }

    #[test]
    fn bad_definitions_say_why_as_kubernetes_does() {
        let mut v = crd();
        v["metadata"]["name"] = json!("gadgets.example.com");
        assert_eq!(
            msgs(&v),
            vec![
                r#"metadata.name: Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group"#
            ]
        );
        let mut v = crd();
        v["spec"]["versions"][0]["storage"] = json!(false);
        assert!(msgs(&v)[0].contains("must have exactly one version marked as storage version"));
        let mut v = crd();
        v["spec"]["conversion"] = json!({"strategy": "Webhook"});
        assert!(msgs(&v)[0].starts_with("spec.conversion.strategy: Forbidden: webhook conversion"));
        let mut v = crd();
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"] =
            json!({"type": "object", "properties": {"spec": {"properties": {}}}});
        assert_eq!(
            msgs(&v),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
            ]
        );
    }

    #[test]
    fn created_definitions_hold_the_cleanup_finalizer() {
        let mut v = crd();
        CustomResourceDefinition.prepare_for_create(&mut v);
        CustomResourceDefinition.prepare_for_create(&mut v);
        assert_eq!(v["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
    }
}

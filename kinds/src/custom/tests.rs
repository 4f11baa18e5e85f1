//! Custom kinds from definitions: names, pruning, defaulting, validation messages, columns.

use serde_json::{Value, json};

use super::*;

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                      "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                  "statusReplicasPath": ".status.replicas",
                                  "labelSelectorPath": ".status.selector"}},
                 "additionalPrinterColumns": [
                     {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
                     {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                     {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                 ],
                 "selectableFields": [{"jsonPath": ".spec.size"}],
                 "schema": {"openAPIV3Schema": {
                     "type": "object",
                     "properties": {
                         "spec": {
                             "type": "object",
                             "required": ["size"],
                             "x-kubernetes-validations": [
                                 {"rule": "self.replicas <= self.maxReplicas",
                                  "message": "replicas must not exceed maxReplicas"}
                             ],
                             "properties": {
                                 "size": {"type": "string", "enum": ["small", "large"]},
                                 "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                                 "maxReplicas": {"type": "integer", "default": 5},
                                 "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                                 "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                                 "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                             }
                         },
                         "status": {"type": "object", "properties": {
                             "replicas": {"type": "integer"}, "selector": {"type": "string"}}}
                     }
                 }}},
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            ]
        }
    })
}

fn widget() -> Arc<dyn Kind> {
    kinds_of(&widget_crd()).unwrap().remove(0)
}

fn errors(kind: &dyn Kind, object: Value) -> Vec<String> {
    let mut object = kind.decode(&object).unwrap();
    kind.default(&mut object);
    kind.validate(&object, None, &ObjectMeta::default())
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn one_kind_per_served_version_with_the_definitions_names() {
    let kinds = kinds_of(&widget_crd()).unwrap();
    assert_eq!(kinds.len(), 2);
    let v1 = kinds[0].info();
    assert_eq!(
        (v1.group, v1.version, v1.kind, v1.plural, v1.singular),
        ("example.com", "v1", "Widget", "widgets", "widget")
    );
    assert_eq!(v1.short_names, &["wd"]);
    assert_eq!(v1.categories, &["all"]);
    assert!(v1.namespaced);
    assert!(v1.subresource("status").is_some() && v1.subresource("scale").is_some());
    assert_eq!(v1.storage_prefix(), "/registry/example.com/widgets/");
    assert_eq!(kinds[1].info().version, "v1beta1");
    assert!(kinds[1].info().subresource("status").is_none());
    assert_eq!(kinds[1].storage_version(), "v1");
    assert_eq!(
        skiff_meta::fields::supported_fields(v1),
        vec!["metadata.name", "metadata.namespace", "spec.size"]
    );
    // Built twice, the names are the same 'static values.
    assert!(std::ptr::eq(widget().info(), widget().info()));
}

#[test]
fn unknown_fields_are_pruned_and_defaults_filled() {
    let kind = widget();
    let object = json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "bogus": 1},
        "spec": {"size": "small", "colour": "red", "extra": {"anything": [1, 2]}},
        "top": true
    });
    let decoded = crate::typed::decode(&*kind, &object).unwrap();
    assert_eq!(
        decoded.unknown_fields,
        vec![".metadata.bogus", ".spec.colour", ".top"]
    );
    let mut object = decoded.object;
    kind.default(&mut object);
    assert_eq!(
        object["spec"],
        json!({"size": "small", "replicas": 1, "maxReplicas": 5, "extra": {"anything": [1, 2]}})
    );
}

#[test]
fn validation_speaks_kubernetes() {
    let kind = widget();
    let cr = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec});
    assert!(errors(&*kind, cr(json!({"size": "small"}))).is_empty());
    assert_eq!(
        errors(&*kind, cr(json!({}))),
        vec!["spec.size: Required value"]
    );
    assert_eq!(
        errors(&*kind, cr(json!({"size": "huge"}))),
        vec![r#"spec.size: Unsupported value: "huge": supported values: "small", "large""#]
    );
    assert_eq!(
        errors(
            &*kind,
            cr(json!({"size": "small", "replicas": 11, "maxReplicas": 20}))
        ),
        vec![
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"
        ]
    );
    assert_eq!(
        errors(&*kind, cr(json!({"size": "small", "replicas": "three"}))),
        vec![
            r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
        ]
    );
    assert_eq!(
        errors(&*kind, cr(json!({"size": "small", "name": "toolong"}))),
        vec!["spec.name: Too long: may not be more than 5 bytes"]
    );
    assert_eq!(
        errors(&*kind, cr(json!({"size": "small", "name": "AB"}))),
        vec![r#"spec.name: Invalid value: "AB": spec.name in body should match '^[a-z]+$'"#]
    );
    assert_eq!(
        errors(
            &*kind,
            cr(json!({"size": "small", "tags": ["a", "b", "c"]}))
        ),
        vec!["spec.tags: Too many: 3: must have at most 2 items"]
    );
    assert_eq!(
        errors(&*kind, cr(json!({"size": "small", "replicas": 6}))),
        vec![r#"spec: Invalid value: "object": replicas must not exceed maxReplicas"#]
    );
    // Every cause is reported, not only the first.
    assert_eq!(
        errors(&*kind, cr(json!({"size": "huge", "name": "TOOLONG"}))).len(),
        3
    );
}

#[test]
fn printer_columns_and_cells() {
    let kind = widget();
    let names: Vec<&str> = kind.columns().iter().map(|c| c.name).collect();
    assert_eq!(names, vec!["Name", "Size", "Replicas", "Age"]);
    let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
    let object = json!({"metadata": {"name": "w", "creationTimestamp": "2026-01-01T00:00:00Z"},
                        "spec": {"size": "small", "replicas": 3}});
    assert_eq!(
        kind.cells(&object, now).unwrap(),
        vec![json!("w"), json!("small"), json!(3), json!("10m")]
    );
    // Without printer columns, the name and its age.
    let plain = kinds_of(&widget_crd()).unwrap().remove(1);
    let names: Vec<&str> = plain.columns().iter().map(|c| c.name).collect();
    assert_eq!(names, vec!["Name", "Age"]);
}

#[test]
fn definitions_that_cannot_be_served_say_why() {
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] =
        json!({"enum": ["a"]});
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.replicas <="}]);
    let errs: Vec<String> = kinds_of(&crd)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs.iter().any(|e| e.starts_with(
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value"
    )), "{errs:?}");
    assert!(
        errs.iter()
            .any(|e| e.contains("x-kubernetes-validations[0].rule")
                && e.contains("compilation failed")),
        "{errs:?}"
    );
}

/// A definition whose lists say how server-side apply merges them.
fn gateway() -> Arc<dyn Kind> {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gateways.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gateways", "kind": "Gateway"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "hosts": {"type": "array", "x-kubernetes-list-type": "set",
                                  "items": {"type": "string"}},
                        "listeners": {"type": "array", "x-kubernetes-list-type": "map",
                                      "x-kubernetes-list-map-keys": ["port"],
                                      "items": {"type": "object", "required": ["port"], "properties": {
                                          "port": {"type": "integer"},
                                          "protocol": {"type": "string"}}}},
                        "args": {"type": "array", "items": {"type": "string"}},
                        "tls": {"type": "object", "properties": {"mode": {"type": "string"}}}
                    }}
                }}}}]
        }
    });
    kinds_of(&crd).unwrap().remove(0)
}

fn gateway_config(spec: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "example.com/v1", "kind": "Gateway",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": spec
    }))
    .unwrap()
}

fn apply_as(kind: &dyn Kind, live: Option<&Value>, manager: &'static str, spec: Value) -> Value {
    let options = crate::patch::Options {
        field_manager: manager,
        force: false,
        subresource: None,
        now: "2026-12-02T05:00:00Z".parse().unwrap(),
    };
    let mut out =
        crate::patch::server_side_apply(kind, live, &gateway_config(spec), &options).unwrap();
    out["metadata"]["uid"] = json!("u-1");
    out
}

#[test]
fn server_side_apply_merges_a_custom_resources_set_and_map_lists_item_by_item() {
    let kind = gateway();
    let v1 = apply_as(
        &*kind,
        None,
        "team-a",
        json!({"hosts": ["a.example"], "listeners": [{"port": 80, "protocol": "HTTP"}],
               "args": ["--a"]}),
    );
    // A second manager adds its own items to the set and the map-list without a conflict: the
    // lists are not atomic, as the definition says.
    let v2 = apply_as(
        &*kind,
        Some(&v1),
        "team-b",
        json!({"hosts": ["b.example"], "listeners": [{"port": 443, "protocol": "HTTPS"}]}),
    );
    assert_eq!(v2["spec"]["hosts"], json!(["a.example", "b.example"]));
    assert_eq!(
        v2["spec"]["listeners"],
        json!([{"port": 80, "protocol": "HTTP"}, {"port": 443, "protocol": "HTTPS"}])
    );
    let entries = v2["metadata"]["managedFields"].as_array().unwrap();
    let b = entries.iter().find(|e| e["manager"] == "team-b").unwrap();
    assert_eq!(
        b["fieldsV1"],
        json!({"f:spec": {
            "f:hosts": {"v:\"b.example\"": {}},
            "f:listeners": {"k:{\"port\":443}": {".": {}, "f:port": {}, "f:protocol": {}}}
        }})
    );
    // The first manager dropping its listener removes that item only; an atomic list applied
    // by another manager conflicts as a whole.
    let v3 = apply_as(
        &*kind,
        Some(&v2),
        "team-a",
        json!({"hosts": ["a.example"], "args": ["--a"]}),
    );
    assert_eq!(
        v3["spec"]["listeners"],
        json!([{"port": 443, "protocol": "HTTPS"}])
    );
    let options = crate::patch::Options {
        field_manager: "team-b",
        force: false,
        subresource: None,
        now: "2026-12-02T05:00:00Z".parse().unwrap(),
    };
    let conflict = crate::patch::server_side_apply(
        &*kind,
        Some(&v3),
        &gateway_config(json!({"args": ["--b"]})),
        &options,
    );
    assert!(
        matches!(conflict, Err(crate::patch::Error::Conflict(_))),
        "{conflict:?}"
    );
}

#[test]
fn an_update_owns_the_objects_of_a_custom_resource_it_makes_appear() {
    let kind = gateway();
    let options = crate::patch::Options {
        field_manager: "kubectl-create",
        force: false,
        subresource: None,
        now: "2026-12-02T05:00:00Z".parse().unwrap(),
    };
    let new = json!({
        "apiVersion": "example.com/v1", "kind": "Gateway",
        "metadata": {"name": "g", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"tls": {"mode": "strict"}, "hosts": ["a.example"]}
    });
    let out = crate::patch::record_update(&*kind, None, new, &options);
    // Unstructured objects do not exist before they are set, unlike a typed object's structs:
    // Kubernetes records `spec` and `spec.tls` themselves; metadata stays typed.
    assert_eq!(
        out["metadata"]["managedFields"][0]["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {".": {}, "f:hosts": {".": {}, "v:\"a.example\"": {}},
                       "f:tls": {".": {}, "f:mode": {}}}
        })
    );
}

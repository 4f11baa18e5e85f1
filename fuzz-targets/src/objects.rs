//! API object bodies as a create receives them: JSON, YAML or Kubernetes protobuf, decoded
//! through the kind's type (or a custom resource's schema), given the server's create-time
//! fields and the kind's defaults, validated as a create, an update and a status update, and
//! shown as a Table row.
//!
//! The kind is the one the body names (`apiVersion`, `kind`) among the built-in kinds and one
//! custom kind defined here (a schema with defaults, patterns, list types and a CEL rule), as the
//! URL would name it; a body naming none gets one picked by its length, so that every kind sees
//! every shape. Checked beyond "no panic": the canonical form decodes to itself, and defaulting
//! is idempotent, as [`Kind::default`] promises.

use std::sync::{Arc, LazyLock};

use jiff::Timestamp;
use serde_json::{Value, json};
use skiff_kinds::{Kind, Kinds, strategy, typed, validation};

use crate::utf8;

/// The built-in kinds and `widgets.fuzz.skiff.dev/v1`.
pub(crate) static KINDS: LazyLock<Vec<Arc<dyn Kind>>> = LazyLock::new(|| {
    let kinds = Kinds::builtin();
    assert!(
        kinds.define(&widget_definition()),
        "the fuzz CRD defines a kind"
    );
    kinds.snapshot().kinds().to_vec()
});

/// A CustomResourceDefinition with a bit of everything a schema can say.
pub fn widget_definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.fuzz.skiff.dev"},
        "spec": {
            "group": "fuzz.skiff.dev",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
                },
                "additionalPrinterColumns": [
                    {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "x-kubernetes-validations": [
                                {"rule": "!has(self.min) || !has(self.max) || self.min <= self.max", "message": "min above max"},
                                {"rule": "self.tags.all(t, t.size() < 10)", "message": "long tag"}
                            ],
                            "properties": {
                                "replicas": {"type": "integer", "minimum": 0, "maximum": 100},
                                "min": {"type": "integer"},
                                "max": {"type": "integer"},
                                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 20},
                                "size": {"x-kubernetes-int-or-string": true},
                                "ratio": {"type": "number", "multipleOf": 0.5},
                                "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "default": []},
                                "ports": {
                                    "type": "array", "maxItems": 8,
                                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                                    "items": {"type": "object", "required": ["port"], "properties": {
                                        "port": {"type": "integer"},
                                        "name": {"type": "string", "default": "http"}
                                    }}
                                },
                                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "granular"}
                            }
                        },
                        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
                    }
                }}
            }]
        }
    })
}

/// The kind a body names, else one picked by `pick`.
pub(crate) fn kind_of(object: &Value, pick: usize) -> &'static dyn Kind {
    let text = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    KINDS
        .iter()
        .find(|k| {
            let info = k.info();
            info.group == group && info.version == version && info.kind == kind
        })
        .unwrap_or(&KINDS[pick % KINDS.len()])
        .as_ref()
}

/// A JSON body (`application/json`).
pub fn json(data: &[u8]) {
    if let Ok(object) = serde_json::from_slice::<Value>(data) {
        create(object, data.len());
    }
}

/// A YAML body (`application/yaml`), parsed as the API server parses one.
pub fn yaml(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    if let Ok(object) = serde_saphyr::from_str::<Value>(text) {
        create(object, data.len());
    }
}

/// A Kubernetes protobuf body (`application/vnd.kubernetes.protobuf`, `k8s\0` + envelope).
pub fn protobuf(data: &[u8]) {
    let Ok(object) = skiff_kinds::protobuf::decode(data) else {
        return;
    };
    assert!(object.is_object(), "a decoded protobuf body is an object");
    assert!(object.get("kind").is_some_and(Value::is_string));
    create(object, data.len());
}

/// What a create does with a parsed body.
pub(crate) fn create(object: Value, pick: usize) {
    if !object.is_object() {
        return; // the API server refuses it before the kind sees it
    }
    let kind = kind_of(&object, pick);
    let Ok(decoded) = typed::decode(kind, &object) else {
        return;
    };
    let mut object = decoded.object;
    let again = kind.decode(&object).unwrap_or_else(|e| {
        panic!(
            "{}: the canonical form does not decode: {e}",
            kind.info().kind
        )
    });
    assert_eq!(
        again,
        object,
        "{}: decoding the canonical form changes it",
        kind.info().kind
    );
    strategy::prepare_for_create(kind, &mut object);
    kind.default(&mut object);
    let mut twice = object.clone();
    kind.default(&mut twice);
    assert_eq!(
        twice,
        object,
        "{}: defaulting twice differs",
        kind.info().kind
    );
    let ns = kind.info().namespaced.then_some("default");
    for error in validation::validate_create(kind, &object, ns) {
        let _ = error.to_string();
    }
    check_written(kind, &object, &object);
}

/// The checks of an object about to be stored, as an update of `old`: validation of the update
/// and of a status update, and the Table row.
pub(crate) fn check_written(kind: &dyn Kind, new: &Value, old: &Value) {
    let _ = validation::validate_update(kind, new, old);
    let _ = validation::validate_status_update(kind, new, old);
    let _ = kind.cells(new, Timestamp::UNIX_EPOCH);
    let _ = kind.row_conditions(new);
}

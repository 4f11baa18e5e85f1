//! A kind defined at run time for the tests (as a CustomResourceDefinition's would be):
//! `example.com/v1` Widget, namespaced, with an open schema and no strategic merge patch.

use std::sync::Arc;

use jiff::Timestamp;
use schemars::generate::SchemaGenerator;
use serde_json::{Value, json};
use skiff_kinds::patch::schema::Type;
use skiff_kinds::table::Column;
use skiff_kinds::{Kind, Kinds};
use skiff_meta::ResourceInfo;

/// `example.com/v1` Widget.
pub(crate) struct Widget;

/// Its names: `widgets.example.com`, every verb, no subresources.
pub(crate) static INFO: ResourceInfo = ResourceInfo {
    group: "example.com",
    version: "v1",
    kind: "Widget",
    plural: "widgets",
    singular: "widget",
    short_names: &[],
    namespaced: true,
    verbs: &[
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ],
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for Widget {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        Ok(object.clone())
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        let name = "com.example.v1.Widget".to_string();
        generator.definitions_mut().insert(
            name.clone(),
            json!({
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
            }),
        );
        Some(name)
    }

    fn columns(&self) -> Vec<Column> {
        Vec::new()
    }

    fn cells(&self, _object: &Value, _now: Timestamp) -> Option<Vec<Value>> {
        Some(Vec::new())
    }

    fn merge_schema(&self) -> Option<&'static Type> {
        None
    }
}

/// Starts serving Widgets in `kinds`.
pub(crate) fn serve_widgets(kinds: &Kinds) {
    kinds.set("example.com", "widgets", vec![Arc::new(Widget)]);
}

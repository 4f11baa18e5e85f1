//! `core/v1` Namespace.

use super::prelude::*;

/// `core/v1` Namespace.
pub struct Namespace;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Namespace",
    plural: "namespaces",
    singular: "namespace",
    short_names: &["ns"],
    namespaced: false,
    verbs: &[
        "create", "delete", "get", "list", "patch", "update", "watch",
    ],
    subresources: &[
        status("", "v1", "Namespace"),
        Subresource {
            name: "finalize",
            group: "",
            version: "v1",
            kind: "Namespace",
            verbs: &["update"],
        },
    ],
    categories: &[],
    selectable_fields: &[SelectableField::path(
        "status.phase",
        &["status", "phase"],
        "",
    )],
};

impl Kind for Namespace {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::Namespace>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::Namespace>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::namespace_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::namespace_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::namespace(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn name_rule(&self) -> NameFn {
        names::name_is_dns_label
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_namespace(new, old)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        validation::core::validate_namespace_status(new)
    }

    fn prepare_for_create(&self, object: &mut Value) {
        object["status"] = json!({"phase": "Active"});
        defaults::prepare_namespace_for_create(object);
    }
}

//! `core/v1` Secret.

use super::prelude::*;

/// `core/v1` Secret.
pub struct Secret;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Secret",
    plural: "secrets",
    singular: "secret",
    short_names: &[],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[SelectableField::path("type", &["type"], "")],
};

impl Kind for Secret {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::Secret>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::Secret>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::secret_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::secret_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::secret(object);
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_secret(new, old)
    }
}

//! `core/v1` Endpoints.

use super::prelude::*;

/// `core/v1` Endpoints.
pub struct Endpoints;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Endpoints",
    plural: "endpoints",
    singular: "endpoints",
    short_names: &["ep"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for Endpoints {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::Endpoints>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::Endpoints>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::endpoints_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::endpoints_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::endpoints(object);
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_endpoints(new, old)
    }
}

//! `core/v1` ConfigMap.

use super::prelude::*;

/// `core/v1` ConfigMap.
pub struct ConfigMap;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
    singular: "configmap",
    short_names: &["cm"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for ConfigMap {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::ConfigMap>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::ConfigMap>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::config_map_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::config_map_row(object, now)
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_config_map(new, old)
    }
}

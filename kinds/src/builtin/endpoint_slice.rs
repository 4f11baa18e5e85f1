//! `discovery.k8s.io/v1` EndpointSlice.

use super::prelude::*;

/// `discovery.k8s.io/v1` EndpointSlice.
pub struct EndpointSlice;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "discovery.k8s.io",
    version: "v1",
    kind: "EndpointSlice",
    plural: "endpointslices",
    singular: "endpointslice",
    short_names: &[],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for EndpointSlice {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::discovery::v1::EndpointSlice>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::discovery::v1::EndpointSlice>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::endpoint_slice_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::endpoint_slice_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::endpoint_slice(object);
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_endpoint_slice(new, old)
    }
}

//! `coordination.k8s.io/v1` Lease.

use super::prelude::*;

/// `coordination.k8s.io/v1` Lease.
pub struct Lease;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "coordination.k8s.io",
    version: "v1",
    kind: "Lease",
    plural: "leases",
    singular: "lease",
    short_names: &[],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for Lease {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::coordination::v1::Lease>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::coordination::v1::Lease>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::lease_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::lease_row(object, now)
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_lease(new, old)
    }
}

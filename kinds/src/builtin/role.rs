//! `rbac.authorization.k8s.io/v1` Role.

use super::prelude::*;

/// `rbac.authorization.k8s.io/v1` Role.
pub struct Role;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    kind: "Role",
    plural: "roles",
    singular: "role",
    short_names: &[],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for Role {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::rbac::v1::Role>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::rbac::v1::Role>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::role_columns()
    }

    fn cells(&self, object: &Value, _now: Timestamp) -> Option<Vec<Value>> {
        table::role_row(object)
    }

    fn name_rule(&self) -> NameFn {
        names::path_segment_name
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::rbac::validate_role(new)
    }
}

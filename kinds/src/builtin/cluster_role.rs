//! `rbac.authorization.k8s.io/v1` ClusterRole.

use super::prelude::*;

/// `rbac.authorization.k8s.io/v1` ClusterRole.
pub struct ClusterRole;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    kind: "ClusterRole",
    plural: "clusterroles",
    singular: "clusterrole",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for ClusterRole {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::rbac::v1::ClusterRole>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::rbac::v1::ClusterRole>(generator))
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
        validation::rbac::validate_cluster_role(new)
    }
}

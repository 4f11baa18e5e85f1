//! `rbac.authorization.k8s.io/v1` ClusterRoleBinding.

use super::prelude::*;

/// `rbac.authorization.k8s.io/v1` ClusterRoleBinding.
pub struct ClusterRoleBinding;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    kind: "ClusterRoleBinding",
    plural: "clusterrolebindings",
    singular: "clusterrolebinding",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for ClusterRoleBinding {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::rbac::v1::ClusterRoleBinding>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::rbac::v1::ClusterRoleBinding>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::binding_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::binding_row(object, now)
    }

    fn name_rule(&self) -> NameFn {
        names::path_segment_name
    }

    fn default(&self, object: &mut Value) {
        validation::rbac::default_subjects(object);
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::rbac::validate_cluster_role_binding(new, old)
    }
}

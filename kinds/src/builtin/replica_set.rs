//! `apps/v1` ReplicaSet.

use super::prelude::*;

/// `apps/v1` ReplicaSet.
pub struct ReplicaSet;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "apps",
    version: "v1",
    kind: "ReplicaSet",
    plural: "replicasets",
    singular: "replicaset",
    short_names: &["rs"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("apps", "v1", "ReplicaSet"), SCALE],
    categories: &["all"],
    selectable_fields: &[SelectableField::path(
        "status.replicas",
        &["status", "replicas"],
        "0",
    )],
};

impl Kind for ReplicaSet {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::apps::v1::ReplicaSet>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::apps::v1::ReplicaSet>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::replica_set_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::replica_set_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::replica_set(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::apps::validate_replica_set(new, old)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        validation::apps::validate_status(&INFO, new, old)
    }
}

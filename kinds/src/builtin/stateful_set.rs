//! `apps/v1` StatefulSet.

use super::prelude::*;

/// `apps/v1` StatefulSet.
pub struct StatefulSet;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "apps",
    version: "v1",
    kind: "StatefulSet",
    plural: "statefulsets",
    singular: "statefulset",
    short_names: &["sts"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("apps", "v1", "StatefulSet"), SCALE],
    categories: &["all"],
    selectable_fields: &[],
};

impl Kind for StatefulSet {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::apps::v1::StatefulSet>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::apps::v1::StatefulSet>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::stateful_set_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::stateful_set_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::stateful_set(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::apps::validate_stateful_set(new, old)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        validation::apps::validate_status(&INFO, new, old)
    }
}

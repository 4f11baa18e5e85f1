//! `apps/v1` DaemonSet.

use super::prelude::*;

/// `apps/v1` DaemonSet.
pub struct DaemonSet;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "apps",
    version: "v1",
    kind: "DaemonSet",
    plural: "daemonsets",
    singular: "daemonset",
    short_names: &["ds"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("apps", "v1", "DaemonSet")],
    categories: &["all"],
    selectable_fields: &[],
};

impl Kind for DaemonSet {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::apps::v1::DaemonSet>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::apps::v1::DaemonSet>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::daemon_set_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::daemon_set_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::daemon_set(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::apps::validate_daemon_set(new, old)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        validation::apps::validate_status(&INFO, new, old)
    }
}

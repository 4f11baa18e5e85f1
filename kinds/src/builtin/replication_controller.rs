//! `core/v1` ReplicationController: the ReplicaSet's predecessor, still created by old manifests
//! and by client libraries' own test suites. Its selector is a plain map of labels, defaulted from
//! the template's labels, and (unlike a ReplicaSet's) it may change.

use super::prelude::*;
use crate::kind::{ScalePaths, SelectorShape};

/// `core/v1` ReplicationController.
pub struct ReplicationController;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "ReplicationController",
    plural: "replicationcontrollers",
    singular: "replicationcontroller",
    short_names: &["rc"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("", "v1", "ReplicationController"), SCALE],
    categories: &["all"],
    selectable_fields: &[SelectableField::path(
        "status.replicas",
        &["status", "replicas"],
        "0",
    )],
};

impl Kind for ReplicationController {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::ReplicationController>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::ReplicationController>(
            generator,
        ))
    }

    fn columns(&self) -> Vec<Column> {
        // kubectl prints a ReplicationController as it prints a ReplicaSet.
        table::replica_set_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::replication_controller_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::replication_controller(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::apps::validate_replication_controller(new, old)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        validation::apps::validate_status(&INFO, new, old)
    }

    fn scale(&self) -> Option<ScalePaths> {
        Some(ScalePaths {
            selector_shape: SelectorShape::Map,
            ..ScalePaths::workload()
        })
    }
}

//! `core/v1` Node.

use super::prelude::*;

/// `core/v1` Node.
pub struct Node;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Node",
    plural: "nodes",
    singular: "node",
    short_names: &["no"],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status("", "v1", "Node"), proxy("NodeProxyOptions")],
    categories: &[],
    selectable_fields: &[SelectableField::path(
        "spec.unschedulable",
        &["spec", "unschedulable"],
        "false",
    )],
};

impl Kind for Node {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::Node>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::Node>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::node_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::node_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::node(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy {
            tracks_generation: true,
            // The kubelet registers its node with its status.
            client_writes_status: true,
        }
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_node(new, old)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        validation::core::validate_node_status(new)
    }
}

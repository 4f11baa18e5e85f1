//! `storage.k8s.io/v1` CSINode: the CSI drivers registered on one node (named after the node).
//! Served and stored for CSI driver charts; skiff's kubelet registers none.

use k8s_openapi::api::storage::v1::CSINode as Node;

use super::prelude::*;
use crate::validation::decode;

/// `storage.k8s.io/v1` CSINode.
pub struct CsiNode;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "storage.k8s.io",
    version: "v1",
    kind: "CSINode",
    plural: "csinodes",
    singular: "csinode",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for CsiNode {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Node>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Node>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Drivers",
                "integer",
                "Drivers indicates the number of CSI drivers registered on the node",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let drivers = object["spec"]["drivers"].as_array().map_or(0, Vec::len);
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(drivers),
            table::age_of(object, now),
        ])
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        let _: Node = decode(new, "")?;
        Ok(Vec::new())
    }
}

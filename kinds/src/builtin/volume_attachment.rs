//! `storage.k8s.io/v1` VolumeAttachment: a request that a CSI attacher attach a volume to a
//! node, and its answer in `status`. Served and stored for CSI drivers' external attachers;
//! the spec never changes once made.

use k8s_openapi::api::storage::v1::VolumeAttachment as Va;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `storage.k8s.io/v1` VolumeAttachment.
pub struct VolumeAttachment;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "storage.k8s.io",
    version: "v1",
    kind: "VolumeAttachment",
    plural: "volumeattachments",
    singular: "volumeattachment",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status("storage.k8s.io", "v1", "VolumeAttachment")],
    categories: &[],
    selectable_fields: &[],
};

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let va: Va = decode(new, "")?;
    let path = Path::new("spec");
    let mut errs = Vec::new();
    if va.spec.attacher.is_empty() {
        errs.push(FieldError::required(path.child("attacher"), ""));
    }
    if va.spec.node_name.is_empty() {
        errs.push(FieldError::required(path.child("nodeName"), ""));
    }
    let source = &va.spec.source;
    if source.persistent_volume_name.is_some() == source.inline_volume_spec.is_some() {
        errs.push(FieldError::invalid(
            path.child("source"),
            new["spec"]["source"].clone(),
            "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        ));
    }
    if let Some(old) = old
        && new.get("spec") != old.get("spec")
    {
        errs.push(FieldError::invalid(
            path,
            new["spec"].clone(),
            "field is immutable",
        ));
    }
    Ok(errs)
}

impl Kind for VolumeAttachment {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Va>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Va>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Attacher",
                "string",
                "attacher indicates the name of the volume driver that MUST handle this request.",
            ),
            col(
                "PV",
                "string",
                "persistentVolumeName represents the name of the persistent volume to attach.",
            ),
            col(
                "Node",
                "string",
                "nodeName represents the node that the volume should be attached to.",
            ),
            col(
                "Attached",
                "boolean",
                "attached indicates the volume is successfully attached.",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(spec["attacher"].as_str().unwrap_or_default()),
            json!(
                spec["source"]["persistentVolumeName"]
                    .as_str()
                    .unwrap_or_default()
            ),
            json!(spec["nodeName"].as_str().unwrap_or_default()),
            json!(object["status"]["attached"].as_bool().unwrap_or(false)),
            table::age_of(object, now),
        ])
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new, old)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        let _: Va = decode(new, "")?;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::{create_msgs, update_msgs};

    fn va(node: &str, source: Value) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
               "metadata": {"name": "csi-1"},
               "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": node, "source": source}})
    }

    #[test]
    fn one_source_a_node_and_a_fixed_spec() {
        let ok = va("n1", json!({"persistentVolumeName": "pv1"}));
        assert!(create_msgs("storage.k8s.io", "VolumeAttachment", ok.clone()).is_empty());
        assert_eq!(
            create_msgs("storage.k8s.io", "VolumeAttachment", va("", json!({}))),
            [
                "spec.nodeName: Required value",
                "spec.source: Invalid value: {}: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            ]
        );
        let moved = va("n2", json!({"persistentVolumeName": "pv1"}));
        assert_eq!(
            update_msgs("storage.k8s.io", "VolumeAttachment", moved, ok.clone()).len(),
            1
        );
        let cells = VolumeAttachment.cells(&ok, Timestamp::now()).unwrap();
        assert_eq!(
            cells[1..5],
            [
                json!("hostpath.csi.k8s.io"),
                json!("pv1"),
                json!("n1"),
                json!(false)
            ]
        );
    }
}

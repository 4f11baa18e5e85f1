//! `storage.k8s.io/v1` CSIDriver: what a CSI volume driver on the nodes needs from Kubernetes
//! (attach first or not, pod information on mount, capacity tracking, tokens). Served and stored
//! so that driver charts install; skiff's own volumes (hostPath, local-path) use no CSI driver.

use k8s_openapi::api::storage::v1::CSIDriver as Driver;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `storage.k8s.io/v1` CSIDriver.
pub struct CsiDriver;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "storage.k8s.io",
    version: "v1",
    kind: "CSIDriver",
    plural: "csidrivers",
    singular: "csidriver",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

const LIFECYCLE_MODES: &[&str] = &["Persistent", "Ephemeral"];
const FS_GROUP_POLICIES: &[&str] = &["ReadWriteOnceWithFSType", "File", "None"];

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let driver: Driver = decode(new, "")?;
    let path = Path::new("spec");
    let mut errs = Vec::new();
    for (i, mode) in driver
        .spec
        .volume_lifecycle_modes
        .iter()
        .flatten()
        .enumerate()
    {
        if !LIFECYCLE_MODES.contains(&mode.as_str()) {
            errs.push(FieldError::not_supported(
                path.child("volumeLifecycleModes").index(i),
                mode.as_str(),
                LIFECYCLE_MODES,
            ));
        }
    }
    if let Some(policy) = driver.spec.fs_group_policy.as_deref()
        && !FS_GROUP_POLICIES.contains(&policy)
    {
        errs.push(FieldError::not_supported(
            path.child("fsGroupPolicy"),
            policy,
            FS_GROUP_POLICIES,
        ));
    }
    if let Some(old) = old {
        // attachRequired, podInfoOnMount, volumeLifecycleModes and fsGroupPolicy stay.
        for field in [
            "attachRequired",
            "podInfoOnMount",
            "volumeLifecycleModes",
            "fsGroupPolicy",
        ] {
            if new["spec"].get(field) != old["spec"].get(field) {
                errs.push(FieldError::invalid(
                    path.child(field),
                    new["spec"].get(field).cloned().unwrap_or(Value::Null),
                    "field is immutable",
                ));
            }
        }
    }
    Ok(errs)
}

fn yes_no(value: &Value) -> Value {
    json!(value.as_bool().unwrap_or(false))
}

impl Kind for CsiDriver {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Driver>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Driver>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "AttachRequired",
                "boolean",
                "attachRequired indicates this CSI volume driver requires an attach operation.",
            ),
            col(
                "PodInfoOnMount",
                "boolean",
                "podInfoOnMount indicates this CSI volume driver requires additional pod information during mount operations.",
            ),
            col(
                "StorageCapacity",
                "boolean",
                "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity.",
            ),
            col(
                "TokenRequests",
                "string",
                "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for.",
            ),
            col(
                "RequiresRepublish",
                "boolean",
                "requiresRepublish indicates the CSI driver wants NodePublishVolume being periodically called.",
            ),
            col(
                "Modes",
                "string",
                "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports.",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        let audiences: Vec<&str> = spec["tokenRequests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["audience"].as_str())
            .collect();
        let modes: Vec<&str> = spec["volumeLifecycleModes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let or_none = |list: Vec<&str>| {
            if list.is_empty() {
                "<unset>".to_string()
            } else {
                list.join(",")
            }
        };
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            yes_no(&spec["attachRequired"]),
            yes_no(&spec["podInfoOnMount"]),
            yes_no(&spec["storageCapacity"]),
            json!(or_none(audiences)),
            yes_no(&spec["requiresRepublish"]),
            json!(or_none(modes)),
            table::age_of(object, now),
        ])
    }

    fn default(&self, object: &mut Value) {
        let Some(map) = object.as_object_mut() else {
            return;
        };
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        let Some(spec) = spec.as_object_mut() else {
            return;
        };
        for (field, value) in [
            ("attachRequired", json!(true)),
            ("podInfoOnMount", json!(false)),
            ("storageCapacity", json!(false)),
            ("fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
            ("requiresRepublish", json!(false)),
            ("volumeLifecycleModes", json!(["Persistent"])),
            ("seLinuxMount", json!(false)),
        ] {
            spec.entry(field).or_insert(value);
        }
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new, old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::{create_msgs, update_msgs};

    fn driver(spec: Value) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
               "metadata": {"name": "hostpath.csi.k8s.io"}, "spec": spec})
    }

    #[test]
    fn defaults_modes_and_immutable_fields() {
        let mut object = driver(json!({}));
        CsiDriver.default(&mut object);
        assert_eq!(object["spec"]["attachRequired"], true);
        assert_eq!(
            object["spec"]["volumeLifecycleModes"],
            json!(["Persistent"])
        );
        assert!(create_msgs("storage.k8s.io", "CSIDriver", object.clone()).is_empty());
        assert_eq!(
            create_msgs(
                "storage.k8s.io",
                "CSIDriver",
                driver(json!({"volumeLifecycleModes": ["Forever"]}))
            ),
            [
                "spec.volumeLifecycleModes[0]: Unsupported value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\""
            ]
        );
        assert_eq!(
            update_msgs(
                "storage.k8s.io",
                "CSIDriver",
                driver(json!({"attachRequired": false})),
                driver(json!({}))
            ),
            ["spec.attachRequired: Invalid value: false: field is immutable"]
        );
        let cells = CsiDriver.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(
            cells[1..7],
            [
                json!(true),
                json!(false),
                json!(false),
                json!("<unset>"),
                json!(false),
                json!("Persistent")
            ]
        );
    }
}

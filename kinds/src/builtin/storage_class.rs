//! `storage.k8s.io/v1` StorageClass: a provisioner and its parameters, what happens to the
//! volumes it makes (`reclaimPolicy`, Delete by default), when they are made
//! (`volumeBindingMode`: Immediate, or WaitForFirstConsumer once a pod using the claim is
//! scheduled), and whether claims may grow. The class marked with [`DEFAULT_ANNOTATION`] is what
//! a claim without a class gets.

use k8s_openapi::api::storage::v1::StorageClass as Sc;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `storage.k8s.io/v1` StorageClass.
pub struct StorageClass;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "storage.k8s.io",
    version: "v1",
    kind: "StorageClass",
    plural: "storageclasses",
    singular: "storageclass",
    short_names: &["sc"],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

/// The annotation that makes a class the default.
pub const DEFAULT_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// Its beta spelling, which Kubernetes still honours.
pub const BETA_DEFAULT_ANNOTATION: &str = "storageclass.beta.kubernetes.io/is-default-class";

/// Whether a class (as JSON) is marked default.
pub fn is_default(metadata: &Value) -> bool {
    [DEFAULT_ANNOTATION, BETA_DEFAULT_ANNOTATION]
        .iter()
        .any(|a| metadata["annotations"][*a].as_str() == Some("true"))
}

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let sc: Sc = decode(new, "")?;
    let mut errs = Vec::new();
    if sc.provisioner.is_empty() {
        errs.push(FieldError::required(Path::new("provisioner"), ""));
    } else {
        for m in names::qualified_name(&sc.provisioner) {
            errs.push(FieldError::invalid(
                Path::new("provisioner"),
                sc.provisioner.as_str(),
                m,
            ));
        }
    }
    match sc.reclaim_policy.as_deref() {
        None | Some("Delete") | Some("Retain") => {}
        Some(other) => errs.push(FieldError::not_supported(
            Path::new("reclaimPolicy"),
            other,
            &["Delete", "Retain"],
        )),
    }
    match sc.volume_binding_mode.as_deref() {
        Some("Immediate") | Some("WaitForFirstConsumer") => {}
        None => errs.push(FieldError::required(Path::new("volumeBindingMode"), "")),
        Some(other) => errs.push(FieldError::not_supported(
            Path::new("volumeBindingMode"),
            other,
            &["Immediate", "WaitForFirstConsumer"],
        )),
    }
    if let Some(old) = old {
        for (field, what) in [
            ("parameters", "parameters"),
            ("provisioner", "provisioner"),
            ("reclaimPolicy", "reclaimPolicy"),
        ] {
            if new.get(field) != old.get(field) {
                errs.push(FieldError::forbidden(
                    Path::new(field),
                    format!("updates to {what} are forbidden."),
                ));
            }
        }
        if new.get("volumeBindingMode") != old.get("volumeBindingMode") {
            errs.push(FieldError::invalid(
                Path::new("volumeBindingMode"),
                new.get("volumeBindingMode").cloned().unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
    }
    Ok(errs)
}

impl Kind for StorageClass {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Sc>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Sc>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Provisioner",
                "string",
                "provisioner indicates the type of the provisioner.",
            ),
            col(
                "ReclaimPolicy",
                "string",
                "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.",
            ),
            col(
                "VolumeBindingMode",
                "string",
                "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.",
            ),
            col(
                "AllowVolumeExpansion",
                "string",
                "allowVolumeExpansion shows whether the storage class allow volume expand.",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let mut name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if is_default(&object["metadata"]) {
            name.push_str(" (default)");
        }
        Some(vec![
            json!(name),
            json!(object["provisioner"].as_str().unwrap_or_default()),
            json!(object["reclaimPolicy"].as_str().unwrap_or("Delete")),
            json!(object["volumeBindingMode"].as_str().unwrap_or("Immediate")),
            json!(object["allowVolumeExpansion"].as_bool().unwrap_or(false)),
            table::age_of(object, now),
        ])
    }

    fn default(&self, object: &mut Value) {
        let Some(map) = object.as_object_mut() else {
            return;
        };
        map.entry("reclaimPolicy")
            .or_insert_with(|| json!("Delete"));
        map.entry("volumeBindingMode")
            .or_insert_with(|| json!("Immediate"));
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new, old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::{create_msgs, update_msgs};

    fn sc(provisioner: &str, parameters: Value) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "fast", "annotations": {DEFAULT_ANNOTATION: "true"}},
               "provisioner": provisioner, "parameters": parameters})
    }

    #[test]
    fn defaults_and_immutable_fields() {
        let mut object = sc("skiff.io/local-path", json!({}));
        StorageClass.default(&mut object);
        assert_eq!(object["reclaimPolicy"], "Delete");
        assert_eq!(object["volumeBindingMode"], "Immediate");
        assert!(create_msgs("storage.k8s.io", "StorageClass", object.clone()).is_empty());
        assert_eq!(
            create_msgs("storage.k8s.io", "StorageClass", sc("", json!({}))),
            ["provisioner: Required value"]
        );
        assert_eq!(
            update_msgs(
                "storage.k8s.io",
                "StorageClass",
                sc("other.io/x", json!({"a": "b"})),
                sc("skiff.io/local-path", json!({}))
            ),
            [
                "parameters: Forbidden: updates to parameters are forbidden.",
                "provisioner: Forbidden: updates to provisioner are forbidden.",
            ]
        );
        let cells = StorageClass.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(
            cells[..5],
            [
                json!("fast (default)"),
                json!("skiff.io/local-path"),
                json!("Delete"),
                json!("Immediate"),
                json!(false)
            ]
        );
    }
}

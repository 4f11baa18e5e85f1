//! `core/v1` PersistentVolumeClaim: a namespaced request for storage (access modes, a size, a
//! class) that the PV binder binds to a PersistentVolume. After creation its spec is frozen
//! except `resources.requests.storage`, which may only grow (and only once bound), and
//! `volumeName`, which the binder fills in once.

use k8s_openapi::api::core::v1::PersistentVolumeClaim as Pvc;

use super::persistent_volume::{
    access_modes_cell, class_of, phase_cell, storage_of, validate_access_modes,
    validate_class_name, validate_volume_mode,
};
use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `core/v1` PersistentVolumeClaim.
pub struct PersistentVolumeClaim;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "PersistentVolumeClaim",
    plural: "persistentvolumeclaims",
    singular: "persistentvolumeclaim",
    short_names: &["pvc"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("", "v1", "PersistentVolumeClaim")],
    categories: &[],
    selectable_fields: &[],
};

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let pvc: Pvc = decode(new, "")?;
    let spec = pvc.spec.clone().unwrap_or_default();
    let sp = Path::new("spec");
    let mut errs = validate_access_modes(
        spec.access_modes.as_deref().unwrap_or_default(),
        "at least 1 access mode is required",
        &sp.child("accessModes"),
    );
    let storage_path = sp.child("resources").child("requests").key("storage");
    let requests = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    match requests.and_then(|r| r.get("storage")) {
        None => errs.push(FieldError::required(storage_path.clone(), "")),
        Some(raw) => match storage_of(requests) {
            Some(q) if q.is_zero() || q.is_negative() => errs.push(FieldError::invalid(
                storage_path.clone(),
                raw.0.as_str(),
                "must be greater than zero",
            )),
            Some(_) => {}
            None => errs.push(FieldError::invalid(
                storage_path.clone(),
                raw.0.as_str(),
                "quantities must match the regular expression",
            )),
        },
    }
    errs.extend(validate_class_name(
        spec.storage_class_name.as_deref(),
        &sp.child("storageClassName"),
    ));
    errs.extend(validate_volume_mode(
        spec.volume_mode.as_deref(),
        &sp.child("volumeMode"),
    ));
    if let Some(old) = old {
        errs.extend(validate_update(new, old, &storage_path));
    }
    Ok(errs)
}

/// The update rules: the spec is frozen but for the storage request of a bound claim (which
/// may not shrink) and a `volumeName` set for the first time.
fn validate_update(new: &Value, old: &Value, storage_path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let frozen = |object: &Value| -> Value {
        let mut spec = object.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(map) = spec.as_object_mut() {
            if let Some(r) = map.get_mut("resources").and_then(|r| r.get_mut("requests")) {
                r.as_object_mut().map(|r| r.remove("storage"));
            }
            map.remove("volumeAttributesClassName");
        }
        spec
    };
    let mut before = frozen(old);
    if old["spec"]["volumeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        // The binder names the volume once.
        before["volumeName"] = new["spec"]["volumeName"].clone();
        if before["volumeName"].is_null() {
            before.as_object_mut().map(|m| m.remove("volumeName"));
        }
    }
    if frozen(new) != before {
        errs.push(FieldError::forbidden(
            Path::new("spec"),
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        ));
        return errs;
    }
    let request = |object: &Value| -> Option<crate::validation::quantity::Quantity> {
        let pvc: Pvc = serde_json::from_value(object.clone()).ok()?;
        storage_of(pvc.spec?.resources?.requests.as_ref())
    };
    let (new_q, old_q) = (request(new), request(old));
    if let (Some(n), Some(o)) = (new_q, old_q)
        && n.nanos() != o.nanos()
    {
        if old["status"]["phase"].as_str() != Some("Bound") {
            errs.push(FieldError::forbidden(
                Path::new("spec"),
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        } else if n.nanos() < o.nanos() {
            errs.push(FieldError::forbidden(
                storage_path.clone(),
                "field can not be less than previous value",
            ));
        }
    }
    errs
}

fn validate_status(new: &Value) -> Checked {
    let pvc: Pvc = decode(new, "")?;
    const PHASES: &[&str] = &["Bound", "Lost", "Pending"];
    Ok(match pvc.status.and_then(|s| s.phase).as_deref() {
        None => Vec::new(),
        Some(p) if PHASES.contains(&p) => Vec::new(),
        Some(p) => vec![FieldError::not_supported(
            Path::new("status").child("phase"),
            p,
            PHASES,
        )],
    })
}

impl Kind for PersistentVolumeClaim {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Pvc>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Pvc>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col, wide};
        vec![
            NAME,
            col(
                "Status",
                "string",
                "phase represents the current phase of PersistentVolumeClaim.",
            ),
            col(
                "Volume",
                "string",
                "volumeName is the binding reference to the PersistentVolume backing this claim.",
            ),
            col(
                "Capacity",
                "string",
                "capacity represents the actual resources of the underlying volume.",
            ),
            col(
                "Access Modes",
                "string",
                "accessModes contains the desired access modes the volume should have.",
            ),
            col("StorageClass", "string", "StorageClass of the pvc"),
            col(
                "VolumeAttributesClass",
                "string",
                "VolumeAttributesClass of the pvc",
            ),
            AGE,
            wide(
                "VolumeMode",
                "string",
                "volumeMode defines what type of volume is required by the claim.",
            ),
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        let volume = spec["volumeName"].as_str().unwrap_or_default();
        // kubectl shows the capacity and modes of the volume once the claim names one.
        let (capacity, modes) = if volume.is_empty() {
            (String::new(), String::new())
        } else {
            (
                object["status"]["capacity"]["storage"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                access_modes_cell(&object["status"]["accessModes"]),
            )
        };
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(phase_cell(object)),
            json!(volume),
            json!(capacity),
            json!(modes),
            json!(class_of(object)),
            json!(
                spec["volumeAttributesClassName"]
                    .as_str()
                    .unwrap_or("<unset>")
            ),
            table::age_of(object, now),
            json!(spec["volumeMode"].as_str().unwrap_or("<unset>")),
        ])
    }

    fn default(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("volumeMode")
                .or_insert_with(|| json!("Filesystem"));
        }
    }

    fn prepare_for_create(&self, object: &mut Value) {
        object["status"] = json!({"phase": "Pending"});
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new, old)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        validate_status(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::{create_msgs, update_msgs};

    fn pvc(size: &str, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "namespace": "default"},
               "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                        "resources": {"requests": {"storage": size}}},
               "status": status})
    }

    #[test]
    fn a_claim_needs_modes_and_a_positive_size() {
        assert!(create_msgs("", "PersistentVolumeClaim", pvc("1Gi", json!({}))).is_empty());
        let mut bare = pvc("0", json!({}));
        bare["spec"]["accessModes"] = json!([]);
        assert_eq!(
            create_msgs("", "PersistentVolumeClaim", bare),
            [
                "spec.accessModes: Required value: at least 1 access mode is required",
                "spec.resources.requests[storage]: Invalid value: \"0\": must be greater than zero",
            ]
        );
    }

    #[test]
    fn the_spec_is_frozen_but_a_bound_claim_may_grow() {
        let bound = json!({"phase": "Bound"});
        let grown = pvc("2Gi", bound.clone());
        assert!(
            update_msgs(
                "",
                "PersistentVolumeClaim",
                grown,
                pvc("1Gi", bound.clone())
            )
            .is_empty()
        );
        assert_eq!(
            update_msgs(
                "",
                "PersistentVolumeClaim",
                pvc("1Gi", bound.clone()),
                pvc("2Gi", bound.clone())
            ),
            [
                "spec.resources.requests[storage]: Forbidden: field can not be less than previous value"
            ]
        );
        let pending = json!({"phase": "Pending"});
        assert_eq!(
            update_msgs(
                "",
                "PersistentVolumeClaim",
                pvc("2Gi", pending.clone()),
                pvc("1Gi", pending.clone())
            ),
            [
                "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
            ]
        );
        let mut other_class = pvc("1Gi", bound.clone());
        other_class["spec"]["storageClassName"] = json!("fast");
        assert_eq!(
            update_msgs(
                "",
                "PersistentVolumeClaim",
                other_class,
                pvc("1Gi", bound.clone())
            )
            .len(),
            1
        );
        // The binder names the volume once, and only once.
        let mut named = pvc("1Gi", pending.clone());
        named["spec"]["volumeName"] = json!("pv1");
        assert!(
            update_msgs(
                "",
                "PersistentVolumeClaim",
                named.clone(),
                pvc("1Gi", pending.clone())
            )
            .is_empty()
        );
        let mut renamed = named.clone();
        renamed["spec"]["volumeName"] = json!("pv2");
        assert_eq!(
            update_msgs("", "PersistentVolumeClaim", renamed, named).len(),
            1
        );
    }

    #[test]
    fn rows_show_the_volume_once_bound() {
        let mut object = pvc("1Gi", json!({"phase": "Pending"}));
        PersistentVolumeClaim.default(&mut object);
        let cells = PersistentVolumeClaim
            .cells(&object, Timestamp::now())
            .unwrap();
        assert_eq!(
            cells[..7],
            [
                json!("data"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!("local-path"),
                json!("<unset>")
            ]
        );
        object["spec"]["volumeName"] = json!("pvc-1");
        object["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]});
        object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let cells = PersistentVolumeClaim
            .cells(&object, Timestamp::now())
            .unwrap();
        assert_eq!(
            cells[1..5],
            [
                json!("Terminating"),
                json!("pvc-1"),
                json!("1Gi"),
                json!("RWO")
            ]
        );
        assert_eq!(cells[8], "Filesystem");
    }
}

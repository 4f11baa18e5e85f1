//! `core/v1` PersistentVolume: cluster-scoped storage with a capacity, access modes, exactly one
//! volume source, a reclaim policy (Retain by default) and a `claimRef` once bound; plus the
//! helpers its claim and class share (access modes as kubectl abbreviates them, quantities).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume as Pv, PersistentVolumeSpec};

use super::prelude::*;
use crate::validation::quantity;
use crate::validation::{FieldError, Path, decode};

/// `core/v1` PersistentVolume.
pub struct PersistentVolume;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "PersistentVolume",
    plural: "persistentvolumes",
    singular: "persistentvolume",
    short_names: &["pv"],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status("", "v1", "PersistentVolume")],
    categories: &[],
    selectable_fields: &[],
};

/// The access modes Kubernetes knows.
pub(crate) const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// Access modes as kubectl prints them (`GetAccessModesAsString`): RWO, ROX, RWX, RWOP in that
/// order, each once.
pub(crate) fn access_modes_cell(modes: &Value) -> String {
    let have: Vec<&str> = modes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| have.contains(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// Checks a list of access modes (PersistentVolume and claim alike).
pub(crate) fn validate_access_modes(
    modes: &[String],
    required: &'static str,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if modes.is_empty() {
        errs.push(FieldError::required(path.clone(), required));
    }
    for mode in modes {
        if !ACCESS_MODES.contains(&mode.as_str()) {
            errs.push(FieldError::not_supported(
                path.clone(),
                mode.as_str(),
                ACCESS_MODES,
            ));
        }
    }
    if modes.len() > 1 && modes.iter().any(|m| m == "ReadWriteOncePod") {
        errs.push(FieldError::forbidden(
            path.clone(),
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
    errs
}

/// Checks a `volumeMode` (Block or Filesystem) when set.
pub(crate) fn validate_volume_mode(mode: Option<&str>, path: &Path) -> Vec<FieldError> {
    match mode {
        None | Some("Block") | Some("Filesystem") => Vec::new(),
        Some(other) => vec![FieldError::not_supported(
            path.clone(),
            other,
            &["Block", "Filesystem"],
        )],
    }
}

/// Checks a `storageClassName` when set (a DNS subdomain).
pub(crate) fn validate_class_name(name: Option<&str>, path: &Path) -> Vec<FieldError> {
    match name {
        Some(n) if !n.is_empty() => names::dns1123_subdomain(n)
            .into_iter()
            .map(|m| FieldError::invalid(path.clone(), n, m))
            .collect(),
        _ => Vec::new(),
    }
}

/// The `storage` entry of a resource list, parsed; `None` when absent or malformed.
pub fn storage_of(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<quantity::Quantity> {
    quantity::parse_k8s(list?.get("storage")?).ok()
}

/// The volume sources set in a PersistentVolume's spec, by their JSON names.
fn sources(spec: &Value) -> Vec<&str> {
    const SOURCES: &[&str] = &[
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "csi",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "glusterfs",
        "hostPath",
        "iscsi",
        "local",
        "nfs",
        "photonPersistentDisk",
        "portworxVolume",
        "quobyte",
        "rbd",
        "scaleIO",
        "storageos",
        "vsphereVolume",
    ];
    SOURCES
        .iter()
        .copied()
        .filter(|s| spec.get(*s).is_some_and(|v| !v.is_null()))
        .collect()
}

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let pv: Pv = decode(new, "")?;
    let spec = pv.spec.clone().unwrap_or_default();
    let raw = new.get("spec").cloned().unwrap_or(Value::Null);
    let sp = Path::new("spec");
    let mut errs = validate_access_modes(
        spec.access_modes.as_deref().unwrap_or_default(),
        "must specify at least 1 access mode",
        &sp.child("accessModes"),
    );
    errs.extend(validate_capacity(&spec, &sp));
    match spec.persistent_volume_reclaim_policy.as_deref() {
        None | Some("Delete") | Some("Recycle") | Some("Retain") => {}
        Some(other) => errs.push(FieldError::not_supported(
            sp.child("persistentVolumeReclaimPolicy"),
            other,
            &["Delete", "Recycle", "Retain"],
        )),
    }
    errs.extend(validate_class_name(
        spec.storage_class_name.as_deref(),
        &sp.child("storageClassName"),
    ));
    errs.extend(validate_volume_mode(
        spec.volume_mode.as_deref(),
        &sp.child("volumeMode"),
    ));
    let found = sources(&raw);
    match found.as_slice() {
        [] => errs.push(FieldError::required(
            sp.clone(),
            "must specify a volume type",
        )),
        [_] => {}
        [_, rest @ ..] => {
            for s in rest {
                errs.push(FieldError::forbidden(
                    sp.child(s),
                    "may not specify more than 1 volume type",
                ));
            }
        }
    }
    if let Some(hp) = &spec.host_path
        && hp.path.is_empty()
    {
        errs.push(FieldError::required(sp.child("hostPath").child("path"), ""));
    }
    if let Some(local) = &spec.local {
        if local.path.is_empty() {
            errs.push(FieldError::required(sp.child("local").child("path"), ""));
        }
        if spec
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref())
            .is_none()
        {
            errs.push(FieldError::required(
                sp.child("nodeAffinity"),
                "Local volume requires node affinity",
            ));
        }
    }
    if let Some(required) = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        && required.node_selector_terms.is_empty()
    {
        errs.push(FieldError::required(
            sp.child("nodeAffinity")
                .child("required")
                .child("nodeSelectorTerms"),
            "must have at least one node selector term",
        ));
    }
    if let Some(old) = old {
        let before = old.get("spec").cloned().unwrap_or(Value::Null);
        let source = |spec: &Value| -> Vec<Value> {
            sources(spec).iter().map(|s| spec[*s].clone()).collect()
        };
        if source(&raw) != source(&before) && !found.is_empty() {
            errs.push(FieldError::forbidden(
                sp.child("persistentvolumesource"),
                "spec.persistentvolumesource is immutable after creation",
            ));
        }
        if raw.get("volumeMode") != before.get("volumeMode") {
            errs.push(FieldError::invalid(
                sp.child("volumeMode"),
                raw.get("volumeMode").cloned().unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
    }
    Ok(errs)
}

fn validate_capacity(spec: &PersistentVolumeSpec, sp: &Path) -> Vec<FieldError> {
    let path = sp.child("capacity");
    let capacity = spec.capacity.clone().unwrap_or_default();
    if capacity.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let mut errs = Vec::new();
    if !capacity.contains_key("storage") || capacity.len() > 1 {
        errs.push(FieldError::not_supported(
            path.clone(),
            serde_json::to_value(&capacity).unwrap_or(Value::Null),
            &["storage"],
        ));
    }
    for (name, q) in &capacity {
        match quantity::parse_k8s(q) {
            Ok(q) if q.is_negative() => errs.push(FieldError::invalid(
                path.key(name),
                q_str(q_raw(&capacity, name)),
                "must be greater than or equal to 0",
            )),
            Ok(_) => {}
            Err(e) => errs.push(FieldError::invalid(
                path.key(name),
                q_str(q_raw(&capacity, name)),
                e.to_string(),
            )),
        }
    }
    errs
}

fn q_raw<'a>(
    list: &'a BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    name: &str,
) -> &'a str {
    list.get(name).map(|q| q.0.as_str()).unwrap_or_default()
}

fn q_str(s: &str) -> Value {
    Value::String(s.to_string())
}

fn validate_status(new: &Value) -> Checked {
    let pv: Pv = decode(new, "")?;
    let phase = pv.status.and_then(|s| s.phase);
    const PHASES: &[&str] = &["Available", "Bound", "Failed", "Pending", "Released"];
    Ok(match phase.as_deref() {
        None => Vec::new(),
        Some(p) if PHASES.contains(&p) => Vec::new(),
        Some(p) => vec![FieldError::not_supported(
            Path::new("status").child("phase"),
            p,
            PHASES,
        )],
    })
}

/// The `storageClassName` of a volume or claim (the beta annotation first, as Kubernetes reads
/// it).
pub(crate) fn class_of(object: &Value) -> String {
    object["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
        .as_str()
        .or_else(|| object["spec"]["storageClassName"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The phase cell: `Terminating` while the object is being deleted.
pub(crate) fn phase_cell(object: &Value) -> String {
    if object["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating".into();
    }
    object["status"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

impl Kind for PersistentVolume {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Pv>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Pv>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col, wide};
        vec![
            NAME,
            col(
                "Capacity",
                "string",
                "capacity is the description of the persistent volume's resources and capacity.",
            ),
            col(
                "Access Modes",
                "string",
                "accessModes contains all ways the volume can be mounted.",
            ),
            col(
                "Reclaim Policy",
                "string",
                "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
            ),
            col(
                "Status",
                "string",
                "phase indicates if a volume is available, bound to a claim, or released by a claim.",
            ),
            col(
                "Claim",
                "string",
                "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.",
            ),
            col("StorageClass", "string", "StorageClass of the pv"),
            col(
                "VolumeAttributesClass",
                "string",
                "VolumeAttributesClass of the pv",
            ),
            col(
                "Reason",
                "string",
                "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.",
            ),
            AGE,
            wide(
                "VolumeMode",
                "string",
                "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.",
            ),
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        let claim = match (
            spec["claimRef"]["namespace"].as_str(),
            spec["claimRef"]["name"].as_str(),
        ) {
            (None, None) if spec["claimRef"].is_null() => String::new(),
            (ns, name) => format!("{}/{}", ns.unwrap_or_default(), name.unwrap_or_default()),
        };
        let text = |v: &Value| json!(v.as_str().unwrap_or_default());
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            text(&spec["capacity"]["storage"]),
            json!(access_modes_cell(&spec["accessModes"])),
            text(&spec["persistentVolumeReclaimPolicy"]),
            json!(phase_cell(object)),
            json!(claim),
            json!(class_of(object)),
            json!(
                spec["volumeAttributesClassName"]
                    .as_str()
                    .unwrap_or("<unset>")
            ),
            text(&object["status"]["reason"]),
            table::age_of(object, now),
            json!(spec["volumeMode"].as_str().unwrap_or("<unset>")),
        ])
    }

    fn default(&self, object: &mut Value) {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        spec.entry("persistentVolumeReclaimPolicy")
            .or_insert_with(|| json!("Retain"));
        spec.entry("volumeMode")
            .or_insert_with(|| json!("Filesystem"));
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

    fn pv(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolume",
               "metadata": {"name": "pv1"}, "spec": spec})
    }

    fn good() -> Value {
        json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
               "hostPath": {"path": "/data/pv1"}})
    }

    #[test]
    fn a_volume_needs_capacity_modes_and_one_source() {
        assert!(create_msgs("", "PersistentVolume", pv(good())).is_empty());
        assert_eq!(
            create_msgs(
                "",
                "PersistentVolume",
                pv(json!({"hostPath": {"path": "/x"}}))
            ),
            [
                "spec.accessModes: Required value: must specify at least 1 access mode",
                "spec.capacity: Required value",
            ]
        );
        let mut two = good();
        two["nfs"] = json!({"server": "s", "path": "/"});
        assert_eq!(
            create_msgs("", "PersistentVolume", pv(two)),
            ["spec.nfs: Forbidden: may not specify more than 1 volume type"]
        );
        let mut none = good();
        none.as_object_mut().unwrap().remove("hostPath");
        assert_eq!(
            create_msgs("", "PersistentVolume", pv(none)),
            ["spec: Required value: must specify a volume type"]
        );
        let mut local = good();
        local.as_object_mut().unwrap().remove("hostPath");
        local["local"] = json!({"path": "/x"});
        assert_eq!(
            create_msgs("", "PersistentVolume", pv(local)),
            ["spec.nodeAffinity: Required value: Local volume requires node affinity"]
        );
        let mut bad_mode = good();
        bad_mode["accessModes"] = json!(["ReadWriteOncePod", "ReadOnlyMany"]);
        assert_eq!(
            create_msgs("", "PersistentVolume", pv(bad_mode)),
            ["spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes"]
        );
    }

    #[test]
    fn defaults_are_retain_and_filesystem_and_the_source_is_immutable() {
        let mut object = pv(good());
        PersistentVolume.default(&mut object);
        assert_eq!(object["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(object["spec"]["volumeMode"], "Filesystem");
        let mut moved = good();
        moved["hostPath"]["path"] = json!("/elsewhere");
        assert_eq!(
            update_msgs("", "PersistentVolume", pv(moved), pv(good())),
            [
                "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation"
            ]
        );
    }

    #[test]
    fn rows_as_kubectl_prints_them() {
        let mut object = pv(good());
        PersistentVolume.default(&mut object);
        object["spec"]["accessModes"] = json!(["ReadWriteMany", "ReadWriteOnce"]);
        object["spec"]["claimRef"] = json!({"namespace": "default", "name": "data"});
        object["spec"]["storageClassName"] = json!("local-path");
        object["status"] = json!({"phase": "Bound"});
        let cells = PersistentVolume.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(
            cells[..9],
            [
                json!("pv1"),
                json!("1Gi"),
                json!("RWO,RWX"),
                json!("Retain"),
                json!("Bound"),
                json!("default/data"),
                json!("local-path"),
                json!("<unset>"),
                json!(""),
            ]
        );
        assert_eq!(cells[10], "Filesystem");
        assert_eq!(PersistentVolume.columns().len(), cells.len());
    }
}

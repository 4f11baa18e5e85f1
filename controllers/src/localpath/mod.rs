//! The built-in local-path provisioner's pure part (provisioner `skiff.io/local-path`, in the
//! spirit of k3s' local-path-provisioner): a claim handed to it gets a `hostPath` volume at
//! `<base>/<pv-name>_<namespace>_<claim>`, pinned to one node (the one the scheduler picked for
//! a WaitForFirstConsumer claim; a ready node for an Immediate one), pre-bound to the claim so
//! the binder binds the two. A released volume of reclaim policy Delete loses its directory,
//! then its object.
//!
//! Who touches the directory: only the node it lives on, through the API. The kubelet makes it
//! when it mounts the claim (the volume is a `DirectoryOrCreate` hostPath), so nothing is made
//! for a claim no pod ever uses, and the directory is always made by the machine that holds it.
//! Removal needs a process on that node too: the provisioner runs a helper pod there (as k3s'
//! provisioner does) that removes the directory, and deletes the volume once the pod succeeded.
//! On a one-box `skiff server` the kubelet and the provisioner share a process, but they still
//! talk only through the API, so the same code works when the kubelet runs elsewhere.

/// The shell: what the provisioner watches, and its writes through the API.
pub(crate) mod controller;

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, Pod, PodSpec, Volume,
    VolumeMount, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::persistentvolume::{self as binder, HOSTNAME_LABEL, PROVISIONED_BY};

/// The provisioner's name, in its StorageClass and on the volumes it makes.
pub const PROVISIONER: &str = "skiff.io/local-path";
/// The StorageClass made at start.
pub const CLASS: &str = "local-path";
/// The namespace helper pods run in.
pub const HELPER_NAMESPACE: &str = "kube-system";

/// The default `local-path` class: this provisioner, WaitForFirstConsumer (a volume is made on
/// the node its first pod goes to), Delete, the default class.
pub fn default_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(CLASS.into()),
            annotations: Some(BTreeMap::from([(
                "storageclass.kubernetes.io/is-default-class".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        provisioner: PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..Default::default()
    }
}

/// The name of the volume made for a claim (`pvc-<claim uid>`, as Kubernetes names them).
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default())
}

/// Where a claim's data lives on its node.
pub fn volume_dir(base: &Path, pv: &str, claim: &PersistentVolumeClaim) -> String {
    base.join(format!(
        "{pv}_{}_{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    ))
    .display()
    .to_string()
}

/// Whether a claim is this provisioner's to provision now: unbound, not being deleted, handed
/// to it by the binder, of a class of it.
pub fn wants(claim: &PersistentVolumeClaim, class: Option<&StorageClass>) -> bool {
    let unbound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default()
        .is_empty();
    let handed = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(binder::STORAGE_PROVISIONER))
        .is_some_and(|p| p == PROVISIONER);
    unbound
        && handed
        && claim.metadata.deletion_timestamp.is_none()
        && class.is_some_and(|c| c.provisioner == PROVISIONER)
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
}

/// The node a claim's volume goes on: the scheduler's choice for a WaitForFirstConsumer claim,
/// else the first ready node by name; `None` while there is none.
pub fn node_for<'a>(
    claim: &'a PersistentVolumeClaim,
    class: &StorageClass,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Option<String> {
    if binder::waits_for_consumer(Some(class)) {
        return binder::selected_node(claim).map(str::to_string);
    }
    let mut ready: Vec<&str> = nodes
        .into_iter()
        .filter(|n| ready(n))
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    ready.sort();
    ready.first().map(|n| n.to_string())
}

/// The volume for `claim` on `node`, under `base`.
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &str,
    base: &Path,
) -> PersistentVolume {
    let name = volume_name(claim);
    let spec = claim.spec.clone().unwrap_or_default();
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
        .unwrap_or_default();
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.to_string(),
                PROVISIONER.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_string(), storage)])),
            access_modes: spec.access_modes.clone(),
            claim_ref: Some(binder::claim_ref(claim)),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: spec.volume_mode.clone(),
            host_path: Some(HostPathVolumeSource {
                path: volume_dir(base, &name, claim),
                type_: Some("DirectoryOrCreate".into()),
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: "In".into(),
                            values: Some(vec![node.to_string()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// What to do with a volume this provisioner made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// Nothing (not ours, not released, or Retain).
    Keep,
    /// Run the helper pod that removes the directory.
    RemoveData {
        /// The node the data is on.
        node: String,
        /// The directory.
        path: String,
    },
    /// The data is gone (or there is none to remove): delete the volume object.
    DeleteVolume,
}

/// The node a volume is pinned to by its hostname term.
pub fn pinned_node(pv: &PersistentVolume) -> Option<String> {
    let terms = &pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|r| r.key == HOSTNAME_LABEL && r.operator == "In")
        .and_then(|r| r.values.as_ref()?.first().cloned())
}

/// The helper pod's name for a volume.
pub fn helper_name(pv: &PersistentVolume) -> String {
    format!("helper-{}", pv.metadata.name.as_deref().unwrap_or_default())
}

/// Decides a volume's reclaim; `helper` is its helper pod, if one exists.
pub fn reclaim(pv: &PersistentVolume, helper: Option<&Pod>) -> Reclaim {
    let ours = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONED_BY))
        .is_some_and(|p| p == PROVISIONER);
    let spec = pv.spec.clone().unwrap_or_default();
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    if !ours
        || !released
        || spec.persistent_volume_reclaim_policy.as_deref() != Some("Delete")
        || pv.metadata.deletion_timestamp.is_some()
    {
        return Reclaim::Keep;
    }
    if helper
        .is_some_and(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
    {
        return Reclaim::DeleteVolume;
    }
    match (pinned_node(pv), spec.host_path) {
        (Some(node), Some(hp)) => Reclaim::RemoveData {
            node,
            path: hp.path,
        },
        _ => Reclaim::DeleteVolume,
    }
}

/// The helper pod that removes `path` on `node`: its parent mounted at `/data`, the directory
/// removed relative to the container's root (`$POD_ROOT` under the process runtime, `/` in a
/// container), so the same pod works with either runtime.
pub fn helper_pod(pv: &PersistentVolume, node: &str, path: &str) -> Pod {
    let path = Path::new(path);
    let parent = path
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/".into());
    let dir = path
        .file_name()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            name: Some(helper_name(pv)),
            namespace: Some(HELPER_NAMESPACE.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "local-path-helper".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            restart_policy: Some("Never".into()),
            containers: vec![Container {
                name: "remove".into(),
                image: Some("docker.io/library/busybox:1.36".into()),
                command: Some(vec![
                    "sh".into(),
                    "-c".into(),
                    "cd \"${POD_ROOT:-/}\" && rm -rf -- \"data/$VOLUME_DIR\"".into(),
                ]),
                env: Some(vec![k8s_openapi::api::core::v1::EnvVar {
                    name: "VOLUME_DIR".into(),
                    value: Some(dir),
                    value_from: None,
                }]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "data".into(),
                host_path: Some(HostPathVolumeSource {
                    path: parent,
                    type_: Some("DirectoryOrCreate".into()),
                }),
                ..Default::default()
            }]),
            tolerations: Some(vec![k8s_openapi::api::core::v1::Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claim(annotations: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data-web-1", "namespace": "default", "uid": "u1",
                         "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap()
    }

    fn node(name: &str, ready: bool) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}}))
        .unwrap()
    }

    #[test]
    fn a_claim_handed_over_gets_a_pinned_pre_bound_host_path_volume() {
        let class = default_class();
        let waiting = claim(json!({binder::STORAGE_PROVISIONER: PROVISIONER}));
        assert!(wants(&waiting, Some(&class)));
        assert!(!wants(&claim(json!({})), Some(&class)), "not handed over");
        assert_eq!(node_for(&waiting, &class, []), None, "no node selected yet");
        let selected = claim(json!({binder::STORAGE_PROVISIONER: PROVISIONER,
                                    binder::SELECTED_NODE: "n1"}));
        let chosen = node_for(&selected, &class, []).unwrap();
        let pv = volume_for(&selected, &class, &chosen, Path::new("/srv/storage"));
        assert_eq!(pv.metadata.name.as_deref(), Some("pvc-u1"));
        let spec = pv.spec.as_ref().unwrap();
        assert_eq!(
            spec.host_path.as_ref().unwrap().path,
            "/srv/storage/pvc-u1_default_data-web-1"
        );
        assert_eq!(pinned_node(&pv).as_deref(), Some("n1"));
        assert!(binder::refers_to(&pv, &selected));
        assert!(binder::fits(&pv, &selected));
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        // Immediate: the first ready node.
        let mut immediate = class.clone();
        immediate.volume_binding_mode = Some("Immediate".into());
        let nodes = [node("b", true), node("a", false), node("c", true)];
        assert_eq!(node_for(&waiting, &immediate, &nodes).as_deref(), Some("b"));
    }

    #[test]
    fn a_released_delete_volume_loses_its_data_then_its_object() {
        let class = default_class();
        let c = claim(json!({}));
        let mut pv = volume_for(&c, &class, "n1", Path::new("/srv/storage"));
        assert_eq!(reclaim(&pv, None), Reclaim::Keep, "not released");
        pv.status = Some(serde_json::from_value(json!({"phase": "Released"})).unwrap());
        assert_eq!(
            reclaim(&pv, None),
            Reclaim::RemoveData {
                node: "n1".into(),
                path: "/srv/storage/pvc-u1_default_data-web-1".into()
            }
        );
        let helper = helper_pod(&pv, "n1", "/srv/storage/pvc-u1_default_data-web-1");
        let spec = helper.spec.as_ref().unwrap();
        assert_eq!(
            spec.volumes.as_ref().unwrap()[0]
                .host_path
                .as_ref()
                .unwrap()
                .path,
            "/srv/storage"
        );
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        let mut done = helper.clone();
        done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
        assert_eq!(reclaim(&pv, Some(&done)), Reclaim::DeleteVolume);
        pv.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Retain".into());
        assert_eq!(reclaim(&pv, None), Reclaim::Keep, "Retain keeps the data");
    }
}

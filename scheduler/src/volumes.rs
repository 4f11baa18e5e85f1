//! Volume binding, as the scheduler's `VolumeBinding` plugin does it: what a pod's claims ask of
//! its node. A claim bound to a volume limits the pod to the nodes of the volume's node
//! affinity; an unbound claim of a WaitForFirstConsumer class accepts any node, and gets the
//! chosen one (`volume.kubernetes.io/selected-node`) before the pod is bound, so its volume is
//! made there; an unbound claim of any other class keeps the pod unschedulable until the PV
//! binder binds it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;

/// The annotation a WaitForFirstConsumer claim gets: the node its first pod goes to.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// Kubernetes' words for a pod waiting on Immediate claims.
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// The claims, volumes and classes the scheduler has seen.
#[derive(Debug, Default)]
pub struct Volumes {
    claims: BTreeMap<String, Arc<PersistentVolumeClaim>>,
    volumes: BTreeMap<String, Arc<PersistentVolume>>,
    classes: BTreeMap<String, Arc<StorageClass>>,
}

fn claim_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Volumes {
    /// A claim added or changed (`None`: deleted).
    pub fn set_claim(
        &mut self,
        namespace: &str,
        name: &str,
        claim: Option<Arc<PersistentVolumeClaim>>,
    ) {
        let key = claim_key(namespace, name);
        match claim {
            Some(c) => self.claims.insert(key, c),
            None => self.claims.remove(&key),
        };
    }

    /// A volume added or changed (`None`: deleted).
    pub fn set_volume(&mut self, name: &str, pv: Option<Arc<PersistentVolume>>) {
        match pv {
            Some(v) => self.volumes.insert(name.to_string(), v),
            None => self.volumes.remove(name),
        };
    }

    /// A class added or changed (`None`: deleted).
    pub fn set_class(&mut self, name: &str, class: Option<Arc<StorageClass>>) {
        match class {
            Some(c) => self.classes.insert(name.to_string(), c),
            None => self.classes.remove(name),
        };
    }
}

/// What a pod's claims ask of its node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodVolumes {
    /// The node affinity of each bound volume: the node must match all of them.
    pub affinity: Vec<NodeSelector>,
    /// Unbound WaitForFirstConsumer claims (`namespace`, `name`) that get the chosen node.
    pub delayed: Vec<(String, String)>,
}

fn claim_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .or(claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_ref()))
        .map(String::as_str)
}

/// Checks a pod's claims; an error is why no node can take it now.
pub fn check(pod: &Pod, state: &Volumes) -> Result<PodVolumes, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = PodVolumes::default();
    let mut unbound_immediate = false;
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(source) = &v.persistent_volume_claim else {
            continue;
        };
        let name = &source.claim_name;
        let Some(claim) = state.claims.get(&claim_key(ns, name)) else {
            return Err(format!("persistentvolumeclaim \"{name}\" not found"));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim \"{name}\" is being deleted"));
        }
        let volume = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        match volume {
            Some(volume) => {
                let Some(pv) = state.volumes.get(volume) else {
                    return Err(format!("persistentvolume \"{volume}\" not found"));
                };
                if let Some(required) = pv
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_affinity.as_ref())
                    .and_then(|a| a.required.clone())
                {
                    out.affinity.push(required);
                }
            }
            None => {
                let waits = claim_class(claim)
                    .and_then(|c| state.classes.get(c))
                    .and_then(|c| c.volume_binding_mode.as_deref())
                    == Some("WaitForFirstConsumer");
                if waits {
                    out.delayed.push((ns.to_string(), name.clone()));
                } else {
                    unbound_immediate = true;
                }
            }
        }
    }
    if unbound_immediate {
        return Err(UNBOUND_IMMEDIATE.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(claims: &[&str]) -> Pod {
        let volumes: Vec<_> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(
            json!({"metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"containers": [], "volumes": volumes}}),
        )
        .unwrap()
    }

    fn state() -> Volumes {
        let mut s = Volumes::default();
        for (name, mode) in [
            ("local-path", "WaitForFirstConsumer"),
            ("fast", "Immediate"),
        ] {
            s.set_class(
                name,
                Some(Arc::new(
                    serde_json::from_value(json!({
                "metadata": {"name": name}, "provisioner": "p", "volumeBindingMode": mode}))
                    .unwrap(),
                )),
            );
        }
        let claim = |name: &str, class: &str, volume: Option<&str>| -> Arc<PersistentVolumeClaim> {
            Arc::new(
                serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"storageClassName": class, "volumeName": volume}}))
                .unwrap(),
            )
        };
        s.set_claim("default", "wait", Some(claim("wait", "local-path", None)));
        s.set_claim("default", "now", Some(claim("now", "fast", None)));
        s.set_claim(
            "default",
            "bound",
            Some(claim("bound", "local-path", Some("pv1"))),
        );
        s.set_volume(
            "pv1",
            Some(Arc::new(
                serde_json::from_value(json!({
            "metadata": {"name": "pv1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}))
                .unwrap(),
            )),
        );
        s
    }

    #[test]
    fn claims_limit_nodes_wait_or_block() {
        let s = state();
        assert_eq!(check(&pod(&[]), &s), Ok(PodVolumes::default()));
        let waiting = check(&pod(&["wait"]), &s).unwrap();
        assert_eq!(
            waiting.delayed,
            vec![("default".to_string(), "wait".to_string())]
        );
        assert!(waiting.affinity.is_empty());
        let bound = check(&pod(&["bound", "wait"]), &s).unwrap();
        assert_eq!(bound.affinity.len(), 1);
        assert_eq!(
            check(&pod(&["now", "wait"]), &s),
            Err(UNBOUND_IMMEDIATE.to_string())
        );
        assert_eq!(
            check(&pod(&["ghost"]), &s),
            Err("persistentvolumeclaim \"ghost\" not found".to_string())
        );
    }
}

//! The pvc-protection and pv-protection controllers' pure part: when a claim or volume being
//! deleted may lose its protection finalizer (added on create by the API server's
//! `StorageObjectInUseProtection` admission). A claim is kept while a scheduled pod that is not
//! finished refers to it (the kubelet will not start a pod whose claim is being deleted, so an
//! unscheduled pod does not hold it); a volume is kept while it is Bound.

/// The shells: what each watches, and the finalizer removal through the API.
pub(crate) mod controller;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};

use crate::pods;

/// The finalizer that keeps a claim while a pod uses it.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The finalizer that keeps a volume while a claim is bound to it.
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

/// The claims (by name, in the pod's namespace) a pod's volumes refer to.
pub fn claims_of(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

/// Whether `pod` holds the claim `name` of its namespace.
pub fn uses(pod: &Pod, name: &str) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    scheduled && !pods::is_terminal(pod) && claims_of(pod).iter().any(|c| c == name)
}

fn has(finalizers: Option<&Vec<String>>, finalizer: &str) -> bool {
    finalizers.is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Whether a claim's protection finalizer may go: it is being deleted and no pod of
/// `pods` (the claim's namespace's) uses it.
pub fn release_claim<'a>(
    claim: &PersistentVolumeClaim,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> bool {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    claim.metadata.deletion_timestamp.is_some()
        && has(claim.metadata.finalizers.as_ref(), PVC_PROTECTION)
        && !pods.into_iter().any(|p| uses(p, name))
}

/// Whether a volume's protection finalizer may go: it is being deleted and not Bound.
pub fn release_volume(pv: &PersistentVolume) -> bool {
    pv.metadata.deletion_timestamp.is_some()
        && has(pv.metadata.finalizers.as_ref(), PV_PROTECTION)
        && pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound")
}

/// `finalizers` without `finalizer`.
pub fn without(finalizers: Option<&Vec<String>>, finalizer: &str) -> Vec<String> {
    finalizers
        .into_iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(node: &str, phase: &str, claim: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"nodeName": node, "containers": [],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    fn claim(deleting: bool) -> PersistentVolumeClaim {
        let mut c = json!({"metadata": {"name": "data-web-0", "namespace": "default",
                                        "finalizers": [PVC_PROTECTION]}});
        if deleting {
            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(c).unwrap()
    }

    #[test]
    fn a_claim_is_kept_while_a_running_pod_uses_it() {
        let running = pod("n1", "Running", "data-web-0");
        assert!(!release_claim(&claim(true), [&running]));
        assert!(!release_claim(&claim(false), []), "not being deleted");
        assert!(release_claim(&claim(true), []));
        assert!(release_claim(
            &claim(true),
            [&pod("n1", "Succeeded", "data-web-0")]
        ));
        assert!(
            release_claim(&claim(true), [&pod("", "Pending", "data-web-0")]),
            "unscheduled"
        );
        assert!(release_claim(
            &claim(true),
            [&pod("n1", "Running", "other")]
        ));
        assert_eq!(
            without(claim(true).metadata.finalizers.as_ref(), PVC_PROTECTION),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_volume_is_kept_while_bound() {
        let pv = |phase: &str| -> PersistentVolume {
            serde_json::from_value(
                json!({"metadata": {"name": "pv1", "finalizers": [PV_PROTECTION],
                "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": phase}}),
            )
            .unwrap()
        };
        assert!(!release_volume(&pv("Bound")));
        assert!(release_volume(&pv("Released")));
        assert!(release_volume(&pv("Available")));
    }
}

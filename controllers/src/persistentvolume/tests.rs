//! The binder's decisions: matching, pre-binding both ways, waiting for a consumer,
//! provisioning, release and reclaim.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::json;

use super::*;

fn pv(name: &str, size: &str, modes: &[&str], class: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"tier": "fast"}},
        "spec": {"capacity": {"storage": size}, "accessModes": modes,
                 "storageClassName": class, "hostPath": {"path": "/x"},
                 "persistentVolumeReclaimPolicy": "Retain"},
        "status": {"phase": "Available"},
    }))
    .unwrap()
}

fn pvc(name: &str, size: &str, modes: &[&str], class: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"resources": {"requests": {"storage": size}}, "accessModes": modes,
                 "storageClassName": class},
        "status": {"phase": "Pending"},
    }))
    .unwrap()
}

fn class(name: &str, mode: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name}, "provisioner": "skiff.io/local-path",
        "volumeBindingMode": mode,
    }))
    .unwrap()
}

fn step(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    pvs: &[PersistentVolume],
) -> ClaimStep {
    sync_claim(&ClaimView {
        claim,
        class,
        volumes: pvs.iter().collect(),
    })
}

fn bind(volume: &str) -> ClaimStep {
    ClaimStep::Bind {
        volume: volume.into(),
        chosen: true,
    }
}

#[test]
fn the_smallest_volume_that_fits_wins() {
    let pvs = [
        pv("big", "10Gi", &["ReadWriteOnce"], "manual"),
        pv("small", "1Gi", &["ReadWriteOnce"], "manual"),
        pv("tiny", "500Mi", &["ReadWriteOnce"], "manual"),
        pv("other-class", "1Gi", &["ReadWriteOnce"], "fast"),
        pv("rox", "1Gi", &["ReadOnlyMany"], "manual"),
    ];
    let claim = pvc("data", "1Gi", &["ReadWriteOnce"], "manual");
    assert_eq!(step(&claim, None, &pvs), bind("small"));
    let many = pvc("data", "1Gi", &["ReadWriteOnce", "ReadOnlyMany"], "manual");
    assert_eq!(
        step(&many, None, &pvs),
        ClaimStep::Pending(Some(Note {
            type_: EventType::Warning,
            reason: "ProvisioningFailed",
            message: "storageclass.storage.k8s.io \"manual\" not found".into()
        }))
    );
    let huge = pvc("data", "20Gi", &["ReadWriteOnce"], "");
    assert!(matches!(
        step(&huge, None, &[pv("a", "1Gi", &["ReadWriteOnce"], "")]),
        ClaimStep::Pending(Some(Note {
            reason: "FailedBinding",
            ..
        }))
    ));
}

#[test]
fn a_selector_limits_the_candidates() {
    let mut claim = pvc("data", "1Gi", &["ReadWriteOnce"], "manual");
    claim.spec.as_mut().unwrap().selector =
        Some(serde_json::from_value(json!({"matchLabels": {"tier": "slow"}})).unwrap());
    let pvs = [pv("a", "1Gi", &["ReadWriteOnce"], "manual")];
    assert!(!fits(&pvs[0], &claim));
    claim.spec.as_mut().unwrap().selector =
        Some(serde_json::from_value(json!({"matchLabels": {"tier": "fast"}})).unwrap());
    assert_eq!(step(&claim, None, &pvs), bind("a"));
}

#[test]
fn pre_binding_works_both_ways() {
    // A volume pre-bound to the claim wins over a smaller free one.
    let mut reserved = pv("reserved", "5Gi", &["ReadWriteOnce"], "manual");
    reserved.spec.as_mut().unwrap().claim_ref =
        Some(serde_json::from_value(json!({"namespace": "default", "name": "data"})).unwrap());
    let pvs = [
        pv("free", "1Gi", &["ReadWriteOnce"], "manual"),
        reserved.clone(),
    ];
    let claim = pvc("data", "1Gi", &["ReadWriteOnce"], "manual");
    assert_eq!(step(&claim, None, &pvs), bind("reserved"));
    // ... and nobody else may take it.
    let other = pvc("other", "1Gi", &["ReadWriteOnce"], "manual");
    assert!(!matches!(
        step(&other, None, &[reserved]),
        ClaimStep::Bind { .. }
    ));

    // A claim naming its volume binds to it, not chosen by the binder.
    let mut named = pvc("data", "1Gi", &["ReadWriteOnce"], "manual");
    named.spec.as_mut().unwrap().volume_name = Some("big".into());
    let pvs = [pv("big", "10Gi", &["ReadWriteOnce"], "manual")];
    assert_eq!(
        step(&named, None, &pvs),
        ClaimStep::Bind {
            volume: "big".into(),
            chosen: false
        }
    );
    // A named volume that does not exist keeps the claim Pending.
    named.spec.as_mut().unwrap().volume_name = Some("missing".into());
    assert!(matches!(
        step(&named, None, &pvs),
        ClaimStep::Pending(Some(Note {
            reason: "FailedBinding",
            ..
        }))
    ));
}

#[test]
fn wait_for_first_consumer_waits_for_the_selected_node() {
    let sc = class("local-path", "WaitForFirstConsumer");
    let mut claim = pvc("data", "1Gi", &["ReadWriteOnce"], "local-path");
    assert!(matches!(
        step(&claim, Some(&sc), &[]),
        ClaimStep::Pending(Some(Note {
            reason: "WaitForFirstConsumer",
            ..
        }))
    ));
    claim.metadata.annotations = Some([(SELECTED_NODE.to_string(), "n1".to_string())].into());
    assert_eq!(
        step(&claim, Some(&sc), &[]),
        ClaimStep::Provision {
            provisioner: "skiff.io/local-path".into()
        }
    );
    // A volume pinned to another node does not do; one pinned to the selected node does.
    let pinned = |name: &str, node: &str| {
        let mut v = pv(name, "1Gi", &["ReadWriteOnce"], "local-path");
        v.spec.as_mut().unwrap().node_affinity = Some(
            serde_json::from_value(json!({"required": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}]}}))
            .unwrap(),
        );
        v
    };
    assert!(matches!(
        step(&claim, Some(&sc), &[pinned("a", "n2")]),
        ClaimStep::Provision { .. }
    ));
    assert_eq!(
        step(&claim, Some(&sc), &[pinned("a", "n2"), pinned("b", "n1")]),
        bind("b")
    );
    // Immediate binds without waiting.
    let immediate = class("local-path", "Immediate");
    let claim = pvc("data", "1Gi", &["ReadWriteOnce"], "local-path");
    assert!(matches!(
        step(&claim, Some(&immediate), &[]),
        ClaimStep::Provision { .. }
    ));
}

#[test]
fn a_finished_binding_is_left_alone_and_a_lost_volume_is_lost() {
    let mut claim = pvc("data", "1Gi", &["ReadWriteOnce"], "manual");
    claim.spec.as_mut().unwrap().volume_name = Some("a".into());
    claim.metadata.annotations = Some([(BIND_COMPLETED.to_string(), "yes".to_string())].into());
    claim.status.as_mut().unwrap().phase = Some("Bound".into());
    let mut v = pv("a", "1Gi", &["ReadWriteOnce"], "manual");
    v.spec.as_mut().unwrap().claim_ref = Some(claim_ref(&claim));
    v.status.as_mut().unwrap().phase = Some("Bound".into());
    assert_eq!(
        step(&claim, None, std::slice::from_ref(&v)),
        ClaimStep::Nothing
    );
    assert_eq!(sync_volume(&v, Some(&claim)), VolumeStep::Nothing);
    assert!(matches!(
        step(&claim, None, &[]),
        ClaimStep::Lost(Note {
            reason: "ClaimLost",
            ..
        })
    ));
    // Bound to someone else.
    let mut stolen = v.clone();
    stolen
        .spec
        .as_mut()
        .unwrap()
        .claim_ref
        .as_mut()
        .unwrap()
        .name = Some("other".into());
    assert!(matches!(
        step(&claim, None, &[stolen]),
        ClaimStep::Lost(Note {
            reason: "ClaimMisbound",
            ..
        })
    ));
}

#[test]
fn volumes_are_available_bound_then_released_and_reclaimed() {
    let mut v = pv("a", "1Gi", &["ReadWriteOnce"], "manual");
    v.status.as_mut().unwrap().phase = Some("Pending".into());
    assert_eq!(
        sync_volume(&v, None),
        VolumeStep::Phase {
            phase: "Available",
            note: None
        }
    );
    let mut claim = pvc("data", "1Gi", &["ReadWriteOnce"], "manual");
    claim.spec.as_mut().unwrap().volume_name = Some("a".into());
    v.spec.as_mut().unwrap().claim_ref = Some(claim_ref(&claim));
    assert_eq!(
        sync_volume(&v, Some(&claim)),
        VolumeStep::Phase {
            phase: "Bound",
            note: None
        }
    );
    // The claim is gone (or replaced by one with another uid): Released, Retain keeps it.
    v.status.as_mut().unwrap().phase = Some("Bound".into());
    assert_eq!(
        sync_volume(&v, None),
        VolumeStep::Phase {
            phase: "Released",
            note: None
        }
    );
    let mut successor = claim.clone();
    successor.metadata.uid = Some("new".into());
    assert_eq!(
        sync_volume(&v, Some(&successor)),
        VolumeStep::Phase {
            phase: "Released",
            note: None
        }
    );
    v.status.as_mut().unwrap().phase = Some("Released".into());
    assert_eq!(sync_volume(&v, None), VolumeStep::Nothing);
    // Delete: the provisioner's volume waits Released for it; one nobody made fails.
    let spec = v.spec.as_mut().unwrap();
    spec.persistent_volume_reclaim_policy = Some("Delete".into());
    assert!(matches!(
        sync_volume(&v, None),
        VolumeStep::Phase {
            phase: "Failed",
            ..
        }
    ));
    v.metadata.annotations = Some(
        [(
            PROVISIONED_BY.to_string(),
            "skiff.io/local-path".to_string(),
        )]
        .into(),
    );
    assert_eq!(sync_volume(&v, None), VolumeStep::Nothing);
    v.status.as_mut().unwrap().phase = Some("Bound".into());
    assert_eq!(
        sync_volume(&v, None),
        VolumeStep::Phase {
            phase: "Released",
            note: None
        }
    );
}

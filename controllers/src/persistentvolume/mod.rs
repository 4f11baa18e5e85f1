//! The PV binder's pure part, in the spirit of Kubernetes' pv-controller: what one sync of a
//! claim or of a volume decides.
//!
//! A claim without a volume is matched to the smallest Available volume that fits it: the same
//! class, every access mode it asks for, at least the storage it requests, its selector, the
//! same volume mode; a volume pre-bound to it (`claimRef` naming it) wins over size. A claim
//! that names its volume (`volumeName`) binds to that one. Binding writes both sides: the
//! volume's `claimRef` (annotated `pv.kubernetes.io/bound-by-controller` when the binder chose
//! it), the claim's `volumeName` (annotated `bind-completed`, and `bound-by-controller` when the
//! binder chose it) and both phases Bound.
//!
//! A claim of a WaitForFirstConsumer class waits until the scheduler picked a node for a pod
//! using it (`volume.kubernetes.io/selected-node`); a claim nothing matches is handed to its
//! class's provisioner (`volume.kubernetes.io/storage-provisioner`), which makes a volume
//! pre-bound to it. A volume whose claim is gone is Released and reclaimed: Retain keeps it,
//! Delete leaves a provisioned volume to its provisioner (which removes the data, then the
//! object) and fails one nobody provisioned, since there is no in-tree deleter.

/// The shell: what the binder watches, and its syncs through the API.
pub(crate) mod controller;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use skiff_client::events::EventType;
use skiff_meta::labels::Selector;

/// Set on a claim once the binder finished binding it.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on whichever side the binder (not the user) pointed at the other.
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Set by the scheduler on a WaitForFirstConsumer claim: the node its pod goes to.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Set by the binder on a claim it hands to a provisioner.
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The beta spelling of [`STORAGE_PROVISIONER`], which external provisioners still read.
pub const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// Set by a provisioner on the volumes it made.
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// The node label local volumes are pinned to.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The class of a claim or volume (the beta annotation first, as Kubernetes reads it).
fn class_name(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: Option<&String>,
) -> String {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
        .or(spec)
        .cloned()
        .unwrap_or_default()
}

/// A claim's class.
pub fn claim_class(claim: &PersistentVolumeClaim) -> String {
    class_name(
        &claim.metadata,
        claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_ref()),
    )
}

/// A volume's class.
pub fn volume_class(pv: &PersistentVolume) -> String {
    class_name(
        &pv.metadata,
        pv.spec.as_ref().and_then(|s| s.storage_class_name.as_ref()),
    )
}

/// The bytes a claim requests.
pub fn requested_bytes(claim: &PersistentVolumeClaim) -> i64 {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| skiff_meta::quantity::value(&q.0))
        .unwrap_or(0)
}

/// The bytes a volume holds.
pub fn capacity_bytes(pv: &PersistentVolume) -> i64 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| skiff_meta::quantity::value(&q.0))
        .unwrap_or(0)
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The node the scheduler chose for a claim's first consumer.
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&claim.metadata, SELECTED_NODE).filter(|n| !n.is_empty())
}

/// Whether a class binds only once a consumer is scheduled.
pub fn waits_for_consumer(class: Option<&StorageClass>) -> bool {
    class.and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer")
}

/// Whether `pv`'s `claimRef` names `claim` (by namespace and name, and uid when both have one).
pub fn refers_to(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.namespace != claim.metadata.namespace || r.name != claim.metadata.name {
        return false;
    }
    match (r.uid.as_deref(), claim.metadata.uid.as_deref()) {
        (Some(a), Some(b)) if !a.is_empty() => a == b,
        _ => true,
    }
}

/// Whether a volume is pinned to nodes other than `node` (a hostname term that does not name
/// it). Volumes without node affinity fit every node; other terms are the scheduler's to check.
pub fn pinned_elsewhere(pv: &PersistentVolume, node: &str) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return false;
    };
    !required.node_selector_terms.iter().any(|term| {
        term.match_expressions.iter().flatten().all(|r| {
            r.key != HOSTNAME_LABEL
                || (r.operator == "In" && r.values.iter().flatten().any(|v| v == node))
        })
    })
}

/// Whether `pv` satisfies `claim` (apart from who it is bound to): class, modes, size,
/// selector, volume mode, and not being deleted.
pub fn fits(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let (Some(pv_spec), Some(spec)) = (pv.spec.as_ref(), claim.spec.as_ref()) else {
        return false;
    };
    if pv.metadata.deletion_timestamp.is_some() || volume_class(pv) != claim_class(claim) {
        return false;
    }
    let have = pv_spec.access_modes.as_deref().unwrap_or_default();
    if !spec.access_modes.iter().flatten().all(|m| have.contains(m)) {
        return false;
    }
    if capacity_bytes(pv) < requested_bytes(claim) {
        return false;
    }
    let mode = |m: Option<&String>| m.map(String::as_str).unwrap_or("Filesystem").to_string();
    if mode(pv_spec.volume_mode.as_ref()) != mode(spec.volume_mode.as_ref()) {
        return false;
    }
    // A claim without a selector takes any volume.
    let Some(selector) = spec.selector.as_ref() else {
        return true;
    };
    match Selector::from_label_selector(selector) {
        Ok(sel) => sel.matches(pv.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())),
        Err(_) => false,
    }
}

/// The volume an unbound claim should bind to: one pre-bound to it that fits, else the
/// smallest unclaimed one that fits (ties by name). With `node`, volumes pinned to other nodes
/// are out.
pub fn best_match<'a>(
    claim: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    node: Option<&str>,
) -> Option<&'a PersistentVolume> {
    let mut best: Option<&PersistentVolume> = None;
    for pv in volumes {
        if !fits(pv, claim) || node.is_some_and(|n| pinned_elsewhere(pv, n)) {
            continue;
        }
        let claimed = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_some();
        if claimed {
            if refers_to(pv, claim) {
                return Some(pv);
            }
            continue;
        }
        let better = match best {
            None => true,
            Some(b) => {
                (capacity_bytes(pv), pv.metadata.name.as_deref())
                    < (capacity_bytes(b), b.metadata.name.as_deref())
            }
        };
        if better {
            best = Some(pv);
        }
    }
    best
}

pub use crate::runtime::Note;

fn note(type_: EventType, reason: &'static str, message: impl Into<String>) -> Note {
    Note {
        type_,
        reason,
        message: message.into(),
    }
}

/// What one sync of a claim does.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimStep {
    /// Nothing to write; the claim is where it should be.
    Nothing,
    /// Stay Pending (setting that phase if needed), recording the note when there is one.
    Pending(Option<Note>),
    /// Bind the claim and `volume` (by name): whatever of both sides is not done yet.
    Bind {
        /// The volume.
        volume: String,
        /// Whether the binder chose the volume (the claim named none).
        chosen: bool,
    },
    /// Hand the claim to `provisioner` (annotate it) and stay Pending.
    Provision {
        /// The class's provisioner.
        provisioner: String,
    },
    /// The claim's volume is gone: the claim is Lost.
    Lost(Note),
}

/// What the world looks like to one claim sync.
pub struct ClaimView<'a> {
    /// The claim.
    pub claim: &'a PersistentVolumeClaim,
    /// Its class, when it names one that exists.
    pub class: Option<&'a StorageClass>,
    /// Every volume.
    pub volumes: Vec<&'a PersistentVolume>,
}

/// Decides one sync of a claim.
pub fn sync_claim(view: &ClaimView<'_>) -> ClaimStep {
    let claim = view.claim;
    if claim.metadata.deletion_timestamp.is_some() {
        return ClaimStep::Nothing;
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    let volume_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    if let Some(name) = volume_name {
        let Some(pv) = view
            .volumes
            .iter()
            .find(|pv| pv.metadata.name.as_deref() == Some(name))
        else {
            if phase == Some("Bound") || phase == Some("Lost") {
                return ClaimStep::Lost(note(
                    EventType::Warning,
                    "ClaimLost",
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                ));
            }
            return ClaimStep::Pending(Some(note(
                EventType::Normal,
                "FailedBinding",
                format!("volume \"{name}\" not found"),
            )));
        };
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref.is_some() && !refers_to(pv, claim) {
            if phase == Some("Bound") {
                return ClaimStep::Lost(note(
                    EventType::Warning,
                    "ClaimMisbound",
                    "Two claims are bound to the same volume, this one is bound incorrectly",
                ));
            }
            return ClaimStep::Pending(Some(note(
                EventType::Warning,
                "FailedBinding",
                "volume already bound to a different claim.",
            )));
        }
        if claim_ref.is_none() && !fits(pv, claim) {
            return ClaimStep::Pending(Some(note(
                EventType::Warning,
                "VolumeMismatch",
                "Cannot bind to requested volume \"".to_string()
                    + name
                    + "\": it does not satisfy the claim",
            )));
        }
        let chosen = annotation(&claim.metadata, BOUND_BY_CONTROLLER) == Some("yes");
        if claim_done(claim, pv) {
            return ClaimStep::Nothing;
        }
        return ClaimStep::Bind {
            volume: name.to_string(),
            chosen,
        };
    }
    let wait = waits_for_consumer(view.class);
    let node = selected_node(claim);
    if wait && node.is_none() {
        return ClaimStep::Pending(Some(note(
            EventType::Normal,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
        )));
    }
    if let Some(pv) = best_match(claim, view.volumes.iter().copied(), node.filter(|_| wait)) {
        return ClaimStep::Bind {
            volume: pv.metadata.name.clone().unwrap_or_default(),
            chosen: true,
        };
    }
    let class = claim_class(claim);
    if class.is_empty() {
        return ClaimStep::Pending(Some(note(
            EventType::Normal,
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set",
        )));
    }
    let Some(sc) = view.class else {
        return ClaimStep::Pending(Some(note(
            EventType::Warning,
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io \"{class}\" not found"),
        )));
    };
    ClaimStep::Provision {
        provisioner: sc.provisioner.clone(),
    }
}

/// The Event a claim handed to `provisioner` gets while it waits (Kubernetes' words).
pub fn external_provisioning(provisioner: &str) -> Note {
    note(
        EventType::Normal,
        "ExternalProvisioning",
        format!(
            "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
        ),
    )
}

/// Whether a claim and its volume show a finished binding on the claim's side.
fn claim_done(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let status = claim.status.clone().unwrap_or_default();
    annotation(&claim.metadata, BIND_COMPLETED) == Some("yes")
        && status.phase.as_deref() == Some("Bound")
        && refers_to(pv, claim)
        && pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.uid.as_deref())
            == claim.metadata.uid.as_deref()
        && pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// The `claimRef` a volume bound to `claim` carries.
pub fn claim_ref(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        ..Default::default()
    }
}

/// What one sync of a volume does.
#[derive(Clone, Debug, PartialEq)]
pub enum VolumeStep {
    /// Nothing to write.
    Nothing,
    /// Set the phase (and reason/message, for Failed).
    Phase {
        /// The phase.
        phase: &'static str,
        /// Why, for a failed volume.
        note: Option<Note>,
    },
}

/// Decides one sync of a volume; `claim` is the claim its `claimRef` names by namespace and
/// name, if it exists.
pub fn sync_volume(pv: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> VolumeStep {
    if pv.metadata.deletion_timestamp.is_some() {
        return VolumeStep::Nothing;
    }
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let set = |p: &'static str| {
        if phase == Some(p) {
            VolumeStep::Nothing
        } else {
            VolumeStep::Phase {
                phase: p,
                note: None,
            }
        }
    };
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return set("Available");
    };
    let uid = r.uid.as_deref().unwrap_or_default();
    if uid.is_empty() {
        // Pre-bound by a user: waits for its claim to bind.
        return set("Available");
    }
    match claim {
        Some(c) if c.metadata.uid.as_deref() == Some(uid) => {
            let named = c.spec.as_ref().and_then(|s| s.volume_name.as_deref());
            if named == pv.metadata.name.as_deref() {
                set("Bound")
            } else {
                // The claim's sync finishes the binding.
                VolumeStep::Nothing
            }
        }
        _ => reclaim(pv, phase),
    }
}

/// A volume whose claim is gone: Released, then its reclaim policy.
fn reclaim(pv: &PersistentVolume, phase: Option<&str>) -> VolumeStep {
    if phase == Some("Failed") {
        return VolumeStep::Nothing;
    }
    let policy = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain");
    let provisioned = annotation(&pv.metadata, PROVISIONED_BY).is_some();
    match policy {
        "Delete" if provisioned => {
            // The provisioner removes the data and the object once it sees Released.
            if phase == Some("Released") {
                VolumeStep::Nothing
            } else {
                VolumeStep::Phase {
                    phase: "Released",
                    note: None,
                }
            }
        }
        "Delete" => VolumeStep::Phase {
            phase: "Failed",
            note: Some(note(
                EventType::Warning,
                "VolumeFailedDelete",
                "error getting deleter volume plugin for volume: no deletable volume plugin matched",
            )),
        },
        "Recycle" => VolumeStep::Phase {
            phase: "Failed",
            note: Some(note(
                EventType::Warning,
                "VolumeFailedRecycle",
                "Recycle is not supported",
            )),
        },
        _ if phase == Some("Released") => VolumeStep::Nothing,
        _ => VolumeStep::Phase {
            phase: "Released",
            note: None,
        },
    }
}

#[cfg(test)]
mod tests;

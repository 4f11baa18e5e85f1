//! The PV binder's shell: keys are `claim/<namespace>/<name>` and `volume/<name>`; a sync reads
//! the caches, asks [`super::sync_claim`] or [`super::sync_volume`], and writes through the API.
//!
//! One worker, as Kubernetes' pv-controller binds claims one at a time: two claims synced at
//! once could both pick the same free volume from the cache.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use skiff_client::{Api, Informer};

use super as logic;
use super::{ClaimStep, ClaimView, Note, VolumeStep};
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, not_found};
use crate::{Error, Result};
use skiff_client::events::{self, Recorder};

/// The component name on the binder's Events.
const COMPONENT: &str = "persistentvolume-controller";

struct Binder {
    claims: Informer<PersistentVolumeClaim>,
    volumes: Informer<PersistentVolume>,
    classes: Informer<StorageClass>,
    client: skiff_client::Client,
    events: Recorder,
}

fn claim_key(namespace: Option<&str>, name: Option<&str>) -> String {
    format!(
        "claim/{}/{}",
        namespace.unwrap_or_default(),
        name.unwrap_or_default()
    )
}

fn volume_key(name: Option<&str>) -> String {
    format!("volume/{}", name.unwrap_or_default())
}

/// Keys of the claims that wait for a volume (a new or changed volume may fit them).
fn pending_claims(claims: &Informer<PersistentVolumeClaim>) -> Vec<String> {
    claims
        .cache()
        .list()
        .iter()
        .filter(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or_default()
                .is_empty()
        })
        .map(|c| claim_key(c.metadata.namespace.as_deref(), c.metadata.name.as_deref()))
        .collect()
}

/// Registers the binder on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let claims = ctx.factory.informer::<PersistentVolumeClaim>();
    let volumes = ctx.factory.informer::<PersistentVolume>();
    let classes = ctx.factory.informer::<StorageClass>();
    let claims_for_volumes = claims.clone();
    let claims_for_classes = claims.clone();
    let volumes_for_claims = volumes.clone();
    let controller = Controller::new("persistentvolume-binder", 1)
        .watches(&claims, move |e: Event<'_, PersistentVolumeClaim>| {
            let c = e.object();
            let mut keys = vec![claim_key(
                c.metadata.namespace.as_deref(),
                c.metadata.name.as_deref(),
            )];
            if let Some(v) = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()) {
                keys.push(volume_key(Some(v)));
            }
            // A claim gone (or replaced): the volumes pointing at it are released.
            keys.extend(
                volumes_for_claims
                    .cache()
                    .list()
                    .iter()
                    .filter(|pv| {
                        pv.spec
                            .as_ref()
                            .and_then(|s| s.claim_ref.as_ref())
                            .is_some_and(|r| {
                                r.namespace == c.metadata.namespace && r.name == c.metadata.name
                            })
                    })
                    .map(|pv| volume_key(pv.metadata.name.as_deref())),
            );
            keys
        })
        .watches(&volumes, move |e: Event<'_, PersistentVolume>| {
            let pv = e.object();
            let mut keys = vec![volume_key(pv.metadata.name.as_deref())];
            if let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                keys.push(claim_key(r.namespace.as_deref(), r.name.as_deref()));
            }
            if !e.is_delete() {
                keys.extend(pending_claims(&claims_for_volumes));
            } else {
                // A bound claim may have lost its volume.
                keys.extend(
                    claims_for_volumes
                        .cache()
                        .list()
                        .iter()
                        .filter(|c| {
                            c.spec.as_ref().and_then(|s| s.volume_name.as_ref())
                                == pv.metadata.name.as_ref()
                        })
                        .map(|c| {
                            claim_key(c.metadata.namespace.as_deref(), c.metadata.name.as_deref())
                        }),
                );
            }
            keys
        })
        .watches(&classes, move |_e: Event<'_, StorageClass>| {
            pending_claims(&claims_for_classes)
        });
    let client = ctx.factory.client().clone();
    Ok(controller.run(Arc::new(Binder {
        claims,
        volumes,
        classes,
        events: Recorder::new(client.clone(), COMPONENT),
        client,
    })))
}

impl Reconcile for Binder {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        if let Some(rest) = key.strip_prefix("claim/") {
            return self.sync_claim(rest).await;
        }
        if let Some(name) = key.strip_prefix("volume/") {
            return self.sync_volume(name).await;
        }
        Ok(Action::AwaitChange)
    }
}

/// A merge patch, ignoring a 404 (the object went away meanwhile).
async fn patch<K>(api: &Api<K>, name: &str, body: &Value, status: bool) -> Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::default();
    let result = if status {
        api.patch_status(name, &params, &Patch::Merge(body)).await
    } else {
        api.patch(name, &params, &Patch::Merge(body)).await
    };
    match result {
        Ok(_) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(format!("patching {name}"))(e)),
    }
}

impl Binder {
    async fn note(&self, claim: &PersistentVolumeClaim, note: &Note) {
        self.events
            .record(
                &events::reference(&*claim),
                note.type_,
                note.reason,
                &note.message,
            )
            .await;
    }

    async fn sync_claim(&self, key: &str) -> Result<Action> {
        let Some(claim) = self.claims.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let class_name = logic::claim_class(&claim);
        let class = (!class_name.is_empty())
            .then(|| self.classes.cache().get(None, &class_name))
            .flatten();
        let volumes = self.volumes.cache().list();
        let view = ClaimView {
            claim: &claim,
            class: class.as_deref(),
            volumes: volumes.iter().map(Arc::as_ref).collect(),
        };
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
        match logic::sync_claim(&view) {
            ClaimStep::Nothing => {}
            ClaimStep::Pending(note) => {
                if let Some(note) = &note {
                    self.note(&claim, note).await;
                }
                if phase != Some("Pending") {
                    patch(
                        &claims,
                        &name,
                        &json!({"status": {"phase": "Pending"}}),
                        true,
                    )
                    .await?;
                }
            }
            ClaimStep::Provision { provisioner } => {
                let annotations = claim.metadata.annotations.clone().unwrap_or_default();
                if annotations.get(logic::STORAGE_PROVISIONER) != Some(&provisioner) {
                    let body = json!({"metadata": {"annotations": {
                        (logic::STORAGE_PROVISIONER): provisioner,
                        (logic::BETA_STORAGE_PROVISIONER): provisioner,
                    }}});
                    patch(&claims, &name, &body, false).await?;
                }
                self.note(&claim, &logic::external_provisioning(&provisioner))
                    .await;
                if phase != Some("Pending") {
                    patch(
                        &claims,
                        &name,
                        &json!({"status": {"phase": "Pending"}}),
                        true,
                    )
                    .await?;
                }
            }
            ClaimStep::Lost(note) => {
                self.note(&claim, &note).await;
                if phase != Some("Lost") {
                    patch(&claims, &name, &json!({"status": {"phase": "Lost"}}), true).await?;
                }
            }
            ClaimStep::Bind { volume, chosen } => {
                let Some(pv) = volumes
                    .iter()
                    .find(|v| v.metadata.name.as_deref() == Some(volume.as_str()))
                else {
                    return Ok(Action::AwaitChange);
                };
                self.bind(&claim, pv, chosen).await?;
            }
        }
        Ok(Action::AwaitChange)
    }

    /// Writes whatever of a binding is not written yet: the volume's `claimRef` and phase, the
    /// claim's `volumeName`, annotations and status.
    async fn bind(
        &self,
        claim: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        chosen: bool,
    ) -> Result<()> {
        let pv_name = pv.metadata.name.clone().unwrap_or_default();
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let uid = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| r.uid.clone());
        if uid.as_deref() != claim.metadata.uid.as_deref() {
            let mut body = json!({
                // The resourceVersion makes two binders racing for one volume a conflict.
                "metadata": {"resourceVersion": pv.metadata.resource_version},
                "spec": {"claimRef": logic::claim_ref(claim)},
            });
            let bound_by_us = pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_none();
            if bound_by_us {
                body["metadata"]["annotations"] = json!({(logic::BOUND_BY_CONTROLLER): "yes"});
            }
            patch(&volumes, &pv_name, &body, false).await?;
        }
        if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
            patch(
                &volumes,
                &pv_name,
                &json!({"status": {"phase": "Bound"}}),
                true,
            )
            .await?;
        }
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        let named = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
        if named != Some(pv_name.as_str())
            || annotations.get(logic::BIND_COMPLETED).map(String::as_str) != Some("yes")
        {
            let mut wanted = json!({(logic::BIND_COMPLETED): "yes"});
            if chosen {
                wanted[logic::BOUND_BY_CONTROLLER] = json!("yes");
            }
            let body = json!({
                "metadata": {"annotations": wanted},
                "spec": {"volumeName": pv_name},
            });
            patch(&claims, &name, &body, false).await?;
        }
        let spec = pv.spec.clone().unwrap_or_default();
        let status = json!({"status": {
            "phase": "Bound",
            "accessModes": spec.access_modes,
            "capacity": spec.capacity,
        }});
        let current = serde_json::to_value(&claim.status).unwrap_or(Value::Null);
        if current.get("phase") != status["status"].get("phase")
            || current.get("capacity") != status["status"].get("capacity")
        {
            patch(&claims, &name, &status, true).await?;
        }
        Ok(())
    }

    async fn sync_volume(&self, name: &str) -> Result<Action> {
        let Some(pv) = self.volumes.cache().get(None, name) else {
            return Ok(Action::AwaitChange);
        };
        let claim = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .and_then(|r| {
                self.claims.cache().get(
                    r.namespace.as_deref(),
                    r.name.as_deref().unwrap_or_default(),
                )
            });
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        match logic::sync_volume(&pv, claim.as_deref()) {
            VolumeStep::Nothing => {}
            VolumeStep::Phase { phase, note } => {
                let mut status = json!({"phase": phase});
                if let Some(note) = &note {
                    status["reason"] = json!(note.reason);
                    status["message"] = json!(note.message);
                    self.events
                        .record(
                            &events::reference(&*pv),
                            note.type_,
                            note.reason,
                            &note.message,
                        )
                        .await;
                }
                patch(&volumes, name, &json!({"status": status}), true).await?;
            }
        }
        Ok(Action::AwaitChange)
    }
}

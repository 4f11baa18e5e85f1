//! The protection controllers' shells: `pvc-protection` (keys are claims; a pod's events queue
//! the claims it refers to) and `pv-protection` (keys are volumes).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skiff_client::{Api, Informer, index};

use super as logic;
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};

struct ClaimProtection {
    claims: Informer<PersistentVolumeClaim>,
    pods: Informer<Pod>,
    client: skiff_client::Client,
}

/// Registers `pvc-protection`.
pub(crate) fn start_claims(ctx: &Context) -> Result<Started> {
    let claims = ctx.factory.informer::<PersistentVolumeClaim>();
    let pods = ctx.factory.informer::<Pod>();
    let controller = Controller::new("pvc-protection", ctx.workers)
        .primary(&claims)
        .watches(&pods, |e: Event<'_, Pod>| {
            let pod = e.object();
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            logic::claims_of(pod)
                .into_iter()
                .map(|c| format!("{ns}/{c}"))
                .collect()
        });
    Ok(controller.run(Arc::new(ClaimProtection {
        claims,
        pods,
        client: ctx.factory.client().clone(),
    })))
}

/// Replaces the finalizers, guarded by the resourceVersion read.
fn finalizer_patch(
    finalizers: Vec<String>,
    resource_version: Option<&String>,
) -> serde_json::Value {
    json!({"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}})
}

impl Reconcile for ClaimProtection {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(claim) = self.claims.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let pods = self.pods.cache().by_index(index::NAMESPACE, &ns);
        if !logic::release_claim(&claim, pods.iter().map(Arc::as_ref)) {
            return Ok(Action::AwaitChange);
        }
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        let name = claim.metadata.name.clone().unwrap_or_default();
        let body = finalizer_patch(
            logic::without(claim.metadata.finalizers.as_ref(), logic::PVC_PROTECTION),
            claim.metadata.resource_version.as_ref(),
        );
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if not_found(&e) || conflict(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api(format!(
                "removing the protection of claim {key}"
            ))(e)),
        }
    }
}

struct VolumeProtection {
    volumes: Informer<PersistentVolume>,
    client: skiff_client::Client,
}

/// Registers `pv-protection`.
pub(crate) fn start_volumes(ctx: &Context) -> Result<Started> {
    let volumes = ctx.factory.informer::<PersistentVolume>();
    let controller = Controller::new("pv-protection", ctx.workers).primary(&volumes);
    Ok(controller.run(Arc::new(VolumeProtection {
        volumes,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for VolumeProtection {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(pv) = self.volumes.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        if !logic::release_volume(&pv) {
            return Ok(Action::AwaitChange);
        }
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let body = finalizer_patch(
            logic::without(pv.metadata.finalizers.as_ref(), logic::PV_PROTECTION),
            pv.metadata.resource_version.as_ref(),
        );
        match api
            .patch(key, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if not_found(&e) || conflict(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api(format!(
                "removing the protection of volume {key}"
            ))(e)),
        }
    }
}

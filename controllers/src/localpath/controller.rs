//! The local-path provisioner's shell: keys are `class` (the default StorageClass, made at
//! start and again if deleted), `claim/<namespace>/<name>` and `volume/<name>`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams};
use skiff_client::{Api, Informer};

use super as logic;
use super::Reclaim;
use crate::manager::Context;
use crate::persistentvolume::{self as binder, PROVISIONED_BY};
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};
use skiff_client::events::{self, EventType, Recorder};

struct Provisioner {
    claims: Informer<PersistentVolumeClaim>,
    volumes: Informer<PersistentVolume>,
    classes: Informer<StorageClass>,
    nodes: Informer<Node>,
    pods: Informer<Pod>,
    base: PathBuf,
    client: skiff_client::Client,
    events: Recorder,
}

fn ours(pv: &PersistentVolume) -> bool {
    pv.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONED_BY))
        .is_some_and(|p| p == logic::PROVISIONER)
}

/// Registers the provisioner on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let claims = ctx.factory.informer::<PersistentVolumeClaim>();
    let volumes = ctx.factory.informer::<PersistentVolume>();
    let classes = ctx.factory.informer::<StorageClass>();
    let nodes = ctx.factory.informer::<Node>();
    let pods = ctx.factory.informer::<Pod>();
    let claims_for_nodes = claims.clone();
    let controller = Controller::new("local-path-provisioner", ctx.workers)
        .watches(&claims, |e: Event<'_, PersistentVolumeClaim>| {
            let c = e.object();
            vec![format!(
                "claim/{}/{}",
                c.metadata.namespace.as_deref().unwrap_or_default(),
                c.metadata.name.as_deref().unwrap_or_default()
            )]
        })
        .watches(&volumes, |e: Event<'_, PersistentVolume>| {
            let pv = e.object();
            if ours(pv) && !e.is_delete() {
                vec![format!(
                    "volume/{}",
                    pv.metadata.name.as_deref().unwrap_or_default()
                )]
            } else {
                Vec::new()
            }
        })
        .watches(&pods, |e: Event<'_, Pod>| {
            let pod = e.object();
            match pod.metadata.name.as_deref() {
                Some(name)
                    if pod.metadata.namespace.as_deref() == Some(logic::HELPER_NAMESPACE) =>
                {
                    name.strip_prefix("helper-")
                        .map(|v| vec![format!("volume/{v}")])
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            }
        })
        .watches(&classes, |e: Event<'_, StorageClass>| match e {
            Event::Deleted(c) if c.metadata.name.as_deref() == Some(logic::CLASS) => {
                vec!["class".into()]
            }
            _ => Vec::new(),
        })
        // An Immediate claim waits for a ready node.
        .watches(&nodes, move |_e: Event<'_, Node>| {
            claims_for_nodes
                .cache()
                .list()
                .iter()
                .filter(|c| {
                    c.spec
                        .as_ref()
                        .and_then(|s| s.volume_name.as_deref())
                        .is_none()
                })
                .map(|c| {
                    format!(
                        "claim/{}/{}",
                        c.metadata.namespace.as_deref().unwrap_or_default(),
                        c.metadata.name.as_deref().unwrap_or_default()
                    )
                })
                .collect()
        });
    controller.queue().add("class".into());
    let client = ctx.factory.client().clone();
    let base = ctx
        .options
        .default_local_storage_path
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/skiff/storage"));
    Ok(controller.run(Arc::new(Provisioner {
        claims,
        volumes,
        classes,
        nodes,
        pods,
        base,
        events: Recorder::new(client.clone(), logic::PROVISIONER),
        client,
    })))
}

impl Reconcile for Provisioner {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        if key == "class" {
            return self.ensure_class().await;
        }
        if let Some(rest) = key.strip_prefix("claim/") {
            return self.provision(rest).await;
        }
        if let Some(name) = key.strip_prefix("volume/") {
            return self.reclaim(name).await;
        }
        Ok(Action::AwaitChange)
    }
}

impl Provisioner {
    async fn ensure_class(&self) -> Result<Action> {
        if self.classes.cache().get(None, logic::CLASS).is_some() {
            return Ok(Action::AwaitChange);
        }
        let api: Api<StorageClass> = Api::all(self.client.clone());
        match api
            .create(&PostParams::default(), &logic::default_class())
            .await
        {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if conflict(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api("creating the local-path StorageClass")(e)),
        }
    }

    async fn provision(&self, key: &str) -> Result<Action> {
        let Some(claim) = self.claims.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let class_name = binder::claim_class(&claim);
        let class = self.classes.cache().get(None, &class_name);
        if !logic::wants(&claim, class.as_deref()) {
            return Ok(Action::AwaitChange);
        }
        let class = class.expect("wants checked the class");
        let name = logic::volume_name(&claim);
        if self.volumes.cache().get(None, &name).is_some() {
            return Ok(Action::AwaitChange);
        }
        let nodes = self.nodes.cache().list();
        let Some(node) = logic::node_for(&claim, &class, nodes.iter().map(Arc::as_ref)) else {
            // The binder has not handed over a WaitForFirstConsumer claim without a node, so
            // this is an Immediate claim on a cluster with no ready node yet.
            self.events
                .record(
                    &events::reference(&*claim),
                    EventType::Warning,
                    "ProvisioningFailed",
                    "no ready node to provision a local volume on",
                )
                .await;
            return Ok(Action::Requeue(Duration::from_secs(5)));
        };
        let pv = logic::volume_for(&claim, &class, &node, &self.base);
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &pv).await {
            Ok(_) => {
                self.events
                    .record(
                        &events::reference(&*claim),
                        EventType::Normal,
                        "ProvisioningSucceeded",
                        &format!("Successfully provisioned volume {name}"),
                    )
                    .await;
                Ok(Action::AwaitChange)
            }
            Err(e) if conflict(&e) => Ok(Action::AwaitChange),
            Err(e) => {
                self.events
                    .record(
                        &events::reference(&*claim),
                        EventType::Warning,
                        "ProvisioningFailed",
                        &format!(
                            "failed to provision volume with StorageClass \"{class_name}\": {e}"
                        ),
                    )
                    .await;
                Err(Error::api(format!("creating volume {name}"))(e))
            }
        }
    }

    async fn reclaim(&self, name: &str) -> Result<Action> {
        let Some(pv) = self.volumes.cache().get(None, name) else {
            return Ok(Action::AwaitChange);
        };
        let helper_name = logic::helper_name(&pv);
        let helper = self
            .pods
            .cache()
            .get(Some(logic::HELPER_NAMESPACE), &helper_name);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), logic::HELPER_NAMESPACE);
        match logic::reclaim(&pv, helper.as_deref()) {
            Reclaim::Keep => {}
            Reclaim::RemoveData { node, path } => {
                let failed = helper.as_ref().is_some_and(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
                });
                if failed {
                    self.events
                        .record(
                            &events::reference(&*pv),
                            EventType::Warning,
                            "VolumeFailedDelete",
                            &format!("the helper pod could not remove {path}; retrying"),
                        )
                        .await;
                    delete_pod(&pods, &helper_name).await?;
                    return Ok(Action::Requeue(Duration::from_secs(10)));
                }
                if helper.is_none() {
                    let pod = logic::helper_pod(&pv, &node, &path);
                    match pods.create(&PostParams::default(), &pod).await {
                        Ok(_) => {}
                        Err(e) if conflict(&e) => {}
                        Err(e) => return Err(Error::api(format!("creating pod {helper_name}"))(e)),
                    }
                }
            }
            Reclaim::DeleteVolume => {
                let api: Api<PersistentVolume> = Api::all(self.client.clone());
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(Error::api(format!("deleting volume {name}"))(e)),
                }
                if helper.is_some() {
                    delete_pod(&pods, &helper_name).await?;
                }
            }
        }
        Ok(Action::AwaitChange)
    }
}

async fn delete_pod(pods: &Api<Pod>, name: &str) -> Result<()> {
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(format!("deleting pod {name}"))(e)),
    }
}

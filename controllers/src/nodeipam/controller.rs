//! The node IPAM controller's shell: hands each node without one a pod range out of the
//! cluster CIDR, and takes the range back when the node goes.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skiff_client::{Api, Informer, key_of};

use super::Allocator;
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, not_found};
use crate::{Error, Result};

fn pod_cidr(node: &Node) -> Option<String> {
    node.spec
        .as_ref()?
        .pod_cidr
        .clone()
        .filter(|c| !c.is_empty())
}

struct Ipam {
    nodes: Informer<Node>,
    client: skiff_client::Client,
    // Short critical sections only; never held across an await.
    allocator: Arc<Mutex<Allocator>>,
}

/// Registers node IPAM on the shared informers. One worker: allocation must not race itself.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let nodes = ctx.factory.informer::<Node>();
    let allocator = Arc::new(Mutex::new(Allocator::new(
        &ctx.options.cluster_cidr,
        ctx.options.node_cidr_mask_size,
    )?));
    let released = allocator.clone();
    let controller =
        Controller::new("nodeipam", 1).watches(&nodes, move |e: Event<'_, Node>| match e {
            Event::Deleted(n) => {
                if let Some(c) = pod_cidr(n) {
                    released.lock().expect("allocator lock").release(&c);
                }
                Vec::new()
            }
            e if pod_cidr(e.object()).is_none() => vec![key_of(e.object())],
            _ => Vec::new(),
        });
    Ok(controller.run(Arc::new(Ipam {
        nodes,
        client: ctx.factory.client().clone(),
        allocator,
    })))
}

impl Reconcile for Ipam {
    async fn reconcile(&self, name: &str) -> Result<Action> {
        let Some(node) = self.nodes.cache().get(None, name) else {
            return Ok(Action::AwaitChange);
        };
        if pod_cidr(&node).is_some() {
            return Ok(Action::AwaitChange);
        }
        let cidr = {
            let mut a = self.allocator.lock().expect("allocator lock");
            // Every range the cache shows taken (also those handed out before a restart).
            for n in self.nodes.cache().list() {
                if let Some(c) = pod_cidr(&n) {
                    a.occupy(&c);
                }
            }
            a.allocate()?
        };
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) => {
                self.allocator
                    .lock()
                    .expect("allocator lock")
                    .release(&cidr);
                if not_found(&e) {
                    Ok(Action::AwaitChange)
                } else {
                    Err(Error::api(format!("setting the pod range of node {name}"))(
                        e,
                    ))
                }
            }
        }
    }
}

//! The namespace controller's shell: empties a terminating namespace across every served
//! resource it discovers, then finalizes it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use skiff_client::{Api, Informer, key_of};

use super as logic;
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, discover, not_found};
use crate::{Error, Result};

/// How soon a namespace whose objects are still going away is looked at again.
const RECHECK: Duration = Duration::from_secs(1);

struct Namespaces {
    namespaces: Informer<Namespace>,
    client: skiff_client::Client,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let namespaces = ctx.factory.informer::<Namespace>();
    // Only a terminating namespace has work; a deleted one has none left.
    let controller = Controller::new("namespace", ctx.workers).watches(
        &namespaces,
        |e: Event<'_, Namespace>| match e {
            Event::Deleted(_) => Vec::new(),
            e if logic::needs_cleanup(e.object()) => vec![key_of(e.object())],
            _ => Vec::new(),
        },
    );
    Ok(controller.run(Arc::new(Namespaces {
        namespaces,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for Namespaces {
    async fn reconcile(&self, name: &str) -> Result<Action> {
        let Some(ns) = self.namespaces.cache().get(None, name) else {
            return Ok(Action::AwaitChange);
        };
        if !logic::needs_cleanup(&ns) {
            return Ok(Action::AwaitChange);
        }
        let mut remaining = 0usize;
        for r in logic::purgeable(&discover(&self.client).await?) {
            let ar = r.api_resource();
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), name, &ar);
            let what = format!("{} in namespace {name}", r.plural);
            let listed = match api.list(&ListParams::default()).await {
                Ok(l) => l,
                Err(e) if not_found(&e) => continue,
                Err(e) => return Err(Error::api(format!("listing {what}"))(e)),
            };
            let live: Vec<&DynamicObject> = listed
                .items
                .iter()
                .filter(|o| o.metadata.deletion_timestamp.is_none())
                .collect();
            remaining += listed.items.len();
            if live.is_empty() {
                continue;
            }
            if r.can("deletecollection") {
                match api
                    .delete_collection(&DeleteParams::background(), &ListParams::default())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(Error::api(format!("deleting {what}"))(e)),
                }
            } else {
                for o in live {
                    let n = o.metadata.name.clone().unwrap_or_default();
                    match api.delete(&n, &DeleteParams::background()).await {
                        Ok(_) => {}
                        Err(e) if not_found(&e) => {}
                        Err(e) => return Err(Error::api(format!("deleting {what}"))(e)),
                    }
                }
            }
        }
        if remaining > 0 {
            tracing::debug!(namespace = name, remaining, "namespace not empty yet");
            return Ok(Action::Requeue(RECHECK));
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api
            .replace_subresource(
                "finalize",
                name,
                &PostParams::default(),
                &logic::finalized(&ns),
            )
            .await
        {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if not_found(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api(format!("finalizing namespace {name}"))(e)),
        }
    }
}

//! The namespace controller: empties a terminating namespace across every served resource it
//! discovers, then finalizes it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue, handler_fn, key_of};
use tokio_util::task::TaskTracker;

use super::{Started, discover, not_found, queue, spawn_workers};
use crate::namespace as logic;
use crate::{Error, Result};

/// How soon a namespace whose objects are still going away is looked at again.
const RECHECK: Duration = Duration::from_secs(1);

struct Controller {
    namespaces: Informer<Namespace>,
    queue: WorkQueue<String>,
    client: skiff_client::Client,
}

impl Controller {
    async fn sync(&self, name: &str) -> Result<Option<Duration>> {
        let Some(ns) = self.namespaces.cache().get(None, name) else {
            return Ok(None);
        };
        if !logic::needs_cleanup(&ns) {
            return Ok(None);
        }
        let mut remaining = 0usize;
        for r in logic::purgeable(&discover(&self.client).await?) {
            let api_version = if r.group.is_empty() {
                r.version.clone()
            } else {
                format!("{}/{}", r.group, r.version)
            };
            let ar = ApiResource {
                group: r.group.clone(),
                version: r.version.clone(),
                api_version,
                kind: r.kind.clone(),
                plural: r.plural.clone(),
            };
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
            if r.verbs.iter().any(|v| v == "deletecollection") {
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
            return Ok(Some(RECHECK));
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
            Ok(_) => Ok(None),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(Error::api(format!("finalizing namespace {name}"))(e)),
        }
    }
}

/// Registers the controller's handlers on `factory`.
pub(crate) fn start(factory: &SharedInformerFactory, workers: usize) -> Started {
    let c = Arc::new(Controller {
        namespaces: factory.informer::<Namespace>(),
        queue: queue(),
        client: factory.client().clone(),
    });
    let (a, u) = (c.clone(), c.clone());
    c.namespaces.add_handler(handler_fn(
        move |n: &Arc<Namespace>| {
            if logic::needs_cleanup(n) {
                a.queue.add(key_of(n.as_ref()))
            }
        },
        move |_: &Arc<Namespace>, n: &Arc<Namespace>| {
            if logic::needs_cleanup(n) {
                u.queue.add(key_of(n.as_ref()))
            }
        },
        |_: &Arc<Namespace>| {},
    ));
    Started {
        queue: c.queue.clone(),
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(tracker, "namespace", &q, workers, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    }
}

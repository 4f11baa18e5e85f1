//! The service account controller: a `default` ServiceAccount in every active namespace.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::PostParams;
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue, handler_fn, key_of};
use tokio_util::task::TaskTracker;

use super::{Started, conflict, queue, spawn_workers};
use crate::serviceaccount as logic;
use crate::{Error, Result};

struct Controller {
    namespaces: Informer<Namespace>,
    accounts: Informer<ServiceAccount>,
    queue: WorkQueue<String>,
    client: skiff_client::Client,
}

impl Controller {
    async fn sync(&self, ns: &str) -> Result<Option<Duration>> {
        let Some(namespace) = self.namespaces.cache().get(None, ns) else {
            return Ok(None);
        };
        let has = self
            .accounts
            .cache()
            .get(Some(ns), logic::DEFAULT)
            .is_some();
        let Some(sa) = logic::missing_default(&namespace, has) else {
            return Ok(None);
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => Ok(None),
            Err(e) if conflict(&e) => Ok(None),
            // A namespace that started terminating meanwhile refuses new objects.
            Err(e) if skiff_client::status_code(&e) == Some(403) => Ok(None),
            Err(e) => Err(Error::api(format!(
                "creating the default service account in {ns}"
            ))(e)),
        }
    }
}

/// Registers the controller's handlers on `factory`.
pub(crate) fn start(factory: &SharedInformerFactory, workers: usize) -> Started {
    let c = Arc::new(Controller {
        namespaces: factory.informer::<Namespace>(),
        accounts: factory.informer::<ServiceAccount>(),
        queue: queue(),
        client: factory.client().clone(),
    });
    let (a, u) = (c.clone(), c.clone());
    c.namespaces.add_handler(handler_fn(
        move |n: &Arc<Namespace>| a.queue.add(key_of(n.as_ref())),
        move |_: &Arc<Namespace>, n: &Arc<Namespace>| u.queue.add(key_of(n.as_ref())),
        |_: &Arc<Namespace>| {},
    ));
    let d = c.clone();
    c.accounts.add_handler(handler_fn(
        |_: &Arc<ServiceAccount>| {},
        |_: &Arc<ServiceAccount>, _: &Arc<ServiceAccount>| {},
        move |sa: &Arc<ServiceAccount>| {
            if sa.metadata.name.as_deref() == Some(logic::DEFAULT) {
                d.queue
                    .add(sa.metadata.namespace.clone().unwrap_or_default())
            }
        },
    ));
    Started {
        queue: c.queue.clone(),
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(
                tracker,
                "serviceaccount",
                &q,
                workers,
                move |key: String| {
                    let c = c.clone();
                    async move { c.sync(&key).await }
                },
            );
        }),
    }
}

//! The service account controller's shell: a `default` ServiceAccount in every active
//! namespace.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::PostParams;
use skiff_client::{Api, Informer, key_of};

use super as logic;
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict};
use crate::{Error, Result};

struct ServiceAccounts {
    namespaces: Informer<Namespace>,
    accounts: Informer<ServiceAccount>,
    client: skiff_client::Client,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let namespaces = ctx.factory.informer::<Namespace>();
    let accounts = ctx.factory.informer::<ServiceAccount>();
    let controller = Controller::new("serviceaccount", ctx.workers)
        // Keys are namespace names: a namespace added or changed, or its default account gone.
        .watches(&namespaces, |e: Event<'_, Namespace>| match e {
            Event::Deleted(_) => Vec::new(),
            e => vec![key_of(e.object())],
        })
        .watches(&accounts, |e: Event<'_, ServiceAccount>| match e {
            Event::Deleted(sa) if sa.metadata.name.as_deref() == Some(logic::DEFAULT) => {
                vec![sa.metadata.namespace.clone().unwrap_or_default()]
            }
            _ => Vec::new(),
        });
    Ok(controller.run(Arc::new(ServiceAccounts {
        namespaces,
        accounts,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for ServiceAccounts {
    async fn reconcile(&self, ns: &str) -> Result<Action> {
        let Some(namespace) = self.namespaces.cache().get(None, ns) else {
            return Ok(Action::AwaitChange);
        };
        let has = self
            .accounts
            .cache()
            .get(Some(ns), logic::DEFAULT)
            .is_some();
        let Some(sa) = logic::missing_default(&namespace, has) else {
            return Ok(Action::AwaitChange);
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if conflict(&e) => Ok(Action::AwaitChange),
            // A namespace that started terminating meanwhile refuses new objects.
            Err(e) if skiff_client::status_code(&e) == Some(403) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api(format!(
                "creating the default service account in {ns}"
            ))(e)),
        }
    }
}

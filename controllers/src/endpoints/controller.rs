//! The endpoints and EndpointSlice controllers' shell: two controllers on one reconciler, each
//! with its own queue of Service keys; on every change of a Service, its pods, or the objects it
//! writes, the desired Endpoints (or slices) are computed and written.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams};
use skiff_client::{Api, Informer, index, key_of};

use super as logic;
use crate::manager::Context;
use crate::pods;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};

/// Index of EndpointSlices by `namespace/service`.
const BY_SERVICE: &str = "endpointslice-service";

struct Services {
    services: Informer<Service>,
    pods: Informer<Pod>,
    endpoints: Informer<Endpoints>,
    slices: Informer<EndpointSlice>,
    client: skiff_client::Client,
    write_endpoints: bool,
    write_slices: bool,
}

/// The `namespace/service` a slice belongs to, by its label.
fn slice_key(s: &EndpointSlice) -> Option<String> {
    let ns = s.metadata.namespace.clone().unwrap_or_default();
    s.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(logic::SERVICE_NAME_LABEL))
        .map(|svc| format!("{ns}/{svc}"))
}

/// The endpoints controller: one Endpoints object per Service with a selector.
pub(crate) fn start_endpoints(ctx: &Context) -> Result<Started> {
    start(ctx, "endpoints", true, false)
}

/// The EndpointSlice controller: the slices of each Service with a selector.
pub(crate) fn start_slices(ctx: &Context) -> Result<Started> {
    start(ctx, "endpointslice", false, true)
}

/// Registers one of the two controllers; `endpoints` and `slices` say which objects it writes.
fn start(ctx: &Context, name: &'static str, endpoints: bool, slices: bool) -> Result<Started> {
    let c = Services {
        services: ctx.factory.informer::<Service>(),
        pods: ctx.factory.informer::<Pod>(),
        endpoints: ctx.factory.informer::<Endpoints>(),
        slices: ctx.factory.informer::<EndpointSlice>(),
        client: ctx.factory.client().clone(),
        write_endpoints: endpoints,
        write_slices: slices,
    };
    c.slices.add_index(BY_SERVICE, |s: &EndpointSlice| {
        slice_key(s).into_iter().collect()
    });
    let services = c.services.clone();
    let mut controller = Controller::new(name, ctx.workers)
        .primary(&c.services)
        // A pod concerns the Services of its namespace that select it, before or after.
        .watches(&c.pods, move |e: Event<'_, Pod>| {
            let (old, new) = match e {
                Event::Added(p) | Event::Deleted(p) => (None, p),
                Event::Updated { old, new } => {
                    if old.metadata.resource_version == new.metadata.resource_version {
                        return Vec::new();
                    }
                    (Some(old), new)
                }
            };
            let ns = new.metadata.namespace.clone().unwrap_or_default();
            services
                .cache()
                .by_index(index::NAMESPACE, &ns)
                .iter()
                .filter(|svc| {
                    logic::selects(svc, new) || old.is_some_and(|o| logic::selects(svc, o))
                })
                .map(|svc| key_of(svc.as_ref()))
                .collect()
        });
    // Someone else touching our objects: put them right.
    if endpoints {
        controller = controller.watches(&c.endpoints, |e: Event<'_, Endpoints>| match e {
            Event::Deleted(ep) => vec![key_of(ep)],
            _ => Vec::new(),
        });
    }
    if slices {
        controller = controller.watches(&c.slices, |e: Event<'_, EndpointSlice>| match e {
            Event::Added(_) => Vec::new(),
            e => slice_key(e.object()).into_iter().collect(),
        });
    }
    Ok(controller.run(Arc::new(c)))
}

impl Reconcile for Services {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let ep_api: Api<Endpoints> = Api::namespaced(self.client.clone(), ns);
        let Some(svc) = self.services.cache().get_by_key(key) else {
            // The Service is gone: so are its Endpoints (slices go with their owner).
            if self.write_endpoints && self.endpoints.cache().get_by_key(key).is_some() {
                match ep_api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(Error::api(format!("deleting Endpoints {key}"))(e)),
                }
            }
            return Ok(Action::AwaitChange);
        };
        if logic::selector(&svc).is_none() || pods::is_deleting(&svc.metadata) {
            return Ok(Action::AwaitChange);
        }
        let pods = self.pods.cache().by_index(index::NAMESPACE, ns);
        let pod_refs: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();

        if self.write_endpoints
            && let Some(desired) = logic::desired_endpoints(&svc, pod_refs.iter().copied())
        {
            match self.endpoints.cache().get_by_key(key) {
                None => match ep_api.create(&PostParams::default(), &desired).await {
                    Ok(_) => {}
                    // Created meanwhile (or our cache lags): the next event brings it.
                    Err(e) if conflict(&e) => {
                        return Ok(Action::Requeue(Duration::from_millis(200)));
                    }
                    Err(e) => return Err(Error::api(format!("creating Endpoints {key}"))(e)),
                },
                Some(existing) if !logic::endpoints_equal(&existing, &desired) => {
                    let mut updated = (*existing).clone();
                    updated.subsets = desired.subsets;
                    updated.metadata.labels = desired.metadata.labels;
                    ep_api
                        .replace(name, &PostParams::default(), &updated)
                        .await
                        .map_err(Error::api(format!("updating Endpoints {key}")))?;
                }
                Some(_) => {}
            }
        }

        if self.write_slices {
            let existing: Vec<EndpointSlice> = self
                .slices
                .cache()
                .by_index(BY_SERVICE, key)
                .iter()
                .filter(|s| logic::is_managed_slice(s, name))
                .map(|s| (**s).clone())
                .collect();
            let owner = pods::controller_ref("v1", "Service", &svc.metadata);
            let plan = logic::plan_slices(&svc, pod_refs.iter().copied(), &existing, owner);
            let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), ns);
            for s in &plan.create {
                api.create(&PostParams::default(), s)
                    .await
                    .map_err(Error::api(format!("creating an EndpointSlice for {key}")))?;
            }
            for s in &plan.update {
                let n = s.metadata.name.clone().unwrap_or_default();
                api.replace(&n, &PostParams::default(), s)
                    .await
                    .map_err(Error::api(format!("updating EndpointSlice {ns}/{n}")))?;
            }
            for n in &plan.delete {
                match api.delete(n, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => {
                        return Err(Error::api(format!("deleting EndpointSlice {ns}/{n}"))(e));
                    }
                }
            }
        }
        Ok(Action::AwaitChange)
    }
}

//! The endpoints and EndpointSlice controllers (one queue of Service keys): on every change of a
//! Service, its pods, or its Endpoints and slices, the desired objects are computed and written.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams};
use skiff_client::{Api, Informer, SharedInformerFactory, WorkQueue, handler_fn, index, key_of};
use tokio_util::task::TaskTracker;

use super::{Started, conflict, not_found, queue, spawn_workers};
use crate::endpoints as logic;
use crate::pods;
use crate::{Error, Result};

/// Index of EndpointSlices by `namespace/service`.
const BY_SERVICE: &str = "endpointslice-service";

struct Controller {
    services: Informer<Service>,
    pods: Informer<Pod>,
    endpoints: Informer<Endpoints>,
    slices: Informer<EndpointSlice>,
    queue: WorkQueue<String>,
    client: skiff_client::Client,
    write_endpoints: bool,
    write_slices: bool,
}

impl Controller {
    fn pod_changed(&self, old: Option<&Pod>, new: &Pod) {
        let ns = new.metadata.namespace.clone().unwrap_or_default();
        for svc in self.services.cache().by_index(index::NAMESPACE, &ns) {
            if logic::selects(&svc, new) || old.is_some_and(|o| logic::selects(&svc, o)) {
                self.queue.add(key_of(svc.as_ref()));
            }
        }
    }

    async fn sync(&self, key: &str) -> Result<Option<Duration>> {
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
            return Ok(None);
        };
        if logic::selector(&svc).is_none() || pods::is_deleting(&svc.metadata) {
            return Ok(None);
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
                    Err(e) if conflict(&e) => return Ok(Some(Duration::from_millis(200))),
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
        Ok(None)
    }
}

/// Registers the controllers' handlers on `factory`; `endpoints` and `slices` say which of the
/// two objects are written.
pub(crate) fn start(
    factory: &SharedInformerFactory,
    workers: usize,
    endpoints: bool,
    slices: bool,
) -> Started {
    let c = Arc::new(Controller {
        services: factory.informer::<Service>(),
        pods: factory.informer::<Pod>(),
        endpoints: factory.informer::<Endpoints>(),
        slices: factory.informer::<EndpointSlice>(),
        queue: queue(),
        client: factory.client().clone(),
        write_endpoints: endpoints,
        write_slices: slices,
    });
    c.slices.add_index(BY_SERVICE, |s: &EndpointSlice| {
        let ns = s.metadata.namespace.clone().unwrap_or_default();
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(logic::SERVICE_NAME_LABEL))
            .map(|svc| vec![format!("{ns}/{svc}")])
            .unwrap_or_default()
    });
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.services.add_handler(handler_fn(
        move |s: &Arc<Service>| a.queue.add(key_of(s.as_ref())),
        move |_: &Arc<Service>, s: &Arc<Service>| u.queue.add(key_of(s.as_ref())),
        move |s: &Arc<Service>| d.queue.add(key_of(s.as_ref())),
    ));
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.pods.add_handler(handler_fn(
        move |p: &Arc<Pod>| a.pod_changed(None, p),
        move |o: &Arc<Pod>, p: &Arc<Pod>| {
            if o.metadata.resource_version != p.metadata.resource_version {
                u.pod_changed(Some(o), p)
            }
        },
        move |p: &Arc<Pod>| d.pod_changed(None, p),
    ));
    // Someone else touching our objects: put them right.
    let d = c.clone();
    c.endpoints.add_handler(handler_fn(
        |_: &Arc<Endpoints>| {},
        |_: &Arc<Endpoints>, _: &Arc<Endpoints>| {},
        move |e: &Arc<Endpoints>| d.queue.add(key_of(e.as_ref())),
    ));
    let slice_key = |s: &EndpointSlice| {
        let ns = s.metadata.namespace.clone().unwrap_or_default();
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(logic::SERVICE_NAME_LABEL))
            .map(|svc| format!("{ns}/{svc}"))
    };
    let (u, d) = (c.clone(), c.clone());
    c.slices.add_handler(handler_fn(
        |_: &Arc<EndpointSlice>| {},
        move |_: &Arc<EndpointSlice>, s: &Arc<EndpointSlice>| {
            if let Some(k) = slice_key(s) {
                u.queue.add(k)
            }
        },
        move |s: &Arc<EndpointSlice>| {
            if let Some(k) = slice_key(s) {
                d.queue.add(k)
            }
        },
    ));
    Started {
        queue: c.queue.clone(),
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(tracker, "endpoints", &q, workers, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    }
}

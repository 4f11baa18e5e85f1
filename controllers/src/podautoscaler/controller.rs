//! The horizontal-pod-autoscaler's shell: every autoscaler is synced when it changes and again
//! every sync period (15 s, `--horizontal-pod-autoscaler-sync-period`). A sync reads the
//! target's `scale` subresource (any kind that has one, custom resources included, found by
//! discovery of its group-version), the pods its selector picks from the shared cache, their
//! usage from the resource metrics API (`metrics.k8s.io`, whichever server serves it) when a
//! resource metric needs it, and each `Pods`, `Object` or `External` metric from the custom or
//! external metrics API; it then decides, writes the new scale, records the events and writes the
//! status when it changed.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;
use skiff_client::cache::index;
use skiff_client::events::{self, Recorder};
use skiff_client::{Api, Informer};
use skiff_meta::labels;

use super::custom::{Query, Reading};
use super::{
    History, Measured, PodUsage, TargetScale, Tunables, Usage, decide, rescaled, scale_unreadable,
    status_changed,
};
use crate::manager::Context;
use crate::runtime::{Action, Controller, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};

const COMPONENT: &str = "horizontal-pod-autoscaler";

struct Autoscalers {
    autoscalers: Informer<HorizontalPodAutoscaler>,
    pods: Informer<Pod>,
    client: skiff_client::Client,
    recorder: Recorder,
    tunables: Tunables,
    sync_period: Duration,
    /// Each autoscaler's recommendations and scale events, by key.
    histories: Mutex<HashMap<String, History>>,
    /// The resources of the target kinds met so far, by `apiVersion` and kind.
    resources: Mutex<HashMap<(String, String), ApiResource>>,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let autoscalers = ctx.factory.informer::<HorizontalPodAutoscaler>();
    let pods = ctx.factory.informer::<Pod>();
    let controller = Controller::new(COMPONENT, ctx.workers).primary(&autoscalers);
    let client = ctx.factory.client().clone();
    let options = ctx.options;
    Ok(controller.run(Arc::new(Autoscalers {
        autoscalers,
        pods,
        recorder: Recorder::new(client.clone(), COMPONENT),
        client,
        tunables: Tunables {
            tolerance: options.horizontal_pod_autoscaler_tolerance,
            downscale_stabilization: options.horizontal_pod_autoscaler_downscale_stabilization,
            cpu_initialization_period: options.horizontal_pod_autoscaler_cpu_initialization_period,
            initial_readiness_delay: options.horizontal_pod_autoscaler_initial_readiness_delay,
        },
        sync_period: options.horizontal_pod_autoscaler_sync_period,
        histories: Mutex::new(HashMap::new()),
        resources: Mutex::new(HashMap::new()),
    })))
}

impl Autoscalers {
    /// The resource of `kind` in `api_version`, by discovery once.
    async fn resource_of(
        &self,
        api_version: &str,
        kind: &str,
    ) -> std::result::Result<ApiResource, String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.resources.lock().unwrap().get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, _) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| format!("unable to find the resource of {kind} in {api_version}: {e}"))?;
        self.resources.lock().unwrap().insert(key, resource.clone());
        Ok(resource)
    }

    /// The pods of `namespace` that `selector` picks.
    fn pods_of(&self, namespace: &str, selector: &str) -> Vec<Arc<Pod>> {
        let Ok(selector) = labels::parse(selector) else {
            return Vec::new();
        };
        self.pods
            .cache()
            .by_index(index::NAMESPACE, namespace)
            .into_iter()
            .filter(|p| selector.matches(crate::pods::labels(&p.metadata)))
            .collect()
    }

    /// What the resource metrics API says the pods of `namespace` picked by `selector` use.
    async fn usage(&self, namespace: &str, selector: &str) -> Usage {
        let url = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods");
        let request = kube::core::Request::new(url)
            .list(&kube::api::ListParams::default().labels(selector))
            .map_err(|e| e.to_string())?;
        let body: Value = self
            .client
            .request(request)
            .await
            .map_err(|e| format!("unable to fetch metrics from resource metrics API: {e}"))?;
        let usage = pod_usage(&body);
        if usage.is_empty() {
            return Err("no metrics returned from resource metrics API".into());
        }
        Ok(usage)
    }

    /// What the metrics APIs say for `hpa`'s metrics, of the pods `selector` picks in
    /// `namespace`: each API asked only when a metric needs it.
    async fn measure(
        &self,
        hpa: &HorizontalPodAutoscaler,
        namespace: &str,
        selector: &str,
    ) -> Measured {
        let metrics = hpa
            .spec
            .as_ref()
            .and_then(|s| s.metrics.clone())
            .unwrap_or_default();
        let resources = if metrics
            .iter()
            .any(|m| matches!(m.type_.as_str(), "Resource" | "ContainerResource"))
        {
            self.usage(namespace, selector).await
        } else {
            Ok(BTreeMap::new())
        };
        let mut custom = BTreeMap::new();
        for (i, metric) in metrics.iter().enumerate() {
            if let Some(query) = Query::of(metric, selector) {
                custom.insert(i, self.read(namespace, &query).await);
            }
        }
        Measured { resources, custom }
    }

    /// Asks the custom metrics API (its `v1beta2`, else its `v1beta1`) or the external metrics
    /// API for `query` in `namespace`.
    async fn read(&self, namespace: &str, query: &Query) -> Reading {
        let fail = |e: String| match query {
            Query::Pods { .. } => Reading::Pods(Err(e)),
            _ => Reading::Value(Err(e)),
        };
        let resource = match query {
            Query::Object {
                api_version, kind, ..
            } if kind != "Namespace" => match self.resource_of(api_version, kind).await {
                Ok(r) if r.group.is_empty() => r.plural,
                Ok(r) => format!("{}.{}", r.plural, r.group),
                Err(e) => return fail(e),
            },
            _ => String::new(),
        };
        let path = query.path(namespace, &resource);
        let apis: &[&str] = match query {
            Query::External { .. } => &["external.metrics.k8s.io/v1beta1"],
            _ => &[
                "custom.metrics.k8s.io/v1beta2",
                "custom.metrics.k8s.io/v1beta1",
            ],
        };
        let mut last = String::new();
        for api in apis {
            let request = http::Request::get(format!("/apis/{api}{path}"))
                .body(Vec::new())
                .expect("a GET of a path");
            match self.client.request::<Value>(request).await {
                Ok(list) => return query.read(&list),
                // An adapter that serves only the older version.
                Err(e) if not_found(&e) && last.is_empty() => last = api_message(&e),
                Err(e) => return fail(api_message(&e)),
            }
        }
        fail(last)
    }
}

/// An API error's message, the rest as they print.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// The usage in a `PodMetricsList`, by pod name; pods whose entry does not read are left out.
pub fn pod_usage(list: &Value) -> BTreeMap<String, PodUsage> {
    let mut out = BTreeMap::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let Some(name) = item["metadata"]["name"].as_str() else {
            continue;
        };
        let Some(timestamp) = item["timestamp"].as_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let Some(window) = item["window"]
            .as_str()
            .and_then(|w| crate::options::parse_duration(w).ok())
        else {
            continue;
        };
        let containers = item["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let usage = c["usage"]
                    .as_object()?
                    .iter()
                    .filter_map(|(resource, q)| {
                        let q = skiff_meta::quantity::parse(q.as_str()?).ok()?;
                        Some((resource.clone(), q.milli_value()))
                    })
                    .collect();
                Some((c["name"].as_str()?.to_string(), usage))
            })
            .collect();
        out.insert(
            name.to_string(),
            PodUsage {
                timestamp,
                window,
                containers,
            },
        );
    }
    out
}

impl Reconcile for Autoscalers {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(hpa) = self.autoscalers.cache().get_by_key(key) else {
            self.histories.lock().unwrap().remove(key);
            return Ok(Action::AwaitChange);
        };
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let now = Timestamp::now();
        let target = hpa
            .spec
            .as_ref()
            .map(|s| s.scale_target_ref.clone())
            .unwrap_or_default();
        let api_version = target.api_version.clone().unwrap_or_default();
        let target_scale = match self.resource_of(&api_version, &target.kind).await {
            Ok(resource) => {
                let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &resource);
                match api.get_scale(&target.name).await {
                    Ok(scale) => Ok((api, scale)),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e),
        };
        let decision = match target_scale {
            Ok((api, mut scale)) => {
                let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                let selector = scale.status.as_ref().and_then(|s| s.selector.clone());
                let pods = selector
                    .as_deref()
                    .map(|s| self.pods_of(ns, s))
                    .unwrap_or_default();
                let status_replicas = scale.status.as_ref().map_or(0, |s| s.replicas);
                let measured = self
                    .measure(&hpa, ns, selector.as_deref().unwrap_or_default())
                    .await;
                let refs: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
                let mut decision = {
                    let mut histories = self.histories.lock().unwrap();
                    decide(
                        &hpa,
                        &TargetScale {
                            replicas: current,
                            status_replicas,
                            selector,
                        },
                        &refs,
                        &measured,
                        histories.entry(key.to_string()).or_default(),
                        &self.tunables,
                        now,
                    )
                };
                if decision.reason.is_some() {
                    scale.spec.get_or_insert_with(Default::default).replicas =
                        Some(decision.desired);
                    let outcome = api
                        .replace_scale(&target.name, &PostParams::default(), &scale)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string());
                    if outcome.is_ok() {
                        tracing::info!(
                            autoscaler = key,
                            from = current,
                            to = decision.desired,
                            reason = decision.reason.as_deref().unwrap_or_default(),
                            "rescaled"
                        );
                        self.histories
                            .lock()
                            .unwrap()
                            .entry(key.to_string())
                            .or_default()
                            .record_scale(&hpa, current, decision.desired, now);
                    }
                    rescaled(&mut decision, current, outcome, now);
                }
                decision
            }
            Err(e) => scale_unreadable(&hpa, &e, now),
        };
        for note in &decision.notes {
            self.recorder
                .record(
                    &events::reference(hpa.as_ref()),
                    note.type_,
                    note.reason,
                    &note.message,
                )
                .await;
        }
        if status_changed(hpa.status.as_ref(), &decision.status) {
            let mut updated = (*hpa).clone();
            updated.status = Some(decision.status);
            let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), ns);
            match api
                .replace_status(name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
                // A newer autoscaler is on its way through the informer; the next sync writes.
                Err(e) if conflict(&e) => {}
                Err(e) => {
                    return Err(Error::api(format!(
                        "updating status of HorizontalPodAutoscaler {key}"
                    ))(e));
                }
            }
        }
        Ok(Action::Requeue(self.sync_period))
    }
}

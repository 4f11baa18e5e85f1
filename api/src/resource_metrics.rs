//! The resource metrics API (`metrics.k8s.io/v1beta1`), built in: NodeMetrics and PodMetrics
//! read from the kubelets' Summary API (`/stats/summary`, [`skiff_meta::stats`]) when asked, so
//! that `kubectl top` works with nothing installed. Like metrics-server, it serves `get` and
//! `list` (label and field selectors apply to the nodes and pods measured), and only what was
//! measured: a node whose kubelet does not answer, a pod whose containers have no rate yet, are
//! absent (a list leaves them out, a get is a 404), never zero.
//!
//! Each request asks the kubelets concerned at once, each within [`KUBELET_TIMEOUT`]; nothing is
//! kept between requests, so several API servers answer alike.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use http::{Method, StatusCode};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use skiff_kinds::builtin::resource_metrics::{NODE_INFO, POD_INFO};
use skiff_meta::ResourceInfo;
use skiff_meta::quantity::Quantity;
use skiff_meta::stats::{ContainerStats, CpuStats, MemoryStats, PodStats, Summary};

use crate::error::{Error, Result};
use crate::render::Format;
use crate::request::{Request, Response, Target};
use crate::server::ApiServer;

/// How long one kubelet may take to answer before its node counts as unmeasured.
pub const KUBELET_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves a request for NodeMetrics or PodMetrics.
pub async fn serve(api: &ApiServer, request: &Request, target: &Target) -> Result<Response> {
    let watch = request
        .query
        .get("watch")
        .is_some_and(|w| w == "true" || w == "1");
    if request.method != Method::GET || target.subresource.is_some() || watch {
        return Err(Error::MethodNotAllowed);
    }
    let format = Format::negotiate(&request.headers, &request.query)?;
    let kind = &*target.kind;
    let now = Timestamp::now();
    let items = if target.info == &NODE_INFO {
        node_metrics(api, request, target.name.as_deref(), now).await?
    } else {
        pod_metrics(
            api,
            request,
            target.namespace.as_deref(),
            target.name.as_deref(),
            now,
        )
        .await?
    };
    match &target.name {
        Some(name) => {
            let object = items
                .into_iter()
                .next()
                .ok_or_else(|| missing(target.info, target.namespace.as_deref(), name))?;
            Ok(format.object(kind, StatusCode::OK, object))
        }
        None => Ok(format.list(kind, json!({}), items)),
    }
}

/// The nodes asked for (one by name, or those the selectors pick) with their metrics.
async fn node_metrics(
    api: &ApiServer,
    request: &Request,
    name: Option<&str>,
    now: Timestamp,
) -> Result<Vec<Value>> {
    let info = &skiff_kinds::builtin::node::INFO;
    let nodes = sources(api, request, info, None, name, &NODE_INFO).await?;
    let summaries = summaries(api, &nodes).await;
    Ok(nodes
        .iter()
        .filter_map(|node| {
            let name = node["metadata"]["name"].as_str()?;
            let summary = summaries.get(name)?;
            node_object(node, summary, now)
        })
        .collect())
}

/// The pods asked for (one by name, or those the selectors pick in `namespace` or everywhere)
/// with their metrics.
async fn pod_metrics(
    api: &ApiServer,
    request: &Request,
    namespace: Option<&str>,
    name: Option<&str>,
    now: Timestamp,
) -> Result<Vec<Value>> {
    let info = &skiff_kinds::builtin::pod::INFO;
    let pods = sources(api, request, info, namespace, name, &POD_INFO).await?;
    // The nodes of those pods, read in one list rather than one get each.
    let wanted: std::collections::HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.pointer("/spec/nodeName").and_then(Value::as_str))
        .filter(|n| !n.is_empty())
        .collect();
    let nodes = if wanted.is_empty() {
        Vec::new()
    } else {
        let all = api
            .registry
            .list(
                &skiff_kinds::builtin::node::INFO,
                None,
                None,
                None,
                None,
                None,
            )
            .await?;
        all.items
            .into_iter()
            .filter(|n| {
                n["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| wanted.contains(n))
            })
            .collect()
    };
    let summaries = summaries(api, &nodes).await;
    // Each node's pods by UID.
    let measured: HashMap<(&str, &str), &PodStats> = summaries
        .iter()
        .flat_map(|(node, summary)| {
            summary
                .pods
                .iter()
                .map(move |p| ((node.as_str(), p.pod_ref.uid.as_str()), p))
        })
        .collect();
    Ok(pods
        .iter()
        .filter_map(|pod| {
            let node = pod.pointer("/spec/nodeName").and_then(Value::as_str)?;
            let uid = pod.pointer("/metadata/uid").and_then(Value::as_str)?;
            pod_object(pod, measured.get(&(node, uid))?, now)
        })
        .collect())
}

/// The objects measured: the one named (a 404 naming the metrics resource when it does not
/// exist), or those the request's selectors pick.
async fn sources(
    api: &ApiServer,
    request: &Request,
    info: &'static ResourceInfo,
    namespace: Option<&str>,
    name: Option<&str>,
    metrics: &'static ResourceInfo,
) -> Result<Vec<Value>> {
    if let Some(name) = name {
        return match api.registry.get(info, namespace, name, None).await {
            Ok(object) => Ok(vec![object]),
            Err(Error::NotFound { .. }) => Err(missing(metrics, namespace, name)),
            Err(e) => Err(e),
        };
    }
    let filter = crate::selectors::filter(info, &request.query)?;
    let page = api
        .registry
        .list(info, namespace, None, None, None, filter.as_ref())
        .await?;
    Ok(page.items)
}

/// The 404 of an object without metrics, worded as metrics-server's:
/// `podmetrics.metrics.k8s.io "default/web" not found`.
fn missing(info: &ResourceInfo, namespace: Option<&str>, name: &str) -> Error {
    Error::NotFound {
        group: info.group.to_string(),
        resource: info.singular.to_string(),
        name: match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        },
    }
}

/// The summaries of the kubelets of `nodes` (Node objects) that answered, by node name.
async fn summaries(api: &ApiServer, nodes: &[Value]) -> HashMap<String, Summary> {
    let asks = nodes.iter().map(|node| async move {
        let name = node["metadata"]["name"].as_str().unwrap_or_default();
        match summary(api, node).await {
            Ok(summary) => Some((name.to_string(), summary)),
            Err(err) => {
                tracing::debug!(node = name, %err, "no metrics from the node's kubelet");
                None
            }
        }
    });
    join_all(asks).await.into_iter().flatten().collect()
}

/// The summary of `node`'s kubelet, with the API server's kubelet credentials.
async fn summary(api: &ApiServer, node: &Value) -> Result<Summary> {
    let node_name = node["metadata"]["name"].as_str().unwrap_or_default();
    let node: Node = serde_json::from_value(node.clone())
        .map_err(|e| Error::Internal(format!("decoding node {node_name}: {e}")))?;
    let location = crate::proxy::node_location(&node, "", "")?;
    let url = format!(
        "{}://{}/stats/summary?only_cpu_and_memory=true",
        location.scheme, location.authority
    );
    let mut call = crate::server::kubelet_client()
        .get(&url)
        .timeout(KUBELET_TIMEOUT);
    if let Some(token) = &api.config.kubelet_token {
        call = call.bearer_auth(token);
    }
    let response = call
        .send()
        .await
        .map_err(|e| Error::Unavailable(format!("Get \"{url}\": {e}")))?;
    if !response.status().is_success() {
        return Err(Error::Unavailable(format!(
            "Get \"{url}\": {}",
            response.status()
        )));
    }
    response
        .json()
        .await
        .map_err(|e| Error::Unavailable(format!("reading the summary of node {node_name}: {e}")))
}

/// The metadata of a metrics object: the measured object's name, namespace and labels, created
/// now (as metrics-server makes them).
fn metadata(source: &Value, now: Timestamp) -> Value {
    let mut meta = json!({
        "name": source["metadata"]["name"],
        "creationTimestamp": seconds(now),
    });
    if let Some(ns) = source["metadata"].get("namespace") {
        meta["namespace"] = ns.clone();
    }
    if let Some(labels) = source["metadata"].get("labels") {
        meta["labels"] = labels.clone();
    }
    meta
}

/// `cpu` and `memory` of one reading; `None` until both are measured and the CPU has a rate.
fn usage(cpu: Option<CpuStats>, memory: Option<MemoryStats>) -> Option<(Value, Timestamp, u64)> {
    let cpu = cpu?;
    let rate = cpu.usage_nano_cores?;
    let working_set = memory?.working_set_bytes?;
    let usage = json!({
        "cpu": Quantity::from_nano_units(rate).to_string(),
        "memory": Quantity::from_bytes(working_set).to_string(),
    });
    Some((usage, cpu.time, cpu.window_nanos.unwrap_or(0)))
}

/// A NodeMetrics from a node and its kubelet's summary.
pub fn node_object(node: &Value, summary: &Summary, now: Timestamp) -> Option<Value> {
    let (usage, time, window) = usage(summary.node.cpu, summary.node.memory)?;
    Some(json!({
        "kind": NODE_INFO.kind,
        "apiVersion": NODE_INFO.api_version(),
        "metadata": metadata(node, now),
        "timestamp": seconds(time),
        "window": go_duration(window),
        "usage": usage,
    }))
}

/// A PodMetrics from a pod and its entry in its kubelet's summary: only when every container
/// measured has a rate (a pod with part of its containers would understate it).
pub fn pod_object(pod: &Value, stats: &PodStats, now: Timestamp) -> Option<Value> {
    if stats.containers.is_empty() {
        return None;
    }
    let mut containers = Vec::with_capacity(stats.containers.len());
    let mut newest: Option<Timestamp> = None;
    let mut window = 0;
    for ContainerStats {
        name, cpu, memory, ..
    } in &stats.containers
    {
        let (usage, time, w) = usage(*cpu, *memory)?;
        newest = Some(newest.map_or(time, |t| t.max(time)));
        window = window.max(w);
        containers.push(json!({"name": name, "usage": usage}));
    }
    Some(json!({
        "kind": POD_INFO.kind,
        "apiVersion": POD_INFO.api_version(),
        "metadata": metadata(pod, now),
        "timestamp": seconds(newest?),
        "window": go_duration(window),
        "containers": containers,
    }))
}

/// A time as `metav1.Time` writes it: RFC 3339 in whole seconds, UTC.
fn seconds(t: Timestamp) -> String {
    Timestamp::from_second(t.as_second())
        .unwrap_or(t)
        .to_string()
}

/// A duration as Go's `time.Duration.String()` writes it (`10.5s`, `1m30s`, `250ms`), which is
/// how `metav1.Duration` is serialized.
pub fn go_duration(nanos: u64) -> String {
    fn fraction(whole: u64, rest: u64, digits: usize) -> String {
        let rest = format!("{rest:0digits$}");
        let rest = rest.trim_end_matches('0');
        if rest.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{rest}")
        }
    }
    match nanos {
        0 => "0s".into(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}µs", fraction(n / 1_000, n % 1_000, 3)),
        n if n < 1_000_000_000 => format!("{}ms", fraction(n / 1_000_000, n % 1_000_000, 6)),
        n => {
            let seconds = fraction((n / 1_000_000_000) % 60, n % 1_000_000_000, 9);
            let minutes = (n / 60_000_000_000) % 60;
            let hours = n / 3_600_000_000_000;
            let mut out = String::new();
            if hours > 0 {
                out.push_str(&format!("{hours}h"));
            }
            if hours > 0 || minutes > 0 {
                out.push_str(&format!("{minutes}m"));
            }
            out.push_str(&format!("{seconds}s"));
            out
        }
    }
}

#[cfg(test)]
mod tests;

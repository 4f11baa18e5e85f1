//! `/metrics` in the Prometheus text format: requests by verb, resource and code with their
//! latencies, open watches, the log's revision and commit batch sizes (recorded by the store).
//!
//! The recorder is process-global (the `metrics` facade); [`install`] sets it up once, and must
//! run before the first request or commit (anything recorded before it is dropped), and the route
//! renders it, refreshing the gauges that are read rather than counted at scrape time.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::Method;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use warp::Reply;
use warp::filters::BoxedFilter;

use crate::request::{Query, Response, parse_path};
use crate::server::ApiServer;
use skiff_kinds::Snapshot;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's Prometheus recorder (once; later calls return the same handle).
/// `None` if another recorder was installed first.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ];
            let batch_buckets = [
                1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
            ];
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &buckets,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        metrics_exporter_prometheus::Matcher::Suffix("batch_size".into()),
                        &batch_buckets,
                    )
                })
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}

/// The verb Kubernetes reports for a request.
fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method, named) {
        (&Method::GET, _) if watch => "WATCH",
        (&Method::GET, true) => "GET",
        (&Method::GET, false) => "LIST",
        (&Method::POST, _) => "POST",
        (&Method::PUT, _) => "PUT",
        (&Method::PATCH, _) => "PATCH",
        (&Method::DELETE, true) => "DELETE",
        (&Method::DELETE, false) => "DELETECOLLECTION",
        _ => "OTHER",
    }
}

/// Records one served request.
pub fn record_request(
    kinds: &Snapshot,
    method: &Method,
    path: &str,
    query: &str,
    code: u16,
    elapsed: Duration,
) {
    let (resource, subresource, named) = match parse_path(kinds, path) {
        Some(Ok(t)) => (
            t.info.plural,
            t.subresource.unwrap_or_default(),
            t.name.is_some(),
        ),
        _ => ("", String::new(), false),
    };
    let watch = Query::parse(query).flag("watch");
    let verb = verb(method, named, watch);
    metrics::counter!(
        "apiserver_request_total",
        "verb" => verb,
        "resource" => resource,
        "subresource" => subresource.clone(),
        "code" => code.to_string(),
    )
    .increment(1);
    if !watch {
        metrics::histogram!(
            "apiserver_request_duration_seconds",
            "verb" => verb,
            "resource" => resource,
            "subresource" => subresource,
        )
        .record(elapsed.as_secs_f64());
    }
}

/// `GET /metrics` (authentication is applied by the caller).
pub fn route(api: Arc<ApiServer>) -> BoxedFilter<(Response,)> {
    use warp::Filter;
    warp::path!("metrics")
        .and(warp::get())
        .map(move || {
            let Some(handle) = install() else {
                return warp::reply::with_status(
                    "metrics are not available: another recorder is installed",
                    http::StatusCode::SERVICE_UNAVAILABLE,
                )
                .into_response();
            };
            metrics::gauge!("apiserver_registered_watchers").set(api.watchers.len() as f64);
            metrics::gauge!("skiff_log_revision").set(api.registry.current_revision().0 as f64);
            warp::reply::with_header(
                handle.render(),
                "content-type",
                "text/plain; version=0.0.4; charset=utf-8",
            )
            .into_response()
        })
        .boxed()
}

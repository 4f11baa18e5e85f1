//! `Pods`, `Object` and `External` metrics: what to ask the custom metrics API
//! (`custom.metrics.k8s.io`, served by an adapter such as prometheus-adapter) and the external
//! metrics API (`external.metrics.k8s.io`, served by KEDA and the like) through the aggregation
//! layer, how their answers read, and the replica count each metric asks for, as
//! kube-controller-manager's replica calculator works it out:
//! - `Pods`: each pod's value, averaged over the pods that count, against an average-value
//!   target: the calculation of a resource metric's average value (pending pods unready, pods
//!   without a value assumed the worst for the move), with no CPU readiness rules.
//! - `Object`: one object's value. Against a `Value` target, the ratio of value to target times
//!   the ready pods (running and Ready); against an `AverageValue`, the value over the target,
//!   the current count kept while the value per replica is within the tolerance.
//! - `External`: the sum of the series the metric selector picks, the same two ways (an
//!   `AverageValue` target is looked at first, as Kubernetes does).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::{
    self, MetricIdentifier, MetricSpec, MetricStatus, MetricTarget, MetricValueStatus,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use skiff_meta::labels::Selector;
use skiff_meta::quantity;

use super::replicas::{ResourceCalc, Sample, milli};
use super::{MetricOutcome, TargetScale, Tunables, quantity_of};
use crate::pods::{is_ready, phase};

/// The window an adapter's value covers when it does not say (the metrics server's default).
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// What the shell asks the custom or external metrics API for one metric of the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// A `Pods` metric of the pods a selector picks.
    Pods {
        /// The metric's name.
        metric: String,
        /// The target's pods, as the scale subresource selects them.
        selector: String,
        /// The series of the metric wanted (`metricLabelSelector`), `""` for all.
        metric_selector: String,
    },
    /// An `Object` metric of one object of the autoscaler's namespace.
    Object {
        /// The metric's name.
        metric: String,
        /// The object's group-version (`v1` when the spec leaves it out).
        api_version: String,
        /// Its kind; the shell finds the resource by discovery.
        kind: String,
        /// Its name.
        name: String,
        /// The series of the metric wanted (`metricLabelSelector`), `""` for all.
        metric_selector: String,
    },
    /// An `External` metric.
    External {
        /// The metric's name.
        metric: String,
        /// The series that count (summed), `""` for all.
        metric_selector: String,
    },
}

/// A label selector of the spec as a query parameter (`""` when there is none or it does not
/// read: the API server validated it on the way in).
fn selector_text(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> String {
    Selector::from_optional_label_selector(selector)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

impl Query {
    /// What `metric` needs fetched, for the pods `pod_selector` picks; `None` for resource
    /// metrics (read from the resource metrics API) and malformed specs.
    pub fn of(metric: &MetricSpec, pod_selector: &str) -> Option<Query> {
        match metric.type_.as_str() {
            "Pods" => {
                let m = &metric.pods.as_ref()?.metric;
                Some(Query::Pods {
                    metric: m.name.clone(),
                    selector: pod_selector.to_string(),
                    metric_selector: selector_text(m.selector.as_ref()),
                })
            }
            "Object" => {
                let o = metric.object.as_ref()?;
                Some(Query::Object {
                    metric: o.metric.name.clone(),
                    api_version: o
                        .described_object
                        .api_version
                        .clone()
                        .filter(|v| !v.is_empty())
                        .unwrap_or_else(|| "v1".into()),
                    kind: o.described_object.kind.clone(),
                    name: o.described_object.name.clone(),
                    metric_selector: selector_text(o.metric.selector.as_ref()),
                })
            }
            "External" => {
                let m = &metric.external.as_ref()?.metric;
                Some(Query::External {
                    metric: m.name.clone(),
                    metric_selector: selector_text(m.selector.as_ref()),
                })
            }
            _ => None,
        }
    }

    /// The request path below `/apis/<group>/<version>` for namespace `namespace`, with its
    /// query. `resource` is an `Object` metric's resource as the custom metrics API names it
    /// (`services`, `deployments.apps`).
    pub fn path(&self, namespace: &str, resource: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        let path = match self {
            Query::Pods {
                metric,
                selector,
                metric_selector,
            } => {
                query.append_pair("labelSelector", selector);
                if !metric_selector.is_empty() {
                    query.append_pair("metricLabelSelector", metric_selector);
                }
                format!("/namespaces/{namespace}/pods/*/{metric}")
            }
            Query::Object {
                metric,
                kind,
                name,
                metric_selector,
                ..
            } => {
                if !metric_selector.is_empty() {
                    query.append_pair("metricLabelSelector", metric_selector);
                }
                if kind == "Namespace" {
                    format!("/namespaces/{name}/metrics/{metric}")
                } else {
                    format!("/namespaces/{namespace}/{resource}/{name}/{metric}")
                }
            }
            Query::External {
                metric,
                metric_selector,
            } => {
                if !metric_selector.is_empty() {
                    query.append_pair("labelSelector", metric_selector);
                }
                format!("/namespaces/{namespace}/{metric}")
            }
        };
        let query = query.finish();
        if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        }
    }

    /// Reads the API's answer (a `MetricValueList`, or an `ExternalMetricValueList`).
    pub fn read(&self, list: &Value) -> Reading {
        let items = list["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let value = |item: &Value| {
            item["value"]
                .as_str()
                .and_then(|q| quantity::parse(q).ok())
                .map(|q| q.milli_value())
        };
        match self {
            Query::Pods { .. } => {
                let values: BTreeMap<String, Sample> = items
                    .iter()
                    .filter(|i| {
                        i["describedObject"]["kind"]
                            .as_str()
                            .is_none_or(|k| k == "Pod")
                    })
                    .filter_map(|item| {
                        let name = item["describedObject"]["name"].as_str()?;
                        let timestamp = item["timestamp"].as_str()?.parse().ok()?;
                        let window = item["windowSeconds"]
                            .as_u64()
                            .map_or(DEFAULT_WINDOW, Duration::from_secs);
                        Some((
                            name.to_string(),
                            Sample {
                                timestamp,
                                window,
                                milli: value(item)?,
                            },
                        ))
                    })
                    .collect();
                Reading::Pods(if values.is_empty() {
                    Err("no metrics returned from custom metrics API".into())
                } else {
                    Ok(values)
                })
            }
            Query::Object { .. } => Reading::Value(match items {
                [one] => value(one).ok_or_else(|| format!("unreadable value in {one}")),
                _ => Err(format!(
                    "the custom metrics API server returned {} results when we asked for exactly one",
                    items.len()
                )),
            }),
            Query::External { .. } => Reading::Value(if items.is_empty() {
                Err("no metrics returned from external metrics API".into())
            } else {
                items
                    .iter()
                    .map(|i| value(i).ok_or_else(|| format!("unreadable value in {i}")))
                    .sum()
            }),
        }
    }
}

/// What the custom or external metrics API answered for one metric (or why nothing).
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// A `Pods` metric: each pod's value by pod name.
    Pods(Result<BTreeMap<String, Sample>, String>),
    /// An `Object` metric's value, or the sum of an `External` metric's series, in thousandths
    /// of the unit.
    Value(Result<i64, String>),
}

/// The inputs of one custom or external metric's calculation.
pub(super) struct Custom<'a> {
    pub(super) scale: &'a TargetScale,
    pub(super) pods: &'a [&'a Pod],
    pub(super) current: i32,
    pub(super) tunables: &'a Tunables,
    pub(super) now: jiff::Timestamp,
}

impl Custom<'_> {
    /// The replicas a usage ratio asks for, counting the pods that are running and Ready (from
    /// zero replicas, the ratio alone).
    fn by_ratio(&self, ratio: f64) -> Result<i32, String> {
        if self.current == 0 {
            return Ok(ratio.ceil() as i32);
        }
        if self.tunables.within_tolerance(ratio) {
            return Ok(self.current);
        }
        if self.pods.is_empty() {
            return Err(
                "unable to calculate ready pods: no pods returned by selector while calculating replica count"
                    .into(),
            );
        }
        let ready = self
            .pods
            .iter()
            .filter(|p| phase(p) == "Running" && is_ready(p))
            .count();
        Ok((ratio * ready as f64).ceil() as i32)
    }

    /// The replicas a total `usage` asks for against `target` per replica, and the usage per
    /// replica now (by the scale's status count).
    fn per_replica(&self, usage: i64, target: i64) -> (i32, i64) {
        let replicas = self.scale.status_replicas;
        let ratio = usage as f64 / (target as f64 * f64::from(replicas));
        let proposal = if self.tunables.within_tolerance(ratio) {
            replicas
        } else {
            (usage as f64 / target as f64).ceil() as i32
        };
        let average = (usage as f64 / f64::from(replicas.max(1))).ceil() as i64;
        (proposal, average)
    }

    /// The replicas a total `usage` asks for against `target`, and the value the status shows:
    /// the usage itself against a `Value` target, per replica against an `AverageValue`.
    fn against(&self, target: Target, usage: i64) -> Result<(i32, MetricValueStatus), String> {
        Ok(match target {
            Target::Value(target) => (
                self.by_ratio(usage as f64 / target as f64)?,
                MetricValueStatus {
                    value: Some(quantity_of(usage)),
                    ..Default::default()
                },
            ),
            Target::AverageValue(target) => {
                let (replicas, average) = self.per_replica(usage, target);
                (
                    replicas,
                    MetricValueStatus {
                        average_value: Some(quantity_of(average)),
                        ..Default::default()
                    },
                )
            }
        })
    }

    /// A `Pods` metric.
    pub(super) fn pods(&self, metric: &MetricSpec, reading: Option<&Reading>) -> MetricOutcome {
        const FAILED: &str = "FailedGetPodsMetric";
        let source = metric
            .pods
            .as_ref()
            .ok_or((FAILED, "no pods metric source".to_string()))?;
        let name = &source.metric.name;
        let fail = |e: String| (FAILED, format!("failed to get pods metric value: {e}"));
        let target = source
            .target
            .average_value
            .as_ref()
            .and_then(milli)
            .ok_or_else(|| fail("invalid pods metric source: no average value target".into()))?;
        let samples = match reading {
            Some(Reading::Pods(Ok(samples))) => samples.clone(),
            Some(Reading::Pods(Err(e))) => {
                return Err(fail(format!("unable to get metric {name}: {e}")));
            }
            _ => return Err(fail(format!("unable to get metric {name}: not fetched"))),
        };
        let calc = ResourceCalc {
            resource: "",
            container: None,
            current: self.current,
            tunables: self.tunables,
            now: self.now,
        };
        let (replicas, value) = calc.average(self.pods, samples, target).map_err(fail)?;
        let status = MetricStatus {
            type_: "Pods".into(),
            pods: Some(v2::PodsMetricStatus {
                metric: source.metric.clone(),
                current: MetricValueStatus {
                    average_value: Some(quantity_of(value.average_milli)),
                    ..Default::default()
                },
            }),
            ..Default::default()
        };
        Ok((replicas, format!("pods metric {name}"), status))
    }

    /// An `Object` metric.
    pub(super) fn object(&self, metric: &MetricSpec, reading: Option<&Reading>) -> MetricOutcome {
        const FAILED: &str = "FailedGetObjectMetric";
        let source = metric
            .object
            .as_ref()
            .ok_or((FAILED, "no object metric source".to_string()))?;
        let described = &source.described_object;
        let fail = |e: String| (FAILED, format!("failed to get object metric value: {e}"));
        let usage = match reading {
            Some(Reading::Value(Ok(v))) => *v,
            Some(Reading::Value(Err(e))) => {
                return Err(fail(format!(
                    "unable to get metric {} of {} {}: {e}",
                    source.metric.name, described.kind, described.name
                )));
            }
            _ => {
                return Err(fail(format!(
                    "unable to get metric {}: not fetched",
                    source.metric.name
                )));
            }
        };
        let target = target_of(&source.target, true).ok_or_else(|| neither(FAILED, "object"))?;
        let (replicas, current) = self.against(target, usage).map_err(fail)?;
        let status = MetricStatus {
            type_: "Object".into(),
            object: Some(v2::ObjectMetricStatus {
                metric: source.metric.clone(),
                described_object: described.clone(),
                current,
            }),
            ..Default::default()
        };
        Ok((
            replicas,
            format!("{} metric {}", described.kind, source.metric.name),
            status,
        ))
    }

    /// An `External` metric.
    pub(super) fn external(&self, metric: &MetricSpec, reading: Option<&Reading>) -> MetricOutcome {
        const FAILED: &str = "FailedGetExternalMetric";
        let source = metric
            .external
            .as_ref()
            .ok_or((FAILED, "no external metric source".to_string()))?;
        let MetricIdentifier { name, selector } = &source.metric;
        let selector = selector_text(selector.as_ref());
        let fail = |e: String| (FAILED, format!("failed to get {name} external metric: {e}"));
        let usage = match reading {
            Some(Reading::Value(Ok(v))) => *v,
            Some(Reading::Value(Err(e))) => {
                return Err(fail(format!(
                    "unable to get external metric {name} ({selector}): {e}"
                )));
            }
            _ => {
                return Err(fail(format!(
                    "unable to get external metric {name}: not fetched"
                )));
            }
        };
        let target = target_of(&source.target, false).ok_or_else(|| neither(FAILED, "external"))?;
        let (replicas, current) = self.against(target, usage).map_err(fail)?;
        let status = MetricStatus {
            type_: "External".into(),
            external: Some(v2::ExternalMetricStatus {
                metric: source.metric.clone(),
                current,
            }),
            ..Default::default()
        };
        let shown = if selector.is_empty() {
            "nil".to_string()
        } else {
            selector
        };
        Ok((replicas, format!("external metric {name}({shown})"), status))
    }
}

/// The failure (`reason`) of an `Object` or `External` metric (`source`) without a target it
/// can use.
fn neither(reason: &'static str, source: &str) -> (&'static str, String) {
    (
        reason,
        format!(
            "invalid {source} metric source: neither a value target nor an average value target was set"
        ),
    )
}

/// A target as the calculation takes it, in thousandths.
enum Target {
    Value(i64),
    AverageValue(i64),
}

/// The target of an `Object` metric (`by_type`: the one its type names) or an `External`
/// one (its `AverageValue` when set, else its `Value`).
fn target_of(target: &MetricTarget, by_type: bool) -> Option<Target> {
    let value = target.value.as_ref().and_then(milli).map(Target::Value);
    let average = target
        .average_value
        .as_ref()
        .and_then(milli)
        .map(Target::AverageValue);
    if by_type {
        match target.type_.as_str() {
            "Value" => value,
            "AverageValue" => average,
            _ => None,
        }
    } else {
        average.or(value)
    }
}

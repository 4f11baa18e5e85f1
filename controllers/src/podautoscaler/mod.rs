//! The horizontal-pod-autoscaler's decision (kube-controller-manager's `horizontal-pod-autoscaler`
//! controller): from a HorizontalPodAutoscaler, its target's scale, the target's pods and what
//! the resource metrics API says they use, the replica count to scale to, the status to write
//! and the events to record.
//!
//! As Kubernetes decides:
//! - **Per metric** ([`resource_replicas`]): `Resource` and `ContainerResource` metrics, as a
//!   utilization of the pods' requests or as an average value. Pods being deleted or failed are
//!   ignored; pending pods, and (for CPU) pods not yet ready or measured over a whole window
//!   since they became ready, are unready; pods without a measurement are missing. Within the
//!   tolerance (10%) nothing changes; otherwise the ratio of usage to target times the ready
//!   pods, rounded up. When pods are missing or unready, the ratio is worked out again assuming
//!   the worst for the move (missing pods at 100% of their request on the way down, at 0 on the
//!   way up; unready pods at 0 on the way up), and a move that this reverses or shrinks into the
//!   tolerance is not made. `Pods`, `Object` and `External` metrics are read from the custom
//!   and external metrics APIs that an adapter serves through the aggregation layer
//!   ([`custom`]); without one they fail as they fail in Kubernetes.
//! - **Across metrics**: the largest proposal; if every metric failed, or some failed and the
//!   rest would scale down, nothing is scaled.
//! - **Normalization**: without `behavior`, the highest recommendation of the last downscale
//!   stabilization window (5 minutes) wins on the way down, and a step up is at most twice the
//!   current count or 4, whichever is more. With `behavior`, each direction's stabilization
//!   window and its policies (`Pods`/`Percent` per period, the `Max`/`Min`/`Disabled` select
//!   policy) limit the step, counting the scale events of each policy's period.
//! - **Bounds**: `minReplicas`..`maxReplicas`; a target scaled to 0 by hand is left alone
//!   (`ScalingDisabled`).
//! - **Status**: current and desired replicas, the current value of each metric in spec order,
//!   and the conditions `AbleToScale`, `ScalingActive` and `ScalingLimited` with Kubernetes'
//!   reasons and messages.
//!
//! The recommendations and scale events of each autoscaler are kept in its [`History`], in the
//! controller's memory as in Kubernetes; every function takes `now`, so tests drive the clock.

pub mod controller;
pub mod custom;
mod rate;
mod replicas;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::{
    self, HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus,
    MetricSpec, MetricStatus, MetricValueStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use skiff_meta::quantity;

use crate::runtime::Note;
use custom::{Custom, Reading};
use rate::normalize;
pub use replicas::Sample;
use replicas::{ResourceCalc, milli, samples};

/// The controller's tunables, kube-controller-manager's `--horizontal-pod-autoscaler-*` flags.
#[derive(Clone, Debug, PartialEq)]
pub struct Tunables {
    /// How far from 1 the usage ratio may be before a scale is proposed (0.1).
    pub tolerance: f64,
    /// Without `behavior`, how long recommendations are remembered on the way down (5 minutes).
    pub downscale_stabilization: Duration,
    /// After a pod starts, how long its CPU is only counted once it is ready and measured over
    /// a whole window since (5 minutes).
    pub cpu_initialization_period: Duration,
    /// How long after a pod starts a not-ready pod counts as never ready (30 seconds).
    pub initial_readiness_delay: Duration,
}

impl Tunables {
    /// Whether a usage ratio is close enough to 1 that nothing is to change.
    pub fn within_tolerance(&self, ratio: f64) -> bool {
        (ratio - 1.0).abs() <= self.tolerance
    }
}

/// A value in thousandths of its unit as a quantity (`250m`, `2`).
pub(crate) fn quantity_of(milli: i64) -> Quantity {
    Quantity(quantity::Quantity::from_milli(milli).to_string())
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            tolerance: 0.1,
            downscale_stabilization: Duration::from_secs(300),
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

/// What one pod uses, as the resource metrics API reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodUsage {
    /// The end of the measured window.
    pub timestamp: Timestamp,
    /// Its length.
    pub window: Duration,
    /// Per container, per resource, in thousandths of the unit (millicores, millibytes).
    pub containers: BTreeMap<String, BTreeMap<String, i64>>,
}

/// What the metrics API answered for the target's pods, by pod name; `Err` with its message
/// when it could not be read.
pub type Usage = Result<BTreeMap<String, PodUsage>, String>;

/// What the metrics APIs answered for one sync.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The resource metrics API's answer for the target's pods, for `Resource` and
    /// `ContainerResource` metrics.
    pub resources: Usage,
    /// The custom and external metrics APIs' answers, by the index in `spec.metrics` of the
    /// `Pods`, `Object` or `External` metric each is for.
    pub custom: BTreeMap<usize, Reading>,
}

impl From<Usage> for Measured {
    fn from(resources: Usage) -> Self {
        Measured {
            resources,
            custom: BTreeMap::new(),
        }
    }
}

/// What an autoscaler remembers between syncs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// Recommendations (before normalization) and when they were made.
    pub recommendations: Vec<(Timestamp, i32)>,
    /// Scale-ups made and by how many replicas.
    pub scale_ups: Vec<(Timestamp, i32)>,
    /// Scale-downs made and by how many replicas.
    pub scale_downs: Vec<(Timestamp, i32)>,
}

impl History {
    /// Records a scale from `from` to `to` replicas, forgetting events older than the longest
    /// policy period of their direction (no events are kept without `behavior`).
    pub fn record_scale(
        &mut self,
        hpa: &HorizontalPodAutoscaler,
        from: i32,
        to: i32,
        now: Timestamp,
    ) {
        let Some(behavior) = hpa.spec.as_ref().and_then(|s| s.behavior.as_ref()) else {
            return;
        };
        let (events, rules) = if to > from {
            (&mut self.scale_ups, behavior.scale_up.as_ref())
        } else {
            (&mut self.scale_downs, behavior.scale_down.as_ref())
        };
        let longest = rules
            .and_then(|r| r.policies.as_ref())
            .and_then(|p| p.iter().map(|p| p.period_seconds).max())
            .unwrap_or(0);
        events.retain(|(at, _)| *at > now - secs(longest));
        events.push((now, (to - from).abs()));
    }
}

/// One sync's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The replica count the target should have.
    pub desired: i32,
    /// Why it differs from the current count (for the `SuccessfulRescale` event); `None` when
    /// it does not.
    pub reason: Option<String>,
    /// The status to write (before a rescale's outcome is added by [`rescaled`]).
    pub status: HorizontalPodAutoscalerStatus,
    /// Events to record.
    pub notes: Vec<Note>,
}

/// `seconds` as a span, for comparisons with timestamps.
pub(crate) fn secs(seconds: i32) -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(i64::from(seconds))
}

pub(crate) fn span(d: Duration) -> jiff::SignedDuration {
    jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX)
}

/// Sets condition `type_` in `status`, keeping its transition time when its status is unchanged.
pub fn set_condition(
    status: &mut HorizontalPodAutoscalerStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: impl Into<String>,
    now: Timestamp,
) {
    let value = if value { "True" } else { "False" };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let existing = conditions.iter_mut().find(|c| c.type_ == type_);
    let transition = match &existing {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    let condition = HorizontalPodAutoscalerCondition {
        type_: type_.into(),
        status: value.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: transition,
    };
    match existing {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// The condition types the controller keeps.
pub mod conditions {
    /// Whether the target's scale can be read and written now.
    pub const ABLE_TO_SCALE: &str = "AbleToScale";
    /// Whether a replica count could be worked out from the metrics.
    pub const SCALING_ACTIVE: &str = "ScalingActive";
    /// Whether the count wanted was cut to the bounds or the rate.
    pub const SCALING_LIMITED: &str = "ScalingLimited";
}
use conditions::{ABLE_TO_SCALE, SCALING_ACTIVE};

/// The status before this sync's findings: the stored one, or an empty one.
fn base_status(hpa: &HorizontalPodAutoscaler) -> HorizontalPodAutoscalerStatus {
    let mut status = hpa.status.clone().unwrap_or_default();
    status.observed_generation = hpa.metadata.generation;
    status
}

/// The outcome when the target's scale could not be read: nothing is scaled.
pub fn scale_unreadable(hpa: &HorizontalPodAutoscaler, error: &str, now: Timestamp) -> Decision {
    let mut status = base_status(hpa);
    let message =
        format!("the HPA controller was unable to get the target's current scale: {error}");
    set_condition(
        &mut status,
        ABLE_TO_SCALE,
        false,
        "FailedGetScale",
        &message,
        now,
    );
    Decision {
        desired: status.desired_replicas,
        reason: None,
        status,
        notes: vec![Note::warning("FailedGetScale", error)],
    }
}

/// Adds the outcome of scaling the target to `desired` to `decision`: success sets
/// `lastScaleTime` and records `SuccessfulRescale`; a failure records `FailedRescale` and keeps
/// the current count.
pub fn rescaled(
    decision: &mut Decision,
    current: i32,
    outcome: Result<(), String>,
    now: Timestamp,
) {
    let reason = decision.reason.clone().unwrap_or_default();
    match outcome {
        Ok(()) => {
            set_condition(
                &mut decision.status,
                ABLE_TO_SCALE,
                true,
                "SucceededRescale",
                format!(
                    "the HPA controller was able to update the target scale to {}",
                    decision.desired
                ),
                now,
            );
            decision.status.last_scale_time = Some(Time(now));
            decision.notes.push(Note::normal(
                "SuccessfulRescale",
                format!("New size: {}; reason: {reason}", decision.desired),
            ));
        }
        Err(error) => {
            set_condition(
                &mut decision.status,
                ABLE_TO_SCALE,
                false,
                "FailedUpdateScale",
                format!("the HPA controller was unable to update the target scale: {error}"),
                now,
            );
            decision.notes.push(Note::warning(
                "FailedRescale",
                format!(
                    "New size: {}; reason: {reason}; error: {error}",
                    decision.desired
                ),
            ));
            decision.desired = current;
            decision.status.desired_replicas = current;
        }
    }
}

/// What the target's scale subresource says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetScale {
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.replicas`, what per-replica values of `Object` and `External` metrics divide by.
    pub status_replicas: i32,
    /// `status.selector`, the pods that count.
    pub selector: Option<String>,
}

/// One sync: the replicas `hpa`'s target should have, given its scale, its pods (those of the
/// namespace that its selector picks) and what the metrics APIs say of them.
pub fn decide(
    hpa: &HorizontalPodAutoscaler,
    scale: &TargetScale,
    pods: &[&Pod],
    measured: &Measured,
    history: &mut History,
    tunables: &Tunables,
    now: Timestamp,
) -> Decision {
    let spec = hpa.spec.clone().unwrap_or_default();
    let mut status = base_status(hpa);
    let mut notes = Vec::new();
    set_condition(
        &mut status,
        ABLE_TO_SCALE,
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
        now,
    );
    let current = scale.replicas;
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let mut reason = None;
    let desired;
    if current == 0 && min != 0 {
        set_condition(
            &mut status,
            SCALING_ACTIVE,
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero",
            now,
        );
        desired = 0;
        status.current_metrics = None;
    } else if current > max {
        reason = Some("Current number of replicas above Spec.MaxReplicas".to_string());
        desired = max;
    } else if current < min {
        reason = Some("Current number of replicas below Spec.MinReplicas".to_string());
        desired = min;
    } else {
        let metrics = spec.metrics.clone().unwrap_or_default();
        let outcome = across_metrics(&metrics, scale, pods, measured, current, tunables, now);
        status.current_metrics = Some(outcome.statuses);
        match outcome.result {
            Err(failure) => {
                set_condition(
                    &mut status,
                    SCALING_ACTIVE,
                    false,
                    failure.reason,
                    format!(
                        "the HPA was unable to compute the replica count: {}",
                        failure.message
                    ),
                    now,
                );
                notes.extend(outcome.notes);
                notes.push(Note::warning(
                    "FailedComputeMetricsReplicas",
                    format!(
                        "failed to compute desired number of replicas based on listed metrics for {}: {}",
                        target_name(hpa),
                        failure.summary
                    ),
                ));
                status.current_replicas = Some(current);
                return Decision {
                    desired: status.desired_replicas,
                    reason: None,
                    status,
                    notes,
                };
            }
            Ok((proposal, metric_name)) => {
                notes.extend(outcome.notes);
                set_condition(
                    &mut status,
                    SCALING_ACTIVE,
                    true,
                    "ValidMetricFound",
                    format!(
                        "the HPA was able to successfully calculate a replica count from {metric_name}"
                    ),
                    now,
                );
                if proposal > current {
                    reason = Some(format!("{metric_name} above target"));
                } else if proposal < current {
                    reason = Some("All metrics below target".to_string());
                }
                desired = normalize(
                    hpa,
                    proposal,
                    current,
                    min,
                    max,
                    history,
                    tunables,
                    &mut status,
                    now,
                );
            }
        }
    }
    if desired == current {
        reason = None;
    }
    status.current_replicas = Some(current);
    status.desired_replicas = desired;
    Decision {
        desired,
        reason,
        status,
        notes,
    }
}

/// `Kind/name` of the target, as events name it.
fn target_name(hpa: &HorizontalPodAutoscaler) -> String {
    let target = hpa
        .spec
        .as_ref()
        .map(|s| s.scale_target_ref.clone())
        .unwrap_or_default();
    format!("{}/{}", target.kind, target.name)
}

/// Why a metric gave no proposal.
#[derive(Clone, Debug, PartialEq)]
struct Failure {
    /// The `ScalingActive` reason (`FailedGetResourceMetric`).
    reason: &'static str,
    /// What went wrong.
    message: String,
    /// The message of the whole computation (`invalid metrics (1 invalid out of 1), ...`).
    summary: String,
}

struct AcrossMetrics {
    result: Result<(i32, String), Failure>,
    statuses: Vec<MetricStatus>,
    notes: Vec<Note>,
}

/// The largest proposal of the metrics, and each metric's current value in spec order (an
/// empty entry for one that failed, as Kubernetes writes it).
fn across_metrics(
    metrics: &[MetricSpec],
    scale: &TargetScale,
    pods: &[&Pod],
    measured: &Measured,
    current: i32,
    tunables: &Tunables,
    now: Timestamp,
) -> AcrossMetrics {
    let mut statuses = vec![MetricStatus::default(); metrics.len()];
    let mut notes = Vec::new();
    let mut best: Option<(i32, String)> = None;
    let mut invalid = 0;
    let mut first: Option<(&'static str, String)> = None;
    let custom = Custom {
        scale,
        pods,
        current,
        tunables,
        now,
    };
    for (i, metric) in metrics.iter().enumerate() {
        let outcome = match metric.type_.as_str() {
            "Pods" => custom.pods(metric, measured.custom.get(&i)),
            "Object" => custom.object(metric, measured.custom.get(&i)),
            "External" => custom.external(metric, measured.custom.get(&i)),
            _ => resource_metric(
                metric,
                scale,
                pods,
                &measured.resources,
                current,
                tunables,
                now,
            ),
        };
        match outcome {
            Ok((replicas, name, metric_status)) => {
                statuses[i] = metric_status;
                if best.as_ref().is_none_or(|(b, _)| replicas > *b) {
                    best = Some((replicas, name));
                }
            }
            Err((reason, message)) => {
                invalid += 1;
                notes.push(Note::warning(reason, message.clone()));
                first.get_or_insert((reason, message));
            }
        }
    }
    let result = match (best, first) {
        (Some(best), None) => Ok(best),
        // Some failed: scale up on the others, but never down on a partial view.
        (Some(best), Some(_)) if best.0 > current => Ok(best),
        (_, first) => {
            let (reason, message) = first.unwrap_or((
                "InvalidMetricSourceType",
                "no metrics to compute a replica count from".into(),
            ));
            Err(Failure {
                reason,
                summary: format!(
                    "invalid metrics ({invalid} invalid out of {}), first error is: {message}",
                    metrics.len()
                ),
                message,
            })
        }
    };
    AcrossMetrics {
        result,
        statuses,
        notes,
    }
}

/// A metric's proposal, its name in messages and its current value; or why it has none (the
/// `ScalingActive` reason and the message).
type MetricOutcome = Result<(i32, String, MetricStatus), (&'static str, String)>;

/// A resource metric's proposal, its name in messages, and its current value.
fn resource_metric(
    metric: &MetricSpec,
    scale: &TargetScale,
    pods: &[&Pod],
    usage: &Usage,
    current: i32,
    tunables: &Tunables,
    now: Timestamp,
) -> MetricOutcome {
    let (resource, container, target) = match (metric.type_.as_str(), metric) {
        (
            "Resource",
            MetricSpec {
                resource: Some(r), ..
            },
        ) => (r.name.as_str(), None, &r.target),
        (
            "ContainerResource",
            MetricSpec {
                container_resource: Some(r),
                ..
            },
        ) => (r.name.as_str(), Some(r.container.as_str()), &r.target),
        (other, _) => {
            return Err((
                "InvalidMetricSourceType",
                format!("unknown metric source type {other:?}"),
            ));
        }
    };
    let failed_reason = if container.is_some() {
        "FailedGetContainerResourceMetric"
    } else {
        "FailedGetResourceMetric"
    };
    if scale.selector.as_deref().is_none_or(str::is_empty) {
        return Err(("InvalidSelector", "selector is required".to_string()));
    }
    let what = |utilization: bool| {
        let kind = if container.is_some() {
            "container resource"
        } else {
            "resource"
        };
        if utilization {
            format!("{resource} {kind} utilization (percentage of request)")
        } else {
            format!("{resource} {kind}")
        }
    };
    let usage = match usage {
        Ok(usage) => usage,
        Err(e) => {
            let message = match target.average_utilization {
                Some(_) => format!(
                    "failed to get {resource} utilization: unable to get metrics for resource {resource}: {e}"
                ),
                None => format!(
                    "failed to get {resource} usage: unable to get metrics for resource {resource}: {e}"
                ),
            };
            return Err((failed_reason, message));
        }
    };
    let samples = samples(usage, resource, container);
    let utilization_target = target
        .average_utilization
        .filter(|_| target.average_value.is_none());
    let calc = ResourceCalc {
        resource,
        container,
        current,
        tunables,
        now,
    };
    let result = match utilization_target {
        Some(percent) => calc.utilization(pods, samples, percent),
        None => {
            let Some(avg) = target.average_value.as_ref().and_then(milli) else {
                return Err((
                    failed_reason,
                    format!(
                        "invalid target for {resource}: neither a utilization nor an average value"
                    ),
                ));
            };
            calc.average(pods, samples, avg)
        }
    };
    let (replicas, value) = result.map_err(|e| {
        let verb = if utilization_target.is_some() {
            "utilization"
        } else {
            "usage"
        };
        (
            failed_reason,
            format!("failed to get {resource} {verb}: {e}"),
        )
    })?;
    let current_value = MetricValueStatus {
        average_utilization: value.utilization,
        average_value: Some(quantity_of(value.average_milli)),
        value: None,
    };
    let status = match container {
        None => MetricStatus {
            type_: "Resource".into(),
            resource: Some(v2::ResourceMetricStatus {
                name: resource.into(),
                current: current_value,
            }),
            ..Default::default()
        },
        Some(container) => MetricStatus {
            type_: "ContainerResource".into(),
            container_resource: Some(v2::ContainerResourceMetricStatus {
                name: resource.into(),
                container: container.into(),
                current: current_value,
            }),
            ..Default::default()
        },
    };
    Ok((replicas, what(utilization_target.is_some()), status))
}

/// Whether `new` differs from `old` in what a status write would change.
pub fn status_changed(
    old: Option<&HorizontalPodAutoscalerStatus>,
    new: &HorizontalPodAutoscalerStatus,
) -> bool {
    old != Some(new)
}

#[cfg(test)]
mod tests;

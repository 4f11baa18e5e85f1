//! The disruption controller's decision (kube-controller-manager's `disruption` controller):
//! a PodDisruptionBudget's status from the pods it selects and the scale of their controllers.
//!
//! - `expectedPods` and `desiredHealthy`: with `maxUnavailable` (or a percentage
//!   `minAvailable`), the expected count is the sum of the scales of the pods' controllers
//!   (a Deployment's replicas for pods of its ReplicaSets, a ReplicaSet's, a
//!   ReplicationController's, a StatefulSet's) and the desired count follows from it, a
//!   percentage rounded up; with an integer `minAvailable`, the expected count is the pods
//!   selected. Pods without a controller are left out of the scale (their names are returned).
//! - `currentHealthy`: the selected pods that are Ready, not being deleted, and not recorded in
//!   `disruptedPods` (an eviction that is still deleting them).
//! - `disruptedPods`: an eviction's entry stays until its pod is gone or being deleted, or two
//!   minutes have passed (the pod was not deleted after all), whichever is first.
//! - `disruptionsAllowed`: `currentHealthy - desiredHealthy`, never below 0, and 0 when no pods
//!   are expected or the counts cannot be worked out (a pod whose controller is unknown); the
//!   `DisruptionAllowed` condition says which (`SufficientPods`, `InsufficientPods`,
//!   `SyncFailed`).

pub mod controller;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use skiff_meta::labels::Selector;

use crate::pods::{controller_of, is_ready};

/// How long an eviction's entry in `disruptedPods` waits for its pod to go.
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);

/// The condition the controller keeps.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";

/// The scale of a pod's controller, found by the shell in its caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    /// The UID of the object whose replicas count (a Deployment for its ReplicaSets' pods).
    pub uid: String,
    /// Its desired replicas.
    pub replicas: i32,
}

/// What the decision needs to know of the world besides the budget and its pods.
pub trait Scales {
    /// The scale behind the controller `owner` of a pod in `namespace`, if the controller is
    /// known.
    fn scale_of(&self, namespace: &str, owner: &OwnerReference) -> Option<Scale>;
}

/// The pods of `pods` that `budget` selects (none without a selector; every pod of the namespace
/// with an empty one).
pub fn selected<'a>(budget: &PodDisruptionBudget, pods: &'a [&'a Pod]) -> Vec<&'a Pod> {
    let spec = budget.spec.as_ref();
    let Ok(selector) =
        Selector::from_optional_label_selector(spec.and_then(|s| s.selector.as_ref()))
    else {
        return Vec::new();
    };
    let namespace = budget.metadata.namespace.as_deref();
    pods.iter()
        .copied()
        .filter(|p| p.metadata.namespace.as_deref() == namespace)
        .filter(|p| selector.matches(crate::pods::labels(&p.metadata)))
        .collect()
}

/// The expected and desired counts, and the pods without a controller.
fn counts(
    budget: &PodDisruptionBudget,
    pods: &[&Pod],
    scales: &dyn Scales,
) -> Result<(i32, i32, Vec<String>), String> {
    let spec = budget.spec.clone().unwrap_or_default();
    let scale = || expected_scale(pods, scales);
    if let Some(max) = &spec.max_unavailable {
        let (expected, unmanaged) = scale()?;
        let max = scaled(max, expected)?;
        return Ok((expected, (expected - max).max(0), unmanaged));
    }
    match &spec.min_available {
        Some(IntOrString::Int(n)) => Ok((len(pods), *n, Vec::new())),
        Some(min @ IntOrString::String(_)) => {
            let (expected, unmanaged) = scale()?;
            let desired = scaled(min, expected)?;
            Ok((expected, desired, unmanaged))
        }
        None => Ok((0, 0, Vec::new())),
    }
}

/// `value` against `total`, a percentage rounded up.
fn scaled(value: &IntOrString, total: i32) -> Result<i32, String> {
    crate::deployment::scaled_value(value, total, true)
        .ok_or_else(|| format!("invalid value for IntOrString: {value:?}"))
}

fn len(pods: &[&Pod]) -> i32 {
    i32::try_from(pods.len()).unwrap_or(i32::MAX)
}

/// The sum of the scales of the pods' controllers, each counted once, and the pods that have no
/// controller.
fn expected_scale(pods: &[&Pod], scales: &dyn Scales) -> Result<(i32, Vec<String>), String> {
    let mut seen = HashSet::new();
    let mut expected = 0i32;
    let mut unmanaged = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(owner) = controller_of(&pod.metadata) else {
            unmanaged.push(name);
            continue;
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let scale = scales
            .scale_of(namespace, owner)
            .ok_or_else(|| format!("found no controllers for pod {name:?}"))?;
        if seen.insert(scale.uid) {
            expected = expected.saturating_add(scale.replicas);
        }
    }
    Ok((expected, unmanaged))
}

/// The decision: the budget's new status, and when to look again (an entry of `disruptedPods`
/// expiring).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The status to write (when it differs from the current one).
    pub status: PodDisruptionBudgetStatus,
    /// Look again after this long.
    pub recheck: Option<Duration>,
    /// Selected pods without a controller (left out of the scale), for an event.
    pub unmanaged: Vec<String>,
}

/// The status of `budget` given every pod of its namespace.
pub fn decide(
    budget: &PodDisruptionBudget,
    pods: &[&Pod],
    scales: &dyn Scales,
    now: Timestamp,
) -> Decision {
    let old = budget.status.clone().unwrap_or_default();
    let pods = selected(budget, pods);
    let (disrupted, recheck) = disrupted_pods(&old, &pods, now);
    let current = len(&pods
        .iter()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or_default()))
        .filter(|p| is_ready(p))
        .collect::<Vec<_>>());
    let generation = budget.metadata.generation;
    let mut status = PodDisruptionBudgetStatus {
        observed_generation: generation,
        current_healthy: current,
        disrupted_pods: (!disrupted.is_empty()).then(|| {
            disrupted
                .into_iter()
                .map(|(name, at)| (name, Time(at)))
                .collect()
        }),
        ..PodDisruptionBudgetStatus::default()
    };
    let (condition, unmanaged) = match counts(budget, &pods, scales) {
        Ok((expected, desired, unmanaged)) => {
            status.expected_pods = expected;
            status.desired_healthy = desired;
            status.disruptions_allowed = if expected <= 0 {
                0
            } else {
                (current - desired).max(0)
            };
            let condition = if status.disruptions_allowed > 0 {
                ("True", "SufficientPods", String::new())
            } else {
                ("False", "InsufficientPods", String::new())
            };
            (condition, unmanaged)
        }
        Err(why) => {
            status.expected_pods = old.expected_pods;
            status.desired_healthy = old.desired_healthy;
            (("False", "SyncFailed", why), Vec::new())
        }
    };
    status.conditions = Some(vec![keep_transition(
        old.conditions.as_deref(),
        Condition {
            type_: DISRUPTION_ALLOWED.into(),
            status: condition.0.into(),
            reason: condition.1.into(),
            message: condition.2,
            observed_generation: generation,
            last_transition_time: Time(now),
        },
    )]);
    Decision {
        status,
        recheck,
        unmanaged,
    }
}

/// `new`, keeping the old condition's transition time when its status did not change.
fn keep_transition(old: Option<&[Condition]>, mut new: Condition) -> Condition {
    if let Some(old) = old
        .into_iter()
        .flatten()
        .find(|c| c.type_ == new.type_ && c.status == new.status)
    {
        new.last_transition_time = old.last_transition_time.clone();
    }
    new
}

/// The entries of `disruptedPods` that still stand: pods that exist, are not being deleted yet,
/// and were evicted less than [`DELETION_TIMEOUT`] ago; and when the first of them expires.
fn disrupted_pods(
    old: &PodDisruptionBudgetStatus,
    pods: &[&Pod],
    now: Timestamp,
) -> (BTreeMap<String, Timestamp>, Option<Duration>) {
    let mut kept = BTreeMap::new();
    let mut recheck: Option<Duration> = None;
    let Some(entries) = &old.disrupted_pods else {
        return (kept, None);
    };
    for (name, at) in entries {
        let Some(pod) = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
        else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let age = now.duration_since(at.0);
        let left = jiff::SignedDuration::try_from(DELETION_TIMEOUT).unwrap_or_default() - age;
        if left.is_negative() || left.is_zero() {
            continue;
        }
        let left = Duration::try_from(left).unwrap_or_default();
        recheck = Some(recheck.map_or(left, |r| r.min(left)));
        kept.insert(name.clone(), at.0);
    }
    (kept, recheck)
}

/// Whether `new` says something `old` does not (transition times aside).
pub fn status_changed(
    old: Option<&PodDisruptionBudgetStatus>,
    new: &PodDisruptionBudgetStatus,
) -> bool {
    old != Some(new)
}

#[cfg(test)]
mod tests;

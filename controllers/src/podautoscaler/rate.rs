//! The proposal held to stabilization windows, scale-rate limits and bounds: without
//! `behavior` as kube-controller-manager's defaults do, with it by its rules and policies.

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::{
    HPAScalingRules, HorizontalPodAutoscaler, HorizontalPodAutoscalerStatus,
};

use super::conditions::{ABLE_TO_SCALE, SCALING_LIMITED};
use super::{History, Tunables, secs, set_condition, span};

/// How far up a step may go without `behavior`: twice the current count, or 4.
fn scale_up_limit(current: i32) -> i32 {
    (2 * current).max(4)
}

/// The proposal held to the stabilization windows, the rate limits and the bounds; sets
/// `AbleToScale` and `ScalingLimited`.
#[allow(clippy::too_many_arguments)]
pub(super) fn normalize(
    hpa: &HorizontalPodAutoscaler,
    proposal: i32,
    current: i32,
    min: i32,
    max: i32,
    history: &mut History,
    tunables: &Tunables,
    status: &mut HorizontalPodAutoscalerStatus,
    now: Timestamp,
) -> i32 {
    let behavior = hpa.spec.as_ref().and_then(|s| s.behavior.as_ref());
    let (stabilized, stabilized_why) = match behavior {
        None => {
            let cutoff = now - span(tunables.downscale_stabilization);
            let highest = history
                .recommendations
                .iter()
                .filter(|(at, _)| *at >= cutoff)
                .map(|(_, r)| *r)
                .fold(proposal, i32::max);
            history.recommendations.retain(|(at, _)| *at >= cutoff);
            history.recommendations.push((now, proposal));
            (
                highest,
                (
                    "ScaleDownStabilized",
                    "recent recommendations were higher than current one, applying the highest recent recommendation",
                ),
            )
        }
        Some(behavior) => {
            let up = behavior.scale_up.clone().unwrap_or_default();
            let mut down = behavior.scale_down.clone().unwrap_or_default();
            down.stabilization_window_seconds.get_or_insert(
                i32::try_from(tunables.downscale_stabilization.as_secs()).unwrap_or(i32::MAX),
            );
            let up_cutoff = now - secs(up.stabilization_window_seconds.unwrap_or(0));
            let down_cutoff = now - secs(down.stabilization_window_seconds.unwrap_or(0));
            let (mut up_rec, mut down_rec) = (proposal, proposal);
            for (at, r) in &history.recommendations {
                if *at > up_cutoff {
                    up_rec = up_rec.min(*r);
                }
                if *at > down_cutoff {
                    down_rec = down_rec.max(*r);
                }
            }
            let oldest = up_cutoff.min(down_cutoff);
            history.recommendations.retain(|(at, _)| *at >= oldest);
            history.recommendations.push((now, proposal));
            let stabilized = current.max(up_rec).min(down_rec);
            let why = if proposal >= current {
                (
                    "ScaleUpStabilized",
                    "recent recommendations were lower than current one, applying the lowest recent recommendation",
                )
            } else {
                (
                    "ScaleDownStabilized",
                    "recent recommendations were higher than current one, applying the highest recent recommendation",
                )
            };
            (stabilized, why)
        }
    };
    if stabilized != proposal {
        set_condition(
            status,
            ABLE_TO_SCALE,
            true,
            stabilized_why.0,
            stabilized_why.1,
            now,
        );
    } else {
        set_condition(
            status,
            ABLE_TO_SCALE,
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
            now,
        );
    }
    let (desired, reason, message) = match behavior {
        None => limit_without_behavior(stabilized, current, min, max),
        Some(behavior) => limit_with_behavior(
            stabilized,
            current,
            min,
            max,
            behavior.scale_up.as_ref(),
            behavior.scale_down.as_ref(),
            history,
            now,
        ),
    };
    set_condition(
        status,
        SCALING_LIMITED,
        desired != stabilized,
        reason,
        message,
        now,
    );
    desired
}

const WITHIN_RANGE: (&str, &str) = (
    "DesiredWithinRange",
    "the desired count is within the acceptable range",
);
const TOO_FEW: (&str, &str) = (
    "TooFewReplicas",
    "the desired replica count is less than the minimum replica count",
);
const TOO_MANY: (&str, &str) = (
    "TooManyReplicas",
    "the desired replica count is more than the maximum replica count",
);
const UP_LIMIT: (&str, &str) = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
);
const DOWN_LIMIT: (&str, &str) = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
);

fn limit_without_behavior(
    desired: i32,
    current: i32,
    min: i32,
    max: i32,
) -> (i32, &'static str, &'static str) {
    let up_limit = scale_up_limit(current);
    let (ceiling, why) = if max > up_limit {
        (up_limit, UP_LIMIT)
    } else {
        (max, TOO_MANY)
    };
    if desired < min {
        (min, TOO_FEW.0, TOO_FEW.1)
    } else if desired > ceiling {
        (ceiling, why.0, why.1)
    } else {
        (desired, WITHIN_RANGE.0, WITHIN_RANGE.1)
    }
}

/// The replicas added (or removed) by the events of the last `period` seconds.
fn changed_in(events: &[(Timestamp, i32)], period: i32, now: Timestamp) -> i32 {
    events
        .iter()
        .filter(|(at, _)| *at > now - secs(period))
        .map(|(_, n)| n)
        .sum()
}

/// The furthest a step may go in one direction by `rules`' policies: `up` proposes counts above
/// the count at each period's start, down below it; `Max` picks the policy that allows the most
/// change, `Min` the least, `Disabled` none.
fn policy_limit(
    rules: &HPAScalingRules,
    current: i32,
    history: &History,
    up: bool,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    let most_change = select != "Min";
    let mut limit: Option<i32> = None;
    for policy in rules.policies.as_deref().unwrap_or_default() {
        let added = changed_in(&history.scale_ups, policy.period_seconds, now);
        let removed = changed_in(&history.scale_downs, policy.period_seconds, now);
        let start = f64::from(current - added + removed);
        let value = f64::from(policy.value);
        let proposed = match (policy.type_.as_str(), up) {
            ("Pods", true) => start + value,
            ("Pods", false) => start - value,
            (_, true) => (start * (1.0 + value / 100.0)).ceil(),
            (_, false) => (start * (1.0 - value / 100.0)).trunc(),
        } as i32;
        // Up: the most change is the highest count; down, the lowest.
        let pick_high = up == most_change;
        limit = Some(match limit {
            None => proposed,
            Some(l) if pick_high => l.max(proposed),
            Some(l) => l.min(proposed),
        });
    }
    limit.unwrap_or(current)
}

#[allow(clippy::too_many_arguments)]
fn limit_with_behavior(
    desired: i32,
    current: i32,
    min: i32,
    max: i32,
    up: Option<&HPAScalingRules>,
    down: Option<&HPAScalingRules>,
    history: &History,
    now: Timestamp,
) -> (i32, &'static str, &'static str) {
    if desired > current {
        let limit = up
            .map_or(max, |r| policy_limit(r, current, history, true, now))
            .max(current);
        let (ceiling, why) = if max > limit {
            (limit, UP_LIMIT)
        } else {
            (max, TOO_MANY)
        };
        if desired > ceiling {
            return (ceiling, why.0, why.1);
        }
    } else if desired < current {
        let limit = down
            .map_or(min, |r| policy_limit(r, current, history, false, now))
            .min(current);
        let (floor, why) = if min < limit {
            (limit, DOWN_LIMIT)
        } else {
            (min, TOO_FEW)
        };
        if desired < floor {
            return (floor, why.0, why.1);
        }
    }
    (desired, WITHIN_RANGE.0, WITHIN_RANGE.1)
}

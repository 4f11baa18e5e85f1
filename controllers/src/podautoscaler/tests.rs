use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use serde_json::json;

use super::custom::{Query, Reading};
use super::*;
use crate::pods::testing::{at, pod, running};

/// An autoscaler of Deployment `web` with `spec` merged over min 1, max 10 and CPU at 50%.
fn hpa(spec: serde_json::Value) -> HorizontalPodAutoscaler {
    let mut base = json!({
        "metadata": {"name": "web", "namespace": "ns", "generation": 3},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 1, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                              "target": {"type": "Utilization", "averageUtilization": 50}}}]}});
    for (k, v) in spec.as_object().unwrap() {
        base["spec"][k] = v.clone();
    }
    serde_json::from_value(base).unwrap()
}

/// A running pod, ready since long before the CPU initialization period, requesting `cpu_m`
/// millicores and `mem_mi` MiB in its one container `c`.
fn web_pod(name: &str, cpu_m: i64, mem_mi: i64) -> Pod {
    let mut p = running(pod(name, &[("app", "web")], 0), "n1", "127.0.0.2", Some(5));
    p.spec.as_mut().unwrap().containers = vec![Container {
        name: "c".into(),
        resources: Some(ResourceRequirements {
            requests: Some(
                [
                    ("cpu".to_string(), Quantity(format!("{cpu_m}m"))),
                    ("memory".to_string(), Quantity(format!("{mem_mi}Mi"))),
                ]
                .into(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }];
    p.status.as_mut().unwrap().start_time = Some(Time(at(0)));
    p
}

/// Usage of the pods named, `(name, cpu millicores, memory MiB)`, measured at `now`.
fn usage(pods: &[(&str, i64, i64)], now: Timestamp) -> Usage {
    Ok(pods
        .iter()
        .map(|(name, cpu, mem)| {
            (
                name.to_string(),
                PodUsage {
                    timestamp: now,
                    window: Duration::from_secs(10),
                    containers: [(
                        "c".to_string(),
                        [
                            ("cpu".to_string(), cpu * 1000 / 1000),
                            ("memory".to_string(), mem * 1024 * 1024 * 1000),
                        ]
                        .into(),
                    )]
                    .into(),
                },
            )
        })
        .collect())
}

fn scale(replicas: i32) -> TargetScale {
    TargetScale {
        replicas,
        status_replicas: replicas,
        selector: Some("app=web".into()),
    }
}

/// A sync well after the pods started (an hour after the fixtures' epoch, plus `s`).
fn now(s: i64) -> Timestamp {
    at(3600 + s)
}

fn condition<'a>(decision: &'a Decision, type_: &str) -> &'a HorizontalPodAutoscalerCondition {
    decision
        .status
        .conditions
        .as_ref()
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .unwrap_or_else(|| panic!("no {type_} in {:?}", decision.status))
}

fn run(
    hpa: &HorizontalPodAutoscaler,
    current: i32,
    pods: &[Pod],
    usage: &Usage,
    history: &mut History,
    t: Timestamp,
) -> Decision {
    let refs: Vec<&Pod> = pods.iter().collect();
    decide(
        hpa,
        &scale(current),
        &refs,
        &Measured::from(usage.clone()),
        history,
        &Tunables::default(),
        t,
    )
}

#[test]
fn busy_pods_scale_up_as_fast_as_the_default_rate_allows() {
    let hpa = hpa(json!({}));
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64)];
    let t = now(0);
    let d = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 180, 10), ("b", 180, 10)], t),
        &mut History::default(),
        t,
    );
    // 180% of requests against 50%: 3.6 x 2 pods = 8, but a step is at most max(2 x 2, 4).
    assert_eq!(d.desired, 4);
    assert_eq!(
        d.reason.as_deref(),
        Some("cpu resource utilization (percentage of request) above target")
    );
    let limited = condition(&d, "ScalingLimited");
    assert_eq!(
        (limited.status.as_str(), limited.reason.as_deref()),
        ("True", Some("ScaleUpLimit"))
    );
    let active = condition(&d, "ScalingActive");
    assert_eq!(active.reason.as_deref(), Some("ValidMetricFound"));
    let current = d.status.current_metrics.as_ref().unwrap()[0]
        .resource
        .as_ref()
        .unwrap();
    assert_eq!(current.current.average_utilization, Some(180));
    assert_eq!(current.current.average_value, Some(Quantity("180m".into())));
    assert_eq!(
        (d.status.current_replicas, d.status.desired_replicas),
        (Some(2), 4)
    );
    assert_eq!(d.status.observed_generation, Some(3));
}

#[test]
fn usage_within_the_tolerance_changes_nothing() {
    let hpa = hpa(json!({}));
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64)];
    let t = now(0);
    let d = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 54, 10), ("b", 54, 10)], t),
        &mut History::default(),
        t,
    );
    assert_eq!((d.desired, d.reason.as_deref()), (2, None));
    let d = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 56, 10), ("b", 56, 10)], t),
        &mut History::default(),
        t,
    );
    assert_eq!(d.desired, 3, "56% against 50% is past the 10% tolerance");
}

#[test]
fn without_behavior_the_highest_recommendation_of_five_minutes_holds_on_the_way_down() {
    let hpa = hpa(json!({}));
    let pods: Vec<Pod> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| web_pod(n, 100, 64))
        .collect();
    let mut history = History::default();
    let busy = |t| usage(&[("a", 50, 1), ("b", 50, 1), ("c", 50, 1), ("d", 50, 1)], t);
    let idle = |t| usage(&[("a", 5, 1), ("b", 5, 1), ("c", 5, 1), ("d", 5, 1)], t);
    let d = run(&hpa, 4, &pods, &busy(now(0)), &mut history, now(0));
    assert_eq!(d.desired, 4);
    let d = run(&hpa, 4, &pods, &idle(now(60)), &mut history, now(60));
    assert_eq!((d.desired, d.reason.as_deref()), (4, None));
    let able = condition(&d, "AbleToScale");
    assert_eq!(able.reason.as_deref(), Some("ScaleDownStabilized"));
    let d = run(&hpa, 4, &pods, &idle(now(301)), &mut history, now(301));
    // 10% of requests against 50%: 0.2 x 4 = 1 (the idle recommendation of t=60 is the highest
    // left in the window).
    assert_eq!(
        (d.desired, d.reason.as_deref()),
        (1, Some("All metrics below target"))
    );
}

#[test]
fn missing_pods_count_as_fully_used_on_the_way_down() {
    let hpa = hpa(json!({}));
    let pods: Vec<Pod> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| web_pod(n, 100, 64))
        .collect();
    let t = now(0);
    let measured = usage(&[("a", 10, 1), ("b", 10, 1), ("c", 10, 1)], t);
    let d = run(&hpa, 4, &pods, &measured, &mut History::default(), t);
    // Without d: 0.2 x 3 = 1. With d at 100%: 130/400 = 32% -> 0.64 x 4 = 3.
    assert_eq!(d.desired, 3);
}

#[test]
fn unready_pods_count_as_idle_on_the_way_up() {
    let hpa = hpa(json!({}));
    let mut pending = web_pod("c", 100, 64);
    pending.status.as_mut().unwrap().phase = Some("Pending".into());
    let mut starting = web_pod("d", 100, 64);
    starting
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    let pods = [
        web_pod("a", 100, 64),
        web_pod("b", 100, 64),
        pending,
        starting,
    ];
    let t = now(0);
    let d = run(
        &hpa,
        4,
        &pods,
        &usage(&[("a", 100, 1), ("b", 100, 1), ("d", 300, 1)], t),
        &mut History::default(),
        t,
    );
    // a and b at 200% of target, but with c and d at 0: 200/400 = 50%, on target.
    assert_eq!((d.desired, d.reason.as_deref()), (4, None));
}

#[test]
fn a_fresh_pods_cpu_counts_only_a_window_after_it_became_ready() {
    let hpa = hpa(json!({}));
    let mut fresh = web_pod("b", 100, 64);
    let started = now(0);
    fresh.status.as_mut().unwrap().start_time = Some(Time(started));
    fresh.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
        Some(Time(started + jiff::SignedDuration::from_secs(5)));
    let pods = [web_pod("a", 100, 64), fresh];
    // Measured 8 s after it became ready with a 10 s window: not yet a whole window of it.
    let t = now(13);
    let d = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 50, 1), ("b", 400, 1)], t),
        &mut History::default(),
        t,
    );
    assert_eq!(d.desired, 2, "{:?}", d.status);
    let t = now(16);
    let d = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 50, 1), ("b", 400, 1)], t),
        &mut History::default(),
        t,
    );
    assert_eq!(d.desired, 4);
}

#[test]
fn memory_by_average_value() {
    let hpa = hpa(
        json!({"metrics": [{"type": "Resource", "resource": {"name": "memory",
                                      "target": {"type": "AverageValue", "averageValue": "100Mi"}}}]}),
    );
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64)];
    let t = now(0);
    let d = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 1, 200), ("b", 1, 200)], t),
        &mut History::default(),
        t,
    );
    assert_eq!(d.desired, 4);
    assert_eq!(d.reason.as_deref(), Some("memory resource above target"));
    let current = d.status.current_metrics.as_ref().unwrap()[0]
        .resource
        .as_ref()
        .unwrap();
    // In decimal units, as Kubernetes writes a milli-quantity of bytes.
    assert_eq!(
        current.current.average_value,
        Some(Quantity("209715200".into()))
    );
    assert_eq!(current.current.average_utilization, None);
}

#[test]
fn behavior_policies_limit_each_step_by_what_their_period_already_did() {
    let hpa = hpa(json!({"behavior": {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
        "scaleDown": {"stabilizationWindowSeconds": 30, "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}]}}}));
    let pods: Vec<Pod> = (0..8).map(|i| web_pod(&format!("p{i}"), 100, 64)).collect();
    let busy = |n: usize, t| {
        let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
        usage(
            &names
                .iter()
                .map(|n| (n.as_str(), 200, 1))
                .collect::<Vec<_>>(),
            t,
        )
    };
    let mut history = History::default();
    let d = run(&hpa, 2, &pods[..2], &busy(2, now(0)), &mut history, now(0));
    assert_eq!(d.desired, 3, "one pod per minute");
    assert_eq!(
        condition(&d, "ScalingLimited").reason.as_deref(),
        Some("ScaleUpLimit")
    );
    history.record_scale(&hpa, 2, 3, now(0));
    let d = run(
        &hpa,
        3,
        &pods[..3],
        &busy(3, now(15)),
        &mut history,
        now(15),
    );
    assert_eq!(d.desired, 3, "the minute's pod is spent");
    let d = run(
        &hpa,
        3,
        &pods[..3],
        &busy(3, now(61)),
        &mut history,
        now(61),
    );
    assert_eq!(d.desired, 4);
    history.record_scale(&hpa, 3, 4, now(61));

    // Idle: the 30 s window holds the busy recommendations, then 50% per 15 s.
    let idle = |t| usage(&[("p0", 1, 1), ("p1", 1, 1), ("p2", 1, 1), ("p3", 1, 1)], t);
    let d = run(&hpa, 4, &pods[..4], &idle(now(70)), &mut history, now(70));
    assert_eq!(d.desired, 4);
    assert_eq!(
        condition(&d, "AbleToScale").reason.as_deref(),
        Some("ScaleDownStabilized")
    );
    let d = run(&hpa, 4, &pods[..4], &idle(now(100)), &mut history, now(100));
    assert_eq!(d.desired, 2, "half of 4 at most");
    assert_eq!(
        condition(&d, "ScalingLimited").reason.as_deref(),
        Some("ScaleDownLimit")
    );
    history.record_scale(&hpa, 4, 2, now(100));
    let d = run(&hpa, 2, &pods[..2], &idle(now(105)), &mut history, now(105));
    assert_eq!(d.desired, 2, "the period's half is spent");
    let d = run(&hpa, 2, &pods[..2], &idle(now(116)), &mut history, now(116));
    assert_eq!(d.desired, 1);
}

#[test]
fn a_disabled_direction_never_moves() {
    let hpa = hpa(
        json!({"behavior": {"scaleDown": {"selectPolicy": "Disabled",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleUp": {"stabilizationWindowSeconds": 0,
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}}}),
    );
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64)];
    let t = now(0);
    let d = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 1, 1), ("b", 1, 1)], t),
        &mut History::default(),
        t,
    );
    assert_eq!(d.desired, 2);
}

#[test]
fn bounds_and_a_target_scaled_to_zero() {
    let hpa = hpa(json!({"minReplicas": 2, "maxReplicas": 5}));
    let pods = [web_pod("a", 100, 64)];
    let t = now(0);
    let u = usage(&[("a", 50, 1)], t);
    let d = run(&hpa, 7, &pods, &u, &mut History::default(), t);
    assert_eq!(
        (d.desired, d.reason.as_deref()),
        (5, Some("Current number of replicas above Spec.MaxReplicas"))
    );
    let d = run(&hpa, 1, &pods, &u, &mut History::default(), t);
    assert_eq!(
        (d.desired, d.reason.as_deref()),
        (2, Some("Current number of replicas below Spec.MinReplicas"))
    );
    let d = run(&hpa, 0, &pods, &u, &mut History::default(), t);
    assert_eq!((d.desired, d.reason.as_deref()), (0, None));
    let active = condition(&d, "ScalingActive");
    assert_eq!(
        (active.status.as_str(), active.reason.as_deref()),
        ("False", Some("ScalingDisabled"))
    );
}

#[test]
fn without_metrics_nothing_is_scaled_and_the_reason_is_said() {
    let hpa = hpa(json!({}));
    let pods = [web_pod("a", 100, 64)];
    let t = now(0);
    let d = run(
        &hpa,
        3,
        &pods,
        &Err("no metrics returned from resource metrics API".into()),
        &mut History::default(),
        t,
    );
    assert_eq!((d.desired, d.reason.as_deref()), (0, None));
    let active = condition(&d, "ScalingActive");
    assert_eq!(
        (
            active.status.as_str(),
            active.reason.as_deref(),
            active.message.as_deref()
        ),
        (
            "False",
            Some("FailedGetResourceMetric"),
            Some(
                "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API"
            )
        )
    );
    let reasons: Vec<&str> = d.notes.iter().map(|n| n.reason).collect();
    assert_eq!(
        reasons,
        ["FailedGetResourceMetric", "FailedComputeMetricsReplicas"]
    );
    assert!(d.notes[1].message.starts_with(
        "failed to compute desired number of replicas based on listed metrics for Deployment/web: invalid metrics (1 invalid out of 1)"
    ), "{}", d.notes[1].message);
    assert_eq!(d.status.current_replicas, Some(3));

    // A container without a CPU request cannot be measured against one.
    let mut bare = web_pod("a", 100, 64);
    bare.spec.as_mut().unwrap().containers[0].resources = None;
    let d = run(
        &hpa,
        1,
        &[bare],
        &usage(&[("a", 50, 1)], t),
        &mut History::default(),
        t,
    );
    assert!(
        d.notes[0]
            .message
            .contains("missing request for cpu in container c of Pod a"),
        "{:?}",
        d.notes
    );
}

#[test]
fn a_failed_metric_blocks_scaling_down_but_not_up() {
    let pods_metric = json!({"type": "Pods", "pods": {"metric": {"name": "qps"},
                             "target": {"type": "AverageValue", "averageValue": "10"}}});
    let cpu = json!({"type": "Resource", "resource": {"name": "cpu",
                     "target": {"type": "Utilization", "averageUtilization": 50}}});
    let hpa = hpa(json!({"metrics": [cpu, pods_metric]}));
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64)];
    let t = now(0);
    let up = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 100, 1), ("b", 100, 1)], t),
        &mut History::default(),
        t,
    );
    assert_eq!(up.desired, 4);
    assert_eq!(
        up.status.current_metrics.as_ref().unwrap()[1],
        MetricStatus::default()
    );
    assert!(up.notes.iter().any(|n| n.reason == "FailedGetPodsMetric"));
    let down = run(
        &hpa,
        2,
        &pods,
        &usage(&[("a", 5, 1), ("b", 5, 1)], t),
        &mut History::default(),
        t,
    );
    assert_eq!(
        (down.reason.as_deref(), down.status.desired_replicas),
        (None, 0)
    );
    assert_eq!(
        condition(&down, "ScalingActive").reason.as_deref(),
        Some("FailedGetPodsMetric")
    );
}

#[test]
fn a_container_resource_counts_only_its_container() {
    let hpa = hpa(
        json!({"metrics": [{"type": "ContainerResource", "containerResource": {
        "name": "cpu", "container": "c",
        "target": {"type": "Utilization", "averageUtilization": 50}}}]}),
    );
    let mut a = web_pod("a", 100, 64);
    a.spec.as_mut().unwrap().containers.push(Container {
        name: "sidecar".into(),
        ..Default::default()
    });
    let t = now(0);
    let mut u = usage(&[("a", 100, 1)], t).unwrap();
    u.get_mut("a")
        .unwrap()
        .containers
        .insert("sidecar".into(), [("cpu".to_string(), 900)].into());
    let d = run(&hpa, 1, &[a], &Ok(u), &mut History::default(), t);
    // The sidecar has no request and is not counted: c alone is at 100% against 50%.
    assert_eq!(d.desired, 2);
    assert_eq!(
        d.reason.as_deref(),
        Some("cpu container resource utilization (percentage of request) above target")
    );
}

#[test]
fn the_outcome_of_a_rescale() {
    let hpa = hpa(json!({}));
    let pods = [web_pod("a", 100, 64)];
    let t = now(0);
    let mut d = run(
        &hpa,
        1,
        &pods,
        &usage(&[("a", 100, 1)], t),
        &mut History::default(),
        t,
    );
    let mut failed = d.clone();
    rescaled(&mut d, 1, Ok(()), t);
    assert_eq!(d.status.last_scale_time, Some(Time(t)));
    assert_eq!(d.notes.last().unwrap().reason, "SuccessfulRescale");
    assert_eq!(
        d.notes.last().unwrap().message,
        "New size: 2; reason: cpu resource utilization (percentage of request) above target"
    );
    rescaled(&mut failed, 1, Err("conflict".into()), t);
    assert_eq!((failed.desired, failed.status.desired_replicas), (1, 1));
    let able = condition(&failed, "AbleToScale");
    assert_eq!(
        (able.status.as_str(), able.reason.as_deref()),
        ("False", Some("FailedUpdateScale"))
    );
    assert_eq!(failed.notes.last().unwrap().reason, "FailedRescale");
}

#[test]
fn conditions_keep_their_transition_time_while_unchanged() {
    let mut status = HorizontalPodAutoscalerStatus::default();
    set_condition(&mut status, "AbleToScale", true, "A", "a", at(0));
    set_condition(&mut status, "AbleToScale", true, "B", "b", at(10));
    let c = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (c.reason.as_deref(), c.last_transition_time.as_ref()),
        (Some("B"), Some(&Time(at(0))))
    );
    set_condition(&mut status, "AbleToScale", false, "C", "c", at(20));
    let c = &status.conditions.as_ref().unwrap()[0];
    assert_eq!(c.last_transition_time, Some(Time(at(20))));
}

#[test]
fn a_metrics_list_reads_as_usage_by_pod() {
    let list = json!({"kind": "PodMetricsList", "items": [
        {"metadata": {"name": "a"}, "timestamp": "2026-12-06T06:00:00Z", "window": "10.5s",
         "containers": [{"name": "c", "usage": {"cpu": "250m", "memory": "64Mi"}},
                        {"name": "s", "usage": {"cpu": "1"}}]},
        {"metadata": {"name": "broken"}, "timestamp": "not a time", "window": "1s", "containers": []}]});
    let usage = controller::pod_usage(&list);
    assert_eq!(usage.len(), 1);
    let a = &usage["a"];
    assert_eq!(a.window, Duration::from_millis(10_500));
    assert_eq!(a.containers["c"]["cpu"], 250);
    assert_eq!(a.containers["c"]["memory"], 64 * 1024 * 1024 * 1000);
    assert_eq!(a.containers["s"]["cpu"], 1000);
}

/// A sync of `hpa` with custom or external readings (and no resource metrics).
fn run_custom(
    hpa: &HorizontalPodAutoscaler,
    scale: TargetScale,
    pods: &[Pod],
    readings: Vec<(usize, Reading)>,
    t: Timestamp,
) -> Decision {
    let refs: Vec<&Pod> = pods.iter().collect();
    let measured = Measured {
        resources: Ok(BTreeMap::new()),
        custom: readings.into_iter().collect(),
    };
    decide(
        hpa,
        &scale,
        &refs,
        &measured,
        &mut History::default(),
        &Tunables::default(),
        t,
    )
}

/// Each pod's value of a `Pods` metric, measured at `t`.
fn pod_values(values: &[(&str, i64)], t: Timestamp) -> Reading {
    Reading::Pods(Ok(values
        .iter()
        .map(|(name, milli)| {
            (
                name.to_string(),
                Sample {
                    timestamp: t,
                    window: Duration::from_secs(60),
                    milli: *milli,
                },
            )
        })
        .collect()))
}

fn current_of(d: &Decision, i: usize) -> serde_json::Value {
    serde_json::to_value(&d.status.current_metrics.as_ref().unwrap()[i]).unwrap()
}

#[test]
fn a_pods_metric_averages_the_pods_values_against_its_target() {
    let hpa = hpa(json!({"metrics": [{"type": "Pods", "pods": {
        "metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}]}));
    let t = now(0);
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64)];
    // 10 and 30 average 20: twice the target, on two pods.
    let d = run_custom(
        &hpa,
        scale(2),
        &pods,
        vec![(0, pod_values(&[("a", 10_000), ("b", 30_000)], t))],
        t,
    );
    assert_eq!(d.desired, 4);
    assert_eq!(d.reason.as_deref(), Some("pods metric qps above target"));
    assert_eq!(
        current_of(&d, 0),
        json!({"type": "Pods", "pods": {"metric": {"name": "qps"},
               "current": {"averageValue": "20"}}})
    );
    // A pod without a value counts as at the target on the way down: 2 and 2 and (10) average
    // 4.67, not 2, so three pods go to two rather than one.
    let pods = [
        web_pod("a", 100, 64),
        web_pod("b", 100, 64),
        web_pod("c", 100, 64),
    ];
    let d = run_custom(
        &hpa,
        scale(3),
        &pods,
        vec![(0, pod_values(&[("a", 2_000), ("b", 2_000)], t))],
        t,
    );
    assert_eq!(d.desired, 2);
    assert_eq!(d.reason.as_deref(), Some("All metrics below target"));
    // Only pending pods: nothing counts.
    let pending = [pod("p", &[("app", "web")], 0)];
    let d = run_custom(
        &hpa,
        scale(1),
        &pending,
        vec![(0, pod_values(&[("p", 50_000)], t))],
        t,
    );
    let active = condition(&d, "ScalingActive");
    assert_eq!(active.reason.as_deref(), Some("FailedGetPodsMetric"));
    assert!(
        active
            .message
            .as_deref()
            .unwrap()
            .contains("did not receive metrics for any ready pods"),
        "{active:?}"
    );
}

#[test]
fn an_object_metric_by_value_scales_the_ready_pods_by_its_ratio() {
    let hpa = hpa(json!({"metrics": [{"type": "Object", "object": {
        "describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
        "metric": {"name": "requests-per-second"},
        "target": {"type": "Value", "value": "100"}}}]}));
    let t = now(0);
    // Two ready pods and one not ready: 250 against 100 asks for 2.5 times the two.
    let mut unready = web_pod("c", 100, 64);
    unready = running(unready, "n1", "127.0.0.9", None);
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64), unready];
    let d = run_custom(
        &hpa,
        scale(3),
        &pods,
        vec![(0, Reading::Value(Ok(250_000)))],
        t,
    );
    assert_eq!(d.desired, 5);
    assert_eq!(
        d.reason.as_deref(),
        Some("Ingress metric requests-per-second above target")
    );
    assert_eq!(
        current_of(&d, 0),
        json!({"type": "Object", "object": {
            "describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
            "metric": {"name": "requests-per-second"},
            "current": {"value": "250"}}})
    );
    // Within the tolerance: nothing moves.
    let d = run_custom(
        &hpa,
        scale(3),
        &pods,
        vec![(0, Reading::Value(Ok(105_000)))],
        t,
    );
    assert_eq!((d.desired, d.reason), (3, None));
}

#[test]
fn per_replica_targets_divide_by_the_replicas_the_scale_reports() {
    let object = json!({"type": "Object", "object": {
        "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "web"},
        "metric": {"name": "connections"},
        "target": {"type": "AverageValue", "averageValue": "50"}}});
    let external = json!({"type": "External", "external": {
        "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "jobs"}}},
        "target": {"type": "AverageValue", "averageValue": "10"}}});
    let hpa = hpa(json!({"metrics": [object, external]}));
    let t = now(0);
    let pods = [web_pod("a", 100, 64), web_pod("b", 100, 64)];
    let two = TargetScale {
        replicas: 2,
        status_replicas: 2,
        selector: Some("app=web".into()),
    };
    // 200 connections at 50 each want 4, as do 35 jobs at 10 each: the first of the largest
    // names the reason.
    let d = run_custom(
        &hpa,
        two.clone(),
        &pods,
        vec![
            (0, Reading::Value(Ok(200_000))),
            (1, Reading::Value(Ok(35_000))),
        ],
        t,
    );
    assert_eq!(d.desired, 4);
    assert_eq!(
        d.reason.as_deref(),
        Some("Service metric connections above target")
    );
    assert_eq!(
        current_of(&d, 0)["object"]["current"],
        json!({"averageValue": "100"})
    );
    assert_eq!(
        current_of(&d, 1),
        json!({"type": "External", "external": {
            "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "jobs"}}},
            "current": {"averageValue": "17500m"}}})
    );
    // 21 jobs on two replicas is 10.5 each: within the tolerance of 10.
    let hpa_external = self::hpa(json!({"metrics": [external]}));
    let d = run_custom(
        &hpa_external,
        two.clone(),
        &pods,
        vec![(0, Reading::Value(Ok(21_000)))],
        t,
    );
    assert_eq!((d.desired, d.reason), (2, None));
    // 5 jobs: down to one.
    let d = run_custom(
        &hpa_external,
        two,
        &pods,
        vec![(0, Reading::Value(Ok(5_000)))],
        t,
    );
    assert_eq!(d.desired, 1);
    assert_eq!(d.reason.as_deref(), Some("All metrics below target"));
}

#[test]
fn an_unreadable_or_targetless_custom_metric_stops_scaling_with_its_reason() {
    let external = |target: serde_json::Value| {
        hpa(json!({"metrics": [{"type": "External", "external": {
            "metric": {"name": "queue_depth"}, "target": target}}]}))
    };
    let t = now(0);
    let pods = [web_pod("a", 100, 64)];
    let d = run_custom(
        &external(json!({"type": "Value", "value": "10"})),
        scale(1),
        &pods,
        vec![(
            0,
            Reading::Value(Err(
                "the server could not find the requested resource".into()
            )),
        )],
        t,
    );
    assert_eq!(d.reason, None);
    let active = condition(&d, "ScalingActive");
    assert_eq!(
        (active.status.as_str(), active.reason.as_deref()),
        ("False", Some("FailedGetExternalMetric"))
    );
    assert_eq!(
        active.message.as_deref(),
        Some(
            "the HPA was unable to compute the replica count: failed to get queue_depth external \
             metric: unable to get external metric queue_depth (): the server could not find the \
             requested resource"
        )
    );
    assert!(
        d.notes
            .iter()
            .any(|n| n.reason == "FailedComputeMetricsReplicas"
                && n.message.contains("invalid metrics (1 invalid out of 1)")),
        "{:?}",
        d.notes
    );
    let d = run_custom(
        &external(json!({"type": "Utilization", "averageUtilization": 5})),
        scale(1),
        &pods,
        vec![(0, Reading::Value(Ok(1)))],
        t,
    );
    assert!(
        condition(&d, "ScalingActive")
            .message
            .as_deref()
            .unwrap()
            .contains("neither a value target nor an average value target was set")
    );
    // A Value target from zero replicas: the ratio alone (no pods to count).
    let d = run_custom(
        &external(json!({"type": "Value", "value": "10"})),
        TargetScale {
            replicas: 1,
            status_replicas: 0,
            selector: Some("app=web".into()),
        },
        &[],
        vec![(0, Reading::Value(Ok(35_000)))],
        t,
    );
    assert!(
        condition(&d, "ScalingActive")
            .message
            .as_deref()
            .unwrap()
            .contains("no pods returned by selector"),
        "{:?}",
        d.status
    );
}

#[test]
fn queries_ask_the_custom_and_external_metrics_apis() {
    let spec = |v: serde_json::Value| -> MetricSpec { serde_json::from_value(v).unwrap() };
    let pods = Query::of(
        &spec(json!({"type": "Pods", "pods": {
            "metric": {"name": "qps", "selector": {"matchLabels": {"verb": "GET"}}},
            "target": {"type": "AverageValue", "averageValue": "1"}}})),
        "app=web,tier in (a,b)",
    )
    .unwrap();
    assert_eq!(
        pods.path("ns", ""),
        "/namespaces/ns/pods/*/qps?labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&metricLabelSelector=verb%3DGET"
    );
    let object = |kind: &str, api_version: Option<&str>| {
        Query::of(
            &spec(json!({"type": "Object", "object": {
                "describedObject": {"apiVersion": api_version, "kind": kind, "name": "main"},
                "metric": {"name": "rps"}, "target": {"type": "Value", "value": "1"}}})),
            "app=web",
        )
        .unwrap()
    };
    let ingress = object("Ingress", Some("networking.k8s.io/v1"));
    assert_eq!(
        ingress.path("ns", "ingresses.networking.k8s.io"),
        "/namespaces/ns/ingresses.networking.k8s.io/main/rps"
    );
    assert!(
        matches!(&object("Service", None), Query::Object { api_version, .. } if api_version == "v1")
    );
    assert_eq!(
        object("Namespace", Some("v1")).path("ns", ""),
        "/namespaces/main/metrics/rps"
    );
    let external = Query::of(
        &spec(json!({"type": "External", "external": {
            "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "jobs"}}},
            "target": {"type": "Value", "value": "1"}}})),
        "app=web",
    )
    .unwrap();
    assert_eq!(
        external.path("ns", ""),
        "/namespaces/ns/queue_depth?labelSelector=queue%3Djobs"
    );
    let resource = spec(json!({"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 50}}}));
    assert_eq!(Query::of(&resource, "app=web"), None);
}

#[test]
fn answers_of_the_metrics_apis_read_as_values() {
    let pods = Query::Pods {
        metric: "qps".into(),
        selector: "app=web".into(),
        metric_selector: String::new(),
    };
    let list = json!({"kind": "MetricValueList", "items": [
        {"describedObject": {"kind": "Pod", "namespace": "ns", "name": "a"},
         "metric": {"name": "qps"}, "timestamp": "2026-12-06T12:00:00Z",
         "windowSeconds": 30, "value": "1500m"},
        {"describedObject": {"kind": "Pod", "namespace": "ns", "name": "b"},
         "metricName": "qps", "timestamp": "2026-12-06T12:00:00Z", "value": "2"}]});
    let Reading::Pods(Ok(values)) = pods.read(&list) else {
        panic!("{:?}", pods.read(&list))
    };
    assert_eq!(values["a"].milli, 1500);
    assert_eq!(values["a"].window, Duration::from_secs(30));
    assert_eq!(values["b"].milli, 2000);
    assert_eq!(values["b"].window, Duration::from_secs(60));
    assert_eq!(
        pods.read(&json!({"items": []})),
        Reading::Pods(Err("no metrics returned from custom metrics API".into()))
    );
    let object = Query::Object {
        metric: "rps".into(),
        api_version: "v1".into(),
        kind: "Service".into(),
        name: "web".into(),
        metric_selector: String::new(),
    };
    assert_eq!(
        object.read(&json!({"items": [{"value": "2k"}]})),
        Reading::Value(Ok(2_000_000))
    );
    let Reading::Value(Err(two)) = object.read(&json!({"items": [{"value": "1"}, {"value": "2"}]}))
    else {
        panic!()
    };
    assert!(
        two.contains("returned 2 results when we asked for exactly one"),
        "{two}"
    );
    let external = Query::External {
        metric: "queue_depth".into(),
        metric_selector: String::new(),
    };
    assert_eq!(
        external.read(&json!({"kind": "ExternalMetricValueList", "items": [
            {"metricName": "queue_depth", "value": "10"},
            {"metricName": "queue_depth", "value": "20500m"}]})),
        Reading::Value(Ok(30_500))
    );
    assert_eq!(
        external.read(&json!({"items": []})),
        Reading::Value(Err("no metrics returned from external metrics API".into()))
    );
}

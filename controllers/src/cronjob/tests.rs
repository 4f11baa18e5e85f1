//! The CronJob controller's decisions with an injected clock: no I/O, no waiting for minutes.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use serde_json::json;
use skiff_client::events::EventType;

use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn cron_job(spec: serde_json::Value, status: serde_json::Value) -> CronJob {
    let mut full = json!({
        "schedule": "* * * * *",
        "concurrencyPolicy": "Allow",
        "suspend": false,
        "successfulJobsHistoryLimit": 3,
        "failedJobsHistoryLimit": 1,
        "jobTemplate": {
            "metadata": {"labels": {"app": "backup"}},
            "spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "c", "image": "busybox"}]
            }}}
        }
    });
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": "backup",
            "namespace": "ns",
            "uid": "cj-uid",
            "creationTimestamp": "2026-12-01T10:00:30Z"
        },
        "spec": full,
        "status": status,
    }))
    .unwrap()
}

/// A Job of the CronJob: `state` is "running", "Complete" or "Failed".
fn job(name: &str, state: &str, start: &str) -> Job {
    let mut status = json!({"startTime": start});
    if state != "running" {
        status["conditions"] = json!([{"type": state, "status": "True"}]);
        if state == "Complete" {
            status["completionTime"] = json!(start);
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid")},
        "spec": {"template": {}},
        "status": status,
    }))
    .unwrap()
}

fn active(names: &[&str]) -> serde_json::Value {
    json!(
        names
            .iter()
            .map(
                |n| json!({"kind": "Job", "name": n, "namespace": "ns", "uid": format!("{n}-uid")})
            )
            .collect::<Vec<_>>()
    )
}

fn reasons(plan: &Plan) -> Vec<&'static str> {
    plan.notes.iter().map(|n| n.reason).collect()
}

#[test]
fn the_first_due_run_starts_a_job_named_for_its_minute() {
    let cj = cron_job(json!({}), json!({}));
    let plan = plan(&cj, &[], at("2026-12-01T10:01:05Z"));
    let (job, scheduled) = plan.start.expect("a run is due");
    assert_eq!(scheduled, at("2026-12-01T10:01:00Z"));
    let minutes = at("2026-12-01T10:01:00Z").as_second() / 60;
    assert_eq!(job.metadata.name.unwrap(), format!("backup-{minutes}"));
    assert_eq!(job.metadata.labels.unwrap()["app"], "backup");
    let owner = &job.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("CronJob", "cj-uid", Some(true))
    );
    assert!(job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP].starts_with("2026-12-01T"));
    assert_eq!(
        plan.status.last_schedule_time.map(|t| t.0),
        Some(at("2026-12-01T10:01:00Z"))
    );
    // Next look: just after 10:02:00.
    let wait = plan.requeue.unwrap();
    assert!(wait >= Duration::from_secs(55) && wait < Duration::from_secs(56));
}

#[test]
fn nothing_is_due_before_the_first_run() {
    let cj = cron_job(json!({"schedule": "0 * * * *"}), json!({}));
    let plan = plan(&cj, &[], at("2026-12-01T10:59:00Z"));
    assert!(plan.start.is_none());
    assert!(plan.notes.is_empty());
    assert_eq!(
        plan.requeue,
        Some(Duration::from_secs(60) + Duration::from_millis(100))
    );
}

#[test]
fn after_downtime_only_the_most_recent_missed_run_starts_and_many_misses_warn() {
    let cj = cron_job(
        json!({}),
        json!({"lastScheduleTime": "2026-12-01T10:00:00Z"}),
    );
    let plan = plan(&cj, &[], at("2026-12-01T12:00:30Z"));
    let (_, scheduled) = plan.start.clone().expect("one catch-up run");
    assert_eq!(scheduled, at("2026-12-01T12:00:00Z"));
    assert_eq!(reasons(&plan), ["TooManyMissedTimes"]);
    assert!(
        plan.notes[0]
            .message
            .contains("too many missed start times: 120")
    );
    assert_eq!(plan.notes[0].type_, EventType::Warning);

    // A few misses start the latest without a warning.
    let cj = cron_job(
        json!({}),
        json!({"lastScheduleTime": "2026-12-01T10:00:00Z"}),
    );
    let plan = super::plan(&cj, &[], at("2026-12-01T10:05:10Z"));
    assert_eq!(plan.start.unwrap().1, at("2026-12-01T10:05:00Z"));
    assert!(plan.notes.is_empty());
}

#[test]
fn missed_runs_are_counted_and_the_latest_found_on_uneven_schedules() {
    let schedule = Schedule::parse("30 6-16/4 * * 1-5").unwrap();
    // From Monday 2026-11-30 00:00 to Thursday 12:00: Mon-Wed 3 runs each, Thu 06:30, 10:30.
    let missed = missed_runs(
        &schedule,
        &TimeZone::UTC,
        at("2026-11-30T00:00:00Z"),
        at("2026-12-03T12:00:00Z"),
    )
    .unwrap();
    assert_eq!(missed.most_recent, at("2026-12-03T10:30:00Z"));
    assert!(missed.count >= 2);
    assert_eq!(
        missed_runs(
            &schedule,
            &TimeZone::UTC,
            at("2026-12-03T10:30:00Z"),
            at("2026-12-03T12:00:00Z")
        ),
        None
    );
}

#[test]
fn the_starting_deadline_bounds_how_late_a_run_may_start() {
    let status = json!({"lastScheduleTime": "2026-12-01T09:00:00Z"});
    let cj = cron_job(json!({"startingDeadlineSeconds": 30}), status.clone());
    let plan = plan(&cj, &[], at("2026-12-01T10:01:20Z"));
    assert_eq!(plan.start.unwrap().1, at("2026-12-01T10:01:00Z"));
    // Missing by more than the deadline: nothing starts (the window starts after the run).
    let cj = cron_job(json!({"startingDeadlineSeconds": 10}), status);
    let plan = super::plan(&cj, &[], at("2026-12-01T10:01:20Z"));
    assert!(plan.start.is_none());
}

#[test]
fn forbid_waits_for_the_running_job_and_replace_deletes_it() {
    let running = job("backup-1", "running", "2026-12-01T10:00:00Z");
    let status =
        json!({"active": active(&["backup-1"]), "lastScheduleTime": "2026-12-01T10:00:00Z"});
    let now = at("2026-12-01T10:01:05Z");

    let cj = cron_job(json!({"concurrencyPolicy": "Forbid"}), status.clone());
    let plan = plan(&cj, &[&running], now);
    assert!(plan.start.is_none());
    assert_eq!(reasons(&plan), ["JobAlreadyActive"]);
    assert_eq!(plan.status.active.unwrap().len(), 1);

    let cj = cron_job(json!({"concurrencyPolicy": "Replace"}), status.clone());
    let plan = super::plan(&cj, &[&running], now);
    assert_eq!(plan.replace, ["backup-1"]);
    assert!(plan.start.is_some());
    assert!(plan.status.active.is_none());
    assert_eq!(reasons(&plan), ["SuccessfulDelete"]);

    let cj = cron_job(json!({"concurrencyPolicy": "Allow"}), status);
    let plan = super::plan(&cj, &[&running], now);
    assert!(plan.replace.is_empty() && plan.start.is_some());
    assert_eq!(plan.status.active.unwrap().len(), 1);
}

#[test]
fn a_finished_job_leaves_the_active_list_and_sets_the_last_success() {
    let done = job("backup-1", "Complete", "2026-12-01T10:00:20Z");
    let cj = cron_job(
        json!({}),
        json!({"active": active(&["backup-1", "backup-gone"]), "lastScheduleTime": "2026-12-01T10:00:00Z"}),
    );
    let plan = plan(&cj, &[&done], at("2026-12-01T10:00:40Z"));
    assert!(plan.status.active.is_none());
    assert_eq!(
        plan.status.last_successful_time.as_ref().map(|t| t.0),
        Some(at("2026-12-01T10:00:20Z"))
    );
    assert_eq!(reasons(&plan), ["SawCompletedJob", "MissingJob"]);
    assert_eq!(
        plan.notes[0].message,
        "Saw completed job: backup-1, condition: Complete"
    );
}

#[test]
fn finished_jobs_past_the_history_limits_go_oldest_first() {
    let jobs: Vec<Job> = (1..=5)
        .map(|i| {
            job(
                &format!("ok-{i}"),
                "Complete",
                &format!("2026-12-01T10:0{i}:00Z"),
            )
        })
        .chain([
            job("bad-1", "Failed", "2026-12-01T10:01:30Z"),
            job("bad-2", "Failed", "2026-12-01T10:02:30Z"),
            job("running", "running", "2026-12-01T10:03:30Z"),
        ])
        .collect();
    let refs: Vec<&Job> = jobs.iter().collect();
    let cj = cron_job(
        json!({"suspend": true}),
        json!({"active": active(&["running"])}),
    );
    let plan = plan(&cj, &refs, at("2026-12-01T10:10:00Z"));
    assert_eq!(plan.prune, ["ok-1", "ok-2", "bad-1"]);
    // Suspended: nothing starts, nothing is scheduled.
    assert!(plan.start.is_none());
    assert_eq!(plan.requeue, None);
}

#[test]
fn a_run_already_started_is_not_started_again() {
    let minutes = at("2026-12-01T10:01:00Z").as_second() / 60;
    let existing = job(
        &format!("backup-{minutes}"),
        "running",
        "2026-12-01T10:01:01Z",
    );
    // The status was lost (a restart), the Job is there: it is not made twice.
    let cj = cron_job(json!({}), json!({}));
    let plan = plan(&cj, &[&existing], at("2026-12-01T10:01:30Z"));
    assert!(plan.start.is_none());
    assert_eq!(reasons(&plan), ["UnexpectedJob"]);
}

#[test]
fn the_schedule_is_read_in_the_time_zone() {
    let cj = cron_job(
        json!({"schedule": "0 9 * * *", "timeZone": "Europe/Berlin"}),
        json!({"lastScheduleTime": "2026-11-30T08:00:00Z"}),
    );
    let plan = plan(&cj, &[], at("2026-12-01T08:00:30Z"));
    let (job, scheduled) = plan.start.expect("09:00 in Berlin is 08:00 UTC");
    assert_eq!(scheduled, at("2026-12-01T08:00:00Z"));
    assert_eq!(
        job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP],
        "2026-12-01T09:00:00+01:00"
    );
}

#[test]
fn a_schedule_or_zone_that_does_not_resolve_is_reported_not_run() {
    let cj = cron_job(json!({"timeZone": "Mars/Olympus"}), json!({}));
    let plan = plan(&cj, &[], at("2026-12-01T10:05:00Z"));
    assert!(plan.start.is_none());
    assert_eq!(reasons(&plan), ["UnknownTimeZone"]);
    let cj = cron_job(json!({"schedule": "every day"}), json!({}));
    let plan = super::plan(&cj, &[], at("2026-12-01T10:05:00Z"));
    assert_eq!(reasons(&plan), ["UnparseableSchedule"]);
}

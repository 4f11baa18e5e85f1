//! The CronJob controller's decisions (kube-controller-manager's `cronjob` controller, v2): from
//! a CronJob, the Jobs it controls and the time, what to record, which Jobs to delete, whether
//! to start one and when to look again.
//!
//! - The schedule is read in `spec.timeZone` (the process's zone when unset) by the same parser
//!   the API server validates with ([`skiff_meta::schedule`]).
//! - Missed runs: of every run due since the last one (or the CronJob's creation, or the
//!   starting deadline, whichever is latest), only the most recent is started, once: a controller
//!   that was down for a day starts one Job, not 1,440. More than 100 missed runs also warn
//!   (`TooManyMissedTimes`). A run whose starting deadline has passed is skipped (`MissSchedule`).
//! - `concurrencyPolicy`: Allow starts beside running Jobs, Forbid waits for them
//!   (`JobAlreadyActive`), Replace deletes them first.
//! - A Job is named `<cronjob>-<minutes since the epoch of its scheduled time>`, so a run is never
//!   started twice, even across a restart that lost the status.
//! - Finished Jobs past `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` are deleted,
//!   oldest start first.

pub mod controller;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job, JobSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use skiff_meta::schedule::{Schedule, time_zone};

use crate::pods;

/// The annotation on each Job with the time it was scheduled for (RFC 3339, in the CronJob's
/// time zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// Past this many missed runs the controller warns (the most recent still starts).
pub const TOO_MANY_MISSED: u64 = 100;

/// Extra delay after a scheduled time before looking again, so the clock has passed it.
const AFTER_SCHEDULE: Duration = Duration::from_millis(100);

pub use crate::runtime::Note;

/// What one sync does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The status to write, before the new Job is added (its uid comes from the create).
    pub status: CronJobStatus,
    /// Running Jobs to delete first (Replace).
    pub replace: Vec<String>,
    /// The Job to start, and the time it was scheduled for.
    pub start: Option<(Job, Timestamp)>,
    /// Finished Jobs past the history limits.
    pub prune: Vec<String>,
    /// Events to record.
    pub notes: Vec<Note>,
    /// When to look again (the next run).
    pub requeue: Option<Duration>,
}

/// Whether a Job finished, and how: `Some("Complete")` or `Some("Failed")`.
pub fn finished(job: &Job) -> Option<&'static str> {
    let conditions = job.status.as_ref()?.conditions.as_deref()?;
    for c in conditions {
        if c.status == "True" {
            match c.type_.as_str() {
                "Complete" => return Some("Complete"),
                "Failed" => return Some("Failed"),
                _ => {}
            }
        }
    }
    None
}

/// The runs due between the last known run and `now`: the most recent one and how many were due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Missed {
    /// The most recent time a run was due.
    pub most_recent: Timestamp,
    /// How many runs were due (estimated past a few, as Kubernetes does).
    pub count: u64,
}

/// The runs of `schedule` in `zone` due after `earliest` up to `now`, or `None` if none is due.
pub fn missed_runs(
    schedule: &Schedule,
    zone: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> Option<Missed> {
    let t1 = schedule.next_after(earliest, zone).filter(|t| *t <= now)?;
    let Some(t2) = schedule.next_after(t1, zone).filter(|t| *t <= now) else {
        return Some(Missed {
            most_recent: t1,
            count: 1,
        });
    };
    // Many may be due: estimate their number from the spacing of the first two, jump close to
    // now, then walk the last few (schedules need not be evenly spaced: `30 6-16/4 * * 1-5`).
    let spacing = t2.duration_since(t1).as_secs().max(1);
    let elapsed = now.duration_since(t1).as_secs().max(0);
    let count = (elapsed / spacing) as u64 + 1;
    let jump = spacing.saturating_mul((count as i64 - 2).max(0));
    let mut t = t1
        .checked_add(SignedDuration::from_secs(jump))
        .unwrap_or(t1);
    // `t` itself may be a run: walk from just before it.
    t = t.checked_sub(SignedDuration::from_secs(1)).unwrap_or(t);
    let mut most_recent = t1;
    while let Some(next) = schedule.next_after(t, zone).filter(|n| *n <= now) {
        most_recent = next;
        t = next;
    }
    Some(Missed { most_recent, count })
}

/// The name of the Job for the run scheduled at `at`.
pub fn job_name(cron_job: &str, at: Timestamp) -> String {
    format!("{cron_job}-{}", at.as_second().div_euclid(60))
}

/// The Job for the run scheduled at `at`: the template's labels, annotations and spec, the
/// scheduled time annotated, the CronJob as controller.
pub fn new_job(cron_job: &CronJob, at: Timestamp, zone: &TimeZone) -> Job {
    let spec = cron_job.spec.clone().unwrap_or_default();
    let template = spec.job_template;
    let template_meta = template.metadata.unwrap_or_default();
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.into(),
        at.to_zoned(zone.clone())
            .strftime("%Y-%m-%dT%H:%M:%S%:z")
            .to_string(),
    );
    let name = cron_job.metadata.name.clone().unwrap_or_default();
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(&name, at)),
            namespace: cron_job.metadata.namespace.clone(),
            labels: template_meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![pods::controller_ref(
                "batch/v1",
                "CronJob",
                &cron_job.metadata,
            )]),
            ..Default::default()
        },
        spec: Some(template.spec.unwrap_or_else(JobSpec::default)),
        status: None,
    }
}

/// A reference to `job` for the CronJob's `status.active`.
pub fn active_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// Plans one sync of `cron_job`, whose Jobs (those it controls) are `jobs`, at `now`.
pub fn plan(cron_job: &CronJob, jobs: &[&Job], now: Timestamp) -> Plan {
    let spec = cron_job.spec.clone().unwrap_or_default();
    let mut status = cron_job.status.clone().unwrap_or_default();
    let mut notes = Vec::new();

    // 1. The active list follows the Jobs: finished ones leave it, vanished ones too.
    let ours: HashSet<&str> = jobs
        .iter()
        .filter_map(|j| j.metadata.uid.as_deref())
        .collect();
    let mut active: Vec<ObjectReference> = status.active.take().unwrap_or_default();
    let in_active = |active: &[ObjectReference], uid: Option<&str>| {
        active.iter().any(|r| r.uid.as_deref() == uid)
    };
    for job in jobs {
        let uid = job.metadata.uid.as_deref();
        let name = job.metadata.name.clone().unwrap_or_default();
        match finished(job) {
            None if !in_active(&active, uid) => notes.push(Note::warning(
                "UnexpectedJob",
                format!("Saw a job that the controller did not create or forgot: {name}"),
            )),
            None => {}
            Some(condition) => {
                if in_active(&active, uid) {
                    active.retain(|r| r.uid.as_deref() != uid);
                    notes.push(Note::normal(
                        "SawCompletedJob",
                        format!("Saw completed job: {name}, condition: {condition}"),
                    ));
                }
                if condition == "Complete"
                    && let Some(done) = job.status.as_ref().and_then(|s| s.completion_time.clone())
                    && status
                        .last_successful_time
                        .as_ref()
                        .is_none_or(|last| done.0 > last.0)
                {
                    status.last_successful_time = Some(done);
                }
            }
        }
    }
    active.retain(|r| {
        let present = r.uid.as_deref().is_some_and(|u| ours.contains(u));
        if !present {
            notes.push(Note::normal(
                "MissingJob",
                format!(
                    "Active job went missing: {}",
                    r.name.as_deref().unwrap_or_default()
                ),
            ));
        }
        present
    });

    let mut plan = Plan {
        prune: prune(&spec, jobs),
        ..Plan::default()
    };
    for name in &plan.prune {
        notes.push(Note::normal(
            "SuccessfulDelete",
            format!("Deleted job {name}"),
        ));
    }

    // 2. Whether a run is due.
    let finish = |mut plan: Plan, status: CronJobStatus, active, notes, requeue| {
        plan.status = CronJobStatus {
            active: Some(active).filter(|a: &Vec<ObjectReference>| !a.is_empty()),
            ..status
        };
        plan.notes = notes;
        plan.requeue = requeue;
        plan
    };
    if cron_job.metadata.deletion_timestamp.is_some() || spec.suspend == Some(true) {
        return finish(plan, status, active, notes, None);
    }
    let zone = match time_zone(spec.time_zone.as_deref()) {
        Ok(zone) => zone,
        Err(_) => {
            notes.push(Note::warning(
                "UnknownTimeZone",
                format!(
                    "invalid timeZone: {:?}",
                    spec.time_zone.as_deref().unwrap_or_default()
                ),
            ));
            return finish(plan, status, active, notes, None);
        }
    };
    let schedule = match Schedule::parse(&spec.schedule) {
        Ok(s) => s,
        Err(reason) => {
            notes.push(Note::warning(
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {reason}", spec.schedule),
            ));
            return finish(plan, status, active, notes, None);
        }
    };
    let next_run = |after: Timestamp| {
        schedule.next_after(after, &zone).map(|t| {
            let wait = t.duration_since(now).as_millis().max(0) as u64;
            Duration::from_millis(wait) + AFTER_SCHEDULE
        })
    };
    let requeue = next_run(now);
    let mut earliest = status
        .last_schedule_time
        .as_ref()
        .or(cron_job.metadata.creation_timestamp.as_ref())
        .map_or(now, |t| t.0);
    if let Some(deadline) = spec.starting_deadline_seconds {
        let window_start = now
            .checked_sub(SignedDuration::from_secs(deadline))
            .unwrap_or(now);
        earliest = earliest.max(window_start);
    }
    let Some(missed) = missed_runs(&schedule, &zone, earliest, now) else {
        return finish(plan, status, active, notes, requeue);
    };
    if missed.count > TOO_MANY_MISSED {
        notes.push(Note::warning(
            "TooManyMissedTimes",
            format!(
                "too many missed start times: {}. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                missed.count
            ),
        ));
    }
    let at = missed.most_recent;
    if let Some(deadline) = spec.starting_deadline_seconds
        && at
            .checked_add(SignedDuration::from_secs(deadline))
            .is_ok_and(|end| end < now)
    {
        notes.push(Note::warning(
            "MissSchedule",
            format!(
                "Missed scheduled time to start a job: {}",
                at.strftime("%a, %d %b %Y %H:%M:%S +0000")
            ),
        ));
        return finish(plan, status, active, notes, requeue);
    }
    let name = job_name(cron_job.metadata.name.as_deref().unwrap_or_default(), at);
    let already = status
        .last_schedule_time
        .as_ref()
        .is_some_and(|t| t.0 == at)
        || active.iter().any(|r| r.name.as_deref() == Some(&name))
        || jobs
            .iter()
            .any(|j| j.metadata.name.as_deref() == Some(&name));
    if already {
        return finish(plan, status, active, notes, requeue);
    }

    // 3. Concurrency.
    match spec.concurrency_policy.as_deref() {
        Some("Forbid") if !active.is_empty() => {
            notes.push(Note::normal(
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            ));
            return finish(plan, status, active, notes, requeue);
        }
        Some("Replace") => {
            for r in active.drain(..) {
                let name = r.name.unwrap_or_default();
                notes.push(Note::normal(
                    "SuccessfulDelete",
                    format!("Deleted job {name}"),
                ));
                plan.replace.push(name);
            }
        }
        _ => {}
    }

    // 4. The run.
    plan.start = Some((new_job(cron_job, at, &zone), at));
    status.last_schedule_time = Some(Time(at));
    finish(plan, status, active, notes, requeue)
}

/// The finished Jobs past the history limits, oldest start first (Jobs never started last).
fn prune(spec: &k8s_openapi::api::batch::v1::CronJobSpec, jobs: &[&Job]) -> Vec<String> {
    let mut by_outcome: BTreeMap<&str, Vec<&Job>> = BTreeMap::new();
    for job in jobs {
        if job.metadata.deletion_timestamp.is_none()
            && let Some(outcome) = finished(job)
        {
            by_outcome.entry(outcome).or_default().push(job);
        }
    }
    let mut out = Vec::new();
    for (outcome, limit) in [
        ("Complete", spec.successful_jobs_history_limit),
        ("Failed", spec.failed_jobs_history_limit),
    ] {
        let (Some(limit), Some(list)) = (limit, by_outcome.get_mut(outcome)) else {
            continue;
        };
        let limit = limit.max(0) as usize;
        if list.len() <= limit {
            continue;
        }
        list.sort_by(|a, b| {
            let start = |j: &Job| j.status.as_ref().and_then(|s| s.start_time.clone());
            match (start(a), start(b)) {
                (Some(x), Some(y)) => {
                    x.0.cmp(&y.0)
                        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
                }
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => a.metadata.name.cmp(&b.metadata.name),
            }
        });
        let excess = list.len() - limit;
        out.extend(
            list[..excess]
                .iter()
                .filter_map(|j| j.metadata.name.clone()),
        );
    }
    out
}

#[cfg(test)]
mod tests;

//! The Job controller's decisions: from a Job and its pods, the pods to create (with their
//! completion indexes), the pods to delete, the pods whose tracking finalizer may go, and the
//! new status (counts, `completedIndexes`, conditions, start and completion times).
//!
//! Counting is exactly once across restarts, as Kubernetes' Job controller does it: every pod
//! carries the `batch.kubernetes.io/job-tracking` finalizer, so a finished pod cannot disappear
//! before it is counted. A finished pod's uid first goes into `status.uncountedTerminatedPods`
//! (written before anything else), then its finalizer is removed, and only once the pod is gone
//! or has no finalizer does the uid leave that list for the `succeeded`/`failed` counters:
//!
//! ```text
//!   pod finished, finalizer ──(status write)──▶ uid in uncounted ──(pod patch)──▶ no finalizer
//!                                                     │                               │
//!                                                     └────────(status write)◀────────┘
//!                                                          uid counted, leaves uncounted
//! ```
//! A crash between any two steps repeats the step; no step counts a uid twice (a counted pod
//! has no finalizer, so it is never taken up again) and none loses one (a pod with the
//! finalizer is not deleted).

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{
    Job, JobCondition, JobStatus, PodFailurePolicyRule, UncountedTerminatedPods,
};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::pods;

/// The finalizer on every pod of a Job until the controller has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The annotation and label with an Indexed Job pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable with an Indexed Job pod's completion index.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// At most this many pods are created in one sync.
const MAX_CREATES: usize = 500;

/// What one sync of a Job does.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Plan {
    /// The Job's new status (written first, before any pod is touched).
    pub status: JobStatus,
    /// Pods to create, by completion index (`None` for a NonIndexed Job).
    pub create: Vec<Option<i32>>,
    /// Active pods to delete, by name.
    pub delete: Vec<String>,
    /// Pods whose tracking finalizer may be removed once the status is written, by name.
    pub finalize: Vec<String>,
    /// When to look again even without events (the active deadline).
    pub requeue_at: Option<Timestamp>,
}

/// How a finished pod counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
}

/// What the pod failure policy says about a failed pod.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// Counted against the backoff limit (a Count rule, or no rule matched).
    Count,
    /// Not counted at all.
    Ignore,
    /// The Job fails now, with this message.
    FailJob(String),
}

fn has_condition(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn condition_of<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Sets the condition `type_` to `status`, moving its transition time only when the status
/// changes.
fn set_condition(
    job_status: &mut JobStatus,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let conditions = job_status.conditions.get_or_insert_with(Vec::new);
    let new = JobCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => {}
        Some(c) => *c = new,
        None => conditions.push(new),
    }
}

/// A pod's completion index, from its annotation.
pub fn index_of(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(COMPLETION_INDEX)?
        .parse()
        .ok()
}

fn has_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers
        .iter()
        .flatten()
        .any(|f| f == TRACKING_FINALIZER)
}

/// Whether the pod has finished for the Job, and how: a Succeeded or Failed phase, or (unless
/// pods are replaced only once Failed) a pod being deleted before it succeeded.
fn outcome(pod: &Pod, replace_only_failed: bool) -> Option<Outcome> {
    match pods::phase(pod) {
        "Succeeded" => Some(Outcome::Succeeded),
        "Failed" => Some(Outcome::Failed),
        _ if pods::is_deleting(&pod.metadata) && !replace_only_failed => Some(Outcome::Failed),
        _ => None,
    }
}

/// The first rule of the pod failure policy matching a failed pod's exit codes or conditions.
fn verdict(rules: &[PodFailurePolicyRule], pod: &Pod) -> Verdict {
    let status = pod.status.clone().unwrap_or_default();
    let pod_name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    for (i, rule) in rules.iter().enumerate() {
        let matched = if let Some(codes) = &rule.on_exit_codes {
            status
                .init_container_statuses
                .iter()
                .flatten()
                .chain(status.container_statuses.iter().flatten())
                .filter(|c| {
                    codes
                        .container_name
                        .as_ref()
                        .is_none_or(|name| *name == c.name)
                })
                .filter_map(|c| {
                    let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                    let listed = codes.values.contains(&code);
                    let hit = match codes.operator.as_str() {
                        "In" => listed,
                        "NotIn" => !listed && code != 0,
                        _ => false,
                    };
                    hit.then(|| {
                        format!(
                            "Container {} for pod {pod_name} failed with exit code {code} matching {} rule at index {i}",
                            c.name, rule.action
                        )
                    })
                })
                .next()
        } else {
            rule.on_pod_conditions.iter().flatten().find_map(|p| {
                status
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == p.type_ && c.status == p.status)
                    .then(|| {
                        format!(
                            "Pod {pod_name} has condition {} matching {} rule at index {i}",
                            p.type_, rule.action
                        )
                    })
            })
        };
        if let Some(message) = matched {
            return match rule.action.as_str() {
                "Ignore" => Verdict::Ignore,
                "FailJob" => Verdict::FailJob(message),
                _ => Verdict::Count,
            };
        }
    }
    Verdict::Count
}

/// Parses `completedIndexes` (`1,3-5,7`).
pub fn parse_indexes(s: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// Formats indexes as `completedIndexes` does: ascending, runs of three or more as `a-b`.
pub fn format_indexes(indexes: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => parts.push(format!("{start},{end}")),
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    parts.join(",")
}

/// The sync of one Job. `may_manage` is false while earlier creates or deletes are not yet in
/// the cache (expectations): the status and finalizers are still tracked, no pod is created or
/// deleted.
pub fn plan(job: &Job, pods_of_job: &[&Pod], now: Timestamp, may_manage: bool) -> Plan {
    let spec = job.spec.clone().unwrap_or_default();
    let old = job.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let rules = spec
        .pod_failure_policy
        .as_ref()
        .map(|p| p.rules.clone())
        .unwrap_or_default();
    let replace_only_failed = spec.pod_replacement_policy.as_deref() == Some("Failed");
    let on_failure = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    let mut plan = Plan::default();

    let uncounted = old.uncounted_terminated_pods.clone().unwrap_or_default();
    let mut uncounted_ok: BTreeSet<String> = uncounted.succeeded.into_iter().flatten().collect();
    let mut uncounted_failed: BTreeSet<String> = uncounted.failed.into_iter().flatten().collect();
    let mut completed = parse_indexes(old.completed_indexes.as_deref().unwrap_or(""));
    let finished = has_condition(&old, "Complete") || has_condition(&old, "Failed");
    let mut fail_job: Option<String> = None;

    // Finished pods with the finalizer: record them as uncounted, then let the finalizer go.
    let with_finalizer: BTreeSet<&str> = pods_of_job
        .iter()
        .filter(|p| has_finalizer(&p.metadata))
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    for pod in pods_of_job.iter().filter(|p| has_finalizer(&p.metadata)) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        if uncounted_ok.contains(&uid) || uncounted_failed.contains(&uid) {
            plan.finalize.push(name);
            continue;
        }
        if finished || pods::is_deleting(&job.metadata) {
            // Nothing more is counted for a finished or deleted Job; its pods must not be held.
            if outcome(pod, replace_only_failed).is_some()
                || pods::is_deleting(&pod.metadata)
                || pods::is_deleting(&job.metadata)
            {
                plan.finalize.push(name);
            }
            continue;
        }
        match outcome(pod, replace_only_failed) {
            None => {}
            Some(Outcome::Succeeded) => {
                if indexed
                    && let Some(i) = index_of(pod).filter(|i| completions.is_some_and(|c| *i < c))
                {
                    completed.insert(i);
                }
                uncounted_ok.insert(uid);
                plan.finalize.push(name);
            }
            Some(Outcome::Failed) => {
                match verdict(&rules, pod) {
                    Verdict::Ignore => {}
                    Verdict::Count => {
                        uncounted_failed.insert(uid);
                    }
                    Verdict::FailJob(message) => {
                        fail_job.get_or_insert(message);
                        uncounted_failed.insert(uid);
                    }
                }
                plan.finalize.push(name);
            }
        }
    }
    // Uncounted pods whose finalizer is gone (or that are gone) are counted now.
    let mut succeeded = old.succeeded.unwrap_or(0);
    let mut failed = old.failed.unwrap_or(0);
    uncounted_ok.retain(|uid| {
        let keep = with_finalizer.contains(uid.as_str());
        if !keep {
            succeeded += 1;
        }
        keep
    });
    uncounted_failed.retain(|uid| {
        let keep = with_finalizer.contains(uid.as_str());
        if !keep {
            failed += 1;
        }
        keep
    });
    if indexed {
        succeeded = completed.len() as i32;
    }
    status.succeeded = Some(succeeded);
    status.failed = Some(failed);
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
        succeeded: (!uncounted_ok.is_empty()).then(|| uncounted_ok.iter().cloned().collect()),
        failed: (!uncounted_failed.is_empty()).then(|| uncounted_failed.iter().cloned().collect()),
    });
    if indexed {
        status.completed_indexes = Some(format_indexes(&completed));
    }

    let active: Vec<&Pod> = pods_of_job
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    status.active = Some(active.len() as i32);
    status.ready = Some(active.iter().filter(|p| pods::is_ready(p)).count() as i32);
    status.terminating = Some(
        pods_of_job
            .iter()
            .filter(|p| pods::is_deleting(&p.metadata) && !pods::is_terminal(p))
            .count() as i32,
    );
    let pending_count = uncounted_ok.len() + uncounted_failed.len();

    if finished || pods::is_deleting(&job.metadata) {
        if finished {
            plan.delete = active
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
        }
        plan.status = status;
        return plan;
    }

    let suspended = spec.suspend == Some(true);
    if suspended {
        set_condition(
            &mut status,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now,
        );
    } else {
        if status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Suspended" && c.status == "True")
        {
            set_condition(
                &mut status,
                "Suspended",
                "False",
                "JobResumed",
                "Job resumed",
                now,
            );
            // The deadline counts from the resumption.
            status.start_time = Some(Time(now));
        }
        if status.start_time.is_none() {
            status.start_time = Some(Time(now));
        }
    }

    // Failure first: a policy's FailJob, the backoff limit, the deadline.
    let restarts: i32 = if on_failure {
        active
            .iter()
            .flat_map(|p| {
                p.status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
            })
            .map(|c| c.restart_count)
            .sum()
    } else {
        0
    };
    let failures = failed + uncounted_failed.len() as i32 + restarts;
    let mut failure: Option<(String, String)> = condition_of(&status, "FailureTarget").map(|c| {
        (
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        )
    });
    if failure.is_none() {
        let deadline = spec.active_deadline_seconds.and_then(|secs| {
            let start = status.start_time.as_ref()?.0;
            start
                .checked_add(jiff::SignedDuration::from_secs(secs))
                .ok()
        });
        failure = if let Some(message) = fail_job {
            Some(("PodFailurePolicy".into(), message))
        } else if failures > backoff_limit {
            Some((
                "BackoffLimitExceeded".into(),
                "Job has reached the specified backoff limit".into(),
            ))
        } else if !suspended && deadline.is_some_and(|d| d <= now) {
            Some((
                "DeadlineExceeded".into(),
                "Job was active longer than specified deadline".into(),
            ))
        } else {
            if !suspended {
                plan.requeue_at = deadline;
            }
            None
        };
        if let Some((reason, message)) = &failure {
            set_condition(&mut status, "FailureTarget", "True", reason, message, now);
        }
    }

    let succeeded_total = if indexed {
        completed.len() as i32
    } else {
        succeeded + uncounted_ok.len() as i32
    };
    let success = failure.is_none()
        && (has_condition(&status, "SuccessCriteriaMet")
            || match completions {
                Some(c) => succeeded_total >= c,
                None => succeeded_total > 0 && active.is_empty(),
            });
    if success {
        set_condition(
            &mut status,
            "SuccessCriteriaMet",
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        );
    }

    if failure.is_some() || success {
        plan.delete = active
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        // Finished once no pod is running or waiting to be counted.
        if active.is_empty() && pending_count == 0 && status.terminating == Some(0) {
            match &failure {
                Some((reason, message)) => {
                    set_condition(&mut status, "Failed", "True", reason, message, now);
                }
                None => {
                    set_condition(
                        &mut status,
                        "Complete",
                        "True",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        now,
                    );
                    status.completion_time = Some(Time(now));
                }
            }
        }
        plan.requeue_at = None;
        plan.status = status;
        if !may_manage {
            plan.delete.clear();
        }
        return plan;
    }

    if suspended {
        plan.delete = active
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
    } else if indexed {
        manage_indexed(&mut plan, &active, &completed, completions, parallelism);
    } else {
        let want = match completions {
            Some(c) => parallelism.min(c - succeeded_total).max(0),
            None if succeeded_total > 0 => active.len() as i32,
            None => parallelism,
        } as usize;
        if want > active.len() {
            plan.create = vec![None; (want - active.len()).min(MAX_CREATES)];
        } else if want < active.len() {
            let mut ranked = active.clone();
            ranked.sort_by(|a, b| pods::deletion_order(a, b));
            plan.delete = ranked[..active.len() - want]
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
        }
    }
    if !may_manage {
        plan.create.clear();
        plan.delete.clear();
    }
    plan.status = status;
    plan
}

/// An Indexed Job's pods: one active pod per index not yet completed, the lowest first, at most
/// `parallelism` at once; duplicates and pods of no valid index go.
fn manage_indexed(
    plan: &mut Plan,
    active: &[&Pod],
    completed: &BTreeSet<i32>,
    completions: Option<i32>,
    parallelism: i32,
) {
    let completions = completions.unwrap_or(0);
    let mut by_index: BTreeMap<i32, &Pod> = BTreeMap::new();
    for pod in active {
        match index_of(pod) {
            Some(i) if (0..completions).contains(&i) && !completed.contains(&i) => {
                if let std::collections::btree_map::Entry::Vacant(e) = by_index.entry(i) {
                    e.insert(pod);
                } else {
                    plan.delete.extend(pod.metadata.name.clone());
                }
            }
            _ => plan.delete.extend(pod.metadata.name.clone()),
        }
    }
    let parallelism = parallelism as usize;
    while by_index.len() > parallelism {
        let (_, pod) = by_index.pop_last().expect("more than parallelism");
        plan.delete.extend(pod.metadata.name.clone());
    }
    let room = parallelism - by_index.len();
    plan.create = (0..completions)
        .filter(|i| !completed.contains(i) && !by_index.contains_key(i))
        .take(room.min(MAX_CREATES))
        .map(Some)
        .collect();
}

/// A new pod of `job` from its template: the template's labels and annotations, the tracking
/// finalizer, a controller reference, and for an Indexed Job its completion index (annotation,
/// label, `JOB_COMPLETION_INDEX` from the annotation, and the hostname `<job>-<index>`).
pub fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    let spec = job.spec.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let owner = pods::controller_ref("batch/v1", "Job", &job.metadata);
    let prefix = match index {
        Some(i) => format!("{name}-{i}"),
        None => name.clone(),
    };
    let mut pod = pods::pod_from_template(&spec.template, &ns, &prefix, owner);
    pod.metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(TRACKING_FINALIZER.to_string());
    if let Some(i) = index {
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), i.to_string());
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), i.to_string());
        let env = EnvVar {
            name: COMPLETION_INDEX_ENV.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                }),
                ..EnvVarSource::default()
            }),
        };
        if let Some(ps) = pod.spec.as_mut() {
            for c in ps
                .containers
                .iter_mut()
                .chain(ps.init_containers.iter_mut().flatten())
            {
                let vars = c.env.get_or_insert_with(Vec::new);
                if !vars.iter().any(|v| v.name == COMPLETION_INDEX_ENV) {
                    vars.push(env.clone());
                }
            }
            if ps.hostname.is_none() {
                ps.hostname = Some(prefix.clone());
            }
        }
    }
    pod
}

/// Whether the sync changes the stored status.
pub fn status_changed(job: &Job, new: &JobStatus) -> bool {
    let old = job.status.clone().unwrap_or_default();
    serde_json::to_value(&old).ok() != serde_json::to_value(new).ok()
}

/// The finalizers of `pod` without the tracking one.
pub fn without_tracking(pod: &Pod) -> Vec<String> {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != TRACKING_FINALIZER)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use serde_json::json;

    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn job(spec: serde_json::Value) -> Job {
        let mut spec = spec;
        spec["template"] = json!({"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}});
        for (k, v) in [
            ("parallelism", json!(1)),
            ("backoffLimit", json!(6)),
            ("completionMode", json!("NonIndexed")),
        ] {
            if spec.get(k).is_none() {
                spec[k] = v;
            }
        }
        if spec.get("completions").is_none() && spec["parallelism"] == 1 {
            spec["completions"] = json!(1);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
            "spec": spec,
        }))
        .unwrap()
    }

    /// A pod of the Job, as created by [`new_pod`], named `j-<n>` with uid `u<n>`.
    fn pod(job: &Job, n: usize, index: Option<i32>, phase: &str) -> Pod {
        let mut p = new_pod(job, index);
        p.metadata.name = Some(format!("j-{n}"));
        p.metadata.uid = Some(format!("u{n}"));
        p.metadata.creation_timestamp = Some(Time(at(n as i64)));
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        });
        p
    }

    fn exited(mut p: Pod, code: i32) -> Pod {
        let status = p.status.get_or_insert_with(Default::default);
        status.phase = Some(if code == 0 { "Succeeded" } else { "Failed" }.into());
        status.container_statuses = Some(vec![ContainerStatus {
            name: "c".into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        p
    }

    fn unfinalized(mut p: Pod) -> Pod {
        p.metadata.finalizers = Some(without_tracking(&p));
        p
    }

    /// Applies a plan's status to the job, as the shell's status write does.
    fn written(job: &Job, plan: &Plan) -> Job {
        let mut j = job.clone();
        j.status = Some(plan.status.clone());
        j
    }

    fn reason(status: &JobStatus, type_: &str) -> Option<String> {
        condition_of(status, type_).and_then(|c| c.reason.clone())
    }

    #[test]
    fn indexes_format_as_kubernetes_writes_them() {
        let set = |v: &[i32]| v.iter().copied().collect::<BTreeSet<_>>();
        assert_eq!(format_indexes(&set(&[0, 1, 2, 4, 6, 7])), "0-2,4,6,7");
        assert_eq!(format_indexes(&set(&[])), "");
        assert_eq!(parse_indexes("0-2,4,6,7"), set(&[0, 1, 2, 4, 6, 7]));
        assert_eq!(parse_indexes(""), set(&[]));
    }

    #[test]
    fn new_pods_carry_finalizer_owner_and_index() {
        let j = job(json!({"completionMode": "Indexed", "completions": 5, "parallelism": 2}));
        let p = new_pod(&j, Some(3));
        assert_eq!(p.metadata.generate_name.as_deref(), Some("j-3-"));
        assert_eq!(
            p.metadata.finalizers,
            Some(vec![TRACKING_FINALIZER.to_string()])
        );
        assert_eq!(index_of(&p), Some(3));
        assert_eq!(p.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX], "3");
        let owner = pods::controller_of(&p.metadata).unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Job", "job-uid")
        );
        let spec = p.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("j-3"));
        let env = &spec.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, COMPLETION_INDEX_ENV);
        assert_eq!(
            env.value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
        let plain = new_pod(&job(json!({})), None);
        assert_eq!(plain.metadata.generate_name.as_deref(), Some("j-"));
        assert!(plain.metadata.annotations.is_none());
    }

    #[test]
    fn a_new_job_starts_parallelism_pods_and_its_clock() {
        let j = job(json!({"completions": 5, "parallelism": 2}));
        let plan = plan(&j, &[], at(0), true);
        assert_eq!(plan.create, vec![None, None]);
        assert_eq!(plan.status.start_time, Some(Time(at(0))));
        assert_eq!(plan.status.active, Some(0));
        // Near the end, no more than the completions left.
        let mut j = j;
        j.status = Some(JobStatus {
            succeeded: Some(4),
            start_time: Some(Time(at(0))),
            ..Default::default()
        });
        assert_eq!(super::plan(&j, &[], at(1), true).create, vec![None]);
    }

    #[test]
    fn counting_goes_through_uncounted_exactly_once() {
        let j = job(json!({}));
        let done = exited(pod(&j, 1, None, "Running"), 0);
        // 1. The finished pod is recorded, its finalizer may go; nothing is counted yet.
        let p1 = plan(&j, &[&done], at(1), true);
        assert_eq!(p1.finalize, vec!["j-1"]);
        assert_eq!(p1.status.succeeded, Some(0));
        let uncounted = p1.status.uncounted_terminated_pods.clone().unwrap();
        assert_eq!(uncounted.succeeded, Some(vec!["u1".to_string()]));
        assert!(
            p1.create.is_empty(),
            "the success is known: {:?}",
            p1.create
        );
        assert_eq!(
            reason(&p1.status, "SuccessCriteriaMet").as_deref(),
            Some("CompletionsReached")
        );
        assert!(!has_condition(&p1.status, "Complete"));
        let j = written(&j, &p1);
        // A restart before the finalizer went: the same step again, no double count.
        let again = plan(&j, &[&done], at(2), true);
        assert_eq!(again.finalize, vec!["j-1"]);
        assert_eq!(again.status.succeeded, Some(0));
        // 2. The finalizer is gone: counted, uncounted empty, and the Job is complete.
        let gone = unfinalized(done.clone());
        let p2 = plan(&j, &[&gone], at(3), true);
        assert!(p2.finalize.is_empty());
        assert_eq!(p2.status.succeeded, Some(1));
        assert_eq!(
            p2.status.uncounted_terminated_pods,
            Some(UncountedTerminatedPods::default())
        );
        assert!(has_condition(&p2.status, "Complete"));
        assert_eq!(p2.status.completion_time, Some(Time(at(3))));
        let j = written(&j, &p2);
        // 3. Seen again (a resync, a restart): nothing changes.
        let p3 = plan(&j, &[&gone], at(4), true);
        assert!(!status_changed(&j, &p3.status), "{:?}", p3.status);
        assert!(p3.create.is_empty() && p3.finalize.is_empty());
        // And a pod that vanished after its finalizer went is counted once too.
        let p4 = plan(&written(&j, &p1), &[], at(5), true);
        assert_eq!(p4.status.succeeded, Some(1));
    }

    #[test]
    fn failures_past_the_backoff_limit_fail_the_job() {
        let j = job(json!({"backoffLimit": 1}));
        let f1 = exited(pod(&j, 1, None, "Running"), 1);
        let plan1 = plan(&j, &[&f1], at(1), true);
        assert_eq!(plan1.create, vec![None], "a replacement");
        assert!(condition_of(&plan1.status, "FailureTarget").is_none());
        let j = written(&j, &plan1);
        let f1 = unfinalized(f1);
        let f2 = exited(pod(&j, 2, None, "Running"), 1);
        let plan2 = plan(&j, &[&f1, &f2], at(2), true);
        assert_eq!(plan2.status.failed, Some(1));
        assert_eq!(
            reason(&plan2.status, "FailureTarget").as_deref(),
            Some("BackoffLimitExceeded")
        );
        assert!(plan2.create.is_empty());
        // Failed only once the last failure is counted.
        assert!(!has_condition(&plan2.status, "Failed"));
        let j = written(&j, &plan2);
        let plan3 = plan(&j, &[&f1, &unfinalized(f2)], at(3), true);
        assert_eq!(plan3.status.failed, Some(2));
        assert_eq!(
            reason(&plan3.status, "Failed").as_deref(),
            Some("BackoffLimitExceeded")
        );
        let message = condition_of(&plan3.status, "Failed")
            .unwrap()
            .message
            .clone();
        assert_eq!(
            message.as_deref(),
            Some("Job has reached the specified backoff limit")
        );
        assert!(plan3.status.completion_time.is_none());
    }

    #[test]
    fn indexed_jobs_create_the_lowest_missing_indexes() {
        let j = job(json!({"completionMode": "Indexed", "completions": 5, "parallelism": 2}));
        let first = plan(&j, &[], at(0), true);
        assert_eq!(first.create, vec![Some(0), Some(1)]);
        let j = written(&j, &first);
        let p0 = exited(pod(&j, 1, Some(0), "Running"), 0);
        let p1 = pod(&j, 2, Some(1), "Running");
        let next = plan(&j, &[&p0, &p1], at(1), true);
        assert_eq!(next.create, vec![Some(2)]);
        assert_eq!(next.status.completed_indexes.as_deref(), Some("0"));
        assert_eq!(next.status.succeeded, Some(1));
        // A duplicate of a running index, and an index out of range, are deleted.
        let dup = pod(&j, 3, Some(1), "Running");
        let stray = pod(&j, 4, Some(9), "Pending");
        let fixed = plan(
            &written(&j, &next),
            &[&unfinalized(p0), &p1, &dup, &stray],
            at(2),
            true,
        );
        assert_eq!(fixed.delete, vec!["j-3", "j-4"]);
        assert_eq!(fixed.create, vec![Some(2)]);
    }

    #[test]
    fn an_indexed_job_completes_when_every_index_succeeded() {
        let mut j = job(json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}));
        j.status = Some(JobStatus {
            start_time: Some(Time(at(0))),
            completed_indexes: Some("0,1".into()),
            succeeded: Some(2),
            ..Default::default()
        });
        let p2 = exited(pod(&j, 3, Some(2), "Running"), 0);
        let p = plan(&j, &[&p2], at(5), true);
        assert_eq!(p.status.completed_indexes.as_deref(), Some("0-2"));
        assert!(has_condition(&p.status, "SuccessCriteriaMet"));
        let done = plan(&written(&j, &p), &[&unfinalized(p2)], at(6), true);
        assert!(has_condition(&done.status, "Complete"));
        assert_eq!(done.status.succeeded, Some(3));
    }

    #[test]
    fn the_active_deadline_fails_the_job_and_deletes_its_pods() {
        let mut j = job(json!({"activeDeadlineSeconds": 10}));
        j.status = Some(JobStatus {
            start_time: Some(Time(at(0))),
            ..Default::default()
        });
        let running = pod(&j, 1, None, "Running");
        let early = plan(&j, &[&running], at(5), true);
        assert_eq!(early.requeue_at, Some(at(10)));
        assert!(early.delete.is_empty());
        let late = plan(&j, &[&running], at(10), true);
        assert_eq!(
            reason(&late.status, "FailureTarget").as_deref(),
            Some("DeadlineExceeded")
        );
        assert_eq!(late.delete, vec!["j-1"]);
        // The deleted pod counts as failed, and then the Job has failed.
        let j = written(&j, &late);
        let mut deleting = running.clone();
        deleting.metadata.deletion_timestamp = Some(Time(at(10)));
        let p = plan(&j, &[&deleting], at(11), true);
        assert_eq!(p.finalize, vec!["j-1"]);
        let p = plan(&written(&j, &p), &[], at(12), true);
        assert_eq!(
            reason(&p.status, "Failed").as_deref(),
            Some("DeadlineExceeded")
        );
        assert_eq!(p.status.failed, Some(1));
    }

    #[test]
    fn suspend_deletes_pods_and_resume_restarts_the_clock() {
        let j = job(json!({"suspend": true, "parallelism": 2, "completions": 4}));
        let running = pod(&j, 1, None, "Running");
        let p = plan(&j, &[&running], at(1), true);
        assert_eq!(p.delete, vec!["j-1"]);
        assert!(p.create.is_empty());
        assert!(p.status.start_time.is_none());
        assert_eq!(
            reason(&p.status, "Suspended").as_deref(),
            Some("JobSuspended")
        );
        let mut resumed = written(&j, &p);
        resumed.spec.as_mut().unwrap().suspend = Some(false);
        let p = plan(&resumed, &[], at(9), true);
        assert_eq!(p.create.len(), 2);
        assert_eq!(p.status.start_time, Some(Time(at(9))));
        let suspended = p.status.conditions.as_ref().unwrap();
        assert_eq!(suspended[0].status, "False");
        assert_eq!(suspended[0].reason.as_deref(), Some("JobResumed"));
    }

    #[test]
    fn pod_failure_policy_ignores_counts_or_fails() {
        let rules = json!({"rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In",
                                                  "values": [3]}},
        ]});
        let j = job(json!({"podFailurePolicy": rules, "backoffLimit": 0,
                           "podReplacementPolicy": "Failed"}));
        // Exit 42 is ignored: not counted, replaced, finalizer released.
        let ignored = exited(pod(&j, 1, None, "Running"), 42);
        let p = plan(&j, &[&ignored], at(1), true);
        assert_eq!(p.finalize, vec!["j-1"]);
        assert_eq!(
            p.status.uncounted_terminated_pods,
            Some(UncountedTerminatedPods::default())
        );
        assert!(condition_of(&p.status, "FailureTarget").is_none());
        assert_eq!(p.create, vec![None]);
        // Exit 3 fails the Job at once, with the rule in the message.
        let fatal = exited(pod(&j, 2, None, "Running"), 3);
        let p = plan(&j, &[&fatal], at(2), true);
        assert_eq!(
            reason(&p.status, "FailureTarget").as_deref(),
            Some("PodFailurePolicy")
        );
        assert_eq!(
            condition_of(&p.status, "FailureTarget")
                .unwrap()
                .message
                .as_deref(),
            Some(
                "Container c for pod ns/j-2 failed with exit code 3 matching FailJob rule at index 1"
            )
        );
        // Another code counts: past backoffLimit 0.
        let counted = exited(pod(&j, 3, None, "Running"), 1);
        let p = plan(&j, &[&counted], at(3), true);
        assert_eq!(
            reason(&p.status, "FailureTarget").as_deref(),
            Some("BackoffLimitExceeded")
        );
        // With pods replaced only once Failed, a pod being deleted is not a failure yet.
        let mut deleting = pod(&j, 4, None, "Running");
        deleting.metadata.deletion_timestamp = Some(Time(at(4)));
        let p = plan(&j, &[&deleting], at(4), true);
        assert!(p.finalize.is_empty());
        assert_eq!(p.status.terminating, Some(1));
    }

    #[test]
    fn unmet_expectations_hold_back_creates_but_not_counting() {
        let j = job(json!({"completions": 3, "parallelism": 2}));
        let done = exited(pod(&j, 1, None, "Running"), 0);
        let p = plan(&j, &[&done], at(1), false);
        assert!(p.create.is_empty());
        assert_eq!(p.finalize, vec!["j-1"]);
        assert_eq!(
            p.status.uncounted_terminated_pods.unwrap().succeeded,
            Some(vec!["u1".to_string()])
        );
    }

    #[test]
    fn a_deleted_job_releases_every_pod() {
        let mut j = job(json!({}));
        j.metadata.deletion_timestamp = Some(Time(at(1)));
        let running = pod(&j, 1, None, "Running");
        let p = plan(&j, &[&running], at(2), true);
        assert_eq!(p.finalize, vec!["j-1"]);
        assert!(p.create.is_empty() && p.delete.is_empty());
    }

    #[test]
    fn restarts_of_on_failure_pods_count_against_the_limit() {
        let mut j = job(json!({"backoffLimit": 2}));
        j.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .restart_policy = Some("OnFailure".into());
        let mut p = pod(&j, 1, None, "Running");
        p.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            name: "c".into(),
            restart_count: 3,
            ..Default::default()
        }]);
        let plan = plan(&j, &[&p], at(1), true);
        assert_eq!(
            reason(&plan.status, "FailureTarget").as_deref(),
            Some("BackoffLimitExceeded")
        );
        assert_eq!(plan.delete, vec!["j-1"]);
    }
}

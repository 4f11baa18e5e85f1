//! batch/v1 rules (`pkg/apis/batch/validation`). Jobs: counts, completion modes, the pod
//! template (pods that restart OnFailure or Never), the generated selector, pod failure
//! policies, and what an update may change (the selector and template are immutable, except a
//! suspended Job that never started may move its pods' scheduling directives). CronJobs: a
//! schedule that parses, a time zone that exists, a name short enough for its Jobs' names, and a
//! Job template that would make a valid Job.

use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec, PodFailurePolicy};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;
use skiff_meta::schedule::{Schedule, time_zone};

use super::apps::{selector_matches, validate_label_selector};
use super::pod::validate_pod_template;
use super::{FieldError, Path};
use super::{decode, s};
use crate::defaults::CONTROLLER_UID_LABEL;

const NEGATIVE: &str = "must be greater than or equal to 0";
const IMMUTABLE: &str = "field is immutable";

/// The most completions (and parallelism) an Indexed Job may have.
const MAX_INDEXED_COMPLETIONS: i32 = 100_000;

fn nonnegative(errs: &mut Vec<FieldError>, path: Path, v: Option<impl Into<i64>>) {
    if let Some(v) = v.map(Into::into)
        && v < 0
    {
        errs.push(FieldError::invalid(path, v, NEGATIVE));
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A Job on create (`old` = None) or update. `uid` is the Job's, for the generated selector.
pub(crate) fn validate_job(
    new: &Value,
    old: Option<&Value>,
    uid: &str,
) -> Result<Vec<FieldError>, FieldError> {
    let job: Job = decode(new, "")?;
    let spec = job.spec.unwrap_or_default();
    let sp = Path::new("spec");
    let mut errs = validate_spec(&spec, &sp);
    if spec.manual_selector != Some(true) {
        errs.extend(validate_generated_selector(&spec, uid, &sp));
    }
    if let Some(old) = old {
        let old: Job = decode(old, "")?;
        errs.extend(validate_update(
            &spec,
            &old.spec.unwrap_or_default(),
            old.status.and_then(|s| s.start_time).is_none(),
            &sp,
        ));
    }
    Ok(errs)
}

/// A Job's spec: its own rules ([`validate_job_spec`]), then a selector that matches the pods
/// (`ValidateJobSpec`'s order).
fn validate_spec(spec: &JobSpec, sp: &Path) -> Vec<FieldError> {
    let mut errs = validate_job_spec(spec, sp);
    let tp = sp.child("template");
    match &spec.selector {
        None => errs.push(FieldError::required(sp.child("selector"), "")),
        Some(sel) => {
            let sel_errs = validate_label_selector(sel, &sp.child("selector"));
            let usable = sel_errs.is_empty();
            errs.extend(sel_errs);
            let labels = template_labels(&spec.template);
            if usable && !selector_matches(sel, &labels) {
                errs.push(FieldError::invalid(
                    tp.child("metadata").child("labels"),
                    to_value(&labels),
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    errs
}

/// What a Job's spec must hold whether it is a Job's or a CronJob's template (whose selector the
/// Job gets when it is created): counts, completion mode, the pod template and how its pods
/// restart, the pod failure policy.
fn validate_job_spec(spec: &JobSpec, sp: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    nonnegative(&mut errs, sp.child("parallelism"), spec.parallelism);
    nonnegative(&mut errs, sp.child("completions"), spec.completions);
    nonnegative(
        &mut errs,
        sp.child("activeDeadlineSeconds"),
        spec.active_deadline_seconds,
    );
    nonnegative(&mut errs, sp.child("backoffLimit"), spec.backoff_limit);
    nonnegative(
        &mut errs,
        sp.child("ttlSecondsAfterFinished"),
        spec.ttl_seconds_after_finished,
    );
    let mode = s(&spec.completion_mode);
    match mode {
        "NonIndexed" | "" => {}
        "Indexed" => match spec.completions {
            None => errs.push(FieldError::required(
                sp.child("completions"),
                "when completion mode is Indexed",
            )),
            Some(c) if c > MAX_INDEXED_COMPLETIONS => errs.push(FieldError::invalid(
                sp.child("completions"),
                c,
                format!(
                    "must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed"
                ),
            )),
            Some(_) => {}
        },
        other => errs.push(FieldError::not_supported(
            sp.child("completionMode"),
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
    if mode == "Indexed"
        && let Some(p) = spec.parallelism
        && p > MAX_INDEXED_COMPLETIONS
    {
        errs.push(FieldError::invalid(
            sp.child("parallelism"),
            p,
            format!(
                "must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed"
            ),
        ));
    }
    if let Some(per_index) = spec.backoff_limit_per_index {
        nonnegative(&mut errs, sp.child("backoffLimitPerIndex"), Some(per_index));
        if mode != "Indexed" {
            errs.push(FieldError::required(
                sp.child("completionMode"),
                "when backoffLimitPerIndex is specified, completionMode must be Indexed",
            ));
        }
    }
    if let Some(max) = spec.max_failed_indexes {
        nonnegative(&mut errs, sp.child("maxFailedIndexes"), Some(max));
        if spec.backoff_limit_per_index.is_none() {
            errs.push(FieldError::required(
                sp.child("backoffLimitPerIndex"),
                "when maxFailedIndexes is specified",
            ));
        }
        if let Some(c) = spec.completions
            && max > c
        {
            errs.push(FieldError::invalid(
                sp.child("maxFailedIndexes"),
                max,
                "must be less than or equal to completions",
            ));
        }
    }
    if let Some(policy) = &spec.pod_replacement_policy
        && !matches!(policy.as_str(), "TerminatingOrFailed" | "Failed")
    {
        errs.push(FieldError::not_supported(
            sp.child("podReplacementPolicy"),
            policy.as_str(),
            &["Failed", "TerminatingOrFailed"],
        ));
    }

    let tp = sp.child("template");
    errs.extend(validate_pod_template(&spec.template, &tp));
    let restart = s(&spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.restart_policy.clone()))
    .to_string();
    let restart_path = tp.child("spec").child("restartPolicy");
    if restart != "OnFailure" && restart != "Never" {
        errs.push(FieldError::not_supported(
            restart_path,
            restart.as_str(),
            &["OnFailure", "Never"],
        ));
    } else if spec.pod_failure_policy.is_some() && restart != "Never" {
        errs.push(FieldError::invalid(
            restart_path,
            restart.as_str(),
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
    if let Some(policy) = &spec.pod_failure_policy {
        errs.extend(validate_pod_failure_policy(
            policy,
            spec,
            &sp.child("podFailurePolicy"),
        ));
    }
    errs
}

fn template_labels(t: &PodTemplateSpec) -> std::collections::BTreeMap<String, String> {
    t.metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

/// With a generated selector, the template's and the selector's uid label must be the Job's.
fn validate_generated_selector(spec: &JobSpec, uid: &str, sp: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(sel) = &spec.selector else {
        return errs;
    };
    let labels = template_labels(&spec.template);
    if labels.get(CONTROLLER_UID_LABEL).map(String::as_str) != Some(uid) {
        errs.push(FieldError::invalid(
            sp.child("template")
                .child("metadata")
                .child("labels")
                .key(CONTROLLER_UID_LABEL),
            labels
                .get(CONTROLLER_UID_LABEL)
                .cloned()
                .unwrap_or_default(),
            format!("must be '{uid}'"),
        ));
    }
    let selected = sel
        .match_labels
        .as_ref()
        .and_then(|m| m.get(CONTROLLER_UID_LABEL));
    if selected.map(String::as_str) != Some(uid) {
        errs.push(FieldError::invalid(
            sp.child("selector"),
            to_value(sel),
            "`selector` not auto-generated",
        ));
    }
    errs
}

fn validate_pod_failure_policy(
    policy: &PodFailurePolicy,
    spec: &JobSpec,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let containers: Vec<&str> = spec
        .template
        .spec
        .iter()
        .flat_map(|p| {
            p.containers
                .iter()
                .chain(p.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect();
    for (i, rule) in policy.rules.iter().enumerate() {
        let rp = path.child("rules").index(i);
        match rule.action.as_str() {
            "FailJob" | "Ignore" | "Count" => {}
            "FailIndex" => {
                if spec.backoff_limit_per_index.is_none() {
                    errs.push(FieldError::forbidden(
                        rp.child("action"),
                        "requires the backoffLimitPerIndex to be set",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                rp.child("action"),
                other,
                &["Count", "FailIndex", "FailJob", "Ignore"],
            )),
        }
        match (&rule.on_exit_codes, &rule.on_pod_conditions) {
            (Some(_), Some(c)) if !c.is_empty() => errs.push(FieldError::invalid(
                rp,
                Value::Null,
                "specifying both OnExitCodes and OnPodConditions is not supported",
            )),
            (None, None) => errs.push(FieldError::invalid(
                rp,
                Value::Null,
                "specifying one of OnExitCodes and OnPodConditions is required",
            )),
            (None, Some(c)) if c.is_empty() => errs.push(FieldError::invalid(
                rp,
                Value::Null,
                "specifying one of OnExitCodes and OnPodConditions is required",
            )),
            (Some(codes), _) => {
                let cp = rp.child("onExitCodes");
                if let Some(name) = &codes.container_name
                    && !containers.contains(&name.as_str())
                {
                    errs.push(FieldError::invalid(
                        cp.child("containerName"),
                        name.as_str(),
                        "must be one of the container or initContainer names in the pod template",
                    ));
                }
                if !matches!(codes.operator.as_str(), "In" | "NotIn") {
                    errs.push(FieldError::not_supported(
                        cp.child("operator"),
                        codes.operator.as_str(),
                        &["In", "NotIn"],
                    ));
                }
                if codes.values.is_empty() {
                    errs.push(FieldError::invalid(
                        cp.child("values"),
                        to_value(&codes.values),
                        "at least one value is required",
                    ));
                }
                let mut previous: Option<i32> = None;
                for (vi, v) in codes.values.iter().enumerate() {
                    let vp = cp.child("values").index(vi);
                    if *v == 0 && codes.operator == "In" {
                        errs.push(FieldError::invalid(
                            vp.clone(),
                            *v,
                            "must not be 0 for the In operator",
                        ));
                    }
                    match previous {
                        Some(p) if p == *v => errs.push(FieldError::duplicate(vp, *v)),
                        Some(p) if p > *v => {
                            errs.push(FieldError::invalid(vp, *v, "must be ordered"))
                        }
                        _ => {}
                    }
                    previous = Some(*v);
                }
            }
            (None, Some(conditions)) => {
                for (ci, c) in conditions.iter().enumerate() {
                    let cp = rp.child("onPodConditions").index(ci);
                    if !matches!(c.status.as_str(), "True" | "False" | "Unknown") {
                        errs.push(FieldError::not_supported(
                            cp.child("status"),
                            c.status.as_str(),
                            &["False", "True", "Unknown"],
                        ));
                    }
                }
            }
        }
    }
    errs
}

/// What an update may not change. `not_started`: the old Job has no start time.
fn validate_update(new: &JobSpec, old: &JobSpec, not_started: bool, sp: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let immutable = |errs: &mut Vec<FieldError>, name: &str, new: Value, old: Value| {
        if new != old {
            errs.push(FieldError::invalid(sp.child(name), new, IMMUTABLE));
        }
    };
    immutable(
        &mut errs,
        "selector",
        to_value(&new.selector),
        to_value(&old.selector),
    );
    immutable(
        &mut errs,
        "completionMode",
        to_value(&new.completion_mode),
        to_value(&old.completion_mode),
    );
    immutable(
        &mut errs,
        "podFailurePolicy",
        to_value(&new.pod_failure_policy),
        to_value(&old.pod_failure_policy),
    );
    immutable(
        &mut errs,
        "backoffLimitPerIndex",
        to_value(&new.backoff_limit_per_index),
        to_value(&old.backoff_limit_per_index),
    );
    immutable(
        &mut errs,
        "manualSelector",
        to_value(&new.manual_selector),
        to_value(&old.manual_selector),
    );
    // An Indexed Job may scale when completions move with parallelism (elastic Indexed Jobs).
    let elastic = s(&new.completion_mode) == "Indexed"
        && new.completions == new.parallelism
        && old.completions == old.parallelism;
    if !elastic {
        immutable(
            &mut errs,
            "completions",
            to_value(&new.completions),
            to_value(&old.completions),
        );
    }
    let template_changed = to_value(&new.template) != to_value(&old.template);
    let suspended_unstarted = old.suspend == Some(true) && not_started;
    if template_changed
        && !(suspended_unstarted && only_scheduling_changed(&new.template, &old.template))
    {
        errs.push(FieldError::invalid(
            sp.child("template"),
            to_value(&new.template),
            IMMUTABLE,
        ));
    }
    errs
}

/// Whether two templates differ only in what a suspended Job may change before it starts: the
/// pods' labels and annotations, node selector, tolerations, affinity and scheduling gates.
fn only_scheduling_changed(new: &PodTemplateSpec, old: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(m) = t.metadata.as_mut() {
            m.labels = None;
            m.annotations = None;
        }
        if let Some(p) = t.spec.as_mut() {
            p.node_selector = None;
            p.tolerations = None;
            p.affinity = None;
            p.scheduling_gates = None;
        }
        to_value(&t)
    };
    strip(new) == strip(old)
}

/// How long a CronJob's name may be: its Jobs are named `<name>-<minutes since the epoch>`,
/// eleven characters more, and a Job's name must stay a DNS-1035 label (63).
const MAX_CRON_JOB_NAME: usize = 63 - 11;

/// A CronJob on create (`old` = None) or update (which may change any of its spec: the template
/// applies to the Jobs made from then on).
pub(crate) fn validate_cron_job(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let cron_job: CronJob = decode(new, "")?;
    let mut errs = Vec::new();
    let name = cron_job.metadata.name.as_deref().unwrap_or("");
    if old.is_none() && name.len() > MAX_CRON_JOB_NAME {
        errs.push(FieldError::invalid(
            Path::new("metadata").child("name"),
            name,
            format!("must be no more than {MAX_CRON_JOB_NAME} characters"),
        ));
    }
    let spec = cron_job.spec.unwrap_or_default();
    let sp = Path::new("spec");
    // A schedule that already said TZ= may keep it on update; a new one must use timeZone.
    let old_schedule_had_tz = old
        .and_then(|o| o.pointer("/spec/schedule"))
        .and_then(Value::as_str)
        .is_some_and(|s| s.contains("TZ"));
    if spec.schedule.is_empty() {
        errs.push(FieldError::required(sp.child("schedule"), ""));
    } else {
        let text = spec.schedule.as_str();
        let without_tz = text
            .strip_prefix("CRON_TZ=")
            .or_else(|| text.strip_prefix("TZ="))
            .map(|rest| rest.split_once(' ').map_or("", |(_, s)| s))
            .filter(|_| old_schedule_had_tz)
            .unwrap_or(text);
        if let Err(reason) = Schedule::parse(without_tz) {
            errs.push(FieldError::invalid(sp.child("schedule"), text, reason));
        }
        if text.contains("TZ") {
            if !old_schedule_had_tz {
                errs.push(FieldError::invalid(
                    sp.child("schedule"),
                    text,
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                ));
            } else if spec.time_zone.is_some() {
                errs.push(FieldError::invalid(
                    sp.child("schedule"),
                    text,
                    "cannot use both timeZone field and TZ or CRON_TZ in schedule",
                ));
            }
        }
    }
    if let Some(zone) = &spec.time_zone {
        let zp = sp.child("timeZone");
        // Each part as Kubernetes allows it: 1-14 of `[A-Za-z.-_0-9+]`, not `.`, `..` or `-...`.
        let explicit = zone.split('/').all(|part| {
            (1..=14).contains(&part.len())
                && part != "."
                && part != ".."
                && !part.starts_with('-')
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-_+".contains(&b))
        });
        if zone.is_empty() {
            errs.push(FieldError::invalid(
                zp,
                zone.as_str(),
                "timeZone must be nil or non-empty string",
            ));
        } else if !explicit {
            errs.push(FieldError::invalid(
                zp,
                zone.as_str(),
                format!("unknown time zone {zone}"),
            ));
        } else if zone.eq_ignore_ascii_case("Local") {
            errs.push(FieldError::invalid(
                zp,
                zone.as_str(),
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ));
        } else if let Err(reason) = time_zone(Some(zone)) {
            errs.push(FieldError::invalid(zp, zone.as_str(), reason));
        }
    }
    match s(&spec.concurrency_policy) {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(FieldError::required(sp.child("concurrencyPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            sp.child("concurrencyPolicy"),
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    nonnegative(
        &mut errs,
        sp.child("startingDeadlineSeconds"),
        spec.starting_deadline_seconds,
    );
    nonnegative(
        &mut errs,
        sp.child("successfulJobsHistoryLimit"),
        spec.successful_jobs_history_limit,
    );
    nonnegative(
        &mut errs,
        sp.child("failedJobsHistoryLimit"),
        spec.failed_jobs_history_limit,
    );
    let tp = sp.child("jobTemplate").child("spec");
    let job = spec.job_template.spec.unwrap_or_default();
    errs.extend(validate_job_spec(&job, &tp));
    if let Some(selector) = &job.selector {
        errs.push(FieldError::invalid(
            tp.child("selector"),
            to_value(selector),
            "`selector` will be auto-generated",
        ));
    }
    if job.manual_selector == Some(true) {
        errs.push(FieldError::not_supported(
            tp.child("manualSelector"),
            true,
            &["nil", "false"],
        ));
    }
    Ok(errs)
}

/// `/status` updates of a Job: counts are non-negative.
pub(crate) fn validate_job_status(new: &Value) -> Result<Vec<FieldError>, FieldError> {
    let job: Job = decode(new, "")?;
    let status = job.status.unwrap_or_default();
    let sp = Path::new("status");
    let mut errs = Vec::new();
    nonnegative(&mut errs, sp.child("active"), status.active);
    nonnegative(&mut errs, sp.child("ready"), status.ready);
    nonnegative(&mut errs, sp.child("succeeded"), status.succeeded);
    nonnegative(&mut errs, sp.child("failed"), status.failed);
    nonnegative(&mut errs, sp.child("terminating"), status.terminating);
    Ok(errs)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::test_util::info;
    use super::super::{validate_create, validate_update};

    const UID: &str = "0b7f6c1e-0000-4000-8000-000000000001";

    /// A Job as the server has it before validation: defaulted, uid assigned, selector generated.
    fn prepared(mut job: Value) -> Value {
        let kind = info("batch", "Job");
        job["metadata"]["uid"] = json!(UID);
        kind.prepare_for_create(&mut job);
        kind.default(&mut job);
        job
    }

    fn job(spec: Value) -> Value {
        let mut spec = spec;
        if spec.get("template").is_none() {
            spec["template"] = json!({"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]
            }});
        }
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "default"},
            "spec": spec,
        })
    }

    fn create_msgs(job: Value) -> Vec<String> {
        let job = prepared(job);
        validate_create(info("batch", "Job"), &job, Some("default"))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn update_msgs(new: Value, old: &Value) -> Vec<String> {
        let kind = info("batch", "Job");
        let mut new = new;
        kind.default(&mut new);
        validate_update(kind, &new, old)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_plain_job_is_defaulted_and_valid() {
        let j = prepared(job(json!({})));
        assert_eq!(j["spec"]["completions"], 1);
        assert_eq!(j["spec"]["parallelism"], 1);
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert_eq!(j["spec"]["completionMode"], "NonIndexed");
        assert_eq!(j["spec"]["suspend"], false);
        assert_eq!(j["spec"]["manualSelector"], false);
        assert_eq!(j["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            j["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": UID}})
        );
        let labels = &j["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(labels["controller-uid"], UID);
        // The Job takes its template's labels when it has none.
        assert_eq!(j["metadata"]["labels"], *labels);
        assert!(create_msgs(job(json!({}))).is_empty());
    }

    #[test]
    fn the_job_kubectl_create_job_sends_is_valid() {
        let path = crate::package_dir().join("testdata/protobuf/job.v1_33.pb");
        let body = std::fs::read(path).unwrap();
        let object = crate::protobuf::decode(&body).unwrap();
        let mut object = info("batch", "Job").decode(&object).unwrap();
        object["metadata"]["namespace"] = json!("default");
        assert_eq!(create_msgs(object), Vec::<String>::new());
    }

    #[test]
    fn only_parallelism_leaves_completions_unset() {
        let j = prepared(job(json!({"parallelism": 3})));
        assert!(j["spec"].get("completions").is_none());
        let j = prepared(job(json!({"backoffLimitPerIndex": 1, "completions": 2,
                                    "completionMode": "Indexed"})));
        assert_eq!(j["spec"]["backoffLimit"], i32::MAX);
        let j = prepared(job(json!({"podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}})));
        assert_eq!(j["spec"]["podReplacementPolicy"], "Failed");
        assert_eq!(
            j["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
            "True"
        );
    }

    #[test]
    fn restart_policy_counts_and_modes() {
        let always = job(json!({"template": {"spec": {
            "containers": [{"name": "c", "image": "busybox"}]}}}));
        assert_eq!(
            create_msgs(always),
            vec![
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
            ]
        );
        assert_eq!(
            create_msgs(job(json!({"completions": -1, "backoffLimit": -2}))),
            vec![
                "spec.completions: Invalid value: -1: must be greater than or equal to 0",
                "spec.backoffLimit: Invalid value: -2: must be greater than or equal to 0",
            ]
        );
        assert_eq!(
            create_msgs(job(json!({"completionMode": "Indexed", "parallelism": 2}))),
            vec!["spec.completions: Required value: when completion mode is Indexed"]
        );
        assert_eq!(
            create_msgs(job(json!({"completionMode": "Sometimes"}))),
            vec![
                "spec.completionMode: Unsupported value: \"Sometimes\": supported values: \"NonIndexed\", \"Indexed\""
            ]
        );
    }

    #[test]
    fn selectors_generated_or_manual() {
        // A selector the client wrote without manualSelector gets the uid label added, and then
        // selects pods the template does not make.
        let msgs = create_msgs(job(json!({"selector": {"matchLabels": {"a": "b"}}})));
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(
            msgs[0].ends_with("`selector` does not match template `labels`"),
            "{msgs:?}"
        );
        // One naming another Job's uid is not the generated one.
        let other = job(json!({"selector": {"matchLabels": {
            "batch.kubernetes.io/controller-uid": "other"}}}));
        let msgs = create_msgs(other);
        assert!(
            msgs.iter()
                .any(|m| m.ends_with("`selector` not auto-generated")),
            "{msgs:?}"
        );
        // manualSelector: the selector must be there and match the template.
        let manual = job(json!({"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}));
        assert_eq!(
            create_msgs(manual),
            vec![
                "spec.template.metadata.labels: Invalid value: {}: `selector` does not match template `labels`"
            ]
        );
        let mut ok = job(json!({"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}));
        ok["spec"]["template"]["metadata"] = json!({"labels": {"a": "b"}});
        assert!(create_msgs(ok).is_empty());
        assert_eq!(
            create_msgs(job(json!({"manualSelector": true}))),
            vec!["spec.selector: Required value"]
        );
    }

    #[test]
    fn pod_failure_policies() {
        let policy = |rules: Value| job(json!({"podFailurePolicy": {"rules": rules}}));
        assert!(
            create_msgs(policy(json!([
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}},
                {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "NotIn",
                                                      "values": [0, 1]}}
            ])))
            .is_empty()
        );
        let msgs = create_msgs(policy(json!([
            {"action": "Explode", "onExitCodes": {"operator": "In", "values": [0, 3, 2]}},
            {"action": "Count"}
        ])));
        assert_eq!(
            msgs,
            vec![
                "spec.podFailurePolicy.rules[0].action: Unsupported value: \"Explode\": supported values: \"Count\", \"FailIndex\", \"FailJob\", \"Ignore\"",
                "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator",
                "spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Invalid value: 2: must be ordered",
                "spec.podFailurePolicy.rules[1]: Invalid value: null: specifying one of OnExitCodes and OnPodConditions is required",
            ]
        );
        let mut on_failure = policy(json!([
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]));
        on_failure["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        assert_eq!(
            create_msgs(on_failure),
            vec![
                "spec.template.spec.restartPolicy: Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified"
            ]
        );
    }

    #[test]
    fn updates_keep_selector_and_template() {
        let old = prepared(job(json!({"completions": 3})));
        let mut new = old.clone();
        new["spec"]["parallelism"] = json!(2);
        new["spec"]["backoffLimit"] = json!(1);
        assert!(update_msgs(new, &old).is_empty());

        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("alpine");
        new["spec"]["completions"] = json!(4);
        let msgs = update_msgs(new, &old);
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs[0].starts_with("spec.completions: Invalid value: 4: field is immutable"));
        assert!(msgs[1].starts_with("spec.template: Invalid value: "));
        assert!(msgs[1].ends_with("field is immutable"));

        let mut new = old.clone();
        new["spec"]["selector"]["matchLabels"]["x"] = json!("y");
        let msgs = update_msgs(new, &old);
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("spec.selector: Invalid value:")
                    && m.ends_with("field is immutable")),
            "{msgs:?}"
        );
    }

    #[test]
    fn a_suspended_job_that_never_started_may_move_its_pods() {
        let old = prepared(job(json!({"suspend": true})));
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "ssd"});
        assert!(update_msgs(new.clone(), &old).is_empty());
        // Once started, it may not.
        let mut started = old.clone();
        started["status"] = json!({"startTime": "2026-01-01T00:00:00Z"});
        assert_eq!(update_msgs(new.clone(), &started).len(), 1);
        // And the containers stay as they are either way.
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("alpine");
        assert_eq!(update_msgs(new, &old).len(), 1);
    }

    #[test]
    fn elastic_indexed_jobs_scale_completions_with_parallelism() {
        let old = prepared(job(json!({"completionMode": "Indexed", "completions": 3,
                                      "parallelism": 3})));
        let mut new = old.clone();
        new["spec"]["completions"] = json!(5);
        new["spec"]["parallelism"] = json!(5);
        assert!(update_msgs(new.clone(), &old).is_empty());
        new["spec"]["parallelism"] = json!(4);
        assert_eq!(update_msgs(new, &old).len(), 1);
    }

    #[test]
    fn status_counts_are_not_negative() {
        let old = prepared(job(json!({})));
        let mut new = old.clone();
        new["status"] = json!({"active": -1, "succeeded": 2});
        let msgs: Vec<String> =
            super::super::validate_status_update(info("batch", "Job"), &new, &old)
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            msgs,
            vec!["status.active: Invalid value: -1: must be greater than or equal to 0"]
        );
    }

    fn cron_job(name: &str, spec: Value) -> Value {
        let mut full = json!({
            "schedule": "*/5 * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "c", "image": "busybox"}]
            }}}}
        });
        for (k, v) in spec.as_object().unwrap() {
            full[k] = v.clone();
        }
        json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": full,
        })
    }

    fn cron_msgs(obj: Value) -> Vec<String> {
        super::super::test_util::create_msgs("batch", "CronJob", obj)
    }

    #[test]
    fn a_cron_job_defaults_and_validates() {
        let kind = info("batch", "CronJob");
        let mut obj = cron_job("nightly", json!({}));
        kind.default(&mut obj);
        assert_eq!(obj["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(obj["spec"]["suspend"], false);
        assert_eq!(obj["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(obj["spec"]["failedJobsHistoryLimit"], 1);
        // The template's pods get pod defaults; the Job's own defaults wait for the Job.
        assert_eq!(
            obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
            "ClusterFirst"
        );
        assert!(
            obj["spec"]["jobTemplate"]["spec"]
                .get("backoffLimit")
                .is_none()
        );
        assert!(cron_msgs(cron_job("nightly", json!({}))).is_empty());
        for schedule in [
            "@hourly",
            "0 3 * * MON-FRI",
            "@every 1h",
            "*/15 9-17 1,15 * *",
        ] {
            let msgs = cron_msgs(cron_job("nightly", json!({"schedule": schedule})));
            assert!(msgs.is_empty(), "{schedule}: {msgs:?}");
        }
    }

    #[test]
    fn a_cron_job_refuses_what_kubernetes_refuses() {
        assert_eq!(
            cron_msgs(cron_job("nightly", json!({"schedule": "every day"}))),
            [
                r#"spec.schedule: Invalid value: "every day": expected exactly 5 fields, found 2: [every day]"#
            ]
        );
        assert_eq!(
            cron_msgs(cron_job("nightly", json!({"schedule": "TZ=UTC 0 * * * *"}))),
            [
                r#"spec.schedule: Invalid value: "TZ=UTC 0 * * * *": expected exactly 5 fields, found 6: [TZ=UTC 0 * * * *]"#,
                r#"spec.schedule: Invalid value: "TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"#
            ]
        );
        assert_eq!(
            cron_msgs(cron_job("nightly", json!({"timeZone": "Mars/Olympus"}))),
            [r#"spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus"#]
        );
        assert_eq!(
            cron_msgs(cron_job("nightly", json!({"timeZone": "Local"}))),
            [
                r#"spec.timeZone: Invalid value: "Local": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"#
            ]
        );
        assert!(cron_msgs(cron_job("nightly", json!({"timeZone": "Europe/Berlin"}))).is_empty());
        assert_eq!(
            cron_msgs(cron_job(
                "nightly",
                json!({"concurrencyPolicy": "Sometimes"})
            )),
            [
                r#"spec.concurrencyPolicy: Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace""#
            ]
        );
        assert_eq!(
            cron_msgs(cron_job(
                "nightly",
                json!({"startingDeadlineSeconds": -1, "successfulJobsHistoryLimit": -2})
            )),
            [
                "spec.startingDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0",
                "spec.successfulJobsHistoryLimit: Invalid value: -2: must be greater than or equal to 0"
            ]
        );
        let long = "n".repeat(53);
        assert_eq!(
            cron_msgs(cron_job(&long, json!({}))),
            [format!(
                r#"metadata.name: Invalid value: "{long}": must be no more than 52 characters"#
            )]
        );
        // The Job template: pods that restart Always, a selector of its own.
        let mut always = cron_job("nightly", json!({}));
        always["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] =
            json!("Always");
        always["spec"]["jobTemplate"]["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        assert_eq!(
            cron_msgs(always),
            [
                r#"spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never""#,
                r#"spec.jobTemplate.spec.selector: Invalid value: {"matchLabels":{"a":"b"}}: `selector` will be auto-generated"#
            ]
        );
    }

    #[test]
    fn a_cron_job_update_may_change_its_schedule_and_template() {
        let kind = info("batch", "CronJob");
        let mut old = cron_job("nightly", json!({}));
        kind.default(&mut old);
        let mut new = old.clone();
        new["spec"]["schedule"] = json!("@weekly");
        new["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("busybox:2");
        assert!(
            super::super::test_util::update_msgs("batch", "CronJob", new.clone(), old.clone())
                .is_empty()
        );
        new["spec"]["schedule"] = json!("61 * * * *");
        let msgs = super::super::test_util::update_msgs("batch", "CronJob", new, old);
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(
            msgs[0].starts_with(r#"spec.schedule: Invalid value: "61 * * * *": "#),
            "{msgs:?}"
        );
    }
}

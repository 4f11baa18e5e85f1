//! The TTL-after-finished controller's decision (kube-controller-manager's
//! `ttl-after-finished-controller`): a finished Job with `ttlSecondsAfterFinished` is deleted
//! that long after it finished, with its pods (foreground deletion), and looked at again when
//! its time comes.

pub mod controller;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;

/// What to do with a Job now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not finished, no TTL, or already being deleted.
    Keep,
    /// Its time has come.
    Delete,
    /// Look again after this long.
    Wait(Duration),
}

/// When `job` finished: its completion time, or the time its `Complete`/`Failed` condition
/// turned true.
pub fn finished_at(job: &Job) -> Option<Timestamp> {
    let status = job.status.as_ref()?;
    let condition = status
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))?;
    if condition.type_ == "Complete"
        && let Some(done) = &status.completion_time
    {
        return Some(done.0);
    }
    condition.last_transition_time.as_ref().map(|t| t.0)
}

/// Decides for `job` at `now`.
pub fn decide(job: &Job, now: Timestamp) -> Decision {
    if job.metadata.deletion_timestamp.is_some() {
        return Decision::Keep;
    }
    let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) else {
        return Decision::Keep;
    };
    let Some(done) = finished_at(job) else {
        return Decision::Keep;
    };
    let expires = done
        .checked_add(SignedDuration::from_secs(i64::from(ttl.max(0))))
        .unwrap_or(done);
    if expires <= now {
        Decision::Delete
    } else {
        let left = expires.duration_since(now);
        Decision::Wait(Duration::from_millis(left.as_millis().max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(ttl: Option<i32>, condition: Option<(&str, &str)>, completion: Option<&str>) -> Job {
        let mut value = json!({
            "metadata": {"name": "migrate", "namespace": "ns"},
            "spec": {"template": {}},
            "status": {}
        });
        if let Some(ttl) = ttl {
            value["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
        }
        if let Some((type_, at)) = condition {
            value["status"]["conditions"] =
                json!([{"type": type_, "status": "True", "lastTransitionTime": at}]);
        }
        if let Some(at) = completion {
            value["status"]["completionTime"] = json!(at);
        }
        serde_json::from_value(value).unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_finished_job_goes_when_its_ttl_has_passed() {
        let done = job(
            Some(100),
            Some(("Complete", "2026-12-01T10:00:01Z")),
            Some("2026-12-01T10:00:00Z"),
        );
        assert_eq!(
            decide(&done, at("2026-12-01T10:00:40Z")),
            Decision::Wait(Duration::from_secs(60))
        );
        assert_eq!(decide(&done, at("2026-12-01T10:01:40Z")), Decision::Delete);
        // A failed Job counts from its condition.
        let failed = job(Some(0), Some(("Failed", "2026-12-01T10:00:00Z")), None);
        assert_eq!(
            decide(&failed, at("2026-12-01T10:00:00Z")),
            Decision::Delete
        );
    }

    #[test]
    fn running_jobs_and_jobs_without_a_ttl_stay() {
        let now = at("2026-12-01T12:00:00Z");
        assert_eq!(decide(&job(Some(1), None, None), now), Decision::Keep);
        assert_eq!(
            decide(
                &job(None, Some(("Complete", "2026-12-01T10:00:00Z")), None),
                now
            ),
            Decision::Keep
        );
        // Suspended or still going: another condition is not the end.
        assert_eq!(
            decide(
                &job(Some(1), Some(("Suspended", "2026-12-01T10:00:00Z")), None),
                now
            ),
            Decision::Keep
        );
    }
}

//! The `pods/eviction` subresource (`POST .../pods/NAME/eviction` with a `policy/v1` Eviction):
//! a delete that honours the PodDisruptionBudget covering the pod, as `kubectl drain` uses it.
//!
//! Kubernetes' rules: a pod that is already being deleted, finished (`Succeeded`/`Failed`) or
//! still `Pending` is deleted without asking any budget; a pod no budget selects is deleted; a
//! pod two budgets select is refused (500: the eviction subresource supports one). With one
//! budget, the eviction is refused with 429 `TooManyRequests` and a `DisruptionBudget` cause
//! naming it while the controller has not seen its latest spec or when it allows no
//! disruption; otherwise one disruption is spent (`status.disruptionsAllowed` down by one and the
//! pod entered in `status.disruptedPods`, one compare-and-swap write of the budget, so two
//! evictions never spend the same disruption) and the pod is deleted with the Eviction's
//! `deleteOptions`. A pod that is not Ready does not spend a disruption when the budget is
//! already met (`unhealthyPodEvictionPolicy: IfHealthyBudget`, the default) or when the budget
//! says `AlwaysAllow`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, StatusCause, StatusDetails};
use serde_json::{Value, json};
use skiff_kinds::builtin::{pod, pod_disruption_budget};
use skiff_meta::labels::Selector;
use skiff_meta::status::{ApiError, Reason};

use crate::error::{Error, Result};
use crate::handlers;
use crate::registry::Update;
use crate::request::{Request, Response};
use crate::server::ApiServer;

/// The most pods a budget records as disrupted and not yet gone (Kubernetes' `MaxDisruptedPodSize`).
pub const MAX_DISRUPTED_PODS: usize = 2000;

/// The message of a refused eviction.
pub const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// What to do with one eviction.
#[derive(Debug)]
pub enum Verdict {
    /// Delete the pod without touching a budget.
    Delete,
    /// Spend one disruption of the budget (`namespace`, `name`), then delete the pod.
    Spend(String),
    /// Refuse.
    Refuse(Error),
}

/// Whether `pod` may go without asking its budget: being deleted, finished, or not yet running.
pub fn ignores_budgets(pod: &Value) -> bool {
    !pod["metadata"]["deletionTimestamp"].is_null()
        || matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed" | "Pending")
        )
}

/// Whether `pod` is Ready.
pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Whether `budget` selects `pod` (a budget without a selector selects nothing; an empty one,
/// every pod of its namespace).
pub fn selects(budget: &Value, pod: &Value) -> bool {
    let selector = budget["spec"].get("selector").filter(|s| !s.is_null());
    let Some(selector) = selector else {
        return false;
    };
    serde_json::from_value::<LabelSelector>(selector.clone())
        .ok()
        .and_then(|s| Selector::from_label_selector(&s).ok())
        .is_some_and(|s| s.matches_object(pod))
}

fn too_many_requests(cause: String) -> Error {
    Error::Api(ApiError::new(
        429,
        Reason::TooManyRequests,
        REFUSED,
        Some(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some("DisruptionBudget".into()),
                message: Some(cause),
                field: None,
            }]),
            ..StatusDetails::default()
        }),
    ))
}

/// Decides an eviction of `pod` given the budgets of its namespace.
pub fn decide(pod: &Value, budgets: &[Value]) -> Verdict {
    if ignores_budgets(pod) {
        return Verdict::Delete;
    }
    let covering: Vec<&Value> = budgets.iter().filter(|b| selects(b, pod)).collect();
    match covering.as_slice() {
        [] => Verdict::Delete,
        [budget] => match spend(budget, pod) {
            Ok(true) => Verdict::Spend(
                budget["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ),
            Ok(false) => Verdict::Delete,
            Err(e) => Verdict::Refuse(e),
        },
        _ => Verdict::Refuse(Error::Internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into(),
        )),
    }
}

/// Whether evicting `pod` spends one of `budget`'s disruptions (`false`: it goes without
/// spending one), or why it may not go.
pub fn spend(budget: &Value, pod: &Value) -> Result<bool> {
    let name = budget["metadata"]["name"].as_str().unwrap_or_default();
    let status = &budget["status"];
    let observed = status["observedGeneration"].as_i64().unwrap_or(0);
    let generation = budget["metadata"]["generation"].as_i64().unwrap_or(0);
    if observed < generation {
        return Err(too_many_requests(format!(
            "The disruption budget {name} is still being processed by the server."
        )));
    }
    let current = status["currentHealthy"].as_i64().unwrap_or(0);
    let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
    if !is_ready(pod) {
        let policy = budget["spec"]["unhealthyPodEvictionPolicy"]
            .as_str()
            .unwrap_or("IfHealthyBudget");
        if policy == "AlwaysAllow" || current >= desired {
            return Ok(false);
        }
    }
    let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
    if allowed < 0 {
        return Err(Error::Forbidden(
            "pdb disruptions allowed is negative".into(),
        ));
    }
    let disrupted = status["disruptedPods"].as_object().map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(Error::Forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller".into(),
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(format!(
            "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        )));
    }
    Ok(true)
}

/// `budget` with one disruption spent on the pod `pod_name` at `now` (RFC 3339).
pub fn spent(mut budget: Value, pod_name: &str, now: &str) -> Value {
    let status = budget
        .as_object_mut()
        .map(|m| m.entry("status").or_insert_with(|| json!({})));
    if let Some(status) = status.and_then(Value::as_object_mut) {
        let allowed = status
            .get("disruptionsAllowed")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        status.insert("disruptionsAllowed".into(), json!(allowed - 1));
        let pods = status.entry("disruptedPods").or_insert_with(|| json!({}));
        if !pods.is_object() {
            *pods = json!({});
        }
        pods[pod_name] = json!(now);
    }
    budget
}

/// Serves `POST pods/NAME/eviction`: decides by [`decide`], spends the disruption with one
/// compare-and-swap write of the budget (decided again on the budget as that write reads it),
/// then deletes the pod with the Eviction's `deleteOptions`. Answers 201 with a success `Status`.
pub(crate) async fn evict(
    server: &ApiServer,
    request: &Request,
    namespace: Option<&str>,
    name: &str,
) -> Result<Response> {
    let pods = &pod::INFO;
    let body = crate::request::parse_body(request)?;
    match body["kind"].as_str() {
        None | Some("" | "Eviction") => {}
        Some(other) => {
            return Err(Error::BadRequest(format!(
                "invalid Eviction: the body is a {other}"
            )));
        }
    }
    if let Some(given) = body["metadata"]["name"].as_str()
        && !given.is_empty()
        && given != name
    {
        return Err(Error::BadRequest(format!(
            "name in URL does not match name in Eviction object: {name} != {given}"
        )));
    }
    let options = body.get("deleteOptions").cloned().unwrap_or(json!({}));
    let delete = handlers::delete_options_from(&options, &request.query)?;
    let pod = server.registry.get(pods, namespace, name, None).await?;
    let budgets = server
        .registry
        .list(
            &pod_disruption_budget::INFO,
            namespace,
            None,
            None,
            None,
            None,
        )
        .await?;
    match decide(&pod, &budgets.items) {
        Verdict::Refuse(e) => return Err(e),
        Verdict::Delete => {}
        Verdict::Spend(_) if delete.dry_run => {}
        Verdict::Spend(budget) => {
            let now = jiff::Timestamp::now()
                .round(jiff::Unit::Second)
                .unwrap_or_default();
            let now = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            server
                .registry
                .update(
                    &pod_disruption_budget::INFO,
                    namespace,
                    &budget,
                    None,
                    false,
                    |fresh| {
                        let decided = match spend(&fresh, &pod) {
                            Ok(true) => Ok(Update::Write(spent(fresh, name, &now))),
                            // The budget changed under us and the pod no longer needs it.
                            Ok(false) => Ok(Update::Write(fresh)),
                            Err(e) => Err(e),
                        };
                        std::future::ready(decided)
                    },
                )
                .await?;
        }
    }
    handlers::delete_one(
        server,
        request,
        &skiff_kinds::builtin::pod::Pod,
        namespace,
        name,
        &delete,
        true,
    )
    .await?;
    let mut created = skiff_meta::status::success();
    created.code = Some(201);
    Ok(crate::routes::status_response(
        skiff_meta::status::status_body(&created),
        warp::http::StatusCode::CREATED,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(labels: Value, ready: bool) -> Value {
        json!({"metadata": {"name": "db-0", "namespace": "ns", "labels": labels},
               "status": {"phase": "Running",
                          "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    fn budget(name: &str, selector: Value, allowed: i64, current: i64, desired: i64) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "generation": 1},
               "spec": {"selector": selector},
               "status": {"observedGeneration": 1, "disruptionsAllowed": allowed,
                          "currentHealthy": current, "desiredHealthy": desired,
                          "expectedPods": current}})
    }

    fn refusal(verdict: Verdict) -> (u16, String) {
        let Verdict::Refuse(e) = verdict else {
            panic!("not refused: {verdict:?}");
        };
        (e.code().as_u16(), e.to_string())
    }

    #[test]
    fn no_budget_or_a_pod_that_is_not_running_goes_at_once() {
        let pod = running(json!({"app": "db"}), true);
        assert!(matches!(decide(&pod, &[]), Verdict::Delete));
        let other = budget("web", json!({"matchLabels": {"app": "web"}}), 0, 1, 1);
        assert!(matches!(decide(&pod, &[other.clone()]), Verdict::Delete));
        // A budget without a selector selects nothing; an empty one selects every pod.
        let mut unselecting = budget("none", json!(null), 0, 1, 1);
        unselecting["spec"] = json!({});
        assert!(matches!(decide(&pod, &[unselecting]), Verdict::Delete));
        let everything = budget("all", json!({}), 0, 1, 1);
        assert!(matches!(
            decide(&pod, std::slice::from_ref(&everything)),
            Verdict::Refuse(_)
        ));
        let mut pending = pod.clone();
        pending["status"]["phase"] = json!("Pending");
        assert!(matches!(
            decide(&pending, &[everything.clone()]),
            Verdict::Delete
        ));
        let mut deleting = pod;
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(matches!(decide(&deleting, &[everything]), Verdict::Delete));
    }

    #[test]
    fn a_budget_with_room_spends_one_and_one_without_refuses_with_429() {
        let pod = running(json!({"app": "db"}), true);
        let roomy = budget("db", json!({"matchLabels": {"app": "db"}}), 1, 3, 2);
        assert!(matches!(decide(&pod, &[roomy.clone()]), Verdict::Spend(ref n) if n == "db"));
        let after = spent(roomy, "db-0", "2026-01-01T00:00:00Z");
        assert_eq!(after["status"]["disruptionsAllowed"], 0);
        assert_eq!(
            after["status"]["disruptedPods"]["db-0"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            refusal(decide(&pod, &[after])),
            (
                429,
                "Cannot evict pod as it would violate the pod's disruption budget.".into()
            )
        );
        let Verdict::Refuse(Error::Api(e)) = decide(
            &pod,
            &[budget("db", json!({"matchLabels": {"app": "db"}}), 0, 2, 2)],
        ) else {
            panic!("not an API error")
        };
        let status = e.to_status();
        let cause = &status.details.unwrap().causes.unwrap()[0];
        assert_eq!(cause.reason.as_deref(), Some("DisruptionBudget"));
        assert_eq!(
            cause.message.as_deref(),
            Some("The disruption budget db needs 2 healthy pods and has 2 currently")
        );
    }

    #[test]
    fn stale_budgets_two_budgets_and_unhealthy_pods() {
        let pod = running(json!({"app": "db"}), true);
        let mut stale = budget("db", json!({"matchLabels": {"app": "db"}}), 1, 3, 2);
        stale["metadata"]["generation"] = json!(2);
        assert_eq!(refusal(decide(&pod, &[stale])).0, 429);
        let a = budget("a", json!({}), 1, 3, 2);
        let b = budget("b", json!({"matchLabels": {"app": "db"}}), 1, 3, 2);
        assert_eq!(refusal(decide(&pod, &[a, b])).0, 500);
        // An unready pod when the budget is met goes without spending; when it is not, it
        // needs a disruption like any other, unless the budget always allows unhealthy pods.
        let sick = running(json!({"app": "db"}), false);
        let met = budget("db", json!({}), 0, 2, 2);
        assert!(matches!(decide(&sick, &[met]), Verdict::Delete));
        let short = budget("db", json!({}), 0, 1, 2);
        assert_eq!(refusal(decide(&sick, &[short.clone()])).0, 429);
        let mut always = short;
        always["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        assert!(matches!(decide(&sick, &[always]), Verdict::Delete));
    }
}

//! `policy/v1` PodDisruptionBudget: how many of the pods its selector picks must stay healthy
//! (`minAvailable`) or may be down (`maxUnavailable`) through voluntary disruptions. The
//! disruption controller keeps its status (`currentHealthy`, `desiredHealthy`, `expectedPods`,
//! `disruptionsAllowed`, the `DisruptionAllowed` condition); the `pods/eviction` subresource
//! spends `disruptionsAllowed` and records the pod in `disruptedPods`.

use k8s_openapi::api::policy::v1::PodDisruptionBudget as Pdb;

use super::prelude::*;
use crate::validation::apps::{validate_int_or_percent, validate_label_selector};
use crate::validation::{FieldError, Path, decode};

/// `policy/v1` PodDisruptionBudget.
pub struct PodDisruptionBudget;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "policy",
    version: "v1",
    kind: "PodDisruptionBudget",
    plural: "poddisruptionbudgets",
    singular: "poddisruptionbudget",
    short_names: &["pdb"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("policy", "v1", "PodDisruptionBudget")],
    categories: &[],
    selectable_fields: &[],
};

/// The unhealthy-pod eviction policies Kubernetes knows.
pub const UNHEALTHY_POD_EVICTION_POLICIES: &[&str] = &["IfHealthyBudget", "AlwaysAllow"];

fn validate(new: &Value) -> Checked {
    let pdb: Pdb = decode(new, "")?;
    let spec = pdb.spec.unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = Vec::new();
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        errs.push(FieldError::invalid(
            path.child("minAvailable"),
            crate::validation::apps::ios_value(spec.min_available.as_ref()),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    errs.extend(validate_int_or_percent(
        spec.min_available.as_ref(),
        path.child("minAvailable"),
        true,
    ));
    errs.extend(validate_int_or_percent(
        spec.max_unavailable.as_ref(),
        path.child("maxUnavailable"),
        true,
    ));
    if let Some(selector) = &spec.selector {
        errs.extend(validate_label_selector(selector, &path.child("selector")));
    }
    if let Some(policy) = spec.unhealthy_pod_eviction_policy.as_deref()
        && !UNHEALTHY_POD_EVICTION_POLICIES.contains(&policy)
    {
        errs.push(FieldError::not_supported(
            path.child("unhealthyPodEvictionPolicy"),
            policy,
            UNHEALTHY_POD_EVICTION_POLICIES,
        ));
    }
    Ok(errs)
}

fn validate_status(new: &Value) -> Checked {
    let pdb: Pdb = decode(new, "")?;
    let status = pdb.status.unwrap_or_default();
    let path = Path::new("status");
    let mut errs = Vec::new();
    for (field, value) in [
        ("disruptionsAllowed", status.disruptions_allowed),
        ("currentHealthy", status.current_healthy),
        ("desiredHealthy", status.desired_healthy),
        ("expectedPods", status.expected_pods),
    ] {
        if value < 0 {
            errs.push(FieldError::invalid(
                path.child(field),
                value,
                "must be greater than or equal to 0",
            ));
        }
    }
    Ok(errs)
}

/// How a budget's `minAvailable` or `maxUnavailable` shows in a table.
fn shown(value: &Value) -> Value {
    match value {
        Value::Null => json!("N/A"),
        Value::Number(n) => json!(n.to_string()),
        other => other.clone(),
    }
}

impl Kind for PodDisruptionBudget {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Pdb>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Pdb>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Min Available",
                "string",
                "An eviction is allowed if at least \"minAvailable\" pods selected by \"selector\" will still be available after the eviction.",
            ),
            col(
                "Max Unavailable",
                "string",
                "An eviction is allowed if at most \"maxUnavailable\" pods selected by \"selector\" are unavailable after the eviction.",
            ),
            col(
                "Allowed Disruptions",
                "integer",
                "Number of pod disruptions that are currently allowed.",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            shown(&object["spec"]["minAvailable"]),
            shown(&object["spec"]["maxUnavailable"]),
            json!(object["status"]["disruptionsAllowed"].as_i64().unwrap_or(0)),
            table::age_of(object, now),
        ])
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        validate_status(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    fn pdb(spec: Value) -> Value {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "db", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn one_of_min_available_and_max_unavailable_within_bounds() {
        let ok = pdb(json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}));
        assert!(create_msgs("policy", "PodDisruptionBudget", ok).is_empty());
        assert_eq!(
            create_msgs(
                "policy",
                "PodDisruptionBudget",
                pdb(json!({"minAvailable": 1, "maxUnavailable": "150%"}))
            ),
            [
                "spec.minAvailable: Invalid value: 1: minAvailable and maxUnavailable cannot be both set",
                "spec.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%",
            ]
        );
        assert_eq!(
            create_msgs(
                "policy",
                "PodDisruptionBudget",
                pdb(json!({"maxUnavailable": -1, "unhealthyPodEvictionPolicy": "Sometimes"}))
            ),
            [
                "spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0",
                "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Sometimes\": supported values: \"IfHealthyBudget\", \"AlwaysAllow\"",
            ]
        );
    }

    #[test]
    fn tables_say_n_a_for_what_is_not_set() {
        let mut object = pdb(json!({"maxUnavailable": "25%"}));
        object["status"] = json!({"disruptionsAllowed": 1});
        let cells = PodDisruptionBudget
            .cells(&object, Timestamp::now())
            .unwrap();
        assert_eq!(
            cells[..4],
            [json!("db"), json!("N/A"), json!("25%"), json!(1)]
        );
    }
}

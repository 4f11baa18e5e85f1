//! `core/v1` ResourceQuota: per-namespace limits (`spec.hard`) on object counts
//! (`pods`, `count/deployments.apps`), compute (`requests.cpu`, `limits.memory`) and storage
//! (`requests.storage`, per storage class), optionally only for pods in some scopes
//! (`BestEffort`, `Terminating`, a `PriorityClass` selector). The resource-quota controller keeps
//! `status.hard` and `status.used`; the `ResourceQuota` admission plugin refuses what would go
//! over and charges `status.used` before the write. What counts and how much is
//! [`skiff_meta::quota`].

use k8s_openapi::api::core::v1::ResourceQuota as Rq;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use skiff_meta::quota;

use super::prelude::*;
use crate::validation::quantity;
use crate::validation::{FieldError, Path, decode};

/// `core/v1` ResourceQuota.
pub struct ResourceQuota;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "ResourceQuota",
    plural: "resourcequotas",
    singular: "resourcequota",
    short_names: &["quota"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("", "v1", "ResourceQuota")],
    categories: &[],
    selectable_fields: &[],
};

/// Validates a resource list of a quota: names a quota may limit, non-negative amounts, whole
/// numbers for counts.
fn validate_list(
    list: Option<&std::collections::BTreeMap<String, K8sQuantity>>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (name, amount) in list.into_iter().flatten() {
        let p = path.key(name);
        for m in names::qualified_name(name) {
            errs.push(FieldError::invalid(p.clone(), name.as_str(), m));
        }
        if !quota::is_quota_resource(name) {
            errs.push(FieldError::invalid(
                p.clone(),
                name.as_str(),
                "must be a standard resource for quota",
            ));
        }
        match quantity::parse(&amount.0) {
            Err(e) => errs.push(FieldError::invalid(p, amount.0.as_str(), e.to_string())),
            Ok(q) if q.is_negative() => errs.push(FieldError::invalid(
                p,
                q.to_string(),
                "must be greater than or equal to 0",
            )),
            Ok(q) if quota::is_integer_resource(name) && !q.is_integer() => {
                errs.push(FieldError::invalid(p, q.to_string(), "must be an integer"))
            }
            Ok(_) => {}
        }
    }
    errs
}

fn validate(new: &Value) -> Checked {
    let rq: Rq = decode(new, "")?;
    let spec = rq.spec.unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = validate_list(spec.hard.as_ref(), &path.child("hard"));
    let scopes = spec.scopes.clone().unwrap_or_default();
    for (i, scope) in scopes.iter().enumerate() {
        if !quota::SCOPES.contains(&scope.as_str()) {
            errs.push(FieldError::not_supported(
                path.child("scopes").index(i),
                scope.as_str(),
                quota::SCOPES,
            ));
        }
    }
    let expressions = spec
        .scope_selector
        .as_ref()
        .and_then(|s| s.match_expressions.clone())
        .unwrap_or_default();
    for (i, e) in expressions.iter().enumerate() {
        let p = path
            .child("scopeSelector")
            .child("matchExpressions")
            .index(i);
        if !quota::SCOPES.contains(&e.scope_name.as_str()) {
            errs.push(FieldError::not_supported(
                p.child("scopeName"),
                e.scope_name.as_str(),
                quota::SCOPES,
            ));
        }
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                p.child("values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::invalid(
                p.child("values"),
                Value::from(values.to_vec()),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(FieldError::not_supported(
                p.child("operator"),
                other,
                &["DoesNotExist", "Exists", "In", "NotIn"],
            )),
        }
        if e.scope_name != "PriorityClass"
            && e.operator != "Exists"
            && quota::SCOPES.contains(&e.scope_name.as_str())
        {
            errs.push(FieldError::invalid(
                p.child("operator"),
                e.operator.as_str(),
                "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
            ));
        }
    }
    let all_scopes: Vec<&str> = scopes
        .iter()
        .map(String::as_str)
        .chain(expressions.iter().map(|e| e.scope_name.as_str()))
        .collect();
    for (a, b) in [
        ("BestEffort", "NotBestEffort"),
        ("Terminating", "NotTerminating"),
    ] {
        if all_scopes.contains(&a) && all_scopes.contains(&b) {
            errs.push(FieldError::invalid(
                path.child("scopes"),
                Value::from(scopes.clone()),
                "conflicting scopes",
            ));
        }
    }
    for scope in all_scopes.iter().filter(|s| quota::SCOPES.contains(s)) {
        for name in spec.hard.iter().flatten().map(|(k, _)| k) {
            if !quota::scope_supports(scope, name) {
                errs.push(FieldError::invalid(
                    path.child("hard").key(name),
                    name.as_str(),
                    "unsupported scope applied to resource",
                ));
            }
        }
    }
    Ok(errs)
}

fn validate_status(new: &Value) -> Checked {
    let rq: Rq = decode(new, "")?;
    let status = rq.status.unwrap_or_default();
    let path = Path::new("status");
    let mut errs = validate_list(status.hard.as_ref(), &path.child("hard"));
    errs.extend(validate_list(status.used.as_ref(), &path.child("used")));
    Ok(errs)
}

/// `kubectl get quota`'s REQUEST and LIMIT cells: `name: used/hard` for each limited resource,
/// sorted, split into the `limits.` ones and the rest.
fn usage_cells(object: &Value) -> (String, String) {
    let hard = object["status"]["hard"].as_object();
    let used = &object["status"]["used"];
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    for (name, amount) in hard.into_iter().flatten() {
        let used = used[name].as_str().unwrap_or("0");
        let cell = format!("{name}: {used}/{}", amount.as_str().unwrap_or_default());
        if name.starts_with("limits.") {
            limits.push(cell);
        } else {
            requests.push(cell);
        }
    }
    (requests.join(", "), limits.join(", "))
}

impl Kind for ResourceQuota {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Rq>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Rq>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            AGE,
            col(
                "Request",
                "string",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            col(
                "Limit",
                "string",
                "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
            ),
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let (requests, limits) = usage_cells(object);
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            table::age_of(object, now),
            json!(requests),
            json!(limits),
        ])
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

    fn rq(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ResourceQuota",
               "metadata": {"name": "q", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn hard_limits_name_quota_resources_with_sound_amounts() {
        let ok = rq(json!({"hard": {"pods": "3", "requests.cpu": "500m",
                                    "count/deployments.apps": "2", "requests.storage": "10Gi"}}));
        assert!(create_msgs("", "ResourceQuota", ok).is_empty());
        assert_eq!(
            create_msgs(
                "",
                "ResourceQuota",
                rq(json!({"hard": {"pods": "1500m", "nodes": "1", "memory": "-1Gi"}}))
            ),
            [
                "spec.hard[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0",
                "spec.hard[nodes]: Invalid value: \"nodes\": must be a standard resource for quota",
                "spec.hard[pods]: Invalid value: \"1500m\": must be an integer",
            ]
        );
    }

    #[test]
    fn scopes_are_known_consistent_and_fit_their_resources() {
        let ok = rq(json!({"hard": {"pods": "2"}, "scopes": ["BestEffort"]}));
        assert!(create_msgs("", "ResourceQuota", ok).is_empty());
        let msgs = create_msgs(
            "",
            "ResourceQuota",
            rq(json!({"hard": {"requests.cpu": "1"},
                      "scopes": ["BestEffort", "NotBestEffort", "Sometimes"]})),
        );
        assert!(
            msgs.iter()
                .any(|m| m.starts_with("spec.scopes[2]: Unsupported value: \"Sometimes\"")),
            "{msgs:?}"
        );
        assert!(
            msgs.iter().any(|m| m.contains("conflicting scopes")),
            "{msgs:?}"
        );
        assert!(
            msgs.iter()
                .any(|m| m == "spec.hard[requests.cpu]: Invalid value: \"requests.cpu\": unsupported scope applied to resource"),
            "{msgs:?}"
        );
        let selector = rq(
            json!({"hard": {"pods": "2"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In"}]}}),
        );
        assert_eq!(
            create_msgs("", "ResourceQuota", selector),
            [
                "spec.scopeSelector.matchExpressions[0].values: Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector"
            ]
        );
    }

    #[test]
    fn tables_show_used_over_hard_split_into_requests_and_limits() {
        let mut object = rq(json!({}));
        object["status"] = json!({
            "hard": {"limits.cpu": "2", "pods": "3", "requests.cpu": "1"},
            "used": {"limits.cpu": "500m", "pods": "1"}});
        let cells = ResourceQuota.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(cells[2], json!("pods: 1/3, requests.cpu: 0/1"));
        assert_eq!(cells[3], json!("limits.cpu: 500m/2"));
    }
}

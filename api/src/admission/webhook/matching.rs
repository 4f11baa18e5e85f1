//! Which webhooks a request goes to: rules (operations, groups, versions, resources with
//! `*`, `*/*` and `res/sub` forms, scope), `matchPolicy`, the namespace and object selectors
//! and the CEL match conditions. Pure: the namespace's labels are looked up by the caller.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use serde_json::Value;
use skiff_kinds::custom::authorizer::RequestAuthorizer;
use skiff_meta::labels::Selector;

use super::config::{FailurePolicy, Hook};
use crate::admission::{Attributes, Operation};

/// The group whose objects are never sent to a webhook (its configurations and the admission
/// policies), so a broken webhook can always be removed.
pub const EXEMPT_GROUP: &str = "admissionregistration.k8s.io";

/// Whether a request on `attributes` can be sent to webhooks at all.
pub fn exempt(attributes: &Attributes<'_>) -> bool {
    attributes.info.group == EXEMPT_GROUP
}

/// The operation as AdmissionReview names it.
pub fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
    }
}

fn listed(list: Option<&Vec<String>>, value: &str) -> bool {
    list.into_iter().flatten().any(|v| v == "*" || v == value)
}

/// Whether `rule` covers the request, in the request's own version (`any_version`: in any
/// version of its group and resource, the equivalent resources of `matchPolicy: Equivalent`,
/// as skiff serves each resource in one version).
fn rule_matches(rule: &RuleWithOperations, a: &Attributes<'_>, any_version: bool) -> bool {
    let info = a.info;
    let scope = match rule.scope.as_deref() {
        Some("Cluster") => !info.namespaced,
        Some("Namespaced") => info.namespaced,
        _ => true,
    };
    let subresource = a.subresource.unwrap_or("");
    let resource = rule.resources.iter().flatten().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == info.plural) && (sub == "*" || sub == subresource)
    });
    scope
        && resource
        && listed(rule.operations.as_ref(), operation_name(a.operation))
        && listed(rule.api_groups.as_ref(), info.group)
        && (any_version || listed(rule.api_versions.as_ref(), info.version))
}

/// Whether the webhook's rules cover the request.
pub fn rules_match(hook: &Hook, a: &Attributes<'_>) -> bool {
    rules_cover(&hook.rules, a, hook.equivalent)
}

/// Whether any of `rules` covers the request: in its own version, or (`equivalent`, `matchPolicy:
/// Equivalent`) in any version of its resource. Shared by webhooks and admission policies.
pub fn rules_cover(rules: &[RuleWithOperations], a: &Attributes<'_>, equivalent: bool) -> bool {
    rules.iter().any(|r| rule_matches(r, a, false))
        || (equivalent && rules.iter().any(|r| rule_matches(r, a, true)))
}

/// A label selector compiled for matching, and whether it is empty (matches everything
/// without a lookup).
pub type CompiledSelector = (Selector, bool);

/// Whether the request's namespace matters to the namespace selector: for namespaced objects
/// the namespace's labels, for a Namespace its own; other cluster-wide objects always match.
pub fn needs_namespace_labels(hook: &Hook, a: &Attributes<'_>) -> bool {
    selector_needs_namespace_labels(&hook.namespace_selector, a)
}

/// [`needs_namespace_labels`] for any namespace selector.
pub fn selector_needs_namespace_labels(selector: &CompiledSelector, a: &Attributes<'_>) -> bool {
    !selector.1 && a.info.namespaced && a.namespace.is_some()
}

fn labels(object: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let labels = object?.pointer("/metadata/labels");
    Some(
        labels
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default(),
    )
}

/// Whether the namespace selector matches: `namespace_labels` are the request namespace's
/// labels when [`needs_namespace_labels`].
pub fn namespace_matches(
    hook: &Hook,
    a: &Attributes<'_>,
    object: Option<&Value>,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    namespace_selector_matches(&hook.namespace_selector, a, object, namespace_labels)
}

/// [`namespace_matches`] for any namespace selector.
pub fn namespace_selector_matches(
    selector: &CompiledSelector,
    a: &Attributes<'_>,
    object: Option<&Value>,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    if selector.1 {
        return true;
    }
    let selector = &selector.0;
    if a.info.kind == "Namespace" && a.info.group.is_empty() {
        // A namespace matches on its own labels (the new ones, else the old).
        let own = labels(object).or_else(|| labels(a.old)).unwrap_or_default();
        return selector.matches(&own);
    }
    if !a.info.namespaced {
        return true;
    }
    namespace_labels.is_some_and(|l| selector.matches(l))
}

/// Whether the object selector matches the new or the old object's labels.
pub fn object_matches(hook: &Hook, a: &Attributes<'_>, object: Option<&Value>) -> bool {
    object_selector_matches(&hook.object_selector, a, object)
}

/// [`object_matches`] for any object selector.
pub fn object_selector_matches(
    selector: &CompiledSelector,
    a: &Attributes<'_>,
    object: Option<&Value>,
) -> bool {
    if selector.1 {
        return true;
    }
    [object, a.old]
        .into_iter()
        .filter_map(labels)
        .any(|l| selector.0.matches(&l))
}

/// What the match conditions decide.
#[derive(Debug, PartialEq, Eq)]
pub enum Conditions {
    /// Every condition holds: call the webhook.
    Match,
    /// A condition is false: skip the webhook.
    Skip,
    /// A condition could not be evaluated and the failure policy is Fail.
    Error(String),
}

/// Evaluates the match conditions with `object`, `oldObject`, `request` and `authorizer`
/// (when given) bound. A false condition wins over an error; an error with `failurePolicy:
/// Ignore` skips the webhook.
pub fn conditions(
    hook: &Hook,
    object: Option<&Value>,
    old: Option<&Value>,
    request: &Value,
    authorizer: Option<&RequestAuthorizer>,
) -> Conditions {
    let null = Value::Null;
    let variables = [
        ("object", object.unwrap_or(&null)),
        ("oldObject", old.unwrap_or(&null)),
        ("request", request),
    ];
    let mut error = None;
    for (name, expression) in &hook.conditions {
        match expression.evaluate(&variables, authorizer) {
            Ok(true) => {}
            Ok(false) => return Conditions::Skip,
            Err(e) => {
                error.get_or_insert_with(|| {
                    format!("failed to evaluate match condition {name:?}: {e}")
                });
            }
        }
    }
    match (error, hook.failure_policy) {
        (None, _) => Conditions::Match,
        (Some(_), FailurePolicy::Ignore) => Conditions::Skip,
        (Some(e), FailurePolicy::Fail) => Conditions::Error(e),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::config::compile_configuration;
    use super::*;
    use crate::auth::User;

    fn hook(extra: Value) -> std::sync::Arc<Hook> {
        let mut webhook = json!({"name": "h.example.com", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1/"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}]});
        for (k, v) in extra.as_object().unwrap() {
            webhook[k] = v.clone();
        }
        compile_configuration(
            &json!({"metadata": {"name": "c"}, "webhooks": [webhook]}),
            false,
        )
        .pop()
        .unwrap()
    }

    fn attrs<'a>(
        info: &'static skiff_meta::ResourceInfo,
        operation: Operation,
        subresource: Option<&'a str>,
        old: Option<&'a Value>,
        user: &'a User,
    ) -> Attributes<'a> {
        Attributes {
            operation,
            info,
            subresource,
            namespace: info.namespaced.then_some("default"),
            name: "x",
            object: None,
            old,
            user,
            dry_run: false,
            feedback: None,
        }
    }

    use skiff_kinds::builtin::{config_map, deployment, namespace, node, pod};

    #[test]
    fn rules_cover_operations_groups_versions_resources_and_scope() {
        let user = User::admin();
        let cm = attrs(&config_map::INFO, Operation::Create, None, None, &user);
        let plain = hook(json!({}));
        assert!(rules_match(&plain, &cm));
        let update = attrs(&config_map::INFO, Operation::Update, None, None, &user);
        assert!(!rules_match(&plain, &update), "CREATE only");
        let pods = attrs(&pod::INFO, Operation::Create, None, None, &user);
        assert!(!rules_match(&plain, &pods));

        let rule = |resources: Value, scope: &str| {
            hook(json!({"rules": [{"operations": ["*"], "apiGroups": ["*"],
                "apiVersions": ["*"], "resources": resources, "scope": scope}]}))
        };
        let status = attrs(&pod::INFO, Operation::Update, Some("status"), None, &user);
        // "*" is every resource but no subresource; "*/*" is everything.
        assert!(rules_match(&rule(json!(["*"]), "*"), &pods));
        assert!(!rules_match(&rule(json!(["*"]), "*"), &status));
        assert!(rules_match(&rule(json!(["*/*"]), "*"), &status));
        assert!(rules_match(&rule(json!(["pods/status"]), "*"), &status));
        assert!(!rules_match(&rule(json!(["pods/status"]), "*"), &pods));
        assert!(rules_match(&rule(json!(["*/status"]), "*"), &status));
        assert!(rules_match(&rule(json!(["pods/*"]), "*"), &status));
        assert!(!rules_match(&rule(json!(["deployments/*"]), "*"), &status));
        // Scope.
        let nodes = attrs(&node::INFO, Operation::Create, None, None, &user);
        assert!(rules_match(&rule(json!(["*"]), "Cluster"), &nodes));
        assert!(!rules_match(&rule(json!(["*"]), "Cluster"), &pods));
        assert!(rules_match(&rule(json!(["*"]), "Namespaced"), &pods));
        assert!(!rules_match(&rule(json!(["*"]), "Namespaced"), &nodes));
    }

    #[test]
    fn equivalent_matches_other_versions_of_the_resource_exact_does_not() {
        let user = User::admin();
        let deployments = attrs(&deployment::INFO, Operation::Create, None, None, &user);
        let rules = json!([{"operations": ["CREATE"], "apiGroups": ["apps"],
            "apiVersions": ["v1beta1"], "resources": ["deployments"]}]);
        let equivalent = hook(json!({"rules": rules, "matchPolicy": "Equivalent"}));
        let exact = hook(json!({"rules": rules, "matchPolicy": "Exact"}));
        assert!(rules_match(&equivalent, &deployments));
        assert!(!rules_match(&exact, &deployments));
        // The default is Equivalent.
        assert!(rules_match(&hook(json!({"rules": rules})), &deployments));
    }

    #[test]
    fn selectors_see_the_namespace_and_old_and_new_labels() {
        let user = User::admin();
        let selecting = hook(json!({
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
        }));
        let cm = attrs(&config_map::INFO, Operation::Create, None, None, &user);
        assert!(needs_namespace_labels(&selecting, &cm));
        let prod = BTreeMap::from([("env".to_string(), "prod".to_string())]);
        let dev = BTreeMap::from([("env".to_string(), "dev".to_string())]);
        assert!(namespace_matches(&selecting, &cm, None, Some(&prod)));
        assert!(!namespace_matches(&selecting, &cm, None, Some(&dev)));
        // A Namespace matches on its own labels, with no lookup.
        let ns = attrs(&namespace::INFO, Operation::Create, None, None, &user);
        assert!(!needs_namespace_labels(&selecting, &ns));
        let labelled = json!({"metadata": {"labels": {"env": "prod"}}});
        assert!(namespace_matches(&selecting, &ns, Some(&labelled), None));
        assert!(!namespace_matches(
            &selecting,
            &ns,
            Some(&json!({"metadata": {}})),
            None
        ));
        // Other cluster-wide objects always match.
        let nodes = attrs(&node::INFO, Operation::Create, None, None, &user);
        assert!(namespace_matches(&selecting, &nodes, None, None));
        // The object selector matches if the new or the old object matches.
        let skip = json!({"metadata": {"labels": {"skip": "yes"}}});
        let keep = json!({"metadata": {"labels": {"a": "b"}}});
        assert!(object_matches(&selecting, &cm, Some(&keep)));
        assert!(!object_matches(&selecting, &cm, Some(&skip)));
        let update = attrs(
            &config_map::INFO,
            Operation::Update,
            None,
            Some(&keep),
            &user,
        );
        assert!(object_matches(&selecting, &update, Some(&skip)));
        let delete = attrs(
            &config_map::INFO,
            Operation::Delete,
            None,
            Some(&skip),
            &user,
        );
        assert!(!object_matches(&selecting, &delete, None));
        // Empty selectors match everything.
        assert!(object_matches(&hook(json!({})), &delete, None));
        assert!(namespace_matches(&hook(json!({})), &cm, None, None));
    }

    #[test]
    fn match_conditions_skip_on_false_and_follow_the_failure_policy_on_errors() {
        let conditions_of = |policy: &str| {
            hook(json!({"failurePolicy": policy, "matchConditions": [
                {"name": "labelled", "expression": "has(object.metadata.labels)"},
                {"name": "not-admin", "expression": "request.userInfo.username != 'root'"},
                {"name": "broken", "expression": "object.metadata.missing.field == 1"},
            ]}))
        };
        let request = json!({"userInfo": {"username": "alice"}});
        let labelled = json!({"metadata": {"labels": {"a": "b"}, "missing": {"field": 1}}});
        let fail = conditions_of("Fail");
        assert_eq!(
            conditions(&fail, Some(&labelled), None, &request, None),
            Conditions::Match
        );
        let root = json!({"userInfo": {"username": "root"}});
        assert_eq!(
            conditions(&fail, Some(&labelled), None, &root, None),
            Conditions::Skip
        );
        let unlabelled = json!({"metadata": {}});
        // `labelled` is false: a false condition wins over the error of `broken`.
        assert_eq!(
            conditions(&fail, Some(&unlabelled), None, &request, None),
            Conditions::Skip
        );
        let erring = json!({"metadata": {"labels": {}}});
        assert!(matches!(
            conditions(&fail, Some(&erring), None, &request, None),
            Conditions::Error(e) if e.contains("\"broken\"")
        ));
        let ignore = conditions_of("Ignore");
        assert_eq!(
            conditions(&ignore, Some(&erring), None, &request, None),
            Conditions::Skip
        );
    }

    #[test]
    fn the_admission_configurations_themselves_are_exempt() {
        let user = User::admin();
        let vwc = &skiff_kinds::builtin::validating_webhook_configuration::INFO;
        let mwc = &skiff_kinds::builtin::mutating_webhook_configuration::INFO;
        for info in [vwc, mwc] {
            assert!(exempt(&attrs(info, Operation::Create, None, None, &user)));
        }
        assert!(!exempt(&attrs(
            &config_map::INFO,
            Operation::Create,
            None,
            None,
            &user
        )));
    }
}

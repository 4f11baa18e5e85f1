//! The policy plugin's pure parts (matching, params, evaluation, messages, actions) and the
//! plugin over a real store.

use std::sync::Arc;

use serde_json::{Value, json};
use skiff_kinds::builtin::{config_map, deployment, namespace, validating_admission_policy};

use super::compiled::{compile_binding, compile_policy};
use super::evaluate::{
    Evaluated, Inputs, Outcome, VALIDATION_FAILURE, Violation, denial, evaluate, warning,
};
use super::params::{Lookup, lookup, missing, select};
use super::*;
use crate::admission::{Feedback, Operation};
use crate::auth::User;

fn policy(spec: Value) -> Policy {
    let mut spec = spec;
    if spec.get("matchConstraints").is_none() {
        spec["matchConstraints"] = json!({"resourceRules": [{"apiGroups": ["apps"],
            "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
            "resources": ["deployments"]}]});
    }
    compile_policy(&json!({"metadata": {"name": "replicas"}, "spec": spec})).unwrap()
}

fn binding(spec: Value) -> Binding {
    let mut spec = spec;
    spec["policyName"] = json!("replicas");
    if spec.get("validationActions").is_none() {
        spec["validationActions"] = json!(["Deny"]);
    }
    compile_binding(&json!({"metadata": {"name": "replicas-binding"}, "spec": spec})).unwrap()
}

fn deployment_object(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
           "spec": {"replicas": replicas, "template": {"spec": {"containers": [
               {"name": "a", "image": "nginx"}, {"name": "b", "image": "busybox"}]}}}})
}

fn attrs<'a>(
    info: &'static skiff_meta::ResourceInfo,
    operation: Operation,
    object: Option<&'a mut Value>,
    old: Option<&'a Value>,
    user: &'a User,
) -> Attributes<'a> {
    Attributes {
        operation,
        info,
        subresource: None,
        namespace: info.namespaced.then_some("default"),
        name: "web",
        object,
        old,
        user,
        dry_run: false,
        feedback: None,
    }
}

fn inputs_of(object: &Value) -> Inputs {
    Inputs {
        object: to_cel(object).unwrap(),
        old_object: cel::Value::Null,
        request: to_cel(
            &json!({"operation": "CREATE", "userInfo": {"username": "alice"},
                                "namespace": "default"}),
        )
        .unwrap(),
        namespace_object: to_cel(&json!({"metadata": {"name": "default",
                                         "labels": {"env": "prod"}}}))
        .unwrap(),
        authorizer: None,
    }
}

/// The violations of evaluating `policy` (its audit annotations aside).
fn violations_of(policy: &Policy, inputs: &Inputs, params: &cel::Value) -> Vec<Violation> {
    evaluate(policy, inputs, params).violations
}

fn messages(violations: &[Violation]) -> Vec<String> {
    violations.iter().map(|v| v.message.clone()).collect()
}

#[test]
fn constraints_and_binding_resources_must_both_match_and_exclusions_win() {
    let user = User::admin();
    let mut d = deployment_object(1);
    let a = attrs(
        &deployment::INFO,
        Operation::Create,
        Some(&mut d),
        None,
        &user,
    );
    let p = policy(json!({"validations": [{"expression": "true"}]}));
    assert!(p.matcher.rules_match(&a));
    let mut cm = json!({"metadata": {"name": "web"}});
    let on_cm = attrs(
        &config_map::INFO,
        Operation::Create,
        Some(&mut cm),
        None,
        &user,
    );
    assert!(!p.matcher.rules_match(&on_cm));
    let delete = attrs(&deployment::INFO, Operation::Delete, None, None, &user);
    assert!(!p.matcher.rules_match(&delete), "CREATE and UPDATE only");

    // A binding's resources narrow; with no rules they only select.
    let b = binding(json!({"matchResources": {"objectSelector": {"matchLabels": {"app": "db"}}}}));
    let m = b.matcher.as_ref().unwrap();
    assert!(m.rules_match(&a));
    assert!(!m.selectors_match(&a, a.object.as_deref(), None));
    let b = binding(json!({"matchResources": {"namespaceSelector":
        {"matchLabels": {"env": "prod"}}}}));
    let m = b.matcher.as_ref().unwrap();
    assert!(m.needs_namespace_labels(&a));
    let prod = [("env".to_string(), "prod".to_string())].into();
    let dev = [("env".to_string(), "dev".to_string())].into();
    assert!(m.selectors_match(&a, a.object.as_deref(), Some(&prod)));
    assert!(!m.selectors_match(&a, a.object.as_deref(), Some(&dev)));

    // excludeResourceRules, and resourceNames.
    let excluding = policy(json!({"validations": [{"expression": "true"}],
        "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
            "operations": ["*"], "resources": ["*"]}],
        "excludeResourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["*"], "resources": ["deployments"], "resourceNames": ["web"]}]}}));
    assert!(!excluding.matcher.rules_match(&a));
    assert!(excluding.matcher.rules_match(&on_cm));
    let mut other = deployment_object(1);
    let mut named_other = attrs(
        &deployment::INFO,
        Operation::Create,
        Some(&mut other),
        None,
        &user,
    );
    named_other.name = "api";
    assert!(excluding.matcher.rules_match(&named_other));
}

#[test]
fn policies_and_bindings_themselves_are_exempt() {
    let user = User::admin();
    let a = attrs(
        &validating_admission_policy::INFO,
        Operation::Delete,
        None,
        None,
        &user,
    );
    assert!(exempt(&a));
    let binding_info = &skiff_kinds::builtin::validating_admission_policy_binding::INFO;
    assert!(exempt(&attrs(
        binding_info,
        Operation::Create,
        None,
        None,
        &user
    )));
    assert!(!exempt(&attrs(
        &deployment::INFO,
        Operation::Create,
        None,
        None,
        &user
    )));
    // Webhook configurations are not exempt from policies.
    let vwc = &skiff_kinds::builtin::validating_webhook_configuration::INFO;
    assert!(!exempt(&attrs(vwc, Operation::Create, None, None, &user)));
}

#[test]
fn validations_report_their_message_expression_or_default() {
    let p = policy(json!({"validations": [
        {"expression": "object.spec.replicas <= 5"},
        {"expression": "object.spec.replicas <= 3", "message": "at most three"},
        {"expression": "object.spec.replicas <= 2",
         "messageExpression": "'replicas ' + string(object.spec.replicas) + ' > 2'"},
        {"expression": "object.spec.replicas <= 1", "message": "fallback",
         "messageExpression": "object.missing"},
        {"expression": "object.spec.replicas <= 0", "reason": "Forbidden"},
    ]}));
    let v = violations_of(&p, &inputs_of(&deployment_object(7)), &cel::Value::Null);
    assert_eq!(
        messages(&v),
        [
            "failed expression: object.spec.replicas <= 5",
            "at most three",
            "replicas 7 > 2",
            "fallback",
            "failed expression: object.spec.replicas <= 0",
        ]
    );
    assert_eq!((v[0].reason, v[0].code), ("Invalid", 422));
    assert_eq!((v[4].reason, v[4].code), ("Forbidden", 403));
    assert!(violations_of(&p, &inputs_of(&deployment_object(0)), &cel::Value::Null).is_empty());
    for (reason, code) in [("Unauthorized", 401), ("RequestEntityTooLarge", 413)] {
        let p = policy(json!({"validations": [{"expression": "false", "reason": reason}]}));
        let v = violations_of(&p, &inputs_of(&deployment_object(0)), &cel::Value::Null);
        assert_eq!((v[0].reason, v[0].code), (reason, code));
    }
}

#[test]
fn lists_and_maps_work_with_the_cel_macros_and_params_and_variables() {
    let p = policy(json!({
        "variables": [
            {"name": "containers", "expression": "object.spec.template.spec.containers"},
            {"name": "count", "expression": "size(variables.containers)"},
        ],
        "validations": [
            {"expression": "variables.containers.all(c, has(c.image))"},
            {"expression": "variables.containers.exists(c, c.name == 'b')"},
            {"expression": "variables.count == 2"},
            {"expression": "object.spec.replicas <= int(params.data.maxReplicas)",
             "messageExpression": "'at most ' + params.data.maxReplicas + ' replicas'"},
            {"expression": "!has(object.metadata.annotations)"},
            {"expression": "namespaceObject.metadata.labels.env == 'prod'"},
            {"expression": "request.userInfo.username == 'alice'"},
            {"expression": "oldObject == null"},
        ],
    }));
    let params = to_cel(&json!({"data": {"maxReplicas": "5"}})).unwrap();
    assert!(violations_of(&p, &inputs_of(&deployment_object(5)), &params).is_empty());
    assert_eq!(
        messages(&violations_of(
            &p,
            &inputs_of(&deployment_object(6)),
            &params
        )),
        ["at most 5 replicas"]
    );
}

#[test]
fn errors_follow_the_failure_policy() {
    let erring = |failure: &str| {
        policy(json!({"failurePolicy": failure, "validations": [
            {"expression": "object.spec.missing.deeper == 1"},
            {"expression": "object.spec.replicas"},
        ]}))
    };
    let v = violations_of(
        &erring("Fail"),
        &inputs_of(&deployment_object(1)),
        &cel::Value::Null,
    );
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(
        v[0].message
            .starts_with("expression 'object.spec.missing.deeper == 1' resulted in error: "),
        "{v:?}"
    );
    assert!(v[1].message.contains("expected a bool"), "{v:?}");
    assert_eq!(v[0].code, 422);
    assert!(
        violations_of(
            &erring("Ignore"),
            &inputs_of(&deployment_object(1)),
            &cel::Value::Null
        )
        .is_empty()
    );

    // A variable that fails fails the validations that read it.
    let p = policy(json!({
        "variables": [{"name": "bad", "expression": "object.nothing.here"}],
        "validations": [{"expression": "variables.bad == 1"}, {"expression": "true"}],
    }));
    let v = violations_of(&p, &inputs_of(&deployment_object(1)), &cel::Value::Null);
    assert_eq!(v.len(), 1);
    assert!(v[0].message.contains("variable \"bad\" failed"), "{v:?}");
}

#[test]
fn match_conditions_skip_the_policy_or_fail_it() {
    let conditioned = |failure: &str, condition: &str| {
        policy(json!({"failurePolicy": failure,
            "matchConditions": [{"name": "c", "expression": condition}],
            "validations": [{"expression": "false", "message": "no"}]}))
    };
    let input = inputs_of(&deployment_object(1));
    let null = cel::Value::Null;
    assert_eq!(
        messages(&violations_of(&conditioned("Fail", "true"), &input, &null)),
        ["no"]
    );
    assert!(
        violations_of(
            &conditioned("Fail", "object.spec.replicas > 3"),
            &input,
            &null
        )
        .is_empty()
    );
    let v = violations_of(&conditioned("Fail", "object.x.y"), &input, &null);
    assert!(
        v[0].message
            .starts_with("failed to evaluate match condition \"c\""),
        "{v:?}"
    );
    assert!(violations_of(&conditioned("Ignore", "object.x.y"), &input, &null).is_empty());
}

#[test]
fn params_are_found_by_name_or_selector_in_the_right_namespace() {
    let p = policy(
        json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [{"expression": "true"}]}),
    );
    let by_name =
        binding(json!({"paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}));
    // A namespaced kind without paramRef.namespace is read in the request's namespace.
    assert_eq!(
        lookup(&p, &by_name, true, Some("team-a")).unwrap(),
        Some(Lookup {
            namespace: Some("team-a".into()),
            name: Some("limits".into()),
            selector: None,
            deny_when_missing: true,
        })
    );
    assert!(
        lookup(&p, &by_name, true, None).is_err(),
        "no namespace at all"
    );
    let pinned = binding(
        json!({"paramRef": {"name": "limits", "namespace": "policies",
        "parameterNotFoundAction": "Allow"}}),
    );
    let found = lookup(&p, &pinned, true, Some("team-a")).unwrap().unwrap();
    assert_eq!(found.namespace.as_deref(), Some("policies"));
    assert!(!found.deny_when_missing);
    assert!(
        lookup(&p, &pinned, false, None).is_err(),
        "cluster-scoped kind, namespace set"
    );
    // A binding without paramRef evaluates the policy once, with null params.
    assert_eq!(
        lookup(&p, &binding(json!({})), true, Some("a")).unwrap(),
        None
    );
    let no_kind = policy(json!({"validations": [{"expression": "true"}]}));
    assert_eq!(lookup(&no_kind, &by_name, true, Some("a")).unwrap(), None);

    let by_selector = binding(
        json!({"paramRef": {"selector": {"matchLabels": {"tier": "gold"}},
        "parameterNotFoundAction": "Deny"}}),
    );
    let l = lookup(&p, &by_selector, true, Some("a")).unwrap().unwrap();
    let picked = select(
        &l,
        vec![
            json!({"metadata": {"name": "x", "labels": {"tier": "gold"}}}),
            json!({"metadata": {"name": "y", "labels": {"tier": "iron"}}}),
            json!({"metadata": {"name": "z"}}),
        ],
    )
    .unwrap();
    assert_eq!(
        picked,
        [json!({"metadata": {"name": "x", "labels": {"tier": "gold"}}})]
    );

    // None found: Deny is a configuration error of the binding; Allow skips the policy.
    assert_eq!(
        missing(&l),
        Some("no params found for policy binding with `Deny` parameterNotFoundAction")
    );
    assert_eq!(missing(&found), None);
    // Unset counts as Allow, as in Kubernetes (validation requires it).
    let unset = binding(json!({"paramRef": {"name": "limits"}}));
    let unset = lookup(&p, &unset, true, Some("a")).unwrap().unwrap();
    assert_eq!(missing(&unset), None);
}

#[test]
fn actions_deny_warn_and_audit_with_kubernetes_messages() {
    let user = User::admin();
    let mut d = deployment_object(7);
    let a = attrs(
        &deployment::INFO,
        Operation::Create,
        Some(&mut d),
        None,
        &user,
    );
    let v = Violation {
        message: "failed expression: object.spec.replicas <= 5".into(),
        reason: "Forbidden",
        code: 403,
        index: Some(1),
    };
    let e = denial(&a, "replicas", Some("replicas-binding"), &v);
    assert_eq!(e.code(), 403);
    assert_eq!(
        e.message(),
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding' denied request: failed expression: object.spec.replicas <= 5"
    );
    let invalid = denial(&a, "p", Some("b"), &Violation::error("x"));
    assert_eq!(
        (invalid.code(), invalid.reason().as_str()),
        (422, "Invalid")
    );
    let causes = invalid
        .details()
        .and_then(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(
        causes[0].message.as_deref(),
        Some("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: x")
    );
    // A policy-level refusal names no binding.
    let unbound = denial(&a, "p", None, &Violation::error("x"));
    assert_eq!(
        unbound.message(),
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'p' denied request: x"
    );

    let mut outcome = Outcome::default();
    let warn = binding(json!({"validationActions": ["Warn", "Audit"]}));
    let evaluated = |violations: Vec<Violation>| Evaluated {
        violations,
        annotations: Vec::new(),
    };
    outcome.record(&a, "replicas", &warn, &evaluated(vec![v.clone()]));
    assert!(outcome.denied.is_none());
    assert_eq!(
        outcome.warnings,
        [
            "Validation failed for ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding': failed expression: object.spec.replicas <= 5"
        ]
    );
    // Audit: listed in the request's audit event as Kubernetes lists it.
    assert_eq!(
        outcome.audit_annotations(),
        [(
            VALIDATION_FAILURE.to_string(),
            json!([{"message": "failed expression: object.spec.replicas <= 5",
                    "policy": "replicas", "binding": "replicas-binding",
                    "expressionIndex": 1, "validationActions": ["Warn", "Audit"]}])
            .to_string()
        )]
    );
    assert_eq!(
        warning("p", "b", "m"),
        "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': m"
    );
    let deny = binding(json!({}));
    outcome.record(
        &a,
        "replicas",
        &deny,
        &evaluated(vec![v.clone(), Violation::error("second")]),
    );
    assert_eq!(
        outcome.denied.as_ref().map(|e| e.code()),
        Some(403),
        "the first violation"
    );
}

#[test]
fn an_expression_that_does_not_compile_fails_alone_as_the_failure_policy_says() {
    let broken = |failure: &str| {
        compile_policy(
            &json!({"metadata": {"name": "p"}, "spec": {"failurePolicy": failure,
            "matchConstraints": {"resourceRules": []},
            "variables": [{"name": "v", "expression": "object.)"}],
            "validations": [{"expression": "object.("}, {"expression": "false"},
                            {"expression": "variables.v"}]}}),
        )
        .unwrap()
    };
    let input = inputs_of(&deployment_object(1));
    let v = violations_of(&broken("Fail"), &input, &cel::Value::Null);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(v[0].message.starts_with("compilation error: "), "{v:?}");
    assert_eq!((v[0].reason, v[0].code), ("Invalid", 422));
    assert_eq!(
        v[1].message, "failed expression: false",
        "the others still run"
    );
    assert!(
        v[2].message
            .contains("variable \"v\" failed: compilation error: "),
        "{v:?}"
    );
    let v = violations_of(&broken("Ignore"), &input, &cel::Value::Null);
    assert_eq!(messages(&v), ["failed expression: false"]);
}

#[test]
fn message_expressions_that_are_not_one_short_line_fall_back() {
    let p = policy(json!({"validations": [
        {"expression": "false", "message": "fallback", "messageExpression": "'two\\nlines'"},
        {"expression": "false", "message": "fallback",
         "messageExpression": "object.metadata.annotations.long"},
        {"expression": "false", "message": "fallback",
         "messageExpression": "object.metadata.annotations.short"},
        {"expression": "false", "message": "fallback", "messageExpression": "'   '"},
        {"expression": "false", "message": "fallback", "messageExpression": "42"},
        {"expression": "false", "message": "fallback", "messageExpression": "object.nothing"},
        {"expression": "false", "messageExpression": "'  padded  '"},
        {"expression": "  false  "},
    ]}));
    let mut d = deployment_object(1);
    d["metadata"]["annotations"] = json!({"long": "x".repeat(5 * 1024 + 1),
                                          "short": "y".repeat(5 * 1024)});
    let v = violations_of(&p, &inputs_of(&d), &cel::Value::Null);
    let at_limit = "y".repeat(5 * 1024);
    assert_eq!(
        messages(&v),
        [
            "fallback",
            "fallback",
            at_limit.as_str(),
            "fallback",
            "fallback",
            "fallback",
            "padded",
            "failed expression: false"
        ]
    );
}

#[test]
fn configuration_errors_refuse_whatever_the_actions_under_fail_only() {
    let user = User::admin();
    let mut d = deployment_object(1);
    let a = attrs(
        &deployment::INFO,
        Operation::Create,
        Some(&mut d),
        None,
        &user,
    );
    let fail = policy(json!({"validations": [{"expression": "true"}]}));
    let ignore =
        policy(json!({"failurePolicy": "Ignore", "validations": [{"expression": "true"}]}));
    let warn_only = binding(json!({"validationActions": ["Warn"]}));
    let mut outcome = Outcome::default();
    outcome.misconfigured(&a, &ignore, Some(warn_only.name.as_str()), "no params");
    assert_eq!(outcome, Outcome::default());
    outcome.misconfigured(&a, &fail, Some(warn_only.name.as_str()), "no params");
    let denied = outcome.denied.as_ref().unwrap();
    assert_eq!(denied.code(), 422);
    assert_eq!(
        denied.message(),
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding' denied request: failed to configure binding: no params"
    );
    assert!(outcome.warnings.is_empty());
    // The first refusal stays.
    outcome.misconfigured(&a, &fail, None, "later");
    assert!(
        outcome
            .denied
            .as_ref()
            .unwrap()
            .message()
            .contains("no params")
    );
    let mut outcome = Outcome::default();
    outcome.misconfigured(&a, &fail, None, "bad paramKind");
    assert!(
        outcome.denied.unwrap().message().ends_with(
            "ValidatingAdmissionPolicy 'replicas' denied request: failed to configure policy: bad paramKind"
        )
    );
}

fn registry() -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    let store = skiff_store::SledStore::open(skiff_store::Config::new(dir.path())).unwrap();
    (dir, Registry::new(Arc::new(store)))
}

/// The plugin over a store: params read by name, denial, warnings, and the binding's removal.
#[tokio::test]
async fn the_plugin_denies_warns_and_reads_params_from_the_store() {
    let (_dir, registry) = registry();
    registry
        .insert(
            &namespace::INFO,
            &json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "default"}}),
            None,
        )
        .await
        .unwrap();
    registry
        .insert(
            &config_map::INFO,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "limits", "namespace": "default"},
            "data": {"maxReplicas": "5"}}),
            None,
        )
        .await
        .unwrap();
    let policies = Arc::new(Policies::new(
        Arc::new(Kinds::builtin()),
        Arc::new(crate::authz::Authorizer::default()),
    ));
    policies.put(
        false,
        &json!({"metadata": {"name": "replicas"}, "spec": {
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
        "validations": [{"expression": "object.spec.replicas <= int(params.data.maxReplicas)"}]}}),
    );
    policies.put(
        true,
        &json!({"metadata": {"name": "replicas-binding"}, "spec": {
        "policyName": "replicas", "validationActions": ["Deny"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}}),
    );
    let plugin = ValidatingAdmissionPolicy(policies.clone());
    let user = User::admin();
    let feedback = Feedback::default();
    let run = |replicas: i64| {
        let (plugin, registry, user, feedback) = (&plugin, &registry, &user, &feedback);
        async move {
            let mut d = deployment_object(replicas);
            let mut a = attrs(
                &deployment::INFO,
                Operation::Create,
                Some(&mut d),
                None,
                user,
            );
            a.feedback = Some(feedback);
            plugin.validate(registry, &a).await
        }
    };
    assert!(run(5).await.is_ok());
    let refused = run(7).await.unwrap_err();
    assert!(
        refused.to_string().contains(
            "ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding' denied request: failed expression: object.spec.replicas <= int(params.data.maxReplicas)"
        ),
        "{refused}"
    );
    // A binding whose param is missing denies (Deny) or skips (Allow).
    policies.put(
        true,
        &json!({"metadata": {"name": "replicas-binding"}, "spec": {
        "policyName": "replicas", "validationActions": ["Deny"],
        "paramRef": {"name": "nothing", "parameterNotFoundAction": "Deny"}}}),
    );
    let refused = run(1).await.unwrap_err();
    assert!(
        refused.to_string().contains(
            "ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
        ),
        "{refused}"
    );
    policies.put(
        true,
        &json!({"metadata": {"name": "replicas-binding"}, "spec": {
        "policyName": "replicas", "validationActions": ["Deny"],
        "paramRef": {"name": "nothing", "parameterNotFoundAction": "Allow"}}}),
    );
    assert!(run(100).await.is_ok());
    // Warn: admitted, with the warning.
    policies.put(
        true,
        &json!({"metadata": {"name": "replicas-binding"}, "spec": {
        "policyName": "replicas", "validationActions": ["Warn"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}}),
    );
    assert!(run(7).await.is_ok());
    assert_eq!(
        feedback.take_warnings(),
        [
            "Validation failed for ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding': failed expression: object.spec.replicas <= int(params.data.maxReplicas)"
        ]
    );
    assert!(run(3).await.is_ok());
    assert!(feedback.take_warnings().is_empty());
    // A param kind nobody serves fails the binding under Fail.
    policies.put(
        false,
        &json!({"metadata": {"name": "replicas"}, "spec": {
        "paramKind": {"apiVersion": "example.com/v1", "kind": "Nope"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["deployments"]}]},
        "validations": [{"expression": "true"}]}}),
    );
    policies.put(
        true,
        &json!({"metadata": {"name": "replicas-binding"}, "spec": {
        "policyName": "replicas", "validationActions": ["Deny"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}}),
    );
    let refused = run(1).await.unwrap_err();
    assert!(
        refused.to_string().contains(
            "ValidatingAdmissionPolicy 'replicas' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=Nope'"
        ),
        "{refused}"
    );
    // Without the binding, nothing is evaluated.
    policies
        .configs
        .update(|s| s.set(true, "replicas-binding", None));
    assert!(run(100).await.is_ok());
}

#[test]
fn audit_annotations_give_strings_skip_nulls_and_join_distinct_values() {
    let p = policy(json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [{"expression": "true"}],
        "auditAnnotations": [
            {"key": "replicas", "valueExpression": "'replicas: ' + string(object.spec.replicas)"},
            {"key": "limit", "valueExpression": "params == null ? null : params.data.max"}]}));
    let input = inputs_of(&deployment_object(3));
    let evaluated = evaluate(&p, &input, &cel::Value::Null);
    assert!(evaluated.violations.is_empty());
    assert_eq!(
        evaluated.annotations,
        [("replicas".to_string(), "replicas: 3".to_string())]
    );
    // Two param objects: the distinct values of a key, sorted and joined.
    let params = |max: &str| to_cel(&json!({"data": {"max": max}})).unwrap();
    let mut outcome = Outcome::default();
    let mut a_object = deployment_object(3);
    let user = User::admin();
    let a = attrs(
        &deployment::INFO,
        Operation::Create,
        Some(&mut a_object),
        None,
        &user,
    );
    let audit_only = binding(json!({"validationActions": ["Audit"]}));
    for max in ["9", "5", "9"] {
        outcome.record(
            &a,
            "replicas",
            &audit_only,
            &evaluate(&p, &input, &params(max)),
        );
    }
    assert_eq!(
        outcome.audit_annotations(),
        [
            ("replicas/limit".to_string(), "5, 9".to_string()),
            ("replicas/replicas".to_string(), "replicas: 3".to_string())
        ]
    );
    // Anything but a string or null (or an error) follows the failure policy.
    let numeric = |failure: &str| {
        policy(
            json!({"failurePolicy": failure, "validations": [{"expression": "true"}],
            "auditAnnotations": [{"key": "n", "valueExpression": "object.spec.replicas"}]}),
        )
    };
    let v = violations_of(&numeric("Fail"), &input, &cel::Value::Null);
    assert_eq!(v.len(), 1);
    assert!(
        v[0].message.contains("must be either string or null"),
        "{}",
        v[0].message
    );
    assert!(violations_of(&numeric("Ignore"), &input, &cel::Value::Null).is_empty());
}

#[tokio::test]
async fn the_authorizer_variable_asks_rbac_for_the_requests_user() {
    let (_dir, registry) = registry();
    let authorizer = Arc::new(crate::authz::Authorizer::default());
    let rbac = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "scaler"},
            "rules": [{"apiGroups": ["apps"], "resources": ["deployments/scale"],
                       "verbs": ["update"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "scalers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "scaler"},
            "subjects": [{"kind": "User", "name": "ops"}]}),
    ];
    authorizer.change(|policy| {
        policy.apply(
            crate::authz::rbac::Kind::ClusterRole,
            "",
            "scaler",
            Some(&rbac[0]),
        );
        policy.apply(
            crate::authz::rbac::Kind::ClusterRoleBinding,
            "",
            "scalers",
            Some(&rbac[1]),
        );
    });
    let policies = Arc::new(Policies::new(Arc::new(Kinds::builtin()), authorizer));
    // More than three replicas only for those who may scale this very Deployment.
    policies.put(
        false,
        &json!({"metadata": {"name": "replicas"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
        "validations": [{
            "expression": "object.spec.replicas <= 3 || authorizer.requestResource.subresource('scale').check('update').allowed()",
            "messageExpression": "'may not scale: ' + authorizer.group('apps').resource('deployments').subresource('scale').namespace(request.namespace).check('update').reason()"}]}}),
    );
    policies.put(
        true,
        &json!({"metadata": {"name": "replicas-binding"}, "spec": {
        "policyName": "replicas", "validationActions": ["Deny"]}}),
    );
    let plugin = ValidatingAdmissionPolicy(policies);
    let run = |name: &str, replicas: i64| {
        let user = User {
            name: name.to_string(),
            uid: String::new(),
            groups: vec![crate::auth::AUTHENTICATED_GROUP.to_string()],
            extra: Default::default(),
        };
        let (plugin, registry) = (&plugin, &registry);
        async move {
            let mut d = deployment_object(replicas);
            let a = attrs(
                &deployment::INFO,
                Operation::Create,
                Some(&mut d),
                None,
                &user,
            );
            plugin.validate(registry, &a).await
        }
    };
    assert!(run("alice", 3).await.is_ok());
    assert!(run("ops", 10).await.is_ok());
    let refused = run("alice", 10).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .ends_with("denied request: may not scale:"),
        "{refused}"
    );
}

//! Validation and defaults of `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy and
//! ValidatingAdmissionPolicyBinding, with Kubernetes' checks and messages
//! (`pkg/apis/admissionregistration/validation`, `v1/defaults.go`). Every CEL expression must
//! compile here, so the admission plugin only meets expressions that do; an expression that
//! fails at run time follows the policy's `failurePolicy` there.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ParamKind, ParamRef, RuleWithOperations,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec,
};
use serde_json::{Value, json};

use super::apps::validate_label_selector;
use super::names;
use super::webhooks::{validate_match_conditions, validate_rule};
use super::{FieldError, Path};
use crate::custom::cel::Expression;

/// The reasons a validation may give, and the HTTP code each refuses with.
pub const REASONS: &[(&str, u16)] = &[
    ("Unauthorized", 401),
    ("Forbidden", 403),
    ("Invalid", 422),
    ("RequestEntityTooLarge", 413),
];

/// What a binding may do with a failed validation.
pub const VALIDATION_ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];

/// The longest `valueExpression` of an audit annotation (kube-apiserver's 5 KiB).
pub const MAX_EXPRESSION_BYTES: usize = 5 * 1024;

/// What a binding does when its `paramRef` finds nothing.
pub const PARAMETER_NOT_FOUND_ACTIONS: &[&str] = &["Allow", "Deny"];

/// Fills in what a policy left out, as Kubernetes' v1 defaults do: `failurePolicy: Fail`, and in
/// `matchConstraints` `matchPolicy: Equivalent`, empty selectors and a rule scope of `*`.
pub fn default_policy(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("failurePolicy").is_none_or(Value::is_null) {
        spec.insert("failurePolicy".into(), json!("Fail"));
    }
    if let Some(constraints) = spec.get_mut("matchConstraints") {
        default_match_resources(constraints);
    }
}

/// The binding's defaults: those of its `matchResources`.
pub fn default_binding(object: &mut Value) {
    if let Some(resources) = object.pointer_mut("/spec/matchResources") {
        default_match_resources(resources);
    }
}

fn default_match_resources(resources: &mut Value) {
    let Some(resources) = resources.as_object_mut() else {
        return;
    };
    for (k, v) in [
        ("matchPolicy", json!("Equivalent")),
        ("namespaceSelector", json!({})),
        ("objectSelector", json!({})),
    ] {
        if resources.get(k).is_none_or(Value::is_null) {
            resources.insert(k.into(), v);
        }
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        if let Some(rules) = resources.get_mut(list).and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule.insert("scope".into(), json!("*"));
                }
            }
        }
    }
}

/// A policy's spec (`validateValidatingAdmissionPolicySpec`).
pub fn validate_policy_spec(name: &str, spec: &ValidatingAdmissionPolicySpec) -> Vec<FieldError> {
    let path = Path::new("spec");
    let mut errs = Vec::new();
    if let Some(policy) = spec.failure_policy.as_deref()
        && !["Fail", "Ignore"].contains(&policy)
    {
        errs.push(FieldError::not_supported(
            path.child("failurePolicy"),
            policy,
            &["Fail", "Ignore"],
        ));
    }
    if let Some(kind) = &spec.param_kind {
        errs.extend(validate_param_kind(kind, &path.child("paramKind")));
    }
    match &spec.match_constraints {
        None => errs.push(FieldError::required(path.child("matchConstraints"), "")),
        Some(constraints) => {
            let path = path.child("matchConstraints");
            errs.extend(validate_match_resources(constraints, &path));
            if constraints
                .resource_rules
                .as_ref()
                .is_none_or(Vec::is_empty)
            {
                errs.push(FieldError::required(path.child("resourceRules"), ""));
            }
        }
    }
    let validations = spec.validations.as_deref().unwrap_or_default();
    let annotations = spec.audit_annotations.as_deref().unwrap_or_default();
    if validations.is_empty() && annotations.is_empty() {
        errs.push(FieldError::required(
            path.child("validations"),
            "validations or auditAnnotations must contain at least one item",
        ));
    }
    errs.extend(validate_match_conditions(
        spec.match_conditions.as_deref().unwrap_or_default(),
        &path.child("matchConditions"),
    ));
    let mut names = BTreeSet::new();
    for (i, variable) in spec.variables.iter().flatten().enumerate() {
        let path = path.child("variables").index(i);
        if variable.name.is_empty() {
            errs.push(FieldError::required(path.child("name"), ""));
        } else if !is_cel_identifier(&variable.name) {
            errs.push(FieldError::invalid(
                path.child("name"),
                variable.name.as_str(),
                "name is not a valid CEL identifier",
            ));
        } else if !names.insert(variable.name.as_str()) {
            errs.push(FieldError::duplicate(
                path.child("name"),
                variable.name.as_str(),
            ));
        }
        errs.extend(expression(&variable.expression, &path.child("expression")));
    }
    for (i, validation) in validations.iter().enumerate() {
        let path = path.child("validations").index(i);
        errs.extend(expression(
            &validation.expression,
            &path.child("expression"),
        ));
        if let Some(m) = validation.message.as_deref() {
            if m.contains('\n') {
                errs.push(FieldError::invalid(
                    path.child("message"),
                    m,
                    "message must not contain line breaks",
                ));
            } else if m.trim().is_empty() {
                errs.push(FieldError::invalid(
                    path.child("message"),
                    m,
                    "message must be non-empty if specified",
                ));
            }
        }
        if let Some(m) = validation.message_expression.as_deref()
            && !m.trim().is_empty()
        {
            errs.extend(expression(m, &path.child("messageExpression")));
        }
        if let Some(reason) = validation.reason.as_deref()
            && !REASONS.iter().any(|(r, _)| *r == reason)
        {
            let supported: Vec<&str> = REASONS.iter().map(|(r, _)| *r).collect();
            errs.push(FieldError::not_supported(
                path.child("reason"),
                reason,
                &supported,
            ));
        }
    }
    let mut keys = BTreeSet::new();
    for (i, annotation) in annotations.iter().enumerate() {
        let path = path.child("auditAnnotations").index(i);
        if annotation.key.is_empty() {
            errs.push(FieldError::required(path.child("key"), ""));
        } else if !keys.insert(annotation.key.as_str()) {
            errs.push(FieldError::duplicate(
                path.child("key"),
                annotation.key.as_str(),
            ));
        } else if name.is_empty() {
            errs.push(FieldError::invalid(
                path.child("key"),
                annotation.key.as_str(),
                "requires metadata.name be non-empty",
            ));
        } else {
            // The annotation is written as `<policy>/<key>`, which must be an annotation key.
            let written = format!("{name}/{}", annotation.key);
            for m in names::qualified_name(&written) {
                errs.push(FieldError::invalid(path.child("key"), written.as_str(), m));
            }
        }
        if annotation.value_expression.trim().len() > MAX_EXPRESSION_BYTES {
            errs.push(FieldError::too_long(
                path.child("valueExpression"),
                MAX_EXPRESSION_BYTES,
            ));
        } else {
            errs.extend(expression(
                &annotation.value_expression,
                &path.child("valueExpression"),
            ));
        }
    }
    errs
}

/// A binding's spec (`validateValidatingAdmissionPolicyBindingSpec`).
pub fn validate_binding_spec(spec: &ValidatingAdmissionPolicyBindingSpec) -> Vec<FieldError> {
    let path = Path::new("spec");
    let mut errs = Vec::new();
    match spec.policy_name.as_deref() {
        None | Some("") => errs.push(FieldError::required(path.child("policyName"), "")),
        Some(name) => {
            for m in names::dns1123_subdomain(name) {
                errs.push(FieldError::invalid(path.child("policyName"), name, m));
            }
        }
    }
    if let Some(resources) = &spec.match_resources {
        errs.extend(validate_match_resources(
            resources,
            &path.child("matchResources"),
        ));
    }
    if let Some(param_ref) = &spec.param_ref {
        errs.extend(validate_param_ref(param_ref, &path.child("paramRef")));
    }
    errs.extend(validate_actions(
        spec.validation_actions.as_deref().unwrap_or_default(),
        &path.child("validationActions"),
    ));
    errs
}

/// `validationActions`: at least one, no repeats, known, and not both Deny and Warn.
fn validate_actions(actions: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if actions.is_empty() {
        errs.push(FieldError::required(path.clone(), ""));
        return errs;
    }
    let mut seen = BTreeSet::new();
    for (i, action) in actions.iter().enumerate() {
        if !seen.insert(action.as_str()) {
            errs.push(FieldError::duplicate(path.index(i), action.as_str()));
        }
        if !VALIDATION_ACTIONS.contains(&action.as_str()) {
            errs.push(FieldError::not_supported(
                path.index(i),
                action.as_str(),
                VALIDATION_ACTIONS,
            ));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.push(FieldError::invalid(
            path.clone(),
            json!(actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    errs
}

/// `paramRef`: a name or a selector (not both), a well-formed namespace, and what to do when
/// nothing is found.
fn validate_param_ref(param_ref: &ParamRef, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = param_ref.name.as_deref().unwrap_or_default();
    if !name.is_empty() {
        for m in names::path_segment_name(name, false) {
            errs.push(FieldError::invalid(path.child("name"), name, m));
        }
        if param_ref.selector.is_some() {
            errs.push(FieldError::forbidden(
                path.child("name"),
                "name and selector are mutually exclusive",
            ));
        }
    }
    if let Some(namespace) = param_ref.namespace.as_deref().filter(|n| !n.is_empty()) {
        for m in names::path_segment_name(namespace, false) {
            errs.push(FieldError::invalid(path.child("namespace"), namespace, m));
        }
    }
    if let Some(selector) = &param_ref.selector {
        errs.extend(validate_label_selector(selector, &path.child("selector")));
    }
    if name.is_empty() && param_ref.selector.is_none() {
        errs.push(FieldError::required(
            path.clone(),
            "one of name or selector must be specified",
        ));
    }
    match param_ref.parameter_not_found_action.as_deref() {
        None | Some("") => errs.push(FieldError::required(
            path.child("parameterNotFoundAction"),
            "",
        )),
        Some(action) if !PARAMETER_NOT_FOUND_ACTIONS.contains(&action) => {
            errs.push(FieldError::not_supported(
                path.child("parameterNotFoundAction"),
                action,
                PARAMETER_NOT_FOUND_ACTIONS,
            ))
        }
        Some(_) => {}
    }
    errs
}

fn validate_param_kind(kind: &ParamKind, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match kind.api_version.as_deref() {
        None | Some("") => errs.push(FieldError::required(path.child("apiVersion"), "")),
        Some(v) => {
            let (group, version) = v.rsplit_once('/').unwrap_or(("", v));
            let bad = version.is_empty()
                || !names::dns1035_label(version).is_empty()
                || (!group.is_empty() && !names::dns1123_subdomain(group).is_empty())
                || v.matches('/').count() > 1;
            if bad {
                errs.push(FieldError::invalid(
                    path.child("apiVersion"),
                    v,
                    "must be a valid group/version",
                ));
            }
        }
    }
    if kind.kind.as_deref().is_none_or(str::is_empty) {
        errs.push(FieldError::required(path.child("kind"), ""));
    }
    errs
}

/// `matchResources` of a policy or binding: its rules as webhook rules are checked, and its
/// selectors and match policy.
fn validate_match_resources(resources: &MatchResources, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(policy) = resources.match_policy.as_deref()
        && !["Equivalent", "Exact"].contains(&policy)
    {
        errs.push(FieldError::not_supported(
            path.child("matchPolicy"),
            policy,
            &["Equivalent", "Exact"],
        ));
    }
    for (selector, field) in [
        (&resources.namespace_selector, "namespaceSelector"),
        (&resources.object_selector, "objectSelector"),
    ] {
        if let Some(selector) = selector {
            errs.extend(validate_label_selector(selector, &path.child(field)));
        }
    }
    for (rules, field) in [
        (&resources.resource_rules, "resourceRules"),
        (&resources.exclude_resource_rules, "excludeResourceRules"),
    ] {
        for (i, rule) in rules.iter().flatten().enumerate() {
            let path = path.child(field).index(i);
            errs.extend(validate_rule(&unnamed(rule), &path));
            for (j, name) in rule.resource_names.iter().flatten().enumerate() {
                for m in names::path_segment_name(name, false) {
                    errs.push(FieldError::invalid(
                        path.child("resourceNames").index(j),
                        name.as_str(),
                        m,
                    ));
                }
            }
        }
    }
    errs
}

/// A named rule without its names: what webhook rules check and match.
pub fn unnamed(rule: &NamedRuleWithOperations) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: rule.api_groups.clone(),
        api_versions: rule.api_versions.clone(),
        operations: rule.operations.clone(),
        resources: rule.resources.clone(),
        scope: rule.scope.clone(),
    }
}

/// A required CEL expression that compiles.
fn expression(source: &str, path: &Path) -> Vec<FieldError> {
    if source.trim().is_empty() {
        return vec![FieldError::required(path.clone(), "")];
    }
    match Expression::compile(source) {
        Ok(_) => Vec::new(),
        Err(e) => vec![FieldError::invalid(
            path.clone(),
            source,
            format!("compilation failed: {e}"),
        )],
    }
}

/// A CEL identifier: a letter or `_`, then letters, digits and `_`.
fn is_cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

//! Validation and defaults shared by `admissionregistration.k8s.io/v1`
//! ValidatingWebhookConfiguration and MutatingWebhookConfiguration, with Kubernetes' checks and
//! messages (`pkg/apis/admissionregistration/validation`, `v1/defaults.go`).

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::apps::validate_label_selector;
use super::names;
use super::{FieldError, Path};

/// The longest a webhook may take, and what it gets when it does not say.
pub const MAX_TIMEOUT_SECONDS: i32 = 30;
/// The timeout of a webhook that names none.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 10;
/// The most match conditions a webhook may have.
pub const MAX_MATCH_CONDITIONS: usize = 64;
/// The AdmissionReview versions this server speaks.
pub const REVIEW_VERSIONS: &[&str] = &["v1"];

/// The fields both kinds of webhook have, borrowed from either.
pub struct Hook<'a> {
    /// `name`.
    pub name: &'a str,
    /// `clientConfig`.
    pub client_config: &'a WebhookClientConfig,
    /// `rules`.
    pub rules: &'a [RuleWithOperations],
    /// `failurePolicy`.
    pub failure_policy: Option<&'a str>,
    /// `matchPolicy`.
    pub match_policy: Option<&'a str>,
    /// `namespaceSelector`.
    pub namespace_selector: Option<&'a LabelSelector>,
    /// `objectSelector`.
    pub object_selector: Option<&'a LabelSelector>,
    /// `sideEffects`.
    pub side_effects: &'a str,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i32>,
    /// `admissionReviewVersions`.
    pub admission_review_versions: &'a [String],
    /// `matchConditions`.
    pub match_conditions: &'a [MatchCondition],
}

/// Fills in what a webhook left out, as Kubernetes' v1 defaults do: `failurePolicy: Fail`,
/// `matchPolicy: Equivalent`, empty selectors, `timeoutSeconds: 10`, a service port of 443, a
/// rule scope of `*`, and (`mutating`) `reinvocationPolicy: Never`.
pub fn default_webhooks(object: &mut Value, mutating: bool) {
    let Some(hooks) = object.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for hook in hooks.iter_mut().filter_map(Value::as_object_mut) {
        let mut set = |k: &str, v: Value| {
            if hook.get(k).is_none_or(Value::is_null) {
                hook.insert(k.to_string(), v);
            }
        };
        set("failurePolicy", json!("Fail"));
        set("matchPolicy", json!("Equivalent"));
        set("namespaceSelector", json!({}));
        set("objectSelector", json!({}));
        set("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS));
        if mutating {
            set("reinvocationPolicy", json!("Never"));
        }
        if let Some(service) = hook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
        {
            service.entry("port").or_insert(json!(443));
        }
        if let Some(rules) = hook.get_mut("rules").and_then(Value::as_array_mut) {
            for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule.insert("scope".into(), json!("*"));
                }
            }
        }
    }
}

/// Every webhook of a configuration: each valid, their names unique.
pub fn validate_webhooks<'a>(hooks: impl IntoIterator<Item = Hook<'a>>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, hook) in hooks.into_iter().enumerate() {
        let path = Path::new("webhooks").index(i);
        if !hook.name.is_empty() && !seen.insert(hook.name.to_string()) {
            errs.push(FieldError::duplicate(path.child("name"), hook.name));
        }
        errs.extend(validate_webhook(&hook, &path));
    }
    errs
}

/// One webhook (Kubernetes' `validateValidatingWebhook`/`validateMutatingWebhook` for v1, with
/// unique names and `sideEffects` and `admissionReviewVersions` required).
fn validate_webhook(hook: &Hook<'_>, path: &Path) -> Vec<FieldError> {
    let mut errs = fully_qualified_name(hook.name, &path.child("name"));
    for (i, rule) in hook.rules.iter().enumerate() {
        errs.extend(validate_rule(rule, &path.child("rules").index(i)));
    }
    if let Some(policy) = hook.failure_policy
        && !["Fail", "Ignore"].contains(&policy)
    {
        errs.push(FieldError::not_supported(
            path.child("failurePolicy"),
            policy,
            &["Fail", "Ignore"],
        ));
    }
    if let Some(policy) = hook.match_policy
        && !["Equivalent", "Exact"].contains(&policy)
    {
        errs.push(FieldError::not_supported(
            path.child("matchPolicy"),
            policy,
            &["Equivalent", "Exact"],
        ));
    }
    const SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
    if hook.side_effects.is_empty() {
        errs.push(FieldError::required(
            path.child("sideEffects"),
            format!("must specify one of {}", SIDE_EFFECTS.join(", ")),
        ));
    } else if !SIDE_EFFECTS.contains(&hook.side_effects) {
        errs.push(FieldError::not_supported(
            path.child("sideEffects"),
            hook.side_effects,
            SIDE_EFFECTS,
        ));
    }
    if let Some(t) = hook.timeout_seconds
        && !(1..=MAX_TIMEOUT_SECONDS).contains(&t)
    {
        errs.push(FieldError::invalid(
            path.child("timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    errs.extend(validate_review_versions(
        hook.admission_review_versions,
        &path.child("admissionReviewVersions"),
    ));
    for (selector, field) in [
        (hook.namespace_selector, "namespaceSelector"),
        (hook.object_selector, "objectSelector"),
    ] {
        if let Some(selector) = selector {
            errs.extend(validate_label_selector(selector, &path.child(field)));
        }
    }
    errs.extend(validate_client_config(
        hook.client_config,
        &path.child("clientConfig"),
    ));
    errs.extend(validate_match_conditions(
        hook.match_conditions,
        &path.child("matchConditions"),
    ));
    errs
}

/// The reinvocation policy of a mutating webhook.
pub fn validate_reinvocation_policy(policy: Option<&str>, path: &Path) -> Vec<FieldError> {
    match policy {
        None | Some("Never" | "IfNeeded") => Vec::new(),
        Some(other) => vec![FieldError::not_supported(
            path.clone(),
            other,
            &["IfNeeded", "Never"],
        )],
    }
}

/// A DNS subdomain of at least three segments (`IsFullyQualifiedName`).
fn fully_qualified_name(name: &str, path: &Path) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(path.clone(), "")];
    }
    let mut errs: Vec<FieldError> = names::dns1123_subdomain(name)
        .into_iter()
        .map(|m| FieldError::invalid(path.clone(), name, m))
        .collect();
    if errs.is_empty() && name.split('.').count() < 3 {
        errs.push(FieldError::invalid(
            path.clone(),
            name,
            "should be a domain with at least three segments separated by dots",
        ));
    }
    errs
}

fn validate_review_versions(versions: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if versions.is_empty() {
        errs.push(FieldError::required(
            path.clone(),
            format!("must specify one of {}", REVIEW_VERSIONS.join(", ")),
        ));
        return errs;
    }
    let mut seen = BTreeSet::new();
    for (i, v) in versions.iter().enumerate() {
        if !seen.insert(v.as_str()) {
            errs.push(FieldError::invalid(
                path.index(i),
                v.as_str(),
                "duplicate version",
            ));
            continue;
        }
        for m in names::dns1035_label(v) {
            errs.push(FieldError::invalid(path.index(i), v.as_str(), m));
        }
    }
    if !versions
        .iter()
        .any(|v| REVIEW_VERSIONS.contains(&v.as_str()))
    {
        errs.push(FieldError::invalid(
            path.clone(),
            json!(versions),
            format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
    errs
}

/// `validateRuleWithOperations` and `validateRule`.
pub(crate) fn validate_rule(rule: &RuleWithOperations, path: &Path) -> Vec<FieldError> {
    const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
    let mut errs = Vec::new();
    let operations = rule.operations.as_deref().unwrap_or_default();
    if operations.is_empty() {
        errs.push(FieldError::required(path.child("operations"), ""));
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        errs.push(FieldError::invalid(
            path.child("operations"),
            json!(operations),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in operations.iter().enumerate() {
        if !OPERATIONS.contains(&op.as_str()) {
            errs.push(FieldError::not_supported(
                path.child("operations").index(i),
                op.as_str(),
                OPERATIONS,
            ));
        }
    }
    for (field, what) in [
        (&rule.api_groups, "API groups"),
        (&rule.api_versions, "API versions"),
    ] {
        let key = if what == "API groups" {
            "apiGroups"
        } else {
            "apiVersions"
        };
        let list = field.as_deref().unwrap_or_default();
        if list.is_empty() {
            errs.push(FieldError::required(path.child(key), ""));
        }
        if list.len() > 1 && list.iter().any(|g| g == "*") {
            errs.push(FieldError::invalid(
                path.child(key),
                json!(list),
                format!("if '*' is present, must not specify other {what}"),
            ));
        }
        if key == "apiVersions" {
            for (i, v) in list.iter().enumerate() {
                if v.is_empty() {
                    errs.push(FieldError::required(path.child(key).index(i), ""));
                }
            }
        }
    }
    errs.extend(validate_resources(
        rule.resources.as_deref().unwrap_or_default(),
        &path.child("resources"),
    ));
    if let Some(scope) = rule.scope.as_deref()
        && !["*", "Cluster", "Namespaced"].contains(&scope)
    {
        errs.push(FieldError::not_supported(
            path.child("scope"),
            scope,
            &["*", "Cluster", "Namespaced"],
        ));
    }
    errs
}

/// `validateResources`: `*`, `*/*`, `*/sub` and `res/*` may not be combined with what they cover.
fn validate_resources(resources: &[String], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if resources.is_empty() {
        errs.push(FieldError::required(path.clone(), ""));
    }
    // resource -> its subresources ("" for the resource itself).
    let mut seen: std::collections::BTreeMap<&str, BTreeSet<&str>> = Default::default();
    let has_all = resources.iter().any(|r| r == "*/*");
    for (i, r) in resources.iter().enumerate() {
        if r.is_empty() {
            errs.push(FieldError::required(path.index(i), ""));
            continue;
        }
        if r == "*/*" && resources.len() > 1 {
            errs.push(FieldError::invalid(
                path.clone(),
                json!(resources),
                "if '*/*' is present, must not specify other resources",
            ));
            continue;
        }
        if r == "*" && resources.len() > 1 && !has_all {
            errs.push(FieldError::invalid(
                path.clone(),
                json!(resources),
                "if '*' is present, must not specify other resources without subresources",
            ));
            continue;
        }
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        if res.is_empty() || (r.contains('/') && sub.is_empty()) {
            errs.push(FieldError::invalid(
                path.index(i),
                r.as_str(),
                "resource and subresource must not be empty",
            ));
            continue;
        }
        if !sub.is_empty() && sub != "*" && seen.get("*").is_some_and(|s| s.contains(sub)) {
            errs.push(FieldError::invalid(
                path.index(i),
                r.as_str(),
                format!("if '*/{sub}' is present, must not specify {r}"),
            ));
        }
        if res != "*" && seen.get(res).is_some_and(|s| s.contains("*")) && !sub.is_empty() {
            errs.push(FieldError::invalid(
                path.index(i),
                r.as_str(),
                format!("if '{res}/*' is present, must not specify {r}"),
            ));
        }
        seen.entry(res).or_default().insert(sub);
    }
    errs
}

/// `clientConfig`: exactly one of an `https` URL without user, query or fragment, and a
/// Service reference.
fn validate_client_config(config: &WebhookClientConfig, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (&config.url, &config.service) {
        (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
            path.clone(),
            "exactly one of url or service is required",
        )),
        (Some(url), None) => {
            if let Some(why) = url_problem(url) {
                errs.push(FieldError::invalid(path.child("url"), url.as_str(), why));
            }
        }
        (None, Some(service)) => {
            let path = path.child("service");
            if service.name.is_empty() {
                errs.push(FieldError::required(
                    path.child("name"),
                    "service name is required",
                ));
            }
            if service.namespace.is_empty() {
                errs.push(FieldError::required(
                    path.child("namespace"),
                    "service namespace is required",
                ));
            }
            if let Some(port) = service.port
                && !(1..=65535).contains(&port)
            {
                errs.push(FieldError::invalid(
                    path.child("port"),
                    port,
                    format!(
                        "port is not valid: {}",
                        names::inclusive_range_error(1, 65535)
                    ),
                ));
            }
            if let Some(p) = service.path.as_deref()
                && let Some(why) = path_problem(p)
            {
                errs.push(FieldError::invalid(path.child("path"), p, why));
            }
        }
    }
    errs
}

/// Why `url` is not a webhook URL, if it is not.
pub fn url_problem(url: &str) -> Option<String> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Some(match url.split_once("://") {
            Some(_) => "'https' is the only allowed URL scheme".into(),
            None => "host must be specified".into(),
        });
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some("user information is not permitted in the URL".into());
    }
    if authority.is_empty() {
        return Some("host must be specified".into());
    }
    if rest.contains('#') {
        return Some("fragments are not permitted in the URL".into());
    }
    if rest.contains('?') {
        return Some("query parameters are not permitted in the URL".into());
    }
    None
}

/// Why a Service reference's `path` is not usable, if it is not.
fn path_problem(p: &str) -> Option<String> {
    if !p.starts_with('/') {
        return Some("must start with a '/'".into());
    }
    if p == "/" {
        return None;
    }
    if p.ends_with('/') {
        return Some("must not end with a '/'".into());
    }
    for segment in p[1..].split('/') {
        if segment.is_empty() {
            return Some("segment[?]: must not be empty".into());
        }
        if !names::dns1123_subdomain(&segment.to_ascii_lowercase()).is_empty() {
            return Some(format!(
                "segment {segment}: must be a DNS subdomain, perhaps with upper-case letters"
            ));
        }
    }
    None
}

/// `matchConditions`: at most 64, names required, qualified and unique, expressions that
/// compile as CEL.
pub(crate) fn validate_match_conditions(
    conditions: &[MatchCondition],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errs.push(FieldError::too_many(
            path.clone(),
            conditions.len(),
            MAX_MATCH_CONDITIONS,
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let path = path.index(i);
        if condition.name.is_empty() {
            errs.push(FieldError::required(path.child("name"), ""));
        } else {
            for m in names::qualified_name(&condition.name) {
                errs.push(FieldError::invalid(
                    path.child("name"),
                    condition.name.as_str(),
                    m,
                ));
            }
            if !seen.insert(condition.name.as_str()) {
                errs.push(FieldError::duplicate(
                    path.child("name"),
                    condition.name.as_str(),
                ));
            }
        }
        if condition.expression.is_empty() {
            errs.push(FieldError::required(path.child("expression"), ""));
        } else if let Err(e) = crate::custom::cel::Expression::compile(&condition.expression) {
            errs.push(FieldError::invalid(
                path.child("expression"),
                condition.expression.as_str(),
                format!("compilation failed: {e}"),
            ));
        }
    }
    errs
}

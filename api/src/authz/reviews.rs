//! The answers to the review kinds, which are asked by creating them and never stored:
//! `kubectl auth can-i` (SelfSubjectAccessReview), `kubectl auth can-i --list`
//! (SelfSubjectRulesReview), `kubectl auth whoami` (SelfSubjectReview), and the reviews of
//! another user's access (SubjectAccessReview, LocalSubjectAccessReview in a namespace).

use serde_json::{Value, json};
use skiff_kinds::Kind;
use skiff_meta::status::{FieldError, FieldPath};

use super::{Authorizer, Decision, Request};
use crate::auth::User;
use crate::error::{Error, Result};

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The answer to `review` (a decoded object of `kind`, created in `namespace`) asked by `user`:
/// the object with its `status` filled in.
pub fn answer(
    authorizer: &Authorizer,
    kind: &dyn Kind,
    user: &User,
    namespace: Option<&str>,
    mut review: Value,
) -> Result<Value> {
    let info = kind.info();
    let invalid = |errors: Vec<FieldError>| Error::invalid_fields(info, "", &errors);
    let status = match info.kind {
        "SelfSubjectReview" => json!({"userInfo": crate::serviceaccount::user_info(user)}),
        "SelfSubjectRulesReview" => {
            let ns = text(&review["spec"], "namespace");
            rules_review(authorizer, user, ns)
        }
        "SelfSubjectAccessReview" | "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let spec = review["spec"].clone();
            let subject = if info.kind == "SelfSubjectAccessReview" {
                user.clone()
            } else {
                subject_of(&spec).map_err(|e| invalid(vec![e]))?
            };
            let request = attributes(&spec).map_err(|e| invalid(vec![e]))?;
            if info.kind == "LocalSubjectAccessReview" {
                let url_ns = namespace.unwrap_or_default();
                let asked = match &request {
                    Request::Resource { namespace, .. } => *namespace,
                    Request::NonResource { .. } => {
                        return Err(invalid(vec![FieldError::invalid(
                            FieldPath::new("spec").child("nonResourceAttributes"),
                            spec["nonResourceAttributes"].clone(),
                            "disallowed on this kind of request",
                        )]));
                    }
                };
                if asked != url_ns {
                    return Err(invalid(vec![FieldError::invalid(
                        FieldPath::new("spec")
                            .child("resourceAttributes")
                            .child("namespace"),
                        asked,
                        "must match metadata.namespace",
                    )]));
                }
            }
            match authorizer.authorize(&subject, &request) {
                Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
                Decision::Deny(reason) if reason.is_empty() => json!({"allowed": false}),
                Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
            }
        }
        other => {
            return Err(Error::Internal(format!(
                "{other} is not a review this server answers"
            )));
        }
    };
    review["status"] = status;
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["apiVersion"] = json!(info.api_version());
    review["kind"] = json!(info.kind);
    Ok(review)
}

/// The user a SubjectAccessReview asks about: `spec.user`, `spec.groups`, `spec.uid`.
fn subject_of(spec: &Value) -> Result<User, FieldError> {
    let name = text(spec, "user").to_string();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if name.is_empty() && groups.is_empty() {
        return Err(FieldError::invalid(
            FieldPath::new("spec").child("user"),
            "",
            "at least one of user or group must be specified",
        ));
    }
    let extra = spec["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let values = v.as_array().into_iter().flatten();
            let values = values.filter_map(Value::as_str).map(str::to_string);
            (k.clone(), values.collect())
        })
        .collect();
    Ok(User {
        name,
        uid: text(spec, "uid").to_string(),
        groups,
        extra,
    })
}

/// The request an access review asks about: exactly one of `spec.resourceAttributes` and
/// `spec.nonResourceAttributes`.
fn attributes(spec: &Value) -> Result<Request<'_>, FieldError> {
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    match (resource, non_resource) {
        (Some(r), None) => Ok(Request::Resource {
            verb: text(r, "verb"),
            group: text(r, "group"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            namespace: text(r, "namespace"),
            name: text(r, "name"),
        }),
        (None, Some(n)) => Ok(Request::NonResource {
            verb: text(n, "verb"),
            path: text(n, "path"),
        }),
        _ => Err(FieldError::invalid(
            FieldPath::new("spec").child("resourceAttributes"),
            spec.get("resourceAttributes")
                .cloned()
                .unwrap_or(Value::Null),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
    }
}

/// `status` of a SelfSubjectRulesReview: every rule `user` holds in `namespace`, split into
/// resource and non-resource rules; `incomplete` with the errors when a binding names a missing
/// role.
fn rules_review(authorizer: &Authorizer, user: &User, namespace: &str) -> Value {
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    let (rules, errors) = if user.in_group(crate::auth::MASTERS_GROUP) {
        // What `system:masters` may do, as RBAC's cluster-admin spells it.
        let all = vec!["*".to_string()];
        let rule = |urls: bool| super::Rule {
            verbs: all.clone(),
            api_groups: if urls { vec![] } else { all.clone() },
            resources: if urls { vec![] } else { all.clone() },
            resource_names: vec![],
            non_resource_urls: if urls { all.clone() } else { vec![] },
        };
        (vec![rule(false), rule(true)], Vec::new())
    } else {
        authorizer.policy().rules_for(user, namespace)
    };
    for rule in rules {
        if rule.non_resource_urls.is_empty() {
            let mut r = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups,
                "resources": rule.resources});
            if !rule.resource_names.is_empty() {
                r["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(r);
        } else {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": !errors.is_empty(),
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    status
}

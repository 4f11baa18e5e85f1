//! Where a binding finds its policy's params (`paramKind` + `paramRef`), and what finding none
//! means. Pure: the caller reads the objects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;
use skiff_meta::labels::Selector;

use super::compiled::{Binding, Policy};

/// The params of one binding to read.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    /// The namespace to read them in (`None` for a cluster-scoped kind).
    pub namespace: Option<String>,
    /// The one param object, by name.
    pub name: Option<String>,
    /// Or every object this selects.
    pub selector: Option<LabelSelector>,
    /// `parameterNotFoundAction: Deny` (unset counts as Allow, as in Kubernetes; validation
    /// requires it).
    pub deny_when_missing: bool,
}

/// Where `binding` finds the params of `policy`, whose param kind is namespaced or not, for a
/// request in `request_namespace`: `Ok(None)` when the policy is evaluated once with null
/// params (it has no `paramKind`, or the binding no `paramRef`); `Err` is a configuration error
/// of the binding, which refuses under `failurePolicy: Fail`.
pub fn lookup(
    policy: &Policy,
    binding: &Binding,
    namespaced: bool,
    request_namespace: Option<&str>,
) -> Result<Option<Lookup>, String> {
    if policy.param_kind.is_none() {
        return Ok(None);
    }
    let Some(param_ref) = &binding.param_ref else {
        return Ok(None);
    };
    let given = param_ref.namespace.as_deref().filter(|n| !n.is_empty());
    let namespace = match (namespaced, given, request_namespace) {
        (false, Some(_), _) => {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        }
        (false, None, _) => None,
        (true, Some(ns), _) | (true, None, Some(ns)) => Some(ns.to_string()),
        (true, None, None) => {
            return Err(
                "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                    .into(),
            );
        }
    };
    Ok(Some(Lookup {
        namespace,
        name: param_ref.name.clone().filter(|n| !n.is_empty()),
        selector: param_ref.selector.clone(),
        deny_when_missing: param_ref.parameter_not_found_action.as_deref() == Some("Deny"),
    }))
}

/// The objects among `candidates` the lookup's selector picks.
pub fn select(lookup: &Lookup, candidates: Vec<Value>) -> Result<Vec<Value>, String> {
    let selector = match &lookup.selector {
        Some(s) => {
            Selector::from_label_selector(s).map_err(|e| format!("invalid selector: {e}"))?
        }
        None => Selector::default(),
    };
    Ok(candidates
        .into_iter()
        .filter(|o| {
            let labels = o
                .pointer("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default();
            selector.matches(&labels)
        })
        .collect())
}

/// What finding no params means: under `parameterNotFoundAction: Deny` a configuration error
/// of the binding (this text); under Allow, nothing (the policy is not evaluated).
pub fn missing(lookup: &Lookup) -> Option<&'static str> {
    lookup
        .deny_when_missing
        .then_some("no params found for policy binding with `Deny` parameterNotFoundAction")
}

//! Evaluating one policy for one request and one param object, and what a binding's actions
//! make of the outcome. Pure: CEL values in, violations, errors and warnings out.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cel::Value as Cel;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause;
use skiff_kinds::custom::authorizer::RequestAuthorizer;
use skiff_kinds::custom::cel::Scope;
use skiff_meta::status::{ApiError, GroupResource, Reason};

use super::compiled::{Binding, Compiled, Policy, Validation};
use crate::admission::Attributes;

/// The variables the expressions of a request may see, converted to CEL once per request;
/// those no policy reads are left null.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// `object`: the new object (null on delete).
    pub object: Cel,
    /// `oldObject`: the stored object (null on create).
    pub old_object: Cel,
    /// `request`: the AdmissionRequest's attributes.
    pub request: Cel,
    /// `namespaceObject`: the request's Namespace (null for cluster-scoped requests).
    pub namespace_object: Cel,
    /// `authorizer`: the API server's authorizer for the request's user (when some policy reads
    /// it).
    pub authorizer: Option<RequestAuthorizer>,
}

impl Inputs {
    /// Each input with the name it is bound as.
    fn named(&self) -> [(&'static str, &Cel); 4] {
        [
            ("object", &self.object),
            ("oldObject", &self.old_object),
            ("request", &self.request),
            ("namespaceObject", &self.namespace_object),
        ]
    }
}

/// A validation that did not hold (or could not be evaluated under `failurePolicy: Fail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What failed, in words.
    pub message: String,
    /// The Status reason.
    pub reason: &'static str,
    /// The HTTP code.
    pub code: u16,
    /// The index of the validation that failed (`expressionIndex` in the audit log), when one did.
    pub index: Option<usize>,
}

impl Violation {
    /// A failure of configuration or evaluation: refused as Invalid (422) like Kubernetes.
    pub fn error(message: impl Into<String>) -> Violation {
        Violation {
            message: message.into(),
            reason: "Invalid",
            code: 422,
            index: None,
        }
    }

    fn at(self, index: usize) -> Violation {
        Violation {
            index: Some(index),
            ..self
        }
    }
}

/// What evaluating a policy for one request and param object gave.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Evaluated {
    /// The validations that did not hold, and failures under `failurePolicy: Fail`.
    pub violations: Vec<Violation>,
    /// The `auditAnnotations` that gave a value, by key (those that gave null are left out).
    pub annotations: Vec<(String, String)>,
}

/// A failure that follows the policy's failure policy: a violation under Fail, nothing under
/// Ignore.
pub fn failure(policy: &Policy, message: impl Into<String>) -> Option<Violation> {
    policy.fail.then(|| Violation::error(message))
}

/// The longest message a `messageExpression` may produce (Kubernetes'
/// `MaxEvaluatedMessageExpressionSizeBytes`); a longer one falls back to `message`.
pub const MAX_MESSAGE_BYTES: usize = 5 * 1024;

fn bool_of(value: Result<Cel, String>) -> Result<bool, String> {
    match value? {
        Cel::Bool(b) => Ok(b),
        other => Err(format!("expected a bool, got {other:?}")),
    }
}

fn run(expression: &Compiled, scope: &Scope) -> Result<Cel, String> {
    match expression {
        Ok(e) => e.evaluate_in(scope),
        Err(e) => Err(e.clone()),
    }
}

/// Whether `source` reads `variables.<name>` (not merely a longer name starting with it).
fn reads_variable(source: &str, name: &str) -> bool {
    let needle = format!("variables.{name}");
    source.match_indices(&needle).any(|(at, _)| {
        let before = source[..at].chars().next_back();
        let after = source[at + needle.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The message of a failed validation: the `messageExpression`'s string when it is one line of
/// at most [`MAX_MESSAGE_BYTES`], else `message`, else `failed expression: <expression>`.
fn message_of(validation: &Validation, scope: &Scope) -> String {
    let evaluated = validation
        .message_expression
        .as_ref()
        .and_then(|m| match m.evaluate_in(scope) {
            Ok(Cel::String(s)) => Some(s.trim().to_string()),
            _ => None,
        })
        .filter(|m| !m.is_empty() && m.len() <= MAX_MESSAGE_BYTES && !m.contains('\n'));
    evaluated
        .or_else(|| validation.message.clone())
        .unwrap_or_else(|| format!("failed expression: {}", validation.source.trim()))
}

/// Evaluates `policy` with `params` (null without params): the violations, which the binding's
/// `validationActions` then handle, and the audit annotations. Match conditions come first (a
/// false one means the policy does not apply, and wins over an error; an error follows the
/// failure policy); variables are evaluated in order, each seeing the earlier ones, and an
/// expression that reads a variable that failed fails with that variable's error. An expression
/// that did not compile fails like one that fails at run time. An audit annotation's
/// `valueExpression` gives a string, or null for no annotation; anything else, or an error,
/// follows the failure policy.
pub fn evaluate(policy: &Policy, inputs: &Inputs, params: &Cel) -> Evaluated {
    // Each input the policy reads is bound once, for all its expressions: binding converts the
    // value whole into the interpreter's representation.
    let mut scope = Scope::new();
    for (name, value) in inputs.named().into_iter().chain([("params", params)]) {
        if policy.reads(name) {
            scope.bind(name, value.clone());
        }
    }
    if let Some(authorizer) = inputs
        .authorizer
        .as_ref()
        .filter(|_| policy.reads("authorizer"))
    {
        authorizer.bind(&mut scope);
    }
    let mut condition_error = None;
    for (name, condition) in &policy.conditions {
        match bool_of(run(condition, &scope)) {
            Ok(true) => {}
            Ok(false) => return Evaluated::default(),
            Err(e) => {
                condition_error.get_or_insert_with(|| {
                    format!("failed to evaluate match condition {name:?}: {e}")
                });
            }
        }
    }
    if let Some(e) = condition_error {
        return Evaluated {
            violations: failure(policy, e).into_iter().collect(),
            annotations: Vec::new(),
        };
    }
    let mut variables: HashMap<String, Cel> = HashMap::new();
    let mut failed: Vec<(&str, String)> = Vec::new();
    let reads_variables = policy.reads("variables");
    if reads_variables {
        scope.bind("variables", Cel::from(variables.clone()));
    }
    for (name, expression) in &policy.variables {
        match run(expression, &scope) {
            Ok(value) => {
                variables.insert(name.clone(), value);
                if reads_variables {
                    scope.bind("variables", Cel::from(variables.clone()));
                }
            }
            Err(e) => failed.push((name, e)),
        }
    }
    let mut violations = Vec::new();
    for (index, validation) in policy.validations.iter().enumerate() {
        let outcome = match failed
            .iter()
            .find(|(name, _)| reads_variable(&validation.source, name))
        {
            Some((name, e)) => Err(format!("variable {name:?} failed: {e}")),
            None => bool_of(run(&validation.expression, &scope)),
        };
        let violation = match outcome {
            Ok(true) => None,
            Ok(false) => Some(Violation {
                message: message_of(validation, &scope),
                reason: validation.reason.0,
                code: validation.reason.1,
                index: None,
            }),
            Err(e) if validation.expression.is_err() => failure(policy, e),
            Err(e) => failure(
                policy,
                format!("expression '{}' resulted in error: {e}", validation.source),
            ),
        };
        violations.extend(violation.map(|v| v.at(index)));
    }
    let mut annotations = Vec::new();
    for (key, expression) in &policy.audit_annotations {
        match run(expression, &scope) {
            Ok(Cel::String(value)) => annotations.push((key.clone(), value.to_string())),
            Ok(Cel::Null) => {}
            Ok(other) => violations.extend(failure(
                policy,
                format!(
                    "valueExpression of audit annotation {key:?} resulted in unsupported return \
                     type {other:?}: it must be either string or null"
                ),
            )),
            Err(e) => violations.extend(failure(
                policy,
                format!("valueExpression of audit annotation {key:?} resulted in error: {e}"),
            )),
        }
    }
    Evaluated {
        violations,
        annotations,
    }
}

/// The audit annotation that lists the violations of Audit bindings.
pub const VALIDATION_FAILURE: &str = "validation.policy.admission.k8s.io/validation_failure";

/// What the bindings' actions made of the evaluations of one request.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    /// The first refusal: a violation under a Deny binding, or a configuration error.
    pub denied: Option<ApiError>,
    /// Warnings for the client (Warn bindings).
    pub warnings: Vec<String>,
    /// The violations under Audit bindings, as the [`VALIDATION_FAILURE`] annotation lists them.
    pub audit: Vec<serde_json::Value>,
    /// The values of each policy's audit annotations, by `<policy>/<key>` (several bindings or
    /// param objects may give several).
    pub annotations: BTreeMap<String, BTreeSet<String>>,
}

impl Outcome {
    /// Records what evaluating `policy` under `binding` gave: its violations under the binding's
    /// actions, and its audit annotations whatever the actions.
    pub fn record(
        &mut self,
        a: &Attributes<'_>,
        policy: &str,
        binding: &Binding,
        evaluated: &Evaluated,
    ) {
        for v in &evaluated.violations {
            if binding.deny && self.denied.is_none() {
                self.denied = Some(denial(a, policy, Some(binding.name.as_str()), v));
            }
            if binding.warn {
                self.warnings
                    .push(warning(policy, &binding.name, &v.message));
            }
            if binding.audit {
                self.audit.push(serde_json::json!({
                    "message": v.message,
                    "policy": policy,
                    "binding": binding.name,
                    "expressionIndex": v.index.unwrap_or(0),
                    "validationActions": binding.actions,
                }));
            }
        }
        for (key, value) in &evaluated.annotations {
            self.annotations
                .entry(format!("{policy}/{key}"))
                .or_default()
                .insert(value.clone());
        }
    }

    /// The audit annotations to publish: each policy annotation's distinct values joined with
    /// `", "` (as Kubernetes joins the values of several bindings), and the Audit bindings'
    /// violations as one JSON list.
    pub fn audit_annotations(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .annotations
            .iter()
            .map(|(key, values)| {
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                (key.clone(), values.join(", "))
            })
            .collect();
        if !self.audit.is_empty() {
            out.push((
                VALIDATION_FAILURE.to_string(),
                serde_json::to_string(&self.audit).expect("JSON values serialize"),
            ));
        }
        out
    }

    /// Records a configuration error of `policy` (`binding` `None`) or of `binding`: not a
    /// validation's verdict, so whatever the binding's actions, it refuses the request under
    /// `failurePolicy: Fail` (as Kubernetes does) and is ignored under Ignore.
    pub fn misconfigured(
        &mut self,
        a: &Attributes<'_>,
        policy: &Policy,
        binding: Option<&str>,
        why: &str,
    ) {
        if !policy.fail || self.denied.is_some() {
            return;
        }
        let what = if binding.is_some() {
            "binding"
        } else {
            "policy"
        };
        let v = Violation::error(format!("failed to configure {what}: {why}"));
        self.denied = Some(denial(a, &policy.name, binding, &v));
    }
}

/// The Kubernetes-style text a Warn binding sends.
pub fn warning(policy: &str, binding: &str, message: &str) -> String {
    format!(
        "Validation failed for ValidatingAdmissionPolicy '{policy}' with binding '{binding}': {message}"
    )
}

/// The error a refusal comes as: Kubernetes' forbidden message on the object (`... is
/// forbidden: ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MSG`), with the
/// violation's reason and code, and that text again as the one cause.
pub fn denial(a: &Attributes<'_>, policy: &str, binding: Option<&str>, v: &Violation) -> ApiError {
    let detail = match binding {
        Some(binding) => format!(
            "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {}",
            v.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{policy}' denied request: {}",
            v.message
        ),
    };
    let forbidden = ApiError::forbidden(
        GroupResource::new(a.info.group, a.info.plural),
        a.name,
        &detail,
    );
    let mut details = forbidden.details().cloned().unwrap_or_default();
    details.causes = Some(vec![StatusCause {
        message: Some(detail),
        ..StatusCause::default()
    }]);
    ApiError::new(
        v.code,
        Reason::parse(v.reason),
        forbidden.message(),
        Some(details),
    )
}

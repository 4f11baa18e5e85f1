//! Policies and bindings compiled for admission: selectors parsed and CEL expressions compiled
//! once per version of each object, kept by name (so bindings are visited in name order).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ParamRef, RuleWithOperations,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use serde_json::Value;
use skiff_kinds::custom::cel::Expression;
use skiff_kinds::validation::policies::{REASONS, unnamed};

use crate::admission::Attributes;
use crate::admission::webhook::config::selector;
use crate::admission::webhook::matching::{
    CompiledSelector, namespace_selector_matches, object_selector_matches, rules_cover,
    selector_needs_namespace_labels,
};

/// Which requests a policy's `matchConstraints` or a binding's `matchResources` select.
#[derive(Debug)]
pub struct Matcher {
    rules: Vec<(RuleWithOperations, Vec<String>)>,
    exclude: Vec<(RuleWithOperations, Vec<String>)>,
    equivalent: bool,
    namespace_selector: CompiledSelector,
    object_selector: CompiledSelector,
}

fn named(rules: Option<&Vec<NamedRuleWithOperations>>) -> Vec<(RuleWithOperations, Vec<String>)> {
    rules
        .into_iter()
        .flatten()
        .map(|r| (unnamed(r), r.resource_names.clone().unwrap_or_default()))
        .collect()
}

impl Matcher {
    fn compile(resources: &MatchResources, broken: &mut Option<String>) -> Matcher {
        Matcher {
            rules: named(resources.resource_rules.as_ref()),
            exclude: named(resources.exclude_resource_rules.as_ref()),
            equivalent: resources.match_policy.as_deref() != Some("Exact"),
            namespace_selector: selector(resources.namespace_selector.as_ref(), broken),
            object_selector: selector(resources.object_selector.as_ref(), broken),
        }
    }

    /// Whether the resource rules cover the request and no exclusion does. No rules at all
    /// (a binding's `matchResources` that only selects) cover everything.
    pub fn rules_match(&self, a: &Attributes<'_>) -> bool {
        let covers = |rules: &[(RuleWithOperations, Vec<String>)]| {
            rules.iter().any(|(rule, names)| {
                (names.is_empty() || names.iter().any(|n| n == a.name))
                    && rules_cover(std::slice::from_ref(rule), a, self.equivalent)
            })
        };
        (self.rules.is_empty() || covers(&self.rules)) && !covers(&self.exclude)
    }

    /// Whether the namespace selector needs the request namespace's labels.
    pub fn needs_namespace_labels(&self, a: &Attributes<'_>) -> bool {
        selector_needs_namespace_labels(&self.namespace_selector, a)
    }

    /// Whether both selectors match (`namespace_labels` as for webhooks).
    pub fn selectors_match(
        &self,
        a: &Attributes<'_>,
        object: Option<&Value>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        object_selector_matches(&self.object_selector, a, object)
            && namespace_selector_matches(&self.namespace_selector, a, object, namespace_labels)
    }
}

/// A compiled expression, or the compilation error it evaluates to (Kubernetes compiles every
/// expression on its own; one that does not compile fails when it is evaluated, as the failure
/// policy says, and leaves the others working).
pub type Compiled = Result<Expression, String>;

/// One validation of a policy.
#[derive(Debug)]
pub struct Validation {
    /// The expression's text, for the default message.
    pub source: String,
    /// The expression.
    pub expression: Compiled,
    /// `message`.
    pub message: Option<String>,
    /// `messageExpression`.
    pub message_expression: Option<Expression>,
    /// `reason` and the HTTP code it refuses with (`Invalid`, 422, by default).
    pub reason: (&'static str, u16),
}

/// The kind of a policy's params.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamKind {
    /// `apiVersion` (`v1`, `example.com/v1`).
    pub api_version: String,
    /// `kind`.
    pub kind: String,
}

/// One ValidatingAdmissionPolicy, ready to evaluate.
#[derive(Debug)]
pub struct Policy {
    /// Its name.
    pub name: String,
    /// `failurePolicy: Fail` (else Ignore).
    pub fail: bool,
    /// `paramKind`.
    pub param_kind: Option<ParamKind>,
    /// `matchConstraints`.
    pub matcher: Matcher,
    /// `matchConditions`, by name.
    pub conditions: Vec<(String, Compiled)>,
    /// `variables`, in order.
    pub variables: Vec<(String, Compiled)>,
    /// `validations`.
    pub validations: Vec<Validation>,
    /// `auditAnnotations`: each key with its `valueExpression`.
    pub audit_annotations: Vec<(String, Compiled)>,
    /// Why its `matchConstraints` could not be compiled (a selector validation should have
    /// refused): a configuration error, refusing every request it may match under
    /// `failurePolicy: Fail`.
    pub broken: Option<String>,
}

impl Policy {
    /// Whether any of its expressions reads the variable `name` (`object`, `request`,
    /// `params`, `variables`, ...): what it does not read is never converted for it.
    pub fn reads(&self, name: &str) -> bool {
        let compiled = |c: &Compiled| c.as_ref().is_ok_and(|e| e.reads(name));
        self.conditions.iter().any(|(_, c)| compiled(c))
            || self.variables.iter().any(|(_, c)| compiled(c))
            || self.validations.iter().any(|v| {
                compiled(&v.expression)
                    || v.message_expression.as_ref().is_some_and(|m| m.reads(name))
            })
            || self.audit_annotations.iter().any(|(_, c)| compiled(c))
    }
}

/// One ValidatingAdmissionPolicyBinding.
#[derive(Debug)]
pub struct Binding {
    /// Its name.
    pub name: String,
    /// The policy it binds.
    pub policy: String,
    /// `matchResources`, when given.
    pub matcher: Option<Matcher>,
    /// `paramRef`.
    pub param_ref: Option<ParamRef>,
    /// `validationActions` contains Deny.
    pub deny: bool,
    /// ... Warn.
    pub warn: bool,
    /// ... Audit.
    pub audit: bool,
    /// `validationActions` as given (for the audit log).
    pub actions: Vec<String>,
    /// Why its selectors could not be compiled.
    pub broken: Option<String>,
}

fn compile_expression(source: &str) -> Compiled {
    Expression::compile(source).map_err(|e| format!("compilation error: {e}"))
}

/// Compiles a stored policy; `None` when it does not decode.
pub fn compile_policy(object: &Value) -> Option<Policy> {
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(object.clone()).ok()?;
    let spec = policy.spec.unwrap_or_default();
    let mut broken = None;
    let matcher = Matcher::compile(
        &spec.match_constraints.clone().unwrap_or_default(),
        &mut broken,
    );
    let conditions = spec
        .match_conditions
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), compile_expression(&c.expression)))
        .collect();
    let variables = spec
        .variables
        .iter()
        .flatten()
        .map(|v| (v.name.clone(), compile_expression(&v.expression)))
        .collect();
    let mut validations = Vec::new();
    for v in spec.validations.iter().flatten() {
        let expression = compile_expression(&v.expression);
        // A messageExpression that does not compile falls back to the message, as one that
        // fails at run time does.
        let message_expression = v
            .message_expression
            .as_deref()
            .filter(|m| !m.trim().is_empty())
            .and_then(|m| Expression::compile(m).ok());
        let reason = v
            .reason
            .as_deref()
            .and_then(|r| REASONS.iter().find(|(known, _)| *known == r))
            .copied()
            .unwrap_or(("Invalid", 422));
        validations.push(Validation {
            source: v.expression.clone(),
            expression,
            message: v
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(str::to_string),
            message_expression,
            reason,
        });
    }
    let audit_annotations = spec
        .audit_annotations
        .iter()
        .flatten()
        .map(|a| (a.key.clone(), compile_expression(&a.value_expression)))
        .collect();
    let param_kind = spec.param_kind.map(|k| ParamKind {
        api_version: k.api_version.unwrap_or_default(),
        kind: k.kind.unwrap_or_default(),
    });
    Some(Policy {
        name: policy.metadata.name.unwrap_or_default(),
        fail: spec.failure_policy.as_deref() != Some("Ignore"),
        param_kind,
        matcher,
        conditions,
        variables,
        validations,
        audit_annotations,
        broken,
    })
}

/// Compiles a stored binding; `None` when it does not decode.
pub fn compile_binding(object: &Value) -> Option<Binding> {
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(object.clone()).ok()?;
    let spec = binding.spec.unwrap_or_default();
    let mut broken = None;
    let matcher = spec
        .match_resources
        .as_ref()
        .map(|m| Matcher::compile(m, &mut broken));
    let actions = spec.validation_actions.unwrap_or_default();
    let has = |a: &str| actions.iter().any(|x| x == a);
    Some(Binding {
        name: binding.metadata.name.unwrap_or_default(),
        policy: spec.policy_name.unwrap_or_default(),
        matcher,
        param_ref: spec.param_ref,
        deny: has("Deny"),
        warn: has("Warn"),
        audit: has("Audit"),
        actions,
        broken,
    })
}

/// Every policy and binding known now, by name.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Policies.
    pub policies: HashMap<String, Arc<Policy>>,
    /// Bindings, in name order.
    pub bindings: BTreeMap<String, Arc<Binding>>,
}

impl Snapshot {
    /// Puts (or, with `None`, removes) the policy (`binding` false) or binding `name`.
    pub fn set(&mut self, binding: bool, name: &str, object: Option<&Value>) {
        match (binding, object) {
            (false, Some(o)) => match compile_policy(o) {
                Some(p) => {
                    self.policies.insert(name.to_string(), Arc::new(p));
                }
                None => {
                    self.policies.remove(name);
                }
            },
            (true, Some(o)) => match compile_binding(o) {
                Some(b) => {
                    self.bindings.insert(name.to_string(), Arc::new(b));
                }
                None => {
                    self.bindings.remove(name);
                }
            },
            (false, None) => {
                self.policies.remove(name);
            }
            (true, None) => {
                self.bindings.remove(name);
            }
        }
    }

    /// The bindings whose policy exists, each with its policy, in binding-name order.
    pub fn pairs(&self) -> impl Iterator<Item = (&Arc<Binding>, &Arc<Policy>)> {
        self.bindings
            .values()
            .filter_map(|b| Some((b, self.policies.get(&b.policy)?)))
    }
}

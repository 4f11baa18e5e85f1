//! `ValidatingAdmissionPolicy`: the validating-phase plugin that evaluates the CEL validations of
//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies on the writes their bindings
//! select, after `ValidatingAdmissionWebhook` and before `ResourceQuota`.
//!
//! # Layout
//! - [`compiled`]: policies and bindings compiled for admission, and the in-memory
//!   [`compiled::Snapshot`].
//! - [`params`]: where a binding's params are (pure).
//! - [`evaluate`]: one policy for one request and param object, and the bindings' actions
//!   (pure).
//! - [`status`]: each policy's `status.typeChecking`, written as its generations arrive.
//!
//! Policies and bindings are kept in memory by a watch of both kinds ([`Policies::run`]),
//! never listed per request; param objects are read when a binding that needs them matches.
//! Requests on policies and bindings themselves are never evaluated (as in Kubernetes), so a
//! policy that refuses everything can still be changed or deleted.
//!
//! For each binding (in name order) whose policy exists: the policy's `matchConstraints` and
//! the binding's `matchResources` must both select the request; the binding's params are read
//! (one evaluation per param object); each failed validation is a violation, handled by the
//! binding's `validationActions`: Deny refuses the request (the first violation), Warn sends a
//! `Warning` header, Audit lists it in the request's audit event (the
//! `validation.policy.admission.k8s.io/validation_failure` annotation). Each `auditAnnotations`
//! value of a policy whose binding matched is annotated as `<policy>/<key>` whatever the
//! actions. An expression that fails (at run time, or because it does not compile) is a
//! violation under `failurePolicy: Fail` and nothing under Ignore. Configuration
//! errors (a `paramKind` nobody serves, no params under `parameterNotFoundAction: Deny`, a
//! selector that does not parse) refuse under Fail whatever the actions, as in Kubernetes.
//!
//! `authorizer` is bound as in Kubernetes ([`skiff_kinds::custom::authorizer`]): checks are
//! decided by the server's authorizer for the request's user.
//!
//! Expressions are type checked after the fact, as in Kubernetes ([`status`]): a type error is
//! a warning in the policy's status, and at run time it follows the failure policy.

pub mod compiled;
pub mod evaluate;
pub mod params;
pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use skiff_kinds::custom::cel::to_cel;
use skiff_kinds::registry::Kinds;
use tokio_util::sync::CancellationToken;

use self::compiled::{Binding, Policy, Snapshot};
use self::evaluate::{Evaluated, Inputs, Outcome, evaluate, failure};
use super::configs::{self, Configs};
use super::{Attributes, Plugin};
use crate::authz::Authorizer;
use crate::error::{Error, Result};
use crate::registry::Registry;

/// Whether a request is on a policy or binding itself, which policies never see.
pub fn exempt(a: &Attributes<'_>) -> bool {
    a.info.group == "admissionregistration.k8s.io"
        && matches!(
            a.info.plural,
            "validatingadmissionpolicies" | "validatingadmissionpolicybindings"
        )
}

/// The policies and bindings known now, refreshed by the watch, and the served kinds (to find
/// param kinds, custom ones included).
pub struct Policies {
    configs: Configs<Snapshot>,
    kinds: Arc<Kinds>,
    /// Decides the checks of the `authorizer` variable.
    authorizer: Arc<Authorizer>,
}

impl configs::Snapshot for Snapshot {
    /// The second kind is the binding.
    fn set(&mut self, binding: bool, name: &str, object: Option<&Value>) {
        Snapshot::set(self, binding, name, object)
    }
}

impl Policies {
    /// No policies yet; param kinds are looked up in `kinds`, and `authorizer` decides the
    /// checks of the `authorizer` variable.
    pub fn new(kinds: Arc<Kinds>, authorizer: Arc<Authorizer>) -> Policies {
        Policies {
            configs: Configs::new(
                [
                    &skiff_kinds::builtin::validating_admission_policy::INFO,
                    &skiff_kinds::builtin::validating_admission_policy_binding::INFO,
                ],
                "admission policy",
            ),
            kinds,
            authorizer,
        }
    }

    /// The policies and bindings now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.configs.snapshot()
    }

    /// Puts one policy (`binding` false) or binding into memory directly (tests without a
    /// watch).
    pub fn put(&self, binding: bool, object: &Value) {
        self.configs.put(binding, object)
    }

    /// Reads both kinds into memory and follows them with a watch until `shutdown`; after a
    /// watch error, lists again.
    pub async fn run(self: Arc<Self>, registry: Registry, shutdown: CancellationToken) {
        self.configs.run(registry, shutdown).await
    }

    /// Reads the params of `binding` for `policy`: `None` when the policy is evaluated once
    /// with null params, else the objects found (perhaps none: then it is not evaluated), or
    /// the configuration error.
    async fn params(
        &self,
        registry: &Registry,
        policy: &Policy,
        binding: &Binding,
        a: &Attributes<'_>,
    ) -> std::result::Result<Option<Vec<Value>>, Misconfigured> {
        let Some(kind) = &policy.param_kind else {
            return Ok(None);
        };
        let group = kind
            .api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group);
        let Some(param_kind) = self
            .kinds
            .snapshot()
            .lookup_kind(group, &kind.kind)
            .cloned()
        else {
            return Err(Misconfigured::Policy(format!(
                "failed to find resource referenced by paramKind: '{}, Kind={}'",
                kind.api_version, kind.kind
            )));
        };
        let info = param_kind.info();
        let binding_error = Misconfigured::Binding;
        let lookup =
            params::lookup(policy, binding, info.namespaced, a.namespace).map_err(binding_error)?;
        let Some(lookup) = lookup else {
            return Ok(None);
        };
        let namespace = lookup.namespace.as_deref();
        let found = match &lookup.name {
            Some(name) => match registry.get(info, namespace, name, None).await {
                Ok(object) => vec![object],
                Err(Error::NotFound { .. }) => Vec::new(),
                Err(e) => return Err(binding_error(e.to_string())),
            },
            None => {
                let list = registry
                    .list(info, namespace, None, None, None, None)
                    .await
                    .map_err(|e| binding_error(e.to_string()))?;
                params::select(&lookup, list.items).map_err(binding_error)?
            }
        };
        if found.is_empty()
            && let Some(why) = params::missing(&lookup)
        {
            return Err(binding_error(why.to_string()));
        }
        Ok(Some(found))
    }
}

/// A configuration error found while reading a binding's params: of the policy (its
/// `paramKind` is not served) or of the binding.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Misconfigured {
    Policy(String),
    Binding(String),
}

/// The request's Namespace, read once per request when a binding matches.
struct Namespace {
    object: Option<Option<Value>>,
}

impl Namespace {
    async fn get(&mut self, registry: &Registry, a: &Attributes<'_>) -> Result<Option<&Value>> {
        if self.object.is_none() {
            let object = match a.namespace.filter(|_| a.info.namespaced) {
                None => None,
                Some(ns) => {
                    let info = &skiff_kinds::builtin::namespace::INFO;
                    match registry.get(info, None, ns, None).await {
                        Ok(o) => Some(o),
                        Err(Error::NotFound { .. }) => None,
                        Err(e) => return Err(e),
                    }
                }
            };
            self.object = Some(object);
        }
        Ok(self.object.as_ref().and_then(Option::as_ref))
    }
}

fn labels_of(object: Option<&Value>) -> Option<BTreeMap<String, String>> {
    let labels = object?.pointer("/metadata/labels").cloned();
    Some(
        labels
            .and_then(|l| serde_json::from_value(l).ok())
            .unwrap_or_default(),
    )
}

/// The CEL inputs of a request: those that `reads` says some policy reads, the others null
/// (the `request` input is a whole AdmissionRequest, the object in it again, and is built only
/// when read).
fn inputs(
    a: &Attributes<'_>,
    namespace: Option<&Value>,
    authorizer: &Arc<Authorizer>,
    reads: impl Fn(&str) -> bool,
) -> Result<Inputs> {
    let cel = |name: &str, v: Option<&Value>| match v {
        Some(v) if reads(name) => {
            to_cel(v).map_err(|e| Error::Internal(format!("admission policy input: {e}")))
        }
        _ => Ok(cel::Value::Null),
    };
    let object = a.object.as_deref();
    let review = reads("request").then(|| {
        let uid = uuid::Uuid::new_v4().to_string();
        super::webhook::review::request(&uid, a, object)
    });
    Ok(Inputs {
        object: cel("object", object)?,
        old_object: cel("oldObject", a.old)?,
        request: cel("request", review.as_ref().map(|r| &r["request"]))?,
        namespace_object: cel("namespaceObject", namespace)?,
        authorizer: reads("authorizer").then(|| crate::authz::cel::for_request(authorizer, a)),
    })
}

/// `ValidatingAdmissionPolicy`: the bound policies, in binding-name order.
pub struct ValidatingAdmissionPolicy(pub Arc<Policies>);

impl ValidatingAdmissionPolicy {
    /// What the bindings make of the request.
    async fn outcome(&self, registry: &Registry, a: &Attributes<'_>) -> Result<Outcome> {
        let mut outcome = Outcome::default();
        if exempt(a) {
            return Ok(outcome);
        }
        let snapshot = self.0.snapshot();
        if snapshot.bindings.is_empty() {
            return Ok(outcome);
        }
        let object = a.object.as_deref();
        let mut namespace = Namespace { object: None };
        let mut request_inputs: Option<Inputs> = None;
        for (binding, policy) in snapshot.pairs() {
            let matchers = std::iter::once(&policy.matcher).chain(binding.matcher.as_ref());
            if !matchers.clone().all(|m| m.rules_match(a)) {
                continue;
            }
            let ns = namespace.get(registry, a).await?;
            let labels = labels_of(ns);
            if !matchers
                .clone()
                .all(|m| m.selectors_match(a, object, labels.as_ref()))
            {
                continue;
            }
            if let Some(why) = &policy.broken {
                outcome.misconfigured(a, policy, None, why);
                continue;
            }
            if let Some(why) = &binding.broken {
                outcome.misconfigured(a, policy, Some(binding.name.as_str()), why);
                continue;
            }
            let params = match self.0.params(registry, policy, binding, a).await {
                Ok(params) => params,
                Err(Misconfigured::Policy(why)) => {
                    outcome.misconfigured(a, policy, None, &why);
                    continue;
                }
                Err(Misconfigured::Binding(why)) => {
                    outcome.misconfigured(a, policy, Some(binding.name.as_str()), &why);
                    continue;
                }
            };
            if request_inputs.is_none() {
                let reads = |name: &str| snapshot.pairs().any(|(_, p)| p.reads(name));
                request_inputs = Some(inputs(a, ns, &self.0.authorizer, reads)?);
            }
            let Some(inputs) = request_inputs.as_ref() else {
                continue;
            };
            let evaluations: Vec<Evaluated> = match params {
                None => vec![evaluate(policy, inputs, &cel::Value::Null)],
                Some(params) => params
                    .iter()
                    .map(|p| match to_cel(p) {
                        Ok(p) => evaluate(policy, inputs, &p),
                        Err(e) => Evaluated {
                            violations: failure(policy, format!("params: {e}"))
                                .into_iter()
                                .collect(),
                            annotations: Vec::new(),
                        },
                    })
                    .collect(),
            };
            for evaluated in &evaluations {
                outcome.record(a, &policy.name, binding, evaluated);
            }
        }
        Ok(outcome)
    }
}

#[async_trait::async_trait]
impl Plugin for ValidatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    async fn admit(&self, _registry: &Registry, _a: &mut Attributes<'_>) -> Result<()> {
        Ok(())
    }

    async fn validate(&self, registry: &Registry, a: &Attributes<'_>) -> Result<()> {
        let outcome = self.outcome(registry, a).await?;
        if let Some(feedback) = a.feedback {
            for (key, value) in outcome.audit_annotations() {
                if let Err(why) = feedback.annotate(key, value) {
                    tracing::warn!("audit annotation dropped: {why}");
                }
            }
            for w in outcome.warnings {
                feedback.warn(w);
            }
        }
        match outcome.denied {
            Some(e) => Err(Error::Api(e)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;

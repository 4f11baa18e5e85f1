//! Admission webhooks: `MutatingAdmissionWebhook`, the last mutating plugin, and
//! `ValidatingAdmissionWebhook`, in the validating phase, calling the HTTPS endpoints of the
//! `admissionregistration.k8s.io/v1` configurations.
//!
//! # Layout
//! - [`config`]: configurations compiled for dispatch, and the in-memory [`config::Snapshot`].
//! - [`matching`]: which webhooks a request goes to (pure).
//! - [`review`]: the AdmissionReview sent and the answer read (pure).
//! - [`client`]: the HTTPS call (caBundle, Service resolution, timeout).
//!
//! The configurations are kept in memory by a watch of both kinds ([`Webhooks::run`]), never
//! listed per request. Mutating webhooks are called one after another in configuration-name
//! order; a webhook with `reinvocationPolicy: IfNeeded` is called once more when a later one
//! changed the object. Validating webhooks are called concurrently. Requests on the
//! `admissionregistration.k8s.io` objects themselves never go to a webhook.
//!
//! Unlike Kubernetes: the object is sent in the one version skiff serves (`matchPolicy:
//! Equivalent` matches a rule naming another version of the resource without converting), the
//! built-in mutating plugins are not reinvoked.

pub mod client;
pub mod config;
pub mod matching;
pub mod review;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use self::config::{FailurePolicy, Hook, Snapshot};
use self::matching::Conditions;
use super::configs::{self, Configs};
use super::{Attributes, Plugin};
use crate::authz::Authorizer;
use crate::error::{Error, Result};
use crate::registry::Registry;

/// The webhook configurations known now, shared by both plugins and refreshed by the watch.
pub struct Webhooks {
    configs: Configs<Snapshot>,
    /// Decides the checks of the match conditions' `authorizer` variable.
    authorizer: Arc<Authorizer>,
}

impl configs::Snapshot for Snapshot {
    /// The second kind is the mutating one.
    fn set(&mut self, mutating: bool, name: &str, object: Option<&Value>) {
        Snapshot::set(self, mutating, name, object)
    }
}

impl Webhooks {
    /// No configurations yet; `authorizer` decides the checks of the match conditions'
    /// `authorizer` variable.
    pub fn new(authorizer: Arc<Authorizer>) -> Webhooks {
        Webhooks {
            configs: Configs::new(
                [
                    &skiff_kinds::builtin::validating_webhook_configuration::INFO,
                    &skiff_kinds::builtin::mutating_webhook_configuration::INFO,
                ],
                "webhook configuration",
            ),
            authorizer,
        }
    }

    /// The configurations now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.configs.snapshot()
    }

    /// Reads both kinds into memory and follows them with a watch until `shutdown`; after a
    /// watch error, lists again.
    pub async fn run(self: Arc<Self>, registry: Registry, shutdown: CancellationToken) {
        self.configs.run(registry, shutdown).await
    }

    /// Puts one configuration object into memory directly (tests without a watch).
    pub fn put(&self, mutating: bool, object: &Value) {
        self.configs.put(mutating, object)
    }
}

/// What a webhook call came to.
enum Called {
    /// Not called (no match), or its failure ignored.
    Skipped,
    /// Allowed, with its patch if any.
    Allowed(Option<json_patch::Patch>),
}

/// Labels of the request's namespace, read once per request when a selector needs them.
struct NamespaceLabels {
    labels: Option<Option<BTreeMap<String, String>>>,
}

impl NamespaceLabels {
    async fn get(
        &mut self,
        registry: &Registry,
        namespace: &str,
    ) -> Result<Option<&BTreeMap<String, String>>> {
        if self.labels.is_none() {
            let info = &skiff_kinds::builtin::namespace::INFO;
            let labels = match registry.get(info, None, namespace, None).await {
                Ok(ns) => Some(
                    serde_json::from_value(ns["metadata"]["labels"].clone()).unwrap_or_default(),
                ),
                Err(Error::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            self.labels = Some(labels);
        }
        Ok(self.labels.as_ref().and_then(Option::as_ref))
    }
}

/// Calls `hook` if it matches the request with `object` (the object as it is now): its
/// answer, `Skipped`, or the error the request fails with.
async fn dispatch(
    hook: &Hook,
    registry: &Registry,
    authorizer: &Arc<Authorizer>,
    a: &Attributes<'_>,
    object: Option<&Value>,
    namespace: &mut NamespaceLabels,
) -> Result<Called> {
    if !matching::rules_match(hook, a) || !matching::object_matches(hook, a, object) {
        return Ok(Called::Skipped);
    }
    let labels = match (matching::needs_namespace_labels(hook, a), a.namespace) {
        (true, Some(ns)) => namespace.get(registry, ns).await?.cloned(),
        _ => None,
    };
    if !matching::namespace_matches(hook, a, object, labels.as_ref()) {
        return Ok(Called::Skipped);
    }
    let uid = uuid::Uuid::new_v4().to_string();
    let review = review::request(&uid, a, object);
    let authorizer = hook
        .conditions
        .iter()
        .any(|(_, e)| e.reads("authorizer"))
        .then(|| crate::authz::cel::for_request(authorizer, a));
    match matching::conditions(hook, object, a.old, &review["request"], authorizer.as_ref()) {
        Conditions::Match => {}
        Conditions::Skip => return Ok(Called::Skipped),
        Conditions::Error(e) => return Err(review::call_failed(&hook.name, &e).into()),
    }
    if a.dry_run && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun") {
        return Err(Error::BadRequest(format!(
            "admission webhook {:?} does not support dry run",
            hook.name
        )));
    }
    let answer = match client::call(hook, registry, &review).await {
        Ok(body) => review::read(&hook.name, &uid, hook.mutating, &body),
        Err(e) => Err(e),
    };
    match answer {
        Ok(answer) => {
            if let Some(feedback) = a.feedback {
                for warning in answer.warnings {
                    feedback.warn(warning);
                }
                for (key, value) in answer.audit_annotations {
                    if let Err(why) = feedback.annotate(format!("{}/{key}", hook.name), value) {
                        tracing::warn!(webhook = %hook.name, "audit annotation dropped: {why}");
                    }
                }
            }
            match answer.verdict {
                Ok(patch) => Ok(Called::Allowed(patch)),
                Err(e) => Err(e.into()),
            }
        }
        Err(why) if hook.failure_policy == FailurePolicy::Ignore => {
            tracing::warn!(webhook = %hook.name, error = %why, "failed calling webhook; ignored");
            Ok(Called::Skipped)
        }
        Err(why) => Err(review::call_failed(&hook.name, &why).into()),
    }
}

/// Applies a mutating webhook's patch to `object`. A patch that does not apply fails the request
/// whatever the webhook's failure policy, as in kube-apiserver (the failure policy covers
/// calling the webhook, not what it answered); the error names the webhook.
fn apply(hook: &Hook, object: &mut Value, patch: &json_patch::Patch) -> Result<()> {
    let mut patched = object.clone();
    let outcome = match json_patch::patch(&mut patched, patch) {
        Err(e) => Err(format!("JSONPatch failed: {e}")),
        Ok(()) if !patched.is_object() => Err("the patched object is not an object".into()),
        Ok(()) => Ok(()),
    };
    match outcome {
        Ok(()) => {
            *object = patched;
            Ok(())
        }
        Err(why) => Err(Error::Api(skiff_meta::status::ApiError::internal_error(
            format!(
                "admission webhook {:?} returned a patch that does not apply: {why}",
                hook.name
            ),
        ))),
    }
}

/// `MutatingAdmissionWebhook`: the mutating webhooks, in order.
pub struct MutatingAdmissionWebhook(pub Arc<Webhooks>);

impl MutatingAdmissionWebhook {
    /// Calls `hook` (if it matches) with `object` as it is now, and applies its patch.
    async fn call_and_apply(
        &self,
        hook: &Hook,
        registry: &Registry,
        a: &Attributes<'_>,
        object: &mut Option<Value>,
        namespace: &mut NamespaceLabels,
    ) -> Result<()> {
        let view = a.without_object();
        let called = dispatch(
            hook,
            registry,
            &self.0.authorizer,
            &view,
            object.as_ref(),
            namespace,
        )
        .await?;
        if let Called::Allowed(Some(patch)) = called
            && let Some(object) = object.as_mut()
        {
            apply(hook, object, &patch)?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Plugin for MutatingAdmissionWebhook {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if matching::exempt(a) {
            return Ok(());
        }
        let snapshot = self.0.snapshot();
        let hooks: Vec<&Arc<Hook>> = snapshot.hooks(true).collect();
        if hooks.is_empty() {
            return Ok(());
        }
        let mut object: Option<Value> = a.object.as_deref().cloned();
        let mut namespace = NamespaceLabels { labels: None };
        // The object after each IfNeeded webhook's call: it is called again if that changed.
        let mut after: Vec<(usize, Value)> = Vec::new();
        for (i, hook) in hooks.iter().enumerate() {
            self.call_and_apply(hook, registry, a, &mut object, &mut namespace)
                .await?;
            if hook.reinvoke
                && let Some(object) = &object
            {
                after.push((i, object.clone()));
            }
        }
        for (i, seen) in after {
            let hook = hooks[i];
            if object.as_ref() == Some(&seen) {
                continue;
            }
            self.call_and_apply(hook, registry, a, &mut object, &mut namespace)
                .await?;
        }
        if let (Some(target), Some(object)) = (a.object.as_deref_mut(), object) {
            *target = object;
        }
        Ok(())
    }
}

/// `ValidatingAdmissionWebhook`: the validating webhooks, concurrently.
pub struct ValidatingAdmissionWebhook(pub Arc<Webhooks>);

#[async_trait::async_trait]
impl Plugin for ValidatingAdmissionWebhook {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    async fn admit(&self, _registry: &Registry, _a: &mut Attributes<'_>) -> Result<()> {
        Ok(())
    }

    async fn validate(&self, registry: &Registry, a: &Attributes<'_>) -> Result<()> {
        if matching::exempt(a) {
            return Ok(());
        }
        let snapshot = self.0.snapshot();
        let hooks: Vec<&Arc<Hook>> = snapshot.hooks(false).collect();
        if hooks.is_empty() {
            return Ok(());
        }
        let object = a.object.as_deref();
        // The namespace's labels are read once, before the calls run concurrently.
        let mut namespace = NamespaceLabels { labels: None };
        if let Some(ns) = a.namespace
            && hooks.iter().any(|h| matching::needs_namespace_labels(h, a))
        {
            namespace.get(registry, ns).await?;
        }
        let view = a.without_object();
        let calls = hooks.iter().map(|hook| {
            let mut namespace = NamespaceLabels {
                labels: namespace.labels.clone(),
            };
            let view = &view;
            let authorizer = &self.0.authorizer;
            async move { dispatch(hook, registry, authorizer, view, object, &mut namespace).await }
        });
        for outcome in futures::future::join_all(calls).await {
            outcome?;
        }
        Ok(())
    }
}

impl Attributes<'_> {
    /// These attributes without the (mutable) object, which webhooks get separately.
    fn without_object(&self) -> Attributes<'_> {
        Attributes {
            operation: self.operation,
            info: self.info,
            subresource: self.subresource,
            namespace: self.namespace,
            name: self.name,
            object: None,
            old: self.old,
            user: self.user,
            dry_run: self.dry_run,
            feedback: self.feedback,
        }
    }
}

#[cfg(test)]
mod tests;

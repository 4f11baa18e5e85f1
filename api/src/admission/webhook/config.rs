//! Webhook configurations compiled for dispatch: each webhook's selectors parsed and match
//! conditions compiled once per version of its configuration, in the order Kubernetes calls them
//! (by configuration name, then by position in the configuration).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;
use skiff_kinds::custom::cel::Expression;
use skiff_meta::labels::Selector;

/// What happens when a webhook cannot be called or answers nonsense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The request fails.
    Fail,
    /// The webhook is skipped.
    Ignore,
}

/// One webhook, ready to match and call.
pub struct Hook {
    /// The webhook's name.
    pub name: String,
    /// Its configuration's name.
    pub configuration: String,
    /// Whether it is a mutating webhook.
    pub mutating: bool,
    /// Which requests it wants.
    pub rules: Vec<RuleWithOperations>,
    /// `matchPolicy: Equivalent` (else Exact).
    pub equivalent: bool,
    /// `failurePolicy`.
    pub failure_policy: FailurePolicy,
    /// `namespaceSelector`, and whether it is empty (matches everything without a lookup).
    pub namespace_selector: (Selector, bool),
    /// `objectSelector`, and whether it is empty.
    pub object_selector: (Selector, bool),
    /// `matchConditions`, by name.
    pub conditions: Vec<(String, Expression)>,
    /// `sideEffects`.
    pub side_effects: String,
    /// `timeoutSeconds`.
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`.
    pub reinvoke: bool,
    /// `clientConfig`.
    pub client_config: WebhookClientConfig,
    /// HTTPS clients of this webhook, by the addresses a Service reference resolved to (`None`
    /// for a URL). Built on first use; a changed configuration is a new `Hook` and so new
    /// clients. Short critical sections, never held across an await.
    pub clients: Mutex<HashMap<Option<Vec<SocketAddr>>, reqwest::Client>>,
    /// Why this webhook could not be compiled (a selector or condition the validation let
    /// through); calling it is then a call failure.
    pub broken: Option<String>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook")
            .field("name", &self.name)
            .field("configuration", &self.configuration)
            .finish()
    }
}

/// The fields a hook is compiled from, borrowed from either kind.
struct Source<'a> {
    name: &'a str,
    rules: Option<&'a Vec<RuleWithOperations>>,
    match_policy: Option<&'a str>,
    failure_policy: Option<&'a str>,
    namespace_selector: Option<&'a LabelSelector>,
    object_selector: Option<&'a LabelSelector>,
    conditions: Vec<(&'a str, &'a str)>,
    side_effects: &'a str,
    timeout_seconds: Option<i32>,
    reinvoke: bool,
    client_config: &'a WebhookClientConfig,
}

/// Compiles a webhook's or policy's label selector; a selector that does not parse records why
/// in `broken` and matches as if empty.
pub fn selector(s: Option<&LabelSelector>, broken: &mut Option<String>) -> (Selector, bool) {
    let empty = s.is_none_or(|s| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    });
    match s.map(Selector::from_label_selector).transpose() {
        Ok(sel) => (sel.unwrap_or_default(), empty),
        Err(e) => {
            *broken = Some(format!("invalid selector: {e}"));
            (Selector::default(), empty)
        }
    }
}

fn compile(configuration: &str, mutating: bool, s: Source<'_>) -> Hook {
    let mut broken = None;
    let namespace_selector = selector(s.namespace_selector, &mut broken);
    let object_selector = selector(s.object_selector, &mut broken);
    let mut conditions = Vec::new();
    for (name, expression) in s.conditions {
        match Expression::compile(expression) {
            Ok(e) => conditions.push((name.to_string(), e)),
            Err(e) => broken = Some(format!("match condition {name:?} does not compile: {e}")),
        }
    }
    Hook {
        name: s.name.to_string(),
        configuration: configuration.to_string(),
        mutating,
        rules: s.rules.cloned().unwrap_or_default(),
        equivalent: s.match_policy != Some("Exact"),
        failure_policy: match s.failure_policy {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        namespace_selector,
        object_selector,
        conditions,
        side_effects: s.side_effects.to_string(),
        timeout: Duration::from_secs(
            s.timeout_seconds
                .unwrap_or(skiff_kinds::validation::webhooks::DEFAULT_TIMEOUT_SECONDS)
                .clamp(1, 30) as u64,
        ),
        reinvoke: s.reinvoke,
        client_config: s.client_config.clone(),
        clients: Mutex::default(),
        broken,
    }
}

fn conditions(c: Option<&Vec<MatchCondition>>) -> Vec<(&str, &str)> {
    c.into_iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.expression.as_str()))
        .collect()
}

/// The webhooks of one stored ValidatingWebhookConfiguration or MutatingWebhookConfiguration
/// (`mutating`), in order; an object that does not decode has none.
pub fn compile_configuration(object: &Value, mutating: bool) -> Vec<Arc<Hook>> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    if mutating {
        let Ok(config) = serde_json::from_value::<MutatingWebhookConfiguration>(object.clone())
        else {
            return Vec::new();
        };
        config
            .webhooks
            .iter()
            .flatten()
            .map(|h| {
                Arc::new(compile(
                    name,
                    true,
                    Source {
                        name: &h.name,
                        rules: h.rules.as_ref(),
                        match_policy: h.match_policy.as_deref(),
                        failure_policy: h.failure_policy.as_deref(),
                        namespace_selector: h.namespace_selector.as_ref(),
                        object_selector: h.object_selector.as_ref(),
                        conditions: conditions(h.match_conditions.as_ref()),
                        side_effects: &h.side_effects,
                        timeout_seconds: h.timeout_seconds,
                        reinvoke: h.reinvocation_policy.as_deref() == Some("IfNeeded"),
                        client_config: &h.client_config,
                    },
                ))
            })
            .collect()
    } else {
        let Ok(config) = serde_json::from_value::<ValidatingWebhookConfiguration>(object.clone())
        else {
            return Vec::new();
        };
        config
            .webhooks
            .iter()
            .flatten()
            .map(|h| {
                Arc::new(compile(
                    name,
                    false,
                    Source {
                        name: &h.name,
                        rules: h.rules.as_ref(),
                        match_policy: h.match_policy.as_deref(),
                        failure_policy: h.failure_policy.as_deref(),
                        namespace_selector: h.namespace_selector.as_ref(),
                        object_selector: h.object_selector.as_ref(),
                        conditions: conditions(h.match_conditions.as_ref()),
                        side_effects: &h.side_effects,
                        timeout_seconds: h.timeout_seconds,
                        reinvoke: false,
                        client_config: &h.client_config,
                    },
                ))
            })
            .collect()
    }
}

/// Every configuration known now, by name (so iteration is Kubernetes' call order).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Mutating configurations.
    pub mutating: BTreeMap<String, Vec<Arc<Hook>>>,
    /// Validating configurations.
    pub validating: BTreeMap<String, Vec<Arc<Hook>>>,
}

impl Snapshot {
    /// The webhooks of one phase in call order.
    pub fn hooks(&self, mutating: bool) -> impl Iterator<Item = &Arc<Hook>> {
        let map = if mutating {
            &self.mutating
        } else {
            &self.validating
        };
        map.values().flatten()
    }

    /// Puts (or, with `None`, removes) the configuration `name`.
    pub fn set(&mut self, mutating: bool, name: &str, object: Option<&Value>) {
        let map = if mutating {
            &mut self.mutating
        } else {
            &mut self.validating
        };
        match object {
            Some(object) => {
                map.insert(name.to_string(), compile_configuration(object, mutating));
            }
            None => {
                map.remove(name);
            }
        }
    }
}

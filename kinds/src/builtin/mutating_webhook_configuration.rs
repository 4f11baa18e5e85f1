//! `admissionregistration.k8s.io/v1` MutatingWebhookConfiguration: HTTPS endpoints the API
//! server asks, after the built-in mutating admission plugins, to change a write with a
//! JSONPatch (or to refuse it). As the validating kind, plus `reinvocationPolicy`
//! (`Never` by default, or `IfNeeded`); the calls are the `MutatingAdmissionWebhook` plugin of the
//! API server.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration as Mwc,
};

use super::prelude::*;
use super::validating_webhook_configuration::{webhook_cells, webhook_columns};
use crate::validation::webhooks::{
    Hook, default_webhooks, validate_reinvocation_policy, validate_webhooks,
};
use crate::validation::{Path, decode};

/// `admissionregistration.k8s.io/v1` MutatingWebhookConfiguration.
pub struct MutatingWebhookConfiguration;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "MutatingWebhookConfiguration",
    plural: "mutatingwebhookconfigurations",
    singular: "mutatingwebhookconfiguration",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &["api-extensions"],
    selectable_fields: &[],
};

/// One mutating webhook as the shared checks see it.
pub fn hook(h: &MutatingWebhook) -> Hook<'_> {
    Hook {
        name: &h.name,
        client_config: &h.client_config,
        rules: h.rules.as_deref().unwrap_or_default(),
        failure_policy: h.failure_policy.as_deref(),
        match_policy: h.match_policy.as_deref(),
        namespace_selector: h.namespace_selector.as_ref(),
        object_selector: h.object_selector.as_ref(),
        side_effects: &h.side_effects,
        timeout_seconds: h.timeout_seconds,
        admission_review_versions: &h.admission_review_versions,
        match_conditions: h.match_conditions.as_deref().unwrap_or_default(),
    }
}

fn validate(new: &Value) -> Checked {
    let config: Mwc = decode(new, "")?;
    let hooks = config.webhooks.unwrap_or_default();
    let mut errs = validate_webhooks(hooks.iter().map(hook));
    for (i, h) in hooks.iter().enumerate() {
        errs.extend(validate_reinvocation_policy(
            h.reinvocation_policy.as_deref(),
            &Path::new("webhooks").index(i).child("reinvocationPolicy"),
        ));
    }
    Ok(errs)
}

impl Kind for MutatingWebhookConfiguration {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Mwc>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Mwc>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        webhook_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        Some(webhook_cells(object, now))
    }

    fn default(&self, object: &mut Value) {
        default_webhooks(object, true);
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    const G: &str = "admissionregistration.k8s.io";
    const K: &str = "MutatingWebhookConfiguration";

    fn config(policy: Option<&str>) -> Value {
        let mut hook = json!({"name": "label.example.com", "sideEffects": "NoneOnDryRun",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": {"service": {"namespace": "hooks", "name": "svc", "path": "/mutate"}},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"],
                       "apiVersions": ["v1"], "resources": ["deployments", "deployments/scale"]}]});
        if let Some(policy) = policy {
            hook["reinvocationPolicy"] = json!(policy);
        }
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": K,
               "metadata": {"name": "labels"}, "webhooks": [hook]})
    }

    #[test]
    fn reinvocation_defaults_to_never_and_is_checked() {
        let mut object = config(None);
        MutatingWebhookConfiguration.default(&mut object);
        assert_eq!(object["webhooks"][0]["reinvocationPolicy"], "Never");
        assert!(create_msgs(G, K, config(None)).is_empty());
        assert!(create_msgs(G, K, config(Some("IfNeeded"))).is_empty());
        assert_eq!(
            create_msgs(G, K, config(Some("Always"))),
            [
                "webhooks[0].reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\""
            ]
        );
        let mut bad_path = config(None);
        bad_path["webhooks"][0]["clientConfig"]["service"]["path"] = json!("mutate");
        assert_eq!(
            create_msgs(G, K, bad_path),
            [
                "webhooks[0].clientConfig.service.path: Invalid value: \"mutate\": must start with a '/'"
            ]
        );
    }
}

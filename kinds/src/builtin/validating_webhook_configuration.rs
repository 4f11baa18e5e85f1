//! `admissionregistration.k8s.io/v1` ValidatingWebhookConfiguration: HTTPS endpoints the API
//! server asks, after a write passed every mutating step and schema validation, whether it may
//! happen. Validation and defaults are shared with the mutating kind
//! ([`crate::validation::webhooks`]); the calls are the `ValidatingAdmissionWebhook` plugin of
//! the API server.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingWebhook, ValidatingWebhookConfiguration as Vwc,
};

use super::prelude::*;
use crate::validation::decode;
use crate::validation::webhooks::{Hook, default_webhooks, validate_webhooks};

/// `admissionregistration.k8s.io/v1` ValidatingWebhookConfiguration.
pub struct ValidatingWebhookConfiguration;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "ValidatingWebhookConfiguration",
    plural: "validatingwebhookconfigurations",
    singular: "validatingwebhookconfiguration",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &["api-extensions"],
    selectable_fields: &[],
};

/// One validating webhook as the shared checks see it.
pub fn hook(h: &ValidatingWebhook) -> Hook<'_> {
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
    let config: Vwc = decode(new, "")?;
    Ok(validate_webhooks(
        config.webhooks.iter().flatten().map(hook),
    ))
}

impl Kind for ValidatingWebhookConfiguration {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Vwc>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Vwc>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        webhook_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        Some(webhook_cells(object, now))
    }

    fn default(&self, object: &mut Value) {
        default_webhooks(object, false);
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }
}

/// The columns `kubectl get` shows for either kind of configuration.
pub(crate) fn webhook_columns() -> Vec<Column> {
    use table::{AGE, NAME, col};
    vec![
        NAME,
        col(
            "Webhooks",
            "integer",
            "Webhooks indicates the number of webhooks.",
        ),
        AGE,
    ]
}

/// The cells of [`webhook_columns`].
pub(crate) fn webhook_cells(object: &Value, now: Timestamp) -> Vec<Value> {
    vec![
        json!(object["metadata"]["name"].as_str().unwrap_or_default()),
        json!(object["webhooks"].as_array().map_or(0, Vec::len)),
        table::age_of(object, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    const G: &str = "admissionregistration.k8s.io";
    const K: &str = "ValidatingWebhookConfiguration";

    fn config(hooks: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": K,
               "metadata": {"name": "policy"}, "webhooks": hooks})
    }

    fn good() -> Value {
        json!({"name": "deny.example.com", "sideEffects": "None",
               "admissionReviewVersions": ["v1"],
               "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
               "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                          "resources": ["configmaps"]}]})
    }

    #[test]
    fn defaults_fill_what_kubernetes_fills() {
        let mut object = config(json!([{"name": "a.b.c", "clientConfig":
            {"service": {"namespace": "ns", "name": "svc"}},
            "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]}]));
        ValidatingWebhookConfiguration.default(&mut object);
        let hook = &object["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(hook["matchPolicy"], "Equivalent");
        assert_eq!(hook["timeoutSeconds"], 10);
        assert_eq!(hook["namespaceSelector"], json!({}));
        assert_eq!(hook["objectSelector"], json!({}));
        assert_eq!(hook["clientConfig"]["service"]["port"], 443);
        assert_eq!(hook["rules"][0]["scope"], "*");
        assert!(hook.get("reinvocationPolicy").is_none());
    }

    #[test]
    fn a_good_configuration_passes_and_each_field_is_checked() {
        assert!(create_msgs(G, K, config(json!([good()]))).is_empty());
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"name": "short"}),
                "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots",
            ),
            (
                json!({"sideEffects": "Some"}),
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
            ),
            (
                json!({"sideEffects": null}),
                "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
            ),
            (
                json!({"admissionReviewVersions": ["v1beta1"]}),
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v1beta1\"}: must include at least one of v1",
            ),
            (
                json!({"admissionReviewVersions": []}),
                "webhooks[0].admissionReviewVersions: Required value: must specify one of v1",
            ),
            (
                json!({"timeoutSeconds": 31}),
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            ),
            (
                json!({"failurePolicy": "Maybe"}),
                "webhooks[0].failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\"",
            ),
            (
                json!({"matchPolicy": "Loose"}),
                "webhooks[0].matchPolicy: Unsupported value: \"Loose\": supported values: \"Equivalent\", \"Exact\"",
            ),
            (
                json!({"clientConfig": {"url": "http://127.0.0.1/x"}}),
                "webhooks[0].clientConfig.url: Invalid value: \"http://127.0.0.1/x\": 'https' is the only allowed URL scheme",
            ),
            (
                json!({"clientConfig": {"url": "https://u@h/x"}}),
                "webhooks[0].clientConfig.url: Invalid value: \"https://u@h/x\": user information is not permitted in the URL",
            ),
            (
                json!({"clientConfig": {"url": "https://h/x?a=b"}}),
                "webhooks[0].clientConfig.url: Invalid value: \"https://h/x?a=b\": query parameters are not permitted in the URL",
            ),
            (
                json!({"clientConfig": {"url": "https://h/x#f"}}),
                "webhooks[0].clientConfig.url: Invalid value: \"https://h/x#f\": fragments are not permitted in the URL",
            ),
            (
                json!({"clientConfig": {}}),
                "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
            ),
            (
                json!({"clientConfig": {"url": "https://h/", "service": {"namespace": "n", "name": "s"}}}),
                "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
            ),
            (
                json!({"clientConfig": {"service": {"namespace": "n", "name": "s", "port": 70000}}}),
                "webhooks[0].clientConfig.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive",
            ),
            (
                json!({"rules": [{"operations": [], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}),
                "webhooks[0].rules[0].operations: Required value",
            ),
            (
                json!({"rules": [{"operations": ["*", "CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}),
                "webhooks[0].rules[0].operations: Invalid value: []string{\"*\", \"CREATE\"}: if '*' is present, must not specify other operations",
            ),
            (
                json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Everywhere"}]}),
                "webhooks[0].rules[0].scope: Unsupported value: \"Everywhere\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
            ),
            (
                json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["*/*", "pods"]}]}),
                "webhooks[0].rules[0].resources: Invalid value: []string{\"*/*\", \"pods\"}: if '*/*' is present, must not specify other resources",
            ),
            (
                json!({"matchConditions": [{"name": "a", "expression": "true"}, {"name": "a", "expression": "true"}]}),
                "webhooks[0].matchConditions[1].name: Duplicate value: \"a\"",
            ),
            (
                json!({"matchConditions": [{"name": "bad", "expression": "object.("}]}),
                "webhooks[0].matchConditions[0].expression: Invalid value: \"object.(\": compilation failed",
            ),
        ];
        for (change, want) in cases {
            let mut hook = good();
            for (k, v) in change.as_object().unwrap() {
                if v.is_null() {
                    hook.as_object_mut().unwrap().remove(k);
                } else {
                    hook[k] = v.clone();
                }
            }
            let msgs = create_msgs(G, K, config(json!([hook])));
            assert!(
                msgs.len() == 1 && msgs[0].starts_with(want),
                "{change}: want {want}, got {msgs:?}"
            );
        }
        let many: Vec<Value> = (0..65)
            .map(|i| json!({"name": format!("c{i}"), "expression": "true"}))
            .collect();
        let mut hook = good();
        hook["matchConditions"] = json!(many);
        assert_eq!(
            create_msgs(G, K, config(json!([hook]))),
            ["webhooks[0].matchConditions: Too many: 65: must have at most 64 items"]
        );
        assert_eq!(
            create_msgs(G, K, config(json!([good(), good()]))),
            ["webhooks[1].name: Duplicate value: \"deny.example.com\""]
        );
        let cells = ValidatingWebhookConfiguration
            .cells(&config(json!([good(), good()])), Timestamp::now())
            .unwrap();
        assert_eq!(cells[..2], [json!("policy"), json!(2)]);
    }
}

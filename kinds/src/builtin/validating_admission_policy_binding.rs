//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicyBinding: turns a
//! ValidatingAdmissionPolicy on for some resources, with its parameters and what a failed
//! validation does (`Deny`, `Warn`, `Audit`). Validation and defaults are in
//! [`crate::validation::policies`].

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding as Binding;

use super::prelude::*;
use crate::validation::decode;
use crate::validation::policies::{default_binding, validate_binding_spec};

/// `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicyBinding.
pub struct ValidatingAdmissionPolicyBinding;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "ValidatingAdmissionPolicyBinding",
    plural: "validatingadmissionpolicybindings",
    singular: "validatingadmissionpolicybinding",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &["api-extensions"],
    selectable_fields: &[],
};

fn validate(new: &Value) -> Checked {
    let binding: Binding = decode(new, "")?;
    Ok(validate_binding_spec(&binding.spec.unwrap_or_default()))
}

impl Kind for ValidatingAdmissionPolicyBinding {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Binding>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Binding>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "PolicyName",
                "string",
                "PolicyName indicates the policy definition which the policy binding binded to",
            ),
            col(
                "ParamRef",
                "string",
                "ParamRef indicates the param resource which sets the configration param",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        let param_ref = &spec["paramRef"];
        let shown = match (param_ref["namespace"].as_str(), param_ref["name"].as_str()) {
            _ if param_ref.is_null() => "<unset>".to_string(),
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            (None, Some(name)) => format!("*/{name}"),
            _ => "*/*".to_string(),
        };
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(spec["policyName"].as_str().unwrap_or_default()),
            json!(shown),
            table::age_of(object, now),
        ])
    }

    fn default(&self, object: &mut Value) {
        default_binding(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
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
    const K: &str = "ValidatingAdmissionPolicyBinding";

    fn binding(spec: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": K,
               "metadata": {"name": "replicas-binding"}, "spec": spec})
    }

    fn good() -> Value {
        json!({"policyName": "replicas", "validationActions": ["Deny"],
               "paramRef": {"name": "limits", "namespace": "default",
                            "parameterNotFoundAction": "Deny"}})
    }

    #[test]
    fn a_good_binding_passes_and_each_field_is_checked() {
        assert_eq!(create_msgs(G, K, binding(good())), Vec::<String>::new());
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"policyName": null}),
                "spec.policyName: Required value",
            ),
            (
                json!({"validationActions": []}),
                "spec.validationActions: Required value",
            ),
            (
                json!({"validationActions": ["Deny", "Deny"]}),
                "spec.validationActions[1]: Duplicate value: \"Deny\"",
            ),
            (
                json!({"validationActions": ["Block"]}),
                "spec.validationActions[0]: Unsupported value: \"Block\": supported values: \"Audit\", \"Deny\", \"Warn\"",
            ),
            (
                json!({"validationActions": ["Deny", "Warn"]}),
                "spec.validationActions: Invalid value: []string{\"Deny\", \"Warn\"}: must not contain both Deny and Warn",
            ),
            (
                json!({"paramRef": {"name": "a", "selector": {}, "parameterNotFoundAction": "Deny"}}),
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
            ),
            (
                json!({"paramRef": {"parameterNotFoundAction": "Deny"}}),
                "spec.paramRef: Required value: one of name or selector must be specified",
            ),
            (
                json!({"paramRef": {"name": "a"}}),
                "spec.paramRef.parameterNotFoundAction: Required value",
            ),
            (
                json!({"paramRef": {"name": "a", "parameterNotFoundAction": "Skip"}}),
                "spec.paramRef.parameterNotFoundAction: Unsupported value: \"Skip\": supported values: \"Allow\", \"Deny\"",
            ),
            (
                json!({"matchResources": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": []}]}}),
                "spec.matchResources.resourceRules[0].resources: Required value",
            ),
        ];
        for (change, want) in cases {
            let mut spec = good();
            for (k, v) in change.as_object().unwrap() {
                if v.is_null() {
                    spec.as_object_mut().unwrap().remove(k);
                } else {
                    spec[k] = v.clone();
                }
            }
            let msgs = create_msgs(G, K, binding(spec));
            assert!(
                msgs.len() == 1 && msgs[0].starts_with(want),
                "{change}: want {want}, got {msgs:?}"
            );
        }
        // A selector alone is a valid paramRef.
        let mut by_selector = good();
        by_selector["paramRef"] =
            json!({"selector": {"matchLabels": {"a": "b"}}, "parameterNotFoundAction": "Allow"});
        assert_eq!(
            create_msgs(G, K, binding(by_selector)),
            Vec::<String>::new()
        );
        let cells = ValidatingAdmissionPolicyBinding
            .cells(&binding(good()), Timestamp::now())
            .unwrap();
        assert_eq!(
            cells[..3],
            [
                json!("replicas-binding"),
                json!("replicas"),
                json!("default/limits")
            ]
        );
    }
}

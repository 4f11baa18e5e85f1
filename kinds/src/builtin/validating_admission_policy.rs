//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy: CEL validations the API server
//! itself evaluates on the writes a binding points it at (the `ValidatingAdmissionPolicy`
//! plugin of the API server). Validation and defaults are in
//! [`crate::validation::policies`]; the `status` subresource carries what the API server's type
//! checking found ([`crate::custom::typecheck`]).

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy as Vap;

use super::prelude::*;
use crate::validation::decode;
use crate::validation::policies::{default_policy, validate_policy_spec};

/// `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy.
pub struct ValidatingAdmissionPolicy;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "ValidatingAdmissionPolicy",
    plural: "validatingadmissionpolicies",
    singular: "validatingadmissionpolicy",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
    )],
    categories: &["api-extensions"],
    selectable_fields: &[],
};

fn validate(new: &Value) -> Checked {
    let policy: Vap = decode(new, "")?;
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    Ok(validate_policy_spec(name, &policy.spec.unwrap_or_default()))
}

impl Kind for ValidatingAdmissionPolicy {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Vap>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Vap>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Validations",
                "integer",
                "Validations indicates the number of validation expressions",
            ),
            col(
                "ParamKind",
                "string",
                "ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        let param_kind = match (
            spec["paramKind"]["apiVersion"].as_str(),
            spec["paramKind"]["kind"].as_str(),
        ) {
            (Some(v), Some(k)) => format!("{v}/{k}"),
            _ => "<unset>".to_string(),
        };
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(spec["validations"].as_array().map_or(0, Vec::len)),
            json!(param_kind),
            table::age_of(object, now),
        ])
    }

    fn default(&self, object: &mut Value) {
        default_policy(object);
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
    const K: &str = "ValidatingAdmissionPolicy";

    fn policy(spec: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": K,
               "metadata": {"name": "replicas"}, "spec": spec})
    }

    fn good() -> Value {
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
            "validations": [{"expression": "variables.replicas <= int(params.data.max)",
                             "messageExpression": "'too many: ' + string(variables.replicas)",
                             "reason": "Forbidden"}],
        })
    }

    #[test]
    fn defaults_fill_what_kubernetes_fills() {
        let mut object = policy(good());
        ValidatingAdmissionPolicy.default(&mut object);
        let spec = &object["spec"];
        assert_eq!(spec["failurePolicy"], "Fail");
        assert_eq!(spec["matchConstraints"]["matchPolicy"], "Equivalent");
        assert_eq!(spec["matchConstraints"]["namespaceSelector"], json!({}));
        assert_eq!(spec["matchConstraints"]["objectSelector"], json!({}));
        assert_eq!(spec["matchConstraints"]["resourceRules"][0]["scope"], "*");
    }

    #[test]
    fn a_good_policy_passes_and_each_field_is_checked() {
        assert_eq!(create_msgs(G, K, policy(good())), Vec::<String>::new());
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"validations": null}),
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
            ),
            (
                json!({"validations": [{"expression": "object.("}]}),
                "spec.validations[0].expression: Invalid value: \"object.(\": compilation failed",
            ),
            (
                json!({"validations": [{"expression": ""}]}),
                "spec.validations[0].expression: Required value",
            ),
            (
                json!({"validations": [{"expression": "true", "messageExpression": "'a' +"}]}),
                "spec.validations[0].messageExpression: Invalid value: \"'a' +\": compilation failed",
            ),
            (
                json!({"validations": [{"expression": "true", "message": "two\nlines"}]}),
                "spec.validations[0].message: Invalid value: \"two\\nlines\": message must not contain line breaks",
            ),
            (
                json!({"validations": [{"expression": "true", "reason": "Teapot"}]}),
                "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \"Unauthorized\", \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\"",
            ),
            (
                json!({"failurePolicy": "Maybe"}),
                "spec.failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\"",
            ),
            (
                json!({"matchConstraints": null}),
                "spec.matchConstraints: Required value",
            ),
            (
                json!({"matchConstraints": {"namespaceSelector": {}}}),
                "spec.matchConstraints.resourceRules: Required value",
            ),
            (
                json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": [], "resources": ["deployments"]}]}}),
                "spec.matchConstraints.resourceRules[0].operations: Required value",
            ),
            (
                json!({"matchConstraints": {"matchPolicy": "Loose", "resourceRules": [{"apiGroups": ["apps"],
                    "apiVersions": ["v1"], "operations": ["*"], "resources": ["deployments"]}]}}),
                "spec.matchConstraints.matchPolicy: Unsupported value: \"Loose\": supported values: \"Equivalent\", \"Exact\"",
            ),
            (
                json!({"paramKind": {"kind": "ConfigMap"}}),
                "spec.paramKind.apiVersion: Required value",
            ),
            (
                json!({"paramKind": {"apiVersion": "v1"}}),
                "spec.paramKind.kind: Required value",
            ),
            (
                json!({"variables": [{"name": "a-b", "expression": "1"}]}),
                "spec.variables[0].name: Invalid value: \"a-b\": name is not a valid CEL identifier",
            ),
            (
                json!({"variables": [{"name": "a", "expression": "1"}, {"name": "a", "expression": "2"}]}),
                "spec.variables[1].name: Duplicate value: \"a\"",
            ),
            (
                json!({"matchConditions": [{"name": "c", "expression": "object.("}]}),
                "spec.matchConditions[0].expression: Invalid value: \"object.(\": compilation failed",
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
            let msgs = create_msgs(G, K, policy(spec));
            assert!(
                msgs.len() == 1 && msgs[0].starts_with(want),
                "{change}: want {want}, got {msgs:?}"
            );
        }
        // Audit annotations alone are enough.
        let mut audit_only = good();
        audit_only.as_object_mut().unwrap().remove("validations");
        audit_only["auditAnnotations"] = json!([{"key": "k", "valueExpression": "'v'"}]);
        assert_eq!(
            create_msgs(G, K, policy(audit_only.clone())),
            Vec::<String>::new()
        );
        // A key must make `<policy>/<key>` an annotation key; a value expression is at most 5 KiB.
        let mut bad_key = audit_only.clone();
        bad_key["auditAnnotations"] = json!([{"key": "not a key", "valueExpression": "'v'"}]);
        let msgs = create_msgs(G, K, policy(bad_key));
        assert!(
            msgs.len() == 1
                && msgs[0].starts_with(
                    "spec.auditAnnotations[0].key: Invalid value: \"replicas/not a key\": name part must consist of"
                ),
            "{msgs:?}"
        );
        let mut long = audit_only;
        long["auditAnnotations"] =
            json!([{"key": "k", "valueExpression": format!("'{}'", "v".repeat(5 * 1024))}]);
        assert_eq!(
            create_msgs(G, K, policy(long)),
            ["spec.auditAnnotations[0].valueExpression: Too long: may not be more than 5120 bytes"]
        );
        let cells = ValidatingAdmissionPolicy
            .cells(&policy(good()), Timestamp::now())
            .unwrap();
        assert_eq!(
            cells[..3],
            [json!("replicas"), json!(1), json!("v1/ConfigMap")]
        );
    }
}

//! `flowcontrol.apiserver.k8s.io/v1` FlowSchema: which requests belong to which priority level
//! of API Priority and Fairness. Served and stored so that charts and `kubectl` that carry them
//! work; skiff does not schedule requests by them (its limits are per client), and says so here.

use k8s_openapi::api::flowcontrol::v1::FlowSchema as Fs;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `flowcontrol.apiserver.k8s.io/v1` FlowSchema.
pub struct FlowSchema;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "flowcontrol.apiserver.k8s.io",
    version: "v1",
    kind: "FlowSchema",
    plural: "flowschemas",
    singular: "flowschema",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema")],
    categories: &[],
    selectable_fields: &[],
};

const DISTINGUISHER_METHODS: &[&str] = &["ByUser", "ByNamespace"];

fn validate(new: &Value) -> Checked {
    let fs: Fs = decode(new, "")?;
    let spec = fs.spec.unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = Vec::new();
    if let Some(p) = spec.matching_precedence
        && !(1..=10_000).contains(&p)
    {
        errs.push(FieldError::invalid(
            path.child("matchingPrecedence"),
            p,
            "must be between 1 and 10000 inclusive",
        ));
    }
    if spec.priority_level_configuration.name.is_empty() {
        errs.push(FieldError::required(
            path.child("priorityLevelConfiguration").child("name"),
            "must reference a priority level",
        ));
    }
    if let Some(method) = &spec.distinguisher_method
        && !DISTINGUISHER_METHODS.contains(&method.type_.as_str())
    {
        errs.push(FieldError::not_supported(
            path.child("distinguisherMethod").child("type"),
            method.type_.as_str(),
            DISTINGUISHER_METHODS,
        ));
    }
    Ok(errs)
}

impl Kind for FlowSchema {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Fs>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Fs>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "PriorityLevel",
                "string",
                "`name` is the name of the priority level configuration being referenced",
            ),
            col(
                "MatchingPrecedence",
                "string",
                "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request.",
            ),
            col(
                "DistinguisherMethod",
                "string",
                "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema.",
            ),
            AGE,
            col(
                "MissingPL",
                "string",
                "references a broken or non-existent PriorityLevelConfiguration",
            ),
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        let missing = object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Dangling")
            .and_then(|c| c["status"].as_str())
            .unwrap_or("?");
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(
                spec["priorityLevelConfiguration"]["name"]
                    .as_str()
                    .unwrap_or_default()
            ),
            json!(spec["matchingPrecedence"].as_i64().unwrap_or(0).to_string()),
            json!(spec["distinguisherMethod"]["type"].as_str().unwrap_or("*")),
            table::age_of(object, now),
            json!(missing),
        ])
    }

    fn default(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
            && spec
                .get("matchingPrecedence")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0
        {
            spec.insert("matchingPrecedence".into(), json!(1000));
        }
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        let _: Fs = decode(new, "")?;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    const G: &str = "flowcontrol.apiserver.k8s.io";

    #[test]
    fn precedence_defaults_and_a_level_is_named() {
        let mut fs = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "mine"},
            "spec": {"priorityLevelConfiguration": {"name": "workload-low"},
                     "distinguisherMethod": {"type": "ByUser"}}});
        FlowSchema.default(&mut fs);
        assert_eq!(fs["spec"]["matchingPrecedence"], 1000);
        assert!(create_msgs(G, "FlowSchema", fs.clone()).is_empty());
        let cells = FlowSchema.cells(&fs, Timestamp::now()).unwrap();
        assert_eq!(
            cells[1..4],
            [json!("workload-low"), json!("1000"), json!("ByUser")]
        );
        assert_eq!(cells[5], json!("?"));
        fs["spec"]["matchingPrecedence"] = json!(20_000);
        fs["spec"]["priorityLevelConfiguration"]["name"] = json!("");
        assert_eq!(create_msgs(G, "FlowSchema", fs).len(), 2);
    }
}

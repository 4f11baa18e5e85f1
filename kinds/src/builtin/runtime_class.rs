//! `node.k8s.io/v1` RuntimeClass: a name pods give in `runtimeClassName` for the container
//! runtime handler that runs them (a CRI runtime handler such as `runc`), with the pod overhead
//! and scheduling constraints of that handler. Stored and served; the handler is immutable.

use k8s_openapi::api::node::v1::RuntimeClass as Rc;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `node.k8s.io/v1` RuntimeClass.
pub struct RuntimeClass;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "node.k8s.io",
    version: "v1",
    kind: "RuntimeClass",
    plural: "runtimeclasses",
    singular: "runtimeclass",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let rc: Rc = decode(new, "")?;
    let mut errs = Vec::new();
    // The handler is a DNS label, as CRI runtime handlers are named.
    if rc.handler.is_empty() {
        errs.push(FieldError::required(Path::new("handler"), ""));
    } else {
        for m in names::dns1123_label(&rc.handler) {
            errs.push(FieldError::invalid(
                Path::new("handler"),
                rc.handler.as_str(),
                m,
            ));
        }
    }
    if let Some(old) = old {
        let old: Rc = decode(old, "")?;
        if rc.handler != old.handler {
            errs.push(FieldError::invalid(
                Path::new("handler"),
                rc.handler.as_str(),
                "field is immutable",
            ));
        }
    }
    Ok(errs)
}

impl Kind for RuntimeClass {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Rc>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Rc>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Handler",
                "string",
                "handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class.",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(object["handler"].as_str().unwrap_or_default()),
            table::age_of(object, now),
        ])
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new, old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::{create_msgs, update_msgs};

    fn rc(handler: &str) -> Value {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": "gvisor"}, "handler": handler})
    }

    #[test]
    fn the_handler_is_a_label_and_never_changes() {
        assert!(create_msgs("node.k8s.io", "RuntimeClass", rc("runsc")).is_empty());
        assert_eq!(
            create_msgs("node.k8s.io", "RuntimeClass", rc("")),
            ["handler: Required value"]
        );
        assert_eq!(
            update_msgs("node.k8s.io", "RuntimeClass", rc("runc"), rc("runsc")),
            ["handler: Invalid value: \"runc\": field is immutable"]
        );
        let cells = RuntimeClass.cells(&rc("runsc"), Timestamp::now()).unwrap();
        assert_eq!(cells[..2], [json!("gvisor"), json!("runsc")]);
    }
}

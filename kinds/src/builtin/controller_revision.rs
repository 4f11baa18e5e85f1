//! `apps/v1` ControllerRevision: one recorded pod template of a StatefulSet or DaemonSet, which
//! `kubectl rollout history` lists and `kubectl rollout undo` patches back into its set.

use super::prelude::*;
use api::apps::v1::ControllerRevision as Typed;
use validation::{FieldError, Path};

/// `apps/v1` ControllerRevision.
pub struct ControllerRevision;

/// Its names, scope and verbs.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "apps",
    version: "v1",
    kind: "ControllerRevision",
    plural: "controllerrevisions",
    singular: "controllerrevision",
    short_names: &[],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for ControllerRevision {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Typed>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Typed>(generator))
    }

    /// kubectl's columns: the controlling set as `kind.group/name`, and the revision number.
    fn columns(&self) -> Vec<Column> {
        vec![
            table::NAME,
            table::col(
                "Controller",
                "string",
                "Controller of the object with link to the owner reference.",
            ),
            table::col(
                "Revision",
                "integer",
                "Revision indicates the revision of the state represented by Data.",
            ),
            table::AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let revision: Typed = table::typed(object)?;
        let controller = revision
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| {
                let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
                let kind = r.kind.to_lowercase();
                match group {
                    "" => format!("{kind}/{}", r.name),
                    group => format!("{kind}.{group}/{}", r.name),
                }
            })
            .unwrap_or_else(|| "<none>".to_string());
        Some(vec![
            table::name(&revision.metadata),
            json!(controller),
            json!(revision.revision),
            table::age(&revision.metadata, now),
        ])
    }

    /// `ValidateControllerRevisionCreate`/`Update`: data is mandatory and, once written, never
    /// changes; the revision number is not negative (and may change: a reused template moves
    /// to the top of the history).
    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        let mut errs = Vec::new();
        let data = new.get("data").filter(|d| !d.is_null());
        if data.is_none() {
            errs.push(FieldError::required(Path::new("data"), "data is mandatory"));
        }
        match new.get("revision") {
            Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n < 0) => {
                errs.push(FieldError::invalid(
                    Path::new("revision"),
                    n.as_i64().unwrap_or_default(),
                    "must be greater than or equal to 0",
                ));
            }
            _ => {}
        }
        if let Some(old) = old {
            let old_data = old.get("data").filter(|d| !d.is_null());
            if data != old_data {
                errs.push(FieldError::invalid(
                    Path::new("data"),
                    data.cloned().unwrap_or(Value::Null),
                    "field is immutable",
                ));
            }
        }
        Ok(errs)
    }
}

#[cfg(test)]
mod tests {
    use crate::validation::test_util::{create_msgs, update_msgs};
    use serde_json::json;

    fn revision(data: serde_json::Value, number: i64) -> serde_json::Value {
        json!({"metadata": {"name": "web-abc", "namespace": "default"}, "data": data, "revision": number})
    }

    #[test]
    fn data_is_mandatory_and_immutable_and_the_number_may_move() {
        let data = json!({"spec": {"template": {"$patch": "replace"}}});
        let create = |v| create_msgs("apps", "ControllerRevision", v);
        assert!(create(revision(data.clone(), 1)).is_empty());
        assert_eq!(
            create(revision(serde_json::Value::Null, -1)),
            [
                "data: Required value: data is mandatory",
                "revision: Invalid value: -1: must be greater than or equal to 0"
            ]
        );
        let update = |new, old| update_msgs("apps", "ControllerRevision", new, old);
        let mut old = revision(data.clone(), 1);
        old["metadata"]["resourceVersion"] = json!("5");
        let mut new = revision(data.clone(), 3);
        new["metadata"]["resourceVersion"] = json!("5");
        assert!(update(new.clone(), old.clone()).is_empty());
        new["data"] = json!({"spec": {}});
        let msgs = update(new, old);
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(
            msgs[0].starts_with("data: Invalid value: ") && msgs[0].ends_with("field is immutable"),
            "{msgs:?}"
        );
    }
}

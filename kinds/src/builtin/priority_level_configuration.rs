//! `flowcontrol.apiserver.k8s.io/v1` PriorityLevelConfiguration: a priority level of API
//! Priority and Fairness (its share of concurrency and its queues). Served and stored so that
//! charts and `kubectl` that carry them work; skiff does not queue requests by them.

use k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration as Plc;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `flowcontrol.apiserver.k8s.io/v1` PriorityLevelConfiguration.
pub struct PriorityLevelConfiguration;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "flowcontrol.apiserver.k8s.io",
    version: "v1",
    kind: "PriorityLevelConfiguration",
    plural: "prioritylevelconfigurations",
    singular: "prioritylevelconfiguration",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
    )],
    categories: &[],
    selectable_fields: &[],
};

const TYPES: &[&str] = &["Exempt", "Limited"];

fn validate(new: &Value) -> Checked {
    let plc: Plc = decode(new, "")?;
    let spec = plc.spec.unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = Vec::new();
    match spec.type_.as_str() {
        "Limited" if spec.limited.is_none() => errs.push(FieldError::required(
            path.child("limited"),
            "must not be empty when type is Limited",
        )),
        "Exempt" if spec.limited.is_some() => errs.push(FieldError::forbidden(
            path.child("limited"),
            "must be nil if the type is not Limited",
        )),
        "Limited" | "Exempt" => {}
        other => errs.push(FieldError::not_supported(path.child("type"), other, TYPES)),
    }
    if let Some(percent) = spec.limited.as_ref().and_then(|l| l.lendable_percent)
        && !(0..=100).contains(&percent)
    {
        errs.push(FieldError::invalid(
            path.child("limited").child("lendablePercent"),
            percent,
            "must be between 0 and 100, inclusive",
        ));
    }
    Ok(errs)
}

impl Kind for PriorityLevelConfiguration {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Plc>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Plc>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Type",
                "string",
                "`type` indicates whether this priority level is subject to limitation on request execution.",
            ),
            col(
                "NominalConcurrencyShares",
                "string",
                "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level.",
            ),
            col(
                "Queues",
                "string",
                "`queues` is the number of queues for this priority level.",
            ),
            col(
                "HandSize",
                "string",
                "`handSize` is a small positive number that configures the shuffle sharding of requests into queues.",
            ),
            col(
                "QueueLengthLimit",
                "string",
                "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time.",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let spec = &object["spec"];
        let limited = &spec["limited"];
        let queuing = &limited["limitResponse"]["queuing"];
        let shown = |v: &Value| json!(v.as_i64().map_or("<none>".to_string(), |n| n.to_string()));
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(spec["type"].as_str().unwrap_or_default()),
            shown(&limited["nominalConcurrencyShares"]),
            shown(&queuing["queues"]),
            shown(&queuing["handSize"]),
            shown(&queuing["queueLengthLimit"]),
            table::age_of(object, now),
        ])
    }

    fn default(&self, object: &mut Value) {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        let limited = spec.get("type").and_then(Value::as_str) == Some("Limited");
        let Some(level) = spec
            .get_mut(if limited { "limited" } else { "exempt" })
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        level
            .entry("nominalConcurrencyShares")
            .or_insert(json!(if limited { 30 } else { 0 }));
        level.entry("lendablePercent").or_insert(json!(0));
        if let Some(queuing) = level
            .get_mut("limitResponse")
            .filter(|r| r["type"] == "Queue")
            .and_then(|r| r.as_object_mut())
            .map(|r| r.entry("queuing").or_insert_with(|| json!({})))
            .and_then(Value::as_object_mut)
        {
            queuing.entry("queues").or_insert(json!(64));
            queuing.entry("handSize").or_insert(json!(8));
            queuing.entry("queueLengthLimit").or_insert(json!(50));
        }
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        let _: Plc = decode(new, "")?;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    const G: &str = "flowcontrol.apiserver.k8s.io";

    #[test]
    fn limited_levels_get_their_queues() {
        let mut plc = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration", "metadata": {"name": "low"},
            "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Queue"}}}});
        PriorityLevelConfiguration.default(&mut plc);
        assert!(create_msgs(G, "PriorityLevelConfiguration", plc.clone()).is_empty());
        let cells = PriorityLevelConfiguration
            .cells(&plc, Timestamp::now())
            .unwrap();
        assert_eq!(
            cells[1..6],
            [
                json!("Limited"),
                json!("30"),
                json!("64"),
                json!("8"),
                json!("50")
            ]
        );
        let bad = json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration", "metadata": {"name": "low"},
            "spec": {"type": "Limited"}});
        assert_eq!(
            create_msgs(G, "PriorityLevelConfiguration", bad),
            ["spec.limited: Required value: must not be empty when type is Limited"]
        );
    }
}

//! `events.k8s.io/v1` Event: the core Events again, through the API newer clients write them
//! with (client-go's events recorder, kube-scheduler). As in Kubernetes there is one store of
//! Events: objects are kept in the core shape under the core Events' keys (see
//! [`skiff_meta::ResourceInfo::storage_group`]), and this kind converts them field by field:
//! `regarding` is `involvedObject`, `note` is `message`, `reportingController` is
//! `reportingComponent`, and the legacy `source`, `firstTimestamp`, `lastTimestamp` and `count`
//! are `deprecated*`. An Event written through either API is read through both.
//!
//! Creates through this API answer to the strict rules Kubernetes applies to it (an event time,
//! a reporting controller and instance, an action and a reason, a `Normal` or `Warning` type,
//! no deprecated fields, a series of two or more), besides the core rules.

use super::prelude::*;
use crate::validation::{FieldError, Path};

/// `events.k8s.io/v1` Event.
pub struct EventsEvent;

/// Its names, scope and verbs. Its fields are selected as the stored (core) Events' are.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "events.k8s.io",
    version: "v1",
    short_names: &["ev"],
    ..super::event::INFO
};

/// The fields that differ, `(events.k8s.io/v1 name, core/v1 name)`.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Renames the fields of `object` from the first of each pair to the second and sets its
/// `apiVersion`, unless it is in that version already.
fn rename(object: &mut Value, api_version: &str, from_events: bool) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if map.get("apiVersion").and_then(Value::as_str) == Some(api_version) {
        return;
    }
    for (events, core) in RENAMED {
        let (from, to) = if from_events {
            (events, core)
        } else {
            (core, events)
        };
        match map.remove(*from) {
            Some(value) => {
                map.insert(to.to_string(), value);
            }
            None => {
                map.remove(*to);
            }
        }
    }
    map.insert("apiVersion".into(), json!(api_version));
    map.insert("kind".into(), json!("Event"));
}

/// `object` in the core shape (a clone).
fn as_core(object: &Value) -> Value {
    let mut core = object.clone();
    rename(&mut core, "v1", true);
    core
}

fn strict_rules(event: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if event.get("eventTime").is_none_or(Value::is_null) {
        errs.push(FieldError::required("eventTime", ""));
    }
    let type_ = event["type"].as_str().unwrap_or_default();
    if type_ != "Normal" && type_ != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            "",
            format!("has invalid value: {type_}"),
        ));
    }
    for field in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    ] {
        if event.get(field).is_some_and(|v| !v.is_null() && v != 0) {
            errs.push(FieldError::invalid(field, "", "needs to be unset"));
        }
    }
    let source = &event["deprecatedSource"];
    if ["component", "host"]
        .iter()
        .any(|f| source[f].as_str().is_some_and(|s| !s.is_empty()))
    {
        errs.push(FieldError::invalid(
            "deprecatedSource",
            "",
            "needs to be unset",
        ));
    }
    if let Some(series) = event.get("series").filter(|s| !s.is_null()) {
        let path = Path::new("series");
        let count = series["count"].as_i64().unwrap_or(0);
        if count < 2 {
            errs.push(FieldError::invalid(
                path.child("count"),
                "",
                "should be at least 2",
            ));
        }
        if series["lastObservedTime"].is_null() {
            errs.push(FieldError::required(path.child("lastObservedTime"), ""));
        }
    }
    errs
}

/// Fields an update through this API may not change.
const IMMUTABLE: &[&str] = &[
    "eventTime",
    "action",
    "reason",
    "regarding",
    "related",
    "reportingController",
    "reportingInstance",
    "type",
];

impl Kind for EventsEvent {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::events::v1::Event>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::events::v1::Event>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::event_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::event_row(&as_core(object), now)
    }

    fn name_rule(&self) -> NameFn {
        names::path_segment_name
    }

    fn validate(&self, new: &Value, old: Option<&Value>, meta: &ObjectMeta) -> Checked {
        let mut errs = validation::core::validate_event(&as_core(new), None, meta)?;
        match old {
            None => errs.extend(strict_rules(new)),
            Some(old) => {
                for field in IMMUTABLE {
                    if new.get(*field) != old.get(*field) {
                        errs.push(FieldError::invalid(
                            *field,
                            new.get(*field).cloned().unwrap_or(Value::Null),
                            "field is immutable",
                        ));
                    }
                }
            }
        }
        Ok(errs)
    }

    fn validates_metadata_last(&self) -> bool {
        true
    }

    fn expires(&self) -> bool {
        true
    }

    fn converts(&self) -> bool {
        true
    }

    fn to_served(&self, object: &mut Value) {
        rename(object, "events.k8s.io/v1", false);
    }

    fn to_stored(&self, object: &mut Value) {
        rename(object, "v1", true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Value {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"name": "web.1", "namespace": "default"},
               "eventTime": "2026-12-06T06:00:00.000000Z",
               "reportingController": "example.com/scaler", "reportingInstance": "scaler-1",
               "action": "Scale", "reason": "Scaled", "type": "Normal", "note": "to 3",
               "regarding": {"kind": "Deployment", "name": "web", "namespace": "default"}})
    }

    fn messages(new: &Value, old: Option<&Value>) -> Vec<String> {
        let meta = ObjectMeta {
            namespace: Some("default".into()),
            ..Default::default()
        };
        EventsEvent
            .validate(new, old, &meta)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn an_event_is_stored_in_the_core_shape_and_read_back_whole() {
        assert_eq!(
            INFO.storage_prefix(),
            super::super::event::INFO.storage_prefix()
        );
        let mut stored = event();
        EventsEvent.to_stored(&mut stored);
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "web");
        assert_eq!(stored["message"], "to 3");
        assert_eq!(stored["reportingComponent"], "example.com/scaler");
        assert!(stored.get("regarding").is_none() && stored.get("note").is_none());
        // What the core API reads is a valid core Event.
        let core: api::core::v1::Event = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(core.reason.as_deref(), Some("Scaled"));
        let mut served = stored;
        EventsEvent.to_served(&mut served);
        assert_eq!(served, event());
        // Converting what is already served changes nothing.
        EventsEvent.to_served(&mut served);
        assert_eq!(served, event());
    }

    #[test]
    fn a_legacy_event_reads_with_its_deprecated_fields() {
        let mut legacy = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Pulled",
            "message": "pulled", "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2026-12-06T06:00:00Z", "lastTimestamp": "2026-12-06T06:01:00Z",
            "count": 2, "type": "Normal"});
        EventsEvent.to_served(&mut legacy);
        assert_eq!(legacy["deprecatedSource"]["component"], "kubelet");
        assert_eq!(legacy["deprecatedCount"], 2);
        assert_eq!(legacy["note"], "pulled");
        let cells = EventsEvent.cells(&legacy, Timestamp::now()).unwrap();
        assert!(cells.contains(&json!("Pulled")), "{cells:?}");
    }

    #[test]
    fn creates_answer_to_the_strict_rules() {
        assert!(
            messages(&event(), None).is_empty(),
            "{:?}",
            messages(&event(), None)
        );
        let mut bad = event();
        bad["type"] = json!("Loud");
        bad["deprecatedCount"] = json!(3);
        bad["series"] = json!({"count": 1});
        bad.as_object_mut().unwrap().remove("eventTime");
        assert_eq!(
            messages(&bad, None),
            [
                // Without an event time the core rules are the legacy ones, as in Kubernetes.
                "eventTime: Required value",
                "type: Invalid value: \"\": has invalid value: Loud",
                "deprecatedCount: Invalid value: \"\": needs to be unset",
                "series.count: Invalid value: \"\": should be at least 2",
                "series.lastObservedTime: Required value",
            ]
        );
        let mut unreasoned = event();
        unreasoned.as_object_mut().unwrap().remove("reason");
        assert_eq!(messages(&unreasoned, None), ["reason: Required value"]);
        let mut changed = event();
        changed["reason"] = json!("Other");
        changed["note"] = json!("a new note is fine");
        assert_eq!(
            messages(&changed, Some(&event())),
            ["reason: Invalid value: \"Other\": field is immutable"]
        );
    }
}

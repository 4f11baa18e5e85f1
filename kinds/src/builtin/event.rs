//! `core/v1` Event.

use super::prelude::*;

/// `core/v1` Event.
pub struct Event;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Event",
    plural: "events",
    singular: "event",
    short_names: &["ev"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[
        SelectableField::path("involvedObject.kind", &["involvedObject", "kind"], ""),
        SelectableField::path(
            "involvedObject.namespace",
            &["involvedObject", "namespace"],
            "",
        ),
        SelectableField::path("involvedObject.name", &["involvedObject", "name"], ""),
        SelectableField::path("involvedObject.uid", &["involvedObject", "uid"], ""),
        SelectableField::path(
            "involvedObject.apiVersion",
            &["involvedObject", "apiVersion"],
            "",
        ),
        SelectableField::path(
            "involvedObject.resourceVersion",
            &["involvedObject", "resourceVersion"],
            "",
        ),
        SelectableField::path(
            "involvedObject.fieldPath",
            &["involvedObject", "fieldPath"],
            "",
        ),
        SelectableField::path("reason", &["reason"], ""),
        SelectableField::path("reportingComponent", &["reportingComponent"], ""),
        SelectableField {
            name: "source",
            source: FieldSource::EventOrigin,
        },
        SelectableField::path("type", &["type"], ""),
    ],
};

impl Kind for Event {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::Event>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::Event>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::event_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::event_row(object, now)
    }

    fn name_rule(&self) -> NameFn {
        names::path_segment_name
    }

    fn validate(&self, new: &Value, old: Option<&Value>, meta: &ObjectMeta) -> Checked {
        validation::core::validate_event(new, old, meta)
    }

    fn validates_metadata_last(&self) -> bool {
        true
    }

    fn expires(&self) -> bool {
        true
    }
}

//! `batch/v1` Job.

use super::prelude::*;

/// `batch/v1` Job.
pub struct Job;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "batch",
    version: "v1",
    kind: "Job",
    plural: "jobs",
    singular: "job",
    short_names: &[],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("batch", "v1", "Job")],
    categories: &["all"],
    selectable_fields: &[SelectableField::path(
        "status.successful",
        &["status", "succeeded"],
        "0",
    )],
};

impl Kind for Job {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::batch::v1::Job>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::batch::v1::Job>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::job_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::job_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::job(object);
    }

    fn prepare_for_create(&self, object: &mut Value) {
        defaults::generate_job_selector(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, meta: &ObjectMeta) -> Checked {
        validation::batch::validate_job(new, old, meta.uid.as_deref().unwrap_or_default())
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        validation::batch::validate_job_status(new)
    }
}

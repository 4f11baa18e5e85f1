//! `apps/v1` Deployment.

use super::prelude::*;

/// `apps/v1` Deployment.
pub struct Deployment;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "apps",
    version: "v1",
    kind: "Deployment",
    plural: "deployments",
    singular: "deployment",
    short_names: &["deploy"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("apps", "v1", "Deployment"), SCALE],
    categories: &["all"],
    selectable_fields: &[],
};

impl Kind for Deployment {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::apps::v1::Deployment>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::apps::v1::Deployment>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::deployment_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::deployment_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::deployment(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::apps::validate_deployment(new, old)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        validation::apps::validate_status(&INFO, new, old)
    }
}

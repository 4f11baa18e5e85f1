//! `core/v1` Service.

use super::prelude::*;

/// `core/v1` Service.
pub struct Service;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Service",
    plural: "services",
    singular: "service",
    short_names: &["svc"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("", "v1", "Service"), proxy("ServiceProxyOptions")],
    categories: &["all"],
    selectable_fields: &[],
};

impl Kind for Service {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::Service>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::Service>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::service_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::service_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::service(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn name_rule(&self) -> NameFn {
        names::name_is_dns1035_label
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::service::validate(new, old)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        validation::service::validate_service_status(new)
    }

    fn prepare_for_create(&self, object: &mut Value) {
        object["status"] = json!({"loadBalancer": {}});
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        defaults::carry_over_service_allocations(new, old);
    }
}

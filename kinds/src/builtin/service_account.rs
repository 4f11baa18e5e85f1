//! `core/v1` ServiceAccount.

use super::prelude::*;

/// `core/v1` ServiceAccount.
pub struct ServiceAccount;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "ServiceAccount",
    plural: "serviceaccounts",
    singular: "serviceaccount",
    short_names: &["sa"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[Subresource {
        // TokenRequest: `kubectl create token`, and the kubelet's projected tokens.
        name: "token",
        group: "authentication.k8s.io",
        version: "v1",
        kind: "TokenRequest",
        verbs: &["create"],
    }],
    categories: &[],
    selectable_fields: &[],
};

impl Kind for ServiceAccount {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::ServiceAccount>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::ServiceAccount>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::service_account_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::service_account_row(object, now)
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::core::validate_service_account(new, old)
    }
}

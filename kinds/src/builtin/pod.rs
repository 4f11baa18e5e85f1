//! `core/v1` Pod.

use super::prelude::*;

/// `core/v1` Pod.
pub struct Pod;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "Pod",
    plural: "pods",
    singular: "pod",
    short_names: &["po"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[
        status("", "v1", "Pod"),
        Subresource {
            name: "binding",
            group: "",
            version: "v1",
            kind: "Binding",
            verbs: &["create"],
        },
        Subresource {
            name: "eviction",
            group: "policy",
            version: "v1",
            kind: "Eviction",
            verbs: &["create"],
        },
        Subresource {
            name: "ephemeralcontainers",
            group: "",
            version: "v1",
            kind: "Pod",
            verbs: &["get", "patch", "update"],
        },
        Subresource {
            name: "log",
            group: "",
            version: "v1",
            kind: "Pod",
            verbs: &["get"],
        },
        Subresource {
            name: "attach",
            group: "",
            version: "v1",
            kind: "PodAttachOptions",
            verbs: &["create", "get"],
        },
        Subresource {
            name: "exec",
            group: "",
            version: "v1",
            kind: "PodExecOptions",
            verbs: &["create", "get"],
        },
        Subresource {
            name: "portforward",
            group: "",
            version: "v1",
            kind: "PodPortForwardOptions",
            verbs: &["create", "get"],
        },
        proxy("PodProxyOptions"),
    ],
    categories: &["all"],
    selectable_fields: &[
        SelectableField::path("spec.nodeName", &["spec", "nodeName"], ""),
        SelectableField::path("spec.restartPolicy", &["spec", "restartPolicy"], ""),
        SelectableField::path("spec.schedulerName", &["spec", "schedulerName"], ""),
        SelectableField::path(
            "spec.serviceAccountName",
            &["spec", "serviceAccountName"],
            "",
        ),
        SelectableField::path("spec.hostNetwork", &["spec", "hostNetwork"], "false"),
        SelectableField::path("status.phase", &["status", "phase"], ""),
        SelectableField {
            name: "status.podIP",
            source: FieldSource::PodIp,
        },
        SelectableField::path(
            "status.nominatedNodeName",
            &["status", "nominatedNodeName"],
            "",
        ),
    ],
};

impl Kind for Pod {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<api::core::v1::Pod>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<api::core::v1::Pod>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        table::pod_columns()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        table::pod_row(object, now)
    }

    fn default(&self, object: &mut Value) {
        defaults::pod(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validation::pod::validate(new, old)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        validation::pod::validate_pod_status_update(new, old)
    }

    fn subresource_fields(&self, subresource: &str) -> Option<&'static [&'static str]> {
        (subresource == "ephemeralcontainers").then_some(&["/spec/ephemeralContainers"][..])
    }

    fn validate_subresource(&self, subresource: &str, new: &Value, old: &Value) -> Checked {
        match subresource {
            "ephemeralcontainers" => {
                validation::pod::validate_ephemeral_containers_update(new, old)
            }
            _ => Ok(Vec::new()),
        }
    }

    fn prepare_for_create(&self, object: &mut Value) {
        let qos = strategy::pod_qos_class(object);
        object["status"] = json!({"phase": "Pending", "qosClass": qos});
    }

    fn row_conditions(&self, object: &Value) -> Option<Value> {
        table::pod_row_conditions(object)
    }
}

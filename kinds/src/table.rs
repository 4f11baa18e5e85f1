//! Server-side printing: `meta.k8s.io` `Table` responses with the columns kubectl shows on a
//! real cluster, for every served kind (and `NAME`/`CREATED AT` for any other).
//!
//! kubectl asks for a Table with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json`
//! and prints the cells as they come, hiding columns of priority > 0 unless `-o wide`. The
//! server always fills every column. Rows carry the object (by default as
//! `PartialObjectMetadata`, which kubectl uses for `-A`'s NAMESPACE and `--show-labels`).
//!
//! The cell rules follow the Kubernetes printers (pod status from phase, reasons and container
//! states; node status from the Ready condition; ages in `HumanDuration` form).

use std::collections::{BTreeMap, BTreeSet};

use crate::Kind;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Endpoints, Event, Namespace, Node, Pod, ReplicationController, Secret,
    Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ListMeta, ObjectMeta, Time};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::media::media_ranges;

/// The group of `Table` and `PartialObjectMetadata`.
pub const TABLE_GROUP: &str = "meta.k8s.io";

/// The version of `meta.k8s.io` a client asked the Table in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableVersion {
    /// `meta.k8s.io/v1`.
    V1,
    /// `meta.k8s.io/v1beta1`.
    V1Beta1,
}

impl TableVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub fn api_version(self) -> &'static str {
        match self {
            TableVersion::V1 => "meta.k8s.io/v1",
            TableVersion::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }

    /// The version named by a Table `apiVersion` (`meta.k8s.io/v1`, `meta.k8s.io/v1beta1`).
    pub fn from_api_version(api_version: &str) -> Option<TableVersion> {
        match api_version {
            "meta.k8s.io/v1" => Some(TableVersion::V1),
            "meta.k8s.io/v1beta1" => Some(TableVersion::V1Beta1),
            _ => None,
        }
    }

    /// The Content-Type of a Table response.
    pub fn content_type(self) -> &'static str {
        match self {
            TableVersion::V1 => "application/json;as=Table;v=v1;g=meta.k8s.io",
            TableVersion::V1Beta1 => "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
        }
    }
}

/// Whether the Accept header asks for a Table, and in which version: the most preferred JSON
/// range decides (`as=Table;g=meta.k8s.io;v=v1|v1beta1` → a Table; plain JSON → no Table).
/// Forms this server does not produce (protobuf, `as=PartialObjectMetadata`) are skipped.
pub fn table_version(accept: Option<&str>) -> Option<TableVersion> {
    for range in media_ranges(accept.unwrap_or("")) {
        if range.quality <= 0.0 || !range.accepts_json() {
            continue;
        }
        match (range.param("as"), range.param("g"), range.param("v")) {
            (Some("Table"), Some(TABLE_GROUP), Some("v1")) => return Some(TableVersion::V1),
            (Some("Table"), Some(TABLE_GROUP), Some("v1beta1")) => {
                return Some(TableVersion::V1Beta1);
            }
            (None, None, None) => return None,
            _ => continue,
        }
    }
    None
}

/// What each row carries besides its cells (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object.
    None,
    /// The object's metadata as `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

/// An `includeObject` value that is not `None`, `Metadata` or `Object`.
#[derive(Debug, thiserror::Error)]
#[error("invalid includeObject value {0:?}: must be None, Metadata or Object")]
pub struct InvalidIncludeObject(pub String);

impl IncludeObject {
    /// Parses the `includeObject` query parameter (absent or empty: `Metadata`).
    pub fn from_query(value: Option<&str>) -> Result<IncludeObject, InvalidIncludeObject> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(InvalidIncludeObject(other.to_string())),
        }
    }
}

/// One column of a Table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    /// Human-readable name; kubectl prints it upper-cased (`Nominated Node` → `NOMINATED NODE`).
    pub name: &'static str,
    /// OpenAPI type of the cells: `string`, `integer`, `date`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// OpenAPI format: `name` for the object's name column, else empty.
    pub format: &'static str,
    /// What the column shows.
    pub description: &'static str,
    /// 0: always shown; 1: only with `-o wide`.
    pub priority: i32,
}

pub(crate) const fn col(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

pub(crate) const fn wide(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 1,
    }
}

pub(crate) const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    description: "Name must be unique within a namespace; the object's metadata.name.",
    priority: 0,
};
pub(crate) const AGE: Column = col(
    "Age",
    "string",
    "Time since the object was created (metadata.creationTimestamp).",
);
pub(crate) const CONTAINERS: Column = wide(
    "Containers",
    "string",
    "Names of each container in the template.",
);
pub(crate) const IMAGES: Column = wide(
    "Images",
    "string",
    "Images referenced by each container in the template.",
);
const SELECTOR: Column = wide(
    "Selector",
    "string",
    "Label query over pods that this controller manages.",
);

/// The columns of Pod, in cell order.
pub fn pod_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Ready",
            "string",
            "The aggregate readiness state of this pod for accepting traffic.",
        ),
        col(
            "Status",
            "string",
            "The aggregate status of the containers in this pod.",
        ),
        col(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
        ),
        AGE,
        wide(
            "IP",
            "string",
            "The pod's IP address (the first of status.podIPs).",
        ),
        wide(
            "Node",
            "string",
            "The node the pod is bound to (spec.nodeName).",
        ),
        wide(
            "Nominated Node",
            "string",
            "The node preemption made room on for this pod (status.nominatedNodeName).",
        ),
        wide(
            "Readiness Gates",
            "string",
            "Readiness gates that are true, of those the pod declares.",
        ),
    ]
}

/// The columns of Node, in cell order.
pub fn node_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Status", "string", "The status of the node"),
        col("Roles", "string", "The roles of the node"),
        AGE,
        col("Version", "string", "Kubelet version reported by the node."),
        wide(
            "Internal-IP",
            "string",
            "The node's first InternalIP address.",
        ),
        wide(
            "External-IP",
            "string",
            "The node's first ExternalIP address.",
        ),
        wide("OS-Image", "string", "OS image reported by the node."),
        wide(
            "Kernel-Version",
            "string",
            "Kernel version reported by the node.",
        ),
        wide(
            "Container-Runtime",
            "string",
            "Container runtime and version reported by the node.",
        ),
    ]
}

/// The columns of Namespace, in cell order.
pub fn namespace_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Status",
            "string",
            "The lifecycle phase of the namespace (Active, Terminating).",
        ),
        AGE,
    ]
}

/// The columns of Service, in cell order.
pub fn service_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Type",
            "string",
            "How the service is exposed (ClusterIP, NodePort, LoadBalancer, ExternalName).",
        ),
        col(
            "Cluster-IP",
            "string",
            "The virtual IP of the service inside the cluster.",
        ),
        col(
            "External-IP",
            "string",
            "External addresses of the service.",
        ),
        col(
            "Port(s)",
            "string",
            "Ports the service exposes, with node ports.",
        ),
        AGE,
        wide(
            "Selector",
            "string",
            "Label selector of the pods traffic is routed to.",
        ),
    ]
}

/// The columns of Endpoints, in cell order.
pub fn endpoints_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Endpoints",
            "string",
            "Addresses and ports that implement the service.",
        ),
        AGE,
    ]
}

/// The columns of ConfigMap, in cell order.
pub fn config_map_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Data", "string", "Number of data and binaryData entries."),
        AGE,
    ]
}

/// The columns of Secret, in cell order.
pub fn secret_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Type", "string", "The type of the secret."),
        col("Data", "string", "Number of data entries."),
        AGE,
    ]
}

/// The columns of Event, in cell order.
pub fn event_columns() -> Vec<Column> {
    vec![
        col(
            "Last Seen",
            "string",
            "Time since the event was last observed.",
        ),
        col("Type", "string", "Type of the event (Normal, Warning)."),
        col(
            "Reason",
            "string",
            "Short, machine understandable reason for the event.",
        ),
        col("Object", "string", "The object the event is about."),
        wide(
            "Subobject",
            "string",
            "The part of the object the event is about (involvedObject.fieldPath).",
        ),
        wide(
            "Source",
            "string",
            "The component (and host) that reported the event.",
        ),
        col(
            "Message",
            "string",
            "A human-readable description of the event.",
        ),
        wide(
            "First Seen",
            "string",
            "Time since the event was first observed.",
        ),
        wide("Count", "string", "How many times the event occurred."),
        wide("Name", "string", "The event's metadata.name."),
    ]
}

/// The columns of ServiceAccount, in cell order.
pub fn service_account_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Secrets",
            "string",
            "Number of secrets referenced by the service account.",
        ),
        AGE,
    ]
}

/// The columns of Deployment, in cell order.
pub fn deployment_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Ready",
            "string",
            "Number of ready replicas out of the desired number.",
        ),
        col(
            "Up-to-date",
            "integer",
            "Number of replicas running the latest pod template.",
        ),
        col(
            "Available",
            "integer",
            "Number of replicas available to serve.",
        ),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ]
}

/// The columns of ReplicaSet, in cell order.
pub fn replica_set_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Desired", "integer", "Number of desired replicas."),
        col("Current", "integer", "Number of replicas observed."),
        col("Ready", "integer", "Number of ready replicas."),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ]
}

/// The columns of DaemonSet, in cell order.
pub fn daemon_set_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Desired",
            "integer",
            "Number of nodes that should run the daemon pod.",
        ),
        col(
            "Current",
            "integer",
            "Number of nodes running at least one daemon pod.",
        ),
        col(
            "Ready",
            "integer",
            "Number of nodes with a ready daemon pod.",
        ),
        col(
            "Up-to-date",
            "integer",
            "Number of nodes running the latest daemon pod template.",
        ),
        col(
            "Available",
            "integer",
            "Number of nodes with an available daemon pod.",
        ),
        col(
            "Node Selector",
            "string",
            "Node labels a node must have to run the daemon pod.",
        ),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ]
}

/// The columns of StatefulSet, in cell order (the Kubernetes printer's, with its wide ones).
pub fn stateful_set_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Ready", "string", "Number of the pod with ready state."),
        AGE,
        CONTAINERS,
        IMAGES,
    ]
}

/// The columns of Job, in cell order (the Kubernetes printer's, with its wide ones).
pub fn job_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Status", "string", "Status of the job."),
        col(
            "Completions",
            "string",
            "The number of pods which reached phase Succeeded, out of the desired completions.",
        ),
        col("Duration", "string", "Time required to complete the job."),
        AGE,
        CONTAINERS,
        IMAGES,
        wide(
            "Selector",
            "string",
            "A label query over pods that should match the pod count.",
        ),
    ]
}

/// The columns of Lease, in cell order.
pub fn lease_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Holder", "string", "The holder of the lease."),
        AGE,
    ]
}

/// The columns of EndpointSlice, in cell order.
pub fn endpoint_slice_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "AddressType",
            "string",
            "The type of address carried by this slice.",
        ),
        col(
            "Ports",
            "string",
            "Ports exposed by the endpoints of this slice.",
        ),
        col(
            "Endpoints",
            "string",
            "Addresses of the endpoints of this slice.",
        ),
        AGE,
    ]
}

/// The columns of a kind without a printer of its own (the name and creation time), in cell order.
pub fn generic_columns() -> Vec<Column> {
    vec![
        NAME,
        col(
            "Created At",
            "date",
            "Time the object was created (metadata.creationTimestamp).",
        ),
    ]
}

/// A Table of `objects` (of `kind`) for a list response, a single object or a watch
/// event: every column of [`Kind::columns`], one row per object. `metadata` is the list's metadata
/// (`resourceVersion`, `continue`, `remainingItemCount`; for one object, its resourceVersion);
/// `api_version` is `meta.k8s.io/v1` or `meta.k8s.io/v1beta1` (anything else: v1). Ages are
/// computed against the current time.
pub fn to_table(
    kind: &dyn Kind,
    objects: Vec<Value>,
    metadata: Value,
    include: IncludeObject,
    api_version: &str,
) -> Value {
    let version = TableVersion::from_api_version(api_version).unwrap_or(TableVersion::V1);
    to_table_at(kind, objects, metadata, include, version, Timestamp::now())
}

/// [`to_table`] with an explicit version and reference time for ages.
pub fn to_table_at(
    kind: &dyn Kind,
    objects: Vec<Value>,
    metadata: Value,
    include: IncludeObject,
    version: TableVersion,
    now: Timestamp,
) -> Value {
    let columns = kind.columns();
    let rows: Vec<Value> = objects
        .into_iter()
        .map(|object| {
            let mut cells = kind
                .cells(&object, now)
                .unwrap_or_else(|| fallback_cells(&columns, &object, now));
            // A row always has one cell per column, whatever went wrong above.
            cells.resize(columns.len(), Value::String(String::new()));
            let mut row = json!({ "cells": cells });
            if let Some(conditions) = kind.row_conditions(&object) {
                row["conditions"] = conditions;
            }
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = partial_object_metadata(&object, version);
                }
                IncludeObject::Object => row["object"] = object,
            }
            row
        })
        .collect();
    let metadata = if metadata.is_object() {
        metadata
    } else {
        json!({})
    };
    json!({
        "kind": "Table",
        "apiVersion": version.api_version(),
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// [`ListMeta`] as the `metadata` argument of [`to_table`].
pub fn list_metadata(list_meta: &ListMeta) -> Value {
    serde_json::to_value(list_meta).expect("ListMeta serializes")
}

/// The object's metadata as `PartialObjectMetadata` (managed fields left out: kubectl does not
/// print them from a Table and they dominate the size).
pub fn partial_object_metadata(object: &Value, version: TableVersion) -> Value {
    let mut metadata = object.get("metadata").cloned().unwrap_or_else(|| json!({}));
    if let Some(m) = metadata.as_object_mut() {
        m.remove("managedFields");
    }
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": version.api_version(),
        "metadata": metadata,
    })
}

/// The cells of a Pod's row; `None` when the object does not decode as one.
pub fn pod_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Pod>(object).map(|o| pod_cells(&o, now))
}

/// The cells of a Node's row; `None` when the object does not decode as one.
pub fn node_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Node>(object).map(|o| node_cells(&o, now))
}

/// The cells of a Namespace's row; `None` when the object does not decode as one.
pub fn namespace_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Namespace>(object).map(|o| namespace_cells(&o, now))
}

/// The cells of a Service's row; `None` when the object does not decode as one.
pub fn service_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Service>(object).map(|o| service_cells(&o, now))
}

/// The cells of a Endpoints's row; `None` when the object does not decode as one.
pub fn endpoints_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Endpoints>(object).map(|o| endpoints_cells(&o, now))
}

/// The cells of a ConfigMap's row; `None` when the object does not decode as one.
pub fn config_map_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<ConfigMap>(object).map(|o| config_map_cells(&o, now))
}

/// The cells of a Secret's row; `None` when the object does not decode as one.
pub fn secret_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Secret>(object).map(|o| secret_cells(&o, now))
}

/// The cells of a Event's row; `None` when the object does not decode as one.
pub fn event_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Event>(object).map(|o| event_cells(&o, now))
}

/// The cells of a ServiceAccount's row; `None` when the object does not decode as one.
pub fn service_account_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<ServiceAccount>(object).map(|o| service_account_cells(&o, now))
}

/// The cells of a Deployment's row; `None` when the object does not decode as one.
pub fn deployment_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Deployment>(object).map(|o| deployment_cells(&o, now))
}

/// The cells of a ReplicaSet's row; `None` when the object does not decode as one.
pub fn replica_set_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<ReplicaSet>(object).map(|o| replica_set_cells(&o, now))
}

/// The cells of a ReplicationController's row (a ReplicaSet's columns, its selector a plain
/// map); `None` when the object does not decode as one.
pub fn replication_controller_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<ReplicationController>(object).map(|rc| {
        let spec = rc.spec.clone().unwrap_or_default();
        let status = rc.status.clone().unwrap_or_default();
        replicated_cells(
            &rc.metadata,
            [
                spec.replicas.unwrap_or(1),
                status.replicas,
                status.ready_replicas.unwrap_or(0),
            ],
            spec.template.as_ref(),
            format_labels(spec.selector.as_ref()),
            now,
        )
    })
}

/// The cells of a DaemonSet's row; `None` when the object does not decode as one.
pub fn daemon_set_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<DaemonSet>(object).map(|o| daemon_set_cells(&o, now))
}

/// The cells of a StatefulSet's row; `None` when the object does not decode as one.
pub fn stateful_set_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<StatefulSet>(object).map(|o| stateful_set_cells(&o, now))
}

/// The cells of a Job's row; `None` when the object does not decode as one.
pub fn job_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Job>(object).map(|o| job_cells(&o, now))
}

/// The cells of a Lease's row; `None` when the object does not decode as one.
pub fn lease_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<Lease>(object).map(|o| lease_cells(&o, now))
}

/// The columns of Role and ClusterRole (Kubernetes prints their creation time, not an age).
pub fn role_columns() -> Vec<Column> {
    generic_columns()
}

/// The cells of a Role's or ClusterRole's row.
pub fn role_row(object: &Value) -> Option<Vec<Value>> {
    let meta: ObjectMeta = typed(&object["metadata"])?;
    let created = meta
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_else(|| "<unknown>".into());
    Some(vec![name(&meta), json!(created)])
}

/// The columns of RoleBinding and ClusterRoleBinding, in cell order.
pub fn binding_columns() -> Vec<Column> {
    vec![
        NAME,
        col("Role", "string", "Role of this binding."),
        AGE,
        wide("Users", "string", "Users in the binding."),
        wide("Groups", "string", "Groups in the binding."),
        wide(
            "ServiceAccounts",
            "string",
            "ServiceAccounts in the binding.",
        ),
    ]
}

/// The cells of a RoleBinding's or ClusterRoleBinding's row: the role as `Kind/name`, then its
/// subjects by kind (service accounts as `namespace/name`).
pub fn binding_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct Binding {
        #[serde(default)]
        metadata: ObjectMeta,
        #[serde(default)]
        role_ref: Option<k8s_openapi::api::rbac::v1::RoleRef>,
        #[serde(default)]
        subjects: Option<Vec<k8s_openapi::api::rbac::v1::Subject>>,
    }
    let b: Binding = typed(object)?;
    let role = b
        .role_ref
        .map(|r| format!("{}/{}", r.kind, r.name))
        .unwrap_or_default();
    let subjects = b.subjects.unwrap_or_default();
    let of = |kind: &str| -> Value {
        json!(
            subjects
                .iter()
                .filter(|s| s.kind == kind)
                .map(|s| match kind {
                    "ServiceAccount" =>
                        format!("{}/{}", s.namespace.as_deref().unwrap_or_default(), s.name),
                    _ => s.name.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Some(vec![
        name(&b.metadata),
        json!(role),
        age(&b.metadata, now),
        of("User"),
        of("Group"),
        of("ServiceAccount"),
    ])
}

/// The cells of a EndpointSlice's row; `None` when the object does not decode as one.
pub fn endpoint_slice_row(object: &Value, now: Timestamp) -> Option<Vec<Value>> {
    typed::<EndpointSlice>(object).map(|o| endpoint_slice_cells(&o, now))
}

pub(crate) fn typed<T: DeserializeOwned>(object: &Value) -> Option<T> {
    T::deserialize(object).ok()
}

/// The cells of a kind without a printer of its own ([`generic_columns`] or any others).
pub fn fallback_row(columns: &[Column], object: &Value, now: Timestamp) -> Vec<Value> {
    fallback_cells(columns, object, now)
}

/// Cells for a kind without a printer, or an object that does not decode as its kind: the
/// name, then `<unknown>` (or the creation time for the generic `Created At` column).
fn fallback_cells(columns: &[Column], object: &Value, now: Timestamp) -> Vec<Value> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let created = object["metadata"]["creationTimestamp"].as_str();
    columns
        .iter()
        .map(|c| match c.name {
            "Name" if c.format == "name" => json!(name),
            "Created At" => json!(created.unwrap_or("<unknown>")),
            "Age" => json!(
                created
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .map_or_else(
                        || "<unknown>".to_string(),
                        |t| human_duration(now.duration_since(t))
                    )
            ),
            _ => json!("<unknown>"),
        })
        .collect()
}

/// A pod's row conditions: a finished pod's row says `Completed`, as the Kubernetes printer does.
pub fn pod_row_conditions(object: &Value) -> Option<Value> {
    let (reason, message) = match object["status"]["phase"].as_str()? {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{
        "type": "Completed",
        "status": "True",
        "reason": reason,
        "message": message,
    }]))
}

/// Kubernetes' `duration.HumanDuration`: about two significant figures (`5s`, `3m2s`, `15m`,
/// `2h5m`, `10h`, `2d3h`, `45d`, `2y30d`, `9y`). Up to one second in the future is "now"
/// (`0s`), more is `<invalid>`.
pub fn human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// Time since `t` in [`human_duration`] form, `<unknown>` when unset.
pub(crate) fn since(t: Option<&Time>, now: Timestamp) -> String {
    match t {
        Some(t) => human_duration(now.duration_since(t.0)),
        None => "<unknown>".to_string(),
    }
}

/// The Age cell of a raw object (its `metadata.creationTimestamp`), `<unknown>` when unset.
pub(crate) fn age_of(object: &Value, now: Timestamp) -> Value {
    let meta: ObjectMeta = typed(&object["metadata"]).unwrap_or_default();
    age(&meta, now)
}

pub(crate) fn age(meta: &ObjectMeta, now: Timestamp) -> Value {
    json!(since(meta.creation_timestamp.as_ref(), now))
}

pub(crate) fn name(meta: &ObjectMeta) -> Value {
    json!(meta.name.clone().unwrap_or_default())
}

pub(crate) fn or_none(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "<none>".to_string(),
    }
}

/// `k=v,k2=v2` sorted by key, `<none>` when empty (`labels.FormatLabels`).
fn format_labels(labels: Option<&BTreeMap<String, String>>) -> String {
    let text = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if text.is_empty() {
        "<none>".to_string()
    } else {
        text
    }
}

/// A label selector in the string form of Kubernetes' selectors: requirements sorted by key,
/// `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`. Empty for "everything".
pub fn format_selector(selector: &LabelSelector) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        requirements.push((k.clone(), format!("{k}={v}")));
    }
    for expr in selector.match_expressions.iter().flatten() {
        let mut values = expr.values.clone().unwrap_or_default();
        values.sort();
        let key = &expr.key;
        let text = match expr.operator.as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<invalid>".to_string(),
        };
        requirements.push((key.clone(), text));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn container_cells(containers: &[Container]) -> (Value, Value) {
    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    let images: Vec<&str> = containers
        .iter()
        .map(|c| c.image.as_deref().unwrap_or(""))
        .collect();
    (json!(names.join(",")), json!(images.join(",")))
}

fn is_restartable_init_container(container: Option<&Container>) -> bool {
    container.and_then(|c| c.restart_policy.as_deref()) == Some("Always")
}

/// The pod row: READY, STATUS and RESTARTS as the Kubernetes pod printer computes them.
fn pod_cells(pod: &Pod, now: Timestamp) -> Vec<Value> {
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let conditions = status.conditions.clone().unwrap_or_default();
    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let init_statuses = status.init_container_statuses.clone().unwrap_or_default();
    let statuses = status.container_statuses.clone().unwrap_or_default();

    let mut restarts: i64 = 0;
    let mut restartable_init_restarts: i64 = 0;
    let mut total = spec.containers.len();
    let mut ready = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_init_restart: Option<Timestamp> = None;

    let phase = status.phase.clone().unwrap_or_default();
    let mut reason = match status.reason.as_deref() {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => phase.clone(),
    };
    if conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated"))
    {
        reason = "SchedulingGated".to_string();
    }

    let init_by_name =
        |name: &str| -> Option<&Container> { init_specs.iter().find(|c| c.name == name) };
    total += init_specs
        .iter()
        .filter(|c| is_restartable_init_container(Some(c)))
        .count();

    let later =
        |current: Option<Timestamp>, candidate: Option<Timestamp>| match (current, candidate) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    let last_terminated = |cs: &k8s_openapi::api::core::v1::ContainerStatus| {
        cs.last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.finished_at.as_ref())
            .map(|t| t.0)
    };

    let mut initializing = false;
    for (i, cs) in init_statuses.iter().enumerate() {
        restarts += i64::from(cs.restart_count);
        last_restart = later(last_restart, last_terminated(cs));
        let restartable = is_restartable_init_container(init_by_name(&cs.name));
        if restartable {
            restartable_init_restarts += i64::from(cs.restart_count);
            last_restartable_init_restart =
                later(last_restartable_init_restart, last_terminated(cs));
        }
        let state = cs.state.clone().unwrap_or_default();
        if state.terminated.as_ref().is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if restartable && cs.started == Some(true) {
            if cs.ready {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = &state.terminated {
            reason = match t.reason.as_deref() {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ => match t.signal {
                    Some(signal) if signal != 0 => format!("Init:Signal:{signal}"),
                    _ => format!("Init:ExitCode:{}", t.exit_code),
                },
            };
        } else if let Some(r) = state
            .waiting
            .as_ref()
            .and_then(|w| w.reason.as_deref())
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            reason = format!("Init:{r}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    let initialized = conditions
        .iter()
        .any(|c| c.type_ == "Initialized" && c.status == "True");
    if !initializing || initialized {
        restarts = restartable_init_restarts;
        last_restart = last_restartable_init_restart;
        let mut has_running = false;
        for cs in statuses.iter().rev() {
            restarts += i64::from(cs.restart_count);
            last_restart = later(last_restart, last_terminated(cs));
            let state = cs.state.clone().unwrap_or_default();
            let waiting_reason = state
                .waiting
                .as_ref()
                .and_then(|w| w.reason.as_deref())
                .filter(|r| !r.is_empty());
            if let Some(r) = waiting_reason {
                reason = r.to_string();
            } else if let Some(t) = &state.terminated {
                reason = match t.reason.as_deref() {
                    Some(r) if !r.is_empty() => r.to_string(),
                    _ => match t.signal {
                        Some(signal) if signal != 0 => format!("Signal:{signal}"),
                        _ => format!("ExitCode:{}", t.exit_code),
                    },
                };
            } else if cs.ready && state.running.is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_string();
        }
    }

    if pod.metadata.deletion_timestamp.is_some() {
        if status.reason.as_deref() == Some("NodeLost") {
            reason = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_string();
        }
    }

    let restarts_text = match last_restart {
        Some(at) if restarts != 0 => {
            format!(
                "{restarts} ({} ago)",
                human_duration(now.duration_since(at))
            )
        }
        _ => restarts.to_string(),
    };

    let ip = status
        .pod_ips
        .as_ref()
        .and_then(|ips| ips.first())
        .map(|ip| ip.ip.clone())
        .or_else(|| status.pod_ip.clone());
    let readiness_gates = match spec.readiness_gates.as_deref() {
        Some(gates) if !gates.is_empty() => {
            let true_count = gates
                .iter()
                .filter(|gate| {
                    conditions
                        .iter()
                        .find(|c| c.type_ == gate.condition_type)
                        .is_some_and(|c| c.status == "True")
                })
                .count();
            format!("{true_count}/{}", gates.len())
        }
        _ => "<none>".to_string(),
    };

    vec![
        name(&pod.metadata),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_text),
        age(&pod.metadata, now),
        json!(or_none(ip.as_deref())),
        json!(or_none(spec.node_name.as_deref())),
        json!(or_none(status.nominated_node_name.as_deref())),
        json!(readiness_gates),
    ]
}

/// Node roles from `node-role.kubernetes.io/<role>` labels and the `kubernetes.io/role` label.
fn node_roles(meta: &ObjectMeta) -> String {
    let mut roles = BTreeSet::new();
    for (k, v) in meta.labels.iter().flatten() {
        if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.insert(role.to_string());
            }
        } else if k == "kubernetes.io/role" && !v.is_empty() {
            roles.insert(v.clone());
        }
    }
    if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    }
}

fn node_cells(node: &Node, now: Timestamp) -> Vec<Value> {
    let status = node.status.clone().unwrap_or_default();
    let mut state: Vec<String> = Vec::new();
    if let Some(ready) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
    {
        state.push(if ready.status == "True" {
            "Ready".to_string()
        } else {
            "NotReady".to_string()
        });
    }
    if state.is_empty() {
        state.push("Unknown".to_string());
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        state.push("SchedulingDisabled".to_string());
    }
    let address = |kind: &str| {
        or_none(
            status
                .addresses
                .iter()
                .flatten()
                .find(|a| a.type_ == kind)
                .map(|a| a.address.as_str()),
        )
    };
    let info = status.node_info.clone().unwrap_or_default();
    let unknown = |s: &str| {
        if s.is_empty() {
            "<unknown>".to_string()
        } else {
            s.to_string()
        }
    };
    vec![
        name(&node.metadata),
        json!(state.join(",")),
        json!(node_roles(&node.metadata)),
        age(&node.metadata, now),
        json!(info.kubelet_version),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(unknown(&info.os_image)),
        json!(unknown(&info.kernel_version)),
        json!(unknown(&info.container_runtime_version)),
    ]
}

fn namespace_cells(ns: &Namespace, now: Timestamp) -> Vec<Value> {
    let phase = ns
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    vec![name(&ns.metadata), json!(phase), age(&ns.metadata, now)]
}

fn service_cells(svc: &Service, now: Timestamp) -> Vec<Value> {
    let spec = svc.spec.clone().unwrap_or_default();
    let type_ = spec
        .type_
        .clone()
        .unwrap_or_else(|| "ClusterIP".to_string());
    let cluster_ip = spec
        .cluster_ips
        .as_ref()
        .and_then(|ips| ips.first().cloned())
        .or_else(|| spec.cluster_ip.clone());
    let external_ips = spec.external_ips.clone().unwrap_or_default();
    let external = match type_.as_str() {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let mut addresses: Vec<String> = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|ingress| {
                    ingress
                        .ip
                        .clone()
                        .filter(|ip| !ip.is_empty())
                        .or_else(|| ingress.hostname.clone().filter(|h| !h.is_empty()))
                })
                .collect();
            addresses.extend(external_ips);
            if addresses.is_empty() {
                "<pending>".to_string()
            } else {
                addresses.join(",")
            }
        }
        "ExternalName" => spec.external_name.clone().unwrap_or_default(),
        _ => "<unknown>".to_string(),
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            match p.node_port {
                Some(node_port) if node_port > 0 => format!("{}:{node_port}/{protocol}", p.port),
                _ => format!("{}/{protocol}", p.port),
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    vec![
        name(&svc.metadata),
        json!(type_),
        json!(or_none(cluster_ip.as_deref())),
        json!(external),
        json!(or_none(Some(&ports))),
        age(&svc.metadata, now),
        json!(format_labels(spec.selector.as_ref())),
    ]
}

/// At most three entries, then ` + N more...` (the printers' list form).
fn list_with_more(list: Vec<String>, count: usize, empty: &str) -> String {
    const MAX: usize = 3;
    let shown = list.into_iter().take(MAX).collect::<Vec<_>>().join(",");
    if count > MAX {
        format!("{shown} + {} more...", count - MAX)
    } else if shown.is_empty() {
        empty.to_string()
    } else {
        shown
    }
}

fn endpoints_cells(ep: &Endpoints, now: Timestamp) -> Vec<Value> {
    let subsets = ep.subsets.clone().unwrap_or_default();
    let text = if subsets.is_empty() {
        "<none>".to_string()
    } else {
        let mut list = Vec::new();
        let mut count = 0;
        for subset in &subsets {
            let addresses = subset.addresses.clone().unwrap_or_default();
            match subset.ports.as_deref() {
                None | Some([]) => {
                    count += addresses.len();
                    list.extend(addresses.iter().map(|a| a.ip.clone()));
                }
                Some(ports) => {
                    for port in ports {
                        count += addresses.len();
                        list.extend(addresses.iter().map(|a| {
                            if a.ip.contains(':') {
                                format!("[{}]:{}", a.ip, port.port)
                            } else {
                                format!("{}:{}", a.ip, port.port)
                            }
                        }));
                    }
                }
            }
        }
        list_with_more(list, count, "")
    };
    vec![name(&ep.metadata), json!(text), age(&ep.metadata, now)]
}

fn config_map_cells(cm: &ConfigMap, now: Timestamp) -> Vec<Value> {
    let count = cm.data.as_ref().map_or(0, BTreeMap::len)
        + cm.binary_data.as_ref().map_or(0, BTreeMap::len);
    vec![name(&cm.metadata), json!(count), age(&cm.metadata, now)]
}

fn secret_cells(secret: &Secret, now: Timestamp) -> Vec<Value> {
    // stringData is merged into data on write; count the union in case it was not.
    let keys: BTreeSet<&String> = secret
        .data
        .iter()
        .flat_map(|d| d.keys())
        .chain(secret.string_data.iter().flat_map(|d| d.keys()))
        .collect();
    vec![
        name(&secret.metadata),
        json!(secret.type_.clone().unwrap_or_else(|| "Opaque".to_string())),
        json!(keys.len()),
        age(&secret.metadata, now),
    ]
}

fn event_cells(event: &Event, now: Timestamp) -> Vec<Value> {
    let micro = |t: Option<Timestamp>| match t {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".to_string(),
    };
    let first = match &event.first_timestamp {
        Some(t) => since(Some(t), now),
        None => micro(event.event_time.as_ref().map(|t| t.0)),
    };
    let mut last = match &event.last_timestamp {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = event.count.unwrap_or(0);
    if let Some(series) = &event.series {
        last = micro(series.last_observed_time.as_ref().map(|t| t.0));
        count = series.count.unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &event.involved_object;
    let kind = involved.kind.clone().unwrap_or_default().to_lowercase();
    let target = match involved.name.as_deref() {
        Some(n) if !n.is_empty() => format!("{kind}/{n}"),
        _ => kind,
    };
    let first_non_empty = |a: Option<&String>, b: Option<&String>| {
        a.filter(|s| !s.is_empty())
            .or(b.filter(|s| !s.is_empty()))
            .cloned()
            .unwrap_or_default()
    };
    let source = event.source.clone().unwrap_or_default();
    let component = first_non_empty(
        source.component.as_ref(),
        event.reporting_component.as_ref(),
    );
    let instance = first_non_empty(source.host.as_ref(), event.reporting_instance.as_ref());
    let source_text = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(event.type_.clone().unwrap_or_default()),
        json!(event.reason.clone().unwrap_or_default()),
        json!(target),
        json!(involved.field_path.clone().unwrap_or_default()),
        json!(source_text),
        json!(event.message.clone().unwrap_or_default().trim()),
        json!(first),
        json!(i64::from(count)),
        name(&event.metadata),
    ]
}

fn service_account_cells(sa: &ServiceAccount, now: Timestamp) -> Vec<Value> {
    vec![
        name(&sa.metadata),
        json!(sa.secrets.as_ref().map_or(0, Vec::len)),
        age(&sa.metadata, now),
    ]
}

fn deployment_cells(d: &Deployment, now: Timestamp) -> Vec<Value> {
    let spec = d.spec.clone().unwrap_or_default();
    let status = d.status.clone().unwrap_or_default();
    let desired = spec.replicas.unwrap_or(1);
    let containers = spec
        .template
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    let (names, images) = container_cells(&containers);
    vec![
        name(&d.metadata),
        json!(format!("{}/{desired}", status.ready_replicas.unwrap_or(0))),
        json!(i64::from(status.updated_replicas.unwrap_or(0))),
        json!(i64::from(status.available_replicas.unwrap_or(0))),
        age(&d.metadata, now),
        names,
        images,
        json!(format_selector(&spec.selector)),
    ]
}

fn replica_set_cells(rs: &ReplicaSet, now: Timestamp) -> Vec<Value> {
    let spec = rs.spec.clone().unwrap_or_default();
    let status = rs.status.clone().unwrap_or_default();
    replicated_cells(
        &rs.metadata,
        [
            spec.replicas.unwrap_or(1),
            status.replicas,
            status.ready_replicas.unwrap_or(0),
        ],
        spec.template.as_ref(),
        format_selector(&spec.selector),
        now,
    )
}

/// A ReplicaSet's or ReplicationController's row: name, desired/current/ready counts, age, the
/// template's containers and images, the selector as text.
fn replicated_cells(
    meta: &ObjectMeta,
    [desired, current, ready]: [i32; 3],
    template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
    selector: String,
    now: Timestamp,
) -> Vec<Value> {
    let containers = template
        .and_then(|t| t.spec.as_ref())
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    let (names, images) = container_cells(&containers);
    vec![
        name(meta),
        json!(i64::from(desired)),
        json!(i64::from(current)),
        json!(i64::from(ready)),
        age(meta, now),
        names,
        images,
        json!(selector),
    ]
}

fn daemon_set_cells(ds: &DaemonSet, now: Timestamp) -> Vec<Value> {
    let spec = ds.spec.clone().unwrap_or_default();
    let status = ds.status.clone().unwrap_or_default();
    let pod_spec = spec.template.spec.clone().unwrap_or_default();
    let (names, images) = container_cells(&pod_spec.containers);
    vec![
        name(&ds.metadata),
        json!(i64::from(status.desired_number_scheduled)),
        json!(i64::from(status.current_number_scheduled)),
        json!(i64::from(status.number_ready)),
        json!(i64::from(status.updated_number_scheduled.unwrap_or(0))),
        json!(i64::from(status.number_available.unwrap_or(0))),
        json!(format_labels(pod_spec.node_selector.as_ref())),
        age(&ds.metadata, now),
        names,
        images,
        json!(format_selector(&spec.selector)),
    ]
}

fn stateful_set_cells(set: &StatefulSet, now: Timestamp) -> Vec<Value> {
    let spec = set.spec.clone().unwrap_or_default();
    let status = set.status.clone().unwrap_or_default();
    let pod_spec = spec.template.spec.clone().unwrap_or_default();
    let (names, images) = container_cells(&pod_spec.containers);
    vec![
        name(&set.metadata),
        json!(format!(
            "{}/{}",
            status.ready_replicas.unwrap_or(0),
            spec.replicas.unwrap_or(1)
        )),
        age(&set.metadata, now),
        names,
        images,
    ]
}

/// Whether a Job has a condition of `type_` with status `True`.
fn job_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The Job row: STATUS from the conditions in the printer's order of precedence, COMPLETIONS
/// as `succeeded/completions` (`succeeded/1 of parallelism` for a work-queue Job), DURATION from
/// start to completion (or to now while it runs).
fn job_cells(job: &Job, now: Timestamp) -> Vec<Value> {
    let spec = job.spec.clone().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let succeeded = status.succeeded.unwrap_or(0);
    let completions = match spec.completions {
        Some(c) => format!("{succeeded}/{c}"),
        None => match spec.parallelism.unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let duration = match (&status.start_time, &status.completion_time) {
        (None, _) => String::new(),
        (Some(start), None) => since(Some(start), now),
        (Some(start), Some(end)) => human_duration(end.0.duration_since(start.0)),
    };
    let state = if job_condition(job, "Complete") {
        "Complete"
    } else if job_condition(job, "Failed") {
        "Failed"
    } else if job.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else if job_condition(job, "Suspended") {
        "Suspended"
    } else if job_condition(job, "FailureTarget") {
        "FailureTarget"
    } else if job_condition(job, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let containers = spec
        .template
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    let (names, images) = container_cells(&containers);
    vec![
        name(&job.metadata),
        json!(state),
        json!(completions),
        json!(duration),
        age(&job.metadata, now),
        names,
        images,
        json!(or_none(
            spec.selector.as_ref().map(format_selector).as_deref()
        )),
    ]
}

fn lease_cells(lease: &Lease, now: Timestamp) -> Vec<Value> {
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    vec![
        name(&lease.metadata),
        json!(holder),
        age(&lease.metadata, now),
    ]
}

fn endpoint_slice_cells(slice: &EndpointSlice, now: Timestamp) -> Vec<Value> {
    let ports: Vec<String> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| match (p.port, &p.name) {
            (Some(port), _) => port.to_string(),
            (None, Some(name)) => name.clone(),
            (None, None) => "*".to_string(),
        })
        .collect();
    let port_count = ports.len();
    let addresses: Vec<String> = slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    let address_count = addresses.len();
    vec![
        name(&slice.metadata),
        json!(slice.address_type),
        json!(list_with_more(ports, port_count, "<unset>")),
        json!(list_with_more(addresses, address_count, "<unset>")),
        age(&slice.metadata, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    fn now() -> Timestamp {
        "2026-01-10T12:00:00Z".parse().unwrap()
    }

    /// `now` minus `secs` seconds, as an RFC 3339 string.
    fn ago(secs: i64) -> String {
        (now() - SignedDuration::from_secs(secs)).to_string()
    }

    fn info(group: &str, kind: &str) -> Arc<dyn Kind> {
        crate::builtin::by_kind(group, kind)
    }

    fn row(group: &str, kind: &str, object: Value) -> Vec<Value> {
        let table = to_table_at(
            &*info(group, kind),
            vec![object],
            json!({}),
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        table["rows"][0]["cells"].as_array().unwrap().clone()
    }

    fn cell_names(group: &str, kind: &str) -> Vec<&'static str> {
        info(group, kind).columns().iter().map(|c| c.name).collect()
    }

    #[test]
    fn accept_header_detection() {
        assert_eq!(table_version(Some(KUBECTL_ACCEPT)), Some(TableVersion::V1));
        assert_eq!(
            table_version(Some(
                "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            )),
            Some(TableVersion::V1Beta1)
        );
        assert_eq!(table_version(Some("application/json")), None);
        assert_eq!(table_version(Some("application/json, */*")), None);
        assert_eq!(table_version(None), None);
        // Protobuf first (describe's Accept): not a Table.
        assert_eq!(
            table_version(Some("application/vnd.kubernetes.protobuf,application/json")),
            None
        );
        // A Table version we do not produce falls through to the next range.
        assert_eq!(
            table_version(Some(
                "application/json;as=Table;v=v2;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io"
            )),
            Some(TableVersion::V1)
        );
    }

    #[test]
    fn include_object_parsing() {
        assert_eq!(
            IncludeObject::from_query(None).unwrap(),
            IncludeObject::Metadata
        );
        assert_eq!(
            IncludeObject::from_query(Some("")).unwrap(),
            IncludeObject::Metadata
        );
        assert_eq!(
            IncludeObject::from_query(Some("None")).unwrap(),
            IncludeObject::None
        );
        assert_eq!(
            IncludeObject::from_query(Some("Object")).unwrap(),
            IncludeObject::Object
        );
        assert!(IncludeObject::from_query(Some("object")).is_err());
    }

    #[test]
    fn human_durations_match_kubernetes() {
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (182, "3m2s"),
            (599, "9m59s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (8 * 3600, "8h"),
            (47 * 3600 + 59 * 60, "47h"),
            (48 * 3600, "2d"),
            (51 * 3600, "2d3h"),
            (8 * 86400, "8d"),
            (730 * 86400 - 1, "729d"),
            (730 * 86400, "2y"),
            (760 * 86400, "2y30d"),
            (8 * 365 * 86400, "8y"),
        ] {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
        // Sub-second parts are dropped, as Go's int(d.Seconds()) does.
        assert_eq!(human_duration(SignedDuration::from_millis(-1500)), "0s");
        assert_eq!(human_duration(SignedDuration::from_millis(59_999)), "59s");
    }

    #[test]
    fn job_rows_as_kubectl_prints_them() {
        let job = |spec: Value, status: Value| {
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "pi", "namespace": "default", "creationTimestamp": ago(600)},
                "spec": spec, "status": status,
            })
        };
        let template = json!({"spec": {"containers": [
            {"name": "pi", "image": "perl"}, {"name": "side", "image": "busybox"}]}});
        let cols: Vec<&str> = job_columns().iter().map(|c| c.name).collect();
        assert_eq!(
            cols,
            [
                "Name",
                "Status",
                "Completions",
                "Duration",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let done = job(
            json!({"completions": 5, "parallelism": 2, "template": template,
                   "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}}}),
            json!({"succeeded": 5, "startTime": ago(300), "completionTime": ago(200),
                   "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                  {"type": "Complete", "status": "True"}]}),
        );
        assert_eq!(
            row("batch", "Job", done),
            vec![
                json!("pi"),
                json!("Complete"),
                json!("5/5"),
                json!("100s"),
                json!("10m"),
                json!("pi,side"),
                json!("perl,busybox"),
                json!("batch.kubernetes.io/controller-uid=u"),
            ]
        );
        let running = job(
            json!({"parallelism": 3, "template": template}),
            json!({"succeeded": 1, "startTime": ago(90)}),
        );
        let cells = row("batch", "Job", running);
        assert_eq!(
            cells[1..4],
            [json!("Running"), json!("1/1 of 3"), json!("90s")]
        );
        assert_eq!(cells[7], json!("<none>"));
        let failed = job(
            json!({"completions": 1, "template": template}),
            json!({"failed": 7, "conditions": [
                {"type": "FailureTarget", "status": "True"},
                {"type": "Failed", "status": "True"}]}),
        );
        assert_eq!(
            row("batch", "Job", failed)[1..4],
            [json!("Failed"), json!("0/1"), json!("")]
        );
        let suspended = job(
            json!({"completions": 2, "template": template}),
            json!({"conditions": [{"type": "Suspended", "status": "True"},
                                  {"type": "Complete", "status": "False"}]}),
        );
        assert_eq!(row("batch", "Job", suspended)[1], json!("Suspended"));
    }

    #[test]
    fn every_served_kind_has_matching_columns_and_cells() {
        for kind in crate::builtin::all().iter() {
            let info = kind.info();
            let cols = kind.columns();
            let object = json!({
                "apiVersion": info.api_version(),
                "kind": info.kind,
                "metadata": { "name": "x", "namespace": "default", "creationTimestamp": ago(30) },
            });
            let cells = kind.cells(&object, now()).expect("cells");
            assert_eq!(cells.len(), cols.len(), "{}", info.kind);
            let name_col = cols.iter().position(|c| c.format == "name");
            if let Some(i) = name_col {
                assert_eq!(cells[i], "x", "{}", info.kind);
            }
            if let Some(i) = cols.iter().position(|c| c.name == "Age") {
                assert_eq!(cells[i], "30s", "{}", info.kind);
            }
        }
    }

    #[test]
    fn pod_table_matches_the_reference_shape() {
        let reference: Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/kubectl-wire/pod-table.json"
        )))
        .unwrap();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "nginx", "namespace": "default", "uid": "4432fc6a-9a02-4d12-81fc-114504fb8f6b",
                "resourceVersion": "1004", "creationTimestamp": ago(600), "labels": {"app": "nginx"},
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": { "nodeName": "node-1", "containers": [{"name": "nginx", "image": "nginx"}] },
            "status": {
                "phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "nginx", "ready": true, "restartCount": 0, "image": "nginx", "imageID": "",
                    "state": {"running": {"startedAt": ago(590)}},
                }],
            },
        });
        let list_meta = ListMeta {
            resource_version: Some("1004".into()),
            ..Default::default()
        };
        let table = to_table_at(
            &*info("", "Pod"),
            vec![pod],
            list_metadata(&list_meta),
            IncludeObject::Metadata,
            TableVersion::V1,
            now(),
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(table["metadata"], reference["metadata"]);
        let names = |t: &Value| -> Vec<(String, i64)> {
            t["columnDefinitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["priority"].as_i64().unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(names(&table), names(&reference));
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        assert_eq!(
            table["rows"][0]["cells"],
            json!([
                "nginx", "1/1", "Running", "0", "10m", "10.0.0.5", "node-1", "<none>", "<none>"
            ])
        );
        let object = &table["rows"][0]["object"];
        assert_eq!(object["kind"], "PartialObjectMetadata");
        assert_eq!(object["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(object["metadata"]["namespace"], "default");
        assert_eq!(object["metadata"]["labels"]["app"], "nginx");
        assert!(object["metadata"].get("managedFields").is_none());
        assert!(object.get("spec").is_none());
    }

    #[test]
    fn include_object_and_list_metadata() {
        let pod = json!({"metadata": {"name": "a", "creationTimestamp": ago(1)}, "spec": {"containers": []}});
        let list_meta = ListMeta {
            resource_version: Some("77".into()),
            continue_: Some("tok".into()),
            remaining_item_count: Some(3),
            ..Default::default()
        };
        let full = to_table_at(
            &*info("", "Pod"),
            vec![pod.clone()],
            list_metadata(&list_meta),
            IncludeObject::Object,
            TableVersion::V1Beta1,
            now(),
        );
        assert_eq!(full["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(full["rows"][0]["object"], pod);
        assert_eq!(full["metadata"]["continue"], "tok");
        assert_eq!(full["metadata"]["remainingItemCount"], 3);
        assert_eq!(full["metadata"]["resourceVersion"], "77");
        let none = to_table(
            &*info("", "Pod"),
            vec![pod],
            list_metadata(&list_meta),
            IncludeObject::None,
            "meta.k8s.io/v1",
        );
        assert!(none["rows"][0].get("object").is_none());
        let empty = to_table(
            &*info("", "Pod"),
            vec![],
            json!({"resourceVersion": "5"}),
            IncludeObject::Metadata,
            "meta.k8s.io/v1beta1",
        );
        assert_eq!(empty["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(empty["metadata"]["resourceVersion"], "5");
        assert_eq!(empty["rows"], json!([]));
        assert_eq!(empty["columnDefinitions"].as_array().unwrap().len(), 9);
    }

    fn pod_with(status: Value, spec: Value, meta_extra: Value) -> Value {
        let mut metadata = json!({"name": "p", "creationTimestamp": ago(3600)});
        for (k, v) in meta_extra.as_object().unwrap() {
            metadata[k] = v.clone();
        }
        json!({"metadata": metadata, "spec": spec, "status": status})
    }

    fn pod_status_cells(status: Value, spec: Value, meta_extra: Value) -> (String, String, String) {
        let cells = row("", "Pod", pod_with(status, spec, meta_extra));
        (
            cells[1].as_str().unwrap().to_string(),
            cells[2].as_str().unwrap().to_string(),
            cells[3].as_str().unwrap().to_string(),
        )
    }

    #[test]
    fn pod_status_column_follows_the_kubernetes_printer() {
        let one = json!({"containers": [{"name": "c"}]});
        // Pending with no statuses: the phase.
        assert_eq!(
            pod_status_cells(json!({"phase": "Pending"}), one.clone(), json!({})),
            ("0/1".into(), "Pending".into(), "0".into())
        );
        // A waiting container's reason wins over the phase.
        assert_eq!(
            pod_status_cells(
                json!({"phase": "Pending", "containerStatuses": [
                    {"name": "c", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
                ]}),
                one.clone(),
                json!({})
            )
            .1,
            "ContainerCreating"
        );
        // Crash loop with restarts and the time of the last one.
        assert_eq!(
            pod_status_cells(
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "c", "ready": false, "restartCount": 4,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(125)}}}
                ]}),
                one.clone(),
                json!({})
            ),
            (
                "0/1".into(),
                "CrashLoopBackOff".into(),
                "4 (2m5s ago)".into()
            )
        );
        // Terminated without a reason: the exit code or signal.
        assert_eq!(
            pod_status_cells(
                json!({"phase": "Failed", "containerStatuses": [
                    {"name": "c", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}
                ]}),
                one.clone(),
                json!({})
            )
            .1,
            "ExitCode:3"
        );
        assert_eq!(
            pod_status_cells(
                json!({"phase": "Failed", "containerStatuses": [
                    {"name": "c", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}
                ]}),
                one.clone(),
                json!({})
            )
            .1,
            "Signal:9"
        );
        // Completed with a container still running: Running when the pod is Ready, else NotReady.
        let two = json!({"containers": [{"name": "a"}, {"name": "b"}]});
        let mixed = |ready_condition: &str| {
            json!({"phase": "Running",
            "conditions": [{"type": "Ready", "status": ready_condition}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ]})
        };
        assert_eq!(
            pod_status_cells(mixed("True"), two.clone(), json!({})),
            ("1/2".into(), "Running".into(), "0".into())
        );
        assert_eq!(
            pod_status_cells(mixed("False"), two, json!({})).1,
            "NotReady"
        );
        // Deletion: Terminating unless already finished; NodeLost pods are Unknown.
        let deleting = json!({"deletionTimestamp": ago(5)});
        assert_eq!(
            pod_status_cells(json!({"phase": "Running"}), one.clone(), deleting.clone()).1,
            "Terminating"
        );
        assert_eq!(
            pod_status_cells(json!({"phase": "Succeeded"}), one.clone(), deleting.clone()).1,
            "Succeeded"
        );
        assert_eq!(
            pod_status_cells(
                json!({"phase": "Running", "reason": "NodeLost"}),
                one.clone(),
                deleting
            )
            .1,
            "Unknown"
        );
        // The pod's own reason (Evicted) replaces the phase.
        assert_eq!(
            pod_status_cells(
                json!({"phase": "Failed", "reason": "Evicted"}),
                one.clone(),
                json!({})
            )
            .1,
            "Evicted"
        );
        // Scheduling gates.
        assert_eq!(
            pod_status_cells(
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
                one,
                json!({})
            )
            .1,
            "SchedulingGated"
        );
    }

    #[test]
    fn pod_init_container_states() {
        let spec = json!({
            "initContainers": [{"name": "i1"}, {"name": "i2"}],
            "containers": [{"name": "c"}],
        });
        let init = |states: Value| json!({"phase": "Pending", "initContainerStatuses": states});
        // First init container running: Init:0/2.
        assert_eq!(
            pod_status_cells(
                init(json!([
                    {"name": "i1", "ready": false, "restartCount": 0, "state": {"running": {}}},
                    {"name": "i2", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}
                ])),
                spec.clone(),
                json!({})
            )
            .1,
            "Init:0/2"
        );
        // First done, second crashing.
        assert_eq!(
            pod_status_cells(
                init(json!([
                    {"name": "i1", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
                    {"name": "i2", "ready": false, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
                ])),
                spec.clone(),
                json!({})
            ),
            ("0/1".into(), "Init:CrashLoopBackOff".into(), "2".into())
        );
        // Failed init container without a reason.
        assert_eq!(
            pod_status_cells(
                init(json!([
                    {"name": "i1", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
                ])),
                spec,
                json!({})
            )
            .1,
            "Init:ExitCode:2"
        );
        // A sidecar (restartable init container) counts towards READY once started.
        let sidecar_spec = json!({
            "initContainers": [{"name": "side", "restartPolicy": "Always"}],
            "containers": [{"name": "c"}],
        });
        let status = json!({
            "phase": "Running",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "side", "ready": true, "started": true, "restartCount": 1, "state": {"running": {}}}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "state": {"running": {}}}],
        });
        assert_eq!(
            pod_status_cells(status, sidecar_spec, json!({})),
            ("2/2".into(), "Running".into(), "1".into())
        );
    }

    #[test]
    fn pod_wide_columns() {
        let cells = row(
            "",
            "Pod",
            json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c"}], "readinessGates": [{"conditionType": "a"}, {"conditionType": "b"}]},
                "status": {"nominatedNodeName": "n2", "conditions": [{"type": "a", "status": "True"}, {"type": "b", "status": "False"}]},
            }),
        );
        assert_eq!(cells[4], "<unknown>", "no creation time");
        assert_eq!(cells[5], "<none>");
        assert_eq!(cells[6], "<none>");
        assert_eq!(cells[7], "n2");
        assert_eq!(cells[8], "1/2");
    }

    #[test]
    fn node_rows() {
        assert_eq!(
            cell_names("", "Node"),
            [
                "Name",
                "Status",
                "Roles",
                "Age",
                "Version",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime"
            ]
        );
        let node = |ready: Option<&str>, unschedulable: bool| {
            let conditions: Vec<Value> = ready
                .map(|s| json!({"type": "Ready", "status": s}))
                .into_iter()
                .collect();
            json!({
                "metadata": {"name": "n1", "creationTimestamp": ago(3 * 86400 + 3600),
                    "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": "true", "other": "x"}},
                "spec": {"unschedulable": unschedulable},
                "status": {
                    "conditions": conditions,
                    "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.2"}],
                    "nodeInfo": {"kubeletVersion": "v1.33.0+skiff.0.1.0", "osImage": "Debian", "kernelVersion": "6.1",
                        "containerRuntimeVersion": "skiff://0.1.0", "machineID": "", "systemUUID": "", "bootID": "",
                        "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                },
            })
        };
        let cells = row("", "Node", node(Some("True"), false));
        assert_eq!(
            cells,
            json!([
                "n1",
                "Ready",
                "control-plane,worker",
                "3d1h",
                "v1.33.0+skiff.0.1.0",
                "10.0.0.2",
                "<none>",
                "Debian",
                "6.1",
                "skiff://0.1.0"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        assert_eq!(row("", "Node", node(Some("False"), false))[1], "NotReady");
        assert_eq!(
            row("", "Node", node(Some("Unknown"), true))[1],
            "NotReady,SchedulingDisabled"
        );
        assert_eq!(
            row("", "Node", node(None, true))[1],
            "Unknown,SchedulingDisabled"
        );
    }

    #[test]
    fn service_rows() {
        let svc = |spec: Value, status: Value| json!({"metadata": {"name": "s", "creationTimestamp": ago(65)}, "spec": spec, "status": status});
        let cells = row(
            "",
            "Service",
            svc(
                json!({"type": "NodePort", "clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.10"],
                    "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                    "selector": {"app": "web", "tier": "fe"}}),
                json!({}),
            ),
        );
        assert_eq!(
            cells,
            json!([
                "s",
                "NodePort",
                "10.43.0.10",
                "<none>",
                "80:30080/TCP,53/UDP",
                "65s",
                "app=web,tier=fe"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        let lb = row(
            "",
            "Service",
            svc(
                json!({"type": "LoadBalancer", "clusterIP": "10.43.0.11", "ports": [{"port": 443}]}),
                json!({}),
            ),
        );
        assert_eq!(lb[3], "<pending>");
        assert_eq!(lb[4], "443/TCP");
        assert_eq!(lb[6], "<none>");
        let lb_ready = row(
            "",
            "Service",
            svc(
                json!({"type": "LoadBalancer", "externalIPs": ["1.2.3.4"]}),
                json!({"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example"}]}}),
            ),
        );
        assert_eq!(lb_ready[3], "5.6.7.8,lb.example,1.2.3.4");
        let headless = row("", "Service", svc(json!({"clusterIP": "None"}), json!({})));
        assert_eq!(headless[1], "ClusterIP");
        assert_eq!(headless[2], "None");
        assert_eq!(headless[4], "<none>");
        let external = row(
            "",
            "Service",
            svc(
                json!({"type": "ExternalName", "externalName": "db.example"}),
                json!({}),
            ),
        );
        assert_eq!(external[3], "db.example");
    }

    #[test]
    fn endpoints_and_slices() {
        let ep = |subsets: Value| json!({"metadata": {"name": "e"}, "subsets": subsets});
        assert_eq!(row("", "Endpoints", ep(json!([])))[1], "<none>");
        assert_eq!(
            row(
                "",
                "Endpoints",
                ep(
                    json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}]}])
                )
            )[1],
            "10.0.0.1:80,10.0.0.2:80"
        );
        assert_eq!(
            row(
                "",
                "Endpoints",
                ep(
                    json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}], "ports": [{"port": 80}, {"port": 443}]}])
                )
            )[1],
            "10.0.0.1:80,10.0.0.2:80,[fd00::3]:80 + 3 more..."
        );
        assert_eq!(
            row(
                "",
                "Endpoints",
                ep(json!([{"addresses": [{"ip": "10.0.0.9"}]}]))
            )[1],
            "10.0.0.9"
        );

        let slice = json!({
            "metadata": {"name": "s-abc", "creationTimestamp": ago(10)},
            "addressType": "IPv4",
            "ports": [{"port": 80}, {"name": "dns"}, {}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]}],
        });
        assert_eq!(
            row("discovery.k8s.io", "EndpointSlice", slice),
            json!([
                "s-abc",
                "IPv4",
                "80,dns,*",
                "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...",
                "10s"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        let empty = json!({"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": []});
        let cells = row("discovery.k8s.io", "EndpointSlice", empty);
        assert_eq!(cells[2], "<unset>");
        assert_eq!(cells[3], "<unset>");
    }

    #[test]
    fn config_secret_account_namespace_lease_rows() {
        let cm = json!({"metadata": {"name": "cm", "creationTimestamp": ago(5)}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        assert_eq!(
            row("", "ConfigMap", cm),
            vec![json!("cm"), json!(3), json!("5s")]
        );
        let secret = json!({"metadata": {"name": "s", "creationTimestamp": ago(5)}, "type": "kubernetes.io/tls", "data": {"tls.crt": "AA==", "tls.key": "AA=="}});
        assert_eq!(
            row("", "Secret", secret),
            vec![
                json!("s"),
                json!("kubernetes.io/tls"),
                json!(2),
                json!("5s")
            ]
        );
        let opaque = json!({"metadata": {"name": "o"}, "stringData": {"x": "y"}});
        assert_eq!(row("", "Secret", opaque)[1..3], [json!("Opaque"), json!(1)]);
        let sa = json!({"metadata": {"name": "default", "creationTimestamp": ago(5)}, "secrets": [{"name": "t"}]});
        assert_eq!(
            row("", "ServiceAccount", sa),
            vec![json!("default"), json!(1), json!("5s")]
        );
        let ns = json!({"metadata": {"name": "kube-system", "creationTimestamp": ago(5)}, "status": {"phase": "Active"}});
        assert_eq!(
            row("", "Namespace", ns),
            vec![json!("kube-system"), json!("Active"), json!("5s")]
        );
        let lease = json!({"metadata": {"name": "kube-scheduler", "creationTimestamp": ago(5)}, "spec": {"holderIdentity": "skiff_1"}});
        assert_eq!(
            row("coordination.k8s.io", "Lease", lease),
            vec![json!("kube-scheduler"), json!("skiff_1"), json!("5s")]
        );
        let free = json!({"metadata": {"name": "l"}, "spec": {}});
        assert_eq!(row("coordination.k8s.io", "Lease", free)[1], "");
    }

    #[test]
    fn event_rows() {
        assert_eq!(
            cell_names("", "Event"),
            [
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name"
            ]
        );
        let event = json!({
            "metadata": {"name": "web.17a", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{web}"},
            "reason": "Pulled", "message": "  Container image pulled \n", "type": "Normal",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": ago(300), "lastTimestamp": ago(60), "count": 3,
        });
        assert_eq!(
            row("", "Event", event),
            json!([
                "60s",
                "Normal",
                "Pulled",
                "pod/web",
                "spec.containers{web}",
                "kubelet, n1",
                "Container image pulled",
                "5m",
                3,
                "web.17a"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        // New-style event: eventTime and series, reporting controller as the source.
        let series = json!({
            "metadata": {"name": "e2"},
            "involvedObject": {"kind": "Node"},
            "reason": "Starting", "type": "Normal",
            "eventTime": "2026-01-10T11:50:00.000000Z",
            "series": {"count": 7, "lastObservedTime": "2026-01-10T11:59:00.000000Z"},
            "reportingComponent": "skiff-proxy", "reportingInstance": "",
        });
        let cells = row("", "Event", series);
        assert_eq!(cells[0], "60s");
        assert_eq!(cells[3], "node");
        assert_eq!(cells[5], "skiff-proxy");
        assert_eq!(cells[7], "10m");
        assert_eq!(cells[8], 7);
        // A singleton without count counts once.
        let single =
            json!({"metadata": {"name": "e3"}, "involvedObject": {}, "firstTimestamp": ago(2)});
        let cells = row("", "Event", single);
        assert_eq!(cells[0], "2s");
        assert_eq!(cells[8], 1);
    }

    #[test]
    fn workload_rows() {
        let template = json!({"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}, {"name": "log", "image": "busybox"}],
            "nodeSelector": {"kubernetes.io/os": "linux"}}});
        let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["fe", "be"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ]});
        let deploy = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(90)},
            "spec": {"replicas": 3, "selector": selector, "template": template},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
        });
        assert_eq!(
            row("apps", "Deployment", deploy),
            json!([
                "web",
                "2/3",
                3,
                2,
                "90s",
                "web,log",
                "nginx:1.27,busybox",
                "app=web,!canary,tier in (be,fe)"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        let fresh = json!({"metadata": {"name": "d"}, "spec": {"selector": {}, "template": {}}});
        let cells = row("apps", "Deployment", fresh);
        assert_eq!(cells[1], "0/1");
        assert_eq!(cells[7], "");

        let rs = json!({
            "metadata": {"name": "web-5d9", "creationTimestamp": ago(90)},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d9"}}, "template": template},
            "status": {"replicas": 3, "readyReplicas": 1},
        });
        assert_eq!(
            row("apps", "ReplicaSet", rs),
            json!([
                "web-5d9",
                3,
                3,
                1,
                "90s",
                "web,log",
                "nginx:1.27,busybox",
                "app=web,pod-template-hash=5d9"
            ])
            .as_array()
            .unwrap()
            .clone()
        );

        let ds = json!({
            "metadata": {"name": "proxy", "creationTimestamp": ago(90)},
            "spec": {"selector": {"matchLabels": {"k8s-app": "proxy"}}, "template": template},
            "status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberReady": 1,
                "updatedNumberScheduled": 2, "numberAvailable": 1, "numberMisscheduled": 0},
        });
        assert_eq!(
            row("apps", "DaemonSet", ds),
            json!([
                "proxy",
                2,
                2,
                1,
                2,
                1,
                "kubernetes.io/os=linux",
                "90s",
                "web,log",
                "nginx:1.27,busybox",
                "k8s-app=proxy"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        assert_eq!(
            cell_names("apps", "DaemonSet"),
            [
                "Name",
                "Desired",
                "Current",
                "Ready",
                "Up-to-date",
                "Available",
                "Node Selector",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
    }

    #[test]
    fn undecodable_objects_still_get_a_full_row() {
        // `spec.containers` must be a list: the typed printer cannot run.
        let broken = json!({"metadata": {"name": "odd", "creationTimestamp": ago(7)}, "spec": {"containers": "nope"}});
        let cells = row("", "Pod", broken);
        assert_eq!(cells.len(), 9);
        assert_eq!(cells[0], "odd");
        assert_eq!(cells[4], "7s");
        assert_eq!(cells[2], "<unknown>");
    }

    #[test]
    fn finished_pods_carry_a_completed_condition() {
        let pod = json!({"metadata": {"name": "job"}, "spec": {"containers": []}, "status": {"phase": "Succeeded"}});
        let table = to_table_at(
            &*info("", "Pod"),
            vec![pod],
            json!({}),
            IncludeObject::None,
            TableVersion::V1,
            now(),
        );
        assert_eq!(table["rows"][0]["conditions"][0]["type"], "Completed");
        assert_eq!(table["rows"][0]["conditions"][0]["status"], "True");
    }
}

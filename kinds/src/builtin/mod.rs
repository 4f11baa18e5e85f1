//! The built-in kinds, one module each, and the one list that registers them.
//!
//! Adding a built-in kind is a new module here (its [`ResourceInfo`](skiff_meta::ResourceInfo) and its [`Kind`]
//! implementation) plus its line in [`all`]; the tests below check that every registered kind
//! has every piece.

pub mod api_service;
pub mod certificate_signing_request;
pub mod cluster_role;
pub mod cluster_role_binding;
pub mod config_map;
pub mod controller_revision;
pub mod cron_job;
pub mod csi_driver;
pub mod csi_node;
pub mod custom_resource_definition;
pub mod daemon_set;
pub mod deployment;
pub mod endpoint_slice;
pub mod endpoints;
pub mod event;
pub mod events_event;
pub mod flow_schema;
pub mod horizontal_pod_autoscaler;
pub mod ingress;
pub mod ingress_class;
pub mod job;
pub mod lease;
pub mod limit_range;
pub mod mutating_webhook_configuration;
pub mod namespace;
pub mod network_policy;
pub mod node;
pub mod persistent_volume;
pub mod persistent_volume_claim;
pub mod pod;
pub mod pod_disruption_budget;
pub mod priority_class;
pub mod priority_level_configuration;
pub mod replica_set;
pub mod replication_controller;
pub mod resource_metrics;
pub mod resource_quota;
pub mod reviews;
pub mod role;
pub mod role_binding;
pub mod runtime_class;
pub mod secret;
pub mod service;
pub mod service_account;
pub mod stateful_set;
pub mod storage_class;
pub mod validating_admission_policy;
pub mod validating_admission_policy_binding;
pub mod validating_webhook_configuration;
pub mod volume_attachment;

#[cfg(test)]
mod tests;

use std::sync::{Arc, LazyLock};

use crate::Kind;

/// What the kind modules use.
mod prelude {
    pub use jiff::Timestamp;
    pub use k8s_openapi::api;
    pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    pub use schemars::generate::SchemaGenerator;
    pub use serde_json::{Value, json};
    pub use skiff_meta::ResourceInfo;
    pub use skiff_meta::resources::{
        CREATE_ONLY, FieldSource, READ_WRITE, SCALE, SelectableField, Subresource, proxy, status,
    };

    pub use crate::kind::{Checked, Kind, Strategy};
    pub use crate::patch::schema::{self, Type};
    pub use crate::table::{self, Column};
    pub use crate::typed::roundtrip;
    pub use crate::validation::names::{self, NameFn};
    pub use crate::{defaults, strategy, validation};

    /// Adds `T`'s schema to `generator` and returns its name.
    pub fn schema_name<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> String {
        generator.subschema_for::<T>();
        T::schema_name().into_owned()
    }
}

/// The default among `classes` (StorageClasses, IngressClasses): of those whose metadata
/// `marked` says is default, the newest (by creation time, then the name that sorts first), as
/// Kubernetes picks since 1.28 so that a new default takes over without a window of two; `None`
/// when none is marked.
pub fn newest_default(
    classes: &[serde_json::Value],
    marked: fn(&serde_json::Value) -> bool,
) -> Option<String> {
    fn key(c: &serde_json::Value) -> (&str, &str) {
        (
            c["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default(),
            c["metadata"]["name"].as_str().unwrap_or_default(),
        )
    }
    classes
        .iter()
        .filter(|c| marked(&c["metadata"]))
        .max_by(|a, b| {
            let ((ta, na), (tb, nb)) = (key(a), key(b));
            ta.cmp(tb).then(nb.cmp(na))
        })
        .and_then(|c| c["metadata"]["name"].as_str().map(str::to_string))
}

/// Every built-in kind, core group first, in discovery order.
pub fn all() -> &'static [Arc<dyn Kind>] {
    static ALL: LazyLock<Vec<Arc<dyn Kind>>> = LazyLock::new(|| {
        vec![
            Arc::new(namespace::Namespace),
            Arc::new(pod::Pod),
            Arc::new(node::Node),
            Arc::new(service::Service),
            Arc::new(endpoints::Endpoints),
            Arc::new(config_map::ConfigMap),
            Arc::new(secret::Secret),
            Arc::new(event::Event),
            Arc::new(service_account::ServiceAccount),
            Arc::new(persistent_volume::PersistentVolume),
            Arc::new(persistent_volume_claim::PersistentVolumeClaim),
            Arc::new(replication_controller::ReplicationController),
            Arc::new(resource_quota::ResourceQuota),
            Arc::new(limit_range::LimitRange),
            Arc::new(deployment::Deployment),
            Arc::new(replica_set::ReplicaSet),
            Arc::new(daemon_set::DaemonSet),
            Arc::new(stateful_set::StatefulSet),
            Arc::new(controller_revision::ControllerRevision),
            Arc::new(job::Job),
            Arc::new(cron_job::CronJob),
            Arc::new(horizontal_pod_autoscaler::HorizontalPodAutoscaler),
            Arc::new(horizontal_pod_autoscaler::HorizontalPodAutoscalerV1),
            Arc::new(lease::Lease),
            Arc::new(endpoint_slice::EndpointSlice),
            Arc::new(events_event::EventsEvent),
            Arc::new(ingress::Ingress),
            Arc::new(ingress_class::IngressClass),
            Arc::new(network_policy::NetworkPolicy),
            Arc::new(cluster_role::ClusterRole),
            Arc::new(cluster_role_binding::ClusterRoleBinding),
            Arc::new(role::Role),
            Arc::new(role_binding::RoleBinding),
            Arc::new(storage_class::StorageClass),
            Arc::new(csi_driver::CsiDriver),
            Arc::new(csi_node::CsiNode),
            Arc::new(volume_attachment::VolumeAttachment),
            Arc::new(pod_disruption_budget::PodDisruptionBudget),
            Arc::new(priority_class::PriorityClass),
            Arc::new(runtime_class::RuntimeClass),
            Arc::new(flow_schema::FlowSchema),
            Arc::new(priority_level_configuration::PriorityLevelConfiguration),
            Arc::new(reviews::SelfSubjectAccessReview),
            Arc::new(reviews::SelfSubjectRulesReview),
            Arc::new(reviews::LocalSubjectAccessReview),
            Arc::new(reviews::SubjectAccessReview),
            Arc::new(reviews::SelfSubjectReview),
            Arc::new(reviews::TokenReview),
            Arc::new(certificate_signing_request::CertificateSigningRequest),
            Arc::new(validating_webhook_configuration::ValidatingWebhookConfiguration),
            Arc::new(mutating_webhook_configuration::MutatingWebhookConfiguration),
            Arc::new(validating_admission_policy::ValidatingAdmissionPolicy),
            Arc::new(validating_admission_policy_binding::ValidatingAdmissionPolicyBinding),
            Arc::new(custom_resource_definition::CustomResourceDefinition),
            Arc::new(api_service::ApiService),
            Arc::new(resource_metrics::NodeMetrics),
            Arc::new(resource_metrics::PodMetrics),
        ]
    });
    &ALL
}

/// The built-in kind with URL name `plural` (for tests and tools that need no server).
pub fn by_plural(plural: &str) -> Arc<dyn Kind> {
    all()
        .iter()
        .find(|k| k.info().plural == plural)
        .cloned()
        .unwrap_or_else(|| panic!("no built-in kind {plural}"))
}

/// The built-in kind `kind` of `group`.
pub fn by_kind(group: &str, kind: &str) -> Arc<dyn Kind> {
    all()
        .iter()
        .find(|k| k.info().group == group && k.info().kind == kind)
        .cloned()
        .unwrap_or_else(|| panic!("no built-in kind {group}/{kind}"))
}

/// The built-in kind `info` describes.
pub fn of(info: &skiff_meta::ResourceInfo) -> Option<&'static Arc<dyn Kind>> {
    all().iter().find(|k| k.info() == info)
}

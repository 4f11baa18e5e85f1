//! The resource metrics API, `metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics: what a node
//! and each container of a pod use now (CPU in cores, memory working set in bytes), as
//! metrics-server serves them and `kubectl top` and the HorizontalPodAutoscaler read them.
//!
//! Never stored: the API server reads them from the kubelets' Summary API when asked
//! ([`Source::Kubelets`](crate::kind::Source)), so they are only read (`get`, `list`). A node whose
//! kubelet does not answer has no metrics (absent, never zero), and so have its pods.
//! `metrics.k8s.io` is not in k8s-openapi, so the types are here, shaped as
//! `k8s.io/metrics/pkg/apis/metrics/v1beta1`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use skiff_meta::quantity;

use super::prelude::*;
use crate::kind::Source;

/// `metrics.k8s.io/v1beta1` NodeMetrics: what one node uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics")]
pub struct NodeMetricsObject {
    /// `metrics.k8s.io/v1beta1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `NodeMetrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The node's name and labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The end of the window the usage was measured over.
    #[serde(default)]
    pub timestamp: Option<Time>,
    /// How long the usage was measured over (a Go duration, `10.5s`).
    #[serde(default)]
    pub window: String,
    /// `cpu` (cores) and `memory` (working set bytes).
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
}

/// `metrics.k8s.io/v1beta1` PodMetrics: what each container of one pod uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics")]
pub struct PodMetricsObject {
    /// `metrics.k8s.io/v1beta1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `PodMetrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The pod's name, namespace and labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The end of the window the usage was measured over.
    #[serde(default)]
    pub timestamp: Option<Time>,
    /// How long the usage was measured over (a Go duration, `10.5s`).
    #[serde(default)]
    pub window: String,
    /// Each running container's use.
    #[serde(default)]
    pub containers: Vec<ContainerMetrics>,
}

/// One container's use.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.ContainerMetrics")]
pub struct ContainerMetrics {
    /// The container's name.
    pub name: String,
    /// `cpu` (cores) and `memory` (working set bytes).
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
}

const VERBS: &[&str] = &["get", "list"];

/// `metrics.k8s.io/v1beta1` NodeMetrics (`nodes`).
pub struct NodeMetrics;

/// NodeMetrics' names, scope and verbs.
pub const NODE_INFO: ResourceInfo = ResourceInfo {
    group: "metrics.k8s.io",
    version: "v1beta1",
    kind: "NodeMetrics",
    plural: "nodes",
    singular: "nodemetrics",
    short_names: &[],
    namespaced: false,
    verbs: VERBS,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

/// `metrics.k8s.io/v1beta1` PodMetrics (`pods`).
pub struct PodMetrics;

/// PodMetrics' names, scope and verbs.
pub const POD_INFO: ResourceInfo = ResourceInfo {
    group: "metrics.k8s.io",
    version: "v1beta1",
    kind: "PodMetrics",
    plural: "pods",
    singular: "podmetrics",
    short_names: &[],
    namespaced: true,
    verbs: VERBS,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

/// The columns metrics-server prints: name, CPU, memory and the window.
fn columns() -> Vec<Column> {
    use table::{NAME, col};
    vec![
        NAME,
        col("CPU", "string", "CPU usage"),
        col("Memory", "string", "Memory usage"),
        col(
            "Window",
            "string",
            "Interval over which the usage was measured",
        ),
    ]
}

/// The sum of `resource` over `usages`, in its canonical form; `0` for none.
fn total<'a>(usages: impl Iterator<Item = &'a Value>, resource: &str) -> String {
    usages
        .filter_map(|usage| usage[resource].as_str())
        .filter_map(|q| quantity::parse(q).ok())
        .reduce(|a, b| a.add(&b))
        .map_or_else(|| "0".to_string(), |q| q.to_string())
}

fn cells(object: &Value, usages: Vec<&Value>) -> Vec<Value> {
    vec![
        json!(object["metadata"]["name"].as_str().unwrap_or_default()),
        json!(total(usages.iter().copied(), "cpu")),
        json!(total(usages.iter().copied(), "memory")),
        json!(object["window"].as_str().unwrap_or_default()),
    ]
}

impl Kind for NodeMetrics {
    fn info(&self) -> &'static ResourceInfo {
        &NODE_INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<NodeMetricsObject>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<NodeMetricsObject>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        columns()
    }

    fn cells(&self, object: &Value, _now: Timestamp) -> Option<Vec<Value>> {
        Some(cells(object, vec![&object["usage"]]))
    }

    fn source(&self) -> Source {
        Source::Kubelets
    }
}

impl Kind for PodMetrics {
    fn info(&self) -> &'static ResourceInfo {
        &POD_INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<PodMetricsObject>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<PodMetricsObject>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        columns()
    }

    /// A pod's row sums its containers, as metrics-server's does.
    fn cells(&self, object: &Value, _now: Timestamp) -> Option<Vec<Value>> {
        let usages = object["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| &c["usage"])
            .collect();
        Some(cells(object, usages))
    }

    fn source(&self) -> Source {
        Source::Kubelets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_use_and_a_pod_sums_its_containers() {
        let node = json!({
            "apiVersion": "metrics.k8s.io/v1beta1", "kind": "NodeMetrics",
            "metadata": {"name": "n1"}, "timestamp": "2026-12-06T10:00:00Z", "window": "10s",
            "usage": {"cpu": "250m", "memory": "1Gi"},
        });
        assert_eq!(NodeMetrics.decode(&node).unwrap(), node);
        assert_eq!(
            NodeMetrics.cells(&node, Timestamp::now()).unwrap(),
            [json!("n1"), json!("250m"), json!("1Gi"), json!("10s")]
        );
        let pod = json!({
            "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
            "metadata": {"name": "web", "namespace": "default"},
            "timestamp": "2026-12-06T10:00:00Z", "window": "10.5s",
            "containers": [
                {"name": "app", "usage": {"cpu": "100000000n", "memory": "512Mi"}},
                {"name": "sidecar", "usage": {"cpu": "50m", "memory": "512Mi"}},
            ],
        });
        assert_eq!(PodMetrics.decode(&pod).unwrap(), pod);
        assert_eq!(
            PodMetrics.cells(&pod, Timestamp::now()).unwrap(),
            [json!("web"), json!("150m"), json!("1Gi"), json!("10.5s")]
        );
        let names: Vec<&str> = columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Name", "CPU", "Memory", "Window"]);
        assert_eq!(PodMetrics.source(), Source::Kubelets);
    }
}

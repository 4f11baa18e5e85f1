//! The kubelet's Summary API (`GET /stats/summary`, `stats/v1alpha1`): what a node and its pods
//! and containers use, as the kubelet measures it and the API server's metrics API
//! (`metrics.k8s.io`) reads it. Both ends use these types, so they agree by construction.
//!
//! Only the CPU and memory parts are kept (`only_cpu_and_memory=true` in Kubernetes' terms);
//! field names and meanings are the Kubernetes kubelet's, so a tool written for its summary
//! reads this one.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// A node's summary: the node as a whole and each pod on it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The node.
    pub node: NodeStats,
    /// The pods that run, or ran recently, on the node.
    #[serde(default)]
    pub pods: Vec<PodStats>,
}

/// What the whole node uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// When the node (its kubelet) started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// CPU use; absent until measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory use; absent until measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

/// A pod's identity on the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodReference {
    /// The pod's name.
    pub name: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's UID.
    pub uid: String,
}

/// What one pod uses: the sum of its containers, and each of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When its first container measured started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// Its running containers.
    #[serde(default)]
    pub containers: Vec<ContainerStats>,
    /// The pod's CPU use (its containers' sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// The pod's memory use (its containers' sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

/// What one container uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// The container's name in the pod spec.
    pub name: String,
    /// When this run of it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// CPU use; absent until measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory use; absent until measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}

/// CPU use at a point in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When it was measured.
    pub time: Timestamp,
    /// The rate of use in nano-cores, over [`CpuStats::window`] before `time`; absent after the
    /// first measurement, which has nothing to compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative CPU time in core-nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    /// The window the rate covers, in nanoseconds. Not in Kubernetes' summary (whose windows
    /// are its housekeeping interval); the metrics API reports it as `window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_nanos: Option<u64>,
}

/// Memory use at a point in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When it was measured.
    pub time: Timestamp,
    /// All memory in use, page cache included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// The working set: use less inactive file pages, what the OOM killer and `kubectl top`
    /// look at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous and swap cache memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_kubernetes_kubelets_summary() {
        // The shape of a Kubernetes kubelet's `/stats/summary` (fields this module does not keep
        // are ignored).
        let text = r#"{
          "node": {"nodeName": "n1", "startTime": "2026-12-01T10:00:00Z",
                   "cpu": {"time": "2026-12-01T10:05:00Z", "usageNanoCores": 120000000,
                           "usageCoreNanoSeconds": 9000000000},
                   "memory": {"time": "2026-12-01T10:05:00Z", "workingSetBytes": 1048576,
                              "usageBytes": 2097152, "pageFaults": 10},
                   "fs": {"capacityBytes": 1}},
          "pods": [{"podRef": {"name": "web", "namespace": "default", "uid": "u1"},
                    "containers": [{"name": "c", "cpu": {"time": "2026-12-01T10:05:00Z",
                                    "usageNanoCores": 5}}]}]
        }"#;
        let summary: Summary = serde_json::from_str(text).unwrap();
        assert_eq!(summary.node.node_name, "n1");
        assert_eq!(
            summary.node.cpu.unwrap().usage_nano_cores,
            Some(120_000_000)
        );
        assert_eq!(
            summary.node.memory.unwrap().working_set_bytes,
            Some(1_048_576)
        );
        assert_eq!(summary.pods[0].pod_ref.uid, "u1");
        assert_eq!(
            summary.pods[0].containers[0].cpu.unwrap().usage_nano_cores,
            Some(5)
        );
        assert_eq!(summary.pods[0].containers[0].memory, None);
        let back = serde_json::to_value(&summary).unwrap();
        assert_eq!(back["pods"][0]["podRef"]["namespace"], "default");
        assert!(back["node"]["cpu"].get("windowNanos").is_none());
    }
}

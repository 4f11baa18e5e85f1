//! Scoring priorities: each gives every feasible node a score from 0 (least preferred) to
//! [`MAX_PRIORITY`]; the algorithm adds them up times their weights.
//!
//! The formulas are the original Kubernetes ones (`plugin/pkg/scheduler/algorithm/priorities`),
//! integer arithmetic and truncations included, so the worked numbers in the tests are the ones
//! kube-scheduler of that era gives.

use std::collections::HashMap;

use crate::nodeinfo::{NodeInfo, PodInfo};

/// The highest score a priority gives.
pub const MAX_PRIORITY: i64 = 10;

/// A scoring plugin.
pub trait Priority: Send + Sync {
    /// The name it is registered under (e.g. `LeastRequestedPriority`).
    fn name(&self) -> &str;
    /// Writes a score in `0..=MAX_PRIORITY` for each of `nodes` into the same index of `scores`
    /// (`scores.len() == nodes.len()`).
    fn score(&self, pod: &PodInfo, nodes: &[&NodeInfo], scores: &mut [i64]);
}

/// `(capacity - requested) * 10 / capacity` in integers; 0 when the capacity is zero or already
/// exceeded.
pub fn unused_capacity_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    ((capacity - requested) * MAX_PRIORITY) / capacity
}

/// `LeastRequestedPriority`: favours nodes with the most capacity left after the pod, cpu and
/// memory weighted equally: `(cpu_score + memory_score) / 2` with each
/// [`unused_capacity_score`] of the non-zero requests (pods on the node plus this one).
#[derive(Debug, Default)]
pub struct LeastRequested;

impl Priority for LeastRequested {
    fn name(&self) -> &str {
        "LeastRequestedPriority"
    }

    fn score(&self, pod: &PodInfo, nodes: &[&NodeInfo], scores: &mut [i64]) {
        let want = pod.requests.non_zero;
        for (node, score) in nodes.iter().zip(scores.iter_mut()) {
            let cpu = unused_capacity_score(
                node.non_zero_requested.milli_cpu + want.milli_cpu,
                node.allocatable.milli_cpu,
            );
            let memory = unused_capacity_score(
                node.non_zero_requested.memory + want.memory,
                node.allocatable.memory,
            );
            *score = (cpu + memory) / 2;
        }
    }
}

/// `requested / capacity`, or 1 when the capacity is zero.
fn fraction_of_capacity(requested: i64, capacity: i64) -> f64 {
    if capacity == 0 {
        return 1.0;
    }
    requested as f64 / capacity as f64
}

/// `BalancedResourceAllocation`: favours nodes whose cpu and memory would be used in the same
/// proportion after the pod: `10 - |cpu_fraction - memory_fraction| * 10`, truncated; 0 when
/// either fraction reaches 1. Meant to be used with [`LeastRequested`].
#[derive(Debug, Default)]
pub struct BalancedResourceAllocation;

impl Priority for BalancedResourceAllocation {
    fn name(&self) -> &str {
        "BalancedResourceAllocation"
    }

    fn score(&self, pod: &PodInfo, nodes: &[&NodeInfo], scores: &mut [i64]) {
        let want = pod.requests.non_zero;
        for (node, score) in nodes.iter().zip(scores.iter_mut()) {
            let cpu = fraction_of_capacity(
                node.non_zero_requested.milli_cpu + want.milli_cpu,
                node.allocatable.milli_cpu,
            );
            let memory = fraction_of_capacity(
                node.non_zero_requested.memory + want.memory,
                node.allocatable.memory,
            );
            *score = if cpu >= 1.0 || memory >= 1.0 {
                0
            } else {
                (MAX_PRIORITY as f64 - (cpu - memory).abs() * MAX_PRIORITY as f64) as i64
            };
        }
    }
}

/// `CalculateNodeLabelPriority`: 10 for nodes that have `label` (any value) when `presence`,
/// or that lack it when not; 0 otherwise. Configured by the policy.
#[derive(Debug, Default)]
pub struct NodeLabel {
    /// The label key.
    pub label: String,
    /// Whether having the label is preferred (true) or lacking it (false).
    pub presence: bool,
}

impl Priority for NodeLabel {
    fn name(&self) -> &str {
        "CalculateNodeLabelPriority"
    }

    fn score(&self, _pod: &PodInfo, nodes: &[&NodeInfo], scores: &mut [i64]) {
        for (node, score) in nodes.iter().zip(scores.iter_mut()) {
            *score = if node.labels.contains_key(&self.label) == self.presence {
                MAX_PRIORITY
            } else {
                0
            };
        }
    }
}

/// The share of the spreading score given to zones when nodes carry zone labels.
const ZONE_WEIGHTING: f32 = 2.0 / 3.0;

/// `SelectorSpreadPriority`: favours nodes (and zones) with fewer pods of the same Services and
/// ReplicaSets as the pod: `10 * (max - count) / max` over the candidate nodes, blended 1/3 node
/// and 2/3 zone when zones are known.
///
/// Counts come from each node's per-group counters (kept by the cache), so the cost is one map
/// lookup per group per node instead of a walk over the node's pods. A pod in several groups
/// counts the sum over its groups where the original counted pods matching any of them; when the
/// groups select the same pods (a Deployment's ReplicaSet and its Service, the common case) every
/// count is the same multiple and the normalised scores are identical.
#[derive(Debug, Default)]
pub struct SelectorSpread;

impl Priority for SelectorSpread {
    fn name(&self) -> &str {
        "SelectorSpreadPriority"
    }

    fn score(&self, pod: &PodInfo, nodes: &[&NodeInfo], scores: &mut [i64]) {
        if pod.groups.is_empty() {
            scores.fill(MAX_PRIORITY);
            return;
        }
        let mut max_node = 0f32;
        let mut by_zone: HashMap<&str, f32> = HashMap::new();
        let counts: Vec<f32> = nodes
            .iter()
            .map(|node| {
                let count: u32 = pod
                    .groups
                    .iter()
                    .filter_map(|g| node.group_counts.get(g))
                    .sum();
                let count = count as f32;
                max_node = max_node.max(count);
                if let Some(zone) = &node.zone {
                    *by_zone.entry(zone.as_str()).or_default() += count;
                }
                count
            })
            .collect();
        let max_zone = by_zone.values().copied().fold(0f32, f32::max);
        let max = MAX_PRIORITY as f32;
        for ((node, count), score) in nodes.iter().zip(counts).zip(scores.iter_mut()) {
            let mut f = if max_node > 0.0 {
                max * ((max_node - count) / max_node)
            } else {
                max
            };
            if !by_zone.is_empty()
                && let Some(zone) = &node.zone
            {
                let zone_score = if max_zone > 0.0 {
                    max * ((max_zone - by_zone[zone.as_str()]) / max_zone)
                } else {
                    max
                };
                f = f * (1.0 - ZONE_WEIGHTING) + ZONE_WEIGHTING * zone_score;
            }
            *score = f as i64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predicates::tests::{node, pod};
    use std::sync::Arc;

    fn scores(p: &dyn Priority, pod: &PodInfo, nodes: &[NodeInfo]) -> Vec<i64> {
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let mut out = vec![-1; nodes.len()];
        p.score(pod, &refs, &mut out);
        out
    }

    #[test]
    fn least_requested_worked_numbers() {
        // Node 1: 4000m, 10000 bytes, with pods requesting 3000m and 0 bytes (non-zero: the test
        // pods request exactly what they say). The new pod asks 0m / 5000 bytes... as in the
        // original tests: node1 cpu (4000-3000)*10/4000 = 2, memory (10000-5000)*10/10000 = 5,
        // score (2+5)/2 = 3.
        let mut n1 = node("machine1", 4000, 10000, 10);
        n1.add_pod(Arc::new(pod("a", 3000, 0)));
        // Node 2: 6000m, 10000 bytes, pods 3000m + 5000 bytes: cpu (6000-3000)*10/6000 = 5,
        // memory (10000-10000)*10/10000 = 0, score (5+0)/2 = 2.
        let mut n2 = node("machine2", 6000, 10000, 10);
        n2.add_pod(Arc::new(pod("b", 3000, 5000)));
        // Node 3: nothing allocatable: 0.
        let n3 = node("machine3", 0, 0, 10);
        let p = pod("p", 0, 5000);
        assert_eq!(scores(&LeastRequested, &p, &[n1, n2, n3]), vec![3, 2, 0]);
    }

    #[test]
    fn least_requested_scores_zero_when_over_capacity() {
        let mut n = node("n", 1000, 1000, 10);
        n.add_pod(Arc::new(pod("a", 900, 100)));
        // cpu 900+200 > 1000: 0; memory (1000-200)*10/1000 = 8; (0+8)/2 = 4.
        assert_eq!(scores(&LeastRequested, &pod("p", 200, 100), &[n]), vec![4]);
        assert_eq!(unused_capacity_score(1, 3), 6, "integer division truncates");
    }

    #[test]
    fn balanced_allocation_worked_numbers() {
        // Node 1: 4000m, 10000 bytes, pods 3000m + 0; pod 0m + 5000:
        // cpu 3000/4000 = 0.75, memory 5000/10000 = 0.5, 10 - 0.25*10 = 7.5 -> 7.
        let mut n1 = node("machine1", 4000, 10000, 10);
        n1.add_pod(Arc::new(pod("a", 3000, 0)));
        // Node 2: 6000m, 10000 bytes, pods 3000m + 5000; pod 0m + 5000:
        // memory 10000/10000 = 1 -> 0.
        let mut n2 = node("machine2", 6000, 10000, 10);
        n2.add_pod(Arc::new(pod("b", 3000, 5000)));
        // Node 3: 10000m, 20000 bytes, empty; pod 3000m + 5000 bytes: 0.3 vs 0.25 -> 9.5 -> 9.
        let n3 = node("machine3", 10000, 20000, 10);
        let p = pod("p", 0, 5000);
        let got = scores(&BalancedResourceAllocation, &p, &[n1, n2]);
        assert_eq!(got, vec![7, 0]);
        assert_eq!(
            scores(&BalancedResourceAllocation, &pod("q", 3000, 5000), &[n3]),
            vec![9]
        );
        // Zero capacity counts as fully used.
        assert_eq!(
            scores(
                &BalancedResourceAllocation,
                &pod("q", 0, 0),
                &[node("x", 0, 10, 1)]
            ),
            vec![0]
        );
    }

    #[test]
    fn node_label_priority_prefers_presence_or_absence() {
        let mut labelled = node("a", 1, 1, 1);
        labelled.labels = [("ssd".to_string(), "yes".to_string())].into();
        let plain = node("b", 1, 1, 1);
        let p = pod("p", 0, 0);
        let prefer = NodeLabel {
            label: "ssd".into(),
            presence: true,
        };
        let avoid = NodeLabel {
            label: "ssd".into(),
            presence: false,
        };
        assert_eq!(
            scores(&prefer, &p, &[labelled.clone(), plain.clone()]),
            vec![10, 0]
        );
        assert_eq!(scores(&avoid, &p, &[labelled, plain]), vec![0, 10]);
    }

    fn with_group_pods(name: &str, group: u32, count: usize, zone: Option<&str>) -> NodeInfo {
        let mut n = node(name, 1000, 1000, 100);
        n.zone = zone.map(Into::into);
        for i in 0..count {
            let mut p = pod(&format!("{name}-{i}"), 0, 0);
            p.groups = vec![group];
            n.add_pod(Arc::new(p));
        }
        n
    }

    #[test]
    fn selector_spread_worked_numbers_without_zones() {
        // Counts 0, 1, 2 pods of group 1: 10*(2-0)/2 = 10, 10*(2-1)/2 = 5, 0.
        let nodes = [
            with_group_pods("a", 1, 0, None),
            with_group_pods("b", 1, 1, None),
            with_group_pods("c", 1, 2, None),
        ];
        let mut p = pod("p", 0, 0);
        p.groups = vec![1];
        assert_eq!(scores(&SelectorSpread, &p, &nodes), vec![10, 5, 0]);
        // Pods of another group do not count.
        p.groups = vec![2];
        assert_eq!(scores(&SelectorSpread, &p, &nodes), vec![10, 10, 10]);
        // A pod in no group: every node scores 10.
        p.groups.clear();
        assert_eq!(scores(&SelectorSpread, &p, &nodes), vec![10, 10, 10]);
    }

    #[test]
    fn selector_spread_worked_numbers_with_zones() {
        // Zone z1: nodes a (1 pod), b (0); zone z2: node c (2 pods). Max per node 2, per zone 2.
        // a: node 10*(2-1)/2 = 5, zone z1 has 1: 10*(2-1)/2 = 5 -> 5/3 + 2/3*5 = 5.
        // b: node 10, zone 5 -> 10/3 + 10/3 = 6.67 -> 6.
        // c: node 0, zone 0 -> 0.
        let nodes = [
            with_group_pods("a", 1, 1, Some("z1")),
            with_group_pods("b", 1, 0, Some("z1")),
            with_group_pods("c", 1, 2, Some("z2")),
        ];
        let mut p = pod("p", 0, 0);
        p.groups = vec![1];
        assert_eq!(scores(&SelectorSpread, &p, &nodes), vec![5, 6, 0]);
    }

    #[test]
    fn selector_spread_ignores_terminating_pods() {
        let mut n = node("a", 1000, 1000, 10);
        let mut dying = pod("d", 0, 0);
        dying.groups = vec![1];
        dying.terminating = true;
        n.add_pod(Arc::new(dying));
        let other = with_group_pods("b", 1, 1, None);
        let mut p = pod("p", 0, 0);
        p.groups = vec![1];
        assert_eq!(scores(&SelectorSpread, &p, &[n, other]), vec![10, 0]);
    }
}

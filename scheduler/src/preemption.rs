//! Preemption (kube-scheduler's `DefaultPreemption`): when no node fits a pod, find the node
//! where evicting the fewest and least important lower-priority pods makes it fit, as
//! kube-scheduler chooses.
//!
//! On each node, every pod of lower priority is taken away; if the pod still does not fit, the
//! node cannot help. Otherwise the pods are put back one at a time, most important first (higher
//! priority, then the longest running), those whose eviction would break a
//! PodDisruptionBudget before the others; a pod that no longer lets the preemptor fit is a
//! victim. Pods already terminating are never put back nor chosen again: they are leaving.
//! Among the nodes that can help, the one chosen has the fewest budget violations, then the
//! least important most important victim, then the smallest sum of victim priorities, then the
//! fewest victims, then comes first.
//!
//! All of it is pure: the scheduler's shell deletes the victims and sets the preemptor's
//! `status.nominatedNodeName`.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use skiff_meta::labels::Selector;

use crate::algorithm::Algorithm;
use crate::nodeinfo::{NodeInfo, PodInfo};

/// A PodDisruptionBudget as preemption reads it.
#[derive(Debug, Clone)]
pub struct Budget {
    /// Its namespace.
    pub namespace: String,
    /// The pods it protects.
    pub selector: Selector,
    /// `status.disruptionsAllowed`.
    pub allowed: i32,
    /// `status.disruptedPods`: pods already being disrupted, which it no longer counts.
    pub disrupted: HashSet<String>,
}

impl Budget {
    /// Reads a budget; `None` for one whose selector does not parse (it protects nothing, as
    /// in kube-scheduler).
    pub fn of(pdb: &PodDisruptionBudget) -> Option<Budget> {
        let selector = Selector::from_optional_label_selector(
            pdb.spec.as_ref().and_then(|s| s.selector.as_ref()),
        )
        .ok()?;
        let status = pdb.status.as_ref();
        Some(Budget {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            selector,
            allowed: status.map_or(0, |s| s.disruptions_allowed),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default(),
        })
    }

    fn protects(&self, pod: &PodInfo) -> bool {
        // kube-scheduler: an empty selector protects nothing here.
        self.namespace == pod.namespace
            && !self.selector.is_empty()
            && self.selector.matches(&pod.labels)
            && !self.disrupted.contains(&pod.name)
    }
}

/// Where to preempt, and whom.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The node.
    pub node: String,
    /// The pods to evict, most important first (none when the pods already leaving make room).
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims' evictions break a budget.
    pub violations: usize,
}

impl Candidate {
    fn highest(&self) -> i64 {
        self.victims
            .iter()
            .map(|v| i64::from(v.priority))
            .max()
            .unwrap_or(i64::MIN)
    }

    fn sum(&self) -> i64 {
        // Shifted so that negative priorities still add up to more with more victims.
        self.victims
            .iter()
            .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
            .sum()
    }

    /// The order kube-scheduler's `pickOneNodeForPreemption` ranks candidates by.
    fn rank(&self) -> (usize, i64, i64, usize) {
        (
            self.violations,
            self.highest(),
            self.sum(),
            self.victims.len(),
        )
    }
}

/// Whether `pod` may preempt now: its policy allows it, and an earlier preemption for it is not
/// still under way (lower-priority pods terminating on its nominated node).
pub fn eligible(pod: &PodInfo, nodes: &[NodeInfo]) -> bool {
    if pod.never_preempts {
        return false;
    }
    if pod.nominated_node.is_empty() {
        return true;
    }
    !nodes
        .iter()
        .filter(|n| n.name == pod.nominated_node)
        .flat_map(|n| n.pods.values())
        .any(|p| p.terminating && p.priority < pod.priority)
}

/// Splits `pods` into those whose eviction would break a budget and the others, spending the
/// budgets' allowances in order.
fn split_by_budgets(
    pods: Vec<Arc<PodInfo>>,
    budgets: &[Budget],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.allowed).collect();
    let mut violating = Vec::new();
    let mut fine = Vec::new();
    for pod in pods {
        let mut breaks = false;
        for (i, budget) in budgets.iter().enumerate() {
            if budget.protects(&pod) {
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    breaks = true;
                }
            }
        }
        if breaks {
            violating.push(pod);
        } else {
            fine.push(pod);
        }
    }
    (violating, fine)
}

/// The victims on `node` that would let `pod` fit, if any set would.
pub fn victims_on(
    algorithm: &Algorithm,
    pod: &PodInfo,
    node: &NodeInfo,
    budgets: &[Budget],
) -> Option<Candidate> {
    let mut lower: Vec<Arc<PodInfo>> = node
        .pods
        .values()
        .filter(|p| p.priority < pod.priority && p.key != pod.key)
        .cloned()
        .collect();
    if lower.is_empty() {
        return None;
    }
    let mut trial = node.clone();
    for p in &lower {
        trial.remove_pod(&p.key);
    }
    if !algorithm.feasible(pod, &trial) {
        return None;
    }
    // Leaving already: never put back, never chosen again.
    lower.retain(|p| !p.terminating);
    // Most important first: higher priority, then the one running longest.
    lower.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| match (a.start_time, b.start_time) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| a.key.cmp(&b.key))
    });
    let (violating, fine) = split_by_budgets(lower, budgets);
    let mut victims = Vec::new();
    let mut violations = 0;
    for (group, breaks) in [(violating, true), (fine, false)] {
        for p in group {
            trial.add_pod(p.clone());
            if !algorithm.feasible(pod, &trial) {
                trial.remove_pod(&p.key);
                victims.push(p);
                violations += usize::from(breaks);
            }
        }
    }
    victims.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.key.cmp(&b.key)));
    Some(Candidate {
        node: node.name.clone(),
        victims,
        violations,
    })
}

/// The best node to preempt on for `pod`, or `None` when preempting cannot help.
pub fn find(
    algorithm: &Algorithm,
    pod: &PodInfo,
    nodes: &[NodeInfo],
    budgets: &[Budget],
) -> Option<Candidate> {
    let mut best: Option<Candidate> = None;
    for node in nodes.iter().filter(|n| n.node.is_some()) {
        let Some(candidate) = victims_on(algorithm, pod, node, budgets) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| candidate.rank() < b.rank()) {
            best = Some(candidate);
        }
    }
    best
}

#[cfg(test)]
mod tests;

//! The scheduling algorithm: a [`Registry`] of predicate and priority plugins and of named
//! algorithm providers (the original `RegisterAlgorithmProvider(name, predicates, priorities)`),
//! a [`Policy`] (the original policy file) to pick plugins and their arguments, and the
//! [`Algorithm`] that filters, scores and picks a node for one pod.
//!
//! # How a decision is made
//! 1. Filter: starting where the previous decision stopped (round-robin over the node list), run
//!    the predicates on each node in order, stopping at a node's first failing predicate, until
//!    enough feasible nodes are found (see [`num_feasible_nodes_to_find`]) or every node has
//!    been tried.
//! 2. Score the feasible nodes with every priority, times its weight.
//! 3. Pick the highest total; ties are broken uniformly at random (reservoir sampling), so equal
//!    nodes share the load instead of the first one taking it all.
//!
//! If no node fits, the [`FitError`] counts the reasons over the nodes and words them as
//! kube-scheduler does ("0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient
//! cpu.").

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::nodeinfo::{NodeInfo, PodInfo};
use crate::predicates::{self, Predicate, Reason};
use crate::priorities::{self, Priority};
use crate::{Error, Result};

/// The provider used when none is named.
pub const DEFAULT_PROVIDER: &str = "DefaultProvider";

/// The least number of feasible nodes a decision looks for before it stops filtering
/// (`minFeasibleNodesToFind`).
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The least percentage of nodes the adaptive sampling scores (`minFeasibleNodesPercentageToFind`).
pub const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;

/// How many feasible nodes to find among `all` before scoring (kube-scheduler's
/// `numFeasibleNodesToFind`). `percentage` 0 is adaptive: 50% at 100 nodes, falling by 1% per
/// 125 nodes to at least 5% (42% of 1,000 nodes, 10% of 5,000); 100 (or small clusters) means every
/// node. Never fewer than [`MIN_FEASIBLE_NODES_TO_FIND`].
pub fn num_feasible_nodes_to_find(all: usize, percentage: u32) -> usize {
    if all < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return all;
    }
    let percentage = if percentage == 0 {
        50usize
            .saturating_sub(all / 125)
            .max(MIN_FEASIBLE_NODES_PERCENTAGE)
    } else {
        percentage as usize
    };
    (all * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// The arguments of a configured predicate (the original policy's `argument`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PredicateArgument {
    /// For `CheckNodeLabelPresence`: the labels and whether they must be present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels_presence: Option<LabelsPresence>,
}

/// `CheckNodeLabelPresence`'s argument.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabelsPresence {
    /// Label keys.
    pub labels: Vec<String>,
    /// Whether the node must have them (true) or must not (false).
    pub presence: bool,
}

/// The arguments of a configured priority.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityArgument {
    /// For `CalculateNodeLabelPriority`: the label and whether having it is preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_preference: Option<LabelPreference>,
}

/// `CalculateNodeLabelPriority`'s argument.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabelPreference {
    /// The label key.
    pub label: String,
    /// Whether nodes with it are preferred (true) or nodes without it (false).
    pub presence: bool,
}

/// One predicate of a policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PredicatePolicy {
    /// The registered name.
    pub name: String,
    /// Arguments, for the predicates that take some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<PredicateArgument>,
}

/// One priority of a policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriorityPolicy {
    /// The registered name.
    pub name: String,
    /// Its weight (a positive integer).
    pub weight: i64,
    /// Arguments, for the priorities that take some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<PriorityArgument>,
}

/// A scheduler policy (the original `--policy-config-file` JSON): which predicates and
/// priorities to run, with weights and arguments, instead of a provider's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// The predicates, in the order they run.
    #[serde(default)]
    pub predicates: Vec<PredicatePolicy>,
    /// The priorities.
    #[serde(default)]
    pub priorities: Vec<PriorityPolicy>,
}

type PredicateFactory =
    Arc<dyn Fn(Option<&PredicateArgument>) -> Result<Box<dyn Predicate>> + Send + Sync>;
type PriorityFactory =
    Arc<dyn Fn(Option<&PriorityArgument>) -> Result<Box<dyn Priority>> + Send + Sync>;

/// A named set of predicates and weighted priorities.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    /// Predicate names, in the order they run.
    pub predicates: Vec<String>,
    /// Priority names with their weights.
    pub priorities: Vec<(String, i64)>,
}

/// The plugins and providers the scheduler knows by name.
#[derive(Clone)]
pub struct Registry {
    predicates: BTreeMap<String, PredicateFactory>,
    priorities: BTreeMap<String, PriorityFactory>,
    providers: BTreeMap<String, Provider>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("predicates", &self.predicates.keys().collect::<Vec<_>>())
            .field("priorities", &self.priorities.keys().collect::<Vec<_>>())
            .field("providers", &self.providers)
            .finish()
    }
}

impl Default for Registry {
    /// Every built-in plugin, and `DefaultProvider`.
    fn default() -> Self {
        let mut r = Registry::empty();
        fn plain<P: Predicate + Default + 'static>(r: &mut Registry, name: &str) {
            r.register_predicate(name, |_| Ok(Box::new(P::default())));
        }
        plain::<predicates::CheckNodeUnschedulable>(&mut r, "CheckNodeUnschedulable");
        plain::<predicates::CheckNodeReady>(&mut r, "CheckNodeCondition");
        plain::<predicates::PodFitsHost>(&mut r, "PodFitsHost");
        plain::<predicates::PodToleratesNodeTaints>(&mut r, "PodToleratesNodeTaints");
        plain::<predicates::PodSelectorMatches>(&mut r, "PodSelectorMatches");
        plain::<predicates::PodFitsPorts>(&mut r, "PodFitsPorts");
        plain::<predicates::PodFitsResources>(&mut r, "PodFitsResources");
        plain::<predicates::NoDiskConflict>(&mut r, "NoDiskConflict");
        plain::<predicates::VolumeBinding>(&mut r, "VolumeBinding");
        r.register_predicate("CheckNodeLabelPresence", |arg| {
            let Some(p) = arg.and_then(|a| a.labels_presence.clone()) else {
                return Err(Error::MissingArgument("CheckNodeLabelPresence".into()));
            };
            Ok(Box::new(predicates::CheckNodeLabelPresence {
                labels: p.labels,
                presence: p.presence,
            }))
        });
        r.register_priority("LeastRequestedPriority", |_| {
            Ok(Box::new(priorities::LeastRequested))
        });
        r.register_priority("BalancedResourceAllocation", |_| {
            Ok(Box::new(priorities::BalancedResourceAllocation))
        });
        r.register_priority("SelectorSpreadPriority", |_| {
            Ok(Box::new(priorities::SelectorSpread))
        });
        r.register_priority("CalculateNodeLabelPriority", |arg| {
            let Some(p) = arg.and_then(|a| a.label_preference.clone()) else {
                return Err(Error::MissingArgument("CalculateNodeLabelPriority".into()));
            };
            Ok(Box::new(priorities::NodeLabel {
                label: p.label,
                presence: p.presence,
            }))
        });
        r.register_algorithm_provider(
            DEFAULT_PROVIDER,
            &[
                "CheckNodeUnschedulable",
                "CheckNodeCondition",
                "PodFitsHost",
                "PodToleratesNodeTaints",
                "PodSelectorMatches",
                "PodFitsPorts",
                "PodFitsResources",
                "NoDiskConflict",
                "VolumeBinding",
            ],
            &[
                ("LeastRequestedPriority", 1),
                ("BalancedResourceAllocation", 1),
                ("SelectorSpreadPriority", 1),
            ],
        );
        r
    }
}

impl Registry {
    /// A registry with nothing registered.
    pub fn empty() -> Registry {
        Registry {
            predicates: BTreeMap::new(),
            priorities: BTreeMap::new(),
            providers: BTreeMap::new(),
        }
    }

    /// Registers (or replaces) a predicate plugin under `name`.
    pub fn register_predicate(
        &mut self,
        name: &str,
        factory: impl Fn(Option<&PredicateArgument>) -> Result<Box<dyn Predicate>>
        + Send
        + Sync
        + 'static,
    ) {
        self.predicates.insert(name.to_string(), Arc::new(factory));
    }

    /// Registers (or replaces) a priority plugin under `name`.
    pub fn register_priority(
        &mut self,
        name: &str,
        factory: impl Fn(Option<&PriorityArgument>) -> Result<Box<dyn Priority>> + Send + Sync + 'static,
    ) {
        self.priorities.insert(name.to_string(), Arc::new(factory));
    }

    /// Registers (or replaces) an algorithm provider: predicate names and weighted priority names.
    pub fn register_algorithm_provider(
        &mut self,
        name: &str,
        predicates: &[&str],
        priorities: &[(&str, i64)],
    ) {
        self.providers.insert(
            name.to_string(),
            Provider {
                predicates: predicates.iter().map(|s| s.to_string()).collect(),
                priorities: priorities
                    .iter()
                    .map(|(s, w)| (s.to_string(), *w))
                    .collect(),
            },
        );
    }

    /// The registered provider names.
    pub fn provider_names(&self) -> Vec<String> {
        self.providers.keys().cloned().collect()
    }

    /// The policy a provider stands for, with some priority weights replaced (a weight of 0
    /// drops the priority). Unknown providers and weights for priorities the provider lacks are
    /// errors.
    pub fn provider_policy(&self, provider: &str, weights: &[(String, i64)]) -> Result<Policy> {
        let p = self
            .providers
            .get(provider)
            .ok_or_else(|| Error::UnknownProvider(provider.to_string()))?;
        for (name, _) in weights {
            if !p.priorities.iter().any(|(n, _)| n == name) {
                return Err(Error::UnknownPriority(name.clone()));
            }
        }
        Ok(Policy {
            predicates: p
                .predicates
                .iter()
                .map(|name| PredicatePolicy {
                    name: name.clone(),
                    argument: None,
                })
                .collect(),
            priorities: p
                .priorities
                .iter()
                .map(|(name, w)| PriorityPolicy {
                    name: name.clone(),
                    weight: weights
                        .iter()
                        .rev()
                        .find(|(n, _)| n == name)
                        .map_or(*w, |(_, w)| *w),
                    argument: None,
                })
                .filter(|p| p.weight != 0)
                .collect(),
        })
    }

    /// Builds the plugins of a policy.
    pub fn algorithm(
        &self,
        policy: &Policy,
        percentage_of_nodes_to_score: u32,
    ) -> Result<Algorithm> {
        let mut preds = Vec::new();
        for p in &policy.predicates {
            let f = self
                .predicates
                .get(&p.name)
                .ok_or_else(|| Error::UnknownPredicate(p.name.clone()))?;
            preds.push(f(p.argument.as_ref())?);
        }
        let mut prios = Vec::new();
        for p in &policy.priorities {
            let f = self
                .priorities
                .get(&p.name)
                .ok_or_else(|| Error::UnknownPriority(p.name.clone()))?;
            if p.weight <= 0 {
                return Err(Error::BadWeight {
                    name: p.name.clone(),
                    weight: p.weight,
                });
            }
            prios.push((f(p.argument.as_ref())?, p.weight));
        }
        Ok(Algorithm::new(preds, prios, percentage_of_nodes_to_score))
    }
}

/// No node fits a pod: how many nodes there were and why each failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitError {
    /// The nodes considered.
    pub num_nodes: usize,
    /// Each reason with the number of nodes that gave it.
    pub reasons: Vec<(Reason, usize)>,
}

impl fmt::Display for FitError {
    /// "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu." — one
    /// "count reason" per reason, sorted as strings.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num_nodes == 0 {
            return f.write_str("no nodes available to schedule pods");
        }
        let mut parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        parts.sort();
        write!(
            f,
            "0/{} nodes are available: {}.",
            self.num_nodes,
            parts.join(", ")
        )
    }
}

/// Configured plugins and the state carried between decisions (where the round-robin filter
/// starts, the tie-breaking random source).
pub struct Algorithm {
    predicates: Vec<Box<dyn Predicate>>,
    priorities: Vec<(Box<dyn Priority>, i64)>,
    percentage_of_nodes_to_score: u32,
    next_start: usize,
    rng: SmallRng,
    // Scratch buffers reused across decisions.
    feasible: Vec<usize>,
    reasons: Vec<Reason>,
    scores: Vec<i64>,
    totals: Vec<i64>,
}

impl fmt::Debug for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Algorithm")
            .field(
                "predicates",
                &self.predicates.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field(
                "priorities",
                &self
                    .priorities
                    .iter()
                    .map(|(p, w)| (p.name(), *w))
                    .collect::<Vec<_>>(),
            )
            .field(
                "percentage_of_nodes_to_score",
                &self.percentage_of_nodes_to_score,
            )
            .finish()
    }
}

impl Algorithm {
    /// An algorithm over these plugins.
    pub fn new(
        predicates: Vec<Box<dyn Predicate>>,
        priorities: Vec<(Box<dyn Priority>, i64)>,
        percentage_of_nodes_to_score: u32,
    ) -> Algorithm {
        Algorithm {
            predicates,
            priorities,
            percentage_of_nodes_to_score,
            next_start: 0,
            rng: SmallRng::from_os_rng(),
            feasible: Vec::new(),
            reasons: Vec::new(),
            scores: Vec::new(),
            totals: Vec::new(),
        }
    }

    /// Makes tie-breaking deterministic (tests).
    pub fn seed(&mut self, seed: u64) {
        self.rng = SmallRng::seed_from_u64(seed);
    }

    /// Runs the predicates on one node; fills `reasons` (cleared first) if it does not fit.
    fn fits(&self, pod: &PodInfo, node: &NodeInfo, reasons: &mut Vec<Reason>) -> bool {
        reasons.clear();
        for p in &self.predicates {
            p.check(pod, node, reasons);
            if !reasons.is_empty() {
                return false;
            }
        }
        true
    }

    /// Whether `pod` passes every predicate on `node` (preemption asks this of nodes with
    /// pods taken away).
    pub fn feasible(&self, pod: &PodInfo, node: &NodeInfo) -> bool {
        let mut reasons = Vec::new();
        self.fits(pod, node, &mut reasons)
    }

    /// Picks a node for `pod` among `nodes` (entries without a node object are skipped) and
    /// returns its index, or why none fits.
    pub fn schedule(&mut self, pod: &PodInfo, nodes: &[NodeInfo]) -> Result<usize, FitError> {
        let n = nodes.len();
        let real = nodes.iter().filter(|n| n.node.is_some()).count();
        let want = num_feasible_nodes_to_find(real, self.percentage_of_nodes_to_score);
        let mut feasible = std::mem::take(&mut self.feasible);
        let mut reasons = std::mem::take(&mut self.reasons);
        feasible.clear();
        let mut failures: Vec<(Reason, usize)> = Vec::new();
        let start = if n == 0 { 0 } else { self.next_start % n };
        let mut processed = 0;
        for offset in 0..n {
            if feasible.len() >= want {
                break;
            }
            processed += 1;
            let i = (start + offset) % n;
            let node = &nodes[i];
            if node.node.is_none() {
                continue;
            }
            if self.fits(pod, node, &mut reasons) {
                feasible.push(i);
            } else {
                for r in reasons.drain(..) {
                    match failures.iter_mut().find(|(x, _)| *x == r) {
                        Some((_, c)) => *c += 1,
                        None => failures.push((r, 1)),
                    }
                }
            }
        }
        if n > 0 {
            self.next_start = (start + processed) % n;
        }
        self.reasons = reasons;
        let result = if feasible.is_empty() {
            failures.sort();
            Err(FitError {
                num_nodes: real,
                reasons: failures,
            })
        } else if feasible.len() == 1 || self.priorities.is_empty() {
            // Nothing to compare: skip scoring, but still spread ties fairly.
            Ok(feasible[self.rng.random_range(0..feasible.len())])
        } else {
            Ok(self.pick(pod, nodes, &feasible))
        };
        self.feasible = feasible;
        result
    }

    /// Scores the feasible nodes and picks the best, ties at random.
    fn pick(&mut self, pod: &PodInfo, nodes: &[NodeInfo], feasible: &[usize]) -> usize {
        let refs: Vec<&NodeInfo> = feasible.iter().map(|&i| &nodes[i]).collect();
        self.totals.clear();
        self.totals.resize(refs.len(), 0);
        self.scores.resize(refs.len(), 0);
        for (p, weight) in &self.priorities {
            p.score(pod, &refs, &mut self.scores[..refs.len()]);
            for (t, s) in self.totals.iter_mut().zip(&self.scores) {
                *t += s * weight;
            }
        }
        let mut best = 0;
        let mut best_score = i64::MIN;
        let mut ties = 0u32;
        for (k, &t) in self.totals.iter().enumerate() {
            if t > best_score {
                best_score = t;
                best = k;
                ties = 1;
            } else if t == best_score {
                ties += 1;
                if self.rng.random_range(0..ties) == 0 {
                    best = k;
                }
            }
        }
        feasible[best]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predicates::tests::{node, pod};
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};

    /// A node info with a node object, so the algorithm considers it.
    fn real(mut n: NodeInfo) -> NodeInfo {
        n.node = Some(Arc::new(Node {
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }));
        n
    }

    fn default_algorithm() -> Algorithm {
        let r = Registry::default();
        let policy = r.provider_policy(DEFAULT_PROVIDER, &[]).unwrap();
        let mut a = r.algorithm(&policy, 0).unwrap();
        a.seed(7);
        a
    }

    #[test]
    fn sampling_follows_kube_schedulers_adaptive_percentage() {
        assert_eq!(num_feasible_nodes_to_find(50, 0), 50);
        assert_eq!(num_feasible_nodes_to_find(1000, 0), 420);
        assert_eq!(num_feasible_nodes_to_find(5000, 0), 500);
        assert_eq!(num_feasible_nodes_to_find(6000, 0), 300);
        assert_eq!(num_feasible_nodes_to_find(1000, 100), 1000);
        assert_eq!(num_feasible_nodes_to_find(1000, 5), 100);
    }

    #[test]
    fn unschedulable_message_counts_reasons_like_kube_scheduler() {
        let mut cordoned = real(node("a", 4000, 1 << 30, 10));
        cordoned.unschedulable = true;
        let small1 = real(node("b", 100, 1 << 30, 10));
        let small2 = real(node("c", 100, 1 << 30, 10));
        let mut a = default_algorithm();
        let err = a
            .schedule(&pod("p", 500, 0), &[cordoned, small1, small2])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."
        );
        assert_eq!(
            FitError {
                num_nodes: 0,
                reasons: vec![]
            }
            .to_string(),
            "no nodes available to schedule pods"
        );
    }

    #[test]
    fn picks_the_least_loaded_fitting_node() {
        let mut busy = real(node("busy", 4000, 8 << 30, 10));
        busy.add_pod(Arc::new(pod("x", 3000, 6 << 30)));
        let idle = real(node("idle", 4000, 8 << 30, 10));
        let too_small = real(node("tiny", 100, 1 << 20, 10));
        let nodes = [busy, too_small, idle];
        let mut a = default_algorithm();
        for _ in 0..10 {
            assert_eq!(a.schedule(&pod("p", 500, 1 << 30), &nodes), Ok(2));
        }
    }

    #[test]
    fn ties_are_spread_over_all_equal_nodes() {
        let nodes: Vec<NodeInfo> = (0..4)
            .map(|i| real(node(&format!("n{i}"), 4000, 8 << 30, 110)))
            .collect();
        let mut a = default_algorithm();
        let mut hits = [0; 4];
        for _ in 0..400 {
            hits[a.schedule(&pod("p", 100, 1 << 20), &nodes).unwrap()] += 1;
        }
        assert!(
            hits.iter().all(|&h| h > 50),
            "every tied node chosen: {hits:?}"
        );
    }

    #[test]
    fn nodes_without_objects_are_not_candidates() {
        let ghost = node("ghost", 4000, 8 << 30, 10);
        let mut a = default_algorithm();
        let err = a.schedule(&pod("p", 1, 1), &[ghost]).unwrap_err();
        assert_eq!(err.num_nodes, 0);
    }

    #[test]
    fn sampling_stops_filtering_early_and_rotates_the_start() {
        let nodes: Vec<NodeInfo> = (0..1000)
            .map(|i| real(node(&format!("n{i}"), 4000, 8 << 30, 110)))
            .collect();
        let mut a = default_algorithm();
        let first = a.schedule(&pod("p", 1, 1), &nodes).unwrap();
        assert!(first < 420, "first decision looks at nodes 0..420: {first}");
        let second = a.schedule(&pod("p", 1, 1), &nodes).unwrap();
        assert!(
            (420..840).contains(&second),
            "second decision starts where the first stopped: {second}"
        );
    }

    #[test]
    fn registry_providers_weights_and_policies() {
        let r = Registry::default();
        assert_eq!(r.provider_names(), vec![DEFAULT_PROVIDER.to_string()]);
        assert!(matches!(
            r.provider_policy("Nope", &[]),
            Err(Error::UnknownProvider(_))
        ));
        let p = r
            .provider_policy(
                DEFAULT_PROVIDER,
                &[
                    ("LeastRequestedPriority".into(), 3),
                    ("SelectorSpreadPriority".into(), 0),
                ],
            )
            .unwrap();
        assert_eq!(
            p.priorities
                .iter()
                .map(|p| (p.name.as_str(), p.weight))
                .collect::<Vec<_>>(),
            vec![
                ("LeastRequestedPriority", 3),
                ("BalancedResourceAllocation", 1)
            ]
        );
        assert!(matches!(
            r.provider_policy(DEFAULT_PROVIDER, &[("Bogus".into(), 1)]),
            Err(Error::UnknownPriority(_))
        ));

        let policy: Policy = serde_json::from_str(
            r#"{"predicates": [{"name": "PodFitsResources"},
                               {"name": "CheckNodeLabelPresence",
                                "argument": {"labelsPresence": {"labels": ["zone"], "presence": true}}}],
                "priorities": [{"name": "CalculateNodeLabelPriority", "weight": 2,
                                "argument": {"labelPreference": {"label": "ssd", "presence": true}}}]}"#,
        )
        .unwrap();
        let mut a = r.algorithm(&policy, 100).unwrap();
        a.seed(1);
        let mut zoned = real(node("z", 4000, 8 << 30, 10));
        zoned.labels = [("zone".to_string(), "a".to_string())].into();
        let mut zoned_ssd = zoned.clone();
        zoned_ssd.labels.insert("ssd".into(), "1".into());
        let unzoned = real(node("u", 4000, 8 << 30, 10));
        for _ in 0..5 {
            assert_eq!(
                a.schedule(
                    &pod("p", 1, 1),
                    &[unzoned.clone(), zoned.clone(), zoned_ssd.clone()]
                ),
                Ok(2)
            );
        }
        let missing: Policy =
            serde_json::from_str(r#"{"predicates": [{"name": "CheckNodeLabelPresence"}]}"#)
                .unwrap();
        assert!(matches!(
            r.algorithm(&missing, 0),
            Err(Error::MissingArgument(_))
        ));
        let bad_weight: Policy = serde_json::from_str(
            r#"{"priorities": [{"name": "LeastRequestedPriority", "weight": -1}]}"#,
        )
        .unwrap();
        assert!(matches!(
            r.algorithm(&bad_weight, 0),
            Err(Error::BadWeight { .. })
        ));
    }
}

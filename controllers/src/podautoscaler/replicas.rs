//! The replica count one resource metric asks for (kube-controller-manager's replica
//! calculator): which pods count, and the usage ratio against the target, rebalanced for pods
//! that are missing or not ready.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use skiff_meta::quantity;

use super::{PodUsage, Tunables, span};
use crate::pods::{condition, is_deleting, phase};

pub(super) fn milli(q: &Quantity) -> Option<i64> {
    quantity::parse_k8s(q).ok().map(|q| q.milli_value())
}

/// One measured pod's use of the resource (of one container, or summed over its containers),
/// or its value of a `Pods` metric.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The end of the measured window.
    pub timestamp: Timestamp,
    /// Its length.
    pub window: Duration,
    /// The value, in thousandths of the unit.
    pub milli: i64,
}

pub(super) fn samples(
    usage: &BTreeMap<String, PodUsage>,
    resource: &str,
    container: Option<&str>,
) -> BTreeMap<String, Sample> {
    usage
        .iter()
        .filter_map(|(pod, u)| {
            let milli = match container {
                Some(c) => *u.containers.get(c)?.get(resource)?,
                None => {
                    let values: Vec<i64> = u
                        .containers
                        .values()
                        .filter_map(|r| r.get(resource).copied())
                        .collect();
                    if values.is_empty() {
                        return None;
                    }
                    values.iter().sum()
                }
            };
            Some((
                pod.clone(),
                Sample {
                    timestamp: u.timestamp,
                    window: u.window,
                    milli,
                },
            ))
        })
        .collect()
}

/// A resource metric's current value.
pub(super) struct Value {
    pub(super) utilization: Option<i32>,
    pub(super) average_milli: i64,
}

/// The pods of a target sorted as the replica calculation counts them.
#[derive(Default)]
struct Groups {
    ready: i64,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

pub(super) struct ResourceCalc<'a> {
    pub(super) resource: &'a str,
    pub(super) container: Option<&'a str>,
    pub(super) current: i32,
    pub(super) tunables: &'a Tunables,
    pub(super) now: Timestamp,
}

impl ResourceCalc<'_> {
    fn group(&self, pods: &[&Pod], samples: &BTreeMap<String, Sample>) -> Groups {
        let mut groups = Groups::default();
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if is_deleting(&pod.metadata) || phase(pod) == "Failed" {
                groups.ignored.insert(name);
                continue;
            }
            if phase(pod) == "Pending" {
                groups.unready.insert(name);
                continue;
            }
            let Some(sample) = samples.get(&name) else {
                groups.missing.insert(name);
                continue;
            };
            if self.resource == "cpu" && self.cpu_unready(pod, sample) {
                groups.unready.insert(name);
                continue;
            }
            groups.ready += 1;
        }
        groups
    }

    /// Whether a pod's CPU sample is not to be trusted yet: a pod in its initialization period
    /// that is not ready or was not measured over a whole window since it became ready, or a
    /// pod that has never been ready.
    fn cpu_unready(&self, pod: &Pod, sample: &Sample) -> bool {
        let ready = condition(pod, "Ready");
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0);
        let (Some(ready), Some(started)) = (ready, started) else {
            return true;
        };
        let transition = ready.last_transition_time.as_ref().map_or(started, |t| t.0);
        if started + span(self.tunables.cpu_initialization_period) > self.now {
            ready.status == "False" || sample.timestamp < transition + span(sample.window)
        } else {
            ready.status == "False"
                && started + span(self.tunables.initial_readiness_delay) > transition
        }
    }

    /// The sum of the pods' requests for the resource (of the container, or of all), by pod.
    fn requests(&self, pods: &[&Pod]) -> Result<BTreeMap<String, i64>, String> {
        let mut out = BTreeMap::new();
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let mut sum = 0;
            for c in pod
                .spec
                .as_ref()
                .map(|s| &s.containers[..])
                .unwrap_or_default()
            {
                if self.container.is_some_and(|want| want != c.name) {
                    continue;
                }
                let request = c
                    .resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get(self.resource))
                    .and_then(milli);
                match request {
                    Some(r) => sum += r,
                    None => {
                        return Err(format!(
                            "missing request for {} in container {} of Pod {name}",
                            self.resource, c.name
                        ));
                    }
                }
            }
            out.insert(name, sum);
        }
        Ok(out)
    }

    /// The pods sorted, and the samples that count: none of ignored or unready pods. An error
    /// when there are no pods, or no sample is left.
    fn counted(
        &self,
        pods: &[&Pod],
        mut samples: BTreeMap<String, Sample>,
    ) -> Result<(Groups, BTreeMap<String, Sample>), String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let groups = self.group(pods, &samples);
        samples.retain(|pod, _| !groups.ignored.contains(pod) && !groups.unready.contains(pod));
        if samples.is_empty() && self.resource.is_empty() {
            return Err("did not receive metrics for any ready pods".into());
        }
        if samples.is_empty() {
            return Err(format!(
                "unable to get metrics for resource {}: no metrics returned from resource metrics API",
                self.resource
            ));
        }
        Ok((groups, samples))
    }

    /// The proposal from the measured pods alone, when no pod is missing and the unready ones
    /// need not count (`unready_up` false): the current count within the tolerance, else the
    /// ready pods scaled by `ratio`. `None` when the missing or unready pods must be filled in.
    fn direct(&self, groups: &Groups, ratio: f64, unready_up: bool) -> Option<i32> {
        if unready_up || !groups.missing.is_empty() {
            return None;
        }
        Some(if self.tunables.within_tolerance(ratio) {
            self.current
        } else {
            (ratio * groups.ready as f64).ceil() as i32
        })
    }

    /// Replicas for a utilization target in percent of the requests.
    pub(super) fn utilization(
        &self,
        pods: &[&Pod],
        samples: BTreeMap<String, Sample>,
        target: i32,
    ) -> Result<(i32, Value), String> {
        let (groups, samples) = self.counted(pods, samples)?;
        let requests = self.requests(pods)?;
        let ratio_of = |samples: &BTreeMap<String, i64>| -> Result<(f64, i32, i64), String> {
            let (mut used, mut requested, mut n) = (0i64, 0i64, 0i64);
            for (pod, value) in samples {
                if let Some(request) = requests.get(pod) {
                    used += value;
                    requested += request;
                    n += 1;
                }
            }
            if requested == 0 {
                return Err("no metrics returned matched known pods".into());
            }
            let utilization = (used * 100 / requested) as i32;
            Ok((
                f64::from(utilization) / f64::from(target),
                utilization,
                used / n,
            ))
        };
        let mut values: BTreeMap<String, i64> =
            samples.iter().map(|(p, s)| (p.clone(), s.milli)).collect();
        let (ratio, utilization, raw) = ratio_of(&values)?;
        let value = Value {
            utilization: Some(utilization),
            average_milli: raw,
        };
        let unready_up = !groups.unready.is_empty() && ratio > 1.0;
        if let Some(replicas) = self.direct(&groups, ratio, unready_up) {
            return Ok((replicas, value));
        }
        if ratio < 1.0 {
            // On the way down, a pod not measured counts as using all it asked for.
            let fallback = i64::from(target.max(100));
            for pod in &groups.missing {
                values.insert(
                    pod.clone(),
                    requests.get(pod).copied().unwrap_or(0) * fallback / 100,
                );
            }
        } else if ratio > 1.0 {
            for pod in &groups.missing {
                values.insert(pod.clone(), 0);
            }
        }
        if unready_up {
            for pod in &groups.unready {
                values.insert(pod.clone(), 0);
            }
        }
        let (new_ratio, _, _) = ratio_of(&values)?;
        Ok((self.rebalanced(ratio, new_ratio, values.len()), value))
    }

    /// Replicas for an average value target, in thousandths of the unit per pod.
    pub(super) fn average(
        &self,
        pods: &[&Pod],
        samples: BTreeMap<String, Sample>,
        target: i64,
    ) -> Result<(i32, Value), String> {
        let (groups, samples) = self.counted(pods, samples)?;
        let ratio_of = |values: &BTreeMap<String, i64>| {
            let average = values.values().sum::<i64>() / values.len() as i64;
            (average as f64 / target as f64, average)
        };
        let mut values: BTreeMap<String, i64> =
            samples.iter().map(|(p, s)| (p.clone(), s.milli)).collect();
        let (ratio, average) = ratio_of(&values);
        let value = Value {
            utilization: None,
            average_milli: average,
        };
        let unready_up = !groups.unready.is_empty() && ratio > 1.0;
        if let Some(replicas) = self.direct(&groups, ratio, unready_up) {
            return Ok((replicas, value));
        }
        let fill = if ratio < 1.0 { target } else { 0 };
        if ratio != 1.0 {
            for pod in &groups.missing {
                values.insert(pod.clone(), fill);
            }
        }
        if unready_up {
            for pod in &groups.unready {
                values.insert(pod.clone(), 0);
            }
        }
        let (new_ratio, _) = ratio_of(&values);
        Ok((self.rebalanced(ratio, new_ratio, values.len()), value))
    }

    /// The proposal once missing and unready pods are assumed the worst for the move: none when
    /// that moves it into the tolerance or turns it around.
    fn rebalanced(&self, ratio: f64, new_ratio: f64, counted: usize) -> i32 {
        if self.tunables.within_tolerance(new_ratio)
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return self.current;
        }
        let proposal = (new_ratio * counted as f64).ceil() as i32;
        if (new_ratio < 1.0 && proposal > self.current)
            || (new_ratio > 1.0 && proposal < self.current)
        {
            return self.current;
        }
        proposal
    }
}

//! The StatefulSet controller's pure part: pods with stable names `<set>-<ordinal>`, created
//! in order and each only once its predecessors run and are ready (`OrderedReady`), or all at
//! once (`Parallel`); scaled down from the highest ordinal; updated by rolling pods of the old
//! revision in reverse ordinal order down to `partition`, one at a time, or only when deleted
//! (`OnDelete`); and the status (`currentRevision`/`updateRevision` and the counts).
//!
//! A revision is `<set>-<template hash>`, carried by each pod in its `controller-revision-hash`
//! label and kept as a ControllerRevision ([`crate::history`]), so a pod below the partition
//! that is deleted comes back at the current revision's template, not the update's.
//!
//! With `rollingUpdate.maxUnavailable` set, up to that many pods (counting those already
//! unavailable) are replaced at once, as kube-controller-manager does with its
//! `MaxUnavailableStatefulSet` feature on; unset, one at a time, each waiting for the last.
//!
//! Each `volumeClaimTemplates` entry gives every ordinal a claim `<template>-<set>-<ordinal>`,
//! made before its pod and mounted by it. Claims stay when pods go, on scale-down and when the
//! set is deleted, unless `persistentVolumeClaimRetentionPolicy` says Delete: `whenDeleted`
//! makes the set the claims' owner (the garbage collector removes them with it), `whenScaled`
//! deletes the claims of ordinals scaled away once their pods are gone.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::daemonset::{REVISION_HASH, template_hash};
use crate::pods;

/// The label naming a pod of a StatefulSet (what a per-pod Service selects).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label holding a pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// What one sync does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods to create (stable names, so a create that finds the pod already there is fine).
    pub create: Vec<Pod>,
    /// Claims the pods to create mount, to create first (a claim already there is fine).
    pub claims: Vec<PersistentVolumeClaim>,
    /// Pods to delete, by name.
    pub delete: Vec<String>,
    /// The status to report.
    pub status: StatefulSetStatus,
}

/// The set's desired replica count (1 when unset).
pub fn spec_replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .unwrap_or(0)
}

fn parallel(set: &StatefulSet) -> bool {
    set.spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        == Some("Parallel")
}

/// How many pods a rolling update may take down at once: `None` when `maxUnavailable` is unset
/// (one at a time, waiting for each), else at least 1 (a percentage of the replicas, rounded
/// down).
fn max_unavailable(set: &StatefulSet) -> Option<i32> {
    let value = set
        .spec
        .as_ref()?
        .update_strategy
        .as_ref()?
        .rolling_update
        .as_ref()?
        .max_unavailable
        .clone()?;
    let n = match value {
        IntOrString::Int(n) => n,
        IntOrString::String(p) => {
            let percent: i64 = p.trim_end_matches('%').parse().unwrap_or(0);
            (percent * i64::from(spec_replicas(set).max(0)) / 100) as i32
        }
    };
    Some(n.max(1))
}

/// The partition of a RollingUpdate (0 when unset); `None` for OnDelete.
fn partition(set: &StatefulSet) -> Option<i32> {
    let strategy = set
        .spec
        .as_ref()?
        .update_strategy
        .clone()
        .unwrap_or_default();
    match strategy.type_.as_deref() {
        Some("OnDelete") => None,
        _ => Some(
            strategy
                .rolling_update
                .and_then(|r| r.partition)
                .unwrap_or(0),
        ),
    }
}

/// The name of the pod at `ordinal`.
pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!(
        "{}-{ordinal}",
        set.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The ordinal of a pod of `set` by its name (`None` for a pod not named like one of its own).
pub fn ordinal_of(set: &StatefulSet, pod: &Pod) -> Option<i32> {
    let name = pod.metadata.name.as_deref()?;
    let rest = name.strip_prefix(set.metadata.name.as_deref()?)?;
    let digits = rest.strip_prefix('-')?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    digits.parse().ok().filter(|o: &i32| *o >= 0)
}

/// The revision the set's template is at now.
pub fn update_revision(set: &StatefulSet) -> String {
    let template = set.spec.clone().unwrap_or_default().template;
    format!(
        "{}-{}",
        set.metadata.name.as_deref().unwrap_or_default(),
        template_hash(
            &template,
            set.status.as_ref().and_then(|s| s.collision_count)
        )
    )
}

/// The revision of a pod (its `controller-revision-hash` label).
pub fn revision_of(pod: &Pod) -> Option<&str> {
    pods::labels(&pod.metadata)
        .get(REVISION_HASH)
        .map(String::as_str)
}

/// The claim of template `template` for the pod at `ordinal`.
pub fn claim_name(template: &str, set: &StatefulSet, ordinal: i32) -> String {
    format!(
        "{template}-{}-{ordinal}",
        set.metadata.name.as_deref().unwrap_or_default()
    )
}

fn retention(set: &StatefulSet) -> (bool, bool) {
    let policy = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.clone())
        .unwrap_or_default();
    (
        policy.when_deleted.as_deref() == Some("Delete"),
        policy.when_scaled.as_deref() == Some("Delete"),
    )
}

/// The claims of the pod at `ordinal`, from the templates: named by [`claim_name`], labelled
/// with the set's selector labels, owned by the set when `whenDeleted` is Delete.
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let spec = set.spec.clone().unwrap_or_default();
    let (owned_by_set, _) = retention(set);
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    spec.volume_claim_templates
        .unwrap_or_default()
        .into_iter()
        .map(|template| {
            let template_name = template.metadata.name.clone().unwrap_or_default();
            let mut claim = PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(&template_name, set, ordinal)),
                    namespace: set.metadata.namespace.clone(),
                    labels: template.metadata.labels.clone(),
                    annotations: template.metadata.annotations.clone(),
                    ..ObjectMeta::default()
                },
                spec: template.spec.clone(),
                status: None,
            };
            claim
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .extend(selector_labels.clone());
            if owned_by_set {
                claim.metadata.owner_references = Some(vec![pods::controller_ref(
                    "apps/v1",
                    "StatefulSet",
                    &set.metadata,
                )]);
            }
            claim
        })
        .collect()
}

/// The claims to delete under `whenScaled: Delete`: of `existing` claim names, those of
/// ordinals out of range whose pod is gone.
pub fn claims_to_delete(set: &StatefulSet, existing: &[&str], owned: &[&Pod]) -> Vec<String> {
    let (_, delete_on_scale) = retention(set);
    if !delete_on_scale || pods::is_deleting(&set.metadata) {
        return Vec::new();
    }
    let start = start_ordinal(set);
    let end = start + spec_replicas(set).max(0);
    let live: std::collections::BTreeSet<i32> =
        owned.iter().filter_map(|p| ordinal_of(set, p)).collect();
    let set_name = set.metadata.name.as_deref().unwrap_or_default();
    let templates: Vec<String> = set
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| t.metadata.name.clone())
        .collect();
    existing
        .iter()
        .filter(|claim| {
            templates.iter().any(|t| {
                claim
                    .strip_prefix(&format!("{t}-{set_name}-"))
                    .and_then(|o| o.parse::<i32>().ok())
                    .is_some_and(|o| !(start..end).contains(&o) && !live.contains(&o))
            })
        })
        .map(|c| c.to_string())
        .collect()
}

/// The pod at `ordinal`, from `template` at `revision`: a stable name, hostname and subdomain
/// (the governing Service), the revision and ordinal labels, a controller reference.
pub fn new_pod(set: &StatefulSet, ordinal: i32, template: &PodTemplateSpec, revision: &str) -> Pod {
    let spec = set.spec.clone().unwrap_or_default();
    let name = pod_name(set, ordinal);
    let mut template = template.clone();
    let tm = template.metadata.get_or_insert_with(ObjectMeta::default);
    let labels = tm.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(REVISION_HASH.into(), revision.to_string());
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    let ps = template.spec.get_or_insert_with(Default::default);
    ps.hostname = Some(name.clone());
    if let Some(service) = spec.service_name.filter(|s| !s.is_empty()) {
        ps.subdomain = Some(service);
    }
    // Each claim template is a volume of that name, replacing one the template declares.
    for template in spec.volume_claim_templates.iter().flatten() {
        let Some(volume) = template.metadata.name.clone() else {
            continue;
        };
        let volumes = ps.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != volume);
        volumes.push(Volume {
            name: volume.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&volume, set, ordinal),
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    let ns = set.metadata.namespace.as_deref().unwrap_or_default();
    let owner = pods::controller_ref("apps/v1", "StatefulSet", &set.metadata);
    let mut pod = pods::pod_from_template(&template, ns, &name, owner);
    pod.metadata.generate_name = None;
    pod.metadata.name = Some(name);
    pod
}

/// Whether a pod counts as up for the ordering: running, ready, not being deleted.
fn healthy(pod: &Pod) -> bool {
    pods::phase(pod) == "Running" && pods::is_ready(pod) && !pods::is_deleting(&pod.metadata)
}

/// One sync of `set` given the pods it owns and the template of its current revision (from its
/// history; `None` when that revision is not known, and then pods are made at the update
/// revision).
pub fn plan(
    set: &StatefulSet,
    owned: &[&Pod],
    current_template: Option<&PodTemplateSpec>,
    now: Timestamp,
) -> Plan {
    let replicas = spec_replicas(set).max(0);
    let start = start_ordinal(set);
    let end = start + replicas;
    let update = update_revision(set);
    let current = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| update.clone());
    let monotonic = !parallel(set);
    let update_template = set.spec.clone().unwrap_or_default().template;
    // Below the partition a missing pod comes back as it was: at the current revision.
    let template_for = |ordinal: i32| -> (&PodTemplateSpec, &str) {
        match (partition(set), current_template) {
            (Some(partition), Some(template)) if ordinal < partition && current != update => {
                (template, current.as_str())
            }
            _ => (&update_template, update.as_str()),
        }
    };

    // The pods in range by ordinal, and the condemned ones (out of range), highest first.
    let mut slots: BTreeMap<i32, &Pod> = BTreeMap::new();
    let mut condemned: Vec<(i32, &Pod)> = Vec::new();
    for pod in owned {
        match ordinal_of(set, pod) {
            Some(o) if (start..end).contains(&o) => {
                slots.insert(o, pod);
            }
            Some(o) => condemned.push((o, pod)),
            None => {}
        }
    }
    condemned.sort_by_key(|(o, _)| std::cmp::Reverse(*o));

    let mut plan = Plan {
        status: status(set, owned, &current, &update, now),
        ..Plan::default()
    };
    let deleting_set = pods::is_deleting(&set.metadata);
    if deleting_set {
        return plan;
    }

    // Bring every ordinal up, in order.
    let mut blocked = false;
    for ordinal in start..end {
        match slots.get(&ordinal) {
            None => {
                plan.claims.extend(claims_for(set, ordinal));
                let (template, revision) = template_for(ordinal);
                plan.create.push(new_pod(set, ordinal, template, revision));
                if monotonic {
                    blocked = true;
                    break;
                }
            }
            Some(pod) if pods::is_terminal(pod) && !pods::is_deleting(&pod.metadata) => {
                // A failed (or finished) pod is replaced under the same name.
                plan.delete
                    .push(pod.metadata.name.clone().unwrap_or_default());
                if monotonic {
                    blocked = true;
                    break;
                }
            }
            Some(pod) if monotonic && !healthy(pod) => {
                blocked = true;
                break;
            }
            Some(_) => {}
        }
    }
    if blocked {
        return plan;
    }

    // Scale down from the highest ordinal: one at a time once the rest is up, or all at once.
    for (_, pod) in &condemned {
        if pods::is_deleting(&pod.metadata) {
            if monotonic {
                return plan;
            }
            continue;
        }
        plan.delete
            .push(pod.metadata.name.clone().unwrap_or_default());
        if monotonic {
            return plan;
        }
    }
    if !condemned.is_empty() && monotonic {
        return plan;
    }

    // Roll the pods of another revision, highest ordinal first, down to the partition.
    if let (Some(partition), Some(budget)) = (partition(set), max_unavailable(set)) {
        // Up to `budget` pods down at once, counting those already down anywhere in the set.
        let unavailable = slots.values().filter(|p| !healthy(p)).count() as i32;
        let mut room = budget - unavailable;
        for (ordinal, pod) in slots.iter().rev() {
            if room <= 0 || *ordinal < partition {
                break;
            }
            if revision_of(pod) != Some(update.as_str()) && !pods::is_deleting(&pod.metadata) {
                plan.delete
                    .push(pod.metadata.name.clone().unwrap_or_default());
                // A pod already down is counted already.
                if healthy(pod) {
                    room -= 1;
                }
            }
        }
    } else if let Some(partition) = partition(set) {
        for (ordinal, pod) in slots.iter().rev() {
            if *ordinal < partition {
                break;
            }
            if revision_of(pod) != Some(update.as_str()) {
                if !pods::is_deleting(&pod.metadata) {
                    plan.delete
                        .push(pod.metadata.name.clone().unwrap_or_default());
                }
                break;
            }
            if !healthy(pod) {
                // Wait for the updated pod before touching the next one.
                break;
            }
        }
    }
    plan
}

/// The status of `set` with `owned` pods, `current` and `update` being its revisions. The
/// rollout is complete once every replica is at the update revision: the current revision
/// becomes the update revision.
pub fn status(
    set: &StatefulSet,
    owned: &[&Pod],
    current: &str,
    update: &str,
    now: Timestamp,
) -> StatefulSetStatus {
    let min_ready = set
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0);
    let live: Vec<&&Pod> = owned
        .iter()
        .filter(|p| ordinal_of(set, p).is_some() && !pods::is_terminal(p))
        .collect();
    let count = |f: &dyn Fn(&Pod) -> bool| live.iter().filter(|p| f(p)).count() as i32;
    let ready = count(&|p| pods::is_ready(p));
    let available = count(&|p| pods::is_available(p, min_ready, now));
    let updated = count(&|p| revision_of(p) == Some(update));
    let at_current = count(&|p| revision_of(p) == Some(current));
    let replicas = live.len() as i32;
    let complete = updated == spec_replicas(set) && replicas == updated;
    let old = set.status.clone().unwrap_or_default();
    StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas,
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        current_replicas: Some(if complete { updated } else { at_current }),
        updated_replicas: Some(updated),
        current_revision: Some(if complete { update } else { current }.to_string()),
        update_revision: Some(update.to_string()),
        collision_count: old.collision_count,
        conditions: old.conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::{pod, running};
    use k8s_openapi::api::apps::v1::{
        RollingUpdateStatefulSetStrategy, StatefulSetSpec, StatefulSetUpdateStrategy,
    };
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn set(replicas: i32, image: &str) -> StatefulSet {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-web".into()),
                generation: Some(1),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(replicas),
                service_name: Some("web".into()),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    ..LabelSelector::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some(image.into()),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    }),
                },
                ..StatefulSetSpec::default()
            }),
            status: None,
        }
    }

    /// The pod at `ordinal` of `s`, at `s`'s update revision, running and ready when `ready`.
    fn member(s: &StatefulSet, ordinal: i32, ready: bool) -> Pod {
        let mut p = new_pod(
            s,
            ordinal,
            &s.spec.clone().unwrap().template,
            &update_revision(s),
        );
        let fixture = pod(&pod_name(s, ordinal), &[], 0);
        p.metadata.uid = fixture.metadata.uid;
        p.metadata.creation_timestamp = fixture.metadata.creation_timestamp;
        p.status = fixture.status;
        if ready {
            running(p, "n", "127.0.0.2", Some(0))
        } else {
            p
        }
    }

    fn names(pods: &[Pod]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    fn now() -> Timestamp {
        crate::pods::testing::at(100)
    }

    #[test]
    fn stable_names_and_ordinals() {
        let s = set(3, "v1");
        let p = new_pod(&s, 2, &s.spec.clone().unwrap().template, "web-abc");
        assert_eq!(p.metadata.name.as_deref(), Some("web-2"));
        assert_eq!(p.metadata.generate_name, None);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("web"));
        let labels = pods::labels(&p.metadata);
        assert_eq!(labels[POD_NAME_LABEL], "web-2");
        assert_eq!(labels[POD_INDEX_LABEL], "2");
        assert_eq!(labels[REVISION_HASH], "web-abc");
        assert_eq!(labels["app"], "web");
        assert_eq!(ordinal_of(&s, &p), Some(2));
        for bad in [
            "web", "web-", "web-01", "web-x", "webby-1", "other-1", "web--1",
        ] {
            assert_eq!(ordinal_of(&s, &pod(bad, &[], 0)), None, "{bad}");
        }
    }

    #[test]
    fn ordered_ready_creates_one_pod_at_a_time_after_its_predecessors_are_ready() {
        let s = set(3, "v1");
        assert_eq!(names(&plan(&s, &[], None, now()).create), ["web-0"]);
        let p0 = member(&s, 0, false);
        let p = plan(&s, &[&p0], None, now());
        assert!(
            p.create.is_empty() && p.delete.is_empty(),
            "web-0 is not ready yet"
        );
        let p0 = member(&s, 0, true);
        assert_eq!(names(&plan(&s, &[&p0], None, now()).create), ["web-1"]);
        let p1 = member(&s, 1, true);
        assert_eq!(names(&plan(&s, &[&p0, &p1], None, now()).create), ["web-2"]);
        let p2 = member(&s, 2, true);
        let done = plan(&s, &[&p0, &p1, &p2], None, now());
        assert!(done.create.is_empty() && done.delete.is_empty());
        assert_eq!(done.status.replicas, 3);
        assert_eq!(done.status.ready_replicas, Some(3));
    }

    #[test]
    fn parallel_creates_every_missing_pod_at_once() {
        let mut s = set(3, "v1");
        s.spec.as_mut().unwrap().pod_management_policy = Some("Parallel".into());
        let p1 = member(&s, 1, false);
        assert_eq!(
            names(&plan(&s, &[&p1], None, now()).create),
            ["web-0", "web-2"]
        );
    }

    #[test]
    fn a_failed_pod_is_replaced_under_its_name() {
        let s = set(2, "v1");
        let p0 = member(&s, 0, true);
        let mut p1 = member(&s, 1, true);
        p1.status.as_mut().unwrap().phase = Some("Failed".into());
        let p = plan(&s, &[&p0, &p1], None, now());
        assert_eq!(p.delete, ["web-1"]);
        assert!(
            p.create.is_empty(),
            "it comes back once the old one is gone"
        );
    }

    #[test]
    fn scale_down_goes_from_the_highest_ordinal_one_at_a_time() {
        let s3 = set(3, "v1");
        let all: Vec<Pod> = (0..3).map(|o| member(&s3, o, true)).collect();
        let refs: Vec<&Pod> = all.iter().collect();
        let s1 = set(1, "v1");
        assert_eq!(plan(&s1, &refs, None, now()).delete, ["web-2"]);
        let mut going = all.clone();
        going[2].metadata.deletion_timestamp = Some(pods::time("2023-11-14T22:13:20Z"));
        let refs: Vec<&Pod> = going.iter().collect();
        assert!(
            plan(&s1, &refs, None, now()).delete.is_empty(),
            "web-1 waits until web-2 is gone"
        );
        let refs: Vec<&Pod> = all[..2].iter().collect();
        assert_eq!(plan(&s1, &refs, None, now()).delete, ["web-1"]);
        // Parallel: every condemned pod at once.
        let mut p1 = set(1, "v1");
        p1.spec.as_mut().unwrap().pod_management_policy = Some("Parallel".into());
        let refs: Vec<&Pod> = all.iter().collect();
        assert_eq!(plan(&p1, &refs, None, now()).delete, ["web-2", "web-1"]);
    }

    #[test]
    fn a_rolling_update_goes_in_reverse_ordinal_order_down_to_the_partition() {
        let old = set(3, "v1");
        let pods: Vec<Pod> = (0..3).map(|o| member(&old, o, true)).collect();
        let mut new = set(3, "v2");
        new.status = Some(StatefulSetStatus {
            current_revision: Some(update_revision(&old)),
            ..StatefulSetStatus::default()
        });
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&new, &refs, None, now());
        assert_eq!(p.delete, ["web-2"]);
        assert_eq!(p.status.update_revision, Some(update_revision(&new)));
        assert_eq!(p.status.current_revision, Some(update_revision(&old)));
        assert_eq!(p.status.updated_replicas, Some(0));

        // web-2 came back updated but not ready: wait.
        let mut rolled = pods.clone();
        rolled[2] = member(&new, 2, false);
        let refs: Vec<&Pod> = rolled.iter().collect();
        let p = plan(&new, &refs, None, now());
        assert!(p.delete.is_empty() && p.create.is_empty());
        // Ready: web-1 next.
        rolled[2] = member(&new, 2, true);
        let refs: Vec<&Pod> = rolled.iter().collect();
        assert_eq!(plan(&new, &refs, None, now()).delete, ["web-1"]);

        // With partition 2 only web-2 is updated.
        let mut part = new.clone();
        part.spec.as_mut().unwrap().update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateStatefulSetStrategy {
                partition: Some(2),
                max_unavailable: None,
            }),
        });
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(plan(&part, &refs, None, now()).delete, ["web-2"]);
        let refs: Vec<&Pod> = rolled.iter().collect();
        let p = plan(&part, &refs, None, now());
        assert!(p.delete.is_empty(), "web-1 is below the partition");
        assert_eq!(p.status.updated_replicas, Some(1));
        assert_eq!(p.status.current_revision, Some(update_revision(&old)));

        // Every pod updated: the rollout is complete.
        let done: Vec<Pod> = (0..3).map(|o| member(&new, o, true)).collect();
        let refs: Vec<&Pod> = done.iter().collect();
        let p = plan(&new, &refs, None, now());
        assert_eq!(p.status.current_revision, Some(update_revision(&new)));
        assert_eq!(p.status.current_replicas, Some(3));
    }

    fn rolling(
        mut s: StatefulSet,
        partition: i32,
        max_unavailable: Option<IntOrString>,
    ) -> StatefulSet {
        s.spec.as_mut().unwrap().update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateStatefulSetStrategy {
                partition: Some(partition),
                max_unavailable,
            }),
        });
        s
    }

    #[test]
    fn a_pod_below_the_partition_comes_back_at_the_current_revision() {
        let old = set(3, "v1");
        let mut new = rolling(set(3, "v2"), 2, None);
        new.status = Some(StatefulSetStatus {
            current_revision: Some(update_revision(&old)),
            ..StatefulSetStatus::default()
        });
        // web-1 (below the partition) was deleted; web-2 is updated already.
        let pods = [member(&old, 0, true), member(&new, 2, true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let old_template = old.spec.clone().unwrap().template;
        let p = plan(&new, &refs, Some(&old_template), now());
        assert_eq!(names(&p.create), ["web-1"]);
        let web1 = &p.create[0];
        assert_eq!(
            pods::labels(&web1.metadata)[REVISION_HASH],
            update_revision(&old)
        );
        assert_eq!(
            web1.spec.as_ref().unwrap().containers[0].image.as_deref(),
            Some("v1")
        );
        // Without the current revision's template, the update revision is all there is.
        let p = plan(&new, &refs, None, now());
        assert_eq!(
            pods::labels(&p.create[0].metadata)[REVISION_HASH],
            update_revision(&new)
        );
        // At or above the partition a pod is made at the update revision.
        let pods = [member(&old, 0, true), member(&old, 1, true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&new, &refs, Some(&old_template), now());
        assert_eq!(names(&p.create), ["web-2"]);
        assert_eq!(
            pods::labels(&p.create[0].metadata)[REVISION_HASH],
            update_revision(&new)
        );
    }

    #[test]
    fn max_unavailable_replaces_that_many_pods_at_once_counting_those_down() {
        let old = set(5, "v1");
        let pods: Vec<Pod> = (0..5).map(|o| member(&old, o, true)).collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let new = rolling(set(5, "v2"), 0, Some(IntOrString::Int(2)));
        assert_eq!(plan(&new, &refs, None, now()).delete, ["web-4", "web-3"]);
        // 40% of 5 replicas is 2 as well.
        let pct = rolling(set(5, "v2"), 0, Some(IntOrString::String("40%".into())));
        assert_eq!(plan(&pct, &refs, None, now()).delete, ["web-4", "web-3"]);
        // 10% of 5 rounds down to 0, and at least one pod is always allowed.
        let small = rolling(set(5, "v2"), 0, Some(IntOrString::String("10%".into())));
        assert_eq!(plan(&small, &refs, None, now()).delete, ["web-4"]);
        // web-4 updated but not ready yet, web-3 being replaced: no room left.
        let mut rolling_pods = pods.clone();
        rolling_pods[4] = member(&new, 4, false);
        rolling_pods[3].metadata.deletion_timestamp = Some(pods::time("2023-11-14T22:13:20Z"));
        let refs: Vec<&Pod> = rolling_pods.iter().collect();
        assert!(plan(&new, &refs, None, now()).delete.is_empty());
        // Both back and ready at v2: the next two.
        rolling_pods[3] = member(&new, 3, true);
        rolling_pods[4] = member(&new, 4, true);
        let refs: Vec<&Pod> = rolling_pods.iter().collect();
        assert_eq!(plan(&new, &refs, None, now()).delete, ["web-2", "web-1"]);
        // The partition still holds.
        let part = rolling(set(5, "v2"), 3, Some(IntOrString::Int(5)));
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(plan(&part, &refs, None, now()).delete, ["web-4", "web-3"]);
    }

    #[test]
    fn on_delete_never_deletes_for_an_update() {
        let old = set(2, "v1");
        let pods: Vec<Pod> = (0..2).map(|o| member(&old, o, true)).collect();
        let mut new = set(2, "v2");
        new.spec.as_mut().unwrap().update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("OnDelete".into()),
            rolling_update: None,
        });
        let refs: Vec<&Pod> = pods.iter().collect();
        let p = plan(&new, &refs, None, now());
        assert!(p.delete.is_empty() && p.create.is_empty());
    }

    #[test]
    fn a_set_being_deleted_does_nothing_but_report() {
        let mut s = set(2, "v1");
        s.metadata.deletion_timestamp = Some(pods::time("2023-11-14T22:13:20Z"));
        let p = plan(&s, &[], None, now());
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert_eq!(p.status.replicas, 0);
    }

    fn with_claims(mut s: StatefulSet, when_deleted: &str, when_scaled: &str) -> StatefulSet {
        let spec = s.spec.as_mut().unwrap();
        spec.volume_claim_templates = Some(vec![serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data", "labels": {"kind": "db"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap()]);
        spec.persistent_volume_claim_retention_policy = Some(
            k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some(when_deleted.into()),
                when_scaled: Some(when_scaled.into()),
            },
        );
        s
    }

    #[test]
    fn each_ordinal_gets_its_claims_before_its_pod() {
        let s = with_claims(set(3, "nginx:1"), "Retain", "Retain");
        let p = plan(&s, &[], None, now());
        assert_eq!(p.create.len(), 1);
        assert_eq!(p.claims.len(), 1);
        let claim = &p.claims[0];
        assert_eq!(claim.metadata.name.as_deref(), Some("data-web-0"));
        assert_eq!(claim.metadata.namespace.as_deref(), Some("ns"));
        let labels = claim.metadata.labels.clone().unwrap();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("kind").map(String::as_str), Some("db"));
        assert!(
            claim.metadata.owner_references.is_none(),
            "Retain: no owner"
        );
        let volumes = p.create[0].spec.as_ref().unwrap().volumes.clone().unwrap();
        assert_eq!(volumes.len(), 1);
        assert_eq!(volumes[0].name, "data");
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "data-web-0"
        );
        assert_eq!(claim_name("data", &s, 2), "data-web-2");
        let owned = with_claims(set(3, "nginx:1"), "Delete", "Retain");
        let refs = claims_for(&owned, 1)[0]
            .metadata
            .owner_references
            .clone()
            .unwrap();
        assert_eq!(refs[0].kind, "StatefulSet");
        assert_eq!(refs[0].uid, "uid-web");
    }

    #[test]
    fn claims_of_scaled_away_ordinals_go_only_when_asked() {
        let existing = [
            "data-web-0",
            "data-web-1",
            "data-web-2",
            "other-web-2",
            "data-webx-2",
        ];
        let retain = with_claims(set(1, "nginx:1"), "Retain", "Retain");
        assert!(claims_to_delete(&retain, &existing, &[]).is_empty());
        let delete = with_claims(set(1, "nginx:1"), "Retain", "Delete");
        let web2 = pod("web-2", &[("app", "web")], 0);
        assert_eq!(
            claims_to_delete(&delete, &existing, &[&web2]),
            vec!["data-web-1".to_string()],
            "web-2's claim waits for its pod"
        );
        assert_eq!(
            claims_to_delete(&delete, &existing, &[]),
            vec!["data-web-1".to_string(), "data-web-2".to_string()]
        );
    }
}

//! The Deployment controller's pure part: from a Deployment, the ReplicaSets it controls and their
//! pods, the next step of its rollout and the status it reports.
//!
//! A Deployment owns one ReplicaSet per pod template, named `<deployment>-<pod-template-hash>`, the
//! hash also added to the ReplicaSet's selector and its pods' labels so the sets never overlap.
//! Each ReplicaSet carries the annotations `kubectl rollout` reads: `deployment.kubernetes.io/revision`
//! (one more than the highest old revision when its template becomes current, so `rollout undo`
//! re-uses the old set under a new revision, the previous one kept in `revision-history`),
//! `desired-replicas` and `max-replicas` (for proportional scaling), and the Deployment's own
//! annotations (`kubernetes.io/change-cause` is what `rollout history` prints).
//!
//! One call of [`plan`] performs one step of kube-controller-manager's `syncDeployment`: scale
//! proportionally on a replica change, else create the new set, then scale it up within
//! `maxSurge`, then old sets down within `maxUnavailable` (RollingUpdate), or old sets to zero, wait
//! for their pods to go, then the new one up (Recreate); clean up old sets beyond
//! `revisionHistoryLimit` once complete; compute the status and the Progressing and Available
//! conditions. The informer events of what the step changes bring the next call.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};

use crate::pods;

/// The label that tells the ReplicaSets (and pods) of one Deployment apart.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The revision of a ReplicaSet (and of its Deployment: the current one).
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions a re-used ReplicaSet had, comma-separated.
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's replicas when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas plus surge when the ReplicaSet was last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Deployment annotations never copied to its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// Progressing reasons (kubectl reads `ProgressDeadlineExceeded`).
pub mod reason {
    /// The new ReplicaSet was created.
    pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
    /// An existing new ReplicaSet was found.
    pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
    /// The rollout made progress.
    pub const RS_UPDATED: &str = "ReplicaSetUpdated";
    /// The rollout finished.
    pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
    /// No progress within `progressDeadlineSeconds`.
    pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
    /// The Deployment is paused.
    pub const PAUSED: &str = "DeploymentPaused";
    /// The Deployment was resumed.
    pub const RESUMED: &str = "DeploymentResumed";
    /// Enough pods are available.
    pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Too few pods are available.
    pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
}

/// The pod-template hash of `template` with `collision_count`, spelled in the safe alphabet
/// Kubernetes uses for generated names (no vowels, no look-alike digits).
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(template).expect("a pod template serializes"));
    if let Some(c) = collision_count {
        h.update(c.to_le_bytes());
    }
    let digest = h.finalize();
    let n = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    n.to_string()
        .bytes()
        .map(|b| ALPHABET[b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Whether two templates are equal once the `pod-template-hash` label is ignored.
pub fn equal_ignoring_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(m) = t.metadata.as_mut() {
            if let Some(l) = m.labels.as_mut() {
                l.remove(POD_TEMPLATE_HASH);
                if l.is_empty() {
                    m.labels = None;
                }
            }
            if *m == ObjectMeta::default() {
                t.metadata = None;
            }
        }
        t
    };
    strip(a) == strip(b)
}

/// The replica count the Deployment asks for (1 when unset).
pub fn spec_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn set_rs_replicas(rs: &mut ReplicaSet, n: i32) {
    rs.spec.get_or_insert_with(ReplicaSetSpec::default).replicas = Some(n);
}

fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.clone().unwrap_or_default();
    (
        s.replicas,
        s.ready_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0),
    )
}

fn revision(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn is_recreate(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
}

fn paused(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false)
}

/// `intstr.GetScaledValueFromIntOrPercent`: an int as is, a percentage of `total`, rounded up or
/// down; `None` for a malformed value.
pub fn scaled_value(v: &IntOrString, total: i32, round_up: bool) -> Option<i32> {
    match v {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            let num = pct * i64::from(total);
            let v = if round_up {
                (num + 99).div_euclid(100)
            } else {
                num.div_euclid(100)
            };
            Some(v as i32)
        }
    }
}

/// `maxSurge` and `maxUnavailable` resolved against the replicas (defaults 25% each; both zero
/// would deadlock, so unavailable becomes 1; Recreate has neither).
pub fn resolve_fenceposts(d: &Deployment) -> (i32, i32) {
    if is_recreate(d) {
        return (0, 0);
    }
    let replicas = spec_replicas(d);
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let default = IntOrString::String("25%".into());
    let surge = ru
        .and_then(|r| r.max_surge.clone())
        .unwrap_or_else(|| default.clone());
    let unavailable = ru
        .and_then(|r| r.max_unavailable.clone())
        .unwrap_or(default);
    let surge = scaled_value(&surge, replicas, true).unwrap_or(0).max(0);
    let mut unavailable = scaled_value(&unavailable, replicas, false)
        .unwrap_or(0)
        .max(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(replicas.max(0)))
}

fn max_unavailable(d: &Deployment) -> i32 {
    if is_recreate(d) || spec_replicas(d) == 0 {
        0
    } else {
        resolve_fenceposts(d).1
    }
}

/// One write the controller makes to a ReplicaSet.
#[derive(Clone, Debug, PartialEq)]
pub enum RsChange {
    /// Create this ReplicaSet (named, owned by the Deployment).
    Create(ReplicaSet),
    /// Replace this ReplicaSet (new replicas, annotations or minReadySeconds).
    Update(ReplicaSet),
    /// Delete the ReplicaSet of this name.
    Delete(String),
}

/// The outcome of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// ReplicaSet writes, in order.
    pub changes: Vec<RsChange>,
    /// The Deployment's new annotations, when its revision annotation must change.
    pub annotations: Option<BTreeMap<String, String>>,
    /// The status to report.
    pub status: DeploymentStatus,
    /// Sync again after this long even without events (progress deadline checks).
    pub requeue_after: Option<Duration>,
}

/// The new ReplicaSet for the Deployment's current template (not yet created).
pub fn new_replica_set(d: &Deployment, replicas: i32, revision: i64) -> ReplicaSet {
    let spec = d.spec.clone().unwrap_or_default();
    let collision = d.status.as_ref().and_then(|s| s.collision_count);
    let hash = template_hash(&spec.template, collision);
    let name = format!(
        "{}-{}",
        d.metadata.name.as_deref().unwrap_or_default(),
        hash
    );
    let mut template = spec.template.clone();
    let tm = template.metadata.get_or_insert_with(ObjectMeta::default);
    tm.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POD_TEMPLATE_HASH.into(), hash.clone());
    let labels = tm.labels.clone();
    let mut selector: LabelSelector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POD_TEMPLATE_HASH.into(), hash);
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: d.metadata.namespace.clone(),
            labels,
            owner_references: Some(vec![pods::controller_ref(
                "apps/v1",
                "Deployment",
                &d.metadata,
            )]),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    };
    set_new_rs_annotations(d, &mut rs, revision, false);
    set_replicas_annotations(d, &mut rs);
    rs
}

/// Copies the Deployment's annotations onto the ReplicaSet and raises its revision to `revision`
/// (keeping the old one in the history when an existing set is re-used); whether anything changed.
fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    revision: i64,
    exists: bool,
) -> bool {
    let mut changed = false;
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if NOT_COPIED.contains(&k.as_str()) {
            continue;
        }
        if ann.get(k) != Some(v) {
            ann.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    let old = ann.get(REVISION).cloned();
    let old_n: i64 = old.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0);
    if old_n < revision {
        ann.insert(REVISION.into(), revision.to_string());
        changed = true;
        if exists && let Some(old) = old.filter(|o| !o.is_empty()) {
            let history = match ann.get(REVISION_HISTORY) {
                Some(h) if !h.is_empty() => format!("{h},{old}"),
                _ => old,
            };
            ann.insert(REVISION_HISTORY.into(), history);
        }
    }
    changed
}

/// Records the Deployment's replicas (and with surge) on the ReplicaSet; whether anything changed.
fn set_replicas_annotations(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let desired = spec_replicas(d).to_string();
    let max = (spec_replicas(d) + resolve_fenceposts(d).0).to_string();
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        if ann.get(k) != Some(&v) {
            ann.insert(k.into(), v);
            changed = true;
        }
    }
    changed
}

/// The working set of one step: every ReplicaSet of the Deployment by name, and which changed.
struct Sets {
    by_name: BTreeMap<String, ReplicaSet>,
    changed: Vec<String>,
    new: Option<String>,
}

impl Sets {
    fn get(&self, name: &str) -> &ReplicaSet {
        &self.by_name[name]
    }
    fn touch(&mut self, name: &str) {
        if !self.changed.iter().any(|n| n == name) {
            self.changed.push(name.to_string());
        }
    }
    /// Scales `name` to `n` (and stamps the replicas annotations); whether its size changed.
    fn scale(&mut self, d: &Deployment, name: &str, n: i32) -> bool {
        let rs = self.by_name.get_mut(name).expect("a known ReplicaSet");
        let annotated = set_replicas_annotations(d, rs);
        let resized = rs_replicas(rs) != n;
        if resized {
            set_rs_replicas(rs, n);
        }
        if annotated || resized {
            self.touch(name);
        }
        resized
    }
    /// Old sets, oldest first (creation time, then name).
    fn old(&self) -> Vec<String> {
        let mut old: Vec<&ReplicaSet> = self
            .by_name
            .values()
            .filter(|rs| rs.metadata.name != self.new)
            .collect();
        old.sort_by(|a, b| {
            let t = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
            t(a).cmp(&t(b)).then(a.metadata.name.cmp(&b.metadata.name))
        });
        old.into_iter()
            .filter_map(|rs| rs.metadata.name.clone())
            .collect()
    }
    fn all_replicas(&self) -> i32 {
        self.by_name.values().map(rs_replicas).sum()
    }
}

/// One step of the Deployment's rollout at `now`. `sets` are the ReplicaSets it controls (already
/// claimed), `pods` the pods those sets control (Recreate waits for the old ones to be gone).
pub fn plan(d: &Deployment, sets: &[&ReplicaSet], pods: &[&Pod], now: Timestamp) -> Plan {
    let spec = d.spec.clone().unwrap_or_default();
    let mut changes: Vec<RsChange> = Vec::new();
    let mut status = d.status.clone().unwrap_or_default();
    let mut work = Sets {
        by_name: sets
            .iter()
            .filter_map(|rs| Some((rs.metadata.name.clone()?, (*rs).clone())))
            .collect(),
        changed: Vec::new(),
        new: None,
    };

    // The new set: the oldest whose template matches the Deployment's.
    let mut matching: Vec<&ReplicaSet> = sets
        .iter()
        .copied()
        .filter(|rs| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|t| equal_ignoring_hash(t, &spec.template))
        })
        .collect();
    matching.sort_by_key(|rs| {
        (
            rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
            rs.metadata.name.clone(),
        )
    });
    work.new = matching.first().and_then(|rs| rs.metadata.name.clone());
    let max_old_revision = sets
        .iter()
        .filter(|rs| rs.metadata.name != work.new)
        .map(|rs| revision(&rs.metadata))
        .max()
        .unwrap_or(0);
    let new_revision = max_old_revision + 1;

    // Paused and resumed are reported at once.
    let progress_cond = condition(&status, "Progressing").cloned();
    if paused(d) && progress_cond.as_ref().and_then(|c| c.reason.as_deref()) != Some(reason::PAUSED)
    {
        set_condition(
            &mut status,
            cond(
                "Progressing",
                "Unknown",
                reason::PAUSED,
                "Deployment is paused",
                now,
            ),
        );
    } else if !paused(d)
        && progress_cond.as_ref().and_then(|c| c.reason.as_deref()) == Some(reason::PAUSED)
    {
        set_condition(
            &mut status,
            cond(
                "Progressing",
                "Unknown",
                reason::RESUMED,
                "Deployment is resumed",
                now,
            ),
        );
    }

    // Keep the new set's annotations and minReadySeconds in step with the Deployment.
    let mut deployment_annotations = None;
    if let Some(new) = work.new.clone() {
        let rs = work.by_name.get_mut(&new).expect("the new set is known");
        let mut changed = set_new_rs_annotations(d, rs, new_revision, true);
        let spec_rs = rs.spec.get_or_insert_with(ReplicaSetSpec::default);
        if spec_rs.min_ready_seconds != spec.min_ready_seconds {
            spec_rs.min_ready_seconds = spec.min_ready_seconds;
            changed = true;
        }
        let rev = annotation(&rs.metadata, REVISION)
            .unwrap_or_default()
            .to_string();
        if changed {
            work.touch(&new);
        }
        if annotation(&d.metadata, REVISION) != Some(rev.as_str()) {
            let mut ann = d.metadata.annotations.clone().unwrap_or_default();
            ann.insert(REVISION.into(), rev);
            deployment_annotations = Some(ann);
        }
        if condition(&status, "Progressing").is_none() {
            let msg = format!("Found new replica set \"{new}\"");
            set_condition(
                &mut status,
                cond("Progressing", "True", reason::FOUND_NEW_RS, &msg, now),
            );
        }
    }

    let deleting = pods::is_deleting(&d.metadata);
    if deleting {
        // Only the status is kept up to date while the garbage collector works.
    } else if paused(d) || is_scaling_event(d, &work) {
        scale(d, &mut work);
        if paused(d) && work.changed.is_empty() {
            cleanup(d, &work, &mut changes);
        }
    } else if is_recreate(d) {
        rollout_recreate(
            d,
            &mut work,
            pods,
            new_revision,
            &mut changes,
            &mut status,
            now,
        );
    } else {
        rollout_rolling(d, &mut work, new_revision, &mut changes, &mut status, now);
    }

    for name in &work.changed {
        changes.push(RsChange::Update(work.get(name).clone()));
    }
    if deployment_annotations.is_none()
        && let Some(RsChange::Create(rs)) = changes.first()
        && let Some(r) = annotation(&rs.metadata, REVISION)
        && annotation(&d.metadata, REVISION) != Some(r)
    {
        let mut ann = d.metadata.annotations.clone().unwrap_or_default();
        ann.insert(REVISION.into(), r.to_string());
        deployment_annotations = Some(ann);
    }

    // Status from the sets as the step leaves them (replica counts from their status).
    let all: Vec<&ReplicaSet> = work.by_name.values().collect();
    let new_rs = work.new.as_ref().map(|n| work.get(n));
    let mut next = calculate_status(d, &all, new_rs, &status, now);
    let requeue_after = if paused(d) || deleting {
        None
    } else {
        sync_progress(d, &mut next, new_rs, now)
    };
    Plan {
        changes,
        annotations: deployment_annotations,
        status: next,
        requeue_after,
    }
}

fn condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn cond(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Sets a condition: unchanged when status and reason are the same; the transition time kept
/// when only the reason changes.
fn set_condition(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if let Some(cur) = conds.iter().find(|x| x.type_ == c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    conds.retain(|x| x.type_ != c.type_);
    conds.push(c);
}

/// A replica change is pending when an active set was last scaled for another replica count.
fn is_scaling_event(d: &Deployment, work: &Sets) -> bool {
    let want = spec_replicas(d).to_string();
    work.by_name
        .values()
        .filter(|rs| rs_replicas(rs) > 0)
        .any(|rs| annotation(&rs.metadata, DESIRED_REPLICAS).is_some_and(|v| v != want))
}

/// `scale`: one active (or the latest) set takes the replicas; a saturated new set retires the
/// old ones; otherwise the difference is spread in proportion over the active sets.
fn scale(d: &Deployment, work: &mut Sets) {
    let replicas = spec_replicas(d);
    let active: Vec<String> = work
        .by_name
        .values()
        .filter(|rs| rs_replicas(rs) > 0)
        .filter_map(|rs| rs.metadata.name.clone())
        .collect();
    let target = match active.len() {
        1 => Some(active[0].clone()),
        0 => work.new.clone().or_else(|| work.old().last().cloned()),
        _ => None,
    };
    if let Some(t) = target {
        work.scale(d, &t, replicas);
        return;
    }
    if let Some(new) = work.new.clone() {
        let rs = work.get(&new);
        let saturated = rs_replicas(rs) == replicas
            && annotation(&rs.metadata, DESIRED_REPLICAS) == Some(replicas.to_string().as_str())
            && rs_status(rs).2 == replicas;
        if saturated {
            for old in work.old() {
                work.scale(d, &old, 0);
            }
            return;
        }
    }
    if is_recreate(d) {
        return;
    }
    let surge = resolve_fenceposts(d).0;
    let current: i32 = active.iter().map(|n| rs_replicas(work.get(n))).sum();
    let allowed = if replicas > 0 { replicas + surge } else { 0 };
    let to_add = allowed - current;
    let mut order: Vec<String> = active.clone();
    // Largest first; on a tie newer first when growing, older first when shrinking.
    order.sort_by(|a, b| {
        let (ra, rb) = (work.get(a), work.get(b));
        let t = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
        rs_replicas(rb).cmp(&rs_replicas(ra)).then_with(|| {
            if to_add > 0 {
                t(rb).cmp(&t(ra))
            } else {
                t(ra).cmp(&t(rb))
            }
        })
    });
    let mut added = 0;
    let mut targets: HashMap<String, i32> = HashMap::new();
    for name in &order {
        let rs = work.get(name);
        let cur = rs_replicas(rs);
        let mut proportion = 0;
        if to_add != 0 {
            let annotated: i32 = annotation(&rs.metadata, MAX_REPLICAS)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
            let fraction = if replicas == 0 || annotated == 0 {
                -cur
            } else {
                ((f64::from(cur) * f64::from(replicas + surge)) / f64::from(annotated)).round()
                    as i32
                    - cur
            };
            let allowed_left = to_add - added;
            proportion = if to_add > 0 {
                fraction.min(allowed_left).max(0)
            } else {
                fraction.max(allowed_left).min(0)
            };
        }
        added += proportion;
        targets.insert(name.clone(), cur + proportion);
    }
    if let Some(first) = order.first() {
        let t = targets.get_mut(first).expect("target of the first set");
        *t = (*t + to_add - added).max(0);
    }
    for name in order {
        let n = targets[&name];
        work.scale(d, &name, n);
    }
}

/// The replicas of the new set under RollingUpdate: up to `replicas + maxSurge` pods in all.
fn new_rs_new_replicas(d: &Deployment, work: &Sets, new_current: i32) -> i32 {
    if is_recreate(d) {
        return spec_replicas(d);
    }
    let replicas = spec_replicas(d);
    let (surge, _) = resolve_fenceposts(d);
    let current = work.all_replicas();
    let max_total = replicas + surge;
    if current >= max_total {
        return new_current;
    }
    let up = (max_total - current).min(replicas - new_current).max(0);
    new_current + up
}

/// Creates the new set when there is none (with `replicas`); its name.
fn create_new(
    d: &Deployment,
    work: &mut Sets,
    replicas: i32,
    revision: i64,
    changes: &mut Vec<RsChange>,
    status: &mut DeploymentStatus,
    now: Timestamp,
) -> String {
    let rs = new_replica_set(d, replicas, revision);
    let name = rs.metadata.name.clone().expect("the new set has a name");
    let msg = format!("Created new replica set \"{name}\"");
    set_condition(
        status,
        cond("Progressing", "True", reason::NEW_RS_CREATED, &msg, now),
    );
    changes.push(RsChange::Create(rs.clone()));
    work.by_name.insert(name.clone(), rs);
    work.new = Some(name.clone());
    name
}

fn rollout_rolling(
    d: &Deployment,
    work: &mut Sets,
    revision: i64,
    changes: &mut Vec<RsChange>,
    status: &mut DeploymentStatus,
    now: Timestamp,
) -> bool {
    let replicas = spec_replicas(d);
    let new = match work.new.clone() {
        Some(n) => n,
        None => {
            let n = new_rs_new_replicas(d, work, 0);
            create_new(d, work, n, revision, changes, status, now);
            return true;
        }
    };
    // Scale the new set up (or down to the replicas).
    let cur = rs_replicas(work.get(&new));
    let target = if cur > replicas {
        replicas
    } else {
        new_rs_new_replicas(d, work, cur)
    };
    if target != cur {
        work.scale(d, &new, target);
        return true;
    }
    // Scale old sets down as far as availability allows.
    if reconcile_old(d, work) {
        return true;
    }
    if complete(d, d.status.as_ref().unwrap_or(&DeploymentStatus::default())) {
        cleanup(d, work, changes);
    }
    false
}

/// `reconcileOldReplicaSets`: first the unhealthy old pods, then old pods above the minimum
/// availability; whether anything was scaled.
fn reconcile_old(d: &Deployment, work: &mut Sets) -> bool {
    let old = work.old();
    let old_count: i32 = old.iter().map(|n| rs_replicas(work.get(n))).sum();
    if old_count == 0 {
        return false;
    }
    let replicas = spec_replicas(d);
    let (_, max_unavailable) = resolve_fenceposts(d);
    let min_available = replicas - max_unavailable;
    let new_unavailable = work
        .new
        .as_ref()
        .map(|n| {
            let rs = work.get(n);
            rs_replicas(rs) - rs_status(rs).2
        })
        .unwrap_or(0);
    let max_scaled_down = work.all_replicas() - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return false;
    }
    let mut scaled = false;
    let mut cleaned = 0;
    for name in &old {
        if cleaned >= max_scaled_down {
            break;
        }
        let rs = work.get(name);
        let (cur, available) = (rs_replicas(rs), rs_status(rs).2);
        if cur == 0 || cur <= available {
            continue;
        }
        let down = (max_scaled_down - cleaned).min(cur - available);
        cleaned += down;
        scaled |= work.scale(d, name, cur - down);
    }
    // A set's status may still count pods above a spec just cut (the ReplicaSet controller has
    // not deleted them yet): those are going, so no set counts above its spec.
    let available: i32 = work
        .by_name
        .values()
        .map(|rs| rs_status(rs).2.min(rs_replicas(rs)))
        .sum();
    if available > min_available {
        let total = available - min_available;
        let mut done = 0;
        for name in &old {
            if done >= total {
                break;
            }
            let cur = rs_replicas(work.get(name));
            if cur == 0 {
                continue;
            }
            let down = cur.min(total - done);
            done += down;
            scaled |= work.scale(d, name, cur - down);
        }
    }
    scaled
}

fn rollout_recreate(
    d: &Deployment,
    work: &mut Sets,
    pods: &[&Pod],
    revision: i64,
    changes: &mut Vec<RsChange>,
    status: &mut DeploymentStatus,
    now: Timestamp,
) -> bool {
    let old = work.old();
    let mut scaled = false;
    for name in &old {
        if rs_replicas(work.get(name)) > 0 {
            scaled |= work.scale(d, name, 0);
        }
    }
    if scaled {
        return true;
    }
    // Wait until no old pod runs any more.
    let old_uids: Vec<&str> = old
        .iter()
        .filter_map(|n| work.get(n).metadata.uid.as_deref())
        .collect();
    let old_running = old.iter().any(|n| rs_status(work.get(n)).0 > 0)
        || pods.iter().any(|p| {
            !pods::is_terminal(p)
                && pods::controller_of(&p.metadata)
                    .is_some_and(|r| old_uids.contains(&r.uid.as_str()))
        });
    if old_running {
        return false;
    }
    let new = match work.new.clone() {
        Some(n) => n,
        None => {
            create_new(d, work, spec_replicas(d), revision, changes, status, now);
            return true;
        }
    };
    if work.scale(d, &new, spec_replicas(d)) {
        return true;
    }
    if complete(d, d.status.as_ref().unwrap_or(&DeploymentStatus::default())) {
        cleanup(d, work, changes);
    }
    false
}

/// Deletes old sets with no pods beyond `revisionHistoryLimit` (default 10), lowest revision first.
fn cleanup(d: &Deployment, work: &Sets, changes: &mut Vec<RsChange>) {
    let limit = d
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let mut old: Vec<&ReplicaSet> = work
        .old()
        .into_iter()
        .map(|n| work.get(&n))
        .filter(|rs| !pods::is_deleting(&rs.metadata))
        .collect();
    if old.len() <= limit {
        return;
    }
    let excess = old.len() - limit;
    old.sort_by_key(|rs| (revision(&rs.metadata), rs.metadata.name.clone()));
    for rs in old.into_iter().take(excess) {
        let observed = rs
            .status
            .as_ref()
            .and_then(|s| s.observed_generation)
            .unwrap_or(0);
        if rs_status(rs).0 != 0
            || rs_replicas(rs) != 0
            || rs.metadata.generation.unwrap_or(0) > observed
        {
            continue;
        }
        if let Some(n) = &rs.metadata.name {
            changes.push(RsChange::Delete(n.clone()));
        }
    }
}

/// `DeploymentComplete`: every replica updated and available, and the spec observed.
pub fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let replicas = spec_replicas(d);
    s.updated_replicas.unwrap_or(0) == replicas
        && s.replicas.unwrap_or(0) == replicas
        && s.available_replicas.unwrap_or(0) == replicas
        && s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    base: &DeploymentStatus,
    now: Timestamp,
) -> DeploymentStatus {
    let sum = |f: &dyn Fn(&ReplicaSet) -> i32| all.iter().map(|rs| f(rs)).sum::<i32>();
    let available = sum(&|rs| rs_status(rs).2);
    let total_spec = sum(&rs_replicas);
    let mut s = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(sum(&|rs| rs_status(rs).0)),
        updated_replicas: Some(new.map(|rs| rs_status(rs).0).unwrap_or(0)),
        ready_replicas: Some(sum(&|rs| rs_status(rs).1)),
        available_replicas: Some(available),
        unavailable_replicas: Some((total_spec - available).max(0)),
        collision_count: base.collision_count,
        conditions: base.conditions.clone(),
        terminating_replicas: None,
    };
    let c = if available >= spec_replicas(d) - max_unavailable(d) {
        cond(
            "Available",
            "True",
            reason::MIN_AVAILABLE,
            "Deployment has minimum availability.",
            now,
        )
    } else {
        cond(
            "Available",
            "False",
            reason::MIN_UNAVAILABLE,
            "Deployment does not have minimum availability.",
            now,
        )
    };
    set_condition(&mut s, c);
    s
}

fn progress_deadline(d: &Deployment) -> Option<i32> {
    // The API defaults the field to 600; an absent one (a stored object predating defaults) too.
    Some(
        d.spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .unwrap_or(600),
    )
}

/// `syncRolloutStatus`'s conditions: complete, progressing (the deadline restarts) or timed out;
/// when to check the deadline again.
fn sync_progress(
    d: &Deployment,
    s: &mut DeploymentStatus,
    new: Option<&ReplicaSet>,
    now: Timestamp,
) -> Option<Duration> {
    let deadline = progress_deadline(d)?;
    let current = condition(s, "Progressing").cloned();
    let done = s.replicas == s.updated_replicas
        && current.as_ref().and_then(|c| c.reason.as_deref()) == Some(reason::NEW_RS_AVAILABLE);
    if done {
        return None;
    }
    let new_name = new.and_then(|rs| rs.metadata.name.clone());
    let old = d.status.clone().unwrap_or_default();
    let old_old = old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0);
    let new_old = s.replicas.unwrap_or(0) - s.updated_replicas.unwrap_or(0);
    let progressing = s.updated_replicas.unwrap_or(0) > old.updated_replicas.unwrap_or(0)
        || new_old < old_old
        || s.ready_replicas.unwrap_or(0) > old.ready_replicas.unwrap_or(0)
        || s.available_replicas.unwrap_or(0) > old.available_replicas.unwrap_or(0);
    if complete(d, s) {
        let msg = match &new_name {
            Some(n) => format!("ReplicaSet \"{n}\" has successfully progressed."),
            None => "Deployment has successfully progressed.".to_string(),
        };
        set_condition(
            s,
            cond("Progressing", "True", reason::NEW_RS_AVAILABLE, &msg, now),
        );
        return None;
    }
    if progressing {
        let msg = match &new_name {
            Some(n) => format!("ReplicaSet \"{n}\" is progressing."),
            None => format!(
                "Deployment \"{}\" is progressing.",
                d.metadata.name.as_deref().unwrap_or_default()
            ),
        };
        let mut c = cond("Progressing", "True", reason::RS_UPDATED, &msg, now);
        if let Some(cur) = current.as_ref().filter(|c| c.status == "True") {
            c.last_transition_time = cur.last_transition_time.clone();
        }
        // Always rewritten so lastUpdateTime (the deadline's start) moves.
        if let Some(conds) = s.conditions.as_mut() {
            conds.retain(|x| x.type_ != "Progressing");
        }
        s.conditions.get_or_insert_with(Vec::new).push(c);
        return Some(Duration::from_secs(deadline.max(0) as u64));
    }
    let cur = current?;
    match cur.reason.as_deref() {
        Some(reason::NEW_RS_AVAILABLE) | Some(reason::TIMED_OUT) => None,
        _ => {
            let from = cur.last_update_time.as_ref().map(|t| t.0).unwrap_or(now);
            let until = from.as_second() + i64::from(deadline);
            if until < now.as_second() {
                let msg = match &new_name {
                    Some(n) => format!("ReplicaSet \"{n}\" has timed out progressing."),
                    None => format!(
                        "Deployment \"{}\" has timed out progressing.",
                        d.metadata.name.as_deref().unwrap_or_default()
                    ),
                };
                set_condition(
                    s,
                    cond("Progressing", "False", reason::TIMED_OUT, &msg, now),
                );
                None
            } else {
                Some(Duration::from_secs(
                    (until - now.as_second() + 1).max(1) as u64
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;

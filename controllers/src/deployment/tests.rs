//! Deployment step tests: single steps, and whole rollouts driven against a small model of the
//! ReplicaSet controller.

use super::*;
use k8s_openapi::api::apps::v1::{
    DeploymentSpec, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, PodSpec};

use crate::pods::testing::at;

fn deployment(replicas: i32, image: &str) -> Deployment {
    let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("d-uid".into()),
            generation: Some(1),
            annotations: Some(
                [("kubernetes.io/change-cause".to_string(), image.to_string())].into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
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
            progress_deadline_seconds: Some(600),
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

/// A model world: the Deployment, its sets, and a clock. The ReplicaSet controller is modelled as
/// making every set's pods exist at once; `available` says whether new pods also become
/// available at once.
struct World {
    d: Deployment,
    sets: BTreeMap<String, ReplicaSet>,
    clock: i64,
    uid: u32,
}

impl World {
    fn new(d: Deployment) -> World {
        World {
            d,
            sets: BTreeMap::new(),
            clock: 0,
            uid: 0,
        }
    }

    /// One controller step, then the ReplicaSet controller's reaction; the plan.
    fn step(&mut self, available: bool) -> Plan {
        self.clock += 1;
        let sets: Vec<&ReplicaSet> = self.sets.values().collect();
        let plan = plan(&self.d, &sets, &[], at(self.clock));
        for c in &plan.changes {
            match c {
                RsChange::Create(rs) => {
                    let mut rs = rs.clone();
                    self.uid += 1;
                    rs.metadata.uid = Some(format!("rs-{}", self.uid));
                    rs.metadata.creation_timestamp = Some(Time(at(self.clock)));
                    rs.metadata.generation = Some(1);
                    assert!(
                        self.sets
                            .insert(rs.metadata.name.clone().unwrap(), rs)
                            .is_none(),
                        "created a set twice"
                    );
                }
                RsChange::Update(rs) => {
                    let mut rs = rs.clone();
                    let g = rs.metadata.generation.unwrap_or(1);
                    rs.metadata.generation = Some(g + 1);
                    self.sets.insert(rs.metadata.name.clone().unwrap(), rs);
                }
                RsChange::Delete(n) => {
                    self.sets.remove(n);
                }
            }
        }
        if let Some(a) = &plan.annotations {
            self.d.metadata.annotations = Some(a.clone());
        }
        self.d.status = Some(plan.status.clone());
        for rs in self.sets.values_mut() {
            let n = rs_replicas(rs);
            let old_available = rs
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            let avail = if available { n } else { old_available.min(n) };
            rs.status = Some(ReplicaSetStatus {
                replicas: n,
                ready_replicas: Some(avail),
                available_replicas: Some(avail),
                observed_generation: rs.metadata.generation,
                ..ReplicaSetStatus::default()
            });
        }
        plan
    }

    fn total(&self) -> i32 {
        self.sets.values().map(rs_replicas).sum()
    }

    fn available(&self) -> i32 {
        self.sets.values().map(|rs| rs_status(rs).2).sum()
    }

    fn new_set(&self) -> &ReplicaSet {
        let t = &self.d.spec.as_ref().unwrap().template;
        self.sets
            .values()
            .find(|rs| equal_ignoring_hash(rs.spec.as_ref().unwrap().template.as_ref().unwrap(), t))
            .expect("a new set")
    }

    /// Steps until nothing changes any more (at most 100 steps), checking `each` after every step.
    fn settle(&mut self, available: bool, mut each: impl FnMut(&World)) {
        for _ in 0..100 {
            let plan = self.step(available);
            each(self);
            if plan.changes.is_empty()
                && plan.annotations.is_none()
                && self.step(available).changes.is_empty()
            {
                return;
            }
        }
        panic!("no steady state after 100 steps");
    }

    fn set_image(&mut self, image: &str) {
        let spec = self.d.spec.as_mut().unwrap();
        spec.template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
        self.d
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("kubernetes.io/change-cause".into(), image.into());
        let g = self.d.metadata.generation.unwrap();
        self.d.metadata.generation = Some(g + 1);
    }
}

fn progressing(d: &Deployment) -> DeploymentCondition {
    condition(d.status.as_ref().unwrap(), "Progressing")
        .unwrap()
        .clone()
}

#[test]
fn fenceposts_resolve_percentages() {
    assert_eq!(
        scaled_value(&IntOrString::String("25%".into()), 3, true),
        Some(1)
    );
    assert_eq!(
        scaled_value(&IntOrString::String("25%".into()), 3, false),
        Some(0)
    );
    assert_eq!(
        scaled_value(&IntOrString::String("50%".into()), 10, false),
        Some(5)
    );
    assert_eq!(
        scaled_value(&IntOrString::String("x".into()), 10, false),
        None
    );
    let mut d = deployment(3, "a");
    assert_eq!(resolve_fenceposts(&d), (1, 0));
    d.spec.as_mut().unwrap().strategy = Some(DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(0)),
            max_unavailable: Some(IntOrString::String("10%".into())),
        }),
    });
    assert_eq!(
        resolve_fenceposts(&d),
        (0, 1),
        "both zero would never progress"
    );
}

#[test]
fn first_step_creates_the_new_set_with_revision_and_annotations() {
    let d = deployment(3, "a");
    let p = plan(&d, &[], &[], at(0));
    let [RsChange::Create(rs)] = p.changes.as_slice() else {
        panic!("expected one create: {:?}", p.changes);
    };
    let hash = rs.metadata.labels.as_ref().unwrap()[POD_TEMPLATE_HASH].clone();
    assert_eq!(
        rs.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    let spec = rs.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        spec.selector.match_labels.as_ref().unwrap()[POD_TEMPLATE_HASH],
        hash
    );
    let tl = spec
        .template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(tl[POD_TEMPLATE_HASH], hash);
    let ann = rs.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[REVISION], "1");
    assert_eq!(ann["kubernetes.io/change-cause"], "a");
    assert_eq!(ann[DESIRED_REPLICAS], "3");
    assert_eq!(ann[MAX_REPLICAS], "4");
    let owner = pods::controller_of(&rs.metadata).unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Deployment", "d-uid")
    );
    assert_eq!(p.annotations.unwrap()[REVISION], "1");
    let c = condition(&p.status, "Progressing").unwrap();
    assert_eq!(c.reason.as_deref(), Some(reason::NEW_RS_CREATED));
    assert_ne!(
        template_hash(&d.spec.as_ref().unwrap().template, Some(1)),
        hash
    );
}

#[test]
fn rolling_update_respects_surge_and_unavailability_and_completes() {
    let mut w = World::new(deployment(4, "a"));
    w.settle(true, |_| {});
    assert_eq!(w.total(), 4);
    let st = w.d.status.clone().unwrap();
    assert_eq!(
        (st.replicas, st.updated_replicas, st.available_replicas),
        (Some(4), Some(4), Some(4))
    );
    assert_eq!(
        progressing(&w.d).reason.as_deref(),
        Some(reason::NEW_RS_AVAILABLE)
    );
    let available = condition(&st, "Available").unwrap();
    assert_eq!(available.status, "True");

    // maxSurge 25% of 4 = 1, maxUnavailable 1.
    w.set_image("b");
    w.settle(true, |w| {
        assert!(
            w.total() <= 5,
            "more than replicas + maxSurge: {}",
            w.total()
        );
        assert!(
            w.available() >= 3,
            "below replicas - maxUnavailable: {}",
            w.available()
        );
    });
    assert_eq!(w.sets.len(), 2);
    let new = w.new_set().clone();
    assert_eq!(rs_replicas(&new), 4);
    assert_eq!(new.metadata.annotations.as_ref().unwrap()[REVISION], "2");
    assert_eq!(
        new.metadata.annotations.as_ref().unwrap()["kubernetes.io/change-cause"],
        "b"
    );
    assert_eq!(w.d.metadata.annotations.as_ref().unwrap()[REVISION], "2");
    assert_eq!(w.total(), 4, "old set scaled to zero");
    assert!(complete(&w.d, w.d.status.as_ref().unwrap()));
    assert_eq!(
        progressing(&w.d).reason.as_deref(),
        Some(reason::NEW_RS_AVAILABLE)
    );
}

#[test]
fn rolling_update_waits_for_availability() {
    let mut w = World::new(deployment(4, "a"));
    w.settle(true, |_| {});
    w.set_image("b");
    // New pods never become available: the old set may only lose maxUnavailable pods.
    for _ in 0..20 {
        w.step(false);
        assert!(w.available() >= 3);
        assert!(w.total() <= 5);
    }
    let new = w.new_set();
    assert_eq!(rs_status(new).2, 0);
    assert!(!complete(&w.d, w.d.status.as_ref().unwrap()));
    assert_eq!(
        condition(w.d.status.as_ref().unwrap(), "Available")
            .unwrap()
            .status,
        "True"
    );
}

/// Regression (`skiff bench deployment`, 1,000 replicas): the old set's status still counted 709
/// available pods under a spec already cut to 597, so the scale-down took it to 263 and left 586
/// available against a floor of 750.
#[test]
fn scale_down_counts_no_set_above_its_spec() {
    let mut w = World::new(deployment(1000, "a"));
    w.settle(true, |_| {});
    w.set_image("b");
    w.step(false);
    let new_name = w.new_set().metadata.name.clone().unwrap();
    for (name, rs) in w.sets.iter_mut() {
        let (spec, replicas, available) = if *name == new_name {
            (653, 653, 317)
        } else {
            (597, 709, 709)
        };
        set_rs_replicas(rs, spec);
        rs.status = Some(ReplicaSetStatus {
            replicas,
            ready_replicas: Some(available),
            available_replicas: Some(available),
            observed_generation: rs.metadata.generation,
            ..ReplicaSetStatus::default()
        });
    }
    let sets: Vec<&ReplicaSet> = w.sets.values().collect();
    let p = plan(&w.d, &sets, &[], at(w.clock + 1));
    let old_spec = p.changes.iter().find_map(|c| match c {
        RsChange::Update(rs) if rs.metadata.name.as_deref() != Some(new_name.as_str()) => {
            Some(rs_replicas(rs))
        }
        _ => None,
    });
    // The new set's 317 available pods plus what the old one keeps must stay at 750.
    assert_eq!(old_spec, Some(750 - 317));
}

#[test]
fn undo_reuses_the_old_set_under_a_new_revision() {
    let mut w = World::new(deployment(2, "a"));
    w.settle(true, |_| {});
    let first = w.new_set().metadata.name.clone().unwrap();
    w.set_image("b");
    w.settle(true, |_| {});
    // `kubectl rollout undo` writes the old template back.
    w.set_image("a");
    w.settle(true, |_| {});
    assert_eq!(w.sets.len(), 2, "no third set");
    let rs = &w.sets[&first];
    assert_eq!(rs_replicas(rs), 2);
    let ann = rs.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[REVISION], "3");
    assert_eq!(ann[REVISION_HISTORY], "1");
    assert_eq!(w.d.metadata.annotations.as_ref().unwrap()[REVISION], "3");
}

#[test]
fn recreate_retires_old_pods_before_creating_new_ones() {
    let mut d = deployment(3, "a");
    d.spec.as_mut().unwrap().strategy = Some(DeploymentStrategy {
        type_: Some("Recreate".into()),
        rolling_update: None,
    });
    let mut w = World::new(d);
    w.settle(true, |_| {});
    assert_eq!(w.total(), 3);
    w.set_image("b");
    let p = w.step(true);
    assert!(matches!(p.changes.as_slice(), [RsChange::Update(rs)] if rs_replicas(rs) == 0));
    // An old pod still running holds the new set back.
    let old = w.sets.values().next().unwrap().clone();
    let mut pod = crate::pods::testing::pod("old", &[], 0);
    pod.metadata.owner_references = Some(vec![pods::controller_ref(
        "apps/v1",
        "ReplicaSet",
        &old.metadata,
    )]);
    let sets: Vec<&ReplicaSet> = w.sets.values().collect();
    let p = plan(&w.d, &sets, &[&pod], at(100));
    assert!(p.changes.is_empty(), "must wait: {:?}", p.changes);
    w.settle(true, |w| {
        assert!(w.sets.values().filter(|rs| rs_replicas(rs) > 0).count() <= 1)
    });
    assert_eq!(rs_replicas(w.new_set()), 3);
    assert_eq!(w.total(), 3);
}

#[test]
fn revision_history_limit_deletes_the_oldest_empty_sets() {
    let mut d = deployment(1, "v0");
    d.spec.as_mut().unwrap().revision_history_limit = Some(2);
    let mut w = World::new(d);
    for i in 0..5 {
        w.set_image(&format!("v{i}"));
        w.settle(true, |_| {});
    }
    // The current set plus two old ones.
    assert_eq!(w.sets.len(), 3);
    let mut revisions: Vec<i64> = w.sets.values().map(|rs| revision(&rs.metadata)).collect();
    revisions.sort();
    assert_eq!(revisions, [3, 4, 5]);
}

#[test]
fn progress_deadline_times_out_without_progress() {
    let mut w = World::new(deployment(2, "a"));
    w.d.spec.as_mut().unwrap().progress_deadline_seconds = Some(30);
    w.settle(true, |_| {});
    w.set_image("b");
    for _ in 0..5 {
        w.step(false);
    }
    let c = progressing(&w.d);
    assert_eq!(c.reason.as_deref(), Some(reason::RS_UPDATED));
    // Nothing changes for longer than the deadline.
    let sets: Vec<ReplicaSet> = w.sets.values().cloned().collect();
    let refs: Vec<&ReplicaSet> = sets.iter().collect();
    let p = plan(&w.d, &refs, &[], at(w.clock + 10));
    assert!(p.requeue_after.is_some(), "the deadline is checked again");
    let p = plan(&w.d, &refs, &[], at(w.clock + 100));
    let c = condition(&p.status, "Progressing").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some(reason::TIMED_OUT))
    );
}

#[test]
fn paused_deployments_do_not_roll_out_but_scale() {
    let mut w = World::new(deployment(2, "a"));
    w.settle(true, |_| {});
    w.d.spec.as_mut().unwrap().paused = Some(true);
    w.set_image("b");
    w.settle(true, |_| {});
    assert_eq!(w.sets.len(), 1, "no new set while paused");
    assert_eq!(progressing(&w.d).reason.as_deref(), Some(reason::PAUSED));
    w.d.spec.as_mut().unwrap().replicas = Some(5);
    w.settle(true, |_| {});
    assert_eq!(w.total(), 5);
    w.d.spec.as_mut().unwrap().paused = Some(false);
    w.settle(true, |_| {});
    assert_eq!(w.sets.len(), 2);
    assert_eq!(rs_replicas(w.new_set()), 5);
    assert_eq!(w.total(), 5);
}

#[test]
fn scaling_mid_rollout_is_proportional() {
    let mut w = World::new(deployment(10, "a"));
    w.settle(true, |_| {});
    w.set_image("b");
    // New pods stay unavailable: the rollout stops part-way with two active sets.
    for _ in 0..5 {
        w.step(false);
    }
    let active: Vec<i32> = w
        .sets
        .values()
        .map(rs_replicas)
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(active.len(), 2, "{active:?}");
    let before = w.total();
    w.d.spec.as_mut().unwrap().replicas = Some(20);
    w.step(false);
    // Both sets grew, within replicas + surge (20 + 5).
    let after: Vec<i32> = w
        .sets
        .values()
        .map(rs_replicas)
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(w.total(), 25, "from {before}");
    for (a, b) in active.iter().zip(&after) {
        assert!(b > a, "{active:?} -> {after:?}");
    }
    w.settle(true, |_| {});
    assert_eq!(rs_replicas(w.new_set()), 20);
    assert_eq!(w.total(), 20);
}

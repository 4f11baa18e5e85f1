//! Expectations: the in-flight creates and deletes of a controller, per key, that keep it from
//! overshooting.
//!
//! After a controller asks for `n` creates (or names children to delete) it does not act on that
//! key again until the informer has shown it every one of them (or they expire), because the
//! cache lags the API. [`Expectations::observe`] books a child's event, and the runtime's
//! [`owns`](super::Controller::owns) calls it before it queues the owner's key, so a worker never
//! syncs a key whose expectations its own event was about to satisfy.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Resource;
use skiff_client::key_of;

use super::{Event, owners};
use crate::pods;

/// How long unmet expectations hold back a controller before it trusts its cache again (a watch
/// event that never arrives must not wedge the controller).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Expectation {
    adds: i64,
    deletes: HashSet<String>,
    set_at: Instant,
}

/// In-flight creates and deletes per controller key (client-go's `UIDTrackingControllerExpectations`,
/// tracking deletions by pod key).
#[derive(Debug, Default)]
pub struct Expectations {
    // Short critical sections only; never held across an await.
    inner: Mutex<HashMap<String, Expectation>>,
}

impl Expectations {
    /// No expectations yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the controller of `key` may act on its cache now.
    pub fn satisfied(&self, key: &str) -> bool {
        self.satisfied_at(key, Instant::now())
    }

    /// [`Expectations::satisfied`] at a given instant.
    pub fn satisfied_at(&self, key: &str, now: Instant) -> bool {
        let inner = self.inner.lock().expect("expectations lock");
        match inner.get(key) {
            None => true,
            Some(e) => {
                (e.adds <= 0 && e.deletes.is_empty())
                    || now.duration_since(e.set_at) >= EXPECTATIONS_TIMEOUT
            }
        }
    }

    /// Records that `adds` creates and the deletion of `deletes` (pod keys) are in flight.
    pub fn expect(&self, key: &str, adds: usize, deletes: impl IntoIterator<Item = String>) {
        self.expect_at(key, adds, deletes, Instant::now());
    }

    /// [`Expectations::expect`] at a given instant.
    pub fn expect_at(
        &self,
        key: &str,
        adds: usize,
        deletes: impl IntoIterator<Item = String>,
        now: Instant,
    ) {
        let mut inner = self.inner.lock().expect("expectations lock");
        inner.insert(
            key.to_string(),
            Expectation {
                adds: adds as i64,
                deletes: deletes.into_iter().collect(),
                set_at: now,
            },
        );
    }

    /// One create seen by the informer, or failed (so it will never be seen).
    pub fn creation_observed(&self, key: &str) {
        if let Some(e) = self.inner.lock().expect("expectations lock").get_mut(key) {
            e.adds -= 1;
        }
    }

    /// The deletion of `pod_key` seen by the informer, or failed.
    pub fn deletion_observed(&self, key: &str, pod_key: &str) {
        if let Some(e) = self.inner.lock().expect("expectations lock").get_mut(key) {
            e.deletes.remove(pod_key);
        }
    }

    /// Drops the record of a controller that is gone.
    pub fn forget(&self, key: &str) {
        self.inner.lock().expect("expectations lock").remove(key);
    }
    /// Books what an event of a child says about its owner's (of `owner_kind`) in-flight
    /// creates and deletes: an add is a create seen (or, already deleting, a delete), a child
    /// that starts deleting or is deleted is a delete seen.
    pub fn observe<K: Resource>(&self, event: &Event<'_, K>, owner_kind: &str) {
        match *event {
            Event::Added(child) => {
                if let Some(k) = owners::controller_key(child.meta(), owner_kind) {
                    if pods::is_deleting(child.meta()) {
                        self.deletion_observed(&k, &key_of(child));
                    } else {
                        self.creation_observed(&k);
                    }
                }
            }
            Event::Updated { old, new } => {
                if let Some(k) = owners::controller_key(new.meta(), owner_kind)
                    && pods::is_deleting(new.meta())
                    && !pods::is_deleting(old.meta())
                {
                    self.deletion_observed(&k, &key_of(new));
                }
            }
            Event::Deleted(child) => {
                if let Some(k) = owners::controller_key(child.meta(), owner_kind) {
                    self.deletion_observed(&k, &key_of(child));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::pod;

    #[test]
    fn expectations_hold_until_observed_or_expired() {
        let e = Expectations::new();
        let t0 = Instant::now();
        assert!(e.satisfied_at("ns/web", t0));
        e.expect_at("ns/web", 2, ["ns/a".to_string()], t0);
        assert!(!e.satisfied_at("ns/web", t0));
        e.creation_observed("ns/web");
        e.creation_observed("ns/web");
        assert!(
            !e.satisfied_at("ns/web", t0),
            "a deletion is still in flight"
        );
        e.deletion_observed("ns/web", "ns/other");
        assert!(!e.satisfied_at("ns/web", t0));
        e.deletion_observed("ns/web", "ns/a");
        assert!(e.satisfied_at("ns/web", t0));

        e.expect_at("ns/web", 1, [], t0);
        assert!(!e.satisfied_at("ns/web", t0 + Duration::from_secs(60)));
        assert!(e.satisfied_at("ns/web", t0 + EXPECTATIONS_TIMEOUT));
        e.forget("ns/web");
        assert!(e.satisfied_at("ns/web", t0));
    }

    fn owned(name: &str, owner: &str) -> k8s_openapi::api::core::v1::Pod {
        let mut p = pod(name, &[], 0);
        p.metadata.owner_references = Some(vec![pods::controller_ref(
            "apps/v1",
            "ReplicaSet",
            &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(owner.into()),
                uid: Some(format!("uid-{owner}")),
                ..Default::default()
            },
        )]);
        p
    }

    #[test]
    fn child_events_satisfy_their_owners_expectations() {
        let e = Expectations::new();
        e.expect("ns/web", 1, ["ns/old".to_string()]);
        let other = owned("x", "other");
        e.observe(&Event::Added(&other), "ReplicaSet");
        assert!(
            !e.satisfied("ns/web"),
            "another owner's child changes nothing"
        );
        let new = owned("new", "web");
        e.observe(&Event::Added(&new), "Job");
        assert!(
            !e.satisfied("ns/web"),
            "an owner of another kind is not ours"
        );
        e.observe(&Event::Added(&new), "ReplicaSet");
        let old = owned("old", "web");
        let mut deleting = old.clone();
        deleting.metadata.deletion_timestamp = Some(pods::time("2024-01-01T00:00:00Z"));
        e.observe(
            &Event::Updated {
                old: &deleting,
                new: &deleting,
            },
            "ReplicaSet",
        );
        assert!(
            !e.satisfied("ns/web"),
            "only the start of a deletion counts"
        );
        e.observe(
            &Event::Updated {
                old: &old,
                new: &deleting,
            },
            "ReplicaSet",
        );
        assert!(e.satisfied("ns/web"));

        e.expect("ns/web", 0, ["ns/old".to_string()]);
        e.observe(&Event::Deleted(&old), "ReplicaSet");
        assert!(e.satisfied("ns/web"), "a delete event is a deletion seen");
        e.expect("ns/web", 0, ["ns/old".to_string()]);
        e.observe(&Event::Added(&deleting), "ReplicaSet");
        assert!(
            e.satisfied("ns/web"),
            "a child first seen deleting is a deletion seen"
        );
    }
}

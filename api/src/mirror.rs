//! A kind's objects as this API server last saw them in the log, kept in memory by list-and-watch
//! ([`crate::follow`]), for what admission reads on every write: the request's Namespace and its
//! namespace's ResourceQuotas. kube-apiserver's admission plugins read the same from informers.
//!
//! Reading them from the log cost a point read or a range read and a decode on every create (9 %
//! of the server runtime's samples in the 5 Dec create profile of BENCHMARKS.md), and on etcd a
//! round trip each. A mirror lags the log by one watch delivery, so callers use it where that is what
//! Kubernetes gives too, and go to the log where it is not: on a miss (an object created a moment
//! ago) and before refusing a write on what the mirror says.
//!
//! Until its first list has arrived a mirror knows nothing and says so ([`Mirror::synced`]); the
//! plugins then read the log as before.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::follow::Follower;
use crate::registry::namespace_and_name;
use crate::server::ApiServer;

/// A kind's objects by namespace ("" for cluster-scoped ones) and name, decoded once as `T` when
/// they arrive.
pub struct Mirror<T> {
    objects: RwLock<BTreeMap<(String, String), Arc<T>>>,
    synced: AtomicBool,
}

impl<T> Default for Mirror<T> {
    fn default() -> Self {
        Mirror {
            objects: RwLock::default(),
            synced: AtomicBool::new(false),
        }
    }
}

impl<T: DeserializeOwned + Send + Sync + 'static> Mirror<T> {
    /// Whether the first list has arrived: before it, an absent object says nothing.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The object, if this mirror has seen it.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<T>> {
        self.read().get(&key(namespace, name)).cloned()
    }

    /// Every object of `namespace`, in the order of their names.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<T>> {
        let from = (namespace.to_string(), String::new());
        self.read()
            .range(from..)
            .take_while(|((ns, _), _)| ns == namespace)
            .map(|(_, object)| object.clone())
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<(String, String), Arc<T>>> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<(String, String), Arc<T>>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces everything with a fresh list.
    pub fn listed(&self, items: &[Value]) {
        let fresh = items.iter().filter_map(entry).collect();
        *self.write() = fresh;
        self.synced.store(true, Ordering::Release);
    }

    /// One object created or changed (`present`), or deleted.
    pub fn changed(&self, object: &Value, present: bool) {
        if present && let Some((key, decoded)) = entry(object) {
            self.write().insert(key, decoded);
            return;
        }
        // Deleted, or no longer decodes as `T`: either way it is not there for its readers.
        let (namespace, name) = namespace_and_name(object);
        self.write().remove(&key(namespace, name));
    }
}

/// The object's key and the object decoded, or `None` if it does not decode as `T`.
fn entry<T: DeserializeOwned>(object: &Value) -> Option<((String, String), Arc<T>)> {
    let (namespace, name) = namespace_and_name(object);
    let decoded = T::deserialize(object).ok()?;
    Some((key(namespace, name), Arc::new(decoded)))
}

/// Where an object is kept: cluster-scoped ones under the namespace "".
fn key(namespace: Option<&str>, name: &str) -> (String, String) {
    (namespace.unwrap_or_default().to_string(), name.to_string())
}

impl<T: DeserializeOwned + Send + Sync + 'static> Follower for Arc<Mirror<T>> {
    async fn listed(&self, _server: &Arc<ApiServer>, items: &[Value]) {
        Mirror::listed(self, items);
    }

    async fn changed(&self, _server: &Arc<ApiServer>, object: &Value, present: bool) {
        Mirror::changed(self, object, present);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn quota(namespace: &str, name: &str, pods: &str) -> Value {
        json!({"metadata": {"namespace": namespace, "name": name},
               "spec": {"hard": {"pods": pods}}})
    }

    #[test]
    fn knows_nothing_until_the_first_list() {
        let mirror = Mirror::<Value>::default();
        assert!(!mirror.synced());
        mirror.listed(&[]);
        assert!(mirror.synced());
        assert!(mirror.get(Some("a"), "q").is_none());
    }

    #[test]
    fn follows_creates_changes_and_deletes_by_namespace() {
        let mirror = Mirror::<Value>::default();
        mirror.listed(&[
            quota("b", "q2", "1"),
            quota("b", "q1", "1"),
            quota("c", "q", "1"),
        ]);
        let names = |ns: &str| -> Vec<String> {
            mirror
                .in_namespace(ns)
                .iter()
                .map(|q| q["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names("b"), ["q1", "q2"]);
        assert_eq!(names("c"), ["q"]);
        // A namespace whose name starts another's does not see its objects.
        assert!(names("").is_empty() && names("bb").is_empty());

        mirror.changed(&quota("bb", "q", "1"), true);
        mirror.changed(&quota("b", "q1", "5"), true);
        assert_eq!(names("bb"), ["q"]);
        assert_eq!(
            mirror.get(Some("b"), "q1").unwrap()["spec"]["hard"]["pods"],
            "5"
        );

        mirror.changed(&quota("b", "q2", "1"), false);
        assert_eq!(names("b"), ["q1"]);

        // A fresh list (after the watch fell behind) replaces everything.
        mirror.listed(&[quota("c", "q", "2")]);
        assert!(names("b").is_empty() && names("bb").is_empty());
        assert_eq!(
            mirror.get(Some("c"), "q").unwrap()["spec"]["hard"]["pods"],
            "2"
        );
    }

    #[test]
    fn cluster_scoped_objects_are_under_the_empty_namespace() {
        let mirror = Mirror::<Value>::default();
        mirror.listed(&[json!({"metadata": {"name": "default"}})]);
        assert!(mirror.get(None, "default").is_some());
        assert!(mirror.get(Some("default"), "default").is_none());
    }

    #[test]
    fn an_object_that_stops_decoding_is_dropped() {
        #[derive(serde::Deserialize)]
        struct Named {
            #[allow(dead_code)]
            spec: BTreeMap<String, Value>,
        }
        let mirror = Mirror::<Named>::default();
        mirror.listed(&[quota("a", "q", "1")]);
        assert!(mirror.get(Some("a"), "q").is_some());
        mirror.changed(
            &json!({"metadata": {"namespace": "a", "name": "q"}, "spec": 3}),
            true,
        );
        assert!(mirror.get(Some("a"), "q").is_none());
    }
}

//! The informer's thread-safe, indexed object cache (client-go's `Indexer`).
//!
//! Objects are held as `Arc<K>` so readers share them without copying; a reader must not mutate
//! what it gets (clone first). Every object is indexed by namespace; further indexes are functions
//! from an object to the values it is filed under.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::Resource;

/// An index function: the values an object is filed under.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Names and functions of the built-in indexes.
pub mod index {
    use k8s_openapi::api::core::v1::Pod;

    /// By `metadata.namespace` (always present).
    pub const NAMESPACE: &str = "namespace";
    /// By `spec.nodeName` (pods; add it with `add_index(NODE_NAME, pod_node_name)`).
    pub const NODE_NAME: &str = "spec.nodeName";

    /// The node a pod is bound to, for the [`NODE_NAME`] index.
    pub fn pod_node_name(pod: &Pod) -> Vec<String> {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .into_iter()
            .collect()
    }
}

/// The cache key of an object: `namespace/name`, or `name` for cluster-scoped kinds.
pub fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// The revision an object was last written at (0 if it has none).
pub fn revision_of<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

struct Inner<K> {
    items: HashMap<String, Arc<K>>,
    indexers: HashMap<String, IndexFn<K>>,
    /// index name → value → keys.
    indices: HashMap<String, HashMap<String, HashSet<String>>>,
}

/// A thread-safe map from key to object with secondary indexes.
pub struct Cache<K> {
    inner: RwLock<Inner<K>>,
}

impl<K: Resource + 'static> Default for Cache<K> {
    fn default() -> Self {
        Cache::new()
    }
}

impl<K: Resource + 'static> Cache<K> {
    /// An empty cache with the namespace index.
    pub fn new() -> Cache<K> {
        let cache = Cache {
            inner: RwLock::new(Inner {
                items: HashMap::new(),
                indexers: HashMap::new(),
                indices: HashMap::new(),
            }),
        };
        cache.add_index(index::NAMESPACE, |obj: &K| {
            obj.meta().namespace.clone().into_iter().collect()
        });
        cache
    }

    /// Adds (or replaces) the index `name`, filing every object already held.
    pub fn add_index(&self, name: &str, f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) {
        let f: IndexFn<K> = Arc::new(f);
        let mut inner = self.inner.write().expect("cache lock");
        let mut index: HashMap<String, HashSet<String>> = HashMap::new();
        for (key, obj) in &inner.items {
            for value in f(obj) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        inner.indices.insert(name.to_string(), index);
        inner.indexers.insert(name.to_string(), f);
    }

    /// Whether the index `name` exists.
    pub fn has_index(&self, name: &str) -> bool {
        self.inner
            .read()
            .expect("cache lock")
            .indexers
            .contains_key(name)
    }

    /// The object at `namespace/name` (`namespace` empty or `None` for cluster-scoped kinds).
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        match namespace {
            Some(ns) if !ns.is_empty() => self.get_by_key(&format!("{ns}/{name}")),
            _ => self.get_by_key(name),
        }
    }

    /// The object at `key`.
    pub fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.inner
            .read()
            .expect("cache lock")
            .items
            .get(key)
            .cloned()
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner
            .read()
            .expect("cache lock")
            .items
            .values()
            .cloned()
            .collect()
    }

    /// Every key.
    pub fn keys(&self) -> Vec<String> {
        self.inner
            .read()
            .expect("cache lock")
            .items
            .keys()
            .cloned()
            .collect()
    }

    /// How many objects are held.
    pub fn len(&self) -> usize {
        self.inner.read().expect("cache lock").items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects filed under `value` in the index `index` (empty if no such index).
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let inner = self.inner.read().expect("cache lock");
        let Some(keys) = inner.indices.get(index).and_then(|i| i.get(value)) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|k| inner.items.get(k).cloned())
            .collect()
    }

    /// The keys filed under `value` in the index `index`.
    pub fn keys_by_index(&self, index: &str, value: &str) -> Vec<String> {
        let inner = self.inner.read().expect("cache lock");
        inner
            .indices
            .get(index)
            .and_then(|i| i.get(value))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Stores `obj`, returning what it replaced.
    pub(crate) fn upsert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = key_of(obj.as_ref());
        let mut inner = self.inner.write().expect("cache lock");
        let old = inner.items.insert(key.clone(), obj.clone());
        let Inner {
            indexers, indices, ..
        } = &mut *inner;
        for (name, f) in indexers.iter() {
            let index = indices.entry(name.clone()).or_default();
            if let Some(old) = &old {
                unfile(index, &key, f(old));
            }
            for value in f(&obj) {
                index.entry(value).or_default().insert(key.clone());
            }
        }
        old
    }

    /// Removes the object at `key`, returning it.
    pub(crate) fn remove(&self, key: &str) -> Option<Arc<K>> {
        let mut inner = self.inner.write().expect("cache lock");
        let old = inner.items.remove(key)?;
        let Inner {
            indexers, indices, ..
        } = &mut *inner;
        for (name, f) in indexers.iter() {
            if let Some(index) = indices.get_mut(name) {
                unfile(index, key, f(&old));
            }
        }
        Some(old)
    }
}

fn unfile(index: &mut HashMap<String, HashSet<String>>, key: &str, values: Vec<String>) {
    for value in values {
        if let Some(keys) = index.get_mut(&value) {
            keys.remove(key);
            if keys.is_empty() {
                index.remove(&value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use kube::api::ObjectMeta;

    fn pod(ns: &str, name: &str, node: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn indexes_follow_updates_and_removals() {
        let cache = Cache::<Pod>::new();
        cache.add_index(index::NODE_NAME, index::pod_node_name);
        cache.upsert(pod("a", "p1", None));
        cache.upsert(pod("a", "p2", Some("n1")));
        cache.upsert(pod("b", "p3", Some("n1")));
        assert_eq!(cache.by_index(index::NAMESPACE, "a").len(), 2);
        assert_eq!(cache.by_index(index::NODE_NAME, "n1").len(), 2);

        // p1 gets bound; p2 moves (not in Kubernetes, but the index must follow).
        cache.upsert(pod("a", "p1", Some("n1")));
        cache.upsert(pod("a", "p2", Some("n2")));
        let mut on_n1 = cache.keys_by_index(index::NODE_NAME, "n1");
        on_n1.sort();
        assert_eq!(on_n1, ["a/p1", "b/p3"]);
        assert_eq!(cache.keys_by_index(index::NODE_NAME, "n2"), ["a/p2"]);

        assert!(cache.remove("b/p3").is_some());
        assert!(cache.remove("b/p3").is_none());
        assert_eq!(cache.keys_by_index(index::NODE_NAME, "n1"), ["a/p1"]);
        assert!(cache.by_index(index::NAMESPACE, "b").is_empty());
        assert!(cache.by_index("no-such-index", "x").is_empty());
        assert_eq!(
            cache.get(Some("a"), "p2").unwrap().metadata.name.as_deref(),
            Some("p2")
        );
    }

    #[test]
    fn an_index_added_late_files_existing_objects() {
        let cache = Cache::<Pod>::new();
        cache.upsert(pod("a", "p1", Some("n1")));
        cache.add_index(index::NODE_NAME, index::pod_node_name);
        assert_eq!(cache.keys_by_index(index::NODE_NAME, "n1"), ["a/p1"]);
    }
}

//! The scheduler cache (the original "modeler"): the nodes with the pods bound to them as the
//! watch reports them, plus the pods this scheduler has *assumed* onto a node the moment it chose
//! it, so the next decision already counts them.
//!
//! ```text
//!   assume ──► Assumed(binding) ──finish_binding──► Assumed(deadline = now + ttl) ──ttl──► expired
//!     │               │                                     │
//!     │            forget (bind failed)              add_pod from the watch
//!     ▼               ▼                                     ▼
//!   (pod counted on the node)     removed               Bound (confirmed, on the node the
//!                                                              watch says)
//! ```
//!
//! The cache also keeps the spreading groups (Service and ReplicaSet selectors) and, per node, how
//! many pods of each group it holds, so selector spreading never walks pods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use skiff_meta::labels::Selector;

use crate::nodeinfo::{GroupId, NodeInfo, PodInfo};
use crate::{Error, Result};

/// How long an assumed pod whose bind succeeded may wait for the watch to show it before it is
/// dropped from the cache.
pub const DEFAULT_ASSUME_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
struct PodState {
    info: Arc<PodInfo>,
    /// Some while assumed: `None` until the bind finishes, then the expiry.
    assumed: Option<Option<Instant>>,
}

/// The kind of object whose selector defines a spreading group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupKind {
    /// A Service (`spec.selector`).
    Service,
    /// A ReplicaSet (`spec.selector`).
    ReplicaSet,
}

/// Nodes, bound and assumed pods, and spreading groups.
#[derive(Debug)]
pub struct Cache {
    /// Node infos in a vector, the order the algorithm walks; `index` maps names into it.
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    pods: HashMap<String, PodState>,
    /// (namespace, kind, name) → group id and selector.
    groups: BTreeMap<(String, GroupKind, String), (GroupId, Selector)>,
    next_group: GroupId,
    ttl: Duration,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::new(DEFAULT_ASSUME_TTL)
    }
}

impl Cache {
    /// An empty cache whose assumed pods expire `ttl` after their bind finished.
    pub fn new(ttl: Duration) -> Cache {
        Cache {
            nodes: Vec::new(),
            index: HashMap::new(),
            pods: HashMap::new(),
            groups: BTreeMap::new(),
            next_group: 1,
            ttl,
        }
    }

    /// The node infos (some may lack a node object: pods on a node not seen or already deleted).
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// A node info by name.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeInfo {
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                self.nodes.push(NodeInfo::empty(name));
                self.index.insert(name.to_string(), self.nodes.len() - 1);
                self.nodes.len() - 1
            }
        };
        &mut self.nodes[i]
    }

    fn drop_node_if_gone(&mut self, name: &str) {
        let Some(&i) = self.index.get(name) else {
            return;
        };
        if self.nodes[i].node.is_some() || !self.nodes[i].pods.is_empty() {
            return;
        }
        self.index.remove(name);
        self.nodes.swap_remove(i);
        if let Some(moved) = self.nodes.get(i) {
            self.index.insert(moved.name.clone(), i);
        }
    }

    /// Adds or updates a node.
    pub fn upsert_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.node_mut(&name).set_node(node);
    }

    /// Removes a node; its pods stay counted (on a node no pod can be scheduled to) until they go.
    pub fn remove_node(&mut self, name: &str) {
        if let Some(&i) = self.index.get(name) {
            self.nodes[i].node = None;
        }
        self.drop_node_if_gone(name);
    }

    /// Adds or updates a bound pod (one with `spec.nodeName`) as the watch reports it. A pod this
    /// scheduler assumed is confirmed, on whichever node the watch says.
    pub fn upsert_pod(&mut self, pod: &Pod) {
        let mut info = PodInfo::new(pod);
        if info.node_name.is_empty() {
            return;
        }
        info.groups = self.groups_for(&info.namespace, &info.labels);
        let info = Arc::new(info);
        if let Some(old) = self.pods.remove(&info.key) {
            self.node_mut(&old.info.node_name).remove_pod(&old.info.key);
            self.drop_node_if_gone(&old.info.node_name.clone());
        }
        self.node_mut(&info.node_name).add_pod(info.clone());
        self.pods.insert(
            info.key.clone(),
            PodState {
                info,
                assumed: None,
            },
        );
    }

    /// Removes a pod (deleted, or no longer bound).
    pub fn remove_pod(&mut self, key: &str) {
        if let Some(old) = self.pods.remove(key) {
            let node = old.info.node_name.clone();
            self.node_mut(&node).remove_pod(key);
            self.drop_node_if_gone(&node);
        }
    }

    /// Counts `pod` on `node` before the bind is confirmed. A pod already in the cache (bound or
    /// assumed) cannot be assumed again.
    pub fn assume(&mut self, mut pod: PodInfo, node: &str) -> Result<()> {
        if self.pods.contains_key(&pod.key) {
            return Err(Error::AlreadyInCache(pod.key));
        }
        pod.node_name = node.to_string();
        let info = Arc::new(pod);
        self.node_mut(node).add_pod(info.clone());
        self.pods.insert(
            info.key.clone(),
            PodState {
                info,
                assumed: Some(None),
            },
        );
        Ok(())
    }

    /// The bind of an assumed pod succeeded: start its expiry clock.
    pub fn finish_binding(&mut self, key: &str, now: Instant) {
        if let Some(PodState {
            assumed: Some(deadline),
            ..
        }) = self.pods.get_mut(key)
        {
            *deadline = Some(now + self.ttl);
        }
    }

    /// The bind of an assumed pod failed: stop counting it.
    pub fn forget(&mut self, key: &str) {
        if self.is_assumed(key) {
            self.remove_pod(key);
        }
    }

    /// Whether a pod is assumed and not yet confirmed.
    pub fn is_assumed(&self, key: &str) -> bool {
        self.pods.get(key).is_some_and(|s| s.assumed.is_some())
    }

    /// Whether the cache holds a pod (bound or assumed).
    pub fn contains_pod(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// Drops assumed pods whose bind finished more than the TTL ago without the watch confirming
    /// them; returns their keys.
    pub fn cleanup_expired(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, s)| matches!(s.assumed, Some(Some(deadline)) if deadline <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &expired {
            self.remove_pod(k);
        }
        expired
    }

    /// The spreading groups whose selectors match a pod's labels in its namespace.
    pub fn groups_for(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<GroupId> {
        self.groups
            .range((namespace.to_string(), GroupKind::Service, String::new())..)
            .take_while(|((ns, _, _), _)| ns == namespace)
            .filter(|(_, (_, selector))| selector.matches(labels))
            .map(|(_, (id, _))| *id)
            .collect()
    }

    /// Sets (or with `None` removes) the selector of a spreading group, and recounts the pods of
    /// its namespace. An empty selector selects nothing here, as in the original listers.
    pub fn set_group(
        &mut self,
        kind: GroupKind,
        namespace: &str,
        name: &str,
        selector: Option<Selector>,
    ) {
        let key = (namespace.to_string(), kind, name.to_string());
        let selector = selector.filter(|s| !s.is_empty() && !s.matches_nothing());
        let changed = match (&selector, self.groups.get(&key)) {
            (None, None) => false,
            (Some(s), Some((_, old))) => s != old,
            _ => true,
        };
        if !changed {
            return;
        }
        match selector {
            None => {
                self.groups.remove(&key);
            }
            Some(s) => {
                let id = match self.groups.get(&key) {
                    Some((id, _)) => *id,
                    None => {
                        self.next_group += 1;
                        self.next_group
                    }
                };
                self.groups.insert(key, (id, s));
            }
        }
        let keys: Vec<String> = self
            .pods
            .values()
            .filter(|s| s.info.namespace == namespace)
            .map(|s| s.info.key.clone())
            .collect();
        for k in keys {
            let state = self.pods.get(&k).expect("listed above").clone();
            let groups = self.groups_for(namespace, &state.info.labels);
            if groups == state.info.groups {
                continue;
            }
            let mut info = (*state.info).clone();
            info.groups = groups;
            let info = Arc::new(info);
            // add_pod replaces the old entry (and its group counts).
            self.node_mut(&info.node_name).add_pod(info.clone());
            self.pods.insert(
                k,
                PodState {
                    info,
                    assumed: state.assumed,
                },
            );
        }
    }

    /// How many pods (bound and assumed) the cache holds.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, PodSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                allocatable: Some(
                    [
                        ("cpu".to_string(), Quantity("4".into())),
                        ("pods".to_string(), Quantity("110".into())),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn pod(name: &str, node: Option<&str>, app: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                containers: vec![Default::default()],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn assumed_pods_count_until_confirmed_by_the_watch() {
        let mut c = Cache::default();
        c.upsert_node(node("n1"));
        c.upsert_node(node("n2"));
        let p = pod("p", None, "web");
        c.assume(PodInfo::new(&p), "n1").unwrap();
        assert!(c.is_assumed("default/p"));
        assert_eq!(c.node("n1").unwrap().pod_count(), 1);
        assert!(matches!(
            c.assume(PodInfo::new(&p), "n2"),
            Err(Error::AlreadyInCache(_))
        ));
        // The watch shows the pod bound (to n2, say another scheduler won): counted there only.
        c.upsert_pod(&pod("p", Some("n2"), "web"));
        assert!(!c.is_assumed("default/p"));
        assert_eq!(c.node("n1").unwrap().pod_count(), 0);
        assert_eq!(c.node("n2").unwrap().pod_count(), 1);
        // Confirmed pods never expire.
        assert!(
            c.cleanup_expired(Instant::now() + Duration::from_secs(3600))
                .is_empty()
        );
        c.remove_pod("default/p");
        assert_eq!(c.node("n2").unwrap().pod_count(), 0);
    }

    #[test]
    fn assumed_pods_expire_only_after_the_bind_finished_plus_ttl() {
        let ttl = Duration::from_secs(30);
        let mut c = Cache::new(ttl);
        c.upsert_node(node("n1"));
        c.assume(PodInfo::new(&pod("p", None, "web")), "n1")
            .unwrap();
        let t0 = Instant::now();
        // Still binding: no expiry however long it takes.
        assert!(c.cleanup_expired(t0 + Duration::from_secs(3600)).is_empty());
        c.finish_binding("default/p", t0);
        assert!(
            c.cleanup_expired(t0 + ttl - Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(c.cleanup_expired(t0 + ttl), vec!["default/p".to_string()]);
        assert_eq!(c.node("n1").unwrap().pod_count(), 0);
    }

    #[test]
    fn forget_drops_an_assumed_pod_but_not_a_bound_one() {
        let mut c = Cache::default();
        c.upsert_node(node("n1"));
        c.assume(PodInfo::new(&pod("a", None, "web")), "n1")
            .unwrap();
        c.forget("default/a");
        assert!(!c.contains_pod("default/a"));
        c.upsert_pod(&pod("b", Some("n1"), "web"));
        c.forget("default/b");
        assert!(c.contains_pod("default/b"));
    }

    #[test]
    fn nodes_removed_with_pods_linger_without_an_object() {
        let mut c = Cache::default();
        c.upsert_node(node("n1"));
        c.upsert_node(node("n2"));
        c.upsert_pod(&pod("a", Some("n1"), "web"));
        c.remove_node("n1");
        assert!(c.node("n1").unwrap().node.is_none());
        c.remove_pod("default/a");
        assert!(c.node("n1").is_none());
        assert_eq!(c.nodes().len(), 1);
        assert_eq!(
            c.node("n2").unwrap().name,
            "n2",
            "index fixed after swap_remove"
        );
        // A pod on a node never seen creates a placeholder.
        c.upsert_pod(&pod("b", Some("n9"), "web"));
        assert!(c.node("n9").unwrap().node.is_none());
    }

    #[test]
    fn groups_are_counted_per_node_and_recounted_when_selectors_change() {
        let mut c = Cache::default();
        c.upsert_node(node("n1"));
        c.upsert_pod(&pod("a", Some("n1"), "web"));
        c.upsert_pod(&pod("b", Some("n1"), "db"));
        assert!(c.node("n1").unwrap().group_counts.is_empty());
        let web = Selector::from_set(&[("app".to_string(), "web".to_string())].into());
        c.set_group(GroupKind::Service, "default", "web", Some(web.clone()));
        let labels = [("app".to_string(), "web".to_string())].into();
        let groups = c.groups_for("default", &labels);
        assert_eq!(groups.len(), 1);
        assert_eq!(c.node("n1").unwrap().group_counts.get(&groups[0]), Some(&1));
        // Other namespaces do not match.
        assert!(c.groups_for("other", &labels).is_empty());
        // An empty selector selects nothing.
        c.set_group(
            GroupKind::ReplicaSet,
            "default",
            "all",
            Some(Selector::everything()),
        );
        assert_eq!(c.groups_for("default", &labels).len(), 1);
        c.set_group(GroupKind::Service, "default", "web", None);
        assert!(c.node("n1").unwrap().group_counts.is_empty());
    }
}

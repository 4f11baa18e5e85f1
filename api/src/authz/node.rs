//! The Node authorizer, as kube-apiserver's `--authorization-mode=Node` decides: a kubelet
//! (user `system:node:<name>` in `system:nodes`) reads only the Secrets, ConfigMaps,
//! PersistentVolumeClaims and PersistentVolumes of pods bound to its node, and asks for
//! service-account tokens only of the accounts those pods run as. Everything else a kubelet does
//! is what the `system:node` ClusterRole's rules say (pods, its Node, Leases, Events); which node,
//! pod or Lease it may write is NodeRestriction's business ([`crate::admission::node`]).
//!
//! The graph is kept from the log: every pod's node and the objects it refers to, every claim's
//! bound volume. Where the graph says no, the authorizer has no opinion and RBAC decides (an
//! administrator may still bind a node more), as upstream chains `Node,RBAC`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock, RwLock};

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use serde_json::Value;

use super::rbac::{Request, Rule};
use crate::auth::User;
use crate::registry::namespace_and_name;
use crate::server::ApiServer;

pub use super::bootstrap::NODES_GROUP;
/// The prefix of a kubelet's user name; the node's name follows.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// The node a kubelet's identity stands for: `system:node:<name>` in `system:nodes`; `None` for
/// every other user (and for a node identity without a name, which gets nothing from here).
pub fn node_of(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    (!name.is_empty() && user.in_group(NODES_GROUP)).then_some(name)
}

/// What the Node authorizer says of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed, and why.
    Allow(String),
    /// Not this authorizer's to allow; the reason, for the 403 if RBAC does not allow it either.
    NoOpinion(String),
}

/// What one pod refers to, and where it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PodRefs {
    node: String,
    secrets: BTreeSet<String>,
    config_maps: BTreeSet<String>,
    claims: BTreeSet<String>,
    service_account: String,
}

impl PodRefs {
    fn of(object: &Value) -> Option<PodRefs> {
        let pod: Pod = serde_json::from_value(object.clone()).ok()?;
        let spec = pod.spec?;
        let node = spec.node_name.clone().filter(|n| !n.is_empty())?;
        let name = pod.metadata.name.unwrap_or_default();
        let mut refs = PodRefs {
            node,
            service_account: spec
                .service_account_name
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".to_string()),
            ..PodRefs::default()
        };
        refs.collect(&spec, &name);
        Some(refs)
    }

    /// Every Secret, ConfigMap and claim `spec` names: volumes (projected sources included),
    /// image pull secrets, every container's `env` and `envFrom` (init and ephemeral too), and
    /// the claims of generic ephemeral volumes (`<pod>-<volume>`).
    fn collect(&mut self, spec: &PodSpec, pod_name: &str) {
        for secret in spec.image_pull_secrets.iter().flatten() {
            self.secrets.insert(secret.name.clone());
        }
        for volume in spec.volumes.iter().flatten() {
            if let Some(s) = volume.secret.as_ref().and_then(|s| s.secret_name.clone()) {
                self.secrets.insert(s);
            }
            if let Some(c) = &volume.config_map {
                self.config_maps.insert(c.name.clone());
            }
            if let Some(c) = &volume.persistent_volume_claim {
                self.claims.insert(c.claim_name.clone());
            }
            if volume.ephemeral.is_some() {
                self.claims.insert(format!("{pod_name}-{}", volume.name));
            }
            for source in volume
                .projected
                .iter()
                .flat_map(|p| p.sources.iter().flatten())
            {
                if let Some(s) = &source.secret {
                    self.secrets.insert(s.name.clone());
                }
                if let Some(c) = &source.config_map {
                    self.config_maps.insert(c.name.clone());
                }
            }
            // Volume plugins that name a Secret for their credentials.
            let plugin_secrets = [
                volume.cephfs.as_ref().and_then(|v| v.secret_ref.as_ref()),
                volume.rbd.as_ref().and_then(|v| v.secret_ref.as_ref()),
                volume.iscsi.as_ref().and_then(|v| v.secret_ref.as_ref()),
                volume
                    .flex_volume
                    .as_ref()
                    .and_then(|v| v.secret_ref.as_ref()),
                volume
                    .csi
                    .as_ref()
                    .and_then(|v| v.node_publish_secret_ref.as_ref()),
            ];
            for secret in plugin_secrets.into_iter().flatten() {
                self.secrets.insert(secret.name.clone());
            }
        }
        let containers = spec
            .containers
            .iter()
            .map(|c| (&c.env, &c.env_from))
            .chain(
                spec.init_containers
                    .iter()
                    .flatten()
                    .map(|c| (&c.env, &c.env_from)),
            )
            .chain(
                spec.ephemeral_containers
                    .iter()
                    .flatten()
                    .map(|c| (&c.env, &c.env_from)),
            );
        for (env, env_from) in containers {
            for var in env.iter().flatten() {
                let Some(from) = &var.value_from else {
                    continue;
                };
                if let Some(s) = &from.secret_key_ref {
                    self.secrets.insert(s.name.clone());
                }
                if let Some(c) = &from.config_map_key_ref {
                    self.config_maps.insert(c.name.clone());
                }
            }
            for source in env_from.iter().flatten() {
                if let Some(s) = &source.secret_ref {
                    self.secrets.insert(s.name.clone());
                }
                if let Some(c) = &source.config_map_ref {
                    self.config_maps.insert(c.name.clone());
                }
            }
        }
    }
}

/// Pods by node, what they refer to, and claims' volumes.
#[derive(Debug, Default, Clone)]
pub struct Graph {
    /// (namespace, name) of every pod bound to a node.
    pods: HashMap<(String, String), PodRefs>,
    /// The pods of each node.
    by_node: HashMap<String, BTreeSet<(String, String)>>,
    /// (namespace, name) of every claim, and the volume it is bound to.
    claims: HashMap<(String, String), String>,
}

impl Graph {
    /// Puts a pod in the graph (or, with `None`, takes `namespace/name` out).
    pub fn apply_pod(&mut self, namespace: &str, name: &str, object: Option<&Value>) {
        let key = (namespace.to_string(), name.to_string());
        if let Some(old) = self.pods.remove(&key)
            && let Some(pods) = self.by_node.get_mut(&old.node)
        {
            pods.remove(&key);
            if pods.is_empty() {
                self.by_node.remove(&old.node);
            }
        }
        // Finished pods need nothing more from the API (Kubernetes drops them from the graph too).
        let finished = object
            .is_some_and(|o| matches!(o["status"]["phase"].as_str(), Some("Succeeded" | "Failed")));
        if let Some(refs) = object.filter(|_| !finished).and_then(PodRefs::of) {
            self.by_node
                .entry(refs.node.clone())
                .or_default()
                .insert(key.clone());
            self.pods.insert(key, refs);
        }
    }

    /// Puts a claim in the graph (or takes it out).
    pub fn apply_claim(&mut self, namespace: &str, name: &str, object: Option<&Value>) {
        let key = (namespace.to_string(), name.to_string());
        match object.and_then(|o| o["spec"]["volumeName"].as_str()) {
            Some(volume) if !volume.is_empty() => {
                self.claims.insert(key, volume.to_string());
            }
            _ => {
                self.claims.remove(&key);
            }
        }
    }

    /// Forgets every pod (before a fresh list).
    pub fn clear_pods(&mut self) {
        self.pods.clear();
        self.by_node.clear();
    }

    /// Forgets every claim (before a fresh list).
    pub fn clear_claims(&mut self) {
        self.claims.clear();
    }

    /// The pods on `node` in `namespace` (every namespace when empty).
    fn pods_on<'a>(&'a self, node: &str, namespace: &'a str) -> impl Iterator<Item = &'a PodRefs> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter(move |(ns, _)| namespace.is_empty() || ns == namespace)
            .filter_map(|key| self.pods.get(key))
    }

    /// Whether a pod on `node` refers to the object.
    fn relates(&self, node: &str, object: Object<'_>) -> bool {
        match object {
            Object::Secret(ns, name) => self.pods_on(node, ns).any(|p| p.secrets.contains(name)),
            Object::ConfigMap(ns, name) => {
                self.pods_on(node, ns).any(|p| p.config_maps.contains(name))
            }
            Object::Claim(ns, name) => self.pods_on(node, ns).any(|p| p.claims.contains(name)),
            Object::ServiceAccount(ns, name) => {
                self.pods_on(node, ns).any(|p| p.service_account == name)
            }
            Object::Volume(name) => self.by_node.get(node).into_iter().flatten().any(|key| {
                self.pods.get(key).is_some_and(|pod| {
                    pod.claims.iter().any(|claim| {
                        self.claims
                            .get(&(key.0.clone(), claim.clone()))
                            .is_some_and(|v| v == name)
                    })
                })
            }),
        }
    }

    /// Whether `pod` (namespace, name) is bound to `node`.
    pub fn pod_on(&self, node: &str, namespace: &str, name: &str) -> bool {
        self.pods
            .get(&(namespace.to_string(), name.to_string()))
            .is_some_and(|p| p.node == node)
    }
}

/// An object the graph can relate to a node.
#[derive(Debug, Clone, Copy)]
enum Object<'a> {
    Secret(&'a str, &'a str),
    ConfigMap(&'a str, &'a str),
    Claim(&'a str, &'a str),
    Volume(&'a str),
    ServiceAccount(&'a str, &'a str),
}

/// The rules every kubelet holds outside the graph: the `system:node` ClusterRole's.
static NODE_RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let role = super::bootstrap::cluster_roles()
        .into_iter()
        .find(|r| r["metadata"]["name"] == "system:node")
        .expect("the bootstrap policy has system:node");
    let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
        serde_json::from_value(role["rules"].clone()).expect("system:node's rules decode");
    rules.iter().map(Rule::from_policy_rule).collect()
});

/// What the Node authorizer says of `request` by the kubelet of `node`.
pub fn decide(graph: &Graph, node: &str, request: &Request<'_>) -> Verdict {
    let Request::Resource {
        verb,
        group,
        resource,
        subresource,
        namespace,
        name,
    } = *request
    else {
        return Verdict::NoOpinion(String::new());
    };
    let object = match (group, resource, subresource) {
        ("", "secrets", "") => Some(Object::Secret(namespace, name)),
        ("", "configmaps", "") => Some(Object::ConfigMap(namespace, name)),
        ("", "persistentvolumeclaims", "") => Some(Object::Claim(namespace, name)),
        ("", "persistentvolumes", "") => Some(Object::Volume(name)),
        ("", "serviceaccounts", "token") => Some(Object::ServiceAccount(namespace, name)),
        _ => None,
    };
    let Some(object) = object else {
        return match NODE_RULES.iter().any(|r| r.allows(request)) {
            true => Verdict::Allow(format!(
                "Node: allowed by the rules of every node to {node}"
            )),
            false => Verdict::NoOpinion(String::new()),
        };
    };
    let allowed_verbs: &[&str] = match object {
        Object::ServiceAccount(..) => &["create"],
        _ => &["get", "list", "watch"],
    };
    if !allowed_verbs.contains(&verb) {
        return Verdict::NoOpinion(format!(
            "can only {} individual resources of this type",
            allowed_verbs.join("/")
        ));
    }
    if name.is_empty() {
        return Verdict::NoOpinion(format!(
            "can only {} individual resources of this type",
            allowed_verbs.join("/")
        ));
    }
    if graph.relates(node, object) {
        Verdict::Allow(format!("Node: a pod on node '{node}' refers to it"))
    } else {
        Verdict::NoOpinion(format!(
            "no relationship found between node '{node}' and this object"
        ))
    }
}

/// The graph, kept current from the log.
#[derive(Debug, Default)]
pub struct NodeGraph(RwLock<Arc<Graph>>);

impl NodeGraph {
    /// The graph now.
    pub fn get(&self) -> Arc<Graph> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn change(&self, f: impl FnOnce(&mut Graph)) {
        let mut current = self.0.write().unwrap_or_else(|e| e.into_inner());
        f(Arc::make_mut(&mut current));
    }

    /// Lists pods and claims into the graph, then follows them until the server shuts down.
    pub async fn start(server: &Arc<ApiServer>) -> crate::error::Result<()> {
        use skiff_kinds::builtin::{persistent_volume_claim, pod};
        crate::follow::start(server, &pod::INFO, "the node authorizer", PODS).await?;
        crate::follow::start(
            server,
            &persistent_volume_claim::INFO,
            "the node authorizer",
            CLAIMS,
        )
        .await
    }
}

/// Follows one kind into the graph: `clear` empties its part, `apply` puts one object in (or,
/// given `None`, takes it out).
struct Followed {
    clear: fn(&mut Graph),
    apply: fn(&mut Graph, &str, &str, Option<&Value>),
}

const PODS: Followed = Followed {
    clear: Graph::clear_pods,
    apply: Graph::apply_pod,
};

const CLAIMS: Followed = Followed {
    clear: Graph::clear_claims,
    apply: Graph::apply_claim,
};

impl crate::follow::Follower for Followed {
    async fn listed(&self, server: &Arc<ApiServer>, items: &[Value]) {
        server.authorizer.nodes.change(|graph| {
            (self.clear)(graph);
            for item in items {
                let (ns, name) = namespace_and_name(item);
                (self.apply)(graph, ns.unwrap_or_default(), name, Some(item));
            }
        });
    }

    async fn changed(&self, server: &Arc<ApiServer>, object: &Value, present: bool) {
        let (ns, name) = namespace_and_name(object);
        server.authorizer.nodes.change(|graph| {
            (self.apply)(
                graph,
                ns.unwrap_or_default(),
                name,
                present.then_some(object),
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, node: &str, spec: Value) -> Value {
        let mut spec = spec;
        spec["nodeName"] = json!(node);
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        }
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": ns, "name": name}, "spec": spec})
    }

    fn get<'a>(resource: &'a str, ns: &'a str, name: &'a str) -> Request<'a> {
        Request::Resource {
            verb: "get",
            group: "",
            resource,
            subresource: "",
            namespace: ns,
            name,
        }
    }

    fn allowed(graph: &Graph, node: &str, request: &Request<'_>) -> bool {
        matches!(decide(graph, node, request), Verdict::Allow(_))
    }

    fn graph() -> Graph {
        let mut g = Graph::default();
        let web = pod(
            "shop",
            "web",
            "n1",
            json!({
                "serviceAccountName": "web-sa",
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [
                    {"name": "tls", "secret": {"secretName": "tls"}},
                    {"name": "conf", "configMap": {"name": "conf"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "all", "projected": {"sources": [
                        {"secret": {"name": "proj-secret"}},
                        {"configMap": {"name": "proj-conf"}},
                        {"serviceAccountToken": {"path": "token"}}]}}
                ],
                "initContainers": [{"name": "init", "image": "busybox",
                    "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "init-env", "key": "k"}}}]}],
                "containers": [{"name": "c", "image": "busybox",
                    "envFrom": [{"configMapRef": {"name": "env-conf"}}, {"secretRef": {"name": "env-secret"}}]}]
            }),
        );
        g.apply_pod("shop", "web", Some(&web));
        g.apply_pod(
            "shop",
            "db",
            Some(&pod(
                "shop",
                "db",
                "n2",
                json!({
            "volumes": [{"name": "s", "secret": {"secretName": "db-password"}}]}),
            )),
        );
        g.apply_claim(
            "shop",
            "data",
            Some(&json!({"spec": {"volumeName": "pv-data"}})),
        );
        g.apply_claim(
            "shop",
            "other",
            Some(&json!({"spec": {"volumeName": "pv-other"}})),
        );
        g
    }

    #[test]
    fn a_node_reads_what_its_pods_refer_to_and_nothing_else() {
        let g = graph();
        for (resource, name) in [
            ("secrets", "tls"),
            ("secrets", "pull"),
            ("secrets", "proj-secret"),
            ("secrets", "init-env"),
            ("secrets", "env-secret"),
            ("configmaps", "conf"),
            ("configmaps", "proj-conf"),
            ("configmaps", "env-conf"),
            ("persistentvolumeclaims", "data"),
            ("persistentvolumeclaims", "web-scratch"),
        ] {
            assert!(
                allowed(&g, "n1", &get(resource, "shop", name)),
                "{resource}/{name}"
            );
            // The other node's kubelet may not, and nor may n1's in another namespace.
            assert!(
                !allowed(&g, "n2", &get(resource, "shop", name)),
                "{resource}/{name}"
            );
            assert!(
                !allowed(&g, "n1", &get(resource, "other", name)),
                "{resource}/{name}"
            );
        }
        assert!(allowed(&g, "n2", &get("secrets", "shop", "db-password")));
        assert_eq!(
            decide(&g, "n1", &get("secrets", "shop", "db-password")),
            Verdict::NoOpinion("no relationship found between node 'n1' and this object".into())
        );
        assert!(allowed(&g, "n1", &get("persistentvolumes", "", "pv-data")));
        assert!(!allowed(
            &g,
            "n1",
            &get("persistentvolumes", "", "pv-other")
        ));
    }

    fn req<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> Request<'a> {
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        }
    }

    #[test]
    fn only_single_objects_are_read_and_never_written() {
        let g = graph();
        assert!(!allowed(
            &g,
            "n1",
            &req("list", "", "secrets", "", "shop", "")
        ));
        // A watch of one named Secret (a field selector on its name) is a read of that object.
        assert!(allowed(
            &g,
            "n1",
            &req("watch", "", "secrets", "", "shop", "tls")
        ));
        assert!(!allowed(
            &g,
            "n1",
            &req("update", "", "secrets", "", "shop", "tls")
        ));
    }

    #[test]
    fn tokens_only_for_the_accounts_of_its_pods() {
        let g = graph();
        let token = |ns, account| Request::Resource {
            verb: "create",
            group: "",
            resource: "serviceaccounts",
            subresource: "token",
            namespace: ns,
            name: account,
        };
        assert!(allowed(&g, "n1", &token("shop", "web-sa")));
        assert!(allowed(&g, "n2", &token("shop", "default")));
        assert!(!allowed(&g, "n1", &token("shop", "default")));
        assert!(!allowed(&g, "n2", &token("shop", "web-sa")));
    }

    #[test]
    fn moved_deleted_and_finished_pods_leave_the_graph() {
        let mut g = graph();
        let moved = pod(
            "shop",
            "db",
            "n1",
            json!({
            "volumes": [{"name": "s", "secret": {"secretName": "db-password"}}]}),
        );
        g.apply_pod("shop", "db", Some(&moved));
        assert!(allowed(&g, "n1", &get("secrets", "shop", "db-password")));
        assert!(!allowed(&g, "n2", &get("secrets", "shop", "db-password")));
        g.apply_pod("shop", "db", None);
        assert!(!allowed(&g, "n1", &get("secrets", "shop", "db-password")));
        let mut done = moved.clone();
        done["status"] = json!({"phase": "Succeeded"});
        g.apply_pod("shop", "db", Some(&done));
        assert!(!allowed(&g, "n1", &get("secrets", "shop", "db-password")));
        // An unscheduled pod belongs to no node.
        let pending = json!({"metadata": {"namespace": "shop", "name": "p"},
            "spec": {"containers": [], "volumes": [{"name": "s", "secret": {"secretName": "x"}}]}});
        g.apply_pod("shop", "p", Some(&pending));
        assert!(!allowed(&g, "n1", &get("secrets", "shop", "x")));
        assert!(g.pod_on("n1", "shop", "web"));
        assert!(!g.pod_on("n2", "shop", "web"));
    }

    #[test]
    fn everything_else_is_the_node_role_s() {
        let g = Graph::default();
        assert!(allowed(&g, "n1", &req("list", "", "pods", "", "", "")));
        assert!(allowed(
            &g,
            "n1",
            &req("patch", "", "nodes", "status", "", "n1")
        ));
        assert_eq!(
            decide(&g, "n1", &req("list", "apps", "deployments", "", "", "")),
            Verdict::NoOpinion(String::new())
        );
    }

    #[test]
    fn only_named_members_of_the_nodes_group_are_nodes() {
        let user = |name: &str, groups: &[&str]| User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..User::default()
        };
        assert_eq!(node_of(&user("system:node:n1", &[NODES_GROUP])), Some("n1"));
        assert_eq!(node_of(&user("system:node:n1", &["devs"])), None);
        assert_eq!(node_of(&user("system:node:", &[NODES_GROUP])), None);
        assert_eq!(node_of(&user("alice", &[NODES_GROUP])), None);
    }
}

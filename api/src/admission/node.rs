//! NodeRestriction, as kube-apiserver's admission plugin of that name: a kubelet
//! (`system:node:<name>`, see [`crate::authz::node`]) writes only its own Node (and not the
//! `node-restriction.kubernetes.io/` labels an administrator keeps for placing workloads), its own
//! Lease, the status of pods bound to it, mirror pods of its static pods, and deletions and
//! evictions of pods bound to it; it gets service-account tokens only bound to pods on it.
//!
//! The Node authorizer decides what a kubelet may *read*; RBAC's node rules let every kubelet
//! write these kinds at all; this plugin narrows the writes to its own objects.

use serde_json::Value;

use super::{Attributes, Operation, Plugin};
use crate::authz::node::node_of;
use crate::error::{Error, Result};
use crate::registry::Registry;

/// The annotation that marks a mirror pod (the API's copy of a kubelet's static pod).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Labels under this prefix are the administrator's; kubelets may not set or change them.
const RESTRICTED_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";
/// The namespace of node Leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The NodeRestriction admission plugin.
pub struct NodeRestriction;

fn forbidden(a: &Attributes<'_>, why: String) -> Error {
    Error::Forbidden(format!(
        "{} \"{}\" is forbidden: {why}",
        a.info.plural, a.name
    ))
}

fn node_name_of(pod: Option<&Value>) -> &str {
    pod.and_then(|p| p["spec"]["nodeName"].as_str())
        .unwrap_or_default()
}

#[async_trait::async_trait]
impl Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    async fn admit(&self, _registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        check(a)
    }
}

/// The plugin's decision: pure, from the write alone.
fn check(a: &Attributes<'_>) -> Result<()> {
    let Some(node) = node_of(a.user) else {
        return Ok(());
    };
    {
        match (a.info.group, a.info.plural) {
            ("", "nodes") => admit_node(node, a),
            ("", "pods") => admit_pod(node, a),
            ("coordination.k8s.io", "leases") => {
                if a.namespace != Some(NODE_LEASE_NAMESPACE) || a.name != node {
                    return Err(forbidden(
                        a,
                        "can only access node lease with the same name as the requesting node"
                            .into(),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

fn admit_node(node: &str, a: &Attributes<'_>) -> Result<()> {
    if a.name != node {
        return Err(forbidden(
            a,
            format!("node {node:?} is not allowed to modify node {:?}", a.name),
        ));
    }
    let labels = |o: Option<&Value>| -> Vec<(String, String)> {
        o.and_then(|o| o["metadata"]["labels"].as_object())
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(RESTRICTED_LABEL_PREFIX))
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    };
    let new = labels(a.object.as_deref());
    let old = labels(a.old);
    let changed: Vec<&str> = new
        .iter()
        .filter(|l| !old.contains(l))
        .chain(old.iter().filter(|l| !new.contains(l)))
        .map(|(k, _)| k.as_str())
        .collect();
    if a.operation != Operation::Delete && !changed.is_empty() {
        return Err(forbidden(
            a,
            format!(
                "node {node:?} is not allowed to modify labels: {}",
                changed.join(", ")
            ),
        ));
    }
    Ok(())
}

fn admit_pod(node: &str, a: &Attributes<'_>) -> Result<()> {
    match (a.operation, a.subresource) {
        (Operation::Create, None) => {
            let pod = a.object.as_deref();
            let mirror = pod
                .and_then(|p| p["metadata"]["annotations"].get(MIRROR_ANNOTATION))
                .is_some();
            if !mirror {
                return Err(forbidden(
                    a,
                    format!(
                        "pod does not have \"{MIRROR_ANNOTATION}\" annotation, node {node:?} can only create mirror pods"
                    ),
                ));
            }
            if node_name_of(pod) != node {
                return Err(forbidden(
                    a,
                    format!("node {node:?} can only create pods with spec.nodeName set to itself"),
                ));
            }
            if let Some(what) = pod.and_then(api_references) {
                return Err(forbidden(
                    a,
                    format!("node {node:?} can not create pods that reference {what}"),
                ));
            }
            Ok(())
        }
        (Operation::Update, Some("status")) => {
            if node_name_of(a.old) != node {
                return Err(forbidden(
                    a,
                    format!(
                        "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                    ),
                ));
            }
            Ok(())
        }
        (Operation::Create, Some("eviction")) | (Operation::Delete, None) => {
            if node_name_of(a.old) != node {
                let verb = match a.operation {
                    Operation::Delete => "delete",
                    _ => "evict",
                };
                return Err(forbidden(
                    a,
                    format!("node {node:?} can only {verb} pods with spec.nodeName set to itself"),
                ));
            }
            Ok(())
        }
        (Operation::Update, None) => Err(forbidden(
            a,
            format!("node {node:?} can only update pod status"),
        )),
        _ => Ok(()),
    }
}

/// What API object a mirror pod would make its kubelet read, which a static pod may not do:
/// secrets, configmaps, claims or a service account token (Kubernetes refuses the same).
fn api_references(pod: &Value) -> Option<&'static str> {
    let spec = &pod["spec"];
    let volumes = spec["volumes"].as_array().into_iter().flatten();
    for volume in volumes {
        if volume.get("secret").is_some() {
            return Some("secrets");
        }
        if volume.get("configMap").is_some() {
            return Some("configmaps");
        }
        if volume.get("persistentVolumeClaim").is_some() || volume.get("ephemeral").is_some() {
            return Some("persistentvolumeclaims");
        }
        let sources = volume["projected"]["sources"]
            .as_array()
            .into_iter()
            .flatten();
        for source in sources {
            if source.get("secret").is_some() {
                return Some("secrets");
            }
            if source.get("configMap").is_some() {
                return Some("configmaps");
            }
            if source.get("serviceAccountToken").is_some() {
                return Some("serviceaccounts");
            }
        }
    }
    let containers = ["containers", "initContainers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|field| spec[field].as_array().into_iter().flatten());
    for container in containers {
        for var in container["env"].as_array().into_iter().flatten() {
            if var["valueFrom"].get("secretKeyRef").is_some() {
                return Some("secrets");
            }
            if var["valueFrom"].get("configMapKeyRef").is_some() {
                return Some("configmaps");
            }
        }
        for from in container["envFrom"].as_array().into_iter().flatten() {
            if from.get("secretRef").is_some() {
                return Some("secrets");
            }
            if from.get("configMapRef").is_some() {
                return Some("configmaps");
            }
        }
    }
    None
}

/// The TokenRequest half of NodeRestriction: a kubelet gets a token only bound to a pod that
/// runs on it. `bound_pod` is the pod the request binds the token to, if it names one.
pub fn check_token_request(
    user: &crate::auth::User,
    account: &str,
    bound_pod: Option<&Value>,
) -> Result<()> {
    let Some(node) = node_of(user) else {
        return Ok(());
    };
    let why = match bound_pod {
        None => "node requested token not bound to a pod".to_string(),
        Some(pod) if node_name_of(Some(pod)) != node => {
            "node requested token bound to a pod scheduled on a different node".to_string()
        }
        Some(_) => return Ok(()),
    };
    Err(Error::Forbidden(format!(
        "serviceaccounts \"{account}\" is forbidden: {why}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::User;
    use serde_json::json;
    use skiff_kinds::builtin::{lease, node, pod};
    use skiff_meta::ResourceInfo;

    fn kubelet(name: &str) -> User {
        User {
            name: format!("system:node:{name}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            ..User::default()
        }
    }

    struct Case {
        info: &'static ResourceInfo,
        operation: Operation,
        subresource: Option<&'static str>,
        namespace: Option<&'static str>,
        name: &'static str,
        object: Option<Value>,
        old: Option<Value>,
    }

    fn admit(user: &User, mut case: Case) -> std::result::Result<(), String> {
        let mut a = Attributes {
            operation: case.operation,
            info: case.info,
            subresource: case.subresource,
            namespace: case.namespace,
            name: case.name,
            object: case.object.as_mut(),
            old: case.old.as_ref(),
            user,
            dry_run: false,
            feedback: None,
        };
        let a = &mut a;
        check(a).map_err(|e| e.to_string())
    }

    fn on(node: &str) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
    }

    fn pod_case(
        operation: Operation,
        subresource: Option<&'static str>,
        old: Option<Value>,
    ) -> Case {
        Case {
            info: &pod::INFO,
            operation,
            subresource,
            namespace: Some("ns"),
            name: "p",
            object: old.clone(),
            old,
        }
    }

    #[test]
    fn a_kubelet_writes_only_its_own_node() {
        let n1 = kubelet("n1");
        let node_case = |name: &'static str, old: Option<Value>, new: Value| Case {
            info: &node::INFO,
            operation: if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            subresource: None,
            namespace: None,
            name,
            object: Some(new),
            old,
        };
        let plain = json!({"metadata": {"name": "n1", "labels": {"a": "b"}}});
        assert_eq!(admit(&n1, node_case("n1", None, plain.clone())), Ok(()));
        let err = admit(&n1, node_case("n2", None, plain.clone())).unwrap_err();
        assert!(
            err.contains("node \"n1\" is not allowed to modify node \"n2\""),
            "{err}"
        );
        let labelled = json!({"metadata": {"name": "n1",
            "labels": {"node-restriction.kubernetes.io/zone": "safe"}}});
        let err = admit(&n1, node_case("n1", Some(plain.clone()), labelled.clone())).unwrap_err();
        assert!(err.contains("node-restriction.kubernetes.io/zone"), "{err}");
        // Keeping an administrator's label as it is, is fine.
        assert_eq!(
            admit(&n1, node_case("n1", Some(labelled.clone()), labelled)),
            Ok(())
        );
        // Anyone else is not this plugin's business.
        assert_eq!(admit(&User::admin(), node_case("n2", None, plain)), Ok(()));
    }

    #[test]
    fn a_kubelet_touches_only_pods_bound_to_it() {
        let n1 = kubelet("n1");
        assert_eq!(
            admit(
                &n1,
                pod_case(Operation::Update, Some("status"), Some(on("n1")))
            ),
            Ok(())
        );
        let err = admit(
            &n1,
            pod_case(Operation::Update, Some("status"), Some(on("n2"))),
        )
        .unwrap_err();
        assert!(
            err.contains("can only update pod status for pods with spec.nodeName set to itself"),
            "{err}"
        );
        assert_eq!(
            admit(&n1, pod_case(Operation::Delete, None, Some(on("n1")))),
            Ok(())
        );
        let err = admit(&n1, pod_case(Operation::Delete, None, Some(on("n2")))).unwrap_err();
        assert!(err.contains("can only delete pods"), "{err}");
        let err = admit(
            &n1,
            pod_case(Operation::Create, Some("eviction"), Some(on("n2"))),
        )
        .unwrap_err();
        assert!(err.contains("can only evict pods"), "{err}");
        let err = admit(&n1, pod_case(Operation::Update, None, Some(on("n1")))).unwrap_err();
        assert!(err.contains("can only update pod status"), "{err}");
    }

    #[test]
    fn a_kubelet_creates_only_plain_mirror_pods_of_its_own() {
        let n1 = kubelet("n1");
        let create = |pod: Value| Case {
            object: Some(pod),
            old: None,
            ..pod_case(Operation::Create, None, None)
        };
        let mut mirror = on("n1");
        mirror["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "hash"});
        assert_eq!(admit(&n1, create(mirror.clone())), Ok(()));
        let err = admit(&n1, create(on("n1"))).unwrap_err();
        assert!(err.contains("can only create mirror pods"), "{err}");
        let mut elsewhere = mirror.clone();
        elsewhere["spec"]["nodeName"] = json!("n2");
        let err = admit(&n1, create(elsewhere)).unwrap_err();
        assert!(err.contains("spec.nodeName set to itself"), "{err}");
        let mut secretive = mirror;
        secretive["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
        let err = admit(&n1, create(secretive)).unwrap_err();
        assert!(err.contains("reference secrets"), "{err}");
    }

    #[test]
    fn a_kubelet_has_only_its_own_lease() {
        let n1 = kubelet("n1");
        let lease_case = |namespace, name| Case {
            info: &lease::INFO,
            operation: Operation::Update,
            subresource: None,
            namespace: Some(namespace),
            name,
            object: Some(json!({})),
            old: Some(json!({})),
        };
        assert_eq!(admit(&n1, lease_case("kube-node-lease", "n1")), Ok(()));
        assert!(admit(&n1, lease_case("kube-node-lease", "n2")).is_err());
        assert!(admit(&n1, lease_case("kube-system", "n1")).is_err());
    }

    #[test]
    fn tokens_only_bound_to_its_own_pods() {
        let n1 = kubelet("n1");
        assert!(check_token_request(&n1, "sa", Some(&on("n1"))).is_ok());
        let err = check_token_request(&n1, "sa", Some(&on("n2"))).unwrap_err();
        assert!(
            err.to_string().contains("scheduled on a different node"),
            "{err}"
        );
        let err = check_token_request(&n1, "sa", None).unwrap_err();
        assert!(err.to_string().contains("not bound to a pod"), "{err}");
        assert!(check_token_request(&User::admin(), "sa", None).is_ok());
    }
}

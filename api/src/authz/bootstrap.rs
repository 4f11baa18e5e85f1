//! The roles and bindings every cluster starts with, in the spirit of kube-apiserver's bootstrap
//! policy: `cluster-admin` for `system:masters`; the user-facing `admin`, `edit` and `view`,
//! aggregated from their `system:aggregate-to-*` pieces (so a CRD's chart can extend them);
//! discovery, self-review and public information for every user; and a role for each component.
//!
//! [`reconcile`] runs at every start. A missing object is created; an existing one annotated
//! `rbac.authorization.kubernetes.io/autoupdate: "true"` (or not annotated) gains the rules,
//! labels and subjects the defaults have and it lacks, and keeps whatever a user added; one
//! annotated `"false"` is left alone, as Kubernetes leaves it.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::registry::Update;
use crate::server::ApiServer;

/// The annotation that lets the server add missing defaults to an existing object.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The group of every kubelet's identity (`system:node:<name>`).
pub const NODES_GROUP: &str = "system:nodes";
/// The group of whoever holds the join token: it may only ask for a node certificate.
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";
/// The ClusterRole whose `create` on `certificatesigningrequests/nodeclient` lets a bootstrapper's
/// request for a node client certificate be approved automatically.
pub const NODE_CLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
/// The same for a node renewing its own certificate (`selfnodeclient`).
pub const SELF_NODE_CLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";
/// Bindings earlier versions made that grant too much: deleted at start unless a user has
/// taken them over (`autoupdate: "false"`). `skiff:nodes` gave every agent the node role
/// before each had its own identity and the Node authorizer.
const RETIRED_BINDINGS: &[&str] = &["skiff:nodes"];

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

/// One rule: verbs on resources of groups.
fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn urls(paths: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": paths, "verbs": verbs})
}

fn meta(name: &str, labels: Value) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    json!({
        "name": name,
        "labels": labels,
        "annotations": {AUTOUPDATE: "true"},
    })
}

fn cluster_role(name: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(name, json!({})),
        "rules": rules,
    })
}

/// A piece of `admin`, `edit` or `view`: labelled so that their aggregation gathers it.
fn piece(name: &str, into: &str, rules: Vec<Value>) -> Value {
    let mut role = cluster_role(name, rules);
    role["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{into}")] =
        json!("true");
    role
}

/// A ClusterRole that gathers the pieces labelled `aggregate-to-<name>`.
fn aggregated(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(name, labels),
        "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}}
        ]},
        "rules": [],
    })
}

fn binding(name: &str, role: &str, subjects: &[(&str, &str)]) -> Value {
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, name)| {
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
        })
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(name, json!({})),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

fn concat(parts: &[&[&str]]) -> Vec<String> {
    parts
        .iter()
        .flat_map(|p| p.iter().map(|s| s.to_string()))
        .collect()
}

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let read_write: Vec<String> = concat(&[READ, WRITE]);
    let rw: Vec<&str> = read_write.iter().map(String::as_str).collect();
    vec![
        cluster_role(
            "cluster-admin",
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        aggregated("admin", json!({})),
        aggregated(
            "edit",
            json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        ),
        aggregated(
            "view",
            json!({"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        ),
        piece(
            "system:aggregate-to-admin",
            "admin",
            vec![
                rule(
                    &["rbac.authorization.k8s.io"],
                    &["roles", "rolebindings"],
                    &rw,
                ),
                rule(
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                    &["create"],
                ),
            ],
        ),
        piece(
            "system:aggregate-to-edit",
            "edit",
            vec![
                rule(
                    &[""],
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "pods/eviction",
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                    &rw,
                ),
                rule(&[""], &["serviceaccounts/token"], &["create"]),
                rule(&[""], &["serviceaccounts"], &["impersonate"]),
                rule(
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                    &rw,
                ),
                rule(&["autoscaling"], &["horizontalpodautoscalers"], &rw),
                rule(&["batch"], &["cronjobs", "jobs"], &rw),
                rule(&["policy"], &["poddisruptionbudgets"], &rw),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "networkpolicies"],
                    &rw,
                ),
                rule(&["coordination.k8s.io"], &["leases"], &rw),
            ],
        ),
        // metrics-server's role for `kubectl top`: the metrics API is built in here.
        piece(
            "system:aggregated-metrics-reader",
            "view",
            vec![rule(&["metrics.k8s.io"], &["pods", "nodes"], READ)],
        ),
        piece(
            "system:aggregate-to-view",
            "view",
            vec![
                rule(
                    &[""],
                    &[
                        "pods",
                        "pods/log",
                        "pods/status",
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "replicationcontrollers/status",
                        "serviceaccounts",
                        "services",
                        "services/status",
                        "bindings",
                        "events",
                        "limitranges",
                        "resourcequotas",
                        "resourcequotas/status",
                        "namespaces",
                        "namespaces/status",
                    ],
                    READ,
                ),
                rule(
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                    READ,
                ),
                rule(
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                    READ,
                ),
                rule(
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                    READ,
                ),
                rule(
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                    READ,
                ),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                    READ,
                ),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
            ],
        ),
        cluster_role(
            "system:discovery",
            vec![urls(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/readyz",
                    "/openapi",
                    "/openapi/*",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![urls(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
        cluster_role(
            "system:basic-user",
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            "system:monitoring",
            vec![urls(
                &[
                    "/metrics",
                    "/metrics/slis",
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/livez/*",
                    "/readyz/*",
                    "/healthz/*",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![urls(
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            vec![
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            "system:kube-scheduler",
            vec![
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["create", "get", "update"],
                ),
                rule(
                    &[""],
                    &[
                        "nodes",
                        "namespaces",
                        "services",
                        "persistentvolumes",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                    ],
                    READ,
                ),
                rule(&[""], &["pods"], &["delete", "get", "list", "watch"]),
                rule(&[""], &["bindings", "pods/binding"], &["create"]),
                rule(&[""], &["pods/status"], &["patch", "update"]),
                rule(&["apps"], &["replicasets", "statefulsets"], READ),
                rule(&["policy"], &["poddisruptionbudgets"], READ),
                rule(
                    &["storage.k8s.io"],
                    &[
                        "storageclasses",
                        "csinodes",
                        "csidrivers",
                        "csistoragecapacities",
                    ],
                    READ,
                ),
            ],
        ),
        // What the scheduler's volume binding writes: the node a WaitForFirstConsumer claim's
        // volume is to be made on (`volume.kubernetes.io/selected-node`).
        cluster_role(
            "system:volume-scheduler",
            vec![
                rule(
                    &[""],
                    &["persistentvolumes"],
                    &["get", "list", "patch", "update", "watch"],
                ),
                rule(&["storage.k8s.io"], &["storageclasses"], READ),
                rule(
                    &[""],
                    &["persistentvolumeclaims"],
                    &["get", "list", "patch", "update", "watch"],
                ),
            ],
        ),
        cluster_role(
            "system:kube-controller-manager",
            // The controllers manage every workload kind; kube-controller-manager's own role
            // defers to per-controller service accounts, which skiff does not split yet.
            vec![rule(&["*"], &["*"], &["*"])],
        ),
        cluster_role(
            "system:node",
            vec![
                rule(
                    &[""],
                    &["nodes"],
                    &[
                        "create", "delete", "get", "list", "patch", "update", "watch",
                    ],
                ),
                rule(&[""], &["nodes/status"], &["patch", "update"]),
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(
                    &[""],
                    &["pods"],
                    &["create", "delete", "get", "list", "watch"],
                ),
                rule(&[""], &["pods/status"], &["patch", "update"]),
                rule(&[""], &["pods/eviction"], &["create"]),
                // Secrets, ConfigMaps, claims, volumes and service-account tokens: only those
                // of the node's own pods, which the Node authorizer decides from its graph.
                rule(&[""], &["services", "endpoints"], READ),
                rule(
                    &[""],
                    &["persistentvolumeclaims/status"],
                    &["patch", "update"],
                ),
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
                rule(
                    &["certificates.k8s.io"],
                    &["certificatesigningrequests"],
                    &["create", "get", "list", "watch"],
                ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["create", "delete", "get", "patch", "update"],
                ),
                rule(
                    &["storage.k8s.io"],
                    &["volumeattachments", "csidrivers", "csinodes"],
                    READ,
                ),
                rule(&["node.k8s.io"], &["runtimeclasses"], READ),
            ],
        ),
        cluster_role(
            "system:node-bootstrapper",
            vec![rule(
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
                &["create", "get", "list", "watch"],
            )],
        ),
        cluster_role(
            NODE_CLIENT_ROLE,
            vec![rule(
                &["certificates.k8s.io"],
                &["certificatesigningrequests/nodeclient"],
                &["create"],
            )],
        ),
        cluster_role(
            SELF_NODE_CLIENT_ROLE,
            vec![rule(
                &["certificates.k8s.io"],
                &["certificatesigningrequests/selfnodeclient"],
                &["create"],
            )],
        ),
        // The cluster DNS server (`system:kube-dns`): names from Services and their endpoints.
        cluster_role(
            "system:kube-dns",
            vec![
                rule(
                    &[""],
                    &["endpoints", "services", "namespaces", "pods"],
                    READ,
                ),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
            ],
        ),
        // The ingress controller built into skiff's proxy (it acts as `system:kube-proxy`):
        // Ingresses and their classes, the Services, endpoints and TLS Secrets they point at,
        // the Ingresses' status and Events about them; and NetworkPolicies, which it reports
        // as not enforced.
        cluster_role(
            "skiff:ingress-controller",
            vec![
                rule(&[""], &["services", "endpoints", "secrets", "nodes"], READ),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "ingressclasses", "networkpolicies"],
                    READ,
                ),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses/status"],
                    &["update", "patch"],
                ),
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
            ],
        ),
        cluster_role(
            "system:node-proxier",
            vec![
                rule(&[""], &["services", "endpoints", "nodes"], READ),
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
            ],
        ),
    ]
}

/// `role` (a ClusterRole) as a Role in `namespace`.
fn in_namespace(mut role: Value, namespace: &str, kind: &str) -> Value {
    role["kind"] = json!(kind);
    role["metadata"]["namespace"] = json!(namespace);
    role
}

/// The default Roles, each in its namespace.
pub fn roles() -> Vec<Value> {
    // The cluster DNS server keeps its own `kube-system/kube-dns` Service and endpoints (it is
    // not a pod a controller could list): it may create those kinds in `kube-system` and change
    // only the objects named `kube-dns`.
    let named = |resources: &[&str], group: &str| {
        let mut rule = rule(&[group], resources, &["get", "update", "patch"]);
        rule["resourceNames"] = json!(["kube-dns"]);
        rule
    };
    // Aggregated API servers (metrics-server) bind this to read how to authenticate requests
    // ([`crate::aggregation::AUTHENTICATION_CONFIG_MAP`]), as kube-apiserver's bootstrap policy.
    let mut authentication_reader = rule(&[""], &["configmaps"], &["get", "list", "watch"]);
    authentication_reader["resourceNames"] = json!([crate::aggregation::AUTHENTICATION_CONFIG_MAP]);
    let reader = in_namespace(
        cluster_role(
            "extension-apiserver-authentication-reader",
            vec![authentication_reader],
        ),
        "kube-system",
        "Role",
    );
    vec![
        reader,
        in_namespace(
            cluster_role(
                "skiff:kube-dns",
                vec![
                    rule(&[""], &["services", "endpoints"], &["create"]),
                    rule(&["discovery.k8s.io"], &["endpointslices"], &["create"]),
                    named(&["services", "endpoints"], ""),
                    named(&["endpointslices"], "discovery.k8s.io"),
                ],
            ),
            "kube-system",
            "Role",
        ),
    ]
}

/// The default RoleBindings, each in its namespace.
pub fn role_bindings() -> Vec<Value> {
    let mut dns = in_namespace(
        binding(
            "skiff:kube-dns",
            "skiff:kube-dns",
            &[("User", "system:kube-dns")],
        ),
        "kube-system",
        "RoleBinding",
    );
    dns["roleRef"]["kind"] = json!("Role");
    vec![dns]
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding(
            "cluster-admin",
            "cluster-admin",
            &[("Group", "system:masters")],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            &[("Group", "system:authenticated")],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &[("Group", "system:authenticated")],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[
                ("Group", "system:authenticated"),
                ("Group", "system:unauthenticated"),
            ],
        ),
        binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            &[("Group", "system:serviceaccounts")],
        ),
        binding(
            "system:kube-scheduler",
            "system:kube-scheduler",
            &[("User", "system:kube-scheduler")],
        ),
        binding(
            "system:volume-scheduler",
            "system:volume-scheduler",
            &[("User", "system:kube-scheduler")],
        ),
        binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            &[("User", "system:kube-controller-manager")],
        ),
        binding(
            "system:node-proxier",
            "system:node-proxier",
            &[("User", "system:kube-proxy")],
        ),
        binding(
            "skiff:ingress-controller",
            "skiff:ingress-controller",
            &[("User", "system:kube-proxy")],
        ),
        binding(
            "system:kube-dns",
            "system:kube-dns",
            &[("User", "system:kube-dns")],
        ),
        // Kubelets get the node role's rules from the Node authorizer, confined to their pods;
        // the join token's holders may ask for a node certificate, which is then approved
        // without an administrator, and nodes may renew their own (kubelet TLS bootstrapping).
        binding(
            "system:node-bootstrapper",
            "system:node-bootstrapper",
            &[("Group", BOOTSTRAPPERS_GROUP)],
        ),
        binding(
            "skiff:node-autoapprove-bootstrap",
            NODE_CLIENT_ROLE,
            &[("Group", BOOTSTRAPPERS_GROUP)],
        ),
        binding(
            "skiff:node-autoapprove-certificate-rotation",
            SELF_NODE_CLIENT_ROLE,
            &[("Group", NODES_GROUP)],
        ),
    ]
}

/// Whether the server may add defaults to `existing`.
fn may_update(existing: &Value) -> bool {
    existing["metadata"]["annotations"][AUTOUPDATE].as_str() != Some("false")
}

/// `existing` with what `default` has and it lacks (rules, labels, aggregation selectors,
/// subjects); `None` when it lacks nothing.
pub fn merged(existing: &Value, default: &Value) -> Option<Value> {
    let mut out = existing.clone();
    let mut changed = false;
    let mut add_missing = |field: &str, out: &mut Value| {
        let Some(wanted) = default[field].as_array() else {
            return;
        };
        if !out[field].is_array() {
            out[field] = json!([]);
        }
        let have = out[field].as_array_mut().expect("an array");
        for item in wanted {
            if !have.contains(item) {
                have.push(item.clone());
                changed = true;
            }
        }
    };
    add_missing("rules", &mut out);
    add_missing("subjects", &mut out);
    if let Some(labels) = default["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if out["metadata"]["labels"][k] != *v {
                if !out["metadata"]["labels"].is_object() {
                    out["metadata"]["labels"] = json!({});
                }
                out["metadata"]["labels"][k] = v.clone();
                changed = true;
            }
        }
    }
    if default.get("aggregationRule").is_some() && out.get("aggregationRule").is_none() {
        out["aggregationRule"] = default["aggregationRule"].clone();
        changed = true;
    }
    changed.then_some(out)
}

/// Creates the default roles and bindings that are missing and adds missing defaults to those
/// that may be updated.
pub async fn reconcile(server: &Arc<ApiServer>) -> Result<()> {
    use skiff_kinds::builtin::{cluster_role, cluster_role_binding, role, role_binding};
    let sets = [
        (
            &cluster_role::ClusterRole as &dyn skiff_kinds::Kind,
            cluster_roles(),
        ),
        (
            &cluster_role_binding::ClusterRoleBinding,
            cluster_role_bindings(),
        ),
        (&role::Role, roles()),
        (&role_binding::RoleBinding, role_bindings()),
    ];
    for (kind, defaults) in sets {
        let info = kind.info();
        for default in defaults {
            let name = default["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let namespace = default["metadata"]["namespace"]
                .as_str()
                .map(str::to_string);
            let namespace = namespace.as_deref();
            match server.registry.get(info, namespace, &name, None).await {
                Ok(existing) => {
                    if !may_update(&existing) || merged(&existing, &default).is_none() {
                        continue;
                    }
                    server
                        .registry
                        .update(info, namespace, &name, None, false, |current| {
                            let default = default.clone();
                            async move {
                                Ok(match merged(&current, &default) {
                                    Some(next) if may_update(&current) => Update::Write(next),
                                    _ => Update::Write(current),
                                })
                            }
                        })
                        .await?;
                    tracing::info!(kind = info.kind, %name, "added missing defaults");
                }
                Err(Error::NotFound { .. }) => {
                    let mut object = default;
                    server.prepare_create(kind, &mut object);
                    match server.registry.create(info, object, None).await {
                        Ok(_) | Err(Error::AlreadyExists { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    for name in RETIRED_BINDINGS {
        let info = &cluster_role_binding::INFO;
        match server.registry.get(info, None, name, None).await {
            Ok(existing) if may_update(&existing) => {
                match server.registry.delete(info, None, name, None).await {
                    Ok(_) | Err(Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
                tracing::info!(%name, "deleted a binding that grants too much");
            }
            Ok(_) | Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::User;
    use crate::authz::rbac::{Policy, Request};

    fn can(policy: &Policy, groups: &[&str], verb: &str, group: &str, resource: &str) -> bool {
        let user = User {
            name: "someone".into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        };
        policy
            .authorize(
                &user,
                &Request::Resource {
                    verb,
                    group,
                    resource,
                    subresource: "",
                    namespace: "ns",
                    name: "",
                },
            )
            .allowed()
    }

    #[test]
    fn the_defaults_validate() {
        use skiff_kinds::builtin::by_plural;
        for (plural, objects) in [
            ("clusterroles", cluster_roles()),
            ("clusterrolebindings", cluster_role_bindings()),
            ("roles", roles()),
            ("rolebindings", role_bindings()),
        ] {
            let kind = by_plural(plural);
            for mut object in objects {
                skiff_kinds::strategy::prepare_for_create(&*kind, &mut object);
                kind.default(&mut object);
                let errors = skiff_kinds::validation::validate_create(&*kind, &object, None);
                assert!(
                    errors.is_empty(),
                    "{}: {errors:?}",
                    object["metadata"]["name"]
                );
            }
        }
    }

    #[test]
    fn view_edit_and_admin_nest_through_aggregation() {
        let mut objects = cluster_roles();
        objects.extend(cluster_role_bindings());
        for (name, role) in [("v", "view"), ("e", "edit"), ("a", "admin")] {
            objects.push(json!({"kind": "ClusterRoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "Group", "name": role}]}));
        }
        let policy = crate::authz::rbac::tests::policy_of(&objects);
        assert!(can(&policy, &["view"], "list", "", "pods"));
        assert!(can(&policy, &["view"], "list", "metrics.k8s.io", "pods"));
        assert!(can(&policy, &["admin"], "get", "metrics.k8s.io", "nodes"));
        assert!(!can(&policy, &["view"], "get", "", "secrets"));
        assert!(!can(&policy, &["view"], "create", "", "pods"));
        assert!(can(&policy, &["edit"], "create", "apps", "deployments"));
        assert!(can(&policy, &["edit"], "get", "", "secrets"));
        assert!(
            can(&policy, &["edit"], "list", "", "pods"),
            "edit holds view"
        );
        assert!(!can(
            &policy,
            &["edit"],
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings"
        ));
        assert!(can(
            &policy,
            &["admin"],
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings"
        ));
        assert!(
            can(&policy, &["admin"], "delete", "batch", "jobs"),
            "admin holds edit"
        );
        assert!(!can(&policy, &["admin"], "create", "", "nodes"));
        assert!(can(&policy, &["system:masters"], "create", "", "nodes"));
        assert!(!can(&policy, &["system:authenticated"], "list", "", "pods"));
        assert!(can(
            &policy,
            &["system:authenticated"],
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews"
        ));
    }

    #[test]
    fn the_dns_server_keeps_only_its_own_service() {
        let mut objects = cluster_roles();
        objects.extend(cluster_role_bindings());
        objects.extend(roles());
        objects.extend(role_bindings());
        let policy = crate::authz::rbac::tests::policy_of(&objects);
        let dns = User {
            name: "system:kube-dns".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        let may = |verb: &str, group: &str, resource: &str, namespace: &str, name: &str| {
            policy
                .authorize(
                    &dns,
                    &Request::Resource {
                        verb,
                        group,
                        resource,
                        subresource: "",
                        namespace,
                        name,
                    },
                )
                .allowed()
        };
        for (group, resource) in [
            ("", "services"),
            ("", "endpoints"),
            ("discovery.k8s.io", "endpointslices"),
        ] {
            assert!(
                may("create", group, resource, "kube-system", ""),
                "{resource}"
            );
            assert!(
                may("patch", group, resource, "kube-system", "kube-dns"),
                "{resource}"
            );
            assert!(
                !may("patch", group, resource, "kube-system", "other"),
                "{resource}"
            );
            assert!(!may("create", group, resource, "default", ""), "{resource}");
            assert!(may("list", group, resource, "default", ""), "{resource}");
        }
        assert!(!may("delete", "", "services", "kube-system", "kube-dns"));
    }

    #[test]
    fn reconciling_keeps_what_users_added() {
        let default = cluster_roles().remove(0);
        let mut edited = default.clone();
        edited["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"apiGroups": ["x"], "resources": ["y"], "verbs": ["get"]}));
        assert_eq!(merged(&edited, &default), None);
        let mut trimmed = default.clone();
        trimmed["rules"].as_array_mut().unwrap().truncate(1);
        trimmed["metadata"]["labels"] = json!({"mine": "yes"});
        let back = merged(&trimmed, &default).unwrap();
        assert_eq!(back["rules"], default["rules"]);
        assert_eq!(back["metadata"]["labels"]["mine"], "yes");
        let mut frozen = trimmed.clone();
        frozen["metadata"]["annotations"][AUTOUPDATE] = json!("false");
        assert!(!may_update(&frozen));
    }
}

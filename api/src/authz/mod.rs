//! Authorization: whether the authenticated user may make a request, decided as kube-apiserver
//! decides with `--authorization-mode=RBAC`: members of `system:masters` may do anything, and
//! everyone else what their Roles and ClusterRoles grant.
//!
//! # Layout
//! - [`rbac`]: the rules and the decision, pure (table-tested against the project's fixtures).
//! - [`bootstrap`]: the roles and bindings every cluster starts with, reconciled at start.
//! - [`cel`]: the authorizer behind admission CEL's `authorizer` variable.
//! - [`Authorizer`] (here): the policy kept current from the log, the request's attributes, the
//!   `403 Forbidden` with kube-apiserver's wording, impersonation, and the escalation checks on
//!   writes of roles and bindings.

pub mod bootstrap;
pub mod cel;
pub mod node;
pub mod rbac;
pub mod reviews;

use std::sync::{Arc, RwLock};

use http::{HeaderMap, Method};
use serde_json::Value;
use skiff_meta::ResourceInfo;
use skiff_meta::status::{ApiError, GroupResource};

use crate::auth::{AUTHENTICATED_GROUP, MASTERS_GROUP, User};
use crate::error::{Error, Result};
use crate::registry::namespace_and_name;
use crate::request::{Query, Target};
use crate::server::ApiServer;

pub use rbac::{Decision, Request, Rule};

/// The four RBAC kinds, which the authorizer follows.
fn rbac_kinds() -> [(&'static ResourceInfo, rbac::Kind); 4] {
    use skiff_kinds::builtin::{cluster_role, cluster_role_binding, role, role_binding};
    [
        (&role::INFO, rbac::Kind::Role),
        (&cluster_role::INFO, rbac::Kind::ClusterRole),
        (&role_binding::INFO, rbac::Kind::RoleBinding),
        (&cluster_role_binding::INFO, rbac::Kind::ClusterRoleBinding),
    ]
}

/// The cluster's RBAC policy, current with the log, and the decisions made with it.
#[derive(Default)]
pub struct Authorizer {
    /// Replaced whole on each change, so a decision reads one consistent policy.
    policy: RwLock<Arc<rbac::Policy>>,
    /// What the Node authorizer knows: which pods run where and what they use.
    pub nodes: node::NodeGraph,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// The policy now.
    pub fn policy(&self) -> Arc<rbac::Policy> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn change(&self, f: impl FnOnce(&mut rbac::Policy)) {
        let mut current = self.policy.write().unwrap_or_else(|e| e.into_inner());
        let mut next = (**current).clone();
        f(&mut next);
        *current = Arc::new(next);
    }

    /// Whether `user` may make `request`: members of `system:masters` always; a kubelet what the
    /// Node authorizer allows; then what RBAC allows (kube-apiserver's `Node,RBAC`).
    pub fn authorize(&self, user: &User, request: &Request<'_>) -> Decision {
        if user.in_group(MASTERS_GROUP) {
            return Decision::Allow(format!("{MASTERS_GROUP} may do anything"));
        }
        let node_reason = match node::node_of(user) {
            Some(name) => match node::decide(&self.nodes.get(), name, request) {
                node::Verdict::Allow(reason) => return Decision::Allow(reason),
                node::Verdict::NoOpinion(reason) => reason,
            },
            None => String::new(),
        };
        match self.policy().authorize(user, request) {
            Decision::Deny(rbac) if !node_reason.is_empty() => Decision::Deny(
                [node_reason, rbac]
                    .into_iter()
                    .filter(|r| !r.is_empty())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            decision => decision,
        }
    }

    /// [`Authorizer::authorize`], with a denial as kube-apiserver's 403.
    pub fn check(&self, user: &User, request: &Request<'_>) -> Result<()> {
        match self.authorize(user, request) {
            Decision::Allow(_) => Ok(()),
            Decision::Deny(reason) => {
                tracing::debug!(user = %user.name, ?request, %reason, "forbidden");
                Err(forbidden(user, request, &reason))
            }
        }
    }

    /// Loads every Role, ClusterRole and binding from the log, then keeps following them until
    /// the server shuts down.
    pub async fn start(server: &Arc<ApiServer>) -> Result<()> {
        for (info, kind) in rbac_kinds() {
            crate::follow::start(server, info, "the authorizer", Objects(kind)).await?;
        }
        node::NodeGraph::start(server).await
    }
}

/// The authorizer's view of one RBAC kind's objects.
struct Objects(rbac::Kind);

impl crate::follow::Follower for Objects {
    async fn listed(&self, server: &Arc<ApiServer>, items: &[Value]) {
        server.authorizer.change(|policy| {
            policy.clear(self.0);
            for object in items {
                let (ns, name) = namespace_and_name(object);
                policy.apply(self.0, ns.unwrap_or_default(), name, Some(object));
            }
        });
    }

    async fn changed(&self, server: &Arc<ApiServer>, object: &Value, present: bool) {
        let (ns, name) = namespace_and_name(object);
        server.authorizer.change(|policy| {
            policy.apply(
                self.0,
                ns.unwrap_or_default(),
                name,
                present.then_some(object),
            )
        });
    }
}

/// The verb of a resource request, as Kubernetes' request-info names it.
pub fn resource_verb(method: &Method, target: &Target, query: &Query) -> &'static str {
    let named = target.name.is_some();
    if is_stream(target) {
        return "create";
    }
    match *method {
        Method::GET | Method::HEAD if query.flag("watch") => "watch",
        Method::GET | Method::HEAD if named => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "",
    }
}

/// Whether `target` is a streaming subresource (`pods/exec`, `pods/attach`,
/// `pods/portforward`). These are authorized as `create` whatever the method: a WebSocket
/// client must open them with `GET`, and reading a GET as `get` would let anyone who may read
/// a pod run commands in it (kube-apiserver checks `create` on WebSocket upgrades since 1.35 for
/// the same reason).
pub fn is_stream(target: &Target) -> bool {
    target.info.group.is_empty()
        && target.info.plural == "pods"
        && matches!(
            target.subresource.as_deref(),
            Some("exec" | "attach" | "portforward")
        )
}

/// The attributes of a resource request at `target`. A list or watch of one object by name
/// (`fieldSelector=metadata.name=x`, as kubelets watch the Secrets their pods use) is asked with
/// that name, as kube-apiserver's request info reads it, so `resourceNames` and the Node
/// authorizer can allow it.
pub fn resource_request<'a>(verb: &'a str, target: &'a Target, query: &'a Query) -> Request<'a> {
    let selected = match verb {
        "list" | "watch" if target.name.is_none() => selected_name(query),
        _ => None,
    };
    Request::Resource {
        verb,
        group: target.info.group,
        resource: target.info.plural,
        subresource: target.subresource.as_deref().unwrap_or_default(),
        namespace: target.namespace.as_deref().unwrap_or_default(),
        name: target.name.as_deref().or(selected).unwrap_or_default(),
    }
}

/// The name a field selector pins (`metadata.name=x` or `metadata.name==x` among its terms).
fn selected_name(query: &Query) -> Option<&str> {
    query.get("fieldSelector")?.split(',').find_map(|term| {
        let (field, value) = term.split_once('=')?;
        let value = value.strip_prefix('=').unwrap_or(value);
        (field.trim() == "metadata.name" && !value.is_empty()).then_some(value.trim())
    })
}

/// The verb of a non-resource request: the HTTP method in lower case (`get` for HEAD).
pub fn path_verb(method: &Method) -> String {
    match *method {
        Method::HEAD => "get".into(),
        ref m => m.as_str().to_ascii_lowercase(),
    }
}

/// kube-apiserver's 403: `pods "x" is forbidden: User "bob" cannot get resource "pods" in API
/// group "" in the namespace "default"`, with the authorizer's reason after a colon.
pub fn forbidden(user: &User, request: &Request<'_>, reason: &str) -> Error {
    let suffix = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    let error = match *request {
        Request::NonResource { verb, path } => ApiError::forbidden(
            GroupResource::new("", ""),
            "",
            format!("User {:?} cannot {verb} path {path:?}{suffix}", user.name),
        ),
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let shown = if subresource.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}/{subresource}")
            };
            let scope = if namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace {namespace:?}")
            };
            ApiError::forbidden(
                GroupResource::new(group, resource),
                name,
                format!(
                    "User {:?} cannot {verb} resource {shown:?} in API group {group:?} {scope}{suffix}",
                    user.name
                ),
            )
        }
    };
    Error::Api(error)
}

/// The header of `kubectl --as`.
const IMPERSONATE_USER: &str = "impersonate-user";
/// The header of `kubectl --as-group` (repeated for each group).
const IMPERSONATE_GROUP: &str = "impersonate-group";
/// The header of `kubectl --as-uid`.
const IMPERSONATE_UID: &str = "impersonate-uid";
/// The prefix of `Impersonate-Extra-<key>` headers.
const IMPERSONATE_EXTRA: &str = "impersonate-extra-";

/// The user a request acts as: `user`, or whom its `Impersonate-*` headers name when `user` may
/// impersonate them (verb `impersonate` on `users`, `groups`, `serviceaccounts`, `uids` and
/// `userextras/<key>`), as kube-apiserver's impersonation filter decides.
pub fn impersonate(authorizer: &Authorizer, user: User, headers: &HeaderMap) -> Result<User> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let name = values(IMPERSONATE_USER).into_iter().next();
    let groups = values(IMPERSONATE_GROUP);
    let uid = values(IMPERSONATE_UID).into_iter().next();
    let extra: Vec<String> = headers
        .keys()
        .filter_map(|k| k.as_str().strip_prefix(IMPERSONATE_EXTRA))
        .map(str::to_string)
        .collect();
    let Some(name) = name else {
        if !groups.is_empty() || uid.is_some() || !extra.is_empty() {
            return Err(Error::BadRequest(
                "requested impersonation without a user (Impersonate-User)".into(),
            ));
        }
        return Ok(user);
    };
    let check = |group: &str, resource: &str, namespace: &str, name: &str| {
        authorizer.check(
            &user,
            &Request::Resource {
                verb: "impersonate",
                group,
                resource,
                subresource: "",
                namespace,
                name,
            },
        )
    };
    let mut impersonated_groups = groups.clone();
    match name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
    {
        Some((ns, sa)) => {
            check("", "serviceaccounts", ns, sa)?;
            if groups.is_empty() {
                impersonated_groups = vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        None => check("", "users", "", &name)?,
    }
    for group in &groups {
        check("", "groups", "", group)?;
    }
    if let Some(uid) = &uid {
        check("authentication.k8s.io", "uids", "", uid)?;
    }
    let mut impersonated_extra = std::collections::BTreeMap::new();
    for key in &extra {
        let key_values = values(&format!("{IMPERSONATE_EXTRA}{key}"));
        for value in &key_values {
            authorizer.check(
                &user,
                &Request::Resource {
                    verb: "impersonate",
                    group: "authentication.k8s.io",
                    resource: "userextras",
                    subresource: key,
                    namespace: "",
                    name: value,
                },
            )?;
        }
        // Header names are case-insensitive and lower-cased here; the key is percent-encoded.
        impersonated_extra.insert(percent_decode(key), key_values);
    }
    if name != "system:anonymous" && !impersonated_groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        impersonated_groups.push(AUTHENTICATED_GROUP.to_string());
    }
    tracing::debug!(by = %user.name, as_user = %name, "impersonating");
    Ok(User {
        name,
        uid: uid.unwrap_or_default(),
        groups: impersonated_groups,
        extra: impersonated_extra,
    })
}

/// `%XX` escapes of an `Impersonate-Extra-` key decoded (kubectl escapes `/` and such).
fn percent_decode(key: &str) -> String {
    form_urlencoded::parse(format!("k={}", key.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| key.to_string())
}

/// The escalation checks on writes of roles and bindings (Kubernetes' `policybased` storage):
/// a Role or ClusterRole may only grant rules its writer holds (or the writer may `escalate`
/// it); a binding may only grant the rules of its role (or the writer may `bind` it).
/// `namespace` is the object's (empty for the cluster-scoped kinds).
pub fn check_escalation(
    authorizer: &Authorizer,
    user: &User,
    info: &ResourceInfo,
    namespace: &str,
    object: &Value,
) -> Result<()> {
    if info.group != skiff_kinds::validation::rbac::GROUP || user.in_group(MASTERS_GROUP) {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let verb_allowed = |verb: &str, resource: &str, name: &str| {
        authorizer
            .authorize(
                user,
                &Request::Resource {
                    verb,
                    group: info.group,
                    resource,
                    subresource: "",
                    namespace,
                    name,
                },
            )
            .allowed()
    };
    let policy = authorizer.policy();
    let requested: Vec<Rule> = match info.plural {
        "roles" | "clusterroles" => {
            if verb_allowed("escalate", info.plural, name) {
                return Ok(());
            }
            // An aggregated ClusterRole grants what it gathers, not what its body lists.
            let aggregation = object.get("aggregationRule").filter(|a| !a.is_null());
            match aggregation {
                Some(_) => {
                    let mut scratch = (*policy).clone();
                    scratch.apply(rbac::Kind::ClusterRole, "", name, Some(object));
                    scratch
                        .cluster_role_rules(name)
                        .map(|r| (*r).clone())
                        .unwrap_or_default()
                }
                None => object["rules"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| serde_json::from_value(r.clone()).ok())
                    .map(|r: k8s_openapi::api::rbac::v1::PolicyRule| Rule::from_policy_rule(&r))
                    .collect(),
            }
        }
        "rolebindings" | "clusterrolebindings" => {
            let kind = object["roleRef"]["kind"].as_str().unwrap_or_default();
            let role = object["roleRef"]["name"].as_str().unwrap_or_default();
            let role_resource = if kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if verb_allowed("bind", role_resource, role) {
                return Ok(());
            }
            match policy.role_rules(kind, role, namespace) {
                Ok(rules) => (*rules).clone(),
                Err(missing) => {
                    return Err(Error::Api(ApiError::forbidden(
                        GroupResource::new(info.group, info.plural),
                        name,
                        format!(
                            "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held: {missing}",
                            user.name,
                            groups_list(user)
                        ),
                    )));
                }
            }
        }
        _ => return Ok(()),
    };
    let (held, _) = policy.rules_for(user, namespace);
    let missing = rbac::uncovered(&held, &requested);
    if missing.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = missing.iter().map(Rule::compact).collect();
    Err(Error::Api(ApiError::forbidden(
        GroupResource::new(info.group, info.plural),
        name,
        format!(
            "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            groups_list(user),
            listed.join("\n")
        ),
    )))
}

/// Groups as Go prints a `[]string` with `%q`: `["system:authenticated" "dev"]`.
fn groups_list(user: &User) -> String {
    let quoted: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_selector_on_the_name_names_the_object() {
        let name = |q: &str| selected_name(&Query::parse(q)).map(str::to_string);
        assert_eq!(
            name("fieldSelector=metadata.name%3Dtls"),
            Some("tls".into())
        );
        assert_eq!(
            name("fieldSelector=type%3Dx,metadata.name%3D%3Dtls&watch=true"),
            Some("tls".into())
        );
        assert_eq!(name("fieldSelector=metadata.name!%3Dtls"), None);
        assert_eq!(name("fieldSelector=metadata.namespace%3Dtls"), None);
        assert_eq!(name("labelSelector=a%3Db"), None);
    }
}

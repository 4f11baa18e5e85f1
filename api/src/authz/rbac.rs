//! Role-based access control as Kubernetes defines it (`rbac.authorization.k8s.io/v1`): which
//! rules a user holds, through which bindings, and whether they allow a request. Pure: a
//! [`Policy`] is built from the Role, ClusterRole, RoleBinding and ClusterRoleBinding objects and
//! answers questions; keeping it current is [`super::Authorizer`]'s job.
//!
//! The semantics, from Kubernetes' documentation and its RBAC authorizer:
//! - A request in a namespace is allowed by a rule of a ClusterRoleBinding's ClusterRole, or of a
//!   RoleBinding in that namespace (its Role, or a ClusterRole read as if namespaced). A
//!   cluster-scoped request, or one across all namespaces, and every non-resource URL only by
//!   ClusterRoleBindings.
//! - A rule matches when its verbs, API groups, resources and resource names match (`*` matches
//!   any; `pods/log` names a subresource, `*/scale` any resource's `scale`; resource names only
//!   constrain requests that name an object), or for a non-resource request its verbs and URLs
//!   (a trailing `*` matches any suffix).
//! - A binding to a role that does not exist grants nothing, and says so in the denial reason.
//! - A ClusterRole with an `aggregationRule` holds the rules of every ClusterRole its selectors
//!   match (and, transitively, theirs), not its own `rules`.
//! - Nobody grants rules they do not hold ([`uncovered`]): the escalation check.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::rbac::v1 as rbac;
use serde_json::Value;
use skiff_meta::labels::Selector;

use crate::auth::User;

/// What is asked: a verb on a resource (in a namespace or cluster-wide), or on a URL path that is
/// not a resource (`/healthz`, `/apis`, `/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    /// A resource request.
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
        /// or another verb a check asks about (`bind`, `escalate`, `impersonate`, `use`).
        verb: &'a str,
        /// The API group (`""` for core).
        group: &'a str,
        /// The resource's plural.
        resource: &'a str,
        /// The subresource (`status`, `log`, `scale`), or empty.
        subresource: &'a str,
        /// The namespace, or empty for cluster-scoped resources and requests across all
        /// namespaces.
        namespace: &'a str,
        /// The object's name, or empty for collection requests.
        name: &'a str,
    },
    /// A request for a path that is not a resource.
    NonResource {
        /// The verb (`get`, `post`, ...: the HTTP method in lower case).
        verb: &'a str,
        /// The URL path.
        path: &'a str,
    },
}

/// One rule of a role (`PolicyRule`), its lists as given.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    /// The verbs (`*`: all).
    pub verbs: Vec<String>,
    /// The API groups (`*`: all; `""`: core).
    pub api_groups: Vec<String>,
    /// The resources (`*`, `pods`, `pods/log`, `*/scale`).
    pub resources: Vec<String>,
    /// The object names it is limited to (empty: any).
    pub resource_names: Vec<String>,
    /// The non-resource URLs (`/healthz`, `/apis/*`, `*`).
    pub non_resource_urls: Vec<String>,
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == value)
}

fn has_or_all(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    /// The rule as the API stores it.
    pub fn from_policy_rule(rule: &rbac::PolicyRule) -> Rule {
        let list = |l: &Option<Vec<String>>| l.clone().unwrap_or_default();
        Rule {
            verbs: rule.verbs.clone(),
            api_groups: list(&rule.api_groups),
            resources: list(&rule.resources),
            resource_names: list(&rule.resource_names),
            non_resource_urls: list(&rule.non_resource_urls),
        }
    }

    /// The rule in the API's form.
    pub fn to_policy_rule(&self) -> rbac::PolicyRule {
        let some = |l: &Vec<String>| (!l.is_empty()).then(|| l.clone());
        rbac::PolicyRule {
            verbs: self.verbs.clone(),
            api_groups: some(&self.api_groups),
            resources: some(&self.resources),
            resource_names: some(&self.resource_names),
            non_resource_urls: some(&self.non_resource_urls),
        }
    }

    /// Whether the rule allows `request`.
    pub fn allows(&self, request: &Request<'_>) -> bool {
        match *request {
            Request::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
                ..
            } => {
                has_or_all(&self.verbs, verb)
                    && has_or_all(&self.api_groups, group)
                    && self.matches_resource(resource, subresource)
                    && (self.resource_names.is_empty() || has(&self.resource_names, name))
            }
            Request::NonResource { verb, path } => {
                has_or_all(&self.verbs, verb)
                    && self
                        .non_resource_urls
                        .iter()
                        .any(|url| url_matches(url, path))
            }
        }
    }

    fn matches_resource(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            if r == "*" {
                return true;
            }
            if subresource.is_empty() {
                return r == resource;
            }
            match r.split_once('/') {
                Some((res, sub)) => (res == resource || res == "*") && sub == subresource,
                None => false,
            }
        })
    }

    /// The rule as Kubernetes prints it in escalation errors:
    /// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}`.
    pub fn compact(&self) -> String {
        let list = |l: &[String]| {
            l.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut parts = Vec::new();
        for (label, values) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("ResourceNames", &self.resource_names),
            ("NonResourceURLs", &self.non_resource_urls),
            ("Verbs", &self.verbs),
        ] {
            if !values.is_empty() || label == "Verbs" {
                parts.push(format!("{label}:[{}]", list(values)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// Whether a rule's non-resource URL matches `path`: exactly, `*`, or a prefix ending in `*`.
fn url_matches(url: &str, path: &str) -> bool {
    url == "*"
        || url == path
        || url
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// Who a binding binds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// A ServiceAccount's namespace (empty: the RoleBinding's own).
    pub namespace: String,
}

impl Subject {
    /// Whether the subject is `user` (`namespace`: the RoleBinding's namespace, or empty).
    pub fn applies_to(&self, user: &User, namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.iter().any(|g| *g == self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    namespace
                } else {
                    &self.namespace
                };
                user.name
                    .strip_prefix("system:serviceaccount:")
                    .and_then(|rest| rest.split_once(':'))
                    .is_some_and(|(n, name)| n == ns && name == self.name)
            }
            _ => false,
        }
    }
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Its name.
    pub name: String,
    /// `Role` or `ClusterRole`.
    pub role_kind: String,
    /// The role's name.
    pub role_name: String,
    /// Whom it binds.
    pub subjects: Vec<Subject>,
}

impl Binding {
    fn from_parts(
        name: &str,
        role_ref: &rbac::RoleRef,
        subjects: &Option<Vec<rbac::Subject>>,
    ) -> Self {
        Binding {
            name: name.to_string(),
            role_kind: role_ref.kind.clone(),
            role_name: role_ref.name.clone(),
            subjects: subjects
                .iter()
                .flatten()
                .map(|s| Subject {
                    kind: s.kind.clone(),
                    name: s.name.clone(),
                    namespace: s.namespace.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// A ClusterRole as the policy needs it.
#[derive(Debug, Clone)]
struct ClusterRole {
    rules: Vec<Rule>,
    labels: BTreeMap<String, String>,
    /// The aggregation rule's selectors, when it has one.
    aggregation: Option<Vec<Selector>>,
}

/// One of the four RBAC kinds, which [`Policy::apply`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `Role`.
    Role,
    /// `ClusterRole`.
    ClusterRole,
    /// `RoleBinding`.
    RoleBinding,
    /// `ClusterRoleBinding`.
    ClusterRoleBinding,
}

/// Why a request was allowed, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, by this binding and role (for logs and audit).
    Allow(String),
    /// No rule allows it; the reason is empty or names bindings that point at missing roles
    /// (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`).
    Deny(String),
}

impl Decision {
    /// Whether it is [`Decision::Allow`].
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }
}

/// Every RBAC object of the cluster, indexed for questions.
#[derive(Debug, Default, Clone)]
pub struct Policy {
    roles: HashMap<(String, String), Vec<Rule>>,
    cluster_roles: BTreeMap<String, ClusterRole>,
    role_bindings: HashMap<String, BTreeMap<String, Binding>>,
    cluster_role_bindings: BTreeMap<String, Binding>,
    /// Each ClusterRole's rules with aggregation resolved; rebuilt when a ClusterRole changes.
    effective: HashMap<String, Arc<Vec<Rule>>>,
}

fn rules_of(rules: &Option<Vec<rbac::PolicyRule>>) -> Vec<Rule> {
    rules.iter().flatten().map(Rule::from_policy_rule).collect()
}

impl Policy {
    /// Puts `object` (of `kind`, in `namespace` for the namespaced kinds) in the policy, or with
    /// `None` takes `name` out. An object that does not decode as its kind holds nothing.
    pub fn apply(&mut self, kind: Kind, namespace: &str, name: &str, object: Option<&Value>) {
        fn decoded<T: serde::de::DeserializeOwned>(object: Option<&Value>) -> Option<T> {
            object.and_then(|o| T::deserialize(o).ok())
        }
        let key = (namespace.to_string(), name.to_string());
        match kind {
            Kind::Role => match decoded::<rbac::Role>(object) {
                Some(role) => {
                    self.roles.insert(key, rules_of(&role.rules));
                }
                None => {
                    self.roles.remove(&key);
                }
            },
            Kind::ClusterRole => {
                match decoded::<rbac::ClusterRole>(object) {
                    Some(role) => {
                        let aggregation = role.aggregation_rule.map(|a| {
                            a.cluster_role_selectors
                                .iter()
                                .flatten()
                                .map(|s| {
                                    Selector::from_label_selector(s)
                                        .unwrap_or_else(|_| Selector::nothing())
                                })
                                .collect()
                        });
                        self.cluster_roles.insert(
                            name.to_string(),
                            ClusterRole {
                                rules: rules_of(&role.rules),
                                labels: role.metadata.labels.unwrap_or_default(),
                                aggregation,
                            },
                        );
                    }
                    None => {
                        self.cluster_roles.remove(name);
                    }
                }
                self.resolve_aggregation();
            }
            Kind::RoleBinding => match decoded::<rbac::RoleBinding>(object) {
                Some(b) => {
                    self.role_bindings
                        .entry(namespace.to_string())
                        .or_default()
                        .insert(
                            name.to_string(),
                            Binding::from_parts(name, &b.role_ref, &b.subjects),
                        );
                }
                None => {
                    if let Some(in_ns) = self.role_bindings.get_mut(namespace) {
                        in_ns.remove(name);
                        if in_ns.is_empty() {
                            self.role_bindings.remove(namespace);
                        }
                    }
                }
            },
            Kind::ClusterRoleBinding => match decoded::<rbac::ClusterRoleBinding>(object) {
                Some(b) => {
                    self.cluster_role_bindings.insert(
                        name.to_string(),
                        Binding::from_parts(name, &b.role_ref, &b.subjects),
                    );
                }
                None => {
                    self.cluster_role_bindings.remove(name);
                }
            },
        }
    }

    /// Takes every object of `kind` out.
    pub fn clear(&mut self, kind: Kind) {
        match kind {
            Kind::Role => self.roles.clear(),
            Kind::ClusterRole => {
                self.cluster_roles.clear();
                self.effective.clear();
            }
            Kind::RoleBinding => self.role_bindings.clear(),
            Kind::ClusterRoleBinding => self.cluster_role_bindings.clear(),
        }
    }

    /// Recomputes every ClusterRole's effective rules: its own, or for an aggregated one the
    /// union of the effective rules of the ClusterRoles its selectors match, in name order,
    /// without duplicates (cycles end at the role already being resolved).
    fn resolve_aggregation(&mut self) {
        fn resolve(
            roles: &BTreeMap<String, ClusterRole>,
            name: &str,
            visiting: &mut BTreeSet<String>,
            done: &mut HashMap<String, Arc<Vec<Rule>>>,
        ) -> Arc<Vec<Rule>> {
            if let Some(rules) = done.get(name) {
                return rules.clone();
            }
            let Some(role) = roles.get(name) else {
                return Arc::new(Vec::new());
            };
            let Some(selectors) = &role.aggregation else {
                let rules = Arc::new(role.rules.clone());
                done.insert(name.to_string(), rules.clone());
                return rules;
            };
            visiting.insert(name.to_string());
            let mut rules: Vec<Rule> = Vec::new();
            for (other, candidate) in roles {
                if visiting.contains(other)
                    || !selectors.iter().any(|s| s.matches(&candidate.labels))
                {
                    continue;
                }
                for rule in resolve(roles, other, visiting, done).iter() {
                    if !rules.contains(rule) {
                        rules.push(rule.clone());
                    }
                }
            }
            visiting.remove(name);
            let rules = Arc::new(rules);
            done.insert(name.to_string(), rules.clone());
            rules
        }
        let mut done = HashMap::new();
        for name in self.cluster_roles.keys() {
            resolve(&self.cluster_roles, name, &mut BTreeSet::new(), &mut done);
        }
        self.effective = done;
    }

    /// A ClusterRole's rules, aggregation resolved; `None` if it does not exist.
    pub fn cluster_role_rules(&self, name: &str) -> Option<Arc<Vec<Rule>>> {
        self.effective.get(name).cloned()
    }

    /// An aggregated ClusterRole's gathered rules (what an aggregation controller writes into
    /// it), or `None` if it has no aggregation rule or is absent.
    pub fn aggregated_rules(&self, name: &str) -> Option<Arc<Vec<Rule>>> {
        self.cluster_roles
            .get(name)?
            .aggregation
            .as_ref()
            .and(self.cluster_role_rules(name))
    }

    /// The rules `binding` (in `namespace`, empty for a ClusterRoleBinding) refers to, or the
    /// error that it refers to a missing role.
    fn binding_rules(&self, binding: &Binding, namespace: &str) -> Result<Arc<Vec<Rule>>, String> {
        let found = match binding.role_kind.as_str() {
            "Role" => self
                .roles
                .get(&(namespace.to_string(), binding.role_name.clone()))
                .map(|r| Arc::new(r.clone())),
            "ClusterRole" => self.cluster_role_rules(&binding.role_name),
            _ => None,
        };
        found.ok_or_else(|| {
            format!(
                "{}.rbac.authorization.k8s.io {:?} not found",
                binding.role_kind.to_lowercase(),
                binding.role_name
            )
        })
    }

    /// Calls `visit` with each binding that applies to `user` in `namespace` (ClusterRoleBindings
    /// first; RoleBindings only for a namespace), and the rules it grants; stops when `visit`
    /// returns true. Missing roles are collected in `errors`.
    fn visit(
        &self,
        user: &User,
        namespace: &str,
        errors: &mut Vec<String>,
        mut visit: impl FnMut(&str, &Binding, &[Rule]) -> bool,
    ) -> bool {
        for binding in self.cluster_role_bindings.values() {
            if !binding.subjects.iter().any(|s| s.applies_to(user, "")) {
                continue;
            }
            match self.binding_rules(binding, "") {
                Ok(rules) => {
                    if visit("ClusterRoleBinding", binding, &rules) {
                        return true;
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if namespace.is_empty() {
            return false;
        }
        for binding in self
            .role_bindings
            .get(namespace)
            .into_iter()
            .flat_map(|b| b.values())
        {
            if !binding
                .subjects
                .iter()
                .any(|s| s.applies_to(user, namespace))
            {
                continue;
            }
            match self.binding_rules(binding, namespace) {
                Ok(rules) => {
                    if visit("RoleBinding", binding, &rules) {
                        return true;
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        false
    }

    /// Whether RBAC allows `user` to make `request`.
    pub fn authorize(&self, user: &User, request: &Request<'_>) -> Decision {
        let namespace = match request {
            Request::Resource { namespace, .. } => *namespace,
            Request::NonResource { .. } => "",
        };
        let mut errors = Vec::new();
        let mut by = String::new();
        let allowed = self.visit(user, namespace, &mut errors, |kind, binding, rules| {
            if rules.iter().any(|r| r.allows(request)) {
                by = format!(
                    "RBAC: allowed by {kind} {:?} of {} {:?} to {}",
                    binding.name, binding.role_kind, binding.role_name, user.name
                );
                true
            } else {
                false
            }
        });
        if allowed {
            return Decision::Allow(by);
        }
        errors.sort();
        errors.dedup();
        Decision::Deny(if errors.is_empty() {
            String::new()
        } else {
            format!("RBAC: [{}]", errors.join(", "))
        })
    }

    /// Every rule `user` holds in `namespace` (empty: the cluster-wide ones only), and the
    /// bindings that point at missing roles.
    pub fn rules_for(&self, user: &User, namespace: &str) -> (Vec<Rule>, Vec<String>) {
        let mut errors = Vec::new();
        let mut out: Vec<Rule> = Vec::new();
        self.visit(user, namespace, &mut errors, |_, _, rules| {
            for rule in rules {
                if !out.contains(rule) {
                    out.push(rule.clone());
                }
            }
            false
        });
        (out, errors)
    }

    /// The rules of the role a binding in `namespace` (empty: a ClusterRoleBinding) would grant.
    pub fn role_rules(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Result<Arc<Vec<Rule>>, String> {
        let binding = Binding {
            name: String::new(),
            role_kind: kind.to_string(),
            role_name: name.to_string(),
            subjects: Vec::new(),
        };
        self.binding_rules(&binding, namespace)
    }
}

/// Breaks `rule` into rules of one verb and one group, resource, name or URL each.
fn atoms(rule: &Rule) -> Vec<Rule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for url in &rule.non_resource_urls {
            out.push(Rule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..Rule::default()
            });
        }
        for group in &rule.api_groups {
            for resource in &rule.resources {
                let base = Rule {
                    verbs: one(verb),
                    api_groups: one(group),
                    resources: one(resource),
                    ..Rule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for name in &rule.resource_names {
                        out.push(Rule {
                            resource_names: one(name),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    out
}

/// Whether `owner` covers the atomic rule `atom` (both its wildcards and literal values: asking
/// for `*` needs `*`).
fn covers_atom(owner: &Rule, atom: &Rule) -> bool {
    let all_or =
        |list: &[String], wanted: &[String]| has(list, "*") || wanted.iter().all(|w| has(list, w));
    let resources = atom.resources.iter().all(|r| {
        has(&owner.resources, "*")
            || has(&owner.resources, r)
            || r.split_once('/')
                .is_some_and(|(_, sub)| has(&owner.resources, &format!("*/{sub}")))
    });
    let urls = atom.non_resource_urls.iter().all(|u| {
        owner.non_resource_urls.iter().any(|o| {
            o == u
                || o.strip_suffix('*')
                    .is_some_and(|prefix| u.starts_with(prefix))
        })
    });
    all_or(&owner.verbs, &atom.verbs)
        && (atom.api_groups.is_empty() || all_or(&owner.api_groups, &atom.api_groups))
        && resources
        && urls
        && (owner.resource_names.is_empty()
            || atom
                .resource_names
                .iter()
                .all(|n| has(&owner.resource_names, n))
                && !atom.resource_names.is_empty())
}

/// The parts of `requested` that no rule of `owner` covers, merged back by verb: empty when a
/// user holding `owner` may grant `requested`.
pub fn uncovered(owner: &[Rule], requested: &[Rule]) -> Vec<Rule> {
    let mut missing: Vec<Rule> = Vec::new();
    for rule in requested {
        for atom in atoms(rule) {
            if owner.iter().any(|o| covers_atom(o, &atom)) {
                continue;
            }
            // Merge verbs of atoms that differ only in their verb, as Kubernetes compacts them.
            match missing.iter_mut().find(|m| {
                m.api_groups == atom.api_groups
                    && m.resources == atom.resources
                    && m.resource_names == atom.resource_names
                    && m.non_resource_urls == atom.non_resource_urls
            }) {
                Some(m) => {
                    if !m.verbs.contains(&atom.verbs[0]) {
                        m.verbs.push(atom.verbs[0].clone());
                    }
                }
                None => missing.push(atom),
            }
        }
    }
    missing
}

#[cfg(test)]
pub(crate) mod tests;

//! The audit policy (`audit.k8s.io/v1` `Policy`) and the pure decision of how much of a request
//! to record: the first rule whose every given field matches decides the level, as
//! kube-apiserver's policy checker does; no rule matching means `None`.
//!
//! Matching, field by field (an empty or missing field matches everything):
//! ```text
//! users            the user's name is listed
//! userGroups       one of the user's groups is listed
//! verbs            the Kubernetes verb (get, list, watch, create, ...) is listed
//! resources        resource requests only: a group entry with the request's API group whose
//!                  `resources` is empty, or holds `*`, `pods` (not `pods/log`), `pods/log`,
//!                  `pods/*` or `*/log`; and `resourceNames` empty or holding the object's name
//! namespaces       resource requests only: the namespace is listed (`""` = cluster-scoped)
//! nonResourceURLs  non-resource requests only: the path equals an entry, or starts with an
//!                  entry's part before its trailing `*`
//! ```
//! A rule with `resources` or `namespaces` never matches a non-resource request, and one with
//! `nonResourceURLs` never matches a resource request.

use serde::Deserialize;

/// How much of a request an event holds, from least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
pub enum Level {
    /// No event.
    None,
    /// Who, what, when and the outcome; no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, the request body and the response body.
    RequestResponse,
}

/// When in a request's life an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum Stage {
    /// As soon as the request is received (and its user known).
    RequestReceived,
    /// Once the response headers are sent, for long-running requests (watch, exec, log).
    ResponseStarted,
    /// Once the response is complete.
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

/// A group's resources in a rule.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupResources {
    /// The API group (`""` is the core group).
    #[serde(default)]
    pub group: String,
    /// Resources (`pods`, `pods/log`, `pods/*`, `*/status`, `*`); empty = all of the group's.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names; empty = any.
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule of the policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// The level of the requests this rule matches.
    pub level: Level,
    /// User names.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups.
    #[serde(default)]
    pub user_groups: Vec<String>,
    /// Verbs.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Resources by group.
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Non-resource paths (`/healthz`, `/apis*`).
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    /// Stages this rule writes no event for (added to the policy's).
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Overrides the policy's `omitManagedFields` for this rule.
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// The whole policy file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Must be `audit.k8s.io/v1`.
    pub api_version: String,
    /// Must be `Policy`.
    pub kind: String,
    /// Ignored (kept so a policy with a name loads).
    #[serde(default)]
    pub metadata: Option<serde_json::Value>,
    /// The rules, first match wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Stages no event is written for, whatever the rule.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from the bodies recorded.
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// Why a policy file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Not YAML or JSON of a policy (an unknown field, a level that does not exist).
    #[error("not an audit policy: {0}")]
    Parse(String),
    /// Another kind or version.
    #[error("expected apiVersion audit.k8s.io/v1 and kind Policy, got {api_version} {kind}")]
    WrongKind {
        /// The `apiVersion` found.
        api_version: String,
        /// The `kind` found.
        kind: String,
    },
    /// Without rules nothing would ever be logged (kube-apiserver refuses this too).
    #[error("the policy has no rules")]
    NoRules,
    /// A rule that names both resources and non-resource URLs, or a malformed URL.
    #[error("rule {index}: {reason}")]
    InvalidRule {
        /// The 0-based index of the rule.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

impl Policy {
    /// Parses and checks a policy file's text (YAML or JSON).
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let policy: Policy =
            serde_saphyr::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        if policy.api_version != "audit.k8s.io/v1" || policy.kind != "Policy" {
            return Err(PolicyError::WrongKind {
                api_version: policy.api_version,
                kind: policy.kind,
            });
        }
        if policy.rules.is_empty() {
            return Err(PolicyError::NoRules);
        }
        for (index, rule) in policy.rules.iter().enumerate() {
            let invalid = |reason: &str| PolicyError::InvalidRule {
                index,
                reason: reason.to_string(),
            };
            if !rule.non_resource_urls.is_empty()
                && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
            {
                return Err(invalid(
                    "a rule cannot match both resources (or namespaces) and nonResourceURLs",
                ));
            }
            for url in &rule.non_resource_urls {
                let stem = url.strip_suffix('*').unwrap_or(url);
                if stem.contains('*') || !(url.starts_with('/') || url == "*") {
                    return Err(invalid(&format!(
                        "nonResourceURL {url:?} must start with / and may only end with *"
                    )));
                }
            }
        }
        Ok(policy)
    }

    /// What the first matching rule says about `request`.
    pub fn evaluate(&self, request: &Attributes<'_>) -> Decision {
        for rule in &self.rules {
            if rule.matches(request) {
                let mut omit_stages = self.omit_stages.clone();
                omit_stages.extend(rule.omit_stages.iter().copied());
                return Decision {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                };
            }
        }
        Decision {
            level: Level::None,
            omit_stages: Vec::new(),
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

/// What is known of a request when the policy is asked.
#[derive(Debug, Clone, Default)]
pub struct Attributes<'a> {
    /// The user's name (`None` before authentication, e.g. for a 401).
    pub user: Option<&'a str>,
    /// The user's groups.
    pub groups: &'a [String],
    /// The Kubernetes verb (or the lower-case method for a non-resource path).
    pub verb: &'a str,
    /// The resource, for resource requests.
    pub resource: Option<ResourceAttributes<'a>>,
    /// The URL path, for non-resource requests.
    pub path: &'a str,
}

/// The resource a request is about.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResourceAttributes<'a> {
    /// The API group.
    pub group: &'a str,
    /// The resource (plural).
    pub resource: &'a str,
    /// The subresource, or `""`.
    pub subresource: &'a str,
    /// The namespace, or `""`.
    pub namespace: &'a str,
    /// The object's name, or `""`.
    pub name: &'a str,
}

/// The policy's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// How much to record.
    pub level: Level,
    /// Stages to write no event for.
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from the bodies.
    pub omit_managed_fields: bool,
}

impl Decision {
    /// Whether an event at `stage` is written.
    pub fn writes(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit_stages.contains(&stage)
    }
}

impl Rule {
    fn matches(&self, request: &Attributes<'_>) -> bool {
        if !self.users.is_empty() && !request.user.is_some_and(|u| listed(&self.users, u)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !request.groups.iter().any(|g| listed(&self.user_groups, g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !listed(&self.verbs, request.verb) {
            return false;
        }
        match &request.resource {
            Some(resource) => {
                self.non_resource_urls.is_empty()
                    && (self.namespaces.is_empty() || listed(&self.namespaces, resource.namespace))
                    && (self.resources.is_empty()
                        || self.resources.iter().any(|g| g.matches(resource)))
            }
            None => {
                self.resources.is_empty()
                    && self.namespaces.is_empty()
                    && (self.non_resource_urls.is_empty()
                        || self
                            .non_resource_urls
                            .iter()
                            .any(|url| url_matches(url, request.path)))
            }
        }
    }
}

impl GroupResources {
    fn matches(&self, request: &ResourceAttributes<'_>) -> bool {
        if self.group != request.group {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        if !self.resource_names.is_empty() && !listed(&self.resource_names, request.name) {
            return false;
        }
        self.resources.iter().any(|entry| {
            let (resource, subresource) = match entry.split_once('/') {
                Some((r, s)) => (r, Some(s)),
                None => (entry.as_str(), None),
            };
            match subresource {
                // `*` is every resource and subresource; `pods` is the pods, not `pods/log`.
                None => {
                    resource == "*"
                        || (resource == request.resource && request.subresource.is_empty())
                }
                // `pods/*`: pods and all their subresources.
                Some("*") => resource == request.resource,
                // `*/log`: that subresource of any resource.
                Some(sub) if resource == "*" => sub == request.subresource,
                Some(sub) => resource == request.resource && sub == request.subresource,
            }
        })
    }
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|entry| entry == value)
}

fn url_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  # 0: nothing about health checks
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  # 1: the pods of kube-system read by the scheduler: nothing
  - level: None
    users: ["system:kube-scheduler"]
    verbs: ["get", "list", "watch"]
    namespaces: ["kube-system"]
  # 2: secrets and configmaps only at Metadata (never their data)
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
  # 3: pod logs and exec of anything
  - level: Request
    resources:
      - group: ""
        resources: ["pods/log", "*/exec"]
  # 4: one named deployment, whole bodies, stages as the policy says plus ResponseStarted
  - level: RequestResponse
    omitStages: [ResponseStarted]
    omitManagedFields: true
    resources:
      - group: apps
        resources: ["deployments/*"]
        resourceNames: ["web"]
  # 5: the whole apps group otherwise, for the ops group
  - level: Request
    userGroups: ["ops"]
    resources:
      - group: apps
  # 6: any other write
  - level: RequestResponse
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  # 7: other non-resource paths
  - level: Metadata
    nonResourceURLs: ["*"]
  # 8: every other resource (and its subresources)
  - level: Metadata
    resources:
      - group: ""
        resources: ["*"]
"#;

    fn resource<'a>(
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> Option<ResourceAttributes<'a>> {
        Some(ResourceAttributes {
            group,
            resource,
            subresource,
            namespace,
            name,
        })
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = Policy::parse(POLICY).unwrap();
        let ops = vec!["ops".to_string(), "system:authenticated".to_string()];
        let nobody: Vec<String> = vec![];
        let sched = "system:kube-scheduler";
        // (user, groups, verb, resource, path, level)
        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            Option<&str>,
            &[String],
            &str,
            Option<ResourceAttributes>,
            &str,
            Level,
        )> = vec![
            // nonResourceURLs: a prefix with `*`, an exact path, and the catch-all `*`.
            (Some("alice"), &nobody, "get", None, "/healthz", Level::None),
            (
                Some("alice"),
                &nobody,
                "get",
                None,
                "/healthz/etcd",
                Level::None,
            ),
            (Some("alice"), &nobody, "get", None, "/version", Level::None),
            (
                Some("alice"),
                &nobody,
                "get",
                None,
                "/version/x",
                Level::Metadata,
            ),
            (
                Some("alice"),
                &nobody,
                "get",
                None,
                "/apis",
                Level::Metadata,
            ),
            // users + verbs + namespaces: all must hold.
            (
                Some(sched),
                &nobody,
                "list",
                resource("", "pods", "", "kube-system", ""),
                "",
                Level::None,
            ),
            (
                Some(sched),
                &nobody,
                "list",
                resource("", "pods", "", "default", ""),
                "",
                Level::Metadata,
            ),
            (
                Some(sched),
                &nobody,
                "create",
                resource("", "pods", "", "kube-system", ""),
                "",
                Level::RequestResponse,
            ),
            (
                Some("alice"),
                &nobody,
                "list",
                resource("", "pods", "", "kube-system", ""),
                "",
                Level::Metadata,
            ),
            // Secrets are Metadata even for writes: rule 2 comes before rule 6.
            (
                Some("alice"),
                &nobody,
                "create",
                resource("", "secrets", "", "default", "s"),
                "",
                Level::Metadata,
            ),
            // `pods/log` matches the subresource only; `*/exec` any resource's exec.
            (
                Some("alice"),
                &nobody,
                "get",
                resource("", "pods", "log", "default", "p"),
                "",
                Level::Request,
            ),
            (
                Some("alice"),
                &nobody,
                "create",
                resource("", "pods", "exec", "default", "p"),
                "",
                Level::Request,
            ),
            (
                Some("alice"),
                &nobody,
                "get",
                resource("", "pods", "status", "default", "p"),
                "",
                Level::Metadata,
            ),
            // `deployments/*` covers the resource and its subresources, for the named object.
            (
                Some("alice"),
                &nobody,
                "get",
                resource("apps", "deployments", "", "default", "web"),
                "",
                Level::RequestResponse,
            ),
            (
                Some("alice"),
                &nobody,
                "update",
                resource("apps", "deployments", "scale", "default", "web"),
                "",
                Level::RequestResponse,
            ),
            // Another name: on to rule 5 (groups) or rule 6 (writes), else nothing.
            (
                Some("alice"),
                &ops,
                "get",
                resource("apps", "deployments", "", "default", "api"),
                "",
                Level::Request,
            ),
            (
                Some("alice"),
                &nobody,
                "get",
                resource("apps", "deployments", "", "default", "api"),
                "",
                Level::None,
            ),
            (
                Some("alice"),
                &nobody,
                "delete",
                resource("apps", "deployments", "", "default", "api"),
                "",
                Level::RequestResponse,
            ),
            // A list has no name, so resourceNames never match it.
            (
                Some("alice"),
                &nobody,
                "list",
                resource("apps", "deployments", "", "default", ""),
                "",
                Level::None,
            ),
            // A group entry is for its group only: `*` of the core group is not apps'.
            (
                Some("alice"),
                &nobody,
                "get",
                resource("batch", "jobs", "", "default", "j"),
                "",
                Level::None,
            ),
            (
                Some("alice"),
                &nobody,
                "get",
                resource("", "nodes", "", "", "n1"),
                "",
                Level::Metadata,
            ),
            // A 401 has no user: rules naming users skip it, the others still apply.
            (None, &nobody, "get", None, "/api", Level::Metadata),
        ];
        for (i, (user, groups, verb, resource, path, level)) in cases.into_iter().enumerate() {
            let request = Attributes {
                user,
                groups,
                verb,
                resource,
                path,
            };
            assert_eq!(
                policy.evaluate(&request).level,
                level,
                "case {i}: {request:?}"
            );
        }
    }

    #[test]
    fn stages_and_managed_fields_combine_policy_and_rule() {
        let policy = Policy::parse(POLICY).unwrap();
        let web = Attributes {
            user: Some("alice"),
            verb: "get",
            resource: resource("apps", "deployments", "", "default", "web"),
            ..Default::default()
        };
        let decision = policy.evaluate(&web);
        assert_eq!(
            decision.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert!(decision.omit_managed_fields);
        assert!(!decision.writes(Stage::RequestReceived));
        assert!(!decision.writes(Stage::ResponseStarted));
        assert!(decision.writes(Stage::ResponseComplete));
        assert!(decision.writes(Stage::Panic));
        let secret = Attributes {
            user: Some("alice"),
            verb: "get",
            resource: resource("", "secrets", "", "default", "s"),
            ..Default::default()
        };
        let decision = policy.evaluate(&secret);
        assert_eq!(decision.omit_stages, vec![Stage::RequestReceived]);
        assert!(!decision.omit_managed_fields);
        // Level None writes nothing at any stage.
        let none = policy.evaluate(&Attributes {
            path: "/healthz",
            verb: "get",
            ..Default::default()
        });
        assert!(!none.writes(Stage::ResponseComplete) && !none.writes(Stage::Panic));
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        let cases = [
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
                "no rules",
            ),
            (
                "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]\n",
                "expected apiVersion audit.k8s.io/v1",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]\n",
                "not an audit policy",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, user: [bob]}]\n",
                "not an audit policy",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, omitStages: [Later]}]\n",
                "not an audit policy",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [\"/a*b\"]}]\n",
                "rule 0: nonResourceURL",
            ),
            (
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None}, {level: None, nonResourceURLs: [\"/a\"], resources: [{group: \"\"}]}]\n",
                "rule 1: a rule cannot match both",
            ),
            ("{not yaml", "not an audit policy"),
        ];
        for (text, expected) in cases {
            let error = Policy::parse(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
        // JSON is YAML too.
        let json =
            r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"Metadata"}]}"#;
        assert_eq!(
            Policy::parse(json)
                .unwrap()
                .evaluate(&Attributes::default())
                .level,
            Level::Metadata
        );
    }
}

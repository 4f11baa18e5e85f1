//! The authorizer against the project's fixtures (`testdata/rbac/authorizer.yaml`), and the
//! escalation check's coverage rules.

use serde::Deserialize;
use serde_json::{Value, json};

use super::*;

#[derive(Deserialize)]
struct Fixtures {
    policy: Vec<Value>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    why: String,
    user: String,
    #[serde(default)]
    groups: Vec<String>,
    verb: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    path: String,
    allow: bool,
    #[serde(default)]
    reason: Option<String>,
}

/// A policy of `objects`, as the authorizer's watch would build it.
pub(crate) fn policy_of(objects: &[Value]) -> Policy {
    let mut policy = Policy::default();
    for object in objects {
        let kind = match object["kind"].as_str().unwrap() {
            "Role" => Kind::Role,
            "ClusterRole" => Kind::ClusterRole,
            "RoleBinding" => Kind::RoleBinding,
            "ClusterRoleBinding" => Kind::ClusterRoleBinding,
            other => panic!("not an RBAC kind: {other}"),
        };
        let meta = &object["metadata"];
        policy.apply(
            kind,
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap(),
            Some(object),
        );
    }
    policy
}

fn user(name: &str, groups: &[String]) -> User {
    User {
        name: name.into(),
        uid: String::new(),
        groups: groups.to_vec(),
        ..Default::default()
    }
}

#[test]
fn the_authorizer_answers_every_fixture() {
    let text = include_str!("../../../testdata/rbac/authorizer.yaml");
    let fixtures: Fixtures = serde_saphyr::from_str(text).unwrap();
    let policy = policy_of(&fixtures.policy);
    let mut failures = Vec::new();
    for case in &fixtures.cases {
        let request = if case.path.is_empty() {
            Request::Resource {
                verb: &case.verb,
                group: &case.group,
                resource: &case.resource,
                subresource: &case.subresource,
                namespace: &case.namespace,
                name: &case.name,
            }
        } else {
            Request::NonResource {
                verb: &case.verb,
                path: &case.path,
            }
        };
        let decision = policy.authorize(&user(&case.user, &case.groups), &request);
        if decision.allowed() != case.allow {
            failures.push(format!("{}: {decision:?} for {request:?}", case.why));
        }
        if let (Some(reason), Decision::Deny(got)) = (&case.reason, &decision)
            && reason != got
        {
            failures.push(format!("{}: reason {got:?}, not {reason:?}", case.why));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(fixtures.cases.len() >= 35);
}

#[test]
fn an_allow_names_the_binding_and_role() {
    let policy = policy_of(&[
        json!({"kind": "ClusterRole", "metadata": {"name": "r"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
               "subjects": [{"kind": "User", "name": "u"}]}),
    ]);
    let get = Request::Resource {
        verb: "get",
        group: "",
        resource: "pods",
        subresource: "",
        namespace: "ns",
        name: "p",
    };
    assert_eq!(
        policy.authorize(&user("u", &[]), &get),
        Decision::Allow(
            r#"RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to u"#.into()
        )
    );
}

#[test]
fn roles_and_bindings_leave_the_policy_when_deleted() {
    let role = json!({"kind": "Role", "metadata": {"name": "r", "namespace": "ns"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    let binding = json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "ns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "u"}]});
    let mut policy = policy_of(&[role, binding]);
    let get = Request::Resource {
        verb: "get",
        group: "",
        resource: "pods",
        subresource: "",
        namespace: "ns",
        name: "p",
    };
    assert!(policy.authorize(&user("u", &[]), &get).allowed());
    policy.apply(Kind::Role, "ns", "r", None);
    assert_eq!(
        policy.authorize(&user("u", &[]), &get),
        Decision::Deny(r#"RBAC: [role.rbac.authorization.k8s.io "r" not found]"#.into())
    );
    policy.apply(Kind::RoleBinding, "ns", "b", None);
    assert_eq!(
        policy.authorize(&user("u", &[]), &get),
        Decision::Deny(String::new())
    );
}

#[test]
fn aggregated_rules_follow_their_sources_and_survive_cycles() {
    let aggregate = |name: &str, label: &str, own: &str| {
        json!({"kind": "ClusterRole",
            "metadata": {"name": name, "labels": {own: "true"}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]}})
    };
    // a gathers b, b gathers a: each ends with the other's pieces, and the walk ends.
    let mut policy = policy_of(&[
        aggregate("a", "to-a", "to-b"),
        aggregate("b", "to-b", "to-a"),
        json!({"kind": "ClusterRole", "metadata": {"name": "piece", "labels": {"to-a": "true"}},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    ]);
    let pods = Rule {
        verbs: vec!["get".into()],
        api_groups: vec!["".into()],
        resources: vec!["pods".into()],
        ..Rule::default()
    };
    assert_eq!(*policy.aggregated_rules("a").unwrap(), vec![pods.clone()]);
    assert_eq!(policy.aggregated_rules("piece"), None);
    policy.apply(Kind::ClusterRole, "", "piece", None);
    assert!(policy.aggregated_rules("a").unwrap().is_empty());
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Rule {
    let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    Rule {
        verbs: v(verbs),
        api_groups: v(groups),
        resources: v(resources),
        ..Rule::default()
    }
}

#[test]
fn escalation_coverage() {
    let named = |names: &[&str]| Rule {
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        ..rule(&[""], &["configmaps"], &["get"])
    };
    let url = |urls: &[&str], verbs: &[&str]| Rule {
        non_resource_urls: urls.iter().map(|s| s.to_string()).collect(),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Rule::default()
    };
    let star = rule(&["*"], &["*"], &["*"]);
    // (why, owner, requested, what stays uncovered)
    let cases: Vec<(&str, Vec<Rule>, Vec<Rule>, Vec<Rule>)> = vec![
        (
            "the same rule",
            vec![rule(&[""], &["pods"], &["get", "list"])],
            vec![rule(&[""], &["pods"], &["get"])],
            vec![],
        ),
        (
            "a verb more",
            vec![rule(&[""], &["pods"], &["get"])],
            vec![rule(&[""], &["pods"], &["get", "delete", "list"])],
            vec![rule(&[""], &["pods"], &["delete", "list"])],
        ),
        (
            "resource wildcards cover every resource, not URLs",
            vec![star],
            vec![
                rule(&["apps"], &["deployments/scale"], &["update"]),
                url(&["/metrics"], &["get"]),
            ],
            vec![url(&["/metrics"], &["get"])],
        ),
        (
            "asking for * needs *",
            vec![rule(
                &[""],
                &["pods"],
                &[
                    "get",
                    "list",
                    "watch",
                    "create",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection",
                ],
            )],
            vec![rule(&[""], &["pods"], &["*"])],
            vec![rule(&[""], &["pods"], &["*"])],
        ),
        (
            "*/scale covers one resource's scale",
            vec![rule(&["apps"], &["*/scale"], &["get"])],
            vec![rule(&["apps"], &["statefulsets/scale"], &["get"])],
            vec![],
        ),
        (
            "split across two owner rules",
            vec![
                rule(&[""], &["pods"], &["get"]),
                rule(&[""], &["services"], &["get"]),
            ],
            vec![rule(&[""], &["pods", "services"], &["get"])],
            vec![],
        ),
        (
            "names within the owner's names",
            vec![named(&["a", "b"])],
            vec![named(&["a"])],
            vec![],
        ),
        (
            "a name outside them",
            vec![named(&["a"])],
            vec![named(&["a", "c"])],
            vec![named(&["c"])],
        ),
        (
            "names do not cover all objects",
            vec![named(&["a"])],
            vec![rule(&[""], &["configmaps"], &["get"])],
            vec![rule(&[""], &["configmaps"], &["get"])],
        ),
        (
            "a URL prefix",
            vec![url(&["/logs/*"], &["get"])],
            vec![url(&["/logs/a", "/logs/b/c"], &["get"])],
            vec![],
        ),
        (
            "another URL",
            vec![url(&["/logs/*"], &["get"])],
            vec![url(&["/metrics"], &["get"])],
            vec![url(&["/metrics"], &["get"])],
        ),
    ];
    for (why, owner, requested, want) in cases {
        assert_eq!(uncovered(&owner, &requested), want, "{why}");
    }
}

#[test]
fn rules_print_as_kubernetes_prints_them() {
    assert_eq!(
        rule(&["apps"], &["deployments"], &["get", "list"]).compact(),
        r#"{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}"#
    );
    let url = Rule {
        non_resource_urls: vec!["/metrics".into()],
        verbs: vec!["get".into()],
        ..Rule::default()
    };
    assert_eq!(
        url.compact(),
        r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#
    );
}

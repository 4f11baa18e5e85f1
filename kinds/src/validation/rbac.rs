//! `rbac.authorization.k8s.io/v1`: Roles, ClusterRoles and their bindings
//! (`pkg/apis/rbac/validation`).

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde_json::Value;

use super::apps::validate_label_selector;
use super::names;
use super::{FieldError, Path, decode};

/// The API group of the RBAC kinds, which `roleRef` and User/Group subjects name.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// `ValidatePolicyRule`: every rule has verbs; a rule is about resources (groups and resources
/// given) or about non-resource URLs (cluster roles only), never both.
fn validate_rule(rule: &PolicyRule, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if rule.verbs.is_empty() {
        errs.push(FieldError::required(
            path.child("verbs"),
            "verbs must contain at least one value",
        ));
    }
    let urls = rule.non_resource_urls.as_deref().unwrap_or_default();
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    let names = rule.resource_names.as_deref().unwrap_or_default();
    if !urls.is_empty() {
        if namespaced {
            errs.push(FieldError::invalid(
                path.child("nonResourceURLs"),
                serde_json::json!(urls),
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !groups.is_empty() || !resources.is_empty() || !names.is_empty() {
            errs.push(FieldError::invalid(
                path.child("nonResourceURLs"),
                serde_json::json!(urls),
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return errs;
    }
    if groups.is_empty() {
        errs.push(FieldError::required(
            path.child("apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if resources.is_empty() {
        errs.push(FieldError::required(
            path.child("resources"),
            "resource rules must supply at least one resource",
        ));
    }
    errs
}

fn validate_rules(rules: Option<&[PolicyRule]>, namespaced: bool) -> Vec<FieldError> {
    let path = Path::new("rules");
    rules
        .unwrap_or_default()
        .iter()
        .enumerate()
        .flat_map(|(i, rule)| validate_rule(rule, namespaced, &path.index(i)))
        .collect()
}

/// A Role: its rules, which may not name non-resource URLs.
pub(crate) fn validate_role(new: &Value) -> Result<Vec<FieldError>, FieldError> {
    let role: Role = decode(new, "")?;
    Ok(validate_rules(role.rules.as_deref(), true))
}

/// A ClusterRole: its rules and its aggregation rule's selectors.
pub(crate) fn validate_cluster_role(new: &Value) -> Result<Vec<FieldError>, FieldError> {
    let role: ClusterRole = decode(new, "")?;
    let mut errs = validate_rules(role.rules.as_deref(), false);
    if let Some(aggregation) = &role.aggregation_rule {
        let path = Path::new("aggregationRule").child("clusterRoleSelectors");
        let selectors = aggregation
            .cluster_role_selectors
            .as_deref()
            .unwrap_or_default();
        if selectors.is_empty() {
            errs.push(FieldError::required(
                path.clone(),
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (i, selector) in selectors.iter().enumerate() {
            errs.extend(validate_label_selector(selector, &path.index(i)));
        }
    }
    Ok(errs)
}

/// `roleRef`: this group, a kind in `kinds`, a name that is a path segment.
fn validate_role_ref(role_ref: &RoleRef, kinds: &[&str]) -> Vec<FieldError> {
    let path = Path::new("roleRef");
    let mut errs = Vec::new();
    if role_ref.api_group != GROUP {
        errs.push(FieldError::not_supported(
            path.child("apiGroup"),
            role_ref.api_group.as_str(),
            &[GROUP],
        ));
    }
    if !kinds.contains(&role_ref.kind.as_str()) {
        errs.push(FieldError::not_supported(
            path.child("kind"),
            role_ref.kind.as_str(),
            kinds,
        ));
    }
    if role_ref.name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    } else {
        for message in names::path_segment_name(&role_ref.name, false) {
            errs.push(FieldError::invalid(
                path.child("name"),
                role_ref.name.as_str(),
                message,
            ));
        }
    }
    errs
}

/// `ValidateRoleBindingSubject`: a ServiceAccount (core group, a valid name, a namespace unless
/// a RoleBinding's own namespace stands in), a User or a Group (this group).
fn validate_subject(subject: &Subject, namespaced: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let group = subject.api_group.as_deref().unwrap_or_default();
    if subject.name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    }
    match subject.kind.as_str() {
        "ServiceAccount" => {
            if !subject.name.is_empty() {
                for message in names::name_is_dns_subdomain(&subject.name, false) {
                    errs.push(FieldError::invalid(
                        path.child("name"),
                        subject.name.as_str(),
                        message,
                    ));
                }
            }
            if !group.is_empty() {
                errs.push(FieldError::not_supported(
                    path.child("apiGroup"),
                    group,
                    &[""],
                ));
            }
            if !namespaced && subject.namespace.as_deref().unwrap_or_default().is_empty() {
                errs.push(FieldError::required(path.child("namespace"), ""));
            }
        }
        "User" | "Group" => {
            if group != GROUP {
                errs.push(FieldError::not_supported(
                    path.child("apiGroup"),
                    group,
                    &[GROUP],
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            path.child("kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errs
}

fn validate_subjects(subjects: Option<&[Subject]>, namespaced: bool) -> Vec<FieldError> {
    let path = Path::new("subjects");
    subjects
        .unwrap_or_default()
        .iter()
        .enumerate()
        .flat_map(|(i, s)| validate_subject(s, namespaced, &path.index(i)))
        .collect()
}

/// The roleRef a binding was created with stays: Kubernetes refuses to repoint a binding.
fn role_ref_unchanged(new: &RoleRef, old: Option<&RoleRef>) -> Option<FieldError> {
    let old = old?;
    (new != old).then(|| {
        FieldError::invalid(
            Path::new("roleRef"),
            serde_json::to_value(new).unwrap_or_default(),
            "cannot change roleRef",
        )
    })
}

/// A RoleBinding: a roleRef to a Role or a ClusterRole, valid subjects, roleRef immutable.
pub(crate) fn validate_role_binding(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let binding: RoleBinding = decode(new, "")?;
    let old = old
        .map(|o| decode::<RoleBinding>(o, ""))
        .transpose()?
        .map(|o| o.role_ref);
    let mut errs = validate_role_ref(&binding.role_ref, &["Role", "ClusterRole"]);
    errs.extend(validate_subjects(binding.subjects.as_deref(), true));
    errs.extend(role_ref_unchanged(&binding.role_ref, old.as_ref()));
    Ok(errs)
}

/// A ClusterRoleBinding: a roleRef to a ClusterRole, valid subjects, roleRef immutable.
pub(crate) fn validate_cluster_role_binding(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let binding: ClusterRoleBinding = decode(new, "")?;
    let old = old
        .map(|o| decode::<ClusterRoleBinding>(o, ""))
        .transpose()?
        .map(|o| o.role_ref);
    let mut errs = validate_role_ref(&binding.role_ref, &["ClusterRole"]);
    errs.extend(validate_subjects(binding.subjects.as_deref(), false));
    errs.extend(role_ref_unchanged(&binding.role_ref, old.as_ref()));
    Ok(errs)
}

/// `SetDefaults_Subject`: User and Group subjects are in this group; ServiceAccounts are in
/// core, whose empty name the stored object leaves out (as kube-apiserver's `omitempty` does:
/// writing `apiGroup: ""` would make every client-side re-apply of a binding a change, and a
/// later server-side apply conflict on `subjects`).
pub(crate) fn default_subjects(object: &mut Value) {
    let Some(subjects) = object.get_mut("subjects").and_then(Value::as_array_mut) else {
        return;
    };
    for subject in subjects {
        let Some(fields) = subject.as_object_mut() else {
            continue;
        };
        match fields.get("apiGroup") {
            None | Some(Value::Null) => {}
            Some(Value::String(group)) if group.is_empty() => {}
            Some(_) => continue,
        }
        fields.remove("apiGroup");
        if matches!(
            fields.get("kind").and_then(Value::as_str),
            Some("User" | "Group")
        ) {
            fields.insert("apiGroup".into(), Value::String(GROUP.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::test_util::{create_msgs, update_msgs};

    const G: &str = super::GROUP;

    #[test]
    fn rules_need_verbs_and_say_what_they_are_about() {
        let role = |rules: serde_json::Value| {
            create_msgs(
                G,
                "Role",
                json!({"metadata": {"name": "r"}, "rules": rules}),
            )
        };
        assert_eq!(
            role(json!([{"apiGroups": [""], "resources": ["pods"]}])),
            vec!["rules[0].verbs: Required value: verbs must contain at least one value"]
        );
        assert_eq!(
            role(json!([{"verbs": ["get"]}])),
            vec![
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[0].resources: Required value: resource rules must supply at least one resource",
            ]
        );
        assert_eq!(
            role(json!([{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}])),
            vec![
                r#"rules[0].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs"#
            ]
        );
        let cluster = create_msgs(
            G,
            "ClusterRole",
            json!({"metadata": {"name": "c"}, "rules": [
                {"nonResourceURLs": ["/x"], "resources": ["pods"], "verbs": ["get"]}]}),
        );
        assert_eq!(
            cluster,
            vec![
                r#"rules[0].nonResourceURLs: Invalid value: []string{"/x"}: rules cannot apply to both regular resources and non-resource URLs"#
            ]
        );
        let aggregated = create_msgs(
            G,
            "ClusterRole",
            json!({"metadata": {"name": "c"}, "aggregationRule": {"clusterRoleSelectors": []}}),
        );
        assert_eq!(
            aggregated,
            vec![
                "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"
            ]
        );
    }

    #[test]
    fn bindings_point_at_a_role_and_name_real_subjects() {
        let binding = |kind: &str, role_ref: serde_json::Value, subjects: serde_json::Value| {
            create_msgs(
                G,
                kind,
                json!({"metadata": {"name": "b"}, "roleRef": role_ref, "subjects": subjects}),
            )
        };
        let to = |kind: &str| json!({"apiGroup": G, "kind": kind, "name": "r"});
        assert_eq!(
            binding("ClusterRoleBinding", to("Role"), json!([])),
            vec![r#"roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole""#]
        );
        assert_eq!(
            binding(
                "RoleBinding",
                json!({"apiGroup": "x", "kind": "Role", "name": ""}),
                json!([])
            ),
            vec![
                r#"roleRef.apiGroup: Unsupported value: "x": supported values: "rbac.authorization.k8s.io""#,
                "roleRef.name: Required value",
            ]
        );
        assert_eq!(
            binding(
                "ClusterRoleBinding",
                to("ClusterRole"),
                json!([{"kind": "ServiceAccount", "name": "default"}, {"kind": "Robot", "name": "r2"},
                       {"kind": "User", "apiGroup": "example.com", "name": "u"}])
            ),
            vec![
                "subjects[0].namespace: Required value",
                r#"subjects[1].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group""#,
                r#"subjects[2].apiGroup: Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io""#,
            ]
        );
        // User and Group subjects default to the RBAC group; a RoleBinding's ServiceAccount
        // subject may leave its namespace to the binding.
        assert!(
            binding(
                "RoleBinding",
                to("Role"),
                json!([{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "sa"}])
            )
            .is_empty()
        );
    }

    #[test]
    fn a_binding_keeps_its_role() {
        let binding = |role: &str| {
            json!({"metadata": {"name": "b", "namespace": "default", "resourceVersion": "1"},
                   "roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": role}})
        };
        assert_eq!(
            update_msgs(G, "RoleBinding", binding("edit"), binding("view")),
            vec![
                r#"roleRef: Invalid value: map[string]string{"apiGroup":"rbac.authorization.k8s.io", "kind":"ClusterRole", "name":"edit"}: cannot change roleRef"#
            ]
        );
        assert!(update_msgs(G, "RoleBinding", binding("view"), binding("view")).is_empty());
    }

    #[test]
    fn subjects_default_their_group_and_leave_an_empty_one_out() {
        let mut binding = json!({"subjects": [
            {"kind": "User", "name": "u"},
            {"kind": "Group", "name": "g", "apiGroup": ""},
            {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"},
            {"kind": "ServiceAccount", "name": "sb", "namespace": "ns", "apiGroup": ""},
            {"kind": "ServiceAccount", "name": "sc", "namespace": "ns", "apiGroup": null},
            {"kind": "User", "name": "x", "apiGroup": "example.com"}]});
        super::default_subjects(&mut binding);
        assert_eq!(
            binding["subjects"],
            json!([
                {"kind": "User", "name": "u", "apiGroup": G},
                {"kind": "Group", "name": "g", "apiGroup": G},
                {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"},
                {"kind": "ServiceAccount", "name": "sb", "namespace": "ns"},
                {"kind": "ServiceAccount", "name": "sc", "namespace": "ns"},
                {"kind": "User", "name": "x", "apiGroup": "example.com"}])
        );
    }
}

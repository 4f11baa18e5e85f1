//! The status of ValidatingAdmissionPolicies: each new generation is type checked
//! ([`skiff_kinds::custom::typecheck`]) against the schemas of the kinds its `matchConstraints`
//! name, and the result written as `status.typeChecking.expressionWarnings` with
//! `status.observedGeneration`, as kube-controller-manager's policy status controller writes
//! them. `typeChecking` present means checked; empty means nothing found. The warnings are
//! advice: the policy is evaluated the same either way.
//!
//! As in Kubernetes: the kinds checked are those of the resource rules that name their groups
//! and versions without wildcards (wildcard and subresource resources are skipped), at most ten
//! per rule; `object` and `oldObject` have the kind's schema, `params` its `paramKind`'s,
//! `namespaceObject` a Namespace's; each validation's `expression` and `messageExpression` are
//! checked, and each warning names the kind (`apps/v1, Kind=Deployment: ERROR: ...`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use skiff_kinds::Snapshot;
use skiff_kinds::builtin::validating_admission_policy::INFO;
use skiff_kinds::custom::typecheck::{Declarations, Schemas as SchemaMap, Type, check, display};

use crate::openapi::{Documents, group_version_path};
use crate::registry::Update;
use crate::server::ApiServer;

/// At most this many kinds are checked per resource rule (kube-apiserver's `maxTypesToCheck`).
const MAX_TYPES_PER_RULE: usize = 10;

/// Type checks the policies now and as they change, until the server shuts down.
pub async fn start(server: &Arc<ApiServer>) -> crate::error::Result<()> {
    crate::follow::start(server, &INFO, "the policy type checker", TypeChecker).await
}

struct TypeChecker;

impl crate::follow::Follower for TypeChecker {
    async fn listed(&self, server: &Arc<ApiServer>, items: &[Value]) {
        for policy in items {
            checked(server, policy).await;
        }
    }

    async fn changed(&self, server: &Arc<ApiServer>, object: &Value, present: bool) {
        if present {
            checked(server, object).await;
        }
    }
}

/// Writes `policy`'s type checking into its status unless its generation was checked.
async fn checked(server: &Arc<ApiServer>, policy: &Value) {
    let generation = policy["metadata"]["generation"].as_i64().unwrap_or(0);
    let status = &policy["status"];
    if status["observedGeneration"].as_i64() >= Some(generation)
        && status.get("typeChecking").is_some()
    {
        return;
    }
    let Some(name) = policy["metadata"]["name"].as_str() else {
        return;
    };
    let kinds = server.kinds.snapshot();
    let documents = server.openapi.current().await;
    let policy = policy.clone();
    let Ok(warnings) =
        tokio::task::spawn_blocking(move || type_check(&kinds, &documents, &policy)).await
    else {
        tracing::warn!(policy = name, "type checking the policy panicked");
        return;
    };
    let written = server
        .registry
        .update(&INFO, None, name, None, false, |mut current| {
            let warnings = warnings.clone();
            async move {
                // A newer generation is checked when its own event arrives.
                if current["metadata"]["generation"].as_i64().unwrap_or(0) == generation {
                    current["status"] = json!({
                        "observedGeneration": generation,
                        "typeChecking": { "expressionWarnings": warnings },
                    });
                }
                Ok(Update::Write(current))
            }
        })
        .await;
    if let Err(e) = written {
        tracing::debug!(policy = name, error = %e, "cannot write the policy's type checking");
    }
}

/// The schemas of the served group-versions, each document parsed once, when first asked for.
struct Schemas<'a> {
    documents: &'a Documents,
    parsed: HashMap<String, Option<SchemaMap>>,
}

impl Schemas<'_> {
    /// The type of `group/version` `kind`'s objects, if its schema is served.
    fn of(&mut self, group: &str, version: &str, kind: &str) -> Option<Type> {
        let path = group_version_path(group, version);
        let documents = self.documents;
        let schemas = self
            .parsed
            .entry(path)
            .or_insert_with_key(|path| {
                let built = documents.group_versions.get(path)?;
                let mut document: Value = serde_json::from_slice(&built.body).ok()?;
                match document["components"]["schemas"].take() {
                    Value::Object(schemas) => Some(Arc::new(schemas)),
                    _ => None,
                }
            })
            .as_ref()?;
        let wanted = json!({"group": group, "version": version, "kind": kind});
        let schema = schemas.values().find(|s| {
            s["x-kubernetes-group-version-kind"]
                .as_array()
                .is_some_and(|kinds| kinds.contains(&wanted))
        })?;
        Some(Type::of_schema(schema, schemas))
    }
}

/// The `expressionWarnings` of `policy` (JSON) with the schemas of `kinds` (in `documents`).
pub fn type_check(kinds: &Snapshot, documents: &Documents, policy: &Value) -> Vec<Value> {
    let spec = &policy["spec"];
    let mut schemas = Schemas {
        documents,
        parsed: HashMap::new(),
    };
    let params = spec["paramKind"]["apiVersion"]
        .as_str()
        .zip(spec["paramKind"]["kind"].as_str())
        .and_then(|(api_version, kind)| {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            schemas.of(group, version, kind)
        })
        .unwrap_or(Type::Dyn);
    let namespace = schemas.of("", "v1", "Namespace").unwrap_or(Type::Dyn);
    let variables: Map<String, Value> = spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v["name"].as_str()?.to_string(), json!({}))))
        .collect();
    let variables = Type::of_schema(
        &json!({"type": "object", "properties": variables}),
        &SchemaMap::default(),
    );
    let checked: Vec<(String, Declarations)> = kinds_to_check(kinds, spec)
        .into_iter()
        .filter_map(|(group, version, kind)| {
            let object = schemas.of(&group, &version, &kind)?;
            let mut d = Declarations::default();
            d.declare("object", object.clone());
            d.declare("oldObject", object);
            d.declare("params", params.clone());
            d.declare("namespaceObject", namespace.clone());
            d.declare("request", Type::Dyn);
            d.declare("authorizer", Type::Dyn);
            d.declare("variables", variables.clone());
            Some((format!("{group}/{version}, Kind={kind}"), d))
        })
        .collect();
    let mut warnings = Vec::new();
    for (i, validation) in spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["expression", "messageExpression"] {
            let Some(source) = validation[field].as_str().filter(|s| !s.is_empty()) else {
                continue;
            };
            let results: Vec<String> = checked
                .iter()
                .filter_map(|(gvk, declarations)| {
                    let issues = check(source, declarations);
                    (!issues.is_empty()).then(|| format!("{gvk}: {}\n", display(source, &issues)))
                })
                .collect();
            if !results.is_empty() {
                warnings.push(json!({
                    "fieldRef": format!("spec.validations[{i}].{field}"),
                    "warning": results.join("\n"),
                }));
            }
        }
    }
    warnings
}

/// The kinds `spec.matchConstraints.resourceRules` name, sorted by group, version and kind.
fn kinds_to_check(kinds: &Snapshot, spec: &Value) -> Vec<(String, String, String)> {
    let mut found = BTreeSet::new();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    for rule in spec["matchConstraints"]["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let groups = strings(&rule["apiGroups"]);
        let versions = strings(&rule["apiVersions"]);
        if groups.iter().chain(&versions).any(|s| s.contains('*')) {
            continue;
        }
        let resources: Vec<String> = strings(&rule["resources"])
            .into_iter()
            .filter(|r| !r.contains('*') && !r.contains('/'))
            .collect();
        let mut count = 0;
        'rule: for group in &groups {
            for version in &versions {
                for resource in &resources {
                    if let Some(kind) = kinds.lookup(group, version, resource) {
                        found.insert((
                            group.clone(),
                            version.clone(),
                            kind.info().kind.to_string(),
                        ));
                        count += 1;
                        if count == MAX_TYPES_PER_RULE {
                            break 'rule;
                        }
                    }
                }
            }
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use skiff_kinds::Kinds;

    use super::*;

    fn policy(validations: Value) -> Value {
        json!({"metadata": {"name": "p", "generation": 1}, "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [
                {"apiGroups": ["apps"], "apiVersions": ["v1"],
                 "resources": ["deployments", "deployments/scale", "replicasets"]},
                {"apiGroups": ["*"], "apiVersions": ["v1"], "resources": ["pods"]}]},
            "variables": [{"name": "limit", "expression": "int(params.data.max)"}],
            "validations": validations}})
    }

    #[test]
    fn each_matched_kind_is_checked_against_its_schema() {
        let kinds = Kinds::builtin().snapshot();
        let documents = crate::openapi::documents(&kinds);
        let warnings = type_check(
            &kinds,
            &documents,
            &policy(json!([
                {"expression": "object.spec.replicas <= variables.limit && params.data.max != ''"},
                {"expression": "object.spec.replica <= 5",
                 "messageExpression": "'too many: ' + object.spec.replicas"},
                {"expression": "variables.limitt > 0"}])),
        );
        let fields: Vec<&str> = warnings
            .iter()
            .map(|w| w["fieldRef"].as_str().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.validations[1].expression",
                "spec.validations[1].messageExpression",
                "spec.validations[2].expression"
            ]
        );
        // Both kinds named by the first rule (not the subresource, not the wildcard rule).
        assert_eq!(
            warnings[0]["warning"],
            "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica <= 5\n | ...........^\n\n\
             apps/v1, Kind=ReplicaSet: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica <= 5\n | ...........^\n"
        );
        assert!(
            warnings[1]["warning"]
                .as_str()
                .unwrap()
                .contains("found no matching overload for '_+_' applied to '(string, int)'"),
            "{}",
            warnings[1]
        );
        assert!(
            warnings[2]["warning"]
                .as_str()
                .unwrap()
                .contains("undefined field 'limitt'"),
            "{}",
            warnings[2]
        );
        // A well-typed policy has no warnings.
        assert!(
            type_check(
                &kinds,
                &documents,
                &policy(json!([{"expression": "object.spec.replicas <= 5"}]))
            )
            .is_empty()
        );
    }
}

//! Server-side apply (`application/apply-patch+yaml`) to the degree kubectl needs: the applied
//! configuration is merged into the live object by the kind's list keys, the applier's `Apply`
//! entry in `metadata.managedFields` records exactly the fields it applied, fields it applied
//! before and no longer applies are removed (unless another manager owns them), and changing a
//! field another manager owns is a 409 conflict unless `force=true`, which takes it over.
//!
//! Not done: the `kubectl.kubernetes.io/last-applied-configuration` upgrade path inside the
//! server (kubectl migrates the managers itself, see [`super::record_update`]), capping the
//! number of `Update` managers, and schema defaults beyond list keys.

use serde_json::{Map, Value, json};
use skiff_meta::ResourceInfo;

use crate::Kind;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause;

use super::managed::{
    self, Entry, FieldSet, Operation, Path, PathElement, api_version_of, compare, format_time,
    item_field, item_key, path_string, root_field, scope, to_field_set,
};
use super::schema::{Field, ListType, field_of};
use super::{Error, Options, PatchType, Result, validate_options};

/// The manager Kubernetes gives the fields of an object that was never applied, when it is
/// applied to for the first time.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// One field an apply would take from another manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager as messages name it (`"kubectl-edit" using v1`).
    pub manager: String,
    /// The field.
    pub path: Path,
}

/// The conflicts of a refused apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// Kubernetes' message: `Apply failed with 1 conflict: conflict with "m": .spec.replicas`,
    /// or with several, one block per manager listing `- <path>` lines.
    pub fn message(&self) -> String {
        if let [c] = self.0.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                c.manager,
                path_string(&c.path)
            );
        }
        let mut managers: Vec<&String> = Vec::new();
        for c in &self.0 {
            if !managers.contains(&&c.manager) {
                managers.push(&c.manager);
            }
        }
        managers.sort();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            for c in self.0.iter().filter(|c| &c.manager == m) {
                lines.push(format!("- {}", path_string(&c.path)));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }

    /// One `FieldManagerConflict` cause per conflict.
    pub fn causes(&self) -> Vec<StatusCause> {
        self.0
            .iter()
            .map(|c| StatusCause {
                reason: Some("FieldManagerConflict".to_string()),
                message: Some(format!("conflict with {}", c.manager)),
                field: Some(path_string(&c.path)),
            })
            .collect()
    }
}

/// Decodes an apply body: JSON (what kubectl sends) or YAML.
fn decode_config(body: &[u8]) -> Result<Value> {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => serde_saphyr::from_slice(body)
            .map_err(|e| Error::BadRequest(format!("error decoding YAML: {e}")))?,
    };
    if !v.is_object() {
        return Err(Error::BadRequest(format!(
            "error decoding YAML: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            super::kind_name(&v)
        )));
    }
    Ok(v)
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn without_nulls(v: &Value) -> Value {
    let mut v = v.clone();
    strip_nulls(&mut v);
    v
}

/// Merges an applied configuration into a live value (structured-merge-diff's `Merge`): objects
/// key by key (a `null` removes the key), map-lists and sets item by item keeping the applied
/// order for shared items, everything else replaced.
pub fn merge(live: &Value, config: &Value, field: &Field) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(r)) if !field.atomic_map => {
            let mut out = l.clone();
            for (k, rv) in r {
                if rv.is_null() {
                    out.remove(k);
                    continue;
                }
                let v = match l.get(k) {
                    Some(lv) => merge(lv, rv, field_of(field.ty, k)),
                    None => without_nulls(rv),
                };
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(r)) => match field.list_type {
            ListType::Atomic => without_nulls(config),
            ListType::Set => Value::Array(merge_items(
                l,
                r,
                &|v| Some(PathElement::Value(v.to_string())),
                &|_, r| r.clone(),
            )),
            ListType::Map(keys) => {
                let item = item_field(field);
                Value::Array(merge_items(l, r, &|v| item_key(v, keys), &|l, r| {
                    merge(l, r, &item)
                }))
            }
        },
        _ => without_nulls(config),
    }
}

/// Merges two keyed lists: live-only items stay where they are, applied items come in the
/// applied order, shared items are merged (structured-merge-diff's `visitListItems`).
fn merge_items(
    lhs: &[Value],
    rhs: &[Value],
    key: &dyn Fn(&Value) -> Option<PathElement>,
    merge_item: &dyn Fn(&Value, &Value) -> Value,
) -> Vec<Value> {
    let index = |list: &[Value]| -> Vec<(PathElement, Value)> {
        let mut out: Vec<(PathElement, Value)> = Vec::new();
        for v in list {
            if let Some(pe) = key(v)
                && !out.iter().any(|(p, _)| *p == pe)
            {
                out.push((pe, v.clone()));
            }
        }
        out
    };
    let l = index(lhs);
    let r = index(rhs);
    let in_l = |pe: &PathElement| l.iter().find(|(p, _)| p == pe).map(|(_, v)| v);
    let in_r = |pe: &PathElement| r.iter().any(|(p, _)| p == pe);
    let mut shared = r.iter().map(|(p, _)| p).filter(|p| in_l(p).is_some());
    let mut next_shared = shared.next();
    let mut merged_rhs: Vec<&PathElement> = Vec::new();
    let mut out = Vec::with_capacity(l.len().max(r.len()));
    let (mut li, mut ri) = (0, 0);
    while li < l.len() || ri < r.len() {
        if li < l.len() && ri < r.len() {
            let pe = &l[li].0;
            if *pe == r[ri].0 {
                merged_rhs.push(pe);
                out.push(merge_item(&l[li].1, &r[ri].1));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if in_r(pe) && next_shared.is_some_and(|s| s != pe) {
                li += 1;
                continue;
            }
        }
        if li < l.len() {
            let pe = &l[li].0;
            if !in_r(pe) {
                out.push(l[li].1.clone());
                li += 1;
                continue;
            } else if merged_rhs.contains(&pe) {
                li += 1;
            }
        }
        if ri < r.len() {
            let (pe, rv) = (&r[ri].0, &r[ri].1);
            merged_rhs.push(pe);
            out.push(match in_l(pe) {
                Some(lv) => merge_item(lv, rv),
                None => without_nulls(rv),
            });
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    // Items the keys cannot identify are kept from the live list, untouched.
    out.extend(lhs.iter().filter(|v| key(v).is_none()).cloned());
    out
}

/// Removes the value at `path` from `obj`, if it is there. A list or a Go map left empty by
/// the removal is removed too (Kubernetes serialises them with `omitempty`). Returns whether
/// `obj` itself is now such an empty list or map.
fn remove_at(obj: &mut Value, path: &[PathElement], field: &Field) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    match (obj, first) {
        (Value::Object(m), PathElement::Field(k)) => {
            let child_field = field_of(field.ty, k);
            let remove = rest.is_empty()
                || m.get_mut(k)
                    .is_some_and(|child| remove_at(child, rest, child_field));
            if remove {
                m.remove(k);
            }
            field.is_map && m.is_empty()
        }
        (Value::Array(items), pe @ (PathElement::Key(_) | PathElement::Value(_))) => {
            let matches = |v: &Value| match (pe, field.list_type) {
                (PathElement::Key(_), ListType::Map(keys)) => {
                    item_key(v, keys).as_ref() == Some(pe)
                }
                (PathElement::Value(s), _) => {
                    serde_json::from_str::<Value>(s).is_ok_and(|x| x == *v)
                }
                _ => false,
            };
            if rest.is_empty() {
                items.retain(|v| !matches(v));
            } else if let Some(child) = items.iter_mut().find(|v| matches(v)) {
                remove_at(child, rest, &item_field(field));
            }
            items.is_empty()
        }
        _ => false,
    }
}

/// Applies a configuration for `options.field_manager` (server-side apply). `live` is `None`
/// when the object does not exist yet: the result is then the object to create (the caller
/// fills in what a create fills in). Conflicts with other managers are [`Error::Conflict`]
/// unless `options.force`.
pub fn server_side_apply(
    kind: &dyn Kind,
    live: Option<&Value>,
    body: &[u8],
    options: &Options<'_>,
) -> Result<Value> {
    let resource = kind.info();
    validate_options(PatchType::Apply, options)?;
    let mut config = decode_config(body)?;
    check_kind(resource, &config)?;
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(Error::BadRequest(
            "metadata.managedFields must be nil".to_string(),
        ));
    }
    restrict_to_scope(&mut config, resource, options.subresource);

    let result = match apply_config(kind, live, &config, options, options.force) {
        Err(Error::Conflict(conflicts)) if options.field_manager == KUBECTL => {
            // kubectl moving from client-side to server-side apply: conflicts on fields whose
            // live value is still what the last client-side apply set are taken over.
            let allowed = live
                .map(|l| allowed_by_last_applied(kind, l))
                .unwrap_or_default();
            let remaining: Vec<Conflict> = conflicts
                .0
                .into_iter()
                .filter(|c| !allowed.contains(&c.path))
                .collect();
            if remaining.is_empty() {
                apply_config(kind, live, &config, options, true)
            } else {
                Err(Error::Conflict(Conflicts(remaining)))
            }
        }
        other => other,
    };
    let mut merged = result?;
    if options.field_manager == KUBECTL {
        update_last_applied(&mut merged, &config);
    }
    Ok(merged)
}

/// The manager name kubectl applies with, which Kubernetes treats specially for the
/// last-applied annotation.
const KUBECTL: &str = "kubectl";

/// The annotation client-side apply keeps its last configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn last_applied(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The fields of the last client-side applied configuration whose live values are unchanged
/// (`lastAppliedManager.allowedConflictsFromLastApplied`).
fn allowed_by_last_applied(kind: &dyn Kind, live: &Value) -> FieldSet {
    let resource = kind.info();
    let Some(text) = last_applied(live) else {
        return FieldSet::new();
    };
    let Ok(last) = serde_json::from_str::<Value>(text) else {
        return FieldSet::new();
    };
    if last.get("apiVersion").and_then(Value::as_str) != Some(&resource.api_version()) {
        return FieldSet::new();
    }
    let root = root_field(kind);
    let Ok(set) = to_field_set(&last, &root) else {
        return FieldSet::new();
    };
    let cmp = compare(&last, live, &root);
    set.difference(&cmp.modified)
        .difference(&cmp.added)
        .difference(&cmp.removed)
}

/// After an apply by kubectl, an existing last-applied annotation is rewritten to the applied
/// configuration so that a later client-side apply computes the right patch
/// (`lastAppliedUpdater`).
fn update_last_applied(obj: &mut Value, config: &Value) {
    if last_applied(obj).is_none() {
        return;
    }
    let mut cfg = config.clone();
    if let Some(ann) = cfg
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        ann.remove(LAST_APPLIED_ANNOTATION);
        if ann.is_empty()
            && let Some(meta) = cfg.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("annotations");
        }
    }
    if let Some(ann) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        ann.insert(LAST_APPLIED_ANNOTATION.into(), cfg.to_string().into());
    }
}

/// One apply of an already decoded and scoped configuration.
fn apply_config(
    kind: &dyn Kind,
    live: Option<&Value>,
    config: &Value,
    options: &Options<'_>,
    force: bool,
) -> Result<Value> {
    let resource = kind.info();
    let root = root_field(kind);
    let live_obj = live
        .map(|l| {
            let mut l = l.clone();
            if let Some(m) = l.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
            l
        })
        .unwrap_or_else(|| json!({}));
    let mut entries = match live {
        Some(l) => managed::decode(l)
            .map_err(|e| Error::Unprocessable(format!("failed to decode managed fields: {e}")))?,
        None => Vec::new(),
    };
    if entries.is_empty() && live.is_some() {
        // Fields set before anyone applied belong to a stand-in manager, so that applying
        // over them is a conflict like any other.
        let fields = scope(
            compare(&json!({}), &live_obj, &root).changed(),
            resource,
            options.subresource,
        );
        entries.push(Entry {
            manager: BEFORE_FIRST_APPLY.to_string(),
            operation: Operation::Update,
            api_version: api_version_of(&live_obj, resource),
            subresource: options.subresource.map(str::to_string),
            time: Some(format_time(options.now)),
            fields,
        });
    }

    let applied = to_field_set(config, &root).map_err(Error::Unprocessable)?;
    let applied = scope(applied, resource, options.subresource);
    let mut me = Entry {
        manager: options.field_manager.to_string(),
        operation: Operation::Apply,
        api_version: api_version_of(config, resource),
        subresource: options.subresource.map(str::to_string),
        time: Some(format_time(options.now)),
        fields: applied.clone(),
    };
    let previous = entries
        .iter()
        .position(|e| e.same_identity(&me))
        .map(|i| entries.remove(i));
    let mut others = entries;

    let mut merged = merge(&live_obj, config, &root);
    if let Some(prev) = &previous {
        let owned = others
            .iter()
            .fold(applied.clone(), |acc, e| acc.union(&e.fields));
        let to_remove = prev.fields.difference(&owned);
        for path in to_remove.paths() {
            if !owned.has_prefix(&path) {
                remove_at(&mut merged, &path, &root);
            }
        }
    }

    let cmp = compare(&live_obj, &merged, &root);
    let changed = scope(cmp.changed(), resource, options.subresource);
    let removed = scope(cmp.removed.clone(), resource, options.subresource);
    let mut conflicts = Vec::new();
    for e in &others {
        for path in e.fields.intersection(&changed).paths() {
            conflicts.push(Conflict {
                manager: e.display_name(),
                path,
            });
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(Error::Conflict(Conflicts(conflicts)));
    }
    for e in &mut others {
        e.fields.remove_all(&changed);
        e.fields.remove_all(&removed);
    }
    if merged == live_obj
        && let Some(prev) = &previous
    {
        // A no-op apply keeps the entry's time.
        me.time = prev.time.clone();
    }
    others.push(me);
    managed::encode(&mut merged, others);
    Ok(merged)
}

/// The applied object must be of the served kind (`invalid object type: apps/v1, Kind=X`).
fn check_kind(resource: &ResourceInfo, config: &Value) -> Result<()> {
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version == resource.api_version() && kind == resource.kind {
        return Ok(());
    }
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    Err(Error::BadRequest(format!(
        "invalid object type: {group}/{version}, Kind={kind}"
    )))
}

/// Through the main resource of a kind with a status subresource, `status` is not applied;
/// through `status`, only `status` is.
fn restrict_to_scope(config: &mut Value, resource: &ResourceInfo, subresource: Option<&str>) {
    let Some(obj) = config.as_object_mut() else {
        return;
    };
    match subresource {
        None if resource.subresource("status").is_some() => {
            obj.remove("status");
        }
        Some("status") => {
            let keep: Map<String, Value> = obj
                .iter()
                .filter(|(k, _)| matches!(k.as_str(), "apiVersion" | "kind" | "status"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let meta = obj.get("metadata").map(|m| {
                let mut out = Map::new();
                for k in ["name", "namespace"] {
                    if let Some(v) = m.get(k) {
                        out.insert(k.to_string(), v.clone());
                    }
                }
                Value::Object(out)
            });
            *obj = keep;
            if let Some(m) = meta {
                obj.insert("metadata".into(), m);
            }
        }
        _ => {}
    }
}

/// The fields the entries named `manager` own in an object's managed fields (all operations
/// and subresources together).
pub fn owned_by(obj: &Value, manager: &str) -> FieldSet {
    managed::decode(obj)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.manager == manager)
        .fold(FieldSet::new(), |acc, e| acc.union(&e.fields))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_meta::status::ApiError;

    fn deploy() -> &'static dyn Kind {
        &crate::builtin::deployment::Deployment
    }

    fn at(manager: &'static str, time: &str) -> Options<'static> {
        Options {
            field_manager: manager,
            force: false,
            subresource: None,
            now: time.parse().unwrap(),
        }
    }

    fn config(replicas: u32, image: &str, labels: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "namespace": "default", "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}
        }))
        .unwrap()
    }

    /// What the API server adds when it creates the object.
    fn created(mut obj: Value) -> Value {
        obj["metadata"]["uid"] = json!("u-1");
        obj["metadata"]["resourceVersion"] = json!("5");
        obj
    }

    #[test]
    fn first_apply_creates_with_an_apply_entry() {
        let out = server_side_apply(
            deploy(),
            None,
            &config(1, "nginx:1.27", json!({"app": "web"})),
            &at("kubectl", "2026-11-30T10:00:00Z"),
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 1);
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:selector": {},
                        "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}
                        }
                    }
                }
            }])
        );
    }

    #[test]
    fn reapply_changes_and_prunes_what_is_no_longer_applied() {
        let t0 = at("kubectl", "2026-11-30T10:00:00Z");
        let v1 = created(
            server_side_apply(
                deploy(),
                None,
                &config(1, "nginx:1.27", json!({"app": "web", "tier": "fe"})),
                &t0,
            )
            .unwrap(),
        );
        let t1 = at("kubectl", "2026-11-30T10:05:00Z");
        let v2 = server_side_apply(
            deploy(),
            Some(&v1),
            &config(3, "nginx:1.28", json!({"app": "web"})),
            &t1,
        )
        .unwrap();
        assert_eq!(v2["spec"]["replicas"], 3);
        assert_eq!(
            v2["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1.28"
        );
        assert_eq!(
            v2["metadata"]["labels"],
            json!({"app": "web"}),
            "tier pruned"
        );
        // Pruning every label drops the empty map, as Kubernetes' omitempty does.
        let no_labels = serde_json::to_vec(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}
        }))
        .unwrap();
        let bare = server_side_apply(deploy(), Some(&v2), &no_labels, &t1).unwrap();
        assert!(bare["metadata"].get("labels").is_none(), "{bare}");
        assert_eq!(v2["metadata"]["uid"], "u-1");
        assert_eq!(
            v2["metadata"]["managedFields"][0]["time"],
            "2026-11-30T10:05:00Z"
        );
        // Applying the same again changes nothing, not even the time.
        let v3 = server_side_apply(
            deploy(),
            Some(&v2),
            &config(3, "nginx:1.28", json!({"app": "web"})),
            &at("kubectl", "2026-11-30T11:00:00Z"),
        )
        .unwrap();
        assert_eq!(v3, v2);
    }

    #[test]
    fn conflicts_with_other_managers_unless_forced() {
        let v1 = created(
            server_side_apply(
                deploy(),
                None,
                &config(1, "nginx:1.27", json!({"app": "web"})),
                &at("kubectl", "2026-11-30T10:00:00Z"),
            )
            .unwrap(),
        );
        // `kubectl scale` (a merge patch on /scale, recorded as an Update) takes replicas.
        let mut scaled = v1.clone();
        scaled["spec"]["replicas"] = json!(5);
        let v2 = managed::record_update(
            deploy(),
            Some(&v1),
            scaled,
            &at("kubectl-scale", "2026-11-30T10:01:00Z"),
        );
        assert_eq!(
            ssa_owned(&v2, "kubectl-scale"),
            json!({"f:spec": {"f:replicas": {}}})
        );

        let e = server_side_apply(
            deploy(),
            Some(&v2),
            &config(2, "nginx:1.27", json!({"app": "web"})),
            &at("kubectl", "2026-11-30T10:02:00Z"),
        )
        .unwrap_err();
        let status = ApiError::from(&e);
        assert_eq!(status.code(), 409);
        assert_eq!(
            status.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
        );
        let cause = &status.details().unwrap().causes.as_ref().unwrap()[0];
        assert_eq!(cause.reason.as_deref(), Some("FieldManagerConflict"));
        assert_eq!(cause.field.as_deref(), Some(".spec.replicas"));
        assert_eq!(
            cause.message.as_deref(),
            Some("conflict with \"kubectl-scale\" using apps/v1")
        );

        // Applying the value the other manager set is not a conflict: ownership is shared.
        let shared = server_side_apply(
            deploy(),
            Some(&v2),
            &config(5, "nginx:1.27", json!({"app": "web"})),
            &at("kubectl", "2026-11-30T10:02:00Z"),
        )
        .unwrap();
        assert_eq!(
            ssa_owned(&shared, "kubectl-scale"),
            json!({"f:spec": {"f:replicas": {}}})
        );

        // With force the applier takes the field over.
        let mut forced = at("kubectl", "2026-11-30T10:03:00Z");
        forced.force = true;
        let v3 = server_side_apply(
            deploy(),
            Some(&v2),
            &config(2, "nginx:1.27", json!({"app": "web"})),
            &forced,
        )
        .unwrap();
        assert_eq!(v3["spec"]["replicas"], 2);
        assert_eq!(ssa_owned(&v3, "kubectl-scale"), json!({}));
        assert_eq!(v3["metadata"]["managedFields"].as_array().unwrap().len(), 1);
    }

    fn ssa_owned(obj: &Value, manager: &str) -> Value {
        owned_by(obj, manager).to_fields_v1()
    }

    #[test]
    fn several_conflicts_are_listed_per_manager() {
        let c = Conflicts(vec![
            Conflict {
                manager: "\"b\"".into(),
                path: vec![PathElement::Field("x".into())],
            },
            Conflict {
                manager: "\"a\" using v1".into(),
                path: vec![PathElement::Field("y".into())],
            },
            Conflict {
                manager: "\"b\"".into(),
                path: vec![PathElement::Field("z".into())],
            },
        ]);
        assert_eq!(
            c.message(),
            "Apply failed with 3 conflicts: conflicts with \"a\" using v1:\n- .y\nconflicts with \"b\":\n- .x\n- .z"
        );
    }

    #[test]
    fn fields_of_other_managers_survive_pruning() {
        let v1 = created(
            server_side_apply(
                deploy(),
                None,
                &config(1, "nginx", json!({"app": "web", "tier": "fe"})),
                &at("a", "2026-11-30T10:00:00Z"),
            )
            .unwrap(),
        );
        let v2 = server_side_apply(
            deploy(),
            Some(&v1),
            &config(1, "nginx", json!({"app": "web", "tier": "fe"})),
            &at("b", "2026-11-30T10:01:00Z"),
        )
        .unwrap();
        // `a` stops applying `tier`, but `b` still applies it: it stays.
        let v3 = server_side_apply(
            deploy(),
            Some(&v2),
            &config(1, "nginx", json!({"app": "web"})),
            &at("a", "2026-11-30T10:02:00Z"),
        )
        .unwrap();
        assert_eq!(
            v3["metadata"]["labels"],
            json!({"app": "web", "tier": "fe"})
        );
    }

    #[test]
    fn applying_over_an_unmanaged_object_conflicts_with_before_first_apply() {
        let live = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "namespace": "default", "uid": "u"},
            "spec": {"replicas": 4}
        });
        let e = server_side_apply(
            deploy(),
            Some(&live),
            &config(1, "nginx", json!({"app": "web"})),
            &at("kubectl", "2026-11-30T10:00:00Z"),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas"
        );
    }

    #[test]
    fn list_items_merge_by_key_and_keep_live_only_items() {
        let live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "side", "image": "s"}, {"name": "web", "image": "old", "args": ["x"]}
        ]}}}});
        let cfg = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "new"}, {"name": "extra", "image": "e"}
        ]}}}});
        let merged = merge(&live, &cfg, &root_field(deploy()));
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"],
            json!([
                {"name": "side", "image": "s"},
                {"name": "web", "image": "new", "args": ["x"]},
                {"name": "extra", "image": "e"}
            ])
        );
    }

    fn csa_config(image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}
        })
    }

    /// The object `kubectl apply` (client-side) creates: the config plus its last-applied
    /// annotation.
    fn csa_created(image: &str) -> Value {
        let cfg = csa_config(image);
        let mut obj = cfg.clone();
        obj["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: cfg.to_string()});
        obj
    }

    #[test]
    fn kubectl_migration_from_client_side_apply_via_managed_fields() {
        // 1. `kubectl apply` (client-side) created the object.
        let created_obj = created(managed::record_update(
            deploy(),
            None,
            csa_created("nginx:1.27"),
            &at("kubectl-client-side-apply", "2026-11-30T10:00:00Z"),
        ));
        let entries = managed::decode(&created_obj).unwrap();
        assert_eq!(entries[0].manager, "kubectl-client-side-apply");
        // 2. `kubectl apply --server-side` first rewrites the managers with a JSON patch.
        let mut upgraded = created_obj["metadata"]["managedFields"].clone();
        upgraded[0]["manager"] = json!("kubectl");
        upgraded[0]["operation"] = json!("Apply");
        let body = serde_json::to_vec(&json!([
            {"op": "replace", "path": "/metadata/managedFields", "value": upgraded},
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}
        ]))
        .unwrap();
        let migrated = crate::patch::apply(
            deploy(),
            &created_obj,
            PatchType::Json,
            &body,
            &at("kubectl", "2026-11-30T10:01:00Z"),
        )
        .unwrap();
        let entries = managed::decode(&migrated).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            (entries[0].manager.as_str(), entries[0].operation),
            ("kubectl", Operation::Apply)
        );
        // 3. The server-side apply then owns what client-side apply owned: no conflict.
        let body = serde_json::to_vec(&csa_config("nginx:1.28")).unwrap();
        let out = server_side_apply(
            deploy(),
            Some(&migrated),
            &body,
            &at("kubectl", "2026-11-30T10:02:00Z"),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1.28"
        );
        // kubectl now owns the annotation client-side apply set and no longer applies it, so
        // it is pruned like any other field that stopped being applied.
        assert!(out["metadata"].get("annotations").is_none(), "{out}");
    }

    #[test]
    fn kubectl_migration_from_the_last_applied_annotation_alone() {
        // An untracked object that only carries the last-applied annotation.
        let live = created(csa_created("nginx:1.27"));
        let last = live["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
            .as_str()
            .unwrap()
            .to_string();
        // kubectl first applies the last-applied configuration as `kubectl-last-applied`.
        let step1 = server_side_apply(
            deploy(),
            Some(&live),
            last.as_bytes(),
            &at("kubectl-last-applied", "2026-11-30T10:00:00Z"),
        )
        .unwrap();
        // Then applies the new configuration as `kubectl`: the image conflicts with the
        // other two managers, but its live value is the last-applied one, so it is taken.
        let out = server_side_apply(
            deploy(),
            Some(&step1),
            &serde_json::to_vec(&csa_config("nginx:1.28")).unwrap(),
            &at("kubectl", "2026-11-30T10:01:00Z"),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1.28"
        );
        // The annotation (owned by before-first-apply) now holds the applied configuration.
        let last: Value = serde_json::from_str(
            out["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(last, csa_config("nginx:1.28"));
        // A field someone changed since the last client-side apply still conflicts.
        let mut drifted = step1.clone();
        drifted["spec"]["replicas"] = json!(7);
        let drifted = managed::record_update(
            deploy(),
            Some(&step1),
            drifted,
            &at("kubectl-scale", "2026-11-30T10:02:00Z"),
        );
        let e = server_side_apply(
            deploy(),
            Some(&drifted),
            &serde_json::to_vec(&csa_config("nginx:1.28")).unwrap(),
            &at("kubectl", "2026-11-30T10:03:00Z"),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
        );
    }

    fn random_config(rng: &mut crate::patch::testgen::Rng) -> Value {
        let mut labels = Map::new();
        for k in ["a", "b", "c"] {
            if rng.below(2) == 0 {
                labels.insert(k.into(), json!(*rng.pick(&["1", "2"])));
            }
        }
        let mut containers = Vec::new();
        for n in ["web", "side"] {
            if rng.below(3) == 0 {
                continue;
            }
            let mut c = json!({"name": n, "image": *rng.pick(&["i1", "i2"])});
            if rng.below(2) == 0 {
                c["env"] = json!([{"name": "E", "value": *rng.pick(&["x", "y"])}]);
            }
            containers.push(c);
        }
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "namespace": "default", "labels": labels},
            "spec": {"replicas": rng.below(4),
                     "template": {"spec": {"containers": containers}}}
        })
    }

    #[test]
    fn apply_is_idempotent_owns_what_it_applies_and_prunes_the_rest() {
        let mut rng = crate::patch::testgen::Rng(0x5eed_0000_0000_0003);
        for case in 0..300 {
            let c1 = random_config(&mut rng);
            let c2 = random_config(&mut rng);
            let b1 = serde_json::to_vec(&c1).unwrap();
            let b2 = serde_json::to_vec(&c2).unwrap();
            let t = at("kubectl", "2026-11-30T10:00:00Z");
            let first = created(server_side_apply(deploy(), None, &b1, &t).unwrap());
            let again = server_side_apply(
                deploy(),
                Some(&first),
                &b1,
                &at("kubectl", "2026-11-30T11:00:00Z"),
            )
            .unwrap();
            assert_eq!(again, first, "case {case}: not idempotent");
            let applied = scope(
                to_field_set(&c1, &root_field(deploy())).unwrap(),
                deploy().info(),
                None,
            );
            assert_eq!(owned_by(&first, "kubectl"), applied, "case {case}");

            let second = server_side_apply(deploy(), Some(&first), &b2, &t).unwrap();
            // The object now carries exactly the second configuration's labels and
            // containers: what only the first applied is gone.
            assert_eq!(
                second["metadata"]
                    .get("labels")
                    .cloned()
                    .unwrap_or(json!({})),
                c2["metadata"]["labels"],
                "case {case}"
            );
            let names = |v: &Value| -> Vec<String> {
                v.pointer("/spec/template/spec/containers")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|c| c["name"].as_str().unwrap().to_string())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            assert_eq!(names(&second), names(&c2), "case {case}");
            assert_eq!(second["spec"]["replicas"], c2["spec"]["replicas"]);
        }
    }

    #[test]
    fn bad_bodies() {
        let o = at("kubectl", "2026-11-30T10:00:00Z");
        let e = server_side_apply(deploy(), None, b"- a\n- b\n", &o).unwrap_err();
        assert_eq!(e.code(), 400);
        let e = server_side_apply(
            deploy(),
            None,
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}"#,
            &o,
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::BadRequest("invalid object type: /v1, Kind=Pod".into())
        );
        let e = server_side_apply(
            deploy(),
            None,
            br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x","managedFields":[]}}"#,
            &o,
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::BadRequest("metadata.managedFields must be nil".into())
        );
        let e = server_side_apply(
            deploy(),
            None,
            br#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}}"#,
            &o,
        )
        .unwrap_err();
        assert_eq!(e.code(), 422);
    }

    #[test]
    fn yaml_bodies_are_accepted() {
        let yaml =
            b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d1\nspec:\n  replicas: 2\n";
        let out = server_side_apply(deploy(), None, yaml, &at("kubectl", "2026-11-30T10:00:00Z"))
            .unwrap();
        assert_eq!(out["spec"]["replicas"], 2);
    }

    #[test]
    fn status_is_ignored_through_the_main_resource() {
        let pods = &*crate::builtin::by_kind("", "Pod");
        let body = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
                        "spec":{"containers":[{"name":"c","image":"i"}]},"status":{"phase":"Running"}}"#;
        let out =
            server_side_apply(pods, None, body, &at("kubectl", "2026-11-30T10:00:00Z")).unwrap();
        assert!(out.get("status").is_none());
        let mut o = at("kubelet", "2026-11-30T10:00:00Z");
        o.subresource = Some("status");
        let live = created(out);
        let out = server_side_apply(pods, Some(&live), body, &o).unwrap();
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(
            ssa_owned(&out, "kubelet"),
            json!({"f:status": {"f:phase": {}}})
        );
    }
}

//! API objects in the log's history: resolving kind names, storage keys back to objects, what an
//! operation was (created, updated, status updated, deleted), who made it, and noise-free views
//! for diffs.

use serde_json::Value;
use skiff_kinds::Snapshot;
use skiff_meta::ResourceInfo;
use skiff_store::KeyValue;

use crate::registry::set_resource_version;

/// What a write did to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// It did not exist before.
    Created,
    /// Its spec, metadata or anything but its status changed.
    Updated,
    /// Only its status changed.
    #[serde(rename = "status updated")]
    StatusUpdated,
    /// It was removed.
    Deleted,
}

impl Operation {
    /// As printed: `created`, `updated`, `status updated`, `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Created => "created",
            Operation::Updated => "updated",
            Operation::StatusUpdated => "status updated",
            Operation::Deleted => "deleted",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resource a user means by `name` among `kinds`, as kubectl resolves it: the plural,
/// singular or kind (any case), a short name, optionally qualified by group
/// (`deployments.apps`, `deploy`, `widgets.example.com`).
pub fn resolve_kind(kinds: &Snapshot, name: &str) -> Option<&'static ResourceInfo> {
    let lower = name.to_ascii_lowercase();
    let (base, group) = match lower.split_once('.') {
        Some((base, group)) => (base.to_string(), Some(group.to_string())),
        None => (lower.clone(), None),
    };
    kinds.infos().find(|r| {
        let names = base == r.plural
            || base == r.singular
            || base == r.kind.to_ascii_lowercase()
            || r.short_names.contains(&base.as_str());
        let group_ok = match &group {
            None => true,
            Some(g) => *g == r.group || (g == "core" && r.group.is_empty()),
        };
        names && group_ok
    })
}

/// The object a storage key names: its resource (in the version it is stored in), namespace and
/// name. `None` for keys that are not API objects of a resource among `kinds`.
pub fn parse_key(
    kinds: &Snapshot,
    key: &[u8],
) -> Option<(&'static ResourceInfo, Option<String>, String)> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix("/registry/")?;
    let mut parts = rest.split('/');
    let group = parts.next()?;
    let plural = parts.next()?;
    let stored_here = |k: &&std::sync::Arc<dyn skiff_kinds::Kind>| {
        let r = k.info();
        r.storage_group() == group && r.plural == plural
    };
    let info = kinds
        .kinds()
        .iter()
        .filter(stored_here)
        .find(|k| !skiff_kinds::converts(&***k))
        .or_else(|| kinds.kinds().iter().find(stored_here))?
        .info();
    let first = parts.next()?.to_string();
    let second = parts.next();
    if parts.next().is_some() {
        return None;
    }
    match (info.namespaced, second) {
        (true, Some(name)) => Some((info, Some(first), name.to_string())),
        (false, None) => Some((info, None, first)),
        _ => None,
    }
}

/// A stored version as the API serves it: the JSON value with `metadata.resourceVersion` set to
/// its revision. `None` if it does not decode.
pub fn decode(kv: &KeyValue) -> Option<Value> {
    let mut object: Value = serde_json::from_slice(&kv.value).ok()?;
    set_resource_version(&mut object, kv.mod_revision);
    Some(object)
}

/// The versions an event of the log goes between: before (absent for a create, or when the read
/// did not give it) and after (absent for a delete), decoded.
pub fn versions(event: &skiff_store::Event) -> (Option<Value>, Option<Value>) {
    let before = event.prev_kv.as_ref().and_then(decode);
    let after = match event.kind {
        skiff_store::EventKind::Put => decode(&event.kv),
        skiff_store::EventKind::Delete => None,
    };
    (before, after)
}

/// Whether an event replaced an earlier version of its key (an update or a delete), which its
/// change then needs to be read against.
pub fn replaces(event: &skiff_store::Event) -> bool {
    event.kind == skiff_store::EventKind::Delete || event.kv.version > 1
}

/// The object without what changes on every write and says nothing about it:
/// `metadata.managedFields` and `metadata.resourceVersion`.
pub fn without_noise(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    object
}

/// Metadata fields that change on every write and say nothing about it.
const NOISE: [&str; 2] = ["managedFields", "resourceVersion"];

/// The names of `object`'s fields that differ from `other`'s (absent and present differ), in
/// no order, each once; keys in `skip` are left out. Reads both in place: no copies.
fn differing<'a>(
    object: Option<&'a Value>,
    other: Option<&'a Value>,
    skip: &'a [&str],
) -> impl Iterator<Item = &'a str> {
    let map = |v: Option<&'a Value>| v.and_then(Value::as_object);
    let (x, y) = (map(object), map(other));
    let keys_x = x.into_iter().flat_map(|m| m.keys());
    // Keys of `other` that `object` lacks, so that each differing key comes once.
    let keys_y = y
        .into_iter()
        .flat_map(|m| m.keys())
        .filter(move |k| x.is_none_or(|x| !x.contains_key(*k)));
    keys_x
        .chain(keys_y)
        .map(String::as_str)
        .filter(move |k| !skip.contains(k))
        .filter(move |k| x.and_then(|x| x.get(*k)) != y.and_then(|y| y.get(*k)))
}

/// What the write from `before` to `after` (`None`: absent) did.
pub fn classify(before: Option<&Value>, after: Option<&Value>) -> Operation {
    match (before, after) {
        (_, None) => Operation::Deleted,
        (None, Some(_)) => Operation::Created,
        (Some(b), Some(a)) => {
            // Anything but the status and the noise in the metadata is an update.
            let changed = differing(Some(b), Some(a), &["status", "metadata"])
                .next()
                .is_some()
                || differing(b.get("metadata"), a.get("metadata"), &NOISE)
                    .next()
                    .is_some();
            if changed {
                Operation::Updated
            } else {
                Operation::StatusUpdated
            }
        }
    }
}

/// The field manager that made the write from `before` to `after`, from `managedFields`: the
/// entry that is new or changed (the newest by time if several are). `None` when no entry changed
/// (the writer did not record itself) or the object is gone.
pub fn manager(before: Option<&Value>, after: Option<&Value>) -> Option<String> {
    fn entries(o: Option<&Value>) -> &[Value] {
        o.and_then(|o| o.pointer("/metadata/managedFields"))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
    fn time(e: &Value) -> &str {
        e.get("time").and_then(Value::as_str).unwrap_or("")
    }
    let old = entries(before);
    entries(after)
        .iter()
        .filter(|e| !old.contains(e))
        .max_by(|a, b| time(a).cmp(time(b)))
        .and_then(|e| e.get("manager").and_then(Value::as_str).map(str::to_string))
}

/// The top-level fields that differ between `before` and `after` (`metadata` broken down one
/// level: `metadata.labels`), leaving out noise. Sorted.
pub fn changed_fields(before: Option<&Value>, after: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = differing(before, after, &["apiVersion", "kind", "metadata"])
        .map(str::to_string)
        .collect();
    fn metadata(o: Option<&Value>) -> Option<&Value> {
        o.and_then(|o| o.get("metadata"))
    }
    out.extend(
        differing(metadata(before), metadata(after), &NOISE).map(|sub| format!("metadata.{sub}")),
    );
    out.sort();
    out
}

/// The object as YAML, for display and diffs.
pub fn to_yaml(object: &Value) -> String {
    serde_saphyr::to_string(object).unwrap_or_else(|e| format!("# not renderable as YAML: {e}\n"))
}

#[cfg(test)]
mod tests {
    fn builtin() -> std::sync::Arc<skiff_kinds::Snapshot> {
        skiff_kinds::Kinds::builtin().snapshot()
    }

    use super::*;
    use serde_json::json;
    use skiff_store::Revision;

    #[test]
    fn kinds_resolve_as_kubectl_resolves_them() {
        for name in [
            "deployments",
            "deployment",
            "Deployment",
            "deploy",
            "deployments.apps",
        ] {
            assert_eq!(
                resolve_kind(&builtin(), name).map(|r| r.kind),
                Some("Deployment"),
                "{name}"
            );
        }
        assert_eq!(
            resolve_kind(&builtin(), "cm").map(|r| r.kind),
            Some("ConfigMap")
        );
        assert_eq!(
            resolve_kind(&builtin(), "po").map(|r| r.plural),
            Some("pods")
        );
        assert_eq!(
            resolve_kind(&builtin(), "pods.core").map(|r| r.plural),
            Some("pods")
        );
        assert_eq!(resolve_kind(&builtin(), "deployments.batch"), None);
        assert_eq!(resolve_kind(&builtin(), "widgets"), None);
    }

    #[test]
    fn storage_keys_name_their_objects() {
        let (info, ns, name) =
            parse_key(&builtin(), b"/registry/apps/deployments/default/web").unwrap();
        assert_eq!(
            (info.kind, ns.as_deref(), name.as_str()),
            ("Deployment", Some("default"), "web")
        );
        let (info, ns, name) =
            parse_key(&builtin(), b"/registry/core/namespaces/kube-system").unwrap();
        assert_eq!(
            (info.kind, ns, name.as_str()),
            ("Namespace", None, "kube-system")
        );
        assert!(parse_key(&builtin(), b"/registry/core/pods/default").is_none());
        assert!(parse_key(&builtin(), b"/registry/core/widgets/default/x").is_none());
        assert!(parse_key(&builtin(), b"/something/else").is_none());
    }

    fn cm(data: &str, rv: &str, status: Option<&str>, managers: Value) -> Value {
        let mut o = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default", "resourceVersion": rv, "managedFields": managers},
            "data": {"k": data},
        });
        if let Some(s) = status {
            o["status"] = json!({"phase": s});
        }
        o
    }

    #[test]
    fn operations_are_classified_by_what_changed() {
        let a = cm("1", "5", Some("A"), json!([]));
        let b = cm("1", "6", Some("B"), json!([]));
        let c = cm("2", "7", Some("B"), json!([]));
        assert_eq!(classify(None, Some(&a)), Operation::Created);
        assert_eq!(classify(Some(&a), Some(&b)), Operation::StatusUpdated);
        assert_eq!(classify(Some(&b), Some(&c)), Operation::Updated);
        assert_eq!(classify(Some(&c), None), Operation::Deleted);
        // Labels are an update; managed fields and the resourceVersion alone are noise.
        let mut labelled = c.clone();
        labelled["metadata"]["labels"] = json!({"app": "web"});
        assert_eq!(classify(Some(&c), Some(&labelled)), Operation::Updated);
        let managed = cm("2", "8", Some("B"), json!([{"manager": "x"}]));
        assert_eq!(classify(Some(&c), Some(&managed)), Operation::StatusUpdated);
        let mut bare = c.clone();
        bare.as_object_mut().unwrap().remove("status");
        assert_eq!(classify(Some(&c), Some(&bare)), Operation::StatusUpdated);
        assert_eq!(Operation::StatusUpdated.to_string(), "status updated");
    }

    #[test]
    fn the_manager_is_the_managed_fields_entry_that_changed() {
        let kubectl = json!({"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-01-01T00:00:00Z"});
        let scaler = json!({"manager": "kubectl", "operation": "Update", "subresource": "scale", "time": "2026-01-01T00:01:00Z"});
        let before = cm("1", "5", None, json!([kubectl]));
        let after = cm("2", "6", None, json!([kubectl, scaler]));
        assert_eq!(
            manager(None, Some(&before)).as_deref(),
            Some("kubectl-client-side-apply")
        );
        assert_eq!(
            manager(Some(&before), Some(&after)).as_deref(),
            Some("kubectl")
        );
        assert_eq!(manager(Some(&after), Some(&after)), None);
        assert_eq!(manager(Some(&after), None), None);
    }

    #[test]
    fn changed_fields_ignore_noise() {
        let a = cm("1", "5", None, json!([]));
        let mut b = cm("2", "9", None, json!([{"manager": "x"}]));
        b["metadata"]["labels"] = json!({"app": "web"});
        assert_eq!(
            changed_fields(Some(&a), Some(&b)),
            vec!["data", "metadata.labels"]
        );
        assert_eq!(changed_fields(Some(&a), Some(&a)), Vec::<String>::new());
        assert_eq!(
            changed_fields(None, Some(&a)),
            vec!["data", "metadata.name", "metadata.namespace"]
        );
    }

    #[test]
    fn decoded_versions_carry_their_revision() {
        let kv = KeyValue {
            key: b"/registry/core/configmaps/default/c".to_vec(),
            value: br#"{"metadata":{"name":"c"}}"#.to_vec(),
            create_revision: Revision(3),
            mod_revision: Revision(8),
            version: 2,
            lease: None,
        };
        assert_eq!(decode(&kv).unwrap()["metadata"]["resourceVersion"], "8");
        let noise = without_noise(&decode(&kv).unwrap());
        assert_eq!(noise, json!({"metadata": {"name": "c"}}));
    }
}

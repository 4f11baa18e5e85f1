//! Per-kind write rules, after Kubernetes' registry strategies: what a create resets, which part of
//! an object the main resource and the `status` subresource may change, when `generation` moves,
//! and how deletion proceeds (graceful pods, finalizers, terminating namespaces).

use serde_json::{Map, Value, json};
use skiff_meta::ResourceInfo;

use crate::Kind;

/// The current time as Kubernetes writes `metav1.Time`: RFC 3339, whole seconds, UTC.
pub fn now() -> String {
    timestamp_after(0)
}

/// The time `seconds` from now, as [`now`] writes it.
pub fn timestamp_after(seconds: i64) -> String {
    let ts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    ts.round(jiff::Unit::Second)
        .unwrap_or(ts)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Whether the kind keeps `status` apart from the rest (has a `status` subresource).
pub fn has_status(info: &ResourceInfo) -> bool {
    info.subresource("status").is_some()
}

fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// Characters Kubernetes uses for `generateName` suffixes (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A `generateName` suffix.
pub fn random_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect()
}

/// Fills in what the server owns on create: uid, creationTimestamp, generation; resets what a
/// client may not set (deletion fields, and for kinds with a status subresource, the status);
/// then the kind's own create-time fills.
pub fn prepare_for_create(kind: &dyn Kind, object: &mut Value) {
    let info = kind.info();
    let strategy = kind.strategy();
    {
        let meta = meta_mut(object);
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("resourceVersion");
        meta.remove("selfLink");
        if strategy.tracks_generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
    }
    if has_status(info)
        && !strategy.client_writes_status
        && let Some(map) = object.as_object_mut()
    {
        map.remove("status");
    }
    kind.prepare_for_create(object);
}

/// Carries over what an update of the main resource may not change: identity, deletion state,
/// and (for kinds with a status subresource) the status. Moves `generation` when the spec changed.
pub fn prepare_for_update(kind: &dyn Kind, new: &mut Value, old: &Value) {
    let info = kind.info();
    let strategy = kind.strategy();
    let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
    {
        let meta = meta_mut(new);
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
    }
    if has_status(info) {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            // A kind whose clients write status keeps theirs until the stored object has one.
            None if strategy.client_writes_status => {}
            None => {
                if let Some(map) = new.as_object_mut() {
                    map.remove("status");
                }
            }
        }
    }
    if strategy.tracks_generation && spec_of(new) != spec_of(old) {
        let generation = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(new).insert("generation".into(), json!(generation + 1));
    }
    kind.prepare_for_update(new, old);
}

/// For a write to the `status` subresource: everything but the status comes from the stored
/// object.
pub fn prepare_for_status_update(new: &mut Value, old: &Value) {
    let status = new.get("status").cloned();
    let mut merged = old.clone();
    match status {
        Some(status) => merged["status"] = status,
        None => {
            if let Some(map) = merged.as_object_mut() {
                map.remove("status");
            }
        }
    }
    // Metadata labels and annotations are the main resource's business, but Kubernetes keeps a
    // status writer's resourceVersion precondition; the caller has checked it already.
    *new = merged;
}

/// For a write through a subresource that changes part of the kind's own object
/// ([`Kind::subresource_fields`]): the `fields` (JSON pointers) come from `new`, everything else
/// from the stored object, as Kubernetes' `ephemeralcontainers` strategy keeps only
/// `spec.ephemeralContainers` of what it is sent. `generation` moves when the spec changed.
pub fn prepare_for_subresource_update(
    kind: &dyn Kind,
    fields: &[&str],
    new: &mut Value,
    old: &Value,
) {
    let mut merged = old.clone();
    for pointer in fields {
        let value = new.pointer(pointer).cloned();
        set_pointer(&mut merged, pointer, value);
    }
    if kind.strategy().tracks_generation && spec_of(&merged) != spec_of(old) {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut merged).insert("generation".into(), json!(generation + 1));
    }
    *new = merged;
}

/// Sets (or with `None` removes) the value at a JSON pointer of object keys, making the
/// objects on the way.
fn set_pointer(object: &mut Value, pointer: &str, value: Option<Value>) {
    let keys: Vec<&str> = pointer.split('/').skip(1).collect();
    let Some((last, parents)) = keys.split_last() else {
        return;
    };
    let mut at = object;
    for key in parents {
        if !at.get(*key).is_some_and(Value::is_object) {
            if value.is_none() {
                return;
            }
            at[*key] = json!({});
        }
        at = &mut at[*key];
    }
    match (value, at.as_object_mut()) {
        (Some(v), Some(map)) => {
            map.insert(last.to_string(), v);
        }
        (None, Some(map)) => {
            map.remove(*last);
        }
        _ => {}
    }
}

fn spec_of(object: &Value) -> Option<&Value> {
    object.get("spec")
}

/// The pod's QoS class from its containers' requests and limits.
pub fn pod_qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|f| pod.pointer(&format!("/spec/{f}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for resource in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(resource));
            let request = requests.and_then(|r| r.get(resource)).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// What a delete request does to an object.
#[derive(Debug, PartialEq)]
pub enum Deletion {
    /// Remove it from the log now.
    Now,
    /// Mark it (deletionTimestamp and friends) and keep it until its finalizers are gone or the
    /// kubelet confirms; the object as it should be written.
    Mark(Value),
    /// It is already being deleted and the request changes nothing.
    AlreadyMarked,
}

/// Options of a delete that matter here.
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace_period: Option<i64>,
    /// `propagationPolicy`: Orphan, Background or Foreground.
    pub propagation: Option<String>,
}

fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Decides what deleting `object` does, as Kubernetes' `BeforeDelete` and graceful deletion do.
pub fn deletion(info: &ResourceInfo, object: &Value, options: &DeleteOptions) -> Deletion {
    let mut marked = object.clone();
    let already = object.pointer("/metadata/deletionTimestamp").is_some();
    let mut add_finalizers = Vec::new();
    match options.propagation.as_deref() {
        Some("Orphan") => add_finalizers.push("orphan"),
        Some("Foreground") => add_finalizers.push("foregroundDeletion"),
        _ => {}
    }
    let mut fin = finalizers(object);
    for f in add_finalizers {
        if !fin.iter().any(|x| x == f) {
            fin.push(f.to_string());
        }
    }

    if info.kind == "Namespace" {
        if already {
            return Deletion::AlreadyMarked;
        }
        let spec_finalizers = object
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !spec_finalizers && fin.is_empty() {
            return Deletion::Now;
        }
        let meta = meta_mut(&mut marked);
        meta.insert("deletionTimestamp".into(), json!(now()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        if !fin.is_empty() {
            meta.insert("finalizers".into(), json!(fin));
        }
        marked["status"]["phase"] = json!("Terminating");
        return Deletion::Mark(marked);
    }

    let grace = if info.kind == "Pod" {
        pod_grace_period(object, options)
    } else {
        0
    };
    if already {
        // A second delete may only shorten a pending grace period.
        let current = object
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if grace < current {
            let meta = meta_mut(&mut marked);
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            meta.insert("deletionTimestamp".into(), json!(timestamp_after(grace)));
            if grace == 0 && fin.is_empty() {
                return Deletion::Now;
            }
            return Deletion::Mark(marked);
        }
        return Deletion::AlreadyMarked;
    }
    if fin.is_empty() && grace == 0 {
        return Deletion::Now;
    }
    let meta = meta_mut(&mut marked);
    meta.insert("deletionTimestamp".into(), json!(timestamp_after(grace)));
    meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
    if !fin.is_empty() {
        meta.insert("finalizers".into(), json!(fin));
    }
    Deletion::Mark(marked)
}

/// The grace period a pod delete gets: none for a pod on no node or one that has finished, else
/// the request's or the pod's own `terminationGracePeriodSeconds` (30 by default).
fn pod_grace_period(pod: &Value, options: &DeleteOptions) -> i64 {
    let on_node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !on_node || finished {
        return 0;
    }
    options
        .grace_period
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30)
        .max(0)
}

/// Whether a marked object may now leave the log: no finalizers and no grace period left to wait
/// for (a pod's kubelet confirms by deleting with grace 0).
pub fn ready_to_remove(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some()
        && finalizers(object).is_empty()
        && object
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
        && object
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(kind: &str) -> std::sync::Arc<dyn Kind> {
        crate::builtin::all()
            .iter()
            .find(|k| k.info().kind == kind)
            .unwrap()
            .clone()
    }

    #[test]
    fn create_resets_server_fields() {
        let mut deploy = json!({
            "metadata": {"name": "d", "uid": "mine", "resourceVersion": "7",
                          "deletionTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"replicas": 1},
            "status": {"replicas": 9}
        });
        prepare_for_create(&*info("Deployment"), &mut deploy);
        assert_ne!(deploy["metadata"]["uid"], "mine");
        assert_eq!(deploy["metadata"]["generation"], 1);
        assert!(deploy["metadata"].get("deletionTimestamp").is_none());
        assert!(deploy.get("status").is_none());
    }

    #[test]
    fn spec_change_bumps_generation_and_keeps_status() {
        let old = json!({"metadata": {"name": "d", "uid": "u", "generation": 3},
                         "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut new = json!({"metadata": {"name": "d"}, "spec": {"replicas": 2},
                             "status": {"replicas": 99}});
        prepare_for_update(&*info("Deployment"), &mut new, &old);
        assert_eq!(new["metadata"]["generation"], 4);
        assert_eq!(new["metadata"]["uid"], "u");
        assert_eq!(new["status"]["replicas"], 1);

        let mut same = json!({"metadata": {"name": "d", "labels": {"a": "b"}},
                              "spec": {"replicas": 1}});
        prepare_for_update(&*info("Deployment"), &mut same, &old);
        assert_eq!(same["metadata"]["generation"], 3);
    }

    #[test]
    fn status_update_takes_only_status() {
        let old = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a"},
                         "status": {"phase": "Pending"}});
        let mut new = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "b"},
                             "status": {"phase": "Running"}});
        prepare_for_status_update(&mut new, &old);
        assert_eq!(new["spec"]["nodeName"], "a");
        assert_eq!(new["status"]["phase"], "Running");
    }

    #[test]
    fn ephemeral_containers_subresource_takes_only_its_field() {
        let pod = info("Pod");
        let fields = pod.subresource_fields("ephemeralcontainers").unwrap();
        assert!(pod.subresource_fields("status").is_none());
        let old = json!({"metadata": {"name": "p", "generation": 2, "labels": {"a": "b"}},
                         "spec": {"nodeName": "a", "containers": [{"name": "c"}]},
                         "status": {"phase": "Running"}});
        let mut new = json!({"metadata": {"name": "p", "labels": {"x": "y"}},
                             "spec": {"nodeName": "b", "containers": [],
                                      "ephemeralContainers": [{"name": "dbg"}]},
                             "status": {"phase": "Failed"}});
        prepare_for_subresource_update(&*pod, fields, &mut new, &old);
        assert_eq!(new["spec"]["nodeName"], "a");
        assert_eq!(new["spec"]["containers"], json!([{"name": "c"}]));
        assert_eq!(new["spec"]["ephemeralContainers"], json!([{"name": "dbg"}]));
        assert_eq!(new["status"]["phase"], "Running");
        assert_eq!(new["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(new["metadata"]["generation"], 3);
    }

    #[test]
    fn pods_on_a_node_delete_gracefully() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n"},
                         "status": {"phase": "Running"}});
        let Deletion::Mark(marked) = deletion(info("Pod").info(), &pod, &DeleteOptions::default())
        else {
            panic!("a running pod on a node is deleted gracefully")
        };
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
        let forced = DeleteOptions {
            grace_period: Some(0),
            ..Default::default()
        };
        assert_eq!(deletion(info("Pod").info(), &pod, &forced), Deletion::Now);
        assert_eq!(
            deletion(info("Pod").info(), &marked, &forced),
            Deletion::Now
        );
        let unbound = json!({"metadata": {"name": "p"}, "spec": {}});
        assert_eq!(
            deletion(info("Pod").info(), &unbound, &DeleteOptions::default()),
            Deletion::Now
        );
    }

    #[test]
    fn finalizers_hold_deletion() {
        let cm = json!({"metadata": {"name": "c", "finalizers": ["x/y"]}});
        let Deletion::Mark(marked) =
            deletion(info("ConfigMap").info(), &cm, &DeleteOptions::default())
        else {
            panic!("finalizers hold deletion")
        };
        assert!(!ready_to_remove(&marked));
        let mut released = marked.clone();
        released["metadata"]["finalizers"] = json!([]);
        assert!(ready_to_remove(&released));
        let foreground = DeleteOptions {
            propagation: Some("Foreground".into()),
            ..Default::default()
        };
        let plain = json!({"metadata": {"name": "c"}});
        let Deletion::Mark(marked) = deletion(info("ConfigMap").info(), &plain, &foreground) else {
            panic!("foreground deletion waits for the garbage collector")
        };
        assert_eq!(
            marked["metadata"]["finalizers"],
            json!(["foregroundDeletion"])
        );
    }

    #[test]
    fn namespaces_terminate() {
        let ns = json!({"metadata": {"name": "bar"}, "spec": {"finalizers": ["kubernetes"]},
                        "status": {"phase": "Active"}});
        let Deletion::Mark(marked) =
            deletion(info("Namespace").info(), &ns, &DeleteOptions::default())
        else {
            panic!("a namespace with the kubernetes finalizer terminates")
        };
        assert_eq!(marked["status"]["phase"], "Terminating");
        assert_eq!(
            deletion(info("Namespace").info(), &marked, &DeleteOptions::default()),
            Deletion::AlreadyMarked
        );
    }

    #[test]
    fn qos_classes() {
        assert_eq!(
            pod_qos_class(&json!({"spec": {"containers": [{"name": "a"}]}})),
            "BestEffort"
        );
        let g = json!({"spec": {"containers": [{"resources": {
            "limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        assert_eq!(pod_qos_class(&g), "Guaranteed");
        let b = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(pod_qos_class(&b), "Burstable");
    }
}

//! PATCH bodies of the four types against a live object, as the API server applies them: the
//! patch, then the result decoded through the kind's type, defaulted and validated as an update.
//!
//! The first byte of the input picks the live object (a Pod, a Deployment, a Service, a
//! ConfigMap, a Node, a custom Widget) and, in its top bit, `force`; the rest is the body.
//! Checked beyond "no panic": a merge patch applied twice gives what it gave once (RFC 7386
//! patches are idempotent), and so does applying the same configuration twice for one manager.

use std::sync::LazyLock;

use serde_json::{Value, json};
use skiff_kinds::patch::{self, Options, PatchType};
use skiff_kinds::{Kind, strategy, typed};

use crate::objects::{check_written, kind_of};

/// The live objects a patch may apply to, each as the store holds it.
static LIVE: LazyLock<Vec<Value>> = LazyLock::new(|| {
    vec![
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "1", "resourceVersion": "5",
                "labels": {"app": "web"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [
                {"name": "app", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "env": [{"name": "A", "value": "1"}], "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "side", "image": "busybox"}
            ], "tolerations": [{"key": "k", "operator": "Exists"}], "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Pending"}
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "2", "resourceVersion": "6", "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}
        }),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "uid": "3", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.10"],
                "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}
        }),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "default", "uid": "4", "resourceVersion": "8",
                "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {"a": "b"}},
            "data": {"key": "value", "other": "x"}
        }),
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "5", "resourceVersion": "9", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"podCIDR": "10.42.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "2", "pods": "110"}, "conditions": [{"type": "Ready", "status": "True"}]}
        }),
        json!({
            "apiVersion": "fuzz.skiff.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default", "uid": "6", "resourceVersion": "10",
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"replicas": 1, "mode": "a", "tags": ["x"], "ports": [{"port": 80, "name": "http"}]}
        }),
    ]
});

fn options(force: bool) -> Options<'static> {
    Options {
        field_manager: "fuzz",
        force,
        subresource: None,
        now: jiff::Timestamp::from_second(1_798_761_600).expect("2027-01-01"),
    }
}

/// The live object and options the first byte picks, and the body.
fn split(data: &[u8]) -> Option<(&'static dyn Kind, &'static Value, bool, &[u8])> {
    let (&first, body) = data.split_first()?;
    let live = &LIVE[usize::from(first & 0x7f) % LIVE.len()];
    Some((kind_of(live, 0), live, first & 0x80 != 0, body))
}

/// Applies one patch and runs what an update runs on the result; the result if it was stored.
fn run(data: &[u8], patch_type: PatchType) -> Option<(&'static dyn Kind, Value, bool, &[u8])> {
    let (kind, live, force, body) = split(data)?;
    let patched = patch::apply(kind, live, patch_type, body, &options(force)).ok()?;
    let mut new = typed::decode(kind, &patched).ok()?.object;
    strategy::prepare_for_update(kind, &mut new, live);
    kind.default(&mut new);
    check_written(kind, &new, live);
    Some((kind, patched, force, body))
}

/// `application/json-patch+json` (RFC 6902).
pub fn json(data: &[u8]) {
    run(data, PatchType::Json);
}

/// `application/merge-patch+json` (RFC 7386): idempotent (compared before the managed fields
/// are recorded, which recreate `metadata` when a patch removed it).
pub fn merge(data: &[u8]) {
    let Some((_, live, _, body)) = split(data) else {
        return;
    };
    run(data, PatchType::Merge);
    let Ok(once) = patch::merge_patch(live, body) else {
        return;
    };
    let twice = patch::merge_patch(&once, body).expect("the patch applied once");
    assert_eq!(twice, once, "a merge patch applied twice differs");
}

/// `application/strategic-merge-patch+json`.
pub fn strategic(data: &[u8]) {
    run(data, PatchType::StrategicMerge);
}

/// `application/apply-patch+yaml` (server-side apply): applying the same configuration again
/// for the same manager changes nothing.
pub fn apply(data: &[u8]) {
    let Some((kind, once, force, body)) = run(data, PatchType::Apply) else {
        return;
    };
    match patch::server_side_apply(kind, Some(&once), body, &options(force)) {
        Ok(twice) => assert_eq!(twice, once, "applying the same configuration twice differs"),
        Err(e) => panic!("a configuration that applied once fails the second time: {e}"),
    }
}

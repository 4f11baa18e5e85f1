//! The namespace controller's pure part. Deleting a namespace makes the API server mark it
//! `Terminating` and keep it while `spec.finalizers` holds `kubernetes`; the controller then
//! deletes every namespaced object in it, across every served resource it discovers, and when
//! none is left calls the namespace's `finalize` subresource without that finalizer, after which
//! the API server removes the namespace.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use k8s_openapi::api::core::v1::{Namespace, NamespaceSpec};

/// The finalizer the API server puts on every namespace and this controller removes.
pub const FINALIZER: &str = "kubernetes";

pub use crate::runtime::Resource;

/// Whether `ns` is being deleted and still waits for this controller.
pub fn needs_cleanup(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        && ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.as_ref())
            .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// The resources whose objects must be deleted from a terminating namespace: namespaced,
/// listable and deletable, no subresources, one version per group and resource (the first
/// discovered, which discovery orders preferred-first). Events go last so the deletions of the
/// others can still be recorded.
pub fn purgeable(discovered: &[Resource]) -> Vec<Resource> {
    let mut out: Vec<Resource> = Vec::new();
    for r in discovered {
        if !r.namespaced
            || r.plural.contains('/')
            || !r.can("list")
            || !(r.can("delete") || r.can("deletecollection"))
        {
            continue;
        }
        if out
            .iter()
            .any(|o| o.group == r.group && o.plural == r.plural)
        {
            continue;
        }
        out.push(r.clone());
    }
    out.sort_by_key(|r| r.plural == "events");
    out
}

/// The namespace to send to `finalize`: its spec without the `kubernetes` finalizer.
pub fn finalized(ns: &Namespace) -> Namespace {
    let mut out = ns.clone();
    let spec = out.spec.get_or_insert_with(NamespaceSpec::default);
    let kept: Vec<String> = spec
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    spec.finalizers = (!kept.is_empty()).then_some(kept);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::time;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn res(group: &str, version: &str, plural: &str, namespaced: bool, verbs: &[&str]) -> Resource {
        Resource {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: String::new(),
            namespaced,
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn only_deletable_namespaced_resources_once_each_events_last() {
        let all = ["list", "delete", "deletecollection"];
        let found = purgeable(&[
            res("", "v1", "events", true, &all),
            res("", "v1", "pods", true, &all),
            res("", "v1", "pods/status", true, &["get", "patch"]),
            res("", "v1", "nodes", false, &all),
            res("apps", "v1", "deployments", true, &all),
            res("apps", "v1beta1", "deployments", true, &all),
            res(
                "authorization.k8s.io",
                "v1",
                "localsubjectaccessreviews",
                true,
                &["create"],
            ),
            res("", "v1", "bindings", true, &["create"]),
        ]);
        let names: Vec<(&str, &str)> = found
            .iter()
            .map(|r| (r.plural.as_str(), r.version.as_str()))
            .collect();
        assert_eq!(
            names,
            [("pods", "v1"), ("deployments", "v1"), ("events", "v1")]
        );
    }

    #[test]
    fn finalize_drops_only_our_finalizer() {
        let mut ns = Namespace {
            metadata: ObjectMeta {
                name: Some("x".into()),
                ..ObjectMeta::default()
            },
            spec: Some(NamespaceSpec {
                finalizers: Some(vec![FINALIZER.into(), "example.com/other".into()]),
            }),
            status: None,
        };
        assert!(!needs_cleanup(&ns), "not being deleted");
        ns.metadata.deletion_timestamp = Some(time("2026-01-01T00:00:00Z"));
        assert!(needs_cleanup(&ns));
        let f = finalized(&ns);
        assert_eq!(f.spec.unwrap().finalizers.unwrap(), ["example.com/other"]);
        ns.spec.as_mut().unwrap().finalizers = Some(vec![FINALIZER.into()]);
        let f = finalized(&ns);
        assert_eq!(f.spec.as_ref().unwrap().finalizers, None);
        assert!(!needs_cleanup(&f));
    }
}

//! The service account controller's pure part: every namespace that is not being deleted has a
//! `default` ServiceAccount.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The name of the service account every namespace gets.
pub const DEFAULT: &str = "default";

/// The `default` ServiceAccount `ns` lacks, if it should have one: none while the namespace is
/// being deleted (creating one would fail and race the namespace controller).
pub fn missing_default(ns: &Namespace, has_default: bool) -> Option<ServiceAccount> {
    let terminating = ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    if has_default || terminating {
        return None;
    }
    Some(ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT.into()),
            namespace: ns.metadata.name.clone(),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NamespaceStatus;

    #[test]
    fn only_active_namespaces_without_one_get_a_default() {
        let mut ns = Namespace {
            metadata: ObjectMeta {
                name: Some("team".into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let sa = missing_default(&ns, false).unwrap();
        assert_eq!(sa.metadata.name.as_deref(), Some("default"));
        assert_eq!(sa.metadata.namespace.as_deref(), Some("team"));
        assert!(missing_default(&ns, true).is_none());
        ns.status = Some(NamespaceStatus {
            phase: Some("Terminating".into()),
            ..NamespaceStatus::default()
        });
        assert!(missing_default(&ns, false).is_none());
    }
}

//! The root CA publisher's pure part (kube-controller-manager's `root-ca-cert-publisher`): every
//! namespace that is not being deleted has the ConfigMap `kube-root-ca.crt` holding the cluster
//! CA bundle under `ca.crt`, which pods' projected service-account volumes read. Deleted, it comes
//! back; edited, it is put back.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The ConfigMap's name.
pub const NAME: &str = "kube-root-ca.crt";
/// The key of the CA bundle in it.
pub const KEY: &str = "ca.crt";
/// The annotation that says what the ConfigMap is for.
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// Its text, as kube-controller-manager writes it.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// What to write to `ns` given its current ConfigMap: `None` when nothing is to be done (it is
/// right, or the namespace is being deleted), else the ConfigMap to create (`existing` is None)
/// or to update (the existing one with its data replaced and the annotation set).
pub fn desired(ns: &Namespace, existing: Option<&ConfigMap>, ca_pem: &str) -> Option<ConfigMap> {
    let terminating = ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating");
    if terminating {
        return None;
    }
    let data = BTreeMap::from([(KEY.to_string(), ca_pem.to_string())]);
    match existing {
        None => Some(ConfigMap {
            metadata: ObjectMeta {
                name: Some(NAME.into()),
                namespace: ns.metadata.name.clone(),
                annotations: Some(BTreeMap::from([(
                    DESCRIPTION_ANNOTATION.to_string(),
                    DESCRIPTION.to_string(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        }),
        Some(cm) => {
            let described = cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
                .is_some_and(|d| !d.is_empty());
            if cm.data.as_ref() == Some(&data) && cm.binary_data.is_none() && described {
                return None;
            }
            let mut cm = cm.clone();
            cm.data = Some(data);
            cm.binary_data = None;
            cm.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
            Some(cm)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NamespaceStatus;

    fn ns() -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("team".into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }
    }

    #[test]
    fn missing_edited_and_right_configmaps() {
        let created = desired(&ns(), None, "PEM").unwrap();
        assert_eq!(created.metadata.name.as_deref(), Some(NAME));
        assert_eq!(created.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(created.data.as_ref().unwrap()[KEY], "PEM");
        assert_eq!(
            created.metadata.annotations.as_ref().unwrap()[DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
        // Right as it is: nothing to do.
        assert!(desired(&ns(), Some(&created), "PEM").is_none());
        // Edited data, an extra key, or the annotation dropped: put back, labels kept.
        let mut edited = created.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        edited.metadata.labels = Some(BTreeMap::from([("keep".into(), "me".into())]));
        let fixed = desired(&ns(), Some(&edited), "PEM").unwrap();
        assert_eq!(fixed.data, created.data);
        assert_eq!(fixed.metadata.labels, edited.metadata.labels);
        let mut bare = created.clone();
        bare.metadata.annotations = None;
        assert!(desired(&ns(), Some(&bare), "PEM").is_some());
        // A new CA replaces the old one.
        let rotated = desired(&ns(), Some(&created), "NEW").unwrap();
        assert_eq!(rotated.data.unwrap()[KEY], "NEW");
    }

    #[test]
    fn terminating_namespaces_are_left_alone() {
        let mut ns = ns();
        ns.status = Some(NamespaceStatus {
            phase: Some("Terminating".into()),
            ..NamespaceStatus::default()
        });
        assert!(desired(&ns, None, "PEM").is_none());
    }
}

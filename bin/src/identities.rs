//! Each component `skiff server` runs gets its own identity, a client certificate from the
//! cluster CA, as kube-apiserver's components have theirs: the controllers are
//! `system:kube-controller-manager`, the scheduler `system:kube-scheduler`, the proxy
//! `system:kube-proxy`, the cluster DNS `system:kube-dns`, and the kubelet
//! `system:node:<name>` in `system:nodes` (confined to its own pods by the Node authorizer).
//! RBAC's bootstrap policy grants each what it needs and nothing more. The certificates live in
//! the PKI directory (`<component>.crt`, `.key`) and are reissued when they near their end or
//! name another node.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use skiff_api::tls::{Pki, write_atomically};
use skiff_pki::{Credentials, Subject};

use crate::components::Component;

/// How long a component certificate is valid.
const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A stored certificate with less than this left is reissued at start.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Who `component` is; `node` is the kubelet's node name.
pub fn subject(component: Component, node: &str) -> Option<(Subject, &'static str)> {
    Some(match component {
        Component::Controllers => (
            Subject::new("system:kube-controller-manager", &[]),
            "controller-manager",
        ),
        Component::Scheduler => (Subject::new("system:kube-scheduler", &[]), "scheduler"),
        Component::Proxy => (Subject::new("system:kube-proxy", &[]), "proxy"),
        Component::Dns => (Subject::new("system:kube-dns", &[]), "dns"),
        Component::Kubelet => (
            Subject::new(&format!("system:node:{node}"), &["system:nodes"]),
            "kubelet",
        ),
        Component::LocalStorage | Component::Ingress => return None,
    })
}

/// The stored credentials for `subject` under `stem` in `pki`'s directory if they are the
/// CA's, name `subject` and are not near their end; else new ones, stored.
pub fn credentials(pki: &Pki, subject: &Subject, stem: &str) -> Result<Credentials> {
    let dir = pki.dir();
    let (cert_path, key_path) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    if let Some(found) = stored(&cert_path, &key_path)
        && skiff_pki::reusable(pki.authority(), &found, RENEW_BEFORE)
        && names(&found, subject)
    {
        return Ok(found);
    }
    let issued = pki
        .authority()
        .issue_client(subject, VALIDITY)
        .with_context(|| format!("cannot issue {}'s certificate", subject.common_name))?;
    write_atomically(&key_path, issued.key_pem.as_bytes(), 0o600)
        .with_context(|| format!("cannot write {}", key_path.display()))?;
    write_atomically(&cert_path, issued.cert_pem.as_bytes(), 0o644)
        .with_context(|| format!("cannot write {}", cert_path.display()))?;
    Ok(issued)
}

fn stored(cert: &Path, key: &Path) -> Option<Credentials> {
    Some(Credentials {
        cert_pem: std::fs::read_to_string(cert).ok()?,
        key_pem: std::fs::read_to_string(key).ok()?,
    })
}

fn names(credentials: &Credentials, subject: &Subject) -> bool {
    rustls_pemfile::certs(&mut credentials.cert_pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .and_then(|der| skiff_pki::subject_of(&der).ok())
        .is_some_and(|s| &s == subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_keeps_its_certificate_until_it_names_someone_else() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_create(dir.path(), &["127.0.0.1".to_string()]).unwrap();
        let (n1, stem) = subject(Component::Kubelet, "n1").unwrap();
        let first = credentials(&pki, &n1, stem).unwrap();
        assert_eq!(credentials(&pki, &n1, stem).unwrap(), first);
        let (n2, _) = subject(Component::Kubelet, "n2").unwrap();
        let second = credentials(&pki, &n2, stem).unwrap();
        assert_ne!(second, first);
        assert!(names(&second, &n2));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("kubelet.key"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert!(subject(Component::LocalStorage, "n1").is_none());
    }
}

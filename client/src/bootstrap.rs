//! An agent's own identities, as kubelet TLS bootstrapping gets them: with the join token (whose
//! holder may only ask for certificates), the agent makes a key, sends a
//! CertificateSigningRequest for `system:node:<name>` in `system:nodes` (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`) and one for its proxy (`system:kube-proxy`,
//! signer `kubernetes.io/kube-apiserver-client`), waits for the controllers to approve and sign
//! them, and keeps key and certificate in its directory. A later start reuses them until their
//! renewal point ([`renew_at`], 80% into their validity), and asks again after it; a running
//! agent asks again when it reaches that point.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest as Csr, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use skiff_pki::{Credentials, Subject};

use crate::{Api, Client, Error, Result};

/// The signer of kubelets' client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of other client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// How far into a certificate's validity it is renewed, in per mille: as the kubelet's
/// certificate manager, which picks a point between 70% and 90% of it, leaving time to retry.
const RENEW_AT_PER_MILLE: u32 = 800;
/// How long to wait for a request to be approved and signed.
const WAIT: Duration = Duration::from_secs(300);

/// One identity an agent needs.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Who (`system:node:n1` in `system:nodes`).
    pub subject: Subject,
    /// The signer asked.
    pub signer: &'static str,
    /// The file stem in the directory (`kubelet-client` → `kubelet-client.crt`, `.key`).
    pub stem: &'static str,
}

impl Identity {
    /// The kubelet of node `name`.
    pub fn kubelet(name: &str) -> Identity {
        Identity {
            subject: Subject::new(&format!("system:node:{name}"), &["system:nodes"]),
            signer: KUBELET_CLIENT_SIGNER,
            stem: "kubelet-client",
        }
    }

    /// The service proxy.
    pub fn proxy() -> Identity {
        Identity {
            subject: Subject::new("system:kube-proxy", &[]),
            signer: CLIENT_SIGNER,
            stem: "proxy-client",
        }
    }

    fn paths(&self, dir: &Path) -> (PathBuf, PathBuf) {
        (
            dir.join(format!("{}.crt", self.stem)),
            dir.join(format!("{}.key", self.stem)),
        )
    }
}

/// When the certificate `cert_pem` is due for renewal: [`RENEW_AT_PER_MILLE`] into its
/// validity. `None` if it does not parse.
pub fn renew_at(cert_pem: &str) -> Option<SystemTime> {
    let (start, end) = skiff_pki::validity(cert_pem).ok()?;
    let lifetime = end.duration_since(start).unwrap_or_default();
    Some(start + lifetime * RENEW_AT_PER_MILLE / 1000)
}

/// The stored credentials of `identity` in `dir`, if they are for that subject and not yet due
/// for renewal ([`renew_at`]).
pub fn stored(dir: &Path, identity: &Identity) -> Option<Credentials> {
    let (cert, key) = identity.paths(dir);
    let credentials = Credentials {
        cert_pem: std::fs::read_to_string(cert).ok()?,
        key_pem: std::fs::read_to_string(key).ok()?,
    };
    let due = renew_at(&credentials.cert_pem)?;
    let der = rustls_pemfile::certs(&mut credentials.cert_pem.as_bytes())
        .next()?
        .ok()?;
    let subject = skiff_pki::subject_of(&der).ok()?;
    (SystemTime::now() < due && subject == identity.subject).then_some(credentials)
}

/// The credentials of `identity`: the stored ones, or new ones asked for through `client` (the
/// join token's) and stored in `dir` (key mode 0600).
pub async fn credentials(client: &Client, dir: &Path, identity: &Identity) -> Result<Credentials> {
    if let Some(found) = stored(dir, identity) {
        tracing::info!(user = %identity.subject.common_name, dir = %dir.display(),
            "using the stored client certificate");
        return Ok(found);
    }
    renew(client, dir, identity).await
}

/// New credentials of `identity`, asked for through `client` whatever is stored, and stored in
/// `dir` (key mode 0600).
pub async fn renew(client: &Client, dir: &Path, identity: &Identity) -> Result<Credentials> {
    let credentials = request(client, identity).await?;
    let (cert, key) = identity.paths(dir);
    let io =
        |e: std::io::Error, path: &Path| Error::Config(format!("writing {}: {e}", path.display()));
    std::fs::create_dir_all(dir).map_err(|e| io(e, dir))?;
    write_private(&key, credentials.key_pem.as_bytes()).map_err(|e| io(e, &key))?;
    write_private(&cert, credentials.cert_pem.as_bytes()).map_err(|e| io(e, &cert))?;
    Ok(credentials)
}

/// Writes through a temporary file and a rename, mode 0600.
fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Sends a CertificateSigningRequest for `identity` and waits for its certificate.
pub async fn request(client: &Client, identity: &Identity) -> Result<Credentials> {
    let (request_pem, key_pem) =
        skiff_pki::new_request(&identity.subject).map_err(|e| Error::Config(e.to_string()))?;
    let suffix: u64 = rand::random();
    let name = format!("{}-{suffix:016x}", identity.stem);
    let csr = Csr {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.into_bytes()),
            signer_name: identity.signer.to_string(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..CertificateSigningRequestSpec::default()
        },
        ..Csr::default()
    };
    let api: Api<Csr> = Api::all(client.clone());
    api.create(&PostParams::default(), &csr)
        .await
        .map_err(|source| Error::Request {
            what: format!(
                "asking for a certificate for {}",
                identity.subject.common_name
            ),
            source,
        })?;
    tracing::info!(%name, user = %identity.subject.common_name, "asked for a client certificate");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let current = api.get(&name).await.map_err(|source| Error::Request {
            what: format!("reading {name}"),
            source,
        })?;
        if let Some(status) = &current.status {
            if let Some(cert) = status.certificate.as_ref().filter(|c| !c.0.is_empty()) {
                let cert_pem = String::from_utf8(cert.0.clone()).map_err(|_| {
                    Error::Config(format!("{name}: the certificate is not PEM text"))
                })?;
                return Ok(Credentials { cert_pem, key_pem });
            }
            for c in status.conditions.iter().flatten() {
                if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
                    return Err(Error::Config(format!(
                        "the certificate request {name} was {}: {}",
                        c.type_.to_lowercase(),
                        c.message.as_deref().unwrap_or_default()
                    )));
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Config(format!(
                "the certificate request {name} was not approved and signed within {}s (are the controllers running?)",
                WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The base64 of `pem` (for kubeconfigs).
pub fn base64_pem(pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_credentials_are_reused_only_for_the_same_subject_and_while_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let ca =
            skiff_pki::Authority::generate("t", Duration::from_secs(10 * 365 * 86400)).unwrap();
        let node = Identity::kubelet("n1");
        assert!(stored(dir.path(), &node).is_none());
        let (cert, key) = node.paths(dir.path());
        let write = |c: &Credentials| {
            std::fs::write(&cert, &c.cert_pem).unwrap();
            std::fs::write(&key, &c.key_pem).unwrap();
        };
        let year = ca
            .issue_client(&node.subject, Duration::from_secs(365 * 86400))
            .unwrap();
        write(&year);
        assert_eq!(stored(dir.path(), &node), Some(year));
        // Another node's name in the same directory is not this node's identity.
        assert!(stored(dir.path(), &Identity::kubelet("n2")).is_none());
        // A week's certificate, just issued: not yet due.
        let week = ca
            .issue_client(&node.subject, Duration::from_secs(7 * 86400))
            .unwrap();
        write(&week);
        assert_eq!(stored(dir.path(), &node), Some(week));
        // A minute left of six (issued five minutes back-dated): past its renewal point.
        let minute = ca
            .issue_client(&node.subject, Duration::from_secs(60))
            .unwrap();
        write(&minute);
        assert!(stored(dir.path(), &node).is_none());
    }

    #[test]
    fn renewal_is_due_four_fifths_into_the_validity() {
        let ca =
            skiff_pki::Authority::generate("t", Duration::from_secs(10 * 365 * 86400)).unwrap();
        let subject = Subject::new("system:kube-proxy", &[]);
        let issued = ca
            .issue_client(&subject, Duration::from_secs(100 * 86400))
            .unwrap();
        let (start, end) = skiff_pki::validity(&issued.cert_pem).unwrap();
        let due = renew_at(&issued.cert_pem).unwrap();
        let into = due.duration_since(start).unwrap().as_secs_f64();
        let whole = end.duration_since(start).unwrap().as_secs_f64();
        assert!((into / whole - 0.8).abs() < 1e-6, "{into} of {whole}");
        assert!(renew_at("not a certificate").is_none());
    }
}

//! TLS termination with SNI: the certificate of the host a client names, from the Ingresses'
//! TLS Secrets, else a self-signed default certificate made at start.
//!
//! The resolver holds the current set behind one short lock and is asked once per handshake,
//! so a changed Secret or Ingress takes effect for the next handshake; established connections
//! keep what they negotiated.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::routes::{RouteTable, TlsCert};

/// Why a TLS Secret's contents cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// `tls.crt` holds no PEM certificate.
    #[error("tls.crt holds no PEM certificate")]
    NoCertificate,
    /// `tls.key` holds no PEM private key.
    #[error("tls.key holds no PEM private key")]
    NoKey,
    /// The key is of a type rustls cannot sign with.
    #[error("tls.key: {0}")]
    Key(#[source] rustls::Error),
    /// The PEM does not parse.
    #[error("PEM: {0}")]
    Pem(#[source] std::io::Error),
}

/// A rustls key from a Secret's PEM certificate chain and key.
pub fn certified_key(cert: &TlsCert) -> Result<Arc<CertifiedKey>, CertError> {
    let chain = rustls_pemfile::certs(&mut cert.cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(CertError::Pem)?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate);
    }
    let key = rustls_pemfile::private_key(&mut cert.key_pem.as_slice())
        .map_err(CertError::Pem)?
        .ok_or(CertError::NoKey)?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(CertError::Key)?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

/// A self-signed certificate for clients whose host has none (as ingress-nginx's "Kubernetes
/// Ingress Controller Fake Certificate").
pub fn default_key() -> Arc<CertifiedKey> {
    let made = rcgen::generate_simple_self_signed(vec!["skiff-ingress-default.invalid".into()])
        .expect("generating a self-signed certificate with ring cannot fail");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .expect("rcgen's default key type is one ring signs with");
    Arc::new(CertifiedKey::new(vec![made.cert.der().clone()], signer))
}

/// The certificates being served, swapped as a whole.
#[derive(Default)]
struct Current {
    table: Arc<RouteTable>,
    /// Parsed keys by Secret (`namespace/name`), with the PEM they came from.
    keys: HashMap<String, (Arc<TlsCert>, Arc<CertifiedKey>)>,
}

/// Chooses the certificate by SNI.
pub struct Resolver {
    current: RwLock<Current>,
    default: Arc<CertifiedKey>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

impl Resolver {
    /// A resolver that presents `default` until [`Resolver::set`] gives it more.
    pub fn new(default: Arc<CertifiedKey>) -> Resolver {
        Resolver {
            current: RwLock::default(),
            default,
        }
    }

    /// Serves the certificates of `table`; returns the Secrets (`namespace/name`) whose contents
    /// cannot be served, and why (their hosts get the default certificate).
    pub fn set(&self, table: Arc<RouteTable>) -> Vec<(String, CertError)> {
        let previous: HashMap<String, (Arc<TlsCert>, Arc<CertifiedKey>)> = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys
            .clone();
        let mut keys = HashMap::new();
        let mut failed = Vec::new();
        for cert in table.certs() {
            if keys.contains_key(&cert.secret) {
                continue;
            }
            // Parsing is the costly part: reuse the key while the Secret's PEM is unchanged.
            if let Some((pem, key)) = previous.get(&cert.secret)
                && **pem == **cert
            {
                keys.insert(cert.secret.clone(), (pem.clone(), key.clone()));
                continue;
            }
            match certified_key(cert) {
                Ok(key) => {
                    keys.insert(cert.secret.clone(), (cert.clone(), key));
                }
                Err(e) => failed.push((cert.secret.clone(), e)),
            }
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Current { table, keys };
        failed
    }

    /// The key for a client that named `server_name`.
    pub fn key_for(&self, server_name: Option<&str>) -> Arc<CertifiedKey> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current
            .table
            .cert(server_name)
            .and_then(|cert| current.keys.get(&cert.secret))
            .map_or_else(|| self.default.clone(), |(_, key)| key.clone())
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.key_for(hello.server_name()))
    }
}

/// The rustls server configuration of the HTTPS listener: certificates from `resolver`, HTTP/2
/// and HTTP/1.1 by ALPN.
pub fn server_config(resolver: Arc<Resolver>) -> Arc<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

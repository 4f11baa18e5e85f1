//! TLS for the API server: a persistent CA and serving certificate, and a server that drives any
//! warp filter over TLS (HTTP/1.1 and HTTP/2) or, for loopback debugging only, over plain HTTP.
//!
//! warp 0.4 has no TLS support of its own, so the filter is turned into a service
//! (`warp::service`) and each accepted connection is driven by hyper-util's auto (HTTP/1.1 or
//! HTTP/2) connection builder on top of tokio-rustls.
//!
//! Files in the PKI directory (keys are written with mode 0600):
//! ```text
//! ca.crt  ca.key          created once; every kubeconfig trusts ca.crt
//! server.crt server.key   reissued by the CA when the requested names are no longer covered
//!                         or the certificate is about to expire
//! front-proxy-ca.crt front-proxy-ca.key          a CA of its own for the front proxy
//! front-proxy-client.crt front-proxy-client.key  what skiff presents to aggregated API servers
//!                                                ([`crate::aggregation`]), reissued near expiry
//! ```

use std::fs;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::future::Future as _;
use std::pin::Pin;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use warp::{Filter, Rejection, Reply};

/// File name of the CA certificate in the PKI directory.
pub const CA_CERT_FILE: &str = "ca.crt";
/// File name of the CA private key in the PKI directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// File name of the serving certificate in the PKI directory.
pub const SERVER_CERT_FILE: &str = "server.crt";
/// File name of the serving certificate's private key in the PKI directory.
pub const SERVER_KEY_FILE: &str = "server.key";

/// File name of the front-proxy CA certificate in the PKI directory.
pub const FRONT_PROXY_CA_CERT_FILE: &str = "front-proxy-ca.crt";
/// File name of the front-proxy CA private key in the PKI directory.
pub const FRONT_PROXY_CA_KEY_FILE: &str = "front-proxy-ca.key";
/// File name of the front proxy's client certificate in the PKI directory.
pub const FRONT_PROXY_CLIENT_CERT_FILE: &str = "front-proxy-client.crt";
/// File name of the front proxy's client key in the PKI directory.
pub const FRONT_PROXY_CLIENT_KEY_FILE: &str = "front-proxy-client.key";

/// The CA is valid ten years.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// The serving certificate is valid a year.
const SERVER_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A serving certificate that expires within this window is reissued on start.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// A TLS handshake that takes longer than this is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of the PKI and of the TLS server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PKI file or directory could not be read or written.
    #[error("cannot access {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A PKI file does not hold the expected PEM item.
    #[error("{path} does not hold a usable PEM {what}")]
    BadPem {
        /// The file.
        path: PathBuf,
        /// What was expected in it.
        what: &'static str,
    },
    /// Only one of `ca.crt` and `ca.key` exists; a new CA would invalidate every kubeconfig,
    /// so skiff refuses to guess.
    #[error("incomplete CA in {dir}: ca.crt and ca.key must both exist or both be absent")]
    IncompleteCa {
        /// The PKI directory.
        dir: PathBuf,
    },
    /// A certificate could not be made, or the CA's files do not make a CA.
    #[error("{path}: {source}")]
    Pki {
        /// The certificate concerned.
        path: PathBuf,
        /// What failed.
        #[source]
        source: skiff_pki::Error,
    },
    /// rustls rejected the certificate, key or configuration.
    #[error("invalid TLS configuration")]
    Rustls(#[from] rustls::Error),
    /// The client certificate verifier could not be built from the CA.
    #[error("cannot build a client certificate verifier for the CA: {0}")]
    ClientVerifier(String),
    /// The certificate verifier could not be built from the CA.
    #[error("cannot build a verifier for the CA")]
    Verifier(#[from] rustls::client::VerifierBuilderError),
    /// The plain HTTP listener is bound to a non-loopback address.
    #[error("plain HTTP is only served on loopback addresses, not on {0}")]
    NotLoopback(SocketAddr),
    /// The listener's local address could not be read.
    #[error("cannot read the listener's address")]
    ListenerAddress(#[source] std::io::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Installs the ring crypto provider as the process default (once; later calls are no-ops).
///
/// reqwest (`rustls-no-provider`) and kube use the process default provider.
pub fn install_crypto_provider() {
    // An error only means that a provider is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The names every serving certificate covers: loopback, `localhost`, this host's name, the
/// in-cluster `kubernetes` service names, then `extra` (further host names or addresses),
/// without duplicates.
pub fn default_sans(extra: &[String]) -> Vec<String> {
    let mut names: Vec<String> = [
        "127.0.0.1",
        "::1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(host) = host_name() {
        names.push(host);
    }
    names.extend(extra.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| !n.is_empty() && seen.insert(n.to_ascii_lowercase()));
    names
}

/// This machine's host name, if it can be read.
fn host_name() -> Option<String> {
    let name = fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())?;
    let name = name.trim().to_ascii_lowercase();
    // Only names that are valid DNS names can go into a certificate.
    let valid = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    valid.then_some(name)
}

/// The cluster's PKI: a CA and a serving certificate issued by it, persisted as PEM files.
#[derive(Clone)]
pub struct Pki {
    dir: PathBuf,
    authority: Arc<skiff_pki::Authority>,
    ca_cert_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    sans: Vec<String>,
    server_reissued: bool,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The private key stays out of logs.
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .field("sans", &self.sans)
            .field("server_reissued", &self.server_reissued)
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// Loads the PKI from `dir`, creating the CA on first start and (re)issuing the serving
    /// certificate when it is missing, not signed by the CA, does not cover every name in
    /// `sans`, or expires within 30 days. `sans` are DNS names or IP addresses (see
    /// [`default_sans`]).
    pub fn load_or_create(dir: &Path, sans: &[String]) -> Result<Pki> {
        install_crypto_provider();
        create_private_dir(dir)?;
        let ca_cert_path = dir.join(CA_CERT_FILE);
        let ca_key_path = dir.join(CA_KEY_FILE);
        let authority =
            match (ca_cert_path.exists(), ca_key_path.exists()) {
                (true, true) => {
                    let (cert, key) = (read(&ca_cert_path)?, read(&ca_key_path)?);
                    skiff_pki::Authority::from_pem(&cert, &key).map_err(|source| Error::Pki {
                        path: match source {
                            skiff_pki::Error::BadKey => ca_key_path.clone(),
                            _ => ca_cert_path.clone(),
                        },
                        source,
                    })?
                }
                (false, false) => {
                    let authority = skiff_pki::Authority::generate("skiff-ca", CA_VALIDITY)
                        .map_err(|source| Error::Pki {
                            path: ca_cert_path.clone(),
                            source,
                        })?;
                    write_file(&ca_key_path, authority.key_pem().as_bytes(), 0o600)?;
                    write_file(&ca_cert_path, authority.cert_pem().as_bytes(), 0o644)?;
                    authority
                }
                _ => {
                    return Err(Error::IncompleteCa {
                        dir: dir.to_path_buf(),
                    });
                }
            };
        let ca_cert_pem = authority.cert_pem().to_string();
        let ca_der = parse_cert(&ca_cert_path, &ca_cert_pem)?;

        let server_cert_path = dir.join(SERVER_CERT_FILE);
        let server_key_path = dir.join(SERVER_KEY_FILE);
        let existing = match (server_cert_path.exists(), server_key_path.exists()) {
            (true, true) => {
                let cert = read(&server_cert_path)?;
                let key = read(&server_key_path)?;
                let cert_der = parse_cert(&server_cert_path, &cert)?;
                let usable = PrivateKeyDer::from_pem_slice(key.as_bytes()).is_ok()
                    && covers(&ca_der, &cert_der, sans)?;
                usable.then_some((cert, key))
            }
            _ => None,
        };
        let (server_cert_pem, server_key_pem, server_reissued) = match existing {
            Some((cert, key)) => (cert, key, false),
            None => {
                let issued = authority
                    .issue_server(sans, SERVER_VALIDITY)
                    .map_err(|source| Error::Pki {
                        path: server_cert_path.clone(),
                        source,
                    })?;
                write_file(&server_key_path, issued.key_pem.as_bytes(), 0o600)?;
                write_file(&server_cert_path, issued.cert_pem.as_bytes(), 0o644)?;
                (issued.cert_pem, issued.key_pem, true)
            }
        };
        Ok(Pki {
            dir: dir.to_path_buf(),
            authority: Arc::new(authority),
            ca_cert_pem,
            server_cert_pem,
            server_key_pem,
            sans: sans.to_vec(),
            server_reissued,
        })
    }

    /// The front proxy's credentials: its CA (created once, beside the cluster CA, as kubeadm
    /// and k3s keep theirs) and a client certificate for [`FRONT_PROXY_CLIENT`] from it,
    /// reissued when missing or about to expire.
    ///
    /// [`FRONT_PROXY_CLIENT`]: crate::aggregation::FRONT_PROXY_CLIENT
    pub fn front_proxy(&self) -> Result<crate::aggregation::FrontProxy> {
        let cert_path = self.dir.join(FRONT_PROXY_CA_CERT_FILE);
        let key_path = self.dir.join(FRONT_PROXY_CA_KEY_FILE);
        let pki_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Pki { path, source }
        };
        let authority = match (cert_path.exists(), key_path.exists()) {
            (true, true) => skiff_pki::Authority::from_pem(&read(&cert_path)?, &read(&key_path)?)
                .map_err(pki_error(&cert_path))?,
            (false, false) => {
                let authority = skiff_pki::Authority::generate("skiff-front-proxy-ca", CA_VALIDITY)
                    .map_err(pki_error(&cert_path))?;
                write_file(&key_path, authority.key_pem().as_bytes(), 0o600)?;
                write_file(&cert_path, authority.cert_pem().as_bytes(), 0o644)?;
                authority
            }
            _ => {
                return Err(Error::IncompleteCa {
                    dir: self.dir.clone(),
                });
            }
        };
        let client_cert = self.dir.join(FRONT_PROXY_CLIENT_CERT_FILE);
        let client_key = self.dir.join(FRONT_PROXY_CLIENT_KEY_FILE);
        let stored = match (read(&client_cert), read(&client_key)) {
            (Ok(cert_pem), Ok(key_pem)) => Some(skiff_pki::Credentials { cert_pem, key_pem }),
            _ => None,
        }
        .filter(|c| skiff_pki::reusable(&authority, c, RENEW_BEFORE));
        let credentials = match stored {
            Some(credentials) => credentials,
            None => {
                let subject = skiff_pki::Subject::new(crate::aggregation::FRONT_PROXY_CLIENT, &[]);
                let issued = authority
                    .issue_client(&subject, SERVER_VALIDITY)
                    .map_err(pki_error(&client_cert))?;
                write_file(&client_key, issued.key_pem.as_bytes(), 0o600)?;
                write_file(&client_cert, issued.cert_pem.as_bytes(), 0o644)?;
                issued
            }
        };
        Ok(crate::aggregation::FrontProxy {
            ca_pem: authority.cert_pem().to_string(),
            client_cert_pem: credentials.cert_pem,
            client_key_pem: credentials.key_pem,
        })
    }

    /// The CA certificate (PEM), for kubeconfigs and clients.
    pub fn ca_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The CA, to issue client certificates and sign requests with.
    pub fn authority(&self) -> &Arc<skiff_pki::Authority> {
        &self.authority
    }

    /// The serving certificate (PEM).
    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    /// The directory holding the PEM files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether [`Pki::load_or_create`] issued a new serving certificate (rather than reusing
    /// the one on disk).
    pub fn server_reissued(&self) -> bool {
        self.server_reissued
    }

    /// What [`serve`] needs: the serving certificate, the ring provider, ALPN `h2` then
    /// `http/1.1`, and client certificates of this CA asked for but optional.
    ///
    /// A client certificate is checked after the handshake, not during it, so that one that does
    /// not hold (expired, of another CA) is a 401 from the authenticator, as kube-apiserver
    /// answers it, rather than a failed handshake the client cannot explain. The handshake
    /// still makes the client prove it holds the certificate's key.
    pub fn server_config(&self) -> Result<Serving> {
        let cert_path = self.dir.join(SERVER_CERT_FILE);
        let key_path = self.dir.join(SERVER_KEY_FILE);
        let cert = parse_cert(&cert_path, &self.server_cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes()).map_err(|_| {
            Error::BadPem {
                path: key_path,
                what: "private key",
            }
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(parse_cert(&self.dir.join(CA_CERT_FILE), &self.ca_cert_pem)?)?;
        let checker =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(|e| Error::ClientVerifier(e.to_string()))?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(Arc::new(Deferred(checker.clone())))
            .with_single_cert(vec![cert], key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Serving {
            config: Arc::new(config),
            clients: Some(checker),
        })
    }

    /// A rustls client configuration trusting only this CA (for in-process clients and tests).
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let mut roots = RootCertStore::empty();
        roots.add(parse_cert(&self.dir.join(CA_CERT_FILE), &self.ca_cert_pem)?)?;
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Whether `cert` chains to `ca`, is valid for every name in `sans` and stays valid for the
/// renewal window.
fn covers(
    ca: &CertificateDer<'static>,
    cert: &CertificateDer<'static>,
    sans: &[String],
) -> Result<bool> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone())?;
    let verifier = WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()?;
    let horizon = SystemTime::now() + RENEW_BEFORE;
    let horizon = UnixTime::since_unix_epoch(
        horizon
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    for san in sans {
        let Ok(name) = ServerName::try_from(san.as_str()) else {
            return Ok(false);
        };
        if verifier
            .verify_server_cert(cert, &[], &name, &[], horizon)
            .is_err()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

fn parse_cert(path: &Path, pem: &str) -> Result<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|_| Error::BadPem {
        path: path.to_path_buf(),
        what: "certificate",
    })
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn create_private_dir(dir: &Path) -> Result<()> {
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    if !dir.exists() {
        create_dir_all_durably(dir, 0o700).map_err(io)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

/// Writes `contents` to `path` with `mode` through a temporary file and a rename, so a crash
/// never leaves a half-written key, token file or kubeconfig behind.
pub(crate) fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    write_atomically(path, contents, mode).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `contents` to `path` atomically and durably (temp file, fsync, rename, fsync of the
/// directory) with permissions `mode`.
///
/// The directory's fsync makes the rename itself durable: without it a power cut can leave the
/// old file, or for a new file none, however well its contents were synced, and a server that
/// comes back without its CA or token file makes new ones and locks out every client and agent
/// (the API server's power-cut test, `tests/tests/e2e/powercut.rs`, checks this).
pub fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    // The mode given to open() is masked by the umask; set it exactly.
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, path)?;
    sync_dir(parent_of(path))
}

/// Creates `dir` and its missing parents (each with `mode`, less the umask, as `mkdir` does),
/// syncing the parent of each directory it creates so that a power cut cannot take the
/// directory, and every synced file in it, away again.
pub fn create_dir_all_durably(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    if dir.is_dir() {
        return Ok(());
    }
    let parent = parent_of(dir);
    if parent != dir {
        create_dir_all_durably(parent, mode)?;
    }
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => sync_dir(parent),
        // Created meanwhile by another: whoever created it syncs it.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes `dir` (created as [`create_dir_all_durably`] does when missing) survive a power cut even
/// when it already exists: whoever made it, a provisioning script's `mkdir -p` a moment ago say,
/// may not have synced the directories that name it, and a power cut would then take it away
/// with every synced file in it. Syncs its parent, then each further ancestor as far as it may
/// (a directory it cannot open is not its to sync).
pub fn settle_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    create_dir_all_durably(dir, mode)?;
    // Absolute and free of `..`, so that the ancestors are the directories that name it.
    let dir = dir.canonicalize()?;
    let mut ancestors = dir.ancestors().skip(1);
    if let Some(parent) = ancestors.next() {
        sync_dir(parent)?;
    }
    for ancestor in ancestors {
        if let Err(e) = sync_dir(ancestor) {
            tracing::debug!(dir = %ancestor.display(), "not synced: {e}");
        }
    }
    Ok(())
}

/// The directory that names `path` (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => path,
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// A TLS server's configuration, and the check of client certificates made after each
/// handshake.
#[derive(Clone)]
pub struct Serving {
    /// The rustls configuration.
    pub config: Arc<ServerConfig>,
    /// Checks the certificate a client presented; `None`: client certificates are not asked for.
    clients: Option<Arc<dyn ClientCertVerifier>>,
}

impl From<Arc<ServerConfig>> for Serving {
    /// A configuration that asks for no client certificates.
    fn from(config: Arc<ServerConfig>) -> Serving {
        Serving {
            config,
            clients: None,
        }
    }
}

impl Serving {
    /// What the client certificate of a finished handshake says, if one was presented.
    fn client_certificate(
        &self,
        chain: Option<&[CertificateDer<'_>]>,
    ) -> Option<ClientCertificate> {
        let checker = self.clients.as_ref()?;
        let (end_entity, intermediates) = chain?.split_first()?;
        let checked = checker
            .verify_client_cert(end_entity, intermediates, UnixTime::now())
            .map_err(|e| e.to_string())
            .and_then(|_| skiff_pki::subject_of(end_entity).map_err(|e| e.to_string()))
            .and_then(|subject| match subject.common_name.is_empty() {
                true => Err("the certificate names no user (empty common name)".to_string()),
                false => Ok(subject),
            });
        Some(match checked {
            Ok(subject) => ClientCertificate::Verified(subject),
            Err(reason) => ClientCertificate::Invalid(reason),
        })
    }
}

/// What the TLS layer learned of a connection's client certificate; every request on the
/// connection carries it (in its extensions) to the authenticator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCertificate {
    /// It chains to the cluster CA, is meant for client authentication and is valid now.
    Verified(skiff_pki::Subject),
    /// It was presented but does not hold (another CA, expired, not for client auth): why.
    Invalid(String),
}

/// A client certificate verifier that lets the handshake through with any certificate whose key
/// the client proves it holds, leaving the chain to [`Serving::client_certificate`].
#[derive(Debug)]
struct Deferred(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for Deferred {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Serves `filter` over TLS on `listener` until `shutdown` is cancelled.
///
/// Each connection negotiates HTTP/2 or HTTP/1.1 (ALPN from `tls`; upgrades such as
/// `exec`/`port-forward` are allowed). On cancellation the listener is closed at once and
/// in-flight requests are allowed to finish: the future completes when every connection has
/// closed. Long-lived responses (watches, log follows) must end on their own when `shutdown`
/// is cancelled, and the caller bounds the drain with its grace timeout.
///
/// A connection must send each request's headers within `header_read_timeout`
/// ([`crate::limits::Settings::header_read_timeout`])
/// (counted from the end of the TLS handshake, or of the previous request), or it is closed.
pub async fn serve<F, R>(
    listener: TcpListener,
    tls: impl Into<Serving>,
    filter: F,
    shutdown: CancellationToken,
    header_read_timeout: Duration,
    audit: Option<Arc<crate::audit::Auditor>>,
) where
    F: Filter<Extract = (R,), Error = Rejection> + Clone + Send + Sync + 'static,
    R: Reply,
{
    run(
        listener,
        Some(tls.into()),
        filter,
        shutdown,
        header_read_timeout,
        audit,
    )
    .await;
}

/// Serves `filter` over plain HTTP (HTTP/1.1 or prior-knowledge HTTP/2) on `listener`, which
/// must be bound to a loopback address: this is the explicit debug listener, and kubectl sends
/// no credentials over plain HTTP anyway. Shutdown as in [`serve`].
pub async fn serve_plain<F, R>(
    listener: TcpListener,
    filter: F,
    shutdown: CancellationToken,
    header_read_timeout: Duration,
    audit: Option<Arc<crate::audit::Auditor>>,
) -> Result<()>
where
    F: Filter<Extract = (R,), Error = Rejection> + Clone + Send + Sync + 'static,
    R: Reply,
{
    check_loopback(listener.local_addr().map_err(Error::ListenerAddress)?)?;
    run(listener, None, filter, shutdown, header_read_timeout, audit).await;
    Ok(())
}

fn check_loopback(addr: SocketAddr) -> Result<()> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(Error::NotLoopback(addr))
    }
}

async fn run<F, R>(
    listener: TcpListener,
    tls: Option<Serving>,
    filter: F,
    shutdown: CancellationToken,
    header_timeout: Duration,
    audit: Option<Arc<crate::audit::Auditor>>,
) where
    F: Filter<Extract = (R,), Error = Rejection> + Clone + Send + Sync + 'static,
    R: Reply,
{
    let service = TowerToHyperService::new(warp::service(filter));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper only enforces its header read timeout with a timer; without one a client sending
    // its headers a byte at a time holds the connection forever (slowloris).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let watcher = graceful.watcher();
        let service = service.clone();
        let builder = builder.clone();
        let tls = tls.clone();
        let audit = audit.clone();
        tokio::spawn(async move {
            match tls {
                Some(serving) => {
                    let acceptor = TlsAcceptor::from(serving.config.clone());
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let client =
                                serving.client_certificate(stream.get_ref().1.peer_certificates());
                            let stream = FirstByte::new(stream, header_timeout);
                            drive(builder, stream, service, watcher, peer, client, audit).await
                        }
                        Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => {
                    let stream = FirstByte::new(stream, header_timeout);
                    drive(builder, stream, service, watcher, peer, None, audit).await
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

async fn drive<I, S, B>(
    builder: auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    watcher: Watcher,
    peer: SocketAddr,
    client: Option<ClientCertificate>,
    audit: Option<Arc<crate::audit::Auditor>>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<http::Request<hyper::body::Incoming>, Response = http::Response<B>>
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Each HTTP/1 request carries a handle that closes this connection: a watch whose client
    // stopped reading ends it that way (hyper no longer polls a body it cannot write). Over
    // HTTP/2 the connection carries the client's other requests and watches too (client-go
    // multiplexes them all on one), so such a watch ends alone: its body fails when it is next
    // polled, which resets its stream, as kube-apiserver closes only the stalled watch.
    let close = crate::limits::Connection::default();
    let closed = close.0.clone();
    // With auditing on, each request is recorded ([`crate::audit`]); off, one branch.
    let service = hyper::service::service_fn(move |mut request: http::Request<_>| {
        use futures::{TryFutureExt as _, future::Either};
        if request.version() < http::Version::HTTP_2 {
            request.extensions_mut().insert(close.clone());
        }
        if let Some(client) = &client {
            request.extensions_mut().insert(client.clone());
        }
        match &audit {
            None => Either::Left(
                service
                    .call(request)
                    .map_ok(|r| r.map(http_body_util::Either::Left)),
            ),
            Some(auditor) => {
                let handle = auditor.begin(&mut request, Some(peer));
                Either::Right(
                    crate::audit::finish(handle, service.call(request))
                        .map_ok(|r| r.map(http_body_util::Either::Right)),
                )
            }
        }
    });
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::select! {
        ended = watcher.watch(conn.into_owned()) => {
            if let Err(error) = ended {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        }
        _ = closed.cancelled() => tracing::debug!(%peer, "connection closed by the server"),
    }
}

/// A connection that must send its first byte within a deadline. hyper's header read timeout
/// starts once HTTP/1 is chosen, and the choice (HTTP/1 or HTTP/2) waits for bytes: a client that
/// connects and sends nothing would hold its connection forever.
struct FirstByte<I> {
    io: I,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> FirstByte<I> {
    fn new(io: I, within: Duration) -> FirstByte<I> {
        FirstByte {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
        }
    }
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for FirstByte<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let expired = self
                    .deadline
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if expired {
                    Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no request within the header read timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for FirstByte<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Helpers for this crate's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::PathBuf;

    use http_body_util::BodyExt as _;
    use hyper::service::Service as _;
    use warp::{Filter, Rejection, Reply};

    /// A fresh, empty directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            let path = std::env::temp_dir().join(format!(
                "skiff-api-{tag}-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Runs one request through `filter` as the server would (rejections become warp's default
    /// responses) and returns the response with its whole body.
    pub(crate) async fn call<F, R>(
        filter: F,
        request: http::Request<String>,
    ) -> http::Response<bytes::Bytes>
    where
        F: Filter<Extract = (R,), Error = Rejection> + Clone + Send + Sync + 'static,
        R: Reply,
    {
        let service = hyper_util::service::TowerToHyperService::new(warp::service(filter));
        let response = service.call(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        http::Response::from_parts(parts, body)
    }

    /// Serves `filter` over HTTP/1.1 on a new loopback port (a backend or a kubelet for a test
    /// to reach over the network); returns its address.
    pub(crate) async fn serve_loopback<F, R>(filter: F) -> std::net::SocketAddr
    where
        F: Filter<Extract = (R,), Error = Rejection> + Clone + Send + Sync + 'static,
        R: Reply,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let service = hyper_util::service::TowerToHyperService::new(warp::service(filter));
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let service = service.clone();
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        address
    }

    /// An API server on a fresh sled store, its routes called in process as the admin.
    pub(crate) struct Cluster {
        routes: warp::filters::BoxedFilter<(crate::request::Response,)>,
        admin: String,
        _store: std::sync::Arc<dyn skiff_store::Store>,
        _dir: TempDir,
    }

    impl Cluster {
        /// A server (data under a temp dir named after `tag`) that presents `kubelet_token` to
        /// kubelets.
        pub(crate) async fn new(tag: &str, kubelet_token: &str) -> Cluster {
            let dir = TempDir::new(tag);
            let store =
                skiff_store::SledStore::open(skiff_store::Config::new(dir.0.join("db"))).unwrap();
            let store: std::sync::Arc<dyn skiff_store::Store> = std::sync::Arc::new(store);
            let config = crate::server::Config {
                kubelet_token: Some(kubelet_token.into()),
                ..crate::server::Config::default()
            };
            let api = crate::server::ApiServer::new(
                store.clone(),
                config,
                tokio_util::sync::CancellationToken::new(),
            )
            .await
            .unwrap();
            let authenticator = std::sync::Arc::new(
                crate::auth::Authenticator::load_or_create(&dir.0.join("tokens.csv")).unwrap(),
            );
            let admin = authenticator.admin_token().unwrap();
            Cluster {
                routes: crate::routes(api, authenticator),
                admin,
                _store: store,
                _dir: dir,
            }
        }

        /// One request as the admin, with `headers` besides the token.
        pub(crate) async fn send(
            &self,
            method: &str,
            uri: &str,
            headers: &[(&str, &str)],
            body: &str,
        ) -> http::Response<bytes::Bytes> {
            let mut request = http::Request::builder()
                .method(method)
                .uri(uri)
                .header("authorization", format!("Bearer {}", self.admin));
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            call(self.routes.clone(), request.body(body.to_string()).unwrap()).await
        }

        /// Creates `object` at `uri`, which must succeed; returns what the server answered.
        pub(crate) async fn create(
            &self,
            uri: &str,
            object: serde_json::Value,
        ) -> serde_json::Value {
            let response = self
                .send(
                    "POST",
                    uri,
                    &[("content-type", "application/json")],
                    &object.to_string(),
                )
                .await;
            assert!(
                response.status().is_success(),
                "{uri}: {} {}",
                response.status(),
                String::from_utf8_lossy(response.body())
            );
            json(&response)
        }
    }

    /// A GET request for `uri` with the given headers.
    pub(crate) fn get(uri: &str, headers: &[(&str, &str)]) -> http::Request<String> {
        let mut builder = http::Request::get(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(String::new()).unwrap()
    }

    /// The body as JSON.
    pub(crate) fn json(response: &http::Response<bytes::Bytes>) -> serde_json::Value {
        serde_json::from_slice(response.body()).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(response.body())
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::testing::TempDir;
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn creates_then_reuses_the_pki() {
        let dir = TempDir::new("pki");
        let pki_dir = dir.0.join("tls");
        let sans = default_sans(&[]);
        let first = Pki::load_or_create(&pki_dir, &sans).unwrap();
        assert!(first.server_reissued());
        assert_eq!(mode(&pki_dir.join(CA_KEY_FILE)), 0o600);
        assert_eq!(mode(&pki_dir.join(SERVER_KEY_FILE)), 0o600);
        assert_eq!(mode(&pki_dir), 0o700);
        first.server_config().unwrap();

        let second = Pki::load_or_create(&pki_dir, &sans).unwrap();
        assert!(!second.server_reissued());
        assert_eq!(first.ca_pem(), second.ca_pem());
        assert_eq!(first.server_cert_pem(), second.server_cert_pem());
    }

    /// Postmortem: files were renamed into place without an fsync of their directory (nor of the
    /// directories created for them), so a power cut after the first start lost the CA and the
    /// token file and the server came back as a new cluster.
    #[test]
    fn the_ca_and_the_tokens_survive_a_power_cut() {
        let Some(disk) = skiff_powercut::PowerCut::mount() else {
            eprintln!("SKIPPED: cannot mount a FUSE file system here (needs root and /dev/fuse)");
            return;
        };
        let data = disk.path().join("data");
        let sans = default_sans(&[]);
        let pki = Pki::load_or_create(&data.join("pki"), &sans).unwrap();
        let tokens = crate::auth::Authenticator::load_or_create(&data.join("tokens.csv")).unwrap();
        disk.freeze();
        disk.restore_power();
        let again = Pki::load_or_create(&data.join("pki"), &sans).unwrap();
        assert_eq!(pki.ca_pem(), again.ca_pem(), "a new CA after the power cut");
        let tokens_again =
            crate::auth::Authenticator::load_or_create(&data.join("tokens.csv")).unwrap();
        assert_eq!(tokens.admin_token(), tokens_again.admin_token());
        assert!(disk.stats().dir_syncs > 0);
    }

    /// A data dir made by `mkdir` just before the server's first start (nothing synced it) and
    /// settled by the server survives a power cut, and the files in it with it.
    #[test]
    fn a_settled_dir_made_by_another_survives_a_power_cut() {
        let Some(disk) = skiff_powercut::PowerCut::mount() else {
            eprintln!("SKIPPED: cannot mount a FUSE file system here (needs root and /dev/fuse)");
            return;
        };
        let data = disk.path().join("var/lib/skiff");
        fs::create_dir_all(&data).unwrap();
        settle_dir(&data, 0o700).unwrap();
        write_atomically(&data.join("token"), b"kept", 0o600).unwrap();
        // Made the same way but not settled: the power cut takes it.
        let other = disk.path().join("other");
        fs::create_dir_all(&other).unwrap();
        disk.freeze();
        disk.restore_power();
        assert_eq!(fs::read(data.join("token")).unwrap(), b"kept");
        assert!(
            !other.exists(),
            "the file system under test kept an unsynced directory"
        );
    }

    #[test]
    fn new_names_reissue_the_serving_cert_but_keep_the_ca() {
        let dir = TempDir::new("pki-sans");
        let first = Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap();
        let more = default_sans(&["10.1.2.3".into(), "skiff.example".into()]);
        let second = Pki::load_or_create(&dir.0, &more).unwrap();
        assert!(second.server_reissued());
        assert_eq!(first.ca_pem(), second.ca_pem());
        assert_ne!(first.server_cert_pem(), second.server_cert_pem());
        // The new certificate covers the new names and is signed by the kept CA.
        let ca = parse_cert(Path::new("ca"), second.ca_pem()).unwrap();
        let cert = parse_cert(Path::new("server"), second.server_cert_pem()).unwrap();
        assert!(covers(&ca, &cert, &more).unwrap());
        // The old one did not.
        let old = parse_cert(Path::new("old"), first.server_cert_pem()).unwrap();
        assert!(!covers(&ca, &old, &more).unwrap());
    }

    #[test]
    fn a_serving_cert_from_another_ca_is_replaced() {
        let dir = TempDir::new("pki-foreign");
        let other = TempDir::new("pki-other");
        let sans = default_sans(&[]);
        Pki::load_or_create(&dir.0, &sans).unwrap();
        let foreign = Pki::load_or_create(&other.0, &sans).unwrap();
        fs::copy(other.0.join(SERVER_CERT_FILE), dir.0.join(SERVER_CERT_FILE)).unwrap();
        fs::copy(other.0.join(SERVER_KEY_FILE), dir.0.join(SERVER_KEY_FILE)).unwrap();
        let reloaded = Pki::load_or_create(&dir.0, &sans).unwrap();
        assert!(reloaded.server_reissued());
        assert_ne!(reloaded.server_cert_pem(), foreign.server_cert_pem());
    }

    #[test]
    fn an_incomplete_ca_is_an_error() {
        let dir = TempDir::new("pki-incomplete");
        Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap();
        fs::remove_file(dir.0.join(CA_KEY_FILE)).unwrap();
        let err = Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap_err();
        assert!(matches!(err, Error::IncompleteCa { .. }), "{err:?}");
    }

    #[test]
    fn a_garbled_ca_is_an_error() {
        let dir = TempDir::new("pki-garbled");
        fs::write(dir.0.join(CA_CERT_FILE), "not a certificate").unwrap();
        fs::write(dir.0.join(CA_KEY_FILE), "not a key").unwrap();
        let err = Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap_err();
        assert!(
            matches!(&err, Error::Pki { path, source: skiff_pki::Error::BadKey } if path.ends_with(CA_KEY_FILE)),
            "{err:?}"
        );
        let good = skiff_pki::Authority::generate("x", Duration::from_secs(3600)).unwrap();
        fs::write(dir.0.join(CA_KEY_FILE), good.key_pem()).unwrap();
        let err = Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap_err();
        assert!(
            matches!(&err, Error::Pki { path, source: skiff_pki::Error::BadCertificate(_) } if path.ends_with(CA_CERT_FILE)),
            "{err:?}"
        );
    }

    #[test]
    fn default_sans_have_loopback_and_no_duplicates() {
        let sans = default_sans(&["LOCALHOST".into(), "10.0.0.1".into(), "".into()]);
        assert!(sans.contains(&"127.0.0.1".to_string()));
        assert!(sans.contains(&"::1".to_string()));
        assert!(sans.contains(&"10.0.0.1".to_string()));
        assert_eq!(
            sans.iter()
                .filter(|s| s.eq_ignore_ascii_case("localhost"))
                .count(),
            1
        );
        assert!(!sans.iter().any(|s| s.is_empty()));
    }

    fn client(pki: &Pki, http1_only: bool) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(pki.ca_pem().as_bytes()).unwrap();
        let builder = reqwest::Client::builder().tls_certs_only([ca]);
        let builder = if http1_only {
            builder.http1_only()
        } else {
            builder
        };
        builder.build().unwrap()
    }

    #[tokio::test]
    async fn client_certificates_are_checked_after_the_handshake_and_handed_to_requests() {
        let dir = TempDir::new("client-certs");
        let pki = Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://127.0.0.1:{}/who",
            listener.local_addr().unwrap().port()
        );
        let shutdown = CancellationToken::new();
        let filter = warp::path("who")
            .and(warp::ext::optional::<ClientCertificate>())
            .map(|client: Option<ClientCertificate>| match client {
                None => "none".to_string(),
                Some(ClientCertificate::Verified(s)) => {
                    format!("{} in {}", s.common_name, s.organizations.join(","))
                }
                Some(ClientCertificate::Invalid(_)) => "invalid".to_string(),
            });
        let server = tokio::spawn(serve(
            listener,
            pki.server_config().unwrap(),
            filter,
            shutdown.clone(),
            Duration::from_secs(32),
            None,
        ));
        let with = |credentials: Option<skiff_pki::Credentials>| {
            let ca = reqwest::Certificate::from_pem(pki.ca_pem().as_bytes()).unwrap();
            let mut builder = reqwest::Client::builder().tls_certs_only([ca]);
            if let Some(c) = credentials {
                let pem = format!("{}{}", c.cert_pem, c.key_pem);
                builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
            }
            builder.build().unwrap()
        };
        let ask = |client: reqwest::Client| {
            let url = url.clone();
            async move { client.get(&url).send().await.unwrap().text().await.unwrap() }
        };
        let year = Duration::from_secs(365 * 24 * 3600);
        let alice = skiff_pki::Subject::new("alice", &["devs"]);
        let issued = pki.authority().issue_client(&alice, year).unwrap();
        assert_eq!(ask(with(Some(issued))).await, "alice in devs");
        assert_eq!(ask(with(None)).await, "none");
        let foreign = skiff_pki::Authority::generate("other", year).unwrap();
        let foreign = foreign.issue_client(&alice, year).unwrap();
        assert_eq!(ask(with(Some(foreign))).await, "invalid");
        let expired = pki
            .authority()
            .issue_client(&alice, Duration::ZERO)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(ask(with(Some(expired))).await, "invalid");
        let nameless = pki
            .authority()
            .issue_client(&skiff_pki::Subject::new("", &["devs"]), year)
            .unwrap();
        assert_eq!(ask(with(Some(nameless))).await, "invalid");
        shutdown.cancel();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn serves_a_filter_over_https_with_http1_and_http2() {
        let dir = TempDir::new("serve");
        let pki = Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let filter = warp::path("hello").map(|| "hi there");
        let server = tokio::spawn(serve(
            listener,
            pki.server_config().unwrap(),
            filter,
            shutdown.clone(),
            Duration::from_secs(32),
            None,
        ));

        for (http1_only, host, want) in [
            (true, "127.0.0.1", http::Version::HTTP_11),
            (false, "localhost", http::Version::HTTP_2),
        ] {
            let url = format!("https://{host}:{}/hello", addr.port());
            let response = client(&pki, http1_only).get(&url).send().await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(response.version(), want);
            assert_eq!(response.text().await.unwrap(), "hi there");
        }

        // A client that does not trust this CA is refused.
        let untrusting = reqwest::Client::builder()
            .tls_certs_only([])
            .build()
            .unwrap();
        let url = format!("https://127.0.0.1:{}/hello", addr.port());
        assert!(untrusting.get(&url).send().await.is_err());

        shutdown.cancel();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn graceful_shutdown_finishes_in_flight_requests_and_stops_accepting() {
        let dir = TempDir::new("graceful");
        let pki = Pki::load_or_create(&dir.0, &default_sans(&[])).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let release = Arc::new(tokio::sync::Notify::new());
        let filter = {
            let release = release.clone();
            warp::path("slow").and_then(move || {
                let started = started_tx.clone();
                let release = release.clone();
                async move {
                    let notified = release.notified();
                    started.send(()).unwrap();
                    notified.await;
                    Ok::<_, Rejection>("done")
                }
            })
        };
        let server = tokio::spawn(serve(
            listener,
            pki.server_config().unwrap(),
            filter,
            shutdown.clone(),
            Duration::from_secs(32),
            None,
        ));
        let url = format!("https://127.0.0.1:{}/slow", addr.port());
        let request = tokio::spawn(client(&pki, false).get(url.clone()).send());
        started_rx.recv().await.unwrap();

        shutdown.cancel();
        // The listener closes although a request is still in flight.
        loop {
            match tokio::net::TcpStream::connect(addr).await {
                Err(_) => break,
                Ok(_) => tokio::task::yield_now().await,
            }
        }
        assert!(!server.is_finished());
        release.notify_one();
        let response = request.await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.unwrap(), "done");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn slow_or_silent_clients_are_cut_off_at_the_header_read_timeout() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let timeout = Duration::from_millis(500);
        let server = tokio::spawn(serve_plain(
            listener,
            warp::path("x").map(|| "plain"),
            shutdown.clone(),
            timeout,
            None,
        ));
        // Reads until the server closes the connection; how long that took.
        async fn closed_after(stream: &mut tokio::net::TcpStream) -> Duration {
            let started = std::time::Instant::now();
            let mut buf = [0u8; 1024];
            loop {
                match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
                    Ok(Ok(_)) => {}
                    Err(_) => panic!("the server kept a slow connection open"),
                }
            }
        }
        // Slowloris: headers one byte every 100 ms (they would take ~4 s).
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        let writer = {
            let (_, mut half) = slow.split();
            let request = b"GET /x HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaa\r\n\r\n";
            let started = std::time::Instant::now();
            let mut sent = 0;
            for byte in request {
                if half.write_all(&[*byte]).await.is_err() {
                    break;
                }
                sent += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (sent, request.len(), started.elapsed())
        };
        let (sent, len, _) = writer;
        assert!(
            sent < len,
            "the slow client sent all {len} bytes of its headers"
        );
        let _ = closed_after(&mut slow).await;
        // A client that connects and sends nothing.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let after = closed_after(&mut silent).await;
        assert!(after < Duration::from_secs(2), "closed after {after:?}");
        // A prompt client is served.
        let body = reqwest::get(format!("http://{addr}/x"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "plain");
        shutdown.cancel();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn plain_http_only_on_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_plain(
            listener,
            warp::path("x").map(|| "plain"),
            shutdown.clone(),
            Duration::from_secs(32),
            None,
        ));
        let body = reqwest::get(format!("http://{addr}/x"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "plain");
        shutdown.cancel();
        server.await.unwrap().unwrap();

        // Any other address is refused before anything is served (checked without binding it:
        // tests only touch loopback).
        for addr in ["0.0.0.0:6443", "10.0.0.1:80", "[::]:6443"] {
            let err = check_loopback(addr.parse().unwrap()).unwrap_err();
            assert!(matches!(err, Error::NotLoopback(_)), "{err:?}");
        }
        check_loopback("[::1]:1".parse().unwrap()).unwrap();
    }
}

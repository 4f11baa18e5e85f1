//! Building a [`Client`]: from a kubeconfig, from a server URL with a bearer token and CA, or
//! from a join token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::join::JoinToken;
use crate::transport::Liveness;
use crate::{Error, Result};

/// Where a component finds the API server, as its command line gives it.
///
/// Exactly one of `kubeconfig` or `server` is used; `server` needs a `token` and a CA (a file,
/// or the hash inside a join token).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ClientConfig {
    /// Path to a kubeconfig naming the API server, its CA and a token (as Kubernetes components
    /// take it).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// URL of the API server (e.g. https://127.0.0.1:6443); used with --token. Several
    /// comma-separated servers of one cluster (on one datastore) are used in turn: the first
    /// that accepts connections, then the next when it stops.
    #[arg(long, env = "SKIFF_SERVER")]
    pub server: Option<String>,
    /// A bearer token or a join token (`skiff server` prints one and writes it to
    /// <data-dir>/join-token); a join token also pins the server's CA by its hash.
    #[arg(long, env = "SKIFF_TOKEN")]
    pub token: Option<String>,
    /// PEM file of the CA to trust for --server (not needed with a join token).
    #[arg(long)]
    pub certificate_authority: Option<PathBuf>,
}

impl ClientConfig {
    /// This configuration, with a `--server` list of several servers replaced by a loopback
    /// relay to them ([`crate::balancer`], running from now on); a single server as it is.
    pub async fn balanced(&self) -> Result<ClientConfig> {
        let Some(servers) = self.server.as_deref().and_then(crate::balancer::split) else {
            return Ok(self.clone());
        };
        let balancer = crate::balancer::Balancer::start(&servers).await?;
        Ok(ClientConfig {
            server: Some(balancer.url()),
            ..self.clone()
        })
    }
}

/// Installs the ring crypto provider for rustls once per process (kube and reqwest need one).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client for the API server `config` names, checked by one request (`/version`), so that an
/// unreachable or misconfigured server fails here with a clear message.
pub async fn connect(config: &ClientConfig) -> Result<Client> {
    install_crypto();
    let kube_config = match (&config.server, &config.kubeconfig) {
        (Some(server), _) => {
            let token = config
                .token
                .as_deref()
                .ok_or_else(|| Error::Config("--server needs --token".into()))?;
            match JoinToken::parse(token) {
                Ok(join) => {
                    let ca = crate::join::fetch_ca(server, &join).await?;
                    server_config(server, &ca, &join.secret)?
                }
                Err(_) => {
                    let path = config.certificate_authority.as_deref().ok_or_else(|| {
                        Error::Config(
                            "--server with a plain token needs --certificate-authority (or use a join token)"
                                .into(),
                        )
                    })?;
                    let ca = std::fs::read(path).map_err(|e| {
                        Error::Config(format!("reading CA {}: {e}", path.display()))
                    })?;
                    server_config(server, &ca, token)?
                }
            }
        }
        (None, Some(path)) => kubeconfig_config(path).await?,
        (None, None) => {
            return Err(Error::Config(
                "no API server given: pass --kubeconfig, or --server with --token".into(),
            ));
        }
    };
    let server = kube_config.cluster_url.to_string();
    let client = build(kube_config)?;
    match client.apiserver_version().await {
        Ok(_) => Ok(client),
        // An answer that is not "cannot serve now" (say 401 for a token it does not know).
        Err(source) if matches!(source, kube::Error::Api(_)) && !crate::transient(&source) => {
            Err(Error::Request {
                what: format!("the API server at {server} refused GET /version"),
                source,
            })
        }
        Err(e) => Err(Error::Unreachable {
            server,
            message: e.to_string(),
        }),
    }
}

/// A client for `server`, trusting the PEM bundle `ca_pem` and authenticating with `token`; no
/// request is made (components started inside `skiff server` use this).
pub fn connect_to(server: &str, ca_pem: &[u8], token: &str) -> Result<Client> {
    install_crypto();
    build(server_config(server, ca_pem, token)?)
}

/// A client for `server`, trusting the PEM bundle `ca_pem` and authenticating with the client
/// certificate `credentials` (its subject is the user); no request is made. The components
/// `skiff server` runs, and agents once they have their node certificate, use this.
pub fn connect_with_certificate(
    server: &str,
    ca_pem: &[u8],
    credentials: &skiff_pki::Credentials,
) -> Result<Client> {
    use base64::Engine as _;
    install_crypto();
    let mut config = base_config(server, ca_pem)?;
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    config.auth_info.client_certificate_data = Some(encode(&credentials.cert_pem));
    config.auth_info.client_key_data = Some(encode(&credentials.key_pem).into());
    build(config)
}

/// A client from a kubeconfig file, without a round trip.
pub(crate) async fn kubeconfig_config(path: &Path) -> Result<kube::Config> {
    let bad = |message: String| Error::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let file = Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    tune(&mut config);
    Ok(config)
}

/// A kube config for `server`, trusting the PEM `ca` and sending `token`.
pub(crate) fn server_config(server: &str, ca_pem: &[u8], token: &str) -> Result<kube::Config> {
    let mut config = base_config(server, ca_pem)?;
    let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| Error::Config("the token is not a valid header value".into()))?;
    config.headers.push((http::header::AUTHORIZATION, value));
    Ok(config)
}

/// A kube config for `server`, trusting the PEM `ca`, without credentials.
fn base_config(server: &str, ca_pem: &[u8]) -> Result<kube::Config> {
    let uri: http::Uri = server
        .parse()
        .map_err(|e| Error::Config(format!("server URL {server:?}: {e}")))?;
    let mut config = kube::Config::new(uri);
    let certs: Vec<Vec<u8>> = rustls_pemfile::certs(&mut &ca_pem[..])
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Config(format!("CA PEM: {e}")))?;
    if certs.is_empty() {
        return Err(Error::Config("the CA PEM holds no certificate".into()));
    }
    config.root_cert = Some(certs);
    tune(&mut config);
    Ok(config)
}

/// How long a request may wait for its response to begin before it is abandoned, and its
/// connection with it.
///
/// kube-apiserver answers every request within a minute (its `--request-timeout`) except watches,
/// log streams, exec and the like, and those begin their response at once; skiff's API server
/// does the same. So a minute without a response means the connection is gone. The kernel finds
/// most such connections sooner ([`crate::transport`]: keepalive, and a limit on unacknowledged
/// bytes); this limit is for what it cannot see, such as a relay on the way whose far side went
/// silent. Without it the HTTP/1.1 client (kube-rs) would wait out its read timeout, five
/// minutes. client-go finds such connections with HTTP/2 pings instead.
pub const RESPONSE_WITHIN: Duration = Duration::from_secs(60);

/// A client on `config` that sends a request again only when the server says when
/// ([`crate::retry`]), and abandons one whose response has not begun within
/// [`RESPONSE_WITHIN`].
pub(crate) fn build(config: kube::Config) -> Result<Client> {
    build_with(config, RESPONSE_WITHIN)
}

fn build_with(config: kube::Config, response_within: Duration) -> Result<Client> {
    let builder = crate::transport::client_builder(config, Liveness::default())?;
    // A retried request goes through the stack again: the buffer makes the stack cloneable.
    // The time limit is each attempt's.
    Ok(builder
        .with_layer(&tower::timeout::TimeoutLayer::new(response_within))
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(
            crate::retry::ServerDirected::default(),
        ))
        .build())
}

fn tune(config: &mut kube::Config) {
    // kube-rs's own retries are replaced by client-go's rule (`build`).
    config.default_retry = false;
    config.connect_timeout = Some(Duration::from_secs(10));
    // Watches are long-lived; the informer bounds each with a server-side timeout.
    config.read_timeout = Some(Duration::from_secs(330));
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on loopback that reads each request and answers `/version` after `delay`, or
    /// never when `delay` is None (a connection lost on the way looks the same to the client).
    async fn server(delay: Option<Duration>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = stream.read(&mut buffer).await;
                    let Some(delay) = delay else {
                        std::future::pending::<()>().await;
                        return;
                    };
                    tokio::time::sleep(delay).await;
                    let body = r#"{"major":"1","minor":"32","gitVersion":"v1.32.0","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        format!("http://{address}")
    }

    fn client(server: &str, response_within: Duration) -> Client {
        let mut config = kube::Config::new(server.parse().unwrap());
        tune(&mut config);
        build_with(config, response_within).unwrap()
    }

    #[tokio::test]
    async fn a_request_without_an_answer_is_abandoned() {
        let silent = server(None).await;
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(
            Duration::from_secs(20),
            client(&silent, Duration::from_millis(300)).apiserver_version(),
        )
        .await
        .expect("the request was still waiting after 20 s");
        let err = outcome.expect_err("a silent server answered");
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    }

    #[tokio::test]
    async fn a_slow_answer_within_the_limit_is_taken() {
        let slow = server(Some(Duration::from_millis(200))).await;
        let version = client(&slow, Duration::from_secs(5))
            .apiserver_version()
            .await
            .unwrap();
        assert_eq!(version.minor, "32");
    }
}

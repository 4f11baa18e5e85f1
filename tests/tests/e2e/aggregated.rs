//! An aggregated API server for the tests that need one behind an APIService: HTTPS on
//! 127.0.0.1 with a certificate for the Service's DNS name from its own test CA (the APIService's
//! `caBundle`), accepting only clients with a certificate of the front-proxy CA that skiff
//! publishes in `kube-system/extension-apiserver-authentication`. It records each request's path
//! and headers and answers 200 with what the test's function says.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request the server received: its path and headers (lower-case names).
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl Seen {
    /// The values of header `name` (lower case).
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Reads one request head.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let mut lines = head.lines();
    let path = lines.next()?.split_whitespace().nth(1)?.to_string();
    let headers = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    Some(Seen { path, headers })
}

/// The test's aggregated server, on its own runtime so that dropping the runtime stops it.
pub struct Backend {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The CA of its serving certificate, for the APIService's `caBundle`.
    pub ca_pem: String,
    /// The requests it received.
    pub seen: Arc<Mutex<Vec<Seen>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Backend {
    /// Serves on 127.0.0.1 as `host`, requiring a client certificate of `front_proxy_ca`, and
    /// answers each request with `answer`.
    pub fn start(
        front_proxy_ca: &str,
        host: &str,
        answer: impl Fn(&Seen) -> Value + Send + Sync + 'static,
    ) -> Backend {
        let answer = Arc::new(answer);
        let (ca_pem, cert, key) = skiff_tests::serving_certificate("aggregation test CA", &[host]);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let mut reader = front_proxy_ca.as_bytes();
        for ca in rustls_pemfile_certs(&mut reader) {
            roots.add(ca).unwrap();
        }
        let clients = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(clients)
            .with_single_cert(vec![cert], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, record, answer) = (acceptor.clone(), record.clone(), answer.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    // The client certificate chains to the front-proxy CA (the verifier
                    // checked); it must also be the front proxy's own.
                    let names_front_proxy = tls.get_ref().1.peer_certificates().is_some_and(|c| {
                        c.first().is_some_and(|c| {
                            c.as_ref()
                                .windows(b"front-proxy-client".len())
                                .any(|w| w == b"front-proxy-client")
                        })
                    });
                    let Some(mut seen) = read_head(&mut tls).await else {
                        return;
                    };
                    if !names_front_proxy {
                        seen.headers.push(("x-test-refused".into(), "not the front proxy".into()));
                    }
                    record.lock().unwrap().push(seen.clone());
                    let body = answer(&seen).to_string();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(response.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Backend {
            port,
            ca_pem,
            seen,
            runtime: Some(runtime),
        }
    }

    /// Stops serving.
    pub fn stop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The certificates of a PEM bundle (rustls' own PEM reader).
fn rustls_pemfile_certs(reader: &mut &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(reader)
        .map(|c| c.unwrap())
        .collect()
}

/// What skiff publishes for aggregated servers to authenticate its front proxy and its clients
/// (`kube-system/extension-apiserver-authentication`'s data).
pub fn authentication(k: &skiff_tests::Kubectl) -> Value {
    let configmap: Value = serde_json::from_str(&k.ok(&[
        "get",
        "configmap",
        "-n",
        "kube-system",
        "extension-apiserver-authentication",
        "-o",
        "json",
    ]))
    .unwrap();
    configmap["data"].clone()
}

/// The front-proxy CA that aggregated servers trust, as skiff publishes it.
pub fn front_proxy_ca(k: &skiff_tests::Kubectl) -> String {
    authentication(k)["requestheader-client-ca-file"]
        .as_str()
        .unwrap()
        .to_string()
}

/// How a test's Service leads to its backend.
#[derive(Clone, Copy, Debug)]
pub enum Reach {
    /// A selector-less Service with hand-made Endpoints on 127.0.0.1.
    Endpoints,
    /// A selector-less Service with a hand-made EndpointSlice only (no Endpoints).
    Slice,
    /// An `ExternalName` Service naming `localhost`.
    ExternalName,
}

/// Puts `backend` behind Service `default/service` (a selector-less Service with hand-made
/// Endpoints on 127.0.0.1) and registers it for each `(group, version)`.
pub fn register(
    k: &skiff_tests::Kubectl,
    backend: &Backend,
    service: &str,
    group_versions: &[(&str, &str)],
) {
    register_as(k, backend, service, group_versions, Reach::Endpoints);
}

/// Puts `backend` behind Service `default/service`, reached as `reach` says, and registers it
/// for each `(group, version)`.
pub fn register_as(
    k: &skiff_tests::Kubectl,
    backend: &Backend,
    service: &str,
    group_versions: &[(&str, &str)],
    reach: Reach,
) {
    use base64::Engine;
    let port = backend.port;
    // An ExternalName Service is dialled on the APIService's port itself.
    let service_port = match reach {
        Reach::ExternalName => i32::from(port),
        _ => 443,
    };
    let mut items = match reach {
        Reach::Endpoints => vec![
            serde_json::json!({"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": service, "namespace": "default"},
             "spec": {"ports": [{"name": "https", "port": 443}]}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Endpoints",
             "metadata": {"name": service, "namespace": "default"},
             "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                          "ports": [{"name": "https", "port": port}]}]}),
        ],
        Reach::Slice => vec![
            serde_json::json!({"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": service, "namespace": "default"},
             "spec": {"ports": [{"name": "https", "port": 443}]}}),
            serde_json::json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": format!("{service}-1"), "namespace": "default",
                          "labels": {"kubernetes.io/service-name": service}},
             "addressType": "IPv4", "ports": [{"name": "https", "port": port}],
             "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]}),
        ],
        Reach::ExternalName => vec![serde_json::json!({"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": service, "namespace": "default"},
             "spec": {"type": "ExternalName", "externalName": "localhost"}})],
    };
    for (group, version) in group_versions {
        items.push(
            serde_json::json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": format!("{version}.{group}")},
         "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
                  "versionPriority": 100,
                  "service": {"namespace": "default", "name": service, "port": service_port},
                  "caBundle": base64::engine::general_purpose::STANDARD.encode(&backend.ca_pem)}}),
        );
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    k.ok_with_input(&["apply", "-f", "-"], &list.to_string());
}

//! The built-in ingress controller end to end under `skiff server`: two Deployments of HTTP pods
//! (python3 processes on loopback pod IPs) behind two Services, Ingresses made with kubectl
//! routing two hosts to them on the controller's loopback HTTP and HTTPS ports, one over TLS
//! with SNI from a Secret made by `kubectl create secret tls`; the default class filled in at
//! admission; a changed Ingress taking effect while a keep-alive connection on another host stays
//! up; a route to a missing Service answering 503 while the others work; a missing TLS Secret
//! and an unenforced NetworkPolicy reported as Events; and `--disable ingress`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{Value, json};
use skiff_tests::{Kubectl, TestCluster, eventually, free_port};

/// Far above anything a wait needs; waits poll, nothing is timed.
const PATIENCE: Duration = Duration::from_secs(60);

/// The pod's server: HTTP/1.1 with keep-alive on `$POD_IP:8080`, answering every request with
/// the pod's name, the path and the forwarding headers it got. It exits when its parent (the
/// kubelet) goes away, so no python process outlives a test.
const POD_SERVER: &str = r#"
import os, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
name = os.environ["HOSTNAME"]
ip = os.environ["POD_IP"]
parent = os.getppid()

def orphaned():
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        h = self.headers
        body = ("%s %s host=%s xff=%s proto=%s fhost=%s\n" % (name, self.path, h.get("Host"),
                h.get("X-Forwarded-For"), h.get("X-Forwarded-Proto"), h.get("X-Forwarded-Host"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

threading.Thread(target=orphaned, daemon=True).start()
Server((ip, 8080), Handler).serve_forever()
"#;

/// One `skiff server` with the ingress on loopback ports of its own and a namespace for the
/// test's objects; deletes the namespace when dropped while panicking, then kills by pid any pod
/// process left.
struct Scenario {
    cluster: TestCluster,
    namespace: &'static str,
    marker: String,
    http: SocketAddr,
    https: SocketAddr,
    dir: tempfile::TempDir,
}

impl Scenario {
    fn start(namespace: &'static str, pod_cidr: &str, extra: &[&str]) -> Scenario {
        let node = format!("{namespace}-{}", std::process::id());
        let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (http_arg, https_arg) = (http.to_string(), https.to_string());
        let mut args = vec![
            "--node-name",
            &node,
            "--cluster-cidr",
            pod_cidr,
            "--no-nodeports",
            "--ingress-http-address",
            &http_arg,
            "--ingress-https-address",
            &https_arg,
        ];
        args.extend_from_slice(extra);
        let cluster = TestCluster::start_server(&args);
        let scenario = Scenario {
            cluster,
            namespace,
            marker: format!("skiff-e2e-{node}"),
            http,
            https,
            dir: tempfile::tempdir().expect("temp dir"),
        };
        scenario.kubectl().ok(&["create", "namespace", namespace]);
        scenario
    }

    fn kubectl(&self) -> Kubectl {
        self.cluster.kubectl()
    }

    fn ok(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.namespace];
        all.extend_from_slice(args);
        self.kubectl().ok(&all)
    }

    fn apply(&self, manifest: Value) {
        self.kubectl().ok_with_input(
            &["-n", self.namespace, "apply", "-f", "-"],
            &manifest.to_string(),
        );
    }

    /// A Deployment of one pod running [`POD_SERVER`] and a Service `name` (port 80, named
    /// `http`, to the pods' 8080); returns once the Service has a ready endpoint.
    fn deploy(&self, name: &str) {
        self.apply(json!({"apiVersion": "v1", "kind": "List", "items": [
            {
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "terminationGracePeriodSeconds": 2,
                            "containers": [{
                                "name": "server", "image": "python",
                                "command": ["python3", "-c", POD_SERVER, self.marker],
                                "ports": [{"name": "http", "containerPort": 8080}],
                                "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                                                   "periodSeconds": 1}
                            }]
                        }
                    }
                }
            },
            {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name},
                "spec": {"selector": {"app": name},
                         "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
            }
        ]}));
        let ready = eventually(PATIENCE, || {
            !self
                .ok(&[
                    "get",
                    "endpoints",
                    name,
                    "--ignore-not-found",
                    "-o",
                    "jsonpath={.subsets[*].addresses[*].ip}",
                ])
                .trim()
                .is_empty()
        });
        assert!(
            ready,
            "{name} never got a ready endpoint:\n{}",
            self.ok(&["get", "pods", "-o", "wide"])
        );
    }

    /// The pids of this run's pod processes still alive.
    fn pod_processes(&self) -> Vec<u32> {
        skiff_tests::processes_with_argument(&self.marker)
    }

    /// The reasons of the Events about `kind`/`name` in the namespace.
    fn event_reasons(&self, kind: &str, name: &str) -> BTreeSet<String> {
        let events: Value =
            serde_json::from_str(&self.ok(&["get", "events", "-o", "json"])).expect("events JSON");
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect()
    }

    fn finish(self) {
        self.kubectl()
            .ok(&["delete", "namespace", self.namespace, "--timeout=60s"]);
        let gone = eventually(PATIENCE, || self.pod_processes().is_empty());
        assert!(gone, "pod processes left: {:?}", self.pod_processes());
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let _ = self.kubectl().run(&[
            "delete",
            "namespace",
            self.namespace,
            "--ignore-not-found",
            "--timeout=30s",
        ]);
        for pid in self.pod_processes() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// One HTTP/1.1 response read off a keep-alive connection: the status and the body.
fn read_response(reader: &mut BufReader<TcpStream>) -> std::io::Result<(u16, String)> {
    let mut status_line = String::new();
    if reader.read_line(&mut status_line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A keep-alive HTTP/1.1 connection to the ingress.
struct KeepAlive {
    reader: BufReader<TcpStream>,
}

impl KeepAlive {
    fn open(target: SocketAddr) -> KeepAlive {
        let stream = TcpStream::connect_timeout(&target, Duration::from_secs(10)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        KeepAlive {
            reader: BufReader::new(stream),
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.reader.get_ref().local_addr().unwrap()
    }

    fn get(&mut self, host: &str, path: &str) -> std::io::Result<(u16, String)> {
        write!(
            self.reader.get_mut(),
            "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n"
        )?;
        read_response(&mut self.reader)
    }
}

/// One request on a connection of its own: the status and body, or the error.
fn get(target: SocketAddr, host: &str, path: &str) -> std::io::Result<(u16, String)> {
    let stream = TcpStream::connect_timeout(&target, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream);
    write!(
        reader.get_mut(),
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    read_response(&mut reader)
}

/// Waits until a request for `host` and `path` is answered `status` with a body that starts
/// with `prefix`; returns that body.
fn wait_for(target: SocketAddr, host: &str, path: &str, status: u16, prefix: &str) -> String {
    let mut last = None;
    let ok = eventually(PATIENCE, || {
        let answer = get(target, host, path);
        let done = matches!(&answer, Ok((s, body)) if *s == status && body.starts_with(prefix));
        last = Some(answer);
        done
    });
    let last = last.expect("at least one try");
    assert!(
        ok,
        "{host}{path} never answered {status} {prefix}...: last {last:?}"
    );
    last.unwrap().1
}

/// An HTTPS client that trusts one CA only and sends `host` as SNI to the ingress's HTTPS
/// address, on a small runtime of its own for the few requests of the test.
struct Https {
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    url: String,
}

impl Https {
    fn new(ca_pem: &str, host: &str, https: SocketAddr) -> Https {
        skiff_tests::install_crypto();
        let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA PEM");
        let client = reqwest::Client::builder()
            .tls_certs_only([ca])
            .resolve(host, https)
            .build()
            .expect("HTTPS client");
        Https {
            client,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            url: format!("https://{host}:{}", https.port()),
        }
    }

    /// GET `path`: the status and body, or the error (a certificate that does not verify for
    /// the host, say).
    fn get(&self, path: &str) -> Result<(u16, String), String> {
        self.runtime.block_on(async {
            let response = self
                .client
                .get(format!("{}{path}", self.url))
                .send()
                .await
                .map_err(|e| format!("{e:?}"))?;
            let status = response.status().as_u16();
            let body = response.text().await.map_err(|e| e.to_string())?;
            Ok((status, body))
        })
    }
}

#[test]
fn ingresses_route_hosts_and_paths_terminate_tls_follow_changes_and_report_faults() {
    let s = Scenario::start("ingress", "127.121.0.0/16", &[]);

    // The server made the default class.
    let class = s.kubectl().ok(&[
        "get",
        "ingressclass",
        "skiff",
        "-o",
        "jsonpath={.spec.controller} {.metadata.annotations.ingressclass\\.kubernetes\\.io/is-default-class}",
    ]);
    assert_eq!(class, "skiff.io/ingress true");

    s.deploy("alpha");
    s.deploy("beta");

    // A certificate for beta.example.com, signed by a CA of the test's own.
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "ingress test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["beta.example.com".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let (cert_file, key_file) = (s.dir.path().join("tls.crt"), s.dir.path().join("tls.key"));
    std::fs::write(&cert_file, leaf.pem()).unwrap();
    std::fs::write(&key_file, leaf_key.serialize_pem()).unwrap();
    s.ok(&[
        "create",
        "secret",
        "tls",
        "beta-tls",
        "--cert",
        cert_file.to_str().unwrap(),
        "--key",
        key_file.to_str().unwrap(),
    ]);

    // alpha: no class named (the default is filled in), a route to a Service that does not
    // exist. beta: over TLS with SNI, by port name, and a second TLS entry whose Secret is
    // missing.
    s.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "alpha"},
        "spec": {"rules": [{"host": "alpha.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "alpha", "port": {"number": 80}}}},
            {"path": "/missing", "pathType": "Prefix",
             "backend": {"service": {"name": "nowhere", "port": {"number": 80}}}}
        ]}}]}}),
    );
    s.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "beta"},
        "spec": {
            "ingressClassName": "skiff",
            "tls": [{"hosts": ["beta.example.com"], "secretName": "beta-tls"},
                    {"hosts": ["gamma.example.com"], "secretName": "gamma-tls"}],
            "rules": [{"host": "beta.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "beta", "port": {"name": "http"}}}}
            ]}}]}}),
    );
    assert_eq!(
        s.ok(&[
            "get",
            "ingress",
            "alpha",
            "-o",
            "jsonpath={.spec.ingressClassName}"
        ]),
        "skiff",
        "DefaultIngressClass filled in the class"
    );

    // Two hosts to two Services over plain HTTP, with the forwarding headers.
    let alpha = wait_for(s.http, "alpha.example.com", "/", 200, "alpha-");
    assert!(
        alpha
            .contains(" / host=alpha.example.com xff=127.0.0.1 proto=http fhost=alpha.example.com"),
        "{alpha}"
    );
    let beta = wait_for(s.http, "beta.example.com", "/x/y", 200, "beta-");
    assert!(beta.contains(" /x/y host=beta.example.com"), "{beta}");
    // No rule and no default backend: 404.
    assert_eq!(
        get(s.http, "nobody.example.com", "/").unwrap().0,
        404,
        "an unknown host"
    );
    // The route to the missing Service answers 503; the others go on working.
    let (status, body) = get(s.http, "alpha.example.com", "/missing/page").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("service ingress/nowhere not found"), "{body}");
    assert_eq!(get(s.http, "alpha.example.com", "/other").unwrap().0, 200);

    // TLS with SNI: beta.example.com's certificate verifies against the test's CA and the
    // request reaches beta; a host without a certificate gets the self-signed default, which
    // does not.
    let ca_pem = ca.pem();
    let tls_beta = Https::new(&ca_pem, "beta.example.com", s.https);
    let mut last = Err(String::new());
    let served = eventually(PATIENCE, || {
        last = tls_beta.get("/secure");
        matches!(&last, Ok((200, body)) if body.starts_with("beta-"))
    });
    assert!(served, "HTTPS to beta.example.com: {last:?}");
    let body = last.unwrap().1;
    // (reqwest names the port in the host, as it is not 443.)
    assert!(body.contains(" /secure host=beta.example.com:"), "{body}");
    assert!(body.contains(" xff=127.0.0.1 proto=https "), "{body}");
    let tls_alpha = Https::new(&ca_pem, "alpha.example.com", s.https);
    let refused = tls_alpha.get("/");
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_lowercase().contains("certificate")),
        "alpha.example.com has no certificate of the test's CA: {refused:?}"
    );

    // The missing TLS Secret is an Event on the Ingress.
    let reported = eventually(PATIENCE, || {
        s.event_reasons("Ingress", "beta")
            .contains("MissingTLSSecret")
    });
    assert!(
        reported,
        "no MissingTLSSecret event: {}",
        s.ok(&["get", "events"])
    );
    assert!(
        eventually(PATIENCE, || s
            .event_reasons("Ingress", "alpha")
            .contains("UnavailableBackend")),
        "no UnavailableBackend event"
    );

    // The node's address in the status, and kubectl's columns.
    assert!(
        eventually(PATIENCE, || {
            ["alpha", "beta"].iter().all(|name| {
                s.ok(&[
                    "get",
                    "ingress",
                    name,
                    "-o",
                    "jsonpath={.status.loadBalancer.ingress[*].ip}",
                ]) == "127.0.0.1"
            })
        }),
        "no address in the Ingresses' status"
    );
    let table = s.ok(&["get", "ingress", "beta"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
        "{table}"
    );
    assert_eq!(
        lines[1][..5],
        ["beta", "skiff", "beta.example.com", "127.0.0.1", "80,"],
        "{table}"
    );
    assert_eq!(lines[1][5], "443", "{table}");

    // A keep-alive connection on alpha.example.com stays up while beta's Ingress changes.
    let mut kept = KeepAlive::open(s.http);
    let before = kept.local_addr();
    let (status, body) = kept.get("alpha.example.com", "/").unwrap();
    assert_eq!((status, body.starts_with("alpha-")), (200, true), "{body}");
    s.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "beta"},
        "spec": {
            "ingressClassName": "skiff",
            "tls": [{"hosts": ["beta.example.com"], "secretName": "beta-tls"},
                    {"hosts": ["gamma.example.com"], "secretName": "gamma-tls"}],
            "rules": [{"host": "beta.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "beta", "port": {"name": "http"}}}},
                {"path": "/to-alpha", "pathType": "Exact",
                 "backend": {"service": {"name": "alpha", "port": {"number": 80}}}}
            ]}}]}}),
    );
    wait_for(s.http, "beta.example.com", "/to-alpha", 200, "alpha-");
    // Exact: a longer path still goes to beta.
    let (_, body) = get(s.http, "beta.example.com", "/to-alpha/more").unwrap();
    assert!(body.starts_with("beta-"), "{body}");
    for _ in 0..3 {
        let (status, body) = kept
            .get("alpha.example.com", "/again")
            .expect("the keep-alive connection survived the change");
        assert_eq!((status, body.starts_with("alpha-")), (200, true), "{body}");
        assert_eq!(kept.local_addr(), before, "the same TCP connection");
    }

    // NetworkPolicy is served and stored, and said not to be enforced.
    s.apply(
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-all"}, "spec": {"podSelector": {}}}),
    );
    assert_eq!(
        s.ok(&[
            "get",
            "networkpolicy",
            "deny-all",
            "-o",
            "jsonpath={.spec.policyTypes[*]}"
        ]),
        "Ingress",
        "defaulted policy types"
    );
    assert!(
        eventually(PATIENCE, || {
            s.event_reasons("NetworkPolicy", "deny-all")
                .contains("NetworkPolicyNotEnforced")
        }),
        "no NetworkPolicyNotEnforced event"
    );

    drop(kept);
    s.finish();
}

#[test]
fn disabled_ingress_serves_the_kinds_but_no_class_and_no_listener() {
    let s = Scenario::start("noingress", "127.122.0.0/16", &["--disable", "ingress"]);
    let classes = s.kubectl().ok(&["get", "ingressclasses", "-o", "name"]);
    assert_eq!(classes.trim(), "", "no default IngressClass");
    // The kinds are still served, with Kubernetes' validation.
    let invalid = s.kubectl().run_with_input(
        &["-n", s.namespace, "apply", "-f", "-"],
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "bad"},
        "spec": {"rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "relative", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"number": 80, "name": "http"}}}}
        ]}}]}})
        .to_string(),
    );
    let said = format!("{}{}", invalid.stdout, invalid.stderr);
    assert!(!invalid.ok, "{said}");
    assert!(said.contains("must be an absolute path"), "{said}");
    assert!(
        said.contains("cannot set both port name & port number"),
        "{said}"
    );
    s.kubectl().ok_with_input(
        &["-n", s.namespace, "apply", "-f", "-"],
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web"},
            "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}})
        .to_string(),
    );
    assert_eq!(
        s.ok(&[
            "get",
            "ingress",
            "web",
            "-o",
            "jsonpath={.spec.ingressClassName}"
        ]),
        "",
        "no default class to fill in"
    );
    // Nothing listens on the ingress ports.
    std::thread::sleep(Duration::from_secs(2));
    assert!(TcpStream::connect_timeout(&s.http, Duration::from_secs(2)).is_err());
    assert!(
        !s.cluster.log_text().contains("ingress: serving"),
        "the controller ran"
    );
    s.finish();
}

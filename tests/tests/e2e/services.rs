//! Services end to end under `skiff server` all-in-one: a Deployment applied with kubectl whose
//! pods (python3 processes on their loopback pod IPs) serve their own names, and the proxy in
//! front of them fed by the endpoints controller: round-robin, ClientIP affinity and its timeout,
//! scaling while a connection stays open, a deleted Service freeing its port, a NodePort, and
//! UDP echo.
//!
//! Pods are host processes here: each test deletes its namespace at the end, a guard does so when
//! the test fails, and the pods' servers exit by themselves when their parent (the kubelet inside
//! the server) goes away, so that no python process outlives a test.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use serde_json::json;
use skiff_tests::{Kubectl, TestCluster, eventually};

/// Far above anything a wait needs; waits poll, nothing is timed.
const PATIENCE: Duration = Duration::from_secs(60);

/// The pod's server: HTTP on `$POD_IP:8080` answering every GET with the pod's name (keep-alive
/// HTTP/1.1, so one connection can carry several requests), and UDP on `$POD_IP:5353` answering
/// each datagram with the name, a space and the datagram. It exits when its parent process
/// changes (the kubelet died without stopping it), so a killed server leaves nothing behind.
const POD_SERVER: &str = r#"
import os, socket, socketserver, threading, time
name = os.environ["HOSTNAME"].encode()
ip = os.environ["POD_IP"]
parent = os.getppid()

def orphaned():
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)

def udp_echo():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((ip, 5353))
    while True:
        data, peer = s.recvfrom(65535)
        s.sendto(name + b" " + data, peer)

class Name(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            line = self.rfile.readline()
            if not line:
                return
            if line in (b"\r\n", b"\n"):
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(name), name))

class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

threading.Thread(target=orphaned, daemon=True).start()
threading.Thread(target=udp_echo, daemon=True).start()
Server((ip, 8080), Name).serve_forever()
"#;

/// One `skiff server` with its pods in `namespace`: deletes the namespace when dropped (also when
/// the test fails), then kills by pid whatever pod process is still there.
struct Scenario {
    cluster: TestCluster,
    namespace: &'static str,
    /// An argument of every pod process of this test run, to find them in `/proc`.
    marker: String,
}

impl Scenario {
    /// Starts the server (its own node name and pod range, so that tests running side by side
    /// never hand out the same pod IP; NodePorts on loopback) and creates `namespace`.
    fn start(namespace: &'static str, pod_cidr: &str) -> Scenario {
        let node = format!("{namespace}-{}", std::process::id());
        let cluster = TestCluster::start_server(&[
            "--node-name",
            &node,
            "--cluster-cidr",
            pod_cidr,
            "--nodeport-address",
            "127.0.0.1",
        ]);
        let scenario = Scenario {
            cluster,
            namespace,
            marker: format!("skiff-e2e-{node}"),
        };
        scenario.kubectl().ok(&["create", "namespace", namespace]);
        scenario
    }

    fn kubectl(&self) -> Kubectl {
        self.cluster.kubectl()
    }

    /// Runs kubectl in the scenario's namespace; panics unless it succeeds.
    fn ok(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.namespace];
        all.extend_from_slice(args);
        self.kubectl().ok(&all)
    }

    /// Applies a JSON manifest in the scenario's namespace.
    fn apply(&self, manifest: serde_json::Value) {
        self.kubectl().ok_with_input(
            &["-n", self.namespace, "apply", "-f", "-"],
            &manifest.to_string(),
        );
    }

    /// A Deployment of `replicas` pods running [`POD_SERVER`], ready once it answers HTTP.
    fn deploy(&self, name: &str, replicas: u32) {
        self.apply(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{
                            "name": "server",
                            "image": "python",
                            "command": ["python3", "-c", POD_SERVER, self.marker],
                            "ports": [
                                {"name": "http", "containerPort": 8080},
                                {"name": "echo", "containerPort": 5353, "protocol": "UDP"}
                            ],
                            "readinessProbe": {
                                "httpGet": {"path": "/", "port": "http"},
                                "periodSeconds": 1
                            }
                        }]
                    }
                }
            }
        }));
    }

    /// The names of the pods labelled `app=<app>`.
    fn pod_names(&self, app: &str) -> BTreeSet<String> {
        self.ok(&[
            "get",
            "pods",
            "-l",
            &format!("app={app}"),
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .split_whitespace()
        .map(str::to_string)
        .collect()
    }

    /// Waits until the endpoints controller lists `count` ready addresses for `service`.
    fn wait_ready_endpoints(&self, service: &str, count: usize) {
        let ready = eventually(PATIENCE, || {
            self.ok(&[
                "get",
                "endpoints",
                service,
                "--ignore-not-found",
                "-o",
                "jsonpath={.subsets[*].addresses[*].ip}",
            ])
            .split_whitespace()
            .count()
                == count
        });
        assert!(
            ready,
            "{service} never had {count} ready endpoints:\n{}\n{}",
            self.ok(&["get", "endpoints", service, "-o", "yaml"]),
            self.ok(&["get", "pods", "-o", "wide"]),
        );
    }

    /// A field of a Service, by JSONPath.
    fn service_field(&self, service: &str, path: &str) -> String {
        self.ok(&[
            "get",
            "service",
            service,
            "-o",
            &format!("jsonpath={{{path}}}"),
        ])
    }

    /// The pids of this run's pod processes still alive.
    fn pod_processes(&self) -> Vec<u32> {
        skiff_tests::processes_with_argument(&self.marker)
    }

    /// Deletes the namespace (the kubelet stops the pods) and checks that no pod process is left.
    fn finish(self) {
        self.kubectl()
            .ok(&["delete", "namespace", self.namespace, "--timeout=60s"]);
        let gone = eventually(PATIENCE, || self.pod_processes().is_empty());
        assert!(
            gone,
            "pod processes left after deleting the namespace: {:?}",
            self.pod_processes()
        );
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
            eprintln!("killing pod process {pid} left after a failed test");
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// Connects to `target` from `source` (any port), so that the proxy sees `source` as the client
/// IP.
fn connect(target: SocketAddr, source: IpAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect_timeout(&target.into(), Duration::from_secs(10))?;
    let stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(stream)
}

/// Sends one GET on `stream` and returns the body of the response: the name of the pod reached.
fn request(stream: &mut TcpStream) -> std::io::Result<String> {
    stream.write_all(b"GET / HTTP/1.1\r\nHost: web\r\n\r\n")?;
    let mut response = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        response.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&response);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|l| l.trim().parse().ok())
                .ok_or_else(|| std::io::Error::other(format!("no Content-Length in {head:?}")))?;
            if body.len() >= length {
                return Ok(body[..length].to_string());
            }
        }
    }
}

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// One GET over a new connection from `source`: the name of the pod reached.
fn get_from(target: SocketAddr, source: IpAddr) -> std::io::Result<String> {
    request(&mut connect(target, source)?)
}

/// One GET over a new connection from 127.0.0.1.
fn get(target: SocketAddr) -> std::io::Result<String> {
    get_from(target, LOCALHOST)
}

/// How many of `n` requests over new connections reached each pod.
fn spread(target: SocketAddr, n: usize) -> BTreeMap<String, usize> {
    let mut hits = BTreeMap::new();
    for i in 0..n {
        let name = get(target).unwrap_or_else(|e| panic!("request {i} through {target}: {e}"));
        *hits.entry(name).or_insert(0) += 1;
    }
    hits
}

/// Waits until new connections to `target` have reached every pod of `pods` (the proxy follows
/// the endpoints), and nothing else.
fn wait_rotation_over(target: SocketAddr, pods: &BTreeSet<String>) {
    let mut seen = BTreeSet::new();
    let covered = eventually(PATIENCE, || {
        if let Ok(name) = get(target) {
            seen.insert(name);
        }
        seen.is_superset(pods)
    });
    assert!(
        covered,
        "requests through {target} reached {seen:?}, never all of {pods:?}"
    );
    assert_eq!(&seen, pods, "requests reached something that is not a pod");
}

/// The ClusterIP address of a Service port.
fn cluster_address(scenario: &Scenario, service: &str, port: u16) -> SocketAddr {
    let ip: IpAddr = scenario
        .service_field(service, ".spec.clusterIP")
        .parse()
        .expect("a ClusterIP");
    assert!(ip.is_loopback(), "ClusterIP {ip} is outside loopback");
    SocketAddr::new(ip, port)
}

#[test]
fn round_robin_affinity_scaling_and_deletion_through_the_cluster_ip() {
    let scenario = Scenario::start("rr", "127.101.0.0/16");
    scenario.deploy("web", 3);
    scenario.apply(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]
        }
    }));
    scenario.wait_ready_endpoints("web", 3);
    let address = cluster_address(&scenario, "web", 8000);
    let pods = scenario.pod_names("web");
    assert_eq!(pods.len(), 3, "{pods:?}");
    wait_rotation_over(address, &pods);

    // Round-robin, a new connection per request.
    let hits = spread(address, 300);
    let expected: BTreeMap<String, usize> = pods.iter().map(|p| (p.clone(), 100)).collect();
    assert_eq!(hits, expected, "300 requests over 3 pods");

    // ClientIP affinity: once the proxy has it, each client stays on one pod.
    scenario.ok(&[
        "patch",
        "service",
        "web",
        "-p",
        r#"{"spec":{"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":2}}}}"#,
    ]);
    let sticky = eventually(
        PATIENCE,
        || matches!((get(address), get(address)), (Ok(a), Ok(b)) if a == b),
    );
    assert!(sticky, "requests from one client never stuck to one pod");
    let first = get(address).unwrap();
    for _ in 0..30 {
        assert_eq!(
            get(address).unwrap(),
            first,
            "affinity broken for 127.0.0.1"
        );
    }
    // Another client IP is another client: the next pod of the rotation, its own affinity.
    let other_client = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let second = get_from(address, other_client).unwrap();
    assert_ne!(
        second, first,
        "a new client takes the next pod in the rotation"
    );
    for _ in 0..30 {
        assert_eq!(get_from(address, other_client).unwrap(), second);
        assert_eq!(get(address).unwrap(), first);
    }
    // Idle past the timeout, a client's record has expired: rotation resumes for it, then it
    // sticks to its new pod.
    std::thread::sleep(Duration::from_secs(3));
    let after = get(address).unwrap();
    assert!(
        after != first && pods.contains(&after),
        "after the affinity timeout 127.0.0.1 went to {after} again (was {first})"
    );
    assert_eq!(get(address).unwrap(), after);

    scenario.ok(&[
        "patch",
        "service",
        "web",
        "-p",
        r#"{"spec":{"sessionAffinity":"None","sessionAffinityConfig":null}}"#,
    ]);
    let rotating = eventually(
        PATIENCE,
        || matches!((get(address), get(address)), (Ok(a), Ok(b)) if a != b),
    );
    assert!(rotating, "rotation never came back with affinity off");

    // Scaling while a connection through the proxy stays open.
    let mut long_lived = connect(address, LOCALHOST).unwrap();
    let held = request(&mut long_lived).unwrap();
    scenario.ok(&["scale", "deployment", "web", "--replicas=4"]);
    scenario.wait_ready_endpoints("web", 4);
    let scaled = scenario.pod_names("web");
    assert_eq!(scaled.len(), 4, "{scaled:?}");
    assert!(scaled.is_superset(&pods), "{scaled:?} lost one of {pods:?}");
    wait_rotation_over(address, &scaled);
    let hits = spread(address, 400);
    let expected: BTreeMap<String, usize> = scaled.iter().map(|p| (p.clone(), 100)).collect();
    assert_eq!(hits, expected, "400 requests over 4 pods");
    assert_eq!(
        request(&mut long_lived).expect("the connection opened before the scale broke"),
        held,
        "the long-lived connection keeps its pod"
    );
    drop(long_lived);

    // A deleted Service frees its port: nothing answers there, and it can be bound again.
    scenario.ok(&["delete", "service", "web"]);
    let freed = eventually(PATIENCE, || std::net::TcpListener::bind(address).is_ok());
    assert!(freed, "{address} still bound after the Service was deleted");
    let refused = TcpStream::connect_timeout(&address, Duration::from_secs(10))
        .expect_err("a connection to a deleted Service's port");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    scenario.finish();
}

#[test]
fn node_port_and_udp_echo() {
    let scenario = Scenario::start("np", "127.102.0.0/16");
    scenario.deploy("echo", 2);
    scenario.apply(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "echo"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "echo"},
            "ports": [
                {"name": "http", "port": 8000, "targetPort": "http"},
                {"name": "dns", "port": 5300, "protocol": "UDP", "targetPort": "echo"}
            ]
        }
    }));
    scenario.wait_ready_endpoints("echo", 2);
    let pods = scenario.pod_names("echo");
    assert_eq!(pods.len(), 2, "{pods:?}");
    let node_port = |name: &str| -> u16 {
        scenario
            .service_field(
                "echo",
                &format!(".spec.ports[?(@.name==\"{name}\")].nodePort"),
            )
            .parse()
            .expect("a nodePort")
    };

    // TCP through the NodePort on the loopback node address reaches both pods in turn.
    let http_node_port = SocketAddr::new(LOCALHOST, node_port("http"));
    wait_rotation_over(http_node_port, &pods);

    // UDP echo through the ClusterIP and through the NodePort: a flow per client socket.
    for target in [
        cluster_address(&scenario, "echo", 5300),
        SocketAddr::new(LOCALHOST, node_port("dns")),
    ] {
        let mut answered = BTreeSet::new();
        let mut n = 0;
        let echoed = eventually(PATIENCE, || {
            n += 1;
            let payload = format!("ping {n}");
            let Ok(socket) = UdpSocket::bind((LOCALHOST, 0)) else {
                return false;
            };
            socket
                .set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut buf = [0u8; 2048];
            if socket.send_to(payload.as_bytes(), target).is_err() {
                return false;
            }
            let Ok((len, from)) = socket.recv_from(&mut buf) else {
                return false;
            };
            assert_eq!(from, target, "the reply comes from the Service address");
            let reply = String::from_utf8_lossy(&buf[..len]).into_owned();
            let (pod, echoed) = reply
                .split_once(' ')
                .unwrap_or_else(|| panic!("not an echo: {reply:?}"));
            assert_eq!(echoed, payload);
            assert!(pods.contains(pod), "echo from {pod}, not one of {pods:?}");
            answered.insert(pod.to_string());
            answered == pods
        });
        assert!(
            echoed,
            "UDP through {target} reached {answered:?}, not every pod of {pods:?}"
        );
    }

    scenario.finish();
}

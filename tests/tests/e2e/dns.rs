//! Cluster DNS end to end under `skiff server`: Services and a StatefulSet created with kubectl,
//! their names asked of the server's DNS (found through the `kube-dns` Endpoints) by a real
//! resolver (hickory-resolver) set up as a `ClusterFirst` pod's resolv.conf is: the namespace's
//! search list and `ndots:5`. Short, namespace-qualified and full names, a StatefulSet pod's
//! stable name, SRV for named ports, PTR, NXDOMAIN at once for missing cluster names, FORMERR for
//! malformed queries, TCP, and forwarding to an upstream server the test runs on loopback.
//!
//! Pods are host processes (the process runtime): they share the host's /etc/resolv.conf, so the
//! resolver here stands in for the one a pod with its own resolv.conf would use.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Metadata, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::{Time, TokioRuntimeProvider};
use hickory_resolver::{Resolver, TokioResolver};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use serde_json::json;
use skiff_tests::{Kubectl, TestCluster, eventually};

const PATIENCE: Duration = Duration::from_secs(60);
const NS: &str = "dnse2e";
/// The kube-dns ClusterIP of this test's server.
const SERVICE_IP: &str = "127.96.5.53";

/// The StatefulSet's pods: sleep until their parent (the kubelet inside the server) goes away.
const POD: &str = r#"
import os, time
parent = os.getppid()
while os.getppid() == parent:
    time.sleep(0.2)
"#;

/// The upstream the cluster DNS forwards to: `*.upstream.test` is 192.0.2.77 (only an answer;
/// nothing is sent there), every other name NXDOMAIN. Counts the questions it gets.
struct Upstream {
    asked: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl RequestHandler for Upstream {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let query = &request.queries.queries()[0];
        let name = query.original().name().clone();
        let answers: Vec<Record> = if name.to_string().ends_with(".upstream.test.") {
            if query.query_type() == RecordType::A {
                vec![Record::from_rdata(
                    name,
                    60,
                    RData::A(A::new(192, 0, 2, 77)),
                )]
            } else {
                Vec::new()
            }
        } else {
            metadata.response_code = ResponseCode::NXDomain;
            Vec::new()
        };
        let builder = MessageResponseBuilder::from_message_request(request);
        let message = builder.build(
            metadata,
            answers.iter(),
            std::iter::empty(),
            std::iter::empty(),
            std::iter::empty(),
        );
        response
            .send_response(message)
            .await
            .expect("the upstream answers")
    }
}

/// A resolver of `server` set up as a `ClusterFirst` pod in [`NS`]: searches and `ndots:5`; no
/// cache, so that every lookup asks the server.
fn pod_resolver(server: SocketAddr, tcp_only: bool) -> TokioResolver {
    let mut connections = Vec::new();
    if !tcp_only {
        let mut udp = ConnectionConfig::udp();
        udp.port = server.port();
        connections.push(udp);
    }
    let mut tcp = ConnectionConfig::tcp();
    tcp.port = server.port();
    connections.push(tcp);
    let searches = [
        format!("{NS}.svc.cluster.local."),
        "svc.cluster.local.".to_string(),
        "cluster.local.".to_string(),
    ]
    .iter()
    .map(|s| Name::from_ascii(s).unwrap())
    .collect();
    let config = ResolverConfig::from_parts(
        None,
        searches,
        vec![NameServerConfig::new(server.ip(), true, connections)],
    );
    let mut builder = Resolver::builder_with_config(config, TokioRuntimeProvider::default());
    let options = builder.options_mut();
    options.ndots = 5;
    options.cache_size = 0;
    options.use_hosts_file = ResolveHosts::Never;
    options.timeout = Duration::from_secs(3);
    options.attempts = 1;
    builder.build().expect("a resolver")
}

/// What a lookup gave: the records' data as text (sorted), or the error's kind.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Records(Vec<String>),
    NxDomain,
    NoData,
    Failed(String),
}

fn ask(
    rt: &tokio::runtime::Runtime,
    resolver: &TokioResolver,
    name: &str,
    rtype: RecordType,
) -> Got {
    match rt.block_on(resolver.lookup(name, rtype)) {
        Ok(lookup) => {
            let mut out: Vec<String> = lookup
                .answers()
                .iter()
                .filter(|r| r.record_type() == rtype)
                .map(|r| r.data.to_string())
                .collect();
            out.sort();
            Got::Records(out)
        }
        Err(e) if e.is_nx_domain() => Got::NxDomain,
        Err(e) if e.is_no_records_found() => Got::NoData,
        Err(e) => Got::Failed(e.to_string()),
    }
}

fn records(items: &[&str]) -> Got {
    let mut out: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    out.sort();
    Got::Records(out)
}

fn reverse(ip: &str) -> String {
    let ip: IpAddr = ip.parse().unwrap();
    Name::from(ip).to_string()
}

fn field(k: &Kubectl, args: &[&str], path: &str) -> String {
    let mut all = vec!["-n", NS];
    all.extend_from_slice(args);
    let expr = format!("jsonpath={path}");
    all.extend(["-o", &expr]);
    k.ok(&all)
}

/// Sends `packet` over UDP to `server` and returns the response's code.
fn raw_query(server: SocketAddr, packet: &[u8]) -> ResponseCode {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket.send_to(packet, server).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = socket
        .recv_from(&mut buf)
        .expect("an answer, not a timeout");
    Message::from_vec(&buf[..n])
        .expect("a DNS message")
        .metadata
        .response_code
}

#[test]
fn cluster_dns_answers_services_pods_and_forwards_the_rest() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The upstream, on loopback.
    let asked = Arc::new(AtomicUsize::new(0));
    let upstream_socket = rt
        .block_on(tokio::net::UdpSocket::bind("127.0.0.1:0"))
        .unwrap();
    let upstream = upstream_socket.local_addr().unwrap();
    let mut upstream_server = hickory_server::Server::new(Upstream {
        asked: Arc::clone(&asked),
    });
    rt.block_on(async { upstream_server.register_socket(upstream_socket) });

    let node = format!("dns-{}", std::process::id());
    let cluster = TestCluster::start_server(&[
        "--node-name",
        &node,
        "--cluster-cidr",
        "127.109.0.0/16",
        "--no-nodeports",
        "--dns-upstream",
        &upstream.to_string(),
        // A kube-dns ClusterIP of this test's own: servers of other tests hold the default one.
        "--dns-service-ip",
        SERVICE_IP,
    ]);
    let k = cluster.kubectl();

    // kube-dns in kube-system: port 53 over UDP and TCP at its ClusterIP, in front of the server.
    let mut server = None;
    let found = eventually(PATIENCE, || {
        let text = k
            .run(&[
                "-n",
                "kube-system",
                "get",
                "endpoints",
                "kube-dns",
                "-o",
                "jsonpath={.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}",
            ])
            .stdout;
        server = text.trim().parse::<SocketAddr>().ok();
        server.is_some()
    });
    assert!(found, "no kube-dns Endpoints:\n{}", cluster.log_text());
    let server = server.unwrap();
    assert!(server.ip().is_loopback() && server.port() != 0);
    let service = k.ok(&[
        "-n",
        "kube-system",
        "get",
        "service",
        "kube-dns",
        "-o",
        "jsonpath={.spec.clusterIP} {.spec.ports[*].name} {.spec.ports[*].port} {.spec.ports[*].protocol} {.spec.ports[0].targetPort}",
    ]);
    assert_eq!(
        service,
        format!("{SERVICE_IP} dns dns-tcp 53 53 UDP TCP {}", server.port())
    );

    k.ok(&["create", "namespace", NS]);
    // A ClusterIP Service with a named port (no pods needed for its address) and a headless
    // Service with a StatefulSet of two pods behind it.
    k.ok_with_input(
        &["-n", NS, "apply", "-f", "-"],
        &json!({
            "apiVersion": "v1", "kind": "List", "items": [
                {
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "db"},
                    "spec": {"ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}
                },
                {
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "web"},
                    "spec": {
                        "clusterIP": "None",
                        "selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]
                    }
                },
                {
                    "apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": {"name": "web"},
                    "spec": {
                        "serviceName": "web",
                        "replicas": 2,
                        "podManagementPolicy": "Parallel",
                        "selector": {"matchLabels": {"app": "web"}},
                        "template": {
                            "metadata": {"labels": {"app": "web"}},
                            "spec": {
                                "terminationGracePeriodSeconds": 1,
                                "containers": [{
                                    "name": "c",
                                    "image": "python",
                                    "command": ["python3", "-c", POD, format!("skiff-e2e-{node}")],
                                    "ports": [{"containerPort": 8080, "name": "http"}]
                                }]
                            }
                        }
                    }
                }
            ]
        })
        .to_string(),
    );
    let ready = eventually(PATIENCE, || {
        field(
            &k,
            &["get", "endpoints", "web"],
            "{.subsets[*].addresses[*].ip}",
        )
        .split_whitespace()
        .count()
            == 2
    });
    assert!(
        ready,
        "the StatefulSet's pods never became endpoints:\n{}",
        k.ok(&["-n", NS, "get", "pods", "-o", "wide"])
    );
    let db_ip = field(&k, &["get", "service", "db"], "{.spec.clusterIP}");
    let web0 = field(&k, &["get", "pod", "web-0"], "{.status.podIP}");
    let web1 = field(&k, &["get", "pod", "web-1"], "{.status.podIP}");

    let resolver = pod_resolver(server, false);
    let full = format!("db.{NS}.svc.cluster.local.");
    // The zone follows the API's watch: wait for the Service to appear.
    let seen = eventually(PATIENCE, || {
        ask(&rt, &resolver, &full, RecordType::A) == records(&[&db_ip])
            && ask(&rt, &resolver, "web-1.web", RecordType::A) == records(&[&web1])
    });
    assert!(seen, "db and web-1 never resolved:\n{}", cluster.log_text());

    // Short, namespace-qualified and full names, through the search list.
    for name in ["db", &format!("db.{NS}"), &format!("db.{NS}.svc"), &full] {
        assert_eq!(
            ask(&rt, &resolver, name, RecordType::A),
            records(&[&db_ip]),
            "{name}"
        );
    }
    // The headless Service: every ready pod; each pod by its stable name.
    assert_eq!(
        ask(&rt, &resolver, "web", RecordType::A),
        records(&[&web0, &web1])
    );
    assert_eq!(
        ask(
            &rt,
            &resolver,
            &format!("web-0.web.{NS}.svc.cluster.local."),
            RecordType::A
        ),
        records(&[&web0])
    );
    // SRV for named ports: the Service's port for a ClusterIP, each pod's port for headless.
    assert_eq!(
        ask(
            &rt,
            &resolver,
            &format!("_pg._tcp.db.{NS}.svc.cluster.local."),
            RecordType::SRV
        ),
        records(&[&format!("0 100 5432 db.{NS}.svc.cluster.local.")])
    );
    assert_eq!(
        ask(&rt, &resolver, "_http._tcp.web", RecordType::SRV),
        records(&[
            &format!("0 50 8080 web-0.web.{NS}.svc.cluster.local."),
            &format!("0 50 8080 web-1.web.{NS}.svc.cluster.local."),
        ])
    );
    // PTR for a Service's and a pod's address.
    assert_eq!(
        ask(&rt, &resolver, &reverse(&db_ip), RecordType::PTR),
        records(&[&full])
    );
    assert_eq!(
        ask(&rt, &resolver, &reverse(&web0), RecordType::PTR),
        records(&[&format!("web-0.web.{NS}.svc.cluster.local.")])
    );
    // No AAAA for an IPv4 Service: the name exists.
    assert_eq!(ask(&rt, &resolver, &full, RecordType::AAAA), Got::NoData);

    // Missing names in the cluster domain: NXDOMAIN, at once, and never asked upstream.
    let before = asked.load(Ordering::SeqCst);
    let started = Instant::now();
    for name in [
        format!("nope.{NS}.svc.cluster.local."),
        "db.elsewhere.svc.cluster.local.".to_string(),
        format!("web-7.web.{NS}.svc.cluster.local."),
    ] {
        assert_eq!(
            ask(&rt, &resolver, &name, RecordType::A),
            Got::NxDomain,
            "{name}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "NXDOMAIN took {:?}",
        started.elapsed()
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        before,
        "cluster names went upstream"
    );

    // Other names go to the upstream, and its NXDOMAIN comes back as such.
    assert_eq!(
        ask(&rt, &resolver, "www.upstream.test.", RecordType::A),
        records(&["192.0.2.77"])
    );
    assert!(
        asked.load(Ordering::SeqCst) > before,
        "the upstream was never asked"
    );
    assert_eq!(
        ask(&rt, &resolver, "missing.example.", RecordType::A),
        Got::NxDomain
    );

    // TCP answers the same.
    let tcp = pod_resolver(server, true);
    assert_eq!(ask(&rt, &tcp, "db", RecordType::A), records(&[&db_ip]));

    // The kube-dns ClusterIP answers on port 53 over UDP and TCP, through the proxy (whose
    // listeners on port 53 need root or CAP_NET_BIND_SERVICE).
    let cluster_ip = SocketAddr::new(SERVICE_IP.parse().unwrap(), 53);
    if std::net::UdpSocket::bind("127.96.5.54:53").is_ok() {
        let via_udp = pod_resolver(cluster_ip, false);
        let via_tcp = pod_resolver(cluster_ip, true);
        let proxied = eventually(PATIENCE, || {
            ask(&rt, &via_udp, "db", RecordType::A) == records(&[&db_ip])
                && ask(&rt, &via_tcp, "web-0.web", RecordType::A) == records(&[&web0])
        });
        assert!(
            proxied,
            "the kube-dns ClusterIP never answered:\n{}",
            cluster.log_text()
        );
    } else {
        eprintln!("not checking the kube-dns ClusterIP: binding port 53 needs privileges");
    }

    // Malformed queries: a question cut short, and two questions in one message.
    let cut = [
        0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0x3f, b'd', b'b',
    ];
    assert_eq!(raw_query(server, &cut), ResponseCode::FormErr);
    let mut two = Message::query();
    two.metadata.id = 7;
    two.add_query(Query::query(
        Name::from_ascii(&full).unwrap(),
        RecordType::A,
    ));
    two.add_query(Query::query(
        Name::from_ascii("web.").unwrap(),
        RecordType::A,
    ));
    assert_eq!(
        raw_query(server, &two.to_vec().unwrap()),
        ResponseCode::FormErr
    );

    // A deleted Service disappears from the zone.
    k.ok(&["-n", NS, "delete", "service", "db"]);
    let gone = eventually(PATIENCE, || {
        ask(&rt, &resolver, &full, RecordType::A) == Got::NxDomain
    });
    assert!(gone, "the deleted Service still resolves");

    k.ok(&["delete", "namespace", NS, "--timeout=60s"]);
    rt.block_on(async {
        let _ = upstream_server.shutdown_gracefully().await;
    });
}

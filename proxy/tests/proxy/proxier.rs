//! The proxier against real loopback backends: round-robin, affinity, endpoint and Service
//! changes, refused endpoints, NodePorts, UDP flows and bulk transfers through splice.
//!
//! Each test uses its own ClusterIP (127.96.<n>.1) so the tests can run in parallel.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Service};
use serde_json::json;
use skiff_proxy::{Clock, Config, Proxier, ServicePortName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

/// A safety net against hangs, far above anything the operations need.
const PATIENCE: Duration = Duration::from_secs(20);

fn config() -> Config {
    Config {
        node_port_address: Some("127.0.0.1".parse().unwrap()),
        udp_idle_timeout: Duration::from_millis(200),
        ..Config::default()
    }
}

/// A clock the test moves by hand.
struct ManualClock(Mutex<Instant>);

impl ManualClock {
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

/// A TCP backend on `ip` that greets each connection with its name and a newline, then echoes.
async fn backend(ip: &str, name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                if stream
                    .write_all(format!("{name}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// A loopback address nothing listens on (connects are refused).
async fn dead_endpoint(ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    listener.local_addr().unwrap()
}

fn service(name: &str, cluster_ip: &str, spec: serde_json::Value) -> Service {
    let mut value = json!({
        "metadata": {"namespace": "default", "name": name},
        "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                 "ports": [{"name": "http", "port": 8080}]}
    });
    for (k, v) in spec.as_object().unwrap() {
        value["spec"][k] = v.clone();
    }
    serde_json::from_value(value).unwrap()
}

fn endpoints(name: &str, port: &str, addrs: &[SocketAddr]) -> Endpoints {
    let subsets: Vec<_> = addrs
        .iter()
        .map(|a| json!({"addresses": [{"ip": a.ip().to_string()}], "ports": [{"name": port, "port": a.port()}]}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name},
        "subsets": subsets
    }))
    .unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Connects (from `source` if given) and reads the greeting of the backend reached.
async fn greeting_from(target: SocketAddr, source: Option<&str>) -> std::io::Result<String> {
    tokio::time::timeout(PATIENCE, async {
        let stream = match source {
            Some(ip) => {
                let socket = TcpSocket::new_v4()?;
                socket.bind(SocketAddr::new(ip.parse().unwrap(), 0))?;
                socket.connect(target).await?
            }
            None => TcpStream::connect(target).await?,
        };
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).await?;
        if line.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end().to_owned())
    })
    .await
    .expect("no answer within the patience limit: the proxy hangs")
}

async fn greeting(target: SocketAddr) -> String {
    greeting_from(target, None).await.unwrap()
}

fn key(name: &str, port: &str) -> ServicePortName {
    ServicePortName::new("default", name, port)
}

#[tokio::test]
async fn three_hundred_connections_split_evenly_across_three_endpoints() {
    let backends = [
        backend("127.0.0.1", "a").await,
        backend("127.0.0.2", "b").await,
        backend("127.0.0.3", "c").await,
    ];
    let shutdown = CancellationToken::new();
    let mut proxier = Proxier::new(config(), shutdown.clone());
    let report = proxier
        .sync(
            [service("rr", "127.96.1.1", json!({}))],
            [endpoints("rr", "http", &backends)],
        )
        .await;
    assert_eq!(report.opened, 1, "{report:?}");
    assert!(report.failed.is_empty());
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..300 {
        *counts
            .entry(greeting(sa("127.96.1.1:8080")).await)
            .or_default() += 1;
    }
    assert_eq!(
        counts,
        HashMap::from([("a".into(), 100), ("b".into(), 100), ("c".into(), 100)])
    );
    proxier.shutdown().await;
}

#[tokio::test]
async fn client_ip_affinity_holds_until_its_timeout_then_rotation_resumes() {
    let backends = [
        backend("127.0.0.1", "a").await,
        backend("127.0.0.2", "b").await,
        backend("127.0.0.3", "c").await,
    ];
    let clock = Arc::new(ManualClock(Mutex::new(Instant::now())));
    let mut proxier = Proxier::with_clock(config(), CancellationToken::new(), clock.clone());
    let svc = service(
        "sticky",
        "127.96.2.1",
        json!({"sessionAffinity": "ClientIP",
               "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 30}}}),
    );
    proxier
        .sync([svc], [endpoints("sticky", "http", &backends)])
        .await;
    let target = sa("127.96.2.1:8080");
    let first = greeting_from(target, Some("127.0.0.5")).await.unwrap();
    for _ in 0..50 {
        clock.advance(Duration::from_secs(20));
        assert_eq!(
            greeting_from(target, Some("127.0.0.5")).await.unwrap(),
            first
        );
    }
    // Another client is not stuck to the first client's endpoint.
    let other = greeting_from(target, Some("127.0.0.6")).await.unwrap();
    assert_ne!(other, first);
    assert_eq!(
        greeting_from(target, Some("127.0.0.6")).await.unwrap(),
        other
    );
    // Silence longer than the timeout: the next connection is placed by the rotation again.
    clock.advance(Duration::from_secs(31));
    let after = greeting_from(target, Some("127.0.0.5")).await.unwrap();
    let third = greeting_from(target, Some("127.0.0.7")).await.unwrap();
    let mut seen = vec![first.clone(), other, after.clone(), third];
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "rotation resumed over all three: {seen:?}");
    assert_eq!(
        greeting_from(target, Some("127.0.0.5")).await.unwrap(),
        after
    );
    proxier.shutdown().await;
}

#[tokio::test]
async fn endpoint_changes_apply_at_once_and_established_connections_stay() {
    let a = backend("127.0.0.1", "a").await;
    let b = backend("127.0.0.2", "b").await;
    let c = backend("127.0.0.3", "c").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    let svc = service("moving", "127.96.3.1", json!({}));
    proxier
        .sync([&svc], [endpoints("moving", "http", &[a])])
        .await;
    let target = sa("127.96.3.1:8080");
    // A long-lived connection to "a".
    let mut long = BufReader::new(TcpStream::connect(target).await.unwrap());
    let mut line = String::new();
    long.read_line(&mut line).await.unwrap();
    assert_eq!(line, "a\n");

    // "a" leaves, "b" and "c" join: the very next connections see the new rotation.
    proxier
        .sync([&svc], [endpoints("moving", "http", &[b, c])])
        .await;
    let mut names: Vec<String> = Vec::new();
    for _ in 0..4 {
        names.push(greeting(target).await);
    }
    names.sort();
    assert_eq!(names, ["b", "b", "c", "c"]);

    // The established connection to "a" still carries bytes both ways.
    long.get_mut().write_all(b"still here\n").await.unwrap();
    line.clear();
    long.read_line(&mut line).await.unwrap();
    assert_eq!(line, "still here\n");

    // No endpoints left: the established connection still works too.
    proxier
        .sync([&svc], [endpoints("moving", "http", &[])])
        .await;
    long.get_mut().write_all(b"and here\n").await.unwrap();
    line.clear();
    long.read_line(&mut line).await.unwrap();
    assert_eq!(line, "and here\n");
    proxier.shutdown().await;
}

#[tokio::test]
async fn changed_port_recreates_only_that_listener() {
    let a = backend("127.0.0.1", "a").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    let two_ports = |second: u16| {
        service(
            "ports",
            "127.96.4.1",
            json!({"ports": [{"name": "http", "port": 8080}, {"name": "alt", "port": second}]}),
        )
    };
    let eps = {
        let mut e = endpoints("ports", "http", &[a]);
        // The same backend serves both port names.
        let subset = &mut e.subsets.as_mut().unwrap()[0];
        subset
            .ports
            .as_mut()
            .unwrap()
            .push(serde_json::from_value(json!({"name": "alt", "port": a.port()})).unwrap());
        e
    };
    proxier.sync([two_ports(8081)], [&eps]).await;
    let before = proxier.listeners();
    assert_eq!(before.len(), 2);
    let mut long = BufReader::new(TcpStream::connect(sa("127.96.4.1:8081")).await.unwrap());
    let mut line = String::new();
    long.read_line(&mut line).await.unwrap();
    assert_eq!(line, "a\n");

    let report = proxier.sync([two_ports(8082)], [&eps]).await;
    assert_eq!((report.opened, report.closed), (1, 1), "{report:?}");
    let after = proxier.listeners();
    let id_of = |list: &[skiff_proxy::ListenerInfo], port: &str| {
        list.iter()
            .find(|l| l.service.port == port)
            .unwrap()
            .clone()
    };
    assert_eq!(id_of(&before, "http"), id_of(&after, "http"), "untouched");
    assert_eq!(id_of(&after, "alt").address, sa("127.96.4.1:8082"));
    assert_ne!(id_of(&before, "alt").id, id_of(&after, "alt").id);
    // The old port is closed, the new one serves, the connection through the old one lives on.
    assert!(TcpStream::connect(sa("127.96.4.1:8081")).await.is_err());
    assert_eq!(greeting(sa("127.96.4.1:8082")).await, "a");
    assert_eq!(greeting(sa("127.96.4.1:8080")).await, "a");
    long.get_mut().write_all(b"ping\n").await.unwrap();
    line.clear();
    long.read_line(&mut line).await.unwrap();
    assert_eq!(line, "ping\n");
    proxier.shutdown().await;
}

#[tokio::test]
async fn deleted_service_closes_its_listeners_and_frees_the_port() {
    let a = backend("127.0.0.1", "a").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    let keep = service("keep", "127.96.5.2", json!({}));
    let gone = service(
        "gone",
        "127.96.5.1",
        json!({"type": "NodePort", "ports": [{"name": "http", "port": 8080, "nodePort": 30551}]}),
    );
    proxier
        .sync(
            [&keep, &gone],
            [
                endpoints("keep", "http", &[a]),
                endpoints("gone", "http", &[a]),
            ],
        )
        .await;
    assert_eq!(greeting(sa("127.96.5.1:8080")).await, "a");
    assert_eq!(greeting(sa("127.0.0.1:30551")).await, "a");
    let report = proxier
        .sync([&keep], [endpoints("keep", "http", &[a])])
        .await;
    assert_eq!(report.closed, 2);
    assert!(TcpStream::connect(sa("127.96.5.1:8080")).await.is_err());
    assert!(TcpStream::connect(sa("127.0.0.1:30551")).await.is_err());
    // The ports are free for anyone.
    drop(TcpListener::bind("127.96.5.1:8080").await.unwrap());
    drop(TcpListener::bind("127.0.0.1:30551").await.unwrap());
    assert!(proxier.balancer().endpoints(&key("gone", "http")).is_none());
    assert_eq!(greeting(sa("127.96.5.2:8080")).await, "a");
    proxier.shutdown().await;
}

#[tokio::test]
async fn after_a_restart_only_listed_services_are_served() {
    let a = backend("127.0.0.1", "a").await;
    let x = service("x", "127.96.6.1", json!({}));
    let y = service("y", "127.96.6.2", json!({}));
    let eps = [endpoints("x", "http", &[a]), endpoints("y", "http", &[a])];
    let mut first = Proxier::new(config(), CancellationToken::new());
    let report = first.sync([&x, &y], &eps).await;
    assert_eq!(report.opened, 2, "{report:?}");
    assert_eq!(greeting(sa("127.96.6.1:8080")).await, "a");
    first.shutdown().await;
    // "x" was deleted while the proxy was down: the new proxy's first full sync lacks it.
    let mut second = Proxier::new(config(), CancellationToken::new());
    let report = second.sync([&y], &eps).await;
    // A failure here names its cause (CI saw this list empty once, 7 Dec 2026, cause unknown).
    assert_eq!(report.opened, 1, "{report:?}");
    assert_eq!(second.listeners().len(), 1);
    assert!(TcpStream::connect(sa("127.96.6.1:8080")).await.is_err());
    assert_eq!(greeting(sa("127.96.6.2:8080")).await, "a");
    second.shutdown().await;
}

#[tokio::test]
async fn refused_endpoint_is_retried_on_the_next_one() {
    let dead = dead_endpoint("127.0.0.1").await;
    let live = backend("127.0.0.2", "live").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    proxier
        .sync(
            [service("retry", "127.96.7.1", json!({}))],
            [endpoints("retry", "http", &[dead, live])],
        )
        .await;
    for _ in 0..10 {
        assert_eq!(greeting(sa("127.96.7.1:8080")).await, "live");
    }
    proxier.shutdown().await;
}

#[tokio::test]
async fn affinity_to_a_refusing_endpoint_moves_the_client() {
    let dead = dead_endpoint("127.0.0.1").await;
    let live = backend("127.0.0.2", "live").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    proxier
        .sync(
            [service(
                "movers",
                "127.96.8.1",
                json!({"sessionAffinity": "ClientIP"}),
            )],
            [endpoints("movers", "http", &[dead, live])],
        )
        .await;
    for _ in 0..5 {
        assert_eq!(greeting(sa("127.96.8.1:8080")).await, "live");
    }
    proxier.shutdown().await;
}

#[tokio::test]
async fn all_endpoints_refusing_ends_the_connection_after_bounded_tries() {
    let dead = [
        dead_endpoint("127.0.0.1").await,
        dead_endpoint("127.0.0.2").await,
    ];
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    proxier
        .sync(
            [service("dead", "127.96.9.1", json!({}))],
            [endpoints("dead", "http", &dead)],
        )
        .await;
    let result = greeting_from(sa("127.96.9.1:8080"), None).await;
    assert!(result.is_err(), "{result:?}");
    proxier.shutdown().await;
}

#[tokio::test]
async fn service_without_ready_endpoints_refuses_at_once() {
    let mut proxier = Proxier::new(
        Config {
            // Were the proxy to try connecting anywhere, the test would hit its patience limit.
            connect_timeout: Duration::from_secs(3600),
            ..config()
        },
        CancellationToken::new(),
    );
    let not_ready: Endpoints = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "empty"},
        "subsets": [{"notReadyAddresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": 9}]}]
    }))
    .unwrap();
    proxier
        .sync([service("empty", "127.96.10.1", json!({}))], [not_ready])
        .await;
    let result = greeting_from(sa("127.96.10.1:8080"), None).await;
    assert!(result.is_err(), "{result:?}");
    // Also with no Endpoints object at all.
    proxier
        .sync(
            [service("empty", "127.96.10.1", json!({}))],
            Vec::<Endpoints>::new(),
        )
        .await;
    let result = greeting_from(sa("127.96.10.1:8080"), None).await;
    assert!(result.is_err(), "{result:?}");
    proxier.shutdown().await;
}

#[tokio::test]
async fn node_port_is_reachable() {
    let a = backend("127.0.0.1", "a").await;
    let b = backend("127.0.0.2", "b").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    proxier
        .sync(
            [service(
                "np",
                "127.96.11.1",
                json!({"type": "NodePort", "ports": [{"name": "http", "port": 8080, "nodePort": 30111}]}),
            )],
            [endpoints("np", "http", &[a, b])],
        )
        .await;
    let mut names = vec![
        greeting(sa("127.0.0.1:30111")).await,
        greeting(sa("127.0.0.1:30111")).await,
    ];
    names.sort();
    assert_eq!(names, ["a", "b"]);
    assert!(
        ["a", "b"].contains(&greeting(sa("127.96.11.1:8080")).await.as_str()),
        "and the ClusterIP"
    );
    proxier.shutdown().await;
}

#[tokio::test]
async fn bind_failure_is_reported_and_retried_on_the_next_sync() {
    let a = backend("127.0.0.1", "a").await;
    let squatter = TcpListener::bind("127.96.12.1:8080").await.unwrap();
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    let svc = service("busy", "127.96.12.1", json!({}));
    let eps = endpoints("busy", "http", &[a]);
    let report = proxier.sync([&svc], [&eps]).await;
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(matches!(
        report.failed[0].1,
        skiff_proxy::Error::Bind { .. }
    ));
    drop(squatter);
    let report = proxier.sync([&svc], [&eps]).await;
    assert_eq!(report.opened, 1, "{report:?}");
    assert_eq!(greeting(sa("127.96.12.1:8080")).await, "a");
    proxier.shutdown().await;
}

/// Transfers `size` bytes up, half-closes, and expects the backend's digest and the bytes back.
#[tokio::test]
async fn bulk_transfer_both_ways_with_half_close() {
    // A backend that reads to EOF, then answers with the length and a checksum, then the bytes.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut data = Vec::new();
                s.read_to_end(&mut data).await.unwrap();
                let sum: u64 = data.iter().map(|&b| b as u64).sum();
                s.write_all(format!("{} {}\n", data.len(), sum).as_bytes())
                    .await
                    .unwrap();
                s.write_all(&data).await.unwrap();
            });
        }
    });
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    proxier
        .sync(
            [service("bulk", "127.96.13.1", json!({}))],
            [endpoints("bulk", "http", &[addr])],
        )
        .await;
    let size = 8 * 1024 * 1024 + 17;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    let sum: u64 = data.iter().map(|&b| b as u64).sum();
    let stream = TcpStream::connect("127.96.13.1:8080").await.unwrap();
    let (mut r, mut w) = stream.into_split();
    let upload = {
        let data = data.clone();
        tokio::spawn(async move {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        })
    };
    let mut back = Vec::new();
    tokio::time::timeout(PATIENCE, r.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    upload.await.unwrap();
    let header = format!("{size} {sum}\n");
    assert_eq!(&back[..header.len()], header.as_bytes());
    assert!(back[header.len()..] == data[..], "bytes came back intact");
    proxier.shutdown().await;
}

/// Receives one datagram on `socket` (within the patience limit).
async fn recv_text(socket: &UdpSocket) -> String {
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(PATIENCE, socket.recv(&mut buf))
        .await
        .expect("no UDP reply")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A UDP backend that answers each datagram with its name, a colon and the datagram.
async fn udp_backend(ip: &str, name: &'static str) -> SocketAddr {
    let socket = UdpSocket::bind((ip, 0)).await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let reply = [name.as_bytes(), b":", &buf[..n]].concat();
            let _ = socket.send_to(&reply, from).await;
        }
    });
    addr
}

#[tokio::test]
async fn udp_echo_with_per_client_flows_and_idle_timeout() {
    let a = udp_backend("127.0.0.1", "a").await;
    let b = udp_backend("127.0.0.2", "b").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    let svc = service(
        "dns",
        "127.96.14.1",
        json!({"type": "NodePort", "ports": [{"name": "dns", "port": 5353, "protocol": "UDP", "nodePort": 30514}]}),
    );
    let eps: Endpoints = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "dns"},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "dns", "port": a.port(), "protocol": "UDP"}]},
                    {"addresses": [{"ip": "127.0.0.2"}], "ports": [{"name": "dns", "port": b.port(), "protocol": "UDP"}]}]
    }))
    .unwrap();
    let report = proxier.sync([&svc], [&eps]).await;
    assert_eq!(report.opened, 2, "{report:?}");

    let one = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    one.connect("127.96.14.1:5353").await.unwrap();
    let two = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    two.connect("127.96.14.1:5353").await.unwrap();
    one.send(b"hello").await.unwrap();
    let first = recv_text(&one).await;
    two.send(b"hi").await.unwrap();
    let second = recv_text(&two).await;
    let mut got = vec![first.clone(), second.clone()];
    got.sort();
    assert_eq!(got, ["a:hello", "b:hi"], "one flow per client, round-robin");
    // A flow keeps its endpoint while it is busy.
    for i in 0..5 {
        one.send(format!("again {i}").as_bytes()).await.unwrap();
        let reply = recv_text(&one).await;
        assert_eq!(reply[..1], first[..1], "{reply}");
    }
    // After the idle timeout the flow is gone: the next datagram opens a new one, placed by the
    // rotation (which is at "a" again after two picks).
    tokio::time::sleep(config().udp_idle_timeout * 5).await;
    one.send(b"later").await.unwrap();
    assert_eq!(recv_text(&one).await, "a:later");
    two.send(b"later").await.unwrap();
    assert_eq!(recv_text(&two).await, "b:later");

    // Through the NodePort as well.
    let three = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    three.connect("127.0.0.1:30514").await.unwrap();
    three.send(b"np").await.unwrap();
    let reply = recv_text(&three).await;
    assert!(reply == "a:np" || reply == "b:np", "{reply}");
    proxier.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_listeners_and_connections() {
    let a = backend("127.0.0.1", "a").await;
    let shutdown = CancellationToken::new();
    let mut proxier = Proxier::new(config(), shutdown.clone());
    proxier
        .sync(
            [service("bye", "127.96.15.1", json!({}))],
            [endpoints("bye", "http", &[a])],
        )
        .await;
    let mut long = TcpStream::connect("127.96.15.1:8080").await.unwrap();
    let mut buf = [0u8; 2];
    long.read_exact(&mut buf).await.unwrap();
    shutdown.cancel();
    proxier.shutdown().await;
    let mut rest = Vec::new();
    let n = tokio::time::timeout(PATIENCE, long.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "the proxied connection was closed");
    assert!(TcpStream::connect("127.96.15.1:8080").await.is_err());
}

#[tokio::test]
async fn a_dropped_proxier_closes_its_listeners() {
    let a = backend("127.0.0.1", "a").await;
    let mut proxier = Proxier::new(config(), CancellationToken::new());
    proxier
        .sync(
            [service("dropped", "127.96.16.1", json!({}))],
            [endpoints("dropped", "http", &[a])],
        )
        .await;
    assert_eq!(greeting(sa("127.96.16.1:8080")).await, "a");
    drop(proxier);
    tokio::time::timeout(PATIENCE, async {
        while TcpStream::connect("127.96.16.1:8080").await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the listener closes after the proxier is dropped");
}

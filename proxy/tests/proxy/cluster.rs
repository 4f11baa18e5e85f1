//! `skiff_proxy::run` against the real `skiff server`: a Service and hand-written Endpoints made
//! with kubectl, backends started by the test, the proxy fed by informers in this process.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use skiff_proxy::Options;
use skiff_tests::TestCluster;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

/// A safety net against hangs, far above anything the operations need.
const PATIENCE: Duration = Duration::from_secs(30);

/// A TCP backend that greets each connection with its name and a newline, then echoes.
async fn backend(ip: &str, name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                if stream
                    .write_all(format!("{name}\n").as_bytes())
                    .await
                    .is_ok()
                {
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                }
            });
        }
    });
    addr
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

/// Connects from `source` and reads the greeting of the backend reached.
async fn greeting_from(target: SocketAddr, source: &str) -> std::io::Result<String> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source.parse().unwrap(), 0))?;
    let stream = socket.connect(target).await?;
    let mut line = String::new();
    tokio::time::timeout(PATIENCE, BufReader::new(stream).read_line(&mut line))
        .await
        .expect("the proxy hangs")?;
    if line.is_empty() {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end().to_owned())
}

/// Polls `check` until it holds, within the patience limit.
async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn endpoints_json(tcp: &[SocketAddr], udp: &[SocketAddr]) -> String {
    let mut subsets: Vec<_> = tcp
        .iter()
        .map(|a| json!({"addresses": [{"ip": a.ip().to_string()}], "ports": [{"name": "http", "port": a.port()}]}))
        .collect();
    subsets.extend(udp.iter().map(|a| {
        json!({"addresses": [{"ip": a.ip().to_string()}],
               "ports": [{"name": "dns", "port": a.port(), "protocol": "UDP"}]})
    }));
    json!({"apiVersion": "v1", "kind": "Endpoints",
           "metadata": {"name": "web", "namespace": "default"}, "subsets": subsets})
    .to_string()
}

async fn client_for(cluster: &TestCluster) -> skiff_client::Client {
    skiff_client::connect(&skiff_client::ClientConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        ..Default::default()
    })
    .await
    .expect("a client from the admin kubeconfig")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_through_the_api_server_round_robin_affinity_node_port_udp_and_delete() {
    let cluster = TestCluster::start(&[]);
    let kubectl = cluster.kubectl();
    let tcp = [
        backend("127.0.0.41", "a").await,
        backend("127.0.0.42", "b").await,
        backend("127.0.0.43", "c").await,
    ];
    let udp = [udp_backend("127.0.0.41", "a").await];
    kubectl.ok_with_input(
        &["apply", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"type": "NodePort", "ports": [
                    {"name": "http", "port": 8080, "nodePort": 30741},
                    {"name": "dns", "port": 5353, "protocol": "UDP", "nodePort": 30742}]}})
        .to_string(),
    );
    kubectl.ok_with_input(&["apply", "-f", "-"], &endpoints_json(&tcp, &udp));
    let cluster_ip = kubectl.ok(&["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let target: SocketAddr = format!("{}:8080", cluster_ip.trim()).parse().unwrap();

    let shutdown = CancellationToken::new();
    let options = Options {
        nodeport_address: "127.0.0.1".parse().unwrap(),
        ..Options::default()
    };
    let proxy = tokio::spawn(skiff_proxy::run(
        client_for(&cluster).await,
        options,
        shutdown.clone(),
    ));

    eventually("the ClusterIP serves", || async {
        greeting_from(target, "127.0.0.1").await.is_ok()
    })
    .await;
    // 300 connections: 100 to each endpoint.
    let mut counts: HashMap<String, usize> = HashMap::new();
    for _ in 0..300 {
        *counts
            .entry(greeting_from(target, "127.0.0.1").await.unwrap())
            .or_default() += 1;
    }
    assert_eq!(
        counts,
        HashMap::from([("a".into(), 100), ("b".into(), 100), ("c".into(), 100)])
    );

    // NodePort and UDP.
    let node_port: SocketAddr = "127.0.0.1:30741".parse().unwrap();
    assert!(
        ["a", "b", "c"].contains(
            &greeting_from(node_port, "127.0.0.1")
                .await
                .unwrap()
                .as_str()
        )
    );
    let dns = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    dns.connect(format!("{}:5353", cluster_ip.trim()))
        .await
        .unwrap();
    dns.send(b"ping").await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(PATIENCE, dns.recv(&mut buf))
        .await
        .expect("UDP echo through the Service")
        .unwrap();
    assert_eq!(&buf[..n], b"a:ping");

    // ClientIP affinity with a short timeout.
    kubectl.ok(&[
        "patch",
        "service",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":2}}}}"#,
    ]);
    eventually("affinity applies", || async {
        let first = greeting_from(target, "127.0.0.51").await.unwrap();
        let mut same = true;
        for _ in 0..5 {
            same &= greeting_from(target, "127.0.0.51").await.unwrap() == first;
        }
        same
    })
    .await;
    let sticky = greeting_from(target, "127.0.0.51").await.unwrap();
    for _ in 0..30 {
        assert_eq!(greeting_from(target, "127.0.0.51").await.unwrap(), sticky);
    }
    // After the timeout without traffic, the rotation (which moved past `sticky`) places the
    // client again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_ne!(greeting_from(target, "127.0.0.51").await.unwrap(), sticky);

    // Endpoints change while a connection is open: the rotation changes, the connection stays.
    let mut long = BufReader::new(TcpStream::connect(target).await.unwrap());
    let mut line = String::new();
    long.read_line(&mut line).await.unwrap();
    kubectl.ok(&[
        "patch",
        "service",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"sessionAffinity":"None"}}"#,
    ]);
    kubectl.ok_with_input(&["apply", "-f", "-"], &endpoints_json(&tcp[..1], &udp));
    eventually("only endpoint a is left", || async {
        let mut all_a = true;
        for _ in 0..4 {
            all_a &= greeting_from(target, "127.0.0.1").await.unwrap() == "a";
        }
        all_a
    })
    .await;
    long.get_mut().write_all(b"still there\n").await.unwrap();
    line.clear();
    long.read_line(&mut line).await.unwrap();
    assert_eq!(line, "still there\n");

    // Deleting the Service frees its ports.
    kubectl.ok(&["delete", "service", "web"]);
    eventually("the ClusterIP port is closed", || async {
        TcpStream::connect(target).await.is_err()
    })
    .await;
    eventually("the NodePort is closed", || async {
        TcpStream::connect(node_port).await.is_err()
    })
    .await;

    shutdown.cancel();
    proxy.await.unwrap().unwrap();
}

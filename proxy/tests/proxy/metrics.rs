//! The proxy's metrics, read back through a debugging recorder: active connections, bytes,
//! per-endpoint selections and errors.
//!
//! A test binary of its own, because the recorder is process-global.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::json;
use skiff_proxy::{Config, Proxier};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(20);

/// Metric values by (name, sorted labels); counters summed over snapshots (a snapshot drains them).
#[derive(Default)]
struct Metrics(HashMap<(String, Vec<(String, String)>), f64>);

impl Metrics {
    fn read(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let (_, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let entry = self.0.entry((key.name().to_owned(), labels)).or_default();
            match value {
                DebugValue::Counter(n) => *entry += n as f64,
                DebugValue::Gauge(g) => *entry = g.into_inner(),
                DebugValue::Histogram(_) => {}
            }
        }
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        self.0
            .get(&(name.to_owned(), labels))
            .copied()
            .unwrap_or(0.0)
    }
}

async fn echo_backend(ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

fn objects(name: &str, cluster_ip: &str, backends: &[SocketAddr]) -> (Service, Endpoints) {
    let service = serde_json::from_value(json!({
        "metadata": {"namespace": "m", "name": name},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "http", "port": 8080}]}
    }))
    .unwrap();
    let subsets: Vec<_> = backends
        .iter()
        .map(|a| json!({"addresses": [{"ip": a.ip().to_string()}], "ports": [{"name": "http", "port": a.port()}]}))
        .collect();
    let endpoints = serde_json::from_value(json!({
        "metadata": {"namespace": "m", "name": name}, "subsets": subsets
    }))
    .unwrap();
    (service, endpoints)
}

async fn echo_once(target: &str, payload: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(target).await.unwrap();
    stream.write_all(payload).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut back = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut back))
        .await
        .unwrap()
        .unwrap();
    back
}

#[tokio::test]
async fn connections_bytes_selections_and_errors_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this test binary");
    let mut seen = Metrics::default();

    let a = echo_backend("127.0.0.1").await;
    let b = echo_backend("127.0.0.2").await;
    let dead = {
        let l = TcpListener::bind("127.0.0.3:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (web, web_eps) = objects("web", "127.96.100.1", &[a, b, dead]);
    let (empty, empty_eps) = objects("empty", "127.96.100.2", &[]);
    let mut proxier = Proxier::new(Config::default(), CancellationToken::new());
    proxier.sync([web, empty], [web_eps, empty_eps]).await;

    // Six echoes of 1000 bytes; the dead endpoint's turns are retried on the next one.
    for _ in 0..6 {
        assert_eq!(
            echo_once("127.96.100.1:8080", &[7u8; 1000]).await.len(),
            1000
        );
    }
    // A refusal for lack of endpoints.
    let mut refused = TcpStream::connect("127.96.100.2:8080").await.unwrap();
    let mut buf = [0u8; 1];
    let n = refused.read(&mut buf).await.unwrap_or(0);
    assert_eq!(n, 0);

    // One connection held open: the active gauge shows it, then goes back to zero.
    let mut open = TcpStream::connect("127.96.100.1:8080").await.unwrap();
    open.write_all(b"x").await.unwrap();
    open.read_exact(&mut buf).await.unwrap();
    seen.read(&snapshotter);
    let active = |m: &Metrics| {
        m.get(
            "skiff_proxy_active_connections",
            &[("service", "m/web:http"), ("protocol", "TCP")],
        )
    };
    assert_eq!(active(&seen), 1.0);
    drop(open);
    tokio::time::timeout(PATIENCE, async {
        loop {
            seen.read(&snapshotter);
            if active(&seen) == 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the active gauge returns to zero");

    let web = ("service", "m/web:http");
    let picks = |e: SocketAddr| {
        seen.get(
            "skiff_proxy_endpoint_selections_total",
            &[web, ("endpoint", &e.to_string())],
        )
    };
    // Seven connections over the rotation a, b, dead (→ retried): 7 picks of a live endpoint
    // plus the dead one's turns.
    assert_eq!(picks(a) + picks(b), 7.0);
    assert!(picks(dead) >= 2.0, "{}", picks(dead));
    assert_eq!(
        seen.get("skiff_proxy_errors_total", &[web, ("reason", "connect")]),
        picks(dead)
    );
    assert_eq!(
        seen.get(
            "skiff_proxy_errors_total",
            &[("service", "m/empty:http"), ("reason", "no_endpoints")]
        ),
        1.0
    );
    let bytes = |direction: &str| {
        seen.get(
            "skiff_proxy_bytes_total",
            &[web, ("protocol", "TCP"), ("direction", direction)],
        )
    };
    assert_eq!(bytes("to_endpoint"), 6001.0);
    assert_eq!(bytes("to_client"), 6001.0);
    proxier.shutdown().await;
}

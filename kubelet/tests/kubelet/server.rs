//! The kubelet HTTP server over a real listener: health, pods, and container logs with the
//! options of `kubectl logs` (follow until the container exits, tail, previous, timestamps).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use skiff_kubelet::pod::{self, Event, Manager, backoff};
use skiff_kubelet::runtime::Runtime;
use skiff_kubelet::runtime::process::{Config as RuntimeConfig, ProcessRuntime};
use skiff_kubelet::server::{self, State};
use skiff_kubelet::spec::Sources;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(60);
const TOKEN: &str = "t0ken";

/// One HTTP/1.1 GET; returns (status, body with chunked framing removed).
async fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(LIMIT, s.read_to_end(&mut raw))
        .await
        .expect("response ends")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            out.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        out
    } else {
        body.to_string()
    };
    (status, body)
}

fn pod_of(uid: &str, policy: &str, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            restart_policy: Some(policy.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sh(name: &str, script: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    }
}

/// A kubelet's pod manager and HTTP server over the process runtime in a temp dir, pod IPs from
/// `range`; the server reads `stats`.
struct Kubelet {
    dir: tempfile::TempDir,
    runtime: Arc<dyn Runtime>,
    manager: Manager,
    events: mpsc::UnboundedReceiver<Event>,
    stats: Arc<std::sync::Mutex<skiff_kubelet::stats::Tracker>>,
    shutdown: CancellationToken,
    port: u16,
}

impl Kubelet {
    async fn start(range: &str) -> Kubelet {
        let dir = tempfile::tempdir().unwrap();
        let runtime: Arc<dyn Runtime> = Arc::new(
            ProcessRuntime::open(RuntimeConfig {
                state_dir: dir.path().join("containers"),
                cgroup_root: None,
                log_max_size: 1 << 20,
                log_max_files: 2,
                health_program: "true".into(),
            })
            .unwrap(),
        );
        let (tx, events) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let manager = Manager::new(
            pod::Config {
                root_dir: dir.path().into(),
                host_ip: "127.0.0.1".parse().unwrap(),
                backoff: backoff::Config {
                    base: Duration::from_millis(100),
                    ..Default::default()
                },
                resync: Duration::from_secs(1),
                cluster_dns: Default::default(),
            },
            runtime.clone(),
            range.parse().unwrap(),
            Arc::new(Sources::default()),
            tx,
            shutdown.clone(),
        )
        .unwrap();
        let stats = Arc::new(std::sync::Mutex::new(skiff_kubelet::stats::Tracker::new(
            jiff::Timestamp::now(),
        )));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(server::serve(
            listener,
            State {
                manager: manager.clone(),
                runtime: runtime.clone(),
                root_dir: dir.path().into(),
                token: Some(TOKEN.into()),
                follow_poll: Duration::from_millis(20),
                node_name: "n".into(),
                stats: stats.clone(),
            },
            shutdown.clone(),
        ));
        Kubelet {
            dir,
            runtime,
            manager,
            events,
            stats,
            shutdown,
            port,
        }
    }
}

#[tokio::test]
async fn health_pods_and_logs() {
    let Kubelet {
        dir,
        runtime: _runtime,
        manager,
        mut events,
        stats: _stats,
        shutdown,
        port,
    } = Kubelet::start("127.100.9.0/24").await;

    assert_eq!(get(port, "/healthz", None).await, (200, "ok".into()));
    assert_eq!(get(port, "/pods", None).await.0, 401);
    assert_eq!(get(port, "/pods", Some("wrong")).await.0, 401);

    // A container that writes, pauses, writes again and exits 1 once (OnFailure restarts it;
    // the second run exits 0).
    let gate = dir.path().join("gate");
    let script = format!(
        "if [ -e $POD_ROOT/ran ]; then echo second run; exit 0; fi; touch $POD_ROOT/ran; \
         echo one; echo two; echo three; while [ ! -e {} ]; do sleep 0.05; done; echo last; exit 1",
        gate.display()
    );
    manager.update(pod_of("u1", "OnFailure", vec![sh("c", &script)]));
    let logs = "/containerLogs/default/pod-u1/c";
    // Wait until the first lines are there.
    let wait = async {
        loop {
            let (status, body) = get(port, logs, Some(TOKEN)).await;
            if status == 200 && body.contains("three") {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let body = tokio::time::timeout(LIMIT, wait).await.unwrap();
    assert_eq!(body, "one\ntwo\nthree\n");
    let (_, tail) = get(port, &format!("{logs}?tailLines=1"), Some(TOKEN)).await;
    assert_eq!(tail, "three\n");
    let (_, stamped) = get(
        port,
        &format!("{logs}?tailLines=1&timestamps=true"),
        Some(TOKEN),
    )
    .await;
    let (ts, rest) = stamped.split_once(' ').unwrap();
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{stamped}");
    assert_eq!(rest, "three\n");
    let (_, since) = get(port, &format!("{logs}?sinceSeconds=3600"), Some(TOKEN)).await;
    assert_eq!(since, "one\ntwo\nthree\n");

    let (_, pods) = get(port, "/pods", Some(TOKEN)).await;
    let pods: serde_json::Value = serde_json::from_str(&pods).unwrap();
    assert_eq!(pods["kind"], "PodList");
    assert_eq!(pods["items"][0]["metadata"]["name"], "pod-u1");

    // Follow: opened while the container runs, it gets the old lines, then "last", then ends
    // when the container exits.
    let follower =
        tokio::spawn(async move { get(port, &format!("{logs}?follow=true"), Some(TOKEN)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(&gate, b"").unwrap();
    let (status, followed) = tokio::time::timeout(LIMIT, follower)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(followed, "one\ntwo\nthree\nlast\n");

    // After the restart: the current log is the second run's, previous is the first run's.
    let wait = async {
        loop {
            if let Some(Event::Status { status, .. }) = events.recv().await {
                if status.phase.as_deref() == Some("Succeeded") {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(LIMIT, wait).await.unwrap();
    assert_eq!(get(port, logs, Some(TOKEN)).await.1, "second run\n");
    assert_eq!(
        get(port, &format!("{logs}?previous=true"), Some(TOKEN))
            .await
            .1,
        "one\ntwo\nthree\nlast\n"
    );

    // Errors kubectl shows.
    let (status, body) = get(port, "/containerLogs/default/nope/c", Some(TOKEN)).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = get(port, "/containerLogs/default/pod-u1/zzz", Some(TOKEN)).await;
    assert_eq!(status, 400);
    assert!(body.contains("not valid"), "{body}");
    let (status, _) = get(port, &format!("{logs}?tailLines=x"), Some(TOKEN)).await;
    assert_eq!(status, 400);
    shutdown.cancel();
    manager.shutdown(Duration::from_secs(5)).await;
}

/// `/stats/summary` over a real listener: the housekeeping loop reads the process runtime's
/// containers by process group, and a busy container shows more CPU than an idle one.
#[tokio::test]
async fn the_summary_shows_a_busy_container_above_an_idle_one() {
    let Kubelet {
        dir: _dir,
        runtime,
        manager,
        events: _events,
        stats,
        shutdown,
        port,
    } = Kubelet::start("127.100.10.0/24").await;
    tokio::spawn(skiff_kubelet::stats::housekeeping(
        runtime.clone(),
        stats,
        Duration::from_millis(300),
        shutdown.clone(),
    ));
    assert_eq!(get(port, "/stats/summary", None).await.0, 401);

    // The busy container's shell spins; its child (a subshell) spins too, in the same group.
    manager.update(pod_of(
        "busy",
        "Always",
        vec![sh("spin", "(while :; do :; done) & while :; do :; done")],
    ));
    manager.update(pod_of("idle", "Always", vec![sh("nap", "sleep 600")]));

    let rate = |summary: &serde_json::Value, pod: &str| -> Option<u64> {
        summary["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == pod)?["containers"][0]["cpu"]["usageNanoCores"]
            .as_u64()
    };
    let wait = async {
        loop {
            let (status, body) = get(port, "/stats/summary", Some(TOKEN)).await;
            assert_eq!(status, 200, "{body}");
            let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let (Some(busy), Some(idle)) =
                (rate(&summary, "pod-busy"), rate(&summary, "pod-idle"))
            {
                return (summary, busy, idle);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (summary, busy, idle) = tokio::time::timeout(LIMIT, wait).await.unwrap();
    // Two spinning processes on a 2-core machine: well over a fifth of a core between them,
    // however busy the machine is; a sleeping one: next to nothing.
    assert!(busy > 200_000_000, "busy {busy} idle {idle}: {summary}");
    assert!(idle < 50_000_000, "busy {busy} idle {idle}: {summary}");
    // No more than every core of the machine, with room for timing error.
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    assert!(busy < cores * 1_200_000_000, "busy {busy}: {summary}");
    let busy_pod = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "pod-busy")
        .unwrap();
    assert_eq!(busy_pod["podRef"]["uid"], "busy");
    assert_eq!(busy_pod["containers"][0]["name"], "spin");
    assert!(busy_pod["memory"]["workingSetBytes"].as_u64().unwrap() > 0);
    assert_eq!(summary["node"]["nodeName"], "n");
    assert!(
        summary["node"]["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );

    // A stopped pod leaves the summary.
    manager.remove("busy");
    let gone = async {
        loop {
            let (_, body) = get(port, "/stats/summary", Some(TOKEN)).await;
            let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
            if !body.contains("pod-busy") {
                return summary;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let summary = tokio::time::timeout(LIMIT, gone).await.unwrap();
    assert!(rate(&summary, "pod-idle").is_some(), "{summary}");
    shutdown.cancel();
    runtime.shutdown(&|_| Duration::from_millis(100)).await;
}

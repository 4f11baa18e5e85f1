//! `skiff bench node`: what a single-node `skiff server` costs and how fast it runs pods — cold
//! start to a Ready node running a pod, resident memory idle and with N running pods, and pod
//! startup latency (create to `Running` as a watch sees it).
//!
//! The server is this binary, `skiff server` with every component, as a child process on an empty
//! temporary data dir and a loopback port; memory is read from `/proc/<pid>/status` of that process
//! (the pods' own processes are reported apart: they are the workload, not the control plane).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use skiff_client::Api;
use skiff_client::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};

use crate::bench::SpawnedServer;

/// Flags of `skiff bench node`.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// Pods created for the startup-latency and memory runs.
    #[arg(long, default_value_t = 100)]
    pods: usize,
    /// Concurrent clients creating them.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// How long the idle server settles before its memory is read.
    #[arg(long, default_value = "10s", value_parser = crate::server::parse_duration)]
    settle: Duration,
    /// Directory for the temporary data dir (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// `VmRSS` and `VmHWM` of a process, in bytes.
pub(crate) fn status_memory(pid: u32) -> Result<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Ok((
        field("VmRSS:").context("no VmRSS")?,
        field("VmHWM:").context("no VmHWM")?,
    ))
}

/// The summed resident memory of the server's descendants (the pods' processes).
fn descendants_memory(root: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut parent: HashMap<u32, u32> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: the fields after it are
        // state, ppid, ...
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r)
            && let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    let descends = |mut pid: u32| {
        while let Some(&p) = parent.get(&pid) {
            if p == root {
                return true;
            }
            if p <= 1 {
                return false;
            }
            pid = p;
        }
        false
    };
    parent
        .keys()
        .filter(|&&pid| descends(pid))
        .filter_map(|&pid| status_memory(pid).ok())
        .map(|(rss, _)| rss)
        .sum()
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "node"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}]
        }
    }))
    .expect("a valid pod")
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Creates `names` with `clients` concurrent clients and returns when each was sent, while a
/// watch started before the first create records when each was first seen `Running`.
async fn start_pods(
    pods: &Api<Pod>,
    names: Vec<String>,
    clients: usize,
    limit: Duration,
) -> Result<Vec<Duration>> {
    let list = pods.list(&ListParams::default().limit(1)).await?;
    let from = list.metadata.resource_version.unwrap_or_default();
    let mut stream = pods.watch(&WatchParams::default(), &from).await?.boxed();
    let wanted: std::collections::HashSet<String> = names.iter().cloned().collect();
    let (sent_tx, mut sent_rx) = tokio::sync::mpsc::unbounded_channel();
    let creator = {
        let pods = pods.clone();
        tokio::spawn(async move {
            futures::stream::iter(names)
                .map(|name| {
                    let pods = pods.clone();
                    let sent_tx = sent_tx.clone();
                    async move {
                        let at = Instant::now();
                        pods.create(&PostParams::default(), &pod(&name)).await?;
                        let _ = sent_tx.send((name, at));
                        anyhow::Ok(())
                    }
                })
                .buffer_unordered(clients.max(1))
                .try_collect::<Vec<()>>()
                .await
        })
    };
    let mut seen_running: HashMap<String, Instant> = HashMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while seen_running.len() < wanted.len() {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .with_context(|| {
                format!(
                    "only {} of {} pods Running within {limit:?}",
                    seen_running.len(),
                    wanted.len()
                )
            })?;
        match event {
            Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p))) if running(&p) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                if wanted.contains(&name) {
                    seen_running.entry(name).or_insert_with(Instant::now);
                }
            }
            Some(Ok(WatchEvent::Error(e))) => bail!("the watch failed: {e}"),
            Some(Err(e)) => bail!("the watch failed: {e}"),
            None => {
                // The server ends watches after a while: go on from where this one stood.
                stream = pods.watch(&WatchParams::default(), "0").await?.boxed();
            }
            Some(Ok(_)) => {}
        }
    }
    creator.await??;
    let mut sent: HashMap<String, Instant> = HashMap::new();
    while let Ok((name, at)) = sent_rx.try_recv() {
        sent.insert(name, at);
    }
    let mut latencies: Vec<Duration> = seen_running
        .iter()
        .filter_map(|(name, seen)| Some(seen.saturating_duration_since(*sent.get(name)?)))
        .collect();
    latencies.sort();
    Ok(latencies)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Runs `skiff bench node` and prints its report.
pub async fn run(args: NodeArgs) -> Result<()> {
    // Cold start: an empty data dir to a Ready node that has run a pod.
    let started = Instant::now();
    let mut server = SpawnedServer::start("server", args.dir.as_deref())?;
    let client = server.wait_ready().await?;
    let serving = started.elapsed();
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = loop {
        if nodes
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(node_ready)
        {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("no Ready node within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    start_pods(&pods, vec!["first".into()], 1, Duration::from_secs(60)).await?;
    let first_pod = started.elapsed();
    println!("cold start (empty data dir, `skiff server`, all components):");
    println!(
        "  API serving (kubeconfig written, /version answers): {}",
        ms(serving)
    );
    println!("  node Ready: {}", ms(ready));
    println!(
        "  first pod Running (create sent after Ready): {}",
        ms(first_pod)
    );
    pods.delete("first", &DeleteParams::default()).await?;

    // Idle: nothing but the node's own heartbeats.
    tokio::time::sleep(args.settle).await;
    let (idle, idle_peak) = status_memory(server.child.id())?;
    println!(
        "resident memory of the skiff process, idle after {:?}:",
        args.settle
    );
    println!("  VmRSS {} (peak so far {})", mib(idle), mib(idle_peak));

    // N pods, created by concurrent clients.
    let names: Vec<String> = (0..args.pods).map(|i| format!("bench-{i}")).collect();
    let began = Instant::now();
    let latencies = start_pods(&pods, names, args.clients, Duration::from_secs(600)).await?;
    let all = began.elapsed();
    println!(
        "pod startup, {} pods, {} concurrent creators (create sent to Running seen by a watch):",
        args.pods, args.clients
    );
    println!(
        "  p50 {}  p90 {}  p99 {}  max {}  (all Running after {})",
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 90.0)),
        ms(percentile(&latencies, 99.0)),
        ms(percentile(&latencies, 100.0)),
        ms(all)
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (busy, busy_peak) = status_memory(server.child.id())?;
    let workload = descendants_memory(server.child.id());
    println!("resident memory with {} pods running:", args.pods);
    println!(
        "  skiff process VmRSS {} (peak {}); the pods' own processes {}",
        mib(busy),
        mib(busy_peak),
        mib(workload)
    );

    // Clean up through the API so the kubelet stops every process it started.
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("bench=node"),
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pods.list(&ListParams::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("pods not gone within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(server);
    Ok(())
}

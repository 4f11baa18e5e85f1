//! `skiff bench node`: what a single-node `skiff server` costs and how fast it runs pods — cold
//! start to a Ready node running a pod, resident memory idle and with N running pods, and pod
//! startup latency (create to `Running` as a watch sees it).
//!
//! The server is this binary, `skiff server` with every component, as a child process on an empty
//! temporary data dir and a loopback port; memory is read from `/proc/<pid>/status` of that process
//! (the pods' own processes are reported apart: they are the workload, not the control plane).
//!
//! With `--container-runtime-endpoint` the same measurements run a second time with the kubelet
//! on that containerd, and a table puts the two runtimes side by side: containerd's own memory
//! is added to the server's, its shims and their containers count as the workload, and the
//! first pod pulls the image so the measured pods start from a cached one (the Kubernetes pod
//! startup SLO leaves pulls out too). `cargo run -p skiff-tests --example containerd_lab`
//! starts a containerd with a CNI network and a loopback registry for it.

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
    /// Also run the same measurements with the kubelet on this CRI endpoint
    /// (`unix:///run/containerd/containerd.sock`), after the process runtime, and compare.
    /// The containerd must have a CNI network and the image (or reach its registry): the first
    /// pod pulls it, so the measured pods start from a cached image.
    #[arg(long)]
    container_runtime_endpoint: Option<String>,
    /// The image of the containerd run's pods (it must have `sleep`).
    #[arg(long, default_value = "busybox")]
    image: String,
    /// Further flags for the containerd run's server (`--server-arg=--cgroup-root=/skiff`).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
}

/// What one run measured.
struct Report {
    runtime: String,
    serving: Duration,
    ready: Duration,
    first_pod: Duration,
    idle: u64,
    idle_runtime: u64,
    latencies: Vec<Duration>,
    all_running: Duration,
    /// CPU seconds of the skiff process over the burst of pod creates.
    burst_cpu: f64,
    /// Busy CPU seconds of the whole machine (all cores) over the same burst.
    burst_machine_cpu: f64,
    busy: u64,
    busy_runtime: u64,
    workload: u64,
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

/// The ids of the processes running now (the numeric entries of `/proc`).
fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The summed resident memory of the descendants of `roots` (the server's: host-process pods;
/// containerd's shims: their containers), from one pass over `/proc`.
fn descendants_memory(roots: &[u32]) -> u64 {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    for pid in pids() {
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
            if roots.contains(&p) {
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

fn pod(name: &str, image: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "node"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"]
            }]
        }
    }))
    .expect("a valid pod")
}

/// Busy CPU seconds of the whole machine since boot, all cores (`/proc/stat`: everything but
/// idle and iowait).
fn machine_busy_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    // USER_HZ is 100 on Linux.
    (total - idle) as f64 / 100.0
}

/// The resident memory of the containerd daemons on this machine, and of the shims serving
/// `endpoint` with the containers they run, in bytes; zero for the process runtime. (A daemon
/// names its socket in its config file, not on its command line: every containerd counts.)
fn runtime_memory(endpoint: Option<&str>) -> (u64, u64) {
    let Some(socket) = endpoint.map(|e| e.trim_start_matches("unix://")) else {
        return (0, 0);
    };
    let rss = |pid: u32| status_memory(pid).map_or(0, |(rss, _)| rss);
    let (mut daemon, mut shims) = (0, Vec::new());
    for pid in pids() {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        let mut args = cmdline.split('\0');
        let name = args.next().unwrap_or("").rsplit('/').next().unwrap_or("");
        if name == "containerd" {
            daemon += rss(pid);
        } else if name.starts_with("containerd-shim") && args.any(|a| a.contains(socket)) {
            shims.push(pid);
        }
    }
    let shim_memory: u64 = shims.iter().map(|&pid| rss(pid)).sum();
    (daemon, shim_memory + descendants_memory(&shims))
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
    image: &str,
    clients: usize,
    limit: Duration,
) -> Result<Vec<Duration>> {
    let image = image.to_string();
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
                    let pod = pod(&name, &image);
                    async move {
                        let at = Instant::now();
                        pods.create(&PostParams::default(), &pod).await?;
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

/// Runs `skiff bench node` and prints its report: the process runtime, then containerd when
/// an endpoint is given, and the two side by side.
pub async fn run(args: NodeArgs) -> Result<()> {
    let mut reports = vec![
        measure(
            &args,
            "process",
            &["--container-runtime-endpoint".into(), "process".into()],
            "busybox",
            None,
        )
        .await?,
    ];
    if let Some(endpoint) = &args.container_runtime_endpoint {
        let mut server_args = vec!["--container-runtime-endpoint".to_string(), endpoint.clone()];
        server_args.extend(args.server_args.iter().cloned());
        reports.push(
            measure(
                &args,
                "containerd",
                &server_args,
                &args.image,
                Some(endpoint),
            )
            .await?,
        );
    }
    if reports.len() > 1 {
        println!();
        print!("{}", table(&reports));
    }
    Ok(())
}

/// The runs side by side, with the ratio of each to the first.
fn table(reports: &[Report]) -> String {
    let mut out = String::from("| what |");
    for r in reports {
        out.push_str(&format!(" {} |", r.runtime));
    }
    out.push_str(" ratio |\n|---|");
    for _ in reports {
        out.push_str("---|");
    }
    out.push_str("---|\n");
    let mut row = |what: &str, values: Vec<f64>, unit: &str| {
        out.push_str(&format!("| {what} |"));
        for v in &values {
            out.push_str(&format!(" {v:.1} {unit} |"));
        }
        let ratio = match (values.first(), values.last()) {
            (Some(a), Some(b)) if *a > 0.0 => format!("{:.2}x", b / a),
            _ => "-".into(),
        };
        out.push_str(&format!(" {ratio} |\n"));
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    row(
        "API serving after spawn",
        reports.iter().map(|r| ms(r.serving)).collect(),
        "ms",
    );
    row(
        "node Ready after spawn",
        reports.iter().map(|r| ms(r.ready)).collect(),
        "ms",
    );
    row(
        "first pod Running (image pulled)",
        reports.iter().map(|r| ms(r.first_pod)).collect(),
        "ms",
    );
    for (name, p) in [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)] {
        row(
            &format!("pod startup {name}"),
            reports
                .iter()
                .map(|r| ms(percentile(&r.latencies, p)))
                .collect(),
            "ms",
        );
    }
    row(
        "all pods Running after",
        reports.iter().map(|r| ms(r.all_running)).collect(),
        "ms",
    );
    row(
        "CPU over the burst: skiff",
        reports.iter().map(|r| r.burst_cpu * 1000.0).collect(),
        "ms",
    );
    row(
        "CPU over the burst: whole machine",
        reports
            .iter()
            .map(|r| r.burst_machine_cpu * 1000.0)
            .collect(),
        "ms",
    );
    row(
        "idle: skiff VmRSS",
        reports.iter().map(|r| mib(r.idle)).collect(),
        "MiB",
    );
    row(
        "idle: skiff + runtime daemon VmRSS",
        reports
            .iter()
            .map(|r| mib(r.idle + r.idle_runtime))
            .collect(),
        "MiB",
    );
    row(
        "busy: skiff VmRSS",
        reports.iter().map(|r| mib(r.busy)).collect(),
        "MiB",
    );
    row(
        "busy: skiff + runtime daemon VmRSS",
        reports
            .iter()
            .map(|r| mib(r.busy + r.busy_runtime))
            .collect(),
        "MiB",
    );
    row(
        "busy: the pods (processes, or shims and containers)",
        reports.iter().map(|r| mib(r.workload)).collect(),
        "MiB",
    );
    out
}

/// One run of the measurements on a new server started with `server_args`.
async fn measure(
    args: &NodeArgs,
    runtime: &str,
    server_args: &[String],
    image: &str,
    endpoint: Option<&str>,
) -> Result<Report> {
    println!("== {runtime} runtime ==");
    // Cold start: an empty data dir to a Ready node that has run a pod.
    let started = Instant::now();
    let mut server = SpawnedServer::start_with("server", server_args, args.dir.as_deref())?;
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
    start_pods(
        &pods,
        vec!["first".into()],
        image,
        1,
        Duration::from_secs(120),
    )
    .await?;
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
    let (idle_runtime, _) = runtime_memory(endpoint);
    println!(
        "resident memory of the skiff process, idle after {:?}:",
        args.settle
    );
    println!("  VmRSS {} (peak so far {})", mib(idle), mib(idle_peak));
    if endpoint.is_some() {
        println!("  containerd VmRSS {}", mib(idle_runtime));
    }

    // N pods, created by concurrent clients.
    let names: Vec<String> = (0..args.pods).map(|i| format!("bench-{i}")).collect();
    let began = Instant::now();
    let (cpu_before, machine_before) = (
        crate::bench_deployment::cpu_seconds(server.child.id()),
        machine_busy_seconds(),
    );
    let latencies = start_pods(&pods, names, image, args.clients, Duration::from_secs(600)).await?;
    let all_running = began.elapsed();
    let burst_cpu = crate::bench_deployment::cpu_seconds(server.child.id()) - cpu_before;
    let burst_machine_cpu = machine_busy_seconds() - machine_before;
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
        ms(all_running)
    );
    println!(
        "  CPU over the burst: skiff {burst_cpu:.2} s, the whole machine {burst_machine_cpu:.2} s \
         ({} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (busy, busy_peak) = status_memory(server.child.id())?;
    let (busy_runtime, shims) = runtime_memory(endpoint);
    // Containers under containerd are the shims' children, not the server's.
    let workload = descendants_memory(&[server.child.id()]) + shims;
    println!("resident memory with {} pods running:", args.pods);
    println!(
        "  skiff process VmRSS {} (peak {}); the pods' own processes {}",
        mib(busy),
        mib(busy_peak),
        mib(workload)
    );
    if endpoint.is_some() {
        println!("  containerd VmRSS {}", mib(busy_runtime));
    }

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
    Ok(Report {
        runtime: runtime.to_string(),
        serving,
        ready,
        first_pod,
        idle,
        idle_runtime,
        latencies,
        all_running,
        burst_cpu,
        burst_machine_cpu,
        busy,
        busy_runtime,
        workload,
    })
}

//! `skiff bench timeline`: how the timeline page (`/ui/`) fares on a long history. Against one
//! `skiff apiserver` (this binary, a child) whose log holds `--revisions` revisions (1M by
//! default), written through the API as a cluster writes them: ConfigMap and Deployment
//! updates, pod status updates with restarts, Normal and Warning events, objects created and
//! deleted. Then, one request at a time:
//! - the server side: each request the page makes (first load, a filter by kind, by object, by
//!   label, a zoomed window deep in the past, the cluster at an old revision), its latency and
//!   the server's CPU per request (from its `/proc` entry);
//! - the browser side (Chromium driven by `tests/browser/timeline-bench.js`): time from
//!   navigation to the first rendered chart and change list, and from submitting a filter to
//!   its result on screen.
//!
//! Filling a million revisions takes minutes; `--data-dir` keeps the filled history for the next
//! run, which then measures at once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use skiff_scheduler::bench::process_cpu_seconds;

use crate::bench::SpawnedServer;

/// Flags of `skiff bench timeline`.
#[derive(Debug, clap::Args)]
pub struct TimelineArgs {
    /// Revisions the log holds before measuring (each create, update and delete is one).
    #[arg(long, default_value_t = 1_000_000)]
    revisions: u64,
    /// Concurrent writers filling the history.
    #[arg(long, default_value_t = 64)]
    writers: usize,
    /// Keep the server's directory here (data dir and log) and reuse it: a history already
    /// this long is measured as it is, a shorter one is filled up first.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Directory for the temporary data dir when not kept (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Requests measured per request kind (one at a time).
    #[arg(long, default_value_t = 30)]
    requests: usize,
    /// Page loads (and filters) measured in the browser; 0 skips the browser.
    #[arg(long, default_value_t = 5)]
    page_loads: usize,
    /// Where `timeline-bench.js` and its `node_modules` (playwright-core) are.
    #[arg(long, default_value = "tests/browser")]
    browser_dir: PathBuf,
    /// The Chromium the browser side drives (never downloaded).
    #[arg(long, default_value = "/usr/bin/chromium")]
    chromium: PathBuf,
}

/// Namespaces the history's objects live in.
const NAMESPACES: usize = 10;
/// ConfigMaps updated over and over (the bulk of the history).
const CONFIG_MAPS: usize = 2_000;
/// Deployments scaled up and down.
const DEPLOYMENTS: usize = 200;
/// Pods whose containers restart.
const PODS: usize = 500;

fn namespace(i: usize) -> String {
    format!("tl-{}", i % NAMESPACES)
}

/// One write of the history: method, path, content type and body.
struct Write {
    method: http::Method,
    path: String,
    content_type: &'static str,
    body: Value,
}

impl Write {
    fn create(path: String, body: Value) -> Write {
        Write {
            method: http::Method::POST,
            path,
            content_type: "application/json",
            body,
        }
    }

    fn merge(path: String, body: Value) -> Write {
        Write {
            method: http::Method::PATCH,
            path,
            content_type: "application/merge-patch+json",
            body,
        }
    }

    fn delete(path: String) -> Write {
        Write {
            method: http::Method::DELETE,
            path,
            content_type: "application/json",
            body: Value::Null,
        }
    }
}

fn config_map_path(i: usize) -> String {
    format!("/api/v1/namespaces/{}/configmaps", namespace(i))
}

fn deployment_path(i: usize) -> String {
    format!("/apis/apps/v1/namespaces/{}/deployments", namespace(i))
}

fn pod_path(i: usize) -> String {
    format!("/api/v1/namespaces/{}/pods", namespace(i))
}

/// The objects the history then changes: namespaces, ConfigMaps, Deployments, Pods.
fn setup() -> Vec<Write> {
    let mut writes = Vec::new();
    for n in 0..NAMESPACES {
        writes.push(Write::create(
            "/api/v1/namespaces".into(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace(n)}}),
        ));
    }
    for i in 0..CONFIG_MAPS {
        writes.push(Write::create(
            config_map_path(i),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("cm-{i}"), "labels": {"app": format!("app-{}", i % 50)}},
                   "data": {"v": "0"}}),
        ));
    }
    for i in 0..DEPLOYMENTS {
        let app = format!("web-{i}");
        writes.push(Write::create(
            deployment_path(i),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": app, "labels": {"app": app}},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
                            "template": {"metadata": {"labels": {"app": app}},
                                         "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
        ));
    }
    for i in 0..PODS {
        writes.push(Write::create(
            pod_path(i),
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": format!("pod-{i}"), "labels": {"app": format!("app-{}", i % 50)}},
                   "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}),
        ));
    }
    writes
}

/// Write number `k` of the history after the setup: one write (one revision), or two for an
/// object created and then deleted.
fn history(k: usize) -> Vec<Write> {
    match k % 100 {
        // Half the history: ConfigMaps updated.
        0..50 => {
            let i = k % CONFIG_MAPS;
            vec![Write::merge(
                format!("{}/cm-{i}", config_map_path(i)),
                json!({"data": {"v": k.to_string()}}),
            )]
        }
        // Deployments scaled.
        50..65 => {
            let i = k % DEPLOYMENTS;
            vec![Write::merge(
                format!("{}/web-{i}", deployment_path(i)),
                // Each visit to a Deployment changes its replicas (a patch to the same value would
                // write nothing).
                json!({"spec": {"replicas": (k / DEPLOYMENTS) % 5 + 1}}),
            )]
        }
        // A pod's container restarted (its restart count goes up with `k`).
        65..80 => {
            let i = k % PODS;
            vec![Write::merge(
                format!("{}/pod-{i}/status", pod_path(i)),
                json!({"status": {"phase": "Running", "containerStatuses": [{
                    "name": "c", "image": "busybox:1.36", "imageID": "", "ready": true,
                    "started": true, "restartCount": k / PODS,
                    "state": {"running": {"startedAt": "2026-12-05T00:00:00Z"}}}]}}),
            )]
        }
        // Events, one in ten a Warning.
        80..95 => {
            let i = k % PODS;
            let warning = k.is_multiple_of(10);
            vec![Write::create(
                format!("/api/v1/namespaces/{}/events", namespace(i)),
                json!({"apiVersion": "v1", "kind": "Event",
                       "metadata": {"name": format!("pod-{i}.{k}")},
                       "involvedObject": {"kind": "Pod", "name": format!("pod-{i}"),
                                          "namespace": namespace(i)},
                       "reason": if warning { "BackOff" } else { "Pulled" },
                       "message": if warning { "Back-off restarting failed container" }
                                  else { "Container image already present" },
                       "type": if warning { "Warning" } else { "Normal" },
                       "count": 1, "source": {"component": "kubelet"}}),
            )]
        }
        // A short-lived object: created, then deleted.
        _ => {
            let path = config_map_path(k);
            vec![
                Write::create(
                    path.clone(),
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": format!("tmp-{k}")}, "data": {"v": "x"}}),
                ),
                Write::delete(format!("{path}/tmp-{k}")),
            ]
        }
    }
}

async fn send(client: &skiff_client::Client, write: &Write) -> Result<()> {
    let body = match &write.body {
        Value::Null => Vec::new(),
        body => serde_json::to_vec(body)?,
    };
    let request = http::Request::builder()
        .method(write.method.clone())
        .uri(&write.path)
        .header(http::header::CONTENT_TYPE, write.content_type)
        .body(body)?;
    client
        .request_text(request)
        .await
        .with_context(|| format!("{} {}", write.method, write.path))?;
    Ok(())
}

/// A GET of `path` and its answer as JSON.
async fn get(client: &skiff_client::Client, path: &str) -> Result<Value> {
    let request = http::Request::get(path).body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .with_context(|| format!("GET {path}"))?;
    Ok(serde_json::from_str(&text)?)
}

/// The log's newest revision.
async fn newest(client: &skiff_client::Client) -> Result<u64> {
    let resolved = get(client, "/debug/skiff/resolve?at=now").await?;
    resolved["revision"]
        .as_u64()
        .context("resolve answered no revision")
}

/// Writes the setup (when the history is new) and then history writes until the log's newest
/// revision reaches `target`.
async fn fill(client: &skiff_client::Client, target: u64, writers: usize) -> Result<()> {
    let start = newest(client).await?;
    if start >= target {
        println!("history: r{start} already, nothing to fill");
        return Ok(());
    }
    let started = Instant::now();
    // The setup's objects exist once the first ConfigMap namespace does.
    if get(client, &format!("/api/v1/namespaces/{}", namespace(0)))
        .await
        .is_err()
    {
        for write in setup() {
            send(client, &write).await?;
        }
    }
    let written = Arc::new(AtomicU64::new(newest(client).await?));
    // Later runs go on where the last one stopped, so every name is new.
    let next = Arc::new(AtomicUsize::new(written.load(Ordering::Relaxed) as usize));
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (client, written, next) = (client.clone(), written.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while written.load(Ordering::Relaxed) < target {
                let k = next.fetch_add(1, Ordering::Relaxed);
                for write in history(k) {
                    send(&client, &write).await?;
                    written.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    let progress = {
        let written = written.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                eprintln!("history: ~r{}", written.load(Ordering::Relaxed));
            }
        })
    };
    for task in tasks {
        task.await??;
    }
    progress.abort();
    let end = newest(client).await?;
    println!(
        "history: r{start} -> r{end} in {:.0} s ({:.0} writes/s, {writers} writers)",
        started.elapsed().as_secs_f64(),
        (end - start) as f64 / started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The page's first chart before the server has summarised the log (it starts with the first
/// timeline request), then the wait until the summary covers the history: how long, the
/// server's CPU and its memory before and after.
async fn summarise(client: &skiff_client::Client, pid: u32, newest: u64) -> Result<()> {
    let (rss_before, _) = crate::bench_node::status_memory(pid)?;
    let cpu = process_cpu_seconds(Some(pid));
    let started = Instant::now();
    let cold = get(client, "/debug/skiff/timeline?buckets=80").await?;
    println!(
        "first chart, nothing summarised yet: {:.0} ms; {}",
        started.elapsed().as_secs_f64() * 1e3,
        describe(std::slice::from_ref(&cold))
    );
    let oldest = cold["oldest"]
        .as_u64()
        .context("a timeline without its oldest")?
        .max(1);
    let block = skiff_api::replay::index::BLOCK;
    // The full blocks of the retained history.
    let (first, last) = (
        (oldest - 1).div_ceil(block) * block + 1,
        newest / block * block,
    );
    // A window of one revision: asking keeps the server summarising, and costs nothing.
    let probe = format!("/debug/skiff/timeline?buckets=1&since={newest}&until={newest}");
    loop {
        let t = get(client, &probe).await?;
        let covered = t["summarised"]
            .as_array()
            .and_then(|r| Some((r.first()?.as_u64()?, r.get(1)?.as_u64()?)));
        if covered.is_some_and(|(a, b)| a <= first && b >= last) {
            break;
        }
        if started.elapsed() > Duration::from_secs(3600) {
            bail!("the log is not summarised after an hour: {covered:?} of r{first}..r{last}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds(Some(pid)) - cpu;
    let (rss_after, _) = crate::bench_node::status_memory(pid)?;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "summary of r{first}..r{last}: {took:.1} s, server CPU {cpu:.1} s ({:.1} us per revision); VmRSS {:.0} -> {:.0} MiB",
        cpu * 1e6 / (last + 1 - first) as f64,
        mib(rss_before),
        mib(rss_after)
    );
    Ok(())
}

/// Latencies of one request kind, with the server's CPU over them.
struct Measured {
    what: &'static str,
    latencies: Vec<Duration>,
    cpu_per_request: Duration,
    detail: String,
}

impl Measured {
    fn row(&self) -> String {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        format!(
            "  {:<34} {:>8.1} {:>8.1} {:>8.1} {:>10.1}  {}",
            self.what,
            ms(at(0.5)),
            ms(at(0.9)),
            ms(*sorted.last().unwrap()),
            ms(self.cpu_per_request),
            self.detail
        )
    }
}

/// Runs the page's requests for one view, `count` times one after another: `paths` are asked
/// together, as the page asks them.
async fn measure(
    client: &skiff_client::Client,
    pid: u32,
    what: &'static str,
    paths: &[String],
    count: usize,
) -> Result<Measured> {
    // One unmeasured round, so that the caches hold what the page would find there.
    let first = futures::future::try_join_all(paths.iter().map(|p| get(client, p))).await?;
    let detail = describe(&first);
    let mut latencies = Vec::with_capacity(count);
    let cpu = process_cpu_seconds(Some(pid));
    for _ in 0..count {
        let started = Instant::now();
        futures::future::try_join_all(paths.iter().map(|p| get(client, p))).await?;
        latencies.push(started.elapsed());
    }
    let cpu_per_request =
        Duration::from_secs_f64((process_cpu_seconds(Some(pid)) - cpu) / count as f64);
    Ok(Measured {
        what,
        latencies,
        cpu_per_request,
        detail,
    })
}

/// What the answers held: changes counted and listed, rows of a snapshot.
fn describe(answers: &[Value]) -> String {
    let mut parts = Vec::new();
    for answer in answers {
        if let Some(buckets) = answer["buckets"].as_array() {
            let counted: u64 = buckets
                .iter()
                .flat_map(|b| ["created", "updated", "statusUpdated", "deleted"].map(|k| &b[k]))
                .filter_map(Value::as_u64)
                .sum();
            parts.push(format!(
                "timeline: {counted} counted in r{}..r{}{}",
                answer["scannedFrom"],
                answer["to"],
                if answer["complete"] == true {
                    ""
                } else {
                    " (window longer than one scan)"
                }
            ));
        } else if let Some(items) = answer["items"].as_array() {
            parts.push(format!(
                "changes: {} listed in r{}..r{}",
                items.len(),
                answer["scannedFrom"],
                answer["scannedTo"]
            ));
        } else if let Some(kinds) = answer["kinds"].as_array() {
            let total: u64 = kinds.iter().filter_map(|k| k["total"].as_u64()).sum();
            parts.push(format!("snapshot: {} kinds, {total} objects", kinds.len()));
        }
    }
    parts.join("; ")
}

/// The page's first load and filters, asked as the page asks them (`buckets=80`, `limit=100`).
fn views(middle: u64, middle_time: &str, later_time: &str) -> Vec<(&'static str, Vec<String>)> {
    let pair = |filters: &[(&str, &str)]| {
        let query = |first: (&str, &str)| {
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(std::iter::once(first).chain(filters.iter().copied()))
                .finish()
        };
        vec![
            format!("/debug/skiff/timeline?{}", query(("buckets", "80"))),
            format!("/debug/skiff/changes?{}", query(("limit", "100"))),
        ]
    };
    vec![
        ("kinds (page start)", vec!["/debug/skiff/kinds".to_string()]),
        ("first load: timeline + changes", pair(&[])),
        (
            "filter: kind (Deployments)",
            pair(&[("resource", "deployments.apps")]),
        ),
        (
            "filter: one ConfigMap",
            pair(&[
                ("resource", "configmaps"),
                ("namespace", "tl-3"),
                ("name", "cm-13"),
            ]),
        ),
        (
            "filter: label app=app-7",
            pair(&[("resource", "configmaps"), ("labelSelector", "app=app-7")]),
        ),
        (
            "zoom: a window mid-history",
            pair(&[("since", middle_time), ("until", later_time)]),
        ),
        (
            "point: the cluster mid-history",
            vec![format!("/debug/skiff/snapshot?at={middle}")],
        ),
    ]
}

/// The browser side: `timeline-bench.js` in Chromium, its JSON report printed.
fn browser(args: &TimelineArgs, url: &str, token: &str) -> Result<()> {
    let script = args.browser_dir.join("timeline-bench.js");
    if args.page_loads == 0 {
        return Ok(());
    }
    if !script.exists() || !args.browser_dir.join("node_modules").exists() {
        println!(
            "browser: skipped ({} or its node_modules missing; npm ci there)",
            script.display()
        );
        return Ok(());
    }
    if !args.chromium.exists() {
        println!("browser: skipped ({} missing)", args.chromium.display());
        return Ok(());
    }
    let output = Command::new("node")
        .arg(&script)
        .env("SKIFF_URL", url)
        .env("SKIFF_TOKEN", token)
        .env("SKIFF_CHROMIUM", &args.chromium)
        .env("PAGE_LOADS", args.page_loads.to_string())
        .output()
        .context("running node")?;
    if !output.status.success() {
        bail!(
            "the browser side failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let report: Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("{}", String::from_utf8_lossy(&output.stdout)))?;
    println!(
        "browser (Chromium, {} page loads), ms:  median  max   each",
        args.page_loads
    );
    for (key, what) in [
        ("firstRender", "navigation to chart + change list"),
        ("filter", "filter submit to its rows (Deployment web-7)"),
    ] {
        let mut times: Vec<f64> = report[key]
            .as_array()
            .context("a report without times")?
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        let each = times
            .iter()
            .map(|t| format!("{t:.0}"))
            .collect::<Vec<_>>()
            .join(" ");
        times.sort_by(f64::total_cmp);
        println!(
            "  {what:<46} {:>6.0} {:>5.0}   {each}",
            times[times.len() / 2],
            times.last().copied().unwrap_or_default()
        );
    }
    Ok(())
}

fn admin_token(kubeconfig: &Path) -> Result<String> {
    let config: Value = serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig)?)?;
    config["users"][0]["user"]["token"]
        .as_str()
        .map(str::to_string)
        .context("the admin kubeconfig has no token")
}

/// Runs `skiff bench timeline`.
pub async fn run(args: TimelineArgs) -> Result<()> {
    // The whole history is retained: the default keeps 100,000 revisions.
    let retain = vec![format!(
        "--history-revisions={}",
        args.revisions.saturating_mul(2)
    )];
    let mut server = match &args.keep {
        Some(dir) => SpawnedServer::start_kept("apiserver", &retain, dir)?,
        None => SpawnedServer::start_with("apiserver", &retain, args.dir.as_deref())?,
    };
    let client = server.wait_ready().await?;
    fill(&client, args.revisions, args.writers).await?;
    let pid = server.child.id();
    let newest = newest(&client).await?;
    summarise(&client, pid, newest).await?;
    let oldest = get(&client, "/debug/skiff/timeline?buckets=1").await?["oldest"]
        .as_u64()
        .context("a timeline without its oldest revision")?;
    let time_at = async |revision: u64| -> Result<String> {
        let resolved = get(&client, &format!("/debug/skiff/resolve?at={revision}")).await?;
        resolved["time"]
            .as_str()
            .map(str::to_string)
            .context("an old revision without its time")
    };
    // A zoom into the middle of the history: about a hundredth of it.
    let middle = time_at(oldest + (newest - oldest) / 2).await?;
    let later = time_at(oldest + (newest - oldest) / 2 + (newest - oldest) / 100).await?;
    println!(
        "log: r{oldest}..r{newest}; data dir {}",
        server.data_dir().display()
    );
    println!(
        "server, one request at a time ({} each), ms:  p50      p90      max  CPU/request",
        args.requests
    );
    for (what, paths) in views(oldest + (newest - oldest) / 2, &middle, &later) {
        let measured = measure(&client, pid, what, &paths, args.requests).await?;
        println!("{}", measured.row());
    }
    let url = server.url()?;
    let token = admin_token(&server.kubeconfig())?;
    browser(&args, &url, &token)?;
    Ok(())
}

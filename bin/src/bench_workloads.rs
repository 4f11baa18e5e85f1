//! `skiff bench workloads`: the Job and StatefulSet controllers at scale on hollow nodes (the
//! cluster of `skiff bench deployment`: `skiff server` with the controllers and the scheduler,
//! a kubemark-style kubelet for 50 hollow nodes in this process).
//!
//! - A Job of 1,000 completions at parallelism 50: from its create to the `Complete` condition.
//!   The hollow kubelet reports each of its pods Succeeded (exit 0) as soon as it is bound, so
//!   what is measured is the control plane's turnover: the Job controller creating pods 50 at
//!   a time, counting them through their tracking finalizers, and the scheduler binding them.
//! - A StatefulSet of 100 replicas with `podManagementPolicy: Parallel`: from its create to
//!   `readyReplicas` = 100 (and `currentRevision` recorded).
//!
//! Each phase prints its time, pods per second and the control plane's CPU and memory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use skiff_client::Api;
use skiff_client::api::PostParams;

use crate::bench_deployment::{HollowCluster, NAMESPACE, cpu_seconds, load_average, print_phase};

/// Flags of `skiff bench workloads`.
#[derive(Debug, clap::Args)]
pub struct WorkloadsArgs {
    /// Completions of the Job.
    #[arg(long, default_value_t = 1000)]
    completions: i32,
    /// Parallelism of the Job.
    #[arg(long, default_value_t = 50)]
    parallelism: i32,
    /// Replicas of the StatefulSet.
    #[arg(long, default_value_t = 100)]
    stateful_replicas: i32,
    /// Hollow nodes.
    #[arg(long, default_value_t = 50)]
    nodes: usize,
    /// Status updates the hollow kubelet has in flight at once.
    #[arg(long, default_value_t = 50)]
    kubelet_concurrency: usize,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Directory for the temporary data dir (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Extra flags for the `skiff server` under test (e.g. `--server-arg=--bind-qps=0`).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
}

/// Whether a pod belongs to a Job (the hollow kubelet finishes those at once).
fn job_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.kind == "Job")
}

fn job(completions: i32, parallelism: i32) -> Result<Job> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "work", "image": "bench/work:1", "resources": {"requests": {"cpu": "10m"}}}],
            }},
        },
    }))?)
}

fn stateful_set(replicas: i32) -> Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "serviceName": "bench",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "bench-sts"}},
            "template": {
                "metadata": {"labels": {"app": "bench-sts"}},
                "spec": {"containers": [{"name": "db", "image": "bench/db:1", "resources": {"requests": {"cpu": "10m"}}}]},
            },
        },
    }))?)
}

/// Polls `get` every 25 ms until `done` says so, printing `progress` every 5 s.
async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut get: impl AsyncFnMut() -> Result<T>,
    done: impl Fn(&T) -> bool,
    progress: impl Fn(&T) -> String,
) -> Result<Duration> {
    let began = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let value = get().await?;
        if done(&value) {
            return Ok(began.elapsed());
        }
        if began.elapsed() > timeout {
            bail!(
                "{what}: not done after {} s: {}",
                timeout.as_secs(),
                progress(&value)
            );
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            last_print = Instant::now();
            eprintln!(
                "  {what} {:.0} s: {}",
                began.elapsed().as_secs_f64(),
                progress(&value)
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn complete(job: &Job) -> bool {
    job.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Complete" && c.status == "True")
}

/// Runs `skiff bench workloads` and prints its report.
pub async fn run(args: WorkloadsArgs) -> Result<()> {
    println!(
        "skiff bench workloads: a Job of {} completions at parallelism {}, a Parallel StatefulSet of {} replicas, on {} hollow nodes; started {} UTC, load average {}",
        args.completions,
        args.parallelism,
        args.stateful_replicas,
        args.nodes,
        Timestamp::now().strftime("%Y-%m-%d %H:%M:%S"),
        load_average()
    );
    let cluster = HollowCluster::start(
        args.nodes,
        args.kubelet_concurrency,
        args.dir.as_deref(),
        &args.server_args,
        job_pod,
    )
    .await?;
    let timeout = Duration::from_secs(args.timeout_seconds);
    let own_cpu = skiff_scheduler::bench::process_cpu_seconds(None);

    // The Job, to Complete.
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let cpu0 = cpu_seconds(cluster.pid);
    let created = Instant::now();
    jobs.create(
        &PostParams::default(),
        &job(args.completions, args.parallelism)?,
    )
    .await
    .context("creating the Job")?;
    let took = wait_until(
        "job",
        timeout,
        async || Ok(jobs.get("bench").await?),
        complete,
        |j| {
            let s = j.status.clone().unwrap_or_default();
            format!(
                "active {} succeeded {} failed {}",
                s.active.unwrap_or(0),
                s.succeeded.unwrap_or(0),
                s.failed.unwrap_or(0)
            )
        },
    )
    .await?;
    let usage = cluster.usage_since(cpu0)?;
    let latencies = cluster.kubelet.latencies_since(created);
    print_phase(
        &format!(
            "Job of {} completions at parallelism {}: create to Complete",
            args.completions, args.parallelism
        ),
        took,
        args.completions,
        &usage,
        Some(&latencies),
    );
    let succeeded = jobs
        .get("bench")
        .await?
        .status
        .and_then(|s| s.succeeded)
        .unwrap_or(0);
    println!("  status.succeeded {succeeded} (each pod counted once)");

    // The StatefulSet, to every replica Ready.
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let cpu0 = cpu_seconds(cluster.pid);
    let created = Instant::now();
    sets.create(
        &PostParams::default(),
        &stateful_set(args.stateful_replicas)?,
    )
    .await
    .context("creating the StatefulSet")?;
    let want = args.stateful_replicas;
    let took = wait_until(
        "statefulset",
        timeout,
        async || Ok(sets.get("bench").await?),
        |s| {
            let status = s.status.clone().unwrap_or_default();
            status.ready_replicas == Some(want) && status.current_revision.is_some()
        },
        |s| {
            let status = s.status.clone().unwrap_or_default();
            format!(
                "replicas {} ready {}",
                status.replicas,
                status.ready_replicas.unwrap_or(0)
            )
        },
    )
    .await?;
    let usage = cluster.usage_since(cpu0)?;
    let latencies = cluster.kubelet.latencies_since(created);
    print_phase(
        &format!("StatefulSet of {want} replicas, Parallel: create to all Ready"),
        took,
        want,
        &usage,
        Some(&latencies),
    );
    cluster.print_kubelet(own_cpu);
    Ok(())
}

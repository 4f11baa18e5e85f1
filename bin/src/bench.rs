//! `skiff bench <component>`: benchmarks that need a running API server start one (this same
//! binary, `skiff apiserver`, on a temporary data dir and a loopback port) and drive it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// What to benchmark.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Pods bound per second by the scheduler over hollow nodes (like scheduler_perf).
    Scheduler(skiff_scheduler::bench::BenchOptions),
    /// skiff's Kubernetes API (HTTPS, ConfigMaps) against etcd 3.4's v3 JSON gateway, side by side:
    /// creates/s, gets/s, lists of 10k objects and watch fan-out at each concurrency level, with
    /// each system's CPU per create and get and its resident memory after them. `--systems` adds
    /// skiff on a 1- or 3-member etcd beside that etcd's own API, and the failover workload times
    /// a killed etcd leader.
    Api(ApiArgs),
    /// One `skiff server` node: cold start to a Ready node running a pod, resident memory idle
    /// and with N pods, and pod startup latency (create to Running as a watch sees it).
    Node(crate::bench_node::NodeArgs),
    /// The controllers: a 1,000-replica Deployment on 50 hollow nodes (a kubemark-style hollow
    /// kubelet in this process) to Available, then a rolling update of it to finished.
    Deployment(crate::bench_deployment::DeploymentArgs),
    /// Custom resources: a definition's create to Established and served (a large published
    /// schema and a small one), and creates/s of a large-schema custom resource against
    /// ConfigMaps of the same size, side by side.
    Crd(crate::bench_crd::CrdArgs),
    /// The Job and StatefulSet controllers on hollow nodes: a 1,000-completion Job at
    /// parallelism 50 to Complete, and a 100-replica Parallel StatefulSet to all Ready.
    Workloads(crate::bench_workloads::WorkloadsArgs),
    /// Authorization's cost: ConfigMap creates/s and gets/s of a user whom RBAC decides among
    /// 200 ClusterRoles and 1,000 RoleBindings, against the admin (`system:masters`), side by
    /// side.
    Rbac(crate::bench_rbac::RbacArgs),
    /// What one validating admission webhook and one ValidatingAdmissionPolicy add to a
    /// ConfigMap create, against creates that neither matches, side by side: creates/s, p50,
    /// p99 and the API server's CPU per create.
    Admission(crate::bench_admission::AdmissionArgs),
    /// The built-in ingress controller against nginx routing the same two hosts to the same
    /// backends, side by side: requests/s, p50 and p99 over keep-alive connections, and the
    /// latency each adds over the backend alone.
    Ingress(crate::bench_ingress::IngressArgs),
    /// The timeline page on a long history (1M revisions by default): the latency and server
    /// CPU of each request the page makes (first load, filters, a zoom, an old point), and in
    /// Chromium the time to first render and to a filter's result.
    Timeline(crate::bench_timeline::TimelineArgs),
    /// The cluster DNS against dnsmasq and unbound serving the same names: answers/s, p50 and
    /// p99 latency and CPU per answer, side by side in alternated rounds.
    Dns(crate::bench_dns::DnsArgs),
    /// Streams through the API server and the kubelet against going to the pod directly:
    /// `kubectl port-forward` throughput, round trips and new connections against the pod's
    /// address, and `kubectl exec POD -- true` beside kubectl's own floor, a WebSocket exec from
    /// this process and a direct spawn.
    Streaming(crate::bench_streaming::StreamingArgs),
}

/// A `skiff` child (`apiserver`, or `server` with every component) on a temporary data dir and
/// a loopback port, stopped and cleaned up on drop.
pub(crate) struct SpawnedServer {
    pub(crate) child: Child,
    dir: PathBuf,
    /// Whether `dir` stays after the server stops.
    keep: bool,
}

impl SpawnedServer {
    /// Starts `skiff <subcommand>` on a new data dir under `base` (default: the temp dir).
    pub(crate) fn start(subcommand: &str, base: Option<&Path>) -> Result<SpawnedServer> {
        Self::start_with(subcommand, &[], base)
    }

    /// Starts `skiff <subcommand> <args>...` in `dir` (its data dir `dir/data`, made or
    /// reused), which stays after the server stops.
    pub(crate) fn start_kept(
        subcommand: &str,
        args: &[String],
        dir: &Path,
    ) -> Result<SpawnedServer> {
        let mut server = Self::spawn(subcommand, args, dir.to_path_buf())?;
        server.keep = true;
        Ok(server)
    }

    /// Starts `skiff <subcommand> <args>...` on a new data dir under `base`.
    pub(crate) fn start_with(
        subcommand: &str,
        args: &[String],
        base: Option<&Path>,
    ) -> Result<SpawnedServer> {
        let dir = base
            .map_or_else(std::env::temp_dir, Path::to_path_buf)
            .join(format!(
                "skiff-bench-{subcommand}-{}-{}",
                std::process::id(),
                jiff::Timestamp::now().as_millisecond()
            ));
        Self::spawn(subcommand, args, dir)
    }

    fn spawn(subcommand: &str, args: &[String], dir: PathBuf) -> Result<SpawnedServer> {
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::File::create(dir.join("server.log"))?;
        // `SKIFF_BENCH_SERVER_WRAPPER` (e.g. `heaptrack`) runs the server under a profiler; the
        // child is then the wrapper, so the CPU and memory a bench reads from its /proc entry
        // are the wrapper's, not the server's.
        let exe = std::env::current_exe()?;
        let mut command = match std::env::var_os("SKIFF_BENCH_SERVER_WRAPPER") {
            Some(wrapper) => {
                let mut command = Command::new(wrapper);
                command.arg(&exe);
                command
            }
            None => Command::new(&exe),
        };
        let child = command
            .arg(subcommand)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--bind-address", "127.0.0.1", "--port", "0"])
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting skiff {subcommand}"))?;
        Ok(SpawnedServer {
            child,
            dir,
            keep: false,
        })
    }

    /// The admin kubeconfig the server wrote.
    pub(crate) fn kubeconfig(&self) -> PathBuf {
        self.data_dir().join(crate::server::KUBECONFIG_FILE)
    }

    /// The server's data dir.
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's URL, from the kubeconfig it wrote.
    pub(crate) fn url(&self) -> Result<String> {
        let text = std::fs::read_to_string(self.kubeconfig())?;
        let config: serde_json::Value = serde_saphyr::from_str(&text)?;
        config["clusters"][0]["cluster"]["server"]
            .as_str()
            .map(str::to_string)
            .context("the kubeconfig names no server")
    }

    /// A client once the server answers `/version`.
    pub(crate) async fn wait_ready(&mut self) -> Result<skiff_client::Client> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "skiff exited with {status}; see {}",
                    self.dir.join("server.log").display()
                );
            }
            if self.kubeconfig().exists()
                && let Ok(client) = connect(&self.kubeconfig()).await
                && client.apiserver_version().await.is_ok()
            {
                return Ok(client);
            }
            if Instant::now() > deadline {
                bail!("skiff not ready within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for SpawnedServer {
    fn drop(&mut self) {
        // SIGTERM first, so that a kubelet's pods are not left behind by a SIGKILL.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A duration in whole microseconds, for a report.
pub(crate) fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn connect(kubeconfig: &Path) -> Result<skiff_client::Client> {
    Ok(skiff_client::connect(&skiff_client::ClientConfig {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        ..Default::default()
    })
    .await?)
}

/// Runs a benchmark and prints its report.
pub async fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Node(args) => crate::bench_node::run(args).await,
        BenchCommand::Deployment(args) => crate::bench_deployment::run(args).await,
        BenchCommand::Crd(args) => crate::bench_crd::run(args).await,
        BenchCommand::Rbac(args) => crate::bench_rbac::run(args).await,
        BenchCommand::Admission(args) => crate::bench_admission::run(args).await,
        BenchCommand::Ingress(args) => crate::bench_ingress::run(args).await,
        BenchCommand::Timeline(args) => crate::bench_timeline::run(args).await,
        BenchCommand::Dns(args) => crate::bench_dns::run(args).await,
        BenchCommand::Workloads(args) => crate::bench_workloads::run(args).await,
        BenchCommand::Streaming(args) => crate::bench_streaming::run(args).await,
        BenchCommand::Scheduler(mut opts) => {
            let (decisions, _) = skiff_scheduler::bench::decide_only(
                opts.nodes,
                opts.pods,
                opts.percentage_of_nodes_to_score,
            )
            .await;
            println!(
                "scheduler alone (in process, binds that do nothing): {decisions:.0} decisions/s"
            );
            let mut server = SpawnedServer::start("apiserver", None)?;
            let client = server.wait_ready().await?;
            opts.server_pid = Some(server.child.id());
            let report = skiff_scheduler::bench::run(client, opts).await?;
            println!("{report}");
            Ok(())
        }
        BenchCommand::Api(args) => {
            let options = skiff_api::bench::Options {
                systems: args.systems,
                failover_rounds: args.failover_rounds,
                etcd: args.etcd,
                dir: args.dir,
                clients: args.clients,
                duration: Duration::from_secs(args.seconds),
                list_objects: args.list_objects,
                watchers: args.watchers,
                watch_events: args.watch_events,
                workloads: args.workloads,
                max_concurrent_lists: args.max_concurrent_lists,
                churn_duration: Duration::from_secs(args.churn_seconds),
                churn_sample: Duration::from_secs(args.churn_sample_seconds.max(1)),
                store_cache_bytes: args.store_cache_mib.map(|mib| mib << 20),
                churn_names: args.churn_names,
                ..Default::default()
            };
            let systems = options.systems.clone();
            let rows = skiff_api::bench::run(&options, |row| {
                let rates: Vec<String> = systems
                    .iter()
                    .zip(&row.stats)
                    .filter(|(_, stats)| row.workload != "failover" || stats.ops > 0)
                    .map(|(system, stats)| match row.workload {
                        "failover" => format!("{system} {}", micros(stats.p50)),
                        _ => format!("{system} {:.0}/s", stats.rate()),
                    })
                    .collect();
                eprintln!("{} x{}: {}", row.workload, row.clients, rates.join(", "));
            })
            .await
            .context("the API benchmark failed")?;
            print!("{}", skiff_api::bench::table(&systems, &rows));
            print!("{}", skiff_api::bench::churn_series(&systems, &rows));
            Ok(())
        }
    }
}

/// Flags of `skiff bench api`.
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// The systems, side by side in this order: `skiff` (its embedded log), `skiff-on-etcdN`
    /// (skiff's API on an etcd of N members; `skiff-on-etcd` is one), `etcdN` (that etcd's own
    /// API; `etcd` is one). A cluster of each size is started once and shared.
    #[arg(long, value_delimiter = ',', default_value = "skiff,etcd")]
    systems: Vec<skiff_api::bench::System>,
    /// Rounds of the `failover` workload (the etcd leader killed in each).
    #[arg(long, default_value_t = 3)]
    failover_rounds: usize,
    /// The etcd 3.4 binary (Debian package `etcd-server`).
    #[arg(long, default_value = "etcd")]
    etcd: PathBuf,
    /// Directory for the temporary data dirs (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Concurrent clients, one run per level.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    clients: Vec<usize>,
    /// Seconds each create and get run lasts.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Objects in the listed collection.
    #[arg(long, default_value_t = 10_000)]
    list_objects: usize,
    /// Watchers in the fan-out runs.
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Events written in each fan-out run.
    #[arg(long, default_value_t = 200)]
    watch_events: usize,
    /// Which workloads run (create, get, list, watch; churn only when named: create and delete
    /// in a loop with resident memory sampled; failover only when named: the etcd leader killed
    /// under writes, on systems on three members or more).
    #[arg(long, value_delimiter = ',', default_value = "create,get,list,watch")]
    workloads: Vec<skiff_api::bench::Workload>,
    /// Lists in flight at once per system, whatever the level (each holds megabytes).
    #[arg(long, default_value_t = 16)]
    max_concurrent_lists: usize,
    /// Seconds the churn workload runs per level.
    #[arg(long, default_value_t = 60)]
    churn_seconds: u64,
    /// Seconds between resident-memory samples during churn.
    #[arg(long, default_value_t = 5)]
    churn_sample_seconds: u64,
    /// The skiff side's sled page cache in MiB, as `skiff server --store-cache-mib`
    /// [default: the server's default].
    #[arg(long)]
    store_cache_mib: Option<u64>,
    /// Churn reuses this many names in turn [default: a new name for every create].
    #[arg(long)]
    churn_names: Option<u64>,
}

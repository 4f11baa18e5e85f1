//! `skiff`: the single binary that runs the control plane, or any piece of it.
//!
//! # Layout
//! - `main.rs`: the command line, logging and the runtime.
//! - [`server`]: `skiff server` / `skiff apiserver`: the data dir, the log, the PKI and tokens, the
//!   API server on its listener, and graceful shutdown.
//! - [`datastore`]: `--datastore-*`, the embedded log or an external etcd, and waiting for it.
//! - [`bench`]: `skiff bench <component>`, against a spawned `skiff apiserver`.

mod bench;
mod bench_admission;
mod bench_crd;
mod bench_deployment;
mod bench_dns;
mod bench_ingress;
mod bench_node;
mod bench_rbac;
mod bench_streaming;
mod bench_timeline;
mod bench_workloads;
mod bootstrap;
mod components;
mod config_file;
mod datastore;
mod identities;

use skiff_client::bootstrap::Identity;
mod replay_cmd;
mod server;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

// mimalloc. With glibc's allocator, malloc and free were a quarter of the CPU of an API create
// (sled copies a tree node on every write; JSON is built and dropped per request); mimalloc cut
// the server's CPU per create to about two thirds (BENCHMARKS.md, "Cost per write"). It is built
// without its `madvise(MADV_HUGEPAGE)` on the memory it maps (`no_thp`): where the kernel backs
// such memory with 2 MiB pages, an idle `skiff server` held ~58 MiB more.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A Kubernetes control plane in one binary.
#[derive(Debug, Parser)]
#[command(name = "skiff", version, about, long_about = None)]
struct Cli {
    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "SKIFF_LOG_FORMAT")]
    log_format: LogFormat,

    /// A YAML file of flag values (`flag-name: value`); the command line and `SKIFF_*`
    /// environment variables override it.
    #[arg(long, global = true, env = "SKIFF_CONFIG")]
    config: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole control plane in one process (on the embedded log, or etcd with
    /// `--datastore-endpoint`).
    Server(server::ServerArgs),
    /// Run only the API server (over the embedded log, or etcd with `--datastore-endpoint`).
    Apiserver(server::ApiArgs),
    /// Run the controllers as a process of their own, against an API server.
    Controllers(ControllersArgs),
    /// Run the scheduler as a process of its own.
    Scheduler(SchedulerArgs),
    /// Run a kubelet as a process of its own.
    Kubelet(KubeletArgs),
    /// Run the service proxy as a process of its own.
    Proxy(ProxyArgs),
    /// Join a server as a node: a kubelet and a proxy in one process.
    Agent(AgentArgs),
    /// Benchmarks (they start their own API server on a temporary data dir).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Show objects as they were at a point in history (a revision, a time, `-15m`).
    Get(replay_cmd::GetArgs),
    /// Show every version of one object, with operation and field manager.
    History(replay_cmd::HistoryArgs),
    /// Show what was created, changed and deleted between two points.
    Diff(replay_cmd::DiffArgs),
    /// Show the change stream, one line a change.
    Log(replay_cmd::LogArgs),
    /// Copy a stopped server's data dir as it was at a point into a new data dir.
    Replay(replay_cmd::ReplayArgs),
    /// Write a stopped server's log entries, or an etcd prefix's, to a portable, checksummed
    /// archive.
    Export(replay_cmd::ExportArgs),
    /// Create a data dir, or fill an empty etcd prefix, from an archive written by `skiff export`.
    Import(replay_cmd::ImportArgs),
    /// Check a stopped server's data dir; with `--accept-lost-writes`, open one whose log damage
    /// cut short, giving up the writes past the damage.
    Repair(replay_cmd::RepairArgs),
    /// Container images of the node's containerd.
    #[command(subcommand)]
    Images(ImagesCommand),
}

/// `skiff images`.
#[derive(Debug, Subcommand)]
enum ImagesCommand {
    /// Load OCI or docker image archives (`docker save`, `skopeo copy ... oci-archive:`) into
    /// the node's containerd, where pods run them without a registry (`imagePullPolicy: Never`
    /// or `IfNotPresent`). `<data-dir>/images/*.tar` is imported when `skiff server` starts.
    Import(ImagesImportArgs),
}

/// `skiff images import`.
#[derive(Debug, clap::Args)]
struct ImagesImportArgs {
    /// The containerd socket (`unix:///run/containerd/containerd.sock`).
    #[arg(
        long,
        env = "SKIFF_CONTAINER_RUNTIME_ENDPOINT",
        default_value = "unix:///run/containerd/containerd.sock"
    )]
    container_runtime_endpoint: String,
    /// The archives.
    #[arg(required = true)]
    archives: Vec<std::path::PathBuf>,
}

/// `skiff images import`: each archive in turn, its image names printed; fails on the first
/// archive that does not import.
async fn images_import(args: ImagesImportArgs) -> anyhow::Result<()> {
    let socket = skiff_kubelet::runtime::cri::parse_endpoint(&args.container_runtime_endpoint)
        .map_err(anyhow::Error::msg)?;
    for archive in args.archives {
        let socket = socket.clone();
        let names =
            tokio::task::spawn_blocking(move || skiff_kubelet::images::import(&socket, &archive))
                .await??;
        for name in names {
            println!("imported {name}");
        }
    }
    Ok(())
}

/// `skiff controllers`.
#[derive(Debug, clap::Args)]
struct ControllersArgs {
    #[command(flatten)]
    client: skiff_client::ClientConfig,
    #[command(flatten)]
    options: skiff_controllers::Options,
    #[command(flatten, next_help_heading = "Leader election")]
    leader_election: skiff_client::leaderelection::Flags,
}

/// `skiff scheduler`.
#[derive(Debug, clap::Args)]
struct SchedulerArgs {
    #[command(flatten)]
    client: skiff_client::ClientConfig,
    #[command(flatten)]
    options: skiff_scheduler::Options,
    #[command(flatten, next_help_heading = "Leader election")]
    leader_election: skiff_client::leaderelection::Flags,
}

/// `skiff kubelet`.
#[derive(Debug, clap::Args)]
struct KubeletArgs {
    #[command(flatten)]
    client: skiff_client::ClientConfig,
    #[command(flatten)]
    options: skiff_kubelet::Options,
}

/// `skiff proxy`.
#[derive(Debug, clap::Args)]
struct ProxyArgs {
    #[command(flatten)]
    client: skiff_client::ClientConfig,
    #[command(flatten)]
    options: skiff_proxy::Options,
}

/// `skiff agent`: a kubelet and a proxy joining a server (usually `--server URL --token
/// <join token>`; the join token's secret is also what the server presents to this kubelet).
#[derive(Debug, clap::Args)]
struct AgentArgs {
    #[command(flatten)]
    client: skiff_client::ClientConfig,
    #[command(flatten, next_help_heading = "Kubelet")]
    kubelet: skiff_kubelet::Options,
    #[command(flatten, next_help_heading = "Proxy")]
    proxy: skiff_proxy::Options,
}

/// Where a kubelet started with a join token keeps the certificates it asked for.
fn kubelet_pki_dir(options: &skiff_kubelet::Options) -> std::path::PathBuf {
    options
        .root_dir
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("/var/lib/skiff/kubelet"))
        .join("pki")
}

/// The clients of a component: one per identity it has (the configured client for each when it
/// did not join with a join token; that client alone when it has no identity of its own), the
/// configured client to renew certificates with, and when the first of them is due for renewal.
struct Connected {
    clients: Vec<skiff_client::Client>,
    bootstrap: skiff_client::Client,
    renew_at: Option<std::time::SystemTime>,
}

/// Clients as `config` says. With a join token, the token only asks for each identity's
/// certificate (kept in `dir`, reused until due for renewal), and each client presents its
/// certificate: a joining kubelet is `system:node:<name>`, not the token.
async fn connect_as(
    config: &skiff_client::ClientConfig,
    identities: Option<(&std::path::Path, &[Identity])>,
) -> anyhow::Result<Connected> {
    use anyhow::Context;
    let bootstrap = skiff_client::connect(config).await?;
    let join = config
        .token
        .as_deref()
        .and_then(|t| skiff_client::JoinToken::parse(t).ok());
    let (Some(join), Some(server), Some((dir, identities))) = (join, &config.server, identities)
    else {
        let clients = identities.map_or(1, |(_, all)| all.len());
        return Ok(Connected {
            clients: vec![bootstrap.clone(); clients],
            bootstrap,
            renew_at: None,
        });
    };
    let ca = skiff_client::join::fetch_ca(server, &join).await?;
    let mut clients = Vec::new();
    let mut renew_at: Option<std::time::SystemTime> = None;
    for identity in identities {
        let credentials = skiff_client::bootstrap::credentials(&bootstrap, dir, identity)
            .await
            .with_context(|| {
                format!(
                    "cannot get a certificate for {}",
                    identity.subject.common_name
                )
            })?;
        let due = skiff_client::bootstrap::renew_at(&credentials.cert_pem);
        renew_at = renew_at.into_iter().chain(due).min();
        clients.push(skiff_client::connect_with_certificate(
            server,
            &ca,
            &credentials,
        )?);
    }
    Ok(Connected {
        clients,
        bootstrap,
        renew_at,
    })
}

/// [`connect_as`], tried again while the API server cannot be reached or cannot serve yet (a
/// box that boots before its server, a server restarting), as a kubelet waits for its API server
/// instead of exiting. What the server can never accept (a malformed token, a CA that does not
/// match the join token's hash, a refused credential, an unreadable file) fails at once. `None`
/// when shut down while waiting.
async fn connect_when_reachable(
    config: &skiff_client::ClientConfig,
    identities: Option<(&std::path::Path, &[Identity])>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<Option<Connected>> {
    const LONGEST: std::time::Duration = std::time::Duration::from_secs(8);
    let mut wait = std::time::Duration::from_secs(1);
    loop {
        let error = match connect_as(config, identities).await {
            Ok(connected) => return Ok(Some(connected)),
            Err(error) if transient(&error) => error,
            Err(error) => return Err(error),
        };
        tracing::warn!(error = %format!("{error:#}"), retry_in = ?wait, "the API server cannot be reached yet");
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return Ok(None),
        }
        wait = (wait * 2).min(LONGEST);
    }
}

/// Whether a failure to connect may pass by itself (see [`skiff_client::Error::is_transient`]).
fn transient(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<skiff_client::Error>()
            .is_some_and(skiff_client::Error::is_transient)
            || cause
                .downcast_ref::<kube::Error>()
                .is_some_and(skiff_client::transient)
    })
}

/// Sleeps until the wall clock reaches `time` (checking at least hourly, so that a clock that
/// jumped, or a machine that slept, is noticed).
async fn sleep_until(time: std::time::SystemTime) {
    const CHECK: std::time::Duration = std::time::Duration::from_secs(3600);
    while let Ok(left) = time.duration_since(std::time::SystemTime::now()) {
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(CHECK)).await;
    }
}

/// Asks for new certificates of all `identities` (the first of them being due: one restart
/// renews them all), retrying every minute while the server cannot answer; returns when they
/// are stored or on shutdown.
async fn renew(
    bootstrap: &skiff_client::Client,
    dir: &std::path::Path,
    identities: &[Identity],
    shutdown: &tokio_util::sync::CancellationToken,
) {
    const RETRY: std::time::Duration = std::time::Duration::from_secs(60);
    for identity in identities {
        let user = &identity.subject.common_name;
        loop {
            match skiff_client::bootstrap::renew(bootstrap, dir, identity).await {
                Ok(_) => {
                    tracing::info!(%user, "renewed the client certificate");
                    break;
                }
                Err(error) => {
                    tracing::warn!(%user, %error, "cannot renew the client certificate yet; the current one stays in use");
                    tokio::select! {
                        () = tokio::time::sleep(RETRY) => {}
                        () = shutdown.cancelled() => return,
                    }
                }
            }
        }
    }
}

/// Runs one component as its own process until SIGINT/SIGTERM. `run` gets a client per
/// identity (see [`connect_as`]). Joined with a join token, it runs as those identities, and
/// when the first of their certificates is due for renewal, new ones are obtained while it
/// still runs; then it is stopped and started again with them, as a restart would (a kubelet's
/// pods run on meanwhile).
async fn run_component<F, Fut>(
    config: &skiff_client::ClientConfig,
    identities: Option<(&std::path::Path, &[Identity])>,
    mut run: F,
) -> anyhow::Result<()>
where
    F: FnMut(Vec<skiff_client::Client>, tokio_util::sync::CancellationToken) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use anyhow::Context;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        if server::wait_for_signal().await.is_ok() {
            tracing::info!("shutting down");
            stop.cancel();
        }
    });
    // A --server list: every client of this process goes through one relay to them.
    let config = &config.balanced().await?;
    loop {
        let Some(connected) = connect_when_reachable(config, identities, &shutdown).await? else {
            return Ok(());
        };
        let round = shutdown.child_token();
        let mut running = std::pin::pin!(run(connected.clients, round.clone()));
        let renewed = async {
            match (connected.renew_at, identities) {
                (Some(due), Some((dir, identities))) => {
                    sleep_until(due).await;
                    renew(&connected.bootstrap, dir, identities, &shutdown).await;
                }
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            result = &mut running => return result.context("the component failed"),
            () = renewed => {}
        }
        if !shutdown.is_cancelled() {
            tracing::info!("restarting with the renewed client certificates");
            round.cancel();
        }
        running.await.context("the component failed")?;
        if shutdown.is_cancelled() {
            return Ok(());
        }
    }
}

/// Runs a component that acts only while it holds its leader-election lease (`None`: always),
/// as kube-controller-manager and kube-scheduler do; `work` starts it with a client and the
/// token that stops it.
async fn run_elected<F, Fut, E>(
    config: &skiff_client::ClientConfig,
    election: Option<skiff_client::leaderelection::Config>,
    work: F,
) -> anyhow::Result<()>
where
    F: Fn(skiff_client::Client, tokio_util::sync::CancellationToken) -> Fut + Clone,
    Fut: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: Into<anyhow::Error> + Send + 'static,
{
    run_component(config, None, |mut clients, shutdown| {
        let client = clients.remove(0);
        let (election, work) = (election.clone(), work.clone());
        async move {
            let worker = client.clone();
            skiff_client::leaderelection::run(client, election, shutdown, move |stop| {
                work(worker.clone(), stop)
            })
            .await
            .map_err(Into::into)
        }
    })
    .await
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Parses the command line, with the config file's values as defaults.
fn parse() -> anyhow::Result<Cli> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut command = Cli::command();
    if let Some(path) = config_file::find(&args) {
        command = config_file::apply(command, &path, &args)?;
    }
    let matches = command.get_matches_from(args);
    Ok(Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_do_not_clash() {
        // clap's own check of names, shorts and defaults runs in debug builds only...
        Cli::command().debug_assert();
        // ...so the clashes that bit us (two flattened option structs reusing an argument id or a
        // long flag) are checked here in every build, the release test run included.
        fn check(command: &clap::Command, path: &str) {
            let path = format!("{path} {}", command.get_name());
            let mut ids = std::collections::HashSet::new();
            let mut longs = std::collections::HashSet::new();
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                assert!(ids.insert(id), "{path}: argument id {id:?} is used twice");
                if let Some(long) = arg.get_long() {
                    assert!(longs.insert(long), "{path}: --{long} is used twice");
                }
            }
            for sub in command.get_subcommands() {
                check(sub, &path);
            }
        }
        let mut command = Cli::command();
        command.build();
        check(&command, "");
    }

    #[test]
    fn memory_flags_default_and_bounds() {
        let memory = |extra: &[&str]| -> Result<server::MemoryArgs, clap::Error> {
            let args = ["skiff", "apiserver"].iter().chain(extra);
            let cli = Cli::try_parse_from(args)?;
            match cli.command {
                Command::Apiserver(args) => Ok(args.memory),
                _ => unreachable!("an apiserver command"),
            }
        };
        let defaults = memory(&[]).unwrap();
        assert_eq!(defaults.store_cache_mib, server::DEFAULT_STORE_CACHE_MIB);
        assert_eq!(
            defaults.watch_cache_events,
            skiff_api::watch_cache::DEFAULT_CAPACITY as u64
        );
        let set = memory(&["--store-cache-mib", "32", "--watch-cache-events", "512"]).unwrap();
        assert_eq!((set.store_cache_mib, set.watch_cache_events), (32, 512));
        for bad in [
            ["--store-cache-mib", "0"],
            ["--watch-cache-events", "0"],
            ["--store-cache-mib", "lots"],
        ] {
            assert!(memory(&bad).is_err(), "{bad:?} was accepted");
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("skiff: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("skiff")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("skiff: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => {
                let plan = server::Plan::from_server_args(&args);
                server::run(args.api, plan).await
            }
            Command::Apiserver(args) => server::run(args, server::Plan::api_only()).await,
            Command::Controllers(args) => {
                use skiff_client::leaderelection;
                // As kube-controller-manager: leader election is on unless turned off.
                let election = args
                    .leader_election
                    .config(leaderelection::CONTROLLER_MANAGER_LEASE, true)?;
                let options = args.options;
                run_elected(&args.client, election, move |client, stop| {
                    skiff_controllers::run(client, options.clone(), stop)
                })
                .await
            }
            Command::Scheduler(args) => {
                use skiff_client::leaderelection;
                let election = args
                    .leader_election
                    .config(leaderelection::SCHEDULER_LEASE, true)?;
                let options = args.options;
                run_elected(&args.client, election, move |client, stop| {
                    skiff_scheduler::run(client, options.clone(), stop)
                })
                .await
            }
            Command::Kubelet(args) => {
                let dir = kubelet_pki_dir(&args.options);
                let identity = Identity::kubelet(&args.options.resolved_node_name());
                run_component(
                    &args.client,
                    Some((&dir, &[identity])),
                    |mut clients, shutdown| {
                        let (client, options) = (clients.remove(0), args.options.clone());
                        async move { Ok(skiff_kubelet::run(client, options, shutdown).await?) }
                    },
                )
                .await
            }
            Command::Proxy(args) => {
                run_component(&args.client, None, |mut clients, shutdown| {
                    let (client, options) = (clients.remove(0), args.options.clone());
                    async move { Ok(skiff_proxy::run(client, options, shutdown).await?) }
                })
                .await
            }
            Command::Agent(args) => {
                let mut kubelet = args.kubelet;
                if kubelet.token.is_none()
                    && let Some(join) = args
                        .client
                        .token
                        .as_deref()
                        .and_then(|t| skiff_client::JoinToken::parse(t).ok())
                {
                    kubelet.token = Some(join.secret);
                }
                // The kubelet and the proxy each have their own identity.
                let dir = kubelet_pki_dir(&kubelet);
                let identities = [
                    Identity::kubelet(&kubelet.resolved_node_name()),
                    Identity::proxy(),
                ];
                let mut proxy = args.proxy;
                if proxy.ingress_status_address.is_none()
                    && proxy.ingress_http_address.ip().is_unspecified()
                {
                    proxy.ingress_status_address = Some(kubelet.node_ip);
                }
                run_component(
                    &args.client,
                    Some((&dir, &identities)),
                    |clients, shutdown| {
                        let (kubelet, proxy) = (kubelet.clone(), proxy.clone());
                        async move {
                            let mut clients = clients.into_iter();
                            let (Some(kubelet_client), Some(proxy_client)) =
                                (clients.next(), clients.next())
                            else {
                                anyhow::bail!("no client for the kubelet and the proxy");
                            };
                            // The first to fail stops the other.
                            let kubelet_stop = shutdown.clone();
                            tokio::try_join!(
                                async {
                                    skiff_kubelet::run(kubelet_client, kubelet, kubelet_stop)
                                        .await
                                        .map_err(anyhow::Error::from)
                                },
                                async {
                                    skiff_proxy::run(proxy_client, proxy, shutdown)
                                        .await
                                        .map_err(anyhow::Error::from)
                                }
                            )?;
                            Ok(())
                        }
                    },
                )
                .await
            }
            Command::Bench(command) => bench::run(command).await,
            Command::Get(args) => replay_cmd::get(args).await,
            Command::History(args) => replay_cmd::history(args).await,
            Command::Diff(args) => replay_cmd::diff(args).await,
            Command::Log(args) => replay_cmd::log(args).await,
            Command::Replay(args) => replay_cmd::replay(args).await,
            Command::Export(args) => replay_cmd::export(args).await,
            Command::Import(args) => replay_cmd::import(args).await,
            Command::Repair(args) => replay_cmd::repair(args).await,
            Command::Images(ImagesCommand::Import(args)) => images_import(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("skiff: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

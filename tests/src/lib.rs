//! End-to-end test harness: starts the real `skiff` binary on a temporary data dir and a free
//! loopback port, and drives it with kubectl and client libraries.
//!
//! # Layout
//! - [`skiff_binary`]: finds the `skiff` binary of this workspace in the same profile as the
//!   tests, building it first only if it is missing or older than its sources.
//! - [`TestCluster`]: one running server; its log is printed when a test fails (on drop while
//!   panicking).
//! - [`Kubectl`]: runs the machine's kubectl against a cluster and captures what it prints.
//! - [`etcd`]: a throwaway etcd member on loopback for the clusters that run on etcd.
//! - [`containerd`]: a containerd of the test's own with a loopback registry and a bridge, for
//!   the CRI runtime's tests.
//! - [`faults`]: a link between a component and the API server that a test can slow down,
//!   partition, take down or sever.

pub mod containerd;
pub mod etcd;
pub mod faults;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The `skiff` binary of this workspace, in the same profile as the tests, never a stale one.
///
/// `cargo test --workspace` builds it before any test runs (the `skiff` package has integration
/// tests, so cargo builds its binary), and then it is used as is. Only when it is missing or older
/// than a source file it is built from (`cargo test -p skiff-client` after an edit of a crate's
/// `src/`) is it built here, once per test process, with the same target selection as
/// `cargo test --workspace` so that the features of its dependencies, and so their artifacts, are
/// the ones that run already built (building the binary alone would resolve other features and
/// rebuild half the dependency tree).
pub fn skiff_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            // The test executable lives in <target>/<profile>/deps/.
            let exe = std::env::current_exe().expect("test executable path");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test executable is under <target>/<profile>/deps");
            let target_dir = profile_dir.parent().expect("profile dir has a parent");
            let release = profile_dir.file_name().is_some_and(|n| n == "release");
            let harness = Path::new(env!("CARGO_MANIFEST_DIR"));
            let workspace = harness.parent().expect("tests/ sits in the workspace");
            let binary = profile_dir.join("skiff");
            let built = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
            let stale = built.is_none_or(|built| {
                newest_source(workspace, &[target_dir, harness]).is_some_and(|s| s > built)
            });
            if stale {
                let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
                let mut build = Command::new(cargo);
                build
                    .args([
                        "build",
                        "-q",
                        "--workspace",
                        "--bins",
                        "--tests",
                        "--manifest-path",
                    ])
                    .arg(workspace.join("Cargo.toml"))
                    .env("CARGO_TARGET_DIR", target_dir);
                if release {
                    build.arg("--release");
                }
                let status = build
                    .status()
                    .expect("running cargo build for the skiff binary");
                assert!(status.success(), "building the skiff binary failed");
            }
            assert!(binary.exists(), "no skiff binary at {}", binary.display());
            binary
        })
        .clone()
}

/// The newest modification time of a Rust source the binary is built from: `*.rs` under the
/// workspace, leaving out test, bench and example targets (which the binary does not contain),
/// the `skip` directories, the target dir and hidden directories.
fn newest_source(dir: &Path, skip: &[&Path]) -> Option<std::time::SystemTime> {
    let mut newest = None;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return None;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let time = if kind.is_dir() {
            if name.starts_with('.')
                || matches!(&*name, "target" | "tests" | "benches" | "examples")
                || skip.contains(&path.as_path())
            {
                continue;
            }
            newest_source(&path, skip)
        } else if [".rs", ".html", ".js", ".css"]
            .iter()
            .any(|ext| name.ends_with(ext))
        {
            // Sources, and the timeline page's files the binary embeds (`api/src/ui/`).
            entry.metadata().and_then(|m| m.modified()).ok()
        } else {
            continue;
        };
        newest = newest.max(time);
    }
    newest
}

/// `skiff <args>` run to completion, without the caller's `KUBECONFIG`: (exit ok, stdout,
/// stderr).
pub fn skiff(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(skiff_binary())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("running skiff");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `skiff <args>`, which must succeed: its stdout.
pub fn skiff_ok(args: &[&str]) -> String {
    let (ok, stdout, stderr) = skiff(args);
    assert!(ok, "skiff {} failed:\n{stdout}\n{stderr}", args.join(" "));
    stdout
}

/// A port on 127.0.0.1, free for TCP and UDP a moment ago, for a process a test starts.
///
/// The port is taken below the kernel's ephemeral range, which is where every `bind(0)` and
/// every outgoing connection gets its port. A port from `bind(0)` is free again the moment it
/// is probed, so another test running side by side could be handed the same one before the
/// server binds it ("Address already in use"). Below the range only another `free_port` could
/// take it, and those calls share one counter.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    let (low, high) = below_ephemeral_ports();
    let span = u32::from(high - low);
    // Test binaries run one after another; the pid spreads them over the span anyway, in case
    // two run at once on one machine.
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let port = low + offset as u16;
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// The ports [`free_port`] hands out: the 12,000 below the ephemeral range (32768 on Linux
/// unless configured otherwise), or 20000..32000 when the range cannot be read.
fn below_ephemeral_ports() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .filter(|low| *low > 13_024)
        .unwrap_or(32_000);
    (ephemeral_low - 12_000, ephemeral_low)
}

/// How long a SIGTERMed `skiff` process gets before SIGKILL: its kubelet stops its pods first
/// (up to `--shutdown-grace-period`, 10 s by default), then it drains.
pub const STOP_WITHIN: Duration = Duration::from_secs(30);

/// SIGTERM, a wait of up to [`STOP_WITHIN`], then SIGKILL: a SIGKILLed `skiff` leaves its
/// pods' processes running (until a next kubelet on the same root dir kills them).
fn terminate(mut child: Child) -> Option<std::process::ExitStatus> {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + STOP_WITHIN;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("skiff {} did not stop on SIGTERM: killed", child.id());
    let _ = child.kill();
    child.wait().ok()
}

/// One running `skiff` process on its own data dir.
pub struct TestCluster {
    /// The data dir (removed on drop).
    pub dir: tempfile::TempDir,
    /// The API server's URL.
    pub server: String,
    /// The admin kubeconfig the server wrote.
    pub kubeconfig: PathBuf,
    /// The admin bearer token.
    pub token: String,
    /// The PEM of the cluster CA.
    pub ca_pem: Vec<u8>,
    /// The data dir: `data` under `dir`, unless the test chose one ([`TestCluster::start_on`]).
    data: PathBuf,
    port: u16,
    child: Option<Child>,
    log: PathBuf,
    command: &'static str,
    args: Vec<String>,
}

impl TestCluster {
    /// Starts `skiff apiserver` (the API server alone) with extra `args` and waits until it is
    /// ready.
    pub fn start(args: &[&str]) -> TestCluster {
        TestCluster::start_command("apiserver", args)
    }

    /// Starts `skiff server` (everything in one process) with extra `args` and waits until it
    /// is ready.
    pub fn start_server(args: &[&str]) -> TestCluster {
        TestCluster::start_command("server", args)
    }

    /// Starts `skiff <command>` (`server` or `apiserver`) with extra `args`.
    pub fn start_command(command: &'static str, args: &[&str]) -> TestCluster {
        TestCluster::start_prepared(command, args, |_| {})
    }

    /// Like [`TestCluster::start_command`], with `prepare` given the data dir (created, empty)
    /// before the server starts on it: to hand a second API server the first one's PKI and
    /// tokens, say.
    pub fn start_prepared(
        command: &'static str,
        args: &[&str],
        prepare: impl FnOnce(&Path),
    ) -> TestCluster {
        let dir = tempfile::tempdir().expect("temp data dir");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).expect("data dir");
        prepare(&data);
        TestCluster::start_at(command, dir, data, args)
    }

    /// Like [`TestCluster::start_command`], on the data dir `data` (made if missing): a file
    /// system the test mounted, say. The log and kubectl's cache stay in a temporary dir.
    pub fn start_on(command: &'static str, data: &Path, args: &[&str]) -> TestCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(data).expect("data dir");
        TestCluster::start_at(command, dir, data.to_path_buf(), args)
    }

    fn start_at(
        command: &'static str,
        dir: tempfile::TempDir,
        data: PathBuf,
        args: &[&str],
    ) -> TestCluster {
        let port = free_port();
        let log = dir.path().join("server.log");
        let mut cluster = TestCluster {
            server: format!("https://127.0.0.1:{port}"),
            kubeconfig: PathBuf::new(),
            token: String::new(),
            ca_pem: Vec::new(),
            data,
            port,
            child: None,
            log,
            command,
            args: args.iter().map(|s| s.to_string()).collect(),
            dir,
        };
        cluster.spawn();
        cluster
    }

    /// The data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.data.clone()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("server log file");
        let child = Command::new(skiff_binary())
            .arg(self.command)
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--bind-address")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(self.port.to_string())
            .args(&self.args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("SKIFF_CONTAINER_RUNTIME_ENDPOINT", container_runtime())
            // Servers of tests running side by side must not share the cluster DNS's port,
            // nor the ingress controller's (which tests of the ingress give by flag).
            .env("SKIFF_DNS_PORT", "0")
            .env("SKIFF_INGRESS_HTTP_ADDRESS", "127.0.0.1:0")
            .env("SKIFF_INGRESS_HTTPS_ADDRESS", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("starting skiff server");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let kubeconfig = self.data_dir().join("admin.kubeconfig");
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "skiff server exited early with {status}:\n{}",
                    self.log_text()
                );
            }
            if kubeconfig.exists() {
                let out = Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["get", "--raw", "/readyz"])
                    .output();
                if out.is_ok_and(|o| o.status.success()) {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "skiff server not ready within 30 s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kubeconfig = kubeconfig;
        let config = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        self.token = config
            .lines()
            .find_map(|l| l.trim().strip_prefix("token:"))
            .map(|t| t.trim().trim_matches('"').to_string())
            .expect("kubeconfig has a token");
        self.ca_pem = std::fs::read(self.data_dir().join("pki").join("ca.crt")).expect("CA file");
    }

    /// Stops the server with SIGKILL (a crash) and starts it again on the same data dir.
    pub fn restart_after_crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.spawn();
    }

    /// Kills the server outright (SIGKILL), as a lost machine would, and leaves it stopped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server with SIGTERM and starts it again on the same data dir and port.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The port the API server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The join token the server wrote for agents.
    pub fn join_token(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("join-token"))
            .expect("join-token file")
            .trim()
            .to_string()
    }

    /// The server token this server keeps for a shared datastore (`--server-token`).
    pub fn server_token(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("server-token"))
            .expect("server-token file (the server runs on a shared datastore)")
            .trim()
            .to_string()
    }

    /// Starts another API server of this cluster (`skiff <command>`, `args` naming the same
    /// datastore) on a data dir of its own, with this server's `--server-token`, as a second
    /// machine of one cluster joins it: it takes the cluster's CA and tokens from the datastore.
    pub fn join_server(&self, command: &'static str, args: &[&str]) -> TestCluster {
        let token = self.server_token();
        let mut all = args.to_vec();
        all.extend(["--server-token", &token]);
        TestCluster::start_command(command, &all)
    }

    /// Stops the server with SIGTERM and waits for it (SIGKILL after [`STOP_WITHIN`]); returns
    /// its exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        terminate(self.child.take()?)
    }

    /// What the server has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// kubectl pointed at this cluster.
    pub fn kubectl(&self) -> Kubectl {
        Kubectl {
            program: PathBuf::from("kubectl"),
            kubeconfig: self.kubeconfig.clone(),
            cache: self.dir.path().join("kube-cache"),
        }
    }

    /// kubectl pointed at this cluster as the user of a client certificate (PEM files), through
    /// a kubeconfig of its own named `name`.
    pub fn kubectl_with_certificate(&self, name: &str, cert: &Path, key: &Path) -> Kubectl {
        let kubeconfig = self.dir.path().join(format!("{name}.kubeconfig"));
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "skiff", "cluster": {
                "server": self.server,
                "certificate-authority": self.data_dir().join("pki/ca.crt"),
            }}],
            "users": [{"name": name, "user": {
                "client-certificate": cert,
                "client-key": key,
            }}],
            "contexts": [{"name": name, "context": {"cluster": "skiff", "user": name}}],
            "current-context": name,
        });
        std::fs::write(&kubeconfig, config.to_string()).expect("writing a kubeconfig");
        Kubectl {
            program: PathBuf::from("kubectl"),
            kubeconfig,
            cache: self.dir.path().join(format!("kube-cache-{name}")),
        }
    }

    /// An HTTPS client that trusts the cluster CA (no token attached).
    pub fn http(&self) -> reqwest::Client {
        install_crypto();
        let ca = reqwest::Certificate::from_pem(&self.ca_pem).expect("CA PEM");
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()
            .expect("HTTPS client")
    }
}

/// A `skiff` component process (scheduler, controllers, kubelet, ...) pointed at a cluster;
/// killed on drop, its log printed if a test panics.
pub struct Component {
    child: Option<Child>,
    log: PathBuf,
    name: String,
    args: Vec<String>,
}

impl TestCluster {
    /// Starts `skiff <args...>` (e.g. `["controllers"]`) with `--kubeconfig` naming this
    /// cluster's admin kubeconfig appended.
    pub fn spawn_component(&self, args: &[&str]) -> Component {
        self.spawn_component_through(&self.server, args)
    }

    /// Like [`TestCluster::spawn_component`], the component reaching the API server at `server`
    /// (a [`faults::Link`]'s URL, say) through an admin kubeconfig of its own.
    pub fn spawn_component_through(&self, server: &str, args: &[&str]) -> Component {
        let kubeconfig = self.kubeconfig_through(server);
        let mut all: Vec<&str> = args.to_vec();
        all.extend([
            "--kubeconfig",
            kubeconfig.to_str().expect("UTF-8 kubeconfig path"),
        ]);
        self.spawn_skiff(&all)
    }

    /// The admin kubeconfig, or a copy of it naming `server` in its place (the server's
    /// certificate holds for any port of its address).
    pub fn kubeconfig_through(&self, server: &str) -> PathBuf {
        if server == self.server {
            return self.kubeconfig.clone();
        }
        let config = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        assert!(
            config.contains(&self.server),
            "the kubeconfig names another server"
        );
        let port = server.rsplit(':').next().expect("a URL with a port");
        let copy = self.dir.path().join(format!("admin-via-{port}.kubeconfig"));
        std::fs::write(&copy, config.replace(&self.server, server)).expect("kubeconfig copy");
        copy
    }

    /// Starts `skiff controllers` against this cluster as [`TestCluster::spawn_component`]
    /// does, handing its `csrsigning` controller the cluster CA (as kube-controller-manager's
    /// `--cluster-signing-*-file` flags do) so that agents joining with the join token are issued
    /// their node certificates.
    pub fn spawn_controllers(&self, args: &[&str]) -> Component {
        self.spawn_controllers_through(&self.server, args)
    }

    /// Like [`TestCluster::spawn_controllers`], reaching the API server at `server`.
    pub fn spawn_controllers_through(&self, server: &str, args: &[&str]) -> Component {
        let pki = self.data_dir().join("pki");
        let cert = pki.join("ca.crt");
        let key = pki.join("ca.key");
        let mut all = vec![
            "controllers",
            "--cluster-signing-cert-file",
            cert.to_str().expect("UTF-8 path"),
            "--cluster-signing-key-file",
            key.to_str().expect("UTF-8 path"),
        ];
        all.extend(args);
        self.spawn_component_through(server, &all)
    }

    /// Starts `skiff agent --server <url> --token <join token> <args...>`: a node joining this
    /// cluster as an agent would (give it `--node-name` and `--root-dir`). Its pods outlive it,
    /// as a real kubelet's do: see [`kill_pod_processes`].
    pub fn spawn_agent(&self, args: &[&str]) -> Component {
        self.spawn_agent_through(&self.server, args)
    }

    /// Like [`TestCluster::spawn_agent`], the agent joining and then reaching the API server at
    /// `server`.
    pub fn spawn_agent_through(&self, server: &str, args: &[&str]) -> Component {
        let token = self.join_token();
        let mut all = vec!["agent", "--server", server, "--token", &token];
        all.extend(args);
        self.spawn_skiff(&all)
    }

    /// The root dir of the kubelet `skiff server` runs (unless `--root-dir` says otherwise).
    pub fn kubelet_root(&self) -> PathBuf {
        self.data_dir().join("kubelet")
    }

    /// Starts `skiff <args...>` as given (nothing appended), logging beside this cluster's log.
    pub fn spawn_skiff(&self, args: &[&str]) -> Component {
        let name = args.first().copied().unwrap_or("component").to_string();
        let log = self.dir.path().join(format!("{name}-{}.log", free_port()));
        let mut component = Component {
            child: None,
            log,
            name,
            args: args.iter().map(|s| s.to_string()).collect(),
        };
        component.spawn();
        component
    }
}

impl Component {
    fn spawn(&mut self) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("component log file");
        let child = Command::new(skiff_binary())
            .args(&self.args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("SKIFF_CONTAINER_RUNTIME_ENDPOINT", container_runtime())
            // Proxies and agents of tests side by side: an ingress port of their own each.
            .env("SKIFF_INGRESS_HTTP_ADDRESS", "127.0.0.1:0")
            .env("SKIFF_INGRESS_HTTPS_ADDRESS", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log handle"))
            .stderr(file)
            .spawn()
            .expect("starting a skiff component");
        self.child = Some(child);
    }

    /// Kills it outright (SIGKILL) if it runs, and starts it again with the same arguments,
    /// logging to the same file.
    pub fn restart_after_crash(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// What the component has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills it outright (SIGKILL), as a crash or a lost machine would: nothing it runs is
    /// stopped, its node is left as it was.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it with SIGTERM (SIGKILL after [`STOP_WITHIN`]) and returns its exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        terminate(self.child.take()?)
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- skiff {} log ----\n{}", self.name, self.log_text());
        }
        self.stop();
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- skiff server log ----\n{}", self.log_text());
        }
        self.stop();
    }
}

/// The container runtime of the kubelets the harness starts: the process runtime, so that a
/// containerd that happens to answer at its default socket does not change what the tests run
/// (their pods are host shell loops); `SKIFF_CONTAINER_RUNTIME_ENDPOINT` in the test's
/// environment overrides it.
pub fn container_runtime() -> String {
    std::env::var("SKIFF_CONTAINER_RUNTIME_ENDPOINT").unwrap_or_else(|_| "process".into())
}

/// Installs the ring crypto provider for rustls once per process.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The machine's kubectl against one cluster.
pub struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

/// Where the kubectl dispatcher keeps the clients it bundles (`kubectl.1.32`, ...).
pub const BUNDLED_KUBECTL_DIR: &str = "/usr/lib/google-cloud-sdk/bin";

/// What one kubectl run printed.
#[derive(Debug)]
pub struct Run {
    /// Whether it exited 0.
    pub ok: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Kubectl {
    /// The same cluster through the bundled client `kubectl.<version>` (`"1.32"`) instead of
    /// the one the dispatcher picks from the server's version, with a cache dir of its own.
    pub fn bundled(&self, version: &str) -> Kubectl {
        let program = Path::new(BUNDLED_KUBECTL_DIR).join(format!("kubectl.{version}"));
        assert!(
            program.exists(),
            "{} is missing on this machine",
            program.display()
        );
        Kubectl {
            program,
            kubeconfig: self.kubeconfig.clone(),
            cache: self.cache.with_file_name(format!("kube-cache-{version}")),
        }
    }

    /// The kubectl command for `args` (stdin null), for a test that needs its exit code,
    /// binary input or a process of its own.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.program);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// Runs kubectl with `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        self.command(args).output().expect("running kubectl").into()
    }

    /// Runs kubectl with `args` and `stdin` as its standard input (for `-f -`).
    pub fn run_with_input(&self, args: &[&str], stdin: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("writing kubectl input");
        child.wait_with_output().expect("kubectl output").into()
    }

    /// Runs kubectl and panics with its output unless it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert!(
            run.ok,
            "kubectl {} failed:\nstdout: {}\nstderr: {}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run.stdout
    }

    /// Like [`Kubectl::ok`] with standard input.
    pub fn ok_with_input(&self, args: &[&str], stdin: &str) -> String {
        let run = self.run_with_input(args, stdin);
        assert!(
            run.ok,
            "kubectl {} failed:\nstdout: {}\nstderr: {}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run.stdout
    }

    /// Runs kubectl expecting failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert!(
            !run.ok,
            "kubectl {} unexpectedly succeeded: {}",
            args.join(" "),
            run.stdout
        );
        run.stderr
    }

    /// Starts kubectl in the background (for `get -w`), its output going to `out`.
    pub fn spawn(&self, args: &[&str], out: &Path) -> Child {
        let file = std::fs::File::create(out).expect("output file");
        self.command(args)
            .stdout(file.try_clone().expect("handle"))
            .stderr(file)
            .spawn()
            .expect("starting kubectl")
    }
}

/// Polls `check` every 100 ms until it holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The pids of live processes (other than this one) with `marker` as one of their arguments:
/// the pod processes of a test that put its own marker on their command lines.
pub fn processes_with_argument(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let marker = marker.as_bytes();
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == marker))
        })
        .collect()
}

/// The pod processes a kubelet whose root dir is `kubelet_root` started and that still run: the
/// process-group leaders its container records name, checked by their start time so that a pid
/// reused by another process is never taken for one of them.
pub fn pod_processes(kubelet_root: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(kubelet_root.join("containers")) else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        let Ok(record) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        let (Some(pid), Some(ticks)) = (record["pid"].as_i64(), record["start_ticks"].as_u64())
        else {
            continue;
        };
        if start_ticks(pid) == Some(ticks) {
            pids.push(pid as i32);
        }
    }
    pids
}

/// Field 22 of `/proc/<pid>/stat`, the process's start time in clock ticks.
fn start_ticks(pid: i64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Kills (SIGKILL, the whole process group) every pod process [`pod_processes`] finds under
/// `kubelet_root`; returns how many there were. For a test's cleanup: a kubelet leaves its pods
/// running when it stops, as a real one does.
pub fn kill_pod_processes(kubelet_root: &Path) -> usize {
    let pids = pod_processes(kubelet_root);
    for pid in &pids {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
    }
    pids.len()
}

/// Every process on the machine whose environment names a pod root under `kubelet_root`
/// (`POD_ROOT`, which the process runtime gives each container): the pods' processes and their
/// children, whether or not a container record still names them. Finds what a kubelet killed
/// at the wrong moment could leave behind untracked.
pub fn processes_under(kubelet_root: &Path) -> Vec<i32> {
    let wanted = format!("POD_ROOT={}", kubelet_root.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let found = environ.split(|b| *b == 0).any(|var| {
            var.starts_with(wanted.as_bytes()) && matches!(var.get(wanted.len()), Some(b'/') | None)
        });
        // A zombie has no environment left; one that is there is a live process.
        if found {
            pids.push(pid);
        }
    }
    pids
}

/// A serving certificate for `hosts` (DNS names or IP addresses) signed by a fresh CA named
/// `ca_name`, for the HTTPS servers tests start: (the CA's PEM, the certificate, its key).
pub fn serving_certificate(
    ca_name: &str,
    hosts: &[&str],
) -> (
    String,
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca = ca_params.self_signed(&ca_key).expect("a self-signed CA");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("a key");
    let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let params = rcgen::CertificateParams::new(names).expect("parameters");
    let cert = params
        .signed_by(&key, &issuer)
        .expect("a signed certificate");
    (
        ca.pem(),
        cert.der().clone(),
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
}

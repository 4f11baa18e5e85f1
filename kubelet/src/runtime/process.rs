//! The process runtime: each container is a host process in its own process group.
//!
//! # What the fields mean here
//! - `image` is recorded and reported (`status.containerStatuses[].image`, and
//!   `imageID: process://<image>`); nothing is pulled. When `command` is empty the program is the
//!   image's last path segment without tag or digest, looked up on `PATH`
//!   (`docker.io/library/busybox:1.36` runs `busybox` with the container's `args`).
//! - `command`/`args` are the argv; `env` replaces the kubelet's environment entirely (a default
//!   `PATH` is added when the container sets none); `workingDir` is the current directory.
//! - Volumes cannot be mounted over the host's paths without namespaces: the kubelet links each
//!   mount under the pod's root directory (see [`crate::volumes`]) and makes that the default
//!   working directory, so relative paths (`cat etc/config/key`) reach them.
//! - Limits go to a cgroup v2 group per container when the unified hierarchy is writable;
//!   otherwise the container runs without them and [`super::Container::warnings`] says so.
//! - `securityContext`: a kubelet running as root switches the processes to `runAsUser` and
//!   `runAsGroup`; `runAsNonRoot` is checked against the user they run as (the kubelet's own
//!   when it does not switch). What a host process cannot be given (supplemental groups and
//!   `fsGroup`, which need `setgroups` before `exec`; capabilities; a read-only root; no_new_privs;
//!   another user for a kubelet that is not root) is named in the container's warnings.
//!
//! # Lifecycle and state
//! stdout and stderr are pipes the kubelet reads into the container's log file. When the main
//! process exits, the rest of its process group is killed (a shell's background children die with
//! it). Stop sends SIGTERM to the group, waits out the grace period, then SIGKILL.
//!
//! Each container has a JSON record in the state directory (`<root>/containers/<id>.json`) with
//! its pid and the pid's start time. A kubelet that restarts finds records of containers still
//! marked running: their output pipes died with the old kubelet, so the processes cannot be adopted
//! with their logs; they are killed (when the pid still belongs to them) and recorded as exited
//! with reason `Orphaned`, and the pod sync loop starts them again by their restart policy.
//!
//! Since processes cannot outlive the kubelet usefully, a kubelet that shuts down gracefully
//! stops them all ([`Runtime::shutdown`]: SIGTERM to each group, the pod's grace period capped by
//! `--shutdown-grace-period`, then SIGKILL), as the Kubernetes kubelet's graceful node shutdown
//! does; those runs are recorded with reason `Shutdown`. Only a kubelet killed outright leaves
//! orphans. `PR_SET_PDEATHSIG` would not make that case safe: it fires when the *thread* that
//! forked exits (a tokio worker or blocking-pool thread, which come and go), reaches only the
//! main process and not the rest of its group, and needs `unsafe` `pre_exec`; the records do it
//! reliably instead.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::{broadcast, watch};

use super::{Container, ContainerConfig, Error, ExecOutput, Result, Runtime, State};
use crate::logs;

/// The `PATH` given to containers whose env sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Settings of the process runtime.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where container records live (`<root-dir>/containers`).
    pub state_dir: PathBuf,
    /// The cgroup v2 directory under which per-container groups are made; `None` disables
    /// limits. [`Config::new`] uses `/sys/fs/cgroup/skiff` when the unified hierarchy exists.
    pub cgroup_root: Option<PathBuf>,
    /// Rotate a log file past this size (`--container-log-max-size`, 10 MiB).
    pub log_max_size: u64,
    /// Log files kept per container (`--container-log-max-files`, 5).
    pub log_max_files: usize,
    /// The program the health check spawns (looked up on [`DEFAULT_PATH`]): `true`.
    pub health_program: String,
}

impl Config {
    /// Defaults for a kubelet whose root directory is `root_dir`.
    pub fn new(root_dir: &Path) -> Self {
        let unified = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        Self {
            state_dir: root_dir.join("containers"),
            cgroup_root: unified.then(|| PathBuf::from("/sys/fs/cgroup/skiff")),
            log_max_size: 10 * 1024 * 1024,
            log_max_files: 5,
            health_program: "true".into(),
        }
    }
}

/// The on-disk record of one container.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    container: Container,
    pid: Option<i32>,
    /// Field 22 of `/proc/<pid>/stat`: tells the process apart from a later one reusing the pid.
    start_ticks: Option<u64>,
}

/// What `kubectl attach` reaches of a running container: its stdin (with `stdin: true`) and a
/// copy of its output lines as they are logged.
struct AttachPoint {
    stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    output: broadcast::Sender<(logs::Stream, Arc<[u8]>)>,
}

struct Entry {
    record: Record,
    exited: watch::Receiver<bool>,
    /// For containers this runtime started (not those of a previous kubelet).
    attach: Option<Arc<AttachPoint>>,
    /// Stopped by [`Runtime::shutdown`]: its exit is recorded with reason `Shutdown`.
    shutdown: bool,
}

/// Runs containers as host processes. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct ProcessRuntime {
    config: Arc<Config>,
    /// Containers by id. Held only for short map operations, never across `.await`.
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    events: broadcast::Sender<String>,
    /// Set by [`Runtime::shutdown`]; read by `start` under the `entries` lock, so that no
    /// container starts after shutdown has listed the running ones.
    closed: Arc<std::sync::atomic::AtomicBool>,
}

impl ProcessRuntime {
    /// Opens the runtime: loads the records of a previous run and kills its orphaned processes.
    pub fn open(config: Config) -> Result<Self> {
        let dir = &config.state_dir;
        std::fs::create_dir_all(dir).map_err(|source| Error::State {
            path: dir.clone(),
            source,
        })?;
        let mut entries = HashMap::new();
        let read_dir = std::fs::read_dir(dir).map_err(|source| Error::State {
            path: dir.clone(),
            source,
        })?;
        for file in read_dir.flatten() {
            let path = file.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let Ok(mut record) = serde_json::from_slice::<Record>(&bytes) else {
                tracing::warn!(path = %path.display(), "unreadable container record, removed");
                let _ = std::fs::remove_file(&path);
                continue;
            };
            if let State::Running { started_at } = record.container.state {
                if let (Some(pid), Some(ticks)) = (record.pid, record.start_ticks) {
                    if start_ticks(pid) == Some(ticks) {
                        tracing::info!(id = %record.container.id, pid, "killing orphaned container");
                        kill_group(pid, Signal::KILL);
                    }
                }
                record.container.state = State::Exited {
                    started_at,
                    finished_at: Timestamp::now(),
                    exit_code: 137,
                    reason: "Orphaned".into(),
                };
                write_record(dir, &record)?;
            }
            let (_tx, exited) = watch::channel(true);
            entries.insert(
                record.container.id.clone(),
                Entry {
                    record,
                    exited,
                    attach: None,
                    shutdown: false,
                },
            );
        }
        let (events, _) = broadcast::channel(256);
        Ok(Self {
            config: Arc::new(config),
            entries: Arc::new(Mutex::new(entries)),
            events,
            closed: Arc::default(),
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().expect("process runtime map poisoned")
    }

    /// Applies limits through cgroup v2; returns warnings for what could not be applied.
    fn apply_limits(&self, id: &str, pid: u32, config: &ContainerConfig) -> Vec<String> {
        let limits = &config.limits;
        if limits.memory.is_none()
            && limits.cpu_millis.is_none()
            && limits.cpu_request_millis.is_none()
        {
            return Vec::new();
        }
        let Some(root) = &self.config.cgroup_root else {
            return vec![format!(
                "resource limits of container {} not applied: cgroup v2 is not available",
                config.name
            )];
        };
        match write_cgroup(root, id, pid, limits) {
            Ok(()) => Vec::new(),
            Err(err) => vec![format!(
                "resource limits of container {} not applied: cgroup {}: {err}",
                config.name,
                root.display()
            )],
        }
    }
}

fn write_cgroup(root: &Path, id: &str, pid: u32, limits: &super::Limits) -> std::io::Result<()> {
    std::fs::create_dir_all(root)?;
    // Let the children of our group use the controllers; ignored where not permitted.
    let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory +cpu");
    let group = root.join(id);
    std::fs::create_dir_all(&group)?;
    if let Some(memory) = limits.memory {
        std::fs::write(group.join("memory.max"), memory.to_string())?;
    }
    if let Some(millis) = limits.cpu_millis {
        // cpu.max is "<quota> <period>" in microseconds.
        std::fs::write(group.join("cpu.max"), format!("{} 100000", millis * 100))?;
    }
    if limits.cpu_request_millis.is_some() {
        let shares = super::cpu_shares(limits.cpu_request_millis);
        std::fs::write(group.join("cpu.weight"), cpu_weight(shares).to_string())?;
    }
    std::fs::write(group.join("cgroup.procs"), pid.to_string())?;
    Ok(())
}

/// The cgroup v2 `cpu.weight` (1 to 10,000) of cgroup v1 CPU shares (2 to 262,144), mapped
/// linearly as runc and the Kubernetes kubelet map them.
fn cpu_weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + (shares - 2) * 9_999 / 262_142
}

fn remove_cgroup(root: Option<&Path>, id: &str) {
    if let Some(root) = root {
        let _ = std::fs::remove_dir(root.join(id));
    }
}

fn record_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.json"))
}

fn write_record(dir: &Path, record: &Record) -> Result<()> {
    let path = record_path(dir, &record.container.id);
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec(record).expect("container record serializes");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|source| Error::State { path, source })
}

/// Field 22 (starttime) of `/proc/<pid>/stat`.
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after its closing paren are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn kill_group(pgid: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// The program the image names when `command` is empty: its last path segment without tag or
/// digest (`registry:5000/library/busybox:1.36@sha256:..` gives `busybox`).
pub fn image_program(image: &str) -> Option<String> {
    let no_digest = image.split('@').next().unwrap_or("");
    let last = no_digest.rsplit('/').next().unwrap_or("");
    let name = last.split(':').next().unwrap_or("");
    (!name.is_empty()).then(|| name.to_string())
}

/// The argv the process runtime runs for a container.
pub fn argv(config: &ContainerConfig) -> Result<Vec<String>> {
    let mut argv = config.command.clone();
    if argv.is_empty() {
        argv.push(
            image_program(&config.image).ok_or_else(|| Error::NoCommand {
                container: config.name.clone(),
                image: config.image.clone(),
            })?,
        );
    }
    argv.extend(config.args.iter().cloned());
    Ok(argv)
}

/// Finds `program` as `execvp` in the child would: a name with a `/` is taken as it is (relative
/// to the child's directory `cwd`), a bare name is looked up on the child's `path` (an empty entry
/// is the current directory); the first regular file with an execute bit wins.
///
/// Looking it up here instead of leaving it to the spawn matters for speed: given a bare name and
/// a `PATH` of the child's own, the standard library must `fork` (copying the kubelet's page
/// tables, then faulting on every page it writes while they are shared) so the child can search
/// its own `PATH`; given a path it uses `posix_spawn`, which shares the parent's memory until
/// `exec`. In a burst of 100 pods the forks were over a third of the server's CPU.
pub fn resolve_program(program: &str, path: &str, cwd: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "empty program name",
        ));
    }
    if program.contains('/') {
        return Ok(cwd.join(program));
    }
    path.split(':')
        .map(|dir| cwd.join(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{program}: not found on PATH {path}"),
            )
        })
}

/// What a process of a container runs: the resolved program, argv, environment and directory.
struct Launch {
    program: PathBuf,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    /// The uid and gid to switch to ([`switch_ids`]).
    uid: Option<u32>,
    gid: Option<u32>,
}

/// The uid and gid a container's processes switch to when the kubelet runs as `euid`: its
/// `runAsUser` and `runAsGroup`, which only root can give (another user's processes run as it).
fn switch_ids(security: &super::Security, euid: u32) -> (Option<u32>, Option<u32>) {
    if euid != 0 {
        return (None, None);
    }
    let id = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
    (id(security.run_as_user), id(security.run_as_group))
}

/// What of a container's security settings the process runtime cannot apply when the kubelet
/// runs as `euid`, one warning each.
fn security_warnings(security: &super::Security, euid: u32, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let asked_other = |v: Option<i64>| v.is_some_and(|v| v != i64::from(euid));
    if euid != 0 && (asked_other(security.run_as_user) || security.run_as_group.is_some()) {
        out.push(format!(
            "runAsUser/runAsGroup of container {name} not applied: the kubelet runs as uid {euid}, not root"
        ));
    }
    let mut unsupported = Vec::new();
    if !security.supplemental_groups.is_empty() {
        unsupported.push("supplementalGroups/fsGroup");
    }
    if !security.add_capabilities.is_empty() || !security.drop_capabilities.is_empty() {
        unsupported.push("capabilities");
    }
    if security.read_only_root_filesystem {
        unsupported.push("readOnlyRootFilesystem");
    }
    if security.no_new_privileges {
        unsupported.push("allowPrivilegeEscalation: false");
    }
    if !unsupported.is_empty() {
        out.push(format!(
            "{} of container {name} not applied: host processes cannot be given them",
            unsupported.join(", ")
        ));
    }
    out
}

fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

impl Launch {
    /// The command without its standard streams: the program with the spec's argv[0] (as a
    /// shell would pass it), the environment, the working directory and user, in a process
    /// group of its own that outlives the handle.
    fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.arg0(&self.argv[0])
            .args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .process_group(0)
            .kill_on_drop(false);
        if let Some(uid) = self.uid {
            cmd.uid(uid);
        }
        if let Some(gid) = self.gid {
            cmd.gid(gid);
        }
        cmd
    }

    fn new(config: &ContainerConfig, argv: &[String]) -> std::io::Result<Launch> {
        let cwd = PathBuf::from(config.working_dir.as_deref().unwrap_or("/"));
        let path = config
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
        let program = resolve_program(&argv[0], path, &cwd)?;
        let mut env = Vec::with_capacity(config.env.len() + 1);
        if !config.env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".to_string(), DEFAULT_PATH.to_string()));
        }
        env.extend(config.env.iter().cloned());
        let (uid, gid) = switch_ids(&config.security, effective_uid());
        Ok(Launch {
            program,
            argv: argv.to_vec(),
            env,
            cwd,
            uid,
            gid,
        })
    }
}

fn command_for(
    config: &ContainerConfig,
    argv: &[String],
) -> std::io::Result<tokio::process::Command> {
    let mut cmd = Launch::new(config, argv)?.command();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(cmd)
}

/// Ends an attach session's output copies when it is dropped (the container goes on).
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Kills a streamed command's process group when dropped before the command ended.
struct KillOnDrop {
    pgid: i32,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !self.ended.load(std::sync::atomic::Ordering::SeqCst) {
            kill_group(self.pgid, Signal::KILL);
        }
    }
}

/// A pty master read as a stream: the kernel answers `EIO` once the terminal's last process
/// closed it, which is the end of the output, not an error.
struct PtyOutput(pty_process::OwnedReadPty);

impl tokio::io::AsyncRead for PtyOutput {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match std::pin::Pin::new(&mut self.0).poll_read(cx, buf) {
            std::task::Poll::Ready(Err(e))
                if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) =>
            {
                std::task::Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

/// Spawns a streamed command: on a new pseudo-terminal (its session leader, the terminal its
/// controlling one) or with pipes in a process group of its own.
fn spawn_stream(
    launch: &Launch,
    options: super::StreamOptions,
) -> std::io::Result<(tokio::process::Child, super::Session)> {
    use std::os::fd::AsFd;
    let unused_exit: futures::future::BoxFuture<'static, Result<i32>> = Box::pin(async { Ok(0) });
    if options.tty {
        let (pty, pts) = pty_process::open().map_err(std::io::Error::other)?;
        let winsize_fd = pty.as_fd().try_clone_to_owned()?;
        let mut command = pty_process::Command::new(&launch.program)
            .arg0(&launch.argv[0])
            .args(&launch.argv[1..])
            .env_clear()
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&launch.cwd)
            .kill_on_drop(false);
        if let Some(uid) = launch.uid {
            command = command.uid(uid);
        }
        if let Some(gid) = launch.gid {
            command = command.gid(gid);
        }
        let child = command.spawn(pts).map_err(std::io::Error::other)?;
        let (output, input) = pty.into_split();
        let resize = move |width: u16, height: u16| {
            let size = rustix::termios::Winsize {
                ws_row: height,
                ws_col: width,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            let _ = rustix::termios::tcsetwinsize(&winsize_fd, size);
        };
        let session = super::Session {
            stdin: options
                .stdin
                .then(|| Box::new(input) as super::StreamWriter),
            stdout: Some(Box::new(PtyOutput(output))),
            stderr: None,
            resize: Some(Box::new(resize)),
            exit: unused_exit,
            guard: Box::new(()),
        };
        return Ok((child, session));
    }
    let mut cmd = launch.command();
    let piped = |wanted: bool| {
        if wanted {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    cmd.stdin(piped(options.stdin))
        .stdout(piped(options.stdout))
        .stderr(piped(options.stderr));
    let mut child = cmd.spawn()?;
    let session = super::Session {
        stdin: child
            .stdin
            .take()
            .map(|s| Box::new(s) as super::StreamWriter),
        stdout: child
            .stdout
            .take()
            .map(|s| Box::new(s) as super::StreamReader),
        stderr: child
            .stderr
            .take()
            .map(|s| Box::new(s) as super::StreamReader),
        resize: None,
        exit: unused_exit,
        guard: Box::new(()),
    };
    Ok((child, session))
}

/// Copies lines of one pipe into the shared log writer.
async fn pump(
    pipe: impl AsyncRead + Unpin,
    stream: logs::Stream,
    writer: Arc<Mutex<logs::Writer>>,
    attached: broadcast::Sender<(logs::Stream, Arc<[u8]>)>,
) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if attached.receiver_count() > 0 {
                    let _ = attached.send((stream, Arc::from(&line[..])));
                }
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                let mut w = writer.lock().expect("log writer poisoned");
                if let Err(err) = w.write_line(stream, Timestamp::now(), &line) {
                    tracing::warn!(%err, "writing container log");
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Runtime for ProcessRuntime {
    async fn start(&self, config: ContainerConfig) -> Result<Container> {
        let id = format!("{}-{}-{}", config.pod_uid, config.name, config.attempt);
        let argv = argv(&config)?;
        // The "image" of a host process runs as the kubelet's user.
        let euid = effective_uid();
        super::verify_non_root(
            &config.security,
            Some(i64::from(euid)),
            "",
            &format!("{}/{}", config.pod_namespace, config.pod_name),
            &config.name,
        )
        .map_err(Error::Config)?;
        let writer = logs::Writer::open(
            &config.log_path,
            self.config.log_max_size,
            self.config.log_max_files,
        )
        .map_err(|source| Error::State {
            path: config.log_path.clone(),
            source,
        })?;
        let writer = Arc::new(Mutex::new(writer));
        // Spawned under the lock that `shutdown` takes to list the containers to stop: a
        // container either is refused or is in that list.
        let mut entries = self.entries();
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::ShuttingDown(config.name));
        }
        let mut child = command_for(&config, &argv)
            .and_then(|mut cmd| {
                if config.stdin {
                    cmd.stdin(Stdio::piped());
                }
                cmd.spawn()
            })
            .map_err(|source| Error::StartFailed {
                container: config.name.clone(),
                source,
            })?;
        let pid = child.id().expect("a just-spawned child has a pid");
        let attach = Arc::new(AttachPoint {
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            output: broadcast::channel(1024).0,
        });
        let started_at = Timestamp::now();
        let mut warnings = self.apply_limits(&id, pid, &config);
        warnings.extend(security_warnings(&config.security, euid, &config.name));
        let record = Record {
            container: Container {
                id: id.clone(),
                runtime: "process".into(),
                image_id: String::new(),
                config,
                state: State::Running { started_at },
                warnings,
            },
            pid: Some(pid as i32),
            start_ticks: start_ticks(pid as i32),
        };
        let (exit_tx, exited) = watch::channel(false);
        let container = record.container.clone();
        let written = write_record(&self.config.state_dir, &record);
        entries.insert(
            id.clone(),
            Entry {
                record,
                exited,
                attach: Some(attach.clone()),
                shutdown: false,
            },
        );
        drop(entries);
        if let Err(err) = written {
            // Running but unrecorded: a kubelet restart could not find it. Do not keep it.
            kill_group(pid as i32, Signal::KILL);
            tracing::warn!(%err, %id, "recording a started container; killed it");
        }

        let stdout = child.stdout.take().expect("stdout piped");
        let stderr = child.stderr.take().expect("stderr piped");
        let out = tokio::spawn(pump(
            stdout,
            logs::Stream::Stdout,
            writer.clone(),
            attach.output.clone(),
        ));
        let err = tokio::spawn(pump(
            stderr,
            logs::Stream::Stderr,
            writer,
            attach.output.clone(),
        ));
        let this = self.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            // The rest of the group (a shell's children) goes with the main process.
            kill_group(pid as i32, Signal::KILL);
            // Processes that left the group may hold the pipes open: do not wait on them forever.
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                let _ = out.await;
                let _ = err.await;
            })
            .await;
            let exit_code = match &status {
                Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)),
                Err(_) => 255,
            };
            let oom = this
                .config
                .cgroup_root
                .as_ref()
                .and_then(|r| std::fs::read_to_string(r.join(&id).join("memory.events")).ok())
                .is_some_and(|ev| {
                    ev.lines()
                        .any(|l| l.starts_with("oom_kill ") && !l.ends_with(" 0"))
                });
            remove_cgroup(this.config.cgroup_root.as_deref(), &id);
            let updated = {
                let mut entries = this.entries();
                entries.get_mut(&id).map(|entry| {
                    let reason = if oom {
                        "OOMKilled"
                    } else if entry.shutdown {
                        "Shutdown"
                    } else if exit_code == 0 {
                        "Completed"
                    } else {
                        "Error"
                    };
                    entry.record.container.state = State::Exited {
                        started_at,
                        finished_at: Timestamp::now(),
                        exit_code,
                        reason: reason.to_string(),
                    };
                    entry.record.clone()
                })
            };
            if let Some(record) = updated {
                if let Err(err) = write_record(&this.config.state_dir, &record) {
                    tracing::warn!(%err, "recording container exit");
                }
                let _ = this.events.send(record.container.config.pod_uid.clone());
            }
            let _ = exit_tx.send(true);
        });
        Ok(container)
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        let (pid, mut exited) = {
            let entries = self.entries();
            let entry = entries
                .get(id)
                .ok_or_else(|| Error::NotFound(id.to_string()))?;
            (entry.record.pid, entry.exited.clone())
        };
        if *exited.borrow() {
            return Ok(());
        }
        let Some(pid) = pid else { return Ok(()) };
        kill_group(pid, Signal::TERM);
        let done = tokio::time::timeout(grace, exited.wait_for(|e| *e))
            .await
            .map(|r| r.is_ok());
        if done.is_err() {
            kill_group(pid, Signal::KILL);
            let _ = exited.wait_for(|e| *e).await;
        }
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        let running = self
            .entries()
            .get(id)
            .map(|e| e.record.container.is_running());
        match running {
            None => return Err(Error::NotFound(id.to_string())),
            Some(true) => self.stop(id, Duration::ZERO).await?,
            Some(false) => {}
        }
        self.entries().remove(id);
        let path = record_path(&self.config.state_dir, id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::State { path, source }),
        }
    }

    async fn usage(&self) -> Result<Vec<(String, Timestamp, crate::stats::Usage)>> {
        // Each container's main process leads its process group: the group's counters are the
        // container's.
        let groups: Vec<(String, i32)> = self
            .entries()
            .values()
            .filter(|e| e.record.container.is_running())
            .filter_map(|e| Some((e.record.container.id.clone(), e.record.pid?)))
            .collect();
        let pgids: Vec<i32> = groups.iter().map(|(_, pgid)| *pgid).collect();
        let measured = tokio::task::spawn_blocking(move || {
            crate::stats::process_groups(Path::new("/proc"), &pgids)
        })
        .await
        .unwrap_or_default();
        let now = Timestamp::now();
        Ok(groups
            .into_iter()
            .filter_map(|(id, pgid)| Some((id, now, *measured.get(&pgid)?)))
            .collect())
    }

    fn list(&self, pod_uid: Option<&str>) -> Vec<Container> {
        let mut out: Vec<Container> = self
            .entries()
            .values()
            .map(|e| e.record.container.clone())
            .filter(|c| pod_uid.is_none_or(|uid| c.config.pod_uid == uid))
            .collect();
        out.sort_by(|a, b| {
            (&a.config.pod_uid, &a.config.name, a.config.attempt).cmp(&(
                &b.config.pod_uid,
                &b.config.name,
                b.config.attempt,
            ))
        });
        out
    }

    async fn exec(&self, id: &str, cmd: &[String], timeout: Duration) -> Result<ExecOutput> {
        let config = {
            let entries = self.entries();
            let entry = entries
                .get(id)
                .ok_or_else(|| Error::NotFound(id.to_string()))?;
            entry.record.container.config.clone()
        };
        if cmd.is_empty() {
            return Err(Error::NoCommand {
                container: config.name,
                image: config.image,
            });
        }
        let child = command_for(&config, cmd)
            .and_then(|mut command| command.spawn())
            .map_err(|source| Error::StartFailed {
                container: config.name.clone(),
                source,
            })?;
        let pid = child.id().map(|p| p as i32);
        match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(out)) => {
                let mut output = out.stdout;
                output.extend_from_slice(&out.stderr);
                output.truncate(10 * 1024);
                let status = out.status;
                Ok(ExecOutput {
                    exit_code: status
                        .code()
                        .unwrap_or_else(|| 128 + status.signal().unwrap_or(9)),
                    output,
                })
            }
            Ok(Err(source)) => Err(Error::StartFailed {
                container: config.name,
                source,
            }),
            Err(_) => {
                if let Some(pid) = pid {
                    kill_group(pid, Signal::KILL);
                }
                Err(Error::ExecTimeout(timeout))
            }
        }
    }

    /// Runs the command with the container's environment and working directory, in a process
    /// group of its own (a new session on its terminal with a TTY) rather than the container's:
    /// so that ending the session can kill everything the command started without touching the
    /// container. The command still dies with the container: when the container's main process
    /// exits, the command's group is killed.
    async fn exec_stream(
        &self,
        id: &str,
        cmd: &[String],
        options: super::StreamOptions,
    ) -> Result<super::Session> {
        let (config, mut container_exited) = {
            let entries = self.entries();
            let entry = entries
                .get(id)
                .ok_or_else(|| Error::NotFound(id.to_string()))?;
            if !entry.record.container.is_running() || *entry.exited.borrow() {
                return Err(Error::NotRunning(
                    entry.record.container.config.name.clone(),
                ));
            }
            (entry.record.container.config.clone(), entry.exited.clone())
        };
        if cmd.is_empty() {
            return Err(Error::NoCommand {
                container: config.name,
                image: config.image,
            });
        }
        let start_failed = |source| Error::StartFailed {
            container: config.name.clone(),
            source,
        };
        let launch = Launch::new(&config, cmd).map_err(start_failed)?;
        let (mut child, mut session) = spawn_stream(&launch, options).map_err(start_failed)?;
        let pgid = child.id().expect("a just-spawned child has a pid") as i32;
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
        let task_ended = ended.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                _ = async { container_exited.wait_for(|e| *e).await.map(|_| ()) } => {
                    kill_group(pgid, Signal::KILL);
                    child.wait().await
                }
            };
            // What the command left running in its group goes with it.
            kill_group(pgid, Signal::KILL);
            task_ended.store(true, std::sync::atomic::Ordering::SeqCst);
            let code = status
                .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)))
                .map_err(|source| Error::StartFailed {
                    container: String::new(),
                    source,
                });
            let _ = exit_tx.send(code);
        });
        session.exit = Box::pin(async move {
            exit_rx.await.unwrap_or_else(|_| {
                Err(Error::StartFailed {
                    container: String::new(),
                    source: std::io::Error::other("the exec's waiter went away"),
                })
            })
        });
        session.guard = Box::new(KillOnDrop { pgid, ended });
        Ok(session)
    }

    /// Attaches to the main process: a copy of its output lines from now on, and its stdin
    /// (kept open by the runtime for containers with `stdin: true`; with `stdinOnce` closed
    /// when the first attached client closes it). The session ends when the container does
    /// (reported as success, as the kubelet reports attach); dropping it detaches.
    async fn attach(&self, id: &str, options: super::StreamOptions) -> Result<super::Session> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (point, exited, config) = {
            let entries = self.entries();
            let entry = entries
                .get(id)
                .ok_or_else(|| Error::NotFound(id.to_string()))?;
            let name = entry.record.container.config.name.clone();
            if !entry.record.container.is_running() || *entry.exited.borrow() {
                return Err(Error::NotRunning(name));
            }
            let point = entry.attach.clone().ok_or_else(|| {
                Error::Unsupported(format!(
                    "container {name} was started by a previous kubelet and cannot be attached to"
                ))
            })?;
            (
                point,
                entry.exited.clone(),
                entry.record.container.config.clone(),
            )
        };
        let stdin = (options.stdin && config.stdin).then(|| {
            let (client, mut ours) = tokio::io::duplex(64 * 1024);
            let point = point.clone();
            let once = config.stdin_once;
            // Not aborted on detach: it ends when the client's side closes, and then closes
            // the container's stdin for a `stdinOnce` container.
            tokio::spawn(async move {
                let mut buf = vec![0u8; 32 * 1024];
                while let Ok(n) = ours.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut stdin = point.stdin.lock().await;
                    let Some(pipe) = stdin.as_mut() else { break };
                    if pipe.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                if once {
                    point.stdin.lock().await.take();
                }
            });
            Box::new(client) as super::StreamWriter
        });
        let mut copies = Vec::new();
        let mut output = |wanted: bool, stream: logs::Stream| -> Option<super::StreamReader> {
            if !wanted {
                return None;
            }
            let (client, mut ours) = tokio::io::duplex(64 * 1024);
            let mut lines = point.output.subscribe();
            let mut exited = exited.clone();
            copies.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        biased;
                        line = lines.recv() => match line {
                            Ok((from, line)) if from == stream => {
                                if ours.write_all(&line).await.is_err() {
                                    return;
                                }
                            }
                            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                        _ = async { exited.wait_for(|e| *e).await.map(|_| ()) } => {
                            while let Ok((from, line)) = lines.try_recv() {
                                if from == stream && ours.write_all(&line).await.is_err() {
                                    return;
                                }
                            }
                            return;
                        }
                    }
                }
            }));
            Some(Box::new(client))
        };
        let stdout = output(options.stdout, logs::Stream::Stdout);
        let stderr = output(options.stderr && !options.tty, logs::Stream::Stderr);
        let mut exited = exited;
        Ok(super::Session {
            stdin,
            stdout,
            stderr,
            resize: None,
            exit: Box::pin(async move {
                let _ = exited.wait_for(|e| *e).await.map(|_| ());
                Ok(0)
            }),
            guard: Box::new(AbortOnDrop(copies)),
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<String> {
        self.events.subscribe()
    }

    /// Healthy when a file can be written and removed in the state directory (where every start
    /// records its container) and a process can be spawned and reaped (what every start does).
    async fn health(&self) -> Result<()> {
        let dir = &self.config.state_dir;
        let probe = dir.join(".health");
        std::fs::write(&probe, b"ok")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|source| Error::State {
                path: dir.clone(),
                source,
            })?;
        let program = &self.config.health_program;
        let spawn_failed = |source| Error::SpawnFailed {
            program: program.clone(),
            source,
        };
        let resolved =
            resolve_program(program, DEFAULT_PATH, Path::new("/")).map_err(spawn_failed)?;
        let status = tokio::process::Command::new(resolved)
            .env_clear()
            .env("PATH", DEFAULT_PATH)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status();
        match tokio::time::timeout(Duration::from_secs(5), status).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(spawn_failed(source)),
            Err(_) => Err(spawn_failed(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "did not exit within 5 s",
            ))),
        }
    }

    async fn shutdown(&self, grace: &(dyn for<'c> Fn(&'c Container) -> Duration + Send + Sync)) {
        let stops: Vec<(String, Duration)> = {
            let mut entries = self.entries();
            self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
            entries
                .values_mut()
                .filter(|e| e.record.container.is_running())
                .map(|e| {
                    e.shutdown = true;
                    (e.record.container.id.clone(), grace(&e.record.container))
                })
                .collect()
        };
        if !stops.is_empty() {
            tracing::info!(containers = stops.len(), "stopping containers for shutdown");
        }
        futures::future::join_all(stops.iter().map(|(id, grace)| async move {
            if let Err(err) = self.stop(id, *grace).await {
                tracing::warn!(%err, %id, "stopping a container for shutdown");
            }
        }))
        .await;
    }
}

impl ProcessRuntime {
    /// Sends SIGKILL to the process group of every running container, without waiting: a last
    /// resort for a kubelet that cannot shut down gracefully (a test's clean-up on panic).
    pub fn kill_all(&self) {
        for entry in self.entries().values() {
            if let (true, Some(pid)) = (entry.record.container.is_running(), entry.record.pid) {
                kill_group(pid, Signal::KILL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Limits;

    fn config(dir: &Path, name: &str, script: &str) -> ContainerConfig {
        ContainerConfig {
            pod_uid: "uid1".into(),
            pod_namespace: "default".into(),
            pod_name: "p".into(),
            name: name.into(),
            attempt: 0,
            image: "busybox:1.36".into(),
            command: vec!["sh".into(), "-c".into()],
            args: vec![script.into()],
            env: vec![("GREETING".into(), "hi".into())],
            working_dir: Some(dir.display().to_string()),
            pod_ip: "127.0.0.1".parse().unwrap(),
            mounts: Vec::new(),
            limits: Limits::default(),
            security: Default::default(),
            spec_hash: "h".into(),
            log_path: dir.join("logs").join(format!("{name}.log")),
            stdin: false,
            stdin_once: false,
            tty: false,
            target_id: None,
        }
    }

    fn runtime(dir: &Path) -> ProcessRuntime {
        ProcessRuntime::open(Config {
            state_dir: dir.join("state"),
            cgroup_root: None,
            log_max_size: 1 << 20,
            log_max_files: 2,
            health_program: "true".into(),
        })
        .unwrap()
    }

    async fn wait_exit(rt: &ProcessRuntime, id: &str) -> State {
        let mut events = rt.subscribe();
        loop {
            let c = rt.list(None).into_iter().find(|c| c.id == id).unwrap();
            if !c.is_running() {
                return c.state;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), events.recv()).await;
        }
    }

    fn alive(pid: i32) -> bool {
        // A zombie is dead for our purposes.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                let rest = &s[s.rfind(')').unwrap() + 2..];
                !rest.starts_with('Z')
            })
            .unwrap_or(false)
    }

    #[test]
    fn image_names_a_program() {
        assert_eq!(image_program("busybox").as_deref(), Some("busybox"));
        assert_eq!(
            image_program("localhost:5000/library/busybox:1.36@sha256:abc").as_deref(),
            Some("busybox")
        );
        assert_eq!(image_program(""), None);
    }

    #[test]
    fn programs_are_found_on_the_childs_path_as_execvp_would() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (plain, exec) = (dir.path().join("plain"), dir.path().join("exec"));
        for d in [&plain, &exec] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("tool"), "#!/bin/sh\n").unwrap();
        }
        std::fs::set_permissions(exec.join("tool"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::set_permissions(plain.join("tool"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let path = format!("/nonexistent:{}:{}", plain.display(), exec.display());
        // A file without an execute bit is passed over, as execvp passes over EACCES.
        assert_eq!(
            resolve_program("tool", &path, Path::new("/")).unwrap(),
            exec.join("tool")
        );
        // Only the child's PATH counts, not the kubelet's.
        let err = resolve_program("sh", "/nonexistent", Path::new("/")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        // Relative PATH entries and names with a slash are relative to the working directory.
        assert_eq!(
            resolve_program("tool", "plain:exec", dir.path()).unwrap(),
            dir.path().join("exec").join("tool")
        );
        assert_eq!(
            resolve_program("./exec/tool", "", dir.path()).unwrap(),
            dir.path().join("./exec/tool")
        );
        assert_eq!(
            resolve_program("/bin/sh", "", dir.path()).unwrap(),
            Path::new("/bin/sh")
        );
    }

    #[tokio::test]
    async fn a_container_path_of_its_own_decides_the_program() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("hello"), "#!/bin/sh\necho \"$0 from bin\"\n").unwrap();
        std::fs::set_permissions(bin.join("hello"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let rt = runtime(dir.path());
        let mut cfg = config(dir.path(), "c", "");
        cfg.command = vec!["hello".into()];
        cfg.args = Vec::new();
        cfg.env = vec![("PATH".into(), format!("{}:/usr/bin:/bin", bin.display()))];
        let c = rt.start(cfg).await.unwrap();
        assert!(matches!(
            wait_exit(&rt, &c.id).await,
            State::Exited { exit_code: 0, .. }
        ));
        let log = logs::read(&c.config.log_path, &Default::default()).unwrap();
        assert_eq!(
            String::from_utf8(log).unwrap(),
            format!("{} from bin\n", bin.join("hello").display())
        );
        // Without that PATH entry the program is not found: a start error, nothing spawned.
        let mut cfg = config(dir.path(), "d", "");
        cfg.command = vec!["hello".into()];
        assert!(matches!(
            rt.start(cfg).await,
            Err(Error::StartFailed { .. })
        ));
    }

    #[tokio::test]
    async fn runs_with_env_and_workdir_and_logs_both_streams() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let c = rt
            .start(config(
                dir.path(),
                "c",
                "echo $GREETING; pwd; echo err >&2; test -z \"$HOME\"; exit 3",
            ))
            .await
            .unwrap();
        match wait_exit(&rt, &c.id).await {
            State::Exited {
                exit_code, reason, ..
            } => {
                assert_eq!(exit_code, 3);
                assert_eq!(reason, "Error");
            }
            other => panic!("{other:?}"),
        }
        let log = logs::read(&c.config.log_path, &Default::default()).unwrap();
        let log = String::from_utf8(log).unwrap();
        assert!(log.contains("hi\n"), "{log}");
        assert!(
            log.contains(&format!("{}\n", dir.path().display())),
            "{log}"
        );
        assert!(log.contains("err\n"), "{log}");
    }

    #[tokio::test]
    async fn empty_command_runs_the_image_program() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let mut cfg = config(dir.path(), "c", "");
        cfg.image = "docker.io/library/echo:latest".into();
        cfg.command = Vec::new();
        cfg.args = vec!["from".into(), "image".into()];
        let c = rt.start(cfg).await.unwrap();
        assert!(matches!(
            wait_exit(&rt, &c.id).await,
            State::Exited { exit_code: 0, .. }
        ));
        let log = logs::read(&c.config.log_path, &Default::default()).unwrap();
        assert_eq!(log, b"from image\n");
    }

    #[tokio::test]
    async fn missing_program_is_a_start_error() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let mut cfg = config(dir.path(), "c", "");
        cfg.command = vec!["/nonexistent/program".into()];
        assert!(matches!(
            rt.start(cfg).await,
            Err(Error::StartFailed { .. })
        ));
        let mut cfg = config(dir.path(), "c", "");
        cfg.command = Vec::new();
        cfg.image = "".into();
        assert!(matches!(rt.start(cfg).await, Err(Error::NoCommand { .. })));
    }

    #[tokio::test]
    async fn stop_terminates_group_including_shell_children() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let pidfile = dir.path().join("child.pid");
        let script = format!(
            "sleep 1000 & echo $! > {}; while true; do sleep 1; done",
            pidfile.display()
        );
        let c = rt.start(config(dir.path(), "c", &script)).await.unwrap();
        let child_pid: i32 = loop {
            if let Ok(s) = std::fs::read_to_string(&pidfile) {
                if let Ok(p) = s.trim().parse() {
                    break p;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(alive(child_pid));
        rt.stop(&c.id, Duration::from_secs(30)).await.unwrap();
        match wait_exit(&rt, &c.id).await {
            State::Exited { exit_code, .. } => assert_eq!(exit_code, 128 + 15),
            other => panic!("{other:?}"),
        }
        assert!(!alive(child_pid), "background child killed with its group");
    }

    #[tokio::test]
    async fn stop_escalates_to_sigkill_after_grace() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let ready = dir.path().join("ready");
        let script = format!(
            "trap '' TERM; touch {}; while true; do sleep 1; done",
            ready.display()
        );
        let c = rt.start(config(dir.path(), "c", &script)).await.unwrap();
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        rt.stop(&c.id, Duration::from_millis(300)).await.unwrap();
        match wait_exit(&rt, &c.id).await {
            State::Exited { exit_code, .. } => assert_eq!(exit_code, 128 + 9),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn shutdown_stops_running_groups_with_their_grace_and_refuses_starts() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let done = rt
            .start(config(dir.path(), "done", "exit 0"))
            .await
            .unwrap();
        wait_exit(&rt, &done.id).await;
        let pidfile = dir.path().join("child.pid");
        let plain = rt
            .start(config(
                dir.path(),
                "plain",
                &format!(
                    "sleep 1000 & echo $! > {}; while true; do sleep 1; done",
                    pidfile.display()
                ),
            ))
            .await
            .unwrap();
        let ready = dir.path().join("ready");
        let stubborn = rt
            .start(config(
                dir.path(),
                "stubborn",
                &format!(
                    "trap '' TERM; touch {}; while true; do sleep 1; done",
                    ready.display()
                ),
            ))
            .await
            .unwrap();
        let child: i32 = loop {
            if let Some(p) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The stubborn one would take an hour if its grace were not the one given.
        let grace = |c: &Container| {
            if c.config.name == "stubborn" {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(3600)
            }
        };
        rt.shutdown(&grace).await;
        let state = |id: &str| {
            rt.list(None)
                .into_iter()
                .find(|c| c.id == id)
                .unwrap()
                .state
        };
        match state(&plain.id) {
            State::Exited {
                exit_code, reason, ..
            } => assert_eq!((exit_code, reason.as_str()), (128 + 15, "Shutdown")),
            other => panic!("{other:?}"),
        }
        match state(&stubborn.id) {
            State::Exited {
                exit_code, reason, ..
            } => assert_eq!((exit_code, reason.as_str()), (128 + 9, "Shutdown")),
            other => panic!("{other:?}"),
        }
        match state(&done.id) {
            State::Exited { reason, .. } => assert_eq!(reason, "Completed", "exited before"),
            other => panic!("{other:?}"),
        }
        for _ in 0..250 {
            if !alive(child) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(child), "the group's background child is gone too");
        assert!(matches!(
            rt.start(config(dir.path(), "late", "sleep 1000")).await,
            Err(Error::ShuttingDown(_))
        ));
        // What the next runtime reads back.
        let rt2 = runtime(dir.path());
        match rt2
            .list(None)
            .into_iter()
            .find(|c| c.id == plain.id)
            .unwrap()
            .state
        {
            State::Exited { reason, .. } => assert_eq!(reason, "Shutdown"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn health_needs_a_writable_state_dir_and_a_spawnable_process() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        rt.health().await.unwrap();

        // The state directory replaced by a file (root may write anywhere, so permissions
        // would not make it fail): records cannot be written.
        let state = dir.path().join("state");
        std::fs::rename(&state, dir.path().join("state.away")).unwrap();
        std::fs::write(&state, b"not a directory").unwrap();
        match rt.health().await {
            Err(Error::State { path, .. }) => assert_eq!(path, state),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&state).unwrap();
        std::fs::rename(dir.path().join("state.away"), &state).unwrap();
        rt.health().await.unwrap();

        // Nothing can be spawned.
        let rt = ProcessRuntime::open(Config {
            state_dir: dir.path().join("state3"),
            cgroup_root: None,
            log_max_size: 1 << 20,
            log_max_files: 2,
            health_program: "/nonexistent/program".into(),
        })
        .unwrap();
        let err = rt.health().await.unwrap_err();
        assert!(matches!(err, Error::SpawnFailed { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/program"), "{err}");
    }

    #[tokio::test]
    async fn exec_runs_in_container_env_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let c = rt
            .start(config(dir.path(), "c", "while true; do sleep 1; done"))
            .await
            .unwrap();
        let sh = |s: &str| vec!["sh".to_string(), "-c".to_string(), s.to_string()];
        let out = rt
            .exec(
                &c.id,
                &sh("echo $GREETING; exit 7"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(out.exit_code, 7);
        assert_eq!(out.output, b"hi\n");
        let slow = rt
            .exec(&c.id, &sh("sleep 100"), Duration::from_millis(200))
            .await;
        assert!(matches!(slow, Err(Error::ExecTimeout(_))));
        rt.stop(&c.id, Duration::from_secs(5)).await.unwrap();
    }

    /// Reads everything from a streamed output.
    async fn read_all(reader: Option<crate::runtime::StreamReader>) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut out = Vec::new();
        if let Some(mut r) = reader {
            r.read_to_end(&mut out).await.unwrap();
        }
        out
    }

    #[tokio::test]
    async fn exec_stream_pipes_stdin_and_separate_outputs_and_reports_the_exit_code() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let c = rt
            .start(config(dir.path(), "c", "sleep 100"))
            .await
            .unwrap();
        let options = crate::runtime::StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let cmd: Vec<String> = ["sh", "-c", "echo $GREETING; cat; echo oops >&2; exit 4"]
            .map(String::from)
            .to_vec();
        let mut session = rt.exec_stream(&c.id, &cmd, options).await.unwrap();
        let mut stdin = session.stdin.take().unwrap();
        stdin.write_all(b"piped\n").await.unwrap();
        drop(stdin);
        let out = read_all(session.stdout.take()).await;
        let err = read_all(session.stderr.take()).await;
        assert_eq!(out, b"hi\npiped\n");
        assert_eq!(err, b"oops\n");
        assert_eq!(session.exit.await.unwrap(), 4);
        assert!(session.resize.is_none());

        // A command the container's PATH does not have.
        let missing = rt
            .exec_stream(&c.id, &["no-such-program".to_string()], options)
            .await;
        assert!(matches!(missing, Err(Error::StartFailed { .. })));
        rt.stop(&c.id, Duration::from_secs(5)).await.unwrap();
        // A container that stopped takes no exec.
        let stopped = rt.exec_stream(&c.id, &cmd, options).await;
        assert!(
            matches!(stopped, Err(Error::NotRunning(_))),
            "{:?}",
            stopped.err()
        );
    }

    #[tokio::test]
    async fn exec_stream_on_a_tty_is_a_terminal_of_the_size_asked() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let c = rt
            .start(config(dir.path(), "c", "sleep 100"))
            .await
            .unwrap();
        let options = crate::runtime::StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        };
        // The shell waits for a line before it asks the terminal its size, so the resize lands
        // first.
        let cmd: Vec<String> = ["sh", "-c", "read x; tty; stty size; echo got $x"]
            .map(String::from)
            .to_vec();
        let mut session = rt.exec_stream(&c.id, &cmd, options).await.unwrap();
        assert!(
            session.stderr.is_none(),
            "a terminal merges stderr into stdout"
        );
        (session.resize.as_ref().unwrap())(100, 30);
        let mut stdin = session.stdin.take().unwrap();
        stdin.write_all(b"line\n").await.unwrap();
        let out = String::from_utf8(read_all(session.stdout.take()).await).unwrap();
        assert!(out.contains("/dev/pts/"), "{out:?}");
        assert!(out.contains("30 100"), "{out:?}");
        assert!(out.contains("got line"), "{out:?}");
        assert_eq!(session.exit.await.unwrap(), 0);
        rt.stop(&c.id, Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn dropping_a_stream_session_kills_its_group_and_the_container_ending_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let c = rt
            .start(config(dir.path(), "c", "sleep 100"))
            .await
            .unwrap();
        let options = crate::runtime::StreamOptions {
            stdout: true,
            ..Default::default()
        };
        let pid_file = dir.path().join("child.pid");
        let script = format!("sleep 200 & echo $! > {}; wait", pid_file.display());
        let cmd: Vec<String> = vec!["sh".into(), "-c".into(), script];
        let session = rt.exec_stream(&c.id, &cmd, options).await.unwrap();
        let child_pid = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            {
                break pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(alive(child_pid));
        drop(session);
        for _ in 0..100 {
            if !alive(child_pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !alive(child_pid),
            "the session's background child survived its drop"
        );
        assert!(rt.list(None)[0].is_running(), "the container must stay");

        // A session outlives nothing of its container's.
        let session = rt
            .exec_stream(&c.id, &["sleep".into(), "300".into()], options)
            .await
            .unwrap();
        rt.stop(&c.id, Duration::from_secs(5)).await.unwrap();
        let code = tokio::time::timeout(Duration::from_secs(5), session.exit)
            .await
            .expect("the exec ended with its container")
            .unwrap();
        assert_eq!(code, 137);
    }

    #[tokio::test]
    async fn restarted_runtime_kills_orphans_and_records_them_exited() {
        let dir = tempfile::tempdir().unwrap();
        let pid;
        let id;
        {
            let rt = runtime(dir.path());
            let c = rt
                .start(config(dir.path(), "c", "while true; do sleep 1; done"))
                .await
                .unwrap();
            id = c.id.clone();
            let entries = rt.entries();
            pid = entries[&id].record.pid.unwrap();
        }
        // A kubelet that died leaves its process running; the second runtime has only the record.
        assert!(alive(pid));
        let rt2 = runtime(dir.path());
        let c = rt2.list(Some("uid1")).pop().unwrap();
        assert_eq!(c.id, id);
        match c.state {
            State::Exited { reason, .. } => assert_eq!(reason, "Orphaned"),
            other => panic!("{other:?}"),
        }
        for _ in 0..100 {
            if !alive(pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(pid), "orphan killed");
        rt2.remove(&id).await.unwrap();
        assert!(rt2.list(None).is_empty());
        assert!(runtime(dir.path()).list(None).is_empty(), "record removed");
    }

    #[tokio::test]
    async fn limits_without_cgroup_v2_are_reported_and_with_it_written() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let mut cfg = config(dir.path(), "c", "exit 0");
        cfg.limits = Limits {
            memory: Some(64 << 20),
            cpu_millis: Some(500),
            cpu_request_millis: Some(500),
        };
        let c = rt.start(cfg.clone()).await.unwrap();
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("cgroup v2 is not available"));

        // A stand-in cgroup directory shows what is written.
        let cg = dir.path().join("cgroup");
        let rt = ProcessRuntime::open(Config {
            state_dir: dir.path().join("state2"),
            cgroup_root: Some(cg.clone()),
            log_max_size: 1 << 20,
            log_max_files: 2,
            health_program: "true".into(),
        })
        .unwrap();
        cfg.name = "d".into();
        cfg.args = vec!["sleep 1000".into()];
        let c = rt.start(cfg).await.unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let group = cg.join(&c.id);
        assert_eq!(
            std::fs::read_to_string(group.join("memory.max")).unwrap(),
            (64u64 << 20).to_string()
        );
        assert_eq!(
            std::fs::read_to_string(group.join("cpu.max")).unwrap(),
            "50000 100000"
        );
        // 500m requested: 512 shares, weight 20.
        assert_eq!(
            std::fs::read_to_string(group.join("cpu.weight")).unwrap(),
            "20"
        );
        let pid = rt.entries()[&c.id].record.pid.unwrap();
        assert_eq!(
            std::fs::read_to_string(group.join("cgroup.procs")).unwrap(),
            pid.to_string()
        );
        rt.stop(&c.id, Duration::from_secs(5)).await.unwrap();
    }

    #[test]
    fn cpu_weight_maps_shares_linearly() {
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(256), 10);
        assert_eq!(cpu_weight(1024), 39);
        assert_eq!(cpu_weight(262_144), 10_000);
        assert_eq!(cpu_weight(0), 1);
    }

    #[test]
    fn only_root_switches_users_and_the_rest_is_named() {
        let asked = super::super::Security {
            run_as_user: Some(1000),
            run_as_group: Some(3000),
            supplemental_groups: vec![2000],
            drop_capabilities: vec!["ALL".into()],
            read_only_root_filesystem: true,
            ..Default::default()
        };
        assert_eq!(switch_ids(&asked, 0), (Some(1000), Some(3000)));
        assert_eq!(switch_ids(&asked, 1000), (None, None));
        let as_root = security_warnings(&asked, 0, "c");
        assert_eq!(as_root.len(), 1, "{as_root:?}");
        assert!(
            as_root[0].starts_with(
                "supplementalGroups/fsGroup, capabilities, readOnlyRootFilesystem of container c"
            ),
            "{as_root:?}"
        );
        let as_user = security_warnings(&asked, 1000, "c");
        assert_eq!(as_user.len(), 2, "{as_user:?}");
        assert!(as_user[0].contains("runs as uid 1000, not root"));
        // Nothing asked: nothing said.
        assert!(security_warnings(&Default::default(), 1000, "c").is_empty());
        // Running as the user asked for already is no warning.
        let same = super::super::Security {
            run_as_user: Some(1000),
            ..Default::default()
        };
        assert!(security_warnings(&same, 1000, "c").is_empty());
    }

    /// A kubelet running as root runs the container as its runAsUser; `runAsNonRoot` without
    /// one refuses to start as root.
    #[tokio::test]
    async fn run_as_user_and_non_root() {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime(dir.path());
        let euid = effective_uid();
        let mut cfg = config(dir.path(), "who", "id -u; id -g");
        // The working directory must be reachable by the user switched to.
        cfg.working_dir = Some("/".into());
        cfg.security.run_as_user = Some(65534);
        cfg.security.run_as_group = Some(65534);
        cfg.security.run_as_non_root = true;
        let c = rt.start(cfg.clone()).await.unwrap();
        wait_exit(&rt, &c.id).await;
        let out = std::fs::read_to_string(&cfg.log_path).unwrap();
        let lines: Vec<&str> = out
            .lines()
            .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(""))
            .collect();
        if euid == 0 {
            assert_eq!(lines, ["65534", "65534"], "{out}");
        } else {
            assert_eq!(lines[0], euid.to_string(), "{out}");
        }
        let mut root = config(dir.path(), "root", "true");
        root.security.run_as_non_root = true;
        let started = rt.start(root).await;
        if euid == 0 {
            match started {
                Err(Error::Config(why)) => {
                    assert!(why.contains("image will run as root"), "{why}")
                }
                other => panic!("runAsNonRoot as root started: {other:?}"),
            }
        } else {
            started.unwrap();
        }
    }
}

//! `skiff bench api`: skiff's Kubernetes API against etcd 3.4's v3 JSON gateway, side by side in
//! one run, with the same client code, concurrency and value size.
//!
//! The systems ([`System`]) are skiff's API on its embedded log (`skiff`), skiff's API on an etcd
//! cluster of N members (`skiff-on-etcdN`, `skiff-on-etcd` for one) and that cluster's own key
//! value API (`etcdN`, `etcd` for one): an etcd cluster of a given size is started once and serves
//! both, so `skiff-on-etcd3 / etcd3` is what the API layer costs on top of the same three
//! members. The default is `skiff,etcd`.
//!
//! skiff runs in this process on a runtime of its own (its own worker threads, its own temp data
//! dir, HTTPS with a generated CA, fsync on as by default) and is driven through the Kubernetes API
//! with ConfigMaps of about 1 KiB; etcd runs as a child process on loopback on a temp data dir
//! (default fsync) and is driven through `POST /v3/kv/put`, `/v3/kv/range` and `/v3/watch` with
//! 1 KiB values. Both get HTTP/1.1 connections from one `reqwest` client each, one connection per
//! concurrent client.
//!
//! Workloads, each at every concurrency level:
//! - `create`: skiff POSTs a new ConfigMap (validation, admission, a compare-and-swap in the log);
//!   etcd puts a new key. Both durable before the answer.
//! - `get`: one object by name / one key.
//! - `list`: all of 10,000 objects (a consistent read, decoded and counted by the client).
//! - `watch`: `watchers` watches of one namespace / key prefix, then `watch_events` creates by the
//!   concurrent clients; measured until every watcher has received every event.
//! - `failover` (only when asked for; systems on three or more members): one client writes in a
//!   loop while the etcd leader is SIGKILLed; the figure is the time from the kill to the first
//!   acknowledged write sent after it (p50 and max over [`Options::failover_rounds`] rounds; the
//!   member is restarted between rounds). The raw etcd client sends each request to the next
//!   member in turn and moves on from one that refuses the connection, as etcd's own client does.
//! - `churn` (only when asked for): each client creates an object and deletes it again, for
//!   [`Options::churn_duration`]; resident memory is sampled meanwhile, to see whether it levels
//!   off under steady churn or grows with the writes ever made.
//!
//! Beside rates and latencies, the create, get and churn rows carry each system's CPU per
//! operation and resident memory after the run. skiff's server side is this process's CPU
//! (`/proc/self/stat`, which counts exited threads too) minus the bench client's threads (the
//! caller's runtime threads, found by name in `/proc/self/task/*/stat`, and the main thread); etcd's
//! is its members' processes'. skiff on etcd counts both: this process's share and the members'.
//! skiff's resident memory is this process's, the client (and any idle skiff of the other systems)
//! included, plus the members' on etcd.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What went wrong in a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A temp dir, port or child process could not be set up.
    #[error("cannot set up the benchmark: {0}")]
    Setup(String),
    /// etcd did not start (is `etcd-server` installed?).
    #[error("cannot start etcd from {path}: {reason}")]
    Etcd {
        /// The etcd binary.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The in-process skiff API server did not start.
    #[error("cannot start the skiff API server: {0}")]
    Skiff(String),
    /// A request failed or was answered with an unexpected status.
    #[error("{system} {operation} failed: {reason}")]
    Request {
        /// skiff or etcd.
        system: String,
        /// Which request.
        operation: &'static str,
        /// Why.
        reason: String,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// skiff's API on its embedded log (sled).
    Skiff,
    /// skiff's API on an etcd cluster of this many members.
    SkiffOnEtcd(usize),
    /// The key value API (v3 JSON gateway) of an etcd cluster of this many members.
    Etcd(usize),
}

impl System {
    /// The etcd cluster size it runs on (`None`: none).
    pub fn members(self) -> Option<usize> {
        match self {
            System::Skiff => None,
            System::SkiffOnEtcd(n) | System::Etcd(n) => Some(n),
        }
    }

    /// What its rates are divided by in the table: the raw etcd of the same cluster size (one
    /// member for skiff on its own log, the single box it replaces), when that runs too.
    fn reference(self, systems: &[System]) -> Option<System> {
        let reference = match self {
            System::Skiff => System::Etcd(1),
            System::SkiffOnEtcd(n) => System::Etcd(n),
            System::Etcd(_) => return None,
        };
        systems.contains(&reference).then_some(reference)
    }
}

impl std::fmt::Display for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            System::Skiff => f.write_str("skiff"),
            System::SkiffOnEtcd(1) => f.write_str("skiff-on-etcd"),
            System::SkiffOnEtcd(n) => write!(f, "skiff-on-etcd{n}"),
            System::Etcd(1) => f.write_str("etcd"),
            System::Etcd(n) => write!(f, "etcd{n}"),
        }
    }
}

impl std::str::FromStr for System {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let members = |rest: &str| -> std::result::Result<usize, String> {
            if rest.is_empty() {
                return Ok(1);
            }
            match rest.parse::<usize>() {
                Ok(n) if (1..=7).contains(&n) && n % 2 == 1 => Ok(n),
                _ => Err(format!(
                    "{s:?}: an etcd cluster has 1, 3, 5 or 7 members (etcd, etcd3, ...)"
                )),
            }
        };
        if s == "skiff" {
            Ok(System::Skiff)
        } else if let Some(rest) = s.strip_prefix("skiff-on-etcd") {
            Ok(System::SkiffOnEtcd(members(rest)?))
        } else if let Some(rest) = s.strip_prefix("etcd") {
            Ok(System::Etcd(members(rest)?))
        } else {
            Err(format!(
                "unknown system {s:?} (skiff, skiff-on-etcd, skiff-on-etcd3, etcd, etcd3, ...)"
            ))
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The systems, in the order they run and are shown.
    pub systems: Vec<System>,
    /// Rounds of the failover workload (one leader killed in each).
    pub failover_rounds: usize,
    /// The etcd 3.4 binary.
    pub etcd: PathBuf,
    /// Where the temp data dirs go (the system temp dir when `None`).
    pub dir: Option<PathBuf>,
    /// Concurrent clients, one run per level.
    pub clients: Vec<usize>,
    /// How long each create and get run lasts.
    pub duration: Duration,
    /// Objects in the listed collection.
    pub list_objects: usize,
    /// Lists per list run (per level); at least one per list in flight.
    pub lists: usize,
    /// Watchers in the fan-out runs.
    pub watchers: usize,
    /// Events written in each fan-out run.
    pub watch_events: usize,
    /// Bytes of data in each object.
    pub value_size: usize,
    /// Worker threads of the in-process skiff server's runtime.
    pub server_threads: usize,
    /// Which workloads run, in the order create, get, list, watch.
    pub workloads: Vec<Workload>,
    /// Lists in flight at once per system, whatever the level: each 10,000-object list holds
    /// megabytes on both the server and the client side, and both run in this process.
    pub max_concurrent_lists: usize,
    /// How long the churn workload runs per level.
    pub churn_duration: Duration,
    /// How often resident memory is sampled during churn.
    pub churn_sample: Duration,
    /// The in-process skiff's sled page cache, in bytes (the store's default when `None`).
    pub store_cache_bytes: Option<u64>,
    /// Churn reuses this many names in turn instead of a new name per create (`None`: new names).
    pub churn_names: Option<u64>,
}

/// One kind of measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// New objects / keys.
    Create,
    /// One object by name / one key.
    Get,
    /// The whole collection.
    List,
    /// Watch fan-out.
    Watch,
    /// Create and delete in a loop, resident memory sampled (not in [`Workload::ALL`]).
    Churn,
    /// The etcd leader killed under writes (not in [`Workload::ALL`]).
    Failover,
}

impl Workload {
    /// The default workloads, in the order they run (churn runs last, when asked for).
    pub const ALL: [Workload; 4] = [
        Workload::Create,
        Workload::Get,
        Workload::List,
        Workload::Watch,
    ];
}

impl std::str::FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "create" => Ok(Workload::Create),
            "get" => Ok(Workload::Get),
            "list" => Ok(Workload::List),
            "watch" => Ok(Workload::Watch),
            "churn" => Ok(Workload::Churn),
            "failover" => Ok(Workload::Failover),
            other => Err(format!(
                "unknown workload {other:?} (create, get, list, watch, churn or failover)"
            )),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            systems: vec![System::Skiff, System::Etcd(1)],
            failover_rounds: 3,
            etcd: PathBuf::from("etcd"),
            dir: None,
            clients: vec![1, 16, 256],
            duration: Duration::from_secs(5),
            list_objects: 10_000,
            lists: 32,
            watchers: 1000,
            watch_events: 200,
            value_size: 1024,
            server_threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            workloads: Workload::ALL.to_vec(),
            max_concurrent_lists: 16,
            churn_duration: Duration::from_secs(60),
            churn_sample: Duration::from_secs(5),
            store_cache_bytes: None,
            churn_names: None,
        }
    }
}

/// One workload at one level on one system.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Operations completed (for `watch`: events delivered to watchers).
    pub ops: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Median latency of one operation (for `watch`: write to last delivery... see `Row`).
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Failed operations (for `watch`: watchers that ended early or missed events).
    pub errors: u64,
    /// CPU the system under test used during the run (create, get and churn): for skiff this
    /// process's threads but the bench client's, for etcd its process.
    pub server_cpu: Option<Duration>,
    /// CPU of the bench's client threads during the run.
    pub client_cpu: Option<Duration>,
    /// Resident memory (VmRSS) of the system's process after the run; skiff's includes the
    /// bench client.
    pub rss_after: Option<u64>,
    /// Churn only: (time since the start, operations done, VmRSS) samples.
    pub rss_samples: Vec<(Duration, u64, u64)>,
}

impl Stats {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Server CPU per operation, in microseconds.
    pub fn server_us_per_op(&self) -> Option<f64> {
        self.server_cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / (self.ops.max(1) as f64))
    }

    /// Client CPU per operation, in microseconds.
    pub fn client_us_per_op(&self) -> Option<f64> {
        self.client_cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / (self.ops.max(1) as f64))
    }
}

/// CPU clock ticks per second in `/proc/*/stat` (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// utime + stime of one `/proc/.../stat` line, and its command name.
fn stat_cpu(stat: &str) -> Option<(Duration, &str)> {
    let (head, rest) = stat.rsplit_once(") ")?;
    let comm = head.split_once(" (")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Some((
        Duration::from_secs_f64(ticks as f64 / TICKS_PER_SECOND),
        comm,
    ))
}

/// CPU used so far by a whole process (`None`: this one), its exited threads included.
fn process_cpu(pid: Option<u32>) -> Duration {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".into(),
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|stat| stat_cpu(&stat).map(|(cpu, _)| cpu))
        .unwrap_or_default()
}

/// CPU used so far by this process's threads named `client` (a thread's command name is its
/// name cut to 15 bytes) and by its main thread.
fn client_cpu(client: &str) -> Duration {
    let comm = &client.as_bytes()[..client.len().min(15)];
    let me = std::process::id().to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut total = Duration::ZERO;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        if let Some((cpu, name)) = stat_cpu(&stat)
            && (name.as_bytes() == comm || task.file_name().to_str() == Some(me.as_str()))
        {
            total += cpu;
        }
    }
    total
}

/// VmRSS of a process (`None`: this one), in bytes.
fn resident(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".into(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// CPU of the system under test and of the client at one moment.
#[derive(Debug, Clone, Copy)]
struct CpuMark {
    /// This process's (for skiff, which runs in it).
    process: Duration,
    /// The system's child processes' (etcd members).
    children: Duration,
    client: Duration,
}

impl CpuMark {
    fn now(target: &Target, client: &str) -> CpuMark {
        CpuMark {
            process: process_cpu(None),
            children: target
                .pids()
                .into_iter()
                .map(|p| process_cpu(Some(p)))
                .sum(),
            client: client_cpu(client),
        }
    }

    /// Fills in `stats`' CPU and memory since `self`.
    fn settle(self, target: &Target, client: &str, stats: &mut Stats) {
        let now = CpuMark::now(target, client);
        let client_used = now.client.saturating_sub(self.client);
        let children_used = now.children.saturating_sub(self.children);
        // The client runs in this process, as does skiff: skiff's share is the rest of it.
        let in_process = if target.in_process() {
            now.process
                .saturating_sub(self.process)
                .saturating_sub(client_used)
        } else {
            Duration::ZERO
        };
        stats.server_cpu = Some(in_process + children_used);
        stats.client_cpu = Some(client_used);
        stats.rss_after = target.resident();
    }
}

/// One line of the comparison: one workload at one level on every system.
#[derive(Debug, Clone)]
pub struct Row {
    /// `create`, `get`, `list`, `watch`, `churn` or `failover`.
    pub workload: &'static str,
    /// Concurrent clients.
    pub clients: usize,
    /// Each system's figures, in [`Options::systems`]' order.
    pub stats: Vec<Stats>,
}

/// The systems under test.
#[derive(Clone)]
enum Target {
    Skiff {
        system: System,
        http: reqwest::Client,
        base: String,
        token: String,
        /// The etcd it runs on, if any.
        etcd: Option<Arc<EtcdCluster>>,
    },
    Etcd {
        system: System,
        http: reqwest::Client,
        cluster: Arc<EtcdCluster>,
        /// The member the next request goes to (modulo the members).
        next: Arc<AtomicUsize>,
    },
}

impl Target {
    fn system(&self) -> System {
        match self {
            Target::Skiff { system, .. } | Target::Etcd { system, .. } => *system,
        }
    }

    /// Whether the system runs in this process.
    fn in_process(&self) -> bool {
        matches!(self, Target::Skiff { .. })
    }

    /// The system's processes outside this one: the etcd members.
    fn pids(&self) -> Vec<u32> {
        match self {
            Target::Skiff { etcd: None, .. } => Vec::new(),
            Target::Skiff {
                etcd: Some(cluster),
                ..
            }
            | Target::Etcd { cluster, .. } => cluster.pids(),
        }
    }

    /// The system's resident memory: this process's if it runs here, and its members'.
    fn resident(&self) -> Option<u64> {
        let own = if self.in_process() {
            resident(None)?
        } else {
            0
        };
        Some(
            own + self
                .pids()
                .into_iter()
                .filter_map(|p| resident(Some(p)))
                .sum::<u64>(),
        )
    }

    fn fail(&self, operation: &'static str, reason: impl ToString) -> Error {
        Error::Request {
            system: self.system().to_string(),
            operation,
            reason: reason.to_string(),
        }
    }

    fn configmaps(base: &str, ns: &str) -> String {
        format!("{base}/api/v1/namespaces/{ns}/configmaps")
    }

    fn etcd_key(ns: &str, name: &str) -> String {
        format!("/bench/{ns}/{name}")
    }

    /// The key range of one etcd "namespace": `[prefix, prefix + 1)`.
    fn etcd_range(ns: &str) -> (String, String) {
        let prefix = format!("/bench/{ns}/");
        let mut end = prefix.clone().into_bytes();
        *end.last_mut().expect("non-empty") += 1;
        (B64.encode(&prefix), B64.encode(&end))
    }

    /// POSTs `body` to skiff's `url`; the answer must have status `expect`.
    async fn post(
        &self,
        operation: &'static str,
        url: String,
        body: Value,
        expect: u16,
    ) -> Result<bytes::Bytes> {
        let Target::Skiff { http, token, .. } = self else {
            unreachable!("skiff requests go to skiff")
        };
        let response = http
            .post(url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .map_err(|e| self.fail(operation, e))?;
        self.answer(operation, response, expect).await
    }

    /// The body of `response`, whose status must be `expect`.
    async fn answer(
        &self,
        operation: &'static str,
        response: reqwest::Response,
        expect: u16,
    ) -> Result<bytes::Bytes> {
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.fail(operation, e))?;
        if status != expect {
            return Err(self.fail(
                operation,
                format!("status {status}: {}", String::from_utf8_lossy(&bytes)),
            ));
        }
        Ok(bytes)
    }

    /// Sends `body` to the etcd gateway's `path` (`/v3/kv/put`) on the next member in turn,
    /// moving on from members that refuse the connection; the answer is the response, whose
    /// status is not checked.
    async fn etcd_send(
        &self,
        operation: &'static str,
        path: &str,
        body: &Value,
    ) -> Result<reqwest::Response> {
        let Target::Etcd {
            http,
            cluster,
            next,
            ..
        } = self
        else {
            unreachable!("etcd requests go to etcd")
        };
        let urls = &cluster.urls;
        let mut last = None;
        for _ in 0..urls.len() {
            let url = &urls[next.fetch_add(1, Ordering::Relaxed) % urls.len()];
            match http.post(format!("{url}{path}")).json(body).send().await {
                Ok(response) => return Ok(response),
                Err(e) if e.is_connect() => last = Some(e),
                Err(e) => return Err(self.fail(operation, e)),
            }
        }
        Err(self.fail(
            operation,
            last.map_or_else(|| "no members".into(), |e| e.to_string()),
        ))
    }

    /// [`Target::etcd_send`], where the answer must be 200: its body.
    async fn etcd_call(
        &self,
        operation: &'static str,
        path: &str,
        body: Value,
    ) -> Result<bytes::Bytes> {
        let response = self.etcd_send(operation, path, &body).await?;
        self.answer(operation, response, 200).await
    }

    /// Sends a bodiless request to skiff and reads the answer, which must be 200.
    async fn skiff_call(
        &self,
        request: reqwest::RequestBuilder,
        operation: &'static str,
    ) -> Result<bytes::Bytes> {
        let response = request.send().await.map_err(|e| self.fail(operation, e))?;
        self.answer(operation, response, 200).await
    }

    /// Makes the namespace `ns` exist (skiff; etcd has no such thing).
    async fn namespace(&self, ns: &str) -> Result<()> {
        if let Target::Skiff { base, .. } = self {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            match self
                .post(
                    "create namespace",
                    format!("{base}/api/v1/namespaces"),
                    body,
                    201,
                )
                .await
            {
                Ok(_) => {}
                Err(Error::Request { reason, .. }) if reason.starts_with("status 409") => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn create(&self, ns: &str, name: &str, value: &str) -> Result<()> {
        match self {
            Target::Skiff { base, .. } => {
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": name}, "data": {"value": value}});
                self.post("create", Self::configmaps(base, ns), body, 201)
                    .await?;
            }
            Target::Etcd { .. } => {
                let body = json!({"key": B64.encode(Self::etcd_key(ns, name)),
                                  "value": B64.encode(value)});
                self.etcd_call("put", "/v3/kv/put", body).await?;
            }
        }
        Ok(())
    }

    async fn delete(&self, ns: &str, name: &str) -> Result<()> {
        match self {
            Target::Skiff {
                http, base, token, ..
            } => {
                let url = format!("{}/{name}", Self::configmaps(base, ns));
                self.skiff_call(http.delete(url).bearer_auth(token), "delete")
                    .await?;
            }
            Target::Etcd { .. } => {
                let body = json!({"key": B64.encode(Self::etcd_key(ns, name))});
                let bytes = self.etcd_call("delete", "/v3/kv/deleterange", body).await?;
                if !bytes.windows(10).any(|w| w == b"\"deleted\":") {
                    return Err(self.fail("delete", "key not found"));
                }
            }
        }
        Ok(())
    }

    async fn get(&self, ns: &str, name: &str) -> Result<()> {
        match self {
            Target::Skiff {
                http, base, token, ..
            } => {
                let url = format!("{}/{name}", Self::configmaps(base, ns));
                self.skiff_call(http.get(url).bearer_auth(token), "get")
                    .await?;
            }
            Target::Etcd { .. } => {
                let body = json!({"key": B64.encode(Self::etcd_key(ns, name))});
                let bytes = self.etcd_call("range", "/v3/kv/range", body).await?;
                if !bytes.windows(6).any(|w| w == b"\"kvs\":") {
                    return Err(self.fail("range", "key not found"));
                }
            }
        }
        Ok(())
    }

    /// Lists the namespace; returns how many objects came back (decoded by the client).
    async fn list(&self, ns: &str) -> Result<usize> {
        let (bytes, items) = match self {
            Target::Skiff {
                http, base, token, ..
            } => {
                let request = http.get(Self::configmaps(base, ns)).bearer_auth(token);
                (self.skiff_call(request, "list").await?, "items")
            }
            Target::Etcd { .. } => {
                let (key, range_end) = Self::etcd_range(ns);
                let body = json!({"key": key, "range_end": range_end});
                let bytes = self.etcd_call("range", "/v3/kv/range", body).await?;
                (bytes, "kvs")
            }
        };
        count_items(&bytes, items).map_err(|e| self.fail("list", e))
    }

    /// Opens a watch of namespace `ns` from now on; resolves once the watch is established, to a
    /// stream of delivery chunks and the marker that occurs once per event in it.
    async fn watch(&self, ns: &str) -> Result<(reqwest::Response, &'static [u8])> {
        match self {
            Target::Skiff {
                http, base, token, ..
            } => {
                // From the current revision, as an informer does after its list.
                let response = http
                    .get(format!("{}?limit=1", Self::configmaps(base, ns)))
                    .bearer_auth(token)
                    .send()
                    .await
                    .map_err(|e| self.fail("list", e))?;
                let list: Value = response.json().await.map_err(|e| self.fail("list", e))?;
                let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("0");
                let response = http
                    .get(format!(
                        "{}?watch=1&resourceVersion={rv}",
                        Self::configmaps(base, ns)
                    ))
                    .bearer_auth(token)
                    .send()
                    .await
                    .map_err(|e| self.fail("watch", e))?;
                if response.status().as_u16() != 200 {
                    return Err(self.fail("watch", format!("status {}", response.status())));
                }
                // One line per event (no bookmarks were asked for).
                Ok((response, b"\n"))
            }
            Target::Etcd { .. } => {
                let (key, range_end) = Self::etcd_range(ns);
                let body = json!({"create_request": {"key": key, "range_end": range_end}});
                let mut response = self.etcd_send("watch", "/v3/watch", &body).await?;
                // The first message says the watch is created.
                let first = response
                    .chunk()
                    .await
                    .map_err(|e| self.fail("watch", e))?
                    .unwrap_or_default();
                if !first.windows(9).any(|w| w == b"\"created\"") {
                    return Err(self.fail(
                        "watch",
                        format!(
                            "unexpected first message {}",
                            String::from_utf8_lossy(&first)
                        ),
                    ));
                }
                // Each event carries one `"kv":` (values and keys are base64, without quotes).
                Ok((response, b"\"kv\":"))
            }
        }
    }
}

/// How many elements the array under the top-level field `field` of a JSON document has. The
/// whole document is parsed (as a client decoding it would), but nothing is kept.
fn count_items(document: &[u8], field: &str) -> Result<usize, serde_json::Error> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    struct Top<'a>(&'a str);
    struct Elements;

    impl<'de> Visitor<'de> for Elements {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            Ok(n)
        }
        fn visit_unit<E>(self) -> Result<usize, E> {
            Ok(0)
        }
    }

    impl<'de> DeserializeSeed<'de> for Elements {
        type Value = usize;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Top<'_> {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
            let mut n = 0;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.0 {
                    n = map.next_value_seed(Elements)?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(n)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(document);
    let n = (&mut de).deserialize_map(Top(field))?;
    de.end()?;
    Ok(n)
}

/// Occurrences of `needle` in `haystack`.
fn memmem_count(haystack: &[u8], needle: &[u8]) -> u64 {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count() as u64
}

/// Per-operation latencies, merged across clients.
fn percentiles(mut latencies: Vec<Duration>) -> (Duration, Duration) {
    if latencies.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

/// Runs `clients` loops of `op(i)` (i from a shared counter) until `deadline` passes or `max`
/// operations were started.
async fn closed_loop<F, Fut>(clients: usize, duration: Duration, max: u64, op: F) -> Stats
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let counter = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (op, counter, errors, first_error) = (
            op.clone(),
            counter.clone(),
            errors.clone(),
            first_error.clone(),
        );
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let i = counter.fetch_add(1, Ordering::Relaxed);
                if i >= max {
                    break;
                }
                let t = Instant::now();
                match op(i).await {
                    Ok(()) => latencies.push(t.elapsed()),
                    Err(e) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error
                            .lock()
                            .expect("error slot")
                            .get_or_insert(e.to_string());
                    }
                }
            }
            latencies
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.unwrap_or_default());
    }
    let elapsed = start.elapsed();
    if let Some(e) = first_error.lock().expect("error slot").take() {
        tracing::warn!(error = %e, "benchmark operations failed");
    }
    let ops = latencies.len() as u64;
    let (p50, p99) = percentiles(latencies);
    Stats {
        ops,
        elapsed,
        p50,
        p99,
        errors: errors.load(Ordering::Relaxed),
        ..Stats::default()
    }
}

/// The value written into every object.
fn value(size: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..size)
        .map(|i| ALPHABET[(i * 7 + i / 36) % ALPHABET.len()] as char)
        .collect()
}

/// Writes `count` objects into `ns` with 64 concurrent clients.
async fn populate(target: &Target, ns: &str, count: usize, value: &Arc<String>) -> Result<()> {
    target.namespace(ns).await?;
    let ns_owned = Arc::new(ns.to_string());
    let (t, v) = (target.clone(), value.clone());
    let stats = closed_loop(64, Duration::from_secs(3600), count as u64, move |i| {
        let (t, v, ns) = (t.clone(), v.clone(), ns_owned.clone());
        async move { t.create(&ns, &format!("o-{i}"), &v).await }
    })
    .await;
    if stats.errors > 0 {
        return Err(target.fail("populate", format!("{} creates failed", stats.errors)));
    }
    Ok(())
}

/// Fan-out: `watchers` watches of a fresh namespace, then `events` creates by `clients` clients;
/// done when every watcher has seen every event (or after a minute).
async fn fan_out(
    target: &Target,
    ns: &str,
    watchers: usize,
    events: usize,
    clients: usize,
    value: &Arc<String>,
) -> Result<Stats> {
    target.namespace(ns).await?;
    let delivered = Arc::new(AtomicU64::new(0));
    let complete = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let stop = CancellationToken::new();
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..watchers {
        let (response, marker) = target.watch(ns).await?;
        let (delivered, complete, all_done, stop) = (
            delivered.clone(),
            complete.clone(),
            all_done.clone(),
            stop.clone(),
        );
        readers.spawn(async move {
            let mut stream = response.bytes_stream();
            let mut seen = 0u64;
            let mut tail: Vec<u8> = Vec::new();
            loop {
                let chunk = tokio::select! {
                    _ = stop.cancelled() => return seen,
                    chunk = stream.next() => chunk,
                };
                let Some(Ok(chunk)) = chunk else { return seen };
                // Counted over the previous chunk's last bytes too, so that a marker split
                // across two chunks is counted (the tail is too short to hold a whole one).
                let mut joined = std::mem::take(&mut tail);
                joined.extend_from_slice(&chunk);
                let n = memmem_count(&joined, marker);
                tail = joined[joined.len().saturating_sub(marker.len() - 1)..].to_vec();
                seen += n;
                delivered.fetch_add(n, Ordering::Relaxed);
                if seen >= events as u64 {
                    if complete.fetch_add(1, Ordering::Relaxed) + 1 == watchers {
                        all_done.notify_one();
                    }
                    return seen;
                }
            }
        });
    }
    let start = Instant::now();
    let (t, v, ns_owned) = (target.clone(), value.clone(), Arc::new(ns.to_string()));
    let writes = closed_loop(
        clients,
        Duration::from_secs(3600),
        events as u64,
        move |i| {
            let (t, v, ns) = (t.clone(), v.clone(), ns_owned.clone());
            async move { t.create(&ns, &format!("e-{i}"), &v).await }
        },
    );
    let writes = writes.await;
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        while complete.load(Ordering::Relaxed) < watchers {
            // `notify_one` keeps a permit, so a completion between the check and the wait is not lost.
            tokio::select! {
                _ = all_done.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    })
    .await
    .is_ok();
    let elapsed = start.elapsed();
    stop.cancel();
    let mut short = 0u64;
    while let Some(seen) = readers.join_next().await {
        if seen.unwrap_or(0) < events as u64 {
            short += 1;
        }
    }
    if !finished {
        tracing::warn!(
            system = %target.system(),
            short,
            "fan-out did not complete in 60 s"
        );
    }
    Ok(Stats {
        ops: delivered.load(Ordering::Relaxed),
        elapsed,
        // Write latency under fan-out.
        p50: writes.p50,
        p99: writes.p99,
        errors: short + writes.errors,
        ..Stats::default()
    })
}

/// Churn: `clients` clients each create an object and delete it again until `duration` has
/// passed; resident memory of the system is sampled every `sample`. An operation is one create
/// and its delete.
#[allow(clippy::too_many_arguments)]
async fn churn(
    target: &Target,
    ns: &str,
    clients: usize,
    duration: Duration,
    sample: Duration,
    names: Option<u64>,
    value: &Arc<String>,
) -> Result<Stats> {
    target.namespace(ns).await?;
    let (t, v, ns_owned) = (target.clone(), value.clone(), Arc::new(ns.to_string()));
    let done = Arc::new(AtomicU64::new(0));
    let counted = done.clone();
    let run = tokio::spawn(closed_loop(clients, duration, u64::MAX, move |i| {
        let (t, v, ns, done) = (t.clone(), v.clone(), ns_owned.clone(), counted.clone());
        async move {
            // Reused names stay clear of one another: the operations in flight have
            // consecutive numbers, far fewer than the names.
            let name = format!("c-{}", names.map_or(i, |n| i % n.max(4 * clients as u64)));
            t.create(&ns, &name, &v).await?;
            t.delete(&ns, &name).await?;
            done.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }));
    let start = Instant::now();
    let mut samples = vec![(Duration::ZERO, 0, target.resident().unwrap_or_default())];
    while start.elapsed() + sample <= duration {
        tokio::time::sleep(sample).await;
        samples.push((
            start.elapsed(),
            done.load(Ordering::Relaxed),
            target.resident().unwrap_or_default(),
        ));
    }
    let mut stats = run
        .await
        .map_err(|e| target.fail("churn", format!("the churn task failed: {e}")))?;
    samples.push((
        start.elapsed(),
        stats.ops,
        target.resident().unwrap_or_default(),
    ));
    stats.rss_samples = samples;
    Ok(stats)
}

/// An etcd cluster of child processes on loopback, each member on a temp data dir of its own
/// (default fsync, heartbeat and election timeout); killed on drop.
struct EtcdCluster {
    binary: PathBuf,
    /// `--initial-cluster`.
    initial: String,
    /// The members' client URLs, in member order.
    urls: Vec<String>,
    members: std::sync::Mutex<Vec<Member>>,
}

struct Member {
    name: String,
    dir: PathBuf,
    client: String,
    peer: String,
    child: Option<Child>,
}

impl EtcdCluster {
    /// Starts `members` members under `dir` and waits until the cluster answers a quorum read
    /// on every member.
    async fn start(binary: &Path, dir: &Path, members: usize) -> Result<EtcdCluster> {
        let mut list = Vec::new();
        for i in 0..members {
            let name = format!("m{i}");
            list.push(Member {
                dir: dir.join(format!("etcd{members}-{name}")),
                client: format!("http://127.0.0.1:{}", free_port()?),
                peer: format!("http://127.0.0.1:{}", free_port()?),
                name,
                child: None,
            });
        }
        let initial = list
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let cluster = EtcdCluster {
            binary: binary.to_path_buf(),
            initial,
            urls: list.iter().map(|m| m.client.clone()).collect(),
            members: std::sync::Mutex::new(list),
        };
        for i in 0..members {
            cluster.spawn(i)?;
        }
        for i in 0..members {
            cluster.wait_serving(i).await?;
        }
        Ok(cluster)
    }

    fn error(&self, reason: impl ToString) -> Error {
        Error::Etcd {
            path: self.binary.clone(),
            reason: reason.to_string(),
        }
    }

    /// Starts member `i` (again: its data dir makes it rejoin).
    fn spawn(&self, i: usize) -> Result<()> {
        let mut members = self.members.lock().expect("members");
        let member = &mut members[i];
        let child = Command::new(&self.binary)
            .arg(format!("--name={}", member.name))
            .arg(format!("--data-dir={}", member.dir.display()))
            .arg(format!("--listen-client-urls={}", member.client))
            .arg(format!("--advertise-client-urls={}", member.client))
            .arg(format!("--listen-peer-urls={}", member.peer))
            .arg(format!("--initial-advertise-peer-urls={}", member.peer))
            .arg(format!("--initial-cluster={}", self.initial))
            .arg("--initial-cluster-token=skiff-bench")
            .arg("--logger=zap")
            .arg("--log-level=error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| self.error(e))?;
        member.child = Some(child);
        Ok(())
    }

    /// Waits until member `i` answers a quorum read (so the cluster has a leader).
    async fn wait_serving(&self, i: usize) -> Result<()> {
        let http = reqwest::Client::new();
        for _ in 0..400 {
            let ready = http
                .post(format!("{}/v3/kv/range", self.urls[i]))
                .json(&json!({"key": B64.encode("/")}))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(self.error(format!(
            "member {} not answering on {} after 20 s",
            i, self.urls[i]
        )))
    }

    /// The running members' processes.
    fn pids(&self) -> Vec<u32> {
        let members = self.members.lock().expect("members");
        members
            .iter()
            .filter_map(|m| m.child.as_ref().map(Child::id))
            .collect()
    }

    /// The member that is the leader now, as the running members' status says.
    async fn leader(&self) -> Result<usize> {
        let http = reqwest::Client::new();
        let id = |v: &Value| {
            v.as_str()
                .map(str::to_string)
                .or(v.as_u64().map(|n| n.to_string()))
        };
        for (i, url) in self.urls.iter().enumerate() {
            let Ok(response) = http
                .post(format!("{url}/v3/maintenance/status"))
                .json(&json!({}))
                .timeout(Duration::from_secs(2))
                .send()
                .await
            else {
                continue;
            };
            let Ok(status) = response.json::<Value>().await else {
                continue;
            };
            let (me, leader) = (id(&status["header"]["member_id"]), id(&status["leader"]));
            if me.is_some() && me == leader {
                return Ok(i);
            }
        }
        Err(self.error("no member says it is the leader"))
    }

    /// SIGKILLs member `i`.
    fn kill(&self, i: usize) {
        let mut members = self.members.lock().expect("members");
        if let Some(mut child) = members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.urls.len() {
            self.kill(i);
        }
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Setup(format!("no free port: {e}")))?;
    Ok(listener
        .local_addr()
        .map_err(|e| Error::Setup(e.to_string()))?
        .port())
}

/// An in-process skiff API server; stopped on drop.
struct Skiff {
    base: String,
    token: String,
    ca_pem: String,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Skiff {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where an in-process skiff keeps its log.
enum Log {
    /// The embedded log, with this page cache (the store's default when `None`).
    Sled(Option<u64>),
    /// etcd at these client URLs.
    Etcd(Vec<String>),
}

fn start_skiff(dir: &Path, threads: usize, log: Log) -> Result<Skiff> {
    use crate::{auth, server, tls};
    tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("skiff-bench-server")
        .enable_all()
        .build()
        .map_err(|e| Error::Skiff(e.to_string()))?;
    let shutdown = CancellationToken::new();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(String, String, String)>>();
    let dir = dir.to_path_buf();
    let token = shutdown.clone();
    let thread = std::thread::spawn(move || {
        runtime.block_on(async move {
            let setup = async {
                let fail = |e: &dyn std::fmt::Display| Error::Skiff(e.to_string());
                let store: Arc<dyn skiff_store::Store> = match log {
                    Log::Etcd(endpoints) => Arc::new(
                        skiff_store::EtcdStore::connect(skiff_store::etcd::Config::new(endpoints))
                            .await
                            .map_err(|e| fail(&e))?,
                    ),
                    Log::Sled(cache_bytes) => {
                        let defaults = skiff_store::Config::new(dir.join("skiff").join("db"));
                        let store_config = skiff_store::Config {
                            cache_capacity: cache_bytes.unwrap_or(defaults.cache_capacity),
                            prefix_retention: server::HIGH_CHURN_PREFIXES
                                .iter()
                                .map(|(prefix, versions)| skiff_store::PrefixRetention {
                                    prefix: prefix.as_bytes().to_vec(),
                                    max_versions: *versions,
                                })
                                .collect(),
                            ..defaults
                        };
                        Arc::new(skiff_store::SledStore::open(store_config).map_err(|e| fail(&e))?)
                    }
                };
                let api =
                    server::ApiServer::new(store.clone(), server::Config::default(), token.clone())
                        .await
                        .map_err(|e| fail(&e))?;
                let pki = tls::Pki::load_or_create(
                    &dir.join("skiff").join("pki"),
                    &tls::default_sans(&[]),
                )
                .map_err(|e| fail(&e))?;
                let authenticator = Arc::new(
                    auth::Authenticator::load_or_create(&dir.join("skiff").join("tokens.csv"))
                        .map_err(|e| fail(&e))?,
                );
                let admin = authenticator
                    .admin_token()
                    .ok_or_else(|| Error::Skiff("no admin token".into()))?;
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .map_err(|e| fail(&e))?;
                let address = listener.local_addr().map_err(|e| fail(&e))?;
                let tls_config = pki.server_config().map_err(|e| fail(&e))?;
                let routes = crate::routes(api.clone(), authenticator);
                Ok((
                    format!("https://{address}"),
                    admin,
                    pki.ca_pem().to_string(),
                    listener,
                    tls_config,
                    routes,
                    store,
                ))
            };
            match setup.await {
                Ok((base, admin, ca, listener, tls_config, routes, store)) => {
                    let _ = ready_tx.send(Ok((base, admin, ca)));
                    tls::serve(
                        listener,
                        tls_config,
                        routes,
                        token.clone(),
                        crate::limits::Settings::default().header_read_timeout,
                        None,
                    )
                    .await;
                    let _ = store.close().await;
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        });
    });
    let (base, token, ca_pem) = ready_rx
        .recv()
        .map_err(|_| Error::Skiff("the server thread ended".into()))??;
    Ok(Skiff {
        base,
        token,
        ca_pem,
        shutdown,
        thread: Some(thread),
    })
}

/// Runs every workload at every level on every system; returns the rows in order.
/// `progress` is called with each row as it is measured.
pub async fn run(options: &Options, mut progress: impl FnMut(&Row)) -> Result<Vec<Row>> {
    let base_dir = options.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base_dir.join(format!("skiff-bench-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::Setup(format!("{}: {e}", dir.display())))?;
    let result = run_in(options, &dir, &mut progress).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run_in(
    options: &Options,
    dir: &Path,
    progress: &mut impl FnMut(&Row),
) -> Result<Vec<Row>> {
    if options.systems.is_empty() {
        return Err(Error::Setup("no systems to measure".into()));
    }
    crate::tls::install_crypto_provider();
    // One etcd cluster per size, shared by skiff on it and by its own API.
    let mut clusters = std::collections::BTreeMap::<usize, Arc<EtcdCluster>>::new();
    for members in options.systems.iter().filter_map(|s| s.members()) {
        if let std::collections::btree_map::Entry::Vacant(slot) = clusters.entry(members) {
            slot.insert(Arc::new(
                EtcdCluster::start(&options.etcd, dir, members).await?,
            ));
        }
    }
    let client = |builder: reqwest::ClientBuilder| {
        builder
            .http1_only()
            .pool_max_idle_per_host(usize::MAX)
            .build()
            .map_err(|e| Error::Setup(e.to_string()))
    };
    let plain = client(reqwest::Client::builder())?;
    // The in-process servers, stopped when this returns.
    let mut servers = Vec::new();
    let mut targets = Vec::new();
    for &system in &options.systems {
        let cluster = system.members().map(|m| clusters[&m].clone());
        if let System::Etcd(_) = system {
            targets.push(Target::Etcd {
                system,
                http: plain.clone(),
                cluster: cluster.expect("etcd has members"),
                next: Arc::new(AtomicUsize::new(0)),
            });
            continue;
        }
        let log = match &cluster {
            Some(cluster) => Log::Etcd(cluster.urls.clone()),
            None => Log::Sled(options.store_cache_bytes),
        };
        let skiff = start_skiff(&dir.join(system.to_string()), options.server_threads, log)?;
        let ca = reqwest::Certificate::from_pem(skiff.ca_pem.as_bytes())
            .map_err(|e| Error::Setup(e.to_string()))?;
        targets.push(Target::Skiff {
            system,
            http: client(reqwest::Client::builder().tls_certs_only([ca]))?,
            base: skiff.base.clone(),
            token: skiff.token.clone(),
            etcd: cluster,
        });
        servers.push(skiff);
    }
    // The client's requests run on the caller's runtime's worker threads (the caller itself may
    // be its main thread, named `main`): one of them says what they are called.
    let client_threads =
        tokio::spawn(async { std::thread::current().name().unwrap_or("").to_string() })
            .await
            .unwrap_or_default();
    let value = Arc::new(value(options.value_size));
    let mut rows = Vec::new();
    let mut push = |row: Row, rows: &mut Vec<Row>| {
        progress(&row);
        rows.push(row);
    };

    let wants = |w: Workload| options.workloads.contains(&w);
    // Creates (each level in a namespace of its own).
    if wants(Workload::Create) {
        for &clients in &options.clients {
            let mut stats = Vec::new();
            for target in &targets {
                let ns = format!("create-{clients}");
                target.namespace(&ns).await?;
                let (t, v, ns) = (target.clone(), value.clone(), Arc::new(ns));
                let mark = CpuMark::now(target, &client_threads);
                let mut run = closed_loop(clients, options.duration, u64::MAX, move |i| {
                    let (t, v, ns) = (t.clone(), v.clone(), ns.clone());
                    async move { t.create(&ns, &format!("o-{i}"), &v).await }
                })
                .await;
                mark.settle(target, &client_threads, &mut run);
                stats.push(run);
            }
            push(
                Row {
                    workload: "create",
                    clients,
                    stats,
                },
                &mut rows,
            );
        }
    }
    // Gets of objects made for them.
    if wants(Workload::Get) {
        let objects = 1000u64;
        for target in &targets {
            populate(target, "get", objects as usize, &value).await?;
        }
        for &clients in &options.clients {
            let mut stats = Vec::new();
            for target in &targets {
                let t = target.clone();
                let mark = CpuMark::now(target, &client_threads);
                let mut run = closed_loop(clients, options.duration, u64::MAX, move |i| {
                    let t = t.clone();
                    async move { t.get("get", &format!("o-{}", i % objects)).await }
                })
                .await;
                mark.settle(target, &client_threads, &mut run);
                stats.push(run);
            }
            push(
                Row {
                    workload: "get",
                    clients,
                    stats,
                },
                &mut rows,
            );
        }
    }
    // Lists of the whole collection.
    if wants(Workload::List) {
        for target in &targets {
            populate(target, "list", options.list_objects, &value).await?;
            let n = target.list("list").await?;
            if n != options.list_objects {
                return Err(target.fail(
                    "list",
                    format!("{n} objects, expected {}", options.list_objects),
                ));
            }
        }
        for &clients in &options.clients {
            let mut stats = Vec::new();
            // Capped: 256 lists of 10,000 objects at once took this process past 6 GB.
            let concurrency = clients.min(options.max_concurrent_lists.max(1));
            let lists = options.lists.max(concurrency) as u64;
            for target in &targets {
                let (t, expected) = (target.clone(), options.list_objects);
                stats.push(
                    closed_loop(concurrency, Duration::from_secs(3600), lists, move |_| {
                        let t = t.clone();
                        async move {
                            let n = t.list("list").await?;
                            if n == expected {
                                Ok(())
                            } else {
                                Err(t.fail("list", format!("{n} objects")))
                            }
                        }
                    })
                    .await,
                );
            }
            push(
                Row {
                    workload: "list",
                    clients: concurrency,
                    stats,
                },
                &mut rows,
            );
        }
    }
    // Watch fan-out.
    if wants(Workload::Watch) {
        for &clients in &options.clients {
            let mut stats = Vec::new();
            for target in &targets {
                stats.push(
                    fan_out(
                        target,
                        &format!("fan-{clients}"),
                        options.watchers,
                        options.watch_events,
                        clients,
                        &value,
                    )
                    .await?,
                );
            }
            push(
                Row {
                    workload: "watch",
                    clients,
                    stats,
                },
                &mut rows,
            );
        }
    }
    // Churn, last: it leaves nothing behind, but its memory samples should see the others' too.
    if wants(Workload::Churn) {
        for &clients in &options.clients {
            let mut stats = Vec::new();
            for target in &targets {
                let mark = CpuMark::now(target, &client_threads);
                let mut run = churn(
                    target,
                    &format!("churn-{clients}"),
                    clients,
                    options.churn_duration,
                    options.churn_sample,
                    options.churn_names,
                    &value,
                )
                .await?;
                mark.settle(target, &client_threads, &mut run);
                stats.push(run);
            }
            push(
                Row {
                    workload: "churn",
                    clients,
                    stats,
                },
                &mut rows,
            );
        }
    }
    // The etcd leader killed under writes, on the systems on three members or more.
    if wants(Workload::Failover) {
        let mut stats = Vec::new();
        for target in &targets {
            stats.push(match target.system().members() {
                Some(members) if members >= 3 => {
                    failover(target, &clusters[&members], options.failover_rounds, &value).await?
                }
                _ => Stats::default(),
            });
        }
        push(
            Row {
                workload: "failover",
                clients: 1,
                stats,
            },
            &mut rows,
        );
    }
    drop(targets);
    drop(servers);
    drop(clusters);
    Ok(rows)
}

/// Failover: `rounds` times, writes are sent every 10 ms (each on its own, whatever the ones
/// before it are waiting for), the etcd leader is SIGKILLed, and the time from the kill to the
/// first acknowledged write sent after it is taken; then the member is started again and
/// caught up. `ops` is the rounds, p50 the median time and p99 the longest; `errors` the writes
/// that failed or took over 30 s.
async fn failover(
    target: &Target,
    cluster: &EtcdCluster,
    rounds: usize,
    value: &Arc<String>,
) -> Result<Stats> {
    const NS: &str = "failover";
    target.namespace(NS).await?;
    let started = Instant::now();
    let failed = Arc::new(AtomicU64::new(0));
    let mut times = Vec::new();
    for round in 0..rounds {
        let killed_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
        let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        let stop = CancellationToken::new();
        let prober = {
            let (t, v, killed_at, stop, failed) = (
                target.clone(),
                value.clone(),
                killed_at.clone(),
                stop.clone(),
                failed.clone(),
            );
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                for i in 0u64.. {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tick.tick() => {}
                    }
                    let (t, v, killed_at, acked_tx, failed) = (
                        t.clone(),
                        v.clone(),
                        killed_at.clone(),
                        acked_tx.clone(),
                        failed.clone(),
                    );
                    tokio::spawn(async move {
                        let sent = Instant::now();
                        let name = format!("r{round}-{i}");
                        let write = t.create(NS, &name, &v);
                        match tokio::time::timeout(Duration::from_secs(30), write).await {
                            Ok(Ok(())) => {
                                let after_kill = killed_at
                                    .lock()
                                    .expect("kill time")
                                    .is_some_and(|at| sent >= at);
                                if after_kill {
                                    let _ = acked_tx.send(Instant::now());
                                }
                            }
                            _ => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            })
        };
        // Writes flow for a second before the leader goes.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let leader = cluster.leader().await?;
        cluster.kill(leader);
        let at = Instant::now();
        *killed_at.lock().expect("kill time") = Some(at);
        let acked = tokio::time::timeout(Duration::from_secs(60), acked_rx.recv()).await;
        stop.cancel();
        let _ = prober.await;
        match acked {
            Ok(Some(when)) => times.push(when - at),
            _ => {
                return Err(target.fail(
                    "failover",
                    format!(
                        "no write acknowledged within 60 s of killing the leader (round {round})"
                    ),
                ));
            }
        }
        cluster.spawn(leader)?;
        cluster.wait_serving(leader).await?;
        // The member catches up before the next round.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (p50, _) = percentiles(times.clone());
    Ok(Stats {
        ops: times.len() as u64,
        elapsed: started.elapsed(),
        p50,
        p99: times.iter().max().copied().unwrap_or_default(),
        errors: failed.load(Ordering::Relaxed),
        ..Stats::default()
    })
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn us(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".into(), |b| format!("{:.1}", b as f64 / 1048576.0))
}

/// The rows as Markdown: each system's rate per workload and level, with each skiff's rate
/// divided by its reference etcd's (see [`System`]); then one line per system with latencies,
/// errors, CPU per operation in microseconds (the system's and the bench client's; a churn
/// operation is a create and its delete) and resident memory after the run; then the failover
/// times. A workload's latencies under `watch` are its writes'.
pub fn table(systems: &[System], rows: &[Row]) -> String {
    let ratios: Vec<(usize, usize)> = systems
        .iter()
        .enumerate()
        .filter_map(|(i, system)| {
            let reference = system.reference(systems)?;
            Some((i, systems.iter().position(|s| *s == reference)?))
        })
        .collect();
    let measured = || rows.iter().filter(|r| r.workload != "failover");
    let mut out = String::from("| workload | clients |");
    for system in systems {
        out.push_str(&format!(" {system} ops/s |"));
    }
    for (i, reference) in &ratios {
        out.push_str(&format!(" {} / {} |", systems[*i], systems[*reference]));
    }
    out.push_str(&format!(
        "\n|---|---|{}\n",
        "---|".repeat(systems.len() + ratios.len())
    ));
    for row in measured() {
        out.push_str(&format!("| {} | {} |", row.workload, row.clients));
        for stats in &row.stats {
            out.push_str(&format!(" {:.0} |", stats.rate()));
        }
        for (i, reference) in &ratios {
            let ratio = row.stats[*i].rate() / row.stats[*reference].rate().max(1e-9);
            out.push_str(&format!(" {ratio:.2} |"));
        }
        out.push('\n');
    }
    out.push_str(
        "\n| workload | clients | system | p50 / p99 ms | errors | server CPU µs/op | client CPU µs/op | VmRSS after, MiB |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in measured() {
        for (system, stats) in systems.iter().zip(&row.stats) {
            out.push_str(&format!(
                "| {} | {} | {system} | {} / {} | {} | {} | {} | {} |\n",
                row.workload,
                row.clients,
                ms(stats.p50),
                ms(stats.p99),
                stats.errors,
                us(stats.server_us_per_op()),
                us(stats.client_us_per_op()),
                mib(stats.rss_after),
            ));
        }
    }
    for row in rows.iter().filter(|r| r.workload == "failover") {
        out.push_str(
            "\nfailover: the etcd leader SIGKILLed to the first acknowledged write sent after it\n| system | rounds | p50 ms | max ms | writes failed or over 30 s |\n|---|---|---|---|---|\n",
        );
        for (system, stats) in systems.iter().zip(&row.stats) {
            if stats.ops > 0 {
                out.push_str(&format!(
                    "| {system} | {} | {} | {} | {} |\n",
                    stats.ops,
                    ms(stats.p50),
                    ms(stats.p99),
                    stats.errors
                ));
            }
        }
    }
    out
}

/// The churn rows' memory samples, one line per sample: seconds, then each system's
/// operations so far and VmRSS in MiB.
pub fn churn_series(systems: &[System], rows: &[Row]) -> String {
    let mut out = String::new();
    for row in rows.iter().filter(|r| r.workload == "churn") {
        out.push_str(&format!(
            "\nchurn x{}: seconds, create+delete pairs so far, VmRSS MiB\n| s |",
            row.clients
        ));
        for system in systems {
            out.push_str(&format!(" {system} ops | {system} MiB |"));
        }
        out.push_str(&format!("\n|---|{}\n", "---|---|".repeat(systems.len())));
        let samples = row.stats.iter().map(|s| s.rss_samples.len()).max();
        for i in 0..samples.unwrap_or(0) {
            let at = row
                .stats
                .iter()
                .find_map(|s| s.rss_samples.get(i))
                .map_or(0.0, |(at, _, _)| at.as_secs_f64());
            out.push_str(&format!("| {at:.0} |"));
            for stats in &row.stats {
                match stats.rss_samples.get(i) {
                    Some((_, ops, rss)) => out.push_str(&format!(" {ops} | {} |", mib(Some(*rss)))),
                    None => out.push_str(" - | - |"),
                }
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_percentiles_and_the_table() {
        assert_eq!(memmem_count(b"{\"kv\":1}{\"kv\":2}", b"\"kv\":"), 2);
        assert_eq!(memmem_count(b"", b"\"kv\":"), 0);
        let list = br#"{"kind":"ConfigMapList","metadata":{"items":[1]},"items":[{"a":[1,2]},{}]}"#;
        assert_eq!(count_items(list, "items").unwrap(), 2);
        assert_eq!(count_items(br#"{"header":{}}"#, "kvs").unwrap(), 0);
        assert!(count_items(br#"{"items":[1,"#, "items").is_err());
        let (p50, p99) = percentiles((1..=100).map(Duration::from_millis).collect());
        assert_eq!(
            (p50, p99),
            (Duration::from_millis(51), Duration::from_millis(99))
        );
        let rate = |ops| Stats {
            ops,
            elapsed: Duration::from_secs(1),
            ..Stats::default()
        };
        let two = [System::Skiff, System::Etcd(1)];
        let rows = [Row {
            workload: "create",
            clients: 1,
            stats: vec![rate(10), rate(5)],
        }];
        let text = table(&two, &rows);
        assert!(text.contains("| workload | clients | skiff ops/s | etcd ops/s | skiff / etcd |"));
        assert!(text.contains("| create | 1 | 10 | 5 | 2.00 |"), "{text}");
        assert!(text.contains("| create | 1 | etcd | 0.00 / 0.00 | 0 | - | - | - |"));
        let stat = "42 (skiff-bench-ser) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        let (cpu, comm) = stat_cpu(stat).unwrap();
        assert_eq!((cpu, comm), (Duration::from_secs(3), "skiff-bench-ser"));
        let odd = "7 (a) b) R 1 2 3 4 5 6 7 8 9 10 1 2";
        assert_eq!(stat_cpu(odd).unwrap(), (Duration::from_millis(30), "a) b"));
        assert!(resident(None).unwrap() > 0);
        let measured = Stats {
            ops: 4,
            server_cpu: Some(Duration::from_millis(1)),
            client_cpu: Some(Duration::from_micros(400)),
            rss_after: Some(3 << 20),
            rss_samples: vec![(Duration::from_secs(5), 100, 2 << 20)],
            ..Stats::default()
        };
        assert_eq!(measured.server_us_per_op(), Some(250.0));
        let rows = [Row {
            workload: "churn",
            clients: 2,
            stats: vec![measured.clone(), Stats::default()],
        }];
        let text = table(&two, &rows);
        assert!(
            text.contains("| churn | 2 | skiff | 0.00 / 0.00 | 0 | 250 | 100 | 3.0 |"),
            "{text}"
        );
        let series = churn_series(&two, &rows);
        assert!(
            series.contains("| s | skiff ops | skiff MiB | etcd ops | etcd MiB |"),
            "{series}"
        );
        assert!(series.contains("| 5 | 100 | 2.0 | - | - |"), "{series}");
    }

    #[test]
    fn systems_parse_name_and_pair_with_their_etcd() {
        let systems: Vec<System> = ["skiff", "skiff-on-etcd", "skiff-on-etcd3", "etcd", "etcd3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(
            systems,
            [
                System::Skiff,
                System::SkiffOnEtcd(1),
                System::SkiffOnEtcd(3),
                System::Etcd(1),
                System::Etcd(3)
            ]
        );
        let names: Vec<String> = systems.iter().map(System::to_string).collect();
        assert_eq!(
            names,
            ["skiff", "skiff-on-etcd", "skiff-on-etcd3", "etcd", "etcd3"]
        );
        for bad in ["etcd2", "etcd9", "skiff-on-etcdx", "kine"] {
            assert!(bad.parse::<System>().is_err(), "{bad}");
        }
        assert_eq!(
            System::SkiffOnEtcd(3).reference(&systems),
            Some(System::Etcd(3))
        );
        assert_eq!(System::Skiff.reference(&systems), Some(System::Etcd(1)));
        assert_eq!(System::SkiffOnEtcd(3).reference(&[System::Etcd(1)]), None);
        assert_eq!(System::Etcd(3).reference(&systems), None);
        // Failover has a table of its own, of the systems that ran it.
        let failover = Stats {
            ops: 3,
            p50: Duration::from_millis(1200),
            p99: Duration::from_millis(1900),
            errors: 7,
            ..Stats::default()
        };
        let rows = [Row {
            workload: "failover",
            clients: 1,
            stats: vec![
                Stats::default(),
                Stats::default(),
                failover,
                Stats::default(),
                Stats::default(),
            ],
        }];
        let text = table(&systems, &rows);
        assert!(
            text.contains("| skiff-on-etcd3 | 3 | 1200.00 | 1900.00 | 7 |"),
            "{text}"
        );
        assert!(!text.contains("| etcd3 | 0"), "{text}");
        assert!(
            text.contains("| skiff / etcd | skiff-on-etcd / etcd | skiff-on-etcd3 / etcd3 |"),
            "{text}"
        );
    }
}

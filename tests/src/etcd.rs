//! A throwaway etcd member (or a cluster of several: [`EtcdCluster`]) for end-to-end tests: Debian's `etcd-server` (`/usr/bin/etcd`, 3.4)
//! on free loopback ports and a temporary data dir, killed (and its dir removed) on drop, so a
//! failing test leaves nothing running. Its keys are read and written through etcd's JSON
//! gateway (`/v3/kv/*`), so tests need no etcd client of their own.
//!
//! Without etcd installed the tests that need it fail (CI installs it); `SKIFF_SKIP_ETCD=1`
//! makes [`Etcd::start`] return `None` with a message instead, as the store's etcd tests do.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::free_port;

/// Where Debian's `etcd-server` installs etcd.
pub const ETCD: &str = "/usr/bin/etcd";

/// One etcd member on loopback.
pub struct Etcd {
    dir: tempfile::TempDir,
    name: String,
    client_port: u16,
    peer_port: u16,
    /// `--initial-cluster` of a member of several; `None` for a cluster of one.
    initial_cluster: Option<String>,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Etcd {
    /// Picks the ports and the data dir of a member without starting it (see [`Etcd::spawn`]),
    /// or `None` when etcd is missing and `SKIFF_SKIP_ETCD=1`. `extra` are more etcd flags
    /// (`--max-request-bytes=..`).
    pub fn new(extra: &[&str]) -> Option<Etcd> {
        if !Path::new(ETCD).exists() {
            if std::env::var("SKIFF_SKIP_ETCD").as_deref() == Ok("1") {
                eprintln!("SKIPPED: {ETCD} is not installed and SKIFF_SKIP_ETCD=1");
                return None;
            }
            panic!(
                "{ETCD} is not installed (apt-get install etcd-server); set SKIFF_SKIP_ETCD=1 to skip the etcd tests"
            );
        }
        Some(Etcd {
            dir: tempfile::tempdir().expect("etcd temp dir"),
            name: "skiff-e2e".to_string(),
            client_port: free_port(),
            peer_port: free_port(),
            initial_cluster: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        })
    }

    /// Starts a member with etcd's defaults plus the progress-notification interval a watch
    /// cache wants, and waits until it serves.
    pub fn start(extra: &[&str]) -> Option<Etcd> {
        let mut etcd = Etcd::new(extra)?;
        etcd.spawn();
        Some(etcd)
    }

    /// The client URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// etcd's own log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Starts the member (on the same data dir and ports if it ran before) and waits until it
    /// answers a quorum read.
    pub fn spawn(&mut self) {
        self.launch();
        self.wait_ready();
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// Starts the member without waiting for it.
    fn launch(&mut self) {
        let client = self.endpoint();
        let peer = self.peer_url();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("etcd log");
        let initial_cluster = self
            .initial_cluster
            .clone()
            .unwrap_or_else(|| format!("{}={peer}", self.name));
        let child = Command::new(ETCD)
            .arg(format!("--name={}", self.name))
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg("--experimental-watch-progress-notify-interval=1s")
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("starting etcd");
        self.child = Some(child);
    }

    /// Waits until the member answers a quorum read.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.range(b"/", None, true).is_err() {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("etcd exited with {status}:\n{}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not serve within 30 s:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether this member is its cluster's leader now (`None`: it does not answer).
    pub fn is_leader(&self) -> Option<bool> {
        let status = self.call("/v3/maintenance/status", json!({})).ok()?;
        let id = status["header"]["member_id"].as_str()?.to_string();
        Some(status["leader"].as_str() == Some(id.as_str()))
    }

    /// Kills the member (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// What etcd has logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Writes a key.
    pub fn put(&self, key: &[u8], value: &[u8]) {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        self.gateway("put", json!({"key": b64(key), "value": b64(value)}))
            .expect("etcd put");
    }

    /// The keys under `prefix`, in order.
    pub fn keys(&self, prefix: &[u8]) -> Vec<Vec<u8>> {
        let range = self
            .range(prefix, Some(&prefix_end(prefix)), false)
            .expect("etcd range");
        range["kvs"]
            .as_array()
            .map(|kvs| {
                kvs.iter()
                    .map(|kv| decode(kv["key"].as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The value of one key, if it exists.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let range = self.range(key, None, false).expect("etcd range");
        range["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .map(|kv| decode(kv["value"].as_str().unwrap_or_default()))
    }

    fn range(&self, key: &[u8], end: Option<&[u8]>, keys_only: bool) -> Result<Value, String> {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut body = json!({"key": b64(key), "keys_only": keys_only});
        if let Some(end) = end {
            body["range_end"] = json!(b64(end));
        }
        self.gateway("range", body)
    }

    /// One call to etcd's JSON gateway, `POST /v3/kv/<what>`.
    fn gateway(&self, what: &str, body: Value) -> Result<Value, String> {
        self.call(&format!("/v3/kv/{what}"), body)
    }

    /// `POST <path>` to etcd's JSON gateway.
    fn call(&self, path: &str, body: Value) -> Result<Value, String> {
        let url = format!("{}{path}", self.endpoint());
        // reqwest builds its TLS config even for plain HTTP.
        crate::install_crypto();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let response = reqwest::Client::new()
                .post(&url)
                .timeout(Duration::from_secs(5))
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let value: Value = response.json().await.map_err(|e| e.to_string())?;
            if status.is_success() {
                Ok(value)
            } else {
                Err(format!("{status}: {value}"))
            }
        })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- etcd log (last 4 KiB) ----\n{}",
                tail(&self.log_text(), 4096)
            );
        }
        self.kill();
    }
}

fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn decode(b64: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("etcd gateway base64")
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A cluster of several etcd members on loopback, each as [`Etcd`].
pub struct EtcdCluster {
    /// The members, in the order of [`EtcdCluster::endpoints`].
    pub members: Vec<Etcd>,
}

impl EtcdCluster {
    /// Starts `size` members as one cluster and waits until each serves, or `None` as
    /// [`Etcd::new`].
    pub fn start(size: usize) -> Option<EtcdCluster> {
        let mut members = Vec::new();
        for i in 0..size {
            let mut member = Etcd::new(&[])?;
            member.name = format!("skiff-e2e-{i}");
            members.push(member);
        }
        let initial = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        for member in &mut members {
            member.initial_cluster = Some(initial.clone());
            member.launch();
        }
        for member in &mut members {
            member.wait_ready();
        }
        Some(EtcdCluster { members })
    }

    /// Every member's client URL, comma-separated (`--datastore-endpoint`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(Etcd::endpoint)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the member that leads now, once one does (within 30 s).
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(i) = self
                .members
                .iter()
                .position(|m| m.child.is_some() && m.is_leader() == Some(true))
            {
                return i;
            }
            assert!(Instant::now() < deadline, "no etcd member leads");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

//! The etcd backend: a throwaway etcd 3.4 per test (`/usr/bin/etcd`, loopback ports, temp data
//! dir), the contract tests the two backends share, and what only etcd has: prefixes sharing one
//! etcd, a watch resumed across an etcd restart, etcd's compaction, an unreachable etcd.
//!
//! Without `etcd` installed these tests fail (CI installs it); `SKIFF_SKIP_ETCD=1` skips them
//! with a message instead.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use skiff_store::*;

const ETCD: &str = "/usr/bin/etcd";

/// One etcd member on loopback; killed when dropped.
pub struct EtcdServer {
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    /// More flags, after the defaults here (etcd takes the last of a repeated flag).
    extra: Vec<String>,
    child: Option<Child>,
}

/// A loopback port for etcd, taken below the kernel's ephemeral range (32768 and up), where
/// `bind(0)` and outgoing connections get theirs: a port from `bind(0)` could be handed to
/// another test's client connection before etcd binds it.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % 4_000) as u16;
    (0..8_000)
        .map(|_| 22_000 + (start + NEXT.fetch_add(1, Ordering::SeqCst)) % 8_000)
        .find(|port| TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free loopback port below the ephemeral range")
}

impl EtcdServer {
    /// Starts etcd, or returns `None` (with a message) when `SKIFF_SKIP_ETCD=1` is set and etcd
    /// is missing. Without the variable a missing etcd fails the test.
    pub fn start() -> Option<EtcdServer> {
        EtcdServer::start_with(&[])
    }

    /// [`EtcdServer::start`] with more etcd flags (`--max-txn-ops=128`).
    pub fn start_with(extra: &[&str]) -> Option<EtcdServer> {
        if !std::path::Path::new(ETCD).exists() {
            if std::env::var("SKIFF_SKIP_ETCD").as_deref() == Ok("1") {
                eprintln!("SKIPPED: {ETCD} is not installed and SKIFF_SKIP_ETCD=1");
                return None;
            }
            panic!(
                "{ETCD} is not installed (apt-get install etcd-server); set SKIFF_SKIP_ETCD=1 to skip the etcd tests"
            );
        }
        let mut server = EtcdServer {
            dir: tempfile::tempdir().unwrap(),
            client_port: free_port(),
            peer_port: free_port(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        server.spawn();
        Some(server)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    fn spawn(&mut self) {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(ETCD)
            .arg("--name=skiff-test")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=skiff-test={peer}"))
            .arg("--max-request-bytes=5242880")
            .arg("--max-txn-ops=1024")
            .arg("--experimental-watch-progress-notify-interval=100ms")
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
        self.wait_healthy();
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = format!("127.0.0.1:{}", self.client_port);
        loop {
            if std::net::TcpStream::connect(&addr).is_ok() {
                // Listening; the first request waits for the member to become leader.
                return;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
                panic!("etcd did not start; its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills etcd (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data dir and ports.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

static PREFIXES: AtomicUsize = AtomicUsize::new(0);

/// A prefix no other test on this etcd uses.
pub fn fresh_prefix() -> Vec<u8> {
    format!("/t{}/", PREFIXES.fetch_add(1, Ordering::Relaxed)).into_bytes()
}

pub fn config(server: &EtcdServer, prefix: Vec<u8>) -> etcd::Config {
    let mut config = etcd::Config::new(vec![server.endpoint()]);
    config.prefix = prefix;
    config.request_timeout = Duration::from_secs(5);
    config
}

/// Connects with a fresh prefix and compacts to the current revision, so that the store looks
/// like a new one whose revisions start after `base`.
pub async fn fresh_store(server: &EtcdServer) -> (EtcdStore, u64) {
    let store = EtcdStore::connect(config(server, fresh_prefix()))
        .await
        .expect("connect to etcd");
    let base = store.status().revision.0;
    store
        .compact(Revision(base))
        .await
        .expect("compact to base");
    assert_eq!(store.status().compacted, Revision(base));
    (store, base)
}

async fn put(store: &dyn Store, key: &str, value: &str) -> Revision {
    store
        .put(key.into(), value.into(), None)
        .await
        .expect("put")
        .0
}

/// Collects watch responses until one at `until` (inclusive) arrives.
async fn collect_until(stream: &mut WatchStream, until: u64) -> Vec<WatchResponse> {
    let mut out = Vec::new();
    loop {
        let resp = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("watch stalled")
            .expect("watch ended")
            .expect("watch error");
        let rev = resp.revision.0;
        if !resp.is_progress() {
            out.push(resp);
        }
        if rev >= until {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_contract_basics() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (store, base) = fresh_store(&server).await;
    crate::contract::revisions_versions_and_tombstones(&store, base).await;
    let (store, base) = fresh_store(&server).await;
    crate::contract::ranges_with_limits_continuation_count_and_intervals(&store, base).await;
    let (store, base) = fresh_store(&server).await;
    crate::contract::transactions_compare_and_branch(&store, base).await;
    let (store, base) = fresh_store(&server).await;
    crate::contract::compaction_makes_old_revisions_unreadable(&store, base).await;
    let (store, base) = fresh_store(&server).await;
    crate::contract::commit_times_map_back_to_revisions(&store, base).await;
    let (store, base) = fresh_store(&server).await;
    crate::contract::tags_are_kept_with_their_revisions(&store, base).await;
    store.close().await.unwrap();
    assert!(matches!(
        store.put(b"x".to_vec(), b"y".to_vec(), None).await,
        Err(Error::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_replays_then_goes_live_and_reports_progress() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (store, base) = fresh_store(&server).await;
    let store = std::sync::Arc::new(store);
    crate::contract::watch_replays_history_then_goes_live(store.clone(), base).await;
    let (store, base) = fresh_store(&server).await;
    crate::contract::progress_notifications_carry_the_current_revision(&store, base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prefixes_on_one_etcd_do_not_see_each_other() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let a = EtcdStore::connect(config(&server, b"/skiff/a/".to_vec()))
        .await
        .unwrap();
    let b = EtcdStore::connect(config(&server, b"/skiff/b/".to_vec()))
        .await
        .unwrap();
    let mut watch_b = b
        .watch(WatchRequest::new(KeyRange::prefix(""), None))
        .await
        .unwrap();
    put(&a, "/registry/pods/x", "a").await;
    put(&a, "/registry/pods/y", "a").await;
    let rb = put(&b, "/registry/pods/x", "b").await;
    // Each sees its own keys only, in reads, counts and deletes.
    let mut all = RangeRequest::new(KeyRange::prefix(""));
    all.count = true;
    let ra = a.range(all.clone()).await.unwrap();
    assert_eq!(ra.count, Some(2));
    assert!(ra.kvs.iter().all(|kv| kv.value == b"a"));
    let rbs = b.range(all.clone()).await.unwrap();
    assert_eq!(rbs.count, Some(1));
    assert_eq!(rbs.kvs[0].key, b"/registry/pods/x");
    let (_, deleted) = b.delete(KeyRange::prefix("")).await.unwrap();
    assert_eq!(deleted.len(), 1);
    assert_eq!(a.range(all).await.unwrap().count, Some(2));
    // b's watch sees b's put and delete, nothing of a's, and no reserved key.
    let got = collect_until(&mut watch_b, b.status().revision.0).await;
    let seen: Vec<(u64, Vec<u8>)> = got
        .iter()
        .flat_map(|r| r.events.iter().map(|e| (r.revision.0, e.kv.key.clone())))
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0], (rb.0, b"/registry/pods/x".to_vec()));
    // The log of a: its two writes only.
    let log = a.log(Revision(1), None, 100).await.unwrap();
    assert_eq!(log.len(), 2);
    assert!(
        log.iter()
            .all(|e| e.events.iter().all(|ev| ev.kv.value == b"a"))
    );
    // Reserved keys are refused.
    assert!(matches!(
        a.put(b"\0skiff/clock".to_vec(), b"x".to_vec(), None).await,
        Err(Error::ReservedKey(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_compaction_is_compacted_for_reads_watches_and_log() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (store, base) = fresh_store(&server).await;
    let r = |n: u64| Revision(base + n);
    for i in 1..=6 {
        put(&store, "k", &i.to_string()).await;
    }
    store.compact(r(4)).await.unwrap();
    assert_eq!(store.status().compacted, r(4));
    let at3 = store
        .range(RangeRequest::new(KeyRange::key("k")).at(r(3)))
        .await;
    assert!(
        matches!(at3, Err(Error::Compacted { requested, compacted, .. }) if requested == r(3) && compacted == r(4)),
        "{at3:?}"
    );
    let at4 = store
        .range(RangeRequest::new(KeyRange::key("k")).at(r(4)))
        .await
        .unwrap();
    assert_eq!(at4.kvs[0].value, b"4");
    assert!(matches!(
        store
            .watch(WatchRequest::new(KeyRange::prefix(""), Some(r(3))))
            .await,
        Err(Error::Compacted { .. })
    ));
    // Watching from the compacted revision sees its event with the previous value.
    let mut req = WatchRequest::new(KeyRange::prefix(""), Some(r(4)));
    req.prev_kv = true;
    let mut w = store.watch(req).await.unwrap();
    let got = collect_until(&mut w, r(6).0).await;
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].events[0].prev_kv.as_ref().unwrap().value, b"3");
    assert!(matches!(
        store.log(r(2), None, 10).await,
        Err(Error::Compacted { .. })
    ));
    // A compaction by another client of the same etcd is found out, not assumed away.
    let other = EtcdStore::connect(config(&server, fresh_prefix()))
        .await
        .unwrap();
    other.compact(r(6)).await.unwrap();
    // (etcd now keeps the state at r(5), which is complete, so that read is still served.)
    let at4 = store
        .range(RangeRequest::new(KeyRange::key("k")).at(r(4)))
        .await;
    assert!(
        matches!(at4, Err(Error::Compacted { compacted, .. }) if compacted == r(6)),
        "{at4:?}"
    );
    assert_eq!(store.status().compacted, r(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_across_an_etcd_restart_without_gap_or_duplicate() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let (store, base) = fresh_store(&server).await;
    let store = std::sync::Arc::new(store);
    for i in 0..10 {
        put(&*store, &format!("w/{}", i % 3), &i.to_string()).await;
    }
    let mut req = WatchRequest::new(KeyRange::prefix("w/"), Some(Revision(base + 1)));
    req.prev_kv = true;
    let mut stream = store.watch(req).await.unwrap();
    let mut got = collect_until(&mut stream, base + 10).await;
    // Kill etcd under the live watch, write nothing while it is down, restart on the same data.
    server.kill();
    // Regression: a write on the connection etcd's death broke came back as a gRPC Cancelled
    // or Unknown status wrapping the transport error, mapped to Error::Etcd, not Unavailable.
    let down = store.put(b"w/x".to_vec(), b"lost".to_vec(), None).await;
    assert!(
        matches!(down, Err(Error::Unavailable { .. } | Error::Timeout { .. })),
        "{down:?}"
    );
    server.restart();
    let mut last = 0;
    for i in 10..20 {
        last = loop {
            // The first writes after the restart may meet a member not yet leader.
            match store
                .put(format!("w/{}", i % 3).into(), i.to_string().into(), None)
                .await
            {
                Ok((r, _)) => break r.0,
                Err(Error::Unavailable { .. } | Error::Timeout { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("{e}"),
            }
        };
    }
    got.extend(collect_until(&mut stream, last).await);
    let revs: Vec<u64> = got.iter().map(|r| r.revision.0).collect();
    let expected: Vec<u64> = (base + 1..=last).collect();
    assert_eq!(revs, expected, "every revision once, in order");
    for pair in got.windows(2) {
        let e = &pair[1].events[0];
        if let Some(prev) = &e.prev_kv
            && e.kv.key == prev.key
        {
            assert!(prev.mod_revision < e.kv.mod_revision);
        }
    }
    let values: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8_lossy(&r.events[0].kv.value).into_owned())
        .collect();
    assert_eq!(
        values,
        (0..20).map(|i| i.to_string()).collect::<Vec<_>>(),
        "the write made while etcd was down is absent, nothing else"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_is_a_clear_error_and_big_requests_are_too_large() {
    let port = free_port();
    let mut config = etcd::Config::new(vec![format!("http://127.0.0.1:{port}")]);
    config.connect_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = EtcdStore::connect(config)
        .await
        .err()
        .expect("no etcd there");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let mut config = self::config(&server, fresh_prefix());
    config.max_request_bytes = 1 << 20;
    let store = EtcdStore::connect(config).await.unwrap();
    let err = store
        .put(b"big".to_vec(), vec![0; 2 << 20], None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ValueTooLarge { limit, .. } if limit == 1 << 20),
        "{err}"
    );
    // Over etcd's own limit (5 MiB here) though under ours: etcd refuses, mapped the same way.
    let mut config = self::config(&server, fresh_prefix());
    config.max_request_bytes = 64 << 20;
    let store = EtcdStore::connect(config).await.unwrap();
    let err = store
        .put(b"bigger".to_vec(), vec![0; 6 << 20], None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ValueTooLarge { .. }), "{err}");
    assert_eq!(
        store
            .range(RangeRequest::new(KeyRange::key("bigger")))
            .await
            .unwrap()
            .kvs,
        vec![]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leases_delete_their_keys_on_revoke() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (store, _) = fresh_store(&server).await;
    let lease = store.lease_grant(Duration::from_secs(30)).await.unwrap();
    assert_eq!(lease.ttl, Duration::from_secs(30));
    assert_eq!(store.leases(), vec![(lease.id, Duration::from_secs(30))]);
    store
        .put(b"ev/1".to_vec(), b"x".to_vec(), Some(lease.id))
        .await
        .unwrap();
    let kept = store.lease_keep_alive(lease.id).await.unwrap();
    assert!(kept.remaining > Duration::from_secs(25));
    let rev = store.lease_revoke(lease.id).await.unwrap();
    assert!(
        store
            .range(RangeRequest::new(KeyRange::prefix("ev/")))
            .await
            .unwrap()
            .kvs
            .is_empty()
    );
    // The revoke's delete is in the log at its revision (a revision etcd wrote: no clock of
    // its own, so the replay ends on a fence), and in the key's history.
    let log = store.log(rev, None, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].revision, rev);
    assert_eq!(log[0].events[0].kind, EventKind::Delete);
    let history = store.history(b"ev/1").await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].1.kind, EventKind::Delete);
    assert!(matches!(
        store.lease_revoke(lease.id).await,
        Err(Error::LeaseNotFound(_))
    ));
    assert!(matches!(
        store
            .put(b"ev/2".to_vec(), b"x".to_vec(), Some(lease.id))
            .await,
        Err(Error::LeaseNotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_snapshot_writes_an_etcd_backend_file() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (store, _) = fresh_store(&server).await;
    let r = put(&store, "a", "1").await;
    let path = server.dir.path().join("snap.db");
    let at = store.snapshot(&path).await.unwrap();
    assert!(at >= r);
    // bbolt files start with a meta page; the size is a whole number of 4 KiB pages.
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len >= 4096, "{len}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_prefix_is_refused_before_anything_is_written() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let raw = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let count = |prefix: &'static str| {
        let mut kv = raw.kv_client();
        async move {
            kv.get(
                prefix,
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap()
            .count()
        }
    };
    // Another application's keys under the prefix, no marker: refused, and nothing written.
    raw.kv_client().put("/app/config", "x", None).await.unwrap();
    let err = EtcdStore::connect(config(&server, b"/app".to_vec()))
        .await
        .err()
        .expect("a foreign prefix");
    assert!(matches!(err, Error::ForeignPrefix { .. }), "{err}");
    assert!(err.to_string().contains("/app/config"), "{err}");
    assert_eq!(count("/app").await, 1);
    // A first connect claims an empty prefix; a later one finds its marker and its keys.
    let own = EtcdStore::connect(config(&server, b"/sk".to_vec()))
        .await
        .unwrap();
    put(&own, "/registry/x", "1").await;
    own.close().await.unwrap();
    let again = EtcdStore::connect(config(&server, b"/sk".to_vec()))
        .await
        .unwrap();
    let got = again
        .range(RangeRequest::new(KeyRange::key("/registry/x")))
        .await
        .unwrap();
    assert_eq!(got.kvs[0].value, b"1");
    // The marker is reserved: not in ranges, counts or the log.
    let mut all = RangeRequest::new(KeyRange::prefix(""));
    all.count = true;
    assert_eq!(again.range(all).await.unwrap().count, Some(1));
    let log = again.log(Revision(1), None, 100).await.unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    // A prefix that is a prefix of a skiff store's spans its keys: refused too.
    let err = EtcdStore::connect(config(&server, b"/s".to_vec()))
        .await
        .err()
        .expect("a sibling prefix");
    assert!(matches!(err, Error::ForeignPrefix { .. }), "{err}");
    // A marker that is not skiff's.
    raw.kv_client()
        .put(b"/other\0marker".to_vec(), "someone-else/7", None)
        .await
        .unwrap();
    let err = EtcdStore::connect(config(&server, b"/other".to_vec()))
        .await
        .err()
        .expect("another marker");
    assert!(err.to_string().contains("someone-else/7"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_etcd_going_away_and_coming_back() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let mut config = config(&server, fresh_prefix());
    config.health_interval = Duration::from_millis(200);
    let store = EtcdStore::connect(config).await.unwrap();
    assert_eq!(store.ready(), Ok(()));
    server.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.ready().is_ok() {
        assert!(Instant::now() < deadline, "still ready with etcd gone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let why = store.ready().unwrap_err();
    assert!(why.contains("etcd"), "{why}");
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.ready().is_err() {
        assert!(Instant::now() < deadline, "not ready again with etcd back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.close().await.unwrap();
    assert!(store.ready().is_err());
}

/// A member that died leaves its endpoint in the client's list: the requests the client's
/// balancer gives it fail to connect. None of them may cost a write (each is sent to another
/// member), and the store stays ready; once the endpoint accepts again it is used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_among_live_ones_fails_no_request() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    // Nothing listens on the second endpoint, as on a killed member's.
    let dead_port = free_port();
    let mut config = config(&server, fresh_prefix());
    config
        .endpoints
        .push(format!("http://127.0.0.1:{dead_port}"));
    config.health_interval = Duration::from_millis(200);
    let store = EtcdStore::connect(config).await.expect("connect");
    // Straight away, before the endpoint check has run: every write still lands.
    for i in 0..40 {
        put(&store, &format!("/early/{i}"), "v").await;
    }
    let lease = store
        .lease_grant(Duration::from_secs(30))
        .await
        .expect("grant");
    store.lease_revoke(lease.id).await.expect("revoke");
    // And after it, with readiness checked all along.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        put(&store, "/later", "v").await;
        assert_eq!(store.ready(), Ok(()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let range = store
        .range(RangeRequest::new(KeyRange::prefix(b"/early/".to_vec())))
        .await
        .unwrap();
    assert_eq!(range.kvs.len(), 40);
    // The endpoint accepting again (something listens there) is no trouble either.
    let _listener = TcpListener::bind(("127.0.0.1", dead_port)).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    store.close().await.unwrap();
}

/// Under concurrent writes, each write answers with its own revision (the one its key's
/// version carries), not a later one another answer made known first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_each_answer_their_own_revision() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (store, _) = fresh_store(&server).await;
    let store = std::sync::Arc::new(store);
    let writes: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = format!("/concurrent/{i}");
                let revision = put(store.as_ref(), &key, "v").await;
                (key, revision)
            })
        })
        .collect();
    for write in writes {
        let (key, revision) = write.await.unwrap();
        let read = store
            .range(RangeRequest::new(KeyRange::key(key.as_bytes().to_vec())))
            .await
            .unwrap();
        assert_eq!(read.kvs[0].mod_revision, revision, "{key}");
    }
    store.close().await.unwrap();
}

/// A read bigger than gRPC's default message limit (4 MiB) comes back whole, as a plain range
/// and as a range inside a txn: a list of 10,000 1 KiB ConfigMaps is about 12 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_over_four_mebibytes_comes_back_whole() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (store, _) = fresh_store(&server).await;
    let value = vec![b'x'; 1 << 20];
    for i in 0..6 {
        store
            .put(format!("/big/{i}").into_bytes(), value.clone(), None)
            .await
            .expect("put 1 MiB");
    }
    let read = store
        .range(RangeRequest::new(KeyRange::prefix(b"/big/".to_vec())))
        .await
        .expect("a 6 MiB range");
    assert_eq!(read.kvs.len(), 6);
    assert!(read.kvs.iter().all(|kv| kv.value == value));
    let txn = store
        .txn(Txn {
            compare: vec![],
            success: vec![Op::Range(RangeRequest::new(KeyRange::prefix(
                b"/big/".to_vec(),
            )))],
            failure: vec![],
            tag: None,
        })
        .await
        .expect("a txn reading 6 MiB");
    match &txn.responses[0] {
        OpResponse::Range(r) => assert_eq!(r.kvs.len(), 6),
        other => panic!("{other:?}"),
    }
    store.close().await.unwrap();
}

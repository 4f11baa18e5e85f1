//! [`EtcdStore`]: the [`Store`] contract over an external etcd v3 cluster (checked against etcd
//! 3.4.23 with `etcd-client` 0.21).
//!
//! # Mapping
//! - **Keys** keep today's layout under a configured prefix `P` (see `keys`): two skiff clusters
//!   can share one etcd with prefixes that are not prefixes of each other (`/skiff/a/`,
//!   `/skiff/b/`). Keys `P \x00 ..` are reserved for the store and never show in ranges,
//!   counts, deletes or watches.
//! - **Ownership.** The first connect to a prefix writes the reserved marker `P \x00 marker`
//!   (`skiff-etcd/1`), and only if the whole prefix is empty; a later connect finds it. A prefix
//!   holding keys but no marker (another application's, or a sibling prefix: `/skiff` spans
//!   `/skiff2/..` too) or another marker is refused with [`Error::ForeignPrefix`], before
//!   anything is written.
//! - **Revisions** are etcd's: a key's mod revision is the revision of the write that made it,
//!   and a transaction is one etcd txn (compares on value, version, create and mod revision).
//!   With a shared etcd the revisions one prefix sees have gaps (the other prefix's writes):
//!   revisions stay increasing and unique but are no longer contiguous. etcd's first revision
//!   is 1 (the empty store), so the first write here is revision 2.
//! - **Compaction.** `compact(r)` keeps revision `r` whole (every event at `r` with its
//!   previous value), so it asks etcd to compact at `r - 1`, whose state etcd keeps. The store's
//!   compacted revision is therefore etcd's compact revision + 1 (1 on a never-compacted etcd),
//!   and reads below it are refused here even where etcd could still answer. A compaction by
//!   someone else (another cluster on the same etcd, etcd's `--auto-compaction`) is learnt from
//!   etcd's compacted errors and the background watch, never assumed.
//! - **Leases** are etcd leases (TTL in whole seconds, at least etcd's minimum); keys are
//!   attached on put; expiry and revoke delete them in one etcd revision.
//!
//! # What etcd does not keep, added on top
//! **Commit times.** Every transaction that writes also puts the reserved key
//! `P \x00 skiff/clock` with the writer's wall-clock time (8 bytes, nanoseconds since the epoch,
//! strictly increasing per store handle), in the same etcd txn, so the time shares the
//! revision. For a transaction made only of deletes, which may delete nothing (and must then
//! write nothing), the clock put sits in nested txns whose guards ask whether each delete's
//! range is non-empty; etcd evaluates every nested guard against the state before the txn, so
//! the clock is written exactly when something is deleted. The time of revision `r` is the
//! clock's value read *at* `r`. The transaction's [`Txn::tag`] follows the 8 bytes of time in
//! the same value (a value of 8 bytes, as written before tags existed, is no tag); the tag of
//! `r` is the one read at `r` when the clock's mod revision is `r`. Cost: one extra small put
//! per write (about 30 bytes of key and 8 of value plus the tag in etcd's history until
//! compaction, and one of etcd's `--max-txn-ops`), no extra
//! round trip. `revision_at(t)` binary-searches the clock's versions (about log2 of the retained
//! revisions in reads). Revisions etcd writes itself (lease expiry and revoke) carry no clock:
//! they get the time of the newest clocked revision before them, a lower bound. Times from
//! several writers are as good as their clocks; `revision_at` assumes they increase with the
//! revision.
//!
//! **History and the log** are read back through etcd watches from a past revision: `log`
//! watches the whole prefix *including* the clock key, `history` one key. A replay must know
//! when it has everything: it ends once the watch has proved (see `watch`) that it has seen
//! up to the target revision. A proof needs a response, and a response needs an event; for the
//! log the clock key guarantees one at every skiff write, and when the only revisions left are
//! etcd's own (lease expiry), the replay writes one clock-only revision (a *fence*), which
//! consumers see as a revision with nothing in their range, as they see another prefix's
//! writes. `history` of a key that exists ends at its mod revision; of a key that does not,
//! it filters the log replay (cost: the retained log of the prefix).
//!
//! **Retention.** etcd compacts globally and keeps no per-prefix watermarks. The store's
//! [`Retention`](crate::Retention) (newest `max_revisions`, `max_age`) is applied by a task
//! that compacts etcd, which compacts every prefix sharing the etcd: with a shared etcd the most
//! aggressive retention wins, so run it from one cluster (or use etcd's own auto-compaction and
//! none here). Per-prefix retention ([`PrefixRetention`](crate::PrefixRetention)) cannot be
//! expressed on etcd and is not offered: such keys keep every version until the global
//! compaction (more history than asked, never less), and [`Store::watermarks`] is empty: no
//! read is refused for a prefix.
//!
//! **Migration** from and to the embedded log goes through archives: see `import` for how
//! revisions and times map ([`Importer`], [`Mapping`]).
//!
//! **Snapshots** use etcd's snapshot API: the file is an etcd backend snapshot of the whole
//! etcd (every prefix), restorable with `etcdctl snapshot restore`, not a skiff data dir.
//!
//! # Watches
//! A store watch is one etcd watch on the mapped range, driven by a task that regroups events
//! per revision and keeps a cursor of how far it has seen. A lost connection is retried from
//! the cursor's next revision, so nothing is skipped or repeated; a watch etcd cancels for
//! compaction ends with [`Error::Compacted`]. Progress notifications are etcd's periodic ones
//! (server flag `--experimental-watch-progress-notify-interval`, 10 min by default: set it to a
//! few seconds as for kube-apiserver); `progress_notify`'s duration cannot be honoured more
//! often than that.
//!
//! # Errors
//! An etcd that cannot be reached at connect is [`Error::Unavailable`]; no leader or lost
//! connections are [`Error::Unavailable`], a request without an answer in time is
//! [`Error::Timeout`] (both say whether a write may have committed; writes are never retried,
//! reads are retried until the request timeout). A request over etcd's `--max-request-bytes` is
//! [`Error::ValueTooLarge`].
//!
//! [`Store::ready`] answers from a background check: a linearizable read (which needs a quorum)
//! every [`Config::health_interval`]; a failed or slow one makes the store not ready until one
//! succeeds again, each change logged once.

mod import;
mod keys;
mod watch;

pub use import::{ImportCheck, Importer, MAX_OPS, Mapping};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client as ec;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};
use crate::types::*;
use crate::{Retention, Store, WatchStream};
use keys::{EtcdRange, Layout, decode_tag, decode_time, encode_clock};
use watch::Cursor;

/// TLS files for an `https://` endpoint (PEM).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// The CA that signs etcd's serving certificate; `None` uses the built-in roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate, for etcd's `--client-cert-auth`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key.
    pub key_file: Option<PathBuf>,
}

/// How to reach etcd and what part of it is ours.
#[derive(Debug, Clone)]
pub struct Config {
    /// Client URLs, `http://127.0.0.1:2379` or `https://..` (then [`Config::tls`]).
    pub endpoints: Vec<String>,
    /// TLS files for `https` endpoints.
    pub tls: Option<Tls>,
    /// Every key lives under this prefix. Default `/skiff`.
    pub prefix: Vec<u8>,
    /// How long to wait for a connection. Default 5 s.
    pub connect_timeout: Duration,
    /// How long one request may take, reads' retries included. Default 10 s.
    pub request_timeout: Duration,
    /// How long a watch keeps retrying a lost connection before it ends with
    /// [`Error::Unavailable`]. Default 60 s.
    pub watch_retry: Duration,
    /// etcd's `--max-request-bytes` (default 1.5 MiB): a write over it is refused here as
    /// [`Error::ValueTooLarge`] without a round trip.
    pub max_request_bytes: usize,
    /// Global retention, applied by compacting etcd (see the module docs). Default: none, as
    /// etcd is often compacted by its own `--auto-compaction`.
    pub retention: Retention,
    /// How often [`Store::ready`]'s quorum read runs; it gets twice this to answer. Default 1 s.
    pub health_interval: Duration,
}

impl Config {
    /// A config for `endpoints` with the defaults.
    pub fn new(endpoints: Vec<String>) -> Config {
        Config {
            endpoints,
            tls: None,
            prefix: b"/skiff".to_vec(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            watch_retry: Duration::from_secs(60),
            max_request_bytes: 1536 * 1024,
            retention: Retention {
                max_revisions: None,
                max_age: None,
                interval: Duration::from_secs(10),
            },
            health_interval: Duration::from_secs(1),
        }
    }
}

/// The store on an external etcd v3 cluster.
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: ec::Client,
    layout: Layout,
    config: Config,
    /// The newest revision seen (our own responses, the background watch): raised only.
    current: AtomicU64,
    /// The store's compacted revision (etcd's + 1): raised only.
    compacted: AtomicU64,
    /// etcd's database size, refreshed in the background.
    db_size: AtomicU64,
    /// Commit time of the compacted revision, if known.
    oldest_time: Mutex<Option<SystemTime>>,
    /// The last commit time handed out (nanoseconds), so that ours increase strictly.
    last_time: Mutex<u64>,
    /// Leases granted through this handle with their TTLs (for [`Store::leases`]).
    leases: Mutex<HashMap<LeaseId, Duration>>,
    /// Why the last health check failed; `None` while healthy (set by `health_loop` only).
    unready: Mutex<Option<String>>,
    closed: AtomicBool,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// What an etcd error means to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    TooLarge,
    LeaseNotFound,
    Duplicate,
    Compacted,
    Future,
    Unavailable,
    Timeout,
    Other,
}

fn classify(e: &ec::Error) -> Kind {
    match e {
        ec::Error::GRpcStatus(s) => {
            let m = s.message();
            if m.contains("request is too large") || m.contains("message larger than max") {
                Kind::TooLarge
            } else if m.contains("requested lease not found") {
                Kind::LeaseNotFound
            } else if m.contains("duplicate key given in txn request") {
                Kind::Duplicate
            } else if m.contains("required revision has been compacted") {
                Kind::Compacted
            } else if m.contains("required revision is a future revision") {
                Kind::Future
            } else if m.contains("request timed out") || s.code() as i32 == 4 {
                Kind::Timeout
            } else if s.code() as i32 == 14
                // A connection that broke under the request comes back as Cancelled or Unknown
                // with the transport error as its source.
                || std::error::Error::source(s).is_some()
                || s.code() as i32 == 1
                || m.contains("transport error")
                || m.contains("no leader")
                || m.contains("leader changed")
                || m.contains("not capable")
                || m.contains("stopped")
            {
                Kind::Unavailable
            } else {
                Kind::Other
            }
        }
        ec::Error::TransportError(_) | ec::Error::IoError(_) => Kind::Unavailable,
        _ => Kind::Other,
    }
}

/// Whether `e` proves the request never reached etcd: the connection to the member it was
/// sent to could not be made (a dead member's endpoint, which the client's balancer keeps
/// offering until [`Inner::endpoint_loop`] takes it out). Such a request, even a write, can be
/// sent again.
fn never_sent(e: &ec::Error) -> bool {
    let connect = |text: String| text.contains("connect error");
    match e {
        ec::Error::GRpcStatus(s) => {
            let mut source = std::error::Error::source(s);
            let mut found = connect(s.message().to_string());
            while let (false, Some(inner)) = (found, source) {
                found = connect(inner.to_string());
                source = inner.source();
            }
            found
        }
        ec::Error::TransportError(t) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(t);
            let mut found = false;
            while let (false, Some(inner)) = (found, source) {
                found = connect(format!("{inner:?}"));
                source = inner.source();
            }
            found
        }
        _ => false,
    }
}

/// The error for a failed request that is none of the expected outcomes.
fn failure(e: ec::Error, what: &str, write: bool) -> Error {
    let may = if write {
        " (the write may have committed)"
    } else {
        ""
    };
    match classify(&e) {
        Kind::Unavailable => Error::Unavailable {
            reason: format!("{what}: {e}{may}"),
            source: Some(Box::new(e)),
        },
        Kind::Timeout => Error::Timeout {
            what: format!("{what}: {e}{may}"),
            after: Duration::ZERO,
        },
        _ => Error::Etcd(e),
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u64::MAX as u128) as u64)
}

fn time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

fn rev(r: i64) -> u64 {
    r.max(0) as u64
}

impl EtcdStore {
    /// Connects to etcd and checks that it answers; an unreachable etcd is
    /// [`Error::Unavailable`] after [`Config::connect_timeout`].
    pub async fn connect(config: Config) -> Result<EtcdStore> {
        if config.endpoints.is_empty() {
            return Err(Error::InvalidConfig("no etcd endpoints".into()));
        }
        let mut options = ec::ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        if let Some(tls) = &config.tls {
            options = options.with_tls(tls_options(tls)?);
        }
        let endpoints = config.endpoints.join(",");
        let connect = ec::Client::connect(config.endpoints.clone(), Some(options));
        let client = match tokio::time::timeout(config.connect_timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return Err(Error::Unavailable {
                    reason: format!("cannot connect to etcd at {endpoints}: {e}"),
                    source: Some(Box::new(e)),
                });
            }
            Err(_) => {
                return Err(Error::Unavailable {
                    reason: format!("cannot connect to etcd at {endpoints} (timed out)"),
                    source: None,
                });
            }
        };
        let inner = Arc::new(Inner {
            client,
            layout: Layout::new(config.prefix.clone()),
            config,
            current: AtomicU64::new(0),
            compacted: AtomicU64::new(1),
            db_size: AtomicU64::new(0),
            oldest_time: Mutex::new(None),
            last_time: Mutex::new(0),
            leases: Mutex::new(HashMap::new()),
            unready: Mutex::new(None),
            closed: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        // One read proves etcd answers (within the connect timeout) and gives the revision.
        let probe = inner.get(
            ec::GetOptions::new().with_keys_only(),
            inner.layout.clock_key(),
        );
        match tokio::time::timeout(inner.config.connect_timeout, probe).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(Error::Unavailable {
                    reason: format!("etcd at {endpoints} does not answer: {e}"),
                    source: None,
                });
            }
            Err(_) => {
                return Err(Error::Unavailable {
                    reason: format!("etcd at {endpoints} does not answer (timed out)"),
                    source: None,
                });
            }
        }
        inner.claim_prefix().await?;
        inner.learn_compaction().await?;
        inner.refresh_oldest_time().await;
        let store = EtcdStore { inner };
        store.spawn_background();
        Ok(store)
    }

    fn spawn_background(&self) {
        let inner = self.inner.clone();
        self.inner
            .tasks
            .spawn(async move { inner.follow_revisions().await });
        let inner = self.inner.clone();
        self.inner
            .tasks
            .spawn(async move { inner.refresh_size_loop().await });
        let inner = self.inner.clone();
        self.inner
            .tasks
            .spawn(async move { inner.health_loop().await });
        if self.inner.config.endpoints.len() > 1 {
            let inner = self.inner.clone();
            self.inner
                .tasks
                .spawn(async move { inner.endpoint_loop().await });
        }
        let r = &self.inner.config.retention;
        if r.max_revisions.is_some() || r.max_age.is_some() {
            let inner = self.inner.clone();
            self.inner
                .tasks
                .spawn(async move { inner.retention_loop().await });
        }
    }
}

fn tls_options(tls: &Tls) -> Result<ec::TlsOptions> {
    let read = |p: &Path| {
        std::fs::read(p)
            .map_err(|e| Error::InvalidConfig(format!("cannot read {}: {e}", p.display())))
    };
    let mut options = ec::TlsOptions::new();
    if let Some(ca) = &tls.ca_file {
        options = options.ca_certificate(ec::Certificate::from_pem(read(ca)?));
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            options = options.identity(ec::Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => {
            return Err(Error::InvalidConfig(
                "a client certificate needs both a cert and a key file".into(),
            ));
        }
    }
    Ok(options)
}

/// The largest gRPC message the client sends or takes, as etcd's own Go client (`MaxInt32`):
/// tonic's default of 4 MiB would fail a list of a few thousand objects, which etcd answers in
/// one message. Requests stay bounded by [`Config::max_request_bytes`].
const MESSAGE_LIMIT: usize = i32::MAX as usize;

impl Inner {
    /// A KV client without tonic's 4 MiB message limit (see [`MESSAGE_LIMIT`]).
    fn kv_client(&self) -> ec::KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(MESSAGE_LIMIT)
            .max_encoding_message_size(MESSAGE_LIMIT)
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Notes the revision of a response's header in the current revision, and returns the
    /// header's own revision: for a write, its revision, which a concurrent response may
    /// already have passed (the current revision then is not this write's).
    fn saw(&self, header: Option<&ec::ResponseHeader>) -> u64 {
        let r = header.map_or(0, |h| rev(h.revision()));
        let before = self.current.fetch_max(r, Ordering::AcqRel);
        if r == 0 { before } else { r }
    }

    fn compacted(&self) -> u64 {
        self.compacted.load(Ordering::Acquire)
    }

    fn compacted_error(&self, requested: u64) -> Error {
        Error::Compacted {
            requested: Revision(requested),
            compacted: Revision(self.compacted()),
            prefix: None,
        }
    }

    /// A commit time for a write about to be sent: now, or just after the last one.
    fn next_time(&self) -> u64 {
        let mut last = self.last_time.lock().expect("clock lock poisoned");
        *last = nanos(SystemTime::now()).max(*last + 1);
        *last
    }

    /// Runs a read, retrying while etcd is unavailable, until the request timeout.
    async fn read<T, F, Fut>(&self, what: &str, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
    {
        let timeout = self.config.request_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut backoff = Duration::from_millis(50);
        loop {
            let e = match tokio::time::timeout_at(deadline, f()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(Error::Timeout {
                        what: what.to_string(),
                        after: timeout,
                    });
                }
            };
            if classify(&e) != Kind::Unavailable
                || tokio::time::Instant::now() + backoff >= deadline
                || self.cancel.is_cancelled()
            {
                return Err(e).map_err(|e| self.read_error(e, what));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Runs a write within the request timeout, sending it again only when the last attempt
    /// never reached etcd ([`never_sent`]): another member then gets it. A few attempts per
    /// endpoint at most, so that an etcd wholly down still fails at once.
    async fn send<T, F, Fut>(
        &self,
        mut f: F,
    ) -> std::result::Result<std::result::Result<T, ec::Error>, tokio::time::error::Elapsed>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        let attempts = 2 * self.config.endpoints.len() + 1;
        let mut attempt = 1;
        loop {
            let result = tokio::time::timeout_at(deadline, f()).await;
            match &result {
                Ok(Err(e)) if attempt < attempts && never_sent(e) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                _ => return result,
            }
        }
    }

    /// Keeps the client's balancer to the members that accept connections: every
    /// [`Config::health_interval`] each endpoint gets a TCP connect; one that refuses (or does
    /// not answer within the interval) is taken out of the balancer, and put back once it
    /// accepts again. The last endpoint in is never taken out. tonic's balancer otherwise keeps
    /// sending a share of the requests to a dead member, each failing to connect.
    async fn endpoint_loop(self: Arc<Self>) {
        let interval = self.config.health_interval;
        let endpoints = self.config.endpoints.clone();
        let mut out: Vec<bool> = vec![false; endpoints.len()];
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            let probes = endpoints.iter().map(|endpoint| async move {
                let Some(address) = keys::endpoint_address(endpoint) else {
                    return true;
                };
                matches!(
                    tokio::time::timeout(interval, tokio::net::TcpStream::connect(address)).await,
                    Ok(Ok(_))
                )
            });
            let up = futures::future::join_all(probes).await;
            for (i, endpoint) in endpoints.iter().enumerate() {
                let inside = out.iter().filter(|o| !**o).count();
                if !up[i] && !out[i] && inside > 1 {
                    match self.client.remove_endpoint(endpoint).await {
                        Ok(()) => {
                            tracing::warn!(%endpoint, "etcd member refuses connections: sending it nothing until it accepts again");
                            out[i] = true;
                        }
                        Err(error) => {
                            tracing::warn!(%endpoint, %error, "cannot take an etcd endpoint out")
                        }
                    }
                } else if up[i] && out[i] {
                    match self.client.add_endpoint(endpoint).await {
                        Ok(()) => {
                            tracing::info!(%endpoint, "etcd member accepts connections again");
                            out[i] = false;
                        }
                        Err(error) => {
                            tracing::warn!(%endpoint, %error, "cannot put an etcd endpoint back")
                        }
                    }
                }
            }
        }
    }

    fn read_error(&self, e: ec::Error, what: &str) -> Error {
        failure(e, what, false)
    }

    async fn get(&self, options: ec::GetOptions, key: Vec<u8>) -> Result<ec::GetResponse> {
        let r = self
            .read("range", || {
                let mut kv = self.kv_client();
                let key = key.clone();
                let options = options.clone();
                async move { kv.get(key, Some(options)).await }
            })
            .await?;
        self.saw(r.header());
        Ok(r)
    }

    /// A get at `revision` that maps etcd's compacted and future errors.
    async fn get_at(
        &self,
        options: ec::GetOptions,
        key: Vec<u8>,
        revision: u64,
    ) -> Result<ec::GetResponse> {
        let options = if revision > 0 {
            options.with_revision(revision as i64)
        } else {
            options
        };
        let key2 = key.clone();
        let result = self
            .read("range", || {
                let mut kv = self.kv_client();
                let key = key2.clone();
                let options = options.clone();
                async move { kv.get(key, Some(options)).await }
            })
            .await;
        match result {
            Ok(r) => {
                self.saw(r.header());
                Ok(r)
            }
            Err(Error::Etcd(e)) => match classify(&e) {
                Kind::Compacted => {
                    self.learn_compaction().await?;
                    Err(self.compacted_error(revision))
                }
                Kind::Future => {
                    let current = self.fresh_current().await?;
                    Err(Error::FutureRevision {
                        requested: Revision(revision),
                        current: Revision(current),
                    })
                }
                _ => Err(Error::Etcd(e)),
            },
            Err(e) => Err(e),
        }
    }

    /// The current revision, read from etcd.
    async fn fresh_current(&self) -> Result<u64> {
        let r = self
            .get(
                ec::GetOptions::new().with_count_only(),
                self.layout.clock_key(),
            )
            .await?;
        Ok(self.saw(r.header()))
    }

    /// The clock key's value at `revision` (the commit time of the newest skiff write at or
    /// before it), or `None` before the first one or where it is compacted away.
    async fn clock_at(&self, revision: u64) -> Result<Option<u64>> {
        Ok(self.commit_at(revision).await?.map(|(time, _)| time))
    }

    /// [`Inner::clock_at`] with the tag of the write at `revision` itself (none when the clock's
    /// newest version there is an earlier write's: `revision` is one etcd wrote itself).
    async fn commit_at(&self, revision: u64) -> Result<Option<(u64, Option<Vec<u8>>)>> {
        if revision == 0 {
            return Ok(None);
        }
        match self
            .get_at(ec::GetOptions::new(), self.layout.clock_key(), revision)
            .await
        {
            Ok(r) => Ok(r.kvs().first().map(|kv| {
                let tag = (rev(kv.mod_revision()) == revision)
                    .then(|| decode_tag(kv.value()))
                    .flatten();
                (decode_time(kv.value()), tag)
            })),
            Err(Error::Compacted { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Learns etcd's compact revision: a read at revision 1 fails once anything was compacted,
    /// and a watch from revision 1 is then cancelled naming the compact revision.
    async fn learn_compaction(&self) -> Result<()> {
        let key = self.layout.clock_key();
        let probe = self
            .read("compaction probe", || {
                let mut kv = self.kv_client();
                let key = key.clone();
                async move {
                    kv.get(
                        key,
                        Some(ec::GetOptions::new().with_revision(1).with_keys_only()),
                    )
                    .await
                }
            })
            .await;
        match probe {
            Ok(_) => return Ok(()),
            Err(Error::Etcd(e)) if classify(&e) == Kind::Compacted => {}
            Err(e) => return Err(e),
        }
        let mut watch = self.client.watch_client();
        let opened = tokio::time::timeout(
            self.config.request_timeout,
            watch.watch(
                self.layout.clock_key(),
                Some(ec::WatchOptions::new().with_start_revision(1)),
            ),
        )
        .await;
        let mut stream = match opened {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(failure(e, "compaction probe", false)),
            Err(_) => {
                return Err(Error::Timeout {
                    what: "compaction probe".into(),
                    after: self.config.request_timeout,
                });
            }
        };
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        loop {
            match tokio::time::timeout_at(deadline, stream.message()).await {
                Ok(Ok(Some(resp))) if resp.compact_revision() > 0 => {
                    self.raise_compacted(rev(resp.compact_revision()) + 1);
                    return Ok(());
                }
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None)) => {
                    return Err(Error::Unavailable {
                        reason: "compaction probe: watch ended".into(),
                        source: None,
                    });
                }
                Ok(Err(e)) => return Err(failure(e, "compaction probe", false)),
                Err(_) => {
                    return Err(Error::Timeout {
                        what: "compaction probe".into(),
                        after: self.config.request_timeout,
                    });
                }
            }
        }
    }

    fn raise_compacted(&self, to: u64) {
        self.compacted.fetch_max(to, Ordering::AcqRel);
    }

    async fn refresh_oldest_time(&self) {
        let at = self.compacted().saturating_sub(1).max(1);
        if let Ok(t) = self.clock_at(at).await {
            *self.oldest_time.lock().expect("oldest time lock poisoned") = t.map(time);
        }
    }

    fn kv(&self, kv: &ec::KeyValue) -> KeyValue {
        KeyValue {
            key: self.layout.strip(kv.key()),
            value: kv.value().to_vec(),
            create_revision: Revision(rev(kv.create_revision())),
            mod_revision: Revision(rev(kv.mod_revision())),
            version: kv.version().max(0) as u64,
            lease: (kv.lease() != 0).then_some(LeaseId(kv.lease() as u64)),
        }
    }

    fn event(&self, e: &ec::Event) -> (u64, Event) {
        let kv = e.kv().map(|kv| self.kv(kv)).unwrap_or(KeyValue {
            key: vec![],
            value: vec![],
            create_revision: Revision::ZERO,
            mod_revision: Revision::ZERO,
            version: 0,
            lease: None,
        });
        let kind = match e.event_type() {
            ec::EventType::Put => EventKind::Put,
            ec::EventType::Delete => EventKind::Delete,
        };
        (
            kv.mod_revision.0,
            Event {
                kind,
                kv,
                prev_kv: e.prev_kv().map(|kv| self.kv(kv)),
            },
        )
    }

    /// Opens an etcd watch on `range` from `start`.
    async fn open_watch(
        &self,
        range: &EtcdRange,
        start: u64,
        prev_kv: bool,
        progress: bool,
    ) -> std::result::Result<ec::WatchStream, ec::Error> {
        let mut options = ec::WatchOptions::new().with_start_revision(start as i64);
        if !range.end.is_empty() {
            options = options.with_range(range.end.clone());
        }
        if prev_kv {
            options = options.with_prev_key();
        }
        if progress {
            options = options.with_progress_notify();
        }
        let mut client = self
            .client
            .watch_client()
            .max_decoding_message_size(MESSAGE_LIMIT);
        match tokio::time::timeout(
            self.config.request_timeout,
            client.watch(range.start.clone(), Some(options)),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(ec::Error::WatchError("timed out opening a watch".into())),
        }
    }

    /// Replays `range` from `from` until the watch has proved it saw up to `target` (see the
    /// module docs). `sentinel` is a revision at or before `target` known to have an event in
    /// `range`; past it, `fence` writes a clock-only revision to end the replay, and without
    /// `fence` nothing more can follow. Returns the deliveries of revisions up to `target`
    /// (at most `limit` with store keys) and the clock values seen (time, tag) by revision.
    #[allow(clippy::too_many_arguments)]
    async fn replay(
        &self,
        range: &EtcdRange,
        from: u64,
        target: u64,
        sentinel: u64,
        fence: bool,
        prev_kv: bool,
        limit: usize,
    ) -> Result<(Vec<WatchResponse>, BTreeMap<u64, (u64, Option<Vec<u8>>)>)> {
        let mut out = Vec::new();
        let mut clocks = BTreeMap::new();
        let mut cursor = Cursor { next: from };
        let mut fenced = false;
        if sentinel < from {
            if !fence {
                return Ok((out, clocks));
            }
            self.fence().await?;
            fenced = true;
        }
        let timeout = self.config.request_timeout * 3;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut stream = self
            .open_watch(range, from, prev_kv, false)
            .await
            .map_err(|e| failure(e, "replay", false))?;
        while cursor.seen() < target && out.len() < limit {
            let resp = match tokio::time::timeout_at(deadline, stream.message()).await {
                Ok(Ok(Some(resp))) => resp,
                Ok(Ok(None)) => {
                    return Err(Error::Unavailable {
                        reason: "replay: the watch ended".into(),
                        source: None,
                    });
                }
                Ok(Err(e)) => return Err(failure(e, "replay", false)),
                Err(_) => {
                    return Err(Error::Timeout {
                        what: "replay of history".into(),
                        after: timeout,
                    });
                }
            };
            if resp.canceled() {
                if resp.compact_revision() > 0 {
                    self.raise_compacted(rev(resp.compact_revision()) + 1);
                    return Err(self.compacted_error(cursor.next));
                }
                return Err(Error::Unavailable {
                    reason: format!("replay: watch cancelled: {}", resp.cancel_reason()),
                    source: None,
                });
            }
            if resp.created() && resp.events().is_empty() {
                continue;
            }
            let header = resp.header().map_or(0, |h| rev(h.revision()));
            if resp.events().is_empty() {
                cursor.progress(header);
            } else {
                let events = resp.events().iter().map(|e| self.event(e)).collect();
                for mut delivery in cursor.step(header, events) {
                    if delivery.revision.0 > target || out.len() >= limit {
                        continue;
                    }
                    delivery.events.retain(|e| {
                        let full = self.layout.key_of(&e.kv.key);
                        if self.layout.is_clock(&full) {
                            clocks.insert(
                                delivery.revision.0,
                                (decode_time(&e.kv.value), decode_tag(&e.kv.value)),
                            );
                            false
                        } else {
                            // Any other reserved key is the store's own, never a change.
                            e.kv.key.first() != Some(&0)
                        }
                    });
                    if !delivery.events.is_empty() {
                        out.push(delivery);
                    }
                }
            }
            if cursor.seen() < target && cursor.seen() >= sentinel {
                if !fence {
                    break;
                }
                if !fenced {
                    self.fence().await?;
                    fenced = true;
                }
            }
        }
        Ok((out, clocks))
    }

    /// Makes sure the prefix is this store's (see "Ownership" in the module docs): finds the
    /// marker, or writes it where the whole prefix is empty, in a txn that does nothing if
    /// another server's first connect won the race. The marker's revision carries no clock:
    /// like a revision of another prefix it has no time of its own and no log entry.
    async fn claim_prefix(&self) -> Result<()> {
        let prefix = || self.layout.prefix().to_vec();
        let marker = self.layout.marker_key();
        let found = self.get(ec::GetOptions::new(), marker.clone()).await?;
        if let Some(kv) = found.kvs().first() {
            if kv.value() == keys::MARKER_VALUE {
                return Ok(());
            }
            return Err(Error::ForeignPrefix {
                prefix: prefix(),
                reason: format!(
                    "its marker says {:?}, not {:?}",
                    String::from_utf8_lossy(kv.value()),
                    String::from_utf8_lossy(keys::MARKER_VALUE)
                ),
            });
        }
        // One keys-only read of at most one key: etcd's count is the whole range's.
        let whole = self.layout.whole();
        let options = ec::GetOptions::new()
            .with_keys_only()
            .with_limit(1)
            .with_range(whole.end.clone());
        let found = self.get(options, whole.start.clone()).await?;
        if let Some(kv) = found.kvs().first() {
            return Err(Error::ForeignPrefix {
                prefix: prefix(),
                reason: format!(
                    "it holds {} keys and no skiff marker (the first: {:?})",
                    found.count(),
                    String::from_utf8_lossy(kv.key())
                ),
            });
        }
        let txn = ec::Txn::new()
            .when(vec![ec::Compare::create_revision(
                marker.clone(),
                ec::CompareOp::Equal,
                0,
            )])
            .and_then(vec![ec::TxnOp::put(
                marker,
                keys::MARKER_VALUE.to_vec(),
                None,
            )]);
        let kv = self.kv_client();
        let sent = self.send(|| {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        });
        match sent.await {
            Ok(Ok(r)) => {
                self.saw(r.header());
                if r.succeeded() {
                    tracing::info!(prefix = %String::from_utf8_lossy(self.layout.prefix()), "claimed a new etcd prefix for skiff");
                }
                Ok(())
            }
            Ok(Err(e)) => Err(failure(e, "writing the prefix marker", true)),
            Err(_) => Err(Error::Timeout {
                what: "writing the prefix marker".into(),
                after: self.config.request_timeout,
            }),
        }
    }

    /// Checks quorum with a linearizable read every [`Config::health_interval`] for
    /// [`Store::ready`], logging each change between ready and not.
    async fn health_loop(self: Arc<Self>) {
        let interval = self.config.health_interval;
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            // A read that never reached a member (a dead one's endpoint) says nothing of
            // quorum: it goes to another.
            let read = async {
                let mut attempts = 2 * self.config.endpoints.len() + 1;
                loop {
                    let mut kv = self.kv_client();
                    let options = ec::GetOptions::new().with_count_only();
                    match kv.get(self.layout.clock_key(), Some(options)).await {
                        Err(e) if attempts > 1 && never_sent(&e) => attempts -= 1,
                        other => return other,
                    }
                }
            };
            let failed = match tokio::time::timeout(interval * 2, read).await {
                Ok(Ok(r)) => {
                    self.saw(r.header());
                    None
                }
                Ok(Err(e)) => Some(format!("etcd does not answer a quorum read: {e}")),
                Err(_) => Some(format!(
                    "etcd did not answer a quorum read within {:?} (no leader?)",
                    interval * 2
                )),
            };
            let endpoints = self.config.endpoints.join(",");
            let mut unready = self.unready.lock().expect("health lock poisoned");
            match (&*unready, &failed) {
                (None, Some(reason)) => tracing::warn!(
                    %endpoints, %reason,
                    "the datastore is unavailable: writes fail with 503/504 and /readyz says not ready until it is back"
                ),
                (Some(_), None) => {
                    tracing::info!(%endpoints, "the datastore is available again")
                }
                _ => {}
            }
            *unready = failed;
        }
    }

    /// Writes a revision holding only the clock key, so that a replay gets a response.
    async fn fence(&self) -> Result<()> {
        let txn = ec::Txn::new().and_then(vec![ec::TxnOp::put(
            self.layout.clock_key(),
            encode_clock(self.next_time(), None),
            None,
        )]);
        let kv = self.kv_client();
        let sent = self.send(|| {
            let (mut kv, txn) = (kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        });
        match sent.await {
            Ok(Ok(r)) => {
                self.saw(r.header());
                Ok(())
            }
            Ok(Err(e)) => Err(failure(e, "replay fence", true)),
            Err(_) => Err(Error::Timeout {
                what: "replay fence".into(),
                after: self.config.request_timeout,
            }),
        }
    }

    /// Follows the clock key so that [`Store::status`] sees other writers' revisions and
    /// compactions; reconnects until closed.
    async fn follow_revisions(self: Arc<Self>) {
        let range = EtcdRange {
            start: self.layout.clock_key(),
            end: vec![],
        };
        while !self.cancel.is_cancelled() {
            let start = self.current.load(Ordering::Acquire) + 1;
            let stream = tokio::select! {
                _ = self.cancel.cancelled() => return,
                s = self.open_watch(&range, start, false, true) => s,
            };
            if let Ok(mut stream) = stream {
                loop {
                    let msg = tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        m = stream.message() => m,
                    };
                    match msg {
                        Ok(Some(resp)) => {
                            if resp.compact_revision() > 0 {
                                self.raise_compacted(rev(resp.compact_revision()) + 1);
                                break;
                            }
                            if resp.canceled() {
                                break;
                            }
                            if !resp.created() {
                                self.saw(resp.header());
                            }
                        }
                        _ => break,
                    }
                }
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    async fn refresh_size_loop(self: Arc<Self>) {
        while !self.cancel.is_cancelled() {
            let mut m = self.client.maintenance_client();
            if let Ok(Ok(s)) = tokio::time::timeout(self.config.request_timeout, m.status()).await {
                self.db_size
                    .store(s.db_size().max(0) as u64, Ordering::Release);
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
        }
    }

    /// Applies [`Config::retention`] by compacting etcd.
    async fn retention_loop(self: Arc<Self>) {
        let policy = self.config.retention.clone();
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = tokio::time::sleep(policy.interval) => {}
            }
            let Ok(current) = self.fresh_current().await else {
                continue;
            };
            let mut target = 0;
            if let Some(n) = policy.max_revisions {
                target = current.saturating_sub(n.saturating_sub(1));
            }
            if let Some(age) = policy.max_age
                && let Some(t) = SystemTime::now().checked_sub(age)
                && let Ok(r) = self.revision_at(t).await
            {
                target = target.max(r);
            }
            if target > self.compacted()
                && let Err(e) = self.compact(target).await
            {
                tracing::warn!(error = %e, "etcd retention: compaction failed");
            }
        }
    }

    async fn revision_at(&self, t: SystemTime) -> Result<u64> {
        let t = nanos(t);
        let current = self.fresh_current().await?;
        let compacted = self.compacted();
        let before = |v: Option<u64>| v.is_none_or(|v| v <= t);
        if before(self.clock_at(current).await?) {
            return Ok(current);
        }
        let mut lo = compacted.saturating_sub(1).max(1);
        if !before(self.clock_at(lo).await?) {
            return Err(Error::TimeBeforeHistory {
                oldest: Revision(compacted),
            });
        }
        let mut hi = current;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if before(self.clock_at(mid).await?) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if lo < compacted && compacted > 1 {
            return Err(Error::TimeBeforeHistory {
                oldest: Revision(compacted),
            });
        }
        Ok(lo)
    }

    async fn compact(&self, revision: u64) -> Result<()> {
        self.check_open()?;
        let current = self.fresh_current().await?;
        if revision > current {
            return Err(Error::FutureRevision {
                requested: Revision(revision),
                current: Revision(current),
            });
        }
        if revision <= self.compacted() {
            return Ok(());
        }
        let kv = self.kv_client();
        let call = self.send(|| {
            let mut kv = kv.clone();
            async move { kv.compact((revision - 1) as i64, None).await }
        });
        match call.await {
            Ok(Ok(_)) => self.raise_compacted(revision),
            Ok(Err(e)) if classify(&e) == Kind::Compacted => self.learn_compaction().await?,
            Ok(Err(e)) => return Err(failure(e, "compact", true)),
            Err(_) => {
                return Err(Error::Timeout {
                    what: "compact".into(),
                    after: self.config.request_timeout,
                });
            }
        }
        self.refresh_oldest_time().await;
        Ok(())
    }
}

/// A store op as sent to etcd: where its answer is in etcd's responses.
enum Slot {
    /// Answered by etcd's response at this index.
    At(usize),
    /// A delete of an empty range (answered here: nothing deleted).
    EmptyDelete,
    /// A read of an empty range.
    EmptyRange,
}

impl Inner {
    fn check_branch(&self, ops: &[Op]) -> Result<()> {
        let mut puts: Vec<&[u8]> = Vec::new();
        let mut deletes: Vec<&KeyRange> = Vec::new();
        for op in ops {
            match op {
                Op::Put { key, .. } => {
                    self.layout.key(key)?;
                    if puts.contains(&key.as_slice()) {
                        return Err(Error::DuplicateKey(key.clone()));
                    }
                    puts.push(key);
                }
                Op::Delete { range, .. } => deletes.push(range),
                Op::Range(_) => {}
            }
        }
        for key in puts {
            if deletes.iter().any(|r| r.contains(key)) {
                return Err(Error::DuplicateKey(key.to_vec()));
            }
        }
        Ok(())
    }

    /// The etcd ops of one branch, with the clock put (see the module docs).
    fn branch(&self, ops: &[Op], time: &[u8]) -> Result<(Vec<ec::TxnOp>, Vec<Slot>)> {
        let mut out = Vec::new();
        let mut slots = Vec::new();
        let mut writes = false;
        let mut deleted: Vec<EtcdRange> = Vec::new();
        for op in ops {
            match op {
                Op::Put {
                    key,
                    value,
                    lease,
                    prev_kv,
                } => {
                    let mut o = ec::PutOptions::new();
                    if let Some(l) = lease {
                        o = o.with_lease(l.0 as i64);
                    }
                    if *prev_kv {
                        o = o.with_prev_key();
                    }
                    slots.push(Slot::At(out.len()));
                    out.push(ec::TxnOp::put(
                        self.layout.key(key)?,
                        value.clone(),
                        Some(o),
                    ));
                    writes = true;
                }
                Op::Delete { range, prev_kv } => match self.layout.range(range) {
                    None => slots.push(Slot::EmptyDelete),
                    Some(r) => {
                        let mut o = ec::DeleteOptions::new();
                        if !r.end.is_empty() {
                            o = o.with_range(r.end.clone());
                        }
                        if *prev_kv {
                            o = o.with_prev_key();
                        }
                        slots.push(Slot::At(out.len()));
                        out.push(ec::TxnOp::delete(r.start.clone(), Some(o)));
                        deleted.push(r);
                    }
                },
                Op::Range(req) => match self.layout.range(&req.range) {
                    None => slots.push(Slot::EmptyRange),
                    Some(r) => {
                        slots.push(Slot::At(out.len()));
                        out.push(ec::TxnOp::get(
                            r.start.clone(),
                            Some(self.get_options(&r, req)),
                        ));
                    }
                },
            }
        }
        let clock = || ec::TxnOp::put(self.layout.clock_key(), time.to_vec(), None);
        if writes {
            out.push(clock());
        } else if !deleted.is_empty() {
            // Innermost first: "if range i is non-empty put the clock, else try range i+1".
            let mut chain: Option<ec::Txn> = None;
            for r in deleted.iter().rev() {
                let mut guard = ec::Compare::version(r.start.clone(), ec::CompareOp::Greater, 0);
                if !r.end.is_empty() {
                    guard = guard.with_range(r.end.clone());
                }
                let mut txn = ec::Txn::new().when(vec![guard]).and_then(vec![clock()]);
                if let Some(inner) = chain.take() {
                    txn = txn.or_else(vec![ec::TxnOp::txn(inner)]);
                }
                chain = Some(txn);
            }
            out.push(ec::TxnOp::txn(chain.expect("a delete makes a chain")));
        }
        Ok((out, slots))
    }

    fn get_options(&self, r: &EtcdRange, req: &RangeRequest) -> ec::GetOptions {
        let mut o = ec::GetOptions::new();
        if !r.end.is_empty() {
            o = o.with_range(r.end.clone());
        }
        if let Some(rev) = req.revision
            && rev.0 > 0
        {
            o = o.with_revision(rev.0 as i64);
        }
        if let Some(limit) = req.limit {
            o = o.with_limit(limit.max(1) as i64);
        }
        if req.keys_only {
            o = o.with_keys_only();
        }
        o
    }

    fn range_response(&self, r: &ec::GetResponse, req: &RangeRequest, at: u64) -> RangeResponse {
        let mut kvs: Vec<KeyValue> = r.kvs().iter().map(|kv| self.kv(kv)).collect();
        if req.limit == Some(0) {
            kvs.clear();
        }
        RangeResponse {
            more: r.more() || (req.limit == Some(0) && r.count() > 0),
            kvs,
            count: req.count.then_some(r.count().max(0) as u64),
            revision: Revision(req.revision.map_or(at, |r| r.0)),
        }
    }

    fn check_revision(&self, requested: Option<Revision>) -> Result<()> {
        if let Some(r) = requested
            && r.0 < self.compacted()
        {
            return Err(self.compacted_error(r.0));
        }
        Ok(())
    }

    fn request_size(ops: &[Op]) -> usize {
        ops.iter()
            .map(|op| match op {
                Op::Put { key, value, .. } => key.len() + value.len(),
                Op::Delete { range, .. } => range.start.len(),
                Op::Range(r) => r.range.start.len(),
            })
            .sum()
    }
}

#[async_trait::async_trait]
impl Store for EtcdStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        let inner = &self.inner;
        inner.check_open()?;
        inner.check_revision(request.revision)?;
        if let Some(r) = request.revision
            && r.0 > inner.current.load(Ordering::Acquire)
        {
            let current = inner.fresh_current().await?;
            if r.0 > current {
                return Err(Error::FutureRevision {
                    requested: r,
                    current: Revision(current),
                });
            }
        }
        let Some(r) = inner.layout.range(&request.range) else {
            let at = inner.current.load(Ordering::Acquire);
            return Ok(RangeResponse {
                kvs: vec![],
                more: false,
                count: request.count.then_some(0),
                revision: request.revision.unwrap_or(Revision(at)),
            });
        };
        let options = inner.get_options(&r, &request);
        let response = inner
            .get_at(
                options,
                r.start.clone(),
                request.revision.map_or(0, |r| r.0),
            )
            .await?;
        let at = response.header().map_or(0, |h| rev(h.revision()));
        Ok(inner.range_response(&response, &request, at))
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let inner = &self.inner;
        inner.check_open()?;
        for branch in [&txn.success, &txn.failure] {
            inner.check_branch(branch)?;
            for op in branch.iter() {
                if let Op::Range(r) = op {
                    inner.check_revision(r.revision)?;
                }
            }
            let size = Inner::request_size(branch);
            if size > inner.config.max_request_bytes {
                return Err(Error::ValueTooLarge {
                    size,
                    limit: inner.config.max_request_bytes,
                });
            }
        }
        for c in &txn.compare {
            inner.layout.key(&c.key)?;
        }
        txn.check_tag()?;
        let time = encode_clock(inner.next_time(), txn.stored_tag());
        let (success, success_slots) = inner.branch(&txn.success, &time)?;
        let (failure_ops, failure_slots) = inner.branch(&txn.failure, &time)?;
        let compares: Vec<ec::Compare> = txn
            .compare
            .iter()
            .map(|c| {
                let key = inner.layout.key(&c.key).expect("checked above");
                let op = match c.op {
                    CompareOp::Equal => ec::CompareOp::Equal,
                    CompareOp::NotEqual => ec::CompareOp::NotEqual,
                    CompareOp::Greater => ec::CompareOp::Greater,
                    CompareOp::Less => ec::CompareOp::Less,
                };
                match &c.target {
                    CompareTarget::Value(v) => ec::Compare::value(key, op, v.clone()),
                    CompareTarget::Version(v) => ec::Compare::version(key, op, *v as i64),
                    CompareTarget::CreateRevision(r) => {
                        ec::Compare::create_revision(key, op, r.0 as i64)
                    }
                    CompareTarget::ModRevision(r) => ec::Compare::mod_revision(key, op, r.0 as i64),
                }
            })
            .collect();
        let request = ec::Txn::new()
            .when(compares)
            .and_then(success)
            .or_else(failure_ops);
        let kv = inner.kv_client();
        let response = match inner
            .send(|| {
                let (mut kv, request) = (kv.clone(), request.clone());
                async move { kv.txn(request).await }
            })
            .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return Err(match classify(&e) {
                    Kind::TooLarge => Error::ValueTooLarge {
                        size: Inner::request_size(&txn.success)
                            .max(Inner::request_size(&txn.failure)),
                        limit: inner.config.max_request_bytes,
                    },
                    Kind::LeaseNotFound => Error::LeaseNotFound(
                        txn.success
                            .iter()
                            .chain(&txn.failure)
                            .find_map(|op| match op {
                                Op::Put { lease: Some(l), .. } => Some(*l),
                                _ => None,
                            })
                            .unwrap_or(LeaseId(0)),
                    ),
                    Kind::Duplicate => Error::DuplicateKey(vec![]),
                    Kind::Compacted => {
                        inner.learn_compaction().await?;
                        inner.compacted_error(0)
                    }
                    _ => failure(e, "txn", true),
                });
            }
            Err(_) => {
                return Err(Error::Timeout {
                    what: "txn (the write may have committed)".into(),
                    after: inner.config.request_timeout,
                });
            }
        };
        let revision = inner.saw(response.header());
        let succeeded = response.succeeded();
        let (ops, slots) = if succeeded {
            (&txn.success, success_slots)
        } else {
            (&txn.failure, failure_slots)
        };
        let answers = response.op_responses();
        let mut responses = Vec::with_capacity(ops.len());
        for (op, slot) in ops.iter().zip(slots) {
            let answer = match slot {
                Slot::At(i) => answers.get(i),
                _ => None,
            };
            responses.push(match (op, answer) {
                (Op::Put { .. }, Some(ec::TxnOpResponse::Put(p))) => OpResponse::Put {
                    prev_kv: p.prev_key().map(|kv| inner.kv(kv)),
                },
                (Op::Delete { .. }, Some(ec::TxnOpResponse::Delete(d))) => OpResponse::Delete {
                    deleted: d.deleted().max(0) as u64,
                    prev_kvs: d.prev_kvs().iter().map(|kv| inner.kv(kv)).collect(),
                },
                (Op::Delete { .. }, None) => OpResponse::Delete {
                    deleted: 0,
                    prev_kvs: vec![],
                },
                (Op::Range(req), Some(ec::TxnOpResponse::Get(g))) => {
                    OpResponse::Range(inner.range_response(g, req, revision))
                }
                (Op::Range(req), None) => OpResponse::Range(RangeResponse {
                    kvs: vec![],
                    more: false,
                    count: req.count.then_some(0),
                    revision: req.revision.unwrap_or(Revision(revision)),
                }),
                (op, answer) => panic!(
                    "etcd answered {op:?} with {answer:?}: the txn's ops and answers disagree"
                ),
            });
        }
        Ok(TxnResponse {
            succeeded,
            revision: Revision(revision),
            responses,
        })
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let inner = self.inner.clone();
        inner.check_open()?;
        let current = inner.fresh_current().await?;
        let start = request.start_revision.map_or(current + 1, |r| r.0);
        if start < inner.compacted() {
            return Err(inner.compacted_error(start));
        }
        if start > current + 1 {
            return Err(Error::FutureRevision {
                requested: Revision(start),
                current: Revision(current),
            });
        }
        // An empty range watches the reserved empty key, which never changes: progress only.
        let range = inner.layout.range(&request.range).unwrap_or(EtcdRange {
            start: inner.layout.key_of(b""),
            end: vec![],
        });
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        let task = inner.clone();
        inner.tasks.spawn(async move {
            task.run_watch(range, start, request, tx).await;
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn history(&self, key: &[u8]) -> Result<Vec<(Commit, Event)>> {
        let inner = &self.inner;
        inner.check_open()?;
        let Some(r) = inner.layout.range(&KeyRange::key(key)) else {
            return Ok(vec![]);
        };
        let now = inner.get(ec::GetOptions::new(), r.start.clone()).await?;
        let current = rev(now.header().map_or(0, |h| h.revision()));
        let compacted = inner.compacted();
        let mut out: Vec<Event> = Vec::new();
        // The version kept from before the compacted revision, if it is a put.
        if compacted > 1 {
            match inner
                .get_at(ec::GetOptions::new(), r.start.clone(), compacted - 1)
                .await
            {
                Ok(old) => out.extend(old.kvs().first().map(|kv| Event {
                    kind: EventKind::Put,
                    kv: inner.kv(kv),
                    prev_kv: None,
                })),
                Err(Error::Compacted { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let kept_old = !out.is_empty();
        let deliveries = match now.kvs().first() {
            Some(kv) if rev(kv.mod_revision()) < compacted => vec![],
            Some(kv) => {
                let m = rev(kv.mod_revision());
                inner
                    .replay(&r, compacted, current, m, false, true, usize::MAX)
                    .await?
                    .0
            }
            None => {
                let everything = inner.layout.everything();
                let (clock, _) = inner.clock_mod_revision().await?;
                if clock < compacted && !kept_old {
                    // Absent before and after, and no skiff write since: no event can exist
                    // (etcd's own deletes need a version to delete).
                    return Ok(vec![]);
                }
                let mut d = inner
                    .replay(
                        &everything,
                        compacted,
                        current,
                        clock,
                        true,
                        true,
                        usize::MAX,
                    )
                    .await?
                    .0;
                for delivery in &mut d {
                    delivery.events.retain(|e| e.kv.key == key);
                }
                d
            }
        };
        out.extend(deliveries.into_iter().flat_map(|d| d.events));
        let mut commits = HashMap::new();
        for e in &out {
            let r = e.kv.mod_revision.0;
            if let std::collections::hash_map::Entry::Vacant(v) = commits.entry(r) {
                let (t, tag) = inner.commit_at(r).await?.unwrap_or((0, None));
                v.insert(Commit { time: time(t), tag });
            }
        }
        Ok(out
            .into_iter()
            .map(|e| (commits[&e.kv.mod_revision.0].clone(), e))
            .collect())
    }

    async fn log(
        &self,
        from: Revision,
        to: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<LogEntry>> {
        let inner = &self.inner;
        inner.check_open()?;
        let from = from.0.max(1);
        if from < inner.compacted() {
            return Err(inner.compacted_error(from));
        }
        let (clock, current) = inner.clock_mod_revision().await?;
        let target = to.map_or(current, |t| t.0.min(current));
        if limit == 0 || from > target {
            return Ok(vec![]);
        }
        let (deliveries, clocks) = inner
            .replay(
                &inner.layout.everything(),
                from,
                target,
                clock,
                true,
                true,
                limit,
            )
            .await?;
        let mut entries = Vec::with_capacity(deliveries.len());
        for d in deliveries {
            // A revision without a clock of its own (etcd's lease expiry) has the time of the
            // write before it and no tag.
            let (t, tag) = match clocks.range(..=d.revision.0).next_back() {
                Some((&r, (t, tag))) => (*t, tag.clone().filter(|_| r == d.revision.0)),
                None => inner.commit_at(d.revision.0).await?.unwrap_or((0, None)),
            };
            entries.push(LogEntry {
                revision: d.revision,
                time: time(t),
                tag,
                events: d.events,
            });
        }
        Ok(entries)
    }

    async fn retained_at(&self, revision: Revision) -> Result<Vec<KeyValue>> {
        let inner = &self.inner;
        inner.check_open()?;
        // A version below etcd's compact revision is kept only if it is its key's newest there.
        // (So it reads at compacted - 1, which `range` refuses; in pages, as a whole prefix may
        // not fit in one response.)
        let floor = inner.compacted().saturating_sub(1).max(1);
        let at = revision.0.max(floor);
        let all = inner
            .layout
            .range(&KeyRange::from(Vec::new()))
            .expect("the whole store range is not empty");
        let mut start = all.start.clone();
        let mut out = Vec::new();
        loop {
            let options = ec::GetOptions::new()
                .with_range(all.end.clone())
                .with_limit(1000);
            let page = inner.get_at(options, start, at).await?;
            out.extend(
                page.kvs()
                    .iter()
                    .map(|kv| inner.kv(kv))
                    .filter(|kv| kv.mod_revision <= revision),
            );
            match page.kvs().last() {
                Some(kv) if page.more() => {
                    start = kv.key().to_vec();
                    start.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Always empty: etcd has no per-prefix retention (see the module docs), so no read is
    /// refused for a prefix; the global compacted revision is in [`Store::status`].
    fn watermarks(&self) -> Vec<(Vec<u8>, Revision)> {
        Vec::new()
    }

    /// The leases granted through this handle and not revoked or found expired here (etcd's own
    /// list spans every prefix sharing it).
    fn leases(&self) -> Vec<(LeaseId, Duration)> {
        let leases = self.inner.leases.lock().expect("lease map poisoned");
        let mut out: Vec<_> = leases.iter().map(|(k, v)| (*k, *v)).collect();
        out.sort();
        out
    }

    async fn revision_at(&self, time: SystemTime) -> Result<Revision> {
        self.inner.check_open()?;
        self.inner.revision_at(time).await.map(Revision)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision.0).await
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        let inner = &self.inner;
        inner.check_open()?;
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let client = inner.client.lease_client();
        let r = match inner
            .send(|| {
                let mut client = client.clone();
                async move { client.grant(secs.max(1) as i64, None).await }
            })
            .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(failure(e, "lease grant", true)),
            Err(_) => {
                return Err(Error::Timeout {
                    what: "lease grant".into(),
                    after: inner.config.request_timeout,
                });
            }
        };
        let id = LeaseId(r.id() as u64);
        let granted = Duration::from_secs(r.ttl().max(0) as u64);
        inner
            .leases
            .lock()
            .expect("lease map poisoned")
            .insert(id, granted);
        Ok(Lease {
            id,
            ttl: granted,
            remaining: granted,
        })
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<Lease> {
        let inner = &self.inner;
        inner.check_open()?;
        let mut client = inner.client.lease_client();
        let call = async {
            let (mut keeper, mut stream) = client.keep_alive(id.0 as i64).await?;
            keeper.keep_alive().await?;
            stream.message().await
        };
        let r = match tokio::time::timeout(inner.config.request_timeout, call).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => {
                return Err(Error::Unavailable {
                    reason: "lease keep-alive: stream ended".into(),
                    source: None,
                });
            }
            Ok(Err(e)) => return Err(failure(e, "lease keep-alive", false)),
            Err(_) => {
                return Err(Error::Timeout {
                    what: "lease keep-alive".into(),
                    after: inner.config.request_timeout,
                });
            }
        };
        if r.ttl() <= 0 {
            inner.leases.lock().expect("lease map poisoned").remove(&id);
            return Err(Error::LeaseNotFound(id));
        }
        let remaining = Duration::from_secs(r.ttl() as u64);
        let ttl = inner
            .leases
            .lock()
            .expect("lease map poisoned")
            .get(&id)
            .copied()
            .unwrap_or(remaining);
        Ok(Lease { id, ttl, remaining })
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<Revision> {
        let inner = &self.inner;
        inner.check_open()?;
        let client = inner.client.lease_client();
        let r = match inner
            .send(|| {
                let mut client = client.clone();
                async move { client.revoke(id.0 as i64).await }
            })
            .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) if classify(&e) == Kind::LeaseNotFound => {
                inner.leases.lock().expect("lease map poisoned").remove(&id);
                return Err(Error::LeaseNotFound(id));
            }
            Ok(Err(e)) => return Err(failure(e, "lease revoke", true)),
            Err(_) => {
                return Err(Error::Timeout {
                    what: "lease revoke".into(),
                    after: inner.config.request_timeout,
                });
            }
        };
        inner.leases.lock().expect("lease map poisoned").remove(&id);
        Ok(Revision(inner.saw(r.header())))
    }

    async fn snapshot(&self, path: &Path) -> Result<Revision> {
        use tokio::io::AsyncWriteExt;
        let inner = &self.inner;
        inner.check_open()?;
        let revision = inner.fresh_current().await?;
        let mut m = inner.client.maintenance_client();
        let mut stream = m
            .snapshot()
            .await
            .map_err(|e| failure(e, "snapshot", false))?;
        let tmp = path.with_extension("partial");
        let mut file = tokio::fs::File::create(&tmp).await?;
        while let Some(chunk) = stream
            .message()
            .await
            .map_err(|e| failure(e, "snapshot", false))?
        {
            file.write_all(chunk.blob()).await?;
        }
        file.sync_all().await?;
        drop(file);
        tokio::fs::rename(&tmp, path).await?;
        Ok(Revision(revision))
    }

    fn ready(&self) -> std::result::Result<(), String> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err("the store is closed".into());
        }
        match &*self.inner.unready.lock().expect("health lock poisoned") {
            None => Ok(()),
            Some(reason) => Err(reason.clone()),
        }
    }

    fn status(&self) -> StoreStatus {
        let inner = &self.inner;
        StoreStatus {
            revision: Revision(inner.current.load(Ordering::Acquire)),
            compacted: Revision(inner.compacted()),
            oldest_time: *inner.oldest_time.lock().expect("oldest time lock poisoned"),
            size_on_disk: inner.db_size.load(Ordering::Acquire),
        }
    }

    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.cancel.cancel();
        inner.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), inner.tasks.wait()).await;
        Ok(())
    }
}

impl Inner {
    /// The clock key's mod revision (the newest skiff write) and the current revision.
    async fn clock_mod_revision(&self) -> Result<(u64, u64)> {
        let r = self
            .get(
                ec::GetOptions::new().with_keys_only(),
                self.layout.clock_key(),
            )
            .await?;
        let current = self.saw(r.header());
        let clock = r.kvs().first().map_or(0, |kv| rev(kv.mod_revision()));
        Ok((clock, current))
    }

    /// The task behind one store watch: an etcd watch resumed from the cursor after any lost
    /// connection, until the consumer goes away, the store closes, or a final error.
    async fn run_watch(
        self: Arc<Self>,
        range: EtcdRange,
        start: u64,
        request: WatchRequest,
        tx: tokio::sync::mpsc::Sender<Result<WatchResponse>>,
    ) {
        let mut cursor = Cursor { next: start };
        let progress = request.progress_notify.is_some();
        let mut failing_since: Option<tokio::time::Instant> = None;
        let mut backoff = Duration::from_millis(50);
        loop {
            let opened = tokio::select! {
                _ = tx.closed() => return,
                _ = self.cancel.cancelled() => {
                    let _ = tx.send(Err(Error::Closed)).await;
                    return;
                }
                s = self.open_watch(&range, cursor.next, request.prev_kv, progress) => s,
            };
            if let Ok(mut stream) = opened {
                loop {
                    let msg = tokio::select! {
                        _ = tx.closed() => return,
                        _ = self.cancel.cancelled() => {
                            let _ = tx.send(Err(Error::Closed)).await;
                            return;
                        }
                        m = stream.message() => m,
                    };
                    let Ok(Some(resp)) = msg else { break };
                    failing_since = None;
                    backoff = Duration::from_millis(50);
                    if resp.canceled() {
                        if resp.compact_revision() > 0 {
                            self.raise_compacted(rev(resp.compact_revision()) + 1);
                            let _ = tx.send(Err(self.compacted_error(cursor.next))).await;
                            return;
                        }
                        break;
                    }
                    if resp.created() && resp.events().is_empty() {
                        continue;
                    }
                    let header = resp.header().map_or(0, |h| rev(h.revision()));
                    self.current.fetch_max(header, Ordering::AcqRel);
                    if resp.events().is_empty() {
                        if let Some(r) = cursor.progress(header)
                            && progress
                            && tx
                                .send(Ok(WatchResponse {
                                    revision: r,
                                    events: vec![],
                                }))
                                .await
                                .is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    let events = resp.events().iter().map(|e| self.event(e)).collect();
                    for delivery in cursor.step(header, events) {
                        if tx.send(Ok(delivery)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            // Lost (or never got) the stream: retry from the cursor, for a while.
            let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() > self.config.watch_retry {
                let _ = tx
                    .send(Err(Error::Unavailable {
                        reason: format!(
                            "watch lost its etcd connection for over {:?}",
                            self.config.watch_retry
                        ),
                        source: None,
                    }))
                    .await;
                return;
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = self.cancel.cancelled() => {
                    let _ = tx.send(Err(Error::Closed)).await;
                    return;
                }
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Background tasks hold the inner state; stop them when the handle goes.
        self.inner.cancel.cancel();
    }
}

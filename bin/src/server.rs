//! `skiff server` and `skiff apiserver`: opens the data dir (the log, the PKI, the tokens), serves
//! the Kubernetes API over HTTPS, writes the admin kubeconfig, and shuts down gracefully on
//! SIGINT/SIGTERM (stop accepting, finish in-flight requests, flush the log, exit 0).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use skiff_api::{auth, kubeconfig, tls};
use skiff_store::Store;
use tokio_util::sync::CancellationToken;

use crate::components::{self, Component};

/// Flags of `skiff server`: the API server's, which components run, and theirs.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub api: ApiArgs,

    /// Components to leave out (comma-separated).
    #[arg(long, value_delimiter = ',', value_enum, env = "SKIFF_DISABLE")]
    pub disable: Vec<Component>,

    /// Run only these components besides the API server (comma-separated; default: all).
    #[arg(long, value_delimiter = ',', value_enum, env = "SKIFF_COMPONENTS")]
    pub components: Option<Vec<Component>>,

    /// Serve the API only, with every component stopped: for inspecting a data dir (a replayed
    /// one, say) without anything acting on it.
    #[arg(long, env = "SKIFF_PAUSED")]
    pub paused: bool,

    #[command(flatten)]
    pub options: components::Options,
}

/// Flags of the API server (`skiff apiserver`, and part of `skiff server`).
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// Where the log, the PKI, the tokens and the admin kubeconfig live
    /// [default: $XDG_DATA_HOME/skiff or ~/.local/share/skiff].
    #[arg(long, env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// The address the HTTPS API listens on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED), env = "SKIFF_BIND_ADDRESS")]
    pub bind_address: IpAddr,

    /// The HTTPS API port (0 picks a free one; the kubeconfig names the port chosen).
    #[arg(long, default_value_t = 6443, env = "SKIFF_PORT")]
    pub port: u16,

    /// Also serve plain HTTP on 127.0.0.1 at this port, for debugging only (kubectl sends no
    /// token over plain HTTP, so this listener is unauthenticated: never use it beyond loopback).
    #[arg(long, env = "SKIFF_INSECURE_PORT")]
    pub insecure_port: Option<u16>,

    /// Extra names or addresses for the serving certificate.
    #[arg(long = "tls-san", value_delimiter = ',', env = "SKIFF_TLS_SAN")]
    pub tls_san: Vec<String>,

    /// How long Events live before they expire (e.g. `1h`, `30m`).
    #[arg(long, default_value = "1h", value_parser = parse_duration, env = "SKIFF_EVENT_TTL")]
    pub event_ttl: Duration,

    /// Keep at most this many revisions of history (older ones are compacted away).
    #[arg(long, default_value_t = 100_000, env = "SKIFF_HISTORY_REVISIONS")]
    pub history_revisions: u64,

    /// Keep history at most this long (e.g. `24h`).
    #[arg(long, default_value = "24h", value_parser = parse_duration, env = "SKIFF_HISTORY_AGE")]
    pub history_age: Duration,

    /// Space kept free on the file system holding the data dir (a quantity, e.g. `64Mi`, `1Gi`):
    /// writes that would leave less are refused with 507 Insufficient Storage, reads go on, and
    /// writes succeed again as soon as there is room. `0` turns the guard off.
    #[arg(long, default_value = "64Mi", value_parser = parse_bytes, env = "SKIFF_DISK_RESERVE")]
    pub disk_reserve: u64,

    /// How long new pods tolerate a `node.kubernetes.io/not-ready` node before they are evicted,
    /// unless they say otherwise.
    #[arg(long, default_value_t = skiff_kinds::defaults::DEFAULT_NOT_READY_TOLERATION_SECONDS, env = "SKIFF_DEFAULT_NOT_READY_TOLERATION_SECONDS")]
    pub default_not_ready_toleration_seconds: i64,

    /// How long new pods tolerate a `node.kubernetes.io/unreachable` node before they are
    /// evicted, unless they say otherwise.
    #[arg(long, default_value_t = skiff_kinds::defaults::DEFAULT_NOT_READY_TOLERATION_SECONDS, env = "SKIFF_DEFAULT_UNREACHABLE_TOLERATION_SECONDS")]
    pub default_unreachable_toleration_seconds: i64,

    /// How often the history retention policy runs.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "SKIFF_COMPACT_INTERVAL")]
    pub compact_interval: Duration,

    /// The issuer (`iss`) of service-account tokens, and the base of the OIDC discovery URLs.
    #[arg(long, default_value = skiff_api::serviceaccount::DEFAULT_ISSUER, env = "SKIFF_SERVICE_ACCOUNT_ISSUER")]
    pub service_account_issuer: String,

    /// Audiences the API server accepts in tokens (comma-separated) [default: the issuer].
    #[arg(long, value_delimiter = ',', env = "SKIFF_API_AUDIENCES")]
    pub api_audiences: Vec<String>,

    /// The longest lifetime of a requested service-account token (e.g. `24h`); longer requests
    /// get this. [default: no limit]
    #[arg(long, value_parser = parse_duration, env = "SKIFF_SERVICE_ACCOUNT_MAX_TOKEN_EXPIRATION")]
    pub service_account_max_token_expiration: Option<Duration>,

    /// The ClusterIPs Services get (an IPv4 CIDR); the first is the `kubernetes` Service's. Give
    /// `--dns-service-ip` an address inside it too.
    #[arg(long, default_value = "127.96.0.0/14", value_parser = skiff_api::admission::ServiceRanges::with_cluster_ip_range, env = "SKIFF_SERVICE_CLUSTER_IP_RANGE")]
    pub service_cluster_ip_range: skiff_api::admission::ServiceRanges,

    /// Encrypt resources at rest as this `apiserver.config.k8s.io/v1` `EncryptionConfiguration`
    /// file says (aesgcm, aescbc, secretbox, identity), as kube-apiserver's flag. At start, every
    /// stored value not written with the first provider's first key is rewritten with it, and
    /// the older history of those resources is purged from the log.
    #[arg(long, env = "SKIFF_ENCRYPTION_PROVIDER_CONFIG")]
    pub encryption_provider_config: Option<PathBuf>,

    #[command(flatten, next_help_heading = "Datastore")]
    pub datastore: crate::datastore::DatastoreArgs,

    /// On a shared datastore (`--datastore-endpoint`): the secret the cluster's API servers
    /// share, which seals the cluster's CA, keys and token file in the datastore. The first
    /// server makes one unless given; it is kept in `<data-dir>/server-token`, and further
    /// servers start with it.
    #[arg(
        long,
        env = "SKIFF_SERVER_TOKEN",
        hide_env_values = true,
        help_heading = "Datastore"
    )]
    pub server_token: Option<String>,

    #[command(flatten, next_help_heading = "Audit")]
    pub audit: AuditArgs,

    #[command(flatten, next_help_heading = "Memory")]
    pub memory: MemoryArgs,

    #[command(flatten, next_help_heading = "Request limits")]
    pub limits: LimitArgs,
}

/// The audit log, with kube-apiserver's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// The audit policy (`audit.k8s.io/v1` `Policy`, YAML or JSON). Without it nothing is
    /// audited.
    #[arg(long, env = "SKIFF_AUDIT_POLICY_FILE")]
    pub audit_policy_file: Option<PathBuf>,

    /// Where audit events go, one JSON line each; `-` is standard output.
    #[arg(long, env = "SKIFF_AUDIT_LOG_PATH")]
    pub audit_log_path: Option<PathBuf>,

    /// Rotate the audit log before it passes this many megabytes (0 = 100).
    #[arg(long, default_value_t = 0, env = "SKIFF_AUDIT_LOG_MAXSIZE")]
    pub audit_log_maxsize: u64,

    /// Rotated audit logs kept (0 = all).
    #[arg(long, default_value_t = 0, env = "SKIFF_AUDIT_LOG_MAXBACKUP")]
    pub audit_log_maxbackup: usize,

    /// Days rotated audit logs are kept (0 = no limit).
    #[arg(long, default_value_t = 0, env = "SKIFF_AUDIT_LOG_MAXAGE")]
    pub audit_log_maxage: u64,
}

impl AuditArgs {
    /// The API server's audit options.
    pub fn options(&self) -> skiff_api::audit::Options {
        skiff_api::audit::Options {
            policy_file: self.audit_policy_file.clone(),
            log_path: self.audit_log_path.clone(),
            rotation: skiff_api::audit::writer::Rotation {
                max_bytes: self.audit_log_maxsize.saturating_mul(1 << 20),
                max_backups: self.audit_log_maxbackup,
                max_age: (self.audit_log_maxage > 0)
                    .then(|| Duration::from_secs(self.audit_log_maxage.saturating_mul(86_400))),
            },
        }
    }
}

/// The memory the API server's caches may hold. Their sum is most of the server's resident
/// memory beyond its idle footprint (22-23 MiB for `skiff apiserver`); the defaults suit a
/// 1-2 GB machine running workloads beside the control plane.
#[derive(Debug, Clone, clap::Args)]
pub struct MemoryArgs {
    /// The embedded log's page cache (sled's `cache_capacity`), in MiB: the tree nodes of recent
    /// and often-read keys, counted at their size in memory. A working set larger than this is
    /// read back from disk. The log's table of recently written keys takes up to a quarter as
    /// much again (at most 64 MiB). Not used with `--datastore-endpoint`.
    #[arg(long, default_value_t = DEFAULT_STORE_CACHE_MIB, value_parser = clap::value_parser!(u64).range(1..=1 << 20), env = "SKIFF_STORE_CACHE_MIB")]
    pub store_cache_mib: u64,

    /// Recent events the API's watch cache keeps per resource (each holds the object's JSON and
    /// its previous version's stored bytes); a watch starting further back reads the log's
    /// history instead.
    #[arg(long, default_value_t = skiff_api::watch_cache::DEFAULT_CAPACITY as u64, value_parser = clap::value_parser!(u64).range(1..=1 << 24), env = "SKIFF_WATCH_CACHE_EVENTS")]
    pub watch_cache_events: u64,
}

/// The embedded log's page cache unless `--store-cache-mib` says otherwise.
pub const DEFAULT_STORE_CACHE_MIB: u64 = 256;

/// The API server's request admission limits (`skiff_api::limits`), kube-apiserver's defaults
/// where it has one.
#[derive(Debug, clap::Args)]
pub struct LimitArgs {
    /// Non-mutating requests (get, list) in flight at once; more get 429 with `Retry-After`.
    /// Watches, exec, logs and proxies are not counted; `system:masters` is never refused.
    /// 0: no limit.
    #[arg(long, default_value_t = 400, env = "SKIFF_MAX_REQUESTS_INFLIGHT")]
    pub max_requests_inflight: usize,

    /// Mutating requests in flight at once; more get 429 with `Retry-After`. 0: no limit.
    #[arg(
        long,
        default_value_t = 200,
        env = "SKIFF_MAX_MUTATING_REQUESTS_INFLIGHT"
    )]
    pub max_mutating_requests_inflight: usize,

    /// Watches one user may hold open at once; more get 429 with `Retry-After`. 0: no limit.
    #[arg(long, default_value_t = 1000, env = "SKIFF_MAX_WATCHES_PER_USER")]
    pub max_watches_per_user: usize,

    /// Request bodies over this many bytes get 413.
    #[arg(long, default_value_t = 3 * 1024 * 1024, env = "SKIFF_MAX_REQUEST_BODY_BYTES")]
    pub max_request_body_bytes: usize,

    /// A connection must send a request's headers within this time (e.g. `32s`), or is closed.
    #[arg(long, default_value = "32s", value_parser = parse_duration, env = "SKIFF_REQUEST_HEADER_TIMEOUT")]
    pub request_header_timeout: Duration,

    /// Bytes queued on one watch for a client that does not read before the watch waits.
    #[arg(long, default_value_t = 1024 * 1024, env = "SKIFF_WATCH_BUFFER_BYTES")]
    pub watch_buffer_bytes: usize,

    /// How long a watch waits on a client that does not read before it (and its connection)
    /// is closed (e.g. `30s`).
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "SKIFF_WATCH_STALL_TIMEOUT")]
    pub watch_stall_timeout: Duration,
}

impl LimitArgs {
    /// The settings these flags give.
    pub fn settings(&self) -> skiff_api::limits::Settings {
        skiff_api::limits::Settings {
            max_body_bytes: self.max_request_body_bytes,
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
            max_watches_per_user: self.max_watches_per_user,
            watch_buffer_bytes: self.watch_buffer_bytes,
            watch_stall_timeout: self.watch_stall_timeout,
            header_read_timeout: self.request_header_timeout,
        }
    }
}

/// What runs in this process besides the API server.
pub struct Plan {
    /// The components.
    pub components: BTreeSet<Component>,
    /// Their flags.
    pub options: Option<components::Options>,
    /// Leave the log as it is: no automatic compaction and no writes of the server's own (the
    /// system namespaces, the `kubernetes` Service), so that a replayed data dir reads back
    /// exactly as replayed.
    pub paused: bool,
}

impl Plan {
    /// The API server alone.
    pub fn api_only() -> Plan {
        Plan {
            components: BTreeSet::new(),
            options: None,
            paused: false,
        }
    }

    /// What `skiff server`'s flags select.
    pub fn from_server_args(args: &ServerArgs) -> Plan {
        if args.paused {
            return Plan {
                paused: true,
                ..Plan::api_only()
            };
        }
        Plan {
            components: components::select(args.components.as_deref(), &args.disable),
            options: Some(args.options.clone()),
            paused: false,
        }
    }
}

/// The log with encryption at rest, after the rewrite of stored values to the current write key
/// (not when paused: a paused server writes nothing of its own).
async fn encrypt_at_rest(
    store: Arc<dyn Store>,
    encryption: Arc<skiff_api::encryption::Encryption>,
    paused: bool,
) -> Result<(Arc<dyn Store>, bool)> {
    let encrypted = skiff_api::encryption::EncryptedStore::new(store, encryption.clone());
    for rule in encryption.rules() {
        tracing::info!(resources = ?rule.prefixes, writes_with = %rule.write_label(), "encryption at rest");
    }
    let mut purged = false;
    if !paused {
        let report = skiff_api::encryption::rewrite::run(&encrypted, &encryption)
            .await
            .map_err(anyhow::Error::msg)?;
        tracing::info!(
            rewritten = report.rewritten,
            "stored values rewritten with the current encryption key"
        );
        for (prefix, removed) in &report.purged {
            purged |= removed.is_some_and(|n| n > 0);
            match removed {
                Some(n) => tracing::info!(
                    %prefix,
                    versions = n,
                    below = report.purged_below.map_or(0, |r| r.0),
                    "older history written with another key purged from the log"
                ),
                None => tracing::warn!(
                    %prefix,
                    "the datastore keeps older versions until its own compaction removes them"
                ),
            }
        }
    }
    Ok((Arc::new(encrypted), purged))
}

/// Parses a byte count written as a Kubernetes quantity: `64Mi`, `1G`, `1048576`.
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let value = skiff_meta::quantity::value(text)
        .ok_or_else(|| format!("not a quantity of bytes: {text:?}; use e.g. 64Mi, 1Gi"))?;
    u64::try_from(value).map_err(|_| "a size cannot be negative".to_string())
}

/// Parses `90s`, `5m`, `1h30m`, `2d`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let signed: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("not a duration ({e}); use e.g. 90s, 5m, 1h30m"))?;
    Duration::try_from(signed).map_err(|_| "a duration cannot be negative".to_string())
}

/// The data dir when none is given: `$XDG_DATA_HOME/skiff` or `~/.local/share/skiff`.
pub fn default_data_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("skiff"));
    }
    let home =
        std::env::var_os("HOME").context("neither --data-dir, XDG_DATA_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/share/skiff"))
}

/// The file the admin kubeconfig is written to, in the data dir.
pub const KUBECONFIG_FILE: &str = "admin.kubeconfig";

/// Runs the server and the planned components until SIGINT or SIGTERM.
pub async fn run(args: ApiArgs, plan: Plan) -> Result<()> {
    let data_dir = match args.data_dir.clone() {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    // Durably, even when it exists: the store syncs the data dir, not the directories naming it.
    skiff_api::tls::settle_dir(&data_dir, 0o777)
        .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    tracing::info!(data_dir = %data_dir.display(), components = ?plan.components, "starting");
    if plan.options.is_none() {
        tracing::info!("serving the API only: no controllers, scheduler, kubelet or proxy");
    }

    if plan.paused {
        tracing::info!("paused: the log is not compacted and the server writes nothing of its own");
    }
    let retention = skiff_store::Retention {
        max_revisions: Some(args.history_revisions).filter(|_| !plan.paused),
        max_age: Some(args.history_age).filter(|_| !plan.paused),
        interval: args.compact_interval,
    };
    // A bad encryption config refuses to start before anything is opened.
    let encryption = match &args.encryption_provider_config {
        Some(path) => Some(Arc::new(
            skiff_api::encryption::Encryption::load(path).map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    let etcd = args.datastore.etcd_config(retention.clone())?;
    let etcd_backed = etcd.is_some();
    if let Some(options) = &plan.options {
        // Bad --leader-elect-* timings are refused before anything starts.
        options
            .leader_election
            .config(skiff_client::leaderelection::SCHEDULER_LEASE, true)?;
    }
    let store_config = skiff_store::Config {
        retention,
        prefix_retention: skiff_api::server::HIGH_CHURN_PREFIXES
            .iter()
            .filter(|_| !plan.paused)
            .map(|(prefix, versions)| skiff_store::PrefixRetention {
                prefix: prefix.as_bytes().to_vec(),
                max_versions: *versions,
            })
            .collect(),
        disk_reserve: args.disk_reserve,
        cache_capacity: args.memory.store_cache_mib << 20,
        ..skiff_store::Config::new(data_dir.join("db"))
    };
    // The metrics recorder goes in before anything records: a count made without it is lost.
    if skiff_api::metrics::install().is_none() {
        tracing::warn!("another metrics recorder is installed: /metrics will be unavailable");
    }
    let reopen_config = (etcd.is_none() && encryption.is_some()).then(|| store_config.clone());
    let store: Arc<dyn Store> = match etcd {
        Some(config) => {
            tracing::info!(
                endpoints = %config.endpoints.join(","),
                prefix = %args.datastore.datastore_prefix,
                "the log is on etcd"
            );
            Arc::new(crate::datastore::connect(config, args.datastore.datastore_wait).await?)
        }
        None => Arc::new(skiff_store::SledStore::open(store_config).map_err(|e| {
            match e {
                skiff_store::Error::Locked { .. } => anyhow::anyhow!(
                    "data dir {} is locked: another skiff server is already using it",
                    data_dir.display()
                ),
                other => anyhow::Error::new(other)
                    .context(format!("cannot open the log in {}", data_dir.display())),
            }
        })?),
    };

    let store = match encryption {
        Some(encryption) => {
            let (store, purged) = encrypt_at_rest(store, encryption.clone(), plan.paused).await?;
            match reopen_config {
                // sled frees what was purged only as it cleans its files: rewrite them now.
                Some(config) if purged => {
                    store
                        .close()
                        .await
                        .context("closing the log to rebuild it")?;
                    skiff_store::SledStore::rebuild(config.clone())
                        .await
                        .context("rebuilding the log without the purged versions")?;
                    tracing::info!("the log's files rewritten without the purged versions");
                    let reopened: Arc<dyn Store> = Arc::new(
                        skiff_store::SledStore::open(config).context("reopening the log")?,
                    );
                    Arc::new(skiff_api::encryption::EncryptedStore::new(
                        reopened, encryption,
                    ))
                }
                _ => store,
            }
        }
        None => store,
    };

    // In-cluster clients (pods with their service-account token) reach the API server at the
    // `kubernetes` Service's ClusterIP, so the serving certificate names it, as kube-apiserver's.
    let mut sans = args.tls_san.clone();
    sans.push(args.service_cluster_ip_range.kubernetes_ip().to_string());
    let Secrets {
        pki,
        authenticator,
        front_proxy,
        join_token,
        service_account_key,
    } = match etcd_backed {
        true => {
            shared_secrets(
                store.as_ref(),
                &data_dir,
                &sans,
                args.server_token.as_deref(),
            )
            .await?
        }
        false => Secrets::load(&data_dir, &sans)?,
    };
    let admin_token = authenticator
        .admin_token()
        .context("the token file has no admin token")?;

    let address = SocketAddr::new(args.bind_address, args.port);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| {
            format!("cannot listen on {address} (is another server using the port?)")
        })?;
    let bound = listener.local_addr()?;
    let insecure = match args.insecure_port {
        Some(port) => {
            let address = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
            Some(
                tokio::net::TcpListener::bind(address)
                    .await
                    .with_context(|| format!("cannot listen on {address}"))?,
            )
        }
        None => None,
    };

    let audit = args
        .audit
        .options()
        .start()
        .context("cannot start the audit log")?;
    let shutdown = CancellationToken::new();
    let limits = args.limits.settings();
    let config = skiff_api::server::Config {
        limits: limits.clone(),
        event_ttl: args.event_ttl,
        ca_pem: Some(pki.ca_pem().to_string()),
        // Kubelets serve logs to the holder of the join secret.
        kubelet_token: Some(join_token.secret.clone()),
        default_toleration_seconds: skiff_kinds::defaults::TolerationSeconds {
            not_ready: args.default_not_ready_toleration_seconds,
            unreachable: args.default_unreachable_toleration_seconds,
        },
        create_system_namespaces: !plan.paused,
        watch_cache_capacity: args.memory.watch_cache_events as usize,
        shared_store: etcd_backed,
        service_ranges: args.service_cluster_ip_range.clone(),
        service_accounts: skiff_api::serviceaccount::Settings {
            issuer: args.service_account_issuer.clone(),
            api_audiences: args.api_audiences.clone(),
            max_expiration_seconds: args
                .service_account_max_token_expiration
                .map(|d| d.as_secs() as i64),
            key: Some(Arc::new(service_account_key)),
        },
        audit: audit.clone(),
        front_proxy: Some(front_proxy),
        ..Default::default()
    };
    let api = skiff_api::server::ApiServer::new(store.clone(), config, shutdown.clone())
        .await
        .context("cannot start the API server")?;

    let host = match bound.ip() {
        ip if ip.is_unspecified() || ip.is_loopback() => "127.0.0.1".to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let server_url = format!("https://{host}:{}", bound.port());
    let advertise = match bound.ip() {
        ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        ip => ip,
    };
    if !plan.paused {
        skiff_api::kubernetes_service::reconcile(&api, advertise, bound.port())
            .await
            .context("cannot write the kubernetes Service")?;
        if plan.components.contains(&components::Component::Ingress)
            && plan.components.contains(&components::Component::Proxy)
        {
            ensure_ingress_class(&api)
                .await
                .context("cannot write the default IngressClass")?;
        }
    }
    let kubeconfig_path = data_dir.join(KUBECONFIG_FILE);
    kubeconfig::write(
        &kubeconfig_path,
        &kubeconfig::Params {
            name: "skiff",
            server: &server_url,
            ca_pem: pki.ca_pem(),
            token: &admin_token,
            namespace: None,
        },
    )
    .context("cannot write the admin kubeconfig")?;

    let routes = skiff_api::routes(api.clone(), authenticator.clone());
    let tls_config = pki
        .server_config()
        .context("cannot load the serving certificate")?;
    let mut servers = tokio::task::JoinSet::new();
    servers.spawn(tls::serve(
        listener,
        tls_config,
        routes.clone(),
        shutdown.clone(),
        limits.header_read_timeout,
        api.config.audit.clone(),
    ));
    if let Some(listener) = insecure {
        tracing::warn!(address = %listener.local_addr()?, "serving plain HTTP without authentication on loopback");
        let plain = tls::serve_plain(
            listener,
            skiff_api::insecure_routes(api.clone()),
            shutdown.clone(),
            limits.header_read_timeout,
            api.config.audit.clone(),
        );
        servers.spawn(async move {
            if let Err(e) = plain.await {
                tracing::error!(error = %e, "the plain-HTTP debug listener failed");
            }
        });
    }

    tracing::info!(%server_url, "API server listening");
    println!(
        "skiff is serving the Kubernetes API at {server_url}; point kubectl at it with: export KUBECONFIG={}",
        kubeconfig_path.display()
    );
    println!(
        "agents join with: skiff agent --server {server_url} --token {join_token} (also in {})",
        data_dir.join(JOIN_TOKEN_FILE).display()
    );

    // The components talk to the API server like any client, over loopback HTTPS.
    let components_stop = CancellationToken::new();
    let mut running = tokio::task::JoinSet::new();
    if let Some(options) = &plan.options
        && !plan.components.is_empty()
    {
        let local = format!("https://127.0.0.1:{}", bound.port());
        let node_name = options.kubelet.resolved_node_name();
        let host = components::Host {
            pki_dir: pki.dir().to_path_buf(),
            data_dir: data_dir.clone(),
            kubelet_token: join_token.secret.clone(),
            local_storage: plan
                .components
                .contains(&components::Component::LocalStorage),
            dns: plan.components.contains(&components::Component::Dns),
            ingress: plan.components.contains(&components::Component::Ingress)
                && plan.components.contains(&components::Component::Proxy),
            // Several servers can share an etcd, and then their singletons must elect a leader;
            // the embedded log is opened by one server only.
            leader_elect_default: etcd_backed,
        };
        for component in plan.components.iter().filter(|c| c.is_task()) {
            let (subject, stem) = crate::identities::subject(*component, &node_name)
                .context("a component without an identity")?;
            let credentials = crate::identities::credentials(&pki, &subject, stem)?;
            let client = skiff_client::connect_with_certificate(
                &local,
                pki.ca_pem().as_bytes(),
                &credentials,
            )
            .with_context(|| format!("cannot build the {component:?} client"))?;
            components::spawn(
                &mut running,
                *component,
                client,
                options,
                &host,
                components_stop.clone(),
            );
        }
    }

    let failed = tokio::select! {
        signal = wait_for_signal() => { signal?; None }
        Some(done) = running.join_next() => Some(done),
    };
    if let Some(done) = failed {
        // A component ended on its own: that is a failure of the whole server.
        components_stop.cancel();
        shutdown.cancel();
        let message = match done {
            Ok((component, Err(e))) => format!("{component:?} failed: {e:#}"),
            Ok((component, Ok(()))) => format!("{component:?} stopped unexpectedly"),
            Err(e) => format!("a component panicked: {e}"),
        };
        tracing::error!(%message, "stopping the server");
        if let Some(audit) = &audit {
            audit.flush().await;
        }
        store.close().await.context("flushing the log")?;
        anyhow::bail!(message);
    }
    tracing::info!("shutting down: stopping components");
    components_stop.cancel();
    // The kubelet stops its pods first, for up to its shutdown grace period.
    let components_grace = Duration::from_secs(10)
        + plan
            .options
            .as_ref()
            .filter(|_| plan.components.contains(&components::Component::Kubelet))
            .map_or(Duration::ZERO, |o| o.kubelet.shutdown_grace_period);
    let stop_components = async {
        while let Some(done) = running.join_next().await {
            if let Ok((component, Err(e))) = done {
                tracing::warn!(?component, error = %format!("{e:#}"), "component stopped with an error");
            }
        }
    };
    if tokio::time::timeout(components_grace, stop_components)
        .await
        .is_err()
    {
        tracing::warn!(?components_grace, "components still stopping; going on");
    }
    tracing::info!("shutting down: no new requests; finishing the ones in flight");
    shutdown.cancel();
    let drain = async {
        while servers.join_next().await.is_some() {}
        api.watchers.close();
        api.watchers.wait().await;
    };
    if tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after 10 s; closing anyway");
    }
    if let Some(audit) = &audit {
        audit.flush().await;
    }
    store.close().await.context("flushing the log")?;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Creates the built-in ingress controller's IngressClass `skiff` (marked default) unless it
/// exists: one a user changed or deleted and made again is left as it is.
async fn ensure_ingress_class(api: &skiff_api::server::ApiServer) -> Result<()> {
    let kind = &skiff_kinds::builtin::ingress_class::IngressClass;
    let mut object = skiff_proxy::ingress::default_class();
    api.prepare_create(kind, &mut object);
    match api
        .registry
        .create(skiff_kinds::Kind::info(kind), object, None)
        .await
    {
        Ok(_) | Err(skiff_api::error::Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The file holding the join token agents use, in the data dir.
pub const JOIN_TOKEN_FILE: &str = "join-token";

/// What the API server holds in its data dir besides the log: the PKI, the token file and the
/// service-account key. On a shared datastore the cluster's part of it is shared
/// ([`crate::bootstrap`]).
struct Secrets {
    pki: tls::Pki,
    authenticator: Arc<auth::Authenticator>,
    front_proxy: skiff_api::aggregation::FrontProxy,
    join_token: skiff_client::JoinToken,
    service_account_key: skiff_api::serviceaccount::SigningKey,
}

impl Secrets {
    /// Loads the secrets in `data_dir`, creating what is missing.
    fn load(data_dir: &std::path::Path, sans: &[String]) -> Result<Secrets> {
        let pki = tls::Pki::load_or_create(&data_dir.join("pki"), &tls::default_sans(sans))
            .context("cannot set up the cluster's certificates")?;
        let authenticator = Arc::new(
            auth::Authenticator::load_or_create(&data_dir.join("tokens.csv"))
                .context("cannot set up the token file")?,
        );
        let front_proxy = pki
            .front_proxy()
            .context("cannot set up the front proxy's certificates")?;
        let join_token = ensure_join_token(data_dir, &authenticator, pki.ca_pem())?;
        let service_account_key = skiff_api::serviceaccount::SigningKey::load_or_create(
            &data_dir
                .join("pki")
                .join(skiff_api::serviceaccount::keys::KEY_FILE),
        )
        .context("cannot set up the service-account signing key")?;
        Ok(Secrets {
            pki,
            authenticator,
            front_proxy,
            join_token,
            service_account_key,
        })
    }
}

/// The secrets of a server on a shared datastore: the cluster's, from the datastore when
/// another server sealed them there, else this server's own, sealed there for the next ones.
async fn shared_secrets(
    store: &dyn Store,
    data_dir: &std::path::Path,
    sans: &[String],
    given_token: Option<&str>,
) -> Result<Secrets> {
    use crate::bootstrap;
    let token = bootstrap::server_token(data_dir, given_token, false)?;
    loop {
        let fetched = bootstrap::fetch(store, data_dir, token.as_deref()).await?;
        let token = match &token {
            Some(token) => token.clone(),
            None => bootstrap::server_token(data_dir, None, true)?
                .context("no server token was made")?,
        };
        let before = bootstrap::present(data_dir)?;
        let secrets = Secrets::load(data_dir, sans)?;
        if bootstrap::publish(store, data_dir, &token, &fetched).await? {
            return Ok(secrets);
        }
        // Another server sealed its secrets first: what this start made gives way to them.
        tracing::info!("another API server sealed the cluster's secrets first; joining them");
        bootstrap::discard_new(data_dir, &before)?;
    }
}

/// The user whoever holds the join token authenticates as: a bootstrapper, who may only ask
/// for certificates (an agent asks for its kubelet's and its proxy's; see
/// `skiff_client::bootstrap`).
const JOIN_USER: &str = "system:bootstrap:skiff";
/// The user the join token stood for before agents had their own identities.
const OLD_AGENT_USER: &str = "skiff:agent";

fn join_user() -> auth::User {
    auth::User {
        name: JOIN_USER.to_string(),
        uid: "skiff-join".to_string(),
        groups: vec![skiff_api::authz::bootstrap::BOOTSTRAPPERS_GROUP.to_string()],
        ..Default::default()
    }
}

/// Returns the cluster's join token, creating its secret (a token of its own in the token file,
/// distinct from the admin token) on first start, and keeps `<data-dir>/join-token` current. A
/// token file from before node identities has the same secret under its old user, which gave
/// every agent the node role: it keeps the secret and becomes a bootstrapper.
fn ensure_join_token(
    data_dir: &std::path::Path,
    authenticator: &auth::Authenticator,
    ca_pem: &str,
) -> Result<skiff_client::JoinToken> {
    authenticator
        .replace_user(OLD_AGENT_USER, join_user())
        .context("cannot update the join token's user")?;
    let secret = match authenticator.token_of(JOIN_USER) {
        Some(secret) => secret,
        None => authenticator
            .add_token(join_user())
            .context("cannot create the join token")?,
    };
    let token = skiff_client::JoinToken::new(ca_pem.as_bytes(), &secret);
    skiff_api::tls::write_atomically(
        &data_dir.join(JOIN_TOKEN_FILE),
        format!("{token}\n").as_bytes(),
        0o600,
    )
    .context("cannot write the join token")?;
    Ok(token)
}

pub async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_kubernetes_flags() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn sizes_parse_as_quantities() {
        assert_eq!(parse_bytes("64Mi"), Ok(64 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_bytes("-1Mi").unwrap_err().contains("negative"));
        assert!(parse_bytes("lots").unwrap_err().contains("64Mi"));
    }

    #[test]
    fn data_dir_defaults_under_the_users_data_directory() {
        let dir = default_data_dir().unwrap();
        assert!(dir.ends_with("skiff"));
    }
}

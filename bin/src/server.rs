//! `skiff server` and `skiff apiserver`: opens the data dir (the log, the PKI, the tokens), serves
//! the Kubernetes API over HTTPS, writes the admin kubeconfig, and shuts down gracefully on
//! SIGINT/SIGTERM (stop accepting, finish in-flight requests, flush the log, exit 0).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use skiff_api::{auth, kubeconfig, tls};
use skiff_store::Store;
use tokio_util::sync::CancellationToken;

/// Flags of `skiff server` and `skiff apiserver`.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
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

    /// How often the history retention policy runs.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "SKIFF_COMPACT_INTERVAL")]
    pub compact_interval: Duration,
}

/// What runs in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Everything (the components join as their issues land).
    AllInOne,
    /// The API server alone.
    ApiServerOnly,
}

/// Parses `90s`, `5m`, `1h30m`, `2d`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let signed: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("not a duration ({e}); use e.g. 90s, 5m, 1h30m"))?;
    Duration::try_from(signed).map_err(|_| "a duration cannot be negative".to_string())
}

fn default_data_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("skiff"));
    }
    let home =
        std::env::var_os("HOME").context("neither --data-dir, XDG_DATA_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/share/skiff"))
}

/// The file the admin kubeconfig is written to, in the data dir.
pub const KUBECONFIG_FILE: &str = "admin.kubeconfig";

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(args: ServerArgs, mode: Mode) -> Result<()> {
    let data_dir = match args.data_dir.clone() {
        Some(dir) => dir,
        None => default_data_dir()?,
    };
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("cannot create data dir {}", data_dir.display()))?;
    tracing::info!(data_dir = %data_dir.display(), ?mode, "starting");

    let store_config = skiff_store::Config {
        retention: skiff_store::Retention {
            max_revisions: Some(args.history_revisions),
            max_age: Some(args.history_age),
            interval: args.compact_interval,
        },
        prefix_retention: skiff_api::server::HIGH_CHURN_PREFIXES
            .iter()
            .map(|(prefix, versions)| skiff_store::PrefixRetention {
                prefix: prefix.as_bytes().to_vec(),
                max_versions: *versions,
            })
            .collect(),
        ..skiff_store::Config::new(data_dir.join("db"))
    };
    let store = skiff_store::SledStore::open(store_config).map_err(|e| match e {
        skiff_store::Error::Locked { .. } => anyhow::anyhow!(
            "data dir {} is locked: another skiff server is already using it",
            data_dir.display()
        ),
        other => anyhow::Error::new(other)
            .context(format!("cannot open the log in {}", data_dir.display())),
    })?;
    let store: Arc<dyn Store> = Arc::new(store);

    let pki = tls::Pki::load_or_create(&data_dir.join("pki"), &tls::default_sans(&args.tls_san))
        .context("cannot set up the cluster's certificates")?;
    let authenticator = Arc::new(
        auth::Authenticator::load_or_create(&data_dir.join("tokens.csv"))
            .context("cannot set up the token file")?,
    );
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

    let shutdown = CancellationToken::new();
    let config = skiff_api::server::Config {
        event_ttl: args.event_ttl,
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
    skiff_api::kubernetes_service::reconcile(&api, advertise, bound.port())
        .await
        .context("cannot write the kubernetes Service")?;
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
    ));
    if let Some(listener) = insecure {
        tracing::warn!(address = %listener.local_addr()?, "serving plain HTTP without authentication on loopback");
        let plain = tls::serve_plain(
            listener,
            skiff_api::insecure_routes(api.clone()),
            shutdown.clone(),
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

    wait_for_signal().await?;
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
    store.close().await.context("flushing the log")?;
    tracing::info!("stopped cleanly");
    Ok(())
}

async fn wait_for_signal() -> Result<()> {
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
    fn data_dir_defaults_under_the_users_data_directory() {
        let dir = default_data_dir().unwrap();
        assert!(dir.ends_with("skiff"));
    }
}

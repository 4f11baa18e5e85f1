//! `skiff proxy`: the command-line [`Options`] and [`run`], which feeds the [`Proxier`] from
//! informers on Services and Endpoints, runs the built-in ingress controller
//! ([`crate::ingress`]) beside it unless `--no-ingress`, and says on every NetworkPolicy that
//! it is not enforced.
//!
//! Every change (and every `--sync-period`) leads to a sync from the informers' full caches, the
//! first one right after they have listed everything: the proxier starts with no listeners, so a
//! restarted proxy serves exactly what exists now and nothing that was deleted while it was down.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use skiff_client::{EventHandler, SharedInformerFactory};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::Result;
use crate::proxier::{Config, Proxier};

/// Flags of `skiff proxy` (and of the proxy inside `skiff server` / `skiff agent`).
#[derive(clap::Args, Clone, Debug)]
// Every component's flags are `Options`: clap's default group id (the struct name) would
// collide when `skiff server` flattens them together.
#[group(skip)]
pub struct Options {
    /// The address NodePorts listen on (kube-proxy listens on every node address).
    #[arg(long, default_value = "0.0.0.0")]
    pub nodeport_address: IpAddr,

    /// Do not open NodePort listeners at all.
    #[arg(long)]
    pub no_nodeports: bool,

    /// How long a UDP flow may be idle before it is closed (e.g. `250ms`, `30s`).
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    pub udp_timeout: Duration,

    /// Endpoints tried for one connection before it is refused (a refused connect moves on to
    /// the next endpoint).
    #[arg(long, default_value_t = 4)]
    pub connect_attempts: usize,

    /// How long one connect to an endpoint may take (e.g. `1s`).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// How often to sync even without changes, retrying listeners that could not be opened.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub sync_period: Duration,

    /// Do not run the built-in ingress controller (`skiff server --disable ingress` says this).
    #[arg(long)]
    pub no_ingress: bool,

    /// Where the ingress controller serves plain HTTP.
    #[arg(long, env = "SKIFF_INGRESS_HTTP_ADDRESS", default_value = "0.0.0.0:80")]
    pub ingress_http_address: SocketAddr,

    /// Where the ingress controller serves HTTPS (certificates by SNI from the Ingresses' TLS
    /// Secrets, else a self-signed one).
    #[arg(
        long,
        env = "SKIFF_INGRESS_HTTPS_ADDRESS",
        default_value = "0.0.0.0:443"
    )]
    pub ingress_https_address: SocketAddr,

    /// The address written into the served Ingresses' `status.loadBalancer` [default: the HTTP
    /// address's IP, or under `skiff server` and `skiff agent` when that is 0.0.0.0 the node's
    /// `--node-ip`; else 127.0.0.1].
    #[arg(long)]
    pub ingress_status_address: Option<IpAddr>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            nodeport_address: IpAddr::from([0, 0, 0, 0]),
            no_nodeports: false,
            udp_timeout: Duration::from_millis(250),
            connect_attempts: 4,
            connect_timeout: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            no_ingress: false,
            ingress_http_address: SocketAddr::from(([0, 0, 0, 0], 80)),
            ingress_https_address: SocketAddr::from(([0, 0, 0, 0], 443)),
            ingress_status_address: None,
        }
    }
}

impl Options {
    /// The ingress controller's configuration, or `None` with `--no-ingress`.
    pub fn ingress(&self) -> Option<crate::ingress::Config> {
        if self.no_ingress {
            return None;
        }
        let http_ip = self.ingress_http_address.ip();
        let status_address = self
            .ingress_status_address
            .unwrap_or(if http_ip.is_unspecified() {
                IpAddr::from([127, 0, 0, 1])
            } else {
                http_ip
            });
        Some(crate::ingress::Config {
            http_address: self.ingress_http_address,
            https_address: self.ingress_https_address,
            status_address,
            connect_timeout: self.connect_timeout,
            sync_period: self.sync_period,
        })
    }

    /// The proxier configuration these options ask for.
    pub fn config(&self) -> Config {
        Config {
            node_port_address: (!self.no_nodeports).then_some(self.nodeport_address),
            connect_attempts: self.connect_attempts,
            connect_timeout: self.connect_timeout,
            udp_idle_timeout: self.udp_timeout,
            ..Config::default()
        }
    }
}

/// Parses `250ms`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 250ms, 30s or 5m"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// Wakes the sync loop on any change; never blocks.
pub(crate) struct Trigger(pub(crate) Arc<Notify>);

impl<K> EventHandler<K> for Trigger {
    fn on_add(&self, _: &Arc<K>) {
        self.0.notify_one();
    }
    fn on_update(&self, _: &Arc<K>, _: &Arc<K>) {
        self.0.notify_one();
    }
    fn on_delete(&self, _: &Arc<K>) {
        self.0.notify_one();
    }
}

/// Runs the proxy until `shutdown` is cancelled, then closes every listener and connection.
pub async fn run(
    client: skiff_client::Client,
    options: Options,
    shutdown: CancellationToken,
) -> Result<()> {
    let mut helpers = tokio::task::JoinSet::new();
    if let Some(config) = options.ingress() {
        let (client, stop) = (client.clone(), shutdown.clone());
        helpers.spawn(async move {
            if let Err(e) = crate::ingress::run(client, config, stop).await {
                tracing::error!(error = %e, "the ingress controller stopped");
            }
        });
    }
    helpers.spawn(report_network_policies(client.clone(), shutdown.clone()));
    let factory = SharedInformerFactory::new(client);
    let services = factory.informer::<Service>();
    let endpoints = factory.informer::<Endpoints>();
    let changed = Arc::new(Notify::new());
    services.add_handler(Trigger(Arc::clone(&changed)));
    endpoints.add_handler(Trigger(Arc::clone(&changed)));
    factory.start(shutdown.clone());
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        _ = factory.wait_for_sync() => {}
    }
    let mut proxier = Proxier::new(options.config(), shutdown.clone());
    loop {
        let report = proxier
            .sync(services.cache().list(), endpoints.cache().list())
            .await;
        if report.opened + report.closed > 0 || !report.failed.is_empty() {
            tracing::info!(
                opened = report.opened,
                closed = report.closed,
                failed = report.failed.len(),
                "proxy synced"
            );
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = changed.notified() => {}
            () = tokio::time::sleep(options.sync_period) => {}
        }
    }
    proxier.shutdown().await;
    while helpers.join_next().await.is_some() {}
    Ok(())
}

/// The reason of the Event on each NetworkPolicy.
pub const NETWORK_POLICY_NOT_ENFORCED: &str = "NetworkPolicyNotEnforced";

/// Says on each NetworkPolicy, once per proxy, with a Warning Event, that nothing enforces it:
/// skiff stores NetworkPolicies but filters no pod traffic. In a task of its own so that a
/// proxy not allowed to read them still proxies.
async fn report_network_policies(client: skiff_client::Client, shutdown: CancellationToken) {
    let factory = SharedInformerFactory::new(client.clone());
    let policies = factory.informer::<NetworkPolicy>();
    let changed = Arc::new(Notify::new());
    policies.add_handler(Trigger(Arc::clone(&changed)));
    factory.start(shutdown.clone());
    let recorder = skiff_client::events::Recorder::new(client, "skiff-proxy");
    let mut told: BTreeSet<String> = BTreeSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = changed.notified() => {}
        }
        for policy in policies.cache().list() {
            let uid = policy.metadata.uid.clone().unwrap_or_default();
            if !told.insert(uid) {
                continue;
            }
            recorder
                .record(
                    &skiff_client::events::reference(&*policy),
                    skiff_client::events::EventType::Warning,
                    NETWORK_POLICY_NOT_ENFORCED,
                    "skiff stores NetworkPolicies but does not enforce them: traffic to and from \
                     the selected pods is not restricted",
                )
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn options_parse_with_kubernetes_defaults() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            options: Options,
        }
        let cli = Cli::parse_from(["proxy"]);
        let config = cli.options.config();
        assert_eq!(config.udp_idle_timeout, Duration::from_millis(250));
        assert_eq!(config.node_port_address, Some(IpAddr::from([0, 0, 0, 0])));
        let cli = Cli::parse_from([
            "proxy",
            "--nodeport-address",
            "127.0.0.1",
            "--udp-timeout",
            "2s",
            "--connect-attempts",
            "2",
        ]);
        let config = cli.options.config();
        assert_eq!(config.node_port_address, Some(IpAddr::from([127, 0, 0, 1])));
        assert_eq!(config.udp_idle_timeout, Duration::from_secs(2));
        assert_eq!(config.connect_attempts, 2);
        let cli = Cli::parse_from(["proxy", "--no-nodeports"]);
        assert_eq!(cli.options.config().node_port_address, None);
    }
}

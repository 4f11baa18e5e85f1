//! `skiff proxy`: the command-line [`Options`] and [`run`], which feeds the [`Proxier`] from
//! informers on Services and Endpoints.
//!
//! Every change (and every `--sync-period`) leads to a sync from the informers' full caches, the
//! first one right after they have listed everything: the proxier starts with no listeners, so a
//! restarted proxy serves exactly what exists now and nothing that was deleted while it was down.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
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
        }
    }
}

impl Options {
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
struct Trigger(Arc<Notify>);

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
    Ok(())
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

//! Command-line options of the controllers (`skiff controllers`, and `skiff server`'s embedded
//! controller manager), with kube-controller-manager's defaults.

use std::time::Duration;

use crate::manager::{self, CONTROLLERS};
use crate::{Error, Result};

/// Options of the controller manager.
#[derive(clap::Args, Clone, Debug)]
// Every component's flags are `Options`: clap's default group id (the struct name) would
// collide when `skiff server` flattens them together.
#[group(skip)]
pub struct Options {
    /// Controllers to run: `*` for all, a name to add one, `-name` to leave one out (e.g.
    /// `*,-nodeipam`); the names are those of [`crate::manager::CONTROLLERS`].
    #[arg(
        long = "controllers",
        value_delimiter = ',',
        default_value = "*",
        help = controllers_help()
    )]
    pub controllers: Vec<String>,
    /// Workers per controller: how many objects of one kind are synced at once.
    #[arg(long = "concurrent-syncs", default_value_t = 5)]
    pub workers: usize,
    /// How long a node may go without renewing its Lease (or posting status) before it is
    /// marked Unknown and tainted unreachable (e.g. `40s`).
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,
    /// How often every node's health is checked again even without events.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_monitor_period: Duration,
    /// The pod range node IPAM hands `/node-cidr-mask-size` ranges out of.
    #[arg(long, default_value = "127.100.0.0/16")]
    pub cluster_cidr: String,
    /// The prefix length of each node's pod range.
    #[arg(long, default_value_t = 24)]
    pub node_cidr_mask_size: u8,
    /// How many times faster than real time the CronJob controller's clock runs, counted from
    /// when the controllers start: lets a test see an every-minute CronJob run twice in seconds.
    /// 1 everywhere else.
    #[arg(long, default_value_t = 1.0, hide = true)]
    pub cronjob_clock_rate: f64,
    /// Where the local-path provisioner keeps volumes on the nodes
    /// [default: `<data-dir>/storage` under `skiff server`].
    #[arg(long)]
    pub default_local_storage_path: Option<std::path::PathBuf>,
    /// The CA bundle published to every namespace as the ConfigMap `kube-root-ca.crt`
    /// [default: the one the API server serves at `/cacerts`].
    #[arg(long)]
    pub root_ca_file: Option<std::path::PathBuf>,
    /// The service-account signing key (PEM) the `serviceaccount-token` controller signs legacy
    /// tokens with [default under `skiff server`: `<data-dir>/pki/service-account.key`, the API
    /// server's]; without one, token Secrets are not filled.
    #[arg(long)]
    pub service_account_private_key_file: Option<std::path::PathBuf>,
    /// The CA certificate (PEM) the `csrsigning` controller signs approved requests with
    /// [default under `skiff server`: the cluster CA].
    #[arg(long)]
    pub cluster_signing_cert_file: Option<std::path::PathBuf>,
    /// The CA's private key (PEM).
    #[arg(long)]
    pub cluster_signing_key_file: Option<std::path::PathBuf>,
    /// The longest a signed certificate is valid (a request's `expirationSeconds` may ask for
    /// less).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    pub cluster_signing_duration: Duration,
    /// How often every HorizontalPodAutoscaler is synced.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_sync_period: Duration,
    /// For autoscalers without `behavior`: how long recommendations are remembered on the way
    /// down, the highest of them applied.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// How far from the target (as a fraction) usage may be before the autoscaler acts.
    #[arg(long, default_value_t = 0.1)]
    pub horizontal_pod_autoscaler_tolerance: f64,
    /// After a pod starts, how long its CPU is only counted once it is ready and has been
    /// measured over a whole window since.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_cpu_initialization_period: Duration,
    /// How long after a pod starts a not-ready pod is taken as never having been ready.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_initial_readiness_delay: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controllers: vec!["*".into()],
            workers: 5,
            node_monitor_grace_period: Duration::from_secs(40),
            node_monitor_period: Duration::from_secs(5),
            cluster_cidr: "127.100.0.0/16".into(),
            node_cidr_mask_size: 24,
            cronjob_clock_rate: 1.0,
            default_local_storage_path: None,
            root_ca_file: None,
            service_account_private_key_file: None,
            cluster_signing_cert_file: None,
            cluster_signing_key_file: None,
            cluster_signing_duration: Duration::from_secs(365 * 24 * 3600),
            horizontal_pod_autoscaler_sync_period: Duration::from_secs(15),
            horizontal_pod_autoscaler_downscale_stabilization: Duration::from_secs(300),
            horizontal_pod_autoscaler_tolerance: 0.1,
            horizontal_pod_autoscaler_cpu_initialization_period: Duration::from_secs(300),
            horizontal_pod_autoscaler_initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

impl Options {
    /// Whether the controller `name` runs; an error for names that do not exist.
    pub fn enabled(&self, name: &str) -> Result<bool> {
        let mut on = false;
        for item in &self.controllers {
            let item = item.trim();
            let (negate, n) = match item.strip_prefix('-') {
                Some(n) => (true, n),
                None => (false, item),
            };
            if n != "*" && !CONTROLLERS.iter().any(|c| c.name == n) {
                return Err(Error::UnknownController {
                    name: n.to_string(),
                    known: manager::names(),
                });
            }
            if n == name || (n == "*" && !negate) {
                on = !negate;
            }
        }
        Ok(on)
    }
}

/// The `--controllers` help, naming every controller of the table.
fn controllers_help() -> String {
    format!(
        "Controllers to run: `*` for all, a name to add one, `-name` to leave one out (e.g. \
         `*,-nodeipam`). Names: {}.",
        manager::names()
    )
}

/// Parses a duration like `40s`, `5m`, `1m30s` or `500ms` (a bare number is seconds).
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    Duration::try_from(d).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_selection() {
        let mut o = Options::default();
        assert!(o.enabled("deployment").unwrap());
        o.controllers = vec!["*".into(), "-nodeipam".into()];
        assert!(!o.enabled("nodeipam").unwrap());
        assert!(o.enabled("replicaset").unwrap());
        o.controllers = vec!["replicaset".into()];
        assert!(o.enabled("replicaset").unwrap());
        assert!(!o.enabled("deployment").unwrap());
        o.controllers = vec!["nope".into()];
        assert!(matches!(
            o.enabled("replicaset"),
            Err(Error::UnknownController { .. })
        ));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("40s").unwrap(), Duration::from_secs(40));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("soon").is_err());
    }
}

//! `--datastore-*`: where `skiff server` and `skiff apiserver` keep the log. The embedded sled
//! log in the data dir by default; an external etcd v3 cluster with `--datastore-endpoint`
//! (the data dir then holds only the PKI, the tokens and the admin kubeconfig).
//!
//! An etcd that cannot be reached at start is retried with a growing delay for
//! `--datastore-wait`, one log line per attempt, then a clear error; a prefix holding keys that
//! are not a skiff store's is refused at once (see `skiff_store::etcd`, "Ownership").

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use skiff_store::{Error, EtcdStore, etcd};

use crate::server::parse_duration;

/// The datastore flags of the API server.
#[derive(Debug, Clone, clap::Args)]
pub struct DatastoreArgs {
    /// Run on an external etcd v3 cluster instead of the embedded log: its client URLs,
    /// comma-separated (`https://a:2379,https://b:2379`; plain `http://` on loopback only).
    #[arg(long, value_delimiter = ',', env = "SKIFF_DATASTORE_ENDPOINT")]
    pub datastore_endpoint: Vec<String>,

    /// The CA that signs etcd's serving certificates (PEM) [default: the system's roots].
    #[arg(long, requires = "datastore_endpoint", env = "SKIFF_DATASTORE_CAFILE")]
    pub datastore_cafile: Option<PathBuf>,

    /// A client certificate for etcd's `--client-cert-auth` (PEM; with `--datastore-keyfile`).
    #[arg(long, requires = "datastore_keyfile", env = "SKIFF_DATASTORE_CERTFILE")]
    pub datastore_certfile: Option<PathBuf>,

    /// The key of `--datastore-certfile` (PEM).
    #[arg(long, requires = "datastore_certfile", env = "SKIFF_DATASTORE_KEYFILE")]
    pub datastore_keyfile: Option<PathBuf>,

    /// Every key lives under this etcd prefix (today's layout below it), so that several skiff
    /// clusters can share one etcd. Their prefixes must not be prefixes of one another
    /// (`/skiff-a` and `/skiff-b`, not `/skiff` and `/skiff2`): skiff refuses a prefix that
    /// holds keys it did not write.
    #[arg(long, default_value = "/skiff", env = "SKIFF_DATASTORE_PREFIX")]
    pub datastore_prefix: String,

    /// How long to keep retrying an etcd that cannot be reached at start before giving up.
    #[arg(long, default_value = "60s", value_parser = parse_duration, env = "SKIFF_DATASTORE_WAIT")]
    pub datastore_wait: Duration,

    /// etcd's `--max-request-bytes` (its default is 1.5 MiB): a larger write gets 413 here
    /// without a round trip. Raise it together with etcd's.
    #[arg(long, default_value_t = 1536 * 1024, env = "SKIFF_DATASTORE_MAX_REQUEST_BYTES")]
    pub datastore_max_request_bytes: usize,
}

impl DatastoreArgs {
    /// The etcd client configuration the flags select, or `None` for the embedded log. Checks
    /// what can be checked without etcd: schemes, plain HTTP beyond loopback, TLS files.
    pub fn etcd_config(&self, retention: skiff_store::Retention) -> Result<Option<etcd::Config>> {
        if self.datastore_endpoint.is_empty() {
            return Ok(None);
        }
        let mut secure = None;
        for endpoint in &self.datastore_endpoint {
            let (https, host) = split_endpoint(endpoint)?;
            if !https && !is_loopback(host) {
                bail!(
                    "etcd endpoint {endpoint:?}: plain http:// is for loopback only; use https:// \
                     with --datastore-cafile (and --datastore-certfile/--datastore-keyfile if etcd \
                     checks client certificates)"
                );
            }
            if secure.is_some_and(|s| s != https) {
                bail!("--datastore-endpoint mixes http:// and https:// endpoints; use one scheme");
            }
            secure = Some(https);
        }
        let tls_files = self.datastore_cafile.is_some() || self.datastore_certfile.is_some();
        let tls = match secure {
            Some(true) => Some(etcd::Tls {
                ca_file: self.datastore_cafile.clone(),
                cert_file: self.datastore_certfile.clone(),
                key_file: self.datastore_keyfile.clone(),
            }),
            _ if tls_files => {
                bail!("--datastore-cafile/--datastore-certfile need https:// endpoints")
            }
            _ => None,
        };
        if self.datastore_prefix.is_empty() {
            bail!("--datastore-prefix must not be empty (it would claim the whole etcd)");
        }
        let mut config = etcd::Config::new(self.datastore_endpoint.clone());
        config.tls = tls;
        config.prefix = self.datastore_prefix.as_bytes().to_vec();
        config.max_request_bytes = self.datastore_max_request_bytes;
        config.retention = retention;
        Ok(Some(config))
    }
}

/// Splits `http(s)://host:port[/..]` into whether it is HTTPS and its host.
fn split_endpoint(endpoint: &str) -> Result<(bool, &str)> {
    let (https, rest) = if let Some(rest) = endpoint.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = endpoint.strip_prefix("http://") {
        (false, rest)
    } else {
        bail!(
            "etcd endpoint {endpoint:?} needs a scheme: https://host:2379 (or http:// on loopback)"
        );
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    if host.is_empty() {
        bail!("etcd endpoint {endpoint:?} names no host");
    }
    Ok((https, host))
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Connects to etcd, retrying while it cannot be reached (or answers too slowly) for up to
/// `wait`, with one log line per failed attempt; any other error ends at once.
pub async fn connect(config: etcd::Config, wait: Duration) -> Result<EtcdStore> {
    let endpoints = config.endpoints.join(",");
    let prefix = String::from_utf8_lossy(&config.prefix).into_owned();
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    let mut delay = Duration::from_millis(500);
    let mut attempt = 1u32;
    loop {
        // An attempt gets at most what is left of the wait (etcd's client waits out its whole
        // connect timeout on a refused connection).
        let mut attempt_config = config.clone();
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        attempt_config.connect_timeout = config
            .connect_timeout
            .min(left)
            .max(Duration::from_millis(500));
        let error = match EtcdStore::connect(attempt_config).await {
            Ok(store) => {
                tracing::info!(%endpoints, %prefix, attempt, "connected to etcd");
                return Ok(store);
            }
            Err(e @ (Error::Unavailable { .. } | Error::Timeout { .. })) => e,
            Err(e @ Error::ForeignPrefix { .. }) => {
                return Err(
                    anyhow::Error::new(e).context(format!("refusing to use etcd at {endpoints}"))
                );
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot use etcd at {endpoints} (prefix {prefix:?})"
                )));
            }
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(anyhow::Error::new(error).context(format!(
                "cannot reach etcd at {endpoints}: gave up after {attempt} attempts in {:.0?} \
                 (--datastore-wait {wait:?})",
                now - started
            )));
        }
        let pause = delay.min(deadline - now);
        tracing::warn!(
            %endpoints, attempt, error = %error, retry_in = ?pause,
            "etcd cannot be reached yet; retrying (giving up after --datastore-wait {wait:?})"
        );
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            signal = crate::server::wait_for_signal() => {
                signal?;
                bail!("stopped while waiting for etcd at {endpoints}");
            }
        }
        delay = (delay * 2).min(Duration::from_secs(5));
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(endpoints: &[&str]) -> DatastoreArgs {
        DatastoreArgs {
            datastore_endpoint: endpoints.iter().map(|e| e.to_string()).collect(),
            datastore_cafile: None,
            datastore_certfile: None,
            datastore_keyfile: None,
            datastore_prefix: "/skiff".into(),
            datastore_wait: Duration::from_secs(1),
            datastore_max_request_bytes: 1 << 20,
        }
    }

    fn config(a: &DatastoreArgs) -> Result<Option<etcd::Config>> {
        a.etcd_config(skiff_store::Retention {
            max_revisions: None,
            max_age: None,
            interval: Duration::from_secs(10),
        })
    }

    #[test]
    fn endpoints_select_etcd_and_bad_ones_are_clear_errors() {
        assert!(config(&args(&[])).unwrap().is_none());
        let c = config(&args(&["http://127.0.0.1:2379", "http://[::1]:2379"]))
            .unwrap()
            .unwrap();
        assert_eq!(c.prefix, b"/skiff");
        assert_eq!(c.max_request_bytes, 1 << 20);
        assert!(c.tls.is_none());
        let tls = config(&args(&["https://a:2379", "https://b:2379"]))
            .unwrap()
            .unwrap();
        assert!(tls.tls.is_some());
        let err = |e: &[&str]| config(&args(e)).unwrap_err().to_string();
        assert!(err(&["http://10.0.0.5:2379"]).contains("loopback only"));
        assert!(err(&["127.0.0.1:2379"]).contains("needs a scheme"));
        assert!(err(&["https://a:2379", "http://127.0.0.1:2379"]).contains("mixes"));
        let mut ca_with_http = args(&["http://localhost:2379"]);
        ca_with_http.datastore_cafile = Some("/ca.pem".into());
        assert!(
            config(&ca_with_http)
                .unwrap_err()
                .to_string()
                .contains("https://")
        );
        let mut empty = args(&["http://localhost:2379"]);
        empty.datastore_prefix.clear();
        assert!(config(&empty).unwrap_err().to_string().contains("prefix"));
    }
}

//! Cluster DNS: the names of Services, their endpoints and pods under the cluster domain, served
//! over UDP and TCP from API watches, and every other name forwarded to the host's resolvers.
//!
//! A crate of its own because it is a component like the proxy or the scheduler (it reaches the
//! cluster only through `skiff-client`), and because it brings the DNS stack (hickory) that no
//! other component needs.
//!
//! # Layout
//! - [`zone`]: the pure model: Services, EndpointSlices and Pods → [`Zone`]; a question (name,
//!   type) → records, NODATA, NXDOMAIN or "not ours". Unit-tested without I/O.
//! - [`kube_dns`]: the `kube-dns` Service in `kube-system` and its endpoints, as JSON.
//! - [`server`]: the thin shell: hickory-server on a bound UDP socket and TCP listener, informers
//!   rebuilding the zone, the forwarder (hickory-resolver) for other names, and the registration
//!   of `kube-dns`.
//! - [`Options`] (flags of `skiff server`) and [`run`].
//!
//! # What answers what
//! Names in the cluster domain are answered from the zone, authoritatively, never forwarded: a
//! missing one is NXDOMAIN at once. Malformed queries (a message that does not parse, or not
//! exactly one question) get FORMERR. Other names, and reverse names of addresses the cluster
//! does not know, go to the upstream servers (`--dns-upstream`, else the nameservers of
//! `--dns-resolv-conf`); their answer, NXDOMAIN included, is relayed; an upstream that fails or
//! does not answer gives SERVFAIL.
//!
//! # Reaching it
//! The server listens on `--dns-bind-address`:`--dns-port` (loopback, port 1053 by default: no
//! privilege needed, clear of a host resolver on 53). The `kube-dns` Service's ClusterIP
//! (`--dns-service-ip`, 127.96.0.10 by default, the tenth address of the Service range as in
//! Kubernetes) serves port 53 over UDP and TCP through skiff's proxy, whose endpoints are this
//! server; that is the address the kubelet writes into pods' resolv.conf (`--cluster-dns`).

pub mod kube_dns;
pub mod server;
pub mod zone;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

pub use server::{Config, Listeners};
pub use zone::{Answer, QueryType, Zone};

/// What can go wrong in the DNS server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The UDP socket or TCP listener could not be bound.
    #[error("cannot listen for DNS on {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The `kube-dns` Service or its endpoints could not be written.
    #[error("cannot write the kube-dns Service")]
    Register {
        /// The API's error.
        #[source]
        source: kube::Error,
    },
}

/// The DNS server's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Flags of the cluster DNS server (in `skiff server`). The cluster domain is the kubelet's
/// `--cluster-domain`, one flag for both.
#[derive(clap::Args, Clone, Debug)]
// Every component's flags are `Options`: clap's default group id would collide.
#[group(skip)]
pub struct Options {
    /// The address the cluster DNS server listens on (UDP and TCP).
    #[arg(long, default_value = "127.0.0.1", env = "SKIFF_DNS_BIND_ADDRESS")]
    pub dns_bind_address: IpAddr,

    /// The cluster DNS server's port (0 picks a free one; the kube-dns Endpoints name the port
    /// bound).
    #[arg(long, default_value_t = 1053, env = "SKIFF_DNS_PORT")]
    pub dns_port: u16,

    /// The ClusterIP of the `kube-dns` Service in `kube-system` (port 53 through the proxy).
    #[arg(long, default_value = "127.96.0.10", env = "SKIFF_DNS_SERVICE_IP")]
    pub dns_service_ip: IpAddr,

    /// Servers that names outside the cluster domain are forwarded to (`IP` or `IP:PORT`,
    /// comma-separated) [default: the nameservers of --dns-resolv-conf].
    #[arg(long, value_delimiter = ',', value_parser = parse_upstream, env = "SKIFF_DNS_UPSTREAM")]
    pub dns_upstream: Vec<SocketAddr>,

    /// The resolver file whose nameservers are the upstreams when --dns-upstream is not given.
    #[arg(long, default_value = "/etc/resolv.conf")]
    pub dns_resolv_conf: PathBuf,

    /// TTL of the cluster's records and negative answers, in seconds.
    #[arg(long, default_value_t = 5)]
    pub dns_ttl: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dns_bind_address: IpAddr::from([127, 0, 0, 1]),
            dns_port: 1053,
            dns_service_ip: IpAddr::from([127, 96, 0, 10]),
            dns_upstream: Vec::new(),
            dns_resolv_conf: PathBuf::from("/etc/resolv.conf"),
            dns_ttl: 5,
        }
    }
}

/// `IP` (port 53) or `IP:PORT`.
pub fn parse_upstream(text: &str) -> Result<SocketAddr, String> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    text.parse::<SocketAddr>()
        .map_err(|_| format!("{text:?} is not an IP or IP:PORT"))
}

/// Binds the server as `options` say, registers `kube-dns` in front of it, and serves the zone of
/// `domain` until `shutdown`.
pub async fn run(
    client: skiff_client::Client,
    options: Options,
    domain: String,
    shutdown: CancellationToken,
) -> Result<()> {
    let listeners =
        Listeners::bind(SocketAddr::new(options.dns_bind_address, options.dns_port)).await?;
    let bound = listeners.local_addr()?;
    let upstreams = if options.dns_upstream.is_empty() {
        let text = std::fs::read_to_string(&options.dns_resolv_conf).unwrap_or_else(|e| {
            tracing::warn!(file = %options.dns_resolv_conf.display(), error = %e, "no upstream resolvers: names outside the cluster get SERVFAIL");
            String::new()
        });
        server::upstreams_from_resolv_conf(&text, bound)
    } else {
        options.dns_upstream.clone()
    };
    let advertised = match bound.ip() {
        ip if ip.is_unspecified() => SocketAddr::new(IpAddr::from([127, 0, 0, 1]), bound.port()),
        _ => bound,
    };
    let registration = {
        let client = client.clone();
        let shutdown = shutdown.clone();
        let service_ip = Some(options.dns_service_ip);
        async move {
            let mut delay = std::time::Duration::from_millis(200);
            loop {
                match server::register(&client, service_ip, advertised).await {
                    Ok(()) => {
                        tracing::info!(%advertised, service_ip = ?service_ip, "kube-dns Service points at the cluster DNS");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "cannot write kube-dns yet; retrying")
                    }
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(std::time::Duration::from_secs(10));
            }
        }
    };
    let task = tokio::spawn(registration);
    let config = Config {
        domain,
        ttl: options.dns_ttl,
        upstreams,
    };
    let result = server::run(client, config, listeners, shutdown).await;
    task.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_parse_with_and_without_port() {
        assert_eq!(
            parse_upstream("192.0.2.1"),
            Ok("192.0.2.1:53".parse().unwrap())
        );
        assert_eq!(
            parse_upstream("127.0.0.1:5300"),
            Ok("127.0.0.1:5300".parse().unwrap())
        );
        assert_eq!(
            parse_upstream("[::1]:5300"),
            Ok("[::1]:5300".parse().unwrap())
        );
        assert!(parse_upstream("dns.example").is_err());
    }

    #[test]
    fn flags_default_to_loopback_and_the_tenth_service_address() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            options: Options,
        }
        let cli = Cli::parse_from(["dns"]);
        let defaults = Options::default();
        assert_eq!(cli.options.dns_bind_address, defaults.dns_bind_address);
        assert_eq!(cli.options.dns_port, defaults.dns_port);
        assert_eq!(cli.options.dns_service_ip, defaults.dns_service_ip);
        let cli = Cli::parse_from([
            "dns",
            "--dns-upstream",
            "127.0.0.1:5300,192.0.2.9",
            "--dns-port",
            "0",
        ]);
        assert_eq!(cli.options.dns_upstream.len(), 2);
        assert_eq!(cli.options.dns_port, 0);
    }
}

//! Several API servers for one component: a TCP relay on loopback that passes each connection
//! to the first server that accepts it, in the order given, and stays with that server until it
//! stops accepting; then the next one takes the connections (k3s's agents run the same kind of
//! relay). A component started with `--server https://a:6443,https://b:6443` talks to the
//! relay's address, so every client it builds (kube-rs, reqwest, watches) fails over without
//! knowing: a watch cut by a dead server reconnects, and the reconnection reaches a live one.
//!
//! TLS runs end to end through the relay, which sees only bytes: the component verifies the
//! server it reaches against the cluster CA as before, under the name `127.0.0.1`, which every
//! skiff serving certificate covers. The servers must share one CA (they do on one datastore:
//! see the server's `--server-token`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use crate::{Error, Result};

/// How long one server gets to accept a connection before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The servers of a `--server` list, or `None` for a single server.
pub fn split(servers: &str) -> Option<Vec<String>> {
    let list: Vec<String> = servers
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    (list.len() > 1).then_some(list)
}

/// A running relay (it runs until the process ends).
#[derive(Debug, Clone)]
pub struct Balancer {
    local: SocketAddr,
    targets: Arc<Targets>,
}

impl Balancer {
    /// Starts a relay on a free loopback port for `servers` (URLs `https://host:port`).
    pub async fn start(servers: &[String]) -> Result<Balancer> {
        let addresses = servers
            .iter()
            .map(|server| host_port(server))
            .collect::<Result<Vec<_>>>()?;
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| Error::Config(format!("cannot listen on loopback for --server: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Config(e.to_string()))?;
        let targets = Arc::new(Targets {
            addresses,
            current: AtomicUsize::new(0),
        });
        tracing::info!(%local, servers = %servers.join(","), "relaying to the API servers");
        let relay = targets.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        let _ = client.set_nodelay(true);
                        let targets = relay.clone();
                        tokio::spawn(async move { targets.relay(client).await });
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the API server relay cannot accept");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Ok(Balancer { local, targets })
    }

    /// The URL components use instead of the servers'.
    pub fn url(&self) -> String {
        format!("https://{}", self.local)
    }

    /// The server (`host:port`) new connections go to now.
    pub fn current(&self) -> String {
        let targets = &self.targets;
        targets.addresses[targets.current.load(Ordering::Relaxed) % targets.addresses.len()].clone()
    }
}

#[derive(Debug)]
struct Targets {
    /// `host:port` of each server, in the order given.
    addresses: Vec<String>,
    /// The index of the server that accepted last.
    current: AtomicUsize,
}

impl Targets {
    /// Relays `client` to the current server, or the next that accepts.
    async fn relay(&self, mut client: TcpStream) {
        let Some(mut server) = self.dial().await else {
            return;
        };
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    }

    /// A connection to the current server or, failing that, to the next ones in turn.
    async fn dial(&self) -> Option<TcpStream> {
        let count = self.addresses.len();
        let start = self.current.load(Ordering::Relaxed);
        for step in 0..count {
            let index = (start + step) % count;
            let address = &self.addresses[index];
            let error =
                match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address.as_str()))
                    .await
                {
                    Ok(Ok(stream)) => {
                        let _ = stream.set_nodelay(true);
                        // A server gone silent ends the relayed connection, and so the client's.
                        crate::transport::Liveness::default().apply(&stream);
                        if index != start % count
                            && self
                                .current
                                .compare_exchange(
                                    start,
                                    index,
                                    Ordering::Relaxed,
                                    Ordering::Relaxed,
                                )
                                .is_ok()
                        {
                            tracing::warn!(server = %address, "switched to the next API server");
                        }
                        return Some(stream);
                    }
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => format!("no answer in {CONNECT_TIMEOUT:?}"),
                };
            tracing::debug!(server = %address, %error, "API server does not accept");
        }
        tracing::warn!(servers = %self.addresses.join(","), "no API server accepts a connection");
        None
    }
}

/// `host:port` of `https://host:port[/...]` (port 443 when not given).
fn host_port(server: &str) -> Result<String> {
    let bad = |why: &str| Error::Config(format!("server URL {server:?}: {why}"));
    let rest = server
        .strip_prefix("https://")
        .ok_or_else(|| bad("several servers must each be https://host:port"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let has_port = match authority.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => authority.contains(':'),
    };
    Ok(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:443")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[test]
    fn a_list_is_split_and_urls_become_addresses() {
        assert_eq!(split("https://a:6443"), None);
        assert_eq!(
            split("https://a:6443, https://b:6443,"),
            Some(vec!["https://a:6443".into(), "https://b:6443".into()])
        );
        assert_eq!(host_port("https://a:6443/x").unwrap(), "a:6443");
        assert_eq!(host_port("https://a").unwrap(), "a:443");
        assert_eq!(host_port("https://[::1]:6443").unwrap(), "[::1]:6443");
        assert_eq!(host_port("https://[::1]").unwrap(), "[::1]:443");
        assert!(host_port("http://a:6443").is_err());
        assert!(host_port("https://").is_err());
    }

    /// A listener for a server, and its URL.
    async fn listener() -> (TcpListener, String) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        (listener, url)
    }

    /// Serves `listener`, answering each connection's first four bytes with `name`.
    fn serve(listener: TcpListener, name: &'static str) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4];
                    if stream.read_exact(&mut buf).await.is_ok() {
                        let _ = stream.write_all(name.as_bytes()).await;
                    }
                });
            }
        })
    }

    async fn ask(balancer: &Balancer) -> Option<String> {
        let mut stream = TcpStream::connect(balancer.local).await.ok()?;
        stream.write_all(b"ping").await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        (!answer.is_empty()).then_some(answer)
    }

    #[tokio::test]
    async fn connections_go_to_the_first_server_then_fail_over_and_stay() {
        let (a, url_a) = listener().await;
        let (b, url_b) = listener().await;
        let address_a = a.local_addr().unwrap();
        let balancer = Balancer::start(&[url_a, url_b]).await.unwrap();
        let (server_a, server_b) = (serve(a, "a"), serve(b, "b"));
        assert_eq!(ask(&balancer).await.as_deref(), Some("a"));
        assert_eq!(ask(&balancer).await.as_deref(), Some("a"));
        // a goes away: its port refuses, and new connections reach b.
        server_a.abort();
        let _ = server_a.await;
        assert_eq!(ask(&balancer).await.as_deref(), Some("b"));
        assert_eq!(balancer.current(), b_address(&balancer));
        // a back again: connections stay with b while it accepts.
        let a_again = TcpListener::bind(address_a).await.unwrap();
        let server_a = serve(a_again, "a");
        assert_eq!(ask(&balancer).await.as_deref(), Some("b"));
        // b goes away: back to a.
        server_b.abort();
        let _ = server_b.await;
        assert_eq!(ask(&balancer).await.as_deref(), Some("a"));
        // Nobody: the connection is closed at once, without an answer.
        server_a.abort();
        let _ = server_a.await;
        assert_eq!(ask(&balancer).await, None);
    }

    fn b_address(balancer: &Balancer) -> String {
        balancer.targets.addresses[1].clone()
    }
}

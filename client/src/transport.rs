//! The HTTP stack under every client: kube-rs's own layers (base URI, credentials, extra
//! headers) over a hyper client whose TCP connections find out by themselves that the server is
//! gone without a word.
//!
//! A server that loses power, a cable pulled, a NAT or firewall that forgets a connection: the
//! peer's kernel sends no FIN or RST, so a connection looks alive until something times out.
//! Left to the defaults, a request written on such a connection waits for its response
//! ([`crate::config::RESPONSE_WITHIN`], a minute), and an idle pooled connection is found dead
//! only when a request goes out on it. Two socket options bound both in the kernel, as Go's
//! dialer (client-go's) and gRPC (etcd's clients) do:
//! - TCP keepalive: an idle connection is probed after [`KEEPALIVE_IDLE`], so a dead one is
//!   closed and leaves the pool before a request picks it;
//! - `TCP_USER_TIMEOUT`: a connection whose sent bytes stay unacknowledged for
//!   [`UNACKNOWLEDGED_WITHIN`] is aborted, so the request on it fails then, not at the response
//!   limit. A slow server does not trip it (its kernel acknowledges what it has not answered yet),
//!   and nor does a quiet watch (nothing is in flight).
//!
//! kube-rs builds its stack with a plain connector and no way to reach its sockets, so the client
//! is assembled here from kube-rs's public parts ([`ConfigExt`]) in the order its
//! `ClientBuilder::try_from` uses, without its debug-level tracing spans.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::{ClientBuilder, ConfigExt};
use tokio::net::TcpStream;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// How long a connection stays idle before its first keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// Between keepalive probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How long sent bytes (a request, a keepalive probe) may stay unacknowledged before the
/// connection is aborted.
pub const UNACKNOWLEDGED_WITHIN: Duration = Duration::from_secs(30);

/// How the client's TCP connections are kept: what [`KEEPALIVE_IDLE`] and
/// [`UNACKNOWLEDGED_WITHIN`] say (tests shorten them).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Liveness {
    pub keepalive_idle: Duration,
    pub keepalive_interval: Duration,
    pub unacknowledged_within: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            keepalive_idle: KEEPALIVE_IDLE,
            keepalive_interval: KEEPALIVE_INTERVAL,
            unacknowledged_within: UNACKNOWLEDGED_WITHIN,
        }
    }
}

impl Liveness {
    /// Sets this on a connected socket: keepalive, and the time limit on unacknowledged bytes
    /// (which also ends a connection whose keepalive probes go unanswered). Best effort: a socket
    /// that refuses an option keeps working without it.
    pub(crate) fn apply(&self, stream: &TcpStream) {
        let socket = socket2::SockRef::from(stream);
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(self.keepalive_idle)
            .with_interval(self.keepalive_interval);
        if let Err(error) = socket.set_tcp_keepalive(&keepalive) {
            tracing::debug!(%error, "cannot set TCP keepalive");
        }
        if let Err(error) = socket.set_tcp_user_timeout(Some(self.unacknowledged_within)) {
            tracing::debug!(%error, "cannot set TCP_USER_TIMEOUT");
        }
    }
}

/// The service under a client: requests to the server, answers with hyper's body.
pub(crate) type Stack = tower::util::BoxService<
    http::Request<kube::client::Body>,
    http::Response<hyper::body::Incoming>,
    BoxError,
>;

/// A kube-rs client stack on `config`: TLS as `config` says, over TCP connections kept by
/// `liveness`. kube-rs's own retry layer is left out (`config.default_retry`): the caller adds
/// the retries it wants. A kubeconfig's `proxy-url` is refused, as kube-rs refuses it without
/// its proxy features: skiff's components reach their API server directly.
pub(crate) fn client_builder(
    config: kube::Config,
    liveness: Liveness,
) -> crate::Result<ClientBuilder<Stack>> {
    if let Some(proxy) = &config.proxy_url {
        return Err(crate::Error::Config(format!(
            "proxy-url {proxy} is not supported: skiff components connect to the API server directly"
        )));
    }
    let mut tcp = HttpConnector::new();
    // https URLs go to the TLS connector above; this one only dials.
    tcp.enforce_http(false);
    let tcp = tcp.map_response(move |io: TokioIo<TcpStream>| {
        liveness.apply(io.inner());
        io
    });
    let tls = config.rustls_https_connector_with_connector(tcp)?;
    let mut timed = hyper_timeout::TimeoutConnector::new(tls);
    timed.set_connect_timeout(config.connect_timeout);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    timed.set_reset_reader_on_write(config.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(timed);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http)
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    /// Set in the copy of the test binary that [`in_own_network`] starts.
    const INSIDE: &str = "SKIFF_TEST_OWN_NETWORK";

    /// Runs the test `name` of this binary again in a network namespace of its own (`unshare
    /// --net`, as root), where it may drop packets with iptables without touching the machine's
    /// network, and checks that it passed there. Returns whether the caller is that copy (and
    /// so runs the test's body).
    fn in_own_network(name: &str) -> bool {
        if std::env::var_os(INSIDE).is_some() {
            command("ip", &["link", "set", "lo", "up"]);
            return true;
        }
        let output = std::process::Command::new("unshare")
            .args(["--net", "--"])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture"])
            .env(INSIDE, "1")
            .output()
            .expect("unshare (util-linux) runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "{name} in a network namespace of its own (needs root):\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        false
    }

    fn command(program: &str, args: &[&str]) {
        let status = std::process::Command::new(program)
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(status.success(), "{program} {args:?}: {status}");
    }

    /// Drops (`add`) or stops dropping every packet to `port`, without a word to the sender: a
    /// connection to it goes silent as one through a dead NAT or to a powered-off server does.
    fn silence(port: u16, add: bool) {
        let port = port.to_string();
        let action = if add { "-A" } else { "-D" };
        command(
            "iptables",
            &[action, "INPUT", "-p", "tcp", "--dport", &port, "-j", "DROP"],
        );
    }

    /// An HTTP/1.1 server on loopback that answers `/version` to every request on a connection;
    /// counts the connections it accepted.
    async fn server() -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if !line.is_empty() {
                            continue;
                        }
                        let body = r#"{"major":"1","minor":"32","gitVersion":"v1.32.0","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if write.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, accepted)
    }

    /// A client of `port` with short keepalive and unacknowledged-data limits, and a response
    /// limit far beyond them (so that only the socket options can end a silent request soon).
    fn client(port: u16) -> kube::Client {
        let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        let liveness = Liveness {
            keepalive_idle: Duration::from_secs(1),
            keepalive_interval: Duration::from_secs(1),
            unacknowledged_within: Duration::from_secs(3),
        };
        client_builder(config, liveness)
            .unwrap()
            .with_layer(&tower::timeout::TimeoutLayer::new(Duration::from_secs(300)))
            .build()
    }

    #[test]
    fn a_proxy_url_is_refused_not_ignored() {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.proxy_url = Some("http://127.0.0.1:3128".parse().unwrap());
        let Err(err) = client_builder(config, Liveness::default()) else {
            panic!("a client was built that would not go through the proxy");
        };
        assert!(err.to_string().contains("proxy-url"), "{err}");
    }

    /// For the copy of test `name` that runs in a network namespace of its own (see
    /// [`in_own_network`]): a server, and a client of it holding one pooled connection after a
    /// request answered. `None` in the test's first process, which only checks the copy.
    async fn connected(name: &str) -> Option<(u16, Arc<AtomicUsize>, kube::Client)> {
        if !in_own_network(name) {
            return None;
        }
        let (port, accepted) = server().await;
        let client = client(port);
        client
            .apiserver_version()
            .await
            .expect("the server answers");
        Some((port, accepted, client))
    }

    #[tokio::test]
    async fn a_request_on_a_connection_gone_silent_fails_long_before_the_response_limit() {
        let Some((port, accepted, client)) = connected(
            "transport::tests::a_request_on_a_connection_gone_silent_fails_long_before_the_response_limit",
        )
        .await
        else {
            return;
        };
        silence(port, true);
        let outcome = tokio::time::timeout(Duration::from_secs(60), client.apiserver_version())
            .await
            .expect("the request still waited after 60 s: the silent connection was not noticed");
        outcome.expect_err("an answer came through a connection that drops every packet");
        silence(port, false);
        client
            .apiserver_version()
            .await
            .expect("the next request, on a new connection, is answered");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "the aborted connection was used again"
        );
    }

    #[tokio::test]
    async fn an_idle_connection_gone_silent_leaves_the_pool_before_a_request_picks_it() {
        let Some((port, accepted, client)) = connected(
            "transport::tests::an_idle_connection_gone_silent_leaves_the_pool_before_a_request_picks_it",
        )
        .await
        else {
            return;
        };
        // Silent for longer than the idle time, the probes and their limit (1 + 3 s), with no
        // request: only keepalive can find the connection dead.
        silence(port, true);
        tokio::time::sleep(Duration::from_secs(8)).await;
        silence(port, false);
        client
            .apiserver_version()
            .await
            .expect("the server answers again");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "the request went out on the connection that had gone silent, not a new one"
        );
    }
}

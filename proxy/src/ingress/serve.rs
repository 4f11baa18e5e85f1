//! The ingress's HTTP and HTTPS listeners: a reverse proxy that looks up each request in the
//! current [`RouteTable`] and forwards it to an endpoint the [`LoadBalancer`] picks.
//!
//! The table is read per request (an `Arc` cloned under a short lock), so a change applies to the
//! next request of every connection, and established client connections stay up across changes.
//! Requests go to the endpoints over HTTP/1.1 through a pool of keep-alive connections per
//! endpoint; upgrades (WebSocket) are relayed both ways once the endpoint answers 101.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::routes::{Backend, RouteTable};
use crate::balancer::LoadBalancer;

/// A response body: the endpoint's, streamed, or one of ours.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// Idle keep-alive connections kept per endpoint.
const IDLE_PER_ENDPOINT: usize = 64;
/// How long an idle connection to an endpoint is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What every connection reads: the route table and the balancer.
pub struct Shared {
    table: RwLock<Arc<RouteTable>>,
    /// Round-robin and affinity over the ready endpoints of the routed Service ports.
    pub balancer: LoadBalancer,
    /// Keep-alive connections to the endpoints.
    client: Client<HttpConnector, Incoming>,
}

impl Shared {
    /// An empty table (everything 404) and no endpoints; a connect to an endpoint may take up
    /// to `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Shared {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(IDLE_PER_ENDPOINT)
            .build(connector);
        Shared {
            table: RwLock::default(),
            balancer: LoadBalancer::new(),
            client,
        }
    }

    /// The current table.
    pub fn table(&self) -> Arc<RouteTable> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Serves `table` from the next request on.
    pub fn set_table(&self, table: Arc<RouteTable>) {
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = table;
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(format!("{}\n", message.into())))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Headers that belong to one hop (RFC 9110 §7.6.1) and are not forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
];

/// The protocol a request asks to upgrade to, if it does.
fn upgrade_of(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// Removes the hop-by-hop headers, including those `Connection` names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::try_from(t.trim()).ok())
        .collect();
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
    for name in &named {
        headers.remove(name);
    }
}

/// Answers one request.
pub async fn handle(
    shared: Arc<Shared>,
    mut request: Request<Incoming>,
    peer: SocketAddr,
    scheme: &'static str,
) -> Result<Response<Body>, Infallible> {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let table = shared.table();
    let key = match table.route(&host, request.uri().path()) {
        None => return Ok(text(StatusCode::NOT_FOUND, "default backend - 404")),
        Some(Backend::Unavailable(why)) => {
            return Ok(text(StatusCode::SERVICE_UNAVAILABLE, why.as_str()));
        }
        Some(Backend::Service(key)) => key.clone(),
    };
    drop(table);
    let endpoint = match shared.balancer.pick(&key, peer.ip(), Instant::now(), false) {
        Ok(endpoint) => endpoint,
        Err(e) => return Ok(text(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    };

    // The request as the endpoint gets it: origin-form, HTTP/1.1, a Host, no hop-by-hop
    // headers, and who asked in X-Forwarded-*.
    let upgrade = upgrade_of(request.headers());
    let client_upgrade = upgrade.is_some().then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    parts.uri = match Uri::try_from(format!("http://{endpoint}{path}")) {
        Ok(uri) => uri,
        Err(e) => return Ok(text(StatusCode::BAD_REQUEST, e.to_string())),
    };
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    if let Ok(value) = HeaderValue::from_str(&host) {
        parts.headers.insert(header::HOST, value.clone());
        parts
            .headers
            .insert(HeaderName::from_static("x-forwarded-host"), value);
    }
    let forwarded_for = match parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
    {
        Some(earlier) => format!("{earlier}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded_for) {
        parts
            .headers
            .insert(HeaderName::from_static("x-forwarded-for"), value);
    }
    parts.headers.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static(scheme),
    );
    if let Some(protocol) = &upgrade {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, protocol.clone());
    }
    let forwarded = Request::from_parts(parts, body);

    let mut response = match shared.client.request(forwarded).await {
        Ok(response) => response,
        Err(e) if e.is_connect() => {
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("cannot connect to {key} at {endpoint}: {e}"),
            ));
        }
        Err(e) => {
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("{key} at {endpoint}: {e}"),
            ));
        }
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client_upgrade) = client_upgrade
    {
        let endpoint_upgrade = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            match tokio::try_join!(client_upgrade, endpoint_upgrade) {
                Ok((client, endpoint)) => {
                    let (mut client, mut endpoint) = (TokioIo::new(client), TokioIo::new(endpoint));
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut endpoint).await;
                }
                Err(e) => tracing::debug!(error = %e, "ingress: upgrade failed"),
            }
        });
        return Ok(response.map(|b| b.boxed()));
    }
    strip_hop_by_hop(response.headers_mut());
    Ok(response.map(|b| b.boxed()))
}

/// Serves one accepted connection (plain or TLS) until it ends or `shutdown` (then it finishes
/// the request in flight and closes).
async fn serve_connection<S>(
    io: S,
    shared: Arc<Shared>,
    peer: SocketAddr,
    scheme: &'static str,
    shutdown: CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |request| handle(shared.clone(), request, peer, scheme));
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, %peer, "ingress: connection ended");
            }
        }
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
        }
    }
}

/// Accepts plain HTTP connections on `listener` until `shutdown`.
pub async fn serve_http(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "ingress: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        tracker.spawn(serve_connection(
            stream,
            shared.clone(),
            peer,
            "http",
            shutdown.clone(),
        ));
    }
}

/// Accepts TLS connections on `listener` until `shutdown`, with the certificates `config`'s
/// resolver chooses by SNI.
pub async fn serve_https(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let acceptor = TlsAcceptor::from(config);
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "ingress: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, shared, stop) = (acceptor.clone(), shared.clone(), shutdown.clone());
        tracker.spawn(async move {
            let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
            match handshake.await {
                Ok(Ok(tls)) => serve_connection(tls, shared, peer, "https", stop).await,
                Ok(Err(e)) => tracing::debug!(error = %e, %peer, "ingress: TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "ingress: TLS handshake timed out"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key(header::ACCEPT));
    }

    #[test]
    fn upgrades_need_both_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(upgrade_of(&headers), None);
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert_eq!(
            upgrade_of(&headers),
            Some(HeaderValue::from_static("websocket"))
        );
    }
}

//! The `proxy` subresources of pods, services and nodes: `.../pods/[SCHEME:]NAME[:PORT]/proxy/PATH`
//! reaches PATH on the pod's IP, `.../services/[SCHEME:]NAME[:PORT]/proxy/PATH` on one ready
//! endpoint of the service's port, `/api/v1/nodes/NAME[:PORT]/proxy/PATH` on the node's kubelet
//! (with the API server's kubelet credentials) or another port of the node. This is what
//! `kubectl proxy`, `kubectl get --raw .../proxy/...` and dashboards use to reach in-cluster
//! HTTP servers through the API server.
//!
//! The pure part ([`split_name`], [`pod_location`], [`service_port_name`], [`service_location`],
//! [`node_location`], [`forwarded_headers`]) says where a request goes and what travels with it;
//! [`serve`] is the I/O shell: it sends the request on with its method, query, headers and body,
//! and streams the answer back as it comes, or joins the two connections when the request asks to
//! switch protocols (a WebSocket through a service). What the API server authenticated the client with
//! (`Authorization`, impersonation headers) never reaches the backend.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, header};
use k8s_openapi::api::core::v1::{Node, Pod, Service};

use crate::error::{Error, Result};
use crate::request::{Request, Response, Target};
use crate::server::ApiServer;

/// Where a proxied request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// `host:port` (`[v6]:port`).
    pub authority: String,
    /// Whether the backend is a kubelet that expects the API server's kubelet credentials.
    pub kubelet: bool,
}

/// Splits a proxy URL's name segment, `[SCHEME:]NAME[:PORT]`, as Kubernetes does: one part is
/// a name, two are a name and a port, three a scheme, a name and a port. The scheme is `http`,
/// `https` or empty.
pub fn split_name(segment: &str) -> Result<(&'static str, &str, &str)> {
    let parts: Vec<&str> = segment.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return Err(Error::BadRequest(format!("invalid name {segment:?}"))),
    };
    let scheme = match scheme {
        "" => "",
        "http" => "http",
        "https" => "https",
        other => {
            return Err(Error::BadRequest(format!(
                "invalid scheme {other:?} in {segment:?}: must be http or https"
            )));
        }
    };
    if name.is_empty() {
        return Err(Error::BadRequest(format!("invalid name {segment:?}")));
    }
    Ok((scheme, name, port))
}

/// `host:port`, bracketing IPv6 addresses.
fn authority(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn scheme_or_http(scheme: &'static str) -> &'static str {
    if scheme.is_empty() { "http" } else { scheme }
}

/// Where `pods/NAME[:PORT]/proxy` goes: the pod's IP and PORT (a number, or the name of one of
/// its containers' ports), else its first container's first port, else the scheme's own port.
pub fn pod_location(pod: &Pod, scheme: &'static str, port: &str) -> Result<Location> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
        .ok_or_else(|| {
            Error::BadRequest(format!("pod {name} has no IP address (is it running?)"))
        })?;
    let ports = || {
        pod.spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
    };
    let scheme = scheme_or_http(scheme);
    let number = if port.is_empty() {
        ports()
            .next()
            .map(|p| p.container_port)
            .unwrap_or(if scheme == "https" { 443 } else { 80 })
    } else if let Ok(number) = port.parse::<u16>() {
        i32::from(number)
    } else {
        ports()
            .find(|p| p.name.as_deref() == Some(port))
            .map(|p| p.container_port)
            .ok_or_else(|| {
                Error::BadRequest(format!("pod {name} has no container port named {port:?}"))
            })?
    };
    Ok(Location {
        scheme,
        authority: authority(ip, number),
        kubelet: false,
    })
}

/// The name of the port `services/NAME[:PORT]/proxy` asks for: the service port named PORT
/// (or numbered PORT; the only port when PORT is empty). An `ExternalName` Service has no
/// endpoints to proxy to.
pub fn service_port_name(service: &Service, port: &str) -> Result<String> {
    let name = service.metadata.name.as_deref().unwrap_or_default();
    if crate::backends::external_name(service).is_some() {
        return Err(Error::BadRequest(format!(
            "service {name} is of type ExternalName and has no endpoints to proxy to"
        )));
    }
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let service_port = if port.is_empty() && ports.len() == 1 {
        ports.first()
    } else {
        ports
            .iter()
            .find(|p| p.name.as_deref().unwrap_or_default() == port || p.port.to_string() == port)
    }
    .ok_or_else(|| {
        Error::Unavailable(format!(
            "no service port {port:?} found for service {name:?}"
        ))
    })?;
    Ok(service_port.name.clone().unwrap_or_default())
}

/// Where a request to Service `name` goes: one of the `ready` addresses of its port, chosen by
/// `pick` (given how many there are).
pub fn service_location(
    name: &str,
    ready: &[SocketAddr],
    scheme: &'static str,
    pick: impl FnOnce(usize) -> usize,
) -> Result<Location> {
    if ready.is_empty() {
        return Err(Error::Unavailable(format!(
            "no endpoints available for service {name:?}"
        )));
    }
    let chosen = ready[pick(ready.len()).min(ready.len() - 1)];
    Ok(Location {
        scheme: scheme_or_http(scheme),
        authority: chosen.to_string(),
        kubelet: false,
    })
}

/// Where `nodes/NAME[:PORT]/proxy` goes: the node's InternalIP (else its Hostname) and PORT, or
/// without one its kubelet's port, spoken to with the API server's kubelet credentials.
pub fn node_location(node: &Node, scheme: &'static str, port: &str) -> Result<Location> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let status = node.status.clone().unwrap_or_default();
    let addresses = status.addresses.unwrap_or_default();
    let of = |t: &str| {
        addresses
            .iter()
            .find(|a| a.type_ == t)
            .map(|a| a.address.clone())
    };
    let host = of("InternalIP")
        .or_else(|| of("Hostname"))
        .ok_or_else(|| Error::BadRequest(format!("node {name} has no address")))?;
    let kubelet_port = status
        .daemon_endpoints
        .and_then(|d| d.kubelet_endpoint)
        .map(|e| e.port)
        .filter(|p| *p != 0);
    let (number, kubelet) = if port.is_empty() {
        let port = kubelet_port
            .ok_or_else(|| Error::BadRequest(format!("node {name} has no kubelet endpoint")))?;
        (port, true)
    } else {
        let number: u16 = port
            .parse()
            .map_err(|_| Error::BadRequest(format!("invalid port {port:?} for node {name}")))?;
        let number = i32::from(number);
        (number, kubelet_port == Some(number))
    };
    Ok(Location {
        scheme: scheme_or_http(scheme),
        authority: authority(&host, number),
        kubelet,
    })
}

/// Hop-by-hop headers (RFC 9110 section 7.6.1), which belong to one connection, not to the
/// request or answer that crosses the proxy.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The headers that cross the proxy: all but the hop-by-hop ones and those the `Connection`
/// header names; with `upgrade`, `Connection` and `Upgrade` too, so that the backend sees the
/// request to switch protocols. `request` drops what authenticated the client to the API server
/// (`Authorization`, `Impersonate-*`) and the `Host` (the backend's own goes in its place).
pub fn forwarded_headers(headers: &HeaderMap, request: bool, upgrade: bool) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let keep = |name: &HeaderName| {
        let name = name.as_str();
        if upgrade && (name == "connection" || name == "upgrade") {
            return true;
        }
        if HOP_BY_HOP.contains(&name) || named.iter().any(|n| n == name) {
            return false;
        }
        !(request
            && (name == "authorization"
                || name == "host"
                || name == "content-length"
                || name.starts_with("impersonate-")))
    };
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        if keep(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// Whether the client asks to switch protocols.
pub(crate) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// The URL path and query the backend gets: the part of the request's path after `proxy`
/// (`/` when empty) and the request's query.
fn backend_path(target: &Target, request: &Request) -> String {
    let path = target.proxy_path.as_deref().unwrap_or_default();
    let path = if path.is_empty() { "/" } else { path };
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in request.query.pairs() {
        query.append_pair(key, value);
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    }
}

/// Serves a `proxy` subresource request (authorized by the routes).
pub async fn serve(server: &ApiServer, mut request: Request, target: &Target) -> Result<Response> {
    let segment = target.name.as_deref().unwrap_or_default();
    let (scheme, name, port) = split_name(segment)?;
    let ns = target.namespace.as_deref();
    let registry = &server.registry;
    let location = match (target.info.group, target.info.kind) {
        ("", "Pod") => {
            let info = &skiff_kinds::builtin::pod::INFO;
            let pod: Pod = registry.get_view(info, ns, name).await?;
            pod_location(&pod, scheme, port)?
        }
        ("", "Service") => {
            let info = &skiff_kinds::builtin::service::INFO;
            let service: Service = registry.get_view(info, ns, name).await?;
            let port_name = service_port_name(&service, port)?;
            let published =
                crate::backends::published(registry, ns.unwrap_or_default(), name, &port_name)
                    .await?;
            service_location(name, &published.ready, scheme, |n| {
                use rand::Rng;
                rand::rng().random_range(0..n)
            })?
        }
        ("", "Node") => {
            let info = &skiff_kinds::builtin::node::INFO;
            let node: Node = registry.get_view(info, None, name).await?;
            node_location(&node, scheme, port)?
        }
        _ => return Err(Error::NoRoute),
    };
    let path = backend_path(target, &request);
    let credentials = server
        .config
        .kubelet_token
        .as_deref()
        .filter(|_| location.kubelet);
    if let Some(client) = request
        .upgrade
        .take()
        .filter(|_| wants_upgrade(&request.headers))
    {
        if location.scheme != "http" {
            return Err(Error::BadRequest(
                "switching protocols through the proxy is supported over http only".into(),
            ));
        }
        let mut headers = forwarded_headers(&request.headers, true, true);
        if let Some(token) = credentials {
            headers.insert(header::AUTHORIZATION, bearer(token)?);
        }
        return match upgrade(
            server,
            &location.authority,
            &request.method,
            &path,
            headers,
            client,
        )
        .await?
        {
            Upgraded::Switched(reply) => Ok(reply),
            Upgraded::Refused(answer) => Ok(answer),
        };
    }
    let url = format!("{}://{}{}", location.scheme, location.authority, path);
    let mut call = proxy_client()
        .request(request.method.clone(), &url)
        .headers(forwarded_headers(&request.headers, true, false));
    if let Some(token) = credentials {
        call = call.bearer_auth(token);
    }
    if !request.body.is_empty() || !matches!(request.method, Method::GET | Method::HEAD) {
        call = call.body(request.body.clone());
    }
    let answer = call.send().await.map_err(|e| {
        Error::Unavailable(format!(
            "error trying to reach service: {}",
            std::error::Error::source(&e)
                .map(ToString::to_string)
                .unwrap_or_else(|| e.to_string())
        ))
    })?;
    let status = answer.status();
    let headers = forwarded_headers(answer.headers(), false, false);
    let mut reply = stream_body(answer);
    *reply.status_mut() = status;
    *reply.headers_mut() = headers;
    Ok(reply)
}

fn bearer(token: &str) -> Result<http::HeaderValue> {
    http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| Error::Internal("the kubelet token is not a valid header value".into()))
}

/// A response whose body is `answer`'s, forwarded chunk by chunk as it arrives (a followed log
/// or an event stream never ends on its own).
pub(crate) fn stream_body(answer: reqwest::Response) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        use futures::StreamExt;
        let mut body = answer.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(std::io::Error::other);
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                return;
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    warp::reply::Reply::into_response(warp::reply::stream(stream))
}

/// The HTTP client for proxied requests: redirects go back to the client, and backends' own
/// certificates are not checked (a pod's serving certificate names nothing the API server could
/// check it against; kube-apiserver does the same).
fn proxy_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .tls_danger_accept_invalid_certs(true)
            .build()
            .expect("the proxy's HTTP client builds")
    })
}

/// What a backend said to a request to switch protocols.
pub(crate) enum Upgraded {
    /// It switched: the 101 answer for the client; the connections are joined once both sides
    /// completed the upgrade.
    Switched(Response),
    /// It answered otherwise; the answer, its body read (up to 64 KiB).
    Refused(Response),
}

/// Sends a request to switch protocols to `authority` over a connection of its own, and when
/// the backend agrees, joins the client's connection to it byte for byte until either ends.
/// `headers` go as they are (the caller filtered them), with the backend's `Host`.
pub(crate) async fn upgrade(
    server: &ApiServer,
    authority: &str,
    method: &Method,
    path: &str,
    headers: HeaderMap,
    client: hyper::upgrade::OnUpgrade,
) -> Result<Upgraded> {
    let tcp = dial(authority).await?;
    upgrade_over(server, tcp, authority, method, path, headers, client).await
}

/// A TCP connection to `authority` (`host:port`), given up after ten seconds.
pub(crate) async fn dial(authority: &str) -> Result<tokio::net::TcpStream> {
    dial_to(authority, authority).await
}

/// A TCP connection to `to` (addresses are tried in turn), named `authority` in errors, given up
/// after ten seconds.
pub(crate) async fn dial_to(
    to: impl tokio::net::ToSocketAddrs,
    authority: &str,
) -> Result<tokio::net::TcpStream> {
    let dial = async {
        let tcp = tokio::net::TcpStream::connect(to).await?;
        let _ = tcp.set_nodelay(true);
        Ok::<_, std::io::Error>(tcp)
    };
    match tokio::time::timeout(Duration::from_secs(10), dial).await {
        Ok(Ok(tcp)) => Ok(tcp),
        Ok(Err(e)) => Err(Error::Unavailable(format!(
            "error dialing backend: dial tcp {authority}: {e}"
        ))),
        Err(_) => Err(Error::Unavailable(format!(
            "error dialing backend: dial tcp {authority}: timed out"
        ))),
    }
}

/// [`upgrade`] over a connection already made (`io`: TCP, or TLS to an aggregated API
/// server); `authority` is the backend's `Host`.
pub(crate) async fn upgrade_over<I>(
    server: &ApiServer,
    io: I,
    authority: &str,
    method: &Method,
    path: &str,
    headers: HeaderMap,
    client: hyper::upgrade::OnUpgrade,
) -> Result<Upgraded>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| Error::Unavailable(format!("error dialing backend: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(%e, "upgraded backend connection");
        }
    });
    let mut forward = http::Request::builder()
        .method(method.clone())
        .uri(path)
        .header(header::HOST, authority);
    if let Some(h) = forward.headers_mut() {
        h.extend(headers);
    }
    let forward = forward
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| Error::BadRequest(format!("building the backend request: {e}")))?;
    let mut answer = sender
        .send_request(forward)
        .await
        .map_err(|e| Error::Unavailable(format!("error dialing backend {authority}: {e}")))?;
    if answer.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        use http_body_util::BodyExt;
        let status = answer.status();
        let headers = forwarded_headers(answer.headers(), false, false);
        let body = http_body_util::Limited::new(answer.into_body(), 64 * 1024)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut reply = Response::new(body.into());
        *reply.status_mut() = status;
        *reply.headers_mut() = headers;
        reply.headers_mut().remove(header::CONTENT_LENGTH);
        return Ok(Upgraded::Refused(reply));
    }
    let backend = hyper::upgrade::on(&mut answer);
    let mut reply = Response::new(Default::default());
    *reply.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    *reply.headers_mut() = forwarded_headers(answer.headers(), false, true);
    server.watchers.spawn(async move {
        let (client, backend) = tokio::join!(client, backend);
        let (client, backend) = match (client, backend) {
            (Ok(client), Ok(backend)) => (client, backend),
            (client, backend) => {
                tracing::debug!(
                    client = client.is_ok(),
                    backend = backend.is_ok(),
                    "upgrade failed"
                );
                return;
            }
        };
        let mut client = hyper_util::rt::TokioIo::new(client);
        let mut backend = hyper_util::rt::TokioIo::new(backend);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
    });
    Ok(Upgraded::Switched(reply))
}

#[cfg(test)]
mod tests;

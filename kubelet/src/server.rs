//! The kubelet's HTTP server: `/healthz`, `/pods`, `/stats/summary`, container logs, and the streams of exec,
//! attach and port-forward.
//!
//! `GET /containerLogs/{namespace}/{pod}/{container}` takes the query of `pods/{name}/log`
//! (`follow`, `tailLines`, `sinceSeconds`, `sinceTime`, `previous`, `timestamps`, `limitBytes`);
//! the API server proxies `kubectl logs` here. Every path but `/healthz` needs
//! `Authorization: Bearer <token>` when a token is configured.
//!
//! A followed log streams new lines as they are written (polling the file, following rotation)
//! until the container stops.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use tokio_util::sync::CancellationToken;
use warp::Filter;
use warp::http::StatusCode;
use warp::reply::{Reply, Response};

use crate::logs::{self, ReadOptions};
use crate::pod::{self, Manager};
use crate::runtime::Runtime;

/// What the server reads.
#[derive(Clone)]
pub struct State {
    /// The pods of this node.
    pub manager: Manager,
    /// The runtime (whether a followed container still runs).
    pub runtime: Arc<dyn Runtime>,
    /// The kubelet's root directory (logs live under it).
    pub root_dir: PathBuf,
    /// The bearer token clients must present; `None` serves everyone.
    pub token: Option<String>,
    /// How often a followed log is polled for new lines.
    pub follow_poll: Duration,
    /// The node's name, for the summary.
    pub node_name: String,
    /// What the node and its containers use, kept by the housekeeping loop.
    pub stats: Arc<std::sync::Mutex<crate::stats::Tracker>>,
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    warp::reply::with_status(body.into(), status).into_response()
}

fn authorized(state: &State, header: Option<&str>) -> bool {
    match &state.token {
        None => true,
        Some(token) => header
            .and_then(|h| h.strip_prefix("Bearer "))
            .is_some_and(|t| t.trim() == token),
    }
}

/// The server's routes.
pub fn routes(
    state: State,
) -> impl Filter<Extract = (Response,), Error = std::convert::Infallible> + Clone {
    let with_state = {
        let state = state.clone();
        warp::any().map(move || state.clone())
    };
    let healthz = warp::path!("healthz")
        .and(warp::get())
        .map(|| text(StatusCode::OK, "ok"));
    let auth = with_state
        .clone()
        .and(warp::header::optional::<String>("authorization"))
        .and_then(|state: State, header: Option<String>| async move {
            if authorized(&state, header.as_deref()) {
                Ok(state)
            } else {
                Err(warp::reject::custom(Unauthorized))
            }
        });
    let pods = warp::path!("pods")
        .and(warp::get())
        .and(auth.clone())
        .map(|state: State| {
            let value = serde_json::json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {},
                "items": state.manager.pods(),
            });
            warp::reply::json(&value).into_response()
        });
    // The Summary API: CPU and memory of the node and of each pod's running containers.
    // Kubernetes' `only_cpu_and_memory` is accepted and is what is always served.
    let summary = warp::path!("stats" / "summary")
        .and(warp::get())
        .and(auth.clone())
        .map(|state: State| {
            let containers = state.runtime.list(None);
            let summary = state
                .stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .summary(&state.node_name, &containers);
            warp::reply::json(&summary).into_response()
        });
    let exec = warp::path!(String / String / String / String)
        .and(warp::get().or(warp::post()).unify())
        .and(auth.clone())
        .and(warp::query::<Vec<(String, String)>>())
        .and(warp::header::headers_cloned())
        .and(warp::ws().map(Some).or(warp::any().map(|| None)).unify())
        .and_then(
            |verb: String,
             namespace: String,
             name: String,
             container: String,
             state: State,
             query: Vec<(String, String)>,
             headers: warp::http::HeaderMap,
             ws: Option<warp::ws::Ws>| async move {
                let attach = match verb.as_str() {
                    "exec" => false,
                    "attach" => true,
                    _ => return Err(warp::reject::not_found()),
                };
                Ok(exec(
                    &state, attach, &namespace, &name, &container, &query, &headers, ws,
                ))
            },
        );
    let port_forward = warp::path!("portForward" / String / String)
        .and(warp::get().or(warp::post()).unify())
        .and(auth.clone())
        .and(
            warp::query::<Vec<(String, String)>>()
                .or(warp::any().map(Vec::new))
                .unify(),
        )
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<hyper::upgrade::OnUpgrade>())
        .and(warp::ws().map(Some).or(warp::any().map(|| None)).unify())
        .map(
            |namespace: String,
             name: String,
             state: State,
             query: Vec<(String, String)>,
             headers: warp::http::HeaderMap,
             upgrade: Option<hyper::upgrade::OnUpgrade>,
             ws: Option<warp::ws::Ws>| {
                port_forward(&state, &namespace, &name, &query, &headers, upgrade, ws)
            },
        );
    let logs = warp::path!("containerLogs" / String / String / String)
        .and(warp::get())
        .and(auth)
        .and(warp::query::<HashMap<String, String>>())
        .then(
            |namespace: String,
             name: String,
             container: String,
             state: State,
             query: HashMap<String, String>| async move {
                container_logs(&state, &namespace, &name, &container, &query)
            },
        );
    healthz
        .or(pods)
        .unify()
        .or(summary)
        .unify()
        .or(logs)
        .unify()
        .or(exec)
        .unify()
        .or(port_forward)
        .unify()
        .recover(|rejection: warp::Rejection| async move {
            if rejection.find::<Unauthorized>().is_some() {
                Ok::<_, std::convert::Infallible>(text(StatusCode::UNAUTHORIZED, "Unauthorized"))
            } else if rejection.is_not_found() {
                Ok(text(StatusCode::NOT_FOUND, "404 page not found"))
            } else {
                Ok(text(StatusCode::BAD_REQUEST, format!("{rejection:?}")))
            }
        })
        .unify()
}

#[derive(Debug)]
struct Unauthorized;
impl warp::reject::Reject for Unauthorized {}

/// Serves on `listener` until `shutdown`.
pub async fn serve(listener: tokio::net::TcpListener, state: State, shutdown: CancellationToken) {
    warp::serve(routes(state))
        .incoming(listener)
        .graceful(shutdown.cancelled_owned())
        .run()
        .await;
}

/// A `Status` body (streaming requests are answered as the API server would, since it passes
/// the kubelet's refusal through to the client).
fn status(code: StatusCode, reason: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message.into(),
        "reason": reason,
        "code": code.as_u16(),
    });
    warp::reply::with_status(warp::reply::json(&body), code).into_response()
}

/// The id of the running container `container` of a pod on this node, or the refusal.
fn running_container(
    state: &State,
    namespace: &str,
    name: &str,
    container: &str,
) -> Result<String, Response> {
    let Some(pod) = find_pod(state, namespace, name) else {
        return Err(status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("pod {namespace}/{name} not found on this node"),
        ));
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let known = crate::spec::has_container(&spec, container);
    if !known {
        return Err(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("container {container} is not valid for pod {name}"),
        ));
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    state
        .runtime
        .list(Some(&uid))
        .into_iter()
        .filter(|c| c.config.name == container && c.is_running())
        .max_by_key(|c| c.config.attempt)
        .map(|c| c.id)
        .ok_or_else(|| {
            status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("container {container} in pod {namespace}/{name} is not running"),
            )
        })
}

/// `/exec/{namespace}/{pod}/{container}`: a command in the container, and
/// `/attach/{namespace}/{pod}/{container}`: the container's main process, streamed over a
/// WebSocket (`v5.channel.k8s.io` or `v4.channel.k8s.io`, see [`crate::stream::channel`]). A
/// request that is not a WebSocket upgrade (kubectl's SPDY fallback) is refused with a
/// `Status`, after the checks of the pod and container so that their errors reach the user
/// either way.
#[allow(clippy::too_many_arguments)]
fn exec(
    state: &State,
    attach: bool,
    namespace: &str,
    name: &str,
    container: &str,
    query: &[(String, String)],
    headers: &warp::http::HeaderMap,
    ws: Option<warp::ws::Ws>,
) -> Response {
    use crate::stream::channel::{Options, Protocol};
    let id = match running_container(state, namespace, name, container) {
        Ok(id) => id,
        Err(refusal) => return refusal,
    };
    let pairs = query.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let options = match Options::parse(pairs, !attach) {
        Ok(options) => options,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    let Some(ws) = ws else {
        let asked = headers
            .get(warp::http::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no upgrade");
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "{} is served over WebSocket (v5.channel.k8s.io, v4.channel.k8s.io), not {asked}",
                if attach { "attach" } else { "exec" }
            ),
        );
    };
    let offered = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok());
    let Some(protocol) = Protocol::negotiate(offered) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "none of the offered WebSocket subprotocols is served (v5.channel.k8s.io, v4.channel.k8s.io)",
        );
    };
    let runtime = state.runtime.clone();
    let stream_options = crate::runtime::StreamOptions {
        stdin: options.stdin,
        stdout: options.stdout,
        stderr: options.stderr,
        tty: options.tty,
    };
    let command = options.command;
    let reply = ws.on_upgrade(move |socket| {
        crate::stream::run(socket, protocol, async move {
            if attach {
                runtime.attach(&id, stream_options).await
            } else {
                runtime.exec_stream(&id, &command, stream_options).await
            }
        })
    });
    warp::reply::with_header(reply, "sec-websocket-protocol", protocol.name()).into_response()
}

/// The WebSocket subprotocol of SPDY tunnelled in a WebSocket (kubectl 1.31+).
const SPDY_OVER_WEBSOCKET: &str = "SPDY/3.1+portforward.k8s.io";
/// The stream protocol of port-forward over SPDY.
const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

/// `/portForward/{namespace}/{pod}`: SPDY streams to the pod's ports (see
/// [`crate::stream::portforward`]), over a WebSocket tunnel (`SPDY/3.1+portforward.k8s.io`)
/// or a plain HTTP upgrade to `SPDY/3.1`; or the WebSocket channels of client libraries for the
/// ports the query names (see [`crate::stream::port_channels`]).
#[allow(clippy::too_many_arguments)]
fn port_forward(
    state: &State,
    namespace: &str,
    name: &str,
    query: &[(String, String)],
    headers: &warp::http::HeaderMap,
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    ws: Option<warp::ws::Ws>,
) -> Response {
    use crate::stream::portforward;
    let Some(pod) = find_pod(state, namespace, name) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("pod {namespace}/{name} not found on this node"),
        );
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let Some(address) = state
        .runtime
        .list(Some(&uid))
        .into_iter()
        .find(|c| c.is_running())
        .map(|c| c.config.pod_ip)
    else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("pod {namespace}/{name} has no running container to forward to"),
        );
    };
    let label = format!("{namespace}/{name}");
    let runtime = state.runtime.clone();
    let dial: portforward::Dial = Arc::new(move |port| {
        let runtime = runtime.clone();
        let uid = uid.clone();
        Box::pin(async move {
            runtime
                .port_forward(&uid, address, port)
                .await
                .map_err(|err| err.to_string())
        })
    });
    let offered: Vec<&str> = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    if let Some(ws) = ws {
        if !offered.contains(&SPDY_OVER_WEBSOCKET) {
            use crate::stream::port_channels::{self, Framing};
            let Some((framing, protocol)) = Framing::negotiate(&offered) else {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!(
                        "port-forward over WebSocket speaks {SPDY_OVER_WEBSOCKET}, {} or {}, not {offered:?}",
                        port_channels::BINARY_PROTOCOL,
                        port_channels::BASE64_PROTOCOL
                    ),
                );
            };
            let ports = match port_channels::ports(query) {
                Ok(ports) => ports,
                Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", message),
            };
            let reply = ws.on_upgrade(move |socket| {
                port_channels::serve(socket, framing, ports, dial, label)
            });
            return match protocol {
                Some(protocol) => {
                    warp::reply::with_header(reply, "sec-websocket-protocol", protocol)
                        .into_response()
                }
                None => reply.into_response(),
            };
        }
        let reply = ws.on_upgrade(move |socket| {
            let (input, output) = portforward::from_websocket(socket);
            portforward::serve(input, output, dial, label)
        });
        return warp::reply::with_header(reply, "sec-websocket-protocol", SPDY_OVER_WEBSOCKET)
            .into_response();
    }
    let spdy = headers
        .get(warp::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("SPDY/3.1"));
    let protocol_ok = headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim() == PORT_FORWARD_PROTOCOL);
    let Some(upgrade) = upgrade.filter(|_| spdy && protocol_ok) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "port-forward needs an upgrade to SPDY/3.1 with protocol {PORT_FORWARD_PROTOCOL}"
            ),
        );
    };
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let (input, output) = portforward::from_io(hyper_util::rt::TokioIo::new(upgraded));
                portforward::serve(input, output, dial, label).await;
            }
            Err(err) => tracing::debug!(%err, "port-forward upgrade"),
        }
    });
    warp::http::Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", PORT_FORWARD_PROTOCOL)
        .body(Default::default())
        .expect("a valid response")
}

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    query.get(key).is_some_and(|v| v == "true" || v == "1")
}

fn find_pod(state: &State, namespace: &str, name: &str) -> Option<Pod> {
    state.manager.pods().into_iter().find(|p| {
        p.metadata.namespace.as_deref() == Some(namespace)
            && p.metadata.name.as_deref() == Some(name)
    })
}

fn container_logs(
    state: &State,
    namespace: &str,
    name: &str,
    container: &str,
    query: &HashMap<String, String>,
) -> Response {
    let Some(pod) = find_pod(state, namespace, name) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{name} not found on this node"),
        );
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let known = crate::spec::has_container(&spec, container);
    if !known {
        return text(
            StatusCode::BAD_REQUEST,
            format!("container {container} is not valid for pod {name}"),
        );
    }
    let number = |key: &str| -> Result<Option<i64>, Response> {
        match query.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| text(StatusCode::BAD_REQUEST, format!("invalid {key} {v:?}"))),
        }
    };
    let (tail, since_seconds, limit) = match (
        number("tailLines"),
        number("sinceSeconds"),
        number("limitBytes"),
    ) {
        (Ok(t), Ok(s), Ok(l)) => (t, s, l),
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return r,
    };
    let since = match (since_seconds, query.get("sinceTime")) {
        (Some(s), _) => {
            Some(Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(s.max(0)))
        }
        (None, Some(t)) => match t.parse::<Timestamp>() {
            Ok(t) => Some(t),
            Err(_) => return text(StatusCode::BAD_REQUEST, format!("invalid sinceTime {t:?}")),
        },
        (None, None) => None,
    };
    let opts = ReadOptions {
        tail_lines: tail.map(|t| t.max(0) as usize),
        since,
        timestamps: flag(query, "timestamps"),
        limit_bytes: limit.map(|l| l.max(0) as usize),
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let dir = pod::log_dir(&state.root_dir, namespace, name, &uid);
    let (current, previous) = pod::container_logs(&dir, container);
    let previous_wanted = flag(query, "previous");
    let path = if previous_wanted {
        match previous {
            Some(p) => p,
            None => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "previous terminated container \"{container}\" in pod \"{name}\" not found"
                    ),
                );
            }
        }
    } else {
        match current {
            Some(p) => p,
            None => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
                    ),
                );
            }
        }
    };
    let initial = match logs::read(&path, &opts) {
        Ok(b) => b,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    if !flag(query, "follow") || previous_wanted {
        return warp::http::Response::builder()
            .header("content-type", "text/plain")
            .body(initial.into())
            .expect("valid response");
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    let runtime = state.runtime.clone();
    let poll = state.follow_poll;
    let attempt: Option<u32> = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse().ok());
    let container = container.to_string();
    let timestamps = opts.timestamps;
    tokio::spawn(async move {
        let mut tail = Tail::at_end(&path);
        if !initial.is_empty() && tx.send(Ok(initial)).await.is_err() {
            return;
        }
        loop {
            let running = runtime.list(Some(&uid)).iter().any(|c| {
                c.config.name == container && Some(c.config.attempt) == attempt && c.is_running()
            });
            let chunk = tail.poll(timestamps);
            if !chunk.is_empty() && tx.send(Ok(chunk)).await.is_err() {
                return;
            }
            if !running {
                // One last read after the exit was seen, then the stream ends like kubelet's.
                let rest = tail.poll(timestamps);
                if !rest.is_empty() {
                    let _ = tx.send(Ok(rest)).await;
                }
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = tx.closed() => return,
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut response = warp::reply::stream(stream).into_response();
    response
        .headers_mut()
        .insert("content-type", "text/plain".parse().expect("valid header"));
    response
}

/// Reads lines appended to a log file, following it across rotation (the file renamed away and
/// a new one created at the path).
struct Tail {
    path: PathBuf,
    file: Option<std::fs::File>,
    inode: u64,
    pos: u64,
    /// Bytes of an unfinished line.
    partial: Vec<u8>,
    /// Text of a `P` record waiting for its `F`.
    pending: String,
}

impl Tail {
    fn at_end(path: &Path) -> Self {
        let file = std::fs::File::open(path).ok();
        let (inode, pos) = file
            .as_ref()
            .and_then(|f| f.metadata().ok())
            .map(|m| (m.ino(), m.len()))
            .unwrap_or((0, 0));
        Self {
            path: path.to_path_buf(),
            file,
            inode,
            pos,
            partial: Vec::new(),
            pending: String::new(),
        }
    }

    /// New complete lines, rendered.
    fn poll(&mut self, timestamps: bool) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            self.read_more(&mut out, timestamps);
            // Rotated: the path now names another file. Finish the old one (done above), switch.
            match std::fs::metadata(&self.path) {
                Ok(m) if m.ino() != self.inode || m.len() < self.pos => {
                    self.file = std::fs::File::open(&self.path).ok();
                    self.inode = m.ino();
                    self.pos = 0;
                    self.partial.clear();
                }
                _ => return out,
            }
        }
    }

    fn read_more(&mut self, out: &mut Vec<u8>, timestamps: bool) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let mut buf = Vec::new();
        if file.seek(SeekFrom::Start(self.pos)).is_err() || file.read_to_end(&mut buf).is_err() {
            return;
        }
        self.pos += buf.len() as u64;
        self.partial.extend_from_slice(&buf);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let line = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            let Some(rec) = logs::parse_record(&line) else {
                continue;
            };
            self.pending.push_str(&rec.text);
            if rec.full {
                let text = std::mem::take(&mut self.pending);
                out.extend_from_slice(logs::render(rec.time, &text, timestamps).as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::{Stream, Writer};

    #[test]
    fn tail_follows_appends_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut w = Writer::open(&path, 200, 3).unwrap();
        w.write_line(Stream::Stdout, Timestamp::now(), b"before")
            .unwrap();
        let mut tail = Tail::at_end(&path);
        assert!(tail.poll(false).is_empty(), "starts at the end");
        w.write_line(Stream::Stdout, Timestamp::now(), b"one")
            .unwrap();
        assert_eq!(tail.poll(false), b"one\n");
        // Enough lines to rotate several times: none lost, none repeated.
        let mut seen = Vec::new();
        for i in 0..20 {
            w.write_line(Stream::Stderr, Timestamp::now(), format!("n{i}").as_bytes())
                .unwrap();
            if i % 2 == 0 {
                seen.extend(tail.poll(false));
            }
        }
        seen.extend(tail.poll(false));
        let expected: String = (0..20).map(|i| format!("n{i}\n")).collect();
        assert!(
            rotated_exists(&path),
            "the test must actually rotate the file"
        );
        assert_eq!(String::from_utf8(seen).unwrap(), expected);
    }

    fn rotated_exists(path: &Path) -> bool {
        let mut s = path.as_os_str().to_owned();
        s.push(".1");
        PathBuf::from(s).exists()
    }

    #[test]
    fn bearer_token_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let runtime: Arc<dyn Runtime> = Arc::new(
            crate::runtime::process::ProcessRuntime::open(crate::runtime::process::Config {
                state_dir: dir.path().join("c"),
                cgroup_root: None,
                log_max_size: 1 << 20,
                log_max_files: 1,
                health_program: "true".into(),
            })
            .unwrap(),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let manager = Manager::new(
            pod::Config {
                root_dir: dir.path().into(),
                host_ip: "127.0.0.1".parse().unwrap(),
                backoff: Default::default(),
                resync: Duration::from_secs(10),
                cluster_dns: Default::default(),
            },
            runtime.clone(),
            "127.100.0.0/24".parse().unwrap(),
            Arc::new(crate::spec::Sources::default()),
            tx,
            CancellationToken::new(),
        )
        .unwrap();
        let state = State {
            manager,
            runtime,
            root_dir: dir.path().into(),
            token: Some("s3cret".into()),
            follow_poll: Duration::from_millis(50),
            node_name: "n".into(),
            stats: Default::default(),
        };
        assert!(authorized(&state, Some("Bearer s3cret")));
        assert!(!authorized(&state, Some("Bearer wrong")));
        assert!(!authorized(&state, None));
        let open = State {
            token: None,
            ..state
        };
        assert!(authorized(&open, None));
    }
}

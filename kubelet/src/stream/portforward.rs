//! `kubectl port-forward` sessions: SPDY streams in pairs (an error stream and a data stream
//! per forwarded connection, tied by the `requestid` header and naming the `port`), each pair
//! one connection to a port of the pod.
//!
//! The client opens both streams with SYN_STREAM and waits for each SYN_REPLY. The data stream
//! carries the connection's bytes both ways; its FIN is a half-close. The error stream carries
//! nothing unless forwarding failed (then a message), and the server ends it with FIN once the
//! connection is over: the client waits for that before it lets go of the connection. A
//! session stays open as long as the client keeps it (no idle cut-off), and ending it ends
//! every connection it carries.
//!
//! How a connection reaches the pod is the [`Dial`]'s business: a TCP connection to the pod's
//! address, or a stream through the container runtime's own server (CRI `PortForward`), which
//! reaches ports the pod listens on at its loopback address too.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::spdy::{self, FLAG_FIN, Frame, HeaderCodec};
use crate::runtime::{StreamReader, StreamWriter};

/// Bytes from the client, as they come (an upgraded connection's reads, or WebSocket messages).
pub type Input = Pin<Box<dyn Stream<Item = std::io::Result<Vec<u8>>> + Send>>;
/// Bytes to the client.
pub type Output = Pin<Box<dyn Sink<Vec<u8>, Error = std::io::Error> + Send>>;

/// Opens one connection to a port of the pod: the halves to read from and write to, or why not.
pub type Dial = Arc<
    dyn Fn(u16) -> futures::future::BoxFuture<'static, Result<(StreamReader, StreamWriter), String>>
        + Send
        + Sync,
>;

/// Bytes read from the pod per DATA frame.
const CHUNK: usize = 32 * 1024;

/// What the writer task sends.
enum Out {
    /// A frame already encoded.
    Frame(Vec<u8>),
    /// A SYN_REPLY for this stream (its header block is compressed in order by the writer).
    Reply(u32),
}

/// One forwarded connection being set up: its two streams as they arrive.
#[derive(Default)]
struct Pending {
    port: u16,
    data: Option<u32>,
    error: Option<u32>,
}

/// Serves one port-forward session, each connection opened by `dial` (`pod` names the pod in
/// errors), until the client ends it.
pub async fn serve(mut input: Input, mut output: Output, dial: Dial, pod: String) {
    let (out_tx, mut out_rx) = mpsc::channel::<Out>(64);
    let writer = tokio::spawn(async move {
        let mut codec = HeaderCodec::default();
        while let Some(out) = out_rx.recv().await {
            let bytes = match out {
                Out::Frame(bytes) => bytes,
                Out::Reply(id) => spdy::syn_reply(id, 0, &codec.encode(&[])),
            };
            if output.send(bytes).await.is_err() {
                return;
            }
        }
        let _ = output.close().await;
    });
    let mut codec = HeaderCodec::default();
    let mut buf = Vec::new();
    let mut pending: HashMap<String, Pending> = HashMap::new();
    // Data stream id to the sender of its bytes toward the pod (None: FIN).
    let mut to_pod: HashMap<u32, mpsc::Sender<Vec<u8>>> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut last_stream = 0;
    'session: while let Some(chunk) = input.next().await {
        let Ok(chunk) = chunk else { break };
        buf.extend_from_slice(&chunk);
        loop {
            let frame = match spdy::decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(err) => {
                    tracing::debug!(%err, "port-forward: bad frame, ending the session");
                    break 'session;
                }
            };
            match frame {
                Frame::SynStream { id, headers, .. } => {
                    last_stream = id;
                    let pairs = match codec.decode(&headers) {
                        Ok(pairs) => pairs,
                        Err(err) => {
                            tracing::debug!(%err, "port-forward: bad headers, ending the session");
                            break 'session;
                        }
                    };
                    let header = |name: &str| {
                        pairs
                            .iter()
                            .find(|(n, _)| n == name)
                            .map(|(_, v)| v.as_str())
                            .unwrap_or("")
                    };
                    let Ok(port) = header("port").parse::<u16>() else {
                        let _ = out_tx.send(Out::Frame(spdy::rst_stream(id, 1))).await;
                        continue;
                    };
                    let request = header("requestid").to_string();
                    let kind = header("streamtype").to_string();
                    if out_tx.send(Out::Reply(id)).await.is_err() {
                        break 'session;
                    }
                    let entry = pending.entry(request.clone()).or_default();
                    entry.port = port;
                    match kind.as_str() {
                        "data" => entry.data = Some(id),
                        "error" => entry.error = Some(id),
                        _ => {
                            let _ = out_tx.send(Out::Frame(spdy::rst_stream(id, 1))).await;
                            continue;
                        }
                    }
                    if let (Some(data), Some(error)) = (entry.data, entry.error) {
                        let port = entry.port;
                        pending.remove(&request);
                        let (tx, rx) = mpsc::channel(16);
                        to_pod.insert(data, tx);
                        tasks.spawn(forward(
                            dial.clone(),
                            port,
                            data,
                            error,
                            rx,
                            out_tx.clone(),
                            pod.clone(),
                        ));
                    }
                }
                Frame::Data { id, flags, data } => {
                    if let Some(tx) = to_pod.get(&id)
                        && !data.is_empty()
                        && tx.send(data).await.is_err()
                    {
                        to_pod.remove(&id);
                    }
                    if flags & FLAG_FIN != 0 {
                        to_pod.remove(&id);
                    }
                }
                Frame::RstStream { id, .. } => {
                    to_pod.remove(&id);
                }
                Frame::Headers { headers, .. } => {
                    // Keeps the inflater in step; nothing to act on.
                    if codec.decode(&headers).is_err() {
                        break 'session;
                    }
                }
                Frame::Ping(id) => {
                    if out_tx.send(Out::Frame(spdy::ping(id))).await.is_err() {
                        break 'session;
                    }
                }
                Frame::GoAway => break 'session,
                Frame::SynReply { .. } | Frame::Other(_) => {}
            }
        }
        // Reap finished connections as we go.
        while tasks.try_join_next().is_some() {}
    }
    tasks.abort_all();
    let _ = out_tx.send(Out::Frame(spdy::go_away(last_stream))).await;
    drop(out_tx);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer).await;
}

/// One forwarded connection: dials the pod and copies both ways; reports a failure (to
/// connect, or of the connection later) on the error stream; ends both streams when done.
async fn forward(
    dial: Dial,
    port: u16,
    data: u32,
    error: u32,
    mut from_client: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<Out>,
    pod: String,
) {
    let report = |why: String| {
        let message = format!("error forwarding port {port} to pod {pod}: {why}");
        Out::Frame(spdy::data(error, 0, message.as_bytes()))
    };
    let (mut pod_read, mut pod_write) = match dial(port).await {
        Ok(halves) => halves,
        Err(why) => {
            let _ = out.send(report(why)).await;
            let _ = out.send(Out::Frame(spdy::data(error, FLAG_FIN, &[]))).await;
            let _ = out.send(Out::Frame(spdy::data(data, FLAG_FIN, &[]))).await;
            return;
        }
    };
    let upstream = async move {
        while let Some(bytes) = from_client.recv().await {
            if pod_write.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = pod_write.shutdown().await;
    };
    let out_down = out.clone();
    let downstream = async move {
        let mut chunk = vec![0u8; CHUNK];
        let failure = loop {
            match pod_read.read(&mut chunk).await {
                Ok(0) => break None,
                Err(err) => break Some(err.to_string()),
                Ok(n) => {
                    if out_down
                        .send(Out::Frame(spdy::data(data, 0, &chunk[..n])))
                        .await
                        .is_err()
                    {
                        return None;
                    }
                }
            }
        };
        let _ = out_down
            .send(Out::Frame(spdy::data(data, FLAG_FIN, &[])))
            .await;
        failure
    };
    // The connection is over when the pod closed its side; the client's half-close alone
    // leaves the answer still to come.
    let upstream = tokio::spawn(upstream);
    let failure = downstream.await;
    upstream.abort();
    if let Some(why) = failure {
        let _ = out.send(report(why)).await;
    }
    let _ = out.send(Out::Frame(spdy::data(error, FLAG_FIN, &[]))).await;
}

/// Adapts an upgraded connection to [`Input`] and [`Output`].
pub fn from_io<IO>(io: IO) -> (Input, Output)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(io);
    let input = futures::stream::unfold(read, |mut read| async move {
        let mut chunk = vec![0u8; CHUNK];
        match read.read(&mut chunk).await {
            Ok(0) => None,
            Ok(n) => {
                chunk.truncate(n);
                Some((Ok(chunk), read))
            }
            Err(e) => Some((Err(e), read)),
        }
    });
    let output = futures::sink::unfold(write, |mut write, bytes: Vec<u8>| async move {
        write.write_all(&bytes).await?;
        Ok::<_, std::io::Error>(write)
    });
    (Box::pin(input), Box::pin(output))
}

/// Adapts a WebSocket carrying SPDY (`SPDY/3.1+portforward.k8s.io`: binary messages are
/// pieces of the SPDY byte stream) to [`Input`] and [`Output`].
pub fn from_websocket(ws: warp::ws::WebSocket) -> (Input, Output) {
    use warp::ws::Message;
    let (sink, stream) = ws.split();
    let input = stream
        .take_while(|m| futures::future::ready(!matches!(m, Ok(m) if m.is_close())))
        .filter_map(|m| async move {
            match m {
                Ok(m) if m.is_binary() => Some(Ok(m.into_bytes().to_vec())),
                Ok(_) => None,
                Err(e) => Some(Err(std::io::Error::other(e))),
            }
        });
    let output = sink
        .sink_map_err(std::io::Error::other)
        .with(|bytes: Vec<u8>| futures::future::ready(Ok(Message::binary(bytes))));
    (Box::pin(input), Box::pin(output))
}

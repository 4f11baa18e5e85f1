//! A client of a container runtime's streaming server.
//!
//! CRI's `Exec`, `Attach` and `PortForward` do not stream themselves: each answers with a
//! one-time URL on the runtime's own HTTP server (containerd's listens on loopback), which
//! serves the streams the way kubelets served them to the API server before WebSocket: SPDY/3.1
//! over an HTTP upgrade, one SPDY stream per stdio stream (`v4.channel.k8s.io`), or a pair per
//! forwarded connection (`portforward.k8s.io`). The kubelet's own server speaks WebSocket to the
//! API server; for a CRI runtime it translates, turning the upstream streams into a
//! [`Session`] (or a forwarded connection's halves), as kube-apiserver translates its WebSocket
//! clients for SPDY kubelets.
//!
//! SPDY rather than the runtime's WebSocket because only SPDY ends one stream while the others
//! stay open: over `v4.channel.k8s.io` WebSocket a command cannot be told that its stdin ended,
//! and `kubectl cp` into a pod or `exec -i` fed from a file would never finish.
//!
//! One [`Connection`] owns the TCP connection: a reader task routes each DATA frame to the
//! stream it belongs to, a writer task sends frames in order (header blocks share one zlib
//! stream per direction, so they are compressed in the order they go out). Dropping the
//! connection's last handle ends both tasks and closes the socket, which is how the runtime
//! learns a client went away.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::sync::PollSender;

use super::channel;
use super::spdy::{self, FLAG_FIN, Frame, HeaderCodec};
use crate::runtime::{Session, StreamOptions, StreamReader, StreamWriter};

/// The remote-command protocol asked of the runtime (the one with exit codes and resize).
pub const EXEC_PROTOCOL: &str = "v4.channel.k8s.io";
/// The port-forward protocol.
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

/// How long dialling the runtime's server and its upgrade may take.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// The largest response head accepted from the runtime's server.
const MAX_HEAD: usize = 16 * 1024;
/// Bytes per DATA frame sent.
const CHUNK: usize = 32 * 1024;
/// DATA frames queued per inbound stream before the reader waits for its consumer.
const INBOUND_QUEUE: usize = 16;

/// What the writer task sends, in order.
enum Out {
    /// Open a stream with these headers (compressed by the writer, in wire order).
    Open(u32, Vec<(String, String)>),
    /// A frame already encoded.
    Frame(Vec<u8>),
}

/// Where each open stream's inbound data goes.
type Routes = Arc<Mutex<HashMap<u32, mpsc::Sender<Vec<u8>>>>>;

/// Ends the connection's tasks (and so closes its socket) when the last handle goes.
struct Tasks([AbortHandle; 2]);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// An upgraded SPDY connection to a runtime's streaming server.
pub struct Connection {
    out: mpsc::Sender<Out>,
    routes: Routes,
    next_id: AtomicU32,
    tasks: Arc<Tasks>,
}

/// The `scheme://host:port` and path of an absolute `http` URL.
fn split_url(url: &str) -> io::Result<(&str, &str)> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{why}: {url:?}"));
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("the runtime's stream URL is not plain http"))?;
    let (host, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(bad("the runtime's stream URL names no host"));
    }
    Ok((host, path))
}

/// The status code of a response head, and whether it agreed to `protocol`.
fn parse_head(head: &str, protocol: &str) -> Result<u16, String> {
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("the runtime's stream server sent no HTTP status: {head:?}"))?;
    if status != 101 {
        return Ok(status);
    }
    let agreed = lines
        .filter_map(|l| l.split_once(':'))
        .any(|(name, value)| {
            name.trim()
                .eq_ignore_ascii_case("x-stream-protocol-version")
                && value.trim() == protocol
        });
    if agreed {
        Ok(status)
    } else {
        Err(format!(
            "the runtime's stream server upgraded without agreeing to {protocol}"
        ))
    }
}

impl Connection {
    /// Dials `url` (an absolute `http` URL from a CRI streaming call) and upgrades to SPDY/3.1
    /// speaking `protocol`.
    pub async fn connect(url: &str, protocol: &str) -> io::Result<Connection> {
        let (host, path) = split_url(url)?;
        let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "the runtime's stream server");
        let (stream, leftover) = tokio::time::timeout(HANDSHAKE, async {
            let mut stream = TcpStream::connect(host).await?;
            stream.set_nodelay(true)?;
            let request = format!(
                "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\n\
                 Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\n\
                 Content-Length: 0\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await?;
            let mut buf = Vec::with_capacity(1024);
            let end = loop {
                if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
                if buf.len() > MAX_HEAD || stream.read_buf(&mut buf).await? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the runtime's stream server ended the connection without an answer",
                    ));
                }
            };
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status = parse_head(&head, protocol).map_err(io::Error::other)?;
            if status != 101 {
                let body = String::from_utf8_lossy(&buf[end..]);
                return Err(io::Error::other(format!(
                    "the runtime's stream server refused the upgrade ({status}): {}",
                    body.trim()
                )));
            }
            Ok((stream, buf.split_off(end)))
        })
        .await
        .map_err(|_| timed_out())??;
        let (read, write) = stream.into_split();
        let routes: Routes = Arc::default();
        let (out, out_rx) = mpsc::channel(64);
        let reader = tokio::spawn(read_loop(read, leftover, routes.clone(), out.clone()));
        let writer = tokio::spawn(write_loop(write, out_rx));
        Ok(Connection {
            out,
            routes,
            next_id: AtomicU32::new(1),
            tasks: Arc::new(Tasks([reader.abort_handle(), writer.abort_handle()])),
        })
    }

    /// Opens a stream with `headers`; its data is read from the [`Inbound`] and written
    /// through the [`Outbound`].
    pub async fn open(&self, headers: &[(&str, &str)]) -> io::Result<(Inbound, Outbound)> {
        let id = self.next_id.fetch_add(2, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
        self.routes.lock().expect("routes poisoned").insert(id, tx);
        let headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        self.out
            .send(Out::Open(id, headers))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        let inbound = Inbound {
            rx,
            buf: Vec::new(),
            at: 0,
            _keep: None,
        };
        let outbound = Outbound {
            id,
            tx: PollSender::new(self.out.clone()),
            finished: false,
            _keep: None,
        };
        Ok((inbound, outbound))
    }

    /// A handle that keeps the connection open while it lives.
    fn keep(&self) -> Option<Arc<Tasks>> {
        Some(self.tasks.clone())
    }
}

async fn write_loop(mut write: tokio::net::tcp::OwnedWriteHalf, mut rx: mpsc::Receiver<Out>) {
    let mut codec = HeaderCodec::default();
    while let Some(out) = rx.recv().await {
        let bytes = match out {
            Out::Frame(bytes) => bytes,
            Out::Open(id, headers) => {
                let pairs: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                spdy::syn_stream(id, 0, &codec.encode(&pairs))
            }
        };
        if write.write_all(&bytes).await.is_err() {
            return;
        }
    }
    let _ = write.shutdown().await;
}

async fn read_loop(
    mut read: tokio::net::tcp::OwnedReadHalf,
    mut buf: Vec<u8>,
    routes: Routes,
    out: mpsc::Sender<Out>,
) {
    'connection: loop {
        loop {
            let frame = match spdy::decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(err) => {
                    tracing::debug!(%err, "runtime stream: bad SPDY frame, ending the connection");
                    break 'connection;
                }
            };
            match frame {
                Frame::Data { id, flags, data } => {
                    let route = routes.lock().expect("routes poisoned").get(&id).cloned();
                    if let Some(route) = route
                        && !data.is_empty()
                        && route.send(data).await.is_err()
                    {
                        // Nobody reads this stream any more.
                        routes.lock().expect("routes poisoned").remove(&id);
                    }
                    if flags & FLAG_FIN != 0 {
                        routes.lock().expect("routes poisoned").remove(&id);
                    }
                }
                Frame::RstStream { id, .. } => {
                    routes.lock().expect("routes poisoned").remove(&id);
                }
                Frame::Ping(id) => {
                    let _ = out.send(Out::Frame(spdy::ping(id))).await;
                }
                Frame::SynStream { id, .. } => {
                    // The runtime has no business opening streams: refuse them.
                    let _ = out.send(Out::Frame(spdy::rst_stream(id, 3))).await;
                }
                Frame::SynReply { .. }
                | Frame::Headers { .. }
                | Frame::GoAway
                | Frame::Other(_) => {}
            }
        }
        match read.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    // Every stream ends with the connection.
    routes.lock().expect("routes poisoned").clear();
}

/// The runtime's side of one stream: its data as it comes, then end of file at its FIN (or
/// when the connection ends).
pub struct Inbound {
    rx: mpsc::Receiver<Vec<u8>>,
    buf: Vec<u8>,
    at: usize,
    _keep: Option<Arc<Tasks>>,
}

impl Inbound {
    /// What has arrived and not been read, without waiting.
    fn take_ready(&mut self) -> Vec<u8> {
        let mut out = self.buf.split_off(self.at);
        self.at = 0;
        self.buf.clear();
        while let Ok(more) = self.rx.try_recv() {
            out.extend_from_slice(&more);
        }
        out
    }
}

impl AsyncRead for Inbound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.at < self.buf.len() {
                let n = out.remaining().min(self.buf.len() - self.at);
                let at = self.at;
                out.put_slice(&self.buf[at..at + n]);
                self.at += n;
                return Poll::Ready(Ok(()));
            }
            match ready!(self.rx.poll_recv(cx)) {
                Some(data) => {
                    self.buf = data;
                    self.at = 0;
                }
                None => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// Our side of one stream: each write a DATA frame (or several), shutdown its FIN.
pub struct Outbound {
    id: u32,
    tx: PollSender<Out>,
    finished: bool,
    _keep: Option<Arc<Tasks>>,
}

impl Outbound {
    fn broken() -> io::Error {
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the runtime's stream connection ended",
        )
    }
}

impl AsyncWrite for Outbound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.finished {
            return Poll::Ready(Err(Self::broken()));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| Self::broken())?;
        let n = data.len().min(CHUNK);
        let frame = spdy::data(self.id, 0, &data[..n]);
        self.tx
            .send_item(Out::Frame(frame))
            .map_err(|_| Self::broken())?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.finished {
            return Poll::Ready(Ok(()));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| Self::broken())?;
        let frame = spdy::data(self.id, FLAG_FIN, &[]);
        self.tx
            .send_item(Out::Frame(frame))
            .map_err(|_| Self::broken())?;
        self.finished = true;
        Poll::Ready(Ok(()))
    }
}

/// An exec or attach session on the runtime's server at `url` (from CRI `Exec` or `Attach`
/// asked with the same `options`). The session's exit is the runtime's status on the error
/// stream; dropping its guard before then closes the connection.
pub async fn session(url: &str, options: StreamOptions) -> Result<Session, String> {
    let fail = |e: io::Error| format!("streaming from the container runtime: {e}");
    let connection = Connection::connect(url, EXEC_PROTOCOL)
        .await
        .map_err(fail)?;
    // The streams the runtime waits for, as the request to it asked: the error stream first,
    // then each stdio stream asked for, then resize with a TTY (which merges stderr).
    let (mut errors, _) = connection
        .open(&[("streamtype", "error")])
        .await
        .map_err(fail)?;
    let mut stdin = None;
    if options.stdin {
        let (_, writer) = connection
            .open(&[("streamtype", "stdin")])
            .await
            .map_err(fail)?;
        stdin = Some(Box::new(writer) as StreamWriter);
    }
    let mut stdout = None;
    if options.stdout {
        let (reader, _) = connection
            .open(&[("streamtype", "stdout")])
            .await
            .map_err(fail)?;
        stdout = Some(Box::new(reader) as StreamReader);
    }
    let mut stderr = None;
    if options.stderr && !options.tty {
        let (reader, _) = connection
            .open(&[("streamtype", "stderr")])
            .await
            .map_err(fail)?;
        stderr = Some(Box::new(reader) as StreamReader);
    }
    let mut resize = None;
    if options.tty {
        let (_, writer) = connection
            .open(&[("streamtype", "resize")])
            .await
            .map_err(fail)?;
        let id = writer.id;
        let out = connection.out.clone();
        let send: Box<dyn Fn(u16, u16) + Send + Sync> = Box::new(move |width, height| {
            let size = serde_json::json!({"Width": width, "Height": height});
            // A resize that does not fit the queue now is dropped: the next one corrects it.
            let _ = out.try_send(Out::Frame(spdy::data(id, 0, size.to_string().as_bytes())));
        });
        resize = Some(send);
    }
    let exit = Box::pin(async move {
        let mut status = Vec::new();
        let _ = errors.read_to_end(&mut status).await;
        channel::decode_exit(&status).map_err(crate::runtime::Error::Stream)
    });
    Ok(Session {
        stdin,
        stdout,
        stderr,
        resize,
        exit,
        guard: Box::new(connection),
    })
}

/// One forwarded connection to `port` through the runtime's server at `url` (from CRI
/// `PortForward`): the halves of its data stream. A failure the runtime reports (nothing
/// listens on the port, say) ends the reader with an error carrying the runtime's message.
pub async fn forward(url: &str, port: u16) -> io::Result<(StreamReader, StreamWriter)> {
    let connection = Connection::connect(url, PORT_FORWARD_PROTOCOL).await?;
    let port = port.to_string();
    let (errors, mut error_side) = connection
        .open(&[("streamtype", "error"), ("port", &port), ("requestid", "0")])
        .await?;
    // Nothing is ever written on the error stream from this side.
    error_side.shutdown().await?;
    let (mut data, mut writer) = connection
        .open(&[("streamtype", "data"), ("port", &port), ("requestid", "0")])
        .await?;
    data._keep = connection.keep();
    writer._keep = connection.keep();
    let reader = Forwarded {
        data,
        errors,
        failed: false,
    };
    Ok((Box::new(reader), Box::new(writer)))
}

/// The reading half of a forwarded connection: the data stream, and at its end whatever the
/// runtime said on the error stream.
struct Forwarded {
    data: Inbound,
    errors: Inbound,
    failed: bool,
}

impl AsyncRead for Forwarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = out.filled().len();
        ready!(Pin::new(&mut self.data).poll_read(cx, out))?;
        if out.filled().len() > before || self.failed {
            return Poll::Ready(Ok(()));
        }
        // End of the data: the runtime wrote any error before it closed the streams.
        let message = self.errors.take_ready();
        if message.is_empty() {
            return Poll::Ready(Ok(()));
        }
        self.failed = true;
        Poll::Ready(Err(io::Error::other(
            String::from_utf8_lossy(&message).trim().to_string(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fake server received per stream type: the bytes, and whether the stream ended.
    type Received = HashMap<String, (Vec<u8>, bool)>;

    /// A runtime's streaming server for one connection, played by hand: it answers the
    /// upgrade, replies to each stream, collects what arrives per `streamtype` until `until`
    /// says the client is done, then sends `answer(stream type → id, collected)` and hangs up.
    async fn fake_server(
        protocol: &'static str,
        until: fn(&Received) -> bool,
        answer: fn(&HashMap<String, u32>, &Received) -> Vec<Vec<u8>>,
    ) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/stream/token", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let end = loop {
                socket.read_buf(&mut buf).await.unwrap();
                if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
            };
            let request = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end);
            let head = format!(
                "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                 Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {protocol}\r\n\r\n"
            );
            socket.write_all(head.as_bytes()).await.unwrap();
            let mut codec = HeaderCodec::default();
            let mut ids: HashMap<String, u32> = HashMap::new();
            let mut kinds: HashMap<u32, String> = HashMap::new();
            let mut got = Received::new();
            while !until(&got) {
                while let Some(frame) = spdy::decode(&mut buf).unwrap() {
                    match frame {
                        Frame::SynStream { id, headers, .. } => {
                            let pairs = codec.decode(&headers).unwrap();
                            let kind = pairs
                                .iter()
                                .find(|(n, _)| n == "streamtype")
                                .map(|(_, v)| v.clone())
                                .unwrap();
                            ids.insert(kind.clone(), id);
                            kinds.insert(id, kind.clone());
                            got.entry(kind).or_default();
                            let reply = spdy::syn_reply(id, 0, &codec.encode(&[]));
                            socket.write_all(&reply).await.unwrap();
                        }
                        Frame::Data { id, flags, data } => {
                            let entry = got.get_mut(&kinds[&id]).unwrap();
                            entry.0.extend_from_slice(&data);
                            entry.1 |= flags & FLAG_FIN != 0;
                        }
                        _ => {}
                    }
                }
                if until(&got) {
                    break;
                }
                assert_ne!(
                    socket.read_buf(&mut buf).await.unwrap(),
                    0,
                    "client hung up"
                );
            }
            for frame in answer(&ids, &got) {
                socket.write_all(&frame).await.unwrap();
            }
            socket.shutdown().await.unwrap();
            request
        });
        (url, task)
    }

    #[tokio::test]
    async fn an_exec_session_half_closes_stdin_and_reads_the_exit_code() {
        let (url, server) = fake_server(
            EXEC_PROTOCOL,
            |got| got.get("stdin").is_some_and(|(_, fin)| *fin) && got.len() == 4,
            |ids, got| {
                let shout = got["stdin"].0.to_ascii_uppercase();
                vec![
                    spdy::data(ids["stdout"], 0, &shout),
                    spdy::data(ids["stderr"], 0, b"to stderr"),
                    spdy::data(
                        ids["error"],
                        0,
                        channel::exit_status(3).to_string().as_bytes(),
                    ),
                    spdy::data(ids["error"], FLAG_FIN, &[]),
                ]
            },
        )
        .await;
        let options = StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let session = session(&url, options).await.unwrap();
        assert!(session.resize.is_none(), "no terminal, no resize stream");
        let mut stdin = session.stdin.unwrap();
        stdin.write_all(b"hello").await.unwrap();
        stdin.shutdown().await.unwrap();
        let mut out = String::new();
        session
            .stdout
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        let mut err = String::new();
        session
            .stderr
            .unwrap()
            .read_to_string(&mut err)
            .await
            .unwrap();
        assert_eq!((out.as_str(), err.as_str()), ("HELLO", "to stderr"));
        assert_eq!(session.exit.await.unwrap(), 3);
        let request = server.await.unwrap();
        assert!(
            request.starts_with("POST /stream/token HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("Upgrade: SPDY/3.1\r\n"), "{request}");
    }

    #[tokio::test]
    async fn a_terminal_session_sends_resizes_and_has_no_stderr() {
        let (url, server) = fake_server(
            EXEC_PROTOCOL,
            |got| {
                got.get("resize")
                    .is_some_and(|(size, _)| size.ends_with(b"}"))
            },
            |ids, got| {
                vec![
                    spdy::data(ids["stdout"], 0, &got["resize"].0),
                    spdy::data(
                        ids["error"],
                        0,
                        channel::exit_status(0).to_string().as_bytes(),
                    ),
                ]
            },
        )
        .await;
        let options = StreamOptions {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        };
        let session = session(&url, options).await.unwrap();
        assert!(session.stderr.is_none());
        (session.resize.as_ref().unwrap())(120, 40);
        let mut out = String::new();
        session
            .stdout
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        let size: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(size, serde_json::json!({"Width": 120, "Height": 40}));
        assert_eq!(session.exit.await.unwrap(), 0);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_runtime_failure_is_the_sessions_error_and_silence_is_not_success() {
        let (url, _server) = fake_server(
            EXEC_PROTOCOL,
            |got| got.len() == 2,
            |ids, _| {
                let status = channel::failure_status("exec: \"nope\": executable file not found");
                vec![spdy::data(ids["error"], 0, status.to_string().as_bytes())]
            },
        )
        .await;
        let options = StreamOptions {
            stdin: false,
            stdout: true,
            stderr: false,
            tty: false,
        };
        let err = session(&url, options)
            .await
            .unwrap()
            .exit
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("executable file not found"),
            "{err}"
        );

        let (url, _server) =
            fake_server(EXEC_PROTOCOL, |got| got.len() == 2, |_, _| Vec::new()).await;
        let err = session(&url, options)
            .await
            .unwrap()
            .exit
            .await
            .unwrap_err();
        assert!(err.to_string().contains("without an exit status"), "{err}");
    }

    #[tokio::test]
    async fn a_refused_upgrade_is_an_error_naming_the_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/exec/spent", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 1024];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
                .await;
        });
        let options = StreamOptions {
            stdin: false,
            stdout: true,
            stderr: false,
            tty: false,
        };
        let err = session(&url, options).await.err().unwrap();
        assert!(err.contains("(404): not found"), "{err}");
    }

    #[tokio::test]
    async fn a_forwarded_connection_carries_bytes_and_then_the_runtimes_error() {
        let (url, server) = fake_server(
            PORT_FORWARD_PROTOCOL,
            |got| got.get("data").is_some_and(|(_, fin)| *fin) && got["error"].1,
            |ids, got| {
                vec![
                    spdy::data(ids["data"], 0, &got["data"].0),
                    spdy::data(ids["error"], 0, b"connection reset by peer"),
                    spdy::data(ids["error"], FLAG_FIN, &[]),
                    spdy::data(ids["data"], FLAG_FIN, &[]),
                ]
            },
        )
        .await;
        let (mut reader, mut writer) = forward(&url, 8080).await.unwrap();
        writer.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        writer.shutdown().await.unwrap();
        let mut echoed = vec![0; 18];
        reader.read_exact(&mut echoed).await.unwrap();
        assert_eq!(echoed, b"GET / HTTP/1.0\r\n\r\n");
        let err = reader.read(&mut [0; 16]).await.unwrap_err();
        assert_eq!(err.to_string(), "connection reset by peer");
        server.await.unwrap();
    }

    #[test]
    fn stream_urls_are_plain_http_with_a_host() {
        assert_eq!(
            split_url("http://127.0.0.1:4100/exec/AbC").unwrap(),
            ("127.0.0.1:4100", "/exec/AbC")
        );
        assert_eq!(split_url("http://[::1]:80").unwrap(), ("[::1]:80", "/"));
        assert!(split_url("https://127.0.0.1:4100/exec/x").is_err());
        assert!(split_url("/exec/x").is_err());
        assert!(split_url("http:///exec/x").is_err());
    }

    #[test]
    fn the_upgrade_must_switch_protocols_and_agree_to_ours() {
        let ok = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\
                  Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n";
        assert_eq!(parse_head(ok, EXEC_PROTOCOL), Ok(101));
        let other = ok.replace("v4.channel", "v3.channel");
        assert!(parse_head(&other, EXEC_PROTOCOL).is_err());
        let refused = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n";
        assert_eq!(parse_head(refused, EXEC_PROTOCOL), Ok(404));
        assert!(parse_head("garbage", EXEC_PROTOCOL).is_err());
    }
}

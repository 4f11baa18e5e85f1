//! A network between a component and the API server whose faults a test chooses: a TCP relay
//! on loopback ([`Link`]) that passes bytes through until told to slow them down, hold them
//! back, drop the connections it carries or forget them without a word.
//!
//! The faults are the ones a homelab's network deals out: a far or congested link
//! ([`Fault::Latency`]), a server that cannot be reached and says so ([`Fault::Down`]), a
//! partition that holds everything until it heals ([`Fault::Partition`]), and a middlebox (NAT,
//! firewall, a Wi-Fi roam) that loses its connection state ([`Fault::Sever`]): the connections
//! open then go silent forever, neither delivered nor closed, and only the client's own
//! timeouts can tell.
//!
//! The relay runs on a runtime of its own, so that a synchronous test can hold it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the link does to the bytes it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Bytes pass as they come.
    Healthy,
    /// Every chunk waits this long, in each direction.
    Latency(Duration),
    /// Every connection is closed, and a new one is closed as soon as it is accepted.
    Down,
    /// Nothing passes either way and connections stay open; when the link heals, what was held
    /// back passes.
    Partition,
    /// The connections open now go silent for good: what either side sends is dropped, and
    /// neither side is told. Connections opened afterwards pass bytes as they come.
    Sever,
}

/// What a link did, for a test's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Connections accepted.
    pub connections: u64,
    /// Connections closed by [`Fault::Down`].
    pub closed: u64,
    /// Connections silenced by [`Fault::Sever`].
    pub severed: u64,
}

#[derive(Default)]
struct Shared {
    /// Each open connection's "silenced" flag.
    open: Mutex<Vec<Weak<AtomicBool>>>,
    connections: AtomicU64,
    closed: AtomicU64,
    severed: AtomicU64,
}

/// A relay from a loopback port of its own to `target`, with a fault a test sets.
pub struct Link {
    address: SocketAddr,
    fault: watch::Sender<Fault>,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Link {
    /// Starts a healthy link to `target` (say the API server's address).
    pub fn to(target: SocketAddr) -> Link {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a link port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let address = listener.local_addr().expect("link address");
        let (fault, faults) = watch::channel(Fault::Healthy);
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let relay_shared = shared.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the link's runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                tokio::select! {
                    _ = accept(listener, target, faults, relay_shared) => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection's task, closing its sockets.
        });
        Link {
            address,
            fault,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The `https://` URL of the link, for a component's `--server` or kubeconfig.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// Sets the fault from now on. [`Fault::Sever`] silences the connections open now and
    /// leaves the link healthy for new ones.
    pub fn set(&self, fault: Fault) {
        if fault == Fault::Sever {
            let mut open = self.shared.open.lock().unwrap();
            open.retain(|flag| match flag.upgrade() {
                Some(flag) => {
                    flag.store(true, Ordering::SeqCst);
                    self.shared.severed.fetch_add(1, Ordering::Relaxed);
                    false
                }
                None => false,
            });
            drop(open);
            // Wakes the pumps so that a chunk held back by a partition is dropped, not sent.
            self.fault.send_replace(Fault::Healthy);
            return;
        }
        self.fault.send_replace(fault);
    }

    /// Back to [`Fault::Healthy`] (severed connections stay silent).
    pub fn heal(&self) {
        self.set(Fault::Healthy);
    }

    /// What the link did so far.
    pub fn counts(&self) -> Counts {
        Counts {
            connections: self.shared.connections.load(Ordering::Relaxed),
            closed: self.shared.closed.load(Ordering::Relaxed),
            severed: self.shared.severed.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept(
    listener: TcpListener,
    target: SocketAddr,
    faults: watch::Receiver<Fault>,
    shared: Arc<Shared>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.connections.fetch_add(1, Ordering::Relaxed);
        if *faults.borrow() == Fault::Down {
            shared.closed.fetch_add(1, Ordering::Relaxed);
            continue; // dropped: closed at once
        }
        let silenced = Arc::new(AtomicBool::new(false));
        shared.open.lock().unwrap().push(Arc::downgrade(&silenced));
        let faults = faults.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            // The far side being down is the client's connection refused.
            let Ok(server) = TcpStream::connect(target).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let up = pump(client_read, server_write, faults.clone(), silenced.clone());
            let down = pump(server_read, client_write, faults, silenced);
            // Either side closing, or the link going down, ends the connection both ways
            // (dropping the halves closes the sockets).
            if tokio::select! { d = up => d, d = down => d } {
                shared.closed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

/// Moves bytes from `from` to `to` under the link's fault until `from` ends (false) or the
/// link goes down (true).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut faults: watch::Receiver<Fault>,
    silenced: Arc<AtomicBool>,
) -> bool {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buffer) => match read {
                // The end of a silenced connection's far side is not told either: the other
                // side hears nothing until it gives up itself.
                Ok(0) | Err(_) if silenced.load(Ordering::SeqCst) => {
                    std::future::pending::<()>().await;
                    unreachable!()
                }
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            },
            changed = faults.changed() => {
                if changed.is_err() {
                    return false;
                }
                if *faults.borrow_and_update() == Fault::Down && !silenced.load(Ordering::SeqCst) {
                    return true;
                }
                continue;
            }
        };
        // Hold the chunk until the fault lets it through (or drops it).
        loop {
            if silenced.load(Ordering::SeqCst) {
                break; // dropped on the floor, and nobody told
            }
            let fault = *faults.borrow_and_update();
            match fault {
                Fault::Down => return true,
                Fault::Partition => {
                    if faults.changed().await.is_err() {
                        return false;
                    }
                }
                Fault::Latency(delay) => {
                    tokio::time::sleep(delay).await;
                    if to.write_all(&buffer[..n]).await.is_err() {
                        return false;
                    }
                    break;
                }
                Fault::Healthy | Fault::Sever => {
                    if to.write_all(&buffer[..n]).await.is_err() {
                        return false;
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Instant;

    /// An echo server on loopback: writes back what it reads, line by line.
    fn echo() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buffer) {
                        if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        address
    }

    fn connect(link: &Link) -> std::net::TcpStream {
        let stream = std::net::TcpStream::connect(link.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(700)))
            .unwrap();
        stream
    }

    /// Sends `text` and reads the echo back; None if nothing came within the read timeout, or
    /// the connection ended.
    fn round_trip(stream: &mut std::net::TcpStream, text: &str) -> Option<String> {
        stream.write_all(text.as_bytes()).ok()?;
        let mut buffer = vec![0u8; text.len()];
        stream.read_exact(&mut buffer).ok()?;
        String::from_utf8(buffer).ok()
    }

    /// Whether a read on `stream` waits out its timeout: nothing arrives, and the connection is
    /// not ended either.
    fn silent(stream: &mut std::net::TcpStream) -> bool {
        let mut buffer = [0u8; 16];
        match stream.read(&mut buffer) {
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            // The end of the stream, or bytes: either way not silent.
            Ok(0) | Ok(1..) => false,
        }
    }

    #[test]
    fn a_healthy_link_passes_bytes_both_ways() {
        let link = Link::to(echo());
        let mut stream = connect(&link);
        assert_eq!(round_trip(&mut stream, "ping").as_deref(), Some("ping"));
        assert_eq!(link.counts().connections, 1);
    }

    #[test]
    fn latency_delays_each_way() {
        let link = Link::to(echo());
        let mut stream = connect(&link);
        link.set(Fault::Latency(Duration::from_millis(150)));
        let started = Instant::now();
        assert_eq!(round_trip(&mut stream, "slow").as_deref(), Some("slow"));
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn down_closes_open_connections_and_refuses_new_ones_until_healed() {
        let link = Link::to(echo());
        let mut open = connect(&link);
        assert!(round_trip(&mut open, "a").is_some());
        link.set(Fault::Down);
        let mut buffer = [0u8; 1];
        // The open connection is closed (end of stream, or reset), not left waiting.
        assert!(!silent(&mut open));
        assert!(matches!(open.read(&mut buffer), Ok(0) | Err(_)));
        let mut new = connect(&link);
        assert!(round_trip(&mut new, "b").is_none());
        link.heal();
        let mut after = connect(&link);
        assert_eq!(round_trip(&mut after, "c").as_deref(), Some("c"));
        assert!(link.counts().closed >= 2);
    }

    #[test]
    fn a_partition_holds_bytes_until_it_heals() {
        let link = Link::to(echo());
        let mut stream = connect(&link);
        assert!(round_trip(&mut stream, "before").is_some());
        link.set(Fault::Partition);
        assert!(
            round_trip(&mut stream, "held").is_none(),
            "passed a partition"
        );
        link.heal();
        // What was held back arrives once the link heals, on the same connection.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buffer = [0u8; 4];
        stream.read_exact(&mut buffer).unwrap();
        assert_eq!(&buffer, b"held");
    }

    #[test]
    fn a_severed_connection_stays_silent_while_new_ones_work() {
        let link = Link::to(echo());
        let mut old = connect(&link);
        assert!(round_trip(&mut old, "x").is_some());
        link.set(Fault::Sever);
        // Neither delivered nor closed: the read times out rather than ending.
        old.write_all(b"lost").unwrap();
        assert!(silent(&mut old), "a severed connection answered or ended");
        let mut new = connect(&link);
        assert_eq!(round_trip(&mut new, "fresh").as_deref(), Some("fresh"));
        assert_eq!(link.counts().severed, 1);
        // Nor does the link going down reach it.
        link.set(Fault::Down);
        assert!(silent(&mut old), "a severed connection was told");
    }

    #[test]
    fn the_end_of_a_severed_connection_is_not_told() {
        // A server that closes each connection once it has answered one line.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let (close, closes) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buffer = [0u8; 2];
            stream.read_exact(&mut buffer).unwrap();
            stream.write_all(&buffer).unwrap();
            closes.recv().unwrap();
            drop(stream);
        });
        let link = Link::to(server);
        let mut stream = connect(&link);
        assert_eq!(round_trip(&mut stream, "hi").as_deref(), Some("hi"));
        link.set(Fault::Sever);
        close.send(()).unwrap();
        assert!(silent(&mut stream), "the server's close came through");
    }
}

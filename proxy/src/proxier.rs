//! The proxier: turns each [`sync`](Proxier::sync) of Services and Endpoints into open listeners
//! and balancer state, and serves the proxied TCP connections and UDP flows.
//!
//! Listeners are keyed by (Service port, protocol, address): a sync closes the ones no longer
//! planned and opens the new ones, and leaves every other listener, and every established
//! connection, alone. Endpoint and affinity changes only touch the [`LoadBalancer`], so they
//! apply to the next connection at once.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Service};
use metrics::{Counter, Gauge};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::balancer::{LoadBalancer, PickError, ServicePortName};
use crate::plan::{Plan, Protocol, plan};
use crate::relay::{ByteCounters, relay};
use crate::{Error, Result};

/// How the proxier serves; the defaults are kube-proxy's (userspace mode) where it had one.
#[derive(Clone, Debug)]
pub struct Config {
    /// The address NodePorts are bound on; `None` binds no NodePorts.
    pub node_port_address: Option<IpAddr>,
    /// Endpoints tried for one connection before it is refused (a refused or timed-out connect
    /// moves on to the next endpoint).
    pub connect_attempts: usize,
    /// How long one connect to an endpoint may take.
    pub connect_timeout: Duration,
    /// A UDP flow with no datagram either way for this long is closed.
    pub udp_idle_timeout: Duration,
    /// How often stale ClientIP affinity records are dropped.
    pub affinity_sweep_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_port_address: Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            connect_attempts: 4,
            connect_timeout: Duration::from_secs(1),
            udp_idle_timeout: Duration::from_millis(250),
            affinity_sweep_interval: Duration::from_secs(60),
        }
    }
}

/// The time source of affinity records; tests substitute a clock they move by hand.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// What the serving tasks share with the proxier.
struct Shared {
    balancer: LoadBalancer,
    config: Config,
    clock: Arc<dyn Clock>,
    /// Cancelled when the proxier shuts down: ends listeners, connections and flows.
    shutdown: CancellationToken,
    /// Every listener, connection and flow task, so shutdown can wait for them.
    tracker: TaskTracker,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ListenerKey {
    service: ServicePortName,
    protocol: Protocol,
    address: SocketAddr,
}

struct Listener {
    id: u64,
    /// Cancelled to close this listener only; its connections live on.
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

/// One open listener, as [`Proxier::listeners`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    /// The Service port it serves.
    pub service: ServicePortName,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The bound address.
    pub address: SocketAddr,
    /// A number unique to this listener in this proxier: a re-created listener gets a new one.
    pub id: u64,
}

/// What one [`Proxier::sync`] did.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Listeners opened.
    pub opened: usize,
    /// Listeners closed.
    pub closed: usize,
    /// Listeners that could not be opened (tried again on the next sync).
    pub failed: Vec<(ServicePortName, Error)>,
}

/// The service proxy's state: open listeners and the load balancer.
pub struct Proxier {
    shared: Arc<Shared>,
    listeners: BTreeMap<ListenerKey, Listener>,
    next_id: u64,
}

impl Proxier {
    /// A proxier with no listeners; its tasks end when `shutdown` is cancelled.
    pub fn new(config: Config, shutdown: CancellationToken) -> Self {
        Self::with_clock(config, shutdown, Arc::new(SystemClock))
    }

    /// A proxier whose affinity records follow `clock`.
    pub fn with_clock(config: Config, shutdown: CancellationToken, clock: Arc<dyn Clock>) -> Self {
        let shared = Arc::new(Shared {
            balancer: LoadBalancer::new(),
            config,
            clock,
            shutdown: shutdown.child_token(),
            tracker: TaskTracker::new(),
        });
        let sweeper = Arc::clone(&shared);
        shared.tracker.spawn(async move {
            let mut tick = tokio::time::interval(sweeper.config.affinity_sweep_interval);
            loop {
                tokio::select! {
                    () = sweeper.shutdown.cancelled() => return,
                    _ = tick.tick() => sweeper.balancer.sweep(sweeper.clock.now()),
                }
            }
        });
        Self {
            shared,
            listeners: BTreeMap::new(),
            next_id: 1,
        }
    }

    /// The load balancer (for inspection).
    pub fn balancer(&self) -> &LoadBalancer {
        &self.shared.balancer
    }

    /// The open listeners, in key order.
    pub fn listeners(&self) -> Vec<ListenerInfo> {
        self.listeners
            .iter()
            .map(|(k, l)| ListenerInfo {
                service: k.service.clone(),
                protocol: k.protocol,
                address: k.address,
                id: l.id,
            })
            .collect()
    }

    /// Makes the proxy serve exactly the given Services with the given Endpoints: pass the full
    /// current lists every time.
    pub async fn sync<S, E>(
        &mut self,
        services: impl IntoIterator<Item = S>,
        endpoints: impl IntoIterator<Item = E>,
    ) -> SyncReport
    where
        S: Borrow<Service>,
        E: Borrow<Endpoints>,
    {
        let plan = plan(services, endpoints, self.shared.config.node_port_address);
        self.apply(&plan).await
    }

    /// Applies a computed plan (see [`sync`](Self::sync)).
    pub async fn apply(&mut self, plan: &Plan) -> SyncReport {
        let mut report = SyncReport::default();
        let balancer = &self.shared.balancer;
        for (service, port) in plan {
            balancer.update(service, port.endpoints.clone(), port.affinity);
        }
        balancer.retain(|k| plan.contains_key(k));

        let desired: BTreeSet<ListenerKey> = plan
            .iter()
            .flat_map(|(service, port)| {
                port.listen.iter().map(|address| ListenerKey {
                    service: service.clone(),
                    protocol: port.protocol,
                    address: *address,
                })
            })
            .collect();

        // Close first, so a port that moved between Services can be bound again right away.
        let stale: Vec<ListenerKey> = self
            .listeners
            .keys()
            .filter(|k| !desired.contains(k))
            .cloned()
            .collect();
        let mut closing = Vec::new();
        for key in stale {
            if let Some(listener) = self.listeners.remove(&key) {
                tracing::info!(service = %key.service, address = %key.address, protocol = %key.protocol, "closing listener");
                listener.cancel.cancel();
                closing.push(listener.task);
                report.closed += 1;
            }
        }
        for task in closing {
            // The task drops its socket on the way out; a panic there was already reported.
            let _ = task.await;
        }

        for key in desired {
            if self.listeners.contains_key(&key) {
                continue;
            }
            match self.open(&key) {
                Ok(listener) => {
                    tracing::info!(service = %key.service, address = %key.address, protocol = %key.protocol, "listening");
                    self.listeners.insert(key, listener);
                    report.opened += 1;
                }
                Err(e) => {
                    tracing::warn!(service = %key.service, "cannot open listener: {e}");
                    metrics::counter!("skiff_proxy_errors_total", "service" => key.service.to_string(), "reason" => "bind")
                        .increment(1);
                    report.failed.push((key.service, e));
                }
            }
        }
        report
    }

    fn open(&mut self, key: &ListenerKey) -> Result<Listener> {
        let cancel = self.shared.shutdown.child_token();
        let shared = Arc::clone(&self.shared);
        let service = key.service.clone();
        let bind_error = |source| Error::Bind {
            address: key.address,
            protocol: key.protocol,
            source,
        };
        let task = match key.protocol {
            Protocol::Tcp => {
                let listener = bind_tcp(key.address).map_err(bind_error)?;
                let cancel = cancel.clone();
                self.shared
                    .tracker
                    .spawn(serve_tcp(listener, service, shared, cancel))
            }
            Protocol::Udp => {
                let socket = bind_udp(key.address).map_err(bind_error)?;
                let cancel = cancel.clone();
                self.shared
                    .tracker
                    .spawn(serve_udp(socket, service, shared, cancel))
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        Ok(Listener { id, cancel, task })
    }

    /// Closes every listener, connection and flow, and waits for their tasks to end.
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        self.shared.tracker.close();
        let tracker = self.shared.tracker.clone();
        drop(self);
        tracker.wait().await;
    }
}

impl Drop for Proxier {
    /// A dropped proxier closes its listeners, connections and flows (without waiting for them).
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

fn bind_tcp(address: SocketAddr) -> io::Result<TcpListener> {
    let socket = match address {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // A re-created listener must not wait for the old one's connections in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(1024)
}

fn bind_udp(address: SocketAddr) -> io::Result<UdpSocket> {
    let socket = std::net::UdpSocket::bind(address)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

/// The metric handles of one listener, resolved once.
#[derive(Clone)]
struct ServiceMetrics {
    service: String,
    active: Gauge,
    bytes: ByteCounters,
    no_endpoints: Counter,
    connect_errors: Counter,
    relay_errors: Counter,
    accept_errors: Counter,
}

impl ServiceMetrics {
    fn new(service: &ServicePortName, protocol: Protocol) -> Self {
        let s = service.to_string();
        let p = protocol.to_string();
        let error = |reason: &'static str| metrics::counter!("skiff_proxy_errors_total", "service" => s.clone(), "reason" => reason);
        Self {
            active: metrics::gauge!("skiff_proxy_active_connections", "service" => s.clone(), "protocol" => p.clone()),
            bytes: ByteCounters {
                to_endpoint: metrics::counter!("skiff_proxy_bytes_total", "service" => s.clone(), "protocol" => p.clone(), "direction" => "to_endpoint"),
                to_client: metrics::counter!("skiff_proxy_bytes_total", "service" => s.clone(), "protocol" => p, "direction" => "to_client"),
            },
            no_endpoints: error("no_endpoints"),
            connect_errors: error("connect"),
            relay_errors: error("relay"),
            accept_errors: error("accept"),
            service: s,
        }
    }

    fn selected(&self, endpoint: SocketAddr) {
        metrics::counter!("skiff_proxy_endpoint_selections_total", "service" => self.service.clone(), "endpoint" => endpoint.to_string())
            .increment(1);
    }
}

/// Decrements the active gauge when a connection or flow ends, however it ends.
struct ActiveGuard(Gauge);

impl ActiveGuard {
    fn new(gauge: &Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge.clone())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

async fn serve_tcp(
    listener: TcpListener,
    service: ServicePortName,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let metrics = ServiceMetrics::new(&service, Protocol::Tcp);
    loop {
        let (stream, peer) = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    metrics.accept_errors.increment(1);
                    tracing::warn!(%service, "accept failed: {e}");
                    // Out of descriptors, most likely: give connections time to end.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (service, shared2, metrics) = (service.clone(), Arc::clone(&shared), metrics.clone());
        shared.tracker.spawn(async move {
            let shutdown = shared2.shutdown.clone();
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = proxy_tcp(stream, peer, &service, &shared2, &metrics) => {}
            }
        });
    }
}

async fn proxy_tcp(
    mut client: TcpStream,
    peer: SocketAddr,
    service: &ServicePortName,
    shared: &Shared,
    metrics: &ServiceMetrics,
) {
    let _active = ActiveGuard::new(&metrics.active);
    let _ = client.set_nodelay(true);
    let Some(mut endpoint) = connect(service, peer.ip(), shared, metrics).await else {
        refuse(client);
        return;
    };
    let _ = endpoint.set_nodelay(true);
    if let Err(e) = relay(&mut client, &mut endpoint, &metrics.bytes).await {
        metrics.relay_errors.increment(1);
        tracing::debug!(%service, %peer, "connection ended: {e}");
    }
}

/// Connects to an endpoint of `service` for `client`, moving on to the next endpoint when one
/// refuses or times out, at most `connect_attempts` times and never twice to the same endpoint.
async fn connect(
    service: &ServicePortName,
    client: IpAddr,
    shared: &Shared,
    metrics: &ServiceMetrics,
) -> Option<TcpStream> {
    let mut tried: Vec<SocketAddr> = Vec::new();
    for attempt in 0..shared.config.connect_attempts.max(1) {
        let endpoint = match shared
            .balancer
            .pick(service, client, shared.clock.now(), attempt > 0)
        {
            Ok(endpoint) => endpoint,
            Err(e @ (PickError::NoEndpoints(_) | PickError::UnknownService(_))) => {
                if attempt == 0 {
                    metrics.no_endpoints.increment(1);
                }
                tracing::debug!("refusing connection from {client}: {e}");
                return None;
            }
        };
        if tried.contains(&endpoint) {
            break;
        }
        tried.push(endpoint);
        metrics.selected(endpoint);
        match tokio::time::timeout(shared.config.connect_timeout, TcpStream::connect(endpoint))
            .await
        {
            Ok(Ok(stream)) => return Some(stream),
            Ok(Err(e)) => {
                metrics.connect_errors.increment(1);
                tracing::debug!(%service, %endpoint, "connect failed: {e}");
            }
            Err(_) => {
                metrics.connect_errors.increment(1);
                tracing::debug!(%service, %endpoint, "connect timed out");
            }
        }
    }
    None
}

/// Closes a client connection with a reset, so the client sees a refusal rather than an orderly
/// end of an empty response.
fn refuse(client: TcpStream) {
    let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
    drop(client);
}

/// One UDP client's flow to its endpoint.
struct Flow {
    /// Connected to the endpoint; datagrams from it go back to the client.
    socket: UdpSocket,
    /// Nanoseconds after `born` of the last datagram either way.
    last_active: AtomicU64,
    born: tokio::time::Instant,
}

impl Flow {
    fn touch(&self) {
        let nanos = self.born.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.last_active.store(nanos, Ordering::Relaxed);
    }

    fn idle_since(&self) -> tokio::time::Instant {
        self.born + Duration::from_nanos(self.last_active.load(Ordering::Relaxed))
    }
}

type Flows = Arc<Mutex<HashMap<SocketAddr, Arc<Flow>>>>;

async fn serve_udp(
    socket: UdpSocket,
    service: ServicePortName,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let metrics = ServiceMetrics::new(&service, Protocol::Udp);
    let socket = Arc::new(socket);
    let flows: Flows = Arc::default();
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, client) = tokio::select! {
            () = cancel.cancelled() => return,
            received = socket.recv_from(&mut buf) => match received {
                Ok(received) => received,
                Err(e) => {
                    // ICMP errors of earlier replies surface here; the socket stays usable.
                    tracing::debug!(%service, "receive failed: {e}");
                    continue;
                }
            },
        };
        let existing = flows
            .lock()
            .expect("flows lock poisoned")
            .get(&client)
            .cloned();
        let flow = match existing {
            Some(flow) => flow,
            None => match open_flow(&service, client, &shared, &metrics).await {
                Some(flow) => {
                    let flow = Arc::new(flow);
                    flows
                        .lock()
                        .expect("flows lock poisoned")
                        .insert(client, Arc::clone(&flow));
                    shared.tracker.spawn(reply_flow(
                        Arc::clone(&flow),
                        client,
                        Arc::clone(&socket),
                        Arc::clone(&flows),
                        shared.config.udp_idle_timeout,
                        cancel.clone(),
                        metrics.clone(),
                    ));
                    flow
                }
                None => continue,
            },
        };
        flow.touch();
        match flow.socket.send(&buf[..n]).await {
            Ok(sent) => metrics.bytes.to_endpoint.increment(sent as u64),
            Err(e) => {
                metrics.relay_errors.increment(1);
                tracing::debug!(%service, %client, "send to endpoint failed: {e}");
            }
        }
    }
}

async fn open_flow(
    service: &ServicePortName,
    client: SocketAddr,
    shared: &Shared,
    metrics: &ServiceMetrics,
) -> Option<Flow> {
    let endpoint = match shared
        .balancer
        .pick(service, client.ip(), shared.clock.now(), false)
    {
        Ok(endpoint) => endpoint,
        Err(e) => {
            metrics.no_endpoints.increment(1);
            tracing::debug!("dropping datagram from {client}: {e}");
            return None;
        }
    };
    metrics.selected(endpoint);
    let local: SocketAddr = match endpoint {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = match UdpSocket::bind(local).await {
        Ok(socket) => socket,
        Err(e) => {
            metrics.connect_errors.increment(1);
            tracing::warn!(%service, "cannot open a UDP flow socket: {e}");
            return None;
        }
    };
    if let Err(e) = socket.connect(endpoint).await {
        metrics.connect_errors.increment(1);
        tracing::debug!(%service, %endpoint, "cannot connect UDP flow: {e}");
        return None;
    }
    Some(Flow {
        socket,
        last_active: AtomicU64::new(0),
        born: tokio::time::Instant::now(),
    })
}

/// Sends the endpoint's datagrams back to the client until the flow is idle for `idle`.
async fn reply_flow(
    flow: Arc<Flow>,
    client: SocketAddr,
    listener: Arc<UdpSocket>,
    flows: Flows,
    idle: Duration,
    cancel: CancellationToken,
    metrics: ServiceMetrics,
) {
    let _active = ActiveGuard::new(&metrics.active);
    let mut buf = vec![0u8; 65536];
    loop {
        let deadline = flow.idle_since() + idle;
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep_until(deadline) => {
                if flow.idle_since() + idle <= tokio::time::Instant::now() {
                    break;
                }
            }
            received = flow.socket.recv(&mut buf) => match received {
                Ok(n) => {
                    flow.touch();
                    match listener.send_to(&buf[..n], client).await {
                        Ok(sent) => metrics.bytes.to_client.increment(sent as u64),
                        Err(e) => {
                            metrics.relay_errors.increment(1);
                            tracing::debug!(%client, "reply to client failed: {e}");
                        }
                    }
                }
                Err(e) => {
                    // The endpoint refused (ICMP port unreachable): a new datagram opens a new flow.
                    metrics.relay_errors.increment(1);
                    tracing::debug!(%client, "endpoint of UDP flow failed: {e}");
                    break;
                }
            },
        }
    }
    let mut flows = flows.lock().expect("flows lock poisoned");
    if flows.get(&client).is_some_and(|f| Arc::ptr_eq(f, &flow)) {
        flows.remove(&client);
    }
}

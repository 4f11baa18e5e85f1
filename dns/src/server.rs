//! The thin shell around the [`Zone`]: hickory-server on UDP and TCP, informers on Services,
//! EndpointSlices and Pods rebuilding the zone on every change, and a forwarder to the host's
//! resolvers for every name that is not the cluster's.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::{Time, TokioRuntimeProvider};
use hickory_resolver::{Resolver, TokioResolver};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use skiff_client::{EventHandler, SharedInformerFactory};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::zone::{self, Answer, Objects, QueryType, Zone};
use crate::{Error, Result};

/// How long a TCP connection may stay idle between queries.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The server's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster domain (`cluster.local`).
    pub domain: String,
    /// TTL of every record of the cluster zone, and of its negative answers.
    pub ttl: u32,
    /// Where names outside the cluster domain go; empty answers them with SERVFAIL.
    pub upstreams: Vec<SocketAddr>,
}

/// The server's UDP socket and TCP listener, bound to one address and port.
pub struct Listeners {
    /// UDP.
    pub udp: UdpSocket,
    /// TCP.
    pub tcp: TcpListener,
}

impl Listeners {
    /// Binds UDP and TCP to `address`; port 0 picks one that is free for both.
    pub async fn bind(address: SocketAddr) -> Result<Listeners> {
        let bind_error = |source| Error::Bind { address, source };
        let attempts = if address.port() == 0 { 10 } else { 1 };
        let mut last = None;
        for _ in 0..attempts {
            let udp = UdpSocket::bind(address).await.map_err(bind_error)?;
            let bound = udp.local_addr().map_err(bind_error)?;
            match TcpListener::bind(bound).await {
                Ok(tcp) => return Ok(Listeners { udp, tcp }),
                Err(e) => last = Some(e),
            }
        }
        Err(bind_error(last.expect("at least one attempt")))
    }

    /// The address both are bound to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.udp.local_addr().map_err(|source| Error::Bind {
            address: SocketAddr::from(([0, 0, 0, 0], 0)),
            source,
        })
    }
}

/// The upstream servers named in resolv.conf text (port 53), leaving out `own`: a host whose
/// resolver is this very server would forward to itself.
pub fn upstreams_from_resolv_conf(text: &str, own: SocketAddr) -> Vec<SocketAddr> {
    let Ok((config, _)) = hickory_resolver::system_conf::parse_resolv_conf(text) else {
        return Vec::new();
    };
    let mut out: Vec<SocketAddr> = Vec::new();
    for server in config.name_servers() {
        let address = SocketAddr::new(server.ip, 53);
        if address != own && !out.contains(&address) {
            out.push(address);
        }
    }
    out
}

/// The zone as the informers last saw it. Readers clone the `Arc` in a short critical section.
type SharedZone = Arc<RwLock<Arc<Zone>>>;

/// Answers queries: the cluster zone from [`SharedZone`], everything else through `forwarder`.
struct Handler {
    zone: SharedZone,
    forwarder: Option<TokioResolver>,
}

fn query_type(rtype: RecordType) -> QueryType {
    match rtype {
        RecordType::A => QueryType::A,
        RecordType::AAAA => QueryType::Aaaa,
        RecordType::SRV => QueryType::Srv,
        RecordType::PTR => QueryType::Ptr,
        RecordType::CNAME => QueryType::Cname,
        RecordType::TXT => QueryType::Txt,
        RecordType::SOA => QueryType::Soa,
        RecordType::ANY => QueryType::Any,
        other => QueryType::Other(u16::from(other)),
    }
}

fn fqdn(name: &str) -> Option<Name> {
    Name::from_ascii(format!("{name}.")).ok()
}

/// A zone record as a hickory record; `None` for a name that is not a valid DNS name (a
/// Service's ExternalName with a bad label, say), which is then left out.
fn to_record(record: &zone::Record) -> Option<Record> {
    let data = match &record.data {
        zone::Data::A(ip) => RData::A(A(*ip)),
        zone::Data::Aaaa(ip) => RData::AAAA(AAAA(*ip)),
        zone::Data::Srv {
            priority,
            weight,
            port,
            target,
        } => RData::SRV(SRV::new(*priority, *weight, *port, fqdn(target)?)),
        zone::Data::Ptr(target) => RData::PTR(PTR(fqdn(target)?)),
        zone::Data::Cname(target) => RData::CNAME(CNAME(fqdn(target)?)),
        zone::Data::Txt(text) => RData::TXT(TXT::new(vec![text.clone()])),
        zone::Data::Soa {
            mname,
            rname,
            serial,
            minimum,
        } => RData::SOA(SOA::new(
            fqdn(mname)?,
            fqdn(rname)?,
            *serial,
            7200,
            1800,
            86400,
            *minimum,
        )),
    };
    Some(Record::from_rdata(fqdn(&record.name)?, record.ttl, data))
}

/// What goes into a response.
#[derive(Default)]
struct Reply {
    code: ResponseCode,
    authoritative: bool,
    answers: Vec<Record>,
    authorities: Vec<Record>,
    additionals: Vec<Record>,
}

impl Handler {
    async fn reply(&self, name: &str, rtype: RecordType) -> Reply {
        let zone = Arc::clone(&self.zone.read().expect("zone lock poisoned"));
        let negative = |code| Reply {
            code,
            authoritative: true,
            authorities: to_record(&zone.soa()).into_iter().collect(),
            ..Reply::default()
        };
        match zone.answer(name, query_type(rtype)) {
            Answer::Records {
                answers,
                additionals,
            } => Reply {
                authoritative: true,
                answers: answers.iter().filter_map(to_record).collect(),
                additionals: additionals.iter().filter_map(to_record).collect(),
                ..Reply::default()
            },
            Answer::NoData => negative(ResponseCode::NoError),
            Answer::NxDomain => negative(ResponseCode::NXDomain),
            Answer::NotOurs => self.forward(name, rtype).await,
        }
    }

    async fn forward(&self, name: &str, rtype: RecordType) -> Reply {
        let Some(resolver) = &self.forwarder else {
            return Reply {
                code: ResponseCode::ServFail,
                ..Reply::default()
            };
        };
        let Ok(name) = Name::from_ascii(name) else {
            return Reply {
                code: ResponseCode::FormErr,
                ..Reply::default()
            };
        };
        match resolver.lookup(name.clone(), rtype).await {
            Ok(lookup) => Reply {
                answers: lookup.answers().to_vec(),
                additionals: lookup.additionals().to_vec(),
                ..Reply::default()
            },
            Err(e) if e.is_no_records_found() => {
                let code = if e.is_nx_domain() {
                    ResponseCode::NXDomain
                } else {
                    ResponseCode::NoError
                };
                let soa = e.into_soa().map(|soa| soa.into_record_of_rdata());
                Reply {
                    code,
                    authorities: soa.into_iter().collect(),
                    ..Reply::default()
                }
            }
            Err(e) => {
                tracing::debug!(%name, ?rtype, error = %e, "forwarding failed");
                Reply {
                    code: ResponseCode::ServFail,
                    ..Reply::default()
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.recursion_available = self.forwarder.is_some();
        let builder = MessageResponseBuilder::from_message_request(request);
        let queries = request.queries.queries();
        let reply = if request.metadata.op_code != OpCode::Query {
            Reply {
                code: ResponseCode::NotImp,
                ..Reply::default()
            }
        } else if queries.len() != 1 {
            Reply {
                code: ResponseCode::FormErr,
                ..Reply::default()
            }
        } else {
            let query = &queries[0];
            self.reply(&query.name().to_string(), query.query_type())
                .await
        };
        metadata.response_code = reply.code;
        metadata.authoritative = reply.authoritative;
        let message = builder.build(
            metadata,
            reply.answers.iter(),
            reply.authorities.iter(),
            std::iter::empty(),
            reply.additionals.iter(),
        );
        match response.send_response(message).await {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, "cannot send a DNS response");
                let mut failed = Metadata::response_from_request(&request.metadata);
                failed.response_code = ResponseCode::ServFail;
                ResponseInfo::from(hickory_proto::op::Header {
                    metadata: failed,
                    counts: Default::default(),
                })
            }
        }
    }
}

fn forwarder(upstreams: &[SocketAddr]) -> Option<TokioResolver> {
    if upstreams.is_empty() {
        return None;
    }
    let servers = upstreams
        .iter()
        .map(|address| {
            let mut udp = ConnectionConfig::udp();
            udp.port = address.port();
            let mut tcp = ConnectionConfig::tcp();
            tcp.port = address.port();
            NameServerConfig::new(address.ip(), true, vec![udp, tcp])
        })
        .collect();
    let mut builder = Resolver::builder_with_config(
        ResolverConfig::from_name_servers(servers),
        TokioRuntimeProvider::default(),
    );
    let options = builder.options_mut();
    options.use_hosts_file = ResolveHosts::Never;
    options.ndots = 0;
    options.timeout = Duration::from_secs(2);
    options.attempts = 1;
    match builder.build() {
        Ok(resolver) => Some(resolver),
        Err(e) => {
            tracing::warn!(error = %e, "cannot build the forwarder: names outside the cluster get SERVFAIL");
            None
        }
    }
}

/// Wakes the rebuild loop on any change; never blocks.
struct Trigger(Arc<Notify>);

impl<K> EventHandler<K> for Trigger {
    fn on_add(&self, _: &Arc<K>) {
        self.0.notify_one();
    }
    fn on_update(&self, _: &Arc<K>, _: &Arc<K>) {
        self.0.notify_one();
    }
    fn on_delete(&self, _: &Arc<K>) {
        self.0.notify_one();
    }
}

fn owned<K: Clone>(items: Vec<Arc<K>>) -> Vec<K> {
    items.iter().map(|k| K::clone(k)).collect()
}

/// Serves the cluster zone on `listeners` until `shutdown`: an empty zone at first (every name in
/// the domain NXDOMAIN would be wrong, so queries wait for nothing: the zone is built from the
/// informers' first full lists before the sockets are served).
pub async fn run(
    client: skiff_client::Client,
    config: Config,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<()> {
    let factory = SharedInformerFactory::new(client);
    let services = factory.informer::<Service>();
    let slices = factory.informer::<EndpointSlice>();
    let pods = factory.informer::<Pod>();
    let changed = Arc::new(Notify::new());
    services.add_handler(Trigger(Arc::clone(&changed)));
    slices.add_handler(Trigger(Arc::clone(&changed)));
    pods.add_handler(Trigger(Arc::clone(&changed)));
    factory.start(shutdown.clone());
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        _ = factory.wait_for_sync() => {}
    }
    let mut serial: u32 = 1;
    let build = |serial: u32| {
        Zone::build(
            &config.domain,
            config.ttl,
            serial,
            Objects {
                services: &owned(services.cache().list()),
                slices: &owned(slices.cache().list()),
                pods: &owned(pods.cache().list()),
            },
        )
    };
    let zone: SharedZone = Arc::new(RwLock::new(Arc::new(build(serial))));
    let handler = Handler {
        zone: Arc::clone(&zone),
        forwarder: forwarder(&config.upstreams),
    };
    let address = listeners.local_addr()?;
    let mut server = hickory_server::Server::new(handler);
    server.register_socket(listeners.udp);
    server.register_listener(listeners.tcp, TCP_IDLE, 64 * 1024);
    tracing::info!(%address, domain = %config.domain, upstreams = ?config.upstreams, "cluster DNS serving");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = changed.notified() => {}
        }
        serial = serial.wrapping_add(1);
        let next = Arc::new(build(serial));
        *zone.write().expect("zone lock poisoned") = next;
    }
    if let Err(e) = server.shutdown_gracefully().await {
        tracing::debug!(error = %e, "DNS server stopped with an error");
    }
    Ok(())
}

/// The `kube-dns` Service in `kube-system`: its ClusterIP `service_ip` (port 53 over UDP and
/// TCP, as every resolver expects) in front of this server at `address`, written through the API
/// as Endpoints (which the proxy follows) and an EndpointSlice. Created when missing; its ports
/// and endpoints brought to `address` when they differ (the last server to start owns it).
pub async fn register(
    client: &skiff_client::Client,
    service_ip: Option<IpAddr>,
    address: SocketAddr,
) -> Result<()> {
    use kube::api::{Patch, PatchParams, PostParams};
    use skiff_client::Api;
    let (service, endpoints, slice) = crate::kube_dns::desired(service_ip, address);
    let ns = crate::kube_dns::NAMESPACE;
    let name = crate::kube_dns::NAME;
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let api_error = |source| Error::Register { source };
    if services.get_opt(name).await.map_err(api_error)?.is_none() {
        let object: Service = serde_json::from_value(service.clone()).expect("a valid Service");
        services
            .create(&PostParams::default(), &object)
            .await
            .map_err(api_error)?;
    } else {
        let patch = serde_json::json!({"spec": {"ports": service["spec"]["ports"]}});
        services
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error)?;
    }
    let endpoint_api: Api<k8s_openapi::api::core::v1::Endpoints> =
        Api::namespaced(client.clone(), ns);
    let slice_api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    upsert(&endpoint_api, name, endpoints).await?;
    upsert(&slice_api, name, slice).await?;
    Ok(())
}

async fn upsert<K>(api: &skiff_client::Api<K>, name: &str, desired: serde_json::Value) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    use kube::api::{Patch, PatchParams, PostParams};
    let api_error = |source| Error::Register { source };
    match api.get_opt(name).await.map_err(api_error)? {
        None => {
            let object: K = serde_json::from_value(desired).expect("a valid object");
            api.create(&PostParams::default(), &object)
                .await
                .map_err(api_error)?;
        }
        Some(_) => {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&desired))
                .await
                .map_err(api_error)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_come_from_resolv_conf_without_ourselves() {
        let text = "search example.net\nnameserver 192.0.2.1\nnameserver 127.0.0.1\nnameserver 192.0.2.1\noptions ndots:2\n";
        let own: SocketAddr = "127.0.0.1:53".parse().unwrap();
        assert_eq!(
            upstreams_from_resolv_conf(text, own),
            ["192.0.2.1:53".parse::<SocketAddr>().unwrap()]
        );
        let elsewhere: SocketAddr = "127.0.0.1:1053".parse().unwrap();
        assert_eq!(upstreams_from_resolv_conf(text, elsewhere).len(), 2);
        assert!(upstreams_from_resolv_conf("", own).is_empty());
    }

    #[test]
    fn zone_records_become_hickory_records() {
        let record = to_record(&zone::Record {
            name: "_dns._udp.kube-dns.kube-system.svc.cluster.local".into(),
            ttl: 5,
            data: zone::Data::Srv {
                priority: 0,
                weight: 100,
                port: 53,
                target: "kube-dns.kube-system.svc.cluster.local".into(),
            },
        })
        .unwrap();
        assert_eq!(record.record_type(), RecordType::SRV);
        assert_eq!(
            record.name.to_string(),
            "_dns._udp.kube-dns.kube-system.svc.cluster.local."
        );
        // A target that is no DNS name is left out rather than sent broken.
        let long = "x".repeat(70);
        assert!(
            to_record(&zone::Record {
                name: "a.cluster.local".into(),
                ttl: 5,
                data: zone::Data::Cname(long),
            })
            .is_none()
        );
    }

    #[tokio::test]
    async fn listeners_share_one_free_port() {
        let listeners = Listeners::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let address = listeners.local_addr().unwrap();
        assert_ne!(address.port(), 0);
        assert_eq!(listeners.tcp.local_addr().unwrap(), address);
    }
}

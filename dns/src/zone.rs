//! The cluster zone: Services, EndpointSlices and Pods as DNS records, and the answer to one
//! question. Pure: built from API objects, asked with a name and a type, no I/O.
//!
//! The names follow the Kubernetes DNS specification (as CoreDNS's `kubernetes` plugin serves
//! it), under the cluster domain `D`:
//!
//! ```text
//! svc.ns.svc.D                 A/AAAA  the ClusterIPs; for a headless Service, every ready
//!                                      endpoint address; CNAME for an ExternalName Service
//! host.svc.ns.svc.D            A/AAAA  one ready endpoint of a headless Service: its hostname
//!                                      (a StatefulSet pod's name) or its address with dashes
//! _port._proto.svc.ns.svc.D    SRV     each named port: to svc.ns.svc.D (ClusterIP) or to every
//!                                      host.svc.ns.svc.D (headless), with the port number
//! a-b-c-d.ns.pod.D             A/AAAA  a pod's address, only while such a pod exists
//! d.c.b.a.in-addr.arpa (ip6)   PTR     a ClusterIP → svc.ns.svc.D; an endpoint → its host
//!                                      name; any other pod address → a-b-c-d.ns.pod.D
//! dns-version.D                TXT     the version of the specification served
//! D                            SOA     the zone's apex; also in negative answers
//! ```
//!
//! A name under `D` that is none of these (and no ancestor of one) does not exist: NXDOMAIN. A name
//! that exists without records of the asked type (a Service with no ready endpoints, a Service's
//! AAAA when it has only IPv4 addresses, `svc.D`) is NODATA. Names outside `D`, and reverse names
//! of addresses the cluster does not know, are not ours: the server forwards them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label naming the Service of an EndpointSlice.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The version of the Kubernetes DNS specification served, in `dns-version.D`'s TXT record.
pub const SCHEMA_VERSION: &str = "1.1.0";

/// A record type this zone knows about; the rest are [`QueryType::Other`] (NODATA for names
/// that exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueryType {
    /// IPv4 address.
    A,
    /// IPv6 address.
    Aaaa,
    /// Service location.
    Srv,
    /// Reverse pointer.
    Ptr,
    /// Alias.
    Cname,
    /// Text.
    Txt,
    /// Start of authority.
    Soa,
    /// Every record of the name.
    Any,
    /// Any other type, by number.
    Other(u16),
}

/// The data of one record.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Data {
    /// An IPv4 address.
    A(Ipv4Addr),
    /// An IPv6 address.
    Aaaa(Ipv6Addr),
    /// A service location.
    Srv {
        /// Lower is preferred.
        priority: u16,
        /// Relative share among equal priorities.
        weight: u16,
        /// The port.
        port: u16,
        /// The host (a name in the zone, without the trailing dot).
        target: String,
    },
    /// A reverse pointer to a name (without the trailing dot).
    Ptr(String),
    /// An alias of the name (without the trailing dot).
    Cname(String),
    /// Text.
    Txt(String),
    /// The zone's start of authority.
    Soa {
        /// The primary server's name.
        mname: String,
        /// The mailbox of the zone's keeper, as a name.
        rname: String,
        /// The zone's version: bumped by every rebuild.
        serial: u32,
        /// Negative-answer TTL.
        minimum: u32,
    },
}

impl Data {
    fn query_type(&self) -> QueryType {
        match self {
            Data::A(_) => QueryType::A,
            Data::Aaaa(_) => QueryType::Aaaa,
            Data::Srv { .. } => QueryType::Srv,
            Data::Ptr(_) => QueryType::Ptr,
            Data::Cname(_) => QueryType::Cname,
            Data::Txt(_) => QueryType::Txt,
            Data::Soa { .. } => QueryType::Soa,
        }
    }

    fn address(ip: IpAddr) -> Data {
        match ip {
            IpAddr::V4(ip) => Data::A(ip),
            IpAddr::V6(ip) => Data::Aaaa(ip),
        }
    }
}

/// One record: owner name (lower case, without the trailing dot), TTL and data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The owner name.
    pub name: String,
    /// Seconds a resolver may cache it.
    pub ttl: u32,
    /// The data.
    pub data: Data,
}

/// The answer to one question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// NOERROR with records: the answers and helpful additions (the addresses of SRV targets).
    Records {
        /// The answer section.
        answers: Vec<Record>,
        /// The additional section.
        additionals: Vec<Record>,
    },
    /// NOERROR, no records: the name exists but has none of this type.
    NoData,
    /// The name does not exist in the cluster domain.
    NxDomain,
    /// Not the cluster's to answer: forward it.
    NotOurs,
}

/// The cluster's records at one moment. Immutable: the server builds a new one on every change
/// and swaps it in whole.
#[derive(Clone, Debug)]
pub struct Zone {
    /// The cluster domain, lower case, without the trailing dot.
    domain: String,
    ttl: u32,
    serial: u32,
    /// Records by owner name. An existing name without records (an ancestor of one with
    /// records, such as `ns.svc.D`) maps to an empty set.
    names: HashMap<String, BTreeSet<Data>>,
    /// PTR targets by address.
    reverse: HashMap<IpAddr, String>,
}

/// What the zone is built from.
#[derive(Clone, Copy, Debug)]
pub struct Objects<'a> {
    /// Every Service.
    pub services: &'a [Service],
    /// Every EndpointSlice.
    pub slices: &'a [EndpointSlice],
    /// Every Pod.
    pub pods: &'a [Pod],
}

impl Zone {
    /// The zone of `domain` (e.g. `cluster.local`) holding `objects`, every record with `ttl`;
    /// `serial` tells resolvers which version of the zone they saw.
    pub fn build(domain: &str, ttl: u32, serial: u32, objects: Objects<'_>) -> Zone {
        let domain = normalize(domain);
        let mut zone = Zone {
            domain: domain.clone(),
            ttl,
            serial,
            names: HashMap::new(),
            reverse: HashMap::new(),
        };
        zone.add(&domain, zone.soa_data());
        zone.add(
            &format!("dns-version.{domain}"),
            Data::Txt(SCHEMA_VERSION.into()),
        );
        zone.add_name(&format!("svc.{domain}"));
        zone.add_name(&format!("pod.{domain}"));

        // Pods first: an endpoint's name replaces a pod's generic PTR.
        for pod in objects.pods {
            zone.add_pod(pod);
        }
        let mut slices: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
        for slice in objects.slices {
            let (Some(ns), Some(service)) = (
                slice.metadata.namespace.as_deref(),
                slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL)),
            ) else {
                continue;
            };
            slices
                .entry((ns, service.as_str()))
                .or_default()
                .push(slice);
        }
        for service in objects.services {
            let (Some(ns), Some(name)) = (
                service.metadata.namespace.as_deref(),
                service.metadata.name.as_deref(),
            ) else {
                continue;
            };
            let of_service = slices.get(&(ns, name)).map_or(&[][..], Vec::as_slice);
            zone.add_service(ns, name, service, of_service);
        }
        zone
    }

    /// The cluster domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    fn soa_data(&self) -> Data {
        Data::Soa {
            mname: format!("ns.dns.{}", self.domain),
            rname: format!("hostmaster.{}", self.domain),
            serial: self.serial,
            minimum: self.ttl,
        }
    }

    /// The zone's SOA record, for the authority section of negative answers.
    pub fn soa(&self) -> Record {
        Record {
            name: self.domain.clone(),
            ttl: self.ttl,
            data: self.soa_data(),
        }
    }

    /// Whether `name` (any case, trailing dot or not) is in the cluster domain.
    pub fn contains(&self, name: &str) -> bool {
        let name = normalize(name);
        in_domain(&name, &self.domain)
    }

    /// Records `name` exists, with its ancestors up to the apex as names without records.
    fn add_name(&mut self, name: &str) {
        let mut at = name;
        loop {
            if self.names.contains_key(at) && at != name {
                return;
            }
            self.names.entry(at.to_string()).or_default();
            if at == self.domain {
                return;
            }
            match at.split_once('.') {
                Some((_, parent)) if in_domain(parent, &self.domain) => at = parent,
                _ => return,
            }
        }
    }

    fn add(&mut self, name: &str, data: Data) {
        self.add_name(name);
        self.names
            .get_mut(name)
            .expect("add_name inserted the name")
            .insert(data);
    }

    fn add_pod(&mut self, pod: &Pod) {
        let (Some(ns), Some(spec), Some(status)) = (
            pod.metadata.namespace.as_deref(),
            pod.spec.as_ref(),
            pod.status.as_ref(),
        ) else {
            return;
        };
        // A host-network pod's address is the node's.
        if spec.host_network == Some(true)
            || matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
        {
            return;
        }
        let ips = status
            .pod_ips
            .iter()
            .flatten()
            .map(|p| p.ip.as_str())
            .chain(status.pod_ip.as_deref())
            .filter_map(|ip| ip.parse::<IpAddr>().ok())
            .collect::<BTreeSet<_>>();
        for ip in ips {
            let name = format!("{}.{ns}.pod.{}", dashed(ip), self.domain);
            self.add(&name, Data::address(ip));
            self.reverse.insert(ip, name);
        }
    }

    fn add_service(&mut self, ns: &str, name: &str, service: &Service, slices: &[&EndpointSlice]) {
        let Some(spec) = service.spec.as_ref() else {
            return;
        };
        let base = format!("{name}.{ns}.svc.{}", self.domain);
        if spec.type_.as_deref() == Some("ExternalName") {
            match spec.external_name.as_deref().map(normalize) {
                Some(target) if !target.is_empty() => self.add(&base, Data::Cname(target)),
                _ => self.add_name(&base),
            }
            return;
        }
        self.add_name(&base);
        let cluster_ips: BTreeSet<IpAddr> = spec
            .cluster_ips
            .iter()
            .flatten()
            .map(String::as_str)
            .chain(spec.cluster_ip.as_deref())
            .filter_map(|ip| ip.parse().ok())
            .collect();
        let headless = spec.cluster_ip.as_deref() == Some("None") || cluster_ips.is_empty();
        if !headless {
            for ip in cluster_ips {
                self.add(&base, Data::address(ip));
                self.reverse.insert(ip, base.clone());
            }
            for port in spec.ports.iter().flatten() {
                let srv = Data::Srv {
                    priority: 0,
                    weight: 100,
                    port: port.port as u16,
                    target: base.clone(),
                };
                if let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                    let protocol = port.protocol.as_deref().unwrap_or("TCP");
                    self.add(&srv_name(port_name, protocol, &base), srv.clone());
                }
                self.add(&base, srv);
            }
            return;
        }
        // Headless: every ready endpoint, by hostname or dashed address.
        let mut srv: BTreeMap<String, Vec<(u16, String)>> = BTreeMap::new();
        for slice in slices {
            for endpoint in &slice.endpoints {
                let ready = endpoint
                    .conditions
                    .as_ref()
                    .and_then(|c| c.ready)
                    .unwrap_or(true);
                if !ready {
                    continue;
                }
                for ip in endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse::<IpAddr>().ok())
                {
                    let host = endpoint
                        .hostname
                        .as_deref()
                        .filter(|h| !h.is_empty())
                        .map(str::to_lowercase)
                        .unwrap_or_else(|| dashed(ip));
                    let host = format!("{host}.{base}");
                    self.add(&base, Data::address(ip));
                    self.add(&host, Data::address(ip));
                    self.reverse.insert(ip, host.clone());
                    for port in slice.ports.iter().flatten() {
                        let Some(number) = port.port else { continue };
                        let protocol = port.protocol.as_deref().unwrap_or("TCP");
                        if let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                            srv.entry(srv_name(port_name, protocol, &base))
                                .or_default()
                                .push((number as u16, host.clone()));
                        }
                        srv.entry(base.clone())
                            .or_default()
                            .push((number as u16, host.clone()));
                    }
                }
            }
        }
        for (owner, targets) in srv {
            let weight = (100 / targets.len()).max(1) as u16;
            for (port, target) in targets {
                self.add(
                    &owner,
                    Data::Srv {
                        priority: 0,
                        weight,
                        port,
                        target,
                    },
                );
            }
        }
    }

    /// The answer to the question `name` (any case, trailing dot or not), `qtype`.
    pub fn answer(&self, name: &str, qtype: QueryType) -> Answer {
        let name = normalize(name);
        if !in_domain(&name, &self.domain) {
            return self.answer_reverse(&name, qtype);
        }
        let Some(data) = self.names.get(&name) else {
            return Answer::NxDomain;
        };
        let cname = data.iter().find(|d| matches!(d, Data::Cname(_)));
        let chosen: Vec<&Data> = match (qtype, cname) {
            (QueryType::Any, _) => data.iter().collect(),
            (QueryType::Cname, _) => cname.into_iter().collect(),
            // An alias answers every type with itself; the resolver follows it.
            (_, Some(cname)) => vec![cname],
            (qtype, None) => data.iter().filter(|d| d.query_type() == qtype).collect(),
        };
        if chosen.is_empty() {
            return Answer::NoData;
        }
        let answers: Vec<Record> = chosen
            .into_iter()
            .map(|d| self.record(&name, d.clone()))
            .collect();
        let mut additionals = Vec::new();
        let mut seen = BTreeSet::new();
        for answer in &answers {
            if let Data::Srv { target, .. } = &answer.data
                && seen.insert(target.clone())
            {
                for d in self.names.get(target).into_iter().flatten() {
                    if matches!(d, Data::A(_) | Data::Aaaa(_)) {
                        additionals.push(self.record(target, d.clone()));
                    }
                }
            }
        }
        Answer::Records {
            answers,
            additionals,
        }
    }

    fn answer_reverse(&self, name: &str, qtype: QueryType) -> Answer {
        if !matches!(qtype, QueryType::Ptr | QueryType::Any) {
            return Answer::NotOurs;
        }
        match reverse_ip(name).and_then(|ip| self.reverse.get(&ip)) {
            Some(target) => Answer::Records {
                answers: vec![self.record(name, Data::Ptr(target.clone()))],
                additionals: Vec::new(),
            },
            None => Answer::NotOurs,
        }
    }

    fn record(&self, name: &str, data: Data) -> Record {
        Record {
            name: name.to_string(),
            ttl: self.ttl,
            data,
        }
    }
}

/// `name` in lower case without the trailing dot.
fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn in_domain(name: &str, domain: &str) -> bool {
    name == domain
        || name
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.'))
}

/// `_name._proto.base`, lower case.
fn srv_name(port: &str, protocol: &str, base: &str) -> String {
    format!(
        "_{}._{}.{base}",
        port.to_ascii_lowercase(),
        protocol.to_ascii_lowercase()
    )
}

/// An address as one label: `10-1-2-3`, `fd00--1`.
fn dashed(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// The address a reverse name (`4.3.2.1.in-addr.arpa`, `….ip6.arpa`) stands for.
fn reverse_ip(name: &str) -> Option<IpAddr> {
    if let Some(head) = name.strip_suffix(".in-addr.arpa") {
        let mut octets = head
            .split('.')
            .map(|o| o.parse::<u8>().ok())
            .collect::<Option<Vec<u8>>>()?;
        if octets.len() != 4 {
            return None;
        }
        octets.reverse();
        return Some(IpAddr::from([octets[0], octets[1], octets[2], octets[3]]));
    }
    let head = name.strip_suffix(".ip6.arpa")?;
    let nibbles: Vec<u8> = head
        .split('.')
        .map(|n| match n.len() {
            1 => u8::from_str_radix(n, 16).ok(),
            _ => None,
        })
        .collect::<Option<Vec<u8>>>()?;
    if nibbles.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, pair) in nibbles.rchunks(2).enumerate() {
        // Reversed: the last label is the high nibble of the first byte.
        bytes[i] = (pair[1] << 4) | pair[0];
    }
    Some(IpAddr::from(bytes))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodIP, PodSpec, PodStatus, ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn port(name: Option<&str>, number: i32, protocol: &str) -> ServicePort {
        ServicePort {
            name: name.map(str::to_string),
            port: number,
            protocol: Some(protocol.into()),
            ..Default::default()
        }
    }

    fn cluster_ip(ns: &str, name: &str, ips: &[&str], ports: Vec<ServicePort>) -> Service {
        Service {
            metadata: meta(ns, name),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                cluster_ip: ips.first().map(|s| s.to_string()),
                cluster_ips: Some(ips.iter().map(|s| s.to_string()).collect()),
                ports: Some(ports),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn headless(ns: &str, name: &str) -> Service {
        Service {
            metadata: meta(ns, name),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                cluster_ips: Some(vec!["None".into()]),
                ports: Some(vec![port(Some("web"), 80, "TCP")]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn endpoint(ip: &str, hostname: Option<&str>, ready: Option<bool>) -> Endpoint {
        Endpoint {
            addresses: vec![ip.into()],
            hostname: hostname.map(str::to_string),
            conditions: Some(EndpointConditions {
                ready,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn slice(ns: &str, service: &str, endpoints: Vec<Endpoint>) -> EndpointSlice {
        let mut metadata = meta(ns, &format!("{service}-abc"));
        metadata.labels = Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into());
        EndpointSlice {
            metadata,
            address_type: "IPv4".into(),
            endpoints,
            ports: Some(vec![EndpointPort {
                name: Some("web".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
        }
    }

    fn pod(ns: &str, name: &str, ip: &str) -> Pod {
        Pod {
            metadata: meta(ns, name),
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some(ip.into()),
                pod_ips: Some(vec![PodIP { ip: ip.into() }]),
                ..Default::default()
            }),
        }
    }

    /// A cluster: `db` (ClusterIP, dual-stack, named and unnamed ports), `web` (headless, two
    /// ready StatefulSet pods and a not-ready one, one endpoint without hostname), `ext`
    /// (ExternalName), `empty` (headless, no endpoints) and the pods behind them.
    fn zone() -> Zone {
        let services = vec![
            cluster_ip(
                "prod",
                "db",
                &["10.96.0.20", "fd00::20"],
                vec![port(Some("pg"), 5432, "TCP"), port(None, 9000, "UDP")],
            ),
            headless("prod", "web"),
            headless("prod", "empty"),
            Service {
                metadata: meta("prod", "ext"),
                spec: Some(ServiceSpec {
                    type_: Some("ExternalName".into()),
                    external_name: Some("Example.COM.".into()),
                    ..Default::default()
                }),
                status: None,
            },
        ];
        let slices = vec![
            slice(
                "prod",
                "web",
                vec![
                    endpoint("10.1.0.1", Some("web-0"), Some(true)),
                    endpoint("10.1.0.2", Some("web-1"), None),
                    endpoint("10.1.0.3", Some("web-2"), Some(false)),
                    endpoint("10.1.0.4", None, Some(true)),
                ],
            ),
            // A slice of a Service that does not exist publishes nothing.
            slice("prod", "gone", vec![endpoint("10.1.0.9", None, Some(true))]),
        ];
        let pods = vec![
            pod("prod", "web-0", "10.1.0.1"),
            pod("prod", "loner", "10.1.0.50"),
        ];
        Zone::build(
            "Cluster.Local.",
            5,
            7,
            Objects {
                services: &services,
                slices: &slices,
                pods: &pods,
            },
        )
    }

    fn data(answer: Answer) -> Vec<Data> {
        match answer {
            Answer::Records { answers, .. } => answers.into_iter().map(|r| r.data).collect(),
            other => panic!("expected records, got {other:?}"),
        }
    }

    fn a(ip: &str) -> Data {
        Data::address(ip.parse().unwrap())
    }

    #[test]
    fn cluster_ip_service_answers_its_addresses_by_family() {
        let z = zone();
        assert_eq!(
            data(z.answer("db.prod.svc.cluster.local", QueryType::A)),
            [a("10.96.0.20")]
        );
        assert_eq!(
            data(z.answer("DB.Prod.SVC.cluster.local.", QueryType::Aaaa)),
            [a("fd00::20")]
        );
        let Answer::Records { answers, .. } = z.answer("db.prod.svc.cluster.local", QueryType::A)
        else {
            unreachable!()
        };
        assert_eq!(answers[0].name, "db.prod.svc.cluster.local");
        assert_eq!(answers[0].ttl, 5);
    }

    #[test]
    fn srv_for_named_ports_of_a_cluster_ip_service() {
        let z = zone();
        let Answer::Records {
            answers,
            additionals,
        } = z.answer("_pg._tcp.db.prod.svc.cluster.local", QueryType::Srv)
        else {
            panic!("no SRV")
        };
        assert_eq!(
            answers.iter().map(|r| &r.data).collect::<Vec<_>>(),
            [&Data::Srv {
                priority: 0,
                weight: 100,
                port: 5432,
                target: "db.prod.svc.cluster.local".into()
            }]
        );
        let mut extra: Vec<Data> = additionals.into_iter().map(|r| r.data).collect();
        extra.sort();
        assert_eq!(extra, [a("10.96.0.20"), a("fd00::20")]);
        // The wrong protocol, or an unnamed port, is no name.
        assert_eq!(
            z.answer("_pg._udp.db.prod.svc.cluster.local", QueryType::Srv),
            Answer::NxDomain
        );
        // The Service name itself lists every port, named or not.
        let ports: Vec<u16> = data(z.answer("db.prod.svc.cluster.local", QueryType::Srv))
            .into_iter()
            .map(|d| match d {
                Data::Srv { port, .. } => port,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ports, [5432, 9000]);
        // `_tcp.db...` is an ancestor of a name: it exists, without records.
        assert_eq!(
            z.answer("_tcp.db.prod.svc.cluster.local", QueryType::A),
            Answer::NoData
        );
    }

    #[test]
    fn headless_service_answers_each_ready_endpoint() {
        let z = zone();
        let mut all = data(z.answer("web.prod.svc.cluster.local", QueryType::A));
        all.sort();
        assert_eq!(all, [a("10.1.0.1"), a("10.1.0.2"), a("10.1.0.4")]);
        assert_eq!(
            data(z.answer("web-0.web.prod.svc.cluster.local", QueryType::A)),
            [a("10.1.0.1")]
        );
        // Not ready: not published.
        assert_eq!(
            z.answer("web-2.web.prod.svc.cluster.local", QueryType::A),
            Answer::NxDomain
        );
        // Without a hostname, the endpoint is named by its address.
        assert_eq!(
            data(z.answer("10-1-0-4.web.prod.svc.cluster.local", QueryType::A)),
            [a("10.1.0.4")]
        );
        // IPv4 only: AAAA is NODATA, not NXDOMAIN.
        assert_eq!(
            z.answer("web-0.web.prod.svc.cluster.local", QueryType::Aaaa),
            Answer::NoData
        );
    }

    #[test]
    fn headless_srv_names_every_endpoint_with_its_port() {
        let z = zone();
        let Answer::Records {
            answers,
            additionals,
        } = z.answer("_web._tcp.web.prod.svc.cluster.local", QueryType::Srv)
        else {
            panic!("no SRV")
        };
        let mut targets: Vec<(u16, u16, String)> = answers
            .into_iter()
            .map(|r| match r.data {
                Data::Srv {
                    port,
                    weight,
                    target,
                    ..
                } => (port, weight, target),
                other => panic!("{other:?}"),
            })
            .collect();
        targets.sort();
        assert_eq!(
            targets,
            [
                (8080, 33, "10-1-0-4.web.prod.svc.cluster.local".to_string()),
                (8080, 33, "web-0.web.prod.svc.cluster.local".to_string()),
                (8080, 33, "web-1.web.prod.svc.cluster.local".to_string()),
            ]
        );
        assert_eq!(
            additionals.len(),
            3,
            "each target's address: {additionals:?}"
        );
    }

    #[test]
    fn missing_names_in_the_domain_are_nxdomain_and_ancestors_nodata() {
        let z = zone();
        for name in [
            "nope.prod.svc.cluster.local",
            "db.other.svc.cluster.local",
            "gone.prod.svc.cluster.local",
            "x.cluster.local",
            "a.b.db.prod.svc.cluster.local",
            "10-1-0-99.prod.pod.cluster.local",
        ] {
            assert_eq!(z.answer(name, QueryType::A), Answer::NxDomain, "{name}");
        }
        for name in [
            "cluster.local",
            "svc.cluster.local",
            "prod.svc.cluster.local",
            "pod.cluster.local",
        ] {
            assert_eq!(z.answer(name, QueryType::A), Answer::NoData, "{name}");
        }
        // A headless Service without ready endpoints exists, with no addresses.
        assert_eq!(
            z.answer("empty.prod.svc.cluster.local", QueryType::A),
            Answer::NoData
        );
        // A type the zone never has.
        assert_eq!(
            z.answer("db.prod.svc.cluster.local", QueryType::Other(15)),
            Answer::NoData
        );
    }

    #[test]
    fn names_outside_the_domain_are_not_ours() {
        let z = zone();
        for name in ["example.com", "cluster.local.example.com", "xcluster.local"] {
            assert_eq!(z.answer(name, QueryType::A), Answer::NotOurs, "{name}");
        }
        assert!(z.contains("A.Cluster.Local."));
        assert!(!z.contains("xcluster.local"));
    }

    #[test]
    fn external_name_is_an_alias_for_every_type() {
        let z = zone();
        for qtype in [QueryType::A, QueryType::Aaaa, QueryType::Cname] {
            assert_eq!(
                data(z.answer("ext.prod.svc.cluster.local", qtype)),
                [Data::Cname("example.com".into())]
            );
        }
    }

    #[test]
    fn reverse_names_of_services_endpoints_and_pods() {
        let z = zone();
        let ptr = |name: &str| data(z.answer(name, QueryType::Ptr));
        assert_eq!(
            ptr("20.0.96.10.in-addr.arpa."),
            [Data::Ptr("db.prod.svc.cluster.local".into())]
        );
        // An endpoint's name wins over its pod's generic one.
        assert_eq!(
            ptr("1.0.1.10.in-addr.arpa"),
            [Data::Ptr("web-0.web.prod.svc.cluster.local".into())]
        );
        assert_eq!(
            ptr("50.0.1.10.in-addr.arpa"),
            [Data::Ptr("10-1-0-50.prod.pod.cluster.local".into())]
        );
        let v6 = "0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";
        assert_eq!(ptr(v6), [Data::Ptr("db.prod.svc.cluster.local".into())]);
        // Unknown addresses and malformed reverse names go upstream.
        for name in [
            "9.9.9.9.in-addr.arpa",
            "1.2.3.in-addr.arpa",
            "300.0.1.10.in-addr.arpa",
            "x.ip6.arpa",
        ] {
            assert_eq!(z.answer(name, QueryType::Ptr), Answer::NotOurs, "{name}");
        }
        assert_eq!(
            z.answer("20.0.96.10.in-addr.arpa", QueryType::A),
            Answer::NotOurs
        );
    }

    #[test]
    fn pods_by_dashed_address() {
        let z = zone();
        assert_eq!(
            data(z.answer("10-1-0-50.prod.pod.cluster.local", QueryType::A)),
            [a("10.1.0.50")]
        );
        // Only in the pod's own namespace.
        assert_eq!(
            z.answer("10-1-0-50.other.pod.cluster.local", QueryType::A),
            Answer::NxDomain
        );
    }

    #[test]
    fn apex_soa_and_version() {
        let z = zone();
        assert_eq!(
            data(z.answer("cluster.local", QueryType::Soa)),
            [Data::Soa {
                mname: "ns.dns.cluster.local".into(),
                rname: "hostmaster.cluster.local".into(),
                serial: 7,
                minimum: 5
            }]
        );
        assert_eq!(z.soa().name, "cluster.local");
        assert_eq!(
            data(z.answer("dns-version.cluster.local", QueryType::Txt)),
            [Data::Txt(SCHEMA_VERSION.into())]
        );
    }

    #[test]
    fn finished_and_host_network_pods_have_no_names() {
        let mut done = pod("prod", "job", "10.1.0.60");
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut host = pod("prod", "agent", "10.1.0.61");
        host.spec.as_mut().unwrap().host_network = Some(true);
        let z = Zone::build(
            "cluster.local",
            5,
            1,
            Objects {
                services: &[],
                slices: &[],
                pods: &[done, host],
            },
        );
        for name in [
            "10-1-0-60.prod.pod.cluster.local",
            "10-1-0-61.prod.pod.cluster.local",
        ] {
            assert_eq!(z.answer(name, QueryType::A), Answer::NxDomain, "{name}");
        }
        assert_eq!(
            z.answer("60.0.1.10.in-addr.arpa", QueryType::Ptr),
            Answer::NotOurs
        );
    }
}

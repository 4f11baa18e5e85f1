//! From Services and Endpoints to the proxy's desired state: for each Service port, its protocol,
//! the addresses to listen on, its ready endpoints and its affinity.
//!
//! A pure function of the API objects, so the [`Proxier`](crate::Proxier) only diffs plans.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service, ServicePort};

use crate::balancer::{DEFAULT_AFFINITY_TIMEOUT, ServicePortName};

/// A transport protocol the proxy serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP: a connection to the endpoint per accepted connection.
    Tcp,
    /// UDP: a flow to the endpoint per client address, closed after an idle timeout.
    Udp,
}

impl Protocol {
    /// The protocol of a `protocol` field (`TCP` when absent); `None` for SCTP and the unknown.
    pub fn parse(field: Option<&str>) -> Option<Self> {
        match field.unwrap_or("TCP") {
            "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
        })
    }
}

/// What the proxy does for one Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortPlan {
    /// The port's protocol.
    pub protocol: Protocol,
    /// Where to listen: each ClusterIP with the Service port, and the NodePort if any.
    pub listen: Vec<SocketAddr>,
    /// The ready endpoints (`subsets[].addresses` with the port of the same name).
    pub endpoints: Vec<SocketAddr>,
    /// The ClientIP affinity timeout, when `sessionAffinity` is `ClientIP`.
    pub affinity: Option<Duration>,
}

/// The desired state of the whole proxy.
pub type Plan = BTreeMap<ServicePortName, PortPlan>;

/// Computes the plan from all Services and Endpoints.
///
/// Services without a ClusterIP (headless, ExternalName) get no ClusterIP listener; ports of
/// other protocols than TCP and UDP are skipped. NodePorts (types NodePort and LoadBalancer) are
/// bound on `node_port_address`, or not at all when it is `None`.
pub fn plan<S, E>(
    services: impl IntoIterator<Item = S>,
    endpoints: impl IntoIterator<Item = E>,
    node_port_address: Option<IpAddr>,
) -> Plan
where
    S: Borrow<Service>,
    E: Borrow<Endpoints>,
{
    let endpoints: Vec<E> = endpoints.into_iter().collect();
    let by_name: HashMap<(&str, &str), &Endpoints> = endpoints
        .iter()
        .map(|e| {
            let e = e.borrow();
            (
                (
                    e.metadata.namespace.as_deref().unwrap_or("default"),
                    e.metadata.name.as_deref().unwrap_or(""),
                ),
                e,
            )
        })
        .collect();
    let mut plan = Plan::new();
    for service in services {
        let service = service.borrow();
        let (Some(name), Some(spec)) = (service.metadata.name.as_deref(), service.spec.as_ref())
        else {
            continue;
        };
        let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
        let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
        if type_ == "ExternalName" {
            continue;
        }
        let cluster_ips = cluster_ips(service);
        let node_ports = matches!(type_, "NodePort" | "LoadBalancer");
        let affinity = affinity_of(service);
        let subsets = by_name.get(&(namespace, name));
        for port in spec.ports.iter().flatten() {
            let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
                continue;
            };
            let Ok(number) = u16::try_from(port.port) else {
                continue;
            };
            let mut listen: Vec<SocketAddr> = cluster_ips
                .iter()
                .map(|ip| SocketAddr::new(*ip, number))
                .collect();
            if node_ports
                && let Some(address) = node_port_address
                && let Some(node_port) = port.node_port.and_then(|p| u16::try_from(p).ok())
                && node_port != 0
            {
                listen.push(SocketAddr::new(address, node_port));
            }
            if listen.is_empty() {
                continue;
            }
            let port_name = port.name.clone().unwrap_or_default();
            plan.insert(
                ServicePortName::new(namespace, name, port_name),
                PortPlan {
                    protocol,
                    listen,
                    endpoints: subsets
                        .map(|e| ready_endpoints(e, port, protocol))
                        .unwrap_or_default(),
                    affinity,
                },
            );
        }
    }
    plan
}

/// The ClientIP affinity timeout of a Service with `sessionAffinity: ClientIP`.
pub(crate) fn affinity_of(service: &Service) -> Option<Duration> {
    let spec = service.spec.as_ref()?;
    (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .filter(|s| *s > 0)
            .map_or(DEFAULT_AFFINITY_TIMEOUT, |s| Duration::from_secs(s as u64))
    })
}

/// The Service's ClusterIPs that are addresses (not `None` or empty).
fn cluster_ips(service: &Service) -> Vec<IpAddr> {
    let Some(spec) = service.spec.as_ref() else {
        return Vec::new();
    };
    let mut ips: Vec<IpAddr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// The ready addresses of an Endpoints object for one Service port: the subsets' `addresses` (not
/// `notReadyAddresses`) with the endpoint port of the same name and protocol.
pub(crate) fn ready_endpoints(
    endpoints: &Endpoints,
    port: &ServicePort,
    protocol: Protocol,
) -> Vec<SocketAddr> {
    let want = port.name.as_deref().unwrap_or("");
    let mut out = Vec::new();
    for subset in endpoints.subsets.iter().flatten() {
        let Some(target) = subset.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == want
                && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
        }) else {
            continue;
        };
        let Ok(number) = u16::try_from(target.port) else {
            continue;
        };
        for address in subset.addresses.iter().flatten() {
            if let Ok(ip) = address.ip.parse::<IpAddr>() {
                out.push(SocketAddr::new(ip, number));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    fn endpoints(value: serde_json::Value) -> Endpoints {
        serde_json::from_value(value).unwrap()
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cluster_ip_node_port_endpoints_and_affinity() {
        let svc = service(json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "spec": {
                "type": "NodePort",
                "clusterIP": "127.96.0.10", "clusterIPs": ["127.96.0.10"],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}},
                "ports": [
                    {"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080},
                    {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
                    {"name": "sctp", "port": 99, "protocol": "SCTP"}
                ]
            }
        }));
        let eps = endpoints(json!({
            "metadata": {"namespace": "ns", "name": "web"},
            "subsets": [
                {
                    "addresses": [{"ip": "127.0.0.3"}, {"ip": "127.0.0.2"}],
                    "notReadyAddresses": [{"ip": "127.0.0.9"}],
                    "ports": [{"name": "http", "port": 8080}, {"name": "dns", "port": 5353, "protocol": "UDP"}]
                },
                {
                    "addresses": [{"ip": "127.0.0.4"}],
                    "ports": [{"name": "http", "port": 9090}]
                }
            ]
        }));
        let node: IpAddr = "127.0.0.1".parse().unwrap();
        let plan = plan([&svc], [&eps], Some(node));
        assert_eq!(plan.len(), 2, "{plan:?}");
        let http = &plan[&ServicePortName::new("ns", "web", "http")];
        assert_eq!(http.protocol, Protocol::Tcp);
        assert_eq!(
            http.listen,
            vec![sa("127.96.0.10:80"), sa("127.0.0.1:30080")]
        );
        assert_eq!(
            http.endpoints,
            vec![
                sa("127.0.0.2:8080"),
                sa("127.0.0.3:8080"),
                sa("127.0.0.4:9090")
            ]
        );
        assert_eq!(http.affinity, Some(Duration::from_secs(5)));
        let dns = &plan[&ServicePortName::new("ns", "web", "dns")];
        assert_eq!(dns.protocol, Protocol::Udp);
        assert_eq!(
            dns.listen,
            vec![sa("127.96.0.10:53"), sa("127.0.0.1:30053")]
        );
        assert_eq!(
            dns.endpoints,
            vec![sa("127.0.0.2:5353"), sa("127.0.0.3:5353")]
        );
        // Without a node address, no NodePort listeners.
        let plan = plan_without_node(&svc, &eps);
        assert_eq!(
            plan[&ServicePortName::new("ns", "web", "http")].listen,
            vec![sa("127.96.0.10:80")]
        );
    }

    fn plan_without_node(svc: &Service, eps: &Endpoints) -> Plan {
        plan([svc], [eps], None)
    }

    #[test]
    fn default_affinity_timeout_and_unnamed_port() {
        let svc = service(json!({
            "metadata": {"namespace": "ns", "name": "one"},
            "spec": {"clusterIP": "127.96.0.11", "sessionAffinity": "ClientIP", "ports": [{"port": 8000}]}
        }));
        let eps = endpoints(json!({
            "metadata": {"namespace": "ns", "name": "one"},
            "subsets": [{"addresses": [{"ip": "127.0.0.5"}], "ports": [{"port": 9000}]}]
        }));
        let plan = plan([svc], [eps], Some("127.0.0.1".parse().unwrap()));
        let one = &plan[&ServicePortName::new("ns", "one", "")];
        assert_eq!(one.affinity, Some(DEFAULT_AFFINITY_TIMEOUT));
        assert_eq!(one.endpoints, vec![sa("127.0.0.5:9000")]);
        assert_eq!(
            one.listen,
            vec![sa("127.96.0.11:8000")],
            "ClusterIP type has no NodePort"
        );
    }

    #[test]
    fn headless_external_name_and_missing_endpoints() {
        let headless = service(json!({
            "metadata": {"namespace": "ns", "name": "h"},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
        }));
        let external = service(json!({
            "metadata": {"namespace": "ns", "name": "x"},
            "spec": {"type": "ExternalName", "externalName": "example.com", "ports": [{"port": 80}]}
        }));
        let lonely = service(json!({
            "metadata": {"namespace": "ns", "name": "lonely"},
            "spec": {"clusterIP": "127.96.0.12", "ports": [{"port": 80}]}
        }));
        let plan = plan([headless, external, lonely], Vec::<Endpoints>::new(), None);
        assert_eq!(plan.len(), 1);
        let lonely = &plan[&ServicePortName::new("ns", "lonely", "")];
        assert!(lonely.endpoints.is_empty());
        assert_eq!(lonely.affinity, None);
    }
}

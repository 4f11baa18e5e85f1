//! The `kube-dns` Service, its Endpoints and its EndpointSlice as JSON: pure, so the shape the
//! proxy and the kubelet rely on is unit-tested.

use std::net::{IpAddr, SocketAddr};

use serde_json::{Value, json};

/// The Service's name (what every Kubernetes distribution calls the cluster DNS Service).
pub const NAME: &str = "kube-dns";
/// Its namespace.
pub const NAMESPACE: &str = "kube-system";
/// Who manages its EndpointSlice.
pub const MANAGED_BY: &str = "skiff-dns";

/// The Service (ClusterIP `service_ip`, or one allocated when `None`; ports `dns` 53/UDP and
/// `dns-tcp` 53/TCP to the server's port), the Endpoints and the EndpointSlice naming the server
/// at `server`.
pub fn desired(service_ip: Option<IpAddr>, server: SocketAddr) -> (Value, Value, Value) {
    let labels = json!({"k8s-app": "kube-dns", "kubernetes.io/name": "skiff-dns"});
    let port = server.port();
    let mut spec = json!({
        "type": "ClusterIP",
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": port},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": port},
        ],
    });
    if let Some(ip) = service_ip {
        spec["clusterIP"] = json!(ip.to_string());
        spec["clusterIPs"] = json!([ip.to_string()]);
    }
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": spec,
    });
    let ports = json!([
        {"name": "dns", "port": port, "protocol": "UDP"},
        {"name": "dns-tcp", "port": port, "protocol": "TCP"},
    ]);
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "subsets": [{"addresses": [{"ip": server.ip().to_string()}], "ports": ports}],
    });
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {
            "kubernetes.io/service-name": NAME,
            "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
        }},
        "addressType": if server.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [server.ip().to_string()], "conditions": {"ready": true}}],
        "ports": ports,
    });
    (service, endpoints, slice)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    use super::*;

    #[test]
    fn port_53_in_front_of_the_servers_own_port() {
        let (service, endpoints, slice) = desired(
            Some("127.96.0.10".parse().unwrap()),
            "127.0.0.1:1053".parse().unwrap(),
        );
        let service: Service = serde_json::from_value(service).unwrap();
        let spec = service.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("127.96.0.10"));
        let ports = spec.ports.unwrap();
        let summary: Vec<_> = ports
            .iter()
            .map(|p| (p.name.clone().unwrap(), p.port, p.protocol.clone().unwrap()))
            .collect();
        assert_eq!(
            summary,
            [
                ("dns".into(), 53, "UDP".into()),
                ("dns-tcp".into(), 53, "TCP".into())
            ]
        );
        assert!(
            spec.selector.is_none(),
            "the endpoints are ours, not a controller's"
        );
        let endpoints: Endpoints = serde_json::from_value(endpoints).unwrap();
        let subset = &endpoints.subsets.unwrap()[0];
        assert_eq!(subset.addresses.as_ref().unwrap()[0].ip, "127.0.0.1");
        assert!(
            subset
                .ports
                .as_ref()
                .unwrap()
                .iter()
                .all(|p| p.port == 1053)
        );
        let slice: EndpointSlice = serde_json::from_value(slice).unwrap();
        assert_eq!(slice.address_type, "IPv4");
        assert_eq!(slice.endpoints[0].addresses, ["127.0.0.1"]);
    }

    #[test]
    fn without_an_address_the_api_server_allocates_one() {
        let (service, _, _) = desired(None, "[::1]:53".parse().unwrap());
        assert!(service["spec"].get("clusterIP").is_none());
        let (_, _, slice) = desired(None, "[::1]:53".parse().unwrap());
        assert_eq!(slice["addressType"], "IPv6");
    }
}

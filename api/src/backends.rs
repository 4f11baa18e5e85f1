//! Where the API server's own requests to a Service go. Admission webhooks, aggregated APIs and
//! `services/proxy` all dial a ready endpoint of the Service's port, as kube-apiserver does with
//! `--enable-aggregator-routing`: skiff's API server cannot count on a service proxy on its own
//! host, so it never dials a cluster IP. An `ExternalName` Service is its DNS name with the port
//! asked for, as kube-apiserver resolves it.
//!
//! The endpoints come from the Service's `Endpoints` object, one point read and what skiff's
//! endpoints controller and most tools write; when it has no ready address for the port, from
//! the Service's EndpointSlices (`kubernetes.io/service-name`), which is all a Service may have
//! when something publishes slices only: nothing turns slices back into Endpoints.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::registry::Registry;

/// The label naming an EndpointSlice's Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The name an `ExternalName` Service stands for, `None` for other types.
pub fn external_name(service: &Service) -> Option<&str> {
    let spec = service.spec.as_ref()?;
    (spec.type_.as_deref() == Some("ExternalName"))
        .then(|| spec.external_name.as_deref().unwrap_or_default())
}

/// What a Service port, named by its number (a webhook's or an APIService's reference), leads
/// to.
#[derive(Debug, PartialEq, Eq)]
pub enum Backend {
    /// The endpoints behind the Service port of this name (`""` for an unnamed port).
    Port(String),
    /// An `ExternalName` Service's DNS name, dialled on the port asked for.
    External(String),
}

/// Where the Service port numbered `port` leads; `None` when the Service has no such port.
pub fn by_port(service: &Service, port: i32) -> Option<Backend> {
    if let Some(host) = external_name(service) {
        return Some(Backend::External(host.to_string()));
    }
    service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .find(|p| p.port == port)
        .map(|p| Backend::Port(p.name.clone().unwrap_or_default()))
}

/// The ready addresses of `endpoints` behind the Service port named `port_name` (`""` for an
/// unnamed port), in order.
pub fn from_endpoints(endpoints: &Endpoints, port_name: &str) -> Vec<SocketAddr> {
    endpoints
        .subsets
        .iter()
        .flatten()
        .flat_map(|subset| {
            let port = subset
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref().unwrap_or_default() == port_name)
                .and_then(|p| u16::try_from(p.port).ok());
            subset
                .addresses
                .iter()
                .flatten()
                .filter_map(move |a| Some(SocketAddr::new(a.ip.parse().ok()?, port?)))
        })
        .collect()
}

/// The ready addresses of `slices` behind the Service port named `port_name`, each once: an
/// endpoint counts unless its `ready` condition is false (unset means ready), by its first
/// address; slices of FQDN addresses are not dialled.
pub fn from_slices(slices: &[EndpointSlice], port_name: &str) -> Vec<SocketAddr> {
    let mut found = Vec::new();
    for slice in slices.iter().filter(|s| s.address_type != "FQDN") {
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            let Some(ip) = endpoint
                .addresses
                .first()
                .and_then(|a| a.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let address = SocketAddr::new(ip, port);
            if !found.contains(&address) {
                found.push(address);
            }
        }
    }
    found
}

/// What the log holds of one Service port's endpoints.
#[derive(Debug, Default)]
pub struct Published {
    /// Whether the Service has an `Endpoints` object or any EndpointSlice.
    pub exists: bool,
    /// The ready addresses behind the port.
    pub ready: Vec<SocketAddr>,
}

/// Reads the endpoints of the port named `port_name` of Service `ns/name`: its `Endpoints`
/// object, and its EndpointSlices only when that has no ready address for the port.
pub async fn published(
    registry: &Registry,
    ns: &str,
    name: &str,
    port_name: &str,
) -> Result<Published> {
    let endpoints: Option<Endpoints> = match registry
        .get_view(&skiff_kinds::builtin::endpoints::INFO, Some(ns), name)
        .await
    {
        Ok(endpoints) => Some(endpoints),
        Err(Error::NotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    let ready = endpoints
        .as_ref()
        .map(|e| from_endpoints(e, port_name))
        .unwrap_or_default();
    if !ready.is_empty() {
        return Ok(Published {
            exists: true,
            ready,
        });
    }
    let slices = slices_of(registry, ns, name).await?;
    Ok(Published {
        exists: endpoints.is_some() || !slices.is_empty(),
        ready: from_slices(&slices, port_name),
    })
}

/// The EndpointSlices of Service `ns/name`.
async fn slices_of(registry: &Registry, ns: &str, name: &str) -> Result<Vec<EndpointSlice>> {
    let name = name.to_string();
    let ours: crate::registry::ObjectFilter = std::sync::Arc::new(move |object: &Value| {
        object["metadata"]["labels"][SERVICE_NAME_LABEL] == *name
    });
    let page = registry
        .list(
            &skiff_kinds::builtin::endpoint_slice::INFO,
            Some(ns),
            None,
            None,
            None,
            Some(&ours),
        )
        .await?;
    page.items
        .into_iter()
        .map(|object| {
            serde_json::from_value(object)
                .map_err(|e| Error::Internal(format!("decoding a stored EndpointSlice: {e}")))
        })
        .collect()
}

/// The addresses `host` (an `ExternalName`) has, on `port`, in the resolver's order: a caller
/// dials them in turn until one answers, as Go's dialer does (`localhost` may be `::1` first
/// while the server listens on 127.0.0.1 only).
pub async fn lookup(host: &str, port: i32) -> std::result::Result<Vec<SocketAddr>, String> {
    let port = u16::try_from(port).map_err(|_| format!("invalid port {port}"))?;
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("dial tcp: lookup {host}: {e}"))?
        .collect();
    if addresses.is_empty() {
        return Err(format!("dial tcp: lookup {host}: no such host"));
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn endpoints(value: Value) -> Endpoints {
        serde_json::from_value(value).unwrap()
    }

    fn slice(value: Value) -> EndpointSlice {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn endpoints_give_ready_addresses_of_the_named_port() {
        let eps = endpoints(json!({"metadata": {"name": "web"}, "subsets": [
            {"addresses": [{"ip": "127.100.0.7"}, {"ip": "fd00::7"}],
             "notReadyAddresses": [{"ip": "127.100.0.8"}],
             "ports": [{"name": "metrics", "port": 9090}, {"name": "https", "port": 8443}]},
            {"addresses": [{"ip": "127.100.0.9"}], "ports": [{"name": "metrics", "port": 9090}]}]}));
        assert_eq!(
            from_endpoints(&eps, "https"),
            [
                "127.100.0.7:8443".parse::<SocketAddr>().unwrap(),
                "[fd00::7]:8443".parse().unwrap()
            ]
        );
        assert_eq!(from_endpoints(&eps, "metrics").len(), 3);
        assert!(from_endpoints(&eps, "").is_empty());
    }

    #[test]
    fn slices_give_ready_endpoints_of_the_named_port_once() {
        let slices = [
            slice(json!({"metadata": {"name": "web-a"}, "addressType": "IPv4",
                "ports": [{"name": "", "port": 8080}],
                "endpoints": [
                    {"addresses": ["127.100.0.7"]},
                    {"addresses": ["127.100.0.8"], "conditions": {"ready": false}},
                    {"addresses": ["127.100.0.9", "127.100.0.10"], "conditions": {"ready": true}}]})),
            // The same endpoint in a second slice (a slice being replaced) counts once.
            slice(json!({"metadata": {"name": "web-b"}, "addressType": "IPv4",
                "ports": [{"port": 8080}], "endpoints": [{"addresses": ["127.100.0.7"]}]})),
            slice(json!({"metadata": {"name": "web-c"}, "addressType": "FQDN",
                "ports": [{"port": 8080}], "endpoints": [{"addresses": ["web.example.com"]}]})),
            slice(json!({"metadata": {"name": "web-d"}, "addressType": "IPv4",
                "ports": [{"name": "metrics", "port": 9090}],
                "endpoints": [{"addresses": ["127.100.0.11"]}]})),
        ];
        assert_eq!(
            from_slices(&slices, ""),
            [
                "127.100.0.7:8080".parse::<SocketAddr>().unwrap(),
                "127.100.0.9:8080".parse().unwrap()
            ]
        );
        assert_eq!(
            from_slices(&slices, "metrics"),
            ["127.100.0.11:9090".parse::<SocketAddr>().unwrap()]
        );
    }

    fn service(spec: Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "s", "namespace": "sys"}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn a_service_port_leads_to_its_named_endpoints_or_an_external_name() {
        let svc = service(json!({"ports": [{"name": "metrics", "port": 9090},
            {"name": "https", "port": 443, "targetPort": 8443}]}));
        assert_eq!(by_port(&svc, 443), Some(Backend::Port("https".into())));
        assert_eq!(by_port(&svc, 444), None);
        let unnamed = service(json!({"ports": [{"port": 443}]}));
        assert_eq!(by_port(&unnamed, 443), Some(Backend::Port(String::new())));
        // Any port of an ExternalName Service is its name's.
        let external = service(json!({"type": "ExternalName", "externalName": "localhost"}));
        assert_eq!(
            by_port(&external, 8443),
            Some(Backend::External("localhost".into()))
        );
    }

    #[tokio::test]
    async fn slices_are_read_when_the_endpoints_have_no_ready_address() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let store = skiff_store::SledStore::open(skiff_store::Config::new(dir.path())).unwrap();
        let registry = Registry::new(Arc::new(store));
        let read = |name: &'static str| {
            let registry = &registry;
            async move { published(registry, "sys", name, "https").await.unwrap() }
        };
        // Nothing published.
        let none = read("api").await;
        assert!(!none.exists && none.ready.is_empty());
        // A slice of another Service, and one of this one's in another namespace, do not count.
        let slice = |ns: &str, name: &str, service: &str, ip: &str| {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": ns,
                    "labels": {SERVICE_NAME_LABEL: service}},
                "addressType": "IPv4", "ports": [{"name": "https", "port": 8443}],
                "endpoints": [{"addresses": [ip]}]})
        };
        let info = &skiff_kinds::builtin::endpoint_slice::INFO;
        for object in [
            slice("sys", "other-1", "other", "127.100.0.1"),
            slice("elsewhere", "api-1", "api", "127.100.0.2"),
        ] {
            registry.create(info, object, None).await.unwrap();
        }
        assert!(!read("api").await.exists);
        // Slices only.
        registry
            .create(info, slice("sys", "api-1", "api", "127.100.0.3"), None)
            .await
            .unwrap();
        let sliced = read("api").await;
        assert!(sliced.exists);
        assert_eq!(
            sliced.ready,
            ["127.100.0.3:8443".parse::<SocketAddr>().unwrap()]
        );
        // Endpoints without a ready address for the port: the slices answer.
        let endpoints = |addresses: Value| {
            json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "api", "namespace": "sys"},
                "subsets": [{"addresses": addresses, "ports": [{"name": "https", "port": 8443}]}]})
        };
        let info = &skiff_kinds::builtin::endpoints::INFO;
        registry
            .create(info, endpoints(json!([])), None)
            .await
            .unwrap();
        assert_eq!(read("api").await.ready, sliced.ready);
        // With one, the Endpoints answer.
        registry
            .delete(info, Some("sys"), "api", None)
            .await
            .unwrap();
        registry
            .create(info, endpoints(json!([{"ip": "127.100.0.4"}])), None)
            .await
            .unwrap();
        assert_eq!(
            read("api").await.ready,
            ["127.100.0.4:8443".parse::<SocketAddr>().unwrap()]
        );
    }

    #[test]
    fn only_external_name_services_stand_for_a_name() {
        assert_eq!(
            external_name(&service(
                json!({"type": "ExternalName", "externalName": "api.example.com"})
            )),
            Some("api.example.com")
        );
        assert_eq!(external_name(&service(json!({"type": "ClusterIP"}))), None);
        assert_eq!(external_name(&service(json!({}))), None);
    }
}

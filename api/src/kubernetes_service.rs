//! The `kubernetes` Service in `default`, as kube-apiserver's endpoint reconciler keeps it: the
//! first address of the service range, port 443 (`https`) to the API server's secure port, with
//! an Endpoints and an EndpointSlice naming the server's advertised address.
//!
//! Written at start-up: created when missing, brought back to the server's address and port when
//! they changed (a restart on another port), left alone otherwise.

use std::net::{IpAddr, Ipv4Addr};

use serde_json::{Value, json};
use skiff_kinds::Kind;

use crate::error::{Error, Result};
use crate::registry::Update;
use crate::server::ApiServer;

/// The Service's name and namespace.
pub const NAME: &str = "kubernetes";
/// Its namespace.
pub const NAMESPACE: &str = "default";

/// The Service, Endpoints and EndpointSlice the API server at `address:port` should have, each
/// with the fields the reconciler owns (the rest is defaulted on create and kept on update).
pub fn desired(
    cluster_ip: Ipv4Addr,
    address: IpAddr,
    port: u16,
) -> [(&'static dyn Kind, Value); 3] {
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    let address_type = if address.is_ipv4() { "IPv4" } else { "IPv6" };
    [
        (
            &skiff_kinds::builtin::service::Service,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": cluster_ip.to_string(),
                    "clusterIPs": [cluster_ip.to_string()],
                    "sessionAffinity": "None",
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                },
            }),
        ),
        (
            &skiff_kinds::builtin::endpoints::Endpoints,
            json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": NAME, "namespace": NAMESPACE,
                             "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{
                    "addresses": [{"ip": address.to_string()}],
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                }],
            }),
        ),
        (
            &skiff_kinds::builtin::endpoint_slice::EndpointSlice,
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": NAME, "namespace": NAMESPACE,
                             "labels": {"kubernetes.io/service-name": NAME}},
                "addressType": address_type,
                "endpoints": [{"addresses": [address.to_string()], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            }),
        ),
    ]
}

/// The fields of each object the reconciler owns, as JSON pointers' parents and keys.
const OWNED: &[(&str, &str)] = &[
    ("/spec", "ports"),
    ("", "subsets"),
    ("", "addressType"),
    ("", "endpoints"),
    ("", "ports"),
];

/// Copies the owned fields of `desired` that it has into `current`.
fn take_owned(current: &mut Value, desired: &Value) {
    for (parent, key) in OWNED {
        let (Some(want), Some(into)) = (
            desired.pointer(parent).and_then(|p| p.get(key)),
            current.pointer_mut(parent).and_then(Value::as_object_mut),
        ) else {
            continue;
        };
        into.insert((*key).to_string(), want.clone());
    }
}

/// Creates or corrects the `kubernetes` Service and its endpoints for the API server at
/// `address:port`.
pub async fn reconcile(server: &ApiServer, address: IpAddr, port: u16) -> Result<()> {
    let base = server.config.service_ranges.cluster_ip_base;
    let cluster_ip = Ipv4Addr::from(u32::from(base) + 1);
    for (kind, desired) in desired(cluster_ip, address, port) {
        let info = kind.info();
        let mut object = desired.clone();
        server.prepare_create(kind, &mut object);
        match server.registry.create(info, object, None).await {
            Ok(_) => continue,
            Err(Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
        server
            .registry
            .update(info, Some(NAMESPACE), NAME, None, false, |mut current| {
                take_owned(&mut current, &desired);
                async move { Ok(Update::Write(current)) }
            })
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_fields_are_replaced_and_the_rest_kept() {
        let [(_, service), (_, endpoints), (_, slice)] = desired(
            Ipv4Addr::new(127, 96, 0, 1),
            IpAddr::from([127, 0, 0, 1]),
            6443,
        );
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 6443);
        assert_eq!(service["spec"]["clusterIP"], "127.96.0.1");
        assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
        assert_eq!(slice["endpoints"][0]["addresses"][0], "127.0.0.1");
        assert_eq!(slice["addressType"], "IPv4");

        let [(_, moved), (_, moved_endpoints), _] = desired(
            Ipv4Addr::new(127, 96, 0, 1),
            IpAddr::from([127, 0, 0, 2]),
            7443,
        );
        let mut current = service.clone();
        current["metadata"]["uid"] = json!("u");
        current["spec"]["clusterIP"] = json!("127.96.0.1");
        take_owned(&mut current, &moved);
        assert_eq!(current["spec"]["ports"][0]["targetPort"], 7443);
        assert_eq!(current["metadata"]["uid"], "u");
        let mut current = endpoints.clone();
        take_owned(&mut current, &moved_endpoints);
        assert_eq!(current["subsets"][0]["addresses"][0]["ip"], "127.0.0.2");
    }
}

//! Calling one webhook over HTTPS: the client trusting the configuration's `caBundle`, a
//! Service reference resolved to a ready endpoint (with the certificate checked for
//! `SERVICE.NAMESPACE.svc`), and the per-call `timeoutSeconds`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use serde_json::Value;

use super::config::Hook;
use crate::error::Error;
use crate::registry::Registry;

/// Where to send a webhook's reviews.
struct Target {
    /// The URL to post to.
    url: String,
    /// The address a Service reference resolved to (the URL names the Service).
    address: Option<SocketAddr>,
}

/// The rustls configuration trusting `ca_bundle` (PEM) alone.
fn tls(ca_bundle: &[u8]) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    let mut reader = ca_bundle;
    for cert in rustls_pemfile::certs(&mut reader) {
        let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no caBundle: the webhook's certificate cannot be verified".into());
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(config)
}

/// The client of `hook` for `target`, built once per (configuration version, address).
fn client(hook: &Hook, target: &Target) -> Result<reqwest::Client, String> {
    let mut clients = hook.clients.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(client) = clients.get(&target.address) {
        return Ok(client.clone());
    }
    let ca = hook
        .client_config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    let mut builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls(ca)?)
        .no_proxy();
    if let (Some(address), Some(service)) = (target.address, &hook.client_config.service) {
        builder = builder.resolve(&service_host(&service.name, &service.namespace), address);
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    clients.insert(target.address, client.clone());
    Ok(client)
}

fn service_host(name: &str, namespace: &str) -> String {
    format!("{name}.{namespace}.svc")
}

/// Resolves the webhook's URL or Service reference.
async fn target(hook: &Hook, registry: &Registry) -> Result<Target, String> {
    // kube-apiserver tells the webhook its deadline in the query (`?timeout=10s`), which
    // webhook servers (controller-runtime's among them) take as the request's deadline.
    let query = format!("?timeout={}s", hook.timeout.as_secs());
    if let Some(url) = &hook.client_config.url {
        return Ok(Target {
            url: format!("{url}{query}"),
            address: None,
        });
    }
    let Some(service) = &hook.client_config.service else {
        return Err("the webhook has neither a url nor a service".into());
    };
    let port = service.port.unwrap_or(443);
    let (ns, name) = (service.namespace.as_str(), service.name.as_str());
    let path = service.path.as_deref().unwrap_or("/");
    // A Service that cannot be resolved fails the call as kube-apiserver reports it: the POST
    // it could not send, and why.
    let unsent = |why: String| {
        format!(
            "failed to call webhook: Post \"https://{}:{port}{path}{query}\": {why}",
            service_host(name, ns)
        )
    };
    let read = |info| async move {
        match registry.get(info, Some(ns), name, None).await {
            Ok(object) => Ok(Some(object)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(unsent(e.to_string())),
        }
    };
    let Some(svc) = read(&skiff_kinds::builtin::service::INFO).await? else {
        return Err(unsent(format!("service {name:?} not found")));
    };
    let endpoints = read(&skiff_kinds::builtin::endpoints::INFO)
        .await?
        .unwrap_or(Value::Null);
    let address = resolve(&svc, &endpoints, port).map_err(unsent)?;
    Ok(Target {
        url: format!(
            "https://{}:{}{path}{query}",
            service_host(name, ns),
            address.port()
        ),
        address: Some(address),
    })
}

/// A ready address of `endpoints` with the port behind the Service port numbered `port`.
pub fn resolve(service: &Value, endpoints: &Value, port: i32) -> Result<SocketAddr, String> {
    let name = service["metadata"]["name"].as_str().unwrap_or_default();
    let service_port = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(i64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
    let port_name = service_port["name"].as_str().unwrap_or_default();
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let Some(target_port) = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"].as_str().unwrap_or_default() == port_name)
            .and_then(|p| p["port"].as_u64())
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        let ip = subset["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|a| a["ip"].as_str()?.parse::<IpAddr>().ok());
        if let Some(ip) = ip {
            return Ok(SocketAddr::new(ip, target_port));
        }
    }
    Err(format!("no endpoints available for service {name:?}"))
}

/// Posts `review` to the webhook and returns the answer's body; `Err` says why the call
/// failed, as Kubernetes words it.
pub async fn call(hook: &Hook, registry: &Registry, review: &Value) -> Result<Vec<u8>, String> {
    if let Some(broken) = &hook.broken {
        return Err(broken.clone());
    }
    let target = target(hook, registry).await?;
    let client = client(hook, &target)?;
    let failed =
        |e: &dyn std::fmt::Display| format!("failed to call webhook: Post {:?}: {e}", target.url);
    let response = client
        .post(&target.url)
        .timeout(hook.timeout)
        .json(review)
        .send()
        .await
        .map_err(|e| failed(&describe(&e)))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| failed(&describe(&e)))?;
    if !status.is_success() {
        return Err(format!(
            "the server responded with the status code {} but did not return more information",
            status.as_u16()
        ));
    }
    Ok(body.to_vec())
}

/// A reqwest error with its causes (reqwest's own message hides them), as the webhook and
/// aggregated-API clients report it.
pub(crate) fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "context deadline exceeded".into();
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_service_resolves_to_a_ready_address_and_the_target_port() {
        let svc = json!({"metadata": {"name": "hooks", "namespace": "sys"},
            "spec": {"ports": [{"name": "metrics", "port": 9090}, {"name": "https", "port": 443, "targetPort": 8443}]}});
        let eps = json!({"subsets": [{"addresses": [{"ip": "127.100.0.7"}],
            "notReadyAddresses": [{"ip": "127.100.0.8"}],
            "ports": [{"name": "metrics", "port": 9090}, {"name": "https", "port": 8443}]}]});
        assert_eq!(
            resolve(&svc, &eps, 443).unwrap(),
            "127.100.0.7:8443".parse().unwrap()
        );
        assert_eq!(
            resolve(&svc, &eps, 444).unwrap_err(),
            "no service port 444 found for service \"hooks\""
        );
        let unready = json!({"subsets": [{"notReadyAddresses": [{"ip": "127.100.0.8"}],
            "ports": [{"name": "https", "port": 8443}]}]});
        assert_eq!(
            resolve(&svc, &unready, 443).unwrap_err(),
            "no endpoints available for service \"hooks\""
        );
    }
}

//! Calling one webhook over HTTPS: the client trusting the configuration's `caBundle`, a
//! Service reference resolved to a ready endpoint or an `ExternalName`'s addresses
//! ([`crate::backends`]; the certificate is checked for `SERVICE.NAMESPACE.svc` either way), and
//! the per-call `timeoutSeconds`.

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use serde_json::Value;

use super::config::Hook;
use crate::backends::{Backend, by_port};
use crate::error::Error;
use crate::registry::Registry;

/// Where to send a webhook's reviews.
struct Target {
    /// The URL to post to.
    url: String,
    /// The addresses a Service reference resolved to, tried in turn (the URL names the Service).
    addresses: Option<Vec<SocketAddr>>,
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

/// The client of `hook` for `target`, built once per (configuration version, addresses).
fn client(hook: &Hook, target: &Target) -> Result<reqwest::Client, String> {
    let mut clients = hook.clients.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(client) = clients.get(&target.addresses) {
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
    if let (Some(addresses), Some(service)) = (&target.addresses, &hook.client_config.service) {
        builder =
            builder.resolve_to_addrs(&service_host(&service.name, &service.namespace), addresses);
    }
    let client = builder.build().map_err(|e| e.to_string())?;
    clients.insert(target.addresses.clone(), client.clone());
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
            addresses: None,
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
    let service: Service = match registry
        .get_view(&skiff_kinds::builtin::service::INFO, Some(ns), name)
        .await
    {
        Ok(service) => service,
        Err(Error::NotFound { .. }) => return Err(unsent(format!("service {name:?} not found"))),
        Err(e) => return Err(unsent(e.to_string())),
    };
    let addresses =
        match by_port(&service, port) {
            Some(Backend::External(host)) => {
                crate::backends::lookup(&host, port).await.map_err(unsent)?
            }
            Some(Backend::Port(port_name)) => {
                let published = crate::backends::published(registry, ns, name, &port_name)
                    .await
                    .map_err(|e| unsent(e.to_string()))?;
                let first = published.ready.first();
                vec![*first.ok_or_else(|| {
                    unsent(format!("no endpoints available for service {name:?}"))
                })?]
            }
            None => {
                return Err(unsent(format!(
                    "no service port {port} found for service {name:?}"
                )));
            }
        };
    Ok(Target {
        url: format!(
            "https://{}:{}{path}{query}",
            service_host(name, ns),
            addresses[0].port()
        ),
        addresses: Some(addresses),
    })
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

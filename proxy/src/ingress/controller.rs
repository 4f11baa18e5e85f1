//! The ingress controller's loop: informers on Ingresses, IngressClasses, Services, Endpoints
//! and Secrets; after every change (and every sync period) a new [`routes::build`], swapped into
//! the listeners, the node's address written into each served Ingress's
//! `status.loadBalancer.ingress`, and a Warning Event for each new problem (a missing Service, a
//! missing or unusable TLS Secret).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, ObjectReference, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde_json::json;
use skiff_client::api::{Patch, PatchParams};
use skiff_client::events::{EventType, Recorder};
use skiff_client::{Api, SharedInformerFactory};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::CONTROLLER;
use super::routes::{self, INVALID_TLS_SECRET, IngressRef, Problem};
use super::serve::{self, Shared};
use super::tls::{self, Resolver};
use crate::run::Trigger;

/// What the controller listens on and writes.
#[derive(Clone, Debug)]
pub struct Config {
    /// The plain HTTP listener.
    pub http_address: SocketAddr,
    /// The HTTPS listener.
    pub https_address: SocketAddr,
    /// The address written into the Ingresses' status.
    pub status_address: IpAddr,
    /// How long one connect to an endpoint may take.
    pub connect_timeout: Duration,
    /// How often to rebuild even without changes (and retry listeners that could not bind).
    pub sync_period: Duration,
}

/// The reporting component of the controller's Events.
pub const COMPONENT: &str = "skiff-ingress";

fn reference(ingress: &IngressRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("networking.k8s.io/v1".into()),
        kind: Some("Ingress".into()),
        namespace: Some(ingress.namespace.clone()),
        name: Some(ingress.name.clone()),
        uid: Some(ingress.uid.clone()).filter(|u| !u.is_empty()),
        ..ObjectReference::default()
    }
}

/// Binds `address` unless already bound; logs a failure (retried on the next sync).
async fn bind(
    slot: &mut Option<SocketAddr>,
    address: SocketAddr,
    what: &str,
) -> Option<TcpListener> {
    if slot.is_some() {
        return None;
    }
    match TcpListener::bind(address).await {
        Ok(listener) => {
            let local = listener.local_addr().ok()?;
            tracing::info!(address = %local, "ingress: serving {what}");
            *slot = Some(local);
            Some(listener)
        }
        Err(e) => {
            tracing::warn!(%address, error = %e, "ingress: cannot listen for {what}; retrying");
            None
        }
    }
}

/// Runs the controller until `shutdown`, then stops accepting and lets requests in flight end
/// (for up to 5 s).
pub async fn run(
    client: skiff_client::Client,
    config: Config,
    shutdown: CancellationToken,
) -> crate::Result<()> {
    let shared = Arc::new(Shared::new(config.connect_timeout));
    let resolver = Arc::new(Resolver::new(tls::default_key()));
    let tls_config = tls::server_config(resolver.clone());
    let tracker = TaskTracker::new();

    let factory = SharedInformerFactory::new(client.clone());
    let ingresses = factory.informer::<Ingress>();
    let classes = factory.informer::<IngressClass>();
    let services = factory.informer::<Service>();
    let endpoints = factory.informer::<Endpoints>();
    let secrets = factory.informer::<Secret>();
    let changed = Arc::new(Notify::new());
    ingresses.add_handler(Trigger(changed.clone()));
    classes.add_handler(Trigger(changed.clone()));
    services.add_handler(Trigger(changed.clone()));
    endpoints.add_handler(Trigger(changed.clone()));
    secrets.add_handler(Trigger(changed.clone()));
    factory.start(shutdown.clone());
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        _ = factory.wait_for_sync() => {}
    }

    let recorder = Recorder::new(client.clone(), COMPONENT);
    let (mut http_bound, mut https_bound) = (None, None);
    let mut reported: BTreeSet<Problem> = BTreeSet::new();
    loop {
        if let Some(listener) = bind(&mut http_bound, config.http_address, "HTTP").await {
            tracker.spawn(serve::serve_http(
                listener,
                shared.clone(),
                shutdown.clone(),
                tracker.clone(),
            ));
        }
        if let Some(listener) = bind(&mut https_bound, config.https_address, "HTTPS").await {
            tracker.spawn(serve::serve_https(
                listener,
                tls_config.clone(),
                shared.clone(),
                shutdown.clone(),
                tracker.clone(),
            ));
        }

        let all_ingresses = ingresses.cache().list();
        let built = routes::build(
            CONTROLLER,
            &all_ingresses,
            &classes.cache().list(),
            &services.cache().list(),
            &endpoints.cache().list(),
            &secrets.cache().list(),
        );
        let table = Arc::new(built.table);
        for (key, (ready, affinity)) in &built.endpoints {
            shared.balancer.update(key, ready.clone(), *affinity);
        }
        shared
            .balancer
            .retain(|key| built.endpoints.contains_key(key));
        let unusable = resolver.set(table.clone());
        shared.set_table(table);

        let mut problems: BTreeSet<Problem> = built.problems.into_iter().collect();
        for (secret, why) in unusable {
            for ingress in &all_ingresses {
                let me = IngressRef {
                    namespace: ingress.metadata.namespace.clone().unwrap_or_default(),
                    name: ingress.metadata.name.clone().unwrap_or_default(),
                    uid: ingress.metadata.uid.clone().unwrap_or_default(),
                };
                let names_it = ingress
                    .spec
                    .iter()
                    .flat_map(|s| s.tls.iter().flatten())
                    .any(|t| {
                        t.secret_name
                            .as_deref()
                            .map(|n| format!("{}/{n}", me.namespace))
                            == Some(secret.clone())
                    });
                if names_it && built.ingresses.contains(&me) {
                    problems.insert(Problem {
                        ingress: me,
                        reason: INVALID_TLS_SECRET,
                        message: format!(
                            "TLS secret {secret} cannot be served ({why}); its hosts are served with the default certificate"
                        ),
                    });
                }
            }
        }
        for problem in problems.difference(&reported) {
            tracing::warn!(ingress = %format!("{}/{}", problem.ingress.namespace, problem.ingress.name),
                reason = problem.reason, message = %problem.message, "ingress: problem");
            recorder
                .record(
                    &reference(&problem.ingress),
                    EventType::Warning,
                    problem.reason,
                    &problem.message,
                )
                .await;
        }
        reported = problems;

        write_status(&client, &ingresses, &built.ingresses, config.status_address).await;

        tokio::select! {
            () = shutdown.cancelled() => break,
            () = changed.notified() => {}
            () = tokio::time::sleep(config.sync_period) => {}
        }
    }
    tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
    Ok(())
}

/// Writes `address` into the status of each served Ingress that does not show it yet.
async fn write_status(
    client: &skiff_client::Client,
    informer: &skiff_client::Informer<Ingress>,
    served: &[IngressRef],
    address: IpAddr,
) {
    let want = json!([{"ip": address.to_string()}]);
    for me in served {
        let Some(current) = informer.cache().get(Some(&me.namespace), &me.name) else {
            continue;
        };
        let shown = current
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .map(|list| serde_json::to_value(list).unwrap_or_default());
        if shown.as_ref() == Some(&want) {
            continue;
        }
        let api: Api<Ingress> = Api::namespaced(client.clone(), &me.namespace);
        let patch = json!({"status": {"loadBalancer": {"ingress": want}}});
        if let Err(e) = api
            .patch_status(&me.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(ingress = %format!("{}/{}", me.namespace, me.name), error = %e,
                "ingress: cannot write the status");
        }
    }
}

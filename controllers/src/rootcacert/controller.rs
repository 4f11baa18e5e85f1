//! The root CA publisher's shell: `kube-root-ca.crt` in every active namespace, with the CA
//! from `--root-ca-file`, or else the one the API server serves at `/cacerts`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::PostParams;
use skiff_client::{Api, Informer, key_of};
use tokio::sync::OnceCell;

use super as logic;
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict};
use crate::{Error, Result};

struct Publisher {
    namespaces: Informer<Namespace>,
    config_maps: Informer<ConfigMap>,
    client: skiff_client::Client,
    ca: ClusterCa,
}

/// The cluster CA bundle, from `--root-ca-file` or else the API server's `/cacerts`, read once
/// (the root CA publisher and the token controller both hand it out).
pub(crate) struct ClusterCa {
    client: skiff_client::Client,
    root_ca_file: Option<std::path::PathBuf>,
    pem: OnceCell<String>,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let namespaces = ctx.factory.informer::<Namespace>();
    let config_maps = ctx.factory.informer::<ConfigMap>();
    let controller = Controller::new("root-ca-cert-publisher", ctx.workers)
        // Keys are namespace names: a namespace added or changed, or its ConfigMap touched.
        .watches(&namespaces, |e: Event<'_, Namespace>| match e {
            Event::Deleted(_) => Vec::new(),
            e => vec![key_of(e.object())],
        })
        .watches(&config_maps, |e: Event<'_, ConfigMap>| {
            let cm = e.object();
            if cm.metadata.name.as_deref() == Some(logic::NAME) {
                vec![cm.metadata.namespace.clone().unwrap_or_default()]
            } else {
                Vec::new()
            }
        });
    Ok(controller.run(Arc::new(Publisher {
        namespaces,
        config_maps,
        client: ctx.factory.client().clone(),
        ca: ClusterCa::new(ctx),
    })))
}

impl ClusterCa {
    /// The CA of the manager's options, not read yet.
    pub(crate) fn new(ctx: &Context) -> ClusterCa {
        ClusterCa {
            client: ctx.factory.client().clone(),
            root_ca_file: ctx.options.root_ca_file.clone(),
            pem: OnceCell::new(),
        }
    }

    /// The CA bundle (PEM), read at the first call.
    pub(crate) async fn get(&self) -> Result<&str> {
        self.pem
            .get_or_try_init(|| async {
                match &self.root_ca_file {
                    Some(path) => std::fs::read_to_string(path).map_err(|e| {
                        Error::Config(format!("reading --root-ca-file {}: {e}", path.display()))
                    }),
                    None => {
                        let request = http::Request::get("/cacerts")
                            .body(Vec::new())
                            .map_err(|e| Error::Config(e.to_string()))?;
                        self.client
                            .request_text(request)
                            .await
                            .map_err(Error::api("reading the cluster CA from /cacerts"))
                    }
                }
            })
            .await
            .map(String::as_str)
    }
}

impl Reconcile for Publisher {
    async fn reconcile(&self, ns: &str) -> Result<Action> {
        let Some(namespace) = self.namespaces.cache().get(None, ns) else {
            return Ok(Action::AwaitChange);
        };
        let existing = self.config_maps.cache().get(Some(ns), logic::NAME);
        let ca = self.ca.get().await?;
        let Some(cm) = logic::desired(&namespace, existing.as_deref(), ca) else {
            return Ok(Action::AwaitChange);
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
        let result = match existing {
            None => api.create(&PostParams::default(), &cm).await,
            Some(_) => api.replace(logic::NAME, &PostParams::default(), &cm).await,
        };
        match result {
            Ok(_) => Ok(Action::AwaitChange),
            // Created meanwhile, or changed since the cache saw it: the watch brings it back.
            Err(e) if conflict(&e) => Ok(Action::AwaitChange),
            // A namespace that is going or gone refuses new objects.
            Err(e) if matches!(skiff_client::status_code(&e), Some(403 | 404)) => {
                Ok(Action::AwaitChange)
            }
            Err(e) => Err(Error::api(format!("writing {ns}/{}", logic::NAME))(e)),
        }
    }
}

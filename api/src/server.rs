//! The API server's state and its HTTP front: routing of every path, authentication, body limits,
//! and the one place errors become `Status` responses.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use skiff_meta::ResourceInfo;
use skiff_store::{LeaseId, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{self, Chain, ServiceRanges};
use crate::error::{Cause, Error, Result};
use crate::handlers::{Request, Response};
use crate::registry::Registry;
use crate::watch_cache::WatchCache;

/// The API server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Request bodies over this many bytes get 413.
    pub max_body_bytes: usize,
    /// How long Events live (they are attached to a TTL lease).
    pub event_ttl: Duration,
    /// Where ClusterIPs and NodePorts come from.
    pub service_ranges: ServiceRanges,
    /// How long a watch with no `timeoutSeconds` stays open.
    pub default_watch_timeout: Duration,
    /// How often an idle watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Recent events the watch cache keeps per resource; a watch starting further back reads
    /// the log's history instead.
    pub watch_cache_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_body_bytes: 3 * 1024 * 1024,
            event_ttl: Duration::from_secs(3600),
            service_ranges: ServiceRanges::default(),
            default_watch_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(15),
            watch_cache_capacity: crate::watch_cache::DEFAULT_CAPACITY,
        }
    }
}

/// Key prefixes that churn (node Leases renew every 10 s; Events count up) and how many versions
/// of each of their keys the log keeps, so they do not swamp the history of everything else.
pub const HIGH_CHURN_PREFIXES: &[(&str, u64)] = &[
    ("/registry/coordination.k8s.io/leases/", 5),
    ("/registry/core/events/", 5),
];

/// How long one Events lease is handed out before a new one is granted; every Event lives at
/// least `event_ttl` and at most `event_ttl` plus this.
const EVENT_LEASE_REUSE: Duration = Duration::from_secs(60);

/// The API server: the registry over the log, the admission chain and the request-scoped tasks.
pub struct ApiServer {
    /// Objects in the log.
    pub registry: Registry,
    /// The admission chain.
    pub admission: Chain,
    /// Settings.
    pub config: Config,
    /// Cancelled when the server shuts down; ends every watch.
    pub shutdown: CancellationToken,
    /// Watch streams in flight.
    pub watchers: TaskTracker,
    /// One store watch per resource, shared by every API watch of it.
    pub watch_cache: WatchCache,
    /// The lease current Events are attached to, and when it was granted.
    event_lease: Mutex<Option<(LeaseId, Instant)>>,
}

impl ApiServer {
    /// An API server over `store`: rebuilds what admission keeps in memory from the log and makes
    /// sure the system namespaces exist.
    pub async fn new(
        store: Arc<dyn Store>,
        config: Config,
        shutdown: CancellationToken,
    ) -> Result<Arc<ApiServer>> {
        let registry = Registry::new(store);
        let services = skiff_meta::resources::lookup("", "v1", "services").expect("served");
        let existing = registry
            .list(services, None, None, None, None, None)
            .await?;
        let admission = Chain::new(vec![
            Box::new(admission::NamespaceLifecycle),
            Box::new(admission::ServiceIps::new(
                config.service_ranges.clone(),
                &existing.items,
            )),
            Box::new(admission::DefaultTolerationSeconds),
        ]);
        let watch_cache = WatchCache::new(
            registry.store().clone(),
            config.watch_cache_capacity,
            config.bookmark_interval,
            shutdown.clone(),
        );
        let server = Arc::new(ApiServer {
            registry,
            watch_cache,
            admission,
            config,
            shutdown,
            watchers: TaskTracker::new(),
            event_lease: Mutex::new(None),
        });
        server.ensure_system_namespaces().await?;
        Ok(server)
    }

    async fn ensure_system_namespaces(&self) -> Result<()> {
        let namespaces = skiff_meta::resources::lookup("", "v1", "namespaces").expect("served");
        for name in admission::SYSTEM_NAMESPACES {
            let mut ns = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
            });
            self.prepare_create(namespaces, &mut ns);
            match self.registry.create(namespaces, ns, None).await {
                Ok(_) | Err(Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Applies the kind's defaults, as the decoder does in Kubernetes.
    pub fn default_object(&self, info: &ResourceInfo, object: &mut Value) {
        crate::defaults::apply(info, object);
    }

    /// Everything a create fills in before admission: server-owned metadata, defaults, and the
    /// strategy's create-time fields (a namespace's `kubernetes` finalizer).
    pub fn prepare_create(&self, info: &ResourceInfo, object: &mut Value) {
        crate::strategy::prepare_for_create(info, object);
        crate::defaults::apply(info, object);
        crate::defaults::prepare_for_create(info, object);
    }

    /// Validates a create (`old` = None) or an update; a failure is 422 with every cause.
    pub fn validate(
        &self,
        info: &ResourceInfo,
        object: &Value,
        old: Option<&Value>,
        url_namespace: Option<&str>,
    ) -> Result<()> {
        let errors = match old {
            None => crate::validation::validate_create(info, object, url_namespace),
            Some(old) => crate::validation::validate_update(info, object, old),
        };
        if errors.is_empty() {
            return Ok(());
        }
        let name = crate::registry::namespace_and_name(object).1.to_string();
        Err(Error::invalid(
            info,
            &name,
            errors
                .iter()
                .map(|e| Cause {
                    field: e.field.clone(),
                    reason: e.reason().to_string(),
                    message: e.body(),
                })
                .collect(),
        ))
    }

    /// The lease a new object of `info` is attached to: Events expire, nothing else does.
    pub async fn lease_for(&self, info: &ResourceInfo) -> Result<Option<LeaseId>> {
        if info.kind != "Event" {
            return Ok(None);
        }
        {
            let current = self.event_lease.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((id, granted)) = *current
                && granted.elapsed() < EVENT_LEASE_REUSE
            {
                return Ok(Some(id));
            }
        }
        let lease = self
            .registry
            .store()
            .lease_grant(self.config.event_ttl + EVENT_LEASE_REUSE)
            .await?;
        *self.event_lease.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((lease.id, Instant::now()));
        Ok(Some(lease.id))
    }

    /// `pods/{name}/log`: served by the pod's node's kubelet.
    pub async fn pod_log(
        &self,
        _request: &Request,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Response> {
        let pods = skiff_meta::resources::lookup("", "v1", "pods").expect("served");
        let pod = self.registry.get(pods, namespace, name, None).await?;
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if node.is_empty() {
            return Err(Error::BadRequest(format!(
                "pod {name} does not have a host assigned"
            )));
        }
        Err(Error::BadRequest(format!(
            "the kubelet of node {node} serves no logs for pod {name}"
        )))
    }
}

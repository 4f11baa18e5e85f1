//! The API server's state and its HTTP front: routing of every path, authentication, body limits,
//! and the one place errors become `Status` responses.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use skiff_kinds::{Kind, Kinds};
use skiff_store::{LeaseId, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{self, Chain, ServiceRanges};
use crate::error::{Error, Result};
use crate::registry::Registry;
use crate::request::{Request, Response};
use crate::watch_cache::WatchCache;

/// The API server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// How much one request, connection and client may ask at once ([`crate::limits`]).
    pub limits: crate::limits::Settings,
    /// How long Events live (they are attached to a TTL lease).
    pub event_ttl: Duration,
    /// Where ClusterIPs and NodePorts come from.
    pub service_ranges: ServiceRanges,
    /// How long a watch with no `timeoutSeconds` stays open.
    pub default_watch_timeout: Duration,
    /// How often an idle watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// The bearer token sent to kubelets when proxying `pods/{name}/log` (the kubelets'
    /// `--token`); `None` sends none.
    pub kubelet_token: Option<String>,
    /// The cluster CA bundle (PEM), served unauthenticated at `/cacerts` so that an agent holding
    /// a join token can fetch it and check it against the token's hash.
    pub ca_pem: Option<String>,
    /// Recent events the watch cache keeps per resource; a watch starting further back reads
    /// the log's history instead.
    pub watch_cache_capacity: usize,
    /// How long new pods tolerate not-ready and unreachable nodes unless they say otherwise
    /// (the `DefaultTolerationSeconds` admission plugin).
    pub default_toleration_seconds: skiff_kinds::defaults::TolerationSeconds,
    /// Create the system namespaces and the default RBAC policy that are missing at start. Off
    /// for a server that must
    /// write nothing of its own (`skiff server --paused` on a data dir replayed to a point
    /// before they existed).
    pub create_system_namespaces: bool,
    /// Service-account tokens: issuer, audiences, signing key.
    pub service_accounts: crate::serviceaccount::Settings,
    /// Other API servers may share the store (an external etcd): ClusterIPs and NodePorts are
    /// claimed in it by transaction ([`admission::allocations`]), not only in this process's
    /// memory, and a repair pass keeps the claims in line with the stored Services.
    pub shared_store: bool,
    /// The audit log, when a policy is given ([`crate::audit`]); the connection loop records
    /// each request with it.
    pub audit: Option<Arc<crate::audit::Auditor>>,
    /// The front proxy's CA and client certificate, presented to aggregated API servers and
    /// published in `kube-system/extension-apiserver-authentication` ([`crate::aggregation`]).
    pub front_proxy: Option<crate::aggregation::FrontProxy>,
}

/// How often the reservation repair pass runs on a shared store.
pub const ALLOCATION_REPAIR_INTERVAL: Duration = Duration::from_secs(60);
/// How old a reservation no Service holds must be before the repair pass deletes it (an API
/// server may have claimed it and not yet written its Service).
pub const ALLOCATION_REPAIR_GRACE: Duration = Duration::from_secs(120);

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Default::default(),
            event_ttl: Duration::from_secs(3600),
            service_ranges: ServiceRanges::default(),
            default_watch_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(15),
            kubelet_token: None,
            ca_pem: None,
            watch_cache_capacity: crate::watch_cache::DEFAULT_CAPACITY,
            default_toleration_seconds: Default::default(),
            create_system_namespaces: true,
            service_accounts: Default::default(),
            shared_store: false,
            audit: None,
            front_proxy: None,
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

/// The API server: the served kinds, the registry over the log, the admission chain and the
/// request-scoped tasks.
pub struct ApiServer {
    /// The kinds served now.
    pub kinds: Arc<Kinds>,
    /// The OpenAPI documents of the kinds served now.
    pub openapi: Arc<crate::openapi::OpenApi>,
    /// Objects in the log.
    pub registry: Registry,
    /// The admission chain.
    pub admission: Chain,
    /// Who may do what (RBAC).
    pub authorizer: Arc<crate::authz::Authorizer>,
    /// Settings.
    pub config: Config,
    /// Requests in flight and watches open, against `config.limits`.
    pub limits: Arc<crate::limits::Limits>,
    /// Cancelled when the server shuts down; ends every watch.
    pub shutdown: CancellationToken,
    /// Watch streams in flight.
    pub watchers: TaskTracker,
    /// One store watch per resource, shared by every API watch of it.
    pub watch_cache: WatchCache,
    /// Issues and checks service-account tokens.
    pub service_accounts: crate::serviceaccount::Tokens,
    /// The token file's tokens, once the authenticating routes are built ([`crate::routes`]),
    /// for TokenReview.
    pub static_tokens: std::sync::OnceLock<Arc<crate::auth::Authenticator>>,
    /// The log summarised for the timeline page, while the page is used.
    pub timeline_index: Arc<crate::replay::index::Index>,
    /// The aggregation layer's view of the APIServices and their backends.
    pub aggregator: Arc<crate::aggregation::Aggregator>,
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
        let services = &skiff_kinds::builtin::service::INFO;
        let existing = registry
            .list(services, None, None, None, None, None)
            .await?;
        let authorizer = Arc::new(crate::authz::Authorizer::default());
        let mut service_ips =
            admission::ServiceIps::new(config.service_ranges.clone(), &existing.items);
        if config.shared_store {
            service_ips = service_ips.in_store(registry.store().clone());
        }
        let service_ips = Arc::new(service_ips);
        if config.shared_store && config.create_system_namespaces {
            // At start: keys for Services written before (or without) reservations, and memory
            // learns what the other servers hold; then periodically.
            if let Err(e) = service_ips.repair(ALLOCATION_REPAIR_GRACE).await {
                tracing::warn!(error = %e, "cannot repair the ClusterIP/NodePort reservations yet");
            }
            let (ips, stop) = (service_ips.clone(), shutdown.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(ALLOCATION_REPAIR_INTERVAL) => {}
                        _ = stop.cancelled() => return,
                    }
                    if let Err(e) = ips.repair(ALLOCATION_REPAIR_GRACE).await {
                        tracing::warn!(error = %e, "cannot repair the ClusterIP/NodePort reservations");
                    }
                }
            });
        }
        let kinds = Arc::new(Kinds::builtin());
        let webhooks = Arc::new(admission::webhook::Webhooks::new(authorizer.clone()));
        let policies = Arc::new(admission::policy::Policies::new(
            kinds.clone(),
            authorizer.clone(),
        ));
        let namespaces = Arc::new(crate::mirror::Mirror::default());
        let quotas = Arc::new(crate::mirror::Mirror::default());
        let admission = Chain::new(vec![
            Box::new(admission::NamespaceLifecycle(namespaces.clone())),
            Box::new(admission::limits::LimitRanger),
            Box::new(admission::RbacEscalation(authorizer.clone())),
            Box::new(admission::node::NodeRestriction),
            Box::new(admission::certificates::Certificates(authorizer.clone())),
            Box::new(service_ips),
            Box::new(admission::DefaultTolerationSeconds(
                config.default_toleration_seconds,
            )),
            Box::new(admission::ServiceAccount),
            Box::new(admission::priority::Priority),
            Box::new(admission::storage::DefaultStorageClass),
            Box::new(admission::storage::StorageObjectInUseProtection),
            Box::new(admission::storage::PersistentVolumeClaimResize),
            Box::new(admission::ingress::DefaultIngressClass),
            Box::new(admission::webhook::MutatingAdmissionWebhook(
                webhooks.clone(),
            )),
            Box::new(admission::webhook::ValidatingAdmissionWebhook(
                webhooks.clone(),
            )),
            Box::new(admission::policy::ValidatingAdmissionPolicy(
                policies.clone(),
            )),
            // Last: charges quota only for what every other plugin let through.
            Box::new(admission::quota::ResourceQuota(quotas.clone())),
        ]);
        tokio::spawn(webhooks.run(registry.clone(), shutdown.clone()));
        tokio::spawn(policies.run(registry.clone(), shutdown.clone()));
        let watch_cache = WatchCache::new(
            registry.store().clone(),
            config.watch_cache_capacity,
            config.bookmark_interval,
            shutdown.clone(),
        );
        let service_accounts = crate::serviceaccount::Tokens::new(&config.service_accounts)
            .map_err(|e| Error::Internal(e.to_string()))?;
        let server = Arc::new(ApiServer {
            service_accounts,
            static_tokens: std::sync::OnceLock::new(),
            openapi: Arc::new(crate::openapi::OpenApi::new(kinds.clone())),
            kinds,
            registry,
            watch_cache,
            admission,
            authorizer,
            limits: crate::limits::Limits::new(config.limits.clone()),
            aggregator: Arc::new(crate::aggregation::Aggregator::new(
                config.front_proxy.clone(),
            )),
            config,
            shutdown,
            watchers: TaskTracker::new(),
            timeline_index: Arc::default(),
            event_lease: Mutex::new(None),
        });
        tokio::spawn(server.timeline_index.clone().run(
            crate::replay::Replay::with_kinds(
                server.registry.store().clone(),
                server.kinds.clone(),
            ),
            server.shutdown.clone(),
        ));
        if server.config.create_system_namespaces {
            server.ensure_system_namespaces().await?;
            server.ensure_system_priority_classes().await?;
        }
        if server.config.create_system_namespaces {
            crate::authz::bootstrap::reconcile(&server).await?;
        }
        crate::authz::Authorizer::start(&server).await?;
        let (ns, rq) = (
            &skiff_kinds::builtin::namespace::INFO,
            &skiff_kinds::builtin::resource_quota::INFO,
        );
        crate::follow::start(&server, ns, "admission's namespaces", namespaces).await?;
        crate::follow::start(&server, rq, "admission's quotas", quotas).await?;
        crate::crd::start(&server).await?;
        crate::aggregation::start(&server).await?;
        admission::policy::status::start(&server).await?;
        Ok(server)
    }

    async fn ensure_system_namespaces(&self) -> Result<()> {
        let namespaces = &skiff_kinds::builtin::namespace::Namespace;
        for name in admission::SYSTEM_NAMESPACES {
            let mut ns = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
            });
            self.prepare_create(namespaces, &mut ns);
            match self.registry.create(namespaces.info(), ns, None).await {
                Ok(_) | Err(Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The built-in PriorityClasses (`system-node-critical`, `system-cluster-critical`), as
    /// kube-apiserver's start-up hook makes them.
    async fn ensure_system_priority_classes(&self) -> Result<()> {
        let kind = &skiff_kinds::builtin::priority_class::PriorityClass;
        for class in skiff_kinds::builtin::priority_class::SYSTEM_CLASSES {
            let mut object = class.object();
            self.prepare_create(kind, &mut object);
            match self.registry.create(kind.info(), object, None).await {
                Ok(_) | Err(Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Applies the kind's defaults, as the decoder does in Kubernetes.
    pub fn default_object(&self, kind: &dyn Kind, object: &mut Value) {
        kind.default(object);
    }

    /// Everything a create fills in before admission: server-owned metadata, defaults, and the
    /// strategy's create-time fields (a namespace's `kubernetes` finalizer).
    pub fn prepare_create(&self, kind: &dyn Kind, object: &mut Value) {
        skiff_kinds::strategy::prepare_for_create(kind, object);
        kind.default(object);
    }

    /// Validates a create (`old` = None) or an update; a failure is 422 with every cause.
    pub fn validate(
        &self,
        kind: &dyn Kind,
        object: &Value,
        old: Option<&Value>,
        url_namespace: Option<&str>,
        subresource: Option<&str>,
    ) -> Result<()> {
        let info = kind.info();
        let errors = match (old, subresource) {
            (None, _) => skiff_kinds::validation::validate_create(kind, object, url_namespace),
            (Some(old), Some(sub)) if kind.subresource_fields(sub).is_some() => {
                skiff_kinds::validation::validate_subresource_update(kind, sub, object, old)
            }
            (Some(old), _) => skiff_kinds::validation::validate_update(kind, object, old),
        };
        if errors.is_empty() {
            return Ok(());
        }
        let name = crate::registry::namespace_and_name(object).1.to_string();
        Err(Error::invalid_fields(info, &name, &errors))
    }

    /// The lease a new object of `info` is attached to: Events expire, nothing else does.
    pub async fn lease_for(&self, kind: &dyn Kind) -> Result<Option<LeaseId>> {
        if !kind.expires() {
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

    /// `pods/{name}/log`: proxied to the kubelet of the pod's node (its InternalIP and
    /// `daemonEndpoints.kubeletEndpoint.Port`), streamed back as it comes (`follow`).
    pub async fn pod_log(
        &self,
        request: &Request,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Response> {
        let pods = &skiff_kinds::builtin::pod::INFO;
        let pod = self.registry.get(pods, namespace, name, None).await?;
        let node_name = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if node_name.is_empty() {
            return Err(Error::BadRequest(format!(
                "pod {name} does not have a host assigned"
            )));
        }
        let container = log_container(&pod, name, request.query.get("container"))?;
        let host = self.kubelet_endpoint(node_name, name).await?;
        let query = {
            let mut query = form_urlencoded::Serializer::new(String::new());
            for key in [
                "follow",
                "previous",
                "timestamps",
                "tailLines",
                "sinceSeconds",
                "sinceTime",
                "limitBytes",
            ] {
                if let Some(v) = request.query.get(key) {
                    query.append_pair(key, v);
                }
            }
            query.finish()
        };
        let ns = namespace.unwrap_or("default");
        let url = format!("http://{host}/containerLogs/{ns}/{name}/{container}?{query}");
        let mut call = kubelet_client().get(&url);
        if let Some(token) = &self.config.kubelet_token {
            call = call.bearer_auth(token);
        }
        let response = call
            .send()
            .await
            .map_err(|e| Error::Unavailable(format!("Get \"{url}\": {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(match status.as_u16() {
                401 | 403 => Error::Internal(format!(
                    "the kubelet of node {node_name} refused the API server: {body}"
                )),
                404 => Error::BadRequest(body),
                _ => Error::BadRequest(body),
            });
        }
        let mut reply = crate::proxy::stream_body(response);
        reply.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain"),
        );
        Ok(reply)
    }

    /// `host:port` of the kubelet of `node_name` (its InternalIP, else Hostname, and
    /// `daemonEndpoints.kubeletEndpoint.Port`), for a request about pod `pod`.
    async fn kubelet_endpoint(&self, node_name: &str, pod: &str) -> Result<String> {
        let nodes = &skiff_kinds::builtin::node::INFO;
        let node = match self.registry.get(nodes, None, node_name, None).await {
            Ok(node) => node,
            Err(Error::NotFound { .. }) => {
                return Err(Error::Unavailable(format!(
                    "node {node_name} of pod {pod} is gone"
                )));
            }
            Err(e) => return Err(e),
        };
        let address = node
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|addrs| {
                let of = |t: &str| {
                    addrs
                        .iter()
                        .find(|a| a["type"] == t)
                        .and_then(|a| a["address"].as_str())
                };
                of("InternalIP").or_else(|| of("Hostname"))
            })
            .map(str::to_string);
        let port = node
            .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let Some(address) = address.filter(|_| port != 0) else {
            return Err(Error::BadRequest(format!(
                "node {node_name} has no kubelet endpoint to serve pod {pod}"
            )));
        };
        Ok(if address.contains(':') {
            format!("[{address}]:{port}")
        } else {
            format!("{address}:{port}")
        })
    }

    /// `pods/{name}/exec` (and the other streaming subresources): authorized by the routes,
    /// then proxied as kube-apiserver does: the request goes to the kubelet of the pod's node
    /// with its upgrade headers and the API server's kubelet credentials; the kubelet's answer
    /// comes back as it is, and once both sides switched protocols the two connections are
    /// joined byte for byte until either ends.
    pub async fn pod_stream(
        &self,
        mut request: Request,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
    ) -> Result<Response> {
        let pods = &skiff_kinds::builtin::pod::INFO;
        let pod = self.registry.get(pods, namespace, name, None).await?;
        let node_name = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if node_name.is_empty() {
            return Err(Error::BadRequest(format!(
                "pod {name} does not have a host assigned"
            )));
        }
        let Some(client_upgrade) = request
            .upgrade
            .take()
            .filter(|_| request.headers.contains_key(http::header::UPGRADE))
        else {
            return Err(Error::BadRequest("Upgrade request required".into()));
        };
        let ns = namespace.unwrap_or("default");
        let path = if subresource == "portforward" {
            format!("/portForward/{ns}/{name}")
        } else {
            let container = log_container(&pod, name, request.query.get("container"))?;
            format!("/{subresource}/{ns}/{name}/{container}")
        };
        let host = self.kubelet_endpoint(node_name, name).await?;
        let query = {
            let mut query = form_urlencoded::Serializer::new(String::new());
            for (key, value) in request.query.pairs() {
                if matches!(
                    key,
                    "command"
                        | "stdin"
                        | "stdout"
                        | "stderr"
                        | "tty"
                        | "input"
                        | "output"
                        | "error"
                        | "ports"
                ) {
                    query.append_pair(key, value);
                }
            }
            query.finish()
        };
        let path = format!("{path}?{query}");
        let mut headers = http::HeaderMap::new();
        for header in STREAM_REQUEST_HEADERS {
            for value in request.headers.get_all(*header) {
                headers.append(*header, value.clone());
            }
        }
        if let Some(token) = &self.config.kubelet_token {
            let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::Internal("the kubelet token is not a header value".into()))?;
            headers.insert(http::header::AUTHORIZATION, value);
        }
        let answer =
            crate::proxy::upgrade(self, &host, &request.method, &path, headers, client_upgrade)
                .await
                .map_err(|e| match e {
                    Error::Unavailable(e) if !e.starts_with("error dialing") => {
                        Error::Unavailable(format!("the kubelet of node {node_name}: {e}"))
                    }
                    e => e,
                })?;
        match answer {
            crate::proxy::Upgraded::Switched(reply) => Ok(reply),
            crate::proxy::Upgraded::Refused(reply)
                if matches!(reply.status().as_u16(), 401 | 403) =>
            {
                use http_body_util::BodyExt;
                let body = reply.into_body().collect().await.map(|b| b.to_bytes());
                Err(Error::Internal(format!(
                    "the kubelet of node {node_name} refused the API server: {}",
                    String::from_utf8_lossy(&body.unwrap_or_default())
                )))
            }
            crate::proxy::Upgraded::Refused(reply) => Ok(reply),
        }
    }
}

/// Headers of a streaming request that go on to the kubelet (the upgrade and its negotiation).
const STREAM_REQUEST_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
];

/// The HTTP client for kubelets (plain HTTP on the node's address), shared by all requests.
pub(crate) fn kubelet_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        crate::tls::install_crypto_provider();
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .expect("a plain HTTP client builds")
    })
}

/// The container whose log is asked for: the `container` parameter, else the pod's only
/// container or its `kubectl.kubernetes.io/default-container`.
fn log_container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String> {
    let names: Vec<&str> = [
        "/spec/containers",
        "/spec/initContainers",
        "/spec/ephemeralContainers",
    ]
    .iter()
    .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
    .flatten()
    .filter_map(|c| c["name"].as_str())
    .collect();
    if let Some(asked) = asked.filter(|a| !a.is_empty()) {
        return if names.contains(&asked) {
            Ok(asked.to_string())
        } else {
            Err(Error::BadRequest(format!(
                "container {asked} is not valid for pod {name}"
            )))
        };
    }
    let regular: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    if regular.len() == 1 {
        return Ok(regular[0].to_string());
    }
    if let Some(default) = pod
        .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
        .and_then(Value::as_str)
    {
        return Ok(default.to_string());
    }
    Err(Error::BadRequest(format!(
        "a container name must be specified for pod {name}, choose one of: [{}]",
        regular.join(" ")
    )))
}

#[cfg(test)]
mod log_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_container_is_asked_only_or_default() {
        let one = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(log_container(&one, "p", None).unwrap(), "a");
        assert!(log_container(&one, "p", Some("b")).is_err());
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}],
                                   "initContainers": [{"name": "i"}]}});
        assert_eq!(log_container(&two, "p", Some("i")).unwrap(), "i");
        let err = log_container(&two, "p", None).unwrap_err();
        assert!(err.to_string().contains("choose one of: [a b]"), "{err}");
        let annotated = json!({"metadata": {"annotations": {"kubectl.kubernetes.io/default-container": "b"}},
                               "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(log_container(&annotated, "p", None).unwrap(), "b");
    }
}

#[cfg(test)]
mod start_tests {
    use super::*;
    use skiff_store::Revision;

    /// The revision of a new log after an API server started on it.
    async fn revision_after_start(config: Config) -> Revision {
        let dir = tempfile::tempdir().unwrap();
        let store = skiff_store::SledStore::open(skiff_store::Config::new(dir.path())).unwrap();
        let store: Arc<dyn Store> = Arc::new(store);
        let server = ApiServer::new(store.clone(), config, CancellationToken::new())
            .await
            .unwrap();
        let shutdown = server.shutdown.clone();
        let revision = server.registry.current_revision();
        shutdown.cancel();
        store.close().await.unwrap();
        revision
    }

    /// Regression: `skiff server --paused` on a data dir replayed to a point before
    /// `kube-public` existed created it, moving the log past the replayed point. A server that
    /// may write creates the system namespaces, the built-in PriorityClasses, the default RBAC
    /// policy, the aggregation layer's ConfigMap and local APIServices, once.
    #[tokio::test]
    async fn a_server_that_must_not_write_leaves_missing_system_namespaces_missing() {
        let quiet = Config {
            create_system_namespaces: false,
            ..Config::default()
        };
        assert_eq!(revision_after_start(quiet).await, Revision(0));
        let defaults = admission::SYSTEM_NAMESPACES.len()
            + skiff_kinds::builtin::priority_class::SYSTEM_CLASSES.len()
            + crate::authz::bootstrap::cluster_roles().len()
            + crate::authz::bootstrap::cluster_role_bindings().len()
            + crate::authz::bootstrap::roles().len()
            + crate::authz::bootstrap::role_bindings().len()
            // `extension-apiserver-authentication`, and a local APIService per built-in
            // group-version (the core group's `v1` included).
            + 1
            + 1
            + skiff_kinds::Kinds::builtin()
                .snapshot()
                .groups()
                .iter()
                .map(|(_, versions)| versions.len())
                .sum::<usize>();
        assert_eq!(
            revision_after_start(Config::default()).await,
            Revision(defaults as u64)
        );
    }
}

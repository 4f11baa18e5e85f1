//! The aggregation layer (`apiregistration.k8s.io/v1` APIService), as kube-aggregator runs it in
//! front of kube-apiserver:
//!
//! - **Local APIServices**: every group-version skiff serves itself (built-in kinds, custom
//!   resources, the built-in metrics API) has an APIService without `spec.service`, kept in step
//!   with the served kinds and marked `Available` with reason `Local` (kube-apiserver's
//!   autoregister and crdregistration controllers), so that `kubectl get apiservices` lists them.
//! - **Proxying**: a request under `/apis/{group}/{version}` whose APIService names a Service is
//!   authenticated and authorized here as usual, then sent to one ready endpoint of the Service
//!   over TLS (the certificate checked against `caBundle` for `<service>.<namespace>.svc`, or not
//!   at all with `insecureSkipTLSVerify`). What authenticated the client stays here; the user
//!   travels as `X-Remote-User` / `X-Remote-Group` / `X-Remote-Extra-*`, vouched for by the front
//!   proxy's client certificate ([`FrontProxy`]). Such an APIService takes over its
//!   group-version from skiff (`v1beta1.metrics.k8s.io` from metrics-server replaces the
//!   built-in metrics API); deleting it gives the group-version back.
//! - **Availability**: a loop sets each remote APIService's `Available` condition from whether
//!   its Service, port and endpoints exist and its `/apis/{group}/{version}` answers, writing only
//!   when the condition changed (several API servers may share the store). An unavailable
//!   APIService fails its own group-version's requests with 503; nothing else.
//! - **Discovery**: the backends' resource lists, fetched by the same check, go into `/apis`
//!   (legacy and aggregated; a group-version without a fresh list is `Stale`, which kubectl
//!   reports for that group-version alone).
//!
//! The pure parts (which APIService serves a path, the request's attributes, the identity
//! headers, the condition decisions, the local APIServices, the discovery merge) are functions
//! of their inputs; [`Aggregator`] holds what the loop learnt, and [`proxy`] and [`run`] are the
//! I/O shell.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use k8s_openapi::api::core::v1::Service;
use serde_json::{Map, Value, json};
use skiff_kinds::builtin::api_service::{self, INFO};

use crate::admission::webhook::client::describe;
use crate::auth::User;
use crate::backends::{Backend, Published, by_port};
use crate::error::{Error, Result};
use crate::registry::Update;
use crate::request::{Query, Response};
use crate::server::ApiServer;

/// The common name of the front proxy's client certificate, the one name aggregated servers
/// are told to accept (`requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";
/// The ConfigMap in `kube-system` that tells aggregated servers how to authenticate requests.
pub const AUTHENTICATION_CONFIG_MAP: &str = "extension-apiserver-authentication";
/// The header that carries the user's name.
pub const USER_HEADER: &str = "X-Remote-User";
/// The header that carries one of the user's groups (one header per group).
pub const GROUP_HEADER: &str = "X-Remote-Group";
/// The prefix of the headers that carry the user's extra attributes.
pub const EXTRA_PREFIX: &str = "X-Remote-Extra-";
/// Kubernetes' message for a request to an unavailable APIService.
pub const UNAVAILABLE: &str = "the server is currently unable to handle the request";
/// The label of the local APIServices this server made (as kube-apiserver's autoregister).
pub const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";
/// How long the availability check waits for a backend's discovery document.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the loop checks every APIService again without being told of a change.
pub const RESYNC: Duration = Duration::from_secs(5);

/// The front proxy's credentials: its own CA (not the cluster's, so that a client certificate
/// of the cluster CA cannot pose as the front proxy) and the client certificate skiff presents
/// to aggregated servers.
#[derive(Clone)]
pub struct FrontProxy {
    /// The front-proxy CA (PEM), published as `requestheader-client-ca-file`.
    pub ca_pem: String,
    /// The client certificate (PEM), common name [`FRONT_PROXY_CLIENT`].
    pub client_cert_pem: String,
    /// Its private key (PEM).
    pub client_key_pem: String,
}

impl std::fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("FrontProxy").finish_non_exhaustive()
    }
}

/// The Service an APIService sends its requests to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The Service port (not the endpoint's).
    pub port: i32,
}

impl ServiceRef {
    /// The name its serving certificate must carry: `<service>.<namespace>.svc`.
    pub fn host(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }
}

/// An `Available` condition: its status (`True`/`False`), reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// `True` or `False`.
    pub status: &'static str,
    /// Why, in one CamelCase word.
    pub reason: String,
    /// Why, for people.
    pub message: String,
}

impl Condition {
    /// What a local APIService always is.
    pub fn local() -> Condition {
        Condition {
            status: "True",
            reason: "Local".into(),
            message: "Local APIServices are always available".into(),
        }
    }

    /// A backend that passed every check.
    pub fn passed() -> Condition {
        Condition {
            status: "True",
            reason: "Passed".into(),
            message: "all checks passed".into(),
        }
    }

    fn unavailable(reason: &str, message: String) -> Condition {
        Condition {
            status: "False",
            reason: reason.into(),
            message,
        }
    }

    /// Whether it says available.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// What the aggregator needs of one APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// `<version>.<group>`.
    pub name: String,
    /// The group.
    pub group: String,
    /// The version.
    pub version: String,
    /// The group's priority in discovery (higher first).
    pub group_priority_minimum: i32,
    /// The version's priority within its group (higher first).
    pub version_priority: i32,
    /// Where its requests go; `None` for a local APIService.
    pub service: Option<ServiceRef>,
    /// The CA bundle (PEM) its backend's certificate must chain to.
    pub ca_bundle: Vec<u8>,
    /// Whether the backend's certificate goes unchecked.
    pub insecure: bool,
    /// Its `Available` condition as stored, if any.
    pub available: Option<Condition>,
}

impl Registered {
    /// The APIService `object` (JSON) as the aggregator sees it; `None` when it has no name.
    pub fn from_object(object: &Value) -> Option<Registered> {
        let name = object["metadata"]["name"].as_str()?.to_string();
        let spec = &object["spec"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let service = spec["service"].as_object().map(|s| ServiceRef {
            namespace: s.get("namespace").map(text).unwrap_or_default(),
            name: s.get("name").map(text).unwrap_or_default(),
            port: s
                .get("port")
                .and_then(Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(api_service::DEFAULT_PORT as i32),
        });
        let ca_bundle = spec["caBundle"]
            .as_str()
            .and_then(|b| {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(b).ok()
            })
            .unwrap_or_default();
        let available = api_service::available(object).map(|(status, reason, message)| Condition {
            status: if status == "True" { "True" } else { "False" },
            reason: reason.to_string(),
            message: message.to_string(),
        });
        Some(Registered {
            name,
            group: text(&spec["group"]),
            version: text(&spec["version"]),
            group_priority_minimum: spec["groupPriorityMinimum"].as_i64().unwrap_or(0) as i32,
            version_priority: spec["versionPriority"].as_i64().unwrap_or(0) as i32,
            service,
            ca_bundle,
            insecure: spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false),
            available,
        })
    }

    /// Whether its requests go to a Service rather than to skiff itself.
    pub fn is_remote(&self) -> bool {
        self.service.is_some()
    }
}

/// The group and version of a path under `/apis/{group}/{version}` (the group-version's
/// discovery document included); `None` for any other path.
pub fn group_version(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/apis/")?;
    let mut parts = rest.splitn(3, '/');
    let group = parts.next().filter(|g| !g.is_empty())?;
    let version = parts.next().filter(|v| !v.is_empty())?;
    Some((group, version))
}

/// The registered remote APIService that serves `path`, if one does.
pub fn serving<'a>(
    registered: &'a BTreeMap<String, Registered>,
    path: &str,
) -> Option<&'a Registered> {
    let (group, version) = group_version(path)?;
    registered
        .get(&api_service::name_for(group, version))
        .filter(|r| r.is_remote() && r.group == group && r.version == version)
}

/// What a request to an aggregated group-version asks, for authorization (Kubernetes'
/// `RequestInfo`, read from the path alone: skiff does not know the backend's resources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// The group-version's discovery document (or anything short of a resource).
    NonResource {
        /// The HTTP method in lower case.
        verb: String,
    },
    /// A resource request.
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
        verb: String,
        /// The namespace, or empty.
        namespace: String,
        /// The resource's plural.
        resource: String,
        /// The subresource, or empty.
        subresource: String,
        /// The object's name, or empty.
        name: String,
    },
}

/// The attributes of `method` on `path` (under `/apis/{group}/{version}`) with `query`.
pub fn attributes(method: &Method, path: &str, query: &Query) -> Attributes {
    let verb = crate::authz::path_verb(method);
    let rest = path
        .strip_prefix("/apis/")
        .and_then(|r| r.splitn(3, '/').nth(2))
        .unwrap_or_default();
    let mut parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return Attributes::NonResource { verb };
    }
    // The old `/watch/` prefix.
    let mut watch = false;
    if parts[0] == "watch" {
        watch = true;
        parts.remove(0);
        if parts.is_empty() {
            return Attributes::NonResource { verb };
        }
    }
    let mut namespace = "";
    // `namespaces/{ns}/{resource}...` is a namespaced resource; `namespaces` and
    // `namespaces/{ns}` are the namespaces resource itself.
    if parts[0] == "namespaces" && parts.len() > 2 {
        namespace = parts[1];
        parts.drain(..2);
    } else if parts[0] == "namespaces" && parts.len() == 2 {
        namespace = parts[1];
    }
    let resource = parts[0];
    let name = parts.get(1).copied().unwrap_or_default();
    let subresource = parts.get(2).copied().unwrap_or_default();
    let watch = watch || query.flag("watch");
    let verb = match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if name.is_empty() => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        _ => verb.as_str(),
    }
    .to_string();
    Attributes::Resource {
        verb,
        namespace: namespace.to_string(),
        resource: resource.to_string(),
        subresource: subresource.to_string(),
        name: name.to_string(),
    }
}

/// A header name's characters other than RFC 9110 token characters, percent-encoded (and `%`
/// itself), as kube-apiserver escapes extra keys.
fn escape_header_key(key: &str) -> String {
    let mut out = String::new();
    for byte in key.bytes() {
        let token = byte.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&byte);
        if token {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The headers that tell the backend who the user is.
pub fn identity_headers(user: &User) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let value = |v: &str| HeaderValue::from_str(v).ok();
    if let Some(name) = value(&user.name) {
        headers.insert(HeaderName::from_static("x-remote-user"), name);
    }
    for group in &user.groups {
        if let Some(group) = value(group) {
            headers.append(HeaderName::from_static("x-remote-group"), group);
        }
    }
    for (key, values) in &user.extra {
        let header = format!("{EXTRA_PREFIX}{}", escape_header_key(key));
        let Ok(header) = HeaderName::from_bytes(header.to_ascii_lowercase().as_bytes()) else {
            continue;
        };
        for v in values.iter().filter_map(|v| value(v)) {
            headers.append(header.clone(), v);
        }
    }
    headers
}

/// The headers a proxied request carries: the client's, without what authenticated it to skiff
/// ([`crate::proxy::forwarded_headers`]) and without any identity headers it sent itself
/// (only the front proxy may say who the user is), then the user's identity.
pub fn backend_headers(client: &HeaderMap, user: &User, upgrade: bool) -> HeaderMap {
    let mut headers = crate::proxy::forwarded_headers(client, true, upgrade);
    let spoofed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("x-remote-"))
        .cloned()
        .collect();
    for name in spoofed {
        headers.remove(name);
    }
    for (name, value) in &identity_headers(user) {
        headers.append(name.clone(), value.clone());
    }
    headers
}

/// What a remote APIService's Service port leads to, or the condition that says why nothing
/// (kube-aggregator's reasons): the endpoints of a named port, or an `ExternalName`.
pub fn backend(
    reference: &ServiceRef,
    service: Option<&Service>,
) -> std::result::Result<Backend, Condition> {
    let (ns, name, port) = (&reference.namespace, &reference.name, reference.port);
    let Some(service) = service else {
        return Err(Condition::unavailable(
            "ServiceNotFound",
            format!("service/{name} in \"{ns}\" is not present"),
        ));
    };
    by_port(service, port).ok_or_else(|| {
        Condition::unavailable(
            "ServicePortError",
            format!("service/{name} in \"{ns}\" is not listening on port {port}"),
        )
    })
}

/// A ready endpoint of the Service port named `port_name`, or the condition that says why there
/// is none.
pub fn endpoint(
    reference: &ServiceRef,
    port_name: &str,
    published: &Published,
) -> std::result::Result<SocketAddr, Condition> {
    let (ns, name) = (&reference.namespace, &reference.name);
    if !published.exists {
        return Err(Condition::unavailable(
            "EndpointsNotFound",
            format!("cannot find endpoints for service/{name} in \"{ns}\""),
        ));
    }
    published.ready.first().copied().ok_or_else(|| {
        Condition::unavailable(
            "MissingEndpoints",
            format!(
                "endpoints for service/{name} in \"{ns}\" have no addresses with port name \"{port_name}\""
            ),
        )
    })
}

/// The condition after the discovery check of `url`: `Ok(status code)` of an answer, or why
/// there was none.
pub fn discovery_condition(url: &str, outcome: std::result::Result<u16, String>) -> Condition {
    match outcome {
        Ok(code) if (200..300).contains(&code) => Condition::passed(),
        Ok(code) => Condition::unavailable(
            "FailedDiscoveryCheck",
            format!("failing or missing response from {url}: bad status from {url}: {code}"),
        ),
        Err(e) => Condition::unavailable(
            "FailedDiscoveryCheck",
            format!("failing or missing response from {url}: {e}"),
        ),
    }
}

/// `object` (an APIService, JSON) with its `Available` condition set to `condition`; the
/// transition time moves only when the status changes. `None` when it already says so, so
/// that nothing is written.
pub fn with_condition(object: &Value, condition: &Condition, now: &str) -> Option<Value> {
    let current = api_service::available(object);
    if current
        == Some((
            condition.status,
            condition.reason.as_str(),
            condition.message.as_str(),
        ))
    {
        return None;
    }
    let transition = match current {
        Some((status, _, _)) if status == condition.status => object["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"))
            .map(|c| c["lastTransitionTime"].clone())
            .filter(|t| t.is_string())
            .unwrap_or_else(|| json!(now)),
        _ => json!(now),
    };
    let entry = json!({"type": "Available", "status": condition.status,
        "lastTransitionTime": transition, "reason": condition.reason,
        "message": condition.message});
    let mut object = object.clone();
    if !object["status"].is_object() {
        object["status"] = json!({});
    }
    let conditions = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != "Available")
        .collect();
    conditions.push(entry);
    object["status"]["conditions"] = Value::Array(conditions);
    Some(object)
}

/// kube-apiserver's discovery priority of a built-in group (its autoregister table); other
/// groups (custom resources) get 1000, as the crdregistration controller gives them.
pub fn group_priority(group: &str) -> i32 {
    match group {
        "" => 18000,
        "apps" => 17800,
        "events.k8s.io" => 17750,
        "authentication.k8s.io" => 17700,
        "authorization.k8s.io" => 17600,
        "autoscaling" => 17500,
        "batch" => 17400,
        "certificates.k8s.io" => 17300,
        "networking.k8s.io" => 17200,
        "policy" => 17100,
        "rbac.authorization.k8s.io" => 17000,
        "storage.k8s.io" => 16800,
        "admissionregistration.k8s.io" => 16700,
        "scheduling.k8s.io" => 16600,
        "coordination.k8s.io" => 16500,
        "apiextensions.k8s.io" => 16400,
        "node.k8s.io" => 16300,
        "discovery.k8s.io" => 16200,
        "flowcontrol.apiserver.k8s.io" => 16100,
        "apiregistration.k8s.io" => 18000 - 1000,
        "metrics.k8s.io" => 100,
        _ => 1000,
    }
}

/// The local APIServices of the served `groups` (group, versions in preference order; the core
/// group as `""`): one per group-version, with no service, available as `Local`. `builtin`
/// says which groups are built in (their label says `onstart`, a custom resource group's
/// `true`, as kube-apiserver labels them).
pub fn local_api_services(
    groups: &[(&str, Vec<&str>)],
    builtin: impl Fn(&str) -> bool,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (group, versions) in groups {
        let count = versions.len() as i32;
        for (i, version) in versions.iter().enumerate() {
            let managed = if builtin(group) { "onstart" } else { "true" };
            out.push(json!({
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": api_service::name_for(group, version),
                             "labels": {AUTOMANAGED_LABEL: managed}},
                "spec": {"group": group, "version": version,
                         "groupPriorityMinimum": group_priority(group),
                         "versionPriority": version_priority(group, count - 1 - i as i32)},
            }));
        }
    }
    out
}

/// The `versionPriority` of a local group-version, `rank` from 0 (the least preferred): 15 and
/// up as kube-apiserver numbers its own, but 100 for metrics.k8s.io, as metrics-server's own
/// manifest registers it, so that applying that manifest (server-side too) takes the object
/// over without a conflict on the field.
fn version_priority(group: &str, rank: i32) -> i32 {
    match group {
        "metrics.k8s.io" => 100 + rank,
        _ => 15 + rank,
    }
}

/// Whether a stored local APIService must be written to match `desired`.
fn local_differs(existing: &Value, desired: &Value) -> bool {
    existing["spec"] != desired["spec"]
        || existing["metadata"]["labels"][AUTOMANAGED_LABEL]
            != desired["metadata"]["labels"][AUTOMANAGED_LABEL]
}

/// A backend's `APIResourceList` (JSON) as the resources of an aggregated discovery version.
pub fn aggregated_resources(list: &Value, group: &str, version: &str) -> Vec<Value> {
    let entries = list["resources"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<Value> = Vec::new();
    for entry in entries.iter() {
        let name = entry["name"].as_str().unwrap_or_default();
        if name.is_empty() || name.contains('/') {
            continue;
        }
        let kind_of = |e: &Value| {
            json!({"group": e["group"].as_str().unwrap_or(group),
                   "version": e["version"].as_str().unwrap_or(version),
                   "kind": e["kind"]})
        };
        let mut resource = json!({
            "resource": name,
            "responseKind": kind_of(entry),
            "scope": if entry["namespaced"].as_bool().unwrap_or(false) { "Namespaced" } else { "Cluster" },
            "singularResource": entry["singularName"].as_str().unwrap_or_default(),
            "verbs": entry["verbs"].clone(),
        });
        for key in ["shortNames", "categories"] {
            if entry[key].is_array() {
                resource[key] = entry[key].clone();
            }
        }
        let prefix = format!("{name}/");
        let subresources: Vec<Value> = entries
            .iter()
            .filter_map(|e| {
                let sub = e["name"].as_str()?.strip_prefix(&prefix)?;
                Some(json!({"subresource": sub, "responseKind": kind_of(e),
                            "verbs": e["verbs"].clone()}))
            })
            .collect();
        if !subresources.is_empty() {
            resource["subresources"] = Value::Array(subresources);
        }
        out.push(resource);
    }
    out
}

/// The documents of the available remote APIServices, as the OpenAPI routes serve them.
impl crate::openapi::Aggregated for Aggregator {
    fn v3(&self) -> BTreeMap<String, crate::openapi::Built> {
        let documents = self.documents.read().unwrap_or_else(|e| e.into_inner());
        self.openapi
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(name, _)| documents.contains_key(*name))
            .map(|(_, remote)| (remote.path.clone(), remote.document.clone()))
            .collect()
    }

    /// In discovery order, the order kube-aggregator merges them in.
    fn v2(&self) -> Vec<crate::openapi::Built> {
        if self
            .openapi_v2
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return Vec::new();
        }
        let available = self.available();
        let v2 = self.openapi_v2.read().unwrap_or_else(|e| e.into_inner());
        available
            .iter()
            .filter_map(|name| v2.get(name))
            .map(|remote| remote.document.clone())
            .collect()
    }
}

/// A remote group-version as discovery shows it: the APIService and its backend's resource
/// list when the last check fetched one.
pub type Remote = (Registered, Option<Value>);

/// Remote group-versions in discovery order: by group priority (highest first), then version
/// priority.
fn ordered(remote: &[Remote]) -> Vec<&Remote> {
    let mut list: Vec<&Remote> = remote.iter().collect();
    list.sort_by(|(a, _), (b, _)| discovery_order(a, b));
    list
}

/// Discovery order: by group priority (highest first), then group, then version priority.
fn discovery_order(a: &Registered, b: &Registered) -> std::cmp::Ordering {
    b.group_priority_minimum
        .cmp(&a.group_priority_minimum)
        .then(a.group.cmp(&b.group))
        .then(b.version_priority.cmp(&a.version_priority))
}

/// Keeps `value` under `name` in `map`, or forgets what was there when there is none.
fn keep<T>(map: &RwLock<HashMap<String, T>>, name: &str, value: Option<T>) {
    let mut map = map.write().unwrap_or_else(|e| e.into_inner());
    match value {
        Some(value) => {
            map.insert(name.to_string(), value);
        }
        None => {
            map.remove(name);
        }
    }
}

/// The legacy `/apis` body (`APIGroupList`, JSON) with the remote group-versions added.
pub fn merge_legacy(list: &mut Value, remote: &[Remote]) {
    let Some(groups) = list["groups"].as_array_mut() else {
        return;
    };
    for (r, _) in ordered(remote) {
        let gv =
            json!({"groupVersion": format!("{}/{}", r.group, r.version), "version": r.version});
        match groups.iter_mut().find(|g| g["name"] == r.group.as_str()) {
            Some(group) => {
                let versions = group["versions"].as_array_mut();
                if let Some(versions) = versions
                    && !versions.iter().any(|v| v["version"] == r.version.as_str())
                {
                    versions.push(gv);
                }
            }
            None => groups.push(json!({"name": r.group, "versions": [gv.clone()],
                                       "preferredVersion": gv})),
        }
    }
}

/// The `APIGroup` (JSON) of `group` with its remote versions added; `local` is the group as
/// skiff serves it, if it does.
pub fn merge_group(group: &str, local: Option<Value>, remote: &[Remote]) -> Option<Value> {
    let mut list = json!({"groups": local.into_iter().collect::<Vec<_>>()});
    let mine: Vec<Remote> = remote
        .iter()
        .filter(|(r, _)| r.group == group)
        .cloned()
        .collect();
    merge_legacy(&mut list, &mine);
    let mut found = list["groups"].as_array_mut()?.pop()?;
    found["kind"] = json!("APIGroup");
    found["apiVersion"] = json!("v1");
    Some(found)
}

/// The aggregated `/apis` document (JSON) with the remote group-versions in place of any local
/// ones of the same name: their backend's resources, `Stale` when the backend is unavailable
/// or its list was never fetched.
pub fn merge_aggregated(document: &mut Value, remote: &[Remote]) {
    let Some(items) = document["items"].as_array_mut() else {
        return;
    };
    for (r, list) in ordered(remote) {
        let fresh = r.available.as_ref().is_none_or(Condition::is_true) && list.is_some();
        let resources = match list {
            Some(list) if fresh => aggregated_resources(list, &r.group, &r.version),
            _ => Vec::new(),
        };
        let entry = json!({"version": r.version, "resources": resources,
                           "freshness": if fresh { "Current" } else { "Stale" }});
        let index = match items
            .iter()
            .position(|g| g["metadata"]["name"] == r.group.as_str())
        {
            Some(i) => i,
            None => {
                items.push(json!({"metadata": {"name": r.group}, "versions": []}));
                items.len() - 1
            }
        };
        let Some(versions) = items[index]["versions"].as_array_mut() else {
            continue;
        };
        match versions
            .iter_mut()
            .find(|v| v["version"] == r.version.as_str())
        {
            Some(v) => *v = entry,
            None => versions.push(entry),
        }
    }
}

/// A remote group-version's OpenAPI v3 document, as its server last served it.
#[derive(Debug, Clone)]
struct RemoteOpenApi {
    /// Its path in the index: `apis/<group>/<version>`.
    path: String,
    /// The URL the server's index gave for it (with the server's `hash`): while the index gives
    /// the same one, the document is not fetched again.
    url: String,
    /// The document.
    document: crate::openapi::Built,
}

/// A remote group-version's OpenAPI v2 document, as its server last served it, cut to the
/// group-version's paths.
#[derive(Debug, Clone)]
struct RemoteOpenApiV2 {
    /// The server's ETag for its whole document: while it answers 304 to it, the document is
    /// not fetched again.
    etag: Option<String>,
    /// The document's paths under `/apis/<group>/<version>/` and what they use.
    document: crate::openapi::Built,
}

/// Key of a cached backend client: the APIService, its TLS settings and the addresses it dials.
type ClientKey = (String, Vec<u8>, bool, Vec<SocketAddr>);

/// What the aggregator knows: the APIServices as last seen in the log, the backends' resource
/// lists the last checks fetched, and a client per backend endpoint.
#[derive(Default)]
pub struct Aggregator {
    /// The front proxy's credentials, when the server has them.
    front_proxy: Option<FrontProxy>,
    /// Every APIService by name (kept by the follower, read by the routes and discovery).
    registered: RwLock<BTreeMap<String, Registered>>,
    /// The backends' `APIResourceList`s by APIService name.
    documents: RwLock<HashMap<String, Value>>,
    /// The backends' OpenAPI v3 documents of their group-versions, by APIService name.
    openapi: RwLock<HashMap<String, RemoteOpenApi>>,
    /// The backends' OpenAPI v2 documents, by APIService name.
    openapi_v2: RwLock<HashMap<String, RemoteOpenApiV2>>,
    clients: Mutex<HashMap<ClientKey, reqwest::Client>>,
    /// Wakes the loop when an APIService changed.
    changed: tokio::sync::Notify,
}

impl Aggregator {
    /// An aggregator presenting `front_proxy`'s certificate to backends.
    pub fn new(front_proxy: Option<FrontProxy>) -> Aggregator {
        Aggregator {
            front_proxy,
            ..Aggregator::default()
        }
    }

    /// The remote APIService serving `path`, if any.
    pub fn serving(&self, path: &str) -> Option<Registered> {
        let registered = self.registered.read().unwrap_or_else(|e| e.into_inner());
        serving(&registered, path).cloned()
    }

    /// The names of the available remote APIServices, in discovery order.
    fn available(&self) -> Vec<String> {
        let documents = self.documents.read().unwrap_or_else(|e| e.into_inner());
        let registered = self.registered.read().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<&Registered> = registered
            .values()
            .filter(|r| documents.contains_key(&r.name))
            .collect();
        list.sort_by(|a, b| discovery_order(a, b));
        list.into_iter().map(|r| r.name.clone()).collect()
    }

    /// Every remote APIService with its backend's last resource list.
    pub fn remote(&self) -> Vec<Remote> {
        let registered = self.registered.read().unwrap_or_else(|e| e.into_inner());
        let documents = self.documents.read().unwrap_or_else(|e| e.into_inner());
        registered
            .values()
            .filter(|r| r.is_remote())
            .map(|r| (r.clone(), documents.get(&r.name).cloned()))
            .collect()
    }

    fn set(&self, object: &Value, present: bool) {
        let Some(registered) = Registered::from_object(object) else {
            return;
        };
        let mut map = self.registered.write().unwrap_or_else(|e| e.into_inner());
        if present {
            map.insert(registered.name.clone(), registered);
        } else {
            map.remove(&registered.name);
            self.documents
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&registered.name);
            self.openapi
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&registered.name);
            self.openapi_v2
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&registered.name);
        }
    }

    /// The client for `registered`'s backend at `addresses` (tried in turn): trusting its
    /// `caBundle` for the Service's name (or nothing, with `insecureSkipTLSVerify`), presenting
    /// the front proxy's certificate.
    fn client(&self, registered: &Registered, addresses: &[SocketAddr]) -> Result<reqwest::Client> {
        let key = (
            registered.name.clone(),
            registered.ca_bundle.clone(),
            registered.insecure,
            addresses.to_vec(),
        );
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let failed = |e: String| {
            Error::Unavailable(format!(
                "cannot reach the backend of APIService {:?}: {e}",
                registered.name
            ))
        };
        let host = registered
            .service
            .as_ref()
            .map(ServiceRef::host)
            .unwrap_or_default();
        let mut tls = self.tls(registered)?;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .resolve_to_addrs(&host, addresses)
            .tls_backend_preconfigured(tls)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

impl Aggregator {
    /// The TLS client configuration for `registered`'s backend (no ALPN).
    fn tls(&self, registered: &Registered) -> Result<rustls::ClientConfig> {
        tls_config(
            &registered.ca_bundle,
            registered.insecure,
            self.front_proxy.as_ref(),
        )
        .map_err(|e| {
            Error::Unavailable(format!(
                "cannot reach the backend of APIService {:?}: {e}",
                registered.name
            ))
        })
    }
}

/// A server certificate verifier that takes any certificate (`insecureSkipTLSVerify`), still
/// checking that the server holds its key.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The rustls configuration trusting `ca_bundle` (PEM) alone, or any server when `insecure`,
/// and presenting the front proxy's client certificate.
fn tls_config(
    ca_bundle: &[u8],
    insecure: bool,
    front_proxy: Option<&FrontProxy>,
) -> std::result::Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if insecure {
        versions
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_bundle) {
            let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("invalid caBundle: {e}"))?;
        }
        if roots.is_empty() {
            return Err(
                "no caBundle and no insecureSkipTLSVerify: the backend's certificate cannot be verified"
                    .into(),
            );
        }
        versions.with_root_certificates(roots)
    };
    let config = match front_proxy {
        Some(fp) => {
            let certs = CertificateDer::pem_slice_iter(fp.client_cert_pem.as_bytes())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| format!("the front-proxy certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(fp.client_key_pem.as_bytes())
                .map_err(|e| format!("the front-proxy key: {e}"))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("the front-proxy certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(config)
}

/// Where `registered`'s requests go now: a ready endpoint of its Service's port, or an
/// `ExternalName`'s addresses (tried in turn); else the condition that says why nowhere.
async fn locate(
    server: &ApiServer,
    registered: &Registered,
    reference: &ServiceRef,
) -> std::result::Result<Vec<SocketAddr>, Condition> {
    let (ns, name) = (reference.namespace.as_str(), reference.name.as_str());
    let service: Option<Service> = match server
        .registry
        .get_view(&skiff_kinds::builtin::service::INFO, Some(ns), name)
        .await
    {
        Ok(service) => Some(service),
        Err(Error::NotFound { .. }) => None,
        Err(e) => return Err(Condition::unavailable("ServiceAccessError", e.to_string())),
    };
    match backend(reference, service.as_ref())? {
        Backend::External(host) => crate::backends::lookup(&host, reference.port)
            .await
            .map_err(|e| {
                let url = format!(
                    "https://{}:{}/apis/{}/{}",
                    reference.host(),
                    reference.port,
                    registered.group,
                    registered.version
                );
                discovery_condition(&url, Err(e))
            }),
        Backend::Port(port_name) => {
            let published = crate::backends::published(&server.registry, ns, name, &port_name)
                .await
                .map_err(|e| Condition::unavailable("ServiceAccessError", e.to_string()))?;
            endpoint(reference, &port_name, &published).map(|address| vec![address])
        }
    }
}

/// One request on its way to a backend.
pub struct Forward {
    /// The method.
    pub method: Method,
    /// The path, as the client sent it.
    pub path: String,
    /// The raw query string.
    pub query: String,
    /// The headers for the backend ([`backend_headers`]).
    pub headers: HeaderMap,
    /// The body.
    pub body: bytes::Bytes,
    /// The client's connection, when it asks to switch protocols (the headers then keep
    /// `Connection` and `Upgrade`).
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
}

/// Sends `request` to `registered`'s backend and streams the answer back.
pub async fn proxy(
    server: &ApiServer,
    registered: &Registered,
    request: Forward,
) -> Result<Response> {
    if registered.available.as_ref().is_some_and(|c| !c.is_true()) {
        return Err(Error::Unavailable(UNAVAILABLE.into()));
    }
    let Some(reference) = &registered.service else {
        return Err(Error::NoRoute);
    };
    let addresses = locate(server, registered, reference).await.map_err(|c| {
        Error::Unavailable(format!(
            "{UNAVAILABLE}: APIService {:?}: {}",
            registered.name, c.message
        ))
    })?;
    let mut path = request.path.clone();
    if !request.query.is_empty() {
        path.push('?');
        path.push_str(&request.query);
    }
    if let Some(client) = request.upgrade {
        return upgrade(
            server,
            registered,
            reference,
            &addresses,
            &request.method,
            &path,
            request.headers,
            client,
        )
        .await;
    }
    let client = server.aggregator.client(registered, &addresses)?;
    let url = format!("https://{}:{}{path}", reference.host(), addresses[0].port());
    let mut call = client
        .request(request.method.clone(), &url)
        .headers(request.headers);
    if !request.body.is_empty() || !matches!(request.method, Method::GET | Method::HEAD) {
        call = call.body(request.body);
    }
    let answer = call.send().await.map_err(|e| {
        Error::Unavailable(format!(
            "error trying to reach service of APIService {:?}: {}",
            registered.name,
            describe(&e)
        ))
    })?;
    let status = answer.status();
    let headers = crate::proxy::forwarded_headers(answer.headers(), false, false);
    let mut reply = crate::proxy::stream_body(answer);
    *reply.status_mut() = status;
    *reply.headers_mut() = headers;
    Ok(reply)
}

/// Switches protocols through to the backend: a TLS connection of its own (checked as every
/// other), the upgrade request on it, and the two connections joined once both switched.
#[allow(clippy::too_many_arguments)]
async fn upgrade(
    server: &ApiServer,
    registered: &Registered,
    reference: &ServiceRef,
    addresses: &[SocketAddr],
    method: &Method,
    path: &str,
    headers: HeaderMap,
    client: hyper::upgrade::OnUpgrade,
) -> Result<Response> {
    let tcp = crate::proxy::dial_to(addresses, &addresses[0].to_string()).await?;
    let config = server.aggregator.tls(registered)?;
    let name = rustls::pki_types::ServerName::try_from(reference.host())
        .map_err(|e| Error::Unavailable(format!("invalid service name: {e}")))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            Error::Unavailable(format!(
                "error trying to reach service of APIService {:?}: {e}",
                registered.name
            ))
        })?;
    let authority = format!("{}:{}", reference.host(), addresses[0].port());
    match crate::proxy::upgrade_over(server, tls, &authority, method, path, headers, client).await?
    {
        crate::proxy::Upgraded::Switched(reply) | crate::proxy::Upgraded::Refused(reply) => {
            Ok(reply)
        }
    }
}

/// Checks one remote APIService: its endpoint, then a GET of its discovery document. Returns
/// the condition and the document when one came back.
async fn check(server: &ApiServer, registered: &Registered) -> (Condition, Option<Value>) {
    let Some(reference) = &registered.service else {
        return (Condition::local(), None);
    };
    let addresses = match locate(server, registered, reference).await {
        Ok(addresses) => addresses,
        Err(condition) => return (condition, None),
    };
    let path = format!("/apis/{}/{}", registered.group, registered.version);
    let url = format!("https://{}:{}{path}", reference.host(), addresses[0].port());
    let client = match server.aggregator.client(registered, &addresses) {
        Ok(client) => client,
        Err(e) => return (discovery_condition(&url, Err(e.to_string())), None),
    };
    let mut headers = identity_headers(&User {
        name: "system:kube-aggregator".into(),
        uid: String::new(),
        groups: vec!["system:masters".into()],
        extra: BTreeMap::new(),
    });
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    let answer = client
        .get(&url)
        .headers(headers.clone())
        .timeout(CHECK_TIMEOUT)
        .send()
        .await;
    match answer {
        Err(e) => (discovery_condition(&url, Err(describe(&e))), None),
        Ok(answer) => {
            let code = answer.status().as_u16();
            let body = answer.bytes().await.ok();
            let document = body.and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let condition = discovery_condition(&url, Ok(code));
            if condition.is_true() {
                let base = format!("https://{}:{}", reference.host(), addresses[0].port());
                let v3 = fetch_openapi(server, registered, &client, &base, headers.clone()).await;
                keep(&server.aggregator.openapi, &registered.name, v3);
                let v2 = fetch_openapi_v2(server, registered, &client, &base, headers).await;
                keep(&server.aggregator.openapi_v2, &registered.name, v2);
            }
            (condition, document)
        }
    }
}

/// `registered`'s OpenAPI v3 document of its group-version, fetched from its server (at `base`)
/// only when the server's index names a new one, as kube-aggregator does. A server without one
/// (its index fails or does not list the group-version) has none; that does not make it
/// unavailable.
async fn fetch_openapi(
    server: &ApiServer,
    registered: &Registered,
    client: &reqwest::Client,
    base: &str,
    headers: HeaderMap,
) -> Option<RemoteOpenApi> {
    let path = crate::openapi::group_version_path(&registered.group, &registered.version);
    let get = |url: String| {
        client
            .get(url)
            .headers(headers.clone())
            .timeout(CHECK_TIMEOUT)
            .send()
    };
    let fetched = async {
        let index: Value = get(format!("{base}/openapi/v3"))
            .await
            .ok()?
            .error_for_status()
            .ok()?
            .json()
            .await
            .ok()?;
        let url = index["paths"][&path]["serverRelativeURL"]
            .as_str()?
            .to_string();
        let known = server
            .aggregator
            .openapi
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&registered.name)
            .filter(|known| known.url == url)
            .cloned();
        if let Some(known) = known {
            return Some(known);
        }
        let body = get(format!("{base}{url}"))
            .await
            .ok()?
            .error_for_status()
            .ok()?
            .bytes()
            .await
            .ok()?;
        // Only a JSON object is served on as a document.
        serde_json::from_slice::<Map<String, Value>>(&body).ok()?;
        Some(RemoteOpenApi {
            path: path.clone(),
            url,
            document: crate::openapi::Built::from_bytes(body.to_vec()),
        })
    };
    fetched.await
}

/// `registered`'s server's OpenAPI v2 document (JSON) cut to its group-version's paths, as
/// kube-aggregator keeps it; the one known when the server answers that it is current
/// (`If-None-Match`). A server without one has none; that does not make it unavailable.
async fn fetch_openapi_v2(
    server: &ApiServer,
    registered: &Registered,
    client: &reqwest::Client,
    base: &str,
    mut headers: HeaderMap,
) -> Option<RemoteOpenApiV2> {
    let known = server
        .aggregator
        .openapi_v2
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&registered.name)
        .cloned();
    if let Some(etag) = known
        .as_ref()
        .and_then(|k| k.etag.as_deref())
        .and_then(|e| HeaderValue::from_str(e).ok())
    {
        headers.insert(http::header::IF_NONE_MATCH, etag);
    }
    let answer = client
        .get(format!("{base}/openapi/v2"))
        .headers(headers)
        .timeout(CHECK_TIMEOUT)
        .send()
        .await;
    match answer {
        Ok(answer) if answer.status() == http::StatusCode::NOT_MODIFIED && known.is_some() => known,
        Ok(answer) if answer.status().is_success() => {
            let etag = answer
                .headers()
                .get(http::header::ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            match answer.json::<Value>().await {
                Ok(document) if document.is_object() => {
                    let prefix = format!("/apis/{}/{}/", registered.group, registered.version);
                    let cut = crate::openapi::merge::only_paths_under(&document, &[prefix]);
                    Some(RemoteOpenApiV2 {
                        etag,
                        document: crate::openapi::Built::from_bytes(
                            serde_json::to_vec(&cut).expect("JSON serializes"),
                        ),
                    })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Writes `condition` into APIService `name`'s status, unless it already says so.
async fn write_condition(server: &ApiServer, name: &str, condition: &Condition) -> Result<()> {
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    server
        .registry
        .update(&INFO, None, name, None, false, |current| {
            let updated = with_condition(&current, condition, &now).unwrap_or(current);
            async move { Ok(Update::Write(updated)) }
        })
        .await?;
    Ok(())
}

/// Keeps the local APIServices in step with the served group-versions: creates the missing,
/// corrects the changed, deletes those of group-versions no longer served. An APIService with
/// a service (a user's) is never touched.
async fn autoregister(server: &ApiServer) -> Result<()> {
    let snapshot = server.kinds.snapshot();
    let mut groups = snapshot.groups();
    if snapshot.infos().any(|i| i.group.is_empty()) {
        groups.insert(0, ("", vec!["v1"]));
    }
    let desired = local_api_services(&groups, |g| {
        skiff_kinds::builtin::all()
            .iter()
            .any(|k| k.info().group == g)
    });
    let existing = server
        .registry
        .list(&INFO, None, None, None, None, None)
        .await?
        .items;
    let by_name: BTreeMap<&str, &Value> = existing
        .iter()
        .filter_map(|o| Some((o["metadata"]["name"].as_str()?, o)))
        .collect();
    let kind = skiff_kinds::builtin::by_kind("apiregistration.k8s.io", "APIService");
    for want in &desired {
        let name = want["metadata"]["name"].as_str().unwrap_or_default();
        match by_name.get(name) {
            None => {
                let mut object = want.clone();
                server.prepare_create(&*kind, &mut object);
                let object = with_condition(&object, &Condition::local(), &now()).unwrap_or(object);
                match server.registry.create(&INFO, object, None).await {
                    Ok(_) | Err(Error::AlreadyExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(have) if have["spec"]["service"].is_object() => {}
            Some(have) => {
                let stale = local_differs(have, want)
                    || api_service::available(have).map(|(s, r, _)| (s, r))
                        != Some(("True", "Local"));
                if stale {
                    let want = want.clone();
                    server
                        .registry
                        .update(&INFO, None, name, None, false, |mut current| {
                            current["spec"] = want["spec"].clone();
                            current["metadata"]["labels"][AUTOMANAGED_LABEL] =
                                want["metadata"]["labels"][AUTOMANAGED_LABEL].clone();
                            let current = with_condition(&current, &Condition::local(), &now())
                                .unwrap_or(current);
                            async move { Ok(Update::Write(current)) }
                        })
                        .await?;
                }
            }
        }
    }
    for have in &existing {
        let name = have["metadata"]["name"].as_str().unwrap_or_default();
        let managed = have["metadata"]["labels"][AUTOMANAGED_LABEL].is_string();
        let wanted = desired.iter().any(|d| d["metadata"]["name"] == name);
        if managed && !wanted && !have["spec"]["service"].is_object() {
            let revision = crate::registry::resource_version(have);
            // Another server may have changed or deleted it since the list: it decides then.
            if let Err(e) = server.registry.delete(&INFO, None, name, revision).await {
                tracing::debug!(apiservice = name, error = %e, "not deleting a local APIService");
            }
        }
    }
    Ok(())
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

/// One pass: the local APIServices, then every remote one checked (at once), its condition
/// written when it changed and its resource list kept for discovery.
pub async fn sync(server: &ApiServer) {
    if server.config.create_system_namespaces
        && let Err(e) = autoregister(server).await
    {
        tracing::warn!(error = %e, "cannot keep the local APIServices in step");
    }
    let remote: Vec<Registered> = server
        .aggregator
        .remote()
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    let checks = remote
        .iter()
        .map(|r| async move { (r, check(server, r).await) });
    for (registered, (condition, document)) in futures::future::join_all(checks).await {
        {
            let mut documents = server
                .aggregator
                .documents
                .write()
                .unwrap_or_else(|e| e.into_inner());
            match document.filter(|_| condition.is_true()) {
                Some(document) => {
                    documents.insert(registered.name.clone(), document);
                }
                None => {
                    documents.remove(&registered.name);
                }
            }
        }
        // A server that must write nothing of its own (`--paused`) only routes.
        if server.config.create_system_namespaces
            && registered.available.as_ref() != Some(&condition)
            && let Err(e) = write_condition(server, &registered.name, &condition).await
            && !matches!(e, Error::NotFound { .. })
        {
            tracing::warn!(apiservice = %registered.name, error = %e, "cannot write the Available condition");
        }
    }
}

/// The follower that keeps [`Aggregator`]'s APIServices current.
struct Follower;

impl crate::follow::Follower for Follower {
    async fn listed(&self, server: &Arc<ApiServer>, items: &[Value]) {
        let map: BTreeMap<String, Registered> = items
            .iter()
            .filter_map(Registered::from_object)
            .map(|r| (r.name.clone(), r))
            .collect();
        *server
            .aggregator
            .registered
            .write()
            .unwrap_or_else(|e| e.into_inner()) = map;
        server.aggregator.changed.notify_one();
    }

    async fn changed(&self, server: &Arc<ApiServer>, object: &Value, present: bool) {
        let before = Registered::from_object(object).and_then(|r| {
            server
                .aggregator
                .registered
                .read()
                .ok()?
                .get(&r.name)
                .cloned()
        });
        server.aggregator.set(object, present);
        let after = Registered::from_object(object).filter(|_| present);
        // A change of the condition alone (this loop's own write) needs no new pass.
        let spec_changed = match (&before, &after) {
            (Some(b), Some(a)) => {
                Registered {
                    available: None,
                    ..b.clone()
                } != Registered {
                    available: None,
                    ..a.clone()
                }
            }
            _ => true,
        };
        if spec_changed {
            server.aggregator.changed.notify_one();
        }
    }
}

/// Follows the APIServices, publishes the authentication ConfigMap, and runs the loop
/// ([`sync`] on every change and every [`RESYNC`]) until the server shuts down.
pub async fn start(server: &Arc<ApiServer>) -> Result<()> {
    // The local APIServices exist before the server answers (kubectl lists them at once).
    if server.config.create_system_namespaces {
        publish_authentication(server).await?;
        autoregister(server).await?;
    }
    crate::follow::start(server, &INFO, "the aggregator", Follower).await?;
    let weak = Arc::downgrade(server);
    let shutdown = server.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = run(weak) => {}
        }
    });
    Ok(())
}

/// The loop of [`start`].
async fn run(server: Weak<ApiServer>) {
    loop {
        let Some(api) = server.upgrade() else { return };
        sync(&api).await;
        let aggregator = api.aggregator.clone();
        drop(api);
        tokio::select! {
            _ = aggregator.changed.notified() => {}
            _ = tokio::time::sleep(RESYNC) => {}
        }
    }
}

/// The data of the `extension-apiserver-authentication` ConfigMap: how aggregated servers
/// authenticate client certificates and the front proxy's headers.
pub fn authentication_data(client_ca: Option<&str>, front_proxy: Option<&FrontProxy>) -> Value {
    let mut data = serde_json::Map::new();
    if let Some(ca) = client_ca {
        data.insert("client-ca-file".into(), json!(ca));
    }
    if let Some(fp) = front_proxy {
        let list = |v: &[&str]| json!(serde_json::to_string(v).expect("strings serialize"));
        data.insert("requestheader-client-ca-file".into(), json!(fp.ca_pem));
        data.insert(
            "requestheader-username-headers".into(),
            list(&[USER_HEADER]),
        );
        data.insert("requestheader-group-headers".into(), list(&[GROUP_HEADER]));
        data.insert(
            "requestheader-extra-headers-prefix".into(),
            list(&[EXTRA_PREFIX]),
        );
        data.insert(
            "requestheader-allowed-names".into(),
            list(&[FRONT_PROXY_CLIENT]),
        );
        data.insert("requestheader-uid-headers".into(), list(&["X-Remote-Uid"]));
    }
    Value::Object(data)
}

/// Writes the `extension-apiserver-authentication` ConfigMap in `kube-system` when it is
/// missing or says something else.
async fn publish_authentication(server: &ApiServer) -> Result<()> {
    let data = authentication_data(
        server.config.ca_pem.as_deref(),
        server.config.front_proxy.as_ref(),
    );
    let info = &skiff_kinds::builtin::config_map::INFO;
    let ns = Some("kube-system");
    match server
        .registry
        .get(info, ns, AUTHENTICATION_CONFIG_MAP, None)
        .await
    {
        Ok(existing) if existing["data"] == data => Ok(()),
        Ok(_) => {
            server
                .registry
                .update(
                    info,
                    ns,
                    AUTHENTICATION_CONFIG_MAP,
                    None,
                    false,
                    |mut current| {
                        current["data"] = data.clone();
                        async move { Ok(Update::Write(current)) }
                    },
                )
                .await?;
            Ok(())
        }
        Err(Error::NotFound { .. }) => {
            let kind = &skiff_kinds::builtin::config_map::ConfigMap;
            let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": AUTHENTICATION_CONFIG_MAP, "namespace": "kube-system"},
                "data": data});
            server.prepare_create(kind, &mut object);
            match server.registry.create(info, object, None).await {
                Ok(_) | Err(Error::AlreadyExists { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;

//! The ingress route table: from Ingresses, IngressClasses, Services, Endpoints and Secrets to
//! what a request for a host and a path goes to, and which certificate a TLS client naming a
//! host gets. Pure: no I/O, no clock; the server swaps a new table in after every change and
//! consults the current one per request.
//!
//! Matching, as the Ingress API defines it:
//! - hosts: an exact host first, then a `*.suffix` rule (which matches exactly one more label:
//!   `*.example.com` matches `a.example.com`, not `example.com` nor `a.b.example.com`), then
//!   the rules without a host; the first of these with a matching path decides;
//! - paths: `Exact` matches the path as is; `Prefix` (and `ImplementationSpecific`, treated as
//!   `Prefix`) matches by `/`-separated elements (`/foo` matches `/foo`, `/foo/` and `/foo/bar`,
//!   not `/foobar`; a trailing `/` in the rule is ignored); the longest rule wins, and an
//!   `Exact` rule beats a `Prefix` one of the same length;
//! - with no match, the default backend (`spec.defaultBackend` of the oldest Ingress that has
//!   one), else none (the server answers 404).
//!
//! Several Ingresses of the class merge into one table; when two give the same host, path and
//! type, the older Ingress wins (as ingress-nginx and Kubernetes' conformance tests expect).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Secret, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};

use crate::balancer::ServicePortName;
use crate::plan::{Protocol, affinity_of, ready_endpoints};

/// The annotation that marks the default IngressClass.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The deprecated annotation that names an Ingress's class.
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// An Ingress, by namespace, name and uid (for status writes and Events).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IngressRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

impl IngressRef {
    fn of(ingress: &Ingress) -> IngressRef {
        IngressRef {
            namespace: ingress.metadata.namespace.clone().unwrap_or_default(),
            name: ingress.metadata.name.clone().unwrap_or_default(),
            uid: ingress.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// Where a matched request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A Service port: the server picks one of its ready endpoints.
    Service(ServicePortName),
    /// A backend that cannot be served (its Service or port does not exist, a resource
    /// backend): the request gets 503 with this reason.
    Unavailable(String),
}

/// How a path rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// The whole path, as is.
    Exact,
    /// By path elements.
    Prefix,
}

#[derive(Clone, Debug)]
struct PathRule {
    /// `Exact`: as written; `Prefix`: without a trailing `/` (empty for `/`).
    path: String,
    kind: PathKind,
    backend: Backend,
}

impl PathRule {
    fn matches(&self, path: &str) -> bool {
        match self.kind {
            PathKind::Exact => path == self.path,
            PathKind::Prefix => {
                self.path.is_empty()
                    || (path.starts_with(&self.path)
                        && matches!(path.as_bytes().get(self.path.len()), None | Some(b'/')))
            }
        }
    }
}

/// A certificate and key (PEM) from a TLS Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsCert {
    /// `namespace/name` of the Secret.
    pub secret: String,
    /// `tls.crt`.
    pub cert_pem: Vec<u8>,
    /// `tls.key`.
    pub key_pem: Vec<u8>,
}

/// Something wrong with an Ingress that the controller reports as a Warning Event on it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Problem {
    /// The Ingress.
    pub ingress: IngressRef,
    /// The Event's reason.
    pub reason: &'static str,
    /// The Event's message.
    pub message: String,
}

/// The reason of a missing TLS Secret's Event.
pub const MISSING_TLS_SECRET: &str = "MissingTLSSecret";
/// The reason of a TLS Secret without a certificate and key.
pub const INVALID_TLS_SECRET: &str = "InvalidTLSSecret";
/// The reason of a backend that cannot be served.
pub const UNAVAILABLE_BACKEND: &str = "UnavailableBackend";

/// What requests go to, and which certificates are served.
#[derive(Clone, Debug, Default)]
pub struct RouteTable {
    exact: HashMap<String, Vec<PathRule>>,
    /// By the suffix after `*.`.
    wildcard: HashMap<String, Vec<PathRule>>,
    any: Vec<PathRule>,
    default_backend: Option<Backend>,
    certs: HashMap<String, Arc<TlsCert>>,
    wildcard_certs: HashMap<String, Arc<TlsCert>>,
    /// From a `tls` entry without hosts.
    fallback_cert: Option<Arc<TlsCert>>,
}

/// A request's host, as rules name hosts: lower case, without a port or a trailing dot.
pub fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let host = if let Some(rest) = host.strip_prefix('[') {
        // An IPv6 literal: no rule names it, but keep it whole.
        rest.split(']').next().unwrap_or(rest)
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(host, |(h, _)| h)
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl RouteTable {
    /// The backend for a request to `host` (a `Host` header or `:authority`, port allowed) and
    /// `path` (without the query); `None` when nothing matches and there is no default backend.
    pub fn route(&self, host: &str, path: &str) -> Option<&Backend> {
        let host = normalize_host(host);
        let path = if path.is_empty() { "/" } else { path };
        let wildcard = host
            .split_once('.')
            .and_then(|(_, suffix)| self.wildcard.get(suffix));
        [self.exact.get(&host), wildcard, Some(&self.any)]
            .into_iter()
            .flatten()
            .find_map(|rules| rules.iter().find(|r| r.matches(path)))
            .map(|r| &r.backend)
            .or(self.default_backend.as_ref())
    }

    /// The certificate for a TLS client that named `server_name` (SNI); `None` when no Ingress
    /// has one for it (the server then presents its default certificate).
    pub fn cert(&self, server_name: Option<&str>) -> Option<&Arc<TlsCert>> {
        let named = server_name.map(normalize_host).and_then(|host| {
            self.certs.get(&host).or_else(|| {
                host.split_once('.')
                    .and_then(|(_, suffix)| self.wildcard_certs.get(suffix))
            })
        });
        named.or(self.fallback_cert.as_ref())
    }

    /// Every distinct certificate of the table.
    pub fn certs(&self) -> impl Iterator<Item = &Arc<TlsCert>> {
        self.certs
            .values()
            .chain(self.wildcard_certs.values())
            .chain(self.fallback_cert.iter())
    }
}

/// The endpoints the table's Service backends need: per Service port, the ready endpoints and
/// the ClientIP affinity timeout (as the service proxy balances them).
pub type BackendEndpoints = BTreeMap<ServicePortName, (Vec<SocketAddr>, Option<Duration>)>;

/// Everything [`build`] found.
#[derive(Debug, Default)]
pub struct Built {
    /// The route table.
    pub table: RouteTable,
    /// The endpoints of the Service ports it routes to.
    pub endpoints: BackendEndpoints,
    /// The Ingresses of the class, oldest first.
    pub ingresses: Vec<IngressRef>,
    /// What is wrong with them.
    pub problems: Vec<Problem>,
}

/// The names of the IngressClasses whose controller is `controller`, and whether one of them is
/// marked default.
pub fn classes_of(controller: &str, classes: &[Arc<IngressClass>]) -> (BTreeSet<String>, bool) {
    let mut names = BTreeSet::new();
    let mut default = false;
    for class in classes {
        let spec = class.spec.as_ref();
        if spec.and_then(|s| s.controller.as_deref()) != Some(controller) {
            continue;
        }
        if let Some(name) = &class.metadata.name {
            names.insert(name.clone());
        }
        default |= class
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
            .is_some_and(|v| v == "true");
    }
    (names, default)
}

/// Whether an Ingress is one of `classes`': it names one of them (in `ingressClassName` or the
/// old annotation), or names none and one of them is the default.
pub fn is_ours(ingress: &Ingress, classes: &BTreeSet<String>, default: bool) -> bool {
    let named = ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
        .or_else(|| {
            ingress
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CLASS_ANNOTATION))
                .map(String::as_str)
        });
    match named {
        Some(name) => classes.contains(name),
        None => default,
    }
}

/// Builds the table of the Ingresses whose class's controller is `controller`.
pub fn build(
    controller: &str,
    ingresses: &[Arc<Ingress>],
    classes: &[Arc<IngressClass>],
    services: &[Arc<Service>],
    endpoints: &[Arc<Endpoints>],
    secrets: &[Arc<Secret>],
) -> Built {
    let (names, default) = classes_of(controller, classes);
    let mut ours: Vec<&Arc<Ingress>> = ingresses
        .iter()
        .filter(|i| is_ours(i, &names, default))
        .collect();
    // Oldest first, so that the older Ingress wins a conflict.
    ours.sort_by(|a, b| {
        let key = |i: &Ingress| {
            (
                i.metadata.creation_timestamp.as_ref().map(|t| t.0),
                i.metadata.namespace.clone(),
                i.metadata.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    let key = |namespace: Option<&String>, name: Option<&String>| {
        (
            namespace.cloned().unwrap_or_default(),
            name.cloned().unwrap_or_default(),
        )
    };
    let services: HashMap<(String, String), &Service> = services
        .iter()
        .map(|s| {
            (
                key(s.metadata.namespace.as_ref(), s.metadata.name.as_ref()),
                &**s,
            )
        })
        .collect();
    let endpoints: HashMap<(String, String), &Endpoints> = endpoints
        .iter()
        .map(|e| {
            (
                key(e.metadata.namespace.as_ref(), e.metadata.name.as_ref()),
                &**e,
            )
        })
        .collect();
    let secrets: HashMap<(String, String), &Secret> = secrets
        .iter()
        .map(|s| {
            (
                key(s.metadata.namespace.as_ref(), s.metadata.name.as_ref()),
                &**s,
            )
        })
        .collect();

    let mut built = Built::default();
    let mut seen_rules: BTreeSet<(String, String, bool)> = BTreeSet::new();
    for ingress in ours {
        let me = IngressRef::of(ingress);
        built.ingresses.push(me.clone());
        let Some(spec) = ingress.spec.as_ref() else {
            continue;
        };
        let namespace = me.namespace.as_str();
        let resolve = |backend: &IngressBackend, built: &mut Built| {
            let resolved = resolve_backend(namespace, backend, &services, &endpoints, built);
            if let Backend::Unavailable(why) = &resolved {
                built.problems.push(Problem {
                    ingress: me.clone(),
                    reason: UNAVAILABLE_BACKEND,
                    message: why.clone(),
                });
            }
            resolved
        };
        if let Some(backend) = &spec.default_backend {
            let resolved = resolve(backend, &mut built);
            built.table.default_backend.get_or_insert(resolved);
        }
        for rule in spec.rules.iter().flatten() {
            let host = rule.host.as_deref().unwrap_or("").to_ascii_lowercase();
            for path in rule.http.iter().flat_map(|h| h.paths.iter()) {
                let kind = if path.path_type == "Exact" {
                    PathKind::Exact
                } else {
                    PathKind::Prefix
                };
                let raw = path.path.as_deref().unwrap_or("/");
                let normalized = match kind {
                    PathKind::Exact => raw.to_string(),
                    PathKind::Prefix => raw.trim_end_matches('/').to_string(),
                };
                let exact = kind == PathKind::Exact;
                if !seen_rules.insert((host.clone(), normalized.clone(), exact)) {
                    continue;
                }
                let backend = resolve(&path.backend, &mut built);
                let rule = PathRule {
                    path: normalized,
                    kind,
                    backend,
                };
                let list = if host.is_empty() {
                    &mut built.table.any
                } else if let Some(suffix) = host.strip_prefix("*.") {
                    built.table.wildcard.entry(suffix.to_string()).or_default()
                } else {
                    built.table.exact.entry(host.clone()).or_default()
                };
                list.push(rule);
            }
        }
        for tls in spec.tls.iter().flatten() {
            let Some(secret_name) = tls.secret_name.as_deref().filter(|s| !s.is_empty()) else {
                continue;
            };
            let Some(secret) = secrets.get(&(namespace.to_string(), secret_name.to_string()))
            else {
                built.problems.push(Problem {
                    ingress: me.clone(),
                    reason: MISSING_TLS_SECRET,
                    message: format!(
                        "TLS secret {namespace}/{secret_name} not found; its hosts are served with the default certificate"
                    ),
                });
                continue;
            };
            let data = secret.data.as_ref();
            let field = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.clone());
            let (Some(cert_pem), Some(key_pem)) = (field("tls.crt"), field("tls.key")) else {
                built.problems.push(Problem {
                    ingress: me.clone(),
                    reason: INVALID_TLS_SECRET,
                    message: format!(
                        "TLS secret {namespace}/{secret_name} has no tls.crt and tls.key; its hosts are served with the default certificate"
                    ),
                });
                continue;
            };
            let cert = Arc::new(TlsCert {
                secret: format!("{namespace}/{secret_name}"),
                cert_pem,
                key_pem,
            });
            let hosts = tls.hosts.as_deref().unwrap_or_default();
            if hosts.is_empty() {
                built.table.fallback_cert.get_or_insert(cert.clone());
            }
            for host in hosts {
                let host = host.to_ascii_lowercase();
                let map = match host.strip_prefix("*.") {
                    Some(suffix) => built.table.wildcard_certs.entry(suffix.to_string()),
                    None => built.table.certs.entry(host),
                };
                map.or_insert_with(|| cert.clone());
            }
        }
    }
    let order = |rules: &mut Vec<PathRule>| {
        // Longest first; at equal length Exact first. Stable: older Ingresses stay first.
        rules.sort_by(|a, b| {
            b.path
                .len()
                .cmp(&a.path.len())
                .then_with(|| (a.kind == PathKind::Prefix).cmp(&(b.kind == PathKind::Prefix)))
        });
    };
    for rules in built
        .table
        .exact
        .values_mut()
        .chain(built.table.wildcard.values_mut())
    {
        order(rules);
    }
    order(&mut built.table.any);
    built
}

/// A backend as the table serves it; a Service port's endpoints go into `built.endpoints`.
fn resolve_backend(
    namespace: &str,
    backend: &IngressBackend,
    services: &HashMap<(String, String), &Service>,
    endpoints: &HashMap<(String, String), &Endpoints>,
    built: &mut Built,
) -> Backend {
    let Some(wanted) = &backend.service else {
        return Backend::Unavailable(
            "resource backends are not supported by skiff's ingress".into(),
        );
    };
    let key = (namespace.to_string(), wanted.name.clone());
    let Some(service) = services.get(&key) else {
        return Backend::Unavailable(format!("service {namespace}/{} not found", wanted.name));
    };
    let spec = service.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Backend::Unavailable(format!(
            "service {namespace}/{} is an ExternalName service",
            wanted.name
        ));
    }
    let port_wanted = wanted.port.clone().unwrap_or_default();
    let port = spec.ports.iter().flatten().find(|p| {
        Protocol::parse(p.protocol.as_deref()) == Some(Protocol::Tcp)
            && match (&port_wanted.name, port_wanted.number) {
                (Some(name), _) if !name.is_empty() => p.name.as_deref() == Some(name.as_str()),
                (_, Some(number)) => p.port == number,
                _ => false,
            }
    });
    let Some(port) = port else {
        let which = port_wanted
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| port_wanted.number.unwrap_or_default().to_string());
        return Backend::Unavailable(format!(
            "service {namespace}/{} has no TCP port {which}",
            wanted.name
        ));
    };
    let name = ServicePortName::new(
        namespace,
        wanted.name.clone(),
        port.name.clone().unwrap_or_default(),
    );
    let ready = endpoints
        .get(&key)
        .map(|e| ready_endpoints(e, port, Protocol::Tcp))
        .unwrap_or_default();
    built
        .endpoints
        .insert(name.clone(), (ready, affinity_of(service)));
    Backend::Service(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn arc<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn class(name: &str, controller: &str, default: bool) -> Arc<IngressClass> {
        let mut c = json!({"metadata": {"name": name}, "spec": {"controller": controller}});
        if default {
            c["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: "true"});
        }
        arc(c)
    }

    fn service(name: &str, ports: Value) -> Arc<Service> {
        arc(json!({"metadata": {"name": name, "namespace": "default"},
                   "spec": {"clusterIP": "127.96.0.5", "ports": ports}}))
    }

    fn endpoints(name: &str, ip: &str, port: u16, port_name: &str) -> Arc<Endpoints> {
        arc(json!({"metadata": {"name": name, "namespace": "default"},
                   "subsets": [{"addresses": [{"ip": ip}],
                                "notReadyAddresses": [{"ip": "127.0.0.99"}],
                                "ports": [{"name": port_name, "port": port}]}]}))
    }

    fn ingress(name: &str, created: &str, spec: Value) -> Arc<Ingress> {
        arc(
            json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                                "creationTimestamp": created}, "spec": spec}),
        )
    }

    fn path(p: &str, kind: &str, svc: &str) -> Value {
        json!({"path": p, "pathType": kind,
               "backend": {"service": {"name": svc, "port": {"number": 80}}}})
    }

    fn rule(host: &str, paths: Vec<Value>) -> Value {
        json!({"host": host, "http": {"paths": paths}})
    }

    fn svc(name: &str) -> Backend {
        Backend::Service(ServicePortName::new("default", name, "http"))
    }

    fn services() -> Vec<Arc<Service>> {
        ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|n| service(n, json!([{"name": "http", "port": 80, "targetPort": 8080}])))
            .collect()
    }

    fn table(ingresses: &[Arc<Ingress>]) -> Built {
        build(
            "skiff.io/ingress",
            ingresses,
            &[class("skiff", "skiff.io/ingress", true)],
            &services(),
            &[endpoints("a", "127.0.0.1", 8080, "http")],
            &[],
        )
    }

    #[test]
    fn prefix_matches_by_path_elements_and_exact_matches_whole_paths() {
        let built = table(&[ingress(
            "web",
            "2026-01-01T00:00:00Z",
            json!({"rules": [rule("a.example.com", vec![
                path("/foo", "Prefix", "a"),
                path("/bar/", "Prefix", "b"),
                path("/exact", "Exact", "c"),
                path("/", "ImplementationSpecific", "d"),
            ])]}),
        )]);
        let t = &built.table;
        let at = |p: &str| t.route("a.example.com", p).cloned();
        assert_eq!(at("/foo"), Some(svc("a")));
        assert_eq!(at("/foo/"), Some(svc("a")));
        assert_eq!(at("/foo/x/y"), Some(svc("a")));
        assert_eq!(at("/foobar"), Some(svc("d")), "not an element prefix");
        assert_eq!(
            at("/bar"),
            Some(svc("b")),
            "a trailing slash in the rule is ignored"
        );
        assert_eq!(at("/exact"), Some(svc("c")));
        assert_eq!(
            at("/exact/"),
            Some(svc("d")),
            "Exact does not match a longer path"
        );
        assert_eq!(at(""), Some(svc("d")));
    }

    #[test]
    fn the_longest_path_wins_and_exact_beats_prefix_at_equal_length() {
        let built = table(&[ingress(
            "web",
            "2026-01-01T00:00:00Z",
            json!({"rules": [rule("h.example.com", vec![
                path("/", "Prefix", "a"),
                path("/api", "Prefix", "b"),
                path("/api/v1", "Prefix", "c"),
                path("/api", "Exact", "e"),
            ])]}),
        )]);
        let at = |p: &str| built.table.route("h.example.com", p).cloned();
        assert_eq!(at("/api/v1/pods"), Some(svc("c")));
        assert_eq!(at("/api/v2"), Some(svc("b")));
        assert_eq!(at("/api"), Some(svc("e")));
        assert_eq!(at("/other"), Some(svc("a")));
    }

    #[test]
    fn hosts_exact_then_one_label_wildcard_then_any_then_the_default_backend() {
        let built = table(&[ingress(
            "web",
            "2026-01-01T00:00:00Z",
            json!({
            "defaultBackend": {"service": {"name": "f", "port": {"name": "http"}}},
            "rules": [
                rule("a.example.com", vec![path("/", "Prefix", "a")]),
                rule("*.example.com", vec![path("/", "Prefix", "b")]),
                rule("", vec![path("/shared", "Prefix", "c")]),
            ]}),
        )]);
        let t = &built.table;
        assert_eq!(t.route("A.Example.com:8080", "/").cloned(), Some(svc("a")));
        assert_eq!(t.route("x.example.com", "/").cloned(), Some(svc("b")));
        assert_eq!(
            t.route("x.y.example.com", "/").cloned(),
            Some(svc("f")),
            "one label only"
        );
        assert_eq!(t.route("example.com", "/").cloned(), Some(svc("f")));
        assert_eq!(t.route("other.org", "/shared/x").cloned(), Some(svc("c")));
        assert_eq!(t.route("other.org", "/").cloned(), Some(svc("f")));
        let without_default = table(&[ingress(
            "web",
            "2026-01-01T00:00:00Z",
            json!({"rules": [rule("a.example.com", vec![path("/", "Prefix", "a")])]}),
        )]);
        assert_eq!(without_default.table.route("b.example.com", "/"), None);
    }

    #[test]
    fn a_missing_service_or_port_is_unavailable_for_that_route_only() {
        let built = table(&[ingress(
            "web",
            "2026-01-01T00:00:00Z",
            json!({"rules": [rule("a.example.com", vec![
                path("/", "Prefix", "a"),
                path("/gone", "Prefix", "missing"),
                json!({"path": "/port", "pathType": "Prefix",
                       "backend": {"service": {"name": "b", "port": {"number": 81}}}}),
            ])]}),
        )]);
        let t = &built.table;
        assert_eq!(t.route("a.example.com", "/").cloned(), Some(svc("a")));
        assert_eq!(
            t.route("a.example.com", "/gone").cloned(),
            Some(Backend::Unavailable(
                "service default/missing not found".into()
            ))
        );
        assert_eq!(
            t.route("a.example.com", "/port").cloned(),
            Some(Backend::Unavailable(
                "service default/b has no TCP port 81".into()
            ))
        );
        let reasons: Vec<_> = built.problems.iter().map(|p| p.reason).collect();
        assert_eq!(reasons, [UNAVAILABLE_BACKEND, UNAVAILABLE_BACKEND]);
        // Ready endpoints only, with the endpoint port of the Service port's name.
        assert_eq!(
            built.endpoints[&ServicePortName::new("default", "a", "http")].0,
            vec![SocketAddr::from(([127, 0, 0, 1], 8080))]
        );
    }

    #[test]
    fn only_the_classes_of_the_controller_and_the_default_for_classless_ingresses() {
        let spec = |class: Option<&str>| {
            let mut s = json!({"rules": [rule("a.example.com", vec![path("/", "Prefix", "a")])]});
            if let Some(c) = class {
                s["ingressClassName"] = json!(c);
            }
            s
        };
        let classes = [
            class("skiff", "skiff.io/ingress", false),
            class("nginx", "k8s.io/ingress-nginx", true),
        ];
        let ingresses = [
            ingress("mine", "2026-01-01T00:00:00Z", spec(Some("skiff"))),
            ingress("theirs", "2026-01-01T00:00:00Z", spec(Some("nginx"))),
            ingress("classless", "2026-01-01T00:00:00Z", spec(None)),
        ];
        let built = build(
            "skiff.io/ingress",
            &ingresses,
            &classes,
            &services(),
            &[],
            &[],
        );
        let names: Vec<_> = built.ingresses.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["mine"],
            "the classless one belongs to the default (nginx)"
        );
        let classes = [class("skiff", "skiff.io/ingress", true)];
        let built = build(
            "skiff.io/ingress",
            &ingresses,
            &classes,
            &services(),
            &[],
            &[],
        );
        let names: Vec<_> = built.ingresses.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["classless", "mine"]);
    }

    #[test]
    fn the_older_ingress_wins_a_conflict() {
        let built = table(&[
            ingress(
                "new",
                "2026-02-01T00:00:00Z",
                json!({"rules": [rule("a.example.com", vec![path("/", "Prefix", "b")])]}),
            ),
            ingress(
                "old",
                "2026-01-01T00:00:00Z",
                json!({"rules": [rule("a.example.com", vec![path("/", "Prefix", "a")])]}),
            ),
        ]);
        assert_eq!(
            built.table.route("a.example.com", "/").cloned(),
            Some(svc("a"))
        );
    }

    #[test]
    fn certificates_by_sni_with_wildcards_and_missing_secrets_reported() {
        let secret = arc::<Secret>(json!({
            "metadata": {"name": "a-tls", "namespace": "default"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}}));
        let built = build(
            "skiff.io/ingress",
            &[ingress(
                "web",
                "2026-01-01T00:00:00Z",
                json!({"rules": [rule("a.example.com", vec![path("/", "Prefix", "a")])],
                       "tls": [{"hosts": ["a.example.com", "*.w.example.com"], "secretName": "a-tls"},
                               {"hosts": ["b.example.com"], "secretName": "gone"}]}),
            )],
            &[class("skiff", "skiff.io/ingress", true)],
            &services(),
            &[],
            &[secret],
        );
        let t = &built.table;
        assert_eq!(t.cert(Some("a.example.com")).unwrap().cert_pem, b"cert");
        assert_eq!(
            t.cert(Some("x.w.example.com")).unwrap().secret,
            "default/a-tls"
        );
        assert!(t.cert(Some("b.example.com")).is_none());
        assert!(t.cert(None).is_none());
        assert_eq!(
            built.problems,
            [Problem {
                ingress: IngressRef {
                    namespace: "default".into(),
                    name: "web".into(),
                    uid: "uid-web".into()
                },
                reason: MISSING_TLS_SECRET,
                message: "TLS secret default/gone not found; its hosts are served with the default certificate".into(),
            }]
        );
    }

    #[test]
    fn hosts_are_normalized() {
        assert_eq!(normalize_host("Example.COM:443"), "example.com");
        assert_eq!(normalize_host("example.com."), "example.com");
        assert_eq!(normalize_host("[::1]:80"), "::1");
        assert_eq!(normalize_host("a.b"), "a.b");
    }
}

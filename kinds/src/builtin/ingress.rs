//! `networking.k8s.io/v1` Ingress: HTTP(S) routes from hosts and paths to Service ports (or other
//! resources), with TLS Secrets per host and a default backend, served by the controller its
//! `ingressClassName` names. Validated as kube-apiserver validates it (a `pathType` on every
//! path, absolute paths for Exact and Prefix, a backend that is a Service or a resource and
//! never both, a Service port by name or by number and never both, DNS hosts that may start
//! with `*.`); its controller writes `status.loadBalancer` through the `status` subresource.

use k8s_openapi::api::networking::v1::{
    Ingress as Ing, IngressBackend, IngressLoadBalancerStatus, IngressSpec,
};

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `networking.k8s.io/v1` Ingress.
pub struct Ingress;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "networking.k8s.io",
    version: "v1",
    kind: "Ingress",
    plural: "ingresses",
    singular: "ingress",
    short_names: &["ing"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[status("networking.k8s.io", "v1", "Ingress")],
    categories: &[],
    selectable_fields: &[],
};

/// The path types Kubernetes knows.
pub const PATH_TYPES: &[&str] = &["Exact", "Prefix", "ImplementationSpecific"];

/// The deprecated annotation that named a class before `spec.ingressClassName`.
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// Sequences a path of type Exact or Prefix may not hold (they would be read differently by
/// different proxies).
const INVALID_PATH_SEQUENCES: &[&str] = &["//", "/./", "/../", "%2f", "%2F"];
const INVALID_PATH_SUFFIXES: &[&str] = &["/..", "/."];

/// Problems with `value` as a wildcard DNS subdomain (`*.example.com`).
pub fn wildcard_dns1123_subdomain(value: &str) -> Vec<String> {
    match value.strip_prefix("*.") {
        Some(rest) if names::dns1123_subdomain(rest).is_empty() => Vec::new(),
        _ => vec![
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS \
             subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and \
             end with an alphanumeric character (e.g. '*.example.com', regex used for validation \
             is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                .to_string(),
        ],
    }
}

/// A rule's or a TLS entry's host: a DNS subdomain, or one with a `*.` first label; never an
/// IP address.
fn validate_host(host: &str, path: Path, errs: &mut Vec<FieldError>) {
    if host.parse::<std::net::IpAddr>().is_ok() {
        errs.push(FieldError::invalid(
            path,
            host,
            "must be a DNS name, not an IP address",
        ));
        return;
    }
    let problems = if host.starts_with('*') {
        wildcard_dns1123_subdomain(host)
    } else {
        names::dns1123_subdomain(host)
    };
    for m in problems {
        errs.push(FieldError::invalid(path.clone(), host, m));
    }
}

/// A backend: a Service port or a typed reference to another resource, exactly one.
fn validate_backend(backend: &IngressBackend, path: &Path, errs: &mut Vec<FieldError>) {
    match (&backend.service, &backend.resource) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            path.clone(),
            "",
            "cannot set both resource and service backends",
        )),
        (None, None) => errs.push(FieldError::invalid(
            path.clone(),
            "",
            "must specify a resource or service",
        )),
        (None, Some(resource)) => {
            if resource.kind.is_empty() {
                errs.push(FieldError::required(
                    path.child("resource").child("kind"),
                    "",
                ));
            }
            if resource.name.is_empty() {
                errs.push(FieldError::required(
                    path.child("resource").child("name"),
                    "",
                ));
            }
        }
        (Some(service), None) => {
            let sp = path.child("service");
            if service.name.is_empty() {
                errs.push(FieldError::required(sp.child("name"), ""));
            } else {
                for m in names::dns1035_label(&service.name) {
                    errs.push(FieldError::invalid(
                        sp.child("name"),
                        service.name.as_str(),
                        m,
                    ));
                }
            }
            let pp = sp.child("port");
            let port = service.port.clone().unwrap_or_default();
            let name = port.name.as_deref().filter(|n| !n.is_empty());
            let number = port.number.filter(|n| *n != 0);
            match (name, number) {
                (Some(_), Some(_)) => errs.push(FieldError::invalid(
                    pp,
                    "",
                    "cannot set both port name & port number",
                )),
                (None, None) => {
                    errs.push(FieldError::required(pp, "port name or number is required"))
                }
                (Some(name), None) => {
                    for m in names::port_name(name) {
                        errs.push(FieldError::invalid(pp.child("name"), name, m));
                    }
                }
                (None, Some(number)) => {
                    for m in names::port_num(number.into()) {
                        errs.push(FieldError::invalid(pp.child("number"), number, m));
                    }
                }
            }
        }
    }
}

/// An HTTP path of a rule, by its type.
fn validate_path(path: Option<&str>, path_type: &str, at: &Path, errs: &mut Vec<FieldError>) {
    let value = path.unwrap_or("");
    match path_type {
        "Exact" | "Prefix" => {
            if !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    at.clone(),
                    value,
                    "must be an absolute path",
                ));
                return;
            }
            for seq in INVALID_PATH_SEQUENCES {
                if value.contains(seq) {
                    errs.push(FieldError::invalid(
                        at.clone(),
                        value,
                        format!("must not contain '{seq}'"),
                    ));
                }
            }
            for suffix in INVALID_PATH_SUFFIXES {
                if value.ends_with(suffix) {
                    errs.push(FieldError::invalid(
                        at.clone(),
                        value,
                        format!("cannot end with '{suffix}'"),
                    ));
                }
            }
        }
        _ => {
            if !value.is_empty() && !value.starts_with('/') {
                errs.push(FieldError::invalid(
                    at.clone(),
                    value,
                    "must be an absolute path",
                ));
            }
        }
    }
}

fn validate_spec(spec: &IngressSpec, errs: &mut Vec<FieldError>) {
    let path = Path::new("spec");
    let rules = spec.rules.as_deref().unwrap_or_default();
    if rules.is_empty() && spec.default_backend.is_none() {
        errs.push(FieldError::invalid(
            path.clone(),
            json!(rules.len()),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(backend) = &spec.default_backend {
        validate_backend(backend, &path.child("defaultBackend"), errs);
    }
    for (i, rule) in rules.iter().enumerate() {
        let rp = path.child("rules").index(i);
        if let Some(host) = rule.host.as_deref().filter(|h| !h.is_empty()) {
            validate_host(host, rp.child("host"), errs);
        }
        let Some(http) = &rule.http else {
            continue;
        };
        let hp = rp.child("http");
        if http.paths.is_empty() {
            errs.push(FieldError::required(hp.child("paths"), ""));
        }
        for (j, p) in http.paths.iter().enumerate() {
            let pp = hp.child("paths").index(j);
            match p.path_type.as_str() {
                "" => errs.push(FieldError::required(
                    pp.child("pathType"),
                    "pathType must be specified",
                )),
                t if PATH_TYPES.contains(&t) => {
                    validate_path(p.path.as_deref(), t, &pp.child("path"), errs)
                }
                other => errs.push(FieldError::not_supported(
                    pp.child("pathType"),
                    other,
                    PATH_TYPES,
                )),
            }
            validate_backend(&p.backend, &pp.child("backend"), errs);
        }
    }
    for (i, tls) in spec.tls.iter().flatten().enumerate() {
        let tp = path.child("tls").index(i);
        for (j, host) in tls.hosts.iter().flatten().enumerate() {
            validate_host(host, tp.child("hosts").index(j), errs);
        }
        if let Some(secret) = tls.secret_name.as_deref().filter(|s| !s.is_empty()) {
            for m in names::dns1123_subdomain(secret) {
                errs.push(FieldError::invalid(tp.child("secretName"), secret, m));
            }
        }
    }
    if let Some(class) = spec.ingress_class_name.as_deref() {
        for m in names::dns1123_subdomain(class) {
            errs.push(FieldError::invalid(
                path.child("ingressClassName"),
                class,
                m,
            ));
        }
    }
}

fn validate(new: &Value, old: Option<&Value>, meta: &ObjectMeta) -> Checked {
    let ing: Ing = decode(new, "")?;
    let mut errs = Vec::new();
    let spec = ing.spec.unwrap_or_default();
    validate_spec(&spec, &mut errs);
    // On create, the deprecated annotation and the field must not both name a class.
    if old.is_none()
        && spec.ingress_class_name.is_some()
        && let Some(annotation) = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLASS_ANNOTATION))
    {
        errs.push(FieldError::invalid(
            Path::new("annotations").key(CLASS_ANNOTATION),
            annotation.as_str(),
            "can not be set when the class field is also set",
        ));
    }
    Ok(errs)
}

/// `status.loadBalancer`: each entry an IP or a hostname that is not one, each port a port
/// number with a known protocol.
fn validate_status(new: &Value) -> Checked {
    let ing: Ing = decode(new, "")?;
    let mut errs = Vec::new();
    let lb: IngressLoadBalancerStatus =
        ing.status.and_then(|s| s.load_balancer).unwrap_or_default();
    let path = Path::new("status").child("loadBalancer").child("ingress");
    for (i, entry) in lb.ingress.iter().flatten().enumerate() {
        let p = path.index(i);
        if let Some(ip) = entry.ip.as_deref()
            && ip.parse::<std::net::IpAddr>().is_err()
        {
            errs.push(FieldError::invalid(
                p.child("ip"),
                ip,
                "must be a valid IP address",
            ));
        }
        if let Some(host) = entry.hostname.as_deref() {
            if host.parse::<std::net::IpAddr>().is_ok() {
                errs.push(FieldError::invalid(
                    p.child("hostname"),
                    host,
                    "must be a DNS name, not an IP address",
                ));
            } else {
                for m in names::dns1123_subdomain(host) {
                    errs.push(FieldError::invalid(p.child("hostname"), host, m));
                }
            }
        }
        for (j, port) in entry.ports.iter().flatten().enumerate() {
            for m in names::port_num(port.port.into()) {
                errs.push(FieldError::invalid(
                    p.child("ports").index(j).child("port"),
                    port.port,
                    m,
                ));
            }
        }
    }
    Ok(errs)
}

/// The hosts cell: the rules' hosts (at most three, then how many more), `*` when none names one.
fn hosts_cell(spec: Option<&IngressSpec>) -> String {
    let hosts: Vec<&str> = spec
        .and_then(|s| s.rules.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r.host.as_deref())
        .filter(|h| !h.is_empty())
        .collect();
    match hosts.len() {
        0 => "*".to_string(),
        n if n > 3 => format!("{} + {} more...", hosts[..3].join(","), n - 3),
        _ => hosts.join(","),
    }
}

/// The address cell: the load balancer's IPs and hostnames.
fn address_cell(lb: Option<&IngressLoadBalancerStatus>) -> String {
    lb.and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.ip.as_deref().or(e.hostname.as_deref()))
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

impl Kind for Ingress {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Ing>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Ing>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Class",
                "string",
                "The name of the IngressClass resource that should be used for ingress.",
            ),
            col(
                "Hosts",
                "string",
                "Hosts that incoming requests are matched against before the ingress rule",
            ),
            col(
                "Address",
                "string",
                "Address is a list containing ingress points for the load-balancer",
            ),
            col("Ports", "string", "Ports of TLS configurations that open"),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let ing: Ing = table::typed(object)?;
        let spec = ing.spec.as_ref();
        let class = spec
            .and_then(|s| s.ingress_class_name.as_deref())
            .unwrap_or("<none>");
        let ports = if spec
            .and_then(|s| s.tls.as_ref())
            .is_some_and(|t| !t.is_empty())
        {
            "80, 443"
        } else {
            "80"
        };
        let lb = ing.status.as_ref().and_then(|s| s.load_balancer.as_ref());
        Some(vec![
            json!(ing.metadata.name.as_deref().unwrap_or_default()),
            json!(class),
            json!(hosts_cell(spec)),
            json!(address_cell(lb)),
            json!(ports),
            table::age_of(object, now),
        ])
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, meta: &ObjectMeta) -> Checked {
        validate(new, old, meta)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        validate_status(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    fn ing(spec: Value) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
               "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn rule(host: &str, path: Value) -> Value {
        json!({"host": host, "http": {"paths": [path]}})
    }

    fn service(name: &str, port: Value) -> Value {
        json!({"service": {"name": name, "port": port}})
    }

    fn msgs(spec: Value) -> Vec<String> {
        create_msgs("networking.k8s.io", "Ingress", ing(spec))
    }

    #[test]
    fn a_well_formed_ingress_passes() {
        let spec = json!({
            "ingressClassName": "skiff",
            "rules": [
                rule("a.example.com", json!({"path": "/", "pathType": "Prefix",
                      "backend": service("a", json!({"number": 80}))})),
                rule("*.example.com", json!({"path": "/x", "pathType": "Exact",
                      "backend": service("b", json!({"name": "http"}))})),
                rule("", json!({"pathType": "ImplementationSpecific",
                      "backend": {"resource": {"apiGroup": "k8s.example.com", "kind": "Bucket", "name": "b"}}})),
            ],
            "tls": [{"hosts": ["a.example.com", "*.example.com"], "secretName": "a-tls"}],
        });
        assert_eq!(msgs(spec), Vec::<String>::new());
    }

    #[test]
    fn path_types_are_required_and_exact_and_prefix_paths_absolute() {
        let backend = service("a", json!({"number": 80}));
        assert_eq!(
            msgs(
                json!({"rules": [rule("a.example.com", json!({"path": "/", "backend": backend}))]})
            ),
            ["spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"]
        );
        assert_eq!(
            msgs(json!({"rules": [rule("a.example.com",
                json!({"path": "api", "pathType": "Prefix", "backend": backend}))]})),
            ["spec.rules[0].http.paths[0].path: Invalid value: \"api\": must be an absolute path"]
        );
        assert_eq!(
            msgs(json!({"rules": [rule("a.example.com",
                json!({"path": "/a//b", "pathType": "Exact", "backend": backend}))]})),
            ["spec.rules[0].http.paths[0].path: Invalid value: \"/a//b\": must not contain '//'"]
        );
        assert_eq!(
            msgs(json!({"rules": [rule("a.example.com",
                json!({"path": "/", "pathType": "Regex", "backend": backend}))]})),
            [
                "spec.rules[0].http.paths[0].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"Prefix\", \"ImplementationSpecific\""
            ]
        );
    }

    #[test]
    fn a_backend_is_a_service_or_a_resource_and_a_port_a_name_or_a_number() {
        let both = json!({"service": {"name": "a", "port": {"number": 80}},
                          "resource": {"kind": "Bucket", "name": "b"}});
        assert_eq!(
            msgs(json!({"defaultBackend": both})),
            [
                "spec.defaultBackend: Invalid value: \"\": cannot set both resource and service backends"
            ]
        );
        assert_eq!(
            msgs(json!({"defaultBackend": {}})),
            ["spec.defaultBackend: Invalid value: \"\": must specify a resource or service"]
        );
        assert_eq!(
            msgs(json!({"defaultBackend": service("a", json!({"name": "http", "number": 80}))})),
            [
                "spec.defaultBackend.service.port: Invalid value: \"\": cannot set both port name & port number"
            ]
        );
        assert_eq!(
            msgs(json!({"defaultBackend": service("a", json!({}))})),
            ["spec.defaultBackend.service.port: Required value: port name or number is required"]
        );
        assert_eq!(
            msgs(json!({"defaultBackend": service("a", json!({"number": 70000}))})),
            [
                "spec.defaultBackend.service.port.number: Invalid value: 70000: must be between 1 and 65535, inclusive"
            ]
        );
        assert_eq!(
            msgs(json!({})),
            ["spec: Invalid value: 0: either `defaultBackend` or `rules` must be specified"]
        );
    }

    #[test]
    fn hosts_are_dns_names_with_an_optional_wildcard_label() {
        let backend = service("a", json!({"number": 80}));
        let path = json!({"path": "/", "pathType": "Prefix", "backend": backend});
        assert_eq!(
            msgs(json!({"rules": [rule("10.0.0.1", path.clone())]})),
            [
                "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address"
            ]
        );
        let bad = msgs(json!({"rules": [rule("a.*.example.com", path.clone())]}));
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(
            bad[0].starts_with("spec.rules[0].host: Invalid value"),
            "{bad:?}"
        );
        let bad = msgs(json!({"rules": [rule("a.example.com", path)],
                              "tls": [{"hosts": ["*"], "secretName": "s"}]}));
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(
            bad[0].starts_with("spec.tls[0].hosts[0]: Invalid value: \"*\": a wildcard"),
            "{bad:?}"
        );
    }

    #[test]
    fn the_class_field_and_the_old_annotation_exclude_each_other_on_create() {
        let mut object = ing(json!({"ingressClassName": "skiff",
                                    "defaultBackend": service("a", json!({"number": 80}))}));
        object["metadata"]["annotations"] = json!({CLASS_ANNOTATION: "nginx"});
        assert_eq!(
            create_msgs("networking.k8s.io", "Ingress", object),
            [
                "annotations[kubernetes.io/ingress.class]: Invalid value: \"nginx\": can not be set when the class field is also set"
            ]
        );
    }

    #[test]
    fn status_addresses_are_checked() {
        let mut object = ing(json!({"defaultBackend": service("a", json!({"number": 80}))}));
        object["status"] = json!({"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}, {"ip": "nope"},
                                                               {"hostname": "10.1.1.1"}]}});
        let msgs: Vec<String> = Ingress
            .validate_status(&object, &object)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            msgs,
            [
                "status.loadBalancer.ingress[1].ip: Invalid value: \"nope\": must be a valid IP address",
                "status.loadBalancer.ingress[2].hostname: Invalid value: \"10.1.1.1\": must be a DNS name, not an IP address",
            ]
        );
    }

    #[test]
    fn table_row_as_kubectl_prints_it() {
        let mut object = ing(json!({
            "ingressClassName": "skiff",
            "rules": [rule("a.example.com", json!({"path": "/", "pathType": "Prefix",
                            "backend": service("a", json!({"number": 80}))})),
                      rule("b.example.com", json!({"path": "/", "pathType": "Prefix",
                            "backend": service("b", json!({"number": 80}))}))],
            "tls": [{"hosts": ["a.example.com"], "secretName": "a-tls"}],
        }));
        object["status"] = json!({"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}});
        let names: Vec<_> = Ingress.columns().iter().map(|c| c.name).collect();
        assert_eq!(names, ["Name", "Class", "Hosts", "Address", "Ports", "Age"]);
        let cells = Ingress.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(
            cells[..5],
            [
                json!("web"),
                json!("skiff"),
                json!("a.example.com,b.example.com"),
                json!("127.0.0.1"),
                json!("80, 443")
            ]
        );
        let bare = ing(json!({"defaultBackend": service("a", json!({"number": 80}))}));
        let cells = Ingress.cells(&bare, Timestamp::now()).unwrap();
        assert_eq!(
            cells[1..5],
            [json!("<none>"), json!("*"), json!(""), json!("80")]
        );
    }
}

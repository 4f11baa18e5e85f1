//! The pure parts without I/O, then an API server in process proxying to an HTTPS backend on
//! loopback (its certificate for `api.sys.svc` from a test CA, which also signs the front
//! proxy's client certificate, so that the backend can check it).

use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ServicePort, ServiceSpec,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use warp::Filter;

use super::*;
use crate::backends::{Backend as Leads, from_endpoints};
use crate::tls::testing::{TempDir, call};

fn registered(object: Value) -> Registered {
    Registered::from_object(&object).unwrap()
}

fn remote_object(name: &str, group: &str, version: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"group": group, "version": version,
        "groupPriorityMinimum": 100, "versionPriority": 10,
        "service": {"namespace": "sys", "name": "api"}, "caBundle": "Y2E="}})
}

#[test]
fn a_path_is_served_by_the_remote_apiservice_of_its_group_version() {
    let mut map = BTreeMap::new();
    for object in [
        remote_object("v1.example.com", "example.com", "v1"),
        json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"}}),
    ] {
        let r = registered(object);
        map.insert(r.name.clone(), r);
    }
    let name = |path: &str| serving(&map, path).map(|r| r.name.as_str());
    assert_eq!(name("/apis/example.com/v1"), Some("v1.example.com"));
    assert_eq!(
        name("/apis/example.com/v1/namespaces/default/widgets/w"),
        Some("v1.example.com")
    );
    // Local APIServices, other versions, the group itself and the core group are skiff's.
    assert_eq!(name("/apis/apps/v1/deployments"), None);
    assert_eq!(name("/apis/example.com/v2/widgets"), None);
    assert_eq!(name("/apis/example.com"), None);
    assert_eq!(name("/api/v1/pods"), None);
    let r = &map["v1.example.com"];
    assert_eq!(r.ca_bundle, b"ca");
    assert_eq!(r.service.as_ref().unwrap().port, 443);
    assert_eq!(r.service.as_ref().unwrap().host(), "api.sys.svc");
}

#[test]
fn attributes_are_read_from_the_path_as_request_info_does() {
    let query = |q: &str| Query::parse(q);
    let resource =
        |verb: &str, ns: &str, resource: &str, sub: &str, name: &str| Attributes::Resource {
            verb: verb.into(),
            namespace: ns.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
        };
    let at = |method: Method, path: &str, q: &str| attributes(&method, path, &query(q));
    assert_eq!(
        at(Method::GET, "/apis/metrics.k8s.io/v1beta1", ""),
        Attributes::NonResource { verb: "get".into() }
    );
    assert_eq!(
        at(Method::GET, "/apis/metrics.k8s.io/v1beta1/nodes", ""),
        resource("list", "", "nodes", "", "")
    );
    assert_eq!(
        at(
            Method::GET,
            "/apis/metrics.k8s.io/v1beta1/namespaces/ns/pods/p",
            ""
        ),
        resource("get", "ns", "pods", "", "p")
    );
    assert_eq!(
        at(
            Method::GET,
            "/apis/g/v1/namespaces/ns/widgets",
            "watch=true"
        ),
        resource("watch", "ns", "widgets", "", "")
    );
    assert_eq!(
        at(Method::GET, "/apis/g/v1/watch/widgets", ""),
        resource("watch", "", "widgets", "", "")
    );
    assert_eq!(
        at(Method::PUT, "/apis/g/v1/namespaces/ns/widgets/w/status", ""),
        resource("update", "ns", "widgets", "status", "w")
    );
    assert_eq!(
        at(Method::DELETE, "/apis/g/v1/namespaces/ns/widgets", ""),
        resource("deletecollection", "ns", "widgets", "", "")
    );
    assert_eq!(
        at(Method::GET, "/apis/g/v1/namespaces/ns", ""),
        resource("get", "ns", "namespaces", "", "ns")
    );
    assert_eq!(
        at(Method::POST, "/apis/g/v1/widgets", ""),
        resource("create", "", "widgets", "", "")
    );
}

#[test]
fn the_backend_hears_the_user_from_the_front_proxy_alone() {
    let user = User {
        name: "alice".into(),
        uid: "u".into(),
        groups: vec!["devs".into(), "system:authenticated".into()],
        extra: BTreeMap::from([(
            "scopes.example.com/a b".to_string(),
            vec!["x".into(), "y".into()],
        )]),
    };
    let mut client = HeaderMap::new();
    client.insert("authorization", HeaderValue::from_static("Bearer secret"));
    client.insert("impersonate-user", HeaderValue::from_static("bob"));
    client.insert("x-remote-user", HeaderValue::from_static("mallory"));
    client.insert("x-remote-group", HeaderValue::from_static("system:masters"));
    client.insert("accept", HeaderValue::from_static("application/json"));
    let headers = backend_headers(&client, &user, false);
    let all = |name: &str| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    };
    assert_eq!(all("x-remote-user"), ["alice"]);
    assert_eq!(all("x-remote-group"), ["devs", "system:authenticated"]);
    assert_eq!(all("x-remote-extra-scopes.example.com%2Fa%20b"), ["x", "y"]);
    assert!(headers.get("authorization").is_none());
    assert!(headers.get("impersonate-user").is_none());
    assert_eq!(all("accept"), ["application/json"]);
}

fn service(ports: &[(Option<&str>, i32)]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("api".into()),
            namespace: Some("sys".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(
                ports
                    .iter()
                    .map(|(name, port)| ServicePort {
                        name: name.map(String::from),
                        port: *port,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn endpoints(ip: Option<&str>, port_name: Option<&str>, port: i32) -> Endpoints {
    Endpoints {
        metadata: ObjectMeta {
            name: Some("api".into()),
            namespace: Some("sys".into()),
            ..Default::default()
        },
        subsets: Some(vec![EndpointSubset {
            addresses: ip.map(|ip| {
                vec![EndpointAddress {
                    ip: ip.into(),
                    ..Default::default()
                }]
            }),
            ports: Some(vec![EndpointPort {
                name: port_name.map(String::from),
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }]),
    }
}

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

#[test]
fn availability_says_what_is_missing_as_kube_aggregator_does() {
    let reference = ServiceRef {
        namespace: "sys".into(),
        name: "api".into(),
        port: 443,
    };
    fn located(
        reference: &ServiceRef,
        s: Option<&Service>,
        e: Option<&Endpoints>,
    ) -> std::result::Result<SocketAddr, Condition> {
        let port_name = match super::backend(reference, s)? {
            Leads::Port(name) => name,
            Leads::External(host) => return Err(Condition::unavailable("External", host)),
        };
        let published = Published {
            exists: e.is_some(),
            ready: e.map(|e| from_endpoints(e, &port_name)).unwrap_or_default(),
        };
        endpoint(reference, &port_name, &published)
    }
    let reason = |s: Option<&Service>, e: Option<&Endpoints>| {
        located(&reference, s, e).map_err(|c| (c.status, c.reason, c.message))
    };
    assert_eq!(
        reason(None, None),
        Err((
            "False",
            "ServiceNotFound".into(),
            "service/api in \"sys\" is not present".into()
        ))
    );
    let svc = service(&[(Some("https"), 443)]);
    assert_eq!(
        reason(Some(&service(&[(None, 80)])), None).unwrap_err().1,
        "ServicePortError"
    );
    assert_eq!(reason(Some(&svc), None).unwrap_err().1, "EndpointsNotFound");
    assert_eq!(
        reason(Some(&svc), Some(&endpoints(None, Some("https"), 8443))),
        Err((
            "False",
            "MissingEndpoints".into(),
            "endpoints for service/api in \"sys\" have no addresses with port name \"https\""
                .into()
        ))
    );
    assert_eq!(
        reason(
            Some(&svc),
            Some(&endpoints(Some("127.0.0.1"), Some("other"), 8443))
        )
        .unwrap_err()
        .1,
        "MissingEndpoints"
    );
    assert_eq!(
        reason(
            Some(&svc),
            Some(&endpoints(Some("127.0.0.1"), Some("https"), 8443))
        ),
        Ok("127.0.0.1:8443".parse().unwrap())
    );
    // An ExternalName Service needs no port or endpoints: its name is dialled.
    let mut external = service(&[]);
    external.spec = Some(ServiceSpec {
        type_: Some("ExternalName".into()),
        external_name: Some("api.example.com".into()),
        ..Default::default()
    });
    assert_eq!(
        super::backend(&reference, Some(&external)),
        Ok(Leads::External("api.example.com".into()))
    );
    let url = "https://api.sys.svc:8443/apis/g/v1";
    assert_eq!(discovery_condition(url, Ok(200)), Condition::passed());
    let failed = discovery_condition(url, Ok(403));
    assert_eq!(
        (failed.status, failed.reason.as_str()),
        ("False", "FailedDiscoveryCheck")
    );
    assert!(
        failed.message.contains("bad status from"),
        "{}",
        failed.message
    );
    let failed = discovery_condition(url, Err("connection refused".into()));
    assert_eq!(
        failed.message,
        "failing or missing response from https://api.sys.svc:8443/apis/g/v1: connection refused"
    );
}

#[test]
fn the_condition_is_written_only_when_it_changes() {
    let object = remote_object("v1.example.com", "example.com", "v1");
    let first = with_condition(&object, &Condition::passed(), "2026-01-01T00:00:00Z").unwrap();
    assert_eq!(
        api_service::available(&first),
        Some(("True", "Passed", "all checks passed"))
    );
    // The same again: nothing to write.
    assert_eq!(
        with_condition(&first, &Condition::passed(), "2026-01-02T00:00:00Z"),
        None
    );
    // A new message with the same status keeps the transition time; a new status moves it.
    let other = Condition {
        message: "still fine".into(),
        ..Condition::passed()
    };
    let second = with_condition(&first, &other, "2026-01-02T00:00:00Z").unwrap();
    assert_eq!(
        second["status"]["conditions"][0]["lastTransitionTime"],
        "2026-01-01T00:00:00Z"
    );
    let down = discovery_condition("u", Err("refused".into()));
    let third = with_condition(&second, &down, "2026-01-03T00:00:00Z").unwrap();
    let conditions = third["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0]["lastTransitionTime"], "2026-01-03T00:00:00Z");
    assert_eq!(conditions[0]["status"], "False");
}

#[test]
fn local_apiservices_name_every_served_group_version() {
    let groups = vec![
        ("", vec!["v1"]),
        ("apps", vec!["v1"]),
        ("example.com", vec!["v2", "v1"]),
    ];
    let local = local_api_services(&groups, |g| g != "example.com");
    let names: Vec<&str> = local
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["v1", "v1.apps", "v2.example.com", "v1.example.com"]);
    for object in &local {
        assert!(object["spec"].get("service").is_none());
        assert_eq!(
            skiff_kinds::validation::validate_create(
                &*skiff_kinds::builtin::by_kind("apiregistration.k8s.io", "APIService"),
                object,
                None
            )
            .len(),
            0,
            "{object}"
        );
    }
    assert_eq!(local[0]["metadata"]["labels"][AUTOMANAGED_LABEL], "onstart");
    assert_eq!(local[2]["metadata"]["labels"][AUTOMANAGED_LABEL], "true");
    // The first version listed is preferred.
    assert!(
        local[2]["spec"]["versionPriority"].as_i64() > local[3]["spec"]["versionPriority"].as_i64()
    );
}

#[test]
fn discovery_gains_remote_group_versions_and_marks_unavailable_ones_stale() {
    let list = json!({"kind": "APIResourceList", "groupVersion": "example.com/v1", "resources": [
        {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget",
         "verbs": ["get", "list"], "shortNames": ["wd"]},
        {"name": "widgets/status", "singularName": "", "namespaced": true, "kind": "Widget",
         "verbs": ["get"]}]});
    let up = registered(remote_object("v1.example.com", "example.com", "v1"));
    let mut down = registered(remote_object("v1.broken.example", "broken.example", "v1"));
    down.available = Some(discovery_condition("u", Err("refused".into())));
    let remote = vec![(up.clone(), Some(list.clone())), (down, None)];

    let mut legacy = json!({"kind": "APIGroupList", "groups": [{"name": "apps",
        "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]});
    merge_legacy(&mut legacy, &remote);
    let names: Vec<&str> = legacy["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    // An unavailable group is still listed (as kube-aggregator lists it).
    assert_eq!(names, ["apps", "broken.example", "example.com"]);

    let mut aggregated = json!({"kind": "APIGroupDiscoveryList", "items": [
        {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "resources": [], "freshness": "Current"}]}]});
    merge_aggregated(&mut aggregated, &remote);
    let items = aggregated["items"].as_array().unwrap();
    let group = |name: &str| {
        items
            .iter()
            .find(|g| g["metadata"]["name"] == name)
            .unwrap()
    };
    let example = &group("example.com")["versions"][0];
    assert_eq!(example["freshness"], "Current");
    assert_eq!(example["resources"][0]["resource"], "widgets");
    assert_eq!(example["resources"][0]["scope"], "Namespaced");
    assert_eq!(example["resources"][0]["shortNames"], json!(["wd"]));
    assert_eq!(
        example["resources"][0]["subresources"][0]["subresource"],
        "status"
    );
    assert_eq!(example["resources"].as_array().unwrap().len(), 1);
    let broken = &group("broken.example")["versions"][0];
    assert_eq!(broken["freshness"], "Stale");
    assert_eq!(group("apps")["versions"][0]["freshness"], "Current");

    // A remote version replaces a local one of the same group-version (precedence).
    let mut metrics = json!({"items": [{"metadata": {"name": "metrics.k8s.io"}, "versions": [
        {"version": "v1beta1", "resources": [{"resource": "nodes"}], "freshness": "Current"}]}]});
    let mut taken = up.clone();
    taken.group = "metrics.k8s.io".into();
    taken.version = "v1beta1".into();
    merge_aggregated(&mut metrics, &[(taken, Some(list))]);
    let versions = metrics["items"][0]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["resources"][0]["resource"], "widgets");
}

#[test]
fn the_authentication_config_map_says_what_kube_apiserver_says() {
    let fp = FrontProxy {
        ca_pem: "FP".into(),
        client_cert_pem: String::new(),
        client_key_pem: String::new(),
    };
    let data = authentication_data(Some("CA"), Some(&fp));
    assert_eq!(data["client-ca-file"], "CA");
    assert_eq!(data["requestheader-client-ca-file"], "FP");
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(data["requestheader-group-headers"], "[\"X-Remote-Group\"]");
    assert_eq!(
        data["requestheader-extra-headers-prefix"],
        "[\"X-Remote-Extra-\"]"
    );
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
}

// ---- Through the API server, to a backend on loopback. ----

/// The backend: its address, CA and the way to stop it.
struct Backend {
    port: u16,
    ca_pem: String,
    stop: CancellationToken,
}

/// Starts an HTTPS backend serving `example.com/v1` (and `metrics.k8s.io/v1beta1`) whose
/// answers echo who the front proxy said the user is and which client certificate it showed.
async fn backend(pki: &crate::tls::Pki) -> Backend {
    let discovery = |group: &str, version: &str| {
        json!({"kind": "APIResourceList", "apiVersion": "v1",
               "groupVersion": format!("{group}/{version}"),
               "resources": [{"name": "widgets", "singularName": "widget", "namespaced": true,
                              "kind": "Widget", "verbs": ["get", "list"]}]})
    };
    let filter = warp::get()
        .and(warp::path::full())
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<crate::tls::ClientCertificate>())
        .map(
            move |path: warp::path::FullPath,
                  headers: HeaderMap,
                  cert: Option<crate::tls::ClientCertificate>| {
                let all = |name: &str| -> Vec<String> {
                    headers
                        .get_all(name)
                        .iter()
                        .map(|v| v.to_str().unwrap().to_string())
                        .collect()
                };
                let path = path.as_str();
                let body = match path {
                    "/apis/example.com/v1" => discovery("example.com", "v1"),
                    "/apis/metrics.k8s.io/v1beta1" => discovery("metrics.k8s.io", "v1beta1"),
                    _ => json!({"kind": "Echo", "path": path,
                    "user": all("x-remote-user"), "groups": all("x-remote-group"),
                    "authorization": all("authorization"),
                    "client": match cert {
                        Some(crate::tls::ClientCertificate::Verified(s)) => s.common_name,
                        other => format!("{other:?}"),
                    }}),
                };
                warp::reply::json(&body)
            },
        );
    // A WebSocket that echoes, for requests that switch protocols.
    let console = warp::path!("apis" / "example.com" / "v1" / "widgets" / "console")
        .and(warp::ws())
        .map(|ws: warp::ws::Ws| {
            ws.on_upgrade(|socket| async move {
                use futures::{SinkExt as _, StreamExt as _};
                let (mut tx, mut rx) = socket.split();
                while let Some(Ok(message)) = rx.next().await {
                    if message.is_text() && tx.send(message).await.is_err() {
                        return;
                    }
                }
            })
        });
    let filter = console
        .map(warp::Reply::into_response)
        .or(filter.map(warp::Reply::into_response))
        .unify();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    tokio::spawn(crate::tls::serve(
        listener,
        pki.server_config().unwrap(),
        filter,
        stop.clone(),
        Duration::from_secs(30),
        None,
    ));
    Backend {
        port,
        ca_pem: pki.ca_pem().to_string(),
        stop,
    }
}

/// An API server whose front proxy's certificate comes from `pki`'s CA, called as the admin.
struct Harness {
    api: Arc<ApiServer>,
    routes: warp::filters::BoxedFilter<(Response,)>,
    admin: String,
    _store: Arc<dyn skiff_store::Store>,
    _dir: TempDir,
}

impl Harness {
    async fn new(pki: &crate::tls::Pki) -> Harness {
        let dir = TempDir::new("aggregation");
        let store =
            skiff_store::SledStore::open(skiff_store::Config::new(dir.0.join("db"))).unwrap();
        let store: Arc<dyn skiff_store::Store> = Arc::new(store);
        let client = pki
            .authority()
            .issue_client(
                &skiff_pki::Subject::new(FRONT_PROXY_CLIENT, &[]),
                Duration::from_secs(3600),
            )
            .unwrap();
        let config = crate::server::Config {
            ca_pem: Some("cluster CA".into()),
            front_proxy: Some(FrontProxy {
                ca_pem: pki.ca_pem().to_string(),
                client_cert_pem: client.cert_pem,
                client_key_pem: client.key_pem,
            }),
            ..crate::server::Config::default()
        };
        let api = ApiServer::new(store.clone(), config, CancellationToken::new())
            .await
            .unwrap();
        let authenticator = Arc::new(
            crate::auth::Authenticator::load_or_create(&dir.0.join("tokens.csv")).unwrap(),
        );
        let admin = authenticator.admin_token().unwrap();
        Harness {
            routes: crate::routes(api.clone(), authenticator),
            api,
            admin,
            _store: store,
            _dir: dir,
        }
    }

    async fn send(
        &self,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Value) {
        let mut request = http::Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {}", self.admin))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = call(self.routes.clone(), request.body(body.to_string()).unwrap()).await;
        let status = response.status().as_u16();
        let body = serde_json::from_slice(response.body()).unwrap_or(Value::Null);
        (status, body)
    }

    async fn get(&self, uri: &str) -> (u16, Value) {
        self.send("GET", uri, &[], "").await
    }

    async fn create(&self, uri: &str, object: Value) {
        let (code, body) = self.send("POST", uri, &[], &object.to_string()).await;
        assert!(code == 201 || code == 200, "{uri}: {code} {body}");
    }

    /// A selector-less Service `sys/api` on port 443 whose endpoint is `port` on loopback.
    async fn service(&self, port: u16) {
        self.create("/api/v1/namespaces", json!({"metadata": {"name": "sys"}}))
            .await;
        self.create(
            "/api/v1/namespaces/sys/services",
            json!({"metadata": {"name": "api"}, "spec": {"ports": [{"port": 443, "name": "https"}]}}),
        )
        .await;
        self.create(
            "/api/v1/namespaces/sys/endpoints",
            json!({"metadata": {"name": "api"}, "subsets": [{
                "addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "https", "port": port}]}]}),
        )
        .await;
    }

    /// Waits until what the aggregator has seen of APIService `name` passes `check`.
    async fn until(&self, name: &str, check: impl Fn(Option<&Registered>) -> bool) {
        for _ in 0..250 {
            let seen = self
                .api
                .aggregator
                .registered
                .read()
                .unwrap()
                .get(name)
                .cloned();
            if check(seen.as_ref()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the aggregator never saw {name} as expected");
    }

    /// Waits until the aggregator has seen APIService `name` as `object` says (its status
    /// aside), then runs one pass.
    async fn synced_to(&self, name: &str, object: Option<&Value>) {
        let strip = |r: &Registered| Registered {
            available: None,
            ..r.clone()
        };
        let want = object.and_then(Registered::from_object).map(|r| strip(&r));
        self.until(name, |seen| {
            seen.map(strip) == want || (want.is_none() && seen.is_some_and(|r| !r.is_remote()))
        })
        .await;
        sync(&self.api).await;
    }

    /// Waits until the aggregator has seen APIService `name`'s `Available` status be `status`.
    async fn available(&self, name: &str, status: &str) {
        self.until(name, |seen| {
            seen.and_then(|r| r.available.as_ref()).map(|c| c.status) == Some(status)
        })
        .await;
    }
}

fn api_service(name: &str, group: &str, version: &str, ca_pem: &str) -> Value {
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
                 "versionPriority": 100,
                 "service": {"namespace": "sys", "name": "api"},
                 "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem)}})
}

const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

fn backend_pki() -> (tempfile::TempDir, crate::tls::Pki) {
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::tls::Pki::load_or_create(dir.path(), &["api.sys.svc".to_string()]).unwrap();
    (dir, pki)
}

#[tokio::test]
async fn requests_reach_the_backend_as_the_user_and_fail_alone_when_it_is_gone() {
    let (_dir, pki) = backend_pki();
    let backend = backend(&pki).await;
    let h = Harness::new(&pki).await;
    h.service(backend.port).await;
    let object = api_service("v1.example.com", "example.com", "v1", &backend.ca_pem);
    h.create(APISERVICES, object.clone()).await;
    h.synced_to("v1.example.com", Some(&object)).await;

    let (code, apiservice) = h.get(&format!("{APISERVICES}/v1.example.com")).await;
    assert_eq!(code, 200);
    assert_eq!(
        api_service::available(&apiservice),
        Some(("True", "Passed", "all checks passed")),
        "{apiservice}"
    );

    // Through skiff: the user as headers, the front proxy's certificate, no token; a user's
    // own identity headers are dropped.
    let (code, echo) = h
        .send(
            "GET",
            "/apis/example.com/v1/namespaces/default/widgets?limit=5",
            &[("x-remote-user", "mallory")],
            "",
        )
        .await;
    assert_eq!(code, 200, "{echo}");
    assert_eq!(
        echo["path"],
        "/apis/example.com/v1/namespaces/default/widgets"
    );
    assert_eq!(echo["user"], json!([crate::auth::ADMIN_USER]));
    assert!(
        echo["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:masters")),
        "{echo}"
    );
    assert_eq!(echo["authorization"], json!([]));
    assert_eq!(echo["client"], FRONT_PROXY_CLIENT);
    let (code, list) = h.get("/apis/example.com/v1").await;
    assert_eq!(
        (code, &list["groupVersion"]),
        (200, &json!("example.com/v1"))
    );

    // Discovery: legacy and aggregated.
    let (_, groups) = h.get("/apis").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com"),
        "{groups}"
    );
    let accept = [(
        "accept",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )];
    let (_, aggregated) = h.send("GET", "/apis", &accept, "").await;
    let group = |doc: &Value, name: &str| {
        doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {doc}"))
    };
    let example = group(&aggregated, "example.com");
    assert_eq!(
        example["versions"][0]["resources"][0]["resource"],
        "widgets"
    );
    assert_eq!(example["versions"][0]["freshness"], "Current");
    let (code, api_group) = h.get("/apis/example.com").await;
    assert_eq!((code, &api_group["name"]), (200, &json!("example.com")));

    // The backend stops: its APIService turns unavailable and only its group fails.
    backend.stop.cancel();
    tokio::time::sleep(Duration::from_millis(200)).await;
    sync(&h.api).await;
    let (_, apiservice) = h.get(&format!("{APISERVICES}/v1.example.com")).await;
    let (status, reason, message) = api_service::available(&apiservice).unwrap();
    assert_eq!(
        (status, reason),
        ("False", "FailedDiscoveryCheck"),
        "{message}"
    );
    assert!(
        message.starts_with("failing or missing response from https://api.sys.svc:"),
        "{message}"
    );
    h.available("v1.example.com", "False").await;
    let (code, status) = h
        .get("/apis/example.com/v1/namespaces/default/widgets")
        .await;
    assert_eq!(code, 503, "{status}");
    assert_eq!(status["message"], UNAVAILABLE);
    assert_eq!(status["reason"], "ServiceUnavailable");
    let (code, _) = h.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, 200);
    let (_, aggregated) = h.send("GET", "/apis", &accept, "").await;
    assert_eq!(
        group(&aggregated, "example.com")["versions"][0]["freshness"],
        "Stale"
    );
    assert_eq!(
        group(&aggregated, "apps")["versions"][0]["freshness"],
        "Current"
    );
    let (_, groups) = h.get("/apis").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com")
    );
}

#[tokio::test]
async fn local_apiservices_invalid_ones_and_the_published_authentication() {
    let (_dir, pki) = backend_pki();
    let h = Harness::new(&pki).await;
    sync(&h.api).await;
    for name in [
        "v1",
        "v1.apps",
        "v1.apiregistration.k8s.io",
        "v1beta1.metrics.k8s.io",
    ] {
        let (code, object) = h.get(&format!("{APISERVICES}/{name}")).await;
        assert_eq!(code, 200, "{name}: {object}");
        assert!(object["spec"].get("service").is_none(), "{object}");
        assert_eq!(
            api_service::available(&object).map(|(s, r, _)| (s, r)),
            Some(("True", "Local")),
            "{object}"
        );
    }
    // A custom resource's group-version gets one too, and loses it with its definition.
    h.create(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json!({"metadata": {"name": "gadgets.example.org"}, "spec": {"group": "example.org",
            "scope": "Namespaced", "names": {"plural": "gadgets", "singular": "gadget",
            "kind": "Gadget"}, "versions": [{"name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object"}}}]}}),
    )
    .await;
    let mut seen = 0;
    for _ in 0..100 {
        sync(&h.api).await;
        seen = h.get(&format!("{APISERVICES}/v1.example.org")).await.0;
        if seen == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, 200);

    let (code, status) = h
        .send(
            "POST",
            APISERVICES,
            &[],
            &json!({"metadata": {"name": "example"}, "spec": {"group": "example.com",
                "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 100}})
            .to_string(),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"], "metadata.name",
        "{status}"
    );

    let (code, cm) = h
        .get("/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")
        .await;
    assert_eq!(code, 200);
    assert_eq!(cm["data"]["client-ca-file"], "cluster CA");
    assert_eq!(cm["data"]["requestheader-client-ca-file"], pki.ca_pem());
    assert_eq!(
        cm["data"]["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
}

#[tokio::test]
async fn a_metrics_apiservice_with_a_service_takes_over_the_built_in_metrics_api() {
    let (_dir, pki) = backend_pki();
    let backend = backend(&pki).await;
    let h = Harness::new(&pki).await;
    sync(&h.api).await;
    h.service(backend.port).await;
    let (_, built_in) = h.get("/apis/metrics.k8s.io/v1beta1").await;
    let resources = |list: &Value| -> Vec<String> {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(resources(&built_in), ["nodes", "pods"]);

    // metrics-server's manifest, applied over the local APIService.
    let mut object = api_service(
        "v1beta1.metrics.k8s.io",
        "metrics.k8s.io",
        "v1beta1",
        &backend.ca_pem,
    );
    let (_, local) = h
        .get(&format!("{APISERVICES}/v1beta1.metrics.k8s.io"))
        .await;
    object["metadata"]["resourceVersion"] = local["metadata"]["resourceVersion"].clone();
    let (code, body) = h
        .send(
            "PUT",
            &format!("{APISERVICES}/v1beta1.metrics.k8s.io"),
            &[],
            &object.to_string(),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    h.synced_to("v1beta1.metrics.k8s.io", Some(&object)).await;
    let (_, taken) = h.get("/apis/metrics.k8s.io/v1beta1").await;
    assert_eq!(resources(&taken), ["widgets"]);
    let (code, echo) = h.get("/apis/metrics.k8s.io/v1beta1/nodes").await;
    assert_eq!((code, &echo["kind"]), (200, &json!("Echo")), "{echo}");

    // Deleted: the built-in API is back, and so is the local APIService.
    let (code, _) = h
        .send(
            "DELETE",
            &format!("{APISERVICES}/v1beta1.metrics.k8s.io"),
            &[],
            "",
        )
        .await;
    assert_eq!(code, 200);
    h.synced_to("v1beta1.metrics.k8s.io", None).await;
    let (_, back) = h.get("/apis/metrics.k8s.io/v1beta1").await;
    assert_eq!(resources(&back), ["nodes", "pods"]);
    let (code, local) = h
        .get(&format!("{APISERVICES}/v1beta1.metrics.k8s.io"))
        .await;
    assert_eq!(code, 200);
    assert!(local["spec"].get("service").is_none());
    backend.stop.cancel();
}

#[tokio::test]
async fn a_backend_without_endpoints_or_with_another_ca_is_unavailable_with_its_reason() {
    let (_dir, pki) = backend_pki();
    let backend = backend(&pki).await;
    let h = Harness::new(&pki).await;
    // No Service yet.
    let object = api_service("v1.example.com", "example.com", "v1", &backend.ca_pem);
    h.create(APISERVICES, object.clone()).await;
    h.synced_to("v1.example.com", Some(&object)).await;
    let reason =
        |o: &Value| api_service::available(o).map(|(s, r, _)| (s.to_string(), r.to_string()));
    let (_, object) = h.get(&format!("{APISERVICES}/v1.example.com")).await;
    assert_eq!(
        reason(&object),
        Some(("False".into(), "ServiceNotFound".into()))
    );
    h.available("v1.example.com", "False").await;
    let (code, status) = h.get("/apis/example.com/v1/widgets").await;
    assert_eq!(code, 503, "{status}");

    // A CA that did not sign the backend's certificate.
    h.service(backend.port).await;
    let (_other_dir, other) = backend_pki();
    let mut object = api_service("v1.example.com", "example.com", "v1", other.ca_pem());
    let (_, current) = h.get(&format!("{APISERVICES}/v1.example.com")).await;
    object["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    let (code, body) = h
        .send(
            "PUT",
            &format!("{APISERVICES}/v1.example.com"),
            &[],
            &object.to_string(),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    h.synced_to("v1.example.com", Some(&object)).await;
    let (_, object) = h.get(&format!("{APISERVICES}/v1.example.com")).await;
    assert_eq!(
        reason(&object),
        Some(("False".into(), "FailedDiscoveryCheck".into())),
        "{object}"
    );
    backend.stop.cancel();
}

#[tokio::test]
async fn a_request_to_switch_protocols_is_joined_to_the_backend() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (_dir, pki) = backend_pki();
    let backend = backend(&pki).await;
    let h = Harness::new(&pki).await;
    h.service(backend.port).await;
    let object = api_service("v1.example.com", "example.com", "v1", &backend.ca_pem);
    h.create(APISERVICES, object.clone()).await;
    h.synced_to("v1.example.com", Some(&object)).await;
    // skiff on a real connection (the in-process calls cannot switch protocols).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    tokio::spawn(crate::tls::serve_plain(
        listener,
        crate::routes::insecure_routes(h.api.clone()),
        stop.clone(),
        Duration::from_secs(30),
        None,
    ));
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "GET /apis/example.com/v1/widgets/console HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // A masked text frame "hi", echoed back unmasked.
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | 2];
    frame.extend_from_slice(&mask);
    frame.extend(b"hi".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    tcp.write_all(&frame).await.unwrap();
    let mut echo = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), tcp.read_exact(&mut echo))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(echo, [0x81, 2, b'h', b'i']);
    stop.cancel();
    backend.stop.cancel();
}

//! The proxy's pure rules, then requests through the authenticated routes to a live backend on
//! loopback.

use std::net::SocketAddr;

use http::HeaderValue;
use k8s_openapi::api::core::v1::Endpoints;
use serde_json::{Value, json};
use warp::Filter;

use super::*;
use crate::backends::from_endpoints;
use crate::tls::testing::{Cluster, json as body_json};

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

#[test]
fn names_split_into_scheme_name_and_port() {
    assert_eq!(split_name("web").unwrap(), ("", "web", ""));
    assert_eq!(split_name("web:8080").unwrap(), ("", "web", "8080"));
    assert_eq!(split_name("web:http").unwrap(), ("", "web", "http"));
    assert_eq!(
        split_name("https:web:443").unwrap(),
        ("https", "web", "443")
    );
    assert_eq!(split_name("http:web:").unwrap(), ("http", "web", ""));
    for bad in ["ftp:web:21", "a:b:c:d", ":80", "https::443"] {
        assert!(
            matches!(split_name(bad), Err(Error::BadRequest(_))),
            "{bad}"
        );
    }
}

#[test]
fn a_pod_is_reached_on_its_ip_and_the_port_asked_or_its_first_one() {
    let web = pod(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [
            {"name": "a", "image": "x"},
            {"name": "b", "image": "x", "ports": [
                {"containerPort": 8080, "name": "http"},
                {"containerPort": 9090, "name": "metrics"},
            ]},
        ]},
        "status": {"podIP": "10.42.0.7"},
    }));
    let at = |scheme, port| pod_location(&web, scheme, port).unwrap();
    assert_eq!(at("", "").authority, "10.42.0.7:8080");
    assert_eq!(at("", "").scheme, "http");
    assert_eq!(at("", "metrics").authority, "10.42.0.7:9090");
    assert_eq!(at("https", "8443").authority, "10.42.0.7:8443");
    assert_eq!(at("https", "8443").scheme, "https");
    assert!(!at("", "").kubelet);
    assert!(matches!(
        pod_location(&web, "", "nope"),
        Err(Error::BadRequest(m)) if m.contains("no container port named \"nope\"")
    ));
    assert!(matches!(
        pod_location(&web, "", "70000"),
        Err(Error::BadRequest(_))
    ));

    let bare = pod(json!({
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "a", "image": "x"}]},
        "status": {"podIP": "fd00::7"},
    }));
    assert_eq!(
        pod_location(&bare, "", "").unwrap().authority,
        "[fd00::7]:80"
    );
    assert_eq!(
        pod_location(&bare, "https", "").unwrap().authority,
        "[fd00::7]:443"
    );

    let pending = pod(json!({
        "metadata": {"name": "pending"},
        "spec": {"containers": [{"name": "a", "image": "x"}]},
    }));
    assert!(matches!(
        pod_location(&pending, "", ""),
        Err(Error::BadRequest(m)) if m.contains("has no IP address")
    ));
}

fn service(ports: Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"ports": ports},
    }))
    .unwrap()
}

fn endpoints(subsets: Value) -> Endpoints {
    serde_json::from_value(json!({"metadata": {"name": "web"}, "subsets": subsets})).unwrap()
}

#[test]
fn a_service_is_reached_on_a_ready_endpoint_of_the_port_asked() {
    let two = service(json!([
        {"name": "http", "port": 80, "targetPort": 8080},
        {"name": "metrics", "port": 9100, "targetPort": 9090},
    ]));
    let eps = endpoints(json!([{
        "addresses": [{"ip": "10.42.0.7"}, {"ip": "10.42.0.8"}],
        "notReadyAddresses": [{"ip": "10.42.0.9"}],
        "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}],
    }]));
    let location = |service: &Service, eps: Option<&Endpoints>, scheme, port: &str, pick: usize| {
        let port_name = service_port_name(service, port)?;
        let ready = eps
            .map(|e| from_endpoints(e, &port_name))
            .unwrap_or_default();
        service_location("web", &ready, scheme, |n| pick.min(n - 1))
    };
    let at = |port: &str, pick: usize| location(&two, Some(&eps), "", port, pick);
    assert_eq!(at("http", 0).unwrap().authority, "10.42.0.7:8080");
    assert_eq!(at("http", 1).unwrap().authority, "10.42.0.8:8080");
    // Only the ready addresses are candidates.
    assert_eq!(at("http", 2).unwrap().authority, "10.42.0.8:8080");
    // By the service port's number too.
    assert_eq!(at("9100", 1).unwrap().authority, "10.42.0.8:9090");
    // A service with several ports needs one named.
    assert!(matches!(
        at("", 0),
        Err(Error::Unavailable(m)) if m == "no service port \"\" found for service \"web\""
    ));
    assert!(matches!(at("8080", 0), Err(Error::Unavailable(_))));

    // One unnamed port needs no name.
    let one = service(json!([{"port": 80, "targetPort": 8080}]));
    let eps = endpoints(json!([{"addresses": [{"ip": "10.42.0.7"}], "ports": [{"port": 8080}]}]));
    let found = location(&one, Some(&eps), "https", "", 0).unwrap();
    assert_eq!(found.authority, "10.42.0.7:8080");
    assert_eq!(found.scheme, "https");

    // No endpoints, or only unready ones: 503, as Kubernetes answers.
    let unready =
        endpoints(json!([{"notReadyAddresses": [{"ip": "10.42.0.9"}], "ports": [{"port": 8080}]}]));
    for eps in [None, Some(&unready)] {
        assert!(matches!(
            location(&one, eps, "", "", 0),
            Err(Error::Unavailable(m)) if m == "no endpoints available for service \"web\""
        ));
    }

    let external: Service = serde_json::from_value(json!({
        "metadata": {"name": "ext"},
        "spec": {"type": "ExternalName", "externalName": "example.com"},
    }))
    .unwrap();
    assert!(matches!(
        service_port_name(&external, ""),
        Err(Error::BadRequest(_))
    ));
}

#[test]
fn a_node_is_reached_on_its_kubelet_unless_another_port_is_asked() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "status": {
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "192.168.1.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }))
    .unwrap();
    let kubelet = node_location(&node, "", "").unwrap();
    assert_eq!(kubelet.authority, "192.168.1.5:10250");
    assert!(kubelet.kubelet);
    let same = node_location(&node, "", "10250").unwrap();
    assert!(same.kubelet);
    let other = node_location(&node, "", "9100").unwrap();
    assert_eq!(other.authority, "192.168.1.5:9100");
    assert!(
        !other.kubelet,
        "the kubelet's credentials go to the kubelet only"
    );
    assert!(matches!(
        node_location(&node, "", "http"),
        Err(Error::BadRequest(_))
    ));
    let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
    assert!(matches!(
        node_location(&bare, "", ""),
        Err(Error::BadRequest(m)) if m.contains("no address")
    ));
}

#[test]
fn credentials_and_hop_by_hop_headers_stay_behind() {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("authorization", "Bearer admin"),
        ("impersonate-user", "alice"),
        ("impersonate-group", "ops"),
        ("host", "127.0.0.1:6443"),
        ("connection", "keep-alive, x-private"),
        ("x-private", "1"),
        ("keep-alive", "timeout=5"),
        ("transfer-encoding", "chunked"),
        ("accept", "text/html"),
        ("x-custom", "a"),
    ] {
        headers.append(name, HeaderValue::from_static(value));
    }
    headers.append("x-custom", HeaderValue::from_static("b"));
    let out = forwarded_headers(&headers, true, false);
    let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["accept", "x-custom"]);
    assert_eq!(out.get_all("x-custom").iter().count(), 2);

    // An answer keeps its own authentication challenge and content headers.
    let mut answer = HeaderMap::new();
    answer.insert("www-authenticate", HeaderValue::from_static("Basic"));
    answer.insert("content-length", HeaderValue::from_static("5"));
    answer.insert("connection", HeaderValue::from_static("close"));
    let out = forwarded_headers(&answer, false, false);
    assert!(out.contains_key("www-authenticate") && out.contains_key("content-length"));
    assert!(!out.contains_key("connection"));

    // A request to switch protocols keeps what asks for it.
    let mut upgrade = HeaderMap::new();
    upgrade.insert("connection", HeaderValue::from_static("Upgrade"));
    upgrade.insert("upgrade", HeaderValue::from_static("websocket"));
    upgrade.insert("authorization", HeaderValue::from_static("Bearer admin"));
    let out = forwarded_headers(&upgrade, true, true);
    assert!(out.contains_key("connection") && out.contains_key("upgrade"));
    assert!(!out.contains_key("authorization"));
}

/// A backend on loopback that answers every request with what it received, `/redirect` with a
/// redirect, and `/big` with a megabyte.
async fn backend() -> SocketAddr {
    let echo = warp::method()
        .and(warp::path::full())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(warp::header::headers_cloned())
        .and(warp::body::bytes())
        .map(
            |method: Method,
             path: warp::path::FullPath,
             query: String,
             headers: HeaderMap,
             body: Bytes| {
                let header = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string)
                };
                if path.as_str() == "/redirect" {
                    return warp::http::Response::builder()
                        .status(302)
                        .header("location", "/elsewhere")
                        .body(Vec::new())
                        .unwrap();
                }
                if path.as_str() == "/big" {
                    return warp::http::Response::new(vec![b'x'; 1 << 20]);
                }
                let seen = json!({
                    "method": method.as_str(),
                    "path": path.as_str(),
                    "query": query,
                    "authorization": header("authorization"),
                    "custom": header("x-custom"),
                    "body": String::from_utf8_lossy(&body),
                });
                warp::http::Response::builder()
                    .header("content-type", "application/json")
                    .header("x-backend", "yes")
                    .body(serde_json::to_vec(&seen).unwrap())
                    .unwrap()
            },
        );
    crate::tls::testing::serve_loopback(echo).await
}

/// The API server of these tests: its kubelet credentials are `kubelet-secret`.
async fn cluster() -> Cluster {
    Cluster::new("proxy", "kubelet-secret").await
}

#[tokio::test]
async fn requests_reach_pods_services_and_nodes_with_their_method_path_query_and_body() {
    let backend = backend().await;
    let port = backend.port();
    let cluster = cluster().await;
    let mut web = cluster
        .create(
            "/api/v1/namespaces/default/pods",
            json!({
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": port, "name": "http"}]}]},
            }),
        )
        .await;
    web["status"] = json!({"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]});
    let response = cluster
        .send(
            "PUT",
            "/api/v1/namespaces/default/pods/web/status",
            &[("content-type", "application/json")],
            &web.to_string(),
        )
        .await;
    assert!(response.status().is_success());

    // GET with a query, and everything after `proxy` as the backend's path.
    let response = cluster
        .send(
            "GET",
            "/api/v1/namespaces/default/pods/web/proxy/a/b.txt?x=1&y=two%20words",
            &[("x-custom", "kept")],
            "",
        )
        .await;
    assert_eq!(response.status(), 200, "{:?}", response.body());
    assert_eq!(response.headers()["x-backend"], "yes");
    let seen = body_json(&response);
    assert_eq!(seen["method"], "GET");
    assert_eq!(seen["path"], "/a/b.txt");
    assert_eq!(seen["query"], "x=1&y=two+words");
    assert_eq!(seen["custom"], "kept");
    assert_eq!(
        seen["authorization"],
        Value::Null,
        "the client's token stays with the API server"
    );
    assert_eq!(seen["impersonate"], Value::Null);

    // Any method, with its body; the port by name; no path is `/`.
    let response = cluster
        .send(
            "POST",
            "/api/v1/namespaces/default/pods/web:http/proxy",
            &[],
            "hello",
        )
        .await;
    let seen = body_json(&response);
    assert_eq!(
        (seen["method"].as_str(), seen["path"].as_str()),
        (Some("POST"), Some("/"))
    );
    assert_eq!(seen["body"], "hello");
    let response = cluster
        .send(
            "DELETE",
            &format!("/api/v1/namespaces/default/pods/http:web:{port}/proxy/x"),
            &[],
            "",
        )
        .await;
    assert_eq!(body_json(&response)["method"], "DELETE");

    // The backend's redirect reaches the client; it is not followed.
    let response = cluster
        .send(
            "GET",
            "/api/v1/namespaces/default/pods/web/proxy/redirect",
            &[],
            "",
        )
        .await;
    assert_eq!(response.status(), 302);
    assert_eq!(response.headers()["location"], "/elsewhere");

    // A large answer arrives whole.
    let response = cluster
        .send(
            "GET",
            "/api/v1/namespaces/default/pods/web/proxy/big",
            &[],
            "",
        )
        .await;
    assert_eq!(response.body().len(), 1 << 20);

    // A service: its named port, then a ready endpoint.
    cluster
        .create(
            "/api/v1/namespaces/default/services",
            json!({
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": port}]},
            }),
        )
        .await;
    let response = cluster
        .send(
            "GET",
            "/api/v1/namespaces/default/services/web:http/proxy/svc",
            &[],
            "",
        )
        .await;
    assert_eq!(response.status(), 503, "no endpoints yet");
    let status = body_json(&response);
    assert_eq!(status["reason"], "ServiceUnavailable");
    assert_eq!(
        status["message"],
        "no endpoints available for service \"web\""
    );
    cluster
        .create(
            "/api/v1/namespaces/default/endpoints",
            json!({
                "metadata": {"name": "web"},
                "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": port}]}],
            }),
        )
        .await;
    let response = cluster
        .send(
            "GET",
            "/api/v1/namespaces/default/services/web:http/proxy/svc",
            &[],
            "",
        )
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(body_json(&response)["path"], "/svc");

    // A node: its kubelet gets the API server's kubelet credentials; another port does not.
    cluster
        .create(
            "/api/v1/nodes",
            json!({
                "metadata": {"name": "n1"},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                },
            }),
        )
        .await;
    let response = cluster
        .send("GET", "/api/v1/nodes/n1/proxy/healthz", &[], "")
        .await;
    let seen = body_json(&response);
    assert_eq!(seen["path"], "/healthz");
    assert_eq!(seen["authorization"], "Bearer kubelet-secret");

    // A dead port is a 503 naming the dial error; an unknown pod a 404.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let response = cluster
        .send(
            "GET",
            &format!("/api/v1/namespaces/default/pods/web:{dead_port}/proxy/"),
            &[],
            "",
        )
        .await;
    assert_eq!(response.status(), 503);
    assert!(
        body_json(&response)["message"]
            .as_str()
            .unwrap()
            .starts_with("error trying to reach service:"),
        "{:?}",
        body_json(&response)
    );
    let response = cluster
        .send(
            "GET",
            "/api/v1/namespaces/default/pods/nope/proxy/",
            &[],
            "",
        )
        .await;
    assert_eq!(response.status(), 404);
    let response = cluster
        .send(
            "GET",
            "/api/v1/namespaces/default/pods/ftp:web:21/proxy/",
            &[],
            "",
        )
        .await;
    assert_eq!(response.status(), 400);
}

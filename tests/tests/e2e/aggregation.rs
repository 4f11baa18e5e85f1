//! The aggregation layer end to end with kubectl: an HTTPS server started by the test (its
//! certificate for `gizmo-api.default.svc` from a test CA given as the `caBundle`; it accepts
//! only clients with a certificate of the front-proxy CA that skiff publishes in
//! `kube-system/extension-apiserver-authentication`) serves `e2e.skiff.test/v1` behind a
//! selector-less Service whose Endpoints point at it on 127.0.0.1. Its resources answer through
//! skiff as the user, appear in `kubectl api-resources`, its APIService shows Available; when
//! the server stops, the APIService turns unavailable and only that group fails. Its OpenAPI
//! document joins skiff's (`kubectl explain`), and its v2 document is merged into skiff's. Servers behind a Service with an EndpointSlice
//! only, or an ExternalName Service, are reached too.

use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use skiff_tests::{TestCluster, eventually};

use crate::aggregated::{self, Backend, Seen};

const GROUP_VERSION: &str = "e2e.skiff.test/v1";
const HOST: &str = "gizmo-api.default.svc";

/// What the server answers on `path`.
fn answer(seen: &Seen) -> Value {
    match seen.path.split('?').next().unwrap_or_default() {
        "/openapi/v3" => json!({"paths": {"apis/e2e.skiff.test/v1":
            {"serverRelativeURL": "/openapi/v3/apis/e2e.skiff.test/v1?hash=F00D"}}}),
        "/openapi/v3/apis/e2e.skiff.test/v1" => json!({
            "openapi": "3.0.0", "info": {"title": "Gizmos", "version": "v1"},
            // kubectl explain finds a resource's kind by its paths' operations.
            "paths": {"/apis/e2e.skiff.test/v1/namespaces/{namespace}/gizmos/{name}": {"get": {
                "x-kubernetes-group-version-kind":
                    {"group": "e2e.skiff.test", "version": "v1", "kind": "Gizmo"},
                "responses": {"200": {"description": "OK", "content": {"application/json":
                    {"schema": {"$ref": "#/components/schemas/test.skiff.e2e.v1.Gizmo"}}}}}}}},
            "components": {"schemas": {"test.skiff.e2e.v1.Gizmo": {
                "type": "object",
                "description": "A gizmo, as the test's aggregated server describes it.",
                "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "servedTo": {"type": "string", "description": "Who asked."}},
                "x-kubernetes-group-version-kind":
                    [{"group": "e2e.skiff.test", "version": "v1", "kind": "Gizmo"}]}}}}),
        // The v2 document has a path of the server's own besides its group-version's, which
        // skiff leaves out.
        "/openapi/v2" => json!({
            "swagger": "2.0", "info": {"title": "Gizmos", "version": "v1"},
            "paths": {
                "/apis/e2e.skiff.test/v1/namespaces/{namespace}/gizmos/{name}": {"get": {
                    "x-kubernetes-group-version-kind":
                        {"group": "e2e.skiff.test", "version": "v1", "kind": "Gizmo"},
                    "responses": {"200": {"description": "OK",
                        "schema": {"$ref": "#/definitions/test.skiff.e2e.v1.Gizmo"}}}}},
                "/gizmo-server-only": {"get": {"responses": {"200": {"description": "OK",
                    "schema": {"$ref": "#/definitions/test.skiff.e2e.ServerOnly"}}}}}},
            "definitions": {
                "test.skiff.e2e.v1.Gizmo": {
                    "type": "object",
                    "description": "A gizmo, as the server's v2 document describes it.",
                    "properties": {
                        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                        "servedTo": {"type": "string", "description": "Who asked (v2)."}},
                    "x-kubernetes-group-version-kind":
                        [{"group": "e2e.skiff.test", "version": "v1", "kind": "Gizmo"}]},
                "test.skiff.e2e.ServerOnly": {"type": "string"}}}),
        "/apis/e2e.skiff.test/v1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
            "resources": [{"name": "gizmos", "singularName": "gizmo", "namespaced": true,
                           "kind": "Gizmo", "verbs": ["get", "list"], "shortNames": ["gz"]}]}),
        _ => json!({
            "kind": "GizmoList", "apiVersion": GROUP_VERSION, "metadata": {},
            "items": [{"kind": "Gizmo", "apiVersion": GROUP_VERSION,
                       "metadata": {"name": "g1", "namespace": "default"},
                       "servedTo": seen.all("x-remote-user").join(",")}]}),
    }
}

#[test]
fn an_apiservice_answers_through_skiff_appears_in_discovery_and_fails_alone() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();

    // What aggregated servers read to trust the front proxy.
    let data = &aggregated::authentication(&k);
    assert_eq!(
        data["requestheader-username-headers"],
        "[\"X-Remote-User\"]"
    );
    assert_eq!(
        data["requestheader-allowed-names"],
        "[\"front-proxy-client\"]"
    );
    assert!(
        data["client-ca-file"]
            .as_str()
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    let front_proxy_ca = data["requestheader-client-ca-file"].as_str().unwrap();
    assert_ne!(front_proxy_ca, data["client-ca-file"].as_str().unwrap());

    // The built-in group-versions are local APIServices.
    let local = k.ok(&["get", "apiservices", "v1", "v1.apps", "--no-headers"]);
    assert!(
        local
            .lines()
            .all(|l| l.contains("Local") && l.contains("True")),
        "{local}"
    );

    let mut backend = Backend::start(front_proxy_ca, HOST, answer);
    let manifest = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "gizmo-api", "namespace": "default"},
         "spec": {"ports": [{"name": "https", "port": 443}]}},
        {"apiVersion": "v1", "kind": "Endpoints",
         "metadata": {"name": "gizmo-api", "namespace": "default"},
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                      "ports": [{"name": "https", "port": backend.port}]}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": "v1.e2e.skiff.test"},
         "spec": {"group": "e2e.skiff.test", "version": "v1", "groupPriorityMinimum": 1000,
                  "versionPriority": 15,
                  "service": {"namespace": "default", "name": "gizmo-api"},
                  "caBundle": base64::engine::general_purpose::STANDARD.encode(&backend.ca_pem)}}]});
    k.ok_with_input(&["apply", "-f", "-"], &manifest.to_string());

    // Available, as kubectl shows it.
    let mut shown = String::new();
    let available = eventually(Duration::from_secs(30), || {
        shown = k.ok(&["get", "apiservice", "v1.e2e.skiff.test", "--no-headers"]);
        shown.contains("True")
    });
    assert!(available, "{shown}");
    assert!(shown.contains("default/gizmo-api"), "{shown}");

    // A request through skiff: the backend hears the user from the front proxy, no token.
    let whoami = k.ok(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    let listed: Value = serde_json::from_str(&k.ok(&[
        "get",
        "--raw",
        "/apis/e2e.skiff.test/v1/namespaces/default/gizmos",
    ]))
    .unwrap();
    assert_eq!(listed["items"][0]["servedTo"], whoami.trim(), "{listed}");
    let seen = backend.seen.lock().unwrap().clone();
    let request = seen
        .iter()
        .rev()
        .find(|s| s.path.ends_with("/gizmos"))
        .expect("the backend saw the list");
    assert!(request.all("authorization").is_empty(), "{request:?}");
    assert!(request.all("x-test-refused").is_empty(), "{request:?}");
    assert!(
        request
            .all("x-remote-group")
            .contains(&"system:authenticated"),
        "{request:?}"
    );

    // Discovery: kubectl api-resources lists the backend's resource.
    let mut resources = String::new();
    let listed = eventually(Duration::from_secs(30), || {
        let run = k.run(&[
            "api-resources",
            "--api-group=e2e.skiff.test",
            "--no-headers",
        ]);
        resources = format!("{}{}", run.stdout, run.stderr);
        run.stdout.contains("gizmos")
    });
    assert!(listed, "{resources}");
    assert!(resources.contains("Gizmo"), "{resources}");

    // OpenAPI: the server's document of its group-version is in skiff's v3 index, and kubectl
    // explain reads the kind's schema from it.
    let index = k.ok(&["get", "--raw", "/openapi/v3"]);
    assert!(index.contains("apis/e2e.skiff.test/v1"), "{index}");
    assert!(index.contains("apis/apps/v1"), "{index}");
    let explained = k.ok(&["explain", "gizmos"]);
    assert!(
        explained.contains("A gizmo, as the test's aggregated server describes it."),
        "{explained}"
    );
    let field = k.ok(&["explain", "gizmos.servedTo"]);
    assert!(field.contains("Who asked."), "{field}");
    // Its v2 document is merged into skiff's `/openapi/v2`, cut to its group-version's paths,
    // and kubectl's v2 reader (gnostic's protobuf) finds the kind there.
    let v2 = k.ok(&["get", "--raw", "/openapi/v2"]);
    assert!(
        v2.contains("/apis/e2e.skiff.test/v1/namespaces/{namespace}/gizmos/{name}"),
        "{v2}"
    );
    assert!(
        v2.contains("/apis/apps/v1/deployments"),
        "the local paths stay"
    );
    assert!(
        !v2.contains("gizmo-server-only"),
        "a path outside its group-version"
    );
    assert!(
        !v2.contains("test.skiff.e2e.ServerOnly"),
        "what only that path used"
    );
    let explained_v2 = k.ok(&["explain", "gizmos", "--output=plaintext-openapiv2"]);
    assert!(
        explained_v2.contains("A gizmo, as the server's v2 document describes it."),
        "{explained_v2}"
    );

    // The backend stops: its APIService turns unavailable, only its group fails.
    backend.stop();
    turns_unavailable(&k, "e2e.skiff.test", "FailedDiscoveryCheck");
    let pods = k.run(&["get", "pods"]);
    assert!(pods.ok, "{}", pods.stderr);
    let groups = k.ok(&["get", "--raw", "/apis"]);
    assert!(groups.contains("e2e.skiff.test"), "{groups}");
}

/// Waits until the APIService of `group`/v1 is unavailable for `reason`, then checks that its
/// group's requests fail as kube-apiserver fails them (503).
fn turns_unavailable(k: &skiff_tests::Kubectl, group: &str, reason: &str) {
    let mut status = String::new();
    let down = eventually(Duration::from_secs(40), || {
        status = k.ok(&["get", "apiservice", &format!("v1.{group}"), "--no-headers"]);
        status.contains(&format!("False ({reason})"))
    });
    assert!(down, "{status}");
    let failed = k.run(&[
        "get",
        "--raw",
        &format!("/apis/{group}/v1/namespaces/default/gizmos"),
    ]);
    assert!(!failed.ok, "{}", failed.stdout);
    assert!(
        failed
            .stderr
            .contains("the server is currently unable to handle the request"),
        "{}",
        failed.stderr
    );
}

/// What a server of `group`/v1 answers: its discovery document, or one gizmo.
fn answer_in(group: &'static str) -> impl Fn(&Seen) -> Value + Send + Sync + 'static {
    move |seen: &Seen| {
        let group_version = format!("{group}/v1");
        if seen.path.split('?').next() == Some(&format!("/apis/{group_version}")) {
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": [{"name": "gizmos", "singularName": "gizmo", "namespaced": true,
                               "kind": "Gizmo", "verbs": ["get", "list"]}]})
        } else {
            json!({"kind": "GizmoList", "apiVersion": group_version, "metadata": {},
                "items": [{"kind": "Gizmo", "apiVersion": group_version,
                           "metadata": {"name": group, "namespace": "default"}}]})
        }
    }
}

#[test]
fn an_apiservice_reaches_its_server_through_an_endpoint_slice_or_an_external_name() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let front_proxy_ca = aggregated::front_proxy_ca(&k);
    // Each server behind its own Service: one whose endpoints are an EndpointSlice only (no
    // Endpoints object), one an ExternalName naming localhost.
    let cases = [
        ("sliced-api", "sliced.skiff.test", aggregated::Reach::Slice),
        (
            "outside-api",
            "outside.skiff.test",
            aggregated::Reach::ExternalName,
        ),
    ];
    let _backends: Vec<Backend> = cases
        .iter()
        .map(|&(service, group, reach)| {
            let backend = Backend::start(
                &front_proxy_ca,
                &format!("{service}.default.svc"),
                answer_in(group),
            );
            aggregated::register_as(&k, &backend, service, &[(group, "v1")], reach);
            backend
        })
        .collect();
    for (service, group, _) in cases {
        let mut shown = String::new();
        let available = eventually(Duration::from_secs(30), || {
            shown = k.ok(&["get", "apiservice", &format!("v1.{group}"), "--no-headers"]);
            shown.contains("True")
        });
        assert!(available, "{service}: {shown}");
        let listed: Value = serde_json::from_str(&k.ok(&[
            "get",
            "--raw",
            &format!("/apis/{group}/v1/namespaces/default/gizmos"),
        ]))
        .unwrap();
        assert_eq!(listed["items"][0]["metadata"]["name"], group, "{listed}");
    }

    // Without its slice, the Service has no endpoints at all, as kube-aggregator says it.
    k.ok(&["delete", "endpointslice", "sliced-api-1"]);
    turns_unavailable(&k, "sliced.skiff.test", "EndpointsNotFound");
}

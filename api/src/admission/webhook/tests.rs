//! The webhook plugins against a real HTTPS server on 127.0.0.1, with a certificate for
//! `127.0.0.1` and the Services the tests put in front of it (`hooks`, `sliced` and `outside` in
//! `sys`) from a test CA.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use warp::Filter;

use super::*;
use crate::admission::{Feedback, Operation};
use crate::auth::User;

/// What the test server answers to one review.
enum Reply {
    /// This AdmissionReview response (`uid` filled in from the request unless given).
    Review(Value),
    /// These bytes.
    Raw(&'static str),
    /// Nothing for a long while.
    Hang,
}

type Handler = Arc<dyn Fn(&str, &Value) -> Reply + Send + Sync>;

struct Server {
    addr: SocketAddr,
    ca: String,
    /// Every review received, with the path it was posted to.
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn server(handler: Handler) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::tls::Pki::load_or_create(
        dir.path(),
        &[
            "127.0.0.1".to_string(),
            "hooks.sys.svc".to_string(),
            "sliced.sys.svc".to_string(),
            "outside.sys.svc".to_string(),
        ],
    )
    .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let filter = {
        let seen = seen.clone();
        warp::post()
            .and(warp::path::full())
            .and(warp::body::json())
            .then(move |path: warp::path::FullPath, review: Value| {
                let (seen, handler) = (seen.clone(), handler.clone());
                async move {
                    let path = path.as_str().to_string();
                    seen.lock().unwrap().push((path.clone(), review.clone()));
                    let reply = handler(&path, &review);
                    let body = match reply {
                        Reply::Review(mut response) => {
                            if response.get("uid").is_none() {
                                response["uid"] = review["request"]["uid"].clone();
                            }
                            json!({"apiVersion": "admission.k8s.io/v1",
                                   "kind": "AdmissionReview", "response": response})
                            .to_string()
                        }
                        Reply::Raw(text) => text.to_string(),
                        Reply::Hang => {
                            tokio::time::sleep(Duration::from_secs(10)).await;
                            String::new()
                        }
                    };
                    warp::http::Response::builder()
                        .header("content-type", "application/json")
                        .body(body)
                        .unwrap()
                }
            })
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(crate::tls::serve(
        listener,
        pki.server_config().unwrap(),
        filter,
        stop.clone(),
        std::time::Duration::from_secs(32),
        None,
    ));
    Server {
        addr,
        ca: pki.ca_pem().to_string(),
        seen,
        stop,
        _dir: dir,
    }
}

fn registry() -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    let store = skiff_store::SledStore::open(skiff_store::Config::new(dir.path())).unwrap();
    (dir, Registry::new(Arc::new(store)))
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A configuration of one webhook for ConfigMap creates, posting to `path` on `server`.
fn configuration(name: &str, hook: &str, server: &Server, path: &str, extra: Value) -> Value {
    let mut webhook = json!({"name": hook, "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": format!("https://127.0.0.1:{}{path}", server.addr.port()),
                         "caBundle": b64(&server.ca)},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["configmaps"]}]});
    for (k, v) in extra.as_object().unwrap() {
        webhook[k] = v.clone();
    }
    json!({"metadata": {"name": name}, "webhooks": [webhook]})
}

/// [`configuration`] of a webhook reached through `service` (a `clientConfig.service`).
fn through_service(name: &str, hook: &str, server: &Server, service: Value) -> Value {
    let client_config = json!({"caBundle": b64(&server.ca), "service": service});
    configuration(
        name,
        hook,
        server,
        "/",
        json!({"clientConfig": client_config}),
    )
}

fn config_map() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cm", "namespace": "default", "labels": {"color": "red"}}})
}

fn attributes<'a>(object: &'a mut Value, user: &'a User, dry_run: bool) -> Attributes<'a> {
    Attributes {
        operation: Operation::Create,
        info: &skiff_kinds::builtin::config_map::INFO,
        subresource: None,
        namespace: Some("default"),
        name: "cm",
        object: Some(object),
        old: None,
        user,
        dry_run,
        feedback: None,
    }
}

/// Runs the validating plugin with `configurations` on a ConfigMap create.
async fn validate(configurations: &[Value], registry: &Registry) -> Result<()> {
    validate_with(configurations, registry, None).await
}

/// [`validate`], leaving warnings and audit annotations in `feedback`.
async fn validate_with(
    configurations: &[Value],
    registry: &Registry,
    feedback: Option<&Feedback>,
) -> Result<()> {
    let hooks = Arc::new(Webhooks::new(Arc::new(crate::authz::Authorizer::default())));
    for c in configurations {
        hooks.put(false, c);
    }
    let user = User::admin();
    let mut object = config_map();
    let mut a = attributes(&mut object, &user, false);
    a.feedback = feedback;
    ValidatingAdmissionWebhook(hooks)
        .validate(registry, &a)
        .await
}

/// Runs the mutating plugin with `configurations` on a ConfigMap create: the object after.
async fn mutate(configurations: &[Value], registry: &Registry, dry_run: bool) -> Result<Value> {
    let hooks = Arc::new(Webhooks::new(Arc::new(crate::authz::Authorizer::default())));
    for c in configurations {
        hooks.put(true, c);
    }
    let user = User::admin();
    let mut object = config_map();
    MutatingAdmissionWebhook(hooks)
        .admit(registry, &mut attributes(&mut object, &user, dry_run))
        .await?;
    Ok(object)
}

fn api_error(result: Result<impl std::fmt::Debug>) -> skiff_meta::status::ApiError {
    match result {
        Err(Error::Api(e)) => e,
        other => panic!("not an API error: {other:?}"),
    }
}

fn answering() -> Handler {
    Arc::new(|path: &str, review: &Value| match path {
        "/deny" | "/sliced" | "/outside" => {
            let red = review["request"]["object"]["metadata"]["labels"]["color"] == "red";
            Reply::Review(json!({"allowed": !red,
                "status": {"code": 403, "reason": "Forbidden", "message": "red is not allowed"}}))
        }
        "/allow" => Reply::Review(json!({"allowed": true})),
        "/remark" => Reply::Review(json!({"allowed": false, "warnings": ["looked closely"],
            "auditAnnotations": {"verdict": "refused", "a/b": "two slashes", "Bad Key": "space"},
            "status": {"code": 403, "message": "no"}})),
        "/label" => Reply::Review(json!({"allowed": true, "patchType": "JSONPatch",
            "patch": b64(r#"[{"op": "add", "path": "/metadata/labels/stamped", "value": "yes"}]"#)})),
        "/bad-patch" => Reply::Review(json!({"allowed": true, "patchType": "JSONPatch",
            "patch": b64(r#"[{"op": "replace", "path": "/spec/missing", "value": 1}]"#)})),
        "/wrong-uid" => Reply::Review(json!({"uid": "someone-else", "allowed": true})),
        "/garbage" => Reply::Raw("this is not json"),
        "/hang" => Reply::Hang,
        other => panic!("unexpected path {other}"),
    })
}

#[tokio::test]
async fn a_validating_webhook_denies_with_its_message_and_code() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let deny = configuration("deny", "deny.example.com", &s, "/deny", json!({}));
    let e = api_error(validate(&[deny], &registry).await);
    assert_eq!(e.code(), 403);
    assert_eq!(
        e.message(),
        "admission webhook \"deny.example.com\" denied the request: red is not allowed"
    );
    // The review carried the request.
    let seen = s.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let request = &seen[0].1["request"];
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["object"]["metadata"]["name"], "cm");
    assert_eq!(request["resource"]["resource"], "configmaps");
    assert_eq!(request["userInfo"]["username"], User::admin().name);
    assert!(!request["uid"].as_str().unwrap().is_empty());
    // Allowed by another webhook: nothing refused.
    let allow = configuration("allow", "allow.example.com", &s, "/allow", json!({}));
    validate(&[allow], &registry).await.unwrap();
}

#[tokio::test]
async fn a_webhooks_warnings_reach_the_client_and_its_annotations_the_audit_log() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let remark = configuration("remark", "remark.example.com", &s, "/remark", json!({}));
    let feedback = Feedback::default();
    let e = api_error(validate_with(&[remark], &registry, Some(&feedback)).await);
    assert_eq!(e.code(), 403);
    // A refusal's warnings and annotations count too; the keys carry the webhook's name, and
    // keys that do not make an annotation key with it are dropped.
    assert_eq!(feedback.take_warnings(), ["looked closely"]);
    assert_eq!(
        feedback.take_annotations(),
        [(
            "remark.example.com/verdict".to_string(),
            "refused".to_string()
        )]
        .into()
    );
}

#[tokio::test]
async fn validating_webhooks_that_do_not_match_are_not_called() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let selective = configuration(
        "deny",
        "deny.example.com",
        &s,
        "/deny",
        json!({"objectSelector": {"matchLabels": {"color": "blue"}}}),
    );
    validate(&[selective], &registry).await.unwrap();
    let conditional = configuration(
        "deny",
        "deny.example.com",
        &s,
        "/deny",
        json!({"matchConditions": [{"name": "not-cm", "expression": "object.metadata.name != 'cm'"}]}),
    );
    validate(&[conditional], &registry).await.unwrap();
    assert!(s.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_mutating_webhook_patches_the_object() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let label = configuration("label", "label.example.com", &s, "/label", json!({}));
    let object = mutate(&[label], &registry, false).await.unwrap();
    assert_eq!(object["metadata"]["labels"]["stamped"], "yes");
    assert_eq!(object["metadata"]["labels"]["color"], "red");
}

#[tokio::test]
async fn call_failures_follow_the_failure_policy() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    for (path, why) in [
        ("/garbage", "failed to decode the webhook's response"),
        ("/wrong-uid", "expected response.uid="),
    ] {
        let fail = configuration(
            "c",
            "broken.example.com",
            &s,
            path,
            json!({"failurePolicy": "Fail"}),
        );
        let e = api_error(mutate(&[fail], &registry, false).await);
        assert_eq!(e.code(), 500, "{path}");
        assert!(
            e.message().starts_with(
                "Internal error occurred: failed calling webhook \"broken.example.com\": "
            ),
            "{path}: {}",
            e.message()
        );
        assert!(e.message().contains(why), "{path}: {}", e.message());
        let ignore = configuration(
            "c",
            "broken.example.com",
            &s,
            path,
            json!({"failurePolicy": "Ignore"}),
        );
        let object = mutate(&[ignore], &registry, false).await.unwrap();
        assert_eq!(object, config_map(), "{path}: unchanged");
    }
    // A patch that does not apply fails the request under either policy, naming the webhook.
    for policy in ["Fail", "Ignore"] {
        let bad = configuration(
            "c",
            "broken.example.com",
            &s,
            "/bad-patch",
            json!({"failurePolicy": policy}),
        );
        let e = api_error(mutate(&[bad], &registry, false).await);
        assert_eq!(e.code(), 500, "{policy}");
        assert!(
            e.message().starts_with(
                "Internal error occurred: admission webhook \"broken.example.com\" returned a patch that does not apply: JSONPatch failed"
            ),
            "{policy}: {}",
            e.message()
        );
    }
    // Nobody listening.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut refused = configuration("c", "gone.example.com", &s, "/allow", json!({}));
    refused["webhooks"][0]["clientConfig"]["url"] = json!(format!("https://127.0.0.1:{closed}/"));
    let e = api_error(validate(std::slice::from_ref(&refused), &registry).await);
    assert!(
        e.message()
            .contains("failed calling webhook \"gone.example.com\": failed to call webhook: Post"),
        "{}",
        e.message()
    );
    refused["webhooks"][0]["failurePolicy"] = json!("Ignore");
    validate(&[refused], &registry).await.unwrap();
    // A CA that did not sign the server's certificate.
    let other = server(answering()).await;
    let mut untrusted = configuration("c", "untrusted.example.com", &s, "/allow", json!({}));
    untrusted["webhooks"][0]["clientConfig"]["caBundle"] = json!(b64(&other.ca));
    let e = api_error(validate(&[untrusted], &registry).await);
    assert_eq!(e.code(), 500);
    assert!(s.seen.lock().unwrap().iter().all(|(p, _)| p != "/allow"));
}

#[tokio::test]
async fn a_hanging_webhook_times_out() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let fail = configuration(
        "c",
        "slow.example.com",
        &s,
        "/hang",
        json!({"timeoutSeconds": 1}),
    );
    let started = std::time::Instant::now();
    let e = api_error(validate(&[fail], &registry).await);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(e.code(), 500);
    assert!(
        e.message()
            .contains("failed calling webhook \"slow.example.com\"")
            && e.message().contains("context deadline exceeded"),
        "{}",
        e.message()
    );
    let ignore = configuration(
        "c",
        "slow.example.com",
        &s,
        "/hang",
        json!({"timeoutSeconds": 1, "failurePolicy": "Ignore"}),
    );
    validate(&[ignore], &registry).await.unwrap();
}

#[tokio::test]
async fn a_service_reference_reaches_a_ready_endpoint_with_the_service_name_verified() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "hooks", "namespace": "sys"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": s.addr.port()}]}});
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "hooks", "namespace": "sys"},
        "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                     "ports": [{"name": "https", "port": s.addr.port()}]}]});
    registry
        .insert(&skiff_kinds::builtin::service::INFO, &service, None)
        .await
        .unwrap();
    registry
        .insert(&skiff_kinds::builtin::endpoints::INFO, &endpoints, None)
        .await
        .unwrap();
    let by_service = through_service(
        "deny",
        "deny.example.com",
        &s,
        json!({"namespace": "sys", "name": "hooks", "path": "/deny", "port": 443}),
    );
    let e = api_error(validate(&[by_service], &registry).await);
    assert_eq!(e.code(), 403, "{}", e.message());
    assert_eq!(s.seen.lock().unwrap()[0].0, "/deny");

    // A Service whose endpoints are published as an EndpointSlice only.
    let sliced = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "sliced", "namespace": "sys"},
        "spec": {"ports": [{"name": "https", "port": 443}]}});
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "sliced-abc", "namespace": "sys",
                     "labels": {"kubernetes.io/service-name": "sliced"}},
        "addressType": "IPv4", "ports": [{"name": "https", "port": s.addr.port()}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}]});
    // An ExternalName Service: its name on the reference's port.
    let external = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "outside", "namespace": "sys"},
        "spec": {"type": "ExternalName", "externalName": "localhost"}});
    for (info, object) in [
        (&skiff_kinds::builtin::service::INFO, &sliced),
        (&skiff_kinds::builtin::endpoint_slice::INFO, &slice),
        (&skiff_kinds::builtin::service::INFO, &external),
    ] {
        registry.insert(info, object, None).await.unwrap();
    }
    for (name, port, path) in [
        ("sliced", 443, "/sliced"),
        ("outside", s.addr.port(), "/outside"),
    ] {
        let by_service = through_service(
            "deny",
            "deny.example.com",
            &s,
            json!({"namespace": "sys", "name": name, "path": path, "port": port}),
        );
        let e = api_error(validate(&[by_service], &registry).await);
        assert_eq!(e.code(), 403, "{name}: {}", e.message());
        assert_eq!(s.seen.lock().unwrap().last().unwrap().0, path);
    }
    // Not ready: no endpoint to call.
    let mut unready = slice.clone();
    unready["endpoints"][0]["conditions"]["ready"] = json!(false);
    registry
        .update(
            &skiff_kinds::builtin::endpoint_slice::INFO,
            Some("sys"),
            "sliced-abc",
            None,
            false,
            |_| {
                let unready = unready.clone();
                async move { Ok(crate::registry::Update::Write(unready)) }
            },
        )
        .await
        .unwrap();
    let by_service = through_service(
        "deny",
        "deny.example.com",
        &s,
        json!({"namespace": "sys", "name": "sliced", "path": "/sliced", "port": 443}),
    );
    let e = api_error(validate(&[by_service], &registry).await);
    assert!(
        e.message()
            .ends_with("no endpoints available for service \"sliced\""),
        "{}",
        e.message()
    );

    // A service that does not exist is a call failure.
    let missing = through_service(
        "m",
        "missing.example.com",
        &s,
        json!({"namespace": "sys", "name": "nope"}),
    );
    let e = api_error(validate(&[missing], &registry).await);
    assert!(
        e.message()
            .contains("failed calling webhook \"missing.example.com\"")
    );
}

#[tokio::test]
async fn mutating_webhooks_run_in_name_order_and_reinvoke_if_needed() {
    let (_d, registry) = registry();
    // "a" copies label `b` (if any) to `copied`; "b" sets label `b`.
    let s = server(Arc::new(|path: &str, review: &Value| {
        let labels = &review["request"]["object"]["metadata"]["labels"];
        match path {
            "/a" => {
                let patch = match labels["b"].as_str() {
                    Some(b) => {
                        json!([{"op": "add", "path": "/metadata/labels/copied", "value": b}])
                    }
                    None => json!([]),
                };
                Reply::Review(json!({"allowed": true, "patchType": "JSONPatch",
                    "patch": b64(&patch.to_string())}))
            }
            _ => Reply::Review(json!({"allowed": true, "patchType": "JSONPatch",
                "patch": b64(r#"[{"op": "add", "path": "/metadata/labels/b", "value": "set"}]"#)})),
        }
    }))
    .await;
    let b = configuration("2-b", "b.example.com", &s, "/b", json!({}));
    let a_never = configuration("1-a", "a.example.com", &s, "/a", json!({}));
    let object = mutate(&[b.clone(), a_never], &registry, false)
        .await
        .unwrap();
    assert!(object["metadata"]["labels"].get("copied").is_none());
    let order: Vec<String> = s
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(order, ["/a", "/b"], "by configuration name");
    s.seen.lock().unwrap().clear();
    let a_if_needed = configuration(
        "1-a",
        "a.example.com",
        &s,
        "/a",
        json!({"reinvocationPolicy": "IfNeeded"}),
    );
    let object = mutate(&[b, a_if_needed], &registry, false).await.unwrap();
    assert_eq!(object["metadata"]["labels"]["copied"], "set");
    let order: Vec<String> = s
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(order, ["/a", "/b", "/a"], "reinvoked once");
}

#[tokio::test]
async fn dry_runs_need_webhooks_without_side_effects() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let unsafe_hook = configuration(
        "c",
        "effects.example.com",
        &s,
        "/label",
        json!({"sideEffects": "Some"}),
    );
    let e = mutate(std::slice::from_ref(&unsafe_hook), &registry, true)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("effects.example.com") && e.to_string().contains("dry run"),
        "{e}"
    );
    assert!(s.seen.lock().unwrap().is_empty());
    // Without a dry run it is called; with NoneOnDryRun a dry run is fine.
    mutate(&[unsafe_hook], &registry, false).await.unwrap();
    let fine = configuration(
        "c",
        "fine.example.com",
        &s,
        "/label",
        json!({"sideEffects": "NoneOnDryRun"}),
    );
    let object = mutate(&[fine], &registry, true).await.unwrap();
    assert_eq!(object["metadata"]["labels"]["stamped"], "yes");
    assert_eq!(
        s.seen.lock().unwrap().last().unwrap().1["request"]["dryRun"],
        true
    );
}

#[tokio::test]
async fn webhook_configurations_are_never_sent_to_webhooks() {
    let (_d, registry) = registry();
    let s = server(answering()).await;
    let mut everything = configuration("deny", "deny.example.com", &s, "/deny", json!({}));
    everything["webhooks"][0]["rules"] = json!([{"operations": ["*"], "apiGroups": ["*"],
        "apiVersions": ["*"], "resources": ["*/*"]}]);
    let hooks = Arc::new(Webhooks::new(Arc::new(crate::authz::Authorizer::default())));
    hooks.put(false, &everything);
    let user = User::admin();
    let mut object = everything.clone();
    object["metadata"]["labels"] = json!({"color": "red"});
    let a = Attributes {
        operation: Operation::Create,
        info: &skiff_kinds::builtin::validating_webhook_configuration::INFO,
        subresource: None,
        namespace: None,
        name: "deny",
        object: Some(&mut object),
        old: None,
        user: &user,
        dry_run: false,
        feedback: None,
    };
    ValidatingAdmissionWebhook(hooks.clone())
        .validate(&registry, &a)
        .await
        .unwrap();
    assert!(s.seen.lock().unwrap().is_empty());
    // The same webhook does see a ConfigMap.
    let mut cm = config_map();
    let e = ValidatingAdmissionWebhook(hooks)
        .validate(&registry, &attributes(&mut cm, &user, false))
        .await;
    assert!(e.is_err());
}

#[tokio::test]
async fn the_watch_keeps_the_configurations_in_memory() {
    let (_d, registry) = registry();
    let hooks = Arc::new(Webhooks::new(Arc::new(crate::authz::Authorizer::default())));
    let stop = CancellationToken::new();
    let info = &skiff_kinds::builtin::validating_webhook_configuration::INFO;
    let before = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "early"},
        "webhooks": [{"name": "early.example.com", "sideEffects": "None",
                      "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1/"}}]});
    registry.insert(info, &before, None).await.unwrap();
    let task = tokio::spawn(hooks.clone().run(registry.clone(), stop.clone()));
    let names = |hooks: &Webhooks| -> Vec<String> {
        hooks
            .snapshot()
            .hooks(false)
            .map(|h| h.name.clone())
            .collect()
    };
    let wait_for = |want: Vec<&'static str>| {
        let hooks = hooks.clone();
        async move {
            for _ in 0..200 {
                if names(&hooks) == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("never saw {want:?}, have {:?}", names(&hooks));
        }
    };
    wait_for(vec!["early.example.com"]).await;
    let mut later = before.clone();
    later["metadata"]["name"] = json!("late");
    later["webhooks"][0]["name"] = json!("late.example.com");
    registry.insert(info, &later, None).await.unwrap();
    wait_for(vec!["early.example.com", "late.example.com"]).await;
    registry.delete(info, None, "early", None).await.unwrap();
    wait_for(vec!["late.example.com"]).await;
    stop.cancel();
    task.await.unwrap();
}

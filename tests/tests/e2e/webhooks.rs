//! Admission webhooks end to end with kubectl: an HTTPS server started by the test (on
//! 127.0.0.1, its certificate from a test CA given as the `caBundle`) is registered by `url`; a
//! validating webhook denies ConfigMaps with a label and kubectl shows its message, a mutating
//! one adds a label, a webhook that hangs past `timeoutSeconds: 1` fails the request under
//! `failurePolicy: Fail` (naming the webhook) and is skipped under `Ignore`, and the
//! configurations themselves are never sent to a webhook. The same server registered by a
//! Service reference is reached through the Service's endpoints, and a Service with none fails
//! the call as kube-apiserver words it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use skiff_tests::{Kubectl, TestCluster, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The test's webhook server: every review it received, and the query of each request.
struct Hooks {
    port: u16,
    ca_pem: String,
    seen: Arc<Mutex<Vec<Value>>>,
    queries: Arc<Mutex<Vec<String>>>,
}

/// What the server answers on `path` to `review`, after how long.
fn answer(path: &str, review: &Value) -> (Duration, Value) {
    let request = &review["request"];
    let labels = &request["object"]["metadata"]["labels"];
    let mut response = json!({"uid": request["uid"], "allowed": true});
    let mut delay = Duration::ZERO;
    match path {
        "/deny" if labels["forbidden"] == "true" => {
            response["allowed"] = json!(false);
            response["status"] = json!({"code": 403, "reason": "Forbidden",
                "message": "configmaps labelled forbidden=true are not allowed"});
        }
        "/label" => {
            let patch = if labels.is_object() {
                json!([{"op": "add", "path": "/metadata/labels/stamped", "value": "by-webhook"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"stamped": "by-webhook"}}])
            };
            response["patchType"] = json!("JSONPatch");
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
        "/hang" => delay = Duration::from_secs(5),
        _ => {}
    }
    (
        delay,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

/// Reads one HTTP/1.1 request: (its target, the path with the query; the body).
async fn read_request<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let path = head.split_whitespace().nth(1)?.to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((path, body))
}

/// Starts the webhook server on 127.0.0.1 in a thread of its own.
fn start_hooks() -> Hooks {
    // Reached by URL (127.0.0.1) or through the Service `default/hooks`.
    let (ca_pem, cert, key) =
        skiff_tests::serving_certificate("webhook test CA", &["127.0.0.1", "hooks.default.svc"]);
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let queries = Arc::new(Mutex::new(Vec::new()));
    let (record, record_query) = (seen.clone(), queries.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, record, record_query) =
                    (acceptor.clone(), record.clone(), record_query.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Some((target, body)) = read_request(&mut tls).await else {
                        return;
                    };
                    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
                    record_query.lock().unwrap().push(query.to_string());
                    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    record.lock().unwrap().push(review.clone());
                    let (delay, reply) = answer(path, &review);
                    tokio::time::sleep(delay).await;
                    let reply = reply.to_string();
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                        reply.len()
                    );
                    let _ = tls.write_all(response.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
    });
    Hooks {
        port,
        ca_pem,
        seen,
        queries,
    }
}

impl Hooks {
    /// The `clientConfig` that reaches the server through the Service `default/hooks` on
    /// `path`.
    fn through_service(&self, path: &str) -> Value {
        json!({
            "service": {"namespace": "default", "name": "hooks", "path": path, "port": 443},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&self.ca_pem),
        })
    }

    /// A webhook configuration of `kind` named `name` with one webhook `hook` for ConfigMap
    /// creates posting to `path` by URL, plus `extra` fields of the webhook (which may replace
    /// its `clientConfig`).
    fn configuration(
        &self,
        kind: &str,
        name: &str,
        hook: &str,
        path: &str,
        extra: Value,
    ) -> String {
        let mut webhook = json!({
            "name": hook,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}{path}", self.port),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&self.ca_pem),
            },
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"]}],
        });
        for (k, v) in extra.as_object().unwrap() {
            webhook[k] = v.clone();
        }
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
               "metadata": {"name": name}, "webhooks": [webhook]})
        .to_string()
    }
}

fn config_map(name: &str, labels: Value) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "default", "labels": labels},
           "data": {"a": "b"}})
    .to_string()
}

/// Creates ConfigMaps named `prefix-N` (N counting up) with `labels` until `done` holds for a
/// kubectl run (configurations reach the API server's memory through a watch, a moment after
/// they are written); the run that made it hold.
fn until(
    k: &Kubectl,
    prefix: &str,
    labels: Value,
    mut done: impl FnMut(&skiff_tests::Run) -> bool,
) -> skiff_tests::Run {
    let mut last = None;
    let mut n = 0;
    let held = eventually(Duration::from_secs(20), || {
        n += 1;
        let run = k.run_with_input(
            &["create", "-f", "-"],
            &config_map(&format!("{prefix}-{n}"), labels.clone()),
        );
        let held = done(&run);
        last = Some(run);
        held
    });
    let last = last.expect("at least one run");
    assert!(held, "never held; last run: {last:?}");
    last
}

#[test]
fn webhooks_deny_mutate_time_out_and_never_see_their_configurations() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let hooks = start_hooks();

    // A validating webhook refuses a labelled ConfigMap; kubectl prints its message.
    k.ok_with_input(
        &["create", "-f", "-"],
        &hooks.configuration(
            "ValidatingWebhookConfiguration",
            "deny-forbidden",
            "deny.skiff.test",
            "/deny",
            json!({}),
        ),
    );
    let denied = until(&k, "forbidden", json!({"forbidden": "true"}), |run| !run.ok);
    assert!(
        denied.stderr.contains(
            "admission webhook \"deny.skiff.test\" denied the request: configmaps labelled forbidden=true are not allowed"
        ),
        "{}",
        denied.stderr
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &config_map("allowed", json!({"forbidden": "false"})),
    );
    let shown = k.ok(&["get", "configmaps", "--no-headers", "-o", "name"]);
    assert!(shown.contains("configmap/allowed"), "{shown}");
    assert!(!shown.contains("configmap/forbidden-"), "{shown}");
    // Defaults were filled in on create.
    let stored: Value = serde_json::from_str(&k.ok(&[
        "get",
        "validatingwebhookconfiguration",
        "deny-forbidden",
        "-o",
        "json",
    ]))
    .unwrap();
    let webhook = &stored["webhooks"][0];
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(webhook["matchPolicy"], "Equivalent");
    assert_eq!(webhook["timeoutSeconds"], 10);

    // A mutating webhook adds a label.
    k.ok_with_input(
        &["create", "-f", "-"],
        &hooks.configuration(
            "MutatingWebhookConfiguration",
            "stamp",
            "stamp.skiff.test",
            "/label",
            json!({}),
        ),
    );
    let mut stamped = String::new();
    let mut n = 0;
    let labelled = eventually(Duration::from_secs(20), || {
        n += 1;
        stamped = format!("stamped-{n}");
        k.ok_with_input(
            &["create", "-f", "-"],
            &config_map(&stamped, json!({"app": "x"})),
        );
        let got: Value =
            serde_json::from_str(&k.ok(&["get", "configmap", &stamped, "-o", "json"])).unwrap();
        got["metadata"]["labels"]["stamped"] == "by-webhook"
    });
    assert!(labelled, "the mutating webhook never labelled a ConfigMap");
    let got: Value =
        serde_json::from_str(&k.ok(&["get", "configmap", &stamped, "-o", "json"])).unwrap();
    assert_eq!(
        got["metadata"]["labels"],
        json!({"app": "x", "stamped": "by-webhook"})
    );

    // A webhook that hangs: Fail fails the request naming the webhook, Ignore lets it pass.
    let slow = |policy: &str| {
        hooks.configuration(
            "ValidatingWebhookConfiguration",
            "slow",
            "slow.skiff.test",
            "/hang",
            json!({"timeoutSeconds": 1, "failurePolicy": policy,
                   "objectSelector": {"matchLabels": {"speed": "slow"}}}),
        )
    };
    k.ok_with_input(&["apply", "-f", "-"], &slow("Fail"));
    let failed = until(&k, "slow", json!({"speed": "slow"}), |run| !run.ok);
    assert!(
        failed
            .stderr
            .contains("failed calling webhook \"slow.skiff.test\""),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("InternalError") || failed.stderr.contains("Internal error"),
        "{}",
        failed.stderr
    );
    k.ok_with_input(&["apply", "-f", "-"], &slow("Ignore"));
    until(&k, "ignored", json!({"speed": "slow"}), |run| run.ok);

    // Each call told the webhook its deadline, as kube-apiserver does: 10 s by default, 1 s
    // for the slow one.
    let queries = hooks.queries.lock().unwrap().clone();
    assert!(queries.iter().any(|q| q == "timeout=10s"), "{queries:?}");
    assert!(queries.iter().any(|q| q == "timeout=1s"), "{queries:?}");
    assert!(
        queries.iter().all(|q| q.starts_with("timeout=")),
        "{queries:?}"
    );

    // The configurations were written and changed above, but no review of one reached the
    // server; ConfigMaps did.
    let seen = hooks.seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|r| r["request"]["resource"]["resource"] == "configmaps")
    );
    let of_configurations: Vec<&Value> = seen
        .iter()
        .filter(|r| r["request"]["kind"]["group"] == "admissionregistration.k8s.io")
        .collect();
    assert!(of_configurations.is_empty(), "{of_configurations:?}");
    // Even a webhook for everything is not asked about a configuration.
    k.ok_with_input(
        &["create", "-f", "-"],
        &hooks.configuration(
            "ValidatingWebhookConfiguration",
            "everything",
            "everything.skiff.test",
            "/allow",
            json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
                              "resources": ["*/*"]}]}),
        ),
    );
    until(&k, "audited", json!({}), |run| {
        run.ok
            && hooks.seen.lock().unwrap().iter().any(|r| {
                r["request"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("audited-"))
                    && r["request"]["operation"] == "CREATE"
            })
    });
    k.ok(&[
        "delete",
        "validatingwebhookconfiguration",
        "deny-forbidden",
        "slow",
    ]);
    k.ok(&["delete", "mutatingwebhookconfiguration", "stamp"]);
    let seen = hooks.seen.lock().unwrap().clone();
    let of_configurations: Vec<&Value> = seen
        .iter()
        .filter(|r| r["request"]["kind"]["group"] == "admissionregistration.k8s.io")
        .collect();
    assert!(of_configurations.is_empty(), "{of_configurations:?}");
    let listed = k.ok(&["get", "validatingwebhookconfigurations", "-o", "name"]);
    assert_eq!(
        listed.trim(),
        "validatingwebhookconfiguration.admissionregistration.k8s.io/everything"
    );
}

#[test]
fn a_webhook_is_reached_through_its_service() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let hooks = start_hooks();
    // A Service without a selector, its Endpoints the test's server.
    let service = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "hooks", "namespace": "default"},
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": hooks.port}]}},
        {"apiVersion": "v1", "kind": "Endpoints",
         "metadata": {"name": "hooks", "namespace": "default"},
         "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                      "ports": [{"name": "https", "port": hooks.port}]}]}]});
    k.ok_with_input(&["apply", "-f", "-"], &service.to_string());
    let configuration = hooks.configuration(
        "ValidatingWebhookConfiguration",
        "deny-by-service",
        "deny-svc.skiff.test",
        "/deny",
        json!({"clientConfig": hooks.through_service("/deny")}),
    );
    k.ok_with_input(&["create", "-f", "-"], &configuration);
    let denied = until(&k, "forbidden", json!({"forbidden": "true"}), |run| !run.ok);
    assert!(
        denied.stderr.contains(
            "admission webhook \"deny-svc.skiff.test\" denied the request: configmaps labelled forbidden=true are not allowed"
        ),
        "{}",
        denied.stderr
    );
    // The server saw the review.
    assert!(
        hooks
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|r| r["request"]["object"]["metadata"]["labels"]["forbidden"] == "true")
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &config_map("allowed", json!({"forbidden": "false"})),
    );

    // With no endpoint left, the call fails (failurePolicy Fail) in kube-apiserver's words.
    k.ok(&["delete", "endpoints", "hooks"]);
    let failed = until(&k, "unreachable", json!({}), |run| !run.ok);
    assert!(
        failed.stderr.contains(
            "failed calling webhook \"deny-svc.skiff.test\": failed to call webhook: Post \"https://hooks.default.svc:443/deny?timeout=10s\": no endpoints available for service \"hooks\""
        ),
        "{}",
        failed.stderr
    );
}

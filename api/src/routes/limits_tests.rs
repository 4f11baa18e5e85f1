//! Bad input at the API, case by case, over a real loopback connection: bodies over the limit,
//! deep nesting, huge labels and annotations, invalid UTF-8, a million items, too many requests
//! in flight, too many watches, and a watch whose client never reads (issue 26).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skiff_store::Store;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use warp::Filter as _;

use crate::auth::User;
use crate::limits::Settings;

/// These tests take turns: two of them bound the process's resident memory, the test binary is
/// one process, and the others send bodies of many megabytes.
static MEMORY_BOUND: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
use crate::server::{ApiServer, Config};
use crate::tls::testing::TempDir;

/// An API server on a fresh log, served over plain HTTP on loopback twice: as the admin
/// (`system:masters`) and as `alice`, who is bound to `cluster-admin` but is no master.
struct Server {
    api: Arc<ApiServer>,
    store: Arc<dyn Store>,
    admin: String,
    alice: String,
    admin_addr: std::net::SocketAddr,
    stop: CancellationToken,
    _dir: TempDir,
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

impl Server {
    async fn start(limits: Settings) -> Server {
        let dir = TempDir::new("limits");
        let store = skiff_store::SledStore::open(skiff_store::Config::new(&dir.0)).unwrap();
        let store: Arc<dyn Store> = Arc::new(store);
        let config = Config {
            limits: limits.clone(),
            ..Config::default()
        };
        let api = ApiServer::new(store.clone(), config, CancellationToken::new())
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_addr = admin.local_addr().unwrap();
        tokio::spawn(crate::tls::serve_plain(
            admin,
            super::insecure_routes(api.clone()),
            stop.clone(),
            limits.header_read_timeout,
            None,
        ));
        let alice = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let alice_addr = alice.local_addr().unwrap();
        let user = User {
            name: "alice".into(),
            uid: "alice".into(),
            groups: vec!["system:authenticated".into()],
            extra: Default::default(),
        };
        let routes = super::api_routes(api.clone(), warp::any().map(move || user.clone()).boxed())
            .recover(super::recover)
            .unify()
            .boxed();
        tokio::spawn(crate::tls::serve_plain(
            alice,
            routes,
            stop.clone(),
            limits.header_read_timeout,
            None,
        ));
        let server = Server {
            api,
            store,
            admin: format!("http://{admin_addr}"),
            alice: format!("http://{alice_addr}"),
            admin_addr,
            stop,
            _dir: dir,
        };
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "alice"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
        });
        let created = client()
            .post(format!(
                "{}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                server.admin
            ))
            .json(&binding)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = client()
                .get(format!("{}{CONFIGMAPS}", server.alice))
                .send()
                .await
                .unwrap();
            if r.status() == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "alice never got her binding");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    async fn stop(self) {
        self.stop.cancel();
        self.api.shutdown.cancel();
        self.store.close().await.unwrap();
    }
}

fn client() -> reqwest::Client {
    crate::tls::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// The response's status code and its body as a `Status`.
async fn status_of(response: reqwest::Response) -> (u16, Value) {
    let code = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    let status: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "{code}: not a Status ({e}): {}",
            String::from_utf8_lossy(&body[..body.len().min(500)])
        )
    });
    assert_eq!(status["kind"], "Status", "{status}");
    assert_eq!(status["code"], code, "{status}");
    (code, status)
}

async fn send(
    method: reqwest::Method,
    url: String,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let body: reqwest::Body = body.into();
    // A body in memory can be sent again; a stream is sent once.
    let mut bytes = body.as_bytes().map(<[u8]>::to_vec);
    let mut stream = bytes.is_none().then_some(body);
    let mut tries = 0;
    let response = loop {
        tries += 1;
        let body = match &mut bytes {
            Some(b) => reqwest::Body::from(b.clone()),
            None => stream.take().expect("a streamed body is sent once"),
        };
        let sent = tokio::time::timeout(
            Duration::from_secs(20),
            client()
                .request(method.clone(), url.clone())
                .header("content-type", content_type)
                .body(body)
                .send(),
        )
        .await
        .expect("no answer within 20 s");
        match sent {
            Ok(response) => break response,
            // The server answered 413 and closed while the client was still writing a large
            // body; the client may then see the broken pipe before the answer. Ask again.
            Err(e) if e.is_request() && bytes.is_some() && tries < 5 => continue,
            Err(e) => panic!("{e:?}"),
        }
    };
    tokio::time::timeout(Duration::from_secs(20), status_of(response))
        .await
        .expect("no body within 20 s")
}

fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_413_with_or_without_content_length_on_every_verb() {
    let _turn = MEMORY_BOUND.lock().await;
    let limit = 64 * 1024;
    let s = Server::start(Settings {
        max_body_bytes: limit,
        ..Settings::default()
    })
    .await;
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
        "data": {"k": "x".repeat(limit)}})
    .to_string();
    let one = format!("{}{CONFIGMAPS}/one", s.admin);
    let cases = [
        (reqwest::Method::POST, format!("{}{CONFIGMAPS}", s.admin)),
        (reqwest::Method::PUT, one.clone()),
        (reqwest::Method::PATCH, one.clone()),
        (reqwest::Method::DELETE, one.clone()),
        (
            reqwest::Method::GET,
            format!("{}{CONFIGMAPS}?watch=1", s.admin),
        ),
    ];
    // reqwest sends no chunked body with a GET: a watch with one, by hand.
    let mut raw = TcpStream::connect(s.admin_addr).await.unwrap();
    raw.write_all(b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    for _ in 0..(limit / 1024 + 2) {
        let mut chunk = b"400\r\n".to_vec();
        chunk.extend_from_slice(&[b'x'; 1024]);
        chunk.extend_from_slice(b"\r\n");
        if raw.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let _ = raw.write_all(b"0\r\n\r\n").await;
    let mut head = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), raw.read(&mut head))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("RequestEntityTooLarge"), "{head}");
    let cases: Vec<_> = cases
        .into_iter()
        .filter(|(m, _)| *m != reqwest::Method::GET)
        .collect();
    // A watch with a Content-Length body over the limit.
    let (code, _) = send(
        reqwest::Method::GET,
        format!("{}{CONFIGMAPS}?watch=1", s.admin),
        "application/json",
        big.clone(),
    )
    .await;
    assert_eq!(code, 413);
    for (method, url) in cases {
        for chunked in [false, true] {
            let body = if chunked {
                // A stream of 1 KiB chunks: no Content-Length, Transfer-Encoding: chunked.
                let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big
                    .as_bytes()
                    .chunks(1024)
                    .map(|c| Ok(c.to_vec()))
                    .collect();
                reqwest::Body::wrap_stream(futures::stream::iter(chunks))
            } else {
                reqwest::Body::from(big.clone())
            };
            let ty = if method == reqwest::Method::PATCH {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            let (code, status) = send(method.clone(), url.clone(), ty, body).await;
            assert_eq!(code, 413, "{method} {url} chunked={chunked}: {status}");
            assert_eq!(status["reason"], "RequestEntityTooLarge");
            assert_eq!(
                status["message"],
                format!("Request entity too large: limit is {limit}")
            );
        }
    }
    // Under the limit is served.
    let small = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one"},
        "data": {"k": "x".repeat(limit - 200)}});
    let r = client()
        .post(format!("{}{CONFIGMAPS}", s.admin))
        .json(&small)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    s.stop().await;
}

/// `depth` levels of `open`, a scalar, then `depth` of `close`.
fn nested(open: &str, scalar: &str, close: &str, depth: usize) -> String {
    let mut out = String::with_capacity(depth * (open.len() + close.len()) + scalar.len());
    for _ in 0..depth {
        out.push_str(open);
    }
    out.push_str(scalar);
    for _ in 0..depth {
        out.push_str(close);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_bodies_are_a_clear_400_and_never_overflow_the_stack() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(Settings::default()).await;
    let created = client()
        .post(format!("{}{CONFIGMAPS}", s.admin))
        .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let depth = 100_000;
    let arrays = nested("[", "1", "]", depth);
    let objects = nested("{\"a\":", "1", "}", depth);
    let in_cm = |inner: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"deep","labels":{inner}}}}}"#
        )
    };
    let post = format!("{}{CONFIGMAPS}", s.admin);
    let one = format!("{}{CONFIGMAPS}/one", s.admin);
    let apply = format!("{one}?fieldManager=t");
    let yaml_block = {
        // Block mappings nested 2,000 deep (indentation makes deeper ones huge).
        let mut y =
            String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\ndata:\n");
        for i in 0..2000 {
            y.push_str(&" ".repeat(2 + i));
            y.push_str("a:\n");
        }
        y
    };
    let cases: Vec<(&str, reqwest::Method, &String, &str, String)> = vec![
        (
            "create, arrays",
            reqwest::Method::POST,
            &post,
            "application/json",
            in_cm(&arrays),
        ),
        (
            "create, objects",
            reqwest::Method::POST,
            &post,
            "application/json",
            in_cm(&objects),
        ),
        (
            "create, bare arrays",
            reqwest::Method::POST,
            &post,
            "application/json",
            arrays.clone(),
        ),
        (
            "update, objects",
            reqwest::Method::PUT,
            &one,
            "application/json",
            in_cm(&objects),
        ),
        (
            "merge patch",
            reqwest::Method::PATCH,
            &one,
            "application/merge-patch+json",
            in_cm(&objects),
        ),
        (
            "strategic merge patch",
            reqwest::Method::PATCH,
            &one,
            "application/strategic-merge-patch+json",
            in_cm(&arrays),
        ),
        (
            "json patch",
            reqwest::Method::PATCH,
            &one,
            "application/json-patch+json",
            format!(r#"[{{"op":"add","path":"/data","value":{objects}}}]"#),
        ),
        (
            "apply, JSON",
            reqwest::Method::PATCH,
            &apply,
            "application/apply-patch+yaml",
            in_cm(&objects),
        ),
        (
            "apply, YAML flow",
            reqwest::Method::PATCH,
            &apply,
            "application/apply-patch+yaml",
            in_cm(&arrays),
        ),
        (
            "apply, YAML block",
            reqwest::Method::PATCH,
            &apply,
            "application/apply-patch+yaml",
            yaml_block.clone(),
        ),
        (
            "create, YAML flow",
            reqwest::Method::POST,
            &post,
            "application/yaml",
            nested("[", "1", "]", depth),
        ),
        (
            "create, YAML block",
            reqwest::Method::POST,
            &post,
            "application/yaml",
            yaml_block.clone(),
        ),
    ];
    for (what, method, url, ty, body) in cases {
        let (code, status) = send(method, url.clone(), ty, body).await;
        assert!(code == 400 || code == 422, "{what}: {code} {status}");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.contains("recursion limit")
                || message.contains("depth")
                || message.contains("nesting"),
            "{what}: the message does not say the body is nested too deep: {message}"
        );
    }
    // The server is still there, and the object unchanged.
    let r = client().get(&one).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let object: Value = r.json().await.unwrap();
    assert!(object.get("data").is_none(), "{object}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_labels_and_annotations_are_invalid_as_kubernetes_says() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(Settings::default()).await;
    let post = format!("{}{CONFIGMAPS}", s.admin);
    let cm = |metadata: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}).to_string()
    };
    let cases = [
        (
            "a label value of 64 characters",
            cm(json!({"name": "a", "labels": {"k": "v".repeat(64)}})),
            "metadata.labels",
            "must be no more than 63 characters",
        ),
        (
            "a label value of 1 MiB",
            cm(json!({"name": "a", "labels": {"k": "v".repeat(1 << 20)}})),
            "metadata.labels",
            "must be no more than 63 characters",
        ),
        (
            "a label key name of 64 characters",
            cm(json!({"name": "a", "labels": {"k".repeat(64): "v"}})),
            "metadata.labels",
            "name part must be no more than 63 characters",
        ),
        (
            "annotations over 256 KiB in total",
            cm(
                json!({"name": "a", "annotations": {"a": "x".repeat(128 * 1024), "b": "y".repeat(128 * 1024)}}),
            ),
            "metadata.annotations",
            "Too long: may not be more than 262144 bytes",
        ),
    ];
    for (what, body, field, words) in cases {
        let (code, status) = send(
            reqwest::Method::POST,
            post.clone(),
            "application/json",
            body,
        )
        .await;
        assert_eq!(code, 422, "{what}: {status}");
        assert_eq!(status["reason"], "Invalid", "{what}");
        let causes = status["details"]["causes"].as_array().unwrap();
        assert!(
            causes
                .iter()
                .any(|c| c["field"] == field && c["message"].as_str().unwrap().contains(words)),
            "{what}: {status:.600}"
        );
    }
    // At the limits it is fine: a 63-character value, annotations just under 256 KiB.
    let body = cm(json!({"name": "ok", "labels": {"k": "v".repeat(63)},
        "annotations": {"a": "x".repeat(256 * 1024 - 10)}}));
    let r = client()
        .post(&post)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_body_is_400() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(Settings::default()).await;
    let post = format!("{}{CONFIGMAPS}", s.admin);
    let mut body =
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"u"},"data":{"k":""#.to_vec();
    body.extend_from_slice(b"\xff\xfe\xc3\x28");
    body.extend_from_slice(br#""}}"#);
    for ty in ["application/json", "application/yaml"] {
        let (code, status) = send(reqwest::Method::POST, post.clone(), ty, body.clone()).await;
        assert_eq!(code, 400, "{ty}: {status}");
        assert_eq!(status["reason"], "BadRequest");
    }
    let (code, _) = send(
        reqwest::Method::PATCH,
        format!("{post}/u"),
        "application/merge-patch+json",
        body.clone(),
    )
    .await;
    assert!(code == 400 || code == 404, "{code}");
    assert_eq!(
        client()
            .get(format!("{post}/u"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_items_in_a_body_get_a_clear_answer_in_bounded_memory() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(Settings::default()).await;
    let post = format!("{}{CONFIGMAPS}", s.admin);
    let before = resident_kib();
    // A ConfigMap with a million keys: ~15 MB, over the 3 MiB limit; refused without reading
    // it all.
    let mut million =
        String::from(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"},"data":{"#);
    for i in 0..1_000_000 {
        if i > 0 {
            million.push(',');
        }
        million.push_str(&format!("\"k{i}\":\"\""));
    }
    million.push_str("}}");
    let (code, status) = send(
        reqwest::Method::POST,
        post.clone(),
        "application/json",
        million,
    )
    .await;
    assert_eq!(code, 413, "{status}");
    // A List of a million items: the same.
    let mut list = String::from(r#"{"apiVersion":"v1","kind":"List","items":["#);
    for i in 0..1_000_000 {
        if i > 0 {
            list.push(',');
        }
        list.push_str(&format!("{{\"k\":{i}}}"));
    }
    list.push_str("]}");
    let (code, status) = send(
        reqwest::Method::POST,
        post.clone(),
        "application/json",
        list,
    )
    .await;
    assert_eq!(code, 413, "{status}");
    // As many keys as fit in the limit (~150,000) with 8-byte values: over a ConfigMap's
    // 1 MiB of values, so 422.
    let mut many =
        String::from(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"},"data":{"#);
    let mut i = 0;
    while many.len() < 3 * 1024 * 1024 - 100 {
        if i > 0 {
            many.push(',');
        }
        many.push_str(&format!("\"k{i}\":\"01234567\""));
        i += 1;
    }
    many.push_str("}}");
    let (code, status) = send(
        reqwest::Method::POST,
        post.clone(),
        "application/json",
        many,
    )
    .await;
    assert_eq!(code, 422, "{:.300}", status.to_string());
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("Too long: may not be more than 1048576 bytes"),
        "{:.300}",
        status.to_string()
    );
    // Bounded: the test's own ~30 MB of bodies and one decoded body of 250,000 keys.
    let grown = resident_kib().saturating_sub(before);
    assert!(grown < 256 * 1024, "resident memory grew by {grown} KiB");
    s.stop().await;
}

/// Opens `request` (raw HTTP/1.1) on `addr` and leaves it unfinished.
async fn hold(addr: std::net::SocketAddr, request: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_the_in_flight_limits_are_429_with_retry_after() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(Settings {
        max_requests_inflight: 1,
        max_mutating_requests_inflight: 1,
        ..Settings::default()
    })
    .await;
    let alice_addr: std::net::SocketAddr = s.alice.trim_start_matches("http://").parse().unwrap();
    let cm =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});

    // A create whose body never finishes holds the one mutating seat.
    let held = hold(
        alice_addr,
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{",
    )
    .await;
    wait_for("the held write", || s.api.limits.in_flight().1 == 1).await;
    let r = client()
        .post(format!("{}{CONFIGMAPS}", s.alice))
        .json(&cm("b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["retry-after"], "1");
    let (code, status) = status_of(r).await;
    assert_eq!(code, 429);
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    assert_eq!(
        status["message"],
        "Too many requests, please try again later."
    );
    // Reads have their own limit; watches (long-running) and system:masters take no seat.
    let r = client()
        .get(format!("{}{CONFIGMAPS}", s.alice))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client()
        .get(format!("{}{CONFIGMAPS}?watch=1&timeoutSeconds=1", s.alice))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    let r = client()
        .post(format!("{}{CONFIGMAPS}", s.admin))
        .json(&cm("admin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // The seat comes back when the held request ends.
    drop(held);
    wait_for("the seat back", || s.api.limits.in_flight().1 == 0).await;
    let r = client()
        .post(format!("{}{CONFIGMAPS}", s.alice))
        .json(&cm("b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    // The same for reads: a list whose (odd, but allowed) body never finishes.
    let held = hold(
        alice_addr,
        "GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n",
    )
    .await;
    wait_for("the held read", || s.api.limits.in_flight().0 == 1).await;
    let r = client()
        .get(format!("{}{CONFIGMAPS}/b", s.alice))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(status_of(r).await.0, 429);
    let r = client()
        .post(format!("{}{CONFIGMAPS}", s.alice))
        .json(&cm("c"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    drop(held);
    wait_for("the read seat back", || s.api.limits.in_flight().0 == 0).await;
    let r = client()
        .get(format!("{}{CONFIGMAPS}/b", s.alice))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_over_the_per_user_cap_are_429_with_retry_after() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(Settings {
        max_watches_per_user: 2,
        ..Settings::default()
    })
    .await;
    let watch = |base: &str| format!("{base}{CONFIGMAPS}?watch=1");
    let first = client().get(watch(&s.alice)).send().await.unwrap();
    let second = client().get(watch(&s.alice)).send().await.unwrap();
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let r = client().get(watch(&s.alice)).send().await.unwrap();
    assert_eq!(r.headers()["retry-after"], "1");
    let (code, status) = status_of(r).await;
    assert_eq!(code, 429);
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("\"alice\" has 2 open"),
        "{status}"
    );
    // Another user is not affected.
    let admin = client().get(watch(&s.admin)).send().await.unwrap();
    assert_eq!(admin.status(), 200);
    // A watch that ends gives its place back (the server notices on its next write).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    loop {
        n += 1;
        client()
            .post(format!("{}{CONFIGMAPS}", s.admin))
            .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{n}")}}))
            .send()
            .await
            .unwrap();
        let r = client().get(watch(&s.alice)).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ended watch never gave its place back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(second);
    drop(admin);
    s.stop().await;
}

/// Limits under which a watch stalls soon: 64 KiB queued for one second.
fn stalling() -> Settings {
    Settings {
        watch_buffer_bytes: 64 * 1024,
        watch_stall_timeout: Duration::from_secs(1),
        ..Settings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_client_never_reads_is_closed_and_the_others_carry_on() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(stalling()).await;
    // A raw client with a small receive buffer asks for a watch and never reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(s.admin_addr).await.unwrap();
    stalled
        .write_all(b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // A well-behaved watcher reads everything.
    let mut reader = client()
        .get(format!("{}{CONFIGMAPS}?watch=1&resourceVersion=0", s.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(reader.status(), 200);
    let reading = tokio::spawn(async move {
        let mut seen = 0;
        let mut buffer = Vec::new();
        while seen < 200 {
            let chunk = reader
                .chunk()
                .await
                .unwrap()
                .expect("the reading watcher ended");
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let event: Value = serde_json::from_slice(&line).unwrap();
                if event["type"] == "ADDED"
                    && event["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .starts_with('w')
                {
                    seen += 1;
                }
            }
        }
        seen
    });
    let before = resident_kib();
    let writes = 200;
    let value = "x".repeat(64 * 1024);
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..writes {
        let t = Instant::now();
        let r = client()
            .post(format!("{}{CONFIGMAPS}", s.admin))
            .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w{i}")}, "data": {"v": value}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        slowest = slowest.max(t.elapsed());
    }
    eprintln!(
        "{writes} writes of 64 KiB in {:?}, slowest {slowest:?}",
        started.elapsed()
    );
    assert!(slowest < Duration::from_secs(2), "a write took {slowest:?}");
    // The reading watcher saw every write.
    let seen = tokio::time::timeout(Duration::from_secs(30), reading)
        .await
        .expect("the reading watcher stalled")
        .unwrap();
    assert_eq!(seen, writes);
    // Longer than the stall timeout: the stalled watch's buffer has stayed full that long.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The stalled watch is closed by the server: its client reads what was in flight, then
    // the end of the connection.
    let mut sink = vec![0u8; 1 << 16];
    let mut total = 0usize;
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match stalled.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the stalled watch is still open after {total} bytes"
    );
    assert!(
        total < writes * value.len(),
        "the stalled watch got all {total} bytes: it was not closed early"
    );
    let grown = resident_kib().saturating_sub(before);
    eprintln!("stalled client read {total} bytes before the close; RSS grew {grown} KiB");
    // 12.5 MiB written, kept in the watch cache and the log; no per-watch pile-up.
    assert!(grown < 128 * 1024, "resident memory grew by {grown} KiB");
    s.stop().await;
}

/// Waits for the watch that feeds `seen` to show object `name`.
async fn expect_seen(seen: &mut tokio::sync::mpsc::UnboundedReceiver<String>, name: &str) {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(seen) = seen.recv().await {
            if seen == name {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "the reading watch never showed {name}");
}

/// Over HTTP/2 a client's watches and requests share one connection (client-go's way): a watch it
/// does not read is closed alone, by a reset of its stream, and the client's other watch on the
/// same connection carries on past the stall timeout.
#[tokio::test]
async fn over_http2_a_watch_not_read_is_closed_alone() {
    let _turn = MEMORY_BOUND.lock().await;
    let s = Server::start(stalling()).await;
    crate::tls::install_crypto_provider();
    // A small stream window, so that the watch not read fills it soon.
    let h2 = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .http2_initial_stream_window_size(16 * 1024)
        .http2_initial_connection_window_size(64 * 1024 * 1024)
        .build()
        .unwrap();
    let watch = format!("{}{CONFIGMAPS}?watch=1&resourceVersion=0", s.admin);
    let mut stalled = h2.get(&watch).send().await.unwrap();
    let mut reader = h2.get(&watch).send().await.unwrap();
    assert_eq!(stalled.version(), reqwest::Version::HTTP_2);
    assert_eq!(reader.status(), 200);
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let reading = tokio::spawn(async move {
        let mut buffer = Vec::new();
        loop {
            let chunk = match reader.chunk().await {
                Ok(Some(chunk)) => chunk,
                other => return format!("the reading watch ended: {other:?}"),
            };
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let event: Value = serde_json::from_slice(&line).unwrap();
                let name = event["object"]["metadata"]["name"].as_str().unwrap_or("");
                let _ = seen_tx.send(name.to_string());
            }
        }
    });
    let create = |name: String, value: String| {
        let h2 = h2.clone();
        let url = format!("{}{CONFIGMAPS}", s.admin);
        async move {
            let r = h2
                .post(url)
                .json(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name}, "data": {"v": value}}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
        }
    };
    let writes = 100;
    let value = "x".repeat(64 * 1024);
    for i in 0..writes {
        create(format!("w{i}"), value.clone()).await;
    }
    expect_seen(&mut seen_rx, &format!("w{}", writes - 1)).await;
    // Past the stall timeout: the watch not read has been closed; the other still reads.
    tokio::time::sleep(Duration::from_secs(3)).await;
    create("after".into(), "y".into()).await;
    expect_seen(&mut seen_rx, "after").await;
    if reading.is_finished() {
        panic!("{}", reading.await.unwrap());
    }
    // The stalled watch, read now: what was queued, then its end (a reset stream), not all of it.
    let mut total = 0usize;
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match stalled.chunk().await {
                Ok(Some(chunk)) => total += chunk.len(),
                Ok(None) | Err(_) => return,
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the stalled watch is still open after {total} bytes"
    );
    assert!(
        total < writes * value.len(),
        "the stalled watch got all {total} bytes: it was not closed"
    );
    reading.abort();
    s.stop().await;
}

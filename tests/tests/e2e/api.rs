//! The API over HTTPS as client libraries see it: the failure modes (401, 409, 410, 413, 415,
//! 422), list pagination and past reads, watches from a revision, graceful deletion, and a
//! restart after a crash.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use skiff_tests::TestCluster;

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    fn new(cluster: &TestCluster) -> Client {
        Client {
            http: cluster.http(),
            base: cluster.server.clone(),
            token: cluster.token.clone(),
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let code = response.status().as_u16();
        let text = response.text().await.expect("body");
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PUT, path, Some(body)).await
    }

    async fn delete(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::DELETE, path, Some(body)).await
    }

    /// Reads a watch stream until `enough` says so or `limit` passes; returns the events.
    async fn watch(
        &self,
        path: &str,
        limit: Duration,
        enough: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("watch request");
        assert_eq!(response.status().as_u16(), 200, "watch refused");
        let mut stream = response.bytes_stream();
        let mut buffer = Vec::new();
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        while !enough(&events) {
            let next = tokio::time::timeout_at(deadline, stream.next()).await;
            let Ok(Some(Ok(chunk))) = next else { break };
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                events.push(serde_json::from_slice(&line).expect("a JSON watch event"));
            }
        }
        events
    }
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}})
}

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn unauthenticated_requests_get_401_but_health_does_not() {
    let cluster = TestCluster::start(&[]);
    let http = cluster.http();
    let response = http
        .get(format!("{}/api/v1/namespaces", cluster.server))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Unauthorized");
    let wrong = http
        .get(format!("{}/api/v1/namespaces", cluster.server))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    for open in ["/version", "/healthz", "/livez", "/readyz"] {
        let response = http
            .get(format!("{}{open}", cluster.server))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{open}");
    }
}

#[tokio::test]
async fn bad_requests_get_the_right_status_and_write_nothing() {
    let cluster = TestCluster::start(&[]);
    let client = Client::new(&cluster);
    let (_, before) = client.get(CM).await;
    let rv_before = before["metadata"]["resourceVersion"].clone();

    // 413: a body over 3 MiB.
    let mut huge = configmap("huge");
    huge["data"]["k"] = json!("x".repeat(3 * 1024 * 1024 + 10));
    let (code, status) = client.post(CM, huge).await;
    assert_eq!(code, 413, "{status}");

    // 400: not JSON.
    let response = client
        .http
        .post(format!("{}{CM}", client.base))
        .bearer_auth(&client.token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);

    // 422: an invalid name, with the field path in the causes.
    let (code, status) = client.post(CM, configmap("Bad_Name")).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");

    // 404 for a kind the server does not serve, and for a missing object.
    let (code, status) = client
        .get("/apis/example.com/v1/namespaces/default/widgets")
        .await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(status["kind"], "Status");
    let (code, status) = client.get(&format!("{CM}/nope")).await;
    assert_eq!(code, 404);
    assert_eq!(status["message"], "configmaps \"nope\" not found");

    // 415: a patch with a content type that is no patch type.
    let response = client
        .http
        .patch(format!("{}{CM}/nope", client.base))
        .bearer_auth(&client.token)
        .header("content-type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);

    // Nothing above was written.
    let (_, after) = client.get(CM).await;
    assert_eq!(after["metadata"]["resourceVersion"], rv_before);
    assert_eq!(after["items"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn stale_updates_conflict_and_duplicates_already_exist() {
    let cluster = TestCluster::start(&[]);
    let client = Client::new(&cluster);
    let (code, created) = client.post(CM, configmap("a")).await;
    assert_eq!(code, 201);
    let (code, status) = client.post(CM, configmap("a")).await;
    assert_eq!(code, 409);
    assert_eq!(status["reason"], "AlreadyExists");

    let mut first = created.clone();
    first["data"]["k"] = json!("one");
    let (code, updated) = client.put(&format!("{CM}/a"), first).await;
    assert_eq!(code, 200, "{updated}");
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    let mut stale = created.clone();
    stale["data"]["k"] = json!("two");
    let (code, status) = client.put(&format!("{CM}/a"), stale).await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(status["reason"], "Conflict");
    let (_, current) = client.get(&format!("{CM}/a")).await;
    assert_eq!(current["data"]["k"], "one");
}

#[tokio::test]
async fn lists_paginate_at_one_revision_and_read_the_past() {
    let cluster = TestCluster::start(&[]);
    let client = Client::new(&cluster);
    for i in 0..25 {
        client.post(CM, configmap(&format!("cm-{i:02}"))).await;
    }
    let (_, page1) = client.get(&format!("{CM}?limit=10")).await;
    assert_eq!(page1["items"].as_array().unwrap().len(), 10);
    assert_eq!(page1["metadata"]["remainingItemCount"], 15);
    let token = page1["metadata"]["continue"].as_str().unwrap().to_string();
    let list_rv = page1["metadata"]["resourceVersion"].clone();
    // Writes after the first page do not show in later pages.
    client.post(CM, configmap("cm-99")).await;
    let mut names: Vec<String> = Vec::new();
    let mut remaining = Vec::new();
    let mut next = Some(token);
    while let Some(token) = next {
        let (code, page) = client.get(&format!("{CM}?limit=10&continue={token}")).await;
        assert_eq!(code, 200, "{page}");
        assert_eq!(page["metadata"]["resourceVersion"], list_rv);
        remaining.push(page["metadata"]["remainingItemCount"].as_u64());
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
        );
        next = page["metadata"]["continue"].as_str().map(str::to_string);
    }
    assert_eq!(names.len(), 15);
    assert!(!names.contains(&"cm-99".to_string()));
    // The count is of the list's revision too: the write after the first page is not in it.
    assert_eq!(remaining, [Some(5), None]);

    // resourceVersionMatch=Exact reads the list as it was.
    let (code, past) = client
        .get(&format!(
            "{CM}?resourceVersion={}&resourceVersionMatch=Exact",
            list_rv.as_str().unwrap()
        ))
        .await;
    assert_eq!(code, 200, "{past}");
    assert_eq!(past["items"].as_array().unwrap().len(), 25);
    let (_, now) = client.get(CM).await;
    assert_eq!(now["items"].as_array().unwrap().len(), 26);

    // Selectors filter lists; a bad selector is a 400.
    let (_, selected) = client
        .get(&format!("{CM}?fieldSelector=metadata.name%3Dcm-03"))
        .await;
    assert_eq!(selected["items"].as_array().unwrap().len(), 1);
    let (code, _) = client.get(&format!("{CM}?labelSelector=a%20in%20(")).await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn watches_start_at_a_revision_and_a_compacted_start_is_410() {
    let cluster = TestCluster::start(&["--history-revisions", "5", "--compact-interval", "200ms"]);
    let client = Client::new(&cluster);
    let (_, first) = client.post(CM, configmap("w0")).await;
    let start = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    for i in 1..4 {
        client.post(CM, configmap(&format!("w{i}"))).await;
    }
    // From a revision: exactly the later changes, in order.
    let events = client
        .watch(
            &format!("{CM}?watch=1&resourceVersion={start}"),
            Duration::from_secs(10),
            |e| e.len() >= 3,
        )
        .await;
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["w1", "w2", "w3"]);
    assert!(events.iter().all(|e| e["type"] == "ADDED"));

    // Churn until the first revision is compacted away, then watch from it.
    for i in 0..20 {
        client.post(CM, configmap(&format!("x{i}"))).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = client
        .watch(
            &format!("{CM}?watch=1&resourceVersion={start}"),
            Duration::from_secs(10),
            |e| !e.is_empty(),
        )
        .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

#[tokio::test]
async fn pods_on_a_node_delete_gracefully_and_bindings_happen_once() {
    let cluster = TestCluster::start(&[]);
    let client = Client::new(&cluster);
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let (code, _) = client.post(pods, pod).await;
    assert_eq!(code, 201);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    let (code, status) = client
        .post(&format!("{pods}/p/binding"), binding.clone())
        .await;
    assert_eq!(code, 201, "{status}");
    let (code, status) = client.post(&format!("{pods}/p/binding"), binding).await;
    assert_eq!(code, 409, "{status}");
    let (_, bound) = client.get(&format!("{pods}/p")).await;
    assert_eq!(bound["spec"]["nodeName"], "n1");

    // On a node, a delete waits for the kubelet: it marks the pod.
    let (code, marked) = client.delete(&format!("{pods}/p"), json!({})).await;
    assert!(code == 200 || code == 202, "{code}");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 30);
    let (code, _) = client.get(&format!("{pods}/p")).await;
    assert_eq!(code, 200);
    // The kubelet's confirmation (grace period 0) removes it.
    let (code, _) = client
        .delete(&format!("{pods}/p"), json!({"gracePeriodSeconds": 0}))
        .await;
    assert_eq!(code, 200);
    let (code, _) = client.get(&format!("{pods}/p")).await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn a_crash_loses_no_acknowledged_write() {
    let mut cluster = TestCluster::start(&[]);
    let rvs = {
        let client = Client::new(&cluster);
        let mut rvs = Vec::new();
        for i in 0..20 {
            let (code, created) = client.post(CM, configmap(&format!("c{i}"))).await;
            assert_eq!(code, 201);
            rvs.push(
                created["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            );
        }
        rvs
    };
    cluster.restart_after_crash();
    let client = Client::new(&cluster);
    let (_, list) = client.get(CM).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 20);
    let (_, next) = client.post(CM, configmap("after")).await;
    let rv: u64 = next["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        rv > *rvs.last().unwrap(),
        "revisions continue after a restart"
    );
}

#[test]
fn python_client_lists_creates_and_watches() {
    let cluster = TestCluster::start(&[]);
    let script = r#"
import sys, threading, time
from kubernetes import client, config, watch
config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()
names = [n.metadata.name for n in v1.list_namespace().items]
assert "default" in names and "kube-system" in names, names
v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py1"), data={"x": "y"}))
rv = v1.list_namespaced_config_map("default").metadata.resource_version
def later():
    time.sleep(1)
    v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py2")))
threading.Thread(target=later).start()
seen = []
w = watch.Watch()
for ev in w.stream(v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=20):
    seen.append((ev["type"], ev["object"].metadata.name))
    if ev["object"].metadata.name == "py2":
        w.stop()
assert seen == [("ADDED", "py2")], seen
print("ok")
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&cluster.kubeconfig)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_kubernetes_service_points_at_the_api_server() {
    let cluster = TestCluster::start(&[]);
    let client = Client::new(&cluster);
    let port: u64 = cluster
        .server
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the server URL has a port");
    let (code, service) = client
        .get("/api/v1/namespaces/default/services/kubernetes")
        .await;
    assert_eq!(code, 200, "{service}");
    assert_eq!(service["spec"]["clusterIP"], "127.96.0.1");
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], port);
    let (_, endpoints) = client
        .get("/api/v1/namespaces/default/endpoints/kubernetes")
        .await;
    assert_eq!(endpoints["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(endpoints["subsets"][0]["ports"][0]["port"], port);
    let (_, slice) = client
        .get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")
        .await;
    assert_eq!(slice["endpoints"][0]["addresses"][0], "127.0.0.1");
    assert_eq!(slice["ports"][0]["port"], port);
    // The first address stays reserved: a service asking for it is refused.
    let mut taken = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "taken"},
                           "spec": {"clusterIP": "127.96.0.1", "ports": [{"port": 80}]}});
    let (code, _) = client
        .post("/api/v1/namespaces/default/services", taken.take())
        .await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn many_watchers_of_one_resource_each_see_every_change_in_order() {
    let cluster = TestCluster::start(&[]);
    let client = Client::new(&cluster);
    let (_, list) = client.get(CM).await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Watchers with and without a selector, all from the same revision (one shared feed).
    let mut watches = Vec::new();
    for i in 0..40 {
        let path = if i % 2 == 0 {
            format!("{CM}?watch=1&resourceVersion={rv}")
        } else {
            format!("{CM}?watch=1&resourceVersion={rv}&labelSelector=even%3Dtrue")
        };
        let client = Client::new(&cluster);
        watches.push(tokio::spawn(async move {
            let all = i % 2 == 0;
            client
                .watch(&path, Duration::from_secs(20), |e| {
                    e.len() >= if all { 10 } else { 5 }
                })
                .await
        }));
    }
    // Let the watches open before writing (a late one still starts at `rv`).
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..10 {
        let mut cm = configmap(&format!("fan-{i}"));
        cm["metadata"]["labels"] = json!({"even": (i % 2 == 0).to_string()});
        let (code, _) = client.post(CM, cm).await;
        assert_eq!(code, 201);
    }
    for (i, watch) in watches.into_iter().enumerate() {
        let events = watch.await.unwrap();
        let names: Vec<&str> = events
            .iter()
            .map(|e| e["object"]["metadata"]["name"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = (0..10)
            .filter(|n| i % 2 == 0 || n % 2 == 0)
            .map(|n| format!("fan-{n}"))
            .collect();
        assert_eq!(names, expected, "watcher {i}");
        assert!(events.iter().all(|e| e["type"] == "ADDED"));
    }
}

/// One store of Events, two APIs: an Event written through `events.k8s.io/v1` is a core Event
/// with the fields renamed, and the other way round, in reads, lists and watches; creates
/// through `events.k8s.io/v1` answer to its strict rules.
#[tokio::test]
async fn events_are_one_store_read_and_written_through_both_apis() {
    let cluster = TestCluster::start(&[]);
    let client = Client::new(&cluster);
    const NEW: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
    const OLD: &str = "/api/v1/namespaces/default/events";
    let (code, discovered) = client.get("/apis/events.k8s.io/v1").await;
    assert_eq!(code, 200, "{discovered}");
    assert_eq!(discovered["resources"][0]["name"], "events", "{discovered}");

    let (code, created) = client
        .post(
            NEW,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                   "metadata": {"name": "web.scaled"},
                   "eventTime": "2026-12-06T06:00:00.000000Z",
                   "reportingController": "example.com/scaler", "reportingInstance": "scaler-1",
                   "action": "Scale", "reason": "Scaled", "type": "Normal", "note": "to 3",
                   "regarding": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "namespace": "default"}}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["note"], "to 3");
    let (code, core) = client.get(&format!("{OLD}/web.scaled")).await;
    assert_eq!(code, 200, "{core}");
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["message"], "to 3");
    assert_eq!(core["reportingComponent"], "example.com/scaler");
    assert_eq!(
        core["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    // A core Event, as kubelets and older clients write them, read through the new API.
    let (code, _) = client
        .post(
            OLD,
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "pod.pulled"},
                   "involvedObject": {"kind": "Pod", "name": "pod", "namespace": "default"},
                   "reason": "Pulled", "message": "pulled", "type": "Normal", "count": 2,
                   "source": {"component": "kubelet", "host": "n1"}}),
        )
        .await;
    assert_eq!(code, 201);
    let (code, list) = client
        .get(&format!("{NEW}?fieldSelector=reason%3DPulled"))
        .await;
    assert_eq!(code, 200, "{list}");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["apiVersion"], "events.k8s.io/v1");
    assert_eq!(items[0]["deprecatedSource"]["component"], "kubelet");
    assert_eq!(items[0]["deprecatedCount"], 2);
    assert_eq!(items[0]["regarding"]["name"], "pod");
    let watched = client
        .watch(
            &format!("{NEW}?watch=true&resourceVersion=0"),
            Duration::from_secs(10),
            |events| events.len() >= 2,
        )
        .await;
    assert_eq!(watched.len(), 2, "{watched:?}");
    assert!(
        watched
            .iter()
            .all(|e| e["object"]["apiVersion"] == "events.k8s.io/v1"
                && e["object"].get("message").is_none()),
        "{watched:?}"
    );

    // The strict rules of the new API: no deprecated fields, a known type.
    let (code, status) = client
        .post(
            NEW,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "bad"},
                   "eventTime": "2026-12-06T06:00:00.000000Z",
                   "reportingController": "example.com/c", "reportingInstance": "c-1",
                   "action": "Act", "reason": "Acted", "type": "Loud", "deprecatedCount": 4,
                   "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}}),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("type: Invalid value: \"\": has invalid value: Loud")
            && message.contains("deprecatedCount: Invalid value: \"\": needs to be unset"),
        "{message}"
    );
    let (code, _) = client.get(&format!("{OLD}/bad")).await;
    assert_eq!(code, 404, "nothing of a refused Event is written");
}

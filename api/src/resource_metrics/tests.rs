//! The metrics objects made from summaries, then requests through the authenticated routes to a
//! live fake kubelet on loopback and a dead one.

use std::net::SocketAddr;

use serde_json::{Value, json};
use skiff_meta::stats::{NodeStats, PodReference};
use warp::Filter;

use super::*;
use crate::tls::testing::json as body_json;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).unwrap()
}

fn cpu(rate: Option<u64>, second: i64) -> Option<CpuStats> {
    Some(CpuStats {
        time: at(second),
        usage_nano_cores: rate,
        usage_core_nano_seconds: Some(1_000_000_000),
        window_nanos: rate.map(|_| 10_500_000_000),
    })
}

fn memory(bytes: u64) -> Option<MemoryStats> {
    Some(MemoryStats {
        time: at(0),
        usage_bytes: Some(bytes * 2),
        working_set_bytes: Some(bytes),
        rss_bytes: None,
    })
}

fn container(name: &str, rate: Option<u64>, bytes: u64) -> ContainerStats {
    ContainerStats {
        name: name.into(),
        start_time: Some(at(-100)),
        cpu: cpu(rate, 0),
        memory: memory(bytes),
    }
}

fn pod_stats(name: &str, uid: &str, containers: Vec<ContainerStats>) -> PodStats {
    PodStats {
        pod_ref: PodReference {
            name: name.into(),
            namespace: "default".into(),
            uid: uid.into(),
        },
        start_time: Some(at(-100)),
        containers,
        cpu: None,
        memory: None,
    }
}

#[test]
fn durations_are_written_as_go_writes_them() {
    for (nanos, want) in [
        (0, "0s"),
        (999, "999ns"),
        (1_500, "1.5µs"),
        (250_000_000, "250ms"),
        (1_000_000_000, "1s"),
        (10_500_000_000, "10.5s"),
        (10_062_457_000, "10.062457s"),
        (90_000_000_000, "1m30s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_000_000_000, "1h2m3s"),
    ] {
        assert_eq!(go_duration(nanos), want, "{nanos}");
    }
}

#[test]
fn a_node_has_metrics_once_its_cpu_has_a_rate() {
    let node = json!({"metadata": {"name": "n1", "labels": {"zone": "a"}, "uid": "x"}});
    let mut summary = Summary {
        node: NodeStats {
            node_name: "n1".into(),
            start_time: None,
            cpu: cpu(None, 5),
            memory: memory(3 << 30),
        },
        pods: Vec::new(),
    };
    assert_eq!(node_object(&node, &summary, at(9)), None);
    summary.node.cpu = cpu(Some(1_250_000_000), 5);
    let metrics = node_object(&node, &summary, at(9)).unwrap();
    assert_eq!(
        metrics,
        json!({
            "kind": "NodeMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": "n1", "labels": {"zone": "a"},
                         "creationTimestamp": "2027-01-15T08:00:09Z"},
            "timestamp": "2027-01-15T08:00:05Z",
            "window": "10.5s",
            "usage": {"cpu": "1250m", "memory": "3Gi"},
        })
    );
    summary.node.memory = None;
    assert_eq!(node_object(&node, &summary, at(9)), None);
}

#[test]
fn a_pod_has_metrics_only_when_every_container_has_a_rate() {
    let pod = json!({"metadata": {"name": "web", "namespace": "default", "uid": "u1",
                                  "labels": {"app": "web"}}});
    let full = pod_stats(
        "web",
        "u1",
        vec![
            container("app", Some(123_456_789), 5 << 20),
            container("sidecar", Some(0), 1_234_567),
        ],
    );
    let metrics = pod_object(&pod, &full, at(9)).unwrap();
    assert_eq!(metrics["kind"], "PodMetrics");
    assert_eq!(metrics["metadata"]["namespace"], "default");
    assert_eq!(metrics["metadata"]["labels"]["app"], "web");
    assert_eq!(
        metrics["containers"],
        json!([
            {"name": "app", "usage": {"cpu": "123456789n", "memory": "5Mi"}},
            {"name": "sidecar", "usage": {"cpu": "0", "memory": "1234567"}},
        ])
    );
    assert_eq!(metrics["window"], "10.5s");

    let partial = pod_stats(
        "web",
        "u1",
        vec![container("app", Some(1), 1), container("late", None, 1)],
    );
    assert_eq!(pod_object(&pod, &partial, at(9)), None);
    assert_eq!(
        pod_object(&pod, &pod_stats("web", "u1", Vec::new()), at(9)),
        None
    );
}

/// A fake kubelet serving `summary` at `/stats/summary` to the API server's token only.
async fn kubelet(summary: Summary) -> SocketAddr {
    let route = warp::path!("stats" / "summary")
        .and(warp::header::optional::<String>("authorization"))
        .map(move |auth: Option<String>| {
            if auth.as_deref() != Some("Bearer kubelet-secret") {
                return warp::http::Response::builder()
                    .status(401)
                    .body(b"Unauthorized".to_vec())
                    .unwrap();
            }
            warp::http::Response::builder()
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&summary).unwrap())
                .unwrap()
        });
    crate::tls::testing::serve_loopback(route).await
}

/// The API server of these tests (kubelet credentials `kubelet-secret`), with the requests
/// they make.
struct Cluster(crate::tls::testing::Cluster);

impl Cluster {
    async fn new() -> Cluster {
        Cluster(crate::tls::testing::Cluster::new("metrics", "kubelet-secret").await)
    }

    async fn send(&self, method: &str, uri: &str, accept: &str, body: &str) -> (u16, Value) {
        let headers = [("content-type", "application/json"), ("accept", accept)];
        let response = self.0.send(method, uri, &headers, body).await;
        (response.status().as_u16(), body_json(&response))
    }

    async fn get(&self, uri: &str) -> (u16, Value) {
        self.send("GET", uri, "application/json", "").await
    }

    async fn create(&self, uri: &str, object: Value) {
        self.0.create(uri, object).await;
    }

    async fn node(&self, name: &str, port: u16, labels: Value) {
        self.create(
            "/api/v1/nodes",
            json!({
                "metadata": {"name": name, "labels": labels},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                },
            }),
        )
        .await;
    }

    async fn pod(&self, name: &str, node: &str, app: &str) -> String {
        self.create(
            "/api/v1/namespaces/default/pods",
            json!({
                "metadata": {"name": name, "labels": {"app": app}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            }),
        )
        .await;
        let (_, pod) = self
            .get(&format!("/api/v1/namespaces/default/pods/{name}"))
            .await;
        pod["metadata"]["uid"].as_str().unwrap().to_string()
    }
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn top_reads_the_kubelets_and_leaves_out_what_was_not_measured() {
    let cluster = Cluster::new().await;
    // n2's kubelet is gone: its port was bound and released.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let (_, discovery) = cluster.get("/apis/metrics.k8s.io/v1beta1").await;
    let resources: Vec<&str> = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(resources, ["nodes", "pods"]);

    cluster.node("n2", dead_port, json!({"zone": "b"})).await;
    let busy_uid;
    let idle_uid;
    {
        // The pods exist before the kubelet's summary can name their UIDs.
        busy_uid = cluster.pod("busy", "n1", "web").await;
        idle_uid = cluster.pod("idle", "n1", "db").await;
        cluster.pod("new", "n1", "web").await;
        cluster.pod("lost", "n2", "web").await;
    }
    let summary = Summary {
        node: NodeStats {
            node_name: "n1".into(),
            start_time: None,
            cpu: cpu(Some(1_500_000_000), 0),
            memory: memory(2 << 30),
        },
        pods: vec![
            pod_stats(
                "busy",
                &busy_uid,
                vec![container("c", Some(900_000_000), 64 << 20)],
            ),
            pod_stats(
                "idle",
                &idle_uid,
                vec![container("c", Some(1_000_000), 8 << 20)],
            ),
            // Measured once: no rate yet.
            pod_stats("new", "some-uid", vec![container("c", None, 1 << 20)]),
        ],
    };
    let port = kubelet(summary).await.port();
    cluster.node("n1", port, json!({"zone": "a"})).await;

    // Nodes: n1 measured; n2's kubelet does not answer, so n2 is absent, not zero.
    let (status, nodes) = cluster.get("/apis/metrics.k8s.io/v1beta1/nodes").await;
    assert_eq!(status, 200, "{nodes}");
    assert_eq!(nodes["kind"], "NodeMetricsList");
    assert_eq!(names(&nodes), ["n1"]);
    assert_eq!(
        nodes["items"][0]["usage"],
        json!({"cpu": "1500m", "memory": "2Gi"})
    );
    let (status, n1) = cluster.get("/apis/metrics.k8s.io/v1beta1/nodes/n1").await;
    assert_eq!((status, n1["kind"].as_str()), (200, Some("NodeMetrics")));
    let (status, n2) = cluster.get("/apis/metrics.k8s.io/v1beta1/nodes/n2").await;
    assert_eq!(status, 404, "{n2}");
    assert_eq!(n2["message"], "nodemetrics.metrics.k8s.io \"n2\" not found");
    let (status, _) = cluster.get("/apis/metrics.k8s.io/v1beta1/nodes/n9").await;
    assert_eq!(status, 404);
    let (_, zone_b) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=zone%3Db")
        .await;
    assert_eq!(names(&zone_b), Vec::<&str>::new());

    // Pods: those with a rate in every container; selectors pick among the pods.
    let (status, pods) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")
        .await;
    assert_eq!(status, 200, "{pods}");
    assert_eq!(pods["kind"], "PodMetricsList");
    assert_eq!(names(&pods), ["busy", "idle"]);
    assert_eq!(pods["items"][0]["containers"][0]["usage"]["cpu"], "900m");
    let (_, all) = cluster.get("/apis/metrics.k8s.io/v1beta1/pods").await;
    assert_eq!(names(&all), ["busy", "idle"]);
    let (_, web) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb")
        .await;
    assert_eq!(names(&web), ["busy"]);
    let (_, named) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?fieldSelector=metadata.name%3Didle")
        .await;
    assert_eq!(names(&named), ["idle"]);
    let (status, lost) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/lost")
        .await;
    assert_eq!(status, 404);
    assert_eq!(
        lost["message"],
        "podmetrics.metrics.k8s.io \"default/lost\" not found"
    );
    let (status, _) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/new")
        .await;
    assert_eq!(status, 404);
    let (status, busy) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy")
        .await;
    assert_eq!(status, 200);
    assert_eq!(busy["metadata"]["labels"]["app"], "web");

    // A Table, as `kubectl get podmetrics` asks for it.
    let (status, table) = cluster
        .send(
            "GET",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
            "application/json;as=Table;v=v1;g=meta.k8s.io",
            "",
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        table["rows"][0]["cells"],
        json!(["busy", "900m", "64Mi", "10.5s"])
    );

    // Only read: writes and watches are refused, and nothing is stored.
    let (status, _) = cluster
        .send(
            "POST",
            "/apis/metrics.k8s.io/v1beta1/nodes",
            "application/json",
            &json!({"metadata": {"name": "n1"}}).to_string(),
        )
        .await;
    assert_eq!(status, 405);
    let (status, _) = cluster
        .get("/apis/metrics.k8s.io/v1beta1/nodes?watch=true")
        .await;
    assert_eq!(status, 405);
}

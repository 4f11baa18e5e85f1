//! The controllers against a real `skiff apiserver` (no scheduler, no kubelet): pod readiness and
//! node heartbeats are written by hand through the status subresources, as a kubelet would.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Namespace, Node, Pod, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Client, ClientConfig};
use skiff_controllers::Options;
use skiff_tests::TestCluster;
use tokio_util::sync::CancellationToken;

/// Liveness bound of every wait (not a performance assertion).
const PATIENCE: Duration = Duration::from_secs(60);

async fn client(cluster: &TestCluster) -> Client {
    skiff_client::connect(&ClientConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        ..ClientConfig::default()
    })
    .await
    .expect("client for the test cluster")
}

/// The controllers running in this process against `cluster` until the returned token is cancelled.
async fn controllers(cluster: &TestCluster, options: Options) -> (Client, CancellationToken) {
    let c = client(cluster).await;
    let token = CancellationToken::new();
    let (cc, t) = (c.clone(), token.clone());
    tokio::spawn(async move {
        skiff_controllers::run(cc, options, t)
            .await
            .expect("controllers run");
    });
    (c, token)
}

/// Waits until `check` returns `Some`, polling; panics with `what` after [`PATIENCE`].
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]}
            }
        }
    }))
    .unwrap()
}

/// Active pods (not being deleted) in `ns` with label app=`app`.
async fn active_pods(api: &Api<Pod>, app: &str) -> Vec<Pod> {
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Plays kubelet for every pod in `ns` that is not ready: Running, an IP, Ready.
async fn make_ready(api: &Api<Pod>) {
    let pods = api.list(&ListParams::default()).await.unwrap().items;
    for (i, p) in pods.iter().enumerate() {
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = json!({"status": {
            "phase": "Running",
            "podIP": format!("127.0.{}.{}", 10 + i / 200, 1 + i % 200),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        }});
        let _ = api
            .patch_status(
                p.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await;
    }
}

/// A kubelet stand-in: keeps making the pods of `ns` ready until cancelled.
fn fake_kubelet(client: &Client, ns: &str, stop: CancellationToken) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        while !stop.is_cancelled() {
            make_ready(&api).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

async fn scale(api: &Api<Deployment>, name: &str, replicas: i32) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_scales_rolls_out_undoes_and_cascades() {
    let cluster = TestCluster::start(&[]);
    let (c, stop) = controllers(&cluster, Options::default()).await;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    fake_kubelet(&c, "default", stop.clone());

    deployments
        .create(&PostParams::default(), &deployment("web", 3, "nginx:1"))
        .await
        .unwrap();
    wait_for("3 pods of one ReplicaSet", || async {
        let rs = sets.list(&ListParams::default()).await.unwrap().items;
        let p = active_pods(&pods, "web").await;
        (rs.len() == 1 && p.len() == 3).then_some(())
    })
    .await;
    let rs = sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    let rs_uid = rs.metadata.uid.clone().unwrap();
    for p in active_pods(&pods, "web").await {
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ReplicaSet", rs_uid.as_str())
        );
        assert!(
            p.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key("pod-template-hash")
        );
    }

    let kubectl = cluster.kubectl();
    let out = kubectl.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");

    scale(&deployments, "web", 5).await;
    wait_for("5 pods", || async {
        (active_pods(&pods, "web").await.len() == 5).then_some(())
    })
    .await;
    scale(&deployments, "web", 1).await;
    wait_for("1 pod", || async {
        (active_pods(&pods, "web").await.len() == 1).then_some(())
    })
    .await;
    scale(&deployments, "web", 3).await;

    // A new image rolls out into a second ReplicaSet.
    kubectl.ok(&["set", "image", "deployment/web", "c=nginx:2"]);
    let out = kubectl.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let all = sets.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 2);
    let replicas = |rs: &ReplicaSet| rs.spec.as_ref().unwrap().replicas.unwrap();
    let new: Vec<&ReplicaSet> = all.iter().filter(|rs| replicas(rs) == 3).collect();
    assert_eq!(new.len(), 1, "one set holds every replica");
    assert_eq!(
        new[0].metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "2"
    );
    let history = kubectl.ok(&["rollout", "history", "deployment/web"]);
    assert!(history.contains('1') && history.contains('2'), "{history}");

    // Undo brings the first set back under revision 3.
    kubectl.ok(&["rollout", "undo", "deployment/web"]);
    let out = kubectl.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let first = sets
        .get(rs.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(replicas(&first), 3);
    assert_eq!(
        first.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "3"
    );
    assert_eq!(
        sets.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
    for p in active_pods(&pods, "web").await {
        assert_eq!(
            p.spec.unwrap().containers[0].image.as_deref(),
            Some("nginx:1")
        );
    }

    // Deleting the Deployment takes its sets and pods with it.
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the sets and pods to be collected", || async {
        let rs = sets.list(&ListParams::default()).await.unwrap().items;
        let p = pods.list(&ListParams::default()).await.unwrap().items;
        (rs.is_empty() && p.is_empty()).then_some(())
    })
    .await;
    stop.cancel();
}

fn replica_set(name: &str, replicas: i32) -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}
            }
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_adopts_releases_and_survives_an_apiserver_restart() {
    let mut cluster = TestCluster::start(&[]);
    let (c, stop) = controllers(&cluster, Options::default()).await;
    let sets: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");

    // An orphan that matches is adopted and counts towards the replicas.
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "rs"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &orphan).await.unwrap();
    sets.create(&PostParams::default(), &replica_set("rs", 3))
        .await
        .unwrap();
    let rs = wait_for("3 pods", || async {
        let rs = sets.get("rs").await.unwrap();
        let st = rs.status.clone()?;
        (active_pods(&pods, "rs").await.len() == 3
            && st.replicas == 3
            && st.observed_generation == rs.metadata.generation)
            .then_some(rs)
    })
    .await;
    let adopted = pods.get("orphan").await.unwrap();
    assert_eq!(
        adopted.metadata.owner_references.unwrap()[0].uid,
        rs.metadata.uid.clone().unwrap()
    );

    // Relabelled out of the selector: released, and replaced.
    pods.patch(
        "orphan",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .unwrap();
    wait_for("the release and a replacement", || async {
        let released = pods
            .get("orphan")
            .await
            .ok()?
            .metadata
            .owner_references
            .is_none();
        (released && active_pods(&pods, "rs").await.len() == 3).then_some(())
    })
    .await;

    // Readiness shows in the status.
    make_ready(&pods).await;
    wait_for("ready replicas", || async {
        let st = sets.get("rs").await.unwrap().status?;
        (st.ready_replicas == Some(3) && st.available_replicas == Some(3)).then_some(())
    })
    .await;

    // Across an API server restart the count stays exact.
    cluster.restart();
    let c2 = client(&cluster).await;
    let sets: Api<ReplicaSet> = Api::namespaced(c2.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c2.clone(), "default");
    sets.patch(
        "rs",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    wait_for("the scale-up to be observed", || async {
        let rs = sets.get("rs").await.ok()?;
        let st = rs.status.clone()?;
        (st.replicas == 4 && st.observed_generation == rs.metadata.generation).then_some(())
    })
    .await;
    assert_eq!(active_pods(&pods, "rs").await.len(), 4, "no duplicate pods");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_foreground_and_orphan() {
    let cluster = TestCluster::start(&[]);
    let (c, stop) = controllers(&cluster, Options::default()).await;
    let sets: Api<ReplicaSet> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    for name in ["orphaned", "foreground"] {
        sets.create(&PostParams::default(), &replica_set(name, 2))
            .await
            .unwrap();
    }
    wait_for("4 pods", || async {
        let n = active_pods(&pods, "orphaned").await.len()
            + active_pods(&pods, "foreground").await.len();
        (n == 4).then_some(())
    })
    .await;

    // Orphan: the set goes, its pods stay without the reference.
    sets.delete("orphaned", &DeleteParams::orphan())
        .await
        .unwrap();
    wait_for("the orphaned set to go", || async {
        sets.get_opt("orphaned")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let left = active_pods(&pods, "orphaned").await;
    assert_eq!(left.len(), 2);
    for p in &left {
        assert!(
            p.metadata.owner_references.is_none(),
            "{:?}",
            p.metadata.owner_references
        );
    }

    // Foreground: the set waits for its pods, then goes.
    sets.delete("foreground", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_for("the foreground set and its pods to go", || async {
        let gone = sets.get_opt("foreground").await.unwrap().is_none();
        (gone && active_pods(&pods, "foreground").await.is_empty()).then_some(())
    })
    .await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_and_slices_follow_pods() {
    let cluster = TestCluster::start(&[]);
    let (c, stop) = controllers(&cluster, Options::default()).await;
    let services: Api<Service> = Api::namespaced(c.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(c.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");

    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    }))
    .unwrap();
    services.create(&PostParams::default(), &svc).await.unwrap();
    // A Service without a selector keeps the Endpoints its user writes.
    let manual: Service = serde_json::from_value(json!({
        "metadata": {"name": "manual"},
        "spec": {"ports": [{"port": 80}]}
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &manual)
        .await
        .unwrap();
    let user_ep: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "manual"},
        "subsets": [{"addresses": [{"ip": "127.0.0.9"}], "ports": [{"port": 80}]}]
    }))
    .unwrap();
    endpoints
        .create(&PostParams::default(), &user_ep)
        .await
        .unwrap();

    for (name, port) in [("a", 8080), ("b", 9090)] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"name": "http", "containerPort": port}]}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let set_status = |name: &'static str, ip: &'static str, ready: &'static str| {
        let pods = pods.clone();
        async move {
            let status = json!({"status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": ready}]}});
            pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
        }
    };
    set_status("a", "127.0.0.2", "True").await;
    set_status("b", "127.0.0.3", "False").await;

    let ep = wait_for("endpoints with a ready and a not-ready address", || async {
        let ep = endpoints.get_opt("web").await.unwrap()?;
        let subsets = ep.subsets.clone()?;
        let ready: usize = subsets
            .iter()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        let not_ready: usize = subsets
            .iter()
            .map(|s| s.not_ready_addresses.as_ref().map_or(0, Vec::len))
            .sum();
        (ready == 1 && not_ready == 1).then_some(ep)
    })
    .await;
    for s in ep.subsets.unwrap() {
        let port = s.ports.unwrap()[0].port;
        if let Some(a) = s.addresses {
            assert_eq!((a[0].ip.as_str(), port), ("127.0.0.2", 8080));
        }
        if let Some(a) = s.not_ready_addresses {
            assert_eq!(
                (a[0].ip.as_str(), port),
                ("127.0.0.3", 9090),
                "named port resolved per pod"
            );
        }
    }

    set_status("b", "127.0.0.3", "True").await;
    wait_for("both addresses ready in the slices", || async {
        let list = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .unwrap()
            .items;
        let ready = list
            .iter()
            .flat_map(|s| &s.endpoints)
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .count();
        (ready == 2).then_some(())
    })
    .await;
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    wait_for("the deleted pod to leave", || async {
        let ep = endpoints.get("web").await.unwrap();
        let n: usize = ep
            .subsets
            .iter()
            .flatten()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        (n == 1).then_some(())
    })
    .await;
    let manual = endpoints.get("manual").await.unwrap();
    assert_eq!(
        manual.subsets.unwrap()[0].addresses.as_ref().unwrap()[0].ip,
        "127.0.0.9",
        "selector-less Services are left alone"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_deletion_empties_it_and_service_accounts_appear() {
    let cluster = TestCluster::start(&[]);
    let (c, stop) = controllers(&cluster, Options::default()).await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(c.clone(), "team");
    wait_for("the default service account", || async {
        accounts.get_opt("default").await.unwrap().map(|_| ())
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "team");
    for i in 0..3 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("cm{i}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "team");
    deployments
        .create(&PostParams::default(), &deployment("web", 2, "nginx"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "team");
    wait_for("the deployment's pods", || async {
        (active_pods(&pods, "web").await.len() == 2).then_some(())
    })
    .await;

    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    let phase = namespaces
        .get("team")
        .await
        .ok()
        .and_then(|n| n.status?.phase);
    assert!(
        phase.is_none() || phase.as_deref() == Some("Terminating"),
        "{phase:?}"
    );
    wait_for("the namespace to be gone", || async {
        namespaces
            .get_opt("team")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    stop.cancel();
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

async fn heartbeat(c: &Client, name: &str) {
    let now = jiff::Timestamp::now();
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}
    }))
    .unwrap();
    match leases.get_opt(name).await.unwrap() {
        None => {
            leases.create(&PostParams::default(), &lease).await.unwrap();
        }
        Some(_) => {
            leases
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": lease.spec})),
                )
                .await
                .unwrap();
        }
    }
    let nodes: Api<Node> = Api::all(c.clone());
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "lastHeartbeatTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_nodes_are_tainted_and_their_pods_evicted() {
    let cluster = TestCluster::start(&[]);
    let options = Options {
        node_monitor_grace_period: Duration::from_secs(3),
        node_monitor_period: Duration::from_millis(500),
        ..Options::default()
    };
    let (c, stop) = controllers(&cluster, options).await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    let lease_ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "kube-node-lease"}})).unwrap();
    let _ = namespaces.create(&PostParams::default(), &lease_ns).await;
    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    heartbeat(&c, "n1").await;

    // IPAM hands out a pod range.
    let cidr = wait_for("a pod CIDR", || async {
        nodes.get("n1").await.unwrap().spec?.pod_cidr
    })
    .await;
    assert!(
        cidr.starts_with("127.100.") && cidr.ends_with("/24"),
        "{cidr}"
    );

    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 2}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let forever: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stays"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &forever).await.unwrap();
    make_ready(&pods).await;

    // The kubelet goes silent.
    wait_for("Ready=Unknown and the unreachable taint", || async {
        let n = nodes.get("n1").await.unwrap();
        let ready = n
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "Ready")?
            .status
            .clone();
        (ready == "Unknown" && has_taint(&n, "node.kubernetes.io/unreachable")).then_some(())
    })
    .await;
    wait_for("the pods marked not ready", || async {
        let p = pods.get("stays").await.unwrap();
        let ready = p
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")?
            .status;
        (ready == "False").then_some(())
    })
    .await;
    wait_for("the eviction after the toleration", || async {
        pods.get("p")
            .await
            .ok()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    let stays = pods.get("stays").await.unwrap();
    assert!(
        stays.metadata.deletion_timestamp.is_none(),
        "tolerated forever"
    );

    // Recovery removes the taint.
    heartbeat(&c, "n1").await;
    wait_for("the taint to go", || async {
        (!has_taint(
            &nodes.get("n1").await.unwrap(),
            "node.kubernetes.io/unreachable",
        ))
        .then_some(())
    })
    .await;
    stop.cancel();
    let _ = labels(&[]);
}

/// The collector watches what discovery says is served, not a fixed list: a Namespace (a kind it
/// used to ignore) owned by a Node goes when the Node does, and one whose owner stays, stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_covers_every_discovered_kind() {
    let cluster = TestCluster::start(&[]);
    let (c, stop) = controllers(&cluster, Options::default()).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let namespaces: Api<Namespace> = Api::all(c.clone());
    for (owner, dependent) in [("gc-gone", "owned-by-gone"), ("gc-kept", "owned-by-kept")] {
        let n = nodes
            .create(&PostParams::default(), &node(owner))
            .await
            .unwrap();
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {
                "name": dependent,
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": owner,
                    "uid": n.metadata.uid,
                }]
            }
        }))
        .unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    nodes
        .delete("gc-gone", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the namespace owned by the deleted node to be deleted",
        || async {
            match namespaces.get_opt("owned-by-gone").await.unwrap() {
                None => Some(()),
                Some(ns) if ns.metadata.deletion_timestamp.is_some() => Some(()),
                Some(_) => None,
            }
        },
    )
    .await;
    let kept = namespaces.get("owned-by-kept").await.unwrap();
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "a namespace whose owner exists was deleted"
    );
    stop.cancel();
}

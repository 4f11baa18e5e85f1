//! The scheduler against a real API server (`skiff server` started by the test harness): where
//! pods land given requests, nodeSelector, node affinity, tolerations, host ports and cordoned
//! nodes; the unschedulable condition, message and Event; rescheduling when a node is added.
//!
//! The scheduler runs in the test process under its own name, and the pods name it, so the test
//! is independent of whatever scheduler the server itself runs.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, NodeSpec, Pod, Taint};
use serde_json::json;
use skiff_client::api::{ListParams, PostParams};
use skiff_client::{Api, Client};
use skiff_scheduler::bench::{hollow_node, register_node};
use skiff_scheduler::run::Options;
use skiff_tests::TestCluster;
use tokio_util::sync::CancellationToken;

const NAME: &str = "skiff-test-scheduler";

async fn client(cluster: &TestCluster) -> Client {
    skiff_tests::install_crypto();
    skiff_client::connect(&skiff_client::ClientConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        ..Default::default()
    })
    .await
    .expect("client from the admin kubeconfig")
}

fn start_scheduler(client: Client) -> CancellationToken {
    let shutdown = CancellationToken::new();
    let options = Options {
        scheduler_name: NAME.into(),
        bind_qps: 100.0,
        ..Options::default()
    };
    let token = shutdown.clone();
    tokio::spawn(async move {
        skiff_scheduler::run(client, options, token)
            .await
            .expect("scheduler runs");
    });
    shutdown
}

fn node(
    name: &str,
    cpu: &str,
    labels: &[(&str, &str)],
    taint: Option<Taint>,
    cordon: bool,
) -> Node {
    let mut n = hollow_node(name);
    let status = n.status.as_mut().unwrap();
    for list in [status.allocatable.as_mut(), status.capacity.as_mut()]
        .into_iter()
        .flatten()
    {
        list.insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
        );
    }
    let l = n.metadata.labels.get_or_insert_with(Default::default);
    for (k, v) in labels {
        l.insert(k.to_string(), v.to_string());
    }
    n.spec = Some(NodeSpec {
        taints: taint.map(|t| vec![t]),
        unschedulable: Some(cordon),
        ..Default::default()
    });
    n
}

fn pod(name: &str, cpu: &str, extra: serde_json::Value) -> Pod {
    let mut spec = json!({
        "schedulerName": NAME,
        "containers": [{
            "name": "c",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": cpu}},
        }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "hostPort" {
                spec["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": v}]);
            } else {
                spec.insert(k.clone(), v.clone());
            }
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("a valid pod")
}

/// Polls `pods` until `check` holds for the named pod, or panics after 30 s.
async fn wait_pod(pods: &Api<Pod>, name: &str, what: &str, check: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(p) = pods.get(name).await
            && check(&p)
        {
            return p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {name}: {what} never happened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

fn on_node(name: &str) -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]
    }}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_table_through_the_api() {
    let cluster = TestCluster::start(&[]);
    let client = client(&cluster).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let gpu = Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    for n in [
        node("small", "1", &[("disk", "hdd")], None, false),
        node("big", "8", &[("disk", "ssd")], None, false),
        node("tainted", "8", &[], Some(gpu), false),
        node("cordoned", "8", &[], None, true),
    ] {
        register_node(&nodes, n).await.expect("registering a node");
    }
    let shutdown = start_scheduler(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // (pod, expected node)
    let toleration = json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]});
    let mut tolerating = on_node("tainted");
    tolerating["tolerations"] = toleration["tolerations"].clone();
    let table: Vec<(Pod, &str)> = vec![
        // Only "big" has 4 CPUs free among the nodes that take pods.
        (pod("needs-4-cpus", "4", json!({})), "big"),
        (
            pod(
                "wants-ssd",
                "100m",
                json!({"nodeSelector": {"disk": "ssd"}}),
            ),
            "big",
        ),
        (
            pod(
                "wants-hdd-by-affinity",
                "100m",
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]}]
                }}}}),
            ),
            "small",
        ),
        (pod("tolerates-gpu", "100m", tolerating), "tainted"),
        (
            pod(
                "port-8080",
                "100m",
                json!({"nodeSelector": {"disk": "hdd"}, "hostPort": 8080}),
            ),
            "small",
        ),
    ];
    for (p, _) in &table {
        pods.create(&PostParams::default(), p)
            .await
            .expect("creating a pod");
    }
    for (p, want) in &table {
        let name = p.metadata.name.as_deref().unwrap();
        let got = wait_pod(&pods, name, "bound", |p| node_of(p).is_some()).await;
        assert_eq!(node_of(&got).as_deref(), Some(*want), "pod {name}");
    }

    // Pods no node takes, with kube-scheduler's message.
    let unschedulable = [
        (
            pod(
                "second-port-8080",
                "100m",
                json!({"nodeSelector": {"disk": "hdd"}, "hostPort": 8080}),
            ),
            "0/4 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, \
             1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint {dedicated: gpu}, \
             1 node(s) were unschedulable.",
        ),
        (
            pod("pinned-to-tainted", "100m", on_node("tainted")),
            "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, \
             1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector.",
        ),
        (
            pod("pinned-to-cordoned", "100m", on_node("cordoned")),
            "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, \
             1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector.",
        ),
        (
            pod("too-big", "16", json!({})),
            "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, \
             1 node(s) were unschedulable, 2 Insufficient cpu.",
        ),
    ];
    for (p, _) in &unschedulable {
        pods.create(&PostParams::default(), p)
            .await
            .expect("creating a pod");
    }
    for (p, message) in &unschedulable {
        let name = p.metadata.name.as_deref().unwrap();
        let got = wait_pod(&pods, name, "marked unschedulable", |p| {
            scheduled_condition(p).is_some()
        })
        .await;
        assert_eq!(
            scheduled_condition(&got),
            Some(("False".into(), "Unschedulable".into(), message.to_string())),
            "pod {name}"
        );
        assert_eq!(node_of(&got), None);
    }
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pod_gets_condition_and_event_then_lands_on_a_new_node() {
    let cluster = TestCluster::start(&[]);
    let client = client(&cluster).await;
    let nodes: Api<Node> = Api::all(client.clone());
    register_node(&nodes, node("one-cpu", "1", &[], None, false))
        .await
        .expect("registering a node");
    let shutdown = start_scheduler(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("hungry", "2", json!({})))
        .await
        .expect("creating a pod");
    let message = "0/1 nodes are available: 1 Insufficient cpu.";
    let got = wait_pod(&pods, "hungry", "marked unschedulable", |p| {
        scheduled_condition(p).is_some()
    })
    .await;
    assert_eq!(
        scheduled_condition(&got),
        Some(("False".into(), "Unschedulable".into(), message.into()))
    );

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let list = events
            .list(&ListParams::default())
            .await
            .expect("listing events");
        let found = list.items.iter().any(|e| {
            e.involved_object.name.as_deref() == Some("hungry")
                && e.involved_object.kind.as_deref() == Some("Pod")
                && e.reason.as_deref() == Some("FailedScheduling")
                && e.type_.as_deref() == Some("Warning")
                && e.message.as_deref() == Some(message)
        });
        if found {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no FailedScheduling event: {:?}",
            list.items
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A node big enough arrives: the parked pod is retried and bound there.
    register_node(&nodes, node("four-cpus", "4", &[], None, false))
        .await
        .expect("registering a node");
    let got = wait_pod(&pods, "hungry", "bound", |p| node_of(p).is_some()).await;
    assert_eq!(node_of(&got).as_deref(), Some("four-cpus"));
    shutdown.cancel();
    let _ = Arc::new(());
}

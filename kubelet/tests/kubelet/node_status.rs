//! The node's heartbeats against a real API server: the Lease renews every interval, the Node's
//! status is not PATCHed while nothing changes (PATCHes counted by the API server's own
//! `/metrics`), and is PATCHed at the next sync when a condition changes, or when another writer
//! changed it; a renewal that went out on a connection lost without a word is abandoned in time
//! for the Lease not to lapse. The host readings are the test's, through
//! [`skiff_kubelet::run_with_host`], so that memory pressure can be turned on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use skiff_client::Api;
use skiff_client::api::{Patch, PatchParams};
use skiff_kubelet::Options;
use skiff_kubelet::host::{self, Readings};
use skiff_tests::TestCluster;
use skiff_tests::faults::{Fault, Link};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: Options,
}

/// PATCHes of `nodes/status` the API server has answered, from its `/metrics`.
async fn status_patches(cluster: &TestCluster) -> u64 {
    let text = cluster
        .http()
        .get(format!("{}/metrics", cluster.server))
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("verb=\"PATCH\"")
                && l.contains("resource=\"nodes\"")
                && l.contains("subresource=\"status\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// A client on the admin kubeconfig at `kubeconfig`.
async fn connect(kubeconfig: std::path::PathBuf) -> skiff_client::Client {
    skiff_client::connect(&skiff_client::ClientConfig {
        kubeconfig: Some(kubeconfig),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn condition(node: &Node, type_: &str) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renews_and_status_is_patched_only_on_change() {
    skiff_tests::install_crypto();
    let cluster = tokio::task::spawn_blocking(|| TestCluster::start(&[]))
        .await
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let client = connect(cluster.kubeconfig.clone()).await;
    // Plenty of memory to start with; the rest is the real host's.
    let readings = Arc::new(Mutex::new(Readings {
        memory_available: 1 << 40,
        memory_total: 2 << 40,
        ..host::read(root.path())
    }));
    let source = readings.clone();
    let options = Cli::parse_from([
        "kubelet",
        "--node-name",
        "hb",
        "--root-dir",
        root.path().to_str().unwrap(),
        "--node-status-update-frequency",
        "100ms",
        "--node-status-report-frequency",
        "1h",
        "--node-lease-renew-interval",
        "200ms",
        "--container-runtime-endpoint",
        "process",
    ])
    .options;
    let shutdown = CancellationToken::new();
    let kubelet = tokio::spawn(skiff_kubelet::run_with_host(
        client.clone(),
        options,
        Arc::new(move |_: &std::path::Path| source.lock().unwrap().clone()),
        shutdown.clone(),
    ));

    let nodes: Api<Node> = Api::all(client.clone());
    until("the node is Ready", || async {
        let node = nodes.get_opt("hb").await.unwrap();
        node.is_some_and(|n| condition(&n, "Ready").as_deref() == Some("True"))
    })
    .await;
    let node = nodes.get("hb").await.unwrap();
    assert_eq!(
        node.status
            .unwrap()
            .node_info
            .unwrap()
            .container_runtime_version,
        skiff_kubelet::node_status::RUNTIME_VERSION,
        "the process runtime reports process://<version>"
    );

    // The Lease: renewed again and again, its renewTime moving forward each time.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let mut renewals = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while renewals.len() < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "five renewals of the Lease never came: {renewals:?}"
        );
        if let Some(lease) = leases.get_opt("hb").await.unwrap() {
            let spec = lease.spec.unwrap();
            assert_eq!(spec.holder_identity.as_deref(), Some("hb"));
            let renewed = spec.renew_time.unwrap().0;
            if renewals.last() != Some(&renewed) {
                renewals.push(renewed);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        renewals.windows(2).all(|w| w[0] < w[1]),
        "renewTime went backwards: {renewals:?}"
    );

    // Nothing changes for twenty status periods: not one PATCH.
    let before = status_patches(&cluster).await;
    assert!(before >= 1, "the first status was never PATCHed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        status_patches(&cluster).await,
        before,
        "the status was PATCHed although nothing changed"
    );

    // Memory runs out: the condition flips at the next sync, not at the 1 h report interval.
    readings.lock().unwrap().memory_available = 0;
    until("MemoryPressure turns True", || async {
        let node = nodes.get("hb").await.unwrap();
        condition(&node, "MemoryPressure").as_deref() == Some("True")
    })
    .await;
    let after = status_patches(&cluster).await;
    assert!(after > before, "no PATCH for the changed condition");
    // ...and then it is quiet again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(status_patches(&cluster).await, after);

    // The runtime breaks (its state directory cannot take records): not Ready, saying why.
    let state = root.path().join("containers");
    let away = root.path().join("containers.away");
    std::fs::rename(&state, &away).unwrap();
    std::fs::write(&state, b"not a directory").unwrap();
    until("Ready turns False for the runtime", || async {
        let node = nodes.get("hb").await.unwrap();
        condition(&node, "Ready").as_deref() == Some("False")
    })
    .await;
    let node = nodes.get("hb").await.unwrap();
    let ready = node
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason.as_deref(), Some("KubeletNotReady"));
    let message = ready.message.unwrap_or_default();
    assert!(
        message.contains("container runtime is down") && message.contains("containers"),
        "{message}"
    );
    // Repaired: Ready again.
    std::fs::remove_file(&state).unwrap();
    std::fs::rename(&away, &state).unwrap();
    until("Ready turns True again", || async {
        let node = nodes.get("hb").await.unwrap();
        condition(&node, "Ready").as_deref() == Some("True")
    })
    .await;

    // Another writer says Unknown, as the node lifecycle controller does when the Lease lapsed
    // (and then marks the node's pods not ready until Ready is True): the kubelet overrules it
    // at its next sync, not at the 1 h report interval.
    let unknown = serde_json::json!({"status": {"conditions": [{
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
    }]}});
    nodes
        .patch_status("hb", &PatchParams::default(), &Patch::Strategic(&unknown))
        .await
        .unwrap();
    assert_eq!(
        condition(&nodes.get("hb").await.unwrap(), "Ready").as_deref(),
        Some("Unknown")
    );
    until("the kubelet sets Ready back to True", || async {
        let node = nodes.get("hb").await.unwrap();
        condition(&node, "Ready").as_deref() == Some("True")
    })
    .await;

    shutdown.cancel();
    kubelet.await.unwrap().unwrap();
}

/// The connections the kubelet has open are lost without a word (a NAT that forgot them): the
/// renewal that goes out next on one of them is abandoned after the heartbeat limit (the status
/// update period, here a second), and a later one gets through on a new connection, well before
/// the Lease's 20 s run out. Before the limit, the renewal waited out the client's minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_on_a_silently_lost_connection_gives_up_before_the_lease_lapses() {
    skiff_tests::install_crypto();
    let cluster = tokio::task::spawn_blocking(|| TestCluster::start(&[]))
        .await
        .unwrap();
    let link = Link::to(([127, 0, 0, 1], cluster.port()).into());
    let root = tempfile::tempdir().unwrap();
    let client = connect(cluster.kubeconfig_through(&link.url())).await;
    let options = Cli::parse_from([
        "kubelet",
        "--node-name",
        "lost",
        "--root-dir",
        root.path().to_str().unwrap(),
        "--node-status-update-frequency",
        "1s",
        "--node-lease-renew-interval",
        "1s",
        "--node-lease-duration-seconds",
        "20",
        "--container-runtime-endpoint",
        "process",
    ])
    .options;
    let shutdown = CancellationToken::new();
    let kubelet = tokio::spawn(skiff_kubelet::run(client, options, shutdown.clone()));

    // The test reads the Lease directly, not through the link.
    let direct = connect(cluster.kubeconfig.clone()).await;
    let leases: Api<Lease> = Api::namespaced(direct, "kube-node-lease");
    let renewed = || async {
        leases
            .get_opt("lost")
            .await
            .unwrap()
            .and_then(|l| l.spec?.renew_time)
            .map(|t| t.0)
    };
    until("the Lease is renewed", || async {
        renewed().await.is_some()
    })
    .await;
    // A few renewals first, so that the pool holds idle connections to lose.
    tokio::time::sleep(Duration::from_secs(3)).await;

    link.set(Fault::Sever);
    let severed_at = Timestamp::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if renewed().await.is_some_and(|t| t > severed_at) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no renewal got through within the Lease's 20 s of losing the connections \
             ({:?})",
            link.counts()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(link.counts().severed > 0, "nothing was severed");

    shutdown.cancel();
    kubelet.await.unwrap().unwrap();
}

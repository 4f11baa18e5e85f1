//! End to end: `skiff server` from the test harness, this kubelet run in-process against it, and
//! kubectl. Pods are bound by setting `spec.nodeName` at create (no scheduler needed).

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use skiff_kubelet::Options;
use skiff_tests::{Kubectl, TestCluster, eventually};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(90);

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: Options,
}

fn options(root: &Path, manifests: &Path) -> Options {
    Cli::parse_from([
        "kubelet",
        "--node-name",
        "n1",
        "--root-dir",
        root.to_str().unwrap(),
        "--kubelet-port",
        "0",
        "--node-status-update-frequency",
        "1s",
        "--node-lease-renew-interval",
        "1s",
        "--sync-frequency",
        "1s",
        "--crash-loop-backoff",
        "1s",
        "--crash-loop-backoff-max",
        "4s",
        "--pod-manifest-path",
        manifests.to_str().unwrap(),
        "--file-check-frequency",
        "1s",
        "--container-runtime-endpoint",
        &skiff_tests::container_runtime(),
    ])
    .options
}

fn jsonpath(k: &Kubectl, args: &[&str], path: &str) -> String {
    let mut all: Vec<&str> = args.to_vec();
    let expr = format!("jsonpath={path}");
    all.extend(["-o", &expr]);
    let run = k.run(&all);
    if run.ok { run.stdout } else { String::new() }
}

fn pod_yaml(name: &str, policy: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: n1\n  restartPolicy: {policy}\n  terminationGracePeriodSeconds: 3\n  containers:\n  - name: c\n    image: busybox\n    command: [\"sh\", \"-c\", {script:?}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_registers_runs_pods_serves_logs_and_mirrors_static_pods() {
    skiff_tests::install_crypto();
    let cluster = tokio::task::spawn_blocking(|| TestCluster::start(&[]))
        .await
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("static.yaml"),
        pod_yaml(
            "static-web",
            "Always",
            "while true; do echo static; sleep 1; done",
        ),
    )
    .unwrap();
    let client = skiff_client::connect(&skiff_client::ClientConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let kubelet = tokio::spawn(skiff_kubelet::run(
        client,
        options(root.path(), manifests.path()),
        shutdown.clone(),
    ));
    let k = cluster.kubectl();
    let result = tokio::task::spawn_blocking(move || scenario(&k)).await;
    shutdown.cancel();
    let _ = kubelet.await;
    result.unwrap();
    drop(cluster);
}

fn scenario(k: &Kubectl) {
    // The node registers and turns Ready; its Lease renews.
    assert!(
        eventually(LIMIT, || jsonpath(
            k,
            &["get", "node", "n1"],
            "{.status.conditions[?(@.type==\"Ready\")].status}"
        ) == "True"),
        "node Ready"
    );
    let port = jsonpath(
        k,
        &["get", "node", "n1"],
        "{.status.daemonEndpoints.kubeletEndpoint.Port}",
    );
    assert!(port.parse::<u16>().unwrap() > 0);
    let renew = jsonpath(
        k,
        &["get", "lease", "-n", "kube-node-lease", "n1"],
        "{.spec.renewTime}",
    );
    assert!(!renew.is_empty());
    assert!(
        eventually(LIMIT, || jsonpath(
            k,
            &["get", "lease", "-n", "kube-node-lease", "n1"],
            "{.spec.renewTime}"
        ) != renew),
        "lease renewed"
    );

    // A shell loop reaches Running with a pod IP; kubectl logs shows its output.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &pod_yaml(
            "loop",
            "Always",
            "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done",
        ),
    );
    assert!(
        eventually(LIMIT, || jsonpath(
            k,
            &["get", "pod", "loop"],
            "{.status.phase}"
        ) == "Running"),
        "pod Running"
    );
    let ip = jsonpath(k, &["get", "pod", "loop"], "{.status.podIP}");
    assert!(ip.starts_with("127."), "{ip}");
    assert!(
        eventually(LIMIT, || k
            .run(&["logs", "loop"])
            .stdout
            .contains("line 2\n")),
        "kubectl logs"
    );
    let tail = k.ok(&["logs", "loop", "--tail=1"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");

    // kubectl logs -f follows a container until it exits.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &pod_yaml(
            "once",
            "Never",
            "for i in 1 2 3; do echo once $i; sleep 0.5; done",
        ),
    );
    assert!(
        eventually(LIMIT, || {
            let p = jsonpath(k, &["get", "pod", "once"], "{.status.phase}");
            p == "Running" || p == "Succeeded"
        }),
        "once started"
    );
    let followed = k.ok(&["logs", "-f", "once"]);
    assert_eq!(followed, "once 1\nonce 2\nonce 3\n");

    // A crashing container: CrashLoopBackOff with a growing restart count.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &pod_yaml("crash", "Always", "echo bye; exit 1"),
    );
    assert!(
        eventually(LIMIT, || {
            let reason = jsonpath(
                k,
                &["get", "pod", "crash"],
                "{.status.containerStatuses[0].state.waiting.reason}",
            );
            let restarts: u32 = jsonpath(
                k,
                &["get", "pod", "crash"],
                "{.status.containerStatuses[0].restartCount}",
            )
            .parse()
            .unwrap_or(0);
            reason == "CrashLoopBackOff" && restarts >= 2
        }),
        "CrashLoopBackOff"
    );
    assert_eq!(k.ok(&["logs", "crash", "--previous"]), "bye\n");

    // Static pod mirrored into the API.
    assert!(
        eventually(LIMIT, || jsonpath(
            k,
            &["get", "pod", "static-web-n1"],
            "{.status.phase}"
        ) == "Running"),
        "mirror pod Running"
    );
    let mirror = jsonpath(
        k,
        &["get", "pod", "static-web-n1"],
        "{.metadata.annotations.kubernetes\\.io/config\\.mirror}",
    );
    assert!(!mirror.is_empty());

    // Graceful delete: kubectl delete waits until the kubelet confirms.
    k.ok(&["delete", "pod", "loop", "--timeout=60s"]);
    assert!(k.run(&["get", "pod", "loop"]).stderr.contains("NotFound"));
}

//! `kubectl top` against `skiff server` with nothing installed: the built-in metrics API reads the
//! kubelet's summary of the process runtime's pods. A spinning pod shows more CPU than a sleeping
//! one, `--containers` and label selectors work, `kubectl top node` answers, and a node whose
//! kubelet cannot be reached has no metrics rather than zeros.

use std::path::PathBuf;
use std::time::Duration;

use skiff_tests::{TestCluster, eventually};

const PATIENCE: Duration = Duration::from_secs(90);

/// A server whose pod processes are killed when the test ends, whatever happened.
struct Cluster {
    cluster: TestCluster,
    root: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.cluster.stop();
        skiff_tests::kill_pod_processes(&self.root);
    }
}

fn pod(name: &str, container: &str, script: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: {name}}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: {container}
    image: busybox
    command: ["sh", "-c", "{script}"]
"#
    )
}

/// Millicores of a `kubectl top` CPU cell (`250m`, `2`).
fn millicores(cell: &str) -> u64 {
    match cell.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or_else(|_| panic!("CPU cell {cell:?}")),
        None => {
            cell.parse::<u64>()
                .unwrap_or_else(|_| panic!("CPU cell {cell:?}"))
                * 1000
        }
    }
}

/// The rows of `kubectl top` output without its header, split on whitespace.
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .filter(|r: &Vec<String>| !r.is_empty())
        .collect()
}

#[test]
fn top_shows_a_busy_pod_above_an_idle_one_and_the_node() {
    // Readings every second, so that rates come within seconds.
    let cluster = TestCluster::start_server(&["--housekeeping-interval", "1s"]);
    let root = cluster.kubelet_root();
    let cluster = Cluster { cluster, root };
    let k = cluster.cluster.kubectl();

    let out = k.ok(&["api-resources", "--api-group=metrics.k8s.io"]);
    assert!(
        out.contains("NodeMetrics") && out.contains("PodMetrics"),
        "{out}"
    );

    k.ok_with_input(
        &["apply", "-f", "-"],
        &pod("busy", "spin", "while :; do :; done"),
    );
    k.ok_with_input(&["apply", "-f", "-"], &pod("idle", "nap", "sleep 3600"));
    for name in ["busy", "idle"] {
        k.ok(&[
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=60s",
        ]);
    }

    // Until both pods have a rate: the first reading of a container has none.
    let mut last = String::new();
    let measured = eventually(PATIENCE, || {
        let run = k.run(&["top", "pod"]);
        last = format!("{}{}", run.stdout, run.stderr);
        let rows = rows(&run.stdout);
        run.ok
            && ["busy", "idle"]
                .iter()
                .all(|name| rows.iter().any(|r| r[0] == *name))
    });
    assert!(measured, "kubectl top pod never listed both pods: {last}");
    // Sample again a few seconds on, so that the busy pod's window is all spinning.
    std::thread::sleep(Duration::from_secs(3));
    let out = k.ok(&["top", "pod"]);
    let rows = rows(&out);
    let cpu = |name: &str| {
        let row = rows
            .iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("{name} in {out}"));
        assert!(row[2].ends_with("Mi") || row[2].ends_with("Ki"), "{out}");
        millicores(&row[1])
    };
    let (busy, idle) = (cpu("busy"), cpu("idle"));
    // A spinning shell takes a core when it can; even with the rest of the suite on the same two
    // cores it keeps a fair share. A sleeping one takes nothing.
    assert!(busy >= 100, "busy {busy}m, idle {idle}m: {out}");
    assert!(
        idle < 50 && idle < busy,
        "busy {busy}m, idle {idle}m: {out}"
    );

    let out = k.ok(&["top", "pod", "busy", "--containers"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("busy") && l.contains("spin")),
        "{out}"
    );
    let out = k.ok(&["top", "pod", "-l", "app=idle"]);
    let names: Vec<String> = self::rows(&out).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(names, ["idle"], "{out}");
    let raw = k.ok(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/busy",
    ]);
    let object: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(object["kind"], "PodMetrics");
    assert_eq!(object["containers"][0]["name"], "spin");

    // The node: CPU and memory with their share of what it can allocate.
    let node = k.ok(&["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"]);
    let out = k.ok(&["top", "node"]);
    let row = self::rows(&out)
        .into_iter()
        .find(|r| r[0] == node)
        .unwrap_or_else(|| panic!("{node} in {out}"));
    assert!(millicores(&row[1]) > 0, "{out}");
    assert!(row[2].ends_with('%') && row[4].ends_with('%'), "{out}");

    // A node whose kubelet does not answer: no metrics, not zeros.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    k.ok_with_input(
        &["create", "-f", "-"],
        &format!(
            r#"{{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": "ghost"}},
                "status": {{"addresses": [{{"type": "InternalIP", "address": "127.0.0.1"}}],
                            "daemonEndpoints": {{"kubeletEndpoint": {{"Port": {dead_port}}}}}}}}}"#
        ),
    );
    let out = k.ok(&["top", "node"]);
    assert!(
        !out.lines()
            .any(|l| l.starts_with("ghost") && !l.contains("<unknown>")),
        "{out}"
    );
    assert!(out.contains(&node), "{out}");
    let err = k.fails(&["top", "node", "ghost"]);
    assert!(
        err.contains("nodemetrics.metrics.k8s.io \"ghost\" not found"),
        "{err}"
    );
    let err = k.fails(&["top", "pod", "nobody"]);
    assert!(
        err.contains("podmetrics.metrics.k8s.io \"default/nobody\" not found"),
        "{err}"
    );
}

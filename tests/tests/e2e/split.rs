//! Several `skiff` processes talking over HTTPS: `skiff apiserver` with components as processes
//! of their own, the same scenario all-in-one under `skiff server`, components that recover when
//! the API server is killed and restarted under them, and a pod run by `skiff apiserver`,
//! `skiff scheduler` and `skiff kubelet` as three processes.

use std::time::Duration;

use skiff_tests::{TestCluster, eventually};

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: NAME, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: NAME}}
  template:
    metadata: {labels: {app: NAME}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "sleep 3600"]
"#;

fn create_deployment(cluster: &TestCluster, name: &str) {
    cluster
        .kubectl()
        .ok_with_input(&["apply", "-f", "-"], &DEPLOYMENT.replace("NAME", name));
}

/// Whether the controllers' informers saw the Deployment: its ReplicaSet exists.
fn replicaset_appears(cluster: &TestCluster, name: &str) -> bool {
    eventually(Duration::from_secs(60), || {
        let run = cluster.kubectl().run(&[
            "get",
            "replicasets",
            "-l",
            &format!("app={name}"),
            "-o",
            "name",
        ]);
        run.ok && run.stdout.contains("replicaset.apps/")
    })
}

#[test]
fn a_component_process_sees_kubectl_changes_over_https() {
    let cluster = TestCluster::start(&[]);
    let mut controllers = cluster.spawn_component(&["controllers"]);
    create_deployment(&cluster, "split");
    assert!(
        replicaset_appears(&cluster, "split"),
        "no ReplicaSet:\n{}",
        controllers.log_text()
    );
    let status = controllers.stop().expect("running");
    assert!(status.success(), "controllers exited with {status}");
}

#[test]
fn the_same_scenario_all_in_one() {
    let cluster = TestCluster::start_server(&[]);
    create_deployment(&cluster, "together");
    assert!(replicaset_appears(&cluster, "together"));
}

#[test]
fn components_recover_when_the_api_server_is_killed_and_restarted() {
    let mut cluster = TestCluster::start(&[]);
    let mut controllers = cluster.spawn_component(&["controllers"]);
    create_deployment(&cluster, "before");
    assert!(replicaset_appears(&cluster, "before"));

    cluster.restart_after_crash();
    create_deployment(&cluster, "after");
    assert!(
        replicaset_appears(&cluster, "after"),
        "the controllers did not recover:\n{}",
        controllers.log_text()
    );
    assert!(controllers.is_running());
    // No duplicates: one ReplicaSet per Deployment.
    let names = cluster.kubectl().ok(&["get", "replicasets", "-o", "name"]);
    assert_eq!(names.lines().count(), 2, "{names}");
}

/// A component whose server does not answer names it, and waits for it (as a kubelet does)
/// rather than exit: `chaos::components_started_while_the_api_server_is_unreachable_wait_for_it`
/// shows it getting through once the server answers.
#[test]
fn an_unreachable_server_is_named_while_the_component_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = skiff_tests::free_port();
    let log = dir.path().join("controllers.log");
    let mut child = std::process::Command::new(skiff_tests::skiff_binary())
        .args([
            "controllers",
            "--server",
            &format!("https://127.0.0.1:{port}"),
        ])
        .args(["--token", &format!("SKIFF1::{}::secret", "0".repeat(64))])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let named = format!("cannot reach the API server at https://127.0.0.1:{port}");
    let reported = eventually(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains(&named))
    });
    let waiting = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(reported, "the unreachable server is not named: {text}");
    assert!(waiting, "it exited instead of waiting: {text}");
}

#[test]
fn apiserver_scheduler_and_kubelet_as_three_processes_run_a_pod() {
    let cluster = TestCluster::start(&[]);
    let root = cluster.dir.path().join("kubelet-root");
    let mut scheduler = cluster.spawn_component(&["scheduler"]);
    let mut kubelet = cluster.spawn_component(&[
        "kubelet",
        "--node-name",
        "split-node",
        "--root-dir",
        root.to_str().unwrap(),
    ]);
    let k = cluster.kubectl();
    let ready = eventually(Duration::from_secs(60), || {
        k.run(&[
            "get",
            "node",
            "split-node",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
        .stdout
            == "True"
    });
    assert!(ready, "the node never got Ready:\n{}", kubelet.log_text());

    // No nodeName: the scheduler process places it, the kubelet process runs it.
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo hello from three processes; exec sleep 3600"]
"#,
    );
    let running = eventually(Duration::from_secs(60), || {
        k.run(&[
            "get",
            "pod",
            "hello",
            "-o",
            "jsonpath={.spec.nodeName}/{.status.phase}",
        ])
        .stdout
            == "split-node/Running"
    });
    assert!(
        running,
        "the pod never ran:\nscheduler:\n{}\nkubelet:\n{}",
        scheduler.log_text(),
        kubelet.log_text()
    );
    // Its log comes from the kubelet process, proxied by the API server.
    let logged = eventually(Duration::from_secs(30), || {
        k.run(&["logs", "hello"])
            .stdout
            .contains("hello from three processes")
    });
    assert!(logged, "kubectl logs never showed the output");

    k.ok(&["delete", "pod", "hello", "--timeout=60s"]);
    for (name, component) in [("scheduler", &mut scheduler), ("kubelet", &mut kubelet)] {
        let status = component.stop().expect("running");
        assert!(status.success(), "{name} exited with {status}");
    }
}

/// Processes whose working directory is under `dir` and that are alive (not zombies): a pod's
/// processes run in its root under the kubelet's root dir.
fn processes_under(dir: &std::path::Path) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let in_dir =
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| s[s.rfind(')').unwrap_or(0) + 2..].starts_with('Z'))
            .unwrap_or(true);
        if in_dir && !zombie {
            out.push(pid);
        }
    }
    out
}

#[test]
fn sigterm_to_the_server_stops_its_pods_processes() {
    let mut cluster = TestCluster::start_server(&[]);
    let k = cluster.kubectl();
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: loop, namespace: default}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "sleep 3600 & while true; do sleep 1; done"]
"#,
    );
    let running = eventually(Duration::from_secs(60), || {
        k.run(&["get", "pod", "loop", "-o", "jsonpath={.status.phase}"])
            .stdout
            == "Running"
    });
    assert!(running, "the pod never ran:\n{}", cluster.log_text());
    let data = cluster.data_dir();
    // The shell, its background sleep and its loop's sleep.
    let started = eventually(Duration::from_secs(30), || {
        processes_under(&data).len() >= 2
    });
    assert!(started, "no pod processes found under {}", data.display());
    let pids = processes_under(&data);

    let status = cluster.stop().expect("running");
    assert!(status.success(), "skiff server exited with {status}");
    // The kubelet waited for the group's exit; the kernel reaps the reparented sleeps at once,
    // but allow for it.
    let gone = eventually(Duration::from_secs(10), || {
        processes_under(&data).is_empty()
    });
    assert!(
        gone,
        "pod processes {:?} outlived the server (were {pids:?}):\n{}",
        processes_under(&data),
        cluster.log_text()
    );
}

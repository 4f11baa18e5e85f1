//! Workloads of real pods through kubectl against `skiff server`: a Deployment scales, rolls out,
//! rolls back and cascades on delete; a DaemonSet follows a node joining with `skiff agent`; a
//! node whose kubelet stops goes NotReady, its pods are evicted and replaced on the other node,
//! and it recovers; deleting a namespace stops and removes everything in it; Jobs run to
//! completion by index, fail by their backoff limit, and ignore what their failure policy says; a
//! CronJob runs every minute (on a fast controller clock), keeps its history limit and refuses a
//! schedule that does not parse, and finished Jobs expire by their TTL; a StatefulSet comes up in
//! order, updates above its partition, brings a pod below it back at the current revision, lists
//! its history and rolls back with `kubectl rollout undo`, and scales down from the top; a
//! ReplicationController scales with `kubectl scale rc` and cascades; a DaemonSet rolls back.
//!
//! The pods are `sh -c` sleep loops run by the kubelets as host processes. Every test deletes what
//! it made and waits for the kubelets to stop it; a [`Fixture`] kills whatever a failed test left
//! running.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use skiff_tests::{Component, Kubectl, TestCluster, eventually};

/// A Deployment `web` in `namespace` of `replicas` sleep loops that first print `message`.
fn deployment(namespace: &str, replicas: u32, image: &str, message: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {namespace}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: {image}
        command: ["sh", "-c", "echo {message}; while true; do sleep 1; done"]
"#
    )
}

/// A DaemonSet `daemon` in `namespace`.
fn daemonset(namespace: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: daemon, namespace: {namespace}}}
spec:
  selector: {{matchLabels: {{app: daemon}}}}
  template:
    metadata: {{labels: {{app: daemon}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c", "while true; do sleep 1; done"]
"#
    )
}

/// One pod as the tests look at it.
#[derive(Debug)]
struct PodRow {
    name: String,
    node: String,
    phase: String,
    /// It has a deletionTimestamp.
    deleting: bool,
    /// Its Ready condition is True.
    ready: bool,
    image: String,
    command: String,
}

/// The pods in `namespace` matching `selector`.
fn pods(k: &Kubectl, namespace: &str, selector: &str) -> Vec<PodRow> {
    let run = k.run(&["-n", namespace, "get", "pods", "-l", selector, "-o", "json"]);
    if !run.ok {
        return Vec::new();
    }
    let list: Value = serde_json::from_str(&run.stdout).expect("pod list JSON");
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| PodRow {
            name: text(&p["metadata"]["name"]),
            node: text(&p["spec"]["nodeName"]),
            phase: text(&p["status"]["phase"]),
            deleting: !p["metadata"]["deletionTimestamp"].is_null(),
            ready: p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True"),
            image: text(&p["spec"]["containers"][0]["image"]),
            command: p["spec"]["containers"][0]["command"].to_string(),
        })
        .collect()
}

/// The pods matching `selector` when there are exactly `n`, all Running and Ready and none being
/// deleted.
fn settled(k: &Kubectl, namespace: &str, selector: &str, n: usize) -> Option<Vec<PodRow>> {
    let pods = pods(k, namespace, selector);
    (pods.len() == n
        && pods
            .iter()
            .all(|p| p.phase == "Running" && p.ready && !p.deleting))
    .then_some(pods)
}

/// Waits up to `seconds` for `check`; on failure panics naming `what`, with every pod and node.
/// `kubectl rollout status` of `target` reports success (within two minutes).
fn rolled_out(k: &Kubectl, namespace: &str, target: &str) {
    let done = k.ok(&[
        "-n",
        namespace,
        "rollout",
        "status",
        target,
        "--timeout=120s",
    ]);
    assert!(done.contains("successfully rolled out"), "{done}");
}

fn wait_for(k: &Kubectl, what: &str, seconds: u64, check: impl FnMut() -> bool) {
    if !eventually(Duration::from_secs(seconds), check) {
        panic!(
            "{what}: not within {seconds} s\n{}\n{}",
            k.run(&["get", "pods", "-A", "-o", "wide"]).stdout,
            k.run(&["get", "nodes", "-o", "wide"]).stdout
        );
    }
}

fn node_ready(k: &Kubectl, node: &str) -> String {
    k.run(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ])
    .stdout
}

fn node_taints(k: &Kubectl, node: &str) -> String {
    k.run(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}",
    ])
    .stdout
}

/// One test's `skiff server`, and the agent it may start. Dropped, it stops the agent and the
/// server (SIGTERM, waited for) and then kills whatever pod processes their kubelets left running
/// (a kubelet leaves its pods running when it stops, as a real one does): no test, passed or
/// failed, leaves a process behind. Stopping every kubelet first means none restarts a pod
/// killed under it.
struct Fixture {
    cluster: TestCluster,
    agent: Option<Component>,
    /// The kubelets' root dirs.
    roots: Vec<PathBuf>,
}

impl Fixture {
    fn start(args: &[&str]) -> Fixture {
        let cluster = TestCluster::start_server(args);
        let roots = vec![cluster.kubelet_root()];
        Fixture {
            cluster,
            agent: None,
            roots,
        }
    }

    /// Starts `skiff agent` as node `name`, its root dir in the test's temporary dir (the same
    /// for every start of one name).
    fn start_agent(&mut self, name: &str, args: &[&str]) {
        let root = self.cluster.dir.path().join(name);
        let root_arg = root.to_str().expect("UTF-8 path").to_string();
        let mut all = vec![
            "--node-name",
            name,
            "--root-dir",
            &root_arg,
            "--no-nodeports",
        ];
        all.extend(args);
        self.agent = Some(self.cluster.spawn_agent(&all));
        if !self.roots.contains(&root) {
            self.roots.push(root);
        }
    }

    /// Stops the agent with SIGTERM and checks that it exits cleanly.
    fn stop_agent(&mut self) {
        let status = self
            .agent
            .as_mut()
            .and_then(Component::stop)
            .expect("an agent was running");
        assert!(status.success(), "the agent exited with {status}");
    }
}

impl std::ops::Deref for Fixture {
    type Target = TestCluster;

    fn deref(&self) -> &TestCluster {
        &self.cluster
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(agent) = self.agent.as_mut() {
            agent.stop();
        }
        self.cluster.stop();
        for root in &self.roots {
            let killed = skiff_tests::kill_pod_processes(root);
            if killed > 0 {
                eprintln!(
                    "killed {killed} pod processes left under {}",
                    root.display()
                );
            }
        }
    }
}

#[test]
fn a_deployment_of_real_pods_scales_rolls_out_rolls_back_and_cascades() {
    let cluster = Fixture::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "shop"]);
    k.ok_with_input(
        &["apply", "-f", "-"],
        &deployment("shop", 3, "busybox:1.36", "v1"),
    );
    rolled_out(&k, "shop", "deployment/web");
    wait_for(&k, "3 Running pods", 60, || {
        settled(&k, "shop", "app=web", 3).is_some()
    });

    // An image change rolls out: `rollout status` follows it to the end.
    k.ok(&[
        "-n",
        "shop",
        "set",
        "image",
        "deployment/web",
        "main=busybox:1.37",
    ]);
    k.ok(&[
        "-n",
        "shop",
        "annotate",
        "deployment/web",
        "kubernetes.io/change-cause=busybox 1.37",
    ]);
    rolled_out(&k, "shop", "deployment/web");
    wait_for(&k, "3 Running pods of busybox:1.37", 60, || {
        settled(&k, "shop", "app=web", 3)
            .is_some_and(|pods| pods.iter().all(|p| p.image == "busybox:1.37"))
    });

    // So does a command change, made by applying a changed manifest.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &deployment("shop", 3, "busybox:1.37", "v3"),
    );
    k.ok(&[
        "-n",
        "shop",
        "annotate",
        "--overwrite",
        "deployment/web",
        "kubernetes.io/change-cause=say v3",
    ]);
    rolled_out(&k, "shop", "deployment/web");
    wait_for(&k, "3 Running pods saying v3", 60, || {
        settled(&k, "shop", "app=web", 3).is_some_and(|pods| {
            pods.iter().all(|p| {
                p.command.contains("echo v3")
                    && k.run(&["-n", "shop", "logs", &p.name])
                        .stdout
                        .contains("v3")
            })
        })
    });

    let history = k.ok(&["-n", "shop", "rollout", "history", "deployment/web"]);
    let revisions: Vec<&str> = history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(revisions.len(), 3, "{history}");
    assert!(revisions[0].starts_with('1'), "{history}");
    assert!(
        revisions[1].starts_with('2') && revisions[1].contains("busybox 1.37"),
        "{history}"
    );
    assert!(
        revisions[2].starts_with('3') && revisions[2].contains("say v3"),
        "{history}"
    );
    let two = k.ok(&[
        "-n",
        "shop",
        "rollout",
        "history",
        "deployment/web",
        "--revision=2",
    ]);
    assert!(
        two.contains("busybox:1.37") && two.contains("echo v1"),
        "{two}"
    );

    // Undo returns to revision 2's template, which becomes revision 4.
    k.ok(&["-n", "shop", "rollout", "undo", "deployment/web"]);
    rolled_out(&k, "shop", "deployment/web");
    wait_for(&k, "3 Running pods saying v1 again", 60, || {
        settled(&k, "shop", "app=web", 3).is_some_and(|pods| {
            pods.iter().all(|p| {
                p.image == "busybox:1.37"
                    && p.command.contains("echo v1")
                    && k.run(&["-n", "shop", "logs", &p.name])
                        .stdout
                        .contains("v1")
            })
        })
    });
    let history = k.ok(&["-n", "shop", "rollout", "history", "deployment/web"]);
    let numbers: Vec<&str> = history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(numbers, ["1", "3", "4"], "{history}");

    // Scale up and down: the ReplicaSet's pods follow.
    k.ok(&["-n", "shop", "scale", "deployment/web", "--replicas=5"]);
    wait_for(&k, "5 Running pods", 60, || {
        settled(&k, "shop", "app=web", 5).is_some()
    });
    k.ok(&["-n", "shop", "scale", "deployment/web", "--replicas=1"]);
    wait_for(
        &k,
        "1 Running pod (the others stopped and gone)",
        60,
        || settled(&k, "shop", "app=web", 1).is_some(),
    );
    assert_eq!(
        k.ok(&[
            "-n",
            "shop",
            "get",
            "deployment/web",
            "-o",
            "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}",
        ]),
        "1/1/1"
    );

    // Deleting the Deployment takes its ReplicaSets and pods with it.
    let replicasets = k.ok(&["-n", "shop", "get", "replicasets", "-o", "name"]);
    assert_eq!(replicasets.lines().count(), 3, "{replicasets}");
    k.ok(&["-n", "shop", "delete", "deployment/web", "--timeout=60s"]);
    wait_for(&k, "the ReplicaSets and pods gone", 60, || {
        let left = k.run(&["-n", "shop", "get", "replicasets,pods", "-o", "name"]);
        left.ok && left.stdout.trim().is_empty()
    });
    assert_eq!(
        skiff_tests::pod_processes(&cluster.kubelet_root()),
        Vec::<i32>::new(),
        "pod processes still running after their pods are gone"
    );
}

#[test]
fn nodes_join_and_fail_daemonsets_follow_and_pods_move() {
    // Short timings: nodes renew their Lease every second, a node silent for 8 s is
    // unreachable, and pods tolerate an unreachable or not-ready node for 2 s.
    let mut cluster = Fixture::start(&[
        "--node-name",
        "main",
        "--node-lease-renew-interval",
        "1s",
        "--node-monitor-grace-period",
        "8s",
        "--node-monitor-period",
        "1s",
        "--default-not-ready-toleration-seconds",
        "2",
        "--default-unreachable-toleration-seconds",
        "2",
    ]);
    let k = cluster.kubectl();
    let agent_args = ["--node-lease-renew-interval", "1s"];
    wait_for(&k, "node main Ready", 60, || {
        node_ready(&k, "main") == "True"
    });
    k.ok(&["create", "namespace", "work"]);
    k.ok_with_input(&["apply", "-f", "-"], &daemonset("work"));
    wait_for(&k, "a daemon pod on main", 60, || {
        settled(&k, "work", "app=daemon", 1).is_some_and(|p| p[0].node == "main")
    });

    // A node joins: the DaemonSet gets a pod on it.
    cluster.start_agent("second", &agent_args);
    wait_for(&k, "node second Ready", 60, || {
        node_ready(&k, "second") == "True"
    });
    wait_for(&k, "a daemon pod on each node", 60, || {
        settled(&k, "work", "app=daemon", 2).is_some_and(|pods| {
            let mut nodes: Vec<&str> = pods.iter().map(|p| p.node.as_str()).collect();
            nodes.sort();
            nodes == ["main", "second"]
        })
    });
    assert_eq!(
        k.ok(&[
            "-n",
            "work",
            "get",
            "daemonset/daemon",
            "-o",
            "jsonpath={.status.desiredNumberScheduled}/{.status.numberReady}",
        ]),
        "2/2"
    );

    // A Deployment placed on the new node (main cordoned meanwhile).
    k.ok(&["cordon", "main"]);
    k.ok_with_input(
        &["apply", "-f", "-"],
        &deployment("work", 2, "busybox:1.36", "web"),
    );
    wait_for(&k, "2 web pods on second", 60, || {
        settled(&k, "work", "app=web", 2)
            .is_some_and(|pods| pods.iter().all(|p| p.node == "second"))
    });
    k.ok(&["uncordon", "main"]);
    let evicted: Vec<String> = pods(&k, "work", "app=web")
        .into_iter()
        .map(|p| p.name)
        .collect();

    // Its kubelet stops: the node goes NotReady and gets the unreachable taint...
    cluster.stop_agent();
    wait_for(&k, "node second NotReady (Unknown)", 60, || {
        node_ready(&k, "second") == "Unknown"
    });
    wait_for(&k, "the unreachable taint on second", 30, || {
        node_taints(&k, "second").contains("node.kubernetes.io/unreachable:NoExecute")
    });
    let listed = k.ok(&["get", "node", "second"]);
    assert!(listed.contains("NotReady"), "{listed}");
    // ...its web pods are evicted once their 2 s toleration runs out, and the Deployment's
    // replacements run on main.
    wait_for(&k, "the web pods evicted and replaced on main", 90, || {
        let pods = pods(&k, "work", "app=web");
        let replaced = pods
            .iter()
            .filter(|p| !p.deleting && p.phase == "Running" && p.node == "main")
            .count();
        let gone = evicted
            .iter()
            .all(|name| pods.iter().all(|p| &p.name != name || p.deleting));
        replaced == 2 && gone && pods.iter().filter(|p| !p.deleting).count() == 2
    });
    // The daemon pod stays: daemons tolerate an unreachable node for ever.
    let daemons = pods(&k, "work", "app=daemon");
    assert!(
        daemons.iter().any(|p| p.node == "second" && !p.deleting),
        "{daemons:?}"
    );

    // The kubelet comes back: the node is Ready and untainted again, the evicted pods it still
    // held are finished and gone, and its daemon pod runs again.
    cluster.start_agent("second", &agent_args);
    wait_for(&k, "node second Ready again", 60, || {
        node_ready(&k, "second") == "True"
    });
    wait_for(&k, "the unreachable taint removed", 30, || {
        !node_taints(&k, "second").contains("unreachable")
    });
    wait_for(&k, "the evicted pods gone, 2 web pods on main", 60, || {
        settled(&k, "work", "app=web", 2).is_some_and(|pods| pods.iter().all(|p| p.node == "main"))
    });
    wait_for(&k, "a daemon pod Running on each node", 60, || {
        settled(&k, "work", "app=daemon", 2).is_some()
    });

    // Deleting the namespace stops and removes everything in it, on both nodes.
    k.ok(&["-n", "work", "create", "configmap", "settings"]);
    k.ok(&[
        "-n",
        "work",
        "create",
        "service",
        "clusterip",
        "web",
        "--tcp=80:8080",
    ]);
    k.ok(&["delete", "namespace", "work", "--timeout=120s"]);
    let gone = k.fails(&["get", "namespace", "work"]);
    assert!(gone.contains("NotFound"), "{gone}");
    let all = k.ok(&[
        "get",
        "pods,replicasets,daemonsets,deployments,services,configmaps",
        "-A",
        "-o",
        "name",
    ]);
    assert!(
        !all.lines()
            .any(|l| l.contains("/web") || l.contains("/daemon") || l.contains("settings")),
        "{all}"
    );
    for root in &cluster.roots {
        assert_eq!(
            skiff_tests::pod_processes(&root),
            Vec::<i32>::new(),
            "pod processes still running under {}",
            root.display()
        );
    }
    cluster.stop_agent();
}

/// A Job `name` in `namespace` running `script` with `sh -c`, and `spec` (YAML lines at the
/// spec's indentation) before its template.
fn job(namespace: &str, name: &str, spec: &str, script: &str) -> String {
    format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: {namespace}}}
spec:
{spec}
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c", {script:?}]
"#
    )
}

fn jsonpath(k: &Kubectl, namespace: &str, target: &str, path: &str) -> String {
    k.ok(&[
        "-n",
        namespace,
        "get",
        target,
        "-o",
        &format!("jsonpath={path}"),
    ])
}

#[test]
fn jobs_complete_by_index_fail_by_backoff_limit_and_ignore_what_their_policy_says() {
    let cluster = Fixture::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "batch"]);

    // An Indexed Job of 5 completions, 2 at a time: each pod sees its own index.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &job(
            "batch",
            "idx",
            "  completionMode: Indexed\n  completions: 5\n  parallelism: 2",
            "echo index=$JOB_COMPLETION_INDEX",
        ),
    );
    k.ok(&[
        "-n",
        "batch",
        "wait",
        "--for=condition=complete",
        "job/idx",
        "--timeout=90s",
    ]);
    assert_eq!(
        jsonpath(&k, "batch", "job/idx", "{.status.completedIndexes}"),
        "0-4"
    );
    assert_eq!(jsonpath(&k, "batch", "job/idx", "{.status.succeeded}"), "5");
    let row = k.ok(&["-n", "batch", "get", "job/idx", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..3], ["idx", "Complete", "5/5"], "{row}");
    let pods: Value = serde_json::from_str(&k.ok(&[
        "-n",
        "batch",
        "get",
        "pods",
        "-l",
        "batch.kubernetes.io/job-name=idx",
        "-o",
        "json",
    ]))
    .expect("pod list JSON");
    let mut seen = Vec::new();
    for pod in pods["items"].as_array().expect("items") {
        let name = pod["metadata"]["name"].as_str().expect("name");
        let index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .expect("an index annotation")
            .to_string();
        assert_eq!(pod["status"]["phase"], "Succeeded", "{name}");
        let finalizers = pod["metadata"]["finalizers"].as_array().map_or(0, Vec::len);
        assert_eq!(finalizers, 0, "{name} still has its tracking finalizer");
        let logs = k.ok(&["-n", "batch", "logs", name]);
        assert_eq!(logs.trim(), format!("index={index}"), "{name}");
        seen.push(index);
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2", "3", "4"]);

    // Pods that exit 1: the Job fails once its backoff limit is passed, and says why.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &job("batch", "bad", "  backoffLimit: 1", "exit 1"),
    );
    k.ok(&[
        "-n",
        "batch",
        "wait",
        "--for=condition=failed",
        "job/bad",
        "--timeout=90s",
    ]);
    assert_eq!(
        jsonpath(
            &k,
            "batch",
            "job/bad",
            r#"{.status.conditions[?(@.type=="Failed")].reason}"#
        ),
        "BackoffLimitExceeded"
    );
    assert_eq!(jsonpath(&k, "batch", "job/bad", "{.status.failed}"), "2");
    let row = k.ok(&["-n", "batch", "get", "job/bad", "--no-headers"]);
    assert!(row.contains("Failed"), "{row}");

    // A policy that ignores exit code 42: the first pod's failure is not counted against a
    // backoff limit of 0, its replacement succeeds.
    let marker = cluster.dir.path().join("ran-once");
    let script = format!(
        "if [ -e {m} ]; then exit 0; fi; touch {m}; exit 42",
        m = marker.display()
    );
    k.ok_with_input(
        &["apply", "-f", "-"],
        &job(
            "batch",
            "flaky",
            "  backoffLimit: 0\n  podFailurePolicy:\n    rules:\n    - action: Ignore\n      onExitCodes: {operator: In, values: [42]}",
            &script,
        ),
    );
    k.ok(&[
        "-n",
        "batch",
        "wait",
        "--for=condition=complete",
        "job/flaky",
        "--timeout=90s",
    ]);
    assert!(marker.exists());
    assert_eq!(jsonpath(&k, "batch", "job/flaky", "{.status.failed}"), "0");
    assert_eq!(
        jsonpath(&k, "batch", "job/flaky", "{.status.succeeded}"),
        "1"
    );

    // Deleting the Jobs takes their pods with them (the tracking finalizers are gone).
    k.ok(&["-n", "batch", "delete", "jobs", "--all", "--wait=true"]);
    wait_for(&k, "the Jobs' pods to go", 60, || {
        k.ok(&["-n", "batch", "get", "pods", "-o", "name"])
            .trim()
            .is_empty()
    });
    k.ok(&["delete", "namespace", "batch", "--timeout=60s"]);
}

/// A CronJob `name` in `namespace` on `schedule` whose pods run `script`, `extra` lines added to
/// its spec.
fn cron_job(namespace: &str, name: &str, schedule: &str, extra: &str, script: &str) -> String {
    format!(
        r#"
apiVersion: batch/v1
kind: CronJob
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  schedule: "{schedule}"
{extra}
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          terminationGracePeriodSeconds: 1
          containers:
          - name: main
            image: busybox:1.36
            command: ["sh", "-c", {script:?}]
"#
    )
}

#[test]
fn a_cronjob_runs_every_minute_keeps_its_history_and_finished_jobs_expire() {
    // The CronJob controller's clock runs 20 times faster: a minute every 3 s.
    let cluster = Fixture::start(&["--cronjob-clock-rate", "20"]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "cron"]);

    // A schedule that does not parse is refused with the parser's reason; nothing is stored.
    let err = k
        .run_with_input(
            &["apply", "-f", "-"],
            &cron_job("cron", "bad", "every day", "", "true"),
        )
        .stderr;
    assert!(
        err.contains(r#"spec.schedule: Invalid value: "every day": expected exactly 5 fields"#),
        "{err}"
    );
    let err = k
        .run_with_input(
            &["apply", "-f", "-"],
            &cron_job(
                "cron",
                "zoned",
                "0 9 * * *",
                "  timeZone: Mars/Olympus",
                "true",
            ),
        )
        .stderr;
    assert!(
        err.contains(
            r#"spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus"#
        ),
        "{err}"
    );
    assert!(
        k.ok(&["-n", "cron", "get", "cronjobs", "-o", "name"])
            .trim()
            .is_empty()
    );

    k.ok_with_input(
        &["apply", "-f", "-"],
        &cron_job(
            "cron",
            "tick",
            "* * * * *",
            "  concurrencyPolicy: Forbid\n  successfulJobsHistoryLimit: 2",
            "echo tick",
        ),
    );
    let row = k.ok(&["-n", "cron", "get", "cj/tick", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..8],
        ["tick", "*", "*", "*", "*", "*", "<none>", "False"],
        "{row}"
    );

    // Three runs or more, each its own Job named for its minute, each completing; the history
    // keeps the two newest successful ones.
    let mut seen = std::collections::BTreeSet::new();
    wait_for(&k, "three runs of the CronJob", 120, || {
        let names = k.run(&["-n", "cron", "get", "jobs", "-o", "name"]).stdout;
        seen.extend(names.lines().map(str::to_string));
        seen.len() >= 3
    });
    assert!(
        seen.iter().all(|n| n.starts_with("job.batch/tick-")),
        "{seen:?}"
    );
    wait_for(&k, "the history limit to hold", 60, || {
        let jobs: Value = serde_json::from_str(&k.ok(&["-n", "cron", "get", "jobs", "-o", "json"]))
            .unwrap_or_default();
        let complete = jobs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|j| j["status"]["succeeded"] == 1)
            .count();
        complete > 0 && complete <= 2
    });
    let status = jsonpath(
        &k,
        "cron",
        "cj/tick",
        "{.status.lastScheduleTime} {.status.lastSuccessfulTime}",
    );
    assert_eq!(status.split_whitespace().count(), 2, "{status}");
    let events = k.ok(&[
        "-n",
        "cron",
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=tick",
    ]);
    assert!(events.contains("SuccessfulCreate"), "{events}");
    assert!(events.contains("SawCompletedJob"), "{events}");

    // A Job made by hand from the CronJob's template runs like any other.
    k.ok(&[
        "-n",
        "cron",
        "create",
        "job",
        "by-hand",
        "--from=cronjob/tick",
    ]);
    k.ok(&[
        "-n",
        "cron",
        "wait",
        "--for=condition=complete",
        "job/by-hand",
        "--timeout=60s",
    ]);
    assert_eq!(
        jsonpath(
            &k,
            "cron",
            "job/by-hand",
            "{.metadata.annotations.cronjob\\.kubernetes\\.io/instantiate}"
        ),
        "manual"
    );

    // Deleting the CronJob takes its Jobs with it.
    k.ok(&["-n", "cron", "delete", "cronjob", "tick", "--wait=true"]);
    wait_for(&k, "the CronJob's Jobs to go", 60, || {
        k.ok(&["-n", "cron", "get", "jobs", "-o", "name"])
            .trim()
            .is_empty()
    });

    // A finished Job with ttlSecondsAfterFinished goes by itself, its pods with it.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &job("cron", "once", "  ttlSecondsAfterFinished: 2", "echo done"),
    );
    wait_for(&k, "the expired Job to be deleted", 60, || {
        !k.run(&["-n", "cron", "get", "job/once"]).ok
    });
    wait_for(&k, "the expired Job's pods to go", 60, || {
        k.ok(&["-n", "cron", "get", "pods", "-o", "name"])
            .trim()
            .is_empty()
    });
    k.ok(&["delete", "namespace", "cron", "--timeout=60s"]);
}

/// A StatefulSet `web` in `namespace` of `replicas` sleep loops that first print `message`,
/// governed by the headless Service `web`, with `extra` lines added to its spec.
fn statefulset(namespace: &str, replicas: u32, message: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: web, namespace: {namespace}}}
spec:
  replicas: {replicas}
  serviceName: web
  selector: {{matchLabels: {{app: sts}}}}
{extra}
  template:
    metadata: {{labels: {{app: sts}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c", "echo {message}; while true; do sleep 1; done"]
"#
    )
}

/// Every string value under key `key` anywhere in `v`.
fn collect_strings(v: &Value, key: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(s) if k == key => out.push(s.clone()),
                    v => collect_strings(v, key, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, key, out)),
        _ => {}
    }
}

/// The revision numbers `kubectl rollout history` lists.
fn history_numbers(history: &str) -> Vec<u32> {
    history
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Each pod of `namespace` matching `selector`, by name: its uid, creation time, the time it
/// became Ready (empty when it is not), and its command.
fn members(k: &Kubectl, namespace: &str, selector: &str) -> BTreeMap<String, [String; 4]> {
    let run = k.run(&["-n", namespace, "get", "pods", "-l", selector, "-o", "json"]);
    let list: Value = serde_json::from_str(&run.stdout).unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready" && c["status"] == "True")
                .map(|c| text(&c["lastTransitionTime"]))
                .unwrap_or_default();
            (
                text(&p["metadata"]["name"]),
                [
                    text(&p["metadata"]["uid"]),
                    text(&p["metadata"]["creationTimestamp"]),
                    ready,
                    p["spec"]["containers"][0]["command"].to_string(),
                ],
            )
        })
        .collect()
}

#[test]
fn a_statefulset_comes_up_in_order_updates_above_its_partition_and_scales_down_from_the_top() {
    let cluster = Fixture::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "sts"]);
    k.ok_with_input(&["apply", "-f", "-"], &statefulset("sts", 3, "v1", ""));
    wait_for(&k, "three ready pods web-0..2", 120, || {
        settled(&k, "sts", "app=sts", 3).is_some()
    });
    let first = members(&k, "sts", "app=sts");
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        ["web-0", "web-1", "web-2"],
        "stable names"
    );
    // OrderedReady: each pod was created only once its predecessor was Ready (RFC 3339 in UTC
    // compares as text).
    for (prev, next) in [("web-0", "web-1"), ("web-1", "web-2")] {
        assert!(
            first[next][1] >= first[prev][2],
            "{next} created at {} before {prev} was ready at {}",
            first[next][1],
            first[prev][2]
        );
    }
    let status = k.ok(&[
        "-n",
        "sts",
        "rollout",
        "status",
        "statefulset/web",
        "--timeout=60s",
    ]);
    assert!(status.contains("complete"), "{status}");
    let row = k.ok(&["-n", "sts", "get", "sts/web", "--no-headers"]);
    assert_eq!(
        row.split_whitespace().take(2).collect::<Vec<_>>(),
        ["web", "3/3"],
        "{row}"
    );
    let hostname = k.ok(&[
        "-n",
        "sts",
        "get",
        "pod/web-1",
        "-o",
        "jsonpath={.spec.hostname}.{.spec.subdomain}",
    ]);
    assert_eq!(hostname, "web-1.web");
    // The governing headless Service lists each pod under its stable hostname.
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: sts}
spec:
  clusterIP: None
  selector: {app: sts}
  ports: [{name: http, port: 80}]
"#,
    );
    let hostnames = |what: &str| {
        let json: Value =
            serde_json::from_str(&k.run(&["-n", "sts", "get", what, "-o", "json"]).stdout)
                .unwrap_or_default();
        let mut names = Vec::new();
        collect_strings(&json, "hostname", &mut names);
        names.sort();
        names
    };
    wait_for(&k, "per-pod endpoints of the headless Service", 60, || {
        hostnames("endpoints/web") == ["web-0", "web-1", "web-2"]
            && hostnames("endpointslices") == ["web-0", "web-1", "web-2"]
    });

    // A rolling update with partition 2: only web-2 gets the new template.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &statefulset(
            "sts",
            3,
            "v2",
            "  updateStrategy:\n    type: RollingUpdate\n    rollingUpdate: {partition: 2}",
        ),
    );
    wait_for(&k, "web-2 replaced at the new revision", 120, || {
        let now = members(&k, "sts", "app=sts");
        settled(&k, "sts", "app=sts", 3).is_some()
            && now
                .get("web-2")
                .is_some_and(|p| p[0] != first["web-2"][0] && p[3].contains("v2"))
    });
    let updated = members(&k, "sts", "app=sts");
    for name in ["web-0", "web-1"] {
        assert_eq!(
            updated[name][0], first[name][0],
            "{name} is below the partition"
        );
        assert!(
            updated[name][3].contains("v1"),
            "{name}: {}",
            updated[name][3]
        );
    }
    let revisions = k.ok(&[
        "-n",
        "sts",
        "get",
        "sts/web",
        "-o",
        "jsonpath={.status.currentRevision} {.status.updateRevision} {.status.updatedReplicas}",
    ]);
    let cells: Vec<&str> = revisions.split_whitespace().collect();
    assert_ne!(cells[0], cells[1], "{revisions}");
    assert_eq!(cells[2], "1", "{revisions}");
    let (v1_revision, v2_revision) = (cells[0].to_string(), cells[1].to_string());

    // A pod below the partition that is deleted comes back as it was, at the current revision.
    k.ok(&["-n", "sts", "delete", "pod/web-1", "--wait=false"]);
    wait_for(&k, "web-1 back at the current revision", 120, || {
        let now = members(&k, "sts", "app=sts");
        settled(&k, "sts", "app=sts", 3).is_some()
            && now
                .get("web-1")
                .is_some_and(|p| p[0] != first["web-1"][0] && p[3].contains("v1"))
    });
    let web1_revision = k.ok(&[
        "-n",
        "sts",
        "get",
        "pod/web-1",
        "-o",
        "jsonpath={.metadata.labels.controller-revision-hash}",
    ]);
    assert_eq!(web1_revision, v1_revision);

    // The history as kubectl shows it: a ControllerRevision per template, controlled by the set.
    let history = k.ok(&["-n", "sts", "rollout", "history", "statefulset/web"]);
    assert_eq!(history_numbers(&history), [1, 2], "{history}");
    let listed = k.ok(&["-n", "sts", "get", "controllerrevisions", "--no-headers"]);
    let mut rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().take(3).collect())
        .collect();
    rows.sort();
    let mut expected = vec![
        vec![v1_revision.as_str(), "statefulset.apps/web", "1"],
        vec![v2_revision.as_str(), "statefulset.apps/web", "2"],
    ];
    expected.sort();
    assert_eq!(rows, expected, "{listed}");
    let old_template = k.ok(&[
        "-n",
        "sts",
        "rollout",
        "history",
        "statefulset/web",
        "--revision=1",
    ]);
    assert!(old_template.contains("echo v1"), "{old_template}");

    // Undo: the set's template is v1 again; web-2 rolls back; revision 1 becomes 3.
    let undone = k.ok(&["-n", "sts", "rollout", "undo", "statefulset/web"]);
    assert!(undone.contains("rolled back"), "{undone}");
    wait_for(&k, "web-2 rolled back to v1", 120, || {
        let now = members(&k, "sts", "app=sts");
        settled(&k, "sts", "app=sts", 3).is_some()
            && now.values().all(|p| p[3].contains("v1"))
            && k.run(&[
                "-n",
                "sts",
                "get",
                "sts/web",
                "-o",
                "jsonpath={.status.updateRevision}",
            ])
            .stdout
                == v1_revision
    });
    let history = k.ok(&["-n", "sts", "rollout", "history", "statefulset/web"]);
    assert_eq!(history_numbers(&history), [2, 3], "{history}");
    let refused = k.fails(&[
        "-n",
        "sts",
        "rollout",
        "undo",
        "statefulset/web",
        "--to-revision=7",
    ]);
    assert!(
        refused.contains("unable to find specified revision 7"),
        "{refused}"
    );

    // Scaling down goes from the highest ordinal and keeps web-0.
    k.ok(&["-n", "sts", "scale", "statefulset/web", "--replicas=1"]);
    wait_for(&k, "one pod left", 120, || {
        settled(&k, "sts", "app=sts", 1).is_some()
    });
    let left = members(&k, "sts", "app=sts");
    assert_eq!(left.keys().collect::<Vec<_>>(), ["web-0"]);
    assert_eq!(left["web-0"][0], first["web-0"][0]);

    // Deleting the set takes its pods with it.
    k.ok(&["-n", "sts", "delete", "statefulset/web"]);
    wait_for(&k, "the set's pods gone", 120, || {
        pods(&k, "sts", "app=sts").is_empty()
    });
}

#[test]
fn replication_controllers_scale_and_cascade_and_daemonsets_roll_back() {
    let cluster = Fixture::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "legacy"]);
    // A ReplicationController as old manifests write it: no selector (it defaults to the
    // template's labels).
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: ReplicationController
metadata: {name: old, namespace: legacy}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: old}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c", "while true; do sleep 1; done"]
"#,
    );
    wait_for(&k, "two ready pods of the controller", 120, || {
        settled(&k, "legacy", "app=old", 2).is_some()
    });
    let row = k.ok(&[
        "-n",
        "legacy",
        "get",
        "rc",
        "old",
        "-o",
        "wide",
        "--no-headers",
    ]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..4], ["old", "2", "2", "2"], "{row}");
    assert_eq!(cells.last(), Some(&"app=old"), "{row}");
    let owner = k.ok(&[
        "-n",
        "legacy",
        "get",
        "pods",
        "-l",
        "app=old",
        "-o",
        "jsonpath={.items[0].metadata.ownerReferences[0].kind}",
    ]);
    assert_eq!(owner, "ReplicationController");
    k.ok(&["-n", "legacy", "scale", "rc/old", "--replicas=3"]);
    wait_for(&k, "three pods after kubectl scale rc", 120, || {
        settled(&k, "legacy", "app=old", 3).is_some()
    });
    let scale = k.ok(&[
        "get",
        "--raw",
        "/api/v1/namespaces/legacy/replicationcontrollers/old/scale",
    ]);
    let scale: Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(scale["spec"]["replicas"], 3, "{scale}");
    assert_eq!(scale["status"]["selector"], "app=old", "{scale}");
    k.ok(&["-n", "legacy", "delete", "rc/old"]);
    wait_for(&k, "the controller's pods gone", 120, || {
        pods(&k, "legacy", "app=old").is_empty()
    });

    // A DaemonSet's history and undo.
    k.ok_with_input(&["apply", "-f", "-"], &daemonset("legacy"));
    wait_for(&k, "the daemon pod", 120, || {
        settled(&k, "legacy", "app=daemon", 1).is_some()
    });
    k.ok(&[
        "-n",
        "legacy",
        "set",
        "image",
        "daemonset/daemon",
        "main=busybox:1.37",
    ]);
    wait_for(&k, "the daemon pod updated", 120, || {
        settled(&k, "legacy", "app=daemon", 1)
            .is_some_and(|p| p.iter().all(|p| p.image == "busybox:1.37"))
    });
    let history = k.ok(&["-n", "legacy", "rollout", "history", "daemonset/daemon"]);
    assert_eq!(history_numbers(&history), [1, 2], "{history}");
    k.ok(&["-n", "legacy", "rollout", "undo", "daemonset/daemon"]);
    wait_for(&k, "the daemon pod rolled back", 120, || {
        settled(&k, "legacy", "app=daemon", 1)
            .is_some_and(|p| p.iter().all(|p| p.image == "busybox:1.36"))
    });
    let history = k.ok(&["-n", "legacy", "rollout", "history", "daemonset/daemon"]);
    assert_eq!(history_numbers(&history), [2, 3], "{history}");
    k.ok(&["delete", "namespace", "legacy", "--timeout=60s"]);
    // The namespace took the revisions with it.
    assert!(
        k.run(&["-n", "legacy", "get", "controllerrevisions", "--no-headers"])
            .stdout
            .trim()
            .is_empty()
    );
}

/// A PodDisruptionBudget `web` in `namespace` keeping `min_available` pods of `app=web`.
fn budget(namespace: &str, min_available: u32) -> String {
    format!(
        r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: {namespace}}}
spec:
  minAvailable: {min_available}
  selector: {{matchLabels: {{app: web}}}}
"#
    )
}

/// A pod `name` in `namespace` with the extra spec lines `extra`.
fn bare_pod(namespace: &str, name: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  {extra}
  containers:
  - name: main
    image: busybox:1.36
    command: ["sh", "-c", "while true; do sleep 1; done"]
"#
    )
}

#[test]
fn drain_evicts_within_the_disruption_budget_and_priority_classes_set_pod_priority() {
    let cluster = Fixture::start(&["--node-name", "main"]);
    let k = cluster.kubectl();
    wait_for(&k, "node main Ready", 60, || {
        node_ready(&k, "main") == "True"
    });
    k.ok(&["create", "namespace", "shop"]);
    k.ok_with_input(
        &["apply", "-f", "-"],
        &deployment("shop", 2, "busybox:1.36", "v1"),
    );
    wait_for(&k, "2 Running pods", 60, || {
        settled(&k, "shop", "app=web", 2).is_some()
    });
    let originals: Vec<String> = pods(&k, "shop", "app=web")
        .into_iter()
        .map(|p| p.name)
        .collect();

    // A budget that allows no disruption: the controller says so, and drain evicts nothing.
    k.ok_with_input(&["apply", "-f", "-"], &budget("shop", 2));
    let status = |path: &str| jsonpath(&k, "shop", "pdb/web", path);
    wait_for(&k, "the budget's status", 30, || {
        status(
            "{.status.currentHealthy}/{.status.desiredHealthy}/{.status.expectedPods}/{.status.disruptionsAllowed}",
        ) == "2/2/2/0"
    });
    let table = k.ok(&["-n", "shop", "get", "pdb"]);
    assert!(
        table.contains("MIN AVAILABLE   MAX UNAVAILABLE   ALLOWED DISRUPTIONS"),
        "{table}"
    );
    let refused = k.run(&["drain", "main", "--ignore-daemonsets", "--timeout=8s"]);
    assert!(!refused.ok, "{}", refused.stdout);
    assert!(
        refused
            .stderr
            .contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{}",
        refused.stderr
    );
    let still: Vec<String> = settled(&k, "shop", "app=web", 2)
        .expect("both pods still running")
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(still, originals);

    // One disruption allowed: drain evicts one pod, and the second waits for its replacement,
    // which cannot start on the cordoned node; drain gives up at its timeout.
    k.ok_with_input(&["apply", "-f", "-"], &budget("shop", 1));
    wait_for(&k, "one disruption allowed", 30, || {
        status("{.status.disruptionsAllowed}") == "1"
    });
    let partial = k.run(&["drain", "main", "--ignore-daemonsets", "--timeout=12s"]);
    assert!(!partial.ok, "{}", partial.stdout);
    wait_for(&k, "exactly one original pod evicted", 30, || {
        let left: Vec<PodRow> = pods(&k, "shop", "app=web")
            .into_iter()
            .filter(|p| originals.contains(&p.name))
            .collect();
        left.len() == 1 && left[0].phase == "Running" && !left[0].deleting
    });
    assert!(
        partial.stdout.contains("evicted"),
        "{}\n{}",
        partial.stdout,
        partial.stderr
    );
    // The replacement waits unscheduled; the budget counts it as expected but not healthy.
    wait_for(&k, "the budget counts the pending replacement", 30, || {
        status("{.status.currentHealthy}/{.status.expectedPods}/{.status.disruptionsAllowed}")
            == "1/2/0"
    });

    // Without eviction, drain deletes regardless of the budget.
    k.ok(&[
        "drain",
        "main",
        "--ignore-daemonsets",
        "--disable-eviction",
        "--timeout=60s",
    ]);
    assert!(
        pods(&k, "shop", "app=web")
            .iter()
            .all(|p| !originals.contains(&p.name)),
        "every original pod is gone"
    );
    k.ok(&["uncordon", "main"]);

    // Priority classes: the two built-in ones exist and stay; a pod takes its class's value.
    let classes = k.ok(&["get", "priorityclasses"]);
    for line in [
        "system-cluster-critical   2000000000",
        "system-node-critical      2000001000",
    ] {
        assert!(classes.contains(line), "{classes}");
    }
    let gone = k.fails(&["delete", "priorityclass", "system-node-critical"]);
    assert!(
        gone.contains("this is a system priority class and cannot be deleted"),
        "{gone}"
    );
    let too_high = k.fails(&["create", "priorityclass", "huge", "--value=1000000001"]);
    assert!(
        too_high.contains("maximum allowed value of a user defined priority is 1000000000"),
        "{too_high}"
    );
    k.ok(&["create", "priorityclass", "high", "--value=1000"]);
    k.ok_with_input(
        &["apply", "-f", "-"],
        &bare_pod("shop", "urgent", "priorityClassName: high"),
    );
    assert_eq!(
        jsonpath(
            &k,
            "shop",
            "pod/urgent",
            "{.spec.priority} {.spec.preemptionPolicy}"
        ),
        "1000 PreemptLowerPriority"
    );
    let unknown = k.run_with_input(
        &["apply", "-f", "-"],
        &bare_pod("shop", "lost", "priorityClassName: nowhere"),
    );
    assert!(
        unknown
            .stderr
            .contains("no PriorityClass with name nowhere was found"),
        "{}",
        unknown.stderr
    );
    let liar = k.run_with_input(
        &["apply", "-f", "-"],
        &bare_pod("shop", "liar", "priorityClassName: high\n  priority: 5"),
    );
    assert!(
        liar.stderr
            .contains("the integer value of priority (5) must not be provided in pod spec"),
        "{}",
        liar.stderr
    );
    // A global default class is what pods without a class get; only one may exist.
    k.ok(&[
        "create",
        "priorityclass",
        "usual",
        "--value=10",
        "--global-default",
    ]);
    k.ok_with_input(&["apply", "-f", "-"], &bare_pod("shop", "plain", ""));
    assert_eq!(
        jsonpath(
            &k,
            "shop",
            "pod/plain",
            "{.spec.priorityClassName} {.spec.priority}"
        ),
        "usual 10"
    );
    let second = k.fails(&[
        "create",
        "priorityclass",
        "other",
        "--value=20",
        "--global-default",
    ]);
    assert!(
        second.contains(
            "PriorityClass usual is already marked as default. Only one default can exist"
        ),
        "{second}"
    );

    // The kinds charts carry are served and stored.
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: runc}
handler: runc
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: hostpath.csi.k8s.io}
spec: {}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: low}
spec: {type: Limited, limited: {limitResponse: {type: Queue}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: mine}
spec: {priorityLevelConfiguration: {name: low}, distinguisherMethod: {type: ByUser}}
"#,
    );
    let shown = k.ok(&[
        "get",
        "runtimeclasses,csidrivers,prioritylevelconfigurations,flowschemas",
        "--no-headers",
    ]);
    for name in [
        "runtimeclass.node.k8s.io/runc",
        "csidriver.storage.k8s.io/hostpath.csi.k8s.io",
        "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/low",
        "flowschema.flowcontrol.apiserver.k8s.io/mine",
    ] {
        assert!(shown.contains(name), "{name} in {shown}");
    }
    let resources = k.ok(&["api-resources", "--no-headers"]);
    for line in [
        "poddisruptionbudgets",
        "priorityclasses",
        "volumeattachments",
        "csinodes",
    ] {
        assert!(resources.contains(line), "{line} in {resources}");
    }
    k.ok(&["delete", "namespace", "shop", "--wait=false"]);
}

#[test]
fn a_quota_blocks_the_fourth_pod_and_a_limit_range_fills_in_requests() {
    let cluster = Fixture::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "team"]);
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: team}
spec:
  limits:
  - type: Container
    defaultRequest: {cpu: 100m, memory: 64Mi}
    default: {cpu: 200m, memory: 128Mi}
    max: {cpu: "1"}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: team}
spec:
  hard: {pods: "3", requests.cpu: "1", limits.cpu: "2", services: "1"}
"#,
    );
    let used = |path: &str| jsonpath(&k, "team", "quota/compute", path);
    wait_for(&k, "the quota mirrored and counted", 30, || {
        used("{.status.hard.pods}/{.status.used.pods}/{.status.used.requests\\.cpu}") == "3/0/0"
    });

    // Three pods that state nothing get the range's defaults, and are charged for them.
    for name in ["a", "b", "c"] {
        k.ok_with_input(&["apply", "-f", "-"], &bare_pod("team", name, ""));
    }
    let resources = jsonpath(&k, "team", "pod/a", "{.spec.containers[0].resources}");
    let resources: serde_json::Value = serde_json::from_str(&resources).unwrap();
    assert_eq!(
        resources,
        serde_json::json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                           "limits": {"cpu": "200m", "memory": "128Mi"}})
    );
    assert_eq!(
        jsonpath(
            &k,
            "team",
            "pod/a",
            "{.metadata.annotations.kubernetes\\.io/limit-ranger}"
        ),
        "LimitRanger plugin set: cpu, memory request for container main; cpu, memory limit for container main"
    );
    assert_eq!(
        used("{.status.used.pods}/{.status.used.requests\\.cpu}/{.status.used.limits\\.cpu}"),
        "3/300m/600m"
    );
    let table = k.ok(&["-n", "team", "get", "quota"]);
    assert!(
        table.contains("pods: 3/3, requests.cpu: 300m/1, services: 0/1")
            && table.contains("limits.cpu: 600m/2"),
        "{table}"
    );

    // The fourth is over the quota: 403 in kube-apiserver's words, and nothing is written.
    let refused = k.run_with_input(&["apply", "-f", "-"], &bare_pod("team", "d", ""));
    assert!(!refused.ok);
    assert!(
        refused.stderr.contains(
            "pods \"d\" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=3, limited: pods=3"
        ),
        "{}",
        refused.stderr
    );
    assert!(
        k.run(&["-n", "team", "get", "pod", "d"])
            .stderr
            .contains("NotFound")
    );

    // Outside the range: refused before the quota is asked.
    let greedy = bare_pod("team", "greedy", "").replace(
        "    command:",
        "    resources: {limits: {cpu: \"2\"}}\n    command:",
    );
    let refused = k.run_with_input(&["apply", "-f", "-"], &greedy);
    assert!(
        refused.stderr.contains(
            "pods \"greedy\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "{}",
        refused.stderr
    );

    // A deleted pod gives its usage back, and the fourth fits.
    k.ok(&[
        "-n",
        "team",
        "delete",
        "pod",
        "a",
        "--grace-period=1",
        "--wait=true",
        "--timeout=60s",
    ]);
    wait_for(&k, "usage given back", 30, || {
        used("{.status.used.pods}/{.status.used.requests\\.cpu}") == "2/200m"
    });
    k.ok_with_input(&["apply", "-f", "-"], &bare_pod("team", "d", ""));

    // Object counts: one Service, not two.
    k.ok(&[
        "-n",
        "team",
        "create",
        "service",
        "clusterip",
        "one",
        "--tcp=80:80",
    ]);
    let two = k.fails(&[
        "-n",
        "team",
        "create",
        "service",
        "clusterip",
        "two",
        "--tcp=80:80",
    ]);
    assert!(
        two.contains(
            "exceeded quota: compute, requested: services=1, used: services=1, limited: services=1"
        ),
        "{two}"
    );
}

#[test]
fn a_more_important_pod_preempts_a_less_important_one_on_a_full_node() {
    let cluster = Fixture::start(&["--node-name", "main"]);
    let k = cluster.kubectl();
    wait_for(&k, "node main Ready", 60, || {
        node_ready(&k, "main") == "True"
    });
    let allocatable = k.ok(&[
        "get",
        "node",
        "main",
        "-o",
        "jsonpath={.status.allocatable.cpu}",
    ]);
    let millis = cpu_millis(&allocatable);
    // Each pod asks for 60% of the node: one fits, two do not.
    let request = format!("{}m", millis * 6 / 10);
    k.ok(&["create", "namespace", "batch"]);
    k.ok(&["create", "priorityclass", "low", "--value=10"]);
    k.ok(&["create", "priorityclass", "high", "--value=1000"]);
    let with = |name: &str, class: &str| {
        bare_pod(
            "batch",
            name,
            &format!("terminationGracePeriodSeconds: 2\n  priorityClassName: {class}"),
        )
        .replace(
            "    command:",
            &format!("    resources: {{requests: {{cpu: {request}}}}}\n    command:"),
        )
    };
    k.ok_with_input(&["apply", "-f", "-"], &with("victim", "low"));
    wait_for(&k, "the victim running", 60, || {
        jsonpath(&k, "batch", "pod/victim", "{.status.phase}") == "Running"
    });
    let victim_uid = jsonpath(&k, "batch", "pod/victim", "{.metadata.uid}");
    k.ok_with_input(&["apply", "-f", "-"], &with("urgent", "high"));
    assert_eq!(
        jsonpath(&k, "batch", "pod/urgent", "{.spec.priority}"),
        "1000"
    );

    // The victim is evicted, the preemptor nominated to the node and then running there.
    wait_for(&k, "the preemptor running on main", 90, || {
        jsonpath(
            &k,
            "batch",
            "pod/urgent",
            "{.spec.nodeName}/{.status.phase}",
        ) == "main/Running"
    });
    let victim = k.run(&[
        "-n",
        "batch",
        "get",
        "pod",
        "victim",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert!(
        !victim.ok || victim.stdout != victim_uid,
        "the victim is gone: {}",
        victim.stdout
    );
    let urgent_uid = jsonpath(&k, "batch", "pod/urgent", "{.metadata.uid}");
    let events = k.ok(&[
        "-n",
        "batch",
        "get",
        "events",
        "--field-selector",
        "reason=Preempted",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(&format!("Preempted by pod {urgent_uid} on node main")),
        "{events}"
    );
    // A pod of lower priority than everything on the node waits instead of evicting.
    k.ok_with_input(&["apply", "-f", "-"], &with("patient", "low"));
    wait_for(&k, "the low pod unschedulable", 30, || {
        jsonpath(
            &k,
            "batch",
            "pod/patient",
            "{.status.conditions[?(@.type==\"PodScheduled\")].reason}",
        ) == "Unschedulable"
    });
    assert_eq!(
        jsonpath(&k, "batch", "pod/urgent", "{.status.phase}"),
        "Running",
        "the more important pod stays"
    );
}

/// Millicores of a CPU quantity as a node reports it (`2`, `1500m`).
fn cpu_millis(cpu: &str) -> u64 {
    match cpu.strip_suffix('m') {
        Some(m) => m.parse().expect("millicores"),
        None => cpu.parse::<u64>().expect("cores") * 1000,
    }
}

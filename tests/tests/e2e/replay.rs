//! `skiff get --at`, `history`, `diff`, `log`, `replay`, `export`/`import` and `server --paused`
//! against a scripted scenario driven with kubectl on `skiff server` (controllers, scheduler and
//! a kubelet running the pods as host processes), read both from the running server (its debug
//! endpoints) and from its stopped data dir; then replayed copies of it, paused and resumed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skiff_tests::{Kubectl, TestCluster, eventually, free_port, kill_pod_processes, skiff_binary};

/// Sleep loops (the kubelet runs them as host processes) that stop quickly when deleted.
const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: busybox:1
        command: ["sh", "-c", "while true; do sleep 1; done"]
"#;

const CONFIGMAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: default}
data: {k: v1}
"#;

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const REPLICASETS: &str = "/apis/apps/v1/namespaces/default/replicasets";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// What `skiff` printed.
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn skiff(args: &[&str]) -> Out {
    let out = Command::new(skiff_binary())
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("running skiff");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn skiff_ok(args: &[&str]) -> String {
    let out = skiff(args);
    assert!(
        out.ok,
        "skiff {} failed:\nstdout: {}\nstderr: {}",
        args.join(" "),
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The items of a list as kubectl or `skiff get -o json` printed it.
fn items(text: &str) -> Vec<Value> {
    json(text)["items"].as_array().cloned().unwrap_or_default()
}

/// A table without its last column (AGE differs between the two moments it is printed at).
fn without_age(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| {
            let mut cells: Vec<String> = l.split_whitespace().map(str::to_string).collect();
            cells.pop();
            cells
        })
        .collect()
}

/// A list read in one request: its items, and the revision they are the state at.
#[derive(Debug, Clone, PartialEq)]
struct Listed {
    revision: u64,
    items: Vec<Value>,
}

/// `kubectl get --raw` of the list at `path`: unlike `kubectl get -o json`, which blanks it, it
/// keeps the list's resourceVersion, the revision its items are the state at. Each item gets the
/// apiVersion and kind kubectl adds when it prints a list (and `skiff get` prints).
fn list_raw(run: impl Fn(&[&str]) -> String, path: &str) -> Listed {
    let list = json(&run(&["get", "--raw", path]));
    let kind = list["kind"]
        .as_str()
        .and_then(|k| k.strip_suffix("List"))
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .to_string();
    let revision = list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("a list without a resourceVersion: {list}"));
    let items = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut item| {
            item["apiVersion"] = list["apiVersion"].clone();
            item["kind"] = json!(kind);
            item
        })
        .collect();
    Listed { revision, items }
}

fn list(k: &Kubectl, path: &str) -> Listed {
    list_raw(|args| k.ok(args), path)
}

/// The newest revision of the log, as a list's resourceVersion says.
fn current_revision(cluster: &TestCluster) -> u64 {
    list(&cluster.kubectl(), "/api/v1/configmaps").revision
}

/// One step of the scenario: a revision, and what kubectl showed of the namespace then.
#[derive(Debug, Clone)]
struct Step {
    /// A revision at which every list below is the state.
    revision: u64,
    deployments: Vec<Value>,
    deployments_table: String,
    replicasets: Vec<Value>,
    configmaps: Vec<Value>,
    pods: Vec<Value>,
}

impl Step {
    fn read(k: &Kubectl) -> Step {
        let deployments = list(k, DEPLOYMENTS).items;
        let deployments_table = k.run(&["get", "deployments"]).stdout;
        let replicasets = list(k, REPLICASETS).items;
        let configmaps = list(k, CONFIGMAPS).items;
        let pods = list(k, PODS);
        Step {
            revision: pods.revision,
            deployments,
            deployments_table,
            replicasets,
            configmaps,
            pods: pods.items,
        }
    }

    fn same_state(&self, other: &Step) -> bool {
        self.deployments == other.deployments
            && without_age(&self.deployments_table) == without_age(&other.deployments_table)
            && self.replicasets == other.replicasets
            && self.configmaps == other.configmaps
            && self.pods == other.pods
    }

    fn pod_names(&self) -> Vec<String> {
        names(&self.pods)
    }
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// What kubectl shows of the namespace once it holds still: the controllers and the kubelet keep
/// writing (statuses, replacements) for a while after each command, so the lists are read over
/// and over until two reads in a row agree object for object (resourceVersions included). Each
/// list was then the same at both of its reads, and each read happened in order, so the
/// revision of the first read's pod list (its last list) lies between both reads of every list:
/// every list of that read is the state at that revision.
fn record(k: &Kubectl) -> Step {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Step::read(k);
    loop {
        let next = Step::read(k);
        if last.same_state(&next) {
            return last;
        }
        assert!(
            Instant::now() < deadline,
            "the namespace never held still for two reads in a row: {next:#?}"
        );
        last = next;
    }
}

/// Whether the Deployment `web` has rolled out: its status caught up with its spec, and exactly
/// `replicas` pods run `image`, all Running and Ready, none being deleted, none left of an older
/// template.
fn rolled_out(k: &Kubectl, replicas: i64, image: &str) -> bool {
    let deployments = list(k, DEPLOYMENTS).items;
    let pods = list(k, PODS).items;
    let [web] = deployments.as_slice() else {
        return false;
    };
    let status = &web["status"];
    let caught_up = status["observedGeneration"] == web["metadata"]["generation"]
        && [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ]
        .iter()
        .all(|f| status[f].as_i64() == Some(replicas));
    caught_up && pods_running(&pods, replicas, image)
}

/// Whether `pods` are exactly `n` pods of `image`, all Running and Ready, none being deleted.
fn pods_running(pods: &[Value], n: i64, image: &str) -> bool {
    pods.len() as i64 == n
        && pods.iter().all(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && p["status"]["phase"] == "Running"
                && p["spec"]["containers"][0]["image"] == image
                && p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn wait_for(k: &Kubectl, what: &str, check: impl FnMut() -> bool) {
    if !eventually(Duration::from_secs(90), check) {
        panic!(
            "{what}: not within 90 s\n{}\n{}",
            k.run(&["get", "deployments,replicasets,pods", "-o", "wide"])
                .stdout,
            k.run(&["get", "nodes", "-o", "wide"]).stdout
        );
    }
}

/// The resourceVersion of the object a kubectl command printed with `-o json`: the revision of
/// the write it made.
fn written_at(printed: &str) -> u64 {
    json(printed)["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {printed}"))
}

fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

/// The current time in RFC 3339, as a user would type it.
fn now_rfc3339() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%NZ"])
        .output()
        .expect("running date");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn rev(r: u64) -> String {
    r.to_string()
}

/// One version `skiff history -o json` listed.
#[derive(Debug)]
struct Version {
    revision: u64,
    operation: String,
    manager: Option<String>,
    object: Value,
}

fn history(args: &[&str]) -> Vec<Version> {
    let text = skiff_ok(&[&["history"], args, &["-o", "json"]].concat());
    json(&text)["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Version {
            revision: v["revision"].as_u64().unwrap(),
            operation: v["operation"].as_str().unwrap().to_string(),
            manager: v["manager"].as_str().map(str::to_string),
            object: v["object"].clone(),
        })
        .collect()
}

/// What `skiff diff` printed, as (how, kind, name), sorted; Events left out (the components
/// record them at their own pace).
fn diff(args: &[&str]) -> Vec<(String, String, String)> {
    let text = skiff_ok(&[&["diff"], args, &["-n", "default", "-o", "json"]].concat());
    let mut out: Vec<_> = json(&text)["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["diff"].as_str().unwrap().to_string(),
                d["kind"].as_str().unwrap().to_string(),
                d["name"].as_str().unwrap().to_string(),
            )
        })
        .filter(|(_, kind, _)| kind != "Event")
        .collect();
    out.sort();
    out
}

/// What differs between two lists of one kind, as kubectl showed them, in `skiff diff`'s terms.
fn differences(kind: &str, before: &[Value], after: &[Value]) -> Vec<(String, String, String)> {
    let find = |list: &[Value], name: &str| -> Option<u64> {
        list.iter()
            .find(|o| o["metadata"]["name"] == name)
            .map(resource_version)
    };
    let mut all = names(before);
    all.extend(names(after));
    all.sort();
    all.dedup();
    all.into_iter()
        .filter_map(|name| {
            let how = match (find(before, &name), find(after, &name)) {
                (None, Some(_)) => "created",
                (Some(_), None) => "deleted",
                (Some(a), Some(b)) if a != b => "changed",
                _ => return None,
            };
            Some((how.to_string(), kind.to_string(), name))
        })
        .collect()
}

/// What differs between two steps, as kubectl showed them.
fn step_differences(a: &Step, b: &Step) -> Vec<(String, String, String)> {
    let mut out = differences("Deployment", &a.deployments, &b.deployments);
    out.extend(differences("ReplicaSet", &a.replicasets, &b.replicasets));
    out.extend(differences("ConfigMap", &a.configmaps, &b.configmaps));
    out.extend(differences("Pod", &a.pods, &b.pods));
    out.sort();
    out
}

fn triples(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = list
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    out.sort();
    out
}

/// Kills the pod processes the kubelets under these root dirs left running (a kubelet leaves its
/// pods running when it stops, as a real one does), after the servers are gone: declared before
/// them, it is dropped after them, passed or failed.
struct PodCleanup(Vec<PathBuf>);

impl Drop for PodCleanup {
    fn drop(&mut self) {
        for root in &self.0 {
            let killed = kill_pod_processes(root);
            if killed > 0 {
                eprintln!(
                    "killed {killed} pod processes left under {}",
                    root.display()
                );
            }
        }
    }
}

/// A `skiff server` on an existing data dir (stopped with SIGTERM on drop, SIGKILL if it
/// lingers).
struct Server {
    child: Option<Child>,
    kubeconfig: PathBuf,
    log: PathBuf,
}

impl Server {
    fn start(data_dir: &Path, extra: &[&str]) -> Server {
        let log = data_dir.with_extension("log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(skiff_binary())
            .arg("server")
            .arg("--data-dir")
            .arg(data_dir)
            .args([
                "--bind-address",
                "127.0.0.1",
                "--port",
                &free_port().to_string(),
            ])
            .args(extra)
            // The built-in ingress on loopback, as the harness's servers have it.
            .env("SKIFF_INGRESS_HTTP_ADDRESS", "127.0.0.1:0")
            .env("SKIFF_INGRESS_HTTPS_ADDRESS", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let kubeconfig = data_dir.join("admin.kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let mut server = Server {
            child: Some(child),
            kubeconfig,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(
                server.child.as_mut().unwrap().try_wait().unwrap().is_none(),
                "server exited: {}",
                server.log_text()
            );
            if server.kubeconfig.exists() && server.kubectl(&["get", "--raw", "/readyz"]).ok {
                break;
            }
            assert!(Instant::now() < deadline, "server not ready in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kubectl(&self, args: &[&str]) -> Out {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap();
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(out.ok, "kubectl {}: {}", args.join(" "), out.stderr);
        out.stdout
    }

    fn list(&self, path: &str) -> Listed {
        list_raw(|args| self.kubectl_ok(args), path)
    }

    /// SIGTERM (its kubelet stops its pods first), then SIGKILL if it has not exited in 30 s.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let exited = eventually(skiff_tests::STOP_WITHIN, || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
        if !exited {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- replayed server log ----\n{}", self.log_text());
        }
        self.stop();
    }
}

/// `skiff get KIND --at POINT -o json --show-managed-fields` from `source` (`--kubeconfig X` or
/// `--data-dir X`): the items.
fn get_at(kind: &str, at: &str, source: &[&str]) -> Vec<Value> {
    let args = [
        &[
            "get",
            kind,
            "--at",
            at,
            "-o",
            "json",
            "--show-managed-fields",
        ],
        source,
    ]
    .concat();
    items(&skiff_ok(&args))
}

/// Every step's lists read back with `skiff get --at` from `source` match what kubectl showed.
fn assert_steps_read_back(steps: &[&Step], source: &[&str]) {
    for s in steps {
        let at = &rev(s.revision);
        assert_eq!(
            get_at("deploy", at, source),
            s.deployments,
            "deployments at {at} ({source:?})"
        );
        assert_eq!(
            get_at("rs", at, source),
            s.replicasets,
            "replicasets at {at} ({source:?})"
        );
        assert_eq!(
            get_at("cm", at, source),
            s.configmaps,
            "configmaps at {at} ({source:?})"
        );
        assert_eq!(
            get_at("pods", at, source),
            s.pods,
            "pods at {at} ({source:?})"
        );
    }
}

#[test]
fn scripted_scenario_reads_back_at_every_step() {
    let work = tempfile::tempdir().unwrap();
    let resumed = work.path().join("resumed");
    let mut cluster = TestCluster::start_server(&[]);
    let _cleanup = PodCleanup(vec![cluster.kubelet_root(), resumed.join("kubelet")]);
    let k = cluster.kubectl();
    let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
    let remote = ["--kubeconfig", kubeconfig.as_str()];

    // Step 0: nothing of ours yet.
    let s0 = record(&k);
    // Step 1: a Deployment and a ConfigMap; its two pods run.
    let deploy_created =
        written_at(&k.ok_with_input(&["apply", "-f", "-", "-o", "json"], DEPLOYMENT));
    let cm_created = written_at(&k.ok_with_input(&["create", "-f", "-", "-o", "json"], CONFIGMAP));
    wait_for(&k, "2 pods of busybox:1", || rolled_out(&k, 2, "busybox:1"));
    let s1 = record(&k);
    // Step 2: scaled (kubectl scale changes spec.replicas through the scale subresource).
    k.ok(&["scale", "deployment/web", "--replicas=5"]);
    wait_for(&k, "5 pods of busybox:1", || rolled_out(&k, 5, "busybox:1"));
    let s2 = record(&k);
    std::thread::sleep(Duration::from_millis(1100));
    let after_s2 = now_rfc3339();
    std::thread::sleep(Duration::from_millis(1100));
    // Step 3: the ConfigMap patched, then a rollout (a new image).
    let cm_patched = written_at(&k.ok(&[
        "patch",
        "configmap",
        "cfg",
        "-p",
        r#"{"data":{"k":"v2"}}"#,
        "-o",
        "json",
    ]));
    let image_set = written_at(&k.ok(&[
        "set",
        "image",
        "deployment/web",
        "main=busybox:2",
        "-o",
        "json",
    ]));
    wait_for(&k, "5 pods of busybox:2", || rolled_out(&k, 5, "busybox:2"));
    let s3 = record(&k);
    // Step 4: a pod deleted; its ReplicaSet replaces it.
    let victim = s3.pod_names()[0].clone();
    k.ok(&["delete", "pod", &victim, "--wait=false"]);
    // The node's last heartbeat before the delete was committed is older than this.
    let deleted_at = Instant::now();
    wait_for(&k, "the deleted pod replaced", || {
        rolled_out(&k, 5, "busybox:2") && !names(&list(&k, PODS).items).contains(&victim)
    });
    let s4 = record(&k);
    let replacement: Vec<String> = s4
        .pod_names()
        .into_iter()
        .filter(|p| !s3.pod_names().contains(p))
        .collect();
    let [replacement] = replacement.as_slice() else {
        panic!("not one replacement pod: {replacement:?}");
    };
    // Step 5: the ConfigMap deleted; step 6: the Deployment deleted, and with it its pods.
    k.ok(&["delete", "configmap", "cfg"]);
    let s5 = record(&k);
    k.ok(&["delete", "deployment", "web"]);
    wait_for(&k, "the Deployment's pods gone", || {
        list(&k, PODS).items.is_empty() && list(&k, REPLICASETS).items.is_empty()
    });
    let s6 = record(&k);
    let steps = [&s0, &s1, &s2, &s3, &s4, &s5, &s6];
    for (before, after) in steps.iter().zip(&steps[1..]) {
        assert!(before.revision < after.revision, "{steps:#?}");
    }
    assert!(s0.deployments.is_empty() && s0.pods.is_empty());
    // The root CA publisher's ConfigMap is in every namespace from the start, as in Kubernetes.
    assert_eq!(names(&s0.configmaps), ["kube-root-ca.crt"]);
    assert_eq!(s4.pods.len(), 5);
    assert!(s6.deployments.is_empty() && s6.replicasets.is_empty() && s6.pods.is_empty());

    // get --at each step, from the running server, matches what kubectl showed then.
    assert_steps_read_back(&steps, &remote);
    for s in steps {
        let at = rev(s.revision);
        let table = skiff(&[
            "get",
            "deployments",
            "--at",
            &at,
            "--kubeconfig",
            &kubeconfig,
        ]);
        assert!(table.ok, "{}", table.stderr);
        assert_eq!(
            without_age(&table.stdout),
            without_age(&s.deployments_table),
            "table at {at}:\n{}",
            table.stdout
        );
    }

    // history lists exactly the versions written: the Deployment's spec changed by the scale
    // and the new image, its status by the controllers in between.
    let web = history(&["deploy/web", "--kubeconfig", &kubeconfig]);
    let (first, last) = (&web[0], &web[web.len() - 1]);
    assert_eq!(
        (first.revision, first.operation.as_str()),
        (deploy_created, "created")
    );
    assert!(first.manager.is_some(), "the creator is recorded: {web:?}");
    assert_eq!(last.operation, "deleted");
    assert!(
        s5.revision < last.revision && last.revision <= s6.revision,
        "{web:?}"
    );
    assert!(
        web[1..web.len() - 1]
            .iter()
            .all(|v| v.operation.contains("updated")),
        "{web:?}"
    );
    let generation_changes: Vec<u64> = web
        .windows(2)
        .filter(|w| {
            w[1].operation != "deleted"
                && w[0].object["metadata"]["generation"] != w[1].object["metadata"]["generation"]
        })
        .map(|w| w[1].revision)
        .collect();
    let [scaled, rolled] = generation_changes.as_slice() else {
        panic!("not two spec changes: {generation_changes:?}");
    };
    let scaled = *scaled;
    assert!(s1.revision < scaled && scaled <= s2.revision, "{web:?}");
    assert_eq!(*rolled, image_set);
    let at_scale = &web.iter().find(|v| v.revision == scaled).unwrap().object;
    assert_eq!(at_scale["spec"]["replicas"], 5);
    // Every state kubectl saw is one of the versions.
    for s in [&s1, &s2, &s3, &s4, &s5] {
        let seen = resource_version(&s.deployments[0]);
        assert!(
            web.iter().any(|v| v.revision == seen),
            "{seen} not in {web:?}"
        );
    }
    let cfg = history(&[
        "configmap/cfg",
        "-n",
        "default",
        "--kubeconfig",
        &kubeconfig,
    ]);
    let ops: Vec<(u64, &str)> = cfg
        .iter()
        .map(|v| (v.revision, v.operation.as_str()))
        .collect();
    let cm_deleted = cfg.last().unwrap().revision;
    assert_eq!(
        ops,
        vec![
            (cm_created, "created"),
            (cm_patched, "updated"),
            (cm_deleted, "deleted")
        ]
    );
    assert!(s4.revision < cm_deleted && cm_deleted <= s5.revision);
    // The deleted pod: created by its ReplicaSet, bound, run, marked for deletion by kubectl,
    // stopped by the kubelet and removed.
    let victim_ref = format!("pod/{victim}");
    let pod = history(&[&victim_ref, "--kubeconfig", &kubeconfig]);
    let ops: Vec<&str> = pod.iter().map(|v| v.operation.as_str()).collect();
    assert_eq!(ops.first(), Some(&"created"), "{pod:?}");
    assert_eq!(ops.last(), Some(&"deleted"), "{pod:?}");
    assert!(
        ops[1..ops.len() - 1].iter().all(|o| o.contains("updated")),
        "{pod:?}"
    );
    let in_s3 = resource_version(
        s3.pods
            .iter()
            .find(|p| p["metadata"]["name"] == victim.as_str())
            .unwrap(),
    );
    assert!(
        pod.iter().any(|v| v.revision == in_s3),
        "{in_s3} not in {pod:?}"
    );
    let marked = pod
        .iter()
        .find(|v| !v.object["metadata"]["deletionTimestamp"].is_null())
        .unwrap_or_else(|| panic!("never marked for deletion: {pod:?}"));
    let pod_deleted = marked.revision;
    assert_eq!(marked.object["metadata"]["deletionGracePeriodSeconds"], 2);
    assert!(
        s3.revision < pod_deleted && pod.last().unwrap().revision <= s4.revision,
        "{pod:?}"
    );
    // The YAML diff of the scale shows the replicas and none of the noise.
    let text = skiff_ok(&[
        "history",
        "deploy/web",
        "--diff",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(
        text.contains("-  replicas: 2") && text.contains("+  replicas: 5"),
        "{text}"
    );
    assert!(
        !text.contains("managedFields") && !text.contains("resourceVersion"),
        "{text}"
    );

    // diff between two steps names exactly the objects that changed between what kubectl showed.
    let from_to = |a: &Step, b: &Step| {
        diff(&[
            "--from",
            &rev(a.revision),
            "--to",
            &rev(b.revision),
            "--kubeconfig",
            &kubeconfig,
        ])
    };
    for (a, b) in steps.iter().zip(&steps[1..]) {
        assert_eq!(
            from_to(a, b),
            step_differences(a, b),
            "{} to {}",
            a.revision,
            b.revision
        );
    }
    assert_eq!(from_to(&s2, &s4), step_differences(&s2, &s4));
    assert_eq!(from_to(&s4, &s4), triples(&[]));
    let created: Vec<_> = from_to(&s0, &s1)
        .into_iter()
        .filter(|(how, kind, _)| how == "created" && (kind == "Deployment" || kind == "ConfigMap"))
        .collect();
    assert_eq!(
        created,
        triples(&[
            ("created", "ConfigMap", "cfg"),
            ("created", "Deployment", "web")
        ])
    );
    // Around the pod's delete: exactly it and its replacement among the pods.
    let pods: Vec<_> = from_to(&s3, &s4)
        .into_iter()
        .filter(|(_, kind, _)| kind == "Pod")
        .collect();
    assert_eq!(
        pods,
        triples(&[("deleted", "Pod", &victim), ("created", "Pod", replacement)])
    );
    let only_pods = skiff_ok(&[
        "diff",
        "pods",
        "--from",
        &rev(s3.revision),
        "--to",
        &rev(s4.revision),
        "-n",
        "default",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(
        only_pods.contains(&format!("deleted  Pod default/{victim}"))
            && only_pods.contains(&format!("created  Pod default/{replacement}"))
            && only_pods.lines().count() == 2,
        "{only_pods}"
    );

    // log: one line a change, exactly the writes of the window.
    let log = |args: &[&str]| -> Vec<(u64, String, Vec<String>)> {
        let text = skiff_ok(
            &[
                args,
                &["-n", "default", "-o", "json", "--kubeconfig", &kubeconfig],
            ]
            .concat(),
        );
        text.lines()
            .map(|l| {
                let c = json(l);
                (
                    c["revision"].as_u64().unwrap(),
                    c["operation"].as_str().unwrap().to_string(),
                    c["fields"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f.as_str().unwrap().to_string())
                        .collect(),
                )
            })
            .collect()
    };
    let cm_log: Vec<(u64, String)> = log(&[
        "log",
        "cm",
        "--since",
        &rev(s1.revision + 1),
        "--until",
        &rev(s5.revision),
    ])
    .into_iter()
    .map(|(r, o, _)| (r, o))
    .collect();
    assert_eq!(
        cm_log,
        vec![
            (cm_patched, "updated".into()),
            (cm_deleted, "deleted".into())
        ]
    );
    let deploy_log = log(&[
        "log",
        "deploy",
        "--since",
        &rev(s1.revision + 1),
        "--until",
        &rev(s3.revision),
    ]);
    let spec_writes: Vec<u64> = deploy_log
        .iter()
        .filter(|(_, _, fields)| fields.iter().any(|f| f == "spec"))
        .map(|(r, _, _)| *r)
        .collect();
    assert_eq!(spec_writes, vec![scaled, image_set]);
    let versions_in_window: Vec<u64> = web
        .iter()
        .map(|v| v.revision)
        .filter(|r| (s1.revision + 1..=s3.revision).contains(r))
        .collect();
    assert_eq!(
        deploy_log.iter().map(|(r, _, _)| *r).collect::<Vec<_>>(),
        versions_in_window
    );
    let text = skiff_ok(&[
        "log",
        "deploy",
        "--since",
        &rev(scaled),
        "--until",
        &rev(scaled),
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(
        text.contains("updated") && text.contains("default/web") && text.contains("spec"),
        "{text}"
    );

    // log --follow streams what is committed after it starts, with no gap.
    let follow_out = cluster.dir.path().join("follow.out");
    let mut follow = Command::new(skiff_binary())
        .args([
            "log",
            "cm",
            "--follow",
            "--since",
            &rev(s6.revision + 1),
            "--kubeconfig",
            &kubeconfig,
        ])
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(&follow_out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    k.ok(&["create", "configmap", "live", "--from-literal=a=b"]);
    let seen = eventually(Duration::from_secs(20), || {
        std::fs::read_to_string(&follow_out).is_ok_and(|t| t.contains("default/live"))
    });
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(
        seen,
        "follow printed: {:?}",
        std::fs::read_to_string(&follow_out)
    );

    // The same reads from the stopped server's data dir.
    cluster.stop();
    let data_dir = cluster.data_dir();
    let dd = data_dir.to_string_lossy().into_owned();
    let local = ["--data-dir", dd.as_str()];
    assert_steps_read_back(&steps, &local);
    // A time maps to the revision committed before it, across the restart.
    assert_eq!(get_at("deploy", &after_s2, &local), s2.deployments);
    cluster.restart_after_crash();
    let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
    assert_eq!(
        get_at("deploy", &after_s2, &["--kubeconfig", &kubeconfig]),
        s2.deployments
    );
    cluster.stop();

    // replay into a new dir; `server --paused` on it serves the objects as they were, and
    // nothing acts on them: the log stays at the replayed point.
    let replay = |until: u64, into: &Path| {
        skiff_ok(&[
            "replay",
            "--data-dir",
            &dd,
            "--until",
            &rev(until),
            "--into",
            &into.to_string_lossy(),
        ])
    };
    let replayed = work.path().join("replayed");
    let rd = replayed.to_string_lossy().into_owned();
    replay(s3.revision, &replayed);
    {
        let server = Server::start(&replayed, &["--paused"]);
        let read = || {
            (
                server.list(DEPLOYMENTS),
                server.list(REPLICASETS),
                server.list(CONFIGMAPS),
                server.list(PODS),
            )
        };
        // A paused server writes nothing, not even at start (no system namespaces, no
        // `kubernetes` Service): every list is at the replayed revision itself.
        let at_start = read();
        let expect = |l: &Vec<Value>| Listed {
            revision: s3.revision,
            items: l.clone(),
        };
        assert_eq!(
            at_start,
            (
                expect(&s3.deployments),
                expect(&s3.replicasets),
                expect(&s3.configmaps),
                expect(&s3.pods)
            )
        );
        // Unpaused, its kubelet would post the node's status and renew its lease at once.
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(read(), at_start);
    }
    // The replayed dir holds the history up to the point, and not after it.
    assert_eq!(
        get_at("deploy", &rev(s2.revision), &["--data-dir", &rd]),
        s2.deployments
    );
    let future = skiff(&[
        "get",
        "deploy",
        "--at",
        &rev(s4.revision),
        "--data-dir",
        &rd,
    ]);
    assert!(
        !future.ok && future.stderr.contains("future"),
        "{}",
        future.stderr
    );

    // Replayed to just after kubectl marked the pod for deletion: paused, the pod stays marked
    // and unreplaced; resumed, the kubelet finishes the delete, the ReplicaSet replaces the pod
    // and the kubelet runs it.
    let at_delete = get_at("pods", &rev(pod_deleted), &local);
    assert_eq!(at_delete.len(), 5);
    let marked_pod = |pods: &[Value]| -> bool {
        pods.iter().any(|p| {
            p["metadata"]["name"] == victim.as_str()
                && !p["metadata"]["deletionTimestamp"].is_null()
        })
    };
    assert!(marked_pod(&at_delete));
    let paused = work.path().join("paused");
    replay(pod_deleted, &paused);
    {
        let server = Server::start(&paused, &["--paused"]);
        let expect = Listed {
            revision: pod_deleted,
            items: at_delete.clone(),
        };
        assert_eq!(server.list(PODS), expect);
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(server.list(PODS), expect);
    }
    replay(pod_deleted, &resumed);
    // The resumed controllers wait this long for a node to be heard from; by the time they start,
    // the last heartbeat the replayed log holds is older than that.
    let grace = Duration::from_secs(20);
    std::thread::sleep((grace + Duration::from_secs(1)).saturating_sub(deleted_at.elapsed()));
    {
        let server = Server::start(&resumed, &["--node-monitor-grace-period", "20s"]);
        let kubeconfig = resumed
            .join("admin.kubeconfig")
            .to_string_lossy()
            .into_owned();
        let resumed_pods = || -> Vec<Value> { server.list(PODS).items };
        let done = eventually(Duration::from_secs(90), || {
            let pods = resumed_pods();
            pods_running(&pods, 5, "busybox:2") && !names(&pods).contains(&victim)
        });
        assert!(done, "not resumed: {:#?}", resumed_pods());
        let pods = resumed_pods();
        let new: Vec<String> = names(&pods)
            .into_iter()
            .filter(|n| !names(&at_delete).contains(n))
            .collect();
        assert_eq!(new.len(), 1, "one replacement: {new:?}");
        // The pods of the replayed state run again, under this server's kubelet.
        let running = eventually(Duration::from_secs(30), || {
            skiff_tests::pod_processes(&resumed.join("kubelet")).len() == 5
        });
        assert!(
            running,
            "{:?}",
            skiff_tests::pod_processes(&resumed.join("kubelet"))
        );
        let deleted = history(&[&victim_ref, "--kubeconfig", &kubeconfig]);
        assert_eq!(
            deleted.last().map(|v| v.operation.as_str()),
            Some("deleted")
        );
        assert!(deleted.last().unwrap().revision > pod_deleted);
        // The node was never taken for silent: the controllers gave its kubelet a grace period
        // from their start rather than judging it by the replayed heartbeat.
        let node = at_delete[0]["spec"]["nodeName"].as_str().unwrap();
        let node_ref = format!("node/{node}");
        let versions = history(&[&node_ref, "--kubeconfig", &kubeconfig]);
        let silent: Vec<&Version> = versions
            .iter()
            .filter(|v| v.revision > pod_deleted)
            .filter(|v| {
                let taints = v.object["spec"]["taints"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let conditions = v.object["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                taints
                    .iter()
                    .any(|t| t["key"] == "node.kubernetes.io/unreachable")
                    || conditions
                        .iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "Unknown")
            })
            .collect();
        assert!(silent.is_empty(), "{silent:#?}");
        assert!(
            versions.iter().any(|v| v.revision > pod_deleted),
            "{versions:?}"
        );
    }
    kill_pod_processes(&resumed.join("kubelet"));

    // Replayed to a point before the server had made its system namespaces, a paused server
    // leaves them missing.
    let early = work.path().join("early");
    replay(2, &early);
    {
        let server = Server::start(&early, &["--paused"]);
        let namespaces = server.list("/api/v1/namespaces");
        assert_eq!(namespaces.revision, 2);
        assert_eq!(names(&namespaces.items), vec!["default", "kube-system"]);
    }

    // export then import into a fresh data dir: byte-identical reads at every revision.
    let archive = work.path().join("log.skiff");
    let ar = archive.to_string_lossy().into_owned();
    skiff_ok(&["export", "--data-dir", &dd, "-o", &ar]);
    let imported = work.path().join("imported");
    let id = imported.to_string_lossy().into_owned();
    skiff_ok(&["import", &ar, "--data-dir", &id]);
    for s in steps {
        for kind in ["deploy", "rs", "cm", "pods"] {
            let read = |dir: &str| {
                skiff(&[
                    "get",
                    kind,
                    "-A",
                    "--at",
                    &rev(s.revision),
                    "-o",
                    "json",
                    "--show-managed-fields",
                    "--data-dir",
                    dir,
                ])
            };
            let (a, b) = (read(&dd), read(&id));
            assert_eq!(
                (a.ok, &a.stdout, &a.stderr),
                (b.ok, &b.stdout, &b.stderr),
                "{kind} at {}",
                s.revision
            );
        }
    }
    // Every change of every revision, each with the object before and after it (what any read
    // at any revision is made of); one run each, as reading every revision would take minutes.
    let whole = |dir: &str| skiff_ok(&["log", "--since", "1", "-o", "json", "--data-dir", dir]);
    let (a, b) = (whole(&dd), whole(&id));
    assert!(a.lines().any(|l| json(l)["revision"] == image_set), "{a}");
    assert_eq!(a, b);
    let a = skiff_ok(&["history", "deploy/web", "-o", "json", "--data-dir", &dd]);
    let b = skiff_ok(&["history", "deploy/web", "-o", "json", "--data-dir", &id]);
    assert_eq!(a, b);
    // A damaged archive is refused and leaves nothing behind.
    let mut bytes = std::fs::read(&archive).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&archive, &bytes).unwrap();
    let broken = work.path().join("broken");
    let out = skiff(&["import", &ar, "--data-dir", &broken.to_string_lossy()]);
    assert!(
        !out.ok && out.stderr.contains("cannot import"),
        "{}",
        out.stderr
    );
    assert!(!broken.join("db").exists());
}

#[test]
fn points_before_the_retained_history_say_so() {
    let cluster = TestCluster::start(&["--history-revisions", "3", "--compact-interval", "200ms"]);
    let k = cluster.kubectl();
    let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
    for i in 0..10 {
        k.ok(&["create", "configmap", &format!("c{i}")]);
    }
    let compacted = eventually(Duration::from_secs(20), || {
        !skiff(&["get", "cm", "--at", "1", "--kubeconfig", &kubeconfig]).ok
    });
    assert!(compacted, "history was never compacted");
    for args in [
        vec!["get", "cm", "--at", "1"],
        vec!["get", "cm", "--at", "-1h"],
        vec!["get", "cm", "--at", "2020-01-01T00:00:00Z"],
        vec!["log", "--since", "1"],
        vec!["diff", "--from", "1"],
    ] {
        let out = skiff(&[&args[..], &["--kubeconfig", &kubeconfig]].concat());
        assert!(!out.ok, "{args:?} succeeded: {}", out.stdout);
        assert!(
            out.stderr
                .contains("before the retained history: compacted at revision")
                && out.stderr.contains("oldest time"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // The newest revisions still read.
    let now = current_revision(&cluster);
    let out = skiff_ok(&[
        "get",
        "cm",
        "--at",
        &rev(now),
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert_eq!(items(&out).len(), 10);
    // Unknown kinds and malformed points are refused plainly.
    let out = skiff(&["get", "widgets", "--kubeconfig", &kubeconfig]);
    assert!(
        !out.ok && out.stderr.contains("doesn't have a resource type"),
        "{}",
        out.stderr
    );
    let out = skiff(&[
        "get",
        "cm",
        "--at",
        "yesterday",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert!(!out.ok && out.stderr.contains("-15m"), "{}", out.stderr);
    // Nor may a stopped-server read use the dir while the server runs.
    let out = skiff(&[
        "get",
        "cm",
        "--data-dir",
        &cluster.data_dir().to_string_lossy(),
    ]);
    assert!(
        !out.ok && out.stderr.contains("in use by a running server"),
        "{}",
        out.stderr
    );
}

/// History names who made each change, from the write itself (no audit log here): the admin's
/// create, then an impersonated user's patch and delete (`--as alice --as-group devs`), in
/// `skiff history` (table and JSON) and the HTTP endpoint behind it.
#[test]
fn history_names_the_user_of_each_change() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
    k.ok(&["create", "configmap", "cfg", "--from-literal=k=v1"]);
    k.ok(&[
        "create",
        "rolebinding",
        "devs-edit",
        "--clusterrole=edit",
        "--group=devs",
    ]);
    let alice = ["--as", "alice", "--as-group", "devs"];
    k.ok(&[
        &["patch", "configmap", "cfg", "-p", r#"{"data":{"k":"v2"}}"#],
        &alice[..],
    ]
    .concat());
    k.ok(&[&["delete", "configmap", "cfg"], &alice[..]].concat());

    let answer = json(&skiff_ok(&[
        "history",
        "cm/cfg",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
    ]));
    let over_http = json(&k.ok(&[
        "get",
        "--raw",
        "/debug/skiff/history?resource=configmaps&namespace=default&name=cfg",
    ]));
    for versions in [&answer["versions"], &over_http["versions"]] {
        let users: Vec<_> = versions
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["operation"].as_str().unwrap().to_string(),
                    v["user"].clone(),
                )
            })
            .collect();
        let admin = &users[0].1;
        assert_eq!(users[0].0, "created");
        assert_eq!(admin["username"], "system:admin", "{users:?}");
        assert!(
            admin["groups"]
                .as_array()
                .unwrap()
                .contains(&json!("system:masters")),
            "{users:?}"
        );
        let by_alice = json!({
            "username": "alice",
            "groups": ["devs", "system:authenticated"],
            "impersonatedBy": "system:admin",
        });
        assert_eq!(
            users[1..],
            [
                ("updated".to_string(), by_alice.clone()),
                ("deleted".to_string(), by_alice)
            ],
            "{users:?}"
        );
    }
    let table = skiff_ok(&[
        "history",
        "cm/cfg",
        "-o",
        "wide",
        "--kubeconfig",
        &kubeconfig,
    ]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].contains("USER") && lines[0].contains("GROUPS"),
        "{table}"
    );
    assert!(lines[1].contains("system:admin"), "{table}");
    assert!(
        lines[2].contains("alice (by system:admin)") && lines[2].contains("devs"),
        "{table}"
    );
}

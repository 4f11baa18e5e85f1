//! Real containers end to end: `skiff server --container-runtime-endpoint unix:///...` against a
//! containerd of the test's own ([`skiff_tests::containerd`]: its own socket, a registry on a
//! free loopback port serving a busybox image built offline, a bridge with the pods' subnet),
//! driven with kubectl.
//!
//! Images without a registry come first: `skiff images import` of an OCI archive, the docker
//! archive the server found in `<data-dir>/images` at start, both run with
//! `imagePullPolicy: Never`.
//!
//! One test, one lab, the steps in order (each lab costs a containerd, a registry and a bridge): a
//! Deployment pulled from the registry reaches Running with pod IPs on the bridge, a Service in
//! front answers round-robin through the proxy, a crashing container restarts with `lastState` and
//! keeps only its two latest runs, a `securityContext` reaches the container, a memory limit far
//! below what the command allocates is `OOMKilled`, a `hostPort` answers on loopback, a
//! `hostNetwork` pod sees the node's interfaces, a `subPath` mount is one read-only file, a missing
//! image shows `ErrImagePull` then `ImagePullBackOff`, configMap and secret volumes are readable
//! and read-only where asked, a memory-backed emptyDir is a tmpfs of its size limit, `kubectl
//! delete pod` ends within the grace period (and not before it when the container ignores SIGTERM),
//! a server restart leaves running pods running (same container, same IP, no restart), and so does
//! containerd dying and coming back, while a pod created meanwhile waits and then runs in one
//! sandbox. `kubectl exec`, `cp`, `attach` and `port-forward` stream through containerd's own
//! streaming server. At the end the namespace's deletion leaves no pod process and the lab's
//! teardown leaves nothing at all.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skiff_tests::containerd::{self, Lab};
use skiff_tests::{Kubectl, TestCluster, eventually};

/// Far above anything a wait needs; waits poll, nothing is timed by it.
const PATIENCE: Duration = Duration::from_secs(90);
const NS: &str = "cri";

/// The cluster and the lab, stopped in that order (the kubelet first, then its containerd) when
/// dropped, also when a step fails.
struct Env {
    cluster: Option<TestCluster>,
    lab: Lab,
    node: String,
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(mut cluster) = self.cluster.take() {
            cluster.stop();
            if std::thread::panicking() {
                eprintln!("---- skiff server log ----\n{}", cluster.log_text());
            }
        }
        self.lab.teardown();
    }
}

impl Env {
    fn start(prepare: impl FnOnce(&Lab, &Path)) -> Env {
        let lab = Lab::start();
        let node = format!("cri-{}", std::process::id());
        let endpoint = lab.endpoint();
        let hosts_dir = lab.dir.path().join("certs.d");
        let cluster = TestCluster::start_prepared(
            "server",
            &[
                "--node-name",
                &node,
                "--container-runtime-endpoint",
                &endpoint,
                "--cgroup-root",
                &lab.cgroup_parent,
                "--registry-hosts-dir",
                hosts_dir.to_str().unwrap(),
                "--crash-loop-backoff",
                "1s",
                "--crash-loop-backoff-max",
                "4s",
                "--housekeeping-interval",
                "2s",
            ],
            |data| prepare(&lab, data),
        );
        Env {
            cluster: Some(cluster),
            lab,
            node,
        }
    }

    fn cluster(&mut self) -> &mut TestCluster {
        self.cluster.as_mut().expect("cluster running")
    }

    fn kubectl(&self) -> Kubectl {
        self.cluster.as_ref().expect("cluster running").kubectl()
    }

    /// kubectl in the test's namespace; must succeed.
    fn ok(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", NS];
        all.extend_from_slice(args);
        self.kubectl().ok(&all)
    }

    /// kubectl in the test's namespace; stdout when it succeeds, else empty.
    fn get(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", NS];
        all.extend_from_slice(args);
        let run = self.kubectl().run(&all);
        if run.ok { run.stdout } else { String::new() }
    }

    fn field(&self, pod: &str, path: &str) -> String {
        self.get(&["get", "pod", pod, "-o", &format!("jsonpath={{{path}}}")])
    }

    fn pod_json(&self, pod: &str) -> Value {
        serde_json::from_str(&self.ok(&["get", "pod", pod, "-o", "json"])).expect("pod JSON")
    }

    fn apply(&self, manifest: Value) {
        self.kubectl()
            .ok_with_input(&["-n", NS, "apply", "-f", "-"], &manifest.to_string());
    }

    fn wait(&self, what: &str, mut check: impl FnMut() -> bool) {
        let ok = eventually(PATIENCE, &mut check);
        assert!(
            ok,
            "never: {what}\n{}\n{}",
            self.get(&["get", "pods", "-o", "wide"]),
            self.get(&["get", "events"]),
        );
    }

    /// A pod of one busybox container running `script` under `sh -c`.
    fn pod(&self, name: &str, restart: &str, grace: u32, script: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": restart,
                "terminationGracePeriodSeconds": grace,
                "containers": [{
                    "name": "c",
                    "image": self.lab.image,
                    "command": ["/bin/sh", "-c", script],
                }]
            }
        })
    }
}

/// GET `/` from `addr` over a new HTTP/1.0 connection: the body.
fn http_get(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no HTTP response: {response:?}")))?;
    if !head.contains(" 200 ") {
        return Err(std::io::Error::other(head.to_string()));
    }
    Ok(body.trim().to_string())
}

#[test]
fn containerd_pods_through_kubectl() {
    if !containerd::available() {
        return;
    }
    // A docker archive in the data dir's image directory, imported when the server starts.
    // A registries.yaml naming the lab's registries as mirrors of made-up hosts, one with
    // credentials.
    let mut env = Env::start(|lab, data| {
        let tar = lab.image_archive("docker-archive", "localhost/preloaded:v1");
        std::fs::create_dir_all(data.join("images")).unwrap();
        std::fs::rename(tar, data.join("images/preloaded.tar")).unwrap();
        let (user, password) = containerd::PRIVATE_CREDENTIALS;
        std::fs::write(
            data.join("registries.yaml"),
            format!(
                "mirrors:\n  mirror.skiff.test:\n    endpoint: [\"http://{}\"]\n  private.skiff.test:\n    endpoint: [\"http://{}\"]\nconfigs:\n  private.skiff.test:\n    auth: {{username: {user}, password: {password}}}\n",
                lab.registry, lab.private_registry
            ),
        )
        .unwrap();
    });
    let node = env.node.clone();
    let k = env.kubectl();

    // The node is Ready on containerd and says so.
    assert!(
        eventually(PATIENCE, || k
            .run(&[
                "get",
                "node",
                &node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"
            ])
            .stdout
            == "True"),
        "node Ready"
    );
    let runtime = k.ok(&[
        "get",
        "node",
        &node,
        "-o",
        "jsonpath={.status.nodeInfo.containerRuntimeVersion}",
    ]);
    assert!(runtime.starts_with("containerd://1."), "{runtime}");
    k.ok(&["create", "namespace", NS]);

    imported_images(&env);
    deployment_and_service(&env);
    restarts_and_oom(&env);
    cpu_request_and_limit(&env);
    host_port(&env);
    host_network_and_sub_path(&env);
    security_context(&env);
    pull_errors(&env);
    pull_secrets(&env);
    mirrors(&env);
    config_volumes(&env);
    graceful_deletion(&env);
    lifecycle_hooks(&env);
    streams(&env);
    top(&env);
    server_restart_keeps_pods(&mut env);
    runtime_dies(&mut env);

    // Deleting the namespace stops and removes every sandbox: no pod process is left in the
    // pods' cgroup, before the lab's own teardown cleans anything.
    env.kubectl()
        .ok(&["delete", "namespace", NS, "--timeout=120s"]);
    let lab_pods = || {
        env.lab
            .leftovers()
            .into_iter()
            .filter(|l| l.starts_with("pod process"))
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(Duration::from_secs(30), || lab_pods().is_empty()),
        "pod processes left after the namespace went: {:?}",
        lab_pods()
    );
    let mut cluster = env.cluster.take().unwrap();
    cluster.stop();
    env.lab.teardown();
    let left = env.lab.leftovers();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `kubectl top pod` over containerd: the kubelet reads each container's cgroup counters through
/// CRI `ListContainerStats`; a spinning container shows more CPU than a sleeping one.
fn top(env: &Env) {
    env.apply(env.pod("spinner", "Always", 1, "while :; do :; done"));
    env.apply(env.pod("sleeper", "Always", 1, "sleep 3600"));
    let cpu = |out: &str, pod: &str| -> Option<u64> {
        let cell = out
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|r| r.first() == Some(&pod))?
            .get(1)?
            .to_string();
        match cell.strip_suffix('m') {
            Some(m) => m.parse().ok(),
            None => cell.parse::<u64>().ok().map(|c| c * 1000),
        }
    };
    let mut out = String::new();
    env.wait("kubectl top pod lists both pods", || {
        out = env.get(&["top", "pod"]);
        cpu(&out, "spinner").is_some() && cpu(&out, "sleeper").is_some()
    });
    // Let the spinner's window be all spinning.
    std::thread::sleep(Duration::from_secs(5));
    let out = env.ok(&["top", "pod"]);
    let (busy, idle) = (cpu(&out, "spinner"), cpu(&out, "sleeper"));
    assert!(
        busy.is_some_and(|b| b >= 100) && idle.is_some_and(|i| i < 50),
        "{out}"
    );
    // With --containers the second column is the container's name.
    let out = env.ok(&["top", "pod", "spinner", "--containers"]);
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().take(2).eq(["spinner", "c"])),
        "{out}"
    );
    env.ok(&["delete", "pod", "spinner", "sleeper", "--wait=false"]);
}

/// Images without a registry: an OCI archive loaded with `skiff images import` and the docker
/// archive of `<data-dir>/images` run with `imagePullPolicy: Never`; an image nobody loaded is
/// `ErrImageNeverPull`.
fn imported_images(env: &Env) {
    let archive = env
        .lab
        .image_archive("oci-archive", "localhost/imported:v1");
    let endpoint = env.lab.endpoint();
    let out = skiff_tests::skiff_ok(&[
        "images",
        "import",
        "--container-runtime-endpoint",
        &endpoint,
        archive.to_str().unwrap(),
    ]);
    assert_eq!(out, "imported localhost/imported:v1\n");
    let (ok, _, err) = skiff_tests::skiff(&[
        "images",
        "import",
        "--container-runtime-endpoint",
        &endpoint,
        "/nonexistent/archive.tar",
    ]);
    assert!(!ok && err.contains("/nonexistent/archive.tar"), "{err}");
    for (name, image) in [
        ("imported", "localhost/imported:v1"),
        ("preloaded", "localhost/preloaded:v1"),
        ("absent", "localhost/absent:v1"),
    ] {
        let mut pod = env.pod(
            name,
            "Always",
            1,
            &format!("echo ran {image}; while true; do sleep 1; done"),
        );
        pod["spec"]["containers"][0]["image"] = json!(image);
        pod["spec"]["containers"][0]["imagePullPolicy"] = json!("Never");
        env.apply(pod);
    }
    for (name, image) in [
        ("imported", "localhost/imported:v1"),
        ("preloaded", "localhost/preloaded:v1"),
    ] {
        env.wait(&format!("{name} Running"), || {
            env.field(name, ".status.phase") == "Running"
                && env.get(&["logs", name]).contains("ran")
        });
        assert_eq!(env.ok(&["logs", name]), format!("ran {image}\n"));
    }
    env.wait("absent is ErrImageNeverPull", || {
        env.field(
            "absent",
            ".status.containerStatuses[0].state.waiting.reason",
        ) == "ErrImageNeverPull"
    });
    let message = env.field(
        "absent",
        ".status.containerStatuses[0].state.waiting.message",
    );
    assert!(message.contains("localhost/absent:v1"), "{message}");
    env.ok(&[
        "delete",
        "pod",
        "imported",
        "preloaded",
        "absent",
        "--timeout=60s",
    ]);
}

/// A Deployment of the registry's image: Running, pod IPs on the bridge, containerd's ids; a
/// Service in front answers round-robin through the proxy.
fn deployment_and_service(env: &Env) {
    env.apply(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [{
                        "name": "httpd",
                        "image": env.lab.image,
                        "imagePullPolicy": "Always",
                        "command": ["/bin/sh", "-c",
                            "hostname > /www/index.html && exec httpd -f -p 8080 -h /www"],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {
                            "httpGet": {"path": "/", "port": "http"},
                            "periodSeconds": 1
                        }
                    }]
                }
            }
        }
    }));
    env.apply(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]
        }
    }));
    env.wait("2 web pods Running and ready", || {
        env.get(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={range .items[*]}{.status.phase}/{.status.containerStatuses[0].ready} {end}",
        ])
        .split_whitespace()
        .filter(|s| *s == "Running/true")
        .count()
            == 2
    });
    let pods: Value =
        serde_json::from_str(&env.ok(&["get", "pods", "-l", "app=web", "-o", "json"]))
            .expect("pod list");
    let mut names = Vec::new();
    for p in pods["items"].as_array().unwrap() {
        let ip = p["status"]["podIP"].as_str().unwrap();
        assert!(
            ip.starts_with(&env.lab.subnet_prefix),
            "pod IP {ip} on the lab's bridge {}0/24",
            env.lab.subnet_prefix
        );
        assert_eq!(p["status"]["podIPs"][0]["ip"], ip);
        let c = &p["status"]["containerStatuses"][0];
        assert!(
            c["containerID"]
                .as_str()
                .unwrap()
                .starts_with("containerd://"),
            "{c}"
        );
        assert!(
            c["imageID"].as_str().unwrap().contains("sha256:"),
            "imageID is the runtime's digest: {c}"
        );
        assert_eq!(c["image"], env.lab.image.as_str());
        // The host reaches the pod on the bridge.
        let body = http_get(SocketAddr::new(ip.parse().unwrap(), 8080)).expect("pod answers");
        let name = p["metadata"]["name"].as_str().unwrap().to_string();
        assert_eq!(body, name, "the pod serves its hostname");
        names.push(name);
    }
    names.sort();

    // The node lists the pulled image in its status.images.
    env.wait("status.images names the image", || {
        env.kubectl()
            .run(&[
                "get",
                "node",
                &env.node,
                "-o",
                "jsonpath={.status.images[*].names}",
            ])
            .stdout
            .contains(&env.lab.image)
    });

    // The Service through the proxy: once it has both endpoints, strict round-robin.
    env.wait("2 ready endpoints", || {
        env.get(&[
            "get",
            "endpoints",
            "web",
            "-o",
            "jsonpath={.subsets[*].addresses[*].ip}",
        ])
        .split_whitespace()
        .count()
            == 2
    });
    let ip: IpAddr = env
        .ok(&["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"])
        .parse()
        .expect("ClusterIP");
    let address = SocketAddr::new(ip, 8000);
    let mut seen = std::collections::BTreeSet::new();
    env.wait("the proxy reaches both pods", || {
        if let Ok(body) = http_get(address) {
            seen.insert(body);
        }
        seen.len() >= 2
    });
    let mut hits = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..20 {
        let body = http_get(address).unwrap_or_else(|e| panic!("request {i} via {address}: {e}"));
        *hits.entry(body).or_default() += 1;
    }
    let expected: std::collections::BTreeMap<String, usize> =
        names.iter().map(|n| (n.clone(), 10)).collect();
    assert_eq!(hits, expected, "20 requests round-robin over the 2 pods");
}

/// A container that exits restarts with `lastState`; one far over its memory limit is
/// `OOMKilled`.
fn restarts_and_oom(env: &Env) {
    env.apply(env.pod("crash", "Always", 1, "echo crashing; exit 3"));
    env.wait("crash restarted with lastState", || {
        env.field("crash", ".status.containerStatuses[0].restartCount")
            .parse::<u32>()
            .unwrap_or(0)
            >= 1
            && env.field(
                "crash",
                ".status.containerStatuses[0].lastState.terminated.exitCode",
            ) == "3"
    });
    let p = env.pod_json("crash");
    let last = &p["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["reason"], "Error", "{last}");
    assert!(
        last["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://")
    );
    assert_eq!(env.ok(&["logs", "crash", "--previous"]), "crashing\n");
    // A crash loop keeps two runs of the container, the latest and the one before it (for
    // `lastState` and `--previous`), in containerd and as log files: older ones are removed.
    env.wait("crash restarted three times", || {
        env.field("crash", ".status.containerStatuses[0].restartCount")
            .parse::<u32>()
            .unwrap_or(0)
            >= 3
    });
    let uid = env.field("crash", ".metadata.uid");
    let logs = env
        .cluster
        .as_ref()
        .unwrap()
        .data_dir()
        .join(format!("kubelet/logs/{NS}_crash_{uid}/c"));
    env.wait("at most two runs of the crashing container", || {
        let files = std::fs::read_dir(&logs).map_or(usize::MAX, |d| d.count());
        env.lab.containers_of_pod("crash").len() <= 2 && files <= 2
    });
    assert_eq!(env.ok(&["logs", "crash", "--previous"]), "crashing\n");

    // 256 MiB into dd's buffer under a 32 MiB limit: the kernel's OOM killer ends it.
    let mut oom = env.pod(
        "oom",
        "Never",
        1,
        "exec dd if=/dev/zero of=/dev/null bs=256M count=1",
    );
    oom["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "32Mi"}});
    env.apply(oom);
    env.wait("oom terminated", || {
        !env.field(
            "oom",
            ".status.containerStatuses[0].state.terminated.reason",
        )
        .is_empty()
    });
    let p = env.pod_json("oom");
    let terminated = &p["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (&terminated["reason"], &terminated["exitCode"]),
        (&json!("OOMKilled"), &json!(137)),
        "{terminated}; log: {:?}",
        env.get(&["logs", "oom"])
    );
    assert_eq!(p["status"]["phase"], "Failed");
}

/// The pod's and the container's `securityContext` reach the container: its user, group and
/// supplemental groups (with `fsGroup`), a read-only root, no capabilities, no_new_privs; the
/// emptyDir stays writable for that user and what it writes there gets the fsGroup; a secret of
/// mode 0400 is readable through the fsGroup. `runAsNonRoot` with an image that runs as root
/// waits in `CreateContainerConfigError`.
fn security_context(env: &Env) {
    let mut pod = env.pod(
        "hardened",
        "Never",
        1,
        "id -u; id -g; id -G; (touch /rootfs-probe) 2>/dev/null && echo rootfs-writable \
         || echo rootfs-read-only; echo x > /scratch/f && echo emptydir-writable; \
         stat -c %g /scratch/f; cat /sec/key; echo; \
         grep CapEff /proc/self/status | cut -f2; grep NoNewPrivs /proc/self/status | cut -f2",
    );
    env.kubectl().ok(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "hardened-cred",
        "--from-literal=key=for-the-group",
    ]);
    pod["spec"]["securityContext"] =
        json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000});
    // A secret only its owner (root) may read, but for the fsGroup.
    pod["spec"]["volumes"] = json!([
        {"name": "scratch", "emptyDir": {}},
        {"name": "sec", "secret": {"secretName": "hardened-cred", "defaultMode": 0o400}}
    ]);
    pod["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "sec", "mountPath": "/sec", "readOnly": true}
    ]);
    pod["spec"]["containers"][0]["securityContext"] = json!({
        "readOnlyRootFilesystem": true,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]}
    });
    env.apply(pod);
    env.wait("hardened done", || {
        env.field("hardened", ".status.phase") == "Succeeded"
    });
    assert_eq!(
        env.ok(&["logs", "hardened"]),
        "1000\n3000\n3000 2000\nrootfs-read-only\nemptydir-writable\n2000\nfor-the-group\n\
         0000000000000000\n1\n"
    );

    let mut root = env.pod("wants-non-root", "Always", 1, "sleep 3600");
    root["spec"]["containers"][0]["securityContext"] = json!({"runAsNonRoot": true});
    env.apply(root);
    env.wait("wants-non-root refused", || {
        env.field(
            "wants-non-root",
            ".status.containerStatuses[0].state.waiting.reason",
        ) == "CreateContainerConfigError"
    });
    let message = env.field(
        "wants-non-root",
        ".status.containerStatuses[0].state.waiting.message",
    );
    assert!(
        message.contains("container has runAsNonRoot and image will run as root"),
        "{message}"
    );
    env.ok(&["delete", "pod", "wants-non-root", "--wait=true"]);
}

/// containerd dies mid-run (SIGKILL) and comes back: meanwhile the node is NotReady with the
/// runtime's error, a new pod bound to the node waits with a `FailedCreatePodSandBox` event,
/// and the kubelet goes on; afterwards the node is Ready, the new pod runs in exactly one sandbox, and the pod that
/// ran all along kept its container (same id, no restart).
fn runtime_dies(env: &mut Env) {
    let node = env.node.clone();
    env.apply(env.pod("survivor", "Always", 1, "while true; do sleep 1; done"));
    env.wait("survivor Running", || {
        env.field("survivor", ".status.phase") == "Running"
    });
    let before = env.field("survivor", ".status.containerStatuses[0].containerID");
    let ready = |env: &Env| {
        env.kubectl()
            .run(&[
                "get",
                "node",
                &node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}/{.status.conditions[?(@.type==\"Ready\")].message}",
            ])
            .stdout
    };

    env.lab.kill_containerd();
    env.wait("node NotReady with the runtime's error", || {
        let r = ready(env);
        r.starts_with("False/") && r.len() > "False/".len()
    });
    // Bound to the node by hand: the scheduler places nothing on a node that is not Ready.
    let mut latecomer = env.pod("latecomer", "Always", 1, "while true; do sleep 1; done");
    latecomer["spec"]["nodeName"] = json!(node);
    env.apply(latecomer);
    env.wait("latecomer waits with FailedCreatePodSandBox", || {
        env.get(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=latecomer,reason=FailedCreatePodSandBox",
            "-o",
            "name",
        ])
        .lines()
        .count()
            >= 1
    });
    assert_ne!(env.field("latecomer", ".status.phase"), "Running");

    env.lab.start_containerd();
    env.wait("node Ready again", || ready(env).starts_with("True/"));
    env.wait("latecomer Running", || {
        env.field("latecomer", ".status.phase") == "Running"
    });
    assert_eq!(
        env.field("survivor", ".status.containerStatuses[0].containerID"),
        before,
        "the running pod kept its container"
    );
    assert_eq!(
        env.field("survivor", ".status.containerStatuses[0].restartCount"),
        "0"
    );
    assert_eq!(
        env.lab.sandboxes_of_pod("latecomer").len(),
        1,
        "sandboxes of the pod created while containerd was down"
    );
    env.ok(&["delete", "pod", "survivor", "latecomer", "--wait=true"]);
}

/// A `hostNetwork` pod sees the node's interfaces (the lab's bridge among them) and has the
/// node's address; a `subPath` mount shows one key of a configMap as a file, read-only.
fn host_network_and_sub_path(env: &Env) {
    env.kubectl().ok(&[
        "-n",
        NS,
        "create",
        "configmap",
        "one-key",
        "--from-literal=motd=just this file",
    ]);
    let mut pod = env.pod(
        "on-host",
        "Never",
        1,
        "ls /sys/class/net; cat /etc/motd; echo; \
         (echo x > /etc/motd) 2>/dev/null && echo motd-writable || echo motd-read-only",
    );
    pod["spec"]["hostNetwork"] = json!(true);
    pod["spec"]["volumes"] = json!([{"name": "cm", "configMap": {"name": "one-key"}}]);
    pod["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "cm", "mountPath": "/etc/motd", "subPath": "motd", "readOnly": true}]);
    env.apply(pod);
    env.wait("on-host done", || {
        env.field("on-host", ".status.phase") == "Succeeded"
    });
    let out = env.ok(&["logs", "on-host"]);
    assert!(
        out.lines().any(|l| l == env.lab.bridge),
        "the node's bridge {} among the pod's interfaces: {out}",
        env.lab.bridge
    );
    assert!(out.ends_with("just this file\nmotd-read-only\n"), "{out}");
    let ips = env.field("on-host", ".status.podIP") + " " + &env.field("on-host", ".status.hostIP");
    let (pod_ip, host_ip) = ips.split_once(' ').unwrap();
    assert_eq!(pod_ip, host_ip, "a hostNetwork pod has the node's address");
    env.ok(&["delete", "pod", "on-host", "--wait=true"]);
}

/// A container port with a `hostPort` answers on the node: the sandbox asks containerd for the
/// mapping, which the lab's CNI `portmap` plugin makes.
fn host_port(env: &Env) {
    let port = skiff_tests::free_port();
    env.apply(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hostport"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "httpd",
                "image": env.lab.image,
                "command": ["/bin/sh", "-c",
                    "echo through-host-port > /www/index.html && exec httpd -f -p 8080 -h /www"],
                "ports": [{"containerPort": 8080, "hostPort": port}],
            }]
        }
    }));
    env.wait("hostport Running", || {
        env.field("hostport", ".status.phase") == "Running"
    });
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut last = None;
    let answered = eventually(Duration::from_secs(30), || match http_get(addr) {
        Ok(body) => body == "through-host-port",
        Err(e) => {
            last = Some(e.to_string());
            false
        }
    });
    assert!(answered, "GET 127.0.0.1:{port} (hostPort): {last:?}");
    env.ok(&["delete", "pod", "hostport", "--wait=true"]);
    // The mapping goes with the sandbox.
    assert!(
        eventually(Duration::from_secs(30), || http_get(addr).is_err()),
        "hostPort {port} still answers after its pod was deleted"
    );
}

/// A CPU request and limit become the container's cgroup settings, as the Kubernetes kubelet
/// sets them: shares of 1,024 per requested core, a CFS quota of the limit per 100 ms period.
/// The container reads its own cgroup (v1 here; runc's v2 weight for the same shares on a
/// cgroup v2 host).
fn cpu_request_and_limit(env: &Env) {
    let mut pod = env.pod(
        "shares",
        "Never",
        1,
        "cat /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null \
         || cat /sys/fs/cgroup/cpu.weight /sys/fs/cgroup/cpu.max",
    );
    pod["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "250m"}, "limits": {"cpu": "500m"}});
    env.apply(pod);
    env.wait("shares done", || {
        env.field("shares", ".status.phase") == "Succeeded"
    });
    let out = env.ok(&["logs", "shares"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines == ["256", "50000"] || lines == ["10", "50000 100000"],
        "cgroup settings of a 250m request and 500m limit: {out:?}"
    );
}

/// A missing image: `ErrImagePull` with the registry's message, then `ImagePullBackOff`, seen
/// by a watch.
fn pull_errors(env: &Env) {
    let missing = format!("{}/missing:v1", env.lab.registry);
    let mut ghost = env.pod("ghost", "Always", 1, "true");
    ghost["spec"]["containers"][0]["image"] = json!(missing);
    let out = env
        .cluster
        .as_ref()
        .unwrap()
        .dir
        .path()
        .join("ghost-watch.txt");
    let mut watch = env.kubectl().spawn(
        &[
            "-n",
            NS,
            "get",
            "pods",
            "-w",
            "--field-selector",
            "metadata.name=ghost",
            "-o",
            "jsonpath={.status.containerStatuses[0].state.waiting.reason}|{.status.containerStatuses[0].state.waiting.message}{\"\\n\"}",
        ],
        &out,
    );
    env.apply(ghost);
    let seen = || std::fs::read_to_string(&out).unwrap_or_default();
    let both = eventually(PATIENCE, || {
        let text = seen();
        text.find("ErrImagePull|")
            .is_some_and(|first| text[first..].contains("ImagePullBackOff|"))
    });
    let _ = watch.kill();
    let _ = watch.wait();
    let text = seen();
    assert!(both, "ErrImagePull then ImagePullBackOff: {text}");
    let message = text
        .lines()
        .find_map(|l| l.strip_prefix("ErrImagePull|"))
        .unwrap();
    assert!(
        message.contains("missing") && message.contains("not found"),
        "the registry's message: {message}"
    );
    assert_eq!(env.field("ghost", ".status.phase"), "Pending");
    let events = env.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=ghost",
    ]);
    assert!(events.contains("Failed"), "{events}");
}

/// A registry that wants a password: no secret and a wrong one fail to pull with the
/// registry's refusal; the right dockerconfigjson secret pulls and runs.
fn pull_secrets(env: &Env) {
    let (user, password) = containerd::PRIVATE_CREDENTIALS;
    let server = env.lab.private_registry.clone();
    for (name, password) in [("wrong", "not-the-password"), ("right", password)] {
        env.ok(&[
            "create",
            "secret",
            "docker-registry",
            name,
            &format!("--docker-server={server}"),
            &format!("--docker-username={user}"),
            &format!("--docker-password={password}"),
        ]);
    }
    for (pod, secret) in [
        ("private-none", None),
        ("private-wrong", Some("wrong")),
        ("private-right", Some("right")),
    ] {
        let mut p = env.pod(pod, "Always", 1, "echo pulled with a secret; sleep 3600");
        p["spec"]["containers"][0]["image"] = json!(env.lab.private_image);
        p["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        if let Some(secret) = secret {
            p["spec"]["imagePullSecrets"] = json!([{"name": secret}]);
        }
        env.apply(p);
    }
    env.wait("private-right Running", || {
        env.field("private-right", ".status.phase") == "Running"
    });
    for pod in ["private-none", "private-wrong"] {
        env.wait(&format!("{pod} cannot pull"), || {
            let reason = env.field(pod, ".status.containerStatuses[0].state.waiting.reason");
            reason == "ErrImagePull" || reason == "ImagePullBackOff"
        });
        let message = env.field(pod, ".status.containerStatuses[0].state.waiting.message");
        assert!(
            message.to_lowercase().contains("unauthorized") || message.contains("401"),
            "{pod}: the registry's refusal: {message}"
        );
        assert_eq!(env.field(pod, ".status.phase"), "Pending");
    }
    env.ok(&[
        "delete",
        "pod",
        "private-none",
        "private-wrong",
        "private-right",
        "--timeout=60s",
    ]);
}

/// registries.yaml: images of hosts that do not exist come from their mirrors, one with the
/// node's credentials for it; the hosts files are containerd's.
fn mirrors(env: &Env) {
    let hosts = env
        .lab
        .dir
        .path()
        .join("certs.d/mirror.skiff.test/hosts.toml");
    let text = std::fs::read_to_string(&hosts).expect("hosts.toml written at start");
    assert!(
        text.contains(&format!("[host.\"http://{}\"]", env.lab.registry)),
        "{text}"
    );
    for (pod, image) in [
        ("mirrored", "mirror.skiff.test/busybox:test"),
        (
            "mirrored-private",
            "private.skiff.test/private/busybox:test",
        ),
    ] {
        let mut p = env.pod(pod, "Always", 1, "echo via a mirror; sleep 3600");
        p["spec"]["containers"][0]["image"] = json!(image);
        env.apply(p);
    }
    for pod in ["mirrored", "mirrored-private"] {
        env.wait(&format!("{pod} Running"), || {
            env.field(pod, ".status.phase") == "Running" && !env.get(&["logs", pod]).is_empty()
        });
        assert_eq!(env.ok(&["logs", pod]), "via a mirror\n");
    }
    env.ok(&[
        "delete",
        "pod",
        "mirrored",
        "mirrored-private",
        "--timeout=60s",
    ]);
}

/// configMap and secret volumes are readable in the container; the one mounted `readOnly` cannot
/// be written, an emptyDir can.
fn config_volumes(env: &Env) {
    env.kubectl().ok(&[
        "-n",
        NS,
        "create",
        "configmap",
        "conf",
        "--from-literal=greeting=hello from a configmap",
    ]);
    env.kubectl().ok(&[
        "-n",
        NS,
        "create",
        "secret",
        "generic",
        "cred",
        "--from-literal=password=s3cret",
    ]);
    let script = "cat /cm/greeting; echo; cat /sec/password; echo; \
        (echo x > /sec/new) 2>/dev/null && echo secret-writable || echo secret-read-only; \
        (echo x > /cm/new) 2>/dev/null && echo configmap-writable || echo configmap-read-only; \
        echo x > /scratch/new && echo emptydir-writable; \
        grep ' /mem ' /proc/mounts | cut -d' ' -f1,3; df -k /mem | tail -1 | awk '{print $2}'; \
        echo done; while true; do sleep 1; done";
    let mut pod = env.pod("vols", "Always", 1, script);
    pod["spec"]["volumes"] = json!([
        {"name": "cm", "configMap": {"name": "conf"}},
        {"name": "sec", "secret": {"secretName": "cred"}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}
    ]);
    pod["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "cm", "mountPath": "/cm", "readOnly": true},
        {"name": "sec", "mountPath": "/sec", "readOnly": true},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "mem", "mountPath": "/mem"}
    ]);
    env.apply(pod);
    env.wait("vols wrote its report", || {
        env.get(&["logs", "vols"]).contains("done")
    });
    // The memory-backed emptyDir is a tmpfs of its size limit (8 MiB in 1 KiB blocks).
    assert_eq!(
        env.ok(&["logs", "vols"]),
        "hello from a configmap\ns3cret\nsecret-read-only\nconfigmap-read-only\nemptydir-writable\n\
         tmpfs tmpfs\n8192\ndone\n"
    );
    // Deleting the pod unmounts the tmpfs on the node.
    let uid = env.field("vols", ".metadata.uid");
    let mounted = || {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.contains(&uid))
    };
    assert!(mounted(), "the pod's tmpfs is in the node's mount table");
    env.ok(&["delete", "pod", "vols", "--wait=true"]);
    assert!(
        eventually(Duration::from_secs(30), || !mounted()),
        "the pod's tmpfs outlived it"
    );
}

/// `kubectl delete pod` returns once the container stopped: at once for a container that exits
/// on SIGTERM (grace 30 s), after the grace period for one that ignores it (grace 3 s).
fn graceful_deletion(env: &Env) {
    env.apply(env.pod(
        "polite",
        "Always",
        30,
        "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.2; done",
    ));
    // PID 1 of its PID namespace without a handler: SIGTERM does nothing to it.
    env.apply(env.pod("stubborn", "Always", 3, "while true; do sleep 1; done"));
    env.wait("both Running", || {
        env.field("polite", ".status.phase") == "Running"
            && env.field("stubborn", ".status.phase") == "Running"
    });
    let start = Instant::now();
    env.ok(&["delete", "pod", "polite", "--timeout=60s"]);
    let polite = start.elapsed();
    assert!(
        polite < Duration::from_secs(10),
        "a container that exits on SIGTERM is gone well within its 30 s grace: {polite:?}"
    );
    let start = Instant::now();
    env.ok(&["delete", "pod", "stubborn", "--timeout=60s"]);
    let stubborn = start.elapsed();
    assert!(
        stubborn >= Duration::from_millis(2_500) && stubborn < Duration::from_secs(13),
        "a container that ignores SIGTERM is killed when its 3 s grace ends: {stubborn:?}"
    );
}

/// postStart runs in the container right after it starts, preStop before it is stopped; both
/// write into a hostPath directory the test reads.
fn lifecycle_hooks(env: &Env) {
    let dir = env.lab.dir.path().join("hooks");
    std::fs::create_dir_all(&dir).unwrap();
    let mut pod = env.pod(
        "hooks",
        "Always",
        10,
        "while [ ! -f /hooks/post ]; do sleep 0.1; done; echo saw-poststart; \
         while true; do sleep 1; done",
    );
    pod["spec"]["volumes"] = json!([
        {"name": "hooks", "hostPath": {"path": dir.display().to_string(), "type": "Directory"}}
    ]);
    let c = &mut pod["spec"]["containers"][0];
    c["volumeMounts"] = json!([{"name": "hooks", "mountPath": "/hooks"}]);
    c["lifecycle"] = json!({
        "postStart": {"exec": {"command": ["/bin/sh", "-c", "echo post > /hooks/post"]}},
        "preStop": {"exec": {"command": ["/bin/sh", "-c", "echo pre > /hooks/pre"]}}
    });
    env.apply(pod);
    env.wait("the container saw its postStart hook's file", || {
        env.get(&["logs", "hooks"]).contains("saw-poststart")
    });
    assert!(!dir.join("pre").exists());
    let start = Instant::now();
    env.ok(&["delete", "pod", "hooks", "--timeout=60s"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("pre")).expect("preStop ran"),
        "pre\n"
    );
    // sh as PID 1 ignores SIGTERM: the stop waits out what is left of the 10 s grace.
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// SIGTERM to the server and a new one on the same data dir: the running pods keep their
/// containers (same id, same start, no restart) and IPs, and still answer.
fn server_restart_keeps_pods(env: &mut Env) {
    let before = env.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].state.running.startedAt} {.status.containerStatuses[0].restartCount}{\"\\n\"}{end}",
    ]);
    assert_eq!(before.lines().count(), 2, "{before}");
    env.cluster().restart();
    let node = env.node.clone();
    let k = env.kubectl();
    assert!(
        eventually(PATIENCE, || k
            .run(&[
                "get",
                "node",
                &node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"
            ])
            .stdout
            == "True"),
        "node Ready again"
    );
    // Several syncs of the new kubelet: nothing changes.
    std::thread::sleep(Duration::from_secs(5));
    let after = env.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].state.running.startedAt} {.status.containerStatuses[0].restartCount}{\"\\n\"}{end}",
    ]);
    assert_eq!(after, before, "the pods were adopted, not restarted");
    for line in after.lines() {
        let ip: IpAddr = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let name = line.split_whitespace().next().unwrap();
        assert_eq!(
            http_get(SocketAddr::new(ip, 8080)).expect("still serving"),
            name
        );
    }
}

/// kubectl in the test's namespace with `input` on its stdin: its exit code, stdout, stderr.
fn kubectl_fed(env: &Env, args: &[&str], input: &[u8]) -> (i32, String, String) {
    use std::process::Stdio;
    let mut all = vec!["-n", NS];
    all.extend_from_slice(args);
    let mut child = env
        .kubectl()
        .command(&all)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("kubectl output");
    writer.join().expect("stdin writer");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Streams into real containers, which the kubelet takes from containerd's streaming server
/// (CRI `Exec`, `Attach`, `PortForward`): exec with stdin read to its end and the exit code
/// passed on, a program that is not there, `kubectl cp` both ways through the image's tar,
/// attach to a container reading its stdin, and port-forward to a server listening only on
/// the pod's loopback (which no connection to the pod's IP could reach).
fn streams(env: &Env) {
    env.apply(env.pod(
        "box",
        "Always",
        1,
        "echo page-from-loopback > /tmp/index.html; exec httpd -f -p 127.0.0.1:8080 -h /tmp",
    ));
    env.apply(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reader"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c",
                "image": env.lab.image,
                "stdin": true,
                "stdinOnce": true,
                "command": ["/bin/sh", "-c",
                    "read first; echo got $first; cat > /dev/null; echo stdin closed"],
            }]
        }
    }));
    for pod in ["box", "reader"] {
        env.wait(&format!("{pod} running"), || {
            env.field(pod, ".status.phase") == "Running"
        });
    }

    // stdin to its end (the command sees EOF), stdout and stderr apart, the exit code.
    let input = vec![b'x'; 100_000];
    let (code, out, err) = kubectl_fed(
        env,
        &[
            "exec",
            "-i",
            "box",
            "--",
            "sh",
            "-c",
            "wc -c; echo to-stderr >&2; exit 3",
        ],
        &input,
    );
    assert_eq!((code, out.trim()), (3, "100000"), "{out} {err}");
    assert!(err.contains("to-stderr"), "{err}");
    let (code, out, err) = kubectl_fed(env, &["exec", "box", "--", "no-such-program"], b"");
    assert_ne!(code, 0, "{out} {err}");
    assert!(err.contains("no-such-program"), "{err}");

    // kubectl cp runs tar through exec, into the pod (stdin to its end) and back out.
    let data: Vec<u8> = (0u32..2 * 1024 * 1024)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("data.bin");
    std::fs::write(&local, &data).unwrap();
    env.ok(&["cp", local.to_str().unwrap(), "box:/tmp/data.bin"]);
    let sum = env.ok(&["exec", "box", "--", "sha256sum", "/tmp/data.bin"]);
    let back = dir.path().join("back.bin");
    env.ok(&["cp", "box:/tmp/data.bin", back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "the bytes differ after a round trip through the pod ({sum})"
    );

    // attach: the container's stdin, then its end (stdinOnce closes it).
    let (code, out, err) = kubectl_fed(env, &["attach", "-i", "reader"], b"hello\n");
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("got hello"), "{out} {err}");
    assert!(out.contains("stdin closed"), "{out} {err}");
    env.wait("the attached container finished", || {
        env.field("reader", ".status.phase") == "Succeeded"
    });

    // port-forward reaches the pod's loopback: 100 requests, a connection each.
    let local_port = skiff_tests::free_port();
    let log = dir.path().join("port-forward.log");
    let mut args = vec!["-n", NS, "port-forward", "pod/box"];
    let ports = format!("{local_port}:8080");
    args.push(&ports);
    let mut forward = env.kubectl().spawn(&args, &log);
    let addr = SocketAddr::from(([127, 0, 0, 1], local_port));
    let first = eventually(Duration::from_secs(30), || {
        http_get(addr).is_ok_and(|body| body == "page-from-loopback")
    });
    let failures: Vec<String> = if first {
        (0..100)
            .filter_map(|i| match http_get(addr) {
                Ok(body) if body == "page-from-loopback" => None,
                other => Some(format!("request {i}: {other:?}")),
            })
            .collect()
    } else {
        vec!["no first answer".into()]
    };
    let _ = forward.kill();
    let _ = forward.wait();
    assert!(
        failures.is_empty(),
        "{failures:?}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    env.ok(&["delete", "pod", "box", "reader", "--wait=false"]);
}

//! `skiff server` and `skiff apiserver` on an external etcd (`--datastore-endpoint`): a
//! throwaway 1-member etcd on loopback per test, kubectl driving the cluster, and the faults
//! the datastore brings: an etcd unreachable at start (retried, then a clear error), a foreign
//! prefix (refused), a value over etcd's request limit (413), and etcd killed under a running
//! server (writes 503/504, `/readyz` not ready, watches still served; all well once it is back);
//! and a cluster moved from a data dir onto etcd and back through `skiff export`/`import`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skiff_tests::etcd::Etcd;
use skiff_tests::{TestCluster, eventually, kill_pod_processes, skiff, skiff_ok};

/// Sleep loops (the kubelet runs them as host processes) that stop quickly when deleted.
const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
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

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// Kills the pod processes a kubelet under this root dir left running, after the server is
/// gone: declared before it, it is dropped after it, passed or failed.
struct PodCleanup(PathBuf);

impl Drop for PodCleanup {
    fn drop(&mut self) {
        let killed = kill_pod_processes(&self.0);
        if killed > 0 {
            eprintln!(
                "killed {killed} pod processes left under {}",
                self.0.display()
            );
        }
    }
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn now_rfc3339() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%NZ"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One blocking HTTPS request with the admin token: (status code, body as JSON or a string).
fn request(cluster: &TestCluster, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = cluster
            .http()
            .request(method, format!("{}{path}", cluster.server))
            .bearer_auth(&cluster.token)
            .timeout(Duration::from_secs(60));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let code = response.status().as_u16();
        let text = response.text().await.expect("body");
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    })
}

fn configmap(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}})
}

fn ready_replicas(cluster: &TestCluster) -> i64 {
    let run = cluster.kubectl().run(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.status.readyReplicas}",
    ]);
    run.stdout.trim().parse().unwrap_or(0)
}

#[test]
fn kubectl_works_on_etcd_and_a_restart_keeps_everything() {
    let Some(etcd) = Etcd::start(&[]) else {
        return;
    };
    let pods = tempfile::tempdir().unwrap();
    let root = pods.path().join("kubelet");
    let _cleanup = PodCleanup(root.clone());
    let endpoint = etcd.endpoint();
    let mut cluster = TestCluster::start_server(&[
        "--datastore-endpoint",
        &endpoint,
        "--root-dir",
        root.to_str().unwrap(),
    ]);
    let k = cluster.kubectl();
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();

    // Create, get, list.
    k.ok(&["create", "configmap", "one", "--from-literal=v=1"]);
    k.ok(&["create", "configmap", "two", "--from-literal=v=2"]);
    assert_eq!(
        k.ok(&["get", "configmap", "one", "-o", "jsonpath={.data.v}"]),
        "1"
    );
    let names = k.ok(&["get", "configmaps", "-o", "name"]);
    assert!(
        names.contains("configmap/one") && names.contains("configmap/two"),
        "{names}"
    );
    // The objects are etcd's keys under the default prefix, today's layout below it.
    let keys: Vec<String> = etcd
        .keys(b"/skiff/registry/")
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(
        keys.iter().any(|k| k.ends_with("/configmaps/default/one")),
        "{keys:?}"
    );
    assert_eq!(
        etcd.get(b"/skiff\0marker").as_deref(),
        Some(&b"skiff-etcd/1"[..])
    );
    // resourceVersion is etcd's mod revision.
    let rv1: u64 = k
        .ok(&[
            "get",
            "configmap",
            "one",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
        .parse()
        .unwrap();

    // Watch: the initial list, then a change made after it started.
    let out = cluster.dir.path().join("watch.out");
    let mut watch = k.spawn(&["get", "configmaps", "-w", "-o", "name"], &out);
    let listed = eventually(Duration::from_secs(15), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.contains("configmap/one"))
    });
    k.ok(&["create", "configmap", "three"]);
    let seen = eventually(Duration::from_secs(15), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.contains("configmap/three"))
    });
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        listed && seen,
        "{}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );

    // Delete.
    k.ok(&["delete", "configmap", "two"]);
    assert!(k.fails(&["get", "configmap", "two"]).contains("NotFound"));

    // Time travel within etcd's history: by revision and by time, over the running server.
    std::thread::sleep(Duration::from_millis(1100));
    let before_change = now_rfc3339();
    std::thread::sleep(Duration::from_millis(1100));
    k.ok(&[
        "patch",
        "configmap",
        "one",
        "-p",
        r#"{"data":{"v":"changed"}}"#,
    ]);
    let at = |point: &str| {
        let text = skiff_ok(&[
            "get",
            "configmaps",
            "--at",
            point,
            "-o",
            "json",
            "--kubeconfig",
            &kubeconfig,
        ]);
        json_of(&text)["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .find(|o| o["metadata"]["name"] == "one")
            .map(|o| o["data"]["v"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(at(&rv1.to_string()).as_deref(), Some("1"));
    assert_eq!(at(&before_change).as_deref(), Some("1"));
    assert_eq!(at("now").as_deref(), Some("changed"));
    let history = |args: &[&str]| {
        let text = skiff_ok(&[&["history", "configmap/one", "-o", "json"], args].concat());
        json_of(&text)["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let versions = history(&["--kubeconfig", &kubeconfig]);
    assert_eq!(versions.len(), 2, "{versions:?}");
    assert_eq!(versions[0]["revision"].as_u64(), Some(rv1));
    assert!(versions[1]["revision"].as_u64().unwrap() > rv1);

    // A Deployment reaches its replicas.
    k.ok_with_input(&["apply", "-f", "-"], DEPLOYMENT);
    assert!(
        eventually(Duration::from_secs(120), || ready_replicas(&cluster) == 2),
        "the Deployment did not become ready:\n{}",
        k.run(&["get", "pods", "-o", "wide"]).stdout
    );

    // A restart (SIGTERM, then the same flags) keeps everything: the log is etcd's.
    cluster.restart();
    let k = cluster.kubectl();
    assert_eq!(
        k.ok(&["get", "configmap", "one", "-o", "jsonpath={.data.v}"]),
        "changed"
    );
    let names = k.ok(&["get", "configmaps", "-o", "name"]);
    assert!(
        names.contains("configmap/three") && !names.contains("configmap/two"),
        "{names}"
    );
    assert_eq!(history(&["--kubeconfig", &kubeconfig]).len(), 2);
    assert_eq!(at(&rv1.to_string()).as_deref(), Some("1"));
    assert!(
        eventually(Duration::from_secs(120), || ready_replicas(&cluster) == 2),
        "the Deployment is not ready again after the restart"
    );
    let status = cluster.stop().expect("running");
    assert!(status.success(), "skiff exited with {status}");
}

#[test]
fn an_etcd_that_comes_up_late_is_waited_for() {
    let Some(mut etcd) = Etcd::new(&[]) else {
        return;
    };
    let endpoint = etcd.endpoint();
    let cluster = std::thread::scope(|s| {
        let late = s.spawn(|| {
            // Later than one connect attempt (5 s) takes.
            std::thread::sleep(Duration::from_secs(8));
            etcd.spawn();
        });
        let cluster = TestCluster::start(&["--datastore-endpoint", &endpoint]);
        late.join().expect("etcd started");
        cluster
    });
    let log = cluster.log_text();
    assert!(
        log.contains("etcd cannot be reached yet; retrying"),
        "no retry logged:\n{log}"
    );
    assert!(log.contains("connected to etcd"), "{log}");
    cluster.kubectl().ok(&["create", "configmap", "late"]);
}

#[test]
fn an_etcd_that_never_comes_is_a_clear_error_after_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let port = skiff_tests::free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let (ok, _, stderr) = skiff(&[
        "apiserver",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--bind-address",
        "127.0.0.1",
        "--port",
        &skiff_tests::free_port().to_string(),
        "--datastore-endpoint",
        &endpoint,
        "--datastore-wait",
        "12s",
    ]);
    let took = started.elapsed();
    assert!(!ok, "skiff started without etcd:\n{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach etcd at {endpoint}")) && stderr.contains("gave up"),
        "{stderr}"
    );
    assert!(
        stderr.matches("retrying").count() >= 2,
        "fewer than two retries logged:\n{stderr}"
    );
    assert!(
        took >= Duration::from_secs(12) && took < Duration::from_secs(40),
        "took {took:?}"
    );
    // Plain HTTP beyond loopback is refused before any attempt.
    let (ok, _, stderr) = skiff(&[
        "apiserver",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--datastore-endpoint",
        "http://192.0.2.1:2379",
    ]);
    assert!(!ok);
    assert!(stderr.contains("loopback only"), "{stderr}");
}

#[test]
fn a_foreign_etcd_prefix_is_refused() {
    let Some(etcd) = Etcd::start(&[]) else {
        return;
    };
    etcd.put(b"/skiff/app/settings", b"not skiff's");
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = skiff(&[
        "apiserver",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--bind-address",
        "127.0.0.1",
        "--port",
        &skiff_tests::free_port().to_string(),
        "--datastore-endpoint",
        &etcd.endpoint(),
    ]);
    assert!(!ok, "skiff used a foreign prefix:\n{stderr}");
    assert!(
        stderr.contains("is not a skiff store's") && stderr.contains("/skiff/app/settings"),
        "{stderr}"
    );
    // Nothing was written: the foreign key is alone under the prefix.
    assert_eq!(etcd.keys(b"/skiff"), vec![b"/skiff/app/settings".to_vec()]);
    // Another prefix on the same etcd is fine.
    let cluster = TestCluster::start(&[
        "--datastore-endpoint",
        &etcd.endpoint(),
        "--datastore-prefix",
        "/cluster-b",
    ]);
    cluster.kubectl().ok(&["create", "configmap", "b"]);
    assert_eq!(
        etcd.get(b"/skiff/app/settings").as_deref(),
        Some(&b"not skiff's"[..])
    );
}

#[test]
fn a_value_over_etcds_request_limit_is_413_and_writes_nothing() {
    // etcd refuses requests over 512 KiB; skiff is told 768 KiB, so a 600 KiB ConfigMap reaches
    // etcd and is refused there, and a 900 KiB one is refused by skiff first (both under the
    // 1 MiB a ConfigMap may hold, and the 3 MiB body limit).
    let Some(etcd) = Etcd::start(&["--max-request-bytes=524288"]) else {
        return;
    };
    let cluster = TestCluster::start(&[
        "--datastore-endpoint",
        &etcd.endpoint(),
        "--datastore-max-request-bytes",
        "786432",
    ]);
    for (name, size) in [("by-etcd", 600 * 1024), ("by-skiff", 900 * 1024)] {
        let (code, status) = request(
            &cluster,
            "POST",
            CM,
            Some(configmap(name, &"x".repeat(size))),
        );
        assert_eq!(code, 413, "{name}: {status}");
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["reason"], "RequestEntityTooLarge", "{status}");
        assert!(
            status["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Request entity too large"),
            "{status}"
        );
        let (code, _) = request(&cluster, "GET", &format!("{CM}/{name}"), None);
        assert_eq!(code, 404, "{name} was written");
    }
    // A value that fits is written; growing it past the limit is refused and keeps the old one.
    let (code, created) = request(&cluster, "POST", CM, Some(configmap("fits", "small")));
    assert_eq!(code, 201, "{created}");
    let mut bigger = created.clone();
    bigger["data"]["v"] = json!("y".repeat(600 * 1024));
    let (code, status) = request(&cluster, "PUT", &format!("{CM}/fits"), Some(bigger));
    assert_eq!(code, 413, "{status}");
    let (_, now) = request(&cluster, "GET", &format!("{CM}/fits"), None);
    assert_eq!(now["data"]["v"], "small");
    assert_eq!(
        now["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
}

/// `/readyz` without a token: (status code, body).
fn readyz(cluster: &TestCluster) -> (u16, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let response = cluster
            .http()
            .get(format!("{}/readyz", cluster.server))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("readyz");
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    })
}

#[test]
fn while_etcd_is_down_writes_fail_503_and_watches_go_on() {
    let Some(mut etcd) = Etcd::start(&[]) else {
        return;
    };
    let cluster = TestCluster::start(&["--datastore-endpoint", &etcd.endpoint()]);
    let k = cluster.kubectl();
    k.ok(&["create", "configmap", "before"]);
    // A watch running through the outage (it also starts the watch cache for ConfigMaps).
    let through = cluster.dir.path().join("through.out");
    let mut through_watch = k.spawn(&["get", "configmaps", "-w", "-o", "name"], &through);
    assert!(eventually(Duration::from_secs(15), || {
        std::fs::read_to_string(&through).is_ok_and(|s| s.contains("configmap/before"))
    }));
    assert_eq!(readyz(&cluster).0, 200);
    // A revision the cache holds from: the list's, read after the watch above is running.
    std::thread::sleep(Duration::from_secs(1));
    let (_, list) = request(&cluster, "GET", CM, None);
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    etcd.kill();
    // Not ready within a few health checks, and the log says why.
    assert!(
        eventually(Duration::from_secs(10), || readyz(&cluster).0 != 200),
        "still ready with etcd gone"
    );
    let (_, body) = readyz(&cluster);
    assert!(body.contains("[-]etcd failed"), "{body}");
    assert!(
        eventually(Duration::from_secs(5), || cluster
            .log_text()
            .contains("the datastore is unavailable")),
        "{}",
        cluster.log_text()
    );
    // Writes fail with a Status: 503 (or 504 when etcd does not answer in time).
    let started = Instant::now();
    let (code, status) = request(&cluster, "POST", CM, Some(configmap("during", "x")));
    assert!(code == 503 || code == 504, "{code}: {status}");
    assert_eq!(status["kind"], "Status", "{status}");
    assert!(
        matches!(
            status["reason"].as_str(),
            Some("ServiceUnavailable" | "Timeout")
        ),
        "{status}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let run = k.run(&["create", "configmap", "during-kubectl"]);
    assert!(!run.ok, "a write succeeded with etcd down: {}", run.stdout);
    // Watches are still served from the watch cache: a new one from a revision it holds.
    let during = cluster.dir.path().join("during.out");
    let mut during_watch = k.spawn(
        &[
            "get",
            "--raw",
            &format!("{CM}?watch=1&resourceVersion={rv}"),
        ],
        &during,
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        matches!(during_watch.try_wait(), Ok(None)),
        "the watch opened during the outage ended: {}",
        std::fs::read_to_string(&during).unwrap_or_default()
    );
    // The health and version endpoints answer as before.
    assert!(k.ok(&["get", "--raw", "/livez"]).contains("ok"));

    // etcd back on the same data: ready again, writes succeed, both watches see them.
    etcd.spawn();
    assert!(
        eventually(Duration::from_secs(30), || readyz(&cluster).0 == 200),
        "not ready again with etcd back:\n{}",
        cluster.log_text()
    );
    assert!(
        cluster
            .log_text()
            .contains("the datastore is available again")
    );
    assert!(
        eventually(Duration::from_secs(30), || k
            .run(&["create", "configmap", "after"])
            .ok),
        "writes still fail with etcd back"
    );
    for (name, file, after) in [
        ("through", &through, "configmap/after"),
        ("during", &during, r#""name":"after""#),
    ] {
        assert!(
            eventually(Duration::from_secs(20), || {
                std::fs::read_to_string(file).is_ok_and(|s| s.contains(after))
            }),
            "the {name} watch missed the write after the outage: {}",
            std::fs::read_to_string(file).unwrap_or_default()
        );
    }
    for watch in [&mut through_watch, &mut during_watch] {
        let _ = watch.kill();
        let _ = watch.wait();
    }
    // Nothing written during the outage exists; what was written before and after does.
    let names = k.ok(&["get", "configmaps", "-o", "name"]);
    assert!(names.contains("configmap/before") && names.contains("configmap/after"));
    assert!(!names.contains("configmap/during"), "{names}");
}

#[test]
fn two_api_servers_on_one_etcd_see_each_others_writes() {
    let Some(etcd) = Etcd::start(&[]) else {
        return;
    };
    let endpoint = etcd.endpoint();
    let a = TestCluster::start(&["--datastore-endpoint", &endpoint]);
    // The second server takes the cluster's CA and tokens from etcd, with the server token.
    let b = second_server(&a, &endpoint);
    assert_eq!(a.token, b.token);
    let (ka, kb) = (a.kubectl(), b.kubectl());
    // A watch on B, fed by B's watch cache, sees a write made through A, and the other way.
    let out_b = b.dir.path().join("watch-b.out");
    let mut watch_b = kb.spawn(&["get", "configmaps", "-w", "-o", "name"], &out_b);
    let out_a = a.dir.path().join("watch-a.out");
    let mut watch_a = ka.spawn(&["get", "configmaps", "-w", "-o", "name"], &out_a);
    std::thread::sleep(Duration::from_secs(2));
    ka.ok(&["create", "configmap", "from-a", "--from-literal=v=a"]);
    kb.ok(&["create", "configmap", "from-b", "--from-literal=v=b"]);
    let saw = |file: &PathBuf, name: &str| {
        eventually(Duration::from_secs(15), || {
            std::fs::read_to_string(file).is_ok_and(|s| s.contains(name))
        })
    };
    let b_saw_a = saw(&out_b, "configmap/from-a");
    let a_saw_b = saw(&out_a, "configmap/from-b");
    for w in [&mut watch_a, &mut watch_b] {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert!(
        b_saw_a,
        "B's watch: {}",
        std::fs::read_to_string(&out_b).unwrap_or_default()
    );
    assert!(
        a_saw_b,
        "A's watch: {}",
        std::fs::read_to_string(&out_a).unwrap_or_default()
    );
    assert_eq!(
        kb.ok(&["get", "configmap", "from-a", "-o", "jsonpath={.data.v}"]),
        "a"
    );
    // Updates are compare-and-swap in etcd: a stale resourceVersion through A after an update
    // through B is a conflict, whichever server took the first.
    let (_, stale) = request(&a, "GET", &format!("{CM}/from-b"), None);
    let mut via_b = stale.clone();
    via_b["data"]["v"] = json!("b2");
    let (code, _) = request(&b, "PUT", &format!("{CM}/from-b"), Some(via_b));
    assert_eq!(code, 200);
    let mut via_a = stale;
    via_a["data"]["v"] = json!("a2");
    let (code, status) = request(&a, "PUT", &format!("{CM}/from-b"), Some(via_a));
    assert_eq!(code, 409, "{status}");
    assert_eq!(
        ka.ok(&["get", "configmap", "from-b", "-o", "jsonpath={.data.v}"]),
        "b2"
    );
}

#[test]
fn a_second_server_joins_the_cluster_with_the_server_token_only() {
    let Some(etcd) = Etcd::start(&[]) else {
        return;
    };
    let endpoint = etcd.endpoint();
    let a = TestCluster::start(&["--datastore-endpoint", &endpoint]);
    let token = a.server_token();
    let scratch = tempfile::tempdir().unwrap();
    let start = |data: &str, extra: &[&str]| {
        let data = scratch.path().join(data);
        let mut args = vec![
            "apiserver".to_string(),
            "--data-dir".into(),
            data.display().to_string(),
            "--bind-address".into(),
            "127.0.0.1".into(),
            "--port".into(),
            skiff_tests::free_port().to_string(),
            "--datastore-endpoint".into(),
            endpoint.clone(),
            "--datastore-wait".into(),
            "5s".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, _, stderr) = skiff(&args);
        assert!(!ok, "the server started: {stderr}");
        (stderr, data)
    };
    // Without the token, or with another, a server cannot join, and takes nothing.
    let (stderr, data) = start("no-token", &[]);
    assert!(stderr.contains("--server-token"), "{stderr}");
    assert!(!data.join("pki").exists() && !data.join("tokens.csv").exists());
    let (stderr, data) = start("wrong-token", &["--server-token", "not-the-clusters-token"]);
    assert!(stderr.contains("does not open"), "{stderr}");
    assert!(!data.join("pki").exists() && !data.join("tokens.csv").exists());
    // A data dir of another cluster (a single server's, with its own CA) is refused, untouched.
    let other = scratch.path().join("other");
    let mut lone = TestCluster::start(&[]);
    lone.stop();
    std::fs::rename(lone.data_dir(), &other).unwrap();
    let other_ca = std::fs::read(other.join("pki/ca.crt")).unwrap();
    let (stderr, _) = start("other", &["--server-token", &token]);
    assert!(stderr.contains("another cluster"), "{stderr}");
    assert_eq!(std::fs::read(other.join("pki/ca.crt")).unwrap(), other_ca);

    // With the token: one CA, one token file, each server its own serving certificate.
    let b = second_server(&a, &endpoint);
    let file = |c: &TestCluster, name: &str| std::fs::read(c.data_dir().join(name)).unwrap();
    for shared in [
        "pki/ca.crt",
        "pki/ca.key",
        "pki/front-proxy-ca.crt",
        "pki/service-account.key",
        "tokens.csv",
    ] {
        assert_eq!(file(&a, shared), file(&b, shared), "{shared}");
    }
    assert_ne!(file(&a, "pki/server.crt"), file(&b, "pki/server.crt"));
    assert_eq!(a.join_token(), b.join_token());
    // A's kubeconfig works against B as it is, its server swapped.
    let kubeconfig = std::fs::read_to_string(&a.kubeconfig)
        .unwrap()
        .replace(&a.server, &b.server);
    let swapped = scratch.path().join("swapped.kubeconfig");
    std::fs::write(&swapped, kubeconfig).unwrap();
    let out = Command::new("kubectl")
        .args([
            "--kubeconfig",
            swapped.to_str().unwrap(),
            "get",
            "namespaces",
            "-o",
            "name",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("namespace/default"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A service-account token A issues is good at B (one signing key).
    let k = a.kubectl();
    k.ok(&["create", "serviceaccount", "robot"]);
    let sa_token = k.ok(&["create", "token", "robot"]);
    let (code, _) = {
        let request = b
            .http()
            .get(format!("{}/api/v1/namespaces/default/configmaps", b.server))
            .bearer_auth(sa_token.trim());
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    // Authenticated as the service account (403: it may not list), not refused as unknown (401).
    assert_eq!(code, 403);
}

/// A second API server of `first`'s cluster on `etcd`, joined with its server token.
fn second_server(first: &TestCluster, endpoint: &str) -> TestCluster {
    first.join_server("apiserver", &["--datastore-endpoint", endpoint])
}

fn service(name: &str, cluster_ip: Option<&str>, node_port: Option<u16>) -> Value {
    let mut port = json!({"port": 80, "targetPort": 80});
    if let Some(p) = node_port {
        port["nodePort"] = json!(p);
    }
    let mut spec = json!({"type": "NodePort", "selector": {"app": name}, "ports": [port]});
    if let Some(ip) = cluster_ip {
        spec["clusterIP"] = json!(ip);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

const SVC: &str = "/api/v1/namespaces/default/services";

#[test]
fn two_api_servers_never_hand_out_the_same_cluster_ip_or_node_port() {
    let Some(etcd) = Etcd::start(&[]) else {
        return;
    };
    let endpoint = etcd.endpoint();
    let a = TestCluster::start(&["--datastore-endpoint", &endpoint]);
    let b = second_server(&a, &endpoint);

    // The same address and port asked of both servers at once: exactly one gets them, the
    // other is told they are taken (per-process memory would give both).
    for round in 0..6u16 {
        let ip = format!("127.96.1.{}", round + 10);
        let port = 31000 + round;
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| {
                request(
                    &a,
                    "POST",
                    SVC,
                    Some(service(&format!("a{round}"), Some(&ip), None)),
                )
            });
            let tb = s.spawn(|| {
                request(
                    &b,
                    "POST",
                    SVC,
                    Some(service(&format!("b{round}"), Some(&ip), None)),
                )
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        let codes = [ra.0, rb.0];
        assert!(
            codes.contains(&201) && codes.contains(&422),
            "round {round}, ClusterIP {ip}: {ra:?} {rb:?}"
        );
        let refused = if ra.0 == 422 { &ra.1 } else { &rb.1 };
        assert!(
            refused["message"]
                .as_str()
                .unwrap_or_default()
                .contains("already allocated"),
            "{refused}"
        );
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| {
                request(
                    &a,
                    "POST",
                    SVC,
                    Some(service(&format!("pa{round}"), None, Some(port))),
                )
            });
            let tb = s.spawn(|| {
                request(
                    &b,
                    "POST",
                    SVC,
                    Some(service(&format!("pb{round}"), None, Some(port))),
                )
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        let codes = [ra.0, rb.0];
        assert!(
            codes.contains(&201) && codes.contains(&422),
            "round {round}, NodePort {port}: {ra:?} {rb:?}"
        );
    }

    // Many picks through both servers at once: all distinct.
    std::thread::scope(|s| {
        for (server, tag) in [(&a, "x"), (&b, "y")] {
            s.spawn(move || {
                for i in 0..20 {
                    let (code, body) = request(
                        server,
                        "POST",
                        SVC,
                        Some(service(&format!("{tag}{i}"), None, None)),
                    );
                    assert_eq!(code, 201, "{body}");
                }
            });
        }
    });
    let (_, list) = request(&a, "GET", SVC, None);
    let items: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["metadata"]["name"] != "kubernetes")
        .collect();
    assert_eq!(items.len(), 6 + 6 + 40, "{list}");
    let ips: std::collections::BTreeSet<&str> = items
        .iter()
        .map(|s| s["spec"]["clusterIP"].as_str().unwrap())
        .collect();
    let ports: std::collections::BTreeSet<u64> = items
        .iter()
        .map(|s| s["spec"]["ports"][0]["nodePort"].as_u64().unwrap())
        .collect();
    assert_eq!(ips.len(), items.len(), "duplicate ClusterIPs");
    assert_eq!(ports.len(), items.len(), "duplicate NodePorts");
    // Every one is reserved in etcd, next to the objects.
    let reserved = etcd.keys(b"/skiff/registry/ranges/servicenodeports/").len();
    assert_eq!(reserved, items.len());

    // Deleted through B, an address is free through A at once.
    let taken = items
        .iter()
        .find(|s| s["metadata"]["name"] == "x0")
        .unwrap()["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _) = request(&b, "DELETE", &format!("{SVC}/x0"), None);
    assert_eq!(code, 200);
    let (code, body) = request(&a, "POST", SVC, Some(service("again", Some(&taken), None)));
    assert_eq!(code, 201, "{body}");
}

/// Copies the CA, the other PKI files and the tokens of one data dir into another, as a server
/// moved to a new data dir needs to keep serving the same clients.
fn copy_identity(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to.join("pki")).unwrap();
    for entry in std::fs::read_dir(from.join("pki")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join("pki").join(entry.file_name())).unwrap();
    }
    std::fs::copy(from.join("tokens.csv"), to.join("tokens.csv")).unwrap();
}

/// The value, uid and creation time of each object the migration test made, as a server
/// serves them.
fn objects(cluster: &TestCluster) -> Vec<(String, String, String, String)> {
    let k = cluster.kubectl();
    let mut out = Vec::new();
    for (kind, name, ns, path) in [
        ("configmap", "one", "default", "{.data.v}"),
        ("configmap", "two", "default", "{.data.v}"),
        ("configmap", "three", "default", "{.data.v}"),
        ("secret", "s", "team", "{.data.k}"),
    ] {
        let run = k.run(&[
            "get",
            kind,
            name,
            "-n",
            ns,
            "-o",
            &format!("jsonpath={path} {{.metadata.uid}} {{.metadata.creationTimestamp}}"),
        ]);
        if run.ok {
            let mut parts = run.stdout.split(' ').map(str::to_string);
            out.push((
                format!("{kind}/{name}"),
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            ));
        }
    }
    out
}

/// A single-box cluster moves onto etcd and back (issue 22): a `skiff server` on a data dir
/// with a few objects is stopped and exported, the archive imported into an empty etcd prefix
/// (a second import there is refused), a server on etcd serves the same objects, uids and
/// times, and `--at` a time before a change reads there as it did on the data dir; a new
/// object is created on etcd, the prefix exported (while that server runs) and imported into a
/// new data dir, whose server serves all of them and the same past.
#[test]
fn a_cluster_moves_from_a_data_dir_onto_etcd_and_back() {
    let Some(etcd) = Etcd::start(&[]) else {
        return;
    };
    let endpoint = etcd.endpoint();
    let work = tempfile::tempdir().unwrap();
    let _cleanup = PodCleanup(work.path().join("kubelet"));
    let root = |n: &str| work.path().join("kubelet").join(n);
    let file = |n: &str| work.path().join(n).to_string_lossy().into_owned();

    let root1 = root("1");
    let mut first = TestCluster::start_server(&["--root-dir", root1.to_str().unwrap()]);
    let k = first.kubectl();
    k.ok(&["create", "configmap", "one", "--from-literal=v=1"]);
    k.ok(&["create", "configmap", "two", "--from-literal=v=2"]);
    k.ok(&["create", "namespace", "team"]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "s",
        "-n",
        "team",
        "--from-literal=k=x",
    ]);
    std::thread::sleep(Duration::from_millis(1100));
    let before_change = now_rfc3339();
    std::thread::sleep(Duration::from_millis(1100));
    k.ok(&[
        "patch",
        "configmap",
        "one",
        "-p",
        r#"{"data":{"v":"changed"}}"#,
    ]);
    let on_sled = objects(&first);
    assert_eq!(on_sled.len(), 3, "{on_sled:?}");
    assert_eq!(on_sled[0].1, "changed");
    let status = first.stop().expect("running");
    assert!(status.success(), "skiff exited with {status}");
    let data_dir = first.data_dir().to_string_lossy().into_owned();
    let at_before = |source: &[&str]| -> Option<String> {
        let text = skiff_ok(
            &[
                &[
                    "get",
                    "configmap",
                    "one",
                    "--at",
                    &before_change,
                    "-o",
                    "json",
                ][..],
                source,
            ]
            .concat(),
        );
        json_of(&text)["data"]["v"].as_str().map(str::to_string)
    };
    assert_eq!(at_before(&["--data-dir", &data_dir]).as_deref(), Some("1"));

    // Onto etcd.
    let archive = file("cluster.skiff");
    skiff_ok(&["export", "--data-dir", &data_dir, "-o", &archive]);
    let onto = [
        "--datastore-endpoint",
        endpoint.as_str(),
        "--datastore-prefix",
        "/moved",
    ];
    let printed = skiff_ok(&[&["import", &archive][..], &onto].concat());
    assert!(
        printed.contains("renumbered by etcd") && printed.contains("->"),
        "{printed}"
    );
    // The prefix holds a cluster now: a second import is refused and writes nothing.
    let keys = etcd.keys(b"/moved");
    let again = skiff(&[&["import", &archive][..], &onto].concat());
    assert!(
        !again.0 && again.2.contains("not empty") && again.2.contains("nothing was written"),
        "{again:?}"
    );
    assert_eq!(etcd.keys(b"/moved"), keys);

    let root2 = root("2");
    let server_args = [&onto[..], &["--root-dir", root2.to_str().unwrap()]].concat();
    let mut second = TestCluster::start_prepared("server", &server_args, |dir| {
        copy_identity(&first.data_dir(), dir)
    });
    assert_eq!(objects(&second), on_sled);
    // The past reads the same on etcd, from the prefix itself and through the server.
    assert_eq!(at_before(&onto).as_deref(), Some("1"));
    let kubeconfig2 = second.kubeconfig.to_string_lossy().into_owned();
    assert_eq!(
        at_before(&["--kubeconfig", &kubeconfig2]).as_deref(),
        Some("1")
    );
    second
        .kubectl()
        .ok(&["create", "configmap", "three", "--from-literal=v=3"]);
    let on_etcd = objects(&second);
    assert_eq!(on_etcd.len(), 4, "{on_etcd:?}");
    assert_eq!(on_etcd[..2], on_sled[..2]);
    assert_eq!(on_etcd[3], on_sled[2]);

    // And back, exported while the server on etcd runs.
    let back = file("back.skiff");
    let printed = skiff_ok(&[&["export", "-o", &back][..], &onto].concat());
    assert!(printed.contains("numbers them"), "{printed}");
    let status = second.stop().expect("running");
    assert!(status.success(), "skiff exited with {status}");
    let root3 = root("3");
    let third =
        TestCluster::start_prepared("server", &["--root-dir", root3.to_str().unwrap()], |dir| {
            let printed = skiff_ok(&["import", &back, "--data-dir", &dir.to_string_lossy()]);
            assert!(printed.contains("numbered densely"), "{printed}");
            copy_identity(&first.data_dir(), dir);
        });
    assert_eq!(objects(&third), on_etcd);
    let kubeconfig3 = third.kubeconfig.to_string_lossy().into_owned();
    assert_eq!(
        at_before(&["--kubeconfig", &kubeconfig3]).as_deref(),
        Some("1")
    );
    let history = skiff_ok(&[
        "history",
        "configmap/one",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig3,
    ]);
    let versions = json_of(&history)["versions"].as_array().cloned().unwrap();
    assert_eq!(versions.len(), 2, "{versions:?}");
    // The new data dir takes writes after the imported ones.
    third
        .kubectl()
        .ok(&["create", "configmap", "four", "--from-literal=v=4"]);
}

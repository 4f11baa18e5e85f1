//! `skiff get --at`, `history`, `diff`, `log`, `replay`, `export`/`import` and `server --paused`
//! against a scripted scenario driven with kubectl, read both from the running server (its debug
//! endpoints) and from its stopped data dir.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use skiff_tests::{TestCluster, eventually, free_port, skiff_binary};

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
      containers:
      - name: main
        image: busybox:1
"#;

const CONFIGMAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: default}
data: {k: v1}
"#;

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

/// The newest revision of the log, as a list's resourceVersion says.
fn current_revision(cluster: &TestCluster) -> u64 {
    // kubectl blanks a printed list's resourceVersion; the raw list keeps it.
    let list = cluster
        .kubectl()
        .ok(&["get", "--raw", "/api/v1/configmaps"]);
    json(&list)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// One step of the scenario: the revision after it and what kubectl showed then.
struct Step {
    revision: u64,
    deployments_json: Vec<Value>,
    deployments_table: String,
    configmaps_json: Vec<Value>,
}

fn record(cluster: &TestCluster) -> Step {
    let k = cluster.kubectl();
    let revision = current_revision(cluster);
    let deployments_table = k.run(&["get", "deployments"]);
    Step {
        revision,
        deployments_json: items(&k.ok(&["get", "deployments", "-o", "json"])),
        deployments_table: deployments_table.stdout,
        configmaps_json: items(&k.ok(&["get", "configmaps", "-o", "json"])),
    }
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

fn history(args: &[&str]) -> Vec<(u64, String, Option<String>)> {
    let text = skiff_ok(&[&["history"], args, &["-o", "json"]].concat());
    json(&text)["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["revision"].as_u64().unwrap(),
                v["operation"].as_str().unwrap().to_string(),
                v["manager"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn diff(args: &[&str]) -> Vec<(String, String, String)> {
    let text = skiff_ok(&[&["diff"], args, &["-n", "default", "-o", "json"]].concat());
    json(&text)["objects"]
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
        .collect()
}

/// A `skiff server` on an existing data dir (killed on drop).
struct Server {
    child: Child,
    kubeconfig: PathBuf,
}

impl Server {
    fn start(data_dir: &Path, extra: &[&str]) -> Server {
        let log = std::fs::File::create(data_dir.with_extension("log")).unwrap();
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
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let kubeconfig = data_dir.join("admin.kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let mut server = Server { child, kubeconfig };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(
                server.child.try_wait().unwrap().is_none(),
                "server exited: {}",
                std::fs::read_to_string(data_dir.with_extension("log")).unwrap_or_default()
            );
            if server.kubeconfig.exists()
                && server
                    .kubectl(&["get", "--raw", "/readyz"])
                    .status
                    .success()
            {
                break;
            }
            assert!(Instant::now() < deadline, "server not ready in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap()
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn scripted_scenario_reads_back_at_every_step() {
    let mut cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();

    // Step 0: nothing of ours yet.
    let s0 = record(&cluster);
    // Step 1: a Deployment and a ConfigMap.
    k.ok_with_input(&["apply", "-f", "-"], DEPLOYMENT);
    let deploy_created = current_revision(&cluster);
    k.ok_with_input(&["create", "-f", "-"], CONFIGMAP);
    let s1 = record(&cluster);
    // Step 2: scaled (kubectl scale changes spec.replicas through the scale subresource).
    k.ok(&["scale", "deployment/web", "--replicas=5"]);
    let s2 = record(&cluster);
    std::thread::sleep(Duration::from_millis(1100));
    let after_s2 = now_rfc3339();
    std::thread::sleep(Duration::from_millis(1100));
    // Step 3: the ConfigMap patched, then a rollout (a new image).
    k.ok(&["patch", "configmap", "cfg", "-p", r#"{"data":{"k":"v2"}}"#]);
    let cm_patched = current_revision(&cluster);
    k.ok(&["set", "image", "deployment/web", "main=busybox:2"]);
    let s3 = record(&cluster);
    // Step 4: the ConfigMap deleted; step 5: the Deployment deleted.
    k.ok(&["delete", "configmap", "cfg"]);
    let s4 = record(&cluster);
    k.ok(&["delete", "deployment", "web"]);
    let s5 = record(&cluster);
    let steps = [&s0, &s1, &s2, &s3, &s4, &s5];

    // get --at each step, from the running server, matches what kubectl showed then.
    for s in steps {
        let at = rev(s.revision);
        let remote = skiff_ok(&[
            "get",
            "deploy",
            "--at",
            &at,
            "-o",
            "json",
            "--kubeconfig",
            &kubeconfig,
        ]);
        assert_eq!(items(&remote), s.deployments_json, "deployments at {at}");
        let remote = skiff_ok(&[
            "get",
            "cm",
            "--at",
            &at,
            "-o",
            "json",
            "--kubeconfig",
            &kubeconfig,
        ]);
        assert_eq!(items(&remote), s.configmaps_json, "configmaps at {at}");
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

    // history lists exactly the versions written.
    let web = history(&["deploy/web", "--kubeconfig", &kubeconfig]);
    let ops: Vec<(u64, &str)> = web.iter().map(|(r, o, _)| (*r, o.as_str())).collect();
    assert_eq!(
        ops,
        vec![
            (deploy_created, "created"),
            (s2.revision, "updated"),
            (s3.revision, "updated"),
            (s5.revision, "deleted"),
        ]
    );
    assert!(web[0].2.is_some(), "the creator is recorded: {web:?}");
    let cfg = history(&[
        "configmap/cfg",
        "-n",
        "default",
        "--kubeconfig",
        &kubeconfig,
    ]);
    let ops: Vec<(u64, &str)> = cfg.iter().map(|(r, o, _)| (*r, o.as_str())).collect();
    assert_eq!(
        ops,
        vec![
            (s1.revision, "created"),
            (cm_patched, "updated"),
            (s4.revision, "deleted")
        ]
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

    // diff between two steps names exactly the objects that changed.
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
    let expect = |list: &[(&str, &str, &str)]| -> Vec<(String, String, String)> {
        list.iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect()
    };
    assert_eq!(
        from_to(&s0, &s1),
        expect(&[
            ("created", "Deployment", "web"),
            ("created", "ConfigMap", "cfg")
        ])
    );
    assert_eq!(
        from_to(&s1, &s2),
        expect(&[("changed", "Deployment", "web")])
    );
    assert_eq!(
        from_to(&s2, &s4),
        expect(&[
            ("changed", "Deployment", "web"),
            ("deleted", "ConfigMap", "cfg")
        ])
    );
    assert_eq!(from_to(&s4, &s4), expect(&[]));

    // log: one line a change, exactly the writes of the window.
    let text = skiff_ok(&[
        "log",
        "--since",
        &rev(s1.revision + 1),
        "--until",
        &rev(s4.revision),
        "-n",
        "default",
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
    ]);
    let lines: Vec<(u64, String)> = text
        .lines()
        .map(|l| {
            let c = json(l);
            (
                c["revision"].as_u64().unwrap(),
                c["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            (s2.revision, "updated".into()),
            (cm_patched, "updated".into()),
            (s3.revision, "updated".into()),
            (s4.revision, "deleted".into()),
        ]
    );
    let text = skiff_ok(&[
        "log",
        "deploy",
        "--since",
        &rev(s2.revision),
        "--until",
        &rev(s2.revision),
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
            &rev(s5.revision + 1),
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
    let final_revision = current_revision(&cluster);

    // The same reads from the stopped server's data dir.
    cluster.stop();
    let data_dir = cluster.data_dir();
    let dd = data_dir.to_string_lossy().into_owned();
    for s in steps {
        let at = rev(s.revision);
        let local = skiff_ok(&[
            "get",
            "deploy",
            "--at",
            &at,
            "-o",
            "json",
            "--data-dir",
            &dd,
        ]);
        assert_eq!(
            items(&local),
            s.deployments_json,
            "deployments at {at} from the data dir"
        );
    }
    // A time maps to the revision committed before it, across the restart.
    let local = skiff_ok(&[
        "get",
        "deploy",
        "--at",
        &after_s2,
        "-o",
        "json",
        "--data-dir",
        &dd,
    ]);
    assert_eq!(items(&local), s2.deployments_json);
    cluster.restart_after_crash();
    let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
    let remote = skiff_ok(&[
        "get",
        "deploy",
        "--at",
        &after_s2,
        "-o",
        "json",
        "--kubeconfig",
        &kubeconfig,
    ]);
    assert_eq!(items(&remote), s2.deployments_json);
    cluster.stop();

    // replay into a new dir; `server --paused` on it serves the same objects as get --at.
    let work = tempfile::tempdir().unwrap();
    let replayed = work.path().join("replayed");
    let rd = replayed.to_string_lossy().into_owned();
    skiff_ok(&[
        "replay",
        "--data-dir",
        &dd,
        "--until",
        &rev(s3.revision),
        "--into",
        &rd,
    ]);
    {
        let server = Server::start(&replayed, &["--paused"]);
        assert_eq!(
            items(&server.kubectl_ok(&["get", "deployments", "-o", "json"])),
            s3.deployments_json
        );
        assert_eq!(
            items(&server.kubectl_ok(&["get", "configmaps", "-o", "json"])),
            s3.configmaps_json
        );
    }
    // The replayed dir holds the history up to the point, and not after it.
    assert_eq!(
        items(&skiff_ok(&[
            "get",
            "deploy",
            "--at",
            &rev(s2.revision),
            "-o",
            "json",
            "--data-dir",
            &rd
        ])),
        s2.deployments_json
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

    // export then import into a fresh data dir: byte-identical reads at every revision.
    let archive = work.path().join("log.skiff");
    let ar = archive.to_string_lossy().into_owned();
    skiff_ok(&["export", "--data-dir", &dd, "-o", &ar]);
    let imported = work.path().join("imported");
    let id = imported.to_string_lossy().into_owned();
    skiff_ok(&["import", &ar, "--data-dir", &id]);
    for r in 1..=final_revision {
        for kind in ["deploy", "cm", "namespaces"] {
            let args = |dir: &str| -> Vec<String> {
                [
                    "get",
                    kind,
                    "-A",
                    "--at",
                    &rev(r),
                    "-o",
                    "json",
                    "--show-managed-fields",
                    "--data-dir",
                    dir,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect()
            };
            let a = skiff(&args(&dd).iter().map(String::as_str).collect::<Vec<_>>());
            let b = skiff(&args(&id).iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(
                (a.ok, &a.stdout, &a.stderr),
                (b.ok, &b.stdout, &b.stderr),
                "{kind} at {r}"
            );
        }
    }
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

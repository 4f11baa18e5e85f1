//! The machine's kubectl (v1.32 dispatcher, bundled 1.32 and 1.33 clients) against `skiff server`
//! with default flags: the verbs a user types every day, and the output shapes a real cluster gives.

use std::time::Duration;

use skiff_tests::{Kubectl, TestCluster, eventually};

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: bar, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "sleep 3600"]
"#;

#[test]
fn version_and_api_resources() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let version = k.ok(&["version"]);
    assert!(version.contains("Server Version: v1.33"), "{version}");
    let resources = k.ok(&["api-resources"]);
    for line in [
        "deployments",
        "deploy",
        "apps/v1",
        "pods",
        "po",
        "leases",
        "coordination.k8s.io/v1",
        "endpointslices",
    ] {
        assert!(
            resources.contains(line),
            "api-resources lacks {line}:\n{resources}"
        );
    }
    let pods_line = resources
        .lines()
        .find(|l| l.starts_with("pods "))
        .expect("a pods line");
    assert!(
        pods_line.contains("true") && pods_line.contains("Pod"),
        "{pods_line}"
    );
}

#[test]
fn create_apply_and_server_side_apply() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    assert_eq!(
        k.ok(&["create", "namespace", "bar"]).trim(),
        "namespace/bar created"
    );
    assert_eq!(
        k.ok_with_input(&["apply", "-f", "-"], DEPLOYMENT).trim(),
        "deployment.apps/web created"
    );
    // Unchanged: no patch.
    assert_eq!(
        k.ok_with_input(&["apply", "-f", "-"], DEPLOYMENT).trim(),
        "deployment.apps/web unchanged"
    );
    let changed = DEPLOYMENT.replace("replicas: 2", "replicas: 3");
    assert_eq!(
        k.ok_with_input(&["apply", "-f", "-"], &changed).trim(),
        "deployment.apps/web configured"
    );
    assert_eq!(
        web_jsonpath(&k, "{.spec.replicas} {.metadata.generation}"),
        "3 2"
    );
    let ssa = changed.replace("replicas: 3", "replicas: 4");
    assert_eq!(
        k.ok_with_input(&["apply", "--server-side", "-f", "-"], &ssa)
            .trim(),
        "deployment.apps/web serverside-applied"
    );
    assert_eq!(web_jsonpath(&k, "{.spec.replicas}"), "4");
    let managers = k.ok(&[
        "-n",
        "bar",
        "get",
        "deploy",
        "web",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(managers.contains("kubectl"), "{managers}");
    // A server-side apply of a new object creates it.
    let fresh = DEPLOYMENT.replace("name: web,", "name: api,");
    assert_eq!(
        k.ok_with_input(&["apply", "--server-side", "-f", "-"], &fresh)
            .trim(),
        "deployment.apps/api serverside-applied"
    );
    assert_eq!(
        k.ok(&["-n", "bar", "get", "deploy", "-o", "name"]),
        "deployment.apps/api\ndeployment.apps/web\n"
    );
}

#[test]
fn configmaps_labels_annotations_and_replace() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "bar"]);
    k.ok(&[
        "-n",
        "bar",
        "create",
        "configmap",
        "cfg",
        "--from-literal=a=1",
    ]);
    let yaml = k.ok(&["-n", "bar", "get", "configmap", "cfg", "-o", "yaml"]);
    assert!(yaml.contains("a: \"1\""), "{yaml}");
    k.ok(&["-n", "bar", "label", "configmap", "cfg", "tier=gold"]);
    assert_eq!(
        k.ok(&["-n", "bar", "get", "cm", "-l", "tier=gold", "-o", "name"]),
        "configmap/cfg\n"
    );
    assert_eq!(
        k.ok(&["-n", "bar", "get", "cm", "-l", "tier!=gold", "-o", "name"]),
        ""
    );
    let json = k.ok(&["-n", "bar", "get", "configmap", "cfg", "-o", "json"]);
    k.ok(&["-n", "bar", "annotate", "configmap", "cfg", "note=x"]);
    // Replacing with the version read before the annotation is a conflict...
    let stale = k.run_with_input(&["replace", "-f", "-"], &json);
    assert!(!stale.ok);
    assert!(stale.stderr.contains("Conflict"), "{}", stale.stderr);
    assert!(
        stale.stderr.contains("the object has been modified"),
        "{}",
        stale.stderr
    );
    // ...and without a resourceVersion it is an unconditional update.
    let mut object: serde_json::Value = serde_json::from_str(&json).unwrap();
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    object["data"]["b"] = serde_json::json!("2");
    let out = k.ok_with_input(&["replace", "-f", "-"], &object.to_string());
    assert!(out.contains("replaced"), "{out}");
    assert_eq!(
        k.ok(&["-n", "bar", "get", "cm", "cfg", "-o", "jsonpath={.data.b}"]),
        "2"
    );
    let invalid = k.fails(&["create", "configmap", "Bad_Name", "-n", "bar"]);
    assert!(invalid.contains("is invalid"), "{invalid}");
    assert!(invalid.contains("metadata.name"), "{invalid}");
    let exists = k.fails(&["-n", "bar", "create", "configmap", "cfg"]);
    assert!(exists.contains("already exists"), "{exists}");
    k.ok(&["-n", "bar", "delete", "configmap", "cfg"]);
    let gone = k.fails(&["-n", "bar", "get", "configmap", "cfg"]);
    assert!(gone.contains("NotFound"), "{gone}");
}

#[test]
fn get_watch_sees_later_changes() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "bar"]);
    k.ok(&["-n", "bar", "create", "configmap", "early"]);
    let out = cluster.dir.path().join("watch.out");
    let mut watch = k.spawn(
        &["-n", "bar", "get", "configmaps", "-w", "-o", "name"],
        &out,
    );
    // The initial list prints first; then the change made after the watch started.
    assert!(eventually(Duration::from_secs(15), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.contains("configmap/early"))
    }));
    k.ok(&[
        "-n",
        "bar",
        "create",
        "configmap",
        "later",
        "--from-literal=b=2",
    ]);
    let seen = eventually(Duration::from_secs(15), || {
        std::fs::read_to_string(&out).is_ok_and(|s| s.contains("configmap/later"))
    });
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        seen,
        "{}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );
}

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: nginx, namespace: default, labels: {app: web}}
spec:
  containers:
  - name: main
    image: nginx:1.27
    ports: [{containerPort: 80}]
"#;

#[test]
fn get_output_shapes() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok_with_input(&["create", "-f", "-"], POD);
    let plain = k.ok(&["get", "pods"]);
    let header: Vec<&str> = plain.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{plain}"
    );
    let row = plain.lines().nth(1).unwrap();
    assert!(
        row.starts_with("nginx") && row.contains("0/1") && row.contains("Pending"),
        "{row}"
    );
    let wide = k.ok(&["get", "pods", "-o", "wide"]);
    let header = wide.lines().next().unwrap();
    for column in ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"] {
        assert!(header.contains(column), "{wide}");
    }
    let all = k.ok(&["get", "pods", "-A"]);
    assert!(
        all.lines().next().unwrap().starts_with("NAMESPACE"),
        "{all}"
    );
    assert!(all.contains("default"), "{all}");
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "pods", "-o", "json"])).unwrap();
    assert_eq!(json["kind"], "List");
    assert_eq!(json["items"][0]["metadata"]["name"], "nginx");
    assert_eq!(json["items"][0]["spec"]["restartPolicy"], "Always");
    let by_field = k.ok(&[
        "get",
        "pods",
        "--field-selector",
        "status.phase=Pending",
        "-o",
        "name",
    ]);
    assert_eq!(by_field, "pod/nginx\n");
    let none = k.run(&["get", "pods", "--field-selector", "status.phase=Running"]);
    assert!(
        none.stderr.contains("No resources found"),
        "{}",
        none.stderr
    );
    let namespaces = k.ok(&["get", "namespaces"]);
    for ns in ["default", "kube-system", "kube-public"] {
        assert!(namespaces.contains(ns), "{namespaces}");
    }
    assert!(namespaces.contains("Active"), "{namespaces}");
}

#[test]
fn describe_pod_shows_its_events() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok_with_input(&["create", "-f", "-"], POD);
    let uid = k.ok(&["get", "pod", "nginx", "-o", "jsonpath={.metadata.uid}"]);
    let event = format!(
        r#"
apiVersion: v1
kind: Event
metadata: {{name: nginx.1, namespace: default}}
involvedObject: {{kind: Pod, name: nginx, namespace: default, uid: "{uid}", apiVersion: v1}}
reason: Scheduled
message: Successfully assigned default/nginx to node-1
type: Normal
source: {{component: default-scheduler}}
count: 1
firstTimestamp: "2026-01-01T00:00:00Z"
lastTimestamp: "2026-01-01T00:00:00Z"
"#
    );
    k.ok_with_input(&["create", "-f", "-"], &event);
    let described = k.ok(&["describe", "pod", "nginx"]);
    assert!(
        described.contains("Name:") && described.contains("nginx"),
        "{described}"
    );
    assert!(described.contains("Events:"), "{described}");
    assert!(
        described.contains("Successfully assigned default/nginx to node-1"),
        "{described}"
    );
}

#[test]
fn scale_cordon_and_delete_by_label() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "bar"]);
    k.ok_with_input(&["apply", "-f", "-"], DEPLOYMENT);
    assert_eq!(
        k.ok(&["-n", "bar", "scale", "deploy", "web", "--replicas=5"])
            .trim(),
        "deployment.apps/web scaled"
    );
    assert_eq!(web_jsonpath(&k, "{.spec.replicas}"), "5");
    // With --current-replicas kubectl reads the scale subresource and PUTs it back.
    k.ok(&[
        "-n",
        "bar",
        "scale",
        "deploy",
        "web",
        "--current-replicas=5",
        "--replicas=1",
    ]);
    assert_eq!(web_jsonpath(&k, "{.spec.replicas}"), "1");
    let wrong = k.fails(&[
        "-n",
        "bar",
        "scale",
        "deploy",
        "web",
        "--current-replicas=7",
        "--replicas=2",
    ]);
    assert!(
        wrong.to_lowercase().contains("expected replicas"),
        "{wrong}"
    );

    let node = r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}"#;
    k.ok_with_input(&["create", "-f", "-"], node);
    assert_eq!(k.ok(&["cordon", "node-1"]).trim(), "node/node-1 cordoned");
    assert_eq!(
        k.ok(&[
            "get",
            "node",
            "node-1",
            "-o",
            "jsonpath={.spec.unschedulable}"
        ]),
        "true"
    );
    assert!(k.ok(&["get", "nodes"]).contains("SchedulingDisabled"));
    assert_eq!(
        k.ok(&["uncordon", "node-1"]).trim(),
        "node/node-1 uncordoned"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "node",
            "node-1",
            "-o",
            "jsonpath={.spec.unschedulable}"
        ]),
        ""
    );

    for name in ["a", "b", "c"] {
        let pod = POD.replace("name: nginx", &format!("name: {name}"));
        let pod = if name == "c" {
            pod.replace("app: web", "app: other")
        } else {
            pod
        };
        k.ok_with_input(&["create", "-f", "-"], &pod);
    }
    let deleted = k.ok(&["delete", "pods", "-l", "app=web"]);
    assert!(
        deleted.contains("pod \"a\" deleted") && deleted.contains("pod \"b\" deleted"),
        "{deleted}"
    );
    assert_eq!(k.ok(&["get", "pods", "-o", "name"]), "pod/c\n");
}

#[test]
fn namespace_deletion_marks_it_terminating() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", "bar"]);
    k.ok(&["-n", "bar", "create", "configmap", "cfg"]);
    k.ok(&["delete", "namespace", "bar", "--wait=false"]);
    assert_eq!(
        k.ok(&["get", "ns", "bar", "-o", "jsonpath={.status.phase}"]),
        "Terminating"
    );
    let refused = k.fails(&["-n", "bar", "create", "configmap", "more"]);
    assert!(refused.contains("being terminated"), "{refused}");
    let system = k.fails(&["delete", "namespace", "kube-system"]);
    assert!(system.contains("may not be deleted"), "{system}");
}

#[test]
fn explain_uses_real_schemas() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let explained = k.ok(&["explain", "pod.spec"]);
    assert!(explained.contains("containers"), "{explained}");
    assert!(explained.contains("FIELDS"), "{explained}");
    let deep = k.ok(&["explain", "deployment.spec.strategy"]);
    assert!(deep.contains("rollingUpdate"), "{deep}");
}

#[test]
fn both_bundled_clients_work() {
    let cluster = TestCluster::start(&[]);
    for client in ["kubectl.1.32", "kubectl.1.33"] {
        let binary = std::path::Path::new("/usr/lib/google-cloud-sdk/bin").join(client);
        if !binary.exists() {
            panic!("{} is missing on this machine", binary.display());
        }
        let run = |args: &[&str]| {
            let out = std::process::Command::new(&binary)
                .arg("--kubeconfig")
                .arg(&cluster.kubeconfig)
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{client} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let ns = format!("ns-{}", client.replace('.', "-").to_lowercase());
        run(&["create", "namespace", &ns]);
        run(&["-n", &ns, "create", "configmap", "c", "--from-literal=k=v"]);
        run(&[
            "-n",
            &ns,
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=k=v",
        ]);
        run(&[
            "-n",
            &ns,
            "create",
            "deployment",
            "d",
            "--image=nginx",
            "--replicas=2",
        ]);
        assert_eq!(
            run(&["-n", &ns, "get", "cm", "c", "-o", "jsonpath={.data.k}"]),
            "v"
        );
        assert_eq!(
            run(&["-n", &ns, "get", "secret", "s", "-o", "jsonpath={.data.k}"]),
            "dg=="
        );
        assert_eq!(
            run(&[
                "-n",
                &ns,
                "get",
                "deploy",
                "d",
                "-o",
                "jsonpath={.spec.replicas}"
            ]),
            "2"
        );
    }
}

/// Objects of kinds skiff does not serve, then one it does.
const UNSERVED_THEN_CONFIGMAP: &str = r#"
apiVersion: toys.example.org/v1alpha1
kind: Gizmo
metadata: {name: once}
spec: {colour: red}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: after-unserved}
data: {a: "1"}
"#;

#[test]
fn apply_reports_unserved_kinds_and_applies_the_rest() {
    // kubectl validates a kind its /openapi/v3 index does not list against /openapi/v2, which
    // it reads only as protobuf; without it the whole apply stopped at the first unserved kind with "failed to
    // download openapi".
    let cluster = TestCluster::start(&[]);
    let default = cluster.kubectl();
    for (client, k) in [
        ("1.32", default.bundled("1.32")),
        ("1.33", default.bundled("1.33")),
    ] {
        let run = k.run_with_input(&["apply", "-f", "-"], UNSERVED_THEN_CONFIGMAP);
        assert!(!run.ok, "{client}: {run:?}");
        assert_eq!(
            run.stdout.trim(),
            "configmap/after-unserved created",
            "{client}: {run:?}"
        );
        for line in [
            r#"resource mapping not found for name: "once" namespace: "" from "STDIN": no matches for kind "Gizmo" in version "toys.example.org/v1alpha1""#,
            r#"resource mapping not found for name: "w" namespace: "" from "STDIN": no matches for kind "Widget" in version "example.com/v1""#,
            "ensure CRDs are installed first",
        ] {
            assert!(
                run.stderr.contains(line),
                "{client}: {line}\n{}",
                run.stderr
            );
        }
        assert!(!run.stderr.contains("openapi"), "{client}: {}", run.stderr);
        assert_eq!(
            k.ok(&[
                "get",
                "configmap",
                "after-unserved",
                "-o",
                "jsonpath={.data.a}"
            ]),
            "1"
        );

        // Strict validation of a served kind is still the server's, and still refuses.
        let strict = k.run_with_input(
            &["apply", "--validate=strict", "-f", "-"],
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: strict}\nbogus: field\n",
        );
        assert!(!strict.ok, "{client}: {strict:?}");
        assert!(
            strict
                .stderr
                .contains(r#"strict decoding error: unknown field "bogus""#),
            "{client}: {}",
            strict.stderr
        );
        assert!(!k.run(&["get", "configmap", "strict"]).ok);
        k.ok(&["delete", "configmap", "after-unserved"]);
    }
}

#[test]
fn drain_evicts_pods_or_deletes_them_with_protobuf_delete_options() {
    // Drain evicts through pods/eviction (its typed client sends the Eviction as protobuf);
    // with --disable-eviction it DELETEs each pod, sending the DeleteOptions as protobuf.
    let cluster = TestCluster::start(&[]);
    let default = cluster.kubectl();
    for (client, k) in [
        ("1.32", default.bundled("1.32")),
        ("1.33", default.bundled("1.33")),
    ] {
        for (how, extra, said) in [
            ("eviction", None, "pod/victim evicted"),
            ("delete", Some("--disable-eviction"), "pod/victim deleted"),
        ] {
            k.ok_with_input(
                &["apply", "-f", "-"],
                "apiVersion: v1\nkind: Node\nmetadata: {name: drained}\n---\n\
                 apiVersion: v1\nkind: Pod\nmetadata: {name: victim, namespace: default}\n\
                 spec: {nodeName: drained, containers: [{name: c, image: busybox}]}\n",
            );
            let mut args = vec![
                "drain",
                "drained",
                "--force",
                "--grace-period=0",
                "--timeout=60s",
            ];
            args.extend(extra);
            let drained = k.ok(&args);
            assert!(
                drained.contains(said) && drained.contains("node/drained drained"),
                "{client} {how}: {drained}"
            );
            assert!(!k.run(&["get", "pod", "victim"]).ok, "{client} {how}");
            k.ok(&["uncordon", "drained"]);
        }
    }
}

/// Fields of the Deployment `bar/web`, as `kubectl get -o jsonpath=` prints them.
fn web_jsonpath(k: &Kubectl, path: &str) -> String {
    k.ok(&[
        "-n",
        "bar",
        "get",
        "deploy",
        "web",
        "-o",
        &format!("jsonpath={path}"),
    ])
}

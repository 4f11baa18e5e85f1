//! Persistent storage through kubectl against `skiff server`: a StatefulSet's volumeClaimTemplate
//! gives each pod a claim the built-in local-path provisioner (the default class) fills; data
//! outlives its pod; scaling down keeps the claims; a claim under a running pod stays
//! Terminating until the pod goes, and its volume is then reclaimed (directory and object); a
//! claim of a provisioner nobody runs stays Pending with an event; growing a claim of a class
//! without volume expansion is refused.
//!
//! The pods are `sh -c` loops run by the kubelet as host processes; their `/data` mount is a link
//! in the container's root, so they write `data/…` relative to their working directory.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use skiff_tests::{Kubectl, TestCluster, eventually};

/// The server; dropped, it stops and kills the pod processes its kubelet left.
struct Fixture {
    cluster: TestCluster,
    root: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.cluster.stop();
        skiff_tests::kill_pod_processes(&self.root);
    }
}

fn wait_for(k: &Kubectl, what: &str, seconds: u64, check: impl FnMut() -> bool) {
    if !eventually(Duration::from_secs(seconds), check) {
        panic!(
            "{what}: not within {seconds} s\n{}\n{}\n{}",
            k.run(&["get", "pods,pvc", "-A", "-o", "wide"]).stdout,
            k.run(&["get", "pv", "-o", "wide"]).stdout,
            k.run(&["get", "events", "-A"]).stdout,
        );
    }
}

const SET: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: storage}
spec:
  replicas: 3
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c", "if [ -f data/marker ]; then echo found $(cat data/marker); else echo fresh; echo written > data/marker; fi; while true; do sleep 1; done"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#;

/// The claims of `namespace`: name, phase, class, volume.
fn claims(k: &Kubectl, namespace: &str) -> Vec<[String; 4]> {
    let run = k.run(&["-n", namespace, "get", "pvc", "-o", "json"]);
    let list: Value = serde_json::from_str(&run.stdout).unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let phase = if c["metadata"]["deletionTimestamp"].is_string() {
                "Terminating".to_string()
            } else {
                text(&c["status"]["phase"])
            };
            [
                text(&c["metadata"]["name"]),
                phase,
                text(&c["spec"]["storageClassName"]),
                text(&c["spec"]["volumeName"]),
            ]
        })
        .collect()
}

fn ready_pods(k: &Kubectl, namespace: &str) -> Vec<(String, String)> {
    let run = k.run(&["-n", namespace, "get", "pods", "-o", "json"]);
    let list: Value = serde_json::from_str(&run.stdout).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_null()
                && p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .map(|p| {
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn statefulset_claims_persist_are_protected_reclaimed_and_refused_growth() {
    let cluster = TestCluster::start_server(&[]);
    let root = cluster.kubelet_root();
    let storage = cluster.data_dir().join("storage");
    let fixture = Fixture { cluster, root };
    let k = fixture.cluster.kubectl();

    // The default class, as kubectl shows it.
    wait_for(&k, "the local-path class", 60, || {
        k.run(&["get", "sc", "local-path"]).ok
    });
    let sc = k.ok(&["get", "sc", "--no-headers"]);
    assert_eq!(
        sc.split_whitespace().take(6).collect::<Vec<_>>(),
        [
            "local-path",
            "(default)",
            "skiff.io/local-path",
            "Delete",
            "WaitForFirstConsumer",
            "false"
        ],
        "{sc}"
    );

    k.ok(&["create", "namespace", "storage"]);
    k.ok_with_input(&["apply", "-f", "-"], SET);
    wait_for(&k, "three ready pods with bound claims", 180, || {
        ready_pods(&k, "storage").len() == 3
            && claims(&k, "storage")
                .iter()
                .filter(|c| c[1] == "Bound")
                .count()
                == 3
    });
    let mut all = claims(&k, "storage");
    all.sort();
    let names: Vec<&str> = all.iter().map(|c| c[0].as_str()).collect();
    assert_eq!(names, ["data-web-0", "data-web-1", "data-web-2"]);
    assert!(all.iter().all(|c| c[2] == "local-path"), "{all:?}");
    let header = k.ok(&["-n", "storage", "get", "pvc"]);
    assert!(
        header.starts_with("NAME         STATUS   VOLUME")
            && header
                .contains("CAPACITY   ACCESS MODES   STORAGECLASS   VOLUMEATTRIBUTESCLASS   AGE"),
        "{header}"
    );
    let row = k.ok(&["-n", "storage", "get", "pvc", "data-web-1", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "Bound", "{row}");
    assert_eq!(&cells[3..6], ["1Gi", "RWO", "local-path"], "{row}");
    let pv_header = k.ok(&["get", "pv"]);
    assert!(
        pv_header.starts_with("NAME")
            && pv_header.contains("CAPACITY   ACCESS MODES   RECLAIM POLICY   STATUS   CLAIM"),
        "{pv_header}"
    );
    let web1_volume = all[1][3].clone();
    let dir = storage.join(format!("{web1_volume}_storage_data-web-1"));
    assert!(
        dir.join("marker").is_file(),
        "{} has the marker",
        dir.display()
    );

    // web-1's data survives its pod.
    let logs = k.ok(&["-n", "storage", "logs", "web-1"]);
    assert!(logs.contains("fresh"), "{logs}");
    let old_uid = ready_pods(&k, "storage")
        .into_iter()
        .find(|(n, _)| n == "web-1")
        .map(|(_, u)| u)
        .unwrap();
    k.ok(&["-n", "storage", "delete", "pod", "web-1"]);
    wait_for(&k, "a new web-1", 120, || {
        ready_pods(&k, "storage")
            .iter()
            .any(|(n, u)| n == "web-1" && *u != old_uid)
    });
    let logs = k.ok(&["-n", "storage", "logs", "web-1"]);
    assert!(logs.contains("found written"), "{logs}");

    // Scaling down keeps the claims (whenScaled: Retain by default).
    k.ok(&["-n", "storage", "scale", "statefulset/web", "--replicas=1"]);
    wait_for(&k, "one pod left", 120, || {
        let pods = ready_pods(&k, "storage");
        pods.len() == 1
            && k.run(&["-n", "storage", "get", "pod", "web-1"])
                .stdout
                .is_empty()
    });
    assert_eq!(claims(&k, "storage").len(), 3);

    // A claim under a running pod stays Terminating until the pod goes.
    k.ok(&[
        "-n",
        "storage",
        "delete",
        "pvc",
        "data-web-0",
        "--wait=false",
    ]);
    std::thread::sleep(Duration::from_secs(3));
    let held = claims(&k, "storage");
    assert!(
        held.iter()
            .any(|c| c[0] == "data-web-0" && c[1] == "Terminating"),
        "{held:?}"
    );
    let web0_volume = held.iter().find(|c| c[0] == "data-web-0").unwrap()[3].clone();
    let web0_dir = storage.join(format!("{web0_volume}_storage_data-web-0"));
    assert!(web0_dir.is_dir());
    k.ok(&["-n", "storage", "scale", "statefulset/web", "--replicas=0"]);
    wait_for(&k, "the claim gone once its pod is", 120, || {
        !claims(&k, "storage").iter().any(|c| c[0] == "data-web-0")
    });
    // Its volume was provisioned with reclaim policy Delete: the data and the object go.
    wait_for(&k, "the released volume reclaimed", 120, || {
        !web0_dir.exists() && !k.run(&["get", "pv", &web0_volume]).ok
    });

    // A claim of a class whose provisioner nobody runs stays Pending, saying why.
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: elsewhere}
provisioner: example.com/nobody
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: orphan, namespace: storage}
spec:
  storageClassName: elsewhere
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"#,
    );
    wait_for(&k, "an ExternalProvisioning event", 60, || {
        k.run(&[
            "-n",
            "storage",
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=orphan",
        ])
        .stdout
        .contains("ExternalProvisioning")
    });
    std::thread::sleep(Duration::from_secs(2));
    let orphan = claims(&k, "storage");
    assert!(
        orphan.iter().any(|c| c[0] == "orphan" && c[1] == "Pending"),
        "{orphan:?}"
    );

    // local-path does not allow expansion: growing a bound claim is refused.
    let refused = k.fails(&[
        "-n",
        "storage",
        "patch",
        "pvc",
        "data-web-1",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
    ]);
    assert!(
        refused.contains("is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"),
        "{refused}"
    );

    k.ok(&["delete", "namespace", "storage", "--timeout=120s"]);
}

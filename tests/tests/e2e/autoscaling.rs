//! HorizontalPodAutoscalers against `skiff server` with nothing installed: `kubectl autoscale`
//! makes one for a Deployment whose pods spin while a flag file exists; it scales up on their CPU
//! and back down once they idle and its (shortened) stabilization window has passed. The same
//! load scales a custom resource through its scale subresource. The v1 view of an autoscaler,
//! events, a target that does not exist and an invalid autoscaler are checked on the way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use skiff_tests::{TestCluster, eventually};

const PATIENCE: Duration = Duration::from_secs(120);

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

/// A Deployment whose one container spins while `flag` exists and sleeps otherwise, asking for
/// a tenth of a core.
fn deployment(flag: &Path) -> String {
    let flag = flag.display();
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: spin
        image: busybox
        command: ["sh", "-c", "while :; do if [ -e {flag} ]; then :; else sleep 1; fi; done"]
        resources: {{requests: {{cpu: 100m}}}}
"#
    )
}

const POOLS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pools.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: pools, singular: pool, kind: Pool}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}}}
          status: {type: object, properties: {replicas: {type: integer}, selector: {type: string}}}
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
"#;

/// `jsonpath` of `object`.
fn get(k: &skiff_tests::Kubectl, object: &str, path: &str) -> String {
    k.run(&["get", object, "-o", &format!("jsonpath={path}")])
        .stdout
}

#[test]
fn an_autoscaler_follows_cpu_up_and_back_down() {
    let cluster = TestCluster::start_server(&[
        "--housekeeping-interval",
        "1s",
        "--horizontal-pod-autoscaler-sync-period",
        "1s",
    ]);
    let root = cluster.kubelet_root();
    let cluster = Cluster { cluster, root };
    let k = cluster.cluster.kubectl();
    let flag = cluster.cluster.data_dir().join("busy");

    k.ok_with_input(&["apply", "-f", "-"], &deployment(&flag));
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    k.ok(&[
        "autoscale",
        "deployment",
        "web",
        "--min=1",
        "--max=3",
        "--cpu-percent=50",
    ]);
    // Down again 3 s after the load goes, rather than kube-controller-manager's 5 minutes.
    k.ok(&[
        "patch",
        "hpa",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":3}}}}"#,
    ]);
    let v2 = k.ok(&[
        "get",
        "horizontalpodautoscalers.v2.autoscaling",
        "web",
        "-o",
        "json",
    ]);
    let v2: serde_json::Value = serde_json::from_str(&v2).unwrap();
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 50,
        "{v2}"
    );
    // The defaults filled in the rest of the behavior.
    assert_eq!(
        v2["spec"]["behavior"]["scaleUp"]["policies"][0]["type"],
        "Pods"
    );

    // Idle: measured, within bounds, nothing to do.
    let mut last = String::new();
    let measured = eventually(PATIENCE, || {
        last = k.run(&["get", "hpa", "web"]).stdout;
        last.contains("cpu: ") && !last.contains("<unknown>")
    });
    assert!(measured, "the autoscaler never measured the pods: {last}");
    assert_eq!(get(&k, "deployment/web", "{.spec.replicas}"), "1");

    // Busy: a spinning shell is far above 50% of a tenth of a core.
    std::fs::write(&flag, "").unwrap();
    let up = eventually(PATIENCE, || {
        get(&k, "hpa/web", "{.status.currentReplicas}") == "3"
    });
    let describe = k.run(&["describe", "hpa", "web"]).stdout;
    assert!(up, "never scaled to 3: {describe}");
    assert_eq!(get(&k, "deployment/web", "{.spec.replicas}"), "3");
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=SuccessfulRescale",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("reason: cpu resource utilization (percentage of request) above target"),
        "{events}"
    );
    let conditions = get(&k, "hpa/web", "{.status.conditions[*].type}");
    assert!(
        conditions.contains("AbleToScale") && conditions.contains("ScalingActive"),
        "{conditions}"
    );

    // The same pods drive a custom resource's scale.
    k.ok_with_input(&["apply", "-f", "-"], POOLS);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/pools.example.com",
        "--timeout=30s",
    ]);
    k.ok_with_input(
        &["apply", "-f", "-"],
        "{\"apiVersion\": \"example.com/v1\", \"kind\": \"Pool\", \"metadata\": {\"name\": \"pool\"}, \"spec\": {\"replicas\": 1}}",
    );
    k.ok(&[
        "patch",
        "pool",
        "pool",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":1,"selector":"app=web"}}"#,
    ]);
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "pool"},
            "spec": {"scaleTargetRef": {"apiVersion": "example.com/v1", "kind": "Pool", "name": "pool"},
                     "minReplicas": 1, "maxReplicas": 2,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                  "target": {"type": "Utilization", "averageUtilization": 50}}}]}}"#,
    );
    let pool_up = eventually(PATIENCE, || get(&k, "pool/pool", "{.spec.replicas}") == "2");
    assert!(
        pool_up,
        "the pool was never scaled: {}",
        k.run(&["describe", "hpa", "pool"]).stdout
    );

    // The v1 view: one CPU target, the rest in annotations.
    let v1 = k.ok(&[
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "web",
        "-o",
        "json",
    ]);
    let v1: serde_json::Value = serde_json::from_str(&v1).unwrap();
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50, "{v1}");
    assert!(
        v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/behavior"].is_string(),
        "{v1}"
    );

    // Idle again: back to one replica once the window has passed.
    std::fs::remove_file(&flag).unwrap();
    let down = eventually(PATIENCE, || {
        get(&k, "deployment/web", "{.spec.replicas}") == "1"
    });
    assert!(
        down,
        "never scaled back down: {}",
        k.run(&["describe", "hpa", "web"]).stdout
    );
    let events = k.ok(&[
        "get",
        "events",
        "--field-selector",
        "reason=SuccessfulRescale,involvedObject.name=web",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(events.contains("All metrics below target"), "{events}");

    // A target that does not exist: the autoscaler says so and scales nothing.
    // (kubectl autoscale refuses a target it cannot find, so the autoscaler is applied.)
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "ghost"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost"},
                     "maxReplicas": 2}}"#,
    );
    let said = eventually(PATIENCE, || {
        get(
            &k,
            "hpa/ghost",
            "{.status.conditions[?(@.type==\"AbleToScale\")].reason}",
        ) == "FailedGetScale"
    });
    assert!(said, "{}", k.run(&["describe", "hpa", "ghost"]).stdout);

    // An invalid autoscaler is refused with the field named.
    let err = k
        .run_with_input(
            &["apply", "-f", "-"],
            r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "bad"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                         "minReplicas": 3, "maxReplicas": 2}}"#,
        )
        .stderr;
    assert!(
        err.contains(
            "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"
        ),
        "{err}"
    );
}

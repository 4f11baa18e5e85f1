//! HorizontalPodAutoscalers against `skiff server` with nothing installed: `kubectl autoscale`
//! makes one for a Deployment whose pods spin while a flag file exists; it scales up on their CPU
//! and back down once they idle and its (shortened) stabilization window has passed. The same
//! load scales a custom resource through its scale subresource. The v1 view of an autoscaler,
//! events, a target that does not exist and an invalid autoscaler are checked on the way.
//!
//! A second test puts a metrics adapter of its own (an aggregated server started by the test)
//! behind `custom.metrics.k8s.io` and `external.metrics.k8s.io`: an autoscaler with a `Pods`, an
//! `Object` and an `External` metric reads all three through skiff, scales on the external one,
//! and stops scaling, saying why, when the adapter goes away.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use skiff_tests::{TestCluster, eventually};

use crate::aggregated::{self, Backend, Seen};

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

/// The messages of the `SuccessfulRescale` events of autoscaler `name`.
fn rescales(k: &skiff_tests::Kubectl, name: &str) -> String {
    k.ok(&[
        "get",
        "events",
        "--field-selector",
        &format!("reason=SuccessfulRescale,involvedObject.name={name}"),
        "-o",
        "jsonpath={.items[*].message}",
    ])
}

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
    let events = rescales(&k, "web");
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
    let events = rescales(&k, "web");
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

/// What the test's metrics adapter reports, in thousandths.
#[derive(Default)]
struct Reported {
    /// The pods with a `qps` value, each at `qps`.
    pods: Vec<String>,
    qps: i64,
    /// Service `web`'s `requests`.
    requests: i64,
    /// `queue_depth{queue=jobs}`, reported as two series of half each.
    queue: i64,
}

/// The adapter's answer to `seen`: discovery of its two group-versions and its three metrics.
fn adapter_answer(reported: &Reported, seen: &Seen) -> Value {
    let value = |milli: i64| format!("{milli}m");
    let at = "2026-12-06T12:00:00Z";
    match seen.path.split('?').next().unwrap_or_default() {
        "/apis/custom.metrics.k8s.io/v1beta2" => json!({
            "kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": "custom.metrics.k8s.io/v1beta2",
            "resources": [
                {"name": "pods/qps", "namespaced": true, "kind": "MetricValueList", "verbs": ["get"]},
                {"name": "services/requests", "namespaced": true, "kind": "MetricValueList",
                 "verbs": ["get"]}]}),
        "/apis/external.metrics.k8s.io/v1beta1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": "external.metrics.k8s.io/v1beta1",
            "resources": [{"name": "queue_depth", "namespaced": true,
                           "kind": "ExternalMetricValueList", "verbs": ["get"]}]}),
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/qps" => json!({
            "kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2",
            "metadata": {},
            "items": reported.pods.iter().map(|name| json!({
                "describedObject": {"kind": "Pod", "namespace": "default", "name": name,
                                    "apiVersion": "/v1"},
                "metric": {"name": "qps"}, "timestamp": at, "windowSeconds": 60,
                "value": value(reported.qps)})).collect::<Vec<_>>()}),
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/services/web/requests" => json!({
            "kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2",
            "metadata": {},
            "items": [{"describedObject": {"kind": "Service", "namespace": "default",
                                           "name": "web", "apiVersion": "/v1"},
                       "metric": {"name": "requests"}, "timestamp": at,
                       "value": value(reported.requests)}]}),
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth" => json!({
            "kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": (0..2).map(|shard| json!({
                "metricName": "queue_depth",
                "metricLabels": {"queue": "jobs", "shard": shard.to_string()},
                "timestamp": at, "value": value(reported.queue / 2)})).collect::<Vec<_>>()}),
        other => json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": format!("no {other} here"), "code": 404}),
    }
}

const SLEEPERS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: sleep, image: busybox, command: ["sleep", "3600"]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
"#;

const CUSTOM_AUTOSCALER: &str = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 4
  metrics:
  - type: Pods
    pods:
      metric: {name: qps}
      target: {type: AverageValue, averageValue: "10"}
  - type: Object
    object:
      describedObject: {apiVersion: v1, kind: Service, name: web}
      metric: {name: requests}
      target: {type: Value, value: "100"}
  - type: External
    external:
      metric: {name: queue_depth, selector: {matchLabels: {queue: jobs}}}
      target: {type: AverageValue, averageValue: "10"}
"#;

#[test]
fn an_autoscaler_follows_custom_and_external_metrics_from_an_adapter() {
    let cluster = TestCluster::start_server(&["--horizontal-pod-autoscaler-sync-period", "1s"]);
    let root = cluster.kubelet_root();
    let cluster = Cluster { cluster, root };
    let k = cluster.cluster.kubectl();
    k.ok_with_input(&["apply", "-f", "-"], SLEEPERS);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    let pod = get(&k, "pods", "{.items[0].metadata.name}");

    // The adapter: everything below target to begin with.
    let reported = Arc::new(Mutex::new(Reported {
        pods: vec![pod],
        qps: 5_000,
        requests: 50_000,
        queue: 5_000,
    }));
    let answers = reported.clone();
    let mut adapter = Backend::start(
        &aggregated::front_proxy_ca(&k),
        "metrics-adapter.default.svc",
        move |seen| adapter_answer(&answers.lock().unwrap(), seen),
    );
    aggregated::register(
        &k,
        &adapter,
        "metrics-adapter",
        &[
            ("custom.metrics.k8s.io", "v1beta2"),
            ("external.metrics.k8s.io", "v1beta1"),
        ],
    );
    k.ok_with_input(&["apply", "-f", "-"], CUSTOM_AUTOSCALER);

    // All three read through skiff, each where the adapter serves it.
    let mut current = Value::Null;
    let measured = eventually(PATIENCE, || {
        let hpa = k.run(&[
            "get",
            "hpa",
            "web",
            "-o",
            "jsonpath={.status.currentMetrics}",
        ]);
        current = serde_json::from_str(&hpa.stdout).unwrap_or(Value::Null);
        current[2]["external"]["current"]["averageValue"] == "5"
    });
    assert!(measured, "never measured: {current}");
    assert_eq!(
        current[0]["pods"]["current"]["averageValue"], "5",
        "{current}"
    );
    assert_eq!(current[1]["object"]["current"]["value"], "50", "{current}");
    assert_eq!(
        current[1]["object"]["describedObject"]["name"], "web",
        "{current}"
    );
    let paths: Vec<String> = adapter
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.path.clone())
        .collect();
    for wanted in [
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/qps?labelSelector=app%3Dweb",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/services/web/requests",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth?labelSelector=queue%3Djobs",
    ] {
        assert!(
            paths.iter().any(|p| p == wanted),
            "never asked {wanted}: {paths:?}"
        );
    }
    assert_eq!(get(&k, "deployment/web", "{.spec.replicas}"), "1");
    let active = get(
        &k,
        "hpa/web",
        "{.status.conditions[?(@.type==\"ScalingActive\")].message}",
    );
    assert!(
        active.contains("successfully calculate a replica count from pods metric qps"),
        "{active}"
    );

    // The queue fills: 30 jobs at 10 a replica want three.
    reported.lock().unwrap().queue = 30_000;
    let up = eventually(PATIENCE, || {
        get(&k, "deployment/web", "{.spec.replicas}") == "3"
    });
    assert!(
        up,
        "never scaled up: {}",
        k.run(&["describe", "hpa", "web"]).stdout
    );
    let events = rescales(&k, "web");
    assert!(
        events
            .contains("New size: 3; reason: external metric queue_depth(queue=jobs) above target"),
        "{events}"
    );

    // The adapter goes away: the autoscaler says why it cannot scale and leaves the count.
    adapter.stop();
    let mut message = String::new();
    let said = eventually(PATIENCE, || {
        message = get(
            &k,
            "hpa/web",
            "{.status.conditions[?(@.type==\"ScalingActive\")].message}",
        );
        message.contains("unable to get metric qps")
    });
    assert!(said, "{message}");
    assert_eq!(
        get(
            &k,
            "hpa/web",
            "{.status.conditions[?(@.type==\"ScalingActive\")].reason}"
        ),
        "FailedGetPodsMetric"
    );
    assert_eq!(get(&k, "deployment/web", "{.spec.replicas}"), "3");
}

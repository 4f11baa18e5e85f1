//! CustomResourceDefinitions end to end with kubectl: a definition becomes Established and
//! served (discovery, OpenAPI, tables, patches, scale, watch), its custom resources are pruned,
//! defaulted and validated against the schema and its CEL rules, and deleting the definition
//! takes its custom resources and its discovery entry with it.

use std::time::Duration;

use serde_json::Value;
use skiff_tests::{TestCluster, eventually, skiff_ok};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Size, type: string, jsonPath: .spec.size}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - rule: self.replicas <= self.maxReplicas
              message: replicas must not exceed maxReplicas
            properties:
              size: {type: string, enum: [small, large], description: How big the widget is.}
              replicas: {type: integer, minimum: 0, default: 1}
              maxReplicas: {type: integer, default: 5}
          status:
            type: object
            properties:
              replicas: {type: integer}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

const WIDGET: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {size: small}
"#;

#[test]
fn a_definition_is_served_validated_and_removed_with_its_resources() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok_with_input(&["apply", "-f", "-"], CRD);
    let out = k.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=20s",
        "crd/widgets.example.com",
    ]);
    assert!(out.contains("condition met"), "{out}");
    let crd = k.ok(&[
        "get",
        "crd",
        "widgets.example.com",
        "-o",
        "jsonpath={.status.acceptedNames.kind} {.metadata.finalizers[0]}",
    ]);
    assert_eq!(crd, "Widget customresourcecleanup.apiextensions.k8s.io");

    // Discovery: the new kind and its short name, within a second of being Established.
    assert!(eventually(Duration::from_secs(5), || {
        k.run(&["api-resources", "--api-group=example.com"])
            .stdout
            .contains("widgets")
    }));
    let resources = k.ok(&["api-resources", "--api-group=example.com"]);
    assert!(
        resources.contains("wd")
            && resources.contains("example.com/v1")
            && resources.contains("Widget"),
        "{resources}"
    );

    // Create: unknown fields are pruned (and refused under strict validation), defaults filled.
    k.ok_with_input(&["apply", "-f", "-"], WIDGET);
    assert_eq!(
        k.ok(&[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.spec.replicas}/{.spec.maxReplicas}"
        ]),
        "1/5"
    );
    let strict = k.run_with_input(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: default}\nspec: {size: small, colour: red}\n",
    );
    assert!(
        !strict.ok,
        "an unknown field under strict validation must fail"
    );
    assert!(
        strict.stderr.contains("unknown field \"spec.colour\""),
        "{}",
        strict.stderr
    );

    // Tables from the printer columns.
    let table = k.ok(&["get", "widgets"]);
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "SIZE", "REPLICAS", "AGE"] {
        assert!(header.contains(column), "{table}");
    }
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("w1") && l.contains("small") && l.contains(" 1 ")),
        "{table}"
    );
    assert!(k.ok(&["get", "wd"]).contains("w1"));

    // Invalid objects: every cause, with its field path, and nothing written.
    let bad = k.run_with_input(
        &["apply", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad, namespace: default}\nspec: {size: huge, replicas: 9}\n",
    );
    assert!(!bad.ok);
    assert!(
        bad.stderr.contains(
            r#"spec.size: Unsupported value: "huge": supported values: "small", "large""#
        ),
        "{}",
        bad.stderr
    );
    assert!(
        bad.stderr.contains("replicas must not exceed maxReplicas"),
        "{}",
        bad.stderr
    );
    assert!(
        k.run(&["get", "widget", "bad"])
            .stderr
            .contains("not found")
    );

    // Patches: merge and server-side apply; a strategic merge patch is refused, as for any
    // custom resource.
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":"large"}}"#,
    ]);
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"]),
        "large"
    );
    k.ok_with_input(
        &["apply", "--server-side", "--force-conflicts", "--field-manager=e2e", "-f", "-"],
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {size: large, maxReplicas: 8}\n",
    );
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.maxReplicas}"]),
        "8"
    );
    let smp = k.run(&[
        "patch",
        "widget",
        "w1",
        "--type=strategic",
        "-p",
        r#"{"spec":{"size":"small"}}"#,
    ]);
    assert!(!smp.ok, "{}", smp.stdout);

    // Scale through the scale subresource; status through the status subresource only.
    k.ok(&["scale", "widget", "w1", "--replicas=3"]);
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.replicas}"]),
        "3"
    );
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":7}}"#,
    ]);
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.status.replicas}"]),
        ""
    );
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":7}}"#,
    ]);
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.status.replicas}"]),
        "7"
    );

    // The second served version reads the same objects.
    assert_eq!(
        k.ok(&[
            "get",
            "widgets.v1beta1.example.com",
            "w1",
            "-o",
            "jsonpath={.apiVersion} {.spec.size}"
        ]),
        "example.com/v1beta1 large"
    );

    // Time travel through the server knows its custom kinds: the history of w1, and the table of
    // widgets as of its first version, in the definition's printer columns.
    let kubeconfig = cluster.kubeconfig.to_str().unwrap();
    let history: Value = serde_json::from_str(&skiff_ok(&[
        "history",
        "widget/w1",
        "-n",
        "default",
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig,
    ]))
    .unwrap();
    let versions = history["versions"].as_array().unwrap();
    assert!(versions.len() >= 4, "{history}");
    assert_eq!(versions[0]["object"]["spec"]["size"], "small", "{history}");
    assert_eq!(versions.last().unwrap()["object"]["status"]["replicas"], 7);
    let first = versions[0]["revision"].as_u64().unwrap().to_string();
    let then = skiff_ok(&[
        "get",
        "widgets",
        "-n",
        "default",
        "--at",
        &first,
        "--kubeconfig",
        kubeconfig,
    ]);
    let header = then.lines().next().unwrap_or_default();
    assert!(
        header.contains("SIZE") && header.contains("REPLICAS"),
        "{then}"
    );
    assert!(
        then.lines()
            .any(|l| l.starts_with("w1") && l.contains("small") && l.contains(" 1 ")),
        "{then}"
    );

    // explain walks the published schema.
    let explain = k.ok(&["explain", "widgets.spec.size"]);
    assert!(explain.contains("How big the widget is."), "{explain}");

    // Deleting the definition deletes its custom resources, then stops serving it.
    k.ok(&["delete", "crd", "widgets.example.com", "--timeout=30s"]);
    assert!(eventually(Duration::from_secs(10), || {
        !k.run(&["api-resources", "--api-group=example.com"])
            .stdout
            .contains("widgets")
    }));
    let gone = k.run(&["get", "widgets"]);
    assert!(
        !gone.ok
            && gone
                .stderr
                .contains("the server doesn't have a resource type"),
        "{}",
        gone.stderr
    );
    // Served again from scratch, the old custom resources do not come back.
    k.ok_with_input(&["apply", "-f", "-"], CRD);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=20s",
        "crd/widgets.example.com",
    ]);
    assert!(eventually(Duration::from_secs(5), || k
        .run(&["get", "widgets"])
        .ok));
    assert!(k.run(&["get", "widget", "w1"]).stderr.contains("not found"));
}

#[test]
fn definitions_survive_a_restart_and_bad_definitions_are_refused() {
    let mut cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok_with_input(&["apply", "-f", "-"], CRD);
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=20s",
        "crd/widgets.example.com",
    ]);
    k.ok_with_input(&["apply", "-f", "-"], WIDGET);

    // A definition whose schema is not structural is refused with the reason.
    let bad = k.run_with_input(
        &["apply", "-f", "-"],
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: gadgets.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: gadgets, kind: Gadget}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec: {properties: {a: {type: string}}}\n",
    );
    assert!(!bad.ok);
    assert!(
        bad.stderr.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value"
        ),
        "{}",
        bad.stderr
    );

    cluster.restart();
    let k = cluster.kubectl();
    assert!(eventually(Duration::from_secs(10), || k
        .run(&["get", "widget", "w1"])
        .ok));
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"]),
        "small"
    );
}

//! The audit log end to end: `skiff apiserver` with a policy and a log path records a denied
//! request, a write with its user and body, Metadata-only events without bodies, a failed
//! authentication and a watch's stages, each under the id the client got in `Audit-Id`.

use serde_json::Value;
use skiff_tests::TestCluster;

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["configmaps"]
  - level: Metadata
"#;

/// `skiff apiserver` auditing under [`POLICY`] into a log (in a directory of its own) under `dir`;
/// the log's path.
fn audited(dir: &std::path::Path) -> (TestCluster, std::path::PathBuf) {
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.join("logs").join("audit.log");
    let cluster = TestCluster::start(&[
        "--audit-policy-file",
        policy.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
    ]);
    (cluster, log)
}

fn events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn find<'a>(events: &'a [Value], what: &str, pick: impl Fn(&Value) -> bool) -> &'a Value {
    events.iter().find(|e| pick(e)).unwrap_or_else(|| {
        panic!(
            "no event for {what} in {}",
            serde_json::to_string_pretty(events).unwrap()
        )
    })
}

#[tokio::test]
async fn the_audit_log_records_who_did_what_as_the_policy_says() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, log) = audited(dir.path());
    let k = cluster.kubectl();

    // A write by the admin, a Secret (Metadata only) and a restricted user's denied list.
    k.ok(&[
        "create",
        "configmap",
        "audited",
        "--from-literal=colour=teal",
    ]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "hidden",
        "--from-literal=password=hunter2",
    ]);
    k.ok(&["create", "serviceaccount", "robot"]);
    let token = k.ok(&["create", "token", "robot"]).trim().to_string();
    let denied = k.fails(&["get", "secrets", "--token", &token]);
    assert!(denied.contains("forbidden"), "{denied}");

    // The id a client gets back names its event; so does a 401's.
    let http = cluster.http();
    let get = http
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps/audited",
            cluster.server
        ))
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status().as_u16(), 200);
    let get_id = get.headers()["audit-id"].to_str().unwrap().to_string();
    let unauthorized = http
        .get(format!("{}/api/v1/namespaces/default/pods", cluster.server))
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status().as_u16(), 401);
    let unauthorized_id = unauthorized.headers()["audit-id"]
        .to_str()
        .unwrap()
        .to_string();
    let watch = http
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1",
            cluster.server
        ))
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap();
    let watch_id = watch.headers()["audit-id"].to_str().unwrap().to_string();
    watch.bytes().await.unwrap();

    // Stopping flushes the log; everything above is in it.
    cluster.stop();
    let events = events(&log);
    assert!(
        events
            .iter()
            .all(|e| e["kind"] == "Event" && e["apiVersion"] == "audit.k8s.io/v1")
    );
    assert!(
        events.iter().all(|e| e["stage"] != "RequestReceived"),
        "omitStages: RequestReceived"
    );
    assert!(
        events.iter().all(|e| e["requestURI"] != "/readyz"),
        "level None writes nothing"
    );

    let write = find(&events, "the configmap create", |e| {
        e["verb"] == "create" && e["objectRef"]["resource"] == "configmaps"
    });
    assert_eq!(write["level"], "RequestResponse");
    assert_eq!(write["stage"], "ResponseComplete");
    assert_eq!(write["user"]["username"], "system:admin");
    assert!(
        write["user"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g == "system:masters"),
        "{write}"
    );
    assert_eq!(write["objectRef"]["namespace"], "default");
    assert_eq!(write["objectRef"]["apiVersion"], "v1");
    assert_eq!(write["responseStatus"]["code"], 201);
    assert_eq!(write["requestObject"]["data"]["colour"], "teal");
    assert_eq!(write["responseObject"]["metadata"]["name"], "audited");
    assert_eq!(
        write["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert!(write["sourceIPs"][0] == "127.0.0.1", "{write}");
    assert!(
        write["userAgent"].as_str().unwrap().starts_with("kubectl"),
        "{write}"
    );
    let micro = write["stageTimestamp"].as_str().unwrap();
    assert_eq!(micro.len(), "2026-12-05T04:10:00.000000Z".len(), "{micro}");

    let secret = find(&events, "the secret create", |e| {
        e["verb"] == "create" && e["objectRef"]["resource"] == "secrets"
    });
    assert_eq!(secret["level"], "Metadata");
    assert!(secret.get("requestObject").is_none() && secret.get("responseObject").is_none());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("hunter2") && !text.contains("aHVudGVyMg"),
        "a Secret's data in the log"
    );

    let forbidden = find(&events, "the denied list", |e| {
        e["verb"] == "list" && e["responseStatus"]["code"] == 403
    });
    assert_eq!(
        forbidden["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert_eq!(forbidden["objectRef"]["resource"], "secrets");
    assert_eq!(
        forbidden["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(forbidden["responseStatus"]["reason"], "Forbidden");
    assert!(
        forbidden["responseStatus"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot list resource"),
        "{forbidden}"
    );
    assert!(forbidden.get("responseObject").is_none());

    let got = find(&events, "the GET by Audit-Id", |e| {
        e["auditID"] == get_id.as_str()
    });
    assert_eq!(got["verb"], "get");
    assert_eq!(got["objectRef"]["name"], "audited");
    assert_eq!(got["responseObject"]["data"]["colour"], "teal");
    assert!(
        !got["objectRef"]["resourceVersion"]
            .as_str()
            .unwrap()
            .is_empty()
    );

    let failed = find(&events, "the 401", |e| {
        e["auditID"] == unauthorized_id.as_str()
    });
    assert_eq!(failed["responseStatus"]["code"], 401);
    assert_eq!(failed["stage"], "ResponseStarted");
    assert!(failed["user"].as_object().unwrap().is_empty(), "{failed}");

    let stages: Vec<&str> = events
        .iter()
        .filter(|e| e["auditID"] == watch_id.as_str())
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["ResponseStarted", "ResponseComplete"]);
}

const LABELLED: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: labelled}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: a team label is required
  auditAnnotations:
  - key: keys
    valueExpression: "has(object.data) ? string(size(object.data)) : null"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: labelled-audit}
spec:
  policyName: labelled
  validationActions: [Warn, Audit]
"#;

#[test]
fn admission_policies_annotate_the_audit_event_of_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, log) = audited(dir.path());
    let k = cluster.kubectl();
    k.ok_with_input(&["apply", "-f", "-"], LABELLED);
    // The policy takes effect once its watch has it: create until the warning comes back.
    let (mut name, mut attempt) = (String::new(), 0);
    let warned = skiff_tests::eventually(std::time::Duration::from_secs(30), || {
        attempt += 1;
        name = format!("unlabelled-{attempt}");
        let created = k.run(&[
            "create",
            "configmap",
            &name,
            "--from-literal=a=1",
            "--from-literal=b=2",
        ]);
        assert!(created.ok, "{}", created.stderr);
        created.stderr.contains(
            "Warning: Validation failed for ValidatingAdmissionPolicy 'labelled' with binding \
             'labelled-audit': a team label is required",
        )
    });
    assert!(warned, "the policy never warned");
    k.ok_with_input(
        &["create", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "labelled", "labels": {"team": "blue"}}, "data": {"a": "1"}}"#,
    );
    k.ok(&["label", "configmap", "labelled", "tier=web"]);

    cluster.stop();
    let events = events(&log);
    let configmap = |verb: &str, name: &str| {
        let (verb, name) = (verb.to_string(), name.to_string());
        move |e: &Value| {
            e["verb"] == verb.as_str()
                && e["objectRef"]["resource"] == "configmaps"
                && e["objectRef"]["name"] == name.as_str()
        }
    };
    // The create's event names the object, as kube-apiserver's does.
    let created = find(&events, "the warned create", configmap("create", &name));
    let annotations = &created["annotations"];
    assert_eq!(annotations["labelled/keys"], "2", "{created}");
    let failures: Value = serde_json::from_str(
        annotations["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap_or_else(|| panic!("no validation_failure in {created}")),
    )
    .unwrap();
    assert_eq!(
        failures,
        serde_json::json!([{"message": "a team label is required", "policy": "labelled",
                            "binding": "labelled-audit", "expressionIndex": 0,
                            "validationActions": ["Warn", "Audit"]}])
    );
    // The authorizer's annotations are still there.
    assert_eq!(annotations["authorization.k8s.io/decision"], "allow");
    // A request the policy did not fail has its audit annotation only; one it does not match
    // (an update) has neither.
    let quiet = find(
        &events,
        "the labelled create",
        configmap("create", "labelled"),
    );
    assert_eq!(quiet["annotations"]["labelled/keys"], "1", "{quiet}");
    assert!(
        quiet["annotations"]
            .get("validation.policy.admission.k8s.io/validation_failure")
            .is_none(),
        "{quiet}"
    );
    let update = find(&events, "the label patch", configmap("patch", "labelled"));
    assert!(
        update["annotations"].get("labelled/keys").is_none(),
        "{update}"
    );
}

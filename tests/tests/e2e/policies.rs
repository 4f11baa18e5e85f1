//! ValidatingAdmissionPolicies end to end with kubectl: a policy with a ConfigMap param bound
//! with Deny refuses a Deployment with too many replicas (exit code 1, Kubernetes' message),
//! dry runs included, and lets a compliant one through; a missing param under
//! `parameterNotFoundAction: Deny` refuses; a policy without params bound with Warn makes
//! kubectl print `Warning:`; a policy that refuses everything cannot stop its own removal; and
//! deleting a binding lifts its denial. A second cluster checks namespace selectors, the codes
//! of reasons, runtime errors under `failurePolicy` Ignore and Fail, the `authorizer`
//! variable asking RBAC about the request's user, and type checking in a policy's status.

use std::time::Duration;

use serde_json::json;
use skiff_tests::{Kubectl, Run, TestCluster, eventually};

fn policy(name: &str, spec: serde_json::Value) -> String {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": name}, "spec": spec})
    .to_string()
}

fn binding(name: &str, spec: serde_json::Value) -> String {
    json!({"apiVersion": "admissionregistration.k8s.io/v1",
           "kind": "ValidatingAdmissionPolicyBinding",
           "metadata": {"name": name}, "spec": spec})
    .to_string()
}

fn deployments_rule() -> serde_json::Value {
    json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
}

/// Runs `kubectl create deployment <prefix>-N ...args` (N counting up) until `done` holds
/// (policies reach the API server's memory through a watch, a moment after they are written);
/// the run that made it hold, and the name it used.
fn until(
    k: &Kubectl,
    prefix: &str,
    args: &[&str],
    mut done: impl FnMut(&Run) -> bool,
) -> (Run, String) {
    let mut last = None;
    let mut n = 0;
    let held = eventually(Duration::from_secs(20), || {
        n += 1;
        let name = format!("{prefix}-{n}");
        let mut full = vec!["create", "deployment", name.as_str(), "--image=nginx"];
        full.extend_from_slice(args);
        let run = k.run(&full);
        let held = done(&run);
        last = Some((run, name));
        held
    });
    let last = last.expect("at least one run");
    assert!(held, "never held; last run: {:?}", last.0);
    last
}

/// Runs `attempt` with `n` counting up until `done` holds of its run (policies reach the API
/// server through a watch, a moment after they are written) and returns that run; the test
/// fails with the last run when it never holds.
fn retried(
    n: &mut usize,
    mut attempt: impl FnMut(usize) -> Run,
    done: impl Fn(&Run) -> bool,
) -> Run {
    let mut last = None;
    let held = eventually(Duration::from_secs(20), || {
        *n += 1;
        let run = attempt(*n);
        let held = done(&run);
        last = Some(run);
        held
    });
    let run = last.expect("a run");
    assert!(held, "{run:?}");
    run
}

const DENIED: &str = "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: failed expression: object.spec.replicas <= int(params.data.maxReplicas)";

#[test]
fn policies_deny_warn_read_params_and_never_lock_themselves_in() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();

    k.ok(&[
        "create",
        "configmap",
        "replica-limits",
        "--from-literal=maxReplicas=5",
    ]);
    let mut spec = json!({
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": deployments_rule(),
        "validations": [{"expression": "object.spec.replicas <= int(params.data.maxReplicas)"}],
    });
    k.ok_with_input(
        &["create", "-f", "-"],
        &policy("max-replicas", spec.clone()),
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &binding(
            "max-replicas-binding",
            json!({"policyName": "max-replicas",
            "validationActions": ["Deny"],
            "paramRef": {"name": "replica-limits", "namespace": "default",
                         "parameterNotFoundAction": "Deny"}}),
        ),
    );

    // Too many replicas: refused with Kubernetes' message and kubectl's exit code 1.
    let (refused, name) = until(&k, "big", &["--replicas=7"], |run| !run.ok);
    let expected = format!("deployments.apps \"{name}\" is forbidden: {DENIED}");
    assert!(refused.stderr.contains(&expected), "{}", refused.stderr);
    let output = k
        .command(&[
            "create",
            "deployment",
            "big",
            "--image=nginx",
            "--replicas=7",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains(DENIED));
    // A dry run is evaluated too.
    let dry = k.run(&[
        "create",
        "deployment",
        "dry",
        "--image=nginx",
        "--replicas=9",
        "--dry-run=server",
    ]);
    assert!(!dry.ok && dry.stderr.contains(DENIED), "{dry:?}");
    // A compliant one passes; an update past the limit is refused.
    k.ok(&[
        "create",
        "deployment",
        "small",
        "--image=nginx",
        "--replicas=3",
    ]);
    let scaled = k.run(&[
        "patch",
        "deployment",
        "small",
        "-p",
        r#"{"spec":{"replicas":6}}"#,
    ]);
    assert!(!scaled.ok && scaled.stderr.contains(DENIED), "{scaled:?}");
    let listed = k.ok(&["get", "deployments", "-o", "name"]);
    assert!(listed.contains("deployment.apps/small"), "{listed}");
    // (Creates before the policy reached the plugin may have passed; the refused ones did not.)
    let names: Vec<&str> = listed.lines().collect();
    assert!(
        !names.contains(&format!("deployment.apps/{name}").as_str()),
        "{listed}"
    );
    assert!(!names.contains(&"deployment.apps/big"), "{listed}");

    // The param is gone: parameterNotFoundAction Deny refuses even a small one.
    k.ok(&["delete", "configmap", "replica-limits"]);
    let missing = k.run(&[
        "create",
        "deployment",
        "tiny",
        "--image=nginx",
        "--replicas=1",
    ]);
    assert!(
        !missing.ok && missing.stderr.contains("no params found"),
        "{missing:?}"
    );
    k.ok(&[
        "create",
        "configmap",
        "replica-limits",
        "--from-literal=maxReplicas=5",
    ]);
    k.ok(&[
        "create",
        "deployment",
        "tiny",
        "--image=nginx",
        "--replicas=1",
    ]);

    // A messageExpression and a reason: a policy change reaches the plugin through the watch.
    spec["validations"] = json!([{"expression": "object.spec.replicas <= int(params.data.maxReplicas)",
        "messageExpression": "'at most ' + params.data.maxReplicas + ' replicas, not ' + string(object.spec.replicas)",
        "reason": "Forbidden"}]);
    k.ok_with_input(&["apply", "-f", "-"], &policy("max-replicas", spec));
    let (refused, _) = until(&k, "many", &["--replicas=8"], |run| {
        run.stderr.contains("at most 5 replicas, not 8")
    });
    assert!(!refused.ok);

    // A policy without params bound with Warn: admitted, and kubectl prints the warning.
    k.ok_with_input(
        &["create", "-f", "-"],
        &policy(
            "no-latest",
            json!({"matchConstraints": deployments_rule(),
            "validations": [{"expression":
                "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))",
                "message": "images must not use the latest tag"}]}),
        ),
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &binding(
            "no-latest-binding",
            json!({"policyName": "no-latest",
            "validationActions": ["Warn"]}),
        ),
    );
    let mut n = 0;
    retried(
        &mut n,
        |n| {
            k.run(&[
                "create",
                "deployment",
                &format!("latest-{n}"),
                "--image=nginx:latest",
                "--replicas=1",
            ])
        },
        |run| {
            run.ok && run.stderr.contains(
                "Warning: Validation failed for ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest-binding': images must not use the latest tag",
            )
        },
    );

    // Both kinds are listed with their columns.
    let shown = k.ok(&["get", "validatingadmissionpolicies"]);
    assert!(
        shown.contains("max-replicas") && shown.contains("v1/ConfigMap"),
        "{shown}"
    );
    let shown = k.ok(&["get", "validatingadmissionpolicybindings"]);
    assert!(shown.contains("default/replica-limits"), "{shown}");

    // A policy that refuses every write cannot refuse its own removal.
    k.ok_with_input(
        &["create", "-f", "-"],
        &policy(
            "deny-all",
            json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["*"],
            "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]},
            "validations": [{"expression": "false", "message": "nothing may change"}]}),
        ),
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &binding(
            "deny-all-binding",
            json!({"policyName": "deny-all",
            "validationActions": ["Deny"]}),
        ),
    );
    let locked = eventually(Duration::from_secs(20), || {
        let run = k.run(&["create", "configmap", "blocked"]);
        !run.ok && run.stderr.contains("nothing may change")
    });
    assert!(locked, "deny-all never took effect");
    k.ok(&[
        "delete",
        "validatingadmissionpolicybinding",
        "deny-all-binding",
    ]);
    k.ok(&["delete", "validatingadmissionpolicy", "deny-all"]);
    let unlocked = eventually(Duration::from_secs(20), || {
        k.run(&["create", "configmap", "unblocked"]).ok
    });
    assert!(unlocked, "the configmap create stayed refused");

    // Deleting the binding lifts the denial.
    k.ok(&[
        "delete",
        "validatingadmissionpolicybinding",
        "max-replicas-binding",
    ]);
    until(&k, "lifted", &["--replicas=7"], |run| run.ok);
}

fn configmap(name: &str, namespace: &str, labels: serde_json::Value) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace, "labels": labels},
           "data": {"a": "b"}})
    .to_string()
}

fn configmaps_rule() -> serde_json::Value {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]})
}

/// Whether kubectl logged (at `-v=6`) that its POST was answered with `status` (`"422
/// Unprocessable Entity"`).
fn answered(run: &Run, status: &str) -> bool {
    run.stderr
        .lines()
        .any(|l| l.contains("POST") && l.contains("https://") && l.contains(status))
}

/// A binding's `namespaceSelector` limits it to the namespaces it selects, the default reason
/// refuses with 422 and `reason: Forbidden` with 403; an expression that fails at run time is
/// let through under `failurePolicy: Ignore` and refused under Fail.
#[test]
fn namespace_selectors_reasons_and_failure_policies() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok_with_input(
        &["create", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "prod", "labels": {"env": "prod"}}},
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "dev", "labels": {"env": "dev"}}}]})
        .to_string(),
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &policy(
            "owner-label",
            json!({"matchConstraints": configmaps_rule(),
            "validations": [{"expression":
                "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                "message": "configmaps need an owner label"}]}),
        ),
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &binding(
            "owner-label-prod",
            json!({"policyName": "owner-label",
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}),
        ),
    );
    const OWNER: &str = "ValidatingAdmissionPolicy 'owner-label' with binding 'owner-label-prod' denied request: configmaps need an owner label";
    // A configmap without an owner in prod, verbosely (kubectl -v=6 prints the response code).
    let unowned = |n: usize| {
        k.run_with_input(
            &["create", "-v=6", "-f", "-"],
            &configmap(&format!("unowned-{n}"), "prod", json!({})),
        )
    };
    let mut n = 0;
    let run = retried(&mut n, unowned, |run| !run.ok);
    // kubectl prints a 422 as `The configmaps "unowned-N" is invalid: : <cause>`.
    assert!(run.stderr.contains(OWNER), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("The configmaps \"unowned-{n}\" is invalid")),
        "{}",
        run.stderr
    );
    assert!(answered(&run, "422 Unprocessable Entity"), "{}", run.stderr);
    // Another namespace is not selected; a compliant object passes in prod.
    k.ok_with_input(
        &["create", "-f", "-"],
        &configmap("unowned", "dev", json!({})),
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &configmap("owned", "prod", json!({"owner": "me"})),
    );
    // Relabelling the namespace takes it out of the binding's reach.
    k.ok(&["label", "namespace", "prod", "env=staging", "--overwrite"]);
    k.ok_with_input(
        &["create", "-f", "-"],
        &configmap("unowned-now", "prod", json!({})),
    );
    k.ok(&["label", "namespace", "prod", "env=prod", "--overwrite"]);

    // reason: Forbidden refuses with 403, which kubectl prints as such.
    k.ok_with_input(
        &["apply", "-f", "-"],
        &policy(
            "owner-label",
            json!({"matchConstraints": configmaps_rule(),
            "validations": [{"expression":
                "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                "message": "configmaps need an owner label", "reason": "Forbidden"}]}),
        ),
    );
    let run = retried(&mut n, unowned, |run| answered(run, "403 Forbidden"));
    assert!(!run.ok);
    assert!(
        run.stderr.contains(&format!(
            "Error from server (Forbidden): error when creating \"STDIN\": configmaps \"unowned-{n}\" is forbidden: {OWNER}"
        )),
        "{}",
        run.stderr
    );
    k.ok(&[
        "delete",
        "validatingadmissionpolicybinding",
        "owner-label-prod",
    ]);

    // An expression that fails at run time (no such key): Ignore lets the write through. The
    // policy's second validation shows when it is in force.
    let erring = |failure: &str| {
        policy(
            "erring",
            json!({"failurePolicy": failure, "matchConstraints": configmaps_rule(),
            "validations": [{"expression": "object.data.missing == 'x'"},
                            {"expression": "!('block' in object.metadata.labels)",
                             "message": "blocked"}]}),
        )
    };
    k.ok_with_input(&["create", "-f", "-"], &erring("Ignore"));
    k.ok_with_input(
        &["create", "-f", "-"],
        &binding(
            "erring-binding",
            json!({"policyName": "erring",
            "validationActions": ["Deny"],
            "matchResources": {"objectSelector": {"matchLabels": {"test": "erring"}}}}),
        ),
    );
    let run = retried(
        &mut n,
        |n| {
            k.run_with_input(
                &["create", "-f", "-"],
                &configmap(
                    &format!("blocked-{n}"),
                    "dev",
                    json!({"test": "erring", "block": "y"}),
                ),
            )
        },
        |run| !run.ok,
    );
    assert!(
        run.stderr.contains(
            "ValidatingAdmissionPolicy 'erring' with binding 'erring-binding' denied request: blocked"
        ),
        "{}",
        run.stderr
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &configmap("ignored", "dev", json!({"test": "erring"})),
    );
    // Fail refuses it, with the evaluation error.
    k.ok_with_input(&["apply", "-f", "-"], &erring("Fail"));
    let run = retried(
        &mut n,
        |n| {
            k.run_with_input(
                &["create", "-f", "-"],
                &configmap(&format!("failed-{n}"), "dev", json!({"test": "erring"})),
            )
        },
        |run| !run.ok,
    );
    assert!(
        run.stderr.contains(
            "ValidatingAdmissionPolicy 'erring' with binding 'erring-binding' denied request: expression 'object.data.missing == 'x'' resulted in error: "
        ),
        "{}",
        run.stderr
    );
    // The object selector still leaves other configmaps alone.
    k.ok_with_input(
        &["create", "-f", "-"],
        &configmap("unlabelled", "dev", json!({})),
    );

    // `authorizer`: more than two replicas only for a user who may update this Deployment's
    // scale, asked of RBAC for the request's user (kubectl --as).
    k.ok(&[
        "create",
        "role",
        "deployer",
        "-n",
        "dev",
        "--verb=create,get,list",
        "--resource=deployments",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "deployers",
        "-n",
        "dev",
        "--role=deployer",
        "--user=alice",
        "--user=bob",
    ]);
    k.ok(&[
        "create",
        "role",
        "scaler",
        "-n",
        "dev",
        "--verb=update",
        "--resource=deployments/scale",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "scalers",
        "-n",
        "dev",
        "--role=scaler",
        "--user=bob",
    ]);
    k.ok_with_input(
        &["create", "-f", "-"],
        &policy(
            "scalers-only",
            json!({"matchConstraints": deployments_rule(),
            "validations": [{
                "expression": "object.spec.replicas <= 2 || authorizer.requestResource.subresource('scale').check('update').allowed()",
                "messageExpression": "request.userInfo.username + ' may not run more than 2 replicas'",
                "reason": "Forbidden"}]}),
        ),
    );
    k.ok_with_input(
        &["create", "-f", "-"],
        &binding(
            "scalers-only-binding",
            json!({"policyName": "scalers-only", "validationActions": ["Deny"]}),
        ),
    );
    let as_alice = |name: &str, replicas: &str| {
        k.run(&[
            "create",
            "deployment",
            name,
            "--image=nginx",
            "-n",
            "dev",
            &format!("--replicas={replicas}"),
            "--as=alice",
        ])
    };
    let mut n = 0;
    let run = retried(
        &mut n,
        |n| as_alice(&format!("many-{n}"), "5"),
        |run| !run.ok,
    );
    assert!(
        run.stderr.contains(
            "ValidatingAdmissionPolicy 'scalers-only' with binding 'scalers-only-binding' denied request: alice may not run more than 2 replicas"
        ),
        "{}",
        run.stderr
    );
    let few = as_alice("few", "2");
    assert!(few.ok, "{few:?}");
    let bob = k.run(&[
        "create",
        "deployment",
        "bobs",
        "--image=nginx",
        "-n",
        "dev",
        "--replicas=5",
        "--as=bob",
    ]);
    assert!(bob.ok, "{bob:?}");

    // Type checking: each generation of a policy is checked against the schemas of the kinds it
    // matches, and the result lands in its status (present and empty when nothing is wrong).
    let type_checking = |name: &str| {
        let mut last = String::new();
        let checked = eventually(Duration::from_secs(20), || {
            last = k.ok(&[
                "get",
                "validatingadmissionpolicy",
                name,
                "-o",
                "jsonpath={.status.observedGeneration}|{.status.typeChecking}",
            ]);
            last.starts_with('1') && last.contains('{')
        });
        assert!(checked, "{name}: {last}");
        last
    };
    let clean = type_checking("scalers-only");
    assert!(!clean.contains("expressionWarnings\":[{"), "{clean}");
    k.ok_with_input(
        &["create", "-f", "-"],
        &policy(
            "typo",
            json!({"matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replica <= 5"}]}),
        ),
    );
    let warned = type_checking("typo");
    // (kubectl prints the status as JSON, which may escape the `<input>` of the location.)
    for part in [
        "spec.validations[0].expression",
        "apps/v1, Kind=Deployment: ERROR: ",
        ":1:12: undefined field 'replica'",
    ] {
        assert!(warned.contains(part), "{part}: {warned}");
    }
}

//! RBAC through kubectl: what a user may do is what their Roles grant, `kubectl auth can-i`
//! agrees with what the server then does, nobody grants what they do not hold, and only those
//! allowed to may impersonate.

use std::time::Duration;

use serde_json::Value;
use skiff_tests::{Kubectl, TestCluster, eventually};

/// Waits until `kubectl auth can-i` (as `as_user`) answers `want` for `args`: the policy follows
/// the log, so a new binding takes effect a moment after it is written, as in Kubernetes.
fn until_can_i(k: &Kubectl, as_user: &[&str], args: &[&str], want: &str) {
    let mut last = String::new();
    let reached = eventually(Duration::from_secs(10), || {
        let run = k.run(&[&["auth", "can-i"], args, as_user].concat());
        last = format!("{} {}", run.stdout.trim(), run.stderr.trim());
        run.stdout.trim() == want
    });
    assert!(reached, "can-i {args:?} as {as_user:?}: {last}");
}

const ALICE: &[&str] = &["--as", "alice"];
const BOB_VIEWER: &[&str] = &["--as", "bob", "--as-group", "viewers"];

#[test]
fn users_get_what_their_roles_grant_and_nothing_more() {
    let mut cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();

    // The default policy is in place, and admin/edit/view gathered their pieces.
    let roles = k.ok(&[
        "get",
        "clusterroles",
        "cluster-admin",
        "admin",
        "edit",
        "view",
    ]);
    assert_eq!(roles.lines().count(), 5, "{roles}");
    let binding = k.ok(&["get", "clusterrolebinding", "cluster-admin", "-o", "wide"]);
    assert!(
        binding.contains("ClusterRole/cluster-admin") && binding.contains("system:masters"),
        "{binding}"
    );

    k.ok(&["create", "namespace", "team-a"]);
    k.ok(&[
        "create",
        "rolebinding",
        "alice-admin",
        "--clusterrole=admin",
        "--user=alice",
        "-n",
        "team-a",
    ]);
    k.ok(&[
        "create",
        "clusterrolebinding",
        "viewers",
        "--clusterrole=view",
        "--group=viewers",
    ]);
    until_can_i(&k, ALICE, &["create", "deployments", "-n", "team-a"], "yes");

    // A namespace admin manages its namespace and nothing else.
    k.ok(&[
        &[
            "-n",
            "team-a",
            "create",
            "configmap",
            "c",
            "--from-literal=a=1",
        ],
        ALICE,
    ]
    .concat());
    k.ok(&[
        &[
            "-n",
            "team-a",
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=a=1",
        ],
        ALICE,
    ]
    .concat());
    let denied = k.fails(&[&["get", "configmaps", "-n", "default"], ALICE].concat());
    assert!(
        denied.contains(r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "default""#),
        "{denied}"
    );
    let denied = k.fails(&[&["get", "nodes"], ALICE].concat());
    assert!(
        denied.contains(r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#),
        "{denied}"
    );
    let denied = k.fails(&[&["delete", "namespace", "team-a"], ALICE].concat());
    assert!(
        denied.contains(
            r#"namespaces "team-a" is forbidden: User "alice" cannot delete resource "namespaces""#
        ),
        "{denied}"
    );
    // can-i agrees, and says no with exit status 1.
    let no = k.run(&[&["auth", "can-i", "list", "pods", "-n", "default"], ALICE].concat());
    assert_eq!((no.ok, no.stdout.trim()), (false, "no"), "{}", no.stderr);
    let list = k.ok(&[&["auth", "can-i", "--list", "-n", "team-a"], ALICE].concat());
    assert!(
        list.contains("deployments.apps")
            && list.contains("rolebindings.rbac.authorization.k8s.io"),
        "{list}"
    );
    // Discovery is for every authenticated user.
    let resources = k.ok(&[
        &[
            "api-resources",
            "--api-group=rbac.authorization.k8s.io",
            "-o",
            "name",
        ],
        ALICE,
    ]
    .concat());
    assert!(
        resources.contains("clusterroles.rbac.authorization.k8s.io"),
        "{resources}"
    );

    // view reads but cannot read Secrets, nor write.
    until_can_i(
        &k,
        BOB_VIEWER,
        &["list", "configmaps", "-n", "team-a"],
        "yes",
    );
    let listed = k.ok(&[
        &["get", "configmaps", "-n", "team-a", "-o", "name"],
        BOB_VIEWER,
    ]
    .concat());
    assert!(listed.contains("configmap/c"), "{listed}");
    let denied = k.fails(&[&["get", "secrets", "-n", "team-a"], BOB_VIEWER].concat());
    assert!(
        denied.contains(r#"secrets is forbidden: User "bob" cannot list resource "secrets" in API group "" in the namespace "team-a""#),
        "{denied}"
    );
    let denied = k.fails(&[&["-n", "team-a", "delete", "configmap", "c"], BOB_VIEWER].concat());
    assert!(
        denied.contains("cannot delete resource \"configmaps\""),
        "{denied}"
    );
    // whoami says who the request acts as.
    let whoami: Value =
        serde_json::from_str(&k.ok(&[&["auth", "whoami", "-o", "json"], BOB_VIEWER].concat()))
            .unwrap();
    assert_eq!(whoami["status"]["userInfo"]["username"], "bob");
    let groups = whoami["status"]["userInfo"]["groups"].to_string();
    assert!(
        groups.contains("viewers") && groups.contains("system:authenticated"),
        "{groups}"
    );

    // Nobody grants what they do not hold.
    let nodes_role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: nodes, namespace: team-a}\nrules:\n- {apiGroups: [\"\"], resources: [nodes], verbs: [get]}\n";
    let run = k.run_with_input(&[&["create", "-f", "-"], ALICE].concat(), nodes_role);
    assert!(!run.ok);
    assert!(
        run.stderr.contains(r#"roles.rbac.authorization.k8s.io "nodes" is forbidden: user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held"#)
            && run.stderr.contains(r#"{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}"#),
        "{}",
        run.stderr
    );
    let denied = k.fails(
        &[
            &[
                "create",
                "rolebinding",
                "grab",
                "--clusterrole=cluster-admin",
                "--user=alice",
                "-n",
                "team-a",
            ],
            ALICE,
        ]
        .concat(),
    );
    assert!(
        denied.contains("is attempting to grant RBAC permissions not currently held"),
        "{denied}"
    );
    // What she holds, she may grant.
    let cm_role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: cm-reader, namespace: team-a}\nrules:\n- {apiGroups: [\"\"], resources: [configmaps], verbs: [get, list]}\n";
    k.ok_with_input(&[&["create", "-f", "-"], ALICE].concat(), cm_role);
    k.ok(&[
        &[
            "create",
            "rolebinding",
            "carol-reads",
            "--role=cm-reader",
            "--user=carol",
            "-n",
            "team-a",
        ],
        ALICE,
    ]
    .concat());
    until_can_i(
        &k,
        &["--as", "carol"],
        &["get", "configmaps", "-n", "team-a"],
        "yes",
    );
    let no = k.run(&[
        "auth", "can-i", "get", "secrets", "-n", "team-a", "--as", "carol",
    ]);
    assert_eq!((no.ok, no.stdout.trim()), (false, "no"), "{}", no.stderr);

    // A binding to a role that does not exist grants nothing.
    k.ok(&[
        "create",
        "rolebinding",
        "ghostly",
        "--clusterrole=ghost",
        "--user=erin",
        "-n",
        "team-a",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let denied = k.fails(&["get", "pods", "-n", "team-a", "--as", "erin"]);
    assert!(
        denied.contains(r#"cannot list resource "pods""#)
            && denied.contains(r#"clusterrole.rbac.authorization.k8s.io "ghost" not found"#),
        "{denied}"
    );

    // A user of the token file, without impersonation: the same rules, and no impersonating.
    cluster.stop();
    let tokens = cluster.data_dir().join("tokens.csv");
    let mut text = std::fs::read_to_string(&tokens).unwrap();
    text.push_str("dana-token-0123456789,dana,dana-uid,\"viewers\"\n");
    std::fs::write(&tokens, text).unwrap();
    cluster.restart();
    let dana = ["--token", "dana-token-0123456789"];
    let listed = k.ok(&[
        &["get", "configmaps", "-n", "team-a", "-o", "name"],
        &dana[..],
    ]
    .concat());
    assert!(listed.contains("configmap/c"), "{listed}");
    let denied = k.fails(&[&["get", "secrets", "-n", "team-a"], &dana[..]].concat());
    assert!(
        denied.contains(r#"User "dana" cannot list resource "secrets""#),
        "{denied}"
    );
    let denied = k.fails(
        &[
            &["get", "configmaps", "-n", "team-a", "--as", "alice"],
            &dana[..],
        ]
        .concat(),
    );
    assert!(
        denied.contains(r#"users "alice" is forbidden: User "dana" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{denied}"
    );
    // The policy survived the restart.
    assert_eq!(
        k.ok(&[
            &["auth", "can-i", "create", "deployments", "-n", "team-a"],
            ALICE
        ]
        .concat())
            .trim(),
        "yes"
    );
}

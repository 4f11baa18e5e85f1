//! Service-account identity end to end: `kubectl create token` gives a token that authenticates
//! as the account and gets what RBAC grants it, bad tokens are 401, TokenReview agrees, deleting
//! the account revokes its tokens, the OIDC documents verify the tokens, and pods get a projected
//! token that the Python client uses in-cluster, and legacy token Secrets are filled and hold
//! only while the Secret does.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use skiff_tests::{Kubectl, TestCluster, eventually};

const SA_USER: &str = "system:serviceaccount:default:default";

/// The claims of a JWT, unverified.
fn claims(token: &str) -> Value {
    let part = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("JSON")
}

/// kubectl with `--token` instead of the admin token.
fn as_token(k: &Kubectl, token: &str, args: &[&str]) -> skiff_tests::Run {
    let flag = format!("--token={token}");
    k.run(&[&[flag.as_str()], args].concat())
}

/// `kubectl create token default`, once the controllers made the account.
fn default_token(k: &Kubectl, extra: &[&str]) -> String {
    let mut out = String::new();
    let made = eventually(Duration::from_secs(20), || {
        let run = k.run(&[&["create", "token", "default"], extra].concat());
        out = format!("{}{}", run.stdout, run.stderr);
        run.ok
    });
    assert!(made, "create token: {out}");
    out.trim().to_string()
}

fn review(k: &Kubectl, token: &str) -> Value {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token}});
    let out = k.ok_with_input(&["create", "-f", "-", "-o", "json"], &body.to_string());
    serde_json::from_str::<Value>(&out).expect("TokenReview JSON")["status"].clone()
}

/// The service-account signing key of the data dir, to forge tokens the server must refuse.
fn signing_key(cluster: &TestCluster) -> jsonwebtoken::EncodingKey {
    let pem = std::fs::read_to_string(cluster.data_dir().join("pki/service-account.key"))
        .expect("the signing key in the data dir");
    let pair = rcgen::KeyPair::from_pem(&pem).expect("a PEM key");
    jsonwebtoken::EncodingKey::from_ec_der(&pair.serialize_der())
}

#[tokio::test]
async fn service_account_tokens_authenticate_and_get_what_rbac_grants() {
    let cluster = TestCluster::start_server(&["--components", "controllers"]);
    let k = cluster.kubectl();
    let token = default_token(&k, &[]);
    let c = claims(&token);
    assert_eq!(c["sub"], SA_USER);
    assert_eq!(c["iss"], "https://kubernetes.default.svc.cluster.local");
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        3600
    );

    // `kubectl auth whoami` with the token.
    let who = as_token(&k, &token, &["auth", "whoami", "-o", "json"]);
    assert!(who.ok, "{} {}", who.stdout, who.stderr);
    let who: Value = serde_json::from_str(&who.stdout).unwrap();
    let info = &who["status"]["userInfo"];
    assert_eq!(info["username"], SA_USER);
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    let uid = k.ok(&["get", "sa", "default", "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(info["uid"], uid.trim());
    let table = as_token(&k, &token, &["auth", "whoami"]).stdout;
    assert!(table.contains(SA_USER), "{table}");

    // --duration and --audience reach the token; too short a duration is refused as
    // kube-apiserver words it.
    let long = default_token(&k, &["--duration=2h", "--audience=vault"]);
    let lc = claims(&long);
    assert_eq!(
        lc["exp"].as_i64().unwrap() - lc["iat"].as_i64().unwrap(),
        7200
    );
    assert_eq!(lc["aud"], json!(["vault"]));
    let short = k.run(&["create", "token", "default", "--duration=1m"]);
    assert!(!short.ok);
    assert!(
        short.stderr.contains(
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
        ),
        "{}",
        short.stderr
    );
    // A token for another audience does not log in to the API server.
    let unauthorized = as_token(&k, &long, &["get", "configmaps"]);
    assert!(
        unauthorized
            .stderr
            .contains("You must be logged in to the server"),
        "{}",
        unauthorized.stderr
    );

    // RBAC: a Role allowing ConfigMaps, bound to the account.
    k.ok(&[
        "create",
        "role",
        "cm-reader",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        "--serviceaccount=default:default",
    ]);
    let mut listed = String::new();
    let allowed = eventually(Duration::from_secs(10), || {
        let run = as_token(&k, &token, &["get", "configmaps", "-o", "name"]);
        listed = format!("{}{}", run.stdout, run.stderr);
        run.ok
    });
    assert!(allowed, "{listed}");
    // The root CA publisher's ConfigMap is there to list.
    assert!(listed.contains("configmap/kube-root-ca.crt"), "{listed}");
    let secrets = as_token(&k, &token, &["get", "secrets"]);
    assert!(!secrets.ok);
    assert!(
        secrets.stderr.contains(
            "Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:default:default\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""
        ),
        "{}",
        secrets.stderr
    );
    let can_i = as_token(&k, &token, &["auth", "can-i", "list", "secrets"]);
    assert_eq!(can_i.stdout.trim(), "no");

    // Garbage and expired tokens are 401.
    let garbage = as_token(&k, "not-a-token", &["get", "configmaps"]);
    assert!(
        garbage
            .stderr
            .contains("You must be logged in to the server"),
        "{}",
        garbage.stderr
    );
    let key = signing_key(&cluster);
    let mut header = jsonwebtoken::decode_header(&token).unwrap();
    header.typ = None;
    let mut expired = c.clone();
    let now = jsonwebtoken::get_current_timestamp() as i64;
    expired["iat"] = json!(now - 7200);
    expired["nbf"] = json!(now - 7200);
    expired["exp"] = json!(now - 3600);
    let expired = jsonwebtoken::encode(&header, &expired, &key).unwrap();
    let refused = as_token(&k, &expired, &["get", "configmaps"]);
    assert!(
        refused
            .stderr
            .contains("You must be logged in to the server"),
        "{}",
        refused.stderr
    );
    // The same claims re-signed with the right key and a live window do pass: only the expiry
    // made the difference.
    let mut fresh = c.clone();
    fresh["exp"] = json!(now + 600);
    let fresh = jsonwebtoken::encode(&header, &fresh, &key).unwrap();
    assert!(as_token(&k, &fresh, &["get", "configmaps"]).ok);
    // The raw 401 is kube-apiserver's Status.
    let raw = cluster
        .http()
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps",
            cluster.server
        ))
        .bearer_auth(&expired)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 401);
    let status: Value = raw.json().await.unwrap();
    assert_eq!(status["reason"], "Unauthorized");
    assert_eq!(status["message"], "Unauthorized");

    // TokenReview agrees.
    let good = review(&k, &token);
    assert_eq!(good["authenticated"], true, "{good}");
    assert_eq!(good["user"]["username"], SA_USER);
    assert_eq!(good["user"]["uid"], uid.trim());
    assert_eq!(
        good["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    for bad in [expired.as_str(), "not-a-token"] {
        let r = review(&k, bad);
        assert!(r["authenticated"].is_null(), "{r}");
        assert!(r["error"].is_string(), "{r}");
    }

    // OIDC discovery, readable by service accounts, and its JWKS verifies the token.
    let http = cluster.http();
    let config: Value = http
        .get(format!(
            "{}/.well-known/openid-configuration",
            cluster.server
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["issuer"], c["iss"]);
    assert_eq!(
        config["jwks_uri"],
        "https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
    );
    let jwks: jsonwebtoken::jwk::JwkSet = http
        .get(format!("{}/openid/v1/jwks", cluster.server))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let kid = header.kid.clone().expect("a kid");
    let jwk = jwks.find(&kid).expect("the token's key in the JWKS");
    let decoding = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[config["issuer"].as_str().unwrap()]);
    validation.set_issuer(&[config["issuer"].as_str().unwrap()]);
    let verified = jsonwebtoken::decode::<Value>(&token, &decoding, &validation).unwrap();
    assert_eq!(verified.claims["sub"], SA_USER);
    // ... and refuses a token signed by another key.
    let other = rcgen::KeyPair::generate().unwrap();
    let forged = jsonwebtoken::encode(
        &header,
        &c,
        &jsonwebtoken::EncodingKey::from_ec_der(&other.serialize_der()),
    )
    .unwrap();
    assert!(jsonwebtoken::decode::<Value>(&forged, &decoding, &validation).is_err());
    assert!(!as_token(&k, &forged, &["get", "configmaps"]).ok);

    // Deleting the account revokes its tokens, even once the controller made a new `default`.
    k.ok(&["delete", "sa", "default"]);
    let revoked = eventually(Duration::from_secs(10), || {
        !as_token(&k, &token, &["get", "configmaps"]).ok
    });
    assert!(
        revoked,
        "the token still works after its account was deleted"
    );
    let recreated = eventually(Duration::from_secs(20), || {
        let now = k.run(&["get", "sa", "default", "-o", "jsonpath={.metadata.uid}"]);
        now.ok && now.stdout.trim() != uid.trim()
    });
    assert!(recreated);
    let r = review(&k, &token);
    assert!(r["authenticated"].is_null(), "{r}");
    let still = as_token(&k, &token, &["get", "configmaps"]);
    assert!(
        still.stderr.contains("You must be logged in to the server"),
        "{}",
        still.stderr
    );
}

/// A Secret of type `kubernetes.io/service-account-token` for `account`, empty.
fn token_secret(name: &str, account: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": name,
            "annotations": {"kubernetes.io/service-account.name": account}}})
    .to_string()
}

/// `data.<key>` of Secret `name` decoded, once the controller wrote it.
fn filled(k: &Kubectl, name: &str, key: &str) -> String {
    let path = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
    let mut value = String::new();
    let done = eventually(Duration::from_secs(20), || {
        value = k.run(&["get", "secret", name, "-o", &path]).stdout;
        !value.trim().is_empty()
    });
    assert!(done, "secret {name} never got {key}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .expect("base64 data");
    String::from_utf8(bytes).expect("UTF-8 data")
}

#[tokio::test]
async fn legacy_token_secrets_are_filled_and_revoked_with_the_secret() {
    let cluster = TestCluster::start_server(&["--components", "controllers"]);
    let k = cluster.kubectl();
    // The account first: a token Secret without its account is deleted.
    assert!(eventually(Duration::from_secs(20), || k
        .run(&["get", "sa", "default"])
        .ok));
    k.ok_with_input(&["apply", "-f", "-"], &token_secret("legacy", "default"));
    let token = filled(&k, "legacy", "token");
    let c = claims(&token);
    assert_eq!(c["iss"], "kubernetes/serviceaccount");
    assert_eq!(c["sub"], SA_USER);
    assert_eq!(c["kubernetes.io/serviceaccount/secret.name"], "legacy");
    assert!(c.get("exp").is_none(), "{c}");
    let uid = k.ok(&["get", "sa", "default", "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(
        c["kubernetes.io/serviceaccount/service-account.uid"],
        uid.trim()
    );
    let annotated = k.ok(&[
        "get",
        "secret",
        "legacy",
        "-o",
        "jsonpath={.metadata.annotations.kubernetes\\.io/service-account\\.uid}",
    ]);
    assert_eq!(annotated.trim(), uid.trim());
    assert_eq!(filled(&k, "legacy", "namespace"), "default");
    assert!(filled(&k, "legacy", "ca.crt").contains("BEGIN CERTIFICATE"));

    // It gets what RBAC grants the account.
    k.ok(&[
        "create",
        "rolebinding",
        "legacy-view",
        "--clusterrole=view",
        "--serviceaccount=default:default",
    ]);
    assert!(eventually(Duration::from_secs(10), || as_token(
        &k,
        &token,
        &["get", "configmaps"]
    )
    .ok));
    assert_eq!(
        review(&k, &token)["user"]["username"],
        SA_USER,
        "TokenReview takes it too"
    );

    // The Secret deleted, the token is 401.
    k.ok(&["delete", "secret", "legacy"]);
    let refused = as_token(&k, &token, &["get", "configmaps"]);
    assert!(
        refused
            .stderr
            .contains("You must be logged in to the server"),
        "{}",
        refused.stderr
    );

    // An account deleted takes its token Secrets with it.
    k.ok(&["create", "sa", "robot"]);
    k.ok_with_input(&["apply", "-f", "-"], &token_secret("robot-token", "robot"));
    filled(&k, "robot-token", "token");
    k.ok(&["delete", "sa", "robot"]);
    assert!(eventually(Duration::from_secs(20), || !k
        .run(&["get", "secret", "robot-token"])
        .ok));
}

/// The pod's JSON.
fn pod_json(k: &Kubectl, name: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", "pod", name, "-o", "json"])).expect("pod JSON")
}

/// Waits until pod `name` reaches `phase`.
fn until_phase(k: &Kubectl, name: &str, phase: &str) {
    let mut last = String::new();
    let reached = eventually(Duration::from_secs(60), || {
        let run = k.run(&["get", "pod", name, "-o", "json"]);
        last = run.stdout.clone();
        serde_json::from_str::<Value>(&run.stdout)
            .is_ok_and(|p| p["status"]["phase"].as_str() == Some(phase))
    });
    assert!(reached, "pod {name} never reached {phase}: {last}");
}

const MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[tokio::test]
async fn pods_get_a_projected_token_and_use_it_in_cluster() {
    // A Service range of its own: other tests' servers on this machine hold 127.96.0.1:443.
    let cluster = TestCluster::start_server(&[
        "--service-cluster-ip-range=127.98.7.0/24",
        "--dns-service-ip=127.98.7.10",
    ]);
    let k = cluster.kubectl();
    k.ok(&[
        "create",
        "role",
        "cm-reader",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        "--serviceaccount=default:default",
    ]);
    // The account and the CA bundle exist before pods need them.
    let ready = eventually(Duration::from_secs(20), || {
        k.run(&["get", "sa", "default"]).ok && k.run(&["get", "cm", "kube-root-ca.crt"]).ok
    });
    assert!(ready, "no default ServiceAccount or kube-root-ca.crt");
    let published = k.ok(&[
        "get",
        "cm",
        "kube-root-ca.crt",
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ]);
    assert_eq!(published.as_bytes(), &cluster.ca_pem[..]);

    // Admission: automount unless the pod or its account says no.
    let dry = |name: &str, overrides: &str| -> Value {
        let out = k.ok(&[
            "run",
            name,
            "--image=busybox",
            "--restart=Never",
            "--dry-run=server",
            "-o",
            "json",
            &format!("--overrides={overrides}"),
            "--command",
            "--",
            "sleep",
            "1",
        ]);
        serde_json::from_str(&out).unwrap()
    };
    let plain = dry("plain", "{}");
    assert_eq!(plain["spec"]["serviceAccountName"], "default");
    let volume = &plain["spec"]["volumes"][0];
    assert!(
        volume["name"]
            .as_str()
            .unwrap()
            .starts_with("kube-api-access-"),
        "{plain}"
    );
    assert_eq!(
        volume["projected"]["sources"][0]["serviceAccountToken"],
        json!({"expirationSeconds": 3607, "path": "token"})
    );
    assert_eq!(
        plain["spec"]["containers"][0]["volumeMounts"][0],
        json!({"name": volume["name"], "readOnly": true, "mountPath": MOUNT})
    );
    let off = dry("off", r#"{"spec":{"automountServiceAccountToken":false}}"#);
    assert!(off["spec"]["volumes"].is_null(), "{off}");
    k.ok(&["create", "sa", "quiet"]);
    k.ok(&[
        "patch",
        "sa",
        "quiet",
        "-p",
        r#"{"automountServiceAccountToken":false}"#,
    ]);
    let quiet = dry("quiet", r#"{"spec":{"serviceAccountName":"quiet"}}"#);
    assert!(quiet["spec"]["volumes"].is_null(), "{quiet}");
    let pod_says_yes = dry(
        "yes",
        r#"{"spec":{"serviceAccountName":"quiet","automountServiceAccountToken":true}}"#,
    );
    assert!(pod_says_yes["spec"]["volumes"].is_array(), "{pod_says_yes}");

    // A running pod's projected files: a token bound to it, the CA bundle, the namespace.
    k.ok(&[
        "run",
        "sleeper",
        "--image=busybox",
        "--restart=Never",
        "--command",
        "--",
        "sleep",
        "3600",
    ]);
    until_phase(&k, "sleeper", "Running");
    let pod = pod_json(&k, "sleeper");
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let dir = cluster
        .kubelet_root()
        .join("pods")
        .join(uid)
        .join("roots/sleeper")
        .join(MOUNT.trim_start_matches('/'));
    let token = std::fs::read_to_string(dir.join("token")).expect("the projected token");
    let c = claims(&token);
    assert_eq!(c["sub"], SA_USER);
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "sleeper");
    assert_eq!(c["kubernetes.io"]["pod"]["uid"], uid);
    assert_eq!(
        c["kubernetes.io"]["node"]["name"], pod["spec"]["nodeName"],
        "{c}"
    );
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        3607
    );
    assert_eq!(std::fs::read(dir.join("ca.crt")).unwrap(), cluster.ca_pem);
    assert_eq!(
        std::fs::read_to_string(dir.join("namespace")).unwrap(),
        "default"
    );
    let who = as_token(&k, &token, &["auth", "whoami", "-o", "json"]);
    assert!(who.ok, "{}", who.stderr);
    let who: Value = serde_json::from_str(&who.stdout).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["sleeper"])
    );

    // The Python client in a pod, in-cluster: the `kubernetes` Service's variables and the
    // projected files (under $POD_ROOT with the process runtime, which has no mount namespace).
    let script = r#"
import os
from kubernetes import client, config
from kubernetes.config import incluster_config as ic
root = os.environ.get("POD_ROOT", "") + "/var/run/secrets/kubernetes.io/serviceaccount"
ic.SERVICE_TOKEN_FILENAME = root + "/token"
ic.SERVICE_CERT_FILENAME = root + "/ca.crt"
config.load_incluster_config()
v1 = client.CoreV1Api()
ns = open(root + "/namespace").read()
print("configmaps:", sorted(c.metadata.name for c in v1.list_namespaced_config_map(ns).items))
try:
    v1.list_namespaced_secret(ns)
    print("secrets: allowed")
except client.ApiException as e:
    print("secrets:", e.status)
"#;
    // The interpreter that has the client (a pod's default PATH may find another one).
    let python = std::process::Command::new("python3")
        .args(["-c", "import kubernetes, sys; print(sys.executable)"])
        .output()
        .expect("python3 with the kubernetes package");
    assert!(python.status.success(), "python3 cannot import kubernetes");
    let python = String::from_utf8(python.stdout).unwrap();
    k.ok(&[
        "run",
        "pyclient",
        "--image=python",
        "--restart=Never",
        "--command",
        "--",
        python.trim(),
        "-c",
        script,
    ]);
    let mut logs = String::new();
    let done = eventually(Duration::from_secs(60), || {
        logs = k.run(&["logs", "pyclient"]).stdout;
        logs.contains("secrets:")
    });
    let pod = pod_json(&k, "pyclient");
    assert!(done, "no output: {logs}\n{pod}");
    assert!(logs.contains("configmaps: ['kube-root-ca.crt']"), "{logs}");
    assert!(logs.contains("secrets: 403"), "{logs}");
    until_phase(&k, "pyclient", "Succeeded");
}

/// Kills the pod processes the kubelets under these roots leave behind (a kubelet's pods
/// outlive it, as a real one's do).
struct Reap(Vec<std::path::PathBuf>);

impl Drop for Reap {
    fn drop(&mut self) {
        for root in &self.0 {
            skiff_tests::kill_pod_processes(root);
        }
    }
}

/// A pod bound to `node` (no scheduler involved) that mounts Secret `secret`.
fn pod_on(name: &str, node: &str, secret: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": node,
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "volumeMounts": [{"name": "s", "mountPath": "/etc/s"}]}],
        "volumes": [{"name": "s", "secret": {"secretName": secret}}]}})
    .to_string()
}

#[tokio::test]
async fn an_agent_gets_its_node_identity_and_reads_only_what_its_pods_need() {
    let cluster = TestCluster::start_server(&[
        "--service-cluster-ip-range=127.98.19.0/24",
        "--dns-service-ip=127.98.19.10",
    ]);
    let k = cluster.kubectl();
    let root = cluster.dir.path().join("edge");
    let _reap = Reap(vec![root.clone(), cluster.kubelet_root()]);
    let mut agent = cluster.spawn_agent(&[
        "--node-name",
        "edge",
        "--root-dir",
        root.to_str().unwrap(),
        "--no-nodeports",
    ]);

    // TLS bootstrap: the join token asked for a kubelet and a proxy certificate, the controllers
    // approved and signed both, and the node registered as itself.
    let registered = eventually(Duration::from_secs(90), || {
        k.run(&["get", "node", "edge"]).ok
    });
    assert!(
        registered,
        "node edge never registered: {}",
        agent.log_text()
    );
    let csrs: Value = serde_json::from_str(&k.ok(&["get", "csr", "-o", "json"])).unwrap();
    let mut issued: Vec<(String, String)> = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["spec"]["username"] == "system:bootstrap:skiff")
        .map(|c| {
            let approved = c["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Approved"));
            assert!(approved, "{c}");
            assert!(c["status"]["certificate"].is_string(), "{c}");
            let groups = &c["spec"]["groups"];
            assert!(
                groups.to_string().contains("system:bootstrappers"),
                "{groups}"
            );
            (
                c["spec"]["signerName"].as_str().unwrap().to_string(),
                c["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    issued.sort();
    assert_eq!(issued.len(), 2, "{issued:?}");
    assert_eq!(issued[0].0, "kubernetes.io/kube-apiserver-client");
    assert_eq!(issued[1].0, "kubernetes.io/kube-apiserver-client-kubelet");

    let pki = root.join("pki");
    let edge = cluster.kubectl_with_certificate(
        "edge",
        &pki.join("kubelet-client.crt"),
        &pki.join("kubelet-client.key"),
    );
    let whoami: Value = serde_json::from_str(&edge.ok(&["auth", "whoami", "-o", "json"])).unwrap();
    assert_eq!(whoami["status"]["userInfo"]["username"], "system:node:edge");
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        json!(["system:nodes", "system:authenticated"])
    );

    // The Node authorizer: a node reads the Secret of a pod bound to it, not one of a pod bound
    // elsewhere, and lists no Secrets at all.
    k.ok(&[
        "create",
        "secret",
        "generic",
        "mine",
        "--from-literal=k=edge",
    ]);
    k.ok(&[
        "create",
        "secret",
        "generic",
        "theirs",
        "--from-literal=k=far",
    ]);
    k.ok_with_input(&["apply", "-f", "-"], &pod_on("here", "edge", "mine"));
    k.ok_with_input(
        &["apply", "-f", "-"],
        &pod_on("there", "far-away", "theirs"),
    );
    let readable = eventually(Duration::from_secs(20), || {
        edge.run(&["get", "secret", "mine"]).ok
    });
    assert!(readable, "edge cannot read the Secret its pod mounts");
    let refused = edge.run(&["get", "secret", "theirs"]);
    assert!(!refused.ok);
    assert!(
        refused
            .stderr
            .contains("no relationship found between node 'edge' and this object"),
        "{}",
        refused.stderr
    );
    let listed = edge.run(&["get", "secrets"]);
    assert!(
        !listed.ok && listed.stderr.contains("Forbidden"),
        "{}",
        listed.stderr
    );
    // The kubelet itself, under that identity, mounted it and started the pod.
    until_phase(&k, "here", "Running");

    // NodeRestriction: its own Node's labels but another Node's not, and never the labels kept
    // for the cluster's administrators.
    let main = k
        .ok(&[
            "get",
            "nodes",
            "-o",
            "jsonpath={.items[?(@.metadata.name!=\"edge\")].metadata.name}",
        ])
        .trim()
        .to_string();
    assert!(!main.is_empty());
    edge.ok(&["label", "node", "edge", "rack=r1"]);
    let other = edge.run(&["label", "node", &main, "rack=r1"]);
    assert!(
        !other.ok && other.stderr.contains("Forbidden"),
        "{}",
        other.stderr
    );
    let reserved = edge.run(&[
        "label",
        "node",
        "edge",
        "node-restriction.kubernetes.io/pool=a",
    ]);
    assert!(
        !reserved.ok && reserved.stderr.contains("node-restriction.kubernetes.io/"),
        "{}",
        reserved.stderr
    );
    // Pods it does not run are not its to delete.
    let deleted = edge.run(&["delete", "pod", "there", "--wait=false"]);
    assert!(
        !deleted.ok && deleted.stderr.contains("Forbidden"),
        "{}",
        deleted.stderr
    );

    // A restart reuses the issued certificates: no new requests.
    agent.restart_after_crash();
    let reused = eventually(Duration::from_secs(30), || {
        agent
            .log_text()
            .matches("using the stored client certificate")
            .count()
            == 2
    });
    assert!(reused, "{}", agent.log_text());
    let after: Value = serde_json::from_str(&k.ok(&["get", "csr", "-o", "json"])).unwrap();
    assert_eq!(after["items"].as_array().unwrap().len(), 2, "{after}");
    agent.stop();
}

#[tokio::test]
async fn a_user_certificate_is_requested_approved_and_used() {
    let cluster = TestCluster::start_server(&["--components", "controllers"]);
    let k = cluster.kubectl();
    let request = |name: &str, organization: &str| {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, organization);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        let csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name}, "spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(pem),
                "signerName": "kubernetes.io/kube-apiserver-client",
                "expirationSeconds": 3600,
                "usages": ["client auth"]}});
        (csr.to_string(), key.serialize_pem())
    };

    // Nobody may be issued a system:masters certificate through the API.
    let (masters, _) = request("mallory", "system:masters");
    let refused = k.run_with_input(&["create", "-f", "-"], &masters);
    assert!(
        !refused.ok && refused.stderr.contains("system:masters"),
        "{}",
        refused.stderr
    );

    // An ordinary user's request waits for an administrator: the controllers do not approve it.
    let (csr, key) = request("alice", "devs");
    k.ok_with_input(&["create", "-f", "-"], &csr);
    std::thread::sleep(Duration::from_secs(2));
    let pending = k.ok(&["get", "csr", "alice", "-o", "jsonpath={.status}"]);
    assert!(!pending.contains("Approved"), "{pending}");
    assert!(k.ok(&["get", "csr", "alice"]).contains("Pending"));

    k.ok(&["certificate", "approve", "alice"]);
    let mut cert = String::new();
    let signed = eventually(Duration::from_secs(20), || {
        cert = k.ok(&[
            "get",
            "csr",
            "alice",
            "-o",
            "jsonpath={.status.certificate}",
        ]);
        !cert.trim().is_empty()
    });
    assert!(signed, "never signed");
    let cert_pem = base64::engine::general_purpose::STANDARD
        .decode(cert.trim())
        .unwrap();
    let dir = cluster.dir.path();
    std::fs::write(dir.join("alice.crt"), cert_pem).unwrap();
    std::fs::write(dir.join("alice.key"), key).unwrap();
    let alice =
        cluster.kubectl_with_certificate("alice", &dir.join("alice.crt"), &dir.join("alice.key"));
    let whoami: Value = serde_json::from_str(&alice.ok(&["auth", "whoami", "-o", "json"])).unwrap();
    assert_eq!(whoami["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        whoami["status"]["userInfo"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    // Authenticated is not authorized: RBAC grants alice nothing yet.
    let pods = alice.run(&["get", "pods"]);
    assert!(
        !pods.ok && pods.stderr.contains("Forbidden"),
        "{}",
        pods.stderr
    );
    k.ok(&[
        "create",
        "rolebinding",
        "devs-view",
        "--clusterrole=view",
        "--group=devs",
    ]);
    let granted = eventually(Duration::from_secs(10), || alice.run(&["get", "pods"]).ok);
    assert!(granted, "the devs group's binding never applied to alice");

    // A denied request is never signed.
    let (csr, _) = request("bob", "devs");
    k.ok_with_input(&["create", "-f", "-"], &csr);
    k.ok(&["certificate", "deny", "bob"]);
    std::thread::sleep(Duration::from_secs(2));
    let status = k.ok(&["get", "csr", "bob", "-o", "json"]);
    let status: Value = serde_json::from_str(&status).unwrap();
    assert!(status["status"]["certificate"].is_null(), "{status}");
    assert!(k.ok(&["get", "csr", "bob"]).contains("Denied"));
}

#[tokio::test]
async fn a_running_agent_renews_its_certificates_before_they_expire() {
    // Certificates of two minutes (issued five minutes back-dated): due 80% into their seven,
    // about 40 s after they are issued.
    let cluster = TestCluster::start_server(&[
        "--service-cluster-ip-range=127.98.21.0/24",
        "--dns-service-ip=127.98.21.10",
        "--cluster-signing-duration=2m",
    ]);
    let k = cluster.kubectl();
    let root = cluster.dir.path().join("short");
    let _reap = Reap(vec![root.clone(), cluster.kubelet_root()]);
    let mut agent = cluster.spawn_agent(&[
        "--node-name",
        "short",
        "--root-dir",
        root.to_str().unwrap(),
        "--no-nodeports",
    ]);
    let registered = eventually(Duration::from_secs(90), || {
        k.run(&["get", "node", "short"]).ok
    });
    assert!(
        registered,
        "node short never registered: {}",
        agent.log_text()
    );
    let cert = root.join("pki/kubelet-client.crt");
    let first = std::fs::read_to_string(&cert).unwrap();

    let renewed = eventually(Duration::from_secs(120), || {
        agent
            .log_text()
            .contains("restarting with the renewed client certificates")
    });
    assert!(renewed, "{}", agent.log_text());
    // Both identities at once: one restart renews them all.
    assert_eq!(
        agent
            .log_text()
            .matches("renewed the client certificate")
            .count(),
        2,
        "{}",
        agent.log_text()
    );
    assert!(agent.is_running(), "{}", agent.log_text());
    assert_ne!(std::fs::read_to_string(&cert).unwrap(), first);
    let csrs: Value = serde_json::from_str(&k.ok(&["get", "csr", "-o", "json"])).unwrap();
    assert!(csrs["items"].as_array().unwrap().len() >= 4, "{csrs}");
    // The node goes on as itself, with the new certificate.
    let edge =
        cluster.kubectl_with_certificate("short", &cert, &root.join("pki/kubelet-client.key"));
    let ready = eventually(Duration::from_secs(30), || {
        edge.run(&["label", "node", "short", "--overwrite", "renewed=yes"])
            .ok
            && k.ok(&[
                "get",
                "node",
                "short",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]) == "True"
    });
    assert!(ready, "{}", agent.log_text());
    agent.stop();
}

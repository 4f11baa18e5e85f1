//! The `skiff` command itself: flags, the config file, failing fast with a clear message, the
//! join token, `/metrics`, and graceful shutdown.

use std::process::{Command, Stdio};

use skiff_tests::{TestCluster, free_port, skiff_binary};

/// Runs `skiff args...` to completion; returns (exit success, stdout + stderr).
fn skiff(args: &[&str]) -> (bool, String) {
    let out = Command::new(skiff_binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running skiff");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn help_documents_every_flag_and_version_prints() {
    let (ok, text) = skiff(&["--version"]);
    assert!(ok && text.contains(env!("CARGO_PKG_VERSION")), "{text}");
    let (ok, text) = skiff(&["server", "--help"]);
    assert!(ok, "{text}");
    for flag in [
        "--data-dir",
        "--port",
        "--bind-address",
        "--config",
        "--log-format",
        "--history-revisions",
        "--container-runtime-endpoint",
    ] {
        assert!(text.contains(flag), "server --help lacks {flag}:\n{text}");
    }
    // The kubelet's runtime is chosen alike wherever a kubelet runs.
    for command in ["agent", "kubelet"] {
        let (ok, text) = skiff(&[command, "--help"]);
        assert!(
            ok && text.contains("--container-runtime-endpoint"),
            "{command} --help:\n{text}"
        );
    }
}

#[test]
fn a_second_server_on_a_live_data_dir_refuses() {
    let cluster = TestCluster::start(&[]);
    let port = free_port().to_string();
    let data_dir = cluster.data_dir();
    let (ok, text) = skiff(&[
        "apiserver",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--bind-address",
        "127.0.0.1",
        "--port",
        &port,
    ]);
    assert!(!ok, "a second server started:\n{text}");
    assert!(text.contains("locked"), "{text}");
    // The first one is unharmed.
    cluster.kubectl().ok(&["get", "namespaces"]);
}

#[test]
fn a_busy_port_and_an_unwritable_data_dir_fail_fast() {
    let cluster = TestCluster::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let port = cluster.port().to_string();
    let data = dir.path().join("data");
    let (ok, text) = skiff(&[
        "apiserver",
        "--data-dir",
        data.to_str().unwrap(),
        "--bind-address",
        "127.0.0.1",
        "--port",
        &port,
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains("cannot listen on 127.0.0.1:"), "{text}");

    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let under_file = file.join("data");
    let (ok, text) = skiff(&[
        "apiserver",
        "--data-dir",
        under_file.to_str().unwrap(),
        "--port",
        "0",
    ]);
    assert!(!ok, "{text}");
    assert!(text.contains("cannot create data dir"), "{text}");
}

#[test]
fn the_config_file_sets_flags_and_the_command_line_wins() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("skiff.yaml");
    std::fs::write(&config, "event-ttl: 5m\nprot: 1\n").unwrap();
    let (ok, text) = skiff(&[
        "apiserver",
        "--config",
        config.to_str().unwrap(),
        "--port",
        "0",
    ]);
    assert!(
        !ok && text.contains("\"prot\""),
        "an unknown key must be named:\n{text}"
    );

    // The file's port and bind address are used (the command line names neither).
    let port = free_port();
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            "port: {port}\nbind-address: 127.0.0.1\ndata-dir: {}\n",
            data.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(skiff_binary())
        .args(["apiserver", "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = skiff_tests::eventually(std::time::Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && data.join("admin.kubeconfig").exists()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        up,
        "the server did not listen on the port from the config file"
    );
}

#[tokio::test]
async fn metrics_report_requests_watches_and_the_log() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    k.ok(&["create", "configmap", "m1", "--from-literal=a=b"]);
    k.ok(&["get", "configmaps"]);
    let http = cluster.http();
    let unauthenticated = http
        .get(format!("{}/metrics", cluster.server))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let text = http
        .get(format!("{}/metrics", cluster.server))
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for needle in [
        "apiserver_request_total{verb=\"POST\",resource=\"configmaps\"",
        "apiserver_request_total{verb=\"LIST\",resource=\"configmaps\"",
        "apiserver_request_duration_seconds_bucket{verb=\"LIST\",resource=\"configmaps\"",
        "apiserver_registered_watchers",
        "skiff_log_revision",
        "skiff_log_commit_batch_size_bucket",
    ] {
        assert!(text.contains(needle), "/metrics lacks {needle}:\n{text}");
    }
}

#[tokio::test]
async fn the_join_token_pins_the_ca_and_authenticates() {
    let cluster = TestCluster::start(&[]);
    let token = cluster.join_token();
    assert!(token.starts_with("SKIFF1::"), "{token}");
    assert!(
        !token.contains(&cluster.token),
        "the join token is not the admin token"
    );
    let client = skiff_client::connect(&skiff_client::ClientConfig {
        server: Some(cluster.server.clone()),
        token: Some(token.clone()),
        ..Default::default()
    })
    .await
    .expect("joining with the token");
    // It authenticates as a bootstrapper, which RBAC lets ask for certificates and nothing more:
    // an agent's node identity comes from the certificate it is issued, not from this token.
    let requests: skiff_client::Api<k8s_openapi::api::certificates::v1::CertificateSigningRequest> =
        skiff_client::Api::all(client.clone());
    assert!(requests.list(&Default::default()).await.is_ok());
    let nodes: skiff_client::Api<k8s_openapi::api::core::v1::Node> =
        skiff_client::Api::all(client.clone());
    let refused = nodes
        .list(&Default::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("forbidden"), "{refused}");
    assert!(refused.contains("system:bootstrap:skiff"), "{refused}");
    let namespaces: skiff_client::Api<k8s_openapi::api::core::v1::Namespace> =
        skiff_client::Api::all(client);
    let refused = namespaces.get("default").await.unwrap_err().to_string();
    assert!(refused.contains("forbidden"), "{refused}");

    // A token whose hash names another CA is refused before anything is sent with it.
    let parsed = skiff_client::JoinToken::parse(&token).unwrap();
    let forged = skiff_client::JoinToken::new(b"another CA", &parsed.secret).to_string();
    let err = skiff_client::connect(&skiff_client::ClientConfig {
        server: Some(cluster.server.clone()),
        token: Some(forged),
        ..Default::default()
    })
    .await
    .err()
    .expect("connecting must fail");
    assert!(err.to_string().contains("refusing to trust"), "{err}");

    // An unreachable server is a clear error, not a hang.
    let err = skiff_client::connect(&skiff_client::ClientConfig {
        server: Some(format!("https://127.0.0.1:{}", free_port())),
        token: Some(token),
        ..Default::default()
    })
    .await
    .err()
    .expect("connecting must fail");
    assert!(
        err.to_string().contains("cannot reach the API server"),
        "{err}"
    );
}

#[test]
fn sigterm_exits_zero_and_the_restart_continues() {
    let mut cluster = TestCluster::start(&[]);
    cluster
        .kubectl()
        .ok(&["create", "configmap", "before", "--from-literal=a=b"]);
    let status = cluster.stop().expect("server was running");
    assert!(status.success(), "exit status {status}");
    cluster.restart();
    cluster.kubectl().ok(&["get", "configmap", "before"]);
}

/// A data dir whose log ends below its durable mark — what damage that cut sled's recovery short
/// leaves — is refused by the server and by `skiff repair`, each naming the way out; `skiff repair
/// --accept-lost-writes` gives the lost writes up, and the server starts on it again.
#[test]
fn a_log_cut_short_is_refused_until_repair_accepts_the_loss() {
    let mut cluster = TestCluster::start(&[]);
    cluster
        .kubectl()
        .ok(&["create", "configmap", "kept", "--from-literal=a=b"]);
    cluster.stop().expect("server was running");
    let data = cluster.data_dir();
    let data_arg = data.to_str().unwrap();
    let (ok, text) = skiff(&["repair", "--data-dir", data_arg]);
    assert!(ok, "{text}");
    let revision: u64 = text
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {text:?}"));

    // The mark now claims 1,000 revisions the log does not hold (both slots: revision, CRC-32
    // of its bytes, padding).
    let claimed = (revision + 1000).to_le_bytes();
    let mut slot = claimed.to_vec();
    slot.extend(crc32fast::hash(&claimed).to_le_bytes());
    slot.extend([0; 4]);
    std::fs::write(data.join("db").join("durable.mark"), slot.repeat(2)).unwrap();

    let (ok, text) = skiff(&["repair", "--data-dir", data_arg]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("a damaged record cut its recovery short")
            && text.contains(&format!("revision {} was acknowledged", revision + 1000))
            && text.contains("--accept-lost-writes"),
        "{text}"
    );
    let port = free_port().to_string();
    let mut server = Command::new(skiff_binary())
        .args([
            "apiserver",
            "--data-dir",
            data_arg,
            "--bind-address",
            "127.0.0.1",
        ])
        .args(["--port", &port])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = server.kill();
            panic!("the server started on a log cut short");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = server.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success());
    assert!(
        said.contains("a damaged record cut its recovery short"),
        "{said}"
    );

    let (ok, text) = skiff(&["repair", "--data-dir", data_arg, "--accept-lost-writes"]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("ends at revision {revision}")),
        "{text}"
    );
    cluster.restart();
    cluster.kubectl().ok(&["get", "configmap", "kept"]);
}

//! The pod manager on the CRI runtime against a containerd of the test's own
//! ([`skiff_tests::containerd`]): pulls, sandboxes with IPs on the test's bridge, init containers, restarts with `lastState`,
//! image pull errors, deletion, and a runtime that does not answer.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, EmptyDirVolumeSource, Pod, PodSpec, PodStatus, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use skiff_kubelet::pod::{self, Event, Manager, backoff};
use skiff_kubelet::runtime::Runtime;
use skiff_kubelet::runtime::cri::{self, CriRuntime};
use skiff_kubelet::spec::Sources;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use skiff_tests::containerd::{self as cri_lab, Lab};

const LIMIT: Duration = Duration::from_secs(60);
/// The node of the kubelet run against the API server.
const API_NODE: &str = "cri-node";

struct Node {
    manager: Manager,
    runtime: CriRuntime,
    events: mpsc::UnboundedReceiver<Event>,
    seen: Vec<Event>,
}

impl Node {
    async fn status_until(
        &mut self,
        uid: &str,
        what: &str,
        pred: impl Fn(&PodStatus) -> bool,
    ) -> PodStatus {
        let latest = self.seen.iter().rev().find_map(|e| match e {
            Event::Status { uid: u, status, .. } if u == uid => Some(status.clone()),
            _ => None,
        });
        if let Some(s) = latest.filter(|s| pred(s)) {
            return s;
        }
        let mut last = None;
        let wait = async {
            loop {
                let ev = self.events.recv().await.expect("manager alive");
                self.seen.push(ev.clone());
                if let Event::Status { uid: u, status, .. } = ev
                    && u == uid
                {
                    if pred(&status) {
                        return status;
                    }
                    last = Some(status);
                }
            }
        };
        match tokio::time::timeout(LIMIT, wait).await {
            Ok(s) => s,
            Err(_) => panic!("{what}: not reached in {LIMIT:?}; last status {last:#?}"),
        }
    }

    async fn terminated(&mut self, uid: &str) {
        if self
            .seen
            .iter()
            .any(|e| matches!(e, Event::Terminated { uid: u, .. } if u == uid))
        {
            return;
        }
        let wait = async {
            loop {
                let ev = self.events.recv().await.expect("manager alive");
                self.seen.push(ev.clone());
                if matches!(&ev, Event::Terminated { uid: u, .. } if u == uid) {
                    return;
                }
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .expect("terminated in time");
    }
}

fn container<'a>(s: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no status of {name}"))
}

fn sh(name: &str, image: &str, script: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn pod(uid: &str, init: Vec<Container>, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            labels: Some(BTreeMap::from([("app".into(), "cri-test".into())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: (!init.is_empty()).then_some(init),
            containers,
            termination_grace_period_seconds: Some(1),
            volumes: Some(vec![Volume {
                name: "data".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

fn running(s: &PodStatus, name: &str) -> bool {
    container(s, name)
        .state
        .as_ref()
        .is_some_and(|st| st.running.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_in_containerd_with_ips_restarts_and_pull_errors() {
    if !cri_lab::available() {
        return;
    }
    let mut lab = tokio::task::spawn_blocking(Lab::start).await.unwrap();
    let root = lab.dir.path().join("kubelet");
    let mut config = cri::Config::new(&lab.socket, "cri-test-node");
    config.relist_period = Duration::from_millis(200);
    config.cgroup_parent = Some(lab.cgroup_parent.clone());
    let runtime = CriRuntime::connect(config).await;

    let result = tokio::time::timeout(Duration::from_secs(150), async {
        scenario(&lab, &root, &runtime).await;
        api_scenario(&lab).await;
    })
    .await;
    // Clean-up through CRI first (stops and removes sandboxes, so containerd reaps them), then
    // the lab itself, whatever the outcome.
    let removed = runtime.remove_all().await;
    let api_node = CriRuntime::new(cri::Config::new(&lab.socket, API_NODE));
    let removed = removed.and(api_node.remove_all().await);
    lab.teardown();
    let left = lab.leftovers();
    match result {
        Ok(()) => {}
        Err(_) => panic!("scenario timed out; containerd log:\n{}", lab.log()),
    }
    removed.expect("sandboxes removed through CRI");
    assert!(left.is_empty(), "left behind: {left:?}");
}

async fn scenario(lab: &Lab, root: &std::path::Path, runtime: &CriRuntime) {
    // Version and health from the runtime itself.
    let version = runtime.version().await.expect("Version answers");
    assert_eq!(version.name, "containerd");
    assert!(!version.version.is_empty());
    // The CNI config may take a moment to be read.
    let mut healthy = runtime.health().await;
    for _ in 0..50 {
        if healthy.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        healthy = runtime.health().await;
    }
    healthy.expect("runtime and network ready");

    let (tx, events) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let manager = Manager::new(
        pod::Config {
            root_dir: root.to_path_buf(),
            host_ip: "127.0.0.1".parse().unwrap(),
            backoff: backoff::Config {
                base: Duration::from_millis(300),
                max: Duration::from_secs(1),
                reset_after: Duration::from_secs(600),
            },
            resync: Duration::from_secs(1),
            cluster_dns: Default::default(),
        },
        Arc::new(runtime.clone()) as Arc<dyn Runtime>,
        "127.100.9.0/24".parse().unwrap(),
        Arc::new(Sources::default()),
        tx,
        shutdown.clone(),
    )
    .unwrap();
    let mut node = Node {
        manager,
        runtime: runtime.clone(),
        events,
        seen: Vec::new(),
    };

    // An init container writes into an emptyDir, the server serves it over the bridge, and a
    // third container exits 3 every time.
    let web = pod(
        "cri-web",
        vec![sh("init", &lab.image, "echo init-done > /data/ok")],
        vec![
            sh(
                "server",
                &lab.image,
                "cp /data/ok /www/ok && exec httpd -f -p 8080 -h /www",
            ),
            sh("crash", &lab.image, "echo crashing; exit 3"),
        ],
    );
    node.manager.update(web.clone());
    let s = node
        .status_until("cri-web", "server running, crash restarted", |s| {
            s.pod_ip.is_some()
                && running(s, "server")
                && container(s, "crash").restart_count >= 1
                && container(s, "crash")
                    .last_state
                    .as_ref()
                    .is_some_and(|l| l.terminated.is_some())
        })
        .await;
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let ip: IpAddr = s.pod_ip.clone().unwrap().parse().unwrap();
    assert!(
        ip.to_string().starts_with(&lab.subnet_prefix),
        "pod IP {ip} is on the test's bridge {}0/24",
        lab.subnet_prefix
    );
    assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, ip.to_string());
    let init = container(&s, "init");
    let done = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (done.exit_code, done.reason.as_deref()),
        (0, Some("Completed"))
    );
    let server = container(&s, "server");
    assert!(
        server
            .container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://"),
        "{server:?}"
    );
    assert!(!server.image_id.is_empty(), "imageID from the runtime");
    assert_eq!(server.image, lab.image);
    let crash = container(&s, "crash");
    let last = crash
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(last.exit_code, 3);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    assert!(
        last.container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://")
    );

    // What the teardown relies on to clean up after killed shims: where their sockets are (one
    // shim serves a sandbox and its containers, so one socket among the tasks' names).
    let sockets = lab.shim_sockets();
    assert!(
        sockets.iter().any(|s| s.exists()),
        "shim sockets where the lab expects them: {sockets:?}"
    );

    // The host reaches the pod on the bridge; the page came through the init container's volume.
    let addr = SocketAddr::new(ip, 8080);
    let mut body = Err(std::io::Error::other("not tried"));
    for _ in 0..50 {
        body = tokio::task::spawn_blocking(move || cri_lab::http_get(addr, "/ok"))
            .await
            .unwrap();
        if body.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body.expect("pod answers over the bridge"), "init-done\n");

    // Exec through CRI (what exec probes use), and the pod's own hostname.
    let server_id = server
        .container_id
        .as_deref()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let out = node
        .runtime
        .exec(
            &server_id,
            &["/bin/sh".into(), "-c".into(), "hostname; exit 4".into()],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 4);
    assert_eq!(String::from_utf8_lossy(&out.output), "pod-cri-web\n");

    // containerd wrote the container's log where the kubelet reads logs from.
    let log_dir = pod::log_dir(root, "default", "pod-cri-web", "cri-web");
    let (current, _) = pod::container_logs(&log_dir, "crash");
    let log = skiff_kubelet::logs::read(&current.unwrap(), &Default::default()).unwrap();
    assert_eq!(String::from_utf8_lossy(&log), "crashing\n");

    // A missing image: ErrImagePull with the runtime's message, then ImagePullBackOff.
    let missing = format!("{}/missing:v1", lab.registry);
    let ghost = pod("cri-ghost", vec![], vec![sh("ghost", &missing, "true")]);
    node.manager.update(ghost.clone());
    let s = node
        .status_until("cri-ghost", "ErrImagePull", |s| {
            container(s, "ghost")
                .state
                .as_ref()
                .and_then(|st| st.waiting.as_ref())
                .is_some_and(|w| w.reason.as_deref() == Some("ErrImagePull"))
        })
        .await;
    let waiting = container(&s, "ghost")
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    let message = waiting.message.unwrap();
    assert!(
        message.contains("missing") && message.contains("not found"),
        "{message}"
    );
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    node.status_until("cri-ghost", "ImagePullBackOff", |s| {
        container(s, "ghost")
            .state
            .as_ref()
            .and_then(|st| st.waiting.as_ref())
            .is_some_and(|w| w.reason.as_deref() == Some("ImagePullBackOff"))
    })
    .await;

    // Deletion: containers stopped within the grace period, the sandboxes removed.
    for mut gone in [web, ghost] {
        gone.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        gone.metadata.deletion_grace_period_seconds = Some(1);
        node.manager.update(gone);
    }
    node.terminated("cri-web").await;
    node.terminated("cri-ghost").await;
    let final_web = node
        .seen
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Status { uid, status, .. } if uid == "cri-web" => Some(status.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        container(&final_web, "server")
            .state
            .as_ref()
            .is_some_and(|st| st.terminated.is_some()),
        "{final_web:?}"
    );
    assert!(
        node.runtime.sandbox_pods().await.unwrap().is_empty(),
        "sandboxes removed with their pods"
    );
    assert!(node.runtime.list(None).is_empty());
    node.manager.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_runtime_that_does_not_answer_is_unhealthy_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let rt = CriRuntime::connect(cri::Config::new(dir.path().join("none.sock"), "n")).await;
    let err = rt.health().await.unwrap_err();
    assert!(err.to_string().contains("CRI Status"), "{err}");
    assert!(rt.version().await.is_err());
    assert!(rt.list(None).is_empty());
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    options: skiff_kubelet::Options,
}

/// The whole kubelet (`skiff_kubelet::run`) on containerd against a real API server: the node
/// reports containerd's version and gets Ready, a pod created through the API runs with an IP
/// on the bridge, and its deletion completes.
async fn api_scenario(lab: &Lab) {
    use clap::Parser;
    use skiff_client::Api;
    use skiff_client::api::{DeleteParams, PostParams};

    skiff_tests::install_crypto();
    let cluster = tokio::task::spawn_blocking(|| skiff_tests::TestCluster::start(&[]))
        .await
        .unwrap();
    let client = skiff_client::connect(&skiff_client::ClientConfig {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let root = lab.dir.path().join("kubelet-api");
    let endpoint = format!("unix://{}", lab.socket.display());
    let options = Cli::parse_from([
        "kubelet",
        "--node-name",
        API_NODE,
        "--root-dir",
        root.to_str().unwrap(),
        "--node-status-update-frequency",
        "1s",
        "--sync-frequency",
        "1s",
        "--container-runtime-endpoint",
        &endpoint,
        "--cgroup-root",
        &lab.cgroup_parent,
    ])
    .options;
    let shutdown = CancellationToken::new();
    let kubelet = tokio::spawn(skiff_kubelet::run(
        client.clone(),
        options,
        shutdown.clone(),
    ));

    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = wait(LIMIT, "node Ready on containerd", || async {
        let node = nodes.get_opt(API_NODE).await.ok().flatten()?;
        let status = node.status.clone()?;
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(node)
    })
    .await;
    let version = node
        .status
        .unwrap()
        .node_info
        .unwrap()
        .container_runtime_version;
    let answered = CriRuntime::new(cri::Config::new(&lab.socket, API_NODE))
        .version()
        .await
        .unwrap();
    assert_eq!(version, format!("containerd://{}", answered.version));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut p = pod(
        "api",
        vec![],
        vec![sh("c", &lab.image, "while true; do sleep 1; done")],
    );
    p.metadata.uid = None;
    p.spec.as_mut().unwrap().node_name = Some(API_NODE.into());
    pods.create(&PostParams::default(), &p).await.unwrap();
    let running = wait(LIMIT, "API pod Running", || async {
        let p = pods.get_opt("pod-api").await.ok().flatten()?;
        let status = p.status.clone()?;
        (status.phase.as_deref() == Some("Running") && status.pod_ip.is_some()).then_some(status)
    })
    .await;
    let ip = running.pod_ip.clone().unwrap();
    assert!(ip.starts_with(&lab.subnet_prefix), "{ip}");
    let c = container(&running, "c");
    assert!(
        c.container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://")
    );
    assert!(!c.image_id.is_empty());

    pods.delete("pod-api", &DeleteParams::default())
        .await
        .unwrap();
    wait(LIMIT, "API pod deleted", || async {
        match pods.get_opt("pod-api").await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    shutdown.cancel();
    kubelet.await.unwrap().unwrap();
    drop(cluster);
}

async fn wait<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

//! The pod manager with the real process runtime: pods of `sh` loops driven through their
//! lifecycle (init containers, restarts and back-off, probes, deletion, kubelet restarts).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ExecAction, Pod, PodSpec, PodStatus, Probe,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use skiff_kubelet::pod::{self, Event, Manager, backoff};
use skiff_kubelet::runtime::Runtime;
use skiff_kubelet::runtime::process::{Config as RuntimeConfig, ProcessRuntime};
use skiff_kubelet::spec::Sources;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Every wait in these tests is bounded so a broken kubelet fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(60);

struct Node {
    root: PathBuf,
    manager: Manager,
    runtime: Arc<ProcessRuntime>,
    events: mpsc::UnboundedReceiver<Event>,
    shutdown: CancellationToken,
    seen: Vec<Event>,
    /// Stopped (or crashed on purpose): nothing to clean up on drop.
    done: bool,
}

impl Drop for Node {
    fn drop(&mut self) {
        // A test that failed half-way must not leave its pods' processes behind.
        if !self.done {
            self.shutdown.cancel();
            self.runtime.kill_all();
        }
    }
}

fn start_node(root: &Path, sources: Sources) -> Node {
    let runtime = Arc::new(
        ProcessRuntime::open(RuntimeConfig {
            state_dir: root.join("containers"),
            cgroup_root: None,
            log_max_size: 1 << 20,
            log_max_files: 2,
            health_program: "true".into(),
        })
        .unwrap(),
    );
    let (tx, events) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let manager = Manager::new(
        pod::Config {
            root_dir: root.to_path_buf(),
            host_ip: "127.0.0.1".parse().unwrap(),
            backoff: backoff::Config {
                base: Duration::from_millis(200),
                max: Duration::from_secs(1),
                reset_after: Duration::from_secs(600),
            },
            resync: Duration::from_secs(1),
            cluster_dns: Default::default(),
        },
        runtime.clone() as Arc<dyn Runtime>,
        "127.100.7.0/24".parse().unwrap(),
        Arc::new(sources),
        tx,
        shutdown.clone(),
    )
    .unwrap();
    Node {
        root: root.to_path_buf(),
        manager,
        runtime,
        events,
        shutdown,
        seen: Vec::new(),
        done: false,
    }
}

impl Node {
    /// The kubelet's graceful shutdown, awaited: stops every container.
    async fn stop(mut self) {
        self.manager.shutdown(Duration::from_secs(5)).await;
        self.done = true;
    }

    /// The kubelet dies without stopping anything (as under SIGKILL): its processes run on.
    fn crash(mut self) {
        self.shutdown.cancel();
        self.done = true;
    }

    /// Waits for a status of `uid` satisfying `pred` (the latest status already received counts:
    /// statuses are only sent on change).
    async fn status_until(&mut self, uid: &str, pred: impl Fn(&PodStatus) -> bool) -> PodStatus {
        let latest = self.seen.iter().rev().find_map(|e| match e {
            Event::Status { uid: u, status, .. } if u == uid => Some(status.clone()),
            _ => None,
        });
        if let Some(s) = latest.filter(|s| pred(s)) {
            return s;
        }
        let wait = async {
            loop {
                let ev = self.events.recv().await.expect("manager alive");
                self.seen.push(ev.clone());
                if let Event::Status { uid: u, status, .. } = ev {
                    if u == uid && pred(&status) {
                        return status;
                    }
                }
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .expect("status reached in time")
    }

    /// Waits for the next status of `uid` sent from now on.
    async fn next_status(&mut self, uid: &str) -> PodStatus {
        let wait = async {
            loop {
                let ev = self.events.recv().await.expect("manager alive");
                self.seen.push(ev.clone());
                if let Event::Status { uid: u, status, .. } = ev {
                    if u == uid {
                        return status;
                    }
                }
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .expect("a status in time")
    }

    async fn terminated(&mut self, uid: &str) {
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
            .expect("terminated in time")
    }

    /// The pid of the latest run of `container` in pod `uid`, from the process runtime's record.
    fn pid_of(&self, uid: &str, container: &str) -> i32 {
        let c = self
            .runtime
            .list(Some(uid))
            .into_iter()
            .filter(|c| c.config.name == container)
            .last()
            .unwrap();
        let rec: serde_json::Value = serde_json::from_slice(
            &std::fs::read(self.root.join("containers").join(format!("{}.json", c.id))).unwrap(),
        )
        .unwrap();
        rec["pid"].as_i64().unwrap() as i32
    }

    fn reasons(&self) -> Vec<String> {
        self.seen
            .iter()
            .filter_map(|e| match e {
                Event::Record { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .collect()
    }
}

fn sh(name: &str, script: &str) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox:1.36".into()),
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    }
}

fn pod_of(uid: &str, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("n1".into()),
            containers,
            termination_grace_period_seconds: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cond(s: &PodStatus, t: &str) -> String {
    s.conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == t)
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

fn container<'a>(s: &'a PodStatus, name: &str) -> &'a k8s_openapi::api::core::v1::ContainerStatus {
    s.container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap()
}

fn waiting_reason(s: &PodStatus, name: &str) -> Option<String> {
    container(s, name)
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn log_of(root: &Path, pod: &Pod, container: &str) -> String {
    let dir = pod::log_dir(
        root,
        pod.metadata.namespace.as_deref().unwrap(),
        pod.metadata.name.as_deref().unwrap(),
        pod.metadata.uid.as_deref().unwrap(),
    );
    let (current, _) = pod::container_logs(&dir, container);
    String::from_utf8(skiff_kubelet::logs::read(&current.unwrap(), &Default::default()).unwrap())
        .unwrap()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        .unwrap_or(false)
}

#[tokio::test]
async fn init_then_running_with_pod_ip_env_and_config_volume() {
    let dir = tempfile::tempdir().unwrap();
    let mut sources = Sources::default();
    sources.config_maps.insert(
        "cfg".into(),
        ConfigMap {
            data: Some(BTreeMap::from([("greeting".into(), "hello".into())])),
            ..Default::default()
        },
    );
    let mut node = start_node(dir.path(), sources);
    let mut main = sh(
        "main",
        "echo ip=$POD_IP; cat etc/cfg/greeting; echo; cat $SHARED/init-was-here; while true; do sleep 1; done",
    );
    main.volume_mounts = Some(vec![VolumeMount {
        name: "cfg".into(),
        mount_path: "/etc/cfg".into(),
        ..Default::default()
    }]);
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    main.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
        name: "SHARED".into(),
        value: Some(shared.display().to_string()),
        value_from: None,
    }]);
    let mut p = pod_of("u1", vec![main]);
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers = Some(vec![sh(
        "init",
        &format!("echo done > {}/init-was-here", shared.display()),
    )]);
    spec.volumes = Some(vec![Volume {
        name: "cfg".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: "cfg".into(),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    node.manager.update(p.clone());

    let pending = node
        .status_until("u1", |s| s.phase.as_deref() == Some("Pending"))
        .await;
    assert_eq!(cond(&pending, "PodScheduled"), "True");
    let s = node
        .status_until("u1", |s| cond(s, "Ready") == "True")
        .await;
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Initialized"), "True");
    let ip = s.pod_ip.clone().unwrap();
    assert!(ip.starts_with("127.100.7."), "{ip}");
    assert_eq!(s.host_ip.as_deref(), Some("127.0.0.1"));
    assert!(s.start_time.is_some());
    let init = &s.init_container_statuses.as_ref().unwrap()[0];
    let t = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    let main = container(&s, "main");
    assert!(main.ready && main.started == Some(true));
    assert_eq!(main.restart_count, 0);

    // The log shows the env, the config volume and the init container's work.
    let wait_log = async {
        loop {
            let log = log_of(&node.root, &p, "main");
            if log.contains("done") {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let log = tokio::time::timeout(LIMIT, wait_log).await.unwrap();
    assert_eq!(log, format!("ip={ip}\nhello\ndone\n"));
    assert!(node.reasons().contains(&"Started".to_string()));

    // Deleting: processes stop, deletion is confirmed, the IP and directories are freed.
    let pid_of_main = node.runtime.list(Some("u1")).len();
    assert_eq!(pid_of_main, 2, "init and main runs");
    p.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    p.metadata.deletion_grace_period_seconds = Some(5);
    node.manager.update(p.clone());
    node.terminated("u1").await;
    assert!(node.runtime.list(Some("u1")).is_empty());
    assert!(!dir.path().join("pods/u1").exists());
    assert!(!dir.path().join("ipam").join(&ip).exists());
    assert!(node.reasons().contains(&"Killing".to_string()));
    node.stop().await;
}

#[tokio::test]
async fn crashing_container_backs_off_with_growing_restart_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = start_node(dir.path(), Sources::default());
    node.manager
        .update(pod_of("u2", vec![sh("crash", "echo boom; exit 3")]));
    let s = node
        .status_until("u2", |s| {
            waiting_reason(s, "crash").as_deref() == Some("CrashLoopBackOff")
                && container(s, "crash").restart_count >= 2
        })
        .await;
    let c = container(&s, "crash");
    let last = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (3, Some("Error")));
    assert_eq!(
        s.phase.as_deref(),
        Some("Running"),
        "Always keeps restarting"
    );
    assert_eq!(cond(&s, "Ready"), "False");
    assert!(node.reasons().contains(&"BackOff".to_string()));
    node.stop().await;
}

#[tokio::test]
async fn restart_policies_end_in_succeeded_or_failed() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = start_node(dir.path(), Sources::default());
    let mut ok = pod_of("ok", vec![sh("c", "exit 0")]);
    ok.spec.as_mut().unwrap().restart_policy = Some("OnFailure".into());
    let mut bad = pod_of("bad", vec![sh("c", "exit 1")]);
    bad.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    let mut init_bad = pod_of("init-bad", vec![sh("c", "sleep 100")]);
    init_bad.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    init_bad.spec.as_mut().unwrap().init_containers = Some(vec![sh("i", "exit 2")]);
    node.manager.update(ok);
    node.manager.update(bad);
    node.manager.update(init_bad);
    let s = node
        .status_until("ok", |s| s.phase.as_deref() == Some("Succeeded"))
        .await;
    assert_eq!(container(&s, "c").restart_count, 0);
    assert_eq!(cond(&s, "Ready"), "False");
    let s = node
        .status_until("bad", |s| s.phase.as_deref() == Some("Failed"))
        .await;
    assert_eq!(container(&s, "c").restart_count, 0);
    let s = node
        .status_until("init-bad", |s| s.phase.as_deref() == Some("Failed"))
        .await;
    assert!(container(&s, "c").state.as_ref().unwrap().running.is_none());
    assert!(
        node.runtime
            .list(Some("init-bad"))
            .iter()
            .all(|c| c.config.name == "i")
    );
    node.stop().await;
}

fn exec_probe(script: &str) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

#[tokio::test]
async fn liveness_failure_restarts_and_readiness_flips_ready() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = start_node(dir.path(), Sources::default());
    let flag = dir.path().join("ready-flag");
    let mut c = sh("c", "while true; do sleep 1; done");
    c.readiness_probe = Some(exec_probe(&format!("test -e {}", flag.display())));
    let mut sick = sh("sick", "while true; do sleep 1; done");
    // Healthy on its first run only (attempt 0 creates the marker, later runs find it).
    sick.liveness_probe = Some(exec_probe(
        "test -e $POD_ROOT/marker || { touch $POD_ROOT/marker; false; }",
    ));
    let p = pod_of("u3", vec![c, sick]);
    node.manager.update(p);
    let s = node
        .status_until("u3", |s| container(s, "sick").restart_count >= 1)
        .await;
    assert!(!container(&s, "c").ready, "readiness probe not yet passing");
    assert!(node.reasons().contains(&"Unhealthy".to_string()));
    std::fs::write(&flag, b"").unwrap();
    node.status_until("u3", |s| container(s, "c").ready).await;
    std::fs::remove_file(&flag).unwrap();
    let s = node.status_until("u3", |s| !container(s, "c").ready).await;
    assert_eq!(cond(&s, "ContainersReady"), "False");
    assert_eq!(
        container(&s, "c").restart_count,
        0,
        "readiness never restarts"
    );
    node.stop().await;
}

/// Another writer's status (the node lifecycle controller marking the pod not ready while the
/// node was unreachable) is overruled by the kubelet's own, but only once the API server's copy
/// has had a resync interval (1 s here) to show the kubelet's last report.
#[tokio::test]
async fn a_status_changed_by_another_writer_is_reported_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = start_node(dir.path(), Sources::default());
    let p = pod_of("u9", vec![sh("c", "while true; do sleep 1; done")]);
    node.manager.update(p.clone());
    let ours = node
        .status_until("u9", |s| cond(s, "Ready") == "True")
        .await;
    let reported = tokio::time::Instant::now();
    let statuses = |node: &Node| {
        node.seen
            .iter()
            .filter(|e| matches!(e, Event::Status { uid, .. } if uid == "u9"))
            .count()
    };
    let before = statuses(&node);

    // The API server's copy as another writer left it: Ready False.
    let mut theirs = ours.clone();
    for c in theirs.conditions.iter_mut().flatten() {
        if c.type_ == "Ready" || c.type_ == "ContainersReady" {
            c.status = "False".into();
            c.reason = Some("NodeNotReady".into());
        }
    }
    let mut marked = p.clone();
    marked.status = Some(theirs);
    node.manager.update(marked);
    let again = node.next_status("u9").await;
    assert!(
        reported.elapsed() >= Duration::from_secs(1),
        "not before the resync interval since the last report"
    );
    assert_eq!(again, ours, "the kubelet's own status, unchanged");
    assert_eq!(statuses(&node), before + 1);

    // Once the API server shows the kubelet's status, nothing more is sent.
    let mut agreed = p.clone();
    agreed.status = Some(ours);
    node.manager.update(agreed);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    while let Ok(ev) = node.events.try_recv() {
        node.seen.push(ev);
    }
    assert_eq!(
        statuses(&node),
        before + 1,
        "no report while the copies agree"
    );
    node.stop().await;
}

#[tokio::test]
async fn spec_change_restarts_container_and_grace_escalates_to_kill() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = start_node(dir.path(), Sources::default());
    let stubborn = "trap '' TERM; touch $POD_ROOT/trapped; while true; do sleep 1; done";
    let mut p = pod_of("u4", vec![sh("c", stubborn)]);
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(1);
    node.manager.update(p.clone());
    node.status_until("u4", |s| s.phase.as_deref() == Some("Running"))
        .await;
    // Change the spec only once the shell ignores TERM.
    let trapped = dir.path().join("pods/u4/roots/c/trapped");
    let wait = async {
        while !trapped.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(LIMIT, wait).await.unwrap();
    p.spec.as_mut().unwrap().containers[0].image = Some("busybox:1.37".into());
    node.manager.update(p.clone());
    let s = node
        .status_until("u4", |s| {
            let c = container(s, "c");
            c.restart_count == 1 && c.state.as_ref().unwrap().running.is_some()
        })
        .await;
    let last = container(&s, "c")
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    assert_eq!(
        last.exit_code, 137,
        "TERM ignored: killed after the 1 s grace"
    );
    assert_eq!(container(&s, "c").image, "busybox:1.37");
    node.stop().await;
}

#[tokio::test]
async fn restarted_kubelet_leaves_no_orphans_or_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let p = pod_of("u5", vec![sh("c", "while true; do sleep 1; done")]);
    let gone = pod_of("u6", vec![sh("c", "while true; do sleep 1; done")]);
    let (pid, gone_pid) = {
        let mut node = start_node(dir.path(), Sources::default());
        node.manager.update(p.clone());
        node.manager.update(gone.clone());
        node.status_until("u5", |s| s.phase.as_deref() == Some("Running"))
            .await;
        node.status_until("u6", |s| s.phase.as_deref() == Some("Running"))
            .await;
        let pids = (node.pid_of("u5", "c"), node.pid_of("u6", "c"));
        node.crash();
        pids
    };
    assert!(
        alive(pid) && alive(gone_pid),
        "a kubelet that crashes leaves processes"
    );

    let mut node = start_node(dir.path(), Sources::default());
    // SIGKILL is delivered asynchronously: wait (bounded) for both to die.
    let dead = async {
        while alive(pid) || alive(gone_pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(LIMIT, dead)
        .await
        .expect("orphans killed at start-up");
    // u6 was deleted while the kubelet was down: the API no longer lists it.
    node.manager
        .cleanup_unknown(&HashSet::from(["u5".to_string()]))
        .await;
    assert!(node.runtime.list(Some("u6")).is_empty());
    assert!(!dir.path().join("pods/u6").exists());
    node.manager.update(p.clone());
    let s = node
        .status_until("u5", |s| {
            container(s, "c").state.as_ref().unwrap().running.is_some()
                && container(s, "c").restart_count == 1
        })
        .await;
    let running: Vec<_> = node
        .runtime
        .list(Some("u5"))
        .into_iter()
        .filter(|c| c.is_running())
        .collect();
    assert_eq!(running.len(), 1, "exactly one process for the container");
    let last = container(&s, "c")
        .last_state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(last.reason.as_deref(), Some("Orphaned"));
    node.stop().await;
}

/// Waits (bounded) until none of `pids` is alive: SIGKILL is delivered asynchronously.
async fn all_dead(pids: &[i32]) {
    let dead = async {
        while pids.iter().any(|p| alive(*p)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(LIMIT, dead)
        .await
        .unwrap_or_else(|_| panic!("processes {pids:?} still alive"));
}

#[tokio::test]
async fn graceful_shutdown_stops_every_process_group_and_next_kubelet_restarts_them() {
    let dir = tempfile::tempdir().unwrap();
    let child_file = dir.path().join("child.pid");
    let mut p = pod_of(
        "u7",
        vec![
            sh(
                "c",
                &format!(
                    "sleep 1000 & echo $! > {}; while true; do sleep 1; done",
                    child_file.display()
                ),
            ),
            // Ignores SIGTERM: only the shutdown grace cap ends it (the pod's own grace is an
            // hour, so a shutdown that ignored the cap would hang past the test's limit).
            sh("stubborn", "trap '' TERM; while true; do sleep 1; done"),
        ],
    );
    p.spec.as_mut().unwrap().termination_grace_period_seconds = Some(3600);
    let mut node = start_node(dir.path(), Sources::default());
    node.manager.update(p.clone());
    node.status_until("u7", |s| {
        let all = s.container_statuses.clone().unwrap_or_default();
        all.len() == 2
            && all
                .iter()
                .all(|c| c.state.as_ref().unwrap().running.is_some())
    })
    .await;
    let child: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&child_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let pids = [node.pid_of("u7", "c"), node.pid_of("u7", "stubborn"), child];
    assert!(pids.iter().all(|p| alive(*p)));

    tokio::time::timeout(LIMIT, node.manager.shutdown(Duration::from_millis(300)))
        .await
        .expect("shutdown within the grace cap");
    all_dead(&pids).await;
    for c in node.runtime.list(Some("u7")) {
        match c.state {
            skiff_kubelet::runtime::State::Exited { reason, .. } => {
                assert_eq!(reason, "Shutdown", "{}", c.id)
            }
            other => panic!("{} still {other:?}", c.id),
        }
    }
    node.done = true;
    drop(node);

    // The next kubelet starts them again, as runs it ended itself.
    let mut node = start_node(dir.path(), Sources::default());
    node.manager.update(p.clone());
    let s = node
        .status_until("u7", |s| {
            let all = s.container_statuses.clone().unwrap_or_default();
            all.len() == 2
                && all
                    .iter()
                    .all(|c| c.restart_count == 1 && c.state.as_ref().unwrap().running.is_some())
        })
        .await;
    for name in ["c", "stubborn"] {
        let last = container(&s, name)
            .last_state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!(last.reason.as_deref(), Some("Shutdown"), "{name}");
    }
    let pids = [node.pid_of("u7", "c"), node.pid_of("u7", "stubborn")];
    node.stop().await;
    all_dead(&pids).await;
}

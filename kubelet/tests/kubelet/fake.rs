//! The pod sync loop against an in-memory sandboxed runtime: where the pod IP comes from, image
//! pull policies and their back-off, restarts, and what deletion asks of the runtime. No
//! processes, so the transitions are checked exactly and fast.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use skiff_kubelet::pod::{self, Event, Manager, backoff};
use skiff_kubelet::runtime::{
    self, ContainerConfig, Error, ExecOutput, PullPolicy, Result, Runtime, Sandbox, SandboxConfig,
    State, Version,
};
use skiff_kubelet::spec::Sources;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(20);
const POD_IP: &str = "10.0.0.5";

/// What the fake was asked, for the tests to check.
#[derive(Default)]
struct Calls {
    sandboxes: Vec<SandboxConfig>,
    removed_sandboxes: Vec<String>,
    pulls: Vec<(String, PullPolicy)>,
    stops: Vec<(String, Duration)>,
    starts: Vec<ContainerConfig>,
}

/// A sandboxed runtime in memory (or, with `unsandboxed`, one without sandboxes, as the process
/// runtime). A container whose command is `exit N` exits at once with N; any other runs until
/// stopped. Images in `registry` can be pulled; `present` ones are local.
#[derive(Default)]
struct Fake {
    unsandboxed: bool,
    containers: Mutex<HashMap<String, runtime::Container>>,
    present: Mutex<HashSet<String>>,
    registry: Mutex<HashSet<String>>,
    calls: Mutex<Calls>,
    events: Mutex<Option<broadcast::Sender<String>>>,
}

impl Fake {
    fn events(&self) -> broadcast::Sender<String> {
        self.events
            .lock()
            .unwrap()
            .get_or_insert_with(|| broadcast::channel(64).0)
            .clone()
    }
}

#[async_trait::async_trait]
impl Runtime for Fake {
    async fn start(&self, config: ContainerConfig) -> Result<runtime::Container> {
        let id = format!("{}-{}-{}", config.pod_uid, config.name, config.attempt);
        let now = Timestamp::now();
        let state = match config.command.as_slice() {
            [exit, code] if exit == "exit" => State::Exited {
                started_at: now,
                finished_at: now,
                exit_code: code.parse().unwrap(),
                reason: if code == "0" { "Completed" } else { "Error" }.into(),
            },
            _ => State::Running { started_at: now },
        };
        let exited = !matches!(state, State::Running { .. });
        let c = runtime::Container {
            id: id.clone(),
            runtime: "fake".into(),
            image_id: format!("sha256:{}", config.image),
            config: config.clone(),
            state,
            warnings: Vec::new(),
        };
        self.calls.lock().unwrap().starts.push(config.clone());
        self.containers.lock().unwrap().insert(id, c.clone());
        if exited {
            let _ = self.events().send(config.pod_uid);
        }
        Ok(c)
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        self.calls.lock().unwrap().stops.push((id.into(), grace));
        let mut containers = self.containers.lock().unwrap();
        let c = containers
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(id.into()))?;
        if let State::Running { started_at } = c.state {
            c.state = State::Exited {
                started_at,
                finished_at: Timestamp::now(),
                exit_code: 137,
                reason: "Error".into(),
            };
        }
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<()> {
        self.containers.lock().unwrap().remove(id);
        Ok(())
    }

    fn list(&self, pod_uid: Option<&str>) -> Vec<runtime::Container> {
        self.containers
            .lock()
            .unwrap()
            .values()
            .filter(|c| pod_uid.is_none_or(|u| c.config.pod_uid == u))
            .cloned()
            .collect()
    }

    async fn exec(&self, id: &str, _cmd: &[String], _timeout: Duration) -> Result<ExecOutput> {
        Err(Error::NotFound(id.into()))
    }

    fn subscribe(&self) -> broadcast::Receiver<String> {
        self.events().subscribe()
    }

    async fn health(&self) -> Result<()> {
        Ok(())
    }

    async fn shutdown(
        &self,
        _grace: &(dyn for<'c> Fn(&'c runtime::Container) -> Duration + Send + Sync),
    ) {
    }

    async fn version(&self) -> Result<Version> {
        Ok(Version {
            name: "fake".into(),
            version: "1.0".into(),
        })
    }

    fn sandboxed(&self) -> bool {
        !self.unsandboxed
    }

    async fn run_sandbox(&self, config: &SandboxConfig) -> Result<Sandbox> {
        self.calls.lock().unwrap().sandboxes.push(config.clone());
        Ok(Sandbox {
            id: format!("sandbox-{}", config.pod_uid),
            ips: if config.host_network || self.unsandboxed {
                Vec::new()
            } else {
                vec![POD_IP.parse().unwrap()]
            },
        })
    }

    async fn remove_sandbox(&self, pod_uid: &str) -> Result<()> {
        self.calls
            .lock()
            .unwrap()
            .removed_sandboxes
            .push(pod_uid.into());
        self.containers
            .lock()
            .unwrap()
            .retain(|_, c| c.config.pod_uid != pod_uid);
        Ok(())
    }

    async fn ensure_image(
        &self,
        _pod_uid: &str,
        image: &str,
        policy: PullPolicy,
        _auth: &[skiff_kubelet::runtime::RegistryAuth],
    ) -> Result<Option<String>> {
        let present = self.present.lock().unwrap().contains(image);
        match policy {
            PullPolicy::Never if !present => return Err(Error::ImageNeverPull(image.into())),
            PullPolicy::Never | PullPolicy::IfNotPresent if present => {
                return Ok(Some(format!("sha256:{image}")));
            }
            _ => {}
        }
        self.calls
            .lock()
            .unwrap()
            .pulls
            .push((image.into(), policy));
        if self.registry.lock().unwrap().contains(image) {
            self.present.lock().unwrap().insert(image.into());
            Ok(Some(format!("sha256:{image}")))
        } else {
            Err(Error::ImagePull {
                image: image.into(),
                message: format!("{image}: not found"),
            })
        }
    }
}

struct Node {
    manager: Manager,
    fake: Arc<Fake>,
    events: mpsc::UnboundedReceiver<Event>,
    seen: Vec<Event>,
    _dir: tempfile::TempDir,
}

fn node() -> Node {
    node_on(Fake::default())
}

fn node_on(fake: Fake) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(fake);
    let (tx, events) = mpsc::unbounded_channel();
    let manager = Manager::new(
        pod::Config {
            root_dir: dir.path().to_path_buf(),
            host_ip: "192.0.2.10".parse().unwrap(),
            backoff: backoff::Config {
                base: Duration::from_secs(1),
                max: Duration::from_secs(2),
                reset_after: Duration::from_secs(600),
            },
            resync: Duration::from_secs(5),
            cluster_dns: Default::default(),
        },
        fake.clone() as Arc<dyn Runtime>,
        "127.100.8.0/24".parse().unwrap(),
        Arc::new(Sources::default()),
        tx,
        CancellationToken::new(),
    )
    .unwrap();
    Node {
        manager,
        fake,
        events,
        seen: Vec::new(),
        _dir: dir,
    }
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
        let wait = async {
            loop {
                let ev = self.events.recv().await.expect("manager alive");
                self.seen.push(ev.clone());
                if let Event::Status { uid: u, status, .. } = ev
                    && u == uid
                    && pred(&status)
                {
                    return status;
                }
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .unwrap_or_else(|_| panic!("{what}: not reached"))
    }

    async fn terminated(&mut self, uid: &str) {
        let wait = async {
            while !self
                .seen
                .iter()
                .any(|e| matches!(e, Event::Terminated { uid: u, .. } if u == uid))
            {
                let ev = self.events.recv().await.expect("manager alive");
                self.seen.push(ev);
            }
        };
        tokio::time::timeout(LIMIT, wait)
            .await
            .expect("terminated in time");
    }

    /// The waiting reasons `container` went through, in order, without repeats.
    fn waiting_history(&self, uid: &str, container: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.seen {
            if let Event::Status { uid: u, status, .. } = e {
                if u != uid {
                    continue;
                }
                if let Some(r) = status_of(status, container)
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.clone())
                    && out.last() != Some(&r)
                {
                    out.push(r);
                }
            }
        }
        out
    }
}

fn status_of<'a>(s: &'a PodStatus, name: &str) -> &'a ContainerStatus {
    s.container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap()
}

fn app(name: &str, image: &str, policy: Option<&str>, command: &[&str]) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: policy.map(str::to_string),
        command: Some(command.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn pod(uid: &str, containers: Vec<Container>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            termination_grace_period_seconds: Some(7),
            ..Default::default()
        }),
        status: None,
    }
}

fn is_running(s: &PodStatus, name: &str) -> bool {
    status_of(s, name)
        .state
        .as_ref()
        .is_some_and(|st| st.running.is_some())
}

#[tokio::test]
async fn the_sandbox_ip_is_the_pods_and_deletion_stops_with_grace_and_removes_the_sandbox() {
    let mut n = node();
    n.fake.present.lock().unwrap().insert("web:1".into());
    n.manager
        .update(pod("u1", vec![app("web", "web:1", None, &["serve"])]));
    let s = n
        .status_until("u1", "running", |s| is_running(s, "web"))
        .await;
    assert_eq!(s.pod_ip.as_deref(), Some(POD_IP));
    assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, POD_IP);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let web = status_of(&s, "web");
    assert_eq!(web.container_id.as_deref(), Some("fake://u1-web-0"));
    assert_eq!(web.image_id, "sha256:web:1", "imageID from the runtime");
    {
        let calls = n.fake.calls.lock().unwrap();
        assert_eq!(calls.sandboxes.len(), 1, "one sandbox per pod");
        let sandbox = &calls.sandboxes[0];
        assert_eq!(
            (sandbox.pod_name.as_str(), sandbox.hostname.as_str()),
            ("pod-u1", "pod-u1")
        );
        assert!(sandbox.log_dir.ends_with("logs/default_pod-u1_u1"));
        assert!(calls.pulls.is_empty(), "IfNotPresent and present: no pull");
        // In a sandbox the container gets its own root: no host working directory or POD_ROOT.
        let started = &calls.starts[0];
        assert_eq!(started.pod_ip, POD_IP.parse::<IpAddr>().unwrap());
        assert!(started.env.contains(&("POD_IP".into(), POD_IP.into())));
        assert!(
            !started
                .env
                .iter()
                .any(|(k, _)| k == "POD_ROOT" || k == "HOSTNAME")
        );
        assert_eq!(started.working_dir, None);
    }

    let mut gone = pod("u1", vec![app("web", "web:1", None, &["serve"])]);
    gone.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    n.manager.update(gone);
    n.terminated("u1").await;
    let calls = n.fake.calls.lock().unwrap();
    assert_eq!(
        calls.stops,
        [("u1-web-0".to_string(), Duration::from_secs(7))],
        "stopped with the pod's grace period"
    );
    assert_eq!(calls.removed_sandboxes, ["u1"]);
}

#[tokio::test]
async fn host_network_pods_have_the_nodes_ip() {
    let mut n = node();
    n.fake.present.lock().unwrap().insert("web:1".into());
    let mut p = pod("u2", vec![app("web", "web:1", None, &["serve"])]);
    p.spec.as_mut().unwrap().host_network = Some(true);
    n.manager.update(p);
    let s = n
        .status_until("u2", "running", |s| is_running(s, "web"))
        .await;
    assert_eq!(s.pod_ip.as_deref(), Some("192.0.2.10"));
    assert!(n.fake.calls.lock().unwrap().sandboxes[0].host_network);
}

#[tokio::test]
async fn without_sandboxes_host_network_pods_have_the_nodes_ip_and_others_one_of_the_range() {
    let mut n = node_on(Fake {
        unsandboxed: true,
        ..Fake::default()
    });
    n.fake.present.lock().unwrap().insert("web:1".into());
    let mut host = pod("h1", vec![app("web", "web:1", None, &["serve"])]);
    host.spec.as_mut().unwrap().host_network = Some(true);
    n.manager.update(host);
    let s = n
        .status_until("h1", "running", |s| is_running(s, "web"))
        .await;
    assert_eq!(s.pod_ip.as_deref(), Some("192.0.2.10"));
    n.manager
        .update(pod("h2", vec![app("web", "web:1", None, &["serve"])]));
    let s = n
        .status_until("h2", "running", |s| is_running(s, "web"))
        .await;
    let ip = s.pod_ip.unwrap_or_default();
    assert!(ip.starts_with("127.100.8."), "{ip}");
}

#[tokio::test]
async fn failed_pulls_back_off_until_the_image_can_be_pulled() {
    let mut n = node();
    n.manager
        .update(pod("u3", vec![app("late", "late:1", None, &["serve"])]));
    let s = n
        .status_until("u3", "ImagePullBackOff", |s| {
            status_of(s, "late")
                .state
                .as_ref()
                .and_then(|st| st.waiting.as_ref())
                .is_some_and(|w| w.reason.as_deref() == Some("ImagePullBackOff"))
        })
        .await;
    let message = status_of(&s, "late")
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap()
        .message
        .unwrap();
    assert!(message.contains("late:1: not found"), "{message}");
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(
        n.waiting_history("u3", "late"),
        ["ErrImagePull", "ImagePullBackOff"]
    );
    let pulls = n.fake.calls.lock().unwrap().pulls.len();
    assert_eq!(pulls, 1, "no pull while backing off");

    // The image shows up in the registry: the next attempt after the back-off pulls it.
    n.fake.registry.lock().unwrap().insert("late:1".into());
    n.status_until("u3", "running", |s| is_running(s, "late"))
        .await;
    let failed_events = n
        .seen
        .iter()
        .filter(|e| matches!(e, Event::Record { reason, .. } if reason == "Failed"))
        .count();
    assert!(failed_events >= 1);
}

#[tokio::test]
async fn pull_policies_decide_when_to_pull() {
    let mut n = node();
    n.fake.present.lock().unwrap().insert("tool:1".into());
    n.fake.registry.lock().unwrap().insert("tool:1".into());
    // `:latest` (no policy given, as in a static pod) is Always: pulled on every start; the
    // container exits 1 and is restarted.
    n.fake.registry.lock().unwrap().insert("tool:latest".into());
    n.manager.update(pod(
        "u4",
        vec![
            app("always", "tool:latest", None, &["exit", "1"]),
            app("never", "absent:1", Some("Never"), &["serve"]),
            app("cached", "tool:1", Some("IfNotPresent"), &["serve"]),
        ],
    ));
    let s = n
        .status_until("u4", "always restarted, never waiting", |s| {
            status_of(s, "always").restart_count >= 1 && is_running(s, "cached")
        })
        .await;
    let last = status_of(&s, "always")
        .last_state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
    let never = status_of(&s, "never")
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(never.reason.as_deref(), Some("ErrImageNeverPull"));
    assert!(never.message.unwrap().contains("absent:1"));
    let calls = n.fake.calls.lock().unwrap();
    let pulled = |image: &str| calls.pulls.iter().filter(|(i, _)| i == image).count();
    let starts = calls.starts.iter().filter(|c| c.name == "always").count();
    assert_eq!(pulled("tool:latest"), starts, "Always pulls on every start");
    assert!(starts >= 2);
    assert_eq!(pulled("tool:1"), 0);
    assert_eq!(pulled("absent:1"), 0, "Never never pulls");
}

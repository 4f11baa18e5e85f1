//! The pod's status from what the runtime and the probes report: container statuses, phase and
//! conditions. Pure functions of their inputs.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::runtime::{self, State};

/// Why a container is waiting, as the worker knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// `ContainerCreating`, `PodInitializing`, `CrashLoopBackOff`,
    /// `CreateContainerConfigError`, `RunContainerError`...
    pub reason: String,
    /// Details.
    pub message: Option<String>,
}

/// The status of one container from its runs (oldest first), what it waits for, and probes.
pub fn container_status(
    spec: &Container,
    runs: &[&runtime::Container],
    waiting: Option<&Waiting>,
    ready: bool,
    started: bool,
) -> ContainerStatus {
    let latest = runs.last();
    let image = spec.image.clone().unwrap_or_default();
    let terminated = |c: &runtime::Container| -> Option<ContainerState> {
        match &c.state {
            State::Exited {
                started_at,
                finished_at,
                exit_code,
                reason,
            } => Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    container_id: Some(c.container_id()),
                    exit_code: *exit_code,
                    reason: Some(reason.clone()),
                    started_at: Some(Time(*started_at)),
                    finished_at: Some(Time(*finished_at)),
                    signal: (*exit_code > 128).then_some(exit_code - 128),
                    message: None,
                }),
                ..Default::default()
            }),
            State::Running { .. } => None,
        }
    };
    let (state, last_state) = match (latest, waiting) {
        (Some(c), _) if c.is_running() => {
            let State::Running { started_at } = c.state else {
                unreachable!()
            };
            let state = ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(started_at)),
                }),
                ..Default::default()
            };
            let last = runs.iter().rev().nth(1).and_then(|p| terminated(p));
            (state, last)
        }
        (latest, Some(w)) => {
            let state = ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(w.reason.clone()),
                    message: w.message.clone(),
                }),
                ..Default::default()
            };
            (state, latest.and_then(|c| terminated(c)))
        }
        (Some(c), None) => {
            let last = runs.iter().rev().nth(1).and_then(|p| terminated(p));
            (terminated(c).expect("not running means exited"), last)
        }
        (None, None) => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    message: None,
                }),
                ..Default::default()
            },
            None,
        ),
    };
    let is_running = state.running.is_some();
    ContainerStatus {
        name: spec.name.clone(),
        image: image.clone(),
        image_id: latest.map(|c| c.image_id()).unwrap_or_default(),
        container_id: latest.map(|c| c.container_id()),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ready: ready && is_running,
        restart_count: latest.map_or(0, |c| c.config.attempt as i32),
        started: Some(started && is_running),
        ..Default::default()
    }
}

fn is_terminated_ok(s: &ContainerStatus) -> bool {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0)
}

/// The pod phase, as the Kubernetes kubelet derives it from container states.
pub fn phase(
    restart_policy: &str,
    init_failed: bool,
    init: &[ContainerStatus],
    containers: &[ContainerStatus],
) -> &'static str {
    if init_failed {
        return "Failed";
    }
    if !init.iter().all(is_terminated_ok) {
        return "Pending";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in containers {
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some()
        {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        if restart_policy == "Always" {
            "Running"
        } else if stopped == succeeded {
            "Succeeded"
        } else if restart_policy == "Never" {
            "Failed"
        } else {
            "Running"
        }
    } else {
        "Pending"
    }
}

/// Inputs of [`pod_status`].
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// `spec.restartPolicy` (`Always` when unset).
    pub restart_policy: String,
    /// An init container failed under `restartPolicy: Never`.
    pub init_failed: bool,
    /// Init container statuses, in spec order.
    pub init: Vec<ContainerStatus>,
    /// Container statuses, in spec order.
    pub containers: Vec<ContainerStatus>,
    /// Ephemeral container statuses, in spec order (no part in the phase or readiness).
    pub ephemeral: Vec<ContainerStatus>,
    /// The pod's IP once it has one.
    pub pod_ip: Option<String>,
    /// The node's IP.
    pub host_ip: String,
    /// When the kubelet first acknowledged the pod.
    pub start_time: Option<Timestamp>,
    /// A message for the pod (e.g. why volumes failed).
    pub message: Option<String>,
}

/// The pod status; `previous` supplies condition transition times that did not change.
pub fn pod_status(observed: &Observed, previous: Option<&PodStatus>, now: Timestamp) -> PodStatus {
    let phase = phase(
        &observed.restart_policy,
        observed.init_failed,
        &observed.init,
        &observed.containers,
    );
    let initialized = observed.init.iter().all(is_terminated_ok);
    let completed = phase == "Succeeded" || phase == "Failed";
    let all_ready = !observed.containers.is_empty() && observed.containers.iter().all(|c| c.ready);
    let not_ready: Vec<&str> = observed
        .containers
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let ready_cond: (bool, Option<String>, Option<String>) = if completed {
        (false, Some("PodCompleted".into()), None)
    } else if all_ready {
        (true, None, None)
    } else {
        (
            false,
            Some("ContainersNotReady".into()),
            Some(format!(
                "containers with unready status: [{}]",
                not_ready.join(" ")
            )),
        )
    };
    let init_cond = if initialized {
        (true, None, None)
    } else if completed {
        (false, Some("PodCompleted".into()), None)
    } else {
        (
            false,
            Some("ContainersNotInitialized".into()),
            Some("containers with incomplete status".into()),
        )
    };
    let prev_conditions = previous
        .and_then(|p| p.conditions.clone())
        .unwrap_or_default();
    let condition = |type_: &str, (ok, reason, message): (bool, Option<String>, Option<String>)| {
        let status = if ok { "True" } else { "False" }.to_string();
        let last_transition_time = prev_conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .or(Some(Time(now)));
        PodCondition {
            type_: type_.to_string(),
            status,
            reason,
            message,
            last_transition_time,
            ..Default::default()
        }
    };
    let conditions = vec![
        condition("PodScheduled", (true, None, None)),
        condition("Initialized", init_cond),
        condition("ContainersReady", ready_cond.clone()),
        condition("Ready", ready_cond),
    ];
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: Some(observed.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: observed.host_ip.clone(),
        }]),
        pod_ip: observed.pod_ip.clone(),
        pod_ips: observed
            .pod_ip
            .as_ref()
            .map(|ip| vec![PodIP { ip: ip.clone() }]),
        start_time: observed.start_time.map(Time),
        init_container_statuses: (!observed.init.is_empty()).then(|| observed.init.clone()),
        container_statuses: Some(observed.containers.clone()),
        ephemeral_container_statuses: (!observed.ephemeral.is_empty())
            .then(|| observed.ephemeral.clone()),
        message: observed.message.clone(),
        qos_class: previous.and_then(|p| p.qos_class.clone()),
        ..Default::default()
    }
}

/// Whether the API server's copy of a pod's status (`theirs`) says something other than the
/// kubelet's own (`ours`) in what the kubelet decides: the phase, the pod IP, each condition's
/// status and each container's readiness. Another writer (the node lifecycle controller marking a
/// pod not ready while the node was unreachable) is then overruled by sending `ours` again, as the
/// Kubernetes status manager reconciles. Timestamps and messages are left out: they differ for
/// reasons that need no correction.
pub fn disagrees(ours: &PodStatus, theirs: &PodStatus) -> bool {
    let condition = |s: &PodStatus, type_: &str| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    };
    // Conditions the kubelet does not set (a `DisruptionTarget` of an eviction) are not its to
    // correct.
    let conditions_differ = ours
        .conditions
        .iter()
        .flatten()
        .any(|c| condition(theirs, &c.type_).as_ref() != Some(&c.status));
    let readiness = |s: &PodStatus| -> Vec<(String, bool)> {
        let mut r: Vec<_> = s
            .container_statuses
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.ready))
            .collect();
        r.sort();
        r
    };
    ours.phase != theirs.phase
        || ours.pod_ip != theirs.pod_ip
        || conditions_differ
        || readiness(ours) != readiness(theirs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtime::{ContainerConfig, Limits};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    /// Run `attempt` of container `c` of pod `u`, in `state`.
    pub(crate) fn run(attempt: u32, state: State) -> runtime::Container {
        runtime::Container {
            id: format!("u-c-{attempt}"),
            runtime: "process".into(),
            image_id: String::new(),
            config: ContainerConfig {
                pod_uid: "u".into(),
                pod_namespace: "ns".into(),
                pod_name: "p".into(),
                name: "c".into(),
                attempt,
                image: "busybox".into(),
                command: vec![],
                args: vec![],
                env: vec![],
                working_dir: None,
                pod_ip: "127.0.0.1".parse().unwrap(),
                mounts: vec![],
                limits: Limits::default(),
                security: Default::default(),
                spec_hash: "h".into(),
                log_path: "/tmp/x".into(),
                stdin: false,
                stdin_once: false,
                tty: false,
                target_id: None,
            },
            state,
            warnings: vec![],
        }
    }

    /// Run `attempt`, exited with `code`.
    pub(crate) fn exited(attempt: u32, code: i32) -> runtime::Container {
        run(
            attempt,
            State::Exited {
                started_at: ts(10),
                finished_at: ts(20),
                exit_code: code,
                reason: if code == 0 { "Completed" } else { "Error" }.into(),
            },
        )
    }

    fn spec() -> Container {
        Container {
            name: "c".into(),
            image: Some("busybox".into()),
            ..Default::default()
        }
    }

    #[test]
    fn running_container_with_previous_run() {
        let prev = exited(0, 1);
        let cur = run(1, State::Running { started_at: ts(30) });
        let s = container_status(&spec(), &[&prev, &cur], None, true, true);
        assert_eq!(s.restart_count, 1);
        assert!(s.ready);
        assert_eq!(s.started, Some(true));
        assert_eq!(
            s.state.unwrap().running.unwrap().started_at,
            Some(Time(ts(30)))
        );
        let last = s.last_state.unwrap().terminated.unwrap();
        assert_eq!(last.exit_code, 1);
        assert_eq!(last.reason.as_deref(), Some("Error"));
        assert_eq!(s.container_id.as_deref(), Some("process://u-c-1"));
        assert_eq!(s.image_id, "process://busybox");
    }

    #[test]
    fn crash_loop_waiting_keeps_last_termination() {
        let prev = exited(2, 137);
        let w = Waiting {
            reason: "CrashLoopBackOff".into(),
            message: Some("back-off 20s".into()),
        };
        let s = container_status(&spec(), &[&prev], Some(&w), true, true);
        assert!(!s.ready, "not running is not ready");
        assert_eq!(s.restart_count, 2);
        let st = s.state.clone().unwrap();
        assert_eq!(
            st.waiting.unwrap().reason.as_deref(),
            Some("CrashLoopBackOff")
        );
        let last = s.last_state.clone().unwrap().terminated.unwrap();
        assert_eq!((last.exit_code, last.signal), (137, Some(9)));
        assert_eq!(phase("Always", false, &[], &[s]), "Running");
    }

    #[test]
    fn never_started_is_container_creating_and_pending() {
        let s = container_status(&spec(), &[], None, false, false);
        assert_eq!(
            s.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("ContainerCreating")
        );
        assert_eq!(s.restart_count, 0);
        assert_eq!(phase("Always", false, &[], &[s]), "Pending");
    }

    #[test]
    fn phases_by_restart_policy() {
        let ok = container_status(&spec(), &[&exited(0, 0)], None, false, false);
        let bad = container_status(&spec(), &[&exited(0, 2)], None, false, false);
        let running = container_status(
            &spec(),
            &[&run(0, State::Running { started_at: ts(1) })],
            None,
            false,
            true,
        );
        assert_eq!(phase("Never", false, &[], &[ok.clone()]), "Succeeded");
        assert_eq!(phase("OnFailure", false, &[], &[ok.clone()]), "Succeeded");
        assert_eq!(
            phase("Never", false, &[], &[ok.clone(), bad.clone()]),
            "Failed"
        );
        assert_eq!(phase("OnFailure", false, &[], &[bad.clone()]), "Running");
        assert_eq!(phase("Always", false, &[], &[ok.clone()]), "Running");
        assert_eq!(
            phase("Never", false, &[], &[running.clone(), bad]),
            "Running"
        );
        assert_eq!(phase("Never", true, &[], &[]), "Failed");
        let init_running = running.clone();
        assert_eq!(phase("Always", false, &[init_running], &[]), "Pending");
        assert_eq!(phase("Always", false, &[ok], &[running]), "Running");
    }

    /// A pod of one running, ready container with an IP.
    fn one_ready_container() -> Observed {
        let ready = container_status(
            &spec(),
            &[&run(0, State::Running { started_at: ts(1) })],
            None,
            true,
            true,
        );
        Observed {
            restart_policy: "Always".into(),
            containers: vec![ready],
            pod_ip: Some("127.100.0.2".into()),
            host_ip: "127.0.0.1".into(),
            start_time: Some(ts(1)),
            ..Default::default()
        }
    }

    #[test]
    fn ephemeral_containers_are_reported_apart_from_the_phase() {
        let mut observed = one_ready_container();
        let mut dbg = spec();
        dbg.name = "dbg".into();
        let exited = run(
            0,
            State::Exited {
                started_at: ts(2),
                finished_at: ts(3),
                exit_code: 3,
                reason: "Error".into(),
            },
        );
        observed.ephemeral = vec![container_status(&dbg, &[&exited], None, false, false)];
        let s = pod_status(&observed, None, ts(5));
        // A debug container that failed leaves the pod Running and Ready.
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert!(s.container_statuses.as_ref().unwrap()[0].ready);
        let eph = s.ephemeral_container_statuses.as_ref().unwrap();
        assert_eq!(eph.len(), 1);
        assert_eq!(eph[0].name, "dbg");
        let terminated = eph[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(terminated.exit_code, 3);
        assert!(!eph[0].ready);
        // None: the field stays out.
        let none = pod_status(&one_ready_container(), None, ts(5));
        assert!(none.ephemeral_container_statuses.is_none());
    }

    #[test]
    fn conditions_follow_readiness_and_keep_transition_times() {
        let mut observed = one_ready_container();
        let s1 = pod_status(&observed, None, ts(5));
        let cond = |s: &PodStatus, t: &str| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .clone()
        };
        assert_eq!(s1.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s1, "Ready").status, "True");
        assert_eq!(cond(&s1, "Initialized").status, "True");
        assert_eq!(s1.pod_ips.as_ref().unwrap()[0].ip, "127.100.0.2");
        let s2 = pod_status(&observed, Some(&s1), ts(9));
        assert_eq!(s1, s2, "same inputs, same status: no PATCH");
        observed.containers[0].ready = false;
        let s3 = pod_status(&observed, Some(&s2), ts(12));
        let r = cond(&s3, "Ready");
        assert_eq!(r.status, "False");
        assert_eq!(r.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(r.last_transition_time, Some(Time(ts(12))));
        assert_eq!(
            cond(&s3, "PodScheduled").last_transition_time,
            Some(Time(ts(5)))
        );
    }

    #[test]
    fn disagreement_is_in_what_the_kubelet_decides() {
        let observed = one_ready_container();
        let ours = pod_status(&observed, None, ts(5));
        assert!(!disagrees(&ours, &ours));
        let set = |s: &mut PodStatus, t: &str, v: &str| {
            for c in s.conditions.iter_mut().flatten() {
                if c.type_ == t {
                    c.status = v.into();
                }
            }
        };
        // The node lifecycle controller's mark: Ready False.
        let mut theirs = ours.clone();
        set(&mut theirs, "Ready", "False");
        assert!(disagrees(&ours, &theirs));
        // A condition of another writer's is not the kubelet's to undo.
        let mut theirs = ours.clone();
        theirs.conditions.as_mut().unwrap().push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            ..Default::default()
        });
        assert!(!disagrees(&ours, &theirs));
        // Times and messages are not worth a report.
        let mut theirs = ours.clone();
        for c in theirs.conditions.iter_mut().flatten() {
            c.last_transition_time = Some(Time(ts(99)));
            c.message = Some("elsewhere".into());
        }
        assert!(!disagrees(&ours, &theirs));
        // A lagging copy (from before the first report) disagrees: the caller waits it out.
        let theirs = PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        };
        assert!(disagrees(&ours, &theirs));
        let mut theirs = ours.clone();
        theirs.container_statuses.as_mut().unwrap()[0].ready = false;
        assert!(disagrees(&ours, &theirs));
    }
}

//! Leader election of the singletons through `coordination.k8s.io/v1` Leases: two controller
//! managers and two schedulers as processes of their own (one acts, one stands by; the leader
//! killed, the standby takes over within the lease duration and the cluster goes on; a leader
//! stopped with SIGTERM releases its lease), and two all-in-one `skiff server`s on one etcd.

use std::time::{Duration, Instant};

use skiff_tests::etcd::Etcd;
use skiff_tests::{Component, Kubectl, TestCluster, eventually, kill_pod_processes};

/// Short timings so the test does not wait out kube's 15 s; they also prove the flags count.
pub(crate) const TIMING: &[&str] = &[
    "--leader-elect-lease-duration",
    "6s",
    "--leader-elect-renew-deadline",
    "4s",
    "--leader-elect-retry-period",
    "1s",
];
const LEASE_DURATION: Duration = Duration::from_secs(6);

pub(crate) const ACQUIRED: &str = "successfully acquired the leader lease";

/// A Deployment of two pods that sleep, named `name` in `namespace`.
pub(crate) fn deployment(name: &str, namespace: &str) -> String {
    DEPLOYMENT
        .replace("NAMESPACE", namespace)
        .replace("NAME", name)
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: NAME, namespace: NAMESPACE}
spec:
  replicas: 2
  selector: {matchLabels: {app: NAME}}
  template:
    metadata: {labels: {app: NAME}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "while true; do sleep 1; done"]
"#;

/// Kills the pod processes left under a kubelet root when the test ends, passed or failed.
pub(crate) struct PodCleanup(pub(crate) std::path::PathBuf);

impl Drop for PodCleanup {
    fn drop(&mut self) {
        kill_pod_processes(&self.0);
    }
}

fn lease_field(k: &Kubectl, name: &str, field: &str) -> String {
    k.run(&[
        "get",
        "lease",
        "-n",
        "kube-system",
        name,
        "-o",
        &format!("jsonpath={{.spec.{field}}}"),
    ])
    .stdout
    .trim()
    .to_string()
}

/// The Deployment's ready replicas (0 until it reports any).
pub(crate) fn ready_replicas(k: &Kubectl, name: &str, namespace: &str) -> i64 {
    k.run(&[
        "get",
        "deployment",
        name,
        "-n",
        namespace,
        "-o",
        "jsonpath={.status.readyReplicas}",
    ])
    .stdout
    .trim()
    .parse()
    .unwrap_or(0)
}

/// Of two replicas, the one that holds the lease (by its log); panics unless exactly one does.
fn leader_of<'a>(
    what: &str,
    a: &'a mut Component,
    b: &'a mut Component,
) -> (&'a mut Component, &'a mut Component) {
    let holds = |c: &Component| c.log_text().contains(ACQUIRED);
    assert!(
        eventually(Duration::from_secs(30), || holds(a) || holds(b)),
        "no {what} took the lease:\n{}\n{}",
        a.log_text(),
        b.log_text()
    );
    // Give a second leader every chance to show up.
    std::thread::sleep(Duration::from_secs(3));
    match (holds(a), holds(b)) {
        (true, false) => (a, b),
        (false, true) => (b, a),
        _ => panic!(
            "both {what}s took the lease:\n{}\n{}",
            a.log_text(),
            b.log_text()
        ),
    }
}

#[test]
fn a_standby_takes_over_within_the_lease_duration_when_the_leader_is_killed() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl();
    let root = cluster.dir.path().join("kubelet-root");
    let _cleanup = PodCleanup(root.clone());
    let _kubelet = cluster.spawn_component(&[
        "kubelet",
        "--node-name",
        "le-node",
        "--root-dir",
        root.to_str().unwrap(),
    ]);
    let with_timing = |component: &str| {
        let mut args = vec![component];
        args.extend(TIMING);
        cluster.spawn_component(&args)
    };
    let (mut cm1, mut cm2) = (with_timing("controllers"), with_timing("controllers"));
    let (mut s1, mut s2) = (with_timing("scheduler"), with_timing("scheduler"));

    let (cm_leader, cm_standby) = leader_of("controller manager", &mut cm1, &mut cm2);
    let (s_leader, s_standby) = leader_of("scheduler", &mut s1, &mut s2);
    // The standbys wait and do nothing: no informers synced, no controllers running.
    assert!(
        cm_standby.log_text().contains("standing by"),
        "{}",
        cm_standby.log_text()
    );
    assert!(
        !cm_standby.log_text().contains("controllers running"),
        "the standby controller manager acts:\n{}",
        cm_standby.log_text()
    );
    assert!(s_standby.log_text().contains("standing by"));
    // The leases name the holders, with kube's defaults replaced by the flags.
    let cm_holder = lease_field(&k, "kube-controller-manager", "holderIdentity");
    assert!(
        cm_leader.log_text().contains(&cm_holder) && !cm_holder.is_empty(),
        "lease holder {cm_holder:?} is not the leader's identity:\n{}",
        cm_leader.log_text()
    );
    assert_eq!(
        lease_field(&k, "kube-controller-manager", "leaseDurationSeconds"),
        "6"
    );
    let s_holder = lease_field(&k, "kube-scheduler", "holderIdentity");
    assert!(
        s_leader.log_text().contains(&s_holder) && !s_holder.is_empty(),
        "{s_holder:?}"
    );
    let transitions = lease_field(&k, "kube-controller-manager", "leaseTransitions");

    // The leaders run the cluster.
    k.ok_with_input(&["apply", "-f", "-"], &deployment("before", "default"));
    assert!(
        eventually(Duration::from_secs(90), || ready_replicas(
            &k, "before", "default"
        ) == 2),
        "the Deployment did not converge under the first leaders:\n{}",
        k.run(&["get", "pods", "-o", "wide"]).stdout
    );

    // Kill both leaders outright: no release, the standbys must wait the leases out.
    cm_leader.kill();
    s_leader.kill();
    let killed = Instant::now();
    k.ok_with_input(&["apply", "-f", "-"], &deployment("after", "default"));
    assert!(
        eventually(Duration::from_secs(30), || {
            cm_standby.log_text().contains(ACQUIRED) && s_standby.log_text().contains(ACQUIRED)
        }),
        "the standbys did not take over:\n{}\n{}",
        cm_standby.log_text(),
        s_standby.log_text()
    );
    let took = killed.elapsed();
    // Within the lease duration after the standby last saw a renewal (at most a jittered retry
    // period before the kill), plus a retry period to notice; slack for a loaded machine.
    assert!(
        took <= LEASE_DURATION + Duration::from_secs(6),
        "takeover took {took:?}"
    );
    let new_holder = lease_field(&k, "kube-controller-manager", "holderIdentity");
    assert_ne!(new_holder, cm_holder);
    assert!(cm_standby.log_text().contains(&new_holder));
    assert_ne!(
        lease_field(&k, "kube-scheduler", "holderIdentity"),
        s_holder
    );
    let after: i64 = lease_field(&k, "kube-controller-manager", "leaseTransitions")
        .parse()
        .unwrap();
    assert_eq!(after, transitions.parse::<i64>().unwrap_or(0) + 1);

    // The cluster goes on: the Deployment created after the kill converges, one ReplicaSet each.
    assert!(
        eventually(Duration::from_secs(90), || ready_replicas(
            &k, "after", "default"
        ) == 2),
        "the Deployment created after the kill did not converge:\n{}\n{}",
        k.run(&["get", "pods", "-o", "wide"]).stdout,
        cm_standby.log_text()
    );
    let sets = k.ok(&["get", "replicasets", "-o", "name"]);
    assert_eq!(sets.lines().count(), 2, "{sets}");

    // SIGTERM: the leader stops its work and releases the lease (holder cleared, 1 s).
    let status = cm_standby.stop().expect("running");
    assert!(status.success(), "controllers exited with {status}");
    assert_eq!(
        lease_field(&k, "kube-controller-manager", "holderIdentity"),
        ""
    );
    assert_eq!(
        lease_field(&k, "kube-controller-manager", "leaseDurationSeconds"),
        "1"
    );
}

#[test]
fn bad_leader_election_timings_are_refused() {
    let cluster = TestCluster::start(&[]);
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let (ok, _, stderr) = skiff_tests::skiff(&[
        "scheduler",
        "--kubeconfig",
        &kubeconfig,
        "--leader-elect-lease-duration",
        "5s",
        "--leader-elect-renew-deadline",
        "5s",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("must be longer than the renew deadline"),
        "{stderr}"
    );
}

#[test]
fn two_servers_on_one_etcd_run_one_controller_manager_and_one_scheduler() {
    let Some(etcd) = Etcd::start(&[]) else {
        return;
    };
    let endpoint = etcd.endpoint();
    let mut args = vec![
        "--datastore-endpoint",
        &endpoint,
        "--components",
        "controllers,scheduler",
    ];
    args.extend(TIMING);
    let mut a = TestCluster::start_server(&args);
    let lease_holder = |k: &Kubectl, name: &str| lease_field(k, name, "holderIdentity");
    // On etcd, leader election is on without --leader-elect: A takes both leases.
    assert!(
        eventually(Duration::from_secs(30), || {
            let k = a.kubectl();
            !lease_holder(&k, "kube-controller-manager").is_empty()
                && !lease_holder(&k, "kube-scheduler").is_empty()
        }),
        "{}",
        a.log_text()
    );
    let b = a.join_server("server", &args);
    let kb = b.kubectl();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        a.log_text().matches(ACQUIRED).count(),
        2,
        "{}",
        a.log_text()
    );
    assert_eq!(
        b.log_text().matches(ACQUIRED).count(),
        0,
        "B leads while A does:\n{}",
        b.log_text()
    );
    assert!(b.log_text().contains("standing by"), "{}", b.log_text());
    let a_holder = lease_holder(&kb, "kube-controller-manager");
    assert!(a.log_text().contains(&a_holder));

    // A's machine dies: B's singletons take over, and B's cluster goes on.
    a.kill();
    let killed = Instant::now();
    kb.ok_with_input(&["apply", "-f", "-"], &deployment("failover", "default"));
    assert!(
        eventually(Duration::from_secs(30), || b
            .log_text()
            .matches(ACQUIRED)
            .count()
            == 2),
        "B did not take over:\n{}",
        b.log_text()
    );
    assert!(
        killed.elapsed() <= LEASE_DURATION + Duration::from_secs(6),
        "took {:?}",
        killed.elapsed()
    );
    assert_ne!(lease_holder(&kb, "kube-controller-manager"), a_holder);
    let has_replicaset = eventually(Duration::from_secs(60), || {
        kb.run(&["get", "replicasets", "-l", "app=failover", "-o", "name"])
            .stdout
            .contains("replicaset.apps/")
    });
    assert!(
        has_replicaset,
        "no ReplicaSet after failover:\n{}",
        b.log_text()
    );
}

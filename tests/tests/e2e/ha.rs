//! A highly available cluster on etcd, with its faults: three etcd members, two `skiff
//! apiserver`s of one cluster (the second joined with the server token), two controller managers
//! and two schedulers with leader election, and an agent, every component given both API
//! servers (`--server A,B`). Under 32 concurrent writers, the etcd leader is SIGKILLed, then an
//! API server, then the active controller manager.
//!
//! Checked afterwards: every acknowledged create is there; the acknowledged resourceVersions
//! are unique and increase for each writer; a watch (resumed on the other API server from its
//! last resourceVersion whenever its server goes, as an informer does) saw every object once, in
//! order, without a gap or a repeat; a Deployment made before the faults is scaled after them
//! and converges.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::watching::resumed_watch;
use serde_json::{Value, json};
use skiff_tests::etcd::EtcdCluster;
use skiff_tests::{Component, Kubectl, TestCluster, eventually};

use crate::leader::{ACQUIRED, PodCleanup, TIMING, deployment, ready_replicas};

const NAMESPACE: &str = "ha";
const WRITERS: usize = 32;

/// What the writers were told.
#[derive(Default)]
struct Outcomes {
    /// Acknowledged creates: name → resourceVersion, per writer in the order acknowledged.
    acked: Vec<Vec<(String, u64)>>,
    /// Creates without an answer (the server died, or etcd could not say): they may exist.
    unknown: BTreeSet<String>,
    /// When each create was acknowledged, for the liveness check.
    times: Vec<Instant>,
}

/// One writer: creates ConfigMaps `w<writer>-<i>` through its API server, switching to the
/// other one when its server does not answer.
async fn writer(
    index: usize,
    http: reqwest::Client,
    servers: [String; 2],
    token: String,
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Outcomes>>,
) {
    let mut server = index % 2;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("w{index}-{i}");
        let response = http
            .post(format!(
                "{}/api/v1/namespaces/{NAMESPACE}/configmaps",
                servers[server]
            ))
            .bearer_auth(&token)
            .timeout(Duration::from_secs(15))
            .json(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"writer": index.to_string()},
            }))
            .send()
            .await;
        let answer = match response {
            Ok(r) => Some((r.status().as_u16(), r.json::<Value>().await.ok())),
            Err(_) => None,
        };
        {
            let mut outcomes = outcomes.lock().unwrap();
            match answer {
                Some((201, Some(body))) => {
                    let rv: u64 = body["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .expect("a resourceVersion");
                    outcomes.acked[index].push((name, rv));
                    outcomes.times.push(Instant::now());
                }
                Some((code, _)) if code >= 500 || code == 429 => {
                    // Refused or unknown: a 503 from a store without quorum wrote nothing, a 504
                    // may have; either way it is no acknowledgement.
                    outcomes.unknown.insert(name);
                }
                Some((code, body)) => panic!("create {name}: unexpected {code}: {body:?}"),
                None => {
                    outcomes.unknown.insert(name);
                    server = 1 - server;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One change a watch delivered: (resourceVersion, type, name).
type Change = (u64, String, String);

/// A watch of the namespace's ConfigMaps from `from`, resumed on the other API server from its
/// last resourceVersion whenever the connection ends.
async fn watch(
    http: reqwest::Client,
    servers: [String; 2],
    token: String,
    stop: Arc<AtomicBool>,
    from: u64,
    seen: Arc<Mutex<Vec<Change>>>,
) -> u32 {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    resumed_watch(
        &http,
        &servers,
        &token,
        &path,
        &stop,
        from,
        |at, kind, object| {
            let name = object["metadata"]["name"].as_str().unwrap().to_string();
            seen.lock().unwrap().push((at, kind.to_string(), name));
        },
    )
    .await
}

/// Of two replicas, the one whose log says it took the lease.
fn leader<'a>(what: &str, a: &'a mut Component, b: &'a mut Component) -> &'a mut Component {
    let holds = |c: &Component| c.log_text().contains(ACQUIRED);
    assert!(
        eventually(Duration::from_secs(30), || holds(a) || holds(b)),
        "no {what} took the lease"
    );
    match (holds(a), holds(b)) {
        (true, false) => a,
        (false, true) => b,
        _ => panic!("both {what}s took the lease"),
    }
}

#[test]
fn the_cluster_loses_nothing_when_etcds_leader_an_api_server_and_the_controller_manager_die() {
    let Some(mut etcd) = EtcdCluster::start(3) else {
        return;
    };
    let endpoints = etcd.endpoints();
    let mut a = TestCluster::start(&["--datastore-endpoint", &endpoints]);
    let b = a.join_server("apiserver", &["--datastore-endpoint", &endpoints]);
    let servers = format!("{},{}", a.server, b.server);
    let ca = a.data_dir().join("pki/ca.crt");
    let ca_key = a.data_dir().join("pki/ca.key");
    let (ca, ca_key) = (ca.to_str().unwrap(), ca_key.to_str().unwrap());
    let through_both = |component: &str, extra: &[&str]| {
        let mut args = vec![
            component,
            "--server",
            &servers,
            "--token",
            &a.token,
            "--certificate-authority",
            ca,
        ];
        args.extend(extra);
        a.spawn_skiff(&args)
    };
    let mut controllers_args = vec![
        "--cluster-signing-cert-file",
        ca,
        "--cluster-signing-key-file",
        ca_key,
    ];
    controllers_args.extend(TIMING);
    let mut cm1 = through_both("controllers", &controllers_args);
    let mut cm2 = through_both("controllers", &controllers_args);
    let _s1 = through_both("scheduler", TIMING);
    let _s2 = through_both("scheduler", TIMING);
    let root = a.dir.path().join("kubelet-root");
    let _cleanup = PodCleanup(root.clone());
    let join = a.join_token();
    let _agent = a.spawn_skiff(&[
        "agent",
        "--server",
        &servers,
        "--token",
        &join,
        "--node-name",
        "ha-node",
        "--root-dir",
        root.to_str().unwrap(),
    ]);
    let kb = b.kubectl();
    kb.ok(&["create", "namespace", NAMESPACE]);
    kb.ok_with_input(&["apply", "-f", "-"], &deployment("steady", NAMESPACE));
    assert!(
        eventually(Duration::from_secs(60), || ready_replicas(
            &kb, "steady", NAMESPACE
        ) == 2),
        "the Deployment did not become ready before the faults:\n{}",
        kb.run(&["get", "pods,nodes", "-A", "-o", "wide"]).stdout
    );
    let list = |k: &Kubectl| -> Value {
        let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
        serde_json::from_str(&k.ok(&["get", "--raw", &path])).unwrap()
    };
    let from: u64 = list(&kb)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    let http = a.http();
    let bases = [a.server.clone(), b.server.clone()];
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Mutex::new(Outcomes {
        acked: vec![Vec::new(); WRITERS],
        ..Default::default()
    }));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|i| {
            runtime.spawn(writer(
                i,
                http.clone(),
                bases.clone(),
                a.token.clone(),
                stop.clone(),
                outcomes.clone(),
            ))
        })
        .collect();
    let watcher = runtime.spawn(watch(
        http.clone(),
        bases.clone(),
        a.token.clone(),
        stop.clone(),
        from,
        seen.clone(),
    ));
    let acked_since = |t: Instant| {
        outcomes
            .lock()
            .unwrap()
            .times
            .iter()
            .filter(|x| **x > t)
            .count()
    };

    // The faults, a few seconds apart; after each, writes are acknowledged again.
    std::thread::sleep(Duration::from_secs(3));
    let etcd_leader = etcd.leader();
    etcd.members[etcd_leader].kill();
    let killed = Instant::now();
    assert!(
        eventually(Duration::from_secs(30), || acked_since(killed) >= 10),
        "no writes acknowledged after etcd's leader was killed:\n{}",
        a.log_text()
    );
    a.kill();
    let killed = Instant::now();
    assert!(
        eventually(Duration::from_secs(30), || acked_since(killed) >= 10),
        "no writes acknowledged after API server A was killed:\n{}",
        b.log_text()
    );
    let active = leader("controller manager", &mut cm1, &mut cm2);
    active.kill();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        runtime.block_on(w).unwrap();
    }

    // The Deployment made before the faults is scaled after them, and converges: the standby
    // controller manager took over, the scheduler and the agent went on through B.
    kb.ok(&[
        "scale",
        "deployment",
        "steady",
        "-n",
        NAMESPACE,
        "--replicas=3",
    ]);
    assert!(
        eventually(Duration::from_secs(90), || ready_replicas(
            &kb, "steady", NAMESPACE
        ) == 3),
        "the Deployment did not converge after the faults:\n{}\n{}",
        kb.run(&["get", "pods,nodes", "-A", "-o", "wide"]).stdout,
        b.log_text()
    );

    // Every acknowledged create is there, and nothing else but the unknown outcomes.
    let list = list(&kb);
    let listed: BTreeMap<String, u64> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|cm| cm["data"]["writer"].is_string())
        .map(|cm| {
            (
                cm["metadata"]["name"].as_str().unwrap().to_string(),
                cm["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap(),
            )
        })
        .collect();
    let outcomes = outcomes.lock().unwrap();
    let acked: Vec<&(String, u64)> = outcomes.acked.iter().flatten().collect();
    assert!(
        acked.len() > 100,
        "only {} creates acknowledged",
        acked.len()
    );
    for (name, rv) in &acked {
        assert_eq!(listed.get(name), Some(rv), "acknowledged {name} at {rv}");
    }
    for name in listed.keys() {
        assert!(
            acked.iter().any(|(n, _)| n == name) || outcomes.unknown.contains(name),
            "{name} exists but was never asked for"
        );
    }
    // Unique resourceVersions, increasing per writer.
    let unique: BTreeSet<u64> = acked.iter().map(|(_, rv)| *rv).collect();
    assert_eq!(
        unique.len(),
        acked.len(),
        "a resourceVersion was handed out twice"
    );
    for (i, writes) in outcomes.acked.iter().enumerate() {
        assert!(
            writes.windows(2).all(|w| w[0].1 < w[1].1),
            "writer {i}'s resourceVersions do not increase: {writes:?}"
        );
    }

    // The watch caught up with the list and saw each object once, in order.
    let newest = listed.values().copied().max().unwrap_or(from);
    assert!(
        eventually(Duration::from_secs(30), || {
            seen.lock()
                .unwrap()
                .last()
                .is_some_and(|(rv, _, _)| *rv >= newest)
        }),
        "the watch did not catch up with {newest}"
    );
    stop.store(true, Ordering::Relaxed);
    let resumes = runtime.block_on(watcher).unwrap();
    let seen = seen.lock().unwrap();
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "the watch went back or repeated a revision"
    );
    let added: BTreeMap<&str, u64> = seen
        .iter()
        .filter(|(_, kind, _)| kind == "ADDED")
        .map(|(rv, _, name)| (name.as_str(), *rv))
        .collect();
    assert_eq!(
        added.len(),
        seen.iter().filter(|(_, kind, _)| kind == "ADDED").count(),
        "an object was added twice in the watch"
    );
    for (name, rv) in &listed {
        assert_eq!(
            added.get(name.as_str()),
            Some(rv),
            "the watch missed {name} at {rv}"
        );
    }
    assert!(resumes >= 1, "the watch never had to resume");
    eprintln!(
        "acknowledged {} creates, {} unknown outcomes; the watch resumed {resumes} times",
        acked.len(),
        outcomes.unknown.len()
    );
}

//! A chaos soak of the whole cluster: `skiff apiserver`, `skiff controllers`, `skiff scheduler`
//! and two `skiff agent` nodes, each its own process, under a steady workload — Deployments
//! scaled up and down, Jobs, ConfigMap churn, a watch — while a driver SIGKILLs a random component
//! every few seconds and starts it again, and faults the network between a random component and
//! the API server (each reaches it through a [`Link`] of its own): latency, the server
//! unreachable, a partition, or the connections open at that moment silently lost.
//!
//! Checked at the end: every ConfigMap write the API acknowledged is there (or its acknowledged
//! delete is), the watch (resumed from its last resourceVersion after each API server kill, as a
//! client does) saw the log's changes in order with none skipped or repeated, every Deployment
//! converged and every Job completed, no pod process is left behind once the workloads are gone,
//! no socket listens on the cluster's addresses once the components are stopped, and the API
//! server's resident memory and the data dir stay within stated bounds.
//!
//! It runs for `SKIFF_CHAOS_SECONDS` (60 by default; BENCHMARKS.md reports a 10-minute run).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::watching::resumed_watch;
use serde_json::{Value, json};
use skiff_tests::faults::{Fault, Link};
use skiff_tests::{Component, TestCluster, eventually, processes_under, skiff_ok};

const NAMESPACE: &str = "chaos";
/// The Deployments and the replica counts the driver moves them between.
const DEPLOYMENTS: [&str; 3] = ["alpha", "beta", "gamma"];
const SCALES: [u32; 4] = [1, 2, 3, 5];
/// The soak's ClusterIP range (a /24 of its own): the agents' proxies bind its addresses.
const SERVICE_RANGE: [u8; 3] = [127, 98, 33];
/// Resident memory of the API server after the soak, at most.
const RSS_LIMIT_MIB: u64 = 400;
/// The data dir after the soak, at most.
const DATA_DIR_LIMIT_MIB: u64 = 256;

fn deployment(name: &str, replicas: u32) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "sleep 3600"]
"#
    )
}

fn job(name: &str) -> String {
    format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  completions: 2
  parallelism: 2
  backoffLimit: 20
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: ["sh", "-c", "sleep 1"]
"#
    )
}

/// What the API acknowledged for one ConfigMap, in order; `None` data is a delete.
#[derive(Default)]
struct Acked {
    /// Per name: the last acknowledged write (its resourceVersion and data, None if deleted),
    /// and whether a write after it went unanswered (then its outcome is unknown).
    last: BTreeMap<String, (u64, Option<String>, bool)>,
    writes: u64,
    unanswered: u64,
}

/// The client's side of the churn: create, update, delete ConfigMaps over HTTPS, recording
/// what was acknowledged. Errors (the API server is down) are unknown outcomes, not failures.
async fn churn(
    http: reqwest::Client,
    base: String,
    token: String,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acked>>,
) {
    let url = format!("{base}/api/v1/namespaces/{NAMESPACE}/configmaps");
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("cm-{}", i % 40);
        let value = format!("v{i}");
        let known = acked.lock().unwrap().last.get(&name).cloned();
        let request = match &known {
            Some((_, Some(_), false)) if i % 5 == 0 => http.delete(format!("{url}/{name}")),
            Some((_, Some(_), false)) => http.put(format!("{url}/{name}")).json(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "data": {"value": value},
            })),
            Some((_, None, false)) | None => http.post(&url).json(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "data": {"value": value},
            })),
            // A write to it went unanswered: read back what is there before going on.
            Some((_, _, true)) => http.get(format!("{url}/{name}")),
        };
        let response = request
            .bearer_auth(&token)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let deleting = matches!(&known, Some((_, Some(_), false)) if i % 5 == 0);
        let reading = matches!(&known, Some((_, _, true)));
        let answer = match response {
            Ok(r) => Some((r.status().as_u16(), r.json::<Value>().await.ok())),
            Err(_) => None,
        };
        {
            let mut acked = acked.lock().unwrap();
            match answer {
                Some((code @ (200 | 201), Some(body))) => {
                    let rv: u64 = body["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let data = if deleting {
                        None
                    } else {
                        body["data"]["value"].as_str().map(str::to_string)
                    };
                    if !reading {
                        acked.writes += 1;
                    }
                    assert!(
                        deleting || data.is_some(),
                        "{code} answer without data: {body}"
                    );
                    acked.last.insert(name, (rv, data, false));
                }
                Some((404, _)) if reading => {
                    acked.last.insert(name, (0, None, false));
                }
                Some((code, _)) if code >= 500 || code == 429 => {
                    // The server could not say: the write may or may not have happened.
                    if let Some(entry) = acked.last.get_mut(&name) {
                        entry.2 = true;
                    } else {
                        acked.last.insert(name, (0, None, true));
                    }
                    acked.unanswered += 1;
                }
                Some((code, body)) => {
                    // 409 AlreadyExists / NotFound after an unknown outcome: read back next time.
                    assert!(
                        code == 409 || code == 404,
                        "unexpected answer {code}: {body:?}"
                    );
                    acked.last.entry(name).or_default().2 = true;
                }
                None => {
                    acked.last.entry(name).or_default().2 = true;
                    acked.unanswered += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One change a watch delivered: (resourceVersion, type, name, data value).
type Change = (u64, String, String, Option<String>);

/// A client's watch of the namespace's ConfigMaps, resumed from its last resourceVersion whenever
/// the connection drops (the API server was killed).
async fn watch(
    http: reqwest::Client,
    base: String,
    token: String,
    stop: Arc<AtomicBool>,
    from: u64,
) -> (Vec<Change>, u32) {
    let mut seen: Vec<Change> = Vec::new();
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    let resumes = resumed_watch(
        &http,
        &[base],
        &token,
        &path,
        &stop,
        from,
        |at, kind, object| {
            seen.push((
                at,
                kind.to_string(),
                object["metadata"]["name"].as_str().unwrap().to_string(),
                object["data"]["value"].as_str().map(str::to_string),
            ));
        },
    )
    .await;
    (seen, resumes)
}

fn resident_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024
}

fn size_mib(dir: &std::path::Path) -> u64 {
    fn walk(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => walk(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(dir) / (1024 * 1024)
}

/// The IPv4 TCP sockets listening on this machine (`/proc/net/tcp`, state `0A`).
fn listeners() -> Vec<std::net::SocketAddrV4> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) != Some(&"0A") {
                return None;
            }
            let (ip, port) = fields.get(1)?.split_once(':')?;
            // The address as the kernel's 32-bit word, printed in hex: its bytes little-endian.
            let ip = u32::from_str_radix(ip, 16).ok()?.to_le_bytes();
            let port = u16::from_str_radix(port, 16).ok()?;
            Some(std::net::SocketAddrV4::new(ip.into(), port))
        })
        .collect()
}

#[test]
fn the_cluster_survives_components_killed_at_random_under_load() {
    let seconds: u64 = std::env::var("SKIFF_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    // A ClusterIP range of its own: the agents' proxies bind its addresses on loopback.
    let range = format!(
        "{}.{}.{}.0/24",
        SERVICE_RANGE[0], SERVICE_RANGE[1], SERVICE_RANGE[2]
    );
    let mut cluster = TestCluster::start(&["--service-cluster-ip-range", &range]);
    let roots: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| cluster.dir.path().join(format!("node-{n}")))
        .collect();
    // Each component's own network to the API server.
    let api: std::net::SocketAddr = ([127, 0, 0, 1], cluster.port()).into();
    let links: Vec<Link> = (0..4).map(|_| Link::to(api)).collect();
    let mut components: Vec<Component> = vec![
        cluster.spawn_controllers_through(&links[0].url(), &[]),
        cluster.spawn_component_through(&links[1].url(), &["scheduler"]),
    ];
    for ((n, root), link) in ["chaos-a", "chaos-b"].iter().zip(&roots).zip(&links[2..]) {
        components.push(cluster.spawn_agent_through(
            &link.url(),
            &["--node-name", n, "--root-dir", root.to_str().unwrap()],
        ));
    }
    let k = cluster.kubectl();
    k.ok(&["create", "namespace", NAMESPACE]);
    for name in DEPLOYMENTS {
        k.ok_with_input(&["apply", "-f", "-"], &deployment(name, 2));
    }
    assert!(
        eventually(Duration::from_secs(60), || {
            k.run(&["get", "nodes", "-o", "name"])
                .stdout
                .lines()
                .count()
                == 2
        }),
        "the agents never registered"
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let start_rv: u64 = serde_json::from_str::<Value>(&k.ok(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{NAMESPACE}/configmaps?limit=1"),
    ]))
    .unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let churner = rt.spawn(churn(
        cluster.http(),
        cluster.server.clone(),
        cluster.token.clone(),
        stop.clone(),
        acked.clone(),
    ));
    let watcher = rt.spawn(watch(
        cluster.http(),
        cluster.server.clone(),
        cluster.token.clone(),
        stop.clone(),
        start_rv,
    ));

    // The chaos: every few seconds a random component is killed and started again, and the
    // network of a random component (the same one or another) fails in one of the ways a
    // network does until the next round; between kills the Deployments are rescaled and a Job
    // is created.
    let mut scales: BTreeMap<&str, u32> = DEPLOYMENTS.iter().map(|d| (*d, 2)).collect();
    let mut kills: BTreeMap<&str, u32> = BTreeMap::new();
    let mut faults: BTreeMap<&str, u32> = BTreeMap::new();
    let mut jobs = Vec::new();
    let names = [
        "apiserver",
        "controllers",
        "scheduler",
        "agent-a",
        "agent-b",
    ];
    let started = Instant::now();
    let mut round = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        round += 1;
        let victim = (round * 7 + started.elapsed().subsec_nanos() as u64) as usize % names.len();
        if victim == 0 {
            cluster.restart_after_crash();
        } else {
            components[victim - 1].kill();
            std::thread::sleep(Duration::from_millis(300 + round % 5 * 200));
            components[victim - 1].restart_after_crash();
        }
        *kills.entry(names[victim]).or_default() += 1;
        for link in &links {
            link.heal();
        }
        let faulted = (round as usize * 3 + victim) % links.len();
        let (fault, label) = match (round / 2) % 4 {
            0 => (
                Fault::Latency(Duration::from_millis(50 + round % 4 * 100)),
                "latency",
            ),
            1 => (Fault::Down, "down"),
            2 => (Fault::Partition, "partition"),
            _ => (Fault::Sever, "sever"),
        };
        links[faulted].set(fault);
        *faults.entry(label).or_default() += 1;
        // The workload goes on through kubectl; a call that meets the API server down is
        // retried, as a user would.
        let deployment = DEPLOYMENTS[round as usize % DEPLOYMENTS.len()];
        let replicas = SCALES[(round as usize / 3) % SCALES.len()];
        let scaled = eventually(Duration::from_secs(30), || {
            k.run(&[
                "scale",
                "-n",
                NAMESPACE,
                "deployment",
                deployment,
                &format!("--replicas={replicas}"),
            ])
            .ok
        });
        assert!(scaled, "kubectl scale kept failing");
        scales.insert(deployment, replicas);
        if round % 2 == 0 {
            let name = format!("job-{round}");
            assert!(eventually(Duration::from_secs(30), || {
                let run = k.run_with_input(&["apply", "-f", "-"], &job(&name));
                run.ok
            }));
            jobs.push(name);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    for link in &links {
        link.heal();
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(churner).unwrap();
    let (changes, resumes) = rt.block_on(watcher).unwrap();

    // Every Deployment converges on its last scale, every Job completes.
    // `kubectl get <what> -n chaos <selection...> -o <output>`, its output.
    let get = |what: &str, selection: &[&str], output: &str| {
        let mut args = vec!["get", what, "-n", NAMESPACE];
        args.extend_from_slice(selection);
        args.extend(["-o", output]);
        k.run(&args).stdout
    };
    for (name, replicas) in &scales {
        let converged = eventually(Duration::from_secs(180), || {
            get(
                "deployment",
                &[name],
                "jsonpath={.status.readyReplicas}/{.status.replicas}/{.status.updatedReplicas}",
            )
            .trim()
                == format!("{replicas}/{replicas}/{replicas}")
        });
        if !converged {
            // What the controllers and the node lifecycle saw: the status that fell short, the
            // pods' Ready conditions (kubectl's READY column counts containers only), the nodes.
            let label = format!("app={name}");
            let pods = ["-l", label.as_str()];
            panic!(
                "deployment {name} did not converge on {replicas}: {}\n{}\n{}\n{}\n{}",
                get("deployment", &[name], "jsonpath={.status}"),
                get(
                    "replicaset",
                    &pods,
                    "jsonpath={range .items[*]}{.metadata.name}: {.status}{\"\\n\"}{end}"
                ),
                get("pods", &pods, "wide"),
                get(
                    "pods",
                    &pods,
                    "jsonpath={range .items[*]}{.metadata.name}: \
                     {.status.conditions[?(@.type==\"Ready\")]}{\"\\n\"}{end}"
                ),
                k.run(&["get", "nodes"]).stdout,
            );
        }
    }
    for name in &jobs {
        let done = eventually(Duration::from_secs(180), || {
            get("job", &[name], "jsonpath={.status.succeeded}").trim() == "2"
        });
        assert!(done, "job {name} did not complete");
    }

    // Every acknowledged ConfigMap write is there, unless a later write went unanswered.
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let listed: Value =
        serde_json::from_str(&k.ok(&["get", "configmaps", "-n", NAMESPACE, "-o", "json"])).unwrap();
    let live: BTreeMap<String, Option<String>> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cm| {
            (
                cm["metadata"]["name"].as_str().unwrap().to_string(),
                cm["data"]["value"].as_str().map(str::to_string),
            )
        })
        .filter(|(name, _)| name.starts_with("cm-"))
        .collect();
    let mut checked = 0;
    for (name, (_, data, unknown)) in &acked.last {
        if *unknown {
            continue;
        }
        checked += 1;
        assert_eq!(
            live.get(name).cloned().flatten(),
            data.clone(),
            "ConfigMap {name}: the acknowledged write was lost"
        );
    }
    assert!(
        checked > 10,
        "too few ConfigMaps settled to check: {checked}"
    );

    // The watch: in order, nothing repeated (resourceVersions strictly increase), and nothing
    // skipped: exactly the ConfigMap changes the log holds between its start and its end.
    for pair in changes.windows(2) {
        assert!(
            pair[0].0 < pair[1].0,
            "the watch went back or repeated: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    let last_rv = changes.last().map(|c| c.0).unwrap_or(start_rv);

    // Tear down the workloads: nothing of them may run afterwards.
    k.ok(&["delete", "namespace", NAMESPACE, "--wait=false"]);
    let drained = eventually(Duration::from_secs(120), || {
        roots.iter().all(|root| processes_under(root).is_empty())
    });
    let leftover: Vec<_> = roots.iter().map(|r| processes_under(r)).collect();
    assert!(drained, "pod processes left behind: {leftover:?}");

    // The agents' proxies listen on the service range (the `kubernetes` Service at least) while
    // they run; once everything is stopped, nothing may listen there or on the API server's port.
    let api_port = cluster.port();
    let in_service_range =
        |address: &std::net::SocketAddrV4| address.ip().octets()[..3] == SERVICE_RANGE[..];
    let ours = |address: &std::net::SocketAddrV4| {
        in_service_range(address) || (address.ip().is_loopback() && address.port() == api_port)
    };
    let before: Vec<_> = listeners().into_iter().filter(ours).collect();
    assert!(
        before.iter().any(in_service_range),
        "no proxy listens on the service range while the agents run: {before:?}"
    );
    let rss = resident_mib(cluster.pid().unwrap());
    for mut c in components {
        let status = c.stop();
        assert!(status.is_some(), "a component was not running at the end");
    }
    cluster.stop();
    let left: Vec<_> = listeners().into_iter().filter(ours).collect();
    assert!(left.is_empty(), "listeners left behind: {left:?}");
    let data = size_mib(&cluster.data_dir());

    let logged = skiff_ok(&[
        "log",
        "configmaps",
        "-n",
        NAMESPACE,
        "--since",
        &(start_rv + 1).to_string(),
        "--until",
        &last_rv.to_string(),
        "-o",
        "json",
        "--data-dir",
        cluster.data_dir().to_str().unwrap(),
    ]);
    let logged: Vec<(u64, String)> = logged
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("cm-")))
        .map(|c| {
            (
                c["revision"].as_u64().unwrap(),
                c["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let watched: Vec<(u64, String)> = changes
        .iter()
        .filter(|c| c.2.starts_with("cm-"))
        .map(|c| (c.0, c.2.clone()))
        .collect();
    assert_eq!(
        watched, logged,
        "the watch and the log disagree on the ConfigMap changes"
    );

    assert!(
        rss <= RSS_LIMIT_MIB,
        "API server resident memory {rss} MiB > {RSS_LIMIT_MIB} MiB"
    );
    assert!(
        data <= DATA_DIR_LIMIT_MIB,
        "data dir {data} MiB > {DATA_DIR_LIMIT_MIB} MiB"
    );
    let carried = links.iter().fold((0, 0, 0), |(c, d, s), link| {
        let counts = link.counts();
        (
            c + counts.connections,
            d + counts.closed,
            s + counts.severed,
        )
    });
    eprintln!(
        "chaos: {seconds} s, kills {kills:?}, network faults {faults:?} (links carried {} \
         connections, closed {}, severed {}); {} ConfigMap writes acknowledged ({} unanswered), \
         {checked} settled ones checked; watch: {} changes over {resumes} connections, equal to \
         the log; {} Deployments converged, {} Jobs completed; API server RSS {rss} MiB, data \
         dir {data} MiB",
        carried.0,
        carried.1,
        carried.2,
        acked.writes,
        acked.unanswered,
        changes.len(),
        scales.len(),
        jobs.len()
    );
}

/// Components started while the API server cannot be reached wait for it, as a kubelet does (an
/// edge box that boots before its server), rather than exit; what the server can never accept
/// still stops them at once. The soak above found the first: an agent it started again while
/// the API server was down exited ("cannot reach the API server"), and its node stayed NotReady.
#[test]
fn components_started_while_the_api_server_is_unreachable_wait_for_it() {
    let cluster = TestCluster::start(&["--service-cluster-ip-range", "127.98.35.0/24"]);
    // No pod is scheduled here, so the kubelet leaves no process behind.
    let root = cluster.dir.path().join("node-late");
    let api: std::net::SocketAddr = ([127, 0, 0, 1], cluster.port()).into();
    let link = Link::to(api);
    link.set(Fault::Down);
    // The controllers reach the server directly: they sign the agent's certificate requests.
    let _controllers = cluster.spawn_controllers(&[]);
    let mut scheduler = cluster.spawn_component_through(&link.url(), &["scheduler"]);
    let mut agent = cluster.spawn_agent_through(
        &link.url(),
        &["--node-name", "late", "--root-dir", root.to_str().unwrap()],
    );
    const WAITING: &str = "the API server cannot be reached yet";
    let waiting = eventually(Duration::from_secs(30), || {
        agent.log_text().contains(WAITING) && scheduler.log_text().contains(WAITING)
    });
    assert!(
        waiting,
        "they do not wait for the server:\n{}\n{}",
        agent.log_text(),
        scheduler.log_text()
    );
    // Past the first retries (1 s, then 2 s, 4 s), still waiting.
    std::thread::sleep(Duration::from_secs(8));
    assert!(agent.is_running(), "the agent exited: {}", agent.log_text());
    assert!(
        scheduler.is_running(),
        "the scheduler exited: {}",
        scheduler.log_text()
    );

    link.heal();
    let k = cluster.kubectl();
    let ready = eventually(Duration::from_secs(90), || {
        k.run(&[
            "get",
            "node",
            "late",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
        .stdout
            == "True"
    });
    assert!(ready, "node late never became Ready: {}", agent.log_text());
    let leading = eventually(Duration::from_secs(30), || {
        scheduler
            .log_text()
            .contains("successfully acquired the leader lease")
    });
    assert!(
        leading,
        "the scheduler never started: {}",
        scheduler.log_text()
    );

    // What can never succeed stops the agent at once: a join token whose CA hash is not the
    // server's, and one whose secret the server does not know.
    let real = cluster.join_token();
    let (hash, _secret) = real
        .strip_prefix("SKIFF1::")
        .and_then(|rest| rest.split_once("::"))
        .expect("a join token");
    let cases = [
        (
            format!("SKIFF1::{}::s3cret", "0".repeat(64)),
            "refusing to trust it",
        ),
        (format!("SKIFF1::{hash}::wrong"), "Unauthorized"),
    ];
    for (i, (token, why)) in cases.iter().enumerate() {
        let mut refused = cluster.spawn_skiff(&[
            "agent",
            "--server",
            &cluster.server,
            "--token",
            token,
            "--node-name",
            "refused",
            "--root-dir",
            cluster
                .dir
                .path()
                .join(format!("node-refused-{i}"))
                .to_str()
                .unwrap(),
        ]);
        assert!(
            eventually(Duration::from_secs(30), || !refused.is_running()),
            "an agent with a token that cannot work kept trying: {}",
            refused.log_text()
        );
        assert!(
            refused.log_text().contains(why),
            "{why}: {}",
            refused.log_text()
        );
    }
}

//! `skiff bench dns`: the cluster DNS against well-known DNS servers answering the same names,
//! side by side. A `skiff server` child with only its DNS component serves N Services; dnsmasq
//! and unbound (Debian's packages, where installed) are started on other loopback ports with the
//! same A records as static data; each is queried in alternated rounds by the same load
//! generator (concurrent UDP clients, each one query in flight, names in turn), which counts
//! answers/s and latency percentiles and reads each server's CPU per 1,000 answers.
//!
//! Every answer is checked: the A record of the name asked, with the Service's ClusterIP. A wrong
//! or missing answer counts as an error, and a query without an answer in a second as lost.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::core::v1::Service;
use serde_json::json;
use skiff_client::Api;
use skiff_client::api::PostParams;

use crate::bench::SpawnedServer;
use crate::bench_deployment::{cpu_seconds, percentile};

/// Flags of `skiff bench dns`.
#[derive(Debug, clap::Args)]
pub struct DnsArgs {
    /// Services served (one A record each).
    #[arg(long, default_value_t = 200)]
    services: usize,
    /// Concurrent clients, each with one query in flight.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Length of one round against one server.
    #[arg(long, default_value = "5s", value_parser = humantime_seconds)]
    duration: Duration,
    /// Alternated rounds (each server once per round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for temporary data dirs and configs (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn humantime_seconds(text: &str) -> Result<Duration, String> {
    let seconds = text.strip_suffix('s').unwrap_or(text);
    seconds
        .parse::<f64>()
        .map(Duration::from_secs_f64)
        .map_err(|e| format!("{text:?}: {e}"))
}

const NAMESPACE: &str = "dnsbench";
const DOMAIN: &str = "cluster.local";

/// One DNS server under test.
struct Peer {
    name: &'static str,
    address: SocketAddr,
    pid: u32,
    /// The peer's own process, stopped on drop (skiff's is the [`SpawnedServer`]).
    child: Option<Child>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What one round against one peer measured.
struct Round {
    answers: usize,
    errors: usize,
    lost: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    cpu: f64,
}

/// Runs the benchmark and prints its report.
pub async fn run(args: DnsArgs) -> Result<()> {
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dns_port = free_port()?;
    let mut server = SpawnedServer::start_with(
        "server",
        &[
            "--components".into(),
            "dns".into(),
            "--dns-port".into(),
            dns_port.to_string(),
            // No upstream is asked: every name in the run is a cluster name.
            "--dns-upstream".into(),
            "127.0.0.1:9".into(),
        ],
        Some(&base),
    )?;
    let client = server.wait_ready().await?;
    let records = make_services(&client, args.services).await?;
    let skiff = Peer {
        name: "skiff",
        address: SocketAddr::from((Ipv4Addr::LOCALHOST, dns_port)),
        pid: server.child.id(),
        child: None,
    };
    // The zone follows the API: wait until the last Service is answered.
    let (last_name, last_ip) = records.last().context("no services")?.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ask(skiff.address, &last_name).await != Some(Some(last_ip)) {
        if Instant::now() > deadline {
            bail!("skiff's DNS never answered {last_name}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let work = base.join(format!("skiff-bench-dns-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let mut peers = vec![skiff];
    match start_dnsmasq(&work, &records).await {
        Ok(peer) => peers.push(peer),
        Err(e) => eprintln!("dnsmasq left out: {e:#}"),
    }
    match start_unbound(&work, &records).await {
        Ok(peer) => peers.push(peer),
        Err(e) => eprintln!("unbound left out: {e:#}"),
    }
    let names: Arc<Vec<(Name, Ipv4Addr)>> = Arc::new(
        records
            .iter()
            .map(|(n, ip)| Ok((Name::from_ascii(n)?, *ip)))
            .collect::<Result<_>>()?,
    );
    println!(
        "cluster DNS: {} Services, {} clients with one query in flight each, {} s rounds, {} rounds",
        args.services,
        args.clients,
        args.duration.as_secs_f64(),
        args.rounds
    );
    let mut results: HashMap<&'static str, Vec<Round>> = HashMap::new();
    for round in 0..args.rounds {
        for peer in &peers {
            let measured = load(peer, names.clone(), args.clients, args.duration).await?;
            println!(
                "round {}: {:<8} {:>8.0} answers/s  p50 {:>6.0} µs  p99 {:>6.0} µs  errors {} lost {}  CPU {:.1} ms per 1,000 answers",
                round + 1,
                peer.name,
                measured.answers as f64 / measured.elapsed.as_secs_f64(),
                micros(percentile(&measured.latencies, 0.50)),
                micros(percentile(&measured.latencies, 0.99)),
                measured.errors,
                measured.lost,
                measured.cpu / measured.answers.max(1) as f64 * 1e6,
            );
            results.entry(peer.name).or_default().push(measured);
        }
    }
    println!();
    println!(
        "{:<8} {:>12} {:>10} {:>10} {:>16} {:>8}",
        "server", "answers/s", "p50 µs", "p99 µs", "CPU ms/1k ans.", "errors"
    );
    let summary = |rounds: &[Round]| {
        let answers: usize = rounds.iter().map(|r| r.answers).sum();
        let elapsed: f64 = rounds.iter().map(|r| r.elapsed.as_secs_f64()).sum();
        let mut all: Vec<Duration> = rounds.iter().flat_map(|r| r.latencies.clone()).collect();
        all.sort_unstable();
        let cpu: f64 = rounds.iter().map(|r| r.cpu).sum();
        let errors: usize = rounds.iter().map(|r| r.errors + r.lost).sum();
        (
            answers as f64 / elapsed,
            percentile(&all, 0.50),
            percentile(&all, 0.99),
            cpu / answers.max(1) as f64 * 1e6,
            errors,
        )
    };
    let (skiff_rate, _, skiff_p99, skiff_cpu, _) = summary(&results["skiff"]);
    for peer in &peers {
        let (rate, p50, p99, cpu, errors) = summary(&results[peer.name]);
        println!(
            "{:<8} {:>12.0} {:>10.0} {:>10.0} {:>16.1} {:>8}",
            peer.name,
            rate,
            micros(p50),
            micros(p99),
            cpu,
            errors
        );
    }
    for peer in peers.iter().filter(|p| p.name != "skiff") {
        let (rate, _, p99, cpu, _) = summary(&results[peer.name]);
        println!(
            "skiff / {}: answers/s ×{:.2}, p99 ×{:.2}, CPU per answer ×{:.2}",
            peer.name,
            skiff_rate / rate,
            skiff_p99.as_secs_f64() / p99.as_secs_f64(),
            skiff_cpu / cpu
        );
    }
    drop(peers);
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// A loopback port free for both UDP and TCP (the DNS servers bind both).
fn free_port() -> Result<u16> {
    for _ in 0..50 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = tcp.local_addr()?.port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no loopback port free for both UDP and TCP")
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Creates `count` ClusterIP Services; returns each one's full name and ClusterIP.
async fn make_services(
    client: &skiff_client::Client,
    count: usize,
) -> Result<Vec<(String, Ipv4Addr)>> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let mut records = Vec::with_capacity(count);
    for i in 0..count {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": format!("svc-{i}")},
            "spec": {"ports": [{"name": "http", "port": 80}]},
        }))?;
        let created = services.create(&PostParams::default(), &service).await?;
        let ip: Ipv4Addr = created
            .spec
            .and_then(|s| s.cluster_ip)
            .context("a Service without a ClusterIP")?
            .parse()?;
        records.push((format!("svc-{i}.{NAMESPACE}.svc.{DOMAIN}."), ip));
    }
    Ok(records)
}

/// dnsmasq with the records as `host-record`s, nothing read from the host, nothing forwarded.
async fn start_dnsmasq(work: &std::path::Path, records: &[(String, Ipv4Addr)]) -> Result<Peer> {
    let port = free_port()?;
    let config = work.join("dnsmasq.conf");
    let mut text = format!(
        "port={port}\nlisten-address=127.0.0.1\nbind-interfaces\nno-resolv\nno-hosts\nno-poll\nkeep-in-foreground\nlocal=/{DOMAIN}/\nlocal-ttl=5\n"
    );
    for (name, ip) in records {
        text.push_str(&format!(
            "host-record={},{ip}\n",
            name.trim_end_matches('.')
        ));
    }
    std::fs::write(&config, text)?;
    let child = Command::new("dnsmasq")
        .arg(format!("--conf-file={}", config.display()))
        .arg("--user=root")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting dnsmasq (Debian: apt-get install dnsmasq-base)")?;
    ready(
        Peer {
            name: "dnsmasq",
            address: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            pid: child.id(),
            child: Some(child),
        },
        records,
    )
    .await
}

/// unbound with the records as `local-data` of a static zone, two threads (one per core here).
async fn start_unbound(work: &std::path::Path, records: &[(String, Ipv4Addr)]) -> Result<Peer> {
    let port = free_port()?;
    let config = work.join("unbound.conf");
    let mut text = format!(
        "server:\n  interface: 127.0.0.1@{port}\n  port: {port}\n  do-daemonize: no\n  username: \"\"\n  chroot: \"\"\n  directory: \"{dir}\"\n  pidfile: \"\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 0\n  num-threads: 2\n  do-ip6: no\n  access-control: 127.0.0.0/8 allow\n  local-zone: \"{DOMAIN}.\" static\n",
        dir = work.display()
    );
    for (name, ip) in records {
        text.push_str(&format!("  local-data: \"{name} 5 IN A {ip}\"\n"));
    }
    text.push_str("remote-control:\n  control-enable: no\n");
    std::fs::write(&config, text)?;
    let child = Command::new("unbound")
        .arg("-c")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting unbound (Debian: apt-get install unbound)")?;
    ready(
        Peer {
            name: "unbound",
            address: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            pid: child.id(),
            child: Some(child),
        },
        records,
    )
    .await
}

/// `peer` once it answers the last record right.
async fn ready(peer: Peer, records: &[(String, Ipv4Addr)]) -> Result<Peer> {
    let (name, ip) = records.last().context("no records")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while ask(peer.address, name).await != Some(Some(*ip)) {
        if Instant::now() > deadline {
            bail!("{} never answered {name}", peer.name);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(peer)
}

/// Asks `server` for the A record of `name`: `None` without an answer in a second, else the
/// address answered (`None` inside for an answer without one).
async fn ask(server: SocketAddr, name: &str) -> Option<Option<Ipv4Addr>> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ok()?;
    socket.connect(server).await.ok()?;
    let name = Name::from_ascii(name).ok()?;
    let bytes = query(1, &name).ok()?;
    socket.send(&bytes).await.ok()?;
    let mut buffer = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buffer))
        .await
        .ok()?
        .ok()?;
    Some(answer(&buffer[..n]).ok().and_then(|(_, ip)| ip))
}

fn query(id: u16, name: &Name) -> Result<Vec<u8>> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name.clone(), RecordType::A));
    Ok(message.to_vec()?)
}

/// The id and the first A record of an answer, if it is NOERROR.
fn answer(bytes: &[u8]) -> Result<(u16, Option<Ipv4Addr>)> {
    let message = Message::from_vec(bytes)?;
    if message.metadata.response_code != ResponseCode::NoError {
        return Ok((message.metadata.id, None));
    }
    let ip = message.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(a.0),
        _ => None,
    });
    Ok((message.metadata.id, ip))
}

/// `clients` concurrent clients asking `peer` for `names` in turn for `duration`.
async fn load(
    peer: &Peer,
    names: Arc<Vec<(Name, Ipv4Addr)>>,
    clients: usize,
    duration: Duration,
) -> Result<Round> {
    let cpu0 = cpu_seconds(peer.pid);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let names = names.clone();
        let address = peer.address;
        tasks.push(tokio::spawn(async move {
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
            socket.connect(address).await?;
            let mut buffer = [0u8; 512];
            let (mut answers, mut errors, mut lost) = (0usize, 0usize, 0usize);
            let mut latencies = Vec::new();
            let mut i = client;
            let mut id: u16 = 0;
            while Instant::now() < deadline {
                let (name, ip) = &names[i % names.len()];
                i += clients;
                id = id.wrapping_add(1);
                let bytes = query(id, name)?;
                let sent = Instant::now();
                socket.send(&bytes).await?;
                // Skip stale answers to queries that were counted lost.
                let got = tokio::time::timeout(Duration::from_secs(1), async {
                    loop {
                        let n = socket.recv(&mut buffer).await?;
                        match answer(&buffer[..n]) {
                            Ok((got, ip)) if got == id => return Ok::<_, anyhow::Error>(ip),
                            Ok(_) => continue,
                            Err(_) => return Ok(None),
                        }
                    }
                })
                .await;
                match got {
                    Ok(Ok(Some(answered))) if answered == *ip => {
                        answers += 1;
                        latencies.push(sent.elapsed());
                    }
                    Ok(Ok(_)) => errors += 1,
                    Ok(Err(e)) => return Err(e),
                    Err(_) => lost += 1,
                }
            }
            Ok::<_, anyhow::Error>((answers, errors, lost, latencies))
        }));
    }
    let mut round = Round {
        answers: 0,
        errors: 0,
        lost: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        cpu: 0.0,
    };
    for task in tasks {
        let (answers, errors, lost, latencies) = task.await??;
        round.answers += answers;
        round.errors += errors;
        round.lost += lost;
        round.latencies.extend(latencies);
    }
    round.elapsed = started.elapsed();
    round.cpu = cpu_seconds(peer.pid) - cpu0;
    round.latencies.sort_unstable();
    Ok(round)
}

//! Proxy benchmark: bulk throughput and small-request latency on loopback, connecting directly to
//! the backends, through skiff-proxy, through a bare splice relay (the floor any userspace relay
//! stands on: what the second pass through the TCP stack costs by itself), and through HAProxy
//! (if installed), side by side in one run.
//!
//! `cargo bench -p skiff-proxy --bench proxy`. Knobs: `SKIFF_BENCH_BULK_MIB` (per transfer, default
//! 1024), `SKIFF_BENCH_ROUNDS` (default 3; medians are reported), `SKIFF_BENCH_REQUESTS`
//! (persistent-connection round trips per round, default 20000), `SKIFF_BENCH_CONNECTIONS` (new
//! connections per round, default 2000), `SKIFF_BENCH_HAPROXY` (the binary, default `haproxy`),
//! `SKIFF_BENCH_WORKERS` (worker threads of skiff-proxy's runtime; a list measures one proxy per
//! entry; default `1,2`).
//!
//! The backends and the client use blocking sockets on their own threads so that they add the
//! same, small cost to every path; skiff-proxy runs in a tokio runtime of its own, HAProxy
//! as a child process with two threads.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Service};
use serde_json::json;
use skiff_proxy::{Config, Proxier};
use tokio_util::sync::CancellationToken;

const REQUEST: usize = 64;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A backend: the first byte of a connection picks the mode. `E`: echo until EOF. `S` + u64 (big
/// endian): send that many bytes, then close.
fn backend(ip: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).expect("bind backend");
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut mode = [0u8; 1];
                if stream.read_exact(&mut mode).is_err() {
                    return;
                }
                match mode[0] {
                    b'E' => {
                        let mut buf = [0u8; 4096];
                        loop {
                            match stream.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    if stream.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    }
                    b'S' => {
                        let mut len = [0u8; 8];
                        if stream.read_exact(&mut len).is_err() {
                            return;
                        }
                        let mut left = u64::from_be_bytes(len);
                        let chunk = vec![0x5au8; 256 * 1024];
                        while left > 0 {
                            let n = left.min(chunk.len() as u64) as usize;
                            if stream.write_all(&chunk[..n]).is_err() {
                                return;
                            }
                            left -= n as u64;
                        }
                    }
                    _ => {}
                }
            });
        }
    });
    addr
}

/// Bytes per second of one bulk transfer of `bytes` from a backend through `target`.
fn throughput(target: SocketAddr, bytes: u64) -> f64 {
    let mut stream = TcpStream::connect(target).expect("connect for bulk");
    let mut request = vec![b'S'];
    request.extend_from_slice(&bytes.to_be_bytes());
    let start = Instant::now();
    stream.write_all(&request).unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            Err(e) => panic!("bulk read failed: {e}"),
        }
    }
    assert_eq!(got, bytes, "short bulk transfer");
    got as f64 / start.elapsed().as_secs_f64()
}

/// Round-trip times of `n` small requests over one connection.
fn persistent(target: SocketAddr, n: usize) -> Vec<Duration> {
    let mut stream = TcpStream::connect(target).expect("connect for latency");
    stream.set_nodelay(true).unwrap();
    stream.write_all(b"E").unwrap();
    let request = [0x42u8; REQUEST];
    let mut response = [0u8; REQUEST];
    for _ in 0..n / 10 {
        stream.write_all(&request).unwrap();
        stream.read_exact(&mut response).unwrap();
    }
    (0..n)
        .map(|_| {
            let start = Instant::now();
            stream.write_all(&request).unwrap();
            stream.read_exact(&mut response).unwrap();
            start.elapsed()
        })
        .collect()
}

/// Times of `n` connect + small request + response + close.
fn new_connections(target: SocketAddr, n: usize) -> Vec<Duration> {
    let mut request = vec![b'E'];
    request.extend_from_slice(&[0x42u8; REQUEST]);
    let mut response = [0u8; REQUEST];
    (0..n)
        .map(|_| {
            let start = Instant::now();
            let mut stream = TcpStream::connect(target).expect("connect");
            stream.set_nodelay(true).unwrap();
            stream.write_all(&request).unwrap();
            stream.read_exact(&mut response).unwrap();
            drop(stream);
            start.elapsed()
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// skiff-proxy in a runtime of its own, serving one Service at `cluster_ip:8080`.
fn start_skiff(
    cluster_ip: &str,
    backends: &[SocketAddr],
    workers: usize,
) -> (SocketAddr, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "bench"},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "tcp", "port": 8080}]}
    }))
    .unwrap();
    let subsets: Vec<_> = backends
        .iter()
        .map(|a| json!({"addresses": [{"ip": a.ip().to_string()}], "ports": [{"name": "tcp", "port": a.port()}]}))
        .collect();
    let endpoints: Endpoints = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "bench"}, "subsets": subsets
    }))
    .unwrap();
    let proxier = runtime.block_on(async {
        let mut proxier = Proxier::new(Config::default(), CancellationToken::new());
        let report = proxier.sync([service], [endpoints]).await;
        assert!(report.failed.is_empty(), "{report:?}");
        proxier
    });
    // Keep the proxier alive as long as the runtime.
    runtime.spawn(async move {
        std::future::pending::<()>().await;
        drop(proxier);
    });
    (format!("{cluster_ip}:8080").parse().unwrap(), runtime)
}

/// The least any userspace relay can do, as a floor for the others: every connection goes to
/// the first backend, with a blocking thread per direction moving bytes socket → pipe → socket
/// with splice(2); no event loop, no balancing, no bookkeeping.
fn start_bare_relay(address: &str, backend: SocketAddr) -> SocketAddr {
    use nix::fcntl::{SpliceFFlags, splice};
    let listener = TcpListener::bind((address, 8080)).expect("bind bare relay");
    let target = listener.local_addr().unwrap();
    fn one_way(from: TcpStream, to: TcpStream) {
        let (read, write) = nix::unistd::pipe().expect("pipe");
        let _ = nix::fcntl::fcntl(&write, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
        loop {
            let n = match splice(
                &from,
                None,
                &write,
                None,
                1 << 20,
                SpliceFFlags::SPLICE_F_MOVE,
            ) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut left = n;
            while left > 0 {
                match splice(&read, None, &to, None, left, SpliceFFlags::SPLICE_F_MOVE) {
                    Ok(0) | Err(_) => return,
                    Ok(m) => left -= m,
                }
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    }
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(backend) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            thread::spawn(move || one_way(client, server));
            thread::spawn(move || one_way(s2, c2));
        }
    });
    target
}

/// HAProxy in TCP mode, round-robin over the same backends; `None` if it is not installed.
fn start_haproxy(
    binary: &str,
    address: &str,
    backends: &[SocketAddr],
    splice: bool,
    dir: &std::path::Path,
) -> Option<(SocketAddr, Child)> {
    let mut config = format!(
        "global\n  nbthread 2\n  maxconn 4000\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n{}listen bench\n  bind {address}:8080\n  balance roundrobin\n",
        if splice { "  option splice-auto\n" } else { "" }
    );
    for (i, b) in backends.iter().enumerate() {
        config.push_str(&format!("  server s{i} {b}\n"));
    }
    let path = dir.join(format!(
        "haproxy-{}.cfg",
        if splice { "splice" } else { "plain" }
    ));
    std::fs::write(&path, config).unwrap();
    let child = Command::new(binary)
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let target: SocketAddr = format!("{address}:8080").parse().unwrap();
    for _ in 0..100 {
        if TcpStream::connect(target).is_ok() {
            return Some((target, child));
        }
        thread::sleep(Duration::from_millis(50));
    }
    None
}

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat` (in USER_HZ,
/// 100 per second on Linux).
fn cpu_seconds(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().unwrap_or(0.0) + fields[12].parse::<f64>().unwrap_or(0.0);
    ticks / 100.0
}

/// One path under test: where to connect, and which processes do its work.
struct Path {
    name: String,
    target: SocketAddr,
    /// The proxy's own process, if it is not this one.
    child: Option<u32>,
}

impl Path {
    /// CPU seconds of this process (client, backends and skiff-proxy) plus the proxy child's.
    fn cpu(&self) -> f64 {
        cpu_seconds("self") + self.child.map_or(0.0, |pid| cpu_seconds(&pid.to_string()))
    }
}

#[derive(Default)]
struct Samples {
    throughput: Vec<f64>,
    persistent: Vec<Duration>,
    new: Vec<Duration>,
    /// CPU seconds per GB of bulk transfer, per round.
    bulk_cpu: Vec<f64>,
    /// CPU microseconds per request, persistent and new connections, per round.
    persistent_cpu: Vec<f64>,
    new_cpu: Vec<f64>,
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is understood.
    let bulk = env_or("SKIFF_BENCH_BULK_MIB", 1024) * 1024 * 1024;
    let rounds = env_or("SKIFF_BENCH_ROUNDS", 3) as usize;
    let requests = env_or("SKIFF_BENCH_REQUESTS", 20_000) as usize;
    let connections = env_or("SKIFF_BENCH_CONNECTIONS", 2_000) as usize;
    let haproxy = std::env::var("SKIFF_BENCH_HAPROXY").unwrap_or_else(|_| "haproxy".into());

    let backends = [
        backend("127.0.0.1"),
        backend("127.0.0.2"),
        backend("127.0.0.3"),
    ];
    let workers: Vec<usize> = std::env::var("SKIFF_BENCH_WORKERS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    let dir = std::env::temp_dir().join(format!("skiff-proxy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut children = Vec::new();
    let mut paths = vec![Path {
        name: "direct".into(),
        target: backends[0],
        child: None,
    }];
    let mut runtimes = Vec::new();
    for (i, w) in workers.iter().enumerate() {
        let (target, runtime) = start_skiff(&format!("127.96.200.{}", 10 + i), &backends, *w);
        runtimes.push(runtime);
        paths.push(Path {
            name: format!("skiff-proxy, {w} worker{}", if *w == 1 { "" } else { "s" }),
            target,
            child: None,
        });
    }
    paths.push(Path {
        name: "bare splice relay (floor)".into(),
        target: start_bare_relay("127.96.200.4", backends[0]),
        child: None,
    });
    for (splice, address, name) in [
        (false, "127.96.200.2", "HAProxy"),
        (true, "127.96.200.3", "HAProxy, option splice-auto"),
    ] {
        match start_haproxy(&haproxy, address, &backends, splice, &dir) {
            Some((target, child)) => {
                paths.push(Path {
                    name: name.into(),
                    target,
                    child: Some(child.id()),
                });
                children.push(child);
            }
            None => eprintln!("{haproxy} did not start: no {name} column"),
        }
    }

    // Rounds interleave the paths so that load from elsewhere on the machine hits all alike.
    let mut samples: Vec<Samples> = paths.iter().map(|_| Samples::default()).collect();
    for round in 0..rounds {
        for (path, s) in paths.iter().zip(&mut samples) {
            let c0 = path.cpu();
            let t = throughput(path.target, bulk);
            let c1 = path.cpu();
            let p = persistent(path.target, requests);
            let c2 = path.cpu();
            let n = new_connections(path.target, connections);
            let c3 = path.cpu();
            s.bulk_cpu.push((c1 - c0) / (bulk as f64 / 1e9));
            s.persistent_cpu
                .push((c2 - c1) * 1e6 / (requests as f64 * 1.1));
            s.new_cpu.push((c3 - c2) * 1e6 / connections as f64);
            let mut sorted = p.clone();
            sorted.sort();
            eprintln!(
                "round {round} {}: {:.2} GB/s, persistent p50 {:?}",
                path.name,
                t / 1e9,
                percentile(&sorted, 0.5),
            );
            s.throughput.push(t);
            s.persistent.extend(p);
            s.new.extend(n);
        }
    }
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "bulk {} MiB per transfer, {rounds} rounds (throughput and CPU: median of rounds; latency: percentiles of all samples); {requests} round trips of {REQUEST} B and {connections} new connections per round\n",
        bulk / (1024 * 1024)
    );
    println!(
        "| path | bulk throughput | vs direct | CPU s per GB | persistent p50 | p99 | added p50 | CPU µs per request | new conn p50 | p99 | added p50 | CPU µs per connection |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut direct = None;
    for (path, s) in paths.iter().zip(&mut samples) {
        s.persistent.sort();
        s.new.sort();
        let row = (
            median(s.throughput.clone()),
            percentile(&s.persistent, 0.5),
            percentile(&s.new, 0.5),
        );
        let (d_tput, d_p, d_n) = *direct.get_or_insert(row);
        println!(
            "| {} | {:.2} GB/s | {:.0}% | {:.2} | {:.1} µs | {:.1} µs | {:+.1} µs | {:.1} | {:.1} µs | {:.1} µs | {:+.1} µs | {:.1} |",
            path.name,
            row.0 / 1e9,
            100.0 * row.0 / d_tput,
            median(s.bulk_cpu.clone()),
            us(row.1),
            us(percentile(&s.persistent, 0.99)),
            us(row.1) - us(d_p),
            median(s.persistent_cpu.clone()),
            us(row.2),
            us(percentile(&s.new, 0.99)),
            us(row.2) - us(d_n),
            median(s.new_cpu.clone()),
        );
    }
}

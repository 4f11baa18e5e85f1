//! `skiff bench ingress`: the built-in ingress controller against nginx (Debian's
//! `nginx-light`) routing the same two hosts to the same two backends, side by side in one run,
//! in alternated rounds: requests/s and latency (p50, p99) over keep-alive HTTP/1.1 connections
//! at each concurrency level, and the latency each adds over going to the backend directly.
//!
//! The backends and the load generator are tokio tasks of this process (a fixed 2-byte answer
//! per request, so the proxies' own cost dominates); the ingress is a `skiff server` child whose
//! Services have hand-written Endpoints naming the backends. Both proxies keep pools of
//! keep-alive HTTP/1.1 connections to the backends and set the X-Forwarded-* headers, nginx as
//! ingress-nginx configures it (`keepalive 320`, `worker_processes auto`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::json;
use skiff_client::Api;
use skiff_client::api::PostParams;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::bench::SpawnedServer;

/// Flags of `skiff bench ingress`.
#[derive(Debug, clap::Args)]
pub struct IngressArgs {
    /// Concurrent keep-alive connections, one set of rounds per level.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    connections: Vec<usize>,
    /// How long each measurement runs (seconds).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Alternated rounds (direct, skiff, nginx, each round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The nginx binary.
    #[arg(long, default_value = "/usr/sbin/nginx")]
    nginx: PathBuf,
}

const HOSTS: [&str; 2] = ["a.bench.example", "b.bench.example"];

/// A backend answering every request with `ok`, keep-alive.
async fn backend() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                let mut line = String::new();
                loop {
                    line.clear();
                    match read.read_line(&mut line).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if line == "\r\n"
                        && write
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    Ok(address)
}

/// One response off a keep-alive connection; its status.
async fn response(read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Result<u16> {
    let mut line = String::new();
    if read.read_line(&mut line).await? == 0 {
        bail!("connection closed");
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("bad status line")?;
    let mut length = 0usize;
    loop {
        line.clear();
        read.read_line(&mut line).await?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse()?;
        }
    }
    let mut body = vec![0u8; length];
    read.read_exact(&mut body).await?;
    Ok(status)
}

/// What one measurement found.
struct Measured {
    rate: f64,
    p50: Duration,
    p99: Duration,
}

/// `connections` keep-alive connections to `target` for `seconds`, each asking for the hosts in
/// turn; every answer must be 200.
async fn measure(target: SocketAddr, connections: usize, seconds: u64) -> Result<Measured> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..connections {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(target).await?;
            stream.set_nodelay(true)?;
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut latencies = Vec::new();
            let mut i = c;
            while !stop.load(Ordering::Relaxed) {
                let host = HOSTS[i % HOSTS.len()];
                i += 1;
                let started = Instant::now();
                write
                    .write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                    .await?;
                let status = response(&mut read).await?;
                if status != 200 {
                    bail!("{target} answered {status} for {host}");
                }
                latencies.push(started.elapsed());
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Ok(Measured {
        rate: all.len() as f64 / elapsed,
        p50: at(0.5),
        p99: at(0.99),
    })
}

/// nginx in the foreground with a configuration routing the hosts as the Ingress does.
struct Nginx {
    child: Child,
    dir: tempfile_dir::Dir,
}

mod tempfile_dir {
    /// A directory removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Nginx {
    fn start(binary: &Path, listen: SocketAddr, backends: [SocketAddr; 2]) -> Result<Nginx> {
        let dir = std::env::temp_dir().join(format!("skiff-bench-nginx-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut servers = String::new();
        for (i, (host, backend)) in HOSTS.iter().zip(backends).enumerate() {
            servers.push_str(&format!(
                "upstream b{i} {{ server {backend}; keepalive 320; }}\n\
                 server {{ listen {listen}; server_name {host};\n\
                   location / {{ proxy_pass http://b{i}; proxy_http_version 1.1;\n\
                     proxy_set_header Connection \"\"; proxy_set_header Host $host;\n\
                     proxy_set_header X-Forwarded-For $remote_addr;\n\
                     proxy_set_header X-Forwarded-Proto $scheme;\n\
                     proxy_set_header X-Forwarded-Host $host; }} }}\n"
            ));
        }
        let config = format!(
            "worker_processes auto; daemon off; pid {pid}; error_log {dir}/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{ access_log off; keepalive_requests 1000000;\n\
               client_body_temp_path {dir}; proxy_temp_path {dir};\n\
               fastcgi_temp_path {dir}; uwsgi_temp_path {dir}; scgi_temp_path {dir};\n\
               server {{ listen {listen} default_server; return 404; }}\n{servers} }}\n",
            pid = dir.join("nginx.pid").display(),
            dir = dir.display(),
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config)?;
        let child = Command::new(binary)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Nginx {
            child,
            dir: tempfile_dir::Dir(dir),
        })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, so that the master stops its workers (a SIGKILLed master leaves them
        // running); SIGKILL only if it does not go within 5 s.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.dir;
    }
}

fn free_port() -> Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Waits until `target` answers 200 for every host.
async fn wait_routed(target: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ok = async {
            let stream = TcpStream::connect(target).await?;
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            for host in HOSTS {
                write
                    .write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                    .await?;
                if response(&mut read).await? != 200 {
                    bail!("not routed yet");
                }
            }
            Ok::<_, anyhow::Error>(())
        }
        .await;
        if ok.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{target} never routed the hosts: {ok:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the benchmark and prints a Markdown table.
pub async fn run(args: IngressArgs) -> Result<()> {
    if !args.nginx.exists() {
        bail!(
            "no nginx at {} (apt-get install nginx-light, or --nginx PATH)",
            args.nginx.display()
        );
    }
    let backends = [backend().await?, backend().await?];
    let (http, https, nginx_listen) = (free_port()?, free_port()?, free_port()?);
    let mut server = SpawnedServer::start_with(
        "server",
        &[
            "--ingress-http-address".into(),
            http.to_string(),
            "--ingress-https-address".into(),
            https.to_string(),
            "--no-nodeports".into(),
            // The API server, the proxy and its ingress: nothing else takes CPU.
            "--components".into(),
            "proxy,ingress".into(),
        ],
        None,
    )?;
    let client = server.wait_ready().await?;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), "default");
    let mut rules = Vec::new();
    for (i, backend) in backends.iter().enumerate() {
        let name = format!("bench-{i}");
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name},
                    "spec": {"ports": [{"name": "http", "port": 80}]}}))?,
            )
            .await?;
        endpoints
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name},
                    "subsets": [{"addresses": [{"ip": backend.ip().to_string()}],
                                 "ports": [{"name": "http", "port": backend.port()}]}]}))?,
            )
            .await?;
        rules.push(
            json!({"host": HOSTS[i], "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": name, "port": {"number": 80}}}}]}}),
        );
    }
    ingresses
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "bench"},
                "spec": {"rules": rules}}))?,
        )
        .await?;
    wait_routed(http).await?;
    let _nginx = Nginx::start(&args.nginx, nginx_listen, backends)?;
    wait_routed(nginx_listen).await?;

    println!(
        "| connections | target | requests/s | p50 | p99 | p50 added over direct |\n|---|---|---|---|---|---|"
    );
    for &connections in &args.connections {
        let mut best: Vec<(&str, Vec<Measured>)> =
            vec![("direct", vec![]), ("skiff", vec![]), ("nginx", vec![])];
        for _ in 0..args.rounds {
            for (name, runs) in best.iter_mut() {
                let target = match *name {
                    "direct" => backends[0],
                    "skiff" => http,
                    _ => nginx_listen,
                };
                runs.push(measure(target, connections, args.seconds).await?);
            }
        }
        // The median round of each.
        let median = |runs: &mut Vec<Measured>| {
            runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
            runs.swap_remove(runs.len() / 2)
        };
        let mut results: Vec<(&str, Measured)> = best
            .iter_mut()
            .map(|(name, runs)| (*name, median(runs)))
            .collect();
        let direct_p50 = results[0].1.p50;
        for (name, m) in &results {
            println!(
                "| {connections} | {name} | {:.0} | {:.0} µs | {:.0} µs | {} |",
                m.rate,
                m.p50.as_secs_f64() * 1e6,
                m.p99.as_secs_f64() * 1e6,
                if *name == "direct" {
                    "-".to_string()
                } else {
                    format!(
                        "{:.0} µs",
                        (m.p50.as_secs_f64() - direct_p50.as_secs_f64()) * 1e6
                    )
                }
            );
        }
        let nginx = results.pop().expect("three results").1;
        let skiff = results.pop().expect("three results").1;
        println!(
            "| {connections} | skiff / nginx | {:.2}× | {:.2}× | {:.2}× | |",
            skiff.rate / nginx.rate,
            skiff.p50.as_secs_f64() / nginx.p50.as_secs_f64(),
            skiff.p99.as_secs_f64() / nginx.p99.as_secs_f64(),
        );
    }
    drop(server);
    Ok(())
}

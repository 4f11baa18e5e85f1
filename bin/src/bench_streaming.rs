//! `skiff bench streaming`: what a stream through the API server and the kubelet costs against
//! going to the pod directly, side by side in one run.
//!
//! - **Port-forward**: `kubectl port-forward` to a pod against a direct connection to the pod's
//!   address, in alternated rounds: download and upload throughput over one connection, the
//!   round trip of a 64-byte message on an open connection, and a new connection's first round
//!   trip (each connection is a new stream pair through kubectl, the API server and the
//!   kubelet); and the CPU the skiff process and kubectl spend per GiB forwarded.
//! - **Copy**: `kubectl cp` of a 100 MiB file into the pod and back, checked byte for byte, beside
//!   `tar c | tar x` of the same file on the host.
//! - **Exec**: `kubectl exec POD -- true`, interleaved with `kubectl get pod POD` (kubectl's own
//!   start and one API request: the floor of any kubectl command), an exec over WebSocket from
//!   this process (API server, kubelet and the process start, without kubectl), and spawning
//!   `true` directly (the floor of starting a process).
//!
//! The server is this binary as `skiff server` on a temporary data dir, with its process
//! runtime; the pod is this binary again (`skiff bench streaming --serve PORT`), a TCP server
//! speaking the small protocol of [`answer`], so both paths reach the same backend and only the
//! path differs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use skiff_client::Api;
use skiff_client::api::PostParams;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::bench::{SpawnedServer, micros};
use crate::bench_deployment::{cpu_seconds, load_average, percentile};

/// Flags of `skiff bench streaming`.
#[derive(Debug, clap::Args)]
pub struct StreamingArgs {
    /// MiB each throughput measurement moves over one connection.
    #[arg(long, default_value_t = 256)]
    bulk_mib: u64,
    /// Round trips of a 64-byte message on one open connection, per round and path.
    #[arg(long, default_value_t = 2000)]
    round_trips: usize,
    /// New connections, each with one round trip, per round and path.
    #[arg(long, default_value_t = 200)]
    connections: usize,
    /// Alternated rounds (direct, then port-forward, in each).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Runs of each exec-like command (kubectl exec, kubectl get, WebSocket exec, a direct
    /// spawn), interleaved.
    #[arg(long, default_value_t = 30)]
    execs: usize,
    /// MiB of the file `kubectl cp` copies into the pod and back (0: no copy).
    #[arg(long, default_value_t = 100)]
    cp_mib: u64,
    /// The kubectl binary.
    #[arg(long, default_value = "kubectl")]
    kubectl: PathBuf,
    /// Directory for the temporary data dir (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Serve as the benchmark's pod on this port, and do nothing else.
    #[arg(long, hide = true)]
    serve: Option<u16>,
}

/// The echoed message's size.
const MESSAGE: usize = 64;
/// Bytes per read or write of the bulk transfers.
const CHUNK: usize = 64 * 1024;
/// The byte every downloaded and uploaded byte is.
const FILL: u8 = 0x5a;
/// The pod, and its one container.
const POD: &str = "stream-backend";
const CONTAINER: &str = "backend";

/// The pod's server: every connection on `port` is answered by [`answer`].
async fn serve(port: u16) -> Result<()> {
    let listener = TcpListener::bind(("0.0.0.0", port)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            let _ = answer(stream).await;
        });
    }
}

/// A connection's first byte says what it wants: `E` echoes 64-byte messages until the client
/// closes; `D` and a big-endian u64 `n` sends `n` bytes; `U` and `n` reads `n` bytes, then
/// answers `ok`.
async fn answer(mut stream: TcpStream) -> std::io::Result<()> {
    use std::io::ErrorKind;
    stream.set_nodelay(true)?;
    match stream.read_u8().await? {
        b'E' => {
            let mut message = [0u8; MESSAGE];
            loop {
                match stream.read_exact(&mut message).await {
                    Ok(_) => stream.write_all(&message).await?,
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        }
        b'D' => {
            let mut left = stream.read_u64().await?;
            let chunk = vec![FILL; CHUNK];
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                stream.write_all(&chunk[..n]).await?;
                left -= n as u64;
            }
            stream.shutdown().await
        }
        b'U' => {
            let mut left = stream.read_u64().await?;
            let mut buffer = vec![0u8; CHUNK];
            while left > 0 {
                let want = left.min(CHUNK as u64) as usize;
                let n = stream.read(&mut buffer[..want]).await?;
                if n == 0 {
                    return Err(ErrorKind::UnexpectedEof.into());
                }
                left -= n as u64;
            }
            stream.write_all(b"ok").await?;
            stream.shutdown().await
        }
        _ => Err(ErrorKind::InvalidData.into()),
    }
}

async fn dial(to: SocketAddr) -> Result<TcpStream> {
    let stream = TcpStream::connect(to)
        .await
        .with_context(|| format!("connecting to {to}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Time to receive `bytes` over a new connection, from the connect to the last byte.
async fn download(to: SocketAddr, bytes: u64) -> Result<Duration> {
    let start = Instant::now();
    let mut stream = dial(to).await?;
    let mut head = vec![b'D'];
    head.extend(bytes.to_be_bytes());
    stream.write_all(&head).await?;
    let mut buffer = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < bytes {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            bail!("the connection closed after {got} of {bytes} bytes");
        }
        if buffer[..n].iter().any(|&b| b != FILL) {
            bail!("a downloaded byte is not the one sent");
        }
        got += n as u64;
    }
    Ok(start.elapsed())
}

/// Time to send `bytes` over a new connection, from the connect to the server's `ok`.
async fn upload(to: SocketAddr, bytes: u64) -> Result<Duration> {
    let start = Instant::now();
    let mut stream = dial(to).await?;
    let mut head = vec![b'U'];
    head.extend(bytes.to_be_bytes());
    stream.write_all(&head).await?;
    let chunk = vec![FILL; CHUNK];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        stream.write_all(&chunk[..n]).await?;
        left -= n as u64;
    }
    let mut ok = [0u8; 2];
    stream
        .read_exact(&mut ok)
        .await
        .context("no answer to the upload")?;
    if &ok != b"ok" {
        bail!("the upload's answer is {ok:?}");
    }
    Ok(start.elapsed())
}

/// One 64-byte message, numbered `i`, sent and read back.
async fn echo(stream: &mut TcpStream, i: usize) -> Result<()> {
    let mut message = [0u8; MESSAGE];
    message[..8].copy_from_slice(&(i as u64).to_be_bytes());
    stream.write_all(&message).await?;
    let mut back = [0u8; MESSAGE];
    stream.read_exact(&mut back).await?;
    if back != message {
        bail!("echo {i} came back changed");
    }
    Ok(())
}

/// The time of each of `count` round trips on one open connection.
async fn round_trips(to: SocketAddr, count: usize) -> Result<Vec<Duration>> {
    let mut stream = dial(to).await?;
    stream.write_all(b"E").await?;
    // The first message also waits for the path to open (a stream pair through port-forward):
    // that is what `connections` measures.
    echo(&mut stream, 0).await?;
    let mut times = Vec::with_capacity(count);
    for i in 1..=count {
        let start = Instant::now();
        echo(&mut stream, i).await?;
        times.push(start.elapsed());
    }
    Ok(times)
}

/// The time of each of `count` new connections' first round trip, from the connect.
async fn connections(to: SocketAddr, count: usize) -> Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(count);
    for i in 0..count {
        let start = Instant::now();
        let mut stream = dial(to).await?;
        stream.write_all(b"E").await?;
        echo(&mut stream, i).await?;
        times.push(start.elapsed());
    }
    Ok(times)
}

/// One path's figures over all rounds.
#[derive(Default)]
struct PathFigures {
    download: Vec<f64>,
    upload: Vec<f64>,
    round_trips: Vec<Duration>,
    connections: Vec<Duration>,
}

impl PathFigures {
    async fn round(&mut self, to: SocketAddr, args: &StreamingArgs) -> Result<()> {
        let bytes = args.bulk_mib << 20;
        let mib = args.bulk_mib as f64;
        self.download
            .push(mib / download(to, bytes).await?.as_secs_f64());
        self.upload
            .push(mib / upload(to, bytes).await?.as_secs_f64());
        self.round_trips
            .extend(round_trips(to, args.round_trips).await?);
        self.connections
            .extend(connections(to, args.connections).await?);
        Ok(())
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

fn millis(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// p50 and p99 of `times` (sorted here).
fn p50_p99(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort();
    (percentile(times, 50.0), percentile(times, 99.0))
}

/// What the exec WebSocket client needs from the admin kubeconfig.
struct Endpoint {
    host: String,
    port: u16,
    token: String,
    tls: Arc<rustls::ClientConfig>,
}

impl Endpoint {
    fn from_kubeconfig(path: &Path) -> Result<Endpoint> {
        let text = std::fs::read_to_string(path)?;
        let config: serde_json::Value = serde_saphyr::from_str(&text)?;
        let cluster = &config["clusters"][0]["cluster"];
        let server: http::Uri = cluster["server"]
            .as_str()
            .context("the kubeconfig names no server")?
            .parse()?;
        let ca = base64::engine::general_purpose::STANDARD.decode(
            cluster["certificate-authority-data"]
                .as_str()
                .context("the kubeconfig has no CA")?,
        )?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut ca.as_slice()) {
            roots.add(cert?)?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Endpoint {
            host: server.host().context("no host")?.to_string(),
            port: server.port_u16().unwrap_or(443),
            token: config["users"][0]["user"]["token"]
                .as_str()
                .context("the kubeconfig has no token")?
                .to_string(),
            tls: Arc::new(tls),
        })
    }

    /// `true` run in the pod over a new WebSocket (`v5.channel.k8s.io`), to its `Success`
    /// status on the error channel and the close; the time from the connect.
    async fn exec_true(&self) -> Result<Duration> {
        let start = Instant::now();
        let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(self.host.clone())?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await?;
        let mut request = format!(
            "wss://{}:{}/api/v1/namespaces/default/pods/{POD}/exec?command=true&container={CONTAINER}&stdout=true&stderr=true",
            self.host, self.port
        )
        .into_client_request()?;
        let headers = request.headers_mut();
        headers.insert("Authorization", format!("Bearer {}", self.token).parse()?);
        headers.insert(
            "Sec-WebSocket-Protocol",
            http::HeaderValue::from_static("v5.channel.k8s.io"),
        );
        let (mut socket, _) = tokio_tungstenite::client_async(request, tls).await?;
        let mut status = None;
        while let Some(message) = socket.next().await {
            match message {
                Ok(Message::Binary(data)) if data.first() == Some(&3) => {
                    status = Some(serde_json::from_slice::<serde_json::Value>(&data[1..])?);
                }
                Ok(Message::Close(_)) => break,
                Ok(_) => {}
                // A server may end the connection without a closing handshake once the status
                // is out.
                Err(_) if status.is_some() => break,
                Err(e) => return Err(e.into()),
            }
        }
        let status = status.context("the exec sent no status")?;
        if status["status"] != "Success" {
            bail!("the exec failed: {status}");
        }
        Ok(start.elapsed())
    }
}

/// `kubectl args...`, its output thrown away; the wall time. Fails when kubectl does.
async fn kubectl_time(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Result<Duration> {
    let start = Instant::now();
    let status = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .with_context(|| format!("running {}", kubectl.display()))?;
    if !status.success() {
        bail!("kubectl {} failed: {status}", args.join(" "));
    }
    Ok(start.elapsed())
}

/// `kubectl cp` of a `mib` MiB file into the pod and back, each copy checked byte for byte,
/// beside `tar c | tar x` of the same file on this host (what `kubectl cp` runs at both ends,
/// without the streams): the three times.
async fn copy(kubectl: &Path, kubeconfig: &Path, dir: &Path, mib: u64) -> Result<[Duration; 3]> {
    std::fs::create_dir_all(dir.join("local"))?;
    std::fs::create_dir_all(dir.join("pod"))?;
    // Bytes that are not all text: a multiplicative hash of each index.
    let data: Vec<u8> = (0..(mib << 20) as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let local = dir.join("local/data.bin");
    std::fs::write(&local, &data)?;
    // The process runtime's containers see this host's file system.
    let in_pod = dir.join("pod/data.bin");
    let into = kubectl_time(
        kubectl,
        kubeconfig,
        &[
            "cp",
            &local.to_string_lossy(),
            &format!("{POD}:{}", in_pod.display()),
        ],
    )
    .await?;
    if std::fs::read(&in_pod)? != data {
        bail!("copied into the pod, the bytes differ");
    }
    let back = dir.join("back.bin");
    let out_of = kubectl_time(
        kubectl,
        kubeconfig,
        &[
            "cp",
            &format!("{POD}:{}", in_pod.display()),
            &back.to_string_lossy(),
        ],
    )
    .await?;
    if std::fs::read(&back)? != data {
        bail!("copied out of the pod, the bytes differ");
    }
    let untarred = dir.join("untarred");
    std::fs::create_dir_all(&untarred)?;
    let start = Instant::now();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("tar cf - -C \"$1\" data.bin | tar xf - -C \"$2\"")
        .args([
            "tar",
            &dir.join("local").to_string_lossy(),
            &untarred.to_string_lossy(),
        ])
        .status()
        .await?;
    let tarred = start.elapsed();
    if !status.success() || std::fs::read(untarred.join("data.bin"))? != data {
        bail!("the local tar copy failed: {status}");
    }
    for file in [&local, &in_pod, &back, &untarred.join("data.bin")] {
        std::fs::remove_file(file)?;
    }
    Ok([into, out_of, tarred])
}

/// `kubectl port-forward` to the pod, stopped on drop.
struct Forward {
    child: Child,
}

impl Forward {
    /// Starts it from `local` to the pod's `port`; returns once it says it forwards.
    fn start(
        kubectl: &Path,
        kubeconfig: &Path,
        local: u16,
        port: u16,
        log: &Path,
    ) -> Result<Forward> {
        let out = std::fs::File::create(log)?;
        let child = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "port-forward",
                &format!("pod/{POD}"),
                &format!("{local}:{port}"),
            ])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting kubectl port-forward")?;
        let mut forward = Forward { child };
        let deadline = Instant::now() + Duration::from_secs(30);
        let want = format!("Forwarding from 127.0.0.1:{local}");
        while !std::fs::read_to_string(log).is_ok_and(|l| l.contains(&want)) {
            if forward.child.try_wait()?.is_some() || Instant::now() > deadline {
                bail!(
                    "kubectl port-forward did not start: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(forward)
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The benchmark's pod: this binary serving on `port`, Ready once the port answers.
fn backend_pod(port: u16) -> Result<Pod> {
    let exe = std::env::current_exe()?;
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": CONTAINER,
                "image": "skiff",
                "command": [exe, "bench", "streaming", "--serve", port.to_string()],
                "ports": [{"containerPort": port}],
                "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
            }],
        },
    }))?)
}

/// Waits until the pod is Ready; its IP.
async fn wait_ready(pods: &Api<Pod>) -> Result<std::net::IpAddr> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pod = pods.get(POD).await?;
        let status = pod.status.unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready && let Some(ip) = status.pod_ip {
            return Ok(ip.parse()?);
        }
        if Instant::now() > deadline {
            bail!("the backend pod is not Ready within 60 s: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs the benchmark and prints its report.
pub async fn run(args: StreamingArgs) -> Result<()> {
    if let Some(port) = args.serve {
        return serve(port).await;
    }
    let version = Command::new(&args.kubectl)
        .args(["version", "--client"])
        .output()
        .with_context(|| format!("running {}", args.kubectl.display()))?;
    let version = String::from_utf8_lossy(&version.stdout);
    println!(
        "skiff bench streaming: {} MiB transfers, {} round trips and {} connections per round and \
         path, {} rounds; {} execs each; kubectl {}; load average {}",
        args.bulk_mib,
        args.round_trips,
        args.connections,
        args.rounds,
        args.execs,
        version.lines().next().unwrap_or("?").trim(),
        load_average()
    );

    let mut server = SpawnedServer::start("server", args.dir.as_deref())?;
    let client = server.wait_ready().await?;
    let kubeconfig = server.kubeconfig();
    let server_pid = server.child.id();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let port = free_port()?;
    pods.create(&PostParams::default(), &backend_pod(port)?)
        .await?;
    let pod_ip = wait_ready(&pods).await?;
    let direct = SocketAddr::new(pod_ip, port);

    // Port-forward.
    let local = free_port()?;
    let log = server.data_dir().join("port-forward.log");
    let forward = Forward::start(&args.kubectl, &kubeconfig, local, port, &log)?;
    let forwarded = SocketAddr::from(([127, 0, 0, 1], local));
    let kubectl_pid = forward.child.id();
    let mut paths = [PathFigures::default(), PathFigures::default()];
    let (mut server_cpu, mut kubectl_cpu, mut moved) = (0.0, 0.0, 0u64);
    for round in 0..args.rounds {
        paths[0].round(direct, &args).await?;
        let (server_before, kubectl_before) = (cpu_seconds(server_pid), cpu_seconds(kubectl_pid));
        paths[1].round(forwarded, &args).await?;
        server_cpu += cpu_seconds(server_pid) - server_before;
        kubectl_cpu += cpu_seconds(kubectl_pid) - kubectl_before;
        moved += 2 * (args.bulk_mib << 20);
        eprintln!(
            "round {}: download direct {:.0} MiB/s, forwarded {:.0} MiB/s",
            round + 1,
            paths[0].download[round],
            paths[1].download[round]
        );
    }
    drop(forward);
    let [mut direct_figures, mut forwarded_figures] = paths;
    let gib = moved as f64 / f64::from(1u32 << 30);
    println!("\nport-forward (kubectl port-forward pod/{POD}) against the pod's address {direct}:");
    println!("| what | direct | port-forward | ratio |");
    println!("|---|---|---|---|");
    for (what, d, f) in [
        (
            "download, one connection (median of rounds)",
            &direct_figures.download,
            &forwarded_figures.download,
        ),
        (
            "upload, one connection (median of rounds)",
            &direct_figures.upload,
            &forwarded_figures.upload,
        ),
    ] {
        let (d, f) = (median(d), median(f));
        println!("| {what} | {d:.0} MiB/s | {f:.0} MiB/s | {:.2}x |", d / f);
    }
    for (what, d, f) in [
        (
            "64-byte round trip on an open connection, p50 / p99",
            &mut direct_figures.round_trips,
            &mut forwarded_figures.round_trips,
        ),
        (
            "new connection to its first answer, p50 / p99",
            &mut direct_figures.connections,
            &mut forwarded_figures.connections,
        ),
    ] {
        let (d50, d99) = p50_p99(d);
        let (f50, f99) = p50_p99(f);
        println!(
            "| {what} | {} / {} | {} / {} | {:.1}x / {:.1}x |",
            micros(d50),
            micros(d99),
            micros(f50),
            micros(f99),
            f50.as_secs_f64() / d50.as_secs_f64(),
            f99.as_secs_f64() / d99.as_secs_f64()
        );
    }
    println!(
        "CPU per GiB forwarded (downloads and uploads, {gib:.1} GiB): skiff server {:.2} s, \
         kubectl {:.2} s",
        server_cpu / gib,
        kubectl_cpu / gib
    );

    // Exec.
    let endpoint = Endpoint::from_kubeconfig(&kubeconfig)?;
    let (mut exec, mut get, mut websocket, mut spawn) = (vec![], vec![], vec![], vec![]);
    for _ in 0..args.execs {
        exec.push(kubectl_time(&args.kubectl, &kubeconfig, &["exec", POD, "--", "true"]).await?);
        get.push(
            kubectl_time(
                &args.kubectl,
                &kubeconfig,
                &["get", "pod", POD, "-o", "name"],
            )
            .await?,
        );
        websocket.push(endpoint.exec_true().await?);
        let start = Instant::now();
        let status = tokio::process::Command::new("true").status().await?;
        if !status.success() {
            bail!("true failed: {status}");
        }
        spawn.push(start.elapsed());
    }
    println!("\nexec round trip ({} runs each, interleaved):", args.execs);
    println!("| what | p50 | p90 | max |");
    println!("|---|---|---|---|");
    for (what, times) in [
        (format!("kubectl exec {POD} -- true"), &mut exec),
        (format!("kubectl get pod {POD} -o name"), &mut get),
        (
            "exec of true over a WebSocket from this process".into(),
            &mut websocket,
        ),
        ("spawning true directly".into(), &mut spawn),
    ] {
        times.sort();
        println!(
            "| {what} | {} | {} | {} |",
            millis(percentile(times, 50.0)),
            millis(percentile(times, 90.0)),
            millis(times.last().copied().unwrap_or_default())
        );
    }
    if args.cp_mib > 0 {
        let [into, out_of, tarred] = copy(
            &args.kubectl,
            &kubeconfig,
            &server.data_dir().join("cp"),
            args.cp_mib,
        )
        .await?;
        let rate = |d: Duration| args.cp_mib as f64 / d.as_secs_f64();
        println!(
            "\nkubectl cp of {} MiB, each copy checked byte for byte:",
            args.cp_mib
        );
        println!("| what | time | MiB/s |");
        println!("|---|---|---|");
        for (what, took) in [
            ("kubectl cp into the pod", into),
            ("kubectl cp out of the pod", out_of),
            ("tar c piped into tar x on this host", tarred),
        ] {
            println!("| {what} | {} | {:.0} |", millis(took), rate(took));
        }
    }
    let _ = pods
        .delete(POD, &skiff_client::api::DeleteParams::default())
        .await;
    Ok(())
}

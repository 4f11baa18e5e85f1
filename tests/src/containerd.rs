//! A containerd of the test's own (the "lab"): config, state, root, socket, CNI config and bridge
//! in a temp dir, a busybox image built offline with umoci and served by a registry on loopback,
//! and a teardown that leaves nothing behind (containerd, shims, container processes, bridge,
//! network namespaces, cgroups). Used by the kubelet's CRI tests and the end-to-end tests of
//! `skiff server --container-runtime-endpoint`.
//!
//! Why it looks the way it does (Debian 12 machines of this project):
//! - no systemd and no services started by apt: the test starts containerd and the registry;
//! - root lacks `CAP_SYS_RESOURCE`: the CRI plugin must not lower `oom_score_adj`
//!   (`restrict_oom_score_adj`), or sandboxes fail to start;
//! - cgroups are hybrid (v1 controllers): runc with `SystemdCgroup = false`;
//! - the pods' addresses exist only on a bridge of this test and in its network namespaces; no
//!   masquerade, no route out. Nothing leaves the machine;
//! - hostPorts go through the CNI `portmap` plugin (iptables DNAT, and for connections from
//!   127.0.0.1 a masquerade onto the bridge): the tests reach them on loopback only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Programs the lab needs, all from Debian packages (`.ci/run` installs them).
const PROGRAMS: &[&str] = &[
    "containerd",
    "runc",
    "umoci",
    "skopeo",
    "docker-registry",
    "busybox",
    "ip",
    "ctr",
    "python3",
    "iptables",
];

/// A running lab.
pub struct Lab {
    /// The lab's directory (containerd's root and state, the registry's data, logs).
    pub dir: tempfile::TempDir,
    /// containerd's socket.
    pub socket: PathBuf,
    /// `127.0.0.1:<port>` of the registry.
    pub registry: String,
    /// The busybox image in the registry (entrypoint none, cmd `/bin/sh`).
    pub image: String,
    /// The bridge's name and the pods' subnet prefix (`10.89.N.`).
    pub bridge: String,
    /// The pods' subnet prefix (`10.89.N.`; the subnet is `<prefix>0/24`).
    pub subnet_prefix: String,
    /// The cgroup parent of the pods (cgroupfs syntax), for the kubelet's CRI config.
    pub cgroup_parent: String,
    /// `127.0.0.1:<port>` of a second registry that wants a user and password (htpasswd):
    /// [`PRIVATE_CREDENTIALS`].
    pub private_registry: String,
    /// The busybox image in the private registry.
    pub private_image: String,
    containerd: Option<Child>,
    registry_proc: Option<Child>,
    private_proc: Option<Child>,
    ip_forward: Option<String>,
}

/// User and password of the lab's private registry.
pub const PRIVATE_CREDENTIALS: (&str, &str) = ("skiff", "lab-pass-7");

/// Starts docker-registry on a free loopback port with its data under `<root>/<name>`, wanting
/// `credentials` (an htpasswd file with a bcrypt hash, made with Python's `crypt`) when given.
fn start_registry(root: &Path, name: &str, credentials: Option<(&str, &str)>) -> (String, Child) {
    let address = format!("127.0.0.1:{}", crate::free_port());
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let mut config = format!(
        "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: {address}}}\n",
        dir.join("data").display(),
    );
    if let Some((user, password)) = credentials {
        let hash = Command::new("python3")
            .args([
                "-W",
                "ignore",
                "-c",
                "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 5)))",
                password,
            ])
            .output()
            .expect("python3 for the htpasswd hash");
        assert!(hash.status.success(), "{hash:?}");
        let hash = String::from_utf8(hash.stdout).unwrap();
        assert!(hash.starts_with("$2"), "bcrypt from crypt: {hash}");
        std::fs::write(dir.join("htpasswd"), format!("{user}:{}\n", hash.trim())).unwrap();
        config.push_str(&format!(
            "auth: {{htpasswd: {{realm: skiff-lab, path: {}}}}}\n",
            dir.join("htpasswd").display()
        ));
    }
    std::fs::write(dir.join("config.yml"), config).unwrap();
    let log = format!("{name}.log");
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(dir.join("config.yml"))
        .stdout(log_file(root, &log))
        .stderr(log_file(root, &log))
        .spawn()
        .unwrap();
    let addr: SocketAddr = address.parse().unwrap();
    wait_for(name, Duration::from_secs(20), || {
        TcpStream::connect(addr).is_ok()
    });
    (address, child)
}

/// Whether the containerd test can run: every program is installed. Without them the test
/// fails, unless `SKIFF_SKIP_CONTAINERD=1`, when it says so and passes.
pub fn available() -> bool {
    let missing: Vec<&str> = PROGRAMS
        .iter()
        .copied()
        .filter(|p| which(p).is_none())
        .chain((!Path::new("/usr/lib/cni/bridge").exists()).then_some("/usr/lib/cni/bridge"))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("SKIFF_SKIP_CONTAINERD").as_deref() == Ok("1") {
        eprintln!(
            "SKIPPED: containerd test: missing {missing:?} and SKIFF_SKIP_CONTAINERD=1 \
             (install containerd runc containernetworking-plugins skopeo umoci docker-registry \
             busybox-static iproute2)"
        );
        return false;
    }
    panic!(
        "the containerd test needs {missing:?}: apt-get install containerd runc \
         containernetworking-plugins skopeo umoci docker-registry busybox-static iproute2 \
         (or set SKIFF_SKIP_CONTAINERD=1 to skip it)"
    );
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "{what} not ready after {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Lab {
    /// Builds the image, starts the registry and containerd. Blocking (a few seconds).
    pub fn start() -> Lab {
        // Short names: a unix socket path has at most 107 bytes and an interface name 15.
        let dir = tempfile::Builder::new()
            .prefix("skcri")
            .tempdir_in("/tmp")
            .unwrap();
        // Unique per process and per lab within it (tests of one binary run side by side).
        static LABS: AtomicU32 = AtomicU32::new(0);
        let seq = LABS.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let n = (pid.wrapping_mul(7) + seq) % 200 + 20;
        let mut lab = Lab {
            socket: dir.path().join("containerd.sock"),
            registry: String::new(),
            image: String::new(),
            private_registry: String::new(),
            private_image: String::new(),
            bridge: format!("skcri{}{seq}", pid % 100_000),
            subnet_prefix: format!("10.89.{n}."),
            cgroup_parent: format!("/skiff-cri-test-{pid}-{seq}"),
            dir,
            containerd: None,
            registry_proc: None,
            private_proc: None,
            ip_forward: std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").ok(),
        };
        let root = lab.dir.path().to_path_buf();
        build_image(&root.join("oci"));

        let (registry, child) = start_registry(&root, "registry", None);
        lab.registry = registry;
        lab.registry_proc = Some(child);
        let (private, child) = start_registry(&root, "private", Some(PRIVATE_CREDENTIALS));
        lab.private_registry = private;
        lab.private_proc = Some(child);
        run(Command::new("skopeo").args([
            "copy",
            "-q",
            "--dest-tls-verify=false",
            "--dest-creds",
            &format!("{}:{}", PRIVATE_CREDENTIALS.0, PRIVATE_CREDENTIALS.1),
            &format!("oci:{}:busybox", root.join("oci").display()),
            &format!("docker://{}/private/busybox:test", lab.private_registry),
        ]));
        lab.private_image = format!("{}/private/busybox:test", lab.private_registry);
        for tag in ["busybox", "pause"] {
            run(Command::new("skopeo").args([
                "copy",
                "-q",
                "--dest-tls-verify=false",
                &format!("oci:{}:{tag}", root.join("oci").display()),
                &format!("docker://{}/{tag}:test", lab.registry),
            ]));
        }
        lab.image = format!("{}/busybox:test", lab.registry);

        write_containerd_config(&lab);
        lab.start_containerd();
        lab
    }

    /// Starts containerd on the lab's config and waits for its socket.
    pub fn start_containerd(&mut self) {
        let root = self.dir.path().to_path_buf();
        self.containerd = Some(
            Command::new("containerd")
                .arg("--config")
                .arg(root.join("config.toml"))
                .stdout(log_file(&root, "containerd.log"))
                .stderr(log_file(&root, "containerd.log"))
                .spawn()
                .unwrap(),
        );
        let socket = self.socket.clone();
        wait_for("containerd socket", Duration::from_secs(30), || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
    }

    /// Kills containerd outright (SIGKILL), as a crash would: its shims and their containers
    /// run on, and its socket refuses connections until [`Lab::start_containerd`].
    pub fn kill_containerd(&mut self) {
        if let Some(mut child) = self.containerd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// containerd's log so far (printed when a test fails).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// What the registries logged.
    pub fn registry_logs(&self) -> String {
        ["registry.log", "private.log"]
            .iter()
            .map(|f| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `unix://<socket>`: the value of `--container-runtime-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Writes the lab's busybox image as an archive named `name` (`localhost/imported:v1`) that
    /// is in no registry: `format` is `oci-archive` or `docker-archive` (skopeo's transports).
    pub fn image_archive(&self, format: &str, name: &str) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("{}.tar", name.replace(['/', ':'], "_")));
        run(Command::new("skopeo").args([
            "copy",
            "-q",
            &format!("oci:{}:busybox", self.dir.path().join("oci").display()),
            &format!("{format}:{}:{name}", path.display()),
        ]));
        path
    }
}

fn log_file(root: &Path, name: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join(name))
        .unwrap()
}

/// A busybox image (every applet a link to the static binary, a page for httpd under /www) and a
/// `pause` image of it whose entrypoint sleeps forever, in an OCI layout at `oci`.
fn build_image(oci: &Path) {
    let layout = oci.display().to_string();
    let bundle = oci.with_file_name("bundle");
    run(Command::new("umoci").args(["init", "--layout", &layout]));
    run(Command::new("umoci").args(["new", "--image", &format!("{layout}:busybox")]));
    run(Command::new("umoci")
        .args(["unpack", "--image", &format!("{layout}:busybox")])
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");
    for d in [
        "bin", "etc", "www", "tmp", "proc", "sys", "dev", "root", "data",
    ] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    std::fs::copy(which("busybox").unwrap(), rootfs.join("bin/busybox")).unwrap();
    let list = Command::new(rootfs.join("bin/busybox"))
        .arg("--list")
        .output()
        .unwrap();
    for applet in String::from_utf8(list.stdout).unwrap().split_whitespace() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(rootfs.join("www/index.html"), "hello from a skiff pod\n").unwrap();
    run(Command::new("umoci")
        .args(["repack", "--image", &format!("{layout}:busybox")])
        .arg(&bundle));
    run(Command::new("umoci").args([
        "config",
        "--image",
        &format!("{layout}:busybox"),
        "--config.cmd",
        "/bin/sh",
        "--config.env",
        "PATH=/bin",
        "--architecture",
        "amd64",
        "--os",
        "linux",
    ]));
    run(Command::new("umoci").args(["tag", "--image", &format!("{layout}:busybox"), "pause"]));
    run(Command::new("umoci").args([
        "config",
        "--image",
        &format!("{layout}:pause"),
        "--clear=config.cmd",
        "--config.entrypoint",
        "/bin/sleep",
        "--config.entrypoint",
        "infinity",
    ]));
    std::fs::remove_dir_all(&bundle).unwrap();
}

fn write_containerd_config(lab: &Lab) {
    let r = lab.dir.path();
    let d = |p: &str| r.join(p).display().to_string();
    for registry in [&lab.registry, &lab.private_registry] {
        let certs = r.join("certs.d").join(registry);
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::write(
            certs.join("hosts.toml"),
            format!(
                "server = \"http://{0}\"\n[host.\"http://{0}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
                registry
            ),
        )
        .unwrap();
    }
    std::fs::create_dir_all(r.join("cni/net.d")).unwrap();
    std::fs::write(
        r.join("cni/net.d/10-skiff-test.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"skiff-cri-test","plugins":[{{"type":"bridge","bridge":"{}","isGateway":true,"ipMasq":false,"hairpinMode":true,"ipam":{{"type":"host-local","ranges":[[{{"subnet":"{}0/24"}}]],"dataDir":"{}"}}}},{{"type":"portmap","capabilities":{{"portMappings":true}}}}]}}"#,
            lab.bridge,
            lab.subnet_prefix,
            d("cni/ipam")
        ),
    )
    .unwrap();
    let config = format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{root}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{registry}/pause:test"
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    disable_apparmor = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{runc_root}"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{cni}"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "{certs}"
"#,
        root = d("root"),
        state = d("state"),
        sock = lab.socket.display(),
        registry = lab.registry,
        runc = which("runc").unwrap().display(),
        runc_root = d("runc"),
        cni = d("cni/net.d"),
        certs = d("certs.d"),
    );
    std::fs::write(r.join("config.toml"), config).unwrap();
}

/// Pids of processes in cgroups under `parent` (any v1 hierarchy): the pods' processes.
fn processes_under_cgroup(parent: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if cgroups
            .lines()
            .any(|l| l.split(':').nth(2).is_some_and(|p| p.starts_with(parent)))
        {
            pids.push(pid);
        }
    }
    pids
}

/// Pids whose command line mentions `needle` (containerd's shims name its socket).
fn processes_with_arg(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == needle.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

fn kill(pid: i32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

impl Lab {
    /// The ids of the containers (not sandboxes) containerd holds for pod `name`, running or
    /// exited, as `ctr` lists them by the labels the CRI plugin keeps.
    pub fn containers_of_pod(&self, name: &str) -> Vec<String> {
        self.listed(name, "container")
    }

    /// The ids of the sandboxes containerd holds for pod `name`.
    pub fn sandboxes_of_pod(&self, name: &str) -> Vec<String> {
        self.listed(name, "sandbox")
    }

    /// `ctr containers ls` of pod `name`'s entries of CRI kind `kind` (`container`, `sandbox`).
    fn listed(&self, name: &str, kind: &str) -> Vec<String> {
        let filter = format!(
            "labels.\"io.kubernetes.pod.name\"=={name},labels.\"io.cri-containerd.kind\"=={kind}"
        );
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args([
                "--namespace",
                "k8s.io",
                "containers",
                "ls",
                "--quiet",
                &filter,
            ])
            .output()
            .expect("running ctr");
        assert!(
            out.status.success(),
            "ctr containers ls: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// What of the lab is still there (for the test's own check of its teardown).
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        for pid in processes_under_cgroup(&self.cgroup_parent) {
            left.push(format!("pod process {pid}"));
        }
        for pid in processes_with_arg(&self.socket.display().to_string()) {
            left.push(format!("shim {pid}"));
        }
        if Path::new("/sys/class/net").join(&self.bridge).exists() {
            left.push(format!("bridge {}", self.bridge));
        }
        left
    }

    /// Stops everything the lab started; idempotent, and also run on drop (a failed test).
    pub fn teardown(&mut self) {
        let root = self.dir.path().to_path_buf();
        // Pods first (the test removes its sandboxes through CRI; this catches the rest),
        // then the daemons, then the shims left without them.
        for pid in processes_under_cgroup(&self.cgroup_parent) {
            kill(pid);
        }
        let shim_sockets = self.shim_sockets();
        for child in [
            self.containerd.take(),
            self.registry_proc.take(),
            self.private_proc.take(),
        ]
        .into_iter()
        .flatten()
        {
            let mut child = child;
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for pid in processes_with_arg(&self.socket.display().to_string()) {
            kill(pid);
        }
        // A shim killed rather than shut down leaves its socket in containerd's fixed directory.
        for socket in shim_sockets {
            let _ = std::fs::remove_file(socket);
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
        // Network namespaces and overlay mounts under the lab's directory, deepest first.
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&*root.to_string_lossy()))
            .collect();
        ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in ours {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
        if let Some(v) = self.ip_forward.take() {
            let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", v);
        }
        // The cgroups runc made for the pods (v1: one tree per controller).
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let top = hierarchy
                .path()
                .join(self.cgroup_parent.trim_start_matches('/'));
            if top.is_dir() {
                remove_cgroup_tree(&top);
            }
        }
    }
}

impl Lab {
    /// The sockets of the shims of this containerd's tasks: containerd 1.6 puts them under
    /// `/run/containerd/s`, named by the SHA-256 of `<containerd socket>/<namespace>/<task id>`
    /// (the path it hashes so that instances on other sockets do not collide).
    pub fn shim_sockets(&self) -> Vec<PathBuf> {
        use sha2::{Digest, Sha256};
        let tasks = self
            .dir
            .path()
            .join("state/io.containerd.runtime.v2.task/k8s.io");
        let mut sockets = Vec::new();
        for task in std::fs::read_dir(tasks).into_iter().flatten().flatten() {
            let key = self
                .socket
                .join("k8s.io")
                .join(task.file_name())
                .display()
                .to_string();
            let hash = hex::encode(Sha256::digest(key.as_bytes()));
            sockets.push(Path::new("/run/containerd/s").join(hash));
        }
        sockets
    }
}

fn remove_cgroup_tree(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.containerd.is_some() || self.registry_proc.is_some() {
            eprintln!("--- registry logs ---\n{}", self.registry_logs());
            eprintln!("--- containerd log ---\n{}", self.log());
        }
        self.teardown();
    }
}

/// GET `path` from `addr` over plain HTTP/1.0; the body.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: pod\r\n\r\n")?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    Ok(response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default())
}

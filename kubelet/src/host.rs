//! Readings of the host the kubelet runs on: CPUs, memory, PIDs, disk, kernel and OS identity.
//!
//! The parsers are pure functions over the text of `/proc` files so they are tested without the
//! host; [`read`] gathers one [`Readings`] from the live system.

use std::path::Path;

/// One snapshot of the host, taken by [`read`]. Sizes are in bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readings {
    /// Logical CPUs this process may run on.
    pub cpus: u64,
    /// `MemTotal` from `/proc/meminfo`.
    pub memory_total: u64,
    /// `MemAvailable` from `/proc/meminfo` (what eviction thresholds compare against).
    pub memory_available: u64,
    /// `/proc/sys/kernel/pid_max`: the most PIDs the kernel hands out.
    pub pid_max: u64,
    /// Processes running now (numeric entries of `/proc`).
    pub pids_running: u64,
    /// Size of the filesystem holding the kubelet's root directory.
    pub disk_total: u64,
    /// Bytes available to unprivileged users on that filesystem.
    pub disk_available: u64,
    /// `/proc/sys/kernel/osrelease`, e.g. `6.8.0-45-generic`.
    pub kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release`, e.g. `Debian GNU/Linux 12 (bookworm)`.
    pub os_image: String,
    /// Kubernetes' name of the OS (`linux`).
    pub operating_system: String,
    /// Kubernetes' (Go's) name of the CPU architecture, e.g. `amd64`, `arm64`.
    pub architecture: String,
    /// `/etc/machine-id` (empty when absent).
    pub machine_id: String,
    /// `/proc/sys/kernel/random/boot_id`: changes on every boot.
    pub boot_id: String,
    /// The host name, from `uname`.
    pub hostname: String,
}

/// Reads the live host; `disk_path` is a directory on the filesystem whose space is reported
/// (the kubelet's root directory). Unreadable files give zero or empty readings rather than an
/// error: a node with an unknown reading still registers.
pub fn read(disk_path: &Path) -> Readings {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let (memory_total, memory_available) = parse_meminfo(&meminfo);
    let (disk_total, disk_available) = match rustix::fs::statvfs(disk_path) {
        Ok(st) => (
            st.f_blocks.saturating_mul(st.f_frsize),
            st.f_bavail.saturating_mul(st.f_frsize),
        ),
        Err(_) => (0, 0),
    };
    let uname = rustix::system::uname();
    Readings {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        memory_total,
        memory_available,
        pid_max: read_trimmed("/proc/sys/kernel/pid_max")
            .parse()
            .unwrap_or(32768),
        pids_running: count_pids(Path::new("/proc")),
        disk_total,
        disk_available,
        kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
        os_image: parse_os_release(&std::fs::read_to_string("/etc/os-release").unwrap_or_default()),
        operating_system: "linux".to_string(),
        architecture: go_arch(std::env::consts::ARCH).to_string(),
        machine_id: read_trimmed("/etc/machine-id"),
        boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
        hostname: uname.nodename().to_string_lossy().into_owned(),
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `(MemTotal, MemAvailable)` in bytes from the text of `/proc/meminfo` (values there are KiB).
pub fn parse_meminfo(text: &str) -> (u64, u64) {
    let mut total = 0;
    let mut available = None;
    let mut free = 0;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let kib: u64 = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match key {
            "MemTotal" => total = kib * 1024,
            "MemAvailable" => available = Some(kib * 1024),
            "MemFree" => free = kib * 1024,
            _ => {}
        }
    }
    // Kernels before 3.14 have no MemAvailable; MemFree is the closest (pessimistic) stand-in.
    (total, available.unwrap_or(free))
}

/// `PRETTY_NAME` from the text of `/etc/os-release`, unquoted; `Linux` when absent.
pub fn parse_os_release(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "Linux".to_string())
}

/// Go's `GOARCH` for a Rust `target_arch`, as Kubernetes labels and `nodeInfo` use it.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// Numeric entries of a procfs directory: the processes running now.
fn count_pids(proc: &Path) -> u64 {
    std::fs::read_dir(proc)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count() as u64
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_reads_total_and_available_in_bytes() {
        let text = "MemTotal:       16303832 kB\nMemFree:         1000000 kB\nMemAvailable:   12000000 kB\nBuffers: 1 kB\n";
        assert_eq!(parse_meminfo(text), (16303832 * 1024, 12000000 * 1024));
    }

    #[test]
    fn meminfo_without_available_falls_back_to_free() {
        let text = "MemTotal: 2048 kB\nMemFree: 512 kB\n";
        assert_eq!(parse_meminfo(text), (2048 * 1024, 512 * 1024));
    }

    #[test]
    fn os_release_pretty_name_unquoted_or_default() {
        let text = "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(parse_os_release(text), "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(parse_os_release("ID=x\n"), "Linux");
    }

    #[test]
    fn rust_arch_maps_to_go_arch() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }

    #[test]
    fn live_readings_are_plausible() {
        let dir = tempfile::tempdir().unwrap();
        let r = read(dir.path());
        assert!(r.cpus >= 1);
        assert!(r.memory_total > 0 && r.memory_available <= r.memory_total);
        assert!(r.pids_running >= 1 && r.pids_running <= r.pid_max);
        assert!(r.disk_total > 0 && r.disk_available <= r.disk_total);
        assert!(!r.kernel_version.is_empty());
        assert_eq!(r.operating_system, "linux");
    }
}

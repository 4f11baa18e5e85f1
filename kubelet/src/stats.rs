//! What the node and its containers use: CPU and memory, read every housekeeping interval and
//! served as the Summary API (`GET /stats/summary`, [`skiff_meta::stats`]) that the API server's
//! metrics API (`kubectl top`) reads.
//!
//! CPU counters are cumulative (core-nanoseconds); a rate needs two readings, so each series
//! keeps its last reading and the rate over the interval since the one before. A series whose
//! counter went backwards (a process group that lost an orphaned child's time, a runtime that
//! restarted) starts again: it has no rate until its next reading, never a wrong one.
//!
//! Where the numbers come from:
//! - the node: `/proc/stat` (all CPUs' busy time) and `/proc/meminfo` (use is total less free;
//!   the working set is that less inactive file pages, as cAdvisor counts the root cgroup);
//! - containers of the CRI runtime: the runtime's `ListContainerStats` (cgroup counters);
//! - containers of the process runtime: the counters of every process in the container's
//!   process group, from `/proc/<pid>/stat` (user and system time, with that of children it
//!   waited for, and resident pages).
//!
//! The parsers are pure functions over the text of `/proc` files; the [`Tracker`] is pure state
//! fed readings and times; [`read_node`] and [`process_groups`] are the thin I/O.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use skiff_meta::stats::{
    ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats, Summary,
};

use tokio_util::sync::CancellationToken;

use crate::runtime::{Container, Runtime, State};

/// One reading of cumulative CPU time and current memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time used so far, in core-nanoseconds.
    pub cpu_core_nanos: u64,
    /// The working set in bytes.
    pub working_set_bytes: u64,
    /// All memory in use, where the source tells it apart from the working set.
    pub usage_bytes: Option<u64>,
    /// Resident anonymous memory, where the source tells it.
    pub rss_bytes: Option<u64>,
}

/// A series of readings of one counter set: the last one and the rate before it.
#[derive(Clone, Debug, Default)]
struct Series {
    last: Option<(Timestamp, Usage)>,
    /// Nano-cores over the window (nanoseconds) between the last two readings.
    rate: Option<(u64, u64)>,
}

impl Series {
    fn record(&mut self, at: Timestamp, usage: Usage) {
        self.rate = match self.last {
            Some((then, before)) if at > then && usage.cpu_core_nanos >= before.cpu_core_nanos => {
                let window = at.duration_since(then).as_nanos().max(1) as u128;
                let used = u128::from(usage.cpu_core_nanos - before.cpu_core_nanos);
                // used core-ns per elapsed ns, in nano-cores.
                let rate = used * 1_000_000_000 / window;
                Some((u64::try_from(rate).unwrap_or(u64::MAX), window as u64))
            }
            _ => None,
        };
        self.last = Some((at, usage));
    }

    fn cpu(&self) -> Option<CpuStats> {
        let (time, usage) = self.last?;
        Some(CpuStats {
            time,
            usage_nano_cores: self.rate.map(|(rate, _)| rate),
            usage_core_nano_seconds: Some(usage.cpu_core_nanos),
            window_nanos: self.rate.map(|(_, window)| window),
        })
    }

    fn memory(&self) -> Option<MemoryStats> {
        let (time, usage) = self.last?;
        Some(MemoryStats {
            time,
            usage_bytes: Some(usage.usage_bytes.unwrap_or(usage.working_set_bytes)),
            working_set_bytes: Some(usage.working_set_bytes),
            rss_bytes: usage.rss_bytes,
        })
    }
}

/// The readings of the node and of each container (by runtime id), kept between housekeeping
/// rounds.
#[derive(Debug, Default)]
pub struct Tracker {
    node: Series,
    containers: HashMap<String, Series>,
    started: Option<Timestamp>,
}

impl Tracker {
    /// A tracker whose node started (as far as the summary says) at `started`.
    pub fn new(started: Timestamp) -> Self {
        Tracker {
            started: Some(started),
            ..Tracker::default()
        }
    }

    /// Records the node's reading at `at`.
    pub fn record_node(&mut self, at: Timestamp, usage: Usage) {
        self.node.record(at, usage);
    }

    /// Records one reading of every running container; containers not in `readings` are
    /// forgotten (they stopped, or the runtime no longer reports them).
    pub fn record_containers(
        &mut self,
        readings: impl IntoIterator<Item = (String, Timestamp, Usage)>,
    ) {
        let mut seen = HashMap::with_capacity(self.containers.len());
        for (id, at, usage) in readings {
            let mut series = self.containers.remove(&id).unwrap_or_default();
            series.record(at, usage);
            seen.insert(id, series);
        }
        self.containers = seen;
    }

    /// The summary of node `node_name`, with a pod entry for each pod among `containers`
    /// (the runtime's list) that has a running container with a reading.
    pub fn summary(&self, node_name: &str, containers: &[Container]) -> Summary {
        let mut pods: Vec<PodStats> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for container in containers {
            let State::Running { started_at } = container.state else {
                continue;
            };
            let Some(series) = self.containers.get(&container.id) else {
                continue;
            };
            let config = &container.config;
            let slot = *index.entry(config.pod_uid.as_str()).or_insert_with(|| {
                pods.push(PodStats {
                    pod_ref: PodReference {
                        name: config.pod_name.clone(),
                        namespace: config.pod_namespace.clone(),
                        uid: config.pod_uid.clone(),
                    },
                    ..PodStats::default()
                });
                pods.len() - 1
            });
            let pod = &mut pods[slot];
            pod.start_time = Some(pod.start_time.map_or(started_at, |t| t.min(started_at)));
            pod.containers.push(ContainerStats {
                name: config.name.clone(),
                start_time: Some(started_at),
                cpu: series.cpu(),
                memory: series.memory(),
            });
        }
        for pod in &mut pods {
            pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
            pod.cpu = sum_cpu(&pod.containers);
            pod.memory = sum_memory(&pod.containers);
        }
        pods.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });
        Summary {
            node: NodeStats {
                node_name: node_name.to_string(),
                start_time: self.started,
                cpu: self.node.cpu(),
                memory: self.node.memory(),
            },
            pods,
        }
    }
}

/// Reads what the node and each running container use every `interval` into `stats`, for the
/// Summary API.
pub async fn housekeeping(
    runtime: Arc<dyn Runtime>,
    stats: Arc<Mutex<Tracker>>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(100)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let node = tokio::task::spawn_blocking(read_node).await.ok().flatten();
        let containers = match runtime.usage().await {
            Ok(readings) => Some(readings),
            Err(err) => {
                tracing::debug!(%err, "reading container usage failed");
                None
            }
        };
        let mut stats = stats.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(node) = node {
            stats.record_node(Timestamp::now(), node);
        }
        if let Some(containers) = containers {
            stats.record_containers(containers);
        }
    }
}

/// A pod's CPU: the sum of its containers' rates, at the newest of their times, over the
/// longest of their windows; without a rate while any container has none (a sum of part of
/// the pod would understate it).
fn sum_cpu(containers: &[ContainerStats]) -> Option<CpuStats> {
    let all: Vec<CpuStats> = containers.iter().filter_map(|c| c.cpu).collect();
    if all.is_empty() || all.len() < containers.len() {
        return None;
    }
    let rates: Option<Vec<u64>> = all.iter().map(|c| c.usage_nano_cores).collect();
    Some(CpuStats {
        time: all.iter().map(|c| c.time).max()?,
        usage_nano_cores: rates.map(|r| r.iter().sum()),
        usage_core_nano_seconds: Some(all.iter().filter_map(|c| c.usage_core_nano_seconds).sum()),
        window_nanos: all.iter().filter_map(|c| c.window_nanos).max(),
    })
}

/// A pod's memory: the sum of its containers'.
fn sum_memory(containers: &[ContainerStats]) -> Option<MemoryStats> {
    let all: Vec<MemoryStats> = containers.iter().filter_map(|c| c.memory).collect();
    if all.is_empty() || all.len() < containers.len() {
        return None;
    }
    let sum = |f: fn(&MemoryStats) -> Option<u64>| -> Option<u64> {
        all.iter().map(f).sum::<Option<u64>>()
    };
    Some(MemoryStats {
        time: all.iter().map(|m| m.time).max()?,
        usage_bytes: sum(|m| m.usage_bytes),
        working_set_bytes: sum(|m| m.working_set_bytes),
        rss_bytes: sum(|m| m.rss_bytes),
    })
}

/// The node's busy CPU time in clock ticks from the text of `/proc/stat`: the first (`cpu`)
/// line's user, nice, system, irq, softirq and steal (guest time is already in user).
pub fn parse_proc_stat(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let at = |i: usize| fields.get(i).copied().unwrap_or(0);
    if fields.len() < 4 {
        return None;
    }
    Some(at(0) + at(1) + at(2) + at(5) + at(6) + at(7))
}

/// The node's memory from the text of `/proc/meminfo`: use (total less free) and the working
/// set (use less inactive file pages).
pub fn parse_node_memory(text: &str) -> Option<(u64, u64)> {
    let field = |key: &str| -> Option<u64> {
        text.lines().find_map(|line| {
            let (k, rest) = line.split_once(':')?;
            (k == key).then(|| rest.split_whitespace().next()?.parse::<u64>().ok())?
        })
    };
    let total = field("MemTotal")? * 1024;
    let free = field("MemFree")? * 1024;
    let inactive_file = field("Inactive(file)").unwrap_or(0) * 1024;
    let usage = total.saturating_sub(free);
    Some((usage, usage.saturating_sub(inactive_file)))
}

/// One process from the text of `/proc/<pid>/stat`: its process group, its CPU ticks (user and
/// system, its own and those of children it waited for) and its resident pages.
pub fn parse_pid_stat(text: &str) -> Option<(i32, u64, u64)> {
    // The command name (field 2) may hold spaces and parentheses; the fields after its last
    // closing parenthesis are plain. Counted from field 3 (state) as index 0.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |i: usize| fields.get(i).and_then(|v| v.parse::<i64>().ok());
    let pgrp = i32::try_from(number(2)?).ok()?;
    // utime (14), stime (15), cutime (16), cstime (17); rss (24).
    let ticks: i64 = (11..=14).map(number).sum::<Option<i64>>()?;
    let rss = number(21)?;
    Some((pgrp, ticks.max(0) as u64, rss.max(0) as u64))
}

/// What the node uses now, read from `/proc`.
pub fn read_node() -> Option<Usage> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let ticks = parse_proc_stat(&stat)?;
    let (usage, working_set) = parse_node_memory(&meminfo)?;
    Some(Usage {
        cpu_core_nanos: ticks_to_nanos(ticks),
        working_set_bytes: working_set,
        usage_bytes: Some(usage),
        rss_bytes: None,
    })
}

/// What the processes of each of `groups` (process group ids) use now, from one pass over
/// `proc` (`/proc`). Groups without a live process are left out.
pub fn process_groups(proc: &Path, groups: &[i32]) -> HashMap<i32, Usage> {
    let mut out: HashMap<i32, Usage> = HashMap::new();
    if groups.is_empty() {
        return out;
    }
    let Ok(entries) = std::fs::read_dir(proc) else {
        return out;
    };
    let page = rustix::param::page_size() as u64;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue; // gone since the listing
        };
        let Some((group, ticks, pages)) = parse_pid_stat(&text) else {
            continue;
        };
        if !groups.contains(&group) {
            continue;
        }
        let usage = out.entry(group).or_default();
        usage.cpu_core_nanos += ticks_to_nanos(ticks);
        usage.working_set_bytes += pages * page;
    }
    for usage in out.values_mut() {
        usage.rss_bytes = Some(usage.working_set_bytes);
    }
    out
}

fn ticks_to_nanos(ticks: u64) -> u64 {
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    ticks.saturating_mul(1_000_000_000 / per_second)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::runtime::{ContainerConfig, Limits};

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn usage(cpu_seconds: f64, memory: u64) -> Usage {
        Usage {
            cpu_core_nanos: (cpu_seconds * 1e9) as u64,
            working_set_bytes: memory,
            ..Usage::default()
        }
    }

    fn container(id: &str, pod: &str, name: &str, running: bool) -> Container {
        Container {
            id: id.into(),
            runtime: "process".into(),
            image_id: String::new(),
            config: ContainerConfig {
                pod_uid: format!("uid-{pod}"),
                pod_namespace: "default".into(),
                pod_name: pod.into(),
                name: name.into(),
                attempt: 0,
                image: "busybox".into(),
                command: Vec::new(),
                args: Vec::new(),
                env: Vec::new(),
                working_dir: None,
                pod_ip: "127.0.0.1".parse().unwrap(),
                mounts: Vec::new(),
                limits: Limits::default(),
                security: Default::default(),
                spec_hash: String::new(),
                log_path: PathBuf::new(),
                stdin: false,
                stdin_once: false,
                tty: false,
                target_id: None,
            },
            state: if running {
                State::Running {
                    started_at: at(-100),
                }
            } else {
                State::Exited {
                    started_at: at(-100),
                    finished_at: at(-50),
                    exit_code: 0,
                    reason: "Completed".into(),
                }
            },
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_rate_needs_two_readings_and_covers_the_time_between_them() {
        let mut tracker = Tracker::new(at(-1000));
        tracker.record_node(at(0), usage(100.0, 1 << 30));
        let first = tracker.summary("n", &[]).node;
        assert_eq!(first.cpu.unwrap().usage_nano_cores, None);
        assert_eq!(
            first.cpu.unwrap().usage_core_nano_seconds,
            Some(100_000_000_000)
        );
        assert_eq!(first.memory.unwrap().working_set_bytes, Some(1 << 30));

        // 5 core-seconds in 10 seconds: half a core.
        tracker.record_node(at(10), usage(105.0, 1 << 29));
        let node = tracker.summary("n", &[]).node;
        let cpu = node.cpu.unwrap();
        assert_eq!(cpu.usage_nano_cores, Some(500_000_000));
        assert_eq!(
            cpu.window_nanos,
            Some(Duration::from_secs(10).as_nanos() as u64)
        );
        assert_eq!(cpu.time, at(10));
        assert_eq!(node.memory.unwrap().working_set_bytes, Some(1 << 29));
        assert_eq!(node.node_name, "n");
        assert_eq!(node.start_time, Some(at(-1000)));
    }

    #[test]
    fn a_counter_that_went_back_starts_a_new_series() {
        let mut tracker = Tracker::default();
        tracker.record_node(at(0), usage(10.0, 1));
        tracker.record_node(at(10), usage(20.0, 1));
        assert_eq!(
            tracker.summary("n", &[]).node.cpu.unwrap().usage_nano_cores,
            Some(1_000_000_000)
        );
        tracker.record_node(at(20), usage(5.0, 1));
        assert_eq!(
            tracker.summary("n", &[]).node.cpu.unwrap().usage_nano_cores,
            None
        );
        tracker.record_node(at(30), usage(7.5, 1));
        assert_eq!(
            tracker.summary("n", &[]).node.cpu.unwrap().usage_nano_cores,
            Some(250_000_000)
        );
    }

    #[test]
    fn pods_sum_their_running_containers_and_stopped_ones_are_left_out() {
        let mut tracker = Tracker::default();
        let containers = [
            container("a1", "web", "app", true),
            container("a2", "web", "sidecar", true),
            container("b1", "db", "db", true),
            container("c1", "done", "job", false),
        ];
        tracker.record_containers([
            ("a1".to_string(), at(0), usage(1.0, 100)),
            ("a2".to_string(), at(0), usage(2.0, 200)),
            ("b1".to_string(), at(0), usage(3.0, 300)),
            ("c1".to_string(), at(0), usage(4.0, 400)),
        ]);
        tracker.record_containers([
            ("a1".to_string(), at(2), usage(2.0, 150)), // half a core
            ("a2".to_string(), at(2), usage(2.2, 250)), // 0.1 core
            ("b1".to_string(), at(2), usage(3.0, 300)), // idle
        ]);
        let summary = tracker.summary("n", &containers);
        let names: Vec<&str> = summary
            .pods
            .iter()
            .map(|p| p.pod_ref.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["db", "web"],
            "sorted; the exited container's pod is absent"
        );
        let web = &summary.pods[1];
        assert_eq!(web.pod_ref.uid, "uid-web");
        assert_eq!(web.containers.len(), 2);
        assert_eq!(web.containers[0].name, "app");
        assert_eq!(
            web.containers[0].cpu.unwrap().usage_nano_cores,
            Some(500_000_000)
        );
        assert_eq!(
            web.containers[1].cpu.unwrap().usage_nano_cores,
            Some(100_000_000)
        );
        assert_eq!(web.cpu.unwrap().usage_nano_cores, Some(600_000_000));
        assert_eq!(web.memory.unwrap().working_set_bytes, Some(400));
        assert_eq!(summary.pods[0].cpu.unwrap().usage_nano_cores, Some(0));

        // A container the runtime stopped reporting is forgotten: a new run starts afresh.
        tracker.record_containers([("b1".to_string(), at(4), usage(3.5, 300))]);
        let summary = tracker.summary("n", &containers);
        assert_eq!(summary.pods.len(), 1);
        assert_eq!(
            summary.pods[0].cpu.unwrap().usage_nano_cores,
            Some(250_000_000)
        );
    }

    #[test]
    fn a_pod_with_a_container_not_yet_measured_has_no_rate() {
        let mut tracker = Tracker::default();
        let containers = [
            container("a1", "web", "app", true),
            container("a2", "web", "late", true),
        ];
        tracker.record_containers([("a1".to_string(), at(0), usage(1.0, 100))]);
        tracker.record_containers([
            ("a1".to_string(), at(2), usage(2.0, 100)),
            ("a2".to_string(), at(2), usage(0.0, 100)),
        ]);
        let pod = &tracker.summary("n", &containers).pods[0];
        assert_eq!(
            pod.containers[0].cpu.unwrap().usage_nano_cores,
            Some(500_000_000)
        );
        assert_eq!(pod.containers[1].cpu.unwrap().usage_nano_cores, None);
        assert_eq!(pod.cpu.unwrap().usage_nano_cores, None);
        assert_eq!(pod.memory.unwrap().working_set_bytes, Some(200));
    }

    #[test]
    fn proc_files_parse() {
        let stat = "cpu  100 5 50 9000 20 3 2 1 7 0\ncpu0 50 2 25 4500 10 1 1 0 3 0\nintr 1\n";
        assert_eq!(parse_proc_stat(stat), Some(100 + 5 + 50 + 3 + 2 + 1));
        assert_eq!(parse_proc_stat("intr 1\n"), None);

        let meminfo = "MemTotal:       16000 kB\nMemFree:         4000 kB\nMemAvailable:   9000 kB\nInactive(file):  3000 kB\n";
        assert_eq!(
            parse_node_memory(meminfo),
            Some((12000 * 1024, 9000 * 1024))
        );
        assert_eq!(parse_node_memory("MemTotal: 1 kB\n"), None);

        // A command name with spaces and parentheses.
        let pid = "4242 (my (weird) prog) S 1 4240 4240 0 -1 4194560 100 0 0 0 70 30 5 5 20 0 1 0 12345 1000000 256 18446744073709551615";
        assert_eq!(parse_pid_stat(pid), Some((4240, 70 + 30 + 5 + 5, 256)));
        assert_eq!(parse_pid_stat("garbage"), None);
    }

    #[test]
    fn a_busy_process_group_is_measured() {
        // This test process's own group is live and has used some CPU.
        let group = rustix::process::getpgrp().as_raw_nonzero().get();
        let start = std::time::Instant::now();
        let mut spin = 0u64;
        while start.elapsed() < Duration::from_millis(100) {
            spin = spin.wrapping_add(std::hint::black_box(1));
        }
        assert!(spin > 0);
        let groups = process_groups(Path::new("/proc"), &[group, -7]);
        let usage = groups.get(&group).expect("our own group is found");
        assert!(usage.cpu_core_nanos >= 50_000_000, "{usage:?}");
        assert!(usage.working_set_bytes > 1 << 20, "{usage:?}");
        assert!(!groups.contains_key(&-7));
        assert!(read_node().is_some_and(|n| n.cpu_core_nanos > 0 && n.working_set_bytes > 0));
    }
}

//! Liveness, readiness and startup probes: one task per probe of a running container.
//!
//! A probe runs (exec, tcpSocket or httpGet) after `initialDelaySeconds`, then every
//! `periodSeconds`, each attempt bounded by `timeoutSeconds`. Its result flips only after
//! `successThreshold` consecutive successes or `failureThreshold` consecutive failures
//! ([`Counter`]); each flip is sent to the pod worker. A startup probe stops once it succeeds.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::runtime::Runtime;

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Restarts the container when it fails.
    Liveness,
    /// Drives the container's (and pod's) Ready.
    Readiness,
    /// Holds off the other probes until the container has started.
    Startup,
}

/// A result flip, sent to the pod worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The runtime id of the probed container.
    pub container_id: String,
    /// The probe.
    pub kind: Kind,
    /// The new result.
    pub success: bool,
    /// Why the last attempt failed (for the pod's events).
    pub message: String,
}

/// Consecutive successes and failures against the thresholds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    success_threshold: u32,
    failure_threshold: u32,
    successes: u32,
    failures: u32,
    result: Option<bool>,
}

impl Counter {
    /// A counter with the probe's thresholds (Kubernetes defaults: 1 and 3).
    pub fn new(probe: &Probe) -> Self {
        Self {
            success_threshold: probe.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1) as u32,
            successes: 0,
            failures: 0,
            result: None,
        }
    }

    /// Records one attempt; returns the new result when it flips (or is first decided).
    pub fn record(&mut self, ok: bool) -> Option<bool> {
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let decided = if self.successes >= self.success_threshold {
            Some(true)
        } else if self.failures >= self.failure_threshold {
            Some(false)
        } else {
            None
        };
        match decided {
            Some(r) if self.result != Some(r) => {
                self.result = Some(r);
                Some(r)
            }
            _ => None,
        }
    }
}

/// What a probe attempt reaches.
#[derive(Clone)]
pub struct Target {
    /// The runtime (for exec probes).
    pub runtime: Arc<dyn Runtime>,
    /// The container's runtime id.
    pub container_id: String,
    /// The container's spec (named ports).
    pub container: Container,
    /// The pod's IP: the default host of tcpSocket and httpGet.
    pub pod_ip: IpAddr,
}

fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("invalid port {p}")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok())
            .ok_or_else(|| format!("no port named {name}")),
    }
}

fn host_of(host: Option<&str>, pod_ip: IpAddr) -> String {
    match host.filter(|h| !h.is_empty()) {
        Some(h) => h.to_string(),
        None => pod_ip.to_string(),
    }
}

/// Runs one attempt of `probe`; `Err` carries why it failed.
pub async fn run_once(probe: &Probe, target: &Target) -> Result<(), String> {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Some(exec) = &probe.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let out = target
            .runtime
            .exec(&target.container_id, &cmd, timeout)
            .await
            .map_err(|e| e.to_string())?;
        return if out.exit_code == 0 {
            Ok(())
        } else {
            Err(format!(
                "command {cmd:?} exited with {}: {}",
                out.exit_code,
                String::from_utf8_lossy(&out.output).trim()
            ))
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = resolve_port(&tcp.port, &target.container)?;
        let host = host_of(tcp.host.as_deref(), target.pod_ip);
        return match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: {e}")),
            Err(_) => Err(format!("dial tcp {host}:{port}: timeout")),
        };
    }
    if let Some(http) = &probe.http_get {
        let port = resolve_port(&http.port, &target.container)?;
        let host = host_of(http.host.as_deref(), target.pod_ip);
        if http
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"))
        {
            return Err("HTTPS probes are not supported by the process runtime".into());
        }
        let path = http
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or("/".into());
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
        );
        for h in http.http_headers.iter().flatten() {
            request.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        request.push_str("\r\n");
        let attempt = async {
            let mut stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            stream.write_all(request.as_bytes()).await?;
            let mut buf = vec![0u8; 1024];
            let mut len = 0;
            while len < buf.len() {
                let n = stream.read(&mut buf[len..]).await?;
                if n == 0 || buf[..len + n].contains(&b'\n') {
                    len += n;
                    break;
                }
                len += n;
            }
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&buf[..len]).into_owned())
        };
        let head = match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => return Err(format!("Get http://{host}:{port}{path}: {e}")),
            Err(_) => return Err(format!("Get http://{host}:{port}{path}: timeout")),
        };
        let code: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("malformed HTTP response from {host}:{port}"))?;
        return if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        };
    }
    Err("probe has no handler".into())
}

/// Runs a probe until aborted, sending each result flip on `events`.
pub async fn run(kind: Kind, probe: Probe, target: Target, events: mpsc::UnboundedSender<Event>) {
    let delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
    let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
    tokio::time::sleep(delay).await;
    let mut counter = Counter::new(&probe);
    loop {
        let outcome = run_once(&probe, &target).await;
        if let Some(success) = counter.record(outcome.is_ok()) {
            let event = Event {
                container_id: target.container_id.clone(),
                kind,
                success,
                message: outcome.err().unwrap_or_default(),
            };
            if events.send(event).is_err() {
                return;
            }
            if kind == Kind::Startup && success {
                return;
            }
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, HTTPGetAction, TCPSocketAction};

    use crate::runtime::process::{Config, ProcessRuntime};

    #[test]
    fn counter_honours_thresholds() {
        let probe = Probe {
            success_threshold: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        };
        let mut c = Counter::new(&probe);
        assert_eq!(c.record(true), None);
        assert_eq!(c.record(true), Some(true));
        assert_eq!(c.record(true), None, "no flip, no event");
        assert_eq!(c.record(false), None);
        assert_eq!(c.record(false), None);
        assert_eq!(c.record(true), None, "a success resets failures");
        assert_eq!(c.record(false), None);
        assert_eq!(c.record(false), None);
        assert_eq!(c.record(false), Some(false));
        assert_eq!(c.record(true), None);
        assert_eq!(c.record(true), Some(true));
    }

    fn target(runtime: Arc<dyn Runtime>, id: &str) -> Target {
        Target {
            runtime,
            container_id: id.into(),
            container: Container {
                name: "c".into(),
                ports: Some(vec![ContainerPort {
                    name: Some("web".into()),
                    container_port: 0,
                    ..Default::default()
                }]),
                ..Default::default()
            },
            pod_ip: "127.0.0.1".parse().unwrap(),
        }
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_real_listeners() {
        let dir = tempfile::tempdir().unwrap();
        let rt: Arc<dyn Runtime> = Arc::new(
            ProcessRuntime::open(Config {
                state_dir: dir.path().into(),
                cgroup_root: None,
                log_max_size: 1 << 20,
                log_max_files: 1,
                health_program: "true".into(),
            })
            .unwrap(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // A tiny HTTP server: /ok answers 200, anything else 500.
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]);
                    let status = if req.starts_with("GET /ok ") {
                        "200 OK"
                    } else {
                        "500 Oops"
                    };
                    let _ = s
                        .write_all(
                            format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                        )
                        .await;
                });
            }
        });
        let t = target(rt.clone(), "none");
        let tcp = |port: IntOrString| Probe {
            tcp_socket: Some(TCPSocketAction { port, host: None }),
            ..Default::default()
        };
        assert!(
            run_once(&tcp(IntOrString::Int(port as i32)), &t)
                .await
                .is_ok()
        );
        let mut named = t.clone();
        named.container.ports.as_mut().unwrap()[0].container_port = port as i32;
        assert!(
            run_once(&tcp(IntOrString::String("web".into())), &named)
                .await
                .is_ok()
        );
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        assert!(
            run_once(&tcp(IntOrString::Int(closed_port as i32)), &t)
                .await
                .is_err()
        );
        assert!(
            run_once(&tcp(IntOrString::String("nope".into())), &t)
                .await
                .is_err()
        );

        let http = |path: &str| Probe {
            http_get: Some(HTTPGetAction {
                path: Some(path.into()),
                port: IntOrString::Int(port as i32),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(run_once(&http("/ok"), &t).await.is_ok());
        let err = run_once(&http("/bad"), &t).await.unwrap_err();
        assert!(err.contains("500"), "{err}");
    }

    #[tokio::test]
    async fn exec_probe_uses_the_container_and_run_sends_flips() {
        let dir = tempfile::tempdir().unwrap();
        let proc_rt = ProcessRuntime::open(Config {
            state_dir: dir.path().join("state"),
            cgroup_root: None,
            log_max_size: 1 << 20,
            log_max_files: 1,
            health_program: "true".into(),
        })
        .unwrap();
        let rt: Arc<dyn Runtime> = Arc::new(proc_rt);
        let flag = dir.path().join("healthy");
        let c = rt
            .start(crate::runtime::ContainerConfig {
                pod_uid: "u".into(),
                pod_namespace: "ns".into(),
                pod_name: "p".into(),
                name: "c".into(),
                attempt: 0,
                image: "x".into(),
                command: vec![
                    "sh".into(),
                    "-c".into(),
                    "while true; do sleep 1; done".into(),
                ],
                args: vec![],
                env: vec![("FLAG".into(), flag.display().to_string())],
                working_dir: None,
                pod_ip: "127.0.0.1".parse().unwrap(),
                mounts: vec![],
                limits: Default::default(),
                security: Default::default(),
                spec_hash: "h".into(),
                log_path: dir.path().join("c.log"),
                stdin: false,
                stdin_once: false,
                tty: false,
                target_id: None,
            })
            .await
            .unwrap();
        let probe = Probe {
            exec: Some(ExecAction {
                command: Some(vec!["sh".into(), "-c".into(), "test -e \"$FLAG\"".into()]),
            }),
            period_seconds: Some(1),
            failure_threshold: Some(1),
            ..Default::default()
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(Kind::Readiness, probe, target(rt.clone(), &c.id), tx));
        let first = rx.recv().await.unwrap();
        assert!(!first.success);
        assert!(first.message.contains("exited with 1"), "{}", first.message);
        std::fs::write(&flag, b"").unwrap();
        let second = rx.recv().await.unwrap();
        assert!(second.success);
        assert_eq!(second.kind, Kind::Readiness);
        task.abort();
        rt.stop(&c.id, Duration::from_secs(5)).await.unwrap();
    }
}

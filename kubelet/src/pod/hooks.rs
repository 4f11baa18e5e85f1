//! Container lifecycle hooks: `postStart` right after a container starts (a failure kills the
//! container, which its restart policy then handles) and `preStop` before the kubelet stops a
//! container of a terminating pod (within the grace period; the stop gets what is left of it).
//! A handler is an exec in the container, an HTTP GET or a TCP connection to the pod (the
//! probes' code), or a sleep.

use std::time::Duration;

use k8s_openapi::api::core::v1::{LifecycleHandler, Probe};

use super::probe::{self, Target};

/// The longest a `postStart` handler may take.
pub const POST_START_LIMIT: Duration = Duration::from_secs(30);

/// Runs `handler` against `target` for at most `limit`; `Err` says why it failed.
pub async fn run(
    handler: &LifecycleHandler,
    target: &Target,
    limit: Duration,
) -> Result<(), String> {
    if let Some(sleep) = &handler.sleep {
        let wanted = Duration::from_secs(sleep.seconds.max(0) as u64);
        tokio::time::sleep(wanted.min(limit)).await;
        return Ok(());
    }
    let seconds = limit.as_secs().max(1) as i32;
    let as_probe = Probe {
        exec: handler.exec.clone(),
        http_get: handler.http_get.clone(),
        tcp_socket: handler.tcp_socket.clone(),
        timeout_seconds: Some(seconds),
        ..Default::default()
    };
    match tokio::time::timeout(
        limit.max(Duration::from_secs(1)),
        probe::run_once(&as_probe, target),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(format!("did not finish within {limit:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, SleepAction, TCPSocketAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use std::sync::Arc;

    fn target() -> Target {
        let dir = tempfile::tempdir().unwrap();
        let rt = crate::runtime::process::ProcessRuntime::open(
            crate::runtime::process::Config::new(dir.path()),
        )
        .unwrap();
        std::mem::forget(dir);
        Target {
            runtime: Arc::new(rt),
            container_id: "none".into(),
            container: Container::default(),
            pod_ip: "127.0.0.1".parse().unwrap(),
        }
    }

    #[tokio::test]
    async fn handlers_succeed_fail_and_are_cut_at_the_limit() {
        let t = target();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tcp = |host: Option<&str>| LifecycleHandler {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(port as i32),
                host: host.map(str::to_string),
            }),
            ..Default::default()
        };
        assert_eq!(run(&tcp(None), &t, Duration::from_secs(2)).await, Ok(()));
        // Nothing listens on the same port of another loopback address. The listener stays
        // bound, so no other test can take the port meanwhile (as it could once it was let go).
        assert!(
            run(&tcp(Some("127.0.0.2")), &t, Duration::from_secs(2))
                .await
                .is_err()
        );
        drop(listener);
        // An exec into a container the runtime does not know fails with the runtime's error.
        let exec = LifecycleHandler {
            exec: Some(k8s_openapi::api::core::v1::ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        };
        assert!(run(&exec, &t, Duration::from_secs(2)).await.is_err());
        let sleep = LifecycleHandler {
            sleep: Some(SleepAction { seconds: 60 }),
            ..Default::default()
        };
        let start = std::time::Instant::now();
        assert_eq!(run(&sleep, &t, Duration::from_millis(200)).await, Ok(()));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(
            run(&LifecycleHandler::default(), &t, Duration::from_secs(1))
                .await
                .is_err()
        );
    }
}

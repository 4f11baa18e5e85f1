//! What the scheduler writes to the API server: bindings (`pods/binding`), rate-limited by a
//! [`TokenBucket`], and for a pod no node fits, its `PodScheduled=False` condition and a
//! `FailedScheduling` Event, and the evictions and nomination of a preemption.
//!
//! The writes go through the [`ClusterApi`] trait so the scheduling loop can be tested with a fake;
//! `KubeApi` (in [`crate::run`]) is the real one over the client.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use tokio::time::Instant;

use crate::nodeinfo::PodInfo;

/// A token bucket: `qps` tokens a second, at most `burst` saved up. Waiters are served in the
/// order they asked (each reserves its token, going into debt, and sleeps off the debt).
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens available (negative: reserved ahead) as of the instant.
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket. A `qps` of zero or less means no limit.
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long the caller must wait for its token (reserving it).
    fn reserve(&self) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut s = self.state.lock().expect("token bucket lock");
        let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
        s.0 = (s.0 + refill).min(self.burst) - 1.0;
        s.1 = now;
        if s.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.0 / self.qps)
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Why a write to the API server failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ApiError(pub String);

/// The scheduler's writes.
pub trait ClusterApi: Send + Sync + 'static {
    /// Binds a pod to a node (`POST pods/<name>/binding`).
    fn bind(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), ApiError>>;
    /// Sets `PodScheduled=False` (reason Unschedulable, the message) on a pod and records a
    /// `FailedScheduling` Event.
    fn unschedulable(&self, pod: &Pod, message: &str) -> BoxFuture<'static, Result<(), ApiError>>;
    /// Sets `volume.kubernetes.io/selected-node` on a WaitForFirstConsumer claim.
    fn select_node(
        &self,
        namespace: &str,
        claim: &str,
        node: &str,
    ) -> BoxFuture<'static, Result<(), ApiError>>;
    /// Evicts `victim` (on `node`) for `preemptor`: the `DisruptionTarget` condition, a graceful
    /// delete of that very pod (its UID as precondition), and a `Preempted` Event.
    fn preempt(
        &self,
        victim: &PodInfo,
        preemptor: &Pod,
        node: &str,
    ) -> BoxFuture<'static, Result<(), ApiError>>;
    /// Sets `status.nominatedNodeName` of a pod that preempted on `node`.
    fn nominate(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), ApiError>>;
}

/// The strategic merge patch that marks a pod as about to be preempted (`DisruptionTarget`,
/// reason `PreemptionByScheduler`), as kube-scheduler sets it before deleting the pod.
pub fn preemption_condition_patch(scheduler_name: &str) -> serde_json::Value {
    serde_json::json!({
        "status": {
            "conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": format!("{scheduler_name}: preempting to accommodate a higher priority pod"),
                "lastTransitionTime": Time(jiff::Timestamp::now()),
            }]
        }
    })
}

/// The Binding body for a pod and node.
pub fn binding(pod: &Pod, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    }
}

/// The strategic merge patch that sets `PodScheduled=False`, reason Unschedulable.
pub fn unschedulable_condition_patch(message: &str) -> serde_json::Value {
    serde_json::json!({
        "status": {
            "conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": Time(jiff::Timestamp::now()),
            }]
        }
    })
}

/// A shared [`ClusterApi`].
pub type SharedApi = Arc<dyn ClusterApi>;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_a_burst_then_the_rate() {
        let bucket = TokenBucket::new(5.0, 2);
        let start = Instant::now();
        for _ in 0..2 {
            bucket.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is free");
        for _ in 0..10 {
            bucket.acquire().await;
        }
        // Ten more tokens at five a second.
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(1999) && waited <= Duration::from_millis(2001),
            "{waited:?}"
        );
        // After idling, the bucket refills only up to the burst.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let t = Instant::now();
        for _ in 0..3 {
            bucket.acquire().await;
        }
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(199) && waited <= Duration::from_millis(201),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_waiters_are_spaced_by_the_rate() {
        let bucket = Arc::new(TokenBucket::new(10.0, 1));
        let start = Instant::now();
        let tasks: Vec<_> = (0..5)
            .map(|_| {
                let b = bucket.clone();
                tokio::spawn(async move {
                    b.acquire().await;
                    start.elapsed()
                })
            })
            .collect();
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.unwrap());
        }
        done.sort();
        let last = *done.last().unwrap();
        assert!(
            last >= Duration::from_millis(399) && last <= Duration::from_millis(401),
            "{done:?}"
        );
    }

    #[test]
    fn unlimited_bucket_never_waits() {
        let b = TokenBucket::new(0.0, 1);
        for _ in 0..1000 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
    }

    #[test]
    fn binding_and_condition_bodies() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let b = serde_json::to_value(binding(&pod, "n1")).unwrap();
        assert_eq!(b["metadata"]["name"], "web");
        assert_eq!(b["target"]["kind"], "Node");
        assert_eq!(b["target"]["name"], "n1");
        let p = unschedulable_condition_patch("m");
        assert_eq!(p["status"]["conditions"][0]["reason"], "Unschedulable");
    }
}

//! The scheduler proper: informer events in, `scheduleOne` in a loop, binds out.
//!
//! Locks: the cache and the queue each have their own mutex; neither is held across an `.await`,
//! and the loop holds the cache lock for one decision (filter, score, assume) only. The
//! [`Algorithm`] belongs to the loop alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use skiff_meta::labels::Selector;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::algorithm::Algorithm;
use crate::binder::{SharedApi, TokenBucket};
use crate::cache::{Cache, GroupKind};
use crate::nodeinfo::PodInfo;
use crate::preemption::{self, Budget, Candidate};
use crate::queue::SchedulingQueue;
use crate::volumes::{self, Volumes};

/// Binds in flight at most: past this, decided pods wait (assumed) for a bind slot, so a burst of
/// decisions never opens thousands of requests at once.
pub const MAX_BINDS_IN_FLIGHT: usize = 256;

/// How often backoffs are flushed and expired assumptions dropped.
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(1);

/// Counters, for logs and the benchmark.
#[derive(Debug, Default)]
pub struct Stats {
    /// Binds that succeeded.
    pub bound: AtomicU64,
    /// Binds that failed (the pod was retried).
    pub bind_errors: AtomicU64,
    /// Attempts that found no node.
    pub unschedulable: AtomicU64,
    /// Pods evicted to make room for more important ones.
    pub preemptions: AtomicU64,
}

/// The scheduler's shared state. Informer handlers call the `on_*` methods; one task runs
/// [`Scheduler::run_loop`] and one [`Scheduler::housekeeping`].
pub struct Scheduler {
    name: String,
    cache: Mutex<Cache>,
    queue: SchedulingQueue,
    api: SharedApi,
    bucket: TokenBucket,
    bind_slots: tokio::sync::Semaphore,
    binds: TaskTracker,
    /// The claims, volumes and classes volume binding reads (its own lock, never held with
    /// the cache's).
    volumes: Mutex<Volumes>,
    /// The PodDisruptionBudgets preemption respects where it can, by `namespace/name` (its own
    /// lock, taken after the cache's, never the other way round).
    budgets: Mutex<HashMap<String, Budget>>,
    /// Counters.
    pub stats: Stats,
}

fn key_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl Scheduler {
    /// A scheduler answering to `name`, writing through `api`, binding at most `bind_qps` a
    /// second (bursts of `bind_burst`), with assumptions expiring `assume_ttl` after their bind.
    pub fn new(
        name: &str,
        api: SharedApi,
        bind_qps: f64,
        bind_burst: u32,
        assume_ttl: Duration,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            name: name.to_string(),
            cache: Mutex::new(Cache::new(assume_ttl)),
            queue: SchedulingQueue::new(),
            volumes: Mutex::new(Volumes::default()),
            budgets: Mutex::new(HashMap::new()),
            api,
            bucket: TokenBucket::new(bind_qps, bind_burst),
            bind_slots: tokio::sync::Semaphore::new(MAX_BINDS_IN_FLIGHT),
            binds: TaskTracker::new(),
            stats: Stats::default(),
        })
    }

    /// Runs `f` on the cache under its lock.
    pub fn with_cache<R>(&self, f: impl FnOnce(&mut Cache) -> R) -> R {
        f(&mut self.cache.lock().expect("cache lock"))
    }

    /// The queue.
    pub fn queue(&self) -> &SchedulingQueue {
        &self.queue
    }

    /// Whether this scheduler should place a pod: unbound, not finished or being deleted, and
    /// naming this scheduler.
    pub fn responsible_for(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .filter(|s| !s.is_empty())
            .unwrap_or(crate::DEFAULT_SCHEDULER_NAME);
        !is_bound(pod)
            && name == self.name
            && pod.metadata.deletion_timestamp.is_none()
            && !is_finished(pod)
    }

    /// A pod was added or changed.
    pub fn on_pod(&self, pod: &Arc<Pod>) {
        let key = key_of(pod);
        if is_bound(pod) {
            let freed = self.with_cache(|c| {
                if is_finished(pod) {
                    let had = c.contains_pod(&key);
                    c.remove_pod(&key);
                    had
                } else {
                    c.upsert_pod(pod);
                    false
                }
            });
            let now = Instant::now();
            self.queue.with(|q| {
                q.delete(&key);
                if freed {
                    q.move_all_to_active_or_backoff(now);
                }
            });
        } else if self.responsible_for(pod) {
            if self.with_cache(|c| c.is_assumed(&key)) {
                // Being bound right now; the watch will show the bind.
                return;
            }
            let now = Instant::now();
            self.queue.with(|q| q.add(key, pod.clone(), now));
        } else {
            self.queue.with(|q| q.delete(&key));
        }
    }

    /// A pod was deleted: its resources are free, so parked pods get another chance.
    pub fn on_pod_delete(&self, pod: &Pod) {
        let key = key_of(pod);
        let was_counted = self.with_cache(|c| {
            let had = c.contains_pod(&key);
            c.remove_pod(&key);
            had
        });
        let now = Instant::now();
        self.queue.with(|q| {
            q.delete(&key);
            if was_counted {
                q.move_all_to_active_or_backoff(now);
            }
        });
    }

    /// A node was added or changed: parked pods get another chance.
    pub fn on_node(&self, node: &Arc<Node>) {
        self.with_cache(|c| c.upsert_node(node.clone()));
        let now = Instant::now();
        self.queue.with(|q| q.move_all_to_active_or_backoff(now));
    }

    /// A PodDisruptionBudget changed or was deleted.
    pub fn on_budget(&self, pdb: &PodDisruptionBudget, deleted: bool) {
        let key = format!(
            "{}/{}",
            pdb.metadata.namespace.as_deref().unwrap_or_default(),
            pdb.metadata.name.as_deref().unwrap_or_default()
        );
        let mut budgets = self.budgets.lock().expect("budgets lock");
        match Budget::of(pdb).filter(|_| !deleted) {
            Some(budget) => budgets.insert(key, budget),
            None => budgets.remove(&key),
        };
    }

    /// A node was deleted.
    pub fn on_node_delete(&self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.with_cache(|c| c.remove_node(&name));
    }

    /// A claim changed (or was deleted): pods waiting for it get another chance.
    pub fn on_claim(&self, claim: &Arc<PersistentVolumeClaim>, deleted: bool) {
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        self.volumes.lock().expect("volumes lock").set_claim(
            &ns,
            &name,
            (!deleted).then(|| claim.clone()),
        );
        let now = Instant::now();
        self.queue.with(|q| q.move_all_to_active_or_backoff(now));
    }

    /// A volume changed (or was deleted).
    pub fn on_volume(&self, pv: &Arc<PersistentVolume>, deleted: bool) {
        let name = pv.metadata.name.clone().unwrap_or_default();
        self.volumes
            .lock()
            .expect("volumes lock")
            .set_volume(&name, (!deleted).then(|| pv.clone()));
        let now = Instant::now();
        self.queue.with(|q| q.move_all_to_active_or_backoff(now));
    }

    /// A StorageClass changed (or was deleted).
    pub fn on_class(&self, class: &Arc<StorageClass>, deleted: bool) {
        let name = class.metadata.name.clone().unwrap_or_default();
        self.volumes
            .lock()
            .expect("volumes lock")
            .set_class(&name, (!deleted).then(|| class.clone()));
    }

    /// A Service or ReplicaSet selector changed (`None`: deleted).
    pub fn on_group(&self, kind: GroupKind, namespace: &str, name: &str, sel: Option<Selector>) {
        self.with_cache(|c| c.set_group(kind, namespace, name, sel));
    }

    /// Takes the next pod, decides, assumes, and starts its bind (which runs concurrently with the
    /// next decisions). Returns false once the queue is closed.
    pub async fn schedule_one(self: &Arc<Self>, algorithm: &mut Algorithm) -> bool {
        let Some(queued) = self.queue.pop().await else {
            return false;
        };
        let pod = queued.pod;
        let key = key_of(&pod);
        let mut info = PodInfo::new(&pod);
        let claims = volumes::check(&pod, &self.volumes.lock().expect("volumes lock"));
        let delayed = match claims {
            Ok(v) => {
                info.volume_affinity = v.affinity;
                v.delayed
            }
            Err(reason) => {
                let nodes = self.with_cache(|c| c.nodes().len());
                self.park(
                    pod,
                    key,
                    format!("0/{nodes} nodes are available: {reason}."),
                );
                return true;
            }
        };
        let decision = {
            let mut cache = self.cache.lock().expect("cache lock");
            if cache.contains_pod(&key) {
                None
            } else {
                info.groups = cache.groups_for(&info.namespace, &info.labels);
                Some(match algorithm.schedule(&info, cache.nodes()) {
                    Ok(i) => {
                        let node = cache.nodes()[i].name.clone();
                        cache
                            .assume(info, &node)
                            .expect("a pod not in the cache can be assumed");
                        Ok(node)
                    }
                    Err(e) => {
                        let candidate = preemption::eligible(&info, cache.nodes())
                            .then(|| {
                                let budgets: Vec<Budget> = self
                                    .budgets
                                    .lock()
                                    .expect("budgets lock")
                                    .values()
                                    .cloned()
                                    .collect();
                                preemption::find(algorithm, &info, cache.nodes(), &budgets)
                            })
                            .flatten();
                        Err((e, candidate))
                    }
                })
            }
        };
        match decision {
            None => {
                // Bound or assumed meanwhile.
                self.queue.with(|q| q.done(&key));
            }
            Some(Ok(node)) => {
                tracing::debug!(pod = %key, %node, attempts = queued.attempts, "assumed");
                let me = self.clone();
                self.binds
                    .spawn(async move { me.bind(pod, key, node, delayed).await });
            }
            Some(Err((fit, candidate))) => {
                if let Some(candidate) = candidate {
                    self.preempt(&pod, candidate);
                }
                self.park(pod, key, fit.to_string());
            }
        }
        true
    }

    /// Evicts the victims of a preemption for `pod` and nominates the node; the pod is parked
    /// meanwhile and tried again when the victims' deletions free the room.
    fn preempt(&self, pod: &Arc<Pod>, candidate: Candidate) {
        let key = key_of(pod);
        let victims: Vec<&str> = candidate.victims.iter().map(|v| v.key.as_str()).collect();
        tracing::info!(pod = %key, node = %candidate.node, ?victims,
                       budget_violations = candidate.violations, "preempting");
        self.stats
            .preemptions
            .fetch_add(candidate.victims.len() as u64, Ordering::Relaxed);
        let api = self.api.clone();
        let pod = pod.clone();
        self.binds.spawn(async move {
            for victim in &candidate.victims {
                if let Err(e) = api.preempt(victim, &pod, &candidate.node).await {
                    tracing::warn!(pod = %key, victim = %victim.key, error = %e, "cannot preempt");
                }
            }
            if let Err(e) = api.nominate(&pod, &candidate.node).await {
                tracing::warn!(pod = %key, error = %e, "cannot nominate a node");
            }
        });
    }

    /// Parks an unschedulable pod and records why.
    fn park(&self, pod: Arc<Pod>, key: String, message: String) {
        tracing::info!(pod = %key, %message, "unschedulable");
        self.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        self.queue.with(|q| q.unschedulable(&key, now));
        let api = self.api.clone();
        self.binds.spawn(async move {
            if let Err(e) = api.unschedulable(&pod, &message).await {
                tracing::warn!(pod = %key, error = %e, "cannot record unschedulable");
            }
        });
    }

    /// Binds a pod, first telling its WaitForFirstConsumer claims (`delayed`) the node.
    async fn bind(&self, pod: Arc<Pod>, key: String, node: String, delayed: Vec<(String, String)>) {
        let _slot = self
            .bind_slots
            .acquire()
            .await
            .expect("the bind semaphore is never closed");
        self.bucket.acquire().await;
        let mut selected = Ok(());
        for (ns, claim) in &delayed {
            selected = self.api.select_node(ns, claim, &node).await;
            if selected.is_err() {
                break;
            }
        }
        let outcome = match selected {
            Ok(()) => self.api.bind(&pod, &node).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                self.stats.bound.fetch_add(1, Ordering::Relaxed);
                let now = Instant::now();
                self.with_cache(|c| c.finish_binding(&key, now));
                self.queue.with(|q| q.done(&key));
            }
            Err(e) => {
                tracing::warn!(pod = %key, %node, error = %e, "bind failed; retrying with backoff");
                self.stats.bind_errors.fetch_add(1, Ordering::Relaxed);
                self.with_cache(|c| c.forget(&key));
                let now = Instant::now();
                self.queue.with(|q| q.error(&key, now));
            }
        }
    }

    /// Schedules until `shutdown`, then waits for the binds in flight.
    pub async fn run_loop(self: Arc<Self>, mut algorithm: Algorithm, shutdown: CancellationToken) {
        let closer = {
            let me = self.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                shutdown.cancelled().await;
                me.queue.close();
            })
        };
        while self.schedule_one(&mut algorithm).await {}
        closer.abort();
        self.binds.close();
        self.binds.wait().await;
    }

    /// Every [`HOUSEKEEPING_PERIOD`] until `shutdown`: moves pods whose backoff ended to active and
    /// drops assumptions the watch never confirmed.
    pub async fn housekeeping(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(HOUSEKEEPING_PERIOD);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = Instant::now();
            let expired = self.with_cache(|c| c.cleanup_expired(now));
            for key in &expired {
                tracing::warn!(pod = %key, "assumed pod expired: the bind never showed in the watch");
            }
            self.queue.with(|q| q.flush(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{DEFAULT_PROVIDER, Registry};
    use crate::binder::{ApiError, ClusterApi};
    use futures::future::BoxFuture;
    use k8s_openapi::api::core::v1::{
        Container, NodeCondition, NodeSpec, NodeStatus, PodSpec, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::HashMap;

    /// Records binds and unschedulable reports; fails the first `fail_binds` binds.
    #[derive(Default)]
    struct FakeApi {
        binds: Mutex<Vec<(String, String)>>,
        unschedulable: Mutex<Vec<(String, String)>>,
        fail_binds: Mutex<u32>,
        selected: Mutex<Vec<(String, String)>>,
        preempted: Mutex<Vec<(String, String)>>,
        nominated: Mutex<Vec<(String, String)>>,
    }

    impl ClusterApi for FakeApi {
        fn preempt(
            &self,
            victim: &PodInfo,
            preemptor: &Pod,
            _node: &str,
        ) -> BoxFuture<'static, Result<(), ApiError>> {
            self.preempted
                .lock()
                .unwrap()
                .push((victim.key.clone(), key_of(preemptor)));
            Box::pin(async { Ok(()) })
        }

        fn nominate(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), ApiError>> {
            self.nominated
                .lock()
                .unwrap()
                .push((key_of(pod), node.to_string()));
            Box::pin(async { Ok(()) })
        }

        fn select_node(
            &self,
            namespace: &str,
            claim: &str,
            node: &str,
        ) -> BoxFuture<'static, Result<(), ApiError>> {
            self.selected
                .lock()
                .unwrap()
                .push((format!("{namespace}/{claim}"), node.to_string()));
            Box::pin(async { Ok(()) })
        }

        fn bind(&self, pod: &Pod, node: &str) -> BoxFuture<'static, Result<(), ApiError>> {
            let mut fail = self.fail_binds.lock().unwrap();
            let result = if *fail > 0 {
                *fail -= 1;
                Err(ApiError("injected".into()))
            } else {
                self.binds
                    .lock()
                    .unwrap()
                    .push((key_of(pod), node.to_string()));
                Ok(())
            };
            Box::pin(async move { result })
        }

        fn unschedulable(
            &self,
            pod: &Pod,
            message: &str,
        ) -> BoxFuture<'static, Result<(), ApiError>> {
            self.unschedulable
                .lock()
                .unwrap()
                .push((key_of(pod), message.to_string()));
            Box::pin(async { Ok(()) })
        }
    }

    fn node(name: &str, cpu: &str, unschedulable: bool) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: Some(unschedulable),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(
                    [
                        ("cpu".to_string(), Quantity(cpu.into())),
                        ("memory".to_string(), Quantity("8Gi".into())),
                        ("pods".to_string(), Quantity("110".into())),
                    ]
                    .into(),
                ),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn pod(name: &str, cpu: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn setup() -> (Arc<Scheduler>, Arc<FakeApi>, Algorithm) {
        let api = Arc::new(FakeApi::default());
        let s = Scheduler::new(
            crate::DEFAULT_SCHEDULER_NAME,
            api.clone(),
            0.0,
            1,
            Duration::from_secs(30),
        );
        let r = Registry::default();
        let a = r
            .algorithm(&r.provider_policy(DEFAULT_PROVIDER, &[]).unwrap(), 0)
            .unwrap();
        (s, api, a)
    }

    async fn drain_binds(s: &Arc<Scheduler>) {
        // Binds run on their own tasks; let them finish.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let _ = s;
    }

    #[tokio::test]
    async fn assumed_pods_count_in_the_next_decision() {
        let (s, api, mut a) = setup();
        s.on_node(&node("n1", "1", false));
        s.on_node(&node("n2", "1", false));
        // Three pods of 600m on two 1-cpu nodes: the first two land on different nodes because
        // the first one is assumed before the second is decided; the third fits nowhere.
        for name in ["a", "b", "c"] {
            s.on_pod(&pod(name, "600m"));
        }
        for _ in 0..3 {
            assert!(s.schedule_one(&mut a).await);
        }
        drain_binds(&s).await;
        let binds = api.binds.lock().unwrap().clone();
        assert_eq!(binds.len(), 2);
        assert_ne!(binds[0].1, binds[1].1);
        let unsched = api.unschedulable.lock().unwrap().clone();
        assert_eq!(
            unsched,
            vec![(
                "default/c".to_string(),
                "0/2 nodes are available: 2 Insufficient cpu.".to_string()
            )]
        );
    }

    #[tokio::test]
    async fn unschedulable_pod_is_retried_when_a_node_is_added() {
        let (s, api, mut a) = setup();
        s.on_node(&node("n1", "1", true));
        s.on_pod(&pod("p", "100m"));
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        assert_eq!(
            api.unschedulable.lock().unwrap()[0].1,
            "0/1 nodes are available: 1 node(s) were unschedulable."
        );
        assert_eq!(s.queue().with(|q| q.active_len()), 0);
        s.on_node(&node("n2", "1", false));
        // Still within the pod's 1 s backoff: it waits in backoff, then the flush releases it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.queue().with(|q| q.active_len()) == 0 {
            assert!(Instant::now() < deadline, "the pod never became active");
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.queue().with(|q| q.flush(Instant::now()));
        }
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        assert_eq!(
            api.binds.lock().unwrap().clone(),
            vec![("default/p".to_string(), "n2".to_string())]
        );
    }

    #[tokio::test]
    async fn failed_bind_forgets_the_assumption_and_retries() {
        let (s, api, mut a) = setup();
        *api.fail_binds.lock().unwrap() = 1;
        s.on_node(&node("n1", "1", false));
        s.on_pod(&pod("p", "100m"));
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        assert!(api.binds.lock().unwrap().is_empty());
        assert!(!s.with_cache(|c| c.contains_pod("default/p")));
        assert_eq!(s.stats.bind_errors.load(Ordering::Relaxed), 1);
        assert_eq!(
            s.queue().with(|q| q.place("default/p")),
            Some(crate::queue::Place::Backoff)
        );
        s.queue()
            .with(|q| q.flush(Instant::now() + Duration::from_secs(1)));
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        assert_eq!(api.binds.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn watch_confirms_binds_and_other_schedulers_pods_are_ignored() {
        let (s, api, mut a) = setup();
        s.on_node(&node("n1", "1", false));
        let p = pod("p", "100m");
        s.on_pod(&p);
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        assert!(s.with_cache(|c| c.is_assumed("default/p")));
        // The watch shows the bind: confirmed.
        let mut bound = (*p).clone();
        bound.spec.as_mut().unwrap().node_name = Some("n1".into());
        s.on_pod(&Arc::new(bound));
        assert!(!s.with_cache(|c| c.is_assumed("default/p")));
        assert!(s.with_cache(|c| c.contains_pod("default/p")));

        let mut other = (*pod("q", "100m")).clone();
        other.spec.as_mut().unwrap().scheduler_name = Some("someone-else".into());
        s.on_pod(&Arc::new(other));
        assert!(s.queue().with(|q| q.is_empty()));
        let _ = api;
    }

    #[tokio::test]
    async fn a_more_important_pod_preempts_and_is_nominated_then_lands_when_room_is_freed() {
        let (s, api, mut a) = setup();
        s.on_node(&node("n1", "1", false));
        let mut low = (*pod("low", "900m")).clone();
        low.metadata.uid = Some("u-low".into());
        low.spec.as_mut().unwrap().node_name = Some("n1".into());
        s.on_pod(&Arc::new(low.clone()));
        let mut never = (*pod("patient", "500m")).clone();
        let spec = never.spec.as_mut().unwrap();
        spec.priority = Some(100);
        spec.preemption_policy = Some("Never".into());
        s.on_pod(&Arc::new(never));
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        assert!(
            api.preempted.lock().unwrap().is_empty(),
            "preemptionPolicy Never waits"
        );

        let mut urgent = (*pod("urgent", "500m")).clone();
        urgent.spec.as_mut().unwrap().priority = Some(1000);
        s.on_pod(&Arc::new(urgent.clone()));
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        assert_eq!(
            *api.preempted.lock().unwrap(),
            [("default/low".to_string(), "default/urgent".to_string())]
        );
        assert_eq!(
            *api.nominated.lock().unwrap(),
            [("default/urgent".to_string(), "n1".to_string())]
        );
        assert_eq!(s.stats.preemptions.load(Ordering::Relaxed), 1);
        // The victim leaves; the preemptor lands where it made room.
        s.on_pod_delete(&low);
        s.queue()
            .with(|q| q.flush(Instant::now() + Duration::from_secs(60)));
        while s.queue().with(|q| q.active_len()) > 0 {
            s.schedule_one(&mut a).await;
        }
        drain_binds(&s).await;
        let binds: HashMap<_, _> = api.binds.lock().unwrap().iter().cloned().collect();
        assert_eq!(binds.get("default/urgent").map(String::as_str), Some("n1"));
    }

    #[tokio::test]
    async fn deleting_a_bound_pod_frees_room_for_parked_pods() {
        let (s, api, mut a) = setup();
        s.on_node(&node("n1", "1", false));
        let mut big = (*pod("big", "900m")).clone();
        big.spec.as_mut().unwrap().node_name = Some("n1".into());
        s.on_pod(&Arc::new(big.clone()));
        s.on_pod(&pod("p", "500m"));
        s.schedule_one(&mut a).await;
        assert_eq!(s.stats.unschedulable.load(Ordering::Relaxed), 1);
        s.on_pod_delete(&big);
        s.queue()
            .with(|q| q.flush(Instant::now() + Duration::from_secs(1)));
        s.schedule_one(&mut a).await;
        drain_binds(&s).await;
        let binds: HashMap<_, _> = api.binds.lock().unwrap().iter().cloned().collect();
        assert_eq!(binds.get("default/p").map(String::as_str), Some("n1"));
    }

    #[tokio::test]
    async fn pods_of_a_service_spread_across_nodes() {
        let (s, api, _) = setup();
        let r = Registry::default();
        let policy: crate::algorithm::Policy = serde_json::from_str(
            r#"{"predicates": [{"name": "PodFitsResources"}],
                "priorities": [{"name": "SelectorSpreadPriority", "weight": 1}]}"#,
        )
        .unwrap();
        let mut a = r.algorithm(&policy, 100).unwrap();
        s.on_node(&node("n1", "4", false));
        s.on_node(&node("n2", "4", false));
        s.on_node(&node("n3", "4", false));
        s.on_group(
            GroupKind::Service,
            "default",
            "web",
            Some(Selector::from_set(
                &[("app".to_string(), "web".to_string())].into(),
            )),
        );
        let web = |name: &str| {
            let mut p = (*pod(name, "100m")).clone();
            p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
            Arc::new(p)
        };
        for i in 0..6 {
            s.on_pod(&web(&format!("w{i}")));
        }
        for _ in 0..6 {
            s.schedule_one(&mut a).await;
        }
        drain_binds(&s).await;
        let mut per_node: HashMap<String, usize> = HashMap::new();
        for (_, n) in api.binds.lock().unwrap().iter() {
            *per_node.entry(n.clone()).or_default() += 1;
        }
        assert_eq!(per_node.len(), 3, "{per_node:?}");
        assert!(per_node.values().all(|&c| c == 2), "{per_node:?}");
    }
}

//! The scheduling queue (kube-scheduler's `PriorityQueue`): an active queue of pods to schedule,
//! highest `spec.priority` first and first-come first-served within a priority (the default
//! `PrioritySort`), a backoff set of pods that failed recently (per-pod exponential
//! backoff), and an unschedulable set parked until the cluster changes.
//!
//! ```text
//!            add / update                        pop
//!   ───────────────────────────► active ─────────────────────► scheduling
//!                                  ▲   ▲                            │ unschedulable
//!           backoff expired (flush)│   │ cluster event, or         ▼
//!                              backoff ◄── parked too long ── unschedulable
//!                                  ▲     (cluster event while still backing off)
//!                                  └── error, or a cluster event during the attempt
//! ```
//!
//! [`State`] is the pure state machine, stepped with explicit instants so tests need no clock;
//! [`SchedulingQueue`] wraps it in a mutex with a notifier for the async scheduling loop.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;

/// The first backoff of a pod that failed (`podInitialBackoffSeconds`).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest backoff (`podMaxBackoffSeconds`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long an unschedulable pod waits for a cluster event before it is retried anyway
/// (`podMaxInUnschedulablePodsDuration` is 5 minutes upstream; a minute here).
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(60);

/// A pod in the queue with its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    /// The latest version of the pod seen.
    pub pod: Arc<Pod>,
    /// How many times it was tried and failed.
    pub attempts: u32,
    /// When it last failed.
    pub last_failure: Option<Instant>,
}

impl QueuedPod {
    /// When its backoff ends: last failure + 1s * 2^(attempts-1), at most 10 s.
    pub fn backoff_expiry(&self) -> Option<Instant> {
        let last = self.last_failure?;
        let shift = self.attempts.saturating_sub(1).min(16);
        let backoff = (INITIAL_BACKOFF * (1u32 << shift)).min(MAX_BACKOFF);
        Some(last + backoff)
    }
}

/// Where a queued pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Waiting in the active FIFO.
    Active,
    /// Waiting for its backoff to end.
    Backoff,
    /// Parked until a cluster event (or [`MAX_UNSCHEDULABLE`]).
    Unschedulable(Instant),
    /// Handed out by `pop` and not yet returned.
    InFlight,
}

/// The active pods in scheduling order: highest priority first, then in the order they became
/// active.
#[derive(Debug, Default)]
struct Active {
    order: BTreeMap<(Reverse<i32>, u64), String>,
    slots: HashMap<String, (Reverse<i32>, u64)>,
    next: u64,
}

impl Active {
    fn push(&mut self, key: String, pod: &Pod) {
        let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let slot = (Reverse(priority), self.next);
        self.next += 1;
        if let Some(old) = self.slots.insert(key.clone(), slot) {
            self.order.remove(&old);
        }
        self.order.insert(slot, key);
    }

    fn pop(&mut self) -> Option<String> {
        let (_, key) = self.order.pop_first()?;
        self.slots.remove(&key);
        Some(key)
    }

    fn remove(&mut self, key: &str) {
        if let Some(slot) = self.slots.remove(key) {
            self.order.remove(&slot);
        }
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

/// The queue's state.
#[derive(Debug, Default)]
pub struct State {
    pods: HashMap<String, (QueuedPod, Place)>,
    active: Active,
    /// Incremented by every `pop`.
    scheduling_cycle: u64,
    /// The cycle of the last cluster event that moved pods; a pod whose attempt started before it
    /// goes to backoff, not unschedulable, as the event may have made it fit.
    move_request_cycle: u64,
    /// The cycle each in-flight pod was popped in.
    popped_in: HashMap<String, u64>,
    /// In-flight pods deleted meanwhile: not requeued when their attempt ends.
    deleted_in_flight: HashSet<String>,
}

impl State {
    /// Adds or updates a pod that needs scheduling. A new pod goes to active; an update of a pod
    /// parked as unschedulable moves it to active (or backoff) as the change may make it fit.
    pub fn add(&mut self, key: String, pod: Arc<Pod>, now: Instant) {
        self.deleted_in_flight.remove(&key);
        match self.pods.get_mut(&key) {
            None => {
                self.active.push(key.clone(), &pod);
                self.pods.insert(
                    key,
                    (
                        QueuedPod {
                            pod,
                            attempts: 0,
                            last_failure: None,
                        },
                        Place::Active,
                    ),
                );
            }
            Some((q, place)) => {
                q.pod = pod;
                if let Place::Unschedulable(_) = place {
                    let backing_off = q.backoff_expiry().is_some_and(|t| t > now);
                    if backing_off {
                        *place = Place::Backoff;
                    } else {
                        *place = Place::Active;
                        self.active.push(key, &q.pod);
                    }
                }
            }
        }
    }

    /// Forgets a pod (deleted, or scheduled by someone else).
    pub fn delete(&mut self, key: &str) {
        if let Some((_, place)) = self.pods.remove(key) {
            if place == Place::Active {
                self.active.remove(key);
            }
            if place == Place::InFlight {
                self.deleted_in_flight.insert(key.to_string());
            }
        }
    }

    /// The next pod to schedule, if any is active; it stays in flight until
    /// [`State::done`], [`State::unschedulable`] or [`State::error`].
    pub fn pop(&mut self) -> Option<QueuedPod> {
        let key = self.active.pop()?;
        let (q, place) = self
            .pods
            .get_mut(&key)
            .expect("active keys are queued pods");
        *place = Place::InFlight;
        self.scheduling_cycle += 1;
        self.popped_in.insert(key, self.scheduling_cycle);
        Some(q.clone())
    }

    /// The pod was scheduled (assumed and sent to bind): forget it.
    pub fn done(&mut self, key: &str) {
        self.popped_in.remove(key);
        self.deleted_in_flight.remove(key);
        self.pods.remove(key);
    }

    /// No node fits the pod: park it until the cluster changes, or back it off if the cluster
    /// changed during the attempt.
    pub fn unschedulable(&mut self, key: &str, now: Instant) {
        self.failed(key, now, true);
    }

    /// The attempt failed for another reason (e.g. the bind failed): back it off.
    pub fn error(&mut self, key: &str, now: Instant) {
        self.failed(key, now, false);
    }

    fn failed(&mut self, key: &str, now: Instant, unschedulable: bool) {
        let cycle = self.popped_in.remove(key).unwrap_or(0);
        if self.deleted_in_flight.remove(key) {
            return;
        }
        let Some((q, place)) = self.pods.get_mut(key) else {
            return;
        };
        if *place != Place::InFlight {
            // Deleted and added again during the attempt: the new version is already queued.
            return;
        }
        q.attempts += 1;
        q.last_failure = Some(now);
        *place = if unschedulable && self.move_request_cycle < cycle {
            Place::Unschedulable(now)
        } else {
            Place::Backoff
        };
    }

    /// A cluster event (node added or changed, a pod deleted) may make parked pods fit: move
    /// every unschedulable pod to active, or to backoff if it is still backing off.
    pub fn move_all_to_active_or_backoff(&mut self, now: Instant) {
        for (key, (q, place)) in self.pods.iter_mut() {
            if let Place::Unschedulable(_) = place {
                if q.backoff_expiry().is_some_and(|t| t > now) {
                    *place = Place::Backoff;
                } else {
                    *place = Place::Active;
                    self.active.push(key.clone(), &q.pod);
                }
            }
        }
        self.move_request_cycle = self.scheduling_cycle;
    }

    /// Moves pods whose backoff ended, and pods parked longer than [`MAX_UNSCHEDULABLE`], to
    /// active. Returns how many moved.
    pub fn flush(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        for (key, (q, place)) in self.pods.iter_mut() {
            let ready = match place {
                Place::Backoff => q.backoff_expiry().is_none_or(|t| t <= now),
                Place::Unschedulable(since) => now.duration_since(*since) >= MAX_UNSCHEDULABLE,
                _ => false,
            };
            if ready {
                *place = Place::Active;
                self.active.push(key.clone(), &q.pod);
                moved += 1;
            }
        }
        moved
    }

    /// Where a pod is, if queued.
    pub fn place(&self, key: &str) -> Option<Place> {
        self.pods.get(key).map(|(_, p)| *p)
    }

    /// How many pods wait in active.
    pub fn active_len(&self) -> usize {
        self.active.len()
    }

    /// How many pods are queued anywhere (in flight included).
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// The queue shared by the informer handlers (which add) and the scheduling loop (which pops).
#[derive(Debug, Default)]
pub struct SchedulingQueue {
    state: Mutex<State>,
    notify: Notify,
    closed: std::sync::atomic::AtomicBool,
}

impl SchedulingQueue {
    /// An empty queue.
    pub fn new() -> SchedulingQueue {
        SchedulingQueue::default()
    }

    /// Runs `f` on the state under the lock and wakes the loop if pods became active.
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (r, active) = {
            let mut s = self.state.lock().expect("queue lock");
            let r = f(&mut s);
            (r, s.active_len())
        };
        if active > 0 {
            self.notify.notify_one();
        }
        r
    }

    /// Waits for an active pod; `None` once closed.
    pub async fn pop(&self) -> Option<QueuedPod> {
        loop {
            let notified = self.notify.notified();
            if self.closed.load(std::sync::atomic::Ordering::Acquire) {
                return None;
            }
            if let Some(q) = self.with(State::pop) {
                return Some(q);
            }
            notified.await;
        }
    }

    /// Wakes and ends every `pop`.
    pub fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Arc<Pod> {
        Arc::new(Pod::default())
    }

    #[test]
    fn fifo_and_done() {
        let now = Instant::now();
        let mut s = State::default();
        s.add("a".into(), pod(), now);
        s.add("b".into(), pod(), now);
        s.add("a".into(), pod(), now); // an update does not queue twice
        assert_eq!(s.active_len(), 2);
        let a = s.pop().unwrap();
        assert_eq!(a.attempts, 0);
        assert_eq!(s.place("a"), Some(Place::InFlight));
        s.done("a");
        assert_eq!(s.place("a"), None);
        assert!(s.pop().is_some());
        assert!(s.pop().is_none());
    }

    fn named(name: &str, priority: Option<i32>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                priority,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn drain(s: &mut State) -> Vec<String> {
        std::iter::from_fn(|| s.pop())
            .map(|q| q.pod.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn higher_priority_first_then_first_come_first_served() {
        let now = Instant::now();
        let mut s = State::default();
        for (name, priority) in [
            ("low-1", None),
            ("high-1", Some(1000)),
            ("low-2", Some(0)),
            ("high-2", Some(1000)),
            ("critical", Some(2_000_000_000)),
            ("negative", Some(-5)),
            ("low-3", None),
        ] {
            s.add(name.into(), named(name, priority), now);
        }
        s.delete("low-2");
        assert_eq!(
            drain(&mut s),
            ["critical", "high-1", "high-2", "low-1", "low-3", "negative"]
        );
        // A pod back from backoff waits behind those of its priority that became active first.
        let mut s = State::default();
        s.add("a".into(), named("a", None), now);
        s.add("b".into(), named("b", None), now);
        assert_eq!(s.pop().unwrap().pod.metadata.name.as_deref(), Some("a"));
        s.error("a", now);
        s.add("c".into(), named("c", None), now);
        assert_eq!(s.flush(now + MAX_BACKOFF), 1);
        assert_eq!(drain(&mut s), ["b", "c", "a"]);
    }

    #[test]
    fn backoff_doubles_per_attempt_up_to_ten_seconds() {
        let t0 = Instant::now();
        let q = |attempts| QueuedPod {
            pod: pod(),
            attempts,
            last_failure: Some(t0),
        };
        assert_eq!(q(1).backoff_expiry(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(q(2).backoff_expiry(), Some(t0 + Duration::from_secs(2)));
        assert_eq!(q(4).backoff_expiry(), Some(t0 + Duration::from_secs(8)));
        assert_eq!(q(5).backoff_expiry(), Some(t0 + Duration::from_secs(10)));
        assert_eq!(q(40).backoff_expiry(), Some(t0 + Duration::from_secs(10)));
    }

    #[test]
    fn errors_back_off_then_flush_to_active() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.add("a".into(), pod(), t0);
        s.pop().unwrap();
        s.error("a", t0);
        assert_eq!(s.place("a"), Some(Place::Backoff));
        assert_eq!(s.flush(t0 + Duration::from_millis(999)), 0);
        assert_eq!(s.flush(t0 + Duration::from_secs(1)), 1);
        let again = s.pop().unwrap();
        assert_eq!(again.attempts, 1);
        s.error("a", t0 + Duration::from_secs(1));
        // The second failure backs off 2 s.
        assert_eq!(s.flush(t0 + Duration::from_secs(2)), 0);
        assert_eq!(s.flush(t0 + Duration::from_secs(3)), 1);
    }

    #[test]
    fn unschedulable_pods_wait_for_a_cluster_event() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.add("a".into(), pod(), t0);
        s.pop().unwrap();
        s.unschedulable("a", t0);
        assert!(matches!(s.place("a"), Some(Place::Unschedulable(_))));
        // Backoff alone does not release it.
        assert_eq!(s.flush(t0 + Duration::from_secs(5)), 0);
        // A node event after the backoff moves it straight to active.
        s.move_all_to_active_or_backoff(t0 + Duration::from_secs(5));
        assert_eq!(s.place("a"), Some(Place::Active));
        s.pop().unwrap();
        s.unschedulable("a", t0 + Duration::from_secs(6));
        // An event while still backing off (2 s after the second failure) moves it to backoff.
        s.move_all_to_active_or_backoff(t0 + Duration::from_secs(7));
        assert_eq!(s.place("a"), Some(Place::Backoff));
        assert_eq!(s.flush(t0 + Duration::from_secs(8)), 1);
    }

    #[test]
    fn unschedulable_pods_are_retried_after_a_minute_anyway() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.add("a".into(), pod(), t0);
        s.pop().unwrap();
        s.unschedulable("a", t0);
        assert_eq!(s.flush(t0 + Duration::from_secs(59)), 0);
        assert_eq!(s.flush(t0 + MAX_UNSCHEDULABLE), 1);
    }

    #[test]
    fn event_during_the_attempt_sends_the_pod_to_backoff_not_unschedulable() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.add("a".into(), pod(), t0);
        s.pop().unwrap();
        // A node arrives while the attempt is running: the pod may now fit.
        s.move_all_to_active_or_backoff(t0);
        s.unschedulable("a", t0);
        assert_eq!(s.place("a"), Some(Place::Backoff));
    }

    #[test]
    fn updating_an_unschedulable_pod_requeues_it() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.add("a".into(), pod(), t0);
        s.pop().unwrap();
        s.unschedulable("a", t0);
        s.add("a".into(), pod(), t0 + Duration::from_secs(3));
        assert_eq!(s.place("a"), Some(Place::Active));
    }

    #[test]
    fn deleting_removes_from_every_place() {
        let t0 = Instant::now();
        let mut s = State::default();
        s.add("a".into(), pod(), t0);
        s.delete("a");
        assert!(s.pop().is_none());
        s.add("b".into(), pod(), t0);
        s.pop().unwrap();
        s.delete("b");
        // The attempt that was running ends in failure: the deleted pod is not requeued.
        s.unschedulable("b", t0);
        assert!(s.is_empty());
    }

    #[tokio::test]
    async fn pop_waits_for_an_add_and_ends_on_close() {
        let q = Arc::new(SchedulingQueue::new());
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await.map(|p| p.attempts) }
        });
        tokio::task::yield_now().await;
        q.with(|s| s.add("a".into(), pod(), Instant::now()));
        assert_eq!(waiter.await.unwrap(), Some(0));
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.pop().await.is_none() }
        });
        tokio::task::yield_now().await;
        q.close();
        assert!(waiter.await.unwrap());
    }
}

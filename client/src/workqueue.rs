//! The rate-limited work queue controllers drain (client-go's `workqueue`).
//!
//! - An item is queued at most once however often it is added (deduplicated while waiting).
//! - An item is never handed to two workers at once: adds that arrive while it is being processed
//!   mark it dirty, and it is queued again when the worker calls [`WorkQueue::done`].
//! - [`WorkQueue::add_rate_limited`] delays an item by its [`RateLimiter`]: per-item exponential
//!   backoff (for items that keep failing) and an overall token bucket (so a storm of failures
//!   cannot hammer the API server), whichever is longer. [`WorkQueue::forget`] clears an item's
//!   failure count after success.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Decides how long an item waits before it is retried.
pub struct RateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
    bucket: Option<Mutex<Bucket>>,
}

struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Reserves one token, returning how long until it is available.
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

impl<T: Clone + Eq + Hash> RateLimiter<T> {
    /// Per-item backoff from `base` doubling to `max`, and no overall limit.
    pub fn exponential(base: Duration, max: Duration) -> RateLimiter<T> {
        RateLimiter {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
            bucket: None,
        }
    }

    /// Adds an overall token bucket of `qps` with `burst`.
    pub fn with_bucket(mut self, qps: f64, burst: u32) -> RateLimiter<T> {
        self.bucket = Some(Mutex::new(Bucket {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: Instant::now(),
        }));
        self
    }

    /// Kubernetes controllers' default: 5 ms doubling to 1000 s per item, and 10 qps with a burst
    /// of 100 overall.
    pub fn default_controller() -> RateLimiter<T> {
        RateLimiter::exponential(Duration::from_millis(5), Duration::from_secs(1000))
            .with_bucket(10.0, 100)
    }

    /// How long `item` should wait now; counts one more failure for it.
    pub fn when(&self, item: &T) -> Duration {
        let exponent = {
            let mut failures = self.failures.lock().expect("limiter lock");
            let n = failures.entry(item.clone()).or_insert(0);
            let e = *n;
            *n = n.saturating_add(1);
            e
        };
        let backoff = self
            .base
            .checked_mul(2u32.saturating_pow(exponent.min(40)))
            .unwrap_or(self.max)
            .min(self.max);
        let bucket = self
            .bucket
            .as_ref()
            .map(|b| b.lock().expect("bucket lock").reserve(Instant::now()))
            .unwrap_or_default();
        backoff.max(bucket)
    }

    /// Clears `item`'s failures.
    pub fn forget(&self, item: &T) {
        self.failures.lock().expect("limiter lock").remove(item);
    }

    /// How many times `item` has been rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.failures
            .lock()
            .expect("limiter lock")
            .get(item)
            .copied()
            .unwrap_or(0)
    }
}

struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashSet<T>,
    shutting_down: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Notify,
    limiter: RateLimiter<T>,
}

/// A deduplicating, rate-limited queue of work items (usually `namespace/name` keys).
pub struct WorkQueue<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> WorkQueue<T> {
    /// An empty queue using `limiter` for [`WorkQueue::add_rate_limited`].
    pub fn new(limiter: RateLimiter<T>) -> WorkQueue<T> {
        WorkQueue {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashSet::new(),
                    shutting_down: false,
                }),
                ready: Notify::new(),
                limiter,
            }),
        }
    }

    /// Queues `item` unless it is already waiting; if a worker holds it, it is queued again when
    /// that worker is done.
    pub fn add(&self, item: T) {
        let mut state = self.shared.state.lock().expect("queue lock");
        if state.shutting_down || state.dirty.contains(&item) {
            return;
        }
        state.dirty.insert(item.clone());
        if state.processing.contains(&item) {
            return;
        }
        state.queue.push_back(item);
        drop(state);
        self.shared.ready.notify_one();
    }

    /// Queues `item` after `delay`.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        if self.is_shutting_down() {
            return;
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(item);
        });
    }

    /// Queues `item` after the delay its rate limiter gives.
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.shared.limiter.when(&item);
        self.add_after(item, delay);
    }

    /// Clears `item`'s failure count (call after it was processed successfully).
    pub fn forget(&self, item: &T) {
        self.shared.limiter.forget(item);
    }

    /// How many times `item` was re-queued with [`WorkQueue::add_rate_limited`] since it was
    /// last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.shared.limiter.num_requeues(item)
    }

    /// The next item, once one is ready; `None` once the queue is shut down and drained.
    /// The caller must call [`WorkQueue::done`] with it.
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.shared.ready.notified();
            {
                let mut state = self.shared.state.lock().expect("queue lock");
                if let Some(item) = state.queue.pop_front() {
                    state.dirty.remove(&item);
                    state.processing.insert(item.clone());
                    let more = !state.queue.is_empty();
                    drop(state);
                    if more {
                        // Wake another worker for the rest.
                        self.shared.ready.notify_one();
                    }
                    return Some(item);
                }
                if state.shutting_down {
                    drop(state);
                    self.shared.ready.notify_waiters();
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks `item` processed; if it was added meanwhile it is queued again.
    pub fn done(&self, item: &T) {
        let mut state = self.shared.state.lock().expect("queue lock");
        state.processing.remove(item);
        if state.dirty.contains(item) {
            state.queue.push_back(item.clone());
            drop(state);
            self.shared.ready.notify_one();
        }
    }

    /// Stops accepting items; workers get `None` once the queue is empty.
    pub fn shutdown(&self) {
        self.shared.state.lock().expect("queue lock").shutting_down = true;
        self.shared.ready.notify_waiters();
        self.shared.ready.notify_one();
    }

    /// Whether [`WorkQueue::shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.state.lock().expect("queue lock").shutting_down
    }

    /// Items waiting (not counting those being processed).
    pub fn len(&self) -> usize {
        self.shared.state.lock().expect("queue lock").queue.len()
    }

    /// Whether no item is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn queue() -> WorkQueue<String> {
        WorkQueue::new(RateLimiter::exponential(
            Duration::from_millis(1),
            Duration::from_millis(50),
        ))
    }

    #[tokio::test]
    async fn deduplicates_waiting_items() {
        let q = queue();
        q.add("a".to_string());
        q.add("a".to_string());
        q.add("b".to_string());
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await.as_deref(), Some("a"));
        assert_eq!(q.get().await.as_deref(), Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn an_item_added_while_processing_waits_for_done() {
        let q = queue();
        q.add("a".to_string());
        let item = q.get().await.unwrap();
        q.add("a".to_string());
        assert!(
            q.is_empty(),
            "re-added item must not be handed out while processing"
        );
        q.done(&item);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await.as_deref(), Some("a"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn never_two_workers_on_one_item() {
        let q = WorkQueue::<u32>::new(RateLimiter::exponential(
            Duration::from_millis(1),
            Duration::from_millis(10),
        ));
        let busy: Arc<Mutex<HashSet<u32>>> = Arc::default();
        let processed = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..8 {
            let (q, busy, processed) = (q.clone(), busy.clone(), processed.clone());
            workers.push(tokio::spawn(async move {
                while let Some(item) = q.get().await {
                    assert!(busy.lock().unwrap().insert(item), "item {item} given twice");
                    tokio::task::yield_now().await;
                    busy.lock().unwrap().remove(&item);
                    processed.fetch_add(1, Ordering::Relaxed);
                    q.done(&item);
                }
            }));
        }
        for round in 0..200u32 {
            for item in 0..10 {
                q.add(item);
            }
            if round % 10 == 0 {
                tokio::task::yield_now().await;
            }
        }
        // Let the workers drain, then stop them.
        while !q.is_empty() || processed.load(Ordering::Relaxed) < 10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        q.shutdown();
        for w in workers {
            w.await.unwrap();
        }
        assert!(processed.load(Ordering::Relaxed) >= 10);
    }

    #[tokio::test]
    async fn shutdown_releases_waiting_workers() {
        let q = queue();
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.shutdown();
        assert_eq!(waiter.await.unwrap(), None);
        q.add("late".into());
        assert!(q.is_empty(), "adds after shutdown are dropped");
    }

    #[test]
    fn per_item_backoff_doubles_to_the_cap_and_forget_resets() {
        let l = RateLimiter::<&str>::exponential(Duration::from_millis(5), Duration::from_secs(1));
        let delays: Vec<_> = (0..10).map(|_| l.when(&"x")).collect();
        assert_eq!(delays[0], Duration::from_millis(5));
        assert_eq!(delays[1], Duration::from_millis(10));
        assert_eq!(delays[4], Duration::from_millis(80));
        assert_eq!(delays[9], Duration::from_secs(1));
        assert_eq!(l.num_requeues(&"x"), 10);
        assert_eq!(
            l.when(&"y"),
            Duration::from_millis(5),
            "items are independent"
        );
        l.forget(&"x");
        assert_eq!(l.num_requeues(&"x"), 0);
        assert_eq!(l.when(&"x"), Duration::from_millis(5));
    }

    #[test]
    fn the_bucket_limits_overall_rate_after_the_burst() {
        let l =
            RateLimiter::<u32>::exponential(Duration::ZERO, Duration::ZERO).with_bucket(10.0, 5);
        let delays: Vec<_> = (0..8).map(|i| l.when(&i)).collect();
        assert!(delays[..5].iter().all(|d| d.is_zero()), "{delays:?}");
        // Three tokens over the burst at 10 qps: about 100, 200, 300 ms (less if the thread was
        // descheduled between calls and tokens accrued meanwhile).
        assert!(delays[5] <= Duration::from_millis(100) && delays[5] > Duration::ZERO);
        assert!(delays[5] < delays[6] && delays[6] < delays[7], "{delays:?}");
        assert!(delays[7] <= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn rate_limited_adds_arrive_later() {
        let q = queue();
        q.add_rate_limited("a".to_string());
        assert!(q.is_empty());
        let got = tokio::time::timeout(Duration::from_secs(5), q.get()).await;
        assert_eq!(got.unwrap().as_deref(), Some("a"));
    }
}

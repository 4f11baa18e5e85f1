//! The runtime without I/O: events to keys, the queue's deduplication, retries with backoff,
//! giving up, requeues, resync and gated starts, all on a paused clock with fake reconcilers.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use skiff_client::RateLimiter;
use tokio::time::Instant;

use super::*;
use crate::pods;
use crate::pods::testing::pod;

fn child(name: &str, owner: &str) -> Arc<Pod> {
    let mut p = pod(name, &[], 0);
    p.metadata.resource_version = Some("1".into());
    p.metadata.owner_references = Some(vec![pods::controller_ref(
        "apps/v1",
        "ReplicaSet",
        &ObjectMeta {
            name: Some(owner.into()),
            uid: Some(format!("uid-{owner}")),
            ..ObjectMeta::default()
        },
    )]);
    Arc::new(p)
}

fn queue() -> WorkQueue<String> {
    WorkQueue::new(RateLimiter::default_controller())
}

/// Fails its first `failures` reconciles of each key, then asks for `then`; records when it was
/// called.
struct Fake {
    failures: u32,
    then: Action,
    calls: Mutex<Vec<(String, Instant)>>,
}

impl Fake {
    fn new(failures: u32, then: Action) -> Arc<Fake> {
        Arc::new(Fake {
            failures,
            then,
            calls: Mutex::new(Vec::new()),
        })
    }
    fn calls(&self) -> Vec<(String, Instant)> {
        self.calls.lock().unwrap().clone()
    }
}

impl Reconcile for Fake {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((key.to_string(), Instant::now()));
            calls.iter().filter(|(k, _)| k == key).count() as u32
        };
        if n <= self.failures {
            Err(crate::Error::UnknownController {
                name: format!("failure {n}"),
                known: String::new(),
            })
        } else {
            Ok(self.then)
        }
    }
}

/// Starts `fake` on `q` with one worker; returns how to stop it.
fn start(q: &WorkQueue<String>, fake: &Arc<Fake>) -> (TaskTracker, CancellationToken) {
    let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
    Controller::with_queue("test", 1, q.clone())
        .run(fake.clone())
        .start(&tracker, &token);
    (tracker, token)
}

async fn stop(q: &WorkQueue<String>, tracker: TaskTracker, token: CancellationToken) {
    token.cancel();
    q.shutdown();
    tracker.close();
    tracker.wait().await;
}

/// Lets the paused clock run for `d`.
async fn run_for(d: Duration) {
    tokio::time::sleep(d).await;
}

#[test]
fn the_worker_forgets_successes_retries_failures_and_gives_up_after_max_retries() {
    let ok: std::result::Result<Action, ()> = Ok(Action::AwaitChange);
    assert_eq!(next(&ok, 3), Next::Forget(None));
    let later: std::result::Result<Action, ()> = Ok(Action::Requeue(Duration::from_secs(2)));
    assert_eq!(next(&later, 0), Next::Forget(Some(Duration::from_secs(2))));
    let failed: std::result::Result<Action, ()> = Err(());
    assert_eq!(next(&failed, 0), Next::Retry);
    assert_eq!(next(&failed, MAX_RETRIES - 1), Next::Retry);
    assert_eq!(next(&failed, MAX_RETRIES), Next::GiveUp);
    assert_eq!(
        Action::from(Some(Duration::from_secs(1))),
        Action::Requeue(Duration::from_secs(1))
    );
    assert_eq!(Action::from(None), Action::AwaitChange);
}

#[tokio::test]
async fn events_of_one_owner_queue_its_key_once() {
    let q = queue();
    let handler = Enqueue::new(q.clone(), |e: Event<'_, Pod>| {
        owners::owner_keys(&e, "ReplicaSet")
    });
    for name in ["a", "b", "c"] {
        handler.on_add(&child(name, "web"));
    }
    handler.on_delete(&child("d", "web"));
    assert_eq!(q.len(), 1, "one owner, one waiting key");
    handler.on_add(&child("e", "api"));
    handler.on_add(&Arc::new(pod("orphan", &[], 0)));
    assert_eq!(q.len(), 2, "another owner is another key; orphans none");
    assert_eq!(q.get().await.as_deref(), Some("ns/web"));
    assert_eq!(q.get().await.as_deref(), Some("ns/api"));
}

#[tokio::test]
async fn owned_events_book_expectations_before_the_key_is_queued() {
    let q = queue();
    let x = Arc::new(Expectations::new());
    x.expect("ns/web", 1, []);
    let (q2, x2) = (q.clone(), x.clone());
    // What `owns` registers, with a check that the booking came first.
    let handler = Enqueue::new(q.clone(), move |e: Event<'_, Pod>| {
        x2.observe(&e, "ReplicaSet");
        assert!(q2.is_empty(), "nothing queued before the booking");
        owners::owner_keys(&e, "ReplicaSet")
    });
    handler.on_add(&child("a", "web"));
    assert!(x.satisfied("ns/web"));
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failing_key_is_retried_with_doubling_backoff_until_it_succeeds() {
    let q = queue();
    let fake = Fake::new(4, Action::AwaitChange);
    let (tracker, token) = start(&q, &fake);
    q.add("ns/web".into());
    run_for(Duration::from_secs(1)).await;
    let calls = fake.calls();
    assert_eq!(calls.len(), 5, "four failures, then the success: {calls:?}");
    let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1].1 - w[0].1).collect();
    // client-go's controller limiter: 5 ms doubling per failure of the key.
    for (gap, want) in gaps.iter().zip([5u64, 10, 20, 40]) {
        assert!(
            *gap >= Duration::from_millis(want) && *gap < Duration::from_millis(want + 5),
            "gaps {gaps:?}"
        );
    }
    assert_eq!(q.num_requeues(&"ns/web".to_string()), 0, "success forgets");
    // A new event starts the backoff afresh.
    q.add("ns/web".into());
    run_for(Duration::from_millis(1)).await;
    assert_eq!(fake.calls().len(), 6);
    stop(&q, tracker, token).await;
}

#[tokio::test(start_paused = true)]
async fn a_key_that_keeps_failing_waits_for_its_next_event_after_max_retries() {
    let q = WorkQueue::new(RateLimiter::exponential(
        Duration::from_millis(1),
        Duration::from_millis(1),
    ));
    let fake = Fake::new(u32::MAX, Action::AwaitChange);
    let (tracker, token) = start(&q, &fake);
    q.add("ns/broken".into());
    run_for(Duration::from_secs(10)).await;
    assert_eq!(
        fake.calls().len() as u32,
        MAX_RETRIES + 1,
        "the first try and MAX_RETRIES retries"
    );
    assert_eq!(q.num_requeues(&"ns/broken".to_string()), 0);
    q.add("ns/broken".into());
    run_for(Duration::from_millis(100)).await;
    assert!(
        fake.calls().len() as u32 > MAX_RETRIES + 1,
        "an event tries again"
    );
    stop(&q, tracker, token).await;
}

#[tokio::test(start_paused = true)]
async fn a_requeue_comes_back_after_its_delay() {
    let q = queue();
    let fake = Fake::new(0, Action::Requeue(Duration::from_secs(30)));
    let (tracker, token) = start(&q, &fake);
    let t0 = Instant::now();
    q.add("ns/web".into());
    run_for(Duration::from_secs(65)).await;
    let calls = fake.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls[1].1 - t0 >= Duration::from_secs(30));
    assert!(calls[2].1 - calls[1].1 >= Duration::from_secs(30));
    stop(&q, tracker, token).await;
}

#[tokio::test(start_paused = true)]
async fn a_resync_queues_every_key_again_each_period() {
    let q = queue();
    let token = CancellationToken::new();
    let listed = Arc::new(AtomicU32::new(0));
    let l = listed.clone();
    let keys: Keys = Box::new(move || {
        l.fetch_add(1, Ordering::Relaxed);
        vec!["ns/a".into(), "ns/b".into()]
    });
    let task = tokio::spawn({
        let (q, token) = (q.clone(), token.clone());
        async move { resync_loop(&q, Duration::from_secs(10), keys, token).await }
    });
    run_for(Duration::from_secs(5)).await;
    assert!(q.is_empty(), "nothing before the first period");
    run_for(Duration::from_secs(10)).await;
    assert_eq!(q.len(), 2);
    run_for(Duration::from_secs(10)).await;
    assert_eq!(q.len(), 2, "keys still waiting are not queued twice");
    assert_eq!(listed.load(Ordering::Relaxed), 2);
    token.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn workers_wait_for_ready_and_never_start_when_it_says_shutdown() {
    let q = queue();
    let fake = Fake::new(0, Action::AwaitChange);
    let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
    let started =
        Controller::with_queue("gated", 2, q.clone()).run_after(fake.clone(), |_, _| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            true
        });
    assert_eq!(started.name(), "gated");
    started.start(&tracker, &token);
    q.add("x".into());
    run_for(Duration::from_secs(2)).await;
    assert!(fake.calls().is_empty(), "not ready yet");
    run_for(Duration::from_secs(2)).await;
    assert_eq!(fake.calls().len(), 1);
    stop(&q, tracker, token).await;

    let q = queue();
    let fake = Fake::new(0, Action::AwaitChange);
    let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
    Controller::with_queue("gated", 2, q.clone())
        .run_after(fake.clone(), |_, shutdown| async move {
            shutdown.cancelled().await;
            false
        })
        .start(&tracker, &token);
    q.add("x".into());
    token.cancel();
    run_for(Duration::from_secs(1)).await;
    assert!(fake.calls().is_empty());
    stop(&q, tracker, token).await;
}

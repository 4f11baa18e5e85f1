//! The controllers' I/O half: each one registers event handlers on shared informers that turn
//! events into keys on its rate-limited work queue, and N workers sync one key at a time by reading
//! the caches, calling the pure logic, and writing through the API.

use std::future::Future;
use std::time::Duration;

use skiff_client::{Client, SharedInformerFactory, WorkQueue};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{Options, Result};

mod daemonset;
mod deployment;
mod endpoints;
mod gc;
mod job;
mod namespace;
mod nodes;
mod replicaset;
mod serviceaccount;

/// A key is retried with backoff this many times before it waits for its next event.
const MAX_RETRIES: u32 = 15;

pub(crate) use crate::runtime::{conflict, discover, not_found};

/// A new work queue with client-go's controller rate limiter.
pub(crate) fn queue() -> WorkQueue<String> {
    WorkQueue::new(skiff_client::RateLimiter::default_controller())
}

/// Starts `workers` tasks draining `queue` with `sync`; a sync may ask to run again after a
/// delay, and a failed one is retried with backoff.
pub(crate) fn spawn_workers<F, Fut>(
    tracker: &TaskTracker,
    name: &'static str,
    queue: &WorkQueue<String>,
    workers: usize,
    sync: F,
) where
    F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Duration>>> + Send + 'static,
{
    for _ in 0..workers.max(1) {
        let q = queue.clone();
        let sync = sync.clone();
        tracker.spawn(async move {
            while let Some(key) = q.get().await {
                match sync(key.clone()).await {
                    Ok(after) => {
                        q.forget(&key);
                        if let Some(d) = after {
                            q.add_after(key.clone(), d);
                        }
                    }
                    Err(e) if q.num_requeues(&key) < MAX_RETRIES => {
                        tracing::debug!(controller = name, %key, error = %e, "sync failed, retrying");
                        q.add_rate_limited(key.clone());
                    }
                    Err(e) => {
                        tracing::warn!(controller = name, %key, error = %e, "sync failed, giving up until the next event");
                        q.forget(&key);
                    }
                }
                q.done(&key);
            }
        });
    }
}

/// A started controller: its queue (shut down on exit) and how to start its workers once the
/// caches are synced.
pub(crate) struct Started {
    pub(crate) queue: WorkQueue<String>,
    pub(crate) start: Box<dyn FnOnce(&TaskTracker) + Send>,
}

/// Runs every enabled controller on one shared informer factory until `shutdown`.
pub async fn run(client: Client, options: Options, shutdown: CancellationToken) -> Result<()> {
    let factory = SharedInformerFactory::new(client.clone());
    let workers = options.workers.max(1);
    let mut started: Vec<Started> = Vec::new();
    if options.enabled("replicaset")? {
        started.push(replicaset::start(&factory, workers));
    }
    if options.enabled("daemonset")? {
        started.push(daemonset::start(&factory, workers));
    }
    if options.enabled("deployment")? {
        started.push(deployment::start(&factory, workers));
    }
    if options.enabled("job")? {
        started.push(job::start(&factory, workers));
    }
    let endpoints = options.enabled("endpoints")?;
    let slices = options.enabled("endpointslice")?;
    if endpoints || slices {
        started.push(endpoints::start(&factory, workers, endpoints, slices));
    }
    if options.enabled("namespace")? {
        started.push(namespace::start(&factory, workers));
    }
    if options.enabled("garbagecollector")? {
        started.push(gc::start(&factory, workers.max(4), shutdown.clone()));
    }
    if options.enabled("serviceaccount")? {
        started.push(serviceaccount::start(&factory, workers));
    }
    if options.enabled("nodeipam")? {
        started.push(nodes::start_ipam(&factory, &options)?);
    }
    if options.enabled("nodelifecycle")? {
        started.push(nodes::start_lifecycle(
            &factory,
            &options,
            workers,
            shutdown.clone(),
        ));
    }

    factory.start(shutdown.clone());
    tokio::select! {
        _ = factory.wait_for_sync() => {}
        _ = shutdown.cancelled() => {}
    }
    let tracker = TaskTracker::new();
    let mut queues = Vec::new();
    if !shutdown.is_cancelled() {
        tracing::info!(
            controllers = started.len(),
            "caches synced; controllers running"
        );
        for s in started {
            (s.start)(&tracker);
            queues.push(s.queue);
        }
    }
    shutdown.cancelled().await;
    for q in &queues {
        q.shutdown();
    }
    tracker.close();
    tracker.wait().await;
    Ok(())
}

//! The CronJob controller's shell: CronJob and Job events become CronJob keys; a reconcile reads
//! the CronJob fresh (its status says which runs happened), plans with [`super::plan`] at the
//! controller's clock, deletes what the plan deletes, starts the run, writes the status and
//! records the events, then comes back at the next run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{DeleteParams, PostParams};
use skiff_client::events::{self, EventType, Recorder};
use skiff_client::{Api, Informer};

use super as logic;
use crate::manager::Context;
use crate::pods;
use crate::runtime::{Action, Controller, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};

/// The kind this controller owns Jobs for.
const KIND: &str = "CronJob";

/// The index of Jobs by the uid of their controller.
const BY_CONTROLLER: &str = "controller-uid";

/// The controller's time: real time, or (for tests) time running `rate` times faster from the
/// moment it was made.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    rate: f64,
    real_start: Instant,
    start: Timestamp,
}

impl Clock {
    /// A clock running `rate` times faster than real time (1 is real time).
    pub fn new(rate: f64) -> Clock {
        Clock {
            rate: if rate.is_finite() && rate > 0.0 {
                rate
            } else {
                1.0
            },
            real_start: Instant::now(),
            start: Timestamp::now(),
        }
    }

    /// The time now.
    pub fn now(&self) -> Timestamp {
        if self.rate == 1.0 {
            return Timestamp::now();
        }
        let elapsed = self.real_start.elapsed().mul_f64(self.rate);
        self.start
            .checked_add(SignedDuration::try_from(elapsed).unwrap_or_default())
            .unwrap_or(self.start)
    }

    /// How long to really wait for `wait` of this clock's time to pass.
    pub fn real(&self, wait: Duration) -> Duration {
        wait.div_f64(self.rate)
    }
}

struct CronJobs {
    jobs: Informer<Job>,
    client: skiff_client::Client,
    recorder: Recorder,
    clock: Clock,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let cron_jobs = ctx.factory.informer::<CronJob>();
    let jobs = ctx.factory.informer::<Job>();
    jobs.add_index(BY_CONTROLLER, |job: &Job| {
        pods::controller_of(&job.metadata)
            .map(|r| r.uid.clone())
            .into_iter()
            .collect()
    });
    let controller = Controller::new("cronjob", ctx.workers)
        .primary(&cron_jobs)
        .owns(&jobs, KIND, None);
    let client = ctx.factory.client().clone();
    Ok(controller.run(Arc::new(CronJobs {
        jobs,
        recorder: Recorder::new(client.clone(), "cronjob-controller"),
        client,
        clock: Clock::new(ctx.options.cronjob_clock_rate),
    })))
}

impl Reconcile for CronJobs {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let cron_jobs: Api<CronJob> = Api::namespaced(self.client.clone(), ns);
        let job_api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let Some(cron_job) = cron_jobs
            .get_opt(name)
            .await
            .map_err(Error::api(format!("reading CronJob {key}")))?
        else {
            return Ok(Action::AwaitChange);
        };
        let uid = cron_job.metadata.uid.clone().unwrap_or_default();
        let owned: Vec<Arc<Job>> = self.jobs.cache().by_index(BY_CONTROLLER, &uid);
        let refs: Vec<&Job> = owned.iter().map(Arc::as_ref).collect();
        let mut plan = logic::plan(&cron_job, &refs, self.clock.now());

        let background = DeleteParams::background();
        for job in plan.prune.iter().chain(&plan.replace) {
            match job_api.delete(job, &background).await {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(Error::api(format!("deleting Job {ns}/{job} of {key}"))(e)),
            }
        }
        let mut notes = std::mem::take(&mut plan.notes);
        if let Some((job, _)) = &plan.start {
            let job_name = job.metadata.name.clone().unwrap_or_default();
            match job_api.create(&PostParams::default(), job).await {
                Ok(created) => {
                    plan.status
                        .active
                        .get_or_insert_with(Vec::new)
                        .push(logic::active_ref(&created));
                    notes.push(logic::Note {
                        type_: EventType::Normal,
                        reason: "SuccessfulCreate",
                        message: format!("Created job {job_name}"),
                    });
                }
                // Made by an earlier sync whose status write was lost: the next sync sees it.
                Err(e) if conflict(&e) => {}
                Err(e) => {
                    self.record(
                        &cron_job,
                        EventType::Warning,
                        "FailedCreate",
                        &format!("Error creating job: {e}"),
                    )
                    .await;
                    return Err(Error::api(format!("creating Job {ns}/{job_name} of {key}"))(e));
                }
            }
        }
        if cron_job.status.as_ref() != Some(&plan.status) {
            let mut updated = cron_job.clone();
            updated.status = Some(plan.status.clone());
            match cron_jobs
                .replace_status(name, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
                Err(e) => {
                    return Err(Error::api(format!("updating status of CronJob {key}"))(e));
                }
            }
        }
        for note in &notes {
            self.record(&cron_job, note.type_, note.reason, &note.message)
                .await;
        }
        Ok(plan.requeue.map(|wait| self.clock.real(wait)).into())
    }
}

impl CronJobs {
    async fn record(&self, cron_job: &CronJob, type_: EventType, reason: &str, message: &str) {
        self.recorder
            .record(&events::reference(cron_job), type_, reason, message)
            .await;
    }
}

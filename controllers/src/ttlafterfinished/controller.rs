//! The TTL-after-finished controller's shell: Job events become Job keys; a reconcile decides
//! from the cached Job, and before deleting reads it fresh (its TTL may have changed since) and
//! deletes it with the read's uid and resourceVersion as preconditions, so a changed or
//! recreated Job is never taken by mistake.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use skiff_client::{Api, Informer};

use super::{Decision, decide};
use crate::manager::Context;
use crate::runtime::{Action, Controller, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};

struct Expiry {
    jobs: Informer<Job>,
    client: skiff_client::Client,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let jobs = ctx.factory.informer::<Job>();
    let controller = Controller::new("ttl-after-finished", ctx.workers).primary(&jobs);
    Ok(controller.run(Arc::new(Expiry {
        jobs,
        client: ctx.factory.client().clone(),
    })))
}

impl Reconcile for Expiry {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(cached) = self.jobs.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        match decide(&cached, Timestamp::now()) {
            Decision::Keep => return Ok(Action::AwaitChange),
            Decision::Wait(wait) => return Ok(Action::Requeue(wait)),
            Decision::Delete => {}
        }
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let Some(fresh) = api
            .get_opt(name)
            .await
            .map_err(Error::api(format!("reading Job {key}")))?
        else {
            return Ok(Action::AwaitChange);
        };
        match decide(&fresh, Timestamp::now()) {
            Decision::Keep => return Ok(Action::AwaitChange),
            Decision::Wait(wait) => return Ok(Action::Requeue(wait)),
            Decision::Delete => {}
        }
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: fresh.metadata.uid.clone(),
                resource_version: fresh.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if not_found(&e) || conflict(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api(format!("deleting expired Job {key}"))(e)),
        }
    }
}

//! The controller manager: the one table of controllers, by the names `--controllers` uses, and
//! [`run`], which registers the enabled ones on one shared informer factory, waits for the
//! caches, and starts their workers until shutdown.

use skiff_client::{Client, SharedInformerFactory};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::runtime::Started;
use crate::{Options, Result};
use crate::{
    certificates, cronjob, daemonset, deployment, disruption, endpoints, gc, job, localpath,
    namespace, nodeipam, nodelifecycle, persistentvolume, podautoscaler, protection, replicaset,
    resourcequota, rootcacert, serviceaccount, serviceaccounttoken, statefulset, ttlafterfinished,
};

/// What a controller's shell is registered with.
pub(crate) struct Context<'a> {
    /// The informers every controller of the process shares.
    pub(crate) factory: &'a SharedInformerFactory,
    /// The manager's options (node monitor periods, the cluster CIDR, ...).
    pub(crate) options: &'a Options,
    /// Workers per controller (`--concurrent-syncs`, at least one).
    pub(crate) workers: usize,
}

/// One controller the manager can run.
pub struct Entry {
    /// Its name, as `--controllers` and the logs use it.
    pub name: &'static str,
    /// Registers its handlers on the shared informers.
    start: fn(&Context<'_>) -> Result<Started>,
}

/// Every controller, in the order they are registered and started.
pub const CONTROLLERS: &[Entry] = &[
    Entry {
        name: "replicaset",
        start: replicaset::controller::start,
    },
    Entry {
        name: "replicationcontroller",
        start: replicaset::controller::start_replication,
    },
    Entry {
        name: "daemonset",
        start: daemonset::controller::start,
    },
    Entry {
        name: "deployment",
        start: deployment::controller::start,
    },
    Entry {
        name: "statefulset",
        start: statefulset::controller::start,
    },
    Entry {
        name: "job",
        start: job::controller::start,
    },
    Entry {
        name: "cronjob",
        start: cronjob::controller::start,
    },
    Entry {
        name: "ttl-after-finished",
        start: ttlafterfinished::controller::start,
    },
    Entry {
        name: "disruption",
        start: disruption::controller::start,
    },
    Entry {
        name: "horizontal-pod-autoscaler",
        start: podautoscaler::controller::start,
    },
    Entry {
        name: "resourcequota",
        start: resourcequota::controller::start,
    },
    Entry {
        name: "endpoints",
        start: endpoints::controller::start_endpoints,
    },
    Entry {
        name: "endpointslice",
        start: endpoints::controller::start_slices,
    },
    Entry {
        name: "namespace",
        start: namespace::controller::start,
    },
    Entry {
        name: "garbagecollector",
        start: gc::controller::start,
    },
    Entry {
        name: "serviceaccount",
        start: serviceaccount::controller::start,
    },
    Entry {
        name: "serviceaccount-token",
        start: serviceaccounttoken::controller::start,
    },
    Entry {
        name: "root-ca-cert-publisher",
        start: rootcacert::controller::start,
    },
    Entry {
        name: "csrapproving",
        start: certificates::controller::start_approving,
    },
    Entry {
        name: "csrsigning",
        start: certificates::controller::start_signing,
    },
    Entry {
        name: "nodeipam",
        start: nodeipam::controller::start,
    },
    Entry {
        name: "nodelifecycle",
        start: nodelifecycle::controller::start,
    },
    Entry {
        name: "persistentvolume-binder",
        start: persistentvolume::controller::start,
    },
    Entry {
        name: "pvc-protection",
        start: protection::controller::start_claims,
    },
    Entry {
        name: "pv-protection",
        start: protection::controller::start_volumes,
    },
    Entry {
        name: LOCAL_PATH_PROVISIONER,
        start: localpath::controller::start,
    },
];

/// The name of the built-in local-path provisioner in [`CONTROLLERS`] (`skiff server
/// --disable local-storage` leaves it out).
pub const LOCAL_PATH_PROVISIONER: &str = "local-path-provisioner";

/// The names of [`CONTROLLERS`], comma-separated.
pub fn names() -> String {
    CONTROLLERS
        .iter()
        .map(|c| c.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs every enabled controller on one shared informer factory until `shutdown`.
pub async fn run(client: Client, options: Options, shutdown: CancellationToken) -> Result<()> {
    let factory = SharedInformerFactory::new(client);
    let ctx = Context {
        factory: &factory,
        options: &options,
        workers: options.workers.max(1),
    };
    let mut started: Vec<Started> = Vec::new();
    for entry in CONTROLLERS {
        if options.enabled(entry.name)? {
            started.push((entry.start)(&ctx)?);
        }
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
            tracing::debug!(controller = s.name(), "starting");
            queues.push(s.start(&tracker, &shutdown));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_in_the_table_once_and_selectable() {
        let mut seen = std::collections::HashSet::new();
        for c in CONTROLLERS {
            assert!(seen.insert(c.name), "{} listed twice", c.name);
            assert!(Options::default().enabled(c.name).unwrap());
        }
        assert!(names().starts_with("replicaset, replicationcontroller, daemonset"));
    }
}

//! The controllers: endpoints, ReplicaSet, Deployment, DaemonSet, Job, node lifecycle, namespaces and
//! garbage collection, each comparing desired with observed state through the API.
//!
//! A crate of its own (rather than one per controller) because the controllers share informers and
//! a work queue and run together as `skiff controllers`, as kube-controller-manager does.
//!
//! # Layout
//! A controller is one folder: its `mod.rs` holds the pure decisions (state in, actions out,
//! unit-tested without I/O), its `controller.rs` the thin shell that says what it watches and
//! carries a reconcile out through the API. Every shell is built on one [`runtime`], and the
//! [`manager`] holds the one table of controllers by name.
//! - [`runtime`]: watches, owners and expectations, the rate-limited queue, workers, resync.
//! - [`manager`]: the table `--controllers` selects from, and [`run`].
//! - [`pods`]: readiness, availability, controller references, claims and the deletion ranking.
//! - [`endpoints`]: Endpoints and EndpointSlices of Services with a selector.
//! - [`replicaset`]: the create/delete diff and the ReplicaSet status, for ReplicaSets and
//!   ReplicationControllers.
//! - [`daemonset`]: one pod per eligible node, rolling update by template hash.
//! - [`statefulset`]: stable pod names, ordered or parallel, partitioned rolling updates.
//! - [`history`]: ControllerRevisions, the template history of StatefulSets and DaemonSets.
//! - [`job`]: a Job's pods (indexes, parallelism), counting through tracking finalizers,
//!   backoff limit, deadline, suspend, pod failure policy and the terminal conditions.
//! - [`cronjob`]: Jobs on a cron schedule: missed runs, concurrency policy, history limits.
//! - [`resourcequota`]: ResourceQuota status (`hard` mirrored, `used` recounted), giving back
//!   what finished and deleted objects used.
//! - [`disruption`]: PodDisruptionBudget status (healthy, desired and expected pods, the
//!   disruptions allowed), which `pods/eviction` spends.
//! - [`podautoscaler`]: HorizontalPodAutoscalers: the target's replicas from the resource
//!   metrics API, held to stabilization windows, scaling policies and bounds.
//! - [`ttlafterfinished`]: finished Jobs deleted `ttlSecondsAfterFinished` after they finished.
//! - [`deployment`]: one rollout step (RollingUpdate, Recreate, revisions, cleanup, conditions).
//! - [`namespace`]: what a terminating namespace must lose before it is finalized.
//! - [`gc`]: owner references with background, foreground and orphan propagation.
//! - [`serviceaccount`]: the `default` ServiceAccount of every namespace.
//! - [`serviceaccounttoken`]: legacy tokens in `kubernetes.io/service-account-token` Secrets,
//!   and those Secrets deleted with their account.
//! - [`rootcacert`]: the `kube-root-ca.crt` ConfigMap (the cluster CA) in every namespace.
//! - [`nodelifecycle`]: silent nodes, NoExecute taints and taint-based eviction.
//! - [`nodeipam`]: pod ranges for nodes.
//! - [`persistentvolume`]: the PV binder (claims to volumes, release and reclaim).
//! - [`localpath`]: the built-in local-path provisioner (`skiff.io/local-path`).
//! - [`protection`]: the pvc-protection and pv-protection finalizers.

pub mod certificates;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod gc;
pub mod history;
pub mod job;
pub mod localpath;
pub mod manager;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod podautoscaler;
pub mod pods;
pub mod protection;
pub mod replicaset;
pub mod resourcequota;
pub mod rootcacert;
pub mod runtime;
pub mod serviceaccount;
pub mod serviceaccounttoken;
pub mod statefulset;
pub mod ttlafterfinished;

mod options;

pub use manager::run;
pub use options::Options;

/// What can go wrong running the controllers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed (the controller retries the key with backoff).
    #[error("{action}: {source}")]
    Api {
        /// What was being done (`creating pod in ns/web`).
        action: String,
        /// The API or transport error.
        #[source]
        source: kube::Error,
    },
    /// Discovering the served resources failed.
    #[error("discovering served resources: {0}")]
    Discovery(#[source] kube::Error),
    /// `--controllers` names a controller that does not exist.
    #[error("unknown controller {name:?}; known: {known}")]
    UnknownController {
        /// The name given.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// A setting could not be used (the root CA file cannot be read).
    #[error("{0}")]
    Config(String),
    /// The pod range could not be handed out.
    #[error(transparent)]
    Ipam(#[from] nodeipam::Error),
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Api`] maker for `map_err`.
    pub(crate) fn api(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let action = action.into();
        move |source| Error::Api { action, source }
    }
}

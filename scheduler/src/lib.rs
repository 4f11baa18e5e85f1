//! The scheduler: a queue of unscheduled pods, filter predicates, scoring priorities, an assume
//! cache and rate-limited binding through the `pods/binding` subresource.
//!
//! # Layout
//! - [`resources`]: quantities to integers, a pod's effective and non-zero requests.
//! - [`nodeinfo`]: [`nodeinfo::PodInfo`] (a pod digested once) and [`nodeinfo::NodeInfo`] (a
//!   node with incremental aggregates of its pods).
//! - [`predicates`]: the filter plugins and the reasons they give.
//! - [`priorities`]: the scoring plugins with the original formulas.
//! - [`algorithm`]: the plugin registry, algorithm providers, policies, and one decision.
//! - [`preemption`]: when no node fits, which lower-priority pods to evict and where.
//! - [`cache`]: nodes with bound and assumed pods, spreading groups.
//! - [`queue`]: the scheduling queue (active, backoff, unschedulable).
//! - [`binder`]: the token bucket, and the writes (binding, unschedulable condition and event).
//! - [`scheduler`]: informer events in, `scheduleOne` in a loop, concurrent binds out.
//! - [`run`]: [`Options`] (the flags) and [`run`] (informers wired to the scheduler).
//! - [`bench`]: `skiff bench scheduler` (hollow nodes, pods bound per second end to end).

pub mod algorithm;
pub mod bench;
pub mod binder;
pub mod cache;
pub mod nodeinfo;
pub mod predicates;
pub mod preemption;
pub mod priorities;
pub mod queue;
pub mod resources;
pub mod run;
pub mod scheduler;
pub mod volumes;

pub use run::{Options, run};

/// The scheduler name pods get when they name none, and the one this scheduler answers to by
/// default.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// What can go wrong in the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No algorithm provider of that name is registered.
    #[error("unknown algorithm provider {0:?}")]
    UnknownProvider(String),
    /// No predicate of that name is registered.
    #[error("unknown predicate {0:?}")]
    UnknownPredicate(String),
    /// No priority of that name is registered (or the provider does not use it).
    #[error("unknown priority {0:?}")]
    UnknownPriority(String),
    /// A plugin that needs an argument in the policy got none.
    #[error("{0} needs an argument in the policy")]
    MissingArgument(String),
    /// A pod already in the cache cannot be assumed.
    #[error("pod {0} is already in the scheduler cache")]
    AlreadyInCache(String),
    /// The policy file cannot be read or parsed.
    #[error("policy file {path}: {source}")]
    PolicyFile {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A priority weight that is not positive.
    #[error("priority {name} has weight {weight}; weights must be positive")]
    BadWeight {
        /// The priority.
        name: String,
        /// The weight given.
        weight: i64,
    },
}

/// The scheduler's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

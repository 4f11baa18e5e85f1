//! Leader election over a `coordination.k8s.io/v1` Lease, with the semantics of client-go's
//! `leaderelection` package (what kube-scheduler and kube-controller-manager run), so that of
//! several replicas of a singleton (the scheduler, the controller manager) exactly one acts.
//!
//! # How it works
//! - The lease's spec is the record: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`,
//!   `renewTime`, `leaseTransitions`.
//! - A candidate reads the lease every retry period (jittered). It trusts no remote clock: it
//!   notes, on its own monotonic clock, when it last saw the record *change*, and treats the lease
//!   as expired once the record's `leaseDurationSeconds` have passed since then without a change.
//! - It takes an expired (or released, or missing) lease by writing itself as holder with an
//!   update whose `resourceVersion` precondition is the version it read: of two candidates
//!   racing, the API server's compare-and-swap lets one win and gives the other 409 Conflict.
//! - The leader renews (the same update, `renewTime` = now) every retry period. If it has not
//!   renewed for the renew deadline, or it sees another holder, it stops acting at once; because
//!   the renew deadline is shorter than the lease duration, it has stopped before any other
//!   candidate may consider the lease expired (fencing by resourceVersion and by time).
//! - On shutdown the leader releases the lease (holder cleared, duration 1 s), so a standby takes
//!   over within about a second instead of a lease duration.
//!
//! Unlike kube-scheduler and kube-controller-manager, which exit when they lose the lease and are
//! restarted by their supervisor, [`run`] stops the singleton's work, waits for it to end, and
//! becomes a candidate again in the same process: under `skiff server` the API server and the
//! other components share the process and must not die with one lost lease.
//!
//! # Layout
//! - [`Elector`]: the decisions, pure, on an injected clock (unit-tested without I/O).
//! - [`run`]: the I/O shell over the typed [`Api`]`<Lease>`, and [`Flags`], the
//!   `--leader-elect*` flags with kube-scheduler's defaults (15 s, 10 s, 2 s).

use std::future::Future;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

/// The namespace the singletons' leases live in.
pub const DEFAULT_NAMESPACE: &str = "kube-system";
/// The scheduler's lease, as kube-scheduler names it.
pub const SCHEDULER_LEASE: &str = "kube-scheduler";
/// The controller manager's lease, as kube-controller-manager names it.
pub const CONTROLLER_MANAGER_LEASE: &str = "kube-controller-manager";

/// client-go's jitter on the candidate's retry period (up to 1.2 periods more).
const JITTER_FACTOR: f64 = 1.2;

/// Bad leader election settings.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The timings cannot give the guarantees (kube-scheduler refuses the same).
    #[error("leader election: {0}")]
    Timing(String),
}

/// The three durations of leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a candidate waits after the last observed change of the record before it may
    /// take the lease (written into the record as `leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// How long the leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl Default for Timing {
    /// kube-scheduler's and kube-controller-manager's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// Checks what client-go checks: lease duration > renew deadline > 1.2 × retry period > 0,
    /// and a lease duration of whole seconds, at least one.
    pub fn validate(&self) -> Result<(), Error> {
        if self.retry_period.is_zero() {
            return Err(Error::Timing("the retry period must be positive".into()));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(Error::Timing(format!(
                "the lease duration ({:?}) must be longer than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            )));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(Error::Timing(format!(
                "the renew deadline ({:?}) must be longer than {JITTER_FACTOR} × the retry period ({:?})",
                self.renew_deadline, self.retry_period
            )));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(Error::Timing(
                "the lease duration must be at least 1s (the lease holds whole seconds)".into(),
            ));
        }
        Ok(())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// The record the elector last saw, and when (by its own clock) it last saw it change.
#[derive(Debug, Clone)]
struct Observed {
    spec: LeaseSpec,
    resource_version: String,
    changed_at: Instant,
}

/// What to do next about the lease.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// There is no lease: create it holding this record.
    Create(LeaseSpec),
    /// Write this record over the lease at `resource_version` (acquire or renew); a conflict
    /// means somebody else wrote first.
    Update {
        /// The record to write.
        spec: LeaseSpec,
        /// The precondition: the version read.
        resource_version: String,
    },
    /// Another holder's lease is still valid: try again later.
    Wait {
        /// Who holds it.
        holder: String,
    },
}

/// The decisions of one candidate, on a clock the caller passes in (`now` is monotonic, `wall`
/// is what goes into the record's times).
#[derive(Debug, Clone)]
pub struct Elector {
    identity: String,
    timing: Timing,
    observed: Option<Observed>,
    /// When this candidate last acquired or renewed (the start of that attempt); `None` while it
    /// is not the leader.
    renewed_at: Option<Instant>,
}

impl Elector {
    /// A candidate named `identity`.
    pub fn new(identity: impl Into<String>, timing: Timing) -> Elector {
        Elector {
            identity: identity.into(),
            timing,
            observed: None,
            renewed_at: None,
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The holder of the lease as last seen (`None` when there is no lease or nobody holds it).
    pub fn holder(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .and_then(|o| o.spec.holder_identity.as_deref())
            .filter(|h| !h.is_empty())
    }

    /// Records the lease as read at `now` (`None`: there is none). The expiry clock restarts only
    /// when the record differs from the one seen before, as client-go's does.
    pub fn observe(&mut self, lease: Option<(&LeaseSpec, &str)>, now: Instant) {
        match lease {
            None => self.observed = None,
            Some((spec, resource_version)) => {
                let changed = self.observed.as_ref().is_none_or(|o| &o.spec != spec);
                let changed_at = match &self.observed {
                    Some(o) if !changed => o.changed_at,
                    _ => now,
                };
                self.observed = Some(Observed {
                    spec: spec.clone(),
                    resource_version: resource_version.to_string(),
                    changed_at,
                });
            }
        }
        if self.holder() != Some(self.identity.as_str()) {
            self.renewed_at = None;
        }
    }

    /// What to do at `now`, after [`Elector::observe`].
    pub fn next(&self, now: Instant, wall: Timestamp) -> Step {
        let mut spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.lease_seconds()),
            acquire_time: Some(MicroTime(wall)),
            renew_time: Some(MicroTime(wall)),
            lease_transitions: Some(0),
            ..Default::default()
        };
        let Some(observed) = &self.observed else {
            return Step::Create(spec);
        };
        let old = &observed.spec;
        match self.holder() {
            Some(holder) if holder == self.identity => {
                spec.acquire_time = old.acquire_time.clone().or(spec.acquire_time);
                spec.lease_transitions = old.lease_transitions.or(Some(0));
            }
            Some(holder) if !self.expired(observed, now) => {
                return Step::Wait {
                    holder: holder.to_string(),
                };
            }
            _ => spec.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + 1),
        }
        Step::Update {
            spec,
            resource_version: observed.resource_version.clone(),
        }
    }

    /// Whether the observed record's lease has run out on this candidate's clock: its
    /// `leaseDurationSeconds` since the record was last seen to change.
    fn expired(&self, observed: &Observed, now: Instant) -> bool {
        let seconds = observed.spec.lease_duration_seconds.unwrap_or(0).max(0) as u64;
        now.saturating_duration_since(observed.changed_at) >= Duration::from_secs(seconds)
    }

    /// The write of [`Step::Create`] or [`Step::Update`] begun at `attempt` succeeded and the
    /// lease is now `spec` at `resource_version`.
    pub fn written(&mut self, spec: &LeaseSpec, resource_version: &str, attempt: Instant) {
        self.observed = Some(Observed {
            spec: spec.clone(),
            resource_version: resource_version.to_string(),
            changed_at: attempt,
        });
        self.renewed_at = (self.holder() == Some(self.identity.as_str())).then_some(attempt);
    }

    /// Whether this candidate may act as the leader at `now`: it holds the lease as last seen and
    /// renewed it less than the renew deadline ago.
    pub fn is_leading(&self, now: Instant) -> bool {
        self.holder() == Some(self.identity.as_str())
            && self
                .renewed_at
                .is_some_and(|at| now.saturating_duration_since(at) < self.timing.renew_deadline)
    }

    /// How long the leader may still act without renewing (zero when it may not).
    pub fn time_left(&self, now: Instant) -> Duration {
        match self.renewed_at {
            Some(at) if self.is_leading(now) => {
                self.timing.renew_deadline - now.saturating_duration_since(at)
            }
            _ => Duration::ZERO,
        }
    }

    /// The write that gives the lease up (holder cleared, a 1 s duration so that a standby need
    /// not wait out the full lease), if this candidate holds it as last seen.
    pub fn release(&self, wall: Timestamp) -> Option<Step> {
        let observed = self.observed.as_ref()?;
        if self.holder() != Some(self.identity.as_str()) {
            return None;
        }
        Some(Step::Update {
            spec: LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(MicroTime(wall)),
                renew_time: Some(MicroTime(wall)),
                lease_transitions: observed.spec.lease_transitions,
                ..Default::default()
            },
            resource_version: observed.resource_version.clone(),
        })
    }
}

/// The `--leader-elect*` flags, named and defaulted as kube-scheduler's.
#[derive(clap::Args, Clone, Debug, Default)]
#[group(skip)]
pub struct Flags {
    /// Run for a Lease before acting, so that of several replicas only one acts
    /// (`--leader-elect=false` to act at once) [default: true; under `skiff server`: true on an
    /// external etcd (`--datastore-endpoint`), false on the embedded log, which only one server
    /// can open].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", require_equals = false)]
    pub leader_elect: Option<bool>,
    /// How long a standby waits after the leader's last renewal before it takes the lease.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps acting without renewing; it stops at this deadline.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often candidates try to take the lease and the leader renews it.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// The namespace of the lease objects.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub leader_elect_resource_namespace: String,
}

impl Flags {
    /// The election these flags ask for, for the lease `name`; `None` when disabled
    /// (`default_on` says what no `--leader-elect` means).
    pub fn config(&self, name: &str, default_on: bool) -> Result<Option<Config>, Error> {
        if !self.leader_elect.unwrap_or(default_on) {
            return Ok(None);
        }
        let timing = Timing {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        timing.validate()?;
        let namespace = if self.leader_elect_resource_namespace.is_empty() {
            DEFAULT_NAMESPACE.to_string()
        } else {
            self.leader_elect_resource_namespace.clone()
        };
        Ok(Some(Config {
            namespace,
            name: name.to_string(),
            identity: default_identity(),
            timing,
        }))
    }
}

/// Parses `15s`, `1m`, `500ms` (a bare number is seconds).
fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let signed: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("not a duration ({e}); use e.g. 15s, 2s, 500ms"))?;
    Duration::try_from(signed).map_err(|_| "a duration cannot be negative".to_string())
}

/// `<hostname>_<random>`, as client-go's users name themselves (host plus a UUID): unique per
/// process, so that a restarted process is a new candidate.
pub fn default_identity() -> String {
    use rand::Rng;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "skiff".to_string());
    let id: u64 = rand::rng().random();
    format!("{host}_{id:016x}")
}

/// One election: which lease, who runs, how fast.
#[derive(Debug, Clone)]
pub struct Config {
    /// The lease's namespace.
    pub namespace: String,
    /// The lease's name.
    pub name: String,
    /// This candidate's identity (the `holderIdentity` it writes).
    pub identity: String,
    /// The durations.
    pub timing: Timing,
}

/// Runs `work` while this process holds the lease `config` names, or at once when `config` is
/// `None`. `work` gets a token cancelled when the lease is lost or `shutdown` fires, and must
/// stop acting when it is; after a loss this process runs for the lease again and starts `work`
/// anew once it holds it. Returns when `shutdown` fires (after releasing the lease) or when
/// `work` ends on its own (its result).
pub async fn run<F, Fut, E>(
    client: kube::Client,
    config: Option<Config>,
    shutdown: CancellationToken,
    mut work: F,
) -> Result<(), E>
where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let Some(config) = config else {
        return work(shutdown).await;
    };
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let lease = format!("{}/{}", config.namespace, config.name);
    let mut elector = Elector::new(config.identity.clone(), config.timing);
    let retry = config.timing.retry_period;
    loop {
        tracing::info!(%lease, identity = %config.identity, "attempting to acquire the leader lease");
        let mut last_holder: Option<String> = None;
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            if try_acquire_or_renew(&api, &config.name, &mut elector, retry).await {
                break;
            }
            let holder = elector.holder().map(str::to_string);
            if holder != last_holder {
                if let Some(holder) = &holder {
                    tracing::info!(%lease, %holder, "the lease is held by another; standing by");
                }
                last_holder = holder;
            }
            let jitter = rand::random::<f64>() * JITTER_FACTOR * retry.as_secs_f64();
            tokio::select! {
                _ = tokio::time::sleep(retry + Duration::from_secs_f64(jitter)) => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
        tracing::info!(%lease, identity = %config.identity, "successfully acquired the leader lease");
        let stop = shutdown.child_token();
        let mut task = tokio::spawn(work(stop.clone()));
        loop {
            tokio::select! {
                done = &mut task => {
                    // The work ended on its own (an error, or shutdown seen first by it).
                    release(&api, &config.name, &elector).await;
                    return joined(done);
                }
                _ = shutdown.cancelled() => {
                    stop.cancel();
                    let done = task.await;
                    release(&api, &config.name, &elector).await;
                    tracing::info!(%lease, "released the leader lease");
                    return joined(done);
                }
                _ = tokio::time::sleep(retry) => {}
            }
            let left = elector.time_left(Instant::now());
            if !left.is_zero() {
                try_acquire_or_renew(&api, &config.name, &mut elector, left).await;
            }
            if !elector.is_leading(Instant::now()) {
                tracing::error!(
                    %lease,
                    holder = elector.holder().unwrap_or(""),
                    renew_deadline = ?config.timing.renew_deadline,
                    "leader election lost: stopping the work and standing by"
                );
                stop.cancel();
                if joined(task.await).is_err() {
                    tracing::warn!(%lease, "the work stopped with an error after the lease was lost");
                }
                break;
            }
        }
    }
}

/// The work's result from its task (a panic in it goes on unwinding here).
fn joined<E>(done: Result<Result<(), E>, tokio::task::JoinError>) -> Result<(), E> {
    match done {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Ok(()),
    }
}

/// One read and, if the elector says so, one write of the lease, given at most `limit`; whether
/// this candidate holds the lease afterwards.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    name: &str,
    elector: &mut Elector,
    limit: Duration,
) -> bool {
    let attempt = Instant::now();
    let round = async {
        let current = match api.get_opt(name).await {
            Ok(current) => current,
            Err(e) => {
                tracing::debug!(lease = name, error = %e, "cannot read the leader lease");
                return false;
            }
        };
        let spec = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        let version = current
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        elector.observe(spec.as_ref().map(|s| (s, version.as_str())), attempt);
        let step = elector.next(attempt, Timestamp::now());
        write(api, name, elector, step, attempt).await
    };
    tokio::time::timeout(limit, round).await.unwrap_or(false)
}

/// Performs a [`Step`]; whether it wrote.
async fn write(
    api: &Api<Lease>,
    name: &str,
    elector: &mut Elector,
    step: Step,
    attempt: Instant,
) -> bool {
    let (spec, resource_version) = match step {
        Step::Wait { .. } => return false,
        Step::Create(spec) => (spec, None),
        Step::Update {
            spec,
            resource_version,
        } => (spec, Some(resource_version)),
    };
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            resource_version: resource_version.clone(),
            ..Default::default()
        },
        spec: Some(spec),
    };
    let result = match resource_version {
        None => api.create(&PostParams::default(), &lease).await,
        Some(_) => api.replace(name, &PostParams::default(), &lease).await,
    };
    match result {
        Ok(written) => {
            let version = written.metadata.resource_version.unwrap_or_default();
            elector.written(&written.spec.unwrap_or_default(), &version, attempt);
            true
        }
        Err(e) => {
            tracing::debug!(lease = name, error = %e, "cannot write the leader lease");
            false
        }
    }
}

/// Gives the lease up if this candidate holds it (best effort: a standby takes over after the
/// lease duration anyway).
async fn release(api: &Api<Lease>, name: &str, elector: &Elector) {
    let Some(step) = elector.release(Timestamp::now()) else {
        return;
    };
    let mut elector = elector.clone();
    let released = tokio::time::timeout(
        Duration::from_secs(5),
        write(api, name, &mut elector, step, Instant::now()),
    )
    .await;
    if released != Ok(true) {
        tracing::warn!(
            lease = name,
            "could not release the leader lease; a standby takes over when it expires"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };

    fn wall(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    /// A lease the way the API server keeps it: a record and a resourceVersion bumped on every
    /// write, updates refused (409) unless they name the current version.
    #[derive(Default)]
    struct FakeLease {
        current: Option<(LeaseSpec, u64)>,
    }

    impl FakeLease {
        fn read(&self) -> Option<(LeaseSpec, String)> {
            self.current
                .as_ref()
                .map(|(s, v)| (s.clone(), v.to_string()))
        }

        /// One try_acquire_or_renew round against this lease at `now`.
        fn round(&mut self, elector: &mut Elector, now: Instant, wall: Timestamp) -> bool {
            let read = self.read();
            elector.observe(read.as_ref().map(|(s, v)| (s, v.as_str())), now);
            match elector.next(now, wall) {
                Step::Wait { .. } => false,
                Step::Create(spec) => {
                    if self.current.is_some() {
                        return false; // AlreadyExists
                    }
                    self.current = Some((spec.clone(), 1));
                    elector.written(&spec, "1", now);
                    true
                }
                Step::Update {
                    spec,
                    resource_version,
                } => self.update(elector, spec, &resource_version, now),
            }
        }

        fn update(
            &mut self,
            elector: &mut Elector,
            spec: LeaseSpec,
            rv: &str,
            now: Instant,
        ) -> bool {
            let Some((_, version)) = &self.current else {
                return false;
            };
            if version.to_string() != rv {
                return false; // 409 Conflict
            }
            let version = version + 1;
            self.current = Some((spec.clone(), version));
            elector.written(&spec, &version.to_string(), now);
            true
        }
    }

    #[test]
    fn the_first_candidate_creates_the_lease_and_leads() {
        let start = Instant::now();
        let mut lease = FakeLease::default();
        let mut a = Elector::new("a", T);
        assert!(lease.round(&mut a, start, wall(0)));
        let (spec, _) = lease.read().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(wall(0))));
        assert!(a.is_leading(start));
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions_and_moves_renew_time() {
        let start = Instant::now();
        let mut lease = FakeLease::default();
        let mut a = Elector::new("a", T);
        assert!(lease.round(&mut a, start, wall(0)));
        assert!(lease.round(&mut a, start + Duration::from_secs(2), wall(2)));
        let (spec, version) = lease.read().unwrap();
        assert_eq!(version, "2");
        assert_eq!(spec.acquire_time, Some(MicroTime(wall(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(wall(2))));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn a_standby_waits_while_the_record_changes_and_takes_over_a_lease_duration_after_it_stops() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut lease = FakeLease::default();
        let (mut a, mut b) = (Elector::new("a", T), Elector::new("b", T));
        assert!(lease.round(&mut a, at(0), wall(0)));
        assert!(!lease.round(&mut b, at(1), wall(1)));
        assert_eq!(b.holder(), Some("a"));
        // a renews at 10; b sees the change at 11, so the lease runs until 26 on b's clock,
        // although 15 s have passed since b first saw it.
        assert!(lease.round(&mut a, at(10), wall(10)));
        assert!(!lease.round(&mut b, at(11), wall(11)));
        assert!(!lease.round(&mut b, at(17), wall(17)));
        assert!(!lease.round(&mut b, at(25), wall(25)));
        // a died after its renewal at 10: b takes over at 26, a transition.
        assert!(lease.round(&mut b, at(26), wall(26)));
        let (spec, _) = lease.read().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.acquire_time, Some(MicroTime(wall(26))));
        assert!(b.is_leading(at(26)));
    }

    #[test]
    fn expiry_is_judged_on_the_observers_clock_not_the_records_times() {
        // The record's renewTime says the lease is long expired (a skewed clock), but b has just
        // seen it: b waits the full duration.
        let start = Instant::now();
        let mut b = Elector::new("b", T);
        let stale = LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(wall(-3600))),
            ..Default::default()
        };
        b.observe(Some((&stale, "7")), start);
        assert!(matches!(b.next(start, wall(0)), Step::Wait { .. }));
        let later = start + Duration::from_secs(14);
        b.observe(Some((&stale, "7")), later);
        assert!(matches!(b.next(later, wall(14)), Step::Wait { .. }));
        let expired = start + Duration::from_secs(15);
        b.observe(Some((&stale, "7")), expired);
        assert!(
            matches!(b.next(expired, wall(15)), Step::Update { ref resource_version, .. } if resource_version == "7")
        );
    }

    #[test]
    fn the_records_duration_counts_not_the_observers_own() {
        // A lease written by a holder with a 40 s duration is not taken after our 15 s.
        let start = Instant::now();
        let mut b = Elector::new("b", T);
        let long = LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(40),
            ..Default::default()
        };
        b.observe(Some((&long, "3")), start);
        let t = start + Duration::from_secs(39);
        b.observe(Some((&long, "3")), t);
        assert!(matches!(b.next(t, wall(39)), Step::Wait { .. }));
        let t = start + Duration::from_secs(40);
        b.observe(Some((&long, "3")), t);
        assert!(matches!(b.next(t, wall(40)), Step::Update { .. }));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let start = Instant::now();
        let mut lease = FakeLease::default();
        let (mut a, mut b) = (Elector::new("a", T), Elector::new("b", T));
        assert!(lease.round(&mut a, start, wall(0)));
        assert!(!lease.round(&mut b, start, wall(0)));
        let Some(Step::Update {
            spec,
            resource_version,
        }) = a.release(wall(1))
        else {
            panic!("a holds the lease and can release it");
        };
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert!(lease.update(
            &mut a,
            spec,
            &resource_version,
            start + Duration::from_secs(1)
        ));
        assert!(!a.is_leading(start + Duration::from_secs(1)));
        assert!(a.release(wall(2)).is_none(), "only the holder releases");
        assert!(lease.round(&mut b, start + Duration::from_secs(2), wall(2)));
        assert_eq!(lease.read().unwrap().0.lease_transitions, Some(1));
    }

    #[test]
    fn a_leader_that_cannot_renew_stops_acting_at_the_renew_deadline() {
        let start = Instant::now();
        let mut lease = FakeLease::default();
        let mut a = Elector::new("a", T);
        assert!(lease.round(&mut a, start, wall(0)));
        assert!(a.is_leading(start + Duration::from_millis(9_999)));
        assert_eq!(
            a.time_left(start + Duration::from_secs(4)),
            Duration::from_secs(6)
        );
        // No renewal got through: at the deadline it must stop, 5 s before anyone may take over.
        assert!(!a.is_leading(start + Duration::from_secs(10)));
        assert_eq!(a.time_left(start + Duration::from_secs(10)), Duration::ZERO);
    }

    #[test]
    fn a_leader_that_sees_another_holder_stops_at_once() {
        let start = Instant::now();
        let mut a = Elector::new("a", T);
        let mine = LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        a.written(&mine, "1", start);
        assert!(a.is_leading(start));
        let theirs = LeaseSpec {
            holder_identity: Some("b".into()),
            ..mine
        };
        a.observe(Some((&theirs, "2")), start + Duration::from_secs(1));
        assert!(!a.is_leading(start + Duration::from_secs(1)));
        assert!(a.release(wall(1)).is_none());
    }

    #[test]
    fn of_two_candidates_racing_for_an_expired_lease_one_wins() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut lease = FakeLease::default();
        let (mut a, mut b, mut c) = (
            Elector::new("a", T),
            Elector::new("b", T),
            Elector::new("c", T),
        );
        assert!(lease.round(&mut a, at(0), wall(0)));
        // b and c both read the lease, see it expire, and both decide to take it.
        for e in [&mut b, &mut c] {
            let (spec, v) = lease.read().unwrap();
            e.observe(Some((&spec, v.as_str())), at(1));
            e.observe(Some((&spec, v.as_str())), at(16));
        }
        let (
            Step::Update {
                spec: sb,
                resource_version: vb,
            },
            Step::Update {
                spec: sc,
                resource_version: vc,
            },
        ) = (b.next(at(16), wall(16)), c.next(at(16), wall(16)))
        else {
            panic!("both should try to take the expired lease");
        };
        assert_eq!(vb, vc);
        // The API server's compare-and-swap lets the first write through and refuses the second.
        assert!(lease.update(&mut b, sb, &vb, at(16)));
        assert!(!lease.update(&mut c, sc, &vc, at(16)));
        assert!(b.is_leading(at(16)));
        assert!(!c.is_leading(at(16)));
        // c, reading again, sees b and waits; a, back from a pause, sees b and is not the leader.
        assert!(!lease.round(&mut c, at(17), wall(17)));
        assert_eq!(c.holder(), Some("b"));
        assert!(!lease.round(&mut a, at(17), wall(17)));
        assert!(!a.is_leading(at(17)));
    }

    #[test]
    fn timings_are_checked_like_client_go() {
        assert_eq!(T.validate(), Ok(()));
        assert_eq!(Timing::default(), T);
        let bad = |l: u64, r: u64, p: u64| {
            Timing {
                lease_duration: Duration::from_secs(l),
                renew_deadline: Duration::from_secs(r),
                retry_period: Duration::from_secs(p),
            }
            .validate()
            .unwrap_err()
            .to_string()
        };
        assert!(bad(10, 10, 2).contains("longer than the renew deadline"));
        assert!(bad(15, 2, 2).contains("1.2"));
        assert!(bad(15, 10, 0).contains("positive"));
        let flags = Flags {
            leader_elect: None,
            leader_elect_lease_duration: Duration::from_secs(15),
            leader_elect_renew_deadline: Duration::from_secs(10),
            leader_elect_retry_period: Duration::from_secs(2),
            leader_elect_resource_namespace: String::new(),
        };
        assert!(flags.config("x", false).unwrap().is_none());
        let on = flags.config("kube-scheduler", true).unwrap().unwrap();
        assert_eq!(on.namespace, "kube-system");
        assert_eq!(on.name, "kube-scheduler");
        assert!(on.identity.contains('_'));
        assert_ne!(
            on.identity,
            flags.config("x", true).unwrap().unwrap().identity
        );
        let off = Flags {
            leader_elect: Some(false),
            ..flags
        };
        assert!(off.config("x", true).unwrap().is_none());
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
    }
}

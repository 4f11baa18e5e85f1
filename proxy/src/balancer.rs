//! The load balancer: per Service port, the ready endpoints, a round-robin cursor and the
//! ClientIP affinity records.
//!
//! It is pure state behind one short lock: the caller passes the current time, so affinity expiry
//! is tested without sleeping.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The default ClientIP affinity timeout of Kubernetes (`sessionAffinityConfig.clientIP.timeoutSeconds`).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10800);

/// One port of one Service: what the balancer and the listeners are keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServicePortName {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The port's name (empty for the single unnamed port of a Service).
    pub port: String,
}

impl ServicePortName {
    /// A key from its three parts.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        port: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            port: port.into(),
        }
    }
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)?;
        if !self.port.is_empty() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// Why no endpoint could be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    /// The balancer does not know this Service port (never synced, or deleted).
    #[error("unknown service port {0}")]
    UnknownService(ServicePortName),
    /// The Service port exists but has no ready endpoint.
    #[error("service port {0} has no ready endpoints")]
    NoEndpoints(ServicePortName),
}

/// The balancer's state for one Service port.
#[derive(Debug, Default)]
struct Balanced {
    /// The ready endpoints, sorted and without duplicates so every proxy rotates alike.
    endpoints: Vec<SocketAddr>,
    /// Index into `endpoints` of the next round-robin pick.
    next: usize,
    /// `Some(timeout)` when the Service has `sessionAffinity: ClientIP`.
    affinity: Option<Duration>,
    /// The endpoint each client was last sent to, and when.
    clients: HashMap<IpAddr, AffinityRecord>,
}

#[derive(Clone, Copy, Debug)]
struct AffinityRecord {
    endpoint: SocketAddr,
    last_used: Instant,
}

/// Round-robin over the ready endpoints of every Service port, with ClientIP session affinity.
#[derive(Debug, Default)]
pub struct LoadBalancer {
    /// Short critical sections only; never held across an await.
    services: Mutex<HashMap<ServicePortName, Balanced>>,
}

impl LoadBalancer {
    /// An empty balancer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the ready endpoints and the affinity of a Service port, creating it if needed.
    ///
    /// The rotation changes at once. Affinity records that point to an endpoint no longer
    /// present are dropped; the others stay. When affinity is turned off, all records go.
    pub fn update(
        &self,
        key: &ServicePortName,
        mut endpoints: Vec<SocketAddr>,
        affinity: Option<Duration>,
    ) {
        endpoints.sort();
        endpoints.dedup();
        let mut services = self.services.lock().expect("balancer lock poisoned");
        let state = services.entry(key.clone()).or_default();
        if state.affinity != affinity {
            state.clients.clear();
            state.affinity = affinity;
        }
        if state.endpoints != endpoints {
            state
                .clients
                .retain(|_, record| endpoints.binary_search(&record.endpoint).is_ok());
            // Keep the cursor's position in the rotation where it can: the next pick is the first
            // endpoint at or after the one that would have been picked.
            let upcoming = state.endpoints.get(state.next).copied();
            state.next = match upcoming {
                Some(addr) => endpoints.partition_point(|e| *e < addr),
                None => 0,
            };
            if state.next >= endpoints.len() {
                state.next = 0;
            }
            state.endpoints = endpoints;
        }
    }

    /// Forgets a Service port.
    pub fn remove(&self, key: &ServicePortName) {
        self.services
            .lock()
            .expect("balancer lock poisoned")
            .remove(key);
    }

    /// Keeps only the Service ports for which `keep` is true.
    pub fn retain(&self, mut keep: impl FnMut(&ServicePortName) -> bool) {
        self.services
            .lock()
            .expect("balancer lock poisoned")
            .retain(|k, _| keep(k));
    }

    /// The ready endpoints of a Service port, in rotation order.
    pub fn endpoints(&self, key: &ServicePortName) -> Option<Vec<SocketAddr>> {
        self.services
            .lock()
            .expect("balancer lock poisoned")
            .get(key)
            .map(|s| s.endpoints.clone())
    }

    /// Chooses the endpoint for a new connection (or UDP flow) from `client` at time `now`.
    ///
    /// With ClientIP affinity, a client whose record is fresher than the timeout goes back to its
    /// endpoint (and the record is refreshed); otherwise the next endpoint in the rotation is
    /// chosen and recorded. `reset_affinity` ignores the client's record: the caller sets it
    /// when retrying after the recorded endpoint refused.
    pub fn pick(
        &self,
        key: &ServicePortName,
        client: IpAddr,
        now: Instant,
        reset_affinity: bool,
    ) -> Result<SocketAddr, PickError> {
        let mut services = self.services.lock().expect("balancer lock poisoned");
        let state = services
            .get_mut(key)
            .ok_or_else(|| PickError::UnknownService(key.clone()))?;
        if state.endpoints.is_empty() {
            return Err(PickError::NoEndpoints(key.clone()));
        }
        if let Some(timeout) = state.affinity
            && !reset_affinity
            && let Some(record) = state.clients.get_mut(&client)
            && now.saturating_duration_since(record.last_used) < timeout
        {
            record.last_used = now;
            return Ok(record.endpoint);
        }
        let endpoint = state.endpoints[state.next % state.endpoints.len()];
        state.next = (state.next + 1) % state.endpoints.len();
        if state.affinity.is_some() {
            state.clients.insert(
                client,
                AffinityRecord {
                    endpoint,
                    last_used: now,
                },
            );
        }
        Ok(endpoint)
    }

    /// Drops the affinity records older than their Service's timeout, so the table does not grow
    /// with every client ever seen.
    pub fn sweep(&self, now: Instant) {
        let mut services = self.services.lock().expect("balancer lock poisoned");
        for state in services.values_mut() {
            if let Some(timeout) = state.affinity {
                state
                    .clients
                    .retain(|_, r| now.saturating_duration_since(r.last_used) < timeout);
            }
        }
    }

    /// How many affinity records a Service port holds (for tests and diagnostics).
    pub fn affinity_records(&self, key: &ServicePortName) -> usize {
        self.services
            .lock()
            .expect("balancer lock poisoned")
            .get(key)
            .map_or(0, |s| s.clients.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ServicePortName {
        ServicePortName::new("default", "web", "http")
    }

    fn addr(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], 8080))
    }

    fn client(last: u8) -> IpAddr {
        IpAddr::from([192, 168, 0, last])
    }

    #[test]
    fn round_robin_visits_each_endpoint_equally() {
        let lb = LoadBalancer::new();
        lb.update(&key(), vec![addr(3), addr(1), addr(2)], None);
        let now = Instant::now();
        let mut counts = HashMap::new();
        for i in 0..300 {
            let e = lb.pick(&key(), client(i as u8), now, false).unwrap();
            *counts.entry(e).or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 3);
        assert!(counts.values().all(|&c| c == 100), "{counts:?}");
        // Sorted rotation order, independent of the order the endpoints came in.
        let picks: Vec<_> = (0..3)
            .map(|_| lb.pick(&key(), client(1), now, false).unwrap())
            .collect();
        assert_eq!(picks, vec![addr(1), addr(2), addr(3)]);
    }

    #[test]
    fn unknown_and_empty_services_are_refused() {
        let lb = LoadBalancer::new();
        let now = Instant::now();
        assert_eq!(
            lb.pick(&key(), client(1), now, false),
            Err(PickError::UnknownService(key()))
        );
        lb.update(&key(), vec![], None);
        assert_eq!(
            lb.pick(&key(), client(1), now, false),
            Err(PickError::NoEndpoints(key()))
        );
        lb.update(&key(), vec![addr(1)], None);
        assert_eq!(lb.pick(&key(), client(1), now, false), Ok(addr(1)));
        lb.remove(&key());
        assert_eq!(
            lb.pick(&key(), client(1), now, false),
            Err(PickError::UnknownService(key()))
        );
    }

    #[test]
    fn client_ip_affinity_sticks_until_the_timeout_then_rotation_resumes() {
        let lb = LoadBalancer::new();
        let timeout = Duration::from_secs(10);
        lb.update(&key(), vec![addr(1), addr(2), addr(3)], Some(timeout));
        let t0 = Instant::now();
        let first = lb.pick(&key(), client(1), t0, false).unwrap();
        // Each pick within the timeout refreshes the record, so a busy client stays put.
        for s in 1..=30 {
            let at = t0 + Duration::from_secs(s * 5);
            assert_eq!(lb.pick(&key(), client(1), at, false).unwrap(), first);
        }
        // Other clients still rotate.
        let other = lb.pick(&key(), client(2), t0, false).unwrap();
        assert_ne!(other, first);
        // After the timeout without traffic the record is stale: the rotation picks again.
        let late = t0 + Duration::from_secs(150 + 10);
        let after = lb.pick(&key(), client(1), late, false).unwrap();
        let next = lb.pick(&key(), client(3), late, false).unwrap();
        assert_ne!(after, next, "rotation resumed");
        // And the new choice is sticky again.
        assert_eq!(
            lb.pick(&key(), client(1), late + Duration::from_secs(1), false)
                .unwrap(),
            after
        );
    }

    #[test]
    fn reset_affinity_moves_the_client_to_the_next_endpoint() {
        let lb = LoadBalancer::new();
        lb.update(
            &key(),
            vec![addr(1), addr(2)],
            Some(DEFAULT_AFFINITY_TIMEOUT),
        );
        let now = Instant::now();
        let first = lb.pick(&key(), client(1), now, false).unwrap();
        let retried = lb.pick(&key(), client(1), now, true).unwrap();
        assert_ne!(first, retried);
        assert_eq!(lb.pick(&key(), client(1), now, false).unwrap(), retried);
    }

    #[test]
    fn removed_endpoint_drops_its_affinity_and_leaves_the_rotation_at_once() {
        let lb = LoadBalancer::new();
        lb.update(
            &key(),
            vec![addr(1), addr(2), addr(3)],
            Some(Duration::from_secs(60)),
        );
        let now = Instant::now();
        let a = lb.pick(&key(), client(1), now, false).unwrap();
        let b = lb.pick(&key(), client(2), now, false).unwrap();
        assert_eq!((a, b), (addr(1), addr(2)));
        lb.update(
            &key(),
            vec![addr(2), addr(3)],
            Some(Duration::from_secs(60)),
        );
        assert_eq!(lb.affinity_records(&key()), 1);
        assert_eq!(lb.pick(&key(), client(2), now, false).unwrap(), addr(2));
        for i in 10..20 {
            assert_ne!(lb.pick(&key(), client(i), now, false).unwrap(), addr(1));
        }
        // Added endpoints join the rotation at once.
        lb.update(&key(), vec![addr(2), addr(3), addr(4)], None);
        let picks: std::collections::BTreeSet<_> = (0..3)
            .map(|i| lb.pick(&key(), client(i), now, false).unwrap())
            .collect();
        assert_eq!(picks.len(), 3);
        assert!(picks.contains(&addr(4)));
    }

    #[test]
    fn turning_affinity_off_forgets_the_records() {
        let lb = LoadBalancer::new();
        lb.update(
            &key(),
            vec![addr(1), addr(2)],
            Some(Duration::from_secs(60)),
        );
        let now = Instant::now();
        lb.pick(&key(), client(1), now, false).unwrap();
        assert_eq!(lb.affinity_records(&key()), 1);
        lb.update(&key(), vec![addr(1), addr(2)], None);
        assert_eq!(lb.affinity_records(&key()), 0);
        let a = lb.pick(&key(), client(1), now, false).unwrap();
        let b = lb.pick(&key(), client(1), now, false).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn sweep_drops_only_stale_records() {
        let lb = LoadBalancer::new();
        lb.update(&key(), vec![addr(1)], Some(Duration::from_secs(10)));
        let t0 = Instant::now();
        lb.pick(&key(), client(1), t0, false).unwrap();
        lb.pick(&key(), client(2), t0 + Duration::from_secs(8), false)
            .unwrap();
        lb.sweep(t0 + Duration::from_secs(12));
        assert_eq!(lb.affinity_records(&key()), 1);
    }

    #[test]
    fn display_of_keys() {
        assert_eq!(key().to_string(), "default/web:http");
        assert_eq!(ServicePortName::new("a", "b", "").to_string(), "a/b");
    }
}

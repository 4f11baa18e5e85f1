//! ClusterIP and NodePort reservations kept in the store, so that several API servers on one
//! shared datastore (an etcd cluster) never hand out the same address or port.
//!
//! Each reserved value is a key of its own, `/registry/ranges/serviceips/<ip>` or
//! `/registry/ranges/servicenodeports/<port>`, whose value names the owning Service and when it
//! was reserved. Admission claims what it picked with one transaction that creates every key
//! only if none exists (a compare on version 0 per key): of two servers picking the same value,
//! one transaction fails, and that server marks the value taken and picks again. The Service
//! itself is written after admission; a write that fails gives its claims back, a deleted Service
//! releases its keys (each delete guarded by the key's mod revision and owner).
//!
//! A server that dies between claiming and writing leaves a key nobody holds, and a Service
//! whose ports changed leaves keys for the old ones; [`repair`] (run at start and periodically,
//! as kube-apiserver's repair controllers) deletes keys no Service holds once they are older than
//! a grace period (so an in-flight create on another server is not robbed), and creates the keys
//! of Services that have none (data written before reservations were kept, or a lost release
//! race). The keys parse as no resource, so lists, watches and `skiff log` never show them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use skiff_store::{Compare, KeyRange, KeyValue, Op, OpResponse, RangeRequest, Store, Txn};

use crate::error::Result;

/// Where ClusterIP reservations live.
pub const SERVICE_IPS_PREFIX: &str = "/registry/ranges/serviceips/";
/// Where NodePort reservations live.
pub const NODE_PORTS_PREFIX: &str = "/registry/ranges/servicenodeports/";

/// The key of a ClusterIP reservation.
pub fn ip_key(ip: Ipv4Addr) -> Vec<u8> {
    format!("{SERVICE_IPS_PREFIX}{ip}").into_bytes()
}

/// The key of a NodePort reservation.
pub fn port_key(port: u16) -> Vec<u8> {
    format!("{NODE_PORTS_PREFIX}{port}").into_bytes()
}

/// What a reservation key holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reservation {
    /// The owning Service, `namespace/name`.
    pub service: String,
    /// When it was reserved (RFC 3339).
    pub reserved: String,
}

impl Reservation {
    fn now(owner: &str) -> Reservation {
        Reservation {
            service: owner.to_string(),
            reserved: jiff::Timestamp::now().to_string(),
        }
    }

    fn decode(kv: &KeyValue) -> Option<Reservation> {
        serde_json::from_slice(&kv.value).ok()
    }

    fn age(&self) -> Option<Duration> {
        let at: jiff::Timestamp = self.reserved.parse().ok()?;
        let age = jiff::Timestamp::now().duration_since(at);
        Duration::try_from(age).ok()
    }
}

/// How a claim went.
#[derive(Debug, PartialEq, Eq)]
pub enum Claimed {
    /// Every key was created for the owner.
    All,
    /// None was created: `clashed` of the keys exist already (someone else holds them), and
    /// `reserved` is every value reserved at that moment, so that the loser's next pick is made
    /// knowing all of them rather than learning one clash per attempt.
    Taken {
        /// The asked-for keys that exist.
        clashed: BTreeSet<Vec<u8>>,
        /// Every reservation in the store when the claim failed.
        reserved: Reserved,
    },
}

/// The values reserved in the store at one revision.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Reserved ClusterIPs.
    pub ips: BTreeSet<Ipv4Addr>,
    /// Reserved NodePorts.
    pub ports: BTreeSet<u16>,
}

impl Reserved {
    fn insert_key(&mut self, key: &[u8]) {
        let text = String::from_utf8_lossy(key);
        if let Some(ip) = text.strip_prefix(SERVICE_IPS_PREFIX) {
            self.ips.extend(ip.parse::<Ipv4Addr>().ok());
        } else if let Some(port) = text.strip_prefix(NODE_PORTS_PREFIX) {
            self.ports.extend(port.parse::<u16>().ok());
        }
    }
}

/// Reads every reservation key, keys only.
fn read_every_reservation() -> Vec<Op> {
    [SERVICE_IPS_PREFIX, NODE_PORTS_PREFIX]
        .into_iter()
        .map(|prefix| {
            Op::Range(RangeRequest {
                keys_only: true,
                ..RangeRequest::new(KeyRange::prefix(prefix.as_bytes().to_vec()))
            })
        })
        .collect()
}

/// Creates every key in `keys` for `owner`, all or none, in one transaction; when some exist,
/// the same transaction reads every reservation for the caller's next pick.
pub async fn claim(store: &dyn Store, owner: &str, keys: &[Vec<u8>]) -> Result<Claimed> {
    if keys.is_empty() {
        return Ok(Claimed::All);
    }
    let value = serde_json::to_vec(&Reservation::now(owner)).expect("a reservation serializes");
    let response = store
        .txn(Txn {
            compare: keys
                .iter()
                .map(|k| Compare::not_exists(k.clone()))
                .collect(),
            success: keys
                .iter()
                .map(|k| Op::put(k.clone(), value.clone()))
                .collect(),
            failure: read_every_reservation(),
            tag: crate::origin::current(),
        })
        .await?;
    if response.succeeded {
        return Ok(Claimed::All);
    }
    let mut reserved = Reserved::default();
    let mut clashed = BTreeSet::new();
    for kv in response.responses.into_iter().flat_map(|r| match r {
        OpResponse::Range(range) => range.kvs,
        _ => Vec::new(),
    }) {
        reserved.insert_key(&kv.key);
        if keys.contains(&kv.key) {
            clashed.insert(kv.key);
        }
    }
    Ok(Claimed::Taken { clashed, reserved })
}

/// Deletes `key` if `owner` holds it (and nobody changed it since it was read).
pub async fn release(store: &dyn Store, owner: &str, key: &[u8]) -> Result<bool> {
    let read = store
        .range(RangeRequest::new(KeyRange::key(key.to_vec())))
        .await?;
    let Some(kv) = read.kvs.into_iter().next() else {
        return Ok(false);
    };
    if Reservation::decode(&kv).is_some_and(|r| r.service != owner) {
        return Ok(false);
    }
    delete_if_unchanged(store, &kv).await
}

async fn delete_if_unchanged(store: &dyn Store, kv: &KeyValue) -> Result<bool> {
    let response = store
        .txn(Txn {
            compare: vec![Compare::mod_revision_is(kv.key.clone(), kv.mod_revision)],
            success: vec![Op::delete(kv.key.clone())],
            failure: vec![],
            tag: crate::origin::current(),
        })
        .await?;
    Ok(response.succeeded)
}

/// What one [`repair`] pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Repaired {
    /// Keys created for Services that held a value without one.
    pub created: usize,
    /// Keys no Service holds, older than the grace period, deleted.
    pub deleted: usize,
    /// Values two Services hold at once (one of them got it before reservations were kept).
    pub duplicates: Vec<String>,
    /// Every reserved ClusterIP after the pass.
    pub ips: BTreeSet<Ipv4Addr>,
    /// Every reserved NodePort after the pass.
    pub ports: BTreeSet<u16>,
}

/// The `namespace/name` a reservation names.
pub fn owner_of(service: &Value) -> String {
    let (namespace, name) = crate::registry::namespace_and_name(service);
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// Makes the reservation keys agree with the stored Services: what `held` says each Service
/// holds (its in-range ClusterIPs and its NodePorts) gets a key; a key no Service holds goes once
/// it is older than `grace`.
pub async fn repair(
    store: &dyn Store,
    services_prefix: &[u8],
    held: impl Fn(&Value) -> (Vec<Ipv4Addr>, Vec<u16>),
    grace: Duration,
) -> Result<Repaired> {
    let services = store
        .range(RangeRequest::new(KeyRange::prefix(
            services_prefix.to_vec(),
        )))
        .await?;
    let at = services.revision;
    let mut wanted: BTreeMap<Vec<u8>, Vec<String>> = BTreeMap::new();
    for kv in &services.kvs {
        let Ok(service) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        let owner = owner_of(&service);
        let (ips, ports) = held(&service);
        for key in ips
            .into_iter()
            .map(ip_key)
            .chain(ports.into_iter().map(port_key))
        {
            wanted.entry(key).or_default().push(owner.clone());
        }
    }
    let mut existing = BTreeMap::new();
    for prefix in [SERVICE_IPS_PREFIX, NODE_PORTS_PREFIX] {
        let read = store
            .range(RangeRequest::new(KeyRange::prefix(prefix.as_bytes().to_vec())).at(at))
            .await?;
        existing.extend(read.kvs.into_iter().map(|kv| (kv.key.clone(), kv)));
    }
    let mut repaired = Repaired::default();
    for (key, owners) in &wanted {
        let text = String::from_utf8_lossy(key).into_owned();
        if owners.len() > 1 {
            repaired
                .duplicates
                .push(format!("{text} held by {}", owners.join(", ")));
        }
        match existing.get(key).and_then(Reservation::decode) {
            Some(r) if !owners.contains(&r.service) => repaired.duplicates.push(format!(
                "{text} reserved by {} but held by {}",
                r.service,
                owners.join(", ")
            )),
            Some(_) => {}
            None if existing.contains_key(key) => {}
            None => {
                if claim(store, &owners[0], std::slice::from_ref(key)).await? == Claimed::All {
                    repaired.created += 1;
                }
            }
        }
    }
    let mut kept: BTreeSet<Vec<u8>> = wanted.keys().cloned().collect();
    for (key, kv) in &existing {
        if wanted.contains_key(key) {
            continue;
        }
        let old = Reservation::decode(kv)
            .and_then(|r| r.age())
            .is_none_or(|age| age >= grace);
        if old && delete_if_unchanged(store, kv).await? {
            repaired.deleted += 1;
        } else {
            kept.insert(key.clone());
        }
    }
    let mut reserved = Reserved::default();
    for key in kept {
        reserved.insert_key(&key);
    }
    repaired.ips = reserved.ips;
    repaired.ports = reserved.ports;
    Ok(repaired)
}

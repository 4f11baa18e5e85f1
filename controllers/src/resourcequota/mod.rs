//! The resource-quota controller (kube-controller-manager's `resourcequota`): keeps each
//! ResourceQuota's `status.hard` equal to its `spec.hard` and its `status.used` equal to what the
//! namespace's objects use, as [`skiff_meta::quota`] counts it (the same rules the API server's
//! quota admission charges by).
//!
//! Admission charges `status.used` when an object is created; this controller gives usage back
//! (a pod that finished or was deleted, a deleted claim or Service) and recounts a quota whose
//! limits changed, plus every quota on a slow resync as a safety net (a create that failed after
//! admission charged it). As in Kubernetes, it does not recount on every create: a recount
//! racing an admitted object still on its way to the cache would undercount it.
//!
//! The recount itself is pure ([`recount`], [`status_changed`]); the shell
//! (`controller.rs`) gathers the namespace's objects from the informers' caches.

pub(crate) mod controller;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ResourceQuotaSpec, ResourceQuotaStatus};
use skiff_meta::quantity::Quantity;
use skiff_meta::quota::{self, Object, Usage};

/// One object of the namespace, with the resource it is of.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted<'a> {
    /// API group (`""` for core).
    pub group: &'a str,
    /// Plural resource name.
    pub plural: &'a str,
    /// The object, as the evaluator needs it.
    pub object: Object<'a>,
}

/// The status a quota with `spec` should have over `objects` (the namespace's objects of the
/// resources its limits name): `hard` as the spec says, `used` for every limited resource (zero
/// when nothing uses it).
pub(crate) fn recount(
    spec: &ResourceQuotaSpec,
    objects: &[Counted<'_>],
    now: Timestamp,
) -> ResourceQuotaStatus {
    let hard = quota::parse_list(spec.hard.as_ref());
    let mut used: Usage = hard
        .keys()
        .map(|k| (k.clone(), Quantity::from_units(0)))
        .collect();
    for counted in objects {
        if !quota::quota_selects(spec, counted.object) {
            continue;
        }
        let usage = quota::usage(counted.group, counted.plural, counted.object, now);
        used = quota::add(&used, &quota::masked(&usage, &hard));
    }
    ResourceQuotaStatus {
        hard: spec.hard.clone(),
        used: Some(quota::to_list(&used)),
    }
}

/// Whether `current` differs from `wanted` in amounts (`1000m` and `1` are the same).
pub(crate) fn status_changed(
    current: Option<&ResourceQuotaStatus>,
    wanted: &ResourceQuotaStatus,
) -> bool {
    let same = |a: Option<&std::collections::BTreeMap<_, _>>,
                b: Option<&std::collections::BTreeMap<_, _>>| {
        let (a, b) = (quota::parse_list(a), quota::parse_list(b));
        a == b
    };
    match current {
        None => true,
        Some(current) => {
            !same(current.hard.as_ref(), wanted.hard.as_ref())
                || !same(current.used.as_ref(), wanted.used.as_ref())
                // A hard list with keys that do not parse must still be mirrored.
                || current.hard.as_ref().map(|h| h.len()) != wanted.hard.as_ref().map(|h| h.len())
        }
    }
}

/// The resources (group, plural) whose objects a quota with `spec` needs recounted.
pub(crate) fn resources_of(spec: &ResourceQuotaSpec) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = spec
        .hard
        .iter()
        .flatten()
        .filter_map(|(name, _)| quota::counted_resource(name))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests;

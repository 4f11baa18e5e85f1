//! A controller's children through the API: claiming them (adopting matching orphans with a
//! controller reference, releasing its own that stopped matching), and creating and deleting
//! pods with the bookkeeping of [`Expectations`]. The decisions are pure ([`pods::claim`],
//! each controller's plan); this is the one place that carries them out.

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::json;
use skiff_client::Api;

use super::{Expectations, conflict, not_found};
use crate::pods::{self, Claim};
use crate::{Error, Result};

/// Which children an owner claims, and how.
pub struct Claims<S, A> {
    /// The controller reference the owner puts on what it adopts.
    pub owner: OwnerReference,
    /// Whether the owner is being deleted (it then neither adopts nor releases).
    pub deleting: bool,
    /// Whether the owner's selector matches a child.
    pub selects: S,
    /// Whether a matching orphan may be adopted (a DaemonSet leaves finished pods be).
    pub may_adopt: A,
    /// Whether owned children that no longer match are released (the DaemonSet controller
    /// keeps them).
    pub release: bool,
}

/// Claims `candidates` for `claims.owner`: returns the children it owns after adopting the
/// matching orphans (as the API returned them) and releasing those that stopped matching.
/// Children of other controllers are left alone; a child gone meanwhile is skipped.
pub async fn claim<K, S, A>(
    api: &Api<K>,
    claims: &Claims<S, A>,
    candidates: impl IntoIterator<Item = Arc<K>>,
) -> Result<Vec<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Fn(&K) -> bool,
    A: Fn(&K) -> bool,
{
    let uid = claims.owner.uid.as_str();
    let mut owned = Vec::new();
    for child in candidates {
        let meta = child.meta();
        let ns = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let (patch, adopting) =
            match pods::claim(uid, claims.deleting, (claims.selects)(&child), meta) {
                Claim::Owned => {
                    owned.push(child);
                    continue;
                }
                Claim::Adopt if (claims.may_adopt)(&child) => {
                    let mut refs = meta.owner_references.clone().unwrap_or_default();
                    refs.push(claims.owner.clone());
                    (
                        json!({"metadata": {"ownerReferences": refs, "uid": meta.uid}}),
                        true,
                    )
                }
                Claim::Release if claims.release => {
                    let refs: Vec<_> = meta
                        .owner_references
                        .iter()
                        .flatten()
                        .filter(|r| r.uid != uid)
                        .cloned()
                        .collect();
                    let refs = if refs.is_empty() {
                        serde_json::Value::Null
                    } else {
                        json!(refs)
                    };
                    (
                        json!({"metadata": {"ownerReferences": refs, "uid": meta.uid}}),
                        false,
                    )
                }
                _ => continue,
            };
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(c) if adopting => owned.push(Arc::new(c)),
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => {
                let verb = if adopting { "adopting" } else { "releasing" };
                return Err(Error::api(format!("{verb} {} {ns}/{name}", K::kind(&())))(
                    e,
                ));
            }
        }
    }
    Ok(owned)
}

/// Creates `new` pods for the owner `key`, whose expectations already count them: in batches
/// that start at `first_batch` and double (slow start: a broken template costs one request, not
/// `n`), stopping after the first batch with a failure. Every create that failed, or was not
/// tried, is marked observed, since no event will ever show it. Returns the first failure.
pub async fn create_pods(
    api: &Api<Pod>,
    expectations: &Expectations,
    key: &str,
    new: &[Pod],
    first_batch: usize,
) -> Result<(), kube::Error> {
    let pp = PostParams::default();
    let mut remaining = new;
    let mut batch = first_batch.max(1);
    while !remaining.is_empty() {
        let (now, rest) = remaining.split_at(batch.min(remaining.len()));
        remaining = rest;
        let results = join_all(now.iter().map(|p| api.create(&pp, p))).await;
        let mut error = None;
        for r in results {
            if let Err(e) = r {
                expectations.creation_observed(key);
                error.get_or_insert(e);
            }
        }
        if let Some(e) = error {
            for _ in remaining {
                expectations.creation_observed(key);
            }
            return Err(e);
        }
        batch = batch.saturating_mul(2);
    }
    Ok(())
}

/// Deletes the pods `names` of namespace `ns` for the owner `key`, whose expectations already
/// name them, all at once. A failed delete is marked observed; a pod already gone (404) or
/// changed (409) is no failure. Returns the first failure.
pub async fn delete_pods(
    api: &Api<Pod>,
    expectations: &Expectations,
    key: &str,
    ns: &str,
    names: &[String],
) -> Result<(), kube::Error> {
    let dp = DeleteParams::default();
    let results = join_all(names.iter().map(|n| api.delete(n, &dp))).await;
    let mut error = None;
    for (r, name) in results.into_iter().zip(names) {
        if let Err(e) = r {
            expectations.deletion_observed(key, &format!("{ns}/{name}"));
            if !not_found(&e) && !conflict(&e) {
                error.get_or_insert(e);
            }
        }
    }
    error.map_or(Ok(()), Err)
}

/// The pod keys (`namespace/name`) of `names` in `ns`, as expectations track deletions.
pub fn pod_keys(ns: &str, names: &[String]) -> Vec<String> {
    names.iter().map(|n| format!("{ns}/{n}")).collect()
}

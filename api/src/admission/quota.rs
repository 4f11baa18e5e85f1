//! kube-apiserver's `ResourceQuota` admission plugin, the last of the validating phase: a write
//! that would take a namespace over one of its ResourceQuotas is refused (403, `exceeded quota:
//! NAME, requested: ..., used: ..., limited: ...`), and one that fits is charged to every quota
//! that limits what it uses, in `status.used`, before it is written. Creates are charged what
//! the object uses; updates of Services and claims what they grow by. The resource-quota
//! controller gives usage back and recounts.
//!
//! As in Kubernetes, only the limits the controller has mirrored into `status.hard` are
//! enforced (a quota the controller has not seen yet enforces nothing), a quota whose usage of a
//! limited resource is not known yet refuses (`status unknown for quota`), and a quota limiting
//! `cpu` or `memory` requires every container of a pod to state them (`failed quota: NAME: must
//! specify ...`). Charging is a compare-and-swap on the quota, rechecked against the newest
//! usage, so two servers (or two requests) never both take the last unit.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota as Rq, Service};
use serde_json::{Value, json};
use skiff_kinds::builtin::{persistent_volume_claim, pod, resource_quota, service};
use skiff_meta::quota::{self, Object, Usage};

use super::{Attributes, Operation, Plugin};
use crate::error::{Error, Result};
use crate::mirror::Mirror;
use crate::registry::{Registry, Update};

/// The `ResourceQuota` plugin. It finds a namespace's quotas in its mirror, once that has seen
/// its first list, and otherwise in the log.
#[derive(Default)]
pub struct ResourceQuota(pub Arc<Mirror<Rq>>);

/// An object decoded for its evaluator.
enum Typed {
    Pod(Box<Pod>),
    Service(Box<Service>),
    Claim(Box<PersistentVolumeClaim>),
    Other,
}

impl Typed {
    fn of(a: &Attributes<'_>, object: &Value) -> Typed {
        fn decoded<T: serde::de::DeserializeOwned>(v: &Value) -> Option<Box<T>> {
            serde_json::from_value(v.clone()).ok().map(Box::new)
        }
        if a.info == &pod::INFO {
            decoded(object).map_or(Typed::Other, Typed::Pod)
        } else if a.info == &service::INFO {
            decoded(object).map_or(Typed::Other, Typed::Service)
        } else if a.info == &persistent_volume_claim::INFO {
            decoded(object).map_or(Typed::Other, Typed::Claim)
        } else {
            Typed::Other
        }
    }

    fn object(&self) -> Object<'_> {
        match self {
            Typed::Pod(p) => Object::Pod(p),
            Typed::Service(s) => Object::Service(s),
            Typed::Claim(c) => Object::Claim(c),
            Typed::Other => Object::Other,
        }
    }
}

/// What a quota says: its name, what it selects, and its mirrored limits and usage.
pub(crate) struct Limits {
    name: String,
    spec: k8s_openapi::api::core::v1::ResourceQuotaSpec,
    hard: Usage,
    used: Usage,
}

impl Limits {
    pub(crate) fn of(rq: &Rq) -> Limits {
        let status = rq.status.as_ref();
        Limits {
            name: rq.metadata.name.clone().unwrap_or_default(),
            spec: rq.spec.clone().unwrap_or_default(),
            hard: quota::parse_list(status.and_then(|s| s.hard.as_ref())),
            used: quota::parse_list(status.and_then(|s| s.used.as_ref())),
        }
    }
}

/// Why a charge was refused, worded as kube-apiserver's quota admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A container leaves out a resource the quota requires stated.
    MustSpecify {
        /// The quota.
        quota: String,
        /// `must specify ...`.
        detail: String,
    },
    /// The quota's usage of a limited resource is not known yet.
    StatusUnknown {
        /// The quota.
        quota: String,
        /// The resources without usage.
        resources: Vec<String>,
    },
    /// The charge would go over the limit.
    Exceeded {
        /// The quota.
        quota: String,
        /// What the write asks for, of the exceeded resources.
        requested: Usage,
        /// What is used of them.
        used: Usage,
        /// Their limits.
        limited: Usage,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::MustSpecify { quota, detail } => write!(f, "failed quota: {quota}: {detail}"),
            Refusal::StatusUnknown { quota, resources } => write!(
                f,
                "status unknown for quota: {quota}, resources: {}",
                resources.join(",")
            ),
            Refusal::Exceeded {
                quota: name,
                requested,
                used,
                limited,
            } => write!(
                f,
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                quota::pretty(requested),
                quota::pretty(used),
                quota::pretty(limited)
            ),
        }
    }
}

/// What a quota with `limits` is charged for a write that uses `delta` more (of an object
/// `object`), or why it refuses. `Ok(None)`: the quota does not limit anything the write uses.
pub(crate) fn charge(
    limits: &Limits,
    object: Object<'_>,
    delta: &Usage,
) -> std::result::Result<Option<Usage>, Refusal> {
    if limits.hard.is_empty() || !quota::quota_selects(&limits.spec, object) {
        return Ok(None);
    }
    if let Object::Pod(pod) = object
        && let Some(detail) = quota::missing_statements(pod, &limits.hard)
    {
        return Err(Refusal::MustSpecify {
            quota: limits.name.clone(),
            detail,
        });
    }
    let requested = quota::masked(delta, &limits.hard);
    if requested.is_empty() {
        return Ok(None);
    }
    let unknown: Vec<String> = requested
        .keys()
        .filter(|k| !limits.used.contains_key(*k))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(Refusal::StatusUnknown {
            quota: limits.name.clone(),
            resources: unknown,
        });
    }
    let new_used = quota::add(&limits.used, &requested);
    let exceeded: Vec<&String> = requested
        .keys()
        .filter(|k| new_used[*k] > limits.hard[*k])
        .collect();
    if !exceeded.is_empty() {
        let only = |u: &Usage| -> Usage {
            exceeded
                .iter()
                .filter_map(|k| Some(((*k).clone(), *u.get(*k)?)))
                .collect()
        };
        return Err(Refusal::Exceeded {
            quota: limits.name.clone(),
            requested: only(&requested),
            used: only(&limits.used),
            limited: only(&limits.hard),
        });
    }
    Ok(Some(new_used))
}

/// What the write adds to the namespace's usage: all an object uses on create; on update, what
/// a Service or claim grew by (pods' resources do not change; other kinds are only counted).
fn delta(a: &Attributes<'_>, new: &Typed) -> Option<Usage> {
    let group = a.info.group;
    let plural = a.info.plural;
    let now = jiff::Timestamp::now();
    match a.operation {
        Operation::Create => Some(quota::usage(group, plural, new.object(), now)),
        Operation::Update
            if matches!(new, Typed::Service(_) | Typed::Claim(_)) && a.old.is_some() =>
        {
            let old = Typed::of(a, a.old?);
            Some(quota::increase(
                &quota::usage(group, plural, new.object(), now),
                &quota::usage(group, plural, old.object(), now),
            ))
        }
        _ => None,
    }
}

/// Writes `used` into the quota's status, if the quota still allows the charge against its
/// newest usage (recomputed on every attempt of the compare-and-swap).
async fn apply_charge(
    registry: &Registry,
    a: &Attributes<'_>,
    namespace: &str,
    name: &str,
    object: Object<'_>,
    delta: &Usage,
) -> Result<()> {
    let refused = std::sync::Mutex::new(None);
    let outcome = registry
        .update(
            &resource_quota::INFO,
            Some(namespace),
            name,
            None,
            false,
            |current: Value| {
                let decided = match serde_json::from_value::<Rq>(current.clone()) {
                    Err(_) => Ok(None),
                    Ok(rq) => charge(&Limits::of(&rq), object, delta),
                };
                let next = match decided {
                    Ok(Some(used)) => {
                        let mut next = current;
                        next["status"]["used"] = json!(quota::to_list(&used));
                        Update::Write(next)
                    }
                    Ok(None) => Update::Write(current),
                    Err(refusal) => {
                        *refused.lock().expect("not poisoned") = Some(refusal);
                        Update::Write(current)
                    }
                };
                async move { Ok(next) }
            },
        )
        .await;
    match outcome {
        // Deleted meanwhile: it limits nothing any more.
        Err(Error::NotFound { .. }) => {}
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    match refused.into_inner().expect("not poisoned") {
        Some(refusal) => Err(super::forbidden(a, refusal)),
        None => Ok(()),
    }
}

#[async_trait::async_trait]
impl Plugin for ResourceQuota {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    async fn admit(&self, _registry: &Registry, _a: &mut Attributes<'_>) -> Result<()> {
        Ok(())
    }

    async fn validate(&self, registry: &Registry, a: &Attributes<'_>) -> Result<()> {
        let (Some(namespace), None, Some(object)) =
            (a.namespace, a.subresource, a.object.as_deref())
        else {
            return Ok(());
        };
        // Only creates, and updates of the kinds whose usage can grow, can be charged.
        let chargeable = match a.operation {
            Operation::Create => true,
            Operation::Update => {
                a.info == &service::INFO || a.info == &persistent_volume_claim::INFO
            }
            _ => false,
        };
        if !chargeable {
            return Ok(());
        }
        let mirrored = self.0.synced();
        let quotas = if mirrored {
            self.0.in_namespace(namespace)
        } else {
            quotas_in(registry, namespace).await?
        };
        if quotas.is_empty() {
            return Ok(());
        }
        let typed = Typed::of(a, object);
        let Some(delta) = delta(a, &typed) else {
            return Ok(());
        };
        let charged = match to_charge(&quotas, typed.object(), &delta) {
            // The mirror may be a watch delivery behind (usage given back a moment ago, a quota
            // just deleted): a refusal is decided again on the log's quotas.
            Err(_) if mirrored => to_charge(
                &quotas_in(registry, namespace).await?,
                typed.object(),
                &delta,
            ),
            decided => decided,
        }
        .map_err(|refusal| super::forbidden(a, refusal))?;
        // A dry run is checked but charges nothing.
        if a.dry_run {
            return Ok(());
        }
        for name in charged {
            apply_charge(registry, a, namespace, &name, typed.object(), &delta).await?;
        }
        Ok(())
    }
}

/// The names of the quotas that limit what the write uses, if every quota allows it (the first
/// refusal by name otherwise). `quotas` are in the order of their names.
fn to_charge(
    quotas: &[Arc<Rq>],
    object: Object<'_>,
    delta: &Usage,
) -> std::result::Result<Vec<String>, Refusal> {
    let mut charged = Vec::new();
    for rq in quotas {
        if charge(&Limits::of(rq), object, delta)?.is_some() {
            charged.push(rq.metadata.name.clone().unwrap_or_default());
        }
    }
    Ok(charged)
}

/// The quotas of `namespace` as the log has them now, in the order of their names.
async fn quotas_in(registry: &Registry, namespace: &str) -> Result<Vec<Arc<Rq>>> {
    let page = registry
        .list(
            &resource_quota::INFO,
            Some(namespace),
            None,
            None,
            None,
            None,
        )
        .await?;
    let mut quotas: Vec<Rq> = page
        .items
        .into_iter()
        .filter_map(|q| serde_json::from_value(q).ok())
        .collect();
    quotas.sort_by(|x, y| x.metadata.name.cmp(&y.metadata.name));
    Ok(quotas.into_iter().map(Arc::new).collect())
}

#[cfg(test)]
mod tests;

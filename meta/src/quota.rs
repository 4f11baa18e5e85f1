//! ResourceQuota semantics shared by the API server (the quota's validation and the
//! `ResourceQuota` admission plugin) and the resource-quota controller, so that what admission
//! charges and what the controller recounts agree by construction: which resource names a quota
//! may limit, which objects a quota's scopes select, and what one object uses.
//!
//! Usage follows kube-apiserver's evaluators: a pod counts while it is not terminal (and not past
//! its deletion grace period) and uses `pods`, `count/pods`, its requests (`requests.cpu`, also
//! spelled `cpu`; `requests.memory`/`memory`; `requests.ephemeral-storage`; hugepages and
//! extended resources as `requests.NAME`) and limits (`limits.cpu`, `limits.memory`,
//! `limits.ephemeral-storage`), computed as the scheduler does (init containers by their
//! maximum, sidecars added, pod overhead on top). A Service uses `services`,
//! `services.nodeports` and `services.loadbalancers`; a claim `persistentvolumeclaims`,
//! `requests.storage` and their per-class forms `CLASS.storageclass.storage.k8s.io/...`. Every
//! object uses `count/RESOURCE.GROUP` (`count/RESOURCE` in the core group).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, Pod, ResourceQuotaSpec, ScopedResourceSelectorRequirement,
    Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::quantity::{self, Quantity};

/// What an object uses, or what a quota allows: resource name to amount.
pub type Usage = BTreeMap<String, Quantity>;

/// The object-count names that predate `count/` and still work.
pub const LEGACY_COUNTS: &[(&str, &str)] = &[
    ("pods", "pods"),
    ("services", "services"),
    ("replicationcontrollers", "replicationcontrollers"),
    ("resourcequotas", "resourcequotas"),
    ("secrets", "secrets"),
    ("configmaps", "configmaps"),
    ("persistentvolumeclaims", "persistentvolumeclaims"),
];

/// The resource names without a `/` that a quota may limit (`IsStandardQuotaResourceName`);
/// `requests.hugepages-*`, `hugepages-*` and names with a `/` are allowed besides.
pub const STANDARD: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
];

/// The pod resources whose quota makes every container state them (`cpu`, `memory`, their
/// `requests.` and `limits.` forms).
const MUST_BE_STATED: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// The scopes a quota may name.
pub const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

/// The suffix of a storage-class-specific claim resource.
pub const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// Whether `name` may be a key of a quota's `hard`.
pub fn is_quota_resource(name: &str) -> bool {
    STANDARD.contains(&name)
        || name.contains('/')
        || name.starts_with("hugepages-")
        || name.starts_with("requests.hugepages-")
}

/// Whether amounts of `name` must be whole numbers (object counts and extended resources).
pub fn is_integer_resource(name: &str) -> bool {
    LEGACY_COUNTS.iter().any(|(n, _)| *n == name)
        || matches!(name, "services.nodeports" | "services.loadbalancers")
        || name.starts_with("count/")
        || name.ends_with("/persistentvolumeclaims")
        || (name.contains('/')
            && !name.starts_with("requests.")
            && !name.contains(STORAGE_CLASS_SUFFIX))
}

/// Whether a quota with `scope` may limit `resource` (`ValidateResourceQuotaScopes`'s table):
/// BestEffort quotas count pods only; the other pod scopes count pods and compute resources.
pub fn scope_supports(scope: &str, resource: &str) -> bool {
    let pods = matches!(resource, "pods" | "count/pods");
    match scope {
        "BestEffort" => pods,
        "Terminating"
        | "NotTerminating"
        | "NotBestEffort"
        | "PriorityClass"
        | "CrossNamespacePodAffinity" => pods || is_compute(resource),
        _ => false,
    }
}

fn is_compute(resource: &str) -> bool {
    matches!(
        resource,
        "cpu"
            | "memory"
            | "ephemeral-storage"
            | "requests.cpu"
            | "requests.memory"
            | "requests.ephemeral-storage"
            | "limits.cpu"
            | "limits.memory"
            | "limits.ephemeral-storage"
    ) || resource.starts_with("requests.hugepages-")
        || resource.starts_with("hugepages-")
}

/// The `count/` name of a resource (`count/pods`, `count/deployments.apps`).
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// The resource `(group, plural)` whose objects use the quota resource `name`, for a recount:
/// pods for the compute names, Services, claims, the legacy counts, and `count/RESOURCE.GROUP`.
/// `None` for a name no object uses (extended resources other than requests, typos).
pub fn counted_resource(name: &str) -> Option<(String, String)> {
    let core = |plural: &str| Some((String::new(), plural.to_string()));
    if let Some(rest) = name.strip_prefix("count/") {
        return Some(match rest.split_once('.') {
            Some((plural, group)) => (group.to_string(), plural.to_string()),
            None => (String::new(), rest.to_string()),
        });
    }
    if let Some((_, plural)) = LEGACY_COUNTS.iter().find(|(n, _)| *n == name) {
        return core(plural);
    }
    match name {
        "services.nodeports" | "services.loadbalancers" => core("services"),
        "requests.storage" => core("persistentvolumeclaims"),
        n if n.contains(STORAGE_CLASS_SUFFIX) => core("persistentvolumeclaims"),
        n if is_compute(n) || n.starts_with("requests.") => core("pods"),
        _ => None,
    }
}

/// The object an evaluator looks at: the kinds with their own usage, or any other (which counts
/// as one of its resource).
#[derive(Debug, Clone, Copy)]
pub enum Object<'a> {
    /// A pod.
    Pod(&'a Pod),
    /// A Service.
    Service(&'a Service),
    /// A PersistentVolumeClaim.
    Claim(&'a PersistentVolumeClaim),
    /// Anything else, counted only.
    Other,
}

/// What `object` (of resource `plural` in `group`) uses. A pod that no longer counts
/// ([`pod_counts`]) uses nothing.
pub fn usage(group: &str, plural: &str, object: Object<'_>, now: jiff::Timestamp) -> Usage {
    let mut usage = Usage::new();
    match object {
        Object::Pod(pod) if !pod_counts(pod, now) => return usage,
        Object::Pod(pod) => pod_usage(pod, &mut usage),
        Object::Service(service) => service_usage(service, &mut usage),
        Object::Claim(claim) => claim_usage(claim, &mut usage),
        Object::Other => {}
    }
    usage.insert(count_name(group, plural), Quantity::from_units(1));
    if group.is_empty()
        && let Some((legacy, _)) = LEGACY_COUNTS.iter().find(|(_, p)| *p == plural)
    {
        usage.insert((*legacy).into(), Quantity::from_units(1));
    }
    usage
}

/// Whether a pod still uses quota (`QuotaV1Pod`): not Succeeded or Failed, and not past the end
/// of its deletion grace period.
pub fn pod_counts(pod: &Pod, now: jiff::Timestamp) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    if let (Some(deleted), Some(grace)) = (
        pod.metadata.deletion_timestamp.as_ref(),
        pod.metadata.deletion_grace_period_seconds,
    ) && deleted.0 + jiff::SignedDuration::from_secs(grace) < now
    {
        return false;
    }
    true
}

fn parsed(list: Option<&BTreeMap<String, K8sQuantity>>) -> BTreeMap<String, Quantity> {
    list.into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), quantity::parse(&v.0).ok()?)))
        .collect()
}

fn add_into(total: &mut BTreeMap<String, Quantity>, more: &BTreeMap<String, Quantity>) {
    for (k, v) in more {
        let sum = total.get(k).map_or(*v, |t| t.add(v));
        total.insert(k.clone(), sum);
    }
}

fn max_into(total: &mut BTreeMap<String, Quantity>, other: &BTreeMap<String, Quantity>) {
    for (k, v) in other {
        if total.get(k).is_none_or(|t| t < v) {
            total.insert(k.clone(), *v);
        }
    }
}

/// A pod's effective requests or limits (`PodRequests`/`PodLimits`): the app containers and
/// sidecars summed, at least each plain init container plus the sidecars started before it,
/// plus the pod's overhead.
pub fn pod_resources(pod: &Pod, limits: bool) -> BTreeMap<String, Quantity> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let of = |c: &Container| {
        let r = c.resources.as_ref();
        parsed(if limits {
            r.and_then(|r| r.limits.as_ref())
        } else {
            r.and_then(|r| r.requests.as_ref())
        })
    };
    let mut total = BTreeMap::new();
    for c in &spec.containers {
        add_into(&mut total, &of(c));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_peak = BTreeMap::new();
    for c in spec.init_containers.iter().flatten() {
        let own = of(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut with_sidecars = own;
            add_into(&mut with_sidecars, &sidecars);
            max_into(&mut init_peak, &with_sidecars);
        }
    }
    max_into(&mut total, &init_peak);
    add_into(&mut total, &parsed(spec.overhead.as_ref()));
    total
}

/// The quota names of a set of requests and limits (`podComputeUsageHelper`).
fn compute_usage(
    requests: &BTreeMap<String, Quantity>,
    limits: &BTreeMap<String, Quantity>,
    usage: &mut Usage,
) {
    for (name, amount) in requests {
        match name.as_str() {
            "cpu" | "memory" | "ephemeral-storage" => {
                usage.insert(name.clone(), *amount);
                usage.insert(format!("requests.{name}"), *amount);
            }
            other if other.starts_with("hugepages-") || other.contains('/') => {
                usage.insert(format!("requests.{other}"), *amount);
            }
            _ => {}
        }
    }
    for (name, amount) in limits {
        if matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage") {
            usage.insert(format!("limits.{name}"), *amount);
        }
    }
}

fn pod_usage(pod: &Pod, usage: &mut Usage) {
    compute_usage(&pod_resources(pod, false), &pod_resources(pod, true), usage);
}

fn service_usage(service: &Service, usage: &mut Usage) {
    let spec = service.spec.clone().unwrap_or_default();
    let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
    let ports = spec.ports.as_ref().map_or(0, Vec::len) as i64;
    let node_ports = match kind {
        "NodePort" => ports,
        "LoadBalancer" if spec.allocate_load_balancer_node_ports != Some(false) => ports,
        _ => 0,
    };
    usage.insert(
        "services.nodeports".into(),
        Quantity::from_units(node_ports),
    );
    usage.insert(
        "services.loadbalancers".into(),
        Quantity::from_units(i64::from(kind == "LoadBalancer")),
    );
}

/// A claim's class: `spec.storageClassName`, else the beta annotation.
fn claim_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .or_else(|| {
            claim
                .metadata
                .annotations
                .as_ref()?
                .get("volume.beta.kubernetes.io/storage-class")
                .map(String::as_str)
        })
        .filter(|c| !c.is_empty())
}

fn claim_usage(claim: &PersistentVolumeClaim, usage: &mut Usage) {
    let class = claim_class(claim);
    if let Some(class) = class {
        usage.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            Quantity::from_units(1),
        );
    }
    let requested = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| quantity::parse(&q.0).ok());
    // A claim being expanded uses the larger of what it asked for and what was allocated.
    let allocated = claim
        .status
        .as_ref()
        .and_then(|s| s.allocated_resources.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| quantity::parse(&q.0).ok());
    let storage = match (requested, allocated) {
        (Some(r), Some(a)) => Some(r.max(a)),
        (r, a) => r.or(a),
    };
    if let Some(storage) = storage {
        usage.insert("requests.storage".into(), storage);
        if let Some(class) = class {
            usage.insert(
                format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                storage,
            );
        }
    }
}

/// The scope selector of a quota: its `scopes` (each as `Exists`) and its `scopeSelector`'s
/// expressions, all of which an object must match.
pub fn scope_requirements(spec: &ResourceQuotaSpec) -> Vec<ScopedResourceSelectorRequirement> {
    let mut all: Vec<_> = spec
        .scopes
        .iter()
        .flatten()
        .map(|scope| ScopedResourceSelectorRequirement {
            scope_name: scope.clone(),
            operator: "Exists".into(),
            values: None,
        })
        .collect();
    if let Some(selector) = &spec.scope_selector {
        all.extend(selector.match_expressions.iter().flatten().cloned());
    }
    all
}

/// Whether a quota with `spec` selects `object`: an unscoped quota selects every object of its
/// namespace; a scoped one only pods matching every scope.
pub fn quota_selects(spec: &ResourceQuotaSpec, object: Object<'_>) -> bool {
    let requirements = scope_requirements(spec);
    if requirements.is_empty() {
        return true;
    }
    let Object::Pod(pod) = object else {
        return false;
    };
    requirements.iter().all(|r| pod_matches_scope(pod, r))
}

fn pod_matches_scope(pod: &Pod, requirement: &ScopedResourceSelectorRequirement) -> bool {
    let spec = pod.spec.clone().unwrap_or_default();
    match requirement.scope_name.as_str() {
        "Terminating" => spec.active_deadline_seconds.is_some_and(|s| s >= 0),
        "NotTerminating" => spec.active_deadline_seconds.is_none_or(|s| s < 0),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "PriorityClass" => {
            let class = spec.priority_class_name.as_deref().unwrap_or_default();
            let values = requirement.values.as_deref().unwrap_or_default();
            match requirement.operator.as_str() {
                "In" => values.iter().any(|v| v == class),
                "NotIn" => !values.iter().any(|v| v == class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
        _ => false,
    }
}

/// Whether no container of the pod requests or limits CPU or memory (the BestEffort QoS class).
pub fn is_best_effort(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .all(|c| {
            let r = c.resources.as_ref();
            [
                r.and_then(|r| r.requests.as_ref()),
                r.and_then(|r| r.limits.as_ref()),
            ]
            .into_iter()
            .flatten()
            .all(|list| !list.contains_key("cpu") && !list.contains_key("memory"))
        })
}

fn uses_cross_namespace_affinity(pod: &Pod) -> bool {
    let Some(affinity) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
        return false;
    };
    let mut terms = Vec::new();
    if let Some(a) = &affinity.pod_affinity {
        terms.extend(
            a.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten(),
        );
        terms.extend(
            a.preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|w| &w.pod_affinity_term),
        );
    }
    if let Some(a) = &affinity.pod_anti_affinity {
        terms.extend(
            a.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten(),
        );
        terms.extend(
            a.preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|w| &w.pod_affinity_term),
        );
    }
    terms.iter().any(|t| {
        t.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || t.namespace_selector.is_some()
    })
}

/// The resources of `usage` that a quota with `hard` limits.
pub fn masked(usage: &Usage, hard: &Usage) -> Usage {
    usage
        .iter()
        .filter(|(k, _)| hard.contains_key(*k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The containers that fail to state a resource a quota limits (`cpu`/`memory` quotas require
/// every container to state them), as kube-apiserver's message: `must specify limits.cpu for:
/// a,b; requests.memory for: a`. `None` when nothing is missing.
pub fn missing_statements(pod: &Pod, hard: &Usage) -> Option<String> {
    let required: BTreeSet<&str> = MUST_BE_STATED
        .iter()
        .copied()
        .filter(|r| hard.contains_key(*r))
        .collect();
    if required.is_empty() {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let mut missing: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let r = c.resources.as_ref();
        let mut stated = Usage::new();
        compute_usage(
            &parsed(r.and_then(|r| r.requests.as_ref())),
            &parsed(r.and_then(|r| r.limits.as_ref())),
            &mut stated,
        );
        for resource in &required {
            if !stated.contains_key(*resource) {
                missing.entry(resource).or_default().insert(c.name.as_str());
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(resource, containers)| {
            let names: Vec<&str> = containers.iter().copied().collect();
            format!("{resource} for: {}", names.join(","))
        })
        .collect();
    Some(format!("must specify {}", parts.join("; ")))
}

/// `a + b`, per resource.
pub fn add(a: &Usage, b: &Usage) -> Usage {
    let mut out = a.clone();
    add_into(&mut out, b);
    out
}

/// `new - old` per resource of `new`, never below zero (what an update adds).
pub fn increase(new: &Usage, old: &Usage) -> Usage {
    new.iter()
        .map(|(k, v)| {
            let before = old.get(k).copied().unwrap_or(Quantity::from_units(0));
            let grown = v.sub(&before);
            (
                k.clone(),
                if grown.is_negative() {
                    Quantity::from_units(0)
                } else {
                    grown
                },
            )
        })
        .collect()
}

/// `k1=v1,k2=v2`, sorted (how quota messages print usage).
pub fn pretty(usage: &Usage) -> String {
    usage
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a quota's `hard`/`used` list; names that do not parse are left out.
pub fn parse_list(list: Option<&BTreeMap<String, K8sQuantity>>) -> Usage {
    parsed(list)
}

/// Renders a usage as a k8s-openapi resource list, in canonical form.
pub fn to_list(usage: &Usage) -> BTreeMap<String, K8sQuantity> {
    usage
        .iter()
        .map(|(k, v)| (k.clone(), K8sQuantity(v.to_string())))
        .collect()
}

#[cfg(test)]
mod tests;

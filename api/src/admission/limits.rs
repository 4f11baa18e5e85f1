//! kube-apiserver's `LimitRanger` admission plugin: the LimitRanges of a namespace give a new
//! pod's containers the requests and limits they do not state (`defaultRequest`, `default`,
//! recorded in the `kubernetes.io/limit-ranger` annotation), then refuse a pod, container or
//! claim outside a range's `min`, `max` or `maxLimitRequestRatio` (403, with kube-apiserver's
//! words). Pods are checked when created (their resources never change afterwards); claims
//! when created or updated.
//!
//! The decisions are pure functions over typed objects ([`apply_defaults`], [`check_pod`],
//! [`check_claim`]); the plugin reads the namespace's ranges and calls them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};
use skiff_kinds::builtin::{limit_range, persistent_volume_claim, pod};
use skiff_meta::quantity::Quantity;
// Amounts by resource name, parsed as quota parses them (unparsable amounts left out).
use skiff_meta::quota::{Usage as List, parse_list as parsed};

use super::{Attributes, Operation, Plugin};
use crate::error::Result;
use crate::registry::Registry;

/// The annotation naming what the plugin filled in.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// The `LimitRanger` plugin.
pub struct LimitRanger;

/// The Container items of `ranges`, in order.
fn container_items(ranges: &[LimitRange]) -> impl Iterator<Item = &LimitRangeItem> {
    items(ranges).filter(|i| i.type_ == "Container")
}

fn items(ranges: &[LimitRange]) -> impl Iterator<Item = &LimitRangeItem> {
    ranges
        .iter()
        .flat_map(|r| r.spec.iter().flat_map(|s| s.limits.iter()))
}

/// Fills the requests and limits `pod`'s containers leave out from the ranges' Container items
/// (the first range that names a resource wins), and records what it set in the
/// [`ANNOTATION`] as Kubernetes words it. Returns whether anything changed.
pub fn apply_defaults(pod: &mut Value, ranges: &[LimitRange]) -> bool {
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    for item in container_items(ranges) {
        for (k, v) in item.default_request.iter().flatten() {
            requests.entry(k.clone()).or_insert_with(|| v.0.clone());
        }
        for (k, v) in item.default.iter().flatten() {
            limits.entry(k.clone()).or_insert_with(|| v.0.clone());
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return false;
    }
    let mut notes = Vec::new();
    for (field, what) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(containers) = pod["spec"][field].as_array_mut() else {
            continue;
        };
        for container in containers.iter_mut() {
            let name = container["name"].as_str().unwrap_or_default().to_string();
            let Some(c) = container.as_object_mut() else {
                continue;
            };
            let resources = c.entry("resources").or_insert_with(|| json!({}));
            if !resources.is_object() {
                *resources = json!({});
            }
            let mut set_requests = Vec::new();
            let mut set_limits = Vec::new();
            for (key, defaults, set) in [
                ("limits", &limits, &mut set_limits),
                ("requests", &requests, &mut set_requests),
            ] {
                if defaults.is_empty() {
                    continue;
                }
                let list = resources
                    .as_object_mut()
                    .expect("made an object above")
                    .entry(key)
                    .or_insert_with(|| json!({}));
                if !list.is_object() {
                    *list = json!({});
                }
                let list = list.as_object_mut().expect("made an object above");
                for (resource, amount) in defaults {
                    if !list.contains_key(resource) {
                        list.insert(resource.clone(), json!(amount));
                        set.push(resource.clone());
                    }
                }
            }
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {what} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if notes.is_empty() {
        return false;
    }
    let metadata = pod
        .as_object_mut()
        .and_then(|o| {
            o.entry("metadata")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        })
        .expect("a pod is an object");
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[ANNOTATION] = json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    true
}

/// `minConstraint`.
fn min_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &List,
    limits: &List,
) -> Option<String> {
    let Some(request) = requests.get(resource) else {
        return Some(format!(
            "minimum {resource} usage per {kind} is {enforced}.  No request is specified"
        ));
    };
    if request < enforced {
        return Some(format!(
            "minimum {resource} usage per {kind} is {enforced}, but request is {request}"
        ));
    }
    if let Some(limit) = limits.get(resource)
        && limit < enforced
    {
        return Some(format!(
            "minimum {resource} usage per {kind} is {enforced}, but limit is {limit}"
        ));
    }
    None
}

/// `maxRequestConstraint` (claims: only a request to check).
fn max_request_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &List,
) -> Option<String> {
    let Some(request) = requests.get(resource) else {
        return Some(format!(
            "maximum {resource} usage per {kind} is {enforced}.  No request is specified"
        ));
    };
    (request > enforced).then(|| {
        format!("maximum {resource} usage per {kind} is {enforced}, but request is {request}")
    })
}

/// `maxConstraint`.
fn max_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &List,
    limits: &List,
) -> Option<String> {
    let Some(limit) = limits.get(resource) else {
        return Some(format!(
            "maximum {resource} usage per {kind} is {enforced}.  No limit is specified"
        ));
    };
    if limit > enforced {
        return Some(format!(
            "maximum {resource} usage per {kind} is {enforced}, but limit is {limit}"
        ));
    }
    if let Some(request) = requests.get(resource)
        && request > enforced
    {
        return Some(format!(
            "maximum {resource} usage per {kind} is {enforced}, but request is {request}"
        ));
    }
    None
}

/// `limitRequestRatioConstraint`.
fn ratio_constraint(
    kind: &str,
    resource: &str,
    enforced: &Quantity,
    requests: &List,
    limits: &List,
) -> Option<String> {
    let request = requests.get(resource).filter(|q| !q.is_zero());
    let limit = limits.get(resource).filter(|q| !q.is_zero());
    let Some(request) = request else {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
        ));
    };
    let Some(limit) = limit else {
        return Some(format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
        ));
    };
    let observed = limit.nanos() as f64 / request.nanos() as f64;
    let most = enforced.nanos() as f64 / 1e9;
    (observed > most).then(|| {
        format!(
            "{resource} max limit to request ratio per {kind} is {enforced}, but provided ratio is {observed:.6}"
        )
    })
}

/// Every bound of `item` that `requests` and `limits` break.
fn check_item(kind: &str, item: &LimitRangeItem, requests: &List, limits: &List) -> Vec<String> {
    let mut errs = Vec::new();
    for (resource, enforced) in parsed(item.min.as_ref()) {
        errs.extend(min_constraint(kind, &resource, &enforced, requests, limits));
    }
    for (resource, enforced) in parsed(item.max.as_ref()) {
        errs.extend(max_constraint(kind, &resource, &enforced, requests, limits));
    }
    for (resource, enforced) in parsed(item.max_limit_request_ratio.as_ref()) {
        errs.extend(ratio_constraint(
            kind, &resource, &enforced, requests, limits,
        ));
    }
    errs
}

/// What `pod` breaks of the ranges' Container and Pod items (`PodValidateLimitFunc`).
pub fn check_pod(pod: &Pod, ranges: &[LimitRange]) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    for item in items(ranges) {
        match item.type_.as_str() {
            "Container" => {
                for c in spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                {
                    let r = c.resources.as_ref();
                    let requests = parsed(r.and_then(|r| r.requests.as_ref()));
                    let limits = parsed(r.and_then(|r| r.limits.as_ref()));
                    errs.extend(check_item("Container", item, &requests, &limits));
                }
            }
            "Pod" => {
                let requests = skiff_meta::quota::pod_resources(pod, false);
                let limits = skiff_meta::quota::pod_resources(pod, true);
                errs.extend(check_item("Pod", item, &requests, &limits));
            }
            _ => {}
        }
    }
    errs
}

/// What `claim` breaks of the ranges' PersistentVolumeClaim items: its storage request within
/// `min` and `max`.
pub fn check_claim(claim: &PersistentVolumeClaim, ranges: &[LimitRange]) -> Vec<String> {
    let requests = parsed(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    );
    let kind = "PersistentVolumeClaim";
    let mut errs = Vec::new();
    for item in items(ranges).filter(|i| i.type_ == kind) {
        for (resource, enforced) in parsed(item.min.as_ref()) {
            errs.extend(min_constraint(
                kind,
                &resource,
                &enforced,
                &requests,
                &List::new(),
            ));
        }
        for (resource, enforced) in parsed(item.max.as_ref()) {
            errs.extend(max_request_constraint(
                kind, &resource, &enforced, &requests,
            ));
        }
    }
    errs
}

/// Several refusals as one message, as apimachinery's aggregate error prints them: the one
/// message alone, or `[a, b]` without repeats.
pub fn aggregate(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The LimitRanges of `namespace`.
async fn ranges_of(registry: &Registry, namespace: &str) -> Result<Vec<LimitRange>> {
    let page = registry
        .list(&limit_range::INFO, Some(namespace), None, None, None, None)
        .await?;
    Ok(page
        .items
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

/// Whether the plugin looks at this request: pod creates, claim creates and updates.
fn concerns(a: &Attributes<'_>) -> bool {
    a.subresource.is_none()
        && a.namespace.is_some()
        && ((a.info == &pod::INFO && a.operation == Operation::Create)
            || (a.info == &persistent_volume_claim::INFO
                && matches!(a.operation, Operation::Create | Operation::Update)))
}

#[async_trait::async_trait]
impl Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if !concerns(a) || a.info != &pod::INFO {
            return Ok(());
        }
        let namespace = a.namespace.unwrap_or_default().to_string();
        let Some(object) = a.object.as_deref_mut() else {
            return Ok(());
        };
        let ranges = ranges_of(registry, &namespace).await?;
        if !ranges.is_empty() {
            apply_defaults(object, &ranges);
        }
        Ok(())
    }

    async fn validate(&self, registry: &Registry, a: &Attributes<'_>) -> Result<()> {
        if !concerns(a) {
            return Ok(());
        }
        let Some(object) = a.object.as_deref() else {
            return Ok(());
        };
        let ranges = ranges_of(registry, a.namespace.unwrap_or_default()).await?;
        if ranges.is_empty() {
            return Ok(());
        }
        let errs = if a.info == &pod::INFO {
            match serde_json::from_value::<Pod>(object.clone()) {
                Ok(pod) => check_pod(&pod, &ranges),
                Err(_) => return Ok(()),
            }
        } else {
            match serde_json::from_value::<PersistentVolumeClaim>(object.clone()) {
                Ok(claim) => check_claim(&claim, &ranges),
                Err(_) => return Ok(()),
            }
        };
        if errs.is_empty() {
            return Ok(());
        }
        Err(super::forbidden(a, aggregate(&errs)))
    }
}

#[cfg(test)]
mod tests;

//! apps/v1 rules: Deployments, ReplicaSets, DaemonSets and StatefulSets (`pkg/apis/apps/validation`),
//! and core/v1 ReplicationControllers, the ReplicaSet's predecessor: selector
//! required, non-empty, matching the template and immutable; templates as pod templates that
//! restart Always; strategies; counts.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use skiff_meta::ResourceInfo;

use super::meta::{validate_label_name, validate_labels};
use super::pod::validate_pod_template;
use super::{FieldError, Path};
use super::{decode, names, s};

const NEGATIVE: &str = "must be greater than or equal to 0";

fn nonnegative(errs: &mut Vec<FieldError>, path: Path, v: i64) {
    if v < 0 {
        errs.push(FieldError::invalid(path, v, NEGATIVE));
    }
}

/// `ValidateLabelSelector` (strict label values).
pub(crate) fn validate_label_selector(sel: &LabelSelector, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_labels(sel.match_labels.as_ref(), &path.child("matchLabels"));
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let p = path.child("matchExpressions").index(i);
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        p.child("values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(FieldError::forbidden(
                        p.child("values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            other => errs.push(FieldError::invalid(
                p.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        errs.extend(validate_label_name(&req.key, &p.child("key")));
        for (vi, v) in values.iter().enumerate() {
            for msg in names::label_value(v) {
                errs.push(FieldError::invalid(
                    p.child("values").index(vi),
                    v.as_str(),
                    msg,
                ));
            }
        }
    }
    errs
}

/// Whether `labels` satisfy `sel` (an empty selector matches everything).
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_exprs = sel.match_expressions.iter().flatten().all(|req| {
        let values = req.values.as_deref().unwrap_or_default();
        let have = labels.get(&req.key);
        match req.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    by_labels && by_exprs
}

fn selector_is_empty(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && sel.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

fn selector_value(sel: &LabelSelector) -> Value {
    serde_json::to_value(sel).unwrap_or(Value::Null)
}

/// The selector checks shared by Deployments and ReplicaSets; returns whether the selector can
/// be used to match the template.
fn validate_selector(
    raw_spec: &Value,
    sel: &LabelSelector,
    path: &Path,
    what: &str,
    errs: &mut Vec<FieldError>,
) -> bool {
    if raw_spec.get("selector").is_none_or(Value::is_null) {
        errs.push(FieldError::required(path.clone(), ""));
        return false;
    }
    let sel_errs = validate_label_selector(sel, path);
    let usable = sel_errs.is_empty();
    errs.extend(sel_errs);
    if selector_is_empty(sel) {
        errs.push(FieldError::invalid(
            path.clone(),
            selector_value(sel),
            format!("empty selector is invalid for {what}"),
        ));
    }
    usable
}

/// `ValidatePodTemplateSpecForReplicaSet` (also the DaemonSet rules, which differ only in the
/// activeDeadlineSeconds wording).
fn validate_template(
    template: &PodTemplateSpec,
    sel: Option<&LabelSelector>,
    path: &Path,
    owner: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if let Some(sel) = sel
        && !selector_is_empty(sel)
        && !selector_matches(sel, &labels)
    {
        errs.push(FieldError::invalid(
            path.child("metadata").child("labels"),
            serde_json::to_value(&labels).unwrap_or(Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    errs.extend(validate_pod_template(template, path));
    let spec = template.spec.clone().unwrap_or_default();
    let policy = s(&spec.restart_policy);
    if policy != "Always" {
        errs.push(FieldError::not_supported(
            path.child("spec").child("restartPolicy"),
            policy,
            &["Always"],
        ));
    }
    if spec.active_deadline_seconds.is_some() {
        errs.push(FieldError::forbidden(
            path.child("spec").child("activeDeadlineSeconds"),
            format!("activeDeadlineSeconds in {owner} is not Supported"),
        ));
    }
    errs
}

fn int_or_percent(v: Option<&IntOrString>) -> (i64, bool) {
    match v {
        Some(IntOrString::Int(n)) => (i64::from(*n), false),
        Some(IntOrString::String(s)) => (
            s.strip_suffix('%')
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            true,
        ),
        None => (0, false),
    }
}

pub(crate) fn ios_value(v: Option<&IntOrString>) -> Value {
    match v {
        Some(IntOrString::Int(n)) => Value::from(*n),
        Some(IntOrString::String(s)) => Value::from(s.as_str()),
        None => Value::Null,
    }
}

/// `ValidateNonnegativeIntOrPercent` and `IsNotMoreThan100Percent` (when `max_100`).
pub(crate) fn validate_int_or_percent(
    v: Option<&IntOrString>,
    path: Path,
    max_100: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match v {
        Some(IntOrString::String(p)) => {
            for msg in names::percent(p) {
                errs.push(FieldError::invalid(path.clone(), p.as_str(), msg));
            }
        }
        Some(IntOrString::Int(n)) => nonnegative(&mut errs, path.clone(), i64::from(*n)),
        None => {}
    }
    let (value, is_percent) = int_or_percent(v);
    if max_100 && is_percent && value > 100 {
        errs.push(FieldError::invalid(
            path,
            ios_value(v),
            "must not be greater than 100%",
        ));
    }
    errs
}

pub(crate) fn validate_deployment(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let d: Deployment = decode(new, "")?;
    let raw_spec = new.get("spec").cloned().unwrap_or(Value::Null);
    let spec = d.spec.unwrap_or_default();
    let sp = Path::new("spec");
    let mut errs = Vec::new();
    nonnegative(
        &mut errs,
        sp.child("replicas"),
        i64::from(spec.replicas.unwrap_or(1)),
    );
    let usable = validate_selector(
        &raw_spec,
        &spec.selector,
        &sp.child("selector"),
        "deployment",
        &mut errs,
    );
    errs.extend(validate_template(
        &spec.template,
        usable.then_some(&spec.selector),
        &sp.child("template"),
        "ReplicaSet",
    ));
    let strategy = spec.strategy.clone().unwrap_or_default();
    let st_path = sp.child("strategy");
    match s(&strategy.type_) {
        "Recreate" => {
            if strategy.rolling_update.is_some() {
                errs.push(FieldError::forbidden(
                    st_path.child("rollingUpdate"),
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match &strategy.rolling_update {
            None => errs.push(FieldError::required(
                st_path.child("rollingUpdate"),
                "this should be defaulted and never be nil",
            )),
            Some(ru) => {
                let p = st_path.child("rollingUpdate");
                errs.extend(validate_int_or_percent(
                    ru.max_unavailable.as_ref(),
                    p.child("maxUnavailable"),
                    false,
                ));
                errs.extend(validate_int_or_percent(
                    ru.max_surge.as_ref(),
                    p.child("maxSurge"),
                    false,
                ));
                if int_or_percent(ru.max_unavailable.as_ref()).0 == 0
                    && int_or_percent(ru.max_surge.as_ref()).0 == 0
                {
                    errs.push(FieldError::invalid(
                        p.child("maxUnavailable"),
                        ios_value(ru.max_unavailable.as_ref()),
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
                let (v, pct) = int_or_percent(ru.max_unavailable.as_ref());
                if pct && v > 100 {
                    errs.push(FieldError::invalid(
                        p.child("maxUnavailable"),
                        ios_value(ru.max_unavailable.as_ref()),
                        "must not be greater than 100%",
                    ));
                }
            }
        },
        other => errs.push(FieldError::not_supported(
            st_path,
            other,
            &["Recreate", "RollingUpdate"],
        )),
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    nonnegative(&mut errs, sp.child("minReadySeconds"), i64::from(min_ready));
    if let Some(limit) = spec.revision_history_limit {
        nonnegative(
            &mut errs,
            sp.child("revisionHistoryLimit"),
            i64::from(limit),
        );
    }
    if let Some(pds) = spec.progress_deadline_seconds {
        nonnegative(
            &mut errs,
            sp.child("progressDeadlineSeconds"),
            i64::from(pds),
        );
        if pds <= min_ready {
            errs.push(FieldError::invalid(
                sp.child("progressDeadlineSeconds"),
                pds,
                "must be greater than minReadySeconds",
            ));
        }
    }
    if let Some(old) = old {
        let old: Deployment = decode(old, "")?;
        errs.extend(immutable_selector(
            &spec.selector,
            &old.spec.unwrap_or_default().selector,
        ));
    }
    Ok(errs)
}

fn immutable_selector(new: &LabelSelector, old: &LabelSelector) -> Vec<FieldError> {
    if selector_value(new) == selector_value(old) {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            Path::new("spec").child("selector"),
            selector_value(new),
            "field is immutable",
        )]
    }
}

pub(crate) fn validate_replica_set(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let rs: ReplicaSet = decode(new, "")?;
    let raw_spec = new.get("spec").cloned().unwrap_or(Value::Null);
    let spec = rs.spec.unwrap_or_default();
    let sp = Path::new("spec");
    let mut errs = Vec::new();
    nonnegative(
        &mut errs,
        sp.child("replicas"),
        i64::from(spec.replicas.unwrap_or(1)),
    );
    nonnegative(
        &mut errs,
        sp.child("minReadySeconds"),
        i64::from(spec.min_ready_seconds.unwrap_or(0)),
    );
    // Kubernetes says "deployment" here too.
    let usable = validate_selector(
        &raw_spec,
        &spec.selector,
        &sp.child("selector"),
        "deployment",
        &mut errs,
    );
    match &spec.template {
        Some(t) => errs.extend(validate_template(
            t,
            usable.then_some(&spec.selector),
            &sp.child("template"),
            "ReplicaSet",
        )),
        None => errs.push(FieldError::required(sp.child("template"), "")),
    }
    if let Some(old) = old {
        let old: ReplicaSet = decode(old, "")?;
        errs.extend(immutable_selector(
            &spec.selector,
            &old.spec.unwrap_or_default().selector,
        ));
    }
    Ok(errs)
}

/// A core/v1 ReplicationController: the ReplicaSet's rules with a plain map for a selector, which
/// must not be empty (after defaulting from the template's labels) but may change.
pub(crate) fn validate_replication_controller(
    new: &Value,
    _old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let rc: ReplicationController = decode(new, "")?;
    let spec = rc.spec.unwrap_or_default();
    let sp = Path::new("spec");
    let mut errs = Vec::new();
    nonnegative(
        &mut errs,
        sp.child("minReadySeconds"),
        i64::from(spec.min_ready_seconds.unwrap_or(0)),
    );
    let selector = spec.selector.clone().unwrap_or_default();
    if selector.is_empty() {
        errs.push(FieldError::required(sp.child("selector"), ""));
    }
    nonnegative(
        &mut errs,
        sp.child("replicas"),
        i64::from(spec.replicas.unwrap_or(1)),
    );
    let selector = LabelSelector {
        match_labels: Some(selector),
        match_expressions: None,
    };
    match &spec.template {
        Some(t) => errs.extend(validate_template(
            t,
            Some(&selector),
            &sp.child("template"),
            "ReplicationController",
        )),
        None => errs.push(FieldError::required(sp.child("template"), "")),
    }
    Ok(errs)
}

pub(crate) fn validate_daemon_set(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let ds: DaemonSet = decode(new, "")?;
    let raw_spec = new.get("spec").cloned().unwrap_or(Value::Null);
    let spec = ds.spec.unwrap_or_default();
    let sp = Path::new("spec");
    let mut errs = Vec::new();
    let has_selector = raw_spec.get("selector").is_some_and(|v| !v.is_null());
    let sel_errs = validate_label_selector(&spec.selector, &sp.child("selector"));
    let usable = sel_errs.is_empty();
    errs.extend(sel_errs);
    let labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    // A missing selector selects nothing, so it cannot match the template.
    if usable && (!has_selector || !selector_matches(&spec.selector, &labels)) {
        errs.push(FieldError::invalid(
            sp.child("template").child("metadata").child("labels"),
            serde_json::to_value(&labels).unwrap_or(Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    if has_selector && selector_is_empty(&spec.selector) {
        errs.push(FieldError::invalid(
            sp.child("selector"),
            selector_value(&spec.selector),
            "empty selector is invalid for daemonset",
        ));
    }
    errs.extend(validate_template(
        &spec.template,
        None,
        &sp.child("template"),
        "DaemonSet",
    ));
    nonnegative(
        &mut errs,
        sp.child("minReadySeconds"),
        i64::from(spec.min_ready_seconds.unwrap_or(0)),
    );
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let st_path = sp.child("updateStrategy");
    match s(&strategy.type_) {
        "OnDelete" => {}
        "RollingUpdate" => match &strategy.rolling_update {
            None => errs.push(FieldError::required(st_path.child("rollingUpdate"), "")),
            Some(ru) => {
                let p = st_path.child("rollingUpdate");
                errs.extend(validate_int_or_percent(
                    ru.max_unavailable.as_ref(),
                    p.child("maxUnavailable"),
                    true,
                ));
                errs.extend(validate_int_or_percent(
                    ru.max_surge.as_ref(),
                    p.child("maxSurge"),
                    true,
                ));
                let unavailable = int_or_percent(ru.max_unavailable.as_ref()).0 != 0;
                let surge = int_or_percent(ru.max_surge.as_ref()).0 != 0;
                if unavailable && surge {
                    errs.push(FieldError::invalid(
                        p.child("maxSurge"),
                        ios_value(ru.max_surge.as_ref()),
                        "may not be set when maxUnavailable is non-zero",
                    ));
                } else if !unavailable && !surge {
                    errs.push(FieldError::required(
                        p.child("maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    ));
                }
            }
        },
        other => errs.push(FieldError::not_supported(
            st_path,
            other,
            &["RollingUpdate", "OnDelete"],
        )),
    }
    if let Some(limit) = spec.revision_history_limit {
        nonnegative(
            &mut errs,
            sp.child("revisionHistoryLimit"),
            i64::from(limit),
        );
    }
    if let Some(old) = old {
        let old: DaemonSet = decode(old, "")?;
        errs.extend(immutable_selector(
            &spec.selector,
            &old.spec.unwrap_or_default().selector,
        ));
    }
    Ok(errs)
}

/// `ValidateStatefulSet` and, for an update, `ValidateStatefulSetUpdate`: the selector and
/// template as for the other workloads, the pod management and update strategies, the counts,
/// and a spec that may change only in `replicas`, `ordinals`, `template`, `updateStrategy`,
/// `persistentVolumeClaimRetentionPolicy`, `minReadySeconds` and `revisionHistoryLimit`.
pub(crate) fn validate_stateful_set(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let set: StatefulSet = decode(new, "")?;
    let raw_spec = new.get("spec").cloned().unwrap_or(Value::Null);
    let spec = set.spec.unwrap_or_default();
    let sp = Path::new("spec");
    let mut errs = Vec::new();
    match s(&spec.pod_management_policy) {
        "OrderedReady" | "Parallel" => {}
        other => errs.push(FieldError::not_supported(
            sp.child("podManagementPolicy"),
            other,
            &["OrderedReady", "Parallel"],
        )),
    }
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let st_path = sp.child("updateStrategy");
    match s(&strategy.type_) {
        "OnDelete" => {
            if strategy.rolling_update.is_some() {
                errs.push(FieldError::invalid(
                    st_path.child("rollingUpdate"),
                    serde_json::to_value(&strategy.rolling_update).unwrap_or(Value::Null),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = &strategy.rolling_update {
                let p = st_path.child("rollingUpdate");
                nonnegative(
                    &mut errs,
                    p.child("partition"),
                    i64::from(ru.partition.unwrap_or(0)),
                );
                if ru.max_unavailable.is_some() {
                    errs.extend(validate_int_or_percent(
                        ru.max_unavailable.as_ref(),
                        p.child("maxUnavailable"),
                        true,
                    ));
                    if int_or_percent(ru.max_unavailable.as_ref()).0 == 0 {
                        errs.push(FieldError::invalid(
                            p.child("maxUnavailable"),
                            ios_value(ru.max_unavailable.as_ref()),
                            "must be greater than 0",
                        ));
                    }
                }
            }
        }
        other => errs.push(FieldError::not_supported(
            st_path,
            other,
            &["OnDelete", "RollingUpdate"],
        )),
    }
    nonnegative(
        &mut errs,
        sp.child("replicas"),
        i64::from(spec.replicas.unwrap_or(1)),
    );
    nonnegative(
        &mut errs,
        sp.child("minReadySeconds"),
        i64::from(spec.min_ready_seconds.unwrap_or(0)),
    );
    if let Some(start) = spec.ordinals.as_ref().and_then(|o| o.start) {
        nonnegative(
            &mut errs,
            sp.child("ordinals").child("start"),
            i64::from(start),
        );
    }
    if let Some(limit) = spec.revision_history_limit {
        nonnegative(
            &mut errs,
            sp.child("revisionHistoryLimit"),
            i64::from(limit),
        );
    }
    let usable = validate_selector(
        &raw_spec,
        &spec.selector,
        &sp.child("selector"),
        "statefulset",
        &mut errs,
    );
    if let Some(policy) = &spec.persistent_volume_claim_retention_policy {
        let p = sp.child("persistentVolumeClaimRetentionPolicy");
        for (field, value) in [
            ("whenDeleted", &policy.when_deleted),
            ("whenScaled", &policy.when_scaled),
        ] {
            let value = s(value);
            if !matches!(value, "Retain" | "Delete") {
                errs.push(FieldError::not_supported(
                    p.child(field),
                    value,
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    errs.extend(validate_template(
        &with_claim_volumes(&set.metadata, &spec),
        usable.then_some(&spec.selector),
        &sp.child("template"),
        "StatefulSet",
    ));
    if let Some(old) = old {
        // Everything but the mutable fields must stay as it was.
        let mutable = [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
            "revisionHistoryLimit",
        ];
        let frozen = |v: &Value| -> Value {
            let mut v = v.get("spec").cloned().unwrap_or(Value::Null);
            if let Some(m) = v.as_object_mut() {
                for f in mutable {
                    m.remove(f);
                }
            }
            v
        };
        if frozen(new) != frozen(old) {
            errs.push(FieldError::forbidden(
                sp,
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', \
                 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and \
                 'minReadySeconds' are forbidden",
            ));
        }
    }
    Ok(errs)
}

/// The template as the StatefulSet's pods get it: each claim template is a volume of its own
/// name on the pod's claim, in place of a template volume of the same name.
///
/// Kubernetes does not validate a StatefulSet's pod spec at all (its containers mount volumes the
/// claim templates declare, which a pod-template check would refuse), so a broken template only
/// shows when the controller's pod creates fail. Validating the pod the controller will create
/// refuses exactly those StatefulSets up front, and no template whose pods Kubernetes would admit.
fn with_claim_volumes(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: &k8s_openapi::api::apps::v1::StatefulSetSpec,
) -> PodTemplateSpec {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, Volume};
    let claims = spec.volume_claim_templates.as_deref().unwrap_or_default();
    if claims.is_empty() {
        return spec.template.clone();
    }
    let mut template = spec.template.clone();
    let pod = template.spec.get_or_insert_with(Default::default);
    let claim_name = |c: &k8s_openapi::api::core::v1::PersistentVolumeClaim| {
        c.metadata.name.clone().unwrap_or_default()
    };
    let set = meta.name.as_deref().unwrap_or("set");
    let claim_volume = |name: String| Volume {
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: format!("{name}-{set}-0"),
            read_only: None,
        }),
        name,
        ..Default::default()
    };
    // Replaced in place, so the indexes of the template's own volumes stay as written.
    let mut volumes = pod.volumes.take().unwrap_or_default();
    for claim in claims {
        let name = claim_name(claim);
        match volumes.iter_mut().find(|v| v.name == name) {
            Some(v) => *v = claim_volume(name),
            None => volumes.push(claim_volume(name)),
        }
    }
    pod.volumes = Some(volumes);
    template
}

/// `/status` updates of the apps kinds: counts are non-negative and never exceed `replicas`
/// where Kubernetes says so, and `collisionCount` does not go down.
pub(crate) fn validate_status(
    info: &ResourceInfo,
    new: &Value,
    old: &Value,
) -> Result<Vec<FieldError>, FieldError> {
    let status = new.get("status").cloned().unwrap_or(Value::Null);
    let old_status = old.get("status").cloned().unwrap_or(Value::Null);
    let sp = Path::new("status");
    let mut errs = Vec::new();
    let int = |v: &Value, k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0);
    // Type-check through the typed decoders first.
    match info.kind {
        "Deployment" => drop(decode::<Deployment>(new, "")?),
        "ReplicaSet" => drop(decode::<ReplicaSet>(new, "")?),
        "ReplicationController" => drop(decode::<ReplicationController>(new, "")?),
        "StatefulSet" => drop(decode::<StatefulSet>(new, "")?),
        _ => drop(decode::<DaemonSet>(new, "")?),
    }
    let fields: &[&str] = match info.kind {
        "DaemonSet" => &[
            "currentNumberScheduled",
            "numberMisscheduled",
            "desiredNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberUnavailable",
        ],
        "StatefulSet" => &[
            "replicas",
            "readyReplicas",
            "currentReplicas",
            "updatedReplicas",
            "availableReplicas",
        ],
        "Deployment" => &[
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
        ],
        _ => &[
            "replicas",
            "fullyLabeledReplicas",
            "readyReplicas",
            "availableReplicas",
        ],
    };
    nonnegative(
        &mut errs,
        sp.child("observedGeneration"),
        int(&status, "observedGeneration"),
    );
    for f in fields {
        nonnegative(&mut errs, sp.child(f), int(&status, f));
    }
    if info.kind != "DaemonSet" {
        let replicas = int(&status, "replicas");
        let checks: &[(&str, &str)] = match info.kind {
            "Deployment" => &[
                ("updatedReplicas", "replicas"),
                ("readyReplicas", "replicas"),
                ("availableReplicas", "replicas"),
                ("availableReplicas", "readyReplicas"),
            ],
            _ => &[
                ("fullyLabeledReplicas", "replicas"),
                ("readyReplicas", "replicas"),
                ("availableReplicas", "replicas"),
                ("availableReplicas", "readyReplicas"),
            ],
        };
        for (field, bound) in checks {
            let v = int(&status, field);
            let limit = if *bound == "replicas" {
                replicas
            } else {
                int(&status, bound)
            };
            if v > limit {
                errs.push(FieldError::invalid(
                    sp.child(field),
                    v,
                    // Kubernetes' own inconsistency: only the replicas bound says `status.`.
                    if *bound == "replicas" {
                        "cannot be greater than status.replicas".to_string()
                    } else {
                        format!("cannot be greater than {bound}")
                    },
                ));
            }
        }
    }
    if let (Some(n), Some(o)) = (
        status.get("collisionCount").and_then(Value::as_i64),
        old_status.get("collisionCount").and_then(Value::as_i64),
    ) && n < o
    {
        errs.push(FieldError::invalid(
            sp.child("collisionCount"),
            n,
            "cannot be decremented",
        ));
    }
    Ok(errs)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::{validate_status_update, validate_update};
    use super::*;
    use serde_json::json;

    fn deploy(spec: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": spec})
    }

    fn spec_with(extra: Value) -> Value {
        let mut spec = json!({
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    }

    fn d(extra: Value) -> Vec<String> {
        create_msgs("apps", "Deployment", deploy(spec_with(extra)))
    }

    #[test]
    fn selector_rules() {
        assert_eq!(
            d(
                json!({"template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}})
            ),
            vec![
                r#"spec.template.metadata.labels: Invalid value: map[string]string{"app":"api"}: `selector` does not match template `labels`"#
            ]
        );
        let mut spec = spec_with(json!({}));
        spec.as_object_mut().unwrap().remove("selector");
        assert_eq!(
            create_msgs("apps", "Deployment", deploy(spec)),
            vec!["spec.selector: Required value"]
        );
        assert_eq!(
            d(json!({"selector": {}})),
            vec!["spec.selector: Invalid value: {}: empty selector is invalid for deployment"]
        );
        assert!(d(json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}})).is_empty());
        assert_eq!(
            d(json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}})),
            vec![
                r#"spec.selector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator"#
            ]
        );
    }

    #[test]
    fn counts_and_strategy() {
        assert_eq!(
            d(json!({"replicas": -1})),
            vec!["spec.replicas: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            d(json!({"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}})),
            vec![
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0"
            ]
        );
        assert_eq!(
            d(json!({"strategy": {"rollingUpdate": {"maxSurge": "0%", "maxUnavailable": "0%"}}})),
            vec![
                r#"spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "0%": may not be 0 when `maxSurge` is 0"#
            ]
        );
        assert_eq!(
            d(json!({"strategy": {"rollingUpdate": {"maxUnavailable": "150%"}}})),
            vec![
                r#"spec.strategy.rollingUpdate.maxUnavailable: Invalid value: "150%": must not be greater than 100%"#
            ]
        );
        assert_eq!(
            d(json!({"strategy": {"rollingUpdate": {"maxSurge": "x"}}})),
            vec![
                r#"spec.strategy.rollingUpdate.maxSurge: Invalid value: "x": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"#
            ]
        );
        assert_eq!(
            d(json!({"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}})),
            vec![
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"
            ]
        );
        assert_eq!(
            d(json!({"strategy": {"type": "BlueGreen"}})),
            vec![
                r#"spec.strategy: Unsupported value: "BlueGreen": supported values: "Recreate", "RollingUpdate""#
            ]
        );
        assert_eq!(
            d(json!({"minReadySeconds": 700})),
            vec![
                "spec.progressDeadlineSeconds: Invalid value: 600: must be greater than minReadySeconds"
            ]
        );
    }

    #[test]
    fn template_is_a_pod_template_that_restarts_always() {
        assert_eq!(
            d(
                json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "nginx"}]}}})
            ),
            vec![
                r#"spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always""#
            ]
        );
        assert_eq!(
            d(
                json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}})
            ),
            vec!["spec.template.spec.containers: Required value"]
        );
        assert_eq!(
            d(json!({"template": {"metadata": {"labels": {"app": "web", "bad": "-x"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}})).len(),
            1
        );
        assert_eq!(
            d(
                json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "nginx"}]}}})
            ),
            vec![
                "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported"
            ]
        );
    }

    #[test]
    fn selector_is_immutable() {
        let old = deploy(spec_with(json!({})));
        let mut new = old.clone();
        new["spec"]["selector"] = json!({"matchLabels": {"app": "web", "tier": "x"}});
        new["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
        {
            let v = &mut new;
            v["metadata"]["namespace"] = json!("default");
        }
        let mut old = old;
        old["metadata"]["namespace"] = json!("default");
        assert_eq!(
            update_msgs("apps", "Deployment", new, old.clone()),
            vec![
                r#"spec.selector: Invalid value: {"matchLabels":{"app":"web","tier":"x"}}: field is immutable"#
            ]
        );
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(5);
        assert!(update_msgs("apps", "Deployment", scaled, old).is_empty());
    }

    #[test]
    fn replica_sets() {
        let rs = |extra: Value| create_msgs("apps", "ReplicaSet", deploy(spec_with(extra)));
        assert!(rs(json!({"replicas": 3})).is_empty());
        assert_eq!(
            rs(json!({"replicas": -2})),
            vec!["spec.replicas: Invalid value: -2: must be greater than or equal to 0"]
        );
        assert_eq!(
            rs(json!({"selector": {"matchLabels": {"app": "x"}}})),
            vec![
                r#"spec.template.metadata.labels: Invalid value: map[string]string{"app":"web"}: `selector` does not match template `labels`"#
            ]
        );
    }

    #[test]
    fn daemon_sets() {
        let ds = |extra: Value| create_msgs("apps", "DaemonSet", deploy(spec_with(extra)));
        assert!(ds(json!({})).is_empty());
        assert_eq!(
            ds(json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}})),
            vec![
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"
            ]
        );
        assert_eq!(
            ds(json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}})),
            vec![
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
            ]
        );
        assert_eq!(
            ds(json!({"updateStrategy": {"type": "Sometimes"}})),
            vec![
                r#"spec.updateStrategy: Unsupported value: "Sometimes": supported values: "RollingUpdate", "OnDelete""#
            ]
        );
        assert_eq!(
            ds(json!({"selector": {}})),
            vec!["spec.selector: Invalid value: {}: empty selector is invalid for daemonset"]
        );
        assert_eq!(
            ds(
                json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "nginx"}]}}})
            ),
            vec![
                "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported"
            ]
        );
    }

    #[test]
    fn replication_controllers_default_their_selector_and_labels_and_check_them() {
        let kind = crate::builtin::by_kind("", "ReplicationController");
        let template = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let mut rc = json!({"metadata": {"name": "web"}, "spec": {"template": template}});
        kind.default(&mut rc);
        assert_eq!(rc["spec"]["selector"], json!({"app": "web", "tier": "fe"}));
        assert_eq!(
            rc["metadata"]["labels"],
            json!({"app": "web", "tier": "fe"})
        );
        assert_eq!(rc["spec"]["replicas"], 1);
        assert_eq!(rc["spec"]["template"]["spec"]["restartPolicy"], "Always");
        // A selector and labels of one's own are kept.
        let mut own = json!({"metadata": {"name": "web", "labels": {"x": "y"}},
                             "spec": {"selector": {"app": "web"}, "template": template}});
        kind.default(&mut own);
        assert_eq!(own["spec"]["selector"], json!({"app": "web"}));
        assert_eq!(own["metadata"]["labels"], json!({"x": "y"}));

        let rc = |spec: Value| create_msgs("", "ReplicationController", deploy(spec));
        assert!(rc(json!({"template": template})).is_empty());
        assert_eq!(
            rc(json!({"selector": {"app": "db"}, "replicas": -1, "template": template})),
            vec![
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                r#"spec.template.metadata.labels: Invalid value: map[string]string{"app":"web", "tier":"fe"}: `selector` does not match template `labels`"#,
            ]
        );
        assert_eq!(
            rc(json!({"template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}})),
            vec!["spec.selector: Required value"]
        );
        let mut never = template.clone();
        never["spec"]["restartPolicy"] = json!("Never");
        assert_eq!(
            rc(json!({"template": never})),
            vec![
                r#"spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always""#
            ]
        );
        // Unlike a ReplicaSet's, the selector may change.
        let old = {
            let mut o = deploy(json!({"template": template}));
            kind.default(&mut o);
            o
        };
        let mut new = deploy(json!({"selector": {"app": "web"}, "template": template}));
        kind.default(&mut new);
        assert!(
            validate_update(&*kind, &new, &old).is_empty(),
            "{:?}",
            validate_update(&*kind, &new, &old)
        );
    }

    #[test]
    fn stateful_set_pods_mount_their_claim_templates() {
        let sts = |extra: Value| {
            let mut spec = spec_with(extra);
            spec["template"]["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
            create_msgs("apps", "StatefulSet", deploy(spec))
        };
        let claim = json!([{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
        // The mount names a claim template: the pods get that volume.
        assert!(sts(json!({"volumeClaimTemplates": claim})).is_empty());
        // A template volume of the claim's name is replaced by the claim, as the controller does.
        assert!(
            sts(json!({"volumeClaimTemplates": claim, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"volumes": [{"name": "data", "emptyDir": {}}], "containers": [{"name": "c", "image": "nginx"}]}
            }}))
            .is_empty()
        );
        // Neither a volume nor a claim template: the pods could never be created.
        assert_eq!(
            sts(json!({})),
            vec![r#"spec.template.spec.containers[0].volumeMounts[0].name: Not found: "data""#]
        );
        assert_eq!(
            sts(json!({"volumeClaimTemplates": claim,
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Keep", "whenScaled": "Delete"}})),
            vec![
                r#"spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: "Keep": supported values: "Retain", "Delete""#
            ]
        );
    }

    #[test]
    fn status_updates() {
        let info = info("apps", "Deployment");
        let base = json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec_with(json!({}))});
        let mut new = base.clone();
        new["status"] = json!({"replicas": 2, "updatedReplicas": 3, "readyReplicas": 1, "availableReplicas": 2, "unavailableReplicas": -1});
        let msgs: Vec<String> = validate_status_update(info, &new, &base)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            msgs,
            vec![
                "status.unavailableReplicas: Invalid value: -1: must be greater than or equal to 0",
                "status.updatedReplicas: Invalid value: 3: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 2: cannot be greater than readyReplicas",
            ]
        );
    }

    #[test]
    fn selector_matching() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["prod"]}
            ]
        }))
        .unwrap();
        let labels = |v: Value| serde_json::from_value::<BTreeMap<String, String>>(v).unwrap();
        assert!(selector_matches(
            &sel,
            &labels(json!({"app": "web", "tier": "a"}))
        ));
        assert!(!selector_matches(
            &sel,
            &labels(json!({"app": "web", "tier": "c"}))
        ));
        assert!(!selector_matches(
            &sel,
            &labels(json!({"app": "web", "tier": "a", "canary": "1"}))
        ));
        assert!(!selector_matches(
            &sel,
            &labels(json!({"app": "web", "tier": "a", "env": "prod"}))
        ));
        assert!(!selector_matches(&sel, &labels(json!({"tier": "a"}))));
    }
}

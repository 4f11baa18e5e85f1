//! `core/v1` LimitRange: per-namespace bounds on what a container, a pod or a claim may ask for
//! (`min`, `max`, `maxLimitRequestRatio`), and the requests and limits a container that states
//! none gets (`defaultRequest`, `default`). Defaulting fills a container item's gaps as
//! Kubernetes does (a default limit from `max`, a default request from the default limit or
//! `min`); the `LimitRanger` admission plugin applies and enforces the ranges.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange as Lr, LimitRangeItem};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::prelude::*;
use crate::validation::quantity::{self, Quantity};
use crate::validation::{FieldError, Path, decode};

/// `core/v1` LimitRange.
pub struct LimitRange;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "",
    version: "v1",
    kind: "LimitRange",
    plural: "limitranges",
    singular: "limitrange",
    short_names: &["limits"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

/// The item types a LimitRange knows.
pub const TYPES: &[&str] = &["Pod", "Container", "PersistentVolumeClaim"];

/// `SetDefaults_LimitRangeItem`, on one item as JSON: for a Container item, a default limit from
/// `max`, then a default request from the default limit, then from `min`.
fn default_item(item: &mut serde_json::Map<String, Value>) {
    if item.get("type").and_then(Value::as_str) != Some("Container") {
        return;
    }
    let field = |item: &serde_json::Map<String, Value>, name: &str| {
        item.get(name)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let max = field(item, "max");
    let min = field(item, "min");
    let mut default = field(item, "default");
    let mut default_request = field(item, "defaultRequest");
    for (k, v) in &max {
        default.entry(k.clone()).or_insert_with(|| v.clone());
    }
    for (k, v) in default.iter().chain(&min) {
        default_request
            .entry(k.clone())
            .or_insert_with(|| v.clone());
    }
    if !default.is_empty() {
        item.insert("default".into(), Value::Object(default));
    }
    if !default_request.is_empty() {
        item.insert("defaultRequest".into(), Value::Object(default_request));
    }
}

fn parse_all(
    list: Option<&BTreeMap<String, K8sQuantity>>,
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    for (name, amount) in list.into_iter().flatten() {
        let p = path.key(name);
        for m in names::qualified_name(name) {
            errs.push(FieldError::invalid(p.clone(), name.as_str(), m));
        }
        match quantity::parse(&amount.0) {
            Err(e) => errs.push(FieldError::invalid(p, amount.0.as_str(), e.to_string())),
            Ok(q) if q.is_negative() => errs.push(FieldError::invalid(
                p,
                q.to_string(),
                "must be greater than or equal to 0",
            )),
            Ok(q) => {
                out.insert(name.clone(), q);
            }
        }
    }
    out
}

fn validate_item(item: &LimitRangeItem, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !TYPES.contains(&item.type_.as_str()) {
        errs.push(FieldError::not_supported(
            path.child("type"),
            item.type_.as_str(),
            TYPES,
        ));
    }
    let max = parse_all(item.max.as_ref(), &path.child("max"), &mut errs);
    let min = parse_all(item.min.as_ref(), &path.child("min"), &mut errs);
    let default = parse_all(item.default.as_ref(), &path.child("default"), &mut errs);
    let default_request = parse_all(
        item.default_request.as_ref(),
        &path.child("defaultRequest"),
        &mut errs,
    );
    let ratio = parse_all(
        item.max_limit_request_ratio.as_ref(),
        &path.child("maxLimitRequestRatio"),
        &mut errs,
    );
    if item.type_ == "Pod" {
        for (field, list) in [("default", &default), ("defaultRequest", &default_request)] {
            if !list.is_empty() {
                errs.push(FieldError::forbidden(
                    path.child(field),
                    "may not be specified when `type` is 'Pod'",
                ));
            }
        }
    }
    if item.type_ == "PersistentVolumeClaim"
        && !min.contains_key("storage")
        && !max.contains_key("storage")
    {
        errs.push(FieldError::required(
            path.child("limits"),
            "either minimum or maximum storage value is required, but neither was provided",
        ));
    }
    for (name, lo) in &min {
        if let Some(hi) = max.get(name)
            && lo > hi
        {
            errs.push(FieldError::invalid(
                path.child("min").key(name),
                lo.to_string(),
                format!("min value {lo} is greater than max value {hi}"),
            ));
        }
    }
    for (name, d) in &default_request {
        let p = path.child("defaultRequest").key(name);
        if let Some(lo) = min.get(name)
            && lo > d
        {
            errs.push(FieldError::invalid(
                p.clone(),
                d.to_string(),
                format!("min value {lo} is greater than default request value {d}"),
            ));
        }
        if let Some(hi) = max.get(name)
            && d > hi
        {
            errs.push(FieldError::invalid(
                p.clone(),
                d.to_string(),
                format!("default request value {d} is greater than max value {hi}"),
            ));
        }
        if let Some(limit) = default.get(name)
            && d > limit
        {
            errs.push(FieldError::invalid(
                p,
                d.to_string(),
                format!("default request value {d} is greater than default limit value {limit}"),
            ));
        }
    }
    for (name, d) in &default {
        let p = path.child("default").key(name);
        if let Some(lo) = min.get(name)
            && lo > d
        {
            errs.push(FieldError::invalid(
                p.clone(),
                d.to_string(),
                format!("min value {lo} is greater than default value {d}"),
            ));
        }
        if let Some(hi) = max.get(name)
            && d > hi
        {
            errs.push(FieldError::invalid(
                p,
                d.to_string(),
                format!("default value {d} is greater than max value {hi}"),
            ));
        }
    }
    for (name, r) in &ratio {
        let p = path.child("maxLimitRequestRatio").key(name);
        if *r < Quantity::from_units(1) {
            errs.push(FieldError::invalid(
                p.clone(),
                r.to_string(),
                format!("ratio {r} is less than 1"),
            ));
        }
        if let (Some(lo), Some(hi)) = (min.get(name), max.get(name))
            && !lo.is_zero()
        {
            let most = hi.nanos() as f64 / lo.nanos() as f64;
            if r.nanos() as f64 / 1e9 > most {
                errs.push(FieldError::invalid(
                    p,
                    r.to_string(),
                    format!("ratio {r} is greater than max/min = {most:.6}"),
                ));
            }
        }
    }
    errs
}

fn validate(new: &Value) -> Checked {
    let lr: Lr = decode(new, "")?;
    let limits = lr.spec.map(|s| s.limits).unwrap_or_default();
    let path = Path::new("spec").child("limits");
    let mut errs = Vec::new();
    let mut seen = Vec::new();
    for (i, item) in limits.iter().enumerate() {
        let p = path.index(i);
        if seen.contains(&item.type_) {
            errs.push(FieldError::duplicate(p.child("type"), item.type_.as_str()));
        }
        seen.push(item.type_.clone());
        errs.extend(validate_item(item, &p));
    }
    Ok(errs)
}

impl Kind for LimitRange {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Lr>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Lr>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{NAME, col};
        vec![
            NAME,
            col(
                "Created At",
                "date",
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ),
        ]
    }

    fn cells(&self, object: &Value, _now: Timestamp) -> Option<Vec<Value>> {
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            object["metadata"]["creationTimestamp"].clone(),
        ])
    }

    fn default(&self, object: &mut Value) {
        if let Some(items) = object
            .pointer_mut("/spec/limits")
            .and_then(Value::as_array_mut)
        {
            for item in items.iter_mut().filter_map(Value::as_object_mut) {
                default_item(item);
            }
        }
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    fn lr(limits: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "LimitRange",
               "metadata": {"name": "l", "namespace": "default"}, "spec": {"limits": limits}})
    }

    #[test]
    fn container_items_get_default_limits_and_requests() {
        let mut object = lr(json!([
            {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "32Mi"},
             "default": {"memory": "256Mi"}},
            {"type": "Pod", "max": {"cpu": "4"}}
        ]));
        LimitRange.default(&mut object);
        let container = &object["spec"]["limits"][0];
        assert_eq!(container["default"], json!({"cpu": "2", "memory": "256Mi"}));
        assert_eq!(
            container["defaultRequest"],
            json!({"cpu": "2", "memory": "256Mi"}),
            "the default limit wins over min for the default request"
        );
        assert_eq!(object["spec"]["limits"][1].get("default"), None);
    }

    #[test]
    fn ranges_are_ordered_and_fit_their_type() {
        assert!(
            create_msgs(
                "",
                "LimitRange",
                lr(
                    json!([{"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1"},
                           "maxLimitRequestRatio": {"cpu": "4"}}])
                )
            )
            .is_empty()
        );
        assert_eq!(
            create_msgs(
                "",
                "LimitRange",
                lr(json!([{"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}}]))
            ),
            [
                "spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1",
                "spec.limits[0].defaultRequest[cpu]: Invalid value: \"1\": min value 2 is greater than default request value 1",
                "spec.limits[0].default[cpu]: Invalid value: \"1\": min value 2 is greater than default value 1",
            ]
        );
        assert_eq!(
            create_msgs(
                "",
                "LimitRange",
                lr(json!([{"type": "Pod", "default": {"cpu": "1"}},
                          {"type": "PersistentVolumeClaim", "max": {"cpu": "1"}},
                          {"type": "Node"}]))
            ),
            [
                "spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'",
                "spec.limits[1].limits: Required value: either minimum or maximum storage value is required, but neither was provided",
                "spec.limits[2].type: Unsupported value: \"Node\": supported values: \"Pod\", \"Container\", \"PersistentVolumeClaim\"",
            ]
        );
    }
}

//! Label and field selectors of a list or watch request, turned into one object filter.

use std::sync::Arc;

use serde_json::Value;
use skiff_meta::{ResourceInfo, fields, labels};

use crate::error::{Error, Result};
use crate::registry::ObjectFilter;
use crate::request::Query;

/// The filter the request's `labelSelector` and `fieldSelector` make, or `None` when they select
/// everything. Malformed selectors and unsupported field labels are 400s.
pub fn filter(info: &'static ResourceInfo, query: &Query) -> Result<Option<ObjectFilter>> {
    let label = match query.get("labelSelector").filter(|s| !s.trim().is_empty()) {
        Some(text) => {
            let selector = labels::parse(text)
                .map_err(|e| Error::BadRequest(format!("unable to parse requirement: {e}")))?;
            (!selector.is_empty()).then_some(selector)
        }
        None => None,
    };
    let field = match query.get("fieldSelector").filter(|s| !s.trim().is_empty()) {
        Some(text) => {
            let selector =
                fields::parse_for(info, text).map_err(|e| Error::BadRequest(e.to_string()))?;
            (!selector.is_empty()).then_some(selector)
        }
        None => None,
    };
    if label.is_none() && field.is_none() {
        return Ok(None);
    }
    Ok(Some(Arc::new(move |object: &Value| {
        label.as_ref().is_none_or(|l| l.matches_object(object))
            && field.as_ref().is_none_or(|f| f.matches(info, object))
    })))
}

/// A list across namespaces whose field selector pins `metadata.namespace` reads only that
/// namespace's keys.
pub fn narrow_namespace(
    info: &ResourceInfo,
    namespace: Option<&str>,
    query: &Query,
) -> Option<String> {
    if let Some(ns) = namespace {
        return Some(ns.to_string());
    }
    if !info.namespaced {
        return None;
    }
    let text = query.get("fieldSelector")?;
    let selector = fields::parse(text).ok()?;
    selector
        .requires_exact_match("metadata.namespace")
        .map(str::to_string)
}

/// A `metav1.LabelSelector` (as JSON) in its string form, for `Scale.status.selector`.
pub fn label_selector_string(selector: &Value) -> String {
    serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>(
        selector.clone(),
    )
    .ok()
    .and_then(|ls| labels::Selector::from_label_selector(&ls).ok())
    .map(|s| s.to_string())
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> &'static ResourceInfo {
        &skiff_kinds::builtin::pod::INFO
    }

    #[test]
    fn label_and_field_selectors_combine() {
        let q = Query::parse("labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1");
        let f = filter(pods(), &q).unwrap().unwrap();
        let on_n1 = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"nodeName": "n1"}});
        let on_n2 = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"nodeName": "n2"}});
        let other = json!({"metadata": {"labels": {"app": "db"}}, "spec": {"nodeName": "n1"}});
        assert!(f(&on_n1));
        assert!(!f(&on_n2));
        assert!(!f(&other));
    }

    #[test]
    fn bad_selectors_are_bad_requests() {
        let q = Query::parse("labelSelector=a%20in%20(");
        assert!(matches!(filter(pods(), &q), Err(Error::BadRequest(_))));
        let q = Query::parse("fieldSelector=spec.colour%3Dred");
        let Err(Error::BadRequest(message)) = filter(pods(), &q) else {
            panic!("an unsupported field label is a 400")
        };
        assert!(message.contains("field label not supported"), "{message}");
    }

    #[test]
    fn namespace_field_selector_narrows_the_scan() {
        let q = Query::parse("fieldSelector=metadata.namespace%3Dkube-system");
        assert_eq!(
            narrow_namespace(pods(), None, &q).as_deref(),
            Some("kube-system")
        );
        assert_eq!(
            narrow_namespace(pods(), Some("a"), &q).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn scale_selector_string() {
        let s = label_selector_string(&json!({"matchLabels": {"app": "web"}}));
        assert_eq!(s, "app=web");
    }
}

//! The `admission.k8s.io/v1` AdmissionReview a webhook is sent, and what its answer means.
//! Pure: bytes in, decisions out.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};
use skiff_meta::status::{ApiError, Reason};

use super::matching::operation_name;
use crate::admission::{Attributes, Operation};

/// The AdmissionReview request for `attributes`, with `object` the object as it is now (after
/// the mutating webhooks before this one).
pub fn request(uid: &str, a: &Attributes<'_>, object: Option<&Value>) -> Value {
    let info = a.info;
    let gvk = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let gvr = json!({"group": info.group, "version": info.version, "resource": info.plural});
    let options_kind = match a.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    let mut options = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
    if a.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    let mut user = json!({"username": a.user.name, "groups": a.user.groups});
    if !a.user.uid.is_empty() {
        user["uid"] = json!(a.user.uid);
    }
    if !a.user.extra.is_empty() {
        user["extra"] = json!(a.user.extra);
    }
    let mut request = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": a.name,
        "operation": operation_name(a.operation),
        "userInfo": user,
        "object": object,
        "oldObject": a.old,
        "dryRun": a.dry_run,
        "options": options,
    });
    if let Some(sub) = a.subresource {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    if let Some(ns) = a.namespace {
        request["namespace"] = json!(ns);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// What a webhook answered.
#[derive(Debug)]
pub struct Answer {
    /// Allowed, with a JSONPatch to apply (mutating webhooks only); or the error the request
    /// fails with.
    pub verdict: Result<Option<json_patch::Patch>, ApiError>,
    /// Warnings for the client, whatever the verdict.
    pub warnings: Vec<String>,
    /// `auditAnnotations`, whatever the verdict (the caller prefixes the webhook's name).
    pub audit_annotations: BTreeMap<String, String>,
}

/// Reads a webhook's answer to the review with `uid`. `Err` is a call failure (garbage, a
/// wrong uid, a patch from a validating webhook, a patch that is not a JSONPatch), whose
/// reason is worded as Kubernetes words it.
pub fn read(name: &str, uid: &str, mutating: bool, body: &[u8]) -> Result<Answer, String> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| format!("failed to decode the webhook's response: {e}"))?;
    let (api_version, kind) = (review["apiVersion"].as_str(), review["kind"].as_str());
    if (api_version, kind) != (Some("admission.k8s.io/v1"), Some("AdmissionReview")) {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            api_version.unwrap_or_default(),
            kind.unwrap_or_default()
        ));
    }
    let Some(response) = review.get("response").filter(|r| r.is_object()) else {
        return Err("webhook response was absent".into());
    };
    let got = response["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(format!("expected response.uid={uid:?}, got {got:?}"));
    }
    let warnings = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect();
    let audit_annotations = response["auditAnnotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    if !response["allowed"].as_bool().unwrap_or(false) {
        return Ok(Answer {
            verdict: Err(denied(name, &response["status"])),
            warnings,
            audit_annotations,
        });
    }
    let patch = match response["patch"].as_str().filter(|p| !p.is_empty()) {
        None => None,
        Some(_) if !mutating => return Err("validating webhooks may not return patches".into()),
        Some(encoded) => {
            match response["patchType"].as_str() {
                Some("JSONPatch") => {}
                None => {
                    return Err("webhook returned response.patch but not response.patchType".into());
                }
                Some(other) => {
                    return Err(format!(
                        "webhook returned invalid response.patchType of {other:?}"
                    ));
                }
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("response.patch is not base64: {e}"))?;
            let patch: json_patch::Patch = serde_json::from_slice(&bytes)
                .map_err(|e| format!("response.patch is not a JSONPatch: {e}"))?;
            Some(patch)
        }
    };
    Ok(Answer {
        verdict: Ok(patch),
        warnings,
        audit_annotations,
    })
}

/// The error of a denial (Kubernetes' `ToStatusErr`): the webhook's status with a code of at
/// least 400 and its message prefixed by which webhook denied.
pub fn denied(name: &str, status: &Value) -> ApiError {
    let denied_by = format!("admission webhook {name:?} denied the request");
    let message = status["message"].as_str().filter(|m| !m.is_empty());
    let reason = status["reason"].as_str().unwrap_or_default();
    let message = match (message, reason.is_empty()) {
        (Some(m), _) => format!("{denied_by}: {m}"),
        (None, false) => format!("{denied_by}: {reason}"),
        (None, true) => format!("{denied_by} without explanation"),
    };
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400 && *c < 600)
        .unwrap_or(400);
    let details = status
        .get("details")
        .and_then(|d| serde_json::from_value(d.clone()).ok());
    ApiError::new(code, Reason::parse(reason), message, details)
}

/// The error of a call that failed under `failurePolicy: Fail`: a 500 naming the webhook.
pub fn call_failed(name: &str, why: &str) -> ApiError {
    ApiError::internal_error(format!("failed calling webhook {name:?}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::User;

    fn encode(patch: &Value) -> String {
        base64::engine::general_purpose::STANDARD.encode(patch.to_string())
    }

    fn answer(response: Value) -> Vec<u8> {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn the_request_carries_what_kubernetes_sends() {
        let user = User::admin();
        let old = json!({"metadata": {"name": "web"}, "status": {"phase": "Pending"}});
        let new = json!({"metadata": {"name": "web"}, "status": {"phase": "Running"}});
        let a = Attributes {
            operation: Operation::Update,
            info: &skiff_kinds::builtin::pod::INFO,
            subresource: Some("status"),
            namespace: Some("shop"),
            name: "web",
            object: None,
            old: Some(&old),
            user: &user,
            dry_run: true,
            feedback: None,
        };
        let review = request("u-1", &a, Some(&new));
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        let r = &review["request"];
        assert_eq!(r["uid"], "u-1");
        assert_eq!(
            r["kind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        assert_eq!(
            r["resource"],
            json!({"group": "", "version": "v1", "resource": "pods"})
        );
        assert_eq!(r["requestKind"], r["kind"]);
        assert_eq!(r["requestResource"], r["resource"]);
        assert_eq!(r["subResource"], "status");
        assert_eq!(r["requestSubResource"], "status");
        assert_eq!(
            (r["name"].as_str(), r["namespace"].as_str()),
            (Some("web"), Some("shop"))
        );
        assert_eq!(r["operation"], "UPDATE");
        assert_eq!(r["userInfo"]["username"], user.name);
        assert_eq!(r["userInfo"]["groups"], json!(user.groups));
        assert_eq!(r["object"], new);
        assert_eq!(r["oldObject"], old);
        assert_eq!(r["dryRun"], true);
        assert_eq!(
            r["options"],
            json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]})
        );
        // A create has no old object; a cluster-wide object no namespace.
        let create = Attributes {
            operation: Operation::Create,
            info: &skiff_kinds::builtin::node::INFO,
            subresource: None,
            namespace: None,
            name: "n1",
            object: None,
            old: None,
            user: &user,
            dry_run: false,
            feedback: None,
        };
        let r = request("u-2", &create, Some(&new))["request"].clone();
        assert!(r["oldObject"].is_null());
        assert!(r.get("namespace").is_none() && r.get("subResource").is_none());
        assert_eq!(r["options"]["kind"], "CreateOptions");
    }

    #[test]
    fn an_allowed_answer_may_patch_warn_and_annotate() {
        let patch = json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}]);
        let body = answer(
            json!({"uid": "u", "allowed": true, "patchType": "JSONPatch",
            "patch": encode(&patch), "warnings": ["careful"],
            "auditAnnotations": {"checked-by": "m", "not-a-string": 3}}),
        );
        let answer_read = read("m.example.com", "u", true, &body).unwrap();
        let Ok(Some(p)) = answer_read.verdict else {
            panic!("{answer_read:?}");
        };
        let mut object = json!({"metadata": {"labels": {}}});
        json_patch::patch(&mut object, &p).unwrap();
        assert_eq!(object["metadata"]["labels"]["x"], "y");
        assert_eq!(answer_read.warnings, ["careful"]);
        assert_eq!(
            answer_read.audit_annotations,
            BTreeMap::from([("checked-by".to_string(), "m".to_string())])
        );
        let plain = answer(json!({"uid": "u", "allowed": true}));
        let plain = read("v.example.com", "u", false, &plain).unwrap();
        assert!(matches!(plain.verdict, Ok(None)), "{plain:?}");
        assert!(plain.warnings.is_empty() && plain.audit_annotations.is_empty());
    }

    #[test]
    fn a_denial_names_the_webhook_and_keeps_a_code_of_at_least_400() {
        let body = answer(json!({"uid": "u", "allowed": false, "warnings": ["red"],
            "auditAnnotations": {"colour": "red"},
            "status": {"code": 403, "reason": "Forbidden", "message": "no red configmaps"}}));
        let denial = read("deny.example.com", "u", false, &body).unwrap();
        // A denial's warnings and annotations count too.
        assert_eq!(denial.warnings, ["red"]);
        assert_eq!(denial.audit_annotations["colour"], "red");
        let Err(e) = denial.verdict else {
            panic!("not denied");
        };
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.message(),
            "admission webhook \"deny.example.com\" denied the request: no red configmaps"
        );
        assert_eq!(e.reason(), &Reason::Forbidden);
        // A code under 400 (or none) becomes 400; no message: the reason, else "without
        // explanation".
        let e = denied("d.example.com", &json!({"code": 200, "reason": "Nope"}));
        assert_eq!(
            (e.code(), e.message()),
            (
                400,
                "admission webhook \"d.example.com\" denied the request: Nope"
            )
        );
        let e = denied("d.example.com", &Value::Null);
        assert_eq!(
            (e.code(), e.message()),
            (
                400,
                "admission webhook \"d.example.com\" denied the request without explanation"
            )
        );
    }

    #[test]
    fn garbage_wrong_uids_and_bad_patches_are_call_failures() {
        let cases: Vec<(Vec<u8>, bool, &str)> = vec![
            (
                b"<html>".to_vec(),
                true,
                "failed to decode the webhook's response",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Status"})
                    .to_string()
                    .into_bytes(),
                true,
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got v1, Kind=Status",
            ),
            (
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})
                    .to_string()
                    .into_bytes(),
                true,
                "webhook response was absent",
            ),
            (
                answer(json!({"uid": "other", "allowed": true})),
                true,
                "expected response.uid=\"u\", got \"other\"",
            ),
            (
                answer(json!({"uid": "u", "allowed": true, "patch": encode(&json!([]))})),
                true,
                "webhook returned response.patch but not response.patchType",
            ),
            (
                answer(
                    json!({"uid": "u", "allowed": true, "patchType": "Merge", "patch": encode(&json!([]))}),
                ),
                true,
                "webhook returned invalid response.patchType of \"Merge\"",
            ),
            (
                answer(
                    json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": "%%%"}),
                ),
                true,
                "response.patch is not base64",
            ),
            (
                answer(
                    json!({"uid": "u", "allowed": true, "patchType": "JSONPatch",
                "patch": encode(&json!({"op": "add"}))}),
                ),
                true,
                "response.patch is not a JSONPatch",
            ),
            (
                answer(
                    json!({"uid": "u", "allowed": true, "patchType": "JSONPatch",
                "patch": encode(&json!([]))}),
                ),
                false,
                "validating webhooks may not return patches",
            ),
        ];
        for (body, mutating, want) in cases {
            let got = read("h.example.com", "u", mutating, &body).unwrap_err();
            assert!(got.starts_with(want), "{got} / {want}");
        }
        let e = call_failed("h.example.com", "boom");
        assert_eq!(e.code(), 500);
        assert_eq!(
            e.message(),
            "Internal error occurred: failed calling webhook \"h.example.com\": boom"
        );
    }
}

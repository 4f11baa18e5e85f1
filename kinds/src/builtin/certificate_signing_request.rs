//! `certificates.k8s.io/v1` CertificateSigningRequest: a request (PKCS #10, PEM) for a
//! certificate from a named signer. An approver adds the `Approved` or `Denied` condition
//! through the `approval` subresource (`kubectl certificate approve`); the signer puts the
//! certificate in `status.certificate` through `status`. Who asked (`spec.username`, `groups`,
//! `uid`, `extra`) is filled in by the API server from the request's user, never by the client
//! (the `CertificateSigningRequest` admission plugin of the API server).

use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `certificates.k8s.io/v1` CertificateSigningRequest.
pub struct CertificateSigningRequest;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "certificates.k8s.io",
    version: "v1",
    kind: "CertificateSigningRequest",
    plural: "certificatesigningrequests",
    singular: "certificatesigningrequest",
    short_names: &["csr"],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[
        status("certificates.k8s.io", "v1", "CertificateSigningRequest"),
        Subresource {
            name: "approval",
            group: "certificates.k8s.io",
            version: "v1",
            kind: "CertificateSigningRequest",
            verbs: &["get", "patch", "update"],
        },
    ],
    categories: &[],
    selectable_fields: &[SelectableField::path(
        "spec.signerName",
        &["spec", "signerName"],
        "",
    )],
};

/// The signer of kubelets' client certificates (`system:node:<name>` in `system:nodes`).
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of client certificates for the API server generally.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// The usages a request may name: Kubernetes' `KeyUsage` strings.
const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];
/// The shortest certificate a request may ask for.
const MIN_EXPIRATION_SECONDS: i32 = 600;
/// The conditions an approver sets.
const APPROVAL_CONDITIONS: &[&str] = &["Approved", "Denied"];

/// The request's PEM text, if it is text.
pub fn request_pem(csr: &Csr) -> Option<&str> {
    std::str::from_utf8(&csr.spec.request.0).ok()
}

/// Whether the condition `kind` is set (status `True`).
pub fn has_condition(csr: &Csr, kind: &str) -> bool {
    csr.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == kind && c.status == "True")
}

fn validate_spec(csr: &Csr) -> Vec<FieldError> {
    let spec = Path::new("spec");
    let mut errs = Vec::new();
    match request_pem(csr).map(skiff_pki::Request::from_pem) {
        None => errs.push(FieldError::invalid(
            spec.child("request"),
            "<binary>",
            "the request is not PEM text",
        )),
        Some(Err(e)) => errs.push(FieldError::invalid(
            spec.child("request"),
            "<request>",
            e.to_string(),
        )),
        Some(Ok(_)) => {}
    }
    let signer = csr.spec.signer_name.as_str();
    if signer.is_empty() {
        errs.push(FieldError::required(spec.child("signerName"), ""));
    } else {
        // `<domain>/<path>`: a DNS subdomain, a slash, a path.
        match signer.split_once('/') {
            Some((domain, path)) if !path.is_empty() => {
                for m in names::dns1123_subdomain(domain) {
                    errs.push(FieldError::invalid(spec.child("signerName"), signer, m));
                }
            }
            _ => errs.push(FieldError::invalid(
                spec.child("signerName"),
                signer,
                "must be a fully qualified domain and path of the form 'example.com/signer-name'",
            )),
        }
    }
    if let Some(seconds) = csr.spec.expiration_seconds
        && seconds < MIN_EXPIRATION_SECONDS
    {
        errs.push(FieldError::invalid(
            spec.child("expirationSeconds"),
            seconds,
            format!("may not specify a duration less than {MIN_EXPIRATION_SECONDS} seconds"),
        ));
    }
    let usages = csr.spec.usages.iter().flatten();
    if csr.spec.usages.as_ref().is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(spec.child("usages"), ""));
    }
    let mut seen = Vec::new();
    for (i, usage) in usages.enumerate() {
        if !USAGES.contains(&usage.as_str()) {
            errs.push(FieldError::not_supported(
                spec.child("usages").index(i),
                usage.as_str(),
                USAGES,
            ));
        } else if seen.contains(&usage) {
            errs.push(FieldError::duplicate(
                spec.child("usages").index(i),
                usage.as_str(),
            ));
        }
        seen.push(usage);
    }
    errs
}

/// The conditions: each type once; `Approved` and `Denied` not both.
fn validate_conditions(csr: &Csr) -> Vec<FieldError> {
    let path = Path::new("status").child("conditions");
    let mut errs = Vec::new();
    let conditions = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten());
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in conditions.enumerate() {
        if c.type_.is_empty() {
            errs.push(FieldError::required(path.index(i).child("type"), ""));
        }
        if !["True", "False", "Unknown"].contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                path.index(i).child("status"),
                c.status.as_str(),
                &["True", "False", "Unknown"],
            ));
        }
        if seen.contains(&c.type_.as_str()) {
            errs.push(FieldError::duplicate(
                path.index(i).child("type"),
                c.type_.as_str(),
            ));
        }
        seen.push(c.type_.as_str());
    }
    if has_condition(csr, "Approved") && has_condition(csr, "Denied") {
        errs.push(FieldError::invalid(
            path,
            "Approved, Denied",
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    errs
}

/// Approved or Denied, once set, stays (an approval cannot be taken back).
fn validate_kept_decision(new: &Csr, old: &Csr) -> Vec<FieldError> {
    APPROVAL_CONDITIONS
        .iter()
        .filter(|kind| has_condition(old, kind) && !has_condition(new, kind))
        .map(|kind| {
            FieldError::forbidden(
                Path::new("status").child("conditions"),
                format!("updates may not remove a condition of type {kind:?}"),
            )
        })
        .collect()
}

fn certificate(csr: &Csr) -> &[u8] {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map_or(&[][..], |c| &c.0)
}

fn validate_status(new: &Value, old: &Value) -> Checked {
    let new: Csr = decode(new, "")?;
    let old: Csr = decode(old, "")?;
    let mut errs = validate_conditions(&new);
    errs.extend(validate_kept_decision(&new, &old));
    let path = Path::new("status").child("certificate");
    let (issued, before) = (certificate(&new), certificate(&old));
    if !before.is_empty() && issued != before {
        errs.push(FieldError::forbidden(
            path,
            "updates may not modify existing certificate content",
        ));
    } else if !issued.is_empty() && issued != before {
        if !has_condition(&new, "Approved") {
            errs.push(FieldError::forbidden(
                path.clone(),
                "certificate may only be set if the request is approved",
            ));
        }
        if has_condition(&new, "Failed") {
            errs.push(FieldError::forbidden(
                path.clone(),
                "certificate may not be set if the request has failed",
            ));
        }
        let pem = std::str::from_utf8(issued).unwrap_or_default();
        if skiff_pki::not_after(pem).is_err() {
            errs.push(FieldError::invalid(
                path,
                "<certificate data>",
                "must contain at least one CERTIFICATE PEM block",
            ));
        }
    }
    Ok(errs)
}

fn validate_approval(new: &Value, old: &Value) -> Checked {
    let new: Csr = decode(new, "")?;
    let old: Csr = decode(old, "")?;
    let mut errs = validate_conditions(&new);
    errs.extend(validate_kept_decision(&new, &old));
    Ok(errs)
}

/// The CONDITION column: `Approved,Issued`, `Denied`, `Failed`, or `Pending`.
fn condition_cell(csr: &Csr) -> String {
    let mut shown: Vec<&str> = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.status == "True")
        .map(|c| c.type_.as_str())
        .collect();
    if !certificate(csr).is_empty() {
        shown.push("Issued");
    }
    if shown.is_empty() {
        "Pending".to_string()
    } else {
        shown.join(",")
    }
}

impl Kind for CertificateSigningRequest {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Csr>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Csr>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            AGE,
            col("SignerName", "string", "The name of the signer."),
            col("Requestor", "string", "The user who made the request."),
            col(
                "RequestedDuration",
                "string",
                "The validity the request asks for.",
            ),
            col("Condition", "string", "The request's conditions."),
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let csr: Csr = serde_json::from_value(object.clone()).ok()?;
        let duration = match csr.spec.expiration_seconds {
            Some(seconds) => {
                table::human_duration(jiff::SignedDuration::from_secs(i64::from(seconds)))
            }
            None => "<none>".to_string(),
        };
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            table::age_of(object, now),
            json!(csr.spec.signer_name),
            json!(csr.spec.username.clone().unwrap_or_default()),
            json!(duration),
            json!(condition_cell(&csr)),
        ])
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // The request is immutable: an update of the main resource changes metadata only.
        new["spec"] = old["spec"].clone();
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        let csr: Csr = decode(new, "")?;
        let mut errs = match old {
            None => validate_spec(&csr),
            Some(_) => Vec::new(),
        };
        errs.extend(validate_conditions(&csr));
        Ok(errs)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        validate_status(new, old)
    }

    fn subresource_fields(&self, subresource: &str) -> Option<&'static [&'static str]> {
        (subresource == "approval").then_some(&["/status/conditions"][..])
    }

    fn validate_subresource(&self, subresource: &str, new: &Value, old: &Value) -> Checked {
        match subresource {
            "approval" => validate_approval(new, old),
            _ => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;
    use base64::Engine as _;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn csr(request: &str, signer: &str, usages: Value) -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": "node-csr"},
               "spec": {"request": b64(request), "signerName": signer, "usages": usages}})
    }

    fn request() -> String {
        let subject = skiff_pki::Subject::new("system:node:n1", &["system:nodes"]);
        skiff_pki::new_request(&subject).unwrap().0
    }

    #[test]
    fn a_request_must_parse_name_a_signer_and_usages() {
        let good = csr(
            &request(),
            KUBELET_CLIENT_SIGNER,
            json!(["digital signature", "client auth"]),
        );
        assert!(create_msgs("certificates.k8s.io", "CertificateSigningRequest", good).is_empty());
        let msgs = create_msgs(
            "certificates.k8s.io",
            "CertificateSigningRequest",
            csr(
                "junk",
                "nodomain",
                json!(["client auth", "client auth", "flying"]),
            ),
        );
        let text = msgs.join("\n");
        assert!(text.contains("spec.request: Invalid value"), "{text}");
        assert!(
            text.contains("spec.signerName: Invalid value: \"nodomain\""),
            "{text}"
        );
        assert!(
            text.contains("spec.usages[1]: Duplicate value: \"client auth\""),
            "{text}"
        );
        assert!(
            text.contains("spec.usages[2]: Unsupported value: \"flying\""),
            "{text}"
        );
        let msgs = create_msgs(
            "certificates.k8s.io",
            "CertificateSigningRequest",
            csr(&request(), "", json!([])),
        );
        assert!(
            msgs.contains(&"spec.signerName: Required value".to_string()),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(&"spec.usages: Required value".to_string()),
            "{msgs:?}"
        );
    }

    fn with_status(conditions: Value, certificate: Option<&str>) -> Value {
        let mut object = csr(&request(), CLIENT_SIGNER, json!(["client auth"]));
        object["status"] = json!({"conditions": conditions});
        if let Some(c) = certificate {
            object["status"]["certificate"] = json!(b64(c));
        }
        object
    }

    fn approved() -> Value {
        json!([{"type": "Approved", "status": "True", "reason": "R"}])
    }

    #[test]
    fn approval_is_exclusive_and_final() {
        let pending = with_status(json!([]), None);
        let both = with_status(
            json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]),
            None,
        );
        let msgs = CertificateSigningRequest
            .validate_subresource("approval", &both, &pending)
            .unwrap();
        assert!(
            msgs[0].to_string().contains("mutually exclusive"),
            "{msgs:?}"
        );
        let msgs = CertificateSigningRequest
            .validate_subresource("approval", &pending, &with_status(approved(), None))
            .unwrap();
        assert!(
            msgs[0]
                .to_string()
                .contains("may not remove a condition of type \"Approved\"")
        );
        assert!(
            CertificateSigningRequest
                .validate_subresource("approval", &with_status(approved(), None), &pending)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_certificate_only_once_and_only_when_approved() {
        let ca = skiff_pki::Authority::generate("t", std::time::Duration::from_secs(3600)).unwrap();
        let issued = ca
            .issue_client(
                &skiff_pki::Subject::new("u", &[]),
                std::time::Duration::from_secs(600),
            )
            .unwrap()
            .cert_pem;
        let status = |new: &Value, old: &Value| -> Vec<String> {
            CertificateSigningRequest
                .validate_status(new, old)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let before = with_status(approved(), None);
        assert!(status(&with_status(approved(), Some(&issued)), &before).is_empty());
        let unapproved = status(
            &with_status(json!([]), Some(&issued)),
            &with_status(json!([]), None),
        );
        assert!(
            unapproved[0].contains("only be set if the request is approved"),
            "{unapproved:?}"
        );
        let garbage = status(&with_status(approved(), Some("nope")), &before);
        assert!(garbage[0].contains("CERTIFICATE PEM block"), "{garbage:?}");
        let changed = status(
            &with_status(approved(), Some("other")),
            &with_status(approved(), Some(&issued)),
        );
        assert!(
            changed[0].contains("may not modify existing certificate"),
            "{changed:?}"
        );
    }

    #[test]
    fn the_row_says_where_the_request_stands() {
        let csr: Csr = serde_json::from_value(with_status(json!([]), None)).unwrap();
        assert_eq!(condition_cell(&csr), "Pending");
        let csr: Csr = serde_json::from_value(with_status(approved(), Some("x"))).unwrap();
        assert_eq!(condition_cell(&csr), "Approved,Issued");
    }
}

//! The admission plugins of CertificateSigningRequests, as kube-apiserver has them:
//! - the requester's identity goes into the request (`spec.username`, `uid`, `groups`, `extra`),
//!   whatever the client sent, so approvers and signers know who asked;
//! - `CertificateSubjectRestriction`: nobody asks the API server's client signer for a
//!   certificate in `system:masters`;
//! - `CertificateApproval`: approving or denying takes the verb `approve` on the signer
//!   (resource `signers`, name the signer or `<domain>/*`);
//! - `CertificateSigning`: putting a certificate in the status takes the verb `sign` on it.

use std::sync::Arc;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use serde_json::{Value, json};
use skiff_kinds::builtin::certificate_signing_request::{self as csr, CLIENT_SIGNER};

use super::{Attributes, Operation, Plugin};
use crate::auth::{MASTERS_GROUP, User};
use crate::authz::{Authorizer, Request};
use crate::error::{Error, Result};
use crate::registry::Registry;

/// The CertificateSigningRequest admission plugins, in one.
pub struct Certificates(pub Arc<Authorizer>);

#[async_trait::async_trait]
impl Plugin for Certificates {
    fn name(&self) -> &'static str {
        "CertificateSigningRequest"
    }

    async fn admit(&self, _registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info.group != csr::INFO.group || a.info.plural != csr::INFO.plural {
            return Ok(());
        }
        match (a.operation, a.subresource) {
            (Operation::Create, None) => {
                let Some(object) = a.object.as_deref_mut() else {
                    return Ok(());
                };
                fill_requester(object, a.user);
                restrict_subject(object)
            }
            (Operation::Update, Some("approval")) => {
                let (Some(new), Some(old)) = (a.object.as_deref(), a.old) else {
                    return Ok(());
                };
                let decided = |object: &Value| {
                    let parsed: Option<Csr> = serde_json::from_value(object.clone()).ok();
                    parsed.map(|c| {
                        (
                            csr::has_condition(&c, "Approved"),
                            csr::has_condition(&c, "Denied"),
                        )
                    })
                };
                if decided(new) != decided(old) {
                    self.may(a.user, "approve", old)?;
                }
                Ok(())
            }
            (Operation::Update, Some("status")) => {
                let (Some(new), Some(old)) = (a.object.as_deref(), a.old) else {
                    return Ok(());
                };
                if new["status"]["certificate"] != old["status"]["certificate"] {
                    self.may(a.user, "sign", old)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl Certificates {
    /// Whether `user` may `verb` (approve, sign) requests of `object`'s signer: on the signer's
    /// name, or on every signer of its domain (`example.com/*`).
    fn may(&self, user: &User, verb: &str, object: &Value) -> Result<()> {
        let signer = object["spec"]["signerName"].as_str().unwrap_or_default();
        let wildcard = match signer.split_once('/') {
            Some((domain, _)) => format!("{domain}/*"),
            None => String::new(),
        };
        let allowed = [signer, wildcard.as_str()].iter().any(|name| {
            !name.is_empty()
                && self
                    .0
                    .authorize(
                        user,
                        &Request::Resource {
                            verb,
                            group: "certificates.k8s.io",
                            resource: "signers",
                            subresource: "",
                            namespace: "",
                            name,
                        },
                    )
                    .allowed()
        });
        if allowed {
            Ok(())
        } else {
            Err(Error::Forbidden(format!(
                "user not permitted to {verb} requests with signerName {signer:?}"
            )))
        }
    }
}

/// The requester's identity in `spec`, replacing what the client sent.
fn fill_requester(object: &mut Value, user: &User) {
    if !object["spec"].is_object() {
        return;
    }
    let spec = &mut object["spec"];
    spec["username"] = json!(user.name);
    spec["groups"] = json!(user.groups);
    match user.uid.as_str() {
        "" => {
            spec.as_object_mut().map(|s| s.remove("uid"));
        }
        uid => spec["uid"] = json!(uid),
    }
    match user.extra.is_empty() {
        true => {
            spec.as_object_mut().map(|s| s.remove("extra"));
        }
        false => spec["extra"] = json!(user.extra),
    }
}

/// `CertificateSubjectRestriction`: no certificate in `system:masters` from the client signer.
fn restrict_subject(object: &Value) -> Result<()> {
    if object["spec"]["signerName"].as_str() != Some(CLIENT_SIGNER) {
        return Ok(());
    }
    let parsed: Option<Csr> = serde_json::from_value(object.clone()).ok();
    let Some(request) = parsed
        .as_ref()
        .and_then(csr::request_pem)
        .and_then(|pem| skiff_pki::Request::from_pem(pem).ok())
    else {
        // Validation says what is wrong with it.
        return Ok(());
    };
    if request
        .subject
        .organizations
        .iter()
        .any(|o| o == MASTERS_GROUP)
    {
        return Err(Error::Forbidden(format!(
            "use of {CLIENT_SIGNER} signer with {MASTERS_GROUP} group is not allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn object(signer: &str, organizations: &[&str]) -> Value {
        let subject = skiff_pki::Subject::new("alice", organizations);
        let (pem, _) = skiff_pki::new_request(&subject).unwrap();
        json!({"metadata": {"name": "r"}, "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": signer, "usages": ["client auth"],
            "username": "forged", "groups": ["system:masters"]}})
    }

    #[test]
    fn the_requester_is_whoever_asked() {
        let mut o = object(CLIENT_SIGNER, &[]);
        let user = User {
            name: "system:bootstrap:abc".into(),
            groups: vec!["system:bootstrappers".into()],
            ..User::default()
        };
        fill_requester(&mut o, &user);
        assert_eq!(o["spec"]["username"], "system:bootstrap:abc");
        assert_eq!(o["spec"]["groups"], json!(["system:bootstrappers"]));
        assert!(o["spec"].get("uid").is_none());
    }

    #[test]
    fn nobody_asks_the_client_signer_for_system_masters() {
        let err = restrict_subject(&object(CLIENT_SIGNER, &["system:masters"])).unwrap_err();
        assert!(
            err.to_string()
                .contains("with system:masters group is not allowed"),
            "{err}"
        );
        assert!(restrict_subject(&object(CLIENT_SIGNER, &["devs"])).is_ok());
        assert!(restrict_subject(&object("example.com/other", &["system:masters"])).is_ok());
    }
}

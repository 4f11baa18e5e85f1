//! The certificate controllers' pure part, as kube-controller-manager's `csrapproving` and
//! `csrsigning`:
//! - the approver recognizes a kubelet asking for its client certificate (signer
//!   `kubernetes.io/kube-apiserver-client-kubelet`, subject `system:node:<name>` in
//!   `system:nodes`, no alternative names, client usages) and approves it when the requester may
//!   `create` `certificatesigningrequests/nodeclient` (a bootstrapper, with the join token) or
//!   `selfnodeclient` (the node itself, renewing), as a SubjectAccessReview answers;
//! - skiff adds one case: an agent's service proxy asking, the same way, for the
//!   `system:kube-proxy` client certificate from `kubernetes.io/kube-apiserver-client`, so the
//!   agent's proxy has its own identity as the kubelet has (Kubernetes leaves that to the
//!   installer; a join token is what skiff's installer hands out);
//! - the signer signs approved requests of those two signers with the cluster CA, with the
//!   usages the request names, for `expirationSeconds` or the signing duration, whichever is
//!   shorter; a kubelet request that does not hold is marked `Failed` instead.

/// The shell: the informer, the reviews and the writes.
pub(crate) mod controller;

use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use skiff_pki::{Request, Usage};

/// The signer of kubelets' client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of client certificates for the API server.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// The proxy's user.
pub const PROXY_USER: &str = "system:kube-proxy";
const NODE_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";

/// What kind of request the approver may approve, and the subresource the requester needs
/// `create` on for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recognized {
    /// A kubelet's first client certificate, asked for by whoever bootstraps it.
    NodeClient,
    /// A kubelet renewing its own client certificate.
    SelfNodeClient,
    /// An agent's proxy (skiff's addition), asked for as a node client is.
    ProxyClient,
}

impl Recognized {
    /// The subresource of `certificatesigningrequests` the requester must be allowed to create.
    pub fn subresource(self) -> &'static str {
        match self {
            Recognized::SelfNodeClient => "selfnodeclient",
            Recognized::NodeClient | Recognized::ProxyClient => "nodeclient",
        }
    }

    /// The message of the `Approved` condition.
    pub fn message(self) -> &'static str {
        match self {
            Recognized::NodeClient => {
                "Auto approving kubelet client certificate after SubjectAccessReview."
            }
            Recognized::SelfNodeClient => {
                "Auto approving self kubelet client certificate after SubjectAccessReview."
            }
            Recognized::ProxyClient => {
                "Auto approving kube-proxy client certificate after SubjectAccessReview."
            }
        }
    }
}

fn usages(csr: &Csr) -> Vec<&str> {
    csr.spec
        .usages
        .iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

fn has_condition(csr: &Csr, kind: &str) -> bool {
    csr.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == kind && c.status == "True")
}

/// Whether the request is settled: approved, denied or failed already.
pub fn decided(csr: &Csr) -> bool {
    ["Approved", "Denied", "Failed"]
        .iter()
        .any(|k| has_condition(csr, k))
}

fn request(csr: &Csr) -> Result<Request, String> {
    let pem =
        std::str::from_utf8(&csr.spec.request.0).map_err(|_| "the request is not PEM text")?;
    Request::from_pem(pem).map_err(|e| e.to_string())
}

/// Kubernetes' check of a kubelet client request: `system:node:<name>` in `system:nodes` alone,
/// no alternative names, `client auth` with at most `digital signature` and `key
/// encipherment` beside it.
pub fn check_kubelet_client(csr: &Csr) -> Result<(), String> {
    let request = request(csr)?;
    let subject = &request.subject;
    if subject.organizations != [NODES_GROUP] {
        return Err(format!("subject organization is not {NODES_GROUP}"));
    }
    if !subject.common_name.starts_with(NODE_PREFIX)
        || subject.common_name.len() == NODE_PREFIX.len()
    {
        return Err(format!(
            "subject common name does not begin with {NODE_PREFIX}"
        ));
    }
    if request.alternative_names() > 0 {
        return Err("alternative names are not allowed".into());
    }
    check_client_usages(csr)
}

fn check_client_usages(csr: &Csr) -> Result<(), String> {
    let usages = usages(csr);
    let allowed = ["digital signature", "key encipherment", "client auth"];
    if !usages.contains(&"client auth") || usages.iter().any(|u| !allowed.contains(u)) {
        return Err(format!(
            "usages did not match [client auth] with optional digital signature and key encipherment: {usages:?}"
        ));
    }
    Ok(())
}

/// What the approver makes of a pending request; `None` for one it leaves to people.
pub fn recognize(csr: &Csr) -> Option<Recognized> {
    if decided(csr) {
        return None;
    }
    match csr.spec.signer_name.as_str() {
        KUBELET_CLIENT_SIGNER => {
            check_kubelet_client(csr).ok()?;
            let subject = request(csr).ok()?.subject;
            Some(
                match csr.spec.username.as_deref() == Some(subject.common_name.as_str()) {
                    true => Recognized::SelfNodeClient,
                    false => Recognized::NodeClient,
                },
            )
        }
        CLIENT_SIGNER => {
            let request = request(csr).ok()?;
            let proxy = request.subject.common_name == PROXY_USER
                && request.subject.organizations.is_empty()
                && request.alternative_names() == 0;
            (proxy && check_client_usages(csr).is_ok()).then_some(Recognized::ProxyClient)
        }
        _ => None,
    }
}

/// What the signer does with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Signing {
    /// Not this signer's, or not approved yet, or done.
    Skip,
    /// Sign it with these usages, valid this long.
    Sign(Vec<Usage>, Duration),
    /// It cannot be signed: mark it `Failed` with this message.
    Fail(String),
}

/// What the signer does with `csr`, signing for at most `max`.
pub fn signing(csr: &Csr, max: Duration) -> Signing {
    let signer = csr.spec.signer_name.as_str();
    if ![KUBELET_CLIENT_SIGNER, CLIENT_SIGNER].contains(&signer)
        || !has_condition(csr, "Approved")
        || has_condition(csr, "Failed")
        || csr
            .status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_some_and(|c| !c.0.is_empty())
    {
        return Signing::Skip;
    }
    let checked = match signer {
        KUBELET_CLIENT_SIGNER => check_kubelet_client(csr),
        _ => request(csr)
            .map(|_| ())
            .and_then(|_| check_client_usages(csr)),
    };
    if let Err(why) = checked {
        return Signing::Fail(why);
    }
    let mut parsed = Vec::new();
    for usage in usages(csr) {
        match Usage::parse(usage) {
            Some(u) if u != Usage::ServerAuth => parsed.push(u),
            _ => return Signing::Fail(format!("invalid usage for client certificate: {usage}")),
        }
    }
    let asked = csr
        .spec
        .expiration_seconds
        .map(|s| Duration::from_secs(s.max(600) as u64));
    Signing::Sign(parsed, asked.map_or(max, |a| a.min(max)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    use skiff_pki::Subject;

    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

    fn csr(cn: &str, orgs: &[&str], signer: &str, usages: &[&str], requester: &str) -> Csr {
        let (pem, _) = skiff_pki::new_request(&Subject::new(cn, orgs)).unwrap();
        Csr {
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem.into_bytes()),
                signer_name: signer.into(),
                usages: Some(usages.iter().map(|u| u.to_string()).collect()),
                username: Some(requester.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn kubelet(requester: &str) -> Csr {
        csr(
            "system:node:n1",
            &["system:nodes"],
            KUBELET_CLIENT_SIGNER,
            &["digital signature", "client auth"],
            requester,
        )
    }

    fn with(mut csr: Csr, condition: &str) -> Csr {
        csr.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: condition.into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        csr
    }

    #[test]
    fn kubelet_requests_are_recognized_by_who_asks() {
        assert_eq!(
            recognize(&kubelet("system:bootstrap:abc")),
            Some(Recognized::NodeClient)
        );
        assert_eq!(
            recognize(&kubelet("system:node:n1")),
            Some(Recognized::SelfNodeClient)
        );
        assert_eq!(recognize(&with(kubelet("x"), "Approved")), None);
        assert_eq!(recognize(&with(kubelet("x"), "Denied")), None);
        // Not a node's subject, or a server usage: left to people.
        let alice = csr(
            "alice",
            &["system:nodes"],
            KUBELET_CLIENT_SIGNER,
            &["client auth"],
            "x",
        );
        assert_eq!(recognize(&alice), None);
        let masters = csr(
            "system:node:n1",
            &["system:masters"],
            KUBELET_CLIENT_SIGNER,
            &["client auth"],
            "x",
        );
        assert_eq!(recognize(&masters), None);
        let serving = csr(
            "system:node:n1",
            &["system:nodes"],
            KUBELET_CLIENT_SIGNER,
            &["server auth"],
            "x",
        );
        assert_eq!(recognize(&serving), None);
        let other = csr(
            "system:node:n1",
            &["system:nodes"],
            "example.com/x",
            &["client auth"],
            "x",
        );
        assert_eq!(recognize(&other), None);
    }

    #[test]
    fn a_proxy_request_is_recognized_and_nothing_else_of_the_client_signer() {
        let proxy = csr(
            PROXY_USER,
            &[],
            CLIENT_SIGNER,
            &["digital signature", "client auth"],
            "b",
        );
        assert_eq!(recognize(&proxy), Some(Recognized::ProxyClient));
        let admin = csr("admin", &[], CLIENT_SIGNER, &["client auth"], "b");
        assert_eq!(recognize(&admin), None);
        let grouped = csr(
            PROXY_USER,
            &["system:nodes"],
            CLIENT_SIGNER,
            &["client auth"],
            "b",
        );
        assert_eq!(recognize(&grouped), None);
    }

    #[test]
    fn only_approved_requests_are_signed_for_at_most_the_signing_duration() {
        assert_eq!(signing(&kubelet("x"), YEAR), Signing::Skip);
        assert_eq!(signing(&with(kubelet("x"), "Denied"), YEAR), Signing::Skip);
        assert_eq!(
            signing(&with(kubelet("x"), "Approved"), YEAR),
            Signing::Sign(vec![Usage::DigitalSignature, Usage::ClientAuth], YEAR)
        );
        let mut short = with(kubelet("x"), "Approved");
        short.spec.expiration_seconds = Some(3600);
        assert_eq!(
            signing(&short, YEAR),
            Signing::Sign(
                vec![Usage::DigitalSignature, Usage::ClientAuth],
                Duration::from_secs(3600)
            )
        );
        // An administrator approved a kubelet request that does not hold: it fails.
        let bad = with(
            csr("alice", &[], KUBELET_CLIENT_SIGNER, &["client auth"], "x"),
            "Approved",
        );
        assert!(matches!(signing(&bad, YEAR), Signing::Fail(m) if m.contains("organization")));
        let unknown = with(
            csr(
                "a",
                &[],
                CLIENT_SIGNER,
                &["client auth", "code signing"],
                "x",
            ),
            "Approved",
        );
        assert!(matches!(signing(&unknown, YEAR), Signing::Fail(_)));
        let other = with(
            csr("a", &[], "example.com/x", &["client auth"], "x"),
            "Approved",
        );
        assert_eq!(signing(&other, YEAR), Signing::Skip);
    }
}

//! The certificate controllers' shells: `csrapproving` asks the API server, by a
//! SubjectAccessReview, whether the requester may have what it asks for and approves through
//! the `approval` subresource; `csrsigning` signs with the CA of `--cluster-signing-cert-file`
//! and `--cluster-signing-key-file` through `status`.

use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_client::{Api, Informer, key_of};

use super as logic;
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict};
use crate::{Error, Result};

fn by_name(e: Event<'_, Csr>) -> Vec<String> {
    match e {
        Event::Deleted(_) => Vec::new(),
        e => vec![key_of(e.object())],
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

/// The request's conditions with `condition` added.
fn conditions_with(csr: &Csr, condition: serde_json::Value) -> serde_json::Value {
    let mut all: Vec<serde_json::Value> = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    all.push(condition);
    json!({"status": {"conditions": all}})
}

struct Approver {
    requests: Informer<Csr>,
    client: skiff_client::Client,
}

/// Registers the approver on the shared informers.
pub(crate) fn start_approving(ctx: &Context) -> Result<Started> {
    let requests = ctx.factory.informer::<Csr>();
    let controller = Controller::new("csrapproving", ctx.workers).watches(&requests, by_name);
    Ok(controller.run(Arc::new(Approver {
        requests,
        client: ctx.factory.client().clone(),
    })))
}

impl Approver {
    /// Whether the requester may create `certificatesigningrequests/<subresource>`.
    async fn may(&self, csr: &Csr, subresource: &str) -> Result<bool> {
        let spec = &csr.spec;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: spec.username.clone(),
                uid: spec.uid.clone(),
                groups: spec.groups.clone(),
                extra: spec.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("certificates.k8s.io".into()),
                    resource: Some("certificatesigningrequests".into()),
                    subresource: Some(subresource.into()),
                    verb: Some("create".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(Error::api("asking a SubjectAccessReview"))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

impl Reconcile for Approver {
    async fn reconcile(&self, name: &str) -> Result<Action> {
        let Some(csr) = self.requests.cache().get(None, name) else {
            return Ok(Action::AwaitChange);
        };
        let Some(kind) = logic::recognize(&csr) else {
            return Ok(Action::AwaitChange);
        };
        if !self.may(&csr, kind.subresource()).await? {
            tracing::debug!(%name, "not approving: the requester may not ask for this");
            return Ok(Action::AwaitChange);
        }
        let patch = conditions_with(
            &csr,
            json!({"type": "Approved", "status": "True", "reason": "AutoApproved",
                   "message": kind.message(), "lastUpdateTime": now(),
                   "lastTransitionTime": now()}),
        );
        let api: Api<Csr> = Api::all(self.client.clone());
        match api
            .patch_subresource(
                "approval",
                name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(%name, "approved a certificate signing request");
                Ok(Action::AwaitChange)
            }
            Err(e) if conflict(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api(format!("approving {name}"))(e)),
        }
    }
}

struct Signer {
    requests: Informer<Csr>,
    client: skiff_client::Client,
    authority: Arc<skiff_pki::Authority>,
    max: std::time::Duration,
}

/// Registers the signer on the shared informers; without a CA it signs nothing (and says so).
pub(crate) fn start_signing(ctx: &Context) -> Result<Started> {
    let options = ctx.options;
    let (Some(cert), Some(key)) = (
        &options.cluster_signing_cert_file,
        &options.cluster_signing_key_file,
    ) else {
        tracing::warn!(
            "csrsigning: no --cluster-signing-cert-file/--cluster-signing-key-file; certificate requests are not signed"
        );
        return Ok(Controller::new("csrsigning", 1).run(Arc::new(Idle)));
    };
    let read = |path: &std::path::PathBuf| {
        std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("reading {}: {e}", path.display())))
    };
    let authority = skiff_pki::Authority::from_pem(&read(cert)?, &read(key)?)
        .map_err(|e| Error::Config(format!("the cluster signing CA: {e}")))?;
    let requests = ctx.factory.informer::<Csr>();
    let controller = Controller::new("csrsigning", ctx.workers).watches(&requests, by_name);
    Ok(controller.run(Arc::new(Signer {
        requests,
        client: ctx.factory.client().clone(),
        authority: Arc::new(authority),
        max: options.cluster_signing_duration,
    })))
}

/// A controller with nothing to do.
struct Idle;

impl Reconcile for Idle {
    async fn reconcile(&self, _key: &str) -> Result<Action> {
        Ok(Action::AwaitChange)
    }
}

impl Reconcile for Signer {
    async fn reconcile(&self, name: &str) -> Result<Action> {
        let Some(csr) = self.requests.cache().get(None, name) else {
            return Ok(Action::AwaitChange);
        };
        let patch = match logic::signing(&csr, self.max) {
            logic::Signing::Skip => return Ok(Action::AwaitChange),
            logic::Signing::Fail(message) => conditions_with(
                &csr,
                json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                       "message": message, "lastUpdateTime": now(),
                       "lastTransitionTime": now()}),
            ),
            logic::Signing::Sign(usages, validity) => {
                let pem = std::str::from_utf8(&csr.spec.request.0).unwrap_or_default();
                let signed = skiff_pki::Request::from_pem(pem)
                    .and_then(|request| self.authority.sign(&request, &usages, validity));
                match signed {
                    Ok(cert) => {
                        use base64::Engine as _;
                        let encoded = base64::engine::general_purpose::STANDARD.encode(cert);
                        json!({"status": {"certificate": encoded}})
                    }
                    Err(e) => conditions_with(
                        &csr,
                        json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                               "message": e.to_string(), "lastUpdateTime": now(),
                               "lastTransitionTime": now()}),
                    ),
                }
            }
        };
        let api: Api<Csr> = Api::all(self.client.clone());
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(%name, "signed or failed a certificate signing request");
                Ok(Action::AwaitChange)
            }
            Err(e) if conflict(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(Error::api(format!("signing {name}"))(e)),
        }
    }
}

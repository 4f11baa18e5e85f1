//! The service-account token controller's shell: token Secrets are its keys; an account's
//! events queue the token Secrets that name it. Tokens are signed with the key of
//! `--service-account-private-key-file`; without one the controller does nothing (and says so),
//! as kube-controller-manager leaves the controller out.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{DeleteParams, PostParams, Preconditions};
use skiff_client::{Api, Informer, key_of};
use skiff_pki::legacy_token::Signer;

use super as logic;
use crate::manager::Context;
use crate::rootcacert::controller::ClusterCa;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, conflict, not_found};
use crate::{Error, Result};

/// The index of token Secrets by the account they name, `namespace/name`.
const BY_ACCOUNT: &str = "serviceaccount-token.account";

struct Tokens {
    secrets: Informer<Secret>,
    accounts: Informer<ServiceAccount>,
    client: skiff_client::Client,
    signer: Signer,
    ca: ClusterCa,
}

/// Registers the controller on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let Some(path) = &ctx.options.service_account_private_key_file else {
        tracing::warn!(
            "serviceaccount-token: no --service-account-private-key-file; token Secrets are not filled"
        );
        return Ok(Controller::new("serviceaccount-token", 1).run(Arc::new(Idle)));
    };
    let pem = std::fs::read_to_string(path).map_err(|e| {
        Error::Config(format!(
            "reading --service-account-private-key-file {}: {e}",
            path.display()
        ))
    })?;
    let signer = Signer::from_pem(&pem).map_err(|e| {
        Error::Config(format!(
            "--service-account-private-key-file {}: {e}",
            path.display()
        ))
    })?;
    let secrets = ctx.factory.informer::<Secret>();
    secrets.add_index(BY_ACCOUNT, |s: &Secret| {
        logic::account_of(s)
            .map(|(ns, name)| format!("{ns}/{name}"))
            .into_iter()
            .collect()
    });
    let accounts = ctx.factory.informer::<ServiceAccount>();
    let by_account = secrets.clone();
    let controller = Controller::new("serviceaccount-token", ctx.workers)
        .watches(&secrets, |e: Event<'_, Secret>| match e {
            Event::Deleted(_) => Vec::new(),
            e if logic::account_of(e.object()).is_some() => vec![key_of(e.object())],
            _ => Vec::new(),
        })
        // An account added (Secrets made before it wait for it) or deleted (its Secrets go).
        .watches(&accounts, move |e: Event<'_, ServiceAccount>| {
            by_account
                .cache()
                .keys_by_index(BY_ACCOUNT, &key_of(e.object()))
        });
    Ok(controller.run(Arc::new(Tokens {
        secrets,
        accounts,
        client: ctx.factory.client().clone(),
        signer,
        ca: ClusterCa::new(ctx),
    })))
}

/// A controller with nothing to do.
struct Idle;

impl Reconcile for Idle {
    async fn reconcile(&self, _key: &str) -> Result<Action> {
        Ok(Action::AwaitChange)
    }
}

impl Tokens {
    /// The account `secret` is for, if it exists and is the one its uid annotation names: the
    /// cache, and on a miss the API (an account made just before its Secret may not be cached
    /// yet, and deleting the Secret for that would be wrong).
    async fn account(&self, secret: &Secret) -> Result<Option<ServiceAccount>> {
        let Some((ns, name)) = logic::account_of(secret) else {
            return Ok(None);
        };
        if let Some(cached) = self.accounts.cache().get(Some(ns), name)
            && logic::belongs_to(secret, &cached)
        {
            return Ok(Some((*cached).clone()));
        }
        let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        let live = api
            .get_opt(name)
            .await
            .map_err(Error::api(format!("reading service account {ns}/{name}")))?;
        Ok(live.filter(|a| logic::belongs_to(secret, a)))
    }
}

impl Reconcile for Tokens {
    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(secret) = self.secrets.cache().get_by_key(key) else {
            return Ok(Action::AwaitChange);
        };
        let account = self.account(&secret).await?;
        let ca = self.ca.get().await?;
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        match logic::plan(&secret, account.as_ref(), ca) {
            logic::Plan::Done => Ok(Action::AwaitChange),
            logic::Plan::Delete { uid } => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(name, &params).await {
                    Ok(_) => {
                        tracing::info!(%key, "deleted a token Secret whose service account is gone");
                        Ok(Action::AwaitChange)
                    }
                    Err(e) if not_found(&e) || conflict(&e) => Ok(Action::AwaitChange),
                    Err(e) => Err(Error::api(format!("deleting token Secret {key}"))(e)),
                }
            }
            logic::Plan::Update { secret, mint } => {
                let secret = match mint {
                    Some(claims) => {
                        let token = self.signer.sign(&claims).map_err(|e| {
                            Error::Config(format!("signing a token for {key}: {e}"))
                        })?;
                        logic::with_token(*secret, &token)
                    }
                    None => *secret,
                };
                match api.replace(name, &PostParams::default(), &secret).await {
                    Ok(_) => Ok(Action::AwaitChange),
                    // Changed or gone since the cache saw it: its event brings it back.
                    Err(e) if not_found(&e) || conflict(&e) => Ok(Action::AwaitChange),
                    Err(e) => Err(Error::api(format!("filling token Secret {key}"))(e)),
                }
            }
        }
    }
}

//! The service-account token controller's pure part (kube-controller-manager's
//! `serviceaccount-token`): a Secret of type `kubernetes.io/service-account-token` annotated with
//! `kubernetes.io/service-account.name` gets a legacy token of that account under `token`, the
//! cluster CA under `ca.crt`, its namespace under `namespace`, and the account's uid in the
//! annotation `kubernetes.io/service-account.uid`. A token Secret whose account does not exist,
//! or is another account of that name than the uid annotation says, is deleted; so deleting an
//! account deletes its token Secrets.
//!
//! A token already there is left alone (also one written by hand), as kube-controller-manager
//! does; the API server accepts only a token its Secret holds.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use skiff_pki::legacy_token::Claims;

/// The Secret type this controller fills.
pub const TYPE: &str = "kubernetes.io/service-account-token";
/// The annotation naming the account.
pub const NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// The annotation holding the account's uid.
pub const UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
/// The data key of the token.
pub const TOKEN_KEY: &str = "token";
/// The data key of the CA bundle.
pub const CA_KEY: &str = "ca.crt";
/// The data key of the namespace.
pub const NAMESPACE_KEY: &str = "namespace";

fn annotation<'a>(secret: &'a Secret, key: &str) -> Option<&'a str> {
    secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The account a token Secret is for: `(namespace, name)`; `None` for any other Secret.
pub fn account_of(secret: &Secret) -> Option<(&str, &str)> {
    if secret.type_.as_deref() != Some(TYPE) {
        return None;
    }
    let ns = secret.metadata.namespace.as_deref()?;
    Some((ns, annotation(secret, NAME_ANNOTATION)?))
}

/// Whether `account` is the one token Secret `secret` is for: its name, and its uid unless the
/// Secret has none yet.
pub fn belongs_to(secret: &Secret, account: &ServiceAccount) -> bool {
    account_of(secret).is_some_and(|(_, name)| account.metadata.name.as_deref() == Some(name))
        && annotation(secret, UID_ANNOTATION)
            .is_none_or(|uid| account.metadata.uid.as_deref() == Some(uid))
}

/// What to do with a token Secret.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing: it is complete, being deleted, or no token Secret.
    Done,
    /// Delete it, on the condition that it is still the one of this uid: its account is gone.
    Delete {
        /// The Secret's uid.
        uid: String,
    },
    /// Write it back as given; when `mint` is set, with a token of these claims under `token`.
    Update {
        /// The Secret with the CA, namespace and annotations filled in.
        secret: Box<Secret>,
        /// The claims of the token to sign, when it lacks one.
        mint: Option<Claims>,
    },
}

/// What to do with `secret` given its `account` as it exists (`None`: no account of its name,
/// or another one than its uid annotation names) and the cluster CA.
pub fn plan(secret: &Secret, account: Option<&ServiceAccount>, ca_pem: &str) -> Plan {
    let Some((ns, _)) = account_of(secret) else {
        return Plan::Done;
    };
    if secret.metadata.deletion_timestamp.is_some() {
        return Plan::Done;
    }
    let Some(account) = account.filter(|a| belongs_to(secret, a)) else {
        return Plan::Delete {
            uid: secret.metadata.uid.clone().unwrap_or_default(),
        };
    };
    let uid = account.metadata.uid.clone().unwrap_or_default();
    let data = secret.data.clone().unwrap_or_default();
    let has = |key: &str, value: &[u8]| data.get(key).is_some_and(|v| v.0 == value);
    let needs_ca = !ca_pem.is_empty() && !has(CA_KEY, ca_pem.as_bytes());
    let needs_namespace = !has(NAMESPACE_KEY, ns.as_bytes());
    let needs_token = data.get(TOKEN_KEY).is_none_or(|t| t.0.is_empty());
    let needs_uid = annotation(secret, UID_ANNOTATION) != Some(uid.as_str());
    if !(needs_ca || needs_namespace || needs_token || needs_uid) {
        return Plan::Done;
    }
    let mut out = secret.clone();
    let data = out.data.get_or_insert_with(BTreeMap::new);
    if !ca_pem.is_empty() {
        data.insert(CA_KEY.into(), ByteString(ca_pem.as_bytes().to_vec()));
    }
    data.insert(NAMESPACE_KEY.into(), ByteString(ns.as_bytes().to_vec()));
    out.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(UID_ANNOTATION.into(), uid.clone());
    let name = account.metadata.name.as_deref().unwrap_or_default();
    let secret_name = secret.metadata.name.as_deref().unwrap_or_default();
    Plan::Update {
        secret: Box::new(out),
        mint: needs_token.then(|| Claims::new(ns, name, &uid, secret_name)),
    }
}

/// `secret` with `token` under `data.token`.
pub fn with_token(mut secret: Secret, token: &str) -> Secret {
    secret
        .data
        .get_or_insert_with(BTreeMap::new)
        .insert(TOKEN_KEY.into(), ByteString(token.as_bytes().to_vec()));
    secret
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn account(uid: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: ObjectMeta {
                name: Some("builder".into()),
                namespace: Some("team".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        }
    }

    fn secret(annotations: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("builder-token".into()),
                namespace: Some("team".into()),
                uid: Some("secret-uid".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some(TYPE.into()),
            ..Secret::default()
        }
    }

    fn value<'a>(s: &'a Secret, key: &str) -> &'a [u8] {
        &s.data.as_ref().unwrap()[key].0
    }

    #[test]
    fn a_new_token_secret_is_filled_and_then_left_alone() {
        let new = secret(&[(NAME_ANNOTATION, "builder")]);
        let Plan::Update {
            secret: filled,
            mint,
        } = plan(&new, Some(&account("sa-1")), "PEM")
        else {
            panic!("a new token Secret is filled");
        };
        assert_eq!(
            mint,
            Some(Claims::new("team", "builder", "sa-1", "builder-token"))
        );
        assert_eq!(value(&filled, CA_KEY), b"PEM");
        assert_eq!(value(&filled, NAMESPACE_KEY), b"team");
        assert_eq!(
            filled.metadata.annotations.as_ref().unwrap()[UID_ANNOTATION],
            "sa-1"
        );
        let done = with_token(*filled, "jwt");
        assert_eq!(value(&done, TOKEN_KEY), b"jwt");
        assert_eq!(plan(&done, Some(&account("sa-1")), "PEM"), Plan::Done);

        // A new CA is written in, and the token kept.
        let Plan::Update { secret, mint } = plan(&done, Some(&account("sa-1")), "NEW") else {
            panic!("a changed CA is written");
        };
        assert_eq!(mint, None);
        assert_eq!(value(&secret, CA_KEY), b"NEW");
        assert_eq!(value(&secret, TOKEN_KEY), b"jwt");
        // An emptied token is minted again.
        let emptied = with_token(done, "");
        assert!(matches!(
            plan(&emptied, Some(&account("sa-1")), "PEM"),
            Plan::Update { mint: Some(_), .. }
        ));
    }

    #[test]
    fn a_token_secret_without_its_account_is_deleted() {
        let new = secret(&[(NAME_ANNOTATION, "builder")]);
        let delete = Plan::Delete {
            uid: "secret-uid".into(),
        };
        assert_eq!(plan(&new, None, "PEM"), delete);
        // Once it names a uid, another account of the same name is not its account.
        let owned = secret(&[(NAME_ANNOTATION, "builder"), (UID_ANNOTATION, "sa-1")]);
        assert!(belongs_to(&owned, &account("sa-1")));
        assert!(!belongs_to(&owned, &account("sa-2")));
        assert_eq!(plan(&owned, Some(&account("sa-2")), "PEM"), delete);
        // One already being deleted is left to finish.
        let mut going = owned.clone();
        going.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(plan(&going, None, "PEM"), Plan::Done);
    }

    #[test]
    fn other_secrets_are_none_of_its_business() {
        let mut opaque = secret(&[(NAME_ANNOTATION, "builder")]);
        opaque.type_ = Some("Opaque".into());
        assert_eq!(account_of(&opaque), None);
        assert_eq!(plan(&opaque, None, "PEM"), Plan::Done);
        let unnamed = secret(&[]);
        assert_eq!(plan(&unnamed, None, "PEM"), Plan::Done);
        assert_eq!(
            account_of(&secret(&[(NAME_ANNOTATION, "builder")])),
            Some(("team", "builder"))
        );
    }
}

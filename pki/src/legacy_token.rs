//! Legacy service-account tokens: the JWTs kube-controller-manager's `serviceaccount-token`
//! controller writes into Secrets of type `kubernetes.io/service-account-token`, and which the API
//! server accepts as long as that Secret holds them. Issuer `kubernetes/serviceaccount`, the
//! service account and the Secret in flat `kubernetes.io/serviceaccount/...` claims, no audience
//! and no expiry.
//!
//! Here because two parts of skiff handle them and must not depend on each other: the controller
//! signs them, the API server verifies them (with the same key as its bound tokens).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::{Error, Result};

/// The `iss` of every legacy token.
pub const ISSUER: &str = "kubernetes/serviceaccount";

/// The claims of a legacy token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Claims {
    /// Always [`ISSUER`].
    pub iss: String,
    /// `system:serviceaccount:NS:NAME`.
    pub sub: String,
    /// The namespace of the account and the Secret.
    #[serde(rename = "kubernetes.io/serviceaccount/namespace", default)]
    pub namespace: String,
    /// The Secret that holds the token.
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name", default)]
    pub secret_name: String,
    /// The service account.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name", default)]
    pub service_account_name: String,
    /// Its uid.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid", default)]
    pub service_account_uid: String,
}

impl Claims {
    /// The claims of the token kept in Secret `secret` for the account `name` (uid `uid`) in
    /// `namespace`.
    pub fn new(namespace: &str, name: &str, uid: &str, secret: &str) -> Claims {
        Claims {
            iss: ISSUER.to_string(),
            sub: format!("system:serviceaccount:{namespace}:{name}"),
            namespace: namespace.to_string(),
            secret_name: secret.to_string(),
            service_account_name: name.to_string(),
            service_account_uid: uid.to_string(),
        }
    }

    /// What is missing or inconsistent, if anything: every claim must be there and the subject
    /// must name the account of the private claims.
    pub fn problem(&self) -> Option<&'static str> {
        if self.namespace.is_empty() {
            Some("namespace claim is missing")
        } else if self.secret_name.is_empty() {
            Some("secret name claim is missing")
        } else if self.service_account_name.is_empty() {
            Some("service account name claim is missing")
        } else if self.service_account_uid.is_empty() {
            Some("service account uid claim is missing")
        } else if self.sub
            != format!(
                "system:serviceaccount:{}:{}",
                self.namespace, self.service_account_name
            )
        {
            Some("sub claim is invalid")
        } else {
            None
        }
    }
}

/// The key id of a public key: base64url of the SHA-256 of its DER SubjectPublicKeyInfo, as
/// kube-apiserver derives it (token headers and the JWKS carry it).
pub fn key_id(subject_public_key_info: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(subject_public_key_info))
}

/// Signs `claims` as a compact JWS (`ES256`, with `kid`) with `key`.
pub fn sign(key: &EncodingKey, kid: &str, claims: &Claims) -> Result<String> {
    let mut header = Header::new(Algorithm::ES256);
    header.typ = None;
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, claims, key).map_err(|e| Error::Sign(e.to_string()))
}

/// The service-account signing key as the token controller holds it.
pub struct Signer {
    key: EncodingKey,
    kid: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// The ECDSA P-256 private key in `pem` (PKCS #8, as `<data-dir>/pki/service-account.key`).
    pub fn from_pem(pem: &str) -> Result<Signer> {
        let pair = rcgen::KeyPair::from_pem(pem).map_err(|_| Error::BadKey)?;
        if pair.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
            return Err(Error::BadKey);
        }
        Ok(Signer {
            key: EncodingKey::from_ec_der(&pair.serialize_der()),
            kid: key_id(&rcgen::PublicKeyData::subject_public_key_info(&pair)),
        })
    }

    /// The key id in the tokens' headers.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// A signed token of `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String> {
        sign(&self.key, &self.kid, claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(token: &str) -> serde_json::Value {
        let part = token.split('.').nth(1).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn tokens_carry_the_flat_legacy_claims_and_no_expiry() {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let signer = Signer::from_pem(&pair.serialize_pem()).unwrap();
        let claims = Claims::new("ns1", "builder", "sa-uid", "builder-token");
        assert_eq!(claims.problem(), None);
        let token = signer.sign(&claims).unwrap();
        assert_eq!(
            payload(&token),
            serde_json::json!({
                "iss": "kubernetes/serviceaccount",
                "sub": "system:serviceaccount:ns1:builder",
                "kubernetes.io/serviceaccount/namespace": "ns1",
                "kubernetes.io/serviceaccount/secret.name": "builder-token",
                "kubernetes.io/serviceaccount/service-account.name": "builder",
                "kubernetes.io/serviceaccount/service-account.uid": "sa-uid",
            })
        );
        let header: serde_json::Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["kid"], signer.kid());
    }

    #[test]
    fn incomplete_claims_and_foreign_keys_are_refused() {
        let mut c = Claims::new("ns1", "builder", "sa-uid", "s");
        c.sub = "system:serviceaccount:ns1:admin".into();
        assert_eq!(c.problem(), Some("sub claim is invalid"));
        let c = Claims::new("ns1", "builder", "", "s");
        assert_eq!(c.problem(), Some("service account uid claim is missing"));
        assert!(matches!(Signer::from_pem("nope"), Err(Error::BadKey)));
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        assert!(matches!(
            Signer::from_pem(&ed.serialize_pem()),
            Err(Error::BadKey)
        ));
    }
}

//! Service-account tokens as JWTs, pure: the claims kube-apiserver writes (Kubernetes'
//! `pkg/serviceaccount/claims.go`), signing them, and checking a presented token's signature,
//! issuer, audience and time window. Whether the objects it names still exist is the caller's
//! business ([`super::Tokens::authenticate`]).

use std::collections::BTreeMap;

use jsonwebtoken::{Algorithm, Header, Validation};
use serde::{Deserialize, Deserializer, Serialize};

use super::keys::SigningKey;

pub use skiff_pki::legacy_token::Claims as LegacyClaims;

/// How far clocks may disagree when checking `exp` and `nbf` (go-jose's `DefaultLeeway`).
pub const LEEWAY_SECONDS: u64 = 60;

/// The prefix of every service account's user name.
pub const USER_PREFIX: &str = "system:serviceaccount:";
/// The group of every service account.
pub const ALL_GROUP: &str = "system:serviceaccounts";

/// The user name of service account `name` in `namespace`.
pub fn user_name(namespace: &str, name: &str) -> String {
    format!("{USER_PREFIX}{namespace}:{name}")
}

/// The groups of a service account in `namespace`.
pub fn groups(namespace: &str) -> Vec<String> {
    vec![ALL_GROUP.to_string(), format!("{ALL_GROUP}:{namespace}")]
}

/// The user's extra keys kube-apiserver sets for a bound token.
pub mod extra {
    /// The pod a token is bound to.
    pub const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
    /// Its uid.
    pub const POD_UID: &str = "authentication.kubernetes.io/pod-uid";
    /// The node of the pod a token is bound to.
    pub const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
    /// Its uid.
    pub const NODE_UID: &str = "authentication.kubernetes.io/node-uid";
    /// `JTI=<the token's jti>`.
    pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";
}

/// A reference to an object in the private claims: name and uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ObjectRef {
    /// The object's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The object's uid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl ObjectRef {
    /// A reference to `name` with `uid`.
    pub fn new(name: impl Into<String>, uid: impl Into<String>) -> ObjectRef {
        ObjectRef {
            name: name.into(),
            uid: uid.into(),
        }
    }
}

/// The `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Private {
    /// The service account's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The service account.
    #[serde(default)]
    pub serviceaccount: ObjectRef,
    /// The pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    /// The node the bound pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
}

/// Every claim of a service-account token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The issuer (`--service-account-issuer`).
    pub iss: String,
    /// `system:serviceaccount:NS:NAME`.
    pub sub: String,
    /// Who the token is for.
    #[serde(deserialize_with = "one_or_many")]
    pub aud: Vec<String>,
    /// Expiry, seconds since the epoch.
    pub exp: i64,
    /// Issued at.
    pub iat: i64,
    /// Not before.
    pub nbf: i64,
    /// A unique id of this token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
    /// What the token belongs and is bound to.
    #[serde(rename = "kubernetes.io", default)]
    pub kubernetes: Private,
}

/// A JWT `aud` is a string or an array of strings (RFC 7519 4.1.3).
fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Aud::deserialize(d)? {
        Aud::One(one) => vec![one],
        Aud::Many(many) => many,
    })
}

/// What a new token is for: the claims before signing.
#[derive(Debug, Clone)]
pub struct Request {
    /// The service account's namespace.
    pub namespace: String,
    /// The service account.
    pub service_account: ObjectRef,
    /// The pod it is bound to.
    pub pod: Option<ObjectRef>,
    /// The secret it is bound to.
    pub secret: Option<ObjectRef>,
    /// The node of the bound pod.
    pub node: Option<ObjectRef>,
    /// The audiences.
    pub audiences: Vec<String>,
    /// Its lifetime.
    pub expiration_seconds: i64,
}

/// The claims of a token issued by `issuer` at `now` (seconds since the epoch) for `request`,
/// with a fresh `jti`.
pub fn claims(issuer: &str, request: &Request, now: i64) -> Claims {
    Claims {
        iss: issuer.to_string(),
        sub: user_name(&request.namespace, &request.service_account.name),
        aud: request.audiences.clone(),
        exp: now + request.expiration_seconds,
        iat: now,
        nbf: now,
        jti: uuid::Uuid::new_v4().to_string(),
        kubernetes: Private {
            namespace: request.namespace.clone(),
            serviceaccount: request.service_account.clone(),
            pod: request.pod.clone(),
            // A token is bound to a pod or a secret, not both (as kube-apiserver's `Claims`).
            secret: request.secret.clone().filter(|_| request.pod.is_none()),
            node: request.node.clone().filter(|_| request.pod.is_some()),
        },
    }
}

/// Signs `claims` into a compact JWS with `key` (header `alg: ES256`, `kid`).
pub fn sign(key: &SigningKey, claims: &Claims) -> Result<String, jsonwebtoken::errors::Error> {
    let mut header = Header::new(Algorithm::ES256);
    header.typ = None;
    header.kid = Some(key.kid().to_string());
    jsonwebtoken::encode(&header, claims, key.encoding())
}

/// Why a bearer token was not accepted as a service-account token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Not a JWT, or one from another issuer: some other authenticator's, if any.
    #[error("not a service-account token of this issuer")]
    NotOurs,
    /// One of ours that does not verify; the text says why (logged, never sent to the client).
    #[error("{0}")]
    Invalid(String),
}

/// The issuer a JWT claims, read without verifying anything (to route the token to the
/// authenticator of that issuer, as kube-apiserver does).
pub fn unverified_issuer(token: &str) -> Option<String> {
    use base64::Engine as _;
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    #[derive(Deserialize)]
    struct Iss {
        iss: Option<String>,
    }
    serde_json::from_slice::<Iss>(&bytes).ok()?.iss
}

/// Checks `token` against `key`: issued by `issuer`, for one of `audiences`, inside its time
/// window (with [`LEEWAY_SECONDS`]), with a `kubernetes.io` claim naming a service account.
pub fn verify(
    key: &SigningKey,
    token: &str,
    issuer: &str,
    audiences: &[String],
) -> Result<Claims, Rejection> {
    if unverified_issuer(token).as_deref() != Some(issuer) {
        return Err(Rejection::NotOurs);
    }
    let mut validation = Validation::new(Algorithm::ES256);
    validation.leeway = LEEWAY_SECONDS;
    validation.validate_nbf = true;
    validation.set_issuer(&[issuer]);
    validation.set_audience(audiences);
    validation.set_required_spec_claims(&["exp", "iss", "sub", "aud"]);
    let data = jsonwebtoken::decode::<Claims>(token, key.decoding(), &validation).map_err(|e| {
        use jsonwebtoken::errors::ErrorKind;
        Rejection::Invalid(match e.kind() {
            ErrorKind::ExpiredSignature => "service account token has expired".into(),
            ErrorKind::ImmatureSignature => "service account token is not valid yet".into(),
            ErrorKind::InvalidAudience => "token audiences are invalid".into(),
            ErrorKind::InvalidSignature => "invalid signature".into(),
            other => format!("invalid service account token: {other:?}"),
        })
    })?;
    let claims = data.claims;
    let private = &claims.kubernetes;
    if private.namespace.is_empty() || private.serviceaccount.name.is_empty() {
        return Err(Rejection::Invalid(
            "service account token has no kubernetes.io claim".into(),
        ));
    }
    if claims.sub != user_name(&private.namespace, &private.serviceaccount.name) {
        return Err(Rejection::Invalid(
            "service account token's subject does not match its kubernetes.io claim".into(),
        ));
    }
    Ok(claims)
}

/// Checks a legacy token (the kind kept in a `kubernetes.io/service-account-token` Secret)
/// against `key`: issued by [`skiff_pki::legacy_token::ISSUER`], signed by `key`, every claim
/// there. Such tokens have no audience and no expiry; whether their Secret still holds them is
/// the caller's business.
pub fn verify_legacy(key: &SigningKey, token: &str) -> Result<LegacyClaims, Rejection> {
    if unverified_issuer(token).as_deref() != Some(skiff_pki::legacy_token::ISSUER) {
        return Err(Rejection::NotOurs);
    }
    let mut validation = Validation::new(Algorithm::ES256);
    validation.validate_exp = false;
    validation.validate_aud = false;
    validation.set_issuer(&[skiff_pki::legacy_token::ISSUER]);
    validation.set_required_spec_claims(&["iss", "sub"]);
    let data =
        jsonwebtoken::decode::<LegacyClaims>(token, key.decoding(), &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            Rejection::Invalid(match e.kind() {
                ErrorKind::InvalidSignature => "invalid signature".into(),
                other => format!("invalid service account token: {other:?}"),
            })
        })?;
    match data.claims.problem() {
        Some(problem) => Err(Rejection::Invalid(problem.to_string())),
        None => Ok(data.claims),
    }
}

/// The audiences of a verified token that `wanted` accepts: all of the token's when `wanted`
/// is empty, else their intersection (TokenReview's `status.audiences`).
pub fn matching_audiences(claims: &Claims, wanted: &[String]) -> Vec<String> {
    if wanted.is_empty() {
        return claims.aud.clone();
    }
    wanted
        .iter()
        .filter(|a| claims.aud.contains(a))
        .cloned()
        .collect()
}

/// The user's extra of a verified token: the bound pod and its node, and the credential id.
pub fn user_extra(claims: &Claims) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let private = &claims.kubernetes;
    if let Some(pod) = &private.pod {
        out.insert(extra::POD_NAME.to_string(), vec![pod.name.clone()]);
        out.insert(extra::POD_UID.to_string(), vec![pod.uid.clone()]);
        if let Some(node) = &private.node {
            out.insert(extra::NODE_NAME.to_string(), vec![node.name.clone()]);
            out.insert(extra::NODE_UID.to_string(), vec![node.uid.clone()]);
        }
    }
    if !claims.jti.is_empty() {
        out.insert(
            extra::CREDENTIAL_ID.to_string(),
            vec![format!("JTI={}", claims.jti)],
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

    fn request() -> Request {
        Request {
            namespace: "ns1".into(),
            service_account: ObjectRef::new("builder", "sa-uid"),
            pod: Some(ObjectRef::new("p", "pod-uid")),
            secret: None,
            node: Some(ObjectRef::new("n1", "node-uid")),
            audiences: vec![ISSUER.into()],
            expiration_seconds: 3600,
        }
    }

    fn now() -> i64 {
        jsonwebtoken::get_current_timestamp() as i64
    }

    fn payload(token: &str) -> serde_json::Value {
        let part = token.split('.').nth(1).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn issued_tokens_carry_kube_apiservers_claims_and_verify() {
        let key = SigningKey::generate().unwrap();
        let t = now();
        let claims = claims(ISSUER, &request(), t);
        let token = sign(&key, &claims).unwrap();
        let header: serde_json::Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["kid"], key.kid());
        let body = payload(&token);
        assert_eq!(body["iss"], ISSUER);
        assert_eq!(body["sub"], "system:serviceaccount:ns1:builder");
        assert_eq!(body["aud"], serde_json::json!([ISSUER]));
        assert_eq!(body["exp"], t + 3600);
        assert_eq!(body["iat"], t);
        assert_eq!(body["nbf"], t);
        assert_eq!(body["jti"].as_str().unwrap().len(), 36);
        assert_eq!(
            body["kubernetes.io"],
            serde_json::json!({
                "namespace": "ns1",
                "serviceaccount": {"name": "builder", "uid": "sa-uid"},
                "pod": {"name": "p", "uid": "pod-uid"},
                "node": {"name": "n1", "uid": "node-uid"},
            })
        );
        let verified = verify(&key, &token, ISSUER, &[ISSUER.to_string()]).unwrap();
        assert_eq!(verified, claims);
        let extra = user_extra(&verified);
        assert_eq!(extra[extra::POD_NAME], vec!["p"]);
        assert_eq!(extra[extra::NODE_UID], vec!["node-uid"]);
        assert_eq!(
            extra[extra::CREDENTIAL_ID],
            vec![format!("JTI={}", claims.jti)]
        );
        // Two tokens never share a jti.
        assert_ne!(super::claims(ISSUER, &request(), t).jti, claims.jti);
    }

    #[test]
    fn a_secret_binding_gives_way_to_a_pod_and_a_node_needs_a_pod() {
        let mut r = request();
        r.secret = Some(ObjectRef::new("s", "s-uid"));
        let c = claims(ISSUER, &r, 0);
        assert!(c.kubernetes.secret.is_none() && c.kubernetes.pod.is_some());
        r.pod = None;
        let c = claims(ISSUER, &r, 0);
        assert_eq!(c.kubernetes.secret, Some(ObjectRef::new("s", "s-uid")));
        assert!(c.kubernetes.node.is_none());
        assert!(user_extra(&c).get(extra::POD_NAME).is_none());
    }

    #[test]
    fn bad_tokens_are_refused_for_what_is_wrong() {
        let key = SigningKey::generate().unwrap();
        let other = SigningKey::generate().unwrap();
        let auds = [ISSUER.to_string()];
        let t = now();
        let good = claims(ISSUER, &request(), t);

        // Signed by another key.
        let forged = sign(&other, &good).unwrap();
        assert_eq!(
            verify(&key, &forged, ISSUER, &auds),
            Err(Rejection::Invalid("invalid signature".into()))
        );
        // Expired beyond the leeway; expired within it still passes.
        let mut old = good.clone();
        old.iat = t - 7200;
        old.nbf = t - 7200;
        old.exp = t - 120;
        assert_eq!(
            verify(&key, &sign(&key, &old).unwrap(), ISSUER, &auds),
            Err(Rejection::Invalid(
                "service account token has expired".into()
            ))
        );
        old.exp = t - 10;
        assert!(verify(&key, &sign(&key, &old).unwrap(), ISSUER, &auds).is_ok());
        // Not yet valid.
        let mut early = good.clone();
        early.nbf = t + 600;
        assert_eq!(
            verify(&key, &sign(&key, &early).unwrap(), ISSUER, &auds),
            Err(Rejection::Invalid(
                "service account token is not valid yet".into()
            ))
        );
        // For someone else.
        let mut elsewhere = good.clone();
        elsewhere.aud = vec!["vault".into()];
        assert_eq!(
            verify(&key, &sign(&key, &elsewhere).unwrap(), ISSUER, &auds),
            Err(Rejection::Invalid("token audiences are invalid".into()))
        );
        // Another issuer's tokens, and things that are no JWT at all, are not ours.
        let mut foreign = good.clone();
        foreign.iss = "https://elsewhere".into();
        assert_eq!(
            verify(&key, &sign(&key, &foreign).unwrap(), ISSUER, &auds),
            Err(Rejection::NotOurs)
        );
        for junk in ["", "abc", "a.b.c", "a.b.c.d", "...."] {
            assert_eq!(verify(&key, junk, ISSUER, &auds), Err(Rejection::NotOurs));
        }
        // A payload edited after signing.
        let token = sign(&key, &good).unwrap();
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let mut body = payload(&token);
        body["kubernetes.io"]["serviceaccount"]["name"] = "admin".into();
        body["sub"] = "system:serviceaccount:ns1:admin".into();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&body).unwrap());
        assert_eq!(
            verify(&key, &parts.join("."), ISSUER, &auds),
            Err(Rejection::Invalid("invalid signature".into()))
        );
        // A subject that disagrees with the private claim.
        let mut mismatched = good.clone();
        mismatched.sub = "system:serviceaccount:ns1:admin".into();
        assert!(matches!(
            verify(&key, &sign(&key, &mismatched).unwrap(), ISSUER, &auds),
            Err(Rejection::Invalid(_))
        ));
    }

    #[test]
    fn audiences_may_be_one_string_and_reviews_intersect_them() {
        let json = serde_json::json!({"iss": "i", "sub": "s", "aud": "one", "exp": 1, "iat": 0,
            "nbf": 0});
        let c: Claims = serde_json::from_value(json).unwrap();
        assert_eq!(c.aud, vec!["one"]);
        let mut c = c;
        c.aud = vec!["a".into(), "b".into()];
        assert_eq!(matching_audiences(&c, &[]), vec!["a", "b"]);
        assert_eq!(matching_audiences(&c, &["b".into(), "z".into()]), vec!["b"]);
        assert!(matching_audiences(&c, &["z".into()]).is_empty());
    }

    #[test]
    fn legacy_tokens_verify_by_their_own_issuer_only() {
        let key = SigningKey::generate().unwrap();
        let claims = LegacyClaims::new("ns1", "builder", "sa-uid", "builder-token");
        let token = skiff_pki::legacy_token::sign(key.encoding(), key.kid(), &claims).unwrap();
        assert_eq!(verify_legacy(&key, &token), Ok(claims.clone()));
        // Each verifier leaves the other's tokens alone.
        let auds = [ISSUER.to_string()];
        assert_eq!(verify(&key, &token, ISSUER, &auds), Err(Rejection::NotOurs));
        let bound = sign(&key, &super::claims(ISSUER, &request(), now())).unwrap();
        assert_eq!(verify_legacy(&key, &bound), Err(Rejection::NotOurs));
        // Another key's signature, and claims that do not hang together.
        let other = SigningKey::generate().unwrap();
        let forged = skiff_pki::legacy_token::sign(other.encoding(), other.kid(), &claims).unwrap();
        assert_eq!(
            verify_legacy(&key, &forged),
            Err(Rejection::Invalid("invalid signature".into()))
        );
        let mut odd = claims.clone();
        odd.sub = "system:serviceaccount:ns1:admin".into();
        let odd = skiff_pki::legacy_token::sign(key.encoding(), key.kid(), &odd).unwrap();
        assert_eq!(
            verify_legacy(&key, &odd),
            Err(Rejection::Invalid("sub claim is invalid".into()))
        );
    }
}

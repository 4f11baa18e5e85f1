//! Service-account tokens as kube-apiserver issues and checks them.
//!
//! - Issuing: `POST .../serviceaccounts/{name}/token` (TokenRequest, `authentication.k8s.io/v1`;
//!   `kubectl create token`, the kubelet's projected tokens): audiences (default the API
//!   server's), `expirationSeconds` (default 1 h, at least 10 min, capped by the configured
//!   maximum), `boundObjectRef` to a Pod (its node goes in too) or a Secret.
//! - Authenticating: a bearer token that is a JWT of our issuer is verified ([`token::verify`]:
//!   signature, time window, audience), then the service account it names, and the pod or secret
//!   it is bound to, must still exist with the uid in the token (kube-apiserver's lookup). The
//!   user is `system:serviceaccount:NS:NAME` in `system:serviceaccounts` and
//!   `system:serviceaccounts:NS`, with the bound pod in its extra.
//! - Legacy tokens (issuer `kubernetes/serviceaccount`, no expiry) that the `serviceaccount-token`
//!   controller writes into Secrets of type `kubernetes.io/service-account-token`: verified with
//!   the same key, then the Secret must still hold that very token and the service account still
//!   have the uid in it. They count as being for the API server's audiences.
//! - TokenReview: the same question asked through the API.
//! - OIDC discovery: `/.well-known/openid-configuration` and `/openid/v1/jwks`, for consumers that
//!   verify the tokens themselves.
//!
//! [`keys`] holds the signing key; [`token`] the pure JWT work.
//!
//! Not done as kube-apiserver does: the one-year extension of kubelet tokens of 3607 s
//! (`--service-account-extend-token-expiration`) — tokens live as long as they say.

pub mod keys;
pub mod token;

use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};
use skiff_meta::status::{FieldError, FieldPath};

use crate::auth::User;
use crate::error::{Cause, Error, Result};
use crate::registry::Registry;
use crate::request::{Request, Response, parse_body};

pub use keys::SigningKey;

/// The issuer unless configured (`--service-account-issuer`), as kubeadm and k3s set it.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// A TokenRequest's lifetime unless it asks for one.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime a TokenRequest may ask for (10 minutes).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest lifetime a TokenRequest may ask for (2^32 s).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// The path of the OIDC discovery document.
pub const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";
/// The path of the JWKS.
pub const JWKS_PATH: &str = "/openid/v1/jwks";

/// Settings of service-account tokens.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `iss` of issued tokens, and the only issuer accepted.
    pub issuer: String,
    /// The API server's audiences: tokens must be for one of them to authenticate; a
    /// TokenRequest without audiences gets these. Empty means the issuer alone.
    pub api_audiences: Vec<String>,
    /// The longest lifetime handed out; longer requests are shortened to it.
    pub max_expiration_seconds: Option<i64>,
    /// The signing key; `None` generates one held in memory only.
    pub key: Option<Arc<SigningKey>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            issuer: DEFAULT_ISSUER.to_string(),
            api_audiences: Vec::new(),
            max_expiration_seconds: None,
            key: None,
        }
    }
}

/// Issues and checks service-account tokens.
#[derive(Debug)]
pub struct Tokens {
    key: Arc<SigningKey>,
    issuer: String,
    audiences: Vec<String>,
    max_expiration_seconds: Option<i64>,
}

/// What a service-account token authenticated as.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// The user (without `system:authenticated`, which the caller adds).
    pub user: User,
    /// The token's audiences that the asker accepts.
    pub audiences: Vec<String>,
}

fn now() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Tokens {
    /// The token service of `settings`.
    pub fn new(settings: &Settings) -> Result<Tokens, keys::Error> {
        let key = match &settings.key {
            Some(key) => key.clone(),
            None => Arc::new(SigningKey::generate()?),
        };
        let audiences = if settings.api_audiences.is_empty() {
            vec![settings.issuer.clone()]
        } else {
            settings.api_audiences.clone()
        };
        Ok(Tokens {
            key,
            issuer: settings.issuer.clone(),
            audiences,
            max_expiration_seconds: settings.max_expiration_seconds,
        })
    }

    /// The issuer.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The API server's audiences.
    pub fn audiences(&self) -> &[String] {
        &self.audiences
    }

    /// Signs a token for `request`; returns it and its expiry (seconds since the epoch).
    pub fn issue(&self, request: &token::Request) -> Result<(String, i64)> {
        let claims = token::claims(&self.issuer, request, now());
        let jwt = token::sign(&self.key, &claims)
            .map_err(|e| Error::Internal(format!("failed to generate token: {e}")))?;
        Ok((jwt, claims.exp))
    }

    /// Authenticates `token` for `audiences` (the API server's when empty): `Ok(None)` when it is
    /// no token of this issuer; an error (the reason, for logs and TokenReview) when it is one
    /// that does not hold.
    pub async fn authenticate(
        &self,
        registry: &Registry,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<Authenticated>, String> {
        let wanted = if audiences.is_empty() {
            &self.audiences[..]
        } else {
            audiences
        };
        let claims = match token::verify(&self.key, token, &self.issuer, wanted) {
            Ok(claims) => claims,
            Err(token::Rejection::NotOurs) => {
                return self.authenticate_legacy(registry, token, wanted).await;
            }
            Err(token::Rejection::Invalid(reason)) => return Err(reason),
        };
        let private = &claims.kubernetes;
        let ns = private.namespace.as_str();
        let sa = &private.serviceaccount;
        use skiff_kinds::builtin::{pod, secret, service_account};
        let current = lookup(registry, &service_account::INFO, ns, &sa.name).await?;
        check_current(&current, &sa.uid).map_err(|stale| match stale {
            Stale::Deleted => format!("service account {ns}/{} has been deleted", sa.name),
            Stale::Uid(uid) => {
                format!(
                    "service account UID ({uid}) does not match claim ({})",
                    sa.uid
                )
            }
        })?;
        let invalidated = || "service account token has been invalidated".to_string();
        for (info, bound, what) in [
            (&secret::INFO, &private.secret, "secret"),
            (&pod::INFO, &private.pod, "pod"),
        ] {
            let Some(bound) = bound else { continue };
            let current = lookup(registry, info, ns, &bound.name)
                .await
                .map_err(|_| invalidated())?;
            check_current(&current, &bound.uid).map_err(|stale| match stale {
                Stale::Deleted => invalidated(),
                Stale::Uid(uid) => format!(
                    "{what} UID ({uid}) does not match service account {what} ref claim ({})",
                    bound.uid
                ),
            })?;
        }
        let user = User {
            name: token::user_name(ns, &sa.name),
            uid: sa.uid.clone(),
            groups: token::groups(ns),
            extra: token::user_extra(&claims),
        };
        Ok(Some(Authenticated {
            audiences: token::matching_audiences(&claims, wanted),
            user,
        }))
    }

    /// [`Tokens::authenticate`] for a legacy token: signed by our key, and its Secret must still
    /// hold exactly this token and its service account still be the one it names (kube-apiserver's
    /// legacy validator). It counts as being for the API server's audiences.
    async fn authenticate_legacy(
        &self,
        registry: &Registry,
        token: &str,
        wanted: &[String],
    ) -> Result<Option<Authenticated>, String> {
        let claims = match token::verify_legacy(&self.key, token) {
            Ok(claims) => claims,
            Err(token::Rejection::NotOurs) => return Ok(None),
            Err(token::Rejection::Invalid(reason)) => return Err(reason),
        };
        let audiences: Vec<String> = wanted
            .iter()
            .filter(|a| self.audiences.contains(a))
            .cloned()
            .collect();
        if audiences.is_empty() {
            return Err("token audiences are invalid".into());
        }
        use skiff_kinds::builtin::{secret, service_account};
        let ns = claims.namespace.as_str();
        let secret = lookup(registry, &secret::INFO, ns, &claims.secret_name)
            .await
            .ok();
        let account = lookup(
            registry,
            &service_account::INFO,
            ns,
            &claims.service_account_name,
        )
        .await;
        check_legacy(&claims, token, secret.as_ref(), account.as_ref())?;
        let user = User {
            name: token::user_name(ns, &claims.service_account_name),
            uid: claims.service_account_uid.clone(),
            groups: token::groups(ns),
            extra: Default::default(),
        };
        Ok(Some(Authenticated { user, audiences }))
    }

    /// The OIDC discovery document: the issuer, where its keys are, what it signs with.
    pub fn discovery_document(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}{JWKS_PATH}", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// The public keys tokens are verified with (RFC 7517 JWK Set).
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.key.jwk()]})
    }
}

/// The object `name` of `info` in `ns`, or the reason it cannot be had.
async fn lookup(
    registry: &Registry,
    info: &skiff_meta::ResourceInfo,
    ns: &str,
    name: &str,
) -> Result<Value, String> {
    registry
        .get(info, Some(ns), name, None)
        .await
        .map_err(|e| e.to_string())
}

/// Why an object is not the one a token names.
enum Stale {
    /// Deleted more than the leeway ago (still there for its finalizers).
    Deleted,
    /// Another object of the same name: its uid.
    Uid(String),
}

/// Whether `object` is the one a token names: the uid in the token, and not being deleted for
/// longer than the leeway.
fn check_current(object: &Value, claimed_uid: &str) -> Result<(), Stale> {
    if let Some(at) = object
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        && at.as_second() < now() - token::LEEWAY_SECONDS as i64
    {
        return Err(Stale::Deleted);
    }
    let uid = text(object, "/metadata/uid");
    if uid != claimed_uid {
        return Err(Stale::Uid(uid.to_string()));
    }
    Ok(())
}

/// Whether the objects a verified legacy token names still vouch for it: its Secret (`None` when
/// it is gone) not being deleted and holding exactly `token` under `data.token`, then its service
/// account not being deleted and having the uid of the claims. The error is the reason.
fn check_legacy(
    claims: &token::LegacyClaims,
    token: &str,
    secret: Option<&Value>,
    account: Result<&Value, &String>,
) -> Result<(), String> {
    use base64::Engine as _;
    let invalidated = || "token has been invalidated".to_string();
    let secret = secret.ok_or_else(invalidated)?;
    if !secret["metadata"]["deletionTimestamp"].is_null() {
        return Err(invalidated());
    }
    let held = base64::engine::general_purpose::STANDARD
        .decode(text(secret, "/data/token"))
        .unwrap_or_default();
    // Both are public-length tokens; still compare without an early exit.
    let same = held.len() == token.len()
        && held
            .iter()
            .zip(token.as_bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return Err("token does not match server's copy".into());
    }
    let account = account.map_err(Clone::clone)?;
    let (ns, name) = (&claims.namespace, &claims.service_account_name);
    if !account["metadata"]["deletionTimestamp"].is_null() {
        return Err(format!("service account {ns}/{name} has been deleted"));
    }
    let uid = text(account, "/metadata/uid");
    if uid != claims.service_account_uid {
        return Err(format!(
            "service account UID ({uid}) does not match claim ({})",
            claims.service_account_uid
        ));
    }
    Ok(())
}

/// 422 for a TokenRequest, as kube-apiserver words it: `TokenRequest.authentication.k8s.io
/// "NAME" is invalid: FIELD: ...`.
fn invalid_request(name: &str, error: FieldError) -> Error {
    Error::Invalid {
        group: "authentication.k8s.io".into(),
        kind: "TokenRequest".into(),
        name: name.to_string(),
        causes: vec![Cause {
            field: error.field.clone(),
            reason: error.reason().to_string(),
            message: error.body(),
        }],
    }
}

/// `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: a TokenRequest answered with a
/// token, never stored.
pub async fn token_request(
    server: &crate::server::ApiServer,
    request: &Request,
    ns: Option<&str>,
    name: &str,
) -> Result<Response> {
    use skiff_kinds::builtin::{node, pod, secret, service_account};
    let ns = ns.unwrap_or("default");
    let mut body = parse_body(request)?;
    if body["kind"].as_str().is_some_and(|k| k != "TokenRequest") {
        return Err(Error::BadRequest(format!(
            "expected a TokenRequest, got {}",
            body["kind"].as_str().unwrap_or_default()
        )));
    }
    let spec = body["spec"].clone();
    let expiration = match spec.get("expirationSeconds").filter(|v| !v.is_null()) {
        None => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            Error::BadRequest(format!(
                "spec.expirationSeconds must be an integer, got {v}"
            ))
        })?,
    };
    let path = FieldPath::new("spec").child("expirationSeconds");
    if expiration < MIN_EXPIRATION_SECONDS {
        return Err(invalid_request(
            name,
            FieldError::invalid(
                path,
                expiration,
                "may not specify a duration less than 10 minutes",
            ),
        ));
    }
    if expiration > MAX_EXPIRATION_SECONDS {
        return Err(invalid_request(
            name,
            FieldError::invalid(
                path,
                expiration,
                "may not specify a duration larger than 2^32 seconds",
            ),
        ));
    }
    let tokens = &server.service_accounts;
    let expiration = tokens
        .max_expiration_seconds
        .map_or(expiration, |max| expiration.min(max));
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    let audiences = if audiences.is_empty() {
        tokens.audiences.clone()
    } else {
        audiences
    };

    let account = server
        .registry
        .get(&service_account::INFO, Some(ns), name, None)
        .await?;
    let mut bound_pod = None;
    let mut bound_secret = None;
    let mut bound_node = None;
    let mut bound_pod_object = None;
    if let Some(reference) = spec.get("boundObjectRef").filter(|v| v.is_object()) {
        let api_version = text(reference, "/apiVersion");
        let kind = text(reference, "/kind");
        let ref_name = text(reference, "/name");
        let ref_uid = text(reference, "/uid");
        let object = match (api_version, kind) {
            ("v1", "Pod") => {
                let object = server
                    .registry
                    .get(&pod::INFO, Some(ns), ref_name, None)
                    .await?;
                let runs_as = text(&object, "/spec/serviceAccountName");
                if runs_as != name {
                    return Err(Error::BadRequest(format!(
                        "cannot bind token for serviceaccount {name:?} to pod running with serviceaccount {runs_as:?}"
                    )));
                }
                let node_name = text(&object, "/spec/nodeName");
                if !node_name.is_empty()
                    && let Ok(n) = server
                        .registry
                        .get(&node::INFO, None, node_name, None)
                        .await
                {
                    bound_node = Some(token::ObjectRef::new(node_name, text(&n, "/metadata/uid")));
                }
                object
            }
            ("v1", "Secret") => {
                server
                    .registry
                    .get(&secret::INFO, Some(ns), ref_name, None)
                    .await?
            }
            _ => {
                let gvk = match api_version.split_once('/') {
                    Some((group, version)) => format!("{group}/{version}, Kind={kind}"),
                    None => format!("/{api_version}, Kind={kind}"),
                };
                return Err(Error::BadRequest(format!(
                    "cannot bind token to object of type {gvk}"
                )));
            }
        };
        let uid = text(&object, "/metadata/uid");
        if !ref_uid.is_empty() && ref_uid != uid {
            return Err(Error::Conflict {
                group: String::new(),
                resource: kind.to_string(),
                name: ref_name.to_string(),
                message: format!(
                    "the UID in the bound object reference ({ref_uid}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
                ),
            });
        }
        let reference = token::ObjectRef::new(ref_name, uid);
        if kind == "Pod" {
            bound_pod = Some(reference);
            bound_pod_object = Some(object.clone());
        } else {
            bound_secret = Some(reference);
        }
    }
    crate::admission::node::check_token_request(&request.user, name, bound_pod_object.as_ref())?;
    let (jwt, exp) = tokens.issue(&token::Request {
        namespace: ns.to_string(),
        service_account: token::ObjectRef::new(name, text(&account, "/metadata/uid")),
        pod: bound_pod,
        secret: bound_secret,
        node: bound_node,
        audiences: audiences.clone(),
        expiration_seconds: expiration,
    })?;
    let expires = jiff::Timestamp::from_second(exp)
        .map_err(|e| Error::Internal(format!("token expiry out of range: {e}")))?;
    let metadata = body["metadata"].as_object().cloned().unwrap_or_default();
    body["metadata"] = Value::Object(metadata);
    body["metadata"]["name"] = json!(name);
    body["metadata"]["namespace"] = json!(ns);
    body["metadata"]["creationTimestamp"] = Value::Null;
    body["apiVersion"] = json!("authentication.k8s.io/v1");
    body["kind"] = json!("TokenRequest");
    body["spec"]["audiences"] = json!(audiences);
    body["spec"]["expirationSeconds"] = json!(expiration);
    body["status"] = json!({
        "token": jwt,
        "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok(json_response(StatusCode::CREATED, &body))
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(serde_json::to_vec(body).unwrap_or_default().into());
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to a TokenReview: `status.authenticated`, `user` and `audiences`, or `error`.
/// Static tokens from the token file are reviewed too (they have no audiences).
pub async fn token_review(server: &crate::server::ApiServer, mut review: Value) -> Result<Value> {
    let token = text(&review, "/spec/token").to_string();
    let audiences: Vec<String> = review
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if token.is_empty() {
        return Err(Error::Api(skiff_meta::status::ApiError::bad_request(
            "token must not be empty",
        )));
    }
    let status = match server
        .service_accounts
        .authenticate(&server.registry, &token, &audiences)
        .await
    {
        Ok(Some(found)) => {
            let mut user = found.user;
            user.groups
                .push(crate::auth::AUTHENTICATED_GROUP.to_string());
            json!({"authenticated": true, "user": user_info(&user), "audiences": found.audiences})
        }
        Ok(None) => match server.static_tokens.get().map(|a| a.lookup(&token)) {
            // Token-file users hold no audiences: they are the API server's own.
            Some(Ok(mut user)) if audiences.is_empty() => {
                if !user.in_group(crate::auth::AUTHENTICATED_GROUP) {
                    user.groups
                        .push(crate::auth::AUTHENTICATED_GROUP.to_string());
                }
                json!({"authenticated": true, "user": user_info(&user),
                       "audiences": server.service_accounts.audiences()})
            }
            _ => json!({"user": {}, "error": "[invalid bearer token]"}),
        },
        Err(reason) => json!({"user": {}, "error": format!("[invalid bearer token, {reason}]")}),
    };
    review["status"] = status;
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    review["kind"] = json!("TokenReview");
    Ok(review)
}

/// `userInfo` of a review: username, uid, groups, extra.
pub fn user_info(user: &User) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

/// The OIDC discovery routes: `/.well-known/openid-configuration` and `/openid/v1/jwks` (a
/// trailing slash allowed), JSON with an hour of public caching, as kube-apiserver serves them.
pub fn routes(server: Arc<crate::server::ApiServer>) -> warp::filters::BoxedFilter<(Response,)> {
    use warp::Filter;
    warp::get()
        .or(warp::head())
        .unify()
        .and(warp::path::full())
        .and_then(move |path: warp::path::FullPath| {
            let tokens = &server.service_accounts;
            let answer = match path.as_str().trim_end_matches('/') {
                DISCOVERY_PATH => Ok(cached(&tokens.discovery_document(), "application/json")),
                JWKS_PATH => Ok(cached(&tokens.jwks(), "application/jwk-set+json")),
                _ => Err(warp::reject::not_found()),
            };
            std::future::ready(answer)
        })
        .boxed()
}

fn cached(body: &Value, content_type: &'static str) -> Response {
    let mut response = json_response(StatusCode::OK, body);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("public, max-age=3600"),
    );
    response
}

#[cfg(test)]
mod tests;

//! Service-account tokens through the authenticated routes: TokenRequest, authentication with the
//! token, its failure modes, TokenReview and the OIDC documents.

use std::sync::Arc;

use serde_json::{Value, json};
use skiff_store::Store;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::auth::Authenticator;
use crate::server::{ApiServer, Config};
use crate::tls::testing::{TempDir, call, json as body_json};

struct Cluster {
    api: Arc<ApiServer>,
    store: Arc<dyn Store>,
    routes: warp::filters::BoxedFilter<(Response,)>,
    admin: String,
    _dir: TempDir,
}

impl Cluster {
    async fn new(settings: Settings) -> Cluster {
        let dir = TempDir::new("satoken");
        let store =
            skiff_store::SledStore::open(skiff_store::Config::new(dir.0.join("db"))).unwrap();
        let store: Arc<dyn Store> = Arc::new(store);
        let config = Config {
            service_accounts: settings,
            ..Config::default()
        };
        let api = ApiServer::new(store.clone(), config, CancellationToken::new())
            .await
            .unwrap();
        let authenticator =
            Arc::new(Authenticator::load_or_create(&dir.0.join("tokens.csv")).unwrap());
        let admin = authenticator.admin_token().unwrap();
        let routes = crate::routes(api.clone(), authenticator);
        Cluster {
            api,
            store,
            routes,
            admin,
            _dir: dir,
        }
    }

    async fn send(
        &self,
        method: &str,
        uri: &str,
        token: &str,
        body: Option<Value>,
    ) -> http::Response<bytes::Bytes> {
        let request = http::Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body.map(|b| b.to_string()).unwrap_or_default())
            .unwrap();
        call(self.routes.clone(), request).await
    }

    async fn admin(&self, method: &str, uri: &str, body: Option<Value>) -> Value {
        let response = self.send(method, uri, &self.admin.clone(), body).await;
        assert!(
            response.status().is_success(),
            "{method} {uri}: {} {}",
            response.status(),
            String::from_utf8_lossy(response.body())
        );
        body_json(&response)
    }

    async fn create_account(&self, name: &str) -> Value {
        self.admin(
            "POST",
            "/api/v1/namespaces/default/serviceaccounts",
            Some(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})),
        )
        .await
    }

    /// `kubectl create token NAME` with `spec`.
    async fn request_token(&self, name: &str, spec: Value) -> http::Response<bytes::Bytes> {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": spec});
        self.send(
            "POST",
            &format!("/api/v1/namespaces/default/serviceaccounts/{name}/token"),
            &self.admin.clone(),
            Some(body),
        )
        .await
    }

    async fn token(&self, name: &str, spec: Value) -> String {
        let response = self.request_token(name, spec).await;
        assert_eq!(
            response.status(),
            201,
            "{}",
            String::from_utf8_lossy(response.body())
        );
        body_json(&response)["status"]["token"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// `kubectl auth whoami` with `token`: the status code and the user info.
    async fn whoami(&self, token: &str) -> (u16, Value) {
        let response = self
            .send(
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                token,
                Some(json!({"apiVersion": "authentication.k8s.io/v1",
                    "kind": "SelfSubjectReview"})),
            )
            .await;
        let status = response.status().as_u16();
        let body = body_json(&response);
        (status, body["status"]["userInfo"].clone())
    }

    async fn review(&self, token: &str, audiences: &[&str]) -> Value {
        let body = self
            .admin(
                "POST",
                "/apis/authentication.k8s.io/v1/tokenreviews",
                Some(
                    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": token, "audiences": audiences}}),
                ),
            )
            .await;
        body["status"].clone()
    }

    async fn shutdown(self) {
        self.api.shutdown.cancel();
        self.store.close().await.unwrap();
    }
}

fn payload(token: &str) -> Value {
    use base64::Engine as _;
    let part = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_requested_token_authenticates_as_its_service_account() {
    let c = Cluster::new(Settings::default()).await;
    let account = c.create_account("builder").await;
    let uid = account["metadata"]["uid"].as_str().unwrap();

    let response = c.request_token("builder", json!({})).await;
    assert_eq!(response.status(), 201);
    let answer = body_json(&response);
    assert_eq!(answer["kind"], "TokenRequest");
    assert_eq!(answer["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(answer["metadata"]["name"], "builder");
    assert_eq!(answer["spec"]["expirationSeconds"], 3600);
    assert_eq!(answer["spec"]["audiences"], json!([DEFAULT_ISSUER]));
    let token = answer["status"]["token"].as_str().unwrap();
    let claims = payload(token);
    assert_eq!(claims["sub"], "system:serviceaccount:default:builder");
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["uid"], uid);
    let expires: jiff::Timestamp = answer["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(expires.as_second(), claims["exp"].as_i64().unwrap());

    let (code, user) = c.whoami(token).await;
    assert_eq!(code, 201, "{user}");
    assert_eq!(user["username"], "system:serviceaccount:default:builder");
    assert_eq!(user["uid"], uid);
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/credential-id"],
        json!([format!("JTI={}", claims["jti"].as_str().unwrap())])
    );

    // RBAC applies to it like to anyone: nothing granted yet, so listing ConfigMaps is 403
    // with kube-apiserver's wording.
    let denied = c
        .send("GET", "/api/v1/namespaces/default/configmaps", token, None)
        .await;
    assert_eq!(denied.status(), 403);
    assert_eq!(
        body_json(&denied)["message"],
        "configmaps is forbidden: User \"system:serviceaccount:default:builder\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    c.shutdown().await;
}

#[tokio::test]
async fn lifetimes_are_checked_defaulted_and_capped() {
    let c = Cluster::new(Settings {
        max_expiration_seconds: Some(7200),
        ..Settings::default()
    })
    .await;
    c.create_account("builder").await;
    let short = c
        .request_token("builder", json!({"expirationSeconds": 60}))
        .await;
    assert_eq!(short.status(), 422);
    assert_eq!(
        body_json(&short)["message"],
        "TokenRequest.authentication.k8s.io \"builder\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );
    let huge = c
        .request_token("builder", json!({"expirationSeconds": (1i64 << 32) + 1}))
        .await;
    assert_eq!(huge.status(), 422);
    let ten_minutes = c.token("builder", json!({"expirationSeconds": 600})).await;
    let claims = payload(&ten_minutes);
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        600
    );
    let capped = c
        .request_token("builder", json!({"expirationSeconds": 86400}))
        .await;
    assert_eq!(body_json(&capped)["spec"]["expirationSeconds"], 7200);
    // Audiences asked for are the token's; a token not for the API server does not log in.
    let vault = c.token("builder", json!({"audiences": ["vault"]})).await;
    assert_eq!(payload(&vault)["aud"], json!(["vault"]));
    assert_eq!(c.whoami(&vault).await.0, 401);
    let missing = c.request_token("nobody", json!({})).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(
        body_json(&missing)["message"],
        "serviceaccounts \"nobody\" not found"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn deleting_the_service_account_revokes_its_tokens() {
    let c = Cluster::new(Settings::default()).await;
    c.create_account("builder").await;
    let token = c.token("builder", json!({})).await;
    assert_eq!(c.whoami(&token).await.0, 201);
    c.admin(
        "DELETE",
        "/api/v1/namespaces/default/serviceaccounts/builder",
        None,
    )
    .await;
    let (code, _) = c.whoami(&token).await;
    assert_eq!(code, 401);
    let review = c.review(&token, &[]).await;
    assert_eq!(review["authenticated"], Value::Null, "{review}");
    assert!(
        review["error"]
            .as_str()
            .unwrap()
            .contains("serviceaccounts \"builder\" not found"),
        "{review}"
    );
    // A new account of the same name is another account.
    c.create_account("builder").await;
    assert_eq!(c.whoami(&token).await.0, 401);
    let review = c.review(&token, &[]).await;
    assert!(
        review["error"]
            .as_str()
            .unwrap()
            .contains("does not match claim"),
        "{review}"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn bound_tokens_name_their_pod_and_die_with_it() {
    let c = Cluster::new(Settings::default()).await;
    c.create_account("builder").await;
    let pod = |name: &str, sa: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"serviceAccountName": sa, "containers": [{"name": "c", "image": "busybox"}]}})
    };
    let p = c
        .admin(
            "POST",
            "/api/v1/namespaces/default/pods",
            Some(pod("p", "builder")),
        )
        .await;
    let pod_uid = p["metadata"]["uid"].as_str().unwrap();
    c.admin(
        "POST",
        "/api/v1/namespaces/default/pods",
        Some(pod("other", "default")),
    )
    .await;

    let bound = |name: &str, uid: &str| json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}});
    let token = c.token("builder", bound("p", pod_uid)).await;
    let claims = payload(&token);
    assert_eq!(
        claims["kubernetes.io"]["pod"],
        json!({"name": "p", "uid": pod_uid})
    );
    let (code, user) = c.whoami(&token).await;
    assert_eq!(code, 201);
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["p"])
    );
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-uid"],
        json!([pod_uid])
    );

    let wrong_account = c.request_token("builder", bound("other", "")).await;
    assert_eq!(wrong_account.status(), 400);
    assert_eq!(
        body_json(&wrong_account)["message"],
        "cannot bind token for serviceaccount \"builder\" to pod running with serviceaccount \"default\""
    );
    let stale = c.request_token("builder", bound("p", "not-its-uid")).await;
    assert_eq!(stale.status(), 409);
    assert!(
        body_json(&stale)["message"]
            .as_str()
            .unwrap()
            .starts_with("Operation cannot be fulfilled on Pod \"p\": the UID in the bound object reference (not-its-uid) does not match the UID in record"),
    );
    let odd = c
        .request_token(
            "builder",
            json!({"boundObjectRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}),
        )
        .await;
    assert_eq!(odd.status(), 400);
    assert_eq!(
        body_json(&odd)["message"],
        "cannot bind token to object of type apps/v1, Kind=Deployment"
    );

    // The pod goes (no kubelet here: forced), and so does the token.
    c.admin(
        "DELETE",
        "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=0",
        None,
    )
    .await;
    assert_eq!(c.whoami(&token).await.0, 401);
    c.shutdown().await;
}

#[tokio::test]
async fn garbage_and_foreign_tokens_are_401_and_token_review_agrees() {
    let c = Cluster::new(Settings::default()).await;
    c.create_account("builder").await;
    let token = c.token("builder", json!({})).await;

    // Signed with another key: every claim right, the signature wrong.
    let other = Tokens::new(&Settings::default()).unwrap();
    let claims = payload(&token);
    let forged = other
        .issue(&token::Request {
            namespace: "default".into(),
            service_account: token::ObjectRef::new(
                "builder",
                claims["kubernetes.io"]["serviceaccount"]["uid"]
                    .as_str()
                    .unwrap(),
            ),
            pod: None,
            secret: None,
            node: None,
            audiences: vec![DEFAULT_ISSUER.into()],
            expiration_seconds: 3600,
        })
        .unwrap()
        .0;
    for bad in [forged.as_str(), "garbage", "a.b.c"] {
        let (code, _) = c.whoami(bad).await;
        assert_eq!(code, 401, "{bad}");
        let response = c
            .send("GET", "/api/v1/namespaces/default/pods", bad, None)
            .await;
        let status = body_json(&response);
        assert_eq!(status["reason"], "Unauthorized");
        assert_eq!(status["message"], "Unauthorized");
        let review = c.review(bad, &[]).await;
        assert!(review["authenticated"].is_null(), "{review}");
        assert!(review["error"].is_string(), "{review}");
    }

    let review = c.review(&token, &[]).await;
    assert_eq!(review["authenticated"], true);
    assert_eq!(
        review["user"]["username"],
        "system:serviceaccount:default:builder"
    );
    assert_eq!(review["audiences"], json!([DEFAULT_ISSUER]));
    // Asked for another audience, the same token does not hold.
    let review = c.review(&token, &["vault"]).await;
    assert!(review["authenticated"].is_null(), "{review}");
    // A token for two audiences reviewed for one of them names just that one.
    let both = c
        .token("builder", json!({"audiences": ["vault", DEFAULT_ISSUER]}))
        .await;
    let review = c.review(&both, &["vault"]).await;
    assert_eq!(review["authenticated"], true);
    assert_eq!(review["audiences"], json!(["vault"]));
    // Static tokens review as their user.
    let review = c.review(&c.admin.clone(), &[]).await;
    assert_eq!(review["user"]["username"], "system:admin");

    // Only those who may create tokenreviews ask.
    let denied = c
        .send(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &token,
            Some(
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": "x"}}),
            ),
        )
        .await;
    assert_eq!(denied.status(), 403);
    c.shutdown().await;
}

#[tokio::test]
async fn oidc_discovery_serves_the_key_tokens_verify_with() {
    let c = Cluster::new(Settings::default()).await;
    c.create_account("builder").await;
    let token = c.token("builder", json!({})).await;

    // Service accounts may read both documents (system:service-account-issuer-discovery).
    let config = c.send("GET", DISCOVERY_PATH, &token, None).await;
    assert_eq!(config.status(), 200);
    assert_eq!(config.headers()["cache-control"], "public, max-age=3600");
    let config = body_json(&config);
    assert_eq!(config["issuer"], DEFAULT_ISSUER);
    assert_eq!(
        config["jwks_uri"],
        format!("{DEFAULT_ISSUER}/openid/v1/jwks")
    );
    assert_eq!(
        config["id_token_signing_alg_values_supported"],
        json!(["ES256"])
    );
    let jwks = c.send("GET", "/openid/v1/jwks/", &token, None).await;
    assert_eq!(jwks.status(), 200);
    assert_eq!(jwks.headers()["content-type"], "application/jwk-set+json");
    let jwks = body_json(&jwks);
    let key = &jwks["keys"][0];
    // The published key verifies the token.
    let decoding = jsonwebtoken::DecodingKey::from_ec_components(
        key["x"].as_str().unwrap(),
        key["y"].as_str().unwrap(),
    )
    .unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[DEFAULT_ISSUER]);
    jsonwebtoken::decode::<Value>(&token, &decoding, &validation).unwrap();
    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!(header.kid.as_deref(), key["kid"].as_str());

    // A user without the binding may not.
    let authenticator = c.api.static_tokens.get().unwrap().clone();
    let nobody = authenticator
        .add_token(User {
            name: "nobody".into(),
            uid: "n".into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(c.send("GET", JWKS_PATH, &nobody, None).await.status(), 403);
    c.shutdown().await;
}

#[tokio::test]
async fn pods_get_the_token_volume_as_their_account_says() {
    let c = Cluster::new(Settings::default()).await;
    let create = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    };
    let volumes = |pod: &Value| -> Vec<String> {
        pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str().map(str::to_string))
            .collect()
    };
    let uri = "/api/v1/namespaces/default/pods";
    // No `default` account yet (no controllers here): admitted without the volume.
    let early = c.admin("POST", uri, Some(create("early", json!({})))).await;
    assert_eq!(early["spec"]["serviceAccountName"], "default");
    assert!(volumes(&early).is_empty());

    c.create_account("default").await;
    let plain = c.admin("POST", uri, Some(create("plain", json!({})))).await;
    let names = volumes(&plain);
    assert_eq!(names.len(), 1);
    assert!(names[0].starts_with("kube-api-access-"), "{names:?}");
    assert_eq!(
        plain["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        crate::admission::SERVICE_ACCOUNT_MOUNT_PATH
    );
    let off = c
        .admin(
            "POST",
            uri,
            Some(create(
                "off",
                json!({"automountServiceAccountToken": false}),
            )),
        )
        .await;
    assert!(volumes(&off).is_empty());

    c.admin(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        Some(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"},
            "automountServiceAccountToken": false}),
        ),
    )
    .await;
    let quiet = c
        .admin(
            "POST",
            uri,
            Some(create("quiet", json!({"serviceAccountName": "quiet"}))),
        )
        .await;
    assert!(volumes(&quiet).is_empty());
    let overruled = c
        .admin(
            "POST",
            uri,
            Some(create(
                "overruled",
                json!({"serviceAccountName": "quiet", "automountServiceAccountToken": true}),
            )),
        )
        .await;
    assert_eq!(volumes(&overruled).len(), 1);
    // Mirror pods are the kubelet's own: left alone.
    let mut mirror = create("mirror", json!({"nodeName": "n1"}));
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    let mirror = c.admin("POST", uri, Some(mirror)).await;
    assert!(volumes(&mirror).is_empty());
    c.shutdown().await;
}

/// A Secret of type `kubernetes.io/service-account-token` holding `token` for `account`.
fn token_secret(name: &str, account: &str, token: &str) -> Value {
    use base64::Engine as _;
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": name,
            "annotations": {"kubernetes.io/service-account.name": account}},
        "data": {"token": base64::engine::general_purpose::STANDARD.encode(token)}})
}

#[tokio::test]
async fn legacy_tokens_hold_while_their_secret_and_account_do() {
    let key = Arc::new(SigningKey::generate().unwrap());
    let c = Cluster::new(Settings {
        key: Some(key.clone()),
        ..Settings::default()
    })
    .await;
    let account = c.create_account("builder").await;
    let uid = account["metadata"]["uid"].as_str().unwrap().to_string();
    let claims = skiff_pki::legacy_token::Claims::new("default", "builder", &uid, "builder-token");
    let sign = |key: &SigningKey| {
        skiff_pki::legacy_token::sign(key.encoding(), key.kid(), &claims).unwrap()
    };
    let token = sign(&key);
    let secrets = "/api/v1/namespaces/default/secrets";
    c.admin(
        "POST",
        secrets,
        Some(token_secret("builder-token", "builder", &token)),
    )
    .await;

    // Valid: the account's user, in the API server's audiences.
    let (code, user) = c.whoami(&token).await;
    assert_eq!(code, 201, "{user}");
    assert_eq!(user["username"], "system:serviceaccount:default:builder");
    assert_eq!(user["uid"], uid.as_str());
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    let review = c.review(&token, &[]).await;
    assert_eq!(review["authenticated"], true, "{review}");
    assert_eq!(review["audiences"], json!([DEFAULT_ISSUER]));
    let elsewhere = c.review(&token, &["vault"]).await;
    assert_eq!(elsewhere["authenticated"], Value::Null, "{elsewhere}");

    // Signed by another key: refused, though the Secret holds it.
    let forged = sign(&SigningKey::generate().unwrap());
    let path = format!("{secrets}/builder-token");
    c.admin(
        "PUT",
        &path,
        Some(token_secret("builder-token", "builder", &forged)),
    )
    .await;
    assert_eq!(c.whoami(&forged).await.0, 401);
    let review = c.review(&forged, &[]).await;
    assert!(
        review["error"]
            .as_str()
            .unwrap()
            .contains("invalid signature"),
        "{review}"
    );

    // The Secret now holds another token: the first one no longer logs in.
    let second = sign(&key);
    assert_ne!(second, token);
    c.admin(
        "PUT",
        &path,
        Some(token_secret("builder-token", "builder", &second)),
    )
    .await;
    assert_eq!(c.whoami(&second).await.0, 201);
    assert_eq!(c.whoami(&token).await.0, 401);
    let review = c.review(&token, &[]).await;
    assert!(
        review["error"]
            .as_str()
            .unwrap()
            .contains("does not match server's copy"),
        "{review}"
    );

    // The Secret deleted: refused.
    c.admin("DELETE", &path, None).await;
    assert_eq!(c.whoami(&second).await.0, 401);
    let review = c.review(&second, &[]).await;
    assert!(
        review["error"].as_str().unwrap().contains("invalidated"),
        "{review}"
    );

    // The Secret back, but the account recreated under the same name: another account.
    c.admin(
        "POST",
        secrets,
        Some(token_secret("builder-token", "builder", &second)),
    )
    .await;
    assert_eq!(c.whoami(&second).await.0, 201);
    c.admin(
        "DELETE",
        "/api/v1/namespaces/default/serviceaccounts/builder",
        None,
    )
    .await;
    c.create_account("builder").await;
    assert_eq!(c.whoami(&second).await.0, 401);
    let review = c.review(&second, &[]).await;
    assert!(
        review["error"]
            .as_str()
            .unwrap()
            .contains("does not match claim"),
        "{review}"
    );
    c.shutdown().await;
}

//! The HTTP front of the API server: which path goes where, authentication, the body limit, and
//! the one place every error becomes a Kubernetes `Status` response.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use futures::{Stream, StreamExt};
use http::{HeaderMap, Method};
use warp::filters::BoxedFilter;
use warp::{Filter, Rejection, Reply};

use crate::audit;
use crate::auth::{self, Authenticator, User};
use crate::authz;
use crate::error::Error;
use crate::handlers;
use crate::request::{self, Query, Request, Response, Target};
use crate::server::ApiServer;
use crate::version;

/// Every route, with bearer-token authentication on all but `/version`, the health checks and
/// the timeline page's files and login ([`crate::ui`]).
pub fn routes(api: Arc<ApiServer>, authenticator: Arc<Authenticator>) -> BoxedFilter<(Response,)> {
    let ready_api = api.clone();
    let public = version::routes(move || readiness(&ready_api));
    let _ = api.static_tokens.set(authenticator.clone());
    if let Some(auditor) = &api.config.audit {
        auditor.set_kinds(api.kinds.clone());
    }
    let ca_pem = api.config.ca_pem.clone();
    let cacerts = warp::path!("cacerts").and(warp::get()).and_then(move || {
        let ca_pem = ca_pem.clone();
        async move {
            match ca_pem {
                Some(pem) => Ok::<Response, warp::Rejection>(
                    warp::reply::with_header(pem, "content-type", "application/x-pem-file")
                        .into_response(),
                ),
                None => Err(warp::reject::not_found()),
            }
        }
    });
    // The timeline page's session cookie stands for its user on reads (see `crate::ui`).
    let sessions = Arc::new(crate::ui::Sessions::default());
    let user = crate::ui::session_user(sessions.clone())
        .or(authenticator.filter_with(api.clone()))
        .unify()
        .boxed();
    public
        .or(cacerts)
        .unify()
        .or(crate::ui::assets())
        .unify()
        .or(crate::ui::session_routes(
            api.clone(),
            authenticator.clone(),
            sessions,
        ))
        .unify()
        .or(api_routes(api.clone(), user))
        .unify()
        .recover(recover)
        .unify()
        .boxed()
}

/// The same routes without authentication, for the loopback-only plain-HTTP debug listener
/// (kubectl sends no token over plain HTTP).
pub fn insecure_routes(api: Arc<ApiServer>) -> BoxedFilter<(Response,)> {
    let ready_api = api.clone();
    version::routes(move || readiness(&ready_api))
        .or(crate::ui::assets())
        .unify()
        .or(api_routes(api, warp::any().map(User::admin).boxed()))
        .unify()
        .recover(recover)
        .unify()
        .boxed()
}

/// What `/readyz` says: not ready while shutting down, or while the store cannot serve writes
/// (the store logs why). Reads the store's last health check: never waits on the datastore.
fn readiness(api: &ApiServer) -> Result<(), version::NotReady> {
    if api.shutdown.is_cancelled() {
        Err(version::NotReady::Server)
    } else if api.registry.store().ready().is_err() {
        Err(version::NotReady::Datastore)
    } else {
        Ok(())
    }
}

/// Discovery, OpenAPI and the resources, each request authorized for the user it acts as.
fn api_routes(api: Arc<ApiServer>, user: BoxedFilter<(User,)>) -> BoxedFilter<(Response,)> {
    let aggregated = aggregated_routes(api.clone(), user.clone());
    let discovery = crate::discovery::routes_with(api.kinds.clone(), Some(api.aggregator.clone()));
    let openapi = crate::openapi::routes_with(api.openapi.clone(), api.aggregator.clone());
    let metrics = crate::metrics::route(api.clone());
    let debug = crate::replay::http::requests();
    let replay = crate::replay::Replay::with_kinds(api.registry.store().clone(), api.kinds.clone())
        .with_index(api.timeline_index.clone());
    let debug_api = api.clone();
    let oidc = crate::serviceaccount::routes(api.clone());
    let limit = api.config.limits.max_body_bytes;
    let path_api = api.clone();
    // Paths that are not resources need RBAC's non-resource rules (discovery: `system:discovery`).
    // A resource path is the resources route's, which authenticates and authorizes it as one:
    // it is turned away here before authentication, so that each request is authenticated once.
    let resource_api = api.clone();
    let not_a_resource = warp::path::full().and_then(move |path: warp::path::FullPath| {
        let is_resource =
            request::parse_path(&resource_api.kinds.snapshot(), path.as_str()).is_some();
        async move {
            if is_resource {
                Err(warp::reject::not_found())
            } else {
                Ok(path)
            }
        }
    });
    let path_allowed = not_a_resource
        .and(user.clone())
        .and(warp::method())
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<audit::Handle>())
        .and_then(
            move |path: warp::path::FullPath,
                  user: User,
                  method: Method,
                  headers: HeaderMap,
                  audit: Option<audit::Handle>| {
                let api = path_api.clone();
                async move {
                    let verb = authz::path_verb(&method);
                    if let Some(audit) = &audit {
                        audit.attributes(&user, &verb, None, path.as_str()).await;
                    }
                    let user = impersonate(&api, user, &headers, audit.as_ref())
                        .map_err(|e| warp::reject::custom(Denied(e)))?;
                    let request = authz::Request::NonResource {
                        verb: &verb,
                        path: path.as_str(),
                    };
                    authorize(&api, &user, &request, audit.as_ref())
                        .map_err(|e| warp::reject::custom(Denied(e)))?;
                    Ok::<User, Rejection>(user)
                }
            },
        );
    let resources = user
        .and(warp::method())
        .and(warp::path::full())
        .and(
            warp::query::raw()
                .or(warp::any().map(String::new))
                .unify(),
        )
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<hyper::upgrade::OnUpgrade>())
        .and(warp::ext::optional::<crate::limits::Connection>())
        .and(warp::ext::optional::<audit::Handle>())
        .and(warp::body::stream())
        .and_then(
            move |user: User, method: Method, path: warp::path::FullPath, query: String, headers: HeaderMap, upgrade: Option<hyper::upgrade::OnUpgrade>, connection: Option<crate::limits::Connection>, audit: Option<audit::Handle>, body| {
                let api = api.clone();
                async move {
                    let started = std::time::Instant::now();
                    let path = path.as_str().to_string();
                    let response = match serve(&api, user, method.clone(), path.clone(), query.clone(), headers, upgrade, connection, audit, Box::pin(body), limit).await {
                        Ok(response) => response,
                        // Not a resource path: another route's answer (a denied discovery
                        // request) or a 404.
                        Err(Error::NoRoute) if request::parse_path(&api.kinds.snapshot(), &path).is_none() => {
                            return Err(warp::reject::not_found());
                        }
                        Err(e) => error_response(&e),
                    };
                    crate::metrics::record_request(&api.kinds.snapshot(), &method, &path, &query, response.status().as_u16(), started.elapsed());
                    tracing::debug!(%method, %path, status = response.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "request");
                    Ok::<Response, Rejection>(response)
                }
            },
        );
    // The history endpoints answer for the user (they hide what RBAC keeps from them); the
    // others are the same for everyone allowed the path.
    enum NonResource {
        Served(Response),
        Debug(crate::replay::http::DebugRequest),
    }
    aggregated
        .or(path_allowed
            .and(
                discovery
                    .or(openapi)
                    .unify()
                    .or(metrics)
                    .unify()
                    .or(oidc)
                    .unify()
                    .map(NonResource::Served)
                    .or(debug.map(NonResource::Debug))
                    .unify(),
            )
            .then(move |user: User, route: NonResource| {
                let (api, replay) = (debug_api.clone(), replay.clone());
                async move {
                    match route {
                        NonResource::Served(response) => response,
                        NonResource::Debug(request) => {
                            crate::replay::http::serve(&replay, &api.authorizer, &user, request)
                                .await
                        }
                    }
                }
            }))
        .unify()
        .or(resources)
        .unify()
        .boxed()
}

/// Requests under a group-version that an APIService with a service serves
/// ([`crate::aggregation`]): authenticated, impersonated, admitted and authorized here, then
/// proxied. The path is checked before authentication, so that other paths are authenticated
/// once, by their own route.
fn aggregated_routes(api: Arc<ApiServer>, user: BoxedFilter<(User,)>) -> BoxedFilter<(Response,)> {
    let limit = api.config.limits.max_body_bytes;
    let lookup = api.clone();
    let served = warp::path::full().and_then(move |path: warp::path::FullPath| {
        let registered = lookup.aggregator.serving(path.as_str());
        async move { registered.ok_or_else(warp::reject::not_found) }
    });
    served
        .and(user)
        .and(warp::method())
        .and(warp::path::full())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<hyper::upgrade::OnUpgrade>())
        .and(warp::ext::optional::<audit::Handle>())
        .and(warp::body::stream())
        .then(
            move |registered: crate::aggregation::Registered,
                  user: User,
                  method: Method,
                  path: warp::path::FullPath,
                  query: String,
                  headers: HeaderMap,
                  upgrade: Option<hyper::upgrade::OnUpgrade>,
                  audit: Option<audit::Handle>,
                  body| {
                let api = api.clone();
                async move {
                    let path = path.as_str().to_string();
                    let served = aggregated(
                        &api,
                        &registered,
                        user,
                        method,
                        path,
                        query,
                        headers,
                        upgrade,
                        audit,
                        Box::pin(body),
                        limit,
                    );
                    served.await.unwrap_or_else(|e| error_response(&e))
                }
            },
        )
        .boxed()
}

#[allow(clippy::too_many_arguments)]
async fn aggregated<S, B>(
    api: &Arc<ApiServer>,
    registered: &crate::aggregation::Registered,
    user: User,
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    audit: Option<audit::Handle>,
    body: S,
    limit: usize,
) -> Result<Response, Error>
where
    S: Stream<Item = Result<B, warp::Error>> + Unpin + Send,
    B: Buf,
{
    use crate::aggregation::Attributes;
    let parsed = Query::parse(&query);
    let attributes = crate::aggregation::attributes(&method, &path, &parsed);
    let verb = match &attributes {
        Attributes::NonResource { verb } | Attributes::Resource { verb, .. } => verb.clone(),
    };
    if let Some(audit) = &audit {
        audit.attributes(&user, &verb, None, &path).await;
    }
    let user = impersonate(api, user, &headers, audit.as_ref())?;
    let class = match &attributes {
        Attributes::Resource { subresource, .. } => {
            crate::limits::classify(&verb, Some(subresource.as_str()).filter(|s| !s.is_empty()))
        }
        Attributes::NonResource { .. } => crate::limits::Class::ReadOnly,
    };
    let seat = api.limits.admit(class, &user)?;
    let request = match &attributes {
        Attributes::NonResource { verb } => authz::Request::NonResource { verb, path: &path },
        Attributes::Resource {
            verb,
            namespace,
            resource,
            subresource,
            name,
        } => authz::Request::Resource {
            verb,
            group: &registered.group,
            resource,
            subresource,
            namespace,
            name,
        },
    };
    authorize(api, &user, &request, audit.as_ref())?;
    let body = read_body(body, limit).await?;
    let upgrade = upgrade.filter(|_| crate::proxy::wants_upgrade(&headers));
    let forward = crate::aggregation::Forward {
        headers: crate::aggregation::backend_headers(&headers, &user, upgrade.is_some()),
        method,
        path,
        query,
        body,
        upgrade,
    };
    let response = crate::aggregation::proxy(api, registered, forward).await?;
    Ok(if seat.is_watch() && response.status().is_success() {
        seat.hold_until_sent(response)
    } else {
        response
    })
}

/// A request refused before any route served it (a path the user may not read, or an
/// impersonation they may not do).
#[derive(Debug)]
struct Denied(Error);

impl warp::reject::Reject for Denied {}

#[allow(clippy::too_many_arguments)]
async fn serve<S, B>(
    api: &Arc<ApiServer>,
    user: User,
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
    upgrade: Option<hyper::upgrade::OnUpgrade>,
    connection: Option<crate::limits::Connection>,
    audit: Option<audit::Handle>,
    body: S,
    limit: usize,
) -> Result<Response, Error>
where
    S: Stream<Item = Result<B, warp::Error>> + Unpin + Send,
    B: Buf,
{
    let target = match request::parse_path(&api.kinds.snapshot(), &path) {
        None => return Err(Error::NoRoute),
        Some(Ok(target)) => target,
        Some(Err(e)) => {
            // An unknown resource: still audited as its user's request.
            if let Some(audit) = &audit {
                audit
                    .attributes(&user, &authz::path_verb(&method), None, &path)
                    .await;
            }
            return Err(e);
        }
    };
    let query = Query::parse(&query);
    let verb = authz::resource_verb(&method, &target, &query);
    if let Some(audit) = &audit {
        audit.attributes(&user, verb, Some(&target), &path).await;
    }
    let authenticated = headers
        .contains_key("impersonate-user")
        .then(|| user.clone());
    let user = impersonate(api, user, &headers, audit.as_ref())?;
    // Who history will say made this request's changes.
    let origin = crate::origin::Origin::of(&user, authenticated.as_ref());
    // After impersonation and before authorization, as upstream's max-in-flight filter; the
    // seat is held while the body is read, and a watch's until the watch ends.
    let class = if target.proxy_path.is_some() {
        crate::limits::Class::LongRunning
    } else {
        crate::limits::classify(verb, target.subresource.as_deref())
    };
    let seat = api.limits.admit(class, &user)?;
    authorize(
        api,
        &user,
        &authz::resource_request(verb, &target, &query),
        audit.as_ref(),
    )?;
    let body = read_body(body, limit).await?;
    // Only the streaming and proxy subresources may take over the connection.
    let upgrade = upgrade.filter(|_| authz::is_stream(&target) || target.proxy_path.is_some());
    let feedback = std::sync::Arc::new(crate::admission::Feedback::default());
    let request = Request {
        method,
        path,
        query,
        headers,
        body,
        user,
        upgrade,
        connection,
        feedback: feedback.clone(),
    };
    // The body is parsed for the audit log when its event keeps it, or (a create) when only the
    // body names the object.
    if let Some(audit) = &audit
        && (audit.level() >= audit::policy::Level::Request
            || (audit.level() >= audit::policy::Level::Metadata && target.name.is_none()))
        && !request.body.is_empty()
        && let Ok(object) = request::parse_body(&request)
    {
        audit.request_object(object);
    }
    match target.kind.source() {
        skiff_kinds::Source::Store => {}
        skiff_kinds::Source::Review => return review(api, request, target).await,
        skiff_kinds::Source::Kubelets => {
            return crate::resource_metrics::serve(api, &request, &target).await;
        }
    }
    // Admission's warnings go with any answer, a refusal included (as Kubernetes sends them),
    // and its audit annotations with the request's event.
    let response = match crate::origin::scope(&origin, handlers::handle(api, request, target)).await
    {
        Ok(response) => response,
        Err(Error::NoRoute) => return Err(Error::NoRoute),
        Err(e) => error_response(&e),
    };
    let response = if seat.is_watch() && response.status().is_success() {
        seat.hold_until_sent(response)
    } else {
        response
    };
    if let Some(audit) = &audit {
        audit.annotate(feedback.take_annotations());
    }
    Ok(handlers::with_warnings(response, &feedback.take_warnings()))
}

/// The user `user` acts as ([`authz::impersonate`]); a refused impersonation is audited as the
/// authorizer's `forbid`.
fn impersonate(
    api: &ApiServer,
    user: User,
    headers: &HeaderMap,
    audit: Option<&audit::Handle>,
) -> Result<User, Error> {
    let Some(audit) = audit else {
        return authz::impersonate(&api.authorizer, user, headers);
    };
    let asks = headers.contains_key("impersonate-user");
    match authz::impersonate(&api.authorizer, user, headers) {
        Ok(user) => {
            if asks {
                audit.impersonated(&user);
            }
            Ok(user)
        }
        Err(e) => {
            audit.authorized(false, &e.to_string());
            Err(e)
        }
    }
}

/// [`authz::Authorizer::check`], with the decision and its reason in the audit record.
fn authorize(
    api: &ApiServer,
    user: &User,
    request: &authz::Request<'_>,
    audit: Option<&audit::Handle>,
) -> Result<(), Error> {
    let Some(audit) = audit else {
        return api.authorizer.check(user, request);
    };
    match api.authorizer.authorize(user, request) {
        authz::Decision::Allow(reason) => {
            audit.authorized(true, &reason);
            Ok(())
        }
        authz::Decision::Deny(reason) => {
            audit.authorized(false, &reason);
            Err(authz::forbidden(user, request, &reason))
        }
    }
}

/// A review (`kubectl auth can-i`, `whoami`): answered, never stored.
async fn review(api: &ApiServer, request: Request, target: Target) -> Result<Response, Error> {
    if request.method != Method::POST || target.name.is_some() || target.subresource.is_some() {
        return Err(Error::MethodNotAllowed);
    }
    let format = crate::render::Format::negotiate(&request.headers, &request.query)?;
    let body = request::parse_body(&request)?;
    let kind = &*target.kind;
    let decoded = kind
        .decode(&body)
        .map_err(|e| Error::BadRequest(format!("decoding the {}: {e}", kind.info().kind)))?;
    let answer = if kind.info().kind == "TokenReview" {
        crate::serviceaccount::token_review(api, decoded).await?
    } else {
        authz::reviews::answer(
            &api.authorizer,
            kind,
            &request.user,
            target.namespace.as_deref(),
            decoded,
        )?
    };
    Ok(format.object(kind, http::StatusCode::CREATED, answer))
}

/// How much of a body over the limit is read and thrown away, and for how long, so that a
/// client still writing it hears the 413 instead of a reset connection.
const DRAIN_BYTES: usize = 32 * 1024 * 1024;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a body up to `limit` bytes; more is a 413, and nothing past the limit is kept.
///
/// The rest of an oversized body is read and discarded (up to [`DRAIN_BYTES`] within
/// [`DRAIN_TIME`]) before the answer: closing a connection with unread data resets it, and a
/// client that is still writing then sees a broken pipe, not the `Status` saying why.
async fn read_body<S, B>(mut body: S, limit: usize) -> Result<bytes::Bytes, Error>
where
    S: Stream<Item = Result<B, warp::Error>> + Unpin,
    B: Buf,
{
    let mut buffer = BytesMut::new();
    while let Some(chunk) = body.next().await {
        let mut chunk =
            chunk.map_err(|e| Error::BadRequest(format!("reading the request body: {e}")))?;
        if buffer.len() + chunk.remaining() > limit {
            drop(buffer);
            let mut drained = chunk.remaining();
            let _ = tokio::time::timeout(DRAIN_TIME, async {
                while drained < DRAIN_BYTES
                    && let Some(Ok(chunk)) = body.next().await
                {
                    drained += chunk.remaining();
                }
            })
            .await;
            return Err(Error::TooLarge { limit });
        }
        while chunk.has_remaining() {
            let piece = chunk.chunk();
            let n = piece.len();
            buffer.extend_from_slice(piece);
            chunk.advance(n);
        }
    }
    Ok(buffer.freeze())
}

/// The `Status` response for an error, its body as kube-apiserver writes it ([`Error::body`]).
pub fn error_response(error: &Error) -> Response {
    let api_error = error.to_api_error();
    let mut response = status_response(api_error.to_body(), error.code());
    // Every Status that says when to retry says it in the header too, as kube-apiserver's
    // `responsewriters.ErrorNegotiated` does: client-go waits on the header.
    if let Some(seconds) = api_error
        .details()
        .and_then(|d| d.retry_after_seconds)
        .filter(|s| *s > 0)
    {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    response
}

/// A response with a `Status` body of [`skiff_meta::status::status_body`].
pub fn status_response(body: Vec<u8>, code: http::StatusCode) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Turns warp's own rejections (a wrong token, a method no route takes) into `Status` bodies.
async fn recover(rejection: Rejection) -> Result<Response, Infallible> {
    if let Some(unauthorized) = rejection.find::<auth::Unauthorized>() {
        return Ok(unauthorized.response());
    }
    if let Some(Denied(error)) = rejection.find::<Denied>() {
        return Ok(error_response(error));
    }
    let error = if rejection.is_not_found() {
        Error::NoRoute
    } else if rejection.find::<warp::reject::MethodNotAllowed>().is_some() {
        Error::MethodNotAllowed
    } else if rejection.find::<warp::reject::PayloadTooLarge>().is_some() {
        Error::TooLarge {
            limit: 3 * 1024 * 1024,
        }
    } else {
        tracing::warn!(?rejection, "unhandled rejection");
        Error::Internal(format!("unhandled rejection: {rejection:?}"))
    };
    Ok(error_response(&error))
}

#[cfg(test)]
mod limits_tests;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};
    use skiff_store::Store;
    use tokio_util::sync::CancellationToken;

    use crate::server::{ApiServer, Config};
    use crate::tls::testing::{TempDir, call};

    /// An API server on a fresh log, its routes without authentication, and its data dir.
    pub(crate) struct Harness {
        pub(crate) api: Arc<ApiServer>,
        store: Arc<dyn Store>,
        _dir: TempDir,
    }

    impl Harness {
        pub(crate) async fn new() -> Harness {
            let dir = TempDir::new("routes");
            let store = skiff_store::SledStore::open(skiff_store::Config::new(&dir.0)).unwrap();
            let store: Arc<dyn Store> = Arc::new(store);
            let api = ApiServer::new(store.clone(), Config::default(), CancellationToken::new())
                .await
                .unwrap();
            Harness {
                api,
                store,
                _dir: dir,
            }
        }

        /// One request through every route; the response with its whole body.
        pub(crate) async fn send(
            &self,
            method: &str,
            uri: &str,
            content_type: Option<&str>,
            body: impl Into<Vec<u8>>,
        ) -> http::Response<bytes::Bytes> {
            let mut builder = http::Request::builder().method(method).uri(uri);
            if let Some(content_type) = content_type {
                builder = builder.header("content-type", content_type);
            }
            // The test helper's bodies are strings; protobuf bodies here are ASCII bytes.
            let body = String::from_utf8(body.into()).expect("an ASCII body");
            call(
                super::insecure_routes(self.api.clone()),
                builder.body(body).unwrap(),
            )
            .await
        }

        pub(crate) async fn create_config_map(&self, name: &str) {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
            let created = self
                .send(
                    "POST",
                    "/api/v1/namespaces/default/configmaps",
                    Some("application/json"),
                    body.to_string(),
                )
                .await;
            assert_eq!(created.status(), 201, "{:?}", created.body());
        }

        pub(crate) async fn shutdown(self) {
            self.api.shutdown.cancel();
            self.store.close().await.unwrap();
        }
    }

    #[tokio::test]
    async fn each_request_is_authenticated_once() {
        let h = Harness::new().await;
        let dir = TempDir::new("routes-auth");
        let authenticator = Arc::new(
            crate::auth::Authenticator::load_or_create(&dir.0.join("tokens.csv")).unwrap(),
        );
        let token = authenticator.admin_token().unwrap();
        let routes = super::routes(h.api.clone(), authenticator.clone());
        let send = |method: &str, uri: &str, token: Option<&str>, body: &str| {
            let mut builder = http::Request::builder()
                .method(method)
                .uri(uri)
                .header("content-type", "application/json");
            if let Some(token) = token {
                builder = builder.header("authorization", format!("Bearer {token}"));
            }
            call(routes.clone(), builder.body(body.to_string()).unwrap())
        };
        let create = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#;
        let cases = [
            // A resource path (a create, a get), and paths served by the other routes.
            ("POST", "/api/v1/namespaces/default/configmaps", create, 201),
            ("GET", "/api/v1/namespaces/default/configmaps/a", "", 200),
            ("GET", "/api", "", 200),
            ("GET", "/apis", "", 200),
        ];
        for (method, uri, body, code) in cases {
            let before = authenticator.lookups();
            let response = send(method, uri, Some(&token), body).await;
            assert_eq!(
                response.status(),
                code,
                "{method} {uri}: {:?}",
                response.body()
            );
            assert_eq!(authenticator.lookups() - before, 1, "{method} {uri}");
            // Without a token both kinds of path are still refused with a 401.
            let refused = send(method, uri, None, body).await;
            assert_eq!(refused.status(), 401, "{method} {uri}");
            let wrong = send(method, uri, Some("wrong"), body).await;
            assert_eq!(wrong.status(), 401, "{method} {uri}");
        }
        h.shutdown().await;
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = crate::package_dir().join(format!("../kinds/testdata/protobuf/{name}.v1_33.pb"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[tokio::test]
    async fn deletes_take_kubectl_drains_protobuf_delete_options() {
        let h = Harness::new().await;
        let protobuf = Some("application/vnd.kubernetes.protobuf");
        let uri = "/api/v1/namespaces/default/configmaps/c";
        h.create_config_map("c").await;

        // --dry-run=server: dryRun [All] in the body; the object stays.
        let dry = h
            .send("DELETE", uri, protobuf, fixture("deleteoptions-dryrun"))
            .await;
        assert_eq!(dry.status(), 200, "{:?}", dry.body());
        assert_eq!(h.send("GET", uri, None, "").await.status(), 200);

        for options in ["deleteoptions-grace0", "deleteoptions-empty"] {
            let deleted = h.send("DELETE", uri, protobuf, fixture(options)).await;
            assert_eq!(deleted.status(), 200, "{options}: {:?}", deleted.body());
            let object: Value = serde_json::from_slice(deleted.body()).unwrap();
            assert_eq!(object["metadata"]["name"], "c");
            assert_eq!(h.send("GET", uri, None, "").await.status(), 404);
            h.create_config_map("c").await;
        }

        // Options of another kind, or a body that is not protobuf, are refused.
        // The drain body with `kind: ConfigMap` in its envelope (typeMeta 15 bytes long).
        let wrong = b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x00\x1a\x00\x22\x00";
        let refused = h.send("DELETE", uri, protobuf, wrong.to_vec()).await;
        assert_eq!(refused.status(), 400);
        let status: Value = serde_json::from_slice(refused.body()).unwrap();
        assert_eq!(
            status["message"],
            "invalid DeleteOptions: the body is a ConfigMap"
        );
        let refused = h.send("DELETE", uri, protobuf, "{}").await;
        assert_eq!(refused.status(), 400);
        let status: Value = serde_json::from_slice(refused.body()).unwrap();
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid DeleteOptions: "),
            "{status}"
        );
        // JSON options still work, dryRun in the body included.
        let json_dry = h
            .send(
                "DELETE",
                uri,
                Some("application/json"),
                r#"{"dryRun":["All"],"propagationPolicy":"Background"}"#,
            )
            .await;
        assert_eq!(json_dry.status(), 200);
        assert_eq!(h.send("GET", uri, None, "").await.status(), 200);
        let bad_dry = h.send("DELETE", uri, None, r#"{"dryRun":["Some"]}"#).await;
        assert_eq!(bad_dry.status(), 400);
        h.shutdown().await;
    }
}

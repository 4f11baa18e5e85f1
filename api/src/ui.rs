//! The timeline page at `/ui/`: the cluster's history in a browser, served by `skiff server`
//! itself (so also through `kubectl proxy`). Plain HTML, JavaScript and CSS embedded in the
//! binary; the page reads the history endpoints under `/debug/skiff/` ([`crate::replay::http`]).
//!
//! The page itself holds no data and is served to anyone; everything it shows comes from the
//! API, authenticated like any request. A browser has no bearer token to send, so the page offers
//! a login form: `POST /ui/login` with a token the API accepts (the admin kubeconfig's) creates a
//! session, kept in memory, whose id comes back in an `HttpOnly; SameSite=Strict; Secure` cookie.
//! The authenticator takes that cookie as the user who logged in, but only on `GET` and `HEAD`
//! requests: a session reads, it never writes, so a forged request could do nothing with it even
//! if a browser sent the cookie along. Sessions end after [`SESSION_TTL`], on `POST /ui/logout`
//! and when the server restarts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use warp::Filter;
use warp::filters::BoxedFilter;

use crate::auth::{self, Authenticator, User};
use crate::request::Response;
use crate::server::ApiServer;

/// The session cookie's name.
pub const COOKIE: &str = "skiff-session";

/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The most sessions kept; the oldest goes when a new one would pass it.
pub const MAX_SESSIONS: usize = 1_000;

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

/// The page's sessions: id to the user who logged in and when the session ends.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Held only to look up, insert or remove one entry; never across an await.
    by_id: Mutex<HashMap<String, (User, Instant)>>,
}

impl Sessions {
    /// A new session for `user`: its id.
    pub fn create(&self, user: User) -> String {
        let id = auth::generate_token();
        let now = Instant::now();
        let mut by_id = self.by_id.lock().expect("sessions lock poisoned");
        by_id.retain(|_, (_, ends)| *ends > now);
        if by_id.len() >= MAX_SESSIONS {
            let oldest = by_id
                .iter()
                .min_by_key(|(_, (_, ends))| *ends)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                by_id.remove(&oldest);
            }
        }
        by_id.insert(id.clone(), (user, now + SESSION_TTL));
        id
    }

    /// The user of a live session.
    pub fn user(&self, id: &str) -> Option<User> {
        let by_id = self.by_id.lock().expect("sessions lock poisoned");
        by_id
            .get(id)
            .filter(|(_, ends)| *ends > Instant::now())
            .map(|(user, _)| user.clone())
    }

    /// Ends a session.
    pub fn remove(&self, id: &str) {
        self.by_id
            .lock()
            .expect("sessions lock poisoned")
            .remove(id);
    }
}

/// The user of a `GET` or `HEAD` request with a live session cookie; rejects (as not found, so
/// that the bearer-token check answers) anything else.
pub fn session_user(sessions: Arc<Sessions>) -> BoxedFilter<(User,)> {
    warp::method()
        .and(warp::cookie::optional::<String>(COOKIE))
        .and_then(move |method: Method, cookie: Option<String>| {
            let sessions = sessions.clone();
            async move {
                let reads = method == Method::GET || method == Method::HEAD;
                cookie
                    .filter(|_| reads)
                    .and_then(|id| sessions.user(&id))
                    .ok_or_else(warp::reject::not_found)
            }
        })
        .boxed()
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = Response::new(body.into());
    let headers = response.headers_mut();
    let set = |headers: &mut http::HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, http::HeaderValue::from_static(value));
    };
    set(headers, "content-type", content_type);
    set(headers, "cache-control", "no-cache");
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "no-referrer");
    set(
        headers,
        "content-security-policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    );
    response
}

/// The page's files: `/ui/` (and `/ui`, redirected), `/ui/app.js`, `/ui/app.css`.
pub fn assets() -> BoxedFilter<(Response,)> {
    // warp matches `/ui` and `/ui/` alike; the page's relative links need the slash.
    let index = warp::path("ui")
        .and(warp::path::end())
        .and(warp::path::full())
        .map(|path: warp::path::FullPath| {
            if path.as_str().ends_with('/') {
                return asset(INDEX, "text/html; charset=utf-8");
            }
            let mut response = Response::new(Default::default());
            *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
            response
                .headers_mut()
                .insert("location", http::HeaderValue::from_static("/ui/"));
            response
        });
    let script =
        warp::path!("ui" / "app.js").map(|| asset(SCRIPT, "text/javascript; charset=utf-8"));
    let style = warp::path!("ui" / "app.css").map(|| asset(STYLE, "text/css; charset=utf-8"));
    warp::get()
        .and(index.or(script).unify().or(style).unify())
        .boxed()
}

/// The login form's body.
#[derive(Debug, serde::Deserialize)]
struct Login {
    token: String,
}

fn cookie(value: &str, max_age: u64) -> http::HeaderValue {
    http::HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={max_age}"
    ))
    .expect("a session id is a header value")
}

/// Whether a browser's `Origin` (when it sends one) is this server's own (`host`): a login
/// posted from another site is refused.
fn same_origin(origin: Option<&str>, host: Option<&str>) -> bool {
    match (origin, host) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host)),
        (Some(_), None) => false,
    }
}

/// `POST /ui/login` (form `token=...`) and `POST /ui/logout`.
pub fn session_routes(
    api: Arc<ApiServer>,
    tokens: Arc<Authenticator>,
    sessions: Arc<Sessions>,
) -> BoxedFilter<(Response,)> {
    let login_sessions = sessions.clone();
    let login = warp::path!("ui" / "login")
        .and(warp::post())
        .and(warp::header::optional::<String>("origin"))
        // The Host header, or for HTTP/2 the request's `:authority`.
        .and(warp::host::optional())
        .and(warp::body::content_length_limit(16 * 1024))
        .and(warp::body::form::<Login>())
        .then(
            move |origin: Option<String>, host: Option<warp::host::Authority>, form: Login| {
                let (api, tokens, sessions) = (api.clone(), tokens.clone(), login_sessions.clone());
                async move {
                    if !same_origin(origin.as_deref(), host.as_ref().map(|h| h.as_str())) {
                        return crate::routes::error_response(&crate::Error::Api(
                            skiff_meta::status::ApiError::new(
                                403,
                                skiff_meta::status::Reason::Forbidden,
                                "a login must come from this server's own page",
                                None,
                            ),
                        ));
                    }
                    let header = format!("Bearer {}", form.token.trim());
                    match auth::authenticate_with(&tokens, &api, Some(&header)).await {
                        Ok(user) => {
                            let body = serde_json::json!({"user": user.name});
                            let mut response = warp::reply::json(&body).into_response();
                            let id = sessions.create(user);
                            response
                                .headers_mut()
                                .insert("set-cookie", cookie(&id, SESSION_TTL.as_secs()));
                            response
                        }
                        Err(error) => auth::Unauthorized { error }.response(),
                    }
                }
            },
        );
    let logout = warp::path!("ui" / "logout")
        .and(warp::post())
        .and(warp::cookie::optional::<String>(COOKIE))
        .map(move |id: Option<String>| {
            if let Some(id) = id {
                sessions.remove(&id);
            }
            let mut response = Response::new(Default::default());
            *response.status_mut() = StatusCode::NO_CONTENT;
            response.headers_mut().insert("set-cookie", cookie("", 0));
            response
        });
    login.or(logout).unify().boxed()
}

use warp::Reply as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_hold_their_user_until_removed() {
        let sessions = Sessions::default();
        let id = sessions.create(User::admin());
        assert_eq!(id.len(), 64, "32 random bytes, hex");
        assert_eq!(sessions.user(&id), Some(User::admin()));
        assert_eq!(sessions.user("not-a-session"), None);
        assert_ne!(sessions.create(User::admin()), id, "each login its own id");
        sessions.remove(&id);
        assert_eq!(sessions.user(&id), None);
    }

    #[test]
    fn sessions_are_bounded() {
        let sessions = Sessions::default();
        let first = sessions.create(User::admin());
        for _ in 0..MAX_SESSIONS {
            sessions.create(User::admin());
        }
        assert_eq!(sessions.by_id.lock().unwrap().len(), MAX_SESSIONS);
        assert_eq!(sessions.user(&first), None, "the oldest went");
    }

    #[test]
    fn logins_from_other_sites_are_refused() {
        assert!(
            same_origin(None, Some("127.0.0.1:6443")),
            "no Origin: not a browser's cross-site post"
        );
        assert!(same_origin(
            Some("https://127.0.0.1:6443"),
            Some("127.0.0.1:6443")
        ));
        assert!(!same_origin(
            Some("https://evil.example"),
            Some("127.0.0.1:6443")
        ));
        assert!(!same_origin(Some("https://127.0.0.1:6443"), None));
    }

    #[tokio::test]
    async fn a_session_cookie_authenticates_reads_only() {
        use crate::tls::testing::call;
        let sessions = Arc::new(Sessions::default());
        let id = sessions.create(User::admin());
        let filter = session_user(sessions.clone()).map(|user: User| user.name);
        let request = |method: &str, cookie: &str| {
            http::Request::builder()
                .method(method)
                .uri("/debug/skiff/kinds")
                .header("cookie", format!("{COOKIE}={cookie}"))
                .body(String::new())
                .unwrap()
        };
        let get = call(filter.clone(), request("GET", &id)).await;
        assert_eq!(get.status(), 200);
        assert_eq!(&get.body()[..], auth::ADMIN_USER.as_bytes());
        let post = call(filter.clone(), request("POST", &id)).await;
        assert_eq!(post.status(), 404, "a session never writes");
        let unknown = call(filter.clone(), request("GET", "nope")).await;
        assert_eq!(unknown.status(), 404);
        sessions.remove(&id);
        assert_eq!(
            call(filter, request("GET", &id)).await.status(),
            404,
            "logged out"
        );
    }

    #[tokio::test]
    async fn the_page_is_embedded_with_a_strict_policy() {
        use crate::tls::testing::{call, get};
        let response = call(assets(), get("/ui/", &[])).await;
        assert_eq!(response.status(), 200);
        let policy = response.headers()["content-security-policy"]
            .to_str()
            .unwrap();
        assert!(policy.contains("script-src 'self'"), "{policy}");
        let body = String::from_utf8_lossy(response.body());
        assert!(body.contains("app.js"), "{body}");
        let script = call(assets(), get("/ui/app.js", &[])).await;
        assert_eq!(
            script.headers()["content-type"],
            "text/javascript; charset=utf-8"
        );
        assert!(String::from_utf8_lossy(script.body()).contains("/debug/skiff/"));
        let bare = call(assets(), get("/ui", &[])).await;
        assert_eq!(bare.status(), 301);
        assert_eq!(bare.headers()["location"], "/ui/");
    }
}

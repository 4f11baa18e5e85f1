//! `/version` and the health endpoints `/healthz`, `/livez`, `/readyz`, all unauthenticated.
//!
//! kubectl on this machine is a dispatcher that picks the real client from `major`/`minor` of
//! `/version` (bundled 1.27 to 1.33); `gitVersion` must be semver or `kubectl version` fails.

use k8s_openapi::apimachinery::pkg::version::Info;
use warp::Filter;
use warp::Reply as _;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;
use warp::reply::Response;

/// The Kubernetes major version skiff implements.
pub const MAJOR: &str = "1";
/// The Kubernetes minor version skiff implements (the k8s-openapi feature is `v1_33`).
pub const MINOR: &str = "33";
/// The Kubernetes patch version reported in `gitVersion`.
pub const PATCH: &str = "0";

/// `gitVersion`: `v1.33.0+skiff.<crate version>`. The skiff part is semver build metadata (as
/// k3s does with `+k3s1`), not a pre-release, so version constraints such as Helm's
/// `kubeVersion: ">=1.30.0"` still match.
pub fn git_version() -> String {
    format!(
        "v{MAJOR}.{MINOR}.{PATCH}+skiff.{}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The `/version` body.
pub fn info() -> Info {
    Info {
        major: MAJOR.to_string(),
        minor: MINOR.to_string(),
        git_version: git_version(),
        git_commit: option_env!("SKIFF_GIT_COMMIT")
            .unwrap_or("unknown")
            .to_string(),
        git_tree_state: "clean".to_string(),
        build_date: option_env!("SKIFF_BUILD_DATE")
            .unwrap_or("1970-01-01T00:00:00Z")
            .to_string(),
        go_version: format!("rust (skiff {})", env!("CARGO_PKG_VERSION")),
        compiler: "rustc".to_string(),
        platform: format!("{}/{}", std::env::consts::OS, go_arch()),
        ..Default::default()
    }
}

/// The architecture named as Go names it (`amd64`, `arm64`), as clients expect in `platform`.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Why `/readyz` fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// The server is starting or shutting down.
    Server,
    /// The datastore cannot serve writes (an etcd unreachable or without quorum). The reason
    /// goes to the server's log, not to this unauthenticated endpoint (as kube-apiserver's
    /// `[-]etcd failed: reason withheld`).
    Datastore,
}

/// `GET /version`, `/healthz`, `/livez` (always `ok` while the process serves: a datastore
/// outage is not a reason to restart the server) and `/readyz` (`ok` when `ready()` says so,
/// else 500 naming the failed check, like kube-apiserver). No authentication.
pub fn routes<R>(ready: R) -> BoxedFilter<(Response,)>
where
    R: Fn() -> Result<(), NotReady> + Clone + Send + Sync + 'static,
{
    let version = warp::path!("version")
        .and(warp::get())
        .map(|| warp::reply::json(&info()).into_response());
    let healthz = warp::path!("healthz")
        .or(warp::path!("livez"))
        .unify()
        .and(warp::get())
        .map(|| plain(StatusCode::OK, "ok"));
    let readyz = warp::path!("readyz")
        .and(warp::get())
        .map(move || match ready() {
            Ok(()) => plain(StatusCode::OK, "ok"),
            Err(NotReady::Server) => plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "[-]skiff-ready failed: not ready yet\nreadyz check failed",
            ),
            Err(NotReady::Datastore) => plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "[+]skiff-ready ok\n[-]etcd failed: reason withheld\nreadyz check failed",
            ),
        });
    version.or(healthz).unify().or(readyz).unify().boxed()
}

fn plain(status: StatusCode, body: &'static str) -> Response {
    let mut response = warp::reply::with_status(body, status).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::testing::{call, get, json};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn git_version_is_semver_with_the_advertised_minor() {
        let v = git_version();
        let rest = v.strip_prefix('v').unwrap();
        let (core, build) = rest.split_once('+').unwrap();
        let parts: Vec<u64> = core.split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].to_string(), MAJOR);
        assert_eq!(parts[1].to_string(), MINOR);
        assert!(build.starts_with("skiff."));
        assert!(
            build
                .split('.')
                .all(|id| !id.is_empty()
                    && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        );
    }

    #[tokio::test]
    async fn version_body_has_major_minor_and_git_version() {
        let response = call(routes(|| Ok(())), get("/version?timeout=5s", &[])).await;
        assert_eq!(response.status(), 200);
        let body = json(&response);
        assert_eq!(body["major"], MAJOR);
        assert_eq!(body["minor"], MINOR);
        assert_eq!(body["gitVersion"], git_version());
        assert!(body["platform"].as_str().unwrap().contains('/'));
    }

    #[tokio::test]
    async fn health_endpoints_and_readiness() {
        let ready = Arc::new(AtomicBool::new(false));
        let datastore = Arc::new(AtomicBool::new(true));
        let check = {
            let (ready, datastore) = (ready.clone(), datastore.clone());
            move || {
                if !ready.load(Ordering::SeqCst) {
                    Err(NotReady::Server)
                } else if !datastore.load(Ordering::SeqCst) {
                    Err(NotReady::Datastore)
                } else {
                    Ok(())
                }
            }
        };
        let filter = routes(check);
        for path in ["/healthz", "/livez"] {
            let response = call(filter.clone(), get(path, &[])).await;
            assert_eq!(response.status(), 200, "{path}");
            assert_eq!(response.body().as_ref(), b"ok");
        }
        let not_ready = call(filter.clone(), get("/readyz", &[])).await;
        assert_eq!(not_ready.status(), 500);
        ready.store(true, Ordering::SeqCst);
        let now_ready = call(filter.clone(), get("/readyz", &[])).await;
        assert_eq!(now_ready.status(), 200);
        assert_eq!(now_ready.body().as_ref(), b"ok");
        datastore.store(false, Ordering::SeqCst);
        let no_quorum = call(filter.clone(), get("/readyz", &[])).await;
        assert_eq!(no_quorum.status(), 500);
        let body = String::from_utf8_lossy(no_quorum.body()).into_owned();
        assert!(body.contains("[-]etcd failed"), "{body}");
        // Liveness does not follow the datastore.
        let live = call(filter.clone(), get("/livez", &[])).await;
        assert_eq!(live.status(), 200);
        // Nothing else is answered here.
        let other = call(filter, get("/api", &[])).await;
        assert_eq!(other.status(), 404);
    }
}

//! The history reads over HTTP for a running server, under `/debug/skiff/` (authenticated like
//! every other API path). All are GET with query parameters; points are given as on the command
//! line (`1234`, an RFC 3339 time, `-15m`):
//!
//! ```text
//! /debug/skiff/resolve?at=P                                   -> Resolved
//! /debug/skiff/get?resource=R[&namespace=N][&name=X]&at=P     -> Objects
//! /debug/skiff/history?resource=R[&namespace=N]&name=X        -> History
//! /debug/skiff/log?[since=P][&until=P][&resource=R][&namespace=N][&limit=L][&wait=S]  -> Log
//! /debug/skiff/diff?from=P&to=P[&resource=R][&namespace=N]    -> Diff
//! ```
//!
//! and for the timeline page ([`super::timeline`]), with the filters `resource`, `namespace`,
//! `name`, `labelSelector` and `manager`:
//!
//! ```text
//! /debug/skiff/timeline?[since=P][&until=P][&buckets=N][&filters]              -> Timeline
//! /debug/skiff/changes?[since=P][&until=P][&limit=L][&continue=T][&filters]    -> Changes
//! /debug/skiff/snapshot?at=P[&namespace=N]                                     -> Snapshot
//! /debug/skiff/owned?uid=U&at=P[&namespace=N]                                 -> [Owned]
//! /debug/skiff/kinds                                                           -> [KindName]
//! ```
//!
//! `log` with `wait=S` (seconds, at most [`MAX_LOG_WAIT`]) and no `until` is a long poll: when
//! nothing in scope was committed after `since`, the answer waits for the next change in scope
//! (or the end of the wait) instead of coming back empty at once, so `skiff log --follow` streams
//! live changes as they commit without polling.
//!
//! A point before the retained history answers 410 Gone with the compacted revision and oldest
//! time in the message; an unknown resource 404; a malformed point 400.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use skiff_store::{KeyRange, WatchRequest};

use warp::Filter;
use warp::filters::BoxedFilter;

use super::{Change, Error as ReplayError, Filter as Scope, ObjectDiff, Point, Replay, Version};
use crate::error::Error;
use crate::request::Response;

/// Where the debug endpoints live.
pub const PREFIX: &str = "/debug/skiff";

/// The answer of `resolve`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resolved {
    /// The revision the point names.
    pub revision: u64,
    /// Its commit time (RFC 3339), when retained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// The answer of `get`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Objects {
    /// The revision read at.
    pub revision: u64,
    /// Its commit time (RFC 3339), when retained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The objects, in key order.
    pub items: Vec<serde_json::Value>,
}

/// The answer of `history`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct History {
    /// Every retained version, oldest first.
    pub versions: Vec<Version>,
}

/// The answer of `log`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Log {
    /// The changes, oldest first.
    pub changes: Vec<Change>,
    /// The last revision read: continue from the one after it.
    pub revision: u64,
    /// Whether the window holds more entries after `revision`.
    pub more: bool,
    /// How many changes were left out because their versions are pruned (node Leases and
    /// Events keep only their newest versions).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pruned: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The answer of `diff`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Diff {
    /// The first point's revision.
    pub from: u64,
    /// The second point's revision.
    pub to: u64,
    /// The objects that differ.
    pub objects: Vec<ObjectDiff>,
    /// The kinds left out because their history at `from` is pruned (a diff of every kind only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<super::Pruned>,
}

/// The most log entries one `log` request reads.
const MAX_LOG_ENTRIES: usize = 10_000;

/// The longest a `log` request with `wait` is held open.
pub const MAX_LOG_WAIT: Duration = Duration::from_secs(60);

impl From<ReplayError> for Error {
    fn from(e: ReplayError) -> Error {
        match e {
            ReplayError::Compacted { .. } | ReplayError::Pruned { .. } => {
                Error::Gone(e.to_string())
            }
            ReplayError::UnknownKind(_) => Error::Api(skiff_meta::status::ApiError::new(
                404,
                skiff_meta::status::Reason::NotFound,
                e.to_string(),
                None,
            )),
            ReplayError::Future { .. } | ReplayError::EmptyWindow { .. } => {
                Error::BadRequest(e.to_string())
            }
            ReplayError::Store(e) => Error::Internal(e.to_string()),
        }
    }
}

/// The query parameters of a debug request.
pub type Params = HashMap<String, String>;

fn point(params: &Params, name: &str) -> Result<Option<Point>, Error> {
    params
        .get(name)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<Point>()
                .map_err(|e| Error::BadRequest(e.to_string()))
        })
        .transpose()
}

fn scope<'a>(replay: &Replay, params: &'a Params) -> Result<Scope<'a>, Error> {
    let resource = match params.get("resource").filter(|s| !s.is_empty()) {
        Some(name) => Some(
            replay
                .resolve_kind(name)
                .ok_or_else(|| Error::from(ReplayError::UnknownKind(name.clone())))?,
        ),
        None => None,
    };
    Ok(Scope {
        resource,
        namespace: params
            .get("namespace")
            .map(String::as_str)
            .filter(|s| !s.is_empty()),
        name: None,
    })
}

/// The page's filters beyond the scope: `name`, `labelSelector`, `manager`.
fn select(params: &Params) -> Result<super::timeline::Select, Error> {
    let text = |k: &str| params.get(k).filter(|s| !s.is_empty()).cloned();
    let selector = match text("labelSelector") {
        Some(s) => Some(skiff_meta::labels::parse(&s).map_err(|e| {
            Error::BadRequest(format!("labelSelector={s:?} is not a label selector: {e}"))
        })?),
        None => None,
    };
    Ok(super::timeline::Select {
        name: text("name"),
        selector,
        manager: text("manager"),
    })
}

/// A whole-number parameter, `default` when absent; 400 when not a number.
fn number(params: &Params, name: &str, default: usize) -> Result<usize, Error> {
    match params.get(name).filter(|s| !s.is_empty()) {
        Some(s) => s
            .parse()
            .map_err(|_| Error::BadRequest(format!("{name}={s:?} is not a whole number"))),
        None => Ok(default),
    }
}

fn ok<T: serde::Serialize>(body: &T) -> Result<serde_json::Value, Error> {
    serde_json::to_value(body).map_err(|e| Error::Internal(e.to_string()))
}

/// The JSON answer of the debug request `action` (`resolve`, `get`, `history`, `log`, `diff`)
/// with `params`: what the endpoint serves, and what the CLI computes itself over a data dir.
pub async fn answer(
    replay: &Replay,
    action: &str,
    params: &Params,
) -> Result<serde_json::Value, Error> {
    let params = params.clone();
    match action {
        "resolve" => {
            let at = point(&params, "at")?.unwrap_or(Point::Now);
            let revision = replay.resolve(&at).await?;
            let time = replay.time_of(revision).await?.map(super::format_time);
            ok(&Resolved {
                revision: revision.0,
                time,
            })
        }
        "get" => {
            let scope = scope(replay, &params)?;
            let info = scope
                .resource
                .ok_or_else(|| Error::BadRequest("resource is required".into()))?;
            let at = point(&params, "at")?.unwrap_or(Point::Now);
            let revision = replay.resolve(&at).await?;
            let items = match params.get("name").filter(|s| !s.is_empty()) {
                Some(name) => replay
                    .get(info, scope.namespace, name, revision)
                    .await?
                    .into_iter()
                    .collect(),
                None => replay.list(info, scope.namespace, revision).await?,
            };
            let time = replay.time_of(revision).await?.map(super::format_time);
            ok(&Objects {
                revision: revision.0,
                time,
                items,
            })
        }
        "history" => {
            let scope = scope(replay, &params)?;
            let info = scope
                .resource
                .ok_or_else(|| Error::BadRequest("resource is required".into()))?;
            let name = params
                .get("name")
                .filter(|s| !s.is_empty())
                .ok_or_else(|| Error::BadRequest("name is required".into()))?;
            let versions = replay.history(info, scope.namespace, name).await?;
            ok(&History { versions })
        }
        "log" => {
            let scope = scope(replay, &params)?;
            // A revision is the first one shown; a time shows what was committed after it.
            let since = match point(&params, "since")? {
                Some(Point::Revision(r)) => r,
                Some(p) => replay.resolve(&p).await?.next(),
                None => replay
                    .store()
                    .status()
                    .compacted
                    .max(skiff_store::Revision(1)),
            };
            let until = match point(&params, "until")? {
                Some(p) => Some(replay.resolve(&p).await?),
                None => None,
            };
            let limit = params
                .get("limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(MAX_LOG_ENTRIES)
                .clamp(1, MAX_LOG_ENTRIES);
            let wait = match params.get("wait").filter(|s| !s.is_empty()) {
                Some(s) => Some(
                    s.parse::<f64>()
                        .ok()
                        .filter(|w| w.is_finite() && *w >= 0.0)
                        .map(|w| Duration::from_secs_f64(w).min(MAX_LOG_WAIT))
                        .ok_or_else(|| {
                            Error::BadRequest(format!("wait={s} is not a number of seconds"))
                        })?,
                ),
                None => None,
            };
            let mut page = replay.log(since, until, &scope, limit).await?;
            if let (Some(wait), None) = (wait, until) {
                page = wait_for_changes(replay, since, page, &scope, limit, wait).await?;
            }
            ok(&Log {
                changes: page.changes,
                revision: page.last.0,
                more: page.more,
                pruned: page.pruned,
            })
        }
        "diff" => {
            let scope = scope(replay, &params)?;
            let from = point(&params, "from")?
                .ok_or_else(|| Error::BadRequest("from is required".into()))?;
            let to = point(&params, "to")?.unwrap_or(Point::Now);
            let (from, to) = (replay.resolve(&from).await?, replay.resolve(&to).await?);
            let page = replay.diff(from, to, &scope).await?;
            ok(&Diff {
                from: from.0,
                to: to.0,
                objects: page.objects,
                pruned: page.pruned,
            })
        }
        "timeline" => {
            let select = select(&params)?;
            let scope = Scope {
                name: select.name.as_deref(),
                ..scope(replay, &params)?
            };
            let buckets = number(&params, "buckets", 60)?;
            let since = point(&params, "since")?;
            let until = point(&params, "until")?;
            ok(&super::timeline::timeline(
                replay,
                Default::default(),
                since,
                until,
                buckets,
                &scope,
                &select,
            )
            .await?)
        }
        "changes" => {
            let select = select(&params)?;
            let scope = Scope {
                name: select.name.as_deref(),
                ..scope(replay, &params)?
            };
            let limit = number(&params, "limit", 200)?;
            let since = point(&params, "since")?;
            let until = point(&params, "until")?;
            let resume = params
                .get("continue")
                .map(String::as_str)
                .filter(|s| !s.is_empty());
            ok(&super::timeline::changes(
                replay,
                Default::default(),
                since,
                until,
                resume,
                limit,
                &scope,
                &select,
            )
            .await?)
        }
        "snapshot" => {
            let at = point(&params, "at")?.unwrap_or(Point::Now);
            let revision = replay.resolve(&at).await?;
            let namespace = params
                .get("namespace")
                .map(String::as_str)
                .filter(|s| !s.is_empty());
            ok(&super::timeline::snapshot(replay, revision, namespace).await?)
        }
        "owned" => {
            let uid = params
                .get("uid")
                .filter(|s| !s.is_empty())
                .ok_or_else(|| Error::BadRequest("uid is required".into()))?;
            let at = point(&params, "at")?.unwrap_or(Point::Now);
            let revision = replay.resolve(&at).await?;
            let namespace = params
                .get("namespace")
                .map(String::as_str)
                .filter(|s| !s.is_empty());
            ok(&super::timeline::owned(replay, revision, namespace, uid).await?)
        }
        "kinds" => ok(&super::timeline::kind_names(replay)),
        _ => Err(Error::NoRoute),
    }
}

/// Holds an empty `log` page until a change in `scope` commits after it or `wait` passes: a
/// watch of every key from the revision after the page, each delivery followed by a read of the
/// log from there (which also moves past changes out of scope).
async fn wait_for_changes(
    replay: &Replay,
    since: skiff_store::Revision,
    mut page: super::LogPage,
    scope: &Scope<'_>,
    limit: usize,
    wait: Duration,
) -> Result<super::LogPage, Error> {
    if !page.changes.is_empty() || page.more || wait.is_zero() {
        return Ok(page);
    }
    let start = since.max(page.last.next());
    if start > replay.store().status().revision.next() {
        // A start beyond the next revision: nothing to wait for that the caller asked about yet.
        return Ok(page);
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut watch = replay
        .store()
        .watch(WatchRequest::new(KeyRange::from(Vec::new()), Some(start)))
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
    while page.changes.is_empty() && !page.more {
        match tokio::time::timeout_at(deadline, watch.next()).await {
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => return Err(Error::Internal(e.to_string())),
            Ok(None) | Err(_) => break,
        }
        let from = since.max(page.last.next());
        let next = replay.log(from, None, scope, limit).await?;
        // An empty read leaves `last` where it was when the delivery ran ahead of the log.
        page = super::LogPage {
            last: next.last.max(page.last),
            ..next
        };
    }
    Ok(page)
}

/// One request for a debug endpoint: its action and parameters.
#[derive(Debug, Clone)]
pub struct DebugRequest {
    /// `get`, `history`, `log`, ...
    pub action: String,
    /// The query.
    pub params: Params,
}

/// The debug routes' requests (without authentication or authorization: [`crate::routes`] puts
/// them behind both and answers them with [`serve`] for the user that asked).
pub fn requests() -> BoxedFilter<(DebugRequest,)> {
    warp::get()
        .and(warp::path("debug"))
        .and(warp::path("skiff"))
        .and(warp::path::param::<String>())
        .and(warp::path::end())
        .and(warp::query::<Params>())
        .map(|action: String, params: Params| DebugRequest { action, params })
        .boxed()
}

/// The answer to `request` for `user`: the data of every Secret the user may not `get` is
/// redacted ([`redact_secrets`]), so the history shows Secrets only to those RBAC lets read them.
pub async fn serve(
    replay: &Replay,
    authorizer: &crate::authz::Authorizer,
    user: &crate::auth::User,
    request: DebugRequest,
) -> Response {
    match answer(replay, &request.action, &request.params).await {
        Ok(mut body) => {
            redact_secrets(&mut body, &|namespace, name| {
                let get = crate::authz::Request::Resource {
                    verb: "get",
                    group: "",
                    resource: "secrets",
                    subresource: "",
                    namespace,
                    name,
                };
                matches!(
                    authorizer.authorize(user, &get),
                    crate::authz::Decision::Allow(_)
                )
            });
            use warp::Reply;
            warp::reply::json(&body).into_response()
        }
        Err(e) => crate::routes::error_response(&e),
    }
}

/// What replaces what a caller may not read.
pub const REDACTED: &str = "REDACTED";

/// Replaces, in every Secret (`v1` `Secret`) anywhere in `answer` that `may_read(namespace, name)`
/// refuses, its `data` and `stringData` with [`REDACTED`] and its last-applied-configuration
/// annotation (which `kubectl apply` fills with the whole object) likewise. Names, labels and the
/// rest of the metadata stay: the history still shows that the Secret changed, and when.
pub fn redact_secrets(answer: &mut serde_json::Value, may_read: &dyn Fn(&str, &str) -> bool) {
    use serde_json::Value;
    match answer {
        Value::Array(items) => {
            for item in items {
                redact_secrets(item, may_read);
            }
        }
        Value::Object(map) => {
            let is_secret = map.get("kind").and_then(Value::as_str) == Some("Secret")
                && map.get("apiVersion").and_then(Value::as_str) == Some("v1")
                && map.get("metadata").is_some_and(Value::is_object);
            if is_secret {
                let meta = &map["metadata"];
                let field = |f: &str| meta.get(f).and_then(Value::as_str).unwrap_or("");
                if !may_read(field("namespace"), field("name")) {
                    for field in ["data", "stringData"] {
                        if let Some(v) = map.get_mut(field) {
                            *v = Value::String(REDACTED.into());
                        }
                    }
                    if let Some(v) = map
                        .get_mut("metadata")
                        .and_then(|m| m.get_mut("annotations"))
                        .and_then(|a| a.get_mut("kubectl.kubernetes.io/last-applied-configuration"))
                    {
                        *v = Value::String(REDACTED.into());
                    }
                }
                return;
            }
            for value in map.values_mut() {
                redact_secrets(value, may_read);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod redact_tests {
    use serde_json::json;

    use super::{REDACTED, redact_secrets};

    #[test]
    fn secrets_a_caller_may_not_read_are_redacted_wherever_they_appear() {
        let secret = |ns: &str, name: &str| {
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": ns, "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"p\":\"aHVudGVy\"}}",
                    "note": "kept"}},
                "data": {"p": "aHVudGVy"}, "stringData": {"q": "hunter"}, "type": "Opaque",
            })
        };
        let mut answer = json!({
            "versions": [{"revision": 3, "object": secret("team", "db")}],
            "changes": [{"kind": "Secret", "before": secret("team", "db"), "after": secret("open", "tls")}],
            "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}},
                {"apiVersion": "example.com/v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"k": "v"}},
            ],
        });
        // The caller may read Secrets in `open` only.
        redact_secrets(&mut answer, &|ns, _| ns == "open");
        let text = format!("{}{}", answer["versions"], answer["changes"][0]["before"]);
        assert!(
            !text.contains("aHVudGVy") && !text.contains("hunter"),
            "{text}"
        );
        let redacted = &answer["versions"][0]["object"];
        assert_eq!(redacted["data"], REDACTED);
        assert_eq!(redacted["stringData"], REDACTED);
        assert_eq!(
            redacted["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            REDACTED
        );
        assert_eq!(redacted["metadata"]["annotations"]["note"], "kept");
        assert_eq!(redacted["type"], "Opaque");
        assert_eq!(answer["changes"][0]["before"]["data"], REDACTED);
        // What the caller may read, and what is not a core Secret, stays.
        assert_eq!(answer["changes"][0]["after"], secret("open", "tls"));
        assert_eq!(answer["items"][0]["data"]["k"], "v");
        assert_eq!(answer["items"][1]["data"]["k"], "v");
        // With every Secret readable nothing changes.
        let mut all = json!([secret("team", "db")]);
        redact_secrets(&mut all, &|_, _| true);
        assert_eq!(all[0], secret("team", "db"));
    }
}

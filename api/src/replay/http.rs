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
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use skiff_store::{KeyRange, WatchRequest};

use warp::Filter;
use warp::filters::BoxedFilter;

use super::{Change, Error as ReplayError, Filter as Scope, ObjectDiff, Point, Replay, Version};
use crate::error::Error;
use crate::request::Response;
use crate::server::ApiServer;

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
            let scope = scope(replay, &params)?;
            let select = select(&params)?;
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
            let scope = scope(replay, &params)?;
            let select = select(&params)?;
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

/// The debug routes (without authentication: [`crate::routes`] puts them behind it).
pub fn routes(api: Arc<ApiServer>) -> BoxedFilter<(Response,)> {
    let replay = Replay::with_kinds(api.registry.store().clone(), api.kinds.clone());
    warp::get()
        .and(warp::path("debug"))
        .and(warp::path("skiff"))
        .and(warp::path::param::<String>())
        .and(warp::path::end())
        .and(warp::query::<Params>())
        .then(move |action: String, params: Params| {
            let replay = replay.clone();
            async move {
                match answer(&replay, &action, &params).await {
                    Ok(body) => {
                        use warp::Reply;
                        warp::reply::json(&body).into_response()
                    }
                    Err(e) => crate::routes::error_response(&e),
                }
            }
        })
        .boxed()
}

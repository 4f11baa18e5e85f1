//! The resource handlers: every verb on every served resource and subresource, from a parsed
//! request to a response, through decoding, admission, validation and the registry.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use skiff_kinds::{Kind, ScalePaths, SelectorShape};
use skiff_meta::ResourceInfo;
use skiff_store::Revision;

use crate::admission::{Attributes, Operation};
use crate::error::{Error, Result};
use crate::registry::{
    ObjectFilter, Resume, Update, UpdateOutcome, WatchEvent, namespace_and_name, resource_version,
};
use crate::request::{Query, Request, Response, Target, parse_body};
use crate::server::ApiServer;
use crate::watch_cache::{CacheWatch, CachedEvent, Seen};
use crate::{render, selectors};
use skiff_kinds::strategy::{self, Deletion};
use skiff_kinds::typed;

fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(serde_json::to_vec(body).unwrap_or_default().into());
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Serves one resource request.
pub async fn handle(server: &Arc<ApiServer>, request: Request, target: Target) -> Result<Response> {
    let info = target.info;
    let kind = &*target.kind;
    let verb_allowed = |verb: &str| info.verbs.contains(&verb);
    if let Some(sub) = target.subresource.as_deref()
        && info.subresource(sub).is_none()
    {
        return Err(Error::NoRoute);
    }
    if info.namespaced && target.namespace.is_none() && target.name.is_some() {
        return Err(Error::NoRoute);
    }
    // A proxied request is the backend's to answer, in whatever format it speaks.
    if target.subresource.as_deref() == Some("proxy") && target.name.is_some() {
        return crate::proxy::serve(server, request, &target).await;
    }
    let format = render::Format::negotiate(&request.headers, &request.query)?;
    let ns = target.namespace.clone();
    let ns = ns.as_deref();
    match (
        &request.method,
        target.name.as_deref(),
        target.subresource.as_deref(),
    ) {
        (&Method::GET, None, None) => {
            if request.query.flag("watch") {
                if !verb_allowed("watch") {
                    return Err(Error::MethodNotAllowed);
                }
                watch(server, &request, &target.kind, ns, format).await
            } else {
                list(server, &request, kind, ns, format).await
            }
        }
        (&Method::POST, None, None) if verb_allowed("create") => {
            create(server, &request, kind, ns, format).await
        }
        (&Method::DELETE, None, None) if verb_allowed("deletecollection") => {
            delete_collection(server, &request, kind, ns, format).await
        }
        (&Method::GET, Some(name), None | Some("status")) => {
            let object = get(server, &request, kind, ns, name).await?;
            Ok(format.object(kind, StatusCode::OK, object))
        }
        (&Method::PUT, Some(name), None) => {
            update(server, &request, kind, ns, name, None, format).await
        }
        (&Method::PUT, Some(name), Some("status")) => {
            update(server, &request, kind, ns, name, Some("status"), format).await
        }
        (&Method::PATCH, Some(name), None) => {
            patch(server, &request, kind, ns, name, None, format).await
        }
        (&Method::PATCH, Some(name), Some("status")) => {
            patch(server, &request, kind, ns, name, Some("status"), format).await
        }
        (&Method::DELETE, Some(name), None) => {
            delete(server, &request, kind, ns, name, format).await
        }
        // Subresources that write part of the kind's own object (a pod's `ephemeralcontainers`).
        (&Method::GET, Some(name), Some(sub)) if kind.subresource_fields(sub).is_some() => {
            let object = get(server, &request, kind, ns, name).await?;
            Ok(format.object(kind, StatusCode::OK, object))
        }
        (&Method::PUT, Some(name), Some(sub)) if kind.subresource_fields(sub).is_some() => {
            update(server, &request, kind, ns, name, Some(sub), format).await
        }
        (&Method::PATCH, Some(name), Some(sub)) if kind.subresource_fields(sub).is_some() => {
            patch(server, &request, kind, ns, name, Some(sub), format).await
        }
        (&Method::POST, Some(name), Some("binding")) => bind(server, &request, ns, name).await,
        (&Method::POST, Some(name), Some("eviction")) if info.kind == "Pod" => {
            crate::eviction::evict(server, &request, ns, name).await
        }
        (&Method::POST, Some(name), Some("token")) if info.kind == "ServiceAccount" => {
            crate::serviceaccount::token_request(server, &request, ns, name).await
        }
        (&Method::GET, Some(name), Some("scale")) => {
            let paths = kind.scale().ok_or(Error::NoRoute)?;
            let object = get(server, &request, kind, ns, name).await?;
            Ok(json_response(StatusCode::OK, &to_scale(&paths, &object)))
        }
        (&Method::PUT | &Method::PATCH, Some(name), Some("scale")) => {
            scale(server, &request, kind, ns, name).await
        }
        (&Method::PUT, Some(name), Some("finalize")) => {
            finalize(server, &request, kind, name, format).await
        }
        (&Method::GET, Some(name), Some("log")) => server.pod_log(&request, ns, name).await,
        (
            &Method::GET | &Method::POST,
            Some(name),
            Some(sub @ ("exec" | "attach" | "portforward")),
        ) => {
            let sub = sub.to_string();
            server.pod_stream(request, ns, name, &sub).await
        }
        _ => Err(Error::MethodNotAllowed),
    }
}

async fn get(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
) -> Result<Value> {
    let info = kind.info();
    // A resourceVersion on a get means "not older than"; the log only moves forward, so the
    // current state always qualifies once the log has reached it.
    if let Some(rv) = parse_rv(request.query.get("resourceVersion"))?
        && rv > server.registry.current_revision()
    {
        return Err(Error::TooLargeResourceVersion {
            requested: rv.0,
            current: server.registry.current_revision().0,
        });
    }
    server.registry.get(info, ns, name, None).await
}

fn parse_rv(value: Option<&str>) -> Result<Option<Revision>> {
    skiff_meta::paging::parse_resource_version(value)
        .map(|rv| rv.map(Revision))
        .map_err(Error::BadRequest)
}

/// A `continue` token (see [`skiff_meta::paging`]).
fn encode_continue(revision: Revision, key: &[u8], remaining: Option<u64>) -> String {
    skiff_meta::paging::encode_continue(revision.0, key, remaining)
}

fn decode_continue(token: &str, prefix: &str) -> Result<(Revision, Resume)> {
    let token = skiff_meta::paging::decode_continue(token, prefix).ok_or_else(|| {
        Error::BadRequest("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into())
    })?;
    Ok((
        Revision(token.revision),
        Resume {
            start_after: token.start.into_bytes(),
            remaining: token.remaining,
        },
    ))
}

async fn list(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let q = &request.query;
    let filter = selectors::filter(info, q)?;
    let ns = selectors::narrow_namespace(info, ns, q);
    let limit: Option<usize> = q
        .number::<i64>("limit")?
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let rv = parse_rv(q.get("resourceVersion"))?;
    let rv_match = q.get("resourceVersionMatch").unwrap_or("");
    let (at, resume) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            if rv.is_some() {
                return Err(Error::BadRequest(
                    "specifying resource version is not allowed when using continue".into(),
                ));
            }
            let (rev, resume) = decode_continue(token, &info.storage_prefix_in(ns.as_deref()))?;
            (Some(rev), Some(resume))
        }
        None => {
            let at = match (rv_match, rv) {
                ("Exact", None) => {
                    return Err(Error::BadRequest(
                        "resourceVersionMatch \"Exact\" requires a resourceVersion other than 0"
                            .into(),
                    ));
                }
                ("Exact", Some(rev)) => Some(rev),
                ("" | "NotOlderThan", Some(rev)) => {
                    let current = server.registry.current_revision();
                    if rev > current {
                        return Err(Error::TooLargeResourceVersion {
                            requested: rev.0,
                            current: current.0,
                        });
                    }
                    None
                }
                ("" | "NotOlderThan", None) => None,
                (other, _) => {
                    return Err(Error::BadRequest(format!(
                        "unsupported resourceVersionMatch value: {other:?}"
                    )));
                }
            };
            (at, None)
        }
    };
    let page = server
        .registry
        .list(info, ns.as_deref(), at, resume, limit, filter.as_ref())
        .await
        .map_err(|e| match e {
            Error::Gone(_) if q.get("continue").is_some() => Error::Gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
            ),
            other => other,
        })?;
    let mut metadata = json!({"resourceVersion": page.revision.0.to_string()});
    if let Some(key) = &page.next_key {
        metadata["continue"] = json!(encode_continue(page.revision, key, page.remaining));
    }
    if let Some(remaining) = page.remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    Ok(format.list(kind, metadata, page.items))
}

/// One line of a watch stream.
fn watch_line(format: &render::Format, kind: &dyn Kind, event: &WatchEvent) -> Bytes {
    let info = kind.info();
    let (kind, object) = match event {
        WatchEvent::Added(o) => ("ADDED", format.watch_object(kind, o)),
        WatchEvent::Modified(o) => ("MODIFIED", format.watch_object(kind, o)),
        WatchEvent::Deleted(o) => ("DELETED", format.watch_object(kind, o)),
        WatchEvent::Progress(rev) => ("BOOKMARK", bookmark(info, *rev, false)),
    };
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark(info: &ResourceInfo, revision: Revision, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": revision.0.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": metadata})
}

/// A watch `ERROR` event: the error's `Status` as kube-apiserver writes it, inside the event.
fn error_line(error: &Error) -> Bytes {
    let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
    skiff_meta::status::write_status(&mut line, &error.to_api_error().to_status());
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

async fn watch(
    server: &Arc<ApiServer>,
    request: &Request,
    kind: &Arc<dyn Kind>,
    ns: Option<&str>,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let task_kind = kind.clone();
    let q = &request.query;
    let filter = selectors::filter(info, q)?;
    let ns = selectors::narrow_namespace(info, ns, q);
    let bookmarks = q.flag("allowWatchBookmarks");
    let send_initial = q.get("sendInitialEvents").map(|v| v == "true" || v == "1");
    let rv = parse_rv(q.get("resourceVersion"))?;
    let timeout = q
        .number::<u64>("timeoutSeconds")?
        .map(Duration::from_secs)
        .unwrap_or(server.config.default_watch_timeout);

    // Where the live watch starts, and what goes before it: with no resourceVersion (or "0"),
    // the current state as synthetic ADDED events, as Kubernetes does (kubectl drops the first
    // event of `get -w`, expecting exactly that).
    let mut initial = Vec::new();
    let start = match (rv, send_initial) {
        (Some(rev), None | Some(false)) => rev.next(),
        _ => {
            let at = rv;
            let page = server
                .registry
                .list(info, ns.as_deref(), at, None, None, filter.as_ref())
                .await?;
            initial = page.items.into_iter().map(WatchEvent::Added).collect();
            if send_initial == Some(true) && bookmarks {
                initial.push(WatchEvent::Progress(page.revision));
            }
            page.revision.next()
        }
    };
    let initial_end = if send_initial == Some(true) && bookmarks {
        initial.len().checked_sub(1)
    } else {
        None
    };

    let progress = bookmarks.then_some(server.config.bookmark_interval);
    // Bounded: a client that stops reading stalls its sender, which then closes the watch and
    // its connection ([`crate::limits`]).
    let (tx, body) = crate::limits::watch_buffer(&server.config.limits, request.connection.clone());
    // From the watch cache when its window holds `start`; otherwise from the log's history.
    let source = match server.watch_cache.watch(info, ns.as_deref(), start).await {
        Some(cached) => Source::Cache(cached, filter),
        None => Source::Store(
            server
                .registry
                .watch(info, ns.as_deref(), start, filter, progress)
                .await,
        ),
    };
    let shutdown = server.shutdown.clone();
    let format_for_task = format.clone();
    server.watchers.spawn(async move {
        let kind = task_kind;
        let format = format_for_task;
        for (i, event) in initial.iter().enumerate() {
            let line = match (event, initial_end) {
                (WatchEvent::Progress(rev), Some(end)) if i == end => {
                    let mut line = serde_json::to_vec(
                        &json!({"type": "BOOKMARK", "object": bookmark(info, *rev, true)}),
                    )
                    .unwrap_or_default();
                    line.push(b'\n');
                    Bytes::from(line)
                }
                _ => watch_line(&format, &*kind, event),
            };
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut stream = match source {
            Source::Store(Ok(stream)) => Box::pin(stream),
            Source::Store(Err(e)) => {
                let _ = tx.send(error_line(&e)).await;
                return;
            }
            Source::Cache(cached, filter) => {
                let watcher = CachedWatcher {
                    kind,
                    format,
                    filter,
                    bookmarks: progress,
                };
                tokio::select! {
                    _ = &mut deadline => {}
                    _ = shutdown.cancelled() => {}
                    _ = watcher.run(cached, &tx) => {}
                }
                return;
            }
        };
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
                next = stream.next() => match next {
                    None => return,
                    Some(Err(e)) => {
                        let _ = tx.send(error_line(&e)).await;
                        return;
                    }
                    Some(Ok(WatchEvent::Progress(_))) if !bookmarks => {}
                    Some(Ok(event)) => {
                        if tx.send(watch_line(&format, &*kind, &event)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    let mut response = warp::reply::Reply::into_response(warp::reply::stream(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}

/// Where a watch's live events come from.
enum Source<S> {
    /// The watch cache's ring, filtered per watcher.
    Cache(CacheWatch, Option<ObjectFilter>),
    /// A store watch of the watcher's own (a start before the cache's window).
    Store(Result<S>),
}

/// One API watcher served from the watch cache.
struct CachedWatcher {
    kind: Arc<dyn Kind>,
    format: render::Format,
    filter: Option<ObjectFilter>,
    /// The bookmark interval, when the client allows bookmarks.
    bookmarks: Option<Duration>,
}

impl CachedWatcher {
    /// Sends the watcher's events until the client goes away or the watcher is overrun (its
    /// stream then ends, and the client re-watches from its last resourceVersion).
    async fn run(&self, mut cached: CacheWatch, tx: &crate::limits::WatchSender) {
        let interval = self.bookmarks.unwrap_or(Duration::from_secs(3600));
        let idle = tokio::time::sleep(interval);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = &mut idle, if self.bookmarks.is_some() => {
                    let rev = cached.progress();
                    if tx.send(watch_line(&self.format, &*self.kind, &WatchEvent::Progress(rev))).await.is_err() {
                        return;
                    }
                    idle.as_mut().reset(tokio::time::Instant::now() + interval);
                }
                next = cached.next() => {
                    let Ok(events) = next else { return };
                    // The lines of one read from the ring go out as one chunk (up to
                    // WATCH_CHUNK_BYTES), not one each: a burst of binds costs the connection
                    // one write instead of one per event.
                    let mut chunk = Vec::new();
                    let mut sent = false;
                    for event in events.iter().filter(|e| cached.in_scope(e)) {
                        let Some(seen) = event.seen_by(self.filter.as_ref()) else { continue };
                        self.append_line(&mut chunk, event, seen);
                        sent = true;
                        if chunk.len() >= WATCH_CHUNK_BYTES
                            && tx.send(Bytes::from(std::mem::take(&mut chunk))).await.is_err()
                        {
                            return;
                        }
                    }
                    if !chunk.is_empty() && tx.send(Bytes::from(chunk)).await.is_err() {
                        return;
                    }
                    if sent {
                        idle.as_mut().reset(tokio::time::Instant::now() + interval);
                    }
                }
            }
        }
    }

    /// Appends the event's line: JSON and YAML clients get JSON lines whose object is encoded
    /// once per event for all of them; Tables are rendered per watcher.
    fn append_line(&self, out: &mut Vec<u8>, event: &CachedEvent, seen: Seen) {
        // The shared JSON is the stored version's; a kind served in another version renders
        // its own.
        let shared_json = !skiff_kinds::converts(&*self.kind);
        match self.format {
            render::Format::Json | render::Format::Yaml if !shared_json => out.extend_from_slice(
                &watch_line(&self.format, &*self.kind, &event.to_watch_event(seen)),
            ),
            render::Format::Table { .. } => out.extend_from_slice(&watch_line(
                &self.format,
                &*self.kind,
                &event.to_watch_event(seen),
            )),
            render::Format::Json | render::Format::Yaml => {
                let object = event.json_for(seen);
                out.reserve(object.len() + 40);
                out.extend_from_slice(b"{\"type\":\"");
                out.extend_from_slice(seen.as_str().as_bytes());
                out.extend_from_slice(b"\",\"object\":");
                out.extend_from_slice(object);
                out.extend_from_slice(b"}\n");
            }
        }
    }
}

/// A watch chunk is sent once it holds this many bytes, even if more lines are ready.
const WATCH_CHUNK_BYTES: usize = 64 * 1024;

/// Checks that a body's apiVersion and kind are the URL's (filling them in when absent).
fn check_kind(object: &mut Value, info: &ResourceInfo) -> Result<()> {
    let api_version = info.api_version();
    match object.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != api_version => {
            return Err(Error::BadRequest(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
        Some(_) => {}
        None => object["apiVersion"] = json!(api_version),
    }
    match object.get("kind").and_then(Value::as_str) {
        Some(k) if k != info.kind => {
            return Err(Error::BadRequest(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                info.kind
            )));
        }
        Some(_) => {}
        None => object["kind"] = json!(info.kind),
    }
    Ok(())
}

/// Puts the URL's namespace on the object, refusing a different one.
fn check_namespace(object: &mut Value, info: &ResourceInfo, ns: Option<&str>) -> Result<()> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    if !info.namespaced {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        return Ok(());
    }
    let Some(ns) = ns else {
        return Err(Error::BadRequest(
            "the namespace of the object must be given in the URL".into(),
        ));
    };
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(given) if !given.is_empty() && given != ns => Err(Error::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
        _ => {
            object["metadata"]["namespace"] = json!(ns);
            Ok(())
        }
    }
}

/// How the request wants unknown fields treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

fn field_validation(query: &Query) -> Result<FieldValidation> {
    match query.get("fieldValidation").unwrap_or("Warn") {
        "Ignore" | "" => Ok(FieldValidation::Ignore),
        "Warn" => Ok(FieldValidation::Warn),
        "Strict" => Ok(FieldValidation::Strict),
        other => Err(Error::BadRequest(format!(
            "fieldValidation parameter unsupported: {other:?}"
        ))),
    }
}

/// Decodes through the kind's type; returns the canonical object and the warnings to send.
fn decode_typed(
    kind: &dyn Kind,
    object: &Value,
    validation: FieldValidation,
) -> Result<(Value, Vec<String>)> {
    let info = kind.info();
    let decoded = typed::decode(kind, object).map_err(|e| {
        Error::BadRequest(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
            kind = info.kind,
            version = info.version
        ))
    })?;
    let unknown: Vec<String> = decoded
        .unknown_fields
        .iter()
        .map(|f| format!("unknown field \"{}\"", f.trim_start_matches('.')))
        .collect();
    match validation {
        FieldValidation::Strict if !unknown.is_empty() => Err(Error::BadRequest(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            unknown.join(", "),
            kind = info.kind,
            version = info.version
        ))),
        FieldValidation::Warn => Ok((decoded.object, unknown)),
        _ => Ok((decoded.object, Vec::new())),
    }
}

/// `response` with a `Warning: 299 - "..."` header per warning.
pub(crate) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!("299 - \"{}\"", warning.replace('"', "\\\""));
        if let Ok(value) = http::HeaderValue::from_str(&text) {
            response.headers_mut().append(http::header::WARNING, value);
        }
    }
    response
}

fn dry_run(query: &Query) -> Result<bool> {
    match query.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(Error::BadRequest(format!(
            "dryRun parameter unsupported: {other:?} (only All is supported)"
        ))),
    }
}

async fn create(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let mut object = parse_body(request)?;
    check_kind(&mut object, info)?;
    check_namespace(&mut object, info, ns)?;
    let (_, name) = namespace_and_name(&object);
    if name.is_empty() {
        let generate = object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if generate.is_empty() {
            return Err(Error::invalid_field(
                info,
                "",
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            ));
        }
        object["metadata"]["name"] = json!(format!("{generate}{}", strategy::random_suffix()));
    }
    let validation = field_validation(&request.query)?;
    let (mut object, warnings) = decode_typed(kind, &object, validation)?;
    server.prepare_create(kind, &mut object);
    let manager = field_manager(request, false);
    let object = skiff_kinds::patch::record_update(
        kind,
        None,
        object,
        &skiff_kinds::patch::Options::new(&manager),
    );
    admit_and_create(server, request, kind, ns, object, &warnings, format).await
}

/// The shared tail of every create (POST, and a server-side apply of a new object): admission,
/// validation, the write (or a dry run), and the 201 with the created object.
async fn admit_and_create(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    mut object: Value,
    warnings: &[String],
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let name = namespace_and_name(&object).1.to_string();
    let dry = dry_run(&request.query)?;
    server
        .admission
        .admit(
            &server.registry,
            &mut Attributes {
                operation: Operation::Create,
                info,
                subresource: None,
                namespace: ns,
                name: &name,
                object: Some(&mut object),
                old: None,
                user: &request.user,
                dry_run: dry,
                feedback: Some(&*request.feedback),
            },
        )
        .await?;
    let result = async {
        server.validate(kind, &object, None, ns, None)?;
        server
            .admission
            .validate(
                &server.registry,
                &Attributes {
                    operation: Operation::Create,
                    info,
                    subresource: None,
                    namespace: ns,
                    name: &name,
                    object: Some(&mut object),
                    old: None,
                    user: &request.user,
                    dry_run: dry,
                    feedback: Some(&*request.feedback),
                },
            )
            .await?;
        if dry {
            return Ok(None);
        }
        let lease = server.lease_for(kind).await?;
        if skiff_kinds::converts(kind) {
            let mut stored = object.clone();
            skiff_kinds::to_stored(kind, &mut stored);
            return server.registry.insert(info, &stored, lease).await.map(Some);
        }
        server.registry.insert(info, &object, lease).await.map(Some)
    }
    .await;
    // A dry run, or a create that failed, gives back what admission reserved.
    if dry || result.is_err() {
        server.admission.abandoned(info, &object).await;
    }
    if let Some(revision) = result? {
        crate::registry::set_resource_version(&mut object, revision);
    }
    Ok(with_warnings(
        format.object(kind, StatusCode::CREATED, object),
        warnings,
    ))
}

/// The body's resourceVersion, as a precondition.
fn precondition(object: &Value) -> Result<Option<Revision>> {
    match object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(|n| Some(Revision(n)))
            .map_err(|_| Error::BadRequest(format!("invalid resourceVersion {v:?}"))),
    }
}

/// The shared tail of every write to an existing object: carry over what may not change,
/// default, admit, validate; then either the object to write or, for a deleted object whose
/// finalizers are all gone, its removal.
#[allow(clippy::too_many_arguments)]
async fn admit_update(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    mut new: Value,
    current: &Value,
    record: bool,
) -> Result<Update> {
    let info = kind.info();
    match subresource {
        Some("status") => strategy::prepare_for_status_update(&mut new, current),
        Some(sub) if kind.subresource_fields(sub).is_some() => {
            let fields = kind.subresource_fields(sub).unwrap_or_default();
            strategy::prepare_for_subresource_update(kind, fields, &mut new, current)
        }
        _ => {
            strategy::prepare_for_update(kind, &mut new, current);
        }
    }
    server.default_object(kind, &mut new);
    if record {
        let manager = field_manager(request, false);
        let mut options = skiff_kinds::patch::Options::new(&manager);
        options.subresource = subresource;
        new = skiff_kinds::patch::record_update(kind, Some(current), new, &options);
    }
    server
        .admission
        .admit(
            &server.registry,
            &mut Attributes {
                operation: Operation::Update,
                info,
                subresource,
                namespace: ns,
                name,
                object: Some(&mut new),
                old: Some(current),
                user: &request.user,
                dry_run: dry_run(&request.query).unwrap_or(false),
                feedback: Some(&*request.feedback),
            },
        )
        .await?;
    let validated = match server.validate(kind, &new, Some(current), ns, subresource) {
        Ok(()) => {
            server
                .admission
                .validate(
                    &server.registry,
                    &Attributes {
                        operation: Operation::Update,
                        info,
                        subresource,
                        namespace: ns,
                        name,
                        object: Some(&mut new),
                        old: Some(current),
                        user: &request.user,
                        dry_run: dry_run(&request.query).unwrap_or(false),
                        feedback: Some(&*request.feedback),
                    },
                )
                .await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = validated {
        server.admission.abandoned(info, &new).await;
        return Err(e);
    }
    if strategy::ready_to_remove(&new) {
        return Ok(Update::Delete);
    }
    skiff_kinds::to_stored(kind, &mut new);
    Ok(Update::Write(new))
}

async fn outcome_response(
    server: &ApiServer,
    kind: &dyn Kind,
    format: &render::Format,
    outcome: UpdateOutcome,
    warnings: &[String],
) -> Response {
    let info = kind.info();
    let code = StatusCode::OK;
    let object = match outcome {
        UpdateOutcome::Deleted(object) => {
            server.admission.removed(info, &object).await;
            object
        }
        other => other.into_object(),
    };
    with_warnings(format.object(kind, code, object), warnings)
}

async fn update(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let verb_ok = subresource.is_some() || info.verbs.contains(&"update");
    if !verb_ok {
        return Err(Error::MethodNotAllowed);
    }
    let mut object = parse_body(request)?;
    check_kind(&mut object, info)?;
    check_namespace(&mut object, info, ns)?;
    let body_name = namespace_and_name(&object).1.to_string();
    if body_name.is_empty() {
        object["metadata"]["name"] = json!(name);
    } else if body_name != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let expected = precondition(&object)?;
    let validation = field_validation(&request.query)?;
    let (object, warnings) = decode_typed(kind, &object, validation)?;
    let dry = dry_run(&request.query)?;
    let outcome = server
        .registry
        .update(info, ns, name, expected, dry, |mut current| {
            skiff_kinds::to_served(kind, &mut current);
            let object = object.clone();
            async move {
                admit_update(
                    server,
                    request,
                    kind,
                    ns,
                    name,
                    subresource,
                    object,
                    &current,
                    true,
                )
                .await
            }
        })
        .await;
    let outcome = outcome?;
    Ok(outcome_response(server, kind, &format, outcome, &warnings).await)
}

async fn patch(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    if subresource.is_none() && !info.verbs.contains(&"patch") {
        return Err(Error::MethodNotAllowed);
    }
    let content_type = request
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let patch_type = skiff_kinds::patch::PatchType::from_content_type(content_type)
        .map_err(|e| Error::Api(e.into()))?;
    let validation = field_validation(&request.query)?;
    let dry = dry_run(&request.query)?;
    let force = request.query.flag("force");
    let manager = field_manager(request, patch_type == skiff_kinds::patch::PatchType::Apply);
    let mut options = skiff_kinds::patch::Options::new(&manager);
    options.force = force;
    options.subresource = subresource;
    skiff_kinds::patch::validate_options(patch_type, &options).map_err(|e| Error::Api(e.into()))?;
    let is_apply = patch_type == skiff_kinds::patch::PatchType::Apply;

    // Server-side apply of an object that does not exist yet creates it.
    if is_apply {
        match server.registry.get(info, ns, name, None).await {
            Err(Error::NotFound { .. }) => {
                return apply_create(server, request, kind, ns, name, &options, format).await;
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
    }

    let warnings = std::sync::Mutex::new(Vec::new());
    let outcome = server
        .registry
        .update(info, ns, name, None, dry, |mut current| {
            skiff_kinds::to_served(kind, &mut current);
            let warnings = &warnings;
            let options = &options;
            async move {
                let patched =
                    skiff_kinds::patch::apply(kind, &current, patch_type, &request.body, options)
                        .map_err(|e| Error::Api(e.to_api_error()))?;
                let mut patched = patched;
                if let Some(rv) = precondition(&patched)?
                    && Some(rv) != resource_version(&current)
                {
                    return Err(Error::stale(info, name));
                }
                check_kind(&mut patched, info)?;
                if namespace_and_name(&patched).1 != name {
                    return Err(Error::BadRequest(
                        "the name of the object cannot be changed by a patch".into(),
                    ));
                }
                let (patched, w) = decode_typed(kind, &patched, validation)?;
                *warnings.lock().unwrap_or_else(|e| e.into_inner()) = w;
                admit_update(
                    server,
                    request,
                    kind,
                    ns,
                    name,
                    subresource,
                    patched,
                    &current,
                    false,
                )
                .await
            }
        })
        .await;
    let outcome = outcome?;
    let warnings = warnings.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(outcome_response(server, kind, &format, outcome, &warnings).await)
}

/// Server-side apply of a new object: the applied configuration, created.
async fn apply_create(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
    options: &skiff_kinds::patch::Options<'_>,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let mut object = skiff_kinds::patch::server_side_apply(kind, None, &request.body, options)
        .map_err(|e| Error::Api(e.to_api_error()))?;
    check_kind(&mut object, info)?;
    check_namespace(&mut object, info, ns)?;
    let body_name = namespace_and_name(&object).1.to_string();
    if body_name != name {
        return Err(Error::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let validation = field_validation(&request.query)?;
    let (mut object, warnings) = decode_typed(kind, &object, validation)?;
    server.prepare_create(kind, &mut object);
    admit_and_create(server, request, kind, ns, object, &warnings, format).await
}

/// The field manager of a write: the `fieldManager` parameter, else (for everything but an
/// apply) the client's name from its User-Agent, as Kubernetes derives it.
fn field_manager(request: &Request, apply: bool) -> String {
    if let Some(manager) = request.query.get("fieldManager") {
        return manager.to_string();
    }
    if apply {
        return String::new();
    }
    request
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().take(128).collect())
        .unwrap_or_else(|| "unknown".to_string())
}

/// An options body (`DeleteOptions`) in any encoding [`parse_body`] reads: typed clients, such as
/// `kubectl drain`'s delete of a pod, send it as protobuf. An empty body is no options.
fn options_body(request: &Request, kind: &str) -> Result<Value> {
    if request.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let body = parse_body(request).map_err(|e| match e {
        Error::BadRequest(message) => Error::BadRequest(format!("invalid {kind}: {message}")),
        other => other,
    })?;
    match body.get("kind").and_then(Value::as_str) {
        Some(given) if !given.is_empty() && given != kind => Err(Error::BadRequest(format!(
            "invalid {kind}: the body is a {given}"
        ))),
        _ => Ok(body),
    }
}

/// What a delete asks for: the options of the body (a `DeleteOptions`) or the query.
pub(crate) struct DeleteRequest {
    options: strategy::DeleteOptions,
    /// `preconditions.uid`.
    uid: Option<String>,
    /// `preconditions.resourceVersion`.
    resource_version: Option<Revision>,
    /// `dryRun: [All]` in the body or `dryRun=All` in the query.
    pub(crate) dry_run: bool,
}

fn delete_options(request: &Request) -> Result<DeleteRequest> {
    let body = options_body(request, "DeleteOptions")?;
    delete_options_from(&body, &request.query)
}

/// The delete options of `body` (a `DeleteOptions`, `{}` for none) and the query `q`.
pub(crate) fn delete_options_from(
    body: &Value,
    q: &crate::request::Query,
) -> Result<DeleteRequest> {
    let grace_period = match body.get("gracePeriodSeconds").and_then(Value::as_i64) {
        Some(g) => Some(g),
        None => q.number("gracePeriodSeconds")?,
    };
    let mut propagation = body
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| q.get("propagationPolicy").map(str::to_string));
    if propagation.is_none() {
        let orphan = body
            .get("orphanDependents")
            .and_then(Value::as_bool)
            .or_else(|| q.get("orphanDependents").map(|v| v == "true"));
        if orphan == Some(true) {
            propagation = Some("Orphan".into());
        }
    }
    if let Some(p) = &propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(Error::BadRequest(format!(
            "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        )));
    }
    let mut dry = dry_run(q)?;
    for value in body
        .get("dryRun")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match value.as_str() {
            Some("All") => dry = true,
            other => {
                return Err(Error::BadRequest(format!(
                    "dryRun: Unsupported value: {:?}: supported values: \"All\"",
                    other.unwrap_or_default()
                )));
            }
        }
    }
    let uid = body
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    let resource_version = match body
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
    {
        Some(v) => Some(Revision(v.parse().map_err(|_| {
            Error::BadRequest(format!("invalid precondition resourceVersion {v:?}"))
        })?)),
        None => None,
    };
    Ok(DeleteRequest {
        options: strategy::DeleteOptions {
            grace_period,
            propagation,
        },
        uid,
        resource_version,
        dry_run: dry,
    })
}

/// Deletes one object by the rules of its kind; `Ok(None)` when there is nothing to delete.
pub(crate) async fn delete_one(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
    delete: &DeleteRequest,
    preconditions: bool,
) -> Result<(StatusCode, Value)> {
    let info = kind.info();
    let dry = delete.dry_run;
    let options = &delete.options;
    let (uid, expected) = if preconditions {
        (delete.uid.as_deref(), delete.resource_version)
    } else {
        (None, None)
    };
    loop {
        let current = server.registry.get(info, ns, name, None).await?;
        let current_rev = resource_version(&current);
        if let Some(uid) = uid
            && current.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
        {
            return Err(Error::conflict(
                info,
                name,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    current
                        .pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ),
            ));
        }
        if let Some(expected) = expected
            && Some(expected) != current_rev
        {
            return Err(Error::conflict(
                info,
                name,
                format!(
                    "Precondition failed: ResourceVersion in precondition: {expected}, ResourceVersion in object meta: {}",
                    current_rev.unwrap_or_default()
                ),
            ));
        }
        let mut attributes = Attributes {
            operation: Operation::Delete,
            info,
            subresource: None,
            namespace: ns,
            name,
            object: None,
            old: Some(&current),
            user: &request.user,
            dry_run: dry,
            feedback: Some(&*request.feedback),
        };
        server
            .admission
            .admit(&server.registry, &mut attributes)
            .await?;
        server
            .admission
            .validate(&server.registry, &attributes)
            .await?;
        let decision = strategy::deletion(info, &current, options);
        if dry {
            return Ok(match decision {
                Deletion::Now => (StatusCode::OK, current),
                Deletion::Mark(marked) => (StatusCode::ACCEPTED, marked),
                Deletion::AlreadyMarked => (StatusCode::ACCEPTED, current),
            });
        }
        match decision {
            Deletion::AlreadyMarked => return Ok((StatusCode::ACCEPTED, current)),
            Deletion::Now => match server.registry.delete(info, ns, name, current_rev).await {
                Ok(deleted) => {
                    server.admission.removed(info, &deleted).await;
                    return Ok((StatusCode::OK, deleted));
                }
                // Someone wrote in between: decide again on the new state.
                Err(Error::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            },
            Deletion::Mark(marked) => {
                let outcome = server
                    .registry
                    .update(info, ns, name, current_rev, false, |_| {
                        let marked = marked.clone();
                        async move { Ok(Update::Write(marked)) }
                    })
                    .await;
                match outcome {
                    Ok(o) => return Ok((StatusCode::ACCEPTED, o.into_object())),
                    Err(Error::Conflict { .. }) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

async fn delete(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    if !info.verbs.contains(&"delete") {
        return Err(Error::MethodNotAllowed);
    }
    let delete = delete_options(request)?;
    let (code, object) = delete_one(server, request, kind, ns, name, &delete, true).await?;
    Ok(format.object(kind, code, object))
}

async fn delete_collection(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let delete = delete_options(request)?;
    let filter = selectors::filter(info, &request.query)?;
    let ns_narrowed = selectors::narrow_namespace(info, ns, &request.query);
    let page = server
        .registry
        .list(
            info,
            ns_narrowed.as_deref(),
            None,
            None,
            None,
            filter.as_ref(),
        )
        .await?;
    let mut deleted = Vec::new();
    for object in page.items {
        let (obj_ns, name) = namespace_and_name(&object);
        let (obj_ns, name) = (obj_ns.map(str::to_string), name.to_string());
        match delete_one(
            server,
            request,
            kind,
            obj_ns.as_deref(),
            &name,
            &delete,
            false,
        )
        .await
        {
            Ok((_, object)) => deleted.push(object),
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let metadata = json!({"resourceVersion": server.registry.current_revision().0.to_string()});
    Ok(format.list(kind, metadata, deleted))
}

async fn bind(
    server: &ApiServer,
    request: &Request,
    ns: Option<&str>,
    name: &str,
) -> Result<Response> {
    let pods = &skiff_kinds::builtin::pod::INFO;
    let binding = parse_body(request)?;
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            Error::invalid_field(
                pods,
                name,
                "target.name",
                "FieldValueRequired",
                "Required value",
            )
        })?
        .to_string();
    if let Some(body_name) = binding.pointer("/metadata/name").and_then(Value::as_str)
        && !body_name.is_empty()
        && body_name != name
    {
        return Err(Error::BadRequest(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let expected_uid = binding
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string);
    server
        .registry
        .update(pods, ns, name, None, false, |pod| {
            std::future::ready(assign_node(pods, name, pod, expected_uid.as_deref(), &node))
        })
        .await?;
    let mut created = skiff_meta::status::success();
    created.code = Some(201);
    Ok(crate::routes::status_response(
        skiff_meta::status::status_body(&created),
        StatusCode::CREATED,
    ))
}

/// The binding's effect on a pod: `spec.nodeName` set once, and the PodScheduled condition.
fn assign_node(
    pods: &ResourceInfo,
    name: &str,
    mut pod: Value,
    expected_uid: Option<&str>,
    node: &str,
) -> Result<Update> {
    if let Some(uid) = expected_uid
        && pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid)
    {
        return Err(Error::conflict(
            pods,
            name,
            "the pod's UID does not match the binding's",
        ));
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(Error::conflict(
            pods,
            name,
            format!("pod {name} is being deleted, cannot be assigned to a host"),
        ));
    }
    if let Some(current) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Err(Error::conflict(
            pods,
            name,
            format!("pod {name} is already assigned to node \"{current}\""),
        ));
    }
    pod["spec"]["nodeName"] = json!(node);
    set_condition(&mut pod, "PodScheduled", "True", None, None);
    Ok(Update::Write(pod))
}

/// Sets a condition in `status.conditions`, moving `lastTransitionTime` only when the status changes.
pub fn set_condition(
    object: &mut Value,
    kind: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    if !object.get("status").is_some_and(Value::is_object) {
        object["status"] = json!({});
    }
    let conditions = object["status"]
        .as_object_mut()
        .expect("status was just made an object")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().expect("conditions is an array");
    let mut condition = json!({"type": kind, "status": status, "lastProbeTime": null});
    if let Some(r) = reason {
        condition["reason"] = json!(r);
    }
    if let Some(m) = message {
        condition["message"] = json!(m);
    }
    match list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    {
        Some(existing) => {
            let moved = existing.get("status").and_then(Value::as_str) != Some(status);
            let time = if moved {
                json!(strategy::now())
            } else {
                existing
                    .get("lastTransitionTime")
                    .cloned()
                    .unwrap_or_else(|| json!(strategy::now()))
            };
            condition["lastTransitionTime"] = time;
            *existing = condition;
        }
        None => {
            condition["lastTransitionTime"] = json!(strategy::now());
            list.push(condition);
        }
    }
}

/// The value at `path` in `object`.
fn at_path<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(object, |v, k| v.get(k))
}

/// The `autoscaling/v1` Scale of an object, read where its kind keeps replicas and selector.
fn to_scale(paths: &ScalePaths, object: &Value) -> Value {
    let meta = &object["metadata"];
    let selector = paths
        .selector
        .as_ref()
        .and_then(|p| at_path(object, p))
        .map(|s| match (paths.selector_shape, s) {
            (SelectorShape::String, Value::String(s)) => s.clone(),
            (SelectorShape::String, _) => String::new(),
            (SelectorShape::Map, s) => selectors::label_selector_string(&json!({"matchLabels": s})),
            (SelectorShape::LabelSelector, s) => selectors::label_selector_string(s),
        })
        .unwrap_or_default();
    let replicas = |p: &[String]| at_path(object, p).cloned().unwrap_or(json!(0));
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": replicas(&paths.spec_replicas)},
        "status": {
            "replicas": replicas(&paths.status_replicas),
            "selector": selector,
        },
    })
}

/// Sets the value at `path`, making the objects on the way.
fn set_path(object: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = object;
    for key in parents {
        if !at.get(key).is_some_and(Value::is_object) {
            at[key.as_str()] = json!({});
        }
        at = &mut at[key.as_str()];
    }
    at[last.as_str()] = value;
}

async fn scale(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    ns: Option<&str>,
    name: &str,
) -> Result<Response> {
    let info = kind.info();
    let paths = kind.scale().ok_or(Error::NoRoute)?;
    let paths = &paths;
    let is_put = request.method == Method::PUT;
    let outcome = server
        .registry
        .update(info, ns, name, None, false, |mut current| async move {
            skiff_kinds::to_served(kind, &mut current);
            let scale = to_scale(paths, &current);
            let new_scale = if is_put {
                // kubectl sends a PUT with no Content-Type (JSON); typed clients send protobuf.
                parse_body(request)?
            } else {
                let content_type = request
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let patch_type = skiff_kinds::patch::PatchType::from_content_type(content_type)
                    .map_err(|e| Error::Api(e.into()))?;
                // A Scale has no lists, so a strategic merge patch is a merge patch.
                match patch_type {
                    skiff_kinds::patch::PatchType::Json => {
                        skiff_kinds::patch::json_patch(&scale, &request.body)
                    }
                    skiff_kinds::patch::PatchType::Merge
                    | skiff_kinds::patch::PatchType::StrategicMerge => {
                        skiff_kinds::patch::merge_patch(&scale, &request.body)
                    }
                    skiff_kinds::patch::PatchType::Apply => {
                        return Err(Error::UnsupportedMediaType(
                            "server-side apply is not served on the scale subresource".into(),
                        ));
                    }
                }
                .map_err(|e| Error::Api(e.to_api_error()))?
            };
            let new_scale = typed::decode_scale(&new_scale).map_err(|e| {
                Error::BadRequest(format!(
                    "Scale in version \"v1\" cannot be handled as a Scale: {e}"
                ))
            })?;
            if let Some(rv) = precondition(&new_scale)?
                && Some(rv) != resource_version(&current)
            {
                return Err(Error::stale(info, name));
            }
            let replicas = new_scale
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if replicas < 0 {
                return Err(Error::invalid_field(
                    info,
                    name,
                    "spec.replicas",
                    "FieldValueInvalid",
                    format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                ));
            }
            let mut new = current.clone();
            set_path(&mut new, &paths.spec_replicas, json!(replicas));
            admit_update(server, request, kind, ns, name, None, new, &current, true).await
        })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &to_scale(paths, &outcome.into_object()),
    ))
}

async fn finalize(
    server: &ApiServer,
    request: &Request,
    kind: &dyn Kind,
    name: &str,
    format: render::Format,
) -> Result<Response> {
    let info = kind.info();
    let body = parse_body(request)?;
    let finalizers = body
        .pointer("/spec/finalizers")
        .cloned()
        .unwrap_or_else(|| json!([]));
    let outcome = server
        .registry
        .update(info, None, name, None, false, |mut ns| {
            ns["spec"]["finalizers"] = finalizers.clone();
            let decided = if strategy::ready_to_remove(&ns) {
                Update::Delete
            } else {
                Update::Write(ns)
            };
            std::future::ready(Ok(decided))
        })
        .await?;
    Ok(outcome_response(server, kind, &format, outcome, &[]).await)
}

/// Used by the server for request-scoped filters.
pub fn object_filter_matches(filter: &Option<ObjectFilter>, object: &Value) -> bool {
    filter.as_ref().is_none_or(|f| f(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_foreign_prefixes() {
        let token = encode_continue(Revision(42), b"/registry/core/pods/default/web", Some(7));
        let (rev, resume) = decode_continue(&token, "/registry/core/pods/").unwrap();
        assert_eq!(rev, Revision(42));
        assert_eq!(resume.start_after, b"/registry/core/pods/default/web");
        assert_eq!(resume.remaining, Some(7));
        assert!(decode_continue(&token, "/registry/core/secrets/").is_err());
        // A token without the count (a filtered list's) still resumes; the count is then unknown.
        let token = encode_continue(Revision(42), b"/registry/core/pods/default/web", None);
        let (_, resume) = decode_continue(&token, "/registry/core/pods/").unwrap();
        assert_eq!(resume.remaining, None);
        assert!(decode_continue("garbage!", "/registry/").is_err());
    }

    #[test]
    fn conditions_keep_transition_time_unless_status_moves() {
        let mut pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}
        ]}});
        set_condition(&mut pod, "Ready", "True", None, None);
        assert_eq!(
            pod["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        set_condition(&mut pod, "Ready", "False", Some("Down"), None);
        assert_ne!(
            pod["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        set_condition(&mut pod, "PodScheduled", "True", None, None);
        assert_eq!(pod["status"]["conditions"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn kind_and_namespace_checks() {
        let pods = &skiff_kinds::builtin::pod::INFO;
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        check_kind(&mut pod, pods).unwrap();
        check_namespace(&mut pod, pods, Some("default")).unwrap();
        assert_eq!(pod["metadata"]["namespace"], "default");
        let mut wrong = json!({"apiVersion": "apps/v1", "kind": "Pod", "metadata": {}});
        assert!(check_kind(&mut wrong, pods).is_err());
        let mut other_ns = json!({"metadata": {"name": "p", "namespace": "x"}});
        assert!(check_namespace(&mut other_ns, pods, Some("default")).is_err());
    }
}

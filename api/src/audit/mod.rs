//! The audit log, as kube-apiserver's `--audit-policy-file` and `--audit-log-*` give it: each
//! request the policy selects becomes `audit.k8s.io/v1` `Event`s (JSON lines), one per stage.
//!
//! # Layout
//! - [`policy`]: the policy file and the pure decision of a request's level (unit-tested).
//! - [`event`]: the event format.
//! - [`writer`]: the writer thread behind a bounded queue, and rotation by size.
//! - Here: [`Auditor`] (the policy and the writer) and [`Handle`], one request's record. The
//!   connection loop ([`crate::tls`]) starts a record per request when auditing is on (when it
//!   is off the only cost is that one branch), puts it in the request's extensions, and finishes
//!   it with the response: the `Audit-Id` header, the status, the response body at
//!   `RequestResponse`, and for long-running requests a `ResponseStarted` event with the headers
//!   and `ResponseComplete` when the body ends. The routes ([`crate::routes`]) fill in what
//!   only they know: the user, impersonation, verb, object, authorization decision and request
//!   body.
//!
//! When the queue is full a request waits for room before it answers (kube-apiserver's
//! "blocking" mode, with a queue in front of the disk), rather than dropping the event as its
//! "batch" mode does: an audit log that silently loses events under load is one nobody can rely
//! on, and the queue (10,000 events) absorbs every burst a disk that keeps up at all can take.

pub mod event;
pub mod policy;
pub mod writer;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::auth::User;
use crate::request::{Query, Target};
use event::{Event, ObjectReference, UserInfo};
use policy::{Attributes, Decision, Level, Policy, ResourceAttributes, Stage};
use tokio::sync::mpsc;
use writer::{Message, Rotation, Sink, Writer};

/// Events queued for the writer before requests wait (kube-apiserver's batch buffer size).
pub const QUEUE_CAPACITY: usize = 10_000;

/// The response header carrying a request's audit id.
pub const AUDIT_ID_HEADER: &str = "audit-id";

/// Why auditing could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The policy file could not be read.
    #[error("cannot read the audit policy file {path}")]
    ReadPolicy {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The policy file is not a valid policy.
    #[error("invalid audit policy file {path}")]
    InvalidPolicy {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: policy::PolicyError,
    },
    /// A policy without a log: the events would go nowhere.
    #[error("--audit-policy-file is set but --audit-log-path is not: give a file, or - for stdout")]
    NoLogPath,
    /// The log could not be opened for appending.
    #[error("cannot open the audit log {path} for writing")]
    OpenLog {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// The audit flags.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--audit-policy-file`: none means no auditing.
    pub policy_file: Option<PathBuf>,
    /// `--audit-log-path` (`-` = stdout).
    pub log_path: Option<PathBuf>,
    /// `--audit-log-maxsize`, `--audit-log-maxbackup`, `--audit-log-maxage`.
    pub rotation: Rotation,
}

impl Options {
    /// Reads the policy and opens the log; `None` when no policy is given.
    pub fn start(&self) -> Result<Option<Arc<Auditor>>, Error> {
        let Some(policy_file) = &self.policy_file else {
            if let Some(path) = &self.log_path {
                tracing::warn!(path = %path.display(), "--audit-log-path without --audit-policy-file: nothing is audited");
            }
            return Ok(None);
        };
        let text = std::fs::read_to_string(policy_file).map_err(|source| Error::ReadPolicy {
            path: policy_file.clone(),
            source,
        })?;
        let policy = Policy::parse(&text).map_err(|source| Error::InvalidPolicy {
            path: policy_file.clone(),
            source,
        })?;
        let path = self.log_path.as_ref().ok_or(Error::NoLogPath)?;
        let sink = Sink::open(path, self.rotation.clone()).map_err(|source| Error::OpenLog {
            path: path.clone(),
            source,
        })?;
        tracing::info!(policy = %policy_file.display(), log = %path.display(), "audit log on");
        Ok(Some(Auditor::new(policy, sink)))
    }
}

/// The policy and the log: starts and finishes each request's record.
pub struct Auditor {
    policy: Policy,
    writer: Writer,
    /// The kinds served, to name the resource of a request refused before routing (a 401).
    kinds: OnceLock<Arc<skiff_kinds::Kinds>>,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor").finish_non_exhaustive()
    }
}

impl Auditor {
    /// An auditor writing what `policy` selects to `sink`.
    pub fn new(policy: Policy, sink: Sink) -> Arc<Auditor> {
        Arc::new(Auditor {
            policy,
            writer: Writer::start(sink, QUEUE_CAPACITY),
            kinds: OnceLock::new(),
        })
    }

    /// Tells the auditor the kinds served (the routes do, once).
    pub fn set_kinds(&self, kinds: Arc<skiff_kinds::Kinds>) {
        let _ = self.kinds.set(kinds);
    }

    /// Waits until every event of requests finished so far is on disk (at shutdown).
    pub async fn flush(&self) {
        self.writer.flush().await;
    }

    async fn emit(&self, event: Event) {
        let _ = self.writer.tx.send(Message::Event(Box::new(event))).await;
    }

    /// Starts the record of `request`, from `peer`: its id, its arrival, what its headers say.
    pub fn begin<B>(
        self: &Arc<Self>,
        request: &mut http::Request<B>,
        peer: Option<SocketAddr>,
    ) -> Handle {
        let headers = request.headers();
        let handle = Handle(Arc::new(Record {
            auditor: self.clone(),
            audit_id: event::new_audit_id(),
            request_uri: request.uri().path_and_query().map_or_else(
                || request.uri().path().to_string(),
                |pq| pq.as_str().to_string(),
            ),
            method: request.method().clone(),
            source_ips: source_ips(headers, peer),
            user_agent: headers
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            received: jiff::Timestamp::now(),
            state: Mutex::new(State::default()),
        }));
        request.extensions_mut().insert(handle.clone());
        handle
    }
}

/// One request's record, shared by the connection loop and the routes through the request's
/// extensions.
#[derive(Clone)]
pub struct Handle(Arc<Record>);

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Handle").field(&self.0.audit_id).finish()
    }
}

struct Record {
    auditor: Arc<Auditor>,
    audit_id: String,
    request_uri: String,
    method: Method,
    source_ips: Vec<String>,
    user_agent: Option<String>,
    received: jiff::Timestamp,
    /// Written by the routes and the connection loop in turn; never held across `.await`.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The policy's answer, once the user and the request's attributes are known.
    decision: Option<Decision>,
    verb: String,
    user: UserInfo,
    impersonated: Option<UserInfo>,
    object_ref: Option<ObjectReference>,
    long_running: bool,
    annotations: BTreeMap<String, String>,
    request_object: Option<Value>,
    response_status: Option<Value>,
    response_object: Option<Value>,
}

/// Subresources served as long-running requests (kube-apiserver's list).
fn long_running(verb: &str, target: Option<&Target>) -> bool {
    verb == "watch"
        || target.is_some_and(|t| {
            t.proxy_path.is_some()
                || matches!(
                    t.subresource.as_deref(),
                    Some("exec" | "attach" | "portforward" | "proxy" | "log")
                )
        })
}

impl Handle {
    /// The request's audit id.
    pub fn id(&self) -> &str {
        &self.0.audit_id
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The level the policy gave this request (`None` until [`Handle::attributes`]).
    pub fn level(&self) -> Level {
        self.state()
            .decision
            .as_ref()
            .map_or(Level::None, |d| d.level)
    }

    /// Who asks (the authenticated user, before any impersonation) and what: decides the level
    /// and writes the `RequestReceived` event.
    pub async fn attributes(&self, user: &User, verb: &str, target: Option<&Target>, path: &str) {
        let event = {
            let mut state = self.state();
            self.set_attributes(&mut state, Some(user), verb, target, path);
            self.event_if(&state, Stage::RequestReceived)
        };
        if let Some(event) = event {
            self.0.auditor.emit(event).await;
        }
    }

    fn set_attributes(
        &self,
        state: &mut State,
        user: Option<&User>,
        verb: &str,
        target: Option<&Target>,
        path: &str,
    ) {
        let attributes = Attributes {
            user: user.map(|u| u.name.as_str()),
            groups: user.map_or(&[], |u| u.groups.as_slice()),
            verb,
            resource: target.map(|t| ResourceAttributes {
                group: t.info.group,
                resource: t.info.plural,
                subresource: t.subresource.as_deref().unwrap_or_default(),
                namespace: t.namespace.as_deref().unwrap_or_default(),
                name: t.name.as_deref().unwrap_or_default(),
            }),
            path,
        };
        state.decision = Some(self.0.auditor.policy.evaluate(&attributes));
        state.verb = verb.to_string();
        state.user = user.map(UserInfo::from).unwrap_or_default();
        state.long_running = long_running(verb, target);
        state.object_ref = target.map(|t| ObjectReference {
            resource: t.info.plural.to_string(),
            namespace: t.namespace.clone().unwrap_or_default(),
            name: t.name.clone().unwrap_or_default(),
            api_group: t.info.group.to_string(),
            api_version: t.info.version.to_string(),
            resource_version: String::new(),
            subresource: t.subresource.clone().unwrap_or_default(),
        });
    }

    /// The user the request acts as, when it impersonates one.
    pub fn impersonated(&self, user: &User) {
        self.state().impersonated = Some(UserInfo::from(user));
    }

    /// The authorizer's decision, as the `authorization.k8s.io/` annotations.
    pub fn authorized(&self, allowed: bool, reason: &str) {
        let mut state = self.state();
        let decision = if allowed { "allow" } else { "forbid" };
        state
            .annotations
            .insert("authorization.k8s.io/decision".into(), decision.into());
        state
            .annotations
            .insert("authorization.k8s.io/reason".into(), reason.to_string());
    }

    /// Annotations admission left for the request's event (webhooks' and policies').
    pub fn annotate(&self, annotations: BTreeMap<String, String>) {
        if !annotations.is_empty() {
            self.state().annotations.extend(annotations);
        }
    }

    /// The request's body, kept at `Request` and above. At any level that writes events it names
    /// the object reference where the URL did not (a create's), as kube-apiserver does.
    pub fn request_object(&self, object: Value) {
        let mut state = self.state();
        if let Some(object_ref) = state.object_ref.as_mut() {
            let metadata = &object["metadata"];
            for (field, value) in [
                (&mut object_ref.name, &metadata["name"]),
                (&mut object_ref.namespace, &metadata["namespace"]),
            ] {
                if field.is_empty()
                    && let Some(value) = value.as_str()
                {
                    *field = value.to_string();
                }
            }
        }
        if state
            .decision
            .as_ref()
            .is_some_and(|d| d.level >= Level::Request)
        {
            state.request_object = Some(object);
        }
    }

    /// The event for `stage` if the policy writes it.
    fn event_if(&self, state: &State, stage: Stage) -> Option<Event> {
        let decision = state.decision.as_ref()?;
        if !decision.writes(stage) {
            return None;
        }
        let level = decision.level;
        let strip = |value: &Option<Value>| {
            value.clone().map(|mut v| {
                if decision.omit_managed_fields {
                    event::strip_managed_fields(&mut v);
                }
                v
            })
        };
        let done = stage != Stage::RequestReceived;
        Some(Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level,
            audit_id: self.0.audit_id.clone(),
            stage,
            request_uri: self.0.request_uri.clone(),
            verb: state.verb.clone(),
            user: state.user.clone(),
            impersonated_user: state.impersonated.clone(),
            source_ips: self.0.source_ips.clone(),
            user_agent: self.0.user_agent.clone(),
            object_ref: state.object_ref.clone(),
            response_status: state.response_status.clone().filter(|_| done),
            request_object: if level >= Level::Request && done {
                strip(&state.request_object)
            } else {
                None
            },
            response_object: if level >= Level::RequestResponse && stage == Stage::ResponseComplete
            {
                strip(&state.response_object)
            } else {
                None
            },
            request_received_timestamp: event::micro_time(self.0.received),
            stage_timestamp: event::micro_time(jiff::Timestamp::now()),
            annotations: state.annotations.clone(),
        })
    }

    /// A request no route attributed (a 401, or a public path such as `/healthz`): attributed
    /// here from its URL, to no user for a 401 and to the anonymous user otherwise.
    fn attribute_unrouted(&self, state: &mut State, status: StatusCode) {
        let path = self
            .0
            .request_uri
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string();
        let query = Query::parse(self.0.request_uri.split_once('?').map_or("", |(_, q)| q));
        let target = self
            .0
            .auditor
            .kinds
            .get()
            .and_then(|kinds| crate::request::parse_path(&kinds.snapshot(), &path))
            .and_then(Result::ok);
        let verb = match &target {
            Some(t) => crate::authz::resource_verb(&self.0.method, t, &query).to_string(),
            None => crate::authz::path_verb(&self.0.method),
        };
        let anonymous = User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Default::default()
        };
        let user = (status != StatusCode::UNAUTHORIZED).then_some(&anonymous);
        self.set_attributes(state, user, &verb, target.as_ref(), &path);
    }
}

/// The client's addresses: `X-Forwarded-For`'s, `X-Real-Ip`, then the peer's, each once.
fn source_ips(headers: &HeaderMap, peer: Option<SocketAddr>) -> Vec<String> {
    let mut ips: Vec<String> = Vec::new();
    let mut add = |ip: &str| {
        let ip = ip.trim();
        if ip.parse::<std::net::IpAddr>().is_ok() && !ips.iter().any(|seen| seen == ip) {
            ips.push(ip.to_string());
        }
    };
    for value in headers.get_all("x-forwarded-for") {
        if let Ok(value) = value.to_str() {
            value.split(',').for_each(&mut add);
        }
    }
    if let Some(real) = headers.get("x-real-ip").and_then(|v| v.to_str().ok()) {
        add(real);
    }
    if let Some(peer) = peer {
        add(&peer.ip().to_string());
    }
    ips
}

/// A response body that writes the `ResponseComplete` event of a long-running request when it
/// ends (or is dropped, when the client goes away).
pub struct AuditedBody {
    inner: http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>,
    complete: Option<Handle>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl AuditedBody {
    fn new<B>(body: B, complete: Option<Handle>) -> AuditedBody
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        AuditedBody {
            inner: body.map_err(Into::into).boxed_unsync(),
            complete,
        }
    }

    fn end(&mut self) {
        if let Some(handle) = self.complete.take() {
            let event = {
                let state = handle.state();
                handle.event_if(&state, Stage::ResponseComplete)
            };
            if let Some(event) = event {
                // Queued at once when there is room (so a flush at shutdown, after the
                // connections closed, finds it); otherwise a task waits for room.
                let auditor = handle.0.auditor.clone();
                if let Err(mpsc::error::TrySendError::Full(message)) =
                    auditor.writer.tx.try_send(Message::Event(Box::new(event)))
                    && let Ok(runtime) = tokio::runtime::Handle::try_current()
                {
                    runtime.spawn(async move {
                        let _ = auditor.writer.tx.send(message).await;
                    });
                }
            }
        }
    }
}

impl Drop for AuditedBody {
    fn drop(&mut self) {
        self.end();
    }
}

impl hyper::body::Body for AuditedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None | Some(Err(_)))) {
            self.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Waits for the response to an audited request and finishes its record: the `Audit-Id`
/// header, the outcome, the events. A panic of the handler is written as a `Panic` event and
/// goes on unwinding.
pub async fn finish<F, B, E>(handle: Handle, response: F) -> Result<http::Response<AuditedBody>, E>
where
    F: std::future::Future<Output = Result<http::Response<B>, E>>,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    use futures::FutureExt as _;
    let response = match std::panic::AssertUnwindSafe(response).catch_unwind().await {
        Ok(response) => response?,
        Err(panic) => {
            let event = {
                let mut state = handle.state();
                if state.decision.is_none() {
                    handle.attribute_unrouted(&mut state, StatusCode::INTERNAL_SERVER_ERROR);
                }
                state.response_status = Some(json!({
                    "metadata": {}, "status": "Failure", "reason": "InternalError",
                    "message": "APIServer panic'd", "code": 500
                }));
                handle.event_if(&state, Stage::Panic)
            };
            if let Some(event) = event {
                handle.0.auditor.emit(event).await;
            }
            std::panic::resume_unwind(panic);
        }
    };
    let (mut parts, body) = response.into_parts();
    if let Ok(value) = http::HeaderValue::from_str(handle.id()) {
        parts.headers.insert(AUDIT_ID_HEADER, value);
    }
    let status = parts.status;
    let (level, unauthenticated, long_running) = {
        let mut state = handle.state();
        let unauthenticated = state.decision.is_none() && status == StatusCode::UNAUTHORIZED;
        if state.decision.is_none() {
            handle.attribute_unrouted(&mut state, status);
        }
        let ok = status.is_success() || status == StatusCode::SWITCHING_PROTOCOLS;
        (
            state.decision.as_ref().map_or(Level::None, |d| d.level),
            unauthenticated,
            state.long_running && ok,
        )
    };
    if level == Level::None {
        return Ok(http::Response::from_parts(
            parts,
            AuditedBody::new(body, None),
        ));
    }
    if long_running {
        let event = {
            let mut state = handle.state();
            state.response_status = Some(json!({"metadata": {}, "code": status.as_u16()}));
            handle.event_if(&state, Stage::ResponseStarted)
        };
        if let Some(event) = event {
            handle.0.auditor.emit(event).await;
        }
        return Ok(http::Response::from_parts(
            parts,
            AuditedBody::new(body, Some(handle)),
        ));
    }
    // A whole body: read it when the event needs it (a failure's Status, the response object).
    let failed = !status.is_success();
    let body = if failed || level == Level::RequestResponse {
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) => {
                let error: BoxError = error.into();
                tracing::debug!(%error, "reading a response body for the audit log");
                Bytes::new()
            }
        };
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let decoded = decode(content_type, &bytes);
        let mut state = handle.state();
        state.response_status = Some(response_status(status, decoded.as_ref()));
        if level == Level::RequestResponse {
            if let Some(rv) = decoded
                .as_ref()
                .and_then(|v| v["metadata"]["resourceVersion"].as_str())
                && let Some(object_ref) = state.object_ref.as_mut()
                && !object_ref.name.is_empty()
            {
                object_ref.resource_version = rv.to_string();
            }
            state.response_object = decoded;
        }
        AuditedBody::new(http_body_util::Full::new(bytes), None)
    } else {
        handle.state().response_status = Some(json!({"metadata": {}, "code": status.as_u16()}));
        AuditedBody::new(body, None)
    };
    // A request that failed authentication gets the one event kube-apiserver writes for it.
    let stage = if unauthenticated {
        Stage::ResponseStarted
    } else {
        Stage::ResponseComplete
    };
    let event = {
        let state = handle.state();
        handle.event_if(&state, stage)
    };
    if let Some(event) = event {
        handle.0.auditor.emit(event).await;
    }
    Ok(http::Response::from_parts(parts, body))
}

/// A response body as JSON, if it is JSON or Kubernetes protobuf.
fn decode(content_type: &str, bytes: &[u8]) -> Option<Value> {
    if skiff_kinds::protobuf::is_content_type(content_type) {
        skiff_kinds::protobuf::decode(bytes).ok()
    } else if content_type.starts_with("application/json") || content_type.is_empty() {
        serde_json::from_slice(bytes).ok()
    } else {
        None
    }
}

/// `responseStatus`: the code, and for a failure the Status' status, reason and message.
fn response_status(status: StatusCode, body: Option<&Value>) -> Value {
    let mut out = json!({"metadata": {}, "code": status.as_u16()});
    if !status.is_success()
        && let Some(body) = body.filter(|b| b["kind"] == "Status")
    {
        for field in ["status", "message", "reason", "details"] {
            if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
                out[field] = value.clone();
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_event() -> Event {
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "id".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api".into(),
            verb: "get".into(),
            user: UserInfo::default(),
            impersonated_user: None,
            source_ips: vec![],
            user_agent: None,
            object_ref: None,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: String::new(),
            stage_timestamp: String::new(),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn source_ips_list_forwarded_addresses_then_the_peer() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "10.0.0.1, 10.0.0.2".parse().unwrap());
        headers.insert("x-real-ip", "10.0.0.2".parse().unwrap());
        let peer: SocketAddr = "127.0.0.1:5555".parse().unwrap();
        assert_eq!(
            source_ips(&headers, Some(peer)),
            ["10.0.0.1", "10.0.0.2", "127.0.0.1"]
        );
        assert_eq!(source_ips(&HeaderMap::new(), Some(peer)), ["127.0.0.1"]);
    }

    #[test]
    fn failures_carry_the_status_reason_and_message() {
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "denied", "reason": "Forbidden", "code": 403});
        assert_eq!(
            response_status(StatusCode::FORBIDDEN, Some(&body)),
            json!({"metadata": {}, "code": 403, "status": "Failure", "message": "denied", "reason": "Forbidden"})
        );
        assert_eq!(
            response_status(StatusCode::OK, Some(&json!({"kind": "Pod"}))),
            json!({"metadata": {}, "code": 200})
        );
    }

    #[test]
    fn options_refuse_what_cannot_work() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n",
        )
        .unwrap();
        let log = dir.path().join("audit.log");
        // No policy: no auditing, whatever the path.
        let none = Options {
            log_path: Some(log.clone()),
            ..Default::default()
        };
        assert!(none.start().unwrap().is_none());
        let missing = Options {
            policy_file: Some(dir.path().join("nope.yaml")),
            log_path: Some(log.clone()),
            ..Default::default()
        };
        assert!(matches!(missing.start(), Err(Error::ReadPolicy { .. })));
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, "kind: Policy\n").unwrap();
        let invalid = Options {
            policy_file: Some(bad),
            log_path: Some(log.clone()),
            ..Default::default()
        };
        assert!(matches!(invalid.start(), Err(Error::InvalidPolicy { .. })));
        let no_log = Options {
            policy_file: Some(policy.clone()),
            ..Default::default()
        };
        assert!(matches!(no_log.start(), Err(Error::NoLogPath)));
        let unwritable = Options {
            policy_file: Some(policy.clone()),
            log_path: Some(policy.join("audit.log")),
            ..Default::default()
        };
        let error = unwritable.start().unwrap_err();
        assert!(matches!(error, Error::OpenLog { .. }), "{error}");
        assert!(error.to_string().contains("cannot open the audit log"));
        let ok = Options {
            policy_file: Some(policy),
            log_path: Some(log.clone()),
            ..Default::default()
        };
        assert!(ok.start().unwrap().is_some());
        assert!(log.exists());
    }
}

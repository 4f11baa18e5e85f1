//! `metav1.Status` error bodies with Kubernetes' exact reasons, codes and message wording, the
//! field-level [`FieldError`] of validation, and the typed [`ApiError`] both sides speak.
//!
//! The server builds an [`ApiError`] with one of the constructors (`ApiError::not_found`, ...),
//! and turns it into the body with [`ApiError::to_status`]; the client reads a response body back
//! with [`ApiError::from_response`]. Messages follow `k8s.io/apimachinery/pkg/api/errors` word for
//! word, because kubectl prints them verbatim and scripts match on them.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

use crate::resources::ResourceInfo;

/// The message Kubernetes puts after `Operation cannot be fulfilled on ...:` when an update's
/// `resourceVersion` is stale.
pub const OPTIMISTIC_LOCK_ERROR_MSG: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// A resource qualified by its group (`pods`, `deployments.apps`), as error messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupResource<'a> {
    /// The API group; empty for the core group.
    pub group: &'a str,
    /// The plural resource name.
    pub resource: &'a str,
}

impl<'a> GroupResource<'a> {
    /// A resource in `group`.
    pub const fn new(group: &'a str, resource: &'a str) -> Self {
        GroupResource { group, resource }
    }

    /// A resource of the core group.
    pub const fn core(resource: &'a str) -> Self {
        GroupResource {
            group: "",
            resource,
        }
    }

    /// Whether both parts are empty (messages then leave the resource out).
    pub fn is_empty(&self) -> bool {
        self.group.is_empty() && self.resource.is_empty()
    }
}

impl fmt::Display for GroupResource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

impl<'a> From<&'a ResourceInfo> for GroupResource<'a> {
    fn from(r: &'a ResourceInfo) -> Self {
        GroupResource::new(r.group, r.plural)
    }
}

/// A kind qualified by its group (`Pod`, `Deployment.apps`), as `Invalid` messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupKind<'a> {
    /// The API group; empty for the core group.
    pub group: &'a str,
    /// The kind.
    pub kind: &'a str,
}

impl<'a> GroupKind<'a> {
    /// A kind in `group`.
    pub const fn new(group: &'a str, kind: &'a str) -> Self {
        GroupKind { group, kind }
    }
}

impl fmt::Display for GroupKind<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

impl<'a> From<&'a ResourceInfo> for GroupKind<'a> {
    fn from(r: &'a ResourceInfo) -> Self {
        GroupKind::new(r.group, r.kind)
    }
}

/// `metav1.StatusReason`: why a request failed, machine readable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No reason given (`""`).
    Unknown,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 404.
    NotFound,
    /// 409 on create.
    AlreadyExists,
    /// 409 on update (stale resourceVersion, apply conflicts).
    Conflict,
    /// 410 (deprecated in favour of `Expired`).
    Gone,
    /// 422.
    Invalid,
    /// 500, retry later.
    ServerTimeout,
    /// 500, the stored object could not be read.
    StoreReadError,
    /// 504.
    Timeout,
    /// 429.
    TooManyRequests,
    /// 400.
    BadRequest,
    /// 405.
    MethodNotAllowed,
    /// 406.
    NotAcceptable,
    /// 413.
    RequestEntityTooLarge,
    /// 415.
    UnsupportedMediaType,
    /// 500.
    InternalError,
    /// 410: the requested resourceVersion is compacted away.
    Expired,
    /// 503.
    ServiceUnavailable,
    /// A reason this crate does not know (kept verbatim).
    Other(String),
}

impl Reason {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Reason::Unknown => "",
            Reason::Unauthorized => "Unauthorized",
            Reason::Forbidden => "Forbidden",
            Reason::NotFound => "NotFound",
            Reason::AlreadyExists => "AlreadyExists",
            Reason::Conflict => "Conflict",
            Reason::Gone => "Gone",
            Reason::Invalid => "Invalid",
            Reason::ServerTimeout => "ServerTimeout",
            Reason::StoreReadError => "StorageReadError",
            Reason::Timeout => "Timeout",
            Reason::TooManyRequests => "TooManyRequests",
            Reason::BadRequest => "BadRequest",
            Reason::MethodNotAllowed => "MethodNotAllowed",
            Reason::NotAcceptable => "NotAcceptable",
            Reason::RequestEntityTooLarge => "RequestEntityTooLarge",
            Reason::UnsupportedMediaType => "UnsupportedMediaType",
            Reason::InternalError => "InternalError",
            Reason::Expired => "Expired",
            Reason::ServiceUnavailable => "ServiceUnavailable",
            Reason::Other(s) => s,
        }
    }

    /// Parses the wire spelling; unknown spellings are kept in [`Reason::Other`].
    pub fn parse(s: &str) -> Reason {
        match s {
            "" => Reason::Unknown,
            "Unauthorized" => Reason::Unauthorized,
            "Forbidden" => Reason::Forbidden,
            "NotFound" => Reason::NotFound,
            "AlreadyExists" => Reason::AlreadyExists,
            "Conflict" => Reason::Conflict,
            "Gone" => Reason::Gone,
            "Invalid" => Reason::Invalid,
            "ServerTimeout" => Reason::ServerTimeout,
            "StorageReadError" => Reason::StoreReadError,
            "Timeout" => Reason::Timeout,
            "TooManyRequests" => Reason::TooManyRequests,
            "BadRequest" => Reason::BadRequest,
            "MethodNotAllowed" => Reason::MethodNotAllowed,
            "NotAcceptable" => Reason::NotAcceptable,
            "RequestEntityTooLarge" => Reason::RequestEntityTooLarge,
            "UnsupportedMediaType" => Reason::UnsupportedMediaType,
            "InternalError" => Reason::InternalError,
            "Expired" => Reason::Expired,
            "ServiceUnavailable" => Reason::ServiceUnavailable,
            other => Reason::Other(other.to_string()),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `field.ErrorType`: the kind of a field-level validation error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorType {
    /// `FieldValueNotFound`.
    NotFound,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueNotSupported`.
    NotSupported,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueTooLong`.
    TooLong,
    /// `FieldValueTooMany`.
    TooMany,
    /// `FieldValueTooShort`.
    TooShort,
    /// `InternalError`.
    Internal,
    /// `FieldValueTypeInvalid`.
    TypeInvalid,
}

impl FieldErrorType {
    /// The cause type on the wire (`details.causes[].reason`).
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "FieldValueNotFound",
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Duplicate => "FieldValueDuplicate",
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::NotSupported => "FieldValueNotSupported",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::TooLong => "FieldValueTooLong",
            FieldErrorType::TooMany => "FieldValueTooMany",
            FieldErrorType::TooShort => "FieldValueTooShort",
            FieldErrorType::Internal => "InternalError",
            FieldErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human wording (`Invalid value`, `Required value`, ...).
    pub fn description(self) -> &'static str {
        match self {
            FieldErrorType::NotFound => "Not found",
            FieldErrorType::Required => "Required value",
            FieldErrorType::Duplicate => "Duplicate value",
            FieldErrorType::Invalid => "Invalid value",
            FieldErrorType::NotSupported => "Unsupported value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::TooLong => "Too long",
            FieldErrorType::TooMany => "Too many",
            FieldErrorType::TooShort => "Too short",
            FieldErrorType::Internal => "Internal error",
            FieldErrorType::TypeInvalid => "Invalid value",
        }
    }

    /// Whether messages of this kind never show the bad value.
    fn hides_value(self) -> bool {
        matches!(
            self,
            FieldErrorType::Required
                | FieldErrorType::Forbidden
                | FieldErrorType::TooLong
                | FieldErrorType::Internal
        )
    }
}

impl fmt::Display for FieldErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// A path to a field (`spec.containers[0].image`, `metadata.labels[app]`), as `field.Path`
/// prints it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path starting at the field `name` (which may already hold dots).
    pub fn new(name: &str) -> Self {
        FieldPath(name.to_string())
    }

    /// The path of a child field.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            FieldPath(name.to_string())
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }

    /// The path of a list item.
    pub fn index(&self, i: usize) -> Self {
        FieldPath(format!("{}[{i}]", self.0))
    }

    /// The path of a map entry.
    pub fn key(&self, k: &str) -> Self {
        FieldPath(format!("{}[{k}]", self.0))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<FieldPath> for String {
    fn from(p: FieldPath) -> String {
        p.0
    }
}

impl From<&FieldPath> for String {
    fn from(p: &FieldPath) -> String {
        p.0.clone()
    }
}

impl From<&String> for FieldPath {
    fn from(s: &String) -> Self {
        FieldPath::new(s)
    }
}

impl From<&str> for FieldPath {
    fn from(s: &str) -> Self {
        FieldPath::new(s)
    }
}

impl From<String> for FieldPath {
    fn from(s: String) -> Self {
        FieldPath(s)
    }
}

impl From<&FieldPath> for FieldPath {
    fn from(p: &FieldPath) -> Self {
        p.clone()
    }
}

/// One field-level validation error (`field.Error`); Display gives Kubernetes' wording, e.g.
/// `metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The path of the field, as printed.
    pub field: String,
    /// What is wrong with it.
    pub kind: FieldErrorType,
    /// The offending value; `None` leaves it out of the message.
    pub bad_value: Option<serde_json::Value>,
    /// Free text after the value.
    pub detail: String,
}

impl FieldError {
    /// A field error of any kind.
    pub fn new(
        kind: FieldErrorType,
        field: impl Into<FieldPath>,
        bad_value: Option<serde_json::Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            field: field.into().0,
            kind,
            bad_value,
            detail: detail.into(),
        }
    }

    /// `field.Invalid`: a malformed value.
    pub fn invalid(
        field: impl Into<FieldPath>,
        value: impl Into<serde_json::Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(FieldErrorType::Invalid, field, Some(value.into()), detail)
    }

    /// `field.Required`: a missing value.
    pub fn required(field: impl Into<FieldPath>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorType::Required, field, None, detail)
    }

    /// `field.NotFound`: a value that refers to nothing.
    pub fn not_found(field: impl Into<FieldPath>, value: impl Into<serde_json::Value>) -> Self {
        Self::new(FieldErrorType::NotFound, field, Some(value.into()), "")
    }

    /// `field.Duplicate`: a value that must be unique and is not.
    pub fn duplicate(field: impl Into<FieldPath>, value: impl Into<serde_json::Value>) -> Self {
        Self::new(FieldErrorType::Duplicate, field, Some(value.into()), "")
    }

    /// `field.NotSupported`: a value outside an enumeration; lists the supported values.
    pub fn not_supported(
        field: impl Into<FieldPath>,
        value: impl Into<serde_json::Value>,
        valid: &[&str],
    ) -> Self {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(
            FieldErrorType::NotSupported,
            field,
            Some(value.into()),
            detail,
        )
    }

    /// `field.Forbidden`: a value not permitted here.
    pub fn forbidden(field: impl Into<FieldPath>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorType::Forbidden, field, None, detail)
    }

    /// `field.TooLong` with a maximum length in bytes; the value is never printed. The unit stays
    /// plural, as in Kubernetes 1.33 (whose API skiff serves; 1.34 singularises it).
    pub fn too_long(field: impl Into<FieldPath>, max_length: usize) -> Self {
        Self::new(
            FieldErrorType::TooLong,
            field,
            None,
            format!("may not be more than {max_length} bytes"),
        )
    }

    /// `field.TooMany`: a list with too many items (plural unit, as in Kubernetes 1.33).
    pub fn too_many(field: impl Into<FieldPath>, actual: usize, max: usize) -> Self {
        Self::new(
            FieldErrorType::TooMany,
            field,
            Some(serde_json::Value::from(actual)),
            format!("must have at most {max} items"),
        )
    }

    /// `field.InternalError`.
    pub fn internal(field: impl Into<FieldPath>, err: impl fmt::Display) -> Self {
        Self::new(FieldErrorType::Internal, field, None, err.to_string())
    }

    /// The `reason` of this error's `details.causes[]` entry (`FieldValueInvalid`, ...).
    pub fn reason(&self) -> &'static str {
        self.kind.cause_type()
    }

    /// The message without the field name (`ErrorBody`), as used in `details.causes[].message`.
    pub fn body(&self) -> String {
        let mut s = self.kind.description().to_string();
        if !self.kind.hides_value()
            && let Some(v) = &self.bad_value
        {
            s.push_str(": ");
            s.push_str(&go_value(v));
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// The `details.causes[]` entry of this error.
    pub fn to_cause(&self) -> StatusCause {
        StatusCause {
            reason: Some(self.kind.cause_type().to_string()),
            message: Some(self.body()),
            field: Some(self.field.clone()),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

impl std::error::Error for FieldError {}

/// Joins error messages as `utilerrors.Aggregate` does: duplicates dropped, one message alone,
/// several as `[a, b]`.
pub fn aggregate_messages<I, S>(messages: I) -> String
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut seen: Vec<String> = Vec::new();
    for m in messages {
        let m = m.into();
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.pop().unwrap_or_default(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// The aggregate message of a list of field errors (`ErrorList.ToAggregate().Error()`).
pub fn aggregate_field_errors(errs: &[FieldError]) -> String {
    aggregate_messages(errs.iter().map(|e| e.to_string()))
}

/// A bad value as `field.Error` prints it: strings quoted (`%q`), numbers and booleans bare,
/// `null`, non-empty string maps and string lists in Go's `%#v` shape
/// (`map[string]string{"a":"1"}`, `[]string{"a", "b"}`), anything else as compact JSON.
fn go_value(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "null".to_string(),
        Value::String(s) => quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(map) if !map.is_empty() && map.values().all(Value::is_string) => {
            // Go prints a map's keys sorted.
            let mut entries: Vec<(&String, &str)> = map
                .iter()
                .map(|(k, v)| (k, v.as_str().unwrap_or("")))
                .collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), quote(v)))
                .collect();
            format!("map[string]string{{{}}}", parts.join(", "))
        }
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => {
            let parts: Vec<String> = items
                .iter()
                .map(|v| quote(v.as_str().unwrap_or("")))
                .collect();
            format!("[]string{{{}}}", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// Quotes a string as Go's `strconv.Quote` (and so `%q`) does.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() || c == '\u{feff}' => {
                let n = c as u32;
                if n < 0x10000 {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A failed API request as a typed value: the `Status` body plus its parsed reason.
///
/// Build one with a constructor named after the Kubernetes helper (`not_found` is
/// `NewNotFound`, ...), send it with [`ApiError::to_status`]; a client reads one back with
/// [`ApiError::from_status`] or [`ApiError::from_response`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    reason: Reason,
    code: u16,
    message: String,
    details: Option<StatusDetails>,
}

fn opt(s: &str) -> Option<String> {
    if s.is_empty() {
        None
    } else {
        Some(s.to_string())
    }
}

fn details(gr_group: &str, kind: &str, name: &str) -> Option<StatusDetails> {
    Some(StatusDetails {
        group: opt(gr_group),
        kind: opt(kind),
        name: opt(name),
        ..StatusDetails::default()
    })
}

fn retry_details(retry_after_seconds: u32) -> Option<StatusDetails> {
    Some(StatusDetails {
        retry_after_seconds: (retry_after_seconds > 0).then_some(retry_after_seconds as i32),
        ..StatusDetails::default()
    })
}

impl ApiError {
    /// An error with everything given explicitly.
    pub fn new(
        code: u16,
        reason: Reason,
        message: impl Into<String>,
        details: Option<StatusDetails>,
    ) -> Self {
        ApiError {
            reason,
            code,
            message: message.into(),
            details,
        }
    }

    /// 404 NotFound: `pods "x" not found`.
    pub fn not_found(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            404,
            Reason::NotFound,
            format!("{gr} {} not found", quote(name)),
            details(gr.group, gr.resource, name),
        )
    }

    /// 409 AlreadyExists: `pods "x" already exists`.
    pub fn already_exists(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            409,
            Reason::AlreadyExists,
            format!("{gr} {} already exists", quote(name)),
            details(gr.group, gr.resource, name),
        )
    }

    /// 409 AlreadyExists for a `generateName` that kept colliding, with a retry hint.
    pub fn generate_name_conflict(
        gr: GroupResource<'_>,
        name: &str,
        retry_after_seconds: u32,
    ) -> Self {
        let mut d = details(gr.group, gr.resource, name);
        if let Some(d) = d.as_mut() {
            d.retry_after_seconds = (retry_after_seconds > 0).then_some(retry_after_seconds as i32);
        }
        Self::new(
            409,
            Reason::AlreadyExists,
            format!(
                "{gr} {} already exists, the server was not able to generate a unique name for the object",
                quote(name)
            ),
            d,
        )
    }

    /// 409 Conflict: `Operation cannot be fulfilled on pods "x": <detail>`.
    pub fn conflict(gr: GroupResource<'_>, name: &str, detail: impl fmt::Display) -> Self {
        Self::new(
            409,
            Reason::Conflict,
            format!(
                "Operation cannot be fulfilled on {gr} {}: {detail}",
                quote(name)
            ),
            details(gr.group, gr.resource, name),
        )
    }

    /// 409 Conflict of an update with a stale `resourceVersion` (the optimistic-lock message).
    pub fn conflict_modified(gr: GroupResource<'_>, name: &str) -> Self {
        Self::conflict(gr, name, OPTIMISTIC_LOCK_ERROR_MSG)
    }

    /// 409 Conflict of a server-side apply, with one cause per conflicting field.
    pub fn apply_conflict(causes: Vec<StatusCause>, message: impl Into<String>) -> Self {
        Self::new(
            409,
            Reason::Conflict,
            message,
            Some(StatusDetails {
                causes: Some(causes),
                ..StatusDetails::default()
            }),
        )
    }

    /// 422 Invalid: `Pod "x" is invalid: <errors>`, with one cause per field error.
    pub fn invalid(gk: GroupKind<'_>, name: &str, errs: &[FieldError]) -> Self {
        let message = if errs.is_empty() {
            format!("{gk} {} is invalid", quote(name))
        } else {
            format!(
                "{gk} {} is invalid: {}",
                quote(name),
                aggregate_field_errors(errs)
            )
        };
        Self::new(
            422,
            Reason::Invalid,
            message,
            Some(StatusDetails {
                group: opt(gk.group),
                kind: opt(gk.kind),
                name: opt(name),
                causes: Some(errs.iter().map(FieldError::to_cause).collect()),
                ..StatusDetails::default()
            }),
        )
    }

    /// 400 BadRequest with the message as given.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, Reason::BadRequest, message, None)
    }

    /// 401 Unauthorized; an empty message becomes `not authorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.is_empty() {
            message = "not authorized".to_string();
        }
        Self::new(401, Reason::Unauthorized, message, None)
    }

    /// 403 Forbidden: `pods "x" is forbidden: <detail>` (or without name / resource).
    pub fn forbidden(gr: GroupResource<'_>, name: &str, detail: impl fmt::Display) -> Self {
        let message = if gr.is_empty() {
            format!("forbidden: {detail}")
        } else if name.is_empty() {
            format!("{gr} is forbidden: {detail}")
        } else {
            format!("{gr} {} is forbidden: {detail}", quote(name))
        };
        Self::new(
            403,
            Reason::Forbidden,
            message,
            details(gr.group, gr.resource, name),
        )
    }

    /// 405 MethodNotAllowed: `<action> is not supported on resources of kind "pods"`.
    pub fn method_not_supported(gr: GroupResource<'_>, action: &str) -> Self {
        Self::new(
            405,
            Reason::MethodNotAllowed,
            format!(
                "{action} is not supported on resources of kind {}",
                quote(&gr.to_string())
            ),
            details(gr.group, gr.resource, ""),
        )
    }

    /// 406 NotAcceptable: `only the following media types are accepted: a, b`.
    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Self::new(
            406,
            Reason::NotAcceptable,
            format!(
                "only the following media types are accepted: {}",
                accepted.join(", ")
            ),
            None,
        )
    }

    /// 410 Gone with reason `Expired` (`NewResourceExpired`).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, Reason::Expired, message, None)
    }

    /// 410 Expired for a watch or list from a compacted revision:
    /// `too old resource version: 5 (9)`.
    pub fn too_old_resource_version(requested: u64, oldest: u64) -> Self {
        Self::expired(format!("too old resource version: {requested} ({oldest})"))
    }

    /// 410 Gone with reason `Gone` (deprecated by Kubernetes in favour of [`ApiError::expired`]).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, Reason::Gone, message, None)
    }

    /// 413 RequestEntityTooLarge: `Request entity too large: <message>`.
    pub fn request_entity_too_large(message: impl fmt::Display) -> Self {
        Self::new(
            413,
            Reason::RequestEntityTooLarge,
            format!("Request entity too large: {message}"),
            None,
        )
    }

    /// 415 UnsupportedMediaType: `the body of the request was in an unknown format - accepted
    /// media types include: a, b`.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            Reason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
            None,
        )
    }

    /// 429 TooManyRequests with the message as given and a retry hint (`NewTooManyRequests`).
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        Self::new(
            429,
            Reason::TooManyRequests,
            message,
            retry_details(retry_after_seconds),
        )
    }

    /// 500 InternalError: `Internal error occurred: <err>`, the error also as the only cause.
    pub fn internal_error(err: impl fmt::Display) -> Self {
        let err = err.to_string();
        Self::new(
            500,
            Reason::InternalError,
            format!("Internal error occurred: {err}"),
            Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    message: Some(err),
                    ..StatusCause::default()
                }]),
                ..StatusDetails::default()
            }),
        )
    }

    /// 500 ServerTimeout: `The <op> operation against <gr> could not be completed at this time,
    /// please try again.`
    pub fn server_timeout(
        gr: GroupResource<'_>,
        operation: &str,
        retry_after_seconds: u32,
    ) -> Self {
        let mut d = details(gr.group, gr.resource, operation);
        if let Some(d) = d.as_mut() {
            d.retry_after_seconds = (retry_after_seconds > 0).then_some(retry_after_seconds as i32);
        }
        Self::new(
            500,
            Reason::ServerTimeout,
            format!(
                "The {operation} operation against {gr} could not be completed at this time, please try again."
            ),
            d,
        )
    }

    /// 503 ServiceUnavailable with the message as given.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, Reason::ServiceUnavailable, message, None)
    }

    /// 504 Timeout: `Timeout: <message>`.
    pub fn timeout(message: impl fmt::Display, retry_after_seconds: u32) -> Self {
        Self::new(
            504,
            Reason::Timeout,
            format!("Timeout: {message}"),
            retry_details(retry_after_seconds),
        )
    }

    /// An error for a response that carried no `Status` (`NewGenericServerResponse`): the
    /// reason and wording follow the HTTP code. `verb` is the HTTP method (`GET`, `POST`, ...).
    pub fn generic_server_response(
        code: u16,
        verb: &str,
        gr: GroupResource<'_>,
        name: &str,
        server_message: &str,
    ) -> Self {
        let (reason, mut message) = match code {
            409 => (
                if verb.eq_ignore_ascii_case("POST") {
                    Reason::AlreadyExists
                } else {
                    Reason::Conflict
                },
                "the server reported a conflict".to_string(),
            ),
            404 => (
                Reason::NotFound,
                "the server could not find the requested resource".to_string(),
            ),
            400 => (
                Reason::BadRequest,
                "the server rejected our request for an unknown reason".to_string(),
            ),
            401 => (
                Reason::Unauthorized,
                "the server has asked for the client to provide credentials".to_string(),
            ),
            403 => (Reason::Forbidden, server_message.to_string()),
            406 => (
                Reason::NotAcceptable,
                if server_message.is_empty() || server_message == "unknown" {
                    "the server was unable to respond with a content type that the client supports"
                        .to_string()
                } else {
                    server_message.to_string()
                },
            ),
            415 => (Reason::UnsupportedMediaType, server_message.to_string()),
            405 => (
                Reason::MethodNotAllowed,
                "the server does not allow this method on the requested resource".to_string(),
            ),
            422 => (
                Reason::Invalid,
                "the server rejected our request due to an error in our request".to_string(),
            ),
            503 => (
                Reason::ServiceUnavailable,
                "the server is currently unable to handle the request".to_string(),
            ),
            504 => (
                Reason::Timeout,
                "the server was unable to return a response in the time allotted, but may still be processing the request".to_string(),
            ),
            429 => (
                Reason::TooManyRequests,
                "the server has received too many requests and has asked us to try again later"
                    .to_string(),
            ),
            c if c >= 500 => (
                Reason::InternalError,
                format!(
                    "an error on the server ({}) has prevented the request from succeeding",
                    quote(server_message)
                ),
            ),
            c => (
                Reason::Unknown,
                format!("the server responded with the status code {c} but did not return more information"),
            ),
        };
        if !gr.is_empty() && !name.is_empty() {
            message = format!("{message} ({} {gr} {name})", verb.to_lowercase());
        } else if !gr.is_empty() {
            message = format!("{message} ({} {gr})", verb.to_lowercase());
        }
        Self::new(code, reason, message, details(gr.group, gr.resource, name))
    }

    /// The error a client reports for a failed response: the body's `Status` when it is one,
    /// else a generic error from the HTTP code with the body text as the server's message.
    pub fn from_response(
        code: u16,
        verb: &str,
        gr: GroupResource<'_>,
        name: &str,
        body: &[u8],
    ) -> Self {
        if let Some(status) = parse_status(body) {
            let mut e = Self::from_status(status);
            if e.code == 0 {
                e.code = code;
            }
            return e;
        }
        let text = String::from_utf8_lossy(body);
        let mut e = Self::generic_server_response(code, verb, gr, name, text.trim());
        if !text.trim().is_empty() {
            let d = e.details.get_or_insert_with(StatusDetails::default);
            d.causes = Some(vec![StatusCause {
                reason: Some("UnexpectedServerResponse".to_string()),
                message: Some(text.trim().to_string()),
                field: None,
            }]);
        }
        e
    }

    /// The error a `Status` body describes.
    pub fn from_status(status: Status) -> Self {
        ApiError {
            reason: Reason::parse(status.reason.as_deref().unwrap_or("")),
            code: status.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
            message: status.message.unwrap_or_default(),
            details: status.details,
        }
    }

    /// The `Status` body of this error (`kind: Status, apiVersion: v1, status: Failure`).
    pub fn to_status(&self) -> Status {
        Status {
            code: Some(i32::from(self.code)),
            details: self.details.clone(),
            message: Some(self.message.clone()),
            metadata: Default::default(),
            reason: (self.reason != Reason::Unknown).then(|| self.reason.as_str().to_string()),
            status: Some("Failure".to_string()),
        }
    }

    /// The `Status` body as kube-apiserver writes it ([`status_body`]).
    pub fn to_body(&self) -> Vec<u8> {
        status_body(&self.to_status())
    }

    /// The `Status` body as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.to_status()).expect("a Status always serialises")
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The machine-readable reason.
    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// The human message (also this error's Display).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The details (kind, name, causes, retry hint), if any.
    pub fn details(&self) -> Option<&StatusDetails> {
        self.details.as_ref()
    }

    /// `errors.IsNotFound`: reason NotFound, or an unknown reason with code 404.
    pub fn is_not_found(&self) -> bool {
        self.reason == Reason::NotFound || (self.reason_is_unknown() && self.code == 404)
    }

    /// `errors.IsAlreadyExists`.
    pub fn is_already_exists(&self) -> bool {
        self.reason == Reason::AlreadyExists
    }

    /// `errors.IsConflict`: reason Conflict, or an unknown reason with code 409.
    pub fn is_conflict(&self) -> bool {
        self.reason == Reason::Conflict || (self.reason_is_unknown() && self.code == 409)
    }

    /// `errors.IsResourceExpired` / `IsGone`: a 410 the client answers by re-listing.
    pub fn is_expired(&self) -> bool {
        matches!(self.reason, Reason::Expired | Reason::Gone)
            || (self.reason_is_unknown() && self.code == 410)
    }

    /// `errors.IsInvalid`.
    pub fn is_invalid(&self) -> bool {
        self.reason == Reason::Invalid || (self.reason_is_unknown() && self.code == 422)
    }

    fn reason_is_unknown(&self) -> bool {
        matches!(self.reason, Reason::Unknown | Reason::Other(_))
    }
}

impl From<Status> for ApiError {
    fn from(status: Status) -> Self {
        ApiError::from_status(status)
    }
}

impl From<&ApiError> for Status {
    fn from(e: &ApiError) -> Self {
        e.to_status()
    }
}

/// Parses a `Status` body; `None` when the bytes are not a JSON object of kind `Status` (with
/// apiVersion `v1` or `meta.k8s.io/v1`).
pub fn parse_status(body: &[u8]) -> Option<Status> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let obj = v.as_object_mut()?;
    if obj.get("kind")?.as_str()? != "Status" {
        return None;
    }
    match obj.get("apiVersion").and_then(|a| a.as_str()) {
        Some("v1") | Some("meta.k8s.io/v1") | None => {}
        Some(_) => return None,
    }
    obj.insert("apiVersion".into(), "v1".into());
    serde_json::from_value(v).ok()
}

/// The bytes kube-apiserver writes for `status`: Go's `encoding/json` of `metav1.Status` through
/// a `json.Encoder`, so members in the Go struct's field order, empty ones left out as
/// `omitempty` says, `<`, `>` and `&` escaped as `\u003c`-style sequences, and a closing newline:
///
/// ```text
/// Status        kind apiVersion metadata{selfLink resourceVersion continue remainingItemCount}
///               status message reason details code
/// StatusDetails name group kind uid causes retryAfterSeconds
/// StatusCause   reason message field
/// ```
///
/// (`k8s.io/apimachinery/pkg/apis/meta/v1/types.go`; `metadata` is a struct, which `omitempty`
/// never leaves out, so it is `{}` at least.) `serde_json` would sort the members by name.
pub fn status_body(status: &Status) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_status(&mut out, status);
    out.push(b'\n');
    out
}

/// [`status_body`] without the newline: the `object` of a watch `ERROR` event.
pub fn write_status(out: &mut Vec<u8>, status: &Status) {
    let mut o = GoObject::new(out);
    o.string("kind", "Status");
    o.string("apiVersion", "v1");
    o.key("metadata");
    {
        let m = &status.metadata;
        let mut meta = GoObject::new(o.out);
        meta.opt_string("selfLink", m.self_link.as_deref());
        meta.opt_string("resourceVersion", m.resource_version.as_deref());
        meta.opt_string("continue", m.continue_.as_deref());
        if let Some(n) = m.remaining_item_count {
            meta.number("remainingItemCount", n);
        }
        meta.end();
    }
    o.opt_string("status", status.status.as_deref());
    o.opt_string("message", status.message.as_deref());
    o.opt_string("reason", status.reason.as_deref());
    if let Some(d) = &status.details {
        o.key("details");
        let mut details = GoObject::new(o.out);
        details.opt_string("name", d.name.as_deref());
        details.opt_string("group", d.group.as_deref());
        details.opt_string("kind", d.kind.as_deref());
        details.opt_string("uid", d.uid.as_deref());
        if let Some(causes) = d.causes.as_ref().filter(|c| !c.is_empty()) {
            details.key("causes");
            details.out.push(b'[');
            for (i, c) in causes.iter().enumerate() {
                if i > 0 {
                    details.out.push(b',');
                }
                let mut cause = GoObject::new(details.out);
                cause.opt_string("reason", c.reason.as_deref());
                cause.opt_string("message", c.message.as_deref());
                cause.opt_string("field", c.field.as_deref());
                cause.end();
            }
            details.out.push(b']');
        }
        if let Some(n) = d.retry_after_seconds.filter(|n| *n != 0) {
            details.number("retryAfterSeconds", i64::from(n));
        }
        details.end();
    }
    if let Some(code) = status.code.filter(|c| *c != 0) {
        o.number("code", i64::from(code));
    }
    o.end();
}

/// A JSON object being written member by member, in the caller's order.
struct GoObject<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> GoObject<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        GoObject { out, first: true }
    }

    fn key(&mut self, name: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        go_json_string(self.out, name);
        self.out.push(b':');
    }

    fn string(&mut self, name: &str, value: &str) {
        self.key(name);
        go_json_string(self.out, value);
    }

    /// A string member with `omitempty`: absent and `""` are both left out.
    fn opt_string(&mut self, name: &str, value: Option<&str>) {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            self.string(name, v);
        }
    }

    fn number(&mut self, name: &str, value: i64) {
        self.key(name);
        self.out.extend_from_slice(value.to_string().as_bytes());
    }

    fn end(self) {
        self.out.push(b'}');
    }
}

/// A JSON string as Go's `encoding/json` writes it with HTML escaping on (its default, which
/// kube-apiserver keeps): `\b \f \n \r \t` short, other control characters and `< > &` and
/// U+2028/U+2029 as `\u00XX`, with lowercase hex.
pub fn go_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\u{0c}' => out.extend_from_slice(b"\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                let n = c as u32;
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(n >> 4) as usize]);
                out.push(HEX[(n & 0xf) as usize]);
            }
            '\u{2028}' => out.extend_from_slice(b"\\u2028"),
            '\u{2029}' => out.extend_from_slice(b"\\u2029"),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// A `Status` body of success (`status: Success`), as a delete of a collection returns.
pub fn success() -> Status {
    Status {
        status: Some("Success".to_string()),
        ..Status::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PODS: GroupResource<'static> = GroupResource::core("pods");

    #[test]
    fn not_found_body_is_exact() {
        let e = ApiError::not_found(PODS, "x");
        assert_eq!(e.code(), 404);
        assert_eq!(e.reason(), &Reason::NotFound);
        assert_eq!(
            e.to_json(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "pods \"x\" not found", "reason": "NotFound",
                "details": {"name": "x", "kind": "pods"}, "code": 404
            })
        );
        let apps = ApiError::not_found(GroupResource::new("apps", "deployments"), "web");
        assert_eq!(apps.message(), "deployments.apps \"web\" not found");
        assert_eq!(apps.details().unwrap().group.as_deref(), Some("apps"));
    }

    #[test]
    fn resource_info_converts() {
        let deploy = ResourceInfo {
            group: "apps",
            version: "v1",
            kind: "Deployment",
            plural: "deployments",
            singular: "deployment",
            short_names: &[],
            namespaced: true,
            verbs: crate::resources::READ_WRITE,
            subresources: &[],
            categories: &[],
            selectable_fields: &[],
        };
        assert_eq!(GroupResource::from(&deploy).to_string(), "deployments.apps");
        assert_eq!(GroupKind::from(&deploy).to_string(), "Deployment.apps");
    }

    #[test]
    fn already_exists_and_conflict() {
        let e = ApiError::already_exists(PODS, "x");
        assert_eq!((e.code(), e.message()), (409, "pods \"x\" already exists"));
        assert!(e.is_already_exists() && !e.is_conflict());
        let c = ApiError::conflict_modified(PODS, "x");
        assert_eq!(c.code(), 409);
        assert_eq!(
            c.message(),
            "Operation cannot be fulfilled on pods \"x\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert!(c.is_conflict());
        let generated = ApiError::generate_name_conflict(PODS, "web-x1z2", 1);
        assert_eq!(
            generated.message(),
            "pods \"web-x1z2\" already exists, the server was not able to generate a unique name for the object"
        );
        assert!(generated.is_already_exists());
        assert_eq!(generated.details().unwrap().retry_after_seconds, Some(1));
        let custom = ApiError::conflict(PODS, "x", "uid mismatch");
        assert_eq!(
            custom.message(),
            "Operation cannot be fulfilled on pods \"x\": uid mismatch"
        );
    }

    #[test]
    fn field_paths() {
        let p = FieldPath::new("spec")
            .child("containers")
            .index(2)
            .child("resources");
        assert_eq!(p.as_str(), "spec.containers[2].resources");
        assert_eq!(
            p.child("limits").key("cpu").as_str(),
            "spec.containers[2].resources.limits[cpu]"
        );
        assert_eq!(FieldPath::default().child("a").as_str(), "a");
    }

    #[test]
    fn field_error_wording() {
        let e = FieldError::invalid(
            FieldPath::new("metadata").child("name"),
            "Bad_Name",
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        );
        assert_eq!(
            e.to_string(),
            "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(
            FieldError::required("spec.containers", "").to_string(),
            "spec.containers: Required value"
        );
        assert_eq!(
            FieldError::required(
                FieldPath::new("spec")
                    .child("containers")
                    .index(0)
                    .child("name"),
                ""
            )
            .to_string(),
            "spec.containers[0].name: Required value"
        );
        assert_eq!(
            FieldError::not_supported(
                "spec.restartPolicy",
                "Sometimes",
                &["Always", "OnFailure", "Never"]
            )
            .to_string(),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
        assert_eq!(
            FieldError::duplicate(
                FieldPath::new("spec.containers").index(1).child("name"),
                "web"
            )
            .to_string(),
            "spec.containers[1].name: Duplicate value: \"web\""
        );
        assert_eq!(
            FieldError::forbidden("spec", "pod updates may not change fields other than ...")
                .to_string(),
            "spec: Forbidden: pod updates may not change fields other than ..."
        );
        assert_eq!(
            FieldError::too_long(FieldPath::new("metadata").child("annotations"), 262144)
                .to_string(),
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
        assert_eq!(
            FieldError::invalid("spec.replicas", -1, "must be greater than or equal to 0")
                .to_string(),
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            FieldError::invalid(FieldPath::new("metadata.labels").key("a b"), true, "x")
                .to_string(),
            "metadata.labels[a b]: Invalid value: true: x"
        );
        assert_eq!(
            FieldError::too_many("spec.x", 5, 1).to_string(),
            "spec.x: Too many: 5: must have at most 1 items"
        );
        assert_eq!(
            FieldError::too_long("a", 1).to_string(),
            "a: Too long: may not be more than 1 bytes"
        );
        assert_eq!(
            FieldError::invalid(
                "spec.template.metadata.labels",
                serde_json::json!({"b": "2", "a": "1"}),
                "`selector` does not match template `labels`",
            )
            .to_string(),
            r#"spec.template.metadata.labels: Invalid value: map[string]string{"a":"1", "b":"2"}: `selector` does not match template `labels`"#
        );
        assert_eq!(
            FieldError::invalid("metadata.finalizers", serde_json::json!(["a", "b"]), "x")
                .to_string(),
            r#"metadata.finalizers: Invalid value: []string{"a", "b"}: x"#
        );
        assert_eq!(
            FieldError::invalid("spec.x", serde_json::Value::Null, "bad").to_string(),
            "spec.x: Invalid value: null: bad"
        );
        assert_eq!(
            FieldError::not_supported("a", "x", &[]).to_string(),
            r#"a: Unsupported value: "x""#
        );
        assert_eq!(
            FieldError::internal("spec", "boom").to_string(),
            "spec: Internal error: boom"
        );
        assert_eq!(FieldError::required("a", "").reason(), "FieldValueRequired");
        assert_eq!(
            FieldError::too_many("a", 2, 1).reason(),
            "FieldValueTooMany"
        );
    }

    #[test]
    fn invalid_message_and_causes() {
        let errs = vec![FieldError::required("spec.containers", "")];
        let e = ApiError::invalid(GroupKind::new("", "Pod"), "pinv", &errs);
        assert_eq!(e.code(), 422);
        assert_eq!(
            e.message(),
            "Pod \"pinv\" is invalid: spec.containers: Required value"
        );
        assert_eq!(
            e.to_json()["details"],
            json!({"name": "pinv", "kind": "Pod", "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
            ]})
        );
        let two = vec![
            FieldError::invalid("metadata.name", "Bad_Name", "bad"),
            FieldError::required("spec.containers", ""),
            FieldError::required("spec.containers", ""),
        ];
        let e = ApiError::invalid(GroupKind::new("apps", "Deployment"), "d", &two);
        assert_eq!(
            e.message(),
            "Deployment.apps \"d\" is invalid: [metadata.name: Invalid value: \"Bad_Name\": bad, spec.containers: Required value]"
        );
        // Causes keep duplicates; only the message drops them, as Kubernetes does.
        assert_eq!(e.details().unwrap().causes.as_ref().unwrap().len(), 3);
        let none = ApiError::invalid(GroupKind::new("", "Pod"), "p", &[]);
        assert_eq!(none.message(), "Pod \"p\" is invalid");
    }

    #[test]
    fn the_other_codes() {
        let cases: Vec<(ApiError, u16, &str, &str)> = vec![
            (ApiError::bad_request("bad"), 400, "BadRequest", "bad"),
            (
                ApiError::unauthorized(""),
                401,
                "Unauthorized",
                "not authorized",
            ),
            (
                ApiError::forbidden(PODS, "x", "User \"u\" cannot get resource"),
                403,
                "Forbidden",
                "pods \"x\" is forbidden: User \"u\" cannot get resource",
            ),
            (
                ApiError::forbidden(PODS, "", "no"),
                403,
                "Forbidden",
                "pods is forbidden: no",
            ),
            (
                ApiError::forbidden(GroupResource::default(), "", "no"),
                403,
                "Forbidden",
                "forbidden: no",
            ),
            (
                ApiError::method_not_supported(PODS, "watch"),
                405,
                "MethodNotAllowed",
                "watch is not supported on resources of kind \"pods\"",
            ),
            (
                ApiError::not_acceptable(&["application/json", "application/yaml"]),
                406,
                "NotAcceptable",
                "only the following media types are accepted: application/json, application/yaml",
            ),
            (
                ApiError::too_old_resource_version(5, 9),
                410,
                "Expired",
                "too old resource version: 5 (9)",
            ),
            (ApiError::gone("gone"), 410, "Gone", "gone"),
            (
                ApiError::request_entity_too_large("limit is 3145728"),
                413,
                "RequestEntityTooLarge",
                "Request entity too large: limit is 3145728",
            ),
            (
                ApiError::unsupported_media_type(&["application/json-patch+json"]),
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json",
            ),
            (
                ApiError::too_many_requests("slow down", 1),
                429,
                "TooManyRequests",
                "slow down",
            ),
            (
                ApiError::internal_error("disk on fire"),
                500,
                "InternalError",
                "Internal error occurred: disk on fire",
            ),
            (
                ApiError::server_timeout(PODS, "create", 2),
                500,
                "ServerTimeout",
                "The create operation against pods could not be completed at this time, please try again.",
            ),
            (
                ApiError::service_unavailable("starting"),
                503,
                "ServiceUnavailable",
                "starting",
            ),
            (
                ApiError::timeout("request did not complete within 60s", 0),
                504,
                "Timeout",
                "Timeout: request did not complete within 60s",
            ),
        ];
        for (e, code, reason, message) in cases {
            let s = e.to_status();
            assert_eq!(s.code, Some(i32::from(code)), "{message}");
            assert_eq!(s.reason.as_deref(), Some(reason), "{message}");
            assert_eq!(s.message.as_deref(), Some(message));
            assert_eq!(s.status.as_deref(), Some("Failure"));
            assert_eq!(e.code(), code);
            assert_eq!(e.reason().as_str(), reason);
        }
        let internal = ApiError::internal_error("disk on fire").to_json();
        assert_eq!(
            internal["details"],
            json!({"causes": [{"message": "disk on fire"}]})
        );
        let tmr = ApiError::too_many_requests("slow down", 1).to_json();
        assert_eq!(tmr["details"], json!({"retryAfterSeconds": 1}));
    }

    #[test]
    fn round_trip_through_a_body() {
        let e = ApiError::invalid(
            GroupKind::new("", "Pod"),
            "p",
            &[FieldError::required("spec.containers", "")],
        );
        let body = serde_json::to_vec(&e.to_status()).unwrap();
        let back = ApiError::from_response(422, "POST", PODS, "p", &body);
        assert_eq!(back, e);
        assert!(back.is_invalid());
        // A meta.k8s.io/v1 Status is a Status too.
        let body = br#"{"kind":"Status","apiVersion":"meta.k8s.io/v1","status":"Failure","message":"m","reason":"Expired","code":410}"#;
        let e = ApiError::from_response(410, "GET", PODS, "", body);
        assert!(e.is_expired());
        assert_eq!(e.message(), "m");
    }

    #[test]
    fn plain_text_responses_become_generic_errors() {
        let e = ApiError::from_response(404, "GET", PODS, "zzz", b"404 page not found\n");
        assert!(e.is_not_found());
        assert_eq!(
            e.message(),
            "the server could not find the requested resource (get pods zzz)"
        );
        let e = ApiError::from_response(409, "POST", PODS, "", b"");
        assert!(e.is_already_exists());
        assert_eq!(e.message(), "the server reported a conflict (post pods)");
        let e = ApiError::from_response(502, "GET", GroupResource::default(), "", b"oops");
        assert_eq!(e.reason(), &Reason::InternalError);
        assert_eq!(
            e.message(),
            "an error on the server (\"oops\") has prevented the request from succeeding"
        );
        let e =
            ApiError::generic_server_response(422, "", GroupResource::default(), "", "test failed");
        assert_eq!(
            (e.code(), e.reason(), e.message()),
            (
                422,
                &Reason::Invalid,
                "the server rejected our request due to an error in our request"
            )
        );
    }

    #[test]
    fn unknown_reason_with_known_code_counts() {
        let s = Status {
            code: Some(404),
            reason: Some("Whatever".into()),
            message: Some("m".into()),
            ..Status::default()
        };
        let e = ApiError::from(s);
        assert!(e.is_not_found());
        assert_eq!(e.reason(), &Reason::Other("Whatever".into()));
        assert_eq!(e.to_status().reason.as_deref(), Some("Whatever"));
    }

    #[test]
    fn go_quoting() {
        assert_eq!(quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(quote("tab\there\n"), r#""tab\there\n""#);
        assert_eq!(quote("\u{1}"), r#""\x01""#);
        assert_eq!(quote("ünï"), "\"ünï\"");
        assert_eq!(quote("\u{85}"), r#""\u0085""#);
    }

    #[test]
    fn aggregate_like_kubernetes() {
        assert_eq!(aggregate_messages(Vec::<String>::new()), "");
        assert_eq!(aggregate_messages(["a"]), "a");
        assert_eq!(aggregate_messages(["a", "a"]), "a");
        assert_eq!(aggregate_messages(["a", "b", "a"]), "[a, b]");
    }

    #[test]
    fn success_body() {
        assert_eq!(
            serde_json::to_value(success()).unwrap(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
        );
    }

    /// The body as text, for byte-exact comparisons with what kube-apiserver writes.
    fn body_text(e: &ApiError) -> String {
        String::from_utf8(e.to_body()).unwrap()
    }

    // The expected bodies below are written out from the Go types' field order
    // (k8s.io/apimachinery/pkg/apis/meta/v1/types.go: Status, StatusDetails, StatusCause) and
    // encoding/json's rules, not from this encoder.

    #[test]
    fn bodies_are_in_go_field_order_with_a_newline() {
        assert_eq!(
            body_text(&ApiError::already_exists(
                GroupResource::new("apps", "deployments"),
                "web"
            )),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"deployments.apps \"web\" already exists","reason":"AlreadyExists","#,
                r#""details":{"name":"web","group":"apps","kind":"deployments"},"code":409}"#,
                "\n"
            )
        );
        assert_eq!(
            body_text(&ApiError::not_found(PODS, "nginx")),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"pods \"nginx\" not found","reason":"NotFound","#,
                r#""details":{"name":"nginx","kind":"pods"},"code":404}"#,
                "\n"
            )
        );
        assert_eq!(
            body_text(&ApiError::conflict_modified(
                GroupResource::new("example.com", "widgets"),
                "w"
            )),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"Operation cannot be fulfilled on widgets.example.com \"w\": "#,
                r#"the object has been modified; please apply your changes to the latest version and try again","#,
                r#""reason":"Conflict","details":{"name":"w","group":"example.com","kind":"widgets"},"code":409}"#,
                "\n"
            )
        );
    }

    #[test]
    fn invalid_causes_and_retry_hints_in_go_field_order() {
        let errs = [FieldError::invalid(
            "spec.replicas",
            -1,
            "must be greater than or equal to 0",
        )];
        assert_eq!(
            body_text(&ApiError::invalid(
                GroupKind::new("apps", "Deployment"),
                "web",
                &errs
            )),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0","#,
                r#""reason":"Invalid","details":{"name":"web","group":"apps","kind":"Deployment","#,
                r#""causes":[{"reason":"FieldValueInvalid","message":"Invalid value: -1: must be greater than or equal to 0","#,
                r#""field":"spec.replicas"}]},"code":422}"#,
                "\n"
            )
        );
        // uid sits between kind and causes; retryAfterSeconds after causes.
        let mut details = StatusDetails {
            name: Some("n".into()),
            uid: Some("u-1".into()),
            retry_after_seconds: Some(3),
            causes: Some(vec![StatusCause {
                field: Some("f".into()),
                ..StatusCause::default()
            }]),
            ..StatusDetails::default()
        };
        assert_eq!(
            body_text(&ApiError::new(
                500,
                Reason::ServerTimeout,
                "m",
                Some(details.clone())
            )),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","#,
                r#""reason":"ServerTimeout","details":{"name":"n","uid":"u-1","causes":[{"field":"f"}],"#,
                r#""retryAfterSeconds":3},"code":500}"#,
                "\n"
            )
        );
        // omitempty: empty strings, an empty cause list and a zero hint are left out; an empty
        // details struct behind its pointer is not.
        details = StatusDetails {
            name: Some(String::new()),
            causes: Some(Vec::new()),
            retry_after_seconds: Some(0),
            ..StatusDetails::default()
        };
        assert_eq!(
            body_text(&ApiError::new(404, Reason::NotFound, "gone", Some(details))),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"gone","#,
                r#""reason":"NotFound","details":{},"code":404}"#,
                "\n"
            )
        );
        assert_eq!(
            body_text(&ApiError::too_many_requests("slow down", 1)),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"slow down","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}"#,
                "\n"
            )
        );
        // No reason, no details.
        assert_eq!(
            body_text(&ApiError::new(418, Reason::Unknown, "teapot", None)),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"teapot","code":418}"#,
                "\n"
            )
        );
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let e = ApiError::internal_error("a<b && c>d \"q\" \\ \u{1}\u{8}\u{c}\n\t é \u{2028}");
        let escaped = r#"a\u003cb \u0026\u0026 c\u003ed \"q\" \\ \u0001\b\f\n\t é \u2028"#;
        assert_eq!(
            body_text(&e),
            format!(
                "{}{escaped}{}{escaped}{}\n",
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error occurred: "#,
                r#"","reason":"InternalError","details":{"causes":[{"message":""#,
                r#""}]},"code":500}"#,
            )
        );
        // And it is still the same Status to a JSON reader.
        let read: Status = serde_json::from_slice(&e.to_body()).unwrap();
        assert_eq!(read, e.to_status());
    }

    #[test]
    fn success_and_list_metadata_in_go_field_order() {
        let mut s = success();
        s.code = Some(201);
        s.metadata.resource_version = Some("7".into());
        s.metadata.continue_ = Some("c".into());
        s.metadata.self_link = Some("/x".into());
        s.metadata.remaining_item_count = Some(2);
        assert_eq!(
            String::from_utf8(status_body(&s)).unwrap(),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{"selfLink":"/x","resourceVersion":"7","#,
                r#""continue":"c","remainingItemCount":2},"status":"Success","code":201}"#,
                "\n"
            )
        );
    }
}

//! The API server's errors, and the one place they become Kubernetes `Status` responses.
//!
//! Every error becomes a [`skiff_meta::status::ApiError`] ([`Error::to_api_error`]) and so the
//! body kube-apiserver writes for it ([`Error::body`]): members in Go's field order, names of
//! grouped resources and kinds with their group (`deployments.apps "web" already exists`).

use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
use serde_json::Value;
use skiff_meta::ResourceInfo;
use skiff_meta::status::{ApiError, GroupKind, GroupResource, Reason, quote};

/// One cause of an `Invalid` error: a field path, a cause reason and the message without the
/// field path (`Invalid value: "x": ...`), as `metav1.StatusCause` carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The field path, e.g. `metadata.name`.
    pub field: String,
    /// The cause reason, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// The field error's message without its field path.
    pub message: String,
}

/// What a request failed with. Every variant maps to one HTTP status and `Status` reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such object.
    #[error("{} {} not found", GroupResource::new(group, resource), quote(name))]
    NotFound {
        /// The resource's group.
        group: String,
        /// The plural resource name.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// The URL names no served resource or route.
    #[error("the server could not find the requested resource")]
    NoRoute,
    /// Create of a name that exists.
    #[error(
        "{} {} already exists",
        GroupResource::new(group, resource),
        quote(name)
    )]
    AlreadyExists {
        /// The resource's group.
        group: String,
        /// The plural resource name.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// A write based on a stale resourceVersion, or another precondition that failed.
    #[error(
        "Operation cannot be fulfilled on {} {}: {message}",
        GroupResource::new(group, resource),
        quote(name)
    )]
    Conflict {
        /// The resource's group.
        group: String,
        /// The plural resource name.
        resource: String,
        /// The object's name.
        name: String,
        /// Why.
        message: String,
    },
    /// The object is invalid.
    #[error("{}", invalid_message(group, kind, name, causes))]
    Invalid {
        /// The group of the kind.
        group: String,
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
        /// What is wrong, field by field.
        causes: Vec<Cause>,
    },
    /// A malformed request.
    #[error("{0}")]
    BadRequest(String),
    /// No or a wrong bearer token.
    #[error("Unauthorized")]
    Unauthorized,
    /// The user may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The verb is not served on this path.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// The Accept header asks for nothing the server speaks.
    #[error("{0}")]
    NotAcceptable(String),
    /// The request body's Content-Type is not served here.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The requested history is gone.
    #[error("{0}")]
    Gone(String),
    /// The request body is over the limit.
    #[error("Request entity too large: limit is {limit}")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A resourceVersion the server has not reached yet.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The version asked for.
        requested: u64,
        /// The current version.
        current: u64,
    },
    /// Something broke inside the server.
    #[error("{0}")]
    Internal(String),
    /// The server cannot serve the request now (for example while shutting down, or its
    /// datastore has no quorum).
    #[error("{0}")]
    Unavailable(String),
    /// The datastore did not answer in time; a write may still have committed.
    #[error("{0}")]
    StorageTimeout(String),
    /// The disk holding the log is full: the write was not applied (nothing acknowledged is
    /// lost, and writes succeed again once there is space, without a restart).
    #[error(
        "insufficient storage: the write was not applied, the disk holding the datastore is full; free space there and retry ({0})"
    )]
    InsufficientStorage(String),
    /// A `Status` built elsewhere (patches, selectors), passed through as it is.
    #[error("{0}")]
    Api(#[from] skiff_meta::status::ApiError),
}

/// `NewInvalid`'s message: `Deployment.apps "web" is invalid: <causes>`.
fn invalid_message(group: &str, kind: &str, name: &str, causes: &[Cause]) -> String {
    let gk = GroupKind::new(group, kind);
    if causes.is_empty() {
        format!("{gk} {} is invalid", quote(name))
    } else {
        format!("{gk} {} is invalid: {}", quote(name), aggregate(causes))
    }
}

/// Kubernetes' `utilerrors.Aggregate` wording: one error as it is, several in brackets.
fn aggregate(causes: &[Cause]) -> String {
    let all: Vec<String> = causes
        .iter()
        .map(|c| {
            if c.field.is_empty() {
                c.message.clone()
            } else {
                format!("{}: {}", c.field, c.message)
            }
        })
        .collect();
    match all.len() {
        1 => all.into_iter().next().unwrap_or_default(),
        _ => format!("[{}]", all.join(", ")),
    }
}

/// The API server's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A NotFound for an object of `info`.
    pub fn not_found(info: &ResourceInfo, name: &str) -> Error {
        Error::NotFound {
            group: info.group.to_string(),
            resource: info.plural.to_string(),
            name: name.to_string(),
        }
    }

    /// An AlreadyExists for an object of `info`.
    pub fn already_exists(info: &ResourceInfo, name: &str) -> Error {
        Error::AlreadyExists {
            group: info.group.to_string(),
            resource: info.plural.to_string(),
            name: name.to_string(),
        }
    }

    /// The optimistic-concurrency Conflict Kubernetes returns for a stale resourceVersion.
    pub fn stale(info: &ResourceInfo, name: &str) -> Error {
        Error::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// A Conflict with a message of the caller's.
    pub fn conflict(info: &ResourceInfo, name: &str, message: impl Into<String>) -> Error {
        Error::Conflict {
            group: info.group.to_string(),
            resource: info.plural.to_string(),
            name: name.to_string(),
            message: message.into(),
        }
    }

    /// 422 Invalid for an object of `info`, one cause per field error.
    pub fn invalid_fields(
        info: &ResourceInfo,
        name: &str,
        errors: &[skiff_meta::status::FieldError],
    ) -> Error {
        let causes = errors
            .iter()
            .map(|e| Cause {
                field: e.field.clone(),
                reason: e.reason().to_string(),
                message: e.body(),
            })
            .collect();
        Error::invalid(info, name, causes)
    }

    /// An Invalid error for an object of `info`.
    pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> Error {
        Error::Invalid {
            group: info.group.to_string(),
            kind: info.kind.to_string(),
            name: name.to_string(),
            causes,
        }
    }

    /// An Invalid error with one cause.
    pub fn invalid_field(
        info: &ResourceInfo,
        name: &str,
        field: &str,
        reason: &str,
        message: impl Into<String>,
    ) -> Error {
        Error::invalid(
            info,
            name,
            vec![Cause {
                field: field.to_string(),
                reason: reason.to_string(),
                message: message.into(),
            }],
        )
    }

    /// The HTTP status code.
    pub fn code(&self) -> StatusCode {
        match self {
            Error::NotFound { .. } | Error::NoRoute => StatusCode::NOT_FOUND,
            Error::AlreadyExists { .. } | Error::Conflict { .. } => StatusCode::CONFLICT,
            Error::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::Gone(_) => StatusCode::GONE,
            Error::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::TooLargeResourceVersion { .. } => StatusCode::GATEWAY_TIMEOUT,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::StorageTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            // 507 rather than 503: the server is up and serves reads; only writes fail, and for
            // a reason RFC 4918 names exactly ("unable to store the representation"). 503 would
            // also read as "this server is down" to load balancers and readiness checks.
            // (kube-apiserver over a full etcd answers 500 with etcd's "database space
            // exceeded"; both codes are >= 500, so client-go still honours Retry-After.)
            Error::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
            Error::Api(e) => {
                StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }

    /// The `Status` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotFound { .. } | Error::NoRoute => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } => "Conflict",
            Error::Invalid { .. } => "Invalid",
            Error::BadRequest(_) => "BadRequest",
            Error::Unauthorized => "Unauthorized",
            Error::Forbidden(_) => "Forbidden",
            Error::MethodNotAllowed => "MethodNotAllowed",
            Error::NotAcceptable(_) => "NotAcceptable",
            Error::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Error::Gone(_) => "Expired",
            Error::TooLarge { .. } => "RequestEntityTooLarge",
            Error::TooLargeResourceVersion { .. } => "Timeout",
            Error::Internal(_) => "InternalError",
            Error::Unavailable(_) => "ServiceUnavailable",
            Error::StorageTimeout(_) => "Timeout",
            // Kubernetes has no reason for 507; Go's `NewGenericServerResponse` leaves it empty.
            Error::InsufficientStorage(_) => "",
            Error::Api(_) => "",
        }
    }

    /// This error as the shared `Status` error type, with the details Kubernetes sends for it.
    pub fn to_api_error(&self) -> ApiError {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let code = self.code().as_u16();
        let message = self.to_string();
        let details = match self {
            Error::Api(e) => return e.clone(),
            Error::NotFound {
                group,
                resource,
                name,
            }
            | Error::AlreadyExists {
                group,
                resource,
                name,
            }
            | Error::Conflict {
                group,
                resource,
                name,
                ..
            } => Some(StatusDetails {
                name: opt(name),
                group: opt(group),
                kind: opt(resource),
                ..StatusDetails::default()
            }),
            Error::Invalid {
                group,
                kind,
                name,
                causes,
            } => Some(StatusDetails {
                name: opt(name),
                group: opt(group),
                kind: opt(kind),
                causes: Some(
                    causes
                        .iter()
                        .map(|c| StatusCause {
                            reason: opt(&c.reason),
                            message: opt(&c.message),
                            field: opt(&c.field),
                        })
                        .collect(),
                ),
                ..StatusDetails::default()
            }),
            Error::TooLargeResourceVersion { .. } => Some(StatusDetails {
                retry_after_seconds: Some(1),
                ..StatusDetails::default()
            }),
            // client-go retries a >= 500 answer with Retry-After up to 10 times: 1 s keeps
            // kubectl's wait short when the disk stays full, and a retried write is safe since
            // this one was not applied.
            Error::InsufficientStorage(_) => Some(StatusDetails {
                retry_after_seconds: Some(1),
                ..StatusDetails::default()
            }),
            // kube-apiserver's 404 for a path it does not serve has empty details.
            Error::NoRoute => Some(StatusDetails::default()),
            _ => None,
        };
        ApiError::new(code, Reason::parse(self.reason()), message, details)
    }

    /// The `metav1.Status` body for this error, as JSON.
    pub fn to_status(&self) -> Value {
        self.to_api_error().to_json()
    }

    /// The `metav1.Status` body for this error, byte for byte as kube-apiserver writes it.
    pub fn body(&self) -> Vec<u8> {
        self.to_api_error().to_body()
    }
}

impl From<skiff_store::Error> for Error {
    fn from(e: skiff_store::Error) -> Error {
        use skiff_store::Error as S;
        match e {
            S::Compacted {
                requested,
                compacted,
                ..
            } => Error::Gone(format!(
                "too old resource version: {requested} ({compacted})"
            )),
            S::FutureRevision { requested, current } => Error::TooLargeResourceVersion {
                requested: requested.0,
                current: current.0,
            },
            S::ValueTooLarge { limit, .. } => Error::TooLarge { limit },
            S::Closed => Error::Unavailable("the server is shutting down".into()),
            S::NoSpace(e) => Error::InsufficientStorage(e.to_string()),
            e @ S::Unavailable { .. } => Error::Unavailable(e.to_string()),
            e @ S::Timeout { .. } => Error::StorageTimeout(e.to_string()),
            other => Error::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(e: &Error) -> String {
        String::from_utf8(e.body()).unwrap()
    }

    // Expected bodies: metav1.Status in Go's field order (kind, apiVersion, metadata, status,
    // message, reason, details{name, group, kind, uid, causes, retryAfterSeconds}, code), as
    // kube-apiserver's JSON encoder writes it, newline included.

    #[test]
    fn grouped_resources_are_named_with_their_group() {
        let deployments = &skiff_kinds::builtin::deployment::INFO;
        assert_eq!(
            body(&Error::already_exists(deployments, "web")),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"deployments.apps \"web\" already exists","reason":"AlreadyExists","#,
                r#""details":{"name":"web","group":"apps","kind":"deployments"},"code":409}"#,
                "\n"
            )
        );
        assert_eq!(
            Error::not_found(deployments, "web").to_string(),
            r#"deployments.apps "web" not found"#
        );
        assert_eq!(
            Error::stale(deployments, "web").to_string(),
            r#"Operation cannot be fulfilled on deployments.apps "web": the object has been modified; please apply your changes to the latest version and try again"#
        );
        // A custom resource is named the same way.
        let widgets = &crate::test_kinds::INFO;
        assert_eq!(
            body(&Error::not_found(widgets, "w")),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"widgets.example.com \"w\" not found","reason":"NotFound","#,
                r#""details":{"name":"w","group":"example.com","kind":"widgets"},"code":404}"#,
                "\n"
            )
        );
        // Names are quoted as Go's %q quotes them.
        assert_eq!(
            Error::not_found(&skiff_kinds::builtin::pod::INFO, "a\"b").to_string(),
            r#"pods "a\"b" not found"#
        );
    }

    #[test]
    fn invalid_names_the_group_kind_and_lists_causes_in_order() {
        let deployments = &skiff_kinds::builtin::deployment::INFO;
        let e = Error::invalid_field(
            deployments,
            "web",
            "spec.replicas",
            "FieldValueInvalid",
            "Invalid value: -1: must be greater than or equal to 0",
        );
        assert_eq!(
            body(&e),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0","#,
                r#""reason":"Invalid","details":{"name":"web","group":"apps","kind":"Deployment","#,
                r#""causes":[{"reason":"FieldValueInvalid","message":"Invalid value: -1: must be greater than or equal to 0","#,
                r#""field":"spec.replicas"}]},"code":422}"#,
                "\n"
            )
        );
    }

    #[test]
    fn routes_timeouts_and_plain_errors_in_go_field_order() {
        assert_eq!(
            body(&Error::NoRoute),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"the server could not find the requested resource","reason":"NotFound","#,
                r#""details":{},"code":404}"#,
                "\n"
            )
        );
        assert_eq!(
            body(&Error::TooLargeResourceVersion {
                requested: 9,
                current: 3
            }),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"Too large resource version: 9, current: 3","reason":"Timeout","#,
                r#""details":{"retryAfterSeconds":1},"code":504}"#,
                "\n"
            )
        );
        assert_eq!(
            body(&Error::BadRequest("bad <input> & more".into())),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
                r#""message":"bad \u003cinput\u003e \u0026 more","reason":"BadRequest","code":400}"#,
                "\n"
            )
        );
    }

    #[test]
    fn not_found_status_has_kubernetes_shape() {
        let pods = &skiff_kinds::builtin::pod::INFO;
        let status = Error::not_found(pods, "nginx").to_status();
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["message"], "pods \"nginx\" not found");
        assert_eq!(status["details"], json!({"name": "nginx", "kind": "pods"}));
    }

    #[test]
    fn invalid_status_lists_causes() {
        let cm = &skiff_kinds::builtin::config_map::INFO;
        let e = Error::invalid_field(
            cm,
            "Bad_Name",
            "metadata.name",
            "FieldValueInvalid",
            "Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain ...",
        );
        let status = e.to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["details"]["kind"], "ConfigMap");
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: ")
        );
    }

    #[test]
    fn compacted_store_error_is_gone_expired() {
        let e: Error = skiff_store::Error::Compacted {
            requested: skiff_store::Revision(3),
            compacted: skiff_store::Revision(9),
            prefix: None,
        }
        .into();
        assert_eq!(e.code(), StatusCode::GONE);
        assert_eq!(e.reason(), "Expired");
        assert_eq!(e.to_string(), "too old resource version: 3 (9)");
        let e: Error = skiff_store::Error::Unavailable {
            reason: "no leader".into(),
            source: None,
        }
        .into();
        assert_eq!(
            (e.code(), e.reason()),
            (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable")
        );
        let e: Error = skiff_store::Error::Timeout {
            what: "put".into(),
            after: std::time::Duration::from_secs(5),
        }
        .into();
        assert_eq!(
            (e.code(), e.reason()),
            (StatusCode::GATEWAY_TIMEOUT, "Timeout")
        );
        // A value over etcd's request limit: 413 as kube-apiserver words it.
        let e: Error = skiff_store::Error::ValueTooLarge {
            size: 2 << 20,
            limit: 1536 * 1024,
        }
        .into();
        assert_eq!(
            (e.code(), e.reason()),
            (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge")
        );
        assert_eq!(e.to_string(), "Request entity too large: limit is 1572864");
    }

    #[test]
    fn a_full_disk_is_507_with_a_retry_hint_and_says_the_write_was_not_applied() {
        let e: Error = skiff_store::Error::NoSpace(std::io::Error::from_raw_os_error(28)).into();
        assert_eq!(e.code(), StatusCode::INSUFFICIENT_STORAGE);
        let status = e.to_status();
        assert_eq!(status["code"], 507);
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        assert!(status.get("reason").is_none(), "{status}");
        let message = status["message"].as_str().unwrap();
        assert!(message.contains("the write was not applied"), "{message}");
        assert!(message.contains("No space left on device"), "{message}");
        let response = crate::routes::error_response(&e);
        assert_eq!(response.status(), 507);
        assert_eq!(response.headers()["retry-after"], "1");
    }
}

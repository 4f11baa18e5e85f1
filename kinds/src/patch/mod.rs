//! Applying PATCH bodies to a live object: JSON patch (RFC 6902), JSON merge patch (RFC 7386),
//! strategic merge patch and server-side apply, with the errors and status codes Kubernetes
//! gives, and the `metadata.managedFields` bookkeeping every write does.
//!
//! The handler calls [`PatchType::from_content_type`] (415 on anything else), then [`apply`]
//! with the live object, or [`server_side_apply`] when the object may not exist yet. Any
//! [`Error`] converts into the `Status` to send with [`Error::to_api_error`]. Non-apply writes
//! (create, update, and the patches here) record an `Update` entry with [`record_update`].
//!
//! # Layout
//! - [`schema`]: merge keys, patch strategies and list types of the served kinds.
//! - [`strategic`]: strategic merge patch and its directives.
//! - [`managed`]: field sets in the `FieldsV1` format and the `managedFields` entries.
//! - [`ssa`]: server-side apply (merge, pruning, conflicts).

pub mod generated;
pub mod managed;
pub mod schema;
pub mod ssa;
pub mod strategic;

use serde_json::Value;

use crate::Kind;
use skiff_meta::status::{
    ApiError, FieldError, GroupKind, GroupResource, Reason, aggregate_messages,
};

pub use managed::record_update;
pub use ssa::server_side_apply;

/// The most operations Kubernetes accepts in one JSON patch.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The PATCH content types served, in the order Kubernetes lists them in a 415.
pub const ACCEPTED_CONTENT_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// The kind of a PATCH body, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// `application/apply-patch+yaml` (server-side apply; the body may be JSON or YAML).
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` header value (parameters such as `; charset=utf-8`
    /// are ignored); anything else is an [`Error::UnsupportedMediaType`] (415).
    pub fn from_content_type(content_type: &str) -> Result<Self> {
        let base = match content_type.find(';') {
            Some(i) if i > 0 => &content_type[..i],
            _ => content_type,
        };
        match base.trim() {
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Ok(PatchType::Apply),
            other => Err(Error::UnsupportedMediaType(other.to_string())),
        }
    }

    /// The content type.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => ACCEPTED_CONTENT_TYPES[0],
            PatchType::Merge => ACCEPTED_CONTENT_TYPES[1],
            PatchType::StrategicMerge => ACCEPTED_CONTENT_TYPES[2],
            PatchType::Apply => ACCEPTED_CONTENT_TYPES[3],
        }
    }
}

/// The options of a PATCH (its query parameters, resolved).
#[derive(Debug, Clone)]
pub struct Options<'a> {
    /// The field manager: the `fieldManager` parameter, or a name derived from the user agent
    /// for non-apply patches. Required (non-empty) for apply patches.
    pub field_manager: &'a str,
    /// `force=true`: an apply takes over conflicting fields instead of failing.
    pub force: bool,
    /// The subresource patched (`status`, `scale`), if any.
    pub subresource: Option<&'a str>,
    /// The time recorded in `managedFields` entries.
    pub now: jiff::Timestamp,
}

impl<'a> Options<'a> {
    /// Options for `field_manager` at the current time, no force, no subresource.
    pub fn new(field_manager: &'a str) -> Self {
        Options {
            field_manager,
            force: false,
            subresource: None,
            now: jiff::Timestamp::now(),
        }
    }
}

/// Why a patch could not be applied. Each variant maps to the status Kubernetes answers with
/// ([`Error::to_api_error`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// 415: a `Content-Type` that is not a patch type.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: {}",
        ACCEPTED_CONTENT_TYPES.join(", ")
    )]
    UnsupportedMediaType(String),
    /// 400: an undecodable body or a malformed directive.
    #[error("{0}")]
    BadRequest(String),
    /// 422: the patch is well formed but cannot be applied to this object (a JSON patch path
    /// that does not exist, a merge key missing from a list item, ...).
    #[error("{0}")]
    Unprocessable(String),
    /// 422: a JSON patch `test` operation found a different value.
    #[error("the test operation {operation} at path '{path}' failed: value did not match")]
    TestFailed {
        /// The index of the operation in the patch.
        operation: usize,
        /// Its JSON pointer.
        path: String,
    },
    /// 413: more than [`MAX_JSON_PATCH_OPERATIONS`] operations.
    #[error(
        "Request entity too large: The allowed maximum operations in a JSON patch is {max}, got {got}"
    )]
    TooManyOperations {
        /// The limit.
        max: usize,
        /// The operations in the patch.
        got: usize,
    },
    /// 422 on `PatchOptions`: invalid query parameters (`fieldManager` missing for an apply,
    /// `force` on a non-apply patch).
    #[error("PatchOptions.meta.k8s.io \"\" is invalid: {}", aggregate_messages(.0.iter().map(|e| e.to_string())))]
    InvalidOptions(Vec<FieldError>),
    /// 409: a server-side apply touches fields other managers own.
    #[error("{}", .0.message())]
    Conflict(ssa::Conflicts),
}

/// `pub type Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The `Status` to answer with (also `ApiError::from(&err)`).
    pub fn to_api_error(&self) -> ApiError {
        self.into()
    }

    /// The HTTP status code this error maps to.
    pub fn code(&self) -> u16 {
        self.to_api_error().code()
    }
}

impl From<&Error> for ApiError {
    fn from(e: &Error) -> ApiError {
        match e {
            Error::UnsupportedMediaType(_) => {
                ApiError::unsupported_media_type(ACCEPTED_CONTENT_TYPES)
            }
            Error::BadRequest(m) => ApiError::bad_request(m.clone()),
            Error::Unprocessable(m) => unprocessable(m),
            Error::TestFailed { .. } => unprocessable(&e.to_string()),
            Error::TooManyOperations { max, got } => ApiError::request_entity_too_large(format!(
                "The allowed maximum operations in a JSON patch is {max}, got {got}"
            )),
            Error::InvalidOptions(errs) => {
                ApiError::invalid(GroupKind::new("meta.k8s.io", "PatchOptions"), "", errs)
            }
            Error::Conflict(c) => ApiError::apply_conflict(c.causes(), c.message()),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        ApiError::from(&e)
    }
}

/// Kubernetes answers an unappliable patch with a generic 422 (`NewGenericServerResponse`);
/// the detail rides along as the only cause so that it is not lost.
fn unprocessable(detail: &str) -> ApiError {
    let generic = ApiError::generic_server_response(422, "", GroupResource::default(), "", detail);
    let mut details = generic.details().cloned().unwrap_or_default();
    details.causes = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause {
            reason: Some("FieldValueInvalid".to_string()),
            message: Some(detail.to_string()),
            field: None,
        },
    ]);
    ApiError::new(422, Reason::Invalid, generic.message(), Some(details))
}

/// Checks the options as `ValidatePatchOptions`: an apply needs a field manager, `force` is
/// only for applies.
pub fn validate_options(patch_type: PatchType, options: &Options<'_>) -> Result<()> {
    let mut errs = Vec::new();
    if patch_type == PatchType::Apply {
        if options.field_manager.is_empty() {
            errs.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
    } else if options.force {
        errs.push(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    if options.field_manager.chars().count() > 128 {
        errs.push(FieldError::too_long("fieldManager", 128));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Error::InvalidOptions(errs))
    }
}

/// Applies a PATCH body of `patch_type` to the live object of `resource` and returns the
/// patched object, with `metadata.managedFields` updated for `options.field_manager` (an
/// `Update` entry, or the `Apply` entry for server-side apply).
///
/// The caller still validates the result (kind, name, immutable fields) and stores it.
pub fn apply(
    kind: &dyn Kind,
    live: &Value,
    patch_type: PatchType,
    body: &[u8],
    options: &Options<'_>,
) -> Result<Value> {
    validate_options(patch_type, options)?;
    let patched = match patch_type {
        PatchType::Json => json_patch(live, body)?,
        PatchType::Merge => merge_patch(live, body)?,
        PatchType::StrategicMerge => {
            // Kubernetes has no strategic merge patch for kinds without Go types (custom
            // resources): 415, as it answers.
            let schema = kind
                .merge_schema()
                .ok_or_else(|| Error::UnsupportedMediaType(patch_type.content_type().into()))?;
            strategic::apply(live, body, schema)?
        }
        PatchType::Apply => return server_side_apply(kind, Some(live), body, options),
    };
    Ok(record_update(kind, Some(live), patched, options))
}

/// Applies an RFC 6902 JSON patch. Undecodable patches are 400; operations that cannot apply
/// are 422, a failed `test` is [`Error::TestFailed`].
pub fn json_patch(live: &Value, body: &[u8]) -> Result<Value> {
    let ops: json_patch::Patch = serde_json::from_slice(body)
        .map_err(|e| Error::BadRequest(format!("error decoding patch: {e}")))?;
    if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(Error::TooManyOperations {
            max: MAX_JSON_PATCH_OPERATIONS,
            got: ops.0.len(),
        });
    }
    let mut doc = live.clone();
    json_patch::patch(&mut doc, &ops).map_err(|e| {
        // A `test` of a path that does not exist fails like a value mismatch, as in
        // Kubernetes (evanphx/json-patch).
        let is_test = matches!(
            ops.0.get(e.operation),
            Some(json_patch::PatchOperation::Test(_))
        );
        if is_test || matches!(e.kind, json_patch::PatchErrorKind::TestFailed) {
            Error::TestFailed {
                operation: e.operation,
                path: e.path.to_string(),
            }
        } else {
            Error::Unprocessable(e.to_string())
        }
    })?;
    Ok(doc)
}

/// Applies an RFC 7386 JSON merge patch. Invalid JSON is 400; a patch that is not an object
/// would replace the whole object and is 422.
pub fn merge_patch(live: &Value, body: &[u8]) -> Result<Value> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| Error::BadRequest(format!("error decoding patch: {e}")))?;
    if !patch.is_object() {
        return Err(Error::Unprocessable(format!(
            "a merge patch must be a JSON object, got {}",
            kind_name(&patch)
        )));
    }
    let mut doc = live.clone();
    json_patch::merge(&mut doc, &patch);
    Ok(doc)
}

/// Go's name for the type of a decoded JSON value, as its error messages print it.
pub(crate) fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A small deterministic generator of JSON documents for the property tests of this module
/// (no extra dependency: a xorshift over fixed seeds).
#[cfg(test)]
pub(crate) mod testgen {
    use serde_json::{Map, Value, json};

    /// xorshift64*.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        pub fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
            &items[self.below(items.len() as u64) as usize]
        }

        fn scalar(&mut self) -> Value {
            match self.below(4) {
                0 => json!(self.below(3)),
                1 => json!(self.below(2) == 0),
                _ => json!(*self.pick(&["x", "y", ""])),
            }
        }

        /// An object of scalars and objects, keys from a small alphabet.
        pub fn object(&mut self, depth: u32) -> Value {
            let mut m = Map::new();
            for _ in 0..self.below(4) {
                let k = self.pick(&["a", "b", "c", "d"]).to_string();
                let v = if depth > 0 && self.below(3) == 0 {
                    self.object(depth - 1)
                } else {
                    self.scalar()
                };
                m.insert(k, v);
            }
            Value::Object(m)
        }

        /// Like [`Rng::object`], with nulls.
        pub fn patch(&mut self, depth: u32) -> Value {
            let mut m = Map::new();
            for _ in 0..self.below(4) {
                let k = self.pick(&["a", "b", "c", "d"]).to_string();
                let v = match self.below(4) {
                    0 => Value::Null,
                    1 if depth > 0 => self.patch(depth - 1),
                    _ => self.scalar(),
                };
                m.insert(k, v);
            }
            Value::Object(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> &'static dyn Kind {
        &crate::builtin::pod::Pod
    }

    fn opts(manager: &str) -> Options<'_> {
        Options {
            field_manager: manager,
            force: false,
            subresource: None,
            now: "2026-11-30T10:00:00Z".parse().unwrap(),
        }
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}
        })
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json").unwrap(),
            PatchType::Json
        );
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(),
            PatchType::Merge
        );
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json").unwrap(),
            PatchType::StrategicMerge
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml").unwrap(),
            PatchType::Apply
        );
        for t in [
            PatchType::Json,
            PatchType::Merge,
            PatchType::StrategicMerge,
            PatchType::Apply,
        ] {
            assert_eq!(PatchType::from_content_type(t.content_type()).unwrap(), t);
        }
        let e = PatchType::from_content_type("application/json").unwrap_err();
        let status = ApiError::from(&e);
        assert_eq!(status.code(), 415);
        assert_eq!(status.reason(), &Reason::UnsupportedMediaType);
        assert_eq!(
            status.message(),
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
        );
    }

    #[test]
    fn json_patch_ops_and_errors() {
        let body = br#"[{"op":"replace","path":"/spec/containers/0/image","value":"nginx:1.28"},
                        {"op":"add","path":"/metadata/labels/tier","value":"fe"},
                        {"op":"test","path":"/metadata/name","value":"nginx"}]"#;
        let out = apply(pods(), &pod(), PatchType::Json, body, &opts("m")).unwrap();
        assert_eq!(out["spec"]["containers"][0]["image"], "nginx:1.28");
        assert_eq!(out["metadata"]["labels"]["tier"], "fe");

        let failed = json_patch(
            &pod(),
            br#"[{"op":"test","path":"/metadata/name","value":"other"}]"#,
        )
        .unwrap_err();
        assert_eq!(
            failed,
            Error::TestFailed {
                operation: 0,
                path: "/metadata/name".into()
            }
        );
        assert_eq!(failed.code(), 422);
        let missing_test = json_patch(
            &pod(),
            br#"[{"op":"add","path":"/metadata/labels/x","value":"1"},
                 {"op":"test","path":"/spec/nope","value":"x"}]"#,
        )
        .unwrap_err();
        assert_eq!(
            missing_test,
            Error::TestFailed {
                operation: 1,
                path: "/spec/nope".into()
            }
        );

        let missing = json_patch(
            &pod(),
            br#"[{"op":"replace","path":"/spec/nope/x","value":1}]"#,
        )
        .unwrap_err();
        assert!(matches!(missing, Error::Unprocessable(_)), "{missing:?}");
        let status = ApiError::from(&missing);
        assert_eq!(
            (status.code(), status.message()),
            (
                422,
                "the server rejected our request due to an error in our request"
            )
        );

        let bad = json_patch(&pod(), br#"{"op":"add"}"#).unwrap_err();
        assert!(matches!(bad, Error::BadRequest(ref m) if m.starts_with("error decoding patch: ")));
        assert_eq!(bad.code(), 400);
        let bad_op = json_patch(&pod(), br#"[{"op":"frobnicate","path":"/a"}]"#).unwrap_err();
        assert_eq!(bad_op.code(), 400);

        let many: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "/kind", "value": "Pod"}))
            .collect();
        let e = json_patch(&pod(), &serde_json::to_vec(&many).unwrap()).unwrap_err();
        assert_eq!(e.code(), 413);
        assert_eq!(
            ApiError::from(&e).message(),
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
    }

    #[test]
    fn merge_patch_as_kubectl_label_and_scale_send_it() {
        let out = apply(
            pods(),
            &pod(),
            PatchType::Merge,
            br#"{"metadata":{"labels":{"k":"v"}}}"#,
            &opts("kubectl-label"),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"app": "web", "k": "v"}));
        let out = merge_patch(&out, br#"{"metadata":{"labels":{"k":null}}}"#).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
        // A merge patch replaces lists whole.
        let out = merge_patch(
            &pod(),
            br#"{"spec":{"containers":[{"name":"other","image":"busybox"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name":"other","image":"busybox"}])
        );
        assert_eq!(merge_patch(&pod(), b"{nope").unwrap_err().code(), 400);
        assert_eq!(merge_patch(&pod(), b"[1]").unwrap_err().code(), 422);
    }

    #[test]
    fn non_apply_patches_record_an_update_entry() {
        let out = apply(
            pods(),
            &pod(),
            PatchType::Merge,
            br#"{"metadata":{"labels":{"k":"v"}}}"#,
            &opts("kubectl-label"),
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl-label", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:k": {}}}}
            }])
        );
    }

    #[test]
    fn options_are_validated_like_kubernetes() {
        let e = apply(pods(), &pod(), PatchType::Apply, b"{}", &opts("")).unwrap_err();
        let status = ApiError::from(&e);
        assert_eq!(status.code(), 422);
        assert_eq!(
            status.message(),
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
        );
        assert_eq!(e.to_string(), status.message());
        let mut forced = opts("m");
        forced.force = true;
        let e = apply(pods(), &pod(), PatchType::Merge, b"{}", &forced).unwrap_err();
        assert_eq!(
            e.to_string(),
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
        );
    }
}

//! Field errors: the Rust twin of apimachinery's `field.Error`, formatted exactly as Kubernetes
//! formats it, plus the small path builder the validators use.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
use serde_json::Value;

/// What is wrong with a field (apimachinery's `field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    /// A referenced thing does not exist.
    NotFound,
    /// A required value is missing.
    Required,
    /// A value that must be unique is repeated.
    Duplicate,
    /// A value is malformed or out of range.
    Invalid,
    /// A value is not one of a fixed set; the detail lists the supported ones.
    NotSupported,
    /// A value is valid in general but not allowed here (or not allowed to change).
    Forbidden,
    /// A value is too long.
    TooLong,
    /// A list has too many items.
    TooMany,
    /// Validation itself failed.
    Internal,
}

impl FieldErrorKind {
    /// The words Kubernetes prints for the kind (`Invalid value`, `Required value`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "Not found",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Invalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Internal => "Internal error",
        }
    }

    /// The `reason` of a `StatusCause` for this kind (`FieldValueInvalid`, ...).
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotFound => "FieldValueNotFound",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Internal => "InternalError",
        }
    }

    /// Whether Kubernetes leaves the bad value out of the message for this kind.
    fn omits_value(self) -> bool {
        matches!(
            self,
            Self::Required | Self::Forbidden | Self::TooLong | Self::Internal
        )
    }
}

impl fmt::Display for FieldErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validation error on one field, as in a `StatusCause` of an `Invalid` (422) Status.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field path (`spec.containers[0].image`, `metadata.labels`).
    pub field: String,
    /// What is wrong.
    pub kind: FieldErrorKind,
    /// The offending value; `None` prints no value (Kubernetes' `<value omitted>`).
    pub bad_value: Option<Value>,
    /// A human explanation; may be empty.
    pub detail: String,
}

impl FieldError {
    fn new(
        kind: FieldErrorKind,
        field: impl Into<String>,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            kind,
            bad_value,
            detail: detail.into(),
        }
    }

    /// `field.NotFound`.
    pub fn not_found(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(FieldErrorKind::NotFound, field, Some(value.into()), "")
    }

    /// `field.Required`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Required, field, None, detail)
    }

    /// `field.Duplicate`.
    pub fn duplicate(field: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(FieldErrorKind::Duplicate, field, Some(value.into()), "")
    }

    /// `field.Invalid`.
    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(FieldErrorKind::Invalid, field, Some(value.into()), detail)
    }

    /// `field.NotSupported`: the detail lists the supported values, each quoted, as Kubernetes does.
    pub fn not_supported(
        field: impl Into<String>,
        value: impl Into<Value>,
        supported: &[&str],
    ) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(
            FieldErrorKind::NotSupported,
            field,
            Some(value.into()),
            detail,
        )
    }

    /// `field.Forbidden`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Forbidden, field, None, detail)
    }

    /// `field.TooLong`: the value is never printed.
    pub fn too_long(field: impl Into<String>, max_length: usize) -> Self {
        Self::new(
            FieldErrorKind::TooLong,
            field,
            None,
            format!("may not be more than {max_length} bytes"),
        )
    }

    /// `field.TooMany`.
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        Self::new(
            FieldErrorKind::TooMany,
            field,
            Some(Value::from(actual)),
            format!("must have at most {max} items"),
        )
    }

    /// `field.InternalError`.
    pub fn internal(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Internal, field, None, detail)
    }

    /// The `reason` of the `StatusCause` for this error.
    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }

    /// The `StatusCause` Kubernetes reports for this error (reason, message body, field).
    pub fn to_cause(&self) -> StatusCause {
        StatusCause {
            field: Some(self.field.clone()),
            message: Some(self.body()),
            reason: Some(self.reason().to_string()),
        }
    }

    /// The message without the field path (`ErrorBody` in Kubernetes), the `message` of a
    /// `StatusCause`.
    pub fn body(&self) -> String {
        let mut s = match (&self.bad_value, self.kind.omits_value()) {
            (Some(value), false) => format!("{}: {}", self.kind, go_value(value)),
            _ => self.kind.as_str().to_string(),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

impl std::error::Error for FieldError {}

/// The message of an `Invalid` Status as the API server writes it:
/// `Deployment.apps "web" is invalid: [spec.replicas: ..., ...]` (a single error unbracketed,
/// duplicates dropped as Kubernetes' aggregate does).
pub fn invalid_message(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> String {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut seen = Vec::new();
    for e in errors {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    let aggregate = match seen.len() {
        1 => seen.pop().unwrap_or_default(),
        _ => format!("[{}]", seen.join(", ")),
    };
    format!("{qualified} {} is invalid: {aggregate}", go_quote(name))
}

/// The Status a Kubernetes API server returns for a create or update that failed validation:
/// 422, reason `Invalid`, the group, kind and name in `details`, one cause per field error.
pub fn invalid_status(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Status {
    Status {
        code: Some(422),
        details: Some(StatusDetails {
            causes: Some(errors.iter().map(FieldError::to_cause).collect()),
            group: Some(group.to_string()),
            kind: Some(kind.to_string()),
            name: Some(name.to_string()),
            retry_after_seconds: None,
            uid: None,
        }),
        message: Some(invalid_message(group, kind, name, errors)),
        metadata: Default::default(),
        reason: Some("Invalid".into()),
        status: Some("Failure".into()),
    }
}

/// A field path under construction: `spec`, `.child("containers")`, `.index(0)`, `.key("cpu")`
/// (the one [`skiff_meta`] defines for every crate that reads Kubernetes `Status` causes).
pub use skiff_meta::status::FieldPath as Path;

/// A string quoted as Go's `%q` / `strconv.Quote` does.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A bad value printed as Kubernetes prints it: strings quoted, numbers and booleans bare,
/// `null`, string maps and lists in Go's `%#v` shape, anything else as compact JSON.
fn go_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(map) if !map.is_empty() && map.values().all(Value::is_string) => {
            // Go prints maps with sorted keys; serde_json's map is sorted already unless
            // `preserve_order` is on, so sort to be sure.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v.as_str().unwrap_or(""))))
                .collect();
            format!("map[string]string{{{}}}", parts.join(", "))
        }
        Value::Array(items) if items.iter().all(Value::is_string) => {
            let parts: Vec<String> = items
                .iter()
                .map(|v| go_quote(v.as_str().unwrap_or("")))
                .collect();
            format!("[]string{{{}}}", parts.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn display_matches_kubernetes() {
        let cases: Vec<(FieldError, &str)> = vec![
            (
                FieldError::required("metadata.name", "name or generateName is required"),
                "metadata.name: Required value: name or generateName is required",
            ),
            (
                FieldError::required("spec.containers", ""),
                "spec.containers: Required value",
            ),
            (
                FieldError::invalid("spec.replicas", -1, "must be greater than or equal to 0"),
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            ),
            (
                FieldError::invalid("spec.x", "a\"b", ""),
                r#"spec.x: Invalid value: "a\"b""#,
            ),
            (
                FieldError::invalid("spec.x", Value::Null, "bad"),
                "spec.x: Invalid value: null: bad",
            ),
            (
                FieldError::invalid("spec.x", true, "bad"),
                "spec.x: Invalid value: true: bad",
            ),
            (
                FieldError::not_supported(
                    "spec.restartPolicy",
                    "Sometimes",
                    &["Always", "OnFailure", "Never"],
                ),
                r#"spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#,
            ),
            (
                FieldError::duplicate("spec.containers[1].name", "web"),
                r#"spec.containers[1].name: Duplicate value: "web""#,
            ),
            (
                FieldError::not_found("spec.containers[0].volumeMounts[0].name", "data"),
                r#"spec.containers[0].volumeMounts[0].name: Not found: "data""#,
            ),
            (
                FieldError::forbidden("metadata.namespace", "not allowed on this type"),
                "metadata.namespace: Forbidden: not allowed on this type",
            ),
            (
                FieldError::too_long("metadata.annotations", 262144),
                "metadata.annotations: Too long: may not be more than 262144 bytes",
            ),
            (
                FieldError::too_many("spec.x", 5, 3),
                "spec.x: Too many: 5: must have at most 3 items",
            ),
            (
                FieldError::internal("spec", "boom"),
                "spec: Internal error: boom",
            ),
            (
                FieldError::invalid(
                    "spec.template.metadata.labels",
                    json!({"b": "2", "a": "1"}),
                    "`selector` does not match template `labels`",
                ),
                r#"spec.template.metadata.labels: Invalid value: map[string]string{"a":"1", "b":"2"}: `selector` does not match template `labels`"#,
            ),
            (
                FieldError::invalid("metadata.finalizers", json!(["a", "b"]), "x"),
                r#"metadata.finalizers: Invalid value: []string{"a", "b"}: x"#,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn reasons() {
        assert_eq!(
            FieldError::invalid("a", 1, "").reason(),
            "FieldValueInvalid"
        );
        assert_eq!(FieldError::required("a", "").reason(), "FieldValueRequired");
        assert_eq!(
            FieldError::not_supported("a", "x", &[]).reason(),
            "FieldValueNotSupported"
        );
        assert_eq!(
            FieldError::forbidden("a", "").reason(),
            "FieldValueForbidden"
        );
        assert_eq!(
            FieldError::duplicate("a", "x").reason(),
            "FieldValueDuplicate"
        );
        assert_eq!(
            FieldError::not_found("a", "x").reason(),
            "FieldValueNotFound"
        );
        assert_eq!(FieldError::too_long("a", 1).reason(), "FieldValueTooLong");
        assert_eq!(
            FieldError::too_many("a", 2, 1).reason(),
            "FieldValueTooMany"
        );
        assert_eq!(FieldError::internal("a", "").reason(), "InternalError");
    }

    #[test]
    fn v1_33_units_and_empty_supported_list() {
        // Kubernetes 1.33 does not singularise the units (later releases do).
        assert_eq!(
            FieldError::too_long("a", 1).to_string(),
            "a: Too long: may not be more than 1 bytes"
        );
        assert_eq!(
            FieldError::too_many("a", 2, 1).to_string(),
            "a: Too many: 2: must have at most 1 items"
        );
        assert_eq!(
            FieldError::not_supported("a", "x", &[]).to_string(),
            r#"a: Unsupported value: "x""#
        );
    }

    #[test]
    fn paths() {
        let p = Path::new("spec")
            .child("containers")
            .index(2)
            .child("resources");
        assert_eq!(p.as_str(), "spec.containers[2].resources");
        assert_eq!(
            p.child("limits").key("cpu").as_str(),
            "spec.containers[2].resources.limits[cpu]"
        );
        assert_eq!(Path::default().child("a").as_str(), "a");
    }

    #[test]
    fn invalid_status_message() {
        let one = [FieldError::required("spec.containers", "")];
        assert_eq!(
            invalid_message("", "Pod", "web", &one),
            r#"Pod "web" is invalid: spec.containers: Required value"#
        );
        let two = [
            FieldError::invalid("spec.replicas", -1, "must be greater than or equal to 0"),
            FieldError::required("spec.selector", ""),
            FieldError::required("spec.selector", ""),
        ];
        assert_eq!(
            invalid_message("apps", "Deployment", "web", &two),
            r#"Deployment.apps "web" is invalid: [spec.replicas: Invalid value: -1: must be greater than or equal to 0, spec.selector: Required value]"#
        );
    }

    #[test]
    fn invalid_status_body() {
        let errs = [FieldError::required("spec.containers", "")];
        let status = serde_json::to_value(invalid_status("", "Pod", "web", &errs)).unwrap();
        assert_eq!(
            status,
            json!({
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Failure",
                "message": "Pod \"web\" is invalid: spec.containers: Required value",
                "reason": "Invalid",
                "details": {
                    "name": "web",
                    "group": "",
                    "kind": "Pod",
                    "causes": [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}]
                },
                "code": 422
            })
        );
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote("a\nb\\c\u{1}"), r#""a\nb\\c\x01""#);
        assert_eq!(go_quote("héllo"), "\"héllo\"");
    }
}

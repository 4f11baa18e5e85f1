//! Field selectors exactly as `k8s.io/apimachinery/pkg/fields.ParseSelector` (`a=b`, `a==b`,
//! `a!=b`, comma separated, `\` escapes), and matching against JSON objects through the
//! per-kind table of selectable fields the Kubernetes registries declare.
//!
//! A field a kind does not declare is rejected with `field label not supported: <field>` (the
//! API server's 400). A declared field that is absent from the object has the value Kubernetes'
//! typed structs would give it: `""` for strings, `false` for booleans, `0` for counts.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::resources::ResourceInfo;
use crate::status::ApiError;

/// Why a field selector was rejected; the Display is Kubernetes' message for the 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A term with no operator.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    Syntax {
        /// The whole selector.
        selector: String,
        /// The term that has no `=`, `==` or `!=`.
        term: String,
    },
    /// A `\` followed by something other than `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// A bare `,` or `=` in a value (Kubernetes prints the character's code point).
    #[error("invalid field selector: unescaped character in value: {}", *.0 as u32)]
    UnescapedRune(char),
    /// A field the kind does not offer for selection.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// `pub type Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<&Error> for ApiError {
    /// A bad or unsupported `fieldSelector` is a 400 BadRequest with the error as its message.
    fn from(e: &Error) -> ApiError {
        ApiError::bad_request(e.to_string())
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        ApiError::from(&e)
    }
}

/// The operator of a term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `=` or `==`.
    Equals,
    /// `!=`.
    NotEquals,
}

/// One term: `field=value` or `field!=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The field label (`metadata.name`).
    pub field: String,
    /// The operator.
    pub operator: Operator,
    /// The value, unescaped.
    pub value: String,
}

impl Requirement {
    /// Whether a field value satisfies the term.
    pub fn matches_value(&self, have: &str) -> bool {
        match self.operator {
            Operator::Equals => have == self.value,
            Operator::NotEquals => have != self.value,
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            Operator::Equals => "=",
            Operator::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// A field selector: the AND of its terms. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Selector::default()
    }

    /// The selector of one `field=value` term.
    pub fn one_term_equal(field: &str, value: &str) -> Self {
        Selector {
            requirements: vec![Requirement {
                field: field.to_string(),
                operator: Operator::Equals,
                value: value.to_string(),
            }],
        }
    }

    /// The terms, in parse order (sorted as Kubernetes sorts the raw terms).
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the selector has no terms.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value an `=` term requires of `field`, for single-object lookups
    /// (`metadata.name=x` on a watch).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == Operator::Equals)
            .map(|r| r.value.as_str())
    }

    /// Checks that every field is selectable on `resource` (`ConvertFieldLabel`).
    pub fn validate(&self, resource: &ResourceInfo) -> Result<()> {
        for r in &self.requirements {
            if !is_supported(resource, &r.field) {
                return Err(Error::UnsupportedField(r.field.clone()));
            }
        }
        Ok(())
    }

    /// Whether a field lookup satisfies every term; `get` gives a field's value.
    pub fn matches_with(&self, get: impl Fn(&str) -> String) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(&get(&r.field)))
    }

    /// Whether an object of `resource` satisfies every term. A field the kind does not support
    /// never matches (call [`Selector::validate`] first to report it).
    pub fn matches(&self, resource: &ResourceInfo, obj: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| match field_value(resource, obj, &r.field) {
                Some(v) => r.matches_value(&v),
                None => false,
            })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for Selector {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        parse(s)
    }
}

/// Escapes `\`, `,` and `=` in a value (`fields.EscapeValue`).
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Reverses [`escape_value`] (`fields.UnescapeValue`).
pub fn unescape_value(s: &str) -> Result<String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                other => return Err(Error::InvalidEscape(format!("\\{other}"))),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(Error::UnescapedRune(c)),
            other => out.push(other),
        }
    }
    if in_slash {
        return Err(Error::InvalidEscape("\\".to_string()));
    }
    Ok(out)
}

/// Splits on commas that are not escaped.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// The first operator in the term, checking `!=`, `==`, `=` at each position.
fn split_term(term: &str) -> Option<(&str, Operator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", Operator::NotEquals),
            ("==", Operator::Equals),
            ("=", Operator::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, value));
            }
        }
    }
    None
}

/// Parses a `fieldSelector` string exactly as `fields.ParseSelector`; the empty string
/// matches everything. Terms are sorted as text first, as Kubernetes does.
pub fn parse(selector: &str) -> Result<Selector> {
    let mut parts = split_terms(selector);
    parts.sort_unstable();
    let mut requirements = Vec::new();
    for part in parts {
        if part.is_empty() {
            continue;
        }
        let Some((lhs, operator, rhs)) = split_term(part) else {
            return Err(Error::Syntax {
                selector: selector.to_string(),
                term: part.to_string(),
            });
        };
        requirements.push(Requirement {
            field: lhs.to_string(),
            operator,
            value: unescape_value(rhs)?,
        });
    }
    Ok(Selector { requirements })
}

/// Parses a selector and checks its fields against `resource` in one step, as the API server
/// does before listing or watching.
pub fn parse_for(resource: &ResourceInfo, selector: &str) -> Result<Selector> {
    let s = parse(selector)?;
    s.validate(resource)?;
    Ok(s)
}

/// How the value of a selectable field is read from an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldSource {
    /// A path of object keys; the default when absent (`""`, `"false"`, `"0"`).
    Path(&'static [&'static str], &'static str),
    /// `status.podIPs[0].ip`, else `status.podIP`.
    PodIp,
    /// `source.component`, else `reportingComponent`.
    EventOrigin,
}

/// A field that field selectors may name, and where its value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SelectableField {
    /// Its label in a selector: `spec.nodeName`.
    pub name: &'static str,
    /// Where its value is read.
    pub source: FieldSource,
}

impl SelectableField {
    /// A field read at `path` (`&["spec", "nodeName"]`), `default` when absent.
    pub const fn path(
        name: &'static str,
        path: &'static [&'static str],
        default: &'static str,
    ) -> SelectableField {
        SelectableField {
            name,
            source: FieldSource::Path(path, default),
        }
    }
}

/// The fields every kind has.
const COMMON: &[SelectableField] = &[
    SelectableField::path("metadata.name", &["metadata", "name"], ""),
    SelectableField::path("metadata.namespace", &["metadata", "namespace"], ""),
];

fn all_fields(resource: &ResourceInfo) -> impl Iterator<Item = &'static SelectableField> {
    COMMON.iter().chain(resource.selectable_fields)
}

fn lookup(resource: &ResourceInfo, field: &str) -> Option<&'static FieldSource> {
    all_fields(resource)
        .find(|f| f.name == field)
        .map(|f| &f.source)
}

fn is_supported(resource: &ResourceInfo, field: &str) -> bool {
    lookup(resource, field).is_some()
}

/// The field labels `resource` supports in field selectors.
pub fn supported_fields(resource: &ResourceInfo) -> Vec<&'static str> {
    all_fields(resource).map(|f| f.name).collect()
}

/// A JSON scalar as the text Kubernetes' field set holds (`fmt.Sprint` of the Go value).
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn at_path<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

/// The value of a selectable field of an object; `None` when `resource` does not support it.
pub fn field_value(resource: &ResourceInfo, obj: &Value, field: &str) -> Option<String> {
    let text = |path: &[&str]| at_path(obj, path).and_then(scalar_text);
    Some(match lookup(resource, field)? {
        FieldSource::Path(path, default) => text(path).unwrap_or_else(|| default.to_string()),
        FieldSource::PodIp => obj
            .pointer("/status/podIPs/0/ip")
            .and_then(scalar_text)
            .or_else(|| text(&["status", "podIP"]))
            .unwrap_or_default(),
        FieldSource::EventOrigin => text(&["source", "component"])
            .filter(|s| !s.is_empty())
            .or_else(|| text(&["reportingComponent"]))
            .unwrap_or_default(),
    })
}

/// The parts of `obj` that any label or field selector of `resource` can read: `metadata.labels`
/// and the source of every selectable field, at the same paths (absent parts stay absent).
/// Selectors match the projection exactly as they match the object, so a cache can keep this
/// instead of the whole decoded object.
pub fn selectable_projection(resource: &ResourceInfo, obj: &Value) -> Value {
    let mut out = Value::Object(serde_json::Map::new());
    copy_path(obj, &mut out, &["metadata", "labels"]);
    for field in all_fields(resource) {
        match field.source {
            FieldSource::Path(path, _) => copy_path(obj, &mut out, path),
            FieldSource::PodIp => {
                copy_path(obj, &mut out, &["status", "podIPs"]);
                copy_path(obj, &mut out, &["status", "podIP"]);
            }
            FieldSource::EventOrigin => {
                copy_path(obj, &mut out, &["source", "component"]);
                copy_path(obj, &mut out, &["reportingComponent"]);
            }
        }
    }
    out
}

/// Copies the value at `path` in `from`, if any, to the same path in `to`, making the objects
/// on the way.
fn copy_path(from: &Value, to: &mut Value, path: &[&str]) {
    let (Some(value), Some((last, parents))) = (at_path(from, path), path.split_last()) else {
        return;
    };
    let mut at = to;
    for key in parents {
        let Some(map) = at.as_object_mut() else {
            return;
        };
        at = map
            .entry(*key)
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    if let Some(map) = at.as_object_mut() {
        map.insert((*last).to_string(), value.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::READ_WRITE;

    const PODS: ResourceInfo = ResourceInfo {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        short_names: &[],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
        selectable_fields: &[SelectableField::path(
            "spec.nodeName",
            &["spec", "nodeName"],
            "",
        )],
    };

    #[test]
    fn parses_operators_and_escapes() {
        let s = parse("b==2,a=1,c!=3").unwrap();
        // Kubernetes sorts the raw terms before parsing them.
        assert_eq!(s.to_string(), "a=1,b=2,c!=3");
        assert_eq!(s.requirements()[1].operator, Operator::Equals);
        assert_eq!(s.requirements()[2].operator, Operator::NotEquals);
        let s = parse(r"a=x\,y\=z\\w").unwrap();
        assert_eq!(s.requirements()[0].value, r"x,y=z\w");
        assert_eq!(s.to_string(), r"a=x\,y\=z\\w");
        assert_eq!(parse("").unwrap(), Selector::everything());
        assert_eq!(parse(",a=b,").unwrap().requirements().len(), 1);
        assert_eq!(parse("a=").unwrap().requirements()[0].value, "");
        assert_eq!(
            parse("metadata.name=x")
                .unwrap()
                .requires_exact_match("metadata.name"),
            Some("x")
        );
        assert_eq!(parse("a!=x").unwrap().requires_exact_match("a"), None);
    }

    #[test]
    fn errors_match_kubernetes() {
        assert_eq!(
            parse("a=b,c").unwrap_err().to_string(),
            "invalid selector: 'a=b,c'; can't understand 'c'"
        );
        assert_eq!(
            parse(r"a=b\x").unwrap_err().to_string(),
            r"invalid field selector: invalid escape sequence: \x"
        );
        assert_eq!(
            parse(r"a=b\").unwrap_err().to_string(),
            r"invalid field selector: invalid escape sequence: \"
        );
        assert_eq!(
            parse("a=b=c").unwrap_err().to_string(),
            "invalid field selector: unescaped character in value: 61"
        );
        assert_eq!(
            parse_for(&PODS, "spec.foo=x").unwrap_err().to_string(),
            "field label not supported: spec.foo"
        );
        assert_eq!(
            parse_for(&PODS, "spec.nodeName=x").unwrap().to_string(),
            "spec.nodeName=x"
        );
    }

    #[test]
    fn errors_become_bad_requests() {
        let e = ApiError::from(parse_for(&PODS, "spec.foo=x").unwrap_err());
        assert_eq!(
            (e.code(), e.message()),
            (400, "field label not supported: spec.foo")
        );
    }

    #[test]
    fn escape_round_trip() {
        for v in ["", "plain", r"a\b", "a,b=c", r"\\,,=="] {
            assert_eq!(unescape_value(&escape_value(v)).unwrap(), v);
            let s = Selector::one_term_equal("metadata.name", v);
            assert_eq!(parse(&s.to_string()).unwrap(), s, "{v}");
        }
    }
}

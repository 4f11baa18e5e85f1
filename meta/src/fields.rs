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
enum Source {
    /// A path of object keys; the default when absent (`""`, `"false"`, `"0"`).
    Path(&'static [&'static str], &'static str),
    /// `status.podIPs[0].ip`, else `status.podIP`.
    PodIp,
    /// `source.component`, else `reportingComponent`.
    EventOrigin,
}

type FieldTable = &'static [(&'static str, Source)];

const COMMON: FieldTable = &[
    ("metadata.name", Source::Path(&["metadata", "name"], "")),
    (
        "metadata.namespace",
        Source::Path(&["metadata", "namespace"], ""),
    ),
];

const POD: FieldTable = &[
    ("spec.nodeName", Source::Path(&["spec", "nodeName"], "")),
    (
        "spec.restartPolicy",
        Source::Path(&["spec", "restartPolicy"], ""),
    ),
    (
        "spec.schedulerName",
        Source::Path(&["spec", "schedulerName"], ""),
    ),
    (
        "spec.serviceAccountName",
        Source::Path(&["spec", "serviceAccountName"], ""),
    ),
    (
        "spec.hostNetwork",
        Source::Path(&["spec", "hostNetwork"], "false"),
    ),
    ("status.phase", Source::Path(&["status", "phase"], "")),
    ("status.podIP", Source::PodIp),
    (
        "status.nominatedNodeName",
        Source::Path(&["status", "nominatedNodeName"], ""),
    ),
];

const EVENT: FieldTable = &[
    (
        "involvedObject.kind",
        Source::Path(&["involvedObject", "kind"], ""),
    ),
    (
        "involvedObject.namespace",
        Source::Path(&["involvedObject", "namespace"], ""),
    ),
    (
        "involvedObject.name",
        Source::Path(&["involvedObject", "name"], ""),
    ),
    (
        "involvedObject.uid",
        Source::Path(&["involvedObject", "uid"], ""),
    ),
    (
        "involvedObject.apiVersion",
        Source::Path(&["involvedObject", "apiVersion"], ""),
    ),
    (
        "involvedObject.resourceVersion",
        Source::Path(&["involvedObject", "resourceVersion"], ""),
    ),
    (
        "involvedObject.fieldPath",
        Source::Path(&["involvedObject", "fieldPath"], ""),
    ),
    ("reason", Source::Path(&["reason"], "")),
    (
        "reportingComponent",
        Source::Path(&["reportingComponent"], ""),
    ),
    ("source", Source::EventOrigin),
    ("type", Source::Path(&["type"], "")),
];

const NODE: FieldTable = &[(
    "spec.unschedulable",
    Source::Path(&["spec", "unschedulable"], "false"),
)];
const SECRET: FieldTable = &[("type", Source::Path(&["type"], ""))];
const NAMESPACE: FieldTable = &[("status.phase", Source::Path(&["status", "phase"], ""))];
const REPLICA_SET: FieldTable = &[(
    "status.replicas",
    Source::Path(&["status", "replicas"], "0"),
)];

/// The kinds with fields of their own, by (group, kind).
const KIND_TABLES: &[(&str, &str, FieldTable)] = &[
    ("", "Pod", POD),
    ("", "Event", EVENT),
    ("", "Node", NODE),
    ("", "Secret", SECRET),
    ("", "Namespace", NAMESPACE),
    ("apps", "ReplicaSet", REPLICA_SET),
];

/// The kind-specific part of the table.
fn kind_table(resource: &ResourceInfo) -> FieldTable {
    KIND_TABLES
        .iter()
        .find(|(group, kind, _)| (*group, *kind) == (resource.group, resource.kind))
        .map_or(&[], |&(_, _, table)| table)
}

fn lookup(resource: &ResourceInfo, field: &str) -> Option<&'static Source> {
    COMMON
        .iter()
        .chain(kind_table(resource))
        .find(|(name, _)| *name == field)
        .map(|(_, s)| s)
}

fn is_supported(resource: &ResourceInfo, field: &str) -> bool {
    lookup(resource, field).is_some()
}

/// The field labels `resource` supports in field selectors.
pub fn supported_fields(resource: &ResourceInfo) -> Vec<&'static str> {
    COMMON
        .iter()
        .chain(kind_table(resource))
        .map(|(name, _)| *name)
        .collect()
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
        Source::Path(path, default) => text(path).unwrap_or_else(|| default.to_string()),
        Source::PodIp => obj
            .pointer("/status/podIPs/0/ip")
            .and_then(scalar_text)
            .or_else(|| text(&["status", "podIP"]))
            .unwrap_or_default(),
        Source::EventOrigin => text(&["source", "component"])
            .filter(|s| !s.is_empty())
            .or_else(|| text(&["reportingComponent"]))
            .unwrap_or_default(),
    })
}

/// The parts of `obj` that any label or field selector can read: `metadata.labels` and the
/// source of every selectable field of every kind, at the same paths (absent parts stay absent).
/// Selectors match the projection exactly as they match the object, so a cache can keep this
/// instead of the whole decoded object. Every kind's fields are kept, not only `obj`'s kind's,
/// so that one projection serves every resource stored under the same prefix.
pub fn selectable_projection(obj: &Value) -> Value {
    let mut out = Value::Object(serde_json::Map::new());
    copy_path(obj, &mut out, &["metadata", "labels"]);
    let kinds = KIND_TABLES.iter().flat_map(|(_, _, table)| table.iter());
    for (_, source) in COMMON.iter().chain(kinds) {
        match source {
            Source::Path(path, _) => copy_path(obj, &mut out, path),
            Source::PodIp => {
                copy_path(obj, &mut out, &["status", "podIPs"]);
                copy_path(obj, &mut out, &["status", "podIP"]);
            }
            Source::EventOrigin => {
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

    #[test]
    fn a_projection_answers_every_field_and_label_as_the_object_does() {
        let objects = [
            serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "1"},
                             "annotations": {"big": "x"}},
                "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": true,
                         "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running", "podIP": "10.0.0.1",
                           "podIPs": [{"ip": "10.0.0.2"}, {"ip": "fd00::2"}]}
            }),
            serde_json::json!({
                "metadata": {"name": "e", "namespace": "ns"},
                "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"},
                "reason": "Started", "type": "Normal", "reportingComponent": "kubelet",
                "source": {"component": ""}
            }),
            serde_json::json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}),
            serde_json::json!({"metadata": {"name": "rs"}, "status": {"replicas": 3}}),
            serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "dg=="}}),
            serde_json::json!({"metadata": {"name": "odd", "labels": null}, "spec": null,
                               "status": {"podIP": 7}}),
        ];
        let kinds = [
            ("", "v1", "pods"),
            ("", "v1", "events"),
            ("", "v1", "nodes"),
            ("", "v1", "secrets"),
            ("", "v1", "namespaces"),
            ("apps", "v1", "replicasets"),
            ("", "v1", "configmaps"),
        ];
        for object in &objects {
            let projection = selectable_projection(object);
            assert_eq!(
                projection.pointer("/metadata/labels"),
                object.pointer("/metadata/labels")
            );
            for (group, version, resource) in kinds {
                let info = crate::resources::lookup(group, version, resource).unwrap();
                for field in supported_fields(info) {
                    assert_eq!(
                        field_value(info, &projection, field),
                        field_value(info, object, field),
                        "{field} of {object}"
                    );
                }
            }
        }
        // What no selector reads is left out.
        let pod = selectable_projection(&objects[0]);
        assert!(pod.pointer("/spec/containers").is_none());
        assert!(pod.pointer("/metadata/annotations").is_none());
    }
    use super::*;
    use crate::resources::lookup_kind;
    use serde_json::json;

    fn kind(group: &str, kind: &str) -> &'static ResourceInfo {
        lookup_kind(group, kind).unwrap()
    }

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
        let pods = kind("", "Pod");
        assert_eq!(
            parse_for(pods, "spec.foo=x").unwrap_err().to_string(),
            "field label not supported: spec.foo"
        );
        assert_eq!(
            parse_for(kind("", "ConfigMap"), "spec.nodeName=x")
                .unwrap_err()
                .to_string(),
            "field label not supported: spec.nodeName"
        );
    }

    #[test]
    fn errors_become_bad_requests() {
        let e = ApiError::from(parse_for(kind("", "Pod"), "spec.foo=x").unwrap_err());
        assert_eq!(
            (e.code(), e.message()),
            (400, "field label not supported: spec.foo")
        );
    }

    #[test]
    fn pods() {
        let pods = kind("", "Pod");
        let pod = json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": true},
            "status": {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}]}
        });
        let m = |s: &str| parse_for(pods, s).unwrap().matches(pods, &pod);
        assert!(m("metadata.name=web,metadata.namespace=default"));
        assert!(m("spec.nodeName=n1"));
        assert!(!m("spec.nodeName!=n1"));
        assert!(m("spec.hostNetwork=true"));
        assert!(m("status.phase=Running,status.podIP=10.0.0.9"));
        // Absent fields are their zero value.
        assert!(m("spec.schedulerName="));
        assert!(m("status.nominatedNodeName="));
        assert!(m("spec.serviceAccountName!=default"));
        let unscheduled = json!({"metadata": {"name": "p"}});
        assert!(parse("spec.nodeName=").unwrap().matches(pods, &unscheduled));
        assert!(
            parse("spec.hostNetwork=false")
                .unwrap()
                .matches(pods, &unscheduled)
        );
        assert!(
            parse("metadata.namespace=")
                .unwrap()
                .matches(pods, &unscheduled)
        );
        assert!(!parse("bogus=").unwrap().matches(pods, &unscheduled));
    }

    #[test]
    fn events_as_kubectl_describe_selects_them() {
        let events = kind("", "Event");
        let ev = json!({
            "metadata": {"name": "nginx.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "nginx", "namespace": "default", "uid": "u-1"},
            "reason": "Scheduled", "type": "Normal", "reportingComponent": "default-scheduler"
        });
        let sel = parse_for(
            events,
            "involvedObject.uid=u-1,involvedObject.name=nginx,involvedObject.namespace=default",
        )
        .unwrap();
        assert!(sel.matches(events, &ev));
        assert!(
            !parse("involvedObject.uid=u-2")
                .unwrap()
                .matches(events, &ev)
        );
        // `source` falls back to the reporting controller when source.component is empty.
        assert!(
            parse("source=default-scheduler")
                .unwrap()
                .matches(events, &ev)
        );
        let kubelet = json!({"source": {"component": "kubelet"}, "reportingComponent": "x"});
        assert!(parse("source=kubelet").unwrap().matches(events, &kubelet));
        for f in [
            "involvedObject.kind",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
        ] {
            assert!(supported_fields(events).contains(&f), "{f}");
        }
    }

    #[test]
    fn other_kinds() {
        let nodes = kind("", "Node");
        assert!(
            parse_for(nodes, "spec.unschedulable=false")
                .unwrap()
                .matches(nodes, &json!({"spec": {}}))
        );
        assert!(
            parse("spec.unschedulable=true")
                .unwrap()
                .matches(nodes, &json!({"spec": {"unschedulable": true}}))
        );
        let secrets = kind("", "Secret");
        assert!(
            parse_for(secrets, "type=kubernetes.io/service-account-token")
                .unwrap()
                .matches(
                    secrets,
                    &json!({"type": "kubernetes.io/service-account-token"})
                )
        );
        let ns = kind("", "Namespace");
        assert!(
            parse_for(ns, "status.phase=Active")
                .unwrap()
                .matches(ns, &json!({"status": {"phase": "Active"}}))
        );
        let rs = kind("apps", "ReplicaSet");
        assert!(
            parse_for(rs, "status.replicas=0")
                .unwrap()
                .matches(rs, &json!({"status": {}}))
        );
        assert!(
            parse("status.replicas=3")
                .unwrap()
                .matches(rs, &json!({"status": {"replicas": 3}}))
        );
        assert!(parse_for(kind("apps", "Deployment"), "status.replicas=0").is_err());
        assert_eq!(
            supported_fields(kind("", "ConfigMap")),
            vec!["metadata.name", "metadata.namespace"]
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

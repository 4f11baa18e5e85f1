//! A static type check of a CEL expression against the OpenAPI schemas of the values it reads:
//! what kube-apiserver's ValidatingAdmissionPolicy type checking reports in
//! `status.typeChecking` (a field the schema does not have, an operator applied to types it
//! does not take), in cel-go's words and layout.
//!
//! The `cel` crate has no checker of its own, so this walks its parsed expression. It is
//! deliberately conservative: a type it cannot know (a value of no schema, a schema that keeps
//! unknown fields, a function it does not model) is `dyn`, and `dyn` goes with everything, so
//! every issue it reports is one cel-go's checker reports too; it reports fewer. What it
//! models: field selection and `has()` on schema objects, indexing, comprehension variables
//! (`all`, `exists`, `map`, `filter`), the operators, `size`, conversions and the string
//! functions. The result is advice: a policy is evaluated the same whatever it says.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};
use serde_json::{Map, Value};

/// The schemas `$ref`s point into (`components.schemas` of an OpenAPI v3 document), by name.
pub type Schemas = Arc<Map<String, Value>>;

/// A static type.
#[derive(Clone, Debug)]
pub enum Type {
    /// Not known until run time: goes with everything.
    Dyn,
    /// `null_type`.
    Null,
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `uint`.
    Uint,
    /// `double`.
    Double,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `list(T)`.
    List(Box<Type>),
    /// `map(K, V)`.
    Map(Box<Type>, Box<Type>),
    /// An object of an OpenAPI schema: its fields' schemas, resolved when selected.
    Object(Arc<Object>),
}

/// An object schema's fields.
#[derive(Debug)]
pub struct Object {
    properties: Map<String, Value>,
    schemas: Schemas,
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Dyn => f.write_str("dyn"),
            Type::Null => f.write_str("null_type"),
            Type::Bool => f.write_str("bool"),
            Type::Int => f.write_str("int"),
            Type::Uint => f.write_str("uint"),
            Type::Double => f.write_str("double"),
            Type::String => f.write_str("string"),
            Type::Bytes => f.write_str("bytes"),
            Type::List(e) => write!(f, "list({e})"),
            Type::Map(k, v) => write!(f, "map({k}, {v})"),
            Type::Object(_) => f.write_str("object"),
        }
    }
}

impl Type {
    /// The type of a value of `schema` (`$ref`s resolved in `schemas`).
    pub fn of_schema(schema: &Value, schemas: &Schemas) -> Type {
        of_schema(schema, schemas, 0)
    }

    fn is_dyn(&self) -> bool {
        matches!(self, Type::Dyn)
    }

    fn is_numeric(&self) -> bool {
        matches!(self, Type::Int | Type::Uint | Type::Double)
    }

    /// Whether two types may be compared for equality (`_==_` takes two of one type).
    fn same(&self, other: &Type) -> bool {
        match (self, other) {
            (Type::Dyn, _) | (_, Type::Dyn) | (Type::Null, _) | (_, Type::Null) => true,
            (Type::List(a), Type::List(b)) => a.same(b),
            (Type::Map(a, b), Type::Map(c, d)) => a.same(c) && b.same(d),
            (Type::Object(_), Type::Object(_)) => true,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
}

/// Deeper than this, a schema is taken as `dyn` (recursive schemas end here).
const MAX_DEPTH: usize = 32;

fn of_schema(schema: &Value, schemas: &Schemas, depth: usize) -> Type {
    if depth > MAX_DEPTH {
        return Type::Dyn;
    }
    let Some(s) = schema.as_object() else {
        return Type::Dyn;
    };
    // `{$ref}` or `{allOf: [{$ref}], description}`, as the generated documents write references.
    let reference = s.get("$ref").or_else(|| {
        s.get("allOf")
            .and_then(Value::as_array)
            .filter(|all| all.len() == 1)
            .and_then(|all| all[0].get("$ref"))
    });
    if let Some(name) = reference
        .and_then(Value::as_str)
        .and_then(|r| r.rsplit('/').next())
    {
        return match schemas.get(name) {
            Some(target) => of_schema(target, schemas, depth + 1),
            None => Type::Dyn,
        };
    }
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
    if flag("x-kubernetes-int-or-string") || flag("x-kubernetes-embedded-resource") {
        return Type::Dyn;
    }
    match s.get("type").and_then(Value::as_str) {
        Some("boolean") => Type::Bool,
        Some("integer") => Type::Int,
        Some("number") => Type::Double,
        // date-time, duration and byte formats are other CEL types in Kubernetes' mapping:
        // left dyn rather than guessed.
        Some("string") if s.contains_key("format") => Type::Dyn,
        Some("string") => Type::String,
        Some("array") => Type::List(Box::new(
            s.get("items")
                .map_or(Type::Dyn, |items| of_schema(items, schemas, depth + 1)),
        )),
        Some("object") | None => {
            let properties = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties");
            match (properties, additional) {
                (Some(p), _) if !p.is_empty() && !flag("x-kubernetes-preserve-unknown-fields") => {
                    Type::Object(Arc::new(Object {
                        properties: p.clone(),
                        schemas: schemas.clone(),
                    }))
                }
                (None, Some(values)) if values.is_object() => Type::Map(
                    Box::new(Type::String),
                    Box::new(of_schema(values, schemas, depth + 1)),
                ),
                _ => Type::Dyn,
            }
        }
        Some(_) => Type::Dyn,
    }
}

/// One problem found, at a byte offset of the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Where in the source (a byte offset).
    pub offset: usize,
    /// What is wrong, in cel-go's words.
    pub message: String,
}

/// The variables an expression may read, with their types (`dyn` when a schema is unknown).
#[derive(Debug, Clone, Default)]
pub struct Declarations(BTreeMap<String, Type>);

impl Declarations {
    /// Declares `name` of type `t`.
    pub fn declare(&mut self, name: &str, t: Type) {
        self.0.insert(name.to_string(), t);
    }
}

/// Identifiers that name types (`type(x) == int`): never undeclared.
const TYPE_NAMES: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// Checks `source` (already known to parse) against `declarations`: the issues found, in
/// source order.
pub fn check(source: &str, declarations: &Declarations) -> Vec<Issue> {
    let Ok((expression, info)) = super::cel::parser().parse_with_source_info(source) else {
        return Vec::new();
    };
    let mut checker = Checker {
        declarations,
        scopes: Vec::new(),
        info: &info,
        issues: Vec::new(),
    };
    checker.expr(&expression);
    let mut issues = checker.issues;
    issues.sort_by_key(|i| i.offset);
    issues
}

/// The issues as cel-go displays them: `ERROR: <input>:LINE:COLUMN: message`, the source line,
/// and a caret under the column; one after another.
pub fn display(source: &str, issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|issue| {
            let before = &source[..issue.offset.min(source.len())];
            let line = before.matches('\n').count() + 1;
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            let column = before[line_start..].chars().count();
            let text = source[line_start..].lines().next().unwrap_or_default();
            format!(
                "ERROR: <input>:{line}:{}: {}\n | {text}\n | {}^",
                column + 1,
                issue.message,
                ".".repeat(column)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

struct Checker<'a> {
    declarations: &'a Declarations,
    /// Comprehension variables, innermost last.
    scopes: Vec<(String, Type)>,
    info: &'a SourceInfo,
    issues: Vec<Issue>,
}

impl Checker<'_> {
    fn issue(&mut self, at: &IdedExpr, message: String) {
        let offset = self
            .info
            .offset_for(at.id)
            .map_or(0, |(start, _)| start as usize);
        self.issues.push(Issue { offset, message });
    }

    fn no_overload(&mut self, at: &IdedExpr, function: &str, args: &[&Type]) -> Type {
        let types: Vec<String> = args.iter().map(|t| t.to_string()).collect();
        self.issue(
            at,
            format!(
                "found no matching overload for '{function}' applied to '({})'",
                types.join(", ")
            ),
        );
        Type::Dyn
    }

    fn expr(&mut self, e: &IdedExpr) -> Type {
        match &e.expr {
            Expr::Literal(literal) => match literal {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Bytes(_) => Type::Bytes,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::Int(_) => Type::Int,
                LiteralValue::Null => Type::Null,
                LiteralValue::String(_) => Type::String,
                LiteralValue::UInt(_) => Type::Uint,
            },
            Expr::Ident(name) => self.ident(e, name),
            Expr::Select(select) => {
                let operand = self.expr(&select.operand);
                let field = self.field(e, &operand, &select.field);
                if select.test { Type::Bool } else { field }
            }
            Expr::Call(call) => self.call(e, call),
            Expr::List(list) => {
                let types: Vec<Type> = list.elements.iter().map(|x| self.expr(x)).collect();
                Type::List(Box::new(common(&types)))
            }
            Expr::Map(map) => {
                let mut keys = Vec::new();
                let mut values = Vec::new();
                for entry in &map.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(m) => {
                            keys.push(self.expr(&m.key));
                            values.push(self.expr(&m.value));
                        }
                        EntryExpr::StructField(f) => {
                            self.expr(&f.value);
                        }
                    }
                }
                Type::Map(Box::new(common(&keys)), Box::new(common(&values)))
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        self.expr(&f.value);
                    }
                }
                Type::Dyn
            }
            Expr::Comprehension(c) => {
                let range = self.expr(&c.iter_range);
                let (first, second) = match &range {
                    Type::List(element) => (Type::Int, (**element).clone()),
                    Type::Map(key, value) => ((**key).clone(), (**value).clone()),
                    Type::Dyn => (Type::Dyn, Type::Dyn),
                    other => {
                        let message = format!(
                            "expression of type '{other}' cannot be range of a comprehension \
                             (must be list, map, or dynamic)"
                        );
                        self.issue(&c.iter_range, message);
                        (Type::Dyn, Type::Dyn)
                    }
                };
                // With one variable, a list's element (a map's key); with two, index and
                // element (key and value).
                let one = if matches!(range, Type::List(_)) && c.iter_var2.is_none() {
                    second.clone()
                } else {
                    first
                };
                let accu = self.expr(&c.accu_init);
                let depth = self.scopes.len();
                self.scopes.push((c.iter_var.clone(), one));
                if let Some(var2) = &c.iter_var2 {
                    self.scopes.push((var2.clone(), second));
                }
                self.scopes.push((c.accu_var.clone(), accu));
                self.expr(&c.loop_cond);
                let step = self.expr(&c.loop_step);
                // The accumulator takes the step's type (a `map` builds a list of it).
                if let Some(last) = self.scopes.last_mut() {
                    last.1 = step;
                }
                let result = self.expr(&c.result);
                self.scopes.truncate(depth);
                result
            }
            Expr::Unspecified => Type::Dyn,
        }
    }

    fn ident(&mut self, e: &IdedExpr, name: &str) -> Type {
        if let Some((_, t)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return t.clone();
        }
        if let Some(t) = self.declarations.0.get(name) {
            return t.clone();
        }
        if !TYPE_NAMES.contains(&name) {
            self.issue(
                e,
                format!("undeclared reference to '{name}' (in container '')"),
            );
        }
        Type::Dyn
    }

    /// The type of `.field` on a value of type `operand`.
    fn field(&mut self, at: &IdedExpr, operand: &Type, field: &str) -> Type {
        match operand {
            Type::Object(object) => match object.properties.get(field) {
                Some(schema) => Type::of_schema(schema, &object.schemas),
                None => {
                    self.issue(at, format!("undefined field '{field}'"));
                    Type::Dyn
                }
            },
            Type::Map(_, value) => (**value).clone(),
            Type::Dyn => Type::Dyn,
            other => {
                self.issue(
                    at,
                    format!("type '{other}' does not support field selection"),
                );
                Type::Dyn
            }
        }
    }

    fn call(&mut self, e: &IdedExpr, call: &CallExpr) -> Type {
        let target = call.target.as_ref().map(|t| self.expr(t));
        let args: Vec<Type> = call.args.iter().map(|a| self.expr(a)).collect();
        let name = call.func_name.as_str();
        let all: Vec<&Type> = target.iter().chain(args.iter()).collect();
        use cel::common::ast::operators as op;
        match (name, all.as_slice()) {
            (op::EQUALS | op::NOT_EQUALS, [a, b]) => {
                if !a.same(b) {
                    self.no_overload(e, name, &[a, b]);
                }
                Type::Bool
            }
            (op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS, [a, b]) => {
                let ordered = a.is_dyn()
                    || b.is_dyn()
                    || (a.is_numeric() && b.is_numeric())
                    || (matches!(
                        (a, b),
                        (Type::String, Type::String)
                            | (Type::Bytes, Type::Bytes)
                            | (Type::Bool, Type::Bool)
                    ));
                if !ordered {
                    self.no_overload(e, name, &[a, b]);
                }
                Type::Bool
            }
            (op::ADD, [a, b]) => match (a, b) {
                (Type::Dyn, other) | (other, Type::Dyn) => {
                    if matches!(
                        other,
                        Type::Bool | Type::Null | Type::Map(..) | Type::Object(_)
                    ) {
                        self.no_overload(e, name, &[a, b])
                    } else {
                        Type::Dyn
                    }
                }
                (Type::List(x), Type::List(y)) => {
                    Type::List(Box::new(common(&[(**x).clone(), (**y).clone()])))
                }
                (x, y)
                    if std::mem::discriminant(*x) == std::mem::discriminant(*y)
                        && matches!(
                            x,
                            Type::Int | Type::Uint | Type::Double | Type::String | Type::Bytes
                        ) =>
                {
                    (*x).clone()
                }
                _ => self.no_overload(e, name, &[a, b]),
            },
            (op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO, [a, b]) => {
                let numeric = |t: &Type| {
                    t.is_dyn()
                        || (t.is_numeric() && !(name == op::MODULO && matches!(t, Type::Double)))
                };
                match (a, b) {
                    (Type::Dyn, t) | (t, Type::Dyn) if numeric(t) => (*t).clone(),
                    (x, y)
                        if numeric(x)
                            && std::mem::discriminant(*x) == std::mem::discriminant(*y) =>
                    {
                        (*x).clone()
                    }
                    _ => self.no_overload(e, name, &[a, b]),
                }
            }
            (op::LOGICAL_AND | op::LOGICAL_OR, [a, b]) => {
                let boolean = |t: &Type| matches!(t, Type::Bool | Type::Dyn);
                if !boolean(a) || !boolean(b) {
                    self.no_overload(e, name, &[a, b]);
                }
                Type::Bool
            }
            (op::LOGICAL_NOT, [a]) => {
                if !matches!(a, Type::Bool | Type::Dyn) {
                    self.no_overload(e, name, &[a]);
                }
                Type::Bool
            }
            (op::NEGATE, [a]) => {
                if !matches!(a, Type::Int | Type::Double | Type::Dyn) {
                    return self.no_overload(e, name, &[a]);
                }
                (*a).clone()
            }
            (op::NOT_STRICTLY_FALSE, _) => Type::Bool,
            (op::CONDITIONAL, [c, then, otherwise]) => {
                if !matches!(c, Type::Bool | Type::Dyn) {
                    self.no_overload(e, name, &[c, then, otherwise]);
                }
                common(&[(*then).clone(), (*otherwise).clone()])
            }
            (op::INDEX, [container, key]) => match container {
                Type::List(element) => {
                    if !matches!(key, Type::Int | Type::Uint | Type::Dyn) {
                        self.no_overload(e, name, &[container, key]);
                    }
                    (**element).clone()
                }
                Type::Map(k, v) => {
                    if !k.same(key) {
                        self.no_overload(e, name, &[container, key]);
                    }
                    (**v).clone()
                }
                Type::Dyn | Type::Object(_) => Type::Dyn,
                _ => self.no_overload(e, name, &[container, key]),
            },
            (op::IN, [_, container]) => {
                if !matches!(container, Type::List(_) | Type::Map(..) | Type::Dyn) {
                    self.no_overload(e, name, &all);
                }
                Type::Bool
            }
            ("size", [a]) => {
                if !matches!(
                    a,
                    Type::String | Type::Bytes | Type::List(_) | Type::Map(..) | Type::Dyn
                ) {
                    self.no_overload(e, name, &[a]);
                }
                Type::Int
            }
            ("startsWith" | "endsWith" | "contains" | "matches", [s, _]) if target.is_some() => {
                if !matches!(s, Type::String | Type::Dyn) {
                    self.no_overload(e, name, &all);
                }
                Type::Bool
            }
            ("int", _) => Type::Int,
            ("uint", _) => Type::Uint,
            ("double", _) => Type::Double,
            ("string", _) => Type::String,
            ("bool", _) => Type::Bool,
            ("bytes", _) => Type::Bytes,
            (
                "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "charAt"
                | "format" | "join",
                _,
            ) => Type::String,
            ("split", _) => Type::List(Box::new(Type::String)),
            ("indexOf" | "lastIndexOf", _) => Type::Int,
            _ => Type::Dyn,
        }
    }
}

/// The one type of `types` if they agree (ignoring `dyn` and `null`), else `dyn`.
fn common(types: &[Type]) -> Type {
    let mut known = types
        .iter()
        .filter(|t| !matches!(t, Type::Dyn | Type::Null));
    match known.next() {
        None => Type::Dyn,
        Some(first) => {
            let rest: Vec<&Type> = known.collect();
            if rest.iter().all(|t| t.same(first)) {
                first.clone()
            } else {
                Type::Dyn
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A Deployment-like schema with references, as the OpenAPI v3 documents write them.
    fn declarations() -> Declarations {
        let schemas: Schemas = Arc::new(
            json!({
                "Deployment": {"type": "object", "properties": {
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/ObjectMeta"}]},
                    "spec": {"$ref": "#/components/schemas/DeploymentSpec"}}},
                "ObjectMeta": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "creationTimestamp": {"type": "string", "format": "date-time"}}},
                "DeploymentSpec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "paused": {"type": "boolean"},
                    "template": {"type": "object", "properties": {"spec": {"type": "object",
                        "properties": {"containers": {"type": "array", "items": {
                            "type": "object", "properties": {
                                "name": {"type": "string"}, "image": {"type": "string"}}}}}}}},
                    "strategy": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"type": {"type": "string"}}}}},
            })
            .as_object()
            .unwrap()
            .clone(),
        );
        let deployment = Type::of_schema(&schemas["Deployment"].clone(), &schemas);
        let mut d = Declarations::default();
        d.declare("object", deployment.clone());
        d.declare("oldObject", deployment);
        d.declare("params", Type::Dyn);
        d.declare("request", Type::Dyn);
        d
    }

    fn issues(source: &str) -> Vec<String> {
        check(source, &declarations())
            .into_iter()
            .map(|i| i.message)
            .collect()
    }

    #[test]
    fn well_typed_expressions_have_no_issues() {
        for source in [
            "object.spec.replicas <= 5",
            "object.spec.replicas <= params.max",
            "has(object.spec.replicas) && object.spec.replicas > 1",
            "object.metadata.labels['app'] == 'web'",
            "'app' in object.metadata.labels",
            "object.spec.template.spec.containers.all(c, c.image.startsWith('registry/'))",
            "object.spec.template.spec.containers.map(c, c.name).size() > 0",
            "size(object.spec.template.spec.containers) < 10",
            "object.spec.strategy.anything == 'x'",
            "object.metadata.creationTimestamp != null",
            "oldObject == null || object.spec.replicas >= oldObject.spec.replicas",
            "object.spec.replicas * 2 + 1 > 3.5",
            "request.userInfo.username.startsWith('system:')",
            "!object.spec.paused",
            "[1, 2].exists(x, x == object.spec.replicas)",
            "type(object) == map",
        ] {
            assert_eq!(issues(source), Vec::<String>::new(), "{source}");
        }
    }

    #[test]
    fn what_cel_go_reports_is_reported() {
        assert_eq!(
            issues("object.replicas > 1"),
            ["undefined field 'replicas'"]
        );
        assert_eq!(
            issues("has(object.spec.replica)"),
            ["undefined field 'replica'"]
        );
        assert_eq!(
            issues("object.spec.template.spec.containers.all(c, c.imagee == 'x')"),
            ["undefined field 'imagee'"]
        );
        assert_eq!(
            issues("object.spec.replicas == '3'"),
            ["found no matching overload for '_==_' applied to '(int, string)'"]
        );
        assert_eq!(
            issues("object.metadata.name > 3"),
            ["found no matching overload for '_>_' applied to '(string, int)'"]
        );
        assert_eq!(
            issues("object.spec.replicas * 1.5 > 3.0"),
            ["found no matching overload for '_*_' applied to '(int, double)'"]
        );
        assert_eq!(
            issues("object.spec.paused && object.spec.replicas"),
            ["found no matching overload for '_&&_' applied to '(bool, int)'"]
        );
        assert_eq!(
            issues("size(object.spec.replicas) > 1"),
            ["found no matching overload for 'size' applied to '(int)'"]
        );
        assert_eq!(
            issues("object.spec.replicas.value == 1"),
            ["type 'int' does not support field selection"]
        );
        assert_eq!(
            issues("objekt.spec == null"),
            ["undeclared reference to 'objekt' (in container '')"]
        );
        // Two issues, in source order.
        assert_eq!(
            issues("object.spec.x == 1 || object.y == 2"),
            ["undefined field 'x'", "undefined field 'y'"]
        );
    }

    #[test]
    fn issues_are_displayed_as_cel_go_displays_them() {
        let source = "object.replicas > 1";
        let found = check(source, &declarations());
        assert_eq!(
            display(source, &found),
            "ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^"
        );
        let two_lines = "object.spec.replicas > 1 &&\n  object.spec.nope";
        let found = check(two_lines, &declarations());
        assert_eq!(
            display(two_lines, &found),
            "ERROR: <input>:2:14: undefined field 'nope'\n |   object.spec.nope\n | .............^"
        );
    }

    #[test]
    fn recursive_schemas_are_resolved_a_step_at_a_time() {
        let schemas: Schemas = Arc::new(
            json!({"Props": {"type": "object", "properties": {
                "items": {"$ref": "#/components/schemas/Props"},
                "type": {"type": "string"}}}})
            .as_object()
            .unwrap()
            .clone(),
        );
        let mut d = Declarations::default();
        d.declare(
            "object",
            Type::of_schema(&schemas["Props"].clone(), &schemas),
        );
        let deep = format!("object{}.type == 'x'", ".items".repeat(40));
        assert!(check(&deep, &d).is_empty());
        assert_eq!(check("object.items.nope", &d).len(), 1);
    }
}

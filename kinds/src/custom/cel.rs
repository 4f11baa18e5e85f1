//! `x-kubernetes-validations`: CEL rules of a custom resource's schema, compiled once when the
//! definition is served and evaluated on every create and update with `self` bound to the value
//! at the rule's node (and `oldSelf` to the value before an update, for transition rules).
//!
//! The interpreter is the `cel` crate (cel-rust) with its standard library and string, list and
//! math extensions, and Kubernetes' authorization library for admission expressions
//! ([`super::authorizer`]); Kubernetes' other libraries (quantity, URL, IP, CIDR, `isSorted`,
//! ...) beyond what it provides are not available, and a rule that calls one fails to compile
//! when the definition is written, with the interpreter's message.

use std::sync::{Arc, LazyLock};

use cel::{Context, Env, Program};
use serde_json::Value;

use super::authorizer::RequestAuthorizer;
use crate::validation::{FieldError, FieldErrorType};

/// The environment every rule compiles and runs in.
fn env() -> &'static Arc<Env> {
    static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
        let mut env = Env::stdlib();
        for extension in [
            cel::extensions::strings as fn(&mut Env) -> _,
            cel::extensions::lists,
            cel::extensions::math,
            super::authorizer::declare,
        ] {
            // The extensions define functions the standard library does not: adding one can
            // only fail on a clash, which the tests would show.
            let _ = env.add_extension(extension);
        }
        Arc::new(env)
    });
    &ENV
}

/// A parser with the environment's macros (for tools that read the parsed expression).
pub(crate) fn parser() -> cel::parser::Parser {
    env().parser()
}

/// One compiled rule.
pub struct Rule {
    source: String,
    program: Program,
    message: Option<String>,
    reason: Option<String>,
    field_path: Option<String>,
    transition: bool,
    optional_old_self: bool,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("rule", &self.source).finish()
    }
}

impl Rule {
    /// Compiles one entry of `x-kubernetes-validations` (`{rule, message, reason, fieldPath,
    /// optionalOldSelf}`).
    pub fn compile(entry: &Value) -> Result<Rule, String> {
        let source = entry
            .get("rule")
            .and_then(Value::as_str)
            .ok_or("rule must be a string")?
            .to_string();
        let program = env()
            .compile(&source)
            .map_err(|e| e.to_string().replace('\n', " "))?;
        let text = |k: &str| {
            entry
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let transition = program.references().has_variable("oldSelf");
        Ok(Rule {
            message: text("message"),
            reason: text("reason"),
            field_path: text("fieldPath"),
            optional_old_self: entry
                .get("optionalOldSelf")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            transition,
            source,
            program,
        })
    }

    /// Evaluates the rule on `value` at `path` (`old`: the value there before an update); the
    /// error to report when it does not hold. A transition rule is skipped when there is no old
    /// value, as Kubernetes skips it on create.
    pub fn check(
        &self,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        type_name: &str,
    ) -> Option<FieldError> {
        if self.transition && old.is_none() && !self.optional_old_self {
            return None;
        }
        let field = match (&self.field_path, path.is_empty()) {
            (Some(sub), true) => sub.trim_start_matches('.').to_string(),
            (Some(sub), false) => format!("{path}{}", ensure_dot(sub)),
            (None, true) => "<root>".to_string(),
            (None, false) => path.to_string(),
        };
        let outcome = self.evaluate(value, old);
        let message = match outcome {
            Ok(true) => return None,
            Ok(false) => self
                .message
                .clone()
                .unwrap_or_else(|| format!("failed rule: {}", self.source)),
            Err(e) => format!("rule evaluation error: {e}"),
        };
        let kind = match self.reason.as_deref() {
            Some("FieldValueForbidden") => FieldErrorType::Forbidden,
            Some("FieldValueRequired") => FieldErrorType::Required,
            Some("FieldValueDuplicate") => FieldErrorType::Duplicate,
            _ => FieldErrorType::Invalid,
        };
        let bad_value = matches!(kind, FieldErrorType::Invalid | FieldErrorType::Duplicate)
            .then(|| Value::String(type_name.to_string()));
        Some(FieldError::new(kind, field, bad_value, message))
    }

    fn evaluate(&self, value: &Value, old: Option<&Value>) -> Result<bool, String> {
        let mut context = Context::with_env(env().clone());
        let this = cel::to_value(value).map_err(|e| e.to_string())?;
        context.add_variable_from_value("self", this);
        if let Some(old) = old {
            let before = cel::to_value(old).map_err(|e| e.to_string())?;
            context.add_variable_from_value("oldSelf", before);
        }
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("rule returned {other:?}, not a bool")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// One compiled CEL expression over named variables, evaluated to a bool: the
/// `matchConditions` of admission webhooks (`object`, `oldObject`, `request`), in the same
/// environment as the rules above.
pub struct Expression {
    program: Program,
    /// The variables the expression names (macro variables too), known at compile time, so
    /// that a value it never reads is never converted or bound.
    reads: Vec<String>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Expression")
    }
}

impl Expression {
    /// Compiles `source`, or says why it does not compile.
    pub fn compile(source: &str) -> Result<Expression, String> {
        let program = env()
            .compile(source)
            .map_err(|e| e.to_string().replace('\n', " "))?;
        let mut reads: Vec<String> = program
            .references()
            .variables()
            .into_iter()
            .map(str::to_string)
            .collect();
        reads.sort();
        Ok(Expression { program, reads })
    }

    /// Whether the expression reads the variable `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.reads
            .binary_search_by(|r| r.as_str().cmp(name))
            .is_ok()
    }

    /// Evaluates the expression with `variables` bound (those it reads), and `authorizer` when
    /// given and read; an error when it fails or is not a bool.
    pub fn evaluate(
        &self,
        variables: &[(&str, &Value)],
        authorizer: Option<&RequestAuthorizer>,
    ) -> Result<bool, String> {
        let mut scope = Scope::new();
        for (name, value) in variables {
            if self.reads(name) {
                scope.bind(name, to_cel(value)?);
            }
        }
        if let Some(authorizer) = authorizer.filter(|_| self.reads("authorizer")) {
            authorizer.bind(&mut scope);
        }
        match self.evaluate_in(&scope) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("expression returned {other:?}, not a bool")),
            Err(e) => Err(e),
        }
    }

    /// Evaluates the expression against the variables of `scope`: the value it comes to, or
    /// why it failed.
    pub fn evaluate_in(&self, scope: &Scope) -> Result<cel::Value, String> {
        self.program
            .execute(&scope.context)
            .map_err(|e| e.to_string())
    }
}

/// Variables bound once for many expressions: an admission policy binds the request's object
/// (converted to the interpreter's own representation once, which is the costly step) and
/// evaluates each of its expressions against it.
pub struct Scope {
    context: Context<'static, 'static>,
}

impl Default for Scope {
    fn default() -> Scope {
        Scope::new()
    }
}

impl Scope {
    /// No variables yet.
    pub fn new() -> Scope {
        Scope {
            context: Context::with_env(env().clone()),
        }
    }

    /// Binds (or rebinds) `name` to `value`.
    pub fn bind(&mut self, name: &str, value: cel::Value) {
        self.context.add_variable_from_value(name, value);
    }
}

/// A JSON value as CEL sees it (objects are maps, `null` is null).
pub fn to_cel(value: &Value) -> Result<cel::Value, String> {
    cel::to_value(value).map_err(|e| e.to_string())
}

fn ensure_dot(s: &str) -> String {
    if s.starts_with('.') || s.starts_with('[') {
        s.to_string()
    } else {
        format!(".{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> Rule {
        Rule::compile(&v).unwrap()
    }

    #[test]
    fn a_rule_holds_or_reports_its_message() {
        let r = rule(
            json!({"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"}),
        );
        let ok = json!({"replicas": 2, "maxReplicas": 3});
        assert!(r.check(&ok, None, "spec", "object").is_none());
        let bad = json!({"replicas": 5, "maxReplicas": 3});
        assert_eq!(
            r.check(&bad, None, "spec", "object").unwrap().to_string(),
            r#"spec: Invalid value: "object": replicas must not exceed maxReplicas"#
        );
        let plain = rule(json!({"rule": "size(self) > 2"}));
        assert_eq!(
            plain
                .check(&json!("ab"), None, "spec.name", "string")
                .unwrap()
                .to_string(),
            r#"spec.name: Invalid value: "string": failed rule: size(self) > 2"#
        );
    }

    #[test]
    fn transition_rules_see_the_old_value_and_skip_creates() {
        let r = rule(json!({"rule": "self == oldSelf", "message": "Value is immutable"}));
        assert!(r.check(&json!("a"), None, "spec.id", "string").is_none());
        assert!(
            r.check(&json!("a"), Some(&json!("a")), "spec.id", "string")
                .is_none()
        );
        let e = r
            .check(&json!("b"), Some(&json!("a")), "spec.id", "string")
            .unwrap();
        assert_eq!(
            e.to_string(),
            r#"spec.id: Invalid value: "string": Value is immutable"#
        );
    }

    #[test]
    fn reasons_and_field_paths() {
        let r = rule(
            json!({"rule": "has(self.a)", "reason": "FieldValueRequired", "fieldPath": ".a", "message": "a is needed"}),
        );
        let e = r.check(&json!({}), None, "spec", "object").unwrap();
        assert_eq!(e.to_string(), "spec.a: Required value: a is needed");
    }

    #[test]
    fn a_rule_that_does_not_parse_is_refused() {
        assert!(Rule::compile(&json!({"rule": "self.a >"})).is_err());
        assert!(Rule::compile(&json!({"message": "no rule"})).is_err());
    }

    #[test]
    fn expressions_read_only_the_variables_they_name() {
        let e =
            Expression::compile("object.spec.replicas <= params.max && request.dryRun == false")
                .unwrap();
        assert!(e.reads("object") && e.reads("params") && e.reads("request"));
        assert!(!e.reads("oldObject") && !e.reads("namespaceObject") && !e.reads("spec"));
        // A variable it does not read is never converted: one that could not be is no error.
        let only_object = Expression::compile("object.a == 1").unwrap();
        assert_eq!(
            only_object.evaluate(
                &[
                    ("object", &json!({"a": 1})),
                    ("oldObject", &json!({"a": 2}))
                ],
                None
            ),
            Ok(true)
        );
        // A scope binds once for many expressions, and a rebinding replaces the value.
        let mut scope = Scope::new();
        scope.bind("object", to_cel(&json!({"a": 1, "b": "x"})).unwrap());
        let b = Expression::compile("object.b + string(object.a)").unwrap();
        assert_eq!(
            b.evaluate_in(&scope),
            Ok(cel::Value::String(std::sync::Arc::new("x1".into())))
        );
        scope.bind("object", to_cel(&json!({"a": 2, "b": "y"})).unwrap());
        assert_eq!(
            b.evaluate_in(&scope),
            Ok(cel::Value::String(std::sync::Arc::new("y2".into())))
        );
        // An unbound variable is an error when it is read.
        assert!(
            Expression::compile("oldObject.a == 1")
                .unwrap()
                .evaluate_in(&scope)
                .is_err()
        );
    }
}

//! Label selectors exactly as `k8s.io/apimachinery/pkg/labels`: the `labelSelector` string syntax
//! ([`parse`]), matching, conversion from `metav1.LabelSelector`, and the canonical string form.
//!
//! ```text
//! <selector>    ::= <requirement> | <requirement> "," <selector>
//! <requirement> ::= [!] KEY [ ("in" | "notin") "(" VALUES ")" | ("=" | "==" | "!=" | ">" | "<") VALUE ]
//! ```
//! Requirements are kept sorted by key (stable), values sorted and deduplicated, so that
//! `Display` gives the same canonical string Kubernetes prints.
//!
//! Also here: the name checks selectors need (`IsQualifiedName`, `IsValidLabelValue`,
//! `IsDNS1123Subdomain`, `IsDNS1123Label`), with Kubernetes' messages.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::status::{ApiError, FieldError, FieldPath, aggregate_field_errors, quote};

/// Why a selector could not be parsed or built. The Display is the message Kubernetes puts in
/// the 400 BadRequest it answers a bad `labelSelector` with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A syntax error outside any requirement (`found ',', expected: ...`).
    #[error("{0}")]
    Syntax(String),
    /// A requirement that failed to parse; wraps the reason.
    #[error("unable to parse requirement: {0}")]
    Requirement(Box<Error>),
    /// Key or values that fail validation.
    #[error("{}", aggregate_field_errors(.0))]
    Invalid(Vec<FieldError>),
    /// A `matchExpressions` operator that is not In, NotIn, Exists or DoesNotExist.
    #[error("{} is not a valid label selector operator", quote(.0))]
    BadOperator(String),
}

/// `pub type Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<&Error> for ApiError {
    /// A bad `labelSelector` is a 400 BadRequest with the parse error as its message.
    fn from(e: &Error) -> ApiError {
        ApiError::bad_request(e.to_string())
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        ApiError::from(&e)
    }
}

/// The operator of a requirement (`selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `=`
    Equals,
    /// `==`
    DoubleEquals,
    /// `!=`
    NotEquals,
    /// `in`
    In,
    /// `notin`
    NotIn,
    /// `key` alone.
    Exists,
    /// `!key`
    DoesNotExist,
    /// `>` (integer comparison)
    GreaterThan,
    /// `<` (integer comparison)
    LessThan,
}

impl Operator {
    /// The spelling in Kubernetes' operator lists (`=`, `in`, `exists`, `gt`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One requirement of a selector: a key, an operator and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement, validating as `labels.NewRequirement`: the key must be a qualified
    /// name, `in`/`notin` need values, `=`/`==`/`!=` exactly one, exists/!exists none,
    /// `>`/`<` one integer; every value must be a valid label value.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self> {
        let mut errs = Vec::new();
        let key_path = FieldPath::new("key");
        let msgs = validate_key(key);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(key_path, key, msgs.join("; ")));
        }
        let values_path = FieldPath::new("values");
        let values_json = || serde_json::Value::from(values.clone());
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(FieldError::invalid(
                        values_path.clone(),
                        values_json(),
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(FieldError::invalid(
                        values_path.clone(),
                        values_json(),
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(FieldError::invalid(
                        values_path.clone(),
                        values_json(),
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(FieldError::invalid(
                        values_path.clone(),
                        values_json(),
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(FieldError::invalid(
                            values_path.index(i),
                            v.as_str(),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let msgs = validate_value(v);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(
                    values_path.index(i).key(key),
                    v.as_str(),
                    msgs.join("; "),
                ));
            }
        }
        if errs.is_empty() {
            Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            })
        } else {
            Err(Error::Invalid(errs))
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, in the order given.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether `labels` satisfy this requirement. `notin` and `!=` match when the key is
    /// absent; `>`/`<` never match a value that is not an integer.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_lookup(|k| labels.get(k).map(String::as_str))
    }

    fn matches_lookup<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                get(&self.key).is_some_and(has)
            }
            Operator::NotIn | Operator::NotEquals => !get(&self.key).is_some_and(has),
            Operator::Exists => get(&self.key).is_some(),
            Operator::DoesNotExist => get(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(have)) = get(&self.key).map(str::parse::<i64>) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (op, parens) = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", false),
            Operator::DoubleEquals => ("==", false),
            Operator::NotEquals => ("!=", false),
            Operator::In => (" in ", true),
            Operator::NotIn => (" notin ", true),
            Operator::GreaterThan => (">", false),
            Operator::LessThan => ("<", false),
        };
        f.write_str(op)?;
        if parens {
            f.write_str("(")?;
        }
        let mut sorted: Vec<&str> = self.values.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        f.write_str(&sorted.join(","))?;
        if parens {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: the AND of its requirements, or the selector that matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// Matches every label set (the empty selector).
    pub fn everything() -> Self {
        Selector::default()
    }

    /// Matches no label set (what a nil `metav1.LabelSelector` means). Displays as `""`.
    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// The selector `k1=v1,k2=v2` of a label set, unvalidated (`SelectorFromSet`).
    pub fn from_set(set: &BTreeMap<String, String>) -> Self {
        Selector {
            requirements: set
                .iter()
                .map(|(k, v)| Requirement {
                    key: k.clone(),
                    operator: Operator::Equals,
                    values: vec![v.clone()],
                })
                .collect(),
            nothing: false,
        }
    }

    /// The selector of a `metav1.LabelSelector` (`LabelSelectorAsSelector` for a non-nil
    /// one): an empty selector (no matchLabels, no matchExpressions) matches everything.
    /// Use [`Selector::from_optional_label_selector`] when the selector may be absent.
    pub fn from_label_selector(ls: &LabelSelector) -> Result<Self> {
        let labels = ls.match_labels.as_ref();
        let exprs = ls.match_expressions.as_deref().unwrap_or_default();
        let mut reqs = Vec::new();
        for (k, v) in labels.into_iter().flatten() {
            reqs.push(Requirement::new(k, Operator::Equals, vec![v.clone()])?);
        }
        for e in exprs {
            let op = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(Error::BadOperator(other.to_string())),
            };
            reqs.push(Requirement::new(
                &e.key,
                op,
                e.values.clone().unwrap_or_default(),
            )?);
        }
        Ok(Selector::default().with(reqs))
    }

    /// `LabelSelectorAsSelector`: `None` (a nil selector, e.g. a PodDisruptionBudget without
    /// one) matches nothing; `Some(empty)` matches everything.
    pub fn from_optional_label_selector(ls: Option<&LabelSelector>) -> Result<Self> {
        match ls {
            None => Ok(Selector::nothing()),
            Some(ls) => Selector::from_label_selector(ls),
        }
    }

    /// This selector with more requirements, re-sorted by key (`Selector.Add`).
    pub fn with(mut self, reqs: impl IntoIterator<Item = Requirement>) -> Self {
        if self.nothing {
            return self;
        }
        self.requirements.extend(reqs);
        self.requirements.sort_by(|a, b| a.key.cmp(&b.key));
        self
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether this selector does not restrict anything (matches every label set).
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this is the selector that matches nothing.
    pub fn matches_nothing(&self) -> bool {
        self.nothing
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether an object's `metadata.labels` satisfy this selector (absent labels are empty;
    /// non-string values count as absent).
    pub fn matches_object(&self, obj: &serde_json::Value) -> bool {
        if self.nothing {
            return false;
        }
        let labels = obj.pointer("/metadata/labels").and_then(|l| l.as_object());
        let get = |k: &str| labels.and_then(|m| m.get(k)).and_then(|v| v.as_str());
        self.requirements.iter().all(|r| r.matches_lookup(get))
    }

    /// The value a selector requires `key` to have exactly (`=`, `==`, or `in` with one value),
    /// for index lookups.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
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

/// Parses a `labelSelector` string exactly as `labels.Parse`. The empty string is the
/// selector that matches everything.
pub fn parse(selector: &str) -> Result<Selector> {
    let mut p = Parser {
        items: lex(selector),
        pos: 0,
    };
    let reqs = p.parse()?;
    Ok(Selector::default().with(reqs))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the selector into tokens the way Kubernetes' lexer does (all of them up front, ending
/// with `EndOfString`).
fn lex(s: &str) -> Vec<(Token, String)> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() {
            out.push((Token::EndOfString, String::new()));
            return out;
        }
        if is_special(b[pos]) {
            let start = pos;
            let mut last: Option<(Token, usize)> = None;
            while pos < b.len() && is_special(b[pos]) {
                pos += 1;
                match keyword(&s[start..pos]) {
                    Some(t) => last = Some((t, pos)),
                    None if last.is_some() => {
                        pos -= 1;
                        break;
                    }
                    None => {}
                }
            }
            match last {
                Some((t, end)) => {
                    pos = end;
                    out.push((t, s[start..end].to_string()));
                }
                None => out.push((
                    Token::Error,
                    format!("error expected: keyword found '{}'", &s[start..pos]),
                )),
            }
        } else {
            let start = pos;
            while pos < b.len() && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let word = &s[start..pos];
            out.push((keyword(word).unwrap_or(Token::Identifier), word.to_string()));
        }
    }
}

/// Whether `in`/`notin` are keywords (after a key) or plain identifiers (as values and keys).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    pos: usize,
}

fn syntax(msg: String) -> Error {
    Error::Syntax(msg)
}

impl Parser {
    fn at(&self, i: usize, ctx: Context) -> (Token, String) {
        let (t, l) = self.items[i.min(self.items.len() - 1)].clone();
        let t = match (ctx, t) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            (_, t) => t,
        };
        (t, l)
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.at(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let item = self.at(self.pos, ctx);
        self.pos += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| Error::Requirement(Box::new(e)))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(reqs),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(syntax(format!(
                                    "found '{l2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(syntax(format!(
                                "found '{l}', expected: ',' or 'end of string'"
                            )));
                        }
                    }
                }
                Token::EndOfString => return Ok(reqs),
                _ => {
                    return Err(syntax(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op) = op {
            return Requirement::new(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values)
    }

    /// The key, and the operator when it is unary (`!key`, or `key` followed by `,` or the end).
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>)> {
        let (mut tok, mut lit) = self.consume(Context::Values);
        let mut not = false;
        if tok == Token::DoesNotExist {
            not = true;
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(syntax(format!("found '{lit}', expected: identifier")));
        }
        let msgs = validate_key(&lit);
        if !msgs.is_empty() {
            // Kubernetes validates here with a nil path, which prints as `<nil>`.
            return Err(Error::Invalid(vec![FieldError::invalid(
                "<nil>",
                lit.as_str(),
                msgs.join("; "),
            )]));
        }
        let (next, _) = self.lookahead(Context::Values);
        let op = if not {
            Some(Operator::DoesNotExist)
        } else if matches!(next, Token::EndOfString | Token::Comma) {
            Some(Operator::Exists)
        } else {
            None
        };
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(syntax(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                )));
            }
        })
    }

    /// `(a,b,c)`: values sorted and deduplicated; `()` is the one empty value.
    fn parse_values(&mut self) -> Result<Vec<String>> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(syntax(format!("found '{lit}' expected: '('")));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Context::Values);
                if t != Token::ClosedPar {
                    return Err(syntax(format!("found '{lit}', expected: ')'")));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(syntax(format!(
                "found '{lit}', expected: ',', ')' or identifier"
            ))),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>> {
        let mut set = std::collections::BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (t2, l2) = self.lookahead(Context::Values);
                    match t2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set.into_iter().collect()),
                        _ => return Err(syntax(format!("found '{l2}', expected: ',' or ')'"))),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Context::Values);
                    if t2 == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set.into_iter().collect());
                    }
                    if t2 == Token::Comma {
                        set.insert(String::new());
                    }
                }
                _ => {
                    return Err(syntax(format!(
                        "found '{lit}', expected: ',', or identifier"
                    )));
                }
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>> {
        let (tok, _) = self.lookahead(Context::Values);
        if matches!(tok, Token::EndOfString | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            Ok(vec![lit])
        } else {
            Err(syntax(format!("found '{lit}', expected: identifier")))
        }
    }
}

// ---- Name checks (k8s.io/apimachinery/pkg/util/validation), Kubernetes' messages. ----

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// `validation.RegexError`: the explanation of a failed format check with examples.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns1123_label_format(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => ok(f) && ok(l) && b.iter().all(|c| ok(c) || *c == b'-'),
        _ => false,
    }
}

fn is_dns1123_subdomain_format(s: &str) -> bool {
    s.split('.').all(is_dns1123_label_format)
}

/// `IsDNS1123Subdomain`: the problems with `value` as a DNS subdomain (empty when valid).
pub fn validate_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !is_dns1123_subdomain_format(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1123Label`: the problems with `value` as a DNS label (empty when valid).
pub fn validate_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_dns1123_label_format(value) {
        if is_dns1123_subdomain_format(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsQualifiedName`: the problems with `key` as a label key (empty when valid).
pub fn validate_key(key: &str) -> Vec<String> {
    let examples = ["MyName", "my.name", "123-abc"];
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    validate_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &examples)
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &examples)
        ));
    }
    errs
}

/// `IsValidLabelValue`: the problems with `value` as a label value (empty when valid).
pub fn validate_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use proptest::prelude::*;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn matches(sel: &str, labels: &[(&str, &str)]) -> bool {
        parse(sel)
            .unwrap_or_else(|e| panic!("{sel}: {e}"))
            .matches(&set(labels))
    }

    #[test]
    fn equality_operators() {
        assert!(matches("x=a", &[("x", "a")]));
        assert!(matches("x==a", &[("x", "a")]));
        assert!(!matches("x=a", &[("x", "b")]));
        assert!(!matches("x=a", &[]));
        assert!(matches("x!=a", &[("x", "b")]));
        assert!(matches("x!=a", &[]), "!= matches an absent key");
        assert!(!matches("x!=a", &[("x", "a")]));
        assert!(matches("x=", &[("x", "")]));
        assert!(!matches("x=", &[]));
    }

    #[test]
    fn set_operators() {
        assert!(matches("x in (a,b)", &[("x", "b")]));
        assert!(!matches("x in (a,b)", &[("x", "c")]));
        assert!(!matches("x in (a,b)", &[]));
        assert!(matches("x notin (a,b)", &[("x", "c")]));
        assert!(matches("x notin (a,b)", &[]));
        assert!(!matches("x notin (a,b)", &[("x", "a")]));
        assert!(matches("x in ()", &[("x", "")]));
        assert!(matches("x in (,a)", &[("x", "")]));
        assert!(matches("x in (a,,b)", &[("x", "")]));
        assert!(matches("x in (a,)", &[("x", "")]));
        // `in` and `notin` are plain words as values.
        assert!(matches("x in (in,notin)", &[("x", "notin")]));
        assert!(matches("in=notin", &[("in", "notin")]));
    }

    #[test]
    fn existence_and_whitespace() {
        assert!(matches("x", &[("x", "")]));
        assert!(!matches("x", &[("y", "")]));
        assert!(matches("!x", &[("y", "")]));
        assert!(!matches("!x", &[("x", "1")]));
        assert!(matches("  x  =  a ,\ty\n,!z ", &[("x", "a"), ("y", "q")]));
        assert!(matches("", &[("x", "1")]));
        assert!(matches("a>1,b<10", &[("a", "2"), ("b", "9")]));
        assert!(!matches("a>1", &[("a", "x")]));
        assert!(!matches("a>1", &[]));
        assert!(matches(
            "app.kubernetes.io/name=web",
            &[("app.kubernetes.io/name", "web")]
        ));
    }

    #[test]
    fn canonical_display() {
        let cases = [
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("b=1,a=2", "a=2,b=1"),
            ("x in (c,a,b,a)", "x in (a,b,c)"),
            ("x notin ( b , a )", "x notin (a,b)"),
            ("!x, y", "!x,y"),
            ("x in ()", "x in ()"),
            ("x in (,a)", "x in (,a)"),
            ("x=", "x="),
            ("a>1", "a>1"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input).unwrap().to_string(), want, "{input}");
        }
    }

    #[test]
    fn syntax_errors_match_kubernetes() {
        let cases = [
            ("x=a,", "found '', expected: identifier after ','"),
            (
                ",",
                "found ',', expected: !, identifier, or 'end of string'",
            ),
            ("x=a y", "found 'y', expected: ',' or 'end of string'"),
            (
                "x in",
                "unable to parse requirement: found '' expected: '('",
            ),
            (
                "x in (",
                "unable to parse requirement: found '', expected: ',', ')' or identifier",
            ),
            (
                "x in (a",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "x in (a b)",
                "unable to parse requirement: found 'b', expected: ',' or ')'",
            ),
            (
                "x (",
                "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "x=(",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            ("x,,y", "found ',', expected: identifier after ','"),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input).unwrap_err().to_string(), want, "{input}");
        }
    }

    #[test]
    fn errors_become_bad_requests() {
        let e = ApiError::from(parse("x in").unwrap_err());
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.message(),
            "unable to parse requirement: found '' expected: '('"
        );
    }

    #[test]
    fn validation_errors_match_kubernetes() {
        assert_eq!(
            parse("_x=a").unwrap_err().to_string(),
            "unable to parse requirement: <nil>: Invalid value: \"_x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert_eq!(
            parse("x=a b").unwrap_err().to_string(),
            "found 'b', expected: ',' or 'end of string'"
        );
        assert_eq!(
            parse("x=_a").unwrap_err().to_string(),
            "unable to parse requirement: values[0][x]: Invalid value: \"_a\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert_eq!(
            parse("a>b").unwrap_err().to_string(),
            "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert_eq!(
            validate_key("Example.com/x"),
            vec![
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert_eq!(
            validate_key("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(
            validate_key("a/").len(),
            2,
            "empty name: non-empty and format"
        );
        assert!(validate_key("a/b/c")[0].starts_with("a qualified name must consist"));
        assert_eq!(
            validate_key(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters".to_string()]
        );
        assert!(validate_key("example.com/My_Name-1.x").is_empty());
        assert_eq!(validate_value(&"a".repeat(64)).len(), 1);
        assert!(validate_value("").is_empty());
        assert_eq!(
            validate_dns1123_label("a.b"),
            vec!["must not contain dots".to_string()]
        );
        assert!(validate_dns1123_label("-a")[0].starts_with("a lowercase RFC 1123 label"));
        assert!(validate_dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(validate_dns1123_subdomain("a..b").len(), 1);
    }

    #[test]
    fn from_label_selector() {
        // An empty selector matches everything, a nil one nothing.
        let empty = LabelSelector::default();
        let sel = Selector::from_label_selector(&empty).unwrap();
        assert!(sel.is_empty() && sel.matches(&set(&[("a", "b")])) && sel.matches(&set(&[])));
        let nil = Selector::from_optional_label_selector(None).unwrap();
        assert!(nil.matches_nothing() && !nil.matches(&set(&[])));
        assert_eq!(nil.to_string(), "");

        let ls = LabelSelector {
            match_labels: Some(set(&[("app", "web"), ("tier", "fe")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "In".into(),
                    values: Some(vec!["prod".into(), "dev".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "zone".into(),
                    operator: "Exists".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "old".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["true".into()]),
                },
            ]),
        };
        let sel = Selector::from_label_selector(&ls).unwrap();
        assert_eq!(
            sel.to_string(),
            "app=web,!canary,env in (dev,prod),old notin (true),tier=fe,zone"
        );
        assert!(sel.matches(&set(&[
            ("app", "web"),
            ("tier", "fe"),
            ("env", "dev"),
            ("zone", "a")
        ])));
        assert!(!sel.matches(&set(&[("app", "web"), ("tier", "fe"), ("env", "dev")])));
        assert!(!sel.matches(&set(&[
            ("app", "web"),
            ("tier", "fe"),
            ("env", "dev"),
            ("zone", "a"),
            ("canary", "1")
        ])));

        let bad_op = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Equals".into(),
                values: None,
            }]),
            ..LabelSelector::default()
        };
        assert_eq!(
            Selector::from_label_selector(&bad_op)
                .unwrap_err()
                .to_string(),
            "\"Equals\" is not a valid label selector operator"
        );
        let no_values = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "In".into(),
                values: None,
            }]),
            ..LabelSelector::default()
        };
        assert_eq!(
            Selector::from_label_selector(&no_values)
                .unwrap_err()
                .to_string(),
            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
        );
        let exists_with_values = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Exists".into(),
                values: Some(vec!["x".into()]),
            }]),
            ..LabelSelector::default()
        };
        assert_eq!(
            Selector::from_label_selector(&exists_with_values)
                .unwrap_err()
                .to_string(),
            "values: Invalid value: []string{\"x\"}: values set must be empty for exists and does not exist"
        );
    }

    #[test]
    fn objects_and_exact_matches() {
        let sel = parse("app=web,tier in (fe)").unwrap();
        let obj = serde_json::json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        assert!(sel.matches_object(&obj));
        assert!(!sel.matches_object(&serde_json::json!({"metadata": {}})));
        assert!(parse("!x").unwrap().matches_object(&serde_json::json!({})));
        assert_eq!(sel.requires_exact_match("app"), Some("web"));
        assert_eq!(sel.requires_exact_match("tier"), Some("fe"));
        assert_eq!(parse("a!=b").unwrap().requires_exact_match("a"), None);
        assert_eq!(
            Selector::from_set(&set(&[("b", "1"), ("a", "2")])).to_string(),
            "a=2,b=1"
        );
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,3}",
            "[a-z]{1,2}\\.io/[a-zA-Z0-9]{1,3}",
            Just("in".to_string()),
            Just("notin".to_string()),
        ]
    }

    fn value_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9]{0,3}",
            "[a-z]-[a-z_.]{0,2}[a-z]",
            Just("in".to_string())
        ]
    }

    fn requirement_strategy() -> impl Strategy<Value = Requirement> {
        (
            key_strategy(),
            0..8usize,
            proptest::collection::vec(value_strategy(), 1..4),
            0i64..100,
        )
            .prop_map(|(key, op, mut values, n)| {
                // Parsing deduplicates set values; Display (like Kubernetes') does not.
                values.sort();
                values.dedup();
                let (op, values) = match op {
                    0 => (Operator::Equals, vec![values[0].clone()]),
                    1 => (Operator::DoubleEquals, vec![values[0].clone()]),
                    2 => (Operator::NotEquals, vec![values[0].clone()]),
                    3 => (Operator::In, values),
                    4 => (Operator::NotIn, values),
                    5 => (Operator::Exists, vec![]),
                    6 => (Operator::DoesNotExist, vec![]),
                    _ => (Operator::GreaterThan, vec![n.to_string()]),
                };
                Requirement::new(&key, op, values).expect("generated requirements are valid")
            })
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(
            reqs in proptest::collection::vec(requirement_strategy(), 0..5),
            labels in proptest::collection::btree_map(key_strategy(), value_strategy(), 0..5),
        ) {
            let sel = Selector::default().with(reqs);
            let text = sel.to_string();
            let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            prop_assert_eq!(back.to_string(), text.clone());
            prop_assert_eq!(back.matches(&labels), sel.matches(&labels), "{}", text);
            prop_assert_eq!(parse(&back.to_string()).unwrap(), back);
        }

        #[test]
        fn parse_never_panics(s in "[a-z=!(), \t<>in]{0,16}") {
            let _ = parse(&s);
        }
    }
}

//! The JSONPath subset custom resource definitions use for printer columns, selectable fields and
//! the scale subresource: fields (`.spec.replicas`, `.metadata.labels.app`), indexes (`[0]`),
//! wildcards (`[*]`) and equality filters (`[?(@.type=="Ready")]`), as in
//! `.status.conditions[?(@.type=="Ready")].status`.

use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// A field of an object.
    Field(String),
    /// An element of a list.
    Index(usize),
    /// Every element of a list (or value of an object).
    All,
    /// The elements of a list whose `key` equals `value`.
    Filter {
        /// The field compared, below the element (`type` in `@.type`).
        key: Vec<String>,
        /// The value it must have (a JSON scalar).
        value: Value,
    },
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPath {
    steps: Vec<Step>,
    source: String,
}

impl JsonPath {
    /// Parses `.a.b[0].c`, `{.a.b}` (the braces kubectl's `-o jsonpath` uses are accepted too).
    pub fn parse(source: &str) -> Result<JsonPath, String> {
        let text = source.trim();
        let text = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text);
        let text = text.strip_prefix('$').unwrap_or(text);
        if !text.starts_with('.') && !text.starts_with('[') {
            return Err(format!(
                "must be a simple json path starting with . : {source:?}"
            ));
        }
        let mut steps = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                let name = &after[..end];
                if name.is_empty() {
                    return Err(format!("empty field name in {source:?}"));
                }
                steps.push(Step::Field(name.to_string()));
                rest = &after[end..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let end = after
                    .find(']')
                    .ok_or_else(|| format!("unclosed [ in {source:?}"))?;
                let inner = after[..end].trim();
                rest = &after[end + 1..];
                steps.push(parse_bracket(inner, source)?);
            } else {
                return Err(format!("unexpected {rest:?} in {source:?}"));
            }
        }
        Ok(JsonPath {
            steps,
            source: source.to_string(),
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The field names of a path made of fields only (`.spec.replicas` → `["spec", "replicas"]`).
    pub fn fields(&self) -> Option<Vec<&str>> {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Field(f) => Some(f.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Every value the path reaches in `object`, in order.
    pub fn find<'a>(&self, object: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![object];
        for step in &self.steps {
            let mut next = Vec::new();
            for v in current {
                match step {
                    Step::Field(f) => next.extend(v.get(f)),
                    Step::Index(i) => next.extend(v.get(*i)),
                    Step::All => match v {
                        Value::Array(items) => next.extend(items.iter()),
                        Value::Object(map) => next.extend(map.values()),
                        _ => {}
                    },
                    Step::Filter { key, value } => {
                        if let Value::Array(items) = v {
                            next.extend(items.iter().filter(|item| {
                                key.iter().try_fold(*item, |x, k| x.get(k)) == Some(value)
                            }));
                        }
                    }
                }
            }
            current = next;
        }
        current
    }

    /// The first value the path reaches.
    pub fn first<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        self.find(object).into_iter().next()
    }
}

fn parse_bracket(inner: &str, source: &str) -> Result<Step, String> {
    if inner == "*" {
        return Ok(Step::All);
    }
    if let Ok(i) = inner.parse::<usize>() {
        return Ok(Step::Index(i));
    }
    if let Some(quoted) = inner
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
    {
        return Ok(Step::Field(quoted.to_string()));
    }
    let filter = inner
        .strip_prefix("?(")
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("unsupported [{inner}] in {source:?}"))?;
    let (lhs, rhs) = filter
        .split_once("==")
        .ok_or_else(|| format!("only == filters are supported: {source:?}"))?;
    let key = lhs
        .trim()
        .strip_prefix("@.")
        .ok_or_else(|| format!("a filter compares a field of @: {source:?}"))?;
    let rhs = rhs.trim();
    let value = if let Some(s) = rhs
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| rhs.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
    {
        Value::String(s.to_string())
    } else {
        serde_json::from_str(rhs).map_err(|_| format!("bad filter value {rhs:?} in {source:?}"))?
    };
    Ok(Step::Filter {
        key: key.split('.').map(str::to_string).collect(),
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_indexes_wildcards_and_filters() {
        let obj = json!({
            "spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Synced", "status": "False"}
            ]},
            "metadata": {"labels": {"app.kubernetes.io/name": "web"}}
        });
        let at = |p: &str| {
            JsonPath::parse(p)
                .unwrap()
                .find(&obj)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(at(".spec.replicas"), vec![json!(3)]);
        assert_eq!(at(".spec.ports[1].port"), vec![json!(443)]);
        assert_eq!(at(".spec.ports[*].port"), vec![json!(80), json!(443)]);
        assert_eq!(
            at(r#".status.conditions[?(@.type=="Ready")].status"#),
            vec![json!("True")]
        );
        assert_eq!(
            at(".metadata.labels['app.kubernetes.io/name']"),
            vec![json!("web")]
        );
        assert_eq!(at("{.spec.replicas}"), vec![json!(3)]);
        assert!(at(".spec.missing").is_empty());
        assert_eq!(
            JsonPath::parse(".spec.replicas").unwrap().fields(),
            Some(vec!["spec", "replicas"])
        );
    }

    #[test]
    fn malformed_paths_are_refused() {
        for bad in ["spec", ".a[", ".a[?(@.b>1)]", ".a..b"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }
}

//! Structural schemas of custom resources (`openAPIV3Schema`): parsed once when a definition is
//! served, then used to prune, default and validate every object of that version, with the
//! messages Kubernetes gives (kube-openapi's wording inside apimachinery's field errors).
//!
//! Pruning drops what the schema does not name unless `x-kubernetes-preserve-unknown-fields`
//! says to keep it; `apiVersion`, `kind` and `metadata` stay at the root and in embedded
//! resources. Defaulting fills `default:` values of absent properties, top down, and replaces
//! `null` in a non-nullable field that has a default; other such nulls are pruned.
//! Validation checks types, formats, enums, patterns, bounds and counts, then the CEL rules of
//! `x-kubernetes-validations` (see [`super::cel`]).

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

use crate::validation::FieldError;

use super::cel::Rule;

/// The JSON type a schema node names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// `object`.
    Object,
    /// `array`.
    Array,
    /// `string`.
    String,
    /// `integer`.
    Integer,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
}

impl Type {
    fn parse(s: &str) -> Option<Type> {
        Some(match s {
            "object" => Type::Object,
            "array" => Type::Array,
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            _ => return None,
        })
    }

    /// As written in a schema.
    pub fn as_str(self) -> &'static str {
        match self {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
        }
    }
}

/// One node of a structural schema.
#[derive(Debug, Default)]
pub struct Schema {
    /// `type`; `None` only where `x-kubernetes-int-or-string` or
    /// `x-kubernetes-preserve-unknown-fields` allow it.
    pub type_: Option<Type>,
    /// `nullable`.
    pub nullable: bool,
    /// `x-kubernetes-int-or-string`.
    pub int_or_string: bool,
    /// `x-kubernetes-preserve-unknown-fields`.
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-embedded-resource`.
    pub embedded_resource: bool,
    /// `properties`.
    pub properties: BTreeMap<String, Schema>,
    /// `additionalProperties` as a schema (maps).
    pub additional_properties: Option<Box<Schema>>,
    /// `items`.
    pub items: Option<Box<Schema>>,
    /// `required`.
    pub required: Vec<String>,
    /// `enum`.
    pub enum_values: Vec<Value>,
    /// `pattern`, as written and compiled.
    pub pattern: Option<(String, Regex)>,
    /// `format`.
    pub format: Option<String>,
    /// `maximum` and whether it is exclusive.
    pub maximum: Option<(f64, bool)>,
    /// `minimum` and whether it is exclusive.
    pub minimum: Option<(f64, bool)>,
    /// `multipleOf`.
    pub multiple_of: Option<f64>,
    /// `maxLength`, `minLength` (characters).
    pub max_length: Option<u64>,
    /// `minLength`.
    pub min_length: Option<u64>,
    /// `maxItems`.
    pub max_items: Option<u64>,
    /// `minItems`.
    pub min_items: Option<u64>,
    /// `uniqueItems`.
    pub unique_items: bool,
    /// `maxProperties`.
    pub max_properties: Option<u64>,
    /// `minProperties`.
    pub min_properties: Option<u64>,
    /// `default`.
    pub default: Option<Value>,
    /// `x-kubernetes-list-type`: `atomic`, `set` or `map`.
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type`.
    pub map_type: Option<String>,
    /// `x-kubernetes-validations`, compiled.
    pub rules: Vec<Rule>,
    /// `allOf`, `anyOf`, `oneOf`, `not`: value validations only (a structural schema puts no
    /// types or properties there that the node itself does not have).
    pub all_of: Vec<Schema>,
    /// `anyOf`.
    pub any_of: Vec<Schema>,
    /// `oneOf`.
    pub one_of: Vec<Schema>,
    /// `not`.
    pub not: Option<Box<Schema>>,
}

/// Why a schema is not structural, or cannot be used: each message names the field of the
/// definition at fault, as Kubernetes' definition validation reports it.
pub type SchemaErrors = Vec<FieldError>;

fn number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

fn count(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64)
}

impl Schema {
    /// Parses `openAPIV3Schema` (found at `path` in the definition), checking that it is
    /// structural: every node has a type (or says it may hold anything), and the logical
    /// junctors (`allOf`, ...) add no types, properties or defaults of their own.
    pub fn parse(value: &Value, path: &str) -> Result<Schema, SchemaErrors> {
        let mut errors = Vec::new();
        let schema = Schema::parse_node(value, path, true, false, &mut errors);
        if errors.is_empty() {
            Ok(schema)
        } else {
            Err(errors)
        }
    }

    fn parse_node(
        value: &Value,
        path: &str,
        root: bool,
        in_junctor: bool,
        errors: &mut SchemaErrors,
    ) -> Schema {
        let Some(map) = value.as_object() else {
            errors.push(FieldError::invalid(
                path,
                value.clone(),
                "must be an object",
            ));
            return Schema::default();
        };
        let get = |k: &str| map.get(k);
        let flag = |k: &str| get(k).and_then(Value::as_bool).unwrap_or(false);
        let mut s = Schema {
            nullable: flag("nullable"),
            int_or_string: flag("x-kubernetes-int-or-string"),
            preserve_unknown_fields: flag("x-kubernetes-preserve-unknown-fields"),
            embedded_resource: flag("x-kubernetes-embedded-resource"),
            unique_items: flag("uniqueItems"),
            format: get("format").and_then(Value::as_str).map(str::to_string),
            multiple_of: number(get("multipleOf")),
            max_length: count(get("maxLength")),
            min_length: count(get("minLength")),
            max_items: count(get("maxItems")),
            min_items: count(get("minItems")),
            max_properties: count(get("maxProperties")),
            min_properties: count(get("minProperties")),
            default: get("default").cloned(),
            list_type: get("x-kubernetes-list-type")
                .and_then(Value::as_str)
                .map(str::to_string),
            map_type: get("x-kubernetes-map-type")
                .and_then(Value::as_str)
                .map(str::to_string),
            ..Schema::default()
        };
        s.maximum = number(get("maximum")).map(|m| (m, flag("exclusiveMaximum")));
        s.minimum = number(get("minimum")).map(|m| (m, flag("exclusiveMinimum")));
        s.required = strings(get("required"));
        s.list_map_keys = strings(get("x-kubernetes-list-map-keys"));
        s.enum_values = get("enum")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        match get("type").and_then(Value::as_str) {
            Some(t) => match Type::parse(t) {
                Some(t) => s.type_ = Some(t),
                None => errors.push(FieldError::not_supported(
                    format!("{path}.type"),
                    t,
                    &["array", "boolean", "integer", "number", "object", "string"],
                )),
            },
            None if in_junctor || s.int_or_string || s.preserve_unknown_fields => {}
            None => errors.push(FieldError::required(
                format!("{path}.type"),
                "must not be empty for specified object fields",
            )),
        }
        if root && s.type_.is_some_and(|t| t != Type::Object) {
            errors.push(FieldError::invalid(
                format!("{path}.type"),
                s.type_.map(Type::as_str).unwrap_or(""),
                "must be object at the root",
            ));
        }
        if let Some(pattern) = get("pattern").and_then(Value::as_str) {
            match Regex::new(pattern) {
                Ok(re) => s.pattern = Some((pattern.to_string(), re)),
                Err(e) => errors.push(FieldError::invalid(
                    format!("{path}.pattern"),
                    pattern,
                    format!("must be a valid regular expression, but isn't: {e}"),
                )),
            }
        }
        if let Some(props) = get("properties").and_then(Value::as_object) {
            if in_junctor {
                errors.push(FieldError::forbidden(
                    format!("{path}.properties"),
                    "must not be specified in a nested context",
                ));
            }
            for (name, prop) in props {
                let child = Schema::parse_node(
                    prop,
                    &format!("{path}.properties[{name}]"),
                    false,
                    in_junctor,
                    errors,
                );
                s.properties.insert(name.clone(), child);
            }
        }
        match get("additionalProperties") {
            Some(Value::Object(_)) => {
                let child = Schema::parse_node(
                    &map["additionalProperties"],
                    &format!("{path}.additionalProperties"),
                    false,
                    in_junctor,
                    errors,
                );
                if !s.properties.is_empty() {
                    errors.push(FieldError::forbidden(
                        format!("{path}.additionalProperties"),
                        "additionalProperties and properties are mutual exclusive",
                    ));
                }
                s.additional_properties = Some(Box::new(child));
            }
            Some(Value::Bool(false)) => {
                errors.push(FieldError::forbidden(
                    format!("{path}.additionalProperties"),
                    "must not be used if properties is empty or false",
                ));
            }
            _ => {}
        }
        if let Some(items) = get("items") {
            if items.is_array() {
                errors.push(FieldError::forbidden(
                    format!("{path}.items"),
                    "items must be a schema object and not an array",
                ));
            } else {
                s.items = Some(Box::new(Schema::parse_node(
                    items,
                    &format!("{path}.items"),
                    false,
                    in_junctor,
                    errors,
                )));
            }
        } else if s.type_ == Some(Type::Array) && !in_junctor {
            errors.push(FieldError::required(
                format!("{path}.items"),
                "must be specified",
            ));
        }
        for (key, out) in [
            ("allOf", &mut s.all_of),
            ("anyOf", &mut s.any_of),
            ("oneOf", &mut s.one_of),
        ] {
            for (i, sub) in get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                out.push(Schema::parse_node(
                    sub,
                    &format!("{path}.{key}[{i}]"),
                    false,
                    true,
                    errors,
                ));
            }
        }
        if let Some(not) = get("not") {
            s.not = Some(Box::new(Schema::parse_node(
                not,
                &format!("{path}.not"),
                false,
                true,
                errors,
            )));
        }
        if in_junctor && s.default.is_some() {
            errors.push(FieldError::forbidden(
                format!("{path}.default"),
                "must not be set inside logical junctors",
            ));
        }
        if let Some(rules) = get("x-kubernetes-validations").and_then(Value::as_array) {
            for (i, rule) in rules.iter().enumerate() {
                match Rule::compile(rule) {
                    Ok(rule) => s.rules.push(rule),
                    Err(e) => errors.push(FieldError::invalid(
                        format!("{path}.x-kubernetes-validations[{i}].rule"),
                        rule.get("rule").cloned().unwrap_or(Value::Null),
                        format!("compilation failed: {e}"),
                    )),
                }
            }
        }
        if s.list_type.as_deref() == Some("map") && s.list_map_keys.is_empty() {
            errors.push(FieldError::required(
                format!("{path}.x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        s
    }

    /// The child schema of property `key`: a named property, else `additionalProperties`.
    pub fn property(&self, key: &str) -> Option<&Schema> {
        self.properties
            .get(key)
            .or(self.additional_properties.as_deref())
    }

    /// Whether unknown keys of this object are kept.
    fn keeps_unknown(&self) -> bool {
        self.preserve_unknown_fields || self.additional_properties.is_some()
    }

    /// Prunes `value` (the whole object when `root`): drops fields the schema does not name and
    /// nulls in non-nullable fields without defaults.
    pub fn prune(&self, value: &mut Value, root: bool) {
        match value {
            Value::Object(map) => {
                let keep_meta = root || self.embedded_resource;
                let keys: Vec<String> = map.keys().cloned().collect();
                for key in keys {
                    if keep_meta && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    match self.property(&key) {
                        Some(child) => {
                            let drop_null =
                                map[&key].is_null() && !child.nullable && child.default.is_none();
                            if drop_null {
                                map.remove(&key);
                            } else if let Some(v) = map.get_mut(&key) {
                                child.prune(v, false);
                            }
                        }
                        None if self.keeps_unknown() => {}
                        None => {
                            map.remove(&key);
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item) = self.items.as_deref() {
                    for v in items {
                        item.prune(v, false);
                    }
                }
            }
            _ => {}
        }
    }

    /// Fills defaults into `value`, top down.
    pub fn apply_defaults(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, child) in &self.properties {
                    match map.get_mut(key) {
                        None => {
                            if let Some(default) = &child.default {
                                map.insert(key.clone(), default.clone());
                            }
                        }
                        Some(v) if v.is_null() && !child.nullable => {
                            if let Some(default) = &child.default {
                                *v = default.clone();
                            }
                        }
                        Some(_) => {}
                    }
                    if let Some(v) = map.get_mut(key) {
                        child.apply_defaults(v);
                    }
                }
                if let Some(extra) = self.additional_properties.as_deref() {
                    for (key, v) in map.iter_mut() {
                        if !self.properties.contains_key(key) {
                            extra.apply_defaults(v);
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item) = self.items.as_deref() {
                    for v in items {
                        item.apply_defaults(v);
                    }
                }
            }
            _ => {}
        }
    }

    /// Validates `value` found at `path` (`""` at the root) against the schema, adding every
    /// failure to `errors`; then, if no value had the wrong type, its CEL rules (with `old`, the
    /// value at the same place before an update, for transition rules), as Kubernetes runs
    /// them only on an object whose types are right.
    pub fn validate(
        &self,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        let before = errors.len();
        self.validate_schema(value, path, errors);
        let blocked = errors[before..]
            .iter()
            .any(|e| e.kind == crate::validation::FieldErrorType::TypeInvalid);
        if blocked {
            errors.push(FieldError::invalid(
                "<nil>",
                Value::Null,
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        } else {
            self.check_rules(value, old, path, errors);
        }
    }

    /// The schema's own checks of `value` and everything below it.
    fn validate_schema(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let before = errors.len();
        self.validate_value(value, path, errors);
        if errors.len() == before {
            self.validate_children(value, path, errors);
        }
    }

    /// The CEL rules of this node and every node below it.
    fn check_rules(
        &self,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        for rule in &self.rules {
            if let Some(e) = rule.check(value, old, path, self.type_name()) {
                errors.push(e);
            }
        }
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")
                    {
                        continue;
                    }
                    if let Some(child) = self.property(key) {
                        let old_child = old.and_then(|o| o.get(key));
                        child.check_rules(v, old_child, &join(path, key), errors);
                    }
                }
            }
            Value::Array(items) => {
                let Some(item_schema) = self.items.as_deref() else {
                    return;
                };
                for (i, item) in items.iter().enumerate() {
                    // Transition rules of list items see the old item only in map lists (by
                    // key); elsewhere items have no identity across an update.
                    let old_item = match (self.list_type.as_deref(), old) {
                        (Some("map"), Some(Value::Array(old_items))) => old_items
                            .iter()
                            .find(|o| self.list_map_keys.iter().all(|k| o.get(k) == item.get(k))),
                        _ => None,
                    };
                    item_schema.check_rules(item, old_item, &format!("{path}[{i}]"), errors);
                }
            }
            _ => {}
        }
    }

    /// The type a rule failure names as the "value" (`Invalid value: "object"`).
    fn type_name(&self) -> &'static str {
        match self.type_ {
            Some(t) => t.as_str(),
            None if self.int_or_string => "string",
            None => "object",
        }
    }

    fn validate_children(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        match value {
            Value::Object(map) => {
                for key in &self.required {
                    if !map.contains_key(key) {
                        errors.push(FieldError::required(join(path, key), ""));
                    }
                }
                for (key, v) in map {
                    if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")
                    {
                        continue;
                    }
                    if let Some(child) = self.property(key) {
                        child.validate_schema(v, &join(path, key), errors);
                    }
                }
                let n = map.len() as u64;
                if let Some(max) = self.max_properties
                    && n > max
                {
                    errors.push(FieldError::too_many(
                        path_or_root(path),
                        n as usize,
                        max as usize,
                    ));
                }
                if let Some(min) = self.min_properties
                    && n < min
                {
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        n,
                        format!(
                            "{} in body should have at least {min} properties",
                            name(path)
                        ),
                    ));
                }
            }
            Value::Array(items) => {
                let n = items.len() as u64;
                if let Some(max) = self.max_items
                    && n > max
                {
                    errors.push(FieldError::too_many(
                        path_or_root(path),
                        n as usize,
                        max as usize,
                    ));
                }
                if let Some(min) = self.min_items
                    && n < min
                {
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        Value::Array(items.clone()),
                        format!("{} in body should have at least {min} items", name(path)),
                    ));
                }
                if self.unique_items || self.list_type.as_deref() == Some("set") {
                    for (i, item) in items.iter().enumerate() {
                        if items[..i].contains(item) {
                            errors
                                .push(FieldError::duplicate(format!("{path}[{i}]"), item.clone()));
                        }
                    }
                }
                if self.list_type.as_deref() == Some("map") {
                    let keys_of = |item: &Value| -> Vec<Value> {
                        self.list_map_keys
                            .iter()
                            .map(|k| item.get(k).cloned().unwrap_or(Value::Null))
                            .collect()
                    };
                    for (i, item) in items.iter().enumerate() {
                        let keys = keys_of(item);
                        if items[..i].iter().any(|other| keys_of(other) == keys) {
                            let shown = if keys.len() == 1 {
                                keys[0].clone()
                            } else {
                                Value::Array(keys)
                            };
                            errors.push(FieldError::duplicate(format!("{path}[{i}]"), shown));
                        }
                    }
                }
                if let Some(item_schema) = self.items.as_deref() {
                    for (i, item) in items.iter().enumerate() {
                        item_schema.validate_schema(item, &format!("{path}[{i}]"), errors);
                    }
                }
            }
            _ => {}
        }
    }

    /// The checks of this node alone: type, then the value's own constraints.
    fn validate_value(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        if value.is_null() {
            if !self.nullable && self.type_.is_some() {
                errors.push(type_error(path, self, value));
            }
            return;
        }
        if !self.type_matches(value) {
            errors.push(type_error(path, self, value));
            return;
        }
        let here = name(path);
        if !self.enum_values.is_empty() && !self.enum_values.contains(value) {
            let allowed: Vec<String> = self
                .enum_values
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
            errors.push(FieldError::not_supported(
                path_or_root(path),
                value.clone(),
                &allowed,
            ));
        }
        match value {
            Value::String(s) => {
                let chars = s.chars().count() as u64;
                if let Some(max) = self.max_length
                    && chars > max
                {
                    errors.push(FieldError::too_long(path_or_root(path), max as usize));
                }
                if let Some(min) = self.min_length
                    && chars < min
                {
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        s.as_str(),
                        format!("{here} in body should be at least {min} chars long"),
                    ));
                }
                if let Some((pattern, re)) = &self.pattern
                    && !re.is_match(s)
                {
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        s.as_str(),
                        format!("{here} in body should match '{pattern}'"),
                    ));
                }
                if let Some(format) = &self.format
                    && let Some(problem) = check_format(format, s)
                {
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        s.as_str(),
                        format!("{here} in body must be of type {format}: {problem}"),
                    ));
                }
            }
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(0.0);
                if let Some((max, exclusive)) = self.maximum
                    && (x > max || (exclusive && x == max))
                {
                    let relation = if exclusive {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        value.clone(),
                        format!("{here} in body should be {relation} {}", go_float(max)),
                    ));
                }
                if let Some((min, exclusive)) = self.minimum
                    && (x < min || (exclusive && x == min))
                {
                    let relation = if exclusive {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        value.clone(),
                        format!("{here} in body should be {relation} {}", go_float(min)),
                    ));
                }
                if let Some(m) = self.multiple_of
                    && m > 0.0
                    && (x / m).fract().abs() > 1e-9
                {
                    errors.push(FieldError::invalid(
                        path_or_root(path),
                        value.clone(),
                        format!("{here} in body should be a multiple of {}", go_float(m)),
                    ));
                }
            }
            _ => {}
        }
        for sub in &self.all_of {
            sub.validate_value(value, path, errors);
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|sub| sub.accepts(value, path)) {
            errors.push(FieldError::invalid(
                path_or_root(path),
                value.clone(),
                format!("{here} in body must match at least one schema (anyOf)"),
            ));
        }
        if !self.one_of.is_empty()
            && self
                .one_of
                .iter()
                .filter(|sub| sub.accepts(value, path))
                .count()
                != 1
        {
            errors.push(FieldError::invalid(
                path_or_root(path),
                value.clone(),
                format!("{here} in body must match exactly one schema (oneOf)"),
            ));
        }
        if let Some(not) = &self.not
            && not.accepts(value, path)
        {
            errors.push(FieldError::invalid(
                path_or_root(path),
                value.clone(),
                format!("{here} in body must not validate the schema (not)"),
            ));
        }
    }

    /// Whether `value` passes this (junctor) schema's value checks and required fields.
    fn accepts(&self, value: &Value, path: &str) -> bool {
        let mut errors = Vec::new();
        self.validate_value(value, path, &mut errors);
        if let Value::Object(map) = value {
            if self.required.iter().any(|k| !map.contains_key(k)) {
                return false;
            }
            for (key, child) in &self.properties {
                if let Some(v) = map.get(key) {
                    child.validate_value(v, path, &mut errors);
                }
            }
        }
        errors.is_empty()
    }

    fn type_matches(&self, value: &Value) -> bool {
        if self.int_or_string {
            return value.is_string() || is_integer(value);
        }
        match self.type_ {
            None => true,
            Some(Type::Object) => value.is_object(),
            Some(Type::Array) => value.is_array(),
            Some(Type::String) => value.is_string(),
            Some(Type::Integer) => is_integer(value),
            Some(Type::Number) => value.is_number(),
            Some(Type::Boolean) => value.is_boolean(),
        }
    }

    /// Walks `path` (object keys) from this node.
    pub fn at(&self, path: &[&str]) -> Option<&Schema> {
        path.iter().try_fold(self, |s, key| s.property(key))
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// `a.b` below `a`, `b` at the root.
fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The field path of an error at `path` (`<root>` for the object itself).
fn path_or_root(path: &str) -> String {
    if path.is_empty() {
        "<root>".into()
    } else {
        path.to_string()
    }
}

/// The name kube-openapi puts in its messages.
fn name(path: &str) -> &str {
    if path.is_empty() { "." } else { path }
}

/// The JSON type name of a value, as kube-openapi reports a mismatch.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() && n.as_f64().is_some_and(|f| f.fract() != 0.0) => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(path: &str, schema: &Schema, value: &Value) -> FieldError {
    let want = if schema.int_or_string {
        "integer,string".to_string()
    } else {
        schema
            .type_
            .map(Type::as_str)
            .unwrap_or("object")
            .to_string()
    };
    let got = json_type(value);
    FieldError::new(
        crate::validation::FieldErrorType::TypeInvalid,
        path_or_root(path),
        Some(Value::String(got.into())),
        format!("{} in body must be of type {want}: \"{got}\"", name(path)),
    )
}

/// A float as Go's `%v` prints it: integers without a fraction.
fn go_float(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// Checks the formats Kubernetes validates; `None` when `s` is fine or the format is unchecked.
fn check_format(format: &str, s: &str) -> Option<String> {
    let ok = match format {
        "int32" => s.parse::<i32>().is_ok(),
        "int64" => s.parse::<i64>().is_ok(),
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => uuid::Uuid::parse_str(s).is_ok(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        _ => return None,
    };
    (!ok).then(|| format!("{s:?}"))
}

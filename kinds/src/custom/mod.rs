//! Kinds defined at run time by CustomResourceDefinitions: one [`CustomKind`] per served version
//! of a definition, built by [`kinds_of`] and registered in [`crate::Kinds`] while the definition
//! is Established.
//!
//! A custom resource is decoded by pruning it to its structural schema, defaulted from the
//! schema's `default:` values, validated against the schema and its CEL rules, shown with the
//! definition's printer columns, selected by its selectable fields and scaled through its `scale`
//! subresource paths. Every version is stored in the storage version; with `conversion: None`
//! only `apiVersion` differs between versions (see [`Kind::storage_version`]).
//!
//! # Layout
//! - [`schema`]: structural schemas (pruning, defaulting, validation).
//! - [`cel`]: `x-kubernetes-validations` rules.
//! - [`jsonpath`]: the paths of printer columns, selectable fields and scale.
//! - [`merge`]: the list and map types server-side apply follows.
//! - this file: the definition's names and versions, as kinds.

pub mod authorizer;
pub mod cel;
pub mod jsonpath;
pub mod merge;
pub mod schema;
pub mod typecheck;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::SchemaGenerator;
use serde::Deserialize;
use serde_json::{Value, json};
use skiff_meta::ResourceInfo;
use skiff_meta::intern;
use skiff_meta::resources::{FieldSource, READ_WRITE, SCALE, SelectableField, status};

use crate::kind::{Checked, Kind, ScalePaths, SelectorShape, Strategy};
use crate::patch::schema::Type;
use crate::table::{self, Column};
use crate::validation::FieldError;

use jsonpath::JsonPath;
use schema::Schema;

/// The group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";

/// One printer column: its definition and where its value is read.
struct PrinterColumn {
    column: Column,
    path: JsonPath,
}

/// One served version of a custom resource.
pub struct CustomKind {
    info: &'static ResourceInfo,
    storage_version: &'static str,
    schema: Arc<Schema>,
    schema_json: Value,
    apply_schema: &'static Type,
    columns: Vec<PrinterColumn>,
    scale: Option<ScalePaths>,
}

impl std::fmt::Debug for CustomKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CustomKind({}/{} {})",
            self.info.group, self.info.version, self.info.kind
        )
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn list(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// The kinds a definition serves, one per served version, in the definition's order. `Err` lists
/// what makes a version unservable (a schema that is not structural, a rule that does not
/// compile, a path that does not parse), at its path in the definition.
pub fn kinds_of(definition: &Value) -> Result<Vec<Arc<dyn Kind>>, Vec<FieldError>> {
    let group = text(definition, "/spec/group");
    let plural = text(definition, "/spec/names/plural");
    let kind = text(definition, "/spec/names/kind");
    let singular = match text(definition, "/spec/names/singular") {
        "" => kind.to_ascii_lowercase(),
        s => s.to_string(),
    };
    let namespaced = text(definition, "/spec/scope") != "Cluster";
    let short_names = intern::list(&list(definition, "/spec/names/shortNames"));
    let categories = intern::list(&list(definition, "/spec/names/categories"));
    let versions = definition
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| text(v, "/name"))
        .unwrap_or_default();
    let storage_version = intern::str(storage_version);
    let mut kinds: Vec<Arc<dyn Kind>> = Vec::new();
    let mut errors = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let at = format!("spec.versions[{i}]");
        let name = text(version, "/name");
        let schema_json = version
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
        let schema = match Schema::parse(&schema_json, &format!("{at}.schema.openAPIV3Schema")) {
            Ok(s) => s,
            Err(e) => {
                errors.extend(e);
                continue;
            }
        };
        let mut subresources = Vec::new();
        if version.pointer("/subresources/status").is_some() {
            subresources.push(status(
                intern::str(group),
                intern::str(name),
                intern::str(kind),
            ));
        }
        let scale = match version.pointer("/subresources/scale") {
            Some(scale) => match scale_paths(scale, &format!("{at}.subresources.scale")) {
                Ok(paths) => {
                    subresources.push(SCALE);
                    Some(paths)
                }
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            },
            None => None,
        };
        let columns = match printer_columns(version, &at) {
            Ok(c) => c,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let selectable = match selectable_fields(version, &at) {
            Ok(s) => s,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let info = intern::value(ResourceInfo {
            group: intern::str(group),
            version: intern::str(name),
            kind: intern::str(kind),
            plural: intern::str(plural),
            singular: intern::str(&singular),
            short_names,
            namespaced,
            verbs: READ_WRITE,
            subresources: intern::slice(&subresources),
            categories,
            selectable_fields: intern::slice(&selectable),
        });
        kinds.push(Arc::new(CustomKind {
            info,
            storage_version,
            apply_schema: merge::apply_schema(&schema),
            schema: Arc::new(schema),
            schema_json,
            columns,
            scale,
        }));
    }
    if errors.is_empty() {
        Ok(kinds)
    } else {
        Err(errors)
    }
}

fn simple_path(path: &str, at: &str) -> Result<Vec<String>, FieldError> {
    let parsed = JsonPath::parse(path).map_err(|e| FieldError::invalid(at, path, e))?;
    parsed
        .fields()
        .map(|f| f.into_iter().map(str::to_string).collect())
        .ok_or_else(|| FieldError::invalid(at, path, "must be a simple json path of fields"))
}

fn scale_paths(scale: &Value, at: &str) -> Result<ScalePaths, FieldError> {
    Ok(ScalePaths {
        spec_replicas: simple_path(
            text(scale, "/specReplicasPath"),
            &format!("{at}.specReplicasPath"),
        )?,
        status_replicas: simple_path(
            text(scale, "/statusReplicasPath"),
            &format!("{at}.statusReplicasPath"),
        )?,
        selector: match text(scale, "/labelSelectorPath") {
            "" => None,
            p => Some(simple_path(p, &format!("{at}.labelSelectorPath"))?),
        },
        selector_shape: SelectorShape::String,
    })
}

fn printer_columns(version: &Value, at: &str) -> Result<Vec<PrinterColumn>, FieldError> {
    let defined = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let defined = if defined.is_empty() {
        vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
    } else {
        defined
    };
    defined
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let path = JsonPath::parse(text(c, "/jsonPath")).map_err(|e| {
                FieldError::invalid(
                    format!("{at}.additionalPrinterColumns[{i}].jsonPath"),
                    text(c, "/jsonPath"),
                    e,
                )
            })?;
            Ok(PrinterColumn {
                column: Column {
                    name: intern::str(text(c, "/name")),
                    type_: intern::str(text(c, "/type")),
                    format: intern::str(text(c, "/format")),
                    description: intern::str(text(c, "/description")),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0) as i32,
                },
                path,
            })
        })
        .collect()
}

fn selectable_fields(version: &Value, at: &str) -> Result<Vec<SelectableField>, FieldError> {
    version
        .get("selectableFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, f)| {
            let path = text(f, "/jsonPath");
            let fields = simple_path(path, &format!("{at}.selectableFields[{i}].jsonPath"))?;
            Ok(SelectableField {
                name: intern::str(path.trim_start_matches('.')),
                source: FieldSource::Path(intern::list(&fields), ""),
            })
        })
        .collect()
}

/// `example.com` → `com.example`: the prefix of a custom kind's OpenAPI schema name.
fn reversed_group(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

impl CustomKind {
    /// The object's metadata in canonical form (unknown metadata fields dropped, as the
    /// ObjectMeta type drops them).
    fn canonical_metadata(object: &mut Value) -> Result<(), String> {
        if let Some(meta) = object.get("metadata") {
            let typed = ObjectMeta::deserialize(meta).map_err(|e| format!("metadata: {e}"))?;
            object["metadata"] = serde_json::to_value(typed).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The cell of one printer column.
    fn cell(&self, column: &PrinterColumn, object: &Value, now: Timestamp) -> Value {
        let Some(value) = column.path.first(object) else {
            return Value::Null;
        };
        match column.column.type_ {
            "date" => value
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .map(|t| json!(table::human_duration(now.duration_since(t))))
                .unwrap_or(Value::Null),
            "integer" | "number" | "boolean" => value.clone(),
            _ => match value {
                Value::String(s) => json!(s),
                Value::Null => Value::Null,
                other => json!(other.to_string()),
            },
        }
    }
}

impl Kind for CustomKind {
    fn info(&self) -> &'static ResourceInfo {
        self.info
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        let mut canonical = object.clone();
        if !canonical.is_object() {
            return Err("the object must be a JSON object".into());
        }
        CustomKind::canonical_metadata(&mut canonical)?;
        self.schema.prune(&mut canonical, true);
        Ok(canonical)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        let name = format!(
            "{}.{}.{}",
            reversed_group(self.info.group),
            self.info.version,
            self.info.kind
        );
        let meta = generator.subschema_for::<ObjectMeta>();
        let mut schema = self.schema_json.clone();
        if let Some(map) = schema.as_object_mut() {
            let properties = map
                .entry("properties")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            let mut properties = properties;
            properties.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
            );
            properties.insert(
                "kind".into(),
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
            );
            properties.insert(
                "metadata".into(),
                json!({"allOf": [serde_json::to_value(&meta).unwrap_or(Value::Null)], "description": "Standard object's metadata."}),
            );
            map.insert("properties".into(), Value::Object(properties));
            map.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": self.info.group, "version": self.info.version, "kind": self.info.kind}]),
            );
        }
        generator.definitions_mut().insert(name.clone(), schema);
        Some(name)
    }

    fn columns(&self) -> Vec<Column> {
        let name = Column {
            name: "Name",
            type_: "string",
            format: "name",
            description: "Name must be unique within a namespace; the object's metadata.name.",
            priority: 0,
        };
        std::iter::once(name)
            .chain(self.columns.iter().map(|c| c.column.clone()))
            .collect()
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let name = object.pointer("/metadata/name")?.clone();
        Some(
            std::iter::once(name)
                .chain(self.columns.iter().map(|c| self.cell(c, object, now)))
                .collect(),
        )
    }

    fn merge_schema(&self) -> Option<&'static Type> {
        None
    }

    fn apply_schema(&self) -> &'static Type {
        self.apply_schema
    }

    fn default(&self, object: &mut Value) {
        self.schema.apply_defaults(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        let mut errors = Vec::new();
        self.schema.validate(new, old, "", &mut errors);
        Ok(errors)
    }

    fn validate_status(&self, new: &Value, old: &Value) -> Checked {
        let mut errors = Vec::new();
        self.schema.validate(new, Some(old), "", &mut errors);
        Ok(errors)
    }

    fn scale(&self) -> Option<ScalePaths> {
        self.scale.clone()
    }

    fn storage_version(&self) -> &'static str {
        self.storage_version
    }
}

#[cfg(test)]
mod real;
#[cfg(test)]
mod tests;

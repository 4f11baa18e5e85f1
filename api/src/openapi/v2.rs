//! `/openapi/v2`: one Swagger 2.0 document of everything served, made from the same paths and
//! schemas as the v3 documents ([`super::paths_and_schemas`]) by rewriting their OpenAPI 3
//! spellings into Swagger 2.0 ones, and served as JSON or in gnostic's protobuf
//! ([`super::gnostic`]), which is the only form kubectl asks for.
//!
//! kubectl reads it for client-side validation when a kind's v3 document says nothing of
//! `fieldValidation` (a kind the server does not serve: it must still parse the document to learn
//! that the kind is not in it), and for the patch metadata of its three-way merge on `apply`.
//! kube-openapi's parser (`pkg/util/proto`) refuses a whole document for one schema it does not
//! take, so the rewrite keeps to what it takes: `$ref`s to `#/definitions/` with no type or
//! properties beside them, one `items` schema per array, one type per schema.

use serde_json::{Map, Value, json};
use skiff_kinds::Snapshot;
use skiff_meta::ResourceInfo;

use super::SCHEMA_PREFIX;

/// Where Swagger 2.0 keeps schemas.
pub const DEFINITIONS_PREFIX: &str = "#/definitions/";

/// The Swagger 2.0 document of every served kind.
pub fn document(kinds: &Snapshot) -> Value {
    let resources: Vec<&'static ResourceInfo> = kinds.infos().collect();
    let (paths, definitions) = super::paths_and_schemas(kinds, &resources);
    let paths: Map<String, Value> = paths
        .into_iter()
        .map(|(path, item)| (path, path_item(&item)))
        .collect();
    let definitions: Map<String, Value> = definitions
        .into_iter()
        .map(|(name, s)| (name, schema(&s)))
        .collect();
    json!({
        "swagger": "2.0",
        "info": { "title": "Kubernetes", "version": crate::version::git_version() },
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {
            "BearerToken": {
                "type": "apiKey",
                "name": "authorization",
                "in": "header",
                "description": "Bearer Token authentication",
            },
        },
        "security": [{ "BearerToken": [] }],
    })
}

/// A schema in Swagger 2.0 form: `$ref`s into `#/definitions/`, a single-`$ref` `allOf` (OpenAPI
/// 3's way of describing a reference) folded back into the `$ref` with its siblings, no
/// `nullable`, one type.
fn schema(s: &Value) -> Value {
    let Some(object) = s.as_object() else {
        return s.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        match key.as_str() {
            "$ref" => {
                out.insert(key.clone(), json!(reference(value)));
            }
            "allOf" => {
                let parts = value.as_array().map(Vec::as_slice).unwrap_or_default();
                match parts {
                    [only] if only.get("$ref").is_some() => {
                        out.insert("$ref".into(), json!(reference(&only["$ref"])));
                    }
                    _ => {
                        out.insert(
                            key.clone(),
                            Value::Array(parts.iter().map(schema).collect()),
                        );
                    }
                }
            }
            "properties" | "patternProperties" => {
                let properties = value
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), schema(v))).collect())
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(properties));
            }
            "items" | "additionalProperties" | "not" => {
                out.insert(key.clone(), schema(value));
            }
            "type" => {
                // OpenAPI 3.1 and JSON Schema allow a list with "null"; Swagger 2.0 one type.
                let single = match value {
                    Value::Array(types) => types.iter().find(|t| *t != "null").cloned(),
                    other => Some(other.clone()),
                };
                if let Some(t) = single {
                    out.insert(key.clone(), t);
                }
            }
            // OpenAPI 3 only.
            "nullable" | "oneOf" | "anyOf" | "writeOnly" | "deprecated" | "$schema" => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if out.contains_key("$ref") {
        // kube-openapi refuses a reference with a type or fields of its own.
        out.remove("type");
        out.remove("properties");
    }
    Value::Object(out)
}

fn reference(value: &Value) -> String {
    let r = value.as_str().unwrap_or_default();
    match r.strip_prefix(SCHEMA_PREFIX) {
        Some(name) => format!("{DEFINITIONS_PREFIX}{name}"),
        None => r.to_string(),
    }
}

/// A path item: its operations and common parameters in Swagger 2.0 form.
fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    for (key, value) in item.as_object().into_iter().flatten() {
        let converted = match key.as_str() {
            "parameters" => parameters(value),
            "get" | "put" | "post" | "delete" | "options" | "head" | "patch" => operation(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), converted);
    }
    Value::Object(out)
}

/// Query and path parameters: OpenAPI 3's `schema: {type, uniqueItems}` moves up beside the name.
fn parameters(list: &Value) -> Value {
    let converted = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let mut out = Map::new();
            for (key, value) in p.as_object().into_iter().flatten() {
                if key == "schema" {
                    for (k, v) in value.as_object().into_iter().flatten() {
                        out.insert(k.clone(), v.clone());
                    }
                } else {
                    out.insert(key.clone(), value.clone());
                }
            }
            Value::Object(out)
        })
        .collect();
    Value::Array(converted)
}

/// An operation: the request body becomes the `body` parameter, each response's content its
/// `schema`, and the media types `consumes` and `produces`.
fn operation(op: &Value) -> Value {
    let mut out = Map::new();
    let mut params = match op.get("parameters") {
        Some(list) => parameters(list).as_array().cloned().unwrap_or_default(),
        None => Vec::new(),
    };
    let mut consumes: Vec<String> = Vec::new();
    if let Some(body) = op.get("requestBody") {
        let content = body.get("content").and_then(Value::as_object);
        let body_schema = content
            .and_then(|c| c.values().next())
            .and_then(|m| m.get("schema"))
            .map(schema)
            .unwrap_or_else(|| json!({}));
        consumes.extend(
            content
                .into_iter()
                .flat_map(|c| c.keys())
                .filter(|m| *m != "*/*")
                .cloned(),
        );
        let mut parameter = json!({ "name": "body", "in": "body", "schema": body_schema });
        if body.get("required") == Some(&Value::Bool(true)) {
            parameter["required"] = true.into();
        }
        params.insert(0, parameter);
    }
    let mut produces: Vec<String> = Vec::new();
    let mut responses = Map::new();
    for (code, response) in op
        .get("responses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut converted = json!({ "description": response.get("description").cloned().unwrap_or_else(|| json!("")) });
        if let Some(content) = response.get("content").and_then(Value::as_object) {
            if let Some(s) = content.values().next().and_then(|m| m.get("schema")) {
                converted["schema"] = schema(s);
            }
            for media in content.keys() {
                if !produces.contains(media) {
                    produces.push(media.clone());
                }
            }
        }
        responses.insert(code.clone(), converted);
    }
    for (key, value) in op.as_object().into_iter().flatten() {
        match key.as_str() {
            "parameters" | "requestBody" | "responses" => {}
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    if consumes.is_empty() && op.get("requestBody").is_some() {
        consumes.push("*/*".into());
    }
    if !consumes.is_empty() {
        out.insert("consumes".into(), json!(consumes));
    }
    if !produces.is_empty() {
        out.insert("produces".into(), json!(produces));
    }
    out.insert("schemes".into(), json!(["https"]));
    out.insert("parameters".into(), Value::Array(params));
    out.insert("responses".into(), Value::Object(responses));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::super::gnostic::{self, tests::Message};
    use super::*;
    use skiff_kinds::Kinds;

    fn doc() -> &'static Value {
        static DOC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        DOC.get_or_init(|| document(&Kinds::builtin().snapshot()))
    }

    /// kube-openapi's `pkg/util/proto` rules, which refuse the whole document for one schema
    /// that breaks them (kubectl then cannot validate or merge at all).
    fn check(definitions: &Map<String, Value>, path: &str, s: &Value) {
        let o = s
            .as_object()
            .unwrap_or_else(|| panic!("{path}: not an object"));
        if let Some(r) = o.get("$ref") {
            let name = r
                .as_str()
                .and_then(|r| r.strip_prefix(DEFINITIONS_PREFIX))
                .unwrap_or_else(|| panic!("{path}: reference outside definitions: {r}"));
            assert!(definitions.contains_key(name), "{path}: dangling {r}");
            assert!(o.get("type").is_none(), "{path}: reference with a type");
            assert!(
                o.get("properties").is_none(),
                "{path}: reference with fields"
            );
            return;
        }
        for key in o.keys() {
            assert!(
                !matches!(key.as_str(), "nullable" | "oneOf" | "anyOf"),
                "{path}: OpenAPI 3 only {key}"
            );
        }
        assert!(o.get("allOf").is_none(), "{path}: allOf");
        match o
            .get("type")
            .map(|t| t.as_str().unwrap_or_else(|| panic!("{path}: {t}")))
        {
            Some("array") => {
                let items = o.get("items").unwrap_or_else(|| panic!("{path}: no items"));
                assert!(items.is_object(), "{path}: items must be one schema");
                check(definitions, &format!("{path}[]"), items);
            }
            Some("object") | None => {
                for (name, field) in o
                    .get("properties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    check(definitions, &format!("{path}.{name}"), field);
                }
                if let Some(additional @ Value::Object(_)) = o.get("additionalProperties") {
                    check(definitions, &format!("{path}{{}}"), additional);
                }
            }
            Some("string" | "integer" | "number" | "boolean") => {}
            Some(other) => panic!("{path}: unknown primitive type {other}"),
        }
    }

    #[test]
    fn every_schema_parses_as_kube_openapi_does() {
        let definitions = doc()["definitions"].as_object().unwrap();
        assert!(definitions.len() > 100);
        for (name, s) in definitions {
            check(definitions, name, s);
        }
        // The operations' schemas too.
        for (path, item) in doc()["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                if method == "parameters" {
                    continue;
                }
                for p in op["parameters"].as_array().unwrap() {
                    if let Some(s) = p.get("schema") {
                        check(definitions, &format!("{method} {path} body"), s);
                    }
                }
                for (code, response) in op["responses"].as_object().unwrap() {
                    if let Some(s) = response.get("schema") {
                        check(definitions, &format!("{method} {path} {code}"), s);
                    }
                }
            }
        }
    }

    #[test]
    fn kinds_and_operations_carry_their_group_version_kind() {
        let definitions = &doc()["definitions"];
        assert_eq!(
            definitions["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        assert_eq!(
            definitions["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        let pod_spec = &definitions["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
        assert_eq!(pod_spec["$ref"], "#/definitions/io.k8s.api.core.v1.PodSpec");
        assert!(
            pod_spec["description"]
                .as_str()
                .unwrap()
                .contains("desired behavior")
        );
        for info in Kinds::builtin()
            .snapshot()
            .infos()
            .filter(|r| r.verbs.contains(&"patch"))
        {
            let path = info.object_path(Some("{namespace}"), "{name}");
            let patch = &doc()["paths"][&path]["patch"];
            assert_eq!(
                patch["x-kubernetes-group-version-kind"],
                json!({"group": info.group, "version": info.version, "kind": info.kind}),
                "{path}"
            );
            let params = patch["parameters"].as_array().unwrap();
            assert!(
                params.iter().any(|p| p["name"] == "fieldValidation"
                    && p["in"] == "query"
                    && p["type"] == "string"),
                "{path}"
            );
            let body = &params[0];
            assert_eq!(body["in"], "body");
            assert_eq!(
                body["schema"]["$ref"],
                "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
            );
            assert!(
                patch["consumes"]
                    .as_array()
                    .unwrap()
                    .contains(&json!("application/strategic-merge-patch+json"))
            );
        }
        let get = &doc()["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["get"];
        assert_eq!(
            get["responses"]["200"]["schema"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.Pod"
        );
        assert_eq!(
            get["produces"],
            json!(["application/json", "application/yaml"])
        );
        let common = &doc()["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["parameters"];
        assert_eq!(common[0]["in"], "path");
        assert_eq!(common[0]["required"], true);
        assert_eq!(common[0]["type"], "string");
    }

    #[test]
    fn patch_metadata_is_the_v3_documents() {
        let definitions = &doc()["definitions"];
        let containers = &definitions["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(
            containers["items"]["$ref"],
            "#/definitions/io.k8s.api.core.v1.Container"
        );
        let ports = &definitions["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
    }

    #[test]
    fn the_protobuf_is_the_json_document() {
        let json_doc = doc();
        let pb = Message::parse(&gnostic::encode(json_doc));
        assert_eq!(pb.string(1), "2.0");
        assert_eq!(pb.message(2).unwrap().string(1), "Kubernetes");
        let paths = pb.message(8).unwrap().named(2);
        assert_eq!(paths.len(), json_doc["paths"].as_object().unwrap().len());
        let definitions = pb.message(9).unwrap().named(1);
        let names: Vec<&str> = definitions.iter().map(|(n, _)| n.as_str()).collect();
        let json_names: Vec<&str> = json_doc["definitions"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(names, json_names);

        // kubectl's supportsQueryParam: the patch operation of the kind, by its extension, with
        // a query parameter named fieldValidation.
        let (_, pods) = paths
            .iter()
            .find(|(p, _)| p == "/api/v1/namespaces/{namespace}/pods/{name}")
            .unwrap();
        let patch = pods.message(8).unwrap();
        assert_eq!(
            patch.extensions(13)["x-kubernetes-group-version-kind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        let query_names: Vec<String> = patch
            .messages(8)
            .iter()
            .filter_map(|p| p.message(1)?.message(2)?.message(3))
            .map(|q| q.string(4))
            .collect();
        assert!(
            query_names.contains(&"fieldValidation".to_string()),
            "{query_names:?}"
        );

        // kubectl's resource lookup: definitions by their group-version-kind extension.
        let (_, pod) = definitions
            .iter()
            .find(|(n, _)| n == "io.k8s.api.core.v1.Pod")
            .unwrap();
        assert_eq!(
            pod.extensions(31)["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        let spec = pod
            .message(25)
            .unwrap()
            .named(1)
            .into_iter()
            .find(|(n, _)| n == "spec")
            .unwrap()
            .1;
        assert_eq!(spec.string(1), "#/definitions/io.k8s.api.core.v1.PodSpec");
        assert!(spec.message(22).is_none(), "a reference has no type");
    }
}

//! OpenAPI: the `/openapi/v3` index, one v3 document per served group-version
//! (`/openapi/v3/api/v1`, `/openapi/v3/apis/apps/v1`, ...) and the Swagger 2.0 document of
//! everything at `/openapi/v2` ([`v2`], in JSON or gnostic's protobuf, [`gnostic`]), all driven
//! by the served kinds ([`skiff_kinds::Kinds`]) and rebuilt when they change.
//!
//! Each v3 document has
//! - `components.schemas` generated from the k8s-openapi types (their `schemars` feature) with
//!   OpenAPI 3 settings: names like `io.k8s.api.core.v1.Pod`, `$ref`s to
//!   `#/components/schemas/...`, `allOf` around referencing fields that carry a description
//!   (the form kube-apiserver uses), and `x-kubernetes-group-version-kind` on top-level kinds.
//!   `kubectl explain` finds the schema by that extension and walks it.
//! - `paths` for every served resource and subresource, each operation carrying
//!   `x-kubernetes-group-version-kind`; `patch`, `post` and `put` declare the `fieldValidation`
//!   query parameter, which is what makes kubectl send `fieldValidation=Strict` instead of
//!   validating client-side against `/openapi/v2`.
//!
//! The v2 document is made of the same paths and schemas. kubectl fetches it (as protobuf only)
//! to validate a kind its v3 index does not list, such as one the server does not serve, and
//! for the patch metadata of `apply`; without it such an `apply -f` stops at the first
//! unserved object with "failed to download openapi".
//!
//! The documents are built on first use and again after the served kinds change, and served
//! with an ETag; the index links each document with `?hash=` so clients can cache them.

mod gnostic;
pub mod merge;
pub mod v2;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};
use skiff_kinds::{Kinds, Snapshot};
use skiff_meta::{ResourceInfo, Subresource};
use warp::Filter;
use warp::Reply as _;
use warp::filters::BoxedFilter;
use warp::http::StatusCode;
use warp::reply::Response;

const SCHEMA_PREFIX: &str = "#/components/schemas/";
const STATUS_SCHEMA: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS_SCHEMA: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH_SCHEMA: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// Adds the schema of a kind that only subresources speak (a Binding, a Scale) to `generator`
/// and returns its schema name; served kinds publish theirs through [`Kind::openapi_schema`].
fn add_subresource_kind(
    generator: &mut SchemaGenerator,
    group: &str,
    version: &str,
    kind: &str,
) -> Option<String> {
    fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> Option<String> {
        generator.subschema_for::<T>();
        Some(T::schema_name().into_owned())
    }
    use k8s_openapi::api;
    match (group, version, kind) {
        ("", "v1", "Binding") => add::<api::core::v1::Binding>(generator),
        ("autoscaling", "v1", "Scale") => add::<api::autoscaling::v1::Scale>(generator),
        _ => None,
    }
}

/// `api/v1` or `apis/{group}/{version}`: the key of a group-version in the index.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The served group-versions, in discovery order: (group, version).
fn group_versions(kinds: &Snapshot) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for r in kinds.infos() {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({ "group": group, "version": version, "kind": kind })
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{SCHEMA_PREFIX}{name}") })
}

/// The generated schemas of one document, and the schema name of each kind in it.
struct Schemas<'a> {
    kinds: &'a Snapshot,
    generator: SchemaGenerator,
    names: BTreeMap<(String, String, String), String>,
}

impl<'a> Schemas<'a> {
    fn new(kinds: &'a Snapshot) -> Schemas<'a> {
        let mut generator = SchemaSettings::openapi3().into_generator();
        generator.subschema_for::<Status>();
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>();
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Patch>();
        Schemas {
            kinds,
            generator,
            names: BTreeMap::new(),
        }
    }

    /// The schema name for a kind, generating it on first use; an open object schema named
    /// after the kind when no Rust type is known.
    fn kind(&mut self, group: &str, version: &str, kind: &str) -> String {
        let key = (group.to_string(), version.to_string(), kind.to_string());
        if let Some(name) = self.names.get(&key) {
            return name.clone();
        }
        let served = self
            .kinds
            .lookup_kind(group, kind)
            .filter(|k| k.info().version == version)
            .and_then(|k| k.openapi_schema(&mut self.generator));
        let name = served
            .or_else(|| add_subresource_kind(&mut self.generator, group, version, kind))
            .unwrap_or_else(|| {
                let name = format!("skiff.unknown.{group}.{version}.{kind}");
                self.generator.definitions_mut().insert(
                    name.clone(),
                    json!({
                        "description": format!("{kind} (no schema published by this server)."),
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                    }),
                );
                name
            });
        self.names.insert(key, name.clone());
        name
    }

    /// The `...List` schema of a kind (k8s-openapi has no schema for its generic `List`).
    fn list(&mut self, info: &ResourceInfo) -> String {
        let item = self.kind(info.group, info.version, info.kind);
        let name = format!("{item}List");
        let list_kind = info.list_kind();
        self.generator.definitions_mut().insert(
            name.clone(),
            json!({
                "description": format!("{list_kind} is a list of {}.", info.kind),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {
                        "description": "APIVersion defines the versioned schema of this representation of an object.",
                        "type": "string",
                    },
                    "items": {
                        "description": format!("List of {}.", info.plural),
                        "type": "array",
                        "items": { "allOf": [schema_ref(&item)], "default": {} },
                    },
                    "kind": {
                        "description": "Kind is a string value representing the REST resource this object represents.",
                        "type": "string",
                    },
                    "metadata": {
                        "description": "Standard list metadata.",
                        "allOf": [schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")],
                        "default": {},
                    },
                },
                "x-kubernetes-group-version-kind": [gvk(info.group, info.version, &list_kind)],
            }),
        );
        self.generator
            .subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>();
        name
    }

    /// All schemas, transformed for OpenAPI 3, with each kind's group-version-kind attached.
    fn finish(mut self) -> Map<String, Value> {
        let mut definitions = self.generator.take_definitions(true);
        let mut tags: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for ((group, version, kind), name) in &self.names {
            tags.entry(name.clone())
                .or_default()
                .push(gvk(group, version, kind));
        }
        tags.entry(STATUS_SCHEMA.to_string())
            .or_default()
            .push(gvk("", "v1", "Status"));
        tags.entry(DELETE_OPTIONS_SCHEMA.to_string())
            .or_default()
            .push(gvk("", "v1", "DeleteOptions"));
        for (name, gvks) in tags {
            if let Some(schema) = definitions.get_mut(&name).and_then(Value::as_object_mut) {
                schema.insert("x-kubernetes-group-version-kind".into(), Value::Array(gvks));
                // k8s-openapi marks `metadata` required; the API does not (generateName, and
                // the server fills it), and kubectl explain would say `-required-`.
                if let Some(Value::Array(required)) = schema.get_mut("required") {
                    required.retain(|r| r != "metadata");
                    if required.is_empty() {
                        schema.remove("required");
                    }
                }
            }
        }
        definitions
    }
}

/// A query or path parameter.
fn param(name: &str, location: &str, kind: &str, description: &str) -> Value {
    let mut p = json!({
        "name": name,
        "in": location,
        "description": description,
        "schema": { "type": kind, "uniqueItems": true },
    });
    if location == "path" {
        p["required"] = true.into();
    }
    p
}

fn pretty() -> Value {
    param(
        "pretty",
        "query",
        "string",
        "If 'true', the output is pretty printed.",
    )
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut params = vec![
        param(
            "dryRun",
            "query",
            "string",
            "When present, modifications are not persisted. Valid value: All.",
        ),
        param(
            "fieldManager",
            "query",
            "string",
            "Name of the actor making the change, recorded in managedFields.",
        ),
        param(
            "fieldValidation",
            "query",
            "string",
            "How to treat unknown or duplicate fields in the body: Ignore, Warn or Strict.",
        ),
    ];
    if patch {
        params.push(param(
            "force",
            "query",
            "boolean",
            "Force an apply patch to take over fields owned by other managers.",
        ));
    }
    params
}

fn list_params() -> Vec<Value> {
    vec![
        param(
            "allowWatchBookmarks",
            "query",
            "boolean",
            "Ask for BOOKMARK watch events.",
        ),
        param(
            "continue",
            "query",
            "string",
            "The continue token of the previous page.",
        ),
        param(
            "fieldSelector",
            "query",
            "string",
            "Restrict the list by fields.",
        ),
        param(
            "labelSelector",
            "query",
            "string",
            "Restrict the list by labels.",
        ),
        param(
            "limit",
            "query",
            "integer",
            "Maximum number of items to return in one page.",
        ),
        param(
            "resourceVersion",
            "query",
            "string",
            "Resource version to list or watch from.",
        ),
        param(
            "resourceVersionMatch",
            "query",
            "string",
            "How resourceVersion applies to a list.",
        ),
        param(
            "sendInitialEvents",
            "query",
            "boolean",
            "Start a watch with synthetic events for the current state.",
        ),
        param(
            "timeoutSeconds",
            "query",
            "integer",
            "Timeout of the list or watch call.",
        ),
        param(
            "watch",
            "query",
            "boolean",
            "Watch for changes instead of listing.",
        ),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        param(
            "dryRun",
            "query",
            "string",
            "When present, the deletion is not persisted. Valid value: All.",
        ),
        param(
            "gracePeriodSeconds",
            "query",
            "integer",
            "Seconds before the object is deleted; 0 deletes at once.",
        ),
        param(
            "orphanDependents",
            "query",
            "boolean",
            "Deprecated: use propagationPolicy.",
        ),
        param(
            "propagationPolicy",
            "query",
            "string",
            "Garbage collection of dependents: Orphan, Background or Foreground.",
        ),
    ]
}

fn json_content(schema: Value) -> Value {
    json!({
        "application/json": { "schema": schema.clone() },
        "application/yaml": { "schema": schema },
    })
}

fn ok_response(schema: &str) -> Value {
    json!({ "description": "OK", "content": json_content(schema_ref(schema)) })
}

/// The upper camel case used in operation ids: `core` → `Core`, `coordination.k8s.io` →
/// `Coordination`, `rbac.authorization.k8s.io` → `RbacAuthorization`.
fn camel_group(group: &str) -> String {
    let group = if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    };
    group.split(['.', '-']).map(upper_first).collect::<String>()
}

fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// One operation of a path.
struct Op<'a> {
    method: &'static str,
    action: &'static str,
    id: String,
    gvk: (&'a str, &'a str, &'a str),
    params: Vec<Value>,
    request: Option<Value>,
    responses: Value,
}

impl Op<'_> {
    fn into_value(self, tag: &str) -> Value {
        let mut op = json!({
            "tags": [tag],
            "description": format!("{} {}", self.action, self.gvk.2),
            "operationId": self.id,
            "parameters": self.params,
            "responses": self.responses,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": gvk(self.gvk.0, self.gvk.1, self.gvk.2),
        });
        if let Some(request) = self.request {
            op["requestBody"] = request;
        }
        op
    }
}

fn body(schema: &str) -> Value {
    json!({ "content": { "*/*": { "schema": schema_ref(schema) } }, "required": true })
}

fn patch_body() -> Value {
    let schema = json!({ "$ref": format!("{SCHEMA_PREFIX}{PATCH_SCHEMA}") });
    json!({
        "content": {
            "application/apply-patch+yaml": { "schema": schema.clone() },
            "application/json-patch+json": { "schema": schema.clone() },
            "application/merge-patch+json": { "schema": schema.clone() },
            "application/strategic-merge-patch+json": { "schema": schema },
        },
        "required": true,
    })
}

fn unauthorized() -> Value {
    json!({ "description": "Unauthorized" })
}

/// The path items of one resource: collection, object and subresources.
fn resource_paths(info: &ResourceInfo, schemas: &mut Schemas, paths: &mut Map<String, Value>) {
    let kind_schema = schemas.kind(info.group, info.version, info.kind);
    let list_schema = schemas.list(info);
    let prefix = if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    let tag = format!(
        "{}_{}",
        camel_group(info.group).to_lowercase(),
        info.version
    );
    let id_gv = format!("{}{}", camel_group(info.group), upper_first(info.version));
    let scope = if info.namespaced { "Namespaced" } else { "" };
    let own = (info.group, info.version, info.kind);
    let verbs = |v: &str| info.verbs.contains(&v);
    let (collection, object) = if info.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{}", info.plural),
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", info.plural),
        )
    } else {
        (
            format!("{prefix}/{}", info.plural),
            format!("{prefix}/{}/{{name}}", info.plural),
        )
    };
    let namespace_param = param(
        "namespace",
        "path",
        "string",
        "object name and auth scope, such as for teams and projects",
    );
    let name_param = |what: &str| param("name", "path", "string", &format!("name of the {what}"));

    // The collection.
    let mut ops = Vec::new();
    if verbs("list") {
        ops.push(Op {
            method: "get",
            action: "list",
            id: format!("list{id_gv}{scope}{}", info.kind),
            gvk: own,
            params: list_params(),
            request: None,
            responses: json!({ "200": ok_response(&list_schema), "401": unauthorized() }),
        });
    }
    if verbs("create") {
        ops.push(Op {
            method: "post",
            action: "post",
            id: format!("create{id_gv}{scope}{}", info.kind),
            gvk: own,
            params: write_params(false),
            request: Some(body(&kind_schema)),
            responses: json!({
                "200": ok_response(&kind_schema),
                "201": { "description": "Created", "content": json_content(schema_ref(&kind_schema)) },
                "202": { "description": "Accepted", "content": json_content(schema_ref(&kind_schema)) },
                "401": unauthorized(),
            }),
        });
    }
    if verbs("deletecollection") {
        let mut params = delete_params();
        params.extend(list_params());
        ops.push(Op {
            method: "delete",
            action: "deletecollection",
            id: format!("delete{id_gv}Collection{scope}{}", info.kind),
            gvk: own,
            params,
            request: None,
            responses: json!({ "200": ok_response(STATUS_SCHEMA), "401": unauthorized() }),
        });
    }
    let mut common = vec![pretty()];
    if info.namespaced {
        common.insert(0, namespace_param.clone());
    }
    insert_path(paths, collection, common.clone(), ops, &tag);

    // All namespaces.
    if info.namespaced && verbs("list") {
        let ops = vec![Op {
            method: "get",
            action: "list",
            id: format!("list{id_gv}{}ForAllNamespaces", info.kind),
            gvk: own,
            params: list_params(),
            request: None,
            responses: json!({ "200": ok_response(&list_schema), "401": unauthorized() }),
        }];
        insert_path(
            paths,
            format!("{prefix}/{}", info.plural),
            vec![pretty()],
            ops,
            &tag,
        );
    }

    // One object.
    let mut ops = Vec::new();
    if verbs("get") {
        ops.push(Op {
            method: "get",
            action: "get",
            id: format!("read{id_gv}{scope}{}", info.kind),
            gvk: own,
            params: vec![],
            request: None,
            responses: json!({ "200": ok_response(&kind_schema), "401": unauthorized() }),
        });
    }
    if verbs("update") {
        ops.push(Op {
            method: "put",
            action: "put",
            id: format!("replace{id_gv}{scope}{}", info.kind),
            gvk: own,
            params: write_params(false),
            request: Some(body(&kind_schema)),
            responses: json!({
                "200": ok_response(&kind_schema),
                "201": { "description": "Created", "content": json_content(schema_ref(&kind_schema)) },
                "401": unauthorized(),
            }),
        });
    }
    if verbs("patch") {
        ops.push(Op {
            method: "patch",
            action: "patch",
            id: format!("patch{id_gv}{scope}{}", info.kind),
            gvk: own,
            params: write_params(true),
            request: Some(patch_body()),
            responses: json!({
                "200": ok_response(&kind_schema),
                "201": { "description": "Created", "content": json_content(schema_ref(&kind_schema)) },
                "401": unauthorized(),
            }),
        });
    }
    if verbs("delete") {
        ops.push(Op {
            method: "delete",
            action: "delete",
            id: format!("delete{id_gv}{scope}{}", info.kind),
            gvk: own,
            params: delete_params(),
            request: Some(json!({
                "content": { "*/*": { "schema": schema_ref(DELETE_OPTIONS_SCHEMA) } },
            })),
            responses: json!({
                "200": ok_response(&kind_schema),
                "202": { "description": "Accepted", "content": json_content(schema_ref(&kind_schema)) },
                "401": unauthorized(),
            }),
        });
    }
    let mut common = vec![name_param(info.singular), pretty()];
    if info.namespaced {
        common.insert(1, namespace_param.clone());
    }
    insert_path(paths, object.clone(), common.clone(), ops, &tag);

    // Subresources.
    for sub in info.subresources {
        if sub.name == "proxy" {
            // `proxy` and `proxy/{path}`, each taking any method and answering what the
            // backend answers.
            let mut with_path = common.clone();
            with_path.push(json!({
                "name": "path", "in": "path", "required": true,
                "description": "path to the resource", "schema": { "type": "string", "uniqueItems": true },
            }));
            for (path, params) in [
                (format!("{object}/proxy"), common.clone()),
                (format!("{object}/proxy/{{path}}"), with_path),
            ] {
                let ops = proxy_ops(info, sub, &id_gv, scope);
                insert_path(paths, path, params, ops, &tag);
            }
            continue;
        }
        let ops = subresource_ops(info, sub, schemas, &id_gv, scope);
        insert_path(
            paths,
            format!("{object}/{}", sub.name),
            common.clone(),
            ops,
            &tag,
        );
    }
}

/// The operations of a `proxy` subresource: every method, each a connect that answers a string.
fn proxy_ops<'a>(
    info: &ResourceInfo,
    sub: &'a Subresource,
    id_gv: &str,
    scope: &str,
) -> Vec<Op<'a>> {
    let suffix = format!("{scope}{}Proxy", info.kind);
    [("get", "Get"), ("post", "Post"), ("put", "Put"), ("patch", "Patch"), ("delete", "Delete"), ("head", "Head"), ("options", "Options")]
        .into_iter()
        .map(|(method, upper)| Op {
            method,
            action: "connect",
            id: format!("connect{upper}{id_gv}{suffix}"),
            gvk: (sub.group, sub.version, sub.kind),
            params: vec![],
            request: None,
            responses: json!({
                "200": { "description": "OK", "content": { "*/*": { "schema": { "type": "string" } } } },
                "401": unauthorized(),
            }),
        })
        .collect()
}

fn subresource_ops<'a>(
    info: &ResourceInfo,
    sub: &'a Subresource,
    schemas: &mut Schemas,
    id_gv: &str,
    scope: &str,
) -> Vec<Op<'a>> {
    let sub_gvk = (sub.group, sub.version, sub.kind);
    let suffix = format!("{scope}{}{}", info.kind, upper_first(sub.name));
    let mut ops = Vec::new();
    if sub.name == "log" {
        ops.push(Op {
            method: "get",
            action: "get",
            id: format!("read{id_gv}{suffix}"),
            gvk: sub_gvk,
            params: vec![
                param("container", "query", "string", "The container to stream logs of."),
                param("follow", "query", "boolean", "Follow the log stream."),
                param("previous", "query", "boolean", "Logs of the previous instance of the container."),
                param("sinceSeconds", "query", "integer", "Only logs newer than this many seconds."),
                param("tailLines", "query", "integer", "Only this many lines from the end."),
                param("timestamps", "query", "boolean", "Prefix each line with its timestamp."),
            ],
            request: None,
            responses: json!({
                "200": { "description": "OK", "content": { "text/plain": { "schema": { "type": "string" } } } },
                "401": unauthorized(),
            }),
        });
        return ops;
    }
    let schema = schemas.kind(sub.group, sub.version, sub.kind);
    let has = |v: &str| sub.verbs.contains(&v);
    if has("get") {
        ops.push(Op {
            method: "get",
            action: "get",
            id: format!("read{id_gv}{suffix}"),
            gvk: sub_gvk,
            params: vec![],
            request: None,
            responses: json!({ "200": ok_response(&schema), "401": unauthorized() }),
        });
    }
    if has("create") {
        ops.push(Op {
            method: "post",
            action: "post",
            id: format!("create{id_gv}{suffix}"),
            gvk: sub_gvk,
            params: write_params(false),
            request: Some(body(&schema)),
            responses: json!({
                "200": ok_response(&schema),
                "201": { "description": "Created", "content": json_content(schema_ref(&schema)) },
                "401": unauthorized(),
            }),
        });
    }
    if has("update") {
        ops.push(Op {
            method: "put",
            action: "put",
            id: format!("replace{id_gv}{suffix}"),
            gvk: sub_gvk,
            params: write_params(false),
            request: Some(body(&schema)),
            responses: json!({ "200": ok_response(&schema), "401": unauthorized() }),
        });
    }
    if has("patch") {
        ops.push(Op {
            method: "patch",
            action: "patch",
            id: format!("patch{id_gv}{suffix}"),
            gvk: sub_gvk,
            params: write_params(true),
            request: Some(patch_body()),
            responses: json!({ "200": ok_response(&schema), "401": unauthorized() }),
        });
    }
    ops
}

fn insert_path(
    paths: &mut Map<String, Value>,
    path: String,
    common: Vec<Value>,
    ops: Vec<Op<'_>>,
    tag: &str,
) {
    if ops.is_empty() {
        return;
    }
    let mut item = Map::new();
    for op in ops {
        let method = op.method;
        item.insert(method.to_string(), op.into_value(tag));
    }
    item.insert("parameters".into(), Value::Array(common));
    paths.insert(path, Value::Object(item));
}

/// The paths and schemas (OpenAPI 3 form) of the resources in `resources`, with the patch
/// metadata of each served kind: what the v3 document of a group-version and the v2 document
/// of everything are made of.
fn paths_and_schemas(
    kinds: &Snapshot,
    resources: &[&'static ResourceInfo],
) -> (Map<String, Value>, Map<String, Value>) {
    let mut schemas = Schemas::new(kinds);
    let mut paths = Map::new();
    for info in resources {
        resource_paths(info, &mut schemas, &mut paths);
    }
    let served: Vec<(&'static ResourceInfo, Option<String>)> = resources
        .iter()
        .map(|info| {
            let key = (
                info.group.to_string(),
                info.version.to_string(),
                info.kind.to_string(),
            );
            (*info, schemas.names.get(&key).cloned())
        })
        .collect();
    let mut definitions = schemas.finish();
    for (info, name) in served {
        let merge_schema = kinds.of(info).and_then(|k| k.merge_schema());
        if let (Some(name), Some(merge_schema)) = (name, merge_schema) {
            let mut seen = std::collections::HashSet::new();
            annotate_patch_meta(&mut definitions, &name, merge_schema, &mut seen);
        }
    }
    (paths, definitions)
}

/// The OpenAPI v3 document of one served group-version, or `None` if it is not served.
pub fn document(kinds: &Snapshot, group: &str, version: &str) -> Option<Value> {
    let resources: Vec<&'static ResourceInfo> = kinds
        .infos()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if resources.is_empty() {
        return None;
    }
    let (paths, definitions) = paths_and_schemas(kinds, &resources);
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": crate::version::git_version() },
        "paths": paths,
        "components": {
            "schemas": definitions,
            "securitySchemes": {
                "BearerToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "authorization",
                    "description": "Bearer Token authentication",
                },
            },
        },
        "security": [{ "BearerToken": [] }],
    }))
}

/// The schema a property refers to: `$ref`, `allOf: [{$ref}]`, or the same inside `items`.
fn referenced_schema(property: &Value) -> Option<String> {
    let direct = |v: &Value| {
        v.get("$ref")
            .or_else(|| v.pointer("/allOf/0/$ref"))
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix(SCHEMA_PREFIX))
            .map(str::to_string)
    };
    direct(property).or_else(|| property.get("items").and_then(direct))
}

/// Adds the patch metadata kubectl's three-way merge and server-side apply read from OpenAPI
/// (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`, `x-kubernetes-list-type`,
/// `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`) to the schema `name` and the schemas it
/// reaches, from the same merge schema the server patches with. Without it kubectl treats every
/// list as atomic and sends whole lists on every apply.
fn annotate_patch_meta(
    definitions: &mut Map<String, Value>,
    name: &str,
    ty: &'static skiff_kinds::patch::schema::Type,
    seen: &mut std::collections::HashSet<String>,
) {
    use skiff_kinds::patch::schema::ListType;
    if !seen.insert(name.to_string()) {
        return;
    }
    let mut children = Vec::new();
    if let Some(properties) = definitions
        .get_mut(name)
        .and_then(|d| d.get_mut("properties"))
        .and_then(Value::as_object_mut)
    {
        for field in ty.fields {
            let Some(property) = properties
                .get_mut(field.name)
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let is_list = property.get("type").and_then(Value::as_str) == Some("array");
            let mut strategies = Vec::new();
            if let Some(key) = field.merge_key {
                strategies.push("merge");
                if !key.is_empty() {
                    property.insert("x-kubernetes-patch-merge-key".into(), json!(key));
                }
            }
            if field.retain_keys {
                strategies.push("retainKeys");
            }
            if !strategies.is_empty() {
                property.insert(
                    "x-kubernetes-patch-strategy".into(),
                    json!(strategies.join(",")),
                );
            }
            if is_list {
                match field.list_type {
                    ListType::Map(keys) => {
                        property.insert("x-kubernetes-list-type".into(), json!("map"));
                        let keys: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
                        property.insert("x-kubernetes-list-map-keys".into(), json!(keys));
                    }
                    ListType::Set => {
                        property.insert("x-kubernetes-list-type".into(), json!("set"));
                    }
                    ListType::Atomic => {
                        property.insert("x-kubernetes-list-type".into(), json!("atomic"));
                    }
                }
            }
            if field.atomic_map {
                property.insert("x-kubernetes-map-type".into(), json!("atomic"));
            }
            if let (Some(child), Some(target)) = (
                field.ty,
                referenced_schema(&Value::Object(property.clone())),
            ) {
                children.push((target, child));
            }
        }
    }
    for (target, child) in children {
        annotate_patch_meta(definitions, &target, child, seen);
    }
}

/// A built document: its JSON bytes and their hash.
#[derive(Debug, Clone)]
pub struct Built {
    /// The serialized document.
    pub body: Bytes,
    /// Upper-case hex SHA-256 of `body`: the ETag and the `hash` of the index's URLs.
    pub hash: String,
}

impl Built {
    fn new(value: &Value) -> Built {
        Built::from_bytes(serde_json::to_vec(value).expect("OpenAPI serializes"))
    }

    /// The document `body` (JSON bytes) and its hash.
    pub fn from_bytes(body: Vec<u8>) -> Built {
        let body = Bytes::from(body);
        let hash = hex::encode_upper(Sha256::digest(&body));
        Built { body, hash }
    }
}

/// Every document, built for one set of served kinds.
#[derive(Debug)]
pub struct Documents {
    /// The [`Snapshot::generation`] they were built for.
    pub generation: u64,
    /// `/openapi/v3`.
    pub index: Built,
    /// Keyed by [`group_version_path`].
    pub group_versions: BTreeMap<String, Built>,
    /// `/openapi/v2` as JSON.
    pub v2_json: Built,
    /// `/openapi/v2` as gnostic's protobuf, from the same document.
    pub v2_protobuf: Built,
}

/// Builds the documents of `kinds` (a few tens of milliseconds of CPU).
pub fn documents(kinds: &Snapshot) -> Documents {
    let v2 = v2::document(kinds);
    let mut built = BTreeMap::new();
    for (group, version) in group_versions(kinds) {
        let doc = document(kinds, group, version).expect("served group-version");
        built.insert(group_version_path(group, version), Built::new(&doc));
    }
    let paths: Map<String, Value> = built
        .iter()
        .map(|(path, built)| {
            (
                path.clone(),
                json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash={}", built.hash) }),
            )
        })
        .collect();
    Documents {
        generation: kinds.generation(),
        index: Built::new(&json!({ "paths": paths })),
        group_versions: built,
        v2_protobuf: Built::from_bytes(gnostic::encode(&v2)),
        v2_json: Built::new(&v2),
    }
}

/// The documents of the kinds served now: built on first use and again whenever the served
/// kinds change (a CustomResourceDefinition is established, changed or deleted).
pub struct OpenApi {
    kinds: Arc<Kinds>,
    built: Mutex<Option<Arc<Documents>>>,
    /// `/openapi/v2` with aggregated servers' documents merged in, for the last set of them.
    merged_v2: Mutex<Option<Arc<MergedV2>>>,
}

/// `/openapi/v2` with aggregated servers' documents merged in ([`merge`]).
#[derive(Debug)]
pub struct MergedV2 {
    /// The local documents' generation and the remote documents' hashes, in merge order.
    key: (u64, Vec<String>),
    /// As JSON.
    pub json: Built,
    /// As gnostic's protobuf.
    pub protobuf: Built,
}

/// Merges `remote` (in order) into the local v2 document of `docs` (a few tens of milliseconds
/// of CPU: the local document is parsed back from its JSON, which keeps no second copy of it
/// in memory between merges); `key` says what it was made of.
fn merged_v2(docs: &Documents, remote: &[Built], key: (u64, Vec<String>)) -> MergedV2 {
    let mut merged: Value =
        serde_json::from_slice(&docs.v2_json.body).expect("the local v2 document is JSON");
    for document in remote {
        // The aggregator keeps only documents that parse.
        if let Ok(document) = serde_json::from_slice::<Value>(&document.body) {
            merge::merge_into(&mut merged, &document);
        }
    }
    MergedV2 {
        key,
        protobuf: Built::from_bytes(gnostic::encode(&merged)),
        json: Built::new(&merged),
    }
}

impl OpenApi {
    /// No documents yet for `kinds`.
    pub fn new(kinds: Arc<Kinds>) -> OpenApi {
        OpenApi {
            kinds,
            built: Mutex::new(None),
            merged_v2: Mutex::new(None),
        }
    }

    /// The current documents, built if the served kinds changed since the last call. The
    /// building happens on the caller's thread: async callers go through [`OpenApi::current`].
    pub fn documents(&self) -> Arc<Documents> {
        let snapshot = self.kinds.snapshot();
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        match built.as_ref() {
            Some(docs) if docs.generation == snapshot.generation() => docs.clone(),
            _ => {
                let docs = Arc::new(documents(&snapshot));
                *built = Some(docs.clone());
                docs
            }
        }
    }

    /// [`OpenApi::documents`], off the async workers when they must be built.
    pub async fn current(self: &Arc<Self>) -> Arc<Documents> {
        let fresh = {
            let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
            built
                .as_ref()
                .filter(|docs| docs.generation == self.kinds.snapshot().generation())
                .cloned()
        };
        match fresh {
            Some(docs) => docs,
            None => {
                let this = self.clone();
                tokio::task::spawn_blocking(move || this.documents())
                    .await
                    .expect("building the OpenAPI documents panicked")
            }
        }
    }

    /// `/openapi/v2` (JSON, protobuf) with `remote` merged in: the local documents when there
    /// is nothing to merge, else the merge, built again when the local documents or the remote
    /// ones changed.
    pub async fn v2(self: &Arc<Self>, remote: Vec<Built>) -> (Built, Built) {
        let docs = self.current().await;
        if remote.is_empty() {
            return (docs.v2_json.clone(), docs.v2_protobuf.clone());
        }
        let key = (
            docs.generation,
            remote.iter().map(|b| b.hash.clone()).collect::<Vec<_>>(),
        );
        let cached = self
            .merged_v2
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|m| m.key == key);
        let merged = match cached {
            Some(merged) => merged,
            None => {
                let merged =
                    tokio::task::spawn_blocking(move || Arc::new(merged_v2(&docs, &remote, key)))
                        .await
                        .expect("merging the OpenAPI v2 documents panicked");
                *self.merged_v2.lock().unwrap_or_else(|e| e.into_inner()) = Some(merged.clone());
                merged
            }
        };
        (merged.json.clone(), merged.protobuf.clone())
    }
}

/// What aggregated APIServices' servers serve, as the aggregator last fetched it: each route
/// asks only for what it serves.
pub trait Aggregated: Send + Sync {
    /// The v3 documents of their group-versions, by [`group_version_path`].
    fn v3(&self) -> BTreeMap<String, Built>;
    /// Their v2 documents, each cut to its group-version's paths
    /// ([`merge::only_paths_under`]), in the order they are merged.
    fn v2(&self) -> Vec<Built>;
}

/// Fixed documents (no aggregated servers: none).
#[derive(Debug, Clone, Default)]
pub struct Fixed {
    /// See [`Aggregated::v3`].
    pub v3: BTreeMap<String, Built>,
    /// See [`Aggregated::v2`].
    pub v2: Vec<Built>,
}

impl Aggregated for Fixed {
    fn v3(&self) -> BTreeMap<String, Built> {
        self.v3.clone()
    }

    fn v2(&self) -> Vec<Built> {
        self.v2.clone()
    }
}

/// Where the routes find the aggregated documents now.
pub type Remote = Arc<dyn Aggregated>;

/// The OpenAPI routes (GET, no authentication of their own): `/openapi/v3`,
/// `/openapi/v3/api/{version}`, `/openapi/v3/apis/{group}/{version}` and `/openapi/v2`;
/// unserved group-versions get a 404 `Status`.
pub fn routes(openapi: Arc<OpenApi>) -> BoxedFilter<(Response,)> {
    routes_with(openapi, Arc::new(Fixed::default()))
}

/// [`routes`], with the documents of aggregated group-versions (`remote`) served as
/// kube-apiserver serves them: each v3 document from its own server, in place of a local one of
/// the same group-version and listed in the index; the v2 documents merged into the local one.
pub fn routes_with(openapi: Arc<OpenApi>, remote: Remote) -> BoxedFilter<(Response,)> {
    let if_none_match = warp::header::optional::<String>("if-none-match");
    let v2_openapi = openapi.clone();
    let v2_remote = remote.clone();
    let built_documents = move || {
        let openapi = openapi.clone();
        warp::any().then(move || {
            let openapi = openapi.clone();
            async move { openapi.current().await }
        })
    };
    let remote_documents = move || {
        let remote = remote.clone();
        warp::any().map(move || remote.v3())
    };
    let index = warp::path!("openapi" / "v3")
        .and(if_none_match)
        .and(built_documents())
        .and(remote_documents())
        .map(
            |inm: Option<String>, docs: Arc<Documents>, remote: BTreeMap<String, Built>| {
                if remote.is_empty() {
                    serve(&docs.index, inm.as_deref(), false)
                } else {
                    serve(&merged_index(&docs, &remote), inm.as_deref(), false)
                }
            },
        );
    let core = warp::path!("openapi" / "v3" / "api" / String)
        .and(if_none_match)
        .and(hash_query())
        .and(built_documents())
        .and(remote_documents())
        .map(
            |version: String,
             inm: Option<String>,
             hash: Option<String>,
             docs: Arc<Documents>,
             remote: BTreeMap<String, Built>| {
                serve_gv(&docs, &remote, &group_version_path("", &version), inm, hash)
            },
        );
    let named = warp::path!("openapi" / "v3" / "apis" / String / String)
        .and(if_none_match)
        .and(hash_query())
        .and(built_documents())
        .and(remote_documents())
        .map(
            |group: String,
             version: String,
             inm: Option<String>,
             hash: Option<String>,
             docs: Arc<Documents>,
             remote: BTreeMap<String, Built>| {
                serve_gv(
                    &docs,
                    &remote,
                    &group_version_path(&group, &version),
                    inm,
                    hash,
                )
            },
        );
    let v2 = warp::path!("openapi" / "v2")
        .and(if_none_match)
        .and(warp::header::optional::<String>("accept"))
        .then(move |inm: Option<String>, accept: Option<String>| {
            let openapi = v2_openapi.clone();
            let remote = v2_remote.v2();
            async move {
                let (json, protobuf) = openapi.v2(remote).await;
                serve_v2(&json, &protobuf, accept.as_deref(), inm.as_deref())
            }
        });
    warp::get()
        .and(index.or(core).unify().or(named).unify().or(v2).unify())
        .boxed()
}

/// The `/openapi/v3` index of the local documents and the `remote` ones, a remote document in
/// place of a local one of the same path.
fn merged_index(docs: &Documents, remote: &BTreeMap<String, Built>) -> Built {
    let mut hashes: BTreeMap<&str, &str> = docs
        .group_versions
        .iter()
        .map(|(path, built)| (path.as_str(), built.hash.as_str()))
        .collect();
    for (path, built) in remote {
        hashes.insert(path, &built.hash);
    }
    let paths: Map<String, Value> = hashes
        .into_iter()
        .map(|(path, hash)| {
            (
                path.to_string(),
                json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}") }),
            )
        })
        .collect();
    Built::new(&json!({ "paths": paths }))
}

fn hash_query() -> impl Filter<Extract = (Option<String>,), Error = std::convert::Infallible> + Clone
{
    warp::query::<BTreeMap<String, String>>()
        .map(|q: BTreeMap<String, String>| q.get("hash").cloned())
        .or(warp::any().map(|| None))
        .unify()
}

fn serve_gv(
    docs: &Documents,
    remote: &BTreeMap<String, Built>,
    path: &str,
    if_none_match: Option<String>,
    hash: Option<String>,
) -> Response {
    match remote.get(path).or_else(|| docs.group_versions.get(path)) {
        Some(built) => {
            // A URL naming the current hash never changes: clients may cache it for good.
            let immutable = hash.as_deref() == Some(built.hash.as_str());
            serve(built, if_none_match.as_deref(), immutable)
        }
        None => not_found(),
    }
}

/// The media types `/openapi/v2` is asked for, each with the Content-Type it is answered with
/// and whether that is the protobuf: JSON, and gnostic's protobuf under the name kubectl asks
/// for and the one kube-apiserver answers with (Go's `mime` refuses the `@` of the first in a
/// Content-Type, so kubectl only parses an answer that names the second).
const V2_MEDIA_TYPES: [(&str, &str, bool); 3] = [
    ("application/json", "application/json", false),
    (PROTOBUF_V2, PROTOBUF_V2_RESPONSE, true),
    (PROTOBUF_V2_RESPONSE, PROTOBUF_V2_RESPONSE, true),
];

/// The media type kubectl asks `/openapi/v2` for.
pub const PROTOBUF_V2: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The Content-Type of `/openapi/v2` in protobuf.
pub const PROTOBUF_V2_RESPONSE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `/openapi/v2` in the first media type of `accept` it is served in (JSON when there is no
/// Accept), 406 when none.
fn serve_v2(
    json: &Built,
    protobuf: &Built,
    accept: Option<&str>,
    if_none_match: Option<&str>,
) -> Response {
    let accept = accept.filter(|a| !a.trim().is_empty()).unwrap_or("*/*");
    let chosen = skiff_kinds::media::media_ranges(accept)
        .into_iter()
        .filter(|range| range.quality > 0.0)
        .find_map(|range| {
            let (kind, sub) = range.essence.split_once('/')?;
            V2_MEDIA_TYPES.into_iter().find(|(media, _, _)| {
                let (k, s) = media.split_once('/').expect("a type/subtype");
                (kind == "*" || kind == k) && (sub == "*" || sub == s)
            })
        });
    let Some((_, media_type, is_protobuf)) = chosen else {
        let status = skiff_meta::status::ApiError::not_acceptable(&[
            V2_MEDIA_TYPES[0].0,
            V2_MEDIA_TYPES[2].0,
        ]);
        return crate::routes::error_response(&crate::error::Error::Api(status));
    };
    let built = if is_protobuf { protobuf } else { json };
    let mut response = serve_as(built, if_none_match, false, media_type);
    response
        .headers_mut()
        .insert(http::header::VARY, http::HeaderValue::from_static("Accept"));
    response
}

fn serve(built: &Built, if_none_match: Option<&str>, immutable: bool) -> Response {
    serve_as(built, if_none_match, immutable, "application/json")
}

fn serve_as(
    built: &Built,
    if_none_match: Option<&str>,
    immutable: bool,
    media_type: &'static str,
) -> Response {
    let etag = format!("\"{}\"", built.hash);
    let mut response = if if_none_match.is_some_and(|v| v.split(',').any(|t| t.trim() == etag)) {
        warp::reply::with_status(warp::reply(), StatusCode::NOT_MODIFIED).into_response()
    } else {
        let mut r = Response::new(built.body.clone().into());
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(media_type),
        );
        r
    };
    let headers = response.headers_mut();
    headers.insert(
        http::header::ETAG,
        http::HeaderValue::from_str(&etag).expect("hex etag"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static(if immutable {
            "public, immutable"
        } else {
            "no-cache, private"
        }),
    );
    response
}

/// A 404 `Status` as kube-apiserver sends for a path it does not serve.
fn not_found() -> Response {
    crate::routes::error_response(&crate::error::Error::NoRoute)
}

#[cfg(test)]
mod tests {
    /// The documents of the built-in kinds, built once for the tests.
    fn documents() -> &'static super::Documents {
        static DOCS: std::sync::OnceLock<super::Documents> = std::sync::OnceLock::new();
        DOCS.get_or_init(|| super::documents(&skiff_kinds::Kinds::builtin().snapshot()))
    }

    use super::*;
    use crate::tls::testing::{call, get, json as body_json};

    fn core() -> &'static Value {
        static CORE: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        CORE.get_or_init(|| {
            serde_json::from_slice(&documents().group_versions["api/v1"].body).unwrap()
        })
    }

    fn schema<'a>(doc: &'a Value, name: &str) -> &'a Value {
        &doc["components"]["schemas"][name]
    }

    /// Follows a `$ref` (directly or in a one-element `allOf`) to the named schema.
    fn resolve<'a>(doc: &'a Value, s: &'a Value) -> &'a Value {
        let reference = s["$ref"]
            .as_str()
            .or_else(|| s["allOf"][0]["$ref"].as_str());
        match reference {
            Some(r) => schema(doc, r.strip_prefix(SCHEMA_PREFIX).unwrap()),
            None => s,
        }
    }

    #[test]
    fn index_lists_every_group_version_with_its_hash() {
        let index: Value = serde_json::from_slice(&documents().index.body).unwrap();
        let paths = index["paths"].as_object().unwrap();
        let expected: Vec<String> = group_versions(&Kinds::builtin().snapshot())
            .into_iter()
            .map(|(g, v)| group_version_path(g, v))
            .collect();
        assert_eq!(paths.len(), expected.len());
        for key in expected {
            let url = paths[&key]["serverRelativeURL"].as_str().unwrap();
            let hash = &documents().group_versions[&key].hash;
            assert_eq!(url, format!("/openapi/v3/{key}?hash={hash}"));
        }
    }

    #[test]
    fn kinds_carry_their_group_version_kind() {
        let pod = schema(core(), "io.k8s.api.core.v1.Pod");
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        assert!(pod.get("required").is_none(), "metadata is not required");
        let binding = schema(core(), "io.k8s.api.core.v1.Binding");
        assert_eq!(binding["required"], json!(["target"]));
        let list = schema(core(), "io.k8s.api.core.v1.PodList");
        assert_eq!(
            list["x-kubernetes-group-version-kind"][0]["kind"],
            "PodList"
        );
        // Subresource kinds are in the document of the resource that serves them.
        let apps: Value =
            serde_json::from_slice(&documents().group_versions["apis/apps/v1"].body).unwrap();
        assert_eq!(
            schema(&apps, "io.k8s.api.autoscaling.v1.Scale")["x-kubernetes-group-version-kind"],
            json!([{"group": "autoscaling", "version": "v1", "kind": "Scale"}])
        );
        // Only reachable schemas: no Deployment in the core document.
        assert!(schema(core(), "io.k8s.api.apps.v1.Deployment").is_null());
    }

    #[test]
    fn merge_keys_reach_kubectl() {
        let apps = document(&Kinds::builtin().snapshot(), "apps", "v1").unwrap();
        let pod_spec = schema(&apps, "io.k8s.api.core.v1.PodSpec");
        assert_eq!(
            pod_spec["properties"]["containers"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert_eq!(
            pod_spec["properties"]["containers"]["x-kubernetes-patch-strategy"],
            "merge"
        );
        assert_eq!(
            pod_spec["properties"]["containers"]["x-kubernetes-list-type"],
            "map"
        );
        let container = schema(&apps, "io.k8s.api.core.v1.Container");
        assert_eq!(
            container["properties"]["env"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert_eq!(
            container["properties"]["ports"]["x-kubernetes-patch-merge-key"],
            "containerPort"
        );
    }

    #[test]
    fn refs_point_into_components_and_all_resolve() {
        fn walk(doc: &Value, v: &Value, count: &mut usize) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        let name = r
                            .strip_prefix(SCHEMA_PREFIX)
                            .unwrap_or_else(|| panic!("bad ref {r}"));
                        assert!(!schema(doc, name).is_null(), "dangling {r}");
                        // OpenAPI 3.0 ignores siblings of $ref: none may carry meaning.
                        assert_eq!(m.len(), 1, "siblings next to {r}: {m:?}");
                        *count += 1;
                    }
                    m.values().for_each(|x| walk(doc, x, count));
                }
                Value::Array(a) => a.iter().for_each(|x| walk(doc, x, count)),
                _ => {}
            }
        }
        for built in documents().group_versions.values() {
            let doc: Value = serde_json::from_slice(&built.body).unwrap();
            let mut count = 0;
            walk(&doc, &doc, &mut count);
            assert!(count > 10);
        }
    }

    #[test]
    fn pod_spec_fields_are_documented_as_explain_walks_them() {
        // kubectl explain pod.spec.containers: Pod → spec → PodSpec → containers → items.
        let pod = schema(core(), "io.k8s.api.core.v1.Pod");
        let spec_field = &pod["properties"]["spec"];
        assert!(
            spec_field["description"]
                .as_str()
                .unwrap()
                .contains("desired behavior")
        );
        let spec = resolve(core(), spec_field);
        let containers = &spec["properties"]["containers"];
        assert_eq!(containers["type"], "array");
        let container = resolve(core(), &containers["items"]);
        assert!(
            container["properties"]["image"]["description"]
                .as_str()
                .unwrap()
                .len()
                > 10
        );
        assert!(
            container["required"]
                .as_array()
                .unwrap()
                .contains(&json!("name"))
        );
    }

    #[test]
    fn patch_operations_declare_field_validation_for_their_kind() {
        for (group, version) in group_versions(&Kinds::builtin().snapshot()) {
            let key = group_version_path(group, version);
            let doc: Value =
                serde_json::from_slice(&documents().group_versions[&key].body).unwrap();
            for info in Kinds::builtin()
                .snapshot()
                .infos()
                .filter(|r| r.group == group && r.version == version)
                .filter(|r| r.verbs.contains(&"patch"))
            {
                let path = info.object_path(Some("{namespace}"), "{name}");
                let item = &doc["paths"][&path];
                let patch = &item["patch"];
                assert_eq!(
                    patch["x-kubernetes-group-version-kind"],
                    json!({"group": info.group, "version": info.version, "kind": info.kind}),
                    "{path}"
                );
                let params = patch["parameters"].as_array().unwrap();
                assert!(
                    params
                        .iter()
                        .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
                    "{path}"
                );
                for method in ["get", "put", "delete"] {
                    assert_eq!(
                        item[method]["x-kubernetes-group-version-kind"]["kind"],
                        info.kind
                    );
                }
                let collection = &doc["paths"][info.collection_path(Some("{namespace}"))];
                assert_eq!(collection["post"]["x-kubernetes-action"], "post");
                assert_eq!(collection["get"]["x-kubernetes-action"], "list");
            }
        }
        // The minimal document kubectl was observed to accept has the same shape.
        let minimal: Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/kubectl-wire/minimal-openapi-v3.json"
        )))
        .unwrap();
        let theirs = &minimal["GET /openapi/v3/api/v1"][1]["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]
            ["patch"];
        let ours = &core()["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(
            ours["x-kubernetes-group-version-kind"],
            theirs["x-kubernetes-group-version-kind"]
        );
    }

    #[test]
    fn subresource_paths() {
        let apps: Value =
            serde_json::from_slice(&documents().group_versions["apis/apps/v1"].body).unwrap();
        let scale = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
        assert_eq!(
            scale["patch"]["x-kubernetes-group-version-kind"]["group"],
            "autoscaling"
        );
        assert!(scale.get("post").is_none());
        let binding = &core()["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/binding"];
        assert_eq!(
            binding["post"]["x-kubernetes-group-version-kind"]["kind"],
            "Binding"
        );
        let log = &core()["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/log"];
        assert!(log["get"]["responses"]["200"]["content"]["text/plain"].is_object());
        let nodes = &core()["paths"]["/api/v1/nodes/{name}/status"];
        assert_eq!(
            nodes["get"]["x-kubernetes-group-version-kind"]["kind"],
            "Node"
        );
        // Cluster-scoped resources have no namespace parameter.
        let node_params = core()["paths"]["/api/v1/nodes/{name}"]["parameters"]
            .as_array()
            .unwrap();
        assert!(!node_params.iter().any(|p| p["name"] == "namespace"));
        // Namespaced resources have a list across namespaces.
        assert_eq!(
            core()["paths"]["/api/v1/pods"]["get"]["operationId"],
            "listCoreV1PodForAllNamespaces"
        );
    }

    #[test]
    fn operation_ids_name_group_and_version() {
        assert_eq!(camel_group(""), "Core");
        assert_eq!(camel_group("apps"), "Apps");
        assert_eq!(camel_group("coordination.k8s.io"), "Coordination");
        assert_eq!(
            camel_group("rbac.authorization.k8s.io"),
            "RbacAuthorization"
        );
        assert_eq!(
            core()["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["get"]["operationId"],
            "readCoreV1NamespacedPod"
        );
    }

    #[tokio::test]
    async fn routes_serve_with_etag_and_404() {
        let index = call(
            routes(Arc::new(OpenApi::new(Arc::new(Kinds::builtin())))),
            get("/openapi/v3?timeout=32s", &[]),
        )
        .await;
        assert_eq!(index.status(), 200);
        let url = body_json(&index)["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .to_string();
        let doc = call(
            routes(Arc::new(OpenApi::new(Arc::new(Kinds::builtin())))),
            get(&url, &[("accept", "application/json")]),
        )
        .await;
        assert_eq!(doc.status(), 200);
        assert_eq!(doc.headers()["cache-control"], "public, immutable");
        let etag = doc.headers()["etag"].to_str().unwrap().to_string();
        assert_eq!(body_json(&doc)["openapi"], "3.0.0");

        let plain = call(
            routes(Arc::new(OpenApi::new(Arc::new(Kinds::builtin())))),
            get("/openapi/v3/apis/apps/v1", &[]),
        )
        .await;
        assert_eq!(plain.status(), 200);
        assert_eq!(plain.headers()["cache-control"], "no-cache, private");

        let again = call(
            routes(Arc::new(OpenApi::new(Arc::new(Kinds::builtin())))),
            get("/openapi/v3/api/v1", &[("if-none-match", &etag)]),
        )
        .await;
        assert_eq!(again.status(), 304);
        assert!(again.body().is_empty());

        for path in ["/openapi/v3/apis/nope/v1", "/openapi/v3/api/v2"] {
            let missing = call(
                routes(Arc::new(OpenApi::new(Arc::new(Kinds::builtin())))),
                get(path, &[]),
            )
            .await;
            assert_eq!(missing.status(), 404, "{path}");
            assert_eq!(body_json(&missing)["reason"], "NotFound");
        }
    }

    #[tokio::test]
    async fn aggregated_documents_join_the_index_and_are_served_from_their_servers() {
        let gizmos = Built::new(&json!({"openapi": "3.0.0", "info": {"title": "gizmos"}}));
        let metrics = Built::new(&json!({"openapi": "3.0.0", "info": {"title": "adapter"}}));
        let remote: BTreeMap<String, Built> = [
            ("apis/e2e.skiff.test/v1".to_string(), gizmos.clone()),
            // A remote document of a path the server has itself stands in for its own.
            ("apis/apps/v1".to_string(), metrics.clone()),
        ]
        .into();
        let with_remote = || {
            let remote = remote.clone();
            routes_with(
                Arc::new(OpenApi::new(Arc::new(Kinds::builtin()))),
                Arc::new(Fixed {
                    v3: remote.clone(),
                    v2: Vec::new(),
                }),
            )
        };
        let index = body_json(&call(with_remote(), get("/openapi/v3", &[])).await);
        let url = |path: &str| index["paths"][path]["serverRelativeURL"].clone();
        assert_eq!(
            url("apis/e2e.skiff.test/v1"),
            format!("/openapi/v3/apis/e2e.skiff.test/v1?hash={}", gizmos.hash)
        );
        assert_eq!(
            url("apis/apps/v1"),
            format!("/openapi/v3/apis/apps/v1?hash={}", metrics.hash)
        );
        assert!(url("api/v1").is_string(), "the local documents stay");
        let served = call(
            with_remote(),
            get(url("apis/e2e.skiff.test/v1").as_str().unwrap(), &[]),
        )
        .await;
        assert_eq!(served.status(), 200);
        assert_eq!(served.headers()["cache-control"], "public, immutable");
        assert_eq!(body_json(&served)["info"]["title"], "gizmos");
        let apps = call(with_remote(), get("/openapi/v3/apis/apps/v1", &[])).await;
        assert_eq!(body_json(&apps)["info"]["title"], "adapter");
        // Without remote documents, the index is the local one as built.
        let local = call(
            routes(Arc::new(OpenApi::new(Arc::new(Kinds::builtin())))),
            get("/openapi/v3", &[]),
        )
        .await;
        assert_eq!(local.body(), &documents().index.body);
    }

    #[tokio::test]
    async fn aggregated_v2_documents_are_merged_into_the_local_one() {
        let gizmos = json!({
            "swagger": "2.0",
            "paths": {
                "/apis/e2e.skiff.test/v1/gizmos": {"get": {"responses": {"200": {
                    "schema": {"$ref": "#/definitions/test.Gizmo"}}}}},
                // A path the local document has stays the local one.
                "/api/v1/pods": {"get": {"description": "not ours"}},
            },
            "definitions": {"test.Gizmo": {"type": "object", "x-kubernetes-group-version-kind": [
                {"group": "e2e.skiff.test", "version": "v1", "kind": "Gizmo"}]}},
        });
        let remote = vec![Built::new(&gizmos)];
        let openapi = Arc::new(OpenApi::new(Arc::new(Kinds::builtin())));
        let with_remote = || {
            let remote = remote.clone();
            routes_with(
                openapi.clone(),
                Arc::new(Fixed {
                    v3: BTreeMap::new(),
                    v2: remote.clone(),
                }),
            )
        };
        let merged = call(with_remote(), get("/openapi/v2", &[])).await;
        assert_eq!(merged.status(), 200);
        let etag = merged.headers()["etag"].to_str().unwrap().to_string();
        let doc = body_json(&merged);
        assert!(doc["paths"]["/apis/e2e.skiff.test/v1/gizmos"]["get"].is_object());
        assert_ne!(
            doc["paths"]["/api/v1/pods"]["get"]["description"],
            "not ours"
        );
        assert!(doc["paths"]["/apis/apps/v1/deployments"].is_object());
        assert_eq!(doc["definitions"]["test.Gizmo"]["type"], "object");
        assert_ne!(etag, format!("\"{}\"", documents().v2_json.hash));
        // The protobuf kubectl asks for has the remote kind too, with its extension.
        let pb = call(
            with_remote(),
            get("/openapi/v2", &[("accept", PROTOBUF_V2)]),
        )
        .await;
        let definitions = gnostic::tests::Message::parse(pb.body())
            .message(9)
            .unwrap()
            .named(1);
        let gizmo = definitions
            .iter()
            .find(|(name, _)| name == "test.Gizmo")
            .expect("the remote definition");
        assert!(
            gizmo
                .1
                .extensions(31)
                .contains_key("x-kubernetes-group-version-kind")
        );
        // Asked again, the same merge is served (built once), and its ETag holds.
        let again = call(
            with_remote(),
            get("/openapi/v2", &[("if-none-match", &etag)]),
        )
        .await;
        assert_eq!(again.status(), 304);
        // Without remote documents, the local one alone.
        let local = call(routes(openapi.clone()), get("/openapi/v2", &[])).await;
        assert_eq!(local.body(), &documents().v2_json.body);
    }

    #[tokio::test]
    async fn v2_is_served_as_protobuf_or_json_as_asked() {
        let routes = || routes(Arc::new(OpenApi::new(Arc::new(Kinds::builtin()))));
        // What kubectl sends.
        let pb = call(
            routes(),
            get("/openapi/v2?timeout=32s", &[("accept", PROTOBUF_V2)]),
        )
        .await;
        assert_eq!(pb.status(), 200);
        assert_eq!(pb.headers()["content-type"], PROTOBUF_V2_RESPONSE);
        assert_eq!(pb.headers()["vary"], "Accept");
        assert_eq!(pb.body(), &documents().v2_protobuf.body);
        let decoded = gnostic::tests::Message::parse(pb.body());
        assert_eq!(decoded.string(1), "2.0");
        let etag = pb.headers()["etag"].to_str().unwrap().to_string();
        let again = call(
            routes(),
            get(
                "/openapi/v2",
                &[("accept", PROTOBUF_V2), ("if-none-match", &etag)],
            ),
        )
        .await;
        assert_eq!(again.status(), 304);

        for accept in [
            None,
            Some("application/json"),
            Some("*/*"),
            Some("application/*;q=0.5"),
        ] {
            let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("accept", *a)).collect();
            let json_doc = call(routes(), get("/openapi/v2", &headers)).await;
            assert_eq!(json_doc.status(), 200, "{accept:?}");
            assert_eq!(json_doc.headers()["content-type"], "application/json");
            assert_eq!(body_json(&json_doc)["swagger"], "2.0");
            // The two forms have their own ETags.
            assert_ne!(json_doc.headers()["etag"].to_str().unwrap(), etag);
        }
        // The client's preference decides.
        let preferred = call(
            routes(),
            get(
                "/openapi/v2",
                &[("accept", &format!("application/json;q=0.9, {PROTOBUF_V2}"))],
            ),
        )
        .await;
        assert_eq!(preferred.headers()["content-type"], PROTOBUF_V2_RESPONSE);
        let current = call(
            routes(),
            get("/openapi/v2", &[("accept", PROTOBUF_V2_RESPONSE)]),
        )
        .await;
        assert_eq!(current.body(), pb.body());

        let refused = call(routes(), get("/openapi/v2", &[("accept", "text/html")])).await;
        assert_eq!(refused.status(), 406);
        assert_eq!(body_json(&refused)["reason"], "NotAcceptable");
    }

    #[test]
    fn v2_follows_the_served_kinds() {
        let kinds = Arc::new(Kinds::builtin());
        let openapi = OpenApi::new(kinds.clone());
        let before = openapi.documents();
        assert!(
            Arc::ptr_eq(&before, &openapi.documents()),
            "cached while nothing changes"
        );
        crate::test_kinds::serve_widgets(&kinds);
        let after = openapi.documents();
        assert_ne!(after.generation, before.generation);
        assert_eq!(before.v2_json.body, documents().v2_json.body);
        assert_ne!(after.v2_protobuf.hash, before.v2_protobuf.hash);
        let v2: Value = serde_json::from_slice(&after.v2_json.body).unwrap();
        assert_eq!(
            v2["definitions"]["com.example.v1.Widget"]["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        let patch =
            &v2["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
        assert!(after.group_versions.contains_key("apis/example.com/v1"));
    }

    #[test]
    fn documents_are_the_same_bytes_for_the_same_kinds() {
        // ETags and the index's hashes stay valid across a rebuild that changes nothing.
        let kinds = Kinds::builtin();
        let again = super::documents(&kinds.snapshot());
        assert_eq!(again.v2_json.hash, documents().v2_json.hash);
        assert_eq!(again.v2_protobuf.hash, documents().v2_protobuf.hash);
        for (key, built) in &again.group_versions {
            assert_eq!(built.hash, documents().group_versions[key].hash, "{key}");
        }
    }
}

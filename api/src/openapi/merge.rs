//! The `/openapi/v2` of aggregated APIServices merged into skiff's own, as kube-aggregator
//! merges them: each server's document cut to its group-version's paths, then added in
//! discovery order after the local one. Pure: JSON documents in, one document out.
//!
//! The rules (kube-openapi's `aggregator` package, read for semantics):
//! - [`only_paths_under`]: a remote document keeps the paths under `/apis/<group>/<version>/`
//!   and drops the definitions only the dropped paths used; a definition nothing used before
//!   stays.
//! - [`merge_into`]: a path the document already has is not taken (the first document to serve
//!   a path keeps it); a definition of a name already taken is renamed `<name>_v2`, `_v3`, ...
//!   (references follow), unless it is the same schema but for its
//!   `x-kubernetes-group-version-kind` list, when the lists are joined; top-level
//!   `parameters` likewise, without the exception.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::v2::DEFINITIONS_PREFIX;

/// Where Swagger 2.0 keeps shared parameters.
const PARAMETERS_PREFIX: &str = "#/parameters/";

/// The extension listing the kinds a schema is the schema of.
const GVK: &str = "x-kubernetes-group-version-kind";

/// `document` with only the paths under one of `prefixes`, and the definitions something still
/// uses (or that nothing used before either).
pub fn only_paths_under(document: &Value, prefixes: &[String]) -> Value {
    keep_paths(document, |path| {
        prefixes.iter().any(|p| path.starts_with(p.as_str()))
    })
}

/// `document` with the paths `keep` keeps, and the definitions something still uses (or that
/// nothing used before either).
fn keep_paths(document: &Value, keep: impl Fn(&str) -> bool) -> Value {
    let mut kept = document.clone();
    let Some(paths) = kept.get_mut("paths").and_then(Value::as_object_mut) else {
        return kept;
    };
    paths.retain(|path, _| keep(path));
    let used_before = used_definitions(document);
    let used_after = used_definitions(&kept);
    if let Some(definitions) = kept.get_mut("definitions").and_then(Value::as_object_mut) {
        definitions.retain(|name, _| used_after.contains(name) || !used_before.contains(name));
    }
    kept
}

/// Adds `source`'s paths, definitions and parameters to `dest` by the rules above.
pub fn merge_into(dest: &mut Value, source: &Value) {
    let Some(source_paths) = source.get("paths").and_then(Value::as_object) else {
        return;
    };
    let dest_paths = object(dest, "paths");
    let new_paths: Vec<String> = source_paths
        .keys()
        .filter(|path| !dest_paths.contains_key(*path))
        .cloned()
        .collect();
    if new_paths.is_empty() {
        return;
    }
    let mut source = if new_paths.len() < source_paths.len() {
        keep_paths(source, |path| new_paths.iter().any(|p| p == path))
    } else {
        source.clone()
    };

    let renamed = renames(dest, &source, "definitions", equal_but_kinds);
    rename(&mut source, "definitions", DEFINITIONS_PREFIX, &renamed);
    let renamed = renames(dest, &source, "parameters", |a, b| a == b);
    rename(&mut source, "parameters", PARAMETERS_PREFIX, &renamed);

    let definitions = take(&mut source, "definitions");
    let dest_definitions = object(dest, "definitions");
    for (name, schema) in definitions {
        match dest_definitions.get_mut(&name) {
            None => {
                dest_definitions.insert(name, schema);
            }
            Some(existing) => join_kinds(existing, &schema),
        }
    }
    let parameters = take(&mut source, "parameters");
    let dest_parameters = object(dest, "parameters");
    for (name, parameter) in parameters {
        dest_parameters.entry(name).or_insert(parameter);
    }
    let paths = take(&mut source, "paths");
    object(dest, "paths").extend(paths);
}

/// The member `key` of `document` as an object (made an empty one when it is not).
fn object<'a>(document: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !document.get(key).is_some_and(Value::is_object) {
        document[key] = Value::Object(Map::new());
    }
    document[key].as_object_mut().expect("just made an object")
}

fn take(document: &mut Value, key: &str) -> Map<String, Value> {
    match document.get_mut(key).map(Value::take) {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// For each name of `source`'s `section` that `dest` has with a different value (by `same`),
/// the free name it takes in `dest`: `<name>_v2`, `_v3`, ..., reusing one that already holds
/// the same value.
fn renames(
    dest: &Value,
    source: &Value,
    section: &str,
    same: impl Fn(&Value, &Value) -> bool,
) -> Vec<(String, String)> {
    let empty = Map::new();
    let theirs = source
        .get(section)
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let ours = dest
        .get(section)
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut taken: BTreeSet<String> = ours.keys().cloned().collect();
    let mut renamed = Vec::new();
    for (name, value) in theirs {
        match ours.get(name) {
            None => continue,
            Some(existing) if same(existing, value) => continue,
            Some(_) => {}
        }
        let mut n = 2;
        let new_name = loop {
            let candidate = format!("{name}_v{n}");
            match ours.get(&candidate) {
                Some(existing) if same(existing, value) => break candidate,
                Some(_) => {}
                None if !taken.contains(&candidate) && !theirs.contains_key(&candidate) => {
                    break candidate;
                }
                None => {}
            }
            n += 1;
        };
        taken.insert(new_name.clone());
        renamed.push((name.clone(), new_name));
    }
    renamed
}

/// Renames the entries of `section` and every `$ref` to them (`prefix` + name) in `document`.
fn rename(document: &mut Value, section: &str, prefix: &str, renamed: &[(String, String)]) {
    if renamed.is_empty() {
        return;
    }
    if let Some(entries) = document.get_mut(section).and_then(Value::as_object_mut) {
        for (old, new) in renamed {
            if let Some(value) = entries.remove(old) {
                entries.insert(new.clone(), value);
            }
        }
    }
    let references: Vec<(String, String)> = renamed
        .iter()
        .map(|(old, new)| (format!("{prefix}{old}"), format!("{prefix}{new}")))
        .collect();
    rewrite_refs(document, &references);
}

fn rewrite_refs(value: &mut Value, references: &[(String, String)]) {
    match value {
        Value::Object(map) => {
            for (key, member) in map.iter_mut() {
                if key == "$ref" {
                    if let Some((_, new)) = references
                        .iter()
                        .find(|(old, _)| member.as_str() == Some(old.as_str()))
                    {
                        *member = Value::String(new.clone());
                    }
                } else {
                    rewrite_refs(member, references);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| rewrite_refs(item, references)),
        _ => {}
    }
}

/// Whether two schemas are the same but for the kinds they list.
fn equal_but_kinds(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            fn rest(m: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
                m.iter().filter(|(k, _)| k.as_str() != GVK)
            }
            rest(a).eq(rest(b))
        }
        _ => a == b,
    }
}

/// Adds the kinds `from` lists that `into` does not.
fn join_kinds(into: &mut Value, from: &Value) {
    let Some(theirs) = from.get(GVK).and_then(Value::as_array) else {
        return;
    };
    let Some(into) = into.as_object_mut() else {
        return;
    };
    let ours = into.entry(GVK).or_insert_with(|| Value::Array(Vec::new()));
    if let Some(ours) = ours.as_array_mut() {
        for kind in theirs {
            if !ours.contains(kind) {
                ours.push(kind.clone());
            }
        }
    }
}

/// The definitions the paths use, directly or through other definitions and shared
/// parameters.
fn used_definitions(document: &Value) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut seen_parameters = BTreeSet::new();
    let mut pending = Vec::new();
    if let Some(paths) = document.get("paths") {
        references(paths, &mut pending);
    }
    while let Some(reference) = pending.pop() {
        if let Some(name) = reference.strip_prefix(DEFINITIONS_PREFIX) {
            if used.insert(name.to_string())
                && let Some(schema) = document.pointer(&format!("/definitions/{}", escape(name)))
            {
                references(schema, &mut pending);
            }
        } else if let Some(name) = reference.strip_prefix(PARAMETERS_PREFIX)
            && seen_parameters.insert(name.to_string())
            && let Some(parameter) = document.pointer(&format!("/parameters/{}", escape(name)))
        {
            references(parameter, &mut pending);
        }
    }
    used
}

/// A JSON pointer token for `name`.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Every `$ref` under `value`.
fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, member) in map {
                match (key.as_str(), member) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => references(member, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reference(name: &str) -> Value {
        json!({ "$ref": format!("{DEFINITIONS_PREFIX}{name}") })
    }

    fn get_returning(name: &str) -> Value {
        json!({ "get": { "responses": { "200": { "schema": reference(name) } } } })
    }

    /// What an aggregated server might serve: its own group-version, plus paths of its own
    /// that are not the APIService's.
    fn remote() -> Value {
        json!({
            "swagger": "2.0",
            "paths": {
                "/apis/metrics.k8s.io/v1beta1/": get_returning("meta.APIResourceList"),
                "/apis/metrics.k8s.io/v1beta1/pods": get_returning("metrics.PodMetricsList"),
                "/healthz": get_returning("Health"),
                "/apis/metrics.k8s.io/v1beta1x/odd": get_returning("Odd"),
            },
            "definitions": {
                "metrics.PodMetricsList": {
                    "type": "object",
                    "properties": { "items": { "type": "array", "items": reference("metrics.PodMetrics") } },
                },
                "metrics.PodMetrics": { "type": "object" },
                "meta.APIResourceList": { "type": "object", "description": "theirs" },
                "Health": { "type": "string" },
                "Odd": { "type": "string" },
                "Unused": { "type": "string" },
            },
        })
    }

    #[test]
    fn a_remote_document_keeps_its_group_versions_paths_and_what_they_use() {
        let cut = only_paths_under(&remote(), &["/apis/metrics.k8s.io/v1beta1/".into()]);
        let paths: Vec<&String> = cut["paths"].as_object().unwrap().keys().collect();
        assert_eq!(
            paths,
            [
                "/apis/metrics.k8s.io/v1beta1/",
                "/apis/metrics.k8s.io/v1beta1/pods"
            ]
        );
        let definitions: BTreeSet<&String> =
            cut["definitions"].as_object().unwrap().keys().collect();
        // What only the dropped paths used is gone; what nothing used stays; what is used
        // through another definition stays.
        assert_eq!(
            definitions,
            [
                "Unused",
                "meta.APIResourceList",
                "metrics.PodMetrics",
                "metrics.PodMetricsList"
            ]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .iter()
            .collect()
        );
    }

    #[test]
    fn merging_keeps_the_first_path_renames_a_different_definition_and_joins_kinds() {
        let kind = |v: &str| json!({ "group": "", "version": v, "kind": "DeleteOptions" });
        let mut local = json!({
            "swagger": "2.0",
            "info": { "title": "Kubernetes" },
            "paths": {
                "/api/v1/pods": get_returning("meta.APIResourceList"),
                "/apis/metrics.k8s.io/v1beta1/": get_returning("meta.APIResourceList"),
            },
            "definitions": {
                "meta.APIResourceList": { "type": "object", "description": "ours" },
                "meta.DeleteOptions": { "type": "object", GVK: [kind("v1")] },
            },
        });
        let mut theirs = only_paths_under(&remote(), &["/apis/metrics.k8s.io/v1beta1/".into()]);
        theirs["paths"]["/apis/metrics.k8s.io/v1beta1/options"] =
            get_returning("meta.DeleteOptions");
        theirs["definitions"]["meta.DeleteOptions"] =
            json!({ "type": "object", GVK: [kind("v1"), kind("v1beta1")] });
        merge_into(&mut local, &theirs);

        assert_eq!(local["info"]["title"], "Kubernetes");
        // The path both have stays the local one; the remote's others join.
        assert_eq!(
            local["paths"]["/apis/metrics.k8s.io/v1beta1/"],
            get_returning("meta.APIResourceList")
        );
        assert_eq!(
            local["paths"]["/apis/metrics.k8s.io/v1beta1/pods"],
            get_returning("metrics.PodMetricsList")
        );
        // Their APIResourceList was used only by the path not taken: it is not brought in.
        assert!(
            local["definitions"]
                .get("meta.APIResourceList_v2")
                .is_none()
        );
        assert_eq!(
            local["definitions"]["meta.APIResourceList"]["description"],
            "ours"
        );
        // The same schema but for its kinds: one definition listing both.
        assert_eq!(
            local["definitions"]["meta.DeleteOptions"][GVK],
            json!([kind("v1"), kind("v1beta1")])
        );
        assert!(local["definitions"]["metrics.PodMetrics"].is_object());
        assert!(local["definitions"].get("Odd").is_none());

        // A different schema under a taken name is renamed, and so are references to it.
        let mut other = json!({
            "paths": { "/apis/other.example/v1/things": get_returning("meta.APIResourceList") },
            "definitions": { "meta.APIResourceList": { "type": "object", "description": "other" } },
        });
        merge_into(&mut local, &other);
        assert_eq!(
            local["paths"]["/apis/other.example/v1/things"],
            get_returning("meta.APIResourceList_v2")
        );
        assert_eq!(
            local["definitions"]["meta.APIResourceList_v2"]["description"],
            "other"
        );
        // A third server with the same "other" schema reuses the renamed one.
        other["paths"] =
            json!({ "/apis/third.example/v1/x": get_returning("meta.APIResourceList") });
        merge_into(&mut local, &other);
        assert_eq!(
            local["paths"]["/apis/third.example/v1/x"],
            get_returning("meta.APIResourceList_v2")
        );
        assert!(
            local["definitions"]
                .get("meta.APIResourceList_v3")
                .is_none()
        );
    }

    #[test]
    fn shared_parameters_are_merged_and_renamed_like_definitions() {
        let param = |name: &str| json!({ "name": name, "in": "query", "type": "string" });
        let uses = |p: &str| json!({ "get": { "parameters": [{ "$ref": format!("{PARAMETERS_PREFIX}{p}") }] } });
        let mut local = json!({
            "paths": { "/api/v1/a": uses("pretty") },
            "parameters": { "pretty": param("pretty") },
        });
        let theirs = json!({
            "paths": { "/apis/x.example/v1/b": uses("pretty"), "/apis/x.example/v1/c": uses("dry") },
            "parameters": { "pretty": param("prettier"), "dry": param("dryRun") },
        });
        merge_into(&mut local, &theirs);
        assert_eq!(local["paths"]["/apis/x.example/v1/b"], uses("pretty_v2"));
        assert_eq!(local["parameters"]["pretty_v2"], param("prettier"));
        assert_eq!(local["parameters"]["pretty"], param("pretty"));
        assert_eq!(local["parameters"]["dry"], param("dryRun"));
    }

    #[test]
    fn a_document_whose_paths_are_all_taken_adds_nothing() {
        let mut local = json!({
            "paths": { "/apis/a.example/v1/x": get_returning("A") },
            "definitions": { "A": { "type": "string" } },
        });
        let before = local.clone();
        merge_into(
            &mut local,
            &json!({
                "paths": { "/apis/a.example/v1/x": get_returning("B") },
                "definitions": { "B": { "type": "string" } },
            }),
        );
        assert_eq!(local, before);
        merge_into(&mut local, &json!({ "swagger": "2.0" }));
        assert_eq!(local, before);
    }
}

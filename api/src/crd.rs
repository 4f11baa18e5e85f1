//! The definition controller: serves what CustomResourceDefinitions define, inside the API server
//! (kube-apiserver's apiextensions controllers: names, establishing, finalizing).
//!
//! At start every stored definition is served before the first request; then a watch of the
//! definitions reconciles each change. A definition whose names are free is served (its kinds
//! registered in [`skiff_kinds::Kinds`], so routing, discovery, OpenAPI and watches see them at
//! once) and gets `NamesAccepted` and `Established`; one whose names another resource already
//! uses is reported (`NamesAccepted=False`) and not served. Deleting a definition marks it
//! `Terminating`, deletes its custom resources (waiting for their finalizers), then releases the
//! `customresourcecleanup` finalizer, and stops serving it once it is gone.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_kinds::builtin::custom_resource_definition::{CLEANUP_FINALIZER, INFO};
use skiff_kinds::custom;
use skiff_meta::ResourceInfo;

use crate::error::{Error, Result};
use crate::registry::{Update, namespace_and_name};
use crate::server::ApiServer;

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Serves every stored definition, then keeps following them until the server shuts down.
pub async fn start(server: &Arc<ApiServer>) -> Result<()> {
    crate::follow::start(server, &INFO, "the definition controller", Definitions).await
}

/// The definition controller's view of the definitions.
struct Definitions;

impl crate::follow::Follower for Definitions {
    async fn listed(&self, server: &Arc<ApiServer>, items: &[Value]) {
        for definition in items {
            reconcile(server, definition).await;
        }
    }

    async fn changed(&self, server: &Arc<ApiServer>, definition: &Value, present: bool) {
        if present {
            reconcile(server, definition).await;
        } else {
            unserve(server, definition);
        }
    }
}

/// Stops serving what a deleted definition defined.
fn unserve(server: &ApiServer, definition: &Value) {
    let group = text(definition, "/spec/group");
    let plural = text(definition, "/spec/names/plural");
    if owns_names(server, definition) {
        server.kinds.set(group, plural, Vec::new());
    }
}

/// Whether the kinds served under this definition's group and plural are its own (rather than a
/// built-in resource's or another definition's that holds the names).
fn owns_names(server: &ApiServer, definition: &Value) -> bool {
    let group = text(definition, "/spec/group");
    let plural = text(definition, "/spec/names/plural");
    !server.kinds.is_builtin(group, plural)
        && server
            .kinds
            .snapshot()
            .kinds()
            .iter()
            .filter(|k| k.info().group == group && k.info().plural == plural)
            .all(|k| served_by(k.info(), definition))
}

/// Whether `info` is one of the versions `definition` serves (same kind and scope).
fn served_by(info: &ResourceInfo, definition: &Value) -> bool {
    info.kind == text(definition, "/spec/names/kind")
        && info.namespaced == (text(definition, "/spec/scope") != "Cluster")
}

/// Why the definition's names cannot be served, if they cannot.
fn name_conflict(server: &ApiServer, definition: &Value) -> Option<String> {
    let group = text(definition, "/spec/group");
    let plural = text(definition, "/spec/names/plural");
    let kind = text(definition, "/spec/names/kind");
    if server.kinds.is_builtin(group, plural) {
        return Some(format!("{plural:?} is already in use"));
    }
    let snapshot = server.kinds.snapshot();
    for other in snapshot.kinds() {
        let info = other.info();
        if info.group != group {
            continue;
        }
        if info.plural == plural && !served_by(info, definition) {
            return Some(format!("{plural:?} is already in use"));
        }
        if info.kind == kind && info.plural != plural {
            return Some(format!("{kind:?} is already in use"));
        }
        for name in definition
            .pointer("/spec/names/shortNames")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if info.plural != plural && info.short_names.contains(&name) {
                return Some(format!("{name:?} is already in use"));
            }
        }
    }
    None
}

/// Brings serving and the definition's status in line with what it says.
async fn reconcile(server: &Arc<ApiServer>, definition: &Value) {
    let name = namespace_and_name(definition).1.to_string();
    let result = if definition.pointer("/metadata/deletionTimestamp").is_some() {
        finalize(server, definition).await
    } else {
        establish(server, definition).await
    };
    if let Err(e) = result {
        tracing::warn!(definition = %name, error = %e, "definition controller");
    }
}

/// The accepted names: the spec's, with the singular and list kind filled in.
fn accepted_names(definition: &Value) -> Value {
    let names = definition
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut names = names;
    let kind = text(definition, "/spec/names/kind").to_string();
    if text(&names, "/singular").is_empty() {
        names["singular"] = json!(kind.to_ascii_lowercase());
    }
    if text(&names, "/listKind").is_empty() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    names
}

fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": skiff_kinds::strategy::now(),
    })
}

async fn establish(server: &Arc<ApiServer>, definition: &Value) -> Result<()> {
    let group = text(definition, "/spec/group");
    let plural = text(definition, "/spec/names/plural");
    let (conditions, accepted) = match name_conflict(server, definition) {
        Some(conflict) => (
            vec![
                condition("NamesAccepted", false, "NameConflict", &conflict),
                condition(
                    "Established",
                    false,
                    "NotAccepted",
                    "not all names are accepted",
                ),
            ],
            None,
        ),
        None => match custom::kinds_of(definition) {
            Ok(kinds) => {
                server.kinds.set(group, plural, kinds);
                (
                    vec![
                        condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
                        condition(
                            "Established",
                            true,
                            "InitialNamesAccepted",
                            "the initial names have been accepted",
                        ),
                    ],
                    Some(accepted_names(definition)),
                )
            }
            Err(errors) => {
                let message = skiff_meta::status::aggregate_field_errors(&errors);
                (
                    vec![
                        condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
                        condition("Established", false, "Invalid", &message),
                    ],
                    None,
                )
            }
        },
    };
    let storage = definition
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| text(v, "/name").to_string());
    write_status(server, definition, conditions, accepted, storage).await
}

/// Writes the definition's status if it would change (conditions compared without their
/// transition times, which keep their old value when nothing else about them changes).
async fn write_status(
    server: &Arc<ApiServer>,
    definition: &Value,
    conditions: Vec<Value>,
    accepted: Option<Value>,
    storage: Option<String>,
) -> Result<()> {
    let before = definition
        .get("status")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if merged_status(&before, &conditions, accepted.as_ref(), storage.as_deref()) == before {
        return Ok(());
    }
    let name = namespace_and_name(definition).1.to_string();
    let written = server
        .registry
        .update(&INFO, None, &name, None, false, |mut current| {
            let before = current.get("status").cloned().unwrap_or_else(|| json!({}));
            current["status"] =
                merged_status(&before, &conditions, accepted.as_ref(), storage.as_deref());
            async move { Ok(Update::Write(current)) }
        })
        .await;
    match written {
        Ok(_) | Err(Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `before` with `conditions` set (others kept), the accepted names and the stored version.
fn merged_status(
    before: &Value,
    conditions: &[Value],
    accepted: Option<&Value>,
    storage: Option<&str>,
) -> Value {
    let mut status = before.clone();
    let old_conditions: Vec<Value> = before
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let same = |c: &Value, o: &Value| {
        ["type", "status", "reason", "message"]
            .iter()
            .all(|k| o.get(*k) == c.get(*k))
    };
    let mut all: Vec<Value> = old_conditions
        .iter()
        .filter(|o| !conditions.iter().any(|c| c.get("type") == o.get("type")))
        .cloned()
        .collect();
    for c in conditions {
        let mut c = c.clone();
        if let Some(old) = old_conditions.iter().find(|o| same(&c, o)) {
            c["lastTransitionTime"] = old["lastTransitionTime"].clone();
        }
        all.push(c);
    }
    status["conditions"] = Value::Array(all);
    match accepted {
        Some(accepted) => status["acceptedNames"] = accepted.clone(),
        None if status.get("acceptedNames").is_none() => {
            status["acceptedNames"] = json!({"plural": "", "kind": ""});
        }
        None => {}
    }
    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(v) = storage
        && !stored.iter().any(|s| s == v)
    {
        stored.push(json!(v));
    }
    status["storedVersions"] = Value::Array(stored);
    status
}

/// How long a deleted definition waits between passes over custom resources that still have
/// finalizers.
const FINALIZE_RETRY: Duration = Duration::from_millis(500);

/// A deleted definition: `Terminating`, its custom resources deleted, then its finalizer
/// released.
async fn finalize(server: &Arc<ApiServer>, definition: &Value) -> Result<()> {
    let finalizers: Vec<&str> = definition
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !finalizers.contains(&CLEANUP_FINALIZER) {
        return Ok(());
    }
    let terminating = condition(
        "Terminating",
        true,
        "InstanceDeletionInProgress",
        "CustomResource deletion is in progress",
    );
    let established = definition
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("type") != Some(&json!("Terminating")))
        .cloned()
        .collect::<Vec<_>>();
    let mut conditions = established;
    conditions.push(terminating);
    write_status(server, definition, conditions, None, None).await?;
    let owned = owns_names(server, definition);
    let info = owned
        .then(|| {
            server
                .kinds
                .snapshot()
                .kinds()
                .iter()
                .find(|k| {
                    k.info().group == text(definition, "/spec/group")
                        && k.info().plural == text(definition, "/spec/names/plural")
                })
                .map(|k| k.info())
        })
        .flatten();
    let name = namespace_and_name(definition).1.to_string();
    let server = server.clone();
    // The custom resources go in the background: their own finalizers may take a while, and the
    // controller goes on with other definitions meanwhile.
    tokio::spawn(async move {
        loop {
            let remaining = match info {
                Some(info) => delete_all(&server, info).await,
                None => Ok(0),
            };
            match remaining {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(definition = %name, error = %e, "deleting custom resources")
                }
            }
            if server.shutdown.is_cancelled() {
                return;
            }
            tokio::time::sleep(FINALIZE_RETRY).await;
        }
        let released = server
            .registry
            .update(&INFO, None, &name, None, false, |mut current| async move {
                if let Some(list) = current
                    .pointer_mut("/metadata/finalizers")
                    .and_then(Value::as_array_mut)
                {
                    list.retain(|f| f != CLEANUP_FINALIZER);
                }
                if skiff_kinds::strategy::ready_to_remove(&current) {
                    Ok(Update::Delete)
                } else {
                    Ok(Update::Write(current))
                }
            })
            .await;
        if let Err(e) = released {
            tracing::warn!(definition = %name, error = %e, "releasing the cleanup finalizer");
        }
    });
    Ok(())
}

/// Deletes every object of `info` (all namespaces): those without finalizers at once, the others
/// marked deleted for their controllers to finish. Returns how many remain.
async fn delete_all(server: &ApiServer, info: &'static ResourceInfo) -> Result<usize> {
    let page = server
        .registry
        .list(info, None, None, None, None, None)
        .await?;
    let mut remaining = 0;
    for object in page.items {
        let (ns, name) = namespace_and_name(&object);
        let (ns, name) = (ns.map(str::to_string), name.to_string());
        let has_finalizers = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if !has_finalizers {
            match server
                .registry
                .delete(info, ns.as_deref(), &name, None)
                .await
            {
                Ok(_) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        remaining += 1;
        if object.pointer("/metadata/deletionTimestamp").is_none() {
            let marked = server
                .registry
                .update(
                    info,
                    ns.as_deref(),
                    &name,
                    None,
                    false,
                    |mut current| async move {
                        current["metadata"]["deletionTimestamp"] =
                            json!(skiff_kinds::strategy::now());
                        current["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                        Ok(Update::Write(current))
                    },
                )
                .await;
            if let Err(e) = marked {
                tracing::warn!(object = %name, error = %e, "marking a custom resource deleted");
            }
        }
    }
    Ok(remaining)
}

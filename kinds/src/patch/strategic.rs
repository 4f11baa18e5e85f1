//! Strategic merge patch (`application/strategic-merge-patch+json`), with the semantics of
//! `k8s.io/apimachinery/pkg/util/strategicpatch` as the API server applies it:
//!
//! - objects merge key by key; `null` deletes a key;
//! - lists with a merge key merge item by item (by `name`, `containerPort`, ...); lists of
//!   scalars with the merge strategy (finalizers) are unions; other lists are replaced;
//! - directives: `$patch: replace | delete` on an object (and `merge`, the default),
//!   `{"<key>": v, "$patch": "delete"}` and `{"$patch": "replace"}` items in merging lists,
//!   `$retainKeys`, `$deleteFromPrimitiveList/<list>`, `$setElementOrder/<list>`.
//!
//! The order of a merged list follows Kubernetes: `$setElementOrder` first, then the order of
//! the patch, then the order of the live list, interleaved as `mergeSortedSlice` does.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::schema::{Field, Node, Type, field_of};
use super::{Error, Result, kind_name};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

const BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";

/// Applies a strategic merge patch body to `live`, whose kind has the merge schema `ty`.
pub fn apply(live: &Value, body: &[u8], ty: &'static Type) -> Result<Value> {
    let patch: Value =
        serde_json::from_slice(body).map_err(|e| Error::BadRequest(e.to_string()))?;
    apply_value(live, patch, ty)
}

/// Applies an already decoded strategic merge patch.
pub fn apply_value(live: &Value, patch: Value, ty: &'static Type) -> Result<Value> {
    let Value::Object(patch) = patch else {
        return Err(Error::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            kind_name(&patch)
        )));
    };
    let Value::Object(original) = live.clone() else {
        return Err(Error::Unprocessable(format!(
            "expected the live object to be an object, got {}",
            kind_name(live)
        )));
    };
    Ok(Value::Object(merge_map(original, patch, Some(ty))?))
}

fn no_merge_key(item: &Value, key: &str) -> Error {
    Error::Unprocessable(format!(
        "map: {item} does not contain declared merge key: {key}"
    ))
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> Error {
    let d = directive
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| directive.to_string());
    Error::BadRequest(format!(
        "unknown patch type: {d} in map: {}",
        Value::Object(map.clone())
    ))
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: Node,
) -> Result<Map<String, Value>> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        match directive.as_str() {
            Some("replace") => {
                // Nulls and directives inside the replacement are not content (Kubernetes'
                // typed decode drops them).
                return Ok(match insert_value(Value::Object(patch)) {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                });
            }
            Some("delete") => return Ok(Map::new()),
            // `merge` is the default; Kubernetes documents it, so it is accepted here.
            Some("merge") => {}
            _ => return Err(bad_patch_type(&directive, &patch)),
        }
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_set_element_order(&mut original, &mut patch, ty)?;

    let (delete_lists, regular): (Vec<_>, Vec<_>) = patch
        .into_iter()
        .partition(|(k, _)| k.starts_with(DELETE_FROM_PRIMITIVE_LIST));
    for (key, patch_value) in regular {
        if key.starts_with('$') {
            // An unknown directive is not a field; the typed decode in Kubernetes drops it.
            continue;
        }
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let field = field_of(ty, &key);
        let merged = match original.remove(&key) {
            Some(Value::Object(o)) if patch_value.is_object() => {
                let Value::Object(p) = patch_value else {
                    unreachable!("checked to be an object")
                };
                Some(Value::Object(merge_map(o, p, field.ty)?))
            }
            Some(Value::Array(o)) if patch_value.is_array() => {
                let Value::Array(p) = patch_value else {
                    unreachable!("checked to be an array")
                };
                if field.merge_key.is_some() {
                    Some(Value::Array(merge_list(o, p, field, false)?))
                } else {
                    insert_value(Value::Array(p))
                }
            }
            _ => insert_value(patch_value),
        };
        if let Some(v) = merged {
            original.insert(key, v);
        }
    }
    for (key, patch_value) in delete_lists {
        let Some(list_key) = suffix(&key, DELETE_FROM_PRIMITIVE_LIST) else {
            return Err(Error::BadRequest(BAD_PRIMITIVE_LIST.to_string()));
        };
        let field = field_of(ty, list_key);
        if let (Some(Value::Array(o)), Value::Array(p)) = (original.get_mut(list_key), patch_value)
        {
            let merged = merge_list(std::mem::take(o), p, field, true)?;
            *o = merged;
        }
    }
    Ok(original)
}

/// `$deleteFromPrimitiveList/finalizers` → `finalizers`.
fn suffix<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    let (p, rest) = key.split_once('/')?;
    (p == prefix).then_some(rest)
}

/// A patch value that lands where the live object has nothing (or something of another
/// type): its nulls and directives are dropped.
fn insert_value(mut v: Value) -> Option<Value> {
    discard_nulls(&mut v);
    remove_directives(v)
}

fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(discard_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// Drops maps carrying `$patch` (they are instructions, not content) and other directive keys.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            let out = m
                .into_iter()
                .filter(|(k, _)| !is_directive_key(k))
                .filter_map(|(k, c)| remove_directives(c).map(|c| (k, c)))
                .collect();
            Some(Value::Object(out))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

fn is_directive_key(k: &str) -> bool {
    k == RETAIN_KEYS
        || k.starts_with(&format!("{SET_ELEMENT_ORDER}/"))
        || k.starts_with(&format!("{DELETE_FROM_PRIMITIVE_LIST}/"))
}

/// `$retainKeys`: every field the patch sets must be listed; fields of the live object that are
/// not listed are cleared.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(Error::BadRequest(BAD_RETAIN_KEYS.to_string()));
    };
    let listed = |k: &str| retain.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !listed(k) {
            return Err(Error::BadRequest(BAD_RETAIN_KEYS.to_string()));
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// Handles every `$setElementOrder/<list>` of this map: merges the list now and orders it.
fn merge_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    ty: Node,
) -> Result<()> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let order = patch.remove(&key).unwrap_or(Value::Null);
        let Value::Array(order) = order else {
            return Err(Error::BadRequest(BAD_SET_ELEMENT_ORDER.to_string()));
        };
        let Some(list_key) = suffix(&key, SET_ELEMENT_ORDER).map(str::to_string) else {
            return Err(Error::BadRequest(BAD_SET_ELEMENT_ORDER.to_string()));
        };
        let field = field_of(ty, &list_key);
        let merge_key = field.merge_key.unwrap_or("");
        let original_list = match original.get(&list_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => {
                return Err(Error::Unprocessable(format!(
                    "expected a list at {list_key}, but received a {}",
                    kind_name(other)
                )));
            }
        };
        let patch_list = match patch.remove(&list_key) {
            None => None,
            Some(Value::Array(a)) => Some(a),
            Some(other) => {
                return Err(Error::Unprocessable(format!(
                    "expected a list at {list_key}, but received a {}",
                    kind_name(&other)
                )));
            }
        };
        validate_set_element_order(patch_list.as_deref(), &order, merge_key)?;
        let mut elements: Vec<&Value> = Vec::new();
        elements.extend(original_list.iter().flatten());
        elements.extend(patch_list.iter().flatten());
        let is_map = match element_kind(elements.into_iter())? {
            Some(k) => k == Kind::Object,
            None => {
                // Nothing to order: an empty list stays (or becomes) empty.
                if let Some(p) = patch_list {
                    original.insert(list_key, Value::Array(p));
                }
                continue;
            }
        };
        let mut server_order = original_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => match remove_directives(Value::Array(p)) {
                Some(Value::Array(a)) => a,
                _ => Vec::new(),
            },
            (Some(o), Some(p)) => {
                if field.merge_key.is_some() {
                    let (merged, view) = merge_list_with_view(o, p, field, false)?;
                    server_order = view;
                    merged
                } else {
                    p
                }
            }
            (None, None) => continue,
        };
        let (patch_items, server_only) = partition(merged, &order, merge_key, is_map)?;
        let ordered = normalize_element_order(
            patch_items,
            server_only,
            &order,
            &server_order,
            merge_key,
            is_map,
        )?;
        original.insert(list_key, Value::Array(ordered));
    }
    Ok(())
}

/// The items of the patch list must appear in the same relative order as in the
/// `$setElementOrder` list, and be a subset of it.
fn validate_set_element_order(patch: Option<&[Value]>, order: &[Value], key: &str) -> Result<()> {
    let Some(patch) = patch else { return Ok(()) };
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = if key.is_empty() {
        patch.iter().collect()
    } else {
        patch
            .iter()
            .filter(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
            .collect()
    };
    let (mut pi, mut si) = (0, 0);
    while pi < non_delete.len() && si < order.len() {
        let item = non_delete[pi];
        if item.get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        let equal = if key.is_empty() {
            item == &order[si]
        } else {
            let a = item.get(key).ok_or_else(|| no_merge_key(item, key))?;
            let b = order[si]
                .get(key)
                .ok_or_else(|| no_merge_key(&order[si], key))?;
            a == b
        };
        if equal {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= order.len() {
        return Err(Error::BadRequest(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            Value::Array(patch.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    Object,
}

/// The one element type of the given items (`sliceElementType`): lists of lists and mixed
/// lists are errors; `None` when there are no items.
fn element_kind<'a>(items: impl Iterator<Item = &'a Value>) -> Result<Option<Kind>> {
    let mut kind = None;
    for v in items {
        let k = match v {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(_) => Kind::Number,
            Value::String(_) => Kind::String,
            Value::Object(_) => Kind::Object,
            Value::Array(_) => {
                return Err(Error::Unprocessable(
                    "lists of lists are not supported".to_string(),
                ));
            }
        };
        match kind {
            None => kind = Some(k),
            Some(prev) if prev != k => {
                return Err(Error::Unprocessable(
                    "list element types are not identical".to_string(),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: &Field,
    is_delete_list: bool,
) -> Result<Vec<Value>> {
    merge_list_with_view(original, patch, field, is_delete_list).map(|(merged, _)| merged)
}

/// Kubernetes merges a list in place: deleting an item shifts the rest of the live list's
/// array left (the old last item stays behind in the freed slot), merged items are written
/// back, and new items are appended into freed slots. `$setElementOrder` then orders by that
/// array rather than by the live list as it was, so the resulting order depends on these
/// writes; `LiveView` replays them.
struct LiveView {
    slots: Vec<Value>,
    /// The length of the merged list while it still shares the array; `None` once it no longer
    /// does (a replace, or an append past the end).
    len: Option<usize>,
}

impl LiveView {
    fn new(original: &[Value]) -> Self {
        LiveView {
            slots: original.to_vec(),
            len: Some(original.len()),
        }
    }

    fn delete(&mut self, k: usize) {
        if let Some(len) = self.len {
            for i in k..len.saturating_sub(1) {
                self.slots[i] = self.slots[i + 1].clone();
            }
            self.len = Some(len - 1);
        }
    }

    fn set(&mut self, i: usize, v: &Value) {
        if self.len.is_some_and(|len| i < len) {
            self.slots[i] = v.clone();
        }
    }

    fn append(&mut self, v: &Value) {
        if let Some(len) = self.len {
            if len < self.slots.len() {
                self.slots[len] = v.clone();
                self.len = Some(len + 1);
            } else {
                self.len = None;
            }
        }
    }
}

/// Merges a list; also returns the live list's array as the in-place merge left it (see
/// [`LiveView`]).
fn merge_list_with_view(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: &Field,
    is_delete_list: bool,
) -> Result<(Vec<Value>, Vec<Value>)> {
    if original.is_empty() && patch.is_empty() {
        return Ok((original, Vec::new()));
    }
    let Some(kind) = element_kind(original.iter().chain(patch.iter()))? else {
        let view = original.clone();
        return Ok((original, view));
    };
    let merge_key = field.merge_key.unwrap_or("");
    if kind != Kind::Object {
        let view = original.clone();
        if is_delete_list {
            let kept = original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect();
            return Ok((kept, view));
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        let (patch_items, server_only) = partition(merged, &patch, "", false)?;
        let ordered =
            normalize_element_order(patch_items, server_only, &patch, &original, "", false)?;
        return Ok((ordered, view));
    }
    if is_delete_list {
        return Err(Error::BadRequest(BAD_PRIMITIVE_LIST.to_string()));
    }
    if merge_key.is_empty() {
        return Err(Error::Unprocessable(format!(
            "cannot merge lists without merge key for {}",
            field.name
        )));
    }
    let mut view = LiveView::new(&original);
    let (original, patch) = split_special_items(original, patch, merge_key, &mut view)?;
    let mut merged = original.clone();
    for item in &patch {
        let value = item
            .get(merge_key)
            .ok_or_else(|| no_merge_key(item, merge_key))?;
        match merged.iter().position(|o| o.get(merge_key) == Some(value)) {
            Some(i) => {
                let Value::Object(o) = std::mem::take(&mut merged[i]) else {
                    return Err(Error::Unprocessable(format!(
                        "value for key {i} is not a map"
                    )));
                };
                let Value::Object(p) = item.clone() else {
                    unreachable!("element kind is object")
                };
                merged[i] = Value::Object(merge_map(o, p, field.ty)?);
                view.set(i, &merged[i]);
            }
            None => {
                if let Some(v) = insert_value(item.clone()) {
                    view.append(&v);
                    merged.push(v);
                }
            }
        }
    }
    let (patch_items, server_only) = partition(merged, &patch, merge_key, true)?;
    let ordered =
        normalize_element_order(patch_items, server_only, &patch, &original, merge_key, true)?;
    Ok((ordered, view.slots))
}

/// Applies the `$patch` items of a merging list: `delete` removes live items with the same
/// key, `replace` makes the rest of the patch the whole list. Returns the (possibly reduced or
/// replaced) live list and the patch items left to merge.
fn split_special_items(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    view: &mut LiveView,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Some(directive) = item.get(DIRECTIVE) else {
            rest.push(item);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let value = item.get(key).ok_or_else(|| no_merge_key(&item, key))?;
                while let Some(k) = original.iter().position(|o| o.get(key) == Some(value)) {
                    original.remove(k);
                    view.delete(k);
                }
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(Error::BadRequest(
                    "merging lists cannot yet be specified in the patch".to_string(),
                ));
            }
            _ => {
                let map = item.as_object().cloned().unwrap_or_default();
                return Err(bad_patch_type(directive, &map));
            }
        }
    }
    if replace {
        view.len = None;
        Ok((rest, Vec::new()))
    } else {
        Ok((original, rest))
    }
}

/// The identity of a list item for ordering: its merge key's value, or itself for scalars.
fn identity<'a>(v: &'a Value, key: &str, is_map: bool) -> Option<&'a Value> {
    if is_map { v.get(key) } else { Some(v) }
}

fn index_in(list: &[Value], v: &Value, key: &str, is_map: bool) -> Option<usize> {
    let id = identity(v, key, is_map);
    list.iter().position(|x| identity(x, key, is_map) == id)
}

/// Splits merged items into those present in `by` (the patch or the order list) and the rest.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    key: &str,
    is_map: bool,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut in_patch = Vec::new();
    let mut server_only = Vec::new();
    for v in merged {
        if is_map && v.get(key).is_none() {
            return Err(no_merge_key(&v, key));
        }
        if index_in(by, &v, key, is_map).is_some() {
            in_patch.push(v);
        } else {
            server_only.push(v);
        }
    }
    Ok((in_patch, server_only))
}

/// Sorts `items` stably by their position in `order` (items not in it go last).
fn sort_by_order(items: &mut [Value], order: &[Value], key: &str, is_map: bool) {
    items.sort_by(|a, b| {
        let ia = index_in(order, a, key, is_map).unwrap_or(usize::MAX);
        let ib = index_in(order, b, key, is_map).unwrap_or(usize::MAX);
        ia.cmp(&ib)
    });
}

fn normalize_element_order(
    mut patch_items: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: &str,
    is_map: bool,
) -> Result<Vec<Value>> {
    if is_map {
        for v in patch_items
            .iter()
            .chain(server_only.iter())
            .chain(patch_order.iter())
        {
            if v.get(key).is_none() {
                return Err(no_merge_key(v, key));
            }
        }
    }
    sort_by_order(&mut patch_items, patch_order, key, is_map);
    sort_by_order(&mut server_only, server_order, key, is_map);
    Ok(merge_sorted(
        server_only,
        patch_items,
        server_order,
        key,
        is_map,
    ))
}

/// Inserts the live-only items (`left`) among the patch items (`right`): at each step the next
/// left item goes first only if the live list has it before the next right item.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: &str,
    is_map: bool,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    index_in(server_order, l, key, is_map),
                    index_in(server_order, r, key, is_map),
                ) {
                    (Some(li), Some(ri)) => li.cmp(&ri) == Ordering::Less,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::schema;
    use super::*;
    use serde_json::json;

    fn smp(kind: &str, live: Value, patch: Value) -> Result<Value> {
        let group = if kind == "Deployment" { "apps" } else { "" };
        let ty = crate::builtin::by_kind(group, kind)
            .merge_schema()
            .unwrap_or(&schema::METADATA_ONLY);
        apply_value(&live, patch, ty)
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "annotations": {"a": "1"}},
            "spec": {
                "replicas": 1,
                "template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "side", "image": "busybox"}
                ]}}
            }
        })
    }

    #[test]
    fn without_lists_or_directives_it_is_a_json_merge_patch() {
        let mut rng = crate::patch::testgen::Rng(0x5eed_1234_abcd_0001);
        for case in 0..2000 {
            let live = rng.object(3);
            let patch = rng.patch(3);
            let mut want = live.clone();
            json_patch::merge(&mut want, &patch);
            let got = apply_value(&live, patch.clone(), &schema::METADATA_ONLY).unwrap();
            assert_eq!(got, want, "case {case}: live {live} patch {patch}");
        }
    }

    #[test]
    fn merging_lists_by_key_keeps_one_item_per_key() {
        let mut rng = crate::patch::testgen::Rng(0x5eed_0000_0000_0002);
        let names = ["a", "b", "c", "d"];
        for case in 0..1000 {
            let mut live_names: Vec<&str> = names.to_vec();
            live_names.retain(|_| rng.below(2) == 0);
            let mut patch_names: Vec<&str> = names.to_vec();
            patch_names.retain(|_| rng.below(2) == 0);
            let live = json!({"spec": {"containers": live_names.iter()
                .map(|n| json!({"name": n, "image": "old", "tty": true})).collect::<Vec<_>>()}});
            let patch = json!({"spec": {"containers": patch_names.iter()
                .map(|n| json!({"name": n, "image": "new"})).collect::<Vec<_>>()}});
            let out = smp("Pod", live, patch.clone()).unwrap();
            let got = out["spec"]["containers"].as_array().unwrap();
            let mut want: Vec<&str> = live_names.clone();
            want.extend(patch_names.iter().filter(|n| !live_names.contains(n)));
            let mut got_names: Vec<&str> =
                got.iter().map(|c| c["name"].as_str().unwrap()).collect();
            got_names.sort_unstable();
            want.sort_unstable();
            assert_eq!(got_names, want, "case {case}: {patch}");
            for c in got {
                let patched = patch_names.contains(&c["name"].as_str().unwrap());
                assert_eq!(c["image"], if patched { "new" } else { "old" });
                // Fields the patch does not mention survive the merge.
                let was_live = live_names.contains(&c["name"].as_str().unwrap());
                assert_eq!(c.get("tty").is_some(), was_live, "case {case}");
            }
        }
    }

    #[test]
    fn kubectl_apply_second_patch() {
        // The body kubectl v1.32 sends on the second client-side apply (wire README §5).
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"replicas": 3, "template": {"spec": {
                "$setElementOrder/containers": [{"name": "web"}],
                "containers": [{"image": "nginx:1.28", "name": "web"}]
            }}}
        });
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        assert_eq!(
            out["metadata"]["annotations"],
            json!({"a": "1", "kubectl.kubernetes.io/last-applied-configuration": "{}"})
        );
        let containers = &out["spec"]["template"]["spec"]["containers"];
        // Merged by name: the image changes, the other fields and the other container stay.
        assert_eq!(
            containers,
            &json!([
                {"name": "web", "image": "nginx:1.28", "ports": [{"containerPort": 80}],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "side", "image": "busybox"}
            ])
        );
    }

    #[test]
    fn set_element_order_reorders_and_interleaves() {
        let live = json!({"spec": {"containers": [
            {"name": "a"}, {"name": "b"}, {"name": "c"}
        ]}});
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "d"}],
            "containers": [{"name": "d", "image": "x"}]
        }});
        let out = smp("Pod", live, patch).unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // c, a, d in the requested order; b (live only) is inserted before the first patch
        // item the live list has after it (c), as Kubernetes' mergeSortedSlice does.
        assert_eq!(names, ["b", "c", "a", "d"]);

        let bad = json!({"spec": {
            "$setElementOrder/containers": [{"name": "a"}],
            "containers": [{"name": "z"}]
        }});
        let e = smp("Pod", json!({"spec": {"containers": []}}), bad).unwrap_err();
        assert!(matches!(e, Error::BadRequest(ref m) if m.starts_with("The order in patch list:")));
        let e = smp(
            "Pod",
            json!({"spec": {}}),
            json!({"spec": {"$setElementOrder/containers": "x"}}),
        )
        .unwrap_err();
        assert_eq!(e, Error::BadRequest(BAD_SET_ELEMENT_ORDER.into()));
    }

    #[test]
    fn set_element_order_after_delete_and_add_orders_like_kubernetes() {
        // Regression: Kubernetes orders by the live array as its in-place merge left it (a
        // deleted, c appended into the freed slot: [b, d, c]), not by the live list as it was.
        let live = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "d"}]}});
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}],
            "containers": [{"name": "c"}, {"name": "a", "$patch": "delete"}]
        }});
        let out = smp("Pod", live, patch).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "b"}, {"name": "d"}, {"name": "c"}])
        );
    }

    #[test]
    fn cordon_and_uncordon() {
        let node =
            json!({"kind": "Node", "metadata": {"name": "n1"}, "spec": {"podCIDR": "10.0.0.0/24"}});
        let out = smp("Node", node, json!({"spec": {"unschedulable": true}})).unwrap();
        assert_eq!(
            out["spec"],
            json!({"podCIDR": "10.0.0.0/24", "unschedulable": true})
        );
        let out = smp("Node", out, json!({"spec": {"unschedulable": null}})).unwrap();
        assert_eq!(out["spec"], json!({"podCIDR": "10.0.0.0/24"}));
    }

    #[test]
    fn set_image_merges_by_container_name() {
        // `kubectl set image deployment/d1 web=nginx:1.29` sends the container with its name.
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:1.29"}
        ]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], "nginx:1.29");
        assert_eq!(c[0]["env"].as_array().unwrap().len(), 2);
        assert_eq!(c[1]["name"], "side");
    }

    #[test]
    fn nested_lists_merge_by_their_own_keys() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
             "ports": [{"containerPort": 443}]}
        ]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        let web = &out["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            web["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "20"}, {"name": "C", "value": "3"}])
        );
        // A new item the live list cannot place goes first, as in Kubernetes.
        assert_eq!(
            web["ports"],
            json!([{"containerPort": 443}, {"containerPort": 80}])
        );
    }

    #[test]
    fn delete_and_replace_items() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "side", "$patch": "delete"}
        ]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "only", "image": "x"}, {"$patch": "replace"}
        ]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "only", "image": "x"}])
        );
        let no_key =
            json!({"spec": {"template": {"spec": {"containers": [{"$patch": "delete"}]}}}});
        assert!(matches!(
            smp("Deployment", deployment(), no_key).unwrap_err(),
            Error::Unprocessable(m) if m.contains("does not contain declared merge key: name")
        ));
        let merge_item =
            json!({"spec": {"template": {"spec": {"containers": [{"$patch": "merge"}]}}}});
        assert_eq!(
            smp("Deployment", deployment(), merge_item).unwrap_err(),
            Error::BadRequest("merging lists cannot yet be specified in the patch".into())
        );
    }

    #[test]
    fn map_directives() {
        let out = smp(
            "Deployment",
            deployment(),
            json!({"metadata": {"annotations": {"$patch": "replace", "b": "2"}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["annotations"], json!({"b": "2"}));
        let out = smp(
            "Deployment",
            deployment(),
            json!({"metadata": {"annotations": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["annotations"], json!({}));
        let out = smp(
            "Deployment",
            deployment(),
            json!({"metadata": {"annotations": {"$patch": "merge", "b": "2"}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["annotations"], json!({"a": "1", "b": "2"}));
        let e = smp(
            "Deployment",
            deployment(),
            json!({"metadata": {"$patch": "explode"}}),
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::BadRequest(m) if m.starts_with("unknown patch type: explode in map: "))
        );
        // A whole-object replace at the top.
        let out = smp(
            "Pod",
            json!({"a": 1, "b": 2}),
            json!({"$patch": "replace", "c": 3}),
        )
        .unwrap();
        assert_eq!(out, json!({"c": 3}));
    }

    #[test]
    fn lists_without_a_strategy_are_replaced() {
        let live = json!({"spec": {"tolerations": [{"key": "a"}], "containers": []}});
        let out = smp(
            "Pod",
            live,
            json!({"spec": {"tolerations": [{"key": "b"}]}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "b"}]));
        let node = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}});
        let out = smp(
            "Node",
            node,
            json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["taints"],
            json!([{"key": "b", "effect": "NoExecute"}])
        );
        let cm = json!({"data": {"x": "1"}, "metadata": {"name": "c"}});
        let out = smp("ConfigMap", cm, json!({"data": {"y": "2"}})).unwrap();
        assert_eq!(out["data"], json!({"x": "1", "y": "2"}));
    }

    #[test]
    fn primitive_lists_finalizers() {
        let live = json!({"metadata": {"finalizers": ["a", "b"]}});
        let out = smp(
            "Pod",
            live.clone(),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
        )
        .unwrap();
        // Union; the patch's items in the patch's order, b kept where it was.
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
        let out = smp(
            "Pod",
            live.clone(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        let out = smp(
            "Pod",
            live.clone(),
            json!({"metadata": {"$setElementOrder/finalizers": ["b", "a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "a"]));
        let e = smp(
            "Pod",
            live,
            json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}),
        )
        .unwrap_err();
        assert_eq!(e, Error::BadRequest(BAD_PRIMITIVE_LIST.into()));
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let live = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}});
        let out = smp(
            "Pod",
            live,
            json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, {"uid": "1", "name": "a2"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "2", "name": "b"}, {"uid": "1", "name": "a2"}])
        );
    }

    #[test]
    fn retain_keys_clears_unlisted_fields() {
        let live = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let out = smp(
            "Deployment",
            live.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let e = smp(
            "Deployment",
            live.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
        )
        .unwrap_err();
        assert_eq!(e, Error::BadRequest(BAD_RETAIN_KEYS.into()));
        let e = smp(
            "Deployment",
            live,
            json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
        )
        .unwrap_err();
        assert_eq!(e, Error::BadRequest(BAD_RETAIN_KEYS.into()));
        // Volumes: retainKeys inside list items switches the volume source.
        let pod = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}});
        let out = smp(
            "Pod",
            pod,
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["configMap", "name"], "configMap": {"name": "cm"}}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "v", "configMap": {"name": "cm"}}])
        );
    }

    #[test]
    fn nulls_and_new_subtrees() {
        let live = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let out = smp(
            "Pod",
            live,
            json!({"metadata": {"labels": {"a": null}, "annotations": {"x": "1", "y": null}},
                   "spec": {"containers": [{"name": "c", "image": null, "$setElementOrder/env": []}]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
        // Nulls and directives in new content are dropped.
        assert_eq!(out["metadata"]["annotations"], json!({"x": "1"}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "c"}]));
    }

    #[test]
    fn type_changes_and_bad_documents() {
        let out = smp(
            "Pod",
            json!({"spec": {"x": [1]}}),
            json!({"spec": {"x": {"a": 1}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["x"], json!({"a": 1}));
        let e = apply(&json!({}), b"[1]", &super::super::generated::CORE_V1_POD).unwrap_err();
        assert_eq!(
            e,
            Error::BadRequest(
                "json: cannot unmarshal array into Go value of type map[string]interface {}".into()
            )
        );
        assert!(matches!(
            apply(&json!({}), b"{", &super::super::generated::CORE_V1_POD),
            Err(Error::BadRequest(_))
        ));
        let e = smp(
            "Pod",
            json!({"metadata": {"finalizers": [["a"]]}}),
            json!({"metadata": {"finalizers": [["b"]]}}),
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::Unprocessable("lists of lists are not supported".into())
        );
        let e = smp(
            "Pod",
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [1]}}),
        )
        .unwrap_err();
        assert_eq!(
            e,
            Error::Unprocessable("list element types are not identical".into())
        );
        let e = smp(
            "Pod",
            json!({"spec": {"containers": [{"name": "a"}]}}),
            json!({"spec": {"containers": [{"image": "x"}]}}),
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::Unprocessable(m) if m.ends_with("does not contain declared merge key: name"))
        );
    }
}

//! The apply schema of a custom kind, read from its structural schema: what server-side apply
//! and managed fields need to know of it, in the same [`Type`] tree the built-in kinds' hand-kept
//! schemas use.
//!
//! Kubernetes turns a definition's schema into structured-merge-diff types: arrays are atomic
//! unless `x-kubernetes-list-type` says `set` or `map` (with `x-kubernetes-list-map-keys`),
//! objects with `additionalProperties` are maps whose entries are owned one by one, objects with
//! `properties` are structs, `x-kubernetes-map-type: atomic` makes either one value. Custom
//! resources are unstructured, so every object and list is [`Field::optional`]: one that a write
//! makes appear is itself owned (`".": {}`), which is why an update's managed fields read
//! `f:spec: {".": {}, ...}` for a custom resource and not for a Deployment. `metadata` keeps
//! the built-in `ObjectMeta` schema.
//!
//! A [`Type`] is `'static`: a tree is made once per distinct shape (only the nodes whose
//! behaviour is not the wildcard's are listed, so it is small) and shared by every later
//! definition with the same shape, as the kinds' names are (see `skiff_meta::intern`). What
//! stays behind is bounded by the distinct shapes ever served.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;
use skiff_meta::intern;

use super::schema::{self, Schema};
use crate::patch::schema::{Field, ListType, OBJECT_META, Type, WILDCARD};

/// What every field a custom type does not list behaves as: optional, with unlisted children.
static UNLISTED: Field = Field {
    name: WILDCARD,
    optional: true,
    ty: Some(&UNLISTED_TYPE),
    ..Field::DEFAULT
};

/// The type of an object with nothing listed: every field is [`UNLISTED`].
static UNLISTED_TYPE: Type = Type {
    fields: std::slice::from_ref(&UNLISTED),
};

/// One node of the tree before it is made `'static`: owned, comparable, so that equal shapes
/// are made once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Node {
    /// The listed fields, by name (the schema's properties are sorted).
    fields: Vec<(String, FieldNode)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FieldNode {
    list: ListNode,
    atomic_map: bool,
    is_map: bool,
    /// The type of the value (of each item, for lists), when it lists anything.
    ty: Option<Node>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ListNode {
    Atomic,
    Set,
    Map(Vec<(String, Option<String>)>),
}

impl FieldNode {
    /// Whether this field behaves as [`UNLISTED`] does, so that it need not be listed.
    fn is_plain(&self) -> bool {
        self.list == ListNode::Atomic && !self.atomic_map && !self.is_map && self.ty.is_none()
    }
}

/// The node of an object's properties: `None` when none of them needs listing.
fn object_node(s: &Schema) -> Option<Node> {
    let fields: Vec<(String, FieldNode)> = s
        .properties
        .iter()
        .map(|(name, p)| (name.clone(), field_node(p)))
        .filter(|(_, f)| !f.is_plain())
        .collect();
    (!fields.is_empty()).then_some(Node { fields })
}

fn field_node(s: &Schema) -> FieldNode {
    let mut node = FieldNode {
        list: ListNode::Atomic,
        atomic_map: false,
        is_map: false,
        ty: None,
    };
    match s.type_ {
        Some(schema::Type::Array) => {
            let items = s.items.as_deref();
            node.list = match s.list_type.as_deref() {
                Some("set") => ListNode::Set,
                Some("map") => ListNode::Map(
                    s.list_map_keys
                        .iter()
                        .map(|k| (k.clone(), key_default(items, k)))
                        .collect(),
                ),
                _ => ListNode::Atomic,
            };
            // Only the items of a map-list are walked; set items are scalars, atomic lists leaves.
            if matches!(node.list, ListNode::Map(_)) {
                node.ty = items.and_then(object_node);
            }
        }
        Some(schema::Type::Object) | None => {
            if s.map_type.as_deref() == Some("atomic") {
                node.atomic_map = true;
                return node;
            }
            node.is_map = s.additional_properties.is_some() && s.properties.is_empty();
            node.ty = object_node(s);
        }
        Some(_) => {}
    }
    node
}

/// A map-list key's default, as the key of an item without it is filled in (string defaults;
/// a key with another default is treated as required).
fn key_default(items: Option<&Schema>, key: &str) -> Option<String> {
    match items?.properties.get(key)?.default.as_ref()? {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Makes a node `'static`, its fields followed by the wildcard.
fn leak_type(node: &Node, root: bool) -> &'static Type {
    let mut fields: Vec<Field> = node
        .fields
        .iter()
        .map(|(name, f)| leak_field(name, f))
        .collect();
    if root {
        fields.push(Field {
            name: "metadata",
            ty: Some(&OBJECT_META),
            ..Field::DEFAULT
        });
    }
    fields.push(UNLISTED);
    Box::leak(Box::new(Type {
        fields: Box::leak(fields.into_boxed_slice()),
    }))
}

fn leak_field(name: &str, f: &FieldNode) -> Field {
    let list_type = match &f.list {
        ListNode::Atomic => ListType::Atomic,
        ListNode::Set => ListType::Set,
        ListNode::Map(keys) => {
            let keys: Vec<(&'static str, Option<&'static str>)> = keys
                .iter()
                .map(|(k, d)| (intern::str(k), d.as_deref().map(intern::str)))
                .collect();
            ListType::Map(Box::leak(keys.into_boxed_slice()))
        }
    };
    Field {
        name: intern::str(name),
        list_type,
        atomic_map: f.atomic_map,
        is_map: f.is_map,
        optional: true,
        ty: Some(match &f.ty {
            Some(node) => leak_type(node, false),
            None => &UNLISTED_TYPE,
        }),
        ..Field::DEFAULT
    }
}

/// The apply schema of a custom resource whose version has this structural schema.
pub fn apply_schema(root: &Schema) -> &'static Type {
    static MADE: OnceLock<Mutex<HashMap<Node, &'static Type>>> = OnceLock::new();
    // The root's metadata is listed by `leak_type`, whatever the schema says of it.
    let mut node = object_node(root).unwrap_or(Node { fields: Vec::new() });
    node.fields.retain(|(name, _)| name != "metadata");
    let mut made = MADE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    made.entry(node)
        .or_insert_with_key(|node| leak_type(node, true))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::patch::schema::field_of;

    fn schema(v: Value) -> Schema {
        Schema::parse(&v, "schema").unwrap()
    }

    fn widget() -> Schema {
        schema(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                             "items": {"type": "string"}},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port", "protocol"],
                              "items": {"type": "object", "required": ["port"], "properties": {
                                  "port": {"type": "integer"},
                                  "protocol": {"type": "string", "default": "TCP"},
                                  "hosts": {"type": "array", "x-kubernetes-list-type": "set",
                                            "items": {"type": "string"}}}}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                                 "properties": {"app": {"type": "string"}}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "image": {"type": "string"}}},
                "status": {"type": "object", "properties": {
                    "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                                   "x-kubernetes-list-map-keys": ["type"],
                                   "items": {"type": "object", "properties": {
                                       "type": {"type": "string"}}}}}}
            }
        }))
    }

    #[test]
    fn list_and_map_types_come_from_the_schema() {
        let root = apply_schema(&widget());
        let spec = root.field("spec");
        assert!(spec.optional);
        assert_eq!(field_of(spec.ty, "tags").list_type, ListType::Set);
        assert_eq!(
            field_of(spec.ty, "ports").list_type,
            ListType::Map(&[("port", None), ("protocol", Some("TCP"))])
        );
        let item = field_of(spec.ty, "ports").ty;
        assert_eq!(field_of(item, "hosts").list_type, ListType::Set);
        assert_eq!(field_of(spec.ty, "args").list_type, ListType::Atomic);
        assert!(field_of(spec.ty, "selector").atomic_map);
        assert!(field_of(spec.ty, "env").is_map);
        assert_eq!(
            field_of(root.field("status").ty, "conditions").list_type,
            ListType::Map(&[("type", None)])
        );
        // Metadata is the built-in ObjectMeta's, not optional.
        assert!(std::ptr::eq(
            root.field("metadata").ty.unwrap(),
            &OBJECT_META
        ));
        assert!(!root.field("metadata").optional);
    }

    #[test]
    fn unlisted_fields_are_optional_all_the_way_down() {
        let root = apply_schema(&widget());
        let unknown = field_of(field_of(root.field("spec").ty, "image").ty, "nested");
        assert!(unknown.optional);
        assert_eq!(unknown.list_type, ListType::Atomic);
        assert!(root.field("other").optional);
    }

    #[test]
    fn equal_shapes_share_one_tree() {
        let a = apply_schema(&widget());
        let b = apply_schema(&widget());
        assert!(std::ptr::eq(a, b));
        let other = apply_schema(&schema(json!({"type": "object", "properties": {
            "spec": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
        }})));
        assert!(!std::ptr::eq(a, other));
    }
}

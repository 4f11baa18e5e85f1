//! Field ownership: sets of field paths in the `FieldsV1` trie format (`f:`, `k:`, `v:`), the
//! comparison of two objects into added / modified / removed fields, and the
//! `metadata.managedFields` entries, as `k8s.io/apimachinery/pkg/util/managedfields` and
//! `sigs.k8s.io/structured-merge-diff` keep them.
//!
//! ```text
//! {"f:metadata":{"f:labels":{".":{},"f:app":{}}},
//!  "f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{},"f:name":{}}}}}
//!   f:<field>   a field of an object          k:<json>  a list item, by its key fields
//!   v:<json>    an item of a set (finalizers) ".":{}     the node itself is in the set
//! ```

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use skiff_meta::ResourceInfo;

use crate::Kind;

use super::Options;
use super::schema::{Field, ListType, field_of};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of an object (`f:name`).
    Field(String),
    /// A list item identified by its key fields, as compact JSON with sorted keys
    /// (`k:{"name":"web"}`).
    Key(String),
    /// An item of a set-list, as JSON (`v:"foregroundDeletion"`).
    Value(String),
    /// A list item by position (`i:0`), only ever read from foreign entries.
    Index(usize),
}

impl PathElement {
    /// The `FieldsV1` spelling (`f:name`, `k:{...}`, `v:...`, `i:0`).
    pub fn encode(&self) -> String {
        let (tag, text) = match self {
            PathElement::Field(f) => ("f:", f.as_str()),
            PathElement::Key(k) => ("k:", k.as_str()),
            PathElement::Value(v) => ("v:", v.as_str()),
            PathElement::Index(i) => return format!("i:{i}"),
        };
        let mut out = String::with_capacity(tag.len() + text.len());
        out.push_str(tag);
        out.push_str(text);
        out
    }

    /// Parses the `FieldsV1` spelling.
    pub fn decode(s: &str) -> Option<PathElement> {
        let (kind, rest) = s.split_at_checked(2)?;
        match kind {
            "f:" => Some(PathElement::Field(rest.to_string())),
            "k:" => {
                let v: Value = serde_json::from_str(rest).ok()?;
                v.is_object().then(|| PathElement::Key(v.to_string()))
            }
            "v:" => {
                let v: Value = serde_json::from_str(rest).ok()?;
                Some(PathElement::Value(v.to_string()))
            }
            "i:" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }
}

impl std::fmt::Display for PathElement {
    /// As structured-merge-diff prints paths in conflict messages: `.name`,
    /// `[name="web"]`, `[="x"]`, `[0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(k) => {
                let fields: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the object root.
pub type Path = Vec<PathElement>;

/// A path as conflict messages print it (`.spec.containers[name="web"].image`).
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of field paths, kept as a trie.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        FieldSet::default()
    }

    /// Whether the set has no paths.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds a path.
    pub fn insert(&mut self, path: &[PathElement]) {
        let mut node = self;
        for pe in path {
            // The element is copied only for a node not yet in the trie: every insert walks the
            // nodes its siblings made.
            if !node.children.contains_key(pe) {
                node.children.insert(pe.clone(), FieldSet::new());
            }
            node = node
                .children
                .get_mut(pe)
                .expect("the node was there or has just been added");
        }
        node.member = true;
    }

    /// Whether the set has exactly this path.
    pub fn contains(&self, path: &[PathElement]) -> bool {
        self.subtree(path).is_some_and(|n| n.member)
    }

    /// The node at `path` (its members are the paths below it), if any path goes through it.
    pub fn subtree(&self, path: &[PathElement]) -> Option<&FieldSet> {
        let mut node = self;
        for pe in path {
            node = node.children.get(pe)?;
        }
        Some(node)
    }

    /// Whether the set has `path` or any path below it.
    pub fn has_prefix(&self, path: &[PathElement]) -> bool {
        self.subtree(path).is_some_and(|n| !n.is_empty())
    }

    /// The paths of the set, in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        self.collect_paths(&mut prefix, &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    fn prune(mut self) -> Self {
        self.children.retain(|_, c| !c.is_empty());
        self
    }

    /// The paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.extend(other);
        out
    }

    /// Adds the paths of `other`, in place: [`FieldSet::union`] for a set the caller owns.
    pub fn extend(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (pe, c) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.extend(c),
                None => {
                    self.children.insert(pe.clone(), c.clone());
                }
            }
        }
        self.children.retain(|_, c| !c.is_empty());
    }

    /// Takes the paths of `other` out, in place: [`FieldSet::difference`] for a set the caller
    /// owns.
    pub fn remove_all(&mut self, other: &FieldSet) {
        self.member &= !other.member;
        for (pe, o) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                mine.remove_all(o);
            }
        }
        self.children.retain(|_, c| !c.is_empty());
    }

    /// The paths of this set that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.remove_all(other);
        out
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            member: self.member && other.member,
            children: self
                .children
                .iter()
                .filter_map(|(pe, c)| {
                    other
                        .children
                        .get(pe)
                        .map(|o| (pe.clone(), c.intersection(o)))
                })
                .collect(),
        }
        .prune()
    }

    /// The set in the `FieldsV1` JSON format.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.values().all(FieldSet::is_empty) {
            m.insert(".".to_string(), json!({}));
        }
        for (pe, c) in &self.children {
            if !c.is_empty() {
                m.insert(pe.encode(), c.to_fields_v1());
            }
        }
        Value::Object(m)
    }

    /// Reads a set in the `FieldsV1` JSON format.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Value::Object(m) = v else {
            return Err(format!("expected an object in FieldsV1, got {v}"));
        };
        let mut out = FieldSet::new();
        if m.is_empty() {
            out.member = true;
        }
        for (k, c) in m {
            if k == "." {
                out.member = true;
                continue;
            }
            let pe = PathElement::decode(k).ok_or_else(|| format!("invalid path element {k:?}"))?;
            out.children.insert(pe, FieldSet::from_fields_v1(c)?);
        }
        Ok(out)
    }
}

/// The key of a map-list item (`k:{...}`): its key fields, missing ones filled with their
/// defaults. `None` when a key without default is missing.
pub fn item_key(item: &Value, keys: &[(&str, Option<&str>)]) -> Option<PathElement> {
    let mut m = Map::new();
    for (k, default) in keys {
        match item.get(*k) {
            Some(v) if !v.is_null() => {
                m.insert((*k).to_string(), v.clone());
            }
            _ => {
                m.insert((*k).to_string(), Value::String((*default)?.to_string()));
            }
        }
    }
    Some(PathElement::Key(Value::Object(m).to_string()))
}

/// The field describing the items of a list field.
pub(crate) fn item_field(list: &Field) -> Field {
    Field {
        ty: list.ty,
        ..Field::DEFAULT
    }
}

/// The root field of a kind: its apply schema.
pub(crate) fn root_field(kind: &dyn Kind) -> Field {
    Field {
        ty: Some(kind.apply_schema()),
        ..Field::DEFAULT
    }
}

/// The set of every field a value sets (structured-merge-diff's `ToFieldSet`): scalars, atomic
/// lists and maps, empty objects and nulls are members; map-list items are members and are
/// walked; set-list items are members.
pub fn to_field_set(v: &Value, root: &Field) -> Result<FieldSet, String> {
    let mut out = FieldSet::new();
    let mut path = Vec::new();
    collect(v, root, &mut path, &mut out)?;
    Ok(out)
}

fn collect(v: &Value, field: &Field, path: &mut Path, out: &mut FieldSet) -> Result<(), String> {
    match v {
        Value::Object(m) if !field.atomic_map => {
            for (k, c) in m {
                path.push(PathElement::Field(k.clone()));
                collect(c, field_of(field.ty, k), path, out)?;
                // A map's entries are members themselves, as struct fields are not.
                if field.is_map || c.is_null() || c.as_object().is_some_and(Map::is_empty) {
                    out.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) => match field.list_type {
            ListType::Atomic => out.insert(path),
            ListType::Set => {
                for it in items {
                    path.push(PathElement::Value(it.to_string()));
                    out.insert(path);
                    path.pop();
                }
            }
            ListType::Map(keys) => {
                let mut seen = Vec::new();
                let item = item_field(field);
                for (i, it) in items.iter().enumerate() {
                    let pe = item_key(it, keys).ok_or_else(|| {
                        format!(
                            "{}: element {i}: associative list with keys has an element that omits key field {:?} (and doesn't have default value)",
                            path_string(path),
                            keys.iter()
                                .find(|(k, d)| it.get(*k).is_none() && d.is_none())
                                .map(|(k, _)| *k)
                                .unwrap_or_default()
                        )
                    })?;
                    path.push(pe.clone());
                    if !seen.contains(&pe) {
                        seen.push(pe);
                        collect(it, &item, path, out)?;
                    }
                    out.insert(path);
                    path.pop();
                }
            }
        },
        _ => {
            if !path.is_empty() {
                out.insert(path);
            }
        }
    }
    Ok(())
}

/// The difference between two versions of an object, as field sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Fields (and object nodes, list items) only in the new version.
    pub added: FieldSet,
    /// Leaf fields with a different value.
    pub modified: FieldSet,
    /// Fields only in the old version.
    pub removed: FieldSet,
}

impl Comparison {
    /// `modified ∪ added`: what the writer changed.
    pub fn changed(&self) -> FieldSet {
        self.modified.union(&self.added)
    }

    /// [`Comparison::changed`] and `removed`, taking the comparison apart instead of copying
    /// its sets.
    fn into_changed_and_removed(self) -> (FieldSet, FieldSet) {
        let Comparison {
            mut added,
            modified,
            removed,
        } = self;
        added.extend(&modified);
        (added, removed)
    }
}

/// Compares two versions of an object (structured-merge-diff's `Compare`).
pub fn compare(old: &Value, new: &Value, root: &Field) -> Comparison {
    let mut out = Comparison::default();
    let mut path = Vec::new();
    compare_node(Some(old), Some(new), root, &mut path, &mut out, false);
    out
}

/// [`compare`] as if neither version had `metadata.managedFields`, without copying either to
/// drop them.
fn compare_without_managed_fields(old: &Value, new: &Value, root: &Field) -> Comparison {
    let mut out = Comparison::default();
    let mut path = Vec::new();
    compare_node(Some(old), Some(new), root, &mut path, &mut out, true);
    out
}

/// Whether `key` under `path` is `metadata.managedFields`.
fn is_managed_fields(path: &Path, key: &str) -> bool {
    key == "managedFields" && matches!(path.as_slice(), [PathElement::Field(f)] if f == "metadata")
}

fn is_granular(v: &Value, field: &Field) -> bool {
    match v {
        Value::Object(_) => !field.atomic_map,
        Value::Array(_) => field.list_type != ListType::Atomic,
        _ => false,
    }
}

fn compare_node(
    l: Option<&Value>,
    r: Option<&Value>,
    field: &Field,
    path: &mut Path,
    out: &mut Comparison,
    skip_managed_fields: bool,
) {
    let granular = match (l, r) {
        (Some(a), Some(b)) => {
            std::mem::discriminant(a) == std::mem::discriminant(b) && is_granular(a, field)
        }
        (Some(a), None) | (None, Some(a)) => is_granular(a, field),
        (None, None) => return,
    };
    if !granular {
        match (l, r) {
            (None, Some(_)) => out.added.insert(path),
            (Some(_), None) => out.removed.insert(path),
            (Some(a), Some(b)) if a != b && !path.is_empty() => out.modified.insert(path),
            _ => {}
        }
        return;
    }
    let empty_obj = Map::new();
    let empty_arr = Vec::new();
    match l.or(r) {
        Some(Value::Object(_)) => {
            let lm = l.and_then(Value::as_object).unwrap_or(&empty_obj);
            let rm = r.and_then(Value::as_object).unwrap_or(&empty_obj);
            // Every key of either side once; the order does not matter, the results are sets.
            let keys = lm.keys().chain(rm.keys().filter(|k| !lm.contains_key(*k)));
            for k in keys {
                if skip_managed_fields && is_managed_fields(path, k) {
                    continue;
                }
                path.push(PathElement::Field(k.clone()));
                compare_node(
                    lm.get(k),
                    rm.get(k),
                    field_of(field.ty, k),
                    path,
                    out,
                    skip_managed_fields,
                );
                path.pop();
            }
        }
        Some(Value::Array(_)) => {
            let la = l.and_then(Value::as_array).unwrap_or(&empty_arr);
            let ra = r.and_then(Value::as_array).unwrap_or(&empty_arr);
            match field.list_type {
                ListType::Set => {
                    for v in ra.iter().filter(|v| !la.contains(v)) {
                        path.push(PathElement::Value(v.to_string()));
                        out.added.insert(path);
                        path.pop();
                    }
                    for v in la.iter().filter(|v| !ra.contains(v)) {
                        path.push(PathElement::Value(v.to_string()));
                        out.removed.insert(path);
                        path.pop();
                    }
                }
                ListType::Map(keys) => {
                    let index = |a: &'_ [Value]| -> Vec<(PathElement, Value)> {
                        let mut v: Vec<(PathElement, Value)> = Vec::new();
                        for it in a {
                            if let Some(pe) = item_key(it, keys)
                                && !v.iter().any(|(p, _)| *p == pe)
                            {
                                v.push((pe, it.clone()));
                            }
                        }
                        v
                    };
                    let li = index(la);
                    let ri = index(ra);
                    let mut pes: Vec<&PathElement> = li.iter().map(|(p, _)| p).collect();
                    for (p, _) in &ri {
                        if !pes.contains(&p) {
                            pes.push(p);
                        }
                    }
                    let item = item_field(field);
                    for pe in pes {
                        let lv = li.iter().find(|(p, _)| p == pe).map(|(_, v)| v);
                        let rv = ri.iter().find(|(p, _)| p == pe).map(|(_, v)| v);
                        path.push(pe.clone());
                        compare_node(lv, rv, &item, path, out, skip_managed_fields);
                        path.pop();
                    }
                }
                ListType::Atomic => unreachable!("atomic lists are leaves"),
            }
        }
        _ => unreachable!("granular nodes are objects or lists"),
    }
    // A list item, a Go map or an optional node that appears or disappears is itself a member;
    // a struct is not (Kubernetes compares typed objects, where structs always exist).
    let owned_node = field.is_map
        || field.optional
        || matches!(
            path.last(),
            Some(PathElement::Key(_) | PathElement::Value(_) | PathElement::Index(_))
        );
    if owned_node {
        if l.is_none() {
            out.added.insert(path);
        } else if r.is_none() {
            out.removed.insert(path);
        }
    }
}

/// The fields no manager owns: identity and bookkeeping of the object (`stripMeta`).
pub fn stripped_fields() -> FieldSet {
    STRIPPED_FIELDS.clone()
}

/// [`stripped_fields`], built once: every write takes them out of what it changed.
static STRIPPED_FIELDS: std::sync::LazyLock<FieldSet> = std::sync::LazyLock::new(build_stripped);

fn build_stripped() -> FieldSet {
    let mut s = FieldSet::new();
    s.insert(&[PathElement::Field("apiVersion".into())]);
    s.insert(&[PathElement::Field("kind".into())]);
    s.insert(&[PathElement::Field("metadata".into())]);
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        s.insert(&[
            PathElement::Field("metadata".into()),
            PathElement::Field(f.into()),
        ]);
    }
    s
}

/// Restricts a set to what a write through `subresource` can own: the main resource of a kind
/// with a status subresource does not own `status` (Kubernetes resets it there), the status
/// subresource owns only `status`.
pub(crate) fn scope(set: FieldSet, resource: &ResourceInfo, subresource: Option<&str>) -> FieldSet {
    let status = PathElement::Field("status".into());
    let mut scoped = match subresource {
        None if resource.subresource("status").is_some() => {
            let mut s = set;
            s.children.remove(&status);
            s
        }
        Some("status") => {
            let mut s = set;
            let mut only = FieldSet::new();
            if let Some(st) = s.children.remove(&status) {
                only.children.insert(status, st);
            }
            only
        }
        _ => set,
    };
    scoped.remove_all(&STRIPPED_FIELDS);
    scoped
}

/// `Apply` or `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// A server-side apply.
    Apply,
    /// Any other write.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The manager's name.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The apiVersion the fields are expressed in.
    pub api_version: String,
    /// The subresource written through, if any.
    pub subresource: Option<String>,
    /// When the entry last changed, as RFC 3339 text.
    pub time: Option<String>,
    /// The fields owned.
    pub fields: FieldSet,
}

impl Entry {
    /// Whether two entries belong to the same manager identity (Kubernetes'
    /// `BuildManagerIdentifier`: name, operation, subresource, and the apiVersion for updates).
    pub fn same_identity(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// How conflict messages name the manager (`"kubectl"`, or `"kubectl-client-side-apply"
    /// using apps/v1` for updates).
    pub fn display_name(&self) -> String {
        let mut s = skiff_meta::status::quote(&self.manager);
        if let Some(sub) = &self.subresource {
            s = format!("{s} with subresource {}", skiff_meta::status::quote(sub));
        }
        if self.operation == Operation::Update {
            s = format!("{s} using {}", self.api_version);
        }
        s
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), self.manager.clone().into());
        m.insert("operation".into(), self.operation.as_str().into());
        m.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(t) = &self.time {
            m.insert("time".into(), t.clone().into());
        }
        m.insert("fieldsType".into(), "FieldsV1".into());
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), s.clone().into());
        }
        Value::Object(m)
    }

    fn from_json(v: &Value) -> Result<Entry, String> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let operation = match s("operation").as_deref() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version = s("apiVersion").filter(|a| !a.is_empty());
        let Some(api_version) = api_version else {
            return Err("apiVersion must not be empty".into());
        };
        match s("fieldsType").as_deref() {
            Some("FieldsV1") => {}
            Some("") | None => return Err("missing fieldsType in managed fields entry".into()),
            Some(other) => {
                return Err(format!(
                    "invalid fieldsType {other:?} in managed fields entry"
                ));
            }
        }
        let fields = match v.get("fieldsV1") {
            Some(f) => FieldSet::from_fields_v1(f)?,
            None => FieldSet::new(),
        };
        Ok(Entry {
            manager: s("manager").unwrap_or_default(),
            operation,
            api_version,
            subresource: s("subresource").filter(|x| !x.is_empty()),
            time: s("time"),
            fields,
        })
    }
}

/// `metadata.<field>` of an object (`Value::pointer` without parsing a pointer and copying its
/// parts on every write).
fn metadata_field<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("metadata")?.get(field)
}

/// Decodes `metadata.managedFields`; an invalid list is an error.
pub fn decode(obj: &Value) -> Result<Vec<Entry>, String> {
    match metadata_field(obj, "managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(Entry::from_json).collect(),
        Some(other) => Err(format!("managedFields must be a list, got {other}")),
    }
}

/// Writes the entries, sorted as Kubernetes sorts them (Apply before Update, then by time,
/// manager, apiVersion, subresource), into `metadata.managedFields`, dropping empty entries.
pub fn encode(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (
            a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = obj.as_object_mut().map(|o| {
        o.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
    }) else {
        return;
    };
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

/// RFC 3339 with seconds, as `metav1.Time` serialises.
pub(crate) fn format_time(t: jiff::Timestamp) -> String {
    let secs = jiff::Timestamp::from_second(t.as_second()).unwrap_or(t);
    // `metav1.Time`'s RFC 3339 in UTC, whole seconds: `2026-12-08T01:02:03Z`.
    secs.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(crate) fn api_version_of(obj: &Value, resource: &ResourceInfo) -> String {
    obj.get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| resource.api_version())
}

/// The managed fields an update starts from: the ones the request carries when it sets them
/// (`[]` resets them), else the live object's (`decodeLiveOrNew`).
fn entries_for_update(live: Option<&Value>, new: &Value) -> Vec<Entry> {
    match metadata_field(new, "managedFields") {
        Some(Value::Array(a)) if a.is_empty() => return Vec::new(),
        Some(Value::Array(a)) if a.len() == 1 && a[0] == json!({}) => return Vec::new(),
        _ => {}
    }
    match decode(new) {
        Ok(e) if !e.is_empty() => e,
        _ => live.and_then(|l| decode(l).ok()).unwrap_or_default(),
    }
}

/// Records a non-apply write (create, update, JSON / merge / strategic patch) in
/// `metadata.managedFields` of `new`: the fields it changed become owned by an `Update` entry
/// of `options.field_manager` and are taken from every other manager; removed fields are
/// dropped from every set. `live` is `None` for a create.
///
/// As in Kubernetes, an existing object (one with a uid) that has no managed fields stays
/// untracked, and a request that sets `metadata.managedFields` itself (kubectl's migration to
/// server-side apply) has them taken as given before this write is recorded.
pub fn record_update(
    kind: &dyn Kind,
    live: Option<&Value>,
    mut new: Value,
    options: &Options<'_>,
) -> Value {
    let resource = kind.info();
    let mut entries = entries_for_update(live, &new);
    let live_uid = live
        .and_then(|l| metadata_field(l, "uid"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if entries.is_empty() && !live_uid.is_empty() {
        encode(&mut new, Vec::new());
        return new;
    }
    let root = root_field(kind);
    // The new object's managed fields are replaced below (they were read above): dropped now,
    // both versions compare without them and neither is copied.
    if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let empty = json!({});
    let (changed, removed) = compare_without_managed_fields(live.unwrap_or(&empty), &new, &root)
        .into_changed_and_removed();
    let changed = scope(changed, resource, options.subresource);
    let removed = scope(removed, resource, options.subresource);
    let mut me = Entry {
        manager: options.field_manager.to_string(),
        operation: Operation::Update,
        api_version: api_version_of(&new, resource),
        subresource: options.subresource.map(str::to_string),
        time: Some(format_time(options.now)),
        fields: FieldSet::new(),
    };
    let mut mine: Option<Entry> = None;
    let mut out = Vec::with_capacity(entries.len() + 1);
    for mut e in entries.drain(..) {
        if e.same_identity(&me) {
            mine = Some(e);
            continue;
        }
        e.fields.remove_all(&changed);
        e.fields.remove_all(&removed);
        out.push(e);
    }
    match mine {
        Some(mut prev) if changed.is_empty() => {
            prev.fields.remove_all(&removed);
            out.push(prev);
        }
        Some(prev) => {
            me.fields = prev.fields;
            me.fields.remove_all(&removed);
            me.fields.extend(&changed);
            out.push(me);
        }
        None => {
            me.fields = changed;
            out.push(me);
        }
    }
    out.retain(|e| !e.fields.is_empty());
    let out = cap_update_managers(out);
    encode(&mut new, out);
    new
}

/// At most this many `Update` entries are kept; older ones are folded into
/// [`ANCIENT_CHANGES`] (Kubernetes' `DefaultMaxUpdateManagers`).
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager older `Update` entries are folded into.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// Folds the oldest `Update` entries, per apiVersion, into an `ancient-changes` entry until at
/// most [`MAX_UPDATE_MANAGERS`] remain (`capManagersManager`).
fn cap_update_managers(entries: Vec<Entry>) -> Vec<Entry> {
    let mut slots: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
    let mut updaters: Vec<usize> = slots
        .iter()
        .enumerate()
        .filter(|(_, e)| e.as_ref().is_some_and(|e| e.operation == Operation::Update))
        .map(|(i, _)| i)
        .collect();
    let mut length = updaters.len();
    if length <= MAX_UPDATE_MANAGERS {
        return slots.into_iter().flatten().collect();
    }
    updaters.sort_by(|&a, &b| {
        let (a, b) = (slots[a].as_ref(), slots[b].as_ref());
        let key = |e: Option<&Entry>| {
            e.map(|e| {
                (
                    e.time.clone(),
                    e.manager.clone(),
                    e.api_version.clone(),
                    e.subresource.clone(),
                )
            })
        };
        key(a).cmp(&key(b))
    });
    // apiVersion -> the slot of the first (oldest) entry, which becomes the bucket.
    let mut first: Vec<(String, usize, bool)> = Vec::new();
    for &i in &updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(entry) = slots[i].clone() else {
            continue;
        };
        match first.iter_mut().find(|(v, _, _)| *v == entry.api_version) {
            Some((_, bucket, renamed)) => {
                let b = slots[*bucket].as_mut().expect("a bucket slot stays filled");
                if !*renamed {
                    b.manager = ANCIENT_CHANGES.to_string();
                    b.subresource = None;
                    *renamed = true;
                }
                b.fields = entry.fields.union(&b.fields);
                b.time = entry.time.clone();
                slots[i] = None;
                length -= 1;
            }
            None => first.push((entry.api_version.clone(), i, false)),
        }
    }
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    fn deploy() -> &'static dyn Kind {
        &crate::builtin::deployment::Deployment
    }

    fn opts(m: &str) -> Options<'_> {
        Options {
            field_manager: m,
            force: false,
            subresource: None,
            now: "2026-11-30T10:00:00.5Z".parse().unwrap(),
        }
    }

    #[test]
    fn fields_v1_round_trip_and_format() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:finalizers": {"v:\"a\"": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}
        });
        let s = FieldSet::from_fields_v1(&v).unwrap();
        assert_eq!(s.to_fields_v1(), v);
        let web = PathElement::Key(r#"{"name":"web"}"#.into());
        assert!(s.contains(&[f("spec"), f("containers"), web.clone(), f("image")]));
        assert!(s.contains(&[f("spec"), f("containers"), web.clone()]));
        assert!(!s.contains(&[f("spec"), f("containers")]));
        assert_eq!(
            path_string(&[f("spec"), f("containers"), web, f("image")]),
            r#".spec.containers[name="web"].image"#
        );
        assert_eq!(
            path_string(&[
                f("metadata"),
                f("finalizers"),
                PathElement::Value("\"a\"".into())
            ]),
            r#".metadata.finalizers[="a"]"#
        );
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&[f("a"), f("b")]);
        a.insert(&[f("a"), f("c")]);
        let mut b = FieldSet::new();
        b.insert(&[f("a"), f("c")]);
        b.insert(&[f("d")]);
        assert_eq!(a.intersection(&b).paths(), vec![vec![f("a"), f("c")]]);
        assert_eq!(a.difference(&b).paths(), vec![vec![f("a"), f("b")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        assert!(a.difference(&a).is_empty());
        assert!(a.has_prefix(&[f("a")]) && !a.has_prefix(&[f("d")]));
    }

    #[test]
    fn field_set_of_an_applied_deployment() {
        let root = root_field(deploy());
        let config = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "labels": {"app": "web"}, "finalizers": ["x"]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [
                        {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}],
                         "args": ["a", "b"], "resources": {}}
                     ], "tolerations": [{"key": "k"}]}}}
        });
        let set = to_field_set(&config, &root).unwrap();
        let set = set.difference(&stripped_fields());
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"x\"": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {"f:spec": {
                        "f:containers": {"k:{\"name\":\"web\"}": {
                            ".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                            "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}},
                            "f:resources": {}
                        }},
                        "f:tolerations": {}
                    }}
                }
            })
        );
        let bad = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let e = to_field_set(&bad, &root).unwrap_err();
        assert!(e.contains("omits key field \"name\""), "{e}");
    }

    #[test]
    fn compare_finds_added_modified_removed() {
        let root = root_field(deploy());
        let old = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "v1"}]}}}});
        let new = json!({"metadata": {"labels": {"a": "1", "c": "3"}, "annotations": {"x": "y"}},
                         "spec": {"template": {"spec": {"containers": [
                            {"name": "web", "image": "v2"}, {"name": "side", "image": "s"}]}}}});
        let c = compare(&old, &new, &root);
        let web = PathElement::Key(r#"{"name":"web"}"#.into());
        let side = PathElement::Key(r#"{"name":"side"}"#.into());
        let containers = [f("spec"), f("template"), f("spec"), f("containers")];
        assert!(
            c.modified
                .contains(&[&containers[..], &[web, f("image")]].concat())
        );
        assert!(
            c.added
                .contains(&[&containers[..], std::slice::from_ref(&side)].concat())
        );
        assert!(
            c.added
                .contains(&[&containers[..], &[side, f("image")]].concat())
        );
        assert!(c.added.contains(&[f("metadata"), f("annotations")]));
        assert!(!c.added.contains(&[f("spec")]), "structs are not members");
        assert!(c.added.contains(&[f("metadata"), f("labels"), f("c")]));
        assert!(c.removed.contains(&[f("metadata"), f("labels"), f("b")]));
        assert!(!c.modified.contains(&[f("metadata"), f("labels"), f("a")]));
    }

    #[test]
    fn create_records_every_field_with_dot_entries() {
        let new = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
            "status": {"replicas": 0}
        });
        let out = record_update(deploy(), None, new, &opts("kubectl-create"));
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
                "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}
                    }}}}
                }
            }])
        );
    }

    #[test]
    fn pointers_and_omitted_lists_that_appear_are_owned_as_kubernetes_records_them() {
        // As kube-apiserver records a StatefulSet created by `kubectl create`: the pointer
        // `rollingUpdate` and the `omitempty` list `ports` are members themselves when they
        // appear; the value struct `updateStrategy` and the always-present `containers` are not.
        let new = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                     "template": {"spec": {"containers": [{"name": "web", "image": "nginx",
                         "ports": [{"containerPort": 80, "name": "web", "protocol": "TCP"}]}]}}}
        });
        let out = record_update(
            &*crate::builtin::by_kind("apps", "StatefulSet"),
            None,
            new,
            &opts("kubectl"),
        );
        assert_eq!(
            out["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {
                "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                    ".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}}
                }}}},
                "f:updateStrategy": {"f:rollingUpdate": {".": {}, "f:partition": {}}, "f:type": {}}
            }})
        );
    }

    #[test]
    fn updates_take_fields_from_other_managers() {
        let created = record_update(
            deploy(),
            None,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "d1", "uid": "u1"}, "spec": {"replicas": 1, "paused": false}}),
            &opts("kubectl-create"),
        );
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(3);
        scaled["spec"].as_object_mut().unwrap().remove("paused");
        let out = record_update(deploy(), Some(&created), scaled, &opts("kubectl-scale"));
        let entries = decode(&out).unwrap();
        assert_eq!(
            entries.len(),
            1,
            "kubectl-create lost both fields: {entries:?}"
        );
        assert_eq!(entries[0].manager, "kubectl-scale");
        assert_eq!(
            entries[0].fields.to_fields_v1(),
            json!({"f:spec": {"f:replicas": {}}})
        );
        // A no-op write keeps the entries as they are.
        let again = record_update(deploy(), Some(&out), out.clone(), &opts("other"));
        assert_eq!(again, out);
        // Managed fields that differ between the versions are bookkeeping, not a change: only
        // the label is the writer's; the request's entries are taken as given.
        let mut relabelled = out.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        relabelled["metadata"]["managedFields"] = json!([{
            "manager": "x", "operation": "Update", "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}
        }]);
        let live = out.clone();
        let labelled = record_update(deploy(), Some(&out), relabelled, &opts("other"));
        assert_eq!(out, live, "the live object is read, never changed");
        let entries = decode(&labelled).unwrap();
        let fields: Vec<(String, Value)> = entries
            .iter()
            .map(|e| (e.manager.clone(), e.fields.to_fields_v1()))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("x".to_string(), json!({"f:spec": {"f:replicas": {}}})),
                (
                    "other".to_string(),
                    json!({"f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
                ),
            ]
        );
    }

    #[test]
    fn untracked_objects_stay_untracked_and_resets_are_honoured() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "uid": "u"}, "data": {"a": "1"}});
        let cms = &*crate::builtin::by_kind("", "ConfigMap");
        let mut new = live.clone();
        new["data"]["a"] = json!("2");
        let out = record_update(cms, Some(&live), new, &opts("m"));
        assert!(out["metadata"].get("managedFields").is_none());

        // `managedFields: []` resets them; the object is then untracked, as in Kubernetes.
        let tracked = record_update(cms, None, live.clone(), &opts("creator"));
        assert_eq!(decode(&tracked).unwrap().len(), 1);
        let mut reset = tracked.clone();
        reset["metadata"]["managedFields"] = json!([]);
        reset["data"]["b"] = json!("x");
        let out = record_update(cms, Some(&tracked), reset, &opts("m"));
        assert!(out["metadata"].get("managedFields").is_none());

        // Entries set by the request (kubectl's migration patch) are taken as given.
        let mut migrated = tracked.clone();
        migrated["metadata"]["managedFields"][0]["manager"] = json!("kubectl");
        migrated["metadata"]["managedFields"][0]["operation"] = json!("Apply");
        let out = record_update(cms, Some(&tracked), migrated, &opts("kubectl"));
        let entries = decode(&out).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            (entries[0].manager.as_str(), entries[0].operation),
            ("kubectl", Operation::Apply)
        );
    }

    #[test]
    fn old_update_managers_fold_into_ancient_changes() {
        let cms = &*crate::builtin::by_kind("", "ConfigMap");
        let mut obj = record_update(
            cms,
            None,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}),
            &opts("creator"),
        );
        for i in 0..11 {
            let mut next = obj.clone();
            next["data"][format!("k{i}")] = json!("v");
            let manager = format!("m{i:02}");
            let mut o = opts(&manager);
            o.now = jiff::Timestamp::from_second(1_800_000_000 + i).unwrap();
            obj = record_update(cms, Some(&obj), next, &o);
        }
        let entries = decode(&obj).unwrap();
        assert_eq!(entries.len(), MAX_UPDATE_MANAGERS);
        // The oldest entries (creator at 10:00:00 of the test day, then m00 and m01) became
        // one bucket holding all their fields.
        let ancient = entries
            .iter()
            .find(|e| e.manager == ANCIENT_CHANGES)
            .expect("a bucket");
        assert_eq!(
            ancient.fields.to_fields_v1(),
            json!({"f:data": {".": {}, "f:k0": {}, "f:k1": {}}})
        );
        assert!(
            !entries
                .iter()
                .any(|e| ["creator", "m00", "m01"].contains(&e.manager.as_str()))
        );
        assert!(entries.iter().any(|e| e.manager == "m10"));
    }

    #[test]
    fn status_is_not_owned_through_the_main_resource() {
        let pods = &*crate::builtin::by_kind("", "Pod");
        let new = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                         "spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
        let out = record_update(pods, None, new.clone(), &opts("m"));
        assert_eq!(
            out["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:nodeName": {}}})
        );
        let mut o = opts("kubelet");
        o.subresource = Some("status");
        let out = record_update(pods, None, new, &o);
        assert_eq!(
            out["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:status": {"f:phase": {}}})
        );
        assert_eq!(out["metadata"]["managedFields"][0]["subresource"], "status");
    }

    use std::collections::BTreeSet;

    /// A field set from a handful of short paths over a small alphabet, so that random sets
    /// overlap, nest and share prefixes.
    fn field_set(paths: &[Vec<u8>]) -> FieldSet {
        let mut s = FieldSet::new();
        for p in paths {
            let path: Path = p
                .iter()
                .map(|b| match b % 4 {
                    0 => PathElement::Field(format!("a{}", b % 3)),
                    1 => PathElement::Key(format!("{{\"k\":{}}}", b % 2)),
                    2 => PathElement::Value(format!("{}", b % 2)),
                    _ => PathElement::Index(usize::from(b % 2)),
                })
                .collect();
            s.insert(&path);
        }
        s
    }

    fn paths() -> impl proptest::strategy::Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(0u8..12, 0..4), 0..8)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The in-place operations the write path uses give the paths in either set and the
        /// paths of one not in the other, as tries with no empty branches (the trie `insert`
        /// builds from those paths).
        #[test]
        fn in_place_set_operations_are_union_and_difference_of_paths(a in paths(), b in paths()) {
            let (a, b) = (field_set(&a), field_set(&b));
            let (pa, pb): (BTreeSet<Path>, BTreeSet<Path>) =
                (a.paths().into_iter().collect(), b.paths().into_iter().collect());
            let trie = |paths: BTreeSet<Path>| {
                let mut s = FieldSet::new();
                for p in paths {
                    s.insert(&p);
                }
                s
            };
            let mut extended = a.clone();
            extended.extend(&b);
            proptest::prop_assert_eq!(&extended, &trie(pa.union(&pb).cloned().collect()));
            let mut removed = a.clone();
            removed.remove_all(&b);
            proptest::prop_assert_eq!(&removed, &trie(pa.difference(&pb).cloned().collect()));
            let cmp = Comparison { added: a.clone(), modified: b.clone(), removed: b.clone() };
            let (changed, gone) = cmp.clone().into_changed_and_removed();
            proptest::prop_assert_eq!(changed, cmp.changed());
            proptest::prop_assert_eq!(gone, cmp.removed);
        }
    }

    /// `metav1.Time`'s spelling, as k8s-openapi serialises it, over centuries and leap days.
    #[test]
    fn times_are_spelled_as_kubernetes_spells_them() {
        for (secs, nanos) in [
            (0, 0),
            (1_796_690_000, 999_999_999),
            (951_782_400, 5),
            (253_402_207_200, 0),
            (-62_135_596_800, 0),
            (1_000_000_000, 1),
        ] {
            let t = jiff::Timestamp::new(secs, nanos).unwrap();
            let whole = jiff::Timestamp::from_second(secs).unwrap();
            let expected =
                serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(whole))
                    .unwrap();
            assert_eq!(json!(format_time(t)), expected, "at {secs}");
        }
    }
}

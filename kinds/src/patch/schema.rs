//! The merge schema of the served kinds: for each field, how strategic merge patch merges it
//! (the Go struct tags `patchStrategy`/`patchMergeKey`) and how server-side apply tracks it
//! (`+listType`, `+listMapKey`, `+mapType`, `+structType`).
//!
//! The built-in kinds' tables are generated from the Go types of `k8s.io/api` and
//! `k8s.io/apimachinery` by the same run that writes the protobuf table
//! (`tools/gen-protobuf-schema.py`, into [`super::generated`]). Only fields whose behaviour
//! differs from the defaults are listed: an unlisted object field merges key by key, an unlisted
//! list is replaced whole (atomic) by both patch kinds, and an unlisted field's children are
//! unlisted.
//!
//! Custom resources get theirs from their definitions' structural schemas at run time
//! ([`crate::custom`]); their types list a [`WILDCARD`] field for everything unlisted, since every
//! object of an unstructured custom resource is [`Field::optional`].

/// How server-side apply treats a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListType {
    /// `+listType=atomic` (and any list without a list type): one value, owned whole.
    Atomic,
    /// `+listType=set`: scalars owned one by one (`v:<value>`).
    Set,
    /// `+listType=map`: items owned one by one, identified by these key fields (`k:{...}`),
    /// each with the default a missing key takes.
    Map(&'static [(&'static str, Option<&'static str>)]),
}

/// The merge behaviour of one field.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The JSON field name.
    pub name: &'static str,
    /// Strategic merge: `None` replaces a list whole; `Some("")` merges a list of scalars;
    /// `Some(key)` merges a list of objects by `key`.
    pub merge_key: Option<&'static str>,
    /// Strategic merge: the `retainKeys` strategy (`$retainKeys` is honoured).
    pub retain_keys: bool,
    /// Server-side apply: the list type (ignored for non-lists).
    pub list_type: ListType,
    /// Server-side apply: `+mapType=atomic` (the map is one value).
    pub atomic_map: bool,
    /// A Go map (`map[string]string`: labels, annotations, data) rather than a struct: a map
    /// that appears is itself owned (`".": {}`), a struct that appears is not.
    pub is_map: bool,
    /// An object or list that may be absent and is itself owned, like a Go map, when an update
    /// makes it appear: every object and list of a custom resource, which Kubernetes compares as
    /// unstructured data (a built-in kind's structs exist, empty, in every typed object).
    pub optional: bool,
    /// The type of the value (of each item, for lists), when it has listed fields.
    pub ty: Option<&'static Type>,
}

/// An object type: the fields whose behaviour is not the default.
#[derive(Debug)]
pub struct Type {
    /// The listed fields.
    pub fields: &'static [Field],
}

/// The name of the field that stands for every field a type does not list, when it lists one.
pub const WILDCARD: &str = "*";

impl Type {
    /// The behaviour of a field; unlisted fields get the [`WILDCARD`] field's, or
    /// [`Field::DEFAULT`].
    pub fn field(&self, name: &str) -> &Field {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .or_else(|| self.fields.iter().find(|f| f.name == WILDCARD))
            .unwrap_or(&Field::DEFAULT)
    }
}

/// The schema of one node during a walk: `None` means "nothing listed below here".
pub type Node = Option<&'static Type>;

/// Looks up a child field in an optional type.
pub fn field_of(ty: Node, name: &str) -> &'static Field {
    match ty {
        Some(t) => t.field(name),
        None => &Field::DEFAULT,
    }
}

impl Field {
    /// An unlisted field: maps merge, lists are replaced (atomic), nothing listed below.
    pub const DEFAULT: Field = Field {
        name: "",
        merge_key: None,
        retain_keys: false,
        list_type: ListType::Atomic,
        atomic_map: false,
        is_map: false,
        optional: false,
        ty: None,
    };
}

pub use super::generated::META_V1_OBJECT_META as OBJECT_META;

/// What a kind without a table of its own gets (a CustomResourceDefinition; kinds unknown to
/// the table): `metadata`'s behaviour, every other list atomic.
pub static METADATA_ONLY: Type = Type {
    fields: &[Field {
        name: "metadata",
        ty: Some(&OBJECT_META),
        ..Field::DEFAULT
    }],
};

/// The merge schema of a built-in kind, from the generated table.
pub fn builtin(api_version: &str, kind: &str) -> Option<&'static Type> {
    let kinds = super::generated::KINDS;
    kinds
        .binary_search_by(|(v, k, _)| (*v, *k).cmp(&(api_version, kind)))
        .ok()
        .map(|i| kinds[i].2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merge schema of a built-in kind.
    fn for_kind(group: &str, kind: &str) -> &'static Type {
        crate::builtin::by_kind(group, kind)
            .merge_schema()
            .expect("a built-in kind has a merge schema")
    }

    #[test]
    fn pod_template_is_reached_from_every_workload() {
        for (group, kind) in [
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
            ("apps", "DaemonSet"),
        ] {
            let spec = for_kind(group, kind).field("spec").ty;
            let template = field_of(spec, "template").ty;
            let pod_spec = field_of(template, "spec").ty;
            let containers = field_of(pod_spec, "containers");
            assert_eq!(containers.merge_key, Some("name"), "{kind}");
            assert_eq!(
                field_of(containers.ty, "env").merge_key,
                Some("name"),
                "{kind}"
            );
            assert_eq!(
                field_of(containers.ty, "ports").merge_key,
                Some("containerPort")
            );
        }
    }

    #[test]
    fn tags_as_kubernetes_declares_them() {
        let pod = for_kind("", "Pod");
        let pod_spec = pod.field("spec").ty;
        assert!(field_of(pod_spec, "volumes").retain_keys);
        assert_eq!(field_of(pod_spec, "tolerations").merge_key, None);
        assert_eq!(
            field_of(pod_spec, "tolerations").list_type,
            ListType::Atomic
        );
        let meta = pod.field("metadata").ty;
        assert_eq!(field_of(meta, "finalizers").merge_key, Some(""));
        assert_eq!(field_of(meta, "finalizers").list_type, ListType::Set);
        assert_eq!(field_of(meta, "ownerReferences").merge_key, Some("uid"));
        let node = for_kind("", "Node");
        assert_eq!(field_of(node.field("spec").ty, "taints").merge_key, None);
        assert_eq!(
            field_of(node.field("status").ty, "addresses").merge_key,
            Some("type")
        );
        let service_ports = field_of(for_kind("", "Service").field("spec").ty, "ports");
        assert_eq!(service_ports.merge_key, Some("port"));
        // A list-map key's `+default` fills the key of an item without it.
        assert_eq!(
            service_ports.list_type,
            ListType::Map(&[("port", None), ("protocol", Some("TCP"))])
        );
        let deployment_spec = for_kind("apps", "Deployment").field("spec").ty;
        assert!(field_of(deployment_spec, "strategy").retain_keys);
        assert!(
            field_of(deployment_spec, "selector").atomic_map,
            "+structType=atomic"
        );
        assert!(field_of(for_kind("", "ConfigMap").field("metadata").ty, "labels").is_map);
        assert!(
            field_of(pod_spec, "nodeSelector").atomic_map,
            "+mapType=atomic"
        );
        // Job conditions: merged by type in strategic merge, atomic in apply (+listType=atomic).
        let job_conditions = field_of(for_kind("batch", "Job").field("status").ty, "conditions");
        assert_eq!(job_conditions.merge_key, Some("type"));
        assert_eq!(job_conditions.list_type, ListType::Atomic);
    }

    #[test]
    fn pointers_and_omitted_lists_are_optional_and_value_structs_are_not() {
        let deployment_spec = for_kind("apps", "Deployment").field("spec").ty;
        let strategy = field_of(deployment_spec, "strategy");
        assert!(
            !strategy.optional,
            "a struct value exists in every typed object"
        );
        assert!(field_of(strategy.ty, "rollingUpdate").optional, "a pointer");
        let pod_spec = field_of(field_of(deployment_spec, "template").ty, "spec").ty;
        assert!(!field_of(pod_spec, "containers").optional, "no omitempty");
        assert!(field_of(pod_spec, "initContainers").optional);
        let container = field_of(pod_spec, "containers").ty;
        assert!(field_of(container, "ports").optional);
    }

    #[test]
    fn every_built_in_kind_has_its_generated_table() {
        for kind in crate::builtin::all() {
            let info = kind.info();
            // Custom resources have none; nor do kinds that are never patched (the metrics).
            if info.group == crate::custom::GROUP || !info.verbs.contains(&"patch") {
                continue;
            }
            // kube-aggregator's APIService is not among the generator's sources (k8s.io/api);
            // its module writes its small table.
            if info.group == "apiregistration.k8s.io" {
                assert!(kind.merge_schema().is_some(), "{}", info.kind);
                continue;
            }
            let api_version = if info.group.is_empty() {
                info.version.to_string()
            } else {
                format!("{}/{}", info.group, info.version)
            };
            assert!(
                builtin(&api_version, info.kind).is_some(),
                "{api_version} {}",
                info.kind
            );
        }
        // Sorted, so that the lookup's binary search finds every entry.
        let kinds = super::super::generated::KINDS;
        assert!(
            kinds
                .windows(2)
                .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1))
        );
    }

    #[test]
    fn the_merge_and_protobuf_tables_come_from_one_run() {
        assert_eq!(
            super::super::generated::SOURCES,
            crate::protobuf::SOURCES,
            "regenerate both with tools/gen-protobuf-schema.py"
        );
    }
}

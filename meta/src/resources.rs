//! What a served resource is called and where it lives: [`ResourceInfo`] (names, scope, verbs,
//! subresources, storage keys, URL paths). Each kind's own value lives with the rest of that kind
//! in `skiff-kinds`; the API server's registry of kinds holds the served ones.

pub use crate::fields::{FieldSource, SelectableField};

/// A subresource of a served resource (`pods/status`, `deployments/scale`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subresource {
    /// Its path segment: `status`, `binding`, `log`, `scale`.
    pub name: &'static str,
    /// The group of the kind it speaks (`autoscaling` for `scale`, else the parent's group).
    pub group: &'static str,
    /// The version of the kind it speaks.
    pub version: &'static str,
    /// The kind it speaks (`Pod` for `pods/status`, `Binding`, `Scale`).
    pub kind: &'static str,
    /// The verbs it serves.
    pub verbs: &'static [&'static str],
}

/// One served resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// The kind of one object.
    pub kind: &'static str,
    /// The plural resource name, used in URLs.
    pub plural: &'static str,
    /// The singular resource name.
    pub singular: &'static str,
    /// Short names kubectl accepts (`po`, `deploy`).
    pub short_names: &'static [&'static str],
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// The verbs served on the resource itself.
    pub verbs: &'static [&'static str],
    /// Its subresources.
    pub subresources: &'static [Subresource],
    /// Categories (`all`) kubectl expands.
    pub categories: &'static [&'static str],
    /// The fields of this kind that field selectors may name, besides `metadata.name` and
    /// `metadata.namespace`, which every kind has.
    pub selectable_fields: &'static [SelectableField],
}

impl ResourceInfo {
    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these objects.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The group's name in storage keys: `core` for the core group, and for the one resource
    /// Kubernetes serves in a second group over the first group's store, `events.k8s.io`
    /// Events (one store of Events, read and written through both APIs).
    pub fn storage_group(&self) -> &'static str {
        match (self.group, self.plural) {
            ("", _) | ("events.k8s.io", "events") => "core",
            (group, _) => group,
        }
    }

    /// The storage key prefix of every object of this resource (all namespaces), ending in `/`.
    pub fn storage_prefix(&self) -> String {
        format!("/registry/{}/{}/", self.storage_group(), self.plural)
    }

    /// The storage key prefix of this resource's objects in one namespace (or, for a cluster
    /// scoped resource, of all its objects), ending in `/`.
    pub fn storage_prefix_in(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{}/", self.storage_prefix(), ns),
            _ => self.storage_prefix(),
        }
    }

    /// The storage key of one object.
    pub fn storage_key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{}", self.storage_prefix_in(namespace), name)
    }

    /// The URL path of the collection (`/api/v1/namespaces/default/pods`, `/apis/apps/v1/deployments`).
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let root = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{root}/namespaces/{ns}/{}", self.plural),
            _ => format!("{root}/{}", self.plural),
        }
    }

    /// The URL path of one object.
    pub fn object_path(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}/{}", self.collection_path(namespace), name)
    }

    /// A subresource by name.
    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }
}

/// The verbs of a resource that supports every operation.
pub const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a resource that is only ever created and answered, never stored (the access
/// and token reviews).
pub const CREATE_ONLY: &[&str] = &["create"];

/// The verbs of a `status` or `scale` subresource.
pub const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// The `status` subresource of a kind.
pub const fn status(group: &'static str, version: &'static str, kind: &'static str) -> Subresource {
    Subresource {
        name: "status",
        group,
        version,
        kind,
        verbs: STATUS_VERBS,
    }
}

/// The `proxy` subresource of pods, services and nodes, which speaks `options` (`PodProxyOptions`
/// and the like) and takes any method.
pub const fn proxy(options: &'static str) -> Subresource {
    Subresource {
        name: "proxy",
        group: "",
        version: "v1",
        kind: options,
        verbs: &["create", "delete", "get", "patch", "update"],
    }
}

/// The `scale` subresource (an `autoscaling/v1` Scale).
pub const SCALE: Subresource = Subresource {
    name: "scale",
    group: "autoscaling",
    version: "v1",
    kind: "Scale",
    verbs: STATUS_VERBS,
};

#[cfg(test)]
mod tests {
    use super::*;

    const PODS: ResourceInfo = ResourceInfo {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        short_names: &[],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
        selectable_fields: &[],
    };

    const NODES: ResourceInfo = ResourceInfo {
        kind: "Node",
        plural: "nodes",
        singular: "node",
        namespaced: false,
        ..PODS
    };

    const DEPLOYMENTS: ResourceInfo = ResourceInfo {
        group: "apps",
        kind: "Deployment",
        plural: "deployments",
        singular: "deployment",
        subresources: &[SCALE],
        ..PODS
    };

    #[test]
    fn keys_and_paths() {
        assert_eq!(
            PODS.storage_key(Some("default"), "web"),
            "/registry/core/pods/default/web"
        );
        assert_eq!(PODS.storage_prefix_in(None), "/registry/core/pods/");
        assert_eq!(
            PODS.object_path(Some("default"), "web"),
            "/api/v1/namespaces/default/pods/web"
        );
        assert_eq!(
            NODES.storage_key(Some("ignored"), "n1"),
            "/registry/core/nodes/n1"
        );
        assert_eq!(NODES.object_path(None, "n1"), "/api/v1/nodes/n1");
        assert_eq!(DEPLOYMENTS.api_version(), "apps/v1");
        assert_eq!(
            DEPLOYMENTS.collection_path(Some("bar")),
            "/apis/apps/v1/namespaces/bar/deployments"
        );
        assert_eq!(DEPLOYMENTS.subresource("scale").unwrap().kind, "Scale");
    }
}

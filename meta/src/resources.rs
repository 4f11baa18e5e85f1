//! The table of served resources: one [`ResourceInfo`] per kind, the single source for discovery,
//! routing, storage keys and the client's URL building.

/// A subresource of a served resource (`pods/status`, `deployments/scale`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

    /// The group's name in storage keys: `core` for the core group.
    pub fn storage_group(&self) -> &'static str {
        if self.group.is_empty() {
            "core"
        } else {
            self.group
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

const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

const fn status(group: &'static str, version: &'static str, kind: &'static str) -> Subresource {
    Subresource {
        name: "status",
        group,
        version,
        kind,
        verbs: STATUS_VERBS,
    }
}

const SCALE: Subresource = Subresource {
    name: "scale",
    group: "autoscaling",
    version: "v1",
    kind: "Scale",
    verbs: STATUS_VERBS,
};

/// Every resource skiff serves, core group first, in discovery order.
pub const RESOURCES: &[ResourceInfo] = &[
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        singular: "namespace",
        short_names: &["ns"],
        namespaced: false,
        verbs: &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
        subresources: &[status("", "v1", "Namespace")],
        categories: &[],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        singular: "pod",
        short_names: &["po"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[
            status("", "v1", "Pod"),
            Subresource {
                name: "binding",
                group: "",
                version: "v1",
                kind: "Binding",
                verbs: &["create"],
            },
            Subresource {
                name: "log",
                group: "",
                version: "v1",
                kind: "Pod",
                verbs: &["get"],
            },
        ],
        categories: &["all"],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "Node",
        plural: "nodes",
        singular: "node",
        short_names: &["no"],
        namespaced: false,
        verbs: READ_WRITE,
        subresources: &[status("", "v1", "Node")],
        categories: &[],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        singular: "service",
        short_names: &["svc"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[status("", "v1", "Service")],
        categories: &["all"],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "Endpoints",
        plural: "endpoints",
        singular: "endpoints",
        short_names: &["ep"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        singular: "configmap",
        short_names: &["cm"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        singular: "secret",
        short_names: &[],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        singular: "event",
        short_names: &["ev"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    ResourceInfo {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        short_names: &["sa"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        plural: "deployments",
        singular: "deployment",
        short_names: &["deploy"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[status("apps", "v1", "Deployment"), SCALE],
        categories: &["all"],
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        kind: "ReplicaSet",
        plural: "replicasets",
        singular: "replicaset",
        short_names: &["rs"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[status("apps", "v1", "ReplicaSet"), SCALE],
        categories: &["all"],
    },
    ResourceInfo {
        group: "apps",
        version: "v1",
        kind: "DaemonSet",
        plural: "daemonsets",
        singular: "daemonset",
        short_names: &["ds"],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[status("apps", "v1", "DaemonSet")],
        categories: &["all"],
    },
    ResourceInfo {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        singular: "lease",
        short_names: &[],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
    ResourceInfo {
        group: "discovery.k8s.io",
        version: "v1",
        kind: "EndpointSlice",
        plural: "endpointslices",
        singular: "endpointslice",
        short_names: &[],
        namespaced: true,
        verbs: READ_WRITE,
        subresources: &[],
        categories: &[],
    },
];

/// The resource served under `group`/`version` with URL name `plural`.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource of `kind` in `group` (any served version).
pub fn lookup_kind(group: &str, kind: &str) -> Option<&'static ResourceInfo> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.kind == kind)
}

/// The served API groups (core excluded) in discovery order, each with its versions.
pub fn groups() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, versions)) => {
                if !versions.contains(&r.version) {
                    versions.push(r.version);
                }
            }
            None => out.push((r.group, vec![r.version])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_paths() {
        let pods = lookup("", "v1", "pods").unwrap();
        assert_eq!(
            pods.storage_key(Some("default"), "web"),
            "/registry/core/pods/default/web"
        );
        assert_eq!(pods.storage_prefix_in(None), "/registry/core/pods/");
        assert_eq!(
            pods.object_path(Some("default"), "web"),
            "/api/v1/namespaces/default/pods/web"
        );
        let nodes = lookup_kind("", "Node").unwrap();
        assert_eq!(
            nodes.storage_key(Some("ignored"), "n1"),
            "/registry/core/nodes/n1"
        );
        assert_eq!(nodes.object_path(None, "n1"), "/api/v1/nodes/n1");
        let deploy = lookup("apps", "v1", "deployments").unwrap();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(
            deploy.collection_path(Some("bar")),
            "/apis/apps/v1/namespaces/bar/deployments"
        );
        assert_eq!(deploy.subresource("scale").unwrap().kind, "Scale");
    }

    #[test]
    fn no_prefix_of_one_resource_contains_another() {
        // A list of `endpoints` must never see `endpointslices`: prefixes end in '/'.
        for a in RESOURCES {
            for b in RESOURCES {
                if a != b {
                    assert!(!b.storage_prefix().starts_with(&a.storage_prefix()));
                }
            }
        }
    }

    #[test]
    fn groups_in_order() {
        let groups = groups();
        assert_eq!(groups[0], ("apps", vec!["v1"]));
        assert!(groups.iter().any(|(g, _)| *g == "coordination.k8s.io"));
    }
}

//! The merge schema of the served kinds: for each field, how strategic merge patch merges it
//! (the Go struct tags `patchStrategy`/`patchMergeKey`) and how server-side apply tracks it
//! (`+listType`, `+listMapKey`, `+mapType`).
//!
//! Derived by hand from `k8s.io/api` v0.33 (`core/v1`, `apps/v1`, `batch/v1`, `coordination/v1`,
//! `discovery/v1`) and `metav1.ObjectMeta`. Only fields whose behaviour differs from the
//! defaults are listed: an unlisted object field merges key by key, an unlisted list is
//! replaced whole (atomic) by both patch kinds, and an unlisted field's children are unlisted.

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
    /// The type of the value (of each item, for lists), when it has listed fields.
    pub ty: Option<&'static Type>,
}

/// An object type: the fields whose behaviour is not the default.
#[derive(Debug)]
pub struct Type {
    /// The listed fields.
    pub fields: &'static [Field],
}

impl Type {
    /// The behaviour of a field; unlisted fields get [`Field::DEFAULT`].
    pub fn field(&self, name: &str) -> &Field {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .unwrap_or(&Field::DEFAULT)
    }
}

/// The schema of one node during a walk: `None` means "nothing listed below here".
pub type Node = Option<&'static Type>;

/// Looks up a child field in an optional type.
pub fn field_of(ty: Node, name: &str) -> &'static Field {
    match ty {
        Some(t) => t
            .fields
            .iter()
            .find(|f| f.name == name)
            .unwrap_or(&Field::DEFAULT),
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
        ty: None,
    };
}

const fn object(name: &'static str, ty: &'static Type) -> Field {
    Field {
        name,
        ty: Some(ty),
        ..Field::DEFAULT
    }
}

const fn map_list(
    name: &'static str,
    merge_key: &'static str,
    keys: &'static [(&'static str, Option<&'static str>)],
    ty: Option<&'static Type>,
) -> Field {
    Field {
        name,
        merge_key: Some(merge_key),
        retain_keys: false,
        list_type: ListType::Map(keys),
        atomic_map: false,
        is_map: false,
        ty,
    }
}

const fn with_retain_keys(f: Field) -> Field {
    Field {
        retain_keys: true,
        ..f
    }
}

const fn atomic_map(name: &'static str) -> Field {
    Field {
        name,
        atomic_map: true,
        is_map: true,
        ..Field::DEFAULT
    }
}

const fn string_map(name: &'static str) -> Field {
    Field {
        name,
        is_map: true,
        ..Field::DEFAULT
    }
}

/// A struct apply owns whole (`+structType=atomic`, e.g. `metav1.LabelSelector`).
const fn atomic_struct(name: &'static str) -> Field {
    Field {
        name,
        atomic_map: true,
        ..Field::DEFAULT
    }
}

/// A list of scalars merged by value in strategic merge and a set in apply.
const fn set_list(name: &'static str) -> Field {
    Field {
        name,
        merge_key: Some(""),
        retain_keys: false,
        list_type: ListType::Set,
        atomic_map: false,
        is_map: false,
        ty: None,
    }
}

/// A list that strategic merge merges by `merge_key` but apply treats as atomic.
const fn smp_only_list(name: &'static str, merge_key: &'static str) -> Field {
    Field {
        name,
        merge_key: Some(merge_key),
        ..Field::DEFAULT
    }
}

const NAME: &[(&str, Option<&str>)] = &[("name", None)];
const TYPE: &[(&str, Option<&str>)] = &[("type", None)];

/// `metav1.ObjectMeta`.
pub static OBJECT_META: Type = Type {
    fields: &[
        set_list("finalizers"),
        map_list("ownerReferences", "uid", &[("uid", None)], None),
        string_map("labels"),
        string_map("annotations"),
    ],
};

/// `metav1.Condition` lists and the per-kind condition lists, merged by `type`.
const fn conditions() -> Field {
    map_list("conditions", "type", TYPE, None)
}

static RESOURCE_REQUIREMENTS: Type = Type {
    fields: &[
        map_list("claims", "name", NAME, None),
        string_map("limits"),
        string_map("requests"),
    ],
};

/// `core/v1.Container` (and `EphemeralContainerCommon`, which has the same tags).
pub static CONTAINER: Type = Type {
    fields: &[
        map_list(
            "ports",
            "containerPort",
            &[("containerPort", None), ("protocol", Some("TCP"))],
            None,
        ),
        map_list("env", "name", NAME, None),
        map_list("volumeMounts", "mountPath", &[("mountPath", None)], None),
        map_list("volumeDevices", "devicePath", &[("devicePath", None)], None),
        object("resources", &RESOURCE_REQUIREMENTS),
    ],
};

/// `core/v1.PodSpec`.
pub static POD_SPEC: Type = Type {
    fields: &[
        with_retain_keys(map_list("volumes", "name", NAME, None)),
        map_list("initContainers", "name", NAME, Some(&CONTAINER)),
        map_list("containers", "name", NAME, Some(&CONTAINER)),
        map_list("ephemeralContainers", "name", NAME, Some(&CONTAINER)),
        map_list("imagePullSecrets", "name", NAME, None),
        map_list("hostAliases", "ip", &[("ip", None)], None),
        map_list(
            "topologySpreadConstraints",
            "topologyKey",
            &[("topologyKey", None), ("whenUnsatisfiable", None)],
            None,
        ),
        map_list("schedulingGates", "name", NAME, None),
        with_retain_keys(map_list("resourceClaims", "name", NAME, None)),
        atomic_map("nodeSelector"),
        string_map("overhead"),
    ],
};

static CONTAINER_STATUS: Type = Type {
    fields: &[
        map_list("volumeMounts", "mountPath", &[("mountPath", None)], None),
        map_list("allocatedResourcesStatus", "name", NAME, None),
    ],
};

/// `core/v1.PodStatus`.
pub static POD_STATUS: Type = Type {
    fields: &[
        conditions(),
        smp_only_list("hostIPs", "ip"),
        map_list("podIPs", "ip", &[("ip", None)], None),
        with_retain_keys(map_list("resourceClaimStatuses", "name", NAME, None)),
        Field {
            name: "containerStatuses",
            ty: Some(&CONTAINER_STATUS),
            ..Field::DEFAULT
        },
    ],
};

/// `core/v1.PodTemplateSpec`.
pub static POD_TEMPLATE_SPEC: Type = Type {
    fields: &[object("metadata", &OBJECT_META), object("spec", &POD_SPEC)],
};

/// `core/v1.Pod`.
pub static POD: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &POD_SPEC),
        object("status", &POD_STATUS),
    ],
};

static NODE_SPEC: Type = Type {
    fields: &[set_list("podCIDRs")],
};

static NODE_STATUS: Type = Type {
    fields: &[
        conditions(),
        map_list("addresses", "type", TYPE, None),
        string_map("capacity"),
        string_map("allocatable"),
    ],
};

/// `core/v1.Node`.
pub static NODE: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &NODE_SPEC),
        object("status", &NODE_STATUS),
    ],
};

static SERVICE_SPEC: Type = Type {
    fields: &[
        map_list(
            "ports",
            "port",
            &[("port", None), ("protocol", Some("TCP"))],
            None,
        ),
        atomic_map("selector"),
    ],
};

static CONDITIONS_ONLY: Type = Type {
    fields: &[conditions()],
};

/// `core/v1.Service`.
pub static SERVICE: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &SERVICE_SPEC),
        object("status", &CONDITIONS_ONLY),
    ],
};

/// `core/v1.Namespace`.
pub static NAMESPACE: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        object("status", &CONDITIONS_ONLY),
    ],
};

/// `core/v1.ServiceAccount`.
pub static SERVICE_ACCOUNT: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        map_list("secrets", "name", NAME, None),
    ],
};

/// `core/v1.ConfigMap`.
pub static CONFIG_MAP: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        string_map("data"),
        string_map("binaryData"),
    ],
};

/// `core/v1.Secret`.
pub static SECRET: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        string_map("data"),
        string_map("stringData"),
    ],
};

/// Kinds whose only listed fields are in `metadata` (Endpoints, Event, Lease, Scale, and
/// unknown kinds).
pub static METADATA_ONLY: Type = Type {
    fields: &[object("metadata", &OBJECT_META)],
};

static DEPLOYMENT_SPEC: Type = Type {
    fields: &[
        object("template", &POD_TEMPLATE_SPEC),
        atomic_struct("selector"),
        Field {
            name: "strategy",
            retain_keys: true,
            ..Field::DEFAULT
        },
    ],
};

static WORKLOAD_SPEC: Type = Type {
    fields: &[
        object("template", &POD_TEMPLATE_SPEC),
        atomic_struct("selector"),
    ],
};

/// `apps/v1.Deployment`.
pub static DEPLOYMENT: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &DEPLOYMENT_SPEC),
        object("status", &CONDITIONS_ONLY),
    ],
};

/// `apps/v1.ReplicaSet` and `apps/v1.DaemonSet` (same tags on spec.template and conditions).
pub static WORKLOAD: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &WORKLOAD_SPEC),
        object("status", &CONDITIONS_ONLY),
    ],
};

static JOB_SPEC: Type = Type {
    fields: &[
        object("template", &POD_TEMPLATE_SPEC),
        atomic_struct("selector"),
    ],
};

/// `JobStatus.conditions`: merged by type in strategic merge, atomic in apply.
static JOB_STATUS: Type = Type {
    fields: &[smp_only_list("conditions", "type")],
};

/// `batch/v1.Job`.
pub static JOB: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        object("spec", &JOB_SPEC),
        object("status", &JOB_STATUS),
    ],
};

static ENDPOINT: Type = Type {
    fields: &[Field {
        name: "addresses",
        list_type: ListType::Set,
        ..Field::DEFAULT
    }],
};

/// `discovery/v1.EndpointSlice` (its lists are atomic for both patch kinds).
pub static ENDPOINT_SLICE: Type = Type {
    fields: &[
        object("metadata", &OBJECT_META),
        Field {
            name: "endpoints",
            ty: Some(&ENDPOINT),
            ..Field::DEFAULT
        },
    ],
};

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
        let pod_spec = POD.field("spec").ty;
        assert!(field_of(pod_spec, "volumes").retain_keys);
        assert_eq!(field_of(pod_spec, "tolerations").merge_key, None);
        assert_eq!(
            field_of(pod_spec, "tolerations").list_type,
            ListType::Atomic
        );
        let meta = POD.field("metadata").ty;
        assert_eq!(field_of(meta, "finalizers").merge_key, Some(""));
        assert_eq!(field_of(meta, "ownerReferences").merge_key, Some("uid"));
        assert_eq!(field_of(NODE.field("spec").ty, "taints").merge_key, None);
        assert_eq!(
            field_of(NODE.field("status").ty, "addresses").merge_key,
            Some("type")
        );
        assert_eq!(
            field_of(SERVICE.field("spec").ty, "ports").merge_key,
            Some("port")
        );
        assert!(field_of(DEPLOYMENT.field("spec").ty, "strategy").retain_keys);
        assert!(std::ptr::eq(for_kind("", "Event"), &METADATA_ONLY));
        assert!(field_of(for_kind("", "ConfigMap").field("metadata").ty, "labels").is_map);
    }
}

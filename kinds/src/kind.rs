//! What a served kind is: the [`Kind`] trait, which every kind's module implements once.
//!
//! The API server never asks "which kind is this?": it asks the kind. Decoding, defaulting,
//! validation, the write strategy, Table columns and cells, the strategic-merge schema, the OpenAPI
//! schema and the selectable fields (in its [`ResourceInfo`]) are all here, so that a kind is one
//! module plus one registration line (see [`crate::builtin`]), and a kind defined at run time (a
//! CustomResourceDefinition's, [`crate::custom`]) is one more implementation of the same trait.
//!
//! Methods without a default are what every kind must say; a kind that leaves one out does not
//! compile. The defaults are what Kubernetes does for a kind that says nothing more (no defaults,
//! no rules beyond metadata, no generation).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::SchemaGenerator;
use serde_json::Value;
use skiff_meta::ResourceInfo;

use crate::patch::schema::Type;
use crate::table::Column;
use crate::validation::FieldError;
use crate::validation::names::{self, NameFn};

/// The outcome of a kind's rules: the field errors found, or the one error that stopped the check
/// (a part that does not decode).
pub type Checked = Result<Vec<FieldError>, FieldError>;

/// How writes treat a kind's `status` and `metadata.generation` (Kubernetes' registry strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strategy {
    /// Writes to the main resource bump `metadata.generation` when the spec changes.
    pub tracks_generation: bool,
    /// The main resource's writes keep the status the client sent (a Node's kubelet registers
    /// its node with its status); otherwise a kind with a `status` subresource takes status
    /// from the stored object on update and starts without one on create.
    pub client_writes_status: bool,
}

impl Strategy {
    /// No generation, status owned by the `status` subresource (when there is one).
    pub const DEFAULT: Strategy = Strategy {
        tracks_generation: false,
        client_writes_status: false,
    };

    /// [`Strategy::DEFAULT`] with generations.
    pub const GENERATION: Strategy = Strategy {
        tracks_generation: true,
        client_writes_status: false,
    };
}

/// Where the `scale` subresource reads and writes a kind's replicas and reads its selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas (`spec.replicas`).
    pub spec_replicas: Vec<String>,
    /// The observed replicas (`status.replicas`).
    pub status_replicas: Vec<String>,
    /// The label selector, if the kind has one.
    pub selector: Option<Vec<String>>,
    /// How the object keeps its selector there.
    pub selector_shape: SelectorShape,
}

/// How a scalable kind keeps its label selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorShape {
    /// A `metav1.LabelSelector` (the apps workloads).
    LabelSelector,
    /// A plain map of labels that must all match (a ReplicationController's `spec.selector`).
    Map,
    /// A selector already serialized (custom resources' `labelSelectorPath`).
    String,
}

impl ScalePaths {
    /// The built-in workloads': `spec.replicas`, `status.replicas`, `spec.selector`.
    pub fn workload() -> ScalePaths {
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect();
        ScalePaths {
            spec_replicas: path(&["spec", "replicas"]),
            status_replicas: path(&["status", "replicas"]),
            selector: Some(path(&["spec", "selector"])),
            selector_shape: SelectorShape::LabelSelector,
        }
    }
}

/// Where a kind's objects come from, and so how the API server serves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The log: objects are created, read, changed, watched and deleted through it.
    Store,
    /// Nowhere: an object is a question that a create answers and nothing is written (the
    /// access and token reviews).
    Review,
    /// The kubelets' Summary API, read when asked (the metrics API's NodeMetrics and
    /// PodMetrics): only read, never written.
    Kubelets,
}

/// A served kind.
pub trait Kind: Send + Sync + 'static {
    /// Its names, scope, verbs, subresources and selectable fields.
    fn info(&self) -> &'static ResourceInfo;

    /// The object in canonical form: through the kind's type for built-in kinds (an error says
    /// where it does not fit, for a 400), through the schema for custom resources. Fields the
    /// kind does not know are dropped; [`crate::typed::decode`] reports them.
    fn decode(&self, object: &Value) -> Result<Value, String>;

    /// Adds the kind's OpenAPI schema to `generator` and returns its name, or `None` when the
    /// kind publishes none.
    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String>;

    /// The Table columns `kubectl get` shows, in cell order.
    fn columns(&self) -> Vec<Column>;

    /// The cells of one object's row, one per column; `None` when the object does not fit the
    /// kind (the row then shows the name and `<unknown>`s).
    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>>;

    /// The merge keys and list types of strategic merge patch and server-side apply: a built-in
    /// kind's from the generated table of its Go type; `None` for a kind that has no strategic
    /// merge patch (custom resources: the patch is refused as Kubernetes refuses it).
    fn merge_schema(&self) -> Option<&'static Type> {
        let info = self.info();
        let api_version = if info.group.is_empty() {
            std::borrow::Cow::Borrowed(info.version)
        } else {
            std::borrow::Cow::Owned(format!("{}/{}", info.group, info.version))
        };
        crate::patch::schema::builtin(&api_version, info.kind)
    }

    /// The list types and map types server-side apply and managed fields follow: the merge
    /// schema's, or metadata's alone (every other list atomic). A custom kind has one without
    /// having a strategic merge patch: its definition's `x-kubernetes-list-type`,
    /// `x-kubernetes-list-map-keys` and `x-kubernetes-map-type`.
    fn apply_schema(&self) -> &'static Type {
        self.merge_schema()
            .unwrap_or(&crate::patch::schema::METADATA_ONLY)
    }

    /// The kind's defaults (Kubernetes' `SetDefaults_*`), in place; idempotent, applied on every
    /// create and update before validation.
    fn default(&self, _object: &mut Value) {}

    /// The kind's create-time fills, after the common ones (uid, timestamps, generation, the
    /// status reset): a pod's phase, a namespace's finalizer.
    fn prepare_for_create(&self, _object: &mut Value) {}

    /// The kind's carry-overs on an update of the main resource, after the common ones: a
    /// service keeps the addresses and ports the cluster allocated.
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}

    /// How writes treat status and generation.
    fn strategy(&self) -> Strategy {
        Strategy::DEFAULT
    }

    /// The rule for object names (`ValidateNameFunc`).
    fn name_rule(&self) -> NameFn {
        names::name_is_dns_subdomain
    }

    /// Whether metadata is checked only once the kind's own rules pass (Events, whose metadata
    /// Kubernetes checks last and with the path-segment name rule).
    fn validates_metadata_last(&self) -> bool {
        false
    }

    /// The kind's rules on create (`old` = None) and update, beyond metadata. `meta` is the
    /// object's metadata with the request's namespace filled in.
    fn validate(&self, _new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        Ok(Vec::new())
    }

    /// The kind's rules on an update through the `status` subresource.
    fn validate_status(&self, _new: &Value, _old: &Value) -> Checked {
        Ok(Vec::new())
    }

    /// For a subresource other than `status` through which the kind's own object is written
    /// (a pod's `ephemeralcontainers`): the fields such a write may change, as JSON pointers
    /// (`/spec/ephemeralContainers`); everything else comes from the stored object. `None` when
    /// `subresource` is not one of these.
    fn subresource_fields(&self, _subresource: &str) -> Option<&'static [&'static str]> {
        None
    }

    /// The kind's rules on an update through a subresource of [`Kind::subresource_fields`].
    fn validate_subresource(&self, _subresource: &str, _new: &Value, _old: &Value) -> Checked {
        Ok(Vec::new())
    }

    /// Conditions of an object's Table row (a finished pod's `Completed`).
    fn row_conditions(&self, _object: &Value) -> Option<Value> {
        None
    }

    /// Whether objects expire after the server's event TTL (Events).
    fn expires(&self) -> bool {
        false
    }

    /// Where the `scale` subresource finds replicas and the selector; `None` for a kind without
    /// one.
    fn scale(&self) -> Option<ScalePaths> {
        self.info()
            .subresource("scale")
            .map(|_| ScalePaths::workload())
    }

    /// Where objects of this kind come from: the log, for all but a few.
    fn source(&self) -> Source {
        Source::Store
    }

    /// The version objects of this kind are stored in. Objects read through another version of
    /// the same resource are converted by their `apiVersion` alone (`conversion: None`).
    fn storage_version(&self) -> &'static str {
        self.info().version
    }

    /// Whether objects of this kind are stored in another version or shape than the one it
    /// serves, so that what is read must go through [`Kind::to_served`].
    fn converts(&self) -> bool {
        self.storage_version() != self.info().version
    }

    /// An object read from the log, turned into the version this kind serves. The default
    /// changes `apiVersion` alone (`conversion: None`), which is all that custom resources and
    /// kinds served in their stored version need; a kind whose versions differ in shape (the
    /// `autoscaling/v1` HorizontalPodAutoscaler) converts its fields here.
    fn to_served(&self, object: &mut Value) {
        if converts(self) && object.is_object() {
            object["apiVersion"] = Value::String(self.info().api_version());
        }
    }

    /// An object about to be written, turned into the version objects of this kind are stored
    /// in: the inverse of [`Kind::to_served`].
    fn to_stored(&self, object: &mut Value) {
        if converts(self) && object.is_object() {
            let info = self.info();
            let api_version = if info.group.is_empty() {
                self.storage_version().to_string()
            } else {
                format!("{}/{}", info.group, self.storage_version())
            };
            object["apiVersion"] = Value::String(api_version);
        }
    }
}

impl std::fmt::Debug for dyn Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let info = self.info();
        write!(f, "Kind({}/{} {})", info.group, info.version, info.kind)
    }
}

/// Whether objects of `kind` are stored in another version than the one it serves.
pub fn converts<K: Kind + ?Sized>(kind: &K) -> bool {
    kind.converts()
}

/// An object read from the log, in the version `kind` serves ([`Kind::to_served`]).
pub fn to_served(kind: &dyn Kind, object: &mut Value) {
    kind.to_served(object)
}

/// An object about to be written, in the version `kind`'s objects are stored in
/// ([`Kind::to_stored`]).
pub fn to_stored(kind: &dyn Kind, object: &mut Value) {
    kind.to_stored(object)
}

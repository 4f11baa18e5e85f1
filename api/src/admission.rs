//! The admission chain: ordered, pluggable plugins that see every write after decoding and before
//! validation and storage, and may change or refuse it (a chain of responsibility).
//!
//! Built in, in order: `NamespaceLifecycle` (no content in missing or terminating namespaces; the
//! system namespaces cannot be deleted), `RBACEscalation` (no Role or binding grants what its
//! writer does not hold), [`node::NodeRestriction`] (a kubelet writes only its own Node, Lease
//! and pods), [`certificates::Certificates`] (who asked for a certificate, who may approve and
//! sign it), `ServiceIPs` (ClusterIP and NodePort allocation from
//! ranges inside the loopback block, so the proxy can bind them unprivileged),
//! `DefaultTolerationSeconds` (pods tolerate not-ready and unreachable nodes for 300 s, or as
//! configured), `ServiceAccount` (pods run as `default` unless they name an account, and get its
//! token projected at `/var/run/secrets/kubernetes.io/serviceaccount` unless automount is off),
//! [`priority::Priority`] (a pod's priority from its PriorityClass), then the storage plugins of [`storage`] (`DefaultStorageClass`,
//! `StorageObjectInUseProtection`, `PersistentVolumeClaimResize`), [`ingress::DefaultIngressClass`]
//! (an Ingress without a class gets the default IngressClass), and last
//! [`webhook::MutatingAdmissionWebhook`].
//!
//! After schema validation, the validating phase ([`Plugin::validate`], which may refuse but not
//! change the write) runs [`webhook::ValidatingAdmissionWebhook`], then
//! [`policy::ValidatingAdmissionPolicy`] (CEL policies; webhooks and policies leave warnings
//! and audit annotations in the request's [`Feedback`]), then [`quota::ResourceQuota`].

pub mod allocations;
pub mod certificates;
pub mod configs;
pub mod ingress;
pub mod limits;
pub mod node;
pub mod policy;
pub mod priority;
pub mod quota;
pub mod storage;
pub mod webhook;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use skiff_meta::ResourceInfo;

use crate::error::{Cause, Error, Result};
use crate::registry::Registry;

/// What kind of write is being admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A create.
    Create,
    /// An update or patch.
    Update,
    /// A delete.
    Delete,
}

/// One write, as admission sees it.
pub struct Attributes<'a> {
    /// The kind of write.
    pub operation: Operation,
    /// The resource written.
    pub info: &'static ResourceInfo,
    /// The subresource written, if any (`status`, `binding`, `scale`).
    pub subresource: Option<&'a str>,
    /// The namespace.
    pub namespace: Option<&'a str>,
    /// The object's name.
    pub name: &'a str,
    /// The object to be written (create and update), which plugins may change.
    pub object: Option<&'a mut Value>,
    /// The stored object (update and delete).
    pub old: Option<&'a Value>,
    /// The user making the write.
    pub user: &'a crate::auth::User,
    /// Whether the write is a dry run (`dryRun=All`): nothing is stored.
    pub dry_run: bool,
    /// Where plugins leave warnings for the client and annotations for the audit log; `None`
    /// where nobody reads them (tests, internal writes).
    pub feedback: Option<&'a Feedback>,
}

/// What admission plugins leave besides their verdict: warnings for the client (`Warning` headers
/// of the response, whatever its status) and annotations for the request's audit event. Shared by
/// the request's handler and its plugins; one short critical section each.
#[derive(Debug, Default)]
pub struct Feedback {
    warnings: Mutex<Vec<String>>,
    annotations: Mutex<BTreeMap<String, String>>,
}

impl Feedback {
    /// Adds a warning, once (a write retried after a conflict runs admission again).
    pub fn warn(&self, warning: String) {
        let mut list = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        if !list.contains(&warning) {
            list.push(warning);
        }
    }

    /// Adds an audit annotation. As kube-apiserver's, the key must be `<prefix>/<name>`, a
    /// qualified name with its DNS subdomain prefix (the webhook's or policy's name), and a key
    /// keeps its first value: an invalid key or another value for a key is refused, and the
    /// caller logs it and goes on (the request does not fail over its audit annotations).
    pub fn annotate(&self, key: String, value: String) -> std::result::Result<(), String> {
        if key.split('/').count() != 2 {
            return Err(format!(
                "annotation key {key:?} has an invalid format: it must be a DNS subdomain prefix, \
                 '/' and a name (e.g. 'example.com/key')"
            ));
        }
        let problems = skiff_kinds::validation::names::qualified_name(&key);
        if !problems.is_empty() {
            return Err(format!(
                "annotation key {key:?} is invalid: {}",
                problems.join("; ")
            ));
        }
        let mut annotations = self.annotations.lock().unwrap_or_else(|e| e.into_inner());
        match annotations.get(&key) {
            Some(old) if *old != value => Err(format!(
                "annotation {key:?} is already {old:?}: it cannot be changed to {value:?}"
            )),
            Some(_) => Ok(()),
            None => {
                annotations.insert(key, value);
                Ok(())
            }
        }
    }

    /// The warnings so far.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The audit annotations so far.
    pub fn take_annotations(&self) -> BTreeMap<String, String> {
        std::mem::take(&mut *self.annotations.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// One admission plugin.
#[async_trait::async_trait]
pub trait Plugin: Send + Sync {
    /// The plugin's name, as Kubernetes names it.
    fn name(&self) -> &'static str;

    /// Admits, changes or refuses a write.
    async fn admit(&self, registry: &Registry, attributes: &mut Attributes<'_>) -> Result<()>;

    /// Refuses a write, after every plugin's `admit` and the schema validation, without changing
    /// it (the validating phase Kubernetes runs last).
    async fn validate(&self, _registry: &Registry, _attributes: &Attributes<'_>) -> Result<()> {
        Ok(())
    }

    /// The write this plugin admitted did not happen (it failed later): undo any reservation.
    async fn abandoned(&self, _info: &ResourceInfo, _object: &Value) {}

    /// An object left the log: release what it held.
    async fn removed(&self, _info: &ResourceInfo, _object: &Value) {}
}

/// A shared plugin (one the server also keeps a handle on) is a plugin.
#[async_trait::async_trait]
impl<P: Plugin> Plugin for Arc<P> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    async fn admit(&self, registry: &Registry, attributes: &mut Attributes<'_>) -> Result<()> {
        (**self).admit(registry, attributes).await
    }

    async fn validate(&self, registry: &Registry, attributes: &Attributes<'_>) -> Result<()> {
        (**self).validate(registry, attributes).await
    }

    async fn abandoned(&self, info: &ResourceInfo, object: &Value) {
        (**self).abandoned(info, object).await
    }

    async fn removed(&self, info: &ResourceInfo, object: &Value) {
        (**self).removed(info, object).await
    }
}

/// The ordered chain.
pub struct Chain {
    plugins: Vec<Box<dyn Plugin>>,
}

impl Chain {
    /// A chain of `plugins`, run in order.
    pub fn new(plugins: Vec<Box<dyn Plugin>>) -> Chain {
        Chain { plugins }
    }

    /// Runs every plugin in order; the first refusal stops the chain (and earlier plugins'
    /// reservations are released).
    pub async fn admit(&self, registry: &Registry, attributes: &mut Attributes<'_>) -> Result<()> {
        for (i, plugin) in self.plugins.iter().enumerate() {
            if let Err(e) = plugin.admit(registry, attributes).await {
                if let Some(object) = attributes.object.as_deref() {
                    for earlier in &self.plugins[..i] {
                        earlier.abandoned(attributes.info, object).await;
                    }
                }
                tracing::debug!(plugin = plugin.name(), error = %e, "admission refused");
                return Err(e);
            }
        }
        Ok(())
    }

    /// Runs every plugin's validating phase in order; the first refusal stops it. The caller
    /// gives back what `admit` reserved ([`Chain::abandoned`]) when this fails.
    pub async fn validate(&self, registry: &Registry, attributes: &Attributes<'_>) -> Result<()> {
        for plugin in &self.plugins {
            if let Err(e) = plugin.validate(registry, attributes).await {
                tracing::debug!(plugin = plugin.name(), error = %e, "admission refused (validating)");
                return Err(e);
            }
        }
        Ok(())
    }

    /// Tells every plugin that an admitted write did not happen.
    pub async fn abandoned(&self, info: &ResourceInfo, object: &Value) {
        for plugin in &self.plugins {
            plugin.abandoned(info, object).await;
        }
    }

    /// Tells every plugin that an object left the log.
    pub async fn removed(&self, info: &ResourceInfo, object: &Value) {
        for plugin in &self.plugins {
            plugin.removed(info, object).await;
        }
    }
}

/// Nobody grants what they do not hold: writes of Roles, ClusterRoles and their bindings pass
/// RBAC's escalation check ([`crate::authz::check_escalation`]).
pub struct RbacEscalation(pub Arc<crate::authz::Authorizer>);

#[async_trait::async_trait]
impl Plugin for RbacEscalation {
    fn name(&self) -> &'static str {
        "RBACEscalation"
    }

    async fn admit(&self, _registry: &Registry, attributes: &mut Attributes<'_>) -> Result<()> {
        if attributes.subresource.is_some()
            || !matches!(attributes.operation, Operation::Create | Operation::Update)
        {
            return Ok(());
        }
        let Some(object) = attributes.object.as_deref() else {
            return Ok(());
        };
        crate::authz::check_escalation(
            &self.0,
            attributes.user,
            attributes.info,
            attributes.namespace.unwrap_or_default(),
            object,
        )
    }
}

/// Namespaces that always exist and may not be deleted (`kube-node-lease` holds the kubelets'
/// Leases: the API server makes it, as kube-apiserver does, because kubelets may not).
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// No creates in a namespace that is missing or terminating; the system namespaces stay.
///
/// The namespace is read from the server's mirror of Namespaces, and from the log when the mirror
/// has not seen it (created a moment ago, or missing) or says it is terminating (it may have been
/// deleted and made again since). As in Kubernetes, a create that races the namespace's deletion
/// by less than a watch delivery gets in; the namespace controller deletes it with the rest.
#[derive(Default)]
pub struct NamespaceLifecycle(pub(crate) Arc<crate::mirror::Mirror<NamespaceView>>);

#[async_trait::async_trait]
impl Plugin for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info.kind == "Namespace" {
            if a.operation == Operation::Delete && SYSTEM_NAMESPACES.contains(&a.name) {
                return Err(Error::Forbidden(format!(
                    "namespaces \"{}\" is forbidden: this namespace may not be deleted",
                    a.name
                )));
            }
            return Ok(());
        }
        if a.operation != Operation::Create || !a.info.namespaced || a.subresource.is_some() {
            return Ok(());
        }
        let Some(namespace) = a.namespace else {
            return Ok(());
        };
        let terminating = match self.0.get(None, namespace).map(|ns| ns.terminating()) {
            Some(false) => false,
            None | Some(true) => {
                let namespaces = &skiff_kinds::builtin::namespace::INFO;
                let ns: NamespaceView = registry.get_view(namespaces, None, namespace).await?;
                ns.terminating()
            }
        };
        if terminating {
            return Err(Error::Forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                a.info.plural, a.name, namespace
            )));
        }
        Ok(())
    }
}

/// The fields of a stored Namespace that [`NamespaceLifecycle`] reads.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(crate) struct NamespaceView {
    metadata: Option<NamespaceViewMeta>,
    status: Option<NamespaceViewStatus>,
}

impl NamespaceView {
    fn terminating(&self) -> bool {
        self.metadata
            .as_ref()
            .is_some_and(|m| m.deletion_timestamp.is_some())
            || self.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NamespaceViewMeta {
    deletion_timestamp: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct NamespaceViewStatus {
    phase: Option<String>,
}

/// Pods tolerate `not-ready` and `unreachable` nodes for these seconds (300 s by default)
/// unless they say otherwise.
pub struct DefaultTolerationSeconds(pub skiff_kinds::defaults::TolerationSeconds);

#[async_trait::async_trait]
impl Plugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    async fn admit(&self, _registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info.kind != "Pod" || a.operation != Operation::Create {
            return Ok(());
        }
        if let Some(pod) = a.object.as_deref_mut() {
            skiff_kinds::defaults::default_tolerations(pod, self.0);
        }
        Ok(())
    }
}

/// Where every container of a pod finds its service-account token, CA bundle and namespace.
pub const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the projected volume's name (a random suffix follows).
pub const SERVICE_ACCOUNT_VOLUME_PREFIX: &str = "kube-api-access-";
/// The lifetime the kubelet asks for the projected token (kube-apiserver's
/// `WarnOnlyBoundTokenExpirationSeconds`: an hour and 7 s).
pub const PROJECTED_TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// kube-apiserver's `ServiceAccount` plugin: a new pod runs as its `serviceAccountName`
/// (`default` unless given) and, unless `automountServiceAccountToken` is false on the pod (or,
/// when the pod does not say, on the account), gets the projected volume `kube-api-access-XXXXX`
/// (a bound token, the `kube-root-ca.crt` CA bundle, the namespace) mounted read-only at
/// [`SERVICE_ACCOUNT_MOUNT_PATH`] in every container that mounts nothing there itself. Mirror
/// pods are left alone.
///
/// Unlike kube-apiserver, a pod naming an account that does not exist is not refused with 403
/// ("error looking up service account"): it is admitted as it is, without the token volume. A
/// skiff API server may run without the controllers that make each namespace's `default`
/// account (`skiff apiserver` with a lone kubelet), and its pods run as they did before service
/// accounts had tokens.
pub struct ServiceAccount;

#[async_trait::async_trait]
impl Plugin for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info.kind != "Pod" || a.operation != Operation::Create || a.subresource.is_some() {
            return Ok(());
        }
        let Some(pod) = a.object.as_deref_mut() else {
            return Ok(());
        };
        if pod
            .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
            .is_some()
        {
            return Ok(());
        }
        let name = default_service_account(pod);
        let accounts = &skiff_kinds::builtin::service_account::INFO;
        let account = match registry.get(accounts, a.namespace, &name, None).await {
            Ok(account) => account,
            Err(Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let automount = pod
            .pointer("/spec/automountServiceAccountToken")
            .and_then(Value::as_bool)
            .or_else(|| account["automountServiceAccountToken"].as_bool())
            .unwrap_or(true);
        if automount {
            mount_service_account_token(pod, &random_suffix());
        }
        Ok(())
    }
}

/// Sets `spec.serviceAccountName` (from the deprecated `serviceAccount`, else `default`) and
/// returns it.
pub fn default_service_account(pod: &mut Value) -> String {
    let spec = &mut pod["spec"];
    let given = ["serviceAccountName", "serviceAccount"]
        .iter()
        .find_map(|k| spec[*k].as_str().filter(|s| !s.is_empty()))
        .unwrap_or("default")
        .to_string();
    spec["serviceAccountName"] = json!(given);
    given
}

/// Five characters of the alphabet Kubernetes' generated names use (no vowels, no look-alikes).
fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Adds the projected service-account volume (named with `suffix`, unless the pod already has a
/// `kube-api-access-` volume) and mounts it at [`SERVICE_ACCOUNT_MOUNT_PATH`] in every init and
/// regular container that does not mount something there already.
pub fn mount_service_account_token(pod: &mut Value, suffix: &str) {
    let existing = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find(|n| n.starts_with(SERVICE_ACCOUNT_VOLUME_PREFIX))
        .map(str::to_string);
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| format!("{SERVICE_ACCOUNT_VOLUME_PREFIX}{suffix}"));
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod["spec"][list].as_array_mut() else {
            continue;
        };
        for container in containers {
            let taken = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"].as_str() == Some(SERVICE_ACCOUNT_MOUNT_PATH));
            if taken {
                continue;
            }
            if !container["volumeMounts"].is_array() {
                container["volumeMounts"] = json!([]);
            }
            if let Some(mounts) = container["volumeMounts"].as_array_mut() {
                mounts.push(json!({
                    "name": volume_name,
                    "readOnly": true,
                    "mountPath": SERVICE_ACCOUNT_MOUNT_PATH,
                }));
            }
            needed = true;
        }
    }
    if existing.is_some() || !needed {
        return;
    }
    if !pod["spec"]["volumes"].is_array() {
        pod["spec"]["volumes"] = json!([]);
    }
    if let Some(volumes) = pod["spec"]["volumes"].as_array_mut() {
        volumes.push(json!({
            "name": volume_name,
            "projected": {
                "defaultMode": 0o644,
                "sources": [
                    {"serviceAccountToken": {
                        "expirationSeconds": PROJECTED_TOKEN_EXPIRATION_SECONDS,
                        "path": "token",
                    }},
                    {"configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }},
                    {"downwardAPI": {
                        "items": [{
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }],
                    }},
                ],
            },
        }));
    }
}

/// Ranges services draw their addresses and node ports from.
#[derive(Debug, Clone)]
pub struct ServiceRanges {
    /// The first address of the ClusterIP range (its network address).
    pub cluster_ip_base: Ipv4Addr,
    /// The ClusterIP range's prefix length.
    pub cluster_ip_prefix: u8,
    /// The NodePort range, inclusive.
    pub node_ports: (u16, u16),
}

impl Default for ServiceRanges {
    /// 127.96.0.0/14 (inside loopback, clear of the pod ranges at 127.100.0.0 and up) and the
    /// Kubernetes default NodePort range 30000-32767.
    fn default() -> Self {
        ServiceRanges {
            cluster_ip_base: Ipv4Addr::new(127, 96, 0, 0),
            cluster_ip_prefix: 14,
            node_ports: (30000, 32767),
        }
    }
}

impl ServiceRanges {
    /// The default NodePort range with the ClusterIPs of `cidr` (`A.B.C.D/N`, IPv4, from /8 to
    /// /28), as `--service-cluster-ip-range` gives it; the base is the network address.
    pub fn with_cluster_ip_range(cidr: &str) -> std::result::Result<ServiceRanges, String> {
        let bad =
            || format!("invalid service range {cidr:?}: want an IPv4 CIDR such as 127.96.0.0/14");
        let (ip, prefix) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.trim().parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.trim().parse().map_err(|_| bad())?;
        if !(8..=28).contains(&prefix) {
            return Err(format!(
                "invalid service range {cidr:?}: the prefix must be from /8 to /28"
            ));
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        Ok(ServiceRanges {
            cluster_ip_base: Ipv4Addr::from(u32::from(ip) & mask),
            cluster_ip_prefix: prefix,
            ..ServiceRanges::default()
        })
    }

    fn ip_count(&self) -> u32 {
        1u32 << (32 - u32::from(self.cluster_ip_prefix))
    }

    fn contains(&self, ip: Ipv4Addr) -> bool {
        let base = u32::from(self.cluster_ip_base);
        let n = u32::from(ip);
        n > base && n < base + self.ip_count() - 1
    }

    /// The `kubernetes` Service's ClusterIP: the range's first address.
    pub fn kubernetes_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.cluster_ip_base) + 1)
    }

    /// The range as CIDR text.
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.cluster_ip_base, self.cluster_ip_prefix)
    }
}

/// Allocates ClusterIPs and NodePorts. In memory alone (one API server owns the log), what is in
/// use is rebuilt from the stored services at start-up and kept in memory after; with
/// [`ServiceIps::in_store`] (several API servers share the datastore) every value picked is
/// claimed in the store by a transaction ([`allocations`]) and memory is only a hint of what is
/// taken.
pub struct ServiceIps {
    ranges: ServiceRanges,
    /// Addresses and ports in use. One short critical section per allocation; never held across
    /// an await.
    used: Mutex<Used>,
    /// The shared store reservations are claimed in, if any.
    store: Option<Arc<dyn skiff_store::Store>>,
    /// What the last admission of each Service (`namespace/name`) newly took: what a failed write
    /// gives back (never what the stored Service already held).
    pending: Mutex<std::collections::HashMap<String, Taken>>,
}

/// What one admission newly reserved.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Taken {
    /// ClusterIPs.
    pub ips: Vec<Ipv4Addr>,
    /// NodePorts.
    pub ports: Vec<u16>,
}

impl Taken {
    fn keys(&self) -> Vec<Vec<u8>> {
        self.ips
            .iter()
            .map(|ip| allocations::ip_key(*ip))
            .chain(self.ports.iter().map(|p| allocations::port_key(*p)))
            .collect()
    }
}

/// How many times a create picks again after another server claimed what it picked.
const CLAIM_ATTEMPTS: usize = 8;

#[derive(Default)]
struct Used {
    ips: BTreeSet<Ipv4Addr>,
    ports: BTreeSet<u16>,
}

fn service_ips(service: &Value) -> Vec<Ipv4Addr> {
    let mut ips: Vec<Ipv4Addr> = service
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str()?.parse().ok()).collect())
        .unwrap_or_default();
    if let Some(ip) = service
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        && !ips.contains(&ip)
    {
        ips.push(ip);
    }
    ips
}

fn service_node_ports(service: &Value) -> Vec<u16> {
    service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ports| {
            ports
                .iter()
                .filter_map(|p| p.get("nodePort")?.as_u64())
                .filter_map(|p| u16::try_from(p).ok())
                .collect()
        })
        .unwrap_or_default()
}

fn wants_node_ports(service: &Value) -> bool {
    matches!(
        service.pointer("/spec/type").and_then(Value::as_str),
        Some("NodePort" | "LoadBalancer")
    )
}

fn is_headless(service: &Value) -> bool {
    service.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None")
        || service.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName")
}

impl ServiceIps {
    /// An allocator over `ranges` with `existing` services' addresses and ports marked used.
    pub fn new(ranges: ServiceRanges, existing: &[Value]) -> ServiceIps {
        let mut used = Used::default();
        // The first address is the `kubernetes` service's, as in Kubernetes.
        used.ips
            .insert(Ipv4Addr::from(u32::from(ranges.cluster_ip_base) + 1));
        for service in existing {
            used.ips.extend(service_ips(service));
            used.ports.extend(service_node_ports(service));
        }
        ServiceIps {
            ranges,
            used: Mutex::new(used),
            store: None,
            pending: Mutex::default(),
        }
    }

    /// Claims every value in `store` as well (several API servers share it).
    pub fn in_store(mut self, store: Arc<dyn skiff_store::Store>) -> ServiceIps {
        self.store = Some(store);
        self
    }

    /// What a Service holds that has reservation keys: its in-range ClusterIPs and its
    /// NodePorts.
    fn held(&self, service: &Value) -> (Vec<Ipv4Addr>, Vec<u16>) {
        let ips = service_ips(service)
            .into_iter()
            .filter(|ip| self.ranges.contains(*ip) || *ip == self.ranges.kubernetes_ip())
            .collect();
        (ips, service_node_ports(service))
    }

    /// One repair pass over the store's reservations ([`allocations::repair`]); afterwards
    /// memory knows every value reserved by any server. Nothing to do without a store.
    pub async fn repair(&self, grace: std::time::Duration) -> Result<()> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let prefix = skiff_kinds::builtin::service::INFO.storage_prefix();
        let repaired =
            allocations::repair(store.as_ref(), prefix.as_bytes(), |s| self.held(s), grace).await?;
        for duplicate in &repaired.duplicates {
            tracing::warn!(%duplicate, "a ClusterIP or NodePort is held twice");
        }
        if repaired.created + repaired.deleted > 0 {
            tracing::info!(
                created = repaired.created,
                deleted = repaired.deleted,
                "repaired the ClusterIP/NodePort reservations"
            );
        }
        let mut used = self.lock();
        used.ips = repaired.ips;
        used.ips.insert(self.ranges.kubernetes_ip());
        used.ports = repaired.ports;
        Ok(())
    }

    /// Admits a create or update of a Service: picks and reserves what it needs (claimed in the
    /// store when there is one, picking again when another server got there first).
    async fn admit_service(
        &self,
        info: &ResourceInfo,
        owner: &str,
        name: &str,
        service: &mut Value,
        old: Option<&Value>,
    ) -> Result<()> {
        let Some(store) = &self.store else {
            let taken = self.reserve(info, name, service, old)?;
            self.pending_set(owner, taken);
            return Ok(());
        };
        let original = service.clone();
        // The first attempt trusts the store alone for values the user asked for (memory may
        // remember another server's value that is free again); after a lost claim, memory
        // knows the values taken and the check gives the user's error.
        let mut check_requested = false;
        for _ in 0..CLAIM_ATTEMPTS {
            let taken = self.reserve_checked(info, name, service, old, check_requested)?;
            let claimed = allocations::claim(store.as_ref(), owner, &taken.keys()).await;
            match claimed {
                Ok(allocations::Claimed::All) => {
                    self.pending_set(owner, taken);
                    return Ok(());
                }
                Ok(allocations::Claimed::Taken { reserved, .. }) => {
                    // Give back the picks nobody else holds, then learn every value reserved
                    // anywhere: the next pick avoids them all.
                    let mut used = self.lock();
                    for ip in &taken.ips {
                        if !reserved.ips.contains(ip) {
                            used.ips.remove(ip);
                        }
                    }
                    for port in &taken.ports {
                        if !reserved.ports.contains(port) {
                            used.ports.remove(port);
                        }
                    }
                    used.ips.extend(reserved.ips);
                    used.ports.extend(reserved.ports);
                    drop(used);
                    *service = original.clone();
                    check_requested = true;
                }
                Err(e) => {
                    self.forget(&taken);
                    return Err(e);
                }
            }
        }
        Err(Error::Unavailable(
            "failed to allocate a ClusterIP or NodePort: other API servers took every pick; try again"
                .into(),
        ))
    }

    fn pending_set(&self, owner: &str, taken: Taken) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(owner.to_string(), taken);
    }

    /// Drops `taken` from memory.
    fn forget(&self, taken: &Taken) {
        let mut used = self.lock();
        for ip in &taken.ips {
            used.ips.remove(ip);
        }
        for port in &taken.ports {
            used.ports.remove(port);
        }
    }

    /// Releases what a Service admission took for a write that did not happen.
    async fn give_back(&self, owner: &str) {
        let taken = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(owner)
            .unwrap_or_default();
        self.forget(&taken);
        self.release_keys(owner, taken.keys()).await;
    }

    async fn release_keys(&self, owner: &str, keys: Vec<Vec<u8>>) {
        let Some(store) = &self.store else {
            return;
        };
        for key in keys {
            if let Err(e) = allocations::release(store.as_ref(), owner, &key).await {
                tracing::warn!(
                    key = %String::from_utf8_lossy(&key), error = %e,
                    "cannot release a reservation; the repair pass will"
                );
            }
        }
    }

    /// The ranges allocated from.
    pub fn ranges(&self) -> &ServiceRanges {
        &self.ranges
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Used> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn allocate_ip(&self, used: &mut Used) -> Option<Ipv4Addr> {
        use rand::Rng;
        let base = u32::from(self.ranges.cluster_ip_base);
        let count = self.ranges.ip_count();
        let start = rand::rng().random_range(1..count - 1);
        (0..count - 2)
            .map(|i| Ipv4Addr::from(base + 1 + (start - 1 + i) % (count - 2)))
            .find(|ip| !used.ips.contains(ip))
            .inspect(|ip| {
                used.ips.insert(*ip);
            })
    }

    fn allocate_port(&self, used: &mut Used) -> Option<u16> {
        use rand::Rng;
        let (lo, hi) = self.ranges.node_ports;
        let span = u32::from(hi - lo) + 1;
        let start = rand::rng().random_range(0..span);
        (0..span)
            .map(|i| lo + ((start + i) % span) as u16)
            .find(|p| !used.ports.contains(p))
            .inspect(|p| {
                used.ports.insert(*p);
            })
    }

    fn invalid(info: &ResourceInfo, name: &str, field: &str, message: String) -> Error {
        Error::invalid(
            info,
            name,
            vec![Cause {
                field: field.into(),
                reason: "FieldValueInvalid".into(),
                message,
            }],
        )
    }

    /// Reserves in memory what a new or changed service needs; on error nothing stays reserved.
    fn reserve(
        &self,
        info: &ResourceInfo,
        name: &str,
        service: &mut Value,
        old: Option<&Value>,
    ) -> Result<Taken> {
        self.reserve_checked(info, name, service, old, true)
    }

    /// [`ServiceIps::reserve`]; `check_requested` false takes values the user asked for even if
    /// memory says they are used (the store's claim decides).
    fn reserve_checked(
        &self,
        info: &ResourceInfo,
        name: &str,
        service: &mut Value,
        old: Option<&Value>,
        check_requested: bool,
    ) -> Result<Taken> {
        let mut used = self.lock();
        let mut taken_ips = Vec::new();
        let mut taken_ports = Vec::new();
        let result = (|| {
            let old_ips = old.map(service_ips).unwrap_or_default();
            if !is_headless(service) {
                let requested = service_ips(service);
                if requested.is_empty() {
                    let ip = match old_ips.first() {
                        Some(ip) => *ip,
                        None => {
                            let ip = self.allocate_ip(&mut used).ok_or_else(|| {
                                Error::Internal(format!(
                                    "failed to allocate a serviceIP: range {} is full",
                                    self.ranges.cidr()
                                ))
                            })?;
                            taken_ips.push(ip);
                            ip
                        }
                    };
                    service["spec"]["clusterIP"] = json!(ip.to_string());
                    service["spec"]["clusterIPs"] = json!([ip.to_string()]);
                } else {
                    for ip in requested {
                        if old_ips.contains(&ip) {
                            continue;
                        }
                        if !self.ranges.contains(ip) {
                            return Err(Self::invalid(
                                info,
                                name,
                                "spec.clusterIPs",
                                format!(
                                    "Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                                    self.ranges.cidr()
                                ),
                            ));
                        }
                        if !used.ips.insert(ip) && check_requested {
                            return Err(Self::invalid(
                                info,
                                name,
                                "spec.clusterIPs",
                                format!(
                                    "Invalid value: []string{{\"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated"
                                ),
                            ));
                        }
                        taken_ips.push(ip);
                    }
                    let first = service_ips(service)[0].to_string();
                    service["spec"]["clusterIP"] = json!(first);
                    service["spec"]["clusterIPs"] = json!([first]);
                }
            }
            if wants_node_ports(service) {
                let old_ports = old.map(service_node_ports).unwrap_or_default();
                let (lo, hi) = self.ranges.node_ports;
                if let Some(ports) = service
                    .pointer_mut("/spec/ports")
                    .and_then(Value::as_array_mut)
                {
                    for (i, port) in ports.iter_mut().enumerate() {
                        match port.get("nodePort").and_then(Value::as_u64) {
                            Some(p) => {
                                let p = u16::try_from(p).unwrap_or(0);
                                if old_ports.contains(&p) {
                                    continue;
                                }
                                if p < lo || p > hi {
                                    return Err(Self::invalid(
                                        info,
                                        name,
                                        &format!("spec.ports[{i}].nodePort"),
                                        format!(
                                            "Invalid value: {p}: provided port is not in the valid range. The range of valid ports is {lo}-{hi}"
                                        ),
                                    ));
                                }
                                if !used.ports.insert(p) && check_requested {
                                    return Err(Self::invalid(
                                        info,
                                        name,
                                        &format!("spec.ports[{i}].nodePort"),
                                        format!(
                                            "Invalid value: {p}: provided port is already allocated"
                                        ),
                                    ));
                                }
                                taken_ports.push(p);
                            }
                            None => {
                                let p = self.allocate_port(&mut used).ok_or_else(|| {
                                    Error::Internal(
                                        "failed to allocate a nodePort: range is full".into(),
                                    )
                                })?;
                                taken_ports.push(p);
                                port["nodePort"] = json!(p);
                            }
                        }
                    }
                }
            }
            Ok(())
        })();
        if result.is_err() {
            for ip in &taken_ips {
                used.ips.remove(ip);
            }
            for p in &taken_ports {
                used.ports.remove(p);
            }
        }
        result?;
        Ok(Taken {
            ips: taken_ips,
            ports: taken_ports,
        })
    }

    fn release(&self, service: &Value) {
        let mut used = self.lock();
        for ip in service_ips(service) {
            used.ips.remove(&ip);
        }
        for port in service_node_ports(service) {
            used.ports.remove(&port);
        }
    }
}

#[async_trait::async_trait]
impl Plugin for ServiceIps {
    fn name(&self) -> &'static str {
        "ServiceIPs"
    }

    async fn admit(&self, _registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info.kind != "Service" || a.subresource.is_some() {
            return Ok(());
        }
        let owner = format!("{}/{}", a.namespace.unwrap_or_default(), a.name);
        let old = match a.operation {
            Operation::Create => None,
            Operation::Update => a.old,
            Operation::Delete => return Ok(()),
        };
        match a.object.as_deref_mut() {
            Some(service) => {
                self.admit_service(a.info, &owner, a.name, service, old)
                    .await
            }
            None => Ok(()),
        }
    }

    async fn abandoned(&self, info: &ResourceInfo, object: &Value) {
        if info.kind == "Service" {
            // Only what this write newly took: what the stored Service holds stays its own.
            self.give_back(&allocations::owner_of(object)).await;
        }
    }

    async fn removed(&self, info: &ResourceInfo, object: &Value) {
        if info.kind == "Service" {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&allocations::owner_of(object));
            self.release(object);
            let (ips, ports) = self.held(object);
            let keys = ips
                .into_iter()
                .map(allocations::ip_key)
                .chain(ports.into_iter().map(allocations::port_key))
                .collect();
            self.release_keys(&allocations::owner_of(object), keys)
                .await;
        }
    }
}

/// A plugin's refusal of the write `a` describes, as kube-apiserver words admission refusals:
/// `pods "web-1" is forbidden: WHY` (403; the resource is `plural.group` outside the core group).
pub(crate) fn forbidden(a: &Attributes<'_>, why: impl std::fmt::Display) -> Error {
    let resource = if a.info.group.is_empty() {
        a.info.plural.to_string()
    } else {
        format!("{}.{}", a.info.plural, a.info.group)
    };
    Error::Forbidden(format!("{resource} \"{}\" is forbidden: {why}", a.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feedback_keeps_valid_audit_annotations_and_their_first_values() {
        let feedback = Feedback::default();
        feedback
            .annotate("hook.example.com/verdict".into(), "ok".into())
            .unwrap();
        // The same value again is no change; another one is refused.
        feedback
            .annotate("hook.example.com/verdict".into(), "ok".into())
            .unwrap();
        let e = feedback
            .annotate("hook.example.com/verdict".into(), "changed".into())
            .unwrap_err();
        assert!(e.contains("cannot be changed"), "{e}");
        for bad in [
            "verdict",
            "hook.example.com/a/b",
            "hook.example.com/",
            "Hook_Example/verdict",
            "hook.example.com/bad key",
        ] {
            assert!(
                feedback.annotate(bad.into(), "x".into()).is_err(),
                "{bad} was taken"
            );
        }
        assert_eq!(
            feedback.take_annotations(),
            [("hook.example.com/verdict".to_string(), "ok".to_string())].into()
        );
    }

    #[test]
    fn service_ranges_come_from_a_cidr() {
        let r = ServiceRanges::with_cluster_ip_range("127.98.3.7/24").unwrap();
        assert_eq!(r.cluster_ip_base, Ipv4Addr::new(127, 98, 3, 0));
        assert_eq!(r.kubernetes_ip(), Ipv4Addr::new(127, 98, 3, 1));
        assert!(r.contains(Ipv4Addr::new(127, 98, 3, 254)));
        assert!(!r.contains(Ipv4Addr::new(127, 98, 3, 255)));
        assert!(!r.contains(Ipv4Addr::new(127, 96, 0, 1)));
        assert_eq!(r.node_ports, ServiceRanges::default().node_ports);
        for bad in [
            "127.98.0.0",
            "127.98.0.0/33",
            "127.98.0.0/30",
            "fd00::/64",
            "x/16",
        ] {
            assert!(ServiceRanges::with_cluster_ip_range(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pods_get_the_projected_token_in_every_container_that_lacks_one() {
        let mut pod = json!({"spec": {
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "a", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "own", "volumeMounts": [{"name": "mine", "mountPath": SERVICE_ACCOUNT_MOUNT_PATH}]},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "mine", "emptyDir": {}}],
        }});
        assert_eq!(default_service_account(&mut pod), "default");
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        mount_service_account_token(&mut pod, "x2b4z");
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 3);
        assert_eq!(
            volumes[2],
            json!({"name": "kube-api-access-x2b4z", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}})
        );
        let mount = json!({"name": "kube-api-access-x2b4z", "readOnly": true,
            "mountPath": SERVICE_ACCOUNT_MOUNT_PATH});
        assert_eq!(
            pod["spec"]["initContainers"][0]["volumeMounts"],
            json!([mount])
        );
        assert_eq!(pod["spec"]["containers"][0]["volumeMounts"][1], mount);
        // A container that mounts its own thing there keeps it.
        assert_eq!(
            pod["spec"]["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        // Admitting again adds nothing.
        let before = pod.clone();
        mount_service_account_token(&mut pod, "other");
        assert_eq!(pod, before);
        // The deprecated field names the account when the new one does not.
        let mut old = json!({"spec": {"serviceAccount": "builder", "containers": []}});
        assert_eq!(default_service_account(&mut old), "builder");
        // With nothing to mount it into, no volume is added.
        let mut empty = json!({"spec": {"containers": [{"name": "c", "volumeMounts":
            [{"name": "v", "mountPath": SERVICE_ACCOUNT_MOUNT_PATH}]}]}});
        mount_service_account_token(&mut empty, "zzzzz");
        assert!(empty["spec"]["volumes"].is_null());
        assert_eq!(random_suffix().len(), 5);
    }

    fn services() -> &'static ResourceInfo {
        &skiff_kinds::builtin::service::INFO
    }

    #[test]
    fn allocates_unique_ips_in_range_and_releases_them() {
        let ranges = ServiceRanges {
            cluster_ip_base: Ipv4Addr::new(127, 96, 0, 0),
            cluster_ip_prefix: 29, // 6 usable, one kept for `kubernetes`
            node_ports: (30000, 30001),
        };
        let ips = ServiceIps::new(ranges.clone(), &[]);
        let mut seen = BTreeSet::new();
        let mut made = Vec::new();
        for i in 0..5 {
            let mut svc =
                json!({"metadata": {"name": format!("s{i}")}, "spec": {"ports": [{"port": 80}]}});
            ips.reserve(services(), "s", &mut svc, None).unwrap();
            let ip: Ipv4Addr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
            assert!(ranges.contains(ip));
            assert_ne!(ip, Ipv4Addr::new(127, 96, 0, 1));
            assert!(seen.insert(ip), "duplicate {ip}");
            made.push(svc);
        }
        let mut full = json!({"metadata": {"name": "x"}, "spec": {}});
        assert!(ips.reserve(services(), "x", &mut full, None).is_err());
        ips.release(&made[0]);
        let mut again = json!({"metadata": {"name": "y"}, "spec": {}});
        ips.reserve(services(), "y", &mut again, None).unwrap();
        assert_eq!(again["spec"]["clusterIP"], made[0]["spec"]["clusterIP"]);
    }

    #[test]
    fn requested_ip_must_be_free_and_in_range() {
        let ips = ServiceIps::new(ServiceRanges::default(), &[]);
        let mut a = json!({"spec": {"clusterIP": "127.96.0.10"}});
        ips.reserve(services(), "a", &mut a, None).unwrap();
        let mut b = json!({"spec": {"clusterIP": "127.96.0.10"}});
        let err = ips.reserve(services(), "b", &mut b, None).unwrap_err();
        assert!(err.to_string().contains("already allocated"), "{err}");
        let mut c = json!({"spec": {"clusterIP": "10.0.0.1"}});
        let err = ips.reserve(services(), "c", &mut c, None).unwrap_err();
        assert!(err.to_string().contains("not in the valid range"), "{err}");
        let mut headless = json!({"spec": {"clusterIP": "None"}});
        ips.reserve(services(), "h", &mut headless, None).unwrap();
        assert_eq!(headless["spec"]["clusterIP"], "None");
    }

    #[test]
    fn node_ports_allocated_for_node_port_services() {
        let ips = ServiceIps::new(ServiceRanges::default(), &[]);
        let mut svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30080}]}});
        ips.reserve(services(), "s", &mut svc, None).unwrap();
        let p0 = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!((30000..=32767).contains(&p0));
        assert_eq!(svc["spec"]["ports"][1]["nodePort"], 30080);
        let mut clash =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}});
        assert!(ips.reserve(services(), "t", &mut clash, None).is_err());
        // An update keeps what the service already holds.
        let old = svc.clone();
        let mut updated = svc.clone();
        ips.reserve(services(), "s", &mut updated, Some(&old))
            .unwrap();
        assert_eq!(updated["spec"]["clusterIP"], old["spec"]["clusterIP"]);
    }

    #[test]
    fn existing_services_are_remembered() {
        let existing = vec![
            json!({"spec": {"clusterIP": "127.96.0.9", "type": "NodePort",
                                            "ports": [{"nodePort": 31000}]}}),
        ];
        let ips = ServiceIps::new(ServiceRanges::default(), &existing);
        let mut svc = json!({"spec": {"clusterIP": "127.96.0.9"}});
        assert!(ips.reserve(services(), "s", &mut svc, None).is_err());
        let mut np = json!({"spec": {"type": "NodePort", "ports": [{"nodePort": 31000}]}});
        assert!(ips.reserve(services(), "n", &mut np, None).is_err());
    }

    /// Refuses in its validating phase when `refuse` and counts what reached it.
    struct Validator {
        refuse: bool,
        seen: Arc<Mutex<Vec<&'static str>>>,
    }

    #[async_trait::async_trait]
    impl Plugin for Validator {
        fn name(&self) -> &'static str {
            "Validator"
        }
        async fn admit(&self, _registry: &Registry, _a: &mut Attributes<'_>) -> Result<()> {
            Ok(())
        }
        async fn validate(&self, _registry: &Registry, a: &Attributes<'_>) -> Result<()> {
            self.seen
                .lock()
                .unwrap()
                .push(if self.refuse { "refuse" } else { "pass" });
            assert_eq!(
                a.object.as_deref().unwrap()["v"],
                1,
                "validate sees the admitted object"
            );
            if self.refuse {
                return Err(Error::Forbidden("no".into()));
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_validating_phase_runs_in_order_and_stops_at_the_first_refusal() {
        let (_dir, store) = shared_store();
        let registry = Registry::new(store);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let plugin = |refuse| -> Box<dyn Plugin> {
            Box::new(Validator {
                refuse,
                seen: seen.clone(),
            })
        };
        let chain = Chain::new(vec![plugin(false), plugin(true), plugin(false)]);
        let user = crate::auth::User::admin();
        let mut object = json!({"v": 1});
        let attributes = Attributes {
            operation: Operation::Create,
            info: services(),
            subresource: None,
            namespace: Some("default"),
            name: "s",
            object: Some(&mut object),
            old: None,
            user: &user,
            dry_run: false,
            feedback: None,
        };
        let refused = chain.validate(&registry, &attributes).await;
        assert!(matches!(refused, Err(Error::Forbidden(_))), "{refused:?}");
        assert_eq!(*seen.lock().unwrap(), vec!["pass", "refuse"]);
        // The built-in plugins have no validating phase: they pass.
        let builtin = Chain::new(vec![Box::new(NamespaceLifecycle::default())]);
        builtin.validate(&registry, &attributes).await.unwrap();
    }

    #[tokio::test]
    async fn namespace_lifecycle_trusts_its_mirror_only_to_let_a_create_in() {
        let (_dir, store) = shared_store();
        let registry = Registry::new(store);
        let namespaces = &skiff_kinds::builtin::namespace::INFO;
        let active = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team"}, "status": {"phase": "Active"}});
        registry
            .create(namespaces, active.clone(), None)
            .await
            .unwrap();
        async fn create(
            plugin: &NamespaceLifecycle,
            registry: &Registry,
            namespace: &str,
        ) -> Result<()> {
            let user = crate::auth::User::admin();
            let mut object = json!({"metadata": {"name": "cfg", "namespace": namespace}});
            let mut attributes = Attributes {
                operation: Operation::Create,
                info: &skiff_kinds::builtin::config_map::INFO,
                subresource: None,
                namespace: Some(namespace),
                name: "cfg",
                object: Some(&mut object),
                old: None,
                user: &user,
                dry_run: false,
                feedback: None,
            };
            plugin.admit(registry, &mut attributes).await
        }
        let plugin = NamespaceLifecycle::default();
        plugin.0.listed(&[]);
        // Not in the mirror (made a moment ago): the log has it.
        create(&plugin, &registry, "team").await.unwrap();
        // In neither: 404.
        let missing = create(&plugin, &registry, "nowhere").await.unwrap_err();
        assert!(matches!(missing, Error::NotFound { .. }), "{missing:?}");
        // The mirror says terminating, but the namespace was deleted and made again since: the
        // log lets the create in.
        let mut terminating = active.clone();
        terminating["status"]["phase"] = json!("Terminating");
        plugin.0.changed(&terminating, true);
        create(&plugin, &registry, "team").await.unwrap();
        // Terminating in the log too: refused.
        registry
            .update(namespaces, None, "team", None, false, |mut ns: Value| {
                ns["status"]["phase"] = json!("Terminating");
                async move { Ok(crate::registry::Update::Write(ns)) }
            })
            .await
            .unwrap();
        let refused = create(&plugin, &registry, "team")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("because it is being terminated"),
            "{refused}"
        );
        // An active namespace in the mirror is taken at its word, without reading the log.
        plugin.0.changed(&active, true);
        create(&plugin, &registry, "team").await.unwrap();
    }

    fn shared_store() -> (tempfile::TempDir, Arc<dyn skiff_store::Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store = skiff_store::SledStore::open(skiff_store::Config::new(dir.path())).unwrap();
        (dir, Arc::new(store))
    }

    async fn keys_under(store: &Arc<dyn skiff_store::Store>, prefix: &str) -> Vec<String> {
        store
            .range(skiff_store::RangeRequest::new(
                skiff_store::KeyRange::prefix(prefix.as_bytes().to_vec()),
            ))
            .await
            .unwrap()
            .kvs
            .iter()
            .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
            .collect()
    }

    fn node_port_service(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"},
               "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_servers_sharing_a_store_never_hand_out_the_same_ip_or_port() {
        let (_dir, store) = shared_store();
        // 29 addresses for services and 40 ports: picks collide often between the two servers,
        // whose memories know nothing of each other.
        let ranges = ServiceRanges {
            cluster_ip_base: Ipv4Addr::new(127, 96, 0, 0),
            cluster_ip_prefix: 27,
            node_ports: (30000, 30039),
        };
        let a = Arc::new(ServiceIps::new(ranges.clone(), &[]).in_store(store.clone()));
        let b = Arc::new(ServiceIps::new(ranges.clone(), &[]).in_store(store.clone()));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..26 {
            let ips = if i % 2 == 0 { a.clone() } else { b.clone() };
            tasks.spawn(async move {
                let name = format!("s{i}");
                let mut svc = node_port_service(&name);
                ips.admit_service(
                    services(),
                    &format!("default/{name}"),
                    &name,
                    &mut svc,
                    None,
                )
                .await
                .map(|()| (i, svc))
            });
        }
        let mut made = Vec::new();
        while let Some(done) = tasks.join_next().await {
            made.push(
                done.unwrap()
                    .expect("every create gets an address and a port"),
            );
        }
        made.sort_by_key(|(i, _)| *i);
        let made: Vec<Value> = made.into_iter().map(|(_, s)| s).collect();
        let ips: BTreeSet<String> = made
            .iter()
            .map(|s| s["spec"]["clusterIP"].as_str().unwrap().to_string())
            .collect();
        let ports: BTreeSet<u64> = made
            .iter()
            .map(|s| s["spec"]["ports"][0]["nodePort"].as_u64().unwrap())
            .collect();
        assert_eq!(ips.len(), 26, "duplicate ClusterIPs: {made:?}");
        assert_eq!(ports.len(), 26, "duplicate NodePorts: {made:?}");
        assert_eq!(
            keys_under(&store, allocations::SERVICE_IPS_PREFIX)
                .await
                .len(),
            26
        );
        assert_eq!(
            keys_under(&store, allocations::NODE_PORTS_PREFIX)
                .await
                .len(),
            26
        );

        // A value one server handed out is "already allocated" through the other.
        let first = made[0].clone();
        let ip = first["spec"]["clusterIP"].as_str().unwrap().to_string();
        let mut want = json!({"metadata": {"name": "x", "namespace": "default"},
                              "spec": {"clusterIP": ip}});
        // s0 was made through a.
        let (holder, other) = (&a, &b);
        let err = other
            .admit_service(services(), "default/x", "x", &mut want, None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("already allocated"), "{err}");
        // Deleted through one server, it is free for the other at once.
        holder.removed(services(), &first).await;
        assert_eq!(
            keys_under(&store, allocations::SERVICE_IPS_PREFIX)
                .await
                .len(),
            25
        );
        let mut want = json!({"metadata": {"name": "x", "namespace": "default"},
                              "spec": {"clusterIP": ip}});
        other
            .admit_service(services(), "default/x", "x", &mut want, None)
            .await
            .unwrap();
        assert_eq!(want["spec"]["clusterIP"], ip.as_str());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_lost_claim_names_its_clashes_and_every_reservation() {
        let (_dir, store) = shared_store();
        let held = allocations::ip_key(Ipv4Addr::new(127, 96, 0, 7));
        let port = allocations::port_key(30111);
        let free = allocations::ip_key(Ipv4Addr::new(127, 96, 0, 8));
        for key in [&held, &port] {
            let claimed =
                allocations::claim(store.as_ref(), "default/a", std::slice::from_ref(key));
            assert_eq!(claimed.await.unwrap(), allocations::Claimed::All);
        }
        let lost = allocations::claim(store.as_ref(), "default/b", &[held.clone(), free.clone()])
            .await
            .unwrap();
        assert_eq!(
            lost,
            allocations::Claimed::Taken {
                clashed: BTreeSet::from([held]),
                reserved: allocations::Reserved {
                    ips: BTreeSet::from([Ipv4Addr::new(127, 96, 0, 7)]),
                    ports: BTreeSet::from([30111]),
                },
            }
        );
        // All or nothing: the free key was not created.
        assert_eq!(
            keys_under(&store, allocations::SERVICE_IPS_PREFIX).await,
            vec!["/registry/ranges/serviceips/127.96.0.7".to_string()]
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failed_write_gives_back_only_what_it_took() {
        let (_dir, store) = shared_store();
        let ips = ServiceIps::new(ServiceRanges::default(), &[]).in_store(store.clone());
        let mut svc = node_port_service("web");
        ips.admit_service(services(), "default/web", "web", &mut svc, None)
            .await
            .unwrap();
        // An update that adds a port, whose write then fails.
        let old = svc.clone();
        let mut more = svc.clone();
        more["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"port": 81}));
        ips.admit_service(services(), "default/web", "web", &mut more, Some(&old))
            .await
            .unwrap();
        assert_eq!(
            keys_under(&store, allocations::NODE_PORTS_PREFIX)
                .await
                .len(),
            2
        );
        ips.abandoned(services(), &more).await;
        // The stored Service's address and port keep their reservations.
        let ports = keys_under(&store, allocations::NODE_PORTS_PREFIX).await;
        assert_eq!(ports.len(), 1, "{ports:?}");
        assert!(ports[0].ends_with(&old["spec"]["ports"][0]["nodePort"].to_string()));
        assert_eq!(
            keys_under(&store, allocations::SERVICE_IPS_PREFIX)
                .await
                .len(),
            1
        );
        // The same holds in memory alone (the old release freed the stored Service's address).
        let memory = ServiceIps::new(ServiceRanges::default(), &[]);
        let mut svc = json!({"metadata": {"name": "m", "namespace": "default"}, "spec": {}});
        memory
            .admit_service(services(), "default/m", "m", &mut svc, None)
            .await
            .unwrap();
        let mut update = svc.clone();
        memory
            .admit_service(services(), "default/m", "m", &mut update, Some(&svc))
            .await
            .unwrap();
        memory.abandoned(services(), &update).await;
        let ip: Ipv4Addr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(memory.lock().ips.contains(&ip));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn repair_reserves_what_services_hold_and_drops_old_orphans() {
        let (_dir, store) = shared_store();
        let info = services();
        // A Service written before reservations were kept, and a claim whose Service never came.
        let stored = json!({"metadata": {"name": "old", "namespace": "default"},
            "spec": {"clusterIP": "127.96.0.20", "type": "NodePort", "ports": [{"port": 80, "nodePort": 30500}]}});
        store
            .put(
                info.storage_key(Some("default"), "old").into_bytes(),
                serde_json::to_vec(&stored).unwrap(),
                None,
            )
            .await
            .unwrap();
        let orphan = allocations::ip_key(Ipv4Addr::new(127, 96, 0, 30));
        assert_eq!(
            allocations::claim(
                store.as_ref(),
                "default/gone",
                std::slice::from_ref(&orphan)
            )
            .await
            .unwrap(),
            allocations::Claimed::All
        );
        let ips = ServiceIps::new(ServiceRanges::default(), &[]).in_store(store.clone());
        // A young orphan is kept (its Service may be on its way).
        ips.repair(std::time::Duration::from_secs(3600))
            .await
            .unwrap();
        let keys = keys_under(&store, "/registry/ranges/").await;
        assert_eq!(
            keys,
            vec![
                "/registry/ranges/serviceips/127.96.0.20".to_string(),
                "/registry/ranges/serviceips/127.96.0.30".to_string(),
                "/registry/ranges/servicenodeports/30500".to_string(),
            ]
        );
        // Memory now knows them all: asking for one is refused.
        let mut want = json!({"metadata": {"name": "x", "namespace": "default"},
                              "spec": {"clusterIP": "127.96.0.30"}});
        assert!(ips.reserve(info, "x", &mut want, None).is_err());
        // Past the grace period it goes; what the Service holds stays.
        ips.repair(std::time::Duration::ZERO).await.unwrap();
        let keys = keys_under(&store, "/registry/ranges/").await;
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(!keys.iter().any(|k| k.ends_with("127.96.0.30")));
        let mut want = json!({"metadata": {"name": "x", "namespace": "default"},
                              "spec": {"clusterIP": "127.96.0.30"}});
        ips.reserve(info, "x", &mut want, None).unwrap();
    }
}

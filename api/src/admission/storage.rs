//! The storage admission plugins, as kube-apiserver's: `DefaultStorageClass` (a claim that names
//! no class gets the default one), `StorageObjectInUseProtection` (claims and volumes get their
//! protection finalizers on create, removed by the controllers once nothing uses them) and
//! `PersistentVolumeClaimResize` (a claim grows only when its class allows expansion).

use serde_json::{Value, json};
use skiff_kinds::builtin::{persistent_volume, persistent_volume_claim, storage_class};
use skiff_kinds::validation::quantity;

use super::{Attributes, Operation, Plugin};
use crate::error::{Error, Result};
use crate::registry::Registry;

/// The finalizer that keeps a claim while a pod uses it.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The finalizer that keeps a volume while a claim is bound to it.
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

/// The default StorageClass among `classes` ([`skiff_kinds::builtin::newest_default`]).
pub fn default_class(classes: &[Value]) -> Option<String> {
    skiff_kinds::builtin::newest_default(classes, storage_class::is_default)
}

/// Whether a claim says nothing about its class (an explicit `""` asks for no class).
fn names_no_class(claim: &Value) -> bool {
    claim["spec"]["storageClassName"].is_null()
        && claim["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"].is_null()
}

/// A claim without a class gets the default one.
pub struct DefaultStorageClass;

#[async_trait::async_trait]
impl Plugin for DefaultStorageClass {
    fn name(&self) -> &'static str {
        "DefaultStorageClass"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info != &persistent_volume_claim::INFO
            || a.operation != Operation::Create
            || a.subresource.is_some()
        {
            return Ok(());
        }
        let Some(claim) = a.object.as_deref_mut() else {
            return Ok(());
        };
        if !names_no_class(claim) {
            return Ok(());
        }
        let classes = registry
            .list(&storage_class::INFO, None, None, None, None, None)
            .await?;
        if let Some(class) = default_class(&classes.items)
            && let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut)
        {
            spec.insert("storageClassName".into(), json!(class));
        }
        Ok(())
    }
}

/// Adds `finalizer` to `object`'s metadata unless it is there.
fn add_finalizer(object: &mut Value, finalizer: &str) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(items) = list.as_array_mut()
        && !items.iter().any(|f| f == finalizer)
    {
        items.push(json!(finalizer));
    }
}

/// Claims and volumes carry their protection finalizer from creation.
pub struct StorageObjectInUseProtection;

#[async_trait::async_trait]
impl Plugin for StorageObjectInUseProtection {
    fn name(&self) -> &'static str {
        "StorageObjectInUseProtection"
    }

    async fn admit(&self, _registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.operation != Operation::Create || a.subresource.is_some() {
            return Ok(());
        }
        let finalizer = if a.info == &persistent_volume_claim::INFO {
            PVC_PROTECTION
        } else if a.info == &persistent_volume::INFO {
            PV_PROTECTION
        } else {
            return Ok(());
        };
        if let Some(object) = a.object.as_deref_mut() {
            add_finalizer(object, finalizer);
        }
        Ok(())
    }
}

/// The storage a claim requests, in nano-units.
fn requested(claim: &Value) -> Option<i128> {
    let raw = claim["spec"]["resources"]["requests"]["storage"].as_str()?;
    quantity::parse(raw).ok().map(|q| q.nanos())
}

/// Whether an update of a claim from `old` to `new` grows its request.
pub fn grows(new: &Value, old: &Value) -> bool {
    matches!((requested(new), requested(old)), (Some(n), Some(o)) if n > o)
}

/// A claim grows only when its class allows volume expansion.
pub struct PersistentVolumeClaimResize;

#[async_trait::async_trait]
impl Plugin for PersistentVolumeClaimResize {
    fn name(&self) -> &'static str {
        "PersistentVolumeClaimResize"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info != &persistent_volume_claim::INFO
            || a.operation != Operation::Update
            || a.subresource.is_some()
        {
            return Ok(());
        }
        let (Some(new), Some(old)) = (a.object.as_deref(), a.old) else {
            return Ok(());
        };
        if !grows(new, old) {
            return Ok(());
        }
        let class = old["spec"]["storageClassName"].as_str().unwrap_or_default();
        let allowed = if class.is_empty() {
            false
        } else {
            match registry.get(&storage_class::INFO, None, class, None).await {
                Ok(sc) => sc["allowVolumeExpansion"].as_bool() == Some(true),
                Err(Error::NotFound { .. }) => false,
                Err(e) => return Err(e),
            }
        };
        if allowed {
            return Ok(());
        }
        Err(Error::Forbidden(format!(
            "{} \"{}\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
            a.info.plural, a.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, created: &str, default: bool) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if default {
            c["metadata"]["annotations"] = json!({(storage_class::DEFAULT_ANNOTATION): "true"});
        }
        c
    }

    #[test]
    fn the_newest_default_class_wins() {
        assert_eq!(default_class(&[]), None);
        let plain = class("plain", "2026-01-03T00:00:00Z", false);
        assert_eq!(default_class(std::slice::from_ref(&plain)), None);
        let old = class("local-path", "2026-01-01T00:00:00Z", true);
        let new = class("fast", "2026-01-02T00:00:00Z", true);
        assert_eq!(
            default_class(&[old.clone(), plain, new]).as_deref(),
            Some("fast")
        );
        let twin = class("a-twin", "2026-01-01T00:00:00Z", true);
        assert_eq!(default_class(&[old, twin]).as_deref(), Some("a-twin"));
    }

    #[test]
    fn an_explicit_empty_class_is_kept() {
        assert!(names_no_class(&json!({"spec": {}})));
        assert!(!names_no_class(&json!({"spec": {"storageClassName": ""}})));
    }

    #[test]
    fn growth_is_compared_as_quantities_and_finalizers_are_added_once() {
        let claim = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        assert!(grows(&claim("2Gi"), &claim("1Gi")));
        assert!(!grows(&claim("1024Mi"), &claim("1Gi")));
        assert!(!grows(&claim("1Gi"), &claim("2Gi")));
        let mut object = json!({"metadata": {}});
        add_finalizer(&mut object, PVC_PROTECTION);
        add_finalizer(&mut object, PVC_PROTECTION);
        assert_eq!(object["metadata"]["finalizers"], json!([PVC_PROTECTION]));
    }
}

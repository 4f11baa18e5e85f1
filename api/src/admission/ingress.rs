//! `DefaultIngressClass`, as kube-apiserver's plugin: an Ingress created without
//! `spec.ingressClassName` (and without the deprecated `kubernetes.io/ingress.class`
//! annotation) gets the default IngressClass's name
//! ([`ingress_class::default_class`]); with no class marked default it is left alone.

use serde_json::{Value, json};
use skiff_kinds::builtin::{ingress, ingress_class};

use super::{Attributes, Operation, Plugin};
use crate::error::Result;
use crate::registry::Registry;

/// An Ingress without a class gets the default one.
pub struct DefaultIngressClass;

#[async_trait::async_trait]
impl Plugin for DefaultIngressClass {
    fn name(&self) -> &'static str {
        "DefaultIngressClass"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.info != &ingress::INFO || a.operation != Operation::Create || a.subresource.is_some() {
            return Ok(());
        }
        let Some(object) = a.object.as_deref_mut() else {
            return Ok(());
        };
        let names_class = !object["spec"]["ingressClassName"].is_null()
            || !object["metadata"]["annotations"][ingress::CLASS_ANNOTATION].is_null();
        if names_class {
            return Ok(());
        }
        let classes = registry
            .list(&ingress_class::INFO, None, None, None, None, None)
            .await?;
        if let Some(class) = ingress_class::default_class(&classes.items) {
            match object.get_mut("spec").and_then(Value::as_object_mut) {
                Some(spec) => {
                    spec.insert("ingressClassName".into(), json!(class));
                }
                None => object["spec"] = json!({"ingressClassName": class}),
            }
        }
        Ok(())
    }
}

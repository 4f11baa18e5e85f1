//! `networking.k8s.io/v1` IngressClass: which controller serves the Ingresses that name it
//! (`spec.controller`, immutable), with optional parameters. The class annotated with
//! [`DEFAULT_ANNOTATION`] `"true"` is what an Ingress without `ingressClassName` gets at admission
//! ([`default_class`], the `DefaultIngressClass` plugin).

use k8s_openapi::api::networking::v1::IngressClass as Ic;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `networking.k8s.io/v1` IngressClass.
pub struct IngressClass;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "networking.k8s.io",
    version: "v1",
    kind: "IngressClass",
    plural: "ingressclasses",
    singular: "ingressclass",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

/// The annotation that makes a class the default.
pub const DEFAULT_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// The longest `spec.controller` Kubernetes accepts.
const MAX_CONTROLLER_LEN: usize = 250;

/// Whether a class's metadata (as JSON) marks it default.
pub fn is_default(metadata: &Value) -> bool {
    metadata["annotations"][DEFAULT_ANNOTATION].as_str() == Some("true")
}

/// The class an Ingress without one gets: the only class marked default; with several marked,
/// the newest (by creation time, then the name that sorts first), as Kubernetes picks since
/// 1.28 so that a new default takes over without a window of two; none when none is marked.
pub fn default_class(classes: &[Value]) -> Option<String> {
    super::newest_default(classes, is_default)
}

/// A controller name: a domain-prefixed path (`example.com/ingress`).
fn validate_controller(controller: &str, errs: &mut Vec<FieldError>) {
    let path = Path::new("spec").child("controller");
    if controller.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    if controller.len() > MAX_CONTROLLER_LEN {
        errs.push(FieldError::too_long(path.clone(), MAX_CONTROLLER_LEN));
    }
    match controller.split_once('/') {
        Some((domain, rest)) if !rest.is_empty() => {
            for m in names::dns1123_subdomain(domain) {
                errs.push(FieldError::invalid(path.clone(), controller, m));
            }
        }
        _ => errs.push(FieldError::invalid(
            path,
            controller,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        )),
    }
}

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let ic: Ic = decode(new, "")?;
    let spec = ic.spec.unwrap_or_default();
    let mut errs = Vec::new();
    let controller = spec.controller.as_deref().unwrap_or("");
    validate_controller(controller, &mut errs);
    if let Some(params) = &spec.parameters {
        let path = Path::new("spec").child("parameters");
        if params.kind.is_empty() {
            errs.push(FieldError::required(path.child("kind"), ""));
        }
        if params.name.is_empty() {
            errs.push(FieldError::required(path.child("name"), ""));
        }
        match (params.scope.as_deref(), params.namespace.as_deref()) {
            (Some("Cluster") | None, Some(_)) => errs.push(FieldError::forbidden(
                path.child("namespace"),
                "`parameters.scope` is set to 'Cluster'",
            )),
            (Some("Namespace"), None) => errs.push(FieldError::required(
                path.child("namespace"),
                "`parameters.scope` is set to 'Namespace'",
            )),
            (Some("Cluster" | "Namespace") | None, _) => {}
            (Some(other), _) => errs.push(FieldError::not_supported(
                path.child("scope"),
                other,
                &["Cluster", "Namespace"],
            )),
        }
    }
    if let Some(old) = old {
        let old: Ic = decode(old, "")?;
        let old_controller = old.spec.and_then(|s| s.controller).unwrap_or_default();
        if controller != old_controller {
            errs.push(FieldError::invalid(
                Path::new("spec").child("controller"),
                controller,
                "field is immutable",
            ));
        }
    }
    Ok(errs)
}

impl Kind for IngressClass {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Ic>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Ic>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Controller",
                "string",
                "Controller that is responsible for handling this class",
            ),
            col(
                "Parameters",
                "string",
                "A reference to a resource with additional parameters",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let ic: Ic = table::typed(object)?;
        let spec = ic.spec.unwrap_or_default();
        let parameters = match &spec.parameters {
            None => "<none>".to_string(),
            Some(p) => {
                let kind = match p.api_group.as_deref().filter(|g| !g.is_empty()) {
                    Some(group) => format!("{}.{group}", p.kind),
                    None => p.kind.clone(),
                };
                format!("{kind}/{}", p.name)
            }
        };
        Some(vec![
            json!(ic.metadata.name.as_deref().unwrap_or_default()),
            json!(spec.controller.as_deref().unwrap_or_default()),
            json!(parameters),
            table::age_of(object, now),
        ])
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new, old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::{create_msgs, update_msgs};

    fn ic(controller: &str) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
               "metadata": {"name": "skiff"}, "spec": {"controller": controller}})
    }

    #[test]
    fn the_controller_is_a_domain_prefixed_path_and_never_changes() {
        let msgs = |o| create_msgs("networking.k8s.io", "IngressClass", o);
        assert!(msgs(ic("skiff.io/ingress")).is_empty());
        assert_eq!(msgs(ic("")), ["spec.controller: Required value"]);
        assert_eq!(
            msgs(ic("ingress")),
            [
                "spec.controller: Invalid value: \"ingress\": must be a domain-prefixed path (such as \"acme.io/foo\")"
            ]
        );
        assert_eq!(
            update_msgs(
                "networking.k8s.io",
                "IngressClass",
                ic("k8s.io/ingress-nginx"),
                ic("skiff.io/ingress")
            ),
            ["spec.controller: Invalid value: \"k8s.io/ingress-nginx\": field is immutable"]
        );
        let mut scoped = ic("skiff.io/ingress");
        scoped["spec"]["parameters"] = json!({"kind": "Params", "name": "p", "scope": "Namespace"});
        assert_eq!(
            msgs(scoped),
            ["spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"]
        );
    }

    #[test]
    fn the_default_is_the_newest_class_marked_default() {
        let class = |name: &str, created: &str, default: Option<&str>| {
            let mut c = ic("skiff.io/ingress");
            c["metadata"]["name"] = json!(name);
            c["metadata"]["creationTimestamp"] = json!(created);
            if let Some(d) = default {
                c["metadata"]["annotations"] = json!({DEFAULT_ANNOTATION: d});
            }
            c
        };
        assert_eq!(
            default_class(&[class("a", "2026-01-01T00:00:00Z", None)]),
            None
        );
        assert_eq!(
            default_class(&[
                class("a", "2026-01-01T00:00:00Z", Some("true")),
                class("b", "2026-01-02T00:00:00Z", Some("false")),
            ]),
            Some("a".to_string())
        );
        assert_eq!(
            default_class(&[
                class("a", "2026-01-01T00:00:00Z", Some("true")),
                class("b", "2026-01-02T00:00:00Z", Some("true")),
            ]),
            Some("b".to_string())
        );
    }

    #[test]
    fn table_row() {
        let mut object = ic("skiff.io/ingress");
        let cells = IngressClass.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(
            cells[..3],
            [json!("skiff"), json!("skiff.io/ingress"), json!("<none>")]
        );
        object["spec"]["parameters"] =
            json!({"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"});
        let cells = IngressClass.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(cells[2], json!("IngressParameters.k8s.example.com/p"));
    }
}

//! Decoding request objects through the k8s-openapi types: type errors become 400s, and fields the
//! types do not know are found (for `fieldValidation=Strict|Warn`) and dropped, as Kubernetes' decoder
//! drops them.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Kind;

/// An object after its trip through its type.
#[derive(Debug)]
pub struct Decoded {
    /// The object with unknown fields removed and values in canonical form.
    pub object: Value,
    /// Paths of the fields the type does not know, e.g. `.spec.foo`.
    pub unknown_fields: Vec<String>,
}

/// `object` through type `T` and back: canonical form, unknown fields dropped; a value that
/// does not fit is an error saying where.
pub fn roundtrip<T: DeserializeOwned + Serialize>(object: &Value) -> Result<Value, String> {
    // Deserializing from the borrowed tree spares a deep copy of the request object.
    let typed = T::deserialize(object).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Decodes `object` as `kind`. An object that does not fit its type (a string where a
/// number belongs, say) is an error whose message says where, for a 400.
pub fn decode(kind: &dyn Kind, object: &Value) -> Result<Decoded, String> {
    let canonical = kind.decode(object)?;
    let mut unknown_fields = Vec::new();
    unknown(object, &canonical, &mut String::new(), &mut unknown_fields);
    Ok(Decoded {
        object: canonical,
        unknown_fields,
    })
}

/// Decodes an `autoscaling/v1` Scale.
pub fn decode_scale(object: &Value) -> Result<Value, String> {
    roundtrip::<k8s_openapi::api::autoscaling::v1::Scale>(object)
}

/// Collects the paths present (and not null) in `input` but absent from `canonical`.
fn unknown(input: &Value, canonical: &Value, path: &mut String, out: &mut Vec<String>) {
    match (input, canonical) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                match b.get(key) {
                    Some(inner) => unknown(value, inner, path, out),
                    None if !value.is_null() && !is_empty_container(value) => {
                        out.push(path.clone())
                    }
                    None => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                unknown(x, y, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// k8s-openapi leaves out empty maps and lists it holds as `Option`s that were given empty, so an
/// empty container is not an unknown field.
fn is_empty_container(value: &Value) -> bool {
    match value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(plural: &str) -> std::sync::Arc<dyn Kind> {
        crate::builtin::by_plural(plural)
    }

    #[test]
    fn finds_unknown_fields_at_any_depth() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "i", "colour": "red"}]}
        });
        let decoded = decode(&*info("pods"), &pod).unwrap();
        assert_eq!(
            decoded.unknown_fields,
            vec![".metadata.bogus", ".spec.containers[0].colour"]
        );
        assert!(decoded.object["metadata"].get("bogus").is_none());
        assert_eq!(decoded.object["spec"]["containers"][0]["image"], "i");
    }

    #[test]
    fn a_wrong_type_is_an_error() {
        let deploy = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"replicas": "three", "selector": {}, "template": {}}
        });
        let err = decode(&*info("deployments"), &deploy).unwrap_err();
        assert!(err.contains("invalid type"), "{err}");
    }

    #[test]
    fn known_objects_pass_unchanged() {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "b"}},
            "data": {"k": "v"}
        });
        let decoded = decode(&*info("configmaps"), &cm).unwrap();
        assert!(decoded.unknown_fields.is_empty());
        assert_eq!(decoded.object, cm);
    }
}

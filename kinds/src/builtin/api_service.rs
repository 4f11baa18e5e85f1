//! `apiregistration.k8s.io/v1` APIService: which server answers a group-version. A local one
//! (no `spec.service`) stands for a group-version the API server serves itself; one with a
//! service has the API server proxy the group-version's requests to that Service over TLS (the
//! aggregation layer, `skiff_api::aggregation`). Its `Available` condition, written by the API
//! server, says whether the backend answers.
//!
//! Validation follows kube-aggregator's: the name is `<version>.<group>` (`<version>` alone for
//! the core group), priorities within their ranges, a local APIService has no TLS settings, and
//! `caBundle` and `insecureSkipTLSVerify` exclude each other.

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService as As;

use super::prelude::*;
use crate::patch::schema::{Field, ListType, OBJECT_META};
use crate::validation::{FieldError, Path, decode};

/// `apiregistration.k8s.io/v1` APIService.
pub struct ApiService;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "apiregistration.k8s.io",
    version: "v1",
    kind: "APIService",
    plural: "apiservices",
    singular: "apiservice",
    short_names: &[],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[status("apiregistration.k8s.io", "v1", "APIService")],
    categories: &["api-extensions"],
    selectable_fields: &[],
};

/// The port of `spec.service` when none is given.
pub const DEFAULT_PORT: i64 = 443;

/// The name an APIService for `group`/`version` must have: `<version>.<group>`, or `<version>`
/// for the core group.
pub fn name_for(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{version}.{group}")
    }
}

/// The `Available` condition of an APIService (as JSON): its status, reason and message.
pub fn available(object: &Value) -> Option<(&str, &str, &str)> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default(),
            )
        })
}

/// The merge table of APIService: kube-aggregator's types are not among the generated ones
/// (`patch/generated.rs` covers `k8s.io/api`), and only the status conditions are keyed.
static MERGE: Type = Type {
    fields: &[
        Field {
            name: "metadata",
            ty: Some(&OBJECT_META),
            ..Field::DEFAULT
        },
        Field {
            name: "status",
            ty: Some(&STATUS_MERGE),
            ..Field::DEFAULT
        },
    ],
};

static STATUS_MERGE: Type = Type {
    fields: &[Field {
        name: "conditions",
        merge_key: Some("type"),
        list_type: ListType::Map(&[("type", None)]),
        optional: true,
        ..Field::DEFAULT
    }],
};

fn validate(new: &Value) -> Checked {
    let object: As = decode(new, "")?;
    let spec = object.spec.unwrap_or_default();
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let group = spec.group.as_deref().unwrap_or_default();
    let version = spec.version.as_deref().unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = Vec::new();
    if name != name_for(group, version) {
        errs.push(FieldError::invalid(
            Path::new("metadata").child("name"),
            name,
            "must be `spec.version+\".\"+spec.group`",
        ));
    }
    if !group.is_empty() {
        for m in names::dns1123_subdomain(group) {
            errs.push(FieldError::invalid(path.child("group"), group, m));
        }
    }
    if version.is_empty() {
        errs.push(FieldError::required(path.child("version"), ""));
    } else {
        for m in names::dns1035_label(version) {
            errs.push(FieldError::invalid(path.child("version"), version, m));
        }
    }
    if !(1..=20_000).contains(&spec.group_priority_minimum) {
        errs.push(FieldError::invalid(
            path.child("groupPriorityMinimum"),
            spec.group_priority_minimum,
            "must be positive and less than 20000",
        ));
    }
    if !(1..=1_000).contains(&spec.version_priority) {
        errs.push(FieldError::invalid(
            path.child("versionPriority"),
            spec.version_priority,
            "must be positive and less than 1000",
        ));
    }
    let insecure = spec.insecure_skip_tls_verify.unwrap_or(false);
    let has_ca = spec.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty());
    match &spec.service {
        None => {
            if has_ca {
                errs.push(FieldError::invalid(
                    path.child("caBundle"),
                    "<omitted>",
                    "local APIServices may not have a caBundle",
                ));
            }
            if insecure {
                errs.push(FieldError::invalid(
                    path.child("insecureSkipTLSVerify"),
                    insecure,
                    "local APIServices may not have insecureSkipTLSVerify",
                ));
            }
        }
        Some(service) => {
            let path = path.child("service");
            if service.namespace.as_deref().unwrap_or_default().is_empty() {
                errs.push(FieldError::required(path.child("namespace"), ""));
            }
            if service.name.as_deref().unwrap_or_default().is_empty() {
                errs.push(FieldError::required(path.child("name"), ""));
            }
            let port = service.port.map(i64::from).unwrap_or(DEFAULT_PORT);
            for m in names::port_num(port) {
                errs.push(FieldError::invalid(path.child("port"), port, m));
            }
        }
    }
    if insecure && has_ca {
        errs.push(FieldError::invalid(
            path.child("insecureSkipTLSVerify"),
            insecure,
            "may not be true if caBundle is present",
        ));
    }
    Ok(errs)
}

impl Kind for ApiService {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<As>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<As>(generator))
    }

    fn merge_schema(&self) -> Option<&'static Type> {
        Some(&MERGE)
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Service",
                "string",
                "The reference to the service that hosts this API endpoint.",
            ),
            col("Available", "string", "Whether this service is available."),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let service = &object["spec"]["service"];
        let service = if service.is_object() {
            format!(
                "{}/{}",
                service["namespace"].as_str().unwrap_or_default(),
                service["name"].as_str().unwrap_or_default()
            )
        } else {
            "Local".to_string()
        };
        let available = match available(object) {
            None => "Unknown".to_string(),
            Some(("True", _, _)) => "True".to_string(),
            Some((status, reason, _)) => format!("{status} ({reason})"),
        };
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(service),
            json!(available),
            table::age_of(object, now),
        ])
    }

    fn default(&self, object: &mut Value) {
        if let Some(service) = object
            .pointer_mut("/spec/service")
            .and_then(Value::as_object_mut)
            && service.get("port").is_none_or(Value::is_null)
        {
            service.insert("port".into(), json!(DEFAULT_PORT));
        }
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }

    fn validate_status(&self, new: &Value, _old: &Value) -> Checked {
        let _: As = decode(new, "")?;
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    fn api_service(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": name}, "spec": spec})
    }

    fn remote(extra: Value) -> Value {
        let mut spec = json!({"group": "metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100,
            "service": {"namespace": "kube-system", "name": "metrics-server"}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        api_service("v1beta1.metrics.k8s.io", spec)
    }

    fn msgs(object: Value) -> Vec<String> {
        create_msgs("apiregistration.k8s.io", "APIService", object)
    }

    #[test]
    fn names_are_version_dot_group_or_the_core_version() {
        assert!(msgs(remote(json!({}))).is_empty());
        let local = |name: &str, group: &str| {
            api_service(
                name,
                json!({"group": group, "version": "v1", "groupPriorityMinimum": 18000,
                       "versionPriority": 1}),
            )
        };
        assert!(msgs(local("v1", "")).is_empty());
        assert!(msgs(local("v1.apps", "apps")).is_empty());
        assert_eq!(
            msgs(local("apps", "apps")),
            ["metadata.name: Invalid value: \"apps\": must be `spec.version+\".\"+spec.group`"]
        );
        assert_eq!(name_for("", "v1"), "v1");
        assert_eq!(name_for("apps", "v1"), "v1.apps");
    }

    #[test]
    fn priorities_tls_and_the_service_are_checked() {
        assert_eq!(
            msgs(remote(
                json!({"groupPriorityMinimum": 0, "versionPriority": 0})
            )),
            [
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 0: must be positive and less than 1000",
            ]
        );
        assert_eq!(
            msgs(remote(
                json!({"caBundle": "Y2E=", "insecureSkipTLSVerify": true})
            )),
            [
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"
            ]
        );
        let mut bad_port = remote(json!({}));
        bad_port["spec"]["service"]["port"] = json!(70000);
        assert_eq!(
            msgs(bad_port),
            ["spec.service.port: Invalid value: 70000: must be between 1 and 65535, inclusive"]
        );
        let mut local = remote(json!({"insecureSkipTLSVerify": true}));
        local["spec"]
            .as_object_mut()
            .unwrap()
            .remove("service")
            .unwrap();
        assert_eq!(
            msgs(local),
            [
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify"
            ]
        );
    }

    #[test]
    fn the_service_port_defaults_to_443() {
        let mut object = remote(json!({}));
        ApiService.default(&mut object);
        assert_eq!(object["spec"]["service"]["port"], 443);
        let mut local = api_service("v1", json!({"version": "v1"}));
        ApiService.default(&mut local);
        assert!(local["spec"].get("service").is_none());
    }

    #[test]
    fn table_rows_say_where_and_whether_available() {
        let now = Timestamp::now();
        let local = api_service("v1", json!({"version": "v1"}));
        let cells = ApiService.cells(&local, now).unwrap();
        assert_eq!(cells[..3], [json!("v1"), json!("Local"), json!("Unknown")]);
        let mut object = remote(json!({}));
        object["status"] = json!({"conditions": [{"type": "Available", "status": "False",
            "reason": "MissingEndpoints", "message": "no endpoints"}]});
        let cells = ApiService.cells(&object, now).unwrap();
        assert_eq!(
            cells[..3],
            [
                json!("v1beta1.metrics.k8s.io"),
                json!("kube-system/metrics-server"),
                json!("False (MissingEndpoints)")
            ]
        );
        object["status"]["conditions"][0]["status"] = json!("True");
        let cells = ApiService.cells(&object, now).unwrap();
        assert_eq!(cells[2], json!("True"));
    }
}

//! The `audit.k8s.io/v1` `Event`, one JSON line per event, and the time format it uses.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::policy::{Level, Stage};

/// One audit event, as kube-apiserver writes it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Event`.
    pub kind: &'static str,
    /// `audit.k8s.io/v1`.
    pub api_version: &'static str,
    /// The level the policy gave the request.
    pub level: Level,
    /// The request's id (a UUID), also sent back as the `Audit-Id` header.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// The stage this event is for.
    pub stage: Stage,
    /// The path and query as sent.
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// The Kubernetes verb, or the lower-case method for a non-resource path.
    pub verb: String,
    /// The authenticated user (empty for a request that failed authentication).
    pub user: UserInfo,
    /// The user impersonated, if the request asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    /// The client's address, after any `X-Forwarded-For` entries.
    #[serde(rename = "sourceIPs")]
    pub source_ips: Vec<String>,
    /// The `User-Agent` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// The object a resource request is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    /// The outcome (not on RequestReceived).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<Value>,
    /// The request body, at Request and above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    /// The response body, at RequestResponse.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    /// When the request arrived.
    pub request_received_timestamp: String,
    /// When this stage was reached.
    pub stage_timestamp: String,
    /// The authorizer's decision and reason, and the like.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A user, as `authentication.k8s.io/v1` `UserInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    /// The name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// The uid.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Anything else the authenticator knows.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&crate::auth::User> for UserInfo {
    fn from(user: &crate::auth::User) -> UserInfo {
        UserInfo {
            username: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
        }
    }
}

/// What a resource request is about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// The resource (plural).
    pub resource: String,
    /// The namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The API group (`""` for core, which is left out).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The API version of the URL.
    pub api_version: String,
    /// The object's resourceVersion, when the response says it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// The subresource.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// RFC 3339 in UTC with microseconds, as kube-apiserver's `MicroTime`.
pub fn micro_time(at: jiff::Timestamp) -> String {
    let at = at.round(jiff::Unit::Microsecond).unwrap_or(at);
    format!("{at:.6}")
}

/// A new request id: a random (version 4) UUID.
pub fn new_audit_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Removes `metadata.managedFields` from an object, or from each item of a list.
pub fn strip_managed_fields(value: &mut Value) {
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            strip_managed_fields(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_serializes_as_audit_k8s_io_v1() {
        let mut annotations = BTreeMap::new();
        annotations.insert("authorization.k8s.io/decision".into(), "forbid".into());
        let event = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "0b4bd7d6-4f3e-4c1d-9a9e-0a4c6f1f0a11".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/secrets?limit=500".into(),
            verb: "list".into(),
            user: UserInfo {
                username: "bob".into(),
                uid: "bob".into(),
                groups: vec!["system:authenticated".into()],
                extra: BTreeMap::new(),
            },
            impersonated_user: None,
            source_ips: vec!["127.0.0.1".into()],
            user_agent: Some("kubectl/v1.33.0".into()),
            object_ref: Some(ObjectReference {
                resource: "secrets".into(),
                namespace: "default".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            response_status: Some(json!({"metadata": {}, "code": 403})),
            request_object: None,
            response_object: None,
            request_received_timestamp: "2026-12-05T04:10:00.000001Z".into(),
            stage_timestamp: "2026-12-05T04:10:00.000200Z".into(),
            annotations,
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({
                "kind": "Event",
                "apiVersion": "audit.k8s.io/v1",
                "level": "Metadata",
                "auditID": "0b4bd7d6-4f3e-4c1d-9a9e-0a4c6f1f0a11",
                "stage": "ResponseComplete",
                "requestURI": "/api/v1/namespaces/default/secrets?limit=500",
                "verb": "list",
                "user": {"username": "bob", "uid": "bob", "groups": ["system:authenticated"]},
                "sourceIPs": ["127.0.0.1"],
                "userAgent": "kubectl/v1.33.0",
                "objectRef": {"resource": "secrets", "namespace": "default", "apiVersion": "v1"},
                "responseStatus": {"metadata": {}, "code": 403},
                "requestReceivedTimestamp": "2026-12-05T04:10:00.000001Z",
                "stageTimestamp": "2026-12-05T04:10:00.000200Z",
                "annotations": {"authorization.k8s.io/decision": "forbid"}
            })
        );
    }

    #[test]
    fn times_have_microseconds_and_ids_are_uuids() {
        let at: jiff::Timestamp = "2026-12-05T04:10:00.1234567Z".parse().unwrap();
        assert_eq!(micro_time(at), "2026-12-05T04:10:00.123457Z");
        let whole: jiff::Timestamp = "2026-12-05T04:10:00Z".parse().unwrap();
        assert_eq!(micro_time(whole), "2026-12-05T04:10:00.000000Z");
        let id = new_audit_id();
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 4);
        assert_ne!(id, new_audit_id());
    }

    #[test]
    fn managed_fields_go_from_objects_and_list_items() {
        let mut list = json!({"metadata": {}, "items": [
            {"metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}]}}
        ]});
        strip_managed_fields(&mut list);
        assert_eq!(list["items"][0]["metadata"], json!({"name": "a"}));
    }
}

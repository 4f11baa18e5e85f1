//! Events the controllers record on the objects they act on (`kubectl describe` shows them),
//! each note once per object until it changes, so a claim that waits does not fill the log.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::PostParams;
use skiff_client::{Api, Client};

/// Records Events as one component, remembering the last note of each object.
pub struct Recorder {
    client: Client,
    component: &'static str,
    last: Mutex<HashMap<String, (String, String)>>,
}

impl Recorder {
    /// A recorder writing as `component` (`persistentvolume-controller`).
    pub fn new(client: Client, component: &'static str) -> Recorder {
        Recorder {
            client,
            component,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Records `reason`/`message` of `type_` on `object` unless it is the object's last note.
    /// A failure to record is logged, never an error of the caller's sync.
    pub async fn record(&self, object: ObjectReference, type_: &str, reason: &str, message: &str) {
        let key = format!(
            "{}/{}/{}",
            object.kind.as_deref().unwrap_or_default(),
            object.namespace.as_deref().unwrap_or_default(),
            object.uid.as_deref().unwrap_or_default()
        );
        {
            let mut last = self.last.lock().expect("recorder poisoned");
            let note = (reason.to_string(), message.to_string());
            if last.get(&key) == Some(&note) {
                return;
            }
            last.insert(key, note);
        }
        // Cluster-scoped objects' events live in `default`, as Kubernetes puts them.
        let ns = object
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let now = Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    object.name.as_deref().unwrap_or("object"),
                    now.as_nanosecond()
                )),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: object,
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(type_.into()),
            source: Some(EventSource {
                component: Some(self.component.into()),
                host: None,
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            reporting_component: Some(self.component.into()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(err) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(%err, reason, "recording an event");
        }
    }

    /// Forgets the notes of a deleted object.
    pub fn forget(&self, kind: &str, namespace: Option<&str>, uid: &str) {
        let key = format!("{kind}/{}/{uid}", namespace.unwrap_or_default());
        self.last.lock().expect("recorder poisoned").remove(&key);
    }
}

/// A reference to an object for an Event's `involvedObject`.
pub fn reference(api_version: &str, kind: &str, meta: &ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}

//! Recording `core/v1` Events about objects, as client-go's recorder does for the controllers:
//! `kubectl describe` shows them, and they say why something did not happen (a Job not started
//! because the last one still runs, a claim that cannot be provisioned).
//!
//! An event is best effort: a failure to write one is logged and never fails the caller. The same
//! event about the same object again within [`REPEAT_WINDOW`] bumps the first one's `count` and
//! `lastTimestamp` instead of writing a new object, as client-go's correlator does, so a
//! controller that says the same thing on every sync does not flood the log.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};

/// How long a repeated event counts as the same one.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(10 * 60);

/// The most repeated events remembered; past it the memory starts over.
const REMEMBERED: usize = 4096;

/// Whether an event is routine or tells of a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something happened as expected (`SuccessfulCreate`).
    Normal,
    /// Something went wrong or could not be done (`FailedCreate`, `ProvisioningFailed`).
    Warning,
}

impl EventType {
    /// The `type` field's value.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A reference to `object` for an event's `involvedObject`.
pub fn reference<K: Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    let meta = object.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}

/// Who writes an event: a component, and for a per-node one (the kubelet) the node it runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// `source.component` and `reportingComponent` (`kubelet`, `default-scheduler`).
    pub component: String,
    /// `source.host` and `reportingInstance` for a component that runs once per node.
    pub host: Option<String>,
}

impl Source {
    /// A cluster-wide component (a controller, the scheduler).
    pub fn component(component: &str) -> Source {
        Source {
            component: component.to_string(),
            host: None,
        }
    }

    /// A component of node `host` (the kubelet).
    pub fn on_host(component: &str, host: &str) -> Source {
        Source {
            component: component.to_string(),
            host: Some(host.to_string()),
        }
    }
}

/// The new Event object `source` writes about `regarding` at `now`.
pub fn new_event(
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    message: &str,
    source: &Source,
    now: Timestamp,
) -> Event {
    let name = regarding.name.as_deref().unwrap_or("object");
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            // Events of cluster-scoped objects go to `default`, as client-go puts them.
            namespace: Some(
                regarding
                    .namespace
                    .clone()
                    .filter(|ns| !ns.is_empty())
                    .unwrap_or_else(|| "default".into()),
            ),
            ..Default::default()
        },
        involved_object: regarding.clone(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(type_.as_str().to_string()),
        source: Some(EventSource {
            component: Some(source.component.clone()),
            host: source.host.clone(),
        }),
        reporting_component: Some(source.component.clone()),
        reporting_instance: Some(
            source
                .host
                .clone()
                .unwrap_or_else(|| source.component.clone()),
        ),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..Default::default()
    }
}

/// What makes two events the same one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    object: (String, String, String, String),
    type_: EventType,
    reason: String,
    message: String,
}

/// The Event first written for a [`Key`], and how often it was said since.
#[derive(Clone, Debug)]
struct Seen {
    namespace: String,
    name: String,
    count: i32,
    first: Timestamp,
}

/// What to do with an event, given what was said before.
#[derive(Debug, PartialEq)]
enum Write {
    /// A new Event object.
    Create,
    /// Bump the count of the Event `name` in `namespace` to `count`.
    Repeat {
        namespace: String,
        name: String,
        count: i32,
    },
}

/// The correlator's memory: the first Event of each key said within the window.
#[derive(Default)]
struct Memory(HashMap<Key, Seen>);

impl Memory {
    /// Decides how `key` said at `now` is written, and remembers it.
    fn say(&mut self, key: &Key, now: Timestamp) -> Write {
        let window = jiff::SignedDuration::try_from(REPEAT_WINDOW).unwrap_or_default();
        match self.0.get_mut(key) {
            Some(seen) if now.duration_since(seen.first) < window => {
                seen.count += 1;
                Write::Repeat {
                    namespace: seen.namespace.clone(),
                    name: seen.name.clone(),
                    count: seen.count,
                }
            }
            _ => Write::Create,
        }
    }

    /// Remembers the Event created for `key`.
    fn created(&mut self, key: Key, event: &Event, now: Timestamp) {
        if self.0.len() >= REMEMBERED {
            self.0.clear();
        }
        self.0.insert(
            key,
            Seen {
                namespace: event.metadata.namespace.clone().unwrap_or_default(),
                name: event.metadata.name.clone().unwrap_or_default(),
                count: 1,
                first: now,
            },
        );
    }

    /// Forgets `key` (its Event is gone: the next one is created anew).
    fn forget(&mut self, key: &Key) {
        self.0.remove(key);
    }
}

/// Writes Events as one component (`job-controller`, `default-scheduler`, a node's `kubelet`).
pub struct Recorder {
    client: Client,
    source: Source,
    memory: Mutex<Memory>,
}

impl Recorder {
    /// A recorder writing as the cluster-wide `component`.
    pub fn new(client: Client, component: &str) -> Recorder {
        Recorder::with_source(client, Source::component(component))
    }

    /// A recorder writing as `source` (a per-node component names its host).
    pub fn with_source(client: Client, source: Source) -> Recorder {
        Recorder {
            client,
            source,
            memory: Mutex::new(Memory::default()),
        }
    }

    /// Records that `reason` (`message`) happened to `regarding`. Never fails: a write that does
    /// not go through is logged.
    pub async fn record(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let now = Timestamp::now();
        let key = Key {
            object: (
                regarding.kind.clone().unwrap_or_default(),
                regarding.namespace.clone().unwrap_or_default(),
                regarding.name.clone().unwrap_or_default(),
                regarding.uid.clone().unwrap_or_default(),
            ),
            type_,
            reason: reason.to_string(),
            message: message.to_string(),
        };
        let write = self
            .memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .say(&key, now);
        if let Write::Repeat {
            namespace,
            name,
            count,
        } = write
        {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            let patch = serde_json::json!({"count": count, "lastTimestamp": Time(now)});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                // Expired or deleted: say it anew.
                Err(e) => {
                    tracing::debug!(event = %name, error = %e, "repeating an event; writing it anew");
                    self.memory
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .forget(&key);
                }
            }
        }
        let event = new_event(regarding, type_, reason, message, &self.source, now);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => self
                .memory
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .created(key, &event, now),
            Err(e) => tracing::warn!(reason, %message, error = %e, "could not record an event"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(message: &str) -> Key {
        Key {
            object: ("CronJob".into(), "ns".into(), "nightly".into(), "u1".into()),
            type_: EventType::Normal,
            reason: "JobAlreadyActive".into(),
            message: message.into(),
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_same_event_within_the_window_bumps_the_first_ones_count() {
        let mut memory = Memory::default();
        let now = at("2026-12-01T10:00:00Z");
        assert_eq!(memory.say(&key("busy"), now), Write::Create);
        let reference = ObjectReference {
            name: Some("nightly".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        let event = new_event(
            &reference,
            EventType::Normal,
            "JobAlreadyActive",
            "busy",
            &Source::component("cronjob-controller"),
            now,
        );
        memory.created(key("busy"), &event, now);
        let name = event.metadata.name.clone().unwrap();
        let again = memory.say(&key("busy"), at("2026-12-01T10:05:00Z"));
        assert_eq!(
            again,
            Write::Repeat {
                namespace: "ns".into(),
                name: name.clone(),
                count: 2
            }
        );
        let third = memory.say(&key("busy"), at("2026-12-01T10:06:00Z"));
        assert!(matches!(third, Write::Repeat { count: 3, .. }));
        // Another message is another event; past the window the same one is new again.
        assert_eq!(memory.say(&key("other"), now), Write::Create);
        assert_eq!(
            memory.say(&key("busy"), at("2026-12-01T10:11:00Z")),
            Write::Create
        );
    }

    #[test]
    fn an_event_names_its_object_and_component() {
        let reference = ObjectReference {
            kind: Some("PersistentVolume".into()),
            name: Some("pv-1".into()),
            ..Default::default()
        };
        let now = at("2026-12-01T10:00:00Z");
        let event = new_event(
            &reference,
            EventType::Warning,
            "VolumeFailedDelete",
            "no such directory",
            &Source::component("persistentvolume-controller"),
            now,
        );
        // A cluster-scoped object's events live in `default`.
        assert_eq!(event.metadata.namespace.as_deref(), Some("default"));
        assert!(event.metadata.name.unwrap().starts_with("pv-1."));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.count, Some(1));
        assert_eq!(
            event.source.unwrap().component.as_deref(),
            Some("persistentvolume-controller")
        );
        assert_eq!(
            event.involved_object.kind.as_deref(),
            Some("PersistentVolume")
        );
        assert_eq!(
            event.reporting_instance.as_deref(),
            Some("persistentvolume-controller")
        );
    }

    #[test]
    fn a_node_components_event_names_its_host() {
        let reference = ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web-0".into()),
            namespace: Some("shop".into()),
            ..Default::default()
        };
        let event = new_event(
            &reference,
            EventType::Normal,
            "Pulled",
            "pulled",
            &Source::on_host("kubelet", "node-a"),
            at("2026-12-01T10:00:00Z"),
        );
        assert_eq!(event.metadata.namespace.as_deref(), Some("shop"));
        let source = event.source.unwrap();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some("node-a"));
        assert_eq!(event.reporting_component.as_deref(), Some("kubelet"));
        assert_eq!(event.reporting_instance.as_deref(), Some("node-a"));
    }
}

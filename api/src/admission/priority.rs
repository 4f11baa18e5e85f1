//! kube-apiserver's `Priority` admission plugin: a new pod's `priorityClassName` becomes its
//! `spec.priority` (and `preemptionPolicy`); a pod that names no class gets the global default
//! class (the lowest-valued one if several claim it), or priority 0 and `PreemptLowerPriority`
//! when there is none. A pod
//! may not state a priority that disagrees with its class, nor name a class that does not exist
//! (403). Of PriorityClasses, only one may be the global default, and the built-in `system-`
//! classes cannot be deleted.

use serde_json::{Value, json};
use skiff_kinds::builtin::{pod, priority_class};

use super::{Attributes, Operation, Plugin, forbidden};
use crate::error::{Error, Result};
use crate::registry::Registry;

/// The `Priority` plugin.
pub struct Priority;

/// The priority of a pod whose class is unnamed when no class is the global default.
pub const DEFAULT_PRIORITY: i64 = 0;

/// What a pod gets from its class: its name (empty for none), value and preemption policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The class's name; empty when the pod got the no-default priority.
    pub class: String,
    /// The class's value.
    pub value: i64,
    /// The class's preemption policy, when it has one.
    pub preemption_policy: Option<String>,
}

impl Resolved {
    fn of(class: &Value) -> Resolved {
        Resolved {
            class: class["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            value: class["value"].as_i64().unwrap_or(DEFAULT_PRIORITY),
            preemption_policy: class["preemptionPolicy"].as_str().map(str::to_string),
        }
    }
}

/// The global default among `classes`: the lowest value of those marked `globalDefault`.
pub fn global_default(classes: &[Value]) -> Option<Resolved> {
    classes
        .iter()
        .filter(|c| c["globalDefault"].as_bool() == Some(true))
        .map(Resolved::of)
        .min_by_key(|r| r.value)
}

/// Sets `pod`'s priority from `resolved`, refusing a pod whose own priority or preemption
/// policy disagrees with it (the message is kube-apiserver's).
pub fn apply(pod: &mut Value, resolved: &Resolved) -> std::result::Result<(), String> {
    let spec = &pod["spec"];
    if let Some(given) = spec["priority"].as_i64()
        && given != resolved.value
    {
        return Err(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
            resolved.value
        ));
    }
    if let (Some(given), Some(policy)) = (
        spec["preemptionPolicy"].as_str(),
        resolved.preemption_policy.as_deref(),
    ) && given != policy
    {
        return Err(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
        ));
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if !resolved.class.is_empty() {
        spec.insert("priorityClassName".into(), json!(resolved.class));
    }
    spec.insert("priority".into(), json!(resolved.value));
    if let Some(policy) = &resolved.preemption_policy {
        spec.insert("preemptionPolicy".into(), json!(policy));
    }
    Ok(())
}

impl Priority {
    async fn admit_pod(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        let old = a.old;
        let Some(pod) = a.object.as_deref_mut() else {
            return Ok(());
        };
        if a.operation == Operation::Update {
            // The priority set at creation stays (validation refuses changing it).
            if let (Some(old), Some(spec)) =
                (old, pod.get_mut("spec").and_then(Value::as_object_mut))
            {
                for field in ["priority", "preemptionPolicy"] {
                    if spec.get(field).is_none_or(Value::is_null)
                        && let Some(value) = old["spec"].get(field).filter(|v| !v.is_null())
                    {
                        spec.insert(field.into(), value.clone());
                    }
                }
            }
            return Ok(());
        }
        let name = pod["spec"]["priorityClassName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let resolved = if name.is_empty() {
            let classes = registry
                .list(&priority_class::INFO, None, None, None, None, None)
                .await?;
            global_default(&classes.items).unwrap_or(Resolved {
                class: String::new(),
                value: DEFAULT_PRIORITY,
                preemption_policy: Some(priority_class::PREEMPT_LOWER_PRIORITY.into()),
            })
        } else {
            match registry.get(&priority_class::INFO, None, &name, None).await {
                Ok(class) => Resolved::of(&class),
                Err(Error::NotFound { .. }) => {
                    let why = format!("no PriorityClass with name {name} was found");
                    return Err(forbidden(a, why));
                }
                Err(e) => return Err(e),
            }
        };
        let refused = apply(pod, &resolved).err();
        match refused {
            Some(why) => Err(forbidden(a, why)),
            None => Ok(()),
        }
    }

    async fn admit_class(&self, registry: &Registry, a: &Attributes<'_>) -> Result<()> {
        if a.operation == Operation::Delete {
            if priority_class::system_class(a.name).is_some() {
                return Err(forbidden(
                    a,
                    "this is a system priority class and cannot be deleted",
                ));
            }
            return Ok(());
        }
        let Some(class) = a.object.as_deref() else {
            return Ok(());
        };
        if class["globalDefault"].as_bool() != Some(true) {
            return Ok(());
        }
        let classes = registry
            .list(&priority_class::INFO, None, None, None, None, None)
            .await?;
        if let Some(other) = classes.items.iter().find(|c| {
            c["globalDefault"].as_bool() == Some(true)
                && c["metadata"]["name"].as_str() != Some(a.name)
        }) {
            let other = other["metadata"]["name"].as_str().unwrap_or_default();
            return Err(forbidden(
                a,
                format!(
                    "PriorityClass {other} is already marked as default. Only one default can exist"
                ),
            ));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Plugin for Priority {
    fn name(&self) -> &'static str {
        "Priority"
    }

    async fn admit(&self, registry: &Registry, a: &mut Attributes<'_>) -> Result<()> {
        if a.subresource.is_some() {
            return Ok(());
        }
        if a.info == &pod::INFO && matches!(a.operation, Operation::Create | Operation::Update) {
            return self.admit_pod(registry, a).await;
        }
        if a.info == &priority_class::INFO {
            return self.admit_class(registry, a).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool) -> Value {
        json!({"metadata": {"name": name}, "value": value, "globalDefault": default,
               "preemptionPolicy": "PreemptLowerPriority"})
    }

    #[test]
    fn the_lowest_global_default_wins() {
        let classes = [
            class("a", 10, true),
            class("b", 5, true),
            class("c", 1, false),
        ];
        assert_eq!(global_default(&classes).unwrap().class, "b");
        assert_eq!(global_default(&classes[2..]), None);
    }

    #[test]
    fn a_pod_takes_its_class_value_and_may_not_contradict_it() {
        let high = Resolved::of(&class("high", 1000, false));
        let mut pod = json!({"spec": {"priorityClassName": "high", "containers": []}});
        apply(&mut pod, &high).unwrap();
        assert_eq!(pod["spec"]["priority"], 1000);
        assert_eq!(pod["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        // The same value again is fine (a pod re-created from its own JSON).
        apply(&mut pod, &high).unwrap();
        let mut liar = json!({"spec": {"priorityClassName": "high", "priority": 7}});
        assert_eq!(
            apply(&mut liar, &high).unwrap_err(),
            "the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name"
        );
        let mut never = json!({"spec": {"priorityClassName": "high", "preemptionPolicy": "Never"}});
        assert!(
            apply(&mut never, &high)
                .unwrap_err()
                .contains("PreemptionPolicy (Never)")
        );
        let none = Resolved {
            class: String::new(),
            value: 0,
            preemption_policy: None,
        };
        let mut plain = json!({"spec": {}});
        apply(&mut plain, &none).unwrap();
        assert_eq!(plain["spec"], json!({"priority": 0}));
    }
}

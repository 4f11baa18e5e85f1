//! `scheduling.k8s.io/v1` PriorityClass: a name for a pod priority (`value`), whether pods that
//! name no class get it (`globalDefault`), and whether its pods may preempt others
//! (`preemptionPolicy`, `PreemptLowerPriority` by default). Names starting `system-` are the two
//! built-in classes the API server keeps ([`SYSTEM_CLASSES`]); a class a user makes has a value
//! of at most [`HIGHEST_USER_DEFINABLE`]. Value and preemption policy never change.
//!
//! The Priority admission plugin (in the API server) turns a pod's `priorityClassName` into its
//! `spec.priority` and refuses a second global default.

use k8s_openapi::api::scheduling::v1::PriorityClass as Pc;

use super::prelude::*;
use crate::validation::{FieldError, Path, decode};

/// `scheduling.k8s.io/v1` PriorityClass.
pub struct PriorityClass;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "scheduling.k8s.io",
    version: "v1",
    kind: "PriorityClass",
    plural: "priorityclasses",
    singular: "priorityclass",
    short_names: &["pc"],
    namespaced: false,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

/// The highest value a class a user makes may have (Kubernetes' `HighestUserDefinablePriority`).
pub const HIGHEST_USER_DEFINABLE: i32 = 1_000_000_000;
/// The prefix reserved for the built-in classes.
pub const SYSTEM_PREFIX: &str = "system-";
/// The preemption policy a class without one gets.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// A built-in class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemClass {
    /// Its name.
    pub name: &'static str,
    /// Its value.
    pub value: i32,
    /// Its description.
    pub description: &'static str,
}

/// The classes the API server creates at start and never lets go, highest first.
pub const SYSTEM_CLASSES: &[SystemClass] = &[
    SystemClass {
        name: "system-node-critical",
        value: 2 * HIGHEST_USER_DEFINABLE + 1000,
        description: "Used for system critical pods that must not be moved from their current node.",
    },
    SystemClass {
        name: "system-cluster-critical",
        value: 2 * HIGHEST_USER_DEFINABLE,
        description: "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    },
];

impl SystemClass {
    /// The class as an object to create.
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": self.name},
            "value": self.value,
            "description": self.description,
            "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
        })
    }
}

/// The built-in class named `name`, if any.
pub fn system_class(name: &str) -> Option<&'static SystemClass> {
    SYSTEM_CLASSES.iter().find(|c| c.name == name)
}

/// Why a `system-` name is not the built-in class it claims to be, if it is not.
fn not_system_class(pc: &Pc) -> Option<String> {
    let name = pc.metadata.name.as_deref().unwrap_or_default();
    let Some(known) = system_class(name) else {
        return Some(format!("name {name} is not a known system priority class"));
    };
    if pc.value != known.value {
        return Some(format!(
            "value of {name} PriorityClass must be {}",
            known.value
        ));
    }
    if pc.global_default.unwrap_or(false) {
        return Some(format!(
            "globalDefault of {name} PriorityClass must be false"
        ));
    }
    None
}

fn validate(new: &Value, old: Option<&Value>) -> Checked {
    let pc: Pc = decode(new, "")?;
    let mut errs = Vec::new();
    let name = pc.metadata.name.as_deref().unwrap_or_default();
    if name.starts_with(SYSTEM_PREFIX) {
        if let Some(why) = not_system_class(&pc) {
            errs.push(FieldError::forbidden(
                Path::new("metadata").child("name"),
                format!(
                    "priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {why}"
                ),
            ));
        }
    } else if pc.value > HIGHEST_USER_DEFINABLE {
        errs.push(FieldError::forbidden(
            Path::new("value"),
            format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"),
        ));
    }
    match pc.preemption_policy.as_deref() {
        None | Some(PREEMPT_LOWER_PRIORITY) | Some("Never") => {}
        Some(other) => errs.push(FieldError::not_supported(
            Path::new("preemptionPolicy"),
            other,
            &[PREEMPT_LOWER_PRIORITY, "Never"],
        )),
    }
    if let Some(old) = old {
        let old: Pc = decode(old, "")?;
        if pc.value != old.value {
            errs.push(FieldError::forbidden(
                Path::new("value"),
                "may not be changed in an update.",
            ));
        }
        if pc.preemption_policy != old.preemption_policy {
            errs.push(FieldError::invalid(
                Path::new("preemptionPolicy"),
                json!(pc.preemption_policy),
                "field is immutable",
            ));
        }
    }
    Ok(errs)
}

impl Kind for PriorityClass {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Pc>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Pc>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Value",
                "integer",
                "value represents the integer value of this priority class.",
            ),
            col(
                "Global-Default",
                "boolean",
                "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class.",
            ),
            AGE,
            col(
                "PreemptionPolicy",
                "string",
                "preemptionPolicy is the Policy for preempting pods with lower priority.",
            ),
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        Some(vec![
            json!(object["metadata"]["name"].as_str().unwrap_or_default()),
            json!(object["value"].as_i64().unwrap_or(0)),
            json!(object["globalDefault"].as_bool().unwrap_or(false)),
            table::age_of(object, now),
            json!(object["preemptionPolicy"].as_str().unwrap_or_default()),
        ])
    }

    fn default(&self, object: &mut Value) {
        if let Some(map) = object.as_object_mut() {
            map.entry("preemptionPolicy")
                .or_insert_with(|| json!(PREEMPT_LOWER_PRIORITY));
        }
    }

    fn validate(&self, new: &Value, old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new, old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::{create_msgs, update_msgs};

    const G: &str = "scheduling.k8s.io";

    fn pc(name: &str, value: i64) -> Value {
        let mut object = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                "metadata": {"name": name}, "value": value});
        PriorityClass.default(&mut object);
        object
    }

    #[test]
    fn user_classes_stay_below_the_system_ones() {
        assert!(create_msgs(G, "PriorityClass", pc("high", 1_000_000_000)).is_empty());
        assert_eq!(
            create_msgs(G, "PriorityClass", pc("higher", 1_000_000_001)),
            ["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
        );
        assert_eq!(pc("x", 1)["preemptionPolicy"], PREEMPT_LOWER_PRIORITY);
        let mut never = pc("x", 1);
        never["preemptionPolicy"] = json!("Sometimes");
        assert_eq!(
            create_msgs(G, "PriorityClass", never),
            [
                "preemptionPolicy: Unsupported value: \"Sometimes\": supported values: \"PreemptLowerPriority\", \"Never\""
            ]
        );
    }

    #[test]
    fn the_system_prefix_is_only_for_the_built_in_classes() {
        for class in SYSTEM_CLASSES {
            assert!(
                create_msgs(G, "PriorityClass", class.object()).is_empty(),
                "{}",
                class.name
            );
        }
        assert_eq!(
            create_msgs(G, "PriorityClass", pc("system-mine", 5)),
            [
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: name system-mine is not a known system priority class"
            ]
        );
        assert_eq!(
            create_msgs(G, "PriorityClass", pc("system-node-critical", 5)),
            [
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-node-critical PriorityClass must be 2000001000"
            ]
        );
    }

    #[test]
    fn value_and_policy_are_immutable() {
        let mut changed = pc("a", 2);
        changed["preemptionPolicy"] = json!("Never");
        assert_eq!(
            update_msgs(G, "PriorityClass", changed, pc("a", 1)),
            [
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable",
            ]
        );
        let cells = PriorityClass.cells(&pc("a", 7), Timestamp::now()).unwrap();
        assert_eq!(cells[..3], [json!("a"), json!(7), json!(false)]);
        assert_eq!(cells[4], json!("PreemptLowerPriority"));
    }
}

//! Owner mapping: from an event of a child (a pod, a ReplicaSet) to the keys of the owners that
//! must look at it, through the child's controller reference. Pure, so the runtime's `owns`
//! and `adopts` are unit-tested without an informer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use super::Event;
use crate::pods;

/// The key (`namespace/name`) of the owner of kind `owner_kind` that `meta`'s controller
/// reference names; `None` for a child without one, or controlled by another kind.
pub fn controller_key(meta: &ObjectMeta, owner_kind: &str) -> Option<String> {
    let r = pods::controller_of(meta)?;
    let ns = meta.namespace.as_deref()?;
    (r.kind == owner_kind).then(|| format!("{ns}/{}", r.name))
}

/// Whether an object has no controller at all (an orphan some owner may adopt).
pub fn is_orphan(meta: &ObjectMeta) -> bool {
    pods::controller_of(meta).is_none()
}

/// The owners (of `owner_kind`) an event of a child concerns: its controller, and when an
/// update moved the controller reference, the one it had before too (it may have lost a child).
/// An update that leaves the resourceVersion as it was (a resync) concerns nobody.
pub fn owner_keys<K: Resource>(event: &Event<'_, K>, owner_kind: &str) -> Vec<String> {
    match *event {
        Event::Added(child) | Event::Deleted(child) => controller_key(child.meta(), owner_kind)
            .into_iter()
            .collect(),
        Event::Updated { old, new } => {
            if old.meta().resource_version == new.meta().resource_version {
                return Vec::new();
            }
            let (before, after) = (
                controller_key(old.meta(), owner_kind),
                controller_key(new.meta(), owner_kind),
            );
            let mut keys = Vec::new();
            if before != after
                && let Some(k) = before
            {
                keys.push(k);
            }
            keys.extend(after);
            keys
        }
    }
}

/// The orphan an event shows that an owner may now adopt: a child added or changed without a
/// controller (deleted orphans are nobody's concern; nor are resyncs).
pub fn orphan_of<'a, K: Resource>(event: &Event<'a, K>) -> Option<&'a K> {
    match *event {
        Event::Added(child) => is_orphan(child.meta()).then_some(child),
        Event::Updated { old, new } => (old.meta().resource_version != new.meta().resource_version
            && is_orphan(new.meta()))
        .then_some(new),
        Event::Deleted(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::pod;
    use k8s_openapi::api::core::v1::Pod;

    fn owned_by(name: &str, kind: &str, owner: &str, rv: &str) -> Pod {
        let mut p = pod(name, &[], 0);
        p.metadata.resource_version = Some(rv.into());
        p.metadata.owner_references = Some(vec![pods::controller_ref(
            "apps/v1",
            kind,
            &ObjectMeta {
                name: Some(owner.into()),
                uid: Some(format!("uid-{owner}")),
                ..ObjectMeta::default()
            },
        )]);
        p
    }

    #[test]
    fn a_child_maps_to_its_controller_of_the_right_kind() {
        let p = owned_by("a", "ReplicaSet", "web", "1");
        assert_eq!(
            controller_key(&p.metadata, "ReplicaSet").as_deref(),
            Some("ns/web")
        );
        assert_eq!(controller_key(&p.metadata, "Job"), None);
        let orphan = pod("b", &[], 0);
        assert_eq!(controller_key(&orphan.metadata, "ReplicaSet"), None);
        assert!(is_orphan(&orphan.metadata) && !is_orphan(&p.metadata));
        assert_eq!(
            owner_keys(&Event::Added(&p), "ReplicaSet"),
            vec!["ns/web".to_string()]
        );
        assert_eq!(
            owner_keys(&Event::Deleted(&p), "ReplicaSet"),
            vec!["ns/web".to_string()]
        );
        assert!(owner_keys(&Event::Added(&orphan), "ReplicaSet").is_empty());
    }

    #[test]
    fn a_moved_reference_concerns_the_old_and_the_new_owner() {
        let old = owned_by("a", "ReplicaSet", "web", "1");
        let same = owned_by("a", "ReplicaSet", "web", "2");
        let moved = owned_by("a", "ReplicaSet", "api", "3");
        assert_eq!(
            owner_keys(
                &Event::Updated {
                    old: &old,
                    new: &same
                },
                "ReplicaSet"
            ),
            vec!["ns/web".to_string()]
        );
        assert_eq!(
            owner_keys(
                &Event::Updated {
                    old: &same,
                    new: &moved
                },
                "ReplicaSet"
            ),
            vec!["ns/web".to_string(), "ns/api".to_string()]
        );
        let mut released = moved.clone();
        released.metadata.owner_references = None;
        released.metadata.resource_version = Some("4".into());
        assert_eq!(
            owner_keys(
                &Event::Updated {
                    old: &moved,
                    new: &released
                },
                "ReplicaSet"
            ),
            vec!["ns/api".to_string()]
        );
        assert!(
            owner_keys(
                &Event::Updated {
                    old: &same,
                    new: &same
                },
                "ReplicaSet"
            )
            .is_empty(),
            "a resync concerns nobody"
        );
    }

    #[test]
    fn orphans_are_shown_when_added_or_changed() {
        let mut orphan = pod("a", &[], 0);
        orphan.metadata.resource_version = Some("1".into());
        let mut changed = orphan.clone();
        changed.metadata.resource_version = Some("2".into());
        assert!(orphan_of(&Event::Added(&orphan)).is_some());
        assert!(
            orphan_of(&Event::Updated {
                old: &orphan,
                new: &changed
            })
            .is_some()
        );
        assert!(
            orphan_of(&Event::Updated {
                old: &orphan,
                new: &orphan
            })
            .is_none()
        );
        assert!(orphan_of(&Event::Deleted(&orphan)).is_none());
        let owned = owned_by("b", "ReplicaSet", "web", "1");
        assert!(orphan_of(&Event::Added(&owned)).is_none());
    }
}

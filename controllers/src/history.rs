//! ControllerRevisions: the template history of StatefulSets and DaemonSets, which
//! `kubectl rollout history` lists and `kubectl rollout undo` patches back into the set.
//!
//! A revision holds the set's pod template as the strategic merge patch kubectl applies to roll
//! back (`{"spec": {"template": {..., "$patch": "replace"}}}`), is named `<set>-<template hash>`,
//! carries the template's labels (kubectl finds a set's revisions by the set's selector, then keeps
//! those it controls) and a `revision` number. A template seen before reuses its revision, whose
//! number moves past the others, as kube-controller-manager does; so after an undo the list reads
//! 2, 3 rather than growing. Revisions beyond the set's `revisionHistoryLimit` are deleted oldest
//! first, never one that live pods or the set's status still name.
//!
//! ```text
//!   template A        template B          undo (A again)
//!   web-aaaa rev 1 -> web-aaaa rev 1  ->  web-aaaa rev 3
//!                     web-bbbb rev 2      web-bbbb rev 2
//! ```

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use skiff_client::Api;

use crate::daemonset::{REVISION_HASH, template_hash};
use crate::pods;
use crate::runtime::not_found;
use crate::{Error, Result};

/// The set a history belongs to: its kind, metadata and current pod template.
pub struct Owner<'a> {
    /// `StatefulSet` or `DaemonSet` (both `apps/v1`).
    pub kind: &'static str,
    /// The set's metadata (name, namespace, uid).
    pub meta: &'a ObjectMeta,
    /// The set's current pod template.
    pub template: &'a PodTemplateSpec,
    /// `revisionHistoryLimit` (10 when unset).
    pub limit: i32,
    /// `status.collisionCount`: how often a revision name clashed with another template's.
    pub collision_count: Option<i32>,
}

/// The revision name for `template` of the set named `set` with its `collision_count`.
pub fn revision_name(
    set: &str,
    template: &PodTemplateSpec,
    collision_count: Option<i32>,
) -> String {
    format!("{set}-{}", template_hash(template, collision_count))
}

/// A revision's data: the patch that puts `template` back in place of the set's.
pub fn revision_data(template: &PodTemplateSpec) -> Value {
    let mut template = serde_json::to_value(template).expect("a pod template serializes");
    if let Some(map) = template.as_object_mut() {
        map.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The pod template a revision holds; `None` when its data is not a template patch.
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut template = revision
        .data
        .as_ref()?
        .0
        .get("spec")?
        .get("template")?
        .clone();
    template.as_object_mut()?.remove("$patch");
    serde_json::from_value(template).ok()
}

/// The revisions `owner` controls, of `candidates` (its namespace's).
pub fn owned_by<'a>(
    owner: &ObjectMeta,
    candidates: impl IntoIterator<Item = &'a ControllerRevision>,
) -> Vec<&'a ControllerRevision> {
    let uid = owner.uid.as_deref().unwrap_or_default();
    candidates
        .into_iter()
        .filter(|r| pods::controller_of(&r.metadata).is_some_and(|c| c.uid == uid))
        .collect()
}

/// What to do to a set's history.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// The revision of the current template, to create.
    pub create: Option<ControllerRevision>,
    /// An existing revision of the current template whose number must move past the others:
    /// (name, new number).
    pub renumber: Option<(String, i64)>,
    /// Old revisions beyond the limit, by name.
    pub delete: Vec<String>,
    /// The current template's revision name.
    pub current: String,
    /// A revision of that name holds another template (a hash collision): nothing else is
    /// planned; the set's `collisionCount` goes up so the next name differs.
    pub collision: bool,
}

/// Plans `owner`'s history given the revisions it controls (`existing`) and the revision names
/// still in use (by live pods or the set's status), which are never deleted.
pub fn plan(
    owner: &Owner<'_>,
    existing: &[&ControllerRevision],
    in_use: &BTreeSet<String>,
) -> Plan {
    let set = owner.meta.name.as_deref().unwrap_or_default();
    let current = revision_name(set, owner.template, owner.collision_count);
    let max = existing.iter().map(|r| r.revision).max().unwrap_or(0);
    let mut plan = Plan {
        current: current.clone(),
        ..Plan::default()
    };
    match existing
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(&current))
    {
        Some(r) if !holds(r, owner.template) => {
            plan.collision = true;
            return plan;
        }
        Some(r) if r.revision < max => plan.renumber = Some((current.clone(), max + 1)),
        Some(_) => {}
        None => plan.create = Some(new_revision(owner, &current, max + 1)),
    }
    // The history after this plan, oldest first; the limit counts the revisions not in use.
    let mut numbered: BTreeMap<i64, &str> = BTreeMap::new();
    for r in existing {
        let name = r.metadata.name.as_deref().unwrap_or_default();
        if name != current {
            numbered.insert(r.revision, name);
        }
    }
    let deletable: Vec<&str> = numbered
        .values()
        .copied()
        .filter(|name| !in_use.contains(*name))
        .collect();
    let limit = owner.limit.max(0) as usize;
    let excess = deletable.len().saturating_sub(limit);
    plan.delete = deletable[..excess].iter().map(|n| n.to_string()).collect();
    plan
}

/// Whether `revision` holds `template` (compared as templates, not as bytes).
fn holds(revision: &ControllerRevision, template: &PodTemplateSpec) -> bool {
    template_of(revision).as_ref() == Some(template)
}

fn new_revision(owner: &Owner<'_>, name: &str, number: i64) -> ControllerRevision {
    let mut labels = owner
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if owner.kind == "DaemonSet" {
        labels.insert(
            REVISION_HASH.into(),
            template_hash(owner.template, owner.collision_count),
        );
    }
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: owner.meta.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![pods::controller_ref(
                "apps/v1", owner.kind, owner.meta,
            )]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(revision_data(owner.template))),
        revision: number,
    }
}

/// How soon a set syncs again after its collision count went up.
pub const COLLISION_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// What [`apply`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// The history is as planned.
    Done,
    /// The current revision's name is taken by another template or another owner: the set's
    /// `collisionCount` must go up (see [`count_collision`]) and the sync run again.
    Collision,
}

/// Carries `plan` out through `api` (the set's namespace) for `owner`. A revision created
/// meanwhile by an earlier sync, or deleted already, is not an error; a name taken by something
/// else is a [`Applied::Collision`].
pub async fn apply(
    api: &Api<ControllerRevision>,
    owner: &Owner<'_>,
    plan: &Plan,
    set_key: &str,
) -> Result<Applied> {
    let failed = |what: &str| Error::api(format!("{what} history of {set_key}"));
    if plan.collision {
        return Ok(Applied::Collision);
    }
    if let Some(revision) = &plan.create {
        match api.create(&PostParams::default(), revision).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Ours with this template (an earlier sync's) is fine; anything else collides.
                let taken = api
                    .get_opt(&plan.current)
                    .await
                    .map_err(failed("reading"))?;
                let uid = owner.meta.uid.as_deref().unwrap_or_default();
                let ours = taken.as_ref().is_some_and(|r| {
                    pods::controller_of(&r.metadata).is_some_and(|c| c.uid == uid)
                        && holds(r, owner.template)
                });
                if !ours {
                    return Ok(Applied::Collision);
                }
            }
            Err(e) => return Err(failed("recording")(e)),
        }
    }
    if let Some((name, number)) = &plan.renumber {
        let patch = json!({"revision": number});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(failed("renumbering")(e)),
        }
    }
    for name in &plan.delete {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(failed("truncating")(e)),
        }
    }
    Ok(Applied::Done)
}

/// Raises the `status.collisionCount` of the set `name` (through `api`, its kind's) from
/// `count`, so its next revision name differs from the one that clashed.
pub async fn count_collision<K>(
    api: &Api<K>,
    name: &str,
    count: Option<i32>,
    set_key: &str,
) -> Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"status": {"collisionCount": count.unwrap_or(0) + 1}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::api(format!(
            "recording a hash collision of {set_key}"
        )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }))
        .unwrap()
    }

    fn meta() -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("set-uid".into()),
            ..ObjectMeta::default()
        }
    }

    fn owner<'a>(meta: &'a ObjectMeta, template: &'a PodTemplateSpec, limit: i32) -> Owner<'a> {
        Owner {
            kind: "StatefulSet",
            meta,
            template,
            limit,
            collision_count: None,
        }
    }

    fn revision(meta: &ObjectMeta, image: &str, number: i64) -> ControllerRevision {
        new_revision(
            &owner(meta, &template(image), 10),
            &revision_name("web", &template(image), None),
            number,
        )
    }

    #[test]
    fn the_first_template_becomes_revision_one_holding_the_rollback_patch() {
        let (m, t) = (meta(), template("nginx:1"));
        let p = plan(&owner(&m, &t, 10), &[], &BTreeSet::new());
        let created = p.create.expect("a revision");
        assert_eq!(created.revision, 1);
        assert_eq!(created.metadata.name, Some(p.current.clone()));
        assert!(p.current.starts_with("web-"));
        assert_eq!(created.metadata.labels.as_ref().unwrap()["app"], "web");
        let owner_ref = &created.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner_ref.kind.as_str(),
                owner_ref.uid.as_str(),
                owner_ref.controller
            ),
            ("StatefulSet", "set-uid", Some(true))
        );
        let data = &created.data.as_ref().unwrap().0;
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            data["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1"
        );
        assert_eq!(template_of(&created), Some(t));
        assert_eq!((p.renumber, p.delete), (None, vec![]));
    }

    #[test]
    fn a_new_template_is_the_next_number_and_an_old_one_moves_to_the_top() {
        let m = meta();
        let one = revision(&m, "nginx:1", 1);
        let two = revision(&m, "nginx:2", 2);
        let t2 = template("nginx:2");
        // Unchanged: nothing to do.
        let p = plan(&owner(&m, &t2, 10), &[&one, &two], &BTreeSet::new());
        assert_eq!((p.create, p.renumber), (None, None));
        // A third template.
        let t3 = template("nginx:3");
        let p = plan(&owner(&m, &t3, 10), &[&one, &two], &BTreeSet::new());
        assert_eq!(p.create.unwrap().revision, 3);
        // Back to the first (an undo): revision 1 becomes 3, nothing new.
        let t1 = template("nginx:1");
        let p = plan(&owner(&m, &t1, 10), &[&one, &two], &BTreeSet::new());
        assert_eq!(p.create, None);
        assert_eq!(p.renumber, Some((revision_name("web", &t1, None), 3)));
    }

    #[test]
    fn history_beyond_the_limit_goes_oldest_first_but_never_what_is_in_use() {
        let m = meta();
        let revs: Vec<ControllerRevision> = (1..=5)
            .map(|n| revision(&m, &format!("nginx:{n}"), n))
            .collect();
        let refs: Vec<&ControllerRevision> = revs.iter().collect();
        let current = template("nginx:5");
        let name = |n: i64| revs[n as usize - 1].metadata.name.clone().unwrap();
        // Limit 2: of revisions 1-4 (5 is current), 1 and 2 go.
        let p = plan(&owner(&m, &current, 2), &refs, &BTreeSet::new());
        assert_eq!(p.delete, vec![name(1), name(2)]);
        // A pod still at revision 1 keeps it; the limit counts only deletable revisions.
        let in_use = BTreeSet::from([name(1)]);
        let p = plan(&owner(&m, &current, 2), &refs, &in_use);
        assert_eq!(p.delete, vec![name(2)]);
        // Limit 0 keeps only what is in use.
        let p = plan(&owner(&m, &current, 0), &refs, &in_use);
        assert_eq!(p.delete, vec![name(2), name(3), name(4)]);
    }

    #[test]
    fn only_revisions_the_set_controls_are_its_history() {
        let m = meta();
        let mine = revision(&m, "nginx:1", 1);
        let mut other = revision(&m, "nginx:2", 2);
        other.metadata.owner_references.as_mut().unwrap()[0].uid = "another".into();
        let mut orphan = revision(&m, "nginx:3", 3);
        orphan.metadata.owner_references = None;
        let owned = owned_by(&m, [&mine, &other, &orphan]);
        assert_eq!(owned, vec![&mine]);
    }

    #[test]
    fn daemon_set_revisions_carry_the_hash_label() {
        let (m, t) = (meta(), template("nginx:1"));
        let mut o = owner(&m, &t, 10);
        o.kind = "DaemonSet";
        let created = plan(&o, &[], &BTreeSet::new()).create.unwrap();
        assert_eq!(
            created.metadata.labels.unwrap()[REVISION_HASH],
            template_hash(&t, None)
        );
    }

    #[test]
    fn a_name_holding_another_template_is_a_collision_resolved_by_the_count() {
        let m = meta();
        let t = template("nginx:2");
        // A revision of this set under the current template's name, holding another template
        // (what a hash collision looks like).
        let mut clash = revision(&m, "nginx:1", 1);
        clash.metadata.name = Some(revision_name("web", &t, None));
        let p = plan(&owner(&m, &t, 10), &[&clash], &BTreeSet::new());
        assert!(p.collision);
        assert_eq!((p.create, p.renumber, p.delete), (None, None, vec![]));
        // With the count raised the name differs, and the template gets its own revision.
        let mut o = owner(&m, &t, 10);
        o.collision_count = Some(1);
        let p = plan(&o, &[&clash], &BTreeSet::new());
        assert!(!p.collision);
        assert_ne!(p.current, revision_name("web", &t, None));
        let created = p.create.expect("a revision under the new name");
        assert_eq!(created.metadata.name.as_deref(), Some(p.current.as_str()));
        assert_eq!(created.revision, 2);
        assert_eq!(template_of(&created), Some(t));
    }

    #[test]
    fn the_count_changes_the_hash_only_once_there_was_a_collision() {
        let t = template("nginx:1");
        assert_eq!(template_hash(&t, None), template_hash(&t, Some(0)));
        assert_ne!(template_hash(&t, None), template_hash(&t, Some(1)));
        assert_ne!(template_hash(&t, Some(1)), template_hash(&t, Some(2)));
    }
}

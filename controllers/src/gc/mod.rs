//! The garbage collector's pure part: what to do with an object given the state of its owners, and
//! what an owner being deleted with the `orphan` or `foregroundDeletion` finalizer waits for.
//!
//! - Background (the default): the owner goes at once; each dependent whose owners are all gone
//!   is then deleted.
//! - Foreground: the API server keeps the owner with the `foregroundDeletion` finalizer; its
//!   dependents are deleted (themselves in the foreground), and once none with
//!   `blockOwnerDeletion` remains the finalizer is removed and the owner goes.
//! - Orphan: the API server keeps the owner with the `orphan` finalizer; the collector removes the
//!   owner's reference from every dependent, then the finalizer.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::namespace::Resource;

/// The finalizer the API server adds for foreground deletion.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer the API server adds for orphaning deletion.
pub const ORPHAN: &str = "orphan";

/// What the collector knows of one owner (after checking the API, not only a cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerState {
    /// No object of that name and UID exists.
    Absent,
    /// It exists and is not waiting for its dependents.
    Present,
    /// It is being deleted in the foreground: its dependents must go first.
    WaitingForDependents,
}

/// The deletion propagation the collector asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// Delete now, dependents afterwards.
    Background,
    /// Delete dependents first.
    Foreground,
    /// Keep dependents, dropping their references.
    Orphan,
}

impl Propagation {
    /// The `propagationPolicy` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// Resources the collector never watches, as kube-controller-manager's defaults: Events are
/// many, short-lived and never owners or owned in practice.
pub const IGNORED: &[(&str, &str)] = &[("", "events"), ("events.k8s.io", "events")];

/// The discovered resources whose objects take part in the graph: those served with `list`,
/// `watch` and `delete` (the collector must see them and be able to delete them), not
/// subresources, not [`IGNORED`], one version per group and resource (the first discovered, which
/// discovery orders preferred-first).
pub fn monitored(discovered: &[Resource]) -> Vec<Resource> {
    let mut out: Vec<Resource> = Vec::new();
    for r in discovered {
        let can = |verb: &str| r.verbs.iter().any(|v| v == verb);
        if r.plural.contains('/')
            || !(can("list") && can("watch") && can("delete"))
            || IGNORED.contains(&(r.group.as_str(), r.plural.as_str()))
            || out
                .iter()
                .any(|o| o.group == r.group && o.plural == r.plural)
        {
            continue;
        }
        out.push(r.clone());
    }
    out
}

/// What to do with a dependent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: an owner still holds it (or it has no owners).
    Keep,
    /// Remove the references to these owner UIDs (gone, or waiting while another owner keeps
    /// the object).
    RemoveOwners(Vec<String>),
    /// Delete the object with this propagation.
    Delete(Propagation),
}

/// `attemptToDeleteItem`: the decision for an object with `meta`, given each owner's state.
pub fn decide(meta: &ObjectMeta, state: impl Fn(&OwnerReference) -> OwnerState) -> Decision {
    let refs = meta.owner_references.as_deref().unwrap_or(&[]);
    if refs.is_empty() || meta.deletion_timestamp.is_some() {
        return Decision::Keep;
    }
    let mut solid = 0;
    let mut dangling = Vec::new();
    let mut waiting = Vec::new();
    for r in refs {
        match state(r) {
            OwnerState::Present => solid += 1,
            OwnerState::Absent => dangling.push(r.uid.clone()),
            OwnerState::WaitingForDependents => waiting.push(r.uid.clone()),
        }
    }
    if solid > 0 {
        if dangling.is_empty() && waiting.is_empty() {
            return Decision::Keep;
        }
        // Another owner keeps the object: it must not hold back the waiting owners either.
        dangling.extend(waiting);
        return Decision::RemoveOwners(dangling);
    }
    if !waiting.is_empty() {
        return Decision::Delete(Propagation::Foreground);
    }
    let finalizers = meta.finalizers.as_deref().unwrap_or(&[]);
    if finalizers.iter().any(|f| f == ORPHAN) {
        Decision::Delete(Propagation::Orphan)
    } else if finalizers.iter().any(|f| f == FOREGROUND) {
        Decision::Delete(Propagation::Foreground)
    } else {
        Decision::Delete(Propagation::Background)
    }
}

/// The owner state of an object as the collector sees it: waiting when it is being deleted with
/// the foreground finalizer.
pub fn state_of(meta: &ObjectMeta) -> OwnerState {
    if meta.deletion_timestamp.is_some() && has_finalizer(meta, FOREGROUND) {
        OwnerState::WaitingForDependents
    } else {
        OwnerState::Present
    }
}

/// Whether the object carries `finalizer`.
pub fn has_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// The owner reference of `meta` to the owner with `uid`.
pub fn reference_to<'a>(meta: &'a ObjectMeta, uid: &str) -> Option<&'a OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.uid == uid)
}

/// Whether a dependent holds back the foreground deletion of the owner with `uid`.
pub fn blocks(meta: &ObjectMeta, uid: &str) -> bool {
    reference_to(meta, uid).is_some_and(|r| r.block_owner_deletion == Some(true))
}

/// The owner references of `meta` without those to `uids` (`None` for an empty list).
pub fn without_owners(meta: &ObjectMeta, uids: &[String]) -> Option<Vec<OwnerReference>> {
    let kept: Vec<OwnerReference> = meta
        .owner_references
        .iter()
        .flatten()
        .filter(|r| !uids.contains(&r.uid))
        .cloned()
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// What an owner being deleted waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerWork {
    /// Not being deleted, or no finalizer of the collector's.
    Nothing,
    /// Orphaning: drop the reference from these dependents, then the `orphan` finalizer.
    Orphan,
    /// Foreground: these blocking dependents must be gone (deleted in the foreground unless
    /// already being deleted) before the finalizer is removed; none left means remove it now.
    Foreground,
}

/// The collector's work for an owner with `meta`.
pub fn owner_work(meta: &ObjectMeta) -> OwnerWork {
    if meta.deletion_timestamp.is_none() {
        OwnerWork::Nothing
    } else if has_finalizer(meta, ORPHAN) {
        OwnerWork::Orphan
    } else if has_finalizer(meta, FOREGROUND) {
        OwnerWork::Foreground
    } else {
        OwnerWork::Nothing
    }
}

/// The finalizers of `meta` without `finalizer`.
pub fn without_finalizer(meta: &ObjectMeta, finalizer: &str) -> Vec<String> {
    meta.finalizers
        .iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::time;

    fn owner(uid: &str, block: bool) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: uid.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(block),
        }
    }

    fn dependent(owners: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            name: Some("p".into()),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn objects_without_owners_or_with_live_owners_stay() {
        assert_eq!(
            decide(&ObjectMeta::default(), |_| OwnerState::Absent),
            Decision::Keep
        );
        let d = dependent(vec![owner("a", true)]);
        assert_eq!(decide(&d, |_| OwnerState::Present), Decision::Keep);
    }

    #[test]
    fn background_deletes_dependents_of_gone_owners() {
        let d = dependent(vec![owner("a", true)]);
        assert_eq!(
            decide(&d, |_| OwnerState::Absent),
            Decision::Delete(Propagation::Background)
        );
        // The dependent's own finalizers choose how its dependents go.
        let mut o = d.clone();
        o.finalizers = Some(vec![ORPHAN.into()]);
        assert_eq!(
            decide(&o, |_| OwnerState::Absent),
            Decision::Delete(Propagation::Orphan)
        );
        // Already being deleted: nothing more to do.
        let mut gone = d;
        gone.deletion_timestamp = Some(time("2026-01-01T00:00:00Z"));
        assert_eq!(decide(&gone, |_| OwnerState::Absent), Decision::Keep);
    }

    #[test]
    fn foreground_owner_deletes_dependents_in_the_foreground() {
        let d = dependent(vec![owner("a", true)]);
        assert_eq!(
            decide(&d, |_| OwnerState::WaitingForDependents),
            Decision::Delete(Propagation::Foreground)
        );
        let mut owner_meta = ObjectMeta {
            finalizers: Some(vec![FOREGROUND.into()]),
            ..ObjectMeta::default()
        };
        assert_eq!(state_of(&owner_meta), OwnerState::Present);
        assert_eq!(owner_work(&owner_meta), OwnerWork::Nothing);
        owner_meta.deletion_timestamp = Some(time("2026-01-01T00:00:00Z"));
        assert_eq!(state_of(&owner_meta), OwnerState::WaitingForDependents);
        assert_eq!(owner_work(&owner_meta), OwnerWork::Foreground);
        assert!(blocks(&d, "a"));
        assert!(!blocks(&dependent(vec![owner("a", false)]), "a"));
        assert!(without_finalizer(&owner_meta, FOREGROUND).is_empty());
    }

    #[test]
    fn a_remaining_owner_keeps_the_object_and_drops_the_others() {
        let d = dependent(vec![owner("a", true), owner("b", true), owner("c", true)]);
        let decision = decide(&d, |r| match r.uid.as_str() {
            "a" => OwnerState::Present,
            "b" => OwnerState::Absent,
            _ => OwnerState::WaitingForDependents,
        });
        assert_eq!(
            decision,
            Decision::RemoveOwners(vec!["b".into(), "c".into()])
        );
        let kept = without_owners(&d, &["b".into(), "c".into()]).unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].uid, "a");
        assert_eq!(
            without_owners(&d, &["a".into(), "b".into(), "c".into()]),
            None
        );
    }

    fn resource(group: &str, version: &str, plural: &str, verbs: &[&str]) -> Resource {
        Resource {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: plural.into(),
            namespaced: true,
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn monitors_every_listable_watchable_deletable_resource_once() {
        let all = [
            "create", "delete", "get", "list", "patch", "update", "watch",
        ];
        let discovered = vec![
            resource("", "v1", "pods", &all),
            resource("", "v1", "pods/status", &["get", "patch", "update"]),
            resource("", "v1", "namespaces", &all),
            resource("", "v1", "events", &all),
            resource("events.k8s.io", "v1", "events", &all),
            resource("", "v1", "bindings", &["create"]),
            resource("", "v1", "componentstatuses", &["get", "list"]),
            resource("batch", "v1", "jobs", &all),
            resource("batch", "v1beta1", "jobs", &all),
            resource("example.com", "v1", "widgets", &["get", "list", "watch"]),
        ];
        let picked: Vec<(String, String, String)> = monitored(&discovered)
            .into_iter()
            .map(|r| (r.group, r.version, r.plural))
            .collect();
        let want = [
            ("", "v1", "pods"),
            ("", "v1", "namespaces"),
            ("batch", "v1", "jobs"),
        ];
        assert_eq!(
            picked,
            want.map(|(g, v, p)| (g.to_string(), v.to_string(), p.to_string()))
        );
    }

    #[test]
    fn orphaning_owner() {
        let meta = ObjectMeta {
            deletion_timestamp: Some(time("2026-01-01T00:00:00Z")),
            finalizers: Some(vec![ORPHAN.into(), "example.com/x".into()]),
            ..ObjectMeta::default()
        };
        assert_eq!(owner_work(&meta), OwnerWork::Orphan);
        assert_eq!(without_finalizer(&meta, ORPHAN), ["example.com/x"]);
    }
}

//! The served kinds: the built-in ones and those defined at run time, looked up by URL name or by
//! kind. One [`Kinds`] per API server; it changes while the server runs (a
//! CustomResourceDefinition becomes Established, changes or goes), and every reader takes an
//! immutable [`Snapshot`], so a request sees one consistent set of kinds from start to end.

use std::sync::{Arc, RwLock};

use skiff_meta::ResourceInfo;

use crate::Kind;

/// One consistent set of served kinds.
///
/// Lookups scan the list: a cluster serves tens to a few hundred kinds, and comparing their short
/// names costs less than hashing a key built for the lookup.
#[derive(Default)]
pub struct Snapshot {
    kinds: Vec<Arc<dyn Kind>>,
    generation: u64,
}

impl Snapshot {
    fn new(kinds: Vec<Arc<dyn Kind>>, generation: u64) -> Snapshot {
        Snapshot { kinds, generation }
    }

    /// Every served kind, built-in ones first, in discovery order.
    pub fn kinds(&self) -> &[Arc<dyn Kind>] {
        &self.kinds
    }

    /// The infos of every served kind, in discovery order.
    pub fn infos(&self) -> impl Iterator<Item = &'static ResourceInfo> + '_ {
        self.kinds.iter().map(|k| k.info())
    }

    /// The kind served under `group`/`version` with URL name `plural`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<dyn Kind>> {
        self.kinds.iter().find(|k| {
            let info = k.info();
            info.plural == plural && info.version == version && info.group == group
        })
    }

    /// The kind `kind` of `group`, in its first registered version.
    pub fn lookup_kind(&self, group: &str, kind: &str) -> Option<&Arc<dyn Kind>> {
        self.kinds.iter().find(|k| {
            let info = k.info();
            info.kind == kind && info.group == group
        })
    }

    /// The kind that `info` describes.
    pub fn of(&self, info: &ResourceInfo) -> Option<&Arc<dyn Kind>> {
        self.lookup(info.group, info.version, info.plural)
    }

    /// Counts the changes since the registry was made: equal generations, equal sets of kinds.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The served API groups (core excluded) in discovery order, each with its versions.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for r in self.infos().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version) {
                        versions.push(r.version);
                    }
                }
                None => out.push((r.group, vec![r.version])),
            }
        }
        out
    }
}

/// The registry of served kinds.
pub struct Kinds {
    builtin: usize,
    current: RwLock<Arc<Snapshot>>,
}

impl Default for Kinds {
    fn default() -> Self {
        Kinds::builtin()
    }
}

impl Kinds {
    /// The built-in kinds only.
    pub fn builtin() -> Kinds {
        let kinds = crate::builtin::all().to_vec();
        Kinds {
            builtin: kinds.len(),
            current: RwLock::new(Arc::new(Snapshot::new(kinds, 0))),
        }
    }

    /// The kinds served now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The kind served under `group`/`version` with URL name `plural`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<dyn Kind>> {
        self.snapshot().lookup(group, version, plural).cloned()
    }

    /// The kind that `info` describes, if it is still served.
    pub fn of(&self, info: &ResourceInfo) -> Option<Arc<dyn Kind>> {
        self.snapshot().of(info).cloned()
    }

    /// Serves `kinds` in place of whatever was served of `group`/`plural` (in any version) by an
    /// earlier call: the versions of one custom resource, as its definition now says. An empty
    /// list stops serving it. Built-in kinds are never replaced.
    pub fn set(&self, group: &str, plural: &str, kinds: Vec<Arc<dyn Kind>>) {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        let mut next: Vec<Arc<dyn Kind>> = Vec::with_capacity(current.kinds.len() + kinds.len());
        for (i, kind) in current.kinds.iter().enumerate() {
            let info = kind.info();
            if i >= self.builtin && info.group == group && info.plural == plural {
                continue;
            }
            next.push(kind.clone());
        }
        next.extend(kinds);
        *current = Arc::new(Snapshot::new(next, current.generation + 1));
    }

    /// Serves what a CustomResourceDefinition defines, as [`Kinds::set`] does, when it builds
    /// (see [`crate::custom::kinds_of`]); returns whether it did. For readers that know a
    /// definition only as an object (history read offline, a client of a server): the API
    /// server's definition controller also checks names and sets conditions.
    pub fn define(&self, definition: &serde_json::Value) -> bool {
        let text = |p: &str| definition.pointer(p).and_then(serde_json::Value::as_str);
        let (Some(group), Some(plural)) = (text("/spec/group"), text("/spec/names/plural")) else {
            return false;
        };
        if self.is_builtin(group, plural) {
            return false;
        }
        match crate::custom::kinds_of(definition) {
            Ok(served) => {
                self.set(group, plural, served);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `group`/`plural` is a built-in resource (which no definition may take over).
    pub fn is_builtin(&self, group: &str, plural: &str) -> bool {
        self.snapshot().kinds[..self.builtin]
            .iter()
            .any(|k| k.info().group == group && k.info().plural == plural)
    }
}

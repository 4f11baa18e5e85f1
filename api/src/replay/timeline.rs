//! The reads behind the timeline page (`/ui/`): changes counted per time bucket over a window of
//! the log, with markers for what an operator looks for first (deletes, pod restarts, node
//! condition changes, Warning events); the list of changes in a window, newest first, in pages
//! with a continue token; and the cluster at one revision as rows per kind.
//!
//! Every answer reads a bounded part of the log, never the whole of it: at most
//! [`MAX_SCAN`] log entries (one entry per revision), read newest first in chunks of [`CHUNK`].
//! A timeline window longer than that counts only its newest [`MAX_SCAN`] revisions and says so
//! (`complete: false`, `scannedFrom`), so the page can zoom in; a change-list page that reaches
//! the bound before filling up returns what it found with a continue token.
//!
//! ```text
//!   window   from ............................................ to
//!   scanned               scannedFrom <- chunk <- chunk <- chunk  (newest first, <= MAX_SCAN)
//!   buckets  |  b0  |  b1  |  b2  | ... |  bN  |   (aligned to the width, by commit time)
//! ```
//!
//! The pure parts ([`markers`], [`bucket_width`], [`Buckets`], [`Select`]) are tested without a
//! log; the reads over one in the tests at the bottom.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use skiff_meta::labels::Selector;
use skiff_store::Revision;

use super::index::Segment;
use super::{Change, Error as ReplayError, Filter as Scope, Operation, Point, Replay};
use crate::error::Error;

/// The most log entries (revisions) one timeline or change-list request reads.
pub const MAX_SCAN: u64 = 20_000;

/// How many revisions one read of the log covers while scanning.
pub const CHUNK: u64 = 2_000;

/// The most buckets a timeline has.
pub const MAX_BUCKETS: usize = 500;

/// The most markers one bucket lists (all are counted).
pub const MAX_MARKERS_PER_BUCKET: usize = 20;

/// The most changes one change-list page holds (plus the rest of its last revision).
pub const MAX_PAGE: usize = 1_000;

/// The most rows per kind a snapshot lists (all are counted).
pub const MAX_ROWS_PER_KIND: usize = 500;

/// How much of the log one request may read: at most `scan` revisions, `chunk` at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The most revisions read.
    pub scan: u64,
    /// Revisions per read.
    pub chunk: u64,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            scan: MAX_SCAN,
            chunk: CHUNK,
        }
    }
}

/// A marker kind as the chart names it (`delete`, `nodeCondition`).
pub fn marker_name(kind: MarkerKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What a change is worth pointing at on the chart.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum MarkerKind {
    /// An object was deleted.
    Delete,
    /// A container of a pod restarted (a `restartCount` went up).
    Restart,
    /// A node's condition changed status (`Ready` turned `False`, ...).
    NodeCondition,
    /// A Warning event was recorded.
    Warning,
}

/// One marker: what, and a few words on it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Marker {
    /// What.
    pub kind: MarkerKind,
    /// For a person (`Ready: True -> False`, `main restarted (2)`, the event's reason).
    pub detail: String,
}

fn restarts(pod: Option<&Value>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Some(status) = pod.and_then(|p| p.get("status")) else {
        return out;
    };
    for list in ["initContainerStatuses", "containerStatuses"] {
        for c in status
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            let count = c.get("restartCount").and_then(Value::as_u64).unwrap_or(0);
            out.insert(name.to_string(), count);
        }
    }
    out
}

fn conditions(node: Option<&Value>) -> BTreeMap<String, String> {
    node.and_then(|n| n.pointer("/status/conditions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some((
                c.get("type")?.as_str()?.to_string(),
                c.get("status")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The status of a node condition when all is well.
fn healthy(condition: &str) -> &'static str {
    if condition == "Ready" {
        "True"
    } else {
        "False"
    }
}

/// The markers of one change, from its kind and the object before and after.
pub fn markers(change: &Change) -> Vec<Marker> {
    let mut out = Vec::new();
    if change.operation == Operation::Deleted {
        out.push(Marker {
            kind: MarkerKind::Delete,
            detail: format!("{} deleted", change.kind),
        });
    }
    let (before, after) = (change.before.as_ref(), change.after.as_ref());
    match change.kind.as_str() {
        "Pod" if after.is_some() => {
            let old = restarts(before);
            for (name, count) in restarts(after) {
                if count > old.get(&name).copied().unwrap_or(0) {
                    out.push(Marker {
                        kind: MarkerKind::Restart,
                        detail: format!("{name} restarted ({count})"),
                    });
                }
            }
        }
        "Node" if after.is_some() => {
            let old = conditions(before);
            for (kind, status) in conditions(after) {
                match old.get(&kind) {
                    Some(was) if *was != status => out.push(Marker {
                        kind: MarkerKind::NodeCondition,
                        detail: format!("{kind}: {was} -> {status}"),
                    }),
                    // A condition first reported is news only when it is not the healthy one
                    // (Ready True, the pressure conditions False), as on a node's first report.
                    None if before.is_some() && status != healthy(&kind) => out.push(Marker {
                        kind: MarkerKind::NodeCondition,
                        detail: format!("{kind}: {status}"),
                    }),
                    _ => {}
                }
            }
        }
        "Event" => {
            let warning =
                after.and_then(|e| e.get("type")).and_then(Value::as_str) == Some("Warning");
            // An event series rewrites its object; a marker for each new occurrence, not for
            // other writes (a count going up is a new occurrence).
            let count = |e: Option<&Value>| {
                e.and_then(|e| e.get("count").or_else(|| e.pointer("/series/count")))
                    .and_then(Value::as_u64)
            };
            let new = change.operation == Operation::Created || count(after) > count(before);
            if warning && new {
                let reason = after
                    .and_then(|e| e.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("Warning");
                out.push(Marker {
                    kind: MarkerKind::Warning,
                    detail: reason.to_string(),
                });
            }
        }
        _ => {}
    }
    out
}

/// A bucket width (seconds) that splits `span_seconds` into at most about `buckets` buckets,
/// rounded up to one a person reads easily (1s, 2s, 5s, 10s, 15s, 30s, 1m, 2m, 5m, ... 1d, then
/// whole days).
pub fn bucket_width(span_seconds: u64, buckets: usize) -> u64 {
    const NICE: [u64; 18] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200,
        86_400,
    ];
    let raw = span_seconds.div_ceil(buckets.max(1) as u64).max(1);
    NICE.iter()
        .copied()
        .find(|w| *w >= raw)
        .unwrap_or_else(|| raw.div_ceil(86_400) * 86_400)
}

/// Counts of one bucket of the timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bucket {
    /// Its start, seconds since the epoch (it ends where the next starts).
    pub start: u64,
    /// Creates.
    pub created: u64,
    /// Updates (anything but only the status).
    pub updated: u64,
    /// Status-only updates.
    pub status_updated: u64,
    /// Deletes.
    pub deleted: u64,
    /// The oldest revision counted in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_revision: Option<u64>,
    /// The newest revision counted in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_revision: Option<u64>,
    /// How many markers it has, per kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub marker_counts: BTreeMap<String, u64>,
    /// Its first markers (at most [`MAX_MARKERS_PER_BUCKET`]), with the change they mark.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<PlacedMarker>,
}

/// A marker placed on the chart: the marker and the change it marks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlacedMarker {
    /// The marker.
    #[serde(flatten)]
    pub marker: Marker,
    /// The revision of the change.
    pub revision: u64,
    /// The object's kind.
    pub object_kind: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// Changes counted into equal time buckets from `start` (seconds since the epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    start: u64,
    width: u64,
    buckets: Vec<Bucket>,
}

impl Buckets {
    /// `count` buckets of `width` seconds from `start` (aligned down to a multiple of `width`,
    /// so the same instant lands in the same bucket whatever the window).
    pub fn new(start: u64, width: u64, count: usize) -> Buckets {
        let width = width.max(1);
        let start = start - start % width;
        let buckets = (0..count.max(1) as u64)
            .map(|i| Bucket {
                start: start + i * width,
                ..Bucket::default()
            })
            .collect();
        Buckets {
            start,
            width,
            buckets,
        }
    }

    /// Buckets of a nice width covering `from..=to` (seconds) in about `count` buckets.
    pub fn covering(from: u64, to: u64, count: usize) -> Buckets {
        let width = bucket_width(to.saturating_sub(from) + 1, count);
        let aligned = from - from % width;
        let n = ((to - aligned) / width + 1) as usize;
        Buckets::new(from, width, n)
    }

    /// The bucket width in seconds.
    pub fn width(&self) -> u64 {
        self.width
    }

    /// Counts `change`, committed at `time` (seconds), with its markers. A change outside the
    /// buckets is not counted (returns false).
    pub fn add(&mut self, time: u64, change: &Change, markers: Vec<Marker>) -> bool {
        let mut counts = [0; 4];
        counts[match change.operation {
            Operation::Created => 0,
            Operation::Updated => 1,
            Operation::StatusUpdated => 2,
            Operation::Deleted => 3,
        }] = 1;
        let placed: Vec<PlacedMarker> = markers
            .into_iter()
            .map(|marker| PlacedMarker {
                marker,
                revision: change.revision,
                object_kind: change.kind.clone(),
                namespace: change.namespace.clone(),
                name: change.name.clone(),
            })
            .collect();
        self.add_counts(
            time,
            counts,
            (change.revision, change.revision),
            placed.iter().map(|p| (p.marker.kind, 1)),
            &placed,
        )
    }

    /// Counts changes committed at `time` (seconds): `counts` created, updated, status updated
    /// and deleted, in revisions `first..=last`, with `marker_counts` markers of which `markers`
    /// are placed (a bucket keeps its first [`MAX_MARKERS_PER_BUCKET`]). Outside the buckets,
    /// nothing is counted (returns false).
    pub fn add_counts(
        &mut self,
        time: u64,
        counts: [u64; 4],
        (first, last): (u64, u64),
        marker_counts: impl IntoIterator<Item = (MarkerKind, u64)>,
        markers: &[PlacedMarker],
    ) -> bool {
        if time < self.start {
            return false;
        }
        let Some(bucket) = self
            .buckets
            .get_mut(((time - self.start) / self.width) as usize)
        else {
            return false;
        };
        bucket.created += counts[0];
        bucket.updated += counts[1];
        bucket.status_updated += counts[2];
        bucket.deleted += counts[3];
        bucket.first_revision = Some(bucket.first_revision.map_or(first, |r| r.min(first)));
        bucket.last_revision = Some(bucket.last_revision.map_or(last, |r| r.max(last)));
        for (kind, n) in marker_counts {
            *bucket.marker_counts.entry(marker_name(kind)).or_default() += n;
        }
        let room = MAX_MARKERS_PER_BUCKET.saturating_sub(bucket.markers.len());
        bucket.markers.extend(markers.iter().take(room).cloned());
        true
    }

    /// The buckets, oldest first.
    pub fn into_vec(self) -> Vec<Bucket> {
        self.buckets
    }
}

/// Which changes the page shows, beyond the resource and namespace a [`Scope`] narrows the
/// read to: one object's name, a label selector (on the object before or after), a field manager.
#[derive(Debug, Clone, Default)]
pub struct Select {
    /// Only objects with this name.
    pub name: Option<String>,
    /// Only objects whose labels (before or after the change) match.
    pub selector: Option<Selector>,
    /// Only changes made by this field manager.
    pub manager: Option<String>,
}

impl Select {
    /// Whether `change` is shown.
    pub fn matches(&self, change: &Change) -> bool {
        self.name.as_ref().is_none_or(|n| *n == change.name)
            && self
                .manager
                .as_ref()
                .is_none_or(|m| change.manager.as_ref() == Some(m))
            && self.selector.as_ref().is_none_or(|s| {
                [&change.before, &change.after]
                    .into_iter()
                    .flatten()
                    .any(|o| s.matches_object(o))
            })
    }
}

/// One row of the change list: a change without its objects.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// The revision.
    pub revision: u64,
    /// When it was committed (RFC 3339).
    pub time: String,
    /// What the write did.
    pub operation: Operation,
    /// The object's kind.
    pub kind: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The field manager, where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// Who made it, where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::origin::Origin>,
    /// The top-level fields that changed.
    pub fields: Vec<String>,
    /// What it is worth pointing at.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<Marker>,
}

impl Row {
    /// The row of `change`.
    pub fn of(change: Change) -> Row {
        let markers = markers(&change);
        Row {
            revision: change.revision,
            time: change.time,
            operation: change.operation,
            kind: change.kind,
            namespace: change.namespace,
            name: change.name,
            manager: change.manager,
            user: change.user,
            fields: change.fields,
            markers,
        }
    }
}

/// The answer of `timeline`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// The window's first revision.
    pub from: u64,
    /// Its last revision.
    pub to: u64,
    /// The oldest revision counted: `from` unless the window is longer than [`MAX_SCAN`].
    pub scanned_from: u64,
    /// Whether every revision of the window was counted.
    pub complete: bool,
    /// Seconds per bucket.
    pub width: u64,
    /// The window's start and end, seconds since the epoch.
    pub start: u64,
    /// Its end.
    pub end: u64,
    /// The buckets, oldest first.
    pub buckets: Vec<Bucket>,
    /// Changes left out because their versions are pruned (node Leases, Events).
    pub pruned: usize,
    /// The revisions the server has summarised so far (`[first, last]`), where it summarises
    /// the log: a chart counts them without reading them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarised: Option<[u64; 2]>,
    /// The oldest retained revision (what `since` may go back to).
    pub oldest: u64,
    /// The newest revision.
    pub newest: u64,
}

/// The answer of `changes`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    /// The changes, newest first.
    pub items: Vec<Row>,
    /// Pass as `continue` for the next (older) page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#continue: Option<String>,
    /// The revisions read: `scannedFrom..=scannedTo`.
    pub scanned_from: u64,
    /// The newest revision read.
    pub scanned_to: u64,
}

/// One kind at a revision: its rows, like `kubectl get`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KindTable {
    /// The kind.
    pub kind: String,
    /// Its resource as `--resource` takes it (`deployments.apps`, `pods`).
    pub resource: String,
    /// Whether it is namespaced.
    pub namespaced: bool,
    /// How many objects it had.
    pub total: usize,
    /// The first [`MAX_ROWS_PER_KIND`] of them.
    pub rows: Vec<TableRow>,
}

/// One object in a [`KindTable`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableRow {
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The revision of its version then.
    pub resource_version: String,
    /// Its creation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// The kind's usual columns (`ready 2/2`, `phase Running`).
    pub summary: String,
}

/// The answer of `snapshot`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The revision read at.
    pub revision: u64,
    /// Its commit time, when retained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The kinds with objects then.
    pub kinds: Vec<KindTable>,
    /// Kinds whose history at this revision is pruned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<super::Pruned>,
}

/// A served kind, for the page's filters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KindName {
    /// The kind.
    pub kind: String,
    /// Its resource as `resource=` takes it.
    pub resource: String,
    /// Whether it is namespaced.
    pub namespaced: bool,
    /// Its API group (`""` for the core group).
    pub group: String,
    /// The version it is served (and stored) in.
    pub version: String,
    /// Its plural, as in its URL path.
    pub plural: String,
}

/// An object that names another as its owner, at some revision.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Owned {
    /// Its kind.
    pub kind: String,
    /// Its resource as `resource=` takes it.
    pub resource: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// The objects at `at` (in `namespace`, where the owner lives) whose `ownerReferences` name the
/// object with `uid`. Reads every kind once at one revision; kinds whose history there is pruned
/// are skipped.
pub async fn owned(
    replay: &Replay,
    at: Revision,
    namespace: Option<&str>,
    uid: &str,
) -> Result<Vec<Owned>, Error> {
    let kinds = replay.kinds();
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for info in kinds.infos() {
        // Owners in a namespace own objects in it; cluster-scoped owners own anything.
        let ns = namespace.filter(|_| info.namespaced);
        let prefix = info.storage_prefix_in(ns);
        if seen.contains(&prefix) {
            continue;
        }
        seen.push(prefix);
        let objects = match replay.list(info, ns, at).await {
            Ok(objects) => objects,
            Err(ReplayError::Pruned { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        for o in objects {
            let owned = o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
                });
            if owned {
                let text = |p: &str| o.pointer(p).and_then(Value::as_str).map(str::to_string);
                out.push(Owned {
                    kind: info.kind.to_string(),
                    resource: resource_name(info),
                    namespace: text("/metadata/namespace"),
                    name: text("/metadata/name").unwrap_or_default(),
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    Ok(out)
}

/// The few columns `kubectl get` shows for a kind, as one line of text.
pub fn summary(kind: &str, object: &Value) -> String {
    let at = |p: &str| object.pointer(p);
    let num = |p: &str| at(p).and_then(Value::as_u64).unwrap_or(0);
    let text = |p: &str| at(p).and_then(Value::as_str).unwrap_or("").to_string();
    match kind {
        "Deployment" | "StatefulSet" | "ReplicaSet" => format!(
            "ready {}/{}",
            num("/status/readyReplicas"),
            at("/spec/replicas").and_then(Value::as_u64).unwrap_or(1)
        ),
        "DaemonSet" => format!(
            "ready {}/{}",
            num("/status/numberReady"),
            num("/status/desiredNumberScheduled")
        ),
        "Pod" => {
            let r: u64 = restarts(Some(object)).values().sum();
            format!(
                "{} restarts {} node {}",
                text("/status/phase"),
                r,
                text("/spec/nodeName")
            )
        }
        "Node" => {
            let c = conditions(Some(object));
            format!("Ready={}", c.get("Ready").map_or("Unknown", String::as_str))
        }
        "Service" => format!("{} {}", text("/spec/type"), text("/spec/clusterIP")),
        "ConfigMap" | "Secret" => format!(
            "data {}",
            at("/data")
                .and_then(Value::as_object)
                .map_or(0, |d| d.len())
        ),
        "Event" => format!(
            "{} {}: {}",
            text("/type"),
            text("/reason"),
            text("/message")
        ),
        "Job" => format!("succeeded {}", num("/status/succeeded")),
        _ => String::new(),
    }
}

fn resource_name(info: &skiff_meta::ResourceInfo) -> String {
    if info.group.is_empty() {
        info.plural.to_string()
    } else {
        format!("{}.{}", info.plural, info.group)
    }
}

fn seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn change_seconds(change: &Change) -> u64 {
    change
        .time
        .parse::<jiff::Timestamp>()
        .map_or(0, |t| t.as_second().max(0) as u64)
}

/// The window of a request: its revisions and its start and end times (seconds).
struct Window {
    from: Revision,
    to: Revision,
    start: u64,
    end: u64,
}

async fn window(
    replay: &Replay,
    since: Option<Point>,
    until: Option<Point>,
    default_span: u64,
) -> Result<Window, Error> {
    let status = replay.store().status();
    let oldest = status.compacted.max(Revision(1));
    let (to, end) = match until {
        None | Some(Point::Now) => (status.revision, seconds(SystemTime::now())),
        Some(p) => {
            let to = replay.resolve(&p).await?;
            let end = match p.time(SystemTime::now()) {
                Some(t) => seconds(t),
                None => replay.time_of(to).await?.map_or(0, seconds),
            };
            (to, end)
        }
    };
    let (from, start) = match since {
        None => {
            let from = Revision(to.0.saturating_sub(default_span - 1)).max(oldest);
            let start = replay.time_of(from).await?.map_or(end, seconds);
            (from, start)
        }
        Some(p) => {
            let resolved = replay.resolve(&p).await?;
            match p.time(SystemTime::now()) {
                // A time: what was committed after it.
                Some(t) => (resolved.next().max(oldest), seconds(t)),
                None => (
                    resolved.max(oldest),
                    replay.time_of(resolved).await?.map_or(end, seconds),
                ),
            }
        }
    };
    if from > to.next() {
        return Err(ReplayError::EmptyWindow { from, to }.into());
    }
    Ok(Window {
        from,
        to,
        start: start.min(end),
        end,
    })
}

/// The one object `scope` names, if it names one: its storage key.
fn one_object(scope: &Scope<'_>) -> Option<Vec<u8>> {
    let info = scope.resource?;
    let name = scope.name?;
    match (info.namespaced, scope.namespace) {
        (true, None) => None,
        (namespaced, ns) => Some(
            info.storage_key(ns.filter(|_| namespaced), name)
                .into_bytes(),
        ),
    }
}

/// The changes of the object stored at `key` in `lo..=hi`, newest first, read from its own
/// history rather than the log; and how many were left out because the version they replaced is
/// no longer kept.
async fn object_changes(
    replay: &Replay,
    key: &[u8],
    lo: Revision,
    hi: Revision,
    scope: &Scope<'_>,
) -> Result<(Vec<Change>, usize), Error> {
    let versions = replay
        .store()
        .history(key)
        .await
        .map_err(|e| Error::from(replay.store_error(e)))?;
    let kinds = replay.kinds();
    let mut out = Vec::new();
    let mut pruned = 0;
    for (commit, event) in versions.into_iter().rev() {
        let revision = event.kv.mod_revision;
        if revision > hi {
            continue;
        }
        if revision < lo {
            break;
        }
        if super::objects::replaces(&event) && event.prev_kv.is_none() {
            pruned += 1;
            continue;
        }
        let entry = skiff_store::LogEntry {
            revision,
            time: commit.time,
            tag: commit.tag,
            events: vec![event],
        };
        out.extend(Replay::changes_of(&kinds, &entry, scope));
    }
    Ok((out, pruned))
}

/// Reads `lo..=hi` of the log newest first in chunks, handing each chunk's changes (newest
/// first) to `visit` until it returns false or `bounds.scan` revisions are read. Returns the
/// oldest revision read and the number of pruned changes.
///
/// One object's changes are read from its own history instead, whatever their number. Blocks of
/// the log that the summary ([`Replay::index`]) shows hold nothing `scope` and `manager` cover
/// are passed over without reading them or counting them against the bound.
async fn scan_back(
    replay: &Replay,
    bounds: Bounds,
    lo: Revision,
    hi: Revision,
    scope: &Scope<'_>,
    manager: Option<&str>,
    mut visit: impl FnMut(Vec<Change>) -> bool,
) -> Result<(Revision, usize), Error> {
    if let Some(key) = one_object(scope) {
        if hi < lo {
            return Ok((hi.next(), 0));
        }
        let (changes, pruned) = object_changes(replay, &key, lo, hi, scope).await?;
        visit(changes);
        return Ok((lo, pruned));
    }
    let index = replay.index();
    let mut hi = hi;
    let mut read = 0;
    let mut pruned = 0;
    let mut oldest = hi.next();
    while hi >= lo && hi.0 > 0 && read < bounds.scan {
        if let Some(block) = index.and_then(|i| i.block_of(hi.0))
            && block.to == hi.0
            && block.from >= lo.0
            && !block.has(scope, manager)
        {
            pruned += block.pruned;
            oldest = Revision(block.from);
            hi = Revision(block.from - 1);
            continue;
        }
        let chunk = bounds.chunk.max(1).min(bounds.scan - read);
        let mut start = Revision(hi.0.saturating_sub(chunk - 1)).max(lo);
        if let Some(index) = index {
            // Chunks stop at block boundaries, so that a block to pass over is never read.
            start = start.max(Revision(index.block_start(hi.0)));
        }
        let page = replay.log(start, Some(hi), scope, chunk as usize).await?;
        read += hi.0 - start.0 + 1;
        pruned += page.pruned;
        oldest = start;
        let mut changes = page.changes;
        changes.reverse();
        if !visit(changes) {
            break;
        }
        hi = Revision(start.0 - 1);
    }
    Ok((oldest, pruned))
}

/// The `timeline` answer: changes in the window counted per bucket.
///
/// Without `since`, the window is the whole retained history when the log is summarised
/// ([`Replay::index`]) or the scope names one object, else its newest `bounds.scan` revisions.
/// The summarised blocks of the window are added whole; the rest is read from the log, newest
/// first, at most `bounds.scan` revisions: what is beyond that is not counted
/// (`complete: false`, `scannedFrom`). A name or a label selector is not in the summary, so such
/// a timeline reads the log.
pub async fn timeline(
    replay: &Replay,
    bounds: Bounds,
    since: Option<Point>,
    until: Option<Point>,
    buckets: usize,
    scope: &Scope<'_>,
    select: &Select,
) -> Result<Timeline, Error> {
    let summarised = replay
        .index()
        .filter(|_| select.name.is_none() && select.selector.is_none());
    if let Some(index) = replay.index() {
        index.touch();
    }
    let default_span = if summarised.is_some() || one_object(scope).is_some() {
        u64::MAX
    } else {
        bounds.scan
    };
    let w = window(replay, since, until, default_span).await?;
    let mut counts = Buckets::covering(w.start, w.end, buckets.clamp(1, MAX_BUCKETS));
    let plan = match summarised {
        Some(index) => index.plan(w.from.0, w.to.0, counts.width()),
        None => vec![Segment::Scan(w.from.0, w.to.0)],
    };
    let mut budget = bounds.scan;
    let mut scanned_from = w.to.next();
    let mut pruned = 0;
    for segment in plan {
        match segment {
            Segment::Block(block) => {
                block.add_to(&mut counts, scope, select.manager.as_deref());
                pruned += block.pruned;
                scanned_from = Revision(block.from);
            }
            Segment::Scan(lo, hi) => {
                let bounds = Bounds {
                    scan: budget,
                    chunk: bounds.chunk,
                };
                let manager = select.manager.as_deref();
                let (oldest, p) = scan_back(
                    replay,
                    bounds,
                    Revision(lo),
                    Revision(hi),
                    scope,
                    manager,
                    |changes| {
                        for change in changes.iter().filter(|c| select.matches(c)) {
                            let m = markers(change);
                            counts.add(change_seconds(change), change, m);
                        }
                        true
                    },
                )
                .await?;
                pruned += p;
                budget -= (hi + 1).saturating_sub(oldest.0).min(budget);
                scanned_from = oldest.min(scanned_from);
                if oldest.0 > lo {
                    break;
                }
            }
        }
    }
    let status = replay.store().status();
    Ok(Timeline {
        from: w.from.0,
        to: w.to.0,
        scanned_from: scanned_from.0.min(w.to.0),
        complete: scanned_from <= w.from,
        width: counts.width(),
        start: w.start,
        end: w.end,
        buckets: counts.into_vec(),
        pruned,
        summarised: replay.index().and_then(|i| i.covered()),
        oldest: status.compacted.max(Revision(1)).0,
        newest: status.revision.0,
    })
}

/// The `changes` answer: one page of the window's changes, newest first. `resume` (a previous
/// page's continue token) is the newest revision this page may show.
pub async fn changes(
    replay: &Replay,
    bounds: Bounds,
    since: Option<Point>,
    until: Option<Point>,
    resume: Option<&str>,
    limit: usize,
    scope: &Scope<'_>,
    select: &Select,
) -> Result<Changes, Error> {
    let w = window(replay, since, until, u64::MAX).await?;
    let hi = match resume {
        Some(token) => {
            let r: u64 = token.parse().map_err(|_| {
                Error::BadRequest(format!(
                    "continue={token:?} is not a token this server gave"
                ))
            })?;
            Revision(r).min(w.to)
        }
        None => w.to,
    };
    let limit = limit.clamp(1, MAX_PAGE);
    let mut items: Vec<Row> = Vec::new();
    let mut full_at: Option<u64> = None;
    let manager = select.manager.as_deref();
    let (oldest, _) = scan_back(replay, bounds, w.from, hi, scope, manager, |changes| {
        for change in changes {
            // A page ends between revisions, so a continue token is just a revision.
            if full_at.is_some_and(|r| r != change.revision) {
                return false;
            }
            if select.matches(&change) {
                let revision = change.revision;
                items.push(Row::of(change));
                if items.len() >= limit && full_at.is_none() {
                    full_at = Some(revision);
                }
            }
        }
        full_at.is_none()
    })
    .await?;
    let next = match full_at {
        Some(r) if r > w.from.0 => Some(r - 1),
        Some(_) => None,
        None if oldest > w.from => Some(oldest.0 - 1),
        None => None,
    };
    Ok(Changes {
        items,
        r#continue: next.map(|r| r.to_string()),
        scanned_from: full_at.unwrap_or(oldest.0).min(hi.0),
        scanned_to: hi.0,
    })
}

/// The `snapshot` answer: every kind's objects at `at` (in `namespace`), as rows.
pub async fn snapshot(
    replay: &Replay,
    at: Revision,
    namespace: Option<&str>,
) -> Result<Snapshot, Error> {
    let kinds = replay.kinds();
    let mut seen: Vec<String> = Vec::new();
    let mut tables = Vec::new();
    let mut pruned = Vec::new();
    let mut infos: Vec<_> = kinds.infos().collect();
    infos.sort_by_key(|i| (i.kind, i.group));
    for info in infos {
        if namespace.is_some() && !info.namespaced {
            continue;
        }
        let prefix = info.storage_prefix_in(namespace);
        if seen.contains(&prefix) {
            continue;
        }
        seen.push(prefix);
        let objects = match replay.list(info, namespace, at).await {
            Ok(objects) => objects,
            Err(ReplayError::Pruned { compacted, .. }) => {
                pruned.push(super::Pruned {
                    kind: info.kind.to_string(),
                    compacted: compacted.0,
                });
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if objects.is_empty() {
            continue;
        }
        let text = |o: &Value, p: &str| o.pointer(p).and_then(Value::as_str).map(str::to_string);
        tables.push(KindTable {
            kind: info.kind.to_string(),
            resource: resource_name(info),
            namespaced: info.namespaced,
            total: objects.len(),
            rows: objects
                .iter()
                .take(MAX_ROWS_PER_KIND)
                .map(|o| TableRow {
                    namespace: text(o, "/metadata/namespace"),
                    name: text(o, "/metadata/name").unwrap_or_default(),
                    resource_version: text(o, "/metadata/resourceVersion").unwrap_or_default(),
                    created: text(o, "/metadata/creationTimestamp"),
                    summary: summary(info.kind, o),
                })
                .collect(),
        });
    }
    let time = replay.time_of(at).await?.map(super::format_time);
    Ok(Snapshot {
        revision: at.0,
        time,
        kinds: tables,
        pruned,
    })
}

/// The served kinds, for the page's filters.
pub fn kind_names(replay: &Replay) -> Vec<KindName> {
    let kinds = replay.kinds();
    let mut out: Vec<KindName> = kinds
        .infos()
        .map(|info| KindName {
            kind: info.kind.to_string(),
            resource: resource_name(info),
            namespaced: info.namespaced,
            group: info.group.to_string(),
            version: info.version.to_string(),
            plural: info.plural.to_string(),
        })
        .collect();
    out.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.resource.cmp(&b.resource)));
    out.dedup_by(|a, b| a.resource == b.resource);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(
        kind: &str,
        operation: Operation,
        before: Option<Value>,
        after: Option<Value>,
    ) -> Change {
        Change {
            revision: 7,
            time: "2026-12-01T10:00:00Z".into(),
            operation,
            kind: kind.into(),
            namespace: Some("default".into()),
            name: "x".into(),
            manager: Some("kubectl".into()),
            user: None,
            fields: vec![],
            before,
            after,
        }
    }

    fn kinds_of(c: &Change) -> Vec<MarkerKind> {
        markers(c).into_iter().map(|m| m.kind).collect()
    }

    #[test]
    fn deletes_restarts_node_conditions_and_warnings_are_marked() {
        let pod = |n: u64| json!({"status": {"containerStatuses": [{"name": "main", "restartCount": n}]}});
        assert_eq!(
            kinds_of(&change(
                "Pod",
                Operation::StatusUpdated,
                Some(pod(1)),
                Some(pod(2))
            )),
            [MarkerKind::Restart]
        );
        assert!(
            kinds_of(&change(
                "Pod",
                Operation::StatusUpdated,
                Some(pod(2)),
                Some(pod(2))
            ))
            .is_empty(),
            "an unchanged restartCount is no restart"
        );
        assert_eq!(
            kinds_of(&change("Pod", Operation::Deleted, Some(pod(3)), None)),
            [MarkerKind::Delete],
            "a deleted pod's restarts are not new"
        );

        let node =
            |ready: &str| json!({"status": {"conditions": [{"type": "Ready", "status": ready}]}});
        let flip = change(
            "Node",
            Operation::StatusUpdated,
            Some(node("True")),
            Some(node("False")),
        );
        assert_eq!(kinds_of(&flip), [MarkerKind::NodeCondition]);
        assert_eq!(markers(&flip)[0].detail, "Ready: True -> False");
        assert!(
            kinds_of(&change(
                "Node",
                Operation::StatusUpdated,
                Some(node("True")),
                Some(node("True"))
            ))
            .is_empty()
        );
        assert!(
            kinds_of(&change(
                "Node",
                Operation::Created,
                None,
                Some(node("True"))
            ))
            .is_empty(),
            "a new node's first conditions are not a change"
        );
        let first = |ready: &str| {
            change(
                "Node",
                Operation::StatusUpdated,
                Some(json!({"status": {}})),
                Some(node(ready)),
            )
        };
        assert!(
            kinds_of(&first("True")).is_empty(),
            "a first healthy report is no news"
        );
        assert_eq!(
            kinds_of(&first("False")),
            [MarkerKind::NodeCondition],
            "a first unhealthy one is"
        );

        let event = |t: &str, count: u64| json!({"type": t, "reason": "BackOff", "count": count});
        let warned = change("Event", Operation::Created, None, Some(event("Warning", 1)));
        assert_eq!(kinds_of(&warned), [MarkerKind::Warning]);
        assert_eq!(markers(&warned)[0].detail, "BackOff");
        assert_eq!(
            kinds_of(&change(
                "Event",
                Operation::Updated,
                Some(event("Warning", 1)),
                Some(event("Warning", 2))
            )),
            [MarkerKind::Warning],
            "a repeated warning is a new occurrence"
        );
        assert!(
            kinds_of(&change(
                "Event",
                Operation::Created,
                None,
                Some(event("Normal", 1))
            ))
            .is_empty()
        );
        assert_eq!(
            kinds_of(&change(
                "ConfigMap",
                Operation::Deleted,
                Some(json!({})),
                None
            )),
            [MarkerKind::Delete]
        );
    }

    #[test]
    fn bucket_widths_are_round_and_cover_the_span() {
        assert_eq!(bucket_width(60, 60), 1);
        assert_eq!(bucket_width(61, 60), 2);
        assert_eq!(
            bucket_width(3_600, 60),
            60,
            "an hour in 60 buckets: a minute each"
        );
        assert_eq!(bucket_width(3_601, 60), 120);
        assert_eq!(bucket_width(0, 60), 1);
        assert_eq!(
            bucket_width(30 * 86_400, 10),
            3 * 86_400,
            "beyond a day: whole days"
        );
        for (span, n) in [(1, 1), (59, 7), (100_000, 100), (7 * 86_400, 500)] {
            assert!(bucket_width(span, n) * n as u64 >= span, "{span} in {n}");
        }
    }

    #[test]
    fn changes_count_into_aligned_buckets_by_operation() {
        // 10:00:00 .. 10:04:59 in minutes; the window starts mid-minute.
        let t0 = 1_800_000_000 - 1_800_000_000 % 60;
        let mut b = Buckets::covering(t0 + 20, t0 + 299, 5);
        assert_eq!(b.width(), 60);
        let mut c = change("ConfigMap", Operation::Created, None, Some(json!({})));
        c.revision = 3;
        assert!(b.add(t0 + 25, &c, vec![]));
        c.revision = 4;
        c.operation = Operation::Updated;
        assert!(b.add(t0 + 59, &c, vec![]));
        c.revision = 9;
        c.operation = Operation::Deleted;
        let m = markers(&c);
        assert!(b.add(t0 + 240, &c, m));
        assert!(!b.add(t0 - 1, &c, vec![]), "before the first bucket");
        assert!(!b.add(t0 + 300, &c, vec![]), "after the last");
        let v = b.into_vec();
        assert_eq!(v.len(), 5);
        assert_eq!(v[0].start, t0, "aligned down to the minute");
        assert_eq!((v[0].created, v[0].updated, v[0].deleted), (1, 1, 0));
        assert_eq!(
            (v[0].first_revision, v[0].last_revision),
            (Some(3), Some(4))
        );
        assert_eq!(
            v[1],
            Bucket {
                start: t0 + 60,
                ..Bucket::default()
            }
        );
        assert_eq!(v[4].deleted, 1);
        assert_eq!(v[4].marker_counts.get("delete"), Some(&1));
        assert_eq!(v[4].markers[0].revision, 9);
    }

    #[test]
    fn a_bucket_lists_a_bounded_number_of_markers_and_counts_all() {
        let mut b = Buckets::new(0, 60, 1);
        let c = change("ConfigMap", Operation::Deleted, Some(json!({})), None);
        for _ in 0..MAX_MARKERS_PER_BUCKET + 5 {
            let m = markers(&c);
            b.add(1, &c, m);
        }
        let v = b.into_vec();
        assert_eq!(v[0].markers.len(), MAX_MARKERS_PER_BUCKET);
        assert_eq!(
            v[0].marker_counts["delete"],
            MAX_MARKERS_PER_BUCKET as u64 + 5
        );
    }

    #[test]
    fn filters_select_by_name_labels_before_or_after_and_manager() {
        let labelled = |app: &str| json!({"metadata": {"labels": {"app": app}}});
        let c = change(
            "Deployment",
            Operation::Updated,
            Some(labelled("web")),
            Some(labelled("api")),
        );
        assert!(Select::default().matches(&c));
        let by_name = |n: &str| Select {
            name: Some(n.into()),
            ..Select::default()
        };
        assert!(by_name("x").matches(&c));
        assert!(!by_name("y").matches(&c));
        let by_labels = |s: &str| Select {
            selector: Some(skiff_meta::labels::parse(s).unwrap()),
            ..Select::default()
        };
        assert!(by_labels("app=web").matches(&c), "the labels before count");
        assert!(by_labels("app=api").matches(&c), "and after");
        assert!(!by_labels("app=db").matches(&c));
        let by_manager = |m: &str| Select {
            manager: Some(m.into()),
            ..Select::default()
        };
        assert!(by_manager("kubectl").matches(&c));
        assert!(!by_manager("controller").matches(&c));
        let mut unknown = c.clone();
        unknown.manager = None;
        assert!(
            !by_manager("kubectl").matches(&unknown),
            "no recorded manager matches none"
        );
    }

    #[test]
    fn summaries_show_the_usual_columns() {
        let d = json!({"spec": {"replicas": 3}, "status": {"readyReplicas": 2}});
        assert_eq!(summary("Deployment", &d), "ready 2/3");
        let p = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running",
            "containerStatuses": [{"name": "a", "restartCount": 1}, {"name": "b", "restartCount": 2}]}});
        assert_eq!(summary("Pod", &p), "Running restarts 3 node n1");
        assert_eq!(summary("Widget", &p), "");
    }
}

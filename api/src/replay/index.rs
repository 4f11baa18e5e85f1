//! A summary of the log for the timeline chart, so that a chart of the whole retained history
//! (a million revisions and more) is counted without decoding it on every request.
//!
//! The log is cut into blocks of [`BLOCK`] revisions (block `b` holds revisions
//! `b*BLOCK+1 ..= (b+1)*BLOCK`). Once a block is complete it never changes, so its summary is
//! computed once: its changes counted per operation into cells, one cell per time unit, resource,
//! namespace and field manager, with the cell's markers. A block spanning at most
//! [`FINE_SPAN`] seconds (a busy one) is counted per second, any other per minute: the cells of a
//! block are never more than its changes, and a chart whose bucket width is a multiple of a
//! block's unit adds its cells instead of reading its revisions.
//!
//! ```text
//!   log      | block 0 | block 1 | ... | block k | block k+1 (not full) |
//!   index    | cells   | cells   | ... | cells   |                      |
//!   request       from [scan][ cells ][ cells  ][ scan ........... ] to
//! ```
//!
//! A request is planned newest first into [`Segment`]s: the blocks it may add whole, and the
//! revisions between them it reads from the log (the edges of the window, the newest revisions
//! not yet in a full block, blocks not summarised yet).
//!
//! The index costs nothing until the timeline is asked for: [`Index::run`] summarises blocks
//! (newest first, then each new one as the log fills it) only while timeline requests keep
//! coming (one in the last [`IDLE`]), at most half a core's worth of time, off the async workers.
//! It lives in memory and is rebuilt after a restart.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use skiff_kinds::Snapshot;
use skiff_meta::ResourceInfo;
use skiff_store::{LogEntry, Revision};
use tokio_util::sync::CancellationToken;

use super::timeline::{Buckets, MarkerKind, PlacedMarker, markers};
use super::{Change, Filter, Replay, objects};

/// Revisions per block.
pub const BLOCK: u64 = 1_000;

/// A block whose revisions were committed within this many seconds is counted per second.
pub const FINE_SPAN: u64 = 600;

/// The summarising stops when no timeline request came for this long (and starts again with the
/// next).
pub const IDLE: Duration = Duration::from_secs(600);

/// The most markers one cell keeps (all are counted), as a chart bucket keeps.
const MAX_MARKERS_PER_CELL: usize = super::timeline::MAX_MARKERS_PER_BUCKET;

const MARKER_KINDS: [MarkerKind; 4] = [
    MarkerKind::Delete,
    MarkerKind::Restart,
    MarkerKind::NodeCondition,
    MarkerKind::Warning,
];

/// The changes of one block that share a time unit, resource, namespace and field manager.
#[derive(Debug, Clone, PartialEq)]
struct Cell {
    /// The unit's start, seconds since the epoch.
    time: u64,
    resource: &'static ResourceInfo,
    namespace: Option<Arc<str>>,
    manager: Option<Arc<str>>,
    /// Created, updated, status updated, deleted.
    counts: [u32; 4],
    first: u64,
    last: u64,
    /// Per [`MARKER_KINDS`].
    marker_counts: [u32; 4],
    /// The newest [`MAX_MARKERS_PER_CELL`], newest first.
    markers: Vec<PlacedMarker>,
}

/// The summary of one full block.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Its first revision.
    pub from: u64,
    /// Its last.
    pub to: u64,
    /// Seconds per time unit of its cells (1 or 60).
    pub unit: u64,
    /// Changes left out because their versions were already pruned when it was summarised.
    pub pruned: usize,
    /// Ordered by time, then as first seen.
    cells: Vec<Cell>,
}

impl Block {
    /// How many cells it has (for tests and the memory figure).
    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    /// Whether it holds a change that `scope` covers (made by `manager`, when given).
    pub fn has(&self, scope: &Filter<'_>, manager: Option<&str>) -> bool {
        self.cells
            .iter()
            .any(|cell| Block::covered(cell, scope, manager))
    }

    fn covered(cell: &Cell, scope: &Filter<'_>, manager: Option<&str>) -> bool {
        scope.covers(cell.resource, cell.namespace.as_deref())
            && manager.is_none_or(|m| cell.manager.as_deref() == Some(m))
    }

    /// Adds its changes that `scope` covers (made by `manager`, when given) to `counts`.
    pub fn add_to(&self, counts: &mut Buckets, scope: &Filter<'_>, manager: Option<&str>) {
        // Newest first, as a scan of the log hands changes to a bucket (its markers are the
        // newest).
        for cell in self.cells.iter().rev() {
            if !Block::covered(cell, scope, manager) {
                continue;
            }
            let marker_counts = MARKER_KINDS
                .iter()
                .zip(cell.marker_counts)
                .filter(|(_, n)| *n > 0)
                .map(|(k, n)| (*k, u64::from(n)));
            counts.add_counts(
                cell.time,
                cell.counts.map(u64::from),
                (cell.first, cell.last),
                marker_counts,
                &cell.markers,
            );
        }
    }
}

/// Where [`Cell::counts`] counts an operation.
fn slot(operation: super::Operation) -> usize {
    match operation {
        super::Operation::Created => 0,
        super::Operation::Updated => 1,
        super::Operation::StatusUpdated => 2,
        super::Operation::Deleted => 3,
    }
}

/// The first and last revision of block `number` of blocks of `block` revisions.
fn bounds(number: u64, block: u64) -> (u64, u64) {
    (number * block + 1, (number + 1) * block)
}

fn seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Shares the text of namespaces and managers between cells.
#[derive(Default)]
struct Strings(HashSet<Arc<str>>);

impl Strings {
    fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(s) = self.0.get(s) {
            return s.clone();
        }
        let s: Arc<str> = Arc::from(s);
        self.0.insert(s.clone());
        s
    }
}

/// A cell's time, resource (by address), namespace and manager.
type CellKey = (u64, usize, Option<Arc<str>>, Option<Arc<str>>);

/// Summarises the block of revisions `from..=to` from its log entries (`pruned`: changes the
/// read left out). Pure: the entries in, the summary out.
pub fn summarize(
    kinds: &Snapshot,
    (from, to): (u64, u64),
    entries: &[LogEntry],
    pruned: usize,
    strings: &mut impl FnMut(&str) -> Arc<str>,
) -> Block {
    let span = match (entries.first(), entries.last()) {
        (Some(a), Some(b)) => seconds(b.time).saturating_sub(seconds(a.time)),
        _ => 0,
    };
    let unit = if span <= FINE_SPAN { 1 } else { 60 };
    let mut cells: Vec<Cell> = Vec::new();
    // Where each (time, resource, namespace, manager) went in `cells`.
    let mut at: BTreeMap<CellKey, usize> = BTreeMap::new();
    for entry in entries {
        let time = seconds(entry.time);
        let time = time - time % unit;
        for event in &entry.events {
            let Some((info, namespace, name)) = objects::parse_key(kinds, &event.kv.key) else {
                continue;
            };
            let (before, after) = objects::versions(event);
            let change = Change {
                revision: entry.revision.0,
                time: String::new(),
                operation: objects::classify(before.as_ref(), after.as_ref()),
                kind: info.kind.to_string(),
                namespace,
                name,
                manager: objects::manager(before.as_ref(), after.as_ref()),
                user: None,
                fields: Vec::new(),
                before,
                after,
            };
            let namespace = change.namespace.as_deref().map(&mut *strings);
            let manager = change.manager.as_deref().map(&mut *strings);
            let key = (
                time,
                info as *const ResourceInfo as usize,
                namespace.clone(),
                manager.clone(),
            );
            let i = *at.entry(key).or_insert_with(|| {
                cells.push(Cell {
                    time,
                    resource: info,
                    namespace,
                    manager,
                    counts: [0; 4],
                    first: change.revision,
                    last: change.revision,
                    marker_counts: [0; 4],
                    markers: Vec::new(),
                });
                cells.len() - 1
            });
            let cell = &mut cells[i];
            cell.counts[slot(change.operation)] += 1;
            cell.first = cell.first.min(change.revision);
            cell.last = cell.last.max(change.revision);
            for marker in markers(&change) {
                if let Some(k) = MARKER_KINDS.iter().position(|k| *k == marker.kind) {
                    cell.marker_counts[k] += 1;
                }
                cell.markers.push(PlacedMarker {
                    marker,
                    revision: change.revision,
                    object_kind: change.kind.clone(),
                    namespace: change.namespace.clone(),
                    name: change.name.clone(),
                });
            }
        }
    }
    for cell in &mut cells {
        // The newest, newest first.
        cell.markers.reverse();
        cell.markers.truncate(MAX_MARKERS_PER_CELL);
        cell.markers.shrink_to_fit();
    }
    cells.shrink_to_fit();
    Block {
        from,
        to,
        unit,
        pruned,
        cells,
    }
}

/// What [`Index::footprint`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Blocks summarised.
    pub blocks: usize,
    /// Their cells.
    pub cells: usize,
    /// The markers the cells keep.
    pub markers: usize,
    /// About how many bytes of memory all that takes.
    pub bytes: usize,
}

/// One part of a timeline request, newest first.
#[derive(Debug, Clone)]
pub enum Segment {
    /// A summarised block: add its cells.
    Block(Arc<Block>),
    /// Revisions `.0 ..= .1`: read them from the log.
    Scan(u64, u64),
}

/// The summaries of the log's full blocks, and when the timeline was last asked for.
pub struct Index {
    block: u64,
    blocks: RwLock<BTreeMap<u64, Arc<Block>>>,
    strings: Mutex<Strings>,
    asked: Mutex<Option<Instant>>,
    wake: tokio::sync::Notify,
}

impl Default for Index {
    fn default() -> Index {
        Index::new(BLOCK)
    }
}

impl Index {
    /// An empty index of blocks of `block` revisions.
    pub fn new(block: u64) -> Index {
        Index {
            block: block.max(1),
            blocks: RwLock::default(),
            strings: Mutex::default(),
            asked: Mutex::new(None),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// Revisions per block.
    pub fn block_size(&self) -> u64 {
        self.block
    }

    /// The summarised blocks, oldest first.
    pub fn blocks(&self) -> Vec<Arc<Block>> {
        self.blocks.read().unwrap().values().cloned().collect()
    }

    /// The revisions summarised: the first of the oldest block and the last of the newest.
    pub fn covered(&self) -> Option<[u64; 2]> {
        let blocks = self.blocks.read().unwrap();
        Some([
            blocks.values().next()?.from,
            blocks.values().next_back()?.to,
        ])
    }

    /// The summary's size: blocks, cells, markers kept, and about how many bytes of memory
    /// they take.
    pub fn footprint(&self) -> Footprint {
        let blocks = self.blocks.read().unwrap();
        let mut f = Footprint {
            blocks: blocks.len(),
            ..Footprint::default()
        };
        for block in blocks.values() {
            f.cells += block.cells.len();
            f.bytes += std::mem::size_of::<Block>() + block.cells.capacity() * size_of::<Cell>();
            for cell in &block.cells {
                f.markers += cell.markers.len();
                f.bytes += cell.markers.capacity() * size_of::<PlacedMarker>();
                for m in &cell.markers {
                    f.bytes += m.marker.detail.capacity()
                        + m.object_kind.capacity()
                        + m.name.capacity()
                        + m.namespace.as_ref().map_or(0, String::capacity);
                }
            }
        }
        f.bytes += self
            .strings
            .lock()
            .unwrap()
            .0
            .iter()
            .map(|s| s.len() + 16 + size_of::<Arc<str>>())
            .sum::<usize>();
        f
    }

    /// The summary of the block holding revision `revision`, if it is summarised.
    pub fn block_of(&self, revision: u64) -> Option<Arc<Block>> {
        let number = revision.checked_sub(1)? / self.block;
        self.blocks.read().unwrap().get(&number).cloned()
    }

    /// The first revision of the block holding `revision`.
    pub fn block_start(&self, revision: u64) -> u64 {
        bounds(revision.saturating_sub(1) / self.block, self.block).0
    }

    /// Says a timeline was asked for: summarising goes on (or starts) for [`IDLE`].
    pub fn touch(&self) {
        *self.asked.lock().unwrap() = Some(Instant::now());
        self.wake.notify_one();
    }

    fn wanted(&self) -> bool {
        self.asked
            .lock()
            .unwrap()
            .is_some_and(|t| t.elapsed() < IDLE)
    }

    /// How to count `from..=to` for buckets `width` seconds wide: newest first, the blocks
    /// wholly inside it whose unit divides `width`, and the revisions between them to read.
    pub fn plan(&self, from: u64, to: u64, width: u64) -> Vec<Segment> {
        let blocks = self.blocks.read().unwrap();
        let mut out: Vec<Segment> = Vec::new();
        let from = from.max(1);
        let mut hi = to;
        while hi >= from {
            let number = (hi - 1) / self.block;
            let (lo_b, hi_b) = bounds(number, self.block);
            let whole = hi == hi_b && lo_b >= from;
            if let Some(block) = blocks
                .get(&number)
                .filter(|b| whole && width.is_multiple_of(b.unit))
            {
                out.push(Segment::Block(block.clone()));
                hi = lo_b - 1;
                continue;
            }
            let lo = lo_b.max(from);
            match out.last_mut() {
                Some(Segment::Scan(l, _)) if *l == hi + 1 => *l = lo,
                _ => out.push(Segment::Scan(lo, hi)),
            }
            hi = lo - 1;
        }
        out
    }

    /// Drops the blocks that begin before `compacted` (their oldest revisions are gone).
    fn forget_before(&self, compacted: u64) {
        let mut blocks = self.blocks.write().unwrap();
        let keep_from = compacted.saturating_sub(1).div_ceil(self.block);
        *blocks = blocks.split_off(&keep_from);
    }

    /// Which block to summarise next, if any: newer ones first (each new full block as the log
    /// fills it), then older ones back to the oldest retained.
    fn next(&self, newest: u64, compacted: u64) -> Option<u64> {
        let full = newest / self.block; // blocks 0..full are full
        let oldest = compacted.max(1).saturating_sub(1).div_ceil(self.block);
        if full == 0 || oldest >= full {
            return None;
        }
        let blocks = self.blocks.read().unwrap();
        let (Some(&low), Some(&high)) = (blocks.keys().next(), blocks.keys().next_back()) else {
            return Some(full - 1);
        };
        if high + 1 < full {
            Some(high + 1)
        } else if low > oldest {
            Some(low - 1)
        } else {
            None
        }
    }

    /// Reads and summarises block `number`.
    pub async fn build(&self, replay: &Replay, number: u64) -> super::Result<()> {
        let (lo, hi) = bounds(number, self.block);
        let (entries, pruned) = replay
            .entries(Revision(lo), Revision(hi), self.block as usize)
            .await?;
        let kinds = replay.kinds();
        // The decoding is the work: off the async workers.
        let mut block = tokio::task::spawn_blocking(move || {
            summarize(&kinds, (lo, hi), &entries, pruned, &mut |s| Arc::from(s))
        })
        .await
        .map_err(|e| super::Error::Store(skiff_store::Error::Io(std::io::Error::other(e))))?;
        {
            let mut strings = self.strings.lock().unwrap();
            for cell in &mut block.cells {
                cell.namespace = cell.namespace.take().map(|s| strings.get(&s));
                cell.manager = cell.manager.take().map(|s| strings.get(&s));
            }
        }
        self.blocks.write().unwrap().insert(number, Arc::new(block));
        Ok(())
    }

    /// Summarises blocks while timelines are asked for, until `shutdown`. Each block's work is
    /// followed by as long a rest, so that it takes at most half a core.
    pub async fn run(self: Arc<Self>, replay: Replay, shutdown: CancellationToken) {
        // Blocks summarised since the summary last covered the log.
        let mut built = 0;
        loop {
            let status = replay.store().status();
            self.forget_before(status.compacted.0);
            let next = self
                .wanted()
                .then(|| self.next(status.revision.0, status.compacted.0))
                .flatten();
            let rest = match next {
                Some(number) => {
                    built += 1;
                    let started = Instant::now();
                    if let Err(e) = self.build(&replay, number).await {
                        // Compacted while being read, or the log failing: try again later.
                        tracing::debug!(block = number, error = %e, "cannot summarise a block of the log");
                        Duration::from_secs(1)
                    } else {
                        started.elapsed()
                    }
                }
                None if self.wanted() => {
                    // Said after a catch-up (the first, or after a pause), not for each new block.
                    if built > 1 {
                        let f = self.footprint();
                        tracing::info!(
                            blocks = f.blocks,
                            cells = f.cells,
                            markers = f.markers,
                            mib = f.bytes >> 20,
                            "the timeline's summary covers the retained log"
                        );
                    }
                    built = 0;
                    Duration::from_secs(1)
                }
                None => Duration::MAX,
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(rest.min(Duration::from_secs(3600))) => {}
                _ = self.wake.notified(), if next.is_none() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skiff_store::{Event, EventKind, KeyValue};

    fn kinds() -> Arc<Snapshot> {
        skiff_kinds::Kinds::builtin().snapshot()
    }

    fn kv(key: &str, revision: u64, object: Option<serde_json::Value>) -> KeyValue {
        KeyValue {
            key: key.as_bytes().to_vec(),
            value: object.map_or(Vec::new(), |o| serde_json::to_vec(&o).unwrap()),
            create_revision: Revision(1),
            mod_revision: Revision(revision),
            version: 1,
            lease: None,
        }
    }

    fn cm(ns: &str, name: &str, data: &str, manager: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns,
                "managedFields": [{"manager": manager, "operation": "Update", "time": data}]},
            "data": {"k": data}})
    }

    /// One entry writing `after` over `before` (`None`: absent) at `second`.
    fn entry(
        revision: u64,
        second: u64,
        key: &str,
        before: Option<serde_json::Value>,
        after: Option<serde_json::Value>,
    ) -> LogEntry {
        let deleted = after.is_none();
        LogEntry {
            revision: Revision(revision),
            time: UNIX_EPOCH + Duration::from_secs(second),
            tag: None,
            events: vec![Event {
                kind: if deleted {
                    EventKind::Delete
                } else {
                    EventKind::Put
                },
                kv: kv(key, revision, after),
                prev_kv: before.map(|b| kv(key, revision - 1, Some(b))),
            }],
        }
    }

    const A: &str = "/registry/core/configmaps/default/a";
    const B: &str = "/registry/core/configmaps/kube-system/b";

    fn history(start: u64, step: u64) -> Vec<LogEntry> {
        vec![
            entry(1, start, A, None, Some(cm("default", "a", "1", "kubectl"))),
            entry(
                2,
                start + step,
                B,
                None,
                Some(cm("kube-system", "b", "1", "helm")),
            ),
            entry(
                3,
                start + 2 * step,
                A,
                Some(cm("default", "a", "1", "kubectl")),
                Some(cm("default", "a", "2", "kubectl")),
            ),
            entry(
                4,
                start + 3 * step,
                A,
                Some(cm("default", "a", "2", "kubectl")),
                None,
            ),
        ]
    }

    fn intern(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_busy_block_is_counted_per_second_a_quiet_one_per_minute() {
        let busy = summarize(&kinds(), (1, 4), &history(1_000_000, 1), 0, &mut intern);
        assert_eq!(busy.unit, 1);
        // Each change alone in its second: a cell each.
        assert_eq!(busy.cells(), 4);
        let quiet = summarize(&kinds(), (1, 4), &history(1_000_000, 300), 0, &mut intern);
        assert_eq!(quiet.unit, 60);
        assert!(quiet.cells.iter().all(|c| c.time % 60 == 0));
    }

    #[test]
    fn cells_count_by_operation_resource_namespace_and_manager() {
        // All four within one minute; a's create and update share a cell.
        let start = 1_000_020;
        let mut entries = history(start, 1);
        // Quiet enough for minutes: the block spans more than FINE_SPAN.
        entries.push(entry(
            5,
            start + FINE_SPAN + 60,
            "/registry/core/configmaps/default/c",
            None,
            Some(cm("default", "c", "1", "kubectl")),
        ));
        let block = summarize(&kinds(), (1, 5), &entries, 2, &mut intern);
        assert_eq!((block.unit, block.pruned), (60, 2));
        let minute = start - start % 60;
        let in_default = |manager: Option<&str>| {
            block
                .cells
                .iter()
                .find(|c| {
                    c.time == minute
                        && c.namespace.as_deref() == Some("default")
                        && c.manager.as_deref() == manager
                })
                .unwrap()
        };
        let a = in_default(Some("kubectl"));
        assert_eq!(a.counts, [1, 1, 0, 0]);
        assert_eq!((a.first, a.last), (1, 3));
        // A delete records no manager: a cell of its own, with its marker.
        let deleted = in_default(None);
        assert_eq!(deleted.counts, [0, 0, 0, 1]);
        assert_eq!(deleted.marker_counts, [1, 0, 0, 0]);
        assert_eq!(deleted.markers.len(), 1);
        assert_eq!(deleted.markers[0].revision, 4);
        assert_eq!(deleted.markers[0].name, "a");
        let b = block
            .cells
            .iter()
            .find(|c| c.namespace.as_deref() == Some("kube-system"))
            .unwrap();
        assert_eq!(
            (b.counts, b.manager.as_deref()),
            ([1, 0, 0, 0], Some("helm"))
        );
        assert_eq!(block.cells(), 4);

        // Adding it to buckets: by scope and manager.
        let add = |scope: Filter<'_>, manager: Option<&str>| {
            let mut b = Buckets::new(minute, 60, 20);
            block.add_to(&mut b, &scope, manager);
            b.into_vec()
                .iter()
                .map(|b| b.created + b.updated + b.status_updated + b.deleted)
                .sum::<u64>()
        };
        assert_eq!(add(Filter::default(), None), 5);
        assert_eq!(add(Filter::default(), Some("helm")), 1);
        let in_default = Filter {
            resource: Some(&skiff_kinds::builtin::config_map::INFO),
            namespace: Some("default"),
            name: None,
        };
        assert_eq!(add(in_default, None), 4);
        let secrets = Filter {
            resource: Some(&skiff_kinds::builtin::secret::INFO),
            ..Filter::default()
        };
        assert_eq!(add(secrets, None), 0);
    }

    fn block(from: u64, to: u64, unit: u64) -> Arc<Block> {
        Arc::new(Block {
            from,
            to,
            unit,
            pruned: 0,
            cells: Vec::new(),
        })
    }

    fn shape(plan: &[Segment]) -> Vec<(char, u64, u64)> {
        plan.iter()
            .map(|s| match s {
                Segment::Block(b) => ('b', b.from, b.to),
                Segment::Scan(lo, hi) => ('s', *lo, *hi),
            })
            .collect()
    }

    #[test]
    fn a_window_is_planned_as_whole_blocks_and_the_revisions_around_them() {
        let index = Index::new(10);
        {
            let mut blocks = index.blocks.write().unwrap();
            for n in [1, 2, 3, 5] {
                blocks.insert(
                    n,
                    block(n * 10 + 1, n * 10 + 10, if n == 3 { 60 } else { 1 }),
                );
            }
        }
        // r5..r57: block 0 is cut by the window, 1 and 2 are whole, 3 is per minute (no good for
        // 10 s buckets), 4 is not summarised, 5 is cut by the window: one scan joins 3, 4 and 5.
        assert_eq!(
            shape(&index.plan(5, 57, 10)),
            [('s', 31, 57), ('b', 21, 30), ('b', 11, 20), ('s', 5, 10)]
        );
        // Minute buckets take block 3 too.
        assert_eq!(
            shape(&index.plan(11, 60, 60)),
            [
                ('b', 51, 60),
                ('s', 41, 50),
                ('b', 31, 40),
                ('b', 21, 30),
                ('b', 11, 20)
            ]
        );
        // Inside one block: a scan.
        assert_eq!(shape(&index.plan(12, 18, 60)), [('s', 12, 18)]);
        // An empty window: nothing.
        assert!(index.plan(20, 19, 60).is_empty());
    }

    #[test]
    fn blocks_are_summarised_newest_first_then_as_the_log_fills_and_compaction_drops_them() {
        let index = Index::new(10);
        // Nothing full yet.
        assert_eq!(index.next(9, 0), None);
        // r1..r35: blocks 0..=2 full; the newest first.
        assert_eq!(index.next(35, 0), Some(2));
        index.blocks.write().unwrap().insert(2, block(21, 30, 1));
        assert_eq!(index.next(35, 0), Some(1));
        // The log filled block 3: it comes before the older ones.
        assert_eq!(index.next(41, 0), Some(3));
        index.blocks.write().unwrap().insert(3, block(31, 40, 1));
        assert_eq!(index.next(41, 0), Some(1));
        // Compacted at r12: block 1 begins before it, so it is not summarised, and the oldest
        // kept is block 2.
        assert_eq!(index.next(41, 12), None);
        index.blocks.write().unwrap().insert(1, block(11, 20, 1));
        index.forget_before(12);
        assert_eq!(
            index.blocks().iter().map(|b| b.from).collect::<Vec<_>>(),
            [21, 31]
        );
        // Compacted exactly at a block's first revision keeps it.
        index.forget_before(21);
        assert_eq!(index.blocks().len(), 2);
    }
}

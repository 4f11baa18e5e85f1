//! Model-based property test: random puts, deletes, transactions, compactions and reopens applied
//! to each backend (`SledStore`, and `EtcdStore` on a throwaway etcd) and to a plain in-memory model (the state at every revision in a `Vec` of
//! `BTreeMap`s), checking reads at every retained revision, the log, key histories and watch
//! streams from random start revisions.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use skiff_store::*;

const KEYS: [&[u8]; 6] = [b"a", b"a\0", b"ab", b"b", b"c/1", b"c/2"];
const PREFIXES: [&[u8]; 4] = [b"", b"a", b"b", b"c/"];
/// Keys under this prefix keep 2 versions (per-prefix retention).
const CHURNY: &[u8] = b"c/";

#[derive(Debug, Clone)]
enum TxnOp {
    Put(usize, u8),
    Delete(usize),
    Get(usize),
}

#[derive(Debug, Clone)]
enum Step {
    Put(usize, u8),
    Delete(usize),
    DeletePrefix(usize),
    Txn {
        compare: (usize, u8, u8, u8),
        success: Vec<TxnOp>,
        failure: Vec<TxnOp>,
    },
    Compact(f64),
    Reopen,
    ReadAt(f64, usize),
    Watch(f64, usize, bool),
}

fn txn_op() -> impl Strategy<Value = TxnOp> {
    prop_oneof![
        (0..KEYS.len(), any::<u8>()).prop_map(|(k, v)| TxnOp::Put(k, v)),
        (0..KEYS.len()).prop_map(TxnOp::Delete),
        (0..KEYS.len()).prop_map(TxnOp::Get),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..KEYS.len(), any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
        2 => (0..KEYS.len()).prop_map(Step::Delete),
        1 => (0..PREFIXES.len()).prop_map(Step::DeletePrefix),
        3 => ((0..KEYS.len(), 0u8..5, 0u8..4, 0u8..4), prop::collection::vec(txn_op(), 0..4), prop::collection::vec(txn_op(), 0..3))
            .prop_map(|(compare, success, failure)| Step::Txn { compare, success, failure }),
        1 => (0.0..1.0f64).prop_map(Step::Compact),
        1 => Just(Step::Reopen),
        2 => (0.0..1.0f64, 0..PREFIXES.len()).prop_map(|(f, p)| Step::ReadAt(f, p)),
        2 => (0.0..1.0f64, 0..PREFIXES.len(), any::<bool>()).prop_map(|(f, p, prev)| Step::Watch(f, p, prev)),
    ]
}

/// The reference: the whole state at every revision.
struct Model {
    /// `states[r]` is the state at revision r.
    states: Vec<BTreeMap<Vec<u8>, KeyValue>>,
    /// `events[r]` are revision r's events, with previous values.
    events: Vec<Vec<Event>>,
    compacted: u64,
}

impl Model {
    fn new() -> Model {
        Model {
            states: vec![BTreeMap::new()],
            events: vec![vec![]],
            compacted: 0,
        }
    }

    fn current(&self) -> u64 {
        self.states.len() as u64 - 1
    }

    /// Applies a transaction; returns (succeeded, revision, responses as the model sees them).
    fn txn(
        &mut self,
        compare: &[Compare],
        ops: (&[TxnOp], &[TxnOp]),
    ) -> (bool, u64, Vec<Option<Vec<u8>>>) {
        let state = self.states.last().unwrap().clone();
        let ok = compare.iter().all(|c| holds(&state, c));
        let ops = if ok { ops.0 } else { ops.1 };
        let rev = self.current() + 1;
        let mut next = state.clone();
        let mut events = Vec::new();
        let mut reads = Vec::new();
        for op in ops {
            match op {
                TxnOp::Put(k, v) => {
                    let key = KEYS[*k].to_vec();
                    let prev = next.get(&key).cloned();
                    let kv = KeyValue {
                        key: key.clone(),
                        value: vec![*v],
                        create_revision: prev.as_ref().map_or(Revision(rev), |p| p.create_revision),
                        mod_revision: Revision(rev),
                        version: prev.as_ref().map_or(1, |p| p.version + 1),
                        lease: None,
                    };
                    next.insert(key, kv.clone());
                    events.push(Event {
                        kind: EventKind::Put,
                        kv,
                        prev_kv: prev,
                    });
                }
                TxnOp::Delete(k) => {
                    let key = KEYS[*k].to_vec();
                    if let Some(prev) = next.remove(&key) {
                        events.push(Event {
                            kind: EventKind::Delete,
                            kv: tomb(&key, rev),
                            prev_kv: Some(prev),
                        });
                    }
                }
                TxnOp::Get(k) => reads.push(next.get(KEYS[*k]).map(|kv| kv.value.clone())),
            }
        }
        if events.is_empty() {
            return (ok, rev - 1, reads);
        }
        self.states.push(next);
        self.events.push(events);
        (ok, rev, reads)
    }

    fn delete_prefix(&mut self, prefix: &[u8]) -> u64 {
        let state = self.states.last().unwrap().clone();
        let rev = self.current() + 1;
        let mut next = state.clone();
        let mut events = Vec::new();
        for (key, kv) in state.range(prefix.to_vec()..) {
            if !key.starts_with(prefix) {
                break;
            }
            next.remove(key);
            events.push(Event {
                kind: EventKind::Delete,
                kv: tomb(key, rev),
                prev_kv: Some(kv.clone()),
            });
        }
        if events.is_empty() {
            return rev - 1;
        }
        self.states.push(next);
        self.events.push(events);
        rev
    }

    fn watch_responses(&self, start: u64, range: &KeyRange, prev: bool) -> Vec<WatchResponse> {
        (start..=self.current())
            .filter_map(|r| {
                let events: Vec<Event> = self.events[r as usize]
                    .iter()
                    .filter(|e| range.contains(&e.kv.key))
                    .map(|e| Event {
                        prev_kv: if prev { e.prev_kv.clone() } else { None },
                        ..e.clone()
                    })
                    .collect();
                (!events.is_empty()).then_some(WatchResponse {
                    revision: Revision(r),
                    events,
                })
            })
            .collect()
    }
}

fn tomb(key: &[u8], rev: u64) -> KeyValue {
    KeyValue {
        key: key.to_vec(),
        value: vec![],
        create_revision: Revision(0),
        mod_revision: Revision(rev),
        version: 0,
        lease: None,
    }
}

/// Revisions as the model counts them: the store's minus `base`, the revision a fresh store
/// starts from (0 for sled; on a shared etcd, its revision when the case began).
#[derive(Clone, Copy)]
struct Off(u64);

impl Off {
    fn r(self, model: u64) -> Revision {
        Revision(model + self.0)
    }
    fn m(self, store: Revision) -> u64 {
        store.0 - self.0
    }
    fn kv(self, kv: &KeyValue) -> KeyValue {
        let back = |r: Revision| if r.0 == 0 { r } else { Revision(r.0 - self.0) };
        KeyValue {
            create_revision: back(kv.create_revision),
            mod_revision: back(kv.mod_revision),
            ..kv.clone()
        }
    }
    fn event(self, e: &Event) -> Event {
        Event {
            kind: e.kind,
            kv: self.kv(&e.kv),
            prev_kv: e.prev_kv.as_ref().map(|kv| self.kv(kv)),
        }
    }
    fn watch(self, w: &WatchResponse) -> WatchResponse {
        WatchResponse {
            revision: Revision(self.m(w.revision)),
            events: w.events.iter().map(|e| self.event(e)).collect(),
        }
    }
}

fn holds(state: &BTreeMap<Vec<u8>, KeyValue>, c: &Compare) -> bool {
    let kv = state.get(&c.key);
    let ord = match &c.target {
        CompareTarget::Value(v) => match kv {
            Some(kv) => kv.value.cmp(v),
            None => return false,
        },
        CompareTarget::Version(v) => kv.map_or(0, |kv| kv.version).cmp(v),
        CompareTarget::CreateRevision(r) => kv.map_or(Revision(0), |kv| kv.create_revision).cmp(r),
        CompareTarget::ModRevision(r) => kv.map_or(Revision(0), |kv| kv.mod_revision).cmp(r),
    };
    match c.op {
        CompareOp::Equal => ord.is_eq(),
        CompareOp::NotEqual => ord.is_ne(),
        CompareOp::Greater => ord.is_gt(),
        CompareOp::Less => ord.is_lt(),
    }
}

fn make_compare((k, target, op, n): (usize, u8, u8, u8), model: &Model) -> Compare {
    let key = KEYS[k].to_vec();
    let op = [
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::Greater,
        CompareOp::Less,
    ][op as usize];
    // Aim at values that occur: the current state's numbers, nudged by n.
    let cur = model.states.last().unwrap().get(&key).cloned();
    let target = match target {
        0 => CompareTarget::Value(cur.map_or(vec![n], |kv| kv.value)),
        1 => CompareTarget::Version(cur.map_or(0, |kv| kv.version) + (n as u64 % 2)),
        2 => CompareTarget::CreateRevision(cur.map_or(Revision(0), |kv| kv.create_revision)),
        3 => CompareTarget::ModRevision(Revision(
            cur.map_or(0, |kv| kv.mod_revision.0)
                .saturating_sub(n as u64 % 2),
        )),
        _ => {
            return if n % 2 == 0 {
                Compare::exists(key)
            } else {
                Compare::not_exists(key)
            };
        }
    };
    Compare { key, op, target }
}

fn to_ops(ops: &[TxnOp]) -> Vec<Op> {
    ops.iter()
        .map(|op| match op {
            TxnOp::Put(k, v) => Op::put(KEYS[*k], vec![*v]),
            TxnOp::Delete(k) => Op::Delete {
                range: KeyRange::key(KEYS[*k]),
                prev_kv: false,
            },
            TxnOp::Get(k) => Op::get(KEYS[*k]),
        })
        .collect()
}

/// Drops ops that write a key already written in the branch (the store refuses those).
fn dedup(ops: Vec<TxnOp>) -> Vec<TxnOp> {
    let mut written = Vec::new();
    ops.into_iter()
        .filter(|op| match op {
            TxnOp::Put(k, _) | TxnOp::Delete(k) => {
                if written.contains(k) {
                    false
                } else {
                    written.push(*k);
                    true
                }
            }
            TxnOp::Get(_) => true,
        })
        .collect()
}

fn config(path: &std::path::Path) -> Config {
    let mut config = Config::new(path);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.prefix_retention = vec![PrefixRetention {
        prefix: CHURNY.to_vec(),
        max_versions: 2,
    }];
    config.watch_ring = 4;
    config
}

/// A read that touches the churny prefix may be refused, naming it; nothing else may be.
fn allowed_refusal(err: &Error, range: &KeyRange) -> bool {
    match err {
        Error::Compacted {
            prefix: Some(p), ..
        } => p == CHURNY && range_touches_churny(range),
        _ => false,
    }
}

fn range_touches_churny(range: &KeyRange) -> bool {
    KEYS.iter()
        .any(|k| k.starts_with(CHURNY) && range.contains(k))
}

async fn check_read(
    store: &dyn Store,
    off: Off,
    model: &Model,
    rev: u64,
    range: &KeyRange,
) -> Result<(), TestCaseError> {
    let got = store
        .range(RangeRequest::new(range.clone()).at(off.r(rev)))
        .await;
    if rev < model.compacted {
        prop_assert!(
            matches!(got, Err(Error::Compacted { .. })),
            "read at {} below compacted {}: {:?}",
            rev,
            model.compacted,
            got
        );
        return Ok(());
    }
    match got {
        Ok(resp) => {
            let expected: Vec<KeyValue> = model.states[rev as usize]
                .values()
                .filter(|kv| range.contains(&kv.key))
                .cloned()
                .collect();
            let kvs: Vec<KeyValue> = resp.kvs.iter().map(|kv| off.kv(kv)).collect();
            prop_assert_eq!(kvs, expected, "range {:?} at {}", range, rev);
            prop_assert_eq!(resp.revision, off.r(rev));
        }
        Err(e) => prop_assert!(
            rev < model.current() && allowed_refusal(&e, range),
            "read {:?} at {} failed: {}",
            range,
            rev,
            e
        ),
    }
    Ok(())
}

async fn check_watch(
    store: &dyn Store,
    off: Off,
    model: &Model,
    start: u64,
    range: &KeyRange,
    prev: bool,
) -> Result<(), TestCaseError> {
    let mut req = WatchRequest::new(range.clone(), Some(off.r(start)));
    req.prev_kv = prev;
    req.progress_notify = Some(Duration::from_millis(5));
    let mut stream = match store.watch(req).await {
        Ok(s) => s,
        Err(e) => {
            prop_assert!(
                start < model.compacted.max(1) && matches!(e, Error::Compacted { .. })
                    || allowed_refusal(&e, range),
                "watch from {} refused: {}",
                start,
                e
            );
            return Ok(());
        }
    };
    prop_assert!(
        start >= model.compacted,
        "watch from {} below compacted {} accepted",
        start,
        model.compacted
    );
    let expected = model.watch_responses(start, range, prev);
    let mut got = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(20), stream.next()).await;
        let item = item.map_err(|_| TestCaseError::fail("watch stalled"))?;
        match item {
            Some(Ok(resp)) if resp.is_progress() => {
                if off.m(resp.revision) >= model.current() {
                    break;
                }
            }
            Some(Ok(resp)) => {
                let resp = off.watch(&resp);
                let at = resp.revision.0;
                got.push(resp);
                if at >= model.current() {
                    break;
                }
            }
            Some(Err(e)) => {
                // A pruned previous value or version of a churny key, reported as such.
                prop_assert!(allowed_refusal(&e, range), "watch error {}", e);
                let n = got.len();
                prop_assert_eq!(&got[..], &expected[..n]);
                return Ok(());
            }
            None => return Err(TestCaseError::fail("watch ended")),
        }
    }
    prop_assert_eq!(
        got,
        expected,
        "watch {:?} from {} prev {}",
        range,
        start,
        prev
    );
    Ok(())
}

async fn check_all(store: &dyn Store, off: Off, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(store.status().revision, off.r(model.current()));
    if model.compacted <= 1 {
        // Nothing the model wrote is compacted. A store that shares its engine with earlier
        // writers (an etcd, at an offset) may say so with any revision up to the model's
        // first: etcd's never-compacted is its own revision 1, below the offset.
        prop_assert!(store.status().compacted <= off.r(1));
    } else {
        prop_assert_eq!(store.status().compacted, off.r(model.compacted));
    }
    for rev in model.compacted.saturating_sub(1)..=model.current() {
        for prefix in PREFIXES {
            check_read(store, off, model, rev, &KeyRange::prefix(prefix)).await?;
        }
    }
    // The log from the oldest retained revision, with previous values.
    let from = model.compacted.max(1);
    match store.log(off.r(from), None, 10_000).await {
        Ok(log) => {
            let revs: Vec<u64> = log.iter().map(|e| off.m(e.revision)).collect();
            prop_assert_eq!(revs, (from..=model.current()).collect::<Vec<_>>());
            for entry in log {
                let events: Vec<Event> = entry.events.iter().map(|e| off.event(e)).collect();
                prop_assert_eq!(&events, &model.events[off.m(entry.revision) as usize]);
            }
        }
        Err(e) => prop_assert!(
            allowed_refusal(&e, &KeyRange::prefix("")),
            "log failed: {}",
            e
        ),
    }
    // Histories: every version after the compacted revision is there, in order.
    for key in KEYS {
        let history: Vec<Event> = store
            .history(key)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .iter()
            .map(|(_, e)| off.event(e))
            .collect();
        let got: Vec<&Event> = history
            .iter()
            .filter(|e| e.kv.mod_revision.0 > model.compacted)
            .collect();
        let expected: Vec<&Event> = model.events
            [(model.compacted as usize + 1).min(model.events.len())..]
            .iter()
            .flatten()
            .filter(|e| e.kv.key == key)
            .collect();
        if key.starts_with(CHURNY) {
            // Only the newest versions are kept; those must be right.
            prop_assert!(got.len() <= expected.len());
            prop_assert_eq!(
                &got[..].iter().map(|e| &e.kv).collect::<Vec<_>>(),
                &expected[expected.len() - got.len()..]
                    .iter()
                    .map(|e| &e.kv)
                    .collect::<Vec<_>>()
            );
        } else {
            let got: Vec<(EventKind, &KeyValue)> = got.iter().map(|e| (e.kind, &e.kv)).collect();
            let expected: Vec<(EventKind, &KeyValue)> =
                expected.iter().map(|e| (e.kind, &e.kv)).collect();
            prop_assert_eq!(got, expected);
        }
    }
    Ok(())
}

/// A backend under test: how to open (and reopen) a fresh store.
enum Backend<'a> {
    Sled(std::path::PathBuf),
    Etcd(&'a crate::etcd::EtcdServer, Vec<u8>),
}

impl Backend<'_> {
    async fn open(&self) -> Result<Box<dyn Store>, Error> {
        Ok(match self {
            Backend::Sled(path) => Box::new(SledStore::open(config(path))?),
            Backend::Etcd(server, prefix) => {
                Box::new(EtcdStore::connect(crate::etcd::config(server, prefix.clone())).await?)
            }
        })
    }
}

async fn run(backend: Backend<'_>, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let fail = |e: Error| TestCaseError::fail(e.to_string());
    let mut store = backend.open().await.map_err(fail)?;
    // A fresh prefix on a shared etcd starts at etcd's revision; compacting to it makes the
    // store look new (compacted = base, as a new sled store's is 0).
    let off = Off(store.status().revision.0);
    store.compact(off.r(0)).await.map_err(fail)?;
    let mut model = Model::new();
    for step in steps {
        match step {
            Step::Put(k, v) => {
                let (rev, prev) = store
                    .put(KEYS[k].to_vec(), vec![v], None)
                    .await
                    .map_err(fail)?;
                let expected_prev = model.states.last().unwrap().get(KEYS[k]).cloned();
                let (_, mrev, _) = model.txn(&[], (&[TxnOp::Put(k, v)], &[]));
                prop_assert_eq!(rev, off.r(mrev));
                prop_assert_eq!(prev.map(|kv| off.kv(&kv)), expected_prev);
            }
            Step::Delete(k) => {
                let (rev, deleted) = store.delete(KeyRange::key(KEYS[k])).await.map_err(fail)?;
                let expected: Vec<KeyValue> = model
                    .states
                    .last()
                    .unwrap()
                    .get(KEYS[k])
                    .cloned()
                    .into_iter()
                    .collect();
                let (_, mrev, _) = model.txn(&[], (&[TxnOp::Delete(k)], &[]));
                prop_assert_eq!(rev, off.r(mrev));
                let deleted: Vec<KeyValue> = deleted.iter().map(|kv| off.kv(kv)).collect();
                prop_assert_eq!(deleted, expected);
            }
            Step::DeletePrefix(p) => {
                let (rev, _) = store
                    .delete(KeyRange::prefix(PREFIXES[p]))
                    .await
                    .map_err(fail)?;
                prop_assert_eq!(rev, off.r(model.delete_prefix(PREFIXES[p])));
            }
            Step::Txn {
                compare,
                success,
                failure,
            } => {
                let (success, failure) = (dedup(success), dedup(failure));
                let compare = vec![make_compare(compare, &model)];
                let store_compare: Vec<Compare> = compare.iter().map(|c| at_off(c, off)).collect();
                let resp = store
                    .txn(Txn {
                        compare: store_compare,
                        success: to_ops(&success),
                        failure: to_ops(&failure),
                        tag: None,
                    })
                    .await
                    .map_err(fail)?;
                let (ok, rev, reads) = model.txn(&compare, (&success, &failure));
                prop_assert_eq!(resp.succeeded, ok);
                prop_assert_eq!(resp.revision, off.r(rev));
                let got_reads: Vec<Option<Vec<u8>>> = resp
                    .responses
                    .iter()
                    .filter_map(|r| match r {
                        OpResponse::Range(r) => Some(r.kvs.first().map(|kv| kv.value.clone())),
                        _ => None,
                    })
                    .collect();
                prop_assert_eq!(got_reads, reads);
            }
            Step::Compact(f) => {
                let target =
                    model.compacted + ((model.current() - model.compacted) as f64 * f) as u64;
                store.compact(off.r(target)).await.map_err(fail)?;
                model.compacted = model.compacted.max(target);
            }
            Step::Reopen => {
                store.close().await.map_err(fail)?;
                drop(store);
                store = backend.open().await.map_err(fail)?;
                check_all(&*store, off, &model).await?;
            }
            Step::ReadAt(f, p) => {
                let lo = model.compacted.saturating_sub(1);
                let rev = lo + ((model.current() - lo) as f64 * f) as u64;
                check_read(&*store, off, &model, rev, &KeyRange::prefix(PREFIXES[p])).await?;
            }
            Step::Watch(f, p, prev) => {
                let lo = model.compacted.saturating_sub(1).max(1);
                let start = lo + ((model.current() + 1 - lo) as f64 * f) as u64;
                check_watch(
                    &*store,
                    off,
                    &model,
                    start,
                    &KeyRange::prefix(PREFIXES[p]),
                    prev,
                )
                .await?;
            }
        }
    }
    check_all(&*store, off, &model).await?;
    store.close().await.map_err(fail)?;
    Ok(())
}

/// A model compare with its revisions moved to the store's.
fn at_off(c: &Compare, off: Off) -> Compare {
    let shift = |r: Revision| if r.0 == 0 { r } else { off.r(r.0) };
    let target = match &c.target {
        CompareTarget::CreateRevision(r) => CompareTarget::CreateRevision(shift(*r)),
        CompareTarget::ModRevision(r) => CompareTarget::ModRevision(shift(*r)),
        other => other.clone(),
    };
    Compare {
        key: c.key.clone(),
        op: c.op,
        target,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 500, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_model(steps in prop::collection::vec(step(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run(Backend::Sled(dir.path().join("data")), steps))?;
    }
}

/// The same model check on etcd: one etcd for every case, each case on its own prefix. Fewer
/// cases than sled's, as every step is a network round trip (and a watch waits for etcd's
/// progress notification, every 100 ms here).
#[test]
fn etcd_store_matches_the_model() {
    let Some(server) = crate::etcd::EtcdServer::start() else {
        return;
    };
    let cases = std::env::var("SKIFF_ETCD_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        max_shrink_iters: 100,
        ..RunnerConfig::default()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = runner.run(&prop::collection::vec(step(), 1..60), |steps| {
        rt.block_on(run(
            Backend::Etcd(&server, crate::etcd::fresh_prefix()),
            steps,
        ))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

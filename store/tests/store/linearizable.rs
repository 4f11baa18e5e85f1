//! Linearizability of the log under concurrency and crashes, checked with `skiff-lincheck`.
//!
//! Clients do puts, compare-and-swap transactions on one and on two keys, deletes of a key and of
//! a range, and ranges, each recording when it called and what it was answered. Three rounds run
//! in child processes (this test binary again) that the parent SIGKILLs at a random moment; a
//! last round runs in the parent on the reopened data dir. The whole history, the kills'
//! unanswered operations included (each took effect before its kill or never), must have a
//! linearization under a sequential model of the log. The log itself must then agree with that
//! linearization write for write, and every watch (from the first revision with previous values,
//! from the first revision without, and live from the current one), in the children and in the
//! parent, must have delivered exactly the log's events from its start: in order, none skipped,
//! none repeated.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use skiff_lincheck::{Model, Operation, Outcome, Verdict, check};
use skiff_store::*;

use crate::child;

const CHILD_ENV: &str = "SKIFF_STORE_LIN_CHILD";
const ROUND_ENV: &str = "SKIFF_STORE_LIN_ROUND";
const CLIENTS: usize = 8;
const KEYS: usize = 6;
const KILLED_ROUNDS: u32 = 3;
/// Operations per client in the parent's last round.
const LAST_ROUND_OPS: usize = 150;

/// One version of a key as the model and the answers describe it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct Version {
    value: String,
    create: u64,
    modified: u64,
    version: u64,
}

impl Version {
    fn of(kv: &KeyValue) -> (String, Version) {
        (
            String::from_utf8(kv.key.clone()).unwrap(),
            Version {
                value: String::from_utf8(kv.value.clone()).unwrap(),
                create: kv.create_revision.0,
                modified: kv.mod_revision.0,
                version: kv.version,
            },
        )
    }
}

/// What a client asks. Keys are `k/0` .. `k/5`; ranges are `[start, end)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Call {
    Put {
        key: String,
        value: String,
    },
    Delete {
        start: String,
        end: String,
    },
    /// Puts `value` under `key` (and `also`, in the same transaction) if `key`'s mod revision is
    /// `expect` (0: absent); otherwise reads `key`.
    Swap {
        key: String,
        expect: u64,
        also: Option<String>,
        value: String,
    },
    Range {
        start: String,
        end: String,
    },
}

/// What a client was answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Answer {
    /// A put or delete: its revision and the versions it replaced or removed.
    Write {
        revision: u64,
        previous: Vec<(String, Version)>,
    },
    /// A swap: whether it wrote, its revision, and the key's version when it did not.
    Swap {
        swapped: bool,
        revision: u64,
        current: Option<Version>,
    },
    Range {
        revision: u64,
        kvs: Vec<(String, Version)>,
    },
}

/// The log as a sequential object: the current revision and every live key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct State {
    revision: u64,
    keys: BTreeMap<String, Version>,
}

impl State {
    fn between(&self, start: &str, end: &str) -> Vec<(String, Version)> {
        self.keys
            .range(start.to_string()..end.to_string())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Puts each key at the next revision (one transaction).
    fn put(&mut self, keys: &[&String], value: &str) {
        self.revision += 1;
        for key in keys {
            let old = self.keys.get(*key);
            let version = Version {
                value: value.to_string(),
                create: old.map_or(self.revision, |v| v.create),
                modified: self.revision,
                version: old.map_or(1, |v| v.version + 1),
            };
            self.keys.insert((*key).clone(), version);
        }
    }

    /// What `call` answers in this state, and the state after it.
    fn apply(&self, call: &Call) -> (State, Answer) {
        let mut next = self.clone();
        let answer = match call {
            Call::Put { key, value } => {
                let previous = self.keys.get(key).map(|v| (key.clone(), v.clone()));
                next.put(&[key], value);
                Answer::Write {
                    revision: next.revision,
                    previous: previous.into_iter().collect(),
                }
            }
            Call::Delete { start, end } => {
                let previous = self.between(start, end);
                if !previous.is_empty() {
                    next.revision += 1;
                    for (key, _) in &previous {
                        next.keys.remove(key);
                    }
                }
                Answer::Write {
                    revision: next.revision,
                    previous,
                }
            }
            Call::Swap {
                key,
                expect,
                also,
                value,
            } => {
                let current = self.keys.get(key);
                if current.map_or(0, |v| v.modified) == *expect {
                    let mut keys = vec![key];
                    keys.extend(also);
                    next.put(&keys, value);
                    Answer::Swap {
                        swapped: true,
                        revision: next.revision,
                        current: None,
                    }
                } else {
                    Answer::Swap {
                        swapped: false,
                        revision: self.revision,
                        current: current.cloned(),
                    }
                }
            }
            Call::Range { start, end } => Answer::Range {
                revision: self.revision,
                kvs: self.between(start, end),
            },
        };
        (next, answer)
    }
}

struct Log;

impl Model for Log {
    type State = State;
    type Input = Call;
    type Output = Answer;

    fn init(&self) -> State {
        State::default()
    }

    fn step(&self, state: &State, call: &Call, answer: Option<&Answer>) -> Option<State> {
        let (next, expected) = state.apply(call);
        match answer {
            Some(seen) if *seen != expected => None,
            _ => Some(next),
        }
    }
}

fn key(i: usize) -> String {
    format!("k/{i}")
}

/// One client's next call; `seen` holds the mod revision it last saw of each key.
fn next_call(rng: &mut impl Rng, seen: &BTreeMap<String, u64>, value: String) -> Call {
    let k = key(rng.random_range(0..KEYS));
    let expect = seen.get(&k).copied().unwrap_or(0);
    match rng.random_range(0..100) {
        0..25 => Call::Put { key: k, value },
        25..45 => Call::Swap {
            key: k,
            expect,
            also: None,
            value,
        },
        45..55 => {
            let also = key(rng.random_range(0..KEYS));
            Call::Swap {
                also: (also != k).then_some(also),
                key: k,
                expect,
                value,
            }
        }
        55..63 => Call::Delete {
            start: k.clone(),
            end: format!("{k}\0"),
        },
        63..66 => {
            let a = rng.random_range(0..KEYS);
            let b = rng.random_range(a + 1..=KEYS);
            Call::Delete {
                start: key(a),
                end: key(b),
            }
        }
        _ => {
            let a = rng.random_range(0..KEYS);
            Call::Range {
                start: key(a),
                end: "k0".into(),
            }
        }
    }
}

/// Runs `call` against the store.
async fn run(store: &SledStore, call: &Call) -> Answer {
    match call {
        Call::Put { key, value } => {
            let (revision, previous) = store
                .put(key.clone().into_bytes(), value.clone().into_bytes(), None)
                .await
                .unwrap();
            Answer::Write {
                revision: revision.0,
                previous: previous.iter().map(Version::of).collect(),
            }
        }
        Call::Delete { start, end } => {
            let (revision, previous) = store
                .delete(KeyRange::interval(start.as_bytes(), end.as_bytes()))
                .await
                .unwrap();
            Answer::Write {
                revision: revision.0,
                previous: previous.iter().map(Version::of).collect(),
            }
        }
        Call::Swap {
            key,
            expect,
            also,
            value,
        } => {
            let guard = if *expect == 0 {
                Compare::not_exists(key.as_bytes())
            } else {
                Compare::mod_revision_is(key.as_bytes(), Revision(*expect))
            };
            let mut success = vec![Op::put(key.as_bytes(), value.as_bytes())];
            success.extend(also.iter().map(|k| Op::put(k.as_bytes(), value.as_bytes())));
            let response = store
                .txn(Txn {
                    compare: vec![guard],
                    success,
                    failure: vec![Op::get(key.as_bytes())],
                    tag: None,
                })
                .await
                .unwrap();
            let current = match response.responses.first() {
                Some(OpResponse::Range(r)) if !response.succeeded => {
                    r.kvs.first().map(|kv| Version::of(kv).1)
                }
                _ => None,
            };
            Answer::Swap {
                swapped: response.succeeded,
                revision: response.revision.0,
                current,
            }
        }
        Call::Range { start, end } => {
            let response = store
                .range(RangeRequest::new(KeyRange::interval(
                    start.as_bytes(),
                    end.as_bytes(),
                )))
                .await
                .unwrap();
            Answer::Range {
                revision: response.revision.0,
                kvs: response.kvs.iter().map(Version::of).collect(),
            }
        }
    }
}

/// What the mod revisions in an answer teach a client about the keys.
fn learn(seen: &mut BTreeMap<String, u64>, call: &Call, answer: &Answer) {
    match (call, answer) {
        (Call::Put { key, .. }, Answer::Write { revision, .. }) => {
            seen.insert(key.clone(), *revision);
        }
        (Call::Delete { .. }, Answer::Write { previous, .. }) => {
            for (key, _) in previous {
                seen.insert(key.clone(), 0);
            }
        }
        (
            Call::Swap { key, also, .. },
            Answer::Swap {
                swapped, revision, ..
            },
        ) if *swapped => {
            for k in std::iter::once(key).chain(also) {
                seen.insert(k.clone(), *revision);
            }
        }
        (Call::Swap { key, .. }, Answer::Swap { current, .. }) => {
            seen.insert(key.clone(), current.as_ref().map_or(0, |v| v.modified));
        }
        (_, Answer::Range { kvs, .. }) => {
            for (key, v) in kvs {
                seen.insert(key.clone(), v.modified);
            }
        }
        _ => {}
    }
}

/// A line of a round's record: calls and answers of the clients, events of the watchers.
#[derive(Debug, Serialize, Deserialize)]
enum Line {
    Call {
        id: usize,
        client: usize,
        at: u64,
        call: Call,
    },
    Answer {
        id: usize,
        at: u64,
        answer: Answer,
    },
    Watching {
        watcher: usize,
        start: u64,
        prev_kv: bool,
    },
    Event {
        watcher: usize,
        event: Seen,
    },
}

/// A watch event as the checks compare them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    revision: u64,
    key: String,
    /// None for a delete.
    value: Option<String>,
    previous: Option<String>,
}

fn config(path: &std::path::Path) -> Config {
    let mut config = Config::new(path);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    // A small ring and buffers, so that watchers also read back from the log on disk.
    config.watch_ring = 16;
    config.watch_buffer = 4;
    config
}

/// The three watchers of a round: (start revision, previous values).
fn watcher_specs(current: u64) -> [(u64, bool); 3] {
    [(1, true), (1, false), (current + 1, false)]
}

/// Where a round's lines go: written before the call they describe is made, so that a killed
/// child never leaves an operation that ran without its record.
type Sink = Arc<dyn Fn(Line) + Send + Sync>;

/// Runs one round against the store: the clients (`ops` each, or until killed) and the watchers,
/// each line to `out`. Returns when the clients are done and the watchers have delivered the
/// last revision.
async fn round(store: Arc<SledStore>, round: u32, ops: Option<usize>, out: Sink) {
    let origin = Instant::now();
    let now = move || origin.elapsed().as_nanos() as u64;
    let ids = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let current = store.status().revision.0;
    let mut watchers = Vec::new();
    for (watcher, (start, prev_kv)) in watcher_specs(current).into_iter().enumerate() {
        let mut request = WatchRequest::new(
            KeyRange::interval(b"k/".to_vec(), b"k0".to_vec()),
            Some(Revision(start)),
        );
        request.prev_kv = prev_kv;
        out(Line::Watching {
            watcher,
            start,
            prev_kv,
        });
        let mut stream = store.watch(request).await.unwrap();
        let out = out.clone();
        let (progress, progress_rx) = tokio::sync::watch::channel(start - 1);
        let task = tokio::spawn(async move {
            while let Some(response) = stream.next().await {
                let response = response.unwrap();
                for e in response.events {
                    let event = Seen {
                        revision: e.kv.mod_revision.0,
                        key: String::from_utf8(e.kv.key).unwrap(),
                        value: (e.kind == EventKind::Put)
                            .then(|| String::from_utf8(e.kv.value).unwrap()),
                        previous: e.prev_kv.map(|p| String::from_utf8(p.value).unwrap()),
                    };
                    out(Line::Event { watcher, event });
                }
                progress.send_replace(response.revision.0);
            }
        });
        watchers.push((task, progress_rx));
    }
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (store, out, ids) = (store.clone(), out.clone(), ids.clone());
        clients.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::from_os_rng();
            let mut seen = BTreeMap::new();
            for i in 0..ops.unwrap_or(usize::MAX) {
                let call = next_call(&mut rng, &seen, format!("{round}.{client}.{i}"));
                let id = ids.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                out(Line::Call {
                    id,
                    client,
                    at: now(),
                    call: call.clone(),
                });
                let answer = run(&store, &call).await;
                let at = now();
                learn(&mut seen, &call, &answer);
                out(Line::Answer { id, at, answer });
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    // The watchers catch up with the last revision, then stop.
    let last = store.status().revision.0;
    for (task, mut progress) in watchers {
        let caught_up = progress.wait_for(|r| *r >= last);
        if tokio::time::timeout(Duration::from_secs(30), caught_up)
            .await
            .is_err()
        {
            panic!("a watcher did not reach revision {last} in 30 s");
        }
        task.abort();
    }
}

#[test]
#[ignore = "the child process of the log_is_linearizable_across_crashes test, run by it"]
fn linearizable_child() {
    let (path, n) = child::args(CHILD_ENV, ROUND_ENV, "log_is_linearizable_across_crashes");
    child::runtime().block_on(async move {
        let store = Arc::new(SledStore::open(config(std::path::Path::new(&path))).unwrap());
        // The test harness has printed "test <name> ... " with no line end: end that line.
        println!();
        let out: Sink = Arc::new(|line| {
            let mut text = serde_json::to_vec(&line).unwrap();
            text.push(b'\n');
            // One write(2) of the whole line, straight into the pipe.
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&text).unwrap();
            stdout.flush().unwrap();
        });
        round(store, n, None, out).await;
    });
}

/// A round's record, as read back.
#[derive(Default)]
struct Record {
    calls: BTreeMap<usize, (usize, u64, Call)>,
    answers: BTreeMap<usize, (u64, Answer)>,
    watchers: BTreeMap<usize, (u64, bool, Vec<Seen>)>,
    /// The latest time stamped in the round.
    end: u64,
}

impl Record {
    fn add(&mut self, line: Line) {
        match line {
            Line::Call {
                id,
                client,
                at,
                call,
            } => {
                self.end = self.end.max(at);
                self.calls.insert(id, (client, at, call));
            }
            Line::Answer { id, at, answer } => {
                self.end = self.end.max(at);
                self.answers.insert(id, (at, answer));
            }
            Line::Watching {
                watcher,
                start,
                prev_kv,
            } => {
                self.watchers.insert(watcher, (start, prev_kv, Vec::new()));
            }
            Line::Event { watcher, event } => {
                self.watchers.get_mut(&watcher).unwrap().2.push(event);
            }
        }
    }
}

/// Runs a child round until a random moment after its first answer, then SIGKILLs it.
fn killed_round(path: &std::path::Path, n: u32) -> Record {
    let round = n.to_string();
    let child = child::spawn(
        "linearizable::linearizable_child",
        &[
            (CHILD_ENV, path.as_os_str()),
            (ROUND_ENV, OsStr::new(&round)),
        ],
        |record: &mut Record, line| {
            // The last line may be cut by the kill.
            if let Ok(line) = serde_json::from_str::<Line>(line) {
                record.add(line);
            }
            !record.answers.is_empty()
        },
    );
    assert!(
        child.wait_ready(Duration::from_secs(60)),
        "the child answered nothing"
    );
    std::thread::sleep(Duration::from_millis(rand::rng().random_range(100..700)));
    child.kill() // SIGKILL
}

/// The events the log holds for `state`'s history: one per key changed at each revision, as
/// [`Seen`], previous values included.
fn events_of(order: &[&Call]) -> Vec<Seen> {
    let mut state = State::default();
    let mut events = Vec::new();
    for call in order {
        let (next, _) = state.apply(call);
        if next.revision != state.revision {
            let mut keys: Vec<&String> = state.keys.keys().chain(next.keys.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (before, after) = (state.keys.get(key), next.keys.get(key));
                if before != after {
                    events.push(Seen {
                        revision: next.revision,
                        key: key.clone(),
                        value: after.map(|v| v.value.clone()),
                        previous: before.map(|v| v.value.clone()),
                    });
                }
            }
        }
        state = next;
    }
    events
}

/// Panics with `what` and where `got` and `wanted` part (a few entries either side, not the
/// thousands of both) unless they are the same.
fn same_sequence(got: &[Seen], wanted: &[Seen], what: &str) {
    if got == wanted {
        return;
    }
    let at = got
        .iter()
        .zip(wanted)
        .position(|(g, w)| g != w)
        .unwrap_or(got.len().min(wanted.len()));
    let window = |v: &[Seen]| v[at.saturating_sub(3).min(v.len())..(at + 4).min(v.len())].to_vec();
    panic!(
        "{what}: they part at entry {at} ({} got, {} wanted)\ngot:    {:#?}\nwanted: {:#?}",
        got.len(),
        wanted.len(),
        window(got),
        window(wanted)
    );
}

/// Gives the killed rounds' lost writes the answers the log shows they would have had.
///
/// A lost operation may have taken effect or not, and the check may place it anywhere before its
/// process died. Where nothing answered afterwards tells two placements apart (two lost puts to a
/// key that the next writer overwrites without reading), the check is free to pick an order other
/// than the log's, and comparing the log with that order would fail a correct log. The log itself
/// says what each lost write did: every call writes a value no other call writes, so a lost put
/// or swap is found by its value, and a revision that only deletes and that no answer claims was
/// made by a lost delete of the round that wrote it (`round_of` a revision) whose range held
/// exactly the keys it removed (of several such, the one called first: the weakest claim). Those
/// answers then bind the check to the log's order, and the history must still be linearizable
/// with them.
fn pin_lost_writes(
    log: &[LogEntry],
    history: &mut [Operation<Call, Answer>],
    round_of: impl Fn(u64) -> usize,
) -> usize {
    let mut pinned = 0;
    let claimed: std::collections::HashSet<u64> = history
        .iter()
        .filter_map(|op| match (&op.input, &op.outcome) {
            (
                Call::Delete { .. },
                Outcome::Returned {
                    output: Answer::Write { revision, previous },
                    ..
                },
            ) if !previous.is_empty() => Some(*revision),
            _ => None,
        })
        .collect();
    // The lost operations that may have written: puts and swaps by the value they write, deletes
    // in call order (of several that fit, the first called is the one pinned).
    let lost = |i: &usize| matches!(history[*i].outcome, Outcome::Lost { .. });
    let mut lost_writes: std::collections::HashMap<String, usize> = (0..history.len())
        .filter(lost)
        .filter_map(|i| match &history[i].input {
            Call::Put { value, .. } | Call::Swap { value, .. } => Some((value.clone(), i)),
            _ => None,
        })
        .collect();
    let mut lost_deletes: Vec<usize> = (0..history.len())
        .filter(lost)
        .filter(|&i| matches!(history[i].input, Call::Delete { .. }))
        .collect();
    lost_deletes.sort_by_key(|&i| history[i].call);
    let mut state: BTreeMap<String, Version> = BTreeMap::new();
    for entry in log {
        let revision = entry.revision.0;
        let mut removed = Vec::new();
        let mut written = None;
        for e in &entry.events {
            let (key, version) = Version::of(&e.kv);
            if e.kind == EventKind::Put {
                written = Some((key, version.value));
            } else {
                removed.push(key);
            }
        }
        let answer = match written {
            Some((key, value)) => lost_writes.remove(&value).map(|i| {
                let answer = match &history[i].input {
                    Call::Put { .. } => Answer::Write {
                        revision,
                        previous: state
                            .get(&key)
                            .map(|v| (key.clone(), v.clone()))
                            .into_iter()
                            .collect(),
                    },
                    _ => Answer::Swap {
                        swapped: true,
                        revision,
                        current: None,
                    },
                };
                (i, answer)
            }),
            None if !claimed.contains(&revision) => {
                removed.sort();
                let fits = |i: usize| {
                    let op = &history[i];
                    op.client / CLIENTS == round_of(revision)
                        && match &op.input {
                            Call::Delete { start, end } => state
                                .range(start.clone()..end.clone())
                                .map(|(k, _)| k)
                                .eq(removed.iter()),
                            _ => false,
                        }
                };
                lost_deletes.iter().position(|&i| fits(i)).map(|at| {
                    let previous = removed
                        .iter()
                        .map(|k| (k.clone(), state[k].clone()))
                        .collect();
                    (
                        lost_deletes.remove(at),
                        Answer::Write { revision, previous },
                    )
                })
            }
            None => None,
        };
        if let Some((i, output)) = answer {
            let Outcome::Lost { by } = history[i].outcome else {
                unreachable!()
            };
            history[i].outcome = Outcome::Returned { output, at: by };
            pinned += 1;
        }
        for e in &entry.events {
            let (key, version) = Version::of(&e.kv);
            if e.kind == EventKind::Put {
                state.insert(key, version);
            } else {
                state.remove(&key);
            }
        }
    }
    pinned
}

fn without_previous(events: &[Seen]) -> Vec<Seen> {
    events
        .iter()
        .map(|e| Seen {
            previous: None,
            ..e.clone()
        })
        .collect()
}

#[test]
fn log_is_linearizable_across_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let mut records: Vec<Record> = (0..KILLED_ROUNDS).map(|n| killed_round(&path, n)).collect();

    // The last round, in this process, on the data dir the kills left.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(SledStore::open(config(&path)).unwrap());
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let out: Sink = Arc::new(move |line| sink.lock().unwrap().push(line));
    rt.block_on(round(
        store.clone(),
        KILLED_ROUNDS,
        Some(LAST_ROUND_OPS),
        out,
    ));
    let mut last = Record::default();
    for line in std::mem::take(&mut *lines.lock().unwrap()) {
        last.add(line);
    }
    records.push(last);

    // One history on one clock: each round after the one before, the killed rounds' unanswered
    // operations lost with their process.
    let mut history = Vec::new();
    let mut offset = 0;
    let mut lost = 0;
    for (n, record) in records.iter().enumerate() {
        let killed = n < KILLED_ROUNDS as usize;
        for (id, (client, at, call)) in &record.calls {
            let outcome = match record.answers.get(id) {
                Some((answered, answer)) => Outcome::Returned {
                    output: answer.clone(),
                    at: offset + answered,
                },
                None => {
                    assert!(killed, "the last round left operation {id} unanswered");
                    lost += 1;
                    Outcome::Lost {
                        by: offset + record.end + 1,
                    }
                }
            };
            history.push(Operation {
                client: n * CLIENTS + client,
                input: call.clone(),
                call: offset + at,
                outcome,
            });
        }
        offset += record.end + 2;
    }
    let log = rt
        .block_on(store.log(Revision(1), None, usize::MAX))
        .unwrap();
    // Each round's first revision: its live watcher starts there.
    let firsts: Vec<u64> = records.iter().map(|r| r.watchers[&2].0).collect();
    let round_of = |revision| {
        firsts
            .iter()
            .rposition(|first| *first <= revision)
            .unwrap_or(0)
    };
    let pinned = pin_lost_writes(&log, &mut history, round_of);
    let started = Instant::now();
    let order = match check(&Log, &history, Some(Duration::from_secs(300))) {
        Verdict::Linearizable { order } => order,
        Verdict::NotLinearizable(why) => {
            let tail: Vec<_> = why
                .prefix
                .iter()
                .rev()
                .take(10)
                .map(|&i| &history[i])
                .collect();
            panic!(
                "not linearizable: after {} operations (the last ones, newest first: {tail:#?}) \
                 nothing explains {:#?}",
                why.prefix.len(),
                history[why.blocked]
            )
        }
        Verdict::Undecided => panic!("the check did not finish in 300 s"),
    };
    let checked_in = started.elapsed();

    // The log agrees with the linearization, write for write.
    let calls: Vec<&Call> = order.iter().map(|&i| &history[i].input).collect();
    let expected = events_of(&calls);
    let logged: Vec<Seen> = log
        .iter()
        .flat_map(|entry| {
            let mut events: Vec<Seen> = entry
                .events
                .iter()
                .map(|e| Seen {
                    revision: entry.revision.0,
                    key: String::from_utf8(e.kv.key.clone()).unwrap(),
                    value: (e.kind == EventKind::Put)
                        .then(|| String::from_utf8(e.kv.value.clone()).unwrap()),
                    previous: None,
                })
                .collect();
            events.sort_by(|a, b| a.key.cmp(&b.key));
            events
        })
        .collect();
    same_sequence(
        &logged,
        &without_previous(&expected),
        &format!(
            "the log differs from the linearization ({lost} operations lost with killed rounds)"
        ),
    );
    let revisions = store.status().revision.0;
    assert_eq!(expected.last().map(|e| e.revision), Some(revisions));

    // Every watch: exactly the log's events from its start, in order; a killed round's up to
    // where its process died.
    let mut watch_events = 0;
    for (n, record) in records.iter().enumerate() {
        assert_eq!(
            record.watchers.len(),
            3,
            "round {n}: a watcher never started"
        );
        for (w, (start, prev_kv, seen)) in &record.watchers {
            let mut seen = seen.clone();
            // Within one revision the order of keys is the log's, which sorts the same.
            seen.sort_by(|a, b| (a.revision, &a.key).cmp(&(b.revision, &b.key)));
            let mut wanted: Vec<Seen> = expected
                .iter()
                .filter(|e| e.revision >= *start)
                .cloned()
                .collect();
            if !prev_kv {
                wanted = without_previous(&wanted);
            }
            if n < KILLED_ROUNDS as usize {
                wanted.truncate(seen.len());
            }
            same_sequence(
                &seen,
                &wanted,
                &format!("round {n}: watcher {w} (from {start}) saw a different sequence"),
            );
            watch_events += seen.len();
        }
    }
    rt.block_on(async move {
        Arc::into_inner(store).unwrap().close().await.unwrap();
    });
    eprintln!(
        "linearizable: {} operations ({lost} lost in {KILLED_ROUNDS} SIGKILLs, {pinned} of them \
         found in the log) over {revisions} revisions checked in {checked_in:?}; {watch_events} \
         watch events checked",
        history.len()
    );
    assert!(
        revisions > 500,
        "too few writes to mean anything: {revisions}"
    );
}

//! Linearizability of the API over the log, across crashes of the API server: clients create,
//! update (with a resourceVersion precondition), delete, get and list ConfigMaps while the API
//! server is SIGKILLed and started again twice; the recorded history is checked with
//! `skiff-lincheck` against a sequential model of what Kubernetes promises for one namespace of
//! ConfigMaps.
//!
//! The model knows only this test's objects. Other writes (the server's own) also take
//! revisions, so a write's resourceVersion must only be above every one seen before it in the
//! linearization, and a list's resourceVersion at least that. A request that failed to connect
//! took effect before the failure or never (the server it went to was dead by then); one
//! answered with a server error, or not at all, may take effect at any time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use skiff_lincheck::{Model, Operation, Outcome, Recorder, Verdict, check};
use skiff_tests::TestCluster;

const CLIENTS: usize = 6;
const NAMES: usize = 5;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Create {
        name: String,
        value: String,
    },
    Update {
        name: String,
        expect: u64,
        value: String,
    },
    Delete {
        name: String,
    },
    Get {
        name: String,
    },
    List,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    /// Created or updated at this resourceVersion.
    Written(u64),
    Deleted,
    AlreadyExists,
    Conflict,
    NotFound,
    Found(u64, String),
    Listed(u64, Vec<(String, u64, String)>),
}

/// The namespace as the test's clients can know it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct State {
    /// A revision every later write must exceed: the newest write's or list's.
    floor: u64,
    /// Per name: its resourceVersion (None until an answer shows it, after a write whose answer
    /// was lost) and value.
    objects: BTreeMap<String, (Option<u64>, String)>,
}

struct Configmaps;

impl Model for Configmaps {
    type State = State;
    type Input = Call;
    type Output = Answer;

    fn init(&self) -> State {
        State::default()
    }

    fn step(&self, state: &State, call: &Call, answer: Option<&Answer>) -> Option<State> {
        let mut next = state.clone();
        // A write that took effect: at `rv` if the answer says, unknown otherwise.
        let write = |next: &mut State, name: &str, value: &str| -> bool {
            let rv = match answer {
                Some(Answer::Written(rv)) if *rv > state.floor => Some(*rv),
                Some(_) => return false,
                None => None,
            };
            if let Some(rv) = rv {
                next.floor = rv;
            }
            next.objects
                .insert(name.to_string(), (rv, value.to_string()));
            true
        };
        let current = |name: &str| state.objects.get(name);
        match call {
            Call::Create { name, value } => match current(name) {
                Some(_) => {
                    (answer.is_none() || answer == Some(&Answer::AlreadyExists)).then_some(next)
                }
                None => write(&mut next, name, value).then_some(next),
            },
            Call::Update {
                name,
                expect,
                value,
            } => match current(name) {
                None => (answer.is_none() || answer == Some(&Answer::NotFound)).then_some(next),
                Some((Some(rv), _)) if rv != expect => {
                    (answer.is_none() || answer == Some(&Answer::Conflict)).then_some(next)
                }
                // The version is known to match, or unknown (a lost answer): then a conflict
                // is possible too.
                Some((rv, _)) => {
                    if rv.is_none() && answer == Some(&Answer::Conflict) {
                        return Some(next);
                    }
                    write(&mut next, name, value).then_some(next)
                }
            },
            Call::Delete { name } => match current(name) {
                None => (answer.is_none() || answer == Some(&Answer::NotFound)).then_some(next),
                Some(_) => {
                    if answer.is_some() && answer != Some(&Answer::Deleted) {
                        return None;
                    }
                    next.objects.remove(name);
                    Some(next)
                }
            },
            Call::Get { name } => match (current(name), answer) {
                (None, Some(Answer::NotFound)) | (_, None) => Some(next),
                (Some((rv, value)), Some(Answer::Found(seen_rv, seen))) => {
                    if seen != value || rv.is_some_and(|rv| rv != *seen_rv) {
                        return None;
                    }
                    // A version only a read revealed.
                    next.objects.get_mut(name).unwrap().0 = Some(*seen_rv);
                    Some(next)
                }
                _ => None,
            },
            Call::List => match answer {
                None => Some(next),
                Some(Answer::Listed(rv, items)) => {
                    if *rv < state.floor || items.len() != state.objects.len() {
                        return None;
                    }
                    for (name, seen_rv, seen) in items {
                        let (known, value) = state.objects.get(name)?;
                        if seen != value || known.is_some_and(|k| k != *seen_rv) {
                            return None;
                        }
                        next.objects.get_mut(name).unwrap().0 = Some(*seen_rv);
                    }
                    next.floor = *rv;
                    Some(next)
                }
                Some(_) => None,
            },
        }
    }
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a resourceVersion")
}

/// How a request ended: an answer, a failure to reach the server, or no usable answer.
enum Ended {
    Answer(Answer),
    Unreachable,
    Unknown,
}

async fn run(http: &reqwest::Client, base: &str, token: &str, call: &Call) -> Ended {
    let url = format!("{base}/api/v1/namespaces/default/configmaps");
    let body = |name: &str, value: &str, rv: Option<u64>| {
        let mut object = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"lincheck": "yes"}},
            "data": {"value": value},
        });
        if let Some(rv) = rv {
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
        object
    };
    let request = match call {
        Call::Create { name, value } => http.post(&url).json(&body(name, value, None)),
        Call::Update {
            name,
            expect,
            value,
        } => http
            .put(format!("{url}/{name}"))
            .json(&body(name, value, Some(*expect))),
        Call::Delete { name } => http.delete(format!("{url}/{name}")),
        Call::Get { name } => http.get(format!("{url}/{name}")),
        Call::List => http.get(format!("{url}?labelSelector=lincheck%3Dyes")),
    };
    let response = match request
        .bearer_auth(token)
        .timeout(Duration::from_secs(20))
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) if e.is_connect() => return Ended::Unreachable,
        Err(_) => return Ended::Unknown,
    };
    let code = response.status().as_u16();
    let Ok(body) = response.json::<Value>().await else {
        return Ended::Unknown;
    };
    let answer = match (call, code) {
        (_, 500..) => return Ended::Unknown,
        (Call::Create { .. } | Call::Update { .. }, 200 | 201) => Answer::Written(rv_of(&body)),
        (Call::Create { .. }, 409) => Answer::AlreadyExists,
        (Call::Update { .. }, 409) => Answer::Conflict,
        (Call::Delete { .. }, 200 | 202) => Answer::Deleted,
        (Call::Get { .. }, 200) => Answer::Found(
            rv_of(&body),
            body["data"]["value"].as_str().unwrap().to_string(),
        ),
        (Call::List, 200) => Answer::Listed(
            rv_of(&body),
            body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|cm| {
                    (
                        cm["metadata"]["name"].as_str().unwrap().to_string(),
                        rv_of(cm),
                        cm["data"]["value"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
        ),
        (_, 404) => Answer::NotFound,
        (call, code) => panic!("{call:?} answered {code}: {body}"),
    };
    Ended::Answer(answer)
}

#[test]
fn the_api_is_linearizable_across_api_server_crashes() {
    let mut cluster = TestCluster::start(&[]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let recorder = Arc::new(Recorder::<Call, Answer>::new());
    // Lost operations: (ticket, when the failure was seen).
    let lost = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (http, base, token) = (
            cluster.http(),
            cluster.server.clone(),
            cluster.token.clone(),
        );
        let (recorder, lost, stop) = (recorder.clone(), lost.clone(), stop.clone());
        clients.push(rt.spawn(async move {
            let mut seen: BTreeMap<String, u64> = BTreeMap::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // A cheap spread of choices, different per client.
                let pick = (i * 31 + client as u64 * 17) ^ (i >> 3);
                let name = format!("lin-{}", pick % NAMES as u64);
                let value = format!("{client}.{i}");
                let call = match pick % 10 {
                    0..3 => Call::Create { name, value },
                    3..6 => Call::Update {
                        expect: seen.get(&name).copied().unwrap_or(1),
                        name,
                        value,
                    },
                    6 => Call::Delete { name },
                    7..9 => Call::Get { name },
                    _ => Call::List,
                };
                let ticket = recorder.call(client, call.clone());
                match run(&http, &base, &token, &call).await {
                    Ended::Answer(answer) => {
                        match (&call, &answer) {
                            (
                                Call::Create { name, .. } | Call::Update { name, .. },
                                Answer::Written(rv),
                            )
                            | (Call::Get { name }, Answer::Found(rv, _)) => {
                                seen.insert(name.clone(), *rv);
                            }
                            (_, Answer::Listed(_, items)) => {
                                for (name, rv, _) in items {
                                    seen.insert(name.clone(), *rv);
                                }
                            }
                            _ => {}
                        }
                        recorder.returned(ticket, answer);
                    }
                    Ended::Unreachable => {
                        lost.lock().unwrap().push((ticket, recorder.now()));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Ended::Unknown => {}
                }
                // A steady pace rather than a flood: the suite runs other tests beside this one.
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }));
    }
    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(5));
        cluster.restart_after_crash();
    }
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        rt.block_on(c).unwrap();
    }

    let mut history: Vec<Operation<Call, Answer>> =
        Arc::into_inner(recorder).unwrap().into_history();
    let lost = std::mem::take(&mut *lost.lock().unwrap());
    for (ticket, by) in &lost {
        history[*ticket].outcome = Outcome::Lost { by: *by };
    }
    let answered = history
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Returned { .. }))
        .count();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for op in &history {
        let kind = match &op.outcome {
            Outcome::Returned { output, .. } => match output {
                Answer::Written(_) => "written",
                Answer::Deleted => "deleted",
                Answer::AlreadyExists => "already exists",
                Answer::Conflict => "conflict",
                Answer::NotFound => "not found",
                Answer::Found(..) => "found",
                Answer::Listed(..) => "listed",
            },
            _ => "no answer",
        };
        *kinds.entry(kind).or_default() += 1;
    }
    eprintln!("answers: {kinds:?}");
    let verdict = check(&Configmaps, &history, Some(Duration::from_secs(120)));
    match verdict {
        Verdict::Linearizable { order } => eprintln!(
            "linearizable: {} operations ({answered} answered, {} unreachable) across 2 API \
             server SIGKILLs; {} took effect",
            history.len(),
            lost.len(),
            order.len()
        ),
        Verdict::NotLinearizable(why) => {
            let tail: Vec<_> = why
                .prefix
                .iter()
                .rev()
                .take(12)
                .map(|&i| &history[i])
                .collect();
            panic!(
                "not linearizable: after {} operations (newest first: {tail:#?}) nothing explains \
                 {:#?}",
                why.prefix.len(),
                history[why.blocked]
            );
        }
        Verdict::Undecided => panic!("the check did not finish in 120 s"),
    }
    assert!(answered > 300, "too few operations answered: {answered}");

    // The check can fail: the same history with one read's answer off by one version is not
    // linearizable.
    let read = history
        .iter()
        .position(|op| {
            matches!(
                op.outcome,
                Outcome::Returned {
                    output: Answer::Found(..),
                    ..
                }
            )
        })
        .expect("some read found an object");
    if let Outcome::Returned {
        output: Answer::Found(rv, _),
        ..
    } = &mut history[read].outcome
    {
        *rv -= 1;
    }
    let corrupted = &history[..(read + 1).max(history.len().min(2000))];
    assert!(
        matches!(
            check(&Configmaps, corrupted, Some(Duration::from_secs(120))),
            Verdict::NotLinearizable(_)
        ),
        "a read of a version that never existed passed the check"
    );
}

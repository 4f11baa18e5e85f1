//! Behaviour of `SledStore` through the `Store` contract: revisions, reads, transactions, watches,
//! compaction, leases, retention, snapshots, and the failure modes the contract names.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use skiff_store::*;

fn config(dir: &tempfile::TempDir) -> Config {
    let mut config = Config::new(dir.path().join("data"));
    // Tests drive compaction themselves.
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config
}

fn open(dir: &tempfile::TempDir) -> SledStore {
    SledStore::open(config(dir)).expect("open")
}

async fn get(store: &dyn Store, key: &str, rev: Option<u64>) -> Result<Option<KeyValue>> {
    let mut req = RangeRequest::new(KeyRange::key(key));
    req.revision = rev.map(Revision);
    Ok(store.range(req).await?.kvs.into_iter().next())
}

async fn put(store: &dyn Store, key: &str, value: &str) -> Revision {
    store
        .put(key.into(), value.into(), None)
        .await
        .expect("put")
        .0
}

fn keys(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

/// Collects watch responses until one at `until` (inclusive) arrives.
async fn collect_until(stream: &mut WatchStream, until: u64) -> Vec<WatchResponse> {
    let mut out = Vec::new();
    loop {
        let resp = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("watch stalled")
            .expect("watch ended")
            .expect("watch error");
        let rev = resp.revision.0;
        out.push(resp);
        if rev >= until {
            return out;
        }
    }
}

/// The contract tests the etcd backend runs too (see `contract.rs`), on fresh sled stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_passes_the_shared_contract() {
    use crate::contract;
    let fresh = || {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        (dir, store)
    };
    let (_d, s) = fresh();
    contract::revisions_versions_and_tombstones(&s, 0).await;
    let (_d, s) = fresh();
    contract::ranges_with_limits_continuation_count_and_intervals(&s, 0).await;
    let (_d, s) = fresh();
    contract::transactions_compare_and_branch(&s, 0).await;
    let (_d, s) = fresh();
    contract::compaction_makes_old_revisions_unreadable(&s, 0).await;
    let (_d, s) = fresh();
    contract::commit_times_map_back_to_revisions(&s, 0).await;
    let (_d, s) = fresh();
    contract::watch_replays_history_then_goes_live(Arc::new(s), 0).await;
    let (_d, s) = fresh();
    contract::progress_notifications_carry_the_current_revision(&s, 0).await;
    let (_d, s) = fresh();
    contract::tags_are_kept_with_their_revisions(&s, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_versions_and_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    assert_eq!(store.status().revision, Revision(0));
    assert_eq!(put(&store, "a", "1").await, Revision(1));
    let (rev, prev) = store.put(b"a".to_vec(), b"2".to_vec(), None).await.unwrap();
    assert_eq!(rev, Revision(2));
    let prev = prev.expect("previous version");
    assert_eq!((prev.value.as_slice(), prev.version), (&b"1"[..], 1));
    let kv = get(&store, "a", None).await.unwrap().unwrap();
    assert_eq!(kv.create_revision, Revision(1));
    assert_eq!(kv.mod_revision, Revision(2));
    assert_eq!(kv.version, 2);
    let (rev, deleted) = store.delete(KeyRange::key("a")).await.unwrap();
    assert_eq!(rev, Revision(3));
    assert_eq!(keys(&deleted), vec!["a"]);
    assert_eq!(get(&store, "a", None).await.unwrap(), None);
    // Deleting nothing writes nothing.
    let (rev, deleted) = store.delete(KeyRange::key("a")).await.unwrap();
    assert_eq!((rev, deleted.len()), (Revision(3), 0));
    // Re-created: a new create revision and version 1.
    assert_eq!(put(&store, "a", "3").await, Revision(4));
    let kv = get(&store, "a", None).await.unwrap().unwrap();
    assert_eq!((kv.create_revision, kv.version), (Revision(4), 1));
    // History keeps the tombstone.
    let history = store.history(b"a").await.unwrap();
    let kinds: Vec<(EventKind, u64)> = history
        .iter()
        .map(|(_, e)| (e.kind, e.kv.mod_revision.0))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::Put, 1),
            (EventKind::Put, 2),
            (EventKind::Delete, 3),
            (EventKind::Put, 4)
        ]
    );
    assert_eq!(history[2].1.prev_kv.as_ref().unwrap().value, b"2");
    // Past revisions read back as they were.
    assert_eq!(
        get(&store, "a", Some(1)).await.unwrap().unwrap().value,
        b"1"
    );
    assert_eq!(get(&store, "a", Some(3)).await.unwrap(), None);
    assert_eq!(get(&store, "a", Some(0)).await.unwrap(), None);
    assert!(matches!(
        get(&store, "a", Some(5)).await,
        Err(Error::FutureRevision {
            requested: Revision(5),
            current: Revision(4)
        })
    ));
}

/// Concurrent writers share group commits, so one log record holds several tags (and gaps where
/// a write had none); each revision keeps its own across a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_of_group_commits_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = std::collections::BTreeMap::new();
    {
        let store = Arc::new(open(&dir));
        let writes = (0..64u32).map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let tag = (i % 3 != 0).then(|| format!("user-{i}").into_bytes());
                let response = store
                    .txn(Txn {
                        success: vec![Op::put(format!("g/{}", i % 5), format!("{i}"))],
                        tag: tag.clone(),
                        ..Txn::default()
                    })
                    .await
                    .unwrap();
                (response.revision, tag)
            })
        });
        for write in futures::future::join_all(writes).await {
            let (revision, tag) = write.unwrap();
            expected.insert(revision, tag);
        }
        store.close().await.unwrap();
    }
    let store = open(&dir);
    let log = store.log(Revision(1), None, 1000).await.unwrap();
    let got: std::collections::BTreeMap<_, _> =
        log.into_iter().map(|e| (e.revision, e.tag)).collect();
    assert_eq!(got, expected);
    for (commit, event) in store.history(b"g/1").await.unwrap() {
        assert_eq!(commit.tag, expected[&event.kv.mod_revision]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_recovers_revision_index_history_and_commit_times() {
    let dir = tempfile::tempdir().unwrap();
    let before = SystemTime::now();
    {
        let store = open(&dir);
        for i in 0..50 {
            put(&store, &format!("k{}", i % 7), &format!("v{i}")).await;
        }
        store.delete(KeyRange::key("k3")).await.unwrap();
        store.close().await.unwrap();
        assert!(matches!(put_err(&store).await, Error::Closed));
    }
    let store = open(&dir);
    assert_eq!(store.status().revision, Revision(51));
    assert_eq!(put(&store, "k0", "next").await, Revision(52));
    let all = store
        .range(RangeRequest::new(KeyRange::prefix("k")).at(Revision(50)))
        .await
        .unwrap();
    assert_eq!(all.kvs.len(), 7);
    assert_eq!(all.revision, Revision(50));
    let log = store.log(Revision(1), None, 1000).await.unwrap();
    let revs: Vec<u64> = log.iter().map(|e| e.revision.0).collect();
    assert_eq!(revs, (1..=52).collect::<Vec<_>>());
    assert!(log.windows(2).all(|w| w[0].time <= w[1].time));
    assert!(log[0].time >= before);
    // Commit times map back to revisions.
    assert_eq!(
        store.revision_at(log[9].time).await.unwrap(),
        Revision(10).max(revision_with_time(&log, log[9].time))
    );
    assert_eq!(
        store.revision_at(SystemTime::now()).await.unwrap(),
        Revision(52)
    );
    assert_eq!(
        store
            .revision_at(before - Duration::from_secs(1))
            .await
            .unwrap(),
        Revision(0)
    );
}

/// The newest revision in `log` with commit time at or before `t`.
fn revision_with_time(log: &[LogEntry], t: SystemTime) -> Revision {
    log.iter()
        .filter(|e| e.time <= t)
        .map(|e| e.revision)
        .max()
        .unwrap()
}

async fn put_err(store: &dyn Store) -> Error {
    store
        .put(b"x".to_vec(), b"y".to_vec(), None)
        .await
        .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_with_limits_continuation_count_and_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    for i in 0..25 {
        put(&store, &format!("/pods/{i:02}"), "v").await;
    }
    put(&store, "/pods", "not in the prefix").await;
    put(&store, "/podsx", "not in the prefix either").await;
    put(&store, "/pods/\0zero", "a zero byte").await;
    let rev = store.status().revision;
    // Page through with limit 10 and resume_at.
    let range = KeyRange::prefix("/pods/");
    let mut seen = Vec::new();
    let mut next = range.clone();
    loop {
        let mut req = RangeRequest::new(next.clone()).at(rev).limit(10);
        req.count = true;
        let resp = store.range(req).await.unwrap();
        // The count covers the whole (remaining) range, not just the page.
        assert_eq!(resp.count, Some(26 - seen.len() as u64));
        assert_eq!(resp.revision, rev);
        seen.extend(keys(&resp.kvs));
        if !resp.more {
            break;
        }
        let mut last = resp.kvs.last().unwrap().key.clone();
        last.push(0);
        next = range.resume_at(last);
    }
    assert_eq!(seen.len(), 26);
    assert_eq!(seen[0], "/pods/\0zero");
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    let interval = store
        .range(RangeRequest::new(KeyRange::interval(
            "/pods/05", "/pods/08",
        )))
        .await
        .unwrap();
    assert_eq!(
        keys(&interval.kvs),
        vec!["/pods/05", "/pods/06", "/pods/07"]
    );
    let from = store
        .range(RangeRequest::new(KeyRange::from("/pods/24")))
        .await
        .unwrap();
    assert_eq!(keys(&from.kvs), vec!["/pods/24", "/podsx"]);
    let mut keys_only = RangeRequest::new(KeyRange::key("/pods"));
    keys_only.keys_only = true;
    let resp = store.range(keys_only).await.unwrap();
    assert!(resp.kvs[0].value.is_empty() && resp.kvs[0].version == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_compare_and_branch() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let r1 = put(&store, "a", "1").await;
    // Create-if-absent fails on an existing key and runs the failure branch's read.
    let resp = store
        .txn(Txn {
            compare: vec![Compare::not_exists("a")],
            success: vec![Op::put("a", "new")],
            failure: vec![Op::get("a")],
            tag: None,
        })
        .await
        .unwrap();
    assert!(!resp.succeeded);
    assert_eq!(resp.revision, r1);
    match &resp.responses[..] {
        [OpResponse::Range(r)] => {
            assert_eq!(r.kvs[0].value, b"1");
            assert_eq!(r.revision, r1);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Optimistic concurrency on mod revision: three ops, one revision.
    let resp = store
        .txn(Txn {
            compare: vec![
                Compare::mod_revision_is("a", r1),
                Compare {
                    key: b"a".to_vec(),
                    op: CompareOp::Equal,
                    target: CompareTarget::Value(b"1".to_vec()),
                },
                Compare {
                    key: b"a".to_vec(),
                    op: CompareOp::Less,
                    target: CompareTarget::Version(2),
                },
                Compare {
                    key: b"a".to_vec(),
                    op: CompareOp::Equal,
                    target: CompareTarget::CreateRevision(r1),
                },
                Compare::not_exists("b"),
            ],
            success: vec![
                Op::Put {
                    key: b"a".to_vec(),
                    value: b"2".to_vec(),
                    lease: None,
                    prev_kv: true,
                },
                Op::put("b", "1"),
                Op::get("b"),
                Op::put("c", "1"),
            ],
            failure: vec![],
            tag: None,
        })
        .await
        .unwrap();
    assert!(resp.succeeded);
    assert_eq!(resp.revision, Revision(2));
    match &resp.responses[..] {
        [
            OpResponse::Put {
                prev_kv: Some(prev),
            },
            OpResponse::Put { prev_kv: None },
            OpResponse::Range(r),
            OpResponse::Put { .. },
        ] => {
            assert_eq!(prev.value, b"1");
            // The read sees the transaction's earlier put, at the transaction's revision.
            assert_eq!(r.kvs[0].value, b"1");
            assert_eq!(r.kvs[0].mod_revision, Revision(2));
            assert_eq!(r.revision, Revision(2));
        }
        other => panic!("unexpected {other:?}"),
    }
    for key in ["a", "b", "c"] {
        assert_eq!(
            get(&store, key, None).await.unwrap().unwrap().mod_revision,
            Revision(2)
        );
    }
    // The same guard now fails.
    let resp = store
        .txn(Txn {
            compare: vec![Compare::mod_revision_is("a", r1)],
            success: vec![Op::put("a", "3")],
            failure: vec![],
            tag: None,
        })
        .await
        .unwrap();
    assert!(!resp.succeeded && resp.responses.is_empty());
    // A value compare on a missing key is false whichever the operator.
    for op in [
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::Greater,
        CompareOp::Less,
    ] {
        let resp = store
            .txn(Txn {
                compare: vec![Compare {
                    key: b"zz".to_vec(),
                    op,
                    target: CompareTarget::Value(vec![]),
                }],
                success: vec![Op::put("zz", "x")],
                failure: vec![],
                tag: None,
            })
            .await
            .unwrap();
        assert!(!resp.succeeded, "{op:?}");
    }
    // Delete of a range inside a transaction, with previous values.
    let resp = store
        .txn(Txn {
            compare: vec![
                Compare::exists("a"),
                Compare {
                    key: b"b".to_vec(),
                    op: CompareOp::Greater,
                    target: CompareTarget::ModRevision(Revision(1)),
                },
            ],
            success: vec![Op::Delete {
                range: KeyRange::interval("a", "c"),
                prev_kv: true,
            }],
            failure: vec![],
            tag: None,
        })
        .await
        .unwrap();
    match &resp.responses[..] {
        [
            OpResponse::Delete {
                deleted: 2,
                prev_kvs,
            },
        ] => assert_eq!(keys(prev_kvs), vec!["a", "b"]),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(resp.revision, Revision(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_leave_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir);
    config.max_value_size = 1000;
    let store = SledStore::open(config).unwrap();
    put(&store, "a", "1").await;
    let err = store
        .put(b"big".to_vec(), vec![0; 1001], None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ValueTooLarge {
                size: 1001,
                limit: 1000
            }
        ),
        "{err}"
    );
    let err = store
        .txn(Txn {
            compare: vec![],
            success: vec![Op::put("x", "1"), Op::put("x", "2")],
            failure: vec![],
            tag: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateKey(k) if k == b"x"));
    let err = store
        .txn(Txn {
            compare: vec![],
            success: vec![
                Op::put("p/1", "1"),
                Op::Delete {
                    range: KeyRange::prefix("p/"),
                    prev_kv: false,
                },
            ],
            failure: vec![],
            tag: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateKey(_)));
    let err = store
        .put(b"l".to_vec(), b"v".to_vec(), Some(LeaseId(99)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseNotFound(LeaseId(99))));
    assert_eq!(store.status().revision, Revision(1));
    assert_eq!(put(&store, "b", "1").await, Revision(2));
    assert_eq!(get(&store, "big", None).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_history_then_goes_live_without_gap_or_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir));
    for i in 1..=20 {
        put(&*store, &format!("w/{}", i % 3), &format!("{i}")).await;
        put(&*store, "other", "x").await;
    }
    let mut req = WatchRequest::new(KeyRange::prefix("w/"), Some(Revision(5)));
    req.prev_kv = true;
    let mut stream = store.watch(req).await.unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 21..=60 {
                put(&*store, &format!("w/{}", i % 3), &format!("{i}")).await;
                put(&*store, "other", "x").await;
            }
            store.delete(KeyRange::key("w/1")).await.unwrap();
        })
    };
    writer.await.unwrap();
    let last = store.status().revision.0;
    let got = collect_until(&mut stream, last).await;
    let revs: Vec<u64> = got.iter().map(|r| r.revision.0).collect();
    // Puts to w/ are at odd revisions from 5 on, then the delete.
    let mut expected: Vec<u64> = (5..=119).step_by(2).collect();
    expected.push(last);
    assert_eq!(revs, expected);
    for resp in &got {
        assert_eq!(resp.events.len(), 1);
        let e = &resp.events[0];
        assert_eq!(e.kv.mod_revision, resp.revision);
        if resp.revision.0 > 6 && e.kind == EventKind::Put {
            assert_eq!(
                e.prev_kv.as_ref().unwrap().mod_revision.0,
                resp.revision.0 - 6
            );
        }
    }
    let delete = &got.last().unwrap().events[0];
    assert_eq!(delete.kind, EventKind::Delete);
    assert_eq!(delete.kv.version, 0);
    assert!(delete.kv.value.is_empty());
    // A watch from "now" sees only what comes next.
    let mut live = store
        .watch(WatchRequest::new(KeyRange::key("w/2"), None))
        .await
        .unwrap();
    let r = put(&*store, "w/2", "later").await;
    let got = collect_until(&mut live, r.0).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].revision, r);
    assert!(got[0].events[0].prev_kv.is_none(), "not asked for");
    // Beyond the next revision is the future.
    let err = store
        .watch(WatchRequest::new(
            KeyRange::prefix(""),
            Some(Revision(r.0 + 2)),
        ))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::FutureRevision { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_carry_the_current_revision() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    put(&store, "other", "1").await;
    let mut req = WatchRequest::new(KeyRange::prefix("quiet/"), None);
    req.progress_notify = Some(Duration::from_millis(50));
    let mut stream = store.watch(req).await.unwrap();
    put(&store, "other", "2").await;
    let resp = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(resp.is_progress());
    assert!(resp.revision >= Revision(1));
    // Eventually the progress revision reaches the current one.
    loop {
        let resp = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(resp.is_progress());
        if resp.revision == Revision(2) {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_makes_old_revisions_unreadable_and_keeps_the_rest_right() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    put(&store, "a", "1").await; // 1
    put(&store, "b", "1").await; // 2
    put(&store, "a", "2").await; // 3
    store.delete(KeyRange::key("b")).await.unwrap(); // 4
    put(&store, "c", "1").await; // 5
    put(&store, "a", "3").await; // 6
    store.compact(Revision(5)).await.unwrap();
    assert_eq!(store.status().compacted, Revision(5));
    for rev in [1, 4] {
        let err = get(&store, "a", Some(rev)).await.unwrap_err();
        assert!(
            matches!(err, Error::Compacted { requested: Revision(r), compacted: Revision(5), prefix: None } if r == rev),
            "{err}"
        );
    }
    let at5 = store
        .range(RangeRequest::new(KeyRange::prefix("")).at(Revision(5)))
        .await
        .unwrap();
    let got: Vec<(String, u64)> = at5
        .kvs
        .iter()
        .map(|kv| (String::from_utf8_lossy(&kv.key).into(), kv.mod_revision.0))
        .collect();
    assert_eq!(got, vec![("a".into(), 3), ("c".into(), 5)]);
    // Older versions are really gone: a's history starts at its state at 5, b's is empty.
    let revs: Vec<u64> = store
        .history(b"a")
        .await
        .unwrap()
        .iter()
        .map(|(_, e)| e.kv.mod_revision.0)
        .collect();
    assert_eq!(revs, vec![3, 6]);
    assert!(store.history(b"b").await.unwrap().is_empty());
    let err = store
        .watch(WatchRequest::new(KeyRange::prefix(""), Some(Revision(4))))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::Compacted { .. }));
    let err = store.log(Revision(2), None, 10).await.unwrap_err();
    assert!(matches!(err, Error::Compacted { .. }));
    let log = store.log(Revision(5), None, 10).await.unwrap();
    assert_eq!(
        log.iter().map(|e| e.revision.0).collect::<Vec<_>>(),
        vec![5, 6]
    );
    let err = store.revision_at(SystemTime::UNIX_EPOCH).await.unwrap_err();
    assert!(matches!(
        err,
        Error::TimeBeforeHistory {
            oldest: Revision(5)
        }
    ));
    assert!(matches!(
        store.compact(Revision(7)).await,
        Err(Error::FutureRevision { .. })
    ));
    // Compacting to the current revision keeps the current state; survives reopen.
    store.compact(Revision(6)).await.unwrap();
    store.close().await.unwrap();
    drop(store);
    let store = open(&dir);
    assert_eq!(store.status().compacted, Revision(6));
    assert_eq!(get(&store, "a", None).await.unwrap().unwrap().value, b"3");
    assert_eq!(
        get(&store, "c", Some(6)).await.unwrap().unwrap().value,
        b"1"
    );
    assert!(matches!(
        get(&store, "c", Some(5)).await,
        Err(Error::Compacted { .. })
    ));
    assert_eq!(put(&store, "d", "1").await, Revision(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_retention_keeps_the_last_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir);
    config.retention = Retention {
        max_revisions: Some(10),
        max_age: None,
        interval: Duration::from_millis(20),
    };
    let store = SledStore::open(config).unwrap();
    for i in 0..40 {
        put(&store, "k", &i.to_string()).await;
    }
    // The policy runs in the background: wait until it has caught up.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while store.status().compacted < Revision(31) {
        assert!(
            std::time::Instant::now() < deadline,
            "retention did not run"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.status().compacted, Revision(31));
    // Revisions 31..=40, and 30: the previous value of the change at 31.
    assert_eq!(store.history(b"k").await.unwrap().len(), 11);
    assert!(matches!(
        get(&store, "k", Some(30)).await,
        Err(Error::Compacted { .. })
    ));
    assert_eq!(
        get(&store, "k", Some(31)).await.unwrap().unwrap().value,
        b"30"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_retention_prunes_churny_keys_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir);
    config.prefix_retention = vec![PrefixRetention {
        prefix: b"/leases/".to_vec(),
        max_versions: 2,
    }];
    let store = SledStore::open(config).unwrap();
    put(&store, "/pods/p", "1").await; // 1
    for i in 0..20 {
        put(&store, "/leases/n1", &i.to_string()).await; // 2..=21
    }
    put(&store, "/pods/p", "2").await; // 22
    let history = store.history(b"/leases/n1").await.unwrap();
    assert!(history.len() <= 3, "kept {} versions", history.len());
    assert_eq!(history.last().unwrap().1.kv.value, b"19");
    // Other keys keep their whole history.
    assert_eq!(store.history(b"/pods/p").await.unwrap().len(), 2);
    assert_eq!(
        get(&store, "/pods/p", Some(5))
            .await
            .unwrap()
            .unwrap()
            .value,
        b"1"
    );
    // A read that needs a pruned lease version says so, naming the prefix.
    let err = get(&store, "/leases/n1", Some(5)).await.unwrap_err();
    match err {
        Error::Compacted {
            requested: Revision(5),
            prefix: Some(p),
            compacted,
        } => {
            assert_eq!(p, b"/leases/");
            assert!(compacted.0 > 5);
        }
        other => panic!("unexpected {other}"),
    }
    let err = store
        .range(RangeRequest::new(KeyRange::prefix("/")).at(Revision(5)))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Compacted {
            prefix: Some(_),
            ..
        }
    ));
    let err = store
        .watch(WatchRequest::new(
            KeyRange::prefix("/leases/"),
            Some(Revision(3)),
        ))
        .await
        .err()
        .unwrap();
    assert!(matches!(
        err,
        Error::Compacted {
            prefix: Some(_),
            ..
        }
    ));
    // A watch of other keys from the past is unaffected.
    let mut w = store
        .watch(WatchRequest::new(
            KeyRange::prefix("/pods/"),
            Some(Revision(1)),
        ))
        .await
        .unwrap();
    let got = collect_until(&mut w, 22).await;
    assert_eq!(
        got.iter().map(|r| r.revision.0).collect::<Vec<_>>(),
        vec![1, 22]
    );
    // The current state is right, and the watermark survives reopen.
    assert_eq!(
        get(&store, "/leases/n1", None)
            .await
            .unwrap()
            .unwrap()
            .value,
        b"19"
    );
    store.close().await.unwrap();
    drop(store);
    let mut config = config_plain(&dir);
    config.prefix_retention.clear();
    let store = SledStore::open(config).unwrap();
    assert!(matches!(
        get(&store, "/leases/n1", Some(5)).await,
        Err(Error::Compacted {
            prefix: Some(_),
            ..
        })
    ));
}

fn config_plain(dir: &tempfile::TempDir) -> Config {
    config(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_delete_their_keys_on_revoke_and_expiry_as_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let lease = store.lease_grant(Duration::from_secs(60)).await.unwrap();
    let short = store.lease_grant(Duration::from_millis(300)).await.unwrap();
    assert_ne!(lease.id, short.id);
    store
        .put(b"e/1".to_vec(), b"x".to_vec(), Some(lease.id))
        .await
        .unwrap();
    store
        .put(b"e/2".to_vec(), b"x".to_vec(), Some(lease.id))
        .await
        .unwrap();
    store
        .put(b"e/3".to_vec(), b"x".to_vec(), Some(short.id))
        .await
        .unwrap();
    // Re-put without the lease detaches e/2.
    store
        .put(b"e/2".to_vec(), b"y".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(
        get(&store, "e/1", None).await.unwrap().unwrap().lease,
        Some(lease.id)
    );
    let mut watch = store
        .watch(WatchRequest::new(KeyRange::prefix("e/"), None))
        .await
        .unwrap();
    // Expiry: an ordinary revisioned delete that watchers see.
    let expired = tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(expired.events.len(), 1);
    assert_eq!(expired.events[0].kind, EventKind::Delete);
    assert_eq!(expired.events[0].kv.key, b"e/3");
    assert!(matches!(
        store.lease_keep_alive(short.id).await,
        Err(Error::LeaseNotFound(_))
    ));
    // Keep-alive renews.
    let renewed = store.lease_keep_alive(lease.id).await.unwrap();
    assert_eq!(renewed.ttl, Duration::from_secs(60));
    // Revoke deletes every attached key in one revision.
    let rev = store.lease_revoke(lease.id).await.unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.revision, rev);
    assert_eq!(
        keys(&resp.events.iter().map(|e| e.kv.clone()).collect::<Vec<_>>()),
        vec!["e/1"]
    );
    assert_eq!(get(&store, "e/2", None).await.unwrap().unwrap().value, b"y");
    assert!(matches!(
        store.lease_revoke(lease.id).await,
        Err(Error::LeaseNotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_survive_restart_and_expire_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (long, short) = {
        let store = open(&dir);
        let long = store.lease_grant(Duration::from_secs(600)).await.unwrap();
        let short = store.lease_grant(Duration::from_millis(500)).await.unwrap();
        store
            .put(b"long".to_vec(), b"x".to_vec(), Some(long.id))
            .await
            .unwrap();
        store
            .put(b"short".to_vec(), b"x".to_vec(), Some(short.id))
            .await
            .unwrap();
        store.close().await.unwrap();
        (long, short)
    };
    let store = open(&dir);
    // Ids are not reused after a restart.
    let third = store.lease_grant(Duration::from_secs(5)).await.unwrap();
    assert!(third.id > short.id && third.id > long.id);
    store.lease_keep_alive(long.id).await.unwrap();
    let mut watch = store
        .watch(WatchRequest::new(KeyRange::key("short"), None))
        .await
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.events[0].kind, EventKind::Delete);
    assert!(get(&store, "long", None).await.unwrap().is_some());
    let rev = store.lease_revoke(long.id).await.unwrap();
    assert!(get(&store, "long", Some(rev.0)).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_open_of_a_live_data_dir_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    put(&store, "a", "1").await;
    let err = SledStore::open(config(&dir)).unwrap_err();
    assert!(
        matches!(&err, Error::Locked { path } if path == &dir.path().join("data")),
        "{err}"
    );
    // The live store is unharmed.
    assert_eq!(put(&store, "a", "2").await, Revision(2));
    store.close().await.unwrap();
    drop(store);
    let store = open(&dir);
    assert_eq!(store.status().revision, Revision(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_or_damaged_data_dirs_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // A directory of someone else's files.
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "hello").unwrap();
    let err = SledStore::open(Config::new(&foreign)).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { reason, .. } if reason.contains("not a sled database")),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&foreign).unwrap().count(),
        1,
        "nothing was written"
    );
    // A file, not a directory.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    assert!(matches!(
        SledStore::open(Config::new(&file)),
        Err(Error::Corrupt { .. })
    ));
    // Another program's sled database.
    let other = dir.path().join("other-sled");
    {
        let db = sled::open(&other).unwrap();
        db.insert("theirs", "data").unwrap();
        db.flush().unwrap();
    }
    let err = SledStore::open(Config::new(&other)).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { reason, .. } if reason.contains("format record")),
        "{err}"
    );
    // A data dir of the older format (one log record per revision) is refused, saying so.
    let older = dir.path().join("older-format");
    {
        let db = sled::open(&older).unwrap();
        db.insert("mformat", "skiff-log/1").unwrap();
        db.insert(b"l\0\0\0\0\0\0\0\x01", &b"old record"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let err = SledStore::open(Config::new(&older)).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { reason, .. }
            if reason.contains("skiff-log/1") && reason.contains("older build")),
        "{err}"
    );
    // A damaged log file.
    let damaged = dir.path().join("damaged");
    {
        let store = SledStore::open(Config::new(&damaged)).unwrap();
        put(&store, "a", "1").await;
        store.close().await.unwrap();
    }
    let db_file = damaged.join("db");
    let len = std::fs::metadata(&db_file).unwrap().len() as usize;
    std::fs::write(&db_file, vec![0xa5; len.max(4096)]).unwrap();
    std::fs::write(damaged.join("conf"), b"garbage config").unwrap();
    let err = SledStore::open(Config::new(&damaged)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_restore_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let lease = store.lease_grant(Duration::from_secs(600)).await.unwrap();
    for i in 0..30 {
        put(&store, &format!("k{}", i % 4), &i.to_string()).await;
    }
    store
        .put(b"leased".to_vec(), b"x".to_vec(), Some(lease.id))
        .await
        .unwrap();
    store.delete(KeyRange::key("k1")).await.unwrap();
    store.compact(Revision(10)).await.unwrap();
    let file = dir.path().join("backup.snap");
    let rev = store.snapshot(&file).await.unwrap();
    assert_eq!(rev, store.status().revision);
    // Writes after the snapshot are not in it.
    put(&store, "after", "1").await;
    let expected = store
        .range(RangeRequest::new(KeyRange::prefix("")).at(rev))
        .await
        .unwrap()
        .kvs;
    let expected_history = store.history(b"k2").await.unwrap();
    store.close().await.unwrap();
    drop(store);

    let restored_dir = dir.path().join("restored");
    assert_eq!(SledStore::restore(&file, &restored_dir).unwrap(), rev);
    let mut cfg = Config::new(&restored_dir);
    cfg.retention.max_revisions = None;
    let restored = SledStore::open(cfg).unwrap();
    assert_eq!(restored.status().revision, rev);
    assert_eq!(restored.status().compacted, Revision(10));
    let now = restored
        .range(RangeRequest::new(KeyRange::prefix("")))
        .await
        .unwrap()
        .kvs;
    assert_eq!(now, expected);
    assert_eq!(restored.history(b"k2").await.unwrap(), expected_history);
    assert!(get(&restored, "after", None).await.unwrap().is_none());
    // The lease and its attachment came along: revoking it deletes the key.
    restored.lease_revoke(lease.id).await.unwrap();
    assert!(get(&restored, "leased", None).await.unwrap().is_none());
    assert_eq!(put(&restored, "new", "1").await, Revision(rev.0 + 2));

    // A damaged snapshot is refused and leaves nothing behind; so is a non-empty target.
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let bad = dir.path().join("bad.snap");
    std::fs::write(&bad, &bytes).unwrap();
    let target = dir.path().join("from-bad");
    assert!(matches!(
        SledStore::restore(&bad, &target),
        Err(Error::Corrupt { .. })
    ));
    assert!(!target.exists());
    std::fs::write(&bad, &bytes[..mid]).unwrap();
    assert!(matches!(
        SledStore::restore(&bad, &target),
        Err(Error::Corrupt { .. })
    ));
    assert!(SledStore::restore(&file, &restored_dir).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_falls_behind_onto_the_log_and_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir);
    config.watch_ring = 8;
    config.watch_buffer = 2;
    let store = Arc::new(SledStore::open(config).unwrap());
    let mut slow = store
        .watch(WatchRequest::new(KeyRange::prefix(""), Some(Revision(1))))
        .await
        .unwrap();
    // Writers are never held up by the watcher that is not reading.
    for i in 0..300 {
        put(&*store, &format!("k{}", i % 10), "v").await;
    }
    let got = collect_until(&mut slow, 300).await;
    assert_eq!(
        got.iter().map(|r| r.revision.0).collect::<Vec<_>>(),
        (1..=300).collect::<Vec<_>>()
    );
    // Fell behind past a compaction: told so, not silently dropped.
    let mut lagging = store
        .watch(WatchRequest::new(KeyRange::prefix(""), Some(Revision(250))))
        .await
        .unwrap();
    // Its first read from the log (250..=300) is done once it delivers 250.
    let mut revs = vec![lagging.next().await.unwrap().unwrap().revision.0];
    for _ in 0..100 {
        put(&*store, "k", "v").await;
    }
    store.compact(Revision(390)).await.unwrap();
    let err = loop {
        match tokio::time::timeout(Duration::from_secs(20), lagging.next())
            .await
            .unwrap()
        {
            Some(Ok(resp)) => revs.push(resp.revision.0),
            Some(Err(e)) => break e,
            None => panic!("ended without an error"),
        }
    };
    assert!(matches!(err, Error::Compacted { .. }), "{err}");
    assert!(revs.windows(2).all(|w| w[1] == w[0] + 1));
    assert!(
        lagging.next().await.is_none(),
        "the stream ends after the error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_the_data_dir_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..30 {
        let store = open(&dir);
        let mut w = store
            .watch(WatchRequest::new(KeyRange::prefix(""), Some(Revision(1))))
            .await
            .unwrap();
        assert_eq!(put(&store, "k", "v").await, Revision(i + 1));
        w.next().await.unwrap().unwrap();
        store.close().await.unwrap();
        drop(store);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fsync_writes_are_acknowledged_and_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(&dir);
    config.fsync = true;
    {
        let store = SledStore::open(config.clone()).unwrap();
        for i in 0..20 {
            assert_eq!(put(&store, &format!("k{i}"), "v").await, Revision(i + 1));
        }
        store.close().await.unwrap();
    }
    let store = SledStore::open(config).unwrap();
    assert_eq!(store.status().revision, Revision(20));
    assert_eq!(get(&store, "k19", None).await.unwrap().unwrap().value, b"v");
}

/// Concurrent writers make the writer commit many revisions per group, and one log record per
/// group; compacting to revisions inside a group must still leave exactly the log from there
/// on (log, watch, range, revision_at, status), also after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_inside_a_group_of_revisions_keeps_the_log_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&dir));
    let mut tasks = Vec::new();
    for w in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let key = format!("g/{}", (w + i) % 5);
                store
                    .put(key.into_bytes(), format!("{w}-{i}").into_bytes(), None)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (flushes, commits) = store.commit_stats();
    assert!(
        commits > flushes,
        "the writes were not grouped: {commits} commits, {flushes} flushes"
    );
    let current = store.status().revision.0;
    assert_eq!(current, 640);
    let full = store.log(Revision(1), None, usize::MAX).await.unwrap();
    assert_eq!(full.len(), 640);
    // The state at each revision, from the full log.
    let state_at = |rev: u64| {
        let mut state = std::collections::BTreeMap::new();
        for e in full.iter().take_while(|e| e.revision.0 <= rev) {
            for ev in &e.events {
                state.insert(ev.kv.key.clone(), (ev.kv.value.clone(), ev.kv.mod_revision));
            }
        }
        state
    };
    let check = |store: Arc<SledStore>, c: u64| {
        let full = full.clone();
        let expected = state_at(c);
        async move {
            let log = store.log(Revision(c), None, usize::MAX).await.unwrap();
            let revs: Vec<u64> = log.iter().map(|e| e.revision.0).collect();
            assert_eq!(revs, (c..=640).collect::<Vec<_>>(), "log from {c}");
            for e in &log {
                let want = &full[e.revision.0 as usize - 1];
                assert_eq!(e.time, want.time);
                assert_eq!(e.events[0].kv, want.events[0].kv);
            }
            let err = store.log(Revision(c - 1), None, 10).await.unwrap_err();
            assert!(matches!(err, Error::Compacted { .. }), "{err}");
            let mut watch = store
                .watch(WatchRequest::new(KeyRange::prefix("g/"), Some(Revision(c))))
                .await
                .unwrap();
            let got: Vec<u64> = collect_until(&mut watch, 640)
                .await
                .iter()
                .map(|r| r.revision.0)
                .collect();
            assert_eq!(got, (c..=640).collect::<Vec<_>>(), "watch from {c}");
            let at = store
                .range(RangeRequest::new(KeyRange::prefix("g/")).at(Revision(c)))
                .await
                .unwrap();
            let got: std::collections::BTreeMap<_, _> = at
                .kvs
                .into_iter()
                .map(|kv| (kv.key, (kv.value, kv.mod_revision)))
                .collect();
            assert_eq!(got, expected, "state at {c}");
            let t = full[c as usize - 1].time;
            let r = store.revision_at(t).await.unwrap();
            assert!(
                r.0 >= c && full[r.0 as usize - 1].time == t,
                "revision_at {r} for {c}"
            );
            assert_eq!(store.status().oldest_time, Some(t));
        }
    };
    for c in [2, 3, 101, 102, 250, 333, 639, 640] {
        store.compact(Revision(c)).await.unwrap();
        check(store.clone(), c).await;
    }
    store.close().await.unwrap();
    drop(store);
    let store = Arc::new(open(&dir));
    assert_eq!(store.status().revision, Revision(640));
    check(store.clone(), 640).await;
}

/// What sled's `conf` file says about compression.
fn conf_says_compressed(dir: &std::path::Path) -> bool {
    let conf = std::fs::read(dir.join("conf")).unwrap();
    String::from_utf8_lossy(&conf).contains("use_compression: true")
}

#[tokio::test]
async fn new_data_dirs_are_compressed_and_old_ones_keep_their_setting() {
    let value = "{\"data\":{\"config.yaml\":\"replicas: 3\\nimage: nginx\\n\"}}".repeat(40);
    // A new data dir is compressed by default; a data dir created uncompressed stays so when
    // opened with the default, and the reverse. Each reads back what it holds.
    for created_compressed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut created = config(&dir);
        created.compression = created_compressed;
        let store = SledStore::open(created.clone()).unwrap();
        let rev = put(&store, "k", &value).await;
        store.close().await.unwrap();
        drop(store);
        assert_eq!(conf_says_compressed(&created.path), created_compressed);
        let mut reopened = created.clone();
        reopened.compression = !created_compressed;
        let store = SledStore::open(reopened).unwrap();
        let kv = get(&store, "k", None).await.unwrap().unwrap();
        assert_eq!(kv.value, value.as_bytes());
        assert_eq!(kv.mod_revision, rev);
        put(&store, "k2", &value).await;
        store.close().await.unwrap();
        drop(store);
        assert_eq!(conf_says_compressed(&created.path), created_compressed);
    }
    assert!(Config::new("x").compression);
}

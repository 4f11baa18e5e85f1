//! Contract tests both backends pass: each takes a fresh store whose first write is revision
//! `base + 1` (0 for sled; etcd's current revision, as etcd revisions are global) and states
//! every revision relative to it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use skiff_store::*;

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

/// Collects watch responses until one at `until` (inclusive) arrives, progress included.
pub async fn collect_until(stream: &mut WatchStream, until: u64) -> Vec<WatchResponse> {
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

pub async fn revisions_versions_and_tombstones(store: &dyn Store, base: u64) {
    let r = |n: u64| Revision(base + n);
    assert_eq!(store.status().revision, r(0));
    assert_eq!(put(store, "a", "1").await, r(1));
    let (rev, prev) = store.put(b"a".to_vec(), b"2".to_vec(), None).await.unwrap();
    assert_eq!(rev, r(2));
    let prev = prev.expect("previous version");
    assert_eq!((prev.value.as_slice(), prev.version), (&b"1"[..], 1));
    let kv = get(store, "a", None).await.unwrap().unwrap();
    assert_eq!(kv.create_revision, r(1));
    assert_eq!(kv.mod_revision, r(2));
    assert_eq!(kv.version, 2);
    let (rev, deleted) = store.delete(KeyRange::key("a")).await.unwrap();
    assert_eq!(rev, r(3));
    assert_eq!(keys(&deleted), vec!["a"]);
    assert_eq!(get(store, "a", None).await.unwrap(), None);
    // Deleting nothing writes nothing.
    let (rev, deleted) = store.delete(KeyRange::key("a")).await.unwrap();
    assert_eq!((rev, deleted.len()), (r(3), 0));
    let (rev, deleted) = store.delete(KeyRange::prefix("nothing/")).await.unwrap();
    assert_eq!((rev, deleted.len()), (r(3), 0));
    // Re-created: a new create revision and version 1.
    assert_eq!(put(store, "a", "3").await, r(4));
    let kv = get(store, "a", None).await.unwrap().unwrap();
    assert_eq!((kv.create_revision, kv.version), (r(4), 1));
    // History keeps the tombstone.
    let history = store.history(b"a").await.unwrap();
    let kinds: Vec<(EventKind, u64)> = history
        .iter()
        .map(|(_, e)| (e.kind, e.kv.mod_revision.0 - base))
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
        get(store, "a", Some(base + 1))
            .await
            .unwrap()
            .unwrap()
            .value,
        b"1"
    );
    assert_eq!(get(store, "a", Some(base + 3)).await.unwrap(), None);
    assert!(matches!(
        get(store, "a", Some(base + 5)).await,
        Err(Error::FutureRevision { requested, current }) if requested == r(5) && current == r(4)
    ));
}

pub async fn ranges_with_limits_continuation_count_and_intervals(store: &dyn Store, _base: u64) {
    for i in 0..25 {
        put(store, &format!("/pods/{i:02}"), "v").await;
    }
    put(store, "/pods", "not in the prefix").await;
    put(store, "/podsx", "not in the prefix either").await;
    put(store, "/pods/\0zero", "a zero byte").await;
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
    // Everything: the store's keys and nothing else.
    let mut all = RangeRequest::new(KeyRange::prefix(""));
    all.count = true;
    assert_eq!(store.range(all).await.unwrap().count, Some(28));
}

pub async fn transactions_compare_and_branch(store: &dyn Store, base: u64) {
    let r1 = put(store, "a", "1").await;
    assert_eq!(r1, Revision(base + 1));
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
    assert_eq!(resp.revision, Revision(base + 2));
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
            assert_eq!(r.kvs[0].mod_revision, Revision(base + 2));
            assert_eq!(r.revision, Revision(base + 2));
        }
        other => panic!("unexpected {other:?}"),
    }
    for key in ["a", "b", "c"] {
        assert_eq!(
            get(store, key, None).await.unwrap().unwrap().mod_revision,
            Revision(base + 2)
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
    // Two deletes, only the second of which finds something: one revision.
    let resp = store
        .txn(Txn {
            compare: vec![],
            success: vec![Op::delete("none"), Op::delete("c")],
            failure: vec![],
            tag: None,
        })
        .await
        .unwrap();
    assert_eq!(resp.revision, Revision(base + 3));
    // Delete of a range inside a transaction, with previous values.
    let resp = store
        .txn(Txn {
            compare: vec![
                Compare::exists("a"),
                Compare {
                    key: b"b".to_vec(),
                    op: CompareOp::Greater,
                    target: CompareTarget::ModRevision(Revision(base + 1)),
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
    assert_eq!(resp.revision, Revision(base + 4));
    // Refused writes leave no trace.
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
    assert!(matches!(err, Error::LeaseNotFound(LeaseId(99))), "{err}");
    assert_eq!(store.status().revision, Revision(base + 4));
}

pub async fn watch_replays_history_then_goes_live(store: Arc<dyn Store>, base: u64) {
    for i in 1..=20 {
        put(&*store, &format!("w/{}", i % 3), &format!("{i}")).await;
        put(&*store, "other", "x").await;
    }
    let mut req = WatchRequest::new(KeyRange::prefix("w/"), Some(Revision(base + 5)));
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
    let revs: Vec<u64> = got.iter().map(|r| r.revision.0 - base).collect();
    // Puts to w/ are at odd revisions from 5 on, then the delete.
    let mut expected: Vec<u64> = (5..=119).step_by(2).collect();
    expected.push(last - base);
    assert_eq!(revs, expected);
    for resp in &got {
        assert_eq!(resp.events.len(), 1);
        let e = &resp.events[0];
        assert_eq!(e.kv.mod_revision, resp.revision);
        if resp.revision.0 - base > 6 && e.kind == EventKind::Put {
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

pub async fn progress_notifications_carry_the_current_revision(store: &dyn Store, base: u64) {
    put(store, "other", "1").await;
    let mut req = WatchRequest::new(KeyRange::prefix("quiet/"), None);
    req.progress_notify = Some(Duration::from_millis(50));
    let mut stream = store.watch(req).await.unwrap();
    put(store, "other", "2").await;
    let resp = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(resp.is_progress());
    assert!(resp.revision >= Revision(base + 1));
    // Eventually the progress revision reaches the current one.
    loop {
        let resp = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(resp.is_progress());
        if resp.revision == Revision(base + 2) {
            break;
        }
    }
}

pub async fn compaction_makes_old_revisions_unreadable(store: &dyn Store, base: u64) {
    let r = |n: u64| Revision(base + n);
    put(store, "a", "1").await; // 1
    put(store, "b", "1").await; // 2
    put(store, "a", "2").await; // 3
    store.delete(KeyRange::key("b")).await.unwrap(); // 4
    put(store, "c", "1").await; // 5
    put(store, "a", "3").await; // 6
    store.compact(r(5)).await.unwrap();
    assert_eq!(store.status().compacted, r(5));
    for rev in [1, 4] {
        let err = get(store, "a", Some(base + rev)).await.unwrap_err();
        assert!(
            matches!(err, Error::Compacted { requested, compacted, prefix: None } if requested == r(rev) && compacted == r(5)),
            "{err}"
        );
    }
    let at5 = store
        .range(RangeRequest::new(KeyRange::prefix("")).at(r(5)))
        .await
        .unwrap();
    let got: Vec<(String, u64)> = at5
        .kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into(),
                kv.mod_revision.0 - base,
            )
        })
        .collect();
    assert_eq!(got, vec![("a".into(), 3), ("c".into(), 5)]);
    // Older versions are gone: a's history starts at its state at 5, b's is empty.
    let revs: Vec<u64> = store
        .history(b"a")
        .await
        .unwrap()
        .iter()
        .map(|(_, e)| e.kv.mod_revision.0 - base)
        .collect();
    assert_eq!(revs, vec![3, 6]);
    assert!(store.history(b"b").await.unwrap().is_empty());
    let err = store
        .watch(WatchRequest::new(KeyRange::prefix(""), Some(r(4))))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, Error::Compacted { .. }));
    let err = store.log(r(2), None, 10).await.unwrap_err();
    assert!(matches!(err, Error::Compacted { .. }));
    let log = store.log(r(5), None, 10).await.unwrap();
    assert_eq!(
        log.iter().map(|e| e.revision.0 - base).collect::<Vec<_>>(),
        vec![5, 6]
    );
    let err = store.revision_at(SystemTime::UNIX_EPOCH).await.unwrap_err();
    assert!(
        matches!(err, Error::TimeBeforeHistory { oldest } if oldest == r(5)),
        "{err}"
    );
    assert!(matches!(
        store.compact(r(7)).await,
        Err(Error::FutureRevision { .. })
    ));
    store.compact(r(6)).await.unwrap();
    assert_eq!(store.status().compacted, r(6));
    assert_eq!(get(store, "a", None).await.unwrap().unwrap().value, b"3");
    assert_eq!(
        get(store, "c", Some(base + 6))
            .await
            .unwrap()
            .unwrap()
            .value,
        b"1"
    );
    assert!(matches!(
        get(store, "c", Some(base + 5)).await,
        Err(Error::Compacted { .. })
    ));
    assert_eq!(put(store, "d", "1").await, r(7));
}

pub async fn commit_times_map_back_to_revisions(store: &dyn Store, base: u64) {
    let before = SystemTime::now();
    for i in 0..30 {
        put(store, &format!("k{}", i % 7), &format!("v{i}")).await;
    }
    store.delete(KeyRange::key("k3")).await.unwrap();
    let log = store.log(Revision(base + 1), None, 1000).await.unwrap();
    let revs: Vec<u64> = log.iter().map(|e| e.revision.0 - base).collect();
    assert_eq!(revs, (1..=31).collect::<Vec<_>>());
    assert!(log.windows(2).all(|w| w[0].time <= w[1].time));
    assert!(log[0].time >= before);
    let ten = log[9].time;
    let newest_at_ten = log
        .iter()
        .filter(|e| e.time <= ten)
        .map(|e| e.revision)
        .max()
        .unwrap();
    assert_eq!(store.revision_at(ten).await.unwrap(), newest_at_ten);
    assert_eq!(
        store.revision_at(SystemTime::now()).await.unwrap(),
        Revision(base + 31)
    );
    assert_eq!(
        store
            .revision_at(before - Duration::from_secs(1))
            .await
            .unwrap(),
        Revision(base)
    );
    // A bounded log and its limit.
    let page = store
        .log(Revision(base + 3), Some(Revision(base + 8)), 4)
        .await
        .unwrap();
    assert_eq!(
        page.iter().map(|e| e.revision.0 - base).collect::<Vec<_>>(),
        vec![3, 4, 5, 6]
    );
    // History times are the log's.
    let history = store.history(b"k0").await.unwrap();
    for (c, e) in &history {
        let entry = log
            .iter()
            .find(|l| l.revision == e.kv.mod_revision)
            .unwrap();
        assert_eq!(c.time, entry.time);
    }
}

/// A write with `tag`.
async fn tagged(store: &dyn Store, ops: Vec<Op>, tag: &[u8]) -> Result<TxnResponse> {
    store
        .txn(Txn {
            success: ops,
            tag: Some(tag.to_vec()),
            ..Txn::default()
        })
        .await
}

pub async fn tags_are_kept_with_their_revisions(store: &dyn Store, base: u64) {
    let r = |n: u64| Revision(base + n);
    let tag_of = |t: &Option<Vec<u8>>| {
        t.as_deref()
            .map(|t| String::from_utf8_lossy(t).into_owned())
    };
    assert_eq!(
        tagged(store, vec![Op::put("t/a", "1")], b"alice")
            .await
            .unwrap()
            .revision,
        r(1)
    );
    assert_eq!(put(store, "t/a", "2").await, r(2));
    // A transaction of deletes only (on etcd its clock sits in nested txns).
    let deleted = tagged(store, vec![Op::delete("t/a")], b"bob")
        .await
        .unwrap();
    assert_eq!(deleted.revision, r(3));
    // A tagged transaction that writes nothing leaves no revision, so no tag anywhere.
    let nothing = tagged(store, vec![Op::delete("t/missing")], b"carol")
        .await
        .unwrap();
    assert_eq!(nothing.revision, r(3));
    assert_eq!(
        tagged(store, vec![Op::put("t/b", "1")], b"")
            .await
            .unwrap()
            .revision,
        r(4)
    );
    let lease = store.lease_grant(Duration::from_secs(60)).await.unwrap();
    let leased = Op::Put {
        key: b"t/b".to_vec(),
        value: b"2".to_vec(),
        lease: Some(lease.id),
        prev_kv: false,
    };
    let leased = tagged(store, vec![leased], &[0xff; MAX_TAG]).await.unwrap();
    // The revoke's delete is the store's own write: no tag (nor the previous write's).
    let revoked = store.lease_revoke(lease.id).await.unwrap();
    assert!(revoked > leased.revision);
    let log = store.log(r(1), None, 100).await.unwrap();
    let tags: Vec<_> = log.iter().map(|e| tag_of(&e.tag)).collect();
    let full = Some(String::from_utf8_lossy(&[0xff; MAX_TAG]).into_owned());
    assert_eq!(
        tags,
        vec![
            Some("alice".into()),
            None,
            Some("bob".into()),
            None,
            full.clone(),
            None
        ]
    );
    let history = |key: &'static str| async move {
        store
            .history(key.as_bytes())
            .await
            .unwrap()
            .iter()
            .map(|(c, _)| tag_of(&c.tag))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        history("t/a").await,
        vec![Some("alice".into()), None, Some("bob".into())]
    );
    assert_eq!(history("t/b").await, vec![None, full, None]);
    // Commit times come with the tags, as the log has them.
    let commits = store.history(b"t/a").await.unwrap();
    assert_eq!(commits[0].0.time, log[0].time);
    let too_long = tagged(store, vec![Op::put("t/c", "1")], &[1; MAX_TAG + 1]).await;
    assert!(
        matches!(too_long, Err(Error::ValueTooLarge { limit: MAX_TAG, .. })),
        "{too_long:?}"
    );
    assert_eq!(store.status().revision, revoked);
}

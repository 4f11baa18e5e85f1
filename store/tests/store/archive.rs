//! Export, import and copy of log windows: every read in the window answers as the source did.

use std::time::Duration;

use skiff_store::archive::{self, Item, Progress};
use skiff_store::*;

fn config(path: std::path::PathBuf) -> Config {
    let mut config = Config::new(path);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.fsync = false;
    config
}

/// A log with puts, overwrites, deletes and re-creates over a few keys; returns the last revision.
async fn fill(store: &dyn Store) -> Revision {
    let mut last = Revision::ZERO;
    for i in 0..60u32 {
        let key = format!("/k/{}", i % 7);
        last = if i % 11 == 10 {
            store.delete(KeyRange::key(key)).await.unwrap().0
        } else if i % 3 == 0 {
            // Tagged writes: an archive carries their tags.
            store
                .txn(Txn {
                    success: vec![Op::put(key, format!("v{i}"))],
                    tag: Some(format!("writer {}", i % 2).into_bytes()),
                    ..Txn::default()
                })
                .await
                .unwrap()
                .revision
        } else {
            store
                .put(key.into_bytes(), format!("v{i}").into_bytes(), None)
                .await
                .unwrap()
                .0
        };
        if i % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    last
}

async fn everything_at(store: &dyn Store, rev: Revision) -> Result<Vec<KeyValue>> {
    Ok(store
        .range(RangeRequest::new(KeyRange::from(Vec::new())).at(rev))
        .await?
        .kvs)
}

/// Every read at every revision of `first..=last`, the history and the log match.
async fn assert_same(a: &dyn Store, b: &dyn Store, first: u64, last: u64) {
    for rev in first..=last {
        assert_eq!(
            everything_at(a, Revision(rev)).await.unwrap(),
            everything_at(b, Revision(rev)).await.unwrap(),
            "range at {rev}"
        );
    }
    assert_eq!(
        a.log(Revision(first), Some(Revision(last)), usize::MAX)
            .await
            .unwrap(),
        b.log(Revision(first), Some(Revision(last)), usize::MAX)
            .await
            .unwrap()
    );
    for k in 0..7 {
        let key = format!("/k/{k}");
        // Versions up to `last`, from the key's state before `first` on (a copy of a window
        // keeps a key's version before it only if it was a put, as compaction does).
        let keep = |h: Vec<(Commit, Event)>| {
            let h: Vec<_> = h
                .into_iter()
                .filter(|(_, e)| e.kv.mod_revision.0 <= last)
                .collect();
            let start = h
                .iter()
                .rposition(|(_, e)| e.kv.mod_revision.0 < first)
                .map_or(0, |i| {
                    if h[i].1.kind == EventKind::Put {
                        i
                    } else {
                        i + 1
                    }
                });
            let mut h = h[start..].to_vec();
            if let Some((c, e)) = h.first_mut() {
                e.prev_kv = None;
                // A version from before the window is carried without its tag.
                if e.kv.mod_revision.0 < first {
                    c.tag = None;
                }
            }
            h
        };
        assert_eq!(
            keep(a.history(key.as_bytes()).await.unwrap()),
            keep(b.history(key.as_bytes()).await.unwrap()),
            "history of {key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_reads_the_same_at_every_revision() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(config(dir.path().join("src"))).unwrap();
    let last = fill(&source).await;
    source.compact(Revision(9)).await.unwrap();

    let mut file = Vec::new();
    let mut seen: Vec<Progress> = Vec::new();
    let summary = archive::export(&source, None, None, &mut file, &mut |p| seen.push(p))
        .await
        .unwrap();
    assert_eq!((summary.first, summary.last), (Revision(9), last));
    assert_eq!(summary.entries, last.0 - 8);
    assert_eq!(seen.last().unwrap().done, seen.last().unwrap().total);

    let target = dir.path().join("dst");
    let imported = archive::import(&mut file.as_slice(), &target, &mut |_| {}).unwrap();
    assert_eq!(imported, summary);
    let copy = SledStore::open(config(target)).unwrap();
    assert_eq!(copy.status().revision, last);
    assert_same(&source, &copy, 9, last.0).await;
    // Before the window: compacted in both, at the same revision.
    for store in [&source as &dyn Store, &copy] {
        match everything_at(store, Revision(8)).await {
            Err(Error::Compacted { compacted, .. }) => assert_eq!(compacted, Revision(9)),
            other => panic!("expected Compacted, got {other:?}"),
        }
    }
    // Commit times were kept, so times map to the same revisions.
    for entry in source.log(Revision(9), None, usize::MAX).await.unwrap() {
        assert_eq!(
            copy.revision_at(entry.time).await.unwrap(),
            source.revision_at(entry.time).await.unwrap()
        );
    }
    // The copy takes new writes after its last revision.
    let (rev, _) = copy
        .put(b"/k/new".to_vec(), b"x".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(rev, last.next());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_until_a_revision_keeps_history_up_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(config(dir.path().join("src"))).unwrap();
    fill(&source).await;
    let target = dir.path().join("dst");
    let summary = archive::copy(&source, None, Some(Revision(33)), &target, &mut |_| {})
        .await
        .unwrap();
    assert_eq!((summary.first, summary.last), (Revision(1), Revision(33)));
    let copy = SledStore::open(config(target)).unwrap();
    assert_eq!(copy.status().revision, Revision(33));
    assert_eq!(copy.status().compacted, Revision::ZERO);
    assert_same(&source, &copy, 1, 33).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_from_the_middle_carries_the_state_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(config(dir.path().join("src"))).unwrap();
    let last = fill(&source).await;
    let mut file = Vec::new();
    archive::export(
        &source,
        Some(Revision(25)),
        Some(Revision(40)),
        &mut file,
        &mut |_| {},
    )
    .await
    .unwrap();
    let target = dir.path().join("dst");
    archive::import(&mut file.as_slice(), &target, &mut |_| {}).unwrap();
    let copy = SledStore::open(config(target)).unwrap();
    assert_same(&source, &copy, 25, 40).await;
    assert!(last > Revision(40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_outside_the_history_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(config(dir.path().join("src"))).unwrap();
    let last = fill(&source).await;
    source.compact(Revision(20)).await.unwrap();
    let mut sink = Vec::new();
    match archive::export(&source, Some(Revision(5)), None, &mut sink, &mut |_| {}).await {
        Err(Error::Compacted {
            requested,
            compacted,
            ..
        }) => assert_eq!((requested, compacted), (Revision(5), Revision(20))),
        other => panic!("expected Compacted, got {other:?}"),
    }
    let target = dir.path().join("dst");
    match archive::copy(&source, None, Some(last.next()), &target, &mut |_| {}).await {
        Err(Error::FutureRevision { current, .. }) => assert_eq!(current, last),
        other => panic!("expected FutureRevision, got {other:?}"),
    }
    assert!(!target.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_archive_is_refused_and_leaves_no_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(config(dir.path().join("src"))).unwrap();
    fill(&source).await;
    let mut file = Vec::new();
    archive::export(&source, None, None, &mut file, &mut |_| {})
        .await
        .unwrap();
    let target = dir.path().join("dst");
    let mut flipped = file.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    assert!(matches!(
        archive::import(&mut flipped.as_slice(), &target, &mut |_| {}),
        Err(Error::Corrupt { .. })
    ));
    assert!(!target.exists());
    let truncated = &file[..file.len() - 10];
    assert!(matches!(
        archive::import(&mut &truncated[..], &target, &mut |_| {}),
        Err(Error::Corrupt { .. })
    ));
    assert!(!target.exists());
    assert!(matches!(
        archive::import(&mut &b"not an archive at all"[..], &target, &mut |_| {}),
        Err(Error::Corrupt { .. })
    ));
    // An import never writes over an existing data dir.
    let busy = dir.path().join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("x"), b"x").unwrap();
    assert!(archive::import(&mut file.as_slice(), &busy, &mut |_| {}).is_err());
    assert!(busy.join("x").exists());
}

/// Every read of the whole key space and of each key at every revision of `1..=last`, and the
/// log, answer alike in both stores, errors included; returns how many whole-space reads were
/// compacted for a prefix.
async fn assert_same_answers(a: &dyn Store, b: &dyn Store, last: u64, keys: &[String]) -> usize {
    let mut pruned = 0;
    for rev in 1..=last {
        let (x, y) = (
            everything_at(a, Revision(rev)).await,
            everything_at(b, Revision(rev)).await,
        );
        assert_eq!(format!("{x:?}"), format!("{y:?}"), "range at {rev}");
        if matches!(
            x,
            Err(Error::Compacted {
                prefix: Some(_),
                ..
            })
        ) {
            pruned += 1;
        }
        for key in keys {
            let x = a
                .range(RangeRequest::new(KeyRange::key(key.clone())).at(Revision(rev)))
                .await
                .map(|r| r.kvs);
            let y = b
                .range(RangeRequest::new(KeyRange::key(key.clone())).at(Revision(rev)))
                .await
                .map(|r| r.kvs);
            assert_eq!(format!("{x:?}"), format!("{y:?}"), "{key} at {rev}");
        }
    }
    let x = a.log(Revision(1), Some(Revision(last)), usize::MAX).await;
    let y = b.log(Revision(1), Some(Revision(last)), usize::MAX).await;
    assert_eq!(format!("{x:?}"), format!("{y:?}"), "log");
    pruned
}

fn retaining(path: std::path::PathBuf) -> Config {
    let mut config = config(path);
    config.prefix_retention = vec![PrefixRetention {
        prefix: b"/ev/".to_vec(),
        max_versions: 2,
    }];
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_pruned_by_prefix_retention_are_carried_as_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(retaining(dir.path().join("src"))).unwrap();
    let mut keys = Vec::new();
    let mut last = Revision::ZERO;
    for i in 0..40u32 {
        let key = format!("/ev/{}", i % 3);
        if i % 13 == 12 {
            source.delete(KeyRange::key(key.clone())).await.unwrap();
        } else {
            source
                .put(key.clone().into_bytes(), format!("e{i}").into_bytes(), None)
                .await
                .unwrap();
        }
        let other = format!("/k/{}", i % 4);
        last = source
            .put(
                other.clone().into_bytes(),
                format!("k{i}").into_bytes(),
                None,
            )
            .await
            .unwrap()
            .0;
        for k in [key, other] {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    // Retention pruned versions inside the default window: the source itself says so.
    assert!(matches!(
        everything_at(&source, Revision(1)).await,
        Err(Error::Compacted { prefix: Some(ref p), .. }) if p == b"/ev/"
    ));

    let mut file = Vec::new();
    let summary = archive::export(&source, None, None, &mut file, &mut |_| {})
        .await
        .unwrap();
    assert_eq!((summary.first, summary.last), (Revision(1), last));
    let imported = dir.path().join("imported");
    archive::import(&mut file.as_slice(), &imported, &mut |_| {}).unwrap();
    let copied = dir.path().join("copied");
    archive::copy(&source, None, None, &copied, &mut |_| {})
        .await
        .unwrap();
    for target in [imported, copied] {
        let copy = SledStore::open(retaining(target)).unwrap();
        assert_eq!(copy.status().revision, last);
        assert_eq!(copy.watermarks(), source.watermarks());
        let pruned = assert_same_answers(&source, &copy, last.0, &keys).await;
        assert!(pruned > 0, "no read was compacted for the prefix");
        // Keys outside the prefix keep all their history.
        for store in [&source as &dyn Store, &copy] {
            assert!(
                store
                    .range(RangeRequest::new(KeyRange::prefix("/k/")).at(Revision(2)))
                    .await
                    .is_ok()
            );
        }
        copy.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_come_along_and_keys_stay_attached() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(config(dir.path().join("src"))).unwrap();
    fill(&source).await;
    let lease = source.lease_grant(Duration::from_secs(600)).await.unwrap();
    source
        .put(b"/leased/a".to_vec(), b"a".to_vec(), Some(lease.id))
        .await
        .unwrap();
    source
        .put(b"/leased/b".to_vec(), b"b".to_vec(), Some(lease.id))
        .await
        .unwrap();
    // Re-put without the lease: detached, so it outlives the lease.
    source
        .put(b"/leased/b".to_vec(), b"b2".to_vec(), None)
        .await
        .unwrap();
    let last = source.status().revision;
    let mut file = Vec::new();
    archive::export(&source, None, None, &mut file, &mut |_| {})
        .await
        .unwrap();
    let imported = dir.path().join("imported");
    archive::import(&mut file.as_slice(), &imported, &mut |_| {}).unwrap();
    let copied = dir.path().join("copied");
    archive::copy(&source, None, None, &copied, &mut |_| {})
        .await
        .unwrap();
    for target in [imported, copied] {
        let copy = SledStore::open(config(target)).unwrap();
        assert_eq!(copy.leases(), vec![(lease.id, Duration::from_secs(600))]);
        copy.lease_keep_alive(lease.id).await.unwrap();
        // A new grant does not reuse the carried id.
        let fresh = copy.lease_grant(Duration::from_secs(5)).await.unwrap();
        assert_ne!(fresh.id, lease.id);
        let rev = copy.lease_revoke(lease.id).await.unwrap();
        assert!(rev > last);
        let left = copy
            .range(RangeRequest::new(KeyRange::prefix("/leased/")))
            .await
            .unwrap()
            .kvs;
        assert_eq!(
            left.iter().map(|kv| kv.key.clone()).collect::<Vec<_>>(),
            vec![b"/leased/b".to_vec()]
        );
        copy.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_a_lease_that_ended_after_the_window_end_when_the_copy_opens() {
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(config(dir.path().join("src"))).unwrap();
    let lease = source.lease_grant(Duration::from_secs(600)).await.unwrap();
    let (until, _) = source
        .put(b"/leased/a".to_vec(), b"a".to_vec(), Some(lease.id))
        .await
        .unwrap();
    source.lease_revoke(lease.id).await.unwrap();
    let target = dir.path().join("copied");
    archive::copy(&source, None, Some(until), &target, &mut |_| {})
        .await
        .unwrap();
    let copy = SledStore::open(config(target)).unwrap();
    let mut events = copy
        .watch(WatchRequest::new(
            KeyRange::prefix("/leased/"),
            Some(until.next()),
        ))
        .await
        .unwrap();
    use futures::StreamExt;
    // A guard against a hang, not a timing assertion.
    let response = tokio::time::timeout(Duration::from_secs(60), events.next())
        .await
        .expect("the key was not deleted")
        .unwrap()
        .unwrap();
    assert_eq!(response.revision, until.next());
    assert_eq!(response.events[0].kind, EventKind::Delete);
    // History up to the window's end is as it was.
    assert_eq!(
        everything_at(&copy, until).await.unwrap(),
        everything_at(&source, until).await.unwrap()
    );
}

#[tokio::test]
async fn an_archive_of_format_1_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = b"SKIFFLOG".to_vec();
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&1u64.to_le_bytes());
    file.extend_from_slice(&1u64.to_le_bytes());
    let target = dir.path().join("dst");
    match archive::import(&mut file.as_slice(), &target, &mut |_| {}) {
        Err(Error::Corrupt { reason, .. }) => {
            assert!(reason.contains("format 1"), "{reason}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(!target.exists());
}

/// An archive whose window has gaps (an etcd prefix's): its entries are numbered densely from
/// the window's first revision in a data dir, the revisions named inside them too; the gaps
/// record must come first and its entries in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_with_gaps_is_numbered_densely_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let kv = |key: &str, create: u64, m: u64, version: u64| KeyValue {
        key: key.as_bytes().to_vec(),
        value: format!("{key}@{m}").into_bytes(),
        create_revision: Revision(create),
        mod_revision: Revision(m),
        version,
        lease: None,
    };
    let at = |secs: u64| std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs);
    let entry = |r: u64, kvs: Vec<KeyValue>| {
        Item::Entry(
            LogEntry {
                revision: Revision(r),
                time: at(r),
                tag: None,
                events: kvs
                    .into_iter()
                    .map(|kv| Event {
                        kind: EventKind::Put,
                        kv,
                        prev_kv: None,
                    })
                    .collect(),
            },
            vec![],
        )
    };
    let items = vec![
        Item::Gaps,
        Item::Base(kv("/a", 2, 3, 2), at(3)),
        entry(7, vec![kv("/a", 2, 7, 3), kv("/b", 7, 7, 1)]),
        entry(12, vec![kv("/b", 7, 12, 2)]),
    ];
    let mut file = Vec::new();
    archive::write(&mut file, Revision(5), Revision(20), &items).unwrap();
    let target = dir.path().join("dense");
    let summary = archive::import(&mut file.as_slice(), &target, &mut |_| {}).unwrap();
    assert!(summary.gaps);
    assert_eq!(
        (summary.first, summary.last, summary.entries),
        (Revision(5), Revision(20), 2)
    );
    let copy = SledStore::open(config(target)).unwrap();
    assert_eq!(copy.status().revision, Revision(6));
    let now = everything_at(&copy, Revision(6)).await.unwrap();
    // The values as written at etcd's 7 and 12, their revisions renumbered to 5 and 6.
    let renumbered = |mut kv: KeyValue, value: &str| {
        kv.value = value.as_bytes().to_vec();
        kv
    };
    assert_eq!(
        now,
        vec![
            renumbered(kv("/a", 2, 5, 3), "/a@7"),
            renumbered(kv("/b", 5, 6, 2), "/b@12"),
        ]
    );
    assert_eq!(copy.revision_at(at(12)).await.unwrap(), Revision(6));
    assert_eq!(copy.revision_at(at(11)).await.unwrap(), Revision(5));
    copy.close().await.unwrap();

    // The gaps record after another, and entries out of order, are refused.
    for bad in [
        vec![items[1].clone(), Item::Gaps, items[2].clone()],
        vec![Item::Gaps, items[3].clone(), items[2].clone()],
    ] {
        let mut file = Vec::new();
        archive::write(&mut file, Revision(5), Revision(20), &bad).unwrap();
        let target = dir.path().join("bad");
        match archive::import(&mut file.as_slice(), &target, &mut |_| {}) {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert!(!target.exists());
    }
}

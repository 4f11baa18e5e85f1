//! Export, import and copy of log windows: every read in the window answers as the source did.

use std::time::Duration;

use skiff_store::archive::{self, Progress};
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
        let keep = |h: Vec<(std::time::SystemTime, Event)>| {
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
            if let Some((_, e)) = h.first_mut() {
                e.prev_kv = None;
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

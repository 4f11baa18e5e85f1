//! Many writers and many watchers at once, some watchers deliberately slow: every watcher sees
//! the identical sequence, which is the log, and the writers are never held up by the watchers.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use skiff_store::*;

const WRITERS: usize = 16;
const OPS: usize = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_sees_the_same_sequence_as_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path().join("data"));
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    // A small ring and small buffers, so that slow watchers fall behind onto the log on disk.
    config.watch_ring = 32;
    config.watch_buffer = 4;
    let store = Arc::new(SledStore::open(config).unwrap());
    let total_revisions = (WRITERS * OPS) as u64;

    // Watchers: (delay per response, start before writing, previous values).
    let specs = [
        (Duration::ZERO, true, false),
        (Duration::ZERO, true, true),
        (Duration::from_millis(2), true, true),
        (Duration::from_millis(2), true, false),
        (Duration::ZERO, false, true),
        (Duration::from_millis(1), false, false),
    ];
    // The last revision, announced once the writers are done.
    let (last_tx, last_rx) = tokio::sync::watch::channel(None::<u64>);
    let mut watchers = Vec::new();
    let mut late = Vec::new();
    for (delay, early, prev) in specs {
        if early {
            watchers.push(spawn_watcher(&store, delay, prev, last_rx.clone()).await);
        } else {
            late.push((delay, prev));
        }
    }
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..OPS {
                let key = format!("k/{}", (w * 7 + i) % 23);
                if i % 5 == 4 {
                    let ops = vec![
                        Op::put(format!("{key}/x"), vec![w as u8]),
                        Op::delete(key.clone()),
                    ];
                    store
                        .txn(Txn {
                            compare: vec![],
                            success: ops,
                            failure: vec![],
                            tag: None,
                        })
                        .await
                        .unwrap();
                } else {
                    store
                        .put(key.into_bytes(), vec![w as u8, i as u8], None)
                        .await
                        .unwrap();
                }
            }
        }));
    }
    // Late watchers start from revision 1 while the writers are busy.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for (delay, prev) in late {
        watchers.push(spawn_watcher(&store, delay, prev, last_rx.clone()).await);
    }
    for w in writers {
        w.await.unwrap();
    }
    let last = store.status().revision.0;
    last_tx.send_replace(Some(last));
    // A delete of a missing key writes nothing, so there may be fewer revisions than operations.
    assert!(last <= total_revisions && last > total_revisions / 2);
    let log = store.log(Revision(1), None, usize::MAX).await.unwrap();
    assert_eq!(log.len() as u64, last);
    let mut sequences = Vec::new();
    for w in watchers {
        sequences.push(w.await.unwrap());
    }
    for (i, (seq, prev)) in sequences.iter().enumerate() {
        let revs: Vec<u64> = seq.iter().map(|r| r.revision.0).collect();
        assert_eq!(
            revs,
            (1..=last).collect::<Vec<_>>(),
            "watcher {i}: gap, duplicate or disorder"
        );
        for (resp, entry) in seq.iter().zip(&log) {
            let got: Vec<(&EventKind, &KeyValue, Option<&KeyValue>)> = resp
                .events
                .iter()
                .map(|e| (&e.kind, &e.kv, e.prev_kv.as_ref()))
                .collect();
            let want: Vec<(&EventKind, &KeyValue, Option<&KeyValue>)> = entry
                .events
                .iter()
                .map(|e| {
                    (
                        &e.kind,
                        &e.kv,
                        if *prev { e.prev_kv.as_ref() } else { None },
                    )
                })
                .collect();
            assert_eq!(got, want, "watcher {i} at revision {}", resp.revision);
        }
    }
}

/// A watcher of everything from revision 1 that reads until the last revision (once announced),
/// sleeping `delay` after each response.
async fn spawn_watcher(
    store: &Arc<SledStore>,
    delay: Duration,
    prev: bool,
    mut last: tokio::sync::watch::Receiver<Option<u64>>,
) -> tokio::task::JoinHandle<(Vec<WatchResponse>, bool)> {
    let mut req = WatchRequest::new(KeyRange::prefix(""), Some(Revision(1)));
    req.prev_kv = prev;
    let mut stream = store.watch(req).await.unwrap();
    tokio::spawn(async move {
        let mut got: Vec<WatchResponse> = Vec::new();
        loop {
            let seen = got.last().map(|r| r.revision.0);
            if seen.is_some() && *last.borrow_and_update() == seen {
                return (got, prev);
            }
            tokio::select! {
                resp = tokio::time::timeout(Duration::from_secs(60), stream.next()) => {
                    let resp = resp.expect("watch stalled").expect("watch ended").expect("watch error");
                    got.push(resp);
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                }
                _ = last.changed() => {}
            }
        }
    })
}

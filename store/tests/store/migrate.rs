//! Migration both ways through archives, on a throwaway etcd: a data dir's archive loaded into
//! an empty etcd prefix, and an etcd prefix's archive imported into a new data dir, each checked
//! against its source: every key's value, the order of creates and changes, commit times (so
//! `revision_at` finds the same states), tags and leases. A prefix that holds a cluster is
//! refused and left untouched; an import that fails part way leaves the prefix empty.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use skiff_store::archive::{self, Summary};
use skiff_store::etcd::Mapping;
use skiff_store::*;

use crate::etcd::{EtcdServer, config, fresh_prefix};

/// A data dir with no global retention and a per-prefix one on `/ev/` (two versions kept), so
/// that its archives carry pruned versions.
fn sled_config(path: std::path::PathBuf) -> Config {
    let mut config = Config::new(path);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.fsync = false;
    config.prefix_retention = vec![PrefixRetention {
        prefix: b"/ev/".to_vec(),
        max_versions: 2,
    }];
    config
}

type State = BTreeMap<Vec<u8>, KeyValue>;

async fn read(store: &dyn Store, range: KeyRange, at: Option<Revision>) -> Result<State> {
    let mut request = RangeRequest::new(range);
    if let Some(r) = at {
        request = request.at(r);
    }
    Ok(store
        .range(request)
        .await?
        .kvs
        .into_iter()
        .map(|kv| (kv.key.clone(), kv))
        .collect())
}

/// Key → value at `at` (now if `None`), without `/ev/` keys when `ev` is false.
async fn values(store: &dyn Store, at: Option<Revision>, ev: bool) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut ranges = vec![KeyRange::interval("/", "/ev/"), KeyRange::from("/ev0")];
    if ev {
        ranges.push(KeyRange::prefix("/ev/"));
    }
    let mut out = BTreeMap::new();
    for range in ranges {
        for (k, kv) in read(store, range, at).await.expect("range") {
            out.insert(k, kv.value);
        }
    }
    out
}

async fn tagged(store: &dyn Store, ops: Vec<Op>, tag: &str) -> Revision {
    store
        .txn(Txn {
            success: ops,
            tag: Some(tag.as_bytes().to_vec()),
            ..Txn::default()
        })
        .await
        .expect("txn")
        .revision
}

/// Writes a history to `store`: before `compact`'s point, keys that stay as they are (the
/// base) and one txn of 300 keys (more than an etcd txn may hold); after it, puts, tagged puts,
/// deletes and re-creates, churn under `/ev/`, keys on a lease, and another 300-key txn.
/// Returns the lease and the first revision of the window.
async fn fill(store: &dyn Store, mut between: impl AsyncFnMut()) -> (LeaseId, Revision) {
    let lease = store
        .lease_grant(Duration::from_secs(600))
        .await
        .expect("lease")
        .id;
    for i in 0..5 {
        store
            .put(format!("/old/{i}").into(), format!("o{i}").into(), None)
            .await
            .unwrap();
        between().await;
    }
    let big: Vec<Op> = (0..300)
        .map(|i| Op::put(format!("/big/{i:03}"), format!("b{i}")))
        .collect();
    tagged(store, big, "bulk").await;
    store
        .put(b"/leased/a".to_vec(), b"a".to_vec(), Some(lease))
        .await
        .unwrap();
    let first = store
        .put(b"/k/0".to_vec(), b"start".to_vec(), None)
        .await
        .unwrap()
        .0;
    between().await;
    store.compact(first).await.expect("compact");
    for i in 0..60u32 {
        let key = format!("/k/{}", i % 7);
        if i % 11 == 10 {
            store.delete(KeyRange::key(key)).await.unwrap();
        } else if i % 3 == 0 {
            tagged(
                store,
                vec![Op::put(key, format!("v{i}"))],
                &format!("user {}", i % 2),
            )
            .await;
        } else {
            store
                .put(key.into_bytes(), format!("v{i}").into_bytes(), None)
                .await
                .unwrap();
        }
        store
            .put(
                format!("/ev/{}", i % 3).into_bytes(),
                format!("e{i}").into_bytes(),
                None,
            )
            .await
            .unwrap();
        if i % 10 == 0 {
            between().await;
        }
    }
    store
        .put(b"/leased/b".to_vec(), b"b".to_vec(), Some(lease))
        .await
        .unwrap();
    let big: Vec<Op> = (0..300)
        .step_by(2)
        .map(|i| Op::put(format!("/big/{i:03}"), format!("c{i}")))
        .chain([Op::put("/new/0", "n0")])
        .collect();
    tagged(store, big, "bulk again").await;
    store.delete(KeyRange::key("/big/001")).await.unwrap();
    store
        .put(b"/k/last".to_vec(), b"end".to_vec(), None)
        .await
        .unwrap();
    (lease, first)
}

/// Entries as (time, tag, changes): consecutive entries of one time are one (an entry that an
/// etcd import split over several txns), entries without changes are left out.
type Flat = Vec<(
    SystemTime,
    Option<Vec<u8>>,
    Vec<(EventKind, Vec<u8>, Vec<u8>)>,
)>;

fn flatten(entries: Vec<LogEntry>, skip: impl Fn(&LogEntry, usize) -> bool) -> Flat {
    let mut out: Flat = Vec::new();
    for entry in entries {
        let changes: Vec<_> = entry
            .events
            .iter()
            .enumerate()
            .filter(|(i, _)| !skip(&entry, *i))
            .map(|(_, e)| {
                let value = match e.kind {
                    EventKind::Put => e.kv.value.clone(),
                    EventKind::Delete => Vec::new(),
                };
                (e.kind, e.kv.key.clone(), value)
            })
            .collect();
        if changes.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((t, tag, c)) if *t == entry.time && *tag == entry.tag => c.extend(changes),
            _ => out.push((entry.time, entry.tag, changes)),
        }
    }
    out
}

/// Loads a data dir's archive into an empty etcd prefix (etcd keeps its default 128 ops per
/// txn): the final state, the state found at every commit time, the order of changes and
/// creates, the log with its times and tags, and the lease with its keys are the source's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_moves_onto_etcd_with_its_values_order_times_tags_and_leases() {
    let Some(server) = EtcdServer::start_with(&["--max-txn-ops=128"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = SledStore::open(sled_config(dir.path().join("src"))).unwrap();
    let (lease, first) = fill(&source, async || {
        tokio::time::sleep(Duration::from_millis(2)).await
    })
    .await;
    let last = source.status().revision;
    let file = dir.path().join("log.skiff");
    let summary = archive::export(
        &source,
        None,
        None,
        &mut std::fs::File::create(&file).unwrap(),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!((summary.first, summary.last), (first, last));

    let target = EtcdStore::connect(config(&server, fresh_prefix()))
        .await
        .unwrap();
    let (imported, mapping): (Summary, Mapping) = archive::import_etcd(&file, &target, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(imported, summary);
    assert_eq!(
        (mapping.source_first, mapping.source_last),
        (first, last),
        "{mapping:?}"
    );
    assert_eq!(mapping.entries, last.0 - first.0 + 1);
    // The 300 keys of one base revision and of one entry each took several txns of at most
    // 127 changes (etcd refuses more than 128 ops), and /ev/'s pruned versions were skipped.
    assert!(mapping.base_txns >= 3 + 4, "{mapping:?}");
    assert!(mapping.entry_txns > mapping.entries, "{mapping:?}");
    assert!(mapping.pruned > 0, "{mapping:?}");
    assert!(mapping.etcd_last.0 - mapping.etcd_first.0 + 1 >= mapping.entry_txns);

    // Every key's value.
    assert_eq!(
        values(&target, None, true).await,
        values(&source, None, true).await
    );

    // The order of changes and creates: a strictly increasing map of revisions.
    let now_src = read(&source, KeyRange::from("/"), None).await.unwrap();
    let now_dst = read(&target, KeyRange::from("/"), None).await.unwrap();
    let mut mods: Vec<(Revision, Revision)> = Vec::new();
    let mut creates: Vec<(Revision, Revision)> = Vec::new();
    for (key, s) in &now_src {
        let d = &now_dst[key];
        mods.push((s.mod_revision, d.mod_revision));
        if key.starts_with(b"/ev/") {
            // Its creating put may be a pruned version, which could not be written.
        } else if s.create_revision >= first {
            creates.push((s.create_revision, d.create_revision));
            assert_eq!(s.version, d.version, "{key:?}");
        } else {
            // A key of the base is created by its one put there, before every entry.
            assert!(d.create_revision < mapping.etcd_first, "{key:?}");
        }
        assert_eq!(
            s.lease.is_some(),
            d.lease.is_some(),
            "{key:?} on a lease in one store only"
        );
    }
    for pairs in [&mut mods, &mut creates] {
        pairs.sort();
        for w in pairs.windows(2) {
            assert!(w[0].1 <= w[1].1, "order not kept: {w:?}");
            if w[0].0 < w[1].0 && w[1].0 >= first {
                assert!(w[0].1 < w[1].1, "distinct revisions merged: {w:?}");
            }
        }
    }

    // Commit times: the base's keep theirs, and each entry's time finds on etcd the state the
    // source had at that entry (where the next entry's time is later: a tie is ambiguous in
    // both). /ev/ is compared only from its watermark, where the source can answer.
    for key in ["/old/0", "/old/4", "/big/299", "/leased/a"] {
        let time_of = async |store: &dyn Store, m: Revision| {
            store
                .history(key.as_bytes())
                .await
                .unwrap()
                .into_iter()
                .find(|(_, e)| e.kv.mod_revision == m)
                .map(|(c, _)| c.time)
        };
        let s = time_of(&source, now_src[key.as_bytes()].mod_revision).await;
        let d = time_of(&target, now_dst[key.as_bytes()].mod_revision).await;
        assert!(s.is_some() && s == d, "{key}: {s:?} and {d:?}");
    }
    let log = source
        .log_retained(first, Some(last), usize::MAX)
        .await
        .unwrap();
    let mark = source.watermarks()[0].1;
    for (i, (entry, _)) in log.iter().enumerate() {
        if log.get(i + 1).is_some_and(|(n, _)| n.time == entry.time) {
            continue;
        }
        let at = target.revision_at(entry.time).await.unwrap();
        assert!(at >= mapping.etcd_first && at <= mapping.etcd_last);
        let ev = entry.revision >= mark;
        assert_eq!(
            values(&target, Some(at), ev).await,
            values(&source, Some(entry.revision), ev).await,
            "state at {} (etcd {at})",
            entry.revision
        );
    }

    // The log: the same changes in the same order with the same times and tags, less the
    // versions retention pruned.
    let on_etcd = target
        .log(mapping.etcd_first, Some(mapping.etcd_last), usize::MAX)
        .await
        .unwrap();
    let pruned: Vec<(Revision, Vec<usize>)> =
        log.iter().map(|(e, p)| (e.revision, p.clone())).collect();
    let skip = |e: &LogEntry, i: usize| {
        pruned
            .iter()
            .any(|(r, p)| *r == e.revision && p.contains(&i))
    };
    let expected = flatten(log.iter().map(|(e, _)| e.clone()).collect(), skip);
    assert!(expected.iter().any(|(_, tag, _)| tag.is_some()));
    assert_eq!(flatten(on_etcd, |_, _| false), expected);

    // The lease: a new etcd lease of the same TTL, holding the same keys.
    let leases = target.live_leases().await.unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0].1, Duration::from_secs(600));
    let leased = read(&target, KeyRange::prefix("/leased/"), None)
        .await
        .unwrap();
    assert_eq!(leased.len(), 2);
    assert!(leased.values().all(|kv| kv.lease == Some(leases[0].0)));
    assert!(
        read(&source, KeyRange::prefix("/leased/"), None)
            .await
            .unwrap()
            .values()
            .all(|kv| kv.lease == Some(lease))
    );
    // The store serves on: a write after the import, at a later time.
    let (rev, _) = target
        .put(b"/k/after".to_vec(), b"x".to_vec(), None)
        .await
        .unwrap();
    assert!(rev > mapping.etcd_last);
    target.close().await.unwrap();
    source.close().await.unwrap();
}

/// Exports an etcd prefix whose revisions have gaps (another prefix writes in between) and a
/// compaction (a base), imports it into a new data dir: the revisions are numbered densely, and
/// every entry, state, time, tag and the lease are etcd's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_prefix_moves_into_a_data_dir_numbered_densely_with_times_tags_and_leases() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let source = EtcdStore::connect(config(&server, fresh_prefix()))
        .await
        .unwrap();
    let other = EtcdStore::connect(config(&server, fresh_prefix()))
        .await
        .unwrap();
    let mut n = 0;
    let (lease, _) = fill(&source, async || {
        n += 1;
        other
            .put(b"/x".to_vec(), format!("{n}").into_bytes(), None)
            .await
            .unwrap();
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut file = Vec::new();
    let summary = archive::export_etcd(&source, None, None, &mut file, &mut |_| {})
        .await
        .unwrap();
    assert!(summary.gaps);
    assert!(summary.entries < summary.last.0 - summary.first.0 + 1);
    let first = summary.first;
    let dense_last = Revision(first.0 + summary.entries - 1);

    let path = dir.path().join("copy");
    let imported = archive::import(&mut file.as_slice(), &path, &mut |_| {}).unwrap();
    assert_eq!(imported, summary);
    let copy = SledStore::open(sled_config(path)).unwrap();
    assert_eq!(copy.status().revision, dense_last);
    assert_eq!(copy.status().compacted, first);

    // Every entry of etcd's window is one entry of the copy, at first + k, with its time, tag
    // and changes; create and mod revisions in the window map the same way.
    let entries = source
        .log(first, Some(summary.last), usize::MAX)
        .await
        .unwrap();
    assert_eq!(entries.len() as u64, summary.entries);
    let revs: Vec<Revision> = entries.iter().map(|e| e.revision).collect();
    let dense = |r: Revision| -> Revision {
        if r < first {
            r
        } else {
            Revision(first.0 + revs.binary_search(&r).expect("an entry's revision") as u64)
        }
    };
    let copied = copy.log(first, None, usize::MAX).await.unwrap();
    assert_eq!(copied.len(), entries.len());
    for (k, (e, c)) in entries.iter().zip(&copied).enumerate() {
        assert_eq!(c.revision, Revision(first.0 + k as u64));
        assert_eq!((c.time, &c.tag), (e.time, &e.tag), "entry {}", e.revision);
        assert_eq!(c.events.len(), e.events.len());
        for (ce, ee) in c.events.iter().zip(&e.events) {
            assert_eq!((ce.kind, &ce.kv.key), (ee.kind, &ee.kv.key));
            if ee.kind == EventKind::Put {
                let mut expected = ee.kv.clone();
                expected.mod_revision = dense(expected.mod_revision);
                expected.create_revision = dense(expected.create_revision);
                assert_eq!(ce.kv, expected, "entry {}", e.revision);
            }
        }
    }
    assert!(copied.iter().any(|e| e.tag.is_some()));
    // Each etcd revision's state is the copy's at its dense number, found by time as well.
    for (i, e) in entries.iter().enumerate() {
        let d = dense(e.revision);
        assert_eq!(
            values(&copy, Some(d), true).await,
            values(&source, Some(e.revision), true).await,
            "state at etcd {} (copy {d})",
            e.revision
        );
        if entries.get(i + 1).is_none_or(|n| n.time > e.time) {
            assert_eq!(copy.revision_at(e.time).await.unwrap(), d);
        }
    }
    // Every key now, its revisions mapped (the base's keep theirs).
    let now_src = read(&source, KeyRange::from("/"), None).await.unwrap();
    let now_dst = read(&copy, KeyRange::from("/"), None).await.unwrap();
    assert_eq!(now_src.len(), now_dst.len());
    for (key, s) in &now_src {
        let mut expected = s.clone();
        expected.mod_revision = dense(s.mod_revision);
        expected.create_revision = dense(s.create_revision);
        assert_eq!(now_dst[key], expected);
    }
    assert!(now_src[&b"/old/0"[..]].mod_revision < first, "a base key");
    // The lease, with its id, TTL and keys; the copy serves on after it.
    assert_eq!(copy.leases(), vec![(lease, Duration::from_secs(600))]);
    assert!(
        read(&copy, KeyRange::prefix("/leased/"), None)
            .await
            .unwrap()
            .values()
            .all(|kv| kv.lease == Some(lease))
    );
    let (rev, _) = copy
        .put(b"/k/after".to_vec(), b"x".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(rev, dense_last.next());
    copy.close().await.unwrap();
    source.close().await.unwrap();
    other.close().await.unwrap();
}

/// A small data dir's archive in a file.
async fn small_archive(dir: &std::path::Path, big_value: Option<usize>) -> std::path::PathBuf {
    let source = SledStore::open(sled_config(dir.join("src"))).unwrap();
    let lease = source
        .lease_grant(Duration::from_secs(60))
        .await
        .unwrap()
        .id;
    for i in 0..30 {
        let lease = (i % 10 == 0).then_some(lease);
        source
            .put(format!("/k/{i}").into(), format!("v{i}").into(), lease)
            .await
            .unwrap();
    }
    if let Some(size) = big_value {
        source
            .put(b"/big".to_vec(), vec![b'x'; size], None)
            .await
            .unwrap();
        source
            .put(b"/k/after".to_vec(), b"a".to_vec(), None)
            .await
            .unwrap();
    }
    let file = dir.join("small.skiff");
    archive::export(
        &source,
        None,
        None,
        &mut std::fs::File::create(&file).unwrap(),
        &mut |_| {},
    )
    .await
    .unwrap();
    source.close().await.unwrap();
    file
}

/// Every key under `prefix` in etcd, the reserved ones included, read with etcd's own client.
async fn raw_keys(server: &EtcdServer, prefix: &[u8]) -> (Vec<Vec<u8>>, i64) {
    let mut client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let r = client
        .get(
            prefix.to_vec(),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    (
        r.kvs().iter().map(|kv| kv.key().to_vec()).collect(),
        r.header().unwrap().revision(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_into_a_prefix_that_holds_a_cluster_is_refused_and_writes_nothing() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = small_archive(dir.path(), None).await;
    let prefix = fresh_prefix();
    let running = EtcdStore::connect(config(&server, prefix.clone()))
        .await
        .unwrap();
    running
        .put(b"/registry/a".to_vec(), b"1".to_vec(), None)
        .await
        .unwrap();
    let before = raw_keys(&server, &prefix).await;
    let target = EtcdStore::connect(config(&server, prefix.clone()))
        .await
        .unwrap();
    let err = archive::import_etcd(&file, &target, &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PrefixNotEmpty { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("not empty") && message.contains("nothing was written"),
        "{message}"
    );
    // Not one write: the same keys at the same etcd revision.
    assert_eq!(raw_keys(&server, &prefix).await, before);

    // A prefix that was only claimed (a server connected and wrote nothing) takes the import.
    let claimed = fresh_prefix();
    let target = EtcdStore::connect(config(&server, claimed.clone()))
        .await
        .unwrap();
    let (summary, mapping) = archive::import_etcd(&file, &target, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(mapping.entries, summary.entries);
    assert_eq!(
        values(&target, None, true).await.len(),
        30,
        "every key of the archive"
    );
}

/// etcd's request limit is far below the client's here, so the archive passes the checks made
/// before writing and etcd refuses its big value part way: the keys already written, the clock,
/// the marker and the lease go again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_that_fails_part_way_leaves_the_prefix_empty() {
    let Some(server) = EtcdServer::start_with(&["--max-request-bytes=65536"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = small_archive(dir.path(), Some(200 * 1024)).await;
    let prefix = fresh_prefix();
    let target = EtcdStore::connect(config(&server, prefix.clone()))
        .await
        .unwrap();
    let (_, start) = raw_keys(&server, &prefix).await;
    let err = archive::import_etcd(&file, &target, &mut |_| {})
        .await
        .unwrap_err();
    let Error::ImportFailed {
        ref source,
        ref cleanup,
        ..
    } = err
    else {
        panic!("expected ImportFailed, got {err}");
    };
    assert!(cleanup.is_none(), "{err}");
    assert!(
        source.to_string().contains("request is too large"),
        "{source}"
    );
    assert!(
        err.to_string().contains("the prefix is empty again"),
        "{err}"
    );
    let (keys, now) = raw_keys(&server, &prefix).await;
    assert!(keys.is_empty(), "left behind: {keys:?}");
    // It had written the 30 keys before the big value (and removed them).
    assert!(now > start + 30, "{start} .. {now}");
    let mut client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let leases = client.leases().await.unwrap();
    assert!(leases.leases().is_empty(), "leases left: {leases:?}");

    // Another try into the same prefix, against a bigger limit, is not refused as non-empty:
    // only etcd's limit stops it again.
    let target = EtcdStore::connect(config(&server, prefix.clone()))
        .await
        .unwrap();
    let err = archive::import_etcd(&file, &target, &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ImportFailed { cleanup: None, .. }),
        "{err}"
    );
}

//! Crash recovery: a child process (this test binary, re-run with an environment variable that
//! selects the child-only test) writes with many concurrent writers and prints each revision once
//! its write is acknowledged; the parent SIGKILLs it at random moments, reopens the data dir and
//! checks that every acknowledged revision is there with its contents, that revisions are
//! contiguous, and that no transaction is partly there.
//!
//! To study a failure, set `SKIFF_STORE_CRASH_KEEP` to a directory: each round's data dir is
//! copied there (`round-<n>`) as the killed child left it, before the reopen changes it.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use skiff_store::*;

use crate::child;

const CHILD_ENV: &str = "SKIFF_STORE_CRASH_CHILD";
const ROUND_ENV: &str = "SKIFF_STORE_CRASH_ROUND";
const WRITERS: usize = 32;

fn config(path: &std::path::Path) -> Config {
    let mut config = Config::new(path);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config
}

/// The child: writes until killed. Puts write `p/<round>/<writer>/<i>`; every third operation is
/// a transaction writing the three keys `t/<round>/<writer>/<i>/{a,b,c}` with the same value.
#[test]
#[ignore = "the child process of sigkill_at_random_moments_loses_nothing_acknowledged, run by it"]
fn crash_child() {
    let (path, round) = child::args(
        CHILD_ENV,
        ROUND_ENV,
        "sigkill_at_random_moments_loses_nothing_acknowledged",
    );
    child::runtime().block_on(async move {
        let store = Arc::new(SledStore::open(config(std::path::Path::new(&path))).unwrap());
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0.. {
                    let value = format!("{round}-{w}-{i}").into_bytes();
                    if i % 3 == 0 {
                        let ops = ["a", "b", "c"]
                            .iter()
                            .map(|s| Op::put(format!("t/{round}/{w}/{i}/{s}"), value.clone()))
                            .collect();
                        let resp = store
                            .txn(Txn {
                                compare: vec![],
                                success: ops,
                                failure: vec![],
                                tag: None,
                            })
                            .await
                            .unwrap();
                        println!("ACK {} t/{round}/{w}/{i}/", resp.revision);
                    } else {
                        let key = format!("p/{round}/{w}/{i}");
                        let (rev, _) = store
                            .put(key.clone().into_bytes(), value, None)
                            .await
                            .unwrap();
                        println!("ACK {rev} {key}");
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let mut rng = rand::rng();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut verified_up_to = 0u64;
    let mut total_acked = 0usize;
    for round in 0..24u32 {
        let round_text = round.to_string();
        let child = child::spawn(
            "crash::crash_child",
            &[
                (CHILD_ENV, path.as_os_str()),
                (ROUND_ENV, OsStr::new(&round_text)),
            ],
            |acked: &mut Vec<(u64, String)>, line| {
                if let Some(rest) = line.strip_prefix("ACK ") {
                    let (rev, key) = rest.split_once(' ').unwrap();
                    acked.push((rev.parse::<u64>().unwrap(), key.to_string()));
                }
                !acked.is_empty()
            },
        );
        // Mostly kill while writes flow; every fourth round at any moment, start-up included.
        if round % 4 != 3 {
            assert!(
                child.wait_ready(Duration::from_secs(60)),
                "the child acknowledged nothing"
            );
            std::thread::sleep(Duration::from_millis(rng.random_range(0..250)));
        } else {
            std::thread::sleep(Duration::from_millis(rng.random_range(0..60)));
        }
        let acked = child.kill(); // SIGKILL
        total_acked += acked.len();
        if let Some(keep) = std::env::var_os("SKIFF_STORE_CRASH_KEEP") {
            // The data dir as the killed child left it, before the reopen changes it.
            let keep = std::path::Path::new(&keep).join(format!("round-{round}"));
            let _ = std::fs::remove_dir_all(&keep);
            copy_dir(&path, &keep);
        }
        verified_up_to = rt.block_on(verify(&path, round, &acked, verified_up_to));
    }
    assert!(
        total_acked > 1000,
        "too few writes were acknowledged to mean anything: {total_acked}"
    );
}

/// Reopens the data dir and checks it; returns the revision checked up to.
async fn verify(path: &std::path::Path, round: u32, acked: &[(u64, String)], from: u64) -> u64 {
    let store = match SledStore::open(config(path)) {
        Ok(store) => store,
        Err(e) => {
            let mut files: Vec<String> = std::fs::read_dir(path)
                .unwrap()
                .map(|f| {
                    let f = f.unwrap();
                    format!(
                        "{} ({} bytes)",
                        f.file_name().to_string_lossy(),
                        f.metadata().unwrap().len()
                    )
                })
                .collect();
            files.sort();
            panic!("round {round}: reopen after SIGKILL failed: {e}; the data dir holds {files:?}")
        }
    };
    let current = store.status().revision.0;
    assert!(
        current >= from,
        "round {round}: the revision went back from {from} to {current}"
    );
    if let Some(max) = acked.iter().map(|(r, _)| *r).max() {
        assert!(
            current >= max,
            "round {round}: acknowledged revision {max} lost (recovered up to {current})"
        );
    }
    // Every revision since the last check, contiguous, each transaction whole.
    let log = store
        .log(Revision(from + 1), None, usize::MAX)
        .await
        .unwrap();
    let revs: Vec<u64> = log.iter().map(|e| e.revision.0).collect();
    assert_eq!(
        revs,
        (from + 1..=current).collect::<Vec<_>>(),
        "round {round}: revisions not contiguous"
    );
    for entry in &log {
        let keys: Vec<String> = entry
            .events
            .iter()
            .map(|e| String::from_utf8_lossy(&e.kv.key).into_owned())
            .collect();
        if keys[0].starts_with("t/") {
            let stem = keys[0].trim_end_matches('a');
            assert_eq!(
                keys,
                vec![format!("{stem}a"), format!("{stem}b"), format!("{stem}c")],
                "partial transaction"
            );
            assert!(
                entry
                    .events
                    .iter()
                    .all(|e| e.kv.value == entry.events[0].kv.value)
            );
        } else {
            assert_eq!(keys.len(), 1);
        }
    }
    // Every acknowledged write is there, at its revision, with its value.
    for (rev, key) in acked {
        let entry = log
            .iter()
            .find(|e| e.revision.0 == *rev)
            .unwrap_or_else(|| {
                panic!("round {round}: acknowledged revision {rev} ({key}) missing")
            });
        let first = String::from_utf8_lossy(&entry.events[0].kv.key).into_owned();
        assert!(
            first.starts_with(key.as_str()),
            "round {round}: revision {rev} holds {first}, not {key}"
        );
        let parts: Vec<&str> = key.split('/').collect();
        let expected = format!("{}-{}-{}", parts[1], parts[2], parts[3]);
        assert_eq!(entry.events[0].kv.value, expected.as_bytes());
    }
    store.close().await.unwrap();
    current
}

/// The names of sled's snapshot files in `dir` (`snap.<lsn>`, and `snap.<lsn>.generating` while
/// one is being written).
fn snapshot_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("snap."))
        .collect();
    names.sort();
    names
}

/// Copies the directory `from` and everything under it to `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        if f.file_type().unwrap().is_dir() {
            copy_dir(&f.path(), &to.join(f.file_name()));
        } else {
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    }
}

/// sled writes a snapshot of its page table while it opens, as `snap.<lsn>.generating`, renamed
/// to `snap.<lsn>` once complete and synced. A process killed before the rename leaves the
/// `.generating` file, empty or torn if the write had not finished. Postmortem: sled 0.34.7 read
/// the lexically last `snap.*` file, that one included, and refused the data dir ("sled found
/// corruption at None") — the intermittent failure of the SIGKILL test above, when a kill under
/// load landed in a child's start-up (the files caught held 0 bytes or a 16/64 KiB prefix).
/// Built here on purpose: the data dir as it was before an open, plus none or half of the
/// snapshot that open wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_writing_a_snapshot_reopens_with_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let store = SledStore::open(config(&path)).unwrap();
    let mut acked = Vec::new();
    for i in 0..200u32 {
        let (rev, _) = store
            .put(
                format!("k/{i}").into_bytes(),
                i.to_string().into_bytes(),
                None,
            )
            .await
            .unwrap();
        acked.push((rev, i));
    }
    store.close().await.unwrap();
    drop(store);

    let before = dir.path().join("before");
    copy_dir(&path, &before);
    // This open snapshots the log the puts wrote, under a name the older snapshot does not have.
    let store = SledStore::open(config(&path)).unwrap();
    store.close().await.unwrap();
    drop(store);
    let old = snapshot_files(&before);
    let new: Vec<String> = snapshot_files(&path)
        .into_iter()
        .filter(|n| !old.contains(n))
        .collect();
    assert_eq!(new.len(), 1, "the reopen wrote no new snapshot: {old:?}");
    let complete = std::fs::read(path.join(&new[0])).unwrap();
    assert!(complete.len() > 12, "a snapshot ends in its length and crc");

    for torn in [0, complete.len() / 2] {
        let case = dir.path().join(format!("torn-{torn}"));
        copy_dir(&before, &case);
        std::fs::write(
            case.join(format!("{}.generating", new[0])),
            &complete[..torn],
        )
        .unwrap();
        let store = SledStore::open(config(&case))
            .unwrap_or_else(|e| panic!("reopen with {torn} bytes of a snapshot: {e}"));
        assert_eq!(store.status().revision, acked.last().unwrap().0);
        for (rev, i) in &acked {
            let entry = store.log(*rev, Some(*rev), 1).await.unwrap();
            assert_eq!(entry.len(), 1, "revision {rev:?} lost");
            assert_eq!(entry[0].events[0].kv.key, format!("k/{i}").into_bytes());
            assert_eq!(entry[0].events[0].kv.value, i.to_string().into_bytes());
        }
        store.close().await.unwrap();
        drop(store);
        // A complete snapshot of the same log replaced the torn file.
        assert_eq!(snapshot_files(&case), new, "with {torn} bytes");
    }
}

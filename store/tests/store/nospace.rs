//! A full disk: writes fail with a clear error, nothing acknowledged before is lost, reads go on,
//! and writes succeed again once there is room.
//!
//! The data dir lives on a small tmpfs mounted for the test, which needs root (CAP_SYS_ADMIN).
//! Where mounting is not allowed the test says so on stderr and checks nothing.

use std::path::Path;
use std::process::Command;

use futures::StreamExt;
use skiff_store::*;

/// A tmpfs mounted at a temp dir for as long as it lives.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then_some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn grow(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A store on a new tmpfs of `size` keeping `reserve` bytes free, or `None` (said on stderr)
/// where mounting is not allowed.
fn open_on_small_disk(size: &str, reserve: u64) -> Option<(SmallDisk, Config, SledStore)> {
    let Some(disk) = SmallDisk::mount(size) else {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root); the full-disk test checked nothing"
        );
        return None;
    };
    let mut config = Config::new(disk.path().join("data"));
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.disk_reserve = reserve;
    let store = SledStore::open(config.clone()).unwrap();
    Some((disk, config, store))
}

/// The 32 KiB value written under `key`: pseudo-random bytes seeded by the key, so that the
/// log's compression cannot shrink them (nor find one value repeated in the next).
fn value_of(key: &str) -> Vec<u8> {
    let mut x = key.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (0..32 << 10)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Puts 32 KiB values under `k0`, `k1`, ... until a put fails; returns what was acknowledged
/// (revision, key) and the error.
async fn fill(store: &SledStore) -> (Vec<(Revision, String)>, Error) {
    let mut acked = Vec::new();
    let err = fill_on(store, &mut acked).await;
    (acked, err)
}

/// Goes on putting where `acked` left off (the next key is `k{acked.len()}`) until a put fails,
/// and returns its error.
async fn fill_on(store: &SledStore, acked: &mut Vec<(Revision, String)>) -> Error {
    loop {
        let key = format!("k{}", acked.len());
        match store
            .put(key.clone().into_bytes(), value_of(&key), None)
            .await
        {
            Ok((rev, _)) => acked.push((rev, key)),
            Err(e) => return e,
        }
        assert!(acked.len() < 10_000, "the disk never filled up");
    }
}

/// Every acknowledged key reads back whole.
async fn check_acked(store: &SledStore, acked: &[(Revision, String)]) {
    for (rev, key) in acked {
        let got = store
            .range(RangeRequest::new(KeyRange::key(key.as_str())))
            .await
            .unwrap_or_else(|e| panic!("reading {key}: {e}"));
        assert_eq!(got.kvs.len(), 1, "{key} lost");
        assert_eq!(got.kvs[0].mod_revision, *rev);
        assert_eq!(got.kvs[0].value, value_of(key));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_refuses_puts_before_sled_meets_a_full_disk_and_lets_them_through_when_room_returns()
 {
    let Some((disk, config, store)) = open_on_small_disk("12m", 3 << 20) else {
        return;
    };
    let value = value_of("more");
    let (mut acked, err) = fill(&store).await;
    let Error::NoSpace(io) = &err else {
        panic!("a full disk gave {err:?}");
    };
    assert!(
        io.to_string().contains("keeps 3145728 bytes free"),
        "not the guard: {io}"
    );
    assert!(acked.len() > 20, "only {} puts fitted", acked.len());
    // The refused put wrote nothing.
    let before = store.status().revision;
    assert_eq!(before, acked.last().unwrap().0);
    // Refusals go on while the disk stays full. sled cleans segments in the background, which can
    // free room for a few more puts between two checks: those are acknowledged like any other.
    let err = fill_on(&store, &mut acked).await;
    assert!(matches!(err, Error::NoSpace(_)), "{err:?}");
    let before = store.status().revision;
    assert_eq!(before, acked.last().unwrap().0);
    // Reads are served as before.
    check_acked(&store, &acked).await;
    // A delete (how an operator frees space) still passes.
    let (rev, gone) = store.delete(KeyRange::key("k0")).await.unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!(rev, before.next());
    // Room again: the same store writes, no reopen.
    disk.grow("64m");
    let (rev, _) = store
        .put(b"after".to_vec(), value.clone(), None)
        .await
        .unwrap();
    assert_eq!(rev, before.next().next());
    store.close().await.unwrap();
    drop(store);
    let store = SledStore::open(config).unwrap();
    check_acked(&store, &acked[1..]).await;
    assert_eq!(store.status().revision, rev);
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_guard_sled_meets_the_full_disk_and_the_store_reopens_itself_in_place() {
    let Some((disk, config, store)) = open_on_small_disk("6m", 0) else {
        return;
    };
    // A watch from the start, across the reopenings.
    let mut watch = store
        .watch(WatchRequest::new(
            KeyRange::from(Vec::new()),
            Some(Revision(1)),
        ))
        .await
        .unwrap();
    let (acked, err) = fill(&store).await;
    // The batch sled failed to apply was not applied; a failed flush leaves the outcome open.
    assert!(
        matches!(&err, Error::NoSpace(_))
            || err.to_string().contains("may or may not have been applied"),
        "a full disk gave {err:?}"
    );
    assert!(!acked.is_empty());
    // Room again: the same store handle writes once it has reopened the data dir.
    disk.grow("64m");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let rev = loop {
        match store.put(b"after".to_vec(), b"x".to_vec(), None).await {
            Ok((rev, _)) => break rev,
            Err(e) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "writes still fail after the disk grew: {e}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    assert!(rev > acked.last().unwrap().0);
    assert!(store.reopened() >= 1, "the store was never reopened");
    assert!(store.ready().is_ok());
    check_acked(&store, &acked).await;
    // The watch saw every revision once, in order, through the reopening.
    let mut seen = Vec::new();
    while seen.last().copied() != Some(rev) {
        let response = tokio::time::timeout(std::time::Duration::from_secs(10), watch.next())
            .await
            .expect("the watch stalled")
            .expect("the watch ended")
            .expect("the watch failed");
        if !response.is_progress() {
            seen.push(response.revision);
        }
    }
    let expected: Vec<Revision> = (1..=rev.0).map(Revision).collect();
    assert_eq!(seen, expected);
    store.close().await.unwrap();
    drop(store);
    let store = SledStore::open(config).unwrap();
    check_acked(&store, &acked).await;
    assert_eq!(store.status().revision, rev);
    store.close().await.unwrap();
}

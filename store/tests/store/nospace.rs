//! A full disk: writes fail with a clear error, and nothing acknowledged before is lost.
//!
//! The data dir lives on a small tmpfs mounted for the test, which needs root (CAP_SYS_ADMIN).
//! Where mounting is not allowed the test says so on stderr and checks nothing.

use std::path::Path;
use std::process::Command;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_writes_clearly_and_keeps_what_was_acknowledged() {
    let Some(disk) = SmallDisk::mount("6m") else {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root); the full-disk test checked nothing"
        );
        return;
    };
    let path = disk.path().join("data");
    let mut config = Config::new(&path);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    let store = SledStore::open(config.clone()).unwrap();
    let value = vec![0x5a; 32 << 10];
    let mut acked = Vec::new();
    let err = loop {
        let key = format!("k{}", acked.len());
        match store
            .put(key.clone().into_bytes(), value.clone(), None)
            .await
        {
            Ok((rev, _)) => acked.push((rev, key)),
            Err(e) => break e,
        }
        assert!(acked.len() < 10_000, "6 MiB never filled up");
    };
    assert!(matches!(err, Error::NoSpace(_)), "a full disk gave {err:?}");
    assert!(err.to_string().contains("no space"), "{err}");
    assert!(!acked.is_empty());
    // Later writes keep failing rather than pretending.
    assert!(
        store
            .put(b"more".to_vec(), b"x".to_vec(), None)
            .await
            .is_err()
    );
    drop(store);
    // With room again, everything acknowledged is there.
    disk.grow("64m");
    let store = SledStore::open(config).unwrap();
    assert!(store.status().revision >= acked.last().unwrap().0);
    for (rev, key) in &acked {
        let got = store
            .range(RangeRequest::new(KeyRange::key(key.as_str())))
            .await
            .unwrap();
        assert_eq!(got.kvs.len(), 1, "{key} lost");
        assert_eq!(got.kvs[0].mod_revision, *rev);
        assert_eq!(got.kvs[0].value, value);
    }
    let (rev, _) = store
        .put(b"after".to_vec(), b"x".to_vec(), None)
        .await
        .unwrap();
    assert!(rev > acked.last().unwrap().0);
    store.close().await.unwrap();
}

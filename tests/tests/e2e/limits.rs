//! A full disk at the API: the data dir of `skiff apiserver` on a small tmpfs the test mounts.
//! Creates fail with a 507 Status that says the write was not applied (with `Retry-After`) once
//! less than `--disk-reserve` would stay free, every acknowledged object stays readable, a delete
//! still passes, and once the tmpfs is grown writes succeed again without a restart. Mounting
//! needs root; without it the test says so and checks nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skiff_tests::TestCluster;

/// A tmpfs mounted on a directory; lazily unmounted on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> Option<SmallDisk> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(dir.to_path_buf()))
    }

    fn grow(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_507_keeps_what_was_acknowledged_and_recovers_without_a_restart() {
    let mut disk = None;
    let mut cluster = TestCluster::start_prepared("apiserver", &["--disk-reserve=4Mi"], |data| {
        disk = SmallDisk::mount(data, "24m");
    });
    let Some(disk) = disk else {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root); the API full-disk test checked nothing"
        );
        return;
    };
    // Every request bounded, so that a store that stops answering fails the test, not hangs it.
    let http = {
        skiff_tests::install_crypto();
        let ca = reqwest::Certificate::from_pem(&cluster.ca_pem).unwrap();
        reqwest::Client::builder()
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap()
    };
    let base = format!("{}/api/v1/namespaces/default/configmaps", cluster.server);
    // Letters from a pseudo-random sequence: the log compresses what it stores, and a run of one
    // letter would never fill the disk.
    let value: String = {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..256 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect()
    };
    let mut acked = Vec::new();
    let started = Instant::now();
    let (code, retry_after, status) = loop {
        let name = format!("fill-{}", acked.len());
        // Each object different, so that no two compress against each other.
        let value = format!("{}{value}", acked.len());
        let r = http
            .post(&base)
            .bearer_auth(&cluster.token)
            .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}))
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        let retry_after = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let body: Value = r.json().await.unwrap();
        if code != 201 {
            break (code, retry_after, body);
        }
        acked.push(name);
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "24 MiB never filled up"
        );
    };
    eprintln!(
        "{} creates acknowledged before the disk was full",
        acked.len()
    );
    assert_eq!(code, 507, "{status}\n{}", cluster.log_text());
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 507);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("the write was not applied"), "{message}");
    assert!(message.contains("keeps 4194304 bytes free"), "{message}");
    assert!(!acked.is_empty());
    // Every acknowledged object is still there, whole; reads are served while the disk is full.
    for name in &acked {
        let r = http
            .get(format!("{base}/{name}"))
            .bearer_auth(&cluster.token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name} lost");
        let object: Value = r.json().await.unwrap();
        assert_eq!(
            object["data"]["v"].as_str().map(str::len),
            Some(value.len() + name.len() - "fill-".len()),
            "{name}"
        );
    }
    // A delete, how an operator frees space, still passes.
    let r = http
        .delete(format!("{base}/{}", acked[0]))
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let list: Value = http
        .get(&base)
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), acked.len() - 1);
    // Room again: writes succeed without a restart.
    disk.grow("128m");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = (0, Value::Null);
    let recovered = loop {
        let r = http
            .post(&base)
            .bearer_auth(&cluster.token)
            .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after"}, "data": {"v": "y"}}))
            .send()
            .await;
        let Ok(r) = r else {
            last = (0, Value::String(format!("{r:?}")));
            if Instant::now() > deadline {
                break false;
            }
            continue;
        };
        let code = r.status().as_u16();
        if code == 201 || code == 409 {
            break true;
        }
        last = (code, r.json().await.unwrap_or(Value::Null));
        if Instant::now() > deadline {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        recovered,
        "writes still fail after the disk grew: {last:?}\n{}",
        cluster.log_text()
    );
    let r = http
        .get(format!("{base}/after"))
        .bearer_auth(&cluster.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    cluster.stop();
    drop(disk);
}

//! Secrets encrypted at rest (`--encryption-provider-config`): a Secret round-trips through
//! kubectl while the log holds only ciphertext (read value by value from the stopped server's
//! data dir, and as raw bytes of an uncompressed one), the key rotates across restarts, and the
//! history endpoints hide Secret data from a user who may not read Secrets.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use skiff_store::{Revision, SledStore, Store};
use skiff_tests::{TestCluster, eventually};

const PLAIN: &str = "e2e-at-rest-hunter2";
const CONTROL: &str = "e2e-not-secret-control";

fn config(providers: &[(&str, &str, u8)]) -> String {
    let mut text = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n\
                    resources:\n- resources: [secrets]\n  providers:\n"
        .to_string();
    for (provider, name, fill) in providers {
        let secret = base64::engine::general_purpose::STANDARD.encode([*fill; 32]);
        text.push_str(&format!(
            "  - {provider}:\n      keys:\n      - name: {name}\n        secret: {secret}\n"
        ));
    }
    text
}

/// Every value of every retained revision of the stopped server's log, as stored.
fn stored_values(data: &Path) -> Vec<(String, Vec<u8>)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut config = skiff_store::Config::new(data.join("db"));
        config.retention.max_revisions = None;
        config.retention.max_age = None;
        config.prefix_retention.clear();
        let store = SledStore::open(config).unwrap();
        let mut out = Vec::new();
        let from = store.status().compacted.max(Revision(1));
        for (entry, _) in store.log_retained(from, None, usize::MAX).await.unwrap() {
            for event in entry.events {
                out.push((
                    String::from_utf8_lossy(&event.kv.key).into_owned(),
                    event.kv.value,
                ));
            }
        }
        let now = store.status().revision;
        for kv in store.retained_at(now).await.unwrap() {
            out.push((String::from_utf8_lossy(&kv.key).into_owned(), kv.value));
        }
        store.close().await.unwrap();
        out
    })
}

/// The log's text without its ANSI colour codes.
fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn files_contain(dir: &Path, needle: &str) -> bool {
    std::fs::read_dir(dir).unwrap().any(|entry| {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_contain(&path, needle)
        } else {
            std::fs::read(&path).is_ok_and(|bytes| contains(&bytes, needle))
        }
    })
}

#[test]
fn secrets_are_encrypted_at_rest_rotated_and_hidden_from_viewers() {
    let keys = tempfile::tempdir().unwrap();
    let file = keys.path().join("encryption.yaml");
    std::fs::write(&file, config(&[("aesgcm", "key1", 1)])).unwrap();
    let flag = format!("--encryption-provider-config={}", file.display());
    // An uncompressed log, so that plain text would show in its files' bytes.
    let mut cluster = TestCluster::start_prepared("apiserver", &[&flag], |data| {
        let mut config = skiff_store::Config::new(data.join("db"));
        config.compression = false;
        let store = SledStore::open(config).unwrap();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(store.close())
            .unwrap();
    });
    let k = cluster.kubectl();
    k.ok(&[
        "create",
        "secret",
        "generic",
        "db",
        &format!("--from-literal=password={PLAIN}"),
    ]);
    k.ok(&[
        "create",
        "configmap",
        "c",
        &format!("--from-literal=k={CONTROL}"),
    ]);
    let encoded = base64::engine::general_purpose::STANDARD.encode(PLAIN);
    let read = || k.ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]);
    assert_eq!(read(), encoded);

    // The history as a `view` user allowed the debug paths: the Secret is there, its data not.
    k.ok(&[
        "create",
        "clusterrolebinding",
        "bob-view",
        "--clusterrole=view",
        "--user=bob",
    ]);
    k.ok(&[
        "create",
        "clusterrole",
        "history-reader",
        "--verb=get",
        "--non-resource-url=/debug/skiff/*",
    ]);
    k.ok(&[
        "create",
        "clusterrolebinding",
        "bob-history",
        "--clusterrole=history-reader",
        "--user=bob",
    ]);
    let history = "/debug/skiff/history?resource=secrets&namespace=default&name=db";
    let mut as_bob = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            let run = k.run(&["get", "--raw", history, "--as", "bob"]);
            as_bob = run.stdout;
            as_bob.contains("REDACTED")
        }),
        "{as_bob}"
    );
    assert!(!as_bob.contains(&encoded), "{as_bob}");
    assert!(as_bob.contains("\"name\":\"db\""), "{as_bob}");
    let as_admin = k.ok(&["get", "--raw", history]);
    assert!(
        as_admin.contains(&encoded) && !as_admin.contains("REDACTED"),
        "{as_admin}"
    );

    // The log holds ciphertext only; the checks do see plain values (the ConfigMap).
    cluster.stop();
    let data = cluster.data_dir();
    let values = stored_values(&data);
    let secrets: Vec<_> = values
        .iter()
        .filter(|(key, v)| key.starts_with("/registry/core/secrets/") && !v.is_empty())
        .collect();
    assert!(!secrets.is_empty());
    for (key, value) in &secrets {
        assert!(value.starts_with(b"k8s:enc:aesgcm:v1:key1:"), "{key}");
    }
    assert!(
        !values
            .iter()
            .any(|(_, v)| contains(v, &encoded) || contains(v, PLAIN))
    );
    assert!(values.iter().any(|(_, v)| contains(v, CONTROL)));
    assert!(files_contain(&data, CONTROL), "the log is not compressed");
    assert!(!files_contain(&data, &encoded) && !files_contain(&data, PLAIN));

    // Rotation: the new key first, the old one kept to read; skiff rewrites at start.
    std::fs::write(
        &file,
        config(&[("secretbox", "key2", 2), ("aesgcm", "key1", 1)]),
    )
    .unwrap();
    cluster.restart();
    assert_eq!(read(), encoded);
    let log = without_colours(&cluster.log_text());
    assert!(log.contains("rewritten=1"), "{log}");
    cluster.stop();
    for (key, value) in stored_values(&data) {
        if key.starts_with("/registry/core/secrets/") && !value.is_empty() {
            assert!(value.starts_with(b"k8s:enc:secretbox:v1:key2:"), "{key}");
        }
    }
    // The old key removed: everything still reads.
    std::fs::write(&file, config(&[("secretbox", "key2", 2)])).unwrap();
    cluster.restart();
    assert_eq!(read(), encoded);

    // The stopped server's data dir reads with the same config (and only with it).
    cluster.stop();
    let data_flag = format!("--data-dir={}", data.display());
    let (ok, stdout, stderr) =
        skiff_tests::skiff(&["get", "secret", "db", &data_flag, &flag, "-o", "json"]);
    assert!(ok && stdout.contains(&encoded), "{stdout}{stderr}");
    let (_, stdout, _) = skiff_tests::skiff(&["get", "secret", "db", &data_flag, "-o", "json"]);
    assert!(!stdout.contains(&encoded), "{stdout}");

    // A malformed config refuses to start, saying why.
    std::fs::write(
        &file,
        config(&[("aesgcm", "key1", 1)]).replace("aesgcm", "rot13"),
    )
    .unwrap();
    let (ok, _, stderr) = skiff_tests::skiff(&["apiserver", &data_flag, "--port=0", &flag]);
    assert!(
        !ok && stderr.contains("unknown provider \"rot13\""),
        "{stderr}"
    );
}

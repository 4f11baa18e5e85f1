use std::sync::Arc;

use base64::Engine;
use skiff_store::{Config, KeyRange, RangeRequest, Revision, SledStore, Store};

use super::*;

const SECRETS: &[u8] = b"/registry/core/secrets/default/db";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn config(providers: &str) -> Encryption {
    Encryption::parse(&format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n\
         - resources: [secrets]\n  providers:\n{providers}"
    ))
    .unwrap()
}

fn keyed(provider: &str, name: &str, len: usize, fill: u8) -> String {
    format!(
        "  - {provider}:\n      keys:\n      - name: {name}\n        secret: {}\n",
        b64(&vec![fill; len])
    )
}

#[test]
fn each_provider_round_trips_in_kube_apiserver_format() {
    for (kind, len, overhead) in [
        (Kind::AesGcm, 16, 12 + 16),
        (Kind::AesGcm, 24, 12 + 16),
        (Kind::AesGcm, 32, 12 + 16),
        (Kind::AesCbc, 16, 16 + 16),
        (Kind::AesCbc, 32, 16 + 16),
        (Kind::SecretBox, 32, 24 + 16),
    ] {
        let key = Key::new(kind, "k1", vec![7; len]).unwrap();
        let plain = br#"{"data":{"password":"aHVudGVyMg=="}}"#;
        let sealed = key.seal(SECRETS, plain).unwrap();
        let prefix = format!("k8s:enc:{}:v1:k1:", kind.name());
        assert!(sealed.starts_with(prefix.as_bytes()), "{kind:?}");
        let body = sealed.len() - prefix.len();
        match kind {
            // Padded to the next block (a whole block when already aligned).
            Kind::AesCbc => assert_eq!(body, 16 + (plain.len() / 16 + 1) * 16),
            _ => assert_eq!(body, plain.len() + overhead, "{kind:?}"),
        }
        assert!(!sealed.windows(8).any(|w| w == b"password"), "{kind:?}");
        assert_eq!(key.open(SECRETS, &sealed).unwrap(), plain, "{kind:?}");
        // Fresh randomness every time.
        assert_ne!(key.seal(SECRETS, plain).unwrap(), sealed, "{kind:?}");
        // Another key of the same name does not read it.
        let other = Key::new(kind, "k1", vec![8; len]).unwrap();
        assert!(other.open(SECRETS, &sealed).is_err(), "{kind:?}");
        // Tampering is caught by the authenticated ciphers; CBC has no tag, so a flipped last
        // byte shows as bad padding or, if it happens to pad, as other bytes: never the original.
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        match key.open(SECRETS, &tampered) {
            Err(_) => {}
            Ok(got) => {
                assert_eq!(kind, Kind::AesCbc);
                assert_ne!(got, plain);
            }
        }
        let mut tampered = sealed.clone();
        tampered[prefix.len() + 2] ^= 1;
        if kind != Kind::AesCbc {
            assert!(key.open(SECRETS, &tampered).is_err(), "{kind:?} nonce");
        }
        // Truncated data is an error, not a panic.
        assert!(key.open(SECRETS, &sealed[..prefix.len() + 3]).is_err());
    }
}

#[test]
fn aesgcm_binds_the_value_to_its_storage_key() {
    let key = Key::new(Kind::AesGcm, "k1", vec![1; 32]).unwrap();
    let sealed = key.seal(SECRETS, b"{}").unwrap();
    let err = key
        .open(b"/registry/core/secrets/default/other", &sealed)
        .unwrap_err();
    assert!(err.contains("cannot decrypt"), "{err}");
}

#[test]
fn known_ciphertexts_decrypt() {
    // Built by hand from the format (the AES-CBC test vector of NIST SP 800-38A F.2.1, first
    // block, then one block of PKCS#7 padding encrypted after it), so a change of layout fails.
    let key = hex::decode("2b7e151628aed2a6abf7158809cf4f3c").unwrap();
    let iv = hex::decode("000102030405060708090a0b0c0d0e0f").unwrap();
    let plain = hex::decode("6bc1bee22e409f96e93d7e117393172a").unwrap();
    let first = hex::decode("7649abac8119b246cee98e9b12e9197d").unwrap();
    let k = Key::new(Kind::AesCbc, "nist", key).unwrap();
    let sealed = k.seal(SECRETS, &plain).unwrap();
    let prefix = b"k8s:enc:aescbc:v1:nist:".len();
    // Our IV is random: rebuild the stored value with the vector's IV and check the first block.
    let mut stored = b"k8s:enc:aescbc:v1:nist:".to_vec();
    stored.extend_from_slice(&iv);
    let reference = {
        use cbc::cipher::{BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
        cbc::Encryptor::<aes::Aes128>::new_from_slices(
            &hex::decode("2b7e151628aed2a6abf7158809cf4f3c").unwrap(),
            &iv,
        )
        .unwrap()
        .encrypt_padded_vec_mut::<Pkcs7>(&plain)
    };
    assert_eq!(&reference[..16], &first[..]);
    stored.extend_from_slice(&reference);
    assert_eq!(k.open(SECRETS, &stored).unwrap(), plain);
    assert_eq!(sealed.len(), prefix + 16 + 32);
}

#[test]
fn config_errors_are_clear() {
    let head = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n";
    let cases: &[(&str, &str)] = &[
        (
            "apiVersion: v1\nkind: EncryptionConfig\nresources: []\n",
            "EncryptionConfig",
        ),
        ("resources: []\n", "non-empty"),
        (
            "resources:\n- resources: [secrets]\n  providers: []\n",
            "providers must be",
        ),
        ("resources:\n- resources: [secrets]\n", "providers must be"),
        (
            "resources:\n- resources: [secrets]\n  providers:\n  - rot13: {keys: [{name: a, secret: AAAA}]}\n",
            "unknown provider \"rot13\"",
        ),
        (
            "resources:\n- resources: [secrets]\n  providers:\n  - aesgcm: {keys: [{name: a, secret: c2hvcnQ=}]}\n",
            "5 bytes long; it must be 16, 24, 32 bytes",
        ),
        (
            "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: a, secret: AAAAAAAAAAAAAAAAAAAAAA==}]}\n",
            "it must be 32 bytes",
        ),
        (
            "resources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: a, secret: '!!not base64'}]}\n",
            "not base64",
        ),
        (
            "resources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: []}\n",
            "keys must be a non-empty list",
        ),
        (
            "resources:\n- resources: [secrets]\n  providers:\n  - kms: {name: x}\n",
            "kms provider is not supported",
        ),
        (
            "resources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n    aescbc: {}\n",
            "exactly one provider",
        ),
        (
            "resources:\n- resources: ['*']\n  providers:\n  - identity: {}\n",
            "wildcards",
        ),
        (
            "resources:\n- resources: [secrets, secrets]\n  providers:\n  - identity: {}\n",
            "named twice",
        ),
    ];
    for (body, expected) in cases {
        let text = if body.starts_with("apiVersion") {
            body.to_string()
        } else {
            format!("{head}{body}")
        };
        let err = Encryption::parse(&text).unwrap_err();
        assert!(err.contains(expected), "{body}: {err}");
    }
    let err = Encryption::load(std::path::Path::new("/nonexistent/enc.yaml")).unwrap_err();
    assert!(err.contains("/nonexistent/enc.yaml"), "{err}");
}

#[test]
fn resources_map_to_storage_prefixes_and_earlier_lists_win() {
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n\
         - resources: [events]\n  providers:\n  - identity: {{}}\n\
         - resources: [secrets, deployments.apps, '*.batch']\n  providers:\n{}\
         - resources: ['*.*']\n  providers:\n{}",
        keyed("aesgcm", "a", 32, 1),
        keyed("secretbox", "b", 32, 2)
    );
    let e = Encryption::parse(&text).unwrap();
    assert_eq!(
        e.rules()[1].prefixes,
        [
            "/registry/core/secrets/",
            "/registry/apps/deployments/",
            "/registry/batch/"
        ]
    );
    let label = |k: &str| e.rule_for(k.as_bytes()).map(|r| r.write_label());
    assert_eq!(label("/registry/core/events/ns/e").unwrap(), "identity");
    assert_eq!(label("/registry/core/secrets/ns/s").unwrap(), "aesgcm:a");
    assert_eq!(label("/registry/batch/jobs/ns/j").unwrap(), "aesgcm:a");
    assert_eq!(
        label("/registry/core/configmaps/ns/c").unwrap(),
        "secretbox:b"
    );
    assert_eq!(label("/skiff.internal/encryption"), None);
    let core = config("  - identity: {}\n");
    assert!(core.rule_for(b"/registry/core/secretsx/a").is_none());
}

#[test]
fn reads_try_every_provider_and_refuse_what_none_reads() {
    let old = config(&keyed("aescbc", "old", 32, 1));
    let sealed_old = old.encrypt(SECRETS, b"{\"v\":1}".to_vec()).unwrap();
    // Rotation: the new key writes, the old one still reads.
    let rotated = config(&(keyed("secretbox", "new", 32, 2) + &keyed("aescbc", "old", 32, 1)));
    assert_eq!(
        rotated.decrypt(SECRETS, sealed_old.clone()).unwrap(),
        b"{\"v\":1}"
    );
    let sealed_new = rotated.encrypt(SECRETS, b"{\"v\":2}".to_vec()).unwrap();
    assert!(sealed_new.starts_with(b"k8s:enc:secretbox:v1:new:"));
    assert!(rotated.is_current(SECRETS, &sealed_new));
    assert!(!rotated.is_current(SECRETS, &sealed_old));
    // Once the old key is gone, its data is an error naming what wrote it.
    let new_only = config(&keyed("secretbox", "new", 32, 2));
    let err = new_only.decrypt(SECRETS, sealed_old.clone()).unwrap_err();
    assert!(err.contains("k8s:enc:aescbc:v1:old:"), "{err}");
    // Plain data needs identity to be read, as in kube-apiserver; the rewrite reads it anyway.
    let err = new_only.decrypt(SECRETS, b"{}".to_vec()).unwrap_err();
    assert!(err.contains("identity"), "{err}");
    assert_eq!(
        new_only
            .decrypt_for_rewrite(SECRETS, b"{}".to_vec())
            .unwrap(),
        b"{}"
    );
    let with_identity = config(&(keyed("secretbox", "new", 32, 2) + "  - identity: {}\n"));
    assert_eq!(
        with_identity.decrypt(SECRETS, b"{}".to_vec()).unwrap(),
        b"{}"
    );
    // Identity never hands out ciphertext as if it were the object.
    let identity = config("  - identity: {}\n");
    assert!(identity.decrypt(SECRETS, sealed_new).is_err());
    assert!(!identity.is_current(SECRETS, &sealed_old));
    // Keys no rule covers pass through.
    assert_eq!(
        new_only
            .encrypt(b"/registry/core/pods/a/b", b"{}".to_vec())
            .unwrap(),
        b"{}"
    );
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "skiff-encryption-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open_raw(dir: &TempDir) -> Arc<dyn Store> {
    let mut config = Config::new(dir.0.join("db"));
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.fsync = false;
    // Uncompressed, so that a plain-text value would show in the files' bytes.
    config.compression = false;
    Arc::new(SledStore::open(config).unwrap())
}

const PLAIN: &str = "correct-horse-battery-staple";

fn secret(name: &str, n: u32) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "stringData": {"password": format!("{PLAIN}-{n}")},
    }))
    .unwrap()
}

fn key_of(name: &str) -> Vec<u8> {
    format!("/registry/core/secrets/default/{name}").into_bytes()
}

/// Every value of every retained revision, as the log holds it.
async fn every_stored_value(raw: &dyn Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let status = raw.status();
    for entry in raw
        .log_retained(Revision(1), None, usize::MAX)
        .await
        .unwrap()
    {
        for event in entry.0.events {
            out.push((event.kv.key, event.kv.value));
        }
    }
    for kv in raw.retained_at(status.revision).await.unwrap() {
        out.push((kv.key, kv.value));
    }
    for name in ["a", "b", "gone"] {
        for (_, event) in raw.history(&key_of(name)).await.unwrap_or_default() {
            out.push((event.kv.key.clone(), event.kv.value));
            if let Some(prev) = event.prev_kv {
                out.push((prev.key, prev.value));
            }
        }
    }
    out
}

fn files_contain(dir: &std::path::Path, needle: &[u8]) -> bool {
    let mut found = false;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found |= files_contain(&path, needle);
        } else if let Ok(bytes) = std::fs::read(&path) {
            found |= bytes.windows(needle.len()).any(|w| w == needle);
        }
    }
    found
}

async fn plain_anywhere(raw: &dyn Store) -> bool {
    every_stored_value(raw)
        .await
        .iter()
        .any(|(_, v)| v.windows(PLAIN.len()).any(|w| w == PLAIN.as_bytes()))
}

#[tokio::test]
async fn turning_encryption_on_rewrites_rotates_and_purges_plain_history() {
    let dir = TempDir::new("rotate");
    // Before encryption: Secrets in plain text, with history, and one deleted.
    {
        let raw = open_raw(&dir);
        for n in 0..3 {
            raw.put(key_of("a"), secret("a", n), None).await.unwrap();
        }
        raw.put(key_of("b"), secret("b", 0), None).await.unwrap();
        raw.put(key_of("gone"), secret("gone", 0), None)
            .await
            .unwrap();
        raw.delete(KeyRange::key(key_of("gone"))).await.unwrap();
        raw.put(
            b"/registry/core/configmaps/default/c".to_vec(),
            b"{}".to_vec(),
            None,
        )
        .await
        .unwrap();
        // The checks below can fail: here, without encryption, both see the plain text.
        assert!(plain_anywhere(raw.as_ref()).await);
        raw.close().await.unwrap();
        assert!(files_contain(&dir.0, PLAIN.as_bytes()));
    }
    let first = Arc::new(config(&keyed("aesgcm", "k1", 32, 1)));
    {
        let raw = open_raw(&dir);
        let store = EncryptedStore::new(raw.clone(), first.clone());
        let report = rewrite::run(&store, &first).await.unwrap();
        assert_eq!(report.rewritten, 2, "{report:?}");
        assert_eq!(report.purged.len(), 1, "{report:?}");
        // a: its 3 plain versions go; b: its 1; gone: its put and its delete.
        assert_eq!(report.purged[0].1, Some(6), "{report:?}");
        assert!(!plain_anywhere(raw.as_ref()).await);
        // Reads through the wrapper see the objects; the raw log holds ciphertext.
        let got = store
            .range(RangeRequest::new(KeyRange::key(key_of("a"))))
            .await
            .unwrap();
        assert_eq!(got.kvs[0].value, secret("a", 2));
        let stored = raw
            .range(RangeRequest::new(KeyRange::key(key_of("a"))))
            .await
            .unwrap();
        assert!(stored.kvs[0].value.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
        // Reads before the rewrite are gone for Secrets only.
        let before = report.purged_below.unwrap().0 - 3;
        let err = store
            .range(RangeRequest::new(KeyRange::key(key_of("a"))).at(Revision(before)))
            .await
            .unwrap_err();
        assert!(matches!(err, skiff_store::Error::Compacted { .. }), "{err}");
        store
            .range(
                RangeRequest::new(KeyRange::key(
                    b"/registry/core/configmaps/default/c".to_vec(),
                ))
                .at(Revision(before)),
            )
            .await
            .unwrap();
        // Writes through the wrapper are encrypted; a second start changes nothing.
        store.put(key_of("b"), secret("b", 1), None).await.unwrap();
        assert_eq!(
            rewrite::run(&store, &first).await.unwrap(),
            rewrite::Report::default()
        );
        raw.close().await.unwrap();
    }
    // The purged versions may stay in sled's files until it cleans their segments; the rebuild
    // the server runs after a purge leaves the files without them (uncompressed data dir).
    let mut db = Config::new(dir.0.join("db"));
    db.retention.max_revisions = None;
    db.retention.max_age = None;
    SledStore::rebuild(db).await.unwrap();
    assert!(!files_contain(&dir.0, PLAIN.as_bytes()));
    assert!(files_contain(
        &dir.0,
        b"/registry/core/configmaps/default/c"
    ));
    // Rotation: the new key first, the old one still listed to read.
    let rotated = Arc::new(config(
        &(keyed("secretbox", "k2", 32, 2) + &keyed("aesgcm", "k1", 32, 1)),
    ));
    {
        let raw = open_raw(&dir);
        let store = EncryptedStore::new(raw.clone(), rotated.clone());
        let report = rewrite::run(&store, &rotated).await.unwrap();
        assert_eq!(report.rewritten, 2, "{report:?}");
        for (key, value) in every_stored_value(raw.as_ref()).await {
            if key.starts_with(b"/registry/core/secrets/") && !value.is_empty() {
                assert!(value.starts_with(b"k8s:enc:secretbox:v1:k2:"), "{value:?}");
            }
        }
        raw.close().await.unwrap();
    }
    // The old key removed: everything still reads, history included.
    let second = Arc::new(config(&keyed("secretbox", "k2", 32, 2)));
    {
        let raw = open_raw(&dir);
        let store = EncryptedStore::new(raw.clone(), second.clone());
        assert_eq!(rewrite::run(&store, &second).await.unwrap().rewritten, 0);
        let got = store
            .range(RangeRequest::new(KeyRange::prefix(
                b"/registry/core/secrets/".to_vec(),
            )))
            .await
            .unwrap();
        assert_eq!(got.kvs.len(), 2);
        assert_eq!(got.kvs[1].value, secret("b", 1));
        store.history(&key_of("a")).await.unwrap();
        store
            .log(Revision(1), None, usize::MAX)
            .await
            .unwrap_or_default();
        // A value no key reads is an error naming the key, never the bytes.
        let wrong = Arc::new(config(&keyed("secretbox", "k2", 32, 9)));
        let bad = EncryptedStore::new(raw.clone(), wrong.clone());
        let err = bad
            .range(RangeRequest::new(KeyRange::key(key_of("a"))))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("/registry/core/secrets/default/a"),
            "{err}"
        );
        let err = rewrite::run(&bad, &wrong).await;
        assert_eq!(
            err,
            Ok(rewrite::Report::default()),
            "current prefix: nothing to rewrite"
        );
        // A start whose config lost the key that wrote a value refuses, naming it.
        let retired = Arc::new(config(&keyed("aesgcm", "k3", 32, 5)));
        let err = rewrite::run(&EncryptedStore::new(raw.clone(), retired.clone()), &retired)
            .await
            .unwrap_err();
        assert!(
            err.contains("/registry/core/secrets/default/") && err.contains("keep the key"),
            "{err}"
        );
        // Turning encryption off: identity first decrypts everything.
        let off = Arc::new(config(
            &("  - identity: {}\n".to_string() + &keyed("secretbox", "k2", 32, 2)),
        ));
        let plain_store = EncryptedStore::new(raw.clone(), off.clone());
        assert_eq!(rewrite::run(&plain_store, &off).await.unwrap().rewritten, 2);
        let stored = raw
            .range(RangeRequest::new(KeyRange::key(key_of("a"))))
            .await
            .unwrap();
        assert_eq!(stored.kvs[0].value, secret("a", 2));
        raw.close().await.unwrap();
    }
}

#[tokio::test]
async fn watches_and_transactions_see_plain_values() {
    use futures::StreamExt;
    let dir = TempDir::new("watch");
    let raw = open_raw(&dir);
    let enc = Arc::new(config(&keyed("aescbc", "k", 24, 3)));
    let store = EncryptedStore::new(raw.clone(), enc);
    let start = store.status().revision.next();
    let mut watch = store
        .watch(skiff_store::WatchRequest {
            range: KeyRange::prefix(b"/registry/core/secrets/".to_vec()),
            start_revision: Some(start),
            prev_kv: true,
            progress_notify: None,
        })
        .await
        .unwrap();
    store.put(key_of("a"), secret("a", 0), None).await.unwrap();
    let (_, prev) = store.put(key_of("a"), secret("a", 1), None).await.unwrap();
    assert_eq!(prev.unwrap().value, secret("a", 0));
    let (_, deleted) = store.delete(KeyRange::key(key_of("a"))).await.unwrap();
    assert_eq!(deleted[0].value, secret("a", 1));
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let batch = watch.next().await.unwrap().unwrap();
        for event in batch.events {
            seen.push((event.kv.value, event.prev_kv.map(|p| p.value)));
        }
    }
    assert_eq!(seen[0], (secret("a", 0), None));
    assert_eq!(seen[1], (secret("a", 1), Some(secret("a", 0))));
    assert_eq!(seen[2], (Vec::new(), Some(secret("a", 1))));
    raw.close().await.unwrap();
}

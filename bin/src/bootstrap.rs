//! One cluster on a shared datastore: several API servers on one etcd share the cluster's
//! secrets (the CA, the front proxy's CA, the service-account signing key and the token file)
//! through the datastore itself, sealed with a server token, the way k3s servers share their
//! bootstrap data. Each server still issues its own serving certificate, for its own names,
//! from the shared CA; so a join token (which pins the CA by its hash) works against any of
//! them, and a token or a kubeconfig of one server is good for all.
//!
//! - **The first server** to start on an empty datastore creates the secrets in its data dir as
//!   a single server does, then seals them and creates the reserved key [`KEY`] (only if it is
//!   still absent: of two first servers racing, one wins and the other joins it). Without
//!   `--server-token` it makes a token and writes it to `<data-dir>/server-token`.
//! - **Every later server** (and every restart) opens the sealed secrets with its token (the
//!   flag, else `<data-dir>/server-token`) and writes them into its data dir before the PKI and
//!   the token file are loaded. A file the data dir already holds with other contents is
//!   refused, not overwritten: that data dir belongs to another cluster.
//! - Secrets a newer server creates that the sealed set lacks are added to it (the set grows,
//!   never changes), by compare-and-swap on the key's revision.
//!
//! Sealing: AES-256-GCM under a key derived from the token by PBKDF2-HMAC-SHA256 (a fresh salt
//! and nonce per seal), so the datastore (and its backups) hold no usable key material without
//! the token. The reserved key lives outside `/registry/`: the API never serves it.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use ring::aead;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use skiff_store::{Compare, Op, OpResponse, RangeRequest, Revision, Store, Txn};

/// The datastore key holding the sealed secrets.
pub const KEY: &[u8] = b"/skiff.internal/bootstrap";
/// Where a server keeps its server token, in its data dir.
pub const TOKEN_FILE: &str = "server-token";

/// The cluster's secrets, by path relative to the data dir, with each file's mode.
const FILES: &[(&str, u32)] = &[
    ("pki/ca.crt", 0o644),
    ("pki/ca.key", 0o600),
    ("pki/front-proxy-ca.crt", 0o644),
    ("pki/front-proxy-ca.key", 0o600),
    ("pki/service-account.key", 0o600),
    ("tokens.csv", 0o600),
];

const FORMAT: u32 = 1;
const PBKDF2_ROUNDS: u32 = 100_000;
const SALT_LEN: usize = 16;

/// The sealed form, as stored under [`KEY`].
#[derive(Serialize, Deserialize)]
struct Sealed {
    format: u32,
    salt: String,
    nonce: String,
    sealed: String,
}

/// The secrets, by path relative to the data dir.
type Files = BTreeMap<String, String>;

/// What [`fetch`] found.
#[derive(Debug)]
pub enum Fetched {
    /// No server has sealed secrets here yet: this one creates them, then [`publish`]es them.
    First,
    /// The secrets are in the data dir; the sealed copy, holding these files, is at this
    /// revision.
    Joined(Revision, BTreeSet<String>),
}

/// The server token: `given` (the flag), else the data dir's file, else (only when `create`)
/// a new one written there. A given token is written there too, so a restart needs no flag.
pub fn server_token(data_dir: &Path, given: Option<&str>, create: bool) -> Result<Option<String>> {
    let path = data_dir.join(TOKEN_FILE);
    if let Some(token) = given {
        let token = token.trim();
        if token.len() < 16 {
            bail!("--server-token must be at least 16 characters long");
        }
        let stored = std::fs::read_to_string(&path).ok();
        if stored.as_deref().map(str::trim) != Some(token) {
            write(&path, token.as_bytes(), 0o600)?;
        }
        return Ok(Some(token.to_string()));
    }
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => return Ok(Some(token.trim().to_string())),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    if !create {
        return Ok(None);
    }
    let mut secret = [0u8; 24];
    SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| anyhow!("no randomness for a server token"))?;
    let token = hex::encode(secret);
    write(&path, token.as_bytes(), 0o600)?;
    tracing::info!(
        file = %path.display(),
        "made the server token: further API servers on this datastore join with --server-token <its contents>"
    );
    Ok(Some(token))
}

/// Reads the sealed secrets from `store` and, when there are some, opens them with the token
/// and writes them into `data_dir` (refusing files it holds with other contents).
pub async fn fetch(store: &dyn Store, data_dir: &Path, token: Option<&str>) -> Result<Fetched> {
    let Some((value, revision)) = read(store).await? else {
        return Ok(Fetched::First);
    };
    let token = token.ok_or_else(|| {
        anyhow!(
            "this datastore already holds a cluster whose secrets are sealed with a server \
             token: start with --server-token (the first server wrote it to \
             <its data dir>/{TOKEN_FILE})"
        )
    })?;
    let files = open(&value, token)?;
    install(data_dir, &files)?;
    Ok(Fetched::Joined(revision, files.into_keys().collect()))
}

/// Seals the secrets in `data_dir` into `store`: creates the key after [`Fetched::First`], or
/// adds files the sealed copy at `revision` lacks after [`Fetched::Joined`]. Returns false when
/// another server wrote the key first (the caller then fetches again and reloads).
pub async fn publish(
    store: &dyn Store,
    data_dir: &Path,
    token: &str,
    fetched: &Fetched,
) -> Result<bool> {
    let files = collect(data_dir)?;
    let compare = match fetched {
        Fetched::First => Compare::not_exists(KEY),
        // Only what the sealed copy lacks is worth a write; if the key moved on since it was
        // read, the compare fails and the caller reads it again.
        Fetched::Joined(_, sealed) if files.keys().all(|name| sealed.contains(name)) => {
            return Ok(true);
        }
        Fetched::Joined(revision, _) => Compare::mod_revision_is(KEY, *revision),
    };
    let response = store
        .txn(Txn {
            compare: vec![compare],
            success: vec![Op::put(KEY, seal(&files, token)?)],
            ..Default::default()
        })
        .await
        .context("cannot write the cluster's sealed secrets to the datastore")?;
    if response.succeeded {
        tracing::info!(
            files = files.len(),
            "sealed the cluster's secrets into the datastore"
        );
    }
    Ok(response.succeeded)
}

async fn read(store: &dyn Store) -> Result<Option<(Vec<u8>, Revision)>> {
    let response = store
        .txn(Txn {
            success: vec![Op::Range(RangeRequest::new(skiff_store::KeyRange::key(
                KEY,
            )))],
            ..Default::default()
        })
        .await
        .context("cannot read the cluster's sealed secrets from the datastore")?;
    Ok(response.responses.into_iter().find_map(|r| match r {
        OpResponse::Range(range) => range
            .kvs
            .into_iter()
            .next()
            .map(|kv| (kv.value, kv.mod_revision)),
        _ => None,
    }))
}

/// The files a server's secrets are made of (the PKI directory's and the token files) that
/// `data_dir` holds now: what [`discard_new`] spares.
pub fn present(data_dir: &Path) -> Result<BTreeSet<PathBuf>> {
    let mut paths: BTreeSet<PathBuf> = ["tokens.csv", "join-token"]
        .iter()
        .map(|name| data_dir.join(name))
        .filter(|path| path.exists())
        .collect();
    match std::fs::read_dir(data_dir.join("pki")) {
        Ok(entries) => {
            for entry in entries {
                paths.insert(entry?.path());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context("cannot list the PKI directory"),
    }
    Ok(paths)
}

/// Removes the secrets' files made since [`present`] returned `before`: a server that lost the
/// race to seal its secrets gives way to the winner's.
pub fn discard_new(data_dir: &Path, before: &BTreeSet<PathBuf>) -> Result<()> {
    for path in present(data_dir)?.difference(before) {
        std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    Ok(())
}

/// The secrets `data_dir` holds.
fn collect(data_dir: &Path) -> Result<Files> {
    let mut files = Files::new();
    for (name, _) in FILES {
        let path = data_dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                files.insert(name.to_string(), text);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
    Ok(files)
}

/// Writes `files` into `data_dir`; a file there with other contents is refused before anything
/// is written.
fn install(data_dir: &Path, files: &Files) -> Result<()> {
    let mut missing = Vec::new();
    for (name, text) in files {
        let Some((_, mode)) = FILES.iter().find(|(n, _)| n == name) else {
            // A newer server's secret this build does not know: nothing here reads it.
            continue;
        };
        let path = data_dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing == *text => {}
            Ok(_) => bail!(
                "{} differs from the cluster's on the datastore: this data dir belongs to \
                 another cluster (move it aside to join this one, or point this server at its \
                 own datastore prefix)",
                path.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push((path, text, *mode)),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
    for (path, text, mode) in missing {
        write(&path, text.as_bytes(), mode)?;
    }
    Ok(())
}

fn write(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    if let Some(parent) = path.parent() {
        create_private_dir(parent)?;
    }
    skiff_api::tls::write_atomically(path, contents, mode)
        .with_context(|| format!("cannot write {}", path.display()))
}

fn create_private_dir(dir: &Path) -> Result<()> {
    skiff_api::tls::create_dir_all_durably(dir, 0o700)
        .with_context(|| format!("cannot create {}", dir.display()))
}

fn key(token: &str, salt: &[u8]) -> aead::LessSafeKey {
    let mut bytes = [0u8; 32];
    ring::pbkdf2::derive(
        ring::pbkdf2::PBKDF2_HMAC_SHA256,
        NonZeroU32::new(PBKDF2_ROUNDS).expect("non-zero rounds"),
        salt,
        token.as_bytes(),
        &mut bytes,
    );
    aead::LessSafeKey::new(
        aead::UnboundKey::new(&aead::AES_256_GCM, &bytes).expect("a 32-byte AES-256 key"),
    )
}

/// `files` sealed with `token`, as stored under [`KEY`].
fn seal(files: &Files, token: &str) -> Result<Vec<u8>> {
    let random = SystemRandom::new();
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; aead::NONCE_LEN];
    random
        .fill(&mut salt)
        .and_then(|()| random.fill(&mut nonce))
        .map_err(|_| anyhow!("no randomness to seal the cluster's secrets"))?;
    let mut data = serde_json::to_vec(files)?;
    key(token, &salt)
        .seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(KEY),
            &mut data,
        )
        .map_err(|_| anyhow!("cannot seal the cluster's secrets"))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(serde_json::to_vec(&Sealed {
        format: FORMAT,
        salt: b64.encode(salt),
        nonce: b64.encode(nonce),
        sealed: b64.encode(data),
    })?)
}

/// Opens what [`seal`] made; a wrong token or damaged bytes are a clear error.
fn open(value: &[u8], token: &str) -> Result<Files> {
    let damaged = || {
        anyhow!(
            "the cluster's sealed secrets on the datastore (key {}) are damaged",
            String::from_utf8_lossy(KEY)
        )
    };
    let sealed: Sealed = serde_json::from_slice(value).map_err(|_| damaged())?;
    if sealed.format != FORMAT {
        bail!(
            "the cluster's sealed secrets are in format {}, which this build does not read \
             (it reads {FORMAT}): upgrade this server",
            sealed.format
        );
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let salt = b64.decode(&sealed.salt).map_err(|_| damaged())?;
    let nonce: [u8; aead::NONCE_LEN] = b64
        .decode(&sealed.nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or_else(damaged)?;
    let mut data = b64.decode(&sealed.sealed).map_err(|_| damaged())?;
    let plain = key(token, &salt)
        .open_in_place(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(KEY),
            &mut data,
        )
        .map_err(|_| {
            anyhow!(
                "the server token does not open the cluster's secrets on this datastore: they \
                 were sealed with another token (the first server's is in its data dir's \
                 {TOKEN_FILE})"
            )
        })?;
    serde_json::from_slice(plain).map_err(|_| damaged())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> Files {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn sealed_secrets_open_with_their_token_only() {
        let secrets = files(&[("pki/ca.key", "KEY"), ("tokens.csv", "t,admin,1")]);
        let sealed = seal(&secrets, "the-right-token-123").unwrap();
        let text = String::from_utf8_lossy(&sealed);
        assert!(!text.contains("KEY") && !text.contains("admin"), "{text}");
        assert_eq!(open(&sealed, "the-right-token-123").unwrap(), secrets);
        let wrong = open(&sealed, "the-wrong-token-123")
            .unwrap_err()
            .to_string();
        assert!(wrong.contains("does not open"), "{wrong}");
        // Two seals of the same files differ (fresh salt and nonce).
        assert_ne!(sealed, seal(&secrets, "the-right-token-123").unwrap());
        // Damage is detected, not decrypted into garbage.
        let mut value: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut bytes = b64.decode(value["sealed"].as_str().unwrap()).unwrap();
        bytes[0] ^= 1;
        value["sealed"] = b64.encode(bytes).into();
        let damaged = serde_json::to_vec(&value).unwrap();
        assert!(open(&damaged, "the-right-token-123").is_err());
        assert!(
            open(b"not json", "the-right-token-123")
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
    }

    #[test]
    fn installing_fills_a_fresh_data_dir_and_refuses_another_clusters() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = files(&[("pki/ca.crt", "CA"), ("pki/ca.key", "KEY")]);
        install(dir.path(), &secrets).unwrap();
        assert_eq!(collect(dir.path()).unwrap(), secrets);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!((mode("pki/ca.key"), mode("pki/ca.crt")), (0o600, 0o644));
        // The same again is nothing to do.
        install(dir.path(), &secrets).unwrap();
        // Another cluster's CA is refused, and nothing is written.
        let other = files(&[("pki/ca.crt", "OTHER"), ("tokens.csv", "t")]);
        let error = install(dir.path(), &other).unwrap_err().to_string();
        assert!(error.contains("another cluster"), "{error}");
        assert!(!dir.path().join("tokens.csv").exists());
        assert_eq!(collect(dir.path()).unwrap(), secrets);
    }

    #[test]
    fn the_server_token_comes_from_the_flag_then_the_file_then_is_made() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(server_token(dir.path(), None, false).unwrap(), None);
        let made = server_token(dir.path(), None, true).unwrap().unwrap();
        assert_eq!(made.len(), 48);
        assert_eq!(
            server_token(dir.path(), None, false).unwrap(),
            Some(made.clone())
        );
        let given = "a-token-the-user-chose";
        assert_eq!(
            server_token(dir.path(), Some(given), false).unwrap(),
            Some(given.to_string())
        );
        assert_eq!(
            server_token(dir.path(), None, true).unwrap(),
            Some(given.to_string())
        );
        assert!(server_token(dir.path(), Some("short"), false).is_err());
    }

    #[tokio::test]
    async fn two_servers_share_one_set_of_secrets_through_the_store() {
        let db = tempfile::tempdir().unwrap();
        let store =
            skiff_store::SledStore::open(skiff_store::Config::new(db.path().join("db"))).unwrap();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let token = "shared-token-0123456789";
        // The first server finds nothing, makes its secrets, publishes them.
        let first = fetch(&store, a.path(), Some(token)).await.unwrap();
        assert!(matches!(first, Fetched::First));
        install(
            a.path(),
            &files(&[("pki/ca.crt", "CA"), ("pki/ca.key", "KEY")]),
        )
        .unwrap();
        assert!(publish(&store, a.path(), token, &first).await.unwrap());
        // A second first server racing it loses, and joins.
        let late = tempfile::tempdir().unwrap();
        install(late.path(), &files(&[("pki/ca.crt", "MINE")])).unwrap();
        assert!(
            !publish(&store, late.path(), token, &Fetched::First)
                .await
                .unwrap()
        );
        // The second server gets the same files; without a token or with a wrong one, nothing.
        let none = fetch(&store, b.path(), None).await.unwrap_err().to_string();
        assert!(none.contains("--server-token"), "{none}");
        assert!(
            fetch(&store, b.path(), Some("another-token-0123"))
                .await
                .is_err()
        );
        assert!(collect(b.path()).unwrap().is_empty());
        let joined = fetch(&store, b.path(), Some(token)).await.unwrap();
        assert_eq!(collect(b.path()).unwrap(), collect(a.path()).unwrap());
        // A secret a newer server adds is sealed in too, and reaches the first server.
        install(b.path(), &files(&[("tokens.csv", "t,admin")])).unwrap();
        assert!(publish(&store, b.path(), token, &joined).await.unwrap());
        fetch(&store, a.path(), Some(token)).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(a.path().join("tokens.csv")).unwrap(),
            "t,admin"
        );
        store.close().await.unwrap();
    }
}

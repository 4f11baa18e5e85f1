//! Encryption at rest, as kube-apiserver's `--encryption-provider-config`: an
//! `apiserver.config.k8s.io/v1` `EncryptionConfiguration` names resources (`secrets`,
//! `deployments.apps`, `*.apps`, `*.` for the core group, `*.*` for all) and an ordered list of
//! providers (`aesgcm`, `aescbc`, `secretbox` with named keys, `identity`). The first provider
//! (its first key) encrypts every write; every listed provider is tried to read.
//!
//! The transform sits in one place, underneath everything that reads values: [`EncryptedStore`]
//! wraps the log and encrypts the values of writes under the configured storage prefixes and
//! decrypts every value it hands out (reads at any revision, lists, watches and so the watch
//! cache, history, the log of the replay endpoints and of `skiff replay`). What sits above sees
//! plain JSON as before; the log only ever receives ciphertext.
//!
//! - [`providers`]: the ciphers, in kube-apiserver's stored format.
//! - [`rewrite`]: at start, every stored value under a configured prefix not written with the
//!   current write key is rewritten with it (key rotation, turning encryption on or off), and the
//!   history those values had is purged so the log keeps no older copy.

pub mod providers;
pub mod rewrite;
mod store;
#[cfg(test)]
mod tests;

use std::path::Path;

use serde_json::Value;

pub use providers::{Key, Kind};
pub use store::EncryptedStore;

/// The API group and version kube-apiserver reads the file as.
pub const API_VERSION: &str = "apiserver.config.k8s.io/v1";
/// The file's kind.
pub const KIND: &str = "EncryptionConfiguration";

/// What stored data starts with when some provider encrypted it.
const ENCRYPTED_MARK: &[u8] = b"k8s:enc:";

/// One provider of a resource list.
#[derive(Debug, Clone)]
pub enum Provider {
    /// Values as they are.
    Identity,
    /// A cipher with its keys, the first of which encrypts.
    Keys(Vec<Key>),
}

impl Provider {
    /// What the provider writes with, as the stored prefix names it: `aesgcm:key1`, `identity`.
    pub fn write_label(&self) -> String {
        match self {
            Provider::Identity => "identity".into(),
            Provider::Keys(keys) => format!("{}:{}", keys[0].kind.name(), keys[0].name),
        }
    }
}

/// One `resources` entry: the storage prefixes it covers and its providers.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Storage key prefixes (`/registry/core/secrets/`).
    pub prefixes: Vec<String>,
    /// In order; the first writes.
    pub providers: Vec<Provider>,
}

impl Rule {
    /// What new writes under this rule are encrypted with.
    pub fn write_label(&self) -> String {
        self.providers[0].write_label()
    }
}

/// A parsed encryption configuration.
#[derive(Debug, Clone)]
pub struct Encryption {
    rules: Vec<Rule>,
}

impl Encryption {
    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Encryption, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read encryption config {}: {e}", path.display()))?;
        Encryption::parse(&text).map_err(|e| format!("encryption config {}: {e}", path.display()))
    }

    /// Parses an `EncryptionConfiguration` (YAML or JSON).
    pub fn parse(text: &str) -> Result<Encryption, String> {
        let doc: Value = serde_saphyr::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
        let api_version = doc.get("apiVersion").and_then(Value::as_str);
        let kind = doc.get("kind").and_then(Value::as_str);
        if api_version != Some(API_VERSION) || kind != Some(KIND) {
            return Err(format!(
                "expected apiVersion {API_VERSION} and kind {KIND}, found {} {} \
                 (the older `EncryptionConfig` of apiVersion v1 is no longer read, as by \
                 kube-apiserver)",
                api_version.unwrap_or("(none)"),
                kind.unwrap_or("(none)")
            ));
        }
        let entries = doc
            .get("resources")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or("`resources` must be a non-empty list")?;
        let mut rules = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("resources[{i}]");
            let names = entry
                .get("resources")
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
                .ok_or(format!("{at}.resources must be a non-empty list"))?;
            let mut prefixes = Vec::new();
            for name in names {
                let name = name
                    .as_str()
                    .ok_or(format!("{at}.resources holds a non-string"))?;
                let prefix = storage_prefix(name).map_err(|e| format!("{at}.resources: {e}"))?;
                if !seen.insert(prefix.clone()) {
                    return Err(format!("{at}.resources: {name:?} is named twice"));
                }
                prefixes.push(prefix);
            }
            let list = entry
                .get("providers")
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
                .ok_or(format!("{at}.providers must be a non-empty list"))?;
            let mut providers = Vec::new();
            for (j, p) in list.iter().enumerate() {
                providers.push(provider(p).map_err(|e| format!("{at}.providers[{j}]: {e}"))?);
            }
            rules.push(Rule {
                prefixes,
                providers,
            });
        }
        Ok(Encryption { rules })
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule for a storage key: the first whose prefixes cover it (earlier lists win, as in
    /// kube-apiserver).
    pub fn rule_for(&self, key: &[u8]) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|r| r.prefixes.iter().any(|p| key.starts_with(p.as_bytes())))
    }

    /// Whether any value under `key` would be transformed (a provider other than identity, or
    /// identity first over data other providers wrote).
    pub fn covers(&self, key: &[u8]) -> bool {
        self.rule_for(key).is_some()
    }

    /// The bytes to store for `plain` under `key`.
    pub fn encrypt(&self, key: &[u8], plain: Vec<u8>) -> Result<Vec<u8>, String> {
        match self.rule_for(key).map(|r| &r.providers[0]) {
            None | Some(Provider::Identity) => Ok(plain),
            Some(Provider::Keys(keys)) => keys[0].seal(key, &plain),
        }
    }

    /// The plain value of `stored` under `key`: every provider is tried; `Err` when none reads it.
    pub fn decrypt(&self, key: &[u8], stored: Vec<u8>) -> Result<Vec<u8>, String> {
        let Some(rule) = self.rule_for(key) else {
            return Ok(stored);
        };
        // Deletes carry empty values.
        if stored.is_empty() {
            return Ok(stored);
        }
        let encrypted = stored.starts_with(ENCRYPTED_MARK);
        let mut failure = None;
        for provider in &rule.providers {
            match provider {
                Provider::Identity if !encrypted => return Ok(stored),
                Provider::Identity => {}
                Provider::Keys(keys) => {
                    for k in keys.iter().filter(|k| stored.starts_with(&k.prefix)) {
                        match k.open(key, &stored) {
                            Ok(plain) => return Ok(plain),
                            Err(e) => failure = Some(e),
                        }
                    }
                }
            }
        }
        Err(failure.unwrap_or_else(|| {
            if encrypted {
                let end = stored
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b':')
                    .nth(4)
                    .map_or(stored.len().min(40), |(i, _)| i + 1);
                format!(
                    "it was written with {:?}, which no configured provider has",
                    String::from_utf8_lossy(&stored[..end])
                )
            } else {
                "it is not encrypted and the identity provider is not configured for it".into()
            }
        }))
    }

    /// Whether `stored` under `key` is already as a write now would store it (written with the
    /// current write key; not encrypted when identity writes).
    pub fn is_current(&self, key: &[u8], stored: &[u8]) -> bool {
        match self.rule_for(key).map(|r| &r.providers[0]) {
            None => true,
            Some(Provider::Identity) => !stored.starts_with(ENCRYPTED_MARK),
            Some(Provider::Keys(keys)) => stored.starts_with(&keys[0].prefix),
        }
    }

    /// [`Encryption::decrypt`] for the rewrite at start: unencrypted data is read as it is even
    /// when identity is not listed, so turning encryption on needs no identity fallback.
    pub fn decrypt_for_rewrite(&self, key: &[u8], stored: Vec<u8>) -> Result<Vec<u8>, String> {
        if !stored.starts_with(ENCRYPTED_MARK) {
            return Ok(stored);
        }
        self.decrypt(key, stored)
    }
}

/// The storage prefix of a resource name as the configuration writes it.
fn storage_prefix(name: &str) -> Result<String, String> {
    let (resource, group) = match name.split_once('.') {
        Some((r, g)) => (r, g),
        None if name.contains('*') => {
            return Err(format!(
                "{name:?}: wildcards are `*.*`, `*.<group>` or `*.` (the core group)"
            ));
        }
        None => (name, ""),
    };
    if resource.is_empty() {
        return Err(format!("{name:?} names no resource"));
    }
    match (resource, group) {
        ("*", "*") => Ok("/registry/".into()),
        ("*", "") => Ok("/registry/core/".into()),
        ("*", g) if !g.contains('*') => Ok(format!("/registry/{g}/")),
        (r, _) if r.contains('*') || group.contains('*') => Err(format!(
            "{name:?}: wildcards are `*.*`, `*.<group>` or `*.` (the core group)"
        )),
        (r, "") => Ok(format!("/registry/core/{r}/")),
        (r, g) => Ok(format!("/registry/{g}/{r}/")),
    }
}

/// One `providers` entry.
fn provider(p: &Value) -> Result<Provider, String> {
    let map = p.as_object().ok_or("a provider is a map")?;
    if map.len() != 1 {
        return Err(format!(
            "each entry names exactly one provider, this one names {}",
            map.len()
        ));
    }
    let (name, body) = map.iter().next().expect("one entry");
    let kind = match name.as_str() {
        "identity" => return Ok(Provider::Identity),
        "aesgcm" => Kind::AesGcm,
        "aescbc" => Kind::AesCbc,
        "secretbox" => Kind::SecretBox,
        "kms" => return Err("the kms provider is not supported by skiff".into()),
        other => {
            return Err(format!(
                "unknown provider {other:?} (known: aesgcm, aescbc, secretbox, identity)"
            ));
        }
    };
    let list = body
        .get("keys")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or(format!("{name}.keys must be a non-empty list"))?;
    let mut keys: Vec<Key> = Vec::new();
    for (i, k) in list.iter().enumerate() {
        let key_name = k
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or(format!("{name}.keys[{i}] has no name"))?;
        if key_name.contains(':') {
            return Err(format!("key name {key_name:?} must not contain ':'"));
        }
        if keys.iter().any(|k| k.name == key_name) {
            return Err(format!("{name} names key {key_name:?} twice"));
        }
        let secret = k
            .get("secret")
            .and_then(Value::as_str)
            .ok_or(format!("key {key_name:?} has no secret"))?;
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(secret.trim())
            .map_err(|e| format!("the secret of key {key_name:?} is not base64: {e}"))?;
        keys.push(Key::new(kind, key_name, bytes)?);
    }
    Ok(Provider::Keys(keys))
}

//! The rewrite at start: every stored value under a configured prefix that is not as a write now
//! would store it (written with an older key, before encryption was turned on, or encrypted when
//! identity now writes) is rewritten with the current write key. Then the history of each prefix
//! whose write key changed is purged below the rewrite ([`Store::purge_prefix`]), so the log keeps
//! no copy written the old way: no plain text once encryption is on, and nothing that needs a key
//! about to be removed.
//!
//! Which key last wrote each prefix is kept in the log itself, under [`STATE_KEY`], so that a
//! restore of an older snapshot is purged again.

use std::collections::BTreeMap;

use skiff_store::{Compare, KeyRange, Op, RangeRequest, Revision, Store, Txn};

use super::{EncryptedStore, Encryption};

/// Where the write label last applied to each prefix is kept: a JSON map prefix -> label. Outside
/// `/registry/`, so no resource rule covers it.
pub const STATE_KEY: &[u8] = b"/skiff.internal/encryption";

/// How many keys one read of the rewrite walks.
const PAGE: usize = 256;

/// What the rewrite did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Values rewritten with the current write key.
    pub rewritten: u64,
    /// The prefixes whose history was purged, each with how many versions went (`None`: the
    /// backend keeps no history of its own to purge).
    pub purged: Vec<(String, Option<u64>)>,
    /// The revision the history is purged below.
    pub purged_below: Option<Revision>,
}

/// Rewrites and purges as the module docs say. `Err` names a value no configured provider reads
/// (the server must not start: it could not serve that object).
pub async fn run(store: &EncryptedStore, encryption: &Encryption) -> Result<Report, String> {
    let raw = store.inner();
    let fail = |e: skiff_store::Error| format!("rewriting encrypted resources: {e}");
    let state_kv = raw
        .range(RangeRequest::new(KeyRange::key(STATE_KEY.to_vec())))
        .await
        .map_err(fail)?
        .kvs
        .into_iter()
        .next();
    let state: BTreeMap<String, String> = state_kv
        .as_ref()
        .and_then(|kv| serde_json::from_slice(&kv.value).ok())
        .unwrap_or_default();
    let mut report = Report::default();
    let mut new_state = state.clone();
    let mut to_purge = Vec::new();
    for rule in encryption.rules() {
        let label = rule.write_label();
        for prefix in &rule.prefixes {
            let rewritten = rewrite_prefix(raw.as_ref(), encryption, rule, prefix).await?;
            report.rewritten += rewritten;
            if rewritten > 0 || state.get(prefix) != Some(&label) {
                to_purge.push(prefix.clone());
            }
            new_state.insert(prefix.clone(), label.clone());
        }
    }
    if to_purge.is_empty() {
        return Ok(report);
    }
    let value = serde_json::to_vec(&new_state).expect("a map of strings encodes");
    // Every rewrite is below this write's revision.
    let (below, _) = raw
        .put(STATE_KEY.to_vec(), value, None)
        .await
        .map_err(fail)?;
    report.purged_below = Some(below);
    for prefix in to_purge {
        let removed = raw
            .purge_prefix(prefix.as_bytes(), below)
            .await
            .map_err(fail)?;
        report.purged.push((prefix, removed));
    }
    Ok(report)
}

/// Rewrites the values under `prefix` that `rule` covers and that are not current; how many.
async fn rewrite_prefix(
    raw: &dyn Store,
    encryption: &Encryption,
    rule: &super::Rule,
    prefix: &str,
) -> Result<u64, String> {
    let fail = |e: skiff_store::Error| format!("rewriting {prefix}: {e}");
    let full = KeyRange::prefix(prefix.as_bytes().to_vec());
    let mut range = full.clone();
    let mut rewritten = 0;
    loop {
        let mut request = RangeRequest::new(range.clone());
        request.limit = Some(PAGE);
        let response = raw.range(request).await.map_err(fail)?;
        for kv in &response.kvs {
            // A key an earlier rule covers is that rule's business.
            let ours = encryption
                .rule_for(&kv.key)
                .is_some_and(|r| std::ptr::eq(r, rule));
            if !ours || encryption.is_current(&kv.key, &kv.value) {
                continue;
            }
            let plain = encryption
                .decrypt_for_rewrite(&kv.key, kv.value.clone())
                .map_err(|reason| {
                    format!(
                        "the value stored under {} cannot be read: {reason}; keep the key that \
                         wrote it in the encryption config until skiff has rewritten it",
                        String::from_utf8_lossy(&kv.key)
                    )
                })?;
            let value = encryption
                .encrypt(&kv.key, plain)
                .map_err(|e| format!("encrypting {}: {e}", String::from_utf8_lossy(&kv.key)))?;
            let response = raw
                .txn(Txn {
                    compare: vec![Compare::mod_revision_is(kv.key.clone(), kv.mod_revision)],
                    success: vec![Op::Put {
                        key: kv.key.clone(),
                        value,
                        lease: kv.lease,
                        prev_kv: false,
                    }],
                    failure: vec![],
                    tag: None,
                })
                .await
                .map_err(fail)?;
            // Lost to a concurrent write, which the current key wrote.
            if response.succeeded {
                rewritten += 1;
            }
        }
        match (response.more, response.kvs.last()) {
            (true, Some(last)) => {
                let mut after = last.key.clone();
                after.push(0);
                range = full.resume_at(after);
            }
            _ => return Ok(rewritten),
        }
    }
}

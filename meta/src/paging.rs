//! The `continue` tokens of paged lists and the `resourceVersion` query parameter: what a client
//! sends back to the server, so bytes from outside.
//!
//! A token is URL-safe base64 (no padding; trailing `=` are accepted) of a small JSON object: the
//! revision of the list's first page, the key to continue after and, when known, how many objects
//! follow that key at that revision (so that later pages need not count them again). Only the
//! server reads it; a client that alters the count misleads only itself.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The version every token carries.
const VERSION: &str = "meta.k8s.io/v1";

/// What a `continue` token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continue {
    /// The revision of the list's first page (never 0).
    pub revision: u64,
    /// The key to continue after.
    pub start: String,
    /// How many objects follow `start` at `revision`, when the server knew.
    pub remaining: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Token {
    v: String,
    rv: u64,
    start: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remaining: Option<u64>,
}

/// The token for a next page that starts after `key` (a storage key, taken as UTF-8) at
/// `revision`.
pub fn encode_continue(revision: u64, key: &[u8], remaining: Option<u64>) -> String {
    let token = Token {
        v: VERSION.into(),
        rv: revision,
        start: String::from_utf8_lossy(key).into_owned(),
        remaining,
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// Reads a token; `None` when it is not one this server wrote for a list under `prefix` (a
/// token of another resource's list is refused as one that does not decode).
pub fn decode_continue(token: &str, prefix: &str) -> Option<Continue> {
    let bytes = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok()?;
    let token: Token = serde_json::from_slice(&bytes).ok()?;
    if token.v != VERSION || token.rv == 0 || !token.start.starts_with(prefix) {
        return None;
    }
    Some(Continue {
        revision: token.rv,
        start: token.start,
        remaining: token.remaining,
    })
}

/// A `resourceVersion` parameter: `None` for "any" (absent, empty, `0` or another spelling of
/// zero such as `00`), else the revision; `Err` with Kubernetes' message when it is not a number.
pub fn parse_resource_version(value: Option<&str>) -> Result<Option<u64>, String> {
    match value {
        None | Some("") => Ok(None),
        // Digits only, as Go's `strconv.ParseUint` (Rust's `parse` would take a `+`).
        Some(v) => v
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| v.parse::<u64>().ok())
            .flatten()
            .map(|rv| (rv != 0).then_some(rv))
            .ok_or_else(|| format!("invalid resource version: {v:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_foreign_prefixes() {
        let token = encode_continue(42, b"/registry/core/pods/default/web", Some(7));
        let c = decode_continue(&token, "/registry/core/pods/").unwrap();
        assert_eq!(c.revision, 42);
        assert_eq!(c.start, "/registry/core/pods/default/web");
        assert_eq!(c.remaining, Some(7));
        assert_eq!(decode_continue(&token, "/registry/core/secrets/"), None);
        assert_eq!(
            decode_continue(&format!("{token}=="), "/registry/").unwrap(),
            c
        );
        assert_eq!(decode_continue("garbage!", "/registry/"), None);
        assert_eq!(decode_continue("", ""), None);
        let zero = URL_SAFE_NO_PAD.encode(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"/a"}"#);
        assert_eq!(
            decode_continue(&zero, "/"),
            None,
            "revision 0 is no revision"
        );
    }

    #[test]
    fn resource_versions_are_numbers_or_any() {
        assert_eq!(parse_resource_version(None), Ok(None));
        assert_eq!(parse_resource_version(Some("")), Ok(None));
        assert_eq!(parse_resource_version(Some("0")), Ok(None));
        assert_eq!(parse_resource_version(Some("17")), Ok(Some(17)));
        assert_eq!(
            parse_resource_version(Some("-1")),
            Err("invalid resource version: \"-1\"".to_string())
        );
        assert!(parse_resource_version(Some("18446744073709551616")).is_err());
    }

    /// Found by the `resource_version` fuzz target: `00000` came out as revision 0, which no
    /// write has, instead of "any" as `0` does (a list with `resourceVersionMatch=Exact` then
    /// asked the log for revision 0).
    #[test]
    fn regression_zero_spelled_with_more_digits_is_any() {
        assert_eq!(parse_resource_version(Some("00000")), Ok(None));
        assert_eq!(parse_resource_version(Some("007")), Ok(Some(7)));
        assert!(
            parse_resource_version(Some("+5")).is_err(),
            "no sign, as in Go"
        );
    }
}

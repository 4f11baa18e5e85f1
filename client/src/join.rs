//! Join tokens: how an agent trusts a server it has never seen.
//!
//! A join token is `SKIFF1::<sha256 of the CA PEM, hex>::<secret>`, the idea k3s's tokens carry:
//! the agent fetches the CA bundle from the server's unauthenticated `/cacerts` without verifying
//! the connection, accepts it only if its SHA-256 matches the hash in the token, and from then on
//! talks TLS verified by that CA, authenticating with the secret. No certificate is copied by hand,
//! and a man in the middle cannot substitute its own CA. The secret is distinct from the admin
//! token, so an agent's credentials can be rotated without touching the administrator's.

use sha2::{Digest, Sha256};

use crate::{Error, Result};

const PREFIX: &str = "SKIFF1";

/// A parsed join token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinToken {
    /// SHA-256 of the cluster CA bundle (PEM bytes as the server serves them), lowercase hex.
    pub ca_hash: String,
    /// The bearer secret the API server accepts.
    pub secret: String,
}

impl JoinToken {
    /// A token for the CA bundle `ca_pem` and `secret`.
    pub fn new(ca_pem: &[u8], secret: &str) -> JoinToken {
        JoinToken {
            ca_hash: ca_hash(ca_pem),
            secret: secret.to_string(),
        }
    }

    /// Parses `SKIFF1::<hash>::<secret>`.
    pub fn parse(text: &str) -> Result<JoinToken> {
        let mut parts = text.trim().splitn(3, "::");
        let (Some(PREFIX), Some(hash), Some(secret)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::BadToken(format!(
                "expected {PREFIX}::<ca-hash>::<secret>"
            )));
        };
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::BadToken(
                "the CA hash must be 64 hex digits (SHA-256)".into(),
            ));
        }
        if secret.is_empty() || secret.bytes().any(|b| b.is_ascii_whitespace() || b == b',') {
            return Err(Error::BadToken(
                "the secret must be non-empty, without spaces or commas".into(),
            ));
        }
        Ok(JoinToken {
            ca_hash: hash.to_ascii_lowercase(),
            secret: secret.to_string(),
        })
    }
}

impl std::fmt::Display for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PREFIX}::{}::{}", self.ca_hash, self.secret)
    }
}

/// SHA-256 of `ca_pem`, lowercase hex.
pub fn ca_hash(ca_pem: &[u8]) -> String {
    hex::encode(Sha256::digest(ca_pem))
}

/// Fetches `server`'s CA bundle from `/cacerts` and returns it if its hash matches `token`'s.
pub async fn fetch_ca(server: &str, token: &JoinToken) -> Result<Vec<u8>> {
    crate::install_crypto();
    let unreachable = |e: reqwest::Error| Error::Unreachable {
        server: server.to_string(),
        message: e.to_string(),
    };
    // Unverified on purpose: what comes back is checked against the hash before any use.
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(unreachable)?;
    let url = format!("{}/cacerts", server.trim_end_matches('/'));
    let response = http.get(&url).send().await.map_err(unreachable)?;
    if !response.status().is_success() {
        return Err(Error::Unreachable {
            server: server.to_string(),
            message: format!("GET /cacerts answered {}", response.status()),
        });
    }
    let body = response.bytes().await.map_err(unreachable)?.to_vec();
    let actual = ca_hash(&body);
    if actual != token.ca_hash {
        return Err(Error::CaMismatch {
            server: server.to_string(),
            expected: token.ca_hash.clone(),
            actual,
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let token = JoinToken::new(b"-----BEGIN CERTIFICATE-----\n", "s3cret");
        let text = token.to_string();
        assert!(text.starts_with("SKIFF1::"));
        assert_eq!(JoinToken::parse(&text).unwrap(), token);
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "admin-token",
            "SKIFF1::abc::secret",
            &format!("SKIFF2::{}::s", "a".repeat(64)),
            &format!("SKIFF1::{}::", "a".repeat(64)),
            &format!("SKIFF1::{}::a b", "a".repeat(64)),
            &format!("SKIFF1::{}::s", "g".repeat(64)),
        ] {
            assert!(JoinToken::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}

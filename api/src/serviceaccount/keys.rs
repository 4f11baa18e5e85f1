//! The key service-account tokens are signed with: ECDSA P-256 (`ES256`), generated at first
//! start and kept as a PKCS#8 PEM file (mode 0600) in the data dir, reused on every later start,
//! so tokens outlive a restart. Its public half is served as a JWK (`/openid/v1/jwks`).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{DecodingKey, EncodingKey};
use rcgen::PublicKeyData as _;
use serde_json::{Value, json};

/// File name of the signing key, in the PKI directory of the data dir.
pub const KEY_FILE: &str = "service-account.key";

/// Why the signing key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key file could not be read or written.
    #[error("cannot access the service-account key {path}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The key file holds no ECDSA P-256 private key.
    #[error("{path} is not an ECDSA P-256 private key in PEM: {reason}")]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Generating a key failed.
    #[error("cannot generate a service-account key: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The signing key pair with what the JWKS and the verifier need of it.
pub struct SigningKey {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// The key id in token headers and the JWKS: base64url of the SHA-256 of the public key's
    /// DER (SubjectPublicKeyInfo), as kube-apiserver derives it.
    kid: String,
    /// The public point's coordinates, base64url.
    x: String,
    y: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new key held only in memory (a server without a data dir, tests).
    pub fn generate() -> Result<SigningKey, Error> {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        Self::from_pair(&pair).map_err(|reason| Error::BadKey {
            path: PathBuf::new(),
            reason,
        })
    }

    /// Loads the key at `path`, or generates one and writes it there (mode 0600) when the file
    /// does not exist.
    pub fn load_or_create(path: &Path) -> Result<SigningKey, Error> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let bad = |reason: String| Error::BadKey {
            path: path.to_path_buf(),
            reason,
        };
        match std::fs::read_to_string(path) {
            Ok(pem) => {
                let pair = rcgen::KeyPair::from_pem(&pem).map_err(|e| bad(e.to_string()))?;
                Self::from_pair(&pair).map_err(bad)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
                if let Some(parent) = path.parent() {
                    crate::tls::create_dir_all_durably(parent, 0o777).map_err(io)?;
                }
                crate::tls::write_atomically(path, pair.serialize_pem().as_bytes(), 0o600)
                    .map_err(io)?;
                tracing::info!(path = %path.display(), "generated the service-account signing key");
                Self::from_pair(&pair).map_err(bad)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn from_pair(pair: &rcgen::KeyPair) -> Result<SigningKey, String> {
        if pair.algorithm() != &rcgen::PKCS_ECDSA_P256_SHA256 {
            return Err("the key is not ECDSA P-256".into());
        }
        let point = pair.public_key_raw();
        // An uncompressed point: 0x04, then x and y of 32 bytes each.
        if point.len() != 65 || point[0] != 4 {
            return Err("unexpected public key encoding".into());
        }
        let x = URL_SAFE_NO_PAD.encode(&point[1..33]);
        let y = URL_SAFE_NO_PAD.encode(&point[33..]);
        let decoding = DecodingKey::from_ec_components(&x, &y).map_err(|e| e.to_string())?;
        let kid = skiff_pki::legacy_token::key_id(&pair.subject_public_key_info());
        Ok(SigningKey {
            encoding: EncodingKey::from_ec_der(&pair.serialize_der()),
            decoding,
            kid,
            x,
            y,
        })
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The private key, to sign with.
    pub(crate) fn encoding(&self) -> &EncodingKey {
        &self.encoding
    }

    /// The public key, to verify with.
    pub(crate) fn decoding(&self) -> &DecodingKey {
        &self.decoding
    }

    /// The public key as a JWK (RFC 7517), as `/openid/v1/jwks` lists it.
    pub fn jwk(&self) -> Value {
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": self.x,
            "y": self.y,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn the_key_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pki").join(KEY_FILE);
        let first = SigningKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = SigningKey::load_or_create(&path).unwrap();
        assert_eq!(first.kid(), again.kid());
        assert_eq!(first.jwk(), again.jwk());
        // A fresh key is another key.
        assert_ne!(SigningKey::generate().unwrap().kid(), first.kid());
        let jwk = first.jwk();
        assert_eq!(jwk["kty"], "EC");
        assert_eq!(jwk["crv"], "P-256");
        assert_eq!(jwk["alg"], "ES256");
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
    }

    #[test]
    fn a_foreign_key_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE);
        std::fs::write(&path, "not a key").unwrap();
        assert!(matches!(
            SigningKey::load_or_create(&path),
            Err(Error::BadKey { .. })
        ));
        // An Ed25519 key is a key, but not one that signs ES256.
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        std::fs::write(&path, ed.serialize_pem()).unwrap();
        assert!(matches!(
            SigningKey::load_or_create(&path),
            Err(Error::BadKey { .. })
        ));
    }
}

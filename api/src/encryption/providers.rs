//! The ciphers behind kube-apiserver's providers, in its storage format: every encrypted value is
//! `k8s:enc:<provider>:v1:<key name>:` followed by
//!
//! ```text
//!   aesgcm     12-byte random nonce | AES-GCM ciphertext and 16-byte tag (the storage key is the
//!              additional authenticated data, so a value copied under another key fails)
//!   aescbc     16-byte random IV | AES-CBC ciphertext of the PKCS#7-padded value (not
//!              authenticated: kube-apiserver deprecates it; kept for its data)
//!   secretbox  24-byte random nonce | XSalsa20-Poly1305 box (16-byte tag, then the ciphertext)
//! ```

use aes_gcm::aead::{Aead, KeyInit, Payload};
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
use rand::RngCore;

/// Which cipher a provider uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// AES-GCM with a random nonce.
    AesGcm,
    /// AES-CBC with PKCS#7 padding.
    AesCbc,
    /// NaCl secretbox (XSalsa20-Poly1305).
    SecretBox,
}

impl Kind {
    /// The provider's name in the configuration and in the stored prefix.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AesGcm => "aesgcm",
            Kind::AesCbc => "aescbc",
            Kind::SecretBox => "secretbox",
        }
    }

    /// The key lengths the cipher takes, in bytes.
    pub fn key_lengths(self) -> &'static [usize] {
        match self {
            Kind::AesGcm | Kind::AesCbc => &[16, 24, 32],
            Kind::SecretBox => &[32],
        }
    }
}

/// One named key of one provider.
#[derive(Clone)]
pub struct Key {
    /// The provider.
    pub kind: Kind,
    /// The key's name (part of the stored prefix).
    pub name: String,
    secret: Vec<u8>,
    /// `k8s:enc:<provider>:v1:<name>:`.
    pub prefix: Vec<u8>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(f, "{}:{}", self.kind.name(), self.name)
    }
}

const GCM_NONCE: usize = 12;
const CBC_IV: usize = 16;
const BOX_NONCE: usize = 24;

impl Key {
    /// A key; `Err` says why the secret does not fit the provider.
    pub fn new(kind: Kind, name: &str, secret: Vec<u8>) -> Result<Key, String> {
        if !kind.key_lengths().contains(&secret.len()) {
            let lengths: Vec<String> = kind.key_lengths().iter().map(|l| l.to_string()).collect();
            return Err(format!(
                "key {name:?} of provider {} is {} bytes long; it must be {} bytes",
                kind.name(),
                secret.len(),
                lengths.join(", ")
            ));
        }
        let prefix = format!("k8s:enc:{}:v1:{name}:", kind.name()).into_bytes();
        Ok(Key {
            kind,
            name: name.to_string(),
            secret,
            prefix,
        })
    }

    /// Encrypts `plain` stored under `storage_key`, prefix included.
    pub fn seal(&self, storage_key: &[u8], plain: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = self.prefix.clone();
        match self.kind {
            Kind::AesGcm => {
                let mut nonce = [0u8; GCM_NONCE];
                rand::rng().fill_bytes(&mut nonce);
                let payload = Payload {
                    msg: plain,
                    aad: storage_key,
                };
                let sealed = match self.secret.len() {
                    16 => aes_gcm::Aes128Gcm::new_from_slice(&self.secret)
                        .map_err(|e| e.to_string())?
                        .encrypt((&nonce).into(), payload),
                    24 => {
                        aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12>::new_from_slice(
                            &self.secret,
                        )
                        .map_err(|e| e.to_string())?
                        .encrypt((&nonce).into(), payload)
                    }
                    _ => aes_gcm::Aes256Gcm::new_from_slice(&self.secret)
                        .map_err(|e| e.to_string())?
                        .encrypt((&nonce).into(), payload),
                }
                .map_err(|_| "AES-GCM encryption failed".to_string())?;
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
            }
            Kind::AesCbc => {
                let mut iv = [0u8; CBC_IV];
                rand::rng().fill_bytes(&mut iv);
                let sealed = match self.secret.len() {
                    16 => cbc_encrypt::<aes::Aes128>(&self.secret, &iv, plain)?,
                    24 => cbc_encrypt::<aes::Aes192>(&self.secret, &iv, plain)?,
                    _ => cbc_encrypt::<aes::Aes256>(&self.secret, &iv, plain)?,
                };
                out.extend_from_slice(&iv);
                out.extend_from_slice(&sealed);
            }
            Kind::SecretBox => {
                let mut nonce = [0u8; BOX_NONCE];
                rand::rng().fill_bytes(&mut nonce);
                let sealed = crypto_secretbox::XSalsa20Poly1305::new_from_slice(&self.secret)
                    .map_err(|e| e.to_string())?
                    .encrypt((&nonce).into(), plain)
                    .map_err(|_| "secretbox encryption failed".to_string())?;
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
            }
        }
        Ok(out)
    }

    /// Decrypts `stored` (prefix included) read under `storage_key`.
    pub fn open(&self, storage_key: &[u8], stored: &[u8]) -> Result<Vec<u8>, String> {
        let body = stored
            .strip_prefix(self.prefix.as_slice())
            .ok_or_else(|| format!("not written with {self:?}"))?;
        let failed = || format!("{self:?} cannot decrypt it (wrong key or damaged data)");
        match self.kind {
            Kind::AesGcm => {
                if body.len() < GCM_NONCE + 16 {
                    return Err(failed());
                }
                let (nonce, sealed) = body.split_at(GCM_NONCE);
                let nonce: &[u8; GCM_NONCE] = nonce.try_into().expect("split at the nonce length");
                let payload = Payload {
                    msg: sealed,
                    aad: storage_key,
                };
                match self.secret.len() {
                    16 => aes_gcm::Aes128Gcm::new_from_slice(&self.secret)
                        .map_err(|e| e.to_string())?
                        .decrypt(nonce.into(), payload),
                    24 => {
                        aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12>::new_from_slice(
                            &self.secret,
                        )
                        .map_err(|e| e.to_string())?
                        .decrypt(nonce.into(), payload)
                    }
                    _ => aes_gcm::Aes256Gcm::new_from_slice(&self.secret)
                        .map_err(|e| e.to_string())?
                        .decrypt(nonce.into(), payload),
                }
                .map_err(|_| failed())
            }
            Kind::AesCbc => {
                if body.len() < CBC_IV + 16 || !(body.len() - CBC_IV).is_multiple_of(16) {
                    return Err(failed());
                }
                let (iv, sealed) = body.split_at(CBC_IV);
                match self.secret.len() {
                    16 => cbc_decrypt::<aes::Aes128>(&self.secret, iv, sealed),
                    24 => cbc_decrypt::<aes::Aes192>(&self.secret, iv, sealed),
                    _ => cbc_decrypt::<aes::Aes256>(&self.secret, iv, sealed),
                }
                .ok_or_else(failed)
            }
            Kind::SecretBox => {
                if body.len() < BOX_NONCE + 16 {
                    return Err(failed());
                }
                let (nonce, sealed) = body.split_at(BOX_NONCE);
                let nonce: &[u8; BOX_NONCE] = nonce.try_into().expect("split at the nonce length");
                crypto_secretbox::XSalsa20Poly1305::new_from_slice(&self.secret)
                    .map_err(|e| e.to_string())?
                    .decrypt(nonce.into(), sealed)
                    .map_err(|_| failed())
            }
        }
    }
}

fn cbc_encrypt<C>(key: &[u8], iv: &[u8], plain: &[u8]) -> Result<Vec<u8>, String>
where
    C: aes::cipher::BlockEncryptMut + aes::cipher::BlockCipher + aes::cipher::KeyInit,
{
    let encryptor =
        cbc::Encryptor::<C>::new_from_slices(key, iv).map_err(|e| format!("AES-CBC: {e}"))?;
    Ok(encryptor.encrypt_padded_vec_mut::<Pkcs7>(plain))
}

fn cbc_decrypt<C>(key: &[u8], iv: &[u8], sealed: &[u8]) -> Option<Vec<u8>>
where
    C: aes::cipher::BlockDecryptMut + aes::cipher::BlockCipher + aes::cipher::KeyInit,
{
    let decryptor = cbc::Decryptor::<C>::new_from_slices(key, iv).ok()?;
    decryptor.decrypt_padded_vec_mut::<Pkcs7>(sealed).ok()
}

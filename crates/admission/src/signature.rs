//! Image signatures: Ed25519 or ECDSA P-256 (ring) over the image's
//! manifest digest (`sha256:<hex>`), read from the cluster without network.
//!
//! Signatures live in ConfigMaps labelled `kubeforge.dev/image-signatures:
//! "true"` (any namespace): each data key is the digest with `:` written
//! as `-` (`sha256-<hex>`), each value one or more base64 signatures
//! separated by whitespace. Public keys are PEM `PUBLIC KEY` blocks
//! (SubjectPublicKeyInfo), as `openssl` and cosign write them.

use base64::Engine;
use ring::signature::{self, KeyPair as _};

/// Label marking a ConfigMap as holding image signatures.
pub const SIGNATURES_LABEL: &str = "kubeforge.dev/image-signatures";

/// DER prefix of an Ed25519 SubjectPublicKeyInfo (then 32 key bytes).
const ED25519_SPKI: &[u8] = &[
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// DER prefix of an ECDSA P-256 SubjectPublicKeyInfo (then the 65-byte point).
const P256_SPKI: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Why a key or signature could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// Not a PEM `PUBLIC KEY` / `PRIVATE KEY` block.
    #[error("expected a PEM \"{0}\" block")]
    NotPem(&'static str),
    /// Base64 inside the PEM or signature was invalid.
    #[error("invalid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// A key of another algorithm.
    #[error("unsupported key: only Ed25519 and ECDSA P-256 public keys are accepted")]
    Unsupported,
    /// ring refused the key.
    #[error("invalid key: {0}")]
    Key(String),
}

/// Signature algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Ed25519.
    Ed25519,
    /// ECDSA over P-256 with SHA-256, ASN.1 DER signatures.
    EcdsaP256,
}

/// A configured public key.
#[derive(Clone, Debug)]
pub struct PublicKey {
    /// Its name in messages.
    pub name: String,
    /// Its algorithm.
    pub algorithm: Algorithm,
    raw: Vec<u8>,
}

fn pem_body(pem: &str, label: &'static str) -> Result<Vec<u8>, SignatureError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin).ok_or(SignatureError::NotPem(label))? + begin.len();
    let stop = pem[start..]
        .find(&end)
        .ok_or(SignatureError::NotPem(label))?
        + start;
    let b64: String = pem[start..stop].split_whitespace().collect();
    Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

impl PublicKey {
    /// Parse a PEM `PUBLIC KEY`.
    pub fn from_pem(name: &str, pem: &str) -> Result<PublicKey, SignatureError> {
        let der = pem_body(pem, "PUBLIC KEY")?;
        let (algorithm, raw) =
            if let Some(k) = der.strip_prefix(ED25519_SPKI).filter(|k| k.len() == 32) {
                (Algorithm::Ed25519, k.to_vec())
            } else if let Some(k) = der
                .strip_prefix(P256_SPKI)
                .filter(|k| k.len() == 65 && k[0] == 4)
            {
                (Algorithm::EcdsaP256, k.to_vec())
            } else {
                return Err(SignatureError::Unsupported);
            };
        Ok(PublicKey {
            name: name.to_string(),
            algorithm,
            raw,
        })
    }

    /// Whether `sig` is this key's signature of `payload`.
    pub fn verify(&self, payload: &[u8], sig: &[u8]) -> bool {
        let alg: &dyn signature::VerificationAlgorithm = match self.algorithm {
            Algorithm::Ed25519 => &signature::ED25519,
            Algorithm::EcdsaP256 => &signature::ECDSA_P256_SHA256_ASN1,
        };
        signature::UnparsedPublicKey::new(alg, &self.raw)
            .verify(payload, sig)
            .is_ok()
    }
}

/// The ConfigMap data key for a digest (`sha256:ab…` → `sha256-ab…`).
pub fn data_key(digest: &str) -> String {
    digest.replace(':', "-")
}

/// Decode whitespace-separated base64 signatures; bad entries are skipped.
pub fn decode_signatures(value: &str) -> Vec<Vec<u8>> {
    value
        .split_whitespace()
        .filter_map(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .collect()
}

/// A private key for signing images (development and tests; production
/// signing belongs in a KMS).
pub struct SigningKey {
    pair: Pair,
}

enum Pair {
    Ed25519(signature::Ed25519KeyPair),
    EcdsaP256(signature::EcdsaKeyPair),
}

impl SigningKey {
    /// A new key; returns it and its PKCS#8 PEM (`PRIVATE KEY`).
    pub fn generate(algorithm: Algorithm) -> Result<(SigningKey, String), SignatureError> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = match algorithm {
            Algorithm::Ed25519 => signature::Ed25519KeyPair::generate_pkcs8(&rng),
            Algorithm::EcdsaP256 => signature::EcdsaKeyPair::generate_pkcs8(
                &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
                &rng,
            ),
        }
        .map_err(|e| SignatureError::Key(e.to_string()))?;
        let pem = pem_encode("PRIVATE KEY", pkcs8.as_ref());
        Ok((SigningKey::from_pem(&pem)?, pem))
    }

    /// Load a PKCS#8 PEM `PRIVATE KEY` (Ed25519 or ECDSA P-256).
    pub fn from_pem(pem: &str) -> Result<SigningKey, SignatureError> {
        let der = pem_body(pem, "PRIVATE KEY")?;
        if let Ok(k) = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
            return Ok(SigningKey {
                pair: Pair::Ed25519(k),
            });
        }
        let rng = ring::rand::SystemRandom::new();
        signature::EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, &der, &rng)
            .map(|k| SigningKey {
                pair: Pair::EcdsaP256(k),
            })
            .map_err(|_| SignatureError::Unsupported)
    }

    /// The public key as PEM `PUBLIC KEY`.
    pub fn public_key_pem(&self) -> String {
        let (prefix, raw) = match &self.pair {
            Pair::Ed25519(k) => (ED25519_SPKI, k.public_key().as_ref()),
            Pair::EcdsaP256(k) => (P256_SPKI, k.public_key().as_ref()),
        };
        let mut der = prefix.to_vec();
        der.extend_from_slice(raw);
        pem_encode("PUBLIC KEY", &der)
    }

    /// Sign an image digest (`sha256:<hex>`); base64.
    pub fn sign_digest(&self, digest: &str) -> Result<String, SignatureError> {
        let sig = match &self.pair {
            Pair::Ed25519(k) => k.sign(digest.as_bytes()).as_ref().to_vec(),
            Pair::EcdsaP256(k) => k
                .sign(&ring::rand::SystemRandom::new(), digest.as_bytes())
                .map_err(|e| SignatureError::Key(e.to_string()))?
                .as_ref()
                .to_vec(),
        };
        Ok(base64::engine::general_purpose::STANDARD.encode(sig))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify_both_algorithms() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        for alg in [Algorithm::Ed25519, Algorithm::EcdsaP256] {
            let (key, _) = SigningKey::generate(alg).expect("key");
            let (other, _) = SigningKey::generate(alg).expect("key");
            let public = PublicKey::from_pem("k", &key.public_key_pem()).expect("public");
            assert_eq!(public.algorithm, alg);
            let sig = decode_signatures(&key.sign_digest(&digest).expect("sign"));
            assert!(public.verify(digest.as_bytes(), &sig[0]));
            assert!(!public.verify(b"sha256:other", &sig[0]), "another digest");
            let forged = decode_signatures(&other.sign_digest(&digest).expect("sign"));
            assert!(!public.verify(digest.as_bytes(), &forged[0]), "another key");
        }
        assert!(
            PublicKey::from_pem(
                "k",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"
            )
            .is_err()
        );
    }
}

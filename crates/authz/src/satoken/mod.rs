//! ServiceAccount tokens: the signed JWTs kube-apiserver issues through
//! the TokenRequest API and accepts as bearer tokens (kube's
//! `pkg/serviceaccount/jwt.go` and `claims.go`).
//!
//! Tokens are ES256 (P-256) JWS with `kid` = unpadded base64url of the
//! SHA-256 of the public key's PKIX DER, as kube computes it. Claims:
//! `iss`, `sub` (`system:serviceaccount:<ns>:<name>`), `aud` (a list),
//! `exp`, `iat`, `nbf` (= `iat`), `jti` (a UUID) and the private
//! `kubernetes.io` claim naming the namespace, the ServiceAccount and the
//! object the token is bound to. [`TokenIssuer::verify`] checks signature,
//! issuer, time (60 s leeway, go-jose's) and audience; that the
//! ServiceAccount and bound object still exist with those UIDs is the
//! server's check ([`Claims`] carries what it needs). The [`legacy`]
//! tokens of `kubernetes.io/service-account-token` Secrets use the same
//! key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde::{Deserialize, Serialize};

pub mod legacy;

use crate::UserInfo;
use crate::user::{ALL_AUTHENTICATED, service_account_groups, service_account_username};

/// A name and UID, as the private claims record objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// The private `kubernetes.io` claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount.
    pub serviceaccount: ObjectRef,
    /// The pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The Secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    /// The node the token (or its pod) is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
    /// When a kubelet should have refreshed the token (extended tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// A ServiceAccount token's claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Issuer.
    pub iss: String,
    /// `system:serviceaccount:<ns>:<name>`.
    pub sub: String,
    /// Audiences.
    pub aud: Vec<String>,
    /// Expiry (Unix seconds).
    pub exp: i64,
    /// Issued at.
    pub iat: i64,
    /// Not before (= `iat`).
    pub nbf: i64,
    /// Token ID.
    pub jti: String,
    /// Namespace, ServiceAccount and bound object.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

impl Claims {
    /// The user this token authenticates: the ServiceAccount's username,
    /// its UID, its groups and `system:authenticated`, and kube's extras
    /// (bound pod and node, `credential-id: JTI=…`).
    pub fn user(&self) -> UserInfo {
        let k = &self.kubernetes;
        let [all, ns] = service_account_groups(&k.namespace);
        let mut u = UserInfo::new(
            &service_account_username(&k.namespace, &k.serviceaccount.name),
            [all, ns, ALL_AUTHENTICATED.to_string()],
        );
        u.uid = k.serviceaccount.uid.clone();
        let mut extra = |key: &str, v: &str| {
            u.extra.insert(
                format!("authentication.kubernetes.io/{key}"),
                vec![v.to_string()],
            );
        };
        if let Some(p) = &k.pod {
            extra("pod-name", &p.name);
            extra("pod-uid", &p.uid);
        }
        if let Some(n) = &k.node {
            extra("node-name", &n.name);
            extra("node-uid", &n.uid);
        }
        if !self.jti.is_empty() {
            extra("credential-id", &format!("JTI={}", self.jti));
        }
        u
    }
}

/// A token that does not authenticate; the texts are kube's where kube
/// has one.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Past `exp` (plus leeway).
    #[error("service account token has expired")]
    Expired,
    /// Before `nbf`.
    #[error("service account token is not valid yet")]
    NotYetValid,
    /// No audience in common with the server's.
    #[error("token audiences {token:?} is invalid for the target audiences {target:?}")]
    Audience {
        /// The token's.
        token: Vec<String>,
        /// The server's.
        target: Vec<String>,
    },
    /// Not from this issuer (another authenticator may know it).
    #[error("token issuer is not this server")]
    OtherIssuer,
    /// Bad signature, unknown key, or not a JWT.
    #[error("invalid bearer token")]
    Invalid,
    /// The signing key cannot be used.
    #[error("the service account signing key is not usable: {0}")]
    Key(String),
    /// A claim kube requires is missing or wrong (kube's text).
    #[error("{0}")]
    Claim(&'static str),
}

/// Signs and verifies ServiceAccount tokens with one P-256 key.
pub struct TokenIssuer {
    issuer: String,
    audiences: Vec<String>,
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    pkcs8: Vec<u8>,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("issuer", &self.issuer)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// The PKIX (SubjectPublicKeyInfo) DER of a P-256 public point.
fn spki_p256(point: &[u8]) -> Vec<u8> {
    // SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING point }
    const PREFIX: &[u8] = &[
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    [PREFIX, point].concat()
}

impl TokenIssuer {
    /// An issuer named `issuer` signing with a new key; tokens without
    /// audiences are for `issuer` (kube's default `--api-audiences`).
    pub fn generate(issuer: &str) -> Result<TokenIssuer, TokenError> {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| TokenError::Key(e.to_string()))?;
        TokenIssuer::from_pkcs8(issuer, pkcs8.as_ref())
    }

    /// An issuer signing with the P-256 key in `pkcs8` (DER).
    pub fn from_pkcs8(issuer: &str, pkcs8: &[u8]) -> Result<TokenIssuer, TokenError> {
        let rng = ring::rand::SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|e| TokenError::Key(e.to_string()))?;
        let point = pair.public_key().as_ref().to_vec();
        let digest = ring::digest::digest(&ring::digest::SHA256, &spki_p256(&point));
        Ok(TokenIssuer {
            issuer: issuer.to_string(),
            audiences: vec![issuer.to_string()],
            kid: URL_SAFE_NO_PAD.encode(digest.as_ref()),
            encoding: EncodingKey::from_ec_der(pkcs8),
            decoding: DecodingKey::from_ec_der(&point),
            pkcs8: pkcs8.to_vec(),
        })
    }

    /// The key, PKCS#8 DER (to keep it across restarts).
    pub fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences a token without any is for, and that every token must
    /// share one with to authenticate to the API.
    pub fn api_audiences(&self) -> &[String] {
        &self.audiences
    }

    /// The key ID in every token's header.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK (`use: sig`, `alg: ES256`, the `kid` tokens
    /// carry), for `/openid/v1/jwks`.
    pub fn jwk(&self) -> serde_json::Value {
        // The uncompressed point: 0x04 ‖ X (32 bytes) ‖ Y (32 bytes).
        let point = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &self.pkcs8,
            &ring::rand::SystemRandom::new(),
        )
        .map(|p| p.public_key().as_ref().to_vec())
        .unwrap_or_default();
        let (x, y) = match point.as_slice() {
            [0x04, rest @ ..] if rest.len() == 64 => rest.split_at(32),
            _ => (&[][..], &[][..]),
        };
        serde_json::json!({
            "use": "sig", "kty": "EC", "kid": self.kid, "crv": "P-256", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        })
    }

    /// Sign `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String, TokenError> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding)
            .map_err(|e| TokenError::Key(e.to_string()))
    }

    /// The claims of `token` when it is ours, validly signed, in its time
    /// window and for one of `audiences` (the API's when empty).
    pub fn verify(&self, token: &str, audiences: &[String]) -> Result<Claims, TokenError> {
        let claims: Claims = self.decode(token, &self.issuer, &["exp", "iss", "sub"])?;
        let target = if audiences.is_empty() {
            &self.audiences[..]
        } else {
            audiences
        };
        if !claims.aud.iter().any(|a| target.contains(a)) {
            return Err(TokenError::Audience {
                token: claims.aud.clone(),
                target: target.to_vec(),
            });
        }
        Ok(claims)
    }

    /// The claims of `token`, signed with this issuer's key and naming
    /// `issuer`: signature, time (when the token has `exp`/`nbf`) and the
    /// `required` claims are checked.
    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        token: &str,
        issuer: &str,
        required: &[&str],
    ) -> Result<T, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Invalid)?;
        // An issuer we do not know is another authenticator's: peek before
        // the signature.
        let payload = token.split('.').nth(1).ok_or(TokenError::Invalid)?;
        let raw = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Invalid)?;
        let peek: serde_json::Value =
            serde_json::from_slice(&raw).map_err(|_| TokenError::Invalid)?;
        if peek.get("iss").and_then(serde_json::Value::as_str) != Some(issuer) {
            return Err(TokenError::OtherIssuer);
        }
        if header.alg != Algorithm::ES256 || header.kid.as_deref().is_some_and(|k| k != self.kid) {
            return Err(TokenError::Invalid);
        }
        let mut v = Validation::new(Algorithm::ES256);
        v.leeway = 60;
        v.validate_exp = required.contains(&"exp");
        v.validate_nbf = peek.get("nbf").is_some();
        v.validate_aud = false;
        v.set_issuer(&[issuer]);
        v.set_required_spec_claims(required);
        jsonwebtoken::decode::<T>(token, &self.decoding, &v)
            .map(|d| d.claims)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => TokenError::Expired,
                jsonwebtoken::errors::ErrorKind::ImmatureSignature => TokenError::NotYetValid,
                _ => TokenError::Invalid,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(issuer: &TokenIssuer, now: i64, ttl: i64, aud: &[&str]) -> Claims {
        Claims {
            iss: issuer.issuer().to_string(),
            sub: "system:serviceaccount:ns:bot".into(),
            aud: aud.iter().map(|s| s.to_string()).collect(),
            exp: now + ttl,
            iat: now,
            nbf: now,
            jti: "j-1".into(),
            kubernetes: KubernetesClaims {
                namespace: "ns".into(),
                serviceaccount: ObjectRef {
                    name: "bot".into(),
                    uid: "u-1".into(),
                },
                ..KubernetesClaims::default()
            },
        }
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }

    #[test]
    fn tokens_verify_and_name_the_service_account() {
        let i = TokenIssuer::generate("https://kubernetes.default.svc").expect("issuer");
        let t = i
            .sign(&claims(
                &i,
                now(),
                3600,
                &["https://kubernetes.default.svc"],
            ))
            .expect("sign");
        let c = i.verify(&t, &[]).expect("valid");
        let u = c.user();
        assert_eq!(u.name, "system:serviceaccount:ns:bot");
        assert_eq!(u.uid, "u-1");
        assert_eq!(
            u.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ]
        );
        assert_eq!(
            u.extra["authentication.kubernetes.io/credential-id"],
            vec!["JTI=j-1".to_string()]
        );
        // The header names the key as kube does.
        let header = jsonwebtoken::decode_header(&t).expect("header");
        assert_eq!(header.kid.as_deref(), Some(i.kid()));
        // Same key, same kid, across a restart.
        let again = TokenIssuer::from_pkcs8(i.issuer(), i.pkcs8()).expect("reload");
        assert_eq!(again.kid(), i.kid());
        again.verify(&t, &[]).expect("still valid");
    }

    #[test]
    fn expired_foreign_and_wrong_audience_tokens_fail() {
        let i = TokenIssuer::generate("https://kubernetes.default.svc").expect("issuer");
        let old = i
            .sign(&claims(
                &i,
                now() - 7200,
                600,
                &["https://kubernetes.default.svc"],
            ))
            .expect("sign");
        assert!(matches!(i.verify(&old, &[]), Err(TokenError::Expired)));
        let vault = i.sign(&claims(&i, now(), 600, &["vault"])).expect("sign");
        assert!(matches!(
            i.verify(&vault, &[]),
            Err(TokenError::Audience { .. })
        ));
        i.verify(&vault, &["vault".to_string()]).expect("for vault");
        let other = TokenIssuer::generate("https://kubernetes.default.svc").expect("issuer");
        let forged = other
            .sign(&claims(
                &other,
                now(),
                600,
                &["https://kubernetes.default.svc"],
            ))
            .expect("sign");
        assert!(matches!(i.verify(&forged, &[]), Err(TokenError::Invalid)));
        assert!(matches!(
            i.verify("not.a.jwt", &[]),
            Err(TokenError::Invalid)
        ));
        assert!(matches!(i.verify("garbage", &[]), Err(TokenError::Invalid)));
    }
}

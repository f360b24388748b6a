//! Legacy ServiceAccount tokens: the JWTs without expiry or audience that
//! kube-controller-manager's tokens controller writes into Secrets of type
//! `kubernetes.io/service-account-token` (kube's
//! `pkg/serviceaccount/legacy.go`). They are signed with the same key as
//! TokenRequest tokens, under issuer `kubernetes/serviceaccount`, and
//! authenticate only for the API's own audiences. Whether the Secret still
//! holds the token, is not marked invalid, and the ServiceAccount still
//! stands with the claimed UID is the server's check.

use serde::{Deserialize, Serialize};

use super::{TokenError, TokenIssuer};
use crate::UserInfo;
use crate::user::{ALL_AUTHENTICATED, service_account_groups, service_account_username};

/// kube's `serviceaccount.LegacyIssuer`.
pub const ISSUER: &str = "kubernetes/serviceaccount";
/// The Secret type the tokens controller fills in.
pub const SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// The annotation naming a token Secret's ServiceAccount (required).
pub const SERVICE_ACCOUNT_NAME_KEY: &str = "kubernetes.io/service-account.name";
/// The annotation recording that ServiceAccount's UID (set by the
/// controller; a Secret whose UID no longer matches is deleted).
pub const SERVICE_ACCOUNT_UID_KEY: &str = "kubernetes.io/service-account.uid";
/// The label the server stamps with the date (UTC, `YYYY-MM-DD`) a
/// Secret's token last authenticated.
pub const LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";
/// The label marking a Secret's token invalid; removing it makes the
/// token usable again.
pub const INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";
/// The data key of the token.
pub const TOKEN_KEY: &str = "token";
/// The data key of the cluster's CA bundle.
pub const CA_KEY: &str = "ca.crt";
/// The data key of the namespace.
pub const NAMESPACE_KEY: &str = "namespace";

/// A legacy token's claims (its `sub` and the four private claims).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyClaims {
    /// Always [`ISSUER`].
    pub iss: String,
    /// `system:serviceaccount:<ns>:<name>`.
    #[serde(default)]
    pub sub: String,
    /// The ServiceAccount's namespace.
    #[serde(rename = "kubernetes.io/serviceaccount/namespace", default)]
    pub namespace: String,
    /// The Secret holding the token.
    #[serde(rename = "kubernetes.io/serviceaccount/secret.name", default)]
    pub secret_name: String,
    /// The ServiceAccount.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.name", default)]
    pub service_account_name: String,
    /// The ServiceAccount's UID.
    #[serde(rename = "kubernetes.io/serviceaccount/service-account.uid", default)]
    pub service_account_uid: String,
}

impl LegacyClaims {
    /// The claims of the token of Secret `secret` for ServiceAccount
    /// `namespace/name` with UID `uid`.
    pub fn new(namespace: &str, name: &str, uid: &str, secret: &str) -> LegacyClaims {
        LegacyClaims {
            iss: ISSUER.to_string(),
            sub: service_account_username(namespace, name),
            namespace: namespace.to_string(),
            secret_name: secret.to_string(),
            service_account_name: name.to_string(),
            service_account_uid: uid.to_string(),
        }
    }

    /// The claims kube requires, in kube's order and words.
    fn check(&self) -> Result<(), TokenError> {
        let missing = [
            (&self.sub, "sub claim is missing"),
            (&self.namespace, "namespace claim is missing"),
            (&self.secret_name, "secretName claim is missing"),
            (
                &self.service_account_name,
                "serviceAccountName claim is missing",
            ),
            (
                &self.service_account_uid,
                "serviceAccountUID claim is missing",
            ),
        ];
        if let Some((_, why)) = missing.iter().find(|(v, _)| v.is_empty()) {
            return Err(TokenError::Claim(why));
        }
        if self.sub != service_account_username(&self.namespace, &self.service_account_name) {
            return Err(TokenError::Claim("sub claim is invalid"));
        }
        Ok(())
    }

    /// The user the token authenticates: the ServiceAccount's username and
    /// UID, its groups and `system:authenticated`.
    pub fn user(&self) -> UserInfo {
        let [all, ns] = service_account_groups(&self.namespace);
        let mut u = UserInfo::new(&self.sub, [all, ns, ALL_AUTHENTICATED.to_string()]);
        u.uid = self.service_account_uid.clone();
        u
    }
}

/// Whether `stored` (a Secret's `data.token`) is `token`, compared in time
/// independent of where they differ (kube's `subtle.ConstantTimeCompare`).
pub fn token_matches(stored: &[u8], token: &str) -> bool {
    let token = token.as_bytes();
    stored.len() == token.len()
        && stored
            .iter()
            .zip(token)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

impl TokenIssuer {
    /// Sign a legacy token (no expiry, no audience).
    pub fn sign_legacy(&self, claims: &LegacyClaims) -> Result<String, TokenError> {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.kid().to_string());
        jsonwebtoken::encode(&header, claims, &self.encoding)
            .map_err(|e| TokenError::Key(e.to_string()))
    }

    /// The claims of legacy token `token` when this key signed it and the
    /// claims kube requires are there ([`TokenError::OtherIssuer`] for any
    /// other issuer).
    pub fn verify_legacy(&self, token: &str) -> Result<LegacyClaims, TokenError> {
        let claims: LegacyClaims = self.decode(token, ISSUER, &["iss"])?;
        claims.check()?;
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_tokens_match_exactly() {
        assert!(token_matches(b"abc", "abc"));
        assert!(!token_matches(b"abc", "abd"));
        assert!(!token_matches(b"abc", "abcd"));
        assert!(!token_matches(b"", "a"));
    }

    #[test]
    fn legacy_tokens_verify_only_with_their_own_issuer_and_claims() {
        let i = TokenIssuer::generate("https://kubernetes.default.svc").expect("issuer");
        let c = LegacyClaims::new("ns", "bot", "u-1", "bot-token");
        let t = i.sign_legacy(&c).expect("sign");
        assert_eq!(i.verify_legacy(&t).expect("valid"), c);
        let u = c.user();
        assert_eq!(u.name, "system:serviceaccount:ns:bot");
        assert_eq!(u.uid, "u-1");
        assert!(u.groups.iter().any(|g| g == "system:serviceaccounts:ns"));
        // Not a TokenRequest token, and the reverse.
        assert!(matches!(i.verify(&t, &[]), Err(TokenError::OtherIssuer)));
        // Another key's token does not verify.
        let other = TokenIssuer::generate("https://kubernetes.default.svc").expect("issuer");
        assert!(matches!(
            i.verify_legacy(&other.sign_legacy(&c).expect("sign")),
            Err(TokenError::Invalid)
        ));
        // A sub that does not name the claimed account is refused.
        let mut wrong = c.clone();
        wrong.sub = "system:serviceaccount:ns:admin".into();
        let t = i.sign_legacy(&wrong).expect("sign");
        assert_eq!(
            i.verify_legacy(&t).expect_err("invalid").to_string(),
            "sub claim is invalid"
        );
        let mut no_secret = c;
        no_secret.secret_name.clear();
        let t = i.sign_legacy(&no_secret).expect("sign");
        assert_eq!(
            i.verify_legacy(&t).expect_err("invalid").to_string(),
            "secretName claim is missing"
        );
    }
}

//! Authentication, the stage after TLS: who is asking.
//!
//! In order, as kube-apiserver's union of authenticators:
//! 1. the in-process transport names its user itself ([`Identity`], an
//!    extension no network request can carry): [`crate::ApiServer::client`]
//!    is `system:apiserver` in `system:masters`, [`crate::ApiServer::client_as`]
//!    whoever the test asks for;
//! 2. a server without [`Authentication`] (the first-wave default, kept for
//!    loopback-only use) treats every request as that same privileged user;
//! 3. a client certificate (HTTPS, [`crate::tls`]) verified against the
//!    client CA names the user by its subject (CN, O; kube's x509
//!    authenticator);
//! 4. `Authorization: Bearer <token>` is looked up in the static tokens;
//! 5. a credential that fails every authenticator is 401 — never
//!    anonymous, as in kube; a request without credentials is
//!    `system:anonymous` when anonymous access is on, else 401.
//!
//! A 401 carries kube's body exactly (`"message":"Unauthorized"`), nothing
//! about why, so a client learns nothing from a bad token.

use std::sync::Arc;

use kubeforge_authz::user::{ALL_AUTHENTICATED, SYSTEM_MASTERS};
use kubeforge_authz::{TokenFile, UserInfo};

use crate::error::{ApiError, ApiResult};

/// The user a request from the in-process transport acts as.
#[derive(Clone, Debug)]
pub(crate) struct Identity(pub Arc<UserInfo>);

/// How network requests are authenticated.
#[derive(Clone, Debug, Default)]
pub struct Authentication {
    /// Unique per settings, so verified connections know when to verify
    /// again.
    id: u64,
    tokens: TokenFile,
    anonymous: bool,
    /// Verifies client certificate chains (kube's `--client-ca-file`).
    client_ca: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
}

fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A client CA that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    /// No certificate in the PEM text.
    #[error("the client CA bundle holds no certificate")]
    Empty,
    /// A certificate rustls refuses as a trust anchor.
    #[error("the client CA bundle is not usable: {0}")]
    Invalid(String),
}

impl Authentication {
    /// Authentication by `tokens`; anonymous requests are refused.
    pub fn new(tokens: TokenFile) -> Authentication {
        Authentication {
            id: next_id(),
            tokens,
            anonymous: false,
            client_ca: None,
        }
    }

    /// Accept client certificates signed by the CA(s) in `pem` (kube's
    /// `--client-ca-file`), with the `clientAuth` usage.
    pub fn with_client_ca(mut self, pem: &str) -> Result<Authentication, ClientCaError> {
        use rustls::pki_types::{CertificateDer, pem::PemObject};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| ClientCaError::Invalid(e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| ClientCaError::Invalid(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(ClientCaError::Empty);
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            crate::tls::provider(),
        )
        .build()
        .map_err(|e| ClientCaError::Invalid(e.to_string()))?;
        self.client_ca = Some(verifier);
        self.id = next_id();
        Ok(self)
    }

    /// The user a verified client certificate chain names: `Ok(None)` for
    /// no usable certificate authority or no CN, `Err` for a chain that
    /// does not verify.
    fn certificate_user(
        &self,
        peer: &[rustls::pki_types::CertificateDer<'static>],
    ) -> Result<Option<UserInfo>, ()> {
        let (Some(verifier), Some((leaf, intermediates))) = (&self.client_ca, peer.split_first())
        else {
            return Ok(None);
        };
        if let Err(e) =
            verifier.verify_client_cert(leaf, intermediates, rustls::pki_types::UnixTime::now())
        {
            tracing::debug!(error = %e, "client certificate refused");
            return Err(());
        }
        kubeforge_authz::x509::user_from_certificate(leaf).map_err(|e| {
            tracing::debug!(error = %e, "client certificate names no user");
        })
    }

    /// The user a static token names.
    pub(crate) fn static_token(&self, token: &str) -> Option<&UserInfo> {
        self.tokens.authenticate(token)
    }

    /// Let requests without credentials through as `system:anonymous`
    /// (kube's `--anonymous-auth`); what they may do is then RBAC's call.
    #[must_use]
    pub fn with_anonymous(mut self, on: bool) -> Authentication {
        self.anonymous = on;
        self
    }
}

/// The user the in-process transport and an unauthenticated server act as:
/// kube-apiserver's loopback identity.
pub(crate) fn loopback_user() -> UserInfo {
    UserInfo::new("system:apiserver", [SYSTEM_MASTERS, ALL_AUTHENTICATED])
}

/// The bearer token of an `Authorization` header (kube's `bearertoken`:
/// the scheme compared case-insensitively, an empty token is no token).
fn bearer(parts: &http::request::Parts) -> Option<&str> {
    let value = parts
        .headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let mut fields = value.splitn(3, ' ');
    let scheme = fields.next()?;
    let token = fields.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Who sent `parts`, or 401.
pub(crate) fn authenticate(
    server: &crate::ApiServer,
    config: Option<&Authentication>,
    parts: &http::request::Parts,
) -> ApiResult<Arc<UserInfo>> {
    if let Some(Identity(user)) = parts.extensions.get::<Identity>() {
        return Ok(user.clone());
    }
    let Some(config) = config else {
        return Ok(crate::authz::loopback_identity().0);
    };
    // Each authenticator in turn; the first that names a user wins, and a
    // credential none accepts is a 401 (kube's union).
    let mut failed = false;
    if let Some(peer) = parts.extensions.get::<crate::tls::PeerCertificates>() {
        let now = jiff::Timestamp::now().as_second();
        let mut verified = peer.verified.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((id, until, user)) = verified.as_ref()
            && *id == config.id
            && now <= *until
        {
            return Ok(user.clone());
        }
        match config.certificate_user(&peer.chain) {
            Ok(Some(user)) => {
                let user = Arc::new(user);
                if let Some(until) = peer.valid_until() {
                    *verified = Some((config.id, until, user.clone()));
                }
                return Ok(user);
            }
            Ok(None) => {}
            Err(()) => failed = true,
        }
    }
    if let Some(token) = bearer(parts) {
        if let Some(user) = config.tokens.authenticate(token) {
            return Ok(Arc::new(user.clone()));
        }
        return match crate::satokens::authenticate(server, token, &[]) {
            Ok((user, _)) => Ok(Arc::new(user)),
            Err(e) => {
                tracing::debug!(error = %e, "bearer token refused");
                Err(ApiError::unauthorized())
            }
        };
    }
    if failed {
        return Err(ApiError::unauthorized());
    }
    if config.anonymous {
        Ok(Arc::new(UserInfo::anonymous()))
    } else {
        Err(ApiError::unauthorized())
    }
}

//! Authentication, the stage after TLS: who is asking.
//!
//! In order, as kube-apiserver's union of authenticators:
//! 1. the in-process transport names its user itself ([`Identity`], an
//!    extension no network request can carry): [`crate::ApiServer::client`]
//!    is `system:apiserver` in `system:masters`, [`crate::ApiServer::client_as`]
//!    whoever the test asks for;
//! 2. a server without [`Authentication`] (the first-wave default, kept for
//!    loopback-only use) treats every request as that same privileged user;
//! 3. `Authorization: Bearer <token>` is looked up in the static tokens;
//!    an unknown token is 401 — never anonymous, as in kube;
//! 4. a request without credentials is `system:anonymous` when anonymous
//!    access is on, else 401.
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
    tokens: TokenFile,
    anonymous: bool,
}

impl Authentication {
    /// Authentication by `tokens`; anonymous requests are refused.
    pub fn new(tokens: TokenFile) -> Authentication {
        Authentication {
            tokens,
            anonymous: false,
        }
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
        .ok()?;
    let mut fields = value.splitn(3, ' ');
    let scheme = fields.next()?;
    let token = fields.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Who sent `parts`, or 401.
pub(crate) fn authenticate(
    config: Option<&Authentication>,
    parts: &http::request::Parts,
) -> ApiResult<Arc<UserInfo>> {
    if let Some(Identity(user)) = parts.extensions.get::<Identity>() {
        return Ok(user.clone());
    }
    let Some(config) = config else {
        return Ok(crate::authz::loopback_identity().0);
    };
    if let Some(token) = bearer(parts) {
        return match config.tokens.authenticate(token) {
            Some(user) => Ok(Arc::new(user.clone())),
            None => Err(ApiError::unauthorized()),
        };
    }
    if config.anonymous {
        Ok(Arc::new(UserInfo::anonymous()))
    } else {
        Err(ApiError::unauthorized())
    }
}

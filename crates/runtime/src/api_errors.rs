//! What a failed request says, as client-go's `apierrors` reads it: by
//! the `Status` reason first, by HTTP code only when the error's reason is
//! not one Kubernetes defines (`reasonAndCodeForError`). So a 409
//! `AlreadyExists` is not a conflict, and a 409 `Conflict` (a stale
//! resourceVersion, a failed precondition) is not "already exists".
//! (kube-core's `Status::is_conflict` asks whether the *wanted* reason is
//! known, which it always is, so its code fallback never applies; these
//! ask about the error's own reason, as client-go does.)
//!
//! ```
//! use kubeforge_runtime::api_errors::{is_already_exists, is_conflict};
//! let status = |reason: &str| {
//!     kube::Error::Api(kube::core::Status::failure("", reason).with_code(409).boxed())
//! };
//! assert!(is_conflict(&status("Conflict")));
//! assert!(!is_conflict(&status("AlreadyExists")));
//! assert!(is_already_exists(&status("AlreadyExists")));
//! assert!(is_conflict(&status(""))); // no known reason: the code decides
//! ```

/// The HTTP status code of an API error (`None` for transport and
/// decoding errors).
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// `reason`, or `code` when the error's reason is not a known one.
fn reason_or_code(e: &kube::Error, reason: &str, code: u16) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.reason == reason
                || (!kube::core::response::reason::is_known(&s.reason) && s.code == code)
        }
        _ => false,
    }
}

/// NotFound (404): the object, or its namespace, does not exist.
pub fn is_not_found(e: &kube::Error) -> bool {
    reason_or_code(e, "NotFound", 404)
}

/// Conflict (409): an optimistic-concurrency write lost (stale
/// resourceVersion) or a precondition (uid) failed; re-read and retry.
pub fn is_conflict(e: &kube::Error) -> bool {
    reason_or_code(e, "Conflict", 409)
}

/// A create refused because its namespace is being deleted (403 with
/// cause `NamespaceTerminating`, client-go's
/// `HasStatusCause(err, NamespaceTerminatingCause)`); a controller making
/// objects per namespace drops the work.
pub fn is_namespace_terminating(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 403
                && (s
                    .details
                    .as_ref()
                    .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
                    || s.message.contains("because it is being terminated"))
        }
        _ => false,
    }
}

/// AlreadyExists (409 with that reason): a create found the name taken.
pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_already_exists())
}

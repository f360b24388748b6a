//! Small readers for the `Status` inside a `kube::Error::Api`, shared by
//! the operators' reconcilers.

/// The HTTP status code of an API error (`None` for transport errors).
pub(crate) fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// 404.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    code(e) == Some(404)
}

/// 409 with reason AlreadyExists.
pub(crate) fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_already_exists())
}

/// 409 Conflict on an optimistic-concurrency write (stale resourceVersion).
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && !s.is_already_exists())
}

//! The last line of defence on the request path: a handler that panics
//! answers its request with a 500 `Status` instead of dropping the
//! connection, as kube-apiserver's `WithPanicRecovery` filter does.
//!
//! Every request goes through [`crate::ApiServer::handle`] (the loopback
//! listener's service and the in-process one alike), which runs the handler
//! under [`catch_unwind`]. The panic is logged with the request's method
//! and path only: never its body, headers or query.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::Poll;

use http::Method;

use crate::error::ApiError;

/// The message of the 500 a panicking request gets: kube-apiserver's
/// wording (which it sends as plain text; here it is a `Status`, so clients
/// read a reason).
pub(crate) const PANIC_MESSAGE: &str =
    "This request caused apiserver to panic. Look in the logs for details.";

/// Run `f` to completion, or return the payload of the panic it raised
/// while being polled.
///
/// Unwind safety is asserted: the handler's state is dropped with the
/// panic, and what it shares (the store, the registry) is only changed
/// through locks that a panic poisons or releases whole.
pub(crate) async fn catch_unwind<F: Future>(f: F) -> Result<F::Output, Box<dyn Any + Send>> {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(move |cx| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| f.as_mut().poll(cx))) {
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    })
    .await
}

/// The error answered for a request whose handler panicked, logged with
/// the request's method and path.
pub(crate) fn panicked(method: &Method, path: &str) -> ApiError {
    tracing::error!(%method, %path, "apiserver panicked while serving a request");
    ApiError::internal(PANIC_MESSAGE)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_future_is_caught_and_a_finishing_one_passes_through() {
        let ok = catch_unwind(async { 7 }).await;
        assert_eq!(ok.ok(), Some(7));
        let caught = catch_unwind(async {
            tokio::task::yield_now().await;
            let v = serde_json::json!(5);
            // What an unchecked index into request data does.
            let mut v = v;
            v["spec"]["clusterIP"] = serde_json::json!("x");
            v
        })
        .await;
        assert!(caught.is_err());
    }

    #[test]
    fn the_answer_is_an_internal_error_status() {
        let e = panicked(&Method::PATCH, "/api/v1/namespaces/default/services/s");
        let s = e.to_status();
        assert_eq!(s["code"], 500);
        assert_eq!(s["reason"], "InternalError");
        assert_eq!(
            s["message"],
            format!("Internal error occurred: {PANIC_MESSAGE}")
        );
    }
}

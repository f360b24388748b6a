//! Closing a connection without losing the last response.
//!
//! When the server answers before it has read the whole request (a 413
//! for a body over the limit, an error found early), hyper ends the
//! connection, since it cannot be reused. Closing a socket whose receive
//! buffer still holds unread bytes makes the kernel send a TCP reset, and a
//! client still sending its body then sees "connection reset" instead of
//! the answer already sitting in its receive buffer. Go's HTTP server (and
//! so kube-apiserver) avoids that by half-closing and waiting; so does
//! [`close`]: it sends FIN (the client reads the response, then EOF) and
//! reads and discards what the client still sends, within a bound, before
//! the socket is dropped.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest wait for the client to finish sending and close its side.
const LINGER: Duration = Duration::from_secs(2);

/// Most bytes discarded while lingering (a client sending more than this
/// after its answer gets a reset, as it would from Go).
const MAX_DISCARD: usize = 64 * 1024 * 1024;

/// Half-close `stream` and drain it until the client closes its side, at
/// most [`MAX_DISCARD`] bytes or [`LINGER`] long, then drop it. A
/// connection the client already closed ends at once.
pub(crate) async fn close(mut stream: TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        while total < MAX_DISCARD {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

//! The response body: a whole buffer, or a stream of chunks (watch).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// Body of every response the server sends.
#[derive(Debug)]
pub enum ApiBody {
    /// A complete body (taken on first poll).
    Full(Option<Bytes>),
    /// Chunks produced by a task (watch streams); ends when the sender drops.
    Stream(mpsc::Receiver<Bytes>),
    /// A body made of many buffers sent as they are (LIST splices stored
    /// objects without copying them); the second field is the total length.
    Chunks(std::collections::VecDeque<Bytes>, u64),
}

impl ApiBody {
    /// A complete body.
    pub fn full(b: impl Into<Bytes>) -> ApiBody {
        ApiBody::Full(Some(b.into()))
    }

    /// An empty body.
    pub fn empty() -> ApiBody {
        ApiBody::Full(None)
    }
}

impl Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ApiBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ApiBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
            ApiBody::Chunks(q, _) => Poll::Ready(q.pop_front().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ApiBody::Full(b) => b.is_none(),
            ApiBody::Chunks(q, _) => q.is_empty(),
            ApiBody::Stream(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ApiBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ApiBody::Full(None) => SizeHint::with_exact(0),
            ApiBody::Stream(_) => SizeHint::default(),
            ApiBody::Chunks(_, len) => SizeHint::with_exact(*len),
        }
    }
}

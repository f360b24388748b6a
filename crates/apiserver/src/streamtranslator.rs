//! kube-apiserver's `StreamTranslator` for `pods/exec` and `pods/attach`,
//! and its port-forward tunnel ([`tunnel`]):
//! a client speaking WebSocket `v5.channel.k8s.io` (kubectl ≥ 1.30,
//! kube-rs) is answered by the API server itself, which opens SPDY/3.1
//! streams to the node (the protocol every kubelet and containerd's
//! streaming server speak) and carries the channels between the two.
//!
//! The v5 channels are the v4 ones — 0 stdin, 1 stdout, 2 stderr,
//! 3 error (the `Status` of the command), 4 resize — carried in binary
//! WebSocket messages whose first byte names the channel, plus v5's close
//! signal (`[255, channel]`), which half-closes the SPDY stdin stream so
//! the command sees end of input.
//!
//! The SPDY side is the client half of SPDY/3 as kube's `httpstream/spdy`
//! uses it: SYN_STREAM frames with a `streamtype` header (error first,
//! then stdin, stdout, stderr, resize as the request asks), data frames,
//! FIN for end of input. Header blocks are written as stored (uncompressed)
//! deflate blocks of one zlib stream, each followed by the sync-flush
//! marker, which every zlib reader accepts without the SPDY dictionary; the
//! peer's header blocks are never needed and are skipped unread.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, frame::coding::CloseCode};

/// The WebSocket subprotocol translated here.
pub(crate) const V5: &str = "v5.channel.k8s.io";
/// kubectl ≥ 1.31's port-forward: SPDY frames inside WebSocket messages.
pub(crate) const SPDY_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// The port-forward protocol the node is asked for over SPDY.
pub(crate) const PORT_FORWARD: &str = "portforward.k8s.io";
/// The protocol the node is asked for over SPDY.
pub(crate) const SPDY_V4: &str = "v4.channel.k8s.io";

/// v5's close signal: `[CLOSE, channel]`.
const CLOSE: u8 = 255;
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

const SYN_STREAM: u16 = 1;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 1;

/// Which streams the command has (the request's `stdin`, `stdout`,
/// `stderr` and `tty` parameters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Streams {
    /// From the request's query (`1`/`true` switch a stream on).
    pub(crate) fn from_query(q: &crate::request::Query) -> Streams {
        let on = |k: &str| matches!(q.get(k), Some("1" | "true" | "True"));
        let tty = on("tty");
        Streams {
            stdin: on("stdin") || on("input"),
            stdout: on("stdout") || on("output"),
            // With a terminal, stderr is joined to stdout.
            stderr: (on("stderr") || on("error")) && !tty,
            tty,
        }
    }

    /// The SPDY streams to open, in kube's order, with their channels.
    fn layout(self) -> Vec<(&'static str, u8)> {
        let mut v = vec![("error", ERROR)];
        if self.stdin {
            v.push(("stdin", STDIN));
        }
        if self.stdout {
            v.push(("stdout", STDOUT));
        }
        if self.stderr {
            v.push(("stderr", STDERR));
        }
        if self.tty {
            v.push(("resize", RESIZE));
        }
        v
    }
}

/// The `Sec-WebSocket-Accept` value for a client's key (RFC 6455 §4.2.2).
pub(crate) fn accept_key(key: &[u8]) -> String {
    use base64::Engine as _;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key);
    ctx.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(ctx.finish().as_ref())
}

/// The WebSocket subprotocols a request offers, in its order.
pub(crate) fn offered(headers: &http::HeaderMap) -> Vec<&str> {
    headers
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// kube-apiserver's port-forward un-tunnelling: the client's SPDY session
/// arrives as the payloads of binary WebSocket messages; they are the
/// bytes of an SPDY connection, so they go to the node's SPDY connection
/// as they are, and the node's bytes come back one message per read.
pub(crate) async fn tunnel<C, N>(client: C, node: N)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    N: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ws = WebSocketStream::from_raw_socket(client, Role::Server, None).await;
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (mut node_rx, mut node_tx) = tokio::io::split(node);
    let up = async {
        while let Some(Ok(msg)) = ws_rx.next().await {
            match msg {
                Message::Binary(b) if node_tx.write_all(&b).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = node_tx.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match node_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_tx
                        .send(Message::Binary(Bytes::copy_from_slice(&buf[..n])))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = ws_tx.close().await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// A SPDY/3 control frame.
fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&[0x80, 0x03]);
    f.extend_from_slice(&kind.to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(payload);
    f
}

/// A SPDY data frame.
fn data(stream: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.push(flags);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(payload);
    f
}

/// The writer's half of the session's header compression: one zlib stream
/// whose blocks are stored, each ending on a byte boundary (as a sync
/// flush leaves it).
#[derive(Default)]
struct HeaderBlocks {
    started: bool,
}

impl HeaderBlocks {
    fn encode(&mut self, headers: &[(&str, &str)]) -> Vec<u8> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&(headers.len() as u32).to_be_bytes());
        for (k, v) in headers {
            raw.extend_from_slice(&(k.len() as u32).to_be_bytes());
            raw.extend_from_slice(k.as_bytes());
            raw.extend_from_slice(&(v.len() as u32).to_be_bytes());
            raw.extend_from_slice(v.as_bytes());
        }
        let mut out = Vec::with_capacity(raw.len() + 8);
        if !self.started {
            // zlib header: deflate, 32K window, no dictionary, check bits.
            out.extend_from_slice(&[0x78, 0x01]);
            self.started = true;
        }
        for chunk in raw.chunks(0xffff) {
            let len = chunk.len() as u16;
            // BFINAL=0, BTYPE=00 (stored), padded to the byte.
            out.push(0x00);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        // The sync-flush marker (an empty stored block): inflaters such as
        // Go's hand out a block's bytes only when they reach it.
        out.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
        out
    }
}

fn syn_stream(z: &mut HeaderBlocks, stream: u32, kind: &str) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes()); // associated stream
    payload.extend_from_slice(&[0, 0]); // priority, slot
    payload.extend_from_slice(&z.encode(&[("streamtype", kind)]));
    control(SYN_STREAM, 0, &payload)
}

/// One frame read from the node.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    Data {
        stream: u32,
        fin: bool,
        payload: Bytes,
    },
    Reset {
        stream: u32,
    },
    Ping(Vec<u8>),
    GoAway,
    /// Anything else (replies, settings, window updates): nothing to do.
    Other,
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Frame> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).await?;
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    // The node's frames are bounded by its own writes; refuse absurd ones.
    if len > 16 << 20 {
        return Err(std::io::Error::other("SPDY frame over 16 MiB"));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    if head[0] & 0x80 == 0 {
        let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff;
        return Ok(Frame::Data {
            stream,
            fin: flags & FLAG_FIN != 0,
            payload: Bytes::from(payload),
        });
    }
    let kind = u16::from_be_bytes([head[2], head[3]]);
    let stream = || {
        payload.get(..4).map_or(0, |b| {
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff
        })
    };
    Ok(match kind {
        RST_STREAM => Frame::Reset { stream: stream() },
        PING => Frame::Ping(payload),
        GOAWAY => Frame::GoAway,
        _ => Frame::Other,
    })
}

/// Carry a v5 WebSocket (`client`, already switched) to the node's SPDY
/// connection (`node`, already switched) until the command ends or the
/// client goes.
pub(crate) async fn run<C, N>(client: C, node: N, streams: Streams)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    N: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ws = WebSocketStream::from_raw_socket(client, Role::Server, None).await;
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (mut node_rx, mut node_tx) = tokio::io::split(node);

    // Stream ids are odd and rising, in kube's order.
    let layout = streams.layout();
    let id_of = |channel: u8| {
        layout
            .iter()
            .position(|(_, c)| *c == channel)
            .map(|i| 1 + 2 * i as u32)
    };
    let mut z = HeaderBlocks::default();
    let mut opening = Vec::new();
    for (i, (kind, _)) in layout.iter().enumerate() {
        opening.extend_from_slice(&syn_stream(&mut z, 1 + 2 * i as u32, kind));
    }
    if node_tx.write_all(&opening).await.is_err() {
        return;
    }
    let (frames_tx, mut frames_rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        while let Some(f) = frames_rx.recv().await {
            if node_tx.write_all(&f).await.is_err() {
                break;
            }
        }
        let _ = node_tx.shutdown().await;
    });

    // Node → client: stdout, stderr and error data become channel
    // messages; once each output stream has ended, the socket closes.
    let (stdin_id, resize_id) = (id_of(STDIN), id_of(RESIZE));
    let outputs: Vec<(u32, u8)> = [STDOUT, STDERR, ERROR]
        .into_iter()
        .filter_map(|c| id_of(c).map(|id| (id, c)))
        .collect();
    let pongs = frames_tx.clone();
    let to_client = async move {
        let mut open: Vec<u32> = outputs.iter().map(|(id, _)| *id).collect();
        while !open.is_empty() {
            let frame = match read_frame(&mut node_rx).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::debug!(error = %e, "the node's SPDY connection ended");
                    break;
                }
            };
            tracing::trace!(?frame, "SPDY frame from the node");
            match frame {
                Frame::Data {
                    stream,
                    fin,
                    payload,
                } => {
                    if let Some((_, channel)) = outputs.iter().find(|(id, _)| *id == stream) {
                        if !payload.is_empty() {
                            let mut m = Vec::with_capacity(payload.len() + 1);
                            m.push(*channel);
                            m.extend_from_slice(&payload);
                            if ws_tx.send(Message::Binary(m.into())).await.is_err() {
                                return;
                            }
                        }
                        if fin {
                            open.retain(|id| *id != stream);
                        }
                    }
                }
                Frame::Reset { stream } => open.retain(|id| *id != stream),
                Frame::Ping(p) => {
                    let _ = pongs.send(control(PING, 0, &p)).await;
                }
                Frame::GoAway => break,
                Frame::Other => {}
            }
        }
        let _ = ws_tx
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
        let _ = ws_tx.close().await;
    };

    // Client → node: stdin and resize data, v5's close of stdin.
    let to_node = async move {
        while let Some(Ok(msg)) = ws_rx.next().await {
            let bytes = match msg {
                Message::Binary(b) => b,
                Message::Close(_) => break,
                _ => continue,
            };
            let Some((&channel, rest)) = bytes.split_first() else {
                continue;
            };
            let frame = match (channel, rest) {
                (CLOSE, [STDIN]) => stdin_id.map(|id| data(id, FLAG_FIN, &[])),
                (STDIN, payload) if !payload.is_empty() => stdin_id.map(|id| data(id, 0, payload)),
                (RESIZE, payload) if !payload.is_empty() => {
                    resize_id.map(|id| data(id, 0, payload))
                }
                _ => None,
            };
            if let Some(f) = frame
                && frames_tx.send(f).await.is_err()
            {
                break;
            }
        }
    };
    tokio::select! {
        () = to_client => {}
        () = to_node => {}
    }
    writer.abort();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455_s() {
        // The example of RFC 6455 §1.3.
        assert_eq!(
            accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn streams_follow_the_query_in_kube_s_order() {
        let q = crate::request::Query::parse(Some("stdin=true&stdout=true&stderr=true&tty=false"));
        let s = Streams::from_query(&q);
        assert_eq!(
            s.layout(),
            [
                ("error", ERROR),
                ("stdin", STDIN),
                ("stdout", STDOUT),
                ("stderr", STDERR)
            ]
        );
        let q = crate::request::Query::parse(Some("stdin=1&stdout=1&stderr=1&tty=1"));
        assert_eq!(
            Streams::from_query(&q).layout(),
            [
                ("error", ERROR),
                ("stdin", STDIN),
                ("stdout", STDOUT),
                ("resize", RESIZE)
            ],
            "a terminal joins stderr to stdout and can be resized"
        );
    }

    #[test]
    fn header_blocks_are_one_inflatable_zlib_stream() {
        let mut z = HeaderBlocks::default();
        let a = z.encode(&[("streamtype", "error")]);
        let b = z.encode(&[("streamtype", "stdin")]);
        assert_eq!(&a[..2], &[0x78, 0x01]);
        assert_ne!(
            &b[..2],
            &[0x78, 0x01],
            "the second block continues the stream"
        );
        // The stored blocks hold the name/value block as SPDY/3 lays it out.
        let raw = &a[2 + 5..];
        assert_eq!(&raw[..4], &1u32.to_be_bytes());
        assert_eq!(&raw[4..8], &10u32.to_be_bytes());
        assert_eq!(&raw[8..18], b"streamtype");
        assert_eq!(&raw[18..22], &5u32.to_be_bytes());
        assert_eq!(&raw[22..27], b"error");
        let raw = &raw[..raw.len() - 5];
        assert_eq!(&a[a.len() - 5..], &[0, 0, 0, 0xff, 0xff], "sync-flushed");
        let len = u16::from_le_bytes([a[3], a[4]]);
        assert_eq!(usize::from(len), raw.len());
        assert_eq!(u16::from_le_bytes([a[5], a[6]]), !len);
    }

    #[tokio::test]
    async fn frames_read_back_as_written() {
        let mut bytes = data(5, FLAG_FIN, b"out");
        bytes.extend(control(RST_STREAM, 0, &[0, 0, 0, 7, 0, 0, 0, 5]));
        bytes.extend(control(PING, 0, &[0, 0, 0, 2]));
        let mut r = &bytes[..];
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Frame::Data {
                stream: 5,
                fin: true,
                payload: Bytes::from_static(b"out")
            }
        );
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Frame::Reset { stream: 7 }
        );
        assert_eq!(
            read_frame(&mut r).await.unwrap(),
            Frame::Ping(vec![0, 0, 0, 2])
        );
        assert!(read_frame(&mut r).await.is_err(), "end of input");
    }
}

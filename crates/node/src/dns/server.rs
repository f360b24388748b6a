//! The wire: a request's bytes to a response's bytes ([`handle`], pure, the
//! part network input reaches), and the UDP and TCP loops around it with
//! forwarding to the configured upstreams.
//!
//! Requests that cannot be parsed get FORMERR when their header can be
//! read and are dropped otherwise (as are responses sent to us); UDP
//! answers larger than 512 bytes, or the client's EDNS payload size, are
//! sent empty with the TC bit so the client retries over TCP.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Edns, Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::records::Records;

/// The largest UDP response we send whatever the client offers, and the
/// payload size we advertise (RFC 9715's 1232 avoids fragmentation).
const MAX_UDP: usize = 4096;
const ADVERTISED_UDP: u16 = 1232;
/// The UDP size without EDNS (RFC 1035).
pub(crate) const CLASSIC_UDP: usize = 512;
/// How long one upstream gets to answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an idle TCP connection is kept.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// Forwarded queries in flight at once; beyond that UDP queries are
/// dropped (the client retries) rather than queued without bound.
const MAX_FORWARDS: usize = 512;
/// TCP connections served at once.
const MAX_TCP: usize = 256;

/// What to do with one request.
#[derive(Debug)]
pub(crate) enum Handled {
    /// Send these bytes back.
    Reply(Vec<u8>),
    /// Out of the zone: relay the request to an upstream as it is.
    Forward(Box<Message>),
    /// An in-zone answer ending in a CNAME out of the zone: resolve the
    /// target upstream and append what comes back.
    Chase {
        response: Box<Message>,
        target: Name,
        qtype: RecordType,
        /// The response's size limit (the client's, for UDP).
        limit: usize,
    },
    /// Not a request: say nothing.
    Drop,
}

/// The response to `request` from `records`; `limit` is the transport's
/// size (UDP: 512 unless the request's EDNS says more; TCP: 65535);
/// `forwarding` whether upstreams are configured.
pub(crate) fn handle(records: &Records, request: &[u8], limit: usize, forwarding: bool) -> Handled {
    let Ok(header) = Header::read(&mut BinDecoder::new(request)) else {
        return Handled::Drop;
    };
    if header.metadata.message_type != MessageType::Query {
        return Handled::Drop;
    }
    let id = header.metadata.id;
    let op = header.metadata.op_code;
    let Ok(req) = Message::from_vec(request) else {
        return Handled::Reply(encode(
            Message::error_msg(id, op, ResponseCode::FormErr),
            limit,
        ));
    };
    let limit = if limit <= CLASSIC_UDP {
        usize::from(req.max_payload()).clamp(CLASSIC_UDP, MAX_UDP)
    } else {
        limit
    };
    let mut resp = Message::response(id, op);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.metadata.recursion_available = forwarding;
    resp.metadata.checking_disabled = req.metadata.checking_disabled;
    resp.add_queries(req.queries.iter().cloned());
    if let Some(edns) = &req.edns {
        let mut ours = Edns::new();
        ours.set_max_payload(ADVERTISED_UDP);
        resp.set_edns(ours);
        if edns.version() > 0 {
            resp.metadata.response_code = ResponseCode::BADVERS;
            return Handled::Reply(encode(resp, limit));
        }
    }
    if op != OpCode::Query {
        resp.metadata.response_code = ResponseCode::NotImp;
        return Handled::Reply(encode(resp, limit));
    }
    let [query] = req.queries.as_slice() else {
        resp.metadata.response_code = ResponseCode::FormErr;
        return Handled::Reply(encode(resp, limit));
    };
    let qtype = query.query_type();
    if !records.is_authoritative(query.name()) {
        if forwarding {
            return Handled::Forward(Box::new(req));
        }
        // CoreDNS without a forward plugin: no zone matches, REFUSED.
        resp.metadata.response_code = ResponseCode::Refused;
        return Handled::Reply(encode(resp, limit));
    }
    // Other classes (CHAOS's version.bind) and zone transfers are not served.
    if query.query_class() != DNSClass::IN || matches!(qtype, RecordType::AXFR | RecordType::IXFR) {
        resp.metadata.response_code = ResponseCode::Refused;
        return Handled::Reply(encode(resp, limit));
    }
    let Some(answer) = records.lookup(query.name(), qtype) else {
        resp.metadata.response_code = ResponseCode::Refused;
        return Handled::Reply(encode(resp, limit));
    };
    resp.metadata.authoritative = true;
    resp.metadata.response_code = answer.code;
    resp.answers = answer.answers;
    resp.authorities = answer.authorities;
    resp.additionals = answer.additionals;
    match answer.chase {
        Some(target) if forwarding => Handled::Chase {
            response: Box::new(resp),
            target,
            qtype,
            limit,
        },
        _ => Handled::Reply(encode(resp, limit)),
    }
}

/// `msg` on the wire, emptied with TC set when it exceeds `limit`.
pub(crate) fn encode(mut msg: Message, limit: usize) -> Vec<u8> {
    match msg.to_vec() {
        Ok(bytes) if bytes.len() <= limit => bytes,
        Ok(_) => {
            msg.answers.clear();
            msg.authorities.clear();
            msg.additionals.clear();
            msg.metadata.truncation = true;
            msg.to_vec().unwrap_or_default()
        }
        Err(e) => {
            tracing::debug!(error = %e, "cannot encode a DNS response");
            let mut fail = Message::error_msg(
                msg.metadata.id,
                msg.metadata.op_code,
                ResponseCode::ServFail,
            );
            fail.add_queries(msg.queries.iter().cloned());
            fail.to_vec().unwrap_or_default()
        }
    }
}

/// A SERVFAIL for `req`.
fn servfail(req: &Message, limit: usize) -> Vec<u8> {
    let mut m = Message::error_msg(
        req.metadata.id,
        req.metadata.op_code,
        ResponseCode::ServFail,
    );
    m.metadata.recursion_desired = req.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.add_queries(req.queries.iter().cloned());
    encode(m, limit)
}

/// What the server shares between its loops.
pub(crate) struct Shared {
    /// The zone now; replaced whole when the watch sees a change.
    records: RwLock<Arc<Records>>,
    /// Where names outside the zone go (in order).
    upstream: Vec<SocketAddr>,
    forwards: Arc<Semaphore>,
    connections: Arc<Semaphore>,
}

impl Shared {
    pub(crate) fn new(records: Records, upstream: Vec<SocketAddr>) -> Shared {
        Shared {
            records: RwLock::new(Arc::new(records)),
            upstream,
            forwards: Arc::new(Semaphore::new(MAX_FORWARDS)),
            connections: Arc::new(Semaphore::new(MAX_TCP)),
        }
    }

    pub(crate) fn records(&self) -> Arc<Records> {
        // The lock only guards a pointer swap: a poisoned one still holds a whole zone.
        match self.records.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Serve `records` from now on.
    pub(crate) fn replace(&self, records: Records) {
        let records = Arc::new(records);
        match self.records.write() {
            Ok(mut r) => *r = records,
            Err(poisoned) => *poisoned.into_inner() = records,
        }
    }

    /// The response bytes for what [`handle`] decided, asking the
    /// upstreams as needed (over TCP when `tcp`, the client's transport).
    async fn respond(&self, handled: Handled, tcp: bool) -> Option<Vec<u8>> {
        match handled {
            Handled::Reply(bytes) if !bytes.is_empty() => Some(bytes),
            Handled::Reply(_) | Handled::Drop => None,
            Handled::Forward(req) => {
                let Ok(bytes) = req.to_vec() else {
                    return Some(servfail(&req, CLASSIC_UDP));
                };
                match forward(&self.upstream, &bytes, tcp).await {
                    Some(answer) => Some(answer),
                    None => Some(servfail(&req, CLASSIC_UDP)),
                }
            }
            Handled::Chase {
                mut response,
                target,
                qtype,
                limit,
            } => {
                if let Some(more) = resolve(&self.upstream, target, qtype).await {
                    response.answers.extend(more.answers);
                    if more.metadata.response_code == ResponseCode::NXDomain {
                        response.metadata.response_code = ResponseCode::NXDomain;
                    }
                }
                Some(encode(*response, limit))
            }
        }
    }
}

/// Ask `upstream` for `target`/`qtype` (UDP, then TCP if truncated).
async fn resolve(upstream: &[SocketAddr], target: Name, qtype: RecordType) -> Option<Message> {
    let mut q = Message::query();
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(target, qtype));
    let bytes = q.to_vec().ok()?;
    let mut answer = Message::from_vec(&forward(upstream, &bytes, false).await?).ok()?;
    if answer.metadata.truncation {
        answer = Message::from_vec(&forward(upstream, &bytes, true).await?).ok()?;
    }
    Some(answer)
}

/// The first upstream's answer to `request` (raw bytes), or none.
async fn forward(upstream: &[SocketAddr], request: &[u8], tcp: bool) -> Option<Vec<u8>> {
    for addr in upstream {
        let attempt = async {
            if tcp {
                forward_tcp(*addr, request).await
            } else {
                forward_udp(*addr, request).await
            }
        };
        match tokio::time::timeout(UPSTREAM_TIMEOUT, attempt).await {
            Ok(Ok(bytes)) => return Some(bytes),
            Ok(Err(e)) => tracing::debug!(upstream = %addr, error = %e, "upstream DNS failed"),
            Err(_) => tracing::debug!(upstream = %addr, "upstream DNS timed out"),
        }
    }
    None
}

async fn forward_udp(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(addr).await?;
    socket.send(request).await?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Only the answer to this query (same ID) counts.
        if n >= 12 && buf[..2] == request[..2.min(request.len())] {
            buf.truncate(n);
            return Ok(buf);
        }
    }
}

async fn forward_tcp(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(addr).await?;
    let len = u16::try_from(request.len()).map_err(std::io::Error::other)?;
    let mut framed = Vec::with_capacity(request.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(request);
    stream.write_all(&framed).await?;
    let n = stream.read_u16().await?;
    let mut buf = vec![0u8; usize::from(n)];
    stream.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Answer datagrams on `socket` until `stop`.
pub(crate) async fn serve_udp(
    socket: Arc<UdpSocket>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let mut buf = vec![0u8; 65535];
    loop {
        let (n, peer) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    // ICMP errors from earlier sends surface here on some systems.
                    tracing::trace!(error = %e, "DNS UDP receive");
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let records = shared.records();
        let handled = handle(
            &records,
            &buf[..n],
            CLASSIC_UDP,
            !shared.upstream.is_empty(),
        );
        match handled {
            Handled::Reply(bytes) => {
                if !bytes.is_empty() {
                    let _ = socket.send_to(&bytes, peer).await;
                }
            }
            Handled::Drop => {}
            slow => {
                let Ok(permit) = shared.forwards.clone().try_acquire_owned() else {
                    tracing::debug!("too many forwarded DNS queries in flight: one dropped");
                    continue;
                };
                let (socket, shared) = (socket.clone(), shared.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    if let Some(bytes) = shared.respond(slow, false).await {
                        let _ = socket.send_to(&bytes, peer).await;
                    }
                });
            }
        }
    }
}

/// Answer connections on `listener` until `stop`.
pub(crate) async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "DNS TCP accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let Ok(permit) = shared.connections.clone().try_acquire_owned() else {
            continue; // dropped: the client retries
        };
        let (shared, stop) = (shared.clone(), stop.clone());
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                _ = connection(stream, shared) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

async fn connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let mut buf = Vec::new();
    loop {
        let Ok(Ok(len)) = tokio::time::timeout(TCP_IDLE, stream.read_u16()).await else {
            return;
        };
        buf.resize(usize::from(len), 0);
        if !matches!(
            tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut buf)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let records = shared.records();
        let handled = handle(
            &records,
            &buf,
            usize::from(u16::MAX),
            !shared.upstream.is_empty(),
        );
        let Some(bytes) = shared.respond(handled, true).await else {
            continue;
        };
        let Ok(n) = u16::try_from(bytes.len()) else {
            continue;
        };
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&n.to_be_bytes());
        framed.extend_from_slice(&bytes);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use hickory_proto::rr::RData;
    use serde_json::json;

    fn zone() -> Records {
        let mut services = vec![
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80}]}}))
            .unwrap(),
        ];
        // A headless service whose answer cannot fit in 512 bytes.
        services.push(
            serde_json::from_value(json!({"metadata": {"name": "big", "namespace": "d"},
                "spec": {"clusterIP": "None"}}))
            .unwrap(),
        );
        let addrs: Vec<String> = (1..=60).map(|i| format!("10.244.0.{i}")).collect();
        let slices = vec![
            serde_json::from_value(json!({"metadata": {"name": "big-1", "namespace": "d",
                "labels": {"kubernetes.io/service-name": "big"}}, "addressType": "IPv4",
                "endpoints": addrs.iter().map(|a| json!({"addresses": [a]})).collect::<Vec<_>>()}))
            .unwrap(),
        ];
        Records::build("cluster.local", &services, &slices).unwrap()
    }

    fn query(name: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = 4242;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        if let Some(size) = edns {
            let mut e = Edns::new();
            e.set_max_payload(size);
            m.set_edns(e);
        }
        m.to_vec().unwrap()
    }

    fn reply(h: Handled) -> Message {
        match h {
            Handled::Reply(b) => Message::from_vec(&b).unwrap(),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    #[test]
    fn answers_truncation_and_refusal() {
        let z = zone();
        let r = reply(handle(
            &z,
            &query("web.d.svc.cluster.local.", RecordType::A, None),
            512,
            false,
        ));
        assert_eq!(r.metadata.id, 4242);
        assert!(r.metadata.authoritative && r.metadata.recursion_desired);
        assert!(!r.metadata.recursion_available);
        assert!(matches!(r.answers[0].data, RData::A(_)));
        // 60 A records do not fit in 512 bytes: TC, then whole over TCP or with EDNS.
        let big = query("big.d.svc.cluster.local.", RecordType::A, None);
        let r = reply(handle(&z, &big, 512, false));
        assert!(r.metadata.truncation && r.answers.is_empty());
        let r = reply(handle(&z, &big, 65535, false));
        assert!(!r.metadata.truncation);
        assert_eq!(r.answers.len(), 60);
        let r = reply(handle(
            &z,
            &query("big.d.svc.cluster.local.", RecordType::A, Some(4096)),
            512,
            false,
        ));
        assert_eq!(r.answers.len(), 60);
        assert!(r.edns.is_some(), "EDNS answered with EDNS");
        // Outside the zone: REFUSED without upstreams, forwarded with.
        let out = query("example.org.", RecordType::A, None);
        assert_eq!(
            reply(handle(&z, &out, 512, false)).metadata.response_code,
            ResponseCode::Refused
        );
        assert!(matches!(handle(&z, &out, 512, true), Handled::Forward(_)));
    }

    #[test]
    fn malformed_requests_get_formerr_or_nothing() {
        let z = zone();
        assert!(matches!(handle(&z, &[1, 2, 3], 512, false), Handled::Drop));
        let mut bad = query("web.d.svc.cluster.local.", RecordType::A, None);
        bad.truncate(bad.len() - 3);
        let r = reply(handle(&z, &bad, 512, false));
        assert_eq!(r.metadata.response_code, ResponseCode::FormErr);
        assert_eq!(r.metadata.id, 4242);
        // A response sent to us is not answered.
        let mut resp = query("web.d.svc.cluster.local.", RecordType::A, None);
        resp[2] |= 0x80;
        assert!(matches!(handle(&z, &resp, 512, false), Handled::Drop));
    }

    /// Random bytes, and valid queries with random bytes flipped: never a
    /// panic, every reply parses and carries the request's ID.
    #[test]
    fn random_input_never_panics() {
        let z = zone();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            // xorshift64*
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        let valid = [
            query("web.d.svc.cluster.local.", RecordType::A, None),
            query(
                "_http._tcp.web.d.svc.cluster.local.",
                RecordType::SRV,
                Some(1232),
            ),
            query("20.0.96.10.in-addr.arpa.", RecordType::PTR, None),
            query("10-1-2-3.d.pod.cluster.local.", RecordType::A, None),
        ];
        let mut replies = 0;
        for i in 0..20_000 {
            let bytes: Vec<u8> = if i % 2 == 0 {
                let len = (next() % 300) as usize;
                (0..len).map(|_| next() as u8).collect()
            } else {
                let mut b = valid[(next() % valid.len() as u64) as usize].clone();
                for _ in 0..=(next() % 4) {
                    let at = (next() % b.len() as u64) as usize;
                    b[at] = next() as u8;
                }
                if next() % 3 == 0 {
                    let cut = (next() % b.len() as u64) as usize;
                    b.truncate(cut);
                }
                b
            };
            for limit in [512, 65535] {
                if let Handled::Reply(out) = handle(&z, &bytes, limit, i % 3 == 0) {
                    assert!(out.len() <= limit.max(MAX_UDP), "size limit kept");
                    let m = Message::from_vec(&out).unwrap();
                    assert_eq!(m.metadata.id.to_be_bytes(), bytes[..2]);
                    replies += 1;
                }
            }
        }
        assert!(
            replies > 10_000,
            "the mutated queries reach the handler: {replies}"
        );
    }
}

#![allow(clippy::unwrap_used)]
//! The cluster DNS server against an in-process API server, queried with
//! `dig` (Debian's bind9-dnsutils, which scripts/test-all.sh installs; the
//! test fails without it) over UDP and TCP on loopback, with an upstream
//! the test runs itself on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeforge_node::dns::{ClusterDns, DnsConfig, Records};
use kubeforge_testenv::{TestEnv, eventually_some};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

/// What dig printed: status, header flags and the records of each section
/// as (name, ttl, type, rdata).
#[derive(Debug, Default)]
struct Dig {
    status: String,
    flags: Vec<String>,
    answer: Vec<(String, u32, String, String)>,
    authority: Vec<(String, u32, String, String)>,
}

impl Dig {
    fn rdata(&self, rtype: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .answer
            .iter()
            .filter(|r| r.2 == rtype)
            .map(|r| r.3.clone())
            .collect();
        v.sort();
        v
    }
}

async fn dig(server: SocketAddr, name: &str, rtype: &str, extra: &[&str]) -> Dig {
    let out = tokio::process::Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), "+tries=1", "+time=3"])
        .args(["+noall", "+comments", "+answer", "+authority"])
        .args(extra)
        .args([name, rtype])
        .output()
        .await
        .expect("dig runs (install Debian's bind9-dnsutils: scripts/test-all.sh does)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "dig {name} {rtype}: {text}");
    let mut d = Dig::default();
    let mut section = "";
    for line in text.lines() {
        if let Some(rest) = line.split("status: ").nth(1) {
            d.status = rest.split(',').next().unwrap_or_default().to_string();
        } else if let Some(rest) = line.strip_prefix(";; flags: ") {
            d.flags = rest
                .split(';')
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
        } else if line.starts_with(";; ANSWER SECTION") {
            section = "answer";
        } else if line.starts_with(";; AUTHORITY SECTION") {
            section = "authority";
        } else if line.starts_with(";; ") && line.ends_with("SECTION:") {
            section = "";
        } else if !line.starts_with(';') && !line.trim().is_empty() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 5 {
                continue;
            }
            let rec = (
                f[0].to_string(),
                f[1].parse().unwrap_or(0),
                f[3].to_string(),
                f[4..].join(" "),
            );
            match section {
                "answer" => d.answer.push(rec),
                "authority" => d.authority.push(rec),
                _ => {}
            }
        }
    }
    assert!(
        !d.status.is_empty(),
        "dig {name} {rtype} gave no answer: {text}"
    );
    d
}

/// An upstream on loopback: `example.org` is 192.0.2.1, anything else
/// NXDOMAIN; UDP and TCP.
async fn upstream() -> SocketAddr {
    fn answer(req: &[u8]) -> Option<Vec<u8>> {
        let q = Message::from_vec(req).ok()?;
        let mut m = Message::response(q.metadata.id, q.metadata.op_code);
        m.metadata.recursion_available = true;
        m.add_queries(q.queries.iter().cloned());
        let query = q.queries.first()?;
        if query.name().to_ascii().eq_ignore_ascii_case("example.org.") {
            if query.query_type() == RecordType::A {
                m.add_answer(Record::from_rdata(
                    query.name().clone(),
                    300,
                    RData::A(A([192, 0, 2, 1].into())),
                ));
            }
        } else {
            m.metadata.response_code = ResponseCode::NXDomain;
        }
        m.to_vec().ok()
    }
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = udp.local_addr().unwrap();
    let tcp = TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, peer)) = udp.recv_from(&mut buf).await {
            if let Some(out) = answer(&buf[..n]) {
                let _ = udp.send_to(&out, peer).await;
            }
        }
    });
    tokio::spawn(async move {
        while let Ok((mut s, _)) = tcp.accept().await {
            tokio::spawn(async move {
                while let Ok(len) = s.read_u16().await {
                    let mut buf = vec![0u8; usize::from(len)];
                    if s.read_exact(&mut buf).await.is_err() {
                        return;
                    }
                    let Some(out) = answer(&buf) else { return };
                    let mut framed = (out.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&out);
                    if s.write_all(&framed).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn create<K>(api: &Api<K>, v: serde_json::Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let obj: K = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

fn endpoints(addrs: &[(&str, Option<&str>)]) -> serde_json::Value {
    addrs
        .iter()
        .map(|(a, h)| match h {
            Some(h) => json!({"addresses": [a], "hostname": h, "conditions": {"ready": true}}),
            None => json!({"addresses": [a], "conditions": {"ready": true}}),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_dns_answers_from_the_api_server() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let env = TestEnv::start().await.unwrap();
    let client = env.client();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");

    create(
        &services,
        json!({"metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.100.10",
        "ports": [{"name": "http", "port": 80}, {"port": 8080}]}}),
    )
    .await;
    create(
        &services,
        json!({"metadata": {"name": "db"}, "spec": {"clusterIP": "None",
        "ports": [{"name": "pg", "port": 5432}]}}),
    )
    .await;
    create(
        &slices,
        json!({"metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4", "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        "endpoints": endpoints(&[("10.244.0.5", Some("db-0")), ("10.244.1.7", None)])}),
    )
    .await;
    create(
        &services,
        json!({"metadata": {"name": "ext"},
        "spec": {"type": "ExternalName", "externalName": "example.org"}}),
    )
    .await;
    // Enough endpoints that the A answer exceeds 512 bytes.
    let many: Vec<String> = (1..=60).map(|i| format!("10.244.2.{i}")).collect();
    let many: Vec<(&str, Option<&str>)> = many.iter().map(|a| (a.as_str(), None)).collect();
    create(
        &services,
        json!({"metadata": {"name": "big"}, "spec": {"clusterIP": "None"}}),
    )
    .await;
    create(
        &slices,
        json!({"metadata": {"name": "big-1", "labels": {"kubernetes.io/service-name": "big"}},
        "addressType": "IPv4", "endpoints": endpoints(&many)}),
    )
    .await;

    let up = upstream().await;
    let dns = ClusterDns::start(
        client.clone(),
        DnsConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            upstream: vec![up],
            ..DnsConfig::default()
        },
    )
    .await
    .unwrap();
    let at = dns.local_addrs()[0];

    // The watch lists what exists.
    let web = eventually_some("web resolves", Duration::from_secs(30), || async {
        let d = dig(at, "web.default.svc.cluster.local", "A", &[]).await;
        (d.status == "NOERROR" && !d.answer.is_empty()).then_some(d)
    })
    .await;
    assert_eq!(web.rdata("A"), ["10.96.100.10"]);
    assert_eq!(web.answer[0].1, 5, "TTL 5");
    assert!(web.flags.contains(&"aa".to_string()), "{:?}", web.flags);
    let tcp = dig(at, "web.default.svc.cluster.local", "A", &["+tcp"]).await;
    assert_eq!(tcp.rdata("A"), ["10.96.100.10"], "TCP too");

    let srv = dig(at, "_http._tcp.web.default.svc.cluster.local", "SRV", &[]).await;
    assert_eq!(
        srv.rdata("SRV"),
        ["0 100 80 web.default.svc.cluster.local."]
    );
    let ptr = dig(at, "10.100.96.10.in-addr.arpa", "PTR", &[]).await;
    assert_eq!(ptr.rdata("PTR"), ["web.default.svc.cluster.local."]);
    let ptr = dig(at, "-x", "10.96.100.10", &[]).await;
    assert_eq!(ptr.rdata("PTR"), ["web.default.svc.cluster.local."]);

    // Headless: the endpoints, by hostname or dashed address.
    let db = dig(at, "db.default.svc.cluster.local", "A", &[]).await;
    assert_eq!(db.rdata("A"), ["10.244.0.5", "10.244.1.7"]);
    let pet = dig(at, "db-0.db.default.svc.cluster.local", "A", &[]).await;
    assert_eq!(pet.rdata("A"), ["10.244.0.5"]);
    let srv = dig(at, "_pg._tcp.db.default.svc.cluster.local", "SRV", &[]).await;
    assert_eq!(
        srv.rdata("SRV"),
        [
            "0 50 5432 10-244-1-7.db.default.svc.cluster.local.",
            "0 50 5432 db-0.db.default.svc.cluster.local."
        ]
    );
    let ptr = dig(at, "5.0.244.10.in-addr.arpa", "PTR", &[]).await;
    assert_eq!(ptr.rdata("PTR"), ["db-0.db.default.svc.cluster.local."]);

    // ExternalName: the CNAME, and its target resolved upstream.
    let ext = dig(at, "ext.default.svc.cluster.local", "A", &[]).await;
    assert_eq!(ext.rdata("CNAME"), ["example.org."]);
    assert_eq!(ext.rdata("A"), ["192.0.2.1"]);

    // Negative answers carry the SOA.
    let nx = dig(at, "nope.default.svc.cluster.local", "A", &[]).await;
    assert_eq!(nx.status, "NXDOMAIN");
    assert_eq!(nx.authority[0].2, "SOA");
    let nodata = dig(at, "web.default.svc.cluster.local", "MX", &[]).await;
    assert_eq!(nodata.status, "NOERROR");
    assert!(nodata.answer.is_empty());
    assert_eq!(nodata.authority[0].2, "SOA");

    let version = dig(at, "dns-version.cluster.local", "TXT", &[]).await;
    assert_eq!(version.rdata("TXT"), ["\"1.1.0\""]);
    let pod = dig(at, "10-244-0-9.default.pod.cluster.local", "A", &[]).await;
    assert_eq!(pod.rdata("A"), ["10.244.0.9"]);

    // Outside the zone: the upstream's answer, over UDP and TCP.
    for extra in [&[][..], &["+tcp"][..]] {
        let out = dig(at, "example.org", "A", extra).await;
        assert_eq!(out.rdata("A"), ["192.0.2.1"], "{extra:?}");
        let out = dig(at, "missing.example", "A", extra).await;
        assert_eq!(out.status, "NXDOMAIN", "{extra:?}");
    }

    // Too big for 512 bytes: TC over UDP, everything over TCP.
    let truncated = dig(
        at,
        "big.default.svc.cluster.local",
        "A",
        &["+ignore", "+noedns"],
    )
    .await;
    assert!(truncated.flags.contains(&"tc".to_string()), "{truncated:?}");
    assert!(truncated.answer.is_empty());
    let whole = dig(at, "big.default.svc.cluster.local", "A", &["+tcp"]).await;
    assert_eq!(whole.answer.len(), 60);

    // Changes come through the watch.
    create(
        &services,
        json!({"metadata": {"name": "late"}, "spec": {"clusterIP": "10.96.100.20",
        "ports": [{"port": 80}]}}),
    )
    .await;
    services
        .delete("ext", &DeleteParams::default())
        .await
        .unwrap();
    slices
        .patch(
            "db-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"endpoints": endpoints(&[("10.244.3.3", Some("db-1"))])})),
        )
        .await
        .unwrap();
    eventually_some("the changes resolve", Duration::from_secs(30), || async {
        let late = dig(at, "late.default.svc.cluster.local", "A", &[]).await;
        let ext = dig(at, "ext.default.svc.cluster.local", "A", &[]).await;
        let db = dig(at, "db.default.svc.cluster.local", "A", &[]).await;
        (late.rdata("A") == ["10.96.100.20"]
            && ext.status == "NXDOMAIN"
            && db.rdata("A") == ["10.244.3.3"])
        .then_some(())
    })
    .await;
    dns.stop().await;

    // Without upstreams, names outside the zone are refused; nothing else is asked.
    let lone = ClusterDns::serve(
        Records::empty("cluster.local").unwrap(),
        DnsConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            ..DnsConfig::default()
        },
    )
    .await
    .unwrap();
    let refused = dig(lone.local_addrs()[0], "example.org", "A", &[]).await;
    assert_eq!(refused.status, "REFUSED");
    lone.stop().await;
}

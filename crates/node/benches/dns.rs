//! The cluster DNS server over loopback UDP with 10,000 Services (9,000
//! with a ClusterIP and a named port, 1,000 headless with 3 endpoints):
//! the time to build the records, then queries/s and latency percentiles
//! of closed-loop clients (80 % A, 10 % SRV, 10 % NXDOMAIN). Client and
//! server share the machine's cores.
//!
//! ```sh
//! CARGO_TARGET_DIR=/work/main/target cargo bench -p kubeforge-node --bench dns
//! ```

#![allow(missing_docs, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubeforge_node::dns::{ClusterDns, DnsConfig, Records};
use serde_json::json;
use tokio::net::UdpSocket;

const SERVICES: usize = 10_000;
const HEADLESS: usize = 1_000;
const CLIENTS: usize = 8;
const RUN: Duration = Duration::from_secs(5);

fn objects() -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for i in 0..SERVICES {
        let ns = format!("ns-{}", i % 100);
        let name = format!("svc-{i}");
        if i < HEADLESS {
            services.push(
                serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns},
                    "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}}))
                .unwrap(),
            );
            let eps: Vec<_> = (0..3)
                .map(|j| json!({"addresses": [format!("10.244.{}.{}", i / 250, (i % 250) + j)]}))
                .collect();
            slices.push(
                serde_json::from_value(json!({"metadata": {"name": format!("{name}-x"), "namespace": ns,
                    "labels": {"kubernetes.io/service-name": name}}, "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": eps}))
                .unwrap(),
            );
        } else {
            let ip = format!("10.96.{}.{}", i / 250, i % 250 + 1);
            services.push(
                serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns},
                    "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80}]}}))
                .unwrap(),
            );
        }
    }
    (services, slices)
}

fn queries() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..SERVICES {
        let base = format!("svc-{i}.ns-{}.svc.cluster.local.", i % 100);
        let (name, qtype) = match i % 10 {
            0 => (format!("_http._tcp.{base}"), RecordType::SRV),
            1 => (
                format!("missing-{i}.ns-1.svc.cluster.local."),
                RecordType::A,
            ),
            _ => (base, RecordType::A),
        };
        let mut m = Message::query();
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(&name).unwrap(), qtype));
        out.push(m.to_vec().unwrap());
    }
    out
}

async fn client(server: SocketAddr, queries: Vec<Vec<u8>>, seed: u64) -> (Vec<Duration>, u64) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(server).await.unwrap();
    let mut state = seed | 1;
    let mut buf = vec![0u8; 4096];
    let mut latencies = Vec::new();
    let mut errors = 0;
    let end = Instant::now() + RUN;
    let mut id: u16 = (seed as u16).wrapping_mul(7919);
    while Instant::now() < end {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut q = queries[(state % queries.len() as u64) as usize].clone();
        id = id.wrapping_add(1);
        q[..2].copy_from_slice(&id.to_be_bytes());
        let start = Instant::now();
        socket.send(&q).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await {
            Ok(Ok(n)) if buf[..2] == id.to_be_bytes() => {
                latencies.push(start.elapsed());
                let m = Message::from_vec(&buf[..n]).unwrap();
                if !matches!(
                    m.metadata.response_code,
                    ResponseCode::NoError | ResponseCode::NXDomain
                ) {
                    errors += 1;
                }
            }
            _ => errors += 1,
        }
    }
    (latencies, errors)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (services, slices) = objects();
    let mut builds = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = Records::build("cluster.local", &services, &slices).unwrap();
        builds.push(t.elapsed());
        std::hint::black_box(r);
    }
    builds.sort();
    let records = Records::build("cluster.local", &services, &slices).unwrap();
    println!(
        "records: {} Services ({} headless × 3 endpoints) → {} names; build median {:.1} ms",
        SERVICES,
        HEADLESS,
        records.len(),
        builds[2].as_secs_f64() * 1e3
    );
    rt.block_on(async {
        let dns = ClusterDns::serve(
            records,
            DnsConfig {
                listen: vec!["127.0.0.1:0".parse().unwrap()],
                ..DnsConfig::default()
            },
        )
        .await
        .unwrap();
        let at = dns.local_addrs()[0];
        let qs = queries();
        let started = Instant::now();
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| tokio::spawn(client(at, qs.clone(), 0x9e37_79b9 + c as u64)))
            .collect();
        let mut all = Vec::new();
        let mut errors = 0;
        for h in handles {
            let (l, e) = h.await.unwrap();
            all.extend(l);
            errors += e;
        }
        let secs = started.elapsed().as_secs_f64();
        all.sort();
        let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
        println!(
            "UDP, {CLIENTS} closed-loop clients, {:.1} s: {:.0} queries/s, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs, {errors} errors/timeouts",
            secs,
            all.len() as f64 / secs,
            pct(0.50).as_secs_f64() * 1e6,
            pct(0.99).as_secs_f64() * 1e6,
            all[all.len() - 1].as_secs_f64() * 1e6,
        );
        dns.stop().await;
    });
}

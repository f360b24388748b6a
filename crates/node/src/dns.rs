//! The cluster DNS server, in kube-dns's (CoreDNS's) role: pods resolve
//! `<svc>.<ns>.svc.cluster.local` through it. It is a kube-rs client of any
//! API server, watching Services and EndpointSlices the way [`proxy`]
//! does, and answers over UDP and TCP on the addresses it is given with
//! the records of the Kubernetes DNS specification ([`records`]): A/AAAA
//! for ClusterIPs, one address per ready endpoint for headless Services
//! (and `<hostname>.<svc>…`), SRV for named ports, PTR, CNAME for
//! ExternalName, `dns-version` TXT and `a-b-c-d.<ns>.pod.<zone>`.
//!
//! Names outside the zone go to the upstreams the caller configures and
//! to nothing else; with none they are REFUSED, which is what CoreDNS
//! answers when no server block's zone matches (no `forward` plugin).
//!
//! Use [`ClusterDns::start`] (or [`run`] until a token is cancelled); the
//! kubelet side, the resolv.conf each pod gets, is [`pod_dns_config`].
//!
//! [`proxy`]: crate::proxy

pub mod records;

mod pod_config;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

pub use pod_config::pod_dns_config;
pub use records::{Answer, Records, SCHEMA_VERSION, TTL, ZoneError};

use crate::error::NodeError;
use server::Shared;

/// The cluster domain kube and kubeadm default to.
pub const DEFAULT_ZONE: &str = "cluster.local";

/// What the DNS server serves and where.
#[derive(Clone, Debug)]
pub struct DnsConfig {
    /// The cluster domain (the kubelet's `clusterDomain`).
    pub zone: String,
    /// Where to answer, each over UDP and TCP. Port 0 picks a free port
    /// (the same for both; see [`ClusterDns::local_addrs`]).
    pub listen: Vec<SocketAddr>,
    /// Where names outside the zone are forwarded, in order; none by
    /// default (they are refused).
    pub upstream: Vec<SocketAddr>,
}

impl Default for DnsConfig {
    fn default() -> DnsConfig {
        DnsConfig {
            zone: DEFAULT_ZONE.to_string(),
            listen: Vec::new(),
            upstream: Vec::new(),
        }
    }
}

/// Why the DNS server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// The zone is not a domain name.
    #[error(transparent)]
    Zone(#[from] ZoneError),
    /// No address to listen on was given.
    #[error("the cluster DNS server needs at least one listen address")]
    NoListenAddress,
    /// An address could not be bound.
    #[error("cannot listen for DNS on {addr} ({transport}): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// `udp` or `tcp`.
        transport: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// A running DNS server.
pub struct ClusterDns {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
    shared: Arc<Shared>,
}

impl ClusterDns {
    /// Watch Services and EndpointSlices through `client` and answer on
    /// `config.listen` (bound before this returns; names are answered from
    /// what has been listed so far, NXDOMAIN until the first list lands).
    pub async fn start(client: kube::Client, config: DnsConfig) -> Result<ClusterDns, NodeError> {
        let zone = config.zone.clone();
        let mut dns =
            ClusterDns::serve(Records::empty(&zone).map_err(DnsError::from)?, config).await?;
        let watch = crate::proxy::ServiceWatch::start(client);
        let (shared, token) = (dns.shared.clone(), dns.stop.clone());
        dns.tasks.push(tokio::spawn(async move {
            while let Some((svcs, eps)) = watch.next(&token).await {
                // Building 10,000 Services takes ~70 ms: off the runtime's threads.
                let zone = zone.clone();
                let built =
                    tokio::task::spawn_blocking(move || Records::build(&zone, &svcs, &eps)).await;
                match built {
                    Ok(Ok(records)) => {
                        tracing::debug!(names = records.len(), "cluster DNS records rebuilt");
                        shared.replace(records);
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "cannot build the cluster DNS records")
                    }
                    Err(e) => tracing::warn!(error = %e, "building the cluster DNS records failed"),
                }
            }
        }));
        Ok(dns)
    }

    /// Answer from a fixed `records` (no watch): for tests and benchmarks.
    pub async fn serve(records: Records, config: DnsConfig) -> Result<ClusterDns, NodeError> {
        if config.listen.is_empty() {
            return Err(DnsError::NoListenAddress.into());
        }
        let shared = Arc::new(Shared::new(records, config.upstream.clone()));
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        let mut addrs = Vec::new();
        for addr in &config.listen {
            let (udp, tcp) = bind_pair(*addr).await?;
            let local = udp.local_addr().map_err(|source| DnsError::Bind {
                addr: *addr,
                transport: "udp",
                source,
            })?;
            tracing::info!(addr = %local, zone = %config.zone, "cluster DNS listening (UDP and TCP)");
            addrs.push(local);
            tasks.push(tokio::spawn(server::serve_udp(
                Arc::new(udp),
                shared.clone(),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(server::serve_tcp(
                tcp,
                shared.clone(),
                stop.clone(),
            )));
        }
        Ok(ClusterDns {
            stop,
            tasks,
            addrs,
            shared,
        })
    }

    /// The addresses answered on (ports resolved), in `listen`'s order.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The records being served now.
    pub fn records(&self) -> Arc<Records> {
        self.shared.records()
    }

    /// Stop answering and watching.
    pub async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

/// A UDP socket and a TCP listener on the same address; with port 0 the
/// TCP port is the one the UDP socket got (tried a few times, as another
/// program may hold that TCP port).
async fn bind_pair(addr: SocketAddr) -> Result<(UdpSocket, TcpListener), DnsError> {
    let bind_err = |transport, source| DnsError::Bind {
        addr,
        transport,
        source,
    };
    let mut last = None;
    for _ in 0..8 {
        let udp = UdpSocket::bind(addr)
            .await
            .map_err(|e| bind_err("udp", e))?;
        let local = udp.local_addr().map_err(|e| bind_err("udp", e))?;
        match TcpListener::bind(local).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if addr.port() == 0 => last = Some(e),
            Err(e) => return Err(bind_err("tcp", e)),
        }
    }
    Err(bind_err(
        "tcp",
        last.unwrap_or_else(|| std::io::Error::other("no free port")),
    ))
}

/// Run the DNS server until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    config: DnsConfig,
    shutdown: CancellationToken,
) -> Result<(), NodeError> {
    let dns = ClusterDns::start(client, config).await?;
    shutdown.cancelled().await;
    dns.stop().await;
    Ok(())
}

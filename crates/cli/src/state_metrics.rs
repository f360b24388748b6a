//! `kubeforge state-metrics`: object-state metrics under
//! kube-state-metrics' names (`kube_pod_status_phase`,
//! `kube_node_status_condition`, `kube_deployment_status_replicas_available`,
//! …) for any cluster, and the same beside `kubeforge up`
//! (`--state-metrics ADDR`).
//!
//! ```sh
//! kubeforge state-metrics --kubeconfig .kubeforge/kubeconfig --listen 127.0.0.1:8080
//! curl -s http://127.0.0.1:8080/metrics | grep kube_pod_status_phase
//! ```
//!
//! The endpoint is plain HTTP without authentication, so it listens on
//! loopback addresses only.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kubeforge_observability::StateMetrics;
use tokio_util::sync::CancellationToken;

#[derive(Args, Clone)]
pub struct StateMetricsArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Serve /metrics here (plain HTTP, so a loopback address).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
}

/// Refuse (exit 2) to serve the metrics in plain HTTP off loopback.
pub fn require_loopback(addr: SocketAddr, flag: &str) {
    if !addr.ip().is_loopback() {
        use clap::CommandFactory;
        crate::Cli::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "{flag} {addr}: the state metrics are served in plain HTTP without authentication, so only on a loopback address (e.g. 127.0.0.1:8080); scrape them there or put an authenticating proxy in front"
                ),
            )
            .exit();
    }
}

/// Watch `client`'s cluster and serve its state metrics on `addr` until
/// the returned token is cancelled; returns the bound address too.
pub async fn start(
    client: kube::Client,
    addr: SocketAddr,
) -> Result<(SocketAddr, CancellationToken)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening for the state metrics on {addr}"))?;
    let bound = listener.local_addr()?;
    let stop = CancellationToken::new();
    let metrics = StateMetrics::start(client, stop.clone());
    let serving = stop.clone();
    tokio::spawn(async move {
        if let Err(e) = kubeforge_observability::serve(listener, metrics, serving).await {
            tracing::error!(error = %e, "serving the state metrics");
        }
    });
    Ok((bound, stop))
}

pub async fn run(args: StateMetricsArgs) -> Result<()> {
    require_loopback(args.listen, "--listen");
    let client = crate::kubeclient::client(args.kubeconfig.as_deref()).await?;
    let (addr, stop) = start(client, args.listen).await?;
    println!("kubeforge state-metrics: http://{addr}/metrics");
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    stop.cancel();
    Ok(())
}

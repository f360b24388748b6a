//! `kubeforge scheduler`: run kubeforge's scheduler against a cluster (the
//! embedded one from `kubeforge up`, or a real one as a second scheduler),
//! configured by a KubeSchedulerConfiguration file.
//!
//! ```sh
//! kubeforge scheduler --kubeconfig .kubeforge/kubeconfig --config sched.yaml --metrics-addr 127.0.0.1:10259
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kubeforge_scheduler::{SchedulerBuilder, SchedulerConfiguration};

#[derive(Args, Clone)]
pub struct SchedulerArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Serve Prometheus metrics on this address at /metrics.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

pub async fn run(args: SchedulerArgs) -> Result<()> {
    let config = match &args.config {
        Some(path) => SchedulerConfiguration::from_file(path)
            .with_context(|| format!("invalid scheduler configuration {}", path.display()))?,
        None => SchedulerConfiguration::default(),
    };
    let client = crate::kubeclient::client(args.kubeconfig.as_deref()).await?;
    let scheduler = SchedulerBuilder::new(client)
        .config(config.clone())
        .start()
        .context("starting the scheduler")?;
    let profiles: Vec<String> = config
        .effective_profiles()
        .iter()
        .map(|p| {
            p.scheduler_name
                .clone()
                .unwrap_or_else(|| "default-scheduler".into())
        })
        .collect();
    println!(
        "kubeforge scheduler running; profiles: {}",
        profiles.join(", ")
    );
    if let Some(addr) = args.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening for metrics on {addr}"))?;
        let metrics = scheduler.metrics();
        println!("  metrics: http://{}/metrics", listener.local_addr()?);
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let body = metrics.render();
                tokio::spawn(async move {
                    // One request per connection; the request itself is not parsed.
                    let mut buf = [0u8; 1024];
                    if s.readable().await.is_ok() {
                        let _ = s.try_read(&mut buf);
                    }
                    let data = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let mut off = 0;
                    while off < data.len() {
                        if s.writable().await.is_err() {
                            break;
                        }
                        match s.try_write(&data.as_bytes()[off..]) {
                            Ok(n) => off += n,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                            Err(_) => break,
                        }
                    }
                });
            }
        });
    }
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    scheduler.stop().await;
    println!("kubeforge scheduler stopped");
    Ok(())
}

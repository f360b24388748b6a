//! `kubeforge node`: a node agent for a container runtime that already
//! runs (any CRI socket), registering its Node with any cluster.
//!
//! ```sh
//! sudo kubeforge node --name box-1 --cri-socket /run/containerd/containerd.sock \
//!     --kubeconfig node.kubeconfig --client-ca apiserver-kubelet-client-ca.crt
//! ```

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kubeforge_node::AgentConfig;

#[derive(Args, Clone)]
pub struct NodeArgs {
    /// The Node's name.
    #[arg(long)]
    name: String,
    /// The container runtime's CRI socket.
    #[arg(long, value_name = "PATH")]
    cri_socket: PathBuf,
    /// Kubeconfig of the cluster, naming the node's identity (default:
    /// $KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where pod volumes and container logs go.
    #[arg(long, default_value = ".kubeforge/node")]
    root_dir: PathBuf,
    /// The address of the agent's HTTPS API (the Node's InternalIP).
    #[arg(long, default_value = "127.0.0.1")]
    address: IpAddr,
    /// Its port (the kubelet's 10250).
    #[arg(long, default_value_t = 10250)]
    port: u16,
    /// The CA of the client certificates allowed to call the agent (the
    /// API server's kubelet client); without it every call is refused.
    #[arg(long, value_name = "FILE")]
    client_ca: Option<PathBuf>,
}

pub async fn run(args: NodeArgs) -> Result<()> {
    if !args.cri_socket.exists() {
        clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!(
                "--cri-socket {}: no such socket; start containerd first (or use kubeforge up --container-nodes N, which starts its own)\n",
                args.cri_socket.display()
            ),
        )
        .exit();
    }
    let client = crate::kubeclient::client(args.kubeconfig.as_deref()).await?;
    let mut cfg = AgentConfig::new(&args.name, args.cri_socket.clone(), args.root_dir.clone());
    cfg.address = args.address;
    cfg.port = args.port;
    cfg.client_ca_pem = match &args.client_ca {
        Some(p) => {
            Some(std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
        }
        None => None,
    };
    let agent = kubeforge_node::start(client, cfg)
        .await
        .with_context(|| format!("starting the node agent for {}", args.name))?;
    println!("kubeforge node {}: https://{}", args.name, agent.addr());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    agent.stop().await;
    Ok(())
}

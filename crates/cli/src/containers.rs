//! `kubeforge up --container-nodes N`: nodes whose pods really run. It
//! starts the local image registry (Debian's docker-registry, storage under
//! `<data-dir>/registry`) with the pause and busybox images built if
//! missing, the egress guard, and per node a private containerd (under
//! `<data-dir>/containerd/<node>`) and a node agent running as
//! `system:node:<node>`; the API server reaches the agents with a kubelet
//! client certificate from a CA made for this run. Stopping removes every
//! pod sandbox, mount, cgroup, the bridge and the guard.

use std::path::Path;

use anyhow::{Context, Result};
use kubeforge_apiserver::{ApiServer, KubeletClient, rbac_components};
use kubeforge_node::local::{self, Runtimes};
use kubeforge_node::proxy::Proxy;
use kubeforge_node::{AgentConfig, RunningAgent};

/// Running container nodes.
pub struct ContainerNodes {
    runtimes: Runtimes,
    agents: Vec<RunningAgent>,
    proxy: Option<Proxy>,
}

/// Refuse (exit 2) when this machine cannot run containers.
pub fn check() {
    if let Err(e) = kubeforge_node::host::check_container_host(Path::new(local::CNI_BIN_DIR)) {
        clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!("--container-nodes: {e}\n"),
        )
        .exit();
    }
    if let Err(e) = kubeforge_node::host::find_program("docker-registry", "docker-registry") {
        clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!("--container-nodes: {e}\n"),
        )
        .exit();
    }
}

/// A CA made for this run and the API server's kubelet client
/// certificate from it: (CA PEM, client certificate PEM, key PEM).
fn kubelet_credentials() -> Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().context("making the kubelet client CA")?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "kubeforge-kubelet-client-ca");
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(DnType::CommonName, rbac_components::KUBELET_CLIENT_USER);
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}

/// The name of container node `i`.
pub fn node_name(i: usize) -> String {
    format!("container-{i}")
}

/// Start `n` container nodes for `server`, with state under `data_dir`.
pub async fn start(server: &ApiServer, data_dir: &Path, n: usize) -> Result<ContainerNodes> {
    let data_dir = std::path::absolute(data_dir).context("resolving the data directory")?;
    let runtimes = Runtimes::start(&data_dir, n, node_name)
        .await
        .context("starting the container runtimes")?;
    let (ca, cert, key) = kubelet_credentials()?;
    server.set_kubelet_client(Some(KubeletClient::new(&cert, &key)?));
    server.set_graceful_pod_deletion(true);
    let mut nodes = ContainerNodes {
        runtimes,
        agents: Vec::new(),
        proxy: None,
    };
    match Proxy::start(server.builtin_client_as(rbac_components::component_user(
        rbac_components::KUBE_PROXY_USER,
    ))) {
        Ok(p) => nodes.proxy = Some(p),
        Err(e) => {
            nodes.stop().await;
            return Err(e).context("starting the Service proxy");
        }
    }
    for i in 0..n {
        let name = node_name(i);
        let mut cfg = AgentConfig::new(
            &name,
            nodes.runtimes.runtime(i).socket(),
            data_dir.join("nodes").join(&name),
        );
        cfg.client_ca_pem = Some(ca.clone());
        cfg.pod_cidr = Some(local::node_subnet(i));
        cfg.labels
            .insert("node.kubeforge.io/runtime".into(), "containerd".into());
        let client = server.builtin_client_as(rbac_components::node_user(&name));
        match kubeforge_node::start(client, cfg).await {
            Ok(a) => nodes.agents.push(a),
            Err(e) => {
                nodes.stop().await;
                return Err(e).with_context(|| format!("starting the node agent of {name}"));
            }
        }
    }
    Ok(nodes)
}

impl ContainerNodes {
    /// Lines saying what runs.
    pub fn describe(&self) -> Vec<String> {
        let names: Vec<&str> = self.agents.iter().map(|a| a.node_name()).collect();
        vec![
            format!(
                "  nodes:      {} running containers ({}) through containerd",
                names.len(),
                names.join(", ")
            ),
            format!(
                "  images:     http://{} (kubeforge image build NAME:TAG adds one)",
                self.runtimes.registry_addr()
            ),
        ]
    }

    /// Stop every pod, the agents, the runtimes and the registry, and
    /// remove the network they used.
    pub async fn stop(self) {
        for a in self.agents {
            a.stop_and_remove_pods().await;
        }
        if let Some(p) = self.proxy {
            p.stop().await;
        }
        self.runtimes.stop().await;
    }
}

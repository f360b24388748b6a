//! `kubeforge up --container-nodes N`: nodes whose pods really run. It
//! starts the local image registry (Debian's docker-registry, storage under
//! `<data-dir>/registry`) with the pause and busybox images built if
//! missing, the egress guard, and per node a private containerd (under
//! `<data-dir>/containerd/<node>`) and a node agent running as
//! `system:node:<node>`; the API server reaches the agents with a kubelet
//! client certificate from a CA made for this run. Stopping removes every
//! pod sandbox, mount, cgroup, the bridge and the guard.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kubeforge_apiserver::{ApiServer, KubeletClient, rbac_components};
use kubeforge_node::containerd::{Containerd, ContainerdConfig, SANDBOX_IMAGE};
use kubeforge_node::image::{self, ImageRef};
use kubeforge_node::registry::{LocalRegistry, RegistryClient};
use kubeforge_node::{AgentConfig, RunningAgent, network};

/// Where Debian's reference CNI plugins are.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The images every container node needs, built when missing.
const BASE_IMAGES: [(&str, &str); 2] = [("pause", SANDBOX_IMAGE), ("busybox", "busybox:1.36")];

/// Running container nodes.
pub struct ContainerNodes {
    registry: LocalRegistry,
    guard: network::Guard,
    runtimes: Vec<Containerd>,
    agents: Vec<RunningAgent>,
}

/// Refuse (exit 2) when this machine cannot run containers.
pub fn check() {
    if let Err(e) = kubeforge_node::host::check_container_host(Path::new(CNI_BIN_DIR)) {
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

/// Build `images` (preset, name) into `registry` unless already there.
pub async fn ensure_images(registry: &RegistryClient, images: &[(&str, &str)]) -> Result<()> {
    for (preset, name) in images {
        let r = ImageRef::parse(name)?;
        if !registry.has_manifest(&r.path, &r.tag).await? {
            image::preset(preset)?
                .push(registry, &r)
                .await
                .with_context(|| format!("building {name}"))?;
        }
    }
    Ok(())
}

/// The name of container node `i`.
pub fn node_name(i: usize) -> String {
    format!("container-{i}")
}

/// Start `n` container nodes for `server`, with state under `data_dir`.
pub async fn start(server: &ApiServer, data_dir: &Path, n: usize) -> Result<ContainerNodes> {
    let data_dir = std::path::absolute(data_dir).context("resolving the data directory")?;
    let registry = LocalRegistry::start(&data_dir.join("registry"), 0)
        .await
        .context("starting the local image registry")?;
    ensure_images(&RegistryClient::new(registry.addr()), &BASE_IMAGES).await?;
    let guard = network::install_guard().context("installing the egress guard")?;
    let (ca, cert, key) = kubelet_credentials()?;
    server.set_kubelet_client(Some(KubeletClient::new(&cert, &key)?));
    server.set_graceful_pod_deletion(true);
    let mut nodes = ContainerNodes {
        registry,
        guard,
        runtimes: Vec::new(),
        agents: Vec::new(),
    };
    for i in 0..n {
        let name = node_name(i);
        let dir: PathBuf = data_dir.join("containerd").join(&name);
        let subnet = format!("10.244.{i}.0/24");
        let runtime = match Containerd::start(&ContainerdConfig {
            dir: dir.clone(),
            cni_bin_dir: CNI_BIN_DIR.into(),
            cni_conflist: Some(network::reference_conflist(
                &network::bridge(i),
                &subnet,
                &dir.join("ipam"),
            )),
            registry: Some(nodes.registry.addr().to_string()),
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                nodes.stop().await;
                return Err(e).with_context(|| format!("starting containerd for {name}"));
            }
        };
        let mut cfg = AgentConfig::new(&name, runtime.socket(), data_dir.join("nodes").join(&name));
        cfg.client_ca_pem = Some(ca.clone());
        cfg.pod_cidr = Some(subnet);
        cfg.labels
            .insert("node.kubeforge.io/runtime".into(), "containerd".into());
        nodes.runtimes.push(runtime);
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
                self.registry.addr()
            ),
        ]
    }

    /// Stop every pod, the agents, the runtimes and the registry, and
    /// remove the network they used.
    pub async fn stop(self) {
        for a in self.agents {
            a.stop_and_remove_pods().await;
        }
        for r in self.runtimes {
            r.stop().await;
        }
        self.registry.stop().await;
        network::remove_guard_and_bridges(self.guard);
        kubeforge_node::host::remove_cgroup("/kubeforge");
    }
}

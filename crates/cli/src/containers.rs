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
use kubeforge_node::dns::{ClusterDns, DnsConfig};
use kubeforge_node::footprint::DirLock;
use kubeforge_node::local::{self, Runtimes};
use kubeforge_node::proxy::{Proxy, ProxyTarget};
use kubeforge_node::{AgentConfig, RunningAgent};

/// The cluster DNS Service's address (kubeadm's: the tenth of the
/// service range), the kubelets' `clusterDNS`.
pub const CLUSTER_DNS_IP: &str = "10.96.0.10";

/// Running container nodes.
pub struct ContainerNodes {
    runtimes: Runtimes,
    agents: Vec<RunningAgent>,
    proxy: Option<Proxy>,
    dns: Option<ClusterDns>,
    pod_listener: Option<PodListener>,
}

/// The API server's listener on the first bridge's gateway, which pods
/// reach through the `kubernetes` Service, and what stops it.
struct PodListener {
    addr: std::net::SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The cluster DNS server (kube-dns's role, as `system:kube-dns`) on the
/// first bridge's gateway, port 53, behind the `kube-system/kube-dns`
/// Service at [`CLUSTER_DNS_IP`] (its EndpointSlice names the gateway), so
/// pods resolve through the Service proxy as on Kubernetes. Names outside
/// the cluster are refused: nothing is forwarded off this machine.
async fn serve_dns(server: &ApiServer, gateway: std::net::Ipv4Addr) -> Result<ClusterDns> {
    use kube::api::{Patch, PatchParams};
    let dns = ClusterDns::start(
        server.builtin_client_as(rbac_components::component_user(
            rbac_components::KUBE_DNS_USER,
        )),
        DnsConfig {
            listen: vec![std::net::SocketAddr::from((gateway, 53))],
            ..DnsConfig::default()
        },
    )
    .await?;
    let client = server.client();
    let apply = PatchParams::apply("kubeforge-up").force();
    let service = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {"clusterIP": CLUSTER_DNS_IP, "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]},
    });
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kube-dns-kubeforge", "namespace": "kube-system",
            "labels": {"kubernetes.io/service-name": "kube-dns",
                "endpointslice.kubernetes.io/managed-by": "kubeforge-up"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [gateway.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}],
    });
    let written = async {
        kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "kube-system")
            .patch("kube-dns", &apply, &Patch::Apply(&service))
            .await?;
        kube::Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(
            client,
            "kube-system",
        )
        .patch("kube-dns-kubeforge", &apply, &Patch::Apply(&slice))
        .await?;
        Ok::<_, kube::Error>(())
    };
    if let Err(e) = written.await {
        dns.stop().await;
        return Err(e).context("writing the kube-dns Service");
    }
    Ok(dns)
}

/// Serve the API to pods: HTTPS on the first bridge's gateway (a host
/// address every pod routes to), advertised as the `kubernetes` Service's
/// endpoint so in-cluster clients reach it at `10.96.0.1:443`.
async fn serve_pods(
    server: &ApiServer,
    ip: std::net::Ipv4Addr,
    tls: std::sync::Arc<rustls::ServerConfig>,
) -> Result<PodListener> {
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .with_context(|| format!("listening on {ip} for pods"))?;
    let addr = listener
        .local_addr()
        .context("reading the pod listener's address")?;
    server.advertise_at(addr);
    let stop = tokio_util::sync::CancellationToken::new();
    let token = stop.clone();
    let task = tokio::spawn(server.clone().serve_tls(listener, tls, async move {
        token.cancelled().await;
    }));
    Ok(PodListener { addr, stop, task })
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

/// Start `n` container nodes for `server`, with state under the data
/// directory `lock` holds. With `tls` (the API server's serving
/// configuration), pods reach the API server (in-cluster configuration
/// works).
pub async fn start(
    server: &ApiServer,
    lock: &DirLock,
    n: usize,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    cni: &kubeforge_node::network::CniPlugin,
) -> Result<ContainerNodes> {
    let data_dir = lock.dir().to_path_buf();
    let runtimes = Runtimes::start_with(lock, n, node_name, cni)
        .await
        .context("starting the container runtimes")?;
    let gateway = runtimes.network().gateway(0);
    let (ca, cert, key) = kubelet_credentials()?;
    server.set_kubelet_client(Some(KubeletClient::new(&cert, &key)?));
    server.set_graceful_pod_deletion(true);
    let mut nodes = ContainerNodes {
        runtimes,
        agents: Vec::new(),
        proxy: None,
        dns: None,
        pod_listener: None,
    };
    if let Some(tls) = tls {
        match serve_pods(server, gateway, tls).await {
            Ok(l) => nodes.pod_listener = Some(l),
            Err(e) => {
                nodes.stop().await;
                return Err(e);
            }
        }
    }
    match Proxy::start(
        server.builtin_client_as(rbac_components::component_user(
            rbac_components::KUBE_PROXY_USER,
        )),
        ProxyTarget::of(nodes.runtimes.network()),
    ) {
        Ok(p) => nodes.proxy = Some(p),
        Err(e) => {
            nodes.stop().await;
            return Err(e).context("starting the Service proxy");
        }
    }
    match serve_dns(server, gateway).await {
        Ok(d) => nodes.dns = Some(d),
        Err(e) => {
            nodes.stop().await;
            return Err(e).context("starting the cluster DNS server");
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
        cfg.dns = kubeforge_node::pod::DnsSettings {
            servers: vec![CLUSTER_DNS_IP.to_string()],
            domain: kubeforge_node::dns::DEFAULT_ZONE.to_string(),
        };
        cfg.pod_cidr = Some(nodes.runtimes.network().subnet(i));
        cfg.cgroup_parent = nodes.runtimes.cgroup_parent().to_string();
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
            format!(
                "  machine:    cluster id {} (bridges {}*, pod ranges {}, cgroup {})",
                self.runtimes.id(),
                self.runtimes.id().link_prefix(),
                (0..self.runtimes.network().len())
                    .map(|i| self.runtimes.network().subnet(i))
                    .collect::<Vec<_>>()
                    .join(" "),
                self.runtimes.cgroup_parent()
            ),
        ]
        .into_iter()
        .chain(self.dns.as_ref().map(|_| {
            format!(
                "  dns:        {CLUSTER_DNS_IP} (kube-system/kube-dns, zone {})",
                kubeforge_node::dns::DEFAULT_ZONE
            )
        }))
        .chain(self.pod_listener.as_ref().map(|l| {
            format!(
                "  for pods:   https://{} (the kubernetes Service, {}:443)",
                l.addr,
                kubeforge_apiserver::KUBERNETES_SERVICE_IP
            )
        }))
        .collect()
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
        if let Some(d) = self.dns {
            d.stop().await;
        }
        if let Some(l) = self.pod_listener {
            l.stop.cancel();
            let _ = l.task.await;
        }
        self.runtimes.stop().await;
    }
}

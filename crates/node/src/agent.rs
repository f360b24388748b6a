//! The node agent: registers its Node (capacity from this machine,
//! conditions from the runtime), renews its Lease, watches the pods bound
//! to it and runs one worker per pod, rotates container logs, removes
//! sandboxes of pods that no longer exist, and serves its HTTPS API (the
//! kubelet port's role) for the API server's logs requests.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cri::{Cri, api};
use crate::env::EnvContext;
use crate::error::NodeError;
use crate::events::Recorder;
use crate::pod::{self, DnsSettings};
use crate::status::Observed;

/// The cgroup an agent puts its node under unless told otherwise.
pub const DEFAULT_CGROUP_PARENT: &str = "/kubeforge";

/// How an agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The Node's name.
    pub node_name: String,
    /// The container runtime's CRI socket.
    pub cri_socket: PathBuf,
    /// Where pod volumes and container logs live.
    pub root_dir: PathBuf,
    /// The address the agent's API listens on and the Node advertises.
    pub address: IpAddr,
    /// Its port (0: any free port).
    pub port: u16,
    /// The CA whose client certificates may call the agent's API (the
    /// API server's kubelet client); without one, every call is refused.
    pub client_ca_pem: Option<String>,
    /// Cluster DNS for the pods.
    pub dns: DnsSettings,
    /// Labels the Node carries besides kube's well-known ones.
    pub labels: BTreeMap<String, String>,
    /// The pods capacity.
    pub max_pods: u32,
    /// The pod CIDR the Node advertises.
    pub pod_cidr: Option<String>,
    /// Rotate a container log at this size (`containerLogMaxSize`).
    pub container_log_max_size: u64,
    /// Keep this many log files per container (`containerLogMaxFiles`).
    pub container_log_max_files: usize,
    /// How often the Lease is renewed and the Node's status written.
    pub heartbeat: Duration,
    /// The cgroup the node's pods go under (`/kubeforge` by default; a
    /// container-node cluster gives its own, so that two clusters on one
    /// machine never share one); the node's root is `<parent>/<node>`.
    pub cgroup_parent: String,
}

impl AgentConfig {
    /// Kube's defaults for node `name` on the runtime at `cri_socket`.
    pub fn new(name: &str, cri_socket: PathBuf, root_dir: PathBuf) -> AgentConfig {
        AgentConfig {
            node_name: name.to_string(),
            cri_socket,
            root_dir,
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            client_ca_pem: None,
            dns: DnsSettings::default(),
            labels: BTreeMap::new(),
            max_pods: 110,
            pod_cidr: None,
            container_log_max_size: 10 << 20,
            container_log_max_files: 5,
            heartbeat: Duration::from_secs(10),
            cgroup_parent: DEFAULT_CGROUP_PARENT.to_string(),
        }
    }
}

/// What the agent's parts share.
pub(crate) struct Shared {
    pub client: kube::Client,
    pub cri: Cri,
    pub cfg: AgentConfig,
    pub events: Recorder,
    pub stop: CancellationToken,
    pub host_ip: String,
    /// Image pulls one at a time (the kubelet's `serializeImagePulls`).
    pub pulls: tokio::sync::Mutex<()>,
    /// The pods bound here, by UID.
    pub pods: Mutex<HashMap<String, Arc<Pod>>>,
    workers: Mutex<HashMap<String, watch::Sender<Option<Arc<Pod>>>>>,
    pub cpu_milli: i64,
    pub memory: i64,
}

impl Shared {
    /// Where container logs go (`/var/log/pods`' role).
    pub fn log_root(&self) -> PathBuf {
        self.cfg.root_dir.join("logs")
    }

    /// What env and downward-API values are made from.
    pub async fn env_context(&self, obs: &Observed) -> EnvContext {
        let services: Api<Service> = Api::all(self.client.clone());
        let services = services
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        EnvContext {
            services,
            host_ip: self.host_ip.clone(),
            pod_ips: obs.pod_ips.clone(),
            node_cpu_milli: self.cpu_milli,
            node_memory: self.memory,
        }
    }

    /// The node's cgroup root (`<cgroup parent>/<node>`).
    pub fn cgroup_root(&self) -> String {
        format!(
            "{}/{}",
            self.cfg.cgroup_parent.trim_end_matches('/'),
            self.cfg.node_name
        )
    }

    /// Remove pod `uid`'s cgroup, whichever QoS class it was in.
    pub fn remove_pod_cgroup(&self, uid: &str) {
        let root = self.cgroup_root();
        for qos in ["", "/burstable", "/besteffort"] {
            crate::host::remove_cgroup(&format!("{root}/kubepods{qos}/pod{uid}"));
        }
    }

    /// The pod `ns/name` bound here.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods
            .lock()
            .ok()?
            .values()
            .find(|p| {
                let (n, s, _) = pod::identity(p);
                n == name && s == ns
            })
            .cloned()
    }

    fn dispatch(self: &Arc<Self>, p: Pod) {
        let Some(uid) = p.metadata.uid.clone() else {
            return;
        };
        let p = Arc::new(p);
        if let Ok(mut pods) = self.pods.lock() {
            pods.insert(uid.clone(), p.clone());
        }
        let Ok(mut workers) = self.workers.lock() else {
            return;
        };
        match workers.get(&uid) {
            Some(tx) => {
                tx.send_replace(Some(p));
            }
            None => {
                let (tx, rx) = watch::channel(Some(p));
                workers.insert(uid.clone(), tx);
                tokio::spawn(crate::worker::run(self.clone(), uid, rx));
            }
        }
    }

    fn forget(&self, uid: &str) {
        if let Ok(mut pods) = self.pods.lock() {
            pods.remove(uid);
        }
        if let Some(tx) = self.workers.lock().ok().and_then(|mut w| w.remove(uid)) {
            tx.send_replace(None);
        }
    }
}

/// A running agent.
pub struct RunningAgent {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    addr: SocketAddr,
}

impl std::fmt::Debug for RunningAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningAgent")
            .field("node", &self.shared.cfg.node_name)
            .field("addr", &self.addr)
            .finish()
    }
}

fn machine() -> (i64, i64) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<i64>().ok())
        })
        .unwrap_or(0);
    (cpus * 1000, mem_kib * 1024)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Start an agent for `cfg.node_name` with `client` (its identity).
pub async fn start(client: kube::Client, cfg: AgentConfig) -> Result<RunningAgent, NodeError> {
    let cri = Cri::connect(&cfg.cri_socket);
    let version = cri.wait_ready(Duration::from_secs(30)).await?;
    std::fs::create_dir_all(cfg.root_dir.join("logs"))
        .map_err(|e| NodeError::io(format!("creating {}", cfg.root_dir.display()), e))?;
    let listener = tokio::net::TcpListener::bind((cfg.address, cfg.port))
        .await
        .map_err(|e| {
            NodeError::io(
                format!("binding the agent's API on {}:{}", cfg.address, cfg.port),
                e,
            )
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| NodeError::io("reading the agent's address", e))?;
    let (cpu_milli, memory) = machine();
    let shared = Arc::new(Shared {
        events: Recorder::new(client.clone(), &cfg.node_name),
        client,
        cri,
        host_ip: cfg.address.to_string(),
        cfg,
        stop: CancellationToken::new(),
        pulls: tokio::sync::Mutex::new(()),
        pods: Mutex::new(HashMap::new()),
        workers: Mutex::new(HashMap::new()),
        cpu_milli,
        memory,
    });
    let runtime_version = format!("{}://{}", version.runtime_name, version.runtime_version);
    register(&shared, addr.port(), &runtime_version).await?;
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(heartbeats(
        shared.clone(),
        addr.port(),
        runtime_version,
    )));
    tasks.push(tokio::spawn(watch_pods(shared.clone())));
    tasks.push(tokio::spawn(housekeeping(shared.clone())));
    let server = crate::server::serve(shared.clone(), listener)?;
    tasks.push(tokio::spawn(server));
    tracing::info!(node = %shared.cfg.node_name, %addr, runtime = %version.runtime_version, "node agent started");
    Ok(RunningAgent {
        shared,
        tasks,
        addr,
    })
}

impl RunningAgent {
    /// The address of the agent's HTTPS API.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Node's name.
    pub fn node_name(&self) -> &str {
        &self.shared.cfg.node_name
    }

    /// Stop the agent (its pods keep running in the runtime, as when a
    /// kubelet stops; a restarted agent adopts them).
    pub async fn stop(self) {
        self.shared.stop.cancel();
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }

    /// Stop the agent and every pod it runs (their sandboxes removed, with
    /// volumes, logs and cgroups): what `kubeforge up` does on the way out.
    pub async fn stop_and_remove_pods(self) {
        let shared = self.shared.clone();
        self.stop().await;
        let pods: Vec<Arc<Pod>> = shared
            .pods
            .lock()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default();
        for p in pods {
            let (_, _, uid) = pod::identity(&p);
            crate::worker::kill_pod(&shared, &p, 2).await;
            let mut volumes = crate::volumes::PodVolumes::default();
            volumes.tear_down(&shared.cfg.root_dir, uid);
        }
        crate::host::remove_cgroup(&shared.cgroup_root());
    }
}

fn condition(ty: &str, ok: bool, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": ty, "status": if ok { "True" } else { "False" }, "reason": reason, "message": message,
           "lastHeartbeatTime": now, "lastTransitionTime": now})
}

async fn node_status(shared: &Shared, port: u16, runtime_version: &str) -> Value {
    let now = crate::status::now();
    let conditions = shared.cri.status().await.unwrap_or_default();
    let not_ready: Vec<String> = conditions
        .iter()
        .filter(|c| !c.status)
        .map(|c| {
            let what = if c.r#type == "NetworkReady" {
                "network"
            } else {
                "runtime"
            };
            format!(
                "container runtime {what} not ready: {}=false reason:{} message:{}",
                c.r#type, c.reason, c.message
            )
        })
        .collect();
    let ready = !conditions.is_empty() && not_ready.is_empty();
    let ready_cond = if ready {
        condition(
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
            &now,
        )
    } else {
        let msg = if conditions.is_empty() {
            "container runtime is down".to_string()
        } else {
            not_ready.join(", ")
        };
        condition("Ready", false, "KubeletNotReady", &msg, &now)
    };
    let capacity = json!({
        "cpu": format!("{}", shared.cpu_milli / 1000),
        "memory": format!("{}Ki", shared.memory / 1024),
        "pods": shared.cfg.max_pods.to_string(),
        "ephemeral-storage": format!("{}Ki", disk_kib(&shared.cfg.root_dir)),
    });
    let mut images = shared.cri.image.clone();
    let image_list: Vec<Value> = images
        .list_images(api::ListImagesRequest { filter: None })
        .await
        .map(|r| r.into_inner().images)
        .unwrap_or_default()
        .into_iter()
        .take(50)
        .map(|i| {
            let mut names = i.repo_digests.clone();
            names.extend(i.repo_tags.clone());
            json!({"names": names, "sizeBytes": i.size})
        })
        .collect();
    let uname = nix::sys::utsname::uname().ok();
    json!({
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            condition("MemoryPressure", false, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", &now),
            condition("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", &now),
            condition("PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available", &now),
            ready_cond,
        ],
        "addresses": [
            {"type": "InternalIP", "address": shared.host_ip},
            {"type": "Hostname", "address": shared.cfg.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "machineID": read_trimmed("/etc/machine-id"),
            "systemUUID": read_trimmed("/sys/class/dmi/id/product_uuid"),
            "bootID": read_trimmed("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": uname.as_ref().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default(),
            "osImage": os_image(),
            "containerRuntimeVersion": runtime_version,
            "kubeletVersion": concat!("v1.33.0-kubeforge.", env!("CARGO_PKG_VERSION")),
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a },
        },
        "images": image_list,
    })
}

fn disk_kib(path: &std::path::Path) -> u64 {
    nix::sys::statvfs::statvfs(path)
        .map(|s| s.blocks() * s.fragment_size() / 1024)
        .unwrap_or(0)
}

fn os_image() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "Linux".into())
}

async fn register(shared: &Shared, port: u16, runtime_version: &str) -> Result<(), NodeError> {
    let name = &shared.cfg.node_name;
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a },
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a },
    });
    for (k, v) in &shared.cfg.labels {
        labels[k] = json!(v);
    }
    let mut spec = json!({});
    if let Some(cidr) = &shared.cfg.pod_cidr {
        spec = json!({"podCIDR": cidr, "podCIDRs": [cidr]});
    }
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": spec});
    let node: Node =
        serde_json::from_value(node).map_err(|e| NodeError::Registry(e.to_string()))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch = json!({"metadata": {"labels": node.metadata.labels}});
            nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Err(e) => return Err(e.into()),
    }
    let status = json!({"status": node_status(shared, port, runtime_version).await});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    renew_lease(shared).await;
    Ok(())
}

async fn renew_lease(shared: &Shared) {
    let name = &shared.cfg.node_name;
    let leases: Api<Lease> = Api::namespaced(shared.client.clone(), "kube-node-lease");
    let renew = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let spec = json!({"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew});
    let patch = json!({"spec": spec});
    match leases
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {
            let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec});
            if let Ok(lease) = serde_json::from_value::<Lease>(lease)
                && let Err(e) = leases.create(&PostParams::default(), &lease).await
            {
                tracing::warn!(error = %e, "cannot create the node's Lease");
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot renew the node's Lease"),
    }
}

async fn heartbeats(shared: Arc<Shared>, port: u16, runtime_version: String) {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mut tick = tokio::time::interval(shared.cfg.heartbeat);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.stop.cancelled() => return,
        }
        renew_lease(&shared).await;
        let status = json!({"status": node_status(&shared, port, &runtime_version).await});
        if let Err(e) = nodes
            .patch_status(
                &shared.cfg.node_name,
                &PatchParams::default(),
                &Patch::Merge(&status),
            )
            .await
        {
            tracing::warn!(error = %e, "cannot write the node's status");
        }
    }
}

async fn watch_pods(shared: Arc<Shared>) {
    let pods: Api<Pod> = Api::all(shared.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", shared.cfg.node_name));
    let mut stream = watcher::watcher(pods, cfg).boxed();
    let mut seen: Vec<String> = Vec::new();
    loop {
        let ev = tokio::select! {
            ev = stream.next() => ev,
            _ = shared.stop.cancelled() => return,
        };
        match ev {
            None => return,
            Some(Ok(watcher::Event::Apply(p))) => shared.dispatch(p),
            Some(Ok(watcher::Event::Delete(p))) => {
                if let Some(uid) = p.metadata.uid.as_deref() {
                    shared.forget(uid);
                }
            }
            Some(Ok(watcher::Event::Init)) => seen.clear(),
            Some(Ok(watcher::Event::InitApply(p))) => {
                seen.extend(p.metadata.uid.clone());
                shared.dispatch(p);
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let gone: Vec<String> = shared
                    .pods
                    .lock()
                    .map(|p| p.keys().filter(|u| !seen.contains(u)).cloned().collect())
                    .unwrap_or_default();
                for uid in gone {
                    shared.forget(&uid);
                }
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "pod watch failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Every 10 s: rotate big logs, remove sandboxes of unknown pods.
async fn housekeeping(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    // The first pass waits for the pod list: until then every pod is unknown.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.stop.cancelled() => return,
        }
        rotate_logs(&shared).await;
        remove_orphans(&shared).await;
    }
}

async fn rotate_logs(shared: &Shared) {
    let mut rt = shared.cri.runtime.clone();
    let Ok(list) = rt
        .list_containers(api::ListContainersRequest { filter: None })
        .await
    else {
        return;
    };
    for c in list.into_inner().containers {
        if c.state != api::ContainerState::ContainerRunning as i32 {
            continue;
        }
        let Ok(st) = rt
            .container_status(api::ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await
        else {
            continue;
        };
        let Some(st) = st.into_inner().status else {
            continue;
        };
        let path = PathBuf::from(&st.log_path);
        match crate::logs::rotate_if_needed(
            &path,
            shared.cfg.container_log_max_size,
            shared.cfg.container_log_max_files,
        ) {
            Ok(true) => {
                let _ = rt
                    .reopen_container_log(api::ReopenContainerLogRequest {
                        container_id: c.id.clone(),
                    })
                    .await;
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(log = %path.display(), error = %e, "cannot rotate"),
        }
    }
}

async fn remove_orphans(shared: &Shared) {
    let mut rt = shared.cri.runtime.clone();
    let Ok(list) = rt
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                label_selector: HashMap::from([(
                    pod::MANAGED_BY.to_string(),
                    shared.cfg.node_name.clone(),
                )]),
                ..Default::default()
            }),
        })
        .await
    else {
        return;
    };
    let known: Vec<String> = shared
        .pods
        .lock()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    for sb in list.into_inner().items {
        let uid = sb.labels.get(pod::POD_UID).cloned().unwrap_or_default();
        if !known.contains(&uid) {
            tracing::info!(sandbox = %sb.id, %uid, "removing the sandbox of a pod that is gone");
            let _ = rt
                .stop_pod_sandbox(api::StopPodSandboxRequest {
                    pod_sandbox_id: sb.id.clone(),
                })
                .await;
            let _ = rt
                .remove_pod_sandbox(api::RemovePodSandboxRequest {
                    pod_sandbox_id: sb.id.clone(),
                })
                .await;
        }
    }
}

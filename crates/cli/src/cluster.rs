//! What `kubeforge up` runs beside the API server and the built-in
//! controllers to make a whole cluster: the workload controllers, the
//! scheduler, the node simulator and, on request, the sample operators —
//! all in-process, each talking to the server through its own in-process
//! `kube::Client`, exactly as they would to a remote API server.
//!
//! ```text
//! kubeforge up                                  # 3 simulated nodes
//! kubeforge up --nodes 5000 --pod-start-delay 0
//! kubeforge up --node-config nodes.yaml --operators memcached,crontab
//! ```

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use kubeforge_apiserver::{ApiServer, rbac_components};
use kubeforge_controllers::nodesim::{
    self, Delays, NodeSimulator, RunningSimulator, SimulatorOptions,
};
use kubeforge_controllers::workloads::{self, WorkloadOptions, Workloads};
use kubeforge_runtime::{Manager, ShutdownHandle};
use kubeforge_scheduler::{RunningScheduler, SchedulerBuilder, SchedulerConfiguration};

/// Where the sample operators' ServiceAccount lives, and its name: those
/// `config/default` deploys them under.
const OPERATOR_NAMESPACE: &str = "kubeforge-operators-system";
const OPERATOR_ACCOUNT: &str = "kubeforge-operators-controller-manager";
const OPERATOR_ROLE: &str = "kubeforge-operators-manager-role";
/// The operators' RBAC, as shipped for real clusters.
const OPERATOR_RULES: &str = include_str!("../../../config/rbac/role.yaml");

/// The sample operators' client: their ServiceAccount, bound to the
/// ClusterRole of `config/rbac/role.yaml` (created or updated here by
/// server-side apply), so they run with exactly the permissions their
/// manifests grant on a real cluster — a missing rule fails here too.
async fn operator_client(server: &ApiServer) -> Result<kube::Client> {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::Api;
    use serde_json::json;
    let admin = server.client();
    let shipped: serde_json::Value = serde_saphyr::from_str(OPERATOR_RULES)
        .context("reading config/rbac/role.yaml (built in)")?;
    let rbac = "rbac.authorization.k8s.io/v1";
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": OPERATOR_NAMESPACE}});
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": OPERATOR_ACCOUNT}});
    let role = json!({"apiVersion": rbac, "kind": "ClusterRole",
        "metadata": {"name": OPERATOR_ROLE}, "rules": shipped["rules"]});
    let binding = json!({"apiVersion": rbac, "kind": "ClusterRoleBinding",
        "metadata": {"name": OPERATOR_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPERATOR_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE}]});
    apply(&Api::<Namespace>::all(admin.clone()), &namespace)
        .await
        .context("creating the operators' namespace")?;
    apply(
        &Api::<ServiceAccount>::namespaced(admin.clone(), OPERATOR_NAMESPACE),
        &account,
    )
    .await
    .context("creating the operators' ServiceAccount")?;
    apply(&Api::<ClusterRole>::all(admin.clone()), &role)
        .await
        .context("creating the operators' ClusterRole")?;
    apply(&Api::<ClusterRoleBinding>::all(admin), &binding)
        .await
        .context("binding the operators' ClusterRole")?;
    Ok(
        server.client_as(kubeforge_apiserver::UserInfo::service_account(
            OPERATOR_NAMESPACE,
            OPERATOR_ACCOUNT,
        )),
    )
}

/// Server-side apply `obj` (named by its `metadata.name`) through `api`.
async fn apply<K>(api: &kube::Api<K>, obj: &serde_json::Value) -> kube::Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let pp = kube::api::PatchParams::apply("kubeforge").force();
    api.patch(name, &pp, &kube::api::Patch::Apply(obj)).await
}

/// The operators `--operators` accepts.
const OPERATORS: [&str; 2] = ["memcached", "crontab"];

/// `kubeforge up`'s cluster options.
#[derive(Args, Clone, Debug)]
pub struct ClusterArgs {
    /// Simulated nodes node-0 … node-{N-1} (32 CPUs, 256Gi, 110 pods each,
    /// spread over zone-a/b/c); 0 for none. Default 3, or 0 with
    /// --container-nodes.
    #[arg(long)]
    nodes: Option<usize>,
    /// Nodes container-0 … container-{N-1} whose pods really run: a
    /// private containerd each (with runc and the reference CNI plugins),
    /// images from a local registry (`kubeforge image build`). Needs root
    /// and Debian's containerd, runc, containernetworking-plugins and
    /// docker-registry.
    #[arg(long, default_value_t = 0)]
    container_nodes: usize,
    /// The CNI plugin attaching container nodes' pods: `kubeforge`
    /// (kubeforge-cni, this program by that name) or `reference`
    /// (Debian's bridge and host-local).
    #[arg(long, default_value = "kubeforge", value_parser = ["kubeforge", "reference"])]
    cni: String,
    /// Declare the simulated nodes in a YAML file instead (capacity,
    /// extended resources, labels, taints, podCIDR); see docs/guide/nodes.md.
    #[arg(long, value_name = "FILE")]
    node_config: Option<PathBuf>,
    /// How long a bound pod takes to become Running ("100ms", "0").
    #[arg(long, default_value = "100ms", value_parser = duration)]
    pod_start_delay: Duration,
    /// How long a Job's pod runs before it succeeds.
    #[arg(long, default_value = "1s", value_parser = duration)]
    pod_run_time: Duration,
    /// How long containers take to exit after a graceful delete (the pod is
    /// deleted then, or at the end of its grace period if sooner); `grace`
    /// waits for the whole grace period, as for containers ignoring SIGTERM.
    #[arg(long, default_value = "1s", value_parser = exit_delay)]
    pod_exit_delay: ExitDelay,
    /// Sample operators to run in-process (their CRDs are installed):
    /// memcached, crontab.
    #[arg(long, value_delimiter = ',')]
    operators: Vec<String>,
    /// How long a node may miss heartbeats before the node lifecycle
    /// controller marks it NotReady (kube-controller-manager's 40s).
    #[arg(long, default_value = "40s", value_parser = duration)]
    node_monitor_grace_period: Duration,
    /// Least time between two syncs of a ReplicaSet of 1,000 replicas,
    /// scaled down with fewer ("0" syncs on every pod event): the pod events
    /// of a large ReplicaSet are merged.
    #[arg(long, default_value = "100ms", value_parser = duration)]
    replicaset_sync_interval: Duration,
    /// A KubeSchedulerConfiguration file for the scheduler.
    #[arg(long, value_name = "FILE")]
    scheduler_config: Option<PathBuf>,
    /// Run without the scheduler (pods stay Pending unless bound by hand).
    #[arg(long)]
    no_scheduler: bool,
    /// Run without the workload controllers (Deployments, Jobs, … do nothing).
    #[arg(long)]
    no_workload_controllers: bool,
    /// Serve the cluster's object-state metrics (kube-state-metrics'
    /// names: pods, Deployments, nodes) at http://ADDR/metrics; plain
    /// HTTP, so a loopback address.
    #[arg(long, value_name = "ADDR")]
    state_metrics: Option<std::net::SocketAddr>,
    /// Serve no Metrics API (metrics.k8s.io: `kubectl top`, HPAs).
    #[arg(long)]
    no_metrics_api: bool,
    /// The Metrics API's window (metrics-server's --metric-resolution).
    #[arg(long, default_value = "15s", value_parser = duration)]
    metric_resolution: Duration,
    /// How often each HorizontalPodAutoscaler is synced.
    #[arg(long, default_value = "15s", value_parser = duration)]
    horizontal_pod_autoscaler_sync_period: Duration,
    /// How long an HPA without its own `behavior.scaleDown` window waits
    /// on lower recommendations before scaling down.
    #[arg(long, default_value = "5m", value_parser = duration)]
    horizontal_pod_autoscaler_downscale_stabilization: Duration,
}

impl ClusterArgs {
    /// Whether pods really run here (`--container-nodes`).
    pub fn runs_containers(&self) -> bool {
        self.container_nodes > 0
    }

    /// Refuse (exit 2) what cannot be served, before anything starts.
    pub fn check(&self) {
        if let Some(addr) = self.state_metrics {
            crate::state_metrics::require_loopback(addr, "--state-metrics");
        }
        if self.container_nodes > 0 {
            crate::containers::check();
        }
    }
}

/// `--pod-exit-delay`: a duration, or `grace` (`None`).
#[derive(Clone, Copy, Debug)]
struct ExitDelay(Option<Duration>);

fn exit_delay(s: &str) -> Result<ExitDelay, String> {
    if s == "grace" {
        return Ok(ExitDelay(None));
    }
    duration(s).map(|d| ExitDelay(Some(d)))
}

pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    nodesim::parse_duration(s).ok_or_else(|| format!("{s:?} is not a duration (e.g. 0, 250ms, 2s)"))
}

/// The sample operators' manager: names, shutdown handle, task.
struct Operators {
    names: Vec<String>,
    shutdown: ShutdownHandle,
    task: tokio::task::JoinHandle<Result<(), kubeforge_runtime::Error>>,
}

/// The cluster's running parts.
pub struct Cluster {
    workloads: Option<Workloads>,
    scheduler: Option<RunningScheduler>,
    simulator: Option<RunningSimulator>,
    containers: Option<crate::containers::ContainerNodes>,
    operators: Option<Operators>,
    /// What stops the Metrics API's provider.
    metrics_api: Option<tokio_util::sync::CancellationToken>,
    /// Where the state metrics are served, and what stops them.
    state_metrics: Option<(std::net::SocketAddr, tokio_util::sync::CancellationToken)>,
    delays: Delays,
}

/// Start the workload controllers, the scheduler, the simulated nodes and
/// the operators against `server` (whose built-in controllers already run).
/// `tls` is the API server's serving configuration, for the listener pods
/// reach on container nodes (none with `--insecure-http`).
pub async fn start(
    server: &ApiServer,
    args: ClusterArgs,
    lock: &kubeforge_node::footprint::DirLock,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
) -> Result<Cluster> {
    for op in &args.operators {
        if !OPERATORS.contains(&op.as_str()) {
            bail!(
                "unknown operator {op:?} in --operators: choose from {}",
                OPERATORS.join(", ")
            );
        }
    }
    let nodes = match &args.node_config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the node config {}", path.display()))?;
            nodesim::config::from_yaml(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => match args
            .nodes
            .unwrap_or(if args.container_nodes > 0 { 0 } else { 3 })
        {
            0 => Vec::new(),
            n => nodesim::config::uniform(n)?,
        },
    };
    let scheduler_config = match &args.scheduler_config {
        Some(path) => SchedulerConfiguration::from_file(path)
            .with_context(|| format!("invalid scheduler configuration {}", path.display()))?,
        None => SchedulerConfiguration::default(),
    };
    let delays = Delays {
        start: args.pod_start_delay,
        complete: args.pod_run_time,
        exit: args.pod_exit_delay.0,
    };
    let workloads = if args.no_workload_controllers {
        None
    } else {
        Some(
            workloads::start(
                server.controller_clients(),
                WorkloadOptions {
                    node_monitor_grace_period: args.node_monitor_grace_period,
                    replicaset_sync_interval: args.replicaset_sync_interval,
                    hpa: kubeforge_controllers::workloads::hpa::HpaOptions {
                        sync_period: args.horizontal_pod_autoscaler_sync_period,
                        downscale_stabilization: args
                            .horizontal_pod_autoscaler_downscale_stabilization,
                        ..Default::default()
                    },
                    node_monitor_period: args
                        .node_monitor_grace_period
                        .min(Duration::from_secs(5))
                        .max(Duration::from_millis(200)),
                    ..WorkloadOptions::default()
                },
            )
            .await
            .context("starting the workload controllers")?,
        )
    };
    let scheduler = if args.no_scheduler {
        None
    } else {
        let running =
            SchedulerBuilder::new(server.component_client(rbac_components::SCHEDULER_USER))
                .config(scheduler_config)
                .start()
                .context("starting the scheduler")?;
        server.set_scheduler_running(true);
        Some(running)
    };
    let simulator = if nodes.is_empty() {
        None
    } else {
        // The simulated kubelets finish graceful pod deletion.
        server.set_graceful_pod_deletion(true);
        let mut options = SimulatorOptions::new(nodes).delays(delays);
        // Renew Leases well within the grace period (the kubelet's 10 s
        // against 40 s), so a short --node-monitor-grace-period is safe.
        options.lease_interval = (args.node_monitor_grace_period / 4)
            .clamp(Duration::from_millis(100), options.lease_interval);
        Some(
            NodeSimulator::start(
                server.component_client(rbac_components::NODE_SIMULATOR_USER),
                options,
            )
            .await
            .context("registering the simulated nodes")?,
        )
    };
    let operators = if args.operators.is_empty() {
        None
    } else {
        let client = server.client();
        for op in &args.operators {
            crate::operator::install_crd(&client, op).await?;
        }
        let mgr = Manager::builder(operator_client(server).await?)
            .handle_signals(false)
            .build();
        for op in &args.operators {
            match op.as_str() {
                "memcached" => kubeforge_operators::memcached::controller::register(&mgr),
                _ => kubeforge_operators::crontab::controller::register(&mgr, Default::default()),
            }
        }
        let handle = mgr.shutdown_handle();
        Some(Operators {
            names: args.operators.clone(),
            shutdown: handle,
            task: tokio::spawn(mgr.run()),
        })
    };
    let containers = if args.container_nodes > 0 {
        let cni = if args.cni == "reference" {
            kubeforge_node::network::CniPlugin::Reference
        } else {
            kubeforge_node::network::CniPlugin::Kubeforge(
                std::env::current_exe().context("finding this program to run as kubeforge-cni")?,
            )
        };
        Some(crate::containers::start(server, lock, args.container_nodes, tls, &cni).await?)
    } else {
        None
    };
    let metrics_api = if args.no_metrics_api {
        None
    } else {
        Some(start_metrics_api(server, args.metric_resolution))
    };
    let state_metrics = match args.state_metrics {
        Some(addr) => {
            let client = server.component_client(rbac_components::STATE_METRICS_USER);
            Some(crate::state_metrics::start(client, addr).await?)
        }
        None => None,
    };
    Ok(Cluster {
        workloads,
        scheduler,
        simulator,
        containers,
        operators,
        metrics_api,
        state_metrics,
        delays,
    })
}

/// The Metrics API's provider (kubeforge-observability, watching pods and
/// nodes as metrics-server's identity) served by the API server in-process.
fn start_metrics_api(server: &ApiServer, window: Duration) -> tokio_util::sync::CancellationToken {
    use kubeforge_observability::resource_metrics::{ResourceMetrics, UsageOptions};
    let stop = tokio_util::sync::CancellationToken::new();
    let metrics = ResourceMetrics::new(UsageOptions {
        window,
        ..UsageOptions::default()
    })
    .start(
        server.component_client(rbac_components::METRICS_SERVER_USER),
        stop.clone(),
    );
    server.set_metrics_provider(std::sync::Arc::new(MetricsApi(metrics)));
    stop
}

/// The provider as the API server's hook (objects as JSON).
struct MetricsApi(kubeforge_observability::resource_metrics::ResourceMetrics);

impl kubeforge_apiserver::MetricsProvider for MetricsApi {
    fn nodes(&self) -> Vec<serde_json::Value> {
        let items = self.0.node_metrics();
        items
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect()
    }

    fn pods(&self, namespace: Option<&str>) -> Vec<serde_json::Value> {
        let items = self.0.pod_metrics(namespace);
        items
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect()
    }
}

impl Cluster {
    /// Lines saying what runs, under the API server's.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.workloads.is_some() {
            out.push(format!("  workloads:  {}", workloads::NAMES));
        }
        if self.scheduler.is_some() {
            out.push("  scheduler:  default-scheduler".to_string());
        }
        if let Some(sim) = &self.simulator {
            let nodes = sim.nodes();
            let names = match nodes {
                [one] => one.name.clone(),
                [first, .., last] => format!("{} … {}", first.name, last.name),
                [] => String::new(),
            };
            out.push(format!(
                "  nodes:      {} simulated ({names}), pods start after {:?}",
                nodes.len(),
                self.delays.start
            ));
        }
        if let Some(c) = &self.containers {
            out.extend(c.describe());
        }
        if let Some(Operators { names, .. }) = &self.operators {
            out.push(format!("  operators:  {}", names.join(", ")));
        }
        if self.metrics_api.is_some() {
            out.push("  metrics:    metrics.k8s.io (kubectl top, HPAs)".to_string());
        }
        if let Some((addr, _)) = &self.state_metrics {
            out.push(format!(
                "  state:      http://{addr}/metrics (kube-state-metrics' series)"
            ));
        }
        out
    }

    /// The first commands to try.
    pub fn try_lines(&self) -> Vec<String> {
        if self.containers.is_some() {
            vec![
                "Try: kubectl run hello --image=busybox:1.36 -- sh -c 'echo hello; sleep 3600'"
                    .to_string(),
                "     kubectl logs -f hello".to_string(),
            ]
        } else if self.simulator.is_some() && self.workloads.is_some() {
            vec![
                "Try: kubectl create deployment web --image=nginx --replicas=3".to_string(),
                "     kubectl rollout status deploy/web && kubectl get pods -o wide".to_string(),
            ]
        } else {
            vec!["Try: kubectl get ns".to_string()]
        }
    }

    /// Stop everything, operators first, nodes last but one.
    pub async fn stop(self) {
        if let Some(stop) = self.metrics_api {
            stop.cancel();
        }
        if let Some((_, stop)) = self.state_metrics {
            stop.cancel();
        }
        if let Some(ops) = self.operators {
            ops.shutdown.shutdown();
            let _ = ops.task.await;
        }
        if let Some(s) = self.scheduler {
            s.stop().await;
        }
        if let Some(w) = self.workloads {
            w.stop().await;
        }
        if let Some(sim) = self.simulator {
            sim.stop().await;
        }
        if let Some(c) = self.containers {
            c.stop().await;
        }
    }
}

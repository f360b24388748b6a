//! A whole Kubernetes control plane inside a test, handing back a
//! `kube::Client` in milliseconds: kubeforge's counterpart of
//! controller-runtime's envtest (which starts etcd and kube-apiserver
//! processes, 4.6–15 s).
//!
//! A [`TestEnv`] wires the embedded pieces together: an API server over a
//! memory store ([`kubeforge_apiserver`]), the CRDs the test needs (from Rust
//! types or a directory of YAML files, Established before
//! [`TestEnvBuilder::start`] returns), the built-in garbage collector and
//! namespace controller ([`kubeforge_controllers`]), and [fault
//! injection](faults) so an operator's convergence under API errors, latency
//! and dropped watches can be tested. By default the client talks to the
//! server in-process (no socket); with [`TestEnvBuilder::loopback`] the
//! server listens on `127.0.0.1` and a kubeconfig file lets `kubectl` in.
//! Each environment is independent, so many run in parallel in one test
//! binary. With [`TestEnvBuilder::controllers`],
//! [`TestEnvBuilder::scheduler`] and [`TestEnvBuilder::nodes`] it is a whole
//! cluster: Deployments roll out onto simulated nodes and pods run.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubeforge_testenv::Error> {
//! use std::time::Duration;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kubeforge_testenv::{Faults, TestEnv};
//!
//! let env = TestEnv::builder()
//!     .crds_from_dir("config/crd/bases")
//!     .faults(Faults::new().error_rate(0.05).drop_watches_after(Duration::from_secs(2)))
//!     .start()
//!     .await?;
//! let cms: kube::Api<ConfigMap> = kube::Api::default_namespaced(env.client());
//! // … run the controller under test against env.client() and check that it converges …
//! env.faults().clear();
//! env.stop().await;
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeforge_apiserver::ApiServer;
use kubeforge_controllers::nodesim::{
    self, Delays, NodeSimulator, NodeSpec, RunningSimulator, SimulatorOptions,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::Layer;

pub mod crds;
pub mod faults;
pub mod rng;
pub mod running;

pub use faults::{
    FaultBody, FaultHandle, FaultLayer, FaultService, FaultStats, Faults, InjectedError, Verb,
};
pub use kubeforge_apiserver::UserInfo;
pub use rng::Rng;
pub use running::{RunningManager, create_namespace, events_about};

/// Why a test environment could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A CRD file or directory could not be read.
    #[error("reading CRDs from {path}: {source}")]
    ReadCrds {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A CRD file holds something that is not a valid v1 CRD.
    #[error("{path}: document {document}: {message}")]
    ParseCrd {
        /// The file.
        path: PathBuf,
        /// The 1-based document number in the file (0: the file as a whole).
        document: usize,
        /// What is wrong.
        message: String,
    },
    /// A CRD directory holds no CustomResourceDefinition.
    #[error("no CustomResourceDefinition in the .yaml/.yml/.json files of {0}")]
    NoCrds(PathBuf),
    /// The server refused a CRD.
    #[error("installing CRD {name:?}: {source}")]
    InstallCrd {
        /// The CRD's name.
        name: String,
        /// The server's answer.
        source: kube::Error,
    },
    /// The server could not install its access-policy CRDs.
    #[error("turning RBAC on: {0}")]
    Rbac(String),
    /// A CRD was stored but never became Established.
    #[error("CRD {name:?} did not become Established: {message}")]
    NotEstablished {
        /// The CRD's name.
        name: String,
        /// Why.
        message: String,
    },
    /// The loopback listener could not be opened.
    #[error("listening on 127.0.0.1 for the loopback server: {0}")]
    Listen(std::io::Error),
    /// The kubeconfig file could not be written.
    #[error("writing the kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The workload controllers did not start.
    #[error("starting the workload controllers: {0}")]
    Workloads(#[source] kubeforge_controllers::Error),
    /// The scheduler did not start.
    #[error("starting the scheduler: {0}")]
    Scheduler(#[source] kubeforge_scheduler::BuildError),
    /// The simulated nodes could not be registered.
    #[error("starting the node simulator: {0}")]
    Nodes(#[source] kubeforge_controllers::nodesim::Error),
    /// A ServiceAccount, its role or binding could not be created.
    #[error("granting {what}: {source}")]
    Grant {
        /// What was being created.
        what: String,
        /// The server's answer.
        source: kube::Error,
    },
    /// The loopback client could not be built.
    #[error("building the loopback client: {0}")]
    Client(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Configures and starts a [`TestEnv`]; made by [`TestEnv::builder`].
#[derive(Debug)]
#[must_use]
pub struct TestEnvBuilder {
    crds: Vec<CustomResourceDefinition>,
    crd_dirs: Vec<PathBuf>,
    builtin_controllers: bool,
    loopback: bool,
    rbac: bool,
    faults: Faults,
    workloads: bool,
    scheduler: bool,
    nodes: Option<Vec<NodeSpec>>,
    node_delays: Delays,
}

impl Default for TestEnvBuilder {
    fn default() -> Self {
        TestEnvBuilder {
            crds: Vec::new(),
            crd_dirs: Vec::new(),
            builtin_controllers: true,
            loopback: false,
            rbac: false,
            faults: Faults::new(),
            workloads: false,
            scheduler: false,
            nodes: None,
            node_delays: Delays::default(),
        }
    }
}

impl TestEnvBuilder {
    /// Install `crd` (e.g. `Memcached::crd()` from `kube::CustomResourceExt`).
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    /// Install several CRDs.
    pub fn crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }

    /// Install every CRD in the `.yaml`, `.yml` and `.json` files directly
    /// in `dir` (multi-document files are fine; documents of other kinds
    /// are skipped). Read when the environment starts; a missing directory
    /// or one without any CRD fails the start.
    pub fn crds_from_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crd_dirs.push(dir.into());
        self
    }

    /// Run the built-in garbage collector and namespace controller (default
    /// on). Without them, the server deletes a namespace's contents at once
    /// and adds no deletion finalizers, and dependents are not collected.
    pub fn builtin_controllers(mut self, on: bool) -> Self {
        self.builtin_controllers = on;
        self
    }

    /// Serve HTTP on a free `127.0.0.1` port and write a kubeconfig for it
    /// (default off: the client talks to the server in-process). The
    /// environment's [`TestEnv::client`] then goes through the socket too.
    pub fn loopback(mut self, on: bool) -> Self {
        self.loopback = on;
        self
    }

    /// Decide requests by RBAC (default off: every request is allowed).
    /// [`TestEnv::client`] stays privileged (`system:masters`); clients
    /// from [`TestEnv::client_as`] get exactly what their Roles grant, so an
    /// operator's tests run with the operator's own RBAC and fail when its
    /// manifests miss a permission.
    pub fn rbac(mut self, on: bool) -> Self {
        self.rbac = on;
        self
    }

    /// Run the workload controllers (Deployment, ReplicaSet, StatefulSet,
    /// DaemonSet, Job, CronJob, EndpointSlices, node lifecycle), so an
    /// operator's Deployments really roll out. Pods only run with
    /// [`Self::scheduler`] and [`Self::nodes`] too.
    pub fn controllers(mut self) -> Self {
        self.workloads = true;
        self
    }

    /// Run the scheduler (default profile), binding pending pods to nodes.
    pub fn scheduler(mut self) -> Self {
        self.scheduler = true;
        self
    }

    /// Simulate `n` nodes `node-0` … `node-{n-1}` (32 CPUs, 256Gi, 110 pods
    /// each, over zone-a/b/c) that run the pods bound to them; pods also
    /// delete gracefully then. See [`kubeforge_controllers::nodesim`].
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = nodesim::config::uniform(n).ok();
        self
    }

    /// Simulate these nodes (e.g. from `nodesim::config::from_yaml`).
    pub fn node_specs(mut self, nodes: Vec<NodeSpec>) -> Self {
        self.nodes = Some(nodes);
        self
    }

    /// The simulated kubelet's delays (default: pods start after 100 ms,
    /// Job pods run 1 s, deletions wait for the grace period);
    /// [`Delays::zero`] for the fastest tests.
    pub fn node_delays(mut self, delays: Delays) -> Self {
        self.node_delays = delays;
        self
    }

    /// Faults to inject once the environment has started (setup — CRDs,
    /// the built-in controllers' requests — is never faulted). Change them
    /// later with [`TestEnv::faults`].
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Start the environment: the server, its CRDs (Established when this
    /// returns), the built-in controllers, the loopback listener if asked.
    pub async fn start(self) -> Result<TestEnv, Error> {
        let mut crds = self.crds;
        for dir in &self.crd_dirs {
            crds.extend(crds::read_dir(dir)?);
        }
        let server = ApiServer::in_memory().await;
        server
            .enable_rbac(self.rbac)
            .await
            .map_err(|e| Error::Rbac(e.to_string()))?;
        if !crds.is_empty() {
            crds::install(&server.client(), crds).await?;
        }
        let controllers = self.builtin_controllers.then(|| {
            server.set_controllers_running(true);
            kubeforge_controllers::start_builtin(
                kubeforge_controllers::ControllerClients::from(server.controller_clients())
                    .with_token_issuer(server.token_issuer()),
            )
        });
        let workloads = if self.workloads {
            Some(
                kubeforge_controllers::workloads::start(
                    server.controller_clients(),
                    Default::default(),
                )
                .await
                .map_err(Error::Workloads)?,
            )
        } else {
            None
        };
        let scheduler = if self.scheduler {
            let running = kubeforge_scheduler::SchedulerBuilder::new(
                server.component_client(kubeforge_apiserver::rbac_components::SCHEDULER_USER),
            )
            .start()
            .map_err(Error::Scheduler)?;
            server.set_scheduler_running(true);
            Some(running)
        } else {
            None
        };
        let simulator = match self.nodes {
            Some(nodes) if !nodes.is_empty() => {
                server.set_graceful_pod_deletion(true);
                let options = SimulatorOptions::new(nodes).delays(self.node_delays);
                Some(
                    NodeSimulator::start(
                        server.component_client(
                            kubeforge_apiserver::rbac_components::NODE_SIMULATOR_USER,
                        ),
                        options,
                    )
                    .await
                    .map_err(Error::Nodes)?,
                )
            }
            _ => None,
        };
        let faults = FaultHandle::new(Faults::new());
        let mut env = TestEnv {
            workloads,
            scheduler,
            simulator,
            client: kube::Client::new(faults.layer().layer(server.loopback_service()), "default"),
            server,
            faults,
            controllers,
            loopback: None,
        };
        if self.loopback {
            env.loopback = Some(Loopback::start(&env.server, &env.faults).await?);
            if let Some(l) = &env.loopback {
                let url = l.url().parse().map_err(|e| Error::Client(Box::new(e)))?;
                env.client = kube::Client::try_from(kube::Config::new(url))
                    .map_err(|e| Error::Client(Box::new(e)))?;
            }
        }
        env.faults.set(self.faults);
        Ok(env)
    }
}

/// A running test environment; see the [crate docs](crate). Dropping it
/// stops everything; [`TestEnv::stop`] does so and waits.
pub struct TestEnv {
    server: ApiServer,
    client: kube::Client,
    faults: FaultHandle,
    controllers: Option<kubeforge_controllers::Builtin>,
    workloads: Option<kubeforge_controllers::Workloads>,
    scheduler: Option<kubeforge_scheduler::RunningScheduler>,
    simulator: Option<RunningSimulator>,
    loopback: Option<Loopback>,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("builtin_controllers", &self.controllers.is_some())
            .field("workload_controllers", &self.workloads.is_some())
            .field("scheduler", &self.scheduler.is_some())
            .field("nodes", &self.simulator.as_ref().map(|s| s.nodes().len()))
            .field("loopback", &self.loopback.as_ref().map(|l| l.addr))
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl TestEnv {
    /// Configure an environment.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder::default()
    }

    /// Start an environment with the defaults: in-process, built-in
    /// controllers, no CRDs, no faults.
    pub async fn start() -> Result<TestEnv, Error> {
        TestEnv::builder().start().await
    }

    /// A client for the environment (default namespace `default`), through
    /// fault injection; in loopback mode it talks HTTP over the socket.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// An in-process client acting as `user` (no fault injection): with
    /// [`TestEnvBuilder::rbac`] it may do what RBAC grants that user, e.g.
    /// `env.client_as(UserInfo::service_account("system", "my-operator"))`.
    pub fn client_as(&self, user: kubeforge_apiserver::UserInfo) -> kube::Client {
        self.server.client_as(user)
    }

    /// A client acting as ServiceAccount `namespace/name`, allowed exactly
    /// `rules` (cluster-wide) and `namespaced` (a Role in `namespace`,
    /// e.g. leader election's Leases): creates the namespace if missing,
    /// the ServiceAccount, a ClusterRole and Role `<namespace>-<name>` and
    /// their bindings, as a deployed operator would have them. Needs
    /// [`TestEnvBuilder::rbac`] for the rules to limit anything.
    pub async fn client_for_service_account(
        &self,
        namespace: &str,
        name: &str,
        rules: Vec<PolicyRule>,
        namespaced: Vec<PolicyRule>,
    ) -> Result<kube::Client, Error> {
        let admin = self.server.client();
        let role = format!("{namespace}-{name}");
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(namespace.into()),
            ..Subject::default()
        };
        let meta = |ns: Option<&str>| ObjectMeta {
            name: Some(if ns.is_some() {
                name.to_string()
            } else {
                role.clone()
            }),
            namespace: ns.map(String::from),
            ..ObjectMeta::default()
        };
        let pp = kube::api::PostParams::default();
        let grant = |what: &str| {
            let what = what.to_string();
            move |source| Error::Grant { what, source }
        };
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match kube::Api::<Namespace>::all(admin.clone())
            .create(&pp, &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(grant("the namespace")(e)),
        }
        let sa = ServiceAccount {
            metadata: meta(Some(namespace)),
            ..ServiceAccount::default()
        };
        kube::Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .create(&pp, &sa)
            .await
            .map_err(grant("the ServiceAccount"))?;
        let role_ref = |kind: &str| RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: kind.into(),
            name: role.clone(),
        };
        let cluster_role = ClusterRole {
            metadata: meta(None),
            rules: Some(rules),
            ..ClusterRole::default()
        };
        kube::Api::<ClusterRole>::all(admin.clone())
            .create(&pp, &cluster_role)
            .await
            .map_err(grant("the ClusterRole"))?;
        let binding = ClusterRoleBinding {
            metadata: meta(None),
            role_ref: role_ref("ClusterRole"),
            subjects: Some(vec![subject.clone()]),
        };
        kube::Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&pp, &binding)
            .await
            .map_err(grant("the ClusterRoleBinding"))?;
        if !namespaced.is_empty() {
            let in_ns = ObjectMeta {
                name: Some(role.clone()),
                namespace: Some(namespace.into()),
                ..ObjectMeta::default()
            };
            let r = Role {
                metadata: in_ns.clone(),
                rules: Some(namespaced),
            };
            kube::Api::<Role>::namespaced(admin.clone(), namespace)
                .create(&pp, &r)
                .await
                .map_err(grant("the Role"))?;
            let b = RoleBinding {
                metadata: in_ns,
                role_ref: role_ref("Role"),
                subjects: Some(vec![subject]),
            };
            kube::Api::<RoleBinding>::namespaced(admin, namespace)
                .create(&pp, &b)
                .await
                .map_err(grant("the RoleBinding"))?;
        }
        Ok(
            self.client_as(kubeforge_apiserver::UserInfo::service_account(
                namespace, name,
            )),
        )
    }

    /// An in-process client that bypasses fault injection: for a test's own
    /// setup and checks while faults are on.
    pub fn client_without_faults(&self) -> kube::Client {
        self.server.client()
    }

    /// The kubeconfig file for `kubectl` (and any other client) in loopback
    /// mode; `None` in-process. Removed when the environment stops.
    pub fn kubeconfig_path(&self) -> Option<&Path> {
        self.loopback.as_ref().map(|l| l.kubeconfig.as_path())
    }

    /// The loopback server's address, in loopback mode.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.loopback.as_ref().map(|l| l.addr)
    }

    /// The fault setting: `env.faults().set(Faults::new().error_rate(0.1))`
    /// after a clean setup, `env.faults().clear()`, `env.faults().stats()`.
    pub fn faults(&self) -> &FaultHandle {
        &self.faults
    }

    /// The embedded API server.
    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    /// The built-in controllers, when running (e.g. to wait until their
    /// caches are synced).
    pub fn controllers(&self) -> Option<&kubeforge_controllers::Builtin> {
        self.controllers.as_ref()
    }

    /// The node simulator, when [`TestEnvBuilder::nodes`] was set: its
    /// nodes, and [`RunningSimulator::set_heartbeats`] to cut one off.
    pub fn simulator(&self) -> Option<&RunningSimulator> {
        self.simulator.as_ref()
    }

    /// Stop the loopback listener and the controllers, waiting for them,
    /// and close the store: open watches end, and writes through clients
    /// still held fail with 503 ServiceUnavailable.
    pub async fn stop(mut self) {
        if let Some(l) = self.loopback.take() {
            l.stop().await;
        }
        if let Some(s) = self.simulator.take() {
            s.stop().await;
        }
        if let Some(s) = self.scheduler.take() {
            s.stop().await;
        }
        if let Some(w) = self.workloads.take() {
            w.stop().await;
        }
        if let Some(c) = self.controllers.take() {
            c.stop().await;
        }
        self.server.store().close().await;
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // Dropping the controllers' handle signals them to stop; the
        // loopback listener is told to stop and its task aborted.
        self.controllers.take();
        if let Some(mut l) = self.loopback.take() {
            l.signal_stop();
        }
    }
}

static DIRS: AtomicU64 = AtomicU64::new(0);

/// The loopback listener and its kubeconfig.
struct Loopback {
    addr: SocketAddr,
    dir: PathBuf,
    kubeconfig: PathBuf,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Loopback {
    async fn start(server: &ApiServer, faults: &FaultHandle) -> Result<Loopback, Error> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(Error::Listen)?;
        let addr = listener.local_addr().map_err(Error::Listen)?;
        let dir = std::env::temp_dir().join(format!(
            "kubeforge-testenv-{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, Ordering::Relaxed)
        ));
        let kubeconfig = dir.join("kubeconfig");
        let write = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&kubeconfig, kubeconfig_yaml(addr)));
        if let Err(source) = write {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(Error::Kubeconfig {
                path: kubeconfig,
                source,
            });
        }
        let (tx, rx) = oneshot::channel::<()>();
        let service = faults.layer().layer(server.service());
        let task = tokio::spawn(server.clone().serve_with(
            listener,
            async move {
                let _ = rx.await;
            },
            service,
        ));
        Ok(Loopback {
            addr,
            dir,
            kubeconfig,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Tell the listener to stop, abort it, and remove the kubeconfig.
    fn signal_stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take()
            && let Ok(Err(e)) = t.await
        {
            tracing::debug!(error = %e, "loopback server ended with an error");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

/// A kubeconfig for a plain-HTTP server at `addr` (no credentials: the
/// embedded server does not authenticate), default namespace `default`;
/// `kubectl` accepts it as is.
pub fn kubeconfig_yaml(addr: SocketAddr) -> String {
    kubeforge_apiserver::kubeconfig_yaml(addr)
}

/// Wait until `check` answers true, asking again (every 5 ms at first,
/// backing off to every 100 ms) until `within` has passed, then fail the
/// test naming `what`; a check still running at that point fails it too. For conditions a watch cannot tell (or a test
/// does not watch); prefer waiting on a watch where there is one.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_some(what, within, move || {
        let f = check();
        async move { f.await.then_some(()) }
    })
    .await
}

/// [`eventually`] for a check that answers `Some(value)` once it holds;
/// returns the value.
pub async fn eventually_some<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut pause = Duration::from_millis(5);
    loop {
        // The check itself is bounded too: one that never answers (a
        // request to a server that hangs) fails at the deadline.
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(_) => panic!(
                "timed out after {within:?} waiting for {what} (its last check did not finish)"
            ),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_move_between_tasks() {
        send_sync::<super::TestEnv>();
        send_sync::<super::FaultHandle>();
        send_sync::<super::TestEnvBuilder>();
    }
}

//! The built-in controllers of the embedded cluster, as kube-rs clients: the
//! [garbage collector](gc) (ownerReferences; Background, Foreground and
//! Orphan propagation), the [namespace controller](namespace) (empties a
//! deleted namespace, then finalizes it), ClusterRole
//! [aggregation](clusterroles), each namespace's `default`
//! [ServiceAccount](serviceaccounts) and `kube-root-ca.crt`
//! [ConfigMap](rootca), the legacy [token Secrets](tokens), and the
//! [workload controllers](workloads).
//!
//! They use nothing but a [`kube::Client`], so they run unchanged against a
//! real cluster. Against kubeforge's own server, tell the server they run
//! (`ApiServer::set_controllers_running(true)`) so Foreground and Orphan
//! deletions add their finalizers and namespaces wait for finalization.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) {
//! let controllers = kubeforge_controllers::start_builtin(client);
//! controllers.wait_synced().await;
//! // … the cluster now garbage-collects and finalizes namespaces …
//! controllers.stop().await;
//! # }
//! ```

use std::future::Future;

use kube::Client;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub mod catalog;
pub mod certificates;
pub mod clients;
pub mod clusterroles;
pub mod gc;
mod gc_graph;
mod gc_object;
pub mod namespace;
pub mod nodesim;
pub mod rootca;
pub mod serviceaccounts;
pub mod tokens;
pub mod workloads;

pub use catalog::{Catalog, Resource};
pub use clients::ControllerClients;
pub use gc::{GarbageCollector, GcOptions};
pub use namespace::NamespaceOptions;
pub use nodesim::{NodeSimulator, RunningSimulator, SimulatorOptions};
pub use workloads::{WorkloadController, WorkloadOptions, Workloads};

/// The names of the built-in controllers, as `kubeforge up` prints them.
pub const BUILTIN_NAMES: &str = "garbage collector, namespace, clusterrole aggregation, \
    serviceaccount, serviceaccount tokens, root CA publisher";

/// Errors of the controllers' API calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// An ownerReference names a kind the server does not serve (yet).
    #[error("no served resource for {api_version} {kind}")]
    Unmapped {
        /// The reference's apiVersion.
        api_version: String,
        /// The reference's kind.
        kind: String,
    },
    /// An object could not be encoded.
    #[error("encoding failed: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Drive `run` (a controller loop that ends when its token is cancelled)
/// until it ends by itself or `shutdown` resolves; then cancel the token
/// and let it finish.
pub(crate) async fn run_until_shutdown<F>(
    run: impl FnOnce(CancellationToken) -> F,
    shutdown: impl std::future::Future<Output = ()>,
) where
    F: std::future::Future<Output = ()>,
{
    let stop = CancellationToken::new();
    let run = run(stop.clone());
    tokio::pin!(run);
    tokio::select! {
        () = &mut run => return,
        () = shutdown => {}
    }
    stop.cancel();
    run.await;
}

pub(crate) use kubeforge_runtime::api_errors::{
    is_already_exists, is_conflict, is_namespace_terminating, is_not_found, status_code,
};

/// Send a request whose successful answer is not needed (it is read and
/// dropped, never parsed); an error answer becomes `kube::Error::Api`.
pub(crate) async fn send_discard(
    client: &Client,
    req: http::Request<Vec<u8>>,
) -> Result<(), kube::Error> {
    send_bytes(client, req).await.map(drop)
}

/// Send a request and decode only `T` from its successful answer (a
/// narrow type: serde skips the rest of the object while parsing); an
/// error answer becomes `kube::Error::Api`.
pub(crate) async fn send_read<T: serde::de::DeserializeOwned>(
    client: &Client,
    req: http::Request<Vec<u8>>,
) -> Result<T, kube::Error> {
    let body = send_bytes(client, req).await?;
    serde_json::from_slice(&body).map_err(kube::Error::SerdeError)
}

/// Send a request; the successful answer's bytes, or the error answer as
/// `kube::Error::Api`.
async fn send_bytes(
    client: &Client,
    req: http::Request<Vec<u8>>,
) -> Result<bytes::Bytes, kube::Error> {
    let res = client.send(req.map(kube::client::Body::from)).await?;
    let code = res.status();
    let body = res.into_body().collect_bytes().await?;
    if code.is_client_error() || code.is_server_error() {
        let status = serde_json::from_slice::<kube::core::Status>(&body).unwrap_or_else(|_| {
            kube::core::Status::failure(&String::from_utf8_lossy(&body), "")
                .with_code(code.as_u16())
        });
        return Err(kube::Error::Api(status.boxed()));
    }
    Ok(body)
}

/// The built-in controllers, running; see [`start_builtin`].
pub struct Builtin {
    gc: GarbageCollector,
    /// The manager's Namespace cache (the namespace controller's).
    namespaces: kubeforge_runtime::Cache<k8s_openapi::api::core::v1::Namespace>,
    /// Shuts the manager down when dropped (by [`Builtin::stop`] or with
    /// the `Builtin`).
    stop: tokio_util::sync::DropGuard,
    /// The manager's metrics.
    metrics: std::sync::Arc<kubeforge_runtime::metrics::Metrics>,
    /// The manager's task.
    task: JoinHandle<()>,
}

/// Start, on one runtime manager (spawned on the current Tokio runtime),
/// the garbage collector and the namespace, ClusterRole aggregation,
/// ServiceAccount, token and root CA controllers with default options,
/// each through its client in `clients` (a [`Client`] for all of them, or
/// [`ControllerClients::per_account`]).
pub fn start_builtin(clients: impl Into<ControllerClients>) -> Builtin {
    let clients = clients.into();
    // One manager, its caches shared as kube-controller-manager's are,
    // each controller writing as its own account.
    let mgr = kubeforge_runtime::Manager::builder(clients.shared().clone())
        .handle_signals(false)
        .build();
    let gc = gc::register(
        &mgr,
        clients.for_account(clients::accounts::GARBAGE_COLLECTOR),
        GcOptions::default(),
    );
    namespace::register(
        &mgr,
        clients.for_account(clients::accounts::NAMESPACE),
        NamespaceOptions::default(),
    );
    let namespaces = mgr.store::<k8s_openapi::api::core::v1::Namespace>();
    clusterroles::register(
        &mgr,
        clients.for_account(clients::accounts::CLUSTERROLE_AGGREGATION),
    );
    serviceaccounts::register(
        &mgr,
        clients.for_account(clients::accounts::SERVICE_ACCOUNT),
    );
    if let Some(ca) = clients.root_ca() {
        rootca::register(
            &mgr,
            clients.for_account(clients::accounts::ROOT_CA_PUBLISHER),
            ca.to_string(),
        );
    }
    // kube's tokens controller writes with the manager's own credentials.
    if let Some(issuer) = clients.token_issuer() {
        tokens::register(
            &mgr,
            clients.shared().clone(),
            issuer.clone(),
            clients.root_ca().map(str::to_string),
        );
    }
    let stop = mgr.shutdown_handle().drop_guard();
    let metrics = mgr.metrics();
    let task = tokio::spawn(async move {
        if let Err(e) = mgr.run().await {
            tracing::error!(error = %e, "the built-in controllers stopped");
        }
    });
    Builtin {
        gc,
        namespaces,
        stop,
        metrics,
        task,
    }
}

/// Run the built-in controllers through `clients` until `shutdown`
/// resolves.
pub async fn run_builtin(
    clients: impl Into<ControllerClients>,
    shutdown: impl Future<Output = ()>,
) {
    let b = start_builtin(clients);
    shutdown.await;
    b.stop().await;
}

impl Builtin {
    /// The garbage collector.
    pub fn gc(&self) -> &GarbageCollector {
        &self.gc
    }

    /// Resolves once the garbage collector has listed every resource and
    /// the namespace controller every namespace (their caches are synced).
    pub async fn wait_synced(&self) {
        self.gc.wait_synced().await;
        // Closed only when the manager stopped: nothing left to wait for.
        let _ = self.namespaces.wait_until_ready().await;
    }

    /// The controllers' metrics (controller-runtime's and client-go's
    /// `workqueue_*` names, the garbage collector's queues included), as
    /// kube-controller-manager serves them on its `/metrics`.
    pub fn metrics(&self) -> std::sync::Arc<kubeforge_runtime::metrics::Metrics> {
        self.metrics.clone()
    }

    /// Stop the controllers and wait until they have.
    pub async fn stop(self) {
        let Builtin { stop, task, .. } = self;
        drop(stop);
        let _ = task.await;
    }
}

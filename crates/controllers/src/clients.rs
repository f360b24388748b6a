//! Which client each built-in controller talks through: one shared client,
//! or kube-controller-manager's `--use-service-account-credentials` — the
//! shared caches and events under the manager's own identity, and each
//! controller's writes under its own ServiceAccount in `kube-system`, so
//! RBAC gives every controller exactly its `system:controller:<name>`
//! role.
//!
//! ```no_run
//! # fn demo(manager: kube::Client, for_account: fn(&str) -> kube::Client) {
//! use kubeforge_controllers::ControllerClients;
//! // Everything through one client (a real cluster's admin kubeconfig):
//! let one = ControllerClients::from(manager.clone());
//! // Or one identity per controller, as kubeforge up runs them:
//! let each = ControllerClients::per_account(manager, for_account);
//! # }
//! ```

use std::sync::Arc;

use kube::Client;
use kubeforge_authz::satoken::TokenIssuer;

/// The ServiceAccounts (in `kube-system`) the built-in controllers write
/// as, named as kube-controller-manager names them; each is bound to the
/// ClusterRole `system:controller:<name>`.
pub mod accounts {
    /// The garbage collector.
    pub const GARBAGE_COLLECTOR: &str = "generic-garbage-collector";
    /// The namespace controller.
    pub const NAMESPACE: &str = "namespace-controller";
    /// ClusterRole aggregation.
    pub const CLUSTERROLE_AGGREGATION: &str = "clusterrole-aggregation-controller";
    /// The CSR signer.
    pub const CERTIFICATE: &str = "certificate-controller";
    /// ReplicaSets.
    pub const REPLICASET: &str = "replicaset-controller";
    /// ReplicationControllers.
    pub const REPLICATION: &str = "replication-controller";
    /// Deployments.
    pub const DEPLOYMENT: &str = "deployment-controller";
    /// StatefulSets.
    pub const STATEFULSET: &str = "statefulset-controller";
    /// DaemonSets.
    pub const DAEMONSET: &str = "daemon-set-controller";
    /// Jobs.
    pub const JOB: &str = "job-controller";
    /// CronJobs.
    pub const CRONJOB: &str = "cronjob-controller";
    /// Finished Jobs past their `ttlSecondsAfterFinished`.
    pub const TTL_AFTER_FINISHED: &str = "ttl-after-finished-controller";
    /// EndpointSlices.
    pub const ENDPOINTSLICE: &str = "endpointslice-controller";
    /// Endpoints.
    pub const ENDPOINT: &str = "endpoint-controller";
    /// Node lifecycle.
    pub const NODE: &str = "node-controller";
    /// PodDisruptionBudgets.
    pub const DISRUPTION: &str = "disruption-controller";
    /// HorizontalPodAutoscalers.
    pub const HORIZONTAL_POD_AUTOSCALER: &str = "horizontal-pod-autoscaler";
    /// Each namespace's `default` ServiceAccount.
    pub const SERVICE_ACCOUNT: &str = "service-account-controller";
    /// Each namespace's `kube-root-ca.crt` ConfigMap.
    pub const ROOT_CA_PUBLISHER: &str = "root-ca-cert-publisher";

    /// Every account above.
    pub const ALL: [&str; 19] = [
        GARBAGE_COLLECTOR,
        NAMESPACE,
        CLUSTERROLE_AGGREGATION,
        CERTIFICATE,
        REPLICASET,
        REPLICATION,
        DEPLOYMENT,
        STATEFULSET,
        DAEMONSET,
        JOB,
        CRONJOB,
        TTL_AFTER_FINISHED,
        ENDPOINTSLICE,
        ENDPOINT,
        NODE,
        DISRUPTION,
        HORIZONTAL_POD_AUTOSCALER,
        SERVICE_ACCOUNT,
        ROOT_CA_PUBLISHER,
    ];
}

type ForAccount = Arc<dyn Fn(&str) -> Client + Send + Sync>;

/// The clients of the built-in controllers (see the module docs), and the
/// two credentials kube-controller-manager is given besides them: the
/// ServiceAccount signing key (`--service-account-private-key-file`, for
/// the [tokens controller](crate::tokens)) and the cluster CA
/// (`--root-ca-file`, put in token Secrets and published by the
/// [root CA publisher](crate::rootca)). Without them those two
/// controllers do not run.
#[derive(Clone)]
pub struct ControllerClients {
    shared: Client,
    for_account: Option<ForAccount>,
    token_issuer: Option<Arc<TokenIssuer>>,
    root_ca: Option<String>,
}

impl ControllerClients {
    /// Caches and events through `shared`, each controller's writes
    /// through `for_account(<its ServiceAccount name>)` (see [`accounts`]).
    pub fn per_account(
        shared: Client,
        for_account: impl Fn(&str) -> Client + Send + Sync + 'static,
    ) -> ControllerClients {
        ControllerClients {
            shared,
            for_account: Some(Arc::new(for_account)),
            token_issuer: None,
            root_ca: None,
        }
    }

    /// Sign legacy ServiceAccount tokens with `issuer` (the key the API
    /// server verifies them with).
    pub fn with_token_issuer(mut self, issuer: Option<Arc<TokenIssuer>>) -> ControllerClients {
        self.token_issuer = issuer;
        self
    }

    /// The cluster CA, PEM.
    pub fn with_root_ca(mut self, ca: Option<String>) -> ControllerClients {
        self.root_ca = ca.filter(|c| !c.is_empty());
        self
    }

    /// The ServiceAccount signing key, when given.
    pub fn token_issuer(&self) -> Option<&Arc<TokenIssuer>> {
        self.token_issuer.as_ref()
    }

    /// The cluster CA, when given.
    pub fn root_ca(&self) -> Option<&str> {
        self.root_ca.as_deref()
    }

    /// The client of the shared caches, events and leader election.
    pub fn shared(&self) -> &Client {
        &self.shared
    }

    /// The client the controller running as ServiceAccount `account`
    /// writes through.
    pub fn for_account(&self, account: &str) -> Client {
        match &self.for_account {
            Some(f) => f(account),
            None => self.shared.clone(),
        }
    }
}

impl From<Client> for ControllerClients {
    /// Every controller through `client`.
    fn from(client: Client) -> ControllerClients {
        ControllerClients {
            shared: client,
            for_account: None,
            token_issuer: None,
            root_ca: None,
        }
    }
}

impl<F> From<(Client, F)> for ControllerClients
where
    F: Fn(&str) -> Client + Send + Sync + 'static,
{
    /// [`ControllerClients::per_account`] from `(shared, for_account)`.
    fn from((shared, for_account): (Client, F)) -> ControllerClients {
        ControllerClients::per_account(shared, for_account)
    }
}

impl std::fmt::Debug for ControllerClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerClients")
            .field("per_account", &self.for_account.is_some())
            .field("token_issuer", &self.token_issuer.is_some())
            .field("root_ca", &self.root_ca.is_some())
            .finish_non_exhaustive()
    }
}

//! memcached-operator: a Kubernetes operator written with kubeforge-runtime.
//!
//! [`api`] holds the custom resources' Rust types, [`controllers`] their
//! reconcilers, [`webhooks`] their admission webhooks; [`manager`] puts them
//! on a Manager. `src/main.rs` runs it (`run`) or writes `config/` from the
//! code (`manifests`: CRDs from the types, RBAC from what the controllers
//! declare). This file is yours: `kubeforge create` never rewrites it.

pub mod api;
pub mod controllers;
pub mod webhooks;

use std::net::SocketAddr;

use kube::Client;
use kubeforge_runtime::manifests::Manifests;
use kubeforge_runtime::webhook::WebhookServer;
use kubeforge_runtime::{Manager, Permissions};

/// The namespace `config/default` deploys the manager to.
pub const NAMESPACE: &str = "memcached-operator-system";
/// The manager's ServiceAccount there.
pub const SERVICE_ACCOUNT: &str = "memcached-operator-controller-manager";
/// The Lease leader election holds.
pub const LEADER_ELECTION_ID: &str = "85da1da8.example.com";

/// How [`manager`] sets the Manager up.
#[derive(Default)]
pub struct Options {
    /// Serve `/metrics`, `/healthz` and `/readyz` here.
    pub metrics_addr: Option<SocketAddr>,
    /// Elect a leader on a Lease in this namespace.
    pub leader_election_namespace: Option<String>,
    /// Run this webhook server with the manager.
    pub webhooks: Option<WebhookServer>,
}

/// A Manager with every controller registered.
pub fn manager(client: Client, options: Options) -> Manager {
    let mut builder = Manager::builder(client);
    if let Some(addr) = options.metrics_addr {
        builder = builder.metrics_addr(addr);
    }
    if let Some(ns) = &options.leader_election_namespace {
        builder = builder.leader_election(LEADER_ELECTION_ID, ns);
    }
    if let Some(server) = options.webhooks {
        builder = builder.webhook_server(server);
    }
    let mgr = builder.build();
    controllers::register_all(&mgr);
    mgr
}

/// What the manager's ClusterRole must allow: what its controllers
/// declare, and what the webhooks' certificate set-up needs.
pub fn permissions(mgr: &Manager) -> Permissions {
    let mut p = mgr.permissions();
    p.merge(&webhooks::permissions());
    p
}

/// What `config/` holds, computed from the code (`make manifests`).
/// Namespace `system` is what kustomize renames to [`NAMESPACE`].
pub fn manifests(client: Client) -> Manifests {
    let mgr = manager(
        client,
        Options {
            leader_election_namespace: Some("system".into()),
            ..Options::default()
        },
    );
    let (mutating, validating) = webhooks::configurations(&webhooks::Endpoint::Service {
        namespace: "system".into(),
    });
    Manifests {
        crds: api::crds(),
        role: Some(permissions(&mgr).cluster_role("manager-role")),
        leader_election_role: mgr
            .leader_election_permissions()
            .map(|(ns, p)| p.role("leader-election-role", &ns)),
        mutating,
        validating,
    }
}

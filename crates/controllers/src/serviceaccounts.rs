//! The ServiceAccounts controller (kube-controller-manager's
//! `serviceaccount`): every active namespace has a ServiceAccount named
//! `default`, made again when deleted, so pods (whose
//! `serviceAccountName` defaults to it) and `kubectl create token default`
//! find it as on any cluster.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use kubeforge_runtime::{Action, Cache, Manager, ReconcileError};

/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

struct Ctx {
    client: Client,
    accounts: Cache<ServiceAccount>,
}

/// Whether namespace `ns` is being deleted (no new objects go in).
pub(crate) fn terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    if terminating(&ns) {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    if ctx
        .accounts
        .contains(&ObjectRef::new(DEFAULT).within(&name))
    {
        return Ok(Action::await_change());
    }
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &name);
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => Ok(Action::await_change()),
        // Made meanwhile, or the namespace went away or began terminating.
        Err(e)
            if crate::is_already_exists(&e)
                || crate::is_not_found(&e)
                || crate::is_namespace_terminating(&e) =>
        {
            Ok(Action::await_change())
        }
        Err(e) => Err(ReconcileError::new(e)),
    }
}

/// Register the controller with `mgr` (whose caches it reads), creating
/// through `client`.
pub fn register(mgr: &Manager, client: Client) {
    let ctx = Ctx {
        client,
        accounts: mgr.store::<ServiceAccount>(),
    };
    mgr.controller::<Namespace, _>("serviceaccount", ctx)
        .watches::<ServiceAccount, _>(|sa| {
            (sa.name_any() == DEFAULT).then(|| ObjectRef::new(&sa.namespace().unwrap_or_default()))
        })
        .register(reconcile);
}

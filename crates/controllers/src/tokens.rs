//! The tokens controller (kube-controller-manager's
//! `serviceaccount-token`): a Secret of type
//! `kubernetes.io/service-account-token` naming a ServiceAccount gets a
//! non-expiring legacy token for it in `data.token`, the namespace in
//! `data.namespace`, the cluster CA in `data["ca.crt"]` and the account's
//! UID in its `kubernetes.io/service-account.uid` annotation. A token
//! Secret whose ServiceAccount is gone — deleted, or recreated under a new
//! UID — is deleted, which revokes its token. As since Kubernetes 1.24,
//! no token Secret is made unasked: users create one to get a long-lived
//! token, and TokenRequest gives everyone else short-lived ones.
//!
//! Like kube's, it needs the ServiceAccount signing key, so it runs only
//! beside the server that trusts that key (the embedded cluster).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use kubeforge_authz::satoken::TokenIssuer;
use kubeforge_authz::satoken::legacy::{
    CA_KEY, LegacyClaims, NAMESPACE_KEY, SECRET_TYPE, SERVICE_ACCOUNT_NAME_KEY,
    SERVICE_ACCOUNT_UID_KEY, TOKEN_KEY,
};
use kubeforge_runtime::{Action, Cache, Manager, ReconcileError};

struct Ctx {
    client: Client,
    issuer: Arc<TokenIssuer>,
    root_ca: Option<Vec<u8>>,
    accounts: Cache<ServiceAccount>,
}

fn is_token_secret(s: &Secret) -> bool {
    s.type_.as_deref() == Some(SECRET_TYPE)
}

/// What `secret` lacks: (CA, namespace, token) — kube's
/// `secretUpdateNeeded`.
fn needs(secret: &Secret, root_ca: Option<&[u8]>) -> (bool, bool, bool) {
    let get = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.as_slice())
            .unwrap_or_default()
    };
    let ca = root_ca.is_some_and(|ca| !ca.is_empty() && get(CA_KEY) != ca);
    (ca, get(NAMESPACE_KEY).is_empty(), get(TOKEN_KEY).is_empty())
}

/// The ServiceAccount `ns/name` with `uid` (any UID when `None`): from the
/// cache, else read live, so a Secret made just after its account is not
/// deleted on a cache that has not seen the account yet.
async fn account(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<Option<Arc<ServiceAccount>>, kube::Error> {
    let matches = |sa: &ServiceAccount| uid.is_none_or(|u| sa.metadata.uid.as_deref() == Some(u));
    if let Some(sa) = ctx.accounts.get(&ObjectRef::new(name).within(ns))
        && matches(&sa)
    {
        return Ok(Some(sa));
    }
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), ns);
    Ok(api.get_opt(name).await?.filter(matches).map(Arc::new))
}

async fn reconcile(secret: Arc<Secret>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    if !is_token_secret(&secret) || secret.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = secret.namespace().unwrap_or_default();
    let name = secret.name_any();
    let annotations = secret.annotations();
    let Some(sa_name) = annotations.get(SERVICE_ACCOUNT_NAME_KEY).cloned() else {
        // The server refuses such Secrets; nothing to fill in.
        return Ok(Action::await_change());
    };
    let uid = annotations.get(SERVICE_ACCOUNT_UID_KEY).cloned();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(sa) = account(&ctx, &ns, &sa_name, uid.as_deref()).await? else {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: secret.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        return match secrets.delete(&name, &dp).await {
            Ok(_) => Ok(Action::await_change()),
            // Gone already, or replaced by a new Secret of that name.
            Err(e) if crate::is_not_found(&e) || crate::is_conflict(&e) => {
                Ok(Action::await_change())
            }
            Err(e) => Err(ReconcileError::new(e)),
        };
    };
    let (ca, namespace, token) = needs(&secret, ctx.root_ca.as_deref());
    if !(ca || namespace || token) {
        return Ok(Action::await_change());
    }
    let mut updated = (*secret).clone();
    let data = updated.data.get_or_insert_with(BTreeMap::new);
    if let (true, Some(root)) = (ca, &ctx.root_ca) {
        data.insert(CA_KEY.into(), ByteString(root.clone()));
    }
    if namespace {
        data.insert(NAMESPACE_KEY.into(), ByteString(ns.clone().into_bytes()));
    }
    if token {
        let sa_uid = sa.metadata.uid.clone().unwrap_or_default();
        let claims = LegacyClaims::new(&ns, &sa_name, &sa_uid, &name);
        let jwt = ctx.issuer.sign_legacy(&claims)?;
        data.insert(TOKEN_KEY.into(), ByteString(jwt.into_bytes()));
        let annotations = updated.annotations_mut();
        annotations.insert(SERVICE_ACCOUNT_NAME_KEY.into(), sa_name.clone());
        annotations.insert(SERVICE_ACCOUNT_UID_KEY.into(), sa_uid);
    }
    match secrets
        .replace(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        // Changed meanwhile (the new version comes back as work) or gone.
        Err(e) if crate::is_conflict(&e) || crate::is_not_found(&e) => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError::new(e)),
    }
}

/// Register the controller with `mgr` (whose caches it reads), signing
/// with `issuer`, writing `root_ca` (PEM) beside each token, and writing
/// through `client`.
pub fn register(mgr: &Manager, client: Client, issuer: Arc<TokenIssuer>, root_ca: Option<String>) {
    let secrets = mgr.store::<Secret>();
    let ctx = Ctx {
        client,
        issuer,
        root_ca: root_ca.map(String::into_bytes),
        accounts: mgr.store::<ServiceAccount>(),
    };
    mgr.controller::<Secret, _>("serviceaccount-token", ctx)
        .watches::<ServiceAccount, _>(move |sa| {
            // The account's token Secrets: deleted with it, or filled in
            // once it exists.
            let (ns, name) = (sa.namespace().unwrap_or_default(), sa.name_any());
            secrets
                .state_filter(|s| {
                    is_token_secret(s)
                        && s.metadata.namespace.as_deref() == Some(ns.as_str())
                        && s.annotations().get(SERVICE_ACCOUNT_NAME_KEY) == Some(&name)
                })
                .iter()
                .map(|s| ObjectRef::from_obj(&**s))
                .collect::<Vec<_>>()
        })
        .register(reconcile);
}

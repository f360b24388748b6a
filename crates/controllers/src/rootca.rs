//! The root CA publisher (kube-controller-manager's
//! `root-ca-certificate-publisher`): every active namespace has ConfigMap
//! `kube-root-ca.crt` holding the cluster CA as `ca.crt`, put back when
//! edited or deleted. Pods read it (through the projected
//! ServiceAccount volume) to trust the API server — what in-cluster
//! config needs.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use kubeforge_runtime::{Action, Cache, Manager, ReconcileError};

/// The ConfigMap's name.
pub const NAME: &str = "kube-root-ca.crt";
/// Its data key.
pub const KEY: &str = "ca.crt";
const DESCRIPTION_KEY: &str = "kubernetes.io/description";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver \
    when using internal endpoints such as the internal service IP or kubernetes.default.svc. No \
    other usage is guaranteed across distributions of Kubernetes clusters.";

struct Ctx {
    client: Client,
    maps: Cache<ConfigMap>,
    ca: String,
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    if crate::serviceaccounts::terminating(&ns) {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let data = BTreeMap::from([(KEY.to_string(), ctx.ca.clone())]);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    let result = match ctx.maps.get(&ObjectRef::new(NAME).within(&name)) {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(NAME.into()),
                    annotations: Some(BTreeMap::from([(
                        DESCRIPTION_KEY.to_string(),
                        DESCRIPTION.to_string(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &cm).await.map(drop)
        }
        Some(cm) => {
            let described = cm
                .annotations()
                .get(DESCRIPTION_KEY)
                .is_some_and(|d| !d.is_empty());
            if cm.data.as_ref() == Some(&data) && described {
                return Ok(Action::await_change());
            }
            let mut cm = (*cm).clone();
            cm.data = Some(data);
            cm.binary_data = None;
            cm.annotations_mut()
                .insert(DESCRIPTION_KEY.into(), DESCRIPTION.into());
            api.replace(NAME, &PostParams::default(), &cm)
                .await
                .map(drop)
        }
    };
    match result {
        Ok(()) => Ok(Action::await_change()),
        // Changed or made meanwhile (the change comes back as work), or
        // the namespace is going away.
        Err(e)
            if crate::is_conflict(&e)
                || crate::is_already_exists(&e)
                || crate::is_not_found(&e)
                || crate::is_namespace_terminating(&e) =>
        {
            Ok(Action::await_change())
        }
        Err(e) => Err(ReconcileError::new(e)),
    }
}

/// Register the publisher of `ca` (PEM) with `mgr` (whose caches it
/// reads), writing through `client`.
pub fn register(mgr: &Manager, client: Client, ca: String) {
    let ctx = Ctx {
        client,
        maps: mgr.store::<ConfigMap>(),
        ca,
    };
    mgr.controller::<Namespace, _>("root-ca-certificate-publisher", ctx)
        .watches::<ConfigMap, _>(|cm| {
            (cm.name_any() == NAME).then(|| ObjectRef::new(&cm.namespace().unwrap_or_default()))
        })
        .register(reconcile);
}

//! A finalizer around a reconcile, as kube-rs's `finalizer` and
//! controller-runtime's pattern do it: the finalizer is added on the first
//! reconcile (before any work, so nothing is made that cleanup would not
//! see), the cleanup runs once the object is being deleted, and the
//! finalizer is removed when the cleanup succeeds, letting the API server
//! delete the object.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use kubeforge_runtime::{Action, ReconcileError};
//! # async fn demo(api: kube::Api<ConfigMap>, cm: Arc<ConfigMap>) -> Result<Action, ReconcileError> {
//! use kubeforge_runtime::finalizer::{Event, finalizer};
//! finalizer(&api, "example.com/cleanup", cm, |event| async move {
//!     match event {
//!         Event::Apply(cm) => Ok(Action::await_change()),   // make the world match cm
//!         Event::Cleanup(cm) => Ok(Action::await_change()), // undo what only cm needed
//!     }
//! })
//! .await
//! # }
//! ```
//!
//! Writes are merge patches of `metadata.finalizers` carrying the
//! object's `resourceVersion`, so a finalizer someone else adds or removes
//! meanwhile is never lost: a conflict re-reads the object. Unlike
//! kube-rs's, a reconcile that adds the finalizer goes on to `Apply` with
//! the updated object at once, so predicates that filter metadata-only
//! updates (`generation_changed`) do not delay the first reconcile.

use std::future::Future;
use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::action::Action;
use crate::api_errors::{is_conflict, is_not_found};
use crate::error::ReconcileError;

/// What the reconcile inside [`finalizer`] is asked to do.
#[derive(Debug)]
pub enum Event<K> {
    /// The object stands (and carries the finalizer): reconcile it.
    Apply(Arc<K>),
    /// The object is being deleted: clean up what it needs cleaned up.
    /// Must be idempotent (it runs again if the finalizer's removal fails).
    Cleanup(Arc<K>),
}

fn has<K: Resource>(obj: &K, name: &str) -> bool {
    obj.finalizers().iter().any(|f| f == name)
}

/// Set `obj`'s finalizers to `finalizers`, conditional on its
/// `resourceVersion`.
async fn write<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": obj.resource_version(),
    }});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
}

/// Run `reconcile` for `obj` under finalizer `name`; see the module docs.
pub async fn finalizer<K, F, Fut>(
    api: &Api<K>,
    name: &str,
    obj: Arc<K>,
    reconcile: F,
) -> Result<Action, ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    F: FnOnce(Event<K>) -> Fut,
    Fut: Future<Output = Result<Action, ReconcileError>>,
{
    let deleting = obj.meta().deletion_timestamp.is_some();
    match (deleting, has(&*obj, name)) {
        // Ours is done (or was never added): nothing to do.
        (true, false) => Ok(Action::await_change()),
        (true, true) => {
            let action = reconcile(Event::Cleanup(obj.clone())).await?;
            remove(api, name, &obj).await?;
            Ok(action)
        }
        (false, true) => reconcile(Event::Apply(obj)).await,
        (false, false) => {
            let mut finalizers = obj.finalizers().to_vec();
            finalizers.push(name.to_string());
            let updated = match write(api, &*obj, finalizers).await {
                Ok(o) => o,
                // The copy was stale (often: our own earlier write is not
                // in the cache yet). Go on with the live object if it has
                // the finalizer; otherwise retry with backoff.
                Err(e) if is_conflict(&e) => {
                    let live = api.get(&obj.name_any()).await?;
                    if !has(&live, name) {
                        return Err(e.into());
                    }
                    live
                }
                Err(e) => return Err(e.into()),
            };
            if updated.meta().deletion_timestamp.is_some() {
                // Deleted meanwhile: the next reconcile cleans up.
                return Ok(Action::await_change());
            }
            reconcile(Event::Apply(Arc::new(updated))).await
        }
    }
}

/// Remove finalizer `name` after a successful cleanup. The cleanup may
/// have written the object (its status, say), so a conflict re-reads it
/// and removes the finalizer from the live list, without cleaning up
/// again.
async fn remove<K>(api: &Api<K>, name: &str, obj: &K) -> Result<(), ReconcileError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut current = obj.clone();
    for _ in 0..3 {
        let rest: Vec<String> = current
            .finalizers()
            .iter()
            .filter(|f| *f != name)
            .cloned()
            .collect();
        match write(api, &current, rest).await {
            Ok(_) => return Ok(()),
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) if is_conflict(&e) => match api.get_opt(&current.name_any()).await? {
                Some(live) if has(&live, name) => current = live,
                _ => return Ok(()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(ReconcileError::new(format!(
        "could not remove finalizer {name}: the object kept changing"
    )))
}

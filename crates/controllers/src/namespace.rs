//! The namespace controller, after kube-controller-manager's: a namespace
//! with a `deletionTimestamp` is emptied — every namespaced resource that
//! discovery lists (custom resources included) gets a `deletecollection`
//! (or a list and a DELETE per object where deletecollection is not
//! served), then a list to see what is left — and once nothing is left,
//! `kubernetes` is removed from its `spec.finalizers` through
//! `PUT /api/v1/namespaces/{name}/finalize`, which lets the server remove
//! it.
//!
//! Objects held by finalizers of other controllers stay until those
//! controllers let go; meanwhile the namespace carries kube's conditions
//! (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, …) and is
//! looked at again after an exponential backoff (100 ms doubling to 5 s),
//! never in a hot loop.
//!
//! It is a controller of the runtime's [`Manager`], written as an
//! extension author writes one: the manager's shared Namespace cache, its
//! queue, per-namespace backoff (a rate-limited requeue while content
//! remains) and metrics.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, NamespaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use kubeforge_runtime::{Action, BackoffConfig, Manager, Predicate, ReconcileError};

use crate::catalog::{Catalog, Resource};
use crate::{Error, is_conflict, is_not_found, send_discard, status_code};

/// The finalizer token this controller owns in `spec.finalizers`.
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// The controller's name (the `controller` label of its metrics).
pub const NAME: &str = "namespace";

/// Options of the namespace controller.
#[derive(Clone, Debug)]
pub struct NamespaceOptions {
    /// Namespaces processed concurrently.
    pub workers: u16,
    /// Resource types emptied concurrently within one namespace.
    pub resource_concurrency: usize,
    /// First delay before looking again at a namespace with content left.
    pub min_backoff: Duration,
    /// Largest such delay.
    pub max_backoff: Duration,
}

impl Default for NamespaceOptions {
    fn default() -> Self {
        NamespaceOptions {
            workers: 4,
            resource_concurrency: 8,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// What the reconciles share: the controller's own client (it deletes and
/// finalizes as its own identity) and its options.
struct Shared {
    client: Client,
    opts: NamespaceOptions,
}

/// What emptying a namespace left behind.
#[derive(Debug, Default)]
struct Content {
    /// `plural.group` → objects left.
    remaining: BTreeMap<String, usize>,
    /// finalizer → objects left holding it.
    finalizers: BTreeMap<String, usize>,
    /// Failed deletions, per resource.
    errors: Vec<String>,
    /// Discovery failed.
    discovery: Option<String>,
}

/// Register the namespace controller with `mgr` (whose Namespace cache it
/// reads), deleting and finalizing through `client`.
pub fn register(mgr: &Manager, client: Client, opts: NamespaceOptions) {
    let backoff = BackoffConfig {
        base: opts.min_backoff,
        max: opts.max_backoff,
    };
    let workers = opts.workers.max(1);
    // Only terminating namespaces have work; any change to one (another
    // controller's spec finalizer gone, metadata finalizers, its own
    // conditions) is looked at, as kube's informer handler does. The pass
    // after a condition write writes nothing, so this cannot loop.
    let terminating = Predicate::new(|_, new| new.deletion_timestamp.is_some());
    mgr.controller::<Namespace, _>(NAME, Shared { client, opts })
        .with_predicate(terminating)
        .max_concurrent_reconciles(workers)
        .backoff(backoff)
        .permits("", "namespaces", &["get", "delete"])
        .permits("*", "*", &["get", "list", "delete", "deletecollection"])
        .permits("", "namespaces/finalize", &["update"])
        .writes_status()
        .register(reconcile);
}

async fn reconcile(ns: Arc<Namespace>, s: Arc<Shared>) -> Result<Action, ReconcileError> {
    if ns.metadata.deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    match s.sync(&ns.name_any()).await {
        Ok(true) => Ok(Action::await_change()),
        // Content left: again after the namespace's backoff.
        Ok(false) => Ok(Action::requeue(Duration::ZERO)),
        Err(e) => Err(ReconcileError::new(e)),
    }
}

fn has_token(ns: &Namespace) -> bool {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER_KUBERNETES))
}

impl Shared {
    fn namespaces(&self) -> Api<Namespace> {
        Api::all(self.client.clone())
    }

    /// One pass over a terminating namespace; `Ok(true)` when done with it.
    async fn sync(&self, name: &str) -> Result<bool, Error> {
        let api = self.namespaces();
        let Some(ns) = api.get_opt(name).await? else {
            return Ok(true);
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(true);
        }
        if !has_token(&ns) {
            let empty = ns
                .spec
                .as_ref()
                .and_then(|s| s.finalizers.as_ref())
                .is_none_or(Vec::is_empty);
            if empty {
                // Finalized already: the server removes it once its
                // metadata.finalizers are empty too; ask it to (kube's
                // deleter does the same).
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: ns.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(name, &dp).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(true);
        }
        let content = self.delete_all_content(name).await;
        self.update_conditions(&ns, &content).await;
        if content.discovery.is_some()
            || !content.errors.is_empty()
            || !content.remaining.is_empty()
        {
            tracing::debug!(namespace = %name, remaining = ?content.remaining, finalizers = ?content.finalizers, errors = ?content.errors, "namespace controller: content remains");
            return Ok(false);
        }
        self.finalize(name).await?;
        tracing::debug!(namespace = %name, "namespace controller: finalized");
        Ok(true)
    }

    /// Remove `kubernetes` from spec.finalizers through `/finalize`.
    async fn finalize(&self, name: &str) -> Result<(), Error> {
        let api = self.namespaces();
        for _ in 0..8 {
            let Some(mut ns) = api.get_opt(name).await? else {
                return Ok(());
            };
            if !has_token(&ns) {
                return Ok(());
            }
            if let Some(f) = ns.spec.as_mut().and_then(|s| s.finalizers.as_mut()) {
                f.retain(|x| x != FINALIZER_KUBERNETES);
            }
            match api
                .replace_subresource("finalize", name, &PostParams::default(), &ns)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Kube(kube::Error::Api(
            kube::core::Status::failure("finalize kept conflicting", "Conflict")
                .with_code(409)
                .boxed(),
        )))
    }

    /// Delete every namespaced resource's objects in `ns`, then count what
    /// is left.
    async fn delete_all_content(&self, ns: &str) -> Content {
        let mut content = Content::default();
        let catalog = match Catalog::discover(&self.client).await {
            Ok(c) => c,
            Err(e) => {
                content.discovery = Some(e.to_string());
                return content;
            }
        };
        // A failing group-version does not stop the others from being
        // emptied; it only keeps the namespace from being finalized (its
        // objects may still be there), as kube's deleter does.
        if let Some(why) = catalog.failure_message() {
            content.discovery = Some(format!(
                "Discovery failed for some groups, {} failing: {why}",
                catalog.failed().len()
            ));
        }
        let results: Vec<(Arc<Resource>, Result<Left, Error>)> =
            futures::stream::iter(catalog.namespaced_deletable())
                .map(|r| async move {
                    let out = self.delete_resource(&r, ns).await;
                    (r, out)
                })
                .buffer_unordered(self.opts.resource_concurrency.max(1))
                .collect()
                .await;
        for (r, out) in results {
            match out {
                Ok(left) => {
                    if left.count > 0 {
                        content.remaining.insert(r.group_resource(), left.count);
                        if left.finalizers.is_empty() {
                            content.errors.push(format!(
                                "unexpected items still remain in namespace: {ns} for gvr: {}",
                                r.group_resource()
                            ));
                        }
                    }
                    for (f, n) in left.finalizers {
                        *content.finalizers.entry(f).or_default() += n;
                    }
                }
                Err(e) => content.errors.push(format!(
                    "failed to delete {} in {ns}: {e}",
                    r.group_resource()
                )),
            }
        }
        content
    }

    /// Empty one resource in a namespace; what is left.
    async fn delete_resource(&self, r: &Resource, ns: &str) -> Result<Left, Error> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &r.ar);
        let mut each = !r.supports("deletecollection");
        if !each {
            let req = kube::core::Request::new(api.resource_url())
                .delete_collection(&DeleteParams::background(), &ListParams::default())
                .map_err(kube::Error::BuildRequest)?;
            match send_discard(&self.client, req).await {
                Ok(()) => {}
                Err(e) if status_code(&e) == Some(405) => each = true,
                Err(e) if is_not_found(&e) => return Ok(Left::default()),
                Err(e) => return Err(e.into()),
            }
        }
        if each {
            let list = match api.list_metadata(&ListParams::default()).await {
                Ok(l) => l,
                Err(e) if is_not_found(&e) => return Ok(Left::default()),
                Err(e) => return Err(e.into()),
            };
            let names: Vec<String> = list
                .items
                .into_iter()
                .filter(|m| m.metadata.deletion_timestamp.is_none())
                .filter_map(|m| m.metadata.name)
                .collect();
            let api = &api;
            let failed: Vec<kube::Error> = futures::stream::iter(names)
                .map(|n| async move {
                    let req = kube::core::Request::new(api.resource_url())
                        .delete(&n, &DeleteParams::background())
                        .map_err(kube::Error::BuildRequest)?;
                    send_discard(&self.client, req).await
                })
                .buffer_unordered(32)
                .filter_map(|r| async move {
                    match r {
                        Err(e) if !is_not_found(&e) => Some(e),
                        _ => None,
                    }
                })
                .collect()
                .await;
            if let Some(e) = failed.into_iter().next() {
                return Err(e.into());
            }
        }
        let list = match api.list_metadata(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) if is_not_found(&e) => return Ok(Left::default()),
            Err(e) => return Err(e.into()),
        };
        let mut left = Left {
            count: list.items.len(),
            finalizers: BTreeMap::new(),
        };
        for m in list.items {
            for f in m.metadata.finalizers.unwrap_or_default() {
                *left.finalizers.entry(f).or_default() += 1;
            }
        }
        Ok(left)
    }

    /// Write kube's deletion conditions when they changed.
    async fn update_conditions(&self, ns: &Namespace, content: &Content) {
        let mut fresh = Vec::new();
        if let Some(e) = &content.discovery {
            fresh.push(condition(
                "NamespaceDeletionDiscoveryFailure",
                "True",
                "DiscoveryFailed",
                e,
            ));
        }
        if !content.errors.is_empty() {
            let mut msgs = content.errors.clone();
            msgs.sort();
            fresh.push(condition(
                "NamespaceDeletionContentFailure",
                "True",
                "ContentDeletionFailed",
                &format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    msgs.len(),
                    msgs.join(", ")
                ),
            ));
        }
        if !content.remaining.is_empty() {
            let list: Vec<String> = content
                .remaining
                .iter()
                .map(|(gr, n)| format!("{gr} has {n} resource instances"))
                .collect();
            fresh.push(condition(
                "NamespaceContentRemaining",
                "True",
                "SomeResourcesRemain",
                &format!("Some resources are remaining: {}", list.join(", ")),
            ));
        }
        if !content.finalizers.is_empty() {
            let list: Vec<String> = content
                .finalizers
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect();
            fresh.push(condition(
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                &format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    list.join(", ")
                ),
            ));
        }
        let mut ns = ns.clone();
        let status = ns.status.get_or_insert_with(NamespaceStatus::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        let mut changed = false;
        for (ty, ok_reason, ok_message) in OK_CONDITIONS {
            let new = fresh
                .iter()
                .find(|c| c.type_ == ty)
                .cloned()
                .unwrap_or_else(|| condition(ty, "False", ok_reason, ok_message));
            match conditions.iter_mut().find(|c| c.type_ == ty) {
                None => {
                    conditions.push(new);
                    changed = true;
                }
                Some(old) => {
                    if old.status != new.status
                        || old.reason != new.reason
                        || old.message != new.message
                    {
                        if old.status != new.status {
                            old.last_transition_time = new.last_transition_time;
                        }
                        old.status = new.status;
                        old.reason = new.reason;
                        old.message = new.message;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            return;
        }
        let name = ns.metadata.name.clone().unwrap_or_default();
        ns.metadata.managed_fields = None;
        match self
            .namespaces()
            .replace_status(&name, &PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(namespace = %name, error = %e, "namespace controller: status update failed")
            }
        }
    }
}

/// kube's namespace deletion condition types with their "all is well"
/// reason and message.
const OK_CONDITIONS: [(&str, &str, &str); 5] = [
    (
        "NamespaceDeletionDiscoveryFailure",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        "NamespaceDeletionGroupVersionParsingFailure",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        "NamespaceDeletionContentFailure",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        "NamespaceContentRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        "NamespaceFinalizersRemaining",
        "ContentHasNoFinalizers",
        "All content-preserving finalizers finished",
    ),
];

fn condition(ty: &str, status: &str, reason: &str, message: &str) -> NamespaceCondition {
    NamespaceCondition {
        type_: ty.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_transition_time: Some(Time(now())),
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    let t = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// What is left of one resource in a namespace.
#[derive(Debug, Default)]
struct Left {
    count: usize,
    finalizers: BTreeMap<String, usize>,
}

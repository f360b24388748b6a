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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, NamespaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::task::JoinHandle;

use crate::catalog::{Catalog, Resource};
use crate::queue::Queue;
use crate::{Error, is_conflict, is_not_found, send_discard, status_code};

/// The finalizer token this controller owns in `spec.finalizers`.
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// Options of the namespace controller.
#[derive(Clone, Debug)]
pub struct NamespaceOptions {
    /// Namespaces processed concurrently.
    pub workers: usize,
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

/// The namespace controller; cheap to clone. Start it with
/// [`NamespaceController::run`] (or [`crate::start_builtin`]).
#[derive(Clone)]
pub struct NamespaceController {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    opts: NamespaceOptions,
    queue: Queue<String>,
    synced: tokio::sync::watch::Sender<bool>,
    running: Mutex<bool>,
}

use kubeforge_runtime::sync::lock;

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

impl NamespaceController {
    /// A namespace controller using `client`; nothing runs until
    /// [`NamespaceController::run`].
    pub fn new(client: Client, opts: NamespaceOptions) -> NamespaceController {
        let (synced, _) = tokio::sync::watch::channel(false);
        NamespaceController {
            shared: Arc::new(Shared {
                client,
                queue: Queue::new(opts.min_backoff, opts.max_backoff),
                opts,
                synced,
                running: Mutex::new(false),
            }),
        }
    }

    /// Run until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        crate::run_until_shutdown(|stop| self.run_until(stop), shutdown).await;
    }

    /// Resolves once the namespaces have been listed.
    pub async fn wait_synced(&self) {
        let mut rx = self.shared.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    pub(crate) async fn run_until(self, stop: CancellationToken) {
        let s = self.shared.clone();
        {
            let mut r = lock(&s.running);
            if *r {
                tracing::warn!("namespace controller already running");
                return;
            }
            *r = true;
        }
        let mut tasks: Vec<JoinHandle<()>> = Vec::new();
        for _ in 0..s.opts.workers.max(1) {
            tasks.push(tokio::spawn(worker(s.clone())));
        }
        let api: Api<Namespace> = Api::all(s.client.clone());
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        // What each terminating namespace looked like, so status-only
        // changes (our own conditions) do not queue it again.
        let mut seen: HashMap<String, String> = HashMap::new();
        loop {
            let ev = tokio::select! {
                ev = events.next() => ev,
                () = stop.cancelled() => break,
            };
            let Some(ev) = ev else { break };
            let ns = match ev {
                Ok(Event::Apply(ns) | Event::InitApply(ns)) => ns,
                Ok(Event::Delete(ns)) => {
                    if let Some(n) = ns.metadata.name {
                        seen.remove(&n);
                    }
                    continue;
                }
                Ok(Event::InitDone) => {
                    let _ = s.synced.send_replace(true);
                    continue;
                }
                Ok(Event::Init) => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "namespace controller: watch failed");
                    continue;
                }
            };
            let Some(name) = ns.metadata.name.clone() else {
                continue;
            };
            if ns.metadata.deletion_timestamp.is_none() {
                seen.remove(&name);
                continue;
            }
            let fingerprint = format!(
                "{:?}|{:?}",
                ns.spec.as_ref().and_then(|s| s.finalizers.as_ref()),
                ns.metadata.finalizers
            );
            if seen.get(&name) != Some(&fingerprint) {
                seen.insert(name.clone(), fingerprint);
                s.queue.add(name);
            }
        }
        s.queue.shutdown();
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        *lock(&s.running) = false;
    }
}

async fn worker(s: Arc<Shared>) {
    while let Some(name) = s.queue.get().await {
        match s.sync(&name).await {
            Ok(true) => s.queue.forget(&name),
            Ok(false) => s.queue.add_rate_limited(name.clone()),
            Err(e) => {
                tracing::debug!(namespace = %name, error = %e, "namespace controller: will retry");
                s.queue.add_rate_limited(name.clone());
            }
        }
        s.queue.done(&name);
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

//! The Memcached controller, written once by `kubeforge create api … --kind
//! Memcached --controller` and filled in as the operator-sdk tutorial's
//! `MemcachedReconciler` does it:
//!
//! 1. A Memcached being deleted: run the finalizer's cleanup (a `Degraded`
//!    condition with reason `Finalizing` and a `Warning` event), then drop
//!    `cache.example.com/finalizer` so the API server can delete it; the
//!    garbage collector removes the owned Deployment afterwards.
//! 2. Otherwise add the finalizer if missing, then make sure the Deployment
//!    exists (recreated when deleted by hand) with `spec.size` replicas and
//!    the configured image (resized when `size` changes).
//! 3. Write the status: Available/Progressing/Degraded from the Deployment's
//!    own status ([`desired::conditions`]), `nodes` from the pods,
//!    `observedGeneration`, `lastUpdated`. A conflict on the status write
//!    re-reads the object and retries; a write is never dropped.
//! 4. Requeue after the resync period.
//!
//! The controller owns Deployments and watches Pods (mapped to their
//! Memcached by the `app.kubernetes.io/instance` label), through the
//! Manager's shared caches. What it may do is declared where it is
//! registered ([`register_with`]); `make manifests` renders
//! `config/rbac/role.yaml` from those declarations. This file is yours.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubeforge_runtime::conditions::{self, ConditionStatus};
use kubeforge_runtime::events::EventRecorder;
use kubeforge_runtime::finalizer::{Event, finalizer};
use kubeforge_runtime::{Action, Cache, Manager, ObjectRef, Predicate, ReconcileError, predicates};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::api::cache::v1alpha1::{Memcached, MemcachedStatus};
use desired::{DEGRADED, DesiredCondition};
use kubeforge_runtime::api_errors as kube_errors;

pub mod desired;

/// The finalizer the operator puts on every Memcached.
pub const FINALIZER: &str = "cache.example.com/finalizer";
/// The controller's name (metrics label, event reporter, field manager).
pub const CONTROLLER_NAME: &str = "memcached-controller";
/// Default resync (the reconcile's `RequeueAfter`).
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(300);
/// Default number of Memcacheds reconciled at once.
pub const DEFAULT_CONCURRENCY: u16 = 16;
/// Attempts at a status write that keeps meeting conflicts.
const STATUS_ATTEMPTS: usize = 8;

/// How the operator runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The memcached image (default: `MEMCACHED_IMAGE` or [`desired::DEFAULT_IMAGE`]).
    pub image: String,
    /// `RequeueAfter` of every successful reconcile.
    pub resync: Duration,
    /// Memcacheds reconciled at once.
    pub max_concurrent_reconciles: u16,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            image: desired::image_from_env(),
            resync: DEFAULT_RESYNC,
            max_concurrent_reconciles: DEFAULT_CONCURRENCY,
        }
    }
}

/// What the reconciler works with.
pub struct Context {
    client: Client,
    events: EventRecorder,
    deployments: Cache<Deployment>,
    pods: Cache<Pod>,
    options: Options,
}

/// Registers the Memcached controller with `mgr` with the default
/// [`Options`] (what the generated `controllers::register_all` calls).
pub fn register(mgr: &Manager) {
    register_with(mgr, Options::default());
}

/// Registers the Memcached controller with `mgr` (it runs with `mgr.run()`).
pub fn register_with(mgr: &Manager, options: Options) {
    let ctx = Context {
        client: mgr.client(),
        events: EventRecorder::new(mgr.client(), CONTROLLER_NAME),
        deployments: mgr.store::<Deployment>(),
        pods: mgr.store::<Pod>(),
        options: options.clone(),
    };
    mgr.controller::<Memcached, _>("memcached", ctx)
        .owns::<Deployment>()
        .watches::<Pod, _>(pod_owner)
        .uses_finalizer()
        .writes_status()
        .records_events()
        .with_predicate(spec_or_deletion_changed())
        .max_concurrent_reconciles(options.max_concurrent_reconciles)
        .register(reconcile);
}

/// Updates of a Memcached worth a reconcile: a new generation (spec
/// changed) or the start of its deletion. The operator's own status and
/// finalizer writes do not come back as work; Deployment and Pod changes
/// still do (they are not filtered), and so does the resync.
fn spec_or_deletion_changed() -> Predicate {
    predicates::generation_changed().or(Predicate::new(|old, new| {
        old.deletion_timestamp.is_none() && new.deletion_timestamp.is_some()
    }))
}

/// The Memcached a pod belongs to, from the labels the Deployment gives it.
fn pod_owner(pod: &Pod) -> Option<ObjectRef<Memcached>> {
    let labels = pod.metadata.labels.as_ref()?;
    if labels.get("app.kubernetes.io/name").map(String::as_str) != Some("memcached") {
        return None;
    }
    let name = labels.get("app.kubernetes.io/instance")?;
    Some(ObjectRef::new(name).within(&pod.namespace()?))
}

fn key<K: kube::Resource<DynamicType = ()>>(m: &Memcached) -> ObjectRef<K> {
    let r = ObjectRef::new(&m.name_any());
    match m.namespace() {
        Some(ns) => r.within(&ns),
        None => r,
    }
}

/// One reconcile of one Memcached (see the module docs).
pub async fn reconcile(m: Arc<Memcached>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let ns = m
        .namespace()
        .ok_or_else(|| ReconcileError::terminal("Memcached has no namespace"))?;
    let api: Api<Memcached> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, m, |event| async {
        match event {
            Event::Cleanup(m) => {
                finalize(&api, &m, &ctx).await?;
                Ok(Action::await_change())
            }
            Event::Apply(m) => apply(&api, m, &ns, &ctx).await,
        }
    })
    .await
}

/// Make the Deployment and the status match `m` (which carries the
/// finalizer).
async fn apply(
    api: &Api<Memcached>,
    m: Arc<Memcached>,
    ns: &str,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let api = api.clone();
    let (deployment, failure) = match ensure_deployment(&m, ns, ctx).await {
        Ok(d) => (Some(d), None),
        Err(e @ DeploymentError::NotOwned) => {
            ctx.events
                .warning(&*m, "DeploymentNotOwned", "Reconcile", &e.to_string())
                .await?;
            (None, Some(e.to_string()))
        }
        Err(DeploymentError::Api(e)) => {
            let msg = format!("writing the Deployment: {e}");
            // Record why in the status (best effort), then retry with backoff.
            let _ = write_status(&api, &m, ctx, None, Some(&msg)).await;
            return Err(e.into());
        }
    };
    write_status(&api, &m, ctx, deployment.as_ref(), failure.as_deref()).await?;
    if failure.is_some() {
        // Someone else's Deployment has the name: nothing to retry until it changes.
        return Ok(Action::requeue(ctx.options.resync));
    }
    Ok(Action::requeue(ctx.options.resync))
}

#[derive(Debug, thiserror::Error)]
enum DeploymentError {
    #[error("a Deployment of that name exists and is not controlled by this Memcached")]
    NotOwned,
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Creates the Deployment if missing, resizes or fixes it if it drifted;
/// returns it as the server has it.
async fn ensure_deployment(
    m: &Memcached,
    ns: &str,
    ctx: &Context,
) -> Result<Deployment, DeploymentError> {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let want = desired::deployment(m, &ctx.options.image).ok_or(DeploymentError::NotOwned)?;
    let name = m.name_any();
    let live = ctx
        .deployments
        .get(&key::<Deployment>(m))
        .map(|d| (*d).clone());
    let live = match live {
        Some(d) => d,
        None => match api.create(&PostParams::default(), &want).await {
            Ok(d) => {
                info!(namespace = %ns, name = %name, replicas = m.spec.size, "created Deployment");
                let note = format!("Deployment {name} with {} replicas created", m.spec.size);
                if let Err(e) = ctx
                    .events
                    .normal(m, "Created", "CreateDeployment", &note)
                    .await
                {
                    warn!(namespace = %ns, name = %name, error = %e, "publishing event");
                }
                return Ok(d);
            }
            // The cache was behind: read it from the server.
            Err(e) if kube_errors::is_already_exists(&e) => api.get(&name).await?,
            Err(e) => return Err(e.into()),
        },
    };
    let uid = m.uid();
    let controlled = live
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref());
    if !controlled {
        return Err(DeploymentError::NotOwned);
    }
    let Some(drift) = desired::drift(&live, &want) else {
        return Ok(live);
    };
    let mut patch = json!({"spec": {"replicas": m.spec.size}});
    if drift.container {
        patch["spec"]["template"] = serde_json::to_value(want.spec.as_ref().map(|s| &s.template))
            .map_err(kube::Error::SerdeError)?;
    }
    // Strategic merge: containers merge by name.
    let updated = api
        .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    let old = live.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if drift.replicas {
        info!(namespace = %ns, name = %name, from = old, to = m.spec.size, "resized Deployment");
        let note = format!(
            "Deployment {name} scaled from {old} to {} replicas",
            m.spec.size
        );
        if let Err(e) = ctx
            .events
            .normal(m, "Scaled", "ScaleDeployment", &note)
            .await
        {
            warn!(namespace = %ns, name = %name, error = %e, "publishing event");
        }
    }
    Ok(updated)
}

/// The sorted names of the pods of `m` (from the shared cache).
fn pod_names(m: &Memcached, ctx: &Context) -> Vec<String> {
    let ns = m.namespace();
    let want = desired::labels(m);
    let mut names: Vec<String> = ctx
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace() == ns && p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let labels = p.labels();
            want.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .map(|p| p.name_any())
        .collect();
    names.sort();
    names
}

fn apply_conditions(
    status: &mut MemcachedStatus,
    want: &[DesiredCondition],
    generation: Option<i64>,
) -> bool {
    let mut changed = false;
    for c in want {
        let s = match c.status {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        };
        changed |= conditions::set_condition(
            &mut status.conditions,
            conditions::new(c.type_, s, c.reason, &c.message).observed_generation(generation),
        );
    }
    changed
}

/// Writes the status computed from `deployment`, retrying on conflicts
/// with the object re-read; skips the write when nothing changed.
async fn write_status(
    api: &Api<Memcached>,
    m: &Memcached,
    ctx: &Context,
    deployment: Option<&Deployment>,
    failure: Option<&str>,
) -> Result<(), kube::Error> {
    let want = desired::conditions(m.spec.size, deployment, failure);
    let nodes = pod_names(m, ctx);
    let mut current = m.clone();
    for attempt in 0..STATUS_ATTEMPTS {
        let generation = current.metadata.generation;
        let mut status = current.status.clone().unwrap_or_default();
        let mut changed = apply_conditions(&mut status, &want, generation);
        if status.nodes != nodes {
            status.nodes = nodes.clone();
            changed = true;
        }
        if status.observed_generation != generation {
            status.observed_generation = generation;
            changed = true;
        }
        if !changed {
            return Ok(());
        }
        status.last_updated = Some(Time(jiff::Timestamp::now()));
        current.status = Some(status);
        match api
            .replace_status(&current.name_any(), &PostParams::default(), &current)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if kube_errors::is_conflict(&e) && attempt + 1 < STATUS_ATTEMPTS => {
                debug!(name = %m.name_any(), attempt, "status conflict; re-reading");
                current = api.get(&m.name_any()).await?;
                if current.metadata.deletion_timestamp.is_some() {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The finalizer's cleanup: report it (Degraded=Finalizing, a Warning
/// event); the finalizer helper then lets the object go. The Deployment
/// needs no explicit delete: it is owned, so the garbage collector
/// removes it.
async fn finalize(
    api: &Api<Memcached>,
    m: &Memcached,
    ctx: &Context,
) -> Result<(), ReconcileError> {
    let name = m.name_any();
    let ns = m.namespace().unwrap_or_default();
    let mut status = m.status.clone().unwrap_or_default();
    let msg = format!("Performing finalizer operations for the custom resource: {name}");
    if conditions::set_condition(
        &mut status.conditions,
        conditions::new(DEGRADED, ConditionStatus::Unknown, "Finalizing", &msg)
            .observed_generation(m.metadata.generation),
    ) {
        let mut with = m.clone();
        status.last_updated = Some(Time(jiff::Timestamp::now()));
        with.status = Some(status);
        match api
            .replace_status(&name, &PostParams::default(), &with)
            .await
        {
            Ok(_) => {}
            // Gone meanwhile: nothing left to do.
            Err(e) if kube_errors::is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    let note = format!("Custom Resource {name} is being deleted from the namespace {ns}");
    ctx.events.warning(m, "Deleting", "Finalize", &note).await?;
    Ok(())
}

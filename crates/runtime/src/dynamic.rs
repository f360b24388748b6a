//! Controllers for kinds known only at run time: `DynamicObject`s of an
//! [`ApiResource`] (a CRD read from a file or discovered, a kind named in
//! configuration), [`Manager::dynamic_controller`].
//!
//! They run on kube-runtime's `Controller` with the manager's lifecycle —
//! started once leading, stopped (and their reconciles given the grace
//! period, or aborted when the Lease is lost) with the others — the same
//! reconcile signature, [`Action`] and per-object backoff (5 ms → 1000 s
//! by default; terminal errors are not retried; `Action::requeue(0)` is a
//! rate-limited requeue), caught panics, controller-runtime's
//! `controller_runtime_reconcile_*` and `_active_workers` metrics under the
//! controller's name (no `workqueue_*`: the queue is kube-runtime's), and
//! the permissions they need recorded for [`Manager::permissions`]. They
//! keep their own watches (one of the primary kind, a metadata watch per
//! owned kind) rather than the manager's typed, shared caches, and expose
//! no cache of the owned kinds: read children through the API.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{Controller, watcher};

use crate::action::Action;
use crate::backoff::{BackoffConfig, ItemBackoff};
use crate::controller::{Failed, panic_message};
use crate::error::ReconcileError;
use crate::manager::Manager;
use crate::metrics::ControllerLabels;
use crate::permissions::{self, Permissions};

/// An object's identity for its backoff: namespace and name.
type Key = (Option<String>, String);

fn key_of(obj: &DynamicObject) -> Key {
    (
        obj.metadata.namespace.clone(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

/// Builds a controller of `DynamicObject`s; see [`Manager::dynamic_controller`].
#[must_use = "a controller does nothing until .register(reconcile) is called"]
pub struct DynamicControllerBuilder<'m, C> {
    mgr: &'m Manager,
    name: String,
    resource: ApiResource,
    ctx: Arc<C>,
    owns: Vec<ApiResource>,
    config: watcher::Config,
    concurrency: u16,
    backoff: BackoffConfig,
    permissions: Permissions,
}

impl Manager {
    /// Start building a controller named `name` reconciling the objects
    /// of `resource` (e.g. `ApiResource::from_gvk(&gvk)` with its plural
    /// set), in every namespace, with context `ctx`.
    pub fn dynamic_controller<C: Send + Sync + 'static>(
        &self,
        name: &str,
        resource: ApiResource,
        ctx: C,
    ) -> DynamicControllerBuilder<'_, C> {
        let mut p = Permissions::new();
        p.allow(&resource.group, &resource.plural, permissions::READ);
        DynamicControllerBuilder {
            mgr: self,
            name: name.to_string(),
            resource,
            ctx: Arc::new(ctx),
            owns: Vec::new(),
            config: watcher::Config::default(),
            concurrency: 1,
            backoff: BackoffConfig::default(),
            permissions: p,
        }
    }
}

impl<C: Send + Sync + 'static> DynamicControllerBuilder<'_, C> {
    /// Also reconcile the controlling owner when an object of `child`
    /// changes (its metadata is watched); records reading and writing
    /// `child` and updating the primary kind's `finalizers`.
    pub fn owns(mut self, child: ApiResource) -> Self {
        self.permissions
            .allow(&child.group, &child.plural, permissions::READ)
            .allow(&child.group, &child.plural, permissions::WRITE)
            .allow(
                &self.resource.group,
                &format!("{}/finalizers", self.resource.plural),
                &["update"],
            );
        self.owns.push(child);
        self
    }

    /// Reconcile only the objects matching this label selector.
    pub fn labels(mut self, selector: &str) -> Self {
        self.config = self.config.labels(selector);
        self
    }

    /// How many objects are reconciled at once (default 1; 0 means 1).
    pub fn max_concurrent_reconciles(mut self, n: u16) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The per-object backoff after errors.
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = backoff;
        self
    }

    /// Declare that the reconciler writes the status subresource.
    pub fn writes_status(mut self) -> Self {
        self.permissions.allow(
            &self.resource.group,
            &format!("{}/status", self.resource.plural),
            permissions::STATUS,
        );
        self
    }

    /// Declare that the reconciler adds and removes a finalizer.
    pub fn uses_finalizer(mut self) -> Self {
        self.permissions.allow(
            &self.resource.group,
            &self.resource.plural,
            &["update", "patch"],
        );
        self
    }

    /// Declare any other rule the reconciler needs.
    pub fn permits(mut self, group: &str, resource: &str, verbs: &[&str]) -> Self {
        self.permissions.allow(group, resource, verbs);
        self
    }

    /// Add the controller to the manager with its reconcile function.
    pub fn register<F, Fut>(self, reconcile: F)
    where
        F: Fn(Arc<DynamicObject>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
    {
        self.mgr.permits_all(&self.permissions);
        let client = self.mgr.client();
        let name = self.name.clone();
        let resource = self.resource;
        let owns = self.owns;
        let config = self.config;
        let ctx = self.ctx;
        let concurrency = self.concurrency;
        let backoff = Arc::new(ItemBackoff::<Key>::new(self.backoff));
        let reconcile = Arc::new(reconcile);
        let metrics = self.mgr.metrics();
        metrics.init_reconciles(&self.name, concurrency);
        let labels = ControllerLabels {
            controller: self.name.clone(),
        };
        self.mgr.add_controller(
            self.name,
            Box::new(move |stop| {
                async move {
                    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
                    let mut controller = Controller::new_with(api, config, resource)
                        .with_config(kube::runtime::Config::default().concurrency(concurrency));
                    for child in owns {
                        let api = Api::<DynamicObject>::all_with(client.clone(), &child);
                        controller = controller.owns_with(api, child, watcher::Config::default());
                    }
                    let on_ok = backoff.clone();
                    let on_err = backoff;
                    tracing::info!(controller = %name, workers = concurrency, "starting controller");
                    controller
                        .graceful_shutdown_on(stop.cancelled_owned())
                        .run(
                            move |obj: Arc<DynamicObject>, ctx: Arc<C>| {
                                let key = key_of(&obj);
                                let backoff = on_ok.clone();
                                let (m, labels) = (metrics.clone(), labels.clone());
                                let workers = m.active_workers.get_or_create_owned(&labels);
                                workers.inc();
                                let started = Instant::now();
                                let fut = reconcile(obj, ctx);
                                async move {
                                    let outcome = AssertUnwindSafe(fut).catch_unwind().await;
                                    workers.dec();
                                    m.reconcile_time
                                        .get_or_create(&labels)
                                        .observe(started.elapsed().as_secs_f64());
                                    let result = match outcome {
                                        Ok(r) => r,
                                        Err(panic) => {
                                            m.reconcile_panics.get_or_create(&labels).inc();
                                            Err(ReconcileError::new(format!(
                                                "reconcile panicked: {}",
                                                panic_message(&*panic).unwrap_or_else(|| "no message".into())
                                            )))
                                        }
                                    };
                                    m.count_outcome(&labels, &result);
                                    match result {
                                        Ok(action) => match action.requeue_after() {
                                            Some(d) if d.is_zero() => {
                                                Ok(kube::runtime::controller::Action::requeue(
                                                    backoff.when(key),
                                                ))
                                            }
                                            _ => {
                                                backoff.forget(&key);
                                                Ok(action.into())
                                            }
                                        },
                                        Err(e) => {
                                            if e.is_terminal() {
                                                backoff.forget(&key);
                                            }
                                            Err(Failed::from(e))
                                        }
                                    }
                                }
                            },
                            move |obj: Arc<DynamicObject>, err: &Failed, _ctx: Arc<C>| {
                                if err.terminal {
                                    return kube::runtime::controller::Action::await_change();
                                }
                                let key = key_of(&obj);
                                kube::runtime::controller::Action::requeue(on_err.when(key))
                            },
                            ctx,
                        )
                        .for_each(|r| {
                            if let Err(e) = r {
                                tracing::debug!(error = %e, "dynamic controller");
                            }
                            std::future::ready(())
                        })
                        .await;
                    tracing::info!(controller = %name, "controller stopped");
                }
                .boxed()
            }),
        );
    }
}

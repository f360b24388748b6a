//! The {{kind}} controller: makes the cluster match each {{kind}}'s spec
//! and reports it in the status. This file is yours: `kubeforge create`
//! writes it once.
//!
//! What the controller may do is declared where it is registered
//! ([`register`]): the ClusterRole in `config/rbac/role.yaml` is generated
//! from those declarations by `make manifests`, so it cannot drift from
//! the code. Add `.owns::<Deployment>()` when the controller creates
//! Deployments, `.watches::<…>(mapper)` for kinds it only reads,
//! `.writes::<…>(verbs)` or `.permits(group, resource, verbs)` for anything
//! else it calls.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kubeforge_runtime::conditions::{self, ConditionStatus};
use kubeforge_runtime::events::EventRecorder;
use kubeforge_runtime::finalizer::{Event, finalizer};
use kubeforge_runtime::{Action, Manager, ReconcileError, predicates};
use serde_json::json;

use crate::api::{{group}}::{{version}}::{{kind}};

/// The controller's name (metrics label, event reporter).
pub const NAME: &str = "{{lower}}";
/// The finalizer put on every {{kind}}: its cleanup runs before deletion.
pub const FINALIZER: &str = "{{fqgroup}}/finalizer";
/// How often a {{kind}} is reconciled when nothing changes.
pub const RESYNC: Duration = Duration::from_secs(300);

/// What the reconciler works with.
pub struct Context {
    client: kube::Client,
    events: EventRecorder,
}

/// Register the controller with `mgr`.
pub fn register(mgr: &Manager) {
    let ctx = Context {
        client: mgr.client(),
        events: EventRecorder::new(mgr.client(), NAME),
    };
    mgr.controller::<{{kind}}, _>(NAME, ctx)
        .with_predicate(predicates::generation_changed())
        .uses_finalizer()
        .writes_status()
        .records_events()
        .register(reconcile);
}

/// One reconcile of one {{kind}}.
pub async fn reconcile(obj: Arc<{{kind}}>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let api: Api<{{kind}}> = {{api_for_obj}};
    finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Event::Apply(obj) => apply(&api, &obj, &ctx).await,
            Event::Cleanup(obj) => {
                // Undo here what `apply` did outside the cluster; objects it
                // owns go with the garbage collector.
                ctx.events
                    .normal(&*obj, "Finalized", "Cleanup", "cleaned up before deletion")
                    .await?;
                Ok(Action::await_change())
            }
        }
    })
    .await
}

/// Make the cluster match `obj.spec`, then say so in the status.
async fn apply(api: &Api<{{kind}}>, obj: &{{kind}}, ctx: &Context) -> Result<Action, ReconcileError> {
    // Create or update what the spec asks for here (with owner references,
    // `kubeforge_runtime::owner`), and record `.owns::<…>()` in `register`.
    let generation = obj.metadata.generation;
    let mut status = obj.status.clone().unwrap_or_default();
    let changed = conditions::set_condition(
        &mut status.conditions,
        conditions::new("Ready", ConditionStatus::True, "Reconciled", "the spec is in effect")
            .observed_generation(generation),
    );
    if changed || status.observed_generation != generation {
        status.observed_generation = generation;
        let patch = json!({ "status": status });
        api.patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let note = format!("generation {} is in effect", generation.unwrap_or_default());
        ctx.events.normal(obj, "Reconciled", "Reconcile", &note).await?;
    }
    Ok(Action::requeue(RESYNC))
}

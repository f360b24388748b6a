//! A controller of `DynamicObject`s for a CRD known only at run time
//! (Manager::dynamic_controller): reconciles each object, is triggered
//! again by the objects it owns, retries errors with backoff, and records
//! the permissions it needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Resource, ResourceExt};
use kubeforge_runtime::{Action, Manager, ReconcileError};
use kubeforge_testenv::{TestEnv, eventually};
use serde_json::json;

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"value": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"observedValue": {"type": "integer"}}}
                }}}
            }]
        }
    }))
    .expect("the Widget CRD")
}

struct Ctx {
    client: kube::Client,
    widgets: ApiResource,
    attempts: Arc<Mutex<HashMap<String, usize>>>,
}

async fn reconcile(w: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let name = w.name_any();
    *ctx.attempts
        .lock()
        .expect("lock")
        .entry(name.clone())
        .or_default() += 1;
    let value = w.data["spec"]["value"].as_i64().unwrap_or_default();
    if value < 0 {
        return Err(ReconcileError::new("a negative value cannot be reconciled"));
    }
    let ns = w.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    if cms.get_opt(&format!("{name}-child")).await?.is_none() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("{name}-child"));
        let reference = w
            .controller_owner_ref(&ctx.widgets)
            .ok_or_else(|| ReconcileError::terminal("the widget has no uid"))?;
        cm.metadata.owner_references = Some(vec![reference]);
        cms.create(&PostParams::default(), &cm).await?;
    }
    let api = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &ctx.widgets);
    let patch = json!({"status": {"observedValue": value}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(Action::await_change())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_controller_reconciles_owns_and_retries() {
    let env = TestEnv::builder()
        .crd(widget_crd())
        .start()
        .await
        .expect("start");
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let attempts = Arc::new(Mutex::new(HashMap::new()));
    let ctx = Ctx {
        client: env.client(),
        widgets: widgets.clone(),
        attempts: attempts.clone(),
    };
    let mgr = Manager::builder(env.client()).handle_signals(false).build();
    mgr.dynamic_controller("widget", widgets.clone(), ctx)
        .owns(ApiResource::erase::<ConfigMap>(&()))
        .writes_status()
        .max_concurrent_reconciles(2)
        .register(reconcile);
    let p = mgr.permissions();
    assert!(p.allows("example.com", "widgets", "watch"));
    assert!(p.allows("example.com", "widgets/status", "patch"));
    assert!(p.allows("", "configmaps", "create"));
    assert!(!p.allows("", "secrets", "get"));
    let metrics = mgr.metrics();
    let stop = mgr.shutdown_handle();
    let running = tokio::spawn(mgr.run());

    let api = Api::<DynamicObject>::namespaced_with(env.client(), "default", &widgets);
    let mut w = DynamicObject::new("one", &widgets).within("default");
    w.data = json!({"spec": {"value": 3}});
    api.create(&PostParams::default(), &w)
        .await
        .expect("create");
    let observed = |name: &'static str| {
        let api = api.clone();
        async move {
            api.get(name)
                .await
                .ok()
                .and_then(|o| o.data["status"]["observedValue"].as_i64())
        }
    };
    eventually(
        "status follows the spec",
        Duration::from_secs(20),
        || async { observed("one").await == Some(3) },
    )
    .await;

    // Deleting the owned ConfigMap triggers the owner, which makes it again.
    let cms: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let first = cms.get("one-child").await.expect("the child");
    cms.delete("one-child", &DeleteParams::default())
        .await
        .expect("delete child");
    eventually(
        "the child is made again",
        Duration::from_secs(20),
        || async {
            cms.get_opt("one-child")
                .await
                .ok()
                .flatten()
                .is_some_and(|c| c.uid() != first.uid())
        },
    )
    .await;

    // A spec change is reconciled.
    api.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"value": 5}})),
    )
    .await
    .expect("patch");
    eventually(
        "the new value is observed",
        Duration::from_secs(20),
        || async { observed("one").await == Some(5) },
    )
    .await;

    // Errors are retried with backoff (5 ms, 10 ms, 20 ms, …).
    let mut bad = DynamicObject::new("bad", &widgets).within("default");
    bad.data = json!({"spec": {"value": -1}});
    api.create(&PostParams::default(), &bad)
        .await
        .expect("create");
    let tries = || {
        attempts
            .lock()
            .expect("lock")
            .get("bad")
            .copied()
            .unwrap_or(0)
    };
    eventually(
        "the failing widget is retried",
        Duration::from_secs(20),
        || async { tries() >= 3 },
    )
    .await;

    stop.shutdown();
    running.await.expect("task").expect("clean stop");

    // Counted as controller-runtime counts, under the controller's name
    // (read once the manager has stopped: nothing moves them then).
    let sample = |line_start: &str| -> f64 {
        metrics
            .encode()
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        sample("controller_runtime_reconcile_total{controller=\"widget\",result=\"success\"}")
            >= 2.0,
        "{}",
        metrics.encode()
    );
    let errors = sample("controller_runtime_reconcile_errors_total{controller=\"widget\"}");
    assert!(errors >= 3.0, "{}", metrics.encode());
    assert_eq!(
        sample("controller_runtime_reconcile_total{controller=\"widget\",result=\"error\"}"),
        errors
    );
    assert!(
        sample("controller_runtime_reconcile_time_seconds_count{controller=\"widget\"}") >= 5.0,
        "{}",
        metrics.encode()
    );
    assert_eq!(
        sample("controller_runtime_max_concurrent_reconciles{controller=\"widget\"}"),
        2.0
    );

    env.stop().await;
}

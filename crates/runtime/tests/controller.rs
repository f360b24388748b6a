//! Controllers under a Manager against the embedded API server: reconciles,
//! /metrics and /readyz over real HTTP, backoff, terminal errors, panics,
//! owns/watches/predicates, one watch per kind, graceful shutdown, pruning.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{admin_listener, eventually, http_get, sample, tapped_client};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeforge_apiserver::ApiServer;
use kubeforge_runtime::{Action, BackoffConfig, Manager, ObjectRef, ReconcileError, predicates};

const ANNOTATION: &str = "test.kubeforge.dev/seen";

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

/// ConfigMap `ns/name` labelled `app=<app>`.
fn labelled_cm(ns: &str, name: &str, app: &str) -> ConfigMap {
    let mut c = cm(name);
    c.metadata.namespace = Some(ns.into());
    c.metadata.labels = Some(BTreeMap::from([("app".to_string(), app.to_string())]));
    c
}

async fn create_cm(client: &Client, name: &str) -> ConfigMap {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm(name))
        .await
        .expect("create configmap")
}

async fn patch_cm(client: &Client, name: &str, patch: serde_json::Value) {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch configmap");
}

/// Calls per object name.
#[derive(Default)]
struct Calls(Mutex<BTreeMap<String, Vec<Instant>>>);

impl Calls {
    fn record(&self, name: &str) -> usize {
        let mut m = self.0.lock().expect("calls lock");
        let v = m.entry(name.to_string()).or_default();
        v.push(Instant::now());
        v.len()
    }
    fn count(&self, name: &str) -> usize {
        self.0
            .lock()
            .expect("calls lock")
            .get(name)
            .map_or(0, Vec::len)
    }
    fn times(&self, name: &str) -> Vec<Instant> {
        self.0
            .lock()
            .expect("calls lock")
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}

struct Ctx {
    client: Client,
    calls: Calls,
    total: AtomicUsize,
}

fn ctx(client: &Client) -> Ctx {
    Ctx {
        client: client.clone(),
        calls: Calls::default(),
        total: AtomicUsize::new(0),
    }
}

/// Marks each ConfigMap with an annotation (a write a user would see).
async fn annotate(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let name = cm.metadata.name.clone().ok_or("no name")?;
    ctx.calls.record(&name);
    ctx.total.fetch_add(1, Ordering::SeqCst);
    let seen = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION));
    if seen.is_none() {
        let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: "yes"}}});
        Api::<ConfigMap>::namespaced(ctx.client.clone(), "default")
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Action::await_change())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_configmaps_and_serves_metrics_and_readyz() {
    let server = ApiServer::in_memory().await;
    let user = server.client();
    let tapped = tapped_client(&server, false);
    let (listener, addr) = admin_listener();
    let mgr = Manager::builder(tapped.client.clone())
        .metrics_listener(listener)
        .handle_signals(false)
        .build();
    let ctx = Arc::new(ctx(&user));
    let c2 = ctx.clone();
    mgr.controller::<ConfigMap, _>("configmaps", ())
        .max_concurrent_reconciles(2)
        .register(move |cm, _| annotate(cm, c2.clone()));
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());

    // The API is held back: the process is alive but its cache is not synced.
    eventually("admin server up", Duration::from_secs(5), || async {
        tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await;
    assert_eq!(http_get(addr, "/healthz").await, (200, "ok".to_string()));
    let (code, body) = http_get(addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("ConfigMap"), "{body}");

    tapped.gate.send_replace(true);
    eventually("readyz 200 after sync", Duration::from_secs(10), || async {
        http_get(addr, "/readyz").await.0 == 200
    })
    .await;

    for i in 0..5 {
        create_cm(&user, &format!("cm-{i}")).await;
    }
    let api = Api::<ConfigMap>::namespaced(user.clone(), "default");
    eventually("all five annotated", Duration::from_secs(10), || async {
        let list = api.list(&Default::default()).await.expect("list");
        list.items
            .iter()
            .filter(|c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("cm-"))
            })
            .all(|c| {
                c.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(ANNOTATION))
            })
            && list.items.len() >= 5
    })
    .await;
    // Each ConfigMap: reconciled on creation, then once more for our own
    // annotation write; let that settle.
    eventually(
        "second reconcile of each",
        Duration::from_secs(10),
        || async { (0..5).all(|i| ctx.calls.count(&format!("cm-{i}")) >= 2) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (code, text) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    let total = ctx.total.load(Ordering::SeqCst) as f64;
    let c = "{controller=\"configmaps\"}";
    let q = "{name=\"configmaps\",controller=\"configmaps\"}";
    let get = |s: &str| sample(&text, s).unwrap_or_else(|| panic!("no sample {s} in\n{text}"));
    assert_eq!(
        get("controller_runtime_reconcile_total{controller=\"configmaps\",result=\"success\"}"),
        total
    );
    assert_eq!(
        get("controller_runtime_reconcile_total{controller=\"configmaps\",result=\"error\"}"),
        0.0
    );
    assert_eq!(
        get(&format!("controller_runtime_reconcile_errors_total{c}")),
        0.0
    );
    assert_eq!(
        get(&format!("controller_runtime_reconcile_panics_total{c}")),
        0.0
    );
    assert_eq!(
        get(&format!(
            "controller_runtime_reconcile_time_seconds_count{c}"
        )),
        total
    );
    assert!(get(&format!("controller_runtime_reconcile_time_seconds_sum{c}")) > 0.0);
    assert_eq!(
        get(&format!("controller_runtime_max_concurrent_reconciles{c}")),
        2.0
    );
    assert_eq!(get(&format!("controller_runtime_active_workers{c}")), 0.0);
    assert_eq!(get(&format!("workqueue_depth{q}")), 0.0);
    // Every reconcile came out of the queue; adds dedupe while queued.
    assert!(get(&format!("workqueue_adds_total{q}")) >= 10.0);
    assert!(get(&format!("workqueue_adds_total{q}")) <= total);
    assert_eq!(
        get(&format!("workqueue_queue_duration_seconds_count{q}")),
        total
    );
    assert_eq!(
        get(&format!("workqueue_work_duration_seconds_count{q}")),
        total
    );
    assert_eq!(get(&format!("workqueue_retries_total{q}")), 0.0);
    assert!(!text.contains("_total_total"));
    assert!(text.contains("# TYPE controller_runtime_reconcile_time_seconds histogram"));

    stop.shutdown();
    let r = tokio::time::timeout(Duration::from_secs(10), run).await;
    assert!(matches!(r, Ok(Ok(Ok(())))), "run ended with {r:?}");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "admin server still serving"
    );
}

/// A manager with one ConfigMap controller; returns the stop handle.
fn start<F, Fut>(
    client: &Client,
    configure: impl FnOnce(&Manager) -> F,
) -> (
    kubeforge_runtime::ShutdownHandle,
    tokio::task::JoinHandle<Result<(), kubeforge_runtime::Error>>,
    std::net::SocketAddr,
)
where
    F: FnOnce() -> Fut,
{
    let (listener, addr) = admin_listener();
    let mgr = Manager::builder(client.clone())
        .metrics_listener(listener)
        .handle_signals(false)
        .build();
    let _ = configure(&mgr);
    let stop = mgr.shutdown_handle();
    (stop, tokio::spawn(mgr.run()), addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_back_off_exponentially_and_success_resets() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let ctx = Arc::new(ctx(&client));
    let c = ctx.clone();
    // 40 ms doubling: 40, 80, 160, 320 between the five failing attempts.
    let (stop, run, addr) = start(&client, |mgr| {
        mgr.controller::<ConfigMap, _>("flaky", ())
            .backoff(BackoffConfig {
                base: Duration::from_millis(40),
                max: Duration::from_secs(60),
            })
            .register(move |cm: Arc<ConfigMap>, _| {
                let c = c.clone();
                async move {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    let n = c.calls.record(&name);
                    let fail_until = if cm.metadata.labels.is_some() { 8 } else { 5 };
                    if n <= fail_until {
                        return Err(ReconcileError::new(format!("attempt {n} fails")));
                    }
                    Ok(Action::await_change())
                }
            });
        || async {}
    });
    create_cm(&client, "flaky").await;
    eventually("six attempts", Duration::from_secs(10), || async {
        ctx.calls.count("flaky") >= 6
    })
    .await;
    let t = ctx.calls.times("flaky");
    for i in 1..t.len().min(6) {
        let gap = t[i] - t[i - 1];
        let want = Duration::from_millis(40 << (i - 1));
        assert!(
            gap >= want,
            "retry {i} came after {gap:?}, backoff is {want:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ctx.calls.count("flaky"),
        6,
        "reconciled again after success"
    );

    let (_, text) = http_get(addr, "/metrics").await;
    let q = "{name=\"flaky\",controller=\"flaky\"}";
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_errors_total{controller=\"flaky\"}"
        ),
        Some(5.0)
    );
    assert_eq!(
        sample(&text, &format!("workqueue_retries_total{q}")),
        Some(5.0)
    );
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_total{controller=\"flaky\",result=\"success\"}"
        ),
        Some(1.0)
    );

    // After the success the backoff starts over: a new failure (attempts 7
    // and 8 fail now) is retried after 40 ms again, not after 640 ms.
    patch_cm(
        &client,
        "flaky",
        serde_json::json!({"metadata": {"labels": {"fail": "again"}}}),
    )
    .await;
    eventually("attempts 7-9", Duration::from_secs(10), || async {
        ctx.calls.count("flaky") >= 9
    })
    .await;
    let t = ctx.calls.times("flaky");
    let gap = t[7] - t[6];
    assert!(
        gap >= Duration::from_millis(40) && gap < Duration::from_millis(600),
        "first retry after reset took {gap:?}"
    );
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_errors_are_counted_not_retried() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let ctx = Arc::new(ctx(&client));
    let c = ctx.clone();
    let (stop, run, addr) = start(&client, |mgr| {
        mgr.controller::<ConfigMap, _>("strict", ())
            .register(move |cm: Arc<ConfigMap>, _| {
                let c = c.clone();
                async move {
                    c.calls
                        .record(&cm.metadata.name.clone().unwrap_or_default());
                    Err::<Action, _>(ReconcileError::terminal("spec cannot work"))
                }
            });
        || async {}
    });
    create_cm(&client, "bad").await;
    eventually("first attempt", Duration::from_secs(10), || async {
        ctx.calls.count("bad") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ctx.calls.count("bad"), 1, "a terminal error was retried");
    let (_, text) = http_get(addr, "/metrics").await;
    assert_eq!(
        sample(
            &text,
            "controller_runtime_terminal_reconcile_errors_total{controller=\"strict\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_errors_total{controller=\"strict\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_total{controller=\"strict\",result=\"error\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "workqueue_retries_total{name=\"strict\",controller=\"strict\"}"
        ),
        Some(0.0)
    );
    // A change to the object is reconciled again.
    patch_cm(&client, "bad", serde_json::json!({"data": {"k": "fixed"}})).await;
    eventually(
        "reconciled after change",
        Duration::from_secs(10),
        || async { ctx.calls.count("bad") == 2 },
    )
    .await;
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_reconciler_is_recovered_counted_and_retried() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let ctx = Arc::new(ctx(&client));
    let c = ctx.clone();
    let (stop, run, addr) = start(&client, |mgr| {
        mgr.controller::<ConfigMap, _>("fragile", ())
            .register(move |cm: Arc<ConfigMap>, _| {
                let c = c.clone();
                async move {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    let n = c.calls.record(&name);
                    if name == "boom" && n <= 2 {
                        panic!("reconciler bug #{n}");
                    }
                    Ok(Action::await_change())
                }
            });
        || async {}
    });
    create_cm(&client, "boom").await;
    eventually(
        "third attempt succeeds",
        Duration::from_secs(10),
        || async { ctx.calls.count("boom") >= 3 },
    )
    .await;
    // The controller still works for other objects.
    create_cm(&client, "calm").await;
    eventually(
        "other object reconciled",
        Duration::from_secs(10),
        || async { ctx.calls.count("calm") >= 1 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ctx.calls.count("boom"), 3);
    let (_, text) = http_get(addr, "/metrics").await;
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_panics_total{controller=\"fragile\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_errors_total{controller=\"fragile\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_total{controller=\"fragile\",result=\"success\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "controller_runtime_active_workers{controller=\"fragile\"}"
        ),
        Some(0.0)
    );
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_after_reconciles_again_and_is_counted() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let ctx = Arc::new(ctx(&client));
    let c = ctx.clone();
    let (stop, run, addr) = start(&client, |mgr| {
        mgr.controller::<ConfigMap, _>("periodic", ())
            .register(move |cm: Arc<ConfigMap>, _| {
                let c = c.clone();
                async move {
                    let n = c
                        .calls
                        .record(&cm.metadata.name.clone().unwrap_or_default());
                    Ok(if n < 3 {
                        Action::requeue(Duration::from_millis(100))
                    } else {
                        Action::await_change()
                    })
                }
            });
        || async {}
    });
    create_cm(&client, "tick").await;
    eventually("three reconciles", Duration::from_secs(10), || async {
        ctx.calls.count("tick") >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ctx.calls.count("tick"), 3);
    let t = ctx.calls.times("tick");
    assert!(t[1] - t[0] >= Duration::from_millis(100));
    let (_, text) = http_get(addr, "/metrics").await;
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_total{controller=\"periodic\",result=\"requeue_after\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "controller_runtime_reconcile_total{controller=\"periodic\",result=\"success\"}"
        ),
        Some(1.0)
    );
    // One add for the creation, one per requeue when its delay is over.
    assert_eq!(
        sample(
            &text,
            "workqueue_adds_total{name=\"periodic\",controller=\"periodic\"}"
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "workqueue_depth{name=\"periodic\",controller=\"periodic\"}"
        ),
        Some(0.0)
    );
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owns_watches_and_predicates_route_the_right_events() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let ctx = Arc::new(ctx(&client));
    let c = ctx.clone();
    let (stop, run, _addr) = start(&client, |mgr| {
        mgr.controller::<ConfigMap, _>("parents", ())
            .owns::<Secret>()
            .watches::<ServiceAccount, _>(|sa: &ServiceAccount| {
                sa.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("for"))
                    .map(|p| ObjectRef::<ConfigMap>::new(p).within("default"))
            })
            .with_predicate(predicates::labels_changed())
            .register(move |cm: Arc<ConfigMap>, _| {
                let c = c.clone();
                async move {
                    c.calls
                        .record(&cm.metadata.name.clone().unwrap_or_default());
                    Ok(Action::await_change())
                }
            });
        || async {}
    });
    let parent = create_cm(&client, "parent").await;
    eventually(
        "created parent reconciled",
        Duration::from_secs(10),
        || async { ctx.calls.count("parent") == 1 },
    )
    .await;

    // Predicate: an annotation-only update is filtered, a label change is not.
    patch_cm(
        &client,
        "parent",
        serde_json::json!({"metadata": {"annotations": {"a": "1"}}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ctx.calls.count("parent"),
        1,
        "annotation-only update passed labels_changed"
    );
    patch_cm(
        &client,
        "parent",
        serde_json::json!({"metadata": {"labels": {"l": "1"}}}),
    )
    .await;
    eventually(
        "label change reconciled",
        Duration::from_secs(10),
        || async { ctx.calls.count("parent") == 2 },
    )
    .await;

    // Owns: a Secret controlled by the parent triggers it on create, update, delete.
    let mut secret = Secret {
        metadata: ObjectMeta {
            name: Some("child".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    kubeforge_runtime::owner::set_controller_reference(&parent, &mut secret.metadata)
        .expect("owner ref");
    let secrets = Api::<Secret>::namespaced(client.clone(), "default");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    eventually("child create → parent", Duration::from_secs(10), || async {
        ctx.calls.count("parent") == 3
    })
    .await;
    secrets
        .patch(
            "child",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"stringData": {"x": "y"}})),
        )
        .await
        .expect("patch secret");
    eventually("child update → parent", Duration::from_secs(10), || async {
        ctx.calls.count("parent") == 4
    })
    .await;
    secrets
        .delete("child", &DeleteParams::default())
        .await
        .expect("delete secret");
    eventually("child delete → parent", Duration::from_secs(10), || async {
        ctx.calls.count("parent") == 5
    })
    .await;
    // A Secret with no owner reaches nobody.
    let mut orphan = secret.clone();
    orphan.metadata.name = Some("orphan".into());
    orphan.metadata.owner_references = None;
    secrets
        .create(&PostParams::default(), &orphan)
        .await
        .expect("create orphan");

    // Watches: a ServiceAccount labelled for the parent maps to it.
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("sa".into()),
            namespace: Some("default".into()),
            labels: Some(BTreeMap::from([("for".to_string(), "parent".to_string())])),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &sa)
        .await
        .expect("create sa");
    eventually("mapped watch → parent", Duration::from_secs(10), || async {
        ctx.calls.count("parent") == 6
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ctx.calls.count("parent"), 6);
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watch_per_kind_and_pruned_cache() {
    let server = ApiServer::in_memory().await;
    let user = server.client();
    create_cm(&user, "pre").await;
    let tapped = tapped_client(&server, true);
    let mgr = Manager::builder(tapped.client.clone())
        .handle_signals(false)
        .build();
    let a = Arc::new(ctx(&user));
    let b = Arc::new(ctx(&user));
    let (a2, b2) = (a.clone(), b.clone());
    mgr.controller::<ConfigMap, _>("first", ())
        .register(move |cm: Arc<ConfigMap>, _| {
            let a = a2.clone();
            async move {
                a.calls
                    .record(&cm.metadata.name.clone().unwrap_or_default());
                Ok(Action::await_change())
            }
        });
    mgr.controller::<ConfigMap, _>("second", ())
        .owns::<ConfigMap>()
        .register(move |cm: Arc<ConfigMap>, _| {
            let b = b2.clone();
            async move {
                b.calls
                    .record(&cm.metadata.name.clone().unwrap_or_default());
                Ok(Action::await_change())
            }
        });
    let store = mgr.store::<ConfigMap>();
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    create_cm(&user, "post").await;
    eventually(
        "both controllers saw both",
        Duration::from_secs(10),
        || async {
            a.calls.count("pre") >= 1
                && a.calls.count("post") >= 1
                && b.calls.count("pre") >= 1
                && b.calls.count("post") >= 1
        },
    )
    .await;
    assert_eq!(
        tapped.count(&["configmaps", "watch=true"]),
        1,
        "{:?}",
        tapped.log.lock().map(|l| l.clone())
    );
    assert_eq!(
        tapped.count(&["GET", "configmaps"]) - tapped.count(&["configmaps", "watch=true"]),
        1
    );

    // The server keeps managedFields; the cache does not.
    let stored = Api::<ConfigMap>::namespaced(user.clone(), "default")
        .get("post")
        .await
        .expect("get");
    assert!(
        stored
            .metadata
            .managed_fields
            .is_some_and(|m| !m.is_empty())
    );
    let cached = store
        .get(&ObjectRef::new("post").within("default"))
        .expect("cached");
    assert!(cached.metadata.managed_fields.is_none());
    assert_eq!(cached.data, stored.data);
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_reconciles_in_flight_within_the_grace_period() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let finished = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let run_with = |grace: Duration, work: Duration| {
        let mgr = Manager::builder(client.clone())
            .handle_signals(false)
            .graceful_shutdown_timeout(grace)
            .build();
        let (f, s) = (finished.clone(), started.clone());
        mgr.controller::<ConfigMap, _>("slow", ())
            .register(move |_cm: Arc<ConfigMap>, _| {
                let (f, s) = (f.clone(), s.clone());
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(work).await;
                    f.fetch_add(1, Ordering::SeqCst);
                    Ok(Action::await_change())
                }
            });
        let stop = mgr.shutdown_handle();
        (stop, tokio::spawn(mgr.run()))
    };
    create_cm(&client, "one").await;

    // In grace: the reconcile in flight completes before run returns.
    let (stop, run) = run_with(Duration::from_secs(10), Duration::from_millis(300));
    eventually("started", Duration::from_secs(10), || async {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "run returned before the reconcile finished"
    );

    // Past grace: run returns anyway and the reconcile is abandoned.
    let (stop, run) = run_with(Duration::from_millis(200), Duration::from_secs(60));
    eventually("started again", Duration::from_secs(10), || async {
        started.load(Ordering::SeqCst) == 2
    })
    .await;
    stop.shutdown();
    let r = tokio::time::timeout(Duration::from_secs(10), run).await;
    assert!(matches!(r, Ok(Ok(Ok(())))), "{r:?}");
    assert_eq!(finished.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owns_metadata_caches_children_without_spec_and_routes_them() {
    let server = ApiServer::in_memory().await;
    let user = server.client();
    let tapped = tapped_client(&server, true);
    let mgr = Manager::builder(tapped.client.clone())
        .handle_signals(false)
        .build();
    let ctx = Arc::new(ctx(&user));
    let c = ctx.clone();
    mgr.controller::<ConfigMap, _>("meta-parents", ())
        .owns_metadata::<Secret>()
        .register(move |cm: Arc<ConfigMap>, _| {
            let c = c.clone();
            async move {
                c.calls
                    .record(&cm.metadata.name.clone().unwrap_or_default());
                Ok(Action::await_change())
            }
        });
    let children = mgr.metadata_store::<Secret>();
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    let parent = create_cm(&user, "p").await;
    eventually("parent reconciled", Duration::from_secs(10), || async {
        ctx.calls.count("p") == 1
    })
    .await;
    let mut secret = Secret {
        metadata: ObjectMeta {
            name: Some("c".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(
            "password".to_string(),
            "hunter2".to_string(),
        )])),
        ..Default::default()
    };
    kubeforge_runtime::owner::set_controller_reference(&parent, &mut secret.metadata)
        .expect("owner ref");
    Api::<Secret>::namespaced(user.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    eventually("child → parent", Duration::from_secs(10), || async {
        ctx.calls.count("p") == 2
    })
    .await;
    let cached = children
        .get(&ObjectRef::new("c").within("default"))
        .expect("child cached");
    assert_eq!(
        cached.metadata.owner_references.as_ref().map(Vec::len),
        Some(1)
    );
    // The Secrets were listed and watched as metadata only.
    let log = tapped.log.lock().map(|l| l.clone()).unwrap_or_default();
    let secrets: Vec<&String> = log.iter().filter(|u| u.contains("/secrets")).collect();
    assert!(secrets.iter().any(|u| u.contains("watch=true")), "{log:?}");
    assert!(
        secrets
            .iter()
            .all(|u| u.contains("as=PartialObjectMetadata")),
        "{secrets:?}"
    );
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

/// A `watches` mapper naming a cluster-scoped object with a namespace (an
/// easy slip: `ObjectRef::new(name).within(ns)`) reaches that object under
/// its one key: never reconciled twice at once, even with several
/// workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_ref_with_a_namespace_is_the_same_key() {
    use k8s_openapi::api::core::v1::Namespace;
    use std::sync::atomic::AtomicBool;
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let mgr = Manager::builder(client.clone())
        .handle_signals(false)
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(AtomicBool::new(false));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (r, f, o, gate) = (
        runs.clone(),
        in_flight.clone(),
        overlapped.clone(),
        release.clone(),
    );
    mgr.controller::<Namespace, _>("namespaces", ())
        .watches::<ConfigMap, _>(|cm: &ConfigMap| {
            let ns = cm.metadata.namespace.clone().unwrap_or_default();
            Some(ObjectRef::<Namespace>::new(&ns).within(&ns))
        })
        .max_concurrent_reconciles(4)
        .register(move |ns: Arc<Namespace>, _| {
            let (r, f, o, gate) = (r.clone(), f.clone(), o.clone(), gate.clone());
            async move {
                if ns.metadata.name.as_deref() != Some("default") {
                    return Ok(Action::await_change());
                }
                if f.fetch_add(1, Ordering::SeqCst) > 0 {
                    o.store(true, Ordering::SeqCst);
                }
                let first = r.fetch_add(1, Ordering::SeqCst) == 0;
                if first {
                    // Hold the first reconcile until the test lets go.
                    let _ = gate.acquire().await;
                }
                f.fetch_sub(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        });
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    eventually(
        "the first reconcile of default",
        Duration::from_secs(10),
        || {
            let n = runs.load(Ordering::SeqCst);
            async move { n >= 1 }
        },
    )
    .await;
    // A ConfigMap in default maps to default while its first reconcile
    // runs: under one key, the second waits for the first.
    create_cm(&client, "trigger").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !overlapped.load(Ordering::SeqCst),
        "default was reconciled twice at once"
    );
    release.add_permits(1);
    eventually("default reconciled again", Duration::from_secs(10), || {
        let n = runs.load(Ordering::SeqCst);
        async move { n >= 2 }
    })
    .await;
    assert!(!overlapped.load(Ordering::SeqCst));
    stop.shutdown();
    let _ = run.await;
}

/// No reconcile runs before every cache it reads has listed: with the
/// owned kind's list held back, a new primary object waits; once the list
/// is in, the reconcile sees a synced owned cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_wait_for_owned_caches_to_list() {
    use futures::FutureExt as _;
    use std::sync::atomic::AtomicBool;
    let server = ApiServer::in_memory().await;
    let admin = server.client();
    let held = common::gated_client(&server, false, "/secrets");
    let mgr = Manager::builder(held.client.clone())
        .handle_signals(false)
        .build();
    let secrets = mgr.store::<Secret>();
    let runs = Arc::new(AtomicUsize::new(0));
    let unsynced = Arc::new(AtomicBool::new(false));
    let (r, u) = (runs.clone(), unsynced.clone());
    mgr.controller::<ConfigMap, _>("cms", ())
        .owns::<Secret>()
        .register(move |_cm: Arc<ConfigMap>, _| {
            let (r, u, secrets) = (r.clone(), u.clone(), secrets.clone());
            async move {
                if secrets.wait_until_ready().now_or_never().is_none() {
                    u.store(true, Ordering::SeqCst);
                }
                r.fetch_add(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        });
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    create_cm(&admin, "early").await;
    // The ConfigMap list is in; the Secret list is held.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "reconciled before the owned cache listed"
    );
    held.gate.send_replace(true);
    eventually(
        "the reconcile after the lists",
        Duration::from_secs(10),
        || {
            let n = runs.load(Ordering::SeqCst);
            async move { n >= 1 }
        },
    )
    .await;
    assert!(!unsynced.load(Ordering::SeqCst));
    stop.shutdown();
    let _ = run.await;
}

/// A controller whose task dies (here a `watches` mapper panics) stops the
/// manager with an error naming it, rather than leaving a replica that
/// runs (and leads) without reconciling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_dies_stops_the_manager() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let mgr = Manager::builder(client.clone())
        .handle_signals(false)
        .build();
    mgr.controller::<ConfigMap, _>("fragile", ())
        .watches::<Secret, _>(|s: &Secret| {
            assert!(
                s.metadata.name.as_deref() != Some("poison"),
                "mapper bug on purpose"
            );
            None::<ObjectRef<ConfigMap>>
        })
        .register(|_cm: Arc<ConfigMap>, _| async { Ok(Action::await_change()) });
    let run = tokio::spawn(mgr.run());
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("poison".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let r = tokio::time::timeout(Duration::from_secs(30), run).await;
    match r {
        Ok(Ok(Err(kubeforge_runtime::Error::ControllerStopped { name, reason }))) => {
            assert_eq!(name, "fragile");
            assert!(reason.contains("mapper bug on purpose"), "{reason}");
        }
        other => panic!("expected ControllerStopped, got {other:?}"),
    }
}

/// The finalizer helper: added before the first `Apply`, `Cleanup` once
/// the object is being deleted, then removed (keeping another party's
/// finalizer), and the object goes once that party lets go too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_helper_adds_cleans_up_and_removes() {
    use kubeforge_runtime::finalizer::{Event, finalizer};
    const MINE: &str = "test.kubeforge.dev/cleanup";
    const THEIRS: &str = "other.example.com/hold";
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let mgr = Manager::builder(client.clone())
        .handle_signals(false)
        .build();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let l = log.clone();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = api.clone();
    mgr.controller::<ConfigMap, _>("finalizing", ())
        .register(move |cm: Arc<ConfigMap>, _| {
            let (l, a) = (l.clone(), a.clone());
            async move {
                finalizer(&a, MINE, cm, |event| async move {
                    let entry = match &event {
                        Event::Apply(cm) => format!(
                            "apply finalizers={:?}",
                            cm.metadata.finalizers.clone().unwrap_or_default()
                        ),
                        Event::Cleanup(_) => "cleanup".to_string(),
                    };
                    l.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
                    Ok::<_, ReconcileError>(Action::await_change())
                })
                .await
            }
        });
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    let mut obj = cm("guarded");
    obj.metadata.finalizers = Some(vec![THEIRS.into()]);
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let entries = || log.lock().unwrap_or_else(|p| p.into_inner()).clone();
    eventually("the first Apply", Duration::from_secs(10), || {
        let e = entries();
        async move { !e.is_empty() }
    })
    .await;
    assert_eq!(
        entries()[0],
        format!("apply finalizers={:?}", [THEIRS, MINE]),
        "the finalizer is added before the first Apply"
    );
    api.delete("guarded", &DeleteParams::default())
        .await
        .expect("delete");
    eventually(
        "the cleanup and our finalizer gone",
        Duration::from_secs(10),
        || {
            let api = api.clone();
            let cleaned = entries().iter().any(|e| e == "cleanup");
            async move {
                let left = api
                    .get("guarded")
                    .await
                    .ok()
                    .and_then(|c| c.metadata.finalizers)
                    .unwrap_or_default();
                cleaned && left == vec![THEIRS.to_string()]
            }
        },
    )
    .await;
    // The other party lets go: the object is deleted.
    api.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop their finalizer");
    eventually("the ConfigMap deleted", Duration::from_secs(10), || {
        let api = api.clone();
        async move { matches!(api.get_opt("guarded").await, Ok(None)) }
    })
    .await;
    assert_eq!(
        entries().iter().filter(|e| *e == "cleanup").count(),
        1,
        "cleanup ran once: {:?}",
        entries()
    );
    stop.shutdown();
    let _ = run.await;
}

/// The manager runs the webhook server it is given: the API server's
/// admission reaches it while the manager runs (here refusing ConfigMaps
/// without a `team` label), and it stops with the manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_runs_its_webhook_server() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::core::admission::AdmissionRequest;
    use kubeforge_runtime::webhook::{Verdict, WebhookServer, validating_configuration};
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let dir = std::env::temp_dir().join(format!("kubeforge-mgr-hooks-{}", std::process::id()));
    let hooks = WebhookServer::builder()
        .addr("127.0.0.1:0".parse().expect("addr"))
        .cert_dir(dir.clone())
        .validator("/team", |req: &AdmissionRequest<ConfigMap>| {
            let labels = req.object.as_ref().and_then(|c| c.metadata.labels.as_ref());
            match labels.and_then(|l| l.get("team")) {
                Some(_) => Verdict::allow(),
                None => Verdict::deny("every ConfigMap needs a team label"),
            }
        })
        .bind()
        .await
        .expect("bind the webhook server");
    let (url, ca, addr) = (
        hooks.url("/team"),
        hooks.ca_bundle().to_string(),
        hooks.local_addr(),
    );
    let mgr = Manager::builder(client.clone())
        .handle_signals(false)
        .webhook_server(hooks)
        .build();
    mgr.controller::<ConfigMap, _>("noop", ())
        .register(|_cm: Arc<ConfigMap>, _| async { Ok(Action::await_change()) });
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    let cfg = validating_configuration(
        "team-label",
        "team.example.com",
        &url,
        &ca,
        &[("", "v1", "configmaps")],
    );
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &cfg)
        .await
        .expect("register the webhook");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // The server was bound before run(), so the first write reaches it.
    let refused = match api.create(&PostParams::default(), &cm("unlabelled")).await {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected the webhook to refuse, got {other:?}"),
    };
    assert!(
        refused
            .message
            .contains("every ConfigMap needs a team label"),
        "{refused:?}"
    );
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
    // Stopped with the manager.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let _ = std::fs::remove_dir_all(dir);
}

/// Wait until `name` is among the reconciled names in `seen`, then check
/// nothing else was reconciled.
async fn only_reconciled(seen: &Mutex<Vec<String>>, name: &str) {
    eventually(
        &format!("{name} reconciled"),
        Duration::from_secs(10),
        || {
            let got = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
            async move { got.iter().any(|n| n == name) }
        },
    )
    .await;
    let got = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        got.iter().all(|n| n == name),
        "only {name} is reconciled: {got:?}"
    );
}

/// With RBAC on: namespace `team`, and a client for user `op` holding
/// `rules` there by a Role (and nothing anywhere else).
async fn operator_of_team(server: &ApiServer, rules: serde_json::Value) -> Client {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    server.enable_rbac(true).await.expect("rbac");
    let admin = server.client();
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "team"}}))
        .expect("namespace");
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "op", "namespace": "team"}, "rules": rules}))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), "team")
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "op", "namespace": "team"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "op"},
        "subjects": [{"kind": "User", "name": "op"}]}))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "team")
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
    server.client_as(kubeforge_apiserver::UserInfo::new(
        "op",
        ["system:authenticated"],
    ))
}

/// An operator whose RBAC covers one namespace runs when its caches are
/// scoped to it (the list and watch go to the namespace's URL), and a
/// label selector keeps the rest out of the cache and the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_scoped_to_a_namespace_and_a_selector() {
    let server = ApiServer::in_memory().await;
    let admin = server.client();
    let op = operator_of_team(
        &server,
        serde_json::json!([{"apiGroups": [""], "resources": ["configmaps"],
                   "verbs": ["get", "list", "watch", "patch"]}]),
    )
    .await;
    let mgr = Manager::builder(op.clone())
        .handle_signals(false)
        .namespace_for::<ConfigMap>("team")
        .selector_for::<ConfigMap>("app=web", "")
        .build();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = seen.clone();
    mgr.controller::<ConfigMap, _>("scoped", ())
        .register(move |cm: Arc<ConfigMap>, _| {
            let s = s.clone();
            async move {
                s.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(cm.metadata.name.clone().unwrap_or_default());
                Ok(Action::await_change())
            }
        });
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    let team: Api<ConfigMap> = Api::namespaced(admin.clone(), "team");
    let default: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    for (api, c) in [
        (&default, labelled_cm("default", "elsewhere", "web")),
        (&team, labelled_cm("team", "other-app", "db")),
        (&team, labelled_cm("team", "web-config", "web")),
    ] {
        api.create(&PostParams::default(), &c)
            .await
            .expect("create");
    }
    only_reconciled(&seen, "web-config").await;
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

/// A runnable beside the controllers: it starts with the manager, its
/// metered queue shows under its name on /metrics, it is told to stop on
/// shutdown and the manager returns cleanly; one that ends unasked stops
/// the manager with `ControllerStopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runnables_start_with_the_manager_and_stop_on_shutdown() {
    let server = ApiServer::in_memory().await;
    let (listener, addr) = admin_listener();
    let mgr = Manager::builder(server.client())
        .metrics_listener(listener)
        .handle_signals(false)
        .build();
    let queue = mgr.work_queue::<String>("sweeps", BackoffConfig::default());
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let (told_tx, told_rx) = tokio::sync::oneshot::channel();
    let q = queue.clone();
    mgr.add_runnable("sweeper", move |stop| async move {
        loop {
            tokio::select! {
                item = q.get() => {
                    let Some(item) = item else { break };
                    q.done(&item);
                    let _ = done_tx.send(item);
                }
                () = stop.cancelled() => break,
            }
        }
        q.shutdown();
        let _ = told_tx.send(());
    });
    let handle = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    queue.add("a".to_string());
    queue.add("b".to_string());
    let mut seen = vec![
        done_rx.recv().await.expect("first item"),
        done_rx.recv().await.expect("second item"),
    ];
    seen.sort();
    assert_eq!(seen, ["a", "b"]);
    let (code, text) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        text.contains("workqueue_adds_total{name=\"sweeps\",controller=\"sweeps\"} 2"),
        "{text}"
    );
    assert!(
        text.contains(
            "workqueue_work_duration_seconds_count{name=\"sweeps\",controller=\"sweeps\"} 2"
        ),
        "{text}"
    );
    handle.shutdown();
    let r = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("manager stops")
        .expect("manager task");
    assert!(r.is_ok(), "{r:?}");
    told_rx.await.expect("the runnable was told to stop");

    let mgr = Manager::builder(server.client())
        .handle_signals(false)
        .build();
    mgr.add_runnable("quitter", |_stop| async {});
    let r = tokio::time::timeout(Duration::from_secs(30), mgr.run())
        .await
        .expect("manager stops");
    match r {
        Err(kubeforge_runtime::Error::ControllerStopped { name, .. }) => {
            assert_eq!(name, "quitter")
        }
        other => panic!("expected ControllerStopped, got {other:?}"),
    }
}

/// `ManagerBuilder::namespace`: every namespaced kind's cache (the
/// primary's and the owned one's) lists and watches one namespace, so an
/// operator whose Role covers only that namespace runs and reconciles only
/// there; cluster-scoped kinds stay whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_namespace_scopes_every_namespaced_cache() {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let server = ApiServer::in_memory().await;
    let admin = server.client();
    let op = operator_of_team(
        &server,
        serde_json::json!([{"apiGroups": [""], "resources": ["configmaps", "secrets"],
                   "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    // Namespaces are cluster-scoped: the operator reads them cluster-wide.
    let read_ns: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "op-namespaces"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}]}))
    .expect("clusterrole");
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &read_ns)
        .await
        .expect("create clusterrole");
    let bind_ns: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "op-namespaces"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "op-namespaces"},
        "subjects": [{"kind": "User", "name": "op"}]}))
    .expect("clusterrolebinding");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &bind_ns)
        .await
        .expect("create clusterrolebinding");
    let mgr = Manager::builder(op.clone())
        .handle_signals(false)
        .namespace("team")
        .build();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = seen.clone();
    mgr.controller::<ConfigMap, _>("team-only", ())
        .owns::<Secret>()
        .register(move |cm: Arc<ConfigMap>, _| {
            let s = s.clone();
            async move {
                s.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                    "{}/{}",
                    cm.metadata.namespace.clone().unwrap_or_default(),
                    cm.metadata.name.clone().unwrap_or_default()
                ));
                Ok(Action::await_change())
            }
        });
    let namespaces = mgr.store::<Namespace>();
    let secrets = mgr.store::<Secret>();
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    for ns in ["default", "team"] {
        let mut c = cm("settings");
        c.metadata.namespace = Some(ns.into());
        Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &c)
            .await
            .expect("create configmap");
    }
    only_reconciled(&seen, "team/settings").await;
    secrets
        .wait_until_ready()
        .await
        .expect("the Secret cache lists team");
    assert!(
        secrets
            .state()
            .iter()
            .all(|s| s.metadata.namespace.as_deref() == Some("team")),
        "the owned cache holds only team"
    );
    namespaces
        .wait_until_ready()
        .await
        .expect("the Namespace cache lists");
    let names: Vec<String> = namespaces
        .state()
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert!(
        names.iter().any(|n| n == "default") && names.iter().any(|n| n == "team"),
        "a cluster-scoped cache is whole: {names:?}"
    );
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

/// One kind under two scopes: controllers of ConfigMaps scoped to
/// `team` with `app=web`, to `default`, and unscoped each reconcile only
/// their own objects, from caches of their own (`Manager::store_in`); a
/// scoped controller's owned kind is cached in its namespace and still
/// triggers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_kind_under_two_scopes() {
    use kubeforge_runtime::Scope;
    use std::collections::BTreeSet;
    let server = ApiServer::in_memory().await;
    let admin = server.client();
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "team"}}))
            .expect("namespace");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let mgr = Manager::builder(admin.clone())
        .handle_signals(false)
        .build();
    let web_in_team = Scope::namespace("team").labels("app=web");
    let seen: Arc<Mutex<Vec<(&'static str, String)>>> = Arc::default();
    let recorder = |controller: &'static str| {
        let seen = seen.clone();
        move |cm: Arc<ConfigMap>, _: Arc<()>| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap_or_else(|p| p.into_inner()).push((
                    controller,
                    format!(
                        "{}/{}",
                        cm.metadata.namespace.clone().unwrap_or_default(),
                        cm.metadata.name.clone().unwrap_or_default()
                    ),
                ));
                Ok(Action::await_change())
            }
        }
    };
    mgr.controller::<ConfigMap, _>("web-in-team", ())
        .scope(web_in_team.clone())
        .owns::<Secret>()
        .register(recorder("web-in-team"));
    mgr.controller::<ConfigMap, _>("in-default", ())
        .scope(Scope::namespace("default"))
        .register(recorder("in-default"));
    mgr.controller::<ConfigMap, _>("everywhere", ())
        .register(recorder("everywhere"));
    let scoped = mgr.store_in::<ConfigMap>(&web_in_team);
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());

    let mut web_uid = String::new();
    for c in [
        labelled_cm("team", "web", "web"),
        labelled_cm("team", "db", "db"),
        labelled_cm("default", "settings", "web"),
    ] {
        let ns = c.metadata.namespace.clone().unwrap_or_default();
        let made = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &c)
            .await
            .expect("create configmap");
        if made.metadata.name.as_deref() == Some("web") {
            web_uid = made.metadata.uid.unwrap_or_default();
        }
    }
    let by = |controller: &str| -> BTreeSet<String> {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(c, _)| *c == controller)
            .map(|(_, o)| o.clone())
            .collect()
    };
    eventually(
        "every controller reconciled",
        Duration::from_secs(10),
        || {
            let done = by("web-in-team").len() == 1
                && by("in-default").len() == 1
                && by("everywhere").len() == 3;
            async move { done }
        },
    )
    .await;
    assert_eq!(by("web-in-team"), BTreeSet::from(["team/web".to_string()]));
    assert_eq!(
        by("in-default"),
        BTreeSet::from(["default/settings".to_string()])
    );
    assert_eq!(
        by("everywhere"),
        BTreeSet::from([
            "default/settings".to_string(),
            "team/db".to_string(),
            "team/web".to_string()
        ])
    );
    let cached: Vec<String> = scoped
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(cached, ["web"], "the scoped cache holds only its objects");

    // A Secret controlled by team/web triggers the scoped controller again.
    let count = |controller: &str| {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(c, _)| *c == controller)
            .count()
    };
    let before = count("web-in-team");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-secret", "namespace": "team", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "web", "uid": web_uid, "controller": true
        }]}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(admin.clone(), "team")
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    eventually(
        "the owner reconciled again",
        Duration::from_secs(10),
        || {
            let again = count("web-in-team") > before;
            async move { again }
        },
    )
    .await;
    stop.shutdown();
    assert!(matches!(run.await, Ok(Ok(()))));
}

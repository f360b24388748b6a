//! Fault injection observed by real clients: each error kind with its
//! `Status` and headers, the verb and resource filters, switching faults at
//! runtime, faults on the loopback path (kubectl), dropped watches making a
//! kube-runtime watcher watch again and still converge, and a controller
//! converging under errors, latency and dropped watches.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TempDir, Widget, api_status, kubectl, kubectl_ok, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{CustomResourceExt, ResourceExt};
use kubeforge_testenv::{Faults, InjectedError, TestEnv, Verb};
use serde_json::Value;

fn config_map(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("value".to_string(), value.to_string())].into()),
        ..Default::default()
    }
}

fn only(kind: InjectedError) -> Faults {
    Faults::new().error_rate(1.0).errors([kind])
}

/// A raw GET through `client`: status code, Retry-After header, body.
async fn raw_get(client: &kube::Client, path: &str) -> (u16, Option<String>, Value) {
    let req = http::Request::get(path)
        .body(kube::client::Body::empty())
        .expect("request");
    let res = client.send(req).await.expect("send");
    let code = res.status().as_u16();
    let retry_after = res
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = res.into_body().collect_bytes().await.expect("body");
    (
        code,
        retry_after,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn internal_error_is_a_500_status() {
    let env = TestEnv::builder()
        .crd(Widget::crd())
        .faults(only(InjectedError::InternalError))
        .start()
        .await
        .expect("start: CRD setup is never faulted");
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    let err = cms.get("anything").await.expect_err("faulted");
    let kube::Error::Api(s) = err else {
        panic!("expected a Status, got {err:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
    assert!(
        s.message.starts_with("Internal error occurred: "),
        "{}",
        s.message
    );

    let (code, _, body) = raw_get(&env.client(), "/api/v1/namespaces/default/configmaps").await;
    assert_eq!(code, 500);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["reason"], "InternalError");
    assert_eq!(body["code"], 500);

    // Discovery is never faulted, nor is the unfaulted client.
    let (code, _, _) = raw_get(&env.client(), "/api/v1").await;
    assert_eq!(code, 200);
    let direct: Api<ConfigMap> = Api::default_namespaced(env.client_without_faults());
    direct
        .create(&PostParams::default(), &config_map("direct", "1"))
        .await
        .expect("unfaulted create");
    assert_eq!(env.faults().stats().internal_errors, 2);
    env.stop().await;
}

#[tokio::test]
async fn too_many_requests_carries_retry_after() {
    let env = TestEnv::builder()
        .faults(only(InjectedError::TooManyRequests).retry_after(Duration::from_secs(3)))
        .start()
        .await
        .expect("start");
    let (code, retry_after, body) =
        raw_get(&env.client(), "/api/v1/namespaces/default/configmaps/x").await;
    assert_eq!(code, 429);
    assert_eq!(retry_after.as_deref(), Some("3"));
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(body["details"]["retryAfterSeconds"], 3);

    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    let (code, reason) = api_status(cms.list(&ListParams::default()).await);
    assert_eq!((code, reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(env.faults().stats().too_many_requests, 2);
    env.stop().await;
}

#[tokio::test]
async fn conflict_hits_updates_and_patches_only() {
    let env = TestEnv::builder()
        .faults(only(InjectedError::Conflict))
        .start()
        .await
        .expect("start");
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    // Creates and reads are not what a Conflict answers.
    let created = cms
        .create(&PostParams::default(), &config_map("c", "1"))
        .await
        .expect("create passes");
    let got = cms.get("c").await.expect("get passes");
    assert_eq!(got.resource_version(), created.resource_version());

    let err = cms
        .replace("c", &PostParams::default(), &got)
        .await
        .expect_err("update conflicts");
    let kube::Error::Api(s) = err else {
        panic!("expected a Status, got {err:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert!(
        s.message.contains(
            "Operation cannot be fulfilled on configmaps \"c\": the object has been modified"
        ),
        "{}",
        s.message
    );
    let patch = Patch::Merge(serde_json::json!({"data": {"value": "2"}}));
    let (code, reason) = api_status(cms.patch("c", &PatchParams::default(), &patch).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    // Nothing was written.
    let direct: Api<ConfigMap> = Api::default_namespaced(env.client_without_faults());
    assert_eq!(
        direct.get("c").await.expect("get").data.unwrap_or_default()["value"],
        "1"
    );
    assert_eq!(env.faults().stats().conflicts, 2);
    env.stop().await;
}

#[tokio::test]
async fn verbs_and_resources_narrow_what_fails() {
    let env = TestEnv::builder()
        .faults(
            only(InjectedError::InternalError)
                .verbs([Verb::Create])
                .resources(["secrets"]),
        )
        .start()
        .await
        .expect("start");
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    cms.create(&PostParams::default(), &config_map("c", "1"))
        .await
        .expect("configmaps are not faulted");
    let secrets: Api<Secret> = Api::default_namespaced(env.client());
    let s = Secret {
        metadata: ObjectMeta {
            name: Some("s".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let (code, _) = api_status(secrets.create(&PostParams::default(), &s).await);
    assert_eq!(code, 500);
    secrets
        .list(&ListParams::default())
        .await
        .expect("lists are not faulted");
    env.stop().await;
}

#[tokio::test]
async fn faults_switch_on_and_off_at_runtime() {
    let env = TestEnv::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    cms.create(&PostParams::default(), &config_map("c", "1"))
        .await
        .expect("clean setup");

    env.faults().set(only(InjectedError::InternalError));
    assert_eq!(api_status(cms.get("c").await).0, 500);
    // Latency alone delays but does not fail.
    env.faults().set(
        Faults::new()
            .latency(Duration::from_millis(1))
            .latency_jitter(Duration::from_millis(1)),
    );
    cms.get("c").await.expect("delayed get");
    assert!(env.faults().stats().delayed >= 1);

    env.faults().clear();
    assert!(!env.faults().get().is_active());
    cms.get("c").await.expect("clean again");
    assert_eq!(env.faults().stats().internal_errors, 1);
    env.stop().await;
}

#[tokio::test]
async fn loopback_requests_are_faulted_too() {
    let env = TestEnv::builder()
        .loopback(true)
        .faults(only(InjectedError::InternalError).resources(["configmaps"]))
        .start()
        .await
        .expect("start");
    let kubeconfig = env.kubeconfig_path().expect("kubeconfig").to_path_buf();
    let home = TempDir::new("faults-kubectl");
    let (k, h) = (kubeconfig.clone(), home.0.clone());
    let (ns, cm) = tokio::task::spawn_blocking(move || {
        let ns = kubectl_ok(&k, &h, &["get", "ns"], None);
        (ns, kubectl(&k, &h, &["get", "configmaps"], None))
    })
    .await
    .expect("kubectl task");
    assert!(ns.contains("default"), "{ns}");
    assert!(!cm.status.success());
    let stderr = String::from_utf8_lossy(&cm.stderr);
    assert!(stderr.contains("InternalError"), "{stderr}");

    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    assert_eq!(api_status(cms.get("x").await).0, 500);
    assert!(env.faults().stats().internal_errors >= 2);
    env.stop().await;
}

#[tokio::test]
async fn dropped_watches_make_a_watcher_watch_again_and_converge() {
    dropped_watches(false).await;
}

#[tokio::test]
async fn dropped_watches_over_loopback_http() {
    dropped_watches(true).await;
}

async fn dropped_watches(loopback: bool) {
    let env = TestEnv::builder()
        .loopback(loopback)
        .start()
        .await
        .expect("start");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    let mut stream = reflector(writer, watcher(cms, watcher::Config::default()))
        .default_backoff()
        .boxed();
    // Set up cleanly: the first list, then a watch.
    within("the first list", async {
        while futures::FutureExt::now_or_never(reader.wait_until_ready()).is_none() {
            stream.next().await.expect("stream").expect("event");
        }
    })
    .await;

    // Watches already open are dropped too once faults are set.
    env.faults().set(
        Faults::new().drop_watches_between(Duration::from_millis(20), Duration::from_millis(60)),
    );
    let direct: Api<ConfigMap> = Api::default_namespaced(env.client_without_faults());
    let writes = tokio::spawn(async move {
        for i in 0..30 {
            direct
                .create(
                    &PostParams::default(),
                    &config_map(&format!("cm-{i}"), &i.to_string()),
                )
                .await
                .expect("create");
            // Spread the writes over several watch lifetimes.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    within("the watcher to see every ConfigMap", async {
        loop {
            stream.next().await.expect("stream").expect("event");
            let seen = reader
                .state()
                .iter()
                .filter(|c| c.name_any().starts_with("cm-"))
                .count();
            if seen == 30 {
                break;
            }
        }
    })
    .await;
    writes.await.expect("writes");
    for c in reader.state() {
        if let Some(i) = c.name_any().strip_prefix("cm-") {
            assert_eq!(c.data.clone().unwrap_or_default()["value"], i);
        }
    }
    let stats = env.faults().stats();
    // Watches were dropped while the writes went on, and the watcher
    // watched again each time (the last watch may be dropped by now too).
    assert!(stats.watches_dropped >= 2, "{stats:?}");
    assert!(stats.watches >= 3, "{stats:?}");
    env.stop().await;
}

#[tokio::test]
async fn a_seed_makes_the_faults_repeat() {
    let pattern = async || {
        let env = TestEnv::builder()
            .faults(Faults::new().error_rate(0.5).seed(42))
            .start()
            .await
            .expect("start");
        let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
        let mut failed = Vec::new();
        for _ in 0..40 {
            failed.push(cms.list(&ListParams::default()).await.is_err());
        }
        env.stop().await;
        failed
    };
    let first = pattern().await;
    assert!(first.contains(&true) && first.contains(&false), "{first:?}");
    assert_eq!(first, pattern().await);
}

/// A tiny controller under test: copies each ConfigMap `x` (not itself a
/// copy) into `x-copy` with server-side apply.
async fn reconcile(cm: Arc<ConfigMap>, client: Arc<kube::Client>) -> Result<Action, kube::Error> {
    let name = cm.name_any();
    if name.ends_with("-copy") {
        return Ok(Action::await_change());
    }
    let api: Api<ConfigMap> = Api::default_namespaced(Arc::unwrap_or_clone(client));
    let copy = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{name}-copy")},
        "data": cm.data,
    });
    api.patch(
        &format!("{name}-copy"),
        &PatchParams::apply("copier").force(),
        &Patch::Apply(copy),
    )
    .await?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<ConfigMap>, _: &kube::Error, _: Arc<kube::Client>) -> Action {
    Action::requeue(Duration::from_millis(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_converges_under_errors_latency_and_dropped_watches() {
    let env = TestEnv::builder()
        .faults(
            Faults::new()
                .error_rate(0.2)
                .latency_jitter(Duration::from_millis(2))
                .drop_watches_between(Duration::from_millis(50), Duration::from_millis(200))
                .seed(7),
        )
        .start()
        .await
        .expect("start");
    let client = env.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let controller = tokio::spawn(
        Controller::new(cms, watcher::Config::default())
            .run(reconcile, error_policy, Arc::new(client))
            .for_each(|_| async {}),
    );

    // The test's own writes and checks bypass the faults.
    let direct: Api<ConfigMap> = Api::default_namespaced(env.client_without_faults());
    for i in 0..20 {
        direct
            .create(
                &PostParams::default(),
                &config_map(&format!("src-{i}"), &i.to_string()),
            )
            .await
            .expect("create");
    }
    let (reader, writer) = reflector::store::<ConfigMap>();
    let mut copies = reflector(writer, watcher(direct.clone(), watcher::Config::default())).boxed();
    let done = |r: &reflector::Store<ConfigMap>| {
        (0..20).all(|i| {
            r.get(&reflector::ObjectRef::new(&format!("src-{i}-copy")).within("default"))
                .is_some_and(|c| c.data.clone().unwrap_or_default()["value"] == i.to_string())
        })
    };
    within("every copy to be written", async {
        while !done(&reader) {
            copies.next().await.expect("stream").expect("event");
        }
    })
    .await;
    let stats = env.faults().stats();
    assert!(stats.errors() > 0, "{stats:?}");
    controller.abort();
    env.stop().await;
}

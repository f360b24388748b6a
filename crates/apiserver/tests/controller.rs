//! A kube-runtime `Controller` using `finalizer()` (JSON patches with a
//! `test` op) and `Recorder` events runs against the embedded server:
//! create → reconcile → delete → finalizer cleanup → object gone.
//! Also: kube-rs metadata-only watches (`Api<PartialObjectMeta<K>>`,
//! as=PartialObjectMetadata).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

const FINALIZER: &str = "demo.example.com/cleanup";

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Finalizer(#[from] Box<kube::runtime::finalizer::Error<kube::Error>>),
}

struct Ctx {
    api: Api<ConfigMap>,
    recorder: Recorder,
    cleaned: tokio::sync::mpsc::UnboundedSender<String>,
}

async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let recorder = ctx.recorder.clone();
    let cleaned = ctx.cleaned.clone();
    let api = ctx.api.clone();
    finalizer(&ctx.api, FINALIZER, cm, |event| async move {
        match event {
            Finalizer::Apply(cm) => {
                let reference = cm.object_ref(&());
                recorder
                    .publish(
                        &Event {
                            type_: EventType::Normal,
                            reason: "Reconciled".into(),
                            note: Some("seen".into()),
                            action: "Reconcile".into(),
                            secondary: None,
                        },
                        &reference,
                    )
                    .await?;
                api.patch(
                    &cm.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"reconciled": "yes"}}})),
                )
                .await?;
                Ok(Action::await_change())
            }
            Finalizer::Cleanup(cm) => {
                let _ = cleaned.send(cm.name_any());
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn error_policy(_cm: Arc<ConfigMap>, _e: &Error, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_with_finalizer_and_events() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let (tx, mut cleaned) = tokio::sync::mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "demo".into(),
                instance: None,
            },
        ),
        cleaned: tx,
    });
    let controller = Controller::new(api.clone(), watcher::Config::default().labels("demo=yes"))
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);

    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "managed", "labels": {"demo": "yes"}}}))
            .expect("cm");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    // Reconciled: the finalizer is added and the annotation set.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = api.get("managed").await.expect("get");
        if got.finalizers().iter().any(|f| f == FINALIZER)
            && got.annotations().get("reconciled").is_some()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not reconciled: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The Recorder's event is visible as a core/v1 Event.
    let events: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let list = events
        .list(&ListParams::default().fields("involvedObject.name=managed"))
        .await
        .expect("events");
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Reconciled")),
        "{:?}",
        list.items
    );

    // Delete: the object stays (deletionTimestamp) until the controller's
    // cleanup removes its finalizer, then it is gone.
    api.delete("managed", &DeleteParams::default())
        .await
        .expect("delete");
    let name = tokio::time::timeout(Duration::from_secs(10), cleaned.recv())
        .await
        .expect("cleanup ran")
        .expect("name");
    assert_eq!(name, "managed");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while api.get_opt("managed").await.expect("get").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "object not removed after cleanup"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_watcher_sees_partial_objects() {
    let server = ApiServer::in_memory().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let meta: Api<PartialObjectMeta<ConfigMap>> = Api::default_namespaced(server.client());
    let mut stream = watcher(meta, watcher::Config::default())
        .applied_objects()
        .boxed();
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "m", "labels": {"x": "1"}}, "data": {"big": "value"}}),
    )
    .expect("cm");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let got = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("event")
        .expect("item")
        .expect("ok");
    assert_eq!(got.metadata.name.as_deref(), Some("m"));
    assert_eq!(got.labels().get("x").map(String::as_str), Some("1"));
    assert!(got.metadata.resource_version.is_some());
    // And a metadata list.
    let list = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list metadata");
    assert_eq!(list.items.len(), 1);
}

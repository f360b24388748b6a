//! core/v1 and events.k8s.io/v1 Events share one storage: what
//! kube-runtime's `Recorder` writes (events.k8s.io/v1, created then merge
//! patched for repeats) is read back through core/v1 with the field names
//! `kubectl describe` uses, and the other way round.

use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

#[tokio::test]
async fn recorder_events_are_visible_as_core_events() {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).expect("pod");
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let reference: ObjectReference = pod.object_ref(&());
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "demo-controller".into(),
            instance: Some("demo-1".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some("all good".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.expect("publish");
    // The same event again becomes a series (a merge patch of the first).
    recorder
        .publish(&ev, &reference)
        .await
        .expect("publish again");

    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let list = core
        .list(&ListParams::default().fields("involvedObject.name=p,involvedObject.kind=Pod"))
        .await
        .expect("core events");
    assert_eq!(list.items.len(), 1, "{:?}", list.items);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("Reconciled"));
    assert_eq!(e.message.as_deref(), Some("all good"));
    assert_eq!(e.reporting_component.as_deref(), Some("demo-controller"));
    assert_eq!(e.involved_object.uid, pod.metadata.uid);
    assert!(
        e.series.as_ref().is_some_and(|s| s.count.unwrap_or(0) >= 2),
        "{:?}",
        e.series
    );

    let v1: Api<EventV1> = Api::default_namespaced(client.clone());
    let events = v1
        .list(&ListParams::default().fields("regarding.name=p"))
        .await
        .expect("v1 events");
    assert_eq!(events.items.len(), 1);
    assert_eq!(events.items[0].note.as_deref(), Some("all good"));

    // A core event is visible through events.k8s.io/v1.
    let ce: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "legacy"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Pulled", "message": "image pulled", "type": "Normal", "source": {"component": "kubelet"}, "count": 1
    }))
    .expect("event");
    core.create(&PostParams::default(), &ce)
        .await
        .expect("core create");
    let got = v1.get("legacy").await.expect("v1 get");
    assert_eq!(got.note.as_deref(), Some("image pulled"));
    assert_eq!(
        got.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("p")
    );
    assert_eq!(
        got.deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("kubelet")
    );
}

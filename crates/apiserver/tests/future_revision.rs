//! Reads and watches at a revision the store has not reached, answered as
//! kube-apiserver's cacher does: a LIST, or a watch asking for its initial
//! events there, gets 504 "Too large resource version" (the watch as an
//! ERROR event); a plain watch from it is accepted and gets the events past
//! it. Driven with kube-rs and raw HTTP.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::Request;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, VersionMatch, WatchEvent, WatchParams};
use kubeforge_apiserver::ApiServer;
use serde_json::{Value, json};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("cm")
}

async fn lines(server: &ApiServer, uri: &str) -> (u16, Vec<Value>) {
    let req = Request::get(uri)
        .body(Full::new(Bytes::new()))
        .expect("req");
    let resp = server.handle(req).await;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let values = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("json"))
        .collect();
    (code, values)
}

fn assert_too_large(status: &Value, requested: u64, current: u64) {
    assert_eq!(
        status,
        &json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!("Timeout: Too large resource version: {requested}, current: {current}"),
            "reason": "Timeout",
            "details": {
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            },
            "code": 504
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_future_revision_is_too_large_for_lists_and_initial_events() {
    let server = ApiServer::in_memory().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    cms.create(&PostParams::default(), &cm("a"))
        .await
        .expect("create");
    let current = server.store().current_revision();
    let future = 999_999_999u64;

    // kube-rs: the LIST and the streaming-list watch are both refused.
    let lp = ListParams::default()
        .at(&future.to_string())
        .matching(VersionMatch::NotOlderThan);
    match cms.list(&lp).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
            assert!(
                e.message.contains("Too large resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected 504, got {other:?}"),
    }
    let wp = WatchParams::default().initial_events();
    let first = cms
        .watch(&wp, &future.to_string())
        .await
        .expect("watch starts")
        .boxed()
        .try_next()
        .await
        .expect("event");
    match first {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }

    // The whole Status, as kube-apiserver writes it.
    let (code, body) = lines(
        &server,
        &format!("/api/v1/namespaces/default/configmaps?resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(code, 504);
    assert_too_large(&body[0], future, current);
    let (code, events) = lines(
        &server,
        &format!("/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={future}"),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    assert_too_large(&events[0]["object"], future, current);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_watch_from_a_future_revision_gets_the_events_past_it() {
    let server = ApiServer::in_memory().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let from = server.store().current_revision() + 2;
    let watch = {
        let server = server.clone();
        tokio::spawn(async move {
            lines(
                &server,
                &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}&timeoutSeconds=2"),
            )
            .await
        })
    };
    // Revisions from+… : the first two are not past `from`.
    for name in ["one", "two", "three"] {
        cms.create(&PostParams::default(), &cm(name))
            .await
            .expect("create");
    }
    let (code, events) = watch.await.expect("watch");
    assert_eq!(code, 200);
    let names: Vec<&str> = events
        .iter()
        .filter_map(|e| e.pointer("/object/metadata/name").and_then(Value::as_str))
        .collect();
    assert!(
        names.ends_with(&["three"]) && !names.contains(&"one"),
        "{events:?}"
    );
}

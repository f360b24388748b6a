//! The server's side of deletion, without controllers running: the
//! finalizers propagationPolicy adds and removes, status codes,
//! preconditions, option validation and graceful pod deletion.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kubeforge_apiserver::ApiServer;
use serde_json::{Value, json};

async fn server() -> (ApiServer, Client) {
    let server = ApiServer::in_memory().await;
    server.set_gc_enabled(true);
    let client = server.client();
    (server, client)
}

async fn cm(client: &Client, name: &str, finalizers: &[&str]) -> ConfigMap {
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let c: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": name, "finalizers": finalizers}, "data": {"a": "b"}}),
    )
    .expect("cm");
    api.create(&PostParams::default(), &c)
        .await
        .expect("create")
}

/// A raw DELETE with a JSON body: status code and body.
async fn raw_delete(client: &Client, path: &str, body: Value) -> (u16, Value) {
    let req = http::Request::delete(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("request");
    let res = client.send(req).await.expect("send");
    let code = res.status().as_u16();
    let bytes = res.into_body().collect_bytes().await.expect("body");
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn finalizers(c: &ConfigMap) -> Vec<String> {
    c.metadata.finalizers.clone().unwrap_or_default()
}

#[tokio::test]
async fn propagation_policy_sets_the_gc_finalizers() {
    let (_s, c) = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cm(&c, "x", &["example.com/keep"]).await;

    let out = api
        .delete("x", &DeleteParams::orphan())
        .await
        .expect("delete")
        .left()
        .expect("kept");
    assert_eq!(finalizers(&out), ["example.com/keep", "orphan"]);
    assert!(out.metadata.deletion_timestamp.is_some());
    assert_eq!(out.metadata.deletion_grace_period_seconds, Some(0));

    // A second DELETE may change the policy (kube's
    // deletionFinalizersForGarbageCollection).
    let out = api
        .delete("x", &DeleteParams::foreground())
        .await
        .expect("delete")
        .left()
        .expect("kept");
    assert_eq!(finalizers(&out), ["example.com/keep", "foregroundDeletion"]);
    let out = api
        .delete("x", &DeleteParams::background())
        .await
        .expect("delete")
        .left()
        .expect("kept");
    assert_eq!(finalizers(&out), ["example.com/keep"]);
    // No policy: the finalizers stay as they are.
    let out = api
        .delete("x", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("kept");
    assert_eq!(finalizers(&out), ["example.com/keep"]);

    // No new finalizers once deleting.
    let err = api
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/keep", "example.com/new"]}}),
            ),
        )
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err:?}"
    );

    // The last finalizer going deletes it.
    api.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("let go");
    assert!(api.get_opt("x").await.expect("get").is_none());
}

#[tokio::test]
async fn without_a_gc_policies_add_nothing() {
    let server = ApiServer::in_memory().await;
    let c = server.client();
    let api: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cm(&c, "y", &[]).await;
    api.delete("y", &DeleteParams::foreground())
        .await
        .expect("delete");
    assert!(api.get_opt("y").await.expect("get").is_none());
}

#[tokio::test]
async fn status_codes_preconditions_and_validation() {
    let (_s, c) = server().await;
    let api: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let made = cm(&c, "z", &["example.com/keep"]).await;
    let path = "/api/v1/namespaces/default/configmaps/z";

    // Preconditions.
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let err = api.delete("z", &dp).await.expect_err("uid precondition");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err:?}"
    );
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: made.metadata.uid.clone(),
            resource_version: Some("1".into()),
        }),
        ..DeleteParams::default()
    };
    let err = api.delete("z", &dp).await.expect_err("rv precondition");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err:?}"
    );

    // orphanDependents and propagationPolicy together: 422.
    let (code, body) = raw_delete(
        &c,
        path,
        json!({"orphanDependents": true, "propagationPolicy": "Orphan"}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "propagationPolicy");
    let (code, _) = raw_delete(&c, path, json!({"propagationPolicy": "Sideways"})).await;
    assert_eq!(code, 422);

    // Kept by a finalizer: 200, except 202 when orphanDependents is false.
    let (code, body) = raw_delete(&c, path, json!({"orphanDependents": false})).await;
    assert_eq!(code, 202, "{body}");
    assert!(body["metadata"]["deletionTimestamp"].is_string());
    let (code, _) = raw_delete(&c, path, json!({})).await;
    assert_eq!(code, 200);

    // Dry run changes nothing.
    cm(&c, "d", &[]).await;
    let (code, _) = raw_delete(
        &c,
        "/api/v1/namespaces/default/configmaps/d",
        json!({"dryRun": ["All"]}),
    )
    .await;
    assert_eq!(code, 200);
    assert!(api.get_opt("d").await.expect("get").is_some());
}

#[tokio::test]
async fn graceful_pod_deletion_when_declared() {
    let server = ApiServer::in_memory().await;
    server.set_graceful_pod_deletion(true);
    let c = server.client();
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let make = |name: &str, node: Option<&str>| {
        let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        serde_json::from_value::<Pod>(json!({"metadata": {"name": name}, "spec": spec}))
            .expect("pod")
    };
    // Unscheduled: deleted at once.
    pods.create(&PostParams::default(), &make("free", None))
        .await
        .expect("create");
    pods.delete("free", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(pods.get_opt("free").await.expect("get").is_none());

    // Bound: the grace period is recorded and the pod stays for the kubelet.
    pods.create(&PostParams::default(), &make("bound", Some("node-1")))
        .await
        .expect("create");
    let dp = DeleteParams {
        grace_period_seconds: Some(20),
        ..DeleteParams::default()
    };
    let p = pods
        .delete("bound", &dp)
        .await
        .expect("delete")
        .left()
        .expect("kept");
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(20));
    let at = p.metadata.deletion_timestamp.expect("deletionTimestamp").0;
    let ahead = at.duration_since(k8s_openapi::jiff::Timestamp::now());
    assert!(
        ahead > k8s_openapi::jiff::SignedDuration::from_secs(10),
        "deletionTimestamp {at} is in the future"
    );
    // A longer grace period changes nothing; a shorter one shortens it.
    let p = pods
        .delete(
            "bound",
            &DeleteParams {
                grace_period_seconds: Some(60),
                ..DeleteParams::default()
            },
        )
        .await
        .expect("delete")
        .left()
        .expect("kept");
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(20));
    let p = pods
        .delete(
            "bound",
            &DeleteParams {
                grace_period_seconds: Some(5),
                ..DeleteParams::default()
            },
        )
        .await
        .expect("delete")
        .left()
        .expect("kept");
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(5));
    // The kubelet's final DELETE with grace 0.
    pods.delete(
        "bound",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(pods.get_opt("bound").await.expect("get").is_none());
}

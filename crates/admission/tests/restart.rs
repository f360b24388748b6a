//! The policy server cannot be bypassed across restarts and policy
//! changes: the embedded API server, `PolicyServer` registered against it
//! over HTTPS and restarted as a user restarts `kubeforge webhook`, pods
//! created with kube-rs.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kubeforge_admission::AdmissionPolicy;
use kubeforge_admission::engine::{ClusterView, Engine, inputs};
use kubeforge_admission::server::{PolicyHandler, PolicyServer, ServerOptions};
use serde_json::json;

/// A policy server serving until its handle is stopped.
struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(client: &kube::Client, dir: &std::path::Path) -> Running {
        let opts = ServerOptions {
            listen: "127.0.0.1:0".parse().expect("addr"),
            cert_dir: dir.join("certs"),
            register: true,
            ..ServerOptions::default()
        };
        let server = PolicyServer::start(client.clone(), &opts)
            .await
            .expect("policy server");
        // Serve once synced, as a readiness probe would route traffic.
        tokio::time::timeout(Duration::from_secs(120), server.engine.until_ready())
            .await
            .expect("the policy server syncs");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            let _ = server
                .run(async {
                    let _ = rx.await;
                })
                .await;
        });
        Running {
            stop: Some(tx),
            done,
        }
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.done).await;
    }
}

fn pod(name: &str, limits: bool) -> Pod {
    let mut c = json!({"name": name, "image": "nginx:1.27"});
    if limits {
        c["resources"] = json!({"limits": {"cpu": "100m", "memory": "64Mi"}});
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": [c]}}))
        .expect("pod")
}

async fn refused_for_limits(pods: &Api<Pod>, name: &str) {
    let e = pods
        .create(&PostParams::default(), &pod(name, false))
        .await
        .expect_err("a pod without limits is refused");
    let (code, msg) = status_of(e);
    assert_eq!(code, 403, "{msg}");
    assert!(
        msg.contains(&format!(
            "container \"{name}\" has no resource limits for cpu, memory"
        )),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_enforces_existing_policies() {
    let (_api_server, client) = cluster().await;
    let dir = TempDir::new("restart");
    let server = Running::start(&client, &dir.0).await;
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "prod"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let (ready, _) = apply_policy(&client, "limits", json!({"requireResources": {}})).await;
    assert_eq!(ready, "True");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    refused_for_limits(&pods, "before").await;

    // Restarted with the policy already there, as `kubeforge webhook` is.
    server.stop().await;
    let server = Running::start(&client, &dir.0).await;
    refused_for_limits(&pods, "after-restart").await;
    pods.create(&PostParams::default(), &pod("limited", true))
        .await
        .expect("a pod with limits is admitted");

    // An invalid edit keeps the last valid version in effect, reported.
    let (ready, msg) = apply_policy(
        &client,
        "limits",
        json!({"requireResources": {}, "images": {"allowedRegistries": ["https://docker.io"]}}),
    )
    .await;
    assert_eq!(ready, "False");
    assert!(
        msg.starts_with("spec.images.allowedRegistries[0]: ")
            && msg.ends_with("the last valid version (generation 1) stays in effect"),
        "{msg}"
    );
    refused_for_limits(&pods, "after-invalid-edit").await;
    let policies: Api<AdmissionPolicy> = Api::all(client.clone());
    let effective = policies
        .get("limits")
        .await
        .expect("policy")
        .status
        .and_then(|s| s.effective)
        .expect("status.effective");
    assert_eq!(effective.generation, Some(1));

    // ... also for a server started while the policy is invalid.
    server.stop().await;
    let server = Running::start(&client, &dir.0).await;
    refused_for_limits(&pods, "restart-while-invalid").await;

    // A deleted policy stops applying.
    policies
        .delete("limits", &DeleteParams::default())
        .await
        .expect("delete policy");
    let mut admitted = false;
    for _ in 0..400 {
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        if pods.create(&dry, &pod("after-delete", false)).await.is_ok() {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(admitted, "the deleted policy is no longer enforced");
    server.stop().await;
}

/// A server whose caches have not synced answers with an error, so the API
/// server applies the webhook's failurePolicy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsynced_server_leaves_the_decision_to_failure_policy() {
    let (_api_server, client) = cluster().await;
    let dir = TempDir::new("unsynced");
    let engine = std::sync::Arc::new(
        Engine::new(vec![], ClusterView::default()).waiting_for(inputs::POLICIES),
    );
    let server = kubeforge_runtime::webhook::WebhookServer::builder()
        .addr("127.0.0.1:0".parse().expect("addr"))
        .cert_dir(dir.0.join("certs"))
        .hosts(vec!["127.0.0.1".into()])
        .handler("/validate", PolicyHandler::validating(engine.clone()))
        .bind()
        .await
        .expect("bind");
    let url = server.url("/validate");
    let ca = b64(server.ca_bundle());
    tokio::spawn(server.run(std::future::pending()));
    let config = |policy: &str| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "unsynced"},
            "webhooks": [{"name": "validate.policy.kubeforge.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": policy, "clientConfig": {"url": url, "caBundle": ca},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}]})
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    apply_config(&client, config("Fail")).await;
    let (code, msg) = status_of(
        pods.create(&PostParams::default(), &pod("fail", false))
            .await
            .expect_err("failurePolicy Fail refuses"),
    );
    assert_eq!(code, 500, "{msg}");
    assert!(
        msg.starts_with(
            "Internal error occurred: failed calling webhook \"validate.policy.kubeforge.dev\""
        ),
        "{msg}"
    );
    apply_config(&client, config("Ignore")).await;
    pods.create(&PostParams::default(), &pod("ignore", false))
        .await
        .expect("failurePolicy Ignore admits");
    // Once synced, it answers.
    engine.synced(inputs::POLICIES);
    apply_config(&client, config("Fail")).await;
    pods.create(&PostParams::default(), &pod("synced", false))
        .await
        .expect("a synced server with no policies admits");
}

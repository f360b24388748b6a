//! The Manager's default cache against the embedded API server: a cached
//! pod read back equals the server's pod minus exactly the pruned fields
//! (`metadata.managedFields`, the last-applied annotation), through list,
//! update and delete; and the same holds with compact caching off.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::eventually;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeforge_apiserver::ApiServer;
use kubeforge_runtime::{Action, Cache, LAST_APPLIED_ANNOTATION, Manager, ObjectRef};

/// A Deployment's pod as `kubectl apply` would leave it: last-applied
/// annotation, labels, an owner, probes, resources, env, a projected
/// volume, tolerations.
fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": "web", "pod-template-hash": "7c9d8f6b5d"},
            "annotations": {
                LAST_APPLIED_ANNOTATION: "{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}",
                "kubectl.kubernetes.io/restartedAt": "2026-11-30T06:00:00Z"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9d8f6b5d",
                "uid": "5f0c7d3e-9a51-4a4e-8d53-1c1f6c1b2e77", "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.example.com/team/web:1.27.3",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [
                    {"name": "LOG_LEVEL", "value": "info"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}
                ],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                "securityContext": {"runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}}
            }],
            "volumes": [{"name": "token", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
            ]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        }
    }))
    .expect("pod shape")
}

/// The server's object with the documented pruning applied by hand.
fn minus_pruned(mut p: Pod) -> Pod {
    p.metadata.managed_fields = None;
    if let Some(a) = p.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED_ANNOTATION);
    }
    p
}

fn key(name: &str) -> ObjectRef<Pod> {
    ObjectRef::new(name).within("default")
}

async fn cached_equals_server(cache: &Cache<Pod>, pods: &Api<Pod>, name: &str) {
    let server = minus_pruned(pods.get(name).await.expect("get from server"));
    let rv = server.metadata.resource_version.clone();
    eventually("cache caught up", Duration::from_secs(10), || async {
        cache
            .get(&key(name))
            .map(|p| p.metadata.resource_version.clone())
            == Some(rv.clone())
    })
    .await;
    let cached = cache.get(&key(name)).expect("cached");
    assert_eq!(
        *cached, server,
        "cached pod differs from the server's minus pruned fields"
    );
    assert!(cached.metadata.managed_fields.is_none());
    assert_eq!(
        cached.metadata.annotations.as_ref().map(|a| a.len()),
        Some(1),
        "only the last-applied annotation is dropped"
    );
}

async fn round_trip(compact: Option<bool>) {
    let server = ApiServer::in_memory().await;
    let client: Client = server.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams {
        field_manager: Some("kubectl-client-side-apply".into()),
        ..Default::default()
    };
    // One pod before the manager starts (arrives by list), one after (by
    // watch).
    pods.create(&pp, &pod("listed")).await.expect("create");
    let mut builder = Manager::builder(client.clone()).handle_signals(false);
    if let Some(c) = compact {
        builder = builder.compact_cache(c);
    }
    let mgr = builder.build();
    // A controller on pods too, so the cache also serves reconciles.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<Pod>::new()));
    let seen2 = seen.clone();
    mgr.controller::<Pod, _>("pods", ())
        .register(move |p: Arc<Pod>, _| {
            let seen = seen2.clone();
            async move {
                if let Ok(mut s) = seen.lock() {
                    s.push((*p).clone());
                }
                Ok(Action::await_change())
            }
        });
    let cache = mgr.store::<Pod>();
    let stop = mgr.shutdown_handle();
    let run = tokio::spawn(mgr.run());
    cache.wait_until_ready().await.expect("cache synced");
    assert_eq!(cache.is_compact(), compact.unwrap_or(true));
    cached_equals_server(&cache, &pods, "listed").await;

    pods.create(&pp, &pod("watched")).await.expect("create");
    cached_equals_server(&cache, &pods, "watched").await;

    // An update by another manager (a second managedFields entry) and a
    // status write.
    pods.patch(
        "watched",
        &PatchParams::apply("tester").force(),
        &Patch::Apply(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "watched", "labels": {"extra": "yes"}}
        })),
    )
    .await
    .expect("apply");
    pods.patch_status(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"phase": "Running", "podIP": "10.244.0.7"}})),
    )
    .await
    .expect("status");
    cached_equals_server(&cache, &pods, "watched").await;

    // Reads after the decoded copies were dropped decode equal objects.
    cache.trim();
    cached_equals_server(&cache, &pods, "listed").await;
    let mut names: Vec<String> = cache
        .state()
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["listed", "watched"]);
    assert_eq!(cache.keys().len(), 2);

    // The reconciler was handed cached objects: latest state, pruned.
    eventually(
        "reconciled the status write",
        Duration::from_secs(10),
        || async {
            seen.lock().is_ok_and(|s| {
                s.iter().any(|p| {
                    p.metadata.name.as_deref() == Some("watched")
                        && p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some("10.244.0.7")
                })
            })
        },
    )
    .await;
    assert!(
        seen.lock()
            .is_ok_and(|s| s.iter().all(|p| p.metadata.managed_fields.is_none()))
    );

    pods.delete("listed", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete");
    eventually(
        "deletion reached the cache",
        Duration::from_secs(10),
        || async { cache.get(&key("listed")).is_none() },
    )
    .await;
    assert!(!cache.contains(&key("listed")));
    assert_eq!(cache.len(), 1);

    stop.shutdown();
    run.await.expect("join").expect("manager run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_cache_returns_server_objects_minus_pruned_fields() {
    round_trip(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_cache_returns_the_same() {
    round_trip(Some(false)).await;
}

#[tokio::test]
async fn wait_until_ready_fails_when_the_manager_is_dropped_unsynced() {
    let server = ApiServer::in_memory().await;
    let mgr = Manager::builder(server.client())
        .handle_signals(false)
        .build();
    let cache = mgr.store::<Pod>();
    drop(mgr);
    let err = cache.wait_until_ready().await.err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("the cache of Pod.v1 was dropped before it synced")
    );
}

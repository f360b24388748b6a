//! The typical pod the runtime's cache benches measure: a Deployment's
//! running pod, as the server serves it after the kubelet's status write.

#![allow(dead_code)]

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};

pub fn typical_pod(i: usize) -> serde_json::Value {
    let hash = "7c9d8f6b5d";
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{hash}-{i:05}"),
            "namespace": "default",
            "generateName": format!("web-{hash}-"),
            "labels": {"app": "web", "pod-template-hash": hash, "tier": "frontend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T06:00:00Z"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{hash}"),
                "uid": "5f0c7d3e-9a51-4a4e-8d53-1c1f6c1b2e77", "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.example.com/team/web:1.27.3",
                "imagePullPolicy": "IfNotPresent",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [
                    {"name": "LOG_LEVEL", "value": "info"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                    {"name": "CACHE_URL", "value": "memcached.default.svc:11211"}
                ],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "livenessProbe": {"httpGet": {"path": "/livez", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
            }],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]}}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": format!("node-{:03}", i % 100),
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        }
    })
}

pub fn typical_status(i: usize) -> serde_json::Value {
    let t = "2026-11-30T06:01:02Z";
    let cond = |ty: &str| serde_json::json!({"type": ty, "status": "True", "lastProbeTime": null, "lastTransitionTime": t});
    serde_json::json!({"status": {
        "phase": "Running",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")],
        "hostIP": format!("10.0.{}.{}", i % 100 / 10, i % 10 + 1),
        "hostIPs": [{"ip": format!("10.0.{}.{}", i % 100 / 10, i % 10 + 1)}],
        "podIP": format!("10.244.{}.{}", i / 250, i % 250 + 2),
        "podIPs": [{"ip": format!("10.244.{}.{}", i / 250, i % 250 + 2)}],
        "startTime": t,
        "containerStatuses": [{
            "name": "web", "ready": true, "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": t}},
            "image": "registry.example.com/team/web:1.27.3",
            "imageID": "registry.example.com/team/web@sha256:4c2f1d0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e",
            "containerID": format!("containerd://{:064x}", i)
        }],
        "qosClass": "Burstable"
    }})
}

/// Create `n` typical pods in `default`, created by one field manager and
/// status-patched by another; returns the mean JSON size as served.
pub async fn create_typical_pods(pods: &Api<Pod>, n: usize) -> usize {
    let create = PostParams {
        field_manager: Some("kube-controller-manager".into()),
        ..Default::default()
    };
    let status = PatchParams {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    };
    let mut json_bytes = 0;
    for i in 0..n {
        let pod: Pod = serde_json::from_value(typical_pod(i)).expect("pod shape");
        let created = pods.create(&create, &pod).await.expect("create pod");
        let name = created.metadata.name.clone().unwrap_or_default();
        let done = pods
            .patch_status(&name, &status, &Patch::Merge(&typical_status(i)))
            .await
            .expect("status");
        json_bytes += serde_json::to_vec(&done).map(|v| v.len()).unwrap_or(0);
    }
    json_bytes / n.max(1)
}

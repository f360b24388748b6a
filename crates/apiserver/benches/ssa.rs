//! Server-side apply against merge patch (run with
//! `cargo bench -p kubeforge-apiserver --bench ssa`).
//!
//! An in-process server and kube-rs client; a typical Deployment (~2 KiB:
//! labels, annotations, two containers with env, ports, resources, probes and
//! volume mounts). N updates alternate the replicas, one container's image
//! and one env value between two states, sent either as a server-side apply
//! of the whole object (one field manager) or as a merge patch of the same
//! object (the same bytes as `application/merge-patch+json`), and as a
//! merge patch of only the changed fields. Reports µs per update and the
//! ratio SSA / merge patch. Rounds alternate between the modes; the best
//! round of each counts (the machine is shared).
//!
//! `N` (default 2000) and `ROUNDS` (default 5) can be set in the environment.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeforge_apiserver::ApiServer;
use serde_json::{Value, json};

fn deployment(name: &str, i: usize) -> Value {
    let (replicas, tag, level) = if i.is_multiple_of(2) {
        (3, "1.27.1", "info")
    } else {
        (4, "1.27.2", "debug")
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": {"app": "web", "tier": "frontend", "team": "payments"},
            "annotations": {"example.com/owner": "payments-team", "example.com/runbook": "https://runbooks.example.com/web"}
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "frontend"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": format!("registry.example.com/web:{tag}"),
                            "args": ["--port=8080", "--metrics-port=9090"],
                            "ports": [
                                {"name": "http", "containerPort": 8080},
                                {"name": "metrics", "containerPort": 9090}
                            ],
                            "env": [
                                {"name": "LOG_LEVEL", "value": level},
                                {"name": "DB_HOST", "value": "db.payments.svc"},
                                {"name": "DB_PORT", "value": "5432"},
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                            ],
                            "resources": {
                                "requests": {"cpu": "250m", "memory": "256Mi"},
                                "limits": {"cpu": "1", "memory": "512Mi"}
                            },
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                            "livenessProbe": {"httpGet": {"path": "/livez", "port": 8080}, "initialDelaySeconds": 10, "periodSeconds": 10},
                            "securityContext": {"runAsNonRoot": true, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false},
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}]
                        },
                        {
                            "name": "proxy",
                            "image": "registry.example.com/proxy:2.4.0",
                            "ports": [{"name": "https", "containerPort": 8443}],
                            "env": [
                                {"name": "UPSTREAM", "value": "127.0.0.1:8080"},
                                {"name": "TLS_DIR", "value": "/etc/tls"},
                                {"name": "LISTEN", "value": "0.0.0.0:8443"}
                            ],
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "64Mi"},
                                "limits": {"cpu": "200m", "memory": "128Mi"}
                            },
                            "volumeMounts": [{"name": "tls", "mountPath": "/etc/tls", "readOnly": true}]
                        }
                    ],
                    "serviceAccountName": "web",
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "web-config"}},
                        {"name": "tls", "secret": {"secretName": "web-tls"}}
                    ]
                }
            }
        }
    })
}

/// Only what changes between the two states.
fn delta(i: usize) -> Value {
    let d = deployment("web-merge", i);
    json!({"spec": {
        "replicas": d["spec"]["replicas"],
        "template": {"spec": {"containers": [
            {"name": "web", "image": d["spec"]["template"]["spec"]["containers"][0]["image"],
             "env": d["spec"]["template"]["spec"]["containers"][0]["env"]},
            d["spec"]["template"]["spec"]["containers"][1]
        ]}}
    }})
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Apply,
    MergeWhole,
    MergeDelta,
}

async fn round(api: &Api<Deployment>, mode: Mode, n: usize, start: usize) -> Duration {
    let apply = PatchParams::apply("bench");
    let merge = PatchParams {
        field_manager: Some("bench-merge".into()),
        ..Default::default()
    };
    let t = Instant::now();
    for i in start..start + n {
        let r = match mode {
            Mode::Apply => {
                api.patch("web-ssa", &apply, &Patch::Apply(deployment("web-ssa", i)))
                    .await
            }
            Mode::MergeWhole => {
                api.patch(
                    "web-merge",
                    &merge,
                    &Patch::Merge(deployment("web-merge", i)),
                )
                .await
            }
            Mode::MergeDelta => {
                api.patch("web-merge", &merge, &Patch::Merge(delta(i)))
                    .await
            }
        };
        r.expect("update");
    }
    t.elapsed()
}

fn main() {
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = ApiServer::in_memory().await;
        let api: Api<Deployment> = Api::default_namespaced(server.client());
        // One object per kind of writer, so managedFields stay typical: an
        // Apply manager for SSA, an Update manager (the creator) for merge.
        let size = serde_json::to_vec(&deployment("web-ssa", 0))
            .expect("json")
            .len();
        let created = api
            .patch(
                "web-ssa",
                &PatchParams::apply("bench"),
                &Patch::Apply(deployment("web-ssa", 0)),
            )
            .await
            .expect("create");
        let stored = serde_json::to_vec(&created).expect("json").len();
        api.create(
            &PostParams {
                field_manager: Some("bench-merge".into()),
                ..Default::default()
            },
            &serde_json::from_value(deployment("web-merge", 0)).expect("deployment"),
        )
        .await
        .expect("create");
        println!(
            "ssa      Deployment: {size} B applied, {stored} B stored with managedFields; N = {n} updates per round, {rounds} rounds"
        );
        let mut best = [Duration::MAX; 3];
        let modes = [Mode::Apply, Mode::MergeWhole, Mode::MergeDelta];
        // Warm up.
        for mode in modes {
            round(&api, mode, 200, 1).await;
        }
        for r in 0..rounds {
            for (k, mode) in modes.iter().enumerate() {
                // Alternate the start so every update changes the object.
                let d = round(&api, *mode, n, 1 + r * n).await;
                best[k] = best[k].min(d);
            }
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        let (a, m, md) = (us(best[0]), us(best[1]), us(best[2]));
        println!("ssa      server-side apply (whole object):      {a:8.1} µs/update");
        println!("ssa      merge patch (the same whole object):   {m:8.1} µs/update");
        println!("ssa      merge patch (changed fields only):     {md:8.1} µs/update");
        println!(
            "ssa      ratio SSA / merge patch: {:.2}x (whole object), {:.2}x (changed fields only); target <= 3x",
            a / m,
            a / md
        );
        for name in ["web-ssa", "web-merge"] {
            let got = api.get(name).await.expect("get");
            let managers: Vec<String> = got
                .metadata
                .managed_fields
                .unwrap_or_default()
                .into_iter()
                .map(|e| {
                    format!(
                        "{}/{}",
                        e.manager.unwrap_or_default(),
                        e.operation.unwrap_or_default()
                    )
                })
                .collect();
            println!("ssa      {name} managers at the end: {}", managers.join(", "));
        }
    });
}

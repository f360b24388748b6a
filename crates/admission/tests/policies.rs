//! The policy server end to end in one process: the embedded API server,
//! `PolicyServer` registered against it over HTTPS, AdmissionPolicy objects
//! applied with kube-rs and pods created with kube-rs.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeforge_admission::AdmissionPolicy;
use kubeforge_admission::server::{PolicyServer, ServerOptions};
use kubeforge_admission::signature::{Algorithm, SigningKey, data_key};
use serde_json::json;

async fn namespace(client: &kube::Client, name: &str, labels: serde_json::Value) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

fn pod(name: &str, image: &str, limits: bool, labels: serde_json::Value) -> Pod {
    let mut c = json!({"name": name, "image": image});
    if limits {
        c["resources"] = json!({"limits": {"cpu": "100m", "memory": "64Mi"}});
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"containers": [c]}}),
    )
    .expect("pod")
}

async fn refused(api: &Api<Pod>, p: &Pod) -> String {
    let (code, msg) = status_of(
        api.create(&PostParams::default(), p)
            .await
            .expect_err("refused"),
    );
    assert_eq!(code, 403, "{msg}");
    assert!(
        msg.starts_with("admission webhook \"validate.policy.kubeforge.dev\" denied the request: "),
        "{msg}"
    );
    msg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_end_to_end() {
    let (_server, client) = cluster().await;
    let dir = TempDir::new("policies");
    let opts = ServerOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        cert_dir: dir.0.join("certs"),
        register: true,
        ..ServerOptions::default()
    };
    let server = PolicyServer::start(client.clone(), &opts)
        .await
        .expect("policy server");
    tokio::time::timeout(Duration::from_secs(120), server.engine.until_ready())
        .await
        .expect("the policy server syncs");
    let metrics = server.metrics();
    tokio::spawn(server.run(std::future::pending()));

    namespace(&client, "prod", json!({"policy": "enforced"})).await;
    namespace(
        &client,
        "injected",
        json!({"policy": "enforced", "kubeforge.dev/inject": "enabled"}),
    )
    .await;
    let (ready, msg) = apply_policy(&client, "baseline", json!({
        "namespaceSelector": {"matchLabels": {"policy": "enforced"}},
        "requireResources": {},
        "images": {"disallowLatest": true, "allowedRegistries": ["docker.io", "registry.k8s.io"]},
        "defaultMetadata": {"labels": {"managed-by": "kubeforge"}},
        "sidecar": {"name": "proxy", "containers": [{"name": "proxy", "image": "docker.io/envoyproxy/envoy:v1.30.1",
            "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}}}], "volumes": [{"name": "proxy-config", "emptyDir": {}}]},
        "scheduling": [{"matchLabels": {"tier": "critical"}, "priorityClassName": "critical-apps",
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "critical", "effect": "NoSchedule"}]}],
    })).await;
    assert_eq!(
        (ready.as_str(), msg.as_str()),
        ("True", "the policy is in effect")
    );

    let prod: Api<Pod> = Api::namespaced(client.clone(), "prod");
    let msg = refused(&prod, &pod("nolimits", "nginx:1.27", false, json!({}))).await;
    assert!(
        msg.contains("container \"nolimits\" has no resource limits for cpu, memory"),
        "{msg}"
    );
    let ok = prod
        .create(
            &PostParams::default(),
            &pod("limited", "nginx:1.27", true, json!({})),
        )
        .await
        .expect("admitted with limits");
    assert_eq!(
        ok.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("managed-by"))
            .map(String::as_str),
        Some("kubeforge")
    );
    assert_eq!(
        ok.spec.as_ref().map(|s| s.containers.len()),
        Some(1),
        "no sidecar outside opted-in namespaces"
    );
    let msg = refused(&prod, &pod("x", "nginx:latest", true, json!({}))).await;
    assert!(
        msg.contains("container \"x\" uses image \"nginx:latest\": the :latest tag is not allowed"),
        "{msg}"
    );
    let msg = refused(
        &prod,
        &pod(
            "quay",
            "quay.io/prometheus/node-exporter:v1.8.0",
            true,
            json!({}),
        ),
    )
    .await;
    assert!(
        msg.contains("not in the allowed registries (docker.io, registry.k8s.io)"),
        "{msg}"
    );
    // Registries by distribution's rules: an uppercase first component is a host.
    let msg = refused(&prod, &pod("mirror", "Mirror/nginx:1.27", true, json!({}))).await;
    assert!(
        msg.contains("uses image \"Mirror/nginx:1.27\" from registry \"Mirror\""),
        "{msg}"
    );
    // Ephemeral containers (`kubectl debug`) are reviewed by the image rules
    // through their subresource; resources are not required of them.
    let debug = |image: &str| json!({"spec": {"ephemeralContainers": [{"name": "debugger", "image": image}]}});
    let (code, msg) = status_of(
        prod.patch_ephemeral_containers(
            "limited",
            &PatchParams::default(),
            &Patch::Strategic(debug("quay.io/debug/tools:1")),
        )
        .await
        .expect_err("refused"),
    );
    assert_eq!(code, 403, "{msg}");
    assert!(
        msg.contains(
            "container \"debugger\" uses image \"quay.io/debug/tools:1\" from registry \"quay.io\""
        ),
        "{msg}"
    );
    let debugged = prod
        .patch_ephemeral_containers(
            "limited",
            &PatchParams::default(),
            &Patch::Strategic(debug("busybox:1.36")),
        )
        .await
        .expect("an allowed debug image is admitted");
    assert_eq!(
        debugged
            .spec
            .and_then(|s| s.ephemeral_containers)
            .map(|l| l.len()),
        Some(1)
    );
    let critical = prod
        .create(
            &PostParams::default(),
            &pod("critical", "nginx:1.27", true, json!({"tier": "critical"})),
        )
        .await
        .expect("critical");
    let spec = critical.spec.expect("spec");
    assert_eq!(spec.priority_class_name.as_deref(), Some("critical-apps"));
    // The policy's toleration, beside the server's default not-ready and
    // unreachable ones (DefaultTolerationSeconds).
    let tolerations = spec.tolerations.unwrap_or_default();
    assert_eq!(
        tolerations
            .iter()
            .filter(|t| t.key.as_deref() == Some("dedicated"))
            .count(),
        1,
        "{tolerations:?}"
    );

    let injected: Api<Pod> = Api::namespaced(client.clone(), "injected");
    let p = injected
        .create(
            &PostParams::default(),
            &pod("app", "nginx:1.27", true, json!({})),
        )
        .await
        .expect("injected");
    let names: Vec<String> = p
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["app".to_string(), "proxy".to_string()]);
    assert_eq!(
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubeforge.dev/sidecar-injected"))
            .map(String::as_str),
        Some("proxy")
    );
    assert!(
        p.spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|v| v.iter().any(|v| v.name == "proxy-config"))
    );
    let out = injected
        .create(
            &PostParams::default(),
            &pod(
                "optout",
                "nginx:1.27",
                true,
                json!({"kubeforge.dev/inject": "false"}),
            ),
        )
        .await
        .expect("opted out");
    assert_eq!(out.spec.map(|s| s.containers.len()), Some(1));

    // Image signatures: signed passes, unsigned and re-signed are refused.
    namespace(&client, "secure", json!({"policy": "signed"})).await;
    let (trusted, _) = SigningKey::generate(Algorithm::EcdsaP256).expect("key");
    let (other, _) = SigningKey::generate(Algorithm::Ed25519).expect("key");
    let signed = format!("sha256:{}", "1a".repeat(32));
    let unsigned = format!("sha256:{}", "2b".repeat(32));
    let resigned = format!("sha256:{}", "3c".repeat(32));
    let sigs: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "image-signatures", "labels": {"kubeforge.dev/image-signatures": "true"}},
        "data": {data_key(&signed): trusted.sign_digest(&signed).expect("sign"), data_key(&resigned): other.sign_digest(&resigned).expect("sign")}})).expect("cm");
    // Signatures count only in the server's own namespace: the same
    // ConfigMap in the pods' namespace is ignored.
    namespace(&client, "kubeforge-system", json!({})).await;
    let elsewhere = format!("sha256:{}", "4d".repeat(32));
    let foreign: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "image-signatures", "labels": {"kubeforge.dev/image-signatures": "true"}},
        "data": {data_key(&elsewhere): trusted.sign_digest(&elsewhere).expect("sign")}})).expect("cm");
    Api::<ConfigMap>::namespaced(client.clone(), "secure")
        .create(&PostParams::default(), &foreign)
        .await
        .expect("signatures elsewhere");
    Api::<ConfigMap>::namespaced(client.clone(), "kubeforge-system")
        .create(&PostParams::default(), &sigs)
        .await
        .expect("signatures");
    let (ready, _) = apply_policy(&client, "signed-images", json!({
        "namespaceSelector": {"matchLabels": {"policy": "signed"}},
        "imageSignatures": {"publicKeys": [{"name": "release", "key": trusted.public_key_pem()}]},
    })).await;
    assert_eq!(ready, "True");
    let secure: Api<Pod> = Api::namespaced(client.clone(), "secure");
    for _ in 0..100 {
        // The signature cache follows a watch: wait until it has the ConfigMap.
        if secure
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &pod(
                    "probe",
                    &format!("docker.io/library/app@{signed}"),
                    false,
                    json!({}),
                ),
            )
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    secure
        .create(
            &PostParams::default(),
            &pod(
                "signed",
                &format!("docker.io/library/app@{signed}"),
                false,
                json!({}),
            ),
        )
        .await
        .expect("signed image admitted");
    let msg = refused(
        &secure,
        &pod(
            "unsigned",
            &format!("docker.io/library/app@{unsigned}"),
            false,
            json!({}),
        ),
    )
    .await;
    assert!(
        msg.contains("has no signature from the trusted keys (release)"),
        "{msg}"
    );
    let msg = refused(
        &secure,
        &pod(
            "resigned",
            &format!("docker.io/library/app@{resigned}"),
            false,
            json!({}),
        ),
    )
    .await;
    assert!(
        msg.contains("has no valid signature from the trusted keys (release)"),
        "{msg}"
    );
    let msg = refused(
        &secure,
        &pod(
            "foreign",
            &format!("docker.io/library/app@{elsewhere}"),
            false,
            json!({}),
        ),
    )
    .await;
    assert!(
        msg.contains("has no signature from the trusted keys (release)"),
        "a signature outside the server's namespace does not count: {msg}"
    );
    let msg = refused(
        &secure,
        &pod("tagged", "docker.io/library/app:1.0", false, json!({})),
    )
    .await;
    assert!(msg.contains("must be referenced by digest"), "{msg}");

    // Warn admits; Audit admits and records.
    namespace(&client, "dev", json!({"policy": "warned"})).await;
    namespace(&client, "audited", json!({"policy": "audited"})).await;
    apply_policy(&client, "warn-latest", json!({"mode": "Warn", "namespaceSelector": {"matchLabels": {"policy": "warned"}}, "images": {}})).await;
    apply_policy(&client, "audit-limits", json!({"mode": "Audit", "namespaceSelector": {"matchLabels": {"policy": "audited"}}, "requireResources": {}})).await;
    Api::<Pod>::namespaced(client.clone(), "dev")
        .create(
            &PostParams::default(),
            &pod("latest", "nginx:latest", false, json!({})),
        )
        .await
        .expect("Warn admits");
    Api::<Pod>::namespaced(client.clone(), "audited")
        .create(
            &PostParams::default(),
            &pod("unbounded", "nginx:1.27", false, json!({})),
        )
        .await
        .expect("Audit admits");
    let policies: Api<AdmissionPolicy> = Api::all(client.clone());
    let mut report = None;
    for _ in 0..200 {
        let p = policies.get("audit-limits").await.expect("get");
        if let Some(s) = p.status.filter(|s| !s.audit.is_empty()) {
            report = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let report = report.expect("the audit result is written to the policy status");
    assert_eq!(report.audit_total, Some(1));
    assert_eq!(
        (
            report.audit[0].namespace.as_str(),
            report.audit[0].name.as_str()
        ),
        ("audited", "unbounded")
    );
    assert!(
        report.audit[0]
            .message
            .contains("container \"unbounded\" has no resource limits")
    );

    // Invalid policies are reported naming the field and change nothing.
    let (ready, msg) = apply_policy(
        &client,
        "broken",
        json!({"images": {"allowedRegistries": ["https://docker.io"]}}),
    )
    .await;
    assert_eq!(ready, "False");
    assert!(
        msg.starts_with("spec.images.allowedRegistries[0]: "),
        "{msg}"
    );
    prod.create(
        &PostParams::default(),
        &pod("still-fine", "nginx:1.27", true, json!({})),
    )
    .await
    .expect("the broken policy is not applied");

    // Hot update: dropping the requirement takes effect without a restart.
    apply_policy(
        &client,
        "baseline",
        json!({"namespaceSelector": {"matchLabels": {"policy": "enforced"}}}),
    )
    .await;
    prod.create(
        &PostParams::default(),
        &pod("nolimits", "nginx:1.27", false, json!({})),
    )
    .await
    .expect("admitted after the policy changed");

    let text = metrics.encode();
    assert!(
        text.contains(
            "controller_runtime_webhook_requests_total{webhook=\"/validate\",code=\"200\"}"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "controller_runtime_webhook_latency_seconds_bucket{le=\"0.005\",webhook=\"/mutate\"}"
        ) || text.contains(
            "controller_runtime_webhook_latency_seconds_bucket{webhook=\"/mutate\",le=\"0.005\"}"
        ),
        "{text}"
    );
    assert!(
        text.contains("controller_runtime_webhook_requests_in_flight{webhook=\"/validate\"} 0"),
        "{text}"
    );
}

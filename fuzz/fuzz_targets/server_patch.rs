//! The three patch types and server-side apply through the server's real
//! PATCH handling (json-patch, merge patch, strategic merge patch with the
//! built-in kinds' patch strategies, apply with field ownership and
//! conflicts), then defaulting, validation and the strategies of each kind,
//! against fixture objects (a CRD-defined Widget, ConfigMap, Service,
//! Deployment, Pod, Node) created once per process; every patch is a dry
//! run, so the fixtures never change and each input replays alone.
//! Input: one byte choosing the object and subresource, one choosing the
//! patch type and options, then the patch body.
#![no_main]
use bytes::Bytes;
use http::Method;
use kubeforge_fuzz::{Req, runtime, send, shared_server};
use libfuzzer_sys::fuzz_target;

const TARGETS: [&str; 12] = [
    "/apis/fuzz.example.com/v1/namespaces/default/widgets/w",
    "/apis/fuzz.example.com/v1/namespaces/default/widgets/w/status",
    "/apis/fuzz.example.com/v1/namespaces/default/widgets/w/scale",
    "/api/v1/namespaces/default/configmaps/cm",
    "/api/v1/namespaces/default/services/svc",
    "/apis/apps/v1/namespaces/default/deployments/dep",
    "/apis/apps/v1/namespaces/default/deployments/dep/scale",
    "/apis/apps/v1/namespaces/default/deployments/dep/status",
    "/api/v1/namespaces/default/pods/pod",
    "/api/v1/nodes/node-1",
    "/api/v1/namespaces/default",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.fuzz.example.com",
];

const TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

fuzz_target!(|data: &[u8]| {
    let [target, kind, body @ ..] = data else {
        return;
    };
    let path = TARGETS[*target as usize % TARGETS.len()];
    let ct = TYPES[(*kind & 3) as usize];
    let mut query = String::from("?dryRun=All");
    query.push_str(if kind & 4 != 0 {
        "&fieldManager=bob"
    } else {
        "&fieldManager=fixture"
    });
    if kind & 8 != 0 {
        query.push_str("&force=true");
    }
    if kind & 16 != 0 {
        query.push_str("&fieldValidation=Strict");
    }
    let uri = format!("{path}{query}");
    let server = shared_server();
    runtime().block_on(async {
        let _ = send(
            server,
            Req {
                method: Method::PATCH,
                uri: &uri,
                content_type: Some(ct),
                headers: &[],
                body: Bytes::copy_from_slice(body),
            },
        )
        .await;
    });
});

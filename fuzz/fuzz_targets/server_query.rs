//! Query parameters through the server's real GET handling: list and watch
//! parameters (`labelSelector`, `fieldSelector`, `limit`, `continue`,
//! `resourceVersion`, `resourceVersionMatch`, `watch`, `timeoutSeconds`,
//! `allowWatchBookmarks`, `sendInitialEvents`), Table and metadata-only
//! output, on collections and single objects of the fixture server.
//! Input: one byte choosing the path and Accept header, then the query
//! string; a `\0` in it ends the query and the bytes after it are sent as
//! a `continue` token (base64url-encoded by the harness, as the server
//! encodes its own).
#![no_main]
use base64::Engine;
use bytes::Bytes;
use http::Method;
use kubeforge_fuzz::{Req, runtime, send, shared_server};
use libfuzzer_sys::fuzz_target;

const PATHS: [&str; 10] = [
    "/api/v1/namespaces/default/configmaps",
    "/api/v1/pods",
    "/api/v1/nodes",
    "/apis/fuzz.example.com/v1/namespaces/default/widgets",
    "/apis/apps/v1/deployments",
    "/api/v1/namespaces",
    "/api/v1/namespaces/default/services/svc",
    "/apis/fuzz.example.com/v1/widgets",
    "/api/v1/events",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
];

const ACCEPT: [&str; 4] = [
    "application/json",
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
    "application/yaml",
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let (query, token) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let Ok(query) = std::str::from_utf8(query) else {
        return;
    };
    let mut q = query.to_string();
    if let Some(t) = token {
        let t = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(t);
        if !q.is_empty() {
            q.push('&');
        }
        q.push_str("continue=");
        q.push_str(&t);
    }
    let path = PATHS[sel as usize % PATHS.len()];
    let accept = ACCEPT[(sel as usize / PATHS.len()) % ACCEPT.len()];
    let uri = if q.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{q}")
    };
    let server = shared_server();
    runtime().block_on(async {
        let _ = send(
            server,
            Req {
                method: Method::GET,
                uri: &uri,
                content_type: None,
                headers: &[("accept", accept)],
                body: Bytes::new(),
            },
        )
        .await;
    });
});

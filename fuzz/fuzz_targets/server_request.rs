//! Whole requests through the server's real handling (routing, content
//! negotiation, decoding, admission, strategies, validation, the store),
//! on a fresh in-memory server per input so that every input replays alone.
//! Input: up to 8 requests in text form (`METHOD /path?query`, header
//! lines, an empty line, the body), separated by `\n@@@\n`: the sequence
//! can create an object and then update, patch or delete it. No answer may
//! be a 500, and no request may panic.
#![no_main]
use kubeforge_apiserver::ApiServer;
use kubeforge_fuzz::{parse_request, runtime, send_text, split};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let requests: Vec<_> = split(data, b"\n@@@\n")
        .into_iter()
        .take(8)
        .filter_map(parse_request)
        .collect();
    if requests.is_empty() {
        return;
    }
    runtime().block_on(async {
        let server = ApiServer::in_memory().await;
        for r in &requests {
            let _ = send_text(&server, r).await;
        }
        // The server still answers.
        let probe = kubeforge_fuzz::TextRequest {
            method: http::Method::GET,
            uri: "/api/v1/namespaces/default/configmaps".into(),
            headers: Vec::new(),
            body: bytes::Bytes::new(),
        };
        let a = send_text(&server, &probe).await.expect("probe request");
        assert!(
            a.status.is_success(),
            "list after the sequence: {}",
            a.status
        );
    });
});

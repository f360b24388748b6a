//! Request bodies of every content type: the Content-Type classification
//! and the decoder behind it (JSON, YAML, Kubernetes protobuf, patches).
//! Input: the first byte picks the content type, the rest is the body.
#![no_main]
use http::{HeaderMap, HeaderValue, header};
use kubeforge_apiserver::codec::{self, BodyType};
use libfuzzer_sys::fuzz_target;

const TYPES: [&str; 9] = [
    "application/json",
    "application/yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json; charset=utf-8",
    "text/yaml",
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(TYPES[sel as usize % TYPES.len()]),
    );
    let Ok(ty) = codec::body_type(&headers) else {
        return;
    };
    if let Ok(v) = codec::decode(body, ty) {
        // What decodes re-encodes (as every response does), and the encoding
        // decodes again. Not compared: serde_json's float parsing may differ
        // by one ulp, and YAML may nest deeper than JSON's recursion limit.
        let again = serde_json::to_vec(&v).expect("a decoded value encodes");
        if ty != BodyType::Protobuf {
            let _ = codec::decode(&again, BodyType::Json);
        }
    }
});

//! The Kubernetes protobuf decoder (`application/vnd.kubernetes.protobuf`
//! bodies, as kubectl 1.32+ sends typed creates): the `k8s\0` envelope, the
//! `runtime.Unknown` wrapper and the typed message tables behind it.
//! Input: the request body.
#![no_main]
use kubeforge_apiserver::codec::{self, BodyType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = codec::decode(data, BodyType::Protobuf) {
        serde_json::to_vec(&v).expect("a decoded object encodes as JSON");
    }
});

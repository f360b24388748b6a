//! Bearer tokens as the API server's authenticator reads them, from
//! anyone on the network: ServiceAccount JWTs of both kinds (TokenRequest
//! and legacy Secret tokens) through `TokenIssuer::verify` and
//! `verify_legacy`. Input: the token text.
#![no_main]
use std::sync::OnceLock;

use kubeforge_apiserver::TokenIssuer;
use libfuzzer_sys::fuzz_target;

fn issuer() -> &'static TokenIssuer {
    static ISSUER: OnceLock<TokenIssuer> = OnceLock::new();
    ISSUER.get_or_init(|| {
        TokenIssuer::generate("https://kubernetes.default.svc.cluster.local")
            .expect("a signing key")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };
    let i = issuer();
    let _ = i.verify(token, &[]);
    let _ = i.verify(token, &["vault".to_string()]);
    let _ = i.verify_legacy(token);
});

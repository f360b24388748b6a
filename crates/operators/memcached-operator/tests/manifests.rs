//! `config/` holds what `make manifests` renders from the code (the CRD
//! from the type, the ClusterRole from the controller's declarations, the
//! leader election Role): this test fails when they drift. Regenerate with
//! `make manifests`.

#![allow(missing_docs)]

use std::path::Path;

#[tokio::test]
async fn config_is_what_make_manifests_renders() {
    // The manager is only asked what it needs; this client never connects
    // (it needs a runtime all the same).
    let offline = kube::Config::new("https://127.0.0.1:1".parse().expect("a URL"));
    let client = kube::Client::try_from(offline).expect("a client");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let stale =
        kubeforge_runtime::manifests::stale(&config, &memcached_operator::manifests(client))
            .expect("render the manifests");
    assert!(
        stale.is_empty(),
        "{stale:?} differ from the code: run `make manifests` in crates/operators/memcached-operator"
    );
}

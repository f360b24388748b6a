//! The official Python client (`kubernetes` package) against `kubeforge up`:
//! CRUD, strategic merge patch, scale, watch, a PodDisruptionBudget refusing
//! an eviction, ReplicationControllers, CRDs and custom objects, the
//! dynamic client, a ServiceAccount token from the TokenRequest API limited
//! by RBAC, TokenReview. The test fails when python3 or the package is
//! missing.

mod common;

use std::process::Command;

#[test]
fn python_client() {
    let c = common::Cluster::start(&[]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&c.kubeconfig)
        .output()
        .expect("python3 must be installed (scripts/test-all.sh installs the kubernetes package)");
    assert!(
        out.status.success(),
        "python client checks failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    c.stop();
}

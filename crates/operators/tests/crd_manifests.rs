//! The CRDs committed under `config/crd/bases/` are the ones the Rust types
//! generate: this test fails when they drift. Regenerate with
//! `UPDATE_CRDS=1 cargo test -p kubeforge-operators --test crd_manifests`
//! (or `kubeforge operator crd <name>`).

use std::path::PathBuf;

fn bases() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd/bases")
}

#[test]
fn committed_crds_match_the_types() {
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let mut stale = Vec::new();
    for (file, crd) in kubeforge_operators::crds() {
        let want = kubeforge_operators::crd_yaml(&crd).expect("render CRD");
        let path = bases().join(file);
        if update {
            std::fs::write(&path, &want).expect("write CRD");
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from the Rust types: run UPDATE_CRDS=1 cargo test -p kubeforge-operators --test crd_manifests"
    );
}

/// `config/rbac/role.yaml` is what the controllers declare: regenerate
/// with `UPDATE_CRDS=1` as for the CRDs.
#[tokio::test]
async fn committed_role_matches_the_controllers_declarations() {
    let offline = kube::Config::new("http://127.0.0.1:1".parse().expect("URL"));
    let client = kube::Client::try_from(offline).expect("client");
    let role = kubeforge_operators::cluster_role(client);
    let want = kubeforge_runtime::manifests::yaml_stream("the ClusterRole", &[role])
        .expect("render the role")
        .replacen(
            kubeforge_runtime::manifests::HEADER,
            "# Generated from the controllers' declarations (UPDATE_CRDS=1 cargo test -p kubeforge-operators --test crd_manifests); do not edit.",
            1,
        );
    let path = bases().join("../../rbac/role.yaml");
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::write(&path, &want).expect("write the role");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        have, want,
        "config/rbac/role.yaml differs from the controllers' declarations: run UPDATE_CRDS=1 cargo test -p kubeforge-operators --test crd_manifests"
    );
}

#[test]
fn crds_carry_the_validation_the_issue_asks_for() {
    let text = |name: &str| {
        let crd = kubeforge_operators::crd_by_name(name).expect("known CRD");
        serde_json::to_value(crd).expect("CRD as JSON")
    };
    let mc = text("memcached");
    let v = &mc["spec"]["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    let size = &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"];
    assert_eq!(size["minimum"].as_f64(), Some(1.0));
    assert_eq!(size["maximum"].as_f64(), Some(5.0));
    let port = &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["containerPort"];
    assert_eq!(port["default"], 11211);
    assert!(v["subresources"]["status"].is_object());
    let cols: Vec<&str> = v["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(cols, ["Size", "Ready", "Age"]);

    let ct = text("ct");
    assert_eq!(ct["spec"]["names"]["shortNames"][0], "ct");
    let v = &ct["spec"]["versions"][0];
    let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert!(
        spec["cronSpec"]["pattern"]
            .as_str()
            .is_some_and(|p| p.starts_with('^'))
    );
    assert_eq!(
        spec["concurrencyPolicy"]["enum"],
        serde_json::json!(["Allow", "Forbid", "Replace"])
    );
    assert!(kubeforge_operators::crd_by_name("nope").is_err());
}

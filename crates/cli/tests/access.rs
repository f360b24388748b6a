//! `kubeforge up` is secure by default, checked with the real kubectl (every
//! version 1.27–1.33) and curl: the kubeconfig is HTTPS with a client
//! certificate in `system:masters`, a request without credentials is 401,
//! RBAC decides for everyone else, and plain HTTP is refused off loopback.

mod common;

use std::process::Command;

use common::{Cluster, default_kubectl, versioned_kubectl};

fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn the_kubeconfig_is_https_with_an_administrator_certificate() {
    let c = Cluster::start(&["--memory"]);
    assert!(c.url.starts_with("https://127.0.0.1:"), "{}", c.url);
    let config = std::fs::read_to_string(&c.kubeconfig).expect("kubeconfig");
    assert!(config.contains("server: https://"), "{config}");
    assert!(config.contains("client-certificate-data: "), "{config}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&c.kubeconfig)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the kubeconfig holds a key: owner-only");
    }

    // whoami exists from 1.28 on v1 (1.27 asks v1beta1 only, which 1.33
    // servers do not serve either).
    for minor in 28..=33 {
        let who = c.ok(&versioned_kubectl(minor), &["auth", "whoami"]);
        let r = rows(&who);
        assert!(
            r.contains(&vec!["Username".into(), "kubernetes-admin".into()]),
            "1.{minor}: {who}"
        );
        assert!(
            r.contains(&vec![
                "Groups".into(),
                "[system:masters".into(),
                "system:authenticated]".into()
            ]),
            "1.{minor}: {who}"
        );
    }
    for minor in 27..=33 {
        c.ok(&versioned_kubectl(minor), &["get", "ns", "default"]);
    }
    let out = c.kubectl(&versioned_kubectl(27), &["auth", "whoami"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the selfsubjectreviews API is not enabled in the cluster"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Without credentials: kube's 401, nothing more.
    let out = Command::new("curl")
        .args([
            "-sk",
            "-w",
            "\n%{http_code}",
            &format!("{}/api/v1/namespaces", c.url),
        ])
        .output()
        .expect("curl");
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(body.ends_with("\n401"), "{body}");
    assert!(
        body.starts_with(r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#),
        "{body}"
    );

    // Anyone else gets what RBAC grants (asked by impersonating a user).
    c.ok(&default_kubectl(), &["create", "namespace", "team"]);
    let out = c.kubectl(
        &default_kubectl(),
        &["auth", "can-i", "list", "pods", "--as", "dev", "-n", "team"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    c.ok(
        &default_kubectl(),
        &[
            "create",
            "rolebinding",
            "dev-edit",
            "--clusterrole=cluster-admin",
            "--user=dev",
            "-n",
            "team",
        ],
    );
    let out = c.kubectl(
        &default_kubectl(),
        &["auth", "can-i", "list", "pods", "--as", "dev", "-n", "team"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");
    let out = c.kubectl(
        &default_kubectl(),
        &[
            "auth", "can-i", "list", "pods", "--as", "dev", "-n", "default",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    c.stop();
}

#[test]
fn plain_http_is_refused_off_loopback() {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["up", "--memory", "--insecure-http", "--listen", "0.0.0.0:0"])
        .output()
        .expect("run kubeforge");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve plain HTTP without authentication on 0.0.0.0:0"),
        "{err}"
    );
    // On loopback it is allowed, with a warning.
    let c = Cluster::start(&["--memory", "--insecure-http"]);
    assert!(c.url.starts_with("http://127.0.0.1:"), "{}", c.url);
    c.ok(&default_kubectl(), &["get", "ns", "default"]);
    c.stop();
}

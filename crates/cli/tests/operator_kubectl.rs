//! The Memcached operator as a user drives it: `kubeforge up`, the
//! kustomize manifests and samples applied with the real kubectl, and
//! `kubeforge operator memcached` running beside it as its own process.
//! (No Deployment controller or kubelet runs yet, so the Deployment gets no
//! pods: the checks stop at what the operator itself does.)

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Cluster, default_kubectl};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn kustomize_apply_samples_resize_delete() {
    let kubectl = default_kubectl();
    let cluster = Cluster::start(&["--memory"]);

    // config/default renders and applies (CRDs, RBAC, the manager Deployment).
    let rendered = {
        let out = Command::new(&kubectl)
            .arg("kustomize")
            .arg(repo().join("config/default"))
            .output()
            .expect("kubectl kustomize");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let out = cluster.kubectl_stdin(&kubectl, &["apply", "-f", "-"], Some(&rendered));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let applied = String::from_utf8_lossy(&out.stdout).into_owned();
    for what in [
        "customresourcedefinition.apiextensions.k8s.io/memcacheds.cache.example.com",
        "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com",
        "clusterrole.rbac.authorization.k8s.io/kubeforge-operators-manager-role",
        "deployment.apps/kubeforge-operators-controller-manager",
    ] {
        assert!(applied.contains(what), "{what} in {applied}");
    }

    let operator = Operator(
        Command::new(env!("CARGO_BIN_EXE_kubeforge"))
            .args(["operator", "memcached", "--kubeconfig"])
            .arg(&cluster.kubeconfig)
            .env("MEMCACHED_IMAGE", "example.test/memcached:1.6")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the operator"),
    );

    // The Memcached sample is in the operator's own project, as
    // `kubeforge create api` wrote it (a config/samples kustomization).
    let samples = repo().join("crates/operators/memcached-operator/config/samples");
    let samples = samples.to_str().expect("utf-8 path");
    cluster.ok(&kubectl, &["apply", "-k", samples]);

    let get = |args: &[&str]| {
        let out = cluster.kubectl(&kubectl, args);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_for("a Deployment with 3 replicas", || {
        get(&[
            "get",
            "deployment",
            "memcached-sample",
            "-o",
            "jsonpath={.spec.replicas}",
        ]) == "3"
    });
    let owner = get(&[
        "get",
        "deployment",
        "memcached-sample",
        "-o",
        "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
    ]);
    assert_eq!(owner, "Memcached/memcached-sample");
    let image = get(&[
        "get",
        "deployment",
        "memcached-sample",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "example.test/memcached:1.6");
    // `up` runs the workload controllers and simulated nodes, so the pods
    // really run and the Deployment reports them available.
    wait_for("Available=True", || {
        get(&[
            "get",
            "memcached",
            "memcached-sample",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Available")].status}"#,
        ]) == "True"
    });
    // The printer columns, READY evaluated by the server's JSONPath filter.
    let table = get(&["get", "memcached", "memcached-sample"]);
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        table.contains("SIZE") && table.contains("READY") && table.contains("AGE"),
        "{table}"
    );
    assert!(
        row.split_whitespace().nth(1) == Some("3") && row.split_whitespace().nth(2) == Some("True"),
        "{table}"
    );

    // Resize.
    cluster.ok(
        &kubectl,
        &[
            "patch",
            "memcached",
            "memcached-sample",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":1}}"#,
        ],
    );
    wait_for("the Deployment scaled to 1", || {
        get(&[
            "get",
            "deployment",
            "memcached-sample",
            "-o",
            "jsonpath={.spec.replicas}",
        ]) == "1"
    });

    // Delete. A second finalizer (the user's own) keeps the object around
    // after the operator's cleanup, so `kubectl describe` can show it.
    cluster.ok(
        &kubectl,
        &[
            "patch",
            "memcached",
            "memcached-sample",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/hold"}]"#,
        ],
    );
    cluster.ok(
        &kubectl,
        &["delete", "memcached", "memcached-sample", "--wait=false"],
    );
    wait_for("the operator's finalizer removed", || {
        get(&[
            "get",
            "memcached",
            "memcached-sample",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ]) == r#"["example.com/hold"]"#
    });
    let describe = cluster.ok(&kubectl, &["describe", "memcached", "memcached-sample"]);
    assert!(describe.contains("Warning"), "{describe}");
    assert!(describe.contains("Deleting"), "{describe}");
    assert!(describe.contains("is being deleted"), "{describe}");
    assert!(describe.contains("Finalizing"), "{describe}");
    cluster.ok(
        &kubectl,
        &[
            "patch",
            "memcached",
            "memcached-sample",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    wait_for("the Memcached gone", || {
        !cluster
            .kubectl(&kubectl, &["get", "memcached", "memcached-sample"])
            .status
            .success()
    });
    wait_for("the Deployment garbage-collected", || {
        !cluster
            .kubectl(&kubectl, &["get", "deployment", "memcached-sample"])
            .status
            .success()
    });

    // Bad input, refused by the schema with the field named.
    for (doc, field) in [
        (
            "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: bad\nspec:\n  size: 0\n",
            "spec.size",
        ),
        (
            "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: bad\nspec:\n  size: 100\n",
            "spec.size",
        ),
        (
            "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: bad\nspec:\n  cronSpec: \"61 * * * *\"\n  image: busybox\n",
            "spec.cronSpec",
        ),
    ] {
        let out = cluster.kubectl_stdin(&kubectl, &["apply", "-f", "-"], Some(doc));
        assert!(!out.status.success(), "{doc} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(field), "{field} named in: {err}");
    }
    drop(operator);
    cluster.stop();
}

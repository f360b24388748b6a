//! Server-side apply through the real `kubectl` against a loopback server:
//! the null-labels report (`labels:` left empty in a manifest keeps
//! another manager's label) and `kubectl scale` followed by
//! `kubectl apply --server-side` of other replicas, which conflicts on the
//! scale subresource's manager as on kube-apiserver.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kubeforge_apiserver::{ApiServer, kubeconfig_yaml};

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("kubeforge-ssa-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Serve on a loopback port and write a kubeconfig for it.
async fn serve(dir: &Path) -> PathBuf {
    let server = ApiServer::in_memory().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.serve(listener, std::future::pending()));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_yaml(addr)).expect("kubeconfig");
    kubeconfig
}

/// Run kubectl off the runtime's threads (the server runs on them).
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .output()
            .expect("run kubectl")
    })
    .await
    .expect("join")
}

async fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args).await;
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_with_empty_labels_keeps_another_managers_label() {
    let dir = TempDir::new("labels");
    let kc = serve(&dir.0).await;
    let alice = dir.0.join("alice.yaml");
    std::fs::write(
        &alice,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\n    team: a\ndata:\n  k: v\n",
    )
    .expect("write");
    let bob = dir.0.join("bob.yaml");
    std::fs::write(
        &bob,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\ndata:\n  k: v\n",
    )
    .expect("write");
    let f = |p: &Path| p.to_string_lossy().into_owned();
    ok(
        &kc,
        &[
            "apply",
            "--server-side",
            "--field-manager=alice",
            "-f",
            &f(&alice),
        ],
    )
    .await;
    ok(
        &kc,
        &[
            "apply",
            "--server-side",
            "--field-manager=bob",
            "-f",
            &f(&bob),
        ],
    )
    .await;
    let team = ok(
        &kc,
        &[
            "get",
            "configmap",
            "c",
            "-o",
            "jsonpath={.metadata.labels.team}",
        ],
    )
    .await;
    assert_eq!(team, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_then_server_side_apply_of_other_replicas_conflicts() {
    let dir = TempDir::new("scale");
    let kc = serve(&dir.0).await;
    let manifest = |replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: nginx\n        image: nginx\n"
        )
    };
    let file = dir.0.join("web.yaml");
    let path = file.to_string_lossy().into_owned();
    std::fs::write(&file, manifest(2)).expect("write");
    ok(&kc, &["apply", "--server-side", "-f", &path]).await;
    ok(&kc, &["scale", "deployment", "web", "--replicas=5"]).await;
    std::fs::write(&file, manifest(3)).expect("write");
    let out = kubectl(&kc, &["apply", "--server-side", "-f", &path]).await;
    assert!(!out.status.success(), "apply of other replicas succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Apply failed with 1 conflict: conflict with \"kubectl")
            && stderr.contains("with subresource \"scale\" using apps/v1: .spec.replicas"),
        "{stderr}"
    );
    let replicas = ok(
        &kc,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )
    .await;
    assert_eq!(replicas, "5");
    // --force-conflicts takes replicas back.
    ok(
        &kc,
        &["apply", "--server-side", "--force-conflicts", "-f", &path],
    )
    .await;
    let replicas = ok(
        &kc,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )
    .await;
    assert_eq!(replicas, "3");
}

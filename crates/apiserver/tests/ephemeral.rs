//! Ephemeral containers and the namespace name label, driven by real
//! clients: kube-rs, and the real `kubectl debug` (a strategic merge patch
//! of `pods/NAME/ephemeralcontainers`) against the loopback listener.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

/// The server on a loopback port, a kube-rs client and a kubeconfig in `dir`.
async fn serve(server: &ApiServer, dir: &Path) -> (Client, PathBuf) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: k\n  context:\n    cluster: k\n    user: u\n    namespace: default\ncurrent-context: k\nusers:\n- name: u\n  user: {{}}\n"
        ),
    )
    .expect("kubeconfig");
    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    (Client::try_from(config).expect("client"), kubeconfig)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("kubeforge-eph-{tag}-{}", std::process::id()));
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

fn api_error(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("expected an API error, got {other}"),
    }
}

fn debugger(name: &str) -> serde_json::Value {
    json!({"name": name, "image": "busybox:1.36", "stdin": true, "tty": true, "targetContainerName": "app"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_containers_only_through_their_subresource() {
    let server = ApiServer::in_memory().await;
    let dir = TempDir::new("sub");
    let (client, kubeconfig) = serve(&server, &dir.0).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Discovery lists the subresource.
    let resources = client
        .list_core_api_resources("v1")
        .await
        .expect("discovery");
    let sub = resources
        .resources
        .iter()
        .find(|r| r.name == "pods/ephemeralcontainers")
        .expect("pods/ephemeralcontainers is listed");
    assert_eq!(
        (sub.kind.as_str(), sub.verbs.clone()),
        (
            "Pod",
            vec!["get".to_string(), "patch".into(), "update".into()]
        )
    );

    // A plain create carrying one is refused.
    let with: Pod = serde_json::from_value(json!({"metadata": {"name": "with"}, "spec": {
        "containers": [{"name": "app", "image": "nginx:1.27"}],
        "ephemeralContainers": [debugger("d")]}}))
    .expect("pod");
    let (code, reason, msg) = api_error(
        pods.create(&PostParams::default(), &with)
            .await
            .expect_err("refused"),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        msg,
        "Pod \"with\" is invalid: spec.ephemeralContainers: Forbidden: cannot be set on create"
    );

    let plain: Pod = serde_json::from_value(json!({"metadata": {"name": "app"}, "spec": {
        "containers": [{"name": "app", "image": "nginx:1.27"}]}}))
    .expect("pod");
    pods.create(&PostParams::default(), &plain)
        .await
        .expect("create");

    // A plain update may not add one.
    let patch = json!({"spec": {"ephemeralContainers": [debugger("d")]}});
    let (code, _, msg) = api_error(
        pods.patch("app", &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .expect_err("refused"),
    );
    assert_eq!(code, 422, "{msg}");
    assert!(
        msg.starts_with("Pod \"app\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{msg}"
    );

    // The subresource adds it, defaulted, and changes nothing else.
    let sub_patch = json!({"spec": {"ephemeralContainers": [debugger("d")]},
        "metadata": {"labels": {"ignored": "yes"}}});
    let p = pods
        .patch_ephemeral_containers(
            "app",
            &PatchParams::default(),
            &Patch::Strategic(&sub_patch),
        )
        .await
        .expect("added through the subresource");
    let ecs = p
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.clone())
        .unwrap_or_default();
    assert_eq!(ecs.len(), 1);
    assert_eq!(ecs[0].termination_message_policy.as_deref(), Some("File"));
    assert!(
        p.metadata.labels.is_none(),
        "only ephemeral containers change"
    );
    let got: Pod = pods
        .get_ephemeral_containers("app")
        .await
        .expect("GET the subresource");
    assert_eq!(
        got.spec
            .and_then(|s| s.ephemeral_containers)
            .map(|l| l.len()),
        Some(1)
    );

    // Existing ones can be neither changed nor removed.
    let mut changed = p.clone();
    if let Some(ec) = changed
        .spec
        .as_mut()
        .and_then(|s| s.ephemeral_containers.as_mut())
        .and_then(|l| l.first_mut())
    {
        ec.image = Some("busybox:1.37".into());
    }
    let (code, _, msg) = api_error(
        pods.replace_ephemeral_containers("app", &PostParams::default(), &changed)
            .await
            .expect_err("refused"),
    );
    assert_eq!(code, 422);
    assert!(
        msg.contains("spec.ephemeralContainers: Forbidden: existing ephemeral containers \"d\" may not be changed"),
        "{msg}"
    );
    let mut removed = p.clone();
    if let Some(s) = removed.spec.as_mut() {
        s.ephemeral_containers = Some(Vec::new());
    }
    let (_, _, msg) = api_error(
        pods.replace_ephemeral_containers("app", &PostParams::default(), &removed)
            .await
            .expect_err("refused"),
    );
    assert!(
        msg.contains("existing ephemeral containers \"d\" may not be removed"),
        "{msg}"
    );
    // A new one with resources, or a duplicate name, is refused.
    let bad = json!({"spec": {"ephemeralContainers": [debugger("d"),
        {"name": "app", "image": "busybox:1.36", "resources": {"limits": {"cpu": "1"}}}]}});
    let (_, _, msg) = api_error(
        pods.patch_ephemeral_containers("app", &PatchParams::default(), &Patch::Strategic(&bad))
            .await
            .expect_err("refused"),
    );
    assert!(
        msg.contains("spec.ephemeralContainers[1].name: Duplicate value: \"app\"")
            && msg.contains(
                "spec.ephemeralContainers[1].resources: Forbidden: cannot be set for an Ephemeral Container"
            ),
        "{msg}"
    );

    // The real `kubectl debug` adds one.
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "debug",
            "app",
            "--image=busybox:1.36",
            "--container=kdebug",
            "--target=app",
        ])
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl debug: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = pods
        .get("app")
        .await
        .expect("get")
        .spec
        .and_then(|s| s.ephemeral_containers)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["d", "kdebug"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_name_label_follows_the_name() {
    let server = ApiServer::in_memory().await;
    let dir = TempDir::new("ns");
    let (client, _) = serve(&server, &dir.0).await;
    let namespaces: Api<Namespace> = Api::all(client);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team",
        "labels": {"kubernetes.io/metadata.name": "kube-system"}}}))
    .expect("ns");
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create");
    let label = |n: &Namespace| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/metadata.name"))
            .cloned()
    };
    assert_eq!(label(&created).as_deref(), Some("team"));
    for patch in [
        Patch::Merge(
            json!({"metadata": {"labels": {"kubernetes.io/metadata.name": "kube-system"}}}),
        ),
        Patch::Merge(json!({"metadata": {"labels": {"kubernetes.io/metadata.name": null}}})),
    ] {
        let updated = namespaces
            .patch("team", &PatchParams::default(), &patch)
            .await
            .expect("patch");
        assert_eq!(label(&updated).as_deref(), Some("team"));
    }
    let mut replaced = namespaces.get("team").await.expect("get");
    replaced.metadata.labels = None;
    let updated = namespaces
        .replace("team", &PostParams::default(), &replaced)
        .await
        .expect("replace");
    assert_eq!(label(&updated).as_deref(), Some("team"));
}

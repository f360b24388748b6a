//! Admission policies as a user drives them: `kubeforge up`, `kubeforge
//! webhook --register` as its own process, AdmissionPolicy objects applied
//! and pods created with the real kubectl.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Cluster, TempDir, default_kubectl};

/// A running `kubeforge webhook`.
struct PolicyServer(Child);

impl PolicyServer {
    fn start(kubeconfig: &Path, certs: &Path, extra: &[&str]) -> PolicyServer {
        let args = [&["--register", "--listen", "127.0.0.1:0"], extra].concat();
        PolicyServer::spawn(kubeconfig, certs, &args)
    }

    fn spawn(kubeconfig: &Path, certs: &Path, extra: &[&str]) -> PolicyServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
            .args(["webhook", "--kubeconfig"])
            .arg(kubeconfig)
            .arg("--cert-dir")
            .arg(certs)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kubeforge webhook");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.starts_with("kubeforge webhook ready on https://"));
        assert!(ready, "kubeforge webhook printed its ready line");
        std::thread::spawn(move || for _ in lines {});
        PolicyServer(child)
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.0.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
    }
}

impl Drop for PolicyServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kubeforge(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(args)
        .output()
        .expect("run kubeforge");
    assert!(
        out.status.success(),
        "kubeforge {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const LIMITS: &str = r#"{"spec":{"containers":[{"name":"NAME","image":"IMAGE","resources":{"limits":{"cpu":"100m","memory":"64Mi"}}}]}}"#;

fn limited(name: &str, image: &str) -> String {
    LIMITS.replace("NAME", name).replace("IMAGE", image)
}

fn apply(cluster: &Cluster, kubectl: &Path, yaml: &str) {
    let out = cluster.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(yaml));
    assert!(
        out.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_ready(cluster: &Cluster, kubectl: &Path, policy: &str) {
    cluster.ok(
        kubectl,
        &[
            "wait",
            "--for=condition=Ready",
            &format!("admissionpolicy/{policy}"),
            "--timeout=30s",
        ],
    );
}

#[test]
fn policies_with_kubectl() {
    let kubectl = default_kubectl();
    let cluster = Cluster::start(&["--memory"]);
    let certs = TempDir::new("webhook-certs");
    let server = PolicyServer::start(&cluster.kubeconfig, &certs.0, &[]);
    apply(
        &cluster,
        &kubectl,
        r#"
apiVersion: policy.kubeforge.dev/v1alpha1
kind: AdmissionPolicy
metadata:
  name: baseline
spec:
  requireResources: {}
  images:
    disallowLatest: true
    allowedRegistries: [docker.io, registry.k8s.io]
  sidecar:
    name: proxy
    containers:
    - name: proxy
      image: docker.io/envoyproxy/envoy:v1.30.1
      resources: {limits: {cpu: 50m, memory: 32Mi}}
  scheduling:
  - matchLabels: {tier: critical}
    priorityClassName: critical-apps
"#,
    );
    wait_ready(&cluster, &kubectl, "baseline");

    let err = cluster.fails(&kubectl, &["run", "nolimits", "--image=nginx:1.27"]);
    assert!(
        err.contains("admission webhook \"validate.policy.kubeforge.dev\" denied the request"),
        "{err}"
    );
    assert!(
        err.contains("container \"nolimits\" has no resource limits for cpu, memory"),
        "{err}"
    );
    cluster.ok(
        &kubectl,
        &[
            "run",
            "limited",
            "--image=nginx:1.27",
            &format!("--overrides={}", limited("limited", "nginx:1.27")),
        ],
    );
    let err = cluster.fails(
        &kubectl,
        &[
            "run",
            "x",
            "--image=nginx:latest",
            &format!("--overrides={}", limited("x", "nginx:latest")),
        ],
    );
    assert!(
        err.contains("container \"x\" uses image \"nginx:latest\": the :latest tag is not allowed"),
        "{err}"
    );

    apply(
        &cluster,
        &kubectl,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: mesh\n  labels:\n    kubeforge.dev/inject: enabled\n",
    );
    cluster.ok(
        &kubectl,
        &[
            "run",
            "app",
            "-n",
            "mesh",
            "--image=nginx:1.27",
            &format!("--overrides={}", limited("app", "nginx:1.27")),
        ],
    );
    let names = cluster.ok(&kubectl, &["get", "pod", "app", "-n", "mesh", "-o", "jsonpath={.spec.containers[*].name} {.metadata.annotations.kubeforge\\.dev/sidecar-injected}"]);
    assert_eq!(names, "app proxy proxy");
    let names = cluster.ok(
        &kubectl,
        &[
            "get",
            "pod",
            "limited",
            "-o",
            "jsonpath={.spec.containers[*].name}",
        ],
    );
    assert_eq!(names, "limited", "no sidecar outside labelled namespaces");

    cluster.ok(
        &kubectl,
        &[
            "run",
            "crit",
            "--labels=tier=critical",
            "--image=nginx:1.27",
            &format!("--overrides={}", limited("crit", "nginx:1.27")),
        ],
    );
    let pc = cluster.ok(
        &kubectl,
        &[
            "get",
            "pod",
            "crit",
            "-o",
            "jsonpath={.spec.priorityClassName}",
        ],
    );
    assert_eq!(pc, "critical-apps");

    // Signed images: keys and signatures made with `kubeforge webhook keygen/sign`.
    let keys = TempDir::new("keys");
    let trusted = kubeforge(&[
        "webhook",
        "keygen",
        "--algorithm",
        "ecdsa-p256",
        "--out",
        &keys.0.join("trusted.pem").to_string_lossy(),
    ]);
    kubeforge(&[
        "webhook",
        "keygen",
        "--out",
        &keys.0.join("other.pem").to_string_lossy(),
    ]);
    let signed = format!("sha256:{}", "5e".repeat(32));
    let unsigned = format!("sha256:{}", "6f".repeat(32));
    let resigned = format!("sha256:{}", "7a".repeat(32));
    let sign = |key: &str, digest: &str| {
        kubeforge(&[
            "webhook",
            "sign",
            "--key",
            &keys.0.join(key).to_string_lossy(),
            digest,
        ])
        .trim()
        .to_string()
    };
    apply(
        &cluster,
        &kubectl,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: secure\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: kubeforge-system\n",
    );
    // Signatures are read from the server's own namespace only.
    cluster.ok(
        &kubectl,
        &[
            "create",
            "configmap",
            "image-signatures",
            "-n",
            "kubeforge-system",
            &format!(
                "--from-literal={}={}",
                signed.replace(':', "-"),
                sign("trusted.pem", &signed)
            ),
            &format!(
                "--from-literal={}={}",
                resigned.replace(':', "-"),
                sign("other.pem", &resigned)
            ),
        ],
    );
    cluster.ok(
        &kubectl,
        &[
            "label",
            "configmap",
            "image-signatures",
            "-n",
            "kubeforge-system",
            "kubeforge.dev/image-signatures=true",
        ],
    );
    let key_yaml: String = trusted.lines().map(|l| format!("        {l}\n")).collect();
    apply(
        &cluster,
        &kubectl,
        &format!(
            r#"
apiVersion: policy.kubeforge.dev/v1alpha1
kind: AdmissionPolicy
metadata:
  name: signed-images
spec:
  namespaceSelector:
    matchLabels: {{kubernetes.io/metadata.name: secure}}
  imageSignatures:
    publicKeys:
    - name: release
      key: |
{key_yaml}"#
        ),
    );
    wait_ready(&cluster, &kubectl, "signed-images");
    let run = |name: &str, digest: &str, dry: bool| {
        let image = format!("docker.io/library/app@{digest}");
        let mut args = vec![
            "run".to_string(),
            name.into(),
            "-n".into(),
            "secure".into(),
            format!("--image={image}"),
            format!("--overrides={}", limited(name, &image)),
        ];
        if dry {
            args.push("--dry-run=server".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster.kubectl(&kubectl, &args)
    };
    // The signature cache follows a watch; wait until it has the ConfigMap.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !run("probe", &signed, true).status.success() {
        assert!(
            Instant::now() < deadline,
            "the signed image was never admitted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        run("signed", &signed, false).status.success(),
        "the signed image is admitted"
    );
    let err = String::from_utf8_lossy(&run("unsigned", &unsigned, false).stderr).into_owned();
    assert!(
        err.contains("has no signature from the trusted keys (release)"),
        "{err}"
    );
    let err = String::from_utf8_lossy(&run("resigned", &resigned, false).stderr).into_owned();
    assert!(
        err.contains("has no valid signature from the trusted keys (release)"),
        "{err}"
    );

    // Warn mode: admitted, with kubectl printing the Warning header.
    apply(
        &cluster,
        &kubectl,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dev\n",
    );
    apply(
        &cluster,
        &kubectl,
        "apiVersion: policy.kubeforge.dev/v1alpha1\nkind: AdmissionPolicy\nmetadata:\n  name: baseline\nspec:\n  namespaceSelector:\n    matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [dev]}]\n  requireResources: {}\n  images: {}\n  scheduling:\n  - matchLabels: {tier: critical}\n    priorityClassName: critical-apps\n",
    );
    apply(
        &cluster,
        &kubectl,
        "apiVersion: policy.kubeforge.dev/v1alpha1\nkind: AdmissionPolicy\nmetadata:\n  name: warn-only\nspec:\n  mode: Warn\n  namespaceSelector:\n    matchLabels: {kubernetes.io/metadata.name: dev}\n  images: {}\n",
    );
    wait_ready(&cluster, &kubectl, "warn-only");
    let out = cluster.kubectl(
        &kubectl,
        &["run", "latest", "-n", "dev", "--image=nginx:latest"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        // (quotes inside Warning headers come back as ' from this server)
        err.starts_with("Warning: policy ")
            && err.contains("warn-only")
            && err.contains("the :latest tag is not allowed"),
        "{err}"
    );

    // Invalid policies are reported in their status, naming the field.
    apply(
        &cluster,
        &kubectl,
        "apiVersion: policy.kubeforge.dev/v1alpha1\nkind: AdmissionPolicy\nmetadata:\n  name: broken\nspec:\n  images:\n    allowedRegistries: [\"https://docker.io\"]\n",
    );
    cluster.ok(
        &kubectl,
        &[
            "wait",
            "--for=condition=Ready=False",
            "admissionpolicy/broken",
            "--timeout=30s",
        ],
    );
    let msg = cluster.ok(
        &kubectl,
        &[
            "get",
            "admissionpolicy",
            "broken",
            "-o",
            "jsonpath={.status.conditions[0].message}",
        ],
    );
    assert!(
        msg.starts_with("spec.images.allowedRegistries[0]: "),
        "{msg}"
    );

    // The webhook server stops: Fail refuses naming the webhook, kube-system is never blocked.
    server.stop();
    let err = cluster.fails(
        &kubectl,
        &[
            "run",
            "down",
            "--image=nginx:1.27",
            &format!("--overrides={}", limited("down", "nginx:1.27")),
        ],
    );
    assert!(err.contains("Internal error occurred: failed calling webhook \"mutate.policy.kubeforge.dev\": failed to call webhook: Post \"https://127.0.0.1:"), "{err}");
    cluster.ok(
        &kubectl,
        &["run", "repair", "-n", "kube-system", "--image=nginx:latest"],
    );
    // --fail-open registers failurePolicy Ignore: with the server gone again, creates go through.
    let open = PolicyServer::start(&cluster.kubeconfig, &certs.0, &["--fail-open"]);
    open.stop();
    cluster.ok(&kubectl, &["run", "unchecked", "--image=nginx:latest"]);
}

/// `kubeforge up --webhook-service`: a webhook configured with
/// `clientConfig.service` (not a URL) is reached at the mapped address,
/// with TLS checking the service's DNS name; a service left unmapped fails
/// with an error naming the webhook and the service.
#[test]
fn webhook_service_flag() {
    let kubectl = default_kubectl();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let cluster = Cluster::start(&[
        "--memory",
        "--webhook-service",
        &format!("kubeforge-system/kubeforge-webhook=127.0.0.1:{port}"),
    ]);
    apply(&cluster, &kubectl, &kubeforge(&["webhook", "crd"]));
    cluster.ok(
        &kubectl,
        &[
            "wait",
            "--for=condition=Established",
            "crd/admissionpolicies.policy.kubeforge.dev",
            "--timeout=30s",
        ],
    );
    let certs = TempDir::new("webhook-certs");
    let _server = PolicyServer::spawn(
        &cluster.kubeconfig,
        &certs.0,
        &["--listen", &format!("127.0.0.1:{port}")],
    );
    apply(
        &cluster,
        &kubectl,
        "apiVersion: policy.kubeforge.dev/v1alpha1\nkind: AdmissionPolicy\nmetadata:\n  name: limits\nspec:\n  requireResources: {}\n",
    );
    wait_ready(&cluster, &kubectl, "limits");
    let ca = std::fs::read(certs.0.join("ca.crt")).expect("ca.crt");
    // (k8s-openapi's ByteString serializes as base64.)
    let ca = serde_json::to_value(k8s_openapi::ByteString(ca)).expect("base64");
    let ca = ca.as_str().expect("a string");
    let config = |name: &str, service: &str| {
        format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {name}
webhooks:
- name: {name}.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig:
    service: {{namespace: kubeforge-system, name: {service}, path: /validate}}
    caBundle: {ca}
  rules:
  - {{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}}
  namespaceSelector:
    matchLabels: {{kubernetes.io/metadata.name: NAMESPACE}}
"#
        )
    };
    apply(
        &cluster,
        &kubectl,
        &config("by-service", "kubeforge-webhook").replace("NAMESPACE", "default"),
    );
    let err = cluster.fails(&kubectl, &["run", "nolimits", "--image=nginx:1.27"]);
    assert!(
        err.contains("admission webhook \"by-service.example.com\" denied the request")
            && err.contains("container \"nolimits\" has no resource limits for cpu, memory"),
        "{err}"
    );
    cluster.ok(
        &kubectl,
        &[
            "run",
            "limited",
            "--image=nginx:1.27",
            &format!("--overrides={}", limited("limited", "nginx:1.27")),
        ],
    );

    apply(
        &cluster,
        &kubectl,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: other\n",
    );
    apply(
        &cluster,
        &kubectl,
        &config("unmapped", "not-mapped").replace("NAMESPACE", "other"),
    );
    let err = cluster.fails(
        &kubectl,
        &[
            "run",
            "x",
            "-n",
            "other",
            "--image=nginx:1.27",
            &format!("--overrides={}", limited("x", "nginx:1.27")),
        ],
    );
    assert!(
        err.contains("unmapped.example.com") && err.contains("kubeforge-system/not-mapped"),
        "{err}"
    );
}

/// A malformed `--webhook-service` stops `kubeforge up` with a message
/// saying the expected form.
#[test]
fn webhook_service_flag_bad_input() {
    for bad in [
        "nonsense",
        "ns/name:99999=127.0.0.1:1",
        "/name=127.0.0.1:1",
        "ns/name=no-port",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
            .args(["up", "--memory", "--webhook-service", bad])
            .output()
            .expect("run kubeforge");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: accepted");
        assert!(
            err.contains("--webhook-service") && err.contains(bad.split('=').next().unwrap_or(bad)),
            "{bad}: {err}"
        );
    }
}

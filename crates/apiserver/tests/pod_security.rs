//! Pod Security admission through the real `kubectl` and kube-rs: the
//! namespace labels choose enforce, audit and warn levels; refusals,
//! warnings and audit annotations read as kube-apiserver words them;
//! workloads are warned about, never refused; raising a namespace's
//! enforce level warns about its existing pods; the configuration's
//! defaults and exemptions apply.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kubeforge_apiserver::{ApiServer, kubeconfig_yaml};
use kubeforge_podsecurity::config::Config;
use serde_json::{Value, json};

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("kubeforge-psa-{tag}-{}", std::process::id()));
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

/// Serve `server` on a loopback port; the kubeconfig for it.
async fn serve(server: &ApiServer, dir: &Path) -> PathBuf {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_yaml(addr)).expect("kubeconfig");
    kubeconfig
}

/// Run kubectl off the runtime's threads (the server runs on them),
/// feeding `stdin` when given.
async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<Value>) -> Output {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run kubectl");
        let mut input = child.stdin.take().expect("stdin");
        if let Some(v) = stdin {
            input
                .write_all(v.to_string().as_bytes())
                .expect("write stdin");
        }
        drop(input);
        child.wait_with_output().expect("kubectl output")
    })
    .await
    .expect("join")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `kubectl create -f -` of `obj`: (succeeded, stderr).
async fn create(kubeconfig: &Path, obj: Value) -> (bool, String) {
    let out = kubectl(kubeconfig, &["create", "-f", "-"], Some(obj)).await;
    (out.status.success(), text(&out.stderr))
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn pod(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn container(name: &str, security_context: Value) -> Value {
    json!({"name": name, "image": "registry.example/app:1", "securityContext": security_context})
}

fn hardened() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
           "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
}

const RESTRICTED_PLAIN: &str = "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
    unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
    runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
    seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_labels_enforce_warn_and_audit_as_kube_does() {
    let dir = TempDir::new("modes");
    let server = ApiServer::in_memory().await;
    let audit_path = dir.0.join("audit.log");
    server.set_audit(Some(
        kubeforge_apiserver::audit::AuditLog::open(
            kubeforge_apiserver::audit::Policy::everything(
                kubeforge_apiserver::audit::Level::Metadata,
            ),
            &audit_path,
            0,
            0,
        )
        .expect("audit log"),
    ));
    let kc = serve(&server, &dir.0).await;
    let labels = json!({"pod-security.kubernetes.io/enforce": "baseline",
                        "pod-security.kubernetes.io/warn": "restricted",
                        "pod-security.kubernetes.io/audit": "restricted"});
    assert!(create(&kc, namespace("team", labels)).await.0);

    // Enforce: a privileged pod is refused with kube's text, and nothing
    // is stored.
    let privileged = pod(
        "team",
        "priv",
        json!({"hostNetwork": true, "containers": [container("c", json!({"privileged": true}))]}),
    );
    let (ok, err) = create(&kc, privileged).await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): error when creating \"STDIN\": pods \"priv\" is forbidden: \
             violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true), \
             privileged (container \"c\" must not set securityContext.privileged=true)"),
        "{err}"
    );
    let out = kubectl(&kc, &["get", "pod", "priv", "-n", "team"], None).await;
    assert!(!out.status.success());

    // Warn: a pod fine at baseline but not restricted is created with a
    // warning kubectl prints.
    let (ok, err) = create(
        &kc,
        pod(
            "team",
            "plain",
            json!({"containers": [container("c", json!({}))]}),
        ),
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!(
            "Warning: would violate PodSecurity \"restricted:latest\": {RESTRICTED_PLAIN}"
        )),
        "{err}"
    );
    // A restricted pod: no warning at all.
    let (ok, err) = create(
        &kc,
        pod(
            "team",
            "good",
            json!({"containers": [container("c", hardened())]}),
        ),
    )
    .await;
    assert!(ok && !err.contains("Warning"), "{err}");

    // Workloads are warned about (at the warn level) but never refused.
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "team"},
        "spec": {"selector": {"matchLabels": {"app": "d"}},
                 "template": {"metadata": {"labels": {"app": "d"}},
                              "spec": {"containers": [container("c", json!({"privileged": true}))]}}}});
    let (ok, err) = create(&kc, deployment).await;
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: would violate PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false"),
        "{err}"
    );

    // Ephemeral containers are pods' too: kubectl debug's sysadmin
    // profile (privileged) is refused.
    let out = kubectl(
        &kc,
        &[
            "debug",
            "good",
            "-n",
            "team",
            "--image=busybox",
            "--profile=sysadmin",
            "-c",
            "dbg",
        ],
        None,
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("pods \"good\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"dbg\" must not set securityContext.privileged=true)"),
        "{}",
        text(&out.stderr)
    );
    // Nor can an admitted pod be made privileged afterwards: a pod's spec
    // keeps every field but images and a few others (ValidatePodUpdate).
    let out = kubectl(
        &kc,
        &[
            "patch",
            "pod",
            "good",
            "-n",
            "team",
            "-p",
            r#"{"spec":{"containers":[{"name":"c","securityContext":{"privileged":true}}]}}"#,
        ],
        None,
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("The Pod \"good\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{}",
        text(&out.stderr)
    );
    // An update that changes nothing Pod Security reads is not evaluated:
    // labelling the non-restricted pod gets no warning.
    let out = kubectl(&kc, &["label", "pod", "plain", "-n", "team", "x=y"], None).await;
    assert!(
        out.status.success() && !text(&out.stderr).contains("Warning"),
        "{}",
        text(&out.stderr)
    );

    // Audit: the refused pod's event carries the enforced policy and the
    // violations at the audit level.
    let log = std::fs::read_to_string(&audit_path).expect("audit log");
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    let refused = events
        .iter()
        .find(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "create"
                && e["objectRef"]["resource"] == "pods"
                && e["responseStatus"]["code"] == 403
        })
        .expect("the refused create is audited");
    let a = &refused["annotations"];
    assert_eq!(
        a["pod-security.kubernetes.io/enforce-policy"],
        "baseline:latest"
    );
    let violations = a["pod-security.kubernetes.io/audit-violations"]
        .as_str()
        .unwrap_or_default();
    assert!(
        violations.starts_with("would violate PodSecurity \"restricted:latest\": host namespaces (hostNetwork=true), privileged"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_labels_are_validated_and_raising_enforce_warns_about_existing_pods() {
    let dir = TempDir::new("labels");
    let server = ApiServer::in_memory().await;
    let kc = serve(&server, &dir.0).await;

    // A label that does not parse is a 422 naming it.
    let (ok, err) = create(
        &kc,
        namespace(
            "bad",
            json!({"pod-security.kubernetes.io/enforce": "strict"}),
        ),
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("The Namespace \"bad\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"),
        "{err}"
    );
    let out = kubectl(
        &kc,
        &[
            "label",
            "ns",
            "default",
            "pod-security.kubernetes.io/warn-version=1.25",
        ],
        None,
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\""),
        "{}",
        text(&out.stderr)
    );

    // Three pods, two with the same problems: raising enforce to
    // restricted warns once per set of reasons, first name and count.
    assert!(create(&kc, namespace("apps", json!({}))).await.0);
    for name in ["web-b", "web-a"] {
        assert!(
            create(
                &kc,
                pod(
                    "apps",
                    name,
                    json!({"containers": [container("c", json!({}))]})
                )
            )
            .await
            .0
        );
    }
    assert!(
        create(
            &kc,
            pod(
                "apps",
                "root",
                json!({"hostPID": true, "containers": [container("c", hardened())]})
            )
        )
        .await
        .0
    );
    let out = kubectl(
        &kc,
        &[
            "label",
            "ns",
            "apps",
            "pod-security.kubernetes.io/enforce=restricted",
        ],
        None,
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let warnings: Vec<String> = text(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("Warning: ").map(str::to_string))
        .collect();
    assert_eq!(
        warnings,
        [
            "existing pods in namespace \"apps\" violate the new PodSecurity enforce level \"restricted:latest\"",
            "root: host namespaces",
            "web-a (and 1 other pod): allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
        ]
    );
    // Relaxing it warns about nothing.
    let out = kubectl(
        &kc,
        &[
            "label",
            "--overwrite",
            "ns",
            "apps",
            "pod-security.kubernetes.io/enforce=baseline",
        ],
        None,
    )
    .await;
    assert!(
        out.status.success() && !text(&out.stderr).contains("Warning"),
        "{}",
        text(&out.stderr)
    );

    // An older version of the standards: restricted v1.22 had no
    // runAsUser check, so a root pod is refused only from v1.23.
    assert!(create(&kc, namespace("old", json!({"pod-security.kubernetes.io/enforce": "restricted",
                                                    "pod-security.kubernetes.io/enforce-version": "v1.22"}))).await.0);
    let root_user = |name: &str| {
        pod(
            "old",
            name,
            json!({"securityContext": {"runAsUser": 0},
                                "containers": [container("c", hardened())]}),
        )
    };
    let (ok, err) = create(&kc, root_user("r1")).await;
    assert!(ok, "{err}");
    let out = kubectl(
        &kc,
        &[
            "label",
            "--overwrite",
            "ns",
            "old",
            "pod-security.kubernetes.io/enforce-version=v1.23",
        ],
        None,
    )
    .await;
    assert!(
        text(&out.stderr).contains("r1: runAsUser=0"),
        "{}",
        text(&out.stderr)
    );
    let (ok, err) = create(&kc, root_user("r2")).await;
    assert!(!ok);
    assert!(
        err.contains("pods \"r2\" is forbidden: violates PodSecurity \"restricted:v1.23\": runAsUser=0 (pod must not set runAsUser=0)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_sets_defaults_and_exemptions() {
    let dir = TempDir::new("config");
    let server = ApiServer::in_memory().await;
    server.set_pod_security(
        Config::parse(
            r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
    exemptions:
      namespaces: [tools]
      runtimeClasses: [sandboxed]
"#,
        )
        .expect("configuration"),
    );
    let kc = serve(&server, &dir.0).await;
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kc).expect("kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("config"),
    )
    .expect("client");
    let privileged = |name: &str, runtime_class: Option<&str>| -> Pod {
        let mut spec = json!({"containers": [container("c", json!({"privileged": true}))]});
        if let Some(rc) = runtime_class {
            spec["runtimeClassName"] = json!(rc);
        }
        serde_json::from_value(pod("default", name, spec)).expect("pod")
    };
    // The default applies to unlabelled namespaces (kube-rs sees kube's
    // Status).
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let err = pods
        .create(&PostParams::default(), &privileged("p", None))
        .await
        .expect_err("refused by the default");
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err}");
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "pods \"p\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
    );
    // An exempt RuntimeClass, and an exempt namespace.
    pods.create(
        &PostParams::default(),
        &privileged("sandboxed", Some("sandboxed")),
    )
    .await
    .expect("exempt RuntimeClass");
    let (ok, err) = create(
        &kc,
        namespace(
            "tools",
            json!({"pod-security.kubernetes.io/enforce": "restricted"}),
        ),
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: namespace \"tools\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored"),
        "{err}"
    );
    let tools: Api<Pod> = Api::namespaced(client, "tools");
    let mut p = privileged("t", None);
    p.metadata.namespace = Some("tools".into());
    tools
        .create(&PostParams::default(), &p)
        .await
        .expect("exempt namespace");
}

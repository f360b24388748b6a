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
    // Never with pods that really run: a hostNetwork pod reaches loopback.
    let dir = std::env::temp_dir().join(format!("kubeforge-insecure-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args([
            "up",
            "--insecure-http",
            "--container-nodes",
            "1",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .expect("run kubeforge");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing --insecure-http with --container-nodes"),
        "{err}"
    );
    assert!(!dir.exists(), "nothing was started or written");
    // On loopback it is allowed, with a warning.
    let c = Cluster::start(&["--memory", "--insecure-http"]);
    assert!(c.url.starts_with("http://127.0.0.1:"), "{}", c.url);
    c.ok(&default_kubectl(), &["get", "ns", "default"]);
    c.stop();
}

/// The seed's extension through real kubectl: an AccessRole inherits its
/// parents' rules, a Deny binding refuses what RBAC allows, bindings
/// outside their time window or source network do not apply, bad policies
/// are 422 naming the field, and `kubeforge authz explain` names the
/// binding, the roles and the rule.
#[test]
fn access_roles_inherit_deny_wins_conditions_apply_and_explain_says_why() {
    let c = Cluster::start(&["--memory"]);
    let k = default_kubectl();
    c.ok(&k, &["create", "namespace", "dev"]);
    // A window of one hour, twelve hours from now, every day: it never
    // includes the test's time.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let far = (secs / 3600 + 12) % 24;
    let window = format!(
        r#"{{"start": "{far:02}:00", "end": "{:02}:00"}}"#,
        (far + 1) % 24
    );
    let policies = format!(
        r#"
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {{name: viewer}}
spec:
  rules: [{{apiGroups: [""], resources: [pods], verbs: [get, list]}}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {{name: admin}}
spec:
  parents: [{{name: viewer}}]
  rules: [{{apiGroups: [""], resources: [pods], verbs: [delete]}}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {{name: editor}}
spec:
  parents: [{{name: admin}}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: AccessBinding
metadata: {{name: edit, namespace: dev}}
spec:
  roleRef: {{kind: ClusterAccessRole, name: editor}}
  subjects: [{{kind: User, name: bob}}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {{name: secret-reader}}
spec:
  rules: [{{apiGroups: [""], resources: [secrets, configmaps], verbs: [get, list]}}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessBinding
metadata: {{name: night-shift}}
spec:
  roleRef: {{name: secret-reader}}
  subjects: [{{kind: User, name: bob}}]
  conditions: {{timeWindows: [{window}]}}
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessBinding
metadata: {{name: office-network}}
spec:
  roleRef: {{name: secret-reader}}
  subjects: [{{kind: User, name: bob}}]
  conditions: {{sourceCIDRs: [10.0.0.0/8]}}
"#
    );
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(&policies));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", "bob"]);
        String::from_utf8_lossy(&c.kubectl(&k, &all).stdout)
            .trim()
            .to_string()
    };
    // The parent's parent grants list; the parent grants delete.
    assert_eq!(can(&["list", "pods", "-n", "dev"]), "yes");
    assert_eq!(can(&["delete", "pods", "-n", "dev"]), "yes");
    assert_eq!(can(&["create", "pods", "-n", "dev"]), "no");
    assert_eq!(can(&["list", "pods", "-n", "default"]), "no");
    c.ok(&k, &["get", "pods", "-n", "dev", "--as", "bob"]);
    // Outside the window, and from 127.0.0.1, the secret readers do not apply.
    let err = c.fails(&k, &["get", "secrets", "-n", "dev", "--as", "bob"]);
    assert!(
        err.contains(
            r#"User "bob" cannot list resource "secrets" in API group "" in the namespace "dev""#
        ),
        "{err}"
    );
    c.fails(&k, &["get", "configmaps", "-n", "dev", "--as", "bob"]);

    // RBAC allows creating configmaps; a Deny binding takes it away.
    c.ok(
        &k,
        &[
            "create",
            "role",
            "cm-writer",
            "--verb=create,delete",
            "--resource=configmaps",
            "-n",
            "dev",
        ],
    );
    c.ok(
        &k,
        &[
            "create",
            "rolebinding",
            "cm-writer",
            "--role=cm-writer",
            "--user=bob",
            "-n",
            "dev",
        ],
    );
    assert_eq!(can(&["create", "configmaps", "-n", "dev"]), "yes");
    let deny = r#"
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {name: cm-creator}
spec:
  rules: [{apiGroups: [""], resources: [configmaps], verbs: [create]}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: AccessBinding
metadata: {name: no-new-configmaps, namespace: dev}
spec:
  roleRef: {kind: ClusterAccessRole, name: cm-creator}
  effect: Deny
  subjects: [{kind: User, name: bob}]
"#;
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(deny));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    // kubectl prints a refusal's reason after "no - ", as for any
    // authorizer that gives one.
    let answer = can(&["create", "configmaps", "-n", "dev"]);
    assert!(
        answer.starts_with(r#"no - kubeforge: denied by AccessBinding "no-new-configmaps""#),
        "{answer}"
    );
    let err = c.fails(
        &k,
        &["create", "configmap", "x", "-n", "dev", "--as", "bob"],
    );
    assert!(
        err.contains(concat!(
            r#"configmaps is forbidden: User "bob" cannot create resource "configmaps" in API group "" in the namespace "dev": "#,
            r#"kubeforge: denied by AccessBinding "no-new-configmaps" in namespace "dev" (Deny) of ClusterAccessRole "cm-creator" to User "bob""#
        )),
        "{err}"
    );

    // explain names the binding, the inheritance path and the rule.
    let explain = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
            .args(["authz", "explain", "--kubeconfig"])
            .arg(&c.kubeconfig)
            .args(args)
            .output()
            .expect("run kubeforge authz explain");
        (
            out.status.code(),
            text_of(&out.stdout),
            text_of(&out.stderr),
        )
    };
    let (code, out, err) = explain(&["--as", "bob", "list", "pods", "-n", "dev"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        out,
        concat!(
            "allowed\n",
            r#"  kubeforge: allowed by AccessBinding "edit" in namespace "dev" of ClusterAccessRole "editor" to User "bob": "#,
            r#"rule 0 {APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]} of ClusterAccessRole "viewer" "#,
            r#"(inherited: ClusterAccessRole "editor" → ClusterAccessRole "admin" → ClusterAccessRole "viewer")"#,
            "\n"
        )
    );
    let (code, out, _) = explain(&["--as", "bob", "create", "configmaps", "-n", "dev"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.starts_with("denied\n"), "{out}");
    assert!(out.contains(r#"rule 0 {APIGroups:[""], Resources:["configmaps"], Verbs:["create"]} of ClusterAccessRole "cm-creator""#), "{out}");
    let (code, out, _) = explain(&[
        "--as",
        "bob",
        "--source",
        "127.0.0.1",
        "get",
        "configmaps",
        "-n",
        "dev",
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.starts_with("not allowed"), "{out}");
    assert!(out.contains(r#"ClusterAccessBinding "night-shift" of ClusterAccessRole "secret-reader" to User "bob" does not apply: the time "#), "{out}");
    assert!(out.contains(r#"ClusterAccessBinding "office-network" of ClusterAccessRole "secret-reader" to User "bob" does not apply: the client address 127.0.0.1 is outside its source CIDRs [10.0.0.0/8]"#), "{out}");
    let (code, out, _) = explain(&[
        "--as",
        "bob",
        "--source",
        "10.2.3.4",
        "get",
        "configmaps",
        "-n",
        "dev",
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(r#"ClusterAccessBinding "office-network""#),
        "{out}"
    );
    let (code, _, err) = explain(&["--as", "bob", "get", "pods/a/b"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("is not `resource[.group][/subresource]`"),
        "{err}"
    );

    // Bad policies are 422 naming the field; a cycle names its path.
    let cyclic = r#"
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {name: viewer}
spec:
  parents: [{name: editor}]
  rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
"#;
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(cyclic));
    let err = text_of(&out.stderr);
    assert!(
        err.contains(r#"The ClusterAccessRole "viewer" is invalid: spec.parents[0]: Invalid value: "editor": would form a cycle: ClusterAccessRole "viewer" → ClusterAccessRole "editor" → ClusterAccessRole "admin" → ClusterAccessRole "viewer""#),
        "{err}"
    );
    let bad = r#"
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessBinding
metadata: {name: bad}
spec:
  roleRef: {name: viewer}
  subjects: [{kind: User, name: bob}]
  conditions:
    sourceCIDRs: [10.0.0.0/33]
    timeWindows: [{start: "9:00", end: "17:00", timeZone: Moon/Base}]
"#;
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(bad));
    let err = text_of(&out.stderr);
    for field in [
        r#"spec.conditions.timeWindows[0].start: Invalid value: "9:00""#,
        r#"spec.conditions.timeWindows[0].timeZone: Invalid value: "Moon/Base": unknown time zone"#,
        r#"spec.conditions.sourceCIDRs[0]: Invalid value: "10.0.0.0/33""#,
    ] {
        assert!(err.contains(field), "{field}: {err}");
    }

    // A role whose parent is missing grants nothing, and says so.
    let orphan = r#"
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {name: orphan}
spec:
  parents: [{name: gone}]
"#;
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(orphan));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    let ready = |name: &str| {
        c.ok(
            &k,
            &[
                "get",
                "clusteraccessrole",
                name,
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}"#,
            ],
        )
    };
    let mut seen = String::new();
    for _ in 0..200 {
        seen = ready("orphan");
        if !seen.trim().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        seen,
        r#"False grants nothing: parent ClusterAccessRole "gone": clusteraccessrole.authz.kubeforge.dev "gone" not found"#
    );
    assert_eq!(ready("editor"), "True every parent resolved");
    c.stop();
}

/// A kubeconfig for the cluster `c` with the given `user:` block.
fn user_kubeconfig(c: &Cluster, name: &str, user: &str) -> std::path::PathBuf {
    let admin = std::fs::read_to_string(&c.kubeconfig).expect("kubeconfig");
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("the kubeconfig has the CA");
    let path = c.dir.0.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: {}, certificate-authority-data: {ca}}}\nusers:\n- name: u\n  user: {user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            c.url
        ),
    )
    .expect("write kubeconfig");
    path
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// POST `body` to `url` (HTTPS, trusting `ca`) as kube-apiserver posts to
/// a webhook; the JSON answer.
fn post_json(ca: &std::path::Path, url: &str, body: &serde_json::Value) -> serde_json::Value {
    let out = Command::new("curl")
        .args(["-sS", "--fail-with-body", "--cacert"])
        .arg(ca)
        .args([
            "-H",
            "Content-Type: application/json",
            "-d",
            &body.to_string(),
            url,
        ])
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "{}{}",
        text_of(&out.stdout),
        text_of(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON answer")
}

/// `kubeforge authz webhook` answers SubjectAccessReviews as kube-apiserver
/// posts them: Allow → allowed, Deny → denied, nothing → no opinion; and
/// follows policy changes.
#[test]
fn the_authz_webhook_answers_reviews_as_kube_apiserver_expects() {
    use std::io::BufRead;
    let c = Cluster::start(&["--memory"]);
    let k = default_kubectl();
    let policies = r#"
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {name: pod-reader}
spec:
  rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessRole
metadata: {name: pod-deleter}
spec:
  parents: [{name: pod-reader}]
  rules: [{apiGroups: [""], resources: [pods], verbs: [delete]}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: ClusterAccessBinding
metadata: {name: bob-reads}
spec:
  roleRef: {name: pod-reader}
  subjects: [{kind: User, name: bob}]
---
apiVersion: authz.kubeforge.dev/v1alpha1
kind: AccessBinding
metadata: {name: no-deletes, namespace: default}
spec:
  roleRef: {kind: ClusterAccessRole, name: pod-deleter}
  effect: Deny
  subjects: [{kind: Group, name: interns}]
"#;
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(policies));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    // The shipped manifests apply, and the webhook runs as their
    // least-privilege ServiceAccount.
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/authz");
    c.ok(&k, &["apply", "-k", config]);
    // The manifests register the webhook for policy writes too; this
    // cluster checks them itself, and the Service is not reachable here,
    // so the registration goes (the webhook's /validate is asked directly
    // below).
    c.ok(
        &k,
        &[
            "delete",
            "validatingwebhookconfiguration",
            "kubeforge-authz-policies",
        ],
    );
    let token = c.ok(
        &k,
        &[
            "create",
            "token",
            "kubeforge-authz",
            "-n",
            "kubeforge-system",
        ],
    );
    let sa_config = user_kubeconfig(&c, "authz-webhook", &format!("{{token: {}}}", token.trim()));
    let certs = c.dir.0.join("authz-certs");
    let mut webhook = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args([
            "authz",
            "webhook",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
        ])
        .arg(&sa_config)
        .arg("--cert-dir")
        .arg(&certs)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the webhook");
    let mut lines = std::io::BufReader::new(webhook.stdout.take().expect("stdout")).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("kubeforge authz webhook ready on ")
                .and_then(|r| r.split_whitespace().next())
                .map(str::to_string)
        })
        .expect("the webhook printed its URL");
    std::thread::spawn(move || for _ in lines {});
    let review = |user: &str, groups: &[&str], verb: &str, resource: &str| -> serde_json::Value {
        // The body kube-apiserver's webhook authorizer sends.
        let body = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": {"resourceAttributes": {"namespace": "default", "verb": verb, "group": "",
                     "version": "v1", "resource": resource, "name": "web"},
                     "user": user, "groups": groups, "uid": "42"},
            "status": {"allowed": false}
        });
        post_json(&certs.join("ca.crt"), &url, &body)
    };
    let allowed = review("bob", &["system:authenticated"], "get", "pods");
    assert_eq!(allowed["apiVersion"], "authorization.k8s.io/v1");
    assert_eq!(allowed["kind"], "SubjectAccessReview");
    assert_eq!(allowed["status"]["allowed"], true, "{allowed}");
    assert!(
        allowed["status"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with(r#"kubeforge: allowed by ClusterAccessBinding "bob-reads" of ClusterAccessRole "pod-reader" to User "bob""#)),
        "{allowed}"
    );
    let denied = review("bob", &["interns"], "delete", "pods");
    assert_eq!(denied["status"]["allowed"], false, "{denied}");
    assert_eq!(denied["status"]["denied"], true, "{denied}");
    // No binding matches: no opinion, so RBAC decides.
    let none = review("carol", &["system:authenticated"], "get", "secrets");
    assert_eq!(
        none["status"],
        serde_json::json!({"allowed": false}),
        "{none}"
    );
    // As a validating admission webhook, it refuses what the embedded
    // server refuses: a parent forming a cycle with the stored roles, an
    // unknown time zone; and lets a good policy through.
    let admit = |kind: &str, operation: &str, obj: serde_json::Value| -> serde_json::Value {
        let plural = format!("{}s", kind.to_lowercase());
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "7", "kind": {"group": "authz.kubeforge.dev", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "authz.kubeforge.dev", "version": "v1alpha1", "resource": plural},
                "requestKind": {"group": "authz.kubeforge.dev", "version": "v1alpha1", "kind": kind},
                "requestResource": {"group": "authz.kubeforge.dev", "version": "v1alpha1", "resource": plural},
                "name": obj["metadata"]["name"], "operation": operation,
                "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
                "object": obj, "oldObject": null, "dryRun": false, "options": null}
        });
        let validate = url.replace("/authorize", "/validate");
        let v = post_json(&certs.join("ca.crt"), &validate, &body);
        assert_eq!(v["response"]["uid"], "7", "{v}");
        v["response"].clone()
    };
    let cyclic = admit(
        "ClusterAccessRole",
        "UPDATE",
        serde_json::json!({
        "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "ClusterAccessRole",
        "metadata": {"name": "pod-reader"},
        "spec": {"parents": [{"name": "pod-deleter"}], "rules": []}}),
    );
    assert_eq!(cyclic["allowed"], false, "{cyclic}");
    assert_eq!(cyclic["status"]["code"], 422, "{cyclic}");
    assert_eq!(cyclic["status"]["reason"], "Invalid", "{cyclic}");
    assert!(
        cyclic["status"]["message"].as_str().is_some_and(|m| m.starts_with(
            r#"ClusterAccessRole.authz.kubeforge.dev "pod-reader" is invalid: spec.parents[0]: Invalid value: "pod-deleter": would form a cycle"#
        )),
        "{cyclic}"
    );
    assert_eq!(
        cyclic["status"]["details"]["causes"][0]["field"],
        "spec.parents[0]"
    );
    let zone = admit(
        "AccessBinding",
        "CREATE",
        serde_json::json!({
        "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "AccessBinding",
        "metadata": {"name": "office-hours", "namespace": "default"},
        "spec": {"roleRef": {"kind": "ClusterAccessRole", "name": "pod-reader"},
                 "subjects": [{"kind": "User", "name": "dave"}],
                 "conditions": {"timeWindows": [{"start": "09:00", "end": "17:00", "timeZone": "Mars/Olympus"}]}}}),
    );
    assert_eq!(zone["allowed"], false, "{zone}");
    assert_eq!(
        zone["status"]["details"]["causes"][0]["field"], "spec.conditions.timeWindows[0].timeZone",
        "{zone}"
    );
    let good = admit(
        "ClusterAccessRole",
        "CREATE",
        serde_json::json!({
        "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "ClusterAccessRole",
        "metadata": {"name": "pod-admin"},
        "spec": {"parents": [{"name": "pod-deleter"}], "rules": []}}),
    );
    assert_eq!(good["allowed"], true, "{good}");

    // A new binding applies without a restart.
    c.ok(&k, &["delete", "clusteraccessbinding", "bob-reads"]);
    let mut last = serde_json::Value::Null;
    for _ in 0..200 {
        last = review("bob", &["system:authenticated"], "get", "pods");
        if last["status"]["allowed"] == false {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(
        last["status"],
        serde_json::json!({"allowed": false}),
        "{last}"
    );
    let _ = webhook.kill();
    let _ = webhook.wait();
    c.stop();
}

/// `--audit-log-path` with kube's audit Policy: an `audit.k8s.io/v1` Event
/// per request stage, as JSON lines, with the requester, whom it
/// impersonates, the decision and the answer; bodies at the levels that
/// keep them.
#[test]
fn the_audit_log_has_an_event_per_request_stage() {
    let dir = common::TempDir::new("audit");
    let policy = dir.0.join("policy.yaml");
    std::fs::write(
        &policy,
        r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: ["/openapi*", "/api", "/apis", "/api/*", "/apis/*"]
- level: RequestResponse
  resources: [{group: "", resources: [configmaps]}]
- level: Metadata
"#,
    )
    .expect("policy");
    let log = dir.0.join("logs/audit.log");
    let c = Cluster::start(&[
        "--memory",
        "--audit-policy-file",
        policy.to_str().expect("utf-8"),
        "--audit-log-path",
        log.to_str().expect("utf-8"),
    ]);
    let k = default_kubectl();
    c.ok(
        &k,
        &["create", "configmap", "settings", "--from-literal=a=b"],
    );
    c.ok(&k, &["get", "namespaces"]);
    c.fails(&k, &["get", "secrets", "--as", "mallory"]);
    let out = Command::new("curl")
        .args(["-sk", &format!("{}/api/v1/pods", c.url)])
        .output()
        .expect("curl");
    assert!(text_of(&out.stdout).contains("Unauthorized"));
    c.stop();

    let text = std::fs::read_to_string(&log).expect("the audit log");
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON event"))
        .collect();
    for e in &events {
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(e["kind"], "Event");
        assert_ne!(e["stage"], "RequestReceived", "omitted by the policy: {e}");
        assert!(
            e["auditID"].as_str().is_some_and(|id| id.len() == 36),
            "{e}"
        );
        assert!(
            !e["requestURI"]
                .as_str()
                .unwrap_or("/")
                .starts_with("/openapi"),
            "level None: {e}"
        );
    }
    let find = |verb: &str, resource: &str| {
        events
            .iter()
            .find(|e| {
                e["verb"] == verb
                    && e["objectRef"]["resource"] == resource
                    && e["user"]["username"] == "kubernetes-admin"
            })
            .unwrap_or_else(|| panic!("no {verb} {resource} event by the admin in:\n{text}"))
    };
    let create = find("create", "configmaps");
    assert_eq!(create["level"], "RequestResponse");
    assert_eq!(create["stage"], "ResponseComplete");
    assert_eq!(create["user"]["username"], "kubernetes-admin");
    assert_eq!(create["sourceIPs"], serde_json::json!(["127.0.0.1"]));
    assert!(
        create["userAgent"]
            .as_str()
            .is_some_and(|u| u.starts_with("kubectl")),
        "{create}"
    );
    assert_eq!(create["objectRef"]["namespace"], "default");
    assert_eq!(create["responseStatus"]["code"], 201);
    assert_eq!(create["requestObject"]["data"]["a"], "b");
    assert_eq!(create["responseObject"]["metadata"]["name"], "settings");
    assert_eq!(
        create["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    let list = find("list", "namespaces");
    assert_eq!(list["level"], "Metadata");
    assert_eq!(list["responseStatus"]["code"], 200);
    assert!(list.get("responseObject").is_none(), "{list}");
    let refused = find("list", "secrets");
    assert_eq!(refused["impersonatedUser"]["username"], "mallory");
    assert_eq!(refused["responseStatus"]["code"], 403);
    assert_eq!(refused["responseStatus"]["reason"], "Forbidden");
    assert_eq!(
        refused["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    let anonymous = events
        .iter()
        .find(|e| e["responseStatus"]["code"] == 401)
        .unwrap_or_else(|| panic!("no 401 event in:\n{text}"));
    assert_eq!(anonymous["stage"], "ResponseStarted");
    assert_eq!(anonymous["requestURI"], "/api/v1/pods");
}

/// A CSR for the `kube-apiserver-client` signer, approved with `kubectl
/// certificate approve`, yields a certificate that authenticates as its
/// subject (CN user, O groups); one asking for server auth is failed with
/// kube's reason instead.
#[test]
fn an_approved_csr_gives_a_client_certificate_that_authenticates() {
    let c = Cluster::start(&["--memory"]);
    let k = default_kubectl();
    let key = c.dir.0.join("carol.key");
    let csr = c.dir.0.join("carol.csr");
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            text_of(&out.stderr)
        );
    };
    openssl(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        key.to_str().expect("utf-8"),
    ]);
    openssl(&[
        "req",
        "-new",
        "-key",
        key.to_str().expect("utf-8"),
        "-subj",
        "/CN=carol/O=devs",
        "-out",
        csr.to_str().expect("utf-8"),
    ]);
    use base64::Engine as _;
    let request =
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(&csr).expect("csr"));
    let manifest = |name: &str, usage: &str| {
        format!(
            "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: {name}}}\nspec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 3600\n  usages: [{usage}]\n"
        )
    };
    for (name, usage) in [("carol", "client auth"), ("carol-server", "server auth")] {
        let out = c.kubectl_stdin(&k, &["create", "-f", "-"], Some(&manifest(name, usage)));
        assert!(out.status.success(), "{}", text_of(&out.stderr));
        c.ok(&k, &["certificate", "approve", name]);
    }
    let field =
        |name: &str, path: &str| c.ok(&k, &["get", "csr", name, "-o", &format!("jsonpath={path}")]);
    let mut cert = String::new();
    for _ in 0..200 {
        cert = field("carol", "{.status.certificate}");
        if !cert.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(!cert.is_empty(), "carol's certificate was never issued");
    // The requestor is whoever sent the request.
    assert_eq!(field("carol", "{.spec.username}"), "kubernetes-admin");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(cert.trim())
        .expect("base64");
    let crt = c.dir.0.join("carol.crt");
    std::fs::write(&crt, &pem).expect("write cert");
    // The certificate is carol's, for client auth, about an hour long.
    let text = Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-subject",
            "-ext",
            "extendedKeyUsage",
            "-in",
        ])
        .arg(&crt)
        .output()
        .expect("openssl x509");
    let text = text_of(&text.stdout);
    assert!(
        text.contains("CN=carol") || text.contains("CN = carol"),
        "{text}"
    );
    assert!(text.contains("TLS Web Client Authentication"), "{text}");
    // …and it authenticates.
    let carol = user_kubeconfig(
        &c,
        "carol",
        &format!(
            "{{client-certificate: {}, client-key: {}}}",
            crt.display(),
            key.display()
        ),
    );
    let who = c.ok(
        &k,
        &[
            "auth",
            "whoami",
            "--kubeconfig",
            carol.to_str().expect("utf-8"),
        ],
    );
    let r = rows(&who);
    assert!(
        r.contains(&vec!["Username".into(), "carol".into()]),
        "{who}"
    );
    assert!(
        r.contains(&vec![
            "Groups".into(),
            "[devs".into(),
            "system:authenticated]".into()
        ]),
        "{who}"
    );
    // A server-auth request is not this signer's to grant.
    let mut reason = String::new();
    for _ in 0..200 {
        reason = field(
            "carol-server",
            r#"{.status.conditions[?(@.type=="Failed")].reason} {.status.conditions[?(@.type=="Failed")].message}"#,
        );
        if !reason.trim().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(
        reason,
        "SignerValidationFailure invalid usage for client certificate: server auth"
    );
    assert!(field("carol-server", "{.status.certificate}").is_empty());
    c.stop();
}

/// kube's `admin`, `edit` and `view` exist and aggregate: bound with a
/// RoleBinding they grant what kube's grant, and a ClusterRole labelled
/// `aggregate-to-edit` joins `edit` and `admin`.
#[test]
fn admin_edit_and_view_aggregate_their_parts() {
    let c = Cluster::start(&["--memory"]);
    let k = default_kubectl();
    c.ok(&k, &["create", "namespace", "team"]);
    c.ok(
        &k,
        &[
            "create",
            "rolebinding",
            "dana-edits",
            "--clusterrole=edit",
            "--user=dana",
            "-n",
            "team",
        ],
    );
    c.ok(
        &k,
        &[
            "create",
            "rolebinding",
            "vic-views",
            "--clusterrole=view",
            "--user=vic",
            "-n",
            "team",
        ],
    );
    let can = |user: &str, args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-n", "team", "--as", user]);
        String::from_utf8_lossy(&c.kubectl(&k, &all).stdout)
            .trim()
            .to_string()
    };
    // The aggregation controller fills the rules shortly after start.
    let mut answer = String::new();
    for _ in 0..200 {
        answer = can("dana", &["create", "deployments.apps"]);
        if answer == "yes" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(answer, "yes");
    assert_eq!(can("dana", &["get", "secrets"]), "yes");
    assert_eq!(can("dana", &["create", "pods/exec"]), "yes");
    assert_eq!(
        can(
            "dana",
            &["create", "rolebindings.rbac.authorization.k8s.io"]
        ),
        "no"
    );
    assert_eq!(can("dana", &["update", "resourcequotas"]), "no");
    assert_eq!(can("vic", &["list", "pods"]), "yes");
    assert_eq!(can("vic", &["get", "pods/log"]), "yes");
    assert_eq!(can("vic", &["get", "secrets"]), "no");
    assert_eq!(can("vic", &["delete", "pods"]), "no");
    let labels = c.ok(
        &k,
        &[
            "get",
            "clusterrole",
            "view",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert!(
        labels.contains(r#""rbac.authorization.k8s.io/aggregate-to-edit":"true""#),
        "{labels}"
    );
    // A role labelled aggregate-to-edit joins edit (and admin through
    // edit's own label).
    let quotas = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: quota-editor
  labels: {rbac.authorization.k8s.io/aggregate-to-edit: "true"}
rules: [{apiGroups: [""], resources: [resourcequotas], verbs: [update]}]
"#;
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(quotas));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    c.ok(
        &k,
        &[
            "create",
            "rolebinding",
            "ada-admins",
            "--clusterrole=admin",
            "--user=ada",
            "-n",
            "team",
        ],
    );
    let mut answer = String::new();
    for _ in 0..200 {
        answer = can("ada", &["update", "resourcequotas"]);
        if answer == "yes" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(answer, "yes");
    assert_eq!(can("dana", &["update", "resourcequotas"]), "yes");
    assert_eq!(
        can("ada", &["create", "rolebindings.rbac.authorization.k8s.io"]),
        "yes"
    );
    assert_eq!(can("vic", &["update", "resourcequotas"]), "no");
    c.stop();
}

/// What every namespace of a real cluster has, and the long-lived tokens of
/// `kubernetes.io/service-account-token` Secrets: filled in by the tokens
/// controller, authenticating while the Secret and its ServiceAccount
/// stand, refused while marked invalid, stamped when used, and revoked
/// with the account.
#[test]
fn legacy_token_secrets_are_filled_in_authenticate_and_die_with_their_account() {
    use base64::Engine as _;
    let b64 = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .map(|b| text_of(&b))
            .unwrap_or_else(|e| panic!("base64 {s:?}: {e}"))
    };
    let c = Cluster::start(&["--memory"]);
    let k = default_kubectl();
    let ca = std::fs::read_to_string(c.dir.0.join("state/pki/ca.crt")).expect("ca.crt");

    // Every namespace gets its `default` ServiceAccount and the CA bundle.
    c.ok(&k, &["create", "namespace", "team"]);
    for ns in ["default", "team"] {
        c.ok(
            &k,
            &[
                "wait",
                "--for=create",
                "-n",
                ns,
                "serviceaccount/default",
                "--timeout=60s",
            ],
        );
        c.ok(
            &k,
            &[
                "wait",
                "--for=create",
                "-n",
                ns,
                "configmap/kube-root-ca.crt",
                "--timeout=60s",
            ],
        );
        let got = c.ok(
            &k,
            &[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-n",
                ns,
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ],
        );
        assert_eq!(got, ca, "{ns}");
    }
    // An edited bundle is put back.
    c.ok(
        &k,
        &[
            "patch",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            "team",
            "--type=merge",
            "-p",
            r#"{"data":{"ca.crt":"forged"}}"#,
        ],
    );
    c.ok(&k, &["delete", "serviceaccount", "default", "-n", "team"]);
    c.ok(
        &k,
        &[
            "wait",
            "--for=create",
            "-n",
            "team",
            "serviceaccount/default",
            "--timeout=60s",
        ],
    );
    let mut restored = String::new();
    for _ in 0..600 {
        restored = c.ok(
            &k,
            &[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-n",
                "team",
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ],
        );
        if restored == ca {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(restored, ca);

    // A token Secret must name its account.
    let err = text_of(
        &c.kubectl_stdin(&k, &["create", "-f", "-"], Some(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: nameless}\ntype: kubernetes.io/service-account-token\n",
        ))
        .stderr,
    );
    assert!(
        err.contains("metadata.annotations[kubernetes.io/service-account.name]: Required value"),
        "{err}"
    );

    c.ok(&k, &["create", "serviceaccount", "bot"]);
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: bot-token\n  annotations: {kubernetes.io/service-account.name: bot}\ntype: kubernetes.io/service-account-token\n";
    let out = c.kubectl_stdin(&k, &["create", "-f", "-"], Some(secret));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    c.ok(
        &k,
        &[
            "wait",
            "secret/bot-token",
            "--for=jsonpath={.data.namespace}=ZGVmYXVsdA==",
            "--timeout=60s",
        ],
    );
    let get = |path: &str| {
        c.ok(
            &k,
            &[
                "get",
                "secret",
                "bot-token",
                "-o",
                &format!("jsonpath={path}"),
            ],
        )
    };
    let token = b64(&get("{.data.token}"));
    assert_eq!(b64(&get("{.data.ca\\.crt}")), ca);
    let uid = c.ok(
        &k,
        &[
            "get",
            "serviceaccount",
            "bot",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    assert_eq!(
        get("{.metadata.annotations.kubernetes\\.io/service-account\\.uid}"),
        uid
    );
    // The token is kube's legacy JWT.
    let claims = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .expect("claims"),
    )
    .expect("json");
    assert_eq!(claims["iss"], "kubernetes/serviceaccount");
    assert_eq!(claims["sub"], "system:serviceaccount:default:bot");
    assert_eq!(
        claims["kubernetes.io/serviceaccount/secret.name"],
        "bot-token"
    );
    assert!(claims.get("exp").is_none(), "legacy tokens do not expire");

    // It authenticates as the account, which RBAC gives nothing yet.
    let bot = user_kubeconfig(&c, "bot", &format!("{{token: {token}}}"));
    let as_bot = |args: &[&str]| {
        Command::new(&k)
            .args(args)
            .env("KUBECONFIG", &bot)
            .env("HOME", &c.dir.0)
            .output()
            .expect("kubectl")
    };
    let who = as_bot(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(
        text_of(&who.stdout),
        "system:serviceaccount:default:bot",
        "{}",
        text_of(&who.stderr)
    );
    let denied = as_bot(&["get", "pods"]);
    assert!(
        text_of(&denied.stderr).contains(r#"User "system:serviceaccount:default:bot" cannot list resource "pods" in API group "" in the namespace "default""#),
        "{}",
        text_of(&denied.stderr)
    );
    // The use is recorded on the Secret, dated today (UTC).
    let today = text_of(
        &Command::new("date")
            .args(["-u", "+%Y-%m-%d"])
            .output()
            .expect("date")
            .stdout,
    );
    c.ok(
        &k,
        &[
            "wait",
            "secret/bot-token",
            &format!(
                "--for=jsonpath={{.metadata.labels.kubernetes\\.io/legacy-token-last-used}}={}",
                today.trim()
            ),
            "--timeout=60s",
        ],
    );

    // A TokenReview agrees, for the API's audiences only.
    let review = |aud: &str| {
        let body = format!(
            r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{{"token":"{token}"{aud}}}}}"#
        );
        let out = c.kubectl_stdin(&k, &["create", "-f", "-", "-o", "json"], Some(&body));
        assert!(out.status.success(), "{}", text_of(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("review")["status"].clone()
    };
    let ok = review("");
    assert_eq!(ok["authenticated"], true, "{ok}");
    assert_eq!(ok["user"]["uid"], uid.as_str());
    assert_ne!(review(r#","audiences":["vault"]"#)["authenticated"], true);

    // Marked invalid, it is refused until the label goes.
    c.ok(
        &k,
        &[
            "label",
            "secret",
            "bot-token",
            "kubernetes.io/legacy-token-invalid-since=2026-01-01",
        ],
    );
    let refused = review("");
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("has been marked invalid"),
        "{refused}"
    );
    assert!(!as_bot(&["auth", "whoami"]).status.success());
    c.ok(
        &k,
        &[
            "label",
            "secret",
            "bot-token",
            "kubernetes.io/legacy-token-invalid-since-",
        ],
    );
    assert!(as_bot(&["auth", "whoami"]).status.success());

    // A Secret for an account that does not exist is deleted; so are an
    // account's Secrets when it goes, and its token dies with them.
    let ghost = secret
        .replace("bot-token", "ghost-token")
        .replace("name: bot}", "name: ghost}");
    let out = c.kubectl_stdin(&k, &["create", "-f", "-"], Some(&ghost));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    c.ok(
        &k,
        &[
            "wait",
            "--for=delete",
            "secret/ghost-token",
            "--timeout=60s",
        ],
    );
    c.ok(&k, &["delete", "serviceaccount", "bot"]);
    c.ok(
        &k,
        &["wait", "--for=delete", "secret/bot-token", "--timeout=60s"],
    );
    let gone = as_bot(&["auth", "whoami"]);
    assert!(
        text_of(&gone.stderr).contains("Unauthorized"),
        "{}",
        text_of(&gone.stderr)
    );

    // stringData is folded into data, as kube-apiserver stores it.
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: {password: s3cret}\n",
    ));
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert_eq!(
        b64(&c.ok(
            &k,
            &["get", "secret", "creds", "-o", "jsonpath={.data.password}"]
        )),
        "s3cret"
    );
    assert_eq!(
        c.ok(&k, &["get", "secret", "creds", "-o", "jsonpath={.type}"]),
        "Opaque"
    );
    assert_eq!(
        c.ok(
            &k,
            &["get", "secret", "creds", "-o", "jsonpath={.stringData}"]
        ),
        ""
    );
    c.stop();
}

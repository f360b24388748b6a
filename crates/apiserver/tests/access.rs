//! Authentication and RBAC through real clients: kube-rs and the real
//! `kubectl` over the loopback listener with bearer tokens, and in-process
//! clients acting as a given user. Every refusal is checked against kube's
//! exact text.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Config};
use kubeforge_apiserver::{ApiServer, Authentication, TokenFile, UserInfo};
use serde_json::json;

const TOKENS: &str = "admin-token,admin,1,system:masters\nbob-token,bob,2,devs\n";

struct Cluster {
    server: ApiServer,
    url: String,
    /// The HTTPS listener kubectl uses (it sends credentials only over TLS)
    /// and the CA that signed its certificate and trusted client ones.
    https: String,
    ca: Ca,
}

/// A certificate authority for the test: it signs the serving certificate
/// and client certificates.
struct Ca {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).expect("ca").pem();
        Ca { params, key, pem }
    }

    /// A certificate for `params`, signed by this CA: (cert PEM, key PEM,
    /// cert DER).
    fn sign(&self, params: rcgen::CertificateParams) -> (String, String, Vec<u8>) {
        let issuer = rcgen::Issuer::new(self.params.clone(), &self.key);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &issuer).expect("cert");
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    /// A client certificate for `cn` in `orgs`: (cert PEM, key PEM).
    fn client(&self, cn: &str, orgs: &[&str]) -> (String, String) {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let (cert, key, _) = self.sign(p);
        (cert, key)
    }
}

/// The serving configuration for 127.0.0.1, signed by `ca`.
fn tls(ca: &Ca) -> std::sync::Arc<rustls::ServerConfig> {
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let (_, key, der) = ca.sign(params);
    use rustls::pki_types::pem::PemObject;
    kubeforge_apiserver::tls::server_config(
        vec![der.into()],
        rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
    )
    .expect("server config")
}

async fn cluster() -> Cluster {
    let server = ApiServer::in_memory().await;
    let ca = Ca::new("access test CA");
    server.set_authentication(Some(
        Authentication::new(TokenFile::parse(TOKENS).expect("token file"))
            .with_client_ca(&ca.pem)
            .expect("client CA"),
    ));
    server.enable_rbac(true).await.expect("rbac");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    let secure = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let secure_addr = secure.local_addr().expect("addr");
    let config = tls(&ca);
    tokio::spawn(
        server
            .clone()
            .serve_tls(secure, config, std::future::pending()),
    );
    Cluster {
        server,
        url: format!("http://{addr}"),
        https: format!("https://{secure_addr}"),
        ca,
    }
}

impl Cluster {
    fn client(&self, token: Option<&str>) -> Client {
        let mut config = Config::new(self.url.parse().expect("url"));
        config.default_namespace = "default".into();
        if let Some(t) = token {
            config.auth_info.token = Some(t.to_string().into());
        }
        Client::try_from(config).expect("client")
    }

    fn kubeconfig(&self, dir: &Path, token: Option<&str>) -> PathBuf {
        let user = match token {
            Some(t) => format!("{{token: {t}}}"),
            None => "{}".into(),
        };
        self.kubeconfig_for(dir, token.unwrap_or("none"), &user)
    }

    /// A kubeconfig whose user presents `cert` and `key` (PEM).
    fn kubeconfig_cert(&self, dir: &Path, tag: &str, (cert, key): &(String, String)) -> PathBuf {
        let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
        let user = format!(
            "{{client-certificate-data: {}, client-key-data: {}}}",
            b64(cert),
            b64(key)
        );
        self.kubeconfig_for(dir, tag, &user)
    }

    fn kubeconfig_for(&self, dir: &Path, tag: &str, user: &str) -> PathBuf {
        let path = dir.join(format!("kubeconfig-{tag}"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: k\n  context:\n    cluster: k\n    user: u\n    namespace: default\ncurrent-context: k\nusers:\n- name: u\n  user: {user}\n",
                self.https,
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &self.ca.pem),
            ),
        )
        .expect("kubeconfig");
        path
    }
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

async fn grant_pod_reading(admin: &Client) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "pod-reader", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    }))
    .expect("role");
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bob-reads-pods", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
}

fn pod() -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .expect("pod")
}

#[tokio::test]
async fn tokens_authenticate_and_rbac_decides_with_kubes_texts() {
    let c = cluster().await;
    // No credentials, or a token nobody issued: 401 and nothing more.
    for client in [c.client(None), c.client(Some("forged"))] {
        let e = api_error(
            Api::<Pod>::default_namespaced(client)
                .list(&ListParams::default())
                .await
                .expect_err("401"),
        );
        assert_eq!(
            (e.code, e.reason.as_str(), e.message.as_str()),
            (401, "Unauthorized", "Unauthorized")
        );
    }

    let admin = c.client(Some("admin-token"));
    let bob = c.client(Some("bob-token"));
    let bob_pods: Api<Pod> = Api::default_namespaced(bob.clone());
    let e = api_error(
        bob_pods
            .list(&ListParams::default())
            .await
            .expect_err("403"),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        r#"pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "default""#
    );

    grant_pod_reading(&admin).await;
    bob_pods
        .list(&ListParams::default())
        .await
        .expect("bob may list pods now");
    let e = api_error(
        bob_pods
            .create(&PostParams::default(), &pod())
            .await
            .expect_err("403"),
    );
    assert_eq!(
        e.message,
        r#"pods is forbidden: User "bob" cannot create resource "pods" in API group "" in the namespace "default""#
    );
    let e = api_error(
        Api::<Pod>::namespaced(bob.clone(), "kube-system")
            .get("x")
            .await
            .expect_err("403"),
    );
    assert_eq!(
        e.message,
        r#"pods "x" is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "kube-system""#
    );
    let e = api_error(
        Api::<ConfigMap>::default_namespaced(bob.clone())
            .list(&ListParams::default())
            .await
            .expect_err("403"),
    );
    assert!(
        e.message.starts_with("configmaps is forbidden"),
        "{}",
        e.message
    );
    // Everyone authenticated reads the version (system:public-info-viewer).
    bob.apiserver_version().await.expect("version");

    // Removing the binding takes the permission away at once.
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .delete("bob-reads-pods", &DeleteParams::default())
        .await
        .expect("delete binding");
    let e = api_error(
        bob_pods
            .list(&ListParams::default())
            .await
            .expect_err("403"),
    );
    assert_eq!(e.code, 403);

    // In-process clients act as whoever they name.
    let as_bob = c
        .server
        .client_as(UserInfo::new("bob", ["devs", "system:authenticated"]));
    let e = api_error(
        Api::<Pod>::default_namespaced(as_bob)
            .list(&ListParams::default())
            .await
            .expect_err("403"),
    );
    assert_eq!(e.code, 403);
    Api::<Pod>::default_namespaced(c.server.client())
        .create(&PostParams::default(), &pod())
        .await
        .expect("the loopback client is privileged");
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_whoami_and_forbidden_errors() {
    let c = cluster().await;
    let dir =
        TempDir(std::env::temp_dir().join(format!("kubeforge-access-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let bob = c.kubeconfig(&dir.0, Some("bob-token"));
    // (A kubeconfig without credentials makes kubectl prompt for a
    // username over HTTPS; a token nobody issued is the 401 case.)
    let forged = c.kubeconfig(&dir.0, Some("forged"));

    // Discovery fails first; client-go reads a raw 401 as this (what a
    // real cluster's expired token shows too).
    let out = kubectl(&forged, &["get", "pods"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(
            "error: You must be logged in to the server (the server has asked for the client to provide credentials)"
        ),
        "{}",
        text(&out.stderr)
    );

    let out = kubectl(&bob, &["get", "pods"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(r#"Error from server (Forbidden): pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "default""#),
        "{}",
        text(&out.stderr)
    );
    let out = kubectl(&bob, &["auth", "can-i", "list", "pods"]);
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("no", Some(1))
    );

    grant_pod_reading(&c.client(Some("admin-token"))).await;
    let out = kubectl(&bob, &["auth", "can-i", "list", "pods"]);
    assert_eq!(
        (text(&out.stdout).trim(), out.status.code()),
        ("yes", Some(0)),
        "{}",
        text(&out.stderr)
    );
    let out = kubectl(&bob, &["auth", "can-i", "delete", "pods"]);
    assert_eq!(text(&out.stdout).trim(), "no");
    let out = kubectl(
        &bob,
        &["auth", "can-i", "list", "pods", "-n", "kube-system"],
    );
    assert_eq!(text(&out.stdout).trim(), "no");
    let out = kubectl(&bob, &["get", "pods"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // can-i --list shows the Role's rule, and agrees with can-i.
    let out = kubectl(&bob, &["auth", "can-i", "--list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list = text(&out.stdout);
    let row = list
        .lines()
        .find(|l| l.split_whitespace().next() == Some("pods"))
        .unwrap_or_else(|| panic!("no pods row in:\n{list}"));
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["pods", "[]", "[]", "[get", "list]"]
    );
    assert!(
        list.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{list}"
    );

    let out = kubectl(&bob, &["auth", "whoami"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let who = text(&out.stdout);
    let rows: Vec<Vec<&str>> = who
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["Username", "bob"]), "{who}");
    assert!(rows.contains(&vec!["UID", "2"]), "{who}");
    assert!(
        rows.contains(&vec!["Groups", "[devs", "system:authenticated]"]),
        "{who}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_users_by_subject() {
    let c = cluster().await;
    let dir =
        TempDir(std::env::temp_dir().join(format!("kubeforge-access-x509-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let carol = c.kubeconfig_cert(&dir.0, "carol", &c.ca.client("carol", &["devs"]));
    let out = kubectl(&carol, &["auth", "whoami"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let who = text(&out.stdout);
    let rows: Vec<Vec<&str>> = who
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["Username", "carol"]), "{who}");
    // (Several O values are several groups: kubeforge-authz's x509 tests.)
    assert!(
        rows.contains(&vec!["Groups", "[devs", "system:authenticated]"]),
        "{who}"
    );
    assert!(
        who.lines().any(
            |l| l.starts_with("Extra: authentication.kubernetes.io/credential-id")
                && l.contains("[X509SHA256=")
        ),
        "{who}"
    );
    let out = kubectl(&carol, &["get", "pods"]);
    assert!(
        text(&out.stderr)
            .contains(r#"pods is forbidden: User "carol" cannot list resource "pods""#),
        "{}",
        text(&out.stderr)
    );
    // A certificate in system:masters is an administrator.
    let root = c.kubeconfig_cert(&dir.0, "root", &c.ca.client("root", &["system:masters"]));
    let out = kubectl(&root, &["get", "pods", "-A"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A certificate from another CA is a 401, not a failed handshake.
    let rogue = Ca::new("rogue CA");
    let mallory = c.kubeconfig_cert(
        &dir.0,
        "mallory",
        &rogue.client("admin", &["system:masters"]),
    );
    let out = kubectl(&mallory, &["get", "pods"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("error: You must be logged in to the server"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_the_impersonate_verb() {
    let c = cluster().await;
    let dir =
        TempDir(std::env::temp_dir().join(format!("kubeforge-access-imp-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let admin = c.kubeconfig(&dir.0, Some("admin-token"));
    let bob = c.kubeconfig(&dir.0, Some("bob-token"));

    // system:masters may impersonate anyone; the request is then theirs.
    let out = kubectl(
        &admin,
        &["--as", "bob", "--as-group", "devs", "auth", "whoami"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let who = text(&out.stdout);
    let rows: Vec<Vec<&str>> = who
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["Username", "bob"]), "{who}");
    assert!(
        rows.contains(&vec!["Groups", "[devs", "system:authenticated]"]),
        "{who}"
    );
    let out = kubectl(&admin, &["--as", "bob", "get", "pods"]);
    assert!(
        text(&out.stderr).contains(r#"pods is forbidden: User "bob" cannot list resource "pods""#),
        "{}",
        text(&out.stderr)
    );

    // bob may not, until a role lets him impersonate alice (and only her).
    // (whoami hides a 403's text; get shows it.)
    let out = kubectl(&bob, &["--as", "alice", "get", "pods"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(r#"users "alice" is forbidden: User "bob" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{}",
        text(&out.stderr)
    );
    let out = kubectl(
        &admin,
        &[
            "create",
            "clusterrole",
            "impersonate-alice",
            "--verb=impersonate",
            "--resource=users",
            "--resource-name=alice",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubectl(
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "bob-as-alice",
            "--clusterrole=impersonate-alice",
            "--user=bob",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubectl(&bob, &["--as", "alice", "auth", "whoami"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let who = text(&out.stdout);
    let rows: Vec<Vec<&str>> = who
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["Username", "alice"]), "{who}");
    assert!(
        rows.contains(&vec!["Groups", "[system:authenticated]"]),
        "{who}"
    );
    let out = kubectl(&bob, &["--as", "carol", "auth", "whoami"]);
    assert!(!out.status.success(), "only alice");
    // Impersonating a group too needs the verb on groups.
    let out = kubectl(
        &bob,
        &[
            "--as",
            "alice",
            "--as-group",
            "system:masters",
            "get",
            "pods",
        ],
    );
    assert!(
        text(&out.stderr).contains(r#"groups "system:masters" is forbidden: User "bob" cannot impersonate resource "groups""#),
        "{}",
        text(&out.stderr)
    );

    // Groups without a user: kube's 500.
    let req = http::Request::get("/api/v1/namespaces/default/pods")
        .header("Impersonate-Group", "devs")
        .body(Vec::new())
        .expect("request");
    let e = api_error(
        c.client(Some("admin-token"))
            .request::<serde_json::Value>(req)
            .await
            .expect_err("500"),
    );
    assert_eq!(e.code, 500);
    assert!(
        e.message.contains("without impersonating a user"),
        "{}",
        e.message
    );
}

fn rbac<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("rbac object")
}

#[tokio::test]
async fn nobody_grants_what_they_do_not_hold() {
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    let bob = c.client(Some("bob-token"));
    // bob may write Roles and RoleBindings in default, nothing else.
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "rbac-writer"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"],
                       "resources": ["roles", "rolebindings"], "verbs": ["create", "update", "get"]}]})))
        .await
        .expect("role");
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "bob-writes-rbac"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rbac-writer"},
            "subjects": [{"kind": "User", "name": "bob"}]})))
        .await
        .expect("binding");

    let roles: Api<Role> = Api::namespaced(bob.clone(), "default");
    let e = api_error(
        roles
            .create(&PostParams::default(), &rbac(json!({
                "metadata": {"name": "more"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]})))
            .await
            .expect_err("escalation"),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        "roles.rbac.authorization.k8s.io \"more\" is forbidden: user \"bob\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\"]}"
    );
    // What bob holds he may hand on.
    roles
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "same"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["get"]}]})))
        .await
        .expect("no escalation");

    let bindings: Api<RoleBinding> = Api::namespaced(bob.clone(), "default");
    let admin_binding = rbac::<RoleBinding>(json!({
        "metadata": {"name": "bob-is-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": "bob"}]}));
    let e = api_error(
        bindings
            .create(&PostParams::default(), &admin_binding)
            .await
            .expect_err("escalation"),
    );
    assert_eq!(
        e.message,
        "rolebindings.rbac.authorization.k8s.io \"bob-is-admin\" is forbidden: user \"bob\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}"
    );
    let e = api_error(
        bindings
            .create(&PostParams::default(), &rbac(json!({
                "metadata": {"name": "to-nothing"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "missing"},
                "subjects": [{"kind": "User", "name": "bob"}]})))
            .await
            .expect_err("missing role"),
    );
    assert_eq!(
        e.message,
        "rolebindings.rbac.authorization.k8s.io \"to-nothing\" is forbidden: role.rbac.authorization.k8s.io \"missing\" not found"
    );

    // With `bind` on cluster-admin (here, in default only), bob may bind it.
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &rbac(json!({
            "metadata": {"name": "binder"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                       "verbs": ["bind"], "resourceNames": ["cluster-admin"]}]})),
        )
        .await
        .expect("binder role");
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &rbac(json!({
            "metadata": {"name": "bob-binds"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
            "subjects": [{"kind": "User", "name": "bob"}]})),
        )
        .await
        .expect("binder binding");
    bindings
        .create(&PostParams::default(), &admin_binding)
        .await
        .expect("bind allows it");
    // …and now holds everything in default, but not beyond it.
    Api::<ConfigMap>::default_namespaced(bob.clone())
        .list(&ListParams::default())
        .await
        .expect("admin in default");
    let e = api_error(
        Api::<ConfigMap>::namespaced(bob, "kube-system")
            .list(&ListParams::default())
            .await
            .expect_err("not elsewhere"),
    );
    assert_eq!(e.code, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_from_kubectl_create_token() {
    let c = cluster().await;
    let dir =
        TempDir(std::env::temp_dir().join(format!("kubeforge-access-sa-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let admin = c.kubeconfig(&dir.0, Some("admin-token"));
    let ok = |cfg: &Path, args: &[&str]| {
        let out = kubectl(cfg, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    ok(&admin, &["create", "serviceaccount", "bot"]);
    let out = kubectl(&admin, &["create", "token", "bot", "--duration=5m"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("may not specify a duration less than 10 minutes"),
        "{}",
        text(&out.stderr)
    );
    let token = ok(&admin, &["create", "token", "bot"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let bot = c.kubeconfig_for(&dir.0, "bot", &format!("{{token: {token}}}"));

    let who = ok(&bot, &["auth", "whoami"]);
    let rows: Vec<Vec<&str>> = who
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec!["Username", "system:serviceaccount:default:bot"]),
        "{who}"
    );
    assert!(
        rows.contains(&vec![
            "Groups",
            "[system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated]"
        ]),
        "{who}"
    );
    assert!(who.contains("[JTI="), "{who}");

    let out = kubectl(&bot, &["get", "configmaps"]);
    assert!(
        text(&out.stderr).contains(r#"configmaps is forbidden: User "system:serviceaccount:default:bot" cannot list resource "configmaps" in API group "" in the namespace "default""#),
        "{}",
        text(&out.stderr)
    );
    ok(
        &admin,
        &[
            "create",
            "role",
            "cm-reader",
            "--verb=get,list",
            "--resource=configmaps",
        ],
    );
    ok(
        &admin,
        &[
            "create",
            "rolebinding",
            "bot-reads",
            "--role=cm-reader",
            "--serviceaccount=default:bot",
        ],
    );
    ok(&bot, &["get", "configmaps"]);
    assert_eq!(
        ok(&bot, &["auth", "can-i", "list", "configmaps"]).trim(),
        "yes"
    );
    assert_eq!(
        kubectl(&bot, &["auth", "can-i", "delete", "configmaps"])
            .status
            .code(),
        Some(1)
    );

    // kube-rs with the token, as in-cluster config would use it.
    let mut config = Config::new(c.url.parse().expect("url"));
    config.auth_info.token = Some(token.clone().into());
    let rs = Client::try_from(config).expect("client");
    Api::<ConfigMap>::namespaced(rs.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("kube-rs lists with the token");

    // TokenReview, as a webhook or aggregated server would ask.
    let admin_rs = c.client(Some("admin-token"));
    let review = |t: &str| {
        let body = serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": t}})).expect("json");
        http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
            .header("content-type", "application/json")
            .body(body)
            .expect("request")
    };
    let r: serde_json::Value = admin_rs.request(review(&token)).await.expect("review");
    assert_eq!(r["status"]["authenticated"], true, "{r}");
    assert_eq!(
        r["status"]["user"]["username"],
        "system:serviceaccount:default:bot"
    );
    assert_eq!(
        r["status"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    let r: serde_json::Value = admin_rs
        .request(review("forged.token.value"))
        .await
        .expect("review");
    assert!(
        r["status"].get("authenticated").is_none_or(|a| a == false),
        "{r}"
    );
    assert!(
        r["status"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid bearer token")),
        "{r}"
    );

    // The issuer's OIDC documents, readable by ServiceAccounts, verify the
    // token outside the cluster.
    let get = |path: &str| http::Request::get(path).body(Vec::new()).expect("request");
    let oidc: serde_json::Value = rs
        .request(get("/.well-known/openid-configuration"))
        .await
        .expect("openid-configuration");
    assert_eq!(
        oidc["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(
        oidc["jwks_uri"],
        "https://kubernetes.default.svc.cluster.local/openid/v1/jwks"
    );
    let jwks: serde_json::Value = rs.request(get("/openid/v1/jwks")).await.expect("jwks");
    let key = &jwks["keys"][0];
    assert_eq!(
        (
            key["kty"].as_str(),
            key["alg"].as_str(),
            key["use"].as_str()
        ),
        (Some("EC"), Some("ES256"), Some("sig"))
    );
    {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let parts: Vec<&str> = token.split('.').collect();
        let header: serde_json::Value =
            serde_json::from_slice(&b64.decode(parts[0]).expect("header")).expect("header json");
        assert_eq!(
            header["kid"], key["kid"],
            "the token names the published key"
        );
        let mut point = vec![4u8];
        point.extend(b64.decode(key["x"].as_str().expect("x")).expect("x"));
        point.extend(b64.decode(key["y"].as_str().expect("y")).expect("y"));
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, &point)
            .verify(
                format!("{}.{}", parts[0], parts[1]).as_bytes(),
                &b64.decode(parts[2]).expect("signature"),
            )
            .expect("the published key verifies the token");
    }
    let e = api_error(
        c.client(Some("bob-token"))
            .request::<serde_json::Value>(get("/openid/v1/jwks"))
            .await
            .expect_err("not a ServiceAccount"),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            r#"forbidden: User "bob" cannot get path "/openid/v1/jwks""#
        )
    );

    // Deleting the ServiceAccount revokes its tokens.
    ok(&admin, &["delete", "serviceaccount", "bot"]);
    let e = api_error(
        Api::<ConfigMap>::namespaced(rs, "default")
            .list(&ListParams::default())
            .await
            .expect_err("revoked"),
    );
    assert_eq!((e.code, e.message.as_str()), (401, "Unauthorized"));
    let r: serde_json::Value = admin_rs.request(review(&token)).await.expect("review");
    assert_eq!(
        r["status"]["error"], "[invalid bearer token, service account token has been invalidated]",
        "{r}"
    );
}

/// A namespace deleted without a namespace controller takes its
/// RoleBindings with it at once; recreated under the same name, it grants
/// nothing.
#[tokio::test]
async fn bindings_go_with_their_namespace() {
    use k8s_openapi::api::core::v1::Namespace;
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let ns: Namespace = rbac(json!({"metadata": {"name": "team"}}));
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    Api::<RoleBinding>::namespaced(admin.clone(), "team")
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "bob-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "bob"}]})))
        .await
        .expect("binding");
    let bob: Api<ConfigMap> = Api::namespaced(c.client(Some("bob-token")), "team");
    bob.list(&ListParams::default())
        .await
        .expect("bob is admin in team");
    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .expect("delete namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("recreate namespace");
    let e = api_error(bob.list(&ListParams::default()).await.expect_err("403"));
    assert_eq!(e.code, 403, "{}", e.message);
}

#[tokio::test]
async fn an_aggregation_rule_needs_every_permission() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "role-writer"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}]})))
        .await
        .expect("role");
    Api::<ClusterRoleBinding>::all(admin)
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "bob-writes-roles"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "role-writer"},
            "subjects": [{"kind": "User", "name": "bob"}]})))
        .await
        .expect("binding");
    let roles: Api<ClusterRole> = Api::all(c.client(Some("bob-token")));
    let e = api_error(
        roles
            .create(
                &PostParams::default(),
                &rbac(json!({
                "metadata": {"name": "gathers"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}})),
            )
            .await
            .expect_err("403"),
    );
    assert_eq!(
        e.message,
        r#"clusterroles.rbac.authorization.k8s.io "gathers" is forbidden: must have cluster-admin privileges to use the aggregationRule"#
    );
    // Without one, a role granting nothing new is fine.
    roles
        .create(
            &PostParams::default(),
            &rbac(json!({"metadata": {"name": "plain"}, "rules": []})),
        )
        .await
        .expect("plain role");
}

fn policy(kind: &str, plural: &str) -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "authz.kubeforge.dev".into(),
        version: "v1alpha1".into(),
        api_version: "authz.kubeforge.dev/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn dynamic(v: serde_json::Value) -> kube::api::DynamicObject {
    serde_json::from_value(v).expect("policy object")
}

#[tokio::test]
async fn access_policies_grant_nothing_their_writer_does_not_hold() {
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    let bob = c.client(Some("bob-token"));
    // bob may write AccessRoles and AccessBindings in default.
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "policy-writer"},
            "rules": [{"apiGroups": ["authz.kubeforge.dev"],
                       "resources": ["accessroles", "accessbindings"], "verbs": ["create", "update", "get"]},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})))
        .await
        .expect("role");
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "bob-writes-policy"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "policy-writer"},
            "subjects": [{"kind": "User", "name": "bob"}]})))
        .await
        .expect("binding");
    let ar = policy("AccessRole", "accessroles");
    let roles: Api<kube::api::DynamicObject> = Api::namespaced_with(bob.clone(), "default", &ar);
    // An AccessRole inheriting cluster-admin grants what bob lacks.
    let e = api_error(
        roles
            .create(
                &PostParams::default(),
                &dynamic(json!({
                "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "AccessRole",
                "metadata": {"name": "boss"},
                "spec": {"parents": [{"kind": "ClusterRole", "name": "cluster-admin"}]}})),
            )
            .await
            .expect_err("escalation through a parent"),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.starts_with("accessroles.authz.kubeforge.dev \"boss\" is forbidden: user \"bob\" (groups=[\"devs\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"),
        "{}",
        e.message
    );
    // What bob holds he may hand on, through a parent too.
    roles
        .create(
            &PostParams::default(),
            &dynamic(json!({
            "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "AccessRole",
            "metadata": {"name": "pod-reader"},
            "spec": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}})),
        )
        .await
        .expect("no escalation");
    let ab = policy("AccessBinding", "accessbindings");
    let bindings: Api<kube::api::DynamicObject> = Api::namespaced_with(bob.clone(), "default", &ab);
    bindings
        .create(&PostParams::default(), &dynamic(json!({
            "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "AccessBinding",
            "metadata": {"name": "carol-reads"},
            "spec": {"roleRef": {"name": "pod-reader"}, "subjects": [{"kind": "User", "name": "carol"}]}})))
        .await
        .expect("binding what bob holds");
    let e = api_error(
        bindings
            .create(
                &PostParams::default(),
                &dynamic(json!({
                "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "AccessBinding",
                "metadata": {"name": "bob-is-admin"},
                "spec": {"roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
                         "subjects": [{"kind": "User", "name": "bob"}]}})),
            )
            .await
            .expect_err("escalation through a binding"),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message
            .contains("is attempting to grant RBAC permissions not currently held"),
        "{}",
        e.message
    );
    // A Deny binding takes away only: bob may write it whatever it names.
    bindings
        .create(
            &PostParams::default(),
            &dynamic(json!({
            "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "AccessBinding",
            "metadata": {"name": "carol-never-admin"},
            "spec": {"roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}, "effect": "Deny",
                     "subjects": [{"kind": "User", "name": "carol"}]}})),
        )
        .await
        .expect("deny bindings take away");
    // …and it wins over the Allow: carol reads no pods.
    let carol = c
        .server
        .client_as(UserInfo::new("carol", ["system:authenticated"]));
    let e = api_error(
        Api::<Pod>::default_namespaced(carol)
            .get("x")
            .await
            .expect_err("denied"),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.ends_with(r#"kubeforge: denied by AccessBinding "carol-never-admin" in namespace "default" (Deny) of ClusterRole "cluster-admin" to User "carol": rule 0 {APIGroups:["*"], Resources:["*"], Verbs:["*"]} of ClusterRole "cluster-admin""#),
        "{}",
        e.message
    );
}

/// A PEM certificate request for `cn` in `orgs`, signed by a new key.
fn csr_pem(cn: &str, orgs: &[&str]) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    for o in orgs {
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, *o);
    }
    p.serialize_request(&key)
        .expect("request")
        .pem()
        .expect("pem")
}

fn csr_object(name: &str, signer: &str, pem: &str) -> serde_json::Value {
    use base64::Engine;
    json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                 "signerName": signer, "usages": ["client auth"]}})
}

/// Grant `user` the cluster-wide `rules` through a ClusterRole and
/// ClusterRoleBinding named `name`.
async fn grant(admin: &Client, name: &str, user: &str, rules: serde_json::Value) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &PostParams::default(),
            &rbac(json!({"metadata": {"name": name}, "rules": rules})),
        )
        .await
        .expect("role");
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "User", "name": user}]})))
        .await
        .expect("binding");
}

/// kube's CertificateSubjectRestriction, CertificateApproval and
/// CertificateSigning, as their `admission_test.go` cases pin them: a
/// user who may create, approve (`/approval`) and write `/status` of CSRs
/// gets no `system:masters` certificate, approves only for signers he may
/// `approve`, and signs only with `sign`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrs_are_approved_and_signed_only_with_rights_on_their_signer() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    grant(&admin, "csr-writer", "bob", json!([
        {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get", "list"]},
        {"apiGroups": ["certificates.k8s.io"],
         "resources": ["certificatesigningrequests/approval", "certificatesigningrequests/status"], "verbs": ["update"]}]))
    .await;
    let csrs: Api<Csr> = Api::all(c.client(Some("bob-token")));
    let client = "kubernetes.io/kube-apiserver-client";
    let forbidden = |name: &str, why: &str| {
        format!(r#"certificatesigningrequests.certificates.k8s.io "{name}" is forbidden: {why}"#)
    };
    // (name, signer, subject organizations, refusal)
    let creates: &[(&str, &str, &[&str], Option<String>)] = &[
        (
            "masters",
            client,
            &["system:masters"],
            Some(forbidden(
                "masters",
                "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed",
            )),
        ),
        (
            "masters-among-others",
            client,
            &["devs", "system:masters"],
            Some(forbidden(
                "masters-among-others",
                "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed",
            )),
        ),
        // Another signer decides its own subjects.
        (
            "other-signer",
            "example.com/signer",
            &["system:masters"],
            None,
        ),
        ("devs", client, &["devs"], None),
    ];
    for (name, signer, orgs, refusal) in creates {
        let got = csrs
            .create(
                &PostParams::default(),
                &serde_json::from_value(csr_object(name, signer, &csr_pem("carol", orgs)))
                    .expect("csr"),
            )
            .await;
        match refusal {
            Some(m) => {
                let e = api_error(got.expect_err(name));
                assert_eq!((e.code, e.message.as_str()), (403, m.as_str()), "{name}");
            }
            None => {
                got.expect(name);
            }
        }
    }
    // Malformed requests are refused before anything is stored.
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut bad = csr_object("bad-pem", client, "");
    bad["spec"]["request"] = json!(b64(
        "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"
    ));
    let e = api_error(
        csrs.create(
            &PostParams::default(),
            &serde_json::from_value(bad).expect("csr"),
        )
        .await
        .expect_err("bad pem"),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.starts_with(r#"CertificateSigningRequest.certificates.k8s.io "bad-pem" is invalid: spec.request: Invalid value: []byte{...}: x509: malformed certificate request"#),
        "{}",
        e.message
    );
    assert!(csrs.get_opt("bad-pem").await.expect("get").is_none());

    // Approving needs `approve` on the signer (kubectl certificate approve
    // writes /approval).
    let dir =
        TempDir(std::env::temp_dir().join(format!("kubeforge-access-csr-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let bob = c.kubeconfig(&dir.0, Some("bob-token"));
    let out = kubectl(&bob, &["certificate", "approve", "devs"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&forbidden(
            "devs",
            r#"user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client""#
        )),
        "{}",
        text(&out.stderr)
    );
    // `signers/<domain>/*` is enough, as in kube.
    grant(
        &admin,
        "approver",
        "bob",
        json!([
        {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
         "resourceNames": ["kubernetes.io/*"], "verbs": ["approve"]}]),
    )
    .await;
    let out = kubectl(&bob, &["certificate", "approve", "devs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = kubectl(&bob, &["certificate", "deny", "other-signer"]);
    assert!(
        text(&out.stderr).contains(
            r#"user not permitted to approve requests with signerName "example.com/signer""#
        ),
        "{}",
        text(&out.stderr)
    );
    // Writing a certificate needs `sign`.
    let mut issued = csrs.get("devs").await.expect("get");
    issued
        .status
        .get_or_insert_with(Default::default)
        .certificate = Some(k8s_openapi::ByteString(c.ca.pem.clone().into_bytes()));
    let e = api_error(
        csrs.replace_status("devs", &PostParams::default(), &issued)
            .await
            .expect_err("no sign right"),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (403, forbidden("devs", r#"user not permitted to sign requests with signerName "kubernetes.io/kube-apiserver-client""#).as_str())
    );
    grant(
        &admin,
        "signer",
        "bob",
        json!([
        {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
         "resourceNames": ["kubernetes.io/kube-apiserver-client"], "verbs": ["sign"]}]),
    )
    .await;
    csrs.replace_status("devs", &PostParams::default(), &issued)
        .await
        .expect("signed with the right");
}

/// kube's `ValidateRole*`/`ValidateRoleBinding*` cases: what the writer
/// may grant is judged only for references kube understands, and a
/// binding's `roleRef` never changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_objects_are_validated_and_role_refs_are_fixed() {
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    // bob holds everything in example.com and may create bindings.
    grant(&admin, "example-admin", "bob", json!([
        {"apiGroups": ["example.com"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "clusterrolebindings"], "verbs": ["create"]}]))
    .await;
    let post = |token: &'static str, plural: &'static str, body: serde_json::Value| {
        let client = c.client(Some(token));
        async move {
            let ns = if plural.starts_with("cluster") {
                ""
            } else {
                "default"
            };
            let ar = kube::discovery::ApiResource {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                api_version: "rbac.authorization.k8s.io/v1".into(),
                kind: String::new(),
                plural: plural.into(),
            };
            let api: Api<kube::api::DynamicObject> = if ns.is_empty() {
                Api::all_with(client, &ar)
            } else {
                Api::namespaced_with(client, ns, &ar)
            };
            api.create(&PostParams::default(), &dynamic(body)).await
        }
    };
    let binding =
        |kind: &str, name: &str, role_ref: serde_json::Value, subjects: serde_json::Value| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
               "metadata": {"name": name}, "roleRef": role_ref, "subjects": subjects})
        };
    let user = json!([{"kind": "User", "name": "bob"}]);
    let invalid = |kind: &str, name: &str, causes: &str| {
        format!(r#"{kind}.rbac.authorization.k8s.io "{name}" is invalid: {causes}"#)
    };
    // (token, plural, object, 422 message)
    let cases = vec![
        (
            "bob-token",
            "rolebindings",
            binding(
                "RoleBinding",
                "sneaky",
                json!({"apiGroup": "example.com", "kind": "ClusterRole", "name": "cluster-admin"}),
                user.clone(),
            ),
            invalid(
                "RoleBinding",
                "sneaky",
                r#"roleRef.apiGroup: Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io""#,
            ),
        ),
        (
            "bob-token",
            "clusterrolebindings",
            binding(
                "ClusterRoleBinding",
                "sneaky",
                json!({"apiGroup": "example.com", "kind": "ClusterRole", "name": "cluster-admin"}),
                user.clone(),
            ),
            invalid(
                "ClusterRoleBinding",
                "sneaky",
                r#"roleRef.apiGroup: Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io""#,
            ),
        ),
        (
            "admin-token",
            "clusterrolebindings",
            binding(
                "ClusterRoleBinding",
                "role-kind",
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"}),
                user.clone(),
            ),
            invalid(
                "ClusterRoleBinding",
                "role-kind",
                r#"roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole""#,
            ),
        ),
        (
            "admin-token",
            "rolebindings",
            binding(
                "RoleBinding",
                "odd",
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Secret", "name": "a/b"}),
                json!([{"kind": "Robot", "name": "r"}, {"kind": "User", "name": "u", "apiGroup": "example.com"},
                        {"kind": "ServiceAccount", "name": "Bad_Name", "apiGroup": "rbac.authorization.k8s.io"}, {"kind": "Group", "name": ""}]),
            ),
            invalid(
                "RoleBinding",
                "odd",
                r#"[roleRef.kind: Unsupported value: "Secret": supported values: "Role", "ClusterRole", roleRef.name: Invalid value: "a/b": may not contain '/', subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group", subjects[1].apiGroup: Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io", subjects[2].name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), subjects[2].apiGroup: Unsupported value: "rbac.authorization.k8s.io": supported values: "", subjects[3].name: Required value]"#,
            ),
        ),
        (
            "admin-token",
            "clusterrolebindings",
            binding(
                "ClusterRoleBinding",
                "sa-without-ns",
                json!({"kind": "ClusterRole", "name": "view"}),
                json!([{"kind": "ServiceAccount", "name": "x"}]),
            ),
            invalid(
                "ClusterRoleBinding",
                "sa-without-ns",
                "subjects[0].namespace: Required value",
            ),
        ),
        (
            "admin-token",
            "roles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
                "rules": [{"verbs": [], "apiGroups": [""], "resources": ["pods"]}, {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
            invalid(
                "Role",
                "r",
                r#"[rules[0].verbs: Required value: verbs must contain at least one value, rules[1].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs]"#,
            ),
        ),
        (
            "admin-token",
            "clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "cr"},
                "aggregationRule": {"clusterRoleSelectors": []},
                "rules": [{"verbs": ["get"], "resources": ["pods"]}]}),
            invalid(
                "ClusterRole",
                "cr",
                "[rules[0].apiGroups: Required value: resource rules must supply at least one api group, aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil]",
            ),
        ),
    ];
    for (token, plural, body, want) in cases {
        let e = api_error(post(token, plural, body).await.expect_err(&want));
        assert_eq!((e.code, e.message.as_str()), (422, want.as_str()));
    }
    // Defaults fill what kube's do: the roleRef group, User subjects' group.
    let made = post(
        "admin-token",
        "rolebindings",
        binding(
            "RoleBinding",
            "defaulted",
            json!({"kind": "ClusterRole", "name": "view"}),
            json!([{"kind": "User", "name": "bob"}]),
        ),
    )
    .await
    .expect("defaulted binding");
    assert_eq!(
        made.data["roleRef"]["apiGroup"],
        "rbac.authorization.k8s.io"
    );
    assert_eq!(
        made.data["subjects"][0]["apiGroup"],
        "rbac.authorization.k8s.io"
    );
    // roleRef is fixed once stored, for everyone.
    let dir =
        TempDir(std::env::temp_dir().join(format!("kubeforge-access-rr-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let kadmin = c.kubeconfig(&dir.0, Some("admin-token"));
    let out = kubectl(
        &kadmin,
        &[
            "patch",
            "rolebinding",
            "defaulted",
            "--type=merge",
            "-p",
            r#"{"roleRef": {"name": "admin"}}"#,
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(r#"The RoleBinding "defaulted" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"admin"}: cannot change roleRef"#),
        "{}",
        text(&out.stderr)
    );
}

/// `curl` to the plain listener as `token` with extra raw header lines
/// (bytes, so values need not be text): (status code, body).
fn curl_raw(c: &Cluster, token: &str, path: &str, headers: &[&[u8]]) -> (u16, String) {
    use std::os::unix::ffi::OsStrExt;
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {token}"));
    for h in headers {
        cmd.arg("-H").arg(std::ffi::OsStr::from_bytes(h));
    }
    let out = cmd.arg(format!("{}{path}", c.url)).output().expect("curl");
    let body = text(&out.stdout);
    let (body, code) = body.rsplit_once('\n').expect("status line");
    (code.trim().parse().expect("code"), body.to_string())
}

/// Impersonation headers are taken as sent: a value that is not UTF-8,
/// or a user named twice differently, is a 400 and acts as nobody; every
/// group asked for, empty too, is authorized before it counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_headers_are_authorized_as_sent() {
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    grant(&admin, "impersonator", "bob", json!([
        {"apiGroups": [""], "resources": ["users"], "resourceNames": ["alice"], "verbs": ["impersonate"]},
        {"apiGroups": [""], "resources": ["groups"], "resourceNames": ["devs"], "verbs": ["impersonate"]}]))
    .await;
    let path = "/api/v1/namespaces/default/configmaps";
    // (headers, status, message the body must hold)
    let cases: &[(&[&[u8]], u16, &str)] = &[
        (
            &[b"Impersonate-User: alice", b"Impersonate-Group: \xffdevs"],
            400,
            "the Impersonate-Group header is not valid UTF-8",
        ),
        (
            &[b"Impersonate-User: \xe9lice"],
            400,
            "the Impersonate-User header is not valid UTF-8",
        ),
        (
            &[b"Impersonate-User: alice", b"Impersonate-User: admin"],
            400,
            "the Impersonate-User header may be given only once",
        ),
        // (curl sends an empty header for `Name;`.)
        (
            &[b"Impersonate-User: alice", b"Impersonate-Group;"],
            403,
            r#"groups is forbidden: User \"bob\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"#,
        ),
        (
            &[
                b"Impersonate-User: alice",
                b"Impersonate-Group: system:masters",
            ],
            403,
            r#"groups \"system:masters\" is forbidden: User \"bob\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"#,
        ),
        // With the rights, it works: alice in devs may not list configmaps.
        (
            &[b"Impersonate-User: alice", b"Impersonate-Group: devs"],
            403,
            r#"configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""#,
        ),
    ];
    for (headers, code, message) in cases {
        let (got, body) = curl_raw(&c, "bob-token", path, headers);
        assert_eq!(got, *code, "{headers:?}: {body}");
        assert!(body.contains(message), "{headers:?}: {body}");
        assert!(body.contains(r#""kind":"Status""#), "{body}");
    }
}

/// The escalation checks judge with the full decision: a user denied
/// `get secrets` by a Deny access binding cannot hand it on through a
/// binding, although RBAC gives it to him; what he is not denied he may
/// still bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_grants_what_an_access_binding_denies_them() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    // RBAC lets bob read secrets and configmaps and bind roles in default.
    for (name, rules) in [
        (
            "reads-all",
            json!([{"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get"]}]),
        ),
        (
            "reads-configmaps",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
        ),
    ] {
        Api::<ClusterRole>::all(admin.clone())
            .create(
                &PostParams::default(),
                &rbac(json!({"metadata": {"name": name}, "rules": rules})),
            )
            .await
            .expect("cluster role");
    }
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &rbac(json!({
            "metadata": {"name": "binder"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"], "verbs": ["create"]},
                      {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "list"]}]})))
        .await
        .expect("role");
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(
            &PostParams::default(),
            &rbac(json!({
            "metadata": {"name": "bob-binds"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
            "subjects": [{"kind": "User", "name": "bob"}]})),
        )
        .await
        .expect("bob binds in default");
    let policies = |kind: &str, plural: &str, ns: Option<&str>| {
        let ar = policy(kind, plural);
        match ns {
            Some(ns) => Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), ns, &ar),
            None => Api::all_with(admin.clone(), &ar),
        }
    };
    policies("ClusterAccessRole", "clusteraccessroles", None)
        .create(
            &PostParams::default(),
            &dynamic(json!({
            "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "ClusterAccessRole",
            "metadata": {"name": "secret-reader"},
            "spec": {"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}})),
        )
        .await
        .expect("role");
    policies("AccessBinding", "accessbindings", Some("default"))
        .create(&PostParams::default(), &dynamic(json!({
            "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "AccessBinding",
            "metadata": {"name": "bob-no-secrets"},
            "spec": {"roleRef": {"kind": "ClusterAccessRole", "name": "secret-reader"}, "effect": "Deny",
                     "subjects": [{"kind": "User", "name": "bob"}]}})))
        .await
        .expect("deny");
    let bob = c.client(Some("bob-token"));
    let bindings: Api<RoleBinding> = Api::namespaced(bob.clone(), "default");
    let to_sa = |name: &str, role: &str| -> RoleBinding {
        rbac(json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "helper", "namespace": "default"}]}))
    };
    // (binding, role, refusal)
    let cases = [
        (
            "helper-all",
            "reads-all",
            Some(
                r#"rolebindings.rbac.authorization.k8s.io "helper-all" is forbidden: user "bob" (groups=["devs" "system:authenticated"]) is attempting to grant RBAC permissions denied to it by an access binding with effect Deny:
{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#,
            ),
        ),
        ("helper-configmaps", "reads-configmaps", None),
    ];
    for (name, role, refusal) in cases {
        let got = bindings
            .create(&PostParams::default(), &to_sa(name, role))
            .await;
        match refusal {
            Some(m) => {
                let e = api_error(got.expect_err(name));
                assert_eq!((e.code, e.message.as_str()), (403, m), "{name}");
            }
            None => {
                got.expect(name);
            }
        }
    }
    // `bind` on the role lets bob hand on what he does not hold, as in
    // kube, but not what he is denied.
    grant(
        &admin,
        "binds-readers",
        "bob",
        json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
         "resourceNames": ["reads-all"], "verbs": ["bind"]}]),
    )
    .await;
    let e = api_error(
        bindings
            .create(
                &PostParams::default(),
                &to_sa("helper-all-bound", "reads-all"),
            )
            .await
            .expect_err("bind does not lift a Deny"),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message
            .contains("denied to it by an access binding with effect Deny"),
        "{}",
        e.message
    );
    // A Role granting it is refused the same way.
    let e = api_error(
        Api::<Role>::namespaced(bob, "default")
            .create(&PostParams::default(), &rbac(json!({"metadata": {"name": "peek"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]})))
            .await
            .expect_err("role"),
    );
    assert_eq!(e.code, 403);
    assert!(e.message.ends_with("denied to it by an access binding with effect Deny:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"), "{}", e.message);
}

/// An aggregated ClusterRole is changed only with every permission, also
/// to remove its rule (which would empty `edit` for everyone bound to it);
/// kube checks when the old or the new object aggregates.
#[tokio::test]
async fn removing_an_aggregation_rule_needs_every_permission() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    Api::<ClusterRole>::all(admin.clone())
        .create(
            &PostParams::default(),
            &rbac(json!({
            "metadata": {"name": "gathers"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}})),
        )
        .await
        .expect("aggregated role");
    grant(&admin, "role-editor", "bob", json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["get", "update", "patch"]}]))
    .await;
    let roles: Api<ClusterRole> = Api::all(c.client(Some("bob-token")));
    let mut role = roles.get("gathers").await.expect("get");
    role.aggregation_rule = None;
    role.rules = Some(Vec::new());
    let e = api_error(
        roles
            .replace("gathers", &PostParams::default(), &role)
            .await
            .expect_err("403"),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            r#"clusterroles.rbac.authorization.k8s.io "gathers" is forbidden: must have cluster-admin privileges to use the aggregationRule"#
        )
    );
    // A plain role bob holds everything of he may still change.
    grant(&admin, "plain", "carol", json!([])).await;
    let mut plain = roles.get("plain").await.expect("get");
    plain
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("team".into(), "a".into());
    roles
        .replace("plain", &PostParams::default(), &plain)
        .await
        .expect("plain update");
}

/// `sourceCIDRs` behind a trusted proxy see the address the proxy
/// appended, not what the client put before it; no address fails closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_conditions_read_forwarded_for_from_the_right() {
    let c = cluster().await;
    c.server.set_trusted_proxies(vec![
        kubeforge_apimachinery::net::IpNet::parse("127.0.0.0/8").expect("cidr"),
    ]);
    let admin = c.client(Some("admin-token"));
    let api = |kind: &str, plural: &str| {
        Api::<kube::api::DynamicObject>::all_with(admin.clone(), &policy(kind, plural))
    };
    api("ClusterAccessRole", "clusteraccessroles")
        .create(&PostParams::default(), &dynamic(json!({
            "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "ClusterAccessRole",
            "metadata": {"name": "cm-reader"},
            "spec": {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}})))
        .await
        .expect("role");
    api("ClusterAccessBinding", "clusteraccessbindings")
        .create(&PostParams::default(), &dynamic(json!({
            "apiVersion": "authz.kubeforge.dev/v1alpha1", "kind": "ClusterAccessBinding",
            "metadata": {"name": "office"},
            "spec": {"roleRef": {"name": "cm-reader"}, "subjects": [{"kind": "User", "name": "bob"}],
                     "conditions": {"sourceCIDRs": ["10.0.0.0/8"]}}})))
        .await
        .expect("binding");
    let path = "/api/v1/namespaces/default/configmaps";
    // (X-Forwarded-For headers, status)
    let cases: &[(&[&[u8]], u16)] = &[
        (&[b"X-Forwarded-For: 10.1.2.3"], 200),
        (&[b"X-Forwarded-For: 10.6.6.6, 203.0.113.7"], 403),
        (
            &[
                b"X-Forwarded-For: 10.6.6.6",
                b"X-Forwarded-For: 203.0.113.7",
            ],
            403,
        ),
        (&[b"X-Forwarded-For: 203.0.113.7, 10.1.2.3"], 200),
        (&[b"X-Forwarded-For: 10.1.2.3, bogus"], 403),
        (&[], 403),
    ];
    for (headers, code) in cases {
        let (got, body) = curl_raw(&c, "bob-token", path, headers);
        assert_eq!(got, *code, "{headers:?}: {body}");
    }
}

/// TokenReview: the token file's tokens are for the API's audiences only,
/// as kube wraps audience-agnostic authenticators.
#[tokio::test]
async fn token_file_tokens_review_only_for_the_api_audiences() {
    let c = cluster().await;
    let admin = c.client(Some("admin-token"));
    let reviews: Api<k8s_openapi::api::authentication::v1::TokenReview> = Api::all(admin);
    let review = |auds: serde_json::Value| {
        serde_json::from_value(json!({"spec": {"token": "bob-token", "audiences": auds}}))
            .expect("review")
    };
    // (audiences asked, authenticated, error)
    let cases = [
        (json!([]), true, None),
        (
            json!(["https://vault.example.com"]),
            false,
            Some("invalid bearer token"),
        ),
    ];
    for (auds, authenticated, error) in cases {
        let r = reviews
            .create(&PostParams::default(), &review(auds.clone()))
            .await
            .expect("review");
        let st = r.status.expect("status");
        assert_eq!(st.authenticated.unwrap_or(false), authenticated, "{auds}");
        assert_eq!(st.error.as_deref(), error, "{auds}");
        if authenticated {
            assert_eq!(st.user.and_then(|u| u.username).as_deref(), Some("bob"));
        }
    }
}

/// A kube-rs client presenting `cert` (over HTTPS).
async fn cert_client(c: &Cluster, dir: &Path, tag: &str, cert: &(String, String)) -> Client {
    let path = c.kubeconfig_cert(dir, tag, cert);
    let kc = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reaches_only_what_its_pods_use() {
    use k8s_openapi::api::core::v1::{Node, Secret};
    let c = cluster().await;
    let dir =
        TempDir(std::env::temp_dir().join(format!("kubeforge-access-node-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("dir");
    let admin = c.client(Some("admin-token"));
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
    for name in ["s1", "s2", "s3"] {
        let s: Secret =
            serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"k": "v"}}))
                .expect("secret");
        secrets
            .create(&PostParams::default(), &s)
            .await
            .expect("secret");
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let bound = |name: &str, node: &str, secret: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "s", "secret": {"secretName": secret}}]}}))
        .expect("pod")
    };
    pods.create(&PostParams::default(), &bound("p1", "n1", "s1"))
        .await
        .expect("p1");
    pods.create(&PostParams::default(), &bound("p2", "n2", "s2"))
        .await
        .expect("p2");

    let n1 = cert_client(
        &c,
        &dir.0,
        "n1",
        &c.ca.client("system:node:n1", &["system:nodes"]),
    )
    .await;
    let n1_secrets: Api<Secret> = Api::namespaced(n1.clone(), "default");
    n1_secrets.get("s1").await.expect("its pod's secret");
    let e = api_error(
        n1_secrets
            .get("s2")
            .await
            .expect_err("another node's pod's secret"),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "secrets \"s2\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'n1' and this object"
    );
    let e = api_error(
        n1_secrets
            .list(&ListParams::default())
            .await
            .expect_err("all secrets"),
    );
    assert_eq!(e.code, 403);
    // A pod bound to n1 just now: its secret is readable at once.
    pods.create(&PostParams::default(), &bound("p3", "n1", "s3"))
        .await
        .expect("p3");
    n1_secrets.get("s3").await.expect("a new pod's secret");

    // Pod status and deletion: only its own pods.
    let n1_pods: Api<Pod> = Api::namespaced(n1.clone(), "default");
    let status = json!({"status": {"phase": "Running"}});
    n1_pods
        .patch_status(
            "p1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .expect("its pod's status");
    let e = api_error(
        n1_pods
            .patch_status(
                "p2",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&status),
            )
            .await
            .expect_err("another node's pod's status"),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            403,
            "pods \"p2\" is forbidden: node \"n1\" can only update pod status for pods with spec.nodeName set to itself"
        )
    );
    let e = api_error(
        n1_pods
            .delete("p2", &DeleteParams::default())
            .await
            .expect_err("delete"),
    );
    assert_eq!(
        e.message,
        "pods \"p2\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
    );
    // Listing pods: only with its own spec.nodeName.
    let mine = n1_pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .expect("its pods");
    assert_eq!(mine.items.len(), 2);
    let e = api_error(
        n1_pods
            .list(&ListParams::default())
            .await
            .expect_err("all pods"),
    );
    assert!(
        e.message
            .ends_with("can only list/watch pods with spec.nodeName field selector"),
        "{}",
        e.message
    );

    // Its own Node only, without restricted labels.
    let nodes: Api<Node> = Api::all(n1.clone());
    let node = |name: &str, labels: serde_json::Value| -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("node")
    };
    let e = api_error(
        nodes
            .create(&PostParams::default(), &node("n2", json!({})))
            .await
            .expect_err("n2"),
    );
    assert_eq!(
        e.message,
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
    );
    let e = api_error(
        nodes
            .create(
                &PostParams::default(),
                &node("n1", json!({"node-restriction.kubernetes.io/db": "yes"})),
            )
            .await
            .expect_err("restricted label"),
    );
    assert_eq!(
        e.message,
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: node-restriction.kubernetes.io/db"
    );
    nodes
        .create(
            &PostParams::default(),
            &node("n1", json!({"kubernetes.io/hostname": "n1"})),
        )
        .await
        .expect("its own node");
    let e = api_error(nodes.get("n2").await.expect_err("another node"));
    assert!(
        e.message
            .ends_with("node 'n1' cannot read 'n2', only its own Node object"),
        "{}",
        e.message
    );

    // Tokens only for pods on it.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(n1.clone(), "default");
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "default"}})).expect("sa");
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &sa)
        .await
        .expect("service account");
    let p2 = pods.get("p2").await.expect("p2");
    let request = |pod: &str, uid: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}}})
    };
    let e = api_error(
        accounts
            .create_subresource::<serde_json::Value, serde_json::Value>(
                "token",
                "default",
                &PostParams::default(),
                &request("p2", p2.metadata.uid.as_deref().unwrap_or_default()),
            )
            .await
            .expect_err("token for another node's pod"),
    );
    assert_eq!(
        e.message,
        "serviceaccounts \"default\" is forbidden: node requested token bound to a pod scheduled on a different node"
    );
    let p1 = pods.get("p1").await.expect("p1");
    accounts
        .create_subresource::<serde_json::Value, serde_json::Value>(
            "token",
            "default",
            &PostParams::default(),
            &request("p1", p1.metadata.uid.as_deref().unwrap_or_default()),
        )
        .await
        .expect("token for its pod");
}

//! Discovery and the objects a real cluster always has, driven with the
//! real kubectl (1.27 and 1.33 for discovery) and kube-rs against
//! `kubeforge up`: aggregated discovery, Service `default/kubernetes` and
//! its endpoints, `componentstatuses`, APIServices, and
//! CertificateSigningRequests with `kubectl certificate approve|deny`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Cluster, TempDir, fixture, versioned_kubectl};
use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

/// A kube-rs client from the kubeconfig `kubeforge up` wrote (HTTPS with
/// the administrator's client certificate), as a user would make one.
async fn client(c: &Cluster) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&c.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kube-rs config");
    kube::Client::try_from(config).expect("kube-rs client")
}

fn port(c: &Cluster) -> i32 {
    c.url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("port in the cluster URL")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Wait (bounded, generously) for a watch-driven condition.
async fn eventually<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Every resource a discovery found, with its scope, verbs and
/// subresources (name and verbs), one line each.
fn flatten(d: &Discovery) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for g in d.groups() {
        for v in g.versions() {
            for (ar, caps) in g.versioned_resources(v) {
                let mut verbs = caps.operations.clone();
                verbs.sort();
                let mut subs: Vec<String> = caps
                    .subresources
                    .iter()
                    .map(|(s, c)| format!("{}{:?}", s.plural, c.operations))
                    .collect();
                subs.sort();
                let scope = match caps.scope {
                    Scope::Namespaced => "ns",
                    Scope::Cluster => "cluster",
                };
                out.insert(format!(
                    "{} {} {} {scope} {verbs:?} {subs:?}",
                    ar.api_version, ar.plural, ar.kind
                ));
            }
        }
    }
    out
}

/// The names `kubectl api-resources -o name` prints for a discovery.
fn kubectl_names(d: &Discovery) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for g in d.groups() {
        // kubectl lists each resource once, in its group's preferred version.
        for (ar, _) in g.recommended_resources() {
            out.insert(if ar.group.is_empty() {
                ar.plural.clone()
            } else {
                format!("{}.{}", ar.plural, ar.group)
            });
        }
    }
    out
}

fn apply_crontab_crd(c: &Cluster, kubectl: &std::path::Path) {
    let crd = fixture("crontab-crd.yaml");
    c.ok(kubectl, &["apply", "-f", &crd.to_string_lossy()]);
}

#[test]
fn aggregated_discovery_lists_what_legacy_discovery_lists() {
    let c = Cluster::start(&[]);
    let kubectl = common::default_kubectl();
    apply_crontab_crd(&c, &kubectl);
    c.ok(
        &kubectl,
        &[
            "wait",
            "--for=condition=Established",
            "crd/crontabs.stable.example.com",
            "--timeout=30s",
        ],
    );
    runtime().block_on(async {
        let client = client(&c).await;
        let legacy = Discovery::new(client.clone()).run().await.expect("legacy");
        let aggregated = Discovery::new(client.clone())
            .run_aggregated()
            .await
            .expect("aggregated discovery");
        let (l, a) = (flatten(&legacy), flatten(&aggregated));
        assert_eq!(l, a, "legacy and aggregated discovery differ");
        for want in [
            "v1 pods Pod ns",
            "apps/v1 deployments Deployment ns",
            "stable.example.com/v1 crontabs CronTab ns",
            "v1 componentstatuses ComponentStatus cluster [\"get\", \"list\"]",
            "apiregistration.k8s.io/v1 apiservices APIService cluster",
            "certificates.k8s.io/v1 certificatesigningrequests CertificateSigningRequest cluster",
        ] {
            assert!(
                a.iter().any(|line| line.starts_with(want)),
                "{want} missing from {a:#?}"
            );
        }
        assert!(
            a.iter().any(|line| line
                .starts_with("certificates.k8s.io/v1 certificatesigningrequests")
                && line.contains("approval")
                && line.contains("status")),
            "CSR approval subresource missing: {a:#?}"
        );

        // The response says what it is; the ETag answers a revalidation with 304.
        let accept =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        let req = http::Request::get("/apis")
            .header("Accept", accept)
            .body(Vec::new())
            .expect("request");
        let resp = client.send(req.map(Into::into)).await.expect("GET /apis");
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"]
            .to_str()
            .expect("content type");
        assert_eq!(
            ct,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        let etag = resp.headers()["etag"].clone();
        let req = http::Request::get("/apis")
            .header("Accept", accept)
            .header("If-None-Match", etag)
            .body(Vec::new())
            .expect("request");
        let resp = client.send(req.map(Into::into)).await.expect("GET /apis");
        assert_eq!(resp.status(), 304);
        // A plain JSON client still gets the legacy list.
        let req = http::Request::get("/apis")
            .header("Accept", "application/json")
            .body(Vec::new())
            .expect("request");
        let resp = client.send(req.map(Into::into)).await.expect("GET /apis");
        assert_eq!(resp.headers()["content-type"], "application/json");
    });
}

/// The paths of the GETs kubectl logged at `-v=6`.
fn logged_gets(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| {
            // `GET http://…/apis?timeout=32s 200 OK` (≤ 1.29) or
            // `"Response" verb="GET" url="http://…"` (≥ 1.30).
            let url = l
                .split_once("GET http")
                .map(|(_, rest)| format!("http{}", rest.split(' ').next().unwrap_or("")))
                .or_else(|| {
                    l.contains("verb=\"GET\"")
                        .then(|| {
                            l.split_once("url=\"")
                                .map(|(_, r)| r.split('"').next().unwrap_or("").to_string())
                        })
                        .flatten()
                })?;
            let path = url.splitn(4, '/').nth(3).unwrap_or("");
            Some(format!("/{}", path.split('?').next().unwrap_or("")))
        })
        .collect()
}

#[test]
fn kubectl_api_resources_with_a_cold_cache_uses_two_requests() {
    let c = Cluster::start(&[]);
    let expected = runtime().block_on(async {
        let legacy = Discovery::new(client(&c).await)
            .run()
            .await
            .expect("legacy");
        kubectl_names(&legacy)
    });
    for minor in [27, 33] {
        let bin = versioned_kubectl(minor);
        let cache = TempDir::new("discovery-cache");
        let cache_dir = cache.0.to_string_lossy().into_owned();
        let out = c.kubectl(
            &bin,
            &[
                "api-resources",
                "-o",
                "name",
                "--cache-dir",
                &cache_dir,
                "-v=6",
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "kubectl 1.{minor}: {stderr}");
        let listed: BTreeSet<String> = stdout.lines().map(str::to_string).collect();
        assert_eq!(listed, expected, "kubectl 1.{minor} api-resources");
        let gets = logged_gets(&stderr);
        assert_eq!(
            gets,
            ["/api", "/apis"],
            "kubectl 1.{minor} fetched discovery in more than the two aggregated documents"
        );
    }
}

#[test]
fn the_kubernetes_service_points_at_the_api_server() {
    let c = Cluster::start(&[]);
    let kubectl = common::default_kubectl();
    let port = port(&c);
    let svc: Value =
        serde_json::from_str(&c.ok(&kubectl, &["get", "svc", "kubernetes", "-o", "json"]))
            .expect("service JSON");
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}])
    );
    assert_eq!(svc["metadata"]["labels"]["component"], "apiserver");
    let table = c.ok(&kubectl, &["get", "svc"]);
    assert!(
        table.lines().any(|l| l.starts_with("kubernetes")
            && l.contains("10.96.0.1")
            && l.contains("443/TCP")),
        "{table}"
    );
    runtime().block_on(async {
        let client = client(&c).await;
        // The endpoints follow the listen address once the server listens.
        let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
        eventually(
            "Endpoints default/kubernetes at the server's port",
            await_condition(eps.clone(), "kubernetes", move |e: Option<&Endpoints>| {
                e.and_then(|e| e.subsets.as_ref())
                    .and_then(|s| s.first())
                    .and_then(|s| s.ports.as_ref())
                    .is_some_and(|p| p.iter().any(|p| p.port == port))
            }),
        )
        .await
        .expect("watch endpoints");
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        let slice = eventually(
            "EndpointSlice kubernetes at the server's port",
            await_condition(
                slices.clone(),
                "kubernetes",
                move |s: Option<&EndpointSlice>| {
                    s.and_then(|s| s.ports.as_ref())
                        .is_some_and(|p| p.iter().any(|p| p.port == Some(port)))
                },
            ),
        )
        .await
        .expect("watch slices")
        .expect("slice");
        assert_eq!(
            slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .map(String::as_str),
            Some("kubernetes")
        );
        assert_eq!(slice.endpoints[0].addresses, ["127.0.0.1"]);

        // Deleted, it comes back (kube's bootstrap controller recreates it).
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let old = services.get("kubernetes").await.expect("service");
        let old_uid = old.metadata.uid.clone().expect("uid");
        services
            .delete("kubernetes", &DeleteParams::default())
            .await
            .expect("delete service");
        let back = eventually(
            "the kubernetes Service to be recreated",
            await_condition(
                services.clone(),
                "kubernetes",
                move |s: Option<&Service>| {
                    s.is_some_and(|s| s.metadata.uid.as_deref() != Some(old_uid.as_str()))
                },
            ),
        )
        .await
        .expect("watch services")
        .expect("service");
        assert_eq!(
            back.spec.and_then(|s| s.cluster_ip).as_deref(),
            Some("10.96.0.1")
        );
        // Endpoints edited by hand are put back.
        let mut e = eps.get("kubernetes").await.expect("endpoints");
        e.subsets = None;
        eps.replace("kubernetes", &PostParams::default(), &e)
            .await
            .expect("replace endpoints");
        eventually(
            "Endpoints default/kubernetes to be reconciled",
            await_condition(eps.clone(), "kubernetes", move |e: Option<&Endpoints>| {
                e.and_then(|e| e.subsets.as_ref())
                    .is_some_and(|s| !s.is_empty())
            }),
        )
        .await
        .expect("watch endpoints");
    });
    let slices = c.ok(&kubectl, &["get", "endpointslices"]);
    assert!(
        slices
            .lines()
            .any(|l| l.starts_with("kubernetes") && l.contains("IPv4") && l.contains("127.0.0.1")),
        "{slices}"
    );
    let eps = c.ok(&kubectl, &["get", "endpoints", "kubernetes"]);
    assert!(eps.contains(&format!("127.0.0.1:{port}")), "{eps}");
}

/// `promtool check metrics` (Debian's prometheus, installed by
/// scripts/test-all.sh) finds nothing to say about `text`.
fn promtool_check(text: &str) {
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool (Debian package prometheus)");
    {
        use std::io::Write as _;
        let mut stdin = promtool.stdin.take().expect("promtool's stdin");
        stdin.write_all(text.as_bytes()).expect("feed promtool");
    }
    let lint = promtool.wait_with_output().expect("promtool ends");
    assert!(
        lint.status.success() && lint.stdout.is_empty() && lint.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
}

/// `kubectl get --raw /metrics` reads the API server's metrics under
/// kube-apiserver's names (the request just made counted as kube counts
/// it), and `system:monitoring` may read them where another user may not.
#[test]
fn kubectl_reads_the_api_servers_metrics() {
    let c = Cluster::start(&[]);
    let kubectl = common::default_kubectl();
    c.ok(&kubectl, &["get", "namespaces"]);
    let text = c.ok(&kubectl, &["get", "--raw", "/metrics"]);
    let listed = text.lines().find(|l| {
        l.starts_with(r#"apiserver_request_total{verb="LIST",dry_run="",group="",version="v1",resource="namespaces",subresource="",scope="cluster",component="apiserver",code="200"}"#)
    });
    let count: f64 = listed
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_default();
    assert!(count >= 1.0, "the LIST of namespaces is counted:\n{text}");
    assert!(text.contains("# TYPE apiserver_request_duration_seconds histogram"));
    assert!(text.contains(r#"apiserver_storage_objects{resource="namespaces"}"#));
    // Clean under Prometheus' own linter (scripts/test-all.sh installs it).
    promtool_check(&text);
    let can = |who: &[&str]| {
        let mut args = vec!["auth", "can-i", "get", "/metrics"];
        args.extend_from_slice(who);
        let out = c.kubectl(&kubectl, &args);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        can(&["--as", "prometheus", "--as-group", "system:monitoring"]),
        "yes"
    );
    assert_eq!(can(&["--as", "eve"]), "no");
}

/// `kubeforge up --state-metrics`: kube-state-metrics' series follow the
/// cluster (a Deployment rolled out, its pods Running, the nodes Ready),
/// clean under promtool; off loopback it refuses to start (exit 2).
#[test]
fn state_metrics_follow_the_cluster() {
    let c = Cluster::start(&["--state-metrics", "127.0.0.1:0"]);
    let url = c
        .state_metrics
        .clone()
        .expect("kubeforge printed the state metrics URL");
    let kubectl = common::default_kubectl();
    c.ok(
        &kubectl,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    c.ok(
        &kubectl,
        &["rollout", "status", "deploy/web", "--timeout=60s"],
    );
    let scrape = || {
        let out = std::process::Command::new("curl")
            .args(["-sf", &url])
            .output()
            .expect("run curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let want = [
        r#"kube_deployment_status_replicas_available{namespace="default",deployment="web"} 2"#,
        r#"kube_deployment_spec_replicas{namespace="default",deployment="web"} 2"#,
        r#"kube_node_status_condition{node="node-0",condition="Ready",status="true"} 1"#,
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = scrape();
        if want.iter().all(|w| text.lines().any(|l| l == *w)) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "state metrics never showed {want:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let running = text
        .lines()
        .filter(|l| l.starts_with("kube_pod_status_phase{namespace=\"default\",pod=\"web-"))
        .filter(|l| l.contains(r#"phase="Running"} 1"#))
        .count();
    assert_eq!(running, 2, "two web pods Running:\n{text}");
    promtool_check(&text);

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["state-metrics", "--listen", "0.0.0.0:0", "--kubeconfig"])
        .arg(&c.kubeconfig)
        .output()
        .expect("run kubeforge state-metrics");
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("only on a loopback address"), "{err}");
    // `up` refuses it before it starts anything (no state directory).
    let state = c.dir.0.join("refused-state");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args([
            "up",
            "--memory",
            "--listen",
            "127.0.0.1:0",
            "--state-metrics",
            "0.0.0.0:0",
            "--data-dir",
        ])
        .arg(&state)
        .output()
        .expect("run kubeforge up");
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("only on a loopback address"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!state.exists(), "nothing was written before the refusal");
}

#[test]
fn componentstatuses_are_read_only_and_deprecated() {
    let c = Cluster::start(&[]);
    let kubectl = common::default_kubectl();
    let out = c.kubectl(&kubectl, &["get", "cs"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: v1 ComponentStatus is deprecated in v1.19+"),
        "{stderr}"
    );
    let header = stdout.lines().next().unwrap_or_default();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "STATUS", "MESSAGE", "ERROR"]
    );
    for name in ["scheduler", "controller-manager", "etcd-0"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [name, "Healthy", "ok"]),
            "{name} not Healthy: {stdout}"
        );
    }
    let one: Value = serde_json::from_str(&c.ok(&kubectl, &["get", "cs", "etcd-0", "-o", "json"]))
        .expect("json");
    assert_eq!(
        one["conditions"],
        json!([{"type": "Healthy", "status": "True", "message": "ok"}])
    );
    let err = c.fails(&kubectl, &["delete", "cs", "scheduler"]);
    assert!(err.contains("MethodNotAllowed"), "{err}");
}

#[test]
fn apiservices_follow_the_served_group_versions() {
    let c = Cluster::start(&[]);
    let kubectl = common::default_kubectl();
    let table = c.ok(&kubectl, &["get", "apiservices"]);
    let header = table.lines().next().unwrap_or_default();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "SERVICE", "AVAILABLE", "AGE"]
    );
    for name in [
        "v1.",
        "v1.apps",
        "v2.autoscaling",
        "v1.certificates.k8s.io",
        "v1.apiregistration.k8s.io",
    ] {
        assert!(
            table.lines().any(
                |l| l.split_whitespace().take(3).collect::<Vec<_>>() == [name, "Local", "True"]
            ),
            "{name} missing or not Local/True: {table}"
        );
    }
    assert!(!table.contains("stable.example.com"), "{table}");
    apply_crontab_crd(&c, &kubectl);
    runtime().block_on(async {
        let api: Api<DynamicObject> = Api::all_with(
            client(&c).await,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
                "apiservices",
            ),
        );
        let created = eventually(
            "APIService v1.stable.example.com",
            await_condition(
                api.clone(),
                "v1.stable.example.com",
                |o: Option<&DynamicObject>| o.is_some(),
            ),
        )
        .await
        .expect("watch")
        .expect("apiservice");
        assert_eq!(created.data["spec"]["group"], "stable.example.com");
        assert_eq!(created.data["spec"]["groupPriorityMinimum"], 1000);
        assert_eq!(created.data["status"]["conditions"][0]["type"], "Available");
        let uid = created.metadata.uid.clone().expect("uid");
        c.ok(&kubectl, &["delete", "crd", "crontabs.stable.example.com"]);
        eventually(
            "APIService v1.stable.example.com to go",
            await_condition(
                api.clone(),
                "v1.stable.example.com",
                conditions::is_deleted(&uid),
            ),
        )
        .await
        .expect("watch");
    });
}

fn csr_manifest(name: &str) -> String {
    std::fs::read_to_string(fixture("csr.yaml"))
        .expect("csr fixture")
        .replace("NAME", name)
}

#[test]
fn kubectl_certificate_approve_and_deny() {
    let c = Cluster::start(&[]);
    let kubectl = common::default_kubectl();
    for name in ["alice", "bob"] {
        let out = c.kubectl_stdin(&kubectl, &["create", "-f", "-"], Some(&csr_manifest(name)));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let table = c.ok(&kubectl, &["get", "csr"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION"
        ]
    );
    assert!(
        table.lines().any(|l| l.starts_with("alice")
            && l.contains("kubernetes.io/kube-apiserver-client")
            && l.contains("24h")
            && l.ends_with("Pending")),
        "{table}"
    );
    let out = c.ok(&kubectl, &["certificate", "approve", "alice"]);
    assert!(out.contains("approved"), "{out}");
    let out = c.ok(&kubectl, &["certificate", "deny", "bob"]);
    assert!(out.contains("denied"), "{out}");
    let table = c.ok(&kubectl, &["get", "csr"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("alice") && l.contains(" Approved")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("bob") && l.ends_with("Denied")),
        "{table}"
    );
    let alice: Value =
        serde_json::from_str(&c.ok(&kubectl, &["get", "csr", "alice", "-o", "json"]))
            .expect("json");
    let cond = &alice["status"]["conditions"][0];
    assert_eq!(
        (
            cond["type"].as_str(),
            cond["status"].as_str(),
            cond["reason"].as_str()
        ),
        (Some("Approved"), Some("True"), Some("KubectlApprove"))
    );
    // The kube-apiserver-client signer issues the approved request.
    let mut table = String::new();
    for _ in 0..200 {
        table = c.ok(&kubectl, &["get", "csr", "alice"]);
        if table.contains("Approved,Issued") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(table.contains("Approved,Issued"), "{table}");
    let issued: Value =
        serde_json::from_str(&c.ok(&kubectl, &["get", "csr", "alice", "-o", "json"]))
            .expect("json");
    assert!(
        issued["status"]["certificate"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{issued}"
    );
    // kubectl refuses to approve a denied request; forced, the server refuses.
    let err = c.fails(&kubectl, &["certificate", "approve", "bob"]);
    assert!(err.contains("is already Denied"), "{err}");

    runtime().block_on(async {
        let api: Api<DynamicObject> = Api::all_with(
            client(&c).await,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("certificates.k8s.io", "v1", "CertificateSigningRequest"),
                "certificatesigningrequests",
            ),
        );
        let mut bob = api.get("bob").await.expect("bob");
        // Approved beside Denied, through /approval: 422.
        let conds = bob.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut both = conds.clone();
        both.push(json!({"type": "Approved", "status": "True", "reason": "Sneaky"}));
        bob.data["status"]["conditions"] = json!(both);
        let err = api
            .replace_subresource("approval", "bob", &PostParams::default(), &bob)
            .await
            .expect_err("approved and denied");
        let kube::Error::Api(status) = err else { panic!("{err}") };
        assert_eq!(status.code, 422);
        assert!(status.message.contains("status.conditions[1].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive"), "{}", status.message);
        // Removing the Denied condition: 422.
        bob.data["status"]["conditions"] = json!([]);
        let err = api
            .replace_subresource("approval", "bob", &PostParams::default(), &bob)
            .await
            .expect_err("removed");
        let kube::Error::Api(status) = err else { panic!("{err}") };
        assert!(status.message.contains("updates may not remove a condition of type \"Denied\""), "{}", status.message);
        // Approval through /status is not allowed either.
        let mut carol = json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": "carol"},
            "spec": api.get("alice").await.expect("alice").data["spec"].clone(),
            "status": {"conditions": [{"type": "Approved", "status": "True"}]},
        });
        let created = api
            .create(&PostParams::default(), &serde_json::from_value(carol.clone()).expect("object"))
            .await
            .expect("create carol");
        assert!(
            created.data["status"].get("conditions").is_none(),
            "a request is never created approved: {:?}",
            created.data
        );
        carol["metadata"]["resourceVersion"] = json!(created.metadata.resource_version);
        let err = api
            .replace_status(
                "carol",
                &PostParams::default(),
                &serde_json::from_value(carol).expect("object"),
            )
            .await
            .expect_err("approval through /status");
        // kube's status strategy keeps Approved/Denied instances, and its
        // validation refuses adding one.
        let kube::Error::Api(status) = err else { panic!("{err}") };
        assert_eq!(status.code, 422);
        assert!(
            status.message.contains(r#"status.conditions: Forbidden: updates may not add a condition of type "Approved""#),
            "{}",
            status.message
        );
        let after = api.get("carol").await.expect("carol");
        assert!(after.data["status"].get("conditions").is_none(), "{:?}", after.data);
    });
}

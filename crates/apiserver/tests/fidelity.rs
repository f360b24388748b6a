//! Where clients see kube-apiserver's exact behaviour:
//!
//! - field selectors as the real `kubectl` uses them: a boolean or integer
//!   field an object does not set reads as kube's Go zero value (`false`,
//!   `0`), a missing string as "", and each kind accepts kube's field labels;
//! - bytes: a `Status` in Go's field order with a trailing newline, objects
//!   leading with `kind`, `apiVersion` and `metadata` in every response;
//! - pod defaults: requests default to limits (SetDefaults_Pod).

use std::path::PathBuf;
use std::process::Command;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use kubeforge_apiserver::ApiServer;
use serde_json::{Value, json};

/// A scratch directory for kubectl's discovery cache, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "kubeforge-field-selectors-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run kubectl against `server`; (success, stdout, stderr).
async fn kubectl(server: &str, cache: &Scratch, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new("kubectl");
    cmd.env("KUBECONFIG", "/dev/null")
        .arg(format!("--server={server}"))
        .arg(format!("--cache-dir={}", cache.0.display()))
        .args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn names(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.rsplit('/').next().unwrap_or(l).to_string())
        .collect();
    v.sort();
    v
}

async fn serve(server: &ApiServer) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_booleans_and_integers_read_as_go_zero_values_in_kubectl() {
    let server = ApiServer::in_memory().await;
    let url = serve(&server).await;
    let cache = Scratch::new();
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, spec) in [
        ("plain", json!({})),
        ("cordoned", json!({"unschedulable": true})),
        ("open", json!({"unschedulable": false})),
    ] {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
    }
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "nodes",
            "--field-selector",
            "spec.unschedulable=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["open", "plain"]);
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "nodes",
            "--field-selector",
            "spec.unschedulable!=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["cordoned"]);
    // Nodes have no metadata.namespace field label.
    let (ok, _, err) = kubectl(
        &url,
        &cache,
        &["get", "nodes", "--field-selector", "metadata.namespace=x"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("field label not supported: metadata.namespace"),
        "{err}"
    );

    // Pods: spec.hostNetwork unset is false.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, host) in [("a", None), ("b", Some(true))] {
        let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
        if let Some(h) = host {
            spec["hostNetwork"] = json!(h);
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "pods",
            "--field-selector",
            "spec.hostNetwork=false",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(names(&out), ["a"]);

    // Services: spec.type and spec.clusterIP are field labels.
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]}
    }))
    .expect("svc");
    svcs.create(&PostParams::default(), &svc)
        .await
        .expect("create svc");
    let (ok, out, err) = kubectl(
        &url,
        &cache,
        &[
            "get",
            "svc",
            "--field-selector",
            "spec.type=ClusterIP",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{err}");
    // `default/kubernetes` (the API server's own Service) is a ClusterIP too.
    assert_eq!(names(&out), ["kubernetes", "web"]);

    // ReplicaSets: status.replicas unset is 0.
    let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .expect("rs");
    rss.create(&PostParams::default(), &rs)
        .await
        .expect("create rs");
    let got = rss
        .list(&ListParams::default().fields("status.replicas=0"))
        .await
        .expect("list");
    assert_eq!(got.items.len(), 1);

    // Namespaces: status.phase and metadata.name only.
    let ns: Api<Namespace> = Api::all(client);
    let active = ns
        .list(&ListParams::default().fields("status.phase=Active,metadata.name=default"))
        .await
        .expect("list ns");
    assert_eq!(active.items.len(), 1);
    let (ok, _, err) = kubectl(
        &url,
        &cache,
        &["get", "ns", "--field-selector", "metadata.namespace="],
    )
    .await;
    assert!(!ok);
    assert!(err.contains("field label not supported"), "{err}");
}

/// One request in-process: (code, body bytes).
async fn raw(server: &ApiServer, method: &str, path: &str, body: &str) -> (u16, Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let resp = server.handle(req).await;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (code, bytes)
}

#[tokio::test]
async fn status_and_objects_are_written_in_go_field_order() {
    let server = ApiServer::in_memory().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":"v"}}"#;
    let (code, created) = raw(&server, "POST", cms, cm).await;
    assert_eq!(code, 201);
    let lead = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#;
    assert!(created.starts_with(lead), "{created:?}");
    // The 409 byte for byte as kube-apiserver writes it.
    let (code, status) = raw(&server, "POST", cms, cm).await;
    assert_eq!(code, 409);
    assert_eq!(
        std::str::from_utf8(&status).expect("utf-8"),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"configmaps \\\"x\\\" already exists\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"x\",\"kind\":\"configmaps\"},\"code\":409}\n"
    );
    // Invalid: details' causes in Go order (reason, message, field).
    let bad = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}"#;
    let (code, status) = raw(&server, "POST", cms, bad).await;
    assert_eq!(code, 422);
    let text = std::str::from_utf8(&status).expect("utf-8");
    assert!(
        text.starts_with("{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"ConfigMap \\\"Bad_Name\\\" is invalid: metadata.name: Invalid value: \\\"Bad_Name\\\": "),
        "{text}"
    );
    assert!(
        text.contains("\"reason\":\"Invalid\",\"details\":{\"name\":\"Bad_Name\",\"kind\":\"ConfigMap\",\"causes\":[{\"reason\":\"FieldValueInvalid\",\"message\":\"Invalid value: \\\"Bad_Name\\\": a lowercase RFC 1123 subdomain"),
        "{text}"
    );
    assert!(
        text.ends_with("\"field\":\"metadata.name\"}]},\"code\":422}\n"),
        "{text}"
    );
    // GET, LIST (envelope and items), update, patch and watch events.
    let (_, got) = raw(&server, "GET", &format!("{cms}/x"), "").await;
    assert!(got.starts_with(lead), "{got:?}");
    let (_, list) = raw(&server, "GET", cms, "").await;
    assert!(
        list.starts_with(br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"#),
        "{list:?}"
    );
    let items = std::str::from_utf8(&list).expect("utf-8");
    assert!(
        items.contains(r#""items":[{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#),
        "{items}"
    );
    let (code, patched) = raw(
        &server,
        "PATCH",
        &format!("{cms}/x"),
        r#"{"data":{"k":"w"}}"#,
    )
    .await;
    assert_eq!(code, 415, "a JSON body is not a patch type");
    let req = Request::builder()
        .method("PATCH")
        .uri(format!("{cms}/x"))
        .header("content-type", "application/merge-patch+json")
        .body(Full::new(Bytes::from_static(br#"{"data":{"k":"w"}}"#)))
        .expect("request");
    let patched_ok = server
        .handle(req)
        .await
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert!(patched_ok.starts_with(lead), "{patched:?} {patched_ok:?}");
    let (_, events) = raw(
        &server,
        "GET",
        &format!("{cms}?watch=true&timeoutSeconds=0"),
        "",
    )
    .await;
    let first = events.split(|b| *b == b'\n').next().unwrap_or_default();
    assert!(
        first.starts_with(
            br#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"#
        ),
        "{events:?}"
    );
}

#[tokio::test]
async fn pod_requests_default_to_limits() {
    let server = ApiServer::in_memory().await;
    let pods: Api<Pod> = Api::default_namespaced(server.client());
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu"},
        "spec": {
            "initContainers": [{"name": "init", "image": "busybox",
                "resources": {"limits": {"cpu": "500m"}}}],
            "containers": [
                {"name": "train", "image": "cuda",
                 "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}}},
                {"name": "side", "image": "envoy",
                 "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "memory": "64Mi"}}},
                {"name": "none", "image": "nginx"}
            ]
        }
    }))
    .expect("pod");
    let got = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let spec = got.spec.expect("spec");
    let requests = |c: &k8s_openapi::api::core::v1::Container| {
        serde_json::to_value(c.resources.as_ref().and_then(|r| r.requests.clone())).expect("json")
    };
    assert_eq!(
        requests(&spec.containers[0]),
        json!({"nvidia.com/gpu": "2", "memory": "1Gi"})
    );
    // Given requests stay; only the missing ones come from the limits.
    assert_eq!(
        requests(&spec.containers[1]),
        json!({"cpu": "100m", "memory": "64Mi"})
    );
    assert_eq!(requests(&spec.containers[2]), Value::Null);
    let init = spec.init_containers.expect("init containers");
    assert_eq!(requests(&init[0]), json!({"cpu": "500m"}));
}

#[tokio::test]
async fn event_source_falls_back_to_the_reporting_controller() {
    let server = ApiServer::in_memory().await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(server.client());
    for (name, source, reporting) in [("a", Some("kubelet"), None), ("b", None, Some("ctl"))] {
        let mut e = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
            "reason": "R", "message": "m", "type": "Normal"});
        if let Some(s) = source {
            e["source"] = json!({"component": s});
        }
        if let Some(r) = reporting {
            e["reportingComponent"] = json!(r);
        }
        let e = serde_json::from_value(e).expect("event");
        events
            .create(&PostParams::default(), &e)
            .await
            .expect("create event");
    }
    for (selector, want) in [("source=kubelet", "a"), ("source=ctl", "b")] {
        let got = events
            .list(&ListParams::default().fields(selector))
            .await
            .expect("list");
        let names: Vec<_> = got
            .items
            .iter()
            .filter_map(|e| e.metadata.name.clone())
            .collect();
        assert_eq!(names, [want], "{selector}");
    }
}

/// `/metrics` as kube-apiserver serves it: requests counted under kube's
/// verbs, scopes and codes, latency in its buckets, object counts by
/// resource, Prometheus text for a plain GET and OpenMetrics when asked;
/// readable by `system:monitoring` and cluster admins, refused to others.
#[tokio::test]
async fn metrics_use_kube_apiservers_names_and_labels() {
    use kubeforge_apiserver::UserInfo;
    let server = ApiServer::in_memory().await;
    server.enable_rbac(true).await.expect("rbac");
    let cms = "/api/v1/namespaces/default/configmaps";
    let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"},"data":{"k":"v"}}"#;
    assert_eq!(raw(&server, "POST", cms, cm).await.0, 201);
    assert_eq!(raw(&server, "GET", cms, "").await.0, 200);
    assert_eq!(raw(&server, "GET", &format!("{cms}/nope"), "").await.0, 404);
    // A dry-run create of a taken name is 409, as kube's
    // DryRunnableStorage.Create answers (it stores nothing either way).
    assert_eq!(
        raw(&server, "POST", &format!("{cms}?dryRun=All"), cm)
            .await
            .0,
        409
    );

    let (code, body) = raw(&server, "GET", "/metrics", "").await;
    assert_eq!(code, 200);
    let text = String::from_utf8(body.to_vec()).expect("utf-8");
    let has = |line: &str| text.lines().any(|l| l == line);
    for line in [
        "# TYPE apiserver_request_total counter",
        r#"apiserver_request_total{verb="CREATE",dry_run="",group="",version="v1",resource="configmaps",subresource="",scope="resource",component="apiserver",code="201"} 1"#,
        r#"apiserver_request_total{verb="LIST",dry_run="",group="",version="v1",resource="configmaps",subresource="",scope="namespace",component="apiserver",code="200"} 1"#,
        r#"apiserver_request_total{verb="GET",dry_run="",group="",version="v1",resource="configmaps",subresource="",scope="resource",component="apiserver",code="404"} 1"#,
        r#"apiserver_request_total{verb="CREATE",dry_run="All",group="",version="v1",resource="configmaps",subresource="",scope="resource",component="apiserver",code="409"} 1"#,
        r#"apiserver_request_duration_seconds_count{verb="LIST",dry_run="",group="",version="v1",resource="configmaps",subresource="",scope="namespace",component="apiserver"} 1"#,
        r#"apiserver_request_sli_duration_seconds_count{verb="LIST",group="",version="v1",resource="configmaps",subresource="",scope="namespace",component="apiserver"} 1"#,
        r#"apiserver_storage_objects{resource="configmaps"} 1"#,
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
        r#"apiserver_resource_objects{group="rbac.authorization.k8s.io",resource="clusterroles"} 0"#,
    ] {
        if line.contains("clusterroles") {
            // Bootstrap roles exist: only the series' presence matters.
            let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            assert!(
                text.lines().any(|l| l.starts_with(series)),
                "{series} in\n{text}"
            );
            continue;
        }
        assert!(has(line), "{line} in\n{text}");
    }
    // The bucket edges the SLO rules read exist; reviews are not stored.
    assert!(text.contains(r#"le="1.0""#) || text.contains(r#"le="1""#));
    assert!(text.contains("kubernetes_build_info{"), "{text}");
    assert!(!text.contains("selfsubjectrulesreviews"), "{text}");
    assert!(
        text.contains(r#"apiserver_current_inflight_requests{request_kind="readOnly"}"#),
        "{text}"
    );
    assert!(!text.contains("# EOF"), "Prometheus text, not OpenMetrics");
    // The dry run was not stored and kept out of the SLI.
    assert!(!text.contains(
        r#"apiserver_request_sli_duration_seconds_count{verb="CREATE",group="",version="v1",resource="configmaps",subresource="",scope="resource",component="apiserver"} 2"#
    ));

    // An open watch is long-running, and counts the events it sends.
    let req = Request::builder()
        .uri(format!("{cms}?watch=1"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let mut watch = server.handle(req).await.into_body();
    let first = watch
        .frame()
        .await
        .expect("an event")
        .expect("a frame")
        .into_data()
        .expect("data");
    assert!(first.starts_with(br#"{"type":"ADDED""#), "{first:?}");
    let text =
        String::from_utf8(raw(&server, "GET", "/metrics", "").await.1.to_vec()).expect("utf-8");
    assert!(
        text.lines().any(|l| l == r#"apiserver_longrunning_requests{verb="WATCH",group="",version="v1",resource="configmaps",subresource="",scope="namespace",component="apiserver"} 1"#),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l
            == r#"apiserver_watch_events_total{group="",version="v1",resource="configmaps"} 1"#),
        "{text}"
    );
    drop(watch);
    // Closed by the client: no longer long-running.
    let closed = r#"apiserver_longrunning_requests{verb="WATCH",group="",version="v1",resource="configmaps",subresource="",scope="namespace",component="apiserver"} 0"#;
    let mut left = false;
    for _ in 0..500 {
        let text =
            String::from_utf8(raw(&server, "GET", "/metrics", "").await.1.to_vec()).expect("utf-8");
        if text.lines().any(|l| l == closed) {
            left = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(left, "the closed watch still counts as long-running");

    let req = Request::builder()
        .uri("/metrics")
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = server.handle(req).await;
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("application/openmetrics-text")
    );
    let om = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(String::from_utf8_lossy(&om).ends_with("# EOF\n"));

    // Who may read it: system:monitoring, not any authenticated user.
    let get = |client: kube::Client| async move {
        let req = Request::builder()
            .uri("/metrics")
            .body(Vec::new())
            .expect("request");
        client.request_text(req).await
    };
    let monitor = server.client_as(UserInfo::new(
        "prometheus",
        ["system:monitoring", "system:authenticated"],
    ));
    assert!(get(monitor).await.is_ok());
    let eve = server.client_as(UserInfo::new("eve", ["system:authenticated"]));
    match get(eve).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected 403, got {other:?}"),
    }
}

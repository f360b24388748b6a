//! Bad input gets a `Status` with the right code and reason, and nothing is
//! lost: malformed bodies, oversized bodies, unknown resources, compacted
//! watch revisions, wrong kinds — sent as raw HTTP requests.

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kubeforge_apiserver::ApiServer;
use kubeforge_store::Store;
use serde_json::{Value, json};

async fn call(
    server: &ApiServer,
    method: Method,
    path: &str,
    ct: &str,
    body: impl Into<Bytes>,
) -> (u16, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(Full::new(body.into()))
        .expect("request");
    let resp = server.handle(req).await;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// The events of a watch request that ends by itself (`timeoutSeconds`),
/// one JSON object per line.
async fn watch_events(server: &ApiServer, req: Request<Full<Bytes>>) -> Vec<Value> {
    let body = server
        .handle(req)
        .await
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("json"))
        .collect()
}

fn reason(v: &Value) -> &str {
    v.get("reason").and_then(Value::as_str).unwrap_or_default()
}

#[tokio::test]
async fn malformed_and_oversized_bodies() {
    let server = ApiServer::in_memory().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, status) = call(&server, Method::POST, path, "application/json", "{not json").await;
    assert_eq!((code, reason(&status)), (400, "BadRequest"));
    assert_eq!(status["kind"], "Status");
    let (code, status) = call(
        &server,
        Method::POST,
        path,
        "application/yaml",
        "a: [unclosed",
    )
    .await;
    assert_eq!((code, reason(&status)), (400, "BadRequest"));
    let (code, _) = call(&server, Method::POST, path, "application/json", "[1,2]").await;
    assert_eq!(code, 400);
    let big = format!(
        "{{\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"x\":\"{}\"}}}}",
        "a".repeat(3 * 1024 * 1024 + 10)
    );
    let (code, status) = call(&server, Method::POST, path, "application/json", big).await;
    assert_eq!((code, reason(&status)), (413, "RequestEntityTooLarge"));
    let (code, status) = call(&server, Method::POST, path, "text/plain", "x").await;
    assert_eq!((code, reason(&status)), (415, "UnsupportedMediaType"));
    // A YAML body is accepted.
    let (code, obj) = call(
        &server,
        Method::POST,
        path,
        "application/yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  a: b\n",
    )
    .await;
    assert_eq!(code, 201, "{obj}");
    // Wrong kind for the path.
    let (code, status) = call(
        &server,
        Method::POST,
        path,
        "application/json",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}).to_string(),
    )
    .await;
    assert_eq!((code, reason(&status)), (400, "BadRequest"));
    // Nothing was stored by the failed requests.
    let (_, list) = call(&server, Method::GET, path, "application/json", "").await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    assert_eq!(names, vec!["from-yaml"]);
}

#[tokio::test]
async fn unknown_paths_and_methods() {
    let server = ApiServer::in_memory().await;
    for path in [
        "/api/v1/nopes",
        "/apis/nope.example.com/v1/things",
        "/apis/apps/v9/deployments",
        "/whatever",
        "/api/v1/namespaces/default/configmaps/x/nosub",
    ] {
        let (code, status) = call(&server, Method::GET, path, "application/json", "").await;
        assert_eq!((code, reason(&status)), (404, "NotFound"), "{path}");
    }
    let (code, status) = call(
        &server,
        Method::GET,
        "/api/v1/namespaces/default/configmaps/missing",
        "application/json",
        "",
    )
    .await;
    assert_eq!((code, reason(&status)), (404, "NotFound"));
    assert_eq!(status.pointer("/details/name"), Some(&json!("missing")));
    assert_eq!(status.pointer("/details/kind"), Some(&json!("configmaps")));
    let (code, _) = call(
        &server,
        Method::PUT,
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        "{}",
    )
    .await;
    assert_eq!(code, 405);
    let (code, _) = call(
        &server,
        Method::GET,
        "/api/v1/namespaces/default/configmaps?limit=abc",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 400);
    let (code, _) = call(
        &server,
        Method::GET,
        "/api/v1/namespaces/default/configmaps?continue=garbage",
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn garbage_never_panics() {
    let server = ApiServer::in_memory().await;
    let paths = [
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/namespaces/default/configmaps/x",
        "/apis/apps/v1/namespaces/default/deployments/x/scale",
        "/api/v1/namespaces/default/pods/x/binding",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "/api/v1/namespaces/x/finalize",
        "/api/v1/namespaces/%ZZ/configmaps",
    ];
    let bodies = [
        "",
        "null",
        "[]",
        "{}",
        "{\"metadata\":[]}",
        "{\"metadata\":{\"name\":5}}",
        "\u{0}\u{1}",
        "{\"spec\":{\"versions\":\"x\"}}",
        "[{\"op\":\"remove\",\"path\":\"/\"}]",
    ];
    let types = [
        "application/json",
        "application/yaml",
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "application/vnd.kubernetes.protobuf",
    ];
    for p in paths {
        for m in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            for b in bodies {
                for t in types {
                    let (code, status) = call(&server, m.clone(), p, t, b.to_string()).await;
                    assert!(code < 500, "{m} {p} {t} {b:?} → {code} {status}");
                }
            }
        }
    }
}

/// A `/scale` write whose body (or patched result) is not an object is a
/// 400, and the replicas stay: the fuzzer's `server_patch` found a merge
/// patch `666.0` to an existing Deployment's scale reaching the field
/// manager as a number.
#[tokio::test]
async fn scale_bodies_that_are_not_objects_are_refused() {
    let server = ApiServer::in_memory().await;
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}
    });
    let (code, status) = call(
        &server,
        Method::POST,
        "/apis/apps/v1/namespaces/default/deployments",
        "application/json",
        deploy.to_string(),
    )
    .await;
    assert_eq!(code, 201, "{status}");
    let scale = "/apis/apps/v1/namespaces/default/deployments/web/scale";
    for (method, ct, body) in [
        (Method::PUT, "application/json", "5"),
        (Method::PUT, "application/json", "[1]"),
        (
            Method::PATCH,
            "application/merge-patch+json",
            "666.000051174290",
        ),
        (
            Method::PATCH,
            "application/strategic-merge-patch+json",
            "\"x\"",
        ),
        (
            Method::PATCH,
            "application/json-patch+json",
            r#"[{"op":"replace","path":"","value":7}]"#,
        ),
    ] {
        let (code, status) = call(&server, method.clone(), scale, ct, body).await;
        assert_eq!(code, 400, "{method} {ct} {body} → {status}");
        assert_eq!(reason(&status), "BadRequest", "{status}");
    }
    let (code, got) = call(&server, Method::GET, scale, "application/json", "").await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["spec"]["replicas"], 2, "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_compacted_revision_is_410_expired() {
    let server = ApiServer::new(Store::memory_with_history(16))
        .await
        .expect("server");
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..40 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("c{i}")}})).expect("cm");
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let req = Request::get("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1")
        .body(Full::new(Bytes::new()))
        .expect("req");
    let resp = server.handle(req).await;
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let line: Value =
        serde_json::from_slice(body.split(|b| *b == b'\n').next().expect("a line")).expect("json");
    assert_eq!(line["type"], "ERROR");
    assert_eq!(line["object"]["code"], 410);
    assert_eq!(line["object"]["reason"], "Expired");
    // kube-rs's watcher recovers by re-listing and sees every object.
    let mut stream = watcher(cms.clone(), watcher::Config::default()).boxed();
    let mut names = std::collections::BTreeSet::new();
    while names.len() < 40 {
        match tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
            .await
            .expect("in time")
            .expect("item")
            .expect("ok")
        {
            watcher::Event::InitApply(cm) | watcher::Event::Apply(cm) => {
                names.insert(cm.metadata.name.unwrap_or_default());
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_ends_with_the_initial_events_bookmark() {
    let server = ApiServer::in_memory().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..3 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}})).expect("cm");
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let req = Request::get("/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")
        .body(Full::new(Bytes::new()))
        .expect("req");
    let events = watch_events(&server, req).await;
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(events[..3].iter().all(|e| e["type"] == "ADDED"));
    assert_eq!(events[3]["type"], "BOOKMARK");
    assert_eq!(
        events[3].pointer("/object/metadata/annotations/k8s.io~1initial-events-end"),
        Some(&json!("true"))
    );
    assert_eq!(events[3]["object"]["kind"], "ConfigMap");
    // kube-rs's streaming-list watcher works end to end.
    let mut stream = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init_done = false;
    let mut seen = 0;
    while !init_done {
        match tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
            .await
            .expect("in time")
            .expect("item")
            .expect("ok")
        {
            watcher::Event::InitApply(_) => seen += 1,
            watcher::Event::InitDone => init_done = true,
            _ => {}
        }
    }
    assert_eq!(seen, 3);
}

async fn names_at(server: &ApiServer, query: &str) -> (u16, Value, Vec<String>) {
    let (code, v) = call(
        server,
        Method::GET,
        &format!("/api/v1/namespaces/default/configmaps?{query}"),
        "application/json",
        "",
    )
    .await;
    let names = v["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| {
                    i.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    (code, v, names)
}

#[tokio::test]
async fn exact_lists_and_consistent_pages() {
    let server = ApiServer::in_memory().await;
    let path = "/api/v1/namespaces/default/configmaps";
    for i in 0..5 {
        let (code, _) = call(
            &server,
            Method::POST,
            path,
            "application/json",
            json!({"metadata": {"name": format!("c{i}")}}).to_string(),
        )
        .await;
        assert_eq!(code, 201);
    }
    let (_, first, _) = names_at(&server, "").await;
    let rv = first
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .expect("rv")
        .to_string();
    // A paged list started now…
    let (_, page1, names1) = names_at(&server, "limit=2").await;
    let token = page1
        .pointer("/metadata/continue")
        .and_then(Value::as_str)
        .expect("token")
        .to_string();
    assert_eq!(names1, vec!["c0", "c1"]);
    // …then the collection changes.
    call(
        &server,
        Method::DELETE,
        &format!("{path}/c3"),
        "application/json",
        "",
    )
    .await;
    call(
        &server,
        Method::POST,
        path,
        "application/json",
        json!({"metadata": {"name": "c9"}}).to_string(),
    )
    .await;
    // Exact reads the old state; latest reads the new one.
    let (code, _, exact) = names_at(
        &server,
        &format!("resourceVersion={rv}&resourceVersionMatch=Exact"),
    )
    .await;
    assert_eq!(
        (code, exact),
        (
            200,
            vec![
                "c0".to_string(),
                "c1".into(),
                "c2".into(),
                "c3".into(),
                "c4".into()
            ]
        )
    );
    let (_, _, latest) = names_at(&server, "").await;
    assert_eq!(latest, vec!["c0", "c1", "c2", "c4", "c9"]);
    // The rest of the paged list is consistent with its first page.
    let (_, page2, names2) = names_at(&server, &format!("limit=10&continue={token}")).await;
    assert_eq!(names2, vec!["c2", "c3", "c4"]);
    assert_eq!(
        page2
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str),
        Some(rv.as_str())
    );
    // Bad combinations.
    let (code, _, _) = names_at(&server, "resourceVersionMatch=Exact").await;
    assert_eq!(code, 400);
    let (code, _, _) = names_at(&server, "resourceVersion=0&resourceVersionMatch=Exact").await;
    assert_eq!(code, 400);
    let (code, _, _) = names_at(
        &server,
        "resourceVersion=999999&resourceVersionMatch=NotOlderThan",
    )
    .await;
    assert_eq!(code, 504);
}

#[tokio::test]
async fn continue_tokens_expire_with_compaction() {
    let server = ApiServer::new(Store::memory_with_history(8))
        .await
        .expect("server");
    let path = "/api/v1/namespaces/default/configmaps";
    for i in 0..3 {
        call(
            &server,
            Method::POST,
            path,
            "application/json",
            json!({"metadata": {"name": format!("c{i}")}}).to_string(),
        )
        .await;
    }
    let (_, page1, _) = names_at(&server, "limit=1").await;
    let token = page1
        .pointer("/metadata/continue")
        .and_then(Value::as_str)
        .expect("token")
        .to_string();
    for i in 0..20 {
        call(
            &server,
            Method::POST,
            path,
            "application/json",
            json!({"metadata": {"name": format!("x{i}")}}).to_string(),
        )
        .await;
    }
    let (code, status, _) = names_at(&server, &format!("limit=1&continue={token}")).await;
    assert_eq!((code, reason(&status)), (410, "Expired"), "{status}");
}

#[tokio::test]
async fn periodic_compaction_keeps_the_configured_window() {
    let server = ApiServer::in_memory().await;
    let _task = server.start_compaction(std::time::Duration::from_millis(20), 5);
    let path = "/api/v1/namespaces/default/configmaps";
    for i in 0..30 {
        call(
            &server,
            Method::POST,
            path,
            "application/json",
            json!({"metadata": {"name": format!("c{i}")}}).to_string(),
        )
        .await;
    }
    let current = server.store().current_revision();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.store().compacted_revision() < current - 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction happened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // A watch inside the window works; one before it is expired.
    let req = Request::get(format!(
        "{path}?watch=true&resourceVersion={}&timeoutSeconds=1",
        current - 2
    ))
    .body(Full::new(Bytes::new()))
    .expect("req");
    let events = watch_events(&server, req).await;
    assert_eq!(
        events.first().map(|e| &e["type"]),
        Some(&Value::from("ADDED"))
    );
    let req = Request::get(format!("{path}?watch=true&resourceVersion=2"))
        .body(Full::new(Bytes::new()))
        .expect("req");
    let body = server
        .handle(req)
        .await
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let first: Value =
        serde_json::from_slice(body.split(|b| *b == b'\n').next().expect("line")).expect("json");
    assert_eq!(first["object"]["code"], 410);
}

#[tokio::test]
async fn field_validation_on_create_update_and_patch() {
    let server = ApiServer::in_memory().await;
    let path = "/apis/apps/v1/namespaces/default/deployments";
    let dep = |extra: Value| {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        if let (Some(spec), Some(e)) = (d["spec"].as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                spec.insert(k.clone(), v.clone());
            }
        }
        d.to_string()
    };
    // Strict: 400 naming the field, nothing stored.
    let (code, status) = call(
        &server,
        Method::POST,
        &format!("{path}?fieldValidation=Strict"),
        "application/json",
        dep(json!({"replicaz": 3})),
    )
    .await;
    assert_eq!((code, reason(&status)), (400, "BadRequest"));
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unknown field \"spec.replicaz\""),
        "{status}"
    );
    // Warn (the default): created, with a Warning header.
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(dep(json!({"replicaz": 3})))))
        .expect("req");
    let resp = server.handle(req).await;
    assert_eq!(resp.status(), 201);
    let warning = resp
        .headers()
        .get("warning")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        warning.starts_with("299 - ") && warning.contains("spec.replicaz"),
        "{warning}"
    );
    // Ignore: no warning.
    let req = Request::put(format!("{path}/d?fieldValidation=Ignore"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(dep(json!({"replicaz": 4})))))
        .expect("req");
    let resp = server.handle(req).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("warning").is_none());
    // Strict on update and on patch.
    let (code, _) = call(
        &server,
        Method::PUT,
        &format!("{path}/d?fieldValidation=Strict"),
        "application/json",
        dep(json!({"bogus": 1})),
    )
    .await;
    assert_eq!(code, 400);
    let (code, status) = call(
        &server,
        Method::PATCH,
        &format!("{path}/d?fieldValidation=Strict"),
        "application/merge-patch+json",
        json!({"spec": {"paused": true, "nope": 1}}).to_string(),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    let (code, obj) = call(
        &server,
        Method::GET,
        &format!("{path}/d"),
        "application/json",
        "",
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        obj.pointer("/spec/paused").is_none(),
        "a rejected patch changed nothing"
    );
}

/// A status write is validated on its status (and metadata) — a bad value
/// there is 422 naming the field, an unknown status field under Strict is
/// 400 — and nothing of the stored object changes when it is refused.
#[tokio::test]
async fn status_writes_validate_the_status() {
    let server = ApiServer::in_memory().await;
    let path = "/api/v1/namespaces/default/pods";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let (code, _) = call(
        &server,
        Method::POST,
        path,
        "application/json",
        pod.to_string(),
    )
    .await;
    assert_eq!(code, 201);
    let status_path = format!("{path}/p/status");
    let merge = "application/merge-patch+json";
    // Wrong types in status: 422 Invalid, the causes name the fields.
    let (code, st) = call(
        &server,
        Method::PATCH,
        &status_path,
        merge,
        json!({"status": {"phase": "Running", "podIP": 5, "containerStatuses": [{"name": "c", "restartCount": "many"}]}}).to_string(),
    )
    .await;
    assert_eq!((code, reason(&st)), (422, "Invalid"), "{st}");
    let fields: Vec<&str> = st
        .pointer("/details/causes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["field"].as_str())
        .collect();
    assert!(fields.contains(&"status.podIP"), "{st}");
    assert!(
        fields.contains(&"status.containerStatuses[0].restartCount"),
        "{st}"
    );
    // An unknown status field under Strict: 400 naming it.
    let (code, st) = call(
        &server,
        Method::PATCH,
        &format!("{status_path}?fieldValidation=Strict"),
        merge,
        json!({"status": {"phase": "Running", "podIPz": "10.0.0.1"}}).to_string(),
    )
    .await;
    assert_eq!((code, reason(&st)), (400, "BadRequest"), "{st}");
    assert!(
        st["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unknown field \"status.podIPz\""),
        "{st}"
    );
    // Nothing refused was kept.
    let (_, got) = call(&server, Method::GET, &format!("{path}/p"), "", "").await;
    assert!(got.pointer("/status/podIP").is_none(), "{got}");
    assert_ne!(
        got.pointer("/status/phase"),
        Some(&json!("Running")),
        "{got}"
    );
    // A valid status write is kept, the spec as stored.
    let (code, got) = call(
        &server,
        Method::PATCH,
        &status_path,
        merge,
        json!({"spec": {"containers": [{"name": "c", "image": "other"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}})
        .to_string(),
    )
    .await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got.pointer("/status/podIP"), Some(&json!("10.0.0.1")));
    assert_eq!(
        got.pointer("/spec/containers/0/image"),
        Some(&json!("nginx"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_of_a_quiet_watch_move_with_the_store() {
    // kube-apiserver's bookmarks carry its current resourceVersion, and one
    // comes 2 s before the watch times out: a client watching a resource
    // nobody writes resumes from there, not from a revision long dropped
    // from the history (which would answer 410 and force a relist).
    let server = ApiServer::in_memory().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let start = cms
        .list(&Default::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let req = Request::get(format!(
        "/api/v1/namespaces/kube-system/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={start}"
    ))
    .body(Full::new(Bytes::new()))
    .expect("req");
    let watch = {
        let server = server.clone();
        tokio::spawn(async move { watch_events(&server, req).await })
    };
    let mut last = 0u64;
    for i in 0..20 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("busy{i}")}})).expect("cm");
        let made = cms
            .create(&PostParams::default(), &cm)
            .await
            .expect("create");
        last = made
            .metadata
            .resource_version
            .and_then(|r| r.parse().ok())
            .expect("numeric rv");
    }
    let events = watch.await.expect("watch task");
    assert!(
        events.iter().all(|e| e["type"] == "BOOKMARK"),
        "only bookmarks on a quiet resource: {events:?}"
    );
    let rv: u64 = events
        .last()
        .and_then(|e| e.pointer("/object/metadata/resourceVersion"))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .expect("a bookmark before the timeout");
    assert!(
        rv >= last,
        "the bookmark's resourceVersion {rv} covers the other writes (last {last})"
    );
}

/// Pods and Services whose names, paths or addresses would reach the
/// host: refused with kube's 422 and nothing stored (the review's hostile
/// objects, and `validation_test.go`'s cases for them).
#[tokio::test]
async fn objects_that_would_take_the_host_are_invalid() {
    let server = ApiServer::in_memory().await;
    let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    // (path, body, message)
    let cases = [
        (
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
                   "spec": {"volumes": [{"name": "/", "emptyDir": {}}],
                            "containers": [{"name": "../../x", "image": "busybox",
                                            "volumeMounts": [{"name": "/", "mountPath": "/host"}]}]}}),
            format!("Pod \"root\" is invalid: [spec.volumes[0].name: Invalid value: \"/\": {label}, spec.containers[0].name: Invalid value: \"../../x\": {label}, spec.containers[0].volumeMounts[0].name: Not found: \"/\"]"),
        ),
        (
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                   "spec": {"selector": {"matchLabels": {"a": "b"}},
                            "template": {"metadata": {"labels": {"a": "b"}},
                                         "spec": {"volumes": [{"name": "cm", "configMap": {"name": "x", "items": [{"key": "k", "path": "/etc/cron.d/x"}]}}],
                                                  "containers": [{"name": "c", "image": "busybox"}]}}}}),
            "Deployment.apps \"d\" is invalid: spec.template.spec.volumes[0].configMap.items[0].path: Invalid value: \"/etc/cron.d/x\": must be a relative path".to_string(),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "capture"},
                   "spec": {"clusterIP": "1.1.1.1", "ports": [{"port": 53}]}}),
            "Service \"capture\" is invalid: spec.clusterIPs: Invalid value: []string{\"1.1.1.1\"}: failed to allocate IP 1.1.1.1: the provided IP (1.1.1.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12".to_string(),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "inject"},
                   "spec": {"clusterIP": "10.96.0.9; flush ruleset", "ports": [{"port": 53}]}}),
            "Service \"inject\" is invalid: spec.clusterIPs[0]: Invalid value: \"10.96.0.9; flush ruleset\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_string(),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "headless-np"},
                   "spec": {"type": "NodePort", "clusterIP": "None", "ports": [{"port": 53}]}}),
            "Service \"headless-np\" is invalid: spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services".to_string(),
        ),
    ];
    for (path, body, message) in cases {
        let (code, status) = call(
            &server,
            Method::POST,
            path,
            "application/json",
            body.to_string(),
        )
        .await;
        assert_eq!(code, 422, "{status}");
        assert_eq!(status["message"], message.as_str(), "{status}");
        let name = body["metadata"]["name"].as_str().expect("name");
        let (code, _) = call(&server, Method::GET, &format!("{path}/{name}"), "", "").await;
        assert_eq!(code, 404, "{name} was stored");
    }
    // What kube accepts still is: a headless Service, an address in range.
    for (name, ip) in [("headless", "None"), ("chosen", "10.96.7.7")] {
        let (code, status) = call(
            &server,
            Method::POST,
            "/api/v1/namespaces/default/services",
            "application/json",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                   "spec": {"clusterIP": ip, "ports": [{"port": 53}]}})
            .to_string(),
        )
        .await;
        assert_eq!(code, 201, "{status}");
        assert_eq!(status["spec"]["clusterIPs"][0], ip);
    }
}

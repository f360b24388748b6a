//! The API server's admission chain against real webhook servers over
//! HTTPS (kubeforge-runtime's), driven by kube-rs: denials and mutations,
//! failurePolicy with the webhook down, kube-system and the configurations
//! themselves exempt, caBundle verification, timeouts, invalid patches,
//! selectors, subresources, oldObject, reinvocation, the service map,
//! dry runs and Warning headers.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use kubeforge_runtime::webhook::{
    ReviewFuture, ReviewHandler, Verdict, WebhookServer, parse_review, respond,
};
use serde_json::json;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "data": {"k": "v"}
    }))
    .expect("configmap")
}

fn hook(
    name: &str,
    url: &str,
    ca: &str,
    resources: &[&str],
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut h = json!({
        "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"url": url, "caBundle": b64(ca)},
        "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": resources}],
    });
    if let (Some(h), Some(extra)) = (h.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            h.insert(k.clone(), v.clone());
        }
    }
    h
}

fn config(kind: &str, name: &str, hooks: Vec<serde_json::Value>) -> serde_json::Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "webhooks": hooks})
}

struct Hooks {
    addr: std::net::SocketAddr,
    ca: String,
    metrics: kubeforge_runtime::webhook::MetricsHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
    _dir: TempDir,
}

impl Hooks {
    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.done.await;
    }
}

async fn start(b: kubeforge_runtime::webhook::WebhookServerBuilder, hosts: Vec<String>) -> Hooks {
    let dir = TempDir::new("hooks");
    let server = b
        .addr("127.0.0.1:0".parse().expect("addr"))
        .cert_dir(dir.0.join("certs"))
        .hosts(hosts)
        .bind()
        .await
        .expect("bind webhook server");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let addr = server.local_addr();
    let ca = server.ca_bundle().to_string();
    let metrics = server.metrics();
    let done = tokio::spawn(async move {
        let _ = server
            .run(async move {
                let _ = rx.await;
            })
            .await;
    });
    Hooks {
        addr,
        ca,
        metrics,
        stop: Some(tx),
        done,
        _dir: dir,
    }
}

fn default_hosts() -> Vec<String> {
    vec!["127.0.0.1".into(), "localhost".into()]
}

fn no_team(req: &AdmissionRequest<ConfigMap>) -> Verdict {
    match req
        .object
        .as_ref()
        .and_then(|c| c.metadata.labels.as_ref())
        .and_then(|l| l.get("team"))
    {
        Some(_) => Verdict::allow().warn("team label checked"),
        None => Verdict::deny("a ConfigMap needs a team label"),
    }
}

fn add_label(_req: &AdmissionRequest<ConfigMap>, cm: &mut ConfigMap) -> Verdict {
    cm.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("defaulted".into(), "yes".into());
    Verdict::allow()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_then_validating_end_to_end() {
    let (server, client) = cluster().await;
    let hooks = start(
        WebhookServer::builder()
            .validator("/validate", no_team)
            .defaulter("/mutate", add_label),
        default_hosts(),
    )
    .await;
    apply_config(
        &client,
        config(
            "MutatingWebhookConfiguration",
            "defaults",
            vec![hook(
                "defaults.example.com",
                &hooks.url("/mutate"),
                &hooks.ca,
                &["configmaps"],
                json!({}),
            )],
        ),
    )
    .await;
    apply_config(
        &client,
        config(
            "ValidatingWebhookConfiguration",
            "team",
            vec![hook(
                "team.example.com",
                &hooks.url("/validate"),
                &hooks.ca,
                &["configmaps"],
                json!({}),
            )],
        ),
    )
    .await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let e = cms
        .create(&PostParams::default(), &cm("anonymous", &[]))
        .await
        .expect_err("denied");
    assert_eq!(status_of(e), (403, "admission webhook \"team.example.com\" denied the request: a ConfigMap needs a team label".to_string()));
    assert!(
        cms.get_opt("anonymous").await.expect("get").is_none(),
        "a denied object is not stored"
    );
    let made = cms
        .create(&PostParams::default(), &cm("owned", &[("team", "a")]))
        .await
        .expect("admitted");
    assert_eq!(
        made.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("defaulted"))
            .map(String::as_str),
        Some("yes"),
        "the mutating webhook's patch was applied"
    );
    // Warnings come back as Warning headers.
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            json!({"metadata": {"name": "warned", "labels": {"team": "b"}}}).to_string(),
        )))
        .expect("request");
    let resp = server.handle(req).await;
    assert_eq!(resp.status(), 201);
    let warnings: Vec<String> = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    assert_eq!(warnings, vec!["299 - \"team label checked\"".to_string()]);
    // kube-system is never sent to webhooks.
    let sys: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    sys.create(&PostParams::default(), &cm("anonymous", &[]))
        .await
        .expect("kube-system is exempt");
    // Dry runs reach the webhooks too (sideEffects None).
    let e = cms
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry", &[]),
        )
        .await
        .expect_err("denied on dry run");
    assert_eq!(status_of(e).0, 403);
    hooks.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_when_the_webhook_is_down() {
    let (_server, client) = cluster().await;
    let hooks = start(
        WebhookServer::builder().validator("/validate", no_team),
        default_hosts(),
    )
    .await;
    let url = hooks.url("/validate");
    let ca = hooks.ca.clone();
    apply_config(
        &client,
        config(
            "ValidatingWebhookConfiguration",
            "team",
            vec![hook(
                "team.example.com",
                &url,
                &ca,
                &["configmaps"],
                json!({"failurePolicy": "Fail"}),
            )],
        ),
    )
    .await;
    hooks.stop().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let (code, msg) = status_of(
        cms.create(&PostParams::default(), &cm("x", &[("team", "a")]))
            .await
            .expect_err("webhook down"),
    );
    assert_eq!(code, 500);
    let prefix = format!(
        "Internal error occurred: failed calling webhook \"team.example.com\": failed to call webhook: Post \"{url}?timeout=10s\": "
    );
    assert!(msg.starts_with(&prefix), "{msg}");
    assert!(msg.contains("refused"), "{msg}");
    // kube-system keeps working, and so does fixing the configuration.
    Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &cm("repair", &[]))
        .await
        .expect("kube-system is never blocked");
    apply_config(
        &client,
        config(
            "ValidatingWebhookConfiguration",
            "team",
            vec![hook(
                "team.example.com",
                &url,
                &ca,
                &["configmaps"],
                json!({"failurePolicy": "Ignore"}),
            )],
        ),
    )
    .await;
    cms.create(&PostParams::default(), &cm("x", &[]))
        .await
        .expect("Ignore lets the request through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_timeouts_and_bad_answers_name_the_webhook() {
    let (_server, client) = cluster().await;
    struct Slow;
    impl ReviewHandler for Slow {
        fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
            Box::pin(async move {
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                let req = parse_review::<DynamicObject>(body)?;
                Ok(respond(&req, Verdict::allow()))
            })
        }
    }
    struct BadPatch;
    impl ReviewHandler for BadPatch {
        fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
            Box::pin(async move {
                let req = parse_review::<DynamicObject>(body)?;
                let patch: json_patch::Patch = serde_json::from_value(
                    json!([{"op": "replace", "path": "/spec/nothing/here", "value": 1}]),
                )
                .map_err(|e| e.to_string())?;
                respond(&req, Verdict::allow())
                    .with_patch(patch)
                    .map_err(|e| e.to_string())
            })
        }
    }
    struct WrongUid;
    impl ReviewHandler for WrongUid {
        fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
            Box::pin(async move {
                let req = parse_review::<DynamicObject>(body)?;
                let mut r = respond(&req, Verdict::allow());
                r.uid = "not-the-request".into();
                Ok(r)
            })
        }
    }
    let hooks = start(
        WebhookServer::builder()
            .handler("/slow", Arc::new(Slow))
            .handler("/bad-patch", Arc::new(BadPatch))
            .handler("/wrong-uid", Arc::new(WrongUid)),
        default_hosts(),
    )
    .await;
    let other_ca =
        kubeforge_runtime::webhook::DevCerts::generate(&TempDir::new("other").0, &default_hosts())
            .expect("other CA")
            .ca_bundle;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cases = [
        (
            "slow.example.com",
            "/slow",
            hooks.ca.clone(),
            json!({"timeoutSeconds": 1}),
            "context deadline exceeded",
            500,
        ),
        (
            "untrusted.example.com",
            "/slow",
            other_ca,
            json!({}),
            "certificate",
            500,
        ),
        (
            "wrong-uid.example.com",
            "/wrong-uid",
            hooks.ca.clone(),
            json!({}),
            "received invalid webhook response: expected response.uid=",
            500,
        ),
    ];
    for (name, path, ca, extra, want, code) in cases {
        apply_config(
            &client,
            config(
                "ValidatingWebhookConfiguration",
                "case",
                vec![hook(name, &hooks.url(path), &ca, &["configmaps"], extra)],
            ),
        )
        .await;
        let (c, msg) = status_of(
            cms.create(&PostParams::default(), &cm("case", &[]))
                .await
                .expect_err(name),
        );
        assert_eq!(c, code, "{msg}");
        assert!(
            msg.starts_with(&format!(
                "Internal error occurred: failed calling webhook \"{name}\""
            )),
            "{msg}"
        );
        assert!(msg.contains(want), "{name}: {msg}");
    }
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
        client.clone(),
    )
    .delete("case", &DeleteParams::default())
    .await
    .expect("the configuration itself is never blocked");
    apply_config(
        &client,
        config(
            "MutatingWebhookConfiguration",
            "bad",
            vec![hook(
                "bad-patch.example.com",
                &hooks.url("/bad-patch"),
                &hooks.ca,
                &["configmaps"],
                json!({"failurePolicy": "Ignore"}),
            )],
        ),
    )
    .await;
    let (c, msg) = status_of(
        cms.create(&PostParams::default(), &cm("patched", &[]))
            .await
            .expect_err("invalid patch"),
    );
    assert_eq!(c, 500);
    assert!(
        msg.contains("webhook \"bad-patch.example.com\" returned an invalid JSONPatch"),
        "{msg}"
    );
    assert!(
        cms.get_opt("patched").await.expect("get").is_none(),
        "no corrupt object is stored"
    );
    hooks.stop().await;
}

#[derive(Default)]
struct Recorder(Mutex<Vec<AdmissionRequest<DynamicObject>>>);

impl ReviewHandler for Recorder {
    fn review<'a>(&'a self, body: &'a [u8]) -> ReviewFuture<'a> {
        let out = parse_review::<DynamicObject>(body).map(|req| {
            let r = respond(&req, Verdict::allow());
            if let Ok(mut seen) = self.0.lock() {
                seen.push(req);
            }
            r
        });
        Box::pin(std::future::ready(out))
    }
}

impl Recorder {
    fn take(&self) -> Vec<AdmissionRequest<DynamicObject>> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selectors_subresources_old_objects_and_services() {
    let (server, client) = cluster().await;
    let rec = Arc::new(Recorder::default());
    let hooks = start(
        WebhookServer::builder().handler("/record", rec.clone()),
        vec!["recorder.hooks.svc".into(), "127.0.0.1".into()],
    )
    .await;
    server.set_service_address("hooks", "recorder", 8443, hooks.addr);
    let svc = json!({"service": {"namespace": "hooks", "name": "recorder", "port": 8443, "path": "/record"}, "caBundle": b64(&hooks.ca)});
    let mut h = hook(
        "record.example.com",
        "unused",
        &hooks.ca,
        &["pods", "pods/status"],
        json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}},
            "objectSelector": {"matchLabels": {"app": "watched"}},
        }),
    );
    h["clientConfig"] = svc;
    apply_config(
        &client,
        config("ValidatingWebhookConfiguration", "record", vec![h]),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod = |name: &str, app: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}})).expect("pod")
    };
    pods.create(&PostParams::default(), &pod("ignored", "other"))
        .await
        .expect("create");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "elsewhere"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    Api::<Pod>::namespaced(client.clone(), "elsewhere")
        .create(&PostParams::default(), &pod("other-ns", "watched"))
        .await
        .expect("create");
    assert!(rec.take().is_empty(), "selectors keep the webhook out");
    pods.create(
        &PostParams {
            field_manager: Some("tester".into()),
            ..Default::default()
        },
        &pod("watched", "watched"),
    )
    .await
    .expect("create");
    pods.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
    )
    .await
    .expect("patch");
    pods.patch_status(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("status");
    pods.delete("watched", &DeleteParams::default())
        .await
        .expect("delete");
    let seen = rec.take();
    let ops: Vec<(String, Option<String>)> = seen
        .iter()
        .map(|r| (format!("{:?}", r.operation), r.sub_resource.clone()))
        .collect();
    assert_eq!(
        ops,
        vec![
            ("Create".to_string(), None),
            ("Update".to_string(), None),
            ("Update".to_string(), Some("status".to_string())),
            ("Delete".to_string(), None),
        ]
    );
    let create = &seen[0];
    assert_eq!(
        create.user_info.username.as_deref(),
        Some("system:apiserver")
    );
    assert!(
        create
            .user_info
            .groups
            .as_ref()
            .is_some_and(|g| g.iter().any(|g| g == "system:masters"))
    );
    assert_eq!(create.namespace.as_deref(), Some("default"));
    assert_eq!(create.resource.resource, "pods");
    assert!(create.old_object.is_none());
    let opts = create
        .options
        .as_ref()
        .map(|o| o.0.clone())
        .unwrap_or_default();
    assert_eq!(opts["kind"], "CreateOptions");
    assert_eq!(opts["fieldManager"], "tester");
    let update = &seen[1];
    assert!(
        update.old_object.is_some() && update.object.is_some(),
        "UPDATE carries oldObject"
    );
    let delete = &seen[3];
    assert!(
        delete.object.is_none() && delete.old_object.is_some(),
        "DELETE carries oldObject only"
    );
    assert_eq!(
        delete.options.as_ref().map(|o| o.0["kind"].clone()),
        Some(json!("DeleteOptions"))
    );
    hooks.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reinvocation_and_dry_run_side_effects() {
    let (_server, client) = cluster().await;
    let calls = Arc::new(Mutex::new(Vec::<String>::new()));
    let (ca, cb) = (calls.clone(), calls.clone());
    let hooks = start(
        WebhookServer::builder()
            .defaulter(
                "/a",
                move |_r: &AdmissionRequest<ConfigMap>, cm: &mut ConfigMap| {
                    let seen_b = cm
                        .metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key("b"));
                    if let Ok(mut c) = ca.lock() {
                        c.push(format!("a(b={seen_b})"));
                    }
                    cm.metadata
                        .labels
                        .get_or_insert_with(BTreeMap::new)
                        .insert("a".into(), "1".into());
                    Verdict::allow()
                },
            )
            .defaulter(
                "/b",
                move |_r: &AdmissionRequest<ConfigMap>, cm: &mut ConfigMap| {
                    if let Ok(mut c) = cb.lock() {
                        c.push("b".into());
                    }
                    cm.metadata
                        .labels
                        .get_or_insert_with(BTreeMap::new)
                        .insert("b".into(), "1".into());
                    Verdict::allow()
                },
            ),
        default_hosts(),
    )
    .await;
    apply_config(
        &client,
        config(
            "MutatingWebhookConfiguration",
            "a",
            vec![hook(
                "a.example.com",
                &hooks.url("/a"),
                &hooks.ca,
                &["configmaps"],
                json!({"reinvocationPolicy": "IfNeeded"}),
            )],
        ),
    )
    .await;
    apply_config(
        &client,
        config(
            "MutatingWebhookConfiguration",
            "b",
            vec![hook(
                "b.example.com",
                &hooks.url("/b"),
                &hooks.ca,
                &["configmaps"],
                json!({}),
            )],
        ),
    )
    .await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let made = cms
        .create(&PostParams::default(), &cm("both", &[]))
        .await
        .expect("create");
    let labels = made.metadata.labels.unwrap_or_default();
    assert_eq!(
        (labels.get("a"), labels.get("b")),
        (Some(&"1".to_string()), Some(&"1".to_string()))
    );
    assert_eq!(
        *calls.lock().expect("calls"),
        vec!["a(b=false)".to_string(), "b".into(), "a(b=true)".into()],
        "a is reinvoked once after b changed the object"
    );
    apply_config(
        &client,
        config(
            "MutatingWebhookConfiguration",
            "b",
            vec![hook(
                "b.example.com",
                &hooks.url("/b"),
                &hooks.ca,
                &["configmaps"],
                json!({"sideEffects": "Unknown"}),
            )],
        ),
    )
    .await;
    let (code, msg) = status_of(
        cms.create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry", &[]),
        )
        .await
        .expect_err("dry run"),
    );
    assert_eq!(
        (code, msg.as_str()),
        (
            400,
            "admission webhook \"b.example.com\" does not support dry run"
        )
    );
    hooks.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_server_refuses_bad_input_with_4xx() {
    let hooks = start(
        WebhookServer::builder().validator("/validate", no_team),
        default_hosts(),
    )
    .await;
    let mut c = Https::connect(hooks.addr, &hooks.ca).await;
    let good = |uid: Option<&str>, kind: &str| {
        let mut req = json!({"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}, "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "x", "namespace": "default", "operation": "CREATE", "userInfo": {}, "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, "dryRun": false});
        if let Some(u) = uid {
            req["uid"] = json!(u);
        }
        serde_json::to_vec(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": kind, "request": req}),
        )
        .expect("json")
    };
    let (s, body) = c
        .post("/validate", good(Some("u1"), "AdmissionReview"))
        .await;
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(
        (
            v["response"]["uid"].clone(),
            v["response"]["allowed"].clone()
        ),
        (json!("u1"), json!(false))
    );
    assert_eq!(
        v["response"]["status"]["message"],
        "a ConfigMap needs a team label"
    );
    let (s, body) = c.post("/validate", b"{not json".to_vec()).await;
    assert_eq!(s, 400);
    assert!(String::from_utf8_lossy(&body).contains("malformed AdmissionReview"));
    let (s, body) = c.post("/validate", good(Some("u2"), "Pod")).await;
    assert_eq!(
        (s, String::from_utf8_lossy(&body).to_string()),
        (
            400,
            "expected kind AdmissionReview, got \"Pod\"".to_string()
        )
    );
    let (s, body) = c.post("/validate", good(None, "AdmissionReview")).await;
    assert_eq!(s, 400);
    assert!(
        String::from_utf8_lossy(&body).contains("uid"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (s, body) = c
        .post("/elsewhere", good(Some("u3"), "AdmissionReview"))
        .await;
    assert_eq!(
        (s, String::from_utf8_lossy(&body).to_string()),
        (404, "no webhook is served at /elsewhere".to_string())
    );
    let (s, _) = c.get("/validate").await;
    assert_eq!(s, 405, "reviews are POSTed");
    let metrics = hooks.metrics.encode();
    for line in [
        "controller_runtime_webhook_requests_total{webhook=\"/validate\",code=\"200\"} 1",
        "controller_runtime_webhook_requests_total{webhook=\"/validate\",code=\"400\"} 3",
        "controller_runtime_webhook_latency_seconds_count{webhook=\"/validate\"} 4",
        "controller_runtime_webhook_requests_in_flight{webhook=\"/validate\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let mut c2 = Https::connect(hooks.addr, &hooks.ca).await;
    let (s, _) = c2
        .post(
            "/validate",
            vec![b' '; kubeforge_runtime::webhook::MAX_REVIEW_BYTES + 1],
        )
        .await;
    assert_eq!(s, 413, "huge reviews are refused");
    hooks.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_are_served_without_restart() {
    let dir = TempDir::new("rotate");
    let certs = dir.0.join("certs");
    let server = WebhookServer::builder()
        .addr("127.0.0.1:0".parse().expect("addr"))
        .cert_dir(certs.clone())
        .reload_every(std::time::Duration::from_millis(100))
        .validator("/validate", no_team)
        .bind()
        .await
        .expect("bind");
    let (addr, first_ca) = (server.local_addr(), server.ca_bundle().to_string());
    tokio::spawn(server.run(std::future::pending()));
    assert_eq!(
        Https::connect(addr, &first_ca)
            .await
            .post("/nothing", vec![])
            .await
            .0,
        404
    );
    // Give the new files a later modification time than the first ones.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let rotated =
        kubeforge_runtime::webhook::DevCerts::generate(&certs, &default_hosts()).expect("rotate");
    assert_ne!(rotated.ca_bundle, first_ca);
    let mut served = false;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if try_handshake(addr, &rotated.ca_bundle).await {
            served = true;
            break;
        }
    }
    assert!(served, "the rotated certificate is served");
    assert!(
        !try_handshake(addr, &first_ca).await,
        "the old CA no longer verifies"
    );
}

async fn try_handshake(addr: std::net::SocketAddr, ca: &str) -> bool {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()).flatten() {
        let _ = roots.add(c);
    }
    let Ok(b) = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions() else {
        return false;
    };
    let config = b.with_root_certificates(roots).with_no_client_auth();
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let Ok(name) = ServerName::try_from("127.0.0.1") else {
        return false;
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .is_ok()
}

/// kube's `ShouldCallHook`: a selector that does not parse fails the
/// request with an internal error whatever `failurePolicy` says (when the
/// rules match); relabelling a namespace cannot take it out of a
/// `kubernetes.io/metadata.name` selector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_selectors_fail_and_relabelled_namespaces_stay_selected() {
    let (_server, client) = cluster().await;
    let rec = Arc::new(Recorder::default());
    let hooks = start(
        WebhookServer::builder().handler("/record", rec.clone()),
        default_hosts(),
    )
    .await;
    let bogus = json!({"matchExpressions": [{"key": "a", "operator": "Sometimes"}]});
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(client.clone());
    let secret = |name: &str| -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("secret")
    };
    for field in ["namespaceSelector", "objectSelector"] {
        // Only for secrets: other requests never evaluate it.
        let secrets_only = hook(
            "broken.example.com",
            &hooks.url("/record"),
            &hooks.ca,
            &["secrets"],
            json!({field: bogus, "failurePolicy": "Ignore"}),
        );
        apply_config(
            &client,
            config(
                "ValidatingWebhookConfiguration",
                "broken",
                vec![secrets_only],
            ),
        )
        .await;
        cms.create(
            &PostParams::default(),
            &cm(&format!("ok-{}", field.to_lowercase()), &[]),
        )
        .await
        .expect("rules that do not match skip the selector");
        let (code, msg) = status_of(
            secrets
                .create(
                    &PostParams::default(),
                    &secret(&format!("s-{}", field.to_lowercase())),
                )
                .await
                .expect_err("an invalid selector fails the request, failurePolicy Ignore or not"),
        );
        assert_eq!(code, 500, "{msg}");
        assert!(
            msg.starts_with(&format!("Internal error occurred: {field}: ")),
            "{msg}"
        );
    }
    assert!(rec.take().is_empty(), "the broken webhook was never called");
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
        client.clone(),
    )
    .delete("broken", &DeleteParams::default())
    .await
    .expect("delete");

    // Selected unless the namespace is kube-system, as the policy server registers.
    let guarded = hook(
        "guard.example.com",
        &hooks.url("/record"),
        &hooks.ca,
        &["configmaps"],
        json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}}),
    );
    apply_config(
        &client,
        config("ValidatingWebhookConfiguration", "guard", vec![guarded]),
    )
    .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    namespaces
        .patch(
            "team",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"kubernetes.io/metadata.name": "kube-system"}}}),
            ),
        )
        .await
        .expect("relabel");
    rec.take();
    Api::<ConfigMap>::namespaced(client.clone(), "team")
        .create(&PostParams::default(), &cm("watched", &[]))
        .await
        .expect("create");
    let seen: Vec<Option<String>> = rec.take().iter().map(|r| r.namespace.clone()).collect();
    assert_eq!(
        seen,
        vec![Some("team".to_string())],
        "the webhook still sees team"
    );
    hooks.stop().await;
}

//! Starting test environments: in-process and loopback (driven with the real
//! `kubectl`), CRDs from Rust types and from YAML directories, parallel
//! environments isolated from each other, built-in controllers on and off,
//! stop and drop.

mod common;

use common::{TempDir, Widget, WidgetSpec, api_status, kubectl_ok, within};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResourceExt, Resource};
use kubeforge_testenv::{Error, TestEnv};

fn widget(name: &str, size: i32) -> Widget {
    let mut w = Widget::new(name, WidgetSpec { size });
    w.metadata.namespace = Some("default".into());
    w
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn in_process_with_a_crd_from_a_rust_type() {
    let env = TestEnv::builder()
        .crd(Widget::crd())
        .start()
        .await
        .expect("start");
    assert!(env.kubeconfig_path().is_none());
    assert!(env.addr().is_none());

    let ns: Api<Namespace> = Api::all(env.client());
    let names: Vec<String> = ns
        .list(&ListParams::default())
        .await
        .expect("list namespaces")
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for want in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }

    // The CRD is Established as start() returns, and its kind is served.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let crd = crds.get("widgets.testenv.example.com").await.expect("crd");
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);
    let widgets: Api<Widget> = Api::default_namespaced(env.client());
    widgets
        .create(&PostParams::default(), &widget("w1", 3))
        .await
        .expect("create widget");
    assert_eq!(widgets.get("w1").await.expect("get").spec.size, 3);

    // After stop(), the store is closed: a client kept around cannot write.
    let kept = env.client();
    env.stop().await;
    let widgets: Api<Widget> = Api::default_namespaced(kept);
    let (code, reason) = api_status(
        widgets
            .create(&PostParams::default(), &widget("late", 1))
            .await,
    );
    assert_eq!((code, reason.as_str()), (503, "ServiceUnavailable"));
}

#[tokio::test]
async fn loopback_serves_kubectl_and_kube_rs() {
    let env = TestEnv::builder()
        .crd(Widget::crd())
        .loopback(true)
        .start()
        .await
        .expect("start");
    let kubeconfig = env.kubeconfig_path().expect("kubeconfig").to_path_buf();
    let addr = env.addr().expect("addr");
    assert!(kubeconfig.is_file());
    let text = std::fs::read_to_string(&kubeconfig).expect("read kubeconfig");
    assert!(text.contains(&format!("server: http://{addr}")), "{text}");

    let home = TempDir::new("kubectl");
    let ns = tokio::task::spawn_blocking({
        let (k, h) = (kubeconfig.clone(), home.0.clone());
        move || kubectl_ok(&k, &h, &["get", "ns"], None)
    })
    .await
    .expect("kubectl task");
    assert!(ns.contains("default") && ns.contains("kube-system"), "{ns}");

    // A custom resource of the builder's CRD, created with kubectl.
    let manifest = "apiVersion: testenv.example.com/v1\nkind: Widget\nmetadata:\n  name: from-kubectl\nspec:\n  size: 4\n";
    let (k, h) = (kubeconfig.clone(), home.0.clone());
    let listed = tokio::task::spawn_blocking(move || {
        let applied = kubectl_ok(&k, &h, &["apply", "-f", "-"], Some(manifest));
        assert!(
            applied.contains("widget.testenv.example.com/from-kubectl created"),
            "{applied}"
        );
        kubectl_ok(&k, &h, &["get", "widgets"], None)
    })
    .await
    .expect("kubectl task");
    assert!(listed.contains("from-kubectl"), "{listed}");

    // The environment's client goes over the same socket.
    let widgets: Api<Widget> = Api::default_namespaced(env.client());
    assert_eq!(widgets.get("from-kubectl").await.expect("get").spec.size, 4);

    // stop() closes the listener and removes the kubeconfig.
    env.stop().await;
    assert!(!kubeconfig.exists());
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn drop_stops_the_loopback_server() {
    let env = TestEnv::builder()
        .loopback(true)
        .start()
        .await
        .expect("start");
    let kubeconfig = env.kubeconfig_path().expect("kubeconfig").to_path_buf();
    let addr = env.addr().expect("addr");
    drop(env);
    assert!(!kubeconfig.exists());
    // The aborted listener task closes its socket when the runtime drops
    // it, right after.
    within("the listener to close", async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_environments_are_isolated() {
    let envs = futures::future::join_all((0..8).map(|i| async move {
        // Two of them serve on loopback, each on its own port.
        let env = TestEnv::builder()
            .crd(Widget::crd())
            .loopback(i % 4 == 0)
            .start()
            .await
            .expect("start");
        let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
        let value = i.to_string();
        cms.create(
            &PostParams::default(),
            &config_map("same-name", &[("env", &value)]),
        )
        .await
        .expect("create");
        let ns: Api<Namespace> = Api::all(env.client());
        let own = Namespace {
            metadata: ObjectMeta {
                name: Some(format!("only-{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        ns.create(&PostParams::default(), &own).await.expect("ns");
        env
    }))
    .await;
    let addrs: Vec<_> = envs.iter().filter_map(TestEnv::addr).collect();
    assert_eq!(addrs.len(), 2);
    assert_ne!(addrs[0], addrs[1]);
    for (i, env) in envs.iter().enumerate() {
        let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
        let got = cms.get("same-name").await.expect("get");
        assert_eq!(
            got.data.unwrap_or_default().get("env"),
            Some(&i.to_string())
        );
        let ns: Api<Namespace> = Api::all(env.client());
        let own: Vec<String> = ns
            .list(&ListParams::default())
            .await
            .expect("list")
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .filter(|n| n.starts_with("only-"))
            .collect();
        assert_eq!(own, [format!("only-{i}")]);
    }
    for env in envs {
        env.stop().await;
    }
}

const CRD_A: &str = r#"---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec: {type: string}
              replicas: {type: integer, minimum: 1}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Cluster
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

const CRD_B: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: memcacheds.cache.example.com
spec:
  group: cache.example.com
  scope: Namespaced
  names: {plural: memcacheds, kind: Memcached}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

fn dynamic(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

#[tokio::test]
async fn crds_from_a_yaml_directory() {
    let dir = TempDir::new("crds");
    std::fs::write(dir.0.join("a_multi.yaml"), CRD_A).expect("write");
    std::fs::write(dir.0.join("b.yml"), CRD_B).expect("write");
    std::fs::write(
        dir.0.join("kustomization.yaml"),
        "resources:\n- a_multi.yaml\n",
    )
    .expect("write");
    std::fs::write(dir.0.join("README.md"), "not yaml: [").expect("write");

    let env = TestEnv::builder()
        .crds_from_dir(&dir.0)
        .start()
        .await
        .expect("start");
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    let mut names: Vec<String> = crds
        .list(&ListParams::default())
        .await
        .expect("list")
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "crontabs.stable.example.com",
            "gadgets.example.com",
            "memcacheds.cache.example.com"
        ]
    );

    // Each is served at once, with its schema (replicas >= 1).
    let ar = dynamic("stable.example.com", "v1", "CronTab", "crontabs");
    let cts: Api<DynamicObject> = Api::default_namespaced_with(env.client(), &ar);
    let mut ct = DynamicObject::new("every-minute", &ar);
    ct.data = serde_json::json!({"spec": {"cronSpec": "* * * * */1", "replicas": 1}});
    cts.create(&PostParams::default(), &ct)
        .await
        .expect("create crontab");
    ct.metadata.name = Some("zero".into());
    ct.data = serde_json::json!({"spec": {"cronSpec": "* * * * */1", "replicas": 0}});
    let (code, reason) = api_status(cts.create(&PostParams::default(), &ct).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    let ar = dynamic("example.com", "v1alpha1", "Gadget", "gadgets");
    let gadgets: Api<DynamicObject> = Api::all_with(env.client(), &ar);
    gadgets
        .create(&PostParams::default(), &DynamicObject::new("g", &ar))
        .await
        .expect("create cluster-scoped gadget");
    env.stop().await;
}

#[tokio::test]
async fn bad_crd_input_is_a_clear_error() {
    let missing = std::env::temp_dir().join("kubeforge-testenv-no-such-dir");
    let e = TestEnv::builder()
        .crds_from_dir(&missing)
        .start()
        .await
        .expect_err("missing dir");
    assert!(matches!(e, Error::ReadCrds { .. }), "{e}");
    assert!(
        e.to_string().contains("kubeforge-testenv-no-such-dir"),
        "{e}"
    );

    let empty = TempDir::new("empty");
    std::fs::write(empty.0.join("cm.yaml"), "apiVersion: v1\nkind: ConfigMap\n").expect("write");
    let e = TestEnv::builder()
        .crds_from_dir(&empty.0)
        .start()
        .await
        .expect_err("no CRDs");
    assert!(matches!(e, Error::NoCrds(_)), "{e}");

    let bad = TempDir::new("bad");
    std::fs::write(bad.0.join("ok.yaml"), CRD_B).expect("write");
    std::fs::write(bad.0.join("z.yaml"), format!("{CRD_B}---\nkind: [\n")).expect("write");
    let e = TestEnv::builder()
        .crds_from_dir(&bad.0)
        .start()
        .await
        .expect_err("bad YAML");
    match &e {
        Error::ParseCrd { path, .. } => assert!(path.ends_with("z.yaml"), "{e}"),
        other => panic!("expected a parse error, got {other}"),
    }

    // A CRD the server refuses (no schema) names the CRD.
    let mut crd = Widget::crd();
    for v in &mut crd.spec.versions {
        v.schema = None;
    }
    let e = TestEnv::builder()
        .crd(crd)
        .start()
        .await
        .expect_err("invalid CRD");
    match &e {
        Error::InstallCrd { name, source } => {
            assert_eq!(name, "widgets.testenv.example.com");
            assert!(
                matches!(source, kube::Error::Api(s) if s.code == 422),
                "{e}"
            );
        }
        other => panic!("expected an install error, got {other}"),
    }
}

#[tokio::test]
async fn builtin_controllers_finish_namespace_deletion_and_collect_dependents() {
    let env = TestEnv::start().await.expect("start");
    let client = env.client();

    // Namespace deletion: Terminating first, then emptied and removed.
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = nss
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some("doomed".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("ns");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    cms.create(&PostParams::default(), &config_map("inside", &[]))
        .await
        .expect("cm");
    nss.delete("doomed", &DeleteParams::default())
        .await
        .expect("delete ns");
    let uid = ns.metadata.uid.clone().expect("uid");
    within(
        "the namespace to be finalized",
        await_condition(nss.clone(), "doomed", conditions::is_deleted(&uid)),
    )
    .await
    .expect("watch");
    assert_eq!(api_status(cms.get("inside").await).0, 404);

    // Owner GC: deleting the owner removes its dependent.
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &config_map("owner", &[]))
        .await
        .expect("owner");
    let mut dependent = config_map("dependent", &[]);
    dependent.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).expect("ref")]);
    let dependent = cms
        .create(&PostParams::default(), &dependent)
        .await
        .expect("dependent");
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    within(
        "the dependent to be collected",
        await_condition(
            cms.clone(),
            "dependent",
            conditions::is_deleted(&dependent.metadata.uid.clone().expect("uid")),
        ),
    )
    .await
    .expect("watch");
    env.stop().await;
}

#[tokio::test]
async fn without_builtin_controllers_nothing_collects() {
    let env = TestEnv::builder()
        .builtin_controllers(false)
        .start()
        .await
        .expect("start");
    assert!(env.controllers().is_none());
    let client = env.client();

    // The server, told no namespace controller runs, deletes a namespace
    // and its contents at once instead of marking it Terminating.
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("gone".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    nss.create(&PostParams::default(), &ns).await.expect("ns");
    nss.delete("gone", &DeleteParams::default())
        .await
        .expect("delete ns");
    assert_eq!(api_status(nss.get("gone").await).0, 404);

    // Foreground deletion adds no finalizer for a GC that is not there:
    // the owner goes at once and its dependent stays, orphaned.
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &config_map("owner", &[]))
        .await
        .expect("owner");
    let mut dependent = config_map("dependent", &[]);
    dependent.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).expect("ref")]);
    cms.create(&PostParams::default(), &dependent)
        .await
        .expect("dependent");
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete owner");
    assert_eq!(api_status(cms.get("owner").await).0, 404);
    let left = cms.get("dependent").await.expect("dependent stays");
    assert_eq!(left.metadata.owner_references.map(|r| r.len()), Some(1));
    env.stop().await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_the_gc_with_controllers_on() {
    let env = TestEnv::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    let owner = cms
        .create(&PostParams::default(), &config_map("owner", &[]))
        .await
        .expect("owner");
    let mut dependent = config_map("dependent", &[]);
    dependent.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).expect("ref")]);
    let dependent = cms
        .create(&PostParams::default(), &dependent)
        .await
        .expect("dependent");
    let deleting = cms
        .delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete owner")
        .left()
        .expect("owner kept until its dependents are gone");
    assert_eq!(
        deleting.metadata.finalizers.unwrap_or_default(),
        ["foregroundDeletion"]
    );
    let (owner_uid, dep_uid) = (
        owner.metadata.uid.clone().expect("uid"),
        dependent.metadata.uid.clone().expect("uid"),
    );
    within("foreground deletion to finish", async {
        await_condition(cms.clone(), "dependent", conditions::is_deleted(&dep_uid))
            .await
            .expect("watch");
        await_condition(cms.clone(), "owner", conditions::is_deleted(&owner_uid))
            .await
            .expect("watch");
    })
    .await;
    env.stop().await;
}

/// An operator's tests can run with the operator's own RBAC: a client
/// acting as its ServiceAccount may do what its Role grants and nothing
/// more, so a manifest missing a permission fails the test.
#[tokio::test]
async fn client_as_runs_with_exactly_the_rbac_it_is_given() {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let env = TestEnv::builder().rbac(true).start().await.expect("env");
    let op = env.client_as(kubeforge_testenv::UserInfo::service_account(
        "default",
        "my-operator",
    ));
    let cms: Api<ConfigMap> = Api::default_namespaced(op.clone());
    assert_eq!(
        api_status(cms.list(&ListParams::default()).await),
        (403, "Forbidden".into())
    );
    let admin = env.client();
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "my-operator"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]}]
    }))
    .expect("role");
    Api::<Role>::default_namespaced(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "my-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "my-operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "my-operator"}]
    }))
    .expect("binding");
    Api::<RoleBinding>::default_namespaced(admin)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
    cms.create(&PostParams::default(), &config_map("made", &[("a", "b")]))
        .await
        .expect("granted");
    let names: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(names.contains(&"made".to_string()), "{names:?}");
    assert_eq!(
        api_status(cms.delete("made", &DeleteParams::default()).await),
        (403, "Forbidden".into()),
        "delete was not granted"
    );
    assert_eq!(
        api_status(
            Api::<ConfigMap>::namespaced(op, "kube-system")
                .list(&ListParams::default())
                .await
        ),
        (403, "Forbidden".into()),
        "only in its namespace"
    );
    env.stop().await;
}

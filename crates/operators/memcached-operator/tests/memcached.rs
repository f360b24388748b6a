//! The Memcached operator end to end on an embedded API server: what
//! `kubectl apply -k config/samples` users see. The first test runs it as
//! its ServiceAccount with exactly the RBAC `make manifests` renders from
//! the code (the test `kubeforge create api` writes, kept); the others run
//! it with full rights. No Deployment controller or kubelet runs here, so
//! where pods are expected the tests play their part: they write the
//! Deployment's status and create the pods, as those controllers would,
//! and check what the operator makes of them.

#![allow(missing_docs, clippy::unwrap_used)]

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubeforge_runtime::{LeaderElection, Manager};
use kubeforge_testenv::{
    Faults, RunningManager as Running, TestEnv, create_namespace, events_about as events_for,
};
use memcached_operator::api::cache::v1alpha1::Memcached;
use memcached_operator::controllers::memcached::{self as controller, FINALIZER, Options, desired};
use memcached_operator::{NAMESPACE, SERVICE_ACCOUNT};
use serde_json::json;

/// A TestEnv with the committed CRDs (the YAML users apply, from
/// `make manifests`) and the built-in garbage collector.
async fn env(faults: Faults, rbac: bool) -> TestEnv {
    TestEnv::builder()
        .crds_from_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/crd/bases"))
        .faults(faults)
        .rbac(rbac)
        .start()
        .await
        .expect("start TestEnv")
}

/// [`kubeforge_testenv::eventually_some`] with the limit in seconds first.
async fn eventually<T, F, Fut>(secs: u64, what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    kubeforge_testenv::eventually_some(what, Duration::from_secs(secs), f).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sample_becomes_available_under_the_generated_rbac() {
    let env = env(Faults::new(), true).await;
    // The rules come from the code, as `make manifests` renders them.
    let declared =
        memcached_operator::manager(env.client(), memcached_operator::Options::default());
    let rules = memcached_operator::permissions(&declared).policy_rules();
    let client = env
        .client_for_service_account(NAMESPACE, SERVICE_ACCOUNT, rules, Vec::new())
        .await
        .expect("grant the operator its RBAC");
    let op = Running::start(memcached_operator::manager(
        client,
        memcached_operator::Options::default(),
    ));

    let admin = env.client();
    let mcs: Api<Memcached> = Api::namespaced(admin.clone(), "default");
    let deps: Api<Deployment> = Api::namespaced(admin.clone(), "default");
    let sample: Memcached = serde_saphyr::from_str(include_str!(
        "../config/samples/cache_v1alpha1_memcached.yaml"
    ))
    .expect("the sample parses");
    mcs.create(&PostParams::default(), &sample).await.unwrap();
    let name = sample.name_any();
    let size = sample.spec.size;
    eventually(30, "the sample's Deployment", || async {
        deps.get_opt(&name).await.unwrap()
    })
    .await;
    deployment_reports(&deps, &name, size).await;
    let m = eventually(30, "the sample Available", || async {
        let m = mcs.get(&name).await.unwrap();
        (condition(&m, "Available").map(|c| c.0).as_deref() == Some("True")).then_some(m)
    })
    .await;
    assert!(m.finalizers().iter().any(|f| f == FINALIZER));

    // Deleting runs the finalizer's cleanup; then the object is gone.
    mcs.delete(&name, &DeleteParams::default()).await.unwrap();
    eventually(30, "the sample gone", || async {
        mcs.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        matches!(op.stop().await, Some(Ok(()))),
        "the manager stops cleanly"
    );
    env.stop().await;
}

fn options() -> Options {
    Options {
        image: "example.test/memcached:1".into(),
        resync: Duration::from_secs(1),
        max_concurrent_reconciles: 4,
    }
}

fn operator(client: kube::Client) -> Running {
    let mgr = Manager::builder(client).handle_signals(false).build();
    controller::register_with(&mgr, options());
    Running::start(mgr)
}

fn condition(m: &Memcached, type_: &str) -> Option<(String, String)> {
    m.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref()?.replicas
}

/// What the Deployment controller would write once `n` pods are up.
async fn deployment_reports(api: &Api<Deployment>, name: &str, n: i32) {
    let d = api.get(name).await.unwrap();
    let patch = json!({"status": {
        "observedGeneration": d.metadata.generation,
        "replicas": n, "updatedReplicas": n, "readyReplicas": n, "availableReplicas": n,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                        "message": "Deployment has minimum availability."}]
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn pod(client: &kube::Client, ns: &str, m: &Memcached, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": desired::labels(m)},
        "spec": {"containers": [{"name": "memcached", "image": "example.test/memcached:1"}]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &p).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_3_to_1_to_deleted() {
    let env = env(Faults::new(), false).await;
    let client = env.client();
    let ns = "mc-life";
    create_namespace(&client, ns).await;
    let op = operator(client.clone());
    let mcs: Api<Memcached> = Api::namespaced(client.clone(), ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);

    let created = mcs
        .create(
            &PostParams::default(),
            &Memcached::with_size(ns, "cache", 3),
        )
        .await
        .unwrap();
    // A Deployment with 3 replicas, controlled by the Memcached.
    let d = eventually(10, "the Deployment", || async {
        deps.get_opt("cache").await.unwrap()
    })
    .await;
    assert_eq!(replicas(&d), Some(3));
    let owner = &d.owner_references()[0];
    assert_eq!(owner.kind, "Memcached");
    assert_eq!(Some(&owner.uid), created.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));
    let image = d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("example.test/memcached:1"));

    // The finalizer is on, and the status is honest: no pods run yet.
    let m = eventually(10, "a first status", || async {
        let m = mcs.get("cache").await.unwrap();
        condition(&m, "Available").map(|_| m)
    })
    .await;
    assert!(m.finalizers().iter().any(|f| f == FINALIZER));
    assert_eq!(
        condition(&m, "Available"),
        Some(("False".into(), "DeploymentUnavailable".into()))
    );
    assert_eq!(condition(&m, "Progressing").unwrap().0, "True");
    assert_eq!(m.status.as_ref().unwrap().observed_generation, Some(1));

    // The Deployment controller's part: three pods up.
    for i in 0..3 {
        pod(&client, ns, &m, &format!("cache-{i}")).await;
    }
    deployment_reports(&deps, "cache", 3).await;
    let m = eventually(10, "Available=True with 3 nodes", || async {
        let m = mcs.get("cache").await.unwrap();
        let ok = condition(&m, "Available") == Some(("True".into(), "DeploymentAvailable".into()))
            && m.status.as_ref().unwrap().nodes.len() == 3;
        ok.then_some(m)
    })
    .await;
    assert_eq!(
        m.status.as_ref().unwrap().nodes,
        vec!["cache-0", "cache-1", "cache-2"]
    );
    assert_eq!(
        condition(&m, "Progressing"),
        Some(("False".into(), "ReconcileComplete".into()))
    );
    assert_eq!(condition(&m, "Degraded").unwrap().0, "False");
    assert!(m.status.as_ref().unwrap().last_updated.is_some());

    // size 3 → 1: the Deployment is scaled, the status follows generation 2.
    mcs.patch(
        "cache",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"size": 1}})),
    )
    .await
    .unwrap();
    eventually(10, "the Deployment scaled to 1", || async {
        (replicas(&deps.get("cache").await.unwrap()) == Some(1)).then_some(())
    })
    .await;
    let m = eventually(10, "status for generation 2", || async {
        let m = mcs.get("cache").await.unwrap();
        (m.status.as_ref()?.observed_generation == Some(2)).then_some(m)
    })
    .await;
    // The Deployment controller has not caught up with the new size yet.
    assert_eq!(condition(&m, "Progressing").unwrap().0, "True");
    let evs = events_for(&client, ns, "cache").await;
    assert!(
        evs.iter().any(|e| e.reason.as_deref() == Some("Scaled")),
        "a Scaled event: {evs:?}"
    );

    // A Deployment deleted by hand comes back.
    let old_uid = deps.get("cache").await.unwrap().uid();
    deps.delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    let back = eventually(10, "the Deployment recreated", || async {
        let d = deps.get_opt("cache").await.unwrap()?;
        (d.uid() != old_uid && d.metadata.deletion_timestamp.is_none()).then_some(d)
    })
    .await;
    assert_eq!(replicas(&back), Some(1));

    // Delete: the finalizer runs (Warning event), the Memcached goes, and the
    // garbage collector removes the Deployment.
    mcs.delete("cache", &DeleteParams::default()).await.unwrap();
    eventually(10, "the Memcached gone", || async {
        mcs.get_opt("cache").await.unwrap().is_none().then_some(())
    })
    .await;
    let evs = events_for(&client, ns, "cache").await;
    let warning = evs
        .iter()
        .find(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("Deleting"))
        .unwrap_or_else(|| panic!("a Warning Deleting event: {evs:?}"));
    assert!(
        warning
            .message
            .as_deref()
            .unwrap_or("")
            .contains("is being deleted")
    );
    eventually(15, "the Deployment garbage-collected", || async {
        deps.get_opt("cache").await.unwrap().is_none().then_some(())
    })
    .await;
    op.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn someone_elses_deployment_is_not_taken_over() {
    let env = env(Faults::new(), false).await;
    let client = env.client();
    let ns = "mc-foreign";
    create_namespace(&client, ns).await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let foreign: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cache"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "x", "image": "x"}]}}}
    }))
    .unwrap();
    deps.create(&PostParams::default(), &foreign).await.unwrap();
    let op = operator(client.clone());
    let mcs: Api<Memcached> = Api::namespaced(client.clone(), ns);
    mcs.create(
        &PostParams::default(),
        &Memcached::with_size(ns, "cache", 3),
    )
    .await
    .unwrap();
    let m = eventually(10, "Degraded=True", || async {
        let m = mcs.get("cache").await.unwrap();
        (condition(&m, "Degraded")?.0 == "True").then_some(m)
    })
    .await;
    assert_eq!(condition(&m, "Degraded").unwrap().1, "DeploymentFailed");
    assert!(
        mcs.get("cache")
            .await
            .unwrap()
            .status
            .unwrap()
            .conditions
            .iter()
            .any(|c| c.message.contains("not controlled by this Memcached"))
    );
    // Left alone.
    assert_eq!(replicas(&deps.get("cache").await.unwrap()), Some(2));
    op.stop().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sizes_are_refused_naming_the_field() {
    let env = env(Faults::new(), false).await;
    let client = env.client();
    let mcs: Api<Memcached> = Api::namespaced(client.clone(), "default");
    for (size, words) in [
        (0, "greater than or equal to 1"),
        (100, "less than or equal to 5"),
    ] {
        let err = mcs
            .create(
                &PostParams::default(),
                &Memcached::with_size("default", "bad", size),
            )
            .await
            .unwrap_err();
        let kube::Error::Api(status) = err else {
            panic!("expected an API error, got {err:?}")
        };
        assert_eq!(status.code, 422, "{status:?}");
        assert!(status.message.contains("spec.size"), "{}", status.message);
        assert!(status.message.contains(words), "{}", status.message);
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_with_leader_election() {
    let env = env(Faults::new(), false).await;
    let client = env.client();
    let ns = "mc-leader";
    create_namespace(&client, ns).await;
    let replica = |id: &str| {
        let election = LeaderElection::new("memcached-operator-lock", ns)
            .identity(id)
            .lease_duration(Duration::from_secs(2))
            .renew_deadline(Duration::from_millis(1500))
            .retry_period(Duration::from_millis(200));
        let mgr = Manager::builder(client.clone())
            .handle_signals(false)
            .leader_election_with(election)
            .build();
        controller::register_with(&mgr, options());
        Running::start(mgr)
    };
    let a = replica("replica-a");
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    eventually(10, "replica-a holding the lease", || async {
        let l = leases.get_opt("memcached-operator-lock").await.unwrap()?;
        (l.spec?.holder_identity? == "replica-a").then_some(())
    })
    .await;
    let b = replica("replica-b");
    let mcs: Api<Memcached> = Api::namespaced(client.clone(), ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for name in ["one", "two"] {
        mcs.create(&PostParams::default(), &Memcached::with_size(ns, name, 2))
            .await
            .unwrap();
    }
    for name in ["one", "two"] {
        eventually(10, "Deployments from the leader", || async {
            deps.get_opt(name).await.unwrap().map(|_| ())
        })
        .await;
    }
    // The Deployment is written inside the reconcile; the counter moves
    // when the reconcile returns, a moment later.
    eventually(10, "the leader's reconciles counted", || async {
        (a.reconciles("memcached") > 0).then_some(())
    })
    .await;
    assert_eq!(b.reconciles("memcached"), 0, "the follower does not");

    // The leader stops without releasing the Lease (as if killed): the
    // other takes over once the lease expires.
    a.stop().await;
    eventually(10, "replica-b leading", || async {
        let l = leases.get_opt("memcached-operator-lock").await.unwrap()?;
        (l.spec?.holder_identity? == "replica-b").then_some(())
    })
    .await;
    mcs.create(
        &PostParams::default(),
        &Memcached::with_size(ns, "three", 1),
    )
    .await
    .unwrap();
    eventually(10, "a Deployment from the new leader", || async {
        deps.get_opt("three").await.unwrap().map(|_| ())
    })
    .await;
    eventually(10, "the new leader's reconciles counted", || async {
        (b.reconciles("memcached") > 0).then_some(())
    })
    .await;
    b.stop().await;
    env.stop().await;
}

//! The {{kind}} controller against an embedded API server, running as the
//! operator's ServiceAccount with exactly the RBAC its code declares (what
//! `config/rbac/role.yaml` holds): remove a declaration the reconciler
//! needs and this test fails. Written once by `kubeforge create api`; yours.

use std::time::Duration;

use kube::api::{Api, DeleteParams, PostParams};
use kubeforge_runtime::conditions;
use kubeforge_testenv::{TestEnv, eventually};
use {{crate}}::api::{{group}}::{{version}}::{ {{kind}}, {{kind}}Spec };
use {{crate}}::{Options, SERVICE_ACCOUNT, NAMESPACE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn {{snake}}_becomes_ready_under_the_generated_rbac() {
    let env = TestEnv::builder()
        .crds({{crate}}::api::crds())
        .rbac(true)
        .start()
        .await
        .expect("start the test environment");
    // The rules come from the code, as `make manifests` renders them.
    let declared = {{crate}}::manager(env.client(), Options::default());
    let rules = {{crate}}::permissions(&declared).policy_rules();
    let client = env
        .client_for_service_account(NAMESPACE, SERVICE_ACCOUNT, rules, Vec::new())
        .await
        .expect("grant the operator its RBAC");
    let mgr = {{crate}}::manager(client, Options::default());
    let stop = mgr.shutdown_handle();
    let running = tokio::spawn(mgr.run());

    let api: Api<{{kind}}> = {{api_in_test}};
    let sample = {{kind}}::new("sample", {{kind}}Spec { size: Some(1) });
    api.create(&PostParams::default(), &sample).await.expect("create the sample");
    eventually("the sample is Ready", Duration::from_secs(30), || async {
        api.get("sample").await.ok().and_then(|o| o.status).is_some_and(|s| {
            conditions::is_true(&s.conditions, "Ready") && s.observed_generation == Some(1)
        })
    })
    .await;

    // Deleting runs the finalizer's cleanup; then the object is gone.
    api.delete("sample", &DeleteParams::default()).await.expect("delete the sample");
    eventually("the sample is gone", Duration::from_secs(30), || async {
        matches!(api.get_opt("sample").await, Ok(None))
    })
    .await;

    stop.shutdown();
    running.await.expect("the manager task").expect("the manager stops cleanly");
    env.stop().await;
}

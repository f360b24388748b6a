//! The {{kind}} {{version}} webhooks through a real API server: the server
//! calls them over HTTPS (development certificates), as a cluster would.
//! Written once by `kubeforge create webhook`; yours.

use kube::api::{Api, PostParams};
use kubeforge_runtime::webhook::{DevCerts, WebhookServer};
use kubeforge_testenv::TestEnv;
use {{crate}}::api::{{group}}::{{version}}::{ {{kind}}, {{kind}}Spec };
use {{crate}}::webhooks;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn {{snake}}_{{version}}_webhooks_answer_the_api_server() {
    let env = TestEnv::builder()
        .crds({{crate}}::api::crds())
        .start()
        .await
        .expect("start the test environment");
    let dir = std::env::temp_dir().join(format!("{{name}}-webhook-test-{}", std::process::id()));
    let certs = DevCerts::generate(&dir, &["127.0.0.1".to_string()]).expect("make certificates");
    let server = webhooks::register(
        WebhookServer::builder()
            .addr(([127, 0, 0, 1], 0).into())
            .cert_dir(certs.dir.clone()),
    )
    .bind()
    .await
    .expect("bind the webhook server");
    let endpoint = webhooks::Endpoint::Url {
        base: format!("https://{}", server.local_addr()),
        ca_bundle: certs.ca_bundle.clone(),
    };
    webhooks::install(env.client(), &endpoint).await.expect("install the webhook configurations");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));

    let api: Api<{{kind}}> = {{api_in_test}};
    let pp = PostParams::default();
{{webhook_checks}}
    let _ = stop.send(());
    serving.await.expect("the server task").expect("the server stops cleanly");
    let _ = std::fs::remove_dir_all(&dir);
    env.stop().await;
}

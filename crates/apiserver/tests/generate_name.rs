//! generateName collisions: five random characters from a 27-letter
//! alphabet (14.3 million names) collide within a few thousand objects of
//! one prefix, and kube-apiserver (1.32+, RetryGenerateName) generates the
//! name again instead of answering 409. 16,000 creates with one prefix hit
//! at least one collision with probability 1 − e^(−8.9) ≈ 99.99 %, so
//! without the retry this test fails.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kubeforge_apiserver::ApiServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_names_that_collide_are_generated_again() {
    let server = ApiServer::in_memory().await;
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "web-"}})).expect("cm");
    let total = 16_000;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let cms = cms.clone();
            let cm = cm.clone();
            tokio::spawn(async move {
                let mut names = Vec::new();
                for _ in 0..total / 16 {
                    let made = cms
                        .create(&PostParams::default(), &cm)
                        .await
                        .expect("a generateName create never answers 409");
                    names.push(made.metadata.name.expect("name"));
                }
                names
            })
        })
        .collect();
    let mut names = HashSet::new();
    for t in tasks {
        for n in t.await.expect("task") {
            assert!(n.starts_with("web-") && n.len() == 9, "{n}");
            assert!(names.insert(n), "a name was given twice");
        }
    }
    let listed = cms.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), total);
    assert_eq!(names.len(), total);
}

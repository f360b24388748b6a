//! Testing an operator with TestEnv: a whole control plane in the test
//! process, the CRD installed from the Rust type, the operator running on
//! the real client, and assertions on what a user would see.
//!
//! ```text
//! cargo test -p kubeforge-operators --example minimal_operator_test
//! ```

#[allow(dead_code)]
#[path = "minimal_operator.rs"]
mod minimal_operator;

fn main() {
    println!("run me with: cargo test -p kubeforge-operators --example minimal_operator_test");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, Instant};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use kube::{CustomResourceExt, ResourceExt};
    use kubeforge_runtime::Manager;
    use kubeforge_testenv::TestEnv;

    use super::minimal_operator::{self, Greeting, GreetingSpec};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn greeting_becomes_an_owned_configmap() -> Result<(), Box<dyn std::error::Error>> {
        let env = TestEnv::builder().crd(Greeting::crd()).start().await?;
        let mgr = Manager::builder(env.client()).handle_signals(false).build();
        minimal_operator::register(&mgr);
        let stop = mgr.shutdown_handle();
        let running = tokio::spawn(mgr.run());

        let greetings: Api<Greeting> = Api::default_namespaced(env.client());
        let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
        let g = Greeting::new(
            "hello",
            GreetingSpec {
                message: "hi".into(),
            },
        );
        let g = greetings.create(&PostParams::default(), &g).await?;

        let deadline = Instant::now() + Duration::from_secs(10);
        let cm = loop {
            if let Some(cm) = cms.get_opt("hello-greeting").await? {
                break cm;
            }
            assert!(Instant::now() < deadline, "no ConfigMap");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(cm.data.as_ref().unwrap()["message"], "hi");
        assert_eq!(cm.owner_references()[0].uid, g.uid().unwrap());

        // A new message reaches the ConfigMap.
        let patch = serde_json::json!({"spec": {"message": "hello again"}});
        greetings
            .patch("hello", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        loop {
            let cm = cms.get("hello-greeting").await?;
            if cm.data.unwrap()["message"] == "hello again" {
                break;
            }
            assert!(Instant::now() < deadline, "ConfigMap not updated");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.shutdown();
        running.await??;
        env.stop().await;
        Ok(())
    }
}

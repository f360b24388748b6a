//! A minimal controller on ConfigMaps: counts each ConfigMap's keys into an
//! annotation. Run it against `kubeforge up`:
//!
//! ```sh
//! export KUBECONFIG=$PWD/.kubeforge/kubeconfig
//! cargo run -p kubeforge-runtime --example configmap_controller
//! curl -s localhost:8080/metrics | grep controller_runtime_reconcile_total
//! curl -s localhost:8080/readyz
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kubeforge_runtime::{Action, Manager, ReconcileError};

const ANNOTATION: &str = "example.kubeforge.dev/keys";

async fn reconcile(
    cm: Arc<ConfigMap>,
    client: Arc<kube::Client>,
) -> Result<Action, ReconcileError> {
    let keys = cm.data.as_ref().map_or(0, |d| d.len()).to_string();
    let current = cm
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION));
    if current != Some(&keys) {
        let ns = cm.metadata.namespace.as_deref().unwrap_or("default");
        let name = cm
            .metadata
            .name
            .as_deref()
            .ok_or("ConfigMap without a name")?;
        let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: keys}}});
        Api::<ConfigMap>::namespaced((*client).clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let client = kube::Client::try_default().await?;
    let mgr = Manager::builder(client.clone())
        .metrics_addr("127.0.0.1:8080".parse()?)
        .build();
    mgr.controller::<ConfigMap, _>("configmap", client)
        .register(reconcile);
    mgr.run().await?;
    Ok(())
}

//! A minimal controller on an existing kind: every ConfigMap gets an
//! annotation counting its keys. Run it against `kubeforge up`:
//!
//! ```text
//! kubeforge up &            # prints export KUBECONFIG=…
//! cargo run -p kubeforge-operators --example configmap_controller
//! kubectl create configmap demo --from-literal=a=1 --from-literal=b=2
//! kubectl get configmap demo -o jsonpath='{.metadata.annotations}'
//! curl -s 127.0.0.1:8080/metrics | grep controller_runtime_reconcile_total
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use kubeforge_runtime::{Action, Manager, ReconcileError};

const KEYS: &str = "example.com/keys";

async fn reconcile(cm: Arc<ConfigMap>, client: Arc<Client>) -> Result<Action, ReconcileError> {
    let keys =
        cm.data.as_ref().map_or(0, |d| d.len()) + cm.binary_data.as_ref().map_or(0, |d| d.len());
    let want = keys.to_string();
    if cm.annotations().get(KEYS) != Some(&want) {
        let api: Api<ConfigMap> =
            Api::namespaced((*client).clone(), &cm.namespace().unwrap_or_default());
        let patch = serde_json::json!({"metadata": {"annotations": {KEYS: want}}});
        api.patch(
            &cm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::try_default().await?;
    let mgr = Manager::builder(client.clone())
        .metrics_addr("127.0.0.1:8080".parse()?)
        .build();
    mgr.controller::<ConfigMap, _>("configmap-keys", client)
        .register(reconcile);
    mgr.run().await?;
    Ok(())
}

//! A minimal operator with its own CRD: a `Greeting`
//! (`greetings.example.com/v1`) becomes a ConfigMap owned by it, and the
//! Greeting's status says which generation it reflects. The CRD is
//! generated from the Rust type and installed at start.
//!
//! ```text
//! kubeforge up &
//! cargo run -p kubeforge-operators --example minimal_operator
//! kubectl apply -f - <<'YAML'
//! apiVersion: example.com/v1
//! kind: Greeting
//! metadata: {name: hello}
//! spec: {message: "hello, world"}
//! YAML
//! kubectl get configmap hello-greeting -o yaml
//! ```
//!
//! `examples/minimal_operator_test.rs` tests it on TestEnv.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kube::{Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use kubeforge_runtime::{Action, Manager, ReconcileError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What to greet with.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Greeting", namespaced)]
#[kube(status = "GreetingStatus")]
pub struct GreetingSpec {
    /// The message the ConfigMap carries.
    #[schemars(length(min = 1))]
    pub message: String,
}

/// What the operator did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    /// The generation the ConfigMap reflects.
    pub observed_generation: Option<i64>,
}

const MANAGER: &str = "greeting-operator";

async fn reconcile(g: Arc<Greeting>, client: Arc<Client>) -> Result<Action, ReconcileError> {
    let ns = g
        .namespace()
        .ok_or_else(|| ReconcileError::terminal("Greeting without namespace"))?;
    let owner = g
        .controller_owner_ref(&())
        .ok_or_else(|| ReconcileError::terminal("no uid"))?;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{}-greeting", g.name_any())),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "message".to_string(),
            g.spec.message.clone(),
        )])),
        ..ConfigMap::default()
    };
    // Server-side apply: create or update in one idempotent call.
    let cms: Api<ConfigMap> = Api::namespaced((*client).clone(), &ns);
    let pp = PatchParams::apply(MANAGER).force();
    cms.patch(&cm.name_any(), &pp, &Patch::Apply(&cm)).await?;
    let greetings: Api<Greeting> = Api::namespaced((*client).clone(), &ns);
    let status = serde_json::json!({"status": {"observedGeneration": g.meta().generation}});
    greetings
        .patch_status(
            &g.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Adds the Greeting controller to `mgr`.
pub fn register(mgr: &Manager) {
    mgr.controller::<Greeting, _>("greeting", mgr.client())
        .owns::<ConfigMap>()
        .register(reconcile);
}

/// Installs (server-side applies) the Greeting CRD.
pub async fn install_crd(client: &Client) -> Result<(), kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = Greeting::crd();
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    Ok(())
}

#[allow(dead_code)] // also compiled as a module of minimal_operator_test
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::try_default().await?;
    install_crd(&client).await?;
    let mgr = Manager::builder(client).build();
    register(&mgr);
    mgr.run().await?;
    Ok(())
}

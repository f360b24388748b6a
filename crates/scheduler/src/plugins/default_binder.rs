//! DefaultBinder: binds by POSTing a `Binding` to `pods/{name}/binding`.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;

use super::helper::plugin;
use crate::framework::{BindPlugin, CycleState, PodInfo, Status};

/// The DefaultBinder plugin.
pub struct DefaultBinder {
    client: Option<kube::Client>,
}
plugin!(DefaultBinder, "DefaultBinder", [bind], events = vec![]);

impl DefaultBinder {
    /// A binder using this client (without one, binding fails with an error).
    pub fn new(client: Option<kube::Client>) -> Self {
        DefaultBinder { client }
    }
}

/// POST the binding; the error text is the API's message.
pub async fn bind_pod(client: &kube::Client, pod: &PodInfo, node: &str) -> Result<(), String> {
    let body = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let req = http::Request::post(format!(
        "/api/v1/namespaces/{}/pods/{}/binding",
        pod.namespace, pod.name
    ))
    .header("Content-Type", "application/json")
    .body(serde_json::to_vec(&body).unwrap_or_default())
    .map_err(|e| e.to_string())?;
    // The reply (a Status) is not needed: read as text, not decoded
    // (an API error still comes back as the error).
    client
        .request_text(req)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl BindPlugin for DefaultBinder {
    fn bind(
        &self,
        _: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: String,
    ) -> BoxFuture<'static, Status> {
        let client = self.client.clone();
        Box::pin(async move {
            let Some(client) = client else {
                return Status::error("DefaultBinder has no API client");
            };
            match bind_pod(&client, &pod, &node).await {
                Ok(()) => Status::success(),
                Err(e) => Status::error(format!("binding rejected: {e}")),
            }
        })
    }
}

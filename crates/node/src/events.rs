//! Events about pods, written as the kubelet writes them: core/v1 Events
//! from source `kubelet` on this node, one per occurrence, named
//! `<pod>.<unique hex>`.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Something expected happened.
    Normal,
    /// Something went wrong.
    Warning,
}

/// Writes the agent's events.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    node: String,
}

impl Recorder {
    /// Events from the agent of `node`.
    pub fn new(client: kube::Client, node: &str) -> Recorder {
        Recorder {
            client,
            node: node.to_string(),
        }
    }

    /// Record `reason`/`message` about `pod` (and optionally one of its
    /// containers, as `spec.containers{name}`); failures are logged only.
    pub async fn pod(
        &self,
        pod: &Pod,
        container: Option<&str>,
        kind: Kind,
        reason: &str,
        message: &str,
    ) {
        let (name, ns, uid) = crate::pod::identity(pod);
        let now = crate::status::now();
        let stamp = jiff::Timestamp::now().as_nanosecond();
        let mut involved = json!({
            "apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns, "uid": uid,
            "resourceVersion": pod.metadata.resource_version,
        });
        if let Some(c) = container {
            involved["fieldPath"] = json!(format!("spec.containers{{{c}}}"));
        }
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{name}.{stamp:x}"), "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": match kind { Kind::Normal => "Normal", Kind::Warning => "Warning" },
            "source": {"component": "kubelet", "host": self.node},
            "reportingComponent": "kubelet",
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": null,
            "count": 1,
        });
        let Ok(event) = serde_json::from_value::<Event>(event) else {
            return;
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), ns);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(pod = name, reason, error = %e, "cannot record event");
        }
    }
}

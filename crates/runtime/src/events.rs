//! Kubernetes Events (events.k8s.io/v1) about the objects a controller
//! reconciles: a thin helper over kube-runtime's
//! [`Recorder`], which also folds repeats
//! into an event series.
//!
//! ```no_run
//! # async fn demo(client: kube::Client, cm: &k8s_openapi::api::core::v1::ConfigMap) -> Result<(), kube::Error> {
//! let events = kubeforge_runtime::events::EventRecorder::new(client, "configmap-controller");
//! events.normal(cm, "Synced", "Reconcile", "configuration applied").await?;
//! events.warning(cm, "Invalid", "Reconcile", "key `size` is not a number").await?;
//! # Ok(()) }
//! ```

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};

/// Publishes events as one reporting controller.
#[derive(Clone)]
pub struct EventRecorder {
    recorder: Recorder,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventRecorder")
    }
}

impl EventRecorder {
    /// Events reported by `controller` (shown as the event's source); the
    /// instance is `$POD_NAME` or `$HOSTNAME` when set.
    pub fn new(client: Client, controller: &str) -> EventRecorder {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .ok()
            .filter(|s| !s.is_empty());
        EventRecorder {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: controller.to_string(),
                    instance,
                },
            ),
        }
    }

    /// A `Normal` event about `obj`.
    pub async fn normal<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        self.publish(obj, EventType::Normal, reason, action, note)
            .await
    }

    /// A `Warning` event about `obj` (shown by `kubectl describe`).
    pub async fn warning<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        self.publish(obj, EventType::Warning, reason, action, note)
            .await
    }

    /// An event of `type_` about `obj`.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: (!note.is_empty()).then(|| note.to_string()),
            action: action.to_string(),
            secondary: None,
        };
        self.recorder.publish(&ev, &obj.object_ref(&())).await
    }

    /// The underlying kube-runtime recorder.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }
}

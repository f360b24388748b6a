//! The pod type the node simulator watches: only the fields its pod loop
//! reads (the kubelet's view of a pod: identity, annotations, owner,
//! deletion, node, restart policy, container names and images, and the
//! status fields it resumes from after a restart).
//!
//! Every bound pod's changes reach the simulator (twice per pod at least:
//! bound, then Running). Decoding each into a full `Pod` builds the whole
//! spec — resources, probes, volumes, environment, tolerations — only to
//! drop it; here serde skips the rest while parsing, without allocating.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::core::{NamespaceResourceScope, Resource};
use serde::{Deserialize, Deserializer};

/// One watched pod, reduced to what the simulator uses.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SimPod {
    #[serde(default, deserialize_with = "sim_meta")]
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: Option<SimSpec>,
    pub(crate) status: Option<SimStatus>,
}

/// The spec fields kept.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SimSpec {
    pub(crate) node_name: Option<String>,
    pub(crate) restart_policy: Option<String>,
    #[serde(default)]
    pub(crate) containers: Vec<SimContainer>,
    pub(crate) init_containers: Option<Vec<SimContainer>>,
}

/// A container's name and image.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SimContainer {
    pub(crate) name: String,
    pub(crate) image: Option<String>,
}

/// The status fields a restarted simulator resumes from.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SimStatus {
    pub(crate) phase: Option<String>,
    #[serde(rename = "podIP")]
    pub(crate) pod_ip: Option<String>,
    pub(crate) start_time: Option<Time>,
    pub(crate) container_statuses: Option<Vec<SimContainerStatus>>,
    pub(crate) conditions: Option<Vec<SimCondition>>,
}

/// A container status's restart count.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SimContainerStatus {
    #[serde(default)]
    pub(crate) restart_count: i32,
}

/// A pod condition's type and status.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct SimCondition {
    #[serde(rename = "type")]
    pub(crate) type_: String,
    pub(crate) status: String,
}

/// The metadata fields kept; serde skips every other field.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SimMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
}

fn sim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        annotations: m.annotations,
        owner_references: m.owner_references,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl Resource for SimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    /// A full pod decodes to the fields the simulator reads, equal to the
    /// same fields of the `Pod` decode.
    #[test]
    fn keeps_what_the_simulator_reads() {
        let obj = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"}, "annotations": {"a": "b"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1", "controller": true}],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeName": "node-1", "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "1"}},
                    "env": [{"name": "X", "value": "y"}], "ports": [{"containerPort": 80}]}],
                "initContainers": [{"name": "i", "image": "busybox"}],
                "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.2", "startTime": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": true, "restartCount": 2}]}
        });
        let sim: SimPod = serde_json::from_value(obj.clone()).unwrap();
        let pod: Pod = serde_json::from_value(obj).unwrap();
        let (m, pm) = (&sim.metadata, &pod.metadata);
        assert_eq!(m.name, pm.name);
        assert_eq!(m.namespace, pm.namespace);
        assert_eq!(m.uid, pm.uid);
        assert_eq!(m.annotations, pm.annotations);
        assert_eq!(m.owner_references, pm.owner_references);
        assert_eq!(m.deletion_timestamp, pm.deletion_timestamp);
        assert!(m.managed_fields.is_none() && m.labels.is_none());
        let (s, ps) = (sim.spec.unwrap(), pod.spec.unwrap());
        assert_eq!(s.node_name, ps.node_name);
        assert_eq!(s.restart_policy, ps.restart_policy);
        assert_eq!(s.containers[0].name, ps.containers[0].name);
        assert_eq!(s.containers[0].image, ps.containers[0].image);
        assert_eq!(s.init_containers.unwrap()[0].name, "i");
        let (st, pst) = (sim.status.unwrap(), pod.status.unwrap());
        assert_eq!(st.phase, pst.phase);
        assert_eq!(st.pod_ip, pst.pod_ip);
        assert_eq!(st.start_time, pst.start_time);
        assert_eq!(st.container_statuses.unwrap()[0].restart_count, 2);
        let c = &st.conditions.unwrap()[0];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Ready", "True"));
    }

    /// A bare pod (no spec or status yet) still decodes.
    #[test]
    fn bare_pod_decodes() {
        let sim: SimPod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert_eq!(sim.metadata.name.as_deref(), Some("p"));
        assert!(sim.spec.is_none() && sim.status.is_none());
    }
}

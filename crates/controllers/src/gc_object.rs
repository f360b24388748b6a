//! The object type the garbage collector watches every resource as: only
//! the metadata fields the dependency graph reads (name, namespace, uid,
//! resourceVersion, ownerReferences, finalizers, deletionTimestamp).
//!
//! kube-controller-manager's collector watches metadata only. Decoding a
//! watch event into `PartialObjectMeta<DynamicObject>` costs more than the
//! graph needs: its flattened type fields make serde buffer the whole
//! object, and labels, annotations and `managedFields` are decoded into
//! maps only to be dropped. Here the rest of the object is skipped while
//! parsing, without allocating.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde::{Deserialize, Deserializer};

/// One watched object, reduced to the metadata the collector uses.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct GcObject {
    #[serde(default, deserialize_with = "graph_meta")]
    pub(crate) metadata: ObjectMeta,
}

/// The metadata fields kept; serde skips every other field.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GraphMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
    deletion_timestamp: Option<Time>,
}

fn graph_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = GraphMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        owner_references: m.owner_references,
        finalizers: m.finalizers,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl Resource for GcObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
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
    use serde_json::json;

    #[test]
    fn keeps_the_graph_fields_and_skips_the_rest() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "x"}, "annotations": {"a": "b"},
                "finalizers": ["f"], "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                    "uid": "u0", "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:x": {}}}}]
            },
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        });
        let o: GcObject = serde_json::from_value(pod).unwrap();
        let m = &o.metadata;
        assert_eq!(m.name.as_deref(), Some("p"));
        assert_eq!(m.namespace.as_deref(), Some("ns"));
        assert_eq!(m.uid.as_deref(), Some("u1"));
        assert_eq!(m.resource_version.as_deref(), Some("7"));
        assert_eq!(m.finalizers.as_deref(), Some(&["f".to_string()][..]));
        assert!(m.deletion_timestamp.is_some());
        let owner = &m.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.uid.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("u0", Some(true), Some(true))
        );
        assert!(m.labels.is_none() && m.annotations.is_none() && m.managed_fields.is_none());
    }

    #[test]
    fn an_object_without_metadata_decodes_empty() {
        let o: GcObject = serde_json::from_value(json!({"kind": "X"})).unwrap();
        assert!(o.metadata.uid.is_none());
    }
}

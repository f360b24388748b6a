//! The Memcached kind (cache.example.com/v1alpha1), written once by
//! `kubeforge create api --group cache --version v1alpha1 --kind Memcached`
//! and filled in: the seed book's `operator-sdk create api` type, with its
//! validation in the CRD schema so the API server refuses bad sizes itself.
//! `make manifests` renders the CRD from it. This file is yours.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Port memcached listens on when `spec.containerPort` is not set.
pub const DEFAULT_CONTAINER_PORT: i32 = 11211;

/// Desired state of a Memcached instance.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cache.example.com",
    version = "v1alpha1",
    kind = "Memcached",
    plural = "memcacheds",
    namespaced,
    status = "MemcachedStatus",
    derive = "PartialEq",
    doc = "Memcached is the Schema for the memcacheds API: a memcached Deployment of spec.size replicas.",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedSpec {
    /// Number of memcached pods (1 to 5).
    #[schemars(range(min = 1, max = 5))]
    pub size: i32,
    /// Port the memcached container listens on (default 11211).
    #[serde(default = "default_container_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub container_port: i32,
}

fn default_container_port() -> i32 {
    DEFAULT_CONTAINER_PORT
}

/// Observed state of a Memcached instance.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Available, Progressing and Degraded, as metav1.Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Names of the memcached pods (sorted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the operator last wrote this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
}

impl Memcached {
    /// A Memcached named `name` in `namespace` with `size` replicas and the
    /// default port (what `config/samples/` holds).
    pub fn with_size(namespace: &str, name: &str, size: i32) -> Memcached {
        let mut m = Memcached::new(
            name,
            MemcachedSpec {
                size,
                container_port: DEFAULT_CONTAINER_PORT,
            },
        );
        m.metadata.namespace = Some(namespace.to_string());
        m
    }
}

//! Observability for any cluster, as a kube-rs client only: object-state
//! metrics under kube-state-metrics' names and labels ([`state`]), so the
//! kubernetes-mixin alerts and dashboards written against
//! kube-state-metrics (`kube_pod_status_phase`, `kube_node_status_condition`,
//! `kube_deployment_status_replicas_available`, …) read them unchanged.
//! `kubeforge up --state-metrics ADDR` runs it beside the cluster, and
//! `kubeforge state-metrics` against any cluster. And the Metrics API's
//! data (`metrics.k8s.io` NodeMetrics and PodMetrics, [`resource_metrics`]),
//! which `kubectl top` and HorizontalPodAutoscalers read.

pub mod resource_metrics;
pub mod state;
pub mod text;

pub use state::{StateMetrics, serve};

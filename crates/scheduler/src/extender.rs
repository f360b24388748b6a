//! HTTP extenders, speaking kube-scheduler's extender JSON
//! (`k8s.io/kube-scheduler/extender/v1`): the client the framework calls
//! ([`Extender`]) and the wire types, which [`crate::extender_server`] uses
//! too.
//!
//! The Go structs have no json tags, so keys are PascalCase (`Pod`, `Nodes`,
//! `NodeNames`, `FailedNodes`, `Host`, `Score`) and nil is `null`; Go decodes
//! case-insensitively, so replies are read the same way here.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::config::{ExtenderConfig, parse_duration};
use crate::framework::{NodeInfo, PodInfo};

/// A failed extender call.
#[derive(Debug, thiserror::Error)]
pub enum ExtenderError {
    /// Transport or timeout.
    #[error("calling {url}: {message}")]
    Call {
        /// The URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The extender answered with an `Error`.
    #[error("{0}")]
    Reported(String),
    /// The reply did not decode.
    #[error("decoding the reply from {url}: {message}")]
    Decode {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
}

/// `ExtenderArgs`: what filter and prioritize calls send.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    pub pod: Value,
    /// Whole nodes (`{"items": […]}`) unless the extender caches nodes.
    pub nodes: Option<Value>,
    /// Node names when `nodeCacheCapable`.
    pub node_names: Option<Vec<String>>,
}

/// `ExtenderFilterResult`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderFilterResult {
    /// Feasible nodes as objects (non-cache-capable extenders).
    pub nodes: Option<Value>,
    /// Feasible node names (cache-capable extenders).
    pub node_names: Option<Vec<String>>,
    /// Rejected nodes with reasons.
    pub failed_nodes: Option<HashMap<String, String>>,
    /// Rejected nodes preemption cannot help.
    pub failed_and_unresolvable_nodes: Option<HashMap<String, String>>,
    /// An error for the whole call.
    pub error: Option<String>,
}

/// `HostPriority`: a node's score (0–10).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct HostPriority {
    /// Node name.
    pub host: String,
    /// Score 0–10.
    pub score: i64,
}

/// `ExtenderBindingArgs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderBindingArgs {
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub pod_namespace: String,
    /// Pod UID.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// Target node.
    pub node: String,
}

/// `ExtenderBindingResult`.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
pub struct ExtenderBindingResult {
    /// Empty on success.
    pub error: Option<String>,
}

/// The outcome of a filter call, decoded.
#[derive(Debug, Clone, Default)]
pub struct FilterOutcome {
    /// Feasible node names.
    pub node_names: Vec<String>,
    /// Rejected nodes.
    pub failed: HashMap<String, String>,
    /// Rejected nodes, unresolvable.
    pub failed_unresolvable: HashMap<String, String>,
}

/// Look a key up case-insensitively (Go's encoding/json does).
pub fn get_ci<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    let m = obj.as_object()?;
    m.get(key)
        .or_else(|| {
            m.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

fn string_map(v: Option<&Value>) -> HashMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Decode a filter reply (case-insensitive keys).
pub fn decode_filter_result(v: &Value) -> Result<FilterOutcome, String> {
    if let Some(e) = get_ci(v, "Error")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty())
    {
        return Err(e.to_string());
    }
    let mut node_names: Vec<String> = get_ci(v, "NodeNames")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if let Some(items) = get_ci(v, "Nodes")
        .and_then(|n| get_ci(n, "items"))
        .and_then(Value::as_array)
    {
        for item in items {
            if let Some(n) = item.pointer("/metadata/name").and_then(Value::as_str) {
                node_names.push(n.to_string());
            }
        }
    }
    Ok(FilterOutcome {
        node_names,
        failed: string_map(get_ci(v, "FailedNodes")),
        failed_unresolvable: string_map(get_ci(v, "FailedAndUnresolvableNodes")),
    })
}

/// Decode a prioritize reply.
pub fn decode_host_priorities(v: &Value) -> Result<Vec<HostPriority>, String> {
    let arr = v.as_array().ok_or("expected a list of host priorities")?;
    Ok(arr
        .iter()
        .filter_map(|h| {
            Some(HostPriority {
                host: get_ci(h, "Host")?.as_str()?.to_string(),
                score: get_ci(h, "Score").and_then(Value::as_i64).unwrap_or(0),
            })
        })
        .collect())
}

/// An HTTP extender client.
pub struct Extender {
    cfg: ExtenderConfig,
    timeout: Duration,
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl Extender {
    /// An extender from its config; calls from the scheduling thread run on
    /// `runtime`.
    pub fn new(cfg: ExtenderConfig, runtime: tokio::runtime::Handle) -> Extender {
        let timeout = cfg
            .http_timeout
            .as_deref()
            .and_then(|t| parse_duration(t).ok())
            .unwrap_or(Duration::from_secs(5));
        let client = Client::builder(TokioExecutor::new()).build_http();
        Extender {
            cfg,
            timeout,
            client,
            runtime,
        }
    }

    /// Its URL prefix (used as its name).
    pub fn name(&self) -> &str {
        &self.cfg.url_prefix
    }

    /// Has a filter verb.
    pub fn has_filter(&self) -> bool {
        !self.cfg.filter_verb.is_empty()
    }

    /// Has a prioritize verb.
    pub fn has_prioritize(&self) -> bool {
        !self.cfg.prioritize_verb.is_empty()
    }

    /// Binds pods.
    pub fn is_binder(&self) -> bool {
        !self.cfg.bind_verb.is_empty()
    }

    /// Failures are skipped.
    pub fn is_ignorable(&self) -> bool {
        self.cfg.ignorable
    }

    /// Score weight.
    pub fn weight(&self) -> i64 {
        self.cfg.weight
    }

    /// Resources managed by the extender that NodeResourcesFit should ignore.
    pub fn ignored_resources(&self) -> Vec<String> {
        self.cfg
            .managed_resources
            .iter()
            .filter(|m| m.ignored_by_scheduler)
            .map(|m| m.name.clone())
            .collect()
    }

    /// Whether the pod goes to this extender: always without
    /// `managedResources`, else only when a container requests or limits one.
    pub fn is_interested(&self, pod: &PodInfo) -> bool {
        if self.cfg.managed_resources.is_empty() {
            return true;
        }
        let spec = pod.pod.spec.as_ref();
        let containers = spec
            .map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .into_iter()
            .flatten();
        for c in containers {
            let Some(r) = &c.resources else { continue };
            for list in [&r.requests, &r.limits].into_iter().flatten() {
                if self
                    .cfg
                    .managed_resources
                    .iter()
                    .any(|m| list.contains_key(&m.name))
                {
                    return true;
                }
            }
        }
        false
    }

    async fn post(&self, verb: &str, body: Vec<u8>) -> Result<Value, ExtenderError> {
        let url = format!("{}/{}", self.cfg.url_prefix.trim_end_matches('/'), verb);
        let call_err = |m: String| ExtenderError::Call {
            url: url.clone(),
            message: m,
        };
        let req = http::Request::post(&url)
            .header("Content-Type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| call_err(e.to_string()))?;
        let fut = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| call_err(e.to_string()))?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| call_err(e.to_string()))?
                .to_bytes();
            if !status.is_success() {
                return Err(call_err(format!("HTTP {status}")));
            }
            serde_json::from_slice::<Value>(&bytes).map_err(|e| ExtenderError::Decode {
                url: url.clone(),
                message: e.to_string(),
            })
        };
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| call_err(format!("timed out after {:?}", self.timeout)))?
    }

    fn args(&self, pod: &PodInfo, nodes: &[&NodeInfo]) -> Vec<u8> {
        let pod_json = serde_json::to_value(pod.pod.as_ref()).unwrap_or(Value::Null);
        let args = if self.cfg.node_cache_capable {
            ExtenderArgs {
                pod: pod_json,
                nodes: None,
                node_names: Some(nodes.iter().map(|n| n.name.clone()).collect()),
            }
        } else {
            let items: Vec<Value> = nodes
                .iter()
                .filter_map(|n| n.node.as_ref())
                .map(|n| serde_json::to_value(n.as_ref()).unwrap_or(Value::Null))
                .collect();
            ExtenderArgs {
                pod: pod_json,
                nodes: Some(json!({ "items": items })),
                node_names: None,
            }
        };
        serde_json::to_vec(&args).unwrap_or_default()
    }

    /// A filter call (blocking; from the scheduling thread).
    pub fn filter(
        &self,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
    ) -> Result<FilterOutcome, ExtenderError> {
        let body = self.args(pod, nodes);
        let v = self
            .runtime
            .block_on(self.post(&self.cfg.filter_verb, body))?;
        decode_filter_result(&v).map_err(ExtenderError::Reported)
    }

    /// A prioritize call (blocking).
    pub fn prioritize(
        &self,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
    ) -> Result<Vec<HostPriority>, ExtenderError> {
        let body = self.args(pod, nodes);
        let v = self
            .runtime
            .block_on(self.post(&self.cfg.prioritize_verb, body))?;
        decode_host_priorities(&v).map_err(|m| ExtenderError::Decode {
            url: self.cfg.url_prefix.clone(),
            message: m,
        })
    }

    /// A bind call.
    pub async fn bind(&self, pod: &PodInfo, node: &str) -> Result<(), ExtenderError> {
        let args = ExtenderBindingArgs {
            pod_name: pod.name.clone(),
            pod_namespace: pod.namespace.clone(),
            pod_uid: pod.uid.clone(),
            node: node.to_string(),
        };
        let v = self
            .post(
                &self.cfg.bind_verb,
                serde_json::to_vec(&args).unwrap_or_default(),
            )
            .await?;
        match get_ci(&v, "Error").and_then(Value::as_str) {
            Some(e) if !e.is_empty() => Err(ExtenderError::Reported(e.to_string())),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn wire_is_pascal_case_and_replies_case_insensitive() {
        let a = ExtenderArgs {
            pod: json!({}),
            nodes: None,
            node_names: Some(vec!["n1".into()]),
        };
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            json!({"Pod": {}, "Nodes": null, "NodeNames": ["n1"]})
        );
        let r =
            decode_filter_result(&json!({"nodenames": ["a"], "failedNodes": {"b": "no"}})).unwrap();
        assert_eq!(r.node_names, ["a"]);
        assert_eq!(r.failed["b"], "no");
        let p = decode_host_priorities(&json!([{"host": "a", "score": 7}])).unwrap();
        assert_eq!(
            p,
            [HostPriority {
                host: "a".into(),
                score: 7
            }]
        );
        let b = ExtenderBindingArgs {
            pod_name: "p".into(),
            pod_namespace: "d".into(),
            pod_uid: "u".into(),
            node: "n".into(),
        };
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            json!({"PodName": "p", "PodNamespace": "d", "PodUID": "u", "Node": "n"})
        );
    }
}

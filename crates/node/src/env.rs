//! A container's environment as the kubelet makes it: Service variables
//! (`<SVC>_SERVICE_HOST`, Docker-link style `<SVC>_PORT_…`, always
//! `KUBERNETES_SERVICE_*`), then `envFrom`, then `env` with `$(VAR)`
//! expanded from what came before, fieldRef / resourceFieldRef /
//! configMapKeyRef / secretKeyRef resolved.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use kube::api::Api;
use kubeforge_apimachinery::expansion;
use kubeforge_apimachinery::quantity::{parse_milli, parse_value};

/// Why a container's environment cannot be made (the kubelet's
/// `CreateContainerConfigError`, with its words).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct EnvError(pub String);

/// What the environment is made from besides the pod.
#[derive(Clone, Debug, Default)]
pub struct EnvContext {
    /// Services of the pod's namespace (and `default/kubernetes`).
    pub services: Vec<Service>,
    /// The node's IP.
    pub host_ip: String,
    /// The pod's IPs.
    pub pod_ips: Vec<String>,
    /// The node's allocatable CPU (millicores) and memory (bytes), for
    /// resourceFieldRefs to unset limits.
    pub node_cpu_milli: i64,
    /// See `node_cpu_milli`.
    pub node_memory: i64,
}

/// An ordered environment: later definitions replace earlier ones in
/// place.
#[derive(Clone, Debug, Default)]
struct Env {
    order: Vec<String>,
    values: BTreeMap<String, String>,
}

impl Env {
    fn set(&mut self, k: String, v: String) {
        if !self.values.contains_key(&k) {
            self.order.push(k.clone());
        }
        self.values.insert(k, v);
    }

    fn into_vec(self) -> Vec<(String, String)> {
        let Env { order, mut values } = self;
        order
            .into_iter()
            .filter_map(|k| values.remove(&k).map(|v| (k, v)))
            .collect()
    }
}

/// The Service variables for `services` (headless and IP-less ones are
/// left out, as kube does).
pub fn service_env(services: &[Service]) -> Vec<(String, String)> {
    let mut env = Env::default();
    let mut sorted: Vec<&Service> = services.iter().collect();
    sorted.sort_by_key(|s| s.metadata.name.clone());
    for svc in sorted {
        let Some(spec) = &svc.spec else { continue };
        let ip = spec.cluster_ip.as_deref().unwrap_or_default();
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let name = svc
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .to_uppercase()
            .replace('-', "_");
        let ports = spec.ports.clone().unwrap_or_default();
        let Some(first) = ports.first() else { continue };
        env.set(format!("{name}_SERVICE_HOST"), ip.to_string());
        env.set(format!("{name}_SERVICE_PORT"), first.port.to_string());
        for p in &ports {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                env.set(
                    format!(
                        "{name}_SERVICE_PORT_{}",
                        pn.to_uppercase().replace('-', "_")
                    ),
                    p.port.to_string(),
                );
            }
        }
        let proto = |p: &k8s_openapi::api::core::v1::ServicePort| {
            p.protocol.clone().unwrap_or_else(|| "TCP".into())
        };
        let url = |p: &k8s_openapi::api::core::v1::ServicePort| {
            format!("{}://{ip}:{}", proto(p).to_lowercase(), p.port)
        };
        env.set(format!("{name}_PORT"), url(first));
        for p in &ports {
            let pfx = format!("{name}_PORT_{}_{}", p.port, proto(p).to_uppercase());
            env.set(pfx.clone(), url(p));
            env.set(format!("{pfx}_PROTO"), proto(p).to_lowercase());
            env.set(format!("{pfx}_PORT"), p.port.to_string());
            env.set(format!("{pfx}_ADDR"), ip.to_string());
        }
    }
    env.into_vec()
}

/// A `fieldRef`'s value.
pub fn field_value(pod: &Pod, path: &str, ctx: &EnvContext) -> Result<String, EnvError> {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let bracket = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['").or_else(|| r.strip_prefix("[\"")))
            .and_then(|r| r.strip_suffix("']").or_else(|| r.strip_suffix("\"]")))
            .map(str::to_string)
    };
    let value = match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.hostIP" => ctx.host_ip.clone(),
        "status.hostIPs" => ctx.host_ip.clone(),
        "status.podIP" => ctx.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => ctx.pod_ips.join(","),
        _ => {
            if let Some(k) = bracket("metadata.labels") {
                m.labels
                    .as_ref()
                    .and_then(|l| l.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(k) = bracket("metadata.annotations") {
                m.annotations
                    .as_ref()
                    .and_then(|a| a.get(&k))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(EnvError(format!("unsupported fieldRef path {path:?}")));
            }
        }
    };
    Ok(value)
}

/// A `resourceFieldRef`'s value: the container's request or limit (the
/// node's allocatable for an unset limit) divided by the divisor, rounded
/// up, as kube's `ExtractContainerResourceValue`.
pub fn resource_value(
    c: &Container,
    resource: &str,
    divisor: Option<&str>,
    ctx: &EnvContext,
) -> Result<String, EnvError> {
    let res = c.resources.clone().unwrap_or_default();
    let (section, name) = resource
        .split_once('.')
        .ok_or_else(|| EnvError(format!("unsupported container resource {resource:?}")))?;
    let map = match section {
        "limits" => res.limits.clone(),
        "requests" => res.requests.clone().or(res.limits.clone()),
        _ => {
            return Err(EnvError(format!(
                "unsupported container resource {resource:?}"
            )));
        }
    };
    let q = map.as_ref().and_then(|m| m.get(name)).map(|q| q.0.clone());
    let bad = |e: kubeforge_apimachinery::quantity::QuantityError| EnvError(e.to_string());
    match name {
        "cpu" => {
            let milli = match q {
                Some(q) => parse_milli(&q).map_err(bad)?,
                None if section == "limits" => ctx.node_cpu_milli,
                None => 0,
            };
            let div = parse_milli(divisor.unwrap_or("1")).map_err(bad)?.max(1);
            Ok(((milli + div - 1) / div).to_string())
        }
        "memory" | "ephemeral-storage" => {
            let bytes = match q {
                Some(q) => parse_value(&q).map_err(bad)?,
                None if section == "limits" => ctx.node_memory,
                None => 0,
            };
            let div = parse_value(divisor.unwrap_or("1")).map_err(bad)?.max(1);
            Ok(((bytes + div - 1) / div).to_string())
        }
        _ => Err(EnvError(format!(
            "unsupported container resource {resource:?}"
        ))),
    }
}

fn secret_text(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| s.string_data.as_ref().and_then(|d| d.get(key)).cloned())
}

fn is_env_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// The environment of container `c` of `pod`, reading ConfigMaps and
/// Secrets through `client`.
pub async fn container_env(
    client: &kube::Client,
    pod: &Pod,
    c: &Container,
    ctx: &EnvContext,
) -> Result<Vec<(String, String)>, EnvError> {
    let (_, ns, _) = crate::pod::identity(pod);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut env = Env::default();
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let services: Vec<Service> = ctx
        .services
        .iter()
        .filter(|s| {
            let sns = s.metadata.namespace.as_deref().unwrap_or_default();
            let name = s.metadata.name.as_deref().unwrap_or_default();
            (links && sns == ns) || (sns == "default" && name == "kubernetes")
        })
        .cloned()
        .collect();
    for (k, v) in service_env(&services) {
        env.set(k, v);
    }
    let not_found = |kind: &str, name: &str| EnvError(format!("{kind} \"{name}\" not found"));
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            let name = r.name.as_str();
            match cms
                .get_opt(name)
                .await
                .map_err(|e| EnvError(e.to_string()))?
            {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        let key = format!("{prefix}{k}");
                        if is_env_name(&key) {
                            env.set(key, v);
                        }
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => return Err(not_found("configmap", name)),
            }
        }
        if let Some(r) = &from.secret_ref {
            let name = r.name.as_str();
            match secrets
                .get_opt(name)
                .await
                .map_err(|e| EnvError(e.to_string()))?
            {
                Some(s) => {
                    for (k, v) in s.data.unwrap_or_default() {
                        let key = format!("{prefix}{k}");
                        if is_env_name(&key) {
                            env.set(key, String::from_utf8_lossy(&v.0).into_owned());
                        }
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => return Err(not_found("secret", name)),
            }
        }
    }
    for var in c.env.iter().flatten() {
        let value = if let Some(from) = &var.value_from {
            if let Some(f) = &from.field_ref {
                Some(field_value(pod, &f.field_path, ctx)?)
            } else if let Some(r) = &from.resource_field_ref {
                let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
                    Some(other) => pod
                        .spec
                        .iter()
                        .flat_map(|s| s.containers.iter())
                        .find(|x| x.name == other)
                        .cloned()
                        .ok_or_else(|| EnvError(format!("container {other:?} not found")))?,
                    None => c.clone(),
                };
                Some(resource_value(
                    &target,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    ctx,
                )?)
            } else if let Some(r) = &from.config_map_key_ref {
                let name = r.name.as_str();
                match cms
                    .get_opt(name)
                    .await
                    .map_err(|e| EnvError(e.to_string()))?
                {
                    Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if r.optional.unwrap_or(false) => None,
                        None => {
                            return Err(EnvError(format!(
                                "couldn't find key {} in ConfigMap {ns}/{name}",
                                r.key
                            )));
                        }
                    },
                    None if r.optional.unwrap_or(false) => None,
                    None => return Err(not_found("configmap", name)),
                }
            } else if let Some(r) = &from.secret_key_ref {
                let name = r.name.as_str();
                match secrets
                    .get_opt(name)
                    .await
                    .map_err(|e| EnvError(e.to_string()))?
                {
                    Some(s) => match secret_text(&s, &r.key) {
                        Some(v) => Some(v),
                        None if r.optional.unwrap_or(false) => None,
                        None => {
                            return Err(EnvError(format!(
                                "couldn't find key {} in Secret {ns}/{name}",
                                r.key
                            )));
                        }
                    },
                    None if r.optional.unwrap_or(false) => None,
                    None => return Err(not_found("secret", name)),
                }
            } else {
                None
            }
        } else {
            let raw = var.value.clone().unwrap_or_default();
            Some(expansion::expand(&raw, |n| env.values.get(n).cloned()))
        };
        if let Some(v) = value {
            env.set(var.name.clone(), v);
        }
    }
    Ok(env.into_vec())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_variables_are_kubes() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "redis-primary", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.11", "ports": [{"name": "redis", "port": 6379, "protocol": "TCP"}]}})).unwrap();
        let headless: Service = serde_json::from_value(json!({
            "metadata": {"name": "h", "namespace": "d"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}})).unwrap();
        let env: BTreeMap<_, _> = service_env(&[svc, headless]).into_iter().collect();
        assert_eq!(env["REDIS_PRIMARY_SERVICE_HOST"], "10.96.0.11");
        assert_eq!(env["REDIS_PRIMARY_SERVICE_PORT"], "6379");
        assert_eq!(env["REDIS_PRIMARY_SERVICE_PORT_REDIS"], "6379");
        assert_eq!(env["REDIS_PRIMARY_PORT"], "tcp://10.96.0.11:6379");
        assert_eq!(env["REDIS_PRIMARY_PORT_6379_TCP_ADDR"], "10.96.0.11");
        assert_eq!(env["REDIS_PRIMARY_PORT_6379_TCP_PROTO"], "tcp");
        assert!(!env.keys().any(|k| k.starts_with("H_")));
    }

    #[test]
    fn field_and_resource_refs() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u", "labels": {"app": "x"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                "resources": {"limits": {"cpu": "1500m", "memory": "64Mi"}}}]}}))
        .unwrap();
        let ctx = EnvContext {
            host_ip: "127.0.0.1".into(),
            pod_ips: vec!["10.244.0.2".into()],
            node_cpu_milli: 2000,
            node_memory: 1 << 30,
            ..Default::default()
        };
        assert_eq!(
            field_value(&pod, "metadata.labels['app']", &ctx).unwrap(),
            "x"
        );
        assert_eq!(
            field_value(&pod, "status.podIP", &ctx).unwrap(),
            "10.244.0.2"
        );
        assert_eq!(field_value(&pod, "spec.nodeName", &ctx).unwrap(), "n1");
        assert!(field_value(&pod, "spec.bogus", &ctx).is_err());
        let c = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(resource_value(c, "limits.cpu", None, &ctx).unwrap(), "2");
        assert_eq!(
            resource_value(c, "limits.cpu", Some("1m"), &ctx).unwrap(),
            "1500"
        );
        assert_eq!(
            resource_value(c, "limits.memory", Some("1Mi"), &ctx).unwrap(),
            "64"
        );
        assert_eq!(
            resource_value(c, "requests.memory", None, &ctx).unwrap(),
            (64 << 20).to_string()
        );
        let bare: Container = serde_json::from_value(json!({"name": "b"})).unwrap();
        assert_eq!(
            resource_value(&bare, "limits.memory", None, &ctx).unwrap(),
            (1 << 30).to_string()
        );
    }
}

//! The rules as pure functions over a Pod: validating rules return the
//! violations (one message per problem, naming the container), mutating
//! rules change the pod and say whether they did.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Container, Pod, PodSpec};

use crate::policy::{DefaultMetadata, ImageRules, RequireResources, SchedulingRule, Sidecar};
use crate::signature::{PublicKey, data_key};

/// Annotation recording an injected sidecar.
pub const INJECTED_ANNOTATION: &str = "kubeforge.dev/sidecar-injected";
/// Pod label or annotation opting in (`"true"`) or out (`"false"`).
pub const INJECT_LABEL: &str = "kubeforge.dev/inject";

/// Init containers and containers: what resource rules read (ephemeral
/// containers cannot have resources; kube refuses them there).
fn containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
}

/// (name, image) of every container, ephemeral ones included: what image
/// rules read.
fn images_of(spec: &PodSpec) -> impl Iterator<Item = (&str, &str)> {
    containers(spec)
        .map(|c| (c.name.as_str(), c.image.as_deref().unwrap_or("")))
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(|c| (c.name.as_str(), c.image.as_deref().unwrap_or(""))),
        )
}

/// The pod as a `pods/ephemeralcontainers` write changes it: only the
/// ephemeral containers `old` does not have yet.
pub fn added_ephemeral_containers(pod: &Pod, old: Option<&Pod>) -> Pod {
    let had: Vec<&str> = old
        .and_then(|o| o.spec.as_ref())
        .and_then(|s| s.ephemeral_containers.as_ref())
        .map(|l| l.iter().map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let added = pod
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .map(|l| {
            l.iter()
                .filter(|c| !had.contains(&c.name.as_str()))
                .cloned()
                .collect()
        });
    Pod {
        metadata: pod.metadata.clone(),
        spec: Some(PodSpec {
            ephemeral_containers: added,
            ..Default::default()
        }),
        status: None,
    }
}

/// Missing requests and limits, per container.
pub fn require_resources(pod: &Pod, cfg: &RequireResources) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in containers(spec) {
        let res = c.resources.as_ref();
        let limits = res.and_then(|r| r.limits.as_ref());
        let requests = res.and_then(|r| r.requests.as_ref());
        let has = |m: Option<&BTreeMap<String, _>>, k: &str| m.is_some_and(|m| m.contains_key(k));
        if cfg.limits {
            let missing: Vec<&str> = cfg
                .resources
                .iter()
                .filter(|r| !has(limits, r))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                out.push(format!(
                    "container \"{}\" has no resource limits for {}",
                    c.name,
                    missing.join(", ")
                ));
            }
        }
        if cfg.requests {
            let missing: Vec<&str> = cfg
                .resources
                .iter()
                .filter(|r| !has(requests, r) && !has(limits, r))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                out.push(format!(
                    "container \"{}\" has no resource requests for {}",
                    c.name,
                    missing.join(", ")
                ));
            }
        }
    }
    out
}

pub use crate::reference::ImageRef;

/// Tag and registry violations.
pub fn images(pod: &Pod, cfg: &ImageRules) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, image) in images_of(spec) {
        let r = match ImageRef::parse(image) {
            Ok(r) => r,
            Err(e) => {
                out.push(format!("container \"{name}\": {e}"));
                continue;
            }
        };
        if cfg.disallow_latest && r.digest.is_none() {
            match r.tag.as_deref() {
                Some("latest") => out.push(format!(
                    "container \"{}\" uses image \"{image}\": the :latest tag is not allowed, pin a version",
                    name
                )),
                None => out.push(format!(
                    "container \"{}\" uses image \"{image}\" without a tag (which means :latest), pin a version",
                    name
                )),
                _ => {}
            }
        }
        if !cfg.allowed_registries.is_empty() {
            let full = format!("{}/{}", r.registry, r.repository);
            let ok = cfg
                .allowed_registries
                .iter()
                .any(|a| full == *a || full.starts_with(&format!("{}/", a.trim_end_matches('/'))));
            if !ok {
                out.push(format!(
                    "container \"{}\" uses image \"{image}\" from registry \"{}\", which is not in the allowed registries ({})",
                    name,
                    r.registry,
                    cfg.allowed_registries.join(", ")
                ));
            }
        }
    }
    out
}

/// Signature violations: each image must be by digest and carry a
/// signature (from `lookup(data_key)`) that one of `keys` verifies.
pub fn signatures(
    pod: &Pod,
    keys: &[PublicKey],
    lookup: &dyn Fn(&str) -> Vec<Vec<u8>>,
) -> Vec<String> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, image) in images_of(spec) {
        let digest = ImageRef::parse(image).ok().and_then(|r| r.digest);
        let Some(digest) = digest.filter(|d| {
            d.strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        }) else {
            out.push(format!(
                "container \"{name}\" uses image \"{image}\": signed images must be referenced by digest (@sha256:…)"
            ));
            continue;
        };
        let sigs = lookup(&data_key(&digest));
        let verified = sigs
            .iter()
            .any(|s| keys.iter().any(|k| k.verify(digest.as_bytes(), s)));
        if !verified {
            let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
            let why = if sigs.is_empty() {
                "has no signature"
            } else {
                "has no valid signature"
            };
            out.push(format!(
                "container \"{name}\" uses image \"{image}\", which {why} from the trusted keys ({})",
                names.join(", ")
            ));
        }
    }
    out
}

/// Add missing labels and annotations.
pub fn default_metadata(pod: &mut Pod, cfg: &DefaultMetadata) -> bool {
    let mut changed = false;
    for (map, want) in [
        (&mut pod.metadata.labels, &cfg.labels),
        (&mut pod.metadata.annotations, &cfg.annotations),
    ] {
        for (k, v) in want {
            let m = map.get_or_insert_with(BTreeMap::new);
            if !m.contains_key(k) {
                m.insert(k.clone(), v.clone());
                changed = true;
            }
        }
    }
    changed
}

/// Whether a pod opts in to injection: its label or annotation
/// `kubeforge.dev/inject` (`"false"` always wins), else the namespace label.
pub fn wants_sidecar(pod: &Pod, namespace_opted_in: bool) -> bool {
    let get = |m: &Option<BTreeMap<String, String>>| {
        m.as_ref().and_then(|m| m.get(INJECT_LABEL)).cloned()
    };
    let own = [get(&pod.metadata.labels), get(&pod.metadata.annotations)];
    if own.iter().flatten().any(|v| v == "false") {
        return false;
    }
    own.iter().flatten().any(|v| v == "true") || namespace_opted_in
}

/// Inject the sidecar once: containers, init containers and volumes whose
/// names are not taken, and the annotation recording it.
pub fn inject_sidecar(pod: &mut Pod, cfg: &Sidecar) -> bool {
    let already = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INJECTED_ANNOTATION))
        .is_some_and(|v| v.split(',').any(|n| n == cfg.name));
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    if already {
        return false;
    }
    let taken = |list: &[Container], name: &str| list.iter().any(|c| c.name == name);
    for c in &cfg.containers {
        if !taken(&spec.containers, &c.name) {
            spec.containers.push(c.clone());
        }
    }
    for c in &cfg.init_containers {
        let init = spec.init_containers.get_or_insert_with(Vec::new);
        if !taken(init, &c.name) {
            init.push(c.clone());
        }
    }
    for v in &cfg.volumes {
        let vols = spec.volumes.get_or_insert_with(Vec::new);
        if !vols.iter().any(|x| x.name == v.name) {
            vols.push(v.clone());
        }
    }
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let value = match ann.get(INJECTED_ANNOTATION) {
        Some(v) if !v.is_empty() => format!("{v},{}", cfg.name),
        _ => cfg.name.clone(),
    };
    ann.insert(INJECTED_ANNOTATION.into(), value);
    true
}

/// Apply the first scheduling rule whose labels the pod carries.
pub fn scheduling(pod: &mut Pod, rules: &[SchedulingRule]) -> bool {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let Some(rule) = rules
        .iter()
        .find(|r| r.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v)))
    else {
        return false;
    };
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    let mut changed = false;
    if let Some(pc) = &rule.priority_class_name
        && spec.priority_class_name.is_none()
    {
        spec.priority_class_name = Some(pc.clone());
        changed = true;
    }
    for t in &rule.tolerations {
        let tols = spec.tolerations.get_or_insert_with(Vec::new);
        if !tols.contains(t) {
            tols.push(t.clone());
            changed = true;
        }
    }
    if let Some(na) = &rule.node_affinity {
        let aff = spec.affinity.get_or_insert_with(Affinity::default);
        if aff.node_affinity.is_none() {
            aff.node_affinity = Some(na.clone());
            changed = true;
        }
    }
    for (k, v) in &rule.node_selector {
        let ns = spec.node_selector.get_or_insert_with(BTreeMap::new);
        if !ns.contains_key(k) {
            ns.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn image_rules_read_ephemeral_containers_too() {
        let p = pod(
            serde_json::json!({"spec": {"containers": [{"name": "a", "image": "nginx:1.27"}],
            "ephemeralContainers": [{"name": "debugger", "image": "Mirror/busybox:1"}]}}),
        );
        let v = images(
            &p,
            &ImageRules {
                disallow_latest: true,
                allowed_registries: vec!["docker.io".into()],
            },
        );
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("\"debugger\"") && v[0].contains("from registry \"Mirror\""),
            "{v:?}"
        );
        let old = pod(
            serde_json::json!({"spec": {"containers": [{"name": "a", "image": "nginx:1.27"}],
            "ephemeralContainers": [{"name": "debugger", "image": "Mirror/busybox:1"}]}}),
        );
        let mut new = old.clone();
        if let Some(s) = new.spec.as_mut() {
            s.ephemeral_containers.get_or_insert_with(Vec::new).push(
                serde_json::from_value(
                    serde_json::json!({"name": "second", "image": "busybox:latest"}),
                )
                .expect("ec"),
            );
        }
        let added = added_ephemeral_containers(&new, Some(&old));
        let v = images(
            &added,
            &ImageRules {
                disallow_latest: true,
                allowed_registries: vec![],
            },
        );
        assert_eq!(v.len(), 1, "only the added container: {v:?}");
        assert!(v[0].contains("\"second\""), "{v:?}");
        assert!(
            require_resources(
                &added,
                &RequireResources {
                    resources: vec!["cpu".into()],
                    requests: true,
                    limits: true
                }
            )
            .is_empty()
        );
    }

    #[test]
    fn latest_and_registries() {
        let p = pod(serde_json::json!({"spec": {"containers": [
            {"name": "a", "image": "nginx:latest"}, {"name": "b", "image": "nginx"},
            {"name": "c", "image": "registry.k8s.io/pause:3.9"}, {"name": "d", "image": "quay.io/x/y:1"}]}}));
        let v = images(
            &p,
            &ImageRules {
                disallow_latest: true,
                allowed_registries: vec!["docker.io".into(), "registry.k8s.io".into()],
            },
        );
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].contains("\"a\"") && v[0].contains(":latest"));
        assert!(v[1].contains("\"b\"") && v[1].contains("without a tag"));
        assert!(v[2].contains("\"d\"") && v[2].contains("quay.io"));
    }

    #[test]
    fn resources_name_container_and_missing_parts() {
        let p = pod(serde_json::json!({"spec": {"containers": [
            {"name": "nolimits", "image": "nginx:1.27"},
            {"name": "ok", "image": "nginx:1.27", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}));
        let v = require_resources(
            &p,
            &RequireResources {
                resources: vec!["cpu".into(), "memory".into()],
                requests: true,
                limits: true,
            },
        );
        assert_eq!(
            v,
            vec![
                "container \"nolimits\" has no resource limits for cpu, memory".to_string(),
                "container \"nolimits\" has no resource requests for cpu, memory".to_string(),
            ]
        );
    }

    #[test]
    fn sidecar_is_idempotent_and_opt_out_wins() {
        let cfg: Sidecar = serde_json::from_value(serde_json::json!({"name": "proxy",
            "containers": [{"name": "proxy", "image": "envoy:1.30"}], "volumes": [{"name": "proxy-config", "emptyDir": {}}]})).expect("cfg");
        let mut p = pod(
            serde_json::json!({"metadata": {"labels": {"kubeforge.dev/inject": "false"}}, "spec": {"containers": [{"name": "app", "image": "a:1"}]}}),
        );
        assert!(!wants_sidecar(&p, true));
        p.metadata.labels = None;
        assert!(wants_sidecar(&p, true));
        assert!(inject_sidecar(&mut p, &cfg));
        let once = p.clone();
        assert!(!inject_sidecar(&mut p, &cfg));
        assert_eq!(p, once);
        assert_eq!(p.spec.as_ref().map(|s| s.containers.len()), Some(2));
    }

    #[test]
    fn scheduling_by_labels() {
        let rules: Vec<SchedulingRule> = serde_json::from_value(serde_json::json!([
            {"matchLabels": {"tier": "critical"}, "priorityClassName": "system-cluster-critical",
             "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "critical", "effect": "NoSchedule"}]}])).expect("rules");
        let mut p = pod(
            serde_json::json!({"metadata": {"labels": {"tier": "critical"}}, "spec": {"containers": []}}),
        );
        assert!(scheduling(&mut p, &rules));
        assert_eq!(
            p.spec
                .as_ref()
                .and_then(|s| s.priority_class_name.as_deref()),
            Some("system-cluster-critical")
        );
        assert!(!scheduling(&mut p, &rules), "idempotent");
        let mut other = pod(
            serde_json::json!({"metadata": {"labels": {"tier": "batch"}}, "spec": {"containers": []}}),
        );
        assert!(!scheduling(&mut other, &rules));
    }
}

//! The `AdmissionPolicy` custom resource (cluster-scoped,
//! `policy.kubeforge.dev/v1alpha1`) and its compilation into a
//! [`CompiledPolicy`]: selectors parsed, registries and keys checked. A
//! policy that does not compile is reported in its `Ready` condition with
//! the offending field; its last valid version (`status.effective`) stays
//! in effect, if it had one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, NodeAffinity, Toleration, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use kubeforge_apimachinery::labels::Selector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::signature::PublicKey;

/// What a policy does with what it finds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Mode {
    /// Violations refuse the request; mutations are applied.
    #[default]
    Enforce,
    /// Violations are returned as warnings; mutations are applied.
    Warn,
    /// Nothing is refused or changed; violations are recorded in the
    /// policy's status (the policy report).
    Audit,
}

/// An admission policy: which pods it applies to and which rules it runs.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "policy.kubeforge.dev",
    version = "v1alpha1",
    kind = "AdmissionPolicy",
    plural = "admissionpolicies",
    shortname = "apol",
    status = "AdmissionPolicyStatus",
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Audited","type":"integer","jsonPath":".status.auditTotal"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionPolicySpec {
    /// Enforce (default), Warn or Audit.
    #[serde(default)]
    pub mode: Mode,
    /// Only pods in namespaces matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Only pods matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_selector: Option<LabelSelector>,
    /// Namespaces never touched (besides the server-wide exclusions,
    /// `kube-system` and the webhook's own namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_namespaces: Vec<String>,
    /// Require resource requests and limits on every container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_resources: Option<RequireResources>,
    /// Labels and annotations added when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_metadata: Option<DefaultMetadata>,
    /// A sidecar injected into opted-in pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<Sidecar>,
    /// Image tag and registry rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageRules>,
    /// Images must be referenced by digest and signed by one of these keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_signatures: Option<ImageSignatures>,
    /// Scheduling policy set by workload labels (first matching rule wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduling: Vec<SchedulingRule>,
}

/// `spec.requireResources`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequireResources {
    /// Resources that need a request and a limit (default cpu and memory).
    #[serde(default = "default_resources")]
    pub resources: Vec<String>,
    /// Require requests (default true; a limit alone counts, as the API
    /// server defaults requests to limits).
    #[serde(default = "yes")]
    pub requests: bool,
    /// Require limits (default true).
    #[serde(default = "yes")]
    pub limits: bool,
}

fn default_resources() -> Vec<String> {
    vec!["cpu".into(), "memory".into()]
}

fn yes() -> bool {
    true
}

/// `spec.defaultMetadata`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultMetadata {
    /// Labels added when absent.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations added when absent.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `spec.sidecar`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    /// Name recorded in the injection annotation.
    pub name: String,
    /// Containers appended.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Init containers appended.
    #[serde(default)]
    pub init_containers: Vec<Container>,
    /// Volumes appended.
    #[serde(default)]
    pub volumes: Vec<Volume>,
    /// Namespace label that opts a namespace in, `key=value` (default
    /// `kubeforge.dev/inject=enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_label: Option<String>,
}

/// `spec.images`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRules {
    /// Refuse `:latest` and untagged images (default true).
    #[serde(default = "yes")]
    pub disallow_latest: bool,
    /// Registries (host, or host/path prefix) images may come from; empty
    /// allows all. `docker.io` covers short names like `nginx`.
    #[serde(default)]
    pub allowed_registries: Vec<String>,
}

/// `spec.imageSignatures`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSignatures {
    /// Keys any one of which may have signed an image.
    pub public_keys: Vec<PublicKeySpec>,
}

/// One configured key.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PublicKeySpec {
    /// A name for messages.
    pub name: String,
    /// PEM `PUBLIC KEY` (SubjectPublicKeyInfo) of an Ed25519 or ECDSA
    /// P-256 key.
    pub key: String,
}

/// `spec.scheduling[]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingRule {
    /// Pod labels that select this rule (all must match).
    pub match_labels: BTreeMap<String, String>,
    /// Set when the pod has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Added when not already present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Set when the pod has no node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// Merged into the pod's nodeSelector (the pod's values win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
}

/// One condition in the status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    /// `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// `Compiled` or `InvalidPolicy`.
    pub reason: String,
    /// What is wrong, naming the field.
    pub message: String,
    /// The generation this condition describes.
    pub observed_generation: Option<i64>,
}

/// One audited violation (the policy report).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// When (RFC 3339).
    pub time: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name (or generateName).
    pub name: String,
    /// `CREATE` or `UPDATE`.
    pub operation: String,
    /// The violations.
    pub message: String,
}

/// `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionPolicyStatus {
    /// The `Ready` condition.
    #[serde(default)]
    pub conditions: Vec<PolicyCondition>,
    /// The latest audited violations (at most 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditEntry>,
    /// Violations audited since the server started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_total: Option<u64>,
    /// The version in effect: the current spec when it compiles, else the
    /// last one that did. Kept here so a restarted server goes on enforcing
    /// it while the current spec is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective: Option<EffectiveVersion>,
}

/// `status.effective`: a policy version the server enforces.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveVersion {
    /// The generation it was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Its spec, as JSON text (a string, so a merge patch replaces it whole).
    pub spec: String,
}

/// A policy's problem, naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field path, e.g. `spec.images.allowedRegistries[0]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn field_error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// A policy ready to evaluate.
#[derive(Debug)]
pub struct CompiledPolicy {
    /// The policy's name.
    pub name: String,
    /// The spec it was compiled from.
    pub spec: AdmissionPolicySpec,
    /// `spec.namespaceSelector`.
    pub namespace_selector: Selector,
    /// `spec.objectSelector`.
    pub object_selector: Selector,
    /// The sidecar's namespace opt-in label.
    pub sidecar_namespace_label: (String, String),
    /// Parsed keys.
    pub keys: Vec<PublicKey>,
}

fn selector(field: &str, ls: Option<&LabelSelector>) -> Result<Selector, FieldError> {
    match ls {
        None => Ok(Selector::everything()),
        Some(ls) => {
            let v = serde_json::to_value(ls).map_err(|e| field_error(field, e.to_string()))?;
            Selector::from_label_selector(&v).map_err(|e| field_error(field, e.to_string()))
        }
    }
}

/// Whether `s` is a registry (host[:port]) optionally followed by a path,
/// without scheme, tag or digest.
fn valid_registry(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.contains("://") {
        return Err(format!(
            "{s:?} must be a registry host (and optional path), without a scheme"
        ));
    }
    if s.contains('@') || s.ends_with('/') {
        return Err(format!("{s:?} must not contain a digest or end with '/'"));
    }
    let (host, path) = s.split_once('/').unwrap_or((s, ""));
    let (name, port) = host.split_once(':').unwrap_or((host, ""));
    let host_ok = !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        && (port.is_empty() || port.parse::<u16>().is_ok());
    if !host_ok {
        return Err(format!("{s:?}: {host:?} is not a valid registry host"));
    }
    let path_ok = path.split('/').filter(|p| !p.is_empty()).all(|p| {
        p.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
    });
    if !path_ok {
        return Err(format!(
            "{s:?}: the repository path must be lowercase letters, digits, '.', '_' or '-'"
        ));
    }
    Ok(())
}

/// Compile a policy; the first problem is returned naming its field.
pub fn compile(name: &str, spec: &AdmissionPolicySpec) -> Result<CompiledPolicy, FieldError> {
    let namespace_selector = selector("spec.namespaceSelector", spec.namespace_selector.as_ref())?;
    let object_selector = selector("spec.objectSelector", spec.object_selector.as_ref())?;
    if let Some(images) = &spec.images {
        for (i, r) in images.allowed_registries.iter().enumerate() {
            valid_registry(r)
                .map_err(|m| field_error(format!("spec.images.allowedRegistries[{i}]"), m))?;
        }
    }
    let mut keys = Vec::new();
    if let Some(sig) = &spec.image_signatures {
        if sig.public_keys.is_empty() {
            return Err(field_error(
                "spec.imageSignatures.publicKeys",
                "at least one key is required",
            ));
        }
        for (i, k) in sig.public_keys.iter().enumerate() {
            let parsed = PublicKey::from_pem(&k.name, &k.key).map_err(|e| {
                field_error(
                    format!("spec.imageSignatures.publicKeys[{i}].key"),
                    e.to_string(),
                )
            })?;
            keys.push(parsed);
        }
    }
    let mut sidecar_namespace_label = ("kubeforge.dev/inject".to_string(), "enabled".to_string());
    if let Some(s) = &spec.sidecar {
        if s.name.is_empty() {
            return Err(field_error("spec.sidecar.name", "must not be empty"));
        }
        if s.containers.is_empty() && s.init_containers.is_empty() {
            return Err(field_error(
                "spec.sidecar.containers",
                "at least one container is required",
            ));
        }
        if let Some(l) = &s.namespace_label {
            let (k, v) = l.split_once('=').ok_or_else(|| {
                field_error(
                    "spec.sidecar.namespaceLabel",
                    format!("{l:?} must be key=value"),
                )
            })?;
            sidecar_namespace_label = (k.to_string(), v.to_string());
        }
    }
    for (i, r) in spec.scheduling.iter().enumerate() {
        if r.match_labels.is_empty() {
            return Err(field_error(
                format!("spec.scheduling[{i}].matchLabels"),
                "at least one label is required",
            ));
        }
    }
    Ok(CompiledPolicy {
        name: name.to_string(),
        spec: spec.clone(),
        namespace_selector,
        object_selector,
        sidecar_namespace_label,
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_policies_name_the_field() {
        let spec: AdmissionPolicySpec = serde_json::from_value(serde_json::json!({
            "images": {"allowedRegistries": ["registry.k8s.io", "https://docker.io"]}
        }))
        .expect("spec");
        let e = compile("p", &spec).expect_err("invalid");
        assert_eq!(e.field, "spec.images.allowedRegistries[1]");
        let spec: AdmissionPolicySpec = serde_json::from_value(serde_json::json!({
            "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Sometimes"}]}
        }))
        .expect("spec");
        assert_eq!(
            compile("p", &spec).expect_err("invalid").field,
            "spec.namespaceSelector"
        );
        let spec: AdmissionPolicySpec = serde_json::from_value(serde_json::json!({
            "imageSignatures": {"publicKeys": [{"name": "k", "key": "not a key"}]}
        }))
        .expect("spec");
        assert_eq!(
            compile("p", &spec).expect_err("invalid").field,
            "spec.imageSignatures.publicKeys[0].key"
        );
        for ok in ["docker.io", "registry.k8s.io/pause", "localhost:5000"] {
            assert!(valid_registry(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Docker IO", "ghcr.io/Org", "r.io@sha256:x", "host:port"] {
            assert!(valid_registry(bad).is_err(), "{bad}");
        }
    }
}

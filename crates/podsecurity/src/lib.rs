//! kubeforge-podsecurity: the Pod Security Standards as
//! `k8s.io/pod-security-admission` evaluates them.
//!
//! - [`api`]: levels (`privileged`, `baseline`, `restricted`), versions
//!   (`latest`, `v1.N`), the namespace labels and how they resolve into a
//!   [`Policy`] (enforce, audit, warn), invalid labels failing safe;
//! - [`checks`]: every check at every version of the standards, 1.0 to the
//!   newest, each with kube's reason and detail wording;
//! - [`evaluate`]: a pod's metadata and spec against one level:version,
//!   the checks run in kube's order and their failures joined as kube
//!   joins them (`privileged (container "c" must not set
//!   securityContext.privileged=true), host namespaces (hostNetwork=true)`);
//! - [`config`]: the plugin's `PodSecurityConfiguration` (cluster defaults
//!   and exemptions).
//!
//! Pure functions over k8s-openapi types: the API server's admission
//! plugin uses them, and so can a webhook or a linter.
//!
//! ```
//! use k8s_openapi::api::core::v1::PodSpec;
//! use kubeforge_podsecurity::{Level, LevelVersion, Version, evaluate};
//! let spec: PodSpec = serde_json::from_value(serde_json::json!({
//!     "hostNetwork": true,
//!     "containers": [{"name": "c", "image": "busybox",
//!                     "securityContext": {"privileged": true}}]
//! })).unwrap();
//! let baseline = LevelVersion { level: Level::Baseline, version: Version::Latest };
//! let verdict = evaluate(baseline, &Default::default(), &spec);
//! assert!(!verdict.allowed());
//! assert_eq!(
//!     verdict.forbidden_detail(),
//!     "host namespaces (hostNetwork=true), \
//!      privileged (container \"c\" must not set securityContext.privileged=true)"
//! );
//! ```

pub mod api;
pub mod checks;
pub mod config;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use api::{Level, LevelVersion, Policy, Version, policy_to_evaluate};

/// The fields of a pod spec (as the API server holds it, JSON) that some
/// check reads, and of each container only its name, securityContext and
/// ports: decoding just these into the typed spec costs a fraction of the
/// whole pod's decoding.
const SPEC_FIELDS: &[&str] = &[
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostUsers",
    "securityContext",
    "os",
    "runtimeClassName",
    "volumes",
];
const CONTAINER_LISTS: &[&str] = &["initContainers", "containers", "ephemeralContainers"];
const CONTAINER_FIELDS: &[&str] = &["name", "securityContext", "ports"];

/// Decode what the checks read of a pod's (or a template's) `metadata`
/// and `spec` JSON: the annotations, and the spec fields above.
pub fn decode(
    metadata: Option<&serde_json::Value>,
    spec: Option<&serde_json::Value>,
) -> Result<(ObjectMeta, PodSpec), serde_json::Error> {
    use serde::Deserialize;
    use serde_json::{Map, Value};
    let pick = |from: &Map<String, Value>, keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| from.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect()
    };
    let mut meta = ObjectMeta::default();
    if let Some(a) = metadata.and_then(|m| m.get("annotations")) {
        meta.annotations = Deserialize::deserialize(a)?;
    }
    let Some(spec) = spec.and_then(Value::as_object) else {
        return Ok((meta, PodSpec::default()));
    };
    let mut slim = pick(spec, SPEC_FIELDS);
    for list in CONTAINER_LISTS {
        if let Some(cs) = spec.get(*list).and_then(Value::as_array) {
            let cs: Vec<Value> = cs
                .iter()
                .map(|c| match c.as_object() {
                    Some(c) => Value::Object(pick(c, CONTAINER_FIELDS)),
                    None => c.clone(),
                })
                .collect();
            slim.insert(list.to_string(), Value::Array(cs));
        }
    }
    let spec = PodSpec::deserialize(Value::Object(slim))?;
    Ok((meta, spec))
}

/// The outcome of evaluating a pod at one level:version: the reasons and
/// details of the checks that failed, in kube's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// (reason, detail) of each failed check; the detail may be empty.
    pub failures: Vec<(&'static str, String)>,
}

impl Verdict {
    /// Whether every check passed.
    pub fn allowed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The reasons alone, joined with `, ` (what kube prints per existing
    /// pod when a namespace's enforce level rises).
    pub fn forbidden_reason(&self) -> String {
        let reasons: Vec<&str> = self.failures.iter().map(|(r, _)| *r).collect();
        reasons.join(", ")
    }

    /// Each reason with its detail in parentheses when it has one, joined
    /// with `, ` (what a refusal and a warning print).
    pub fn forbidden_detail(&self) -> String {
        let mut out = String::new();
        for (i, (reason, detail)) in self.failures.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(reason);
            if !detail.is_empty() {
                out.push_str(" (");
                out.push_str(detail);
                out.push(')');
            }
        }
        out
    }
}

/// Evaluate a pod (or a pod template's metadata and spec) at `lv`:
/// nothing is checked at `privileged`; a version newer than the newest
/// revision of the standards (and `latest`) uses the newest.
pub fn evaluate(lv: LevelVersion, meta: &ObjectMeta, spec: &PodSpec) -> Verdict {
    let mut verdict = Verdict::default();
    if lv.level == Level::Privileged {
        return verdict;
    }
    let minor = match lv.version {
        Version::Latest => checks::NEWEST_MINOR,
        Version::V1(n) => n.min(checks::NEWEST_MINOR),
    };
    let pod = checks::Pod::new(meta, spec);
    for variant in checks::for_level(lv.level, minor) {
        if let Some(failure) = (variant.check)(&pod) {
            verdict.failures.push(failure);
        }
    }
    verdict
}

//! The PodSecurity admission plugin, on by default as in kube-apiserver
//! since 1.25: the `pod-security.kubernetes.io/{enforce,audit,warn}`
//! namespace labels (and their `-version`s) choose a Pod Security
//! Standards level per mode, [`kubeforge_podsecurity`] evaluates it, and
//! this module answers as `k8s.io/pod-security-admission/admission` does:
//!
//! - pods (create, update that changes an image or a seccomp annotation,
//!   `ephemeralcontainers`): enforce refuses with 403 `pods "x" is
//!   forbidden: violates PodSecurity "baseline:latest": …`, audit adds the
//!   audit annotation `pod-security.kubernetes.io/audit-violations`, warn a
//!   `Warning` header `would violate PodSecurity …`;
//! - workloads with a pod template (Deployments, ReplicaSets, StatefulSets,
//!   DaemonSets, Jobs, CronJobs, ReplicationControllers, PodTemplates):
//!   audit and warn only;
//! - namespaces: labels that do not parse are a 422 on create (and on an
//!   update that changes them); raising the enforce level warns about the
//!   existing pods that would be refused, grouped by reason.
//!
//! The cluster defaults and the exemptions (users, namespaces,
//! RuntimeClasses) come from a `PodSecurityConfiguration`
//! ([`ApiServer::set_pod_security`]); without one every mode is
//! `privileged:latest`, so nothing is refused until a namespace asks.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeforge_podsecurity::config::Config;
use kubeforge_podsecurity::{Level, LevelVersion, Policy, Verdict};
use serde::Deserialize;
use serde_json::Value;

use super::{Operation, Request, labels_of};
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult, GroupResource};
use crate::server::ApiServer;

/// At most this many existing pods are checked when a namespace's enforce
/// level rises (kube's `defaultNamespaceMaxPodsToCheck`).
const MAX_PODS_TO_CHECK: usize = 3000;
/// And for at most this long (kube's `defaultNamespacePodCheckTimeout`).
const POD_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Pod subresources never evaluated (kube's `ignoredPodSubresources`);
/// any other pod subresource carries a pod and is.
const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

impl ApiServer {
    /// Use this PodSecurity configuration (cluster defaults and
    /// exemptions) from now on.
    pub fn set_pod_security(&self, config: Config) {
        if let Ok(mut c) = self.inner.admission.pod_security.write() {
            *c = Arc::new(config);
        }
    }
}

/// Which kind of object the request writes, for this plugin.
enum Target {
    Namespace,
    Pod,
    Workload,
}

fn target(ctx: &Ctx<'_>) -> Option<Target> {
    let (group, plural) = (ctx.def.group.as_str(), ctx.def.plural.as_str());
    match (group, plural) {
        ("", "namespaces") => Some(Target::Namespace),
        ("", "pods") => Some(Target::Pod),
        ("", "replicationcontrollers" | "podtemplates")
        | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs" | "cronjobs") => Some(Target::Workload),
        _ => None,
    }
}

/// Admit one create or update; returns the warnings to send.
pub(super) fn validate(
    ctx: &Ctx<'_>,
    r: &Request<'_>,
    obj: Option<&Value>,
) -> ApiResult<Vec<String>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    if r.operation == Operation::Delete {
        return Ok(Vec::new());
    }
    let Some(target) = target(ctx) else {
        return Ok(Vec::new());
    };
    let config = match ctx.server.inner.admission.pod_security.read() {
        Ok(c) => Arc::clone(&c),
        Err(_) => {
            return Err(ApiError::internal(
                "the PodSecurity configuration lock is poisoned",
            ));
        }
    };
    match target {
        Target::Namespace => validate_namespace(ctx, r, obj, &config),
        Target::Pod => validate_pod(ctx, r, obj, &config),
        Target::Workload => Ok(validate_workload(ctx, r, obj, &config)),
    }
}

fn note(key: &str, value: impl Into<String>) {
    crate::audit::annotate(
        format!("{}{key}", kubeforge_podsecurity::api::LABEL_PREFIX),
        value,
    );
}

/// The stored namespace's labels; `None` when it cannot be read. Only
/// the labels are decoded (every pod create reads them).
fn stored_namespace_labels(ctx: &Ctx<'_>, ns: &str) -> Option<BTreeMap<String, String>> {
    #[derive(Deserialize)]
    struct Meta {
        #[serde(default)]
        labels: Option<BTreeMap<String, String>>,
    }
    #[derive(Deserialize)]
    struct Stored {
        metadata: Meta,
    }
    let kv = ctx
        .server
        .store()
        .get(&format!("/registry/core/namespaces/{ns}"))?;
    let stored: Stored = serde_json::from_slice(&kv.value).ok()?;
    Some(stored.metadata.labels.unwrap_or_default())
}

fn validate_namespace(
    ctx: &Ctx<'_>,
    r: &Request<'_>,
    obj: &Value,
    config: &Config,
) -> ApiResult<Vec<String>> {
    if !r.subresource.is_empty() {
        return Ok(Vec::new());
    }
    let (new_policy, new_errs) =
        kubeforge_podsecurity::policy_to_evaluate(labels_of(obj).as_ref(), config.defaults);
    let invalid = |errs: Vec<kubeforge_apimachinery::names::Cause>| {
        ApiError::invalid(
            "",
            "Namespace",
            r.name,
            errs.into_iter().map(Into::into).collect(),
        )
    };
    let labels = labels_of(obj).unwrap_or_default();
    let exempt = config.exempt_namespaces.contains(r.name);
    if r.operation == Operation::Create {
        if !new_errs.is_empty() {
            return Err(invalid(new_errs));
        }
        return Ok(
            exempt_namespace_warning(r.name, &new_policy, &labels, config)
                .into_iter()
                .collect(),
        );
    }
    let (old_policy, old_errs) = kubeforge_podsecurity::policy_to_evaluate(
        r.old.and_then(labels_of).as_ref(),
        config.defaults,
    );
    if !new_errs.is_empty() && (old_errs.is_empty() || new_errs != old_errs) {
        return Err(invalid(new_errs));
    }
    let (new, old) = (new_policy.enforce, old_policy.enforce);
    if new == old
        || new.level == Level::Privileged
        || (new.version == old.version && new.level <= old.level)
    {
        return Ok(Vec::new());
    }
    if exempt {
        return Ok(
            exempt_namespace_warning(r.name, &new_policy, &labels, config)
                .into_iter()
                .collect(),
        );
    }
    Ok(existing_pods_warnings(ctx, r.name, new, config))
}

/// kube's `exemptNamespaceWarning`: labelling an exempt namespace with a
/// policy says it will be ignored, naming the modes set by label.
fn exempt_namespace_warning(
    ns: &str,
    policy: &Policy,
    labels: &BTreeMap<String, String>,
    config: &Config,
) -> Option<String> {
    use kubeforge_podsecurity::api as psa;
    if policy.all_privileged() || policy.equivalent(&config.defaults) {
        return None;
    }
    let modes = [
        (
            "enforce",
            policy.enforce,
            psa::ENFORCE_LEVEL_LABEL,
            psa::ENFORCE_VERSION_LABEL,
        ),
        (
            "audit",
            policy.audit,
            psa::AUDIT_LEVEL_LABEL,
            psa::AUDIT_VERSION_LABEL,
        ),
        (
            "warn",
            policy.warn,
            psa::WARN_LEVEL_LABEL,
            psa::WARN_VERSION_LABEL,
        ),
    ];
    let set: Vec<String> = modes
        .iter()
        .filter(|(_, lv, level, version)| {
            lv.level != Level::Privileged
                && (labels.contains_key(*level) || labels.contains_key(*version))
        })
        .map(|(mode, lv, _, _)| format!("{mode}={lv}"))
        .collect();
    Some(format!(
        "namespace {} is exempt from Pod Security, and the policy ({}) will be ignored",
        kubeforge_apimachinery::gofmt::quote(ns),
        set.join(", ")
    ))
}

/// kube's `EvaluatePodsInNamespace`: the namespace's pods (one per
/// controller first, RuntimeClass-exempt ones skipped) against the new
/// enforce level, warnings grouped by reason with the lexically first pod
/// name and how many others share it.
fn existing_pods_warnings(
    ctx: &Ctx<'_>,
    ns: &str,
    enforce: LevelVersion,
    config: &Config,
) -> Vec<String> {
    let deadline = Instant::now() + POD_CHECK_TIMEOUT;
    let listed = ctx
        .server
        .store()
        .range(&format!("/registry/core/pods/{ns}/"), None, 0);
    let pods: Vec<Pod> = listed
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<Pod>(&kv.value).ok())
        .collect();
    // One pod per controller first, then the other replicas.
    let mut first = Vec::new();
    let mut rest = Vec::new();
    let mut seen_controllers = std::collections::HashSet::new();
    for pod in &pods {
        let runtime_class = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref());
        if runtime_class.is_some_and(|rc| config.exempt_runtime_classes.contains(rc)) {
            continue;
        }
        let controller = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str());
        match controller {
            Some(uid) if !seen_controllers.insert(uid) => rest.push(pod),
            _ => first.push(pod),
        }
    }
    first.extend(rest);
    let total = first.len();
    first.truncate(MAX_PODS_TO_CHECK);
    let mut checked = first.len();
    let mut order: Vec<String> = Vec::new();
    let mut counts: HashMap<String, (String, usize)> = HashMap::new();
    let empty = PodSpec::default();
    for (i, pod) in first.iter().enumerate() {
        let verdict = kubeforge_podsecurity::evaluate(
            enforce,
            &pod.metadata,
            pod.spec.as_ref().unwrap_or(&empty),
        );
        if !verdict.allowed() {
            let reason = verdict.forbidden_reason();
            let name = pod.metadata.name.clone().unwrap_or_default();
            match counts.get_mut(&reason) {
                Some((first_name, n)) => {
                    if name < *first_name {
                        *first_name = name;
                    }
                    *n += 1;
                }
                None => {
                    order.push(reason.clone());
                    counts.insert(reason, (name, 1));
                }
            }
        }
        if Instant::now() >= deadline {
            checked = i + 1;
            break;
        }
    }
    let mut warnings = Vec::new();
    if checked < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
        ));
    }
    if !order.is_empty() {
        warnings.push(format!(
            "existing pods in namespace {} violate the new PodSecurity enforce level {}",
            kubeforge_apimachinery::gofmt::quote(ns),
            kubeforge_apimachinery::gofmt::quote(&enforce.to_string())
        ));
    }
    let mut per_reason: Vec<String> = order
        .into_iter()
        .map(|reason| {
            let (name, n) = &counts[&reason];
            match n {
                1 => format!("{name}: {reason}"),
                2 => format!("{name} (and 1 other pod): {reason}"),
                n => format!("{name} (and {} other pods): {reason}", n - 1),
            }
        })
        .collect();
    per_reason.sort();
    warnings.extend(per_reason);
    warnings
}

/// The namespace's policy, or the error to answer.
fn namespace_policy(ctx: &Ctx<'_>, config: &Config) -> Result<(Policy, Option<String>), String> {
    let ns = ctx.ns.as_deref().unwrap_or_default();
    let labels = stored_namespace_labels(ctx, ns).ok_or_else(|| {
        format!(
            "failed to lookup namespace {}",
            kubeforge_apimachinery::gofmt::quote(ns)
        )
    })?;
    let (policy, errs) = kubeforge_podsecurity::policy_to_evaluate(Some(&labels), config.defaults);
    let err = (!errs.is_empty()).then(|| {
        let texts: Vec<String> = errs
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        // Go's aggregate of several errors is bracketed.
        if texts.len() == 1 {
            texts[0].clone()
        } else {
            format!("[{}]", texts.join(", "))
        }
    });
    Ok((policy, err))
}

fn exempt(ctx: &Ctx<'_>, config: &Config) -> bool {
    if ctx
        .ns
        .as_deref()
        .is_some_and(|ns| config.exempt_namespaces.contains(ns))
    {
        note("exempt", "namespace");
        return true;
    }
    if !ctx.user.name.is_empty() && config.exempt_users.contains(&ctx.user.name) {
        note("exempt", "user");
        return true;
    }
    false
}

fn validate_pod(
    ctx: &Ctx<'_>,
    r: &Request<'_>,
    obj: &Value,
    config: &Config,
) -> ApiResult<Vec<String>> {
    if IGNORED_POD_SUBRESOURCES.contains(&r.subresource) || exempt(ctx, config) {
        return Ok(Vec::new());
    }
    let (policy, policy_err) = namespace_policy(ctx, config).map_err(|why| {
        note("error", why.clone());
        ApiError::internal(why)
    })?;
    if policy_err.is_none() && policy.all_privileged() {
        return Ok(Vec::new());
    }
    if r.operation == Operation::Update && !r.old.is_some_and(|old| significant_update(obj, old)) {
        return Ok(Vec::new());
    }
    let (meta, spec) = kubeforge_podsecurity::decode(obj.get("metadata"), obj.get("spec"))
        .map_err(|_| {
            note("error", "failed to decode pod");
            ApiError::bad_request("failed to decode pod")
        })?;
    evaluate(config, r, policy, policy_err, &meta, &spec, true)
}

fn validate_workload(ctx: &Ctx<'_>, r: &Request<'_>, obj: &Value, config: &Config) -> Vec<String> {
    if !r.subresource.is_empty() || exempt(ctx, config) {
        return Vec::new();
    }
    let (policy, policy_err) = match namespace_policy(ctx, config) {
        Ok(p) => p,
        Err(why) => {
            note("error", why);
            return Vec::new();
        }
    };
    if policy_err.is_none()
        && policy.warn.level == Level::Privileged
        && policy.audit.level == Level::Privileged
    {
        return Vec::new();
    }
    let template = if ctx.def.plural == "cronjobs" {
        obj.pointer("/spec/jobTemplate/spec/template")
    } else if ctx.def.plural == "podtemplates" {
        obj.get("template")
    } else {
        obj.pointer("/spec/template")
    };
    let Some(template) = template else {
        return Vec::new();
    };
    let (meta, spec) =
        match kubeforge_podsecurity::decode(template.get("metadata"), template.get("spec")) {
            Ok(t) => t,
            Err(e) => {
                note("error", format!("failed to extract pod template: {e}"));
                return Vec::new();
            }
        };
    evaluate(config, r, policy, policy_err, &meta, &spec, false).unwrap_or_default()
}

/// kube's `EvaluatePod`: enforce (pods only), then audit and warn, each
/// level:version evaluated once.
fn evaluate(
    config: &Config,
    r: &Request<'_>,
    policy: Policy,
    policy_err: Option<String>,
    meta: &ObjectMeta,
    spec: &PodSpec,
    enforce: bool,
) -> ApiResult<Vec<String>> {
    if spec
        .runtime_class_name
        .as_deref()
        .is_some_and(|rc| config.exempt_runtime_classes.contains(rc))
    {
        note("exempt", "runtimeClass");
        return Ok(Vec::new());
    }
    if let Some(e) = policy_err {
        note("error", format!("Failed to parse policy: {e}"));
    }
    let mut cache: Vec<(LevelVersion, Verdict)> = Vec::with_capacity(3);
    let mut verdict_of = |lv: LevelVersion| -> Verdict {
        if let Some((_, v)) = cache.iter().find(|(l, _)| *l == lv) {
            return v.clone();
        }
        let v = kubeforge_podsecurity::evaluate(lv, meta, spec);
        cache.push((lv, v.clone()));
        v
    };
    let mut refusal = None;
    if enforce {
        note("enforce-policy", policy.enforce.to_string());
        let v = verdict_of(policy.enforce);
        if !v.allowed() {
            refusal = Some(ApiError::forbidden(
                GroupResource {
                    group: "",
                    resource: "pods",
                },
                r.name,
                &format!(
                    "violates PodSecurity {}: {}",
                    kubeforge_apimachinery::gofmt::quote(&policy.enforce.to_string()),
                    v.forbidden_detail()
                ),
            ));
        }
    }
    let would_violate = |lv: LevelVersion, v: &Verdict| {
        format!(
            "would violate PodSecurity {}: {}",
            kubeforge_apimachinery::gofmt::quote(&lv.to_string()),
            v.forbidden_detail()
        )
    };
    let audit = verdict_of(policy.audit);
    let audit_text = (!audit.allowed()).then(|| would_violate(policy.audit, &audit));
    if let Some(t) = &audit_text {
        note("audit-violations", t.clone());
    }
    if let Some(e) = refusal {
        return Err(e);
    }
    if policy.warn == policy.audit {
        return Ok(audit_text.into_iter().collect());
    }
    let warn = verdict_of(policy.warn);
    Ok((!warn.allowed())
        .then(|| would_violate(policy.warn, &warn))
        .into_iter()
        .collect())
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")?.get(key)?.as_str()
}

fn containers<'a>(pod: &'a Value, list: &str) -> &'a [Value] {
    pod.get("spec")
        .and_then(|s| s.get(list))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// kube's `isSignificantPodUpdate`: only an image, a seccomp annotation or
/// the set of containers can change what a pod is allowed to do.
fn significant_update(pod: &Value, old: &Value) -> bool {
    if annotation(pod, SECCOMP_POD_ANNOTATION) != annotation(old, SECCOMP_POD_ANNOTATION) {
        return true;
    }
    let name = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let changed = |c: &Value, o: &Value| {
        let key = format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", name(c));
        c.get("image") != o.get("image") || annotation(pod, &key) != annotation(old, &key)
    };
    for list in ["containers", "initContainers"] {
        let (new, was) = (containers(pod, list), containers(old, list));
        if new.len() != was.len() || new.iter().zip(was).any(|(c, o)| changed(c, o)) {
            return true;
        }
    }
    let was = containers(old, "ephemeralContainers");
    containers(pod, "ephemeralContainers").iter().any(|c| {
        match was.iter().find(|o| name(o) == name(c)) {
            None => true,
            Some(o) => changed(c, o),
        }
    })
}

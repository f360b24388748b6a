//! Ephemeral containers, as kube-apiserver's pod strategies treat them:
//! added only through `pods/{name}/ephemeralcontainers` (GET, PUT, PATCH
//! with a Pod body; `kubectl debug` sends a strategic merge patch), where
//! nothing else of the pod changes and existing ones can be neither
//! removed nor changed (`podEphemeralContainersStrategy`,
//! `ValidatePodEphemeralContainersUpdate`); refused on a plain create
//! (`cannot be set on create`) and unchangeable by a plain update.

use serde_json::Value;

use crate::context::Ctx;
use crate::error::{ApiResult, Cause};

/// Fields an ephemeral container may set (kube's
/// `allowedEphemeralContainerFields`); `resources` may be present empty.
const ALLOWED: &[&str] = &[
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "envFrom",
    "env",
    "volumeMounts",
    "volumeDevices",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
    "targetContainerName",
];

/// kube's updatable pod fields, named in the plain-update refusal.
use crate::pod_validation::UPDATABLE;

fn list(pod: &Value) -> &[Value] {
    pod.pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn forbidden(field: &str, message: String) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {message}"),
        field: field.into(),
    }
}

/// A plain create may not carry ephemeral containers.
pub(crate) fn validate_create(ctx: &Ctx<'_>, pod: &Value, name: &str) -> ApiResult<()> {
    if list(pod).is_empty() {
        return Ok(());
    }
    ctx.def.check_causes(
        name,
        vec![forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create".into(),
        )],
    )
}

/// A plain update: kube's `ValidatePodUpdate` (no field but the
/// updatable ones changes; ephemeral containers only through the
/// subresource).
pub(crate) fn validate_main_update(
    ctx: &Ctx<'_>,
    pod: &Value,
    old: &Value,
    name: &str,
) -> ApiResult<()> {
    let mut found = Vec::new();
    crate::pod_validation::validate_pod_spec_update(pod, old, &mut found);
    let mut causes: Vec<Cause> = found.into_iter().map(Into::into).collect();
    if list(pod) != list(old) && causes.is_empty() {
        causes.push(forbidden(
            "spec",
            format!("pod updates may not change fields other than {UPDATABLE}"),
        ));
    }
    ctx.def.check_causes(name, causes)
}

/// What a write to the subresource stores (`dropNonEphemeralContainerUpdates`):
/// the stored pod with the request's ephemeral containers, name,
/// namespace and resourceVersion.
pub(crate) fn prepare(obj: Value, old: &Value) -> Value {
    let mut out = old.clone();
    let meta = crate::object::meta_mut(&mut out);
    for k in ["name", "namespace", "resourceVersion"] {
        match obj.pointer(&format!("/metadata/{k}")) {
            Some(v) => {
                meta.insert(k.into(), v.clone());
            }
            None => {
                meta.remove(k);
            }
        }
    }
    let ecs = obj.pointer("/spec/ephemeralContainers").cloned();
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        match ecs {
            Some(v) if !v.is_null() => {
                spec.insert("ephemeralContainers".into(), v);
            }
            _ => {
                spec.remove("ephemeralContainers");
            }
        }
    }
    out
}

/// `ValidatePodEphemeralContainersUpdate`, and the ephemeral-container
/// rules of pod spec validation for the containers being added.
pub(crate) fn validate_update(
    ctx: &Ctx<'_>,
    pod: &Value,
    old: &Value,
    name: &str,
) -> ApiResult<()> {
    if old
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some()
    {
        return ctx.def.check_causes(
            name,
            vec![forbidden(
                "",
                "static pods do not support ephemeral containers".into(),
            )],
        );
    }
    let mut causes = Vec::new();
    let new = list(pod);
    let named = |l: &[Value], n: &str| {
        l.iter()
            .find(|c| c.get("name").and_then(Value::as_str) == Some(n))
            .cloned()
    };
    let spec_path = "spec.ephemeralContainers";
    for o in list(old) {
        let n = o.get("name").and_then(Value::as_str).unwrap_or_default();
        match named(new, n) {
            None => causes.push(forbidden(
                spec_path,
                format!("existing ephemeral containers \"{n}\" may not be removed\n"),
            )),
            Some(c) if c != *o => causes.push(forbidden(
                spec_path,
                format!("existing ephemeral containers \"{n}\" may not be changed\n"),
            )),
            Some(_) => {}
        }
    }
    let names_of = |p: &str| -> Vec<String> {
        pod.pointer(p)
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let regular: Vec<String> = [
        names_of("/spec/containers"),
        names_of("/spec/initContainers"),
    ]
    .concat();
    let mut seen = regular.clone();
    for (i, c) in new.iter().enumerate() {
        let path = format!("{spec_path}[{i}]");
        if named(
            list(old),
            c.get("name").and_then(Value::as_str).unwrap_or_default(),
        )
        .as_ref()
            == Some(c)
        {
            seen.push(
                c.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            );
            continue;
        }
        validate_new(c, &path, &regular, &mut seen, &mut causes);
    }
    ctx.def.check_causes(name, causes)
}

/// One ephemeral container being added.
fn validate_new(
    c: &Value,
    path: &str,
    regular: &[String],
    seen: &mut Vec<String>,
    causes: &mut Vec<Cause>,
) {
    let Some(m) = c.as_object() else {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: must be an object".into(),
            field: path.into(),
        });
        return;
    };
    let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: format!("{path}.name"),
        });
    } else if seen.iter().any(|s| s == name) {
        causes.push(Cause {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: \"{name}\""),
            field: format!("{path}.name"),
        });
    } else {
        for msg in kubeforge_apimachinery::names::is_dns1123_label(name) {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: \"{name}\": {msg}"),
                field: format!("{path}.name"),
            });
        }
        seen.push(name.to_string());
    }
    if m.get("image")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: format!("{path}.image"),
        });
    }
    for (k, v) in m {
        let empty = v.is_null()
            || v.as_object()
                .is_some_and(|o| o.values().all(Value::is_null) || o.is_empty())
            || v.as_array().is_some_and(Vec::is_empty);
        if !ALLOWED.contains(&k.as_str()) && !empty {
            causes.push(forbidden(
                &format!("{path}.{k}"),
                "cannot be set for an Ephemeral Container".into(),
            ));
        }
    }
    if let Some(t) = m.get("targetContainerName").and_then(Value::as_str)
        && !t.is_empty()
        && !regular.iter().any(|r| r == t)
    {
        causes.push(Cause {
            reason: "FieldValueNotFound".into(),
            message: format!("Not found: \"{t}\""),
            field: format!("{path}.targetContainerName"),
        });
    }
}

//! Pod priority, as kube-apiserver's `Priority` admission plugin and the
//! scheduling API's validation do it:
//!
//! - the two system PriorityClasses (`system-node-critical`,
//!   `system-cluster-critical`) exist from start-up;
//! - a pod's `spec.priority` and `spec.preemptionPolicy` are computed on
//!   create from its `priorityClassName`, or from the `globalDefault` class
//!   (whose name is then set), or are 0 / `PreemptLowerPriority`; an
//!   unknown class or a conflicting value given in the pod is 403
//!   Forbidden;
//! - PriorityClasses: names starting `system-` are reserved, user values are
//!   at most 1,000,000,000, `value` and `preemptionPolicy` are immutable and
//!   only one class may be the global default.

use serde_json::{Value, json};

use crate::context::Ctx;
use crate::error::{ApiError, ApiResult, Cause};
use crate::object::meta_str;
use crate::server::ApiServer;

/// The classes kube-apiserver creates at start-up: name, value, description.
const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The highest value a user-defined class may have.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

const PREEMPT_LOWER: &str = "PreemptLowerPriority";

/// The storage key of class `name` (the collection prefix for ""), from
/// the registry's row, so it follows the row's storage location.
fn class_key(ctx: &Ctx<'_>, name: &str) -> Option<String> {
    let def = ctx
        .server
        .registry()
        .get("scheduling.k8s.io", "v1", "priorityclasses")?;
    Some(def.key(None, name))
}

/// Whether `ctx` addresses PriorityClasses.
fn is_priority_class(ctx: &Ctx<'_>) -> bool {
    ctx.def.group == "scheduling.k8s.io" && ctx.def.plural == "priorityclasses"
}

/// Create the system PriorityClasses when missing (start-up).
pub(crate) async fn ensure_system_classes(server: &ApiServer) -> ApiResult<()> {
    for (name, value, description) in SYSTEM_CLASSES {
        crate::rest::ensure_object(
            server,
            ("scheduling.k8s.io", "v1", "priorityclasses"),
            json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
                "preemptionPolicy": PREEMPT_LOWER,
            }),
        )
        .await?;
    }
    Ok(())
}

/// The class named `name` as stored, if any.
fn class(ctx: &Ctx<'_>, name: &str) -> Option<Value> {
    let kv = ctx.server.store().get(&class_key(ctx, name)?)?;
    serde_json::from_slice(&kv.value).ok()
}

/// The `globalDefault` class with the lowest value (kube picks that one if
/// several exist, which admission prevents), if any.
fn global_default(ctx: &Ctx<'_>) -> Option<Value> {
    let prefix = class_key(ctx, "")?;
    let page = ctx.server.store().range(&prefix, None, 0);
    // Every pod create asks: parse only the classes that can match (stored
    // objects are compact JSON, so the flag appears exactly like this).
    let flag = "\"globalDefault\":true";
    page.kvs
        .iter()
        .filter(|kv| std::str::from_utf8(&kv.value).is_ok_and(|s| s.contains(flag)))
        .filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .min_by_key(|c| c.get("value").and_then(Value::as_i64).unwrap_or(0))
}

/// The `Priority` admission plugin on a pod create: set `spec.priority`
/// and `spec.preemptionPolicy` (and `priorityClassName` from the global
/// default), refusing an unknown class or conflicting values.
pub(crate) fn admit_pod(ctx: &Ctx<'_>, name: &str, pod: &mut Value) -> ApiResult<()> {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let forbidden = |why: String| ApiError::forbidden(ctx.def.gr(), name, &why);
    let class_name = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let (priority, policy) = if class_name.is_empty() {
        match global_default(ctx) {
            Some(c) => {
                if let Some(n) = c.pointer("/metadata/name").cloned() {
                    spec.insert("priorityClassName".into(), n);
                }
                (value_of(&c), policy_of(&c))
            }
            None => (0, PREEMPT_LOWER.to_string()),
        }
    } else {
        match class(ctx, &class_name) {
            Some(c) => (value_of(&c), policy_of(&c)),
            None => {
                return Err(forbidden(format!(
                    "no PriorityClass with name {class_name} was found"
                )));
            }
        }
    };
    if let Some(given) = spec.get("priority").filter(|v| !v.is_null())
        && given.as_i64() != Some(priority)
    {
        return Err(forbidden(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; \
             priority admission controller computed {priority} from the given PriorityClass name"
        )));
    }
    if let Some(given) = spec
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .filter(|p| *p != policy)
    {
        return Err(forbidden(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; \
             priority admission controller computed {policy} from the given PriorityClass name"
        )));
    }
    spec.insert("priority".into(), json!(priority));
    spec.insert("preemptionPolicy".into(), json!(policy));
    Ok(())
}

/// On a pod update, a client that leaves the computed fields out keeps
/// the stored ones (they are immutable).
pub(crate) fn keep_on_update(obj: &mut Value, old: &Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["priority", "preemptionPolicy", "priorityClassName"] {
        if spec.get(field).is_none_or(Value::is_null)
            && let Some(v) = old.pointer(&format!("/spec/{field}"))
        {
            spec.insert(field.into(), v.clone());
        }
    }
}

fn value_of(class: &Value) -> i64 {
    class.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn policy_of(class: &Value) -> String {
    class
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or(PREEMPT_LOWER)
        .to_string()
}

/// PriorityClass admission: only one global default (403 Forbidden).
pub(crate) fn admit_class(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<()> {
    if !is_priority_class(ctx) || obj.get("globalDefault").and_then(Value::as_bool) != Some(true) {
        return Ok(());
    }
    let name = meta_str(obj, "name").unwrap_or_default();
    if let Some(other) = global_default(ctx)
        && other.pointer("/metadata/name").and_then(Value::as_str) != Some(name)
    {
        let other = other
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Err(ApiError::forbidden(
            ctx.def.gr(),
            name,
            &format!(
                "PriorityClass {other} is already marked as default. Only one default can exist"
            ),
        ));
    }
    Ok(())
}

/// PriorityClass validation (422 causes): reserved `system-` names,
/// the user value ceiling, immutable value and preemption policy.
pub(crate) fn validate_class(
    ctx: &Ctx<'_>,
    obj: &Value,
    old: Option<&Value>,
    causes: &mut Vec<Cause>,
) {
    if !is_priority_class(ctx) {
        return;
    }
    let name = meta_str(obj, "name").unwrap_or_default();
    let value = obj.get("value").and_then(Value::as_i64);
    if value.is_none() {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "value".into(),
        });
    }
    let value = value.unwrap_or(0);
    if name.starts_with("system-") {
        let known = SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name);
        let why = match known {
            None => Some(format!("{name} is not a known system priority class")),
            Some((_, v, _)) if *v != value => {
                Some(format!("value of {name} PriorityClass must be {v}"))
            }
            Some(_) if obj.get("globalDefault").and_then(Value::as_bool) == Some(true) => Some(
                format!("globalDefault of {name} PriorityClass must be false"),
            ),
            Some(_) => None,
        };
        if let Some(why) = why {
            causes.push(Cause {
                reason: "FieldValueForbidden".into(),
                message: format!(
                    "Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: {why}"
                ),
                field: "metadata.name".into(),
            });
        }
    } else if value > HIGHEST_USER_PRIORITY {
        causes.push(Cause {
            reason: "FieldValueForbidden".into(),
            message: format!(
                "Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"
            ),
            field: "value".into(),
        });
    }
    if let Some(policy) = obj.get("preemptionPolicy").and_then(Value::as_str)
        && policy != PREEMPT_LOWER
        && policy != "Never"
    {
        causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: \"{policy}\": supported values: \"Never\", \"PreemptLowerPriority\""
            ),
            field: "preemptionPolicy".into(),
        });
    }
    if let Some(old) = old {
        if old.get("value") != obj.get("value") {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {value}: field is immutable"),
                field: "value".into(),
            });
        }
        let policy = |o: &Value| policy_of(o);
        if policy(old) != policy(obj) {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: \"{}\": field is immutable", policy(obj)),
                field: "preemptionPolicy".into(),
            });
        }
    }
}

//! Strategic merge patch (`application/strategic-merge-patch+json`) for the
//! built-in Kubernetes kinds, as specified in
//! <https://github.com/kubernetes/community/blob/master/contributors/devel/sig-api-machinery/strategic-merge-patch.md>
//! and implemented by `k8s.io/apimachinery/pkg/util/strategicpatch`.
//!
//! The merge is driven by data: a small static tree of type descriptors
//! ([`TypeDesc`]: `ObjectMeta`, `PodSpec`, `Container`, `ServiceSpec`, ...)
//! records, for the fields that need it, the `patchStrategy` and
//! `patchMergeKey` tags of the Go types in `k8s.io/api`, and a root table maps
//! each built-in (group, kind) to its top-level descriptor. Fields not in the
//! tree follow the defaults: maps merge recursively, lists are replaced.
//!
//! Semantics:
//! - maps merge key by key, recursively; `null` deletes a key;
//! - lists are replaced, except lists with strategy `merge`: lists of objects
//!   merge by their merge key (a patch item whose key matches an original item
//!   is merged into it, others are appended), lists of primitives
//!   (`metadata.finalizers`) are unioned;
//! - `$patch: replace` replaces a map, or (as a list item) a whole list;
//!   `$patch: delete` deletes a map, or (as a list item with the merge key)
//!   the matching items of a merging list; `$patch: merge` merges (the
//!   default);
//! - `$retainKeys: [...]` on a map drops the original keys not listed;
//! - `$deleteFromPrimitiveList/<field>: [...]` removes values from a merging
//!   primitive list;
//! - `$setElementOrder/<field>: [...]` orders a list (by merge key for lists
//!   of objects): patch items by that order, items only in the original keep
//!   their relative place.
//!
//! Directive keys never remain in the result, also inside values that are
//! new to the original (Go's implementation copies those verbatim).

use serde_json::{Map, Value};

/// Why a strategic merge patch could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch is malformed (not an object, a directive of the wrong
    /// shape, an unknown `$patch` value); the API server answers 400.
    #[error("{0}")]
    BadRequest(String),
    /// The patch is well-formed but cannot be applied to this object (a
    /// merging list item without its merge key, lists of lists, mixed list
    /// element types, content outside `$retainKeys`); the API server answers
    /// 422.
    #[error("{0}")]
    Invalid(String),
    /// The (group, kind) has no strategic-merge metadata (custom resources,
    /// CRDs, unknown kinds); the API server answers 415.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    Unsupported,
}

impl PatchError {
    /// The HTTP status code the API server uses for this error.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Invalid(_) => 422,
            PatchError::Unsupported => 415,
        }
    }
}

// ---------------------------------------------------------------------------
// Patch metadata.

/// The patch strategy of a field (`patchStrategy` tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// No tag: maps merge, lists are replaced.
    Default,
    /// `merge`: lists merge (by merge key for lists of objects, as a set for
    /// lists of primitives).
    Merge,
    /// `replace`: the value is replaced as a whole, even a map.
    Replace,
}

/// The patch metadata of one field of a type.
#[derive(Debug)]
pub struct FieldDesc {
    /// The JSON field name.
    pub name: &'static str,
    /// The patch strategy.
    pub strategy: Strategy,
    /// The merge key of a merging list of objects (`patchMergeKey` tag).
    pub merge_key: Option<&'static str>,
    /// The type of the value (of a map field) or of the elements (of a list
    /// field), when it has fields with patch metadata of its own.
    pub ty: Option<&'static TypeDesc>,
}

/// The patch metadata of a Go struct type: only its fields that have a
/// strategy, a merge key, or a type with such fields below them.
#[derive(Debug)]
pub struct TypeDesc {
    /// The Go type name (for messages).
    pub name: &'static str,
    /// The described fields.
    pub fields: &'static [FieldDesc],
}

impl TypeDesc {
    /// The metadata of field `name`, if described.
    pub fn field(&self, name: &str) -> Option<&'static FieldDesc> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// A struct-valued field (merged with the default strategy).
const fn object(name: &'static str, ty: &'static TypeDesc) -> FieldDesc {
    FieldDesc {
        name,
        strategy: Strategy::Default,
        merge_key: None,
        ty: Some(ty),
    }
}

/// A list of objects merged by `key`.
const fn keyed(name: &'static str, key: &'static str) -> FieldDesc {
    FieldDesc {
        name,
        strategy: Strategy::Merge,
        merge_key: Some(key),
        ty: None,
    }
}

/// A list of objects of type `ty` merged by `key`.
const fn keyed_of(name: &'static str, key: &'static str, ty: &'static TypeDesc) -> FieldDesc {
    FieldDesc {
        name,
        strategy: Strategy::Merge,
        merge_key: Some(key),
        ty: Some(ty),
    }
}

/// A list of primitives merged as a set.
const fn set(name: &'static str) -> FieldDesc {
    FieldDesc {
        name,
        strategy: Strategy::Merge,
        merge_key: None,
        ty: None,
    }
}

/// A map replaced as a whole.
const fn replaced(name: &'static str) -> FieldDesc {
    FieldDesc {
        name,
        strategy: Strategy::Replace,
        merge_key: None,
        ty: None,
    }
}

const METADATA: FieldDesc = object("metadata", &OBJECT_META);
const CONDITIONS: FieldDesc = keyed("conditions", "type");

/// metav1.ObjectMeta.
pub static OBJECT_META: TypeDesc = TypeDesc {
    name: "ObjectMeta",
    fields: &[set("finalizers"), keyed("ownerReferences", "uid")],
};

/// core/v1 Container (and EphemeralContainer, which shares these fields).
pub static CONTAINER: TypeDesc = TypeDesc {
    name: "Container",
    fields: &[
        keyed("ports", "containerPort"),
        keyed("env", "name"),
        keyed("volumeMounts", "mountPath"),
        keyed("volumeDevices", "devicePath"),
    ],
};

/// core/v1 PodSpec. (`tolerations`, `resizePolicy` and friends are atomic.)
pub static POD_SPEC: TypeDesc = TypeDesc {
    name: "PodSpec",
    fields: &[
        keyed("volumes", "name"),
        keyed_of("initContainers", "name", &CONTAINER),
        keyed_of("containers", "name", &CONTAINER),
        keyed_of("ephemeralContainers", "name", &CONTAINER),
        keyed("imagePullSecrets", "name"),
        keyed("hostAliases", "ip"),
        keyed("topologySpreadConstraints", "topologyKey"),
        keyed("schedulingGates", "name"),
        keyed("resourceClaims", "name"),
    ],
};

/// core/v1 PodStatus.
pub static POD_STATUS: TypeDesc = TypeDesc {
    name: "PodStatus",
    fields: &[
        CONDITIONS,
        keyed("hostIPs", "ip"),
        keyed("podIPs", "ip"),
        keyed("resourceClaimStatuses", "name"),
    ],
};

/// core/v1 PodTemplateSpec.
pub static POD_TEMPLATE_SPEC: TypeDesc = TypeDesc {
    name: "PodTemplateSpec",
    fields: &[METADATA, object("spec", &POD_SPEC)],
};

/// Any status whose only merging list is `conditions` keyed by `type`.
pub static CONDITIONS_STATUS: TypeDesc = TypeDesc {
    name: "Status",
    fields: &[CONDITIONS],
};

/// The spec of workloads with a pod template under `template`
/// (Deployment, ReplicaSet, StatefulSet, DaemonSet, ReplicationController, Job).
pub static WORKLOAD_SPEC: TypeDesc = TypeDesc {
    name: "WorkloadSpec",
    fields: &[object("template", &POD_TEMPLATE_SPEC)],
};

/// batch/v1 JobTemplateSpec.
pub static JOB_TEMPLATE_SPEC: TypeDesc = TypeDesc {
    name: "JobTemplateSpec",
    fields: &[METADATA, object("spec", &WORKLOAD_SPEC)],
};

/// batch/v1 CronJobSpec.
pub static CRON_JOB_SPEC: TypeDesc = TypeDesc {
    name: "CronJobSpec",
    fields: &[object("jobTemplate", &JOB_TEMPLATE_SPEC)],
};

/// core/v1 ServiceSpec.
pub static SERVICE_SPEC: TypeDesc = TypeDesc {
    name: "ServiceSpec",
    fields: &[keyed("ports", "port")],
};

/// core/v1 NodeSpec (`taints` is atomic).
pub static NODE_SPEC: TypeDesc = TypeDesc {
    name: "NodeSpec",
    fields: &[set("podCIDRs")],
};

/// core/v1 NodeStatus.
pub static NODE_STATUS: TypeDesc = TypeDesc {
    name: "NodeStatus",
    fields: &[CONDITIONS, keyed("addresses", "type")],
};

/// policy/v1 PodDisruptionBudgetSpec.
pub static PDB_SPEC: TypeDesc = TypeDesc {
    name: "PodDisruptionBudgetSpec",
    fields: &[replaced("selector")],
};

/// storage/v1 CSINodeSpec.
pub static CSI_NODE_SPEC: TypeDesc = TypeDesc {
    name: "CSINodeSpec",
    fields: &[keyed("drivers", "name")],
};

/// admissionregistration/v1 ValidatingWebhook and MutatingWebhook.
pub static WEBHOOK: TypeDesc = TypeDesc {
    name: "Webhook",
    fields: &[keyed("matchConditions", "name")],
};

/// admissionregistration/v1 ValidatingAdmissionPolicySpec.
pub static VALIDATING_ADMISSION_POLICY_SPEC: TypeDesc = TypeDesc {
    name: "ValidatingAdmissionPolicySpec",
    fields: &[keyed("matchConditions", "name"), keyed("variables", "name")],
};

/// resource.k8s.io ResourceClaimStatus.
pub static RESOURCE_CLAIM_STATUS: TypeDesc = TypeDesc {
    name: "ResourceClaimStatus",
    fields: &[keyed("reservedFor", "uid")],
};

/// Kinds whose only patch metadata is in `metadata`.
pub static META_ONLY: TypeDesc = TypeDesc {
    name: "Object",
    fields: &[METADATA],
};

/// core/v1 Pod.
pub static POD: TypeDesc = TypeDesc {
    name: "Pod",
    fields: &[
        METADATA,
        object("spec", &POD_SPEC),
        object("status", &POD_STATUS),
    ],
};

/// core/v1 PodTemplate.
pub static POD_TEMPLATE: TypeDesc = TypeDesc {
    name: "PodTemplate",
    fields: &[METADATA, object("template", &POD_TEMPLATE_SPEC)],
};

/// Workloads: Deployment, ReplicaSet, StatefulSet, DaemonSet,
/// ReplicationController, Job.
pub static WORKLOAD: TypeDesc = TypeDesc {
    name: "Workload",
    fields: &[
        METADATA,
        object("spec", &WORKLOAD_SPEC),
        object("status", &CONDITIONS_STATUS),
    ],
};

/// batch/v1 CronJob.
pub static CRON_JOB: TypeDesc = TypeDesc {
    name: "CronJob",
    fields: &[METADATA, object("spec", &CRON_JOB_SPEC)],
};

/// core/v1 Service.
pub static SERVICE: TypeDesc = TypeDesc {
    name: "Service",
    fields: &[
        METADATA,
        object("spec", &SERVICE_SPEC),
        object("status", &CONDITIONS_STATUS),
    ],
};

/// core/v1 Node.
pub static NODE: TypeDesc = TypeDesc {
    name: "Node",
    fields: &[
        METADATA,
        object("spec", &NODE_SPEC),
        object("status", &NODE_STATUS),
    ],
};

/// Kinds with `status.conditions` keyed by `type` and nothing else:
/// Namespace, PersistentVolumeClaim, HorizontalPodAutoscaler, FlowSchema,
/// PriorityLevelConfiguration, ServiceCIDR, APIService.
pub static WITH_STATUS_CONDITIONS: TypeDesc = TypeDesc {
    name: "Object",
    fields: &[METADATA, object("status", &CONDITIONS_STATUS)],
};

/// core/v1 ServiceAccount.
pub static SERVICE_ACCOUNT: TypeDesc = TypeDesc {
    name: "ServiceAccount",
    fields: &[METADATA, keyed("secrets", "name")],
};

/// core/v1 ComponentStatus.
pub static COMPONENT_STATUS: TypeDesc = TypeDesc {
    name: "ComponentStatus",
    fields: &[METADATA, CONDITIONS],
};

/// policy/v1 PodDisruptionBudget.
pub static POD_DISRUPTION_BUDGET: TypeDesc = TypeDesc {
    name: "PodDisruptionBudget",
    fields: &[
        METADATA,
        object("spec", &PDB_SPEC),
        object("status", &CONDITIONS_STATUS),
    ],
};

/// storage/v1 CSINode.
pub static CSI_NODE: TypeDesc = TypeDesc {
    name: "CSINode",
    fields: &[METADATA, object("spec", &CSI_NODE_SPEC)],
};

/// admissionregistration/v1 Validating/MutatingWebhookConfiguration.
pub static WEBHOOK_CONFIGURATION: TypeDesc = TypeDesc {
    name: "WebhookConfiguration",
    fields: &[METADATA, keyed_of("webhooks", "name", &WEBHOOK)],
};

/// admissionregistration/v1 ValidatingAdmissionPolicy.
pub static VALIDATING_ADMISSION_POLICY: TypeDesc = TypeDesc {
    name: "ValidatingAdmissionPolicy",
    fields: &[METADATA, object("spec", &VALIDATING_ADMISSION_POLICY_SPEC)],
};

/// resource.k8s.io ResourceClaim.
pub static RESOURCE_CLAIM: TypeDesc = TypeDesc {
    name: "ResourceClaim",
    fields: &[METADATA, object("status", &RESOURCE_CLAIM_STATUS)],
};

/// (group, kind) → top-level type of every built-in kind that supports
/// strategic merge patch. The core group is `""`.
pub static ROOTS: &[(&str, &str, &TypeDesc)] = &[
    // core
    ("", "Pod", &POD),
    ("", "PodTemplate", &POD_TEMPLATE),
    ("", "ReplicationController", &WORKLOAD),
    ("", "Service", &SERVICE),
    ("", "Endpoints", &META_ONLY),
    ("", "Node", &NODE),
    ("", "Namespace", &WITH_STATUS_CONDITIONS),
    ("", "ConfigMap", &META_ONLY),
    ("", "Secret", &META_ONLY),
    ("", "ServiceAccount", &SERVICE_ACCOUNT),
    ("", "PersistentVolume", &META_ONLY),
    ("", "PersistentVolumeClaim", &WITH_STATUS_CONDITIONS),
    ("", "Event", &META_ONLY),
    ("", "LimitRange", &META_ONLY),
    ("", "ResourceQuota", &META_ONLY),
    ("", "ComponentStatus", &COMPONENT_STATUS),
    // apps
    ("apps", "Deployment", &WORKLOAD),
    ("apps", "ReplicaSet", &WORKLOAD),
    ("apps", "StatefulSet", &WORKLOAD),
    ("apps", "DaemonSet", &WORKLOAD),
    ("apps", "ControllerRevision", &META_ONLY),
    // batch
    ("batch", "Job", &WORKLOAD),
    ("batch", "CronJob", &CRON_JOB),
    // autoscaling
    (
        "autoscaling",
        "HorizontalPodAutoscaler",
        &WITH_STATUS_CONDITIONS,
    ),
    // policy
    ("policy", "PodDisruptionBudget", &POD_DISRUPTION_BUDGET),
    // networking
    ("networking.k8s.io", "Ingress", &META_ONLY),
    ("networking.k8s.io", "IngressClass", &META_ONLY),
    ("networking.k8s.io", "NetworkPolicy", &META_ONLY),
    ("networking.k8s.io", "IPAddress", &META_ONLY),
    ("networking.k8s.io", "ServiceCIDR", &WITH_STATUS_CONDITIONS),
    ("discovery.k8s.io", "EndpointSlice", &META_ONLY),
    ("events.k8s.io", "Event", &META_ONLY),
    ("coordination.k8s.io", "Lease", &META_ONLY),
    ("scheduling.k8s.io", "PriorityClass", &META_ONLY),
    ("node.k8s.io", "RuntimeClass", &META_ONLY),
    // storage
    ("storage.k8s.io", "StorageClass", &META_ONLY),
    ("storage.k8s.io", "CSIDriver", &META_ONLY),
    ("storage.k8s.io", "CSINode", &CSI_NODE),
    ("storage.k8s.io", "CSIStorageCapacity", &META_ONLY),
    ("storage.k8s.io", "VolumeAttachment", &META_ONLY),
    ("storage.k8s.io", "VolumeAttributesClass", &META_ONLY),
    // rbac
    ("rbac.authorization.k8s.io", "Role", &META_ONLY),
    ("rbac.authorization.k8s.io", "ClusterRole", &META_ONLY),
    ("rbac.authorization.k8s.io", "RoleBinding", &META_ONLY),
    (
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        &META_ONLY,
    ),
    // admission
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        &WEBHOOK_CONFIGURATION,
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        &WEBHOOK_CONFIGURATION,
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        &VALIDATING_ADMISSION_POLICY,
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        &META_ONLY,
    ),
    // others
    (
        "certificates.k8s.io",
        "CertificateSigningRequest",
        &META_ONLY,
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "FlowSchema",
        &WITH_STATUS_CONDITIONS,
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "PriorityLevelConfiguration",
        &WITH_STATUS_CONDITIONS,
    ),
    (
        "apiregistration.k8s.io",
        "APIService",
        &WITH_STATUS_CONDITIONS,
    ),
    ("resource.k8s.io", "ResourceClaim", &RESOURCE_CLAIM),
    ("resource.k8s.io", "ResourceClaimTemplate", &META_ONLY),
    ("resource.k8s.io", "DeviceClass", &META_ONLY),
    ("resource.k8s.io", "ResourceSlice", &META_ONLY),
];

/// The top-level type descriptor of a built-in (group, kind).
pub fn root_type(group: &str, kind: &str) -> Option<&'static TypeDesc> {
    ROOTS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map(|(_, _, t)| *t)
}

/// Whether (group, kind) is a built-in kind that accepts a strategic merge
/// patch. Custom resources, CRDs and unknown kinds do not.
pub fn supports_strategic_merge(group: &str, kind: &str) -> bool {
    root_type(group, kind).is_some()
}

// ---------------------------------------------------------------------------
// The merge.

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

type Ty = Option<&'static TypeDesc>;

/// Applies the strategic merge patch `patch` to `original`, an object of the
/// built-in kind (group, kind). Neither input is modified.
pub fn strategic_merge_patch(
    original: &Value,
    patch: &Value,
    group: &str,
    kind: &str,
) -> Result<Value, PatchError> {
    let root = root_type(group, kind).ok_or(PatchError::Unsupported)?;
    let Value::Object(patch) = patch else {
        return Err(PatchError::BadRequest(format!(
            "a strategic merge patch must be a JSON object, got {}",
            json_type(patch)
        )));
    };
    let original = match original {
        Value::Object(o) => o.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(PatchError::Invalid(format!(
                "the object to patch must be a JSON object, got {}",
                json_type(other)
            )));
        }
    };
    Ok(Value::Object(
        merge_map(original, patch, Some(root))?.unwrap_or_default(),
    ))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn field_of(ty: Ty, name: &str) -> Option<&'static FieldDesc> {
    ty.and_then(|t| t.field(name))
}

fn elem_ty(field: Option<&'static FieldDesc>) -> Ty {
    field.and_then(|f| f.ty)
}

/// Equality as Go compares decoded JSON values: numbers as float64.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> PatchError {
    let d = directive
        .as_str()
        .map_or_else(|| directive.to_string(), str::to_string);
    PatchError::BadRequest(format!(
        "unknown patch type: {d} in map: {}",
        Value::Object(map.clone())
    ))
}

fn no_merge_key(map: &Map<String, Value>, key: &str) -> PatchError {
    PatchError::Invalid(format!(
        "map: {} does not contain declared merge key: {key}",
        Value::Object(map.clone())
    ))
}

/// Merges `patch` into `original`. `None` means the map was deleted
/// (`$patch: delete`).
fn merge_map(
    original: Map<String, Value>,
    patch: &Map<String, Value>,
    ty: Ty,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match patch.get(DIRECTIVE) {
        None => merge_map_body(original, patch, ty).map(Some),
        Some(d) => match d.as_str() {
            Some("replace") => merge_map_body(Map::new(), patch, ty).map(Some),
            Some("delete") => Ok(None),
            Some("merge") => merge_map_body(original, patch, ty).map(Some),
            _ => Err(bad_patch_type(d, patch)),
        },
    }
}

/// The value a patch value takes where the original has nothing (or a value
/// of another JSON type): the patch value with its directives applied to
/// emptiness. `None` if it deletes itself.
fn fresh(patch: &Value, field: Option<&'static FieldDesc>) -> Result<Option<Value>, PatchError> {
    Ok(match patch {
        Value::Object(p) => merge_map(Map::new(), p, elem_ty(field))?.map(Value::Object),
        Value::Array(p) => Some(Value::Array(merge_list(Vec::new(), p, field, false)?)),
        other => Some(other.clone()),
    })
}

fn merge_map_body(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    ty: Ty,
) -> Result<Map<String, Value>, PatchError> {
    apply_retain_keys(&mut original, patch)?;
    let ordered = apply_set_element_order(&mut original, patch, ty)?;

    // Deletions from primitive lists first, then the other keys, so the result
    // does not depend on the order of the patch's keys.
    for (k, pv) in patch {
        let Some(key) = k.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else {
            continue;
        };
        let to_delete = match pv {
            Value::Array(a) => a,
            Value::Null => continue,
            _ => {
                return Err(PatchError::BadRequest(
                    "invalid patch format of primitive list".into(),
                ));
            }
        };
        if let Some(Value::Array(list)) = original.get_mut(key) {
            let current = std::mem::take(list);
            *list = merge_list(current, to_delete, field_of(ty, key), true)?;
        }
    }

    for (k, pv) in patch {
        if k.starts_with('$') || ordered.contains(&k.as_str()) {
            // Directives were handled above; unknown ones are ignored, as
            // the API server ignores directives it does not recognize.
            continue;
        }
        if pv.is_null() {
            original.remove(k);
            continue;
        }
        let field = field_of(ty, k);
        let merged = match (original.get_mut(k), pv) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                let o = std::mem::take(o);
                if field.is_some_and(|f| f.strategy == Strategy::Replace) {
                    merge_map(Map::new(), p, elem_ty(field))?
                } else {
                    merge_map(o, p, elem_ty(field))?
                }
                .map(Value::Object)
            }
            (Some(Value::Array(o)), Value::Array(p)) => {
                let o = std::mem::take(o);
                Some(Value::Array(merge_list(o, p, field, false)?))
            }
            (_, p) => fresh(p, field)?,
        };
        match merged {
            Some(v) => match original.get_mut(k) {
                Some(slot) => *slot = v,
                None => {
                    original.insert(k.clone(), v);
                }
            },
            None => {
                original.remove(k);
            }
        }
    }
    Ok(original)
}

/// `$retainKeys`: drop the original keys not listed; every key the patch sets
/// must be listed.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.get(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(PatchError::BadRequest(
            "invalid patch format of retainKeys".into(),
        ));
    };
    let listed = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
    for (k, v) in patch {
        if v.is_null() || k.starts_with('$') {
            continue;
        }
        if !listed(k) {
            return Err(PatchError::Invalid(
                "patch content doesn't match retainKeys list".into(),
            ));
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `$setElementOrder/<field>`: merges the patch list of each ordered field
/// (if any) and orders the result. Returns the fields it handled.
fn apply_set_element_order<'p>(
    original: &mut Map<String, Value>,
    patch: &'p Map<String, Value>,
    ty: Ty,
) -> Result<Vec<&'p str>, PatchError> {
    let mut handled = Vec::new();
    for (k, order) in patch {
        let Some(key) = k.strip_prefix(SET_ELEMENT_ORDER) else {
            continue;
        };
        let bad = || PatchError::BadRequest("invalid patch format of setElementOrder list".into());
        let Value::Array(order) = order else {
            return Err(bad());
        };
        let field = field_of(ty, key);
        let merge_key = field.and_then(|f| f.merge_key);
        let patch_list = match patch.get(key) {
            None => None,
            Some(Value::Array(p)) => Some(p),
            // A null or non-list value replaces the field; nothing to order.
            Some(_) => continue,
        };
        let original_list = match original.get(key) {
            Some(Value::Array(o)) => Some(o.clone()),
            _ => None,
        };
        if let Some(p) = patch_list {
            validate_set_element_order(p, order, merge_key)?;
        }
        let merged = match (original_list.clone(), patch_list) {
            (Some(o), None) => o,
            (o, Some(p)) => merge_list(o.unwrap_or_default(), p, field, false)?,
            (None, None) => continue,
        };
        let keyed = merge_key.filter(|_| merged.iter().all(Value::is_object));
        let (patch_items, server_only): (Vec<Value>, Vec<Value>) = merged
            .into_iter()
            .partition(|v| index_of(order, v, keyed).is_some());
        let server_order = original_list.unwrap_or_default();
        let result = normalize_element_order(patch_items, server_only, order, &server_order, keyed);
        original.insert(key.to_string(), Value::Array(result));
        handled.push(key);
    }
    Ok(handled)
}

/// Checks that the patch list's items appear in the same relative order as
/// in the `$setElementOrder` list (Go's `validatePatchWithSetOrderList`).
fn validate_set_element_order(
    patch_list: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), PatchError> {
    if patch_list.is_empty() || order.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<&Value> = match merge_key {
        Some(_) => patch_list
            .iter()
            .filter(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
            .collect(),
        None => patch_list.iter().collect(),
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        let item = non_delete[pi];
        if item.get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        let equal = match merge_key {
            Some(mk) => {
                let (Value::Object(a), Value::Object(b)) = (item, &order[oi]) else {
                    return Err(PatchError::BadRequest(
                        "invalid patch format of setElementOrder list".into(),
                    ));
                };
                let av = a.get(mk).ok_or_else(|| no_merge_key(a, mk))?;
                let bv = b.get(mk).ok_or_else(|| no_merge_key(b, mk))?;
                json_eq(av, bv)
            }
            None => json_eq(item, &order[oi]),
        };
        if equal {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(PatchError::Invalid(format!(
            "the order in patch list {} doesn't match $setElementOrder list {}",
            Value::Array(patch_list.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

/// Merges a patch list into an original list according to the field's
/// strategy. `is_delete` is set for `$deleteFromPrimitiveList`.
fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    field: Option<&'static FieldDesc>,
    is_delete: bool,
) -> Result<Vec<Value>, PatchError> {
    let strategy = field.map_or(Strategy::Default, |f| f.strategy);
    if strategy == Strategy::Merge || is_delete {
        merge_slice(
            original,
            patch,
            field.and_then(|f| f.merge_key),
            elem_ty(field),
            is_delete,
        )
    } else {
        atomic_list(patch, elem_ty(field))
    }
}

/// A replaced list: the patch list, with directive items dropped and the
/// directives inside its objects applied.
fn atomic_list(patch: &[Value], ty: Ty) -> Result<Vec<Value>, PatchError> {
    let mut out = Vec::with_capacity(patch.len());
    for v in patch {
        match v {
            Value::Object(m) => match m.get(DIRECTIVE) {
                Some(d) if d.as_str() == Some("replace") || d.as_str() == Some("delete") => {}
                _ => {
                    if let Some(m) = merge_map(Map::new(), m, ty)? {
                        out.push(Value::Object(m));
                    }
                }
            },
            other => out.push(other.clone()),
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ElemKind {
    Object,
    Scalar,
}

/// The common kind of the elements of both lists (Go's `sliceElementType`).
fn element_kind(a: &[Value], b: &[Value]) -> Result<ElemKind, PatchError> {
    let mut kind: Option<(ElemKind, &'static str)> = None;
    for v in a.iter().chain(b) {
        if v.is_array() {
            return Err(PatchError::Invalid(
                "lists of lists are not supported".into(),
            ));
        }
        let this = (
            if v.is_object() {
                ElemKind::Object
            } else {
                ElemKind::Scalar
            },
            json_type(v),
        );
        match kind {
            None => kind = Some(this),
            Some(k) if k.1 != this.1 => {
                return Err(PatchError::Invalid(format!(
                    "list element types are not identical: {} and {}",
                    Value::Array(a.to_vec()),
                    Value::Array(b.to_vec())
                )));
            }
            Some(_) => {}
        }
    }
    Ok(kind.map_or(ElemKind::Scalar, |k| k.0))
}

/// Merges two lists with the `merge` strategy (Go's `mergeSlice`).
fn merge_slice(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: Option<&str>,
    ty: Ty,
    is_delete: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    if element_kind(&original, patch)? == ElemKind::Scalar {
        if is_delete {
            original.retain(|v| !patch.iter().any(|d| json_eq(v, d)));
            return Ok(original);
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch) {
            if !merged.iter().any(|m| json_eq(m, v)) {
                merged.push(v.clone());
            }
        }
        let (patch_items, server_only): (Vec<Value>, Vec<Value>) = merged
            .into_iter()
            .partition(|v| patch.iter().any(|p| json_eq(p, v)));
        return Ok(normalize_element_order(
            patch_items,
            server_only,
            patch,
            &original,
            None,
        ));
    }

    if is_delete {
        return Err(PatchError::BadRequest(
            "invalid patch format of primitive list".into(),
        ));
    }
    let Some(mk) = merge_key else {
        let name = ty.map_or("object", |t| t.name);
        return Err(PatchError::Invalid(format!(
            "cannot merge lists without merge key for {name}"
        )));
    };

    // Items with a `$patch` directive first: deletions and whole-list
    // replacement.
    let mut replace = false;
    let mut plain: Vec<&Map<String, Value>> = Vec::with_capacity(patch.len());
    for v in patch {
        let Value::Object(m) = v else { continue };
        match m.get(DIRECTIVE) {
            None => plain.push(m),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let key = m.get(mk).ok_or_else(|| no_merge_key(m, mk))?;
                    original.retain(|o| !o.get(mk).is_some_and(|ov| json_eq(ov, key)));
                }
                Some("replace") => replace = true,
                // `$patch: merge` is the list's own strategy; the item merges.
                Some("merge") => plain.push(m),
                _ => return Err(bad_patch_type(d, m)),
            },
        }
    }
    if replace {
        let mut replacement = Vec::with_capacity(plain.len());
        for m in plain.drain(..) {
            if let Some(m) = merge_map(Map::new(), m, ty)? {
                replacement.push(Value::Object(m));
            }
        }
        original = replacement;
    }

    let mut merged = original.clone();
    for m in &plain {
        let key = m.get(mk).ok_or_else(|| no_merge_key(m, mk))?;
        let found = merged
            .iter()
            .position(|o| o.get(mk).is_some_and(|ov| json_eq(ov, key)));
        match found {
            Some(i) => {
                let Value::Object(o) = std::mem::take(&mut merged[i]) else {
                    continue;
                };
                match merge_map(o, m, ty)? {
                    Some(r) => merged[i] = Value::Object(r),
                    None => {
                        merged.remove(i);
                    }
                }
            }
            None => {
                if let Some(r) = merge_map(Map::new(), m, ty)? {
                    merged.push(Value::Object(r));
                }
            }
        }
    }

    let patch_order: Vec<Value> = plain.iter().map(|m| Value::Object((*m).clone())).collect();
    let (patch_items, server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| index_of(&patch_order, v, Some(mk)).is_some());
    Ok(normalize_element_order(
        patch_items,
        server_only,
        &patch_order,
        &original,
        Some(mk),
    ))
}

/// The position of `item` in `list`, comparing merge-key values when
/// `merge_key` is set (items without the key are never found), whole values
/// otherwise.
fn index_of(list: &[Value], item: &Value, merge_key: Option<&str>) -> Option<usize> {
    match merge_key {
        Some(mk) => {
            let want = item.get(mk)?;
            list.iter()
                .position(|v| v.get(mk).is_some_and(|v| json_eq(v, want)))
        }
        None => list.iter().position(|v| json_eq(v, item)),
    }
}

/// Go's `normalizeElementOrder`: sorts the patch items by the patch order and
/// the server-only items by the original order, then interleaves them so
/// that server-only items keep their place relative to the patch items that
/// were already in the original.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let patch_items = sort_by_order(patch_items, patch_order, merge_key);
    let server_only = sort_by_order(server_only, server_order, merge_key);
    merge_sorted(server_only, patch_items, server_order, merge_key)
}

/// A stable sort by position in `order`; items not in `order` go last.
fn sort_by_order(mut items: Vec<Value>, order: &[Value], merge_key: Option<&str>) -> Vec<Value> {
    items.sort_by_cached_key(|v| index_of(order, v, merge_key).unwrap_or(usize::MAX));
    items
}

/// Go's `mergeSortedSlice`: takes `left` (server-only) items before the
/// current `right` (patch) item only when both are in `server_order` and the
/// left one comes first there.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (index_of(server_order, l, merge_key), index_of(server_order, r, merge_key)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(original: Value, patch: Value, group: &str, kind: &str) -> Value {
        strategic_merge_patch(&original, &patch, group, kind).unwrap()
    }

    fn pod(original: Value, patch: Value) -> Value {
        smp(original, patch, "", "Pod")
    }

    fn names(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    }

    /// No key starting with '$' anywhere in the value.
    fn assert_no_directives(v: &Value) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    assert!(!k.starts_with('$'), "directive {k} left in result");
                    assert_no_directives(v);
                }
            }
            Value::Array(a) => a.iter().for_each(assert_no_directives),
            _ => {}
        }
    }

    #[test]
    fn maps_merge_and_null_deletes() {
        let out = smp(
            json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "data": {"k": "v"}}),
            json!({"metadata": {"labels": {"y": null, "z": "3", "w": null}}, "data": {"k2": "v2"}}),
            "",
            "ConfigMap",
        );
        assert_eq!(
            out,
            json!({"metadata": {"name": "a", "labels": {"x": "1", "z": "3"}}, "data": {"k": "v", "k2": "v2"}})
        );
    }

    #[test]
    fn lists_replace_by_default() {
        let out = pod(
            json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}], "containers": [{"name": "c", "args": ["x", "y"]}]}}),
            json!({"spec": {"tolerations": [{"key": "c"}], "containers": [{"name": "c", "args": ["z"]}]}}),
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "c"}]));
        assert_eq!(out["spec"]["containers"][0]["args"], json!(["z"]));
    }

    #[test]
    fn type_changes_replace() {
        let out = smp(
            json!({"data": {"a": {"x": 1}, "b": [1], "c": "s"}}),
            json!({"data": {"a": "now a string", "b": {"k": null, "v": 1}, "c": [1, 2]}}),
            "",
            "ConfigMap",
        );
        assert_eq!(
            out["data"],
            json!({"a": "now a string", "b": {"v": 1}, "c": [1, 2]})
        );
    }

    #[test]
    fn containers_merge_by_name_image_and_env() {
        let original = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "app", "image": "nginx:1.25", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "sidecar", "image": "envoy"}
            ]}
        });
        let patch = json!({"spec": {"containers": [
            {"name": "app", "image": "nginx:1.27", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "changed"}]}
        ]}});
        let out = pod(original, patch);
        assert_eq!(
            out["spec"]["containers"],
            json!([
                // Patch items come in patch order.
                {"name": "app", "image": "nginx:1.27", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "changed"}], "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                {"name": "sidecar", "image": "envoy"}
            ])
        );
    }

    #[test]
    fn new_container_goes_first_without_set_element_order() {
        // As in Go (and the kubectl patch documentation): without
        // $setElementOrder a new item is placed before the server-only items.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "c", "image": "x"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["c", "a", "b"]);
        // With it, wherever the order says.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
                "containers": [{"name": "c", "image": "x"}]
            }}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["a", "b", "c"]);
    }

    #[test]
    fn merge_order_follows_go() {
        // Patch items keep patch order; server-only items keep their place
        // relative to the patch items that were in the original.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}),
            json!({"spec": {"containers": [{"name": "b", "image": "x"}, {"name": "d"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["a", "b", "d", "c"]);
    }

    #[test]
    fn patch_delete_in_merging_list() {
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}], "volumes": [{"name": "v", "emptyDir": {}}]}}),
            json!({"spec": {"containers": [{"name": "b", "$patch": "delete"}], "volumes": [{"$patch": "delete", "name": "v"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["a", "c"]);
        assert_eq!(out["spec"]["volumes"], json!([]));
    }

    #[test]
    fn patch_delete_map() {
        let out = smp(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"rollingUpdate": {"$patch": "delete"}, "type": "Recreate"}}}),
            "apps",
            "Deployment",
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        // At the top level the whole object is emptied.
        assert_eq!(pod(json!({"a": 1}), json!({"$patch": "delete"})), json!({}));
    }

    #[test]
    fn patch_replace_map_and_list() {
        let out = pod(
            json!({"spec": {"nodeSelector": {"a": "1", "b": "2"}, "containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {
                "nodeSelector": {"$patch": "replace", "c": "3", "gone": null},
                "containers": [{"name": "z", "env": [{"name": "E", "$patch": "delete"}]}, {"$patch": "replace"}]
            }}),
        );
        assert_eq!(out["spec"]["nodeSelector"], json!({"c": "3"}));
        assert_eq!(out["spec"]["containers"], json!([{"name": "z", "env": []}]));
        assert_no_directives(&out);
    }

    #[test]
    fn patch_merge_directive() {
        let out = pod(
            json!({"spec": {"nodeSelector": {"a": "1"}, "containers": [{"name": "a", "image": "x"}]}}),
            json!({"spec": {"nodeSelector": {"$patch": "merge", "b": "2"}, "containers": [{"name": "a", "image": "y", "$patch": "merge"}]}}),
        );
        assert_eq!(out["spec"]["nodeSelector"], json!({"a": "1", "b": "2"}));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "y"}])
        );
    }

    #[test]
    fn retain_keys() {
        let out = smp(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            "apps",
            "Deployment",
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));

        let out = pod(
            json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}),
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}),
        );
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "v", "hostPath": {"path": "/x"}}])
        );

        let e = strategic_merge_patch(
            &json!({"spec": {"strategy": {}}}),
            &json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
            "apps",
            "Deployment",
        )
        .unwrap_err();
        assert_eq!(
            e,
            PatchError::Invalid("patch content doesn't match retainKeys list".into())
        );
        assert_eq!(e.status_code(), 422);
        let e = strategic_merge_patch(&json!({}), &json!({"$retainKeys": "type"}), "", "Pod")
            .unwrap_err();
        assert_eq!(
            e,
            PatchError::BadRequest("invalid patch format of retainKeys".into())
        );
    }

    #[test]
    fn primitive_merge_list_union_and_delete() {
        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));

        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "x"], "finalizers": ["d"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["d", "a", "c"]));

        // Nothing to delete from: no list appears.
        let out = pod(
            json!({"metadata": {}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
        );
        assert_eq!(out, json!({"metadata": {}}));

        let e = strategic_merge_patch(
            &json!({"metadata": {"finalizers": ["a"]}}),
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "invalid patch format of primitive list");
    }

    #[test]
    fn set_element_order_maps() {
        let out = pod(
            json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}, {"name": "c", "image": "3"}]}}),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                "containers": [{"name": "a", "image": "new"}]
            }}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["c", "a", "b"]);
        assert_eq!(out["spec"]["containers"][1]["image"], "new");
        assert_no_directives(&out);

        // Order only, no content change.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["b", "a"]);

        // Server-only items (not in the order list) are interleaved by their
        // original position, as Go's mergeSortedSlice does.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "s"}, {"name": "b"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "b", "image": "x"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["s", "b", "a"]);

        // With a deletion and an addition.
        let out = pod(
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "n"}, {"name": "b"}],
                "containers": [{"name": "n"}, {"$patch": "delete", "name": "a"}]
            }}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["n", "b"]);
        assert_no_directives(&out);

        // An addition placed first by the order.
        let out = pod(
            json!({"spec": {"containers": [{"name": "x"}]}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "y"}, {"name": "x"}], "containers": [{"name": "y"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["y", "x"]);

        // The list is new to the object.
        let out = pod(
            json!({"spec": {}}),
            json!({"spec": {"$setElementOrder/containers": [{"name": "y"}, {"name": "x"}], "containers": [{"name": "y"}, {"name": "x", "$patch": "delete"}]}}),
        );
        assert_eq!(names(&out["spec"]["containers"]), ["y"]);
        assert_no_directives(&out);
    }

    #[test]
    fn set_element_order_primitives() {
        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));

        // kubectl's form when removing "b" and adding "d".
        let out = pod(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["a", "d", "c"],
                "$deleteFromPrimitiveList/finalizers": ["b"],
                "finalizers": ["d"]
            }}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "d", "c"]));
    }

    #[test]
    fn set_element_order_mismatch_is_rejected() {
        let e = strategic_merge_patch(
            &json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}),
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}], "containers": [{"name": "b"}, {"name": "a"}]}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert!(matches!(e, PatchError::Invalid(_)), "{e}");
        assert!(
            e.to_string()
                .contains("doesn't match $setElementOrder list"),
            "{e}"
        );
        let e = strategic_merge_patch(
            &json!({}),
            &json!({"spec": {"$setElementOrder/containers": {}}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert_eq!(
            e,
            PatchError::BadRequest("invalid patch format of setElementOrder list".into())
        );
    }

    #[test]
    fn other_merge_keys() {
        // Service ports by port, node conditions and addresses by type.
        let out = smp(
            json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}),
            json!({"spec": {"ports": [{"port": 443, "targetPort": 8443}]}}),
            "",
            "Service",
        );
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "name": "http"}, {"port": 443, "name": "https", "targetPort": 8443}])
        );
        let out = smp(
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}],
                              "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "Hostname", "address": "n1"}]}}),
            "",
            "Node",
        );
        assert_eq!(
            out["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True"})
        );
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(out["status"]["addresses"].as_array().unwrap().len(), 2);
        // Owner references by uid; numbers compare as numbers.
        let out = pod(
            json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}, "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}}),
            json!({"metadata": {"ownerReferences": [{"uid": "1", "controller": true}]}, "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80.0, "name": "http"}]}]}}),
        );
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "1", "name": "a", "controller": true}])
        );
        assert_eq!(
            out["spec"]["containers"][0]["ports"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        // Deployment pod template, CronJob job template, status conditions.
        let out = smp(
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}}}}}}),
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "2"}]}}}}}}),
            "batch",
            "CronJob",
        );
        assert_eq!(
            names(&out["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]),
            ["a", "b"]
        );
        let out = smp(
            json!({"status": {"conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Progressing", "status": "False"}]}}),
            "apps",
            "Deployment",
        );
        assert_eq!(out["status"]["conditions"][1]["status"], "False");
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
        // ServiceAccount secrets by name; PodTemplate template.
        let out = smp(
            json!({"secrets": [{"name": "a"}]}),
            json!({"secrets": [{"name": "b"}]}),
            "",
            "ServiceAccount",
        );
        assert_eq!(names(&out["secrets"]), ["b", "a"]);
        let out = smp(
            json!({"template": {"spec": {"containers": [{"name": "a"}]}}}),
            json!({"template": {"spec": {"containers": [{"name": "b"}]}}}),
            "",
            "PodTemplate",
        );
        assert_eq!(names(&out["template"]["spec"]["containers"]), ["b", "a"]);
    }

    #[test]
    fn replace_strategy_map() {
        let out = smp(
            json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "minAvailable": 1}}),
            json!({"spec": {"selector": {"matchExpressions": [{"key": "b", "operator": "Exists"}]}}}),
            "policy",
            "PodDisruptionBudget",
        );
        assert_eq!(
            out["spec"],
            json!({"selector": {"matchExpressions": [{"key": "b", "operator": "Exists"}]}, "minAvailable": 1})
        );
    }

    #[test]
    fn kinds_without_special_lists_merge_maps_and_replace_lists() {
        let out = smp(
            json!({"metadata": {"name": "r", "labels": {"a": "1"}}, "rules": [{"verbs": ["get"]}]}),
            json!({"metadata": {"labels": {"b": "2"}}, "rules": [{"verbs": ["list"]}]}),
            "rbac.authorization.k8s.io",
            "ClusterRole",
        );
        assert_eq!(
            out,
            json!({"metadata": {"name": "r", "labels": {"a": "1", "b": "2"}}, "rules": [{"verbs": ["list"]}]})
        );
    }

    #[test]
    fn directives_never_remain_in_new_values() {
        let out = pod(
            json!({"metadata": {"name": "p"}}),
            json!({
                "metadata": {"labels": {"a": "1", "b": null}, "finalizers": ["x"], "$deleteFromPrimitiveList/finalizers": ["y"]},
                "spec": {
                    "$setElementOrder/containers": [{"name": "a"}],
                    "containers": [{"name": "a", "$retainKeys": ["name", "env"], "env": [{"name": "X", "$patch": "delete"}, {"name": "Y"}]}],
                    "affinity": {"$patch": "replace", "nodeAffinity": {}},
                    "dnsConfig": {"$patch": "delete"},
                    "tolerations": [{"key": "k"}, {"$patch": "replace"}],
                    "$unknownDirective": 1
                }
            }),
        );
        assert_no_directives(&out);
        assert_eq!(
            out,
            json!({
                "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
                "spec": {
                    "containers": [{"name": "a", "env": [{"name": "Y"}]}],
                    "affinity": {"nodeAffinity": {}},
                    "tolerations": [{"key": "k"}]
                }
            })
        );
    }

    #[test]
    fn invalid_patches() {
        let e = strategic_merge_patch(&json!({}), &json!([1]), "", "Pod").unwrap_err();
        assert_eq!(
            e,
            PatchError::BadRequest(
                "a strategic merge patch must be a JSON object, got array".into()
            )
        );
        assert_eq!(e.status_code(), 400);

        let e = strategic_merge_patch(
            &json!({"spec": {"containers": [{"name": "a"}]}}),
            &json!({"spec": {"containers": [{"image": "x"}]}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert_eq!(
            e,
            PatchError::Invalid(
                "map: {\"image\":\"x\"} does not contain declared merge key: name".into()
            )
        );

        let e = strategic_merge_patch(
            &json!({"spec": {"containers": [{"name": "a"}]}}),
            &json!({"spec": {"containers": [{"$patch": "delete"}]}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("does not contain declared merge key: name"),
            "{e}"
        );

        let e = strategic_merge_patch(
            &json!({}),
            &json!({"spec": {"$patch": "explode"}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert_eq!(
            e,
            PatchError::BadRequest(
                "unknown patch type: explode in map: {\"$patch\":\"explode\"}".into()
            )
        );

        let e = strategic_merge_patch(
            &json!({"spec": {"containers": [{"name": "a"}]}}),
            &json!({"spec": {"containers": [{"name": "a", "$patch": "bogus"}]}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown patch type: bogus in map:"),
            "{e}"
        );

        let e = strategic_merge_patch(
            &json!({"metadata": {"finalizers": ["a"]}}),
            &json!({"metadata": {"finalizers": [["b"]]}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert_eq!(
            e,
            PatchError::Invalid("lists of lists are not supported".into())
        );

        let e = strategic_merge_patch(
            &json!({"spec": {"containers": [{"name": "a"}]}}),
            &json!({"spec": {"containers": ["a"]}}),
            "",
            "Pod",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("list element types are not identical"),
            "{e}"
        );
    }

    #[test]
    fn supported_kinds() {
        for (g, k) in [
            ("", "Pod"),
            ("", "ConfigMap"),
            ("", "Namespace"),
            ("apps", "Deployment"),
            ("batch", "CronJob"),
            ("networking.k8s.io", "Ingress"),
            ("rbac.authorization.k8s.io", "RoleBinding"),
            ("coordination.k8s.io", "Lease"),
            ("storage.k8s.io", "StorageClass"),
            ("policy", "PodDisruptionBudget"),
            ("autoscaling", "HorizontalPodAutoscaler"),
            ("scheduling.k8s.io", "PriorityClass"),
        ] {
            assert!(supports_strategic_merge(g, k), "{g}/{k}");
        }
        for (g, k) in [
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("example.com", "Widget"),
            ("", "Deployment"),
            ("apps", "Pod"),
        ] {
            assert!(!supports_strategic_merge(g, k), "{g}/{k}");
        }
        let e = strategic_merge_patch(&json!({}), &json!({}), "example.com", "Widget").unwrap_err();
        assert_eq!(e, PatchError::Unsupported);
        assert_eq!(e.status_code(), 415);
    }

    #[test]
    fn inputs_are_not_modified_and_empty_patch_is_identity() {
        let original = json!({"metadata": {"name": "a", "finalizers": ["x"]}, "spec": {"containers": [{"name": "c"}]}});
        let before = original.clone();
        assert_eq!(pod(original.clone(), json!({})), before);
        let patch = json!({"spec": {"containers": [{"name": "d"}]}});
        let _ = strategic_merge_patch(&original, &patch, "", "Pod").unwrap();
        assert_eq!(original, before);
        assert_eq!(pod(Value::Null, json!({"a": 1})), json!({"a": 1}));
    }

    /// The patch `kubectl apply` (client-side, 1.32) sends when the applied
    /// Deployment manifest changes `replicas` 2 → 3, the image
    /// `nginx:1.25` → `nginx:1.27`, and drops the label `tier`: the
    /// three-way diff of last-applied, new manifest and live object, with
    /// the new last-applied annotation, `null` for the removed label, and
    /// `$setElementOrder` for the changed container list.
    #[test]
    fn kubectl_client_side_apply_deployment() {
        let old_applied = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"labels":{"app":"web","tier":"frontend"},"name":"web","namespace":"default"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx:1.25","name":"web","ports":[{"containerPort":80}]}]}}}}
"#;
        let new_applied = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"labels":{"app":"web"},"name":"web","namespace":"default"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx:1.27","name":"web","ports":[{"containerPort":80}]}]}}}}
"#;
        let live = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "annotations": {
                    "deployment.kubernetes.io/revision": "1",
                    "kubectl.kubernetes.io/last-applied-configuration": old_applied
                },
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "generation": 1,
                "labels": {"app": "web", "tier": "frontend"},
                "name": "web",
                "namespace": "default",
                "resourceVersion": "1234",
                "uid": "8a1f6c2e-0000-4000-8000-000000000001"
            },
            "spec": {
                "progressDeadlineSeconds": 600,
                "replicas": 2,
                "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}, "type": "RollingUpdate"},
                "template": {
                    "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "image": "nginx:1.25",
                            "imagePullPolicy": "IfNotPresent",
                            "name": "web",
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File"
                        }],
                        "dnsPolicy": "ClusterFirst",
                        "restartPolicy": "Always",
                        "schedulerName": "default-scheduler",
                        "securityContext": {},
                        "terminationGracePeriodSeconds": 30
                    }
                }
            },
            "status": {
                "availableReplicas": 2,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
                ],
                "observedGeneration": 1,
                "readyReplicas": 2,
                "replicas": 2,
                "updatedReplicas": 2
            }
        });
        let patch: Value = serde_json::from_str(&format!(
            r#"{{"metadata":{{"annotations":{{"kubectl.kubernetes.io/last-applied-configuration":{}}},"labels":{{"tier":null}}}},"spec":{{"replicas":3,"template":{{"spec":{{"$setElementOrder/containers":[{{"name":"web"}}],"containers":[{{"image":"nginx:1.27","name":"web"}}]}}}}}}}}"#,
            serde_json::to_string(new_applied).unwrap()
        ))
        .unwrap();

        let out = smp(live.clone(), patch, "apps", "Deployment");

        let mut want = live;
        want["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
            json!(new_applied);
        want["metadata"]["labels"] = json!({"app": "web"});
        want["spec"]["replicas"] = json!(3);
        want["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
        assert_eq!(out, want);
        assert_no_directives(&out);
    }
}

//! Built-in kinds: the table of group/version/kind → k8s-openapi type, the schema
//! definitions generated once from k8s-openapi's `schemars` implementations, and the
//! compiled validators for them.
//!
//! Definitions are kept in one canonical form: Swagger 2.0 style references
//! (`#/definitions/<name>`), k8s-openapi's names (`io.k8s.api.apps.v1.Deployment`),
//! `x-kubernetes-group-version-kind` on every kind and list kind. The document
//! builders in [`crate::openapi`] rewrite them for v2 and v3.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::{
    admissionregistration, apps, autoscaling, batch, certificates, coordination, core, discovery,
    events, networking, policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
use schemars::{Schema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Value, json};

use crate::validator::{Graph, Validator};

/// Produces a `$ref` to the type's definition and adds the definitions it needs.
type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// One built-in kind.
struct BuiltinKind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    schema: SchemaFn,
}

macro_rules! kinds {
    ($( $group:literal, $version:literal, $kind:literal => $ty:ty; )*) => {
        &[$( BuiltinKind {
            group: $group,
            version: $version,
            kind: $kind,
            schema: SchemaGenerator::subschema_for::<$ty>,
        }, )*]
    };
}

/// The built-in kinds this server knows the schema of.
static BUILTIN_KINDS: &[BuiltinKind] = kinds! {
    "", "v1", "Namespace" => core::v1::Namespace;
    "", "v1", "Pod" => core::v1::Pod;
    "", "v1", "Service" => core::v1::Service;
    "", "v1", "Endpoints" => core::v1::Endpoints;
    "", "v1", "ConfigMap" => core::v1::ConfigMap;
    "", "v1", "Secret" => core::v1::Secret;
    "", "v1", "ServiceAccount" => core::v1::ServiceAccount;
    "", "v1", "Node" => core::v1::Node;
    "", "v1", "Event" => core::v1::Event;
    "", "v1", "PersistentVolume" => core::v1::PersistentVolume;
    "", "v1", "PersistentVolumeClaim" => core::v1::PersistentVolumeClaim;
    "", "v1", "ResourceQuota" => core::v1::ResourceQuota;
    "", "v1", "LimitRange" => core::v1::LimitRange;
    "", "v1", "PodTemplate" => core::v1::PodTemplate;
    "", "v1", "ReplicationController" => core::v1::ReplicationController;
    "", "v1", "Binding" => core::v1::Binding;
    "", "v1", "ComponentStatus" => core::v1::ComponentStatus;
    "apiregistration.k8s.io", "v1", "APIService" => apiregistration::v1::APIService;
    "certificates.k8s.io", "v1", "CertificateSigningRequest" => certificates::v1::CertificateSigningRequest;
    "events.k8s.io", "v1", "Event" => events::v1::Event;
    "apps", "v1", "Deployment" => apps::v1::Deployment;
    "apps", "v1", "ReplicaSet" => apps::v1::ReplicaSet;
    "apps", "v1", "StatefulSet" => apps::v1::StatefulSet;
    "apps", "v1", "DaemonSet" => apps::v1::DaemonSet;
    "apps", "v1", "ControllerRevision" => apps::v1::ControllerRevision;
    "batch", "v1", "Job" => batch::v1::Job;
    "batch", "v1", "CronJob" => batch::v1::CronJob;
    "coordination.k8s.io", "v1", "Lease" => coordination::v1::Lease;
    "scheduling.k8s.io", "v1", "PriorityClass" => scheduling::v1::PriorityClass;
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition" => apiextensions::v1::CustomResourceDefinition;
    "networking.k8s.io", "v1", "Ingress" => networking::v1::Ingress;
    "networking.k8s.io", "v1", "IngressClass" => networking::v1::IngressClass;
    "networking.k8s.io", "v1", "NetworkPolicy" => networking::v1::NetworkPolicy;
    "storage.k8s.io", "v1", "StorageClass" => storage::v1::StorageClass;
    "policy", "v1", "PodDisruptionBudget" => policy::v1::PodDisruptionBudget;
    "autoscaling", "v2", "HorizontalPodAutoscaler" => autoscaling::v2::HorizontalPodAutoscaler;
    "autoscaling", "v1", "Scale" => autoscaling::v1::Scale;
    "rbac.authorization.k8s.io", "v1", "Role" => rbac::v1::Role;
    "rbac.authorization.k8s.io", "v1", "ClusterRole" => rbac::v1::ClusterRole;
    "rbac.authorization.k8s.io", "v1", "RoleBinding" => rbac::v1::RoleBinding;
    "rbac.authorization.k8s.io", "v1", "ClusterRoleBinding" => rbac::v1::ClusterRoleBinding;
    "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration" => admissionregistration::v1::MutatingWebhookConfiguration;
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration" => admissionregistration::v1::ValidatingWebhookConfiguration;
    "discovery.k8s.io", "v1", "EndpointSlice" => discovery::v1::EndpointSlice;
};

/// Definitions every document may need besides the kinds (operation bodies and results).
static SUPPORT_TYPES: &[SchemaFn] = &[
    SchemaGenerator::subschema_for::<meta::v1::ObjectMeta>,
    SchemaGenerator::subschema_for::<meta::v1::ListMeta>,
    SchemaGenerator::subschema_for::<meta::v1::DeleteOptions>,
    SchemaGenerator::subschema_for::<meta::v1::Status>,
    SchemaGenerator::subschema_for::<meta::v1::Patch>,
    SchemaGenerator::subschema_for::<meta::v1::APIResourceList>,
    SchemaGenerator::subschema_for::<meta::v1::WatchEvent<core::v1::Pod>>,
];

/// Definition name of `ObjectMeta`.
pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// Definition name of `ListMeta`.
pub(crate) const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
/// Definition name of `IntOrString`.
pub(crate) const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
/// Definition name of `Quantity`.
pub(crate) const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
/// Definition name of apiextensions' `JSON`.
const APIEXTENSIONS_JSON: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON";
/// Definition name of `DeleteOptions`.
pub(crate) const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
/// Definition name of `Status`.
pub(crate) const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
/// Definition name of `Patch`.
pub(crate) const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
/// Definition name of `APIResourceList`.
pub(crate) const API_RESOURCE_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList";
/// Definition name of `WatchEvent`.
pub(crate) const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";

/// Description kube gives `apiVersion` on every kind.
pub(crate) const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
/// Description kube gives `kind` on every kind.
pub(crate) const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// A built-in kind's place in the definitions.
pub(crate) struct KindEntry {
    /// API group.
    pub(crate) group: &'static str,
    /// API version.
    pub(crate) version: &'static str,
    /// Kind.
    pub(crate) kind: &'static str,
    /// Definition name of the kind.
    pub(crate) def: String,
    /// Definition name of the list kind.
    pub(crate) list_def: String,
}

/// Everything computed once about the built-in kinds.
pub(crate) struct Builtins {
    /// All definitions, canonical form (see the module docs).
    pub(crate) defs: BTreeMap<String, Value>,
    /// The kinds, in table order.
    pub(crate) kinds: Vec<KindEntry>,
    /// One validator per kind, keyed by (group, version, kind).
    validators: HashMap<(&'static str, &'static str, &'static str), Arc<Validator>>,
    /// The validator for `ObjectMeta` (custom resources' `metadata`).
    pub(crate) object_meta: Option<Arc<Validator>>,
}

impl Builtins {
    /// The kind entry for a group/version/kind.
    pub(crate) fn kind(&self, group: &str, version: &str, kind: &str) -> Option<&KindEntry> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.kind == kind)
    }
}

/// The built-in definitions and validators, computed on first use.
pub(crate) fn builtins() -> &'static Builtins {
    static BUILTINS: OnceLock<Builtins> = OnceLock::new();
    BUILTINS.get_or_init(compute)
}

/// Builtin schema for a group/version/kind, or `None` if this server has no schema
/// for it. Compiled once, shared afterwards.
pub fn builtin_schema(group: &str, version: &str, kind: &str) -> Option<Arc<Validator>> {
    builtins()
        .validators
        .iter()
        .find(|((g, v, k), _)| *g == group && *v == version && *k == kind)
        .map(|(_, v)| Arc::clone(v))
}

/// The (group, version, kind) of every built-in kind [`builtin_schema`] knows.
pub fn builtin_kinds() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    BUILTIN_KINDS.iter().map(|k| (k.group, k.version, k.kind))
}

/// The definition name a `$ref` points at.
pub(crate) fn ref_name(reference: &str) -> &str {
    reference
        .rsplit_once('/')
        .map_or(reference, |(_, name)| name)
}

/// The `x-kubernetes-group-version-kind` value for one GVK.
pub(crate) fn gvk_extension(group: &str, version: &str, kind: &str) -> Value {
    json!([{ "group": group, "kind": kind, "version": version }])
}

/// The schema kube publishes for `<Kind>List`.
pub(crate) fn list_schema(
    group: &str,
    version: &str,
    kind: &str,
    item_ref: &str,
    list_meta_ref: &str,
) -> Value {
    json!({
        "description": format!("{kind}List is a list of {kind}"),
        "type": "object",
        "properties": {
            "apiVersion": { "description": API_VERSION_DESCRIPTION, "type": "string" },
            "items": {
                "description": format!("Items is the list of {kind} objects."),
                "type": "array",
                "items": { "$ref": item_ref },
            },
            "kind": { "description": KIND_DESCRIPTION, "type": "string" },
            "metadata": {
                "$ref": list_meta_ref,
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            },
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": gvk_extension(group, version, &format!("{kind}List")),
    })
}

fn compute() -> Builtins {
    let settings = SchemaSettings::default().with(|s| {
        s.definitions_path = "/definitions".into();
        s.meta_schema = None;
        s.transforms = Vec::new();
        s.inline_subschemas = false;
    });
    let mut generator = SchemaGenerator::new(settings);

    let mut kinds = Vec::with_capacity(BUILTIN_KINDS.len());
    for k in BUILTIN_KINDS {
        let reference = (k.schema)(&mut generator);
        let def = reference
            .get("$ref")
            .and_then(Value::as_str)
            .map(|r| ref_name(r).to_owned())
            .unwrap_or_default();
        kinds.push(KindEntry {
            group: k.group,
            version: k.version,
            kind: k.kind,
            list_def: format!("{def}List"),
            def,
        });
    }
    for f in SUPPORT_TYPES {
        f(&mut generator);
    }

    let mut defs: BTreeMap<String, Value> = generator.take_definitions(false).into_iter().collect();
    // k8s-openapi types `JSON` (a CRD schema's default/enum/example) as an object;
    // it holds any JSON value, and kube-apiserver publishes it without a type.
    if let Some(Value::Object(json)) = defs.get_mut(APIEXTENSIONS_JSON) {
        json.remove("type");
    }

    for k in &kinds {
        if let Some(Value::Object(def)) = defs.get_mut(&k.def) {
            def.insert(
                "x-kubernetes-group-version-kind".into(),
                gvk_extension(k.group, k.version, k.kind),
            );
        }
        let list = list_schema(
            k.group,
            k.version,
            k.kind,
            &format!("#/definitions/{}", k.def),
            &format!("#/definitions/{LIST_META}"),
        );
        defs.insert(k.list_def.clone(), list);
    }
    for def in defs.values_mut() {
        strip_empty(def);
    }

    let (validators, object_meta) = match Graph::compile_definitions(&defs) {
        Ok((graph, ids)) => {
            let graph = Arc::new(graph);
            let mut validators = HashMap::new();
            for k in &kinds {
                if let Some(&id) = ids.get(&k.def) {
                    validators.insert(
                        (k.group, k.version, k.kind),
                        Arc::new(Validator::builtin(Arc::clone(&graph), id)),
                    );
                }
            }
            let object_meta = ids
                .get(OBJECT_META)
                .map(|&id| Arc::new(Validator::builtin(Arc::clone(&graph), id)));
            (validators, object_meta)
        }
        // The k8s-openapi definitions always compile; an empty table keeps the
        // server running (every built-in kind is then schemaless) if they ever don't.
        Err(_) => (HashMap::new(), None),
    };

    Builtins {
        defs,
        kinds,
        validators,
        object_meta,
    }
}

/// Removes keys that carry nothing (`"required": []`), which some generators emit.
fn strip_empty(v: &mut Value) {
    if let Value::Object(map) = v {
        if matches!(map.get("required"), Some(Value::Array(a)) if a.is_empty()) {
            map.remove("required");
        }
        for child in map.values_mut() {
            strip_empty(child);
        }
    } else if let Value::Array(items) = v {
        for child in items {
            strip_empty(child);
        }
    }
}

/// The closure of definitions reachable from `roots` through `$ref`s, in name order.
pub(crate) fn closure<'a: 'b, 'b>(
    defs: &'a BTreeMap<String, Value>,
    roots: impl IntoIterator<Item = &'b str>,
) -> BTreeMap<&'a str, &'a Value> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<&'b str> = roots.into_iter().collect();
    while let Some(name) = stack.pop() {
        if out.contains_key(name) {
            continue;
        }
        let Some((key, def)) = defs.get_key_value(name) else {
            continue;
        };
        out.insert(key.as_str(), def);
        collect_refs(def, &mut stack);
    }
    out
}

/// Pushes the definition names of every `$ref` in `v`.
pub(crate) fn collect_refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "$ref" {
                    if let Some(r) = child.as_str() {
                        out.push(ref_name(r));
                    }
                } else {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(items) => {
            for child in items {
                collect_refs(child, out);
            }
        }
        _ => {}
    }
}

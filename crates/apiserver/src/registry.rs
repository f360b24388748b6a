//! The resource registry: one row of data per served resource.
//!
//! Built-in rows come from `builtin.rs`; each served version of a
//! CustomResourceDefinition adds a row at runtime and removes it when the CRD
//! goes. Discovery, OpenAPI, routing, Table printing and field selectors all
//! read from here, so adding a kind is adding a row.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use kubeforge_apimachinery::names::NameRule;
use kubeforge_schema::{ResourceInfo, SchemaSource, Validator};
use serde_json::Value;

use crate::table::Column;

/// The standard verbs of a read-write resource, in discovery order.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Where a `/scale` subresource reads and writes the replica counts.
#[derive(Clone, Debug)]
pub struct ScalePaths {
    /// Dotted path of the desired replicas, e.g. `spec.replicas`.
    pub spec_replicas: String,
    /// Dotted path of the observed replicas, e.g. `status.replicas`.
    pub status_replicas: String,
    /// Dotted path of the label selector string or object, if any.
    pub label_selector: Option<String>,
    /// The selector there is a plain `{key: value}` map (a
    /// ReplicationController's `spec.selector`), not a `LabelSelector`.
    pub selector_is_set: bool,
}

/// Kind-specific rules applied on create and update (kube-apiserver's
/// "strategies"), kept small and named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// No special rules.
    Plain,
    /// Namespaces: phase, finalizers, the metadata.name label, cascading delete.
    Namespace,
    /// Pods: defaults, phase Pending, QoS class, binding.
    Pod,
    /// CustomResourceDefinitions: names, conditions, serving.
    Crd,
    /// Services: ClusterIP allocation and defaults.
    Service,
    /// Nodes: status may be set on create.
    Node,
    /// Workloads that embed a pod template (defaults for the template).
    Workload,
    /// Secrets: `stringData`, the default type, per-type validation.
    Secret,
    /// ConfigMaps: key and size validation.
    ConfigMap,
}

/// What a custom resource row knows beyond a built-in one.
#[derive(Clone)]
pub struct CustomInfo {
    /// The CRD's `metadata.name`.
    pub crd_name: String,
    /// Compiled schema of this version.
    pub validator: Option<Arc<Validator>>,
    /// The version objects are stored in.
    pub storage_version: String,
    /// The CRD's `metadata.uid`.
    pub crd_uid: String,
}

/// One served resource.
#[derive(Clone)]
pub struct ResourceDef {
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name (the URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Short names (`po`, `deploy`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Verbs served on the main resource.
    pub verbs: Vec<String>,
    /// Has a `/status` subresource.
    pub status: bool,
    /// Has a `/scale` subresource.
    pub scale: Option<ScalePaths>,
    /// Has `pods/binding`.
    pub binding: bool,
    /// Has `pods/ephemeralcontainers`.
    pub ephemeral_containers: bool,
    /// Has `pods/eviction` (deletion that honours PodDisruptionBudgets).
    pub eviction: bool,
    /// Table columns (besides NAME and AGE, which every table has).
    pub columns: Vec<Column>,
    /// Field selectors supported besides metadata.name and metadata.namespace.
    pub field_selectors: Vec<String>,
    /// Field labels kube renders from a Go bool or integer (its
    /// `ToSelectableFields` functions): an object without the field has
    /// this value there (`false`, `0`) rather than the empty string.
    pub field_absent: &'static [(&'static str, &'static str)],
    /// Whether `metadata.namespace` may be selected on: every kind but
    /// Node and Namespace, whose field label conversions leave it out.
    pub namespace_field: bool,
    /// Name validation rule.
    pub name_rule: NameRule,
    /// Whether metadata.generation is tracked.
    pub generation: bool,
    /// Kind-specific rules.
    pub strategy: Strategy,
    /// Schema validator (built-in from k8s-openapi, or the CRD's).
    pub validator: Option<Arc<Validator>>,
    /// Set for custom resources.
    pub custom: Option<CustomInfo>,
    /// Set when objects are stored in another resource's form and storage.
    pub conversion: Option<&'static crate::convert::Conversion>,
}

impl ResourceDef {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The group/resource for error messages.
    pub fn gr(&self) -> crate::error::GroupResource<'_> {
        crate::error::GroupResource {
            group: &self.group,
            resource: &self.plural,
        }
    }

    /// `Ok` when `causes` is empty, else 422 Invalid for the object `name`
    /// of this kind, with those causes.
    pub(crate) fn check_causes(
        &self,
        name: &str,
        causes: Vec<crate::error::Cause>,
    ) -> Result<(), crate::error::ApiError> {
        if causes.is_empty() {
            return Ok(());
        }
        Err(crate::error::ApiError::invalid(
            &self.group,
            &self.kind,
            name,
            causes,
        ))
    }

    /// Storage key prefix for the whole resource (all namespaces).
    pub fn key_prefix(&self) -> String {
        let (group, plural) = match self.conversion {
            Some(c) => (c.storage_group, c.storage_plural),
            None => (self.group.as_str(), self.plural.as_str()),
        };
        let group = if group.is_empty() { "core" } else { group };
        format!("/registry/{group}/{plural}/")
    }

    /// Storage key prefix for one namespace (or the whole resource when
    /// cluster-scoped or `ns` is None).
    pub fn collection_prefix(&self, ns: Option<&str>) -> String {
        match (self.namespaced, ns) {
            (true, Some(ns)) => format!("{}{ns}/", self.key_prefix()),
            _ => self.key_prefix(),
        }
    }

    /// Storage key of one object.
    pub fn key(&self, ns: Option<&str>, name: &str) -> String {
        match (self.namespaced, ns) {
            (true, Some(ns)) => format!("{}{ns}/{name}", self.key_prefix()),
            _ => format!("{}{name}", self.key_prefix()),
        }
    }

    /// Whether a verb is served.
    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// Whether `field` may be used in a field selector.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || (field == "metadata.namespace" && self.namespace_field)
            || self.field_selectors.iter().any(|f| f == field)
    }

    /// The value of field label `field` of `obj` for a field selector, as
    /// kube's field sets give it: the field's JSON scalar as a string, ""
    /// for a missing field or `null`, except where the kind renders a
    /// missing bool or integer as `false` / `0` ([`Self::field_absent`]).
    pub fn field_value(&self, obj: &Value, field: &str) -> Option<String> {
        use kubeforge_apimachinery::fields::json_field;
        if field == "source" && self.group.is_empty() && self.kind == "Event" {
            // kube's event field set: `source.component`, else the
            // reporting controller (`reportingComponent` in core/v1).
            return json_field(obj, "source.component")
                .filter(|s| !s.is_empty())
                .or_else(|| json_field(obj, "reportingComponent"));
        }
        let v = json_field(obj, field);
        match v.as_deref() {
            Some("") => match self.field_absent.iter().find(|(f, _)| *f == field) {
                Some((_, absent)) => Some((*absent).to_string()),
                None => v,
            },
            _ => v,
        }
    }

    /// Description for the OpenAPI builders.
    pub fn resource_info(&self) -> ResourceInfo {
        let mut subresources = Vec::new();
        if self.status {
            subresources.push("status".to_string());
        }
        if self.scale.is_some() {
            subresources.push("scale".to_string());
        }
        ResourceInfo {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
            namespaced: self.namespaced,
            verbs: self.verbs.clone(),
            subresources,
            schema: match &self.custom {
                Some(_) => SchemaSource::Custom(Arc::new(
                    serde_json::json!({"type":"object","x-kubernetes-preserve-unknown-fields":true}),
                )),
                None => SchemaSource::Builtin,
            },
        }
    }
}

/// The key of a row: (group, version, plural).
pub type Gvr = (String, String, String);

#[derive(Default)]
struct Rows {
    by_gvr: BTreeMap<Gvr, Arc<ResourceDef>>,
    /// CRD schemas per row, for the OpenAPI documents.
    schemas: BTreeMap<Gvr, Arc<Value>>,
}

/// All served resources; cheap to clone.
#[derive(Clone)]
pub struct Registry {
    rows: Arc<RwLock<Rows>>,
    generation: Arc<std::sync::atomic::AtomicU64>,
    /// Tells subscribers (the APIService reconciler) that rows changed.
    changed: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            rows: Arc::default(),
            generation: Arc::default(),
            changed: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }
}

impl Registry {
    /// A registry holding the built-in rows.
    pub fn with_builtins() -> Registry {
        let reg = Registry::default();
        for def in crate::builtin::rows() {
            reg.insert(def, None);
        }
        reg
    }

    /// Add or replace a row (and the CRD schema it was built from).
    pub fn insert(&self, def: ResourceDef, schema: Option<Arc<Value>>) {
        let key = (def.group.clone(), def.version.clone(), def.plural.clone());
        let mut rows = self.rows.write().unwrap_or_else(|e| e.into_inner());
        match schema {
            Some(s) => {
                rows.schemas.insert(key.clone(), s);
            }
            None => {
                rows.schemas.remove(&key);
            }
        }
        rows.by_gvr.insert(key, Arc::new(def));
        self.bump();
    }

    /// Remove every row of a CRD.
    pub fn remove_crd(&self, crd_name: &str) {
        let mut rows = self.rows.write().unwrap_or_else(|e| e.into_inner());
        let keys: Vec<Gvr> = rows
            .by_gvr
            .iter()
            .filter(|(_, d)| d.custom.as_ref().is_some_and(|c| c.crd_name == crd_name))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            rows.by_gvr.remove(&k);
            rows.schemas.remove(&k);
        }
        self.bump();
    }

    fn bump(&self) {
        let g = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.changed.send_replace(g);
    }

    /// A receiver that sees every change of the rows (its value is the
    /// generation); `changed()` ends with an error once the registry is gone.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Changes whenever rows change (for caching generated documents).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Look a resource up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let rows = self.rows.read().unwrap_or_else(|e| e.into_inner());
        rows.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Look a resource up by group and kind (any version; the first served).
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        let rows = self.rows.read().unwrap_or_else(|e| e.into_inner());
        rows.by_gvr
            .values()
            .find(|d| d.group == group && d.version == version && d.kind == kind)
            .cloned()
    }

    /// Every row, ordered by group, version, plural.
    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        let rows = self.rows.read().unwrap_or_else(|e| e.into_inner());
        rows.by_gvr.values().cloned().collect()
    }

    /// The rows of one group/version.
    pub fn group_version(&self, group: &str, version: &str) -> Vec<Arc<ResourceDef>> {
        self.all()
            .into_iter()
            .filter(|d| d.group == group && d.version == version)
            .collect()
    }

    /// Resource descriptions with CRD schemas attached, for OpenAPI.
    pub fn resource_infos(&self) -> Vec<ResourceInfo> {
        let rows = self.rows.read().unwrap_or_else(|e| e.into_inner());
        rows.by_gvr
            .iter()
            .map(|(k, d)| {
                let mut info = d.resource_info();
                if let Some(s) = rows.schemas.get(k) {
                    info.schema = SchemaSource::Custom(s.clone());
                }
                info
            })
            .collect()
    }

    /// Groups with their versions, in discovery order: the built-in groups
    /// first in kube-apiserver's order, then custom groups by name.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for d in self.all() {
            if d.group.is_empty() {
                continue;
            }
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) => {
                    if !vs.contains(&d.version) {
                        vs.push(d.version.clone());
                    }
                }
                None => out.push((d.group.clone(), vec![d.version.clone()])),
            }
        }
        out.sort_by_key(|(g, _)| (crate::builtin::group_rank(g), g.clone()));
        for (_, vs) in &mut out {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        out
    }
}

/// Kubernetes version priority: GA > beta > alpha, then by number
/// (v2 > v1 > v1beta2 > v1beta1 > v1alpha1), other strings last.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match num.parse::<u32>() {
        Ok(n) => (level, major, n),
        Err(_) => (0, 0, 0),
    }
}

//! Server-side apply: field sets, list semantics, the apply merge and
//! `managedFields` (FieldsV1) for Apply and Update operations.
//!
//! The semantics follow sigs.k8s.io/structured-merge-diff (SMD) and
//! k8s.io/apimachinery/pkg/util/managedfields as kube-apiserver uses them:
//!
//! - A [`FieldSet`] is a trie of path elements (`f:<field>`,
//!   `k:{"key":value}` for list-map items with the key fields sorted,
//!   `v:<json>` for set items, `i:<n>` for list indexes) whose nodes may be
//!   *members* (owned as a whole). FieldsV1 renders a member with children
//!   as a `.` entry.
//! - List types come from the strategic-merge tables for built-in kinds (a
//!   list with a merge key is a list-map on the SMD/OpenAPI map keys, a
//!   primitive merge list is a set, everything else is atomic) and from the
//!   CRD schema (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//!   `x-kubernetes-map-type`) for custom resources. Unknown lists are atomic,
//!   unknown maps granular.
//! - Apply merges the configuration into the live object (maps by key,
//!   list-maps by key, sets by value, atomic values replaced, in SMD's
//!   order), removes what the manager applied last time and no longer
//!   applies unless another manager owns it, and fails with conflicts where
//!   the merge changes a field another manager owns (unless forced).
//! - Update operations (create, PUT, non-apply patches) give their manager
//!   the fields they added or changed and take those (and removed ones) from
//!   the other managers. One entry per manager, operation, apiVersion (for
//!   Update) and subresource; empty entries are dropped; at most ten Update
//!   entries (older ones fold into `ancient-changes`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use kubeforge_apimachinery::strategic::{
    self as smp, FieldDesc, Strategy as SmpStrategy, TypeDesc,
};
use serde_json::{Map, Value, json};

use crate::codec::{self, BodyType};
use crate::error::{ApiError, ApiResult, Cause};
use crate::rest::{Ctx, Sub};

/// kubectl's client-side apply annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// At most this many Update entries are kept (kube's DefaultMaxUpdateManagers).
const MAX_UPDATE_MANAGERS: usize = 10;

// ---------------------------------------------------------------------------
// List semantics.

/// How a list merges (`x-kubernetes-list-type`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced as a whole.
    Atomic,
    /// A set of scalars, merged by value.
    Set,
    /// A list of objects merged by these key fields.
    Map(Vec<String>),
}

/// Where the list types of a custom resource come from.
///
/// `path` is the property names from the object root; `[]` stands for the
/// items of a list (`["spec", "ports", "[]", "targets"]`).
pub trait ListTypes: Send + Sync {
    /// The kind of the list at `path`; `None` when unknown (atomic).
    fn list_kind(&self, path: &[String]) -> Option<ListKind>;
    /// Whether the map at `path` is `x-kubernetes-map-type: atomic`.
    fn map_atomic(&self, _path: &[String]) -> bool {
        false
    }
    /// The default of key field `key` of the items of the list-map at `path`.
    fn key_default(&self, _path: &[String], _key: &str) -> Option<Value> {
        None
    }
}

impl<F> ListTypes for F
where
    F: Fn(&[String]) -> Option<ListKind> + Send + Sync,
{
    fn list_kind(&self, path: &[String]) -> Option<ListKind> {
        self(path)
    }
}

/// The item marker in [`ListTypes`] paths.
pub const ITEMS: &str = "[]";

/// List types read from a CRD version's `openAPIV3Schema`.
pub struct CrdSchema(Arc<Value>);

impl CrdSchema {
    /// Wrap a schema.
    pub fn new(schema: Arc<Value>) -> CrdSchema {
        CrdSchema(schema)
    }

    fn node(&self, path: &[String]) -> Option<&Value> {
        let mut n: &Value = &self.0;
        for seg in path {
            n = if seg == ITEMS {
                n.get("items")?
            } else {
                match n.get("properties").and_then(|p| p.get(seg)) {
                    Some(c) => c,
                    None => match n.get("additionalProperties") {
                        Some(a) if a.is_object() => a,
                        _ => return None,
                    },
                }
            };
        }
        Some(n)
    }
}

impl ListTypes for CrdSchema {
    fn list_kind(&self, path: &[String]) -> Option<ListKind> {
        let n = self.node(path)?;
        Some(
            match n.get("x-kubernetes-list-type").and_then(Value::as_str)? {
                "map" => ListKind::Map(
                    n.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                "set" => ListKind::Set,
                _ => ListKind::Atomic,
            },
        )
    }

    fn map_atomic(&self, path: &[String]) -> bool {
        self.node(path)
            .and_then(|n| n.get("x-kubernetes-map-type"))
            .and_then(Value::as_str)
            == Some("atomic")
    }

    fn key_default(&self, path: &[String], key: &str) -> Option<Value> {
        self.node(path)?
            .get("items")?
            .get("properties")?
            .get(key)?
            .get("default")
            .cloned()
    }
}

/// Key fields of a list-map.
#[derive(Clone, Debug)]
enum Keys {
    One(&'static str),
    Static(&'static [&'static str]),
    Owned(Vec<String>),
}

impl Keys {
    fn each(&self) -> Vec<&str> {
        match self {
            Keys::One(k) => vec![*k],
            Keys::Static(ks) => ks.to_vec(),
            Keys::Owned(ks) => ks.iter().map(String::as_str).collect(),
        }
    }
}

/// A list's kind as the walkers use it.
#[derive(Clone, Debug)]
enum Lk {
    Atomic,
    Set,
    Map(Keys),
}

/// The type of a value: a cursor into the built-in tables or a CRD schema.
#[derive(Clone)]
enum Ty<'a> {
    /// No knowledge: maps granular, lists atomic.
    Deduced,
    /// A built-in struct described by the strategic tables.
    Struct(&'static TypeDesc),
    /// A built-in field with list semantics (in its parent struct).
    Described(&'static TypeDesc, &'static FieldDesc),
    /// A map replaced as a whole (`x-kubernetes-map-type: atomic`).
    AtomicMap,
    /// A custom resource's schema, at this path.
    Custom(&'a dyn ListTypes, Vec<String>),
}

fn struct_field(td: &'static TypeDesc, name: &str) -> Ty<'static> {
    // LabelSelector is `x-kubernetes-map-type: atomic` (workloads' spec.selector).
    if std::ptr::eq(td, &smp::WORKLOAD_SPEC) && name == "selector" {
        return Ty::AtomicMap;
    }
    match td.field(name) {
        Some(fd) if fd.strategy == SmpStrategy::Replace => Ty::AtomicMap,
        Some(fd) if fd.merge_key.is_some() || fd.strategy == SmpStrategy::Merge => {
            Ty::Described(td, fd)
        }
        Some(fd) => fd.ty.map_or(Ty::Deduced, Ty::Struct),
        None => Ty::Deduced,
    }
}

/// SMD list-map keys where they differ from the patch merge key.
fn builtin_keys(parent: &TypeDesc, fd: &FieldDesc, key: &'static str) -> Keys {
    match (parent.name, fd.name) {
        ("Container", "ports") => Keys::Static(&["containerPort", "protocol"]),
        ("ServiceSpec", "ports") => Keys::Static(&["port", "protocol"]),
        ("PodSpec", "topologySpreadConstraints") => {
            Keys::Static(&["topologyKey", "whenUnsatisfiable"])
        }
        _ => Keys::One(key),
    }
}

impl<'a> Ty<'a> {
    fn child(&self, name: &str) -> Ty<'a> {
        match self {
            Ty::Deduced | Ty::AtomicMap => Ty::Deduced,
            Ty::Struct(td) => struct_field(td, name),
            Ty::Described(_, fd) => fd.ty.map_or(Ty::Deduced, |td| struct_field(td, name)),
            Ty::Custom(src, path) => {
                if path.is_empty() && name == "metadata" {
                    return Ty::Struct(&smp::OBJECT_META);
                }
                let mut p = path.clone();
                p.push(name.to_string());
                Ty::Custom(*src, p)
            }
        }
    }

    fn item(&self) -> Ty<'a> {
        match self {
            Ty::Described(_, fd) => fd.ty.map_or(Ty::Deduced, Ty::Struct),
            Ty::Custom(src, path) => {
                let mut p = path.clone();
                p.push(ITEMS.to_string());
                Ty::Custom(*src, p)
            }
            _ => Ty::Deduced,
        }
    }

    fn list_kind(&self) -> Lk {
        match self {
            Ty::Described(parent, fd) => match fd.merge_key {
                Some(k) => Lk::Map(builtin_keys(parent, fd, k)),
                None if fd.strategy == SmpStrategy::Merge => Lk::Set,
                None => Lk::Atomic,
            },
            Ty::Custom(src, path) => match src.list_kind(path) {
                Some(ListKind::Map(keys)) if !keys.is_empty() => Lk::Map(Keys::Owned(keys)),
                Some(ListKind::Set) => Lk::Set,
                _ => Lk::Atomic,
            },
            _ => Lk::Atomic,
        }
    }

    fn map_atomic(&self) -> bool {
        match self {
            Ty::AtomicMap => true,
            Ty::Custom(src, path) => src.map_atomic(path),
            _ => false,
        }
    }

    /// The default of a key field of this list-map's items.
    fn key_default(&self, key: &str) -> Option<Value> {
        match self {
            Ty::Described(parent, fd)
                if fd.name == "ports"
                    && key == "protocol"
                    && matches!(parent.name, "Container" | "ServiceSpec") =>
            {
                Some(json!("TCP"))
            }
            Ty::Custom(src, path) => src.key_default(path, key),
            _ => None,
        }
    }
}

/// The type information of one resource.
pub(crate) struct Schema {
    custom: Option<Arc<dyn ListTypes>>,
    root: Option<&'static TypeDesc>,
}

impl Schema {
    /// The schema of the request's resource.
    pub(crate) fn for_ctx(ctx: &Ctx<'_>) -> Schema {
        match &ctx.def.custom {
            Some(c) => Schema {
                custom: Some(crd_list_types(ctx, &c.crd_name, &c.crd_uid)),
                root: None,
            },
            None => Schema {
                custom: None,
                root: smp::root_type(&ctx.def.group, &ctx.def.kind),
            },
        }
    }

    /// A schema from custom list types.
    #[cfg(test)]
    fn custom(src: Arc<dyn ListTypes>) -> Schema {
        Schema {
            custom: Some(src),
            root: None,
        }
    }

    /// The schema of a built-in kind.
    #[cfg(test)]
    fn builtin(group: &str, kind: &str) -> Schema {
        Schema {
            custom: None,
            root: smp::root_type(group, kind),
        }
    }

    fn root(&self) -> Ty<'_> {
        match (&self.custom, self.root) {
            (Some(src), _) => Ty::Custom(src.as_ref(), Vec::new()),
            (None, Some(td)) => Ty::Struct(td),
            (None, None) => Ty::Deduced,
        }
    }
}

type CrdCache = Mutex<HashMap<(String, String), (u64, Arc<dyn ListTypes>)>>;

/// The list types of a custom resource version, from its stored CRD
/// (cached per CRD uid, version and CRD revision).
fn crd_list_types(ctx: &Ctx<'_>, crd_name: &str, crd_uid: &str) -> Arc<dyn ListTypes> {
    static CACHE: OnceLock<CrdCache> = OnceLock::new();
    let key = format!("/registry/apiextensions.k8s.io/customresourcedefinitions/{crd_name}");
    let Some(kv) = ctx.server.store().get(&key) else {
        return Arc::new(|_: &[String]| None);
    };
    let cache_key = (crd_uid.to_string(), ctx.def.version.clone());
    let cache = CACHE.get_or_init(Default::default);
    if let Ok(c) = cache.lock()
        && let Some((rev, src)) = c.get(&cache_key)
        && *rev == kv.mod_revision
    {
        return src.clone();
    }
    let schema = serde_json::from_slice::<Value>(&kv.value)
        .ok()
        .and_then(|crd| {
            crd.pointer("/spec/versions")?
                .as_array()?
                .iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(ctx.def.version.as_str()))?
                .pointer("/schema/openAPIV3Schema")
                .cloned()
        });
    let src: Arc<dyn ListTypes> = match schema {
        Some(s) => Arc::new(CrdSchema::new(Arc::new(s))),
        None => Arc::new(|_: &[String]| None),
    };
    if let Ok(mut c) = cache.lock() {
        if c.len() > 256 {
            c.clear();
        }
        c.insert(cache_key, (kv.mod_revision, src.clone()));
    }
    src
}

// ---------------------------------------------------------------------------
// Path elements.

fn field_pe(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push_str("f:");
    s.push_str(name);
    s
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Why a list item has no path element.
#[derive(Debug)]
struct PeError(String);

/// The path element of a list item (`k:{...}` or `v:...`).
fn item_pe(item: &Value, lk: &Lk, list_ty: &Ty<'_>) -> Result<String, PeError> {
    match lk {
        Lk::Map(keys) => {
            let Some(m) = item.as_object() else {
                return Err(PeError(if item.is_null() {
                    "associative list with keys may not have a null element".into()
                } else {
                    "associative list with keys may not have non-map elements".into()
                }));
            };
            let names = keys.each();
            let mut fields: Vec<(&str, String)> = Vec::with_capacity(names.len());
            for k in &names {
                if let Some(v) = m.get(*k) {
                    fields.push((k, v.to_string()));
                } else if let Some(d) = list_ty.key_default(k) {
                    fields.push((k, d.to_string()));
                }
            }
            if fields.is_empty() {
                return Err(PeError(format!(
                    "associative list with keys has an element that omits all key fields {:?} (and doesn't have default values for any key fields)",
                    names
                )));
            }
            fields.sort_by(|a, b| a.0.cmp(b.0));
            let mut s = String::from("k:{");
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&json_str(k));
                s.push(':');
                s.push_str(v);
            }
            s.push('}');
            Ok(s)
        }
        Lk::Set => match item {
            Value::Object(_) => Err(PeError(
                "associative list without keys has an element that's a map type".into(),
            )),
            Value::Array(_) => Err(PeError(
                "not supported: associative list with lists as elements".into(),
            )),
            Value::Null => Err(PeError(
                "associative list without keys has an element that's an explicit null".into(),
            )),
            v => Ok(format!("v:{v}")),
        },
        Lk::Atomic => Err(PeError("invalid indexing of non-associative list".into())),
    }
}

/// Canonical form of a serialized path element (keys sorted, compact JSON).
fn canonical_pe(s: &str) -> Result<String, String> {
    let (kind, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("missing colon: {s}"))?;
    match kind {
        "f" => Ok(s.to_string()),
        "i" => rest
            .parse::<usize>()
            .map(|i| format!("i:{i}"))
            .map_err(|e| e.to_string()),
        "v" => {
            let v: Value = serde_json::from_str(rest).map_err(|e| e.to_string())?;
            Ok(format!("v:{v}"))
        }
        "k" => {
            let v: Value = serde_json::from_str(rest).map_err(|e| e.to_string())?;
            if !v.is_object() {
                return Err(format!("key is not an object: {s}"));
            }
            // serde_json maps are sorted by key.
            Ok(format!("k:{v}"))
        }
        _ => Err(format!("unknown path element type: {s}")),
    }
}

/// Go's `%v` of a value inside a path (strings quoted).
fn display_value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(s) => json_str(s),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(display_value).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", display_value(v)))
            .collect::<String>(),
        other => other.to_string(),
    }
}

/// The human form of one path element (`.name`, `[name="a"]`, `[="x"]`, `[0]`).
fn display_pe(pe: &str) -> String {
    match pe.split_once(':') {
        Some(("f", name)) => format!(".{name}"),
        Some(("i", i)) => format!("[{i}]"),
        Some(("v", v)) => match serde_json::from_str::<Value>(v) {
            Ok(v) => format!("[={}]", display_value(&v)),
            Err(_) => format!("[={v}]"),
        },
        Some(("k", k)) => match serde_json::from_str::<Value>(k) {
            Ok(Value::Object(m)) => format!(
                "[{}]",
                m.iter()
                    .map(|(k, v)| format!("{k}={}", display_value(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            _ => format!("[{k}]"),
        },
        _ => pe.to_string(),
    }
}

/// `.spec.template.spec.containers[name="a"].image`.
pub fn display_path(path: &[String]) -> String {
    path.iter().map(|pe| display_pe(pe)).collect()
}

// ---------------------------------------------------------------------------
// Field sets.

/// A set of field paths: a trie of serialized path elements whose nodes may
/// be members (owned as a whole).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    /// No members anywhere.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Whether a path is a member.
    pub fn has(&self, path: &[String]) -> bool {
        let mut cur = self;
        for pe in path {
            match cur.children.get(pe) {
                Some(c) => cur = c,
                None => return false,
            }
        }
        cur.member
    }

    /// Add all of `other`.
    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (pe, c) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.union_with(c),
                None => {
                    self.children.insert(pe.clone(), c.clone());
                }
            }
        }
    }

    /// Remove the members of `other` (not their descendants).
    pub fn difference_with(&mut self, other: &FieldSet) {
        if other.member {
            self.member = false;
        }
        if other.children.is_empty() || self.children.is_empty() {
            return;
        }
        self.children.retain(|pe, c| {
            if let Some(o) = other.children.get(pe) {
                c.difference_with(o);
            }
            !c.is_empty()
        });
    }

    /// The members in both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        let (small, large) = if self.children.len() <= other.children.len() {
            (&self.children, &other.children)
        } else {
            (&other.children, &self.children)
        };
        for (pe, c) in small {
            if let Some(o) = large.get(pe) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(pe.clone(), i);
                }
            }
        }
        out
    }

    /// All member paths, in order.
    pub fn paths(&self) -> Vec<Vec<String>> {
        fn walk(s: &FieldSet, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
            if s.member && !prefix.is_empty() {
                out.push(prefix.clone());
            }
            for (pe, c) in &s.children {
                prefix.push(pe.clone());
                walk(c, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    /// Parse FieldsV1 (as kube-apiserver writes it).
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Some(m) = v.as_object() else {
            return Err("FieldsV1 must be an object".into());
        };
        let mut out = FieldSet::default();
        for (k, child) in m {
            if k == "." {
                out.member = true;
                continue;
            }
            let pe = canonical_pe(k)?;
            let mut c = FieldSet::from_fields_v1(child)?;
            if child.as_object().is_some_and(Map::is_empty) {
                c.member = true;
            }
            if !c.is_empty() {
                match out.children.get_mut(&pe) {
                    Some(existing) => existing.union_with(&c),
                    None => {
                        out.children.insert(pe, c);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Render as FieldsV1, consuming the set.
    pub fn into_fields_v1(self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (pe, c) in self.children {
            m.insert(pe, c.into_fields_v1());
        }
        Value::Object(m)
    }

    /// Render as FieldsV1.
    #[cfg(test)]
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (pe, c) in &self.children {
            m.insert(pe.clone(), c.to_fields_v1());
        }
        Value::Object(m)
    }

    fn remove_member(&mut self, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            self.member = false;
            return;
        };
        if let Some(c) = self.children.get_mut(*first) {
            c.remove_member(rest);
            if c.is_empty() {
                self.children.remove(*first);
            }
        }
    }
}

/// Drop the fields kube-apiserver never tracks (its stripMetaManager):
/// apiVersion, kind, metadata itself and the server-owned metadata.
fn strip_meta(set: &mut FieldSet) {
    set.remove_member(&["f:apiVersion"]);
    set.remove_member(&["f:kind"]);
    set.remove_member(&["f:metadata"]);
    for f in [
        "f:name",
        "f:namespace",
        "f:creationTimestamp",
        "f:selfLink",
        "f:uid",
        "f:clusterName",
        "f:generation",
        "f:managedFields",
        "f:resourceVersion",
    ] {
        set.remove_member(&["f:metadata", f]);
    }
}

/// Which top-level fields an operation may own (kube's reset fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    All,
    /// The main resource of a kind with a `/status` subresource.
    NoStatus,
    /// `/status`.
    OnlyStatus,
}

impl Scope {
    fn of(ctx: &Ctx<'_>, sub: Sub) -> Scope {
        match sub {
            Sub::Status | Sub::Approval => Scope::OnlyStatus,
            Sub::Main if ctx.def.status => Scope::NoStatus,
            _ => Scope::All,
        }
    }

    fn keeps(self, top: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::NoStatus => top != "status",
            Scope::OnlyStatus => top == "status",
        }
    }

    fn filter(self, set: &mut FieldSet) {
        if self != Scope::All {
            set.children
                .retain(|pe, _| self.keeps(pe.strip_prefix("f:").unwrap_or(pe)));
        }
    }
}

fn subresource_name(sub: Sub) -> &'static str {
    match sub {
        Sub::Main => "",
        Sub::Status => "status",
        Sub::Finalize => "finalize",
        Sub::EphemeralContainers => "ephemeralcontainers",
        Sub::Approval => "approval",
    }
}

// ---------------------------------------------------------------------------
// The field set of an applied configuration.

/// A problem with an applied configuration.
#[derive(Debug)]
pub struct ConfigError {
    /// Where (`spec.containers[1]`).
    pub field: String,
    /// What.
    pub message: String,
    /// A duplicate list-map key or set value.
    pub duplicate: bool,
}

fn config_set(v: &Value, ty: &Ty<'_>, path: &mut String) -> Result<FieldSet, ConfigError> {
    let mut node = FieldSet::default();
    match v {
        Value::Object(m) => {
            if ty.map_atomic() {
                node.member = true;
                return Ok(node);
            }
            for (k, cv) in m {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                let mut c = config_set(cv, &ty.child(k), path)?;
                path.truncate(len);
                if cv.is_null() || cv.as_object().is_some_and(Map::is_empty) {
                    c.member = true;
                }
                if !c.is_empty() {
                    node.children.insert(field_pe(k), c);
                }
            }
        }
        Value::Array(a) => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                node.member = true;
                return Ok(node);
            }
            let ity = ty.item();
            for (i, item) in a.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let pe = item_pe(item, &lk, ty).map_err(|e| ConfigError {
                    field: path.clone(),
                    message: e.0,
                    duplicate: false,
                })?;
                if node.children.contains_key(&pe) {
                    let field = path[..len].to_string();
                    return Err(ConfigError {
                        field,
                        message: format!("duplicate entries for key {}", display_pe(&pe)),
                        duplicate: true,
                    });
                }
                let mut c = config_set(item, &ity, path)?;
                path.truncate(len);
                c.member = true;
                node.children.insert(pe, c);
            }
        }
        _ => node.member = true,
    }
    Ok(node)
}

fn config_set_root(v: &Value, ty: &Ty<'_>, scope: Scope) -> Result<FieldSet, ConfigError> {
    let mut set = config_set(v, ty, &mut String::new())?;
    scope.filter(&mut set);
    Ok(set)
}

// ---------------------------------------------------------------------------
// Merge.

/// Merge an applied configuration into a live object.
fn merge_into(l: &mut Value, r: &Value, ty: &Ty<'_>) {
    match (&mut *l, r) {
        (Value::Object(lm), Value::Object(rm))
            if !(ty.map_atomic() || lm.is_empty() && rm.is_empty()) =>
        {
            for (k, rv) in rm {
                match lm.get_mut(k) {
                    Some(lv) => merge_into(lv, rv, &ty.child(k)),
                    None => {
                        lm.insert(k.clone(), rv.clone());
                    }
                }
            }
        }
        (Value::Array(la), Value::Array(ra)) if !(la.is_empty() && ra.is_empty()) => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                *l = r.clone();
            } else {
                merge_list(la, ra, &lk, ty);
            }
        }
        _ => *l = r.clone(),
    }
}

/// Merge two associative lists the way SMD orders them: items only in the
/// live list keep their place, applied items follow the applied order.
fn merge_list(la: &mut Vec<Value>, ra: &[Value], lk: &Lk, ty: &Ty<'_>) {
    let pes = |items: &[Value]| -> Option<Vec<String>> {
        items.iter().map(|v| item_pe(v, lk, ty).ok()).collect()
    };
    let (Some(rpes), Some(lpes)) = (pes(ra), pes(la)) else {
        *la = ra.to_vec();
        return;
    };
    let ity = ty.item();
    let rhs: HashSet<&str> = rpes.iter().map(String::as_str).collect();
    // First occurrence of each live item; None when duplicated.
    let mut lhs: HashMap<&str, Option<usize>> = HashMap::with_capacity(lpes.len());
    for (i, pe) in lpes.iter().enumerate() {
        lhs.entry(pe.as_str())
            .and_modify(|e| *e = None)
            .or_insert(Some(i));
    }
    let mut shared = rpes
        .iter()
        .map(String::as_str)
        .filter(|pe| lhs.contains_key(pe));
    let mut next_shared = shared.next();
    let mut litems: Vec<Option<Value>> = std::mem::take(la).into_iter().map(Some).collect();
    let mut merged: HashSet<&str> = HashSet::with_capacity(rpes.len());
    let mut out = Vec::with_capacity(lpes.len().max(rpes.len()));
    let take_live = |pe: &str, litems: &mut Vec<Option<Value>>| -> Option<Value> {
        lhs.get(pe)
            .copied()
            .flatten()
            .and_then(|i| litems[i].take())
    };
    let merge_item = |l: Option<Value>, r: &Value| -> Value {
        match l {
            Some(mut lv) => {
                merge_into(&mut lv, r, &ity);
                lv
            }
            None => r.clone(),
        }
    };
    let (ll, rl) = (lpes.len(), rpes.len());
    let (mut li, mut ri) = (0, 0);
    while li < ll || ri < rl {
        if li < ll && ri < rl {
            let pe = lpes[li].as_str();
            if pe == rpes[ri] {
                merged.insert(pe);
                let l = take_live(pe, &mut litems);
                out.push(merge_item(l, &ra[ri]));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if rhs.contains(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < ll {
            let pe = lpes[li].as_str();
            if !rhs.contains(pe) {
                out.push(litems[li].take().unwrap_or(Value::Null));
                li += 1;
                continue;
            } else if merged.contains(pe) {
                li += 1;
            }
        }
        if ri < rl {
            let pe = rpes[ri].as_str();
            merged.insert(pe);
            let l = take_live(pe, &mut litems);
            out.push(merge_item(l, &ra[ri]));
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    *la = out;
}

// ---------------------------------------------------------------------------
// Compare.

/// What changed between two objects, as field sets.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// Fields only in the new object (and maps/items added as a whole).
    pub added: FieldSet,
    /// Leaves present in both with different values.
    pub modified: FieldSet,
    /// Fields only in the old object.
    pub removed: FieldSet,
}

impl Comparison {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    fn attach(&mut self, pe: impl FnOnce() -> String, c: Comparison) {
        if c.is_empty() {
            return;
        }
        let pe = pe();
        for (mine, theirs) in [
            (&mut self.added, c.added),
            (&mut self.modified, c.modified),
            (&mut self.removed, c.removed),
        ] {
            if !theirs.is_empty() {
                mine.children.insert(pe.clone(), theirs);
            }
        }
    }
}

fn leaf(l: Option<&Value>, r: Option<&Value>, out: &mut Comparison) {
    match (l, r) {
        (None, Some(_)) => out.added.member = true,
        (Some(_), None) => out.removed.member = true,
        (Some(a), Some(b)) if a != b => out.modified.member = true,
        _ => {}
    }
}

fn is_map_or_none(v: Option<&Value>) -> bool {
    v.is_none_or(Value::is_object)
}

fn is_list_or_none(v: Option<&Value>) -> bool {
    v.is_none_or(Value::is_array)
}

fn compare_maps(
    l: Option<&Map<String, Value>>,
    r: Option<&Map<String, Value>>,
    ty: &Ty<'_>,
    keep: &dyn Fn(&str) -> bool,
    out: &mut Comparison,
) {
    if let Some(lm) = l {
        for (k, lv) in lm {
            if !keep(k) {
                continue;
            }
            let rv = r.and_then(|m| m.get(k));
            let mut c = Comparison::default();
            compare_at(Some(lv), rv, &ty.child(k), &mut c);
            out.attach(|| field_pe(k), c);
        }
    }
    if let Some(rm) = r {
        for (k, rv) in rm {
            if !keep(k) || l.is_some_and(|m| m.contains_key(k)) {
                continue;
            }
            let mut c = Comparison::default();
            compare_at(None, Some(rv), &ty.child(k), &mut c);
            out.attach(|| field_pe(k), c);
        }
    }
}

fn compare_at(l: Option<&Value>, r: Option<&Value>, ty: &Ty<'_>, out: &mut Comparison) {
    if l.is_none() && r.is_none() {
        return;
    }
    if is_map_or_none(l) && is_map_or_none(r) {
        let lm = l.and_then(Value::as_object);
        let rm = r.and_then(Value::as_object);
        if ty.map_atomic() || (lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty)) {
            return leaf(l, r, out);
        }
        compare_maps(lm, rm, ty, &|_| true, out);
    } else if is_list_or_none(l) && is_list_or_none(r) {
        let la = l
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let ra = r
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let lk = ty.list_kind();
        if matches!(lk, Lk::Atomic) || (la.is_empty() && ra.is_empty()) {
            return leaf(l, r, out);
        }
        let mut items = Comparison::default();
        if compare_lists(la, ra, &lk, ty, &mut items).is_err() {
            return leaf(l, r, out);
        }
        out.added.children.append(&mut items.added.children);
        out.modified.children.append(&mut items.modified.children);
        out.removed.children.append(&mut items.removed.children);
    } else {
        return leaf(l, r, out);
    }
    if l.is_none() {
        out.added.member = true;
    } else if r.is_none() {
        out.removed.member = true;
    }
}

fn compare_lists(
    la: &[Value],
    ra: &[Value],
    lk: &Lk,
    ty: &Ty<'_>,
    out: &mut Comparison,
) -> Result<(), PeError> {
    let ity = ty.item();
    // pe → (live items, new items), in first-seen order.
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, (Vec<&Value>, Vec<&Value>)> = HashMap::new();
    for (side, items) in [(0, la), (1, ra)] {
        for item in items {
            let pe = item_pe(item, lk, ty)?;
            let g = match groups.get_mut(&pe) {
                Some(g) => g,
                None => {
                    order.push(pe.clone());
                    groups.entry(pe).or_default()
                }
            };
            if side == 0 {
                g.0.push(item);
            } else {
                g.1.push(item);
            }
        }
    }
    for pe in order {
        let Some((ls, rs)) = groups.remove(&pe) else {
            continue;
        };
        match (ls.len(), rs.len()) {
            (0..=1, 0..=1) => {
                let mut c = Comparison::default();
                compare_at(ls.first().copied(), rs.first().copied(), &ity, &mut c);
                out.attach(|| pe, c);
            }
            (2.., 2..) => {
                if ls != rs {
                    out.modified.children.entry(pe).or_default().member = true;
                }
            }
            (2.., _) => {
                let mut c = Comparison::default();
                if let Some(r) = rs.first() {
                    compare_at(None, Some(r), &ity, &mut c);
                }
                c.removed.member = true;
                out.attach(|| pe, c);
            }
            (_, 2..) => {
                let mut c = Comparison::default();
                if let Some(l) = ls.first() {
                    compare_at(Some(l), None, &ity, &mut c);
                }
                c.added.member = true;
                out.attach(|| pe, c);
            }
        }
    }
    Ok(())
}

/// Compare two whole objects within a scope (never `metadata.managedFields`).
fn compare_objects(l: &Value, r: &Value, ty: &Ty<'_>, scope: Scope) -> Comparison {
    let mut out = Comparison::default();
    let (Some(lm), Some(rm)) = (l.as_object(), r.as_object()) else {
        return out;
    };
    let keep = |k: &str| scope.keeps(k) && k != "metadata";
    compare_maps(Some(lm), Some(rm), ty, &keep, &mut out);
    if scope.keeps("metadata") {
        let mty = ty.child("metadata");
        let mut c = Comparison::default();
        let (lmeta, rmeta) = (lm.get("metadata"), rm.get("metadata"));
        compare_maps(
            lmeta.and_then(Value::as_object),
            rmeta.and_then(Value::as_object),
            &mty,
            &|k| k != "managedFields",
            &mut c,
        );
        out.attach(|| field_pe("metadata"), c);
    }
    out
}

/// An "empty" object of the kind to compare a created object against: the
/// structs a Go object always has (metadata, spec, status, pod templates)
/// are present, so only maps and items created as a whole are members.
#[cfg(test)]
fn skeleton(obj: &Value, ty: &Ty<'_>) -> Value {
    match ty {
        Ty::Custom(..) => json!({}),
        _ => skeleton_walk(obj, ty, true),
    }
}

/// Whether `k` (holding `v`) is part of the skeleton of its parent.
fn in_skeleton(k: &str, v: &Value, cty: &Ty<'_>, root: bool) -> bool {
    v.is_object()
        && (matches!(cty, Ty::Struct(_)) || (root && matches!(k, "metadata" | "spec" | "status")))
}

fn skeleton_walk(obj: &Value, ty: &Ty<'_>, root: bool) -> Value {
    let mut out = Map::new();
    if let Some(m) = obj.as_object() {
        for (k, v) in m {
            let cty = ty.child(k);
            if in_skeleton(k, v, &cty, root) {
                out.insert(k.clone(), skeleton_walk(v, &cty, false));
            }
        }
    }
    Value::Object(out)
}

/// The fields a create sets: what `compare_objects(skeleton(obj), obj)`
/// reports as added or modified, computed in one walk (every create runs
/// this, so it builds no skeleton and no three-way comparison).
fn created_fields(obj: &Value, ty: &Ty<'_>, scope: Scope) -> FieldSet {
    let mut out = FieldSet::default();
    let Some(m) = obj.as_object() else {
        return out;
    };
    let custom = matches!(ty, Ty::Custom(..));
    let keep = |k: &str| scope.keeps(k) && k != "metadata";
    created_children(m, ty, !custom, true, &keep, &mut out);
    if scope.keeps("metadata")
        && let Some(meta) = m.get("metadata").and_then(Value::as_object)
    {
        let mut c = FieldSet::default();
        let in_skel = !custom;
        created_children(
            meta,
            &ty.child("metadata"),
            in_skel,
            false,
            &|k| k != "managedFields",
            &mut c,
        );
        if !c.is_empty() {
            out.children.insert(field_pe("metadata"), c);
        }
    }
    out
}

/// The children of a map whose skeleton is present (`in_skel`) or absent.
fn created_children(
    m: &Map<String, Value>,
    ty: &Ty<'_>,
    in_skel: bool,
    root: bool,
    keep: &dyn Fn(&str) -> bool,
    out: &mut FieldSet,
) {
    for (k, v) in m {
        if !keep(k) {
            continue;
        }
        let cty = ty.child(k);
        let c = if in_skel && in_skeleton(k, v, &cty, root) {
            created_struct(v, &cty)
        } else {
            added_whole(v, &cty)
        };
        if !c.is_empty() {
            out.children.insert(field_pe(k), c);
        }
    }
}

/// A struct the skeleton has: only what is not itself skeleton is added.
fn created_struct(v: &Value, ty: &Ty<'_>) -> FieldSet {
    let Some(m) = v.as_object() else {
        return FieldSet::default();
    };
    if m.is_empty() {
        return FieldSet::default();
    }
    if ty.map_atomic() {
        // Compared as a leaf against its skeleton.
        return FieldSet {
            member: skeleton_walk(v, ty, false) != *v,
            children: BTreeMap::new(),
        };
    }
    let mut out = FieldSet::default();
    created_children(m, ty, true, false, &|_| true, &mut out);
    out
}

/// A value created as a whole: a member, with its granular parts.
fn added_whole(v: &Value, ty: &Ty<'_>) -> FieldSet {
    let mut out = FieldSet {
        member: true,
        children: BTreeMap::new(),
    };
    match v {
        Value::Object(m) if !m.is_empty() && !ty.map_atomic() => {
            for (k, cv) in m {
                out.children
                    .insert(field_pe(k), added_whole(cv, &ty.child(k)));
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                return out;
            }
            let Ok(pes) = a
                .iter()
                .map(|item| item_pe(item, &lk, ty))
                .collect::<Result<Vec<_>, _>>()
            else {
                return out;
            };
            let ity = ty.item();
            for (pe, item) in pes.into_iter().zip(a) {
                // Duplicates: the first item stands for them all.
                out.children
                    .entry(pe)
                    .or_insert_with(|| added_whole(item, &ity));
            }
        }
        _ => {}
    }
    out
}

/// A field-set node rendered as FieldsV1 while it is built: what
/// [`created_fields`] followed by [`strip_meta`] and
/// [`FieldSet::into_fields_v1`] give, without the intermediate trie (every
/// create of an untracked object takes this path).
#[derive(Default)]
struct V1 {
    member: bool,
    children: Map<String, Value>,
}

impl V1 {
    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    fn into_value(self) -> Value {
        let mut m = self.children;
        if self.member && !m.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        Value::Object(m)
    }
}

/// The metadata fields kube never tracks (see [`strip_meta`]).
const STRIPPED_META: [&str; 9] = [
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
];

/// The FieldsV1 of a create with no earlier managers: `created_fields`
/// with kube's stripped fields removed, rendered directly.
fn created_fields_v1(obj: &Value, ty: &Ty<'_>, scope: Scope) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(m) = obj.as_object() else {
        return out;
    };
    let custom = matches!(ty, Ty::Custom(..));
    let keep = |k: &str| scope.keeps(k) && k != "metadata";
    v1_created_children(
        m,
        ty,
        !custom,
        true,
        &keep,
        &["apiVersion", "kind"],
        &mut out,
    );
    if scope.keeps("metadata")
        && let Some(meta) = m.get("metadata").and_then(Value::as_object)
    {
        let mut c = Map::new();
        v1_created_children(
            meta,
            &ty.child("metadata"),
            !custom,
            false,
            &|k| k != "managedFields",
            &STRIPPED_META,
            &mut c,
        );
        if !c.is_empty() {
            out.insert(field_pe("metadata"), Value::Object(c));
        }
    }
    out
}

/// [`created_children`], rendering into `out`; the members of `stripped`
/// keys are dropped (their granular parts stay, as `strip_meta` does).
fn v1_created_children(
    m: &Map<String, Value>,
    ty: &Ty<'_>,
    in_skel: bool,
    root: bool,
    keep: &dyn Fn(&str) -> bool,
    stripped: &[&str],
    out: &mut Map<String, Value>,
) {
    for (k, v) in m {
        if !keep(k) {
            continue;
        }
        let cty = ty.child(k);
        let mut c = if in_skel && in_skeleton(k, v, &cty, root) {
            v1_created_struct(v, &cty)
        } else {
            v1_added_whole(v, &cty)
        };
        if stripped.contains(&k.as_str()) {
            c.member = false;
        }
        if !c.is_empty() {
            out.insert(field_pe(k), c.into_value());
        }
    }
}

/// [`created_struct`], rendered.
fn v1_created_struct(v: &Value, ty: &Ty<'_>) -> V1 {
    let Some(m) = v.as_object().filter(|m| !m.is_empty()) else {
        return V1::default();
    };
    if ty.map_atomic() {
        return V1 {
            member: skeleton_walk(v, ty, false) != *v,
            children: Map::new(),
        };
    }
    let mut out = V1::default();
    v1_created_children(m, ty, true, false, &|_| true, &[], &mut out.children);
    out
}

/// [`added_whole`], rendered.
fn v1_added_whole(v: &Value, ty: &Ty<'_>) -> V1 {
    let mut out = V1 {
        member: true,
        children: Map::new(),
    };
    match v {
        Value::Object(m) if !m.is_empty() && !ty.map_atomic() => {
            for (k, cv) in m {
                out.children
                    .insert(field_pe(k), v1_added_whole(cv, &ty.child(k)).into_value());
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                return out;
            }
            let Ok(pes) = a
                .iter()
                .map(|item| item_pe(item, &lk, ty))
                .collect::<Result<Vec<_>, _>>()
            else {
                return out;
            };
            let ity = ty.item();
            for (pe, item) in pes.into_iter().zip(a) {
                // Duplicates: the first item stands for them all.
                if !out.children.contains_key(&pe) {
                    out.children
                        .insert(pe, v1_added_whole(item, &ity).into_value());
                }
            }
        }
        _ => {}
    }
    out
}

// ---------------------------------------------------------------------------
// Prune.

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Remove what the applier owned last time (`last`) that nobody owns now
/// (`managed`, the new configuration's set included). A struct field counts
/// as owned when anything below it is; maps and lists left empty by the
/// removal go too.
fn prune(v: &mut Value, last: &FieldSet, managed: Option<&FieldSet>, ty: &Ty<'_>) {
    match v {
        Value::Object(m) => {
            for (pe, lchild) in &last.children {
                let Some(name) = pe.strip_prefix("f:") else {
                    continue;
                };
                let mchild = managed.and_then(|s| s.children.get(pe));
                let owned = mchild.is_some_and(|c| c.member || !c.children.is_empty());
                if !owned {
                    m.remove(name);
                    continue;
                }
                if lchild.children.is_empty() {
                    continue;
                }
                if let Some(cv) = m.get_mut(name) {
                    let was_empty = is_empty_container(cv);
                    prune(cv, lchild, mchild, &ty.child(name));
                    if !was_empty && is_empty_container(cv) {
                        m.remove(name);
                    }
                }
            }
        }
        Value::Array(a) => {
            let lk = ty.list_kind();
            if matches!(lk, Lk::Atomic) {
                return;
            }
            let ity = ty.item();
            let items = std::mem::take(a);
            for mut item in items {
                let Ok(pe) = item_pe(&item, &lk, ty) else {
                    a.push(item);
                    continue;
                };
                let Some(lchild) = last.children.get(&pe) else {
                    a.push(item);
                    continue;
                };
                let mchild = managed.and_then(|s| s.children.get(&pe));
                if !mchild.is_some_and(|c| c.member) {
                    continue;
                }
                if !lchild.children.is_empty() {
                    prune(&mut item, lchild, mchild, &ity);
                }
                a.push(item);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Managed fields entries.

/// One `managedFields` entry.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion the fields were written in.
    pub api_version: String,
    /// `status`, `scale`, ... or empty for the main resource.
    pub subresource: String,
    /// Last change (RFC 3339), if known.
    pub time: Option<String>,
    /// Owned fields.
    pub fields: FieldSet,
}

impl Entry {
    /// Same manager identity (apiVersion counts for Update only, as in kube).
    fn is(&self, manager: &str, operation: &str, api_version: &str, subresource: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == "Apply" || self.api_version == api_version)
    }

    fn same_identity(&self, other: &Entry) -> bool {
        self.is(
            &other.manager,
            &other.operation,
            &other.api_version,
            &other.subresource,
        )
    }

    /// How kube names this manager in conflicts.
    fn display(&self) -> String {
        let mut s = json_str(&self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(
                " with subresource {}",
                json_str(&self.subresource)
            ));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    fn into_json(self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager));
        m.insert("operation".into(), Value::String(self.operation));
        m.insert("apiVersion".into(), Value::String(self.api_version));
        if let Some(t) = self.time {
            m.insert("time".into(), Value::String(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.into_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), Value::String(self.subresource));
        }
        Value::Object(m)
    }
}

/// Parse `metadata.managedFields`; an invalid entry fails the whole list,
/// as in kube.
pub fn decode_managed(v: &Value) -> Result<Vec<Entry>, String> {
    let Some(a) = v.as_array() else {
        return Err("managedFields must be a list".into());
    };
    let mut out: Vec<Entry> = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
        let operation = s("operation");
        if !matches!(operation, "Apply" | "Update") {
            return Err("operation must be `Apply` or `Update`".into());
        }
        if s("apiVersion").is_empty() {
            return Err("apiVersion must not be empty".into());
        }
        match s("fieldsType") {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            t => {
                return Err(format!(
                    "invalid fieldsType {t:?} in managed fields entry {i}"
                ));
            }
        }
        let fields = match e.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::default(),
            Some(f) => FieldSet::from_fields_v1(f)?,
        };
        let entry = Entry {
            manager: s("manager").to_string(),
            operation: operation.to_string(),
            api_version: s("apiVersion").to_string(),
            subresource: s("subresource").to_string(),
            time: e.get("time").and_then(Value::as_str).map(str::to_string),
            fields,
        };
        // A repeated identity replaces the earlier one, as kube's map does.
        out.retain(|x| !x.same_identity(&entry));
        out.push(entry);
    }
    Ok(out)
}

fn managed_of(obj: &Value) -> Option<&Value> {
    obj.get("metadata")?.get("managedFields")
}

/// kube's `isResetManagedFields`: `[]` or `[{}]`.
fn is_reset(v: &Value) -> bool {
    match v.as_array().map(Vec::as_slice) {
        Some([]) => true,
        Some([e]) => e
            .as_object()
            .is_some_and(|m| m.values().all(|v| v.is_null() || v == &json!(""))),
        _ => false,
    }
}

/// Sort (Apply first, then by time, manager, apiVersion, subresource), drop
/// empty entries and write them to the object (or remove the field).
fn set_managed(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| {
                a.time
                    .as_deref()
                    .unwrap_or("")
                    .cmp(b.time.as_deref().unwrap_or(""))
            })
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let meta = crate::object::meta_mut(obj);
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.into_iter().map(Entry::into_json).collect()),
        );
    }
}

/// Fold the oldest Update entries into `ancient-changes` beyond ten.
fn cap_updaters(entries: &mut Vec<Entry>) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|i| entries[*i].operation == "Update")
        .collect();
    let mut length = updaters.len();
    if length <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|a, b| {
        let (a, b) = (&entries[*a], &entries[*b]);
        a.time
            .as_deref()
            .unwrap_or("")
            .cmp(b.time.as_deref().unwrap_or(""))
            .then_with(|| a.manager.cmp(&b.manager))
    });
    let mut first_of: HashMap<String, usize> = HashMap::new();
    let mut bucket_of: HashMap<String, usize> = HashMap::new();
    let mut drop = vec![false; entries.len()];
    for i in updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        let Some(first) = first_of.get(&version).copied() else {
            first_of.insert(version, i);
            continue;
        };
        let bucket = *bucket_of.entry(version.clone()).or_insert_with(|| {
            let existing = (0..entries.len())
                .find(|j| !drop[*j] && entries[*j].is("ancient-changes", "Update", &version, ""));
            existing.unwrap_or_else(|| {
                entries[first].manager = "ancient-changes".into();
                entries[first].subresource.clear();
                first
            })
        });
        if bucket == i {
            continue;
        }
        let fields = std::mem::take(&mut entries[i].fields);
        entries[bucket].fields.union_with(&fields);
        entries[bucket].time = entries[i].time.clone();
        drop[i] = true;
        length -= 1;
    }
    let mut i = 0;
    entries.retain(|_| {
        let keep = !drop[i];
        i += 1;
        keep
    });
}

/// SMD's update for an Update operation: the changed fields move to
/// `manager`'s entry, the others lose them and the removed ones.
fn record_changes(
    entries: &mut Vec<Entry>,
    cmp: Comparison,
    manager: &str,
    api_version: &str,
    subresource: &str,
) {
    let Comparison {
        added: mut changed,
        modified,
        removed,
    } = cmp;
    changed.union_with(&modified);
    for e in entries.iter_mut() {
        e.fields.difference_with(&changed);
        e.fields.difference_with(&removed);
    }
    let mut mine = changed;
    strip_meta(&mut mine);
    if !mine.is_empty() {
        let now = crate::object::now_rfc3339();
        match entries
            .iter_mut()
            .find(|e| e.is(manager, "Update", api_version, subresource))
        {
            Some(e) => {
                e.fields.union_with(&mine);
                e.time = Some(now);
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                subresource: subresource.to_string(),
                time: Some(now),
                fields: mine,
            }),
        }
    }
    entries.retain(|e| !e.fields.is_empty());
}

// ---------------------------------------------------------------------------
// Update operations.

fn check_manager(m: &str) -> ApiResult<()> {
    let bad = |reason: &str, message: &str| {
        Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause {
                reason: reason.into(),
                message: message.into(),
                field: "fieldManager".into(),
            }],
        ))
    };
    if m.len() > 128 {
        return bad("FieldValueTooLong", "Too long: may not be longer than 128");
    }
    if m.chars().any(char::is_control) {
        return bad(
            "FieldValueInvalid",
            &format!("Invalid value: {m:?}: must only contain printable characters"),
        );
    }
    Ok(())
}

/// The manager of a non-apply write: `fieldManager`, else the User-Agent's
/// prefix before the first `/`, else `unknown`.
fn update_manager(ctx: &Ctx<'_>) -> ApiResult<String> {
    if let Some(m) = ctx.query.get("fieldManager").filter(|m| !m.is_empty()) {
        check_manager(m)?;
        return Ok(m.to_string());
    }
    let ua = ctx
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut out = String::new();
    for c in ua.split('/').next().unwrap_or("").chars() {
        if c.is_control() {
            continue;
        }
        if out.len() + c.len_utf8() > 128 {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        out.push_str("unknown");
    }
    Ok(out)
}

/// Whether this request is an apply (whose managed fields `patch.rs` wrote).
fn is_apply(ctx: &Ctx<'_>) -> bool {
    matches!(codec::body_type(&ctx.headers), Ok(BodyType::ApplyPatch))
}

/// Record a create's managed fields (an Update from an empty object).
pub(crate) fn track_create(ctx: &Ctx<'_>, obj: &mut Value) -> ApiResult<()> {
    track(ctx, None, obj, Sub::Main).map(|_| ())
}

/// Record an update's managed fields (PUT, merge/JSON/strategic patch,
/// `/status`, `/scale`, `/finalize`) on `obj`, the object about to be
/// stored, and say whether it is unchanged from `old` (a no-op write:
/// equal but for resourceVersion and managedFields timestamps).
pub(crate) fn track_update(
    ctx: &Ctx<'_>,
    old: &Value,
    obj: &mut Value,
    sub: Sub,
) -> ApiResult<bool> {
    track(ctx, Some(old), obj, sub)?;
    Ok(same_object(obj, old, true))
}

fn track(ctx: &Ctx<'_>, old: Option<&Value>, obj: &mut Value, sub: Sub) -> ApiResult<()> {
    if is_apply(ctx) {
        return Ok(());
    }
    let manager = update_manager(ctx)?;
    let live_entries = || {
        old.and_then(managed_of)
            .and_then(|v| decode_managed(v).ok())
            .unwrap_or_default()
    };
    // The request's managedFields win on the main resource (that is how
    // clients edit or reset them); else the live object's.
    let mut entries = match (sub, managed_of(obj)) {
        (Sub::Main, Some(v)) if is_reset(v) => Vec::new(),
        (Sub::Main, Some(v)) => match decode_managed(v) {
            Ok(e) if !e.is_empty() => e,
            _ => live_entries(),
        },
        _ => live_entries(),
    };
    if entries.is_empty() && old.is_some() {
        // kube does not start tracking on an update of an untracked object.
        crate::object::meta_mut(obj).remove("managedFields");
        return Ok(());
    }
    let schema = Schema::for_ctx(ctx);
    let ty = schema.root();
    let scope = Scope::of(ctx, sub);
    if old.is_none() && entries.is_empty() {
        // A create with no managers yet: one entry, rendered directly.
        let fields = created_fields_v1(obj, &ty, scope);
        let meta = crate::object::meta_mut(obj);
        if fields.is_empty() {
            meta.remove("managedFields");
        } else {
            let mut e = Map::new();
            e.insert("manager".into(), Value::String(manager));
            e.insert("operation".into(), Value::String("Update".into()));
            e.insert("apiVersion".into(), Value::String(ctx.def.api_version()));
            e.insert("time".into(), Value::String(crate::object::now_rfc3339()));
            e.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            e.insert("fieldsV1".into(), Value::Object(fields));
            let subresource = subresource_name(sub);
            if !subresource.is_empty() {
                e.insert("subresource".into(), Value::String(subresource.into()));
            }
            meta.insert("managedFields".into(), Value::Array(vec![Value::Object(e)]));
        }
        return Ok(());
    }
    let cmp = match old {
        Some(live) => compare_objects(live, obj, &ty, scope),
        None => Comparison {
            added: created_fields(obj, &ty, scope),
            ..Comparison::default()
        },
    };
    record_changes(
        &mut entries,
        cmp,
        &manager,
        &ctx.def.api_version(),
        subresource_name(sub),
    );
    cap_updaters(&mut entries);
    set_managed(obj, entries);
    Ok(())
}

/// Whether two maps are equal but for the keys in `ignore`.
pub(crate) fn map_eq_ignoring(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    ignore: &[&str],
) -> bool {
    let count = |m: &Map<String, Value>| m.keys().filter(|k| !ignore.contains(&k.as_str())).count();
    count(a) == count(b)
        && a.iter()
            .filter(|(k, _)| !ignore.contains(&k.as_str()))
            .all(|(k, v)| b.get(k) == Some(v))
}

/// Equal but for `metadata.resourceVersion` and `metadata.managedFields`
/// (with `managed`, managedFields must be equal but for their `time`s).
pub(crate) fn same_object(a: &Value, b: &Value, managed: bool) -> bool {
    let (Some(am), Some(bm)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if !map_eq_ignoring(am, bm, &["metadata"]) {
        return false;
    }
    let empty = Map::new();
    fn meta<'a>(
        m: &'a Map<String, Value>,
        empty: &'a Map<String, Value>,
    ) -> &'a Map<String, Value> {
        m.get("metadata")
            .and_then(Value::as_object)
            .unwrap_or(empty)
    }
    let (ameta, bmeta) = (meta(am, &empty), meta(bm, &empty));
    if !map_eq_ignoring(ameta, bmeta, &["resourceVersion", "managedFields"]) {
        return false;
    }
    if !managed {
        return true;
    }
    fn entries(m: &Map<String, Value>) -> &[Value] {
        m.get("managedFields")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
    let (ae, be) = (entries(ameta), entries(bmeta));
    ae.len() == be.len()
        && ae.iter().zip(be).all(|(x, y)| match (x, y) {
            (Value::Object(x), Value::Object(y)) => map_eq_ignoring(x, y, &["time"]),
            (x, y) => x == y,
        })
}

// ---------------------------------------------------------------------------
// Apply.

/// Why an apply failed.
#[derive(Debug)]
pub enum ApplyError {
    /// Fields other managers own would change: (manager as kube prints it,
    /// field path).
    Conflicts(Vec<(String, String)>),
    /// The configuration is not valid for the list types.
    Config(ConfigError),
    /// 400.
    BadRequest(String),
    /// The live object's managedFields cannot be read.
    Internal(String),
}

/// What an apply needs to know about the request.
pub struct ApplyRequest<'a> {
    /// The applier.
    pub manager: &'a str,
    /// `force=true`.
    pub force: bool,
    /// The endpoint.
    pub sub: Sub,
}

/// Server-side apply of `config` onto `live` (None: the object does not
/// exist yet). Returns the merged object with its managedFields.
pub(crate) fn apply(
    ctx: &Ctx<'_>,
    live: Option<&Value>,
    config: &Value,
    req: &ApplyRequest<'_>,
) -> Result<Value, ApplyError> {
    let schema = Schema::for_ctx(ctx);
    apply_with(
        &schema,
        live,
        config,
        req,
        Scope::of(ctx, req.sub),
        &ctx.def.api_version(),
    )
}

fn apply_with(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    req: &ApplyRequest<'_>,
    scope: Scope,
    api_version: &str,
) -> Result<Value, ApplyError> {
    let ty = schema.root();
    let subresource = subresource_name(req.sub);
    if managed_of(config).is_some_and(|v| !v.is_null()) {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let empty = json!({});
    let live_v = live.unwrap_or(&empty);
    let mut entries = match managed_of(live_v) {
        Some(v) => decode_managed(v)
            .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?,
        None => Vec::new(),
    };
    if entries.is_empty() && live.is_some() {
        // The fields an untracked object has belong to `before-first-apply`.
        let cmp = Comparison {
            added: created_fields(live_v, &ty, scope),
            ..Comparison::default()
        };
        record_changes(
            &mut entries,
            cmp,
            "before-first-apply",
            api_version,
            subresource,
        );
    }
    let set = config_set_root(config, &ty, scope).map_err(ApplyError::Config)?;
    let mut merged = live_v.clone();
    merge_into(&mut merged, config, &ty);
    let mine = entries
        .iter()
        .position(|e| e.is(req.manager, "Apply", api_version, subresource));
    let previous = mine.map(|i| entries.remove(i));
    if let Some(last) = &previous {
        let mut owned = set.clone();
        for e in &entries {
            owned.union_with(&e.fields);
        }
        prune(&mut merged, &last.fields, Some(&owned), &ty);
    }
    let Comparison {
        added: mut changed,
        modified,
        removed,
    } = compare_objects(live_v, &merged, &ty, scope);
    changed.union_with(&modified);
    let mut conflicts: Vec<(usize, FieldSet)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.fields.intersection(&changed)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if !conflicts.is_empty() && !req.force {
        // kubectl upgrading from client-side apply: conflicts on fields its
        // last-applied configuration set (to the live values) are allowed.
        let allowed = (req.manager == "kubectl")
            .then(|| last_applied_fields(live_v, &ty, api_version))
            .flatten();
        let mut remaining: Vec<(String, String)> = Vec::new();
        for (i, c) in &conflicts {
            let who = entries[*i].display();
            for p in c.paths() {
                if !allowed.as_ref().is_some_and(|a| a.has(&p)) {
                    remaining.push((who.clone(), display_path(&p)));
                }
            }
        }
        if !remaining.is_empty() || allowed.is_none() {
            let mut all = remaining;
            all.sort();
            return Err(ApplyError::Conflicts(all));
        }
    }
    for (i, c) in conflicts.drain(..) {
        entries[i].fields.difference_with(&c);
    }
    for e in &mut entries {
        e.fields.difference_with(&removed);
    }
    let mut fields = set;
    strip_meta(&mut fields);
    let object_changed = !same_object(live_v, &merged, false);
    let time = if object_changed {
        Some(crate::object::now_rfc3339())
    } else {
        previous.and_then(|p| p.time)
    };
    entries.push(Entry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: api_version.to_string(),
        subresource: subresource.to_string(),
        time,
        fields,
    });
    if req.manager == "kubectl" && has_last_applied(&merged) {
        let la = build_last_applied(config);
        if let Some(a) = merged
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.insert(LAST_APPLIED.into(), Value::String(la));
        }
    }
    set_managed(&mut merged, entries);
    Ok(merged)
}

fn has_last_applied(obj: &Value) -> bool {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// The applied configuration as kubectl's last-applied annotation.
fn build_last_applied(config: &Value) -> String {
    let mut c = config.clone();
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        let now_empty = match meta.get_mut("annotations").and_then(Value::as_object_mut) {
            Some(a) => {
                a.remove(LAST_APPLIED);
                a.is_empty()
            }
            None => false,
        };
        if now_empty {
            meta.remove("annotations");
        }
    }
    c.to_string()
}

/// The fields of the live object's last-applied configuration whose values
/// are still the live ones (kube's lastAppliedManager).
fn last_applied_fields(live: &Value, ty: &Ty<'_>, api_version: &str) -> Option<FieldSet> {
    let raw = live
        .pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()?;
    let la: Value = serde_json::from_str(raw).ok()?;
    if la.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let mut set = config_set_root(&la, ty, Scope::All).ok()?;
    let cmp = compare_objects(&la, live, ty, Scope::All);
    set.difference_with(&cmp.modified);
    set.difference_with(&cmp.added);
    set.difference_with(&cmp.removed);
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply_as(
        schema: &Schema,
        live: Option<&Value>,
        config: Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, ApplyError> {
        apply_with(
            schema,
            live,
            &config,
            &ApplyRequest {
                manager,
                force,
                sub: Sub::Main,
            },
            Scope::All,
            "v1",
        )
    }

    fn fields_of<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
        obj.pointer("/metadata/managedFields")?
            .as_array()?
            .iter()
            .find(|e| e["manager"] == json!(manager))
            .map(|e| &e["fieldsV1"])
    }

    #[test]
    fn fields_v1_round_trip_with_kube_entries() {
        // As written by kube-apiserver for `kubectl create deployment`.
        let v1 = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {}, "f:selector": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {".": {}, "k:{\"protocol\":\"TCP\",\"containerPort\":80}": {".": {}, "f:containerPort": {}}}}
                }}}
            }
        });
        let set = FieldSet::from_fields_v1(&v1).expect("parse");
        let out = set.to_fields_v1();
        // Keys come back canonical (sorted key fields).
        assert!(
            out.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"nginx\"}/f:ports/k:{\"containerPort\":80,\"protocol\":\"TCP\"}/f:containerPort")
                .is_some(),
            "{out}"
        );
        assert_eq!(FieldSet::from_fields_v1(&out).expect("reparse"), set);
        assert!(set.has(&["f:spec".into(), "f:selector".into()]));
        assert!(set.has(&["f:metadata".into(), "f:labels".into()]));
        assert!(!set.has(&["f:spec".into()]));
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
    }

    /// The one-walk create path agrees with comparing against the skeleton.
    #[test]
    fn created_fields_match_the_skeleton_comparison() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "5",
                "labels": {"a": "b"}, "annotations": {}, "finalizers": ["x", "x"],
                "ownerReferences": [{"uid": "u1", "name": "o", "kind": "K", "apiVersion": "v1"}]},
            "spec": {"containers": [
                {"name": "c", "image": "i", "ports": [{"containerPort": 80}, {"containerPort": 80}],
                 "resources": {"requests": {"cpu": "1"}}, "securityContext": {}},
                {"name": "c", "image": "dup"},
                {"image": "no-name"}],
                "nodeSelector": {"k": "v"}, "affinity": {"nodeAffinity": {}}, "tolerations": [{"key": "t"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "True"}]}});
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "n", "image": "x"}]}},
                "strategy": {}}});
        let cr = json!({"apiVersion": "x/v1", "kind": "C", "metadata": {"name": "c", "labels": {"l": "v"}},
            "spec": {"items": [{"name": "a", "v": 1}], "tags": ["a", "b"], "m": {"k": {"x": 1}}},
            "status": {"ok": true}});
        let crd = Arc::new(CrdSchema::new(Arc::new(
            json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "items": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object"}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "m": {"type": "object", "x-kubernetes-map-type": "atomic"}}}}}),
        )));
        let cases = [
            (Schema::builtin("", "Pod"), pod),
            (Schema::builtin("apps", "Deployment"), deploy),
            (Schema::custom(crd), cr),
        ];
        for (schema, obj) in cases {
            let ty = schema.root();
            for scope in [Scope::All, Scope::NoStatus, Scope::OnlyStatus] {
                let cmp = compare_objects(&skeleton(&obj, &ty), &obj, &ty, scope);
                let mut want = cmp.added;
                want.union_with(&cmp.modified);
                assert!(cmp.removed.is_empty());
                let got = created_fields(&obj, &ty, scope);
                assert_eq!(got.to_fields_v1(), want.to_fields_v1(), "{obj}");
                // The direct rendering agrees with the trie after stripping.
                let mut stripped = got;
                strip_meta(&mut stripped);
                assert_eq!(
                    Value::Object(created_fields_v1(&obj, &ty, scope)),
                    stripped.into_fields_v1(),
                    "{obj}"
                );
            }
        }
    }

    #[test]
    fn display_paths() {
        let p = vec![
            "f:spec".to_string(),
            "f:containers".into(),
            "k:{\"name\":\"a\"}".into(),
            "f:ports".into(),
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}".into(),
        ];
        assert_eq!(
            display_path(&p),
            ".spec.containers[name=\"a\"].ports[containerPort=80,protocol=\"TCP\"]"
        );
        assert_eq!(
            display_path(&["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()]),
            ".metadata.finalizers[=\"x\"]"
        );
    }

    #[test]
    fn containers_are_a_list_map_with_port_keys_defaulted() {
        let schema = Schema::builtin("apps", "Deployment");
        let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [
                {"name": "a", "image": "x", "ports": [{"containerPort": 80}]}]}}}});
        let set = config_set_root(&config, &schema.root(), Scope::All).expect("set");
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"a\"}/f:ports/k:{\"containerPort\":80,\"protocol\":\"TCP\"}"),
            Some(&json!({".": {}, "f:containerPort": {}})),
            "{v1}"
        );
        assert_eq!(v1.pointer("/f:spec/f:selector"), Some(&json!({})));
        let dup =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}}});
        let e = config_set_root(&dup, &schema.root(), Scope::All).expect_err("duplicate");
        assert!(e.duplicate);
        assert_eq!(e.field, "spec.template.spec.containers");
    }

    #[test]
    fn merge_orders_like_smd() {
        let schema = Schema::builtin("", "Pod");
        let ty = schema.root();
        let mut live = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}, {"name": "c"}]}});
        let config = json!({"spec": {"containers": [{"name": "d"}, {"name": "c", "image": "2"}, {"name": "a"}]}});
        merge_into(&mut live, &config, &ty);
        let names: Vec<&str> = live["spec"]["containers"]
            .as_array()
            .expect("list")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(names, ["b", "d", "c", "a"]);
        assert_eq!(live["spec"]["containers"][3]["image"], json!("1"));
        assert_eq!(live["spec"]["containers"][2]["image"], json!("2"));
    }

    #[test]
    fn appliers_share_list_maps_and_sets() {
        let schema = Schema::builtin("", "Pod");
        let a = apply_as(
            &schema,
            None,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["x/a"]},
                "spec": {"containers": [{"name": "a", "image": "1"}]}}),
            "A",
            false,
        )
        .expect("a");
        let b = apply_as(
            &schema,
            Some(&a),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["x/b"]},
                "spec": {"containers": [{"name": "b", "image": "2"}]}}),
            "B",
            false,
        )
        .expect("b");
        assert_eq!(b["spec"]["containers"].as_array().map(Vec::len), Some(2));
        assert_eq!(b["metadata"]["finalizers"], json!(["x/a", "x/b"]));
        let a2 = apply_as(
            &schema,
            Some(&b),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            "A",
            false,
        )
        .expect("a drops");
        assert_eq!(
            a2["spec"]["containers"],
            json!([{"name": "b", "image": "2"}])
        );
        assert_eq!(a2["metadata"]["finalizers"], json!(["x/b"]));
        assert!(fields_of(&a2, "A").is_none(), "empty entries are dropped");
    }

    #[test]
    fn conflicts_and_force() {
        let schema = Schema::builtin("", "ConfigMap");
        let cm = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": v, "other": "o"}});
        let a = apply_as(&schema, None, cm("1"), "A", false).expect("a");
        // Same value: shared ownership, no conflict.
        let b = apply_as(&schema, Some(&a), cm("1"), "B", false).expect("shared");
        assert!(fields_of(&b, "A").is_some() && fields_of(&b, "B").is_some());
        let Err(ApplyError::Conflicts(c)) = apply_as(&schema, Some(&b), cm("2"), "B", false) else {
            panic!("expected conflicts");
        };
        // `other` has the same value: no conflict there.
        assert_eq!(c, vec![("\"A\"".to_string(), ".data.k".to_string())]);
        let forced = apply_as(&schema, Some(&b), cm("2"), "B", true).expect("force");
        assert_eq!(forced["data"]["k"], json!("2"));
        assert_eq!(
            fields_of(&forced, "A"),
            Some(&json!({"f:data": {"f:other": {}}}))
        );
    }

    #[test]
    fn update_records_changes_and_takes_them_from_others() {
        let schema = Schema::builtin("", "ConfigMap");
        let ty = schema.root();
        let old = apply_as(
            &schema,
            None,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}),
            "A",
            false,
        )
        .expect("a");
        let mut new = old.clone();
        new["data"]["a"] = json!("9");
        new["data"]["c"] = json!("3");
        new["metadata"]["labels"] = json!({"x": "y"});
        let mut entries = decode_managed(&old["metadata"]["managedFields"]).expect("decode");
        let cmp = compare_objects(&old, &new, &ty, Scope::All);
        record_changes(&mut entries, cmp, "U", "v1", "");
        set_managed(&mut new, entries);
        assert_eq!(
            fields_of(&new, "U"),
            Some(
                &json!({"f:data": {"f:a": {}, "f:c": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
            )
        );
        assert_eq!(fields_of(&new, "A"), Some(&json!({"f:data": {"f:b": {}}})));
    }

    #[test]
    fn crd_list_map_from_schema() {
        let schema = Schema::custom(Arc::new(CrdSchema::new(Arc::new(json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {"ports": {
                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}
            }}}}
        })))));
        let obj = |ports: Value| json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"ports": ports}});
        let a = apply_as(
            &schema,
            None,
            obj(json!([{"name": "a", "port": 1}])),
            "A",
            false,
        )
        .expect("a");
        let b = apply_as(
            &schema,
            Some(&a),
            obj(json!([{"name": "b", "port": 2}])),
            "B",
            false,
        )
        .expect("b");
        assert_eq!(b["spec"]["ports"].as_array().map(Vec::len), Some(2));
        let Err(ApplyError::Conflicts(c)) = apply_as(
            &schema,
            Some(&b),
            obj(json!([{"name": "a", "port": 5}])),
            "B",
            false,
        ) else {
            panic!("conflict expected");
        };
        assert_eq!(
            c,
            vec![(
                "\"A\"".to_string(),
                ".spec.ports[name=\"a\"].port".to_string()
            )]
        );
    }

    #[test]
    fn update_entries_are_capped() {
        let schema = Schema::builtin("", "ConfigMap");
        let ty = schema.root();
        let mut obj =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
        let mut entries = Vec::new();
        for i in 0..13 {
            let mut new = obj.clone();
            new["data"][format!("k{i}")] = json!("v");
            let cmp = compare_objects(&obj, &new, &ty, Scope::All);
            record_changes(&mut entries, cmp, &format!("m{i:02}"), "v1", "");
            // Distinct, increasing times.
            if let Some(e) = entries.last_mut() {
                e.time = Some(format!("2024-01-01T00:00:{i:02}Z"));
            }
            cap_updaters(&mut entries);
            obj = new;
        }
        assert_eq!(entries.len(), 10);
        let ancient = entries
            .iter()
            .find(|e| e.manager == "ancient-changes")
            .expect("bucket");
        assert_eq!(
            ancient.fields.to_fields_v1(),
            json!({"f:data": {"f:k0": {}, "f:k1": {}, "f:k2": {}, "f:k3": {}}})
        );
        assert!(entries.iter().any(|e| e.manager == "m12"));
    }

    #[test]
    fn managed_fields_reset_and_sameness() {
        assert!(is_reset(&json!([])));
        assert!(is_reset(&json!([{}])));
        assert!(!is_reset(&json!([{"manager": "x"}])));
        let a = json!({"metadata": {"resourceVersion": "1", "managedFields": [{"manager": "m", "time": "t1"}]}, "x": 1});
        let b = json!({"metadata": {"resourceVersion": "2", "managedFields": [{"manager": "m", "time": "t2"}]}, "x": 1});
        assert!(same_object(&a, &b, true));
        let c = json!({"metadata": {"managedFields": [{"manager": "n"}]}, "x": 1});
        assert!(!same_object(&a, &c, true));
        assert!(same_object(&a, &c, false));
    }
}

//! The types server-side apply walks with: list semantics (atomic, set,
//! list-map and its keys) and atomic maps, from the strategic-merge tables
//! for built-in kinds and from a CRD's structural schema for custom ones.
//!
//! A list with a merge key is a list-map on the SMD/OpenAPI map keys, a
//! primitive merge list is a set, everything else is atomic; for custom
//! resources `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and
//! `x-kubernetes-map-type` decide. Unknown lists are atomic, unknown maps
//! granular.

use std::sync::Arc;

use kubeforge_apimachinery::strategic::{
    self as smp, FieldDesc, Strategy as SmpStrategy, TypeDesc,
};
use serde_json::{Value, json};

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
pub(crate) enum Keys {
    One(&'static str),
    Static(&'static [&'static str]),
    Owned(Vec<String>),
}

impl Keys {
    #[inline]
    pub(crate) fn each(&self) -> Vec<&str> {
        match self {
            Keys::One(k) => vec![*k],
            Keys::Static(ks) => ks.to_vec(),
            Keys::Owned(ks) => ks.iter().map(String::as_str).collect(),
        }
    }
}

/// A list's kind as the walkers use it.
#[derive(Clone, Debug)]
pub(crate) enum Lk {
    Atomic,
    Set,
    Map(Keys),
}

/// The type of a value: a cursor into the built-in tables or a CRD schema.
#[derive(Clone)]
pub(crate) enum Ty<'a> {
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

#[inline]
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
#[inline]
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
    #[inline]
    pub(crate) fn child(&self, name: &str) -> Ty<'a> {
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

    #[inline]
    pub(crate) fn item(&self) -> Ty<'a> {
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

    #[inline]
    pub(crate) fn list_kind(&self) -> Lk {
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

    #[inline]
    pub(crate) fn map_atomic(&self) -> bool {
        match self {
            Ty::AtomicMap => true,
            Ty::Custom(src, path) => src.map_atomic(path),
            _ => false,
        }
    }

    /// The default of a key field of this list-map's items.
    #[inline]
    pub(crate) fn key_default(&self, key: &str) -> Option<Value> {
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
    /// No type information: maps granular, lists atomic (a Scale).
    pub(crate) fn deduced() -> Schema {
        Schema {
            custom: None,
            root: None,
        }
    }

    /// A schema from custom list types.
    pub(crate) fn custom(src: Arc<dyn ListTypes>) -> Schema {
        Schema {
            custom: Some(src),
            root: None,
        }
    }

    /// The schema of a built-in kind.
    pub(crate) fn builtin(group: &str, kind: &str) -> Schema {
        Schema {
            custom: None,
            root: smp::root_type(group, kind),
        }
    }

    #[inline]
    pub(crate) fn root(&self) -> Ty<'_> {
        match (&self.custom, self.root) {
            (Some(src), _) => Ty::Custom(src.as_ref(), Vec::new()),
            (None, Some(td)) => Ty::Struct(td),
            (None, None) => Ty::Deduced,
        }
    }
}

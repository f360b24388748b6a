//! Compiled schemas: a JSON schema (a CRD version's `openAPIV3Schema`, or the
//! built-in definitions) turned once into a graph of nodes with parsed keywords and
//! compiled regular expressions, then used to validate, prune, default and find
//! unknown fields in objects.
//!
//! Semantics follow kube-apiserver: validation messages are those of kube-openapi's
//! validator as converted by apiextensions-apiserver; pruning, unknown-field paths
//! and defaulting follow apiextensions-apiserver's structural-schema algorithms.

pub(crate) mod cel;
mod format;
pub(crate) mod messages;
pub(crate) mod rules;
mod validate;
mod walk;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use regex::Regex;
use serde_json::Value;

use crate::builtin::{INT_OR_STRING, QUANTITY, builtins, ref_name};
use crate::{FieldError, ListType, SchemaError};

pub(crate) use format::Format;

/// Index of a node in a [`Graph`].
pub(crate) type NodeId = usize;

/// Bit set of JSON schema types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Types(u8);

impl Types {
    pub(crate) const OBJECT: Types = Types(1);
    pub(crate) const ARRAY: Types = Types(2);
    pub(crate) const STRING: Types = Types(4);
    pub(crate) const INTEGER: Types = Types(8);
    pub(crate) const NUMBER: Types = Types(16);
    pub(crate) const BOOLEAN: Types = Types(32);

    fn from_name(name: &str) -> Option<Types> {
        Some(match name {
            "object" => Types::OBJECT,
            "array" => Types::ARRAY,
            "string" => Types::STRING,
            "integer" => Types::INTEGER,
            "number" => Types::NUMBER,
            "boolean" => Types::BOOLEAN,
            _ => return None,
        })
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn contains(self, other: Types) -> bool {
        self.0 & other.0 != 0
    }

    fn union(self, other: Types) -> Types {
        Types(self.0 | other.0)
    }
}

/// `additionalProperties` of a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Additional {
    /// Not specified.
    #[default]
    Absent,
    /// `true` or `false`.
    Bool(bool),
    /// A schema.
    Schema(NodeId),
}

/// A compiled `pattern`.
#[derive(Debug)]
pub(crate) struct Pattern {
    pub(crate) source: String,
    pub(crate) regex: Regex,
}

/// One compiled schema node.
#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) types: Types,
    /// Type names as written, for messages (`integer,string` for int-or-string).
    pub(crate) type_label: String,
    pub(crate) nullable: bool,
    pub(crate) int_or_string: bool,
    pub(crate) preserve_unknown: bool,
    pub(crate) embedded: bool,
    pub(crate) format: Format,
    pub(crate) format_name: String,
    pub(crate) enum_values: Option<Vec<Value>>,
    pub(crate) minimum: Option<f64>,
    pub(crate) exclusive_minimum: bool,
    pub(crate) maximum: Option<f64>,
    pub(crate) exclusive_maximum: bool,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) min_length: Option<u64>,
    pub(crate) max_length: Option<u64>,
    pub(crate) pattern: Option<Pattern>,
    pub(crate) min_items: Option<u64>,
    pub(crate) max_items: Option<u64>,
    pub(crate) unique_items: bool,
    pub(crate) min_properties: Option<u64>,
    pub(crate) max_properties: Option<u64>,
    pub(crate) required: Vec<String>,
    pub(crate) properties: BTreeMap<String, NodeId>,
    pub(crate) additional: Additional,
    pub(crate) items: Option<NodeId>,
    pub(crate) default: Option<Value>,
    pub(crate) all_of: Vec<NodeId>,
    pub(crate) any_of: Vec<NodeId>,
    pub(crate) one_of: Vec<NodeId>,
    pub(crate) not: Option<NodeId>,
    /// `x-kubernetes-validations`, compiled (custom resources only).
    pub(crate) rules: Vec<cel::Rule>,
    /// `x-kubernetes-list-type` (and `-list-map-keys`), as written (custom
    /// resources only).
    pub(crate) list_type: Option<ListType>,
    /// `x-kubernetes-map-type: atomic`.
    pub(crate) map_atomic: bool,
    /// This node or one below it (properties, additionalProperties, items) has a
    /// `default`.
    pub(crate) defaults_below: bool,
    /// This node or one below it has rules or a `set`/`map` list type.
    pub(crate) rules_below: bool,
}

/// Where a node with `x-kubernetes-validations` is in the schema.
#[derive(Debug)]
pub(crate) struct RuleSite {
    pub(crate) node: NodeId,
    /// Schema path (`properties[spec].items`), `""` at the root.
    pub(crate) path: String,
    /// The schema path of the nearest enclosing array that is not a `map` list (or
    /// atomic map) when the node is below one: `oldSelf` can't be used there.
    pub(crate) uncorrelatable: Option<String>,
    /// The node is a resource root (the root, or an embedded resource).
    pub(crate) resource: bool,
    /// The rules as written.
    pub(crate) specs: Vec<cel::RuleSpec>,
}

/// A set of compiled nodes; refs between definitions are plain indices, so
/// recursive definitions (JSONSchemaProps) are fine.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<Node>,
    /// Nodes with `x-kubernetes-validations`, in schema order.
    pub(crate) sites: Vec<RuleSite>,
}

/// Compilation state.
struct Compiler<'a> {
    graph: Graph,
    /// Definition name → node, for `$ref`s (built-in definitions only).
    refs: Option<&'a HashMap<String, NodeId>>,
    /// Built-in semantics: objects without `properties`/`additionalProperties` are
    /// free-form (as Go's `runtime.RawExtension` or `FieldsV1` decode anything).
    builtin: bool,
    /// Inside `allOf`/`anyOf`/`oneOf`/`not`: extensions are not structural there.
    junctor: usize,
    /// See [`RuleSite::uncorrelatable`].
    uncorrelatable: Option<String>,
}

impl Graph {
    /// Compiles a set of named definitions referring to each other with
    /// `#/definitions/<name>`; returns the graph and each definition's node.
    pub(crate) fn compile_definitions(
        defs: &BTreeMap<String, Value>,
    ) -> Result<(Graph, HashMap<String, NodeId>), SchemaError> {
        let mut ids = HashMap::with_capacity(defs.len());
        let mut graph = Graph::default();
        for name in defs.keys() {
            ids.insert(name.clone(), graph.nodes.len());
            graph.nodes.push(Node::default());
        }
        let mut compiler = Compiler {
            graph,
            refs: Some(&ids),
            builtin: true,
            junctor: 0,
            uncorrelatable: None,
        };
        for (name, def) in defs {
            let Some(&id) = ids.get(name) else { continue };
            compiler.compile_into(id, def, name)?;
            let node = &mut compiler.graph.nodes[id];
            match name.as_str() {
                INT_OR_STRING => {
                    node.int_or_string = true;
                    node.types = Types::INTEGER.union(Types::STRING);
                    node.type_label = "integer,string".into();
                }
                QUANTITY => {
                    // Go accepts both `"100m"` and `0.5` for a Quantity.
                    node.int_or_string = false;
                    node.types = Types::STRING.union(Types::NUMBER).union(Types::INTEGER);
                    node.type_label = "string,number".into();
                    node.preserve_unknown = false;
                }
                _ => {}
            }
        }
        let mut graph = compiler.graph;
        graph.mark_subtrees();
        Ok((graph, ids))
    }

    /// Compiles one standalone schema (no `$ref`s); returns the graph and the root.
    /// `x-kubernetes-validations` rules are compiled too (a rule that doesn't
    /// compile is kept with its error: see [`rules::check_rules`]).
    fn compile_standalone(schema: &Value) -> Result<(Graph, NodeId), SchemaError> {
        let mut compiler = Compiler {
            graph: Graph::default(),
            refs: None,
            builtin: false,
            junctor: 0,
            uncorrelatable: None,
        };
        let root = compiler.node(schema, "")?;
        let mut graph = compiler.graph;
        if let Some(site) = graph.sites.iter_mut().find(|s| s.node == root) {
            site.resource = true;
        }
        rules::compile_rules(&mut graph, root);
        graph.mark_subtrees();
        Ok((graph, root))
    }

    /// Sets `defaults_below` and `rules_below` (a fixpoint: built-in definitions
    /// refer to each other in cycles).
    fn mark_subtrees(&mut self) {
        for n in &mut self.nodes {
            n.defaults_below = n.default.is_some();
            n.rules_below = !n.rules.is_empty()
                || matches!(n.list_type, Some(ListType::Set | ListType::Map(_)));
        }
        loop {
            let mut changed = false;
            for id in 0..self.nodes.len() {
                let n = &self.nodes[id];
                let children = n
                    .properties
                    .values()
                    .copied()
                    .chain(match n.additional {
                        Additional::Schema(a) => Some(a),
                        _ => None,
                    })
                    .chain(n.items);
                let (mut d, mut r) = (n.defaults_below, n.rules_below);
                for c in children {
                    d |= self.nodes[c].defaults_below;
                    r |= self.nodes[c].rules_below;
                }
                let n = &mut self.nodes[id];
                if (d, r) != (n.defaults_below, n.rules_below) {
                    n.defaults_below = d;
                    n.rules_below = r;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }
}

fn child_path(path: &str, suffix: &str) -> String {
    if path.is_empty() {
        suffix.trim_start_matches('.').to_owned()
    } else {
        format!("{path}{suffix}")
    }
}

impl Compiler<'_> {
    /// Compiles `v` into a new node (or, for a `$ref`, returns the target).
    fn node(&mut self, v: &Value, path: &str) -> Result<NodeId, SchemaError> {
        if let Some(reference) = v.get("$ref").and_then(Value::as_str)
            && let Some(refs) = self.refs
        {
            return refs.get(ref_name(reference)).copied().ok_or_else(|| {
                SchemaError::UnresolvedRef {
                    path: path.to_owned(),
                    reference: reference.to_owned(),
                }
            });
        }
        let id = self.graph.nodes.len();
        self.graph.nodes.push(Node::default());
        self.compile_into(id, v, path)?;
        Ok(id)
    }

    fn compile_into(&mut self, id: NodeId, v: &Value, path: &str) -> Result<(), SchemaError> {
        let map = match v {
            Value::Object(map) => map,
            // `true` accepts anything; `false` is not meaningful here.
            Value::Bool(true) => {
                self.graph.nodes[id].preserve_unknown = true;
                return Ok(());
            }
            _ => {
                return Err(SchemaError::NotAnObject {
                    path: path.to_owned(),
                });
            }
        };
        let mut node = Node::default();
        let invalid = |keyword: &'static str| SchemaError::InvalidKeyword {
            path: path.to_owned(),
            keyword,
        };
        let uint = |keyword: &'static str| -> Result<Option<u64>, SchemaError> {
            match map.get(keyword) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .or_else(|| {
                        v.as_f64()
                            .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                            .map(|f| f as u64)
                    })
                    .map(Some)
                    .ok_or_else(|| invalid(keyword)),
            }
        };
        let float = |keyword: &'static str| -> Result<Option<f64>, SchemaError> {
            match map.get(keyword) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| invalid(keyword)),
            }
        };
        let flag = |keyword: &'static str| map.get(keyword).and_then(Value::as_bool) == Some(true);

        match map.get("type") {
            Some(Value::String(t)) => {
                node.types = Types::from_name(t).unwrap_or_default();
                node.type_label = t.clone();
            }
            Some(Value::Array(ts)) => {
                let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
                for t in &names {
                    node.types = node.types.union(Types::from_name(t).unwrap_or_default());
                }
                node.type_label = names.join(",");
            }
            _ => {}
        }
        // Go's JSON decoding accepts `null` for any field of a built-in type.
        node.nullable = self.builtin || flag("nullable");
        node.int_or_string = flag("x-kubernetes-int-or-string");
        if node.int_or_string {
            node.types = Types::INTEGER.union(Types::STRING);
            node.type_label = "integer,string".into();
        }
        node.preserve_unknown = flag("x-kubernetes-preserve-unknown-fields");
        node.embedded = flag("x-kubernetes-embedded-resource");
        if let Some(f) = map.get("format").and_then(Value::as_str) {
            node.format = Format::parse(f);
            node.format_name = f.to_owned();
        }
        if let Some(e) = map.get("enum") {
            match e {
                Value::Array(values) => node.enum_values = Some(values.clone()),
                Value::Null => {}
                _ => return Err(invalid("enum")),
            }
        }
        node.minimum = float("minimum")?;
        node.maximum = float("maximum")?;
        node.exclusive_minimum = flag("exclusiveMinimum");
        node.exclusive_maximum = flag("exclusiveMaximum");
        node.multiple_of = float("multipleOf")?;
        node.min_length = uint("minLength")?;
        node.max_length = uint("maxLength")?;
        node.min_items = uint("minItems")?;
        node.max_items = uint("maxItems")?;
        node.unique_items = flag("uniqueItems");
        node.min_properties = uint("minProperties")?;
        node.max_properties = uint("maxProperties")?;
        if let Some(p) = map.get("pattern").and_then(Value::as_str) {
            let regex = Regex::new(p).map_err(|e| SchemaError::InvalidPattern {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
            node.pattern = Some(Pattern {
                source: p.to_owned(),
                regex,
            });
        }
        if let Some(Value::Array(req)) = map.get("required") {
            node.required = req
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
        }
        node.default = map.get("default").cloned();
        let extensions = !self.builtin && self.junctor == 0;
        if extensions {
            node.list_type = match map.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("atomic") => Some(ListType::Atomic),
                Some("set") => Some(ListType::Set),
                Some("map") => Some(ListType::Map(
                    map.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|keys| {
                            keys.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default(),
                )),
                _ => None,
            };
            node.map_atomic =
                map.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
            if let Some(Value::Array(list)) = map.get("x-kubernetes-validations")
                && !list.is_empty()
            {
                self.graph.sites.push(RuleSite {
                    node: id,
                    path: path.to_owned(),
                    uncorrelatable: self.uncorrelatable.clone(),
                    resource: node.embedded,
                    specs: list.iter().map(cel::RuleSpec::parse).collect(),
                });
            }
        }
        let saved_uncorrelatable = self.uncorrelatable.clone();

        if node.map_atomic && self.uncorrelatable.is_none() {
            self.uncorrelatable = Some(path.to_owned());
        }
        if let Some(Value::Object(props)) = map.get("properties") {
            for (name, schema) in props {
                let child =
                    self.node(schema, &child_path(path, &format!(".properties[{name}]")))?;
                node.properties.insert(name.clone(), child);
            }
        }
        match map.get("additionalProperties") {
            Some(Value::Bool(b)) => node.additional = Additional::Bool(*b),
            Some(schema @ Value::Object(_)) => {
                let child = self.node(schema, &child_path(path, ".additionalProperties"))?;
                node.additional = Additional::Schema(child);
            }
            _ => {}
        }
        self.uncorrelatable = saved_uncorrelatable.clone();
        if !matches!(node.list_type, Some(ListType::Map(_))) && self.uncorrelatable.is_none() {
            self.uncorrelatable = Some(path.to_owned());
        }
        match map.get("items") {
            Some(schema @ (Value::Object(_) | Value::Bool(true))) => {
                node.items = Some(self.node(schema, &child_path(path, ".items"))?);
            }
            // Tuple validation is not supported by Kubernetes; the first schema is the
            // best approximation.
            Some(Value::Array(schemas)) => {
                if let Some(first) = schemas.first() {
                    node.items = Some(self.node(first, &child_path(path, ".items[0]"))?);
                }
            }
            _ => {}
        }
        self.uncorrelatable = saved_uncorrelatable;
        self.junctor += 1;
        for (keyword, list) in [("allOf", 0), ("anyOf", 1), ("oneOf", 2)] {
            if let Some(Value::Array(schemas)) = map.get(keyword) {
                let mut ids = Vec::with_capacity(schemas.len());
                for (i, schema) in schemas.iter().enumerate() {
                    ids.push(self.node(schema, &child_path(path, &format!(".{keyword}[{i}]")))?);
                }
                match list {
                    0 => node.all_of = ids,
                    1 => node.any_of = ids,
                    _ => node.one_of = ids,
                }
            }
        }
        if let Some(schema @ Value::Object(_)) = map.get("not") {
            node.not = Some(self.node(schema, &child_path(path, ".not"))?);
        }
        self.junctor -= 1;

        if self.builtin
            && node.properties.is_empty()
            && node.additional == Additional::Absent
            && node.items.is_none()
            && (node.types.is_empty() || node.types == Types::OBJECT)
        {
            node.preserve_unknown = true;
        }
        self.graph.nodes[id] = node;
        Ok(())
    }
}

/// A compiled schema: validate, prune, default, find unknown fields.
///
/// Built once (per CRD version, or per built-in kind) and shared; all methods take
/// `&self` and allocate only for their results.
pub struct Validator {
    graph: Arc<Graph>,
    root: NodeId,
    /// Custom-resource semantics at the root: `apiVersion`, `kind` and `metadata`
    /// are implicit, and `metadata` is pruned/checked as an `ObjectMeta`.
    custom: bool,
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validator")
            .field("nodes", &self.graph.nodes.len())
            .field("custom", &self.custom)
            .finish_non_exhaustive()
    }
}

impl Validator {
    /// A validator for one built-in definition.
    pub(crate) fn builtin(graph: Arc<Graph>, root: NodeId) -> Validator {
        Validator {
            graph,
            root,
            custom: false,
        }
    }

    /// Compiles the `openAPIV3Schema` of a CRD version, including its
    /// `x-kubernetes-validations` CEL rules (once, here).
    ///
    /// This does not check that the schema is structural nor that its rules
    /// compile: use [`crate::check_structural`] when admitting the CRD. Fails only
    /// on schemas that cannot be used at all (a keyword of the wrong JSON type, an
    /// invalid `pattern`); a rule that doesn't compile is reported by
    /// [`Validator::validate`] as kube-apiserver does (`rule compile error: ...`).
    pub fn from_crd_schema(schema: &Value) -> Result<Validator, SchemaError> {
        let (graph, root) = Graph::compile_standalone(schema)?;
        Ok(Validator {
            graph: Arc::new(graph),
            root,
            custom: true,
        })
    }

    /// A validator for a sub-schema of a CRD schema (used to check `default`s);
    /// `resource` gives it resource-root semantics (an embedded resource).
    pub(crate) fn from_subschema(schema: &Value, resource: bool) -> Result<Validator, SchemaError> {
        let mut v = Validator::from_crd_schema(schema)?;
        v.custom = resource;
        Ok(v)
    }

    /// Validates a new object (a create) against the schema: type, format
    /// (int32/int64/float/double, byte, date-time, date, and a few string formats),
    /// required, enum, minimum/maximum/exclusive*, multipleOf, minLength/maxLength,
    /// pattern, minItems/maxItems/uniqueItems, minProperties/maxProperties,
    /// nullable, allOf/anyOf/oneOf/not, `x-kubernetes-int-or-string`,
    /// `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-embedded-resource`,
    /// additionalProperties and items; then the `x-kubernetes-list-type`
    /// invariants (`set` items and `map` keys unique: `Duplicate value: ...` at
    /// `path[i]`) and the `x-kubernetes-validations` rules (transition rules, those
    /// using `oldSelf`, are skipped on create unless `optionalOldSelf`). A failing
    /// rule gives kube-apiserver's cause, e.g. field `spec`, `FieldValueInvalid`,
    /// `Invalid value: "object": minReplicas must not exceed replicas` (field
    /// `<nil>` for a rule at the root). Rules don't run when the schema gave a
    /// blocking error (type, required, enum, too long, too many); the cause `<nil>:
    /// Invalid value: null: some validation rules were not checked because the
    /// object was invalid; ...` says so.
    ///
    /// For custom resources, `apiVersion`, `kind` and `metadata` at the root are only
    /// checked for their JSON type (and against the schema's own constraints on
    /// them, if it has any); the server validates metadata itself.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        self.validate_inner(obj, None)
    }

    /// Validates an update of `old` (the stored object) to `new`: as
    /// [`Validator::validate`], with `oldSelf` bound for transition rules wherever
    /// the old value can be correlated (through object properties and
    /// `additionalProperties` keys, unless `x-kubernetes-map-type: atomic`, and
    /// through the keys of `map` lists), and with rules not using `oldSelf`
    /// skipped where the value is unchanged (kube-apiserver's ratcheting).
    pub fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        self.validate_inner(new, Some(old))
    }

    fn validate_inner(&self, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut v = validate::Validation::new(&self.graph);
        v.root(self.root, new, self.custom);
        let mut errors = v.errors;
        if !self.custom || !self.graph.nodes[self.root].rules_below {
            return errors;
        }
        let blocking = errors.iter().any(|e| {
            matches!(
                e.reason,
                messages::NOT_SUPPORTED
                    | messages::REQUIRED
                    | messages::TOO_LONG
                    | messages::TOO_MANY
                    | messages::TYPE_INVALID
            )
        });
        let has_rules = !self.graph.sites.is_empty();
        let mut walk = rules::Walk::new(&self.graph, !blocking);
        let ratchet = old.is_some_and(|o| validate::json_eq(o, new));
        walk.node(self.root, new, old, &mut String::new(), ratchet, true);
        errors.extend(walk.list_errors);
        if blocking && has_rules {
            errors.push(messages::invalid(
                "<nil>",
                &Value::Null,
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        }
        errors.extend(walk.rule_errors);
        errors
    }

    /// Removes fields not in the schema (except under
    /// `x-kubernetes-preserve-unknown-fields`) and non-nullable `null`s that have no
    /// default, as kube-apiserver does when decoding a custom resource. Returns the
    /// paths of the removed unknown fields, sorted (`spec.foo`, `spec.items[0].bar`;
    /// kube-apiserver warns with `unknown field "spec.foo"`).
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut paths = Vec::new();
        walk::Walker::new(&self.graph, &mut paths).prune_root(self.root, obj, self.custom);
        paths.sort();
        paths
    }

    /// The fields [`Validator::prune`] would remove, without removing them (for
    /// `fieldValidation=Strict|Warn`). Sorted.
    pub fn unknown_fields(&self, obj: &Value) -> Vec<String> {
        let mut paths = Vec::new();
        walk::Walker::new(&self.graph, &mut paths).unknown_root(self.root, obj, self.custom);
        paths.sort();
        paths
    }

    /// Applies `default` values, as kube-apiserver does on create, update and read:
    /// a property's default is set when the property is missing (or a non-nullable
    /// `null`) and its parent object exists; defaults inside defaults apply too.
    /// Returns whether anything changed.
    ///
    /// Idempotent (a second call changes nothing and returns `false`), and cheap
    /// when the schema has no defaults (nothing is walked) or the object already
    /// has them (only the parts of the object whose schema has defaults below are
    /// walked, nothing is allocated).
    pub fn apply_defaults(&self, obj: &mut Value) -> bool {
        if self.graph.nodes[self.root].defaults_below {
            walk::default(&self.graph, self.root, obj)
        } else {
            false
        }
    }

    /// The `x-kubernetes-list-type` of the list at `path` (field names from the
    /// root; array items are traversed implicitly, so `["spec", "ports", "name"]`
    /// is `name` in the items of `spec.ports`), for server-side apply: the
    /// declared type, or [`ListType::Atomic`] for an array without one (as for
    /// custom resources in kube-apiserver). `None` if the path is not an array of
    /// the schema (unknown field, under `x-kubernetes-preserve-unknown-fields`,
    /// not an array), and always `None` for built-in kinds: k8s-openapi's schemas
    /// carry no list types (use the strategic-merge-patch metadata for those).
    pub fn list_type_at(&self, path: &[&str]) -> Option<ListType> {
        if !self.custom {
            return None;
        }
        let graph = &self.graph;
        let mut id = self.root;
        for name in path {
            // Array items are traversed implicitly.
            while let (Some(item), true) =
                (graph.nodes[id].items, graph.nodes[id].types == Types::ARRAY)
            {
                id = item;
            }
            let n = &graph.nodes[id];
            id = match (n.properties.get(*name), n.additional) {
                (Some(&c), _) => c,
                (None, Additional::Schema(a)) => a,
                _ => return None,
            };
        }
        let n = &graph.nodes[id];
        if n.types != Types::ARRAY {
            return None;
        }
        Some(n.list_type.clone().unwrap_or(ListType::Atomic))
    }
}

/// The `ObjectMeta` validator used for custom resources' `metadata`.
pub(crate) fn object_meta() -> Option<&'static Validator> {
    builtins().object_meta.as_deref()
}

//! The checks of a custom resource beyond its OpenAPI schema: the
//! `x-kubernetes-list-type` invariants (`set` items and `map` keys unique, as
//! apiextensions-apiserver's `listtype.ValidateListSetsAndMaps`), and the
//! `x-kubernetes-validations` CEL rules (`cel.Validator.Validate`, with `oldSelf`
//! correlated through object keys and `map` list keys, and ratcheting: a rule not
//! using `oldSelf` is skipped where the value is unchanged); plus the CRD-time
//! checks of the rules ([`check_rules`]).

use std::collections::HashMap;

use serde_json::Value;

use super::cel::{self, Compiled, Eval, Outcome, Rule, RuleProgram, Source};
use super::messages::{self as m, go_quote};
use super::validate::json_eq;
use super::{Additional, Graph, Node, NodeId};
use crate::{FieldError, ListType};

/// Longest message a `messageExpression` may give (kube-apiserver's limit).
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// Compiles the rules (and message expressions) of every rule site into its node.
pub(crate) fn compile_rules(graph: &mut Graph, root: NodeId) {
    let _ = root;
    let mut sources = Vec::new();
    // (site, rule, is a message expression)
    let mut index = Vec::new();
    for (si, site) in graph.sites.iter().enumerate() {
        for (ri, spec) in site.specs.iter().enumerate() {
            if !spec.rule.trim().is_empty() {
                sources.push(Source {
                    text: &spec.rule,
                    node: site.node,
                    resource: site.resource,
                    optional_old_self: spec.optional_old_self == Some(true),
                    message: false,
                });
                index.push((si, ri, false));
            }
            if !spec.message_expression.trim().is_empty() {
                sources.push(Source {
                    text: &spec.message_expression,
                    node: site.node,
                    resource: site.resource,
                    optional_old_self: false,
                    message: true,
                });
                index.push((si, ri, true));
            }
        }
    }
    let mut outcomes: Vec<Option<Outcome>> = cel::compile_all(graph, &sources)
        .into_iter()
        .map(Some)
        .collect();
    drop(sources);

    let mut compiled: Vec<(NodeId, Vec<Rule>)> = Vec::with_capacity(graph.sites.len());
    let mut k = 0;
    for (si, site) in graph.sites.iter().enumerate() {
        let mut rules = Vec::with_capacity(site.specs.len());
        for (ri, spec) in site.specs.iter().enumerate() {
            let mut rule = Rule {
                spec: spec.clone(),
                program: RuleProgram::Empty,
                message_program: None,
                field_path: if spec.field_path.trim().is_empty() {
                    None
                } else {
                    cel::field_path(graph, site.node, spec.field_path.trim())
                },
            };
            while k < index.len() && index[k].0 == si && index[k].1 == ri {
                let outcome = outcomes[k].take();
                if index[k].2 {
                    rule.message_program = match outcome {
                        Some(Outcome::Ok(c)) => Some(Ok(c)),
                        Some(Outcome::Error(e)) => Some(Err(e)),
                        Some(Outcome::Unsupported) | None => None,
                    };
                } else {
                    rule.program = match outcome {
                        Some(Outcome::Ok(c)) => RuleProgram::Ok(c),
                        Some(Outcome::Error(e)) => RuleProgram::Error(e),
                        Some(Outcome::Unsupported) => RuleProgram::Unsupported,
                        None => RuleProgram::Empty,
                    };
                }
                k += 1;
            }
            rules.push(rule);
        }
        compiled.push((site.node, rules));
    }
    for (node, rules) in compiled {
        graph.nodes[node].rules = rules;
    }
}

fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// Whether a string has a line break (CEL's newline characters).
fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// CRD-time checks of the `x-kubernetes-validations` of a CRD version's schema, as
/// kube-apiserver does them when a CRD is written: each rule must be non-empty and
/// compile (`compilation failed: ERROR: <input>:1:6: undefined field 'foo'`), give a
/// `bool`, use `oldSelf` only where old values can be correlated, and have a valid
/// `message`, `messageExpression`, `reason`, `fieldPath` and `optionalOldSelf`.
/// Fields are under `field_prefix` (e.g.
/// `spec.versions[0].schema.openAPIV3Schema`):
/// `...properties[spec].x-kubernetes-validations[0].rule`.
///
/// [`crate::check_structural`] includes these checks (for structural schemas);
/// this function is for callers that want them alone. A schema that doesn't
/// compile at all gives no errors here.
pub fn check_rules(schema: &Value, field_prefix: &str) -> Vec<FieldError> {
    let Ok((graph, _)) = Graph::compile_standalone(schema) else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    for site in &graph.sites {
        let base = join(field_prefix, &join(&site.path, "x-kubernetes-validations"));
        let node = &graph.nodes[site.node];
        let mut schema_errs = Vec::new();
        for (i, rule) in node.rules.iter().enumerate() {
            let p = |k: &str| format!("{base}[{i}].{k}");
            let spec = &rule.spec;
            if spec.malformed {
                schema_errs.push(m::invalid(
                    &format!("{base}[{i}]"),
                    &Value::Null,
                    "must be an object",
                ));
                continue;
            }
            let rule_src = spec.rule.trim();
            let msg = spec.message.trim();
            if rule_src.is_empty() {
                schema_errs.push(m::required_detail(&p("rule"), "rule is not specified"));
            } else if !spec.message.is_empty() && msg.is_empty() {
                schema_errs.push(m::invalid(
                    &p("message"),
                    &Value::String(spec.message.clone()),
                    "message must be non-empty if specified",
                ));
            } else if has_newlines(msg) {
                schema_errs.push(m::invalid(
                    &p("message"),
                    &Value::String(spec.message.clone()),
                    "message must not contain line breaks",
                ));
            } else if has_newlines(rule_src) && msg.is_empty() {
                schema_errs.push(m::required_detail(
                    &p("message"),
                    "message must be specified if rule contains line breaks",
                ));
            }
            if !spec.message_expression.is_empty() && spec.message_expression.trim().is_empty() {
                schema_errs.push(m::required_detail(
                    &p("messageExpression"),
                    "messageExpression must be non-empty if specified",
                ));
            }
            if let Some(reason) = &spec.reason
                && !cel::REASONS.contains(&reason.as_str())
            {
                let allowed: Vec<String> = cel::REASONS.iter().map(|s| (*s).to_owned()).collect();
                schema_errs.push(m::not_supported(
                    &p("reason"),
                    &Value::String(reason.clone()),
                    &allowed,
                ));
            }
            let fp = &spec.field_path;
            if !fp.is_empty() && fp.trim().is_empty() {
                schema_errs.push(m::invalid(
                    &p("fieldPath"),
                    &Value::String(fp.clone()),
                    "fieldPath must be non-empty if specified",
                ));
            }
            if has_newlines(fp) {
                schema_errs.push(m::invalid(
                    &p("fieldPath"),
                    &Value::String(fp.clone()),
                    "fieldPath must not contain line breaks",
                ));
            }
            if !fp.trim().is_empty() && rule.field_path.is_none() {
                schema_errs.push(m::invalid(
                    &p("fieldPath"),
                    &Value::String(fp.clone()),
                    "fieldPath must be a valid path",
                ));
            }
        }
        if !schema_errs.is_empty() {
            errs.extend(schema_errs);
            continue;
        }
        for (i, rule) in node.rules.iter().enumerate() {
            let p = |k: &str| format!("{base}[{i}].{k}");
            let spec = &rule.spec;
            let uses_old_self = match &rule.program {
                RuleProgram::Error(e) => {
                    errs.push(m::invalid_raw(&p("rule"), &spec.go_repr(), e));
                    false
                }
                RuleProgram::Ok(c) => c.uses_old_self,
                // Not enforced; its use of `oldSelf` is unknown.
                RuleProgram::Unsupported => spec.rule.contains("oldSelf"),
                RuleProgram::Empty => false,
            };
            if let Some(Err(e)) = &rule.message_program {
                errs.push(m::invalid_raw(&p("messageExpression"), &spec.go_repr(), e));
            }
            if uses_old_self {
                if let Some(u) = &site.uncorrelatable {
                    errs.push(m::invalid(
                        &p("rule"),
                        &Value::String(spec.rule.clone()),
                        &format!(
                            "oldSelf cannot be used on the uncorrelatable portion of the schema within {}",
                            join(field_prefix, u)
                        ),
                    ));
                }
            } else if let (Some(b), RuleProgram::Ok(_)) = (spec.optional_old_self, &rule.program) {
                errs.push(m::invalid(
                    &p("optionalOldSelf"),
                    &Value::Bool(b),
                    "may not be set if oldSelf is not used in rule",
                ));
            }
        }
    }
    errs
}

// ---------------------------------------------------------------------------
// Runtime.

/// One pass over an object (and its old version) for list types and rules.
pub(crate) struct Walk<'g> {
    graph: &'g Graph,
    /// Run the CEL rules (false when the object already has blocking errors).
    cel: bool,
    /// The cost limit was hit: no further rules run.
    stopped: bool,
    pub(crate) list_errors: Vec<FieldError>,
    pub(crate) rule_errors: Vec<FieldError>,
}

fn push_key(path: &mut String, key: &str) -> usize {
    let len = path.len();
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
    len
}

fn push_map_key(path: &mut String, key: &str) -> usize {
    let len = path.len();
    path.push('[');
    path.push_str(key);
    path.push(']');
    len
}

fn push_index(path: &mut String, i: usize) -> usize {
    let len = path.len();
    path.push('[');
    path.push_str(&i.to_string());
    path.push(']');
    len
}

/// A `map` list item's key tuple, as a string (absent keys differ from `null`).
fn map_key(item: &Value, keys: &[String]) -> String {
    let mut out = String::from("[");
    for k in keys {
        match item.get(k) {
            None => out.push_str("<unset>"),
            Some(v) => out.push_str(&serde_json::to_string(v).unwrap_or_default()),
        }
        out.push(',');
    }
    out.push(']');
    out
}

impl<'g> Walk<'g> {
    pub(crate) fn new(graph: &'g Graph, cel: bool) -> Self {
        Walk {
            graph,
            cel,
            stopped: false,
            list_errors: Vec::new(),
            rule_errors: Vec::new(),
        }
    }

    /// Walks `new` at node `id`; `old` is the correlated old value, `ratchet`
    /// whether the value is unchanged (rules not using `oldSelf` are skipped),
    /// `resource` whether the node is a resource root.
    pub(crate) fn node(
        &mut self,
        id: NodeId,
        new: &Value,
        old: Option<&Value>,
        path: &mut String,
        ratchet: bool,
        resource: bool,
    ) {
        let graph = self.graph;
        let n = &graph.nodes[id];
        if !n.rules_below || new.is_null() {
            return;
        }
        if self.cel && !self.stopped && !n.rules.is_empty() {
            self.rules(n, id, new, old, path, ratchet, resource);
        }
        match new {
            Value::Object(map) => {
                let old_map = if n.map_atomic {
                    None
                } else {
                    old.and_then(Value::as_object)
                };
                for (k, v) in map {
                    let (child, keyed) = match (n.properties.get(k), n.additional) {
                        (Some(&c), _) => (c, false),
                        (None, Additional::Schema(a)) => (a, true),
                        _ => continue,
                    };
                    if !graph.nodes[child].rules_below {
                        continue;
                    }
                    let old_v = old_map.and_then(|m| m.get(k));
                    let r = ratchet || old_v.is_some_and(|o| json_eq(o, v));
                    let len = if keyed {
                        push_map_key(path, k)
                    } else {
                        push_key(path, k)
                    };
                    self.node(child, v, old_v, path, r, graph.nodes[child].embedded);
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                self.list_type(n, items, path);
                let Some(item) = n.items else { return };
                if !graph.nodes[item].rules_below {
                    return;
                }
                let keys = match &n.list_type {
                    Some(ListType::Map(keys)) => Some(keys),
                    _ => None,
                };
                let old_items: HashMap<String, &Value> = match (keys, old) {
                    (Some(keys), Some(Value::Array(old))) => old
                        .iter()
                        .filter(|o| o.is_object())
                        .map(|o| (map_key(o, keys), o))
                        .collect(),
                    _ => HashMap::new(),
                };
                let embedded = graph.nodes[item].embedded;
                for (i, v) in items.iter().enumerate() {
                    let old_v = match keys {
                        Some(keys) if v.is_object() => old_items.get(&map_key(v, keys)).copied(),
                        _ => None,
                    };
                    let r = ratchet || old_v.is_some_and(|o| json_eq(o, v));
                    let len = push_index(path, i);
                    self.node(item, v, old_v, path, r, embedded);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// `set` items and `map` keys must be unique.
    fn list_type(&mut self, n: &Node, items: &[Value], path: &mut String) {
        match &n.list_type {
            Some(ListType::Set) => {
                for i in duplicates(
                    items
                        .iter()
                        .map(|v| serde_json::to_string(v).unwrap_or_default()),
                ) {
                    let len = push_index(path, i);
                    self.list_errors.push(duplicate(path, &items[i]));
                    path.truncate(len);
                }
            }
            Some(ListType::Map(keys)) => {
                if let Some((i, bad)) = items
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !v.is_object() && !v.is_null())
                {
                    let len = push_index(path, i);
                    self.list_errors.push(m::invalid(
                        path,
                        bad,
                        "must be an object for an array of list-type map",
                    ));
                    path.truncate(len);
                    return;
                }
                for i in duplicates(items.iter().map(|v| map_key(v, keys))) {
                    let mut key = serde_json::Map::new();
                    for k in keys {
                        if let Some(x) = items[i].get(k) {
                            key.insert(k.clone(), x.clone());
                        }
                    }
                    let len = push_index(path, i);
                    self.list_errors.push(duplicate(path, &Value::Object(key)));
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rules(
        &mut self,
        n: &Node,
        id: NodeId,
        new: &Value,
        old: Option<&Value>,
        path: &str,
        ratchet: bool,
        resource: bool,
    ) {
        let graph = self.graph;
        let field = if path.is_empty() { "<nil>" } else { path };
        let type_label = if n.int_or_string || n.type_label.contains(',') {
            ""
        } else {
            n.type_label.as_str()
        };
        let bad_type = go_quote(type_label);
        let mut size: Option<usize> = None;
        for rule in &n.rules {
            let spec = &rule.spec;
            let compiled = match &rule.program {
                RuleProgram::Ok(c) => c,
                RuleProgram::Error(e) => {
                    self.rule_errors.push(m::invalid_raw(
                        field,
                        &bad_type,
                        &format!("rule compile error: {e}"),
                    ));
                    continue;
                }
                RuleProgram::Empty | RuleProgram::Unsupported => continue,
            };
            let optional = spec.optional_old_self == Some(true);
            if compiled.uses_old_self && old.is_none() && !optional {
                continue;
            }
            if !compiled.uses_old_self && ratchet {
                continue;
            }
            let s = *size.get_or_insert_with(|| cel::size(new) + old.map_or(0, cel::size));
            if cel::estimate(&compiled.cost, s) > cel::COST_LIMIT {
                self.rule_errors.push(m::invalid_raw(
                    field,
                    &bad_type,
                    &format!(
                        "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                        spec.error_string()
                    ),
                ));
                self.stopped = true;
                return;
            }
            let bind_old = |optional: bool| {
                if !compiled.uses_old_self {
                    None
                } else if optional {
                    Some(cel::optional(
                        old.map(|o| cel::to_val(graph, Some(id), o, resource)),
                    ))
                } else {
                    old.map(|o| cel::to_val(graph, Some(id), o, resource))
                }
            };
            let outcome = cel::run(
                &compiled.program,
                cel::to_val(graph, Some(id), new, resource),
                bind_old(optional),
            );
            let rule_text = spec.error_string();
            let detail = match outcome {
                Eval::Value(::cel::Value::Bool(true)) => continue,
                Eval::Value(::cel::Value::Bool(false)) => None,
                Eval::Value(_) => Some(format!(
                    "cel expression must evaluate to a bool evaluating rule: {rule_text}"
                )),
                Eval::Error(e) if e == "no such overload" => Some(format!(
                    "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule_text}"
                )),
                Eval::Error(e) => Some(format!("{e} evaluating rule: {rule_text}")),
                Eval::Panic => Some(format!("internal error evaluating rule: {rule_text}")),
            };
            if let Some(detail) = detail {
                self.rule_errors
                    .push(m::invalid_raw(field, &bad_type, &detail));
                continue;
            }

            // The rule evaluated to false.
            let mut message = None;
            if let Some(Ok(mp)) = &rule.message_program {
                message = self.message(mp, graph, id, new, old, resource, s);
            }
            let detail = message.unwrap_or_else(|| {
                let msg = spec.message.trim();
                if msg.is_empty() {
                    format!("failed rule: {}", spec.rule.trim())
                } else {
                    msg.to_owned()
                }
            });
            let at = match &rule.field_path {
                Some(fp) if path.is_empty() => fp.clone(),
                Some(fp) if fp.starts_with('[') => format!("{path}{fp}"),
                Some(fp) => format!("{path}.{fp}"),
                None => field.to_owned(),
            };
            self.rule_errors.push(match spec.reason.as_deref() {
                Some("FieldValueForbidden") => m::forbidden(&at, &detail),
                Some("FieldValueRequired") => m::required_detail(&at, &detail),
                Some("FieldValueDuplicate") => FieldError {
                    field: at,
                    reason: "FieldValueDuplicate",
                    message: format!("Duplicate value: {bad_type}"),
                },
                _ => m::invalid_raw(&at, &bad_type, &detail),
            });
        }
    }

    /// Evaluates a `messageExpression`; `None` when it fails or gives an unusable
    /// message (kube-apiserver then uses `message`).
    #[allow(clippy::too_many_arguments)]
    fn message(
        &self,
        mp: &Compiled,
        graph: &Graph,
        id: NodeId,
        new: &Value,
        old: Option<&Value>,
        resource: bool,
        size: usize,
    ) -> Option<String> {
        if cel::estimate(&mp.cost, size) > cel::COST_LIMIT {
            return None;
        }
        if mp.uses_old_self && old.is_none() {
            return None;
        }
        let old_val = if mp.uses_old_self {
            old.map(|o| cel::to_val(graph, Some(id), o, resource))
        } else {
            None
        };
        match cel::run(
            &mp.program,
            cel::to_val(graph, Some(id), new, resource),
            old_val,
        ) {
            Eval::Value(::cel::Value::String(s)) => {
                let t = s.trim();
                (!t.is_empty() && t.len() <= MAX_MESSAGE_BYTES && !t.contains('\n'))
                    .then(|| t.to_owned())
            }
            _ => None,
        }
    }
}

/// The index of the second occurrence of each value seen more than once.
fn duplicates(keys: impl Iterator<Item = String>) -> Vec<usize> {
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut out = Vec::new();
    for (i, k) in keys.enumerate() {
        let count = seen.entry(k).or_insert(0);
        *count += 1;
        if *count == 2 {
            out.push(i);
        }
    }
    out
}

/// `field.Duplicate`.
fn duplicate(path: &str, value: &Value) -> FieldError {
    FieldError {
        field: path.to_owned(),
        reason: "FieldValueDuplicate",
        message: format!("Duplicate value: {}", m::bad_value(value)),
    }
}

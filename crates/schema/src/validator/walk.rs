//! Pruning, unknown-field detection and defaulting, following
//! apiextensions-apiserver's structural algorithms (`pruning.Prune`,
//! `PruneNonNullableNullsWithoutDefaults`, `defaulting.Default`).

use serde_json::Value;

use super::{Additional, Graph, NodeId, object_meta};

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn is_meta(key: &str) -> bool {
    META_FIELDS.contains(&key)
}

/// Walks an object along a schema, recording unknown field paths.
pub(crate) struct Walker<'a> {
    graph: &'a Graph,
    paths: &'a mut Vec<String>,
    path: String,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(graph: &'a Graph, paths: &'a mut Vec<String>) -> Self {
        Walker {
            graph,
            paths,
            path: String::new(),
        }
    }

    fn push_key(&mut self, key: &str) -> usize {
        let len = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(key);
        len
    }

    fn push_index(&mut self, i: usize) -> usize {
        let len = self.path.len();
        self.path.push('[');
        self.path.push_str(&i.to_string());
        self.path.push(']');
        len
    }

    fn record(&mut self, key: &str) {
        let len = self.push_key(key);
        self.paths.push(self.path.clone());
        self.path.truncate(len);
    }

    /// Whether `v` is a `null` the schema neither allows nor defaults.
    fn droppable_null(&self, id: Option<NodeId>, v: &Value) -> bool {
        v.is_null()
            && id.is_some_and(|id| {
                let n = &self.graph.nodes[id];
                !n.nullable && n.default.is_none()
            })
    }

    /// Prunes `metadata` of a resource as an `ObjectMeta`.
    fn prune_meta(&mut self, v: &mut Value) {
        let Some(meta) = object_meta() else { return };
        let len = self.push_key("metadata");
        let mut sub = Walker {
            graph: &meta.graph,
            paths: self.paths,
            path: std::mem::take(&mut self.path),
        };
        sub.prune(Some(meta.root), v, false);
        self.path = sub.path;
        self.path.truncate(len);
    }

    fn unknown_meta(&mut self, v: &Value) {
        let Some(meta) = object_meta() else { return };
        let len = self.push_key("metadata");
        let mut sub = Walker {
            graph: &meta.graph,
            paths: self.paths,
            path: std::mem::take(&mut self.path),
        };
        sub.unknown(Some(meta.root), v, false);
        self.path = sub.path;
        self.path.truncate(len);
    }

    pub(crate) fn prune_root(&mut self, root: NodeId, obj: &mut Value, custom: bool) {
        self.prune(Some(root), obj, custom);
    }

    pub(crate) fn unknown_root(&mut self, root: NodeId, obj: &Value, custom: bool) {
        self.unknown(Some(root), obj, custom);
    }

    /// `pruning.prune` plus null pruning; `resource` treats the value as a resource
    /// (implicit `apiVersion`/`kind`/`metadata`).
    fn prune(&mut self, id: Option<NodeId>, x: &mut Value, resource: bool) {
        let graph = self.graph;
        let node = id.map(|id| &graph.nodes[id]);
        if let Some(n) = node
            && n.preserve_unknown
        {
            self.skip_prune(id, x, resource);
            return;
        }
        let embedded = resource || node.is_some_and(|n| n.embedded);
        match x {
            Value::Object(map) => {
                let Some(n) = node else {
                    for key in map.keys() {
                        let key = key.clone();
                        self.record(&key);
                    }
                    map.clear();
                    return;
                };
                map.retain(|key, value| {
                    if embedded && is_meta(key) {
                        if key == "metadata" {
                            self.prune_meta(value);
                        }
                        return true;
                    }
                    let child = match (n.properties.get(key), n.additional) {
                        (Some(&child), _) => Some(child),
                        (None, Additional::Schema(child)) => Some(child),
                        (None, Additional::Bool(_)) => None,
                        (None, Additional::Absent) => {
                            if !is_meta(key) || !self.path.is_empty() {
                                self.record(key);
                            }
                            return false;
                        }
                    };
                    if self.droppable_null(child, value) {
                        return false;
                    }
                    let len = self.push_key(key);
                    self.prune(child, value, false);
                    self.path.truncate(len);
                    true
                });
            }
            Value::Array(items) => {
                let item = node.and_then(|n| n.items);
                for (i, v) in items.iter_mut().enumerate() {
                    let len = self.push_index(i);
                    self.prune(item, v, false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// `pruning.skipPrune`: keeps unknown fields, prunes below known ones.
    fn skip_prune(&mut self, id: Option<NodeId>, x: &mut Value, resource: bool) {
        let Some(id) = id else { return };
        let graph = self.graph;
        let n = &graph.nodes[id];
        let embedded = resource || n.embedded;
        match x {
            Value::Object(map) => {
                map.retain(|key, value| {
                    if embedded && is_meta(key) {
                        if key == "metadata" {
                            self.prune_meta(value);
                        }
                        return true;
                    }
                    let child = match (n.properties.get(key), n.additional) {
                        (Some(&child), _) => Some(child),
                        (None, Additional::Schema(child)) => Some(child),
                        (None, Additional::Bool(_)) => None,
                        (None, Additional::Absent) => return true,
                    };
                    if self.droppable_null(child, value) {
                        return false;
                    }
                    let len = self.push_key(key);
                    self.prune(child, value, false);
                    self.path.truncate(len);
                    true
                });
            }
            Value::Array(items) => {
                for (i, v) in items.iter_mut().enumerate() {
                    let len = self.push_index(i);
                    self.skip_prune(n.items, v, false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// Like [`Walker::prune`], recording without removing.
    fn unknown(&mut self, id: Option<NodeId>, x: &Value, resource: bool) {
        let graph = self.graph;
        let node = id.map(|id| &graph.nodes[id]);
        if let Some(n) = node
            && n.preserve_unknown
        {
            self.skip_unknown(id, x, resource);
            return;
        }
        let embedded = resource || node.is_some_and(|n| n.embedded);
        match x {
            Value::Object(map) => {
                let Some(n) = node else {
                    for key in map.keys() {
                        self.record(key);
                    }
                    return;
                };
                for (key, value) in map {
                    if embedded && is_meta(key) {
                        if key == "metadata" {
                            self.unknown_meta(value);
                        }
                        continue;
                    }
                    let child = match (n.properties.get(key), n.additional) {
                        (Some(&child), _) => Some(child),
                        (None, Additional::Schema(child)) => Some(child),
                        (None, Additional::Bool(_)) => None,
                        (None, Additional::Absent) => {
                            if !is_meta(key) || !self.path.is_empty() {
                                self.record(key);
                            }
                            continue;
                        }
                    };
                    let len = self.push_key(key);
                    self.unknown(child, value, false);
                    self.path.truncate(len);
                }
            }
            Value::Array(items) => {
                let item = node.and_then(|n| n.items);
                for (i, v) in items.iter().enumerate() {
                    let len = self.push_index(i);
                    self.unknown(item, v, false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }

    fn skip_unknown(&mut self, id: Option<NodeId>, x: &Value, resource: bool) {
        let Some(id) = id else { return };
        let graph = self.graph;
        let n = &graph.nodes[id];
        let embedded = resource || n.embedded;
        match x {
            Value::Object(map) => {
                for (key, value) in map {
                    if embedded && is_meta(key) {
                        if key == "metadata" {
                            self.unknown_meta(value);
                        }
                        continue;
                    }
                    let child = match (n.properties.get(key), n.additional) {
                        (Some(&child), _) => Some(child),
                        (None, Additional::Schema(child)) => Some(child),
                        (None, Additional::Bool(_)) => None,
                        (None, Additional::Absent) => continue,
                    };
                    let len = self.push_key(key);
                    self.unknown(child, value, false);
                    self.path.truncate(len);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    let len = self.push_index(i);
                    self.skip_unknown(n.items, v, false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// `defaulting.Default`; returns whether anything changed. Only descends where
/// the schema has defaults below (`defaults_below`).
pub(crate) fn default(graph: &Graph, id: NodeId, x: &mut Value) -> bool {
    let n = &graph.nodes[id];
    if !n.defaults_below {
        return false;
    }
    let mut changed = false;
    match x {
        Value::Object(map) => {
            for (key, &pid) in &n.properties {
                let p = &graph.nodes[pid];
                let Some(d) = &p.default else { continue };
                match map.get_mut(key) {
                    None => {
                        map.insert(key.clone(), d.clone());
                        changed = true;
                    }
                    Some(v) if v.is_null() && !p.nullable => {
                        *v = d.clone();
                        changed = true;
                    }
                    Some(_) => {}
                }
            }
            match n.additional {
                Additional::Schema(a) if graph.nodes[a].defaults_below => {
                    let an = &graph.nodes[a];
                    for (key, v) in map.iter_mut() {
                        if let Some(&pid) = n.properties.get(key) {
                            changed |= default(graph, pid, v);
                            continue;
                        }
                        if v.is_null()
                            && !an.nullable
                            && let Some(d) = &an.default
                        {
                            *v = d.clone();
                            changed = true;
                        }
                        changed |= default(graph, a, v);
                    }
                }
                _ => {
                    for (key, &pid) in &n.properties {
                        if graph.nodes[pid].defaults_below
                            && let Some(v) = map.get_mut(key)
                        {
                            changed |= default(graph, pid, v);
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = n.items {
                let itn = &graph.nodes[item];
                for v in items.iter_mut() {
                    if v.is_null()
                        && !itn.nullable
                        && let Some(d) = &itn.default
                    {
                        *v = d.clone();
                        changed = true;
                    }
                    changed |= default(graph, item, v);
                }
            }
        }
        _ => {}
    }
    changed
}

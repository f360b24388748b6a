//! Decoding only the fields a watch's selectors read.
//!
//! A watch with a label or field selector (the node simulator's
//! `spec.nodeName!=`, a kubelet's `spec.nodeName=<node>`) decides for every
//! event whether the object — and the one it replaced — is selected.
//! Decoding each whole object into a `Value` for that allocates every
//! string, list and map of a pod only to read one or two fields. A
//! [`Projection`] names the paths the selectors read; [`Projection::decode`]
//! parses the object once, keeping those paths and skipping the rest
//! without allocating. Selector matching on the result equals matching on
//! the whole object: kept paths hold the same values, and a path through a
//! non-object reads as missing either way.

use std::collections::BTreeMap;
use std::fmt;

use kubeforge_apimachinery::{fields::FieldSelector, labels::Selector};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The object paths to keep, as a tree of field names.
#[derive(Debug, Default, Clone)]
pub(crate) struct Projection {
    children: BTreeMap<String, Projection>,
    /// Keep the whole value here.
    whole: bool,
}

impl Projection {
    /// The paths `labels` and `fields` read: `metadata.labels` and each
    /// field requirement's path.
    pub(crate) fn for_selectors(labels: &Selector, fields: &FieldSelector) -> Projection {
        let mut p = Projection::default();
        if !labels.is_everything() {
            p.add("metadata.labels");
        }
        for r in fields.requirements() {
            p.add(&r.field);
        }
        p
    }

    fn add(&mut self, path: &str) {
        let mut at = self;
        for segment in path.split('.') {
            if at.whole {
                return;
            }
            at = at.children.entry(segment.to_string()).or_default();
        }
        at.whole = true;
        at.children.clear();
    }

    /// The object in `bytes` with only the projected paths; `None` when it
    /// is not valid JSON.
    pub(crate) fn decode(&self, bytes: &[u8]) -> Option<Value> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let v = self.deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some(v)
    }
}

impl<'de> DeserializeSeed<'de> for &Projection {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.whole {
            return serde::Deserialize::deserialize(d);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &Projection {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    // Anything but an object on the way to a kept path reads as missing.
    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Null)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.children.get(key.as_ref()) {
                Some(child) => {
                    let v = map.next_value_seed(child)?;
                    out.insert(key.into_owned(), v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rest::matches;
    use serde_json::json;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "fe"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:nodeName": {}}}}],
                "annotations": {"spec.nodeName": "n9"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}], "hostNetwork": true,
                "priority": 5},
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}], "podIP": null}})
    }

    /// Over many selectors, matching the projection equals matching the
    /// whole object, and only the asked paths are kept.
    #[test]
    fn matching_the_projection_equals_matching_the_object() {
        let obj = pod();
        let bytes = serde_json::to_vec(&obj).unwrap();
        let odd = json!({"metadata": "not an object", "spec": [1, 2], "status": {"phase": {"nested": 1}}});
        let odd_bytes = serde_json::to_vec(&odd).unwrap();
        let pods = crate::registry::Registry::with_builtins()
            .get("", "v1", "pods")
            .unwrap();
        let cases = [
            ("", "spec.nodeName!="),
            ("", "spec.nodeName=n1"),
            ("", "spec.nodeName=n2"),
            ("", "spec.hostNetwork=true"),
            ("", "spec.priority=5"),
            ("", "status.phase=Running,metadata.name=p"),
            ("", "status.podIP="),
            ("", "status.conditions="),
            ("", "spec.missing.deeper=x"),
            ("", "metadata.namespace!=ns"),
            ("app=web", ""),
            ("app in (db),tier", ""),
            ("!tier", "spec.nodeName=n1"),
            ("app=web", "status.phase!=Pending"),
        ];
        for (l, f) in cases {
            let labels = Selector::parse(l).unwrap();
            let fields = FieldSelector::parse(f).unwrap();
            let p = Projection::for_selectors(&labels, &fields);
            for (whole, raw) in [(&obj, &bytes), (&odd, &odd_bytes)] {
                let projected = p.decode(raw).unwrap();
                assert_eq!(
                    matches(&pods, &projected, &labels, &fields),
                    matches(&pods, whole, &labels, &fields),
                    "{l:?} {f:?} on {whole}"
                );
            }
        }
        let p = Projection::for_selectors(
            &Selector::parse("app").unwrap(),
            &FieldSelector::parse("spec.nodeName!=").unwrap(),
        );
        assert_eq!(
            p.decode(&bytes).unwrap(),
            json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}, "spec": {"nodeName": "n1"}})
        );
    }

    #[test]
    fn invalid_json_is_none() {
        let p = Projection::for_selectors(
            &Selector::parse("").unwrap(),
            &FieldSelector::parse("spec.nodeName=a").unwrap(),
        );
        assert!(p.decode(b"{\"spec\": {").is_none());
        assert!(p.decode(b"{} trailing").is_none());
    }
}

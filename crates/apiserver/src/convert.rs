//! The form a resource is served in versus the form it is stored in.
//!
//! Most rows store what they serve. Two cases differ:
//! - `events.k8s.io/v1` Events live in the same storage as core/v1 Events
//!   (stored in the core form), so `kubectl describe`, which reads core/v1,
//!   sees the events that kube-runtime's `Recorder` writes through
//!   events.k8s.io/v1 — as kube-apiserver does;
//! - custom resources served in a version other than the storage version
//!   (`conversion: None`: only `apiVersion` changes).

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::registry::ResourceDef;

/// A served form stored in another resource's storage.
#[derive(Debug)]
pub struct Conversion {
    /// Group of the storage resource ("" = core).
    pub storage_group: &'static str,
    /// Plural of the storage resource.
    pub storage_plural: &'static str,
    /// Served form → stored form.
    pub to_storage: fn(Value) -> Value,
    /// Stored form → served form.
    pub from_storage: fn(Value) -> Value,
}

/// events.k8s.io/v1 Events, stored as core/v1 Events.
pub static EVENTS_V1: Conversion = Conversion {
    storage_group: "",
    storage_plural: "events",
    to_storage: event_v1_to_core,
    from_storage: event_core_to_v1,
};

/// (events.k8s.io/v1 field, core/v1 field) pairs.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("metadata", "metadata"),
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(v: Value, api_version: &str, from_v1: bool) -> Value {
    let Value::Object(mut m) = v else { return v };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    for (v1, core) in EVENT_FIELDS {
        let (src, dst) = if from_v1 { (v1, core) } else { (core, v1) };
        if let Some(x) = m.remove(*src) {
            out.insert((*dst).to_string(), x);
        }
    }
    Value::Object(out)
}

fn event_v1_to_core(v: Value) -> Value {
    rename(v, "v1", true)
}

fn event_core_to_v1(v: Value) -> Value {
    rename(v, "events.k8s.io/v1", false)
}

impl ResourceDef {
    /// Whether stored objects may differ from what is served (conversion,
    /// or defaults applied on read).
    pub(crate) fn reshapes(&self) -> bool {
        self.converts() || self.custom.as_ref().is_some_and(|c| c.validator.is_some())
    }

    /// Whether stored objects need converting before they are served.
    pub fn converts(&self) -> bool {
        self.conversion.is_some()
            || self
                .custom
                .as_ref()
                .is_some_and(|c| c.storage_version != self.version)
    }

    /// A stored object in the served form (custom resources also get their
    /// schema's defaults, which kube-apiserver applies on read).
    pub fn from_storage(&self, v: Value) -> Value {
        self.reshape(v).0
    }

    /// `from_storage`, also saying whether the object changed (so callers
    /// re-encode only then).
    fn reshape(&self, v: Value) -> (Value, bool) {
        if let Some(c) = self.conversion {
            return ((c.from_storage)(v), true);
        }
        let mut v = v;
        let mut changed = false;
        if self.converts() && v.is_object() {
            v["apiVersion"] = json!(self.api_version());
            changed = true;
        }
        if let Some(validator) = self.custom.as_ref().and_then(|c| c.validator.as_ref()) {
            changed |= validator.apply_defaults(&mut v);
        }
        (v, changed)
    }

    /// A served-form object in the stored form.
    pub fn to_storage(&self, v: Value) -> Value {
        if let Some(c) = self.conversion {
            return (c.to_storage)(v);
        }
        let mut v = v;
        if let Some(c) = self
            .custom
            .as_ref()
            .filter(|c| c.storage_version != self.version)
            && v.is_object()
        {
            v["apiVersion"] = json!(format!("{}/{}", self.group, c.storage_version));
        }
        v
    }

    /// Parse stored bytes into the served form.
    pub fn decode_stored(&self, bytes: &[u8]) -> Option<Value> {
        serde_json::from_slice(bytes)
            .ok()
            .map(|v| self.from_storage(v))
    }

    /// [`present`](Self::present), then without `metadata.managedFields`
    /// when the client asked to omit them (see
    /// [`OMIT_MANAGED_FIELDS`](crate::codec::OMIT_MANAGED_FIELDS)).
    pub fn present_to(&self, bytes: &Bytes, omit_managed_fields: bool) -> Bytes {
        let served = self.present(bytes);
        if omit_managed_fields {
            return crate::object::without_managed_fields(&served);
        }
        served
    }

    /// Stored bytes re-encoded in the served form (the same bytes when no
    /// conversion applies).
    pub fn present(&self, bytes: &Bytes) -> Bytes {
        if !self.reshapes() {
            return bytes.clone();
        }
        let Ok(stored) = serde_json::from_slice::<Value>(bytes) else {
            return bytes.clone();
        };
        match self.reshape(stored) {
            (served, true) => Bytes::from(crate::object::to_json(&served)),
            (_, false) => bytes.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "Started", "type": "Normal",
            "reportingController": "ctl", "reportingInstance": "ctl-1", "eventTime": "2026-01-01T00:00:00.000000Z", "action": "Start"});
        let core = event_v1_to_core(v1.clone());
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "ctl");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(event_core_to_v1(core), v1);
    }
}

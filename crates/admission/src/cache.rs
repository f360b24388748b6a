//! The policy cache: the cluster's `AdmissionPolicy` objects as a watch
//! reports them, each compiled, and what is in effect. It is rebuilt on
//! every watch event — `Init`…`InitDone` (a relist replaces everything at
//! once, so a policy deleted meanwhile goes), `Apply` and `Delete` — and
//! reports [`PolicyCache::synced`] only after the first complete list, so
//! the server answers no review from a partial view.
//!
//! A policy whose current spec does not compile keeps its last valid
//! version in effect: the one compiled earlier in this process, else the
//! one recorded in `status.effective` (so a restart does not drop it).

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use crate::policy::{
    AdmissionPolicy, AdmissionPolicySpec, CompiledPolicy, EffectiveVersion, PolicyCondition,
    compile,
};

/// One policy as last seen.
struct Entry {
    policy: AdmissionPolicy,
    /// What is enforced: (generation, spec JSON, compiled).
    effective: Option<(Option<i64>, String, Arc<CompiledPolicy>)>,
    /// Why the current spec does not compile.
    error: Option<String>,
}

/// The status a policy should report.
#[derive(Clone, Debug, PartialEq)]
pub struct WantedStatus {
    /// Its `Ready` condition.
    pub condition: PolicyCondition,
    /// Its `status.effective`.
    pub effective: Option<EffectiveVersion>,
}

/// The compiled policies, fed by watch events.
#[derive(Default)]
pub struct PolicyCache {
    known: BTreeMap<String, Entry>,
    /// Objects of a relist in progress (`Init` until `InitDone`).
    relist: Option<Vec<AdmissionPolicy>>,
    synced: bool,
}

/// What one event changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changed {
    /// The policies in effect changed: hand [`PolicyCache::effective`] to the engine.
    pub policies: bool,
    /// Policies whose status may need writing.
    pub statuses: Vec<String>,
}

impl PolicyCache {
    /// Whether a complete list has been seen.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// Apply one watch event.
    pub fn apply(&mut self, ev: Event<AdmissionPolicy>) -> Changed {
        match ev {
            Event::Init => {
                self.relist = Some(Vec::new());
                Changed::default()
            }
            Event::InitApply(p) => {
                self.relist.get_or_insert_with(Vec::new).push(p);
                Changed::default()
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let mut old = std::mem::take(&mut self.known);
                let mut statuses = Vec::new();
                for p in listed {
                    let name = p.name_any();
                    let prev = old.remove(&name);
                    self.known.insert(name.clone(), entry(p, prev));
                    statuses.push(name);
                }
                self.synced = true;
                Changed {
                    policies: true,
                    statuses,
                }
            }
            Event::Apply(p) => {
                let name = p.name_any();
                let prev = self.known.remove(&name);
                self.known.insert(name.clone(), entry(p, prev));
                Changed {
                    policies: true,
                    statuses: vec![name],
                }
            }
            Event::Delete(p) => {
                let gone = self.known.remove(&p.name_any()).is_some();
                Changed {
                    policies: gone,
                    statuses: Vec::new(),
                }
            }
        }
    }

    /// The policies in effect, in name order.
    pub fn effective(&self) -> Vec<Arc<CompiledPolicy>> {
        self.known
            .values()
            .filter_map(|e| e.effective.as_ref().map(|(_, _, c)| c.clone()))
            .collect()
    }

    /// The policy object last seen under `name`.
    pub fn policy(&self, name: &str) -> Option<&AdmissionPolicy> {
        self.known.get(name).map(|e| &e.policy)
    }

    /// The status `name` should report, if it is known.
    pub fn wanted_status(&self, name: &str) -> Option<WantedStatus> {
        let e = self.known.get(name)?;
        let generation = e.policy.metadata.generation;
        let effective = e.effective.as_ref().map(|(g, spec, _)| EffectiveVersion {
            generation: *g,
            spec: spec.clone(),
        });
        let condition = match &e.error {
            None => PolicyCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Compiled".into(),
                message: "the policy is in effect".into(),
                observed_generation: generation,
            },
            Some(err) => {
                let message = match &e.effective {
                    Some((Some(g), _, _)) => {
                        format!("{err}; the last valid version (generation {g}) stays in effect")
                    }
                    Some((None, _, _)) => format!("{err}; the last valid version stays in effect"),
                    None => format!("{err}; the policy is not in effect"),
                };
                PolicyCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    reason: "InvalidPolicy".into(),
                    message,
                    observed_generation: generation,
                }
            }
        };
        Some(WantedStatus {
            condition,
            effective,
        })
    }
}

/// Compile `p`; when it does not compile, keep `prev`'s effective version
/// (same object only), else the one its status records.
fn entry(p: AdmissionPolicy, prev: Option<Entry>) -> Entry {
    let name = p.name_any();
    let generation = p.metadata.generation;
    match compile(&name, &p.spec) {
        Ok(c) => {
            let spec = serde_json::to_string(&p.spec).unwrap_or_default();
            Entry {
                policy: p,
                effective: Some((generation, spec, Arc::new(c))),
                error: None,
            }
        }
        Err(e) => {
            let same_object = |q: &AdmissionPolicy| q.metadata.uid == p.metadata.uid;
            let kept = prev
                .filter(|prev| same_object(&prev.policy))
                .and_then(|prev| prev.effective)
                .or_else(|| recorded(&name, &p));
            Entry {
                policy: p,
                effective: kept,
                error: Some(e.to_string()),
            }
        }
    }
}

/// The version recorded in `status.effective`, if it still compiles.
fn recorded(name: &str, p: &AdmissionPolicy) -> Option<(Option<i64>, String, Arc<CompiledPolicy>)> {
    let v = p.status.as_ref()?.effective.as_ref()?;
    let spec: AdmissionPolicySpec = serde_json::from_str(&v.spec).ok()?;
    let c = compile(name, &spec).ok()?;
    Some((v.generation, v.spec.clone(), Arc::new(c)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(name: &str, uid: &str, generation: i64, spec: serde_json::Value) -> AdmissionPolicy {
        serde_json::from_value(json!({
            "apiVersion": "policy.kubeforge.dev/v1alpha1", "kind": "AdmissionPolicy",
            "metadata": {"name": name, "uid": uid, "generation": generation}, "spec": spec}))
        .expect("policy")
    }

    fn names(c: &PolicyCache) -> Vec<String> {
        c.effective().iter().map(|p| p.name.clone()).collect()
    }

    const BAD: &str = "https://docker.io";

    #[test]
    fn synced_only_after_the_whole_list() {
        let mut c = PolicyCache::default();
        c.apply(Event::Init);
        c.apply(Event::InitApply(policy(
            "a",
            "1",
            1,
            json!({"requireResources": {}}),
        )));
        assert!(!c.synced());
        assert!(c.effective().is_empty(), "nothing before InitDone");
        let ch = c.apply(Event::InitDone);
        assert!(c.synced() && ch.policies);
        assert_eq!(names(&c), ["a"]);
    }

    #[test]
    fn delete_and_relist_drop_policies() {
        let mut c = PolicyCache::default();
        c.apply(Event::Init);
        c.apply(Event::InitApply(policy("a", "1", 1, json!({}))));
        c.apply(Event::InitApply(policy("b", "2", 1, json!({}))));
        c.apply(Event::InitDone);
        c.apply(Event::Delete(policy("a", "1", 1, json!({}))));
        assert_eq!(names(&c), ["b"]);
        // A relist without b (deleted while the watch was down) drops it.
        c.apply(Event::Init);
        assert_eq!(
            names(&c),
            ["b"],
            "the old view serves until the relist ends"
        );
        c.apply(Event::InitDone);
        assert!(names(&c).is_empty());
    }

    #[test]
    fn an_invalid_update_keeps_the_last_valid_version() {
        let mut c = PolicyCache::default();
        c.apply(Event::Init);
        c.apply(Event::InitDone);
        c.apply(Event::Apply(policy(
            "a",
            "1",
            1,
            json!({"requireResources": {}}),
        )));
        let bad = json!({"requireResources": {}, "images": {"allowedRegistries": [BAD]}});
        c.apply(Event::Apply(policy("a", "1", 2, bad.clone())));
        let kept = c.effective();
        assert_eq!(kept.len(), 1);
        assert!(kept[0].spec.images.is_none(), "generation 1 is enforced");
        let s = c.wanted_status("a").expect("status");
        assert_eq!(s.condition.status, "False");
        assert!(
            s.condition
                .message
                .starts_with("spec.images.allowedRegistries[0]: ")
                && s.condition
                    .message
                    .ends_with("the last valid version (generation 1) stays in effect"),
            "{}",
            s.condition.message
        );
        assert_eq!(s.effective.as_ref().and_then(|e| e.generation), Some(1));

        // A restarted cache finds the version in the status.
        let mut restarted = policy("a", "1", 2, bad.clone());
        restarted.status = Some(crate::policy::AdmissionPolicyStatus {
            effective: s.effective.clone(),
            ..Default::default()
        });
        let mut fresh = PolicyCache::default();
        fresh.apply(Event::Init);
        fresh.apply(Event::InitApply(restarted));
        fresh.apply(Event::InitDone);
        assert_eq!(names(&fresh), ["a"]);

        // A new object under the same name inherits nothing.
        c.apply(Event::Apply(policy("a", "other", 1, bad)));
        assert!(c.effective().is_empty());
    }
}

//! PriorityClass resolution, as kube-apiserver's Priority admission plugin
//! does it — done by the scheduler so it also works against servers that
//! leave `spec.priority` at 0: `priorityClassName` → the class's value and
//! preemption policy; no class name → the `globalDefault` class, if any.

use std::collections::HashMap;

use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::framework::PodInfo;

/// The built-in classes every cluster has.
pub const SYSTEM_CLASSES: &[(&str, i32)] = &[
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

#[derive(Debug, Clone)]
struct Class {
    value: i32,
    global_default: bool,
    never: bool,
}

/// Known PriorityClasses.
#[derive(Debug, Default, Clone)]
pub struct PriorityClasses {
    classes: HashMap<String, Class>,
}

impl PriorityClasses {
    /// Add or update a class.
    pub fn apply(&mut self, pc: &PriorityClass) {
        let Some(name) = pc.metadata.name.clone() else {
            return;
        };
        self.classes.insert(
            name,
            Class {
                value: pc.value,
                global_default: pc.global_default.unwrap_or(false),
                never: pc.preemption_policy.as_deref() == Some("Never"),
            },
        );
    }

    /// Remove a class.
    pub fn remove(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// Set the pod's priority and preemption eligibility from its class. An
    /// unknown class name leaves a parse error on the pod (kube-apiserver
    /// would have rejected the pod).
    pub fn resolve(&self, pod: &mut PodInfo) {
        let spec = pod.pod.spec.as_ref();
        let name = spec
            .and_then(|s| s.priority_class_name.as_deref())
            .unwrap_or("");
        if name.is_empty() {
            if let Some(c) = self
                .classes
                .values()
                .filter(|c| c.global_default)
                .max_by_key(|c| c.value)
            {
                pod.priority = c.value;
                pod.may_preempt &= !c.never;
            }
            return;
        }
        if let Some(c) = self.classes.get(name) {
            pod.priority = c.value;
            pod.may_preempt &= !c.never;
        } else if let Some((_, v)) = SYSTEM_CLASSES.iter().find(|(n, _)| *n == name) {
            pod.priority = *v;
        } else {
            let msg = format!("no PriorityClass with name {name} was found");
            pod.parse_error = Some(match pod.parse_error.take() {
                Some(e) => format!("{e}; {msg}"),
                None => msg,
            });
        }
    }
}

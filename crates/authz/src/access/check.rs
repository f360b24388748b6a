//! The checks an access-policy object must pass to be stored — every
//! field error of [`spec`](super::spec), and a role whose parents, with the
//! roles already stored, would lead back to it — shared by the embedded
//! server (a 422) and `kubeforge authz webhook`'s admission check on real
//! clusters (where the CRD schema cannot see cycles or time zones).

use kubeforge_apimachinery::names::Cause;
use serde_json::Value;

use super::spec::{BindingObject, RoleKind, RoleObject};

/// The causes refusing `obj`, an object of kind `kind`
/// (`AccessRole`, `ClusterAccessRole`, `AccessBinding`,
/// `ClusterAccessBinding`; others pass), given the roles now stored.
pub fn check(kind: &str, obj: &Value, roles: &[RoleObject]) -> Vec<Cause> {
    let namespaced = matches!(kind, "AccessRole" | "AccessBinding");
    let result = match kind {
        "AccessRole" | "ClusterAccessRole" => {
            RoleObject::from_value(obj, namespaced).map(|role| parent_cycle(&role, roles))
        }
        "AccessBinding" | "ClusterAccessBinding" => {
            BindingObject::from_value(obj, namespaced).map(|_| None)
        }
        _ => Ok(None),
    };
    match result {
        Ok(cycle) => cycle.into_iter().collect(),
        Err(causes) => causes,
    }
}

/// Why `role` cannot be stored beside `roles` (the stored ones; a stored
/// copy of `role` itself is read as `role`): its parents would lead back
/// to it — `spec.parents[i]: Invalid value: "p": would form a cycle: …`.
pub fn parent_cycle(role: &RoleObject, roles: &[RoleObject]) -> Option<Cause> {
    let key = |kind: RoleKind, ns: &str, name: &str| (kind, ns.to_string(), name.to_string());
    let me = key(role.kind, &role.namespace, &role.name);
    let parents_of = |k: &(RoleKind, String, String)| -> Vec<(RoleKind, String, String)> {
        let parents = if *k == me {
            &role.parents
        } else {
            match roles
                .iter()
                .find(|r| key(r.kind, &r.namespace, &r.name) == *k)
            {
                Some(r) => &r.parents,
                None => return Vec::new(),
            }
        };
        parents
            .iter()
            .filter(|p| matches!(p.kind, RoleKind::AccessRole | RoleKind::ClusterAccessRole))
            .map(|p| {
                let ns = if p.kind.namespaced() {
                    k.1.as_str()
                } else {
                    ""
                };
                key(p.kind, ns, &p.name)
            })
            .collect()
    };
    for (i, p) in role.parents.iter().enumerate() {
        let ns = if p.kind.namespaced() {
            role.namespace.as_str()
        } else {
            ""
        };
        let start = key(p.kind, ns, &p.name);
        // Depth first from the parent, remembering the path; reaching the
        // role itself is the cycle.
        let mut stack = vec![(start.clone(), vec![start])];
        let mut seen = std::collections::HashSet::new();
        while let Some((k, path)) = stack.pop() {
            if k == me {
                let mut names = vec![label(&me)];
                names.extend(path.iter().map(label));
                return Some(Cause::invalid(
                    &format!("spec.parents[{i}]"),
                    &p.name,
                    &format!("would form a cycle: {}", names.join(" → ")),
                ));
            }
            if !seen.insert(k.clone()) {
                continue;
            }
            for next in parents_of(&k) {
                let mut path = path.clone();
                path.push(next.clone());
                stack.push((next, path));
            }
        }
    }
    None
}

fn label((kind, ns, name): &(RoleKind, String, String)) -> String {
    let q = kubeforge_apimachinery::gofmt::quote;
    if ns.is_empty() {
        format!("{} {}", kind.as_str(), q(name))
    } else {
        format!("{} {}", kind.as_str(), q(&format!("{ns}/{name}")))
    }
}

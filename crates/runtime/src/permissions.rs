//! What a manager's controllers need the API server to let them do, as RBAC
//! rules derived from the code that needs them (so the role cannot drift
//! from the controllers).
//!
//! Every [`ControllerBuilder`](crate::ControllerBuilder) records its reads
//! as it is built — the primary kind, owned and watched kinds: `get`,
//! `list`, `watch` — and what it writes: owned kinds (`create`, `update`,
//! `patch`, `delete`, plus `update` on the primary kind's `finalizers`
//! subresource, which setting `blockOwnerDeletion` needs), and what the
//! author declares with `writes_status`, `uses_finalizer`,
//! `records_events` and `permits`. [`Manager::permissions`](crate::Manager::permissions)
//! merges them; [`Permissions::policy_rules`] renders them as kube's
//! `PolicyRule`s, one per API group and verb set, sorted, so the rendered
//! role is stable from run to run.
//!
//! Leader election needs Leases (and Events) in its own namespace only:
//! [`Manager::leader_election_permissions`](crate::Manager::leader_election_permissions)
//! gives them apart, for a namespaced Role as kubebuilder scaffolds it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

/// The verbs of reading and watching a kind.
pub const READ: &[&str] = &["get", "list", "watch"];
/// The verbs of writing a kind (besides reading it).
pub const WRITE: &[&str] = &["create", "update", "patch", "delete"];
/// The verbs of writing a status subresource.
pub const STATUS: &[&str] = &["get", "update", "patch"];

/// A set of allowed `(apiGroup, resource) → verbs`; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    rules: BTreeMap<(String, String), BTreeSet<String>>,
}

impl Permissions {
    /// No permissions.
    pub fn new() -> Permissions {
        Permissions::default()
    }

    /// Allow `verbs` on `resource` (a plural, or `plural/subresource`) of
    /// API group `group` (`""` for the core group).
    pub fn allow(&mut self, group: &str, resource: &str, verbs: &[&str]) -> &mut Self {
        let entry = self
            .rules
            .entry((group.to_string(), resource.to_string()))
            .or_default();
        entry.extend(verbs.iter().map(|v| v.to_string()));
        self
    }

    /// Allow `verbs` on kind `K` (its `subresource` when given).
    pub fn allow_kind<K: Resource<DynamicType = ()>>(
        &mut self,
        subresource: Option<&str>,
        verbs: &[&str],
    ) -> &mut Self {
        let plural = K::plural(&());
        let resource = match subresource {
            Some(sub) => format!("{plural}/{sub}"),
            None => plural.into_owned(),
        };
        self.allow(&K::group(&()), &resource, verbs)
    }

    /// Add everything `other` allows.
    pub fn merge(&mut self, other: &Permissions) -> &mut Self {
        for ((group, resource), verbs) in &other.rules {
            self.rules
                .entry((group.clone(), resource.clone()))
                .or_default()
                .extend(verbs.iter().cloned());
        }
        self
    }

    /// Whether `verb` on `group`/`resource` is allowed.
    pub fn allows(&self, group: &str, resource: &str, verb: &str) -> bool {
        self.rules
            .get(&(group.to_string(), resource.to_string()))
            .is_some_and(|v| v.contains(verb) || v.contains("*"))
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules: one per API group and verb set, resources and verbs
    /// sorted, groups in order.
    pub fn policy_rules(&self) -> Vec<PolicyRule> {
        let mut grouped: BTreeMap<(&str, Vec<&str>), Vec<&str>> = BTreeMap::new();
        for ((group, resource), verbs) in &self.rules {
            let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
            grouped
                .entry((group.as_str(), verbs))
                .or_default()
                .push(resource.as_str());
        }
        grouped
            .into_iter()
            .map(|((group, verbs), resources)| PolicyRule {
                api_groups: Some(vec![group.to_string()]),
                resources: Some(resources.into_iter().map(String::from).collect()),
                verbs: verbs.into_iter().map(String::from).collect(),
                ..PolicyRule::default()
            })
            .collect()
    }

    /// A ClusterRole `name` granting these permissions.
    pub fn cluster_role(&self, name: &str) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            rules: Some(self.policy_rules()),
            ..ClusterRole::default()
        }
    }

    /// A Role `namespace/name` granting these permissions.
    pub fn role(&self, name: &str, namespace: &str) -> Role {
        Role {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            rules: Some(self.policy_rules()),
        }
    }
}

/// What leader election on a Lease needs: the Leases, and Events about
/// them (client-go's resource lock records one on each change of leader).
pub fn leader_election() -> Permissions {
    let mut p = Permissions::new();
    p.allow("coordination.k8s.io", "leases", READ)
        .allow("coordination.k8s.io", "leases", WRITE)
        .allow("", "events", &["create", "patch"]);
    p
}

/// What an [`EventRecorder`](crate::events::EventRecorder) needs.
pub fn events() -> Permissions {
    let mut p = Permissions::new();
    p.allow("events.k8s.io", "events", &["create", "patch"]);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    #[test]
    fn rules_group_by_api_group_and_verbs_and_sort() {
        let mut p = Permissions::new();
        p.allow_kind::<Pod>(None, READ)
            .allow_kind::<ConfigMap>(None, READ)
            .allow_kind::<Deployment>(None, READ)
            .allow_kind::<Deployment>(None, WRITE)
            .allow_kind::<Deployment>(Some("status"), STATUS);
        let rules = p.policy_rules();
        let shown: Vec<(String, Vec<String>, Vec<String>)> = rules
            .iter()
            .map(|r| {
                (
                    r.api_groups.clone().unwrap_or_default().join(","),
                    r.resources.clone().unwrap_or_default(),
                    r.verbs.clone(),
                )
            })
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shown,
            vec![
                (
                    "".into(),
                    s(&["configmaps", "pods"]),
                    s(&["get", "list", "watch"])
                ),
                (
                    "apps".into(),
                    s(&["deployments"]),
                    s(&[
                        "create", "delete", "get", "list", "patch", "update", "watch"
                    ])
                ),
                (
                    "apps".into(),
                    s(&["deployments/status"]),
                    s(&["get", "patch", "update"])
                ),
            ]
        );
        assert!(p.allows("apps", "deployments", "delete"));
        assert!(!p.allows("", "pods", "delete"));
    }

    #[test]
    fn merge_unions_verbs() {
        let mut a = Permissions::new();
        a.allow("", "pods", &["get"]);
        let mut b = Permissions::new();
        b.allow("", "pods", &["list"])
            .allow("", "secrets", &["get"]);
        a.merge(&b);
        assert!(a.allows("", "pods", "get") && a.allows("", "pods", "list"));
        assert!(a.allows("", "secrets", "get"));
    }
}

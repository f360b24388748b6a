//! The ClusterRole aggregation controller (kube-controller-manager's
//! `clusterrole-aggregation`): a ClusterRole with an `aggregationRule` gets
//! as its `rules` every rule of the ClusterRoles its selectors match — for
//! each selector in order, the matching roles sorted by name, itself left
//! out, a rule already present (equal) not repeated. Any ClusterRole change
//! looks at every aggregating role again, since a label or rule anywhere
//! may change what one gathers. This is what makes the bootstrap `admin`,
//! `edit` and `view` roles (and CRD authors' `aggregate-to-*` roles) work.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, PostParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::ObjectRef;
use kubeforge_runtime::{Action, Cache, Manager, ReconcileError};

struct Ctx {
    api: Api<ClusterRole>,
    roles: Cache<ClusterRole>,
}

/// The rules `role`'s aggregation rule gathers from `all`, or `None` when
/// it has none (kube's `syncClusterRole`).
pub fn aggregate(role: &ClusterRole, all: &[Arc<ClusterRole>]) -> Option<Vec<PolicyRule>> {
    let rule = role.aggregation_rule.as_ref()?;
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in rule.cluster_role_selectors.iter().flatten() {
        // A selector that does not parse selects nothing (kube logs and
        // skips the role).
        let Ok(sel) = Selector::try_from(selector.clone()) else {
            continue;
        };
        let mut matched: Vec<&ClusterRole> = all
            .iter()
            .map(|r| &**r)
            .filter(|r| r.metadata.name != role.metadata.name)
            .filter(|r| sel.matches(r.metadata.labels.as_ref().unwrap_or(&Default::default())))
            .collect();
        matched.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for r in matched {
            for rule in r.rules.iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(rules)
}

async fn reconcile(role: Arc<ClusterRole>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let all = ctx.roles.state();
    let Some(rules) = aggregate(&role, &all) else {
        return Ok(Action::await_change());
    };
    if role.rules.clone().unwrap_or_default() == rules {
        return Ok(Action::await_change());
    }
    let mut updated = (*role).clone();
    updated.rules = Some(rules);
    let name = role.metadata.name.clone().unwrap_or_default();
    match ctx
        .api
        .replace(&name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        // Changed meanwhile (the new version comes back as work) or gone.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(ReconcileError::new(e)),
    }
}

/// Register the controller with `mgr` (whose caches it reads), writing
/// through `client`.
pub fn register(mgr: &Manager, client: kube::Client) {
    let roles = mgr.store::<ClusterRole>();
    let ctx = Ctx {
        api: Api::all(client),
        roles: roles.clone(),
    };
    mgr.controller::<ClusterRole, _>("clusterrole-aggregation", ctx)
        .watches::<ClusterRole, _>(move |_changed| {
            roles
                .state()
                .iter()
                .filter(|r| r.aggregation_rule.is_some())
                .map(|r| ObjectRef::from_obj(&**r))
                .collect::<Vec<_>>()
        })
        .register(reconcile);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn role(v: serde_json::Value) -> Arc<ClusterRole> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn rules_gather_by_selector_then_name_without_repeats_or_self() {
        let pods = serde_json::json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let jobs =
            serde_json::json!({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]});
        let all = vec![
            role(
                serde_json::json!({"metadata": {"name": "agg", "labels": {"x": "1"}},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "1"}}, {"matchLabels": {"y": "1"}}]},
                "rules": [pods.clone()]}),
            ),
            role(
                serde_json::json!({"metadata": {"name": "b", "labels": {"x": "1"}}, "rules": [jobs.clone(), pods.clone()]}),
            ),
            role(
                serde_json::json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "1"}}, "rules": [pods.clone()]}),
            ),
            role(serde_json::json!({"metadata": {"name": "c"}, "rules": [jobs.clone()]})),
        ];
        let rules = aggregate(&all[0], &all).unwrap();
        let want: Vec<PolicyRule> = vec![
            serde_json::from_value(pods).unwrap(),
            serde_json::from_value(jobs).unwrap(),
        ];
        assert_eq!(rules, want);
        assert!(aggregate(&all[1], &all).is_none());
    }
}

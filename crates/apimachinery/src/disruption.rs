//! PodDisruptionBudget status rules shared by the API server's
//! `pods/eviction` subresource and the disruption controller, as
//! `k8s.io/component-helpers/apps/poddisruptionbudget` and
//! `k8s.io/apimachinery/pkg/api/meta` state them: the `DisruptionAllowed`
//! condition and `metav1.Condition` bookkeeping.
//!
//! ```
//! use kubeforge_apimachinery::disruption::{conditions_up_to_date, update_disruption_allowed};
//! use serde_json::json;
//!
//! let mut pdb = json!({"metadata": {"generation": 1},
//!     "status": {"observedGeneration": 1, "disruptionsAllowed": 1}});
//! update_disruption_allowed(&mut pdb["status"], "2026-12-01T00:00:00Z");
//! assert_eq!(pdb["status"]["conditions"][0]["reason"], "SufficientPods");
//! assert!(conditions_up_to_date(&pdb));
//! ```

use serde_json::{Value, json};

/// The condition type (`policy.DisruptionAllowedCondition`).
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// Reason when disruptions are allowed.
pub const SUFFICIENT_PODS: &str = "SufficientPods";
/// Reason when none are.
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
/// Reason when the controller could not compute the status.
pub const SYNC_FAILED: &str = "SyncFailed";

/// Set `cond` (a `metav1.Condition` with `type`, `status`, `reason`,
/// `message`, `observedGeneration`) in the list at `status.conditions`,
/// as `meta.SetStatusCondition` does: `lastTransitionTime` becomes `now`
/// when the condition is new or its status changes, else it is kept; the
/// other fields are replaced. (The typed form for controllers is
/// `kubeforge_runtime::conditions`; this one works on the JSON the API
/// server holds.)
fn set_status_condition(status: &mut Value, mut cond: Value, now: &str) {
    if !status.is_object() {
        *status = json!({});
    }
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let Some(list) = status["conditions"].as_array_mut() else {
        return;
    };
    let kind = cond.get("type").cloned();
    match list.iter_mut().find(|c| c.get("type") == kind.as_ref()) {
        Some(existing) => {
            let transition = if existing.get("status") == cond.get("status") {
                existing
                    .get("lastTransitionTime")
                    .cloned()
                    .unwrap_or_else(|| json!(now))
            } else {
                json!(now)
            };
            cond["lastTransitionTime"] = transition;
            *existing = cond;
        }
        None => {
            cond["lastTransitionTime"] = json!(now);
            list.push(cond);
        }
    }
}

/// The condition a PodDisruptionBudget status should carry
/// (`UpdateDisruptionAllowedCondition`): True/SufficientPods while
/// `disruptionsAllowed > 0`, else False/InsufficientPods, observed at the
/// status's `observedGeneration`.
pub fn update_disruption_allowed(status: &mut Value, now: &str) {
    let allowed = status
        .get("disruptionsAllowed")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let observed = status
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let (st, reason) = if allowed > 0 {
        ("True", SUFFICIENT_PODS)
    } else {
        ("False", INSUFFICIENT_PODS)
    };
    set_status_condition(
        status,
        json!({"type": DISRUPTION_ALLOWED, "status": st, "observedGeneration": observed,
               "reason": reason, "message": ""}),
        now,
    );
}

/// The status after a sync that could not count (the controller's
/// `failSafe`): no disruptions allowed, and the condition False/SyncFailed
/// with `why`, observed at the status's current `observedGeneration`.
pub fn sync_failed(status: &mut Value, why: &str, now: &str) {
    if !status.is_object() {
        *status = json!({});
    }
    status["disruptionsAllowed"] = json!(0);
    let observed = status
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    set_status_condition(
        status,
        json!({"type": DISRUPTION_ALLOWED, "status": "False", "observedGeneration": observed,
               "reason": SYNC_FAILED, "message": why}),
        now,
    );
}

/// Whether the PodDisruptionBudget's condition agrees with its status and
/// generation (`ConditionsAreUpToDate`).
pub fn conditions_up_to_date(pdb: &Value) -> bool {
    let status = pdb.get("status").unwrap_or(&Value::Null);
    let Some(cond) = status
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|l| l.iter().find(|c| c["type"] == DISRUPTION_ALLOWED))
    else {
        return false;
    };
    let generation = pdb
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if status
        .get("observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        != generation
    {
        return false;
    }
    let allowed = status
        .get("disruptionsAllowed")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if allowed > 0 {
        cond["status"] == "True" && cond["reason"] == SUFFICIENT_PODS
    } else {
        cond["status"] == "False" && cond["reason"] == INSUFFICIENT_PODS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut st = json!({"disruptionsAllowed": 1, "observedGeneration": 2});
        update_disruption_allowed(&mut st, "t1");
        assert_eq!(st["conditions"][0]["lastTransitionTime"], "t1");
        assert_eq!(st["conditions"][0]["observedGeneration"], 2);
        update_disruption_allowed(&mut st, "t2");
        assert_eq!(st["conditions"][0]["lastTransitionTime"], "t1");
        st["disruptionsAllowed"] = json!(0);
        update_disruption_allowed(&mut st, "t3");
        assert_eq!(st["conditions"][0]["status"], "False");
        assert_eq!(st["conditions"][0]["reason"], INSUFFICIENT_PODS);
        assert_eq!(st["conditions"][0]["lastTransitionTime"], "t3");
        assert_eq!(st["conditions"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn a_failed_sync_allows_nothing() {
        let mut st = json!({"disruptionsAllowed": 2, "observedGeneration": 4});
        update_disruption_allowed(&mut st, "t1");
        sync_failed(&mut st, "found no controllers for pod \"p\"", "t2");
        assert_eq!(st["disruptionsAllowed"], 0);
        let c = &st["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some(SYNC_FAILED))
        );
        assert_eq!(c["lastTransitionTime"], "t2");
        assert_eq!(c["observedGeneration"], 4);
    }

    #[test]
    fn stale_generation_or_wrong_reason_is_not_up_to_date() {
        let mut pdb = json!({"metadata": {"generation": 3},
            "status": {"observedGeneration": 2, "disruptionsAllowed": 0}});
        update_disruption_allowed(&mut pdb["status"], "t");
        assert!(!conditions_up_to_date(&pdb));
        pdb["status"]["observedGeneration"] = json!(3);
        assert!(conditions_up_to_date(&pdb));
        pdb["status"]["disruptionsAllowed"] = json!(2);
        assert!(!conditions_up_to_date(&pdb));
        assert!(!conditions_up_to_date(&json!({"metadata": {}})));
    }
}
